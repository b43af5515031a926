//! The vllm-rbln pack's figures that come from the vLLM release the plugin
//! builds on. vllm-rbln 0.12.0's wheel on PyPI requires `vllm==0.30.0+cpu`
//! (`Requires-Dist` in `vllm_rbln-0.12.0.dist-info/METADATA`), and nothing
//! in `vllm_rbln/` replaces vLLM's engine-core client or its `--moe-backend`
//! argument, so both are vLLM 0.30.0's (read from the 0.30.0 wheel).

use pdsim_spec::rules::pack::{self, DpLbScore};

fn the_pack() -> &'static pack::RulesPack {
    pack::for_version("vllm-rbln-0.12.0").expect("a pack covers vllm-rbln 0.12.0")
}

/// vLLM 0.30.0's `DPLBAsyncMPClient.get_core_engine_for_request`
/// (`vllm/v1/engine/core_client.py`) scores an engine
/// `max(client_count * inflight, waiting + running)` plus a KV-pressure
/// penalty on waiting requests, as 0.29.0 and 0.31.0 do; `waiting * 4 +
/// running` is 0.10.2's and 0.15.1's.
#[test]
fn internal_data_parallel_balancing_is_vllm_0_30_0s() {
    assert_eq!(
        the_pack().defaults.dp_lb_score,
        DpLbScore::InflightAndKvPressure
    );
}

/// vLLM 0.30.0's `MoEBackend` (`vllm/config/kernel.py`) is a closed
/// Literal argparse enforces, the same 22 names as 0.31.0's: an error, not
/// a warning, outside it.
#[test]
fn moe_backend_is_vllm_0_30_0s_closed_set() {
    let rbln = the_pack();
    assert!(!rbln.soft_enums.contains_key("moe_backend"));
    let names = rbln.enums.get("moe_backend").expect("a hard set");
    assert_eq!(names.len(), 22, "{names:?}");
    let v031 = pack::for_version("0.31.0").expect("a pack covers 0.31.0");
    assert_eq!(Some(names), v031.enums.get("moe_backend"));
    assert!(
        rbln.unsupported_keys.is_empty(),
        "{:?}",
        rbln.unsupported_keys
    );
}

/// vLLM 0.30.0's NIXL scheduler leases a finished prefill's blocks for
/// `kv_lease_duration` (30 s by default) and the decode side renews the
/// lease by heartbeats (`nixl/base_scheduler.py`); vllm-rbln's NIXL
/// scheduler subclasses it unchanged. A fixed 480 s timeout nothing renews
/// (`VLLM_NIXL_ABORT_REQUEST_TIMEOUT`) is the older releases'.
#[test]
fn the_prefill_lease_is_vllm_0_30_0s() {
    let defaults = &the_pack().defaults;
    assert_eq!(defaults.kv_lease_duration_s, 30);
    assert!(defaults.kv_lease_heartbeats);
}

/// vllm-rbln 0.12.0's own scheduler admits a waiting request only when the
/// whole sequence fits (`full_sequence_must_fit=True` in
/// `vllm_rbln/v1/core/rbln_scheduler.py`), and vLLM 0.30.0's block pool,
/// which it keeps, reuses freed blocks without a hash first
/// (`BlockPool.free_blocks`).
#[test]
fn admission_and_the_free_queue_follow_the_0_12_0_scheduler_and_0_30_0_pool() {
    let features = &the_pack().features;
    assert!(features.reserve_full_prompt);
    assert!(features.unhashed_blocks_to_front);
    // No waiver of long_prefill_token_threshold for a request alone: the
    // plugin's scheduler caps every chunk by it.
    assert!(!features.long_prefill_waiver_when_alone);
}

/// vllm-rbln 0.12.0's own scheduler keeps a step all decodes or one
/// prefill alone (`RBLNScheduler.schedule`,
/// `vllm_rbln/v1/core/rbln_scheduler.py`: "a step is never mixed -- all
/// decodes, or a lone prefill"); vLLM's scheduler, which every other pack
/// follows, mixes them.
#[test]
fn a_step_is_all_decodes_or_one_prefill_alone() {
    rbln_only(|f| f.lone_prefill_steps);
}

/// `feature` holds in vllm-rbln's pack and in no vLLM release's.
fn rbln_only(feature: fn(&pack::Features) -> bool) {
    assert!(feature(&the_pack().features));
    for version in ["0.15.1", "0.29.0", "0.31.0"] {
        let vllm = pack::for_version(version).expect("a pack covers the release");
        assert!(!feature(&vllm.features), "{version}");
    }
}

/// vllm-rbln 0.12.0's scheduler passes `delay_cache_blocks=True` to both of
/// its `allocate_slots` calls and caches the scheduled requests' blocks once
/// the schedule is final (`vllm_rbln/v1/core/rbln_scheduler.py`); vLLM's
/// `allocate_slots` caches as it allocates.
#[test]
fn blocks_are_cached_once_the_schedule_is_final() {
    rbln_only(|f| f.delay_cache_blocks);
}

/// vllm-rbln 0.12.0's waiting loop passes no `reserved_blocks` and drops an
/// async load's lookahead slots only for EAGLE (`limit_lookahead_tokens =
/// load_kv_async and self.use_eagle`); it has no `pad_spec_decode`.
#[test]
fn an_async_load_keeps_no_reserve_and_drops_only_eagles_lookahead() {
    let features = &the_pack().features;
    assert_eq!(
        features.async_load_reserve,
        pack::AsyncLoadReserve::EagleLoadWithoutLookahead
    );
    assert_eq!(features.pad_spec_decode, pack::PadSpecDecode::Never);
}
