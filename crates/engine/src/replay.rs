//! `replay`: drive one engine step by step through a workload of token-id
//! prompts and give one canonical JSON line per step, in the format
//! `tools/vllm-oracle/oracle.py` prints for vLLM's own scheduler
//! (`tools/vllm-oracle/README.md`), so the two can be diffed byte for byte.
//! `pdsim engine replay` prints it; `tests/oracle.rs` compares it with the
//! golden traces, so the engine's own tests hold it to vLLM's decisions.
//!
//! It maps token ids to pdsim's content-addressed segments (one
//! single-token segment per token, so equal token prefixes give equal block
//! hashes at any block size), resolves the release's rules pack, forces each
//! verification's accepted drafts from the workload
//! (`Engine::complete_step_forced`), and reads each step's decisions back
//! from the engine's events and accessors. No I/O: texts in, lines out.

use crate::{
    CudaGraphMode, Dbo, Engine, EngineConfig, EngineEvent, Graphs, KvTransfer, NewRequest, Policy,
    SpecConfig,
};
use pdsim_core::prompt::content_id;
use pdsim_core::{Prompt, RequestId, Segment, SimTime};
use serde_json::{Map, Value};
use std::collections::BTreeMap;

/// The same cap as the oracle's: a run that has not drained by then is a
/// livelock (a request that can never fit), reported instead of hanging.
const MAX_STEPS: u64 = 100_000;

/// Salt of the content ids standing for prompt token ids.
const TOKEN_SALT: u64 = 0x746f_6b65_6e5f_6964;

/// Why a replay stopped.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ReplayError {
    /// The config or workload is not one the replay can run.
    Input(String),
    /// The line sink refused a line.
    Output(String),
    /// An engine invariant broke, or the run did not drain.
    Invariant(String),
    /// The run did not drain because the engine spins: it preempts without
    /// ever delivering a token ([`Engine::preemptions_since_output`]), as
    /// vLLM's scheduler can (0.29.0's golden `spin` cases).
    Spin(String),
}

/// The engine config document.
#[derive(serde::Deserialize, Debug)]
#[serde(deny_unknown_fields)]
struct ReplayConfig {
    release: String,
    block_size: u32,
    num_gpu_blocks: u32,
    max_num_seqs: u32,
    max_num_batched_tokens: u32,
    max_model_len: u32,
    long_prefill_token_threshold: u32,
    enable_prefix_caching: bool,
    scheduling_policy: String,
    async_scheduling: bool,
    #[serde(default)]
    speculative: Option<Speculative>,
    /// vLLM's `enable_chunked_prefill`, true when absent.
    #[serde(default)]
    enable_chunked_prefill: Option<bool>,
    /// A hybrid model's Mamba groups (see [`crate::mamba`]).
    #[serde(default)]
    mamba: Option<Mamba>,
    /// DeepSeek-V4.1's window groups and ring (see [`crate::window`]).
    #[serde(default)]
    sparse: Option<Sparse>,
    /// Stop after this many steps, as the oracle does: a case on which
    /// vLLM's scheduler spins for ever is compared over its first steps.
    /// At most, and by default, [`MAX_STEPS`].
    #[serde(default)]
    max_steps: Option<u64>,
}

#[derive(serde::Deserialize, Debug)]
#[serde(deny_unknown_fields)]
struct Sparse {
    window_groups: u32,
    window: u32,
    window_block: u32,
    ring_block: Option<u32>,
    bounded_replay: bool,
}

#[derive(serde::Deserialize, Debug)]
#[serde(deny_unknown_fields)]
struct Mamba {
    groups: u32,
    mode: String,
}

#[derive(serde::Deserialize, Debug)]
#[serde(deny_unknown_fields)]
struct Speculative {
    method: String,
    num_spec_tokens: u32,
    /// The drafting method as the scheduler sees it (the oracle's switch):
    /// `ngram` (the default), `eagle`, `dflash` or `draft_model`, each the
    /// vLLM method of that name.
    drafter: Option<String>,
}

impl Speculative {
    /// The vLLM method the scheduler is told of.
    fn drafter(&self) -> &str {
        self.drafter.as_deref().unwrap_or("ngram")
    }
}

/// One workload line.
#[derive(serde::Deserialize, Debug)]
#[serde(deny_unknown_fields)]
struct ReplayRequest {
    /// The 1-based line of the workload it was read from, for messages.
    #[serde(skip)]
    line: usize,
    id: u32,
    arrive_step: u64,
    prompt: Vec<u64>,
    max_tokens: u32,
    #[serde(default)]
    priority: i32,
    #[serde(default)]
    accepted: Option<Vec<u32>>,
    #[serde(default)]
    kv: Option<String>,
    #[serde(default)]
    kv_ready_step: Option<u64>,
}

/// KV cache groups of one kind (window groups, Mamba groups): DeepSeek-V4.1
/// has five window groups and Nemotron-H six Mamba groups; every group
/// takes blocks of each request, so the count multiplies what a step
/// allocates and is bounded ten times past any model's.
const MAX_GROUPS: u32 = 64;

/// Window blocks a window spans (`window / window_block`): DeepSeek-V4.1's
/// is four (128 tokens of 32); a request holds this many a window group.
const MAX_WINDOW_BLOCKS: u32 = 4096;

fn load_config(text: &str, name: &str) -> Result<ReplayConfig, ReplayError> {
    use pdsim_spec::validate::limits;
    let cfg: ReplayConfig =
        serde_json::from_str(text).map_err(|e| ReplayError::Input(format!("{name}: {e}")))?;
    let bad = |key: &str, why: &str| ReplayError::Input(format!("{name}: `{key}`: {why}"));
    // The limits `pdsim validate` holds a deployment's engine to: past them
    // a value describes no engine, and the replay would allocate or count
    // up to it.
    for (key, value, limit) in [
        (
            "block_size",
            i64::from(cfg.block_size),
            limits::MAX_BLOCK_SIZE,
        ),
        (
            "num_gpu_blocks",
            i64::from(cfg.num_gpu_blocks),
            limits::MAX_KV_BLOCKS as i64,
        ),
        (
            "max_num_seqs",
            i64::from(cfg.max_num_seqs),
            limits::MAX_NUM_SEQS,
        ),
        (
            "max_num_batched_tokens",
            i64::from(cfg.max_num_batched_tokens),
            limits::MAX_BATCHED_TOKENS,
        ),
        (
            "max_model_len",
            i64::from(cfg.max_model_len),
            limits::MAX_TOKENS,
        ),
        (
            "long_prefill_token_threshold",
            i64::from(cfg.long_prefill_token_threshold),
            limits::MAX_TOKENS,
        ),
        (
            "speculative.num_spec_tokens",
            cfg.speculative
                .as_ref()
                .map_or(0, |s| i64::from(s.num_spec_tokens)),
            limits::MAX_SPEC_TOKENS,
        ),
        (
            "mamba.groups",
            cfg.mamba.as_ref().map_or(0, |m| i64::from(m.groups)),
            i64::from(MAX_GROUPS),
        ),
        (
            "sparse.window_groups",
            cfg.sparse
                .as_ref()
                .map_or(0, |w| i64::from(w.window_groups)),
            i64::from(MAX_GROUPS),
        ),
    ] {
        if value > limit {
            return Err(bad(
                key,
                &format!("{value} is more than the limit of {limit}"),
            ));
        }
    }
    if cfg.max_steps.is_some_and(|m| !(1..=MAX_STEPS).contains(&m)) {
        return Err(bad("max_steps", &format!("must be in 1..={MAX_STEPS}")));
    }
    if cfg.block_size == 0 {
        return Err(bad("block_size", "must be positive"));
    }
    if cfg.num_gpu_blocks < 2 {
        return Err(bad(
            "num_gpu_blocks",
            "must be at least 2 (one is the null block)",
        ));
    }
    if cfg.max_num_seqs == 0 || cfg.max_num_batched_tokens == 0 || cfg.max_model_len == 0 {
        return Err(bad(
            "max_num_seqs",
            "max_num_seqs, max_num_batched_tokens and max_model_len must be positive",
        ));
    }
    if !matches!(cfg.scheduling_policy.as_str(), "fcfs" | "priority") {
        return Err(bad("scheduling_policy", "must be fcfs or priority"));
    }
    if let Some(spec) = &cfg.speculative {
        if !matches!(spec.method.as_str(), "ngram" | "ngram_gpu") {
            return Err(bad(
                "speculative.method",
                "only ngram and ngram_gpu are supported (as by the oracle)",
            ));
        }
        if !matches!(spec.drafter(), "ngram" | "eagle" | "dflash" | "draft_model") {
            return Err(bad(
                "speculative.drafter",
                "must be ngram, eagle, dflash or draft_model (as by the oracle)",
            ));
        }
        if spec.num_spec_tokens == 0 {
            return Err(bad("speculative.num_spec_tokens", "must be at least 1"));
        }
    }
    if let Some(m) = &cfg.mamba {
        if m.groups == 0 {
            return Err(bad("mamba.groups", "must be at least 1"));
        }
        if !matches!(m.mode.as_str(), "align" | "none") {
            return Err(bad("mamba.mode", "must be align or none"));
        }
        if (m.mode == "align") != cfg.enable_prefix_caching {
            return Err(bad(
                "mamba.mode",
                "vLLM runs align exactly when prefix caching is on, none when it is off",
            ));
        }
        if cfg.speculative.is_some() {
            return Err(bad(
                "mamba",
                "speculative decoding's extra state blocks are not simulated",
            ));
        }
    }
    if let Some(sp) = &cfg.sparse {
        if sp.window_groups == 0 || sp.window == 0 || sp.window_block == 0 {
            return Err(bad(
                "sparse",
                "window_groups, window and window_block must be positive",
            ));
        }
        if sp.window.div_ceil(sp.window_block) > MAX_WINDOW_BLOCKS {
            return Err(bad(
                "sparse.window",
                &format!(
                    "spans more than {MAX_WINDOW_BLOCKS} window blocks of {} tokens",
                    sp.window_block
                ),
            ));
        }
        if !cfg.block_size.is_multiple_of(sp.window_block) {
            return Err(bad(
                "sparse.window_block",
                "must divide block_size (the scheduler's block is their LCM)",
            ));
        }
        if cfg.mamba.is_some() || cfg.speculative.is_some() {
            return Err(bad("sparse", "goes with neither `mamba` nor `speculative`"));
        }
    }
    if pdsim_spec::rules::pack::for_version(&cfg.release).is_none() {
        return Err(bad(
            "release",
            &format!(
                "pdsim has no rules pack for vLLM {} (known: {})",
                cfg.release,
                pdsim_spec::rules::pack::known_versions().join(", ")
            ),
        ));
    }
    Ok(cfg)
}

fn load_workload(text: &str, name: &str) -> Result<Vec<ReplayRequest>, ReplayError> {
    let mut reqs = Vec::new();
    let mut ids = std::collections::BTreeSet::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let at = format!("{name}:{}", i + 1);
        let mut r: ReplayRequest =
            serde_json::from_str(line).map_err(|e| ReplayError::Input(format!("{at}: {e}")))?;
        r.line = i + 1;
        if r.prompt.is_empty() {
            return Err(ReplayError::Input(format!("{at}: `prompt` is empty")));
        }
        if r.max_tokens == 0 {
            return Err(ReplayError::Input(format!(
                "{at}: `max_tokens` is 0; a request generates at least one token (vLLM's SamplingParams refuses max_tokens below 1)"
            )));
        }
        // A step the replay never reaches would make it run to its cap,
        // printing a line a step, and fail as if the engine were stuck.
        for (key, step) in [
            ("arrive_step", Some(r.arrive_step)),
            ("kv_ready_step", r.kv_ready_step),
        ] {
            if let Some(step) = step.filter(|&s| s >= MAX_STEPS) {
                return Err(ReplayError::Input(format!(
                    "{at}: `{key}` {step} is at or past the replay's cap of {MAX_STEPS} steps"
                )));
            }
        }
        match (r.kv.as_deref(), r.kv_ready_step) {
            (None, None) | (Some("produce" | "consume"), Some(_)) => {}
            (Some("produce" | "consume"), None) => {
                return Err(ReplayError::Input(format!(
                    "{at}: `kv_ready_step` (an integer) goes with `kv`"
                )));
            }
            (None, Some(_)) => {
                return Err(ReplayError::Input(format!(
                    "{at}: `kv_ready_step` without `kv`"
                )));
            }
            (Some(other), _) => {
                return Err(ReplayError::Input(format!(
                    "{at}: `kv` must be produce or consume, not {other:?}"
                )));
            }
        }
        if !ids.insert(r.id) {
            return Err(ReplayError::Input(format!(
                "{at}: `id` {} is repeated",
                r.id
            )));
        }
        reqs.push(r);
    }
    if reqs.is_empty() {
        return Err(ReplayError::Input(format!(
            "{name}: the workload holds no request (one JSON object a line)"
        )));
    }
    Ok(reqs)
}

/// The fewest blocks a request holds at once when its KV cache covers
/// `held` tokens, the step that computes the last of them included: the
/// full-attention blocks of all of them; a hybrid's state block in each
/// Mamba group; and for DeepSeek-V4.1, in each window group the window
/// blocks covering the window that step attends to (at least
/// `min(window, held)` tokens), and the ring's block.
fn least_blocks(cfg: &ReplayConfig, held: u64) -> u64 {
    let mut blocks = held.div_ceil(u64::from(cfg.block_size));
    if let Some(m) = &cfg.mamba {
        blocks += u64::from(m.groups);
    }
    if let Some(w) = &cfg.sparse {
        let window = held.min(u64::from(w.window));
        blocks += u64::from(w.window_groups) * window.div_ceil(u64::from(w.window_block));
        blocks += u64::from(w.ring_block.is_some());
    }
    blocks
}

/// Refuses, before anything is replayed, a workload that could never drain
/// within [`MAX_STEPS`] on the engine `cfg` describes: a prompt vLLM's input
/// processor refuses, a request whose KV cache at its longest exceeds the
/// whole pool (it would be scheduled, fill the pool, preempt itself and
/// start again for ever), or requests whose tokens alone need more steps
/// than the cap. Each bound is one the engine can never beat, so no
/// workload that drains is refused; the cap stays for what these miss.
fn check_workload(
    cfg: &ReplayConfig,
    reqs: &[ReplayRequest],
    name: &str,
) -> Result<(), ReplayError> {
    // The most tokens a request gains in one step: its sampled token and
    // every draft accepted.
    let per_step = 1 + u64::from(cfg.speculative.as_ref().map_or(0, |s| s.num_spec_tokens));
    // The null block is never handed out.
    let usable_blocks = u64::from(cfg.num_gpu_blocks) - 1;
    let mut request_steps: u64 = 0;
    for r in reqs {
        let at = format!("{name}:{}: request {}", r.line, r.id);
        let prompt = r.prompt.len() as u64;
        let max_len = u64::from(cfg.max_model_len);
        if prompt >= max_len {
            return Err(ReplayError::Input(format!(
                "{at}: its prompt of {prompt} tokens is not below max_model_len {max_len}, so vLLM's input processor refuses it"
            )));
        }
        // The engine caps the output so that prompt and output fit
        // max_model_len; the last token sampled is never fed back, so the
        // KV cache holds one token fewer than the finished sequence.
        let output = u64::from(r.max_tokens).min(max_len - prompt);
        let blocks = least_blocks(cfg, prompt + output - 1);
        if blocks > usable_blocks {
            return Err(ReplayError::Input(format!(
                "{at}: its prompt of {prompt} tokens and up to {output} output tokens need at least {blocks} KV blocks at their longest, and the pool has {usable_blocks} (num_gpu_blocks {} less the null block): it could never finish",
                cfg.num_gpu_blocks
            )));
        }
        // One step computes the prompt's last token and samples the first
        // output token; each later step adds at most `per_step` tokens.
        let steps = 1 + (output - 1).div_ceil(per_step);
        if r.arrive_step + steps > MAX_STEPS {
            return Err(ReplayError::Input(format!(
                "{at}: arriving at step {} with up to {output} output tokens (at most {per_step} a step), it cannot finish within the replay's cap of {MAX_STEPS} steps",
                r.arrive_step
            )));
        }
        request_steps += steps;
    }
    // Every step schedules at most max_num_seqs requests, each at least one
    // token of max_num_batched_tokens.
    let per_batch = u64::from(cfg.max_num_seqs.min(cfg.max_num_batched_tokens));
    let steps = request_steps.div_ceil(per_batch);
    if steps > MAX_STEPS {
        return Err(ReplayError::Input(format!(
            "{name}: its {} requests need at least {steps} steps ({request_steps} request-steps, at most {per_batch} a step), more than the replay's cap of {MAX_STEPS}",
            reqs.len()
        )));
    }
    Ok(())
}

fn engine_config(cfg: &ReplayConfig, connector: bool) -> EngineConfig {
    let pack = pdsim_spec::rules::pack::for_version(&cfg.release).expect("checked at load");
    // The rates are never drawn from: the replay forces each verification's
    // accepted count (`Engine::complete_step_forced`).
    // What the release's scheduler reserves for the drafter, as a
    // deployment's engine gets it (`RulesPack::drafter`).
    let drafter = |s: &Speculative| pack.drafter(s.drafter(), u64::from(s.num_spec_tokens));
    let spec = cfg.speculative.as_ref().map(|s| SpecConfig {
        num_spec_tokens: s.num_spec_tokens,
        acceptance: vec![0.0; s.num_spec_tokens as usize],
        eagle_style: drafter(s).eagle_style,
        lookahead_tokens: drafter(s).lookahead_tokens as u32,
        draft_slots: drafter(s).draft_slots as u32,
    });
    EngineConfig {
        block_size: cfg.block_size,
        prefix_unit: cfg.block_size,
        num_blocks: cfg.num_gpu_blocks,
        max_num_batched_tokens: cfg.max_num_batched_tokens,
        max_num_seqs: cfg.max_num_seqs,
        long_prefill_token_threshold: cfg.long_prefill_token_threshold,
        long_prefill_waiver_when_alone: pack.features.long_prefill_waiver_when_alone,
        policy: if cfg.scheduling_policy == "priority" {
            Policy::Priority
        } else {
            Policy::Fcfs
        },
        enable_prefix_caching: cfg.enable_prefix_caching,
        max_model_len: cfg.max_model_len,
        reserve_full_prompt: pack.features.reserve_full_prompt,
        unhashed_blocks_to_front: pack.features.unhashed_blocks_to_front,
        lone_prefill_steps: pack.features.lone_prefill_steps,
        delay_cache_blocks: pack.features.delay_cache_blocks,
        // Graphs and DBO change pricing, not decisions.
        graphs: Graphs {
            mode: CudaGraphMode::None,
            sizes: vec![],
        },
        dbo: Dbo {
            enabled: false,
            decode_threshold: 0,
            prefill_threshold: 0,
        },
        spec,
        offload: None,
        offload_secondary: Vec::new(),
        lmcache: None,
        async_scheduling: cfg.async_scheduling,
        enable_chunked_prefill: cfg.enable_chunked_prefill.unwrap_or(true),
        // The oracle's scripted connector (`kv_role: kv_both`) is there
        // when any request moves KV: it consumes, so frees are deferred
        // under async scheduling, and produces, so it requires delivery.
        defer_block_free: connector && cfg.async_scheduling,
        drop_stale_output: connector,
        pad_spec_decode: pack.features.pad_spec_decode,
        victim_blocks_must_be_freeable: pack.features.victim_blocks_must_be_freeable,
        kv_holding_first: pack.features.kv_holding_first,
        async_load_reserve: pack.features.async_load_reserve,
        mamba: cfg.mamba.as_ref().map(|m| crate::mamba::MambaConfig {
            groups: m.groups,
            mode: if m.mode == "align" {
                crate::mamba::MambaMode::Align
            } else {
                crate::mamba::MambaMode::None
            },
            block_size: cfg.block_size,
        }),
        window: cfg.sparse.as_ref().map(|sp| {
            // `max_in_flight_tokens`: one batch, or two under async
            // scheduling (Model Runner V2, one pipeline stage).
            let batches = if cfg.async_scheduling { 2 } else { 1 };
            crate::window::WindowConfig {
                groups: sp.window_groups,
                window: sp.window,
                block_size: sp.window_block,
                ring: sp.ring_block.is_some(),
                admission_cap: crate::window::WindowConfig::admission_cap(
                    sp.window,
                    sp.window_block,
                    batches * cfg.max_num_batched_tokens,
                    cfg.max_model_len,
                ),
                replay: if sp.bounded_replay { sp.window } else { 0 },
                cached: !sp.bounded_replay,
                hit_alignment: cfg.block_size,
            }
        }),
    }
}

/// A token-id prompt as pdsim segments: one segment per token, its id a
/// function of the token id alone, so prompts with equal token prefixes share
/// exactly the blocks those prefixes fill.
fn prompt_of(tokens: &[u64]) -> Prompt {
    Prompt::new(
        tokens
            .iter()
            .map(|&t| Segment {
                id: content_id(t, TOKEN_SALT),
                tokens: 1,
            })
            .collect(),
    )
}

fn ids_map(pairs: impl IntoIterator<Item = (u32, u32)>) -> Value {
    let map: BTreeMap<String, Value> = pairs
        .into_iter()
        .map(|(id, n)| (id.to_string(), Value::from(n)))
        .collect();
    Value::Object(map.into_iter().collect::<Map<String, Value>>())
}

/// Applies `NAME=BOOL` feature overrides (`--feature`) to a resolved engine config.
fn apply_features(config: &mut EngineConfig, features: &[String]) -> Result<(), ReplayError> {
    for f in features {
        let bad = || {
            ReplayError::Input(format!(
                "--feature {f}: want NAME=true|false with NAME one of reserve_full_prompt, \
                 unhashed_blocks_to_front, long_prefill_waiver_when_alone, kv_holding_first"
            ))
        };
        let (name, value) = f.split_once('=').ok_or_else(bad)?;
        let value: bool = value.parse().map_err(|_| bad())?;
        match name {
            "reserve_full_prompt" => config.reserve_full_prompt = value,
            "unhashed_blocks_to_front" => config.unhashed_blocks_to_front = value,
            "long_prefill_waiver_when_alone" => config.long_prefill_waiver_when_alone = value,
            "kv_holding_first" => config.kv_holding_first = value,
            _ => return Err(bad()),
        }
    }
    Ok(())
}

/// Replays the workload `workload` (JSONL, one request a line, named
/// `workload_name` in errors) through an engine built from the config
/// `config` (one JSON object), with `features` (`NAME=true|false`)
/// overriding the rules pack's switches, handing each step's line
/// (newline-terminated) to `emit`.
pub fn replay(
    config: &str,
    config_name: &str,
    workload: &str,
    workload_name: &str,
    features: &[String],
    emit: &mut dyn FnMut(&str) -> Result<(), String>,
) -> Result<(), ReplayError> {
    let cfg = load_config(config, config_name)?;
    let reqs = load_workload(workload, workload_name)?;
    check_workload(&cfg, &reqs, workload_name)?;
    run(&cfg, &reqs, workload_name, features, emit)
}

/// Replays `reqs` on the engine `cfg` describes, as [`replay`] does once
/// the workload was checked.
fn run(
    cfg: &ReplayConfig,
    reqs: &[ReplayRequest],
    workload_name: &str,
    features: &[String],
    emit: &mut dyn FnMut(&str) -> Result<(), String>,
) -> Result<(), ReplayError> {
    let connector = reqs.iter().any(|r| r.kv.is_some());
    let mut engine_cfg = engine_config(cfg, connector);
    apply_features(&mut engine_cfg, features)?;
    let mut engine = Engine::new(engine_cfg);
    // Accepted drafts per request, forced as the oracle forces them
    // (tools/vllm-oracle/oracle.py, `model_output`): the i-th verification
    // of a request (a step that scheduled it drafts; the count survives
    // preemption) accepts `accepted[i]` drafts, 0 past the list's end,
    // never more than it verifies.
    let accepted_of: BTreeMap<u32, &[u32]> = reqs
        .iter()
        .map(|r| (r.id, r.accepted.as_deref().unwrap_or(&[])))
        .collect();
    let mut verify_count: BTreeMap<u32, usize> = BTreeMap::new();
    // The drafts of each step in flight, oldest first: the oracle builds a
    // step's output for every request the step scheduled drafts for, and
    // so counts a verification whose output the scheduler then drops (a
    // request preempted while the step ran, under async scheduling with a
    // KV connector). The replay counts them as the oracle does, not as the
    // engine uses them.
    let mut drafts_in_flight: std::collections::VecDeque<Vec<(u32, u32)>> =
        std::collections::VecDeque::new();
    let mut forced: BTreeMap<u32, u32> = BTreeMap::new();
    let mut by_step: BTreeMap<u64, Vec<&ReplayRequest>> = BTreeMap::new();
    for r in reqs {
        by_step.entry(r.arrive_step).or_default().push(r);
    }
    let last_arrival = by_step.keys().next_back().copied();
    // P/D, scripted as the oracle's fake connector scripts it
    // (tools/vllm-oracle/fake_connector.py): a consuming request's KV arrives
    // at the first step >= its `kv_ready_step` once its load started (it was
    // parked for it), and a producing request's held blocks are read at the
    // first step >= `kv_ready_step` after the one it finished in.
    let mut kv_ready: BTreeMap<u32, u64> = BTreeMap::new();
    // id -> the first step the transfer may complete in.
    let mut recv_pending: BTreeMap<u32, u64> = BTreeMap::new();
    let mut send_pending: BTreeMap<u32, u64> = BTreeMap::new();
    let mut text = String::new();
    let mut step: u64 = 0;
    loop {
        for r in by_step.get(&step).into_iter().flatten() {
            engine.add_request(NewRequest {
                id: RequestId(r.id),
                arrival: SimTime(r.arrive_step),
                priority: r.priority,
                prompt: prompt_of(&r.prompt),
                max_output_tokens: r.max_tokens,
                kv: match r.kv.as_deref() {
                    Some("produce") => KvTransfer::Produce,
                    Some("consume") => KvTransfer::Consume,
                    _ => KvTransfer::Local,
                },
                output_id: None,
            });
            if let Some(ready) = r.kv_ready_step {
                kv_ready.insert(r.id, ready);
            }
        }
        let arrived_all = last_arrival.is_none_or(|last| step > last);
        let transfers = !recv_pending.is_empty() || !send_pending.is_empty();
        if arrived_all && !engine.has_work() && engine.steps_in_flight() == 0 && !transfers {
            break;
        }
        if let Some(max_steps) = cfg.max_steps
            && step >= max_steps
        {
            break;
        }
        if step >= MAX_STEPS {
            let spins = engine.preemptions_since_output();
            if spins >= crate::SPIN_PREEMPTIONS {
                return Err(ReplayError::Spin(format!(
                    "not drained after {MAX_STEPS} steps: the engine spins, preempted {spins} \
                     times since a step last delivered an output token (requests admitted \
                     again on their cached prefixes and preempted before any produces one)"
                )));
            }
            return Err(ReplayError::Invariant(format!(
                "not drained after {MAX_STEPS} steps"
            )));
        }
        let mut preempted = Vec::new();
        let mut finished = Vec::new();
        let mut rejected = Vec::new();
        let mut scheduled: Vec<(u32, u32)> = Vec::new();
        let mut drafts: Vec<(u32, u32)> = Vec::new();
        // The engine core's loop, as the oracle plays it: `EngineCore.step`
        // schedules and applies the output in one call; under async
        // scheduling `EngineCore.step_with_batch_queue` (queue of two,
        // `vllm/v1/engine/core.py`) schedules only while the engine has
        // requests, and applies the oldest step's output only once the
        // queue is full or nothing more could be scheduled.
        let schedules = !cfg.async_scheduling || engine.has_requests();
        let mut complete = !cfg.async_scheduling || engine.steps_in_flight() > 0;
        if schedules {
            let batch = engine.schedule();
            for event in engine.drain_events() {
                match event {
                    EngineEvent::Preempted { id } => preempted.push(id.0),
                    EngineEvent::Rejected { id } => rejected.push(id.0),
                    EngineEvent::NeedsKv { id, .. } => {
                        let ready = kv_ready.get(&id.0).copied().unwrap_or(0);
                        recv_pending.insert(id.0, ready.max(step));
                    }
                    _ => {}
                }
            }
            scheduled = engine
                .last_schedule()
                .into_iter()
                .map(|(id, n)| (id.0, n))
                .collect();
            drafts = engine
                .last_schedule_drafts()
                .into_iter()
                .map(|(id, n)| (id.0, n))
                .collect();
            // The engine keeps every async step in flight, and a sync one
            // that scheduled anything (`Engine::schedule`).
            if cfg.async_scheduling || !scheduled.is_empty() {
                drafts_in_flight.push_back(drafts.clone());
            }
            if drafts_in_flight.len() != engine.steps_in_flight() {
                return Err(ReplayError::Invariant(format!(
                    "step {step}: {} steps in flight, the replay counts {}",
                    engine.steps_in_flight(),
                    drafts_in_flight.len()
                )));
            }
            if let Some(batch) = &batch {
                let total: u32 = drafts.iter().map(|d| d.1).sum();
                if total != batch.spec_tokens {
                    return Err(ReplayError::Invariant(format!(
                        "step {step}: drafts scheduled ({total}) differ from the batch's spec tokens ({})",
                        batch.spec_tokens
                    )));
                }
            }
            if cfg.async_scheduling {
                let executed = batch.is_some();
                complete = !(engine.steps_in_flight() < 2 && (executed || engine.has_requests()));
            }
        }
        if complete && engine.steps_in_flight() > 0 {
            forced.clear();
            for &(id, n) in drafts_in_flight.pop_front().iter().flatten() {
                if n > 0 {
                    let idx = verify_count.entry(id).or_insert(0);
                    let given = accepted_of.get(&id).and_then(|l| l.get(*idx)).copied();
                    *idx += 1;
                    forced.insert(id, given.unwrap_or(0));
                }
            }
            engine.complete_step_forced(&mut |id, _drafts| forced.get(&id.0).copied().unwrap_or(0));
        }
        for event in engine.drain_events() {
            match event {
                EngineEvent::Finished { id, .. } => finished.push(id.0),
                // A producing request finishes here for the engine core (vLLM
                // reports it finished and delays only the free); its
                // `Finished` comes with the release and is not reported again.
                EngineEvent::Held { id, .. } => {
                    finished.push(id.0);
                    let ready = kv_ready.get(&id.0).copied().unwrap_or(0);
                    send_pending.insert(id.0, ready.max(step + 1));
                }
                EngineEvent::Rejected { id } => rejected.push(id.0),
                _ => {}
            }
        }
        if !rejected.is_empty() {
            return Err(ReplayError::Input(format!(
                "{workload_name}: request(s) {rejected:?} rejected: prompt empty or not below max_model_len"
            )));
        }
        let due = |pending: &mut BTreeMap<u32, u64>| {
            let ids: Vec<u32> = pending
                .iter()
                .filter(|(_, at)| **at <= step)
                .map(|(id, _)| *id)
                .collect();
            for id in &ids {
                pending.remove(id);
            }
            ids
        };
        // Finished transfers come with a step's output
        // (`KVConnectorOutput` in the `ModelRunnerOutput`), so only a step
        // whose output is applied brings them.
        if complete {
            for id in due(&mut recv_pending) {
                engine.kv_arrived(RequestId(id));
            }
            for id in due(&mut send_pending) {
                engine.release(RequestId(id));
            }
        }
        // The release's `Finished` was reported with `Held`.
        engine.drain_events().for_each(drop);
        engine.check_full().map_err(ReplayError::Invariant)?;
        preempted.sort_unstable();
        finished.sort_unstable();
        let computed = engine
            .running_ids()
            .into_iter()
            .filter_map(|id| engine.computed_tokens(id).map(|c| (id.0, c)));
        let mut line = Map::new();
        line.insert("computed".into(), ids_map(computed));
        line.insert("drafts".into(), ids_map(drafts));
        line.insert("finished".into(), Value::from(finished));
        line.insert("free_blocks".into(), Value::from(engine.pool().free()));
        line.insert("preempted".into(), Value::from(preempted));
        line.insert("scheduled".into(), ids_map(scheduled));
        line.insert("step".into(), Value::from(step));
        text.clear();
        text.push_str(&Value::Object(line).to_string());
        text.push('\n');
        emit(&text).map_err(ReplayError::Output)?;
        step += 1;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const CONFIG: &str = r#"{"release": "0.31.0", "block_size": 16, "num_gpu_blocks": 100, "max_num_seqs": 4, "max_num_batched_tokens": 64, "max_model_len": 512, "long_prefill_token_threshold": 0, "enable_prefix_caching": true, "scheduling_policy": "fcfs", "async_scheduling": false}"#;

    fn lines(workload: &str, features: &[&str]) -> Result<Vec<String>, ReplayError> {
        let features: Vec<String> = features.iter().map(|f| f.to_string()).collect();
        let mut out = Vec::new();
        replay(CONFIG, "c", workload, "w", &features, &mut |line| {
            out.push(line.to_string());
            Ok(())
        })?;
        Ok(out)
    }

    #[test]
    fn each_engine_limit_must_be_positive_on_its_own() {
        for (key, value) in [
            ("block_size", "16"),
            ("max_num_seqs", "4"),
            ("max_num_batched_tokens", "64"),
            ("max_model_len", "512"),
        ] {
            let config = CONFIG.replace(&format!("\"{key}\": {value}"), &format!("\"{key}\": 0"));
            assert_ne!(config, CONFIG);
            match load_config(&config, "c") {
                Err(ReplayError::Input(msg)) => {
                    assert!(msg.contains("must be positive"), "{key}: {msg}")
                }
                other => panic!("{key} 0: {other:?}"),
            }
        }
        let one_block = CONFIG.replace("\"num_gpu_blocks\": 100", "\"num_gpu_blocks\": 1");
        assert!(
            matches!(load_config(&one_block, "c"), Err(ReplayError::Input(m)) if m.contains("null block"))
        );
        assert!(load_config(CONFIG, "c").is_ok());
    }

    /// The drafter is one the oracle can tell vLLM's scheduler of, and each
    /// reserves the lookahead slots `VllmConfig.num_lookahead_tokens` says.
    #[test]
    fn the_drafter_sets_the_lookahead_and_an_unknown_one_is_refused() {
        let with = |drafter: &str| {
            CONFIG.replacen(
                '{',
                &format!(
                    "{{\"speculative\": {{\"method\": \"ngram\", \"num_spec_tokens\": 3{drafter}}}, "
                ),
                1,
            )
        };
        for (drafter, eagle, lookahead) in [
            ("", false, 0),
            (", \"drafter\": \"ngram\"", false, 0),
            (", \"drafter\": \"eagle\"", true, 3),
            (", \"drafter\": \"dflash\"", true, 4),
            (", \"drafter\": \"draft_model\"", false, 3),
        ] {
            let cfg = load_config(&with(drafter), "c").expect("loads");
            let spec = engine_config(&cfg, false).spec.expect("drafts");
            assert_eq!(
                (spec.eagle_style, spec.lookahead_tokens),
                (eagle, lookahead),
                "{drafter}"
            );
        }
        match load_config(&with(", \"drafter\": \"medusa\""), "c") {
            Err(ReplayError::Input(msg)) => {
                assert!(msg.contains("speculative.drafter"), "{msg}")
            }
            other => panic!("medusa: {other:?}"),
        }
    }

    /// Past the limits a deployment is held to, a value is refused by its
    /// key: a draft count or group count of four billion would be
    /// allocated for (34 GB for the drafts' acceptance rates) or overflow
    /// the engine's block arithmetic.
    #[test]
    fn a_config_value_past_its_limit_is_refused_by_key() {
        let with = |extra: &str| CONFIG.replacen('{', &format!("{{{extra}, "), 1);
        for (config, key) in [
            (
                with("\"speculative\": {\"method\": \"ngram\", \"num_spec_tokens\": 4294967295}"),
                "speculative.num_spec_tokens",
            ),
            (
                with("\"mamba\": {\"groups\": 4294967295, \"mode\": \"align\"}"),
                "mamba.groups",
            ),
            (
                with(
                    "\"sparse\": {\"window_groups\": 65, \"window\": 16, \"window_block\": 4, \"ring_block\": null, \"bounded_replay\": true}",
                ),
                "sparse.window_groups",
            ),
            (
                with(
                    "\"sparse\": {\"window_groups\": 2, \"window\": 4294967295, \"window_block\": 1, \"ring_block\": null, \"bounded_replay\": false}",
                ),
                "sparse.window",
            ),
            (
                CONFIG.replace("\"num_gpu_blocks\": 100", "\"num_gpu_blocks\": 4294967295"),
                "num_gpu_blocks",
            ),
            (
                CONFIG.replace(
                    "\"max_num_batched_tokens\": 64",
                    "\"max_num_batched_tokens\": 4294967295",
                ),
                "max_num_batched_tokens",
            ),
        ] {
            match load_config(&config, "c") {
                Err(ReplayError::Input(msg)) => {
                    assert!(msg.starts_with(&format!("c: `{key}`: ")), "{key}: {msg}")
                }
                other => panic!("{key}: {other:?}"),
            }
        }
        // At the limits the config loads.
        assert!(
            load_config(
                &with("\"mamba\": {\"groups\": 64, \"mode\": \"align\"}"),
                "c"
            )
            .is_ok()
        );
        assert!(
            load_config(
                &with("\"speculative\": {\"method\": \"ngram\", \"num_spec_tokens\": 1024}"),
                "c"
            )
            .is_ok()
        );
    }

    #[test]
    fn a_hybrids_and_deepseeks_groups_are_checked_each_on_its_own() {
        let with = |extra: &str| CONFIG.replacen('{', &format!("{{{extra}, "), 1);
        let refused = |config: &str, needle: &str| match load_config(config, "c") {
            Err(ReplayError::Input(msg)) => assert!(msg.contains(needle), "{needle}: {msg}"),
            other => panic!("{config}: {other:?}"),
        };
        let sparse = |g: u32, w: u32, b: u32, replay: bool| {
            with(&format!(
                "\"sparse\": {{\"window_groups\": {g}, \"window\": {w}, \"window_block\": {b}, \"ring_block\": 8, \"bounded_replay\": {replay}}}"
            ))
        };
        assert!(load_config(&sparse(2, 16, 4, true), "c").is_ok());
        for config in [
            sparse(0, 16, 4, true),
            sparse(2, 0, 4, true),
            sparse(2, 16, 0, true),
        ] {
            refused(&config, "must be positive");
        }
        assert!(load_config(&sparse(2, 16, 4, false), "c").is_ok());
        refused(&sparse(2, 16, 5, true), "must divide block_size");
        let mamba = |groups: u32, mode: &str| {
            with(&format!(
                "\"mamba\": {{\"groups\": {groups}, \"mode\": \"{mode}\"}}"
            ))
        };
        assert!(load_config(&mamba(2, "align"), "c").is_ok());
        refused(&mamba(0, "align"), "mamba.groups");
        refused(&mamba(2, "all"), "mamba.mode");
        refused(&mamba(2, "none"), "exactly when prefix caching is on");
        let both = mamba(2, "align").replacen('{', &format!("{{{}, ", "\"sparse\": {\"window_groups\": 2, \"window\": 16, \"window_block\": 4, \"ring_block\": null, \"bounded_replay\": true}"), 1);
        refused(&both, "neither");
        let spec = "\"speculative\": {\"method\": \"ngram\", \"num_spec_tokens\": 2}";
        refused(
            &with(&format!(
                "{spec}, \"mamba\": {{\"groups\": 2, \"mode\": \"align\"}}"
            )),
            "speculative",
        );
        refused(
            &with(&format!(
                "{spec}, \"sparse\": {{\"window_groups\": 2, \"window\": 16, \"window_block\": 4, \"ring_block\": 8, \"bounded_replay\": true}}"
            )),
            "neither",
        );
    }

    #[test]
    fn each_feature_override_sets_its_switch() {
        let cfg: ReplayConfig = serde_json::from_str(CONFIG).unwrap();
        let base = engine_config(&cfg, false);
        for (name, get) in [
            (
                "reserve_full_prompt",
                (|c: &EngineConfig| c.reserve_full_prompt) as fn(&EngineConfig) -> bool,
            ),
            ("unhashed_blocks_to_front", |c| c.unhashed_blocks_to_front),
            ("long_prefill_waiver_when_alone", |c| {
                c.long_prefill_waiver_when_alone
            }),
        ] {
            for value in [true, false] {
                let mut c = base.clone();
                apply_features(&mut c, &[format!("{name}={value}")]).unwrap();
                assert_eq!(get(&c), value, "{name}={value}");
            }
        }
        let mut c = base.clone();
        for bad in [
            "speed=true",
            "reserve_full_prompt",
            "reserve_full_prompt=yes",
        ] {
            assert!(matches!(
                apply_features(&mut c, &[bad.to_string()]),
                Err(ReplayError::Input(_))
            ));
        }
    }

    #[test]
    fn a_workload_replays_to_one_line_a_step_and_bad_rows_are_refused() {
        let out = lines(
            "{\"id\": 0, \"arrive_step\": 0, \"prompt\": [1, 2, 3], \"max_tokens\": 2}\n",
            &[],
        )
        .unwrap();
        // A 3-token prefill, then one decode that emits the second token.
        assert_eq!(out.len(), 2);
        assert!(out[0].starts_with("{\"computed\":{\"0\":3}"), "{}", out[0]);
        assert!(out[0].ends_with("\"step\":0}\n"));
        assert!(out[1].contains("\"finished\":[0]"), "{}", out[1]);
        for (row, why) in [
            (
                "{\"id\": 0, \"arrive_step\": 0, \"prompt\": [], \"max_tokens\": 2}",
                "empty",
            ),
            (
                "{\"id\": 0, \"arrive_step\": 0, \"prompt\": [1], \"max_tokens\": 2, \"kv\": \"produce\"}",
                "kv_ready_step",
            ),
            (
                "{\"id\": 0, \"arrive_step\": 0, \"prompt\": [1], \"max_tokens\": 2, \"color\": 1}",
                "unknown field",
            ),
        ] {
            match lines(row, &[]) {
                Err(ReplayError::Input(msg)) => assert!(msg.contains(why), "{msg}"),
                other => panic!("{row}: {other:?}"),
            }
        }
    }

    #[test]
    fn a_prompt_the_engine_rejects_fails_the_replay_with_or_without_async_scheduling() {
        // A 512-token prompt reaches `max_model_len` (512): vLLM's input
        // processor refuses it. Under async scheduling an engine with
        // nothing else to do does not schedule that step, so the refusal
        // comes out with the step's other events after it.
        let prompt: Vec<String> = (0..512).map(|i| (i % 7 + 1).to_string()).collect();
        let row = format!(
            "{{\"id\": 3, \"arrive_step\": 0, \"prompt\": [{}], \"max_tokens\": 2}}\n",
            prompt.join(", ")
        );
        for async_scheduling in ["false", "true"] {
            let config = CONFIG.replace(
                "\"async_scheduling\": false",
                &format!("\"async_scheduling\": {async_scheduling}"),
            );
            let result = replay(&config, "c", &row, "w", &[], &mut |_| Ok(()));
            match result {
                Err(ReplayError::Input(msg)) => assert!(
                    msg.contains(
                        "w:1: request 3: its prompt of 512 tokens is not below max_model_len 512"
                    ),
                    "{msg}"
                ),
                other => panic!("async {async_scheduling}: {other:?}"),
            }
            // The engine refuses it too, should a prompt reach it.
            let cfg = load_config(&config, "c").unwrap();
            let reqs = load_workload(&row, "w").unwrap();
            match run(&cfg, &reqs, "w", &[], &mut |_| Ok(())) {
                Err(ReplayError::Input(msg)) => {
                    assert!(msg.contains("request(s) [3] rejected"), "{msg}")
                }
                other => panic!("async {async_scheduling}: {other:?}"),
            }
        }
    }

    /// A workload that could never drain is refused before its first line,
    /// each kind naming the line and request; none of them is an invariant
    /// of the engine breaking.
    #[test]
    fn a_workload_that_cannot_drain_is_refused_before_any_line() {
        let prompt: Vec<String> = (1..=40).map(|t| t.to_string()).collect();
        let row = |arrive: u64, max_tokens: u64| {
            format!(
                "{{\"id\": 7, \"arrive_step\": {arrive}, \"prompt\": [{}], \"max_tokens\": {max_tokens}}}\n",
                prompt.join(", ")
            )
        };
        let refused = |config: &str, workload: &str, why: &str| {
            let mut printed = 0;
            match replay(config, "c", workload, "w", &[], &mut |_| {
                printed += 1;
                Ok(())
            }) {
                Err(ReplayError::Input(msg)) => assert!(msg.contains(why), "{why}: {msg}"),
                other => panic!("{workload}: {other:?}"),
            }
            assert_eq!(
                printed, 0,
                "{workload}: nothing is printed before the refusal"
            );
        };
        // 40 + 472 tokens fill max_model_len: 32 blocks, and the pool holds 99.
        assert!(lines(&row(0, u64::from(u32::MAX)), &[]).is_ok());
        let small = CONFIG.replace("\"num_gpu_blocks\": 100", "\"num_gpu_blocks\": 20");
        refused(
            &small,
            &row(0, u64::from(u32::MAX)),
            "w:1: request 7: its prompt of 40 tokens and up to 472 output tokens need at least 32 KV blocks at their longest, and the pool has 19",
        );
        refused(
            CONFIG,
            &row(100_000, 2),
            "w:1: `arrive_step` 100000 is at or past the replay's cap of 100000 steps",
        );
        refused(
            CONFIG,
            &row(u64::MAX, 2),
            "`arrive_step` 18446744073709551615",
        );
        refused(
            CONFIG,
            &row(99_999, 2),
            "w:1: request 7: arriving at step 99999 with up to 2 output tokens",
        );
        assert!(lines(&row(99_998, 2), &[]).is_ok_and(|l| l.len() == 100_000));
        refused(CONFIG, &row(0, 0), "w:1: `max_tokens` is 0");
        refused(CONFIG, "", "w: the workload holds no request");
        refused(CONFIG, "\n  \n", "w: the workload holds no request");
        let late = "{\"id\": 1, \"arrive_step\": 0, \"prompt\": [1], \"max_tokens\": 1, \"kv\": \"produce\", \"kv_ready_step\": 100000}";
        refused(CONFIG, late, "w:1: `kv_ready_step` 100000 is at or past");
        // 3,000 requests of 40 output tokens, one a step: more steps than the cap.
        let one_seq = CONFIG.replace("\"max_num_seqs\": 4", "\"max_num_seqs\": 1");
        let many: String = (0..3000)
            .map(|id| {
                format!(
                    "{{\"id\": {id}, \"arrive_step\": 0, \"prompt\": [1], \"max_tokens\": 40}}\n"
                )
            })
            .collect();
        refused(
            &one_seq,
            &many,
            "w: its 3000 requests need at least 120000 steps",
        );
    }

    /// The block bound refuses no request the engine could finish: on each
    /// kind of KV layout (plain, a hybrid's Mamba groups, DeepSeek-V4.1's
    /// window groups and ring, with and without prefix caching and async
    /// scheduling), the shortest output it refuses does not drain when
    /// replayed regardless, and on the plain layout one token less does.
    #[test]
    fn the_block_bound_refuses_only_requests_that_never_finish() {
        let base = CONFIG.replace("\"num_gpu_blocks\": 100", "\"num_gpu_blocks\": 12");
        let with = |extra: &str| base.replacen('{', &format!("{{{extra}, "), 1);
        let mut configs = vec![
            (base.clone(), true),
            (
                base.replace(
                    "\"enable_prefix_caching\": true",
                    "\"enable_prefix_caching\": false",
                ),
                true,
            ),
            (
                base.replace("\"async_scheduling\": false", "\"async_scheduling\": true"),
                true,
            ),
            (
                with("\"mamba\": {\"groups\": 3, \"mode\": \"align\"}"),
                false,
            ),
        ];
        for (ring, bounded) in [("8", "true"), ("null", "false")] {
            configs.push((
                with(&format!(
                    "\"sparse\": {{\"window_groups\": 2, \"window\": 16, \"window_block\": 4, \"ring_block\": {ring}, \"bounded_replay\": {bounded}}}"
                )),
                false,
            ));
        }
        let prompt: Vec<String> = (1..=50).map(|t| t.to_string()).collect();
        let row = |max_tokens: u32| {
            format!(
                "{{\"id\": 0, \"arrive_step\": 0, \"prompt\": [{}], \"max_tokens\": {max_tokens}}}\n",
                prompt.join(", ")
            )
        };
        for (config, tight) in configs {
            let cfg = load_config(&config, "c").unwrap();
            let fits =
                |m: u32| check_workload(&cfg, &load_workload(&row(m), "w").unwrap(), "w").is_ok();
            let first = (1..400)
                .find(|&m| !fits(m))
                .expect("a refused output length");
            let replayed = |m: u32| {
                let reqs = load_workload(&row(m), "w").unwrap();
                run(&cfg, &reqs, "w", &[], &mut |_| Ok(()))
            };
            assert_eq!(
                replayed(first),
                Err(ReplayError::Invariant(format!(
                    "not drained after {MAX_STEPS} steps"
                ))),
                "{config}: max_tokens {first}"
            );
            if tight {
                assert_eq!(
                    replayed(first - 1),
                    Ok(()),
                    "{config}: max_tokens {}",
                    first - 1
                );
            }
        }
    }
}
