//! CUDA-graph dispatch and dual-batch overlap decisions for one step.
//!
//! Mirrors `vllm/v1/cudagraph_dispatcher.py` (which graph a batch replays and
//! the padding to the next captured size) and `vllm/v1/worker/ubatch_utils.py`
//! (when a batch is split into two microbatches).

use pdsim_cost::GraphMode;

/// The capture strategy, `cudagraph_mode` (`CUDAGraphMode` in
/// `vllm/config/compilation.py`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CudaGraphMode {
    None,
    Piecewise,
    Full,
    FullDecodeOnly,
    FullAndPiecewise,
}

impl CudaGraphMode {
    pub fn parse(name: &str) -> CudaGraphMode {
        match name {
            "PIECEWISE" => CudaGraphMode::Piecewise,
            "FULL" => CudaGraphMode::Full,
            "FULL_DECODE_ONLY" => CudaGraphMode::FullDecodeOnly,
            "FULL_AND_PIECEWISE" => CudaGraphMode::FullAndPiecewise,
            _ => CudaGraphMode::None,
        }
    }
}

/// Graph settings of one engine.
#[derive(Clone, Debug)]
pub struct Graphs {
    pub mode: CudaGraphMode,
    /// Captured sizes in tokens, ascending; empty when nothing is captured.
    pub sizes: Vec<u32>,
}

impl Graphs {
    /// The graph a batch of `tokens` runs and the token count it is padded
    /// to. A uniform-decode batch (every request decoding the same number of
    /// tokens) may use a full graph; any prefill makes it mixed.
    pub fn dispatch(&self, tokens: u32, uniform_decode: bool) -> (GraphMode, u32) {
        let Some(&largest) = self.sizes.last() else {
            return (GraphMode::Eager, tokens);
        };
        if tokens == 0 || tokens > largest {
            return (GraphMode::Eager, tokens);
        }
        let padded = self.sizes[self.sizes.partition_point(|s| *s < tokens)];
        let graph = match (self.mode, uniform_decode) {
            (CudaGraphMode::None, _) => return (GraphMode::Eager, tokens),
            (CudaGraphMode::Full, _) => GraphMode::Full,
            (CudaGraphMode::Piecewise, _) => GraphMode::Piecewise,
            (CudaGraphMode::FullDecodeOnly, true) | (CudaGraphMode::FullAndPiecewise, true) => {
                GraphMode::Full
            }
            (CudaGraphMode::FullDecodeOnly, false) => return (GraphMode::Eager, tokens),
            (CudaGraphMode::FullAndPiecewise, false) => GraphMode::Piecewise,
        };
        (graph, padded)
    }
}

/// Dual-batch overlap settings.
#[derive(Clone, Copy, Debug)]
pub struct Dbo {
    pub enabled: bool,
    pub decode_threshold: u32,
    pub prefill_threshold: u32,
}

impl Dbo {
    /// Whether this rank attempts to split a batch into two microbatches
    /// (`check_enable_ubatch` in `vllm/v1/worker/ubatch_utils.py`): the
    /// *unpadded* token count against the decode threshold for a uniform
    /// decode and the prefill threshold otherwise
    /// (`check_ubatch_thresholds`), and never when the CUDA-graph padding
    /// alone would fill the second microbatch (`is_last_ubatch_empty`:
    /// `padded / 2 >= unpadded`). Data-parallel ranks then split only if all
    /// of them attempt it; the event loop applies that agreement.
    pub fn splits(&self, tokens: u32, padded_tokens: u32, uniform_decode: bool) -> bool {
        if !self.enabled || padded_tokens < 2 || padded_tokens / 2 >= tokens {
            return false;
        }
        let threshold = if uniform_decode {
            self.decode_threshold
        } else {
            self.prefill_threshold
        };
        tokens >= threshold
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn graph_modes_parse_by_vllm_name() {
        use super::CudaGraphMode;
        for (name, mode) in [
            ("PIECEWISE", CudaGraphMode::Piecewise),
            ("FULL", CudaGraphMode::Full),
            ("FULL_DECODE_ONLY", CudaGraphMode::FullDecodeOnly),
            ("FULL_AND_PIECEWISE", CudaGraphMode::FullAndPiecewise),
            ("NONE", CudaGraphMode::None),
        ] {
            assert_eq!(CudaGraphMode::parse(name), mode, "{name}");
        }
    }

    #[test]
    fn dbo_splits_from_two_padded_tokens() {
        use super::Dbo;
        let dbo = Dbo {
            enabled: true,
            decode_threshold: 1,
            prefill_threshold: 1,
        };
        // Two tokens padded to two: each microbatch gets one.
        assert!(dbo.splits(2, 2, true));
        // One padded token cannot be split.
        assert!(!dbo.splits(1, 1, true));
    }

    use super::{CudaGraphMode, Dbo, Graphs};
    use pdsim_cost::GraphMode;

    fn sizes() -> Vec<u32> {
        pdsim_spec::resolve::generated_capture_sizes(512)
            .into_iter()
            .map(|s| s as u32)
            .collect()
    }

    #[test]
    fn batches_pad_to_the_next_captured_size_or_run_eager() {
        let graphs = Graphs {
            mode: CudaGraphMode::FullAndPiecewise,
            sizes: sizes(),
        };
        assert_eq!(graphs.sizes.len(), 51, "H100 defaults capture 51 sizes");
        assert_eq!(graphs.dispatch(1, true), (GraphMode::Full, 1));
        assert_eq!(graphs.dispatch(3, true), (GraphMode::Full, 4));
        assert_eq!(graphs.dispatch(9, true), (GraphMode::Full, 16));
        assert_eq!(graphs.dispatch(250, true), (GraphMode::Full, 256));
        assert_eq!(graphs.dispatch(257, false), (GraphMode::Piecewise, 272));
        assert_eq!(graphs.dispatch(512, false), (GraphMode::Piecewise, 512));
        assert_eq!(graphs.dispatch(513, true), (GraphMode::Eager, 513));
        let decode_only = Graphs {
            mode: CudaGraphMode::FullDecodeOnly,
            sizes: sizes(),
        };
        assert_eq!(decode_only.dispatch(100, false), (GraphMode::Eager, 100));
        assert_eq!(decode_only.dispatch(100, true), (GraphMode::Full, 104));
        let none = Graphs {
            mode: CudaGraphMode::None,
            sizes: vec![],
        };
        assert_eq!(none.dispatch(7, true), (GraphMode::Eager, 7));
    }

    #[test]
    fn dbo_splits_at_its_thresholds() {
        let dbo = Dbo {
            enabled: true,
            decode_threshold: 32,
            prefill_threshold: 512,
        };
        assert!(
            !dbo.splits(31, 32, true),
            "the threshold is on unpadded tokens"
        );
        assert!(dbo.splits(32, 32, true));
        assert!(!dbo.splits(511, 512, false));
        assert!(dbo.splits(512, 512, false));
        // Padding alone would fill the second microbatch.
        assert!(!dbo.splits(600, 1200, false));
        let off = Dbo {
            enabled: false,
            ..dbo
        };
        assert!(!off.splits(4096, 4096, false));
    }
}
