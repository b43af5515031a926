//! Collective latency curves.
//!
//! The BLIS registry prices a collective of `size` bytes as
//! `max(floor + size / transition_rate, size / peak_rate)`
//! (`research/blis-documents.md` §7, set cost-model-collectives): the floor
//! is a small message's latency, the transition rate governs the 64 KiB to
//! 8 MiB region where one forward pass's collectives land, and the peak rate
//! bounds large messages. An inter-node collective is the same form with
//! both rates equal to the fabric's effective rate over the bytes that cross
//! the NIC (a latency-bandwidth model), so every collective in a step is one
//! [`Curve`] chosen when the cost model is built.

/// How one collective's latency grows with its message size.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Curve {
    pub floor_ns: f64,
    pub transition_bytes_per_ns: f64,
    pub peak_bytes_per_ns: f64,
}

impl Curve {
    /// A latency-bandwidth curve: `floor + size / rate`.
    pub fn linear(floor_ns: f64, bytes_per_ns: f64) -> Curve {
        Curve {
            floor_ns,
            transition_bytes_per_ns: bytes_per_ns,
            peak_bytes_per_ns: bytes_per_ns,
        }
    }

    /// The latency of a collective over `bytes` (the per-rank buffer: the
    /// tensor for an all-reduce, the gathered output for an all-gather, the
    /// input for a reduce-scatter, the send buffer for an all-to-all).
    /// Nothing to move costs nothing.
    #[inline]
    pub fn time_ns(&self, bytes: f64) -> f64 {
        if bytes <= 0.0 {
            return 0.0;
        }
        (self.floor_ns + bytes / self.transition_bytes_per_ns).max(bytes / self.peak_bytes_per_ns)
    }
}

/// A collective operation, spelled as in the registry's coefficient names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    AllReduce,
    AllGather,
    ReduceScatter,
    AllToAll,
}

impl Op {
    pub fn name(self) -> &'static str {
        match self {
            Op::AllReduce => "all_reduce",
            Op::AllGather => "all_gather",
            Op::ReduceScatter => "reduce_scatter",
            Op::AllToAll => "alltoall",
        }
    }

    /// Bytes each rank puts on the fabric per byte of its buffer when `ranks`
    /// ranks span nodes of `gpus_per_node`: a ring all-reduce sends
    /// 2(n−1)/n, a ring all-gather or reduce-scatter (n−1)/n, and an
    /// all-to-all sends off-node the share of its buffer addressed to the
    /// other nodes' ranks, (n − g)/n.
    pub fn wire_factor(self, ranks: f64, gpus_per_node: f64) -> f64 {
        let n = ranks.max(1.0);
        match self {
            Op::AllReduce => 2.0 * (n - 1.0) / n,
            Op::AllGather | Op::ReduceScatter => (n - 1.0) / n,
            Op::AllToAll => ((n - gpus_per_node) / n).max(1.0 / n),
        }
    }
}

/// The registry's measured rank widths: a group of `ranks` is priced at the
/// smallest measured width that holds it, 8 for anything wider.
pub fn width_bucket(ranks: u64) -> u64 {
    match ranks {
        0..=2 => 2,
        3..=4 => 4,
        _ => 8,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_registry_form_takes_the_slower_of_its_two_regimes() {
        let c = Curve {
            floor_ns: 10_000.0,
            transition_bytes_per_ns: 100.0,
            peak_bytes_per_ns: 150.0,
        };
        assert_eq!(c.time_ns(0.0), 0.0);
        // Small: the floor dominates.
        assert!((c.time_ns(1000.0) - 10_010.0).abs() < 1e-9);
        // Huge: the peak rate bounds it from below, the floor term above.
        let big = 1e12;
        assert!((c.time_ns(big) - (10_000.0 + big / 100.0)).abs() < 1.0);
        assert_eq!(width_bucket(1), 2);
        assert_eq!(width_bucket(3), 4);
        assert_eq!(width_bucket(6), 8);
        assert_eq!(width_bucket(16), 8);
    }

    #[test]
    fn wire_factors_follow_the_ring_and_the_node_split() {
        assert!((Op::AllReduce.wire_factor(16.0, 8.0) - 1.875).abs() < 1e-12);
        assert!((Op::AllGather.wire_factor(16.0, 8.0) - 0.9375).abs() < 1e-12);
        assert!((Op::AllToAll.wire_factor(16.0, 8.0) - 0.5).abs() < 1e-12);
    }
}
