//! `flowcontrol/ordering/`: which request of a flow's queue is served next
//! (an `OrderingPolicy`), by a key where smaller is served first (its
//! `Less`).

/// The configured ordering policy.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ordering {
    /// `fcfs-ordering-policy` (`ordering/fcfs/fcfs.go`): earliest enqueue
    /// time first.
    Fcfs,
    /// `edf-ordering-policy` (`ordering/edf/edf.go`): earliest deadline
    /// `enqueue + EffectiveTTL` first (no TTL: the far future), ties by
    /// enqueue time. Every request gets the same TTL (the admission adapter
    /// plumbs no per-request TTL: `InitialEffectiveTTL` returns 0, so the
    /// controller's `DefaultRequestTTL` applies), so deadlines are ordered
    /// exactly as enqueue times and EDF serves FCFS order.
    Edf,
    /// `slo-deadline-ordering-policy` (`ordering/slodeadline/
    /// slo_deadline.go`): deadline = received time + the TTFT SLO header;
    /// without the header (pdsim's requests carry none) every deadline is
    /// the far future and ties go by received time, i.e. FCFS order.
    SloDeadline,
}

impl Ordering {
    /// The key of a request enqueued at `enqueued_ns`, `seq`-th in arrival
    /// order (breaking enqueue-time ties), under the request TTL `ttl_ns`
    /// (every item has the configured one; 0: none).
    pub(crate) fn key(self, enqueued_ns: u64, seq: u64, ttl_ns: u64) -> (u64, u64, u64) {
        match self {
            Ordering::Fcfs => (enqueued_ns, seq, 0),
            Ordering::Edf => {
                let deadline = if ttl_ns == 0 {
                    u64::MAX
                } else {
                    enqueued_ns.saturating_add(ttl_ns)
                };
                (deadline, enqueued_ns, seq)
            }
            Ordering::SloDeadline => (u64::MAX, enqueued_ns, seq),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Ordering;

    #[test]
    fn edf_orders_by_deadline_and_without_a_ttl_by_enqueue_time() {
        // A TTL of 0 is none: every deadline is the far future.
        assert_eq!(Ordering::Edf.key(5, 2, 0), (u64::MAX, 5, 2));
        assert_eq!(Ordering::Edf.key(5, 2, 10), (15, 5, 2));
        assert_eq!(Ordering::Fcfs.key(5, 2, 10), (5, 2, 0));
        assert_eq!(Ordering::SloDeadline.key(5, 2, 10), (u64::MAX, 5, 2));
    }
}
