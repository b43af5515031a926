//! The CUDA-graph capture sizes each release generates when none are stated,
//! worked out by hand from `_set_cudagraph_sizes` (`vllm/config/vllm.py` of
//! 0.15.1, 0.29.0 and 0.31.0) for shapes where the releases differ.

use pdsim_spec::resolve::{default_capture_sizes, generated_capture_sizes};
use pdsim_spec::rules::pack::CaptureSizeExtras::{
    MaxTokensAndUniformDecode, MaxTokensUniformDecodeAndMaxSeqs, None as GridOnly,
};

fn with(extra: &[u64], grid_max: u64) -> Vec<u64> {
    let mut sizes = generated_capture_sizes(grid_max);
    sizes.extend_from_slice(extra);
    sizes.sort_unstable();
    sizes.dedup();
    sizes
}

#[test]
fn uniform_decode_sizes_are_added_with_drafts_from_0_29_0_on() {
    // max_num_seqs 100, 2 drafts: the ceiling is min(100 · 3 · 2, 512).
    // The request counts 1, 2, 4, 8..96 by 8 and 100, times 3, add what the
    // grid lacks: 3, 6, 12, 264 (88 · 3) and 300 (100 · 3).
    let expected = with(&[3, 6, 12, 264, 300], 512);
    for extras in [MaxTokensAndUniformDecode, MaxTokensUniformDecodeAndMaxSeqs] {
        assert_eq!(
            default_capture_sizes(extras, 100, 2, 8192, 512, None),
            expected
        );
    }
    // 0.15.1 captures the grid alone.
    assert_eq!(
        default_capture_sizes(GridOnly, 100, 2, 8192, 512, None),
        generated_capture_sizes(512)
    );
}

#[test]
fn an_off_stride_budget_is_captured_when_within_the_ceiling() {
    // max_num_seqs 256 without drafts: the ceiling is 512 and the 300-token
    // budget caps it; 300 is off the 16-stride, and is added.
    assert_eq!(
        default_capture_sizes(MaxTokensAndUniformDecode, 256, 0, 300, 512, None),
        with(&[300], 300)
    );
    assert_eq!(
        default_capture_sizes(GridOnly, 256, 0, 300, 512, None),
        generated_capture_sizes(300)
    );
}

#[test]
fn only_0_31_0_adds_max_num_seqs_without_drafts() {
    // max_num_seqs 100: 100 is off the 8-stride grid below 256.
    assert_eq!(
        default_capture_sizes(MaxTokensUniformDecodeAndMaxSeqs, 100, 0, 8192, 512, None),
        with(&[100], 200)
    );
    assert_eq!(
        default_capture_sizes(MaxTokensAndUniformDecode, 100, 0, 8192, 512, None),
        generated_capture_sizes(200)
    );
}

#[test]
fn a_stated_ceiling_keeps_the_grid_and_the_budget_only() {
    // With max_cudagraph_capture_size stated, no uniform decode sizes.
    assert_eq!(
        default_capture_sizes(
            MaxTokensUniformDecodeAndMaxSeqs,
            100,
            2,
            200,
            512,
            Some(256)
        ),
        with(&[200], 200)
    );
}
