//! inference-perf configurations as request streams.
//!
//! inference-perf (`kubernetes-sigs/inference-perf`) is the load generator
//! of the llm-d benchmarks; its configuration (`config.yml`, or the
//! `profile.yaml` / expanded `results/config.yaml` of the inference-sim
//! training runs) says what data to send and at which rates, in stages.
//! This module reads such a configuration and yields exactly the requests
//! inference-perf would send, in its order, at its times.
//!
//! # Which inference-perf
//!
//! The behaviour mirrored is inference-perf at `3b6f82a` (2025-11-07), the
//! build the inference-sim training runs used: their expanded
//! `results/config.yaml` is the `model_dump` of that build's `Config`
//! (`reportgen/base.py`), and its key set (`load.circuit_breakers` and
//! `load.request_timeout` but no `load.trace`) exists only between
//! `b81afa4` (2025-10-15) and `ad40050` (2025-11-14), a span in which the
//! data and load generators did not change. The files mirrored:
//!
//! - `inference_perf/config.py`: the keys, their defaults, and pydantic's
//!   validation (an unknown key is an error here; pydantic drops it, which
//!   is how the training runs' `profile.yaml` keys below were lost).
//! - `inference_perf/datagen/shared_prefix_datagen.py`: `num_groups` random
//!   system prompts of `system_prompt_len` tokens, each followed (after a
//!   space) by `num_prompts_per_group` random questions of `question_len`
//!   tokens; the list shuffled once (`random.shuffle`) and request `n` of a
//!   stage sent `prompts[n % len(prompts)]` with `max_tokens = output_len`.
//! - `inference_perf/datagen/random_datagen.py` and
//!   `inference_perf/datagen/synthetic_datagen.py` with
//!   `inference_perf/utils/distribution.py`: lengths drawn once from a
//!   clipped, rounded normal (`generate_distribution`), request `n` of a
//!   stage taking `input_lengths[n]` and `output_lengths[n]`; random prompts
//!   are fresh random tokens, synthetic prompts the first `input_lengths[n]`
//!   tokens of one fixed text (a prompt line and Shakespeare's sonnets).
//! - `inference_perf/loadgen/load_timer.py`: `constant` draws
//!   `int(rate × duration)` exponential gaps and scales them to sum to the
//!   duration, so the last request goes exactly at the stage's end;
//!   `poisson` draws a Poisson count per second and spreads each second's
//!   requests the same way over that second.
//! - `inference_perf/loadgen/load_generator.py` (`mp_run`, `run_stage`):
//!   each stage sends `int(rate × duration)` requests numbered from 0
//!   (the prompt index restarts with every stage), starting 1 s after the
//!   stage begins; the next stage begins after every request of this one
//!   has finished, the 1 s progress poll has seen it, and `load.interval`
//!   seconds have passed.
//! - `inference_perf/apis/completion.py` and
//!   `inference_perf/client/modelserver/openai_client.py`: a request whose
//!   `max_tokens` is 0 is sent with the client's default of 30; the client
//!   timeout is `load.request_timeout`, or aiohttp's default session
//!   timeout of 300 s in total (`aiohttp/client.py`, `DEFAULT_TIMEOUT`)
//!   when it is null.
//!
//! Two names from inference-perf v0.4.0 (`4f57a0b`, 2026-02-05) are read
//! too: `num_unique_system_prompts` and `num_users_per_system_prompt`,
//! aliases of `num_groups` and `num_prompts_per_group`. The training runs'
//! `profile.yaml` uses them, with `enable_multi_turn_chat`; the build that
//! ran did not know them and used the defaults (10 groups of 10, single
//! turn), which is what their `results/config.yaml` records and what their
//! measured prompt lengths (constant, never growing) show. Replay the
//! expanded `results/config.yaml` to send what those runs sent.
//!
//! # What pdsim cannot reproduce, and so refuses
//!
//! Every key is read; each is either honoured or refused by name with the
//! reason. Refused: the `chat` API and non-streaming requests,
//! `ignore_eos: false` (the output length would depend on the model's EOS),
//! request headers (they can steer the llm-d router), sweeps and circuit
//! breakers (decided from live measurements), model servers other than
//! vLLM, and distributions on `shared_prefix` data (this build ignores them
//! while later ones sample lengths from them).
//!
//! # Multi-turn chat, from a later release
//!
//! `data.shared_prefix.enable_multi_turn_chat` did not exist at `3b6f82a`
//! (pydantic would drop it and send single turns); it is replayed as
//! inference-perf v0.3.0 and v0.4.0 send it, the releases whose names the
//! training runs' `profile.yaml` uses (`inference_perf/apis/user_session.py`,
//! `datagen/shared_prefix_datagen.py`, `client/modelserver/openai_client.py`,
//! `loadgen/load_generator.py`): each of the `num_groups ×
//! num_prompts_per_group` questions makes a user session whose context
//! starts as its group's system prompt; request `n` of a stage is a turn of
//! session `n mod sessions`, sent at its scheduled time or, when the
//! session's turn before it is still going, when that ends; it carries the
//! session's context before its question; that prompt and its answer
//! become the context if it is answered, the prompt alone if the server
//! refuses it, and a timed-out turn leaves the context as it was. The
//! simulator's closed loop does the waiting and the
//! context ([`crate::TurnClient::InferencePerf`]); [`multi_turn_request`]
//! makes the turns.
//!
//! # What is approximated, and said
//!
//! [`InferencePerf::notes`] lists it for the run to print: prompts are the
//! configured token counts, while inference-perf sends text decoded from
//! random token ids that the server's tokenizer re-encodes, a few percent
//! longer (the training runs measured 580–604 tokens for 100 + 466); and
//! the gap between stages assumes the previous stage had finished by the
//! first progress poll after its last request was sent.
//!
//! Randomness: inference-perf's shuffles and draws are unseeded; pdsim's
//! are seeded `pdsim_core` streams (shuffle and content ids:
//! `Purpose::Content`; arrivals: `Purpose::Arrivals`, one lane per stage;
//! lengths: `Purpose::Lengths`, lane 0 for inputs, 1 for outputs), so the
//! same seed gives the same requests.

use crate::{RequestSource, RequestSpec, SessionTurn, TraceError, TurnClient};
use pdsim_core::prompt::{content_id, mix64};
use pdsim_core::{ARRIVAL_HORIZON, Prompt, Purpose, Segment, SimDuration, SimTime, Stream};
use pdsim_spec::load::{Source, load};
use pdsim_spec::problem::number;
use rand_distr::{Distribution, Exp1, Normal, Poisson};
use serde::Deserialize;
use serde::de::IgnoredAny;
use std::collections::BTreeMap;

/// Salt of a shared-prefix group's system prompt (keyed by group, mixed
/// with the seed).
pub const IP_SYSTEM_SALT: u64 = u64::from_be_bytes(*b"ip-systm");
/// Salt of a shared-prefix question (keyed by its index in the prompt list
/// before the shuffle, mixed with the seed).
pub const IP_QUESTION_SALT: u64 = u64::from_be_bytes(*b"ip-quest");
/// Salt of a `random` request's prompt, unique to the request (keyed by
/// its request number, mixed with the seed).
pub const IP_RANDOM_SALT: u64 = u64::from_be_bytes(*b"ip-randm");
/// Salt of the one fixed text `synthetic` prompts are cut from.
pub const IP_SONNET_SALT: u64 = u64::from_be_bytes(*b"ip-sonet");

/// `max_tokens` an inference-perf client sends for a request whose own is 0
/// (`openai_client.py`, `max_completion_tokens = 30`).
pub const DEFAULT_MAX_TOKENS: u32 = 30;

/// The client timeout when `load.request_timeout` is null: aiohttp's
/// `DEFAULT_TIMEOUT = ClientTimeout(total=5 * 60, sock_connect=30)`
/// (`aiohttp/client.py`), which a `ClientSession` created without a timeout
/// uses and inference-perf passes `aiohttp.helpers.sentinel` to get.
pub const AIOHTTP_DEFAULT_TIMEOUT_S: f64 = 300.0;

/// Words in the text `synthetic` prompts are cut from (the prompt line and
/// sonnets of `synthetic_datagen.py`). Every tokenizer gives each word at
/// least one token, so a prompt of up to this many tokens is a true prefix
/// of the text; a longer one would be cut short by inference-perf at a
/// length only the model's tokenizer knows.
pub const SONNET_WORDS: u64 = 4185;

/// The most prompts a `shared_prefix` configuration may define; inference-perf
/// keeps them all in memory, and so does pdsim (as indices).
pub const MAX_SHARED_PROMPTS: u64 = 1_000_000;

/// The most requests one stage may send.
pub const MAX_STAGE_REQUESTS: u64 = 100_000_000;

/// The most stages a configuration may have (each gets its own results).
pub const MAX_STAGES: usize = 64;

/// The largest token count any length key may name.
const MAX_LEN: i64 = crate::MAX_TOKENS as i64;

// --- The configuration, key for key (`inference_perf/config.py`) ---------

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
struct Config {
    api: ApiConfig,
    data: DataConfig,
    load: LoadConfig,
    metrics: Option<MetricsClientConfig>,
    report: ReportConfig,
    storage: Option<StorageConfig>,
    server: Option<ServerConfig>,
    tokenizer: Option<TokenizerConfig>,
    circuit_breakers: Option<Vec<IgnoredAny>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
struct ApiConfig {
    #[serde(rename = "type")]
    kind: ApiType,
    streaming: bool,
    headers: Option<BTreeMap<String, String>>,
}

impl Default for ApiConfig {
    fn default() -> Self {
        ApiConfig {
            kind: ApiType::Completion,
            streaming: false,
            headers: None,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
enum ApiType {
    Completion,
    Chat,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
enum DataType {
    #[default]
    #[serde(rename = "mock")]
    Mock,
    #[serde(rename = "shareGPT")]
    ShareGpt,
    #[serde(rename = "synthetic")]
    Synthetic,
    #[serde(rename = "random")]
    Random,
    #[serde(rename = "shared_prefix")]
    SharedPrefix,
    #[serde(rename = "cnn_dailymail")]
    CnnDailyMail,
    #[serde(rename = "infinity_instruct")]
    InfinityInstruct,
    #[serde(rename = "billsum_conversations")]
    Billsum,
}

impl DataType {
    fn name(self) -> &'static str {
        match self {
            DataType::Mock => "mock",
            DataType::ShareGpt => "shareGPT",
            DataType::Synthetic => "synthetic",
            DataType::Random => "random",
            DataType::SharedPrefix => "shared_prefix",
            DataType::CnnDailyMail => "cnn_dailymail",
            DataType::InfinityInstruct => "infinity_instruct",
            DataType::Billsum => "billsum_conversations",
        }
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
struct DataConfig {
    #[serde(rename = "type")]
    kind: DataType,
    path: Option<String>,
    input_distribution: Option<DistributionConfig>,
    output_distribution: Option<DistributionConfig>,
    shared_prefix: Option<SharedPrefixConfig>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
struct DistributionConfig {
    min: i64,
    max: i64,
    mean: f64,
    std_dev: f64,
    total_count: Option<i64>,
}

impl Default for DistributionConfig {
    fn default() -> Self {
        DistributionConfig {
            min: 10,
            max: 1024,
            mean: 512.0,
            std_dev: 200.0,
            total_count: None,
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
struct SharedPrefixConfig {
    #[serde(alias = "num_unique_system_prompts")]
    num_groups: i64,
    #[serde(alias = "num_users_per_system_prompt")]
    num_prompts_per_group: i64,
    system_prompt_len: i64,
    question_len: i64,
    output_len: i64,
    enable_multi_turn_chat: bool,
}

impl Default for SharedPrefixConfig {
    fn default() -> Self {
        SharedPrefixConfig {
            num_groups: 10,
            num_prompts_per_group: 10,
            system_prompt_len: 100,
            question_len: 50,
            output_len: 50,
            enable_multi_turn_chat: false,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
enum LoadType {
    #[default]
    Constant,
    Poisson,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
struct LoadConfig {
    #[serde(rename = "type")]
    kind: LoadType,
    interval: f64,
    stages: Vec<StageConfig>,
    sweep: Option<IgnoredAny>,
    num_workers: Option<i64>,
    worker_max_concurrency: i64,
    worker_max_tcp_connections: i64,
    circuit_breakers: Vec<String>,
    request_timeout: Option<f64>,
}

impl Default for LoadConfig {
    fn default() -> Self {
        LoadConfig {
            kind: LoadType::Constant,
            interval: 1.0,
            stages: Vec::new(),
            sweep: None,
            num_workers: None,
            worker_max_concurrency: 100,
            worker_max_tcp_connections: 2500,
            circuit_breakers: Vec::new(),
            request_timeout: None,
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct StageConfig {
    rate: f64,
    duration: i64,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)] // Read so that its keys are checked; it changes nothing sent.
struct MetricsClientConfig {
    #[serde(rename = "type")]
    kind: MetricsType,
    #[serde(default)]
    prometheus: Option<PrometheusClientConfig>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "lowercase")]
enum MetricsType {
    Prometheus,
    Default,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)]
struct PrometheusClientConfig {
    #[serde(default)]
    scrape_interval: Option<i64>,
    #[serde(default)]
    url: Option<String>,
    #[serde(default)]
    filters: Vec<String>,
    #[serde(default)]
    google_managed: bool,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
#[allow(dead_code)]
struct ReportConfig {
    request_lifecycle: LifecycleReportConfig,
    prometheus: Option<PrometheusReportConfig>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
#[allow(dead_code)]
struct LifecycleReportConfig {
    summary: Option<bool>,
    per_stage: Option<bool>,
    per_request: Option<bool>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
#[allow(dead_code)]
struct PrometheusReportConfig {
    summary: Option<bool>,
    per_stage: Option<bool>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
#[allow(dead_code)]
struct StorageConfig {
    local_storage: Option<StoragePlace>,
    google_cloud_storage: Option<StoragePlace>,
    simple_storage_service: Option<StoragePlace>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
#[allow(dead_code)]
struct StoragePlace {
    bucket_name: Option<String>,
    path: Option<String>,
    report_file_prefix: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
enum ServerType {
    Vllm,
    Sglang,
    Tgi,
    Mock,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)]
struct ServerConfig {
    #[serde(rename = "type", default = "vllm")]
    kind: ServerType,
    #[serde(default)]
    model_name: Option<String>,
    base_url: String,
    #[serde(default = "yes")]
    ignore_eos: bool,
    #[serde(default)]
    api_key: Option<String>,
}

fn vllm() -> ServerType {
    ServerType::Vllm
}

fn yes() -> bool {
    true
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
#[allow(dead_code)]
struct TokenizerConfig {
    pretrained_model_name_or_path: Option<String>,
    trust_remote_code: Option<bool>,
    token: Option<String>,
}

// --- What the configuration resolves to ----------------------------------

/// One load stage as inference-perf runs it.
#[derive(Clone, Debug, PartialEq)]
pub struct StagePlan {
    /// 0-based stage index (inference-perf's `stage_id`).
    pub index: u16,
    /// The configured rate, requests per second.
    pub rate_per_s: f64,
    /// The configured duration, seconds.
    pub duration_s: u64,
    /// Requests the stage sends: `int(rate × duration)`.
    pub requests: u64,
    /// The [`RequestSpec::source_line`] (1-based request number over the
    /// whole run) of the stage's first request.
    pub first_request: u64,
}

impl StagePlan {
    /// Whether the request numbered `source_line` belongs to this stage.
    pub fn contains(&self, source_line: u64) -> bool {
        source_line >= self.first_request && source_line - self.first_request < self.requests
    }
}

/// What a stage's prompts are made of.
#[derive(Clone, Debug)]
enum Data {
    /// Shared-prefix prompts, in the shuffled order they are sent:
    /// entry `i` is the prompt's index before the shuffle, `group *
    /// per_group + question`.
    SharedPrefix {
        order: Vec<u32>,
        per_group: u32,
        system_tokens: u32,
        question_tokens: u32,
        output_tokens: u32,
        /// `enable_multi_turn_chat`: `order` is then the shuffled list of
        /// user sessions (see [`InferencePerf::sessions`]).
        multi_turn: bool,
    },
    /// `random` (unique prompts) or `synthetic` (prefixes of one text).
    Lengths {
        synthetic: bool,
        input: LengthDraw,
        output: LengthDraw,
    },
}

/// `generate_distribution` of one length list, redrawn from the start of
/// its stream for every stage (inference-perf indexes the same list from 0
/// in every stage).
#[derive(Clone, Debug)]
struct LengthDraw {
    normal: Normal<f64>,
    mean: f64,
    min: f64,
    max: f64,
    lane: u32,
}

impl LengthDraw {
    /// `np.round(np.clip(normal, min, max))`, clipped again: numpy rounds
    /// half to even.
    fn draw(&self, stream: &mut Stream) -> u64 {
        let x = self.normal.sample(stream.rng());
        let x = if x.is_finite() { x } else { self.mean };
        x.clamp(self.min, self.max)
            .round_ties_even()
            .clamp(self.min, self.max) as u64
    }
}

/// An inference-perf configuration, checked and ready to send.
pub struct InferencePerf {
    name: String,
    seed: u64,
    stages: Vec<StagePlan>,
    kind: LoadType,
    interval_s: f64,
    data: Data,
    timeout_s: f64,
    notes: Vec<String>,
    // Progress.
    stage: usize,
    /// Request number within the current stage (0-based).
    n: u64,
    /// The current stage's start, in seconds since the run began, and the
    /// arrival of its latest request.
    stage_start_s: f64,
    last_arrival_s: f64,
    timer: Timer,
    input_lengths: Option<Stream>,
    output_lengths: Option<Stream>,
    failed: bool,
    /// Multi-turn chat: each user session's turns so far, by its index
    /// before the shuffle; empty otherwise.
    sessions: Vec<SessionGrowth>,
}

/// What a multi-turn user session has been sent so far, counted as if
/// every turn were answered (the most its prompt can grow to).
#[derive(Clone, Copy, Debug, Default)]
struct SessionGrowth {
    /// Turns sent, over all stages.
    rounds: u32,
    /// Tokens of every turn's text and answer so far.
    tokens: u64,
    /// Pieces (texts and answers) those make.
    segments: usize,
}

/// The load timer of one stage (`load_timer.py`).
enum Timer {
    /// `ConstantLoadTimer`: `count` normalised exponential gaps over
    /// `span_s` seconds from `start_s`; `left` gaps remain, drawn from
    /// `stream`, and `at_s` is the time of the latest.
    Spread {
        stream: Stream,
        scale: f64,
        at_s: f64,
        left: u64,
    },
    /// `PoissonLoadTimer`: whole seconds from `second_s`, each with a Poisson
    /// count of requests spread over it.
    Poisson {
        stream: Stream,
        poisson: Poisson<f64>,
        second_s: f64,
        bucket: Option<Box<Timer>>,
    },
}

impl Timer {
    /// A `ConstantLoadTimer(count, span_s)` started at `start_s`: the
    /// normalisation needs the sum of all gaps first, so the stream is run
    /// once to sum them and then replayed from a copy.
    fn spread(mut stream: Stream, count: u64, span_s: f64, start_s: f64) -> Timer {
        let replay = stream.clone();
        let mut total = 0.0;
        for _ in 0..count {
            let e: f64 = Exp1.sample(stream.rng());
            total += e;
        }
        let scale = if total > 0.0 { span_s / total } else { 0.0 };
        Timer::Spread {
            stream: replay,
            scale,
            at_s: start_s,
            left: count,
        }
    }

    /// The next request time in seconds, or `None` when a spread is used up.
    fn next(&mut self) -> Option<f64> {
        match self {
            Timer::Spread {
                stream,
                scale,
                at_s,
                left,
            } => {
                if *left == 0 {
                    return None;
                }
                *left -= 1;
                let e: f64 = Exp1.sample(stream.rng());
                *at_s += e * *scale;
                Some(*at_s)
            }
            Timer::Poisson {
                stream,
                poisson,
                second_s,
                bucket,
            } => loop {
                if let Some(b) = bucket {
                    if let Some(t) = b.next() {
                        // The next second starts where this one's last
                        // request went (`next_time` carries over).
                        *second_s = t;
                        return Some(t);
                    }
                    *bucket = None;
                }
                let count = poisson.sample(stream.rng()) as u64;
                if count < 1 {
                    *second_s += 1.0;
                    continue;
                }
                // Each second's spread draws from its own copy of the
                // stream's state, then the stream moves on by one draw, so
                // a second's gaps never depend on how many came before.
                let lane_stream = Stream::new(stream.next_u64(), Purpose::Arrivals, 0);
                *bucket = Some(Box::new(Timer::spread(lane_stream, count, 1.0, *second_s)));
            },
        }
    }
}

fn error(source: &Source, path: &str, message: impl Into<String>) -> TraceError {
    let line = source.lines.line_of(path).map_or(0, u64::from);
    TraceError::new(&source.file, line, Some(path), message)
}

impl InferencePerf {
    /// Reads the configuration `text` (named `name` in messages), checks
    /// every key, and prepares the requests it sends under `seed`.
    pub fn new(text: &str, name: &str, seed: u64) -> Result<InferencePerf, TraceError> {
        let source = Source::new(name, text);
        let config: Config = load(&source).map_err(|problems| {
            let p = problems.iter().next().cloned();
            match p {
                Some(p) => TraceError::new(
                    &p.file,
                    p.line.map_or(0, u64::from),
                    (!p.path.is_empty()).then_some(p.path.as_str()),
                    p.message,
                ),
                None => TraceError::new(name, 0, None, "the configuration does not load"),
            }
        })?;
        Self::from_config(&source, config, seed)
    }

    fn from_config(
        source: &Source,
        config: Config,
        seed: u64,
    ) -> Result<InferencePerf, TraceError> {
        let e = |path: &str, message: String| error(source, path, message);
        // The API and the server.
        if config.api.kind == ApiType::Chat {
            return Err(e(
                "api.type",
                "`chat` is refused: the shared_prefix, random and synthetic generators of \
                 inference-perf send only `completion` requests and refuse `chat`"
                    .into(),
            ));
        }
        if !config.api.streaming {
            return Err(e(
                "api.streaming",
                "`false` is refused: pdsim models streamed responses (its TTFT and ITL are the \
                 times of streamed chunks), while a non-streaming client sees one response at \
                 the end; set `streaming: true`"
                    .into(),
            ));
        }
        if config.api.headers.as_ref().is_some_and(|h| !h.is_empty()) {
            return Err(e(
                "api.headers",
                "request headers are refused: they can steer the llm-d router (objectives, \
                 destination endpoints) and pdsim's requests carry none"
                    .into(),
            ));
        }
        let Some(server) = &config.server else {
            return Err(e(
                "server",
                "missing: inference-perf needs a model server (`server.type: vllm`, \
                 `server.base_url`) and refuses to start without one"
                    .into(),
            ));
        };
        if server.kind != ServerType::Vllm {
            let name = match server.kind {
                ServerType::Sglang => "sglang",
                ServerType::Tgi => "tgi",
                _ => "mock",
            };
            return Err(e(
                "server.type",
                format!("`{name}` is refused: pdsim simulates vLLM engines; use `vllm`"),
            ));
        }
        if !server.ignore_eos {
            return Err(e(
                "server.ignore_eos",
                "`false` is refused: the output length would then depend on when the model \
                 samples its end-of-sequence token, which pdsim cannot know; inference-perf's \
                 default, `true`, generates exactly `max_tokens`"
                    .into(),
            ));
        }
        if config
            .circuit_breakers
            .as_ref()
            .is_some_and(|c| !c.is_empty())
        {
            return Err(e(
                "circuit_breakers",
                "circuit breakers are refused: they end a stage on live error rates, a \
                 decision taken from the server's answers, which an open-loop replay cannot \
                 make"
                    .into(),
            ));
        }
        // The load.
        let load = &config.load;
        if load.sweep.is_some() {
            return Err(e(
                "load.sweep",
                "sweeps are refused: inference-perf derives their stages from a saturation \
                 measurement against the live server; write the stages under `load.stages`"
                    .into(),
            ));
        }
        if !load.circuit_breakers.is_empty() {
            return Err(e(
                "load.circuit_breakers",
                "circuit breakers are refused: they end a stage on live error rates, which an \
                 open-loop replay cannot decide"
                    .into(),
            ));
        }
        if !load.interval.is_finite() || load.interval < 0.0 || load.interval > 86_400.0 {
            return Err(e(
                "load.interval",
                format!(
                    "{} must be a number of seconds in [0, 86400]",
                    number(load.interval)
                ),
            ));
        }
        let timeout_s = match load.request_timeout {
            None => AIOHTTP_DEFAULT_TIMEOUT_S,
            // The bound of every client timeout pdsim takes
            // (`workload.client_timeout_s`, `--client-timeout-s`): 30 days.
            Some(t) if t.is_finite() && t > 0.0 && t <= 2_592_000.0 => t,
            Some(t) => {
                return Err(e(
                    "load.request_timeout",
                    format!(
                        "{} must be a positive number of seconds, at most 30 days",
                        number(t)
                    ),
                ));
            }
        };
        if load.worker_max_concurrency < 1 {
            return Err(e(
                "load.worker_max_concurrency",
                format!(
                    "{} must be at least 1: a worker with no concurrency never sends",
                    load.worker_max_concurrency
                ),
            ));
        }
        if load.worker_max_tcp_connections < 1 {
            return Err(e(
                "load.worker_max_tcp_connections",
                format!("{} must be at least 1", load.worker_max_tcp_connections),
            ));
        }
        if let Some(w) = load.num_workers
            && w < 0
        {
            return Err(e("load.num_workers", format!("{w} is negative")));
        }
        if load.num_workers == Some(0) {
            return Err(e(
                "load.num_workers",
                "0 is refused: without workers inference-perf sends from one event loop and \
                 stops each stage at its duration instead of sending int(rate × duration) \
                 requests; pdsim mirrors the worker path (num_workers ≥ 1)"
                    .into(),
            ));
        }
        if load.stages.is_empty() {
            return Err(e(
                "load.stages",
                "no stages: inference-perf refuses a load with neither stages nor a sweep".into(),
            ));
        }
        if load.stages.len() > MAX_STAGES {
            return Err(e(
                "load.stages",
                format!(
                    "{} stages are more than the {MAX_STAGES} pdsim reports on",
                    load.stages.len()
                ),
            ));
        }
        let mut stages = Vec::with_capacity(load.stages.len());
        let mut first_request = 1u64;
        let mut span_s = 0.0f64;
        for (i, s) in load.stages.iter().enumerate() {
            let path = format!("load.stages[{i}]");
            if !s.rate.is_finite() || s.rate <= 0.0 {
                return Err(e(
                    &format!("{path}.rate"),
                    format!(
                        "{} must be a positive number of requests per second",
                        number(s.rate)
                    ),
                ));
            }
            if s.duration < 1 {
                return Err(e(
                    &format!("{path}.duration"),
                    format!("{} must be at least 1 second", s.duration),
                ));
            }
            // Python's int() of the product truncates toward zero.
            let product = s.rate * s.duration as f64;
            if product >= MAX_STAGE_REQUESTS as f64 + 1.0 {
                return Err(e(
                    &path,
                    format!(
                        "rate × duration = {} requests is more than the \
                         {MAX_STAGE_REQUESTS} pdsim sends in one stage",
                        number(product)
                    ),
                ));
            }
            let requests = product.trunc() as u64;
            if requests == 0 {
                return Err(e(
                    &path,
                    format!(
                        "rate × duration = {} rounds down to no request, and \
                         inference-perf divides by the stage's request count (its progress bar \
                         in `run_stage`), so the stage would crash it",
                        number(product)
                    ),
                ));
            }
            span_s += s.duration as f64 + load.interval + 2.0;
            stages.push(StagePlan {
                index: i as u16,
                rate_per_s: s.rate,
                duration_s: s.duration as u64,
                requests,
                first_request,
            });
            first_request += requests;
        }
        if span_s > ARRIVAL_HORIZON.as_ns() as f64 / 1e9 {
            return Err(e(
                "load.stages",
                "the stages last longer than the one year of simulated time pdsim replays".into(),
            ));
        }
        let most = stages.iter().map(|s| s.requests).max().unwrap_or(0);
        // The data.
        let data = &config.data;
        let data_plan = match data.kind {
            DataType::SharedPrefix => {
                for key in ["input_distribution", "output_distribution"] {
                    let given = if key == "input_distribution" {
                        data.input_distribution.is_some()
                    } else {
                        data.output_distribution.is_some()
                    };
                    if given {
                        return Err(e(
                            &format!("data.{key}"),
                            "refused with shared_prefix data: the inference-perf build mirrored \
                             here ignores it, while later releases sample the shared-prefix \
                             lengths from it, so its meaning depends on the release"
                                .into(),
                        ));
                    }
                }
                let Some(sp) = &data.shared_prefix else {
                    return Err(e(
                        "data.shared_prefix",
                        "missing: inference-perf requires `shared_prefix` for shared_prefix data"
                            .into(),
                    ));
                };
                let count = |key: &str, v: i64, low: i64| -> Result<u32, TraceError> {
                    if v < low || v > MAX_LEN {
                        return Err(e(
                            &format!("data.shared_prefix.{key}"),
                            format!("{v} must lie in [{low}, {MAX_LEN}]"),
                        ));
                    }
                    Ok(v as u32)
                };
                let groups = count("num_groups", sp.num_groups, 1)?;
                let per_group = count("num_prompts_per_group", sp.num_prompts_per_group, 1)?;
                let system_tokens = count("system_prompt_len", sp.system_prompt_len, 0)?;
                let question_tokens = count("question_len", sp.question_len, 0)?;
                let output = count("output_len", sp.output_len, 0)?;
                let prompts = groups as u64 * per_group as u64;
                if prompts > MAX_SHARED_PROMPTS {
                    return Err(e(
                        "data.shared_prefix",
                        format!(
                            "num_groups × num_prompts_per_group = {prompts} prompts is more than \
                             the {MAX_SHARED_PROMPTS} pdsim holds"
                        ),
                    ));
                }
                if system_tokens as u64 + question_tokens as u64 == 0 {
                    return Err(e(
                        "data.shared_prefix.question_len",
                        "system_prompt_len and question_len are both 0: every prompt would be \
                         empty, which vLLM refuses"
                            .into(),
                    ));
                }
                // `random.shuffle` is Fisher–Yates from the end; so is this,
                // on a seeded stream in place of Python's unseeded one.
                let mut order: Vec<u32> = (0..prompts as u32).collect();
                let mut shuffle = Stream::new(seed, Purpose::Content, 0);
                for i in (1..order.len()).rev() {
                    let j = shuffle.below(i as u64 + 1) as usize;
                    order.swap(i, j);
                }
                Data::SharedPrefix {
                    order,
                    per_group,
                    system_tokens,
                    question_tokens,
                    output_tokens: if output == 0 {
                        DEFAULT_MAX_TOKENS
                    } else {
                        output
                    },
                    multi_turn: sp.enable_multi_turn_chat,
                }
            }
            DataType::Random | DataType::Synthetic => {
                let synthetic = data.kind == DataType::Synthetic;
                if data.shared_prefix.is_some() {
                    return Err(e(
                        "data.shared_prefix",
                        format!(
                            "inference-perf refuses `shared_prefix` with {} data (\"Shared \
                             prefix not supported for this data generator\")",
                            data.kind.name()
                        ),
                    ));
                }
                // main.py fills a missing total_count with
                // int(max(rate × duration)) + 1.
                let default_count = most + 1;
                let draw = |key: &str,
                            d: &Option<DistributionConfig>,
                            lane: u32,
                            min_floor: i64|
                 -> Result<LengthDraw, TraceError> {
                    let Some(d) = d else {
                        return Err(e(
                            &format!("data.{key}"),
                            format!(
                                "missing: inference-perf's {} data generator requires it",
                                data.kind.name()
                            ),
                        ));
                    };
                    let p = |k: &str| format!("data.{key}.{k}");
                    if d.min > d.max {
                        return Err(e(
                            &p("min"),
                            format!("{} is greater than max, {}", d.min, d.max),
                        ));
                    }
                    if d.min < min_floor || d.max > MAX_LEN {
                        return Err(e(
                            &p(if d.min < min_floor { "min" } else { "max" }),
                            if min_floor > 0 {
                                format!(
                                    "lengths must lie in [{min_floor}, {MAX_LEN}]: a prompt of \
                                     0 tokens is empty, which vLLM refuses"
                                )
                            } else {
                                format!("lengths must lie in [0, {MAX_LEN}]")
                            },
                        ));
                    }
                    if !d.std_dev.is_finite() || d.std_dev < 0.0 {
                        return Err(e(
                            &p("std_dev"),
                            format!(
                                "{} must be a finite number, not negative",
                                number(d.std_dev)
                            ),
                        ));
                    }
                    if !d.mean.is_finite() || d.mean < d.min as f64 || d.mean > d.max as f64 {
                        return Err(e(
                            &p("mean"),
                            format!(
                                "{} lies outside [min, max] = [{}, {}], which inference-perf \
                                 refuses",
                                number(d.mean),
                                d.min,
                                d.max
                            ),
                        ));
                    }
                    let total = d.total_count.unwrap_or(default_count as i64);
                    if total < 1 {
                        return Err(e(
                            &p("total_count"),
                            format!("{total} must be a positive integer"),
                        ));
                    }
                    if (total as u64) < most {
                        return Err(e(
                            &p("total_count"),
                            format!(
                                "{total} lengths are fewer than the {most} requests of the \
                                 largest stage: inference-perf indexes the list by request \
                                 number and its worker fails past the end"
                            ),
                        ));
                    }
                    let normal = Normal::new(d.mean, d.std_dev).map_err(|err| {
                        e(&p("std_dev"), format!("no normal distribution: {err}"))
                    })?;
                    Ok(LengthDraw {
                        normal,
                        mean: d.mean,
                        min: d.min as f64,
                        max: d.max as f64,
                        lane,
                    })
                };
                let input = draw("input_distribution", &data.input_distribution, 0, 1)?;
                let output = draw("output_distribution", &data.output_distribution, 1, 0)?;
                if synthetic && input.max as u64 > SONNET_WORDS {
                    return Err(e(
                        "data.input_distribution.max",
                        format!(
                            "{} is refused: synthetic prompts are cut from one fixed text of \
                             {SONNET_WORDS} words, and a longer prompt would be cut short at a \
                             length only the model's tokenizer knows; keep max at most \
                             {SONNET_WORDS}",
                            input.max
                        ),
                    ));
                }
                Data::Lengths {
                    synthetic,
                    input,
                    output,
                }
            }
            other => {
                return Err(e(
                    "data.type",
                    format!(
                        "`{}` is refused: pdsim reads inference-perf's shared_prefix, random \
                         and synthetic data, whose token counts the configuration fixes; {} \
                         prompts come from a dataset or the mock generator, which pdsim does \
                         not have",
                        other.name(),
                        other.name()
                    ),
                ));
            }
        };
        // Notes: what is approximated, said once per run.
        let mut notes = vec![format!(
            "{}: note: prompts are the configured token counts; inference-perf sends text \
             decoded from random token ids, which the server's tokenizer re-encodes into a \
             few percent more tokens",
            source.file
        )];
        if stages.len() > 1 {
            notes.push(format!(
                "{}: note: each stage after the first starts load.interval + 2 s after the \
                 previous stage's last request was sent; inference-perf waits for that stage's \
                 requests to finish first, which only matters if they take longer than 1 s",
                source.file
            ));
        }
        let cap = load
            .num_workers
            .map(|w| w as u128 * load.worker_max_concurrency as u128);
        let sessions = match &data_plan {
            Data::SharedPrefix {
                order,
                per_group,
                multi_turn: true,
                ..
            } => {
                notes.extend(multi_turn_notes(
                    &source.file,
                    &stages,
                    order.len() as u64,
                    (order.len() / *per_group as usize) as u64,
                    load.num_workers,
                    load.worker_max_concurrency,
                ));
                vec![SessionGrowth::default(); order.len()]
            }
            _ => Vec::new(),
        };
        // Under multi-turn chat the bound is per worker (its notes say so).
        if sessions.is_empty() && cap.is_none_or(|c| c < most as u128) {
            let cap_text = match cap {
                Some(c) => format!("{c} (num_workers × worker_max_concurrency)"),
                None => format!(
                    "num_workers (the client's CPU count, unknown here) × {}",
                    load.worker_max_concurrency
                ),
            };
            notes.push(format!(
                "{}: note: inference-perf holds a request back while {cap_text} are in flight; \
                 pdsim sends every request at its time, so a run with more in flight than that \
                 differs from inference-perf's",
                source.file
            ));
        }
        let input_lengths = match &data_plan {
            Data::Lengths { input, .. } => Some(Stream::new(seed, Purpose::Lengths, input.lane)),
            Data::SharedPrefix { .. } => None,
        };
        let output_lengths = match &data_plan {
            Data::Lengths { output, .. } => Some(Stream::new(seed, Purpose::Lengths, output.lane)),
            Data::SharedPrefix { .. } => None,
        };
        let first = &stages[0];
        let timer = start_timer(load.kind, seed, first, 0.0);
        Ok(InferencePerf {
            name: source.file.clone(),
            seed,
            kind: load.kind,
            interval_s: load.interval,
            timer,
            stages,
            data: data_plan,
            timeout_s,
            notes,
            stage: 0,
            n: 0,
            stage_start_s: 0.0,
            last_arrival_s: 0.0,
            input_lengths,
            output_lengths,
            failed: false,
            sessions,
        })
    }

    /// The stages, in order, with the request numbers each covers.
    pub fn stages(&self) -> &[StagePlan] {
        &self.stages
    }

    /// The client's per-request timeout in seconds: `load.request_timeout`,
    /// or aiohttp's default of 300 s when it is null. inference-perf gives
    /// up on a request after this long and records it as failed.
    pub fn client_timeout_s(&self) -> f64 {
        self.timeout_s
    }

    /// What this replay approximates, one message per line, for the run to
    /// print.
    pub fn notes(&self) -> &[String] {
        &self.notes
    }
}

/// Salt of a multi-turn user session's key (keyed by the session's index
/// before the shuffle, mixed with the seed).
pub const IP_SESSION_SALT: u64 = u64::from_be_bytes(*b"ip-sessn");
/// Salt of the answer of a multi-turn session's turn (keyed by the session
/// key and the turn).
pub const IP_ANSWER_SALT: u64 = u64::from_be_bytes(*b"ip-answr");

/// Request `n` of a stage under multi-turn chat, as inference-perf v0.4.0
/// builds it (`inference_perf/datagen/shared_prefix_datagen.py`,
/// `load_lazy_data`): user session `sessions[n % len]` of the shuffled list
/// (`random.shuffle(self.user_sessions)`; v0.3.0 shuffled the questions
/// instead, which pairs sessions and questions just as randomly), with the
/// question `prompts[n % len]` of the unshuffled list. A session's context
/// starts as its group's system prompt (`LocalUserSession(context=
/// shared_prefix_text)`), so its first turn is the system prompt and the
/// question, and every later turn only the question: the simulator puts
/// the session's context before it when the client sends it
/// ([`TurnClient::InferencePerf`]). Returns the turn, its answer's content
/// id and the turn's own text; or why the session would outgrow what pdsim
/// holds if every turn were answered.
fn multi_turn_request(
    sessions: &mut [SessionGrowth],
    order: &[u32],
    n: u64,
    per_group: u32,
    (system_tokens, question_tokens, output_tokens): (u32, u32, u32),
    salt: u64,
) -> Result<(SessionTurn, u64, Prompt), String> {
    let slot = (n % order.len() as u64) as usize;
    let user = order[slot];
    let question = Segment {
        id: content_id(slot as u64 ^ salt, IP_QUESTION_SALT),
        tokens: question_tokens,
    };
    let grown = &mut sessions[user as usize];
    let prompt = if grown.rounds == 0 {
        Prompt::new(vec![
            Segment {
                id: content_id((user / per_group) as u64 ^ salt, IP_SYSTEM_SALT),
                tokens: system_tokens,
            },
            question,
        ])
    } else {
        Prompt::new(vec![question])
    };
    let tokens = grown.tokens + prompt.tokens();
    let segments = grown.segments + prompt.segments.len();
    if tokens > crate::MAX_TOKENS {
        return Err(format!(
            "user session {user}'s prompt would reach {tokens} tokens at its turn {} if every \
             turn before it were answered (each turn sends the history, its answers and a new \
             question), more than the {} pdsim accepts; shorten the stages or use more \
             sessions (num_groups × num_prompts_per_group)",
            grown.rounds + 1,
            crate::MAX_TOKENS
        ));
    }
    if segments + 1 > crate::MAX_SESSION_SEGMENTS {
        return Err(format!(
            "user session {user} would send more than {} turns, whose history pdsim bounds \
             at {} pieces; shorten the stages or use more sessions (num_groups × \
             num_prompts_per_group)",
            grown.rounds,
            crate::MAX_SESSION_SEGMENTS
        ));
    }
    let key = content_id(user as u64 ^ salt, IP_SESSION_SALT);
    let turn = SessionTurn {
        key,
        round: grown.rounds,
        think_time: SimDuration::ZERO,
        client: TurnClient::InferencePerf,
    };
    let answer = content_id(key ^ (grown.rounds as u64).rotate_left(32), IP_ANSWER_SALT);
    grown.rounds += 1;
    grown.tokens = tokens + output_tokens as u64;
    grown.segments = segments + 1;
    Ok((turn, answer, prompt))
}

/// What a multi-turn replay approximates, for the run to print.
fn multi_turn_notes(
    file: &str,
    stages: &[StagePlan],
    sessions: u64,
    groups: u64,
    workers: Option<i64>,
    worker_max_concurrency: i64,
) -> Vec<String> {
    let mut notes = vec![format!(
        "{file}: note: enable_multi_turn_chat is replayed as inference-perf v0.3.0–v0.4.0 sends \
         it (the build mirrored for the other keys, 3b6f82a, did not know the key and sent \
         single turns): request n of a stage goes to user session n mod {sessions}; a turn \
         waits for its session's turn before it to end, its client timeout counts from its \
         send, and it carries the session's history (system prompt, every answered turn's \
         question and answer) before its question; a timed-out turn leaves the history as it \
         was, and a refused one (an error response) adds its prompt with no answer"
    )];
    notes.push(format!(
        "{file}: note: a multi-turn prompt's length is the sum of its parts' token counts: the \
         spaces inference-perf joins them with and the re-tokenisation of the answers' text \
         are not counted"
    ));
    // Each worker has its own queue under multi-turn chat (`load_generator.
    // py`: a channel per worker when the data generator asks for preferred
    // workers), fed the requests whose `n mod num_groups` maps to it, and it
    // holds at most `worker_max_concurrency` of them at once, also while
    // they sleep until their time or wait for their session's turn.
    let most = stages.iter().map(|s| s.requests).max().unwrap_or(0);
    // Request n goes to worker (n mod num_groups) mod num_workers
    // (`RequestQueue.get_channel`); group g of a stage of `most` requests
    // gets most / groups of them, and one more when g < most mod groups.
    let per_worker = workers.map(|w| {
        let groups = groups.max(1);
        let channels = (w as u64).clamp(1, groups);
        let mut load = vec![0u64; channels as usize];
        for g in 0..groups {
            load[(g % channels) as usize] += most / groups + u64::from(g < most % groups);
        }
        load.into_iter().max().unwrap_or(0)
    });
    if per_worker.is_none_or(|p| p > worker_max_concurrency as u64) {
        notes.push(format!(
            "{file}: note: under multi-turn chat each inference-perf worker takes the requests of \
             its own sessions and holds at most worker_max_concurrency ({worker_max_concurrency}) \
             of them at once, also while they wait for their session's turn before them; {}, so \
             it may hold requests back, which pdsim does not",
            match per_worker {
                Some(p) => format!("a worker may be given up to {p} requests in a stage"),
                None => "num_workers (the client's CPU count) is not given".to_string(),
            }
        ));
    }
    notes
}

/// The timer of `stage` started at `start_s`, on the stage's own arrivals
/// lane.
fn start_timer(kind: LoadType, seed: u64, stage: &StagePlan, start_s: f64) -> Timer {
    let stream = Stream::new(seed, Purpose::Arrivals, stage.index as u32);
    match kind {
        LoadType::Constant => {
            Timer::spread(stream, stage.requests, stage.duration_s as f64, start_s)
        }
        LoadType::Poisson => Timer::Poisson {
            stream,
            // The rate was checked positive and finite; Poisson::new
            // refuses only rates beyond its MAX_LAMBDA (about 1.8e19),
            // far above MAX_STAGE_REQUESTS per second.
            poisson: Poisson::new(stage.rate_per_s)
                .unwrap_or_else(|_| Poisson::new(1.0).expect("a Poisson rate of 1 is valid")),
            second_s: start_s,
            bucket: None,
        },
    }
}

impl Iterator for InferencePerf {
    type Item = Result<RequestSpec, TraceError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed {
            return None;
        }
        while self.n == self.stages.get(self.stage)?.requests {
            // The next stage: inference-perf's progress loop polls every
            // second from 1 s before the stage's start, the interval
            // follows, and the next stage starts 1 s after it begins.
            self.stage += 1;
            self.n = 0;
            let stage = self.stages.get(self.stage)?;
            // The first poll strictly after the last request was sent
            // (it cannot have finished earlier); the offset is rounded to
            // a microsecond first, so a last arrival that the normalised
            // gaps put at the stage's end up to rounding counts as there.
            let since_first_poll = self.last_arrival_s - (self.stage_start_s - 1.0);
            let since_first_poll = (since_first_poll * 1e6).round() / 1e6;
            let poll = self.stage_start_s - 1.0 + since_first_poll.floor() + 1.0;
            self.stage_start_s = poll + self.interval_s + 1.0;
            self.timer = start_timer(self.kind, self.seed, stage, self.stage_start_s);
            if let Data::Lengths { input, output, .. } = &self.data {
                self.input_lengths = Some(Stream::new(self.seed, Purpose::Lengths, input.lane));
                self.output_lengths = Some(Stream::new(self.seed, Purpose::Lengths, output.lane));
            }
        }
        let stage = &self.stages[self.stage];
        let n = self.n;
        self.n += 1;
        let source_line = stage.first_request + n;
        let at_s = self.timer.next().unwrap_or(self.last_arrival_s);
        self.last_arrival_s = at_s;
        let arrival = match SimDuration::checked_from_secs_f64(at_s) {
            Some(d)
                if SimTime::ZERO
                    .checked_add(d)
                    .is_some_and(|t| t <= ARRIVAL_HORIZON) =>
            {
                SimTime::ZERO.checked_add(d).unwrap_or(ARRIVAL_HORIZON)
            }
            _ => {
                self.failed = true;
                return Some(Err(TraceError::new(
                    &self.name,
                    0,
                    Some(&format!("load.stages[{}]", stage.index)),
                    format!(
                        "request {source_line} would be sent {at_s} s after the start, beyond \
                         the one year of simulated time pdsim replays"
                    ),
                )));
            }
        };
        let salt = mix64(self.seed);
        let mut session = None;
        let mut output_id = None;
        let (prompt, output_tokens) = match &self.data {
            Data::SharedPrefix {
                order,
                per_group,
                system_tokens,
                question_tokens,
                output_tokens,
                multi_turn,
            } => {
                if *multi_turn {
                    let turn = match multi_turn_request(
                        &mut self.sessions,
                        order,
                        n,
                        *per_group,
                        (*system_tokens, *question_tokens, *output_tokens),
                        salt,
                    ) {
                        Ok(turn) => turn,
                        Err(message) => {
                            self.failed = true;
                            return Some(Err(TraceError::new(
                                &self.name,
                                0,
                                Some("data.shared_prefix.enable_multi_turn_chat"),
                                format!("request {source_line}: {message}"),
                            )));
                        }
                    };
                    session = Some(turn.0);
                    output_id = Some(turn.1);
                    (turn.2, *output_tokens)
                } else {
                    let index = order[(n % order.len() as u64) as usize];
                    let group = index / per_group;
                    let prompt = Prompt::new(vec![
                        Segment {
                            id: content_id(group as u64 ^ salt, IP_SYSTEM_SALT),
                            tokens: *system_tokens,
                        },
                        Segment {
                            id: content_id(index as u64 ^ salt, IP_QUESTION_SALT),
                            tokens: *question_tokens,
                        },
                    ]);
                    (prompt, *output_tokens)
                }
            }
            Data::Lengths {
                synthetic,
                input,
                output,
            } => {
                let input_tokens = match self.input_lengths.as_mut() {
                    Some(s) => input.draw(s),
                    None => 1,
                };
                let output_tokens = match self.output_lengths.as_mut() {
                    Some(s) => output.draw(s),
                    None => 1,
                };
                let id = if *synthetic {
                    content_id(self.seed, IP_SONNET_SALT)
                } else {
                    // Fresh random tokens for every request sent, also
                    // when a later stage reuses the length at index n.
                    content_id(source_line ^ salt, IP_RANDOM_SALT)
                };
                let prompt = Prompt::new(vec![Segment {
                    id,
                    tokens: input_tokens as u32,
                }]);
                let output_tokens = if output_tokens == 0 {
                    DEFAULT_MAX_TOKENS
                } else {
                    output_tokens as u32
                };
                (prompt, output_tokens)
            }
        };
        Some(Ok(RequestSpec {
            arrival,
            prompt,
            output_tokens,
            priority: 0,
            slo_class: 0,
            source_line,
            // The client gives up after `load.request_timeout` (aiohttp's
            // 300 s when it is null); a run's own client timeout, if
            // shorter, tightens it (`with_client_timeout`).
            deadline: Some(arrival + SimDuration::from_secs_f64(self.timeout_s)),
            session,
            output_id,
        }))
    }
}

impl RequestSource for InferencePerf {}

/// The top-level keys of an inference-perf configuration, for telling one
/// apart from a trace.
pub(crate) const TOP_LEVEL_KEYS: &[&str] = &[
    "api",
    "data",
    "load",
    "metrics",
    "report",
    "storage",
    "server",
    "tokenizer",
    "circuit_breakers",
];

#[cfg(test)]
mod tests {
    use super::*;

    const EXPANDED: &str = "\
api:
  type: completion
  streaming: true
  headers: null
data:
  type: shared_prefix
  path: null
  input_distribution: null
  output_distribution: null
  shared_prefix:
    num_groups: 3
    num_prompts_per_group: 2
    system_prompt_len: 150
    question_len: 600
    output_len: 251
load:
  type: constant
  interval: 1.0
  stages:
  - rate: 5.0
    duration: 4
  - rate: 2.5
    duration: 2
  sweep: null
  num_workers: 224
  worker_max_concurrency: 100
  worker_max_tcp_connections: 2500
  circuit_breakers: []
  request_timeout: null
metrics: null
report:
  request_lifecycle:
    summary: true
    per_stage: true
    per_request: true
  prometheus:
    summary: true
    per_stage: false
storage:
  local_storage:
    path: /tmp/x
    report_file_prefix: null
  google_cloud_storage: null
  simple_storage_service: null
server:
  type: vllm
  model_name: meta-llama/Llama-2-7b-hf
  base_url: http://10.0.0.1:8000
  ignore_eos: true
  api_key: null
tokenizer:
  pretrained_model_name_or_path: meta-llama/Llama-2-7b-hf
  trust_remote_code: null
  token: null
circuit_breakers: null
";

    fn all(text: &str, seed: u64) -> (InferencePerf, Vec<RequestSpec>) {
        let reader = InferencePerf::new(text, "c.yaml", seed).unwrap();
        let stages = reader.stages().to_vec();
        let notes = reader.notes().to_vec();
        let specs: Vec<RequestSpec> = reader.map(|r| r.unwrap()).collect();
        let again = InferencePerf::new(text, "c.yaml", seed).unwrap();
        assert_eq!(again.stages(), &stages[..]);
        assert_eq!(again.notes(), &notes[..]);
        (again, specs)
    }

    #[test]
    fn shared_prefix_cycles_its_shuffled_prompts_and_restarts_each_stage() {
        let (reader, specs) = all(EXPANDED, 7);
        let stages = reader.stages();
        // int(rate × duration) per stage, numbered over the whole run.
        assert_eq!(stages.len(), 2);
        assert_eq!((stages[0].requests, stages[0].first_request), (20, 1));
        assert_eq!((stages[1].requests, stages[1].first_request), (5, 21));
        assert_eq!(specs.len(), 25);
        let lines: Vec<u64> = specs.iter().map(|s| s.source_line).collect();
        assert_eq!(lines, (1..=25).collect::<Vec<u64>>());
        // 3 groups × 2 questions = 6 prompts, each 150 + 600 tokens with
        // 251 to generate.
        for s in &specs {
            assert_eq!(s.prompt.segments.len(), 2);
            assert_eq!(s.prompt.segments[0].tokens, 150);
            assert_eq!(s.prompt.segments[1].tokens, 600);
            assert_eq!(s.output_tokens, 251);
        }
        // Request n sends prompts[n % 6]: the cycle repeats every 6, holds
        // each of the 6 prompts once, and starts again with stage 1.
        let key = |s: &RequestSpec| (s.prompt.segments[0].id, s.prompt.segments[1].id);
        for i in 6..20 {
            assert_eq!(key(&specs[i]), key(&specs[i - 6]), "request {i}");
        }
        let cycle: std::collections::BTreeSet<_> = specs[..6].iter().map(key).collect();
        assert_eq!(cycle.len(), 6);
        for i in 0..5 {
            assert_eq!(key(&specs[20 + i]), key(&specs[i]), "stage 1 request {i}");
        }
        // Three system prompts, each shared by exactly its two questions.
        let mut by_system: BTreeMap<u64, std::collections::BTreeSet<u64>> = BTreeMap::new();
        for s in &specs {
            by_system
                .entry(s.prompt.segments[0].id)
                .or_default()
                .insert(s.prompt.segments[1].id);
        }
        assert_eq!(by_system.len(), 3);
        assert!(by_system.values().all(|q| q.len() == 2));
        // Shared at token granularity: two prompts of one group share
        // exactly the 150 system-prompt tokens (9 whole 16-token blocks and
        // 6 tokens of the tenth), and prompts of different groups nothing.
        let a = specs
            .iter()
            .find(|s| {
                s.prompt.segments[0].id == specs[0].prompt.segments[0].id
                    && key(s) != key(&specs[0])
            })
            .unwrap();
        let (ha, hb) = (
            pdsim_core::prompt::block_hashes(&specs[0].prompt, 16),
            pdsim_core::prompt::block_hashes(&a.prompt, 16),
        );
        assert_eq!(ha[..9], hb[..9]);
        assert_ne!(ha[9], hb[9]);
        let (h1, h2) = (
            pdsim_core::prompt::block_hashes(&specs[0].prompt, 1),
            pdsim_core::prompt::block_hashes(&a.prompt, 1),
        );
        assert_eq!(h1[..150], h2[..150]);
        assert_ne!(h1[150], h2[150]);
        // The seed decides the shuffle and the content, nothing else.
        let (_, other) = all(EXPANDED, 8);
        assert_eq!(other.len(), 25);
        assert_ne!(key(&other[0]), key(&specs[0]));
    }

    /// [`EXPANDED`] with multi-turn chat on.
    fn multi_turn() -> String {
        EXPANDED.replace(
            "    output_len: 251",
            "    output_len: 251\n    enable_multi_turn_chat: true",
        )
    }

    /// [`multi_turn`] with one user session of these lengths and one stage.
    fn one_session(system: &str, question: &str, output: &str, stage: &str) -> String {
        multi_turn()
            .replace("num_groups: 3", "num_groups: 1")
            .replace("num_prompts_per_group: 2", "num_prompts_per_group: 1")
            .replace("system_prompt_len: 150", system)
            .replace("question_len: 600", question)
            .replace("output_len: 251", output)
            .replace("  - rate: 5.0\n    duration: 4", stage)
    }

    /// Multi-turn chat as inference-perf v0.4.0 sends it: request n of a
    /// stage is a turn of user session `sessions[n % 6]`; its first turn
    /// is the group's system prompt and its question, every later turn the
    /// question alone (the simulator puts the context before it); the
    /// turns of a session count on across stages, while `n` restarts.
    #[test]
    fn multi_turn_chat_makes_each_user_session_a_closed_loop_conversation() {
        let text = multi_turn();
        let (reader, specs) = all(&text, 7);
        assert_eq!(specs.len(), 25);
        let Data::SharedPrefix { order, .. } = &reader.data else {
            panic!("shared prefix");
        };
        let turn = |s: &RequestSpec| s.session.expect("every request is a turn");
        let system_of = |user: u32| content_id((user / 2) as u64 ^ mix64(7), IP_SYSTEM_SALT);
        let question_of = |slot: u64| content_id(slot ^ mix64(7), IP_QUESTION_SALT);
        let mut answers = std::collections::BTreeSet::new();
        for (i, s) in specs.iter().enumerate() {
            // Stage 1 (requests 20..25) restarts n at 0.
            let n = if i < 20 { i } else { i - 20 } as u64;
            let user = order[(n % 6) as usize];
            let t = turn(s);
            assert_eq!(t.client, TurnClient::InferencePerf);
            assert_eq!(t.think_time, SimDuration::ZERO);
            assert_eq!(t.key, content_id(user as u64 ^ mix64(7), IP_SESSION_SALT));
            assert_eq!(s.output_tokens, 251);
            assert_eq!(
                s.deadline,
                Some(s.arrival + SimDuration::from_secs_f64(300.0)),
                "the timeout counts from the send; the simulator moves it with the send"
            );
            let question = Segment {
                id: question_of(n % 6),
                tokens: 600,
            };
            if t.round == 0 {
                assert_eq!(
                    s.prompt.segments,
                    vec![
                        Segment {
                            id: system_of(user),
                            tokens: 150
                        },
                        question
                    ],
                    "request {i}"
                );
            } else {
                assert_eq!(s.prompt.segments, vec![question], "request {i}");
            }
            assert_eq!(
                s.output_id,
                Some(content_id(
                    t.key ^ (t.round as u64).rotate_left(32),
                    IP_ANSWER_SALT
                ))
            );
            assert!(answers.insert(s.output_id), "every answer is new content");
        }
        // Each session's turns are numbered 0, 1, 2, … over the whole run.
        let mut by_session: BTreeMap<u64, Vec<u32>> = BTreeMap::new();
        for s in &specs {
            by_session
                .entry(turn(s).key)
                .or_default()
                .push(turn(s).round);
        }
        assert_eq!(by_session.len(), 6);
        for rounds in by_session.values() {
            assert_eq!(*rounds, (0..rounds.len() as u32).collect::<Vec<u32>>());
        }
        // 20 requests over 6 slots (slots 0 and 1 get 4, the others 3),
        // then 5 more to slots 0-4: slot 0 sends 5 turns, slot 5 sends 3.
        let user0 = content_id(order[0] as u64 ^ mix64(7), IP_SESSION_SALT);
        let user5 = content_id(order[5] as u64 ^ mix64(7), IP_SESSION_SALT);
        assert_eq!(by_session[&user0].len(), 5);
        assert_eq!(by_session[&user5].len(), 3);
        assert!(
            reader
                .notes()
                .iter()
                .any(|n| n.contains("enable_multi_turn_chat is replayed"))
        );
        // 224 workers hold every session's requests well within 100 each.
        assert!(
            !reader
                .notes()
                .iter()
                .any(|n| n.contains("worker_max_concurrency"))
        );
        // The notes with `workers` workers of `cap` requests each.
        let notes = |workers: u32, cap: u32| {
            let text = text
                .replace("num_workers: 224", &format!("num_workers: {workers}"))
                .replace(
                    "worker_max_concurrency: 100",
                    &format!("worker_max_concurrency: {cap}"),
                );
            all(&text, 7).0.notes().to_vec()
        };
        let says = |notes: &[String], what: &str| notes.iter().any(|n| n.contains(what));
        // One worker takes all 20 requests of stage 0.
        assert!(says(&notes(1, 19), "up to 20 requests"));
        assert!(!says(&notes(1, 20), "worker_max_concurrency"));
        // Two workers share three groups: worker 0 takes groups 0 and 2
        // (7 + 6 of stage 0's 20 requests), worker 1 group 1 (7).
        assert!(says(&notes(2, 12), "up to 13 requests"));
        assert!(!says(&notes(2, 13), "worker_max_concurrency"));
    }

    /// A session whose prompt, if every turn were answered, would outgrow
    /// what pdsim accepts is refused when its turn is read, naming the key.
    #[test]
    fn a_multi_turn_session_that_would_outgrow_the_token_limit_is_refused() {
        let text = one_session(
            "system_prompt_len: 150",
            "question_len: 3000000",
            "output_len: 251",
            "  - rate: 5.0\n    duration: 4",
        );
        let reader = InferencePerf::new(&text, "c.yaml", 1).unwrap();
        let out: Vec<_> = reader.collect();
        // Turn 3 would be 150 + 3 × 3,000,000 + 2 × 251 tokens; turn 4
        // would pass 10,000,000.
        assert_eq!(out.len(), 4);
        assert!(out[..3].iter().all(Result::is_ok));
        assert_eq!(
            out[2].as_ref().unwrap().prompt.tokens(),
            3_000_000,
            "the turn's own text; the history is the simulator's"
        );
        let e = out[3].as_ref().unwrap_err().to_string();
        assert!(
            e.contains("data.shared_prefix.enable_multi_turn_chat"),
            "{e}"
        );
        assert!(e.contains("request 4"), "{e}");
        assert!(e.contains("12000903 tokens at its turn 4"), "{e}");
    }

    /// A session's prompt may reach exactly the token limit, and its
    /// history exactly the pieces pdsim holds; one more is refused.
    #[test]
    fn a_multi_turn_session_may_reach_the_limits_exactly() {
        // Turn 2 is 2 × 4,999,985 + 30 = 10,000,000 tokens: accepted.
        let text = one_session(
            "system_prompt_len: 0",
            "question_len: 4999985",
            "output_len: 30",
            "  - rate: 5.0\n    duration: 4",
        );
        let out: Vec<_> = InferencePerf::new(&text, "c.yaml", 1).unwrap().collect();
        assert_eq!(out.len(), 3);
        assert!(out[1].is_ok(), "{:?}", out[1].as_ref().err());
        let e = out[2].as_ref().unwrap_err().to_string();
        assert!(e.contains("15000015 tokens at its turn 3"), "{e}");
        // One token of question and one out. With one token of system
        // prompt turn 1 holds 3 pieces with its answer and every later
        // turn 2 more, so turn k's prompt and answer are 2k + 1 pieces:
        // turn 4,095 fills 8,191 and turn 4,096 (8,193) is refused. With
        // none, turn k holds 2k: turn 4,096 fills the 8,192 exactly and
        // turn 4,097 is refused.
        for (system, last_ok) in [(1, 4095usize), (0, 4096)] {
            let text = one_session(
                &format!("system_prompt_len: {system}"),
                "question_len: 1",
                "output_len: 1",
                "  - rate: 100.0\n    duration: 41",
            );
            let out: Vec<_> = InferencePerf::new(&text, "c.yaml", 1).unwrap().collect();
            assert_eq!(out.len(), last_ok + 1);
            assert!(out[..last_ok].iter().all(Result::is_ok));
            let e = out[last_ok].as_ref().unwrap_err().to_string();
            assert!(e.contains(&format!("more than {last_ok} turns")), "{e}");
            assert!(e.contains(&format!("request {}", last_ok + 1)), "{e}");
        }
    }

    /// The prompts are shuffled as `random.shuffle` shuffles (Fisher–Yates:
    /// each position swaps with any position up to itself, itself
    /// included), so a shuffle may leave a prompt where it was; a shuffle
    /// that never did (Sattolo's, which swaps only below) would give only
    /// cyclic orders. Over 40 seeds of 6 prompts about 1 − 1/e of them
    /// keep one in place.
    #[test]
    fn the_prompt_shuffle_can_leave_a_prompt_in_place() {
        let mut kept = 0;
        for seed in 0..40 {
            let reader = InferencePerf::new(EXPANDED, "c.yaml", seed).unwrap();
            let Data::SharedPrefix { order, .. } = &reader.data else {
                panic!("shared prefix");
            };
            let mut sorted = order.clone();
            sorted.sort();
            assert_eq!(sorted, (0..6).collect::<Vec<u32>>(), "a permutation");
            kept += usize::from(order.iter().enumerate().any(|(i, p)| i as u32 == *p));
        }
        assert!(
            (15..=35).contains(&kept),
            "{kept} of 40 kept a prompt in place"
        );
    }

    #[test]
    fn constant_stages_end_exactly_at_their_duration_and_start_after_the_gap() {
        let (_, specs) = all(EXPANDED, 1);
        let s = |i: usize| specs[i].arrival.as_ns() as f64 / 1e9;
        // Arrivals are non-decreasing, stage 0 spans (0, 4] and its last
        // request goes at 4 s exactly (the gaps are normalised).
        for i in 1..specs.len() {
            assert!(specs[i].arrival >= specs[i - 1].arrival);
        }
        assert!(s(0) > 0.0);
        assert!((s(19) - 4.0).abs() < 1e-6, "{}", s(19));
        // Stage 1 starts at the first poll after 4 s (5 s), plus the
        // interval (1 s), plus the 1 s lead: 7 s; its last request at 9 s.
        assert!(s(20) > 7.0 && s(20) < 9.0, "{}", s(20));
        assert!((s(24) - 9.0).abs() < 1e-6, "{}", s(24));
    }

    #[test]
    fn poisson_draws_a_count_per_second_and_sends_the_stage_count() {
        let text = EXPANDED.replace("type: constant", "type: poisson");
        let (reader, specs) = all(&text, 3);
        assert_eq!(specs.len(), 25);
        assert_eq!(reader.stages()[0].requests, 20);
        for i in 1..specs.len() {
            assert!(specs[i].arrival >= specs[i - 1].arrival);
        }
        // Reproducible from the seed, and different with another.
        let (_, again) = all(&text, 3);
        assert_eq!(again, specs);
        let (_, other) = all(&text, 4);
        assert_ne!(
            other.iter().map(|s| s.arrival).collect::<Vec<_>>(),
            specs.iter().map(|s| s.arrival).collect::<Vec<_>>()
        );
    }

    #[test]
    fn the_v040_aliases_name_the_same_keys() {
        let text = EXPANDED
            .replace("num_groups:", "num_unique_system_prompts:")
            .replace("num_prompts_per_group:", "num_users_per_system_prompt:");
        let (_, specs) = all(&text, 7);
        let (_, plain) = all(EXPANDED, 7);
        assert_eq!(specs, plain);
        // Both names of one key at once are refused.
        let both = EXPANDED.replace(
            "    num_groups: 3\n",
            "    num_groups: 3\n    num_unique_system_prompts: 3\n",
        );
        let e = InferencePerf::new(&both, "c.yaml", 0).err().unwrap();
        assert!(e.message.contains("duplicate"), "{e}");
    }

    #[test]
    fn the_timeout_is_aiohttps_default_unless_given() {
        let (reader, _) = all(EXPANDED, 0);
        assert_eq!(reader.client_timeout_s(), 300.0);
        let text = EXPANDED.replace("request_timeout: null", "request_timeout: 12.5");
        let (reader, _) = all(&text, 0);
        assert_eq!(reader.client_timeout_s(), 12.5);
    }

    #[test]
    fn random_and_synthetic_lengths_restart_with_each_stage() {
        let text = EXPANDED.replace(
            "  type: shared_prefix\n  path: null\n  input_distribution: null\n  output_distribution: null\n  shared_prefix:\n    num_groups: 3\n    num_prompts_per_group: 2\n    system_prompt_len: 150\n    question_len: 600\n    output_len: 251\n",
            "  type: random\n  input_distribution: {min: 10, max: 100, mean: 50, std_dev: 30}\n  output_distribution: {min: 0, max: 8, mean: 2, std_dev: 4}\n",
        );
        let (_, specs) = all(&text, 5);
        assert_eq!(specs.len(), 25);
        let len = |s: &RequestSpec| s.prompt.tokens();
        for i in 0..5 {
            assert_eq!(len(&specs[20 + i]), len(&specs[i]), "request {i}");
            assert_eq!(specs[20 + i].output_tokens, specs[i].output_tokens);
        }
        assert!(specs.iter().all(|s| (10..=100).contains(&len(s))));
        // Every random prompt is its own content, also when its length repeats.
        let ids: std::collections::BTreeSet<u64> =
            specs.iter().map(|s| s.prompt.segments[0].id).collect();
        assert_eq!(ids.len(), 25);
        // An output length of 0 is sent as max_tokens 30, and one is drawn
        // with this mean and spread.
        assert!(
            specs
                .iter()
                .all(|s| s.output_tokens <= 8 || s.output_tokens == 30)
        );
        assert!(specs.iter().any(|s| s.output_tokens == 30));
        // Synthetic prompts are prefixes of one text: one content id.
        let text = text.replace("type: random", "type: synthetic");
        let (_, specs) = all(&text, 5);
        let ids: std::collections::BTreeSet<u64> =
            specs.iter().map(|s| s.prompt.segments[0].id).collect();
        assert_eq!(ids.len(), 1);
        // A synthetic prompt is at most the text's 4,185 words long; one
        // word more, or any longer, is refused.
        let longest = |max: u64| {
            text.replace(
                "input_distribution: {min: 10, max: 100,",
                &format!("input_distribution: {{min: 10, max: {max},"),
            )
        };
        assert!(InferencePerf::new(&longest(4185), "c.yaml", 0).is_ok());
        for max in [4186, 5000] {
            let e = InferencePerf::new(&longest(max), "c.yaml", 0)
                .err()
                .unwrap();
            assert_eq!(
                e.column.as_deref(),
                Some("data.input_distribution.max"),
                "{e}"
            );
        }
    }

    #[test]
    fn bounds_are_checked_at_their_edges() {
        let refused = |text: &str| InferencePerf::new(text, "c.yaml", 0).is_err();
        // load.interval lies in [0, 86400]: either side out is refused.
        assert!(refused(
            &EXPANDED.replace("interval: 1.0", "interval: -0.5")
        ));
        assert!(refused(
            &EXPANDED.replace("interval: 1.0", "interval: 86400.5")
        ));
        assert!(!refused(
            &EXPANDED.replace("interval: 1.0", "interval: 86400")
        ));
        assert!(!refused(&EXPANDED.replace("interval: 1.0", "interval: 0")));
        // A stage of exactly MAX_STAGE_REQUESTS requests is allowed, one
        // more is not (int(rate × duration), truncated).
        let stage = |rate: &str| {
            EXPANDED.replace(
                "  - rate: 5.0\n    duration: 4\n  - rate: 2.5\n    duration: 2\n",
                &format!("  - rate: {rate}\n    duration: 1\n"),
            )
        };
        assert!(!refused(&stage("100000000")));
        assert!(!refused(&stage("100000000.5")));
        assert!(refused(&stage("100000001")));
        // The stages may last exactly the year pdsim replays (each stage's
        // duration plus load.interval + 2 s), not a second more.
        let long = |duration: u64| {
            EXPANDED.replace(
                "  - rate: 5.0\n    duration: 4\n  - rate: 2.5\n    duration: 2\n",
                &format!("  - rate: 0.000001\n    duration: {duration}\n"),
            )
        };
        assert!(!refused(&long(365 * 24 * 3600 - 3)));
        assert!(refused(&long(365 * 24 * 3600 - 2)));
        // A length distribution may be a point (min = max).
        let random = |min: u32, max: u32| {
            EXPANDED.replace(
                "  type: shared_prefix\n  path: null\n  input_distribution: null\n  output_distribution: null\n  shared_prefix:\n    num_groups: 3\n    num_prompts_per_group: 2\n    system_prompt_len: 150\n    question_len: 600\n    output_len: 251\n",
                &format!("  type: random\n  input_distribution: {{min: {min}, max: {max}, mean: 50, std_dev: 30}}\n  output_distribution: {{min: 4, max: 8, mean: 6, std_dev: 1}}\n"),
            )
        };
        let (_, specs) = all(&random(50, 50), 1);
        assert!(specs.iter().all(|s| s.prompt.tokens() == 50));
        // Outputs are the drawn lengths, in [4, 8]; a drawn 0 is sent as
        // no max_tokens, which the client fills with 30.
        assert!(specs.iter().all(|s| (4..=8).contains(&s.output_tokens)));
        let zero = random(50, 50).replace(
            "output_distribution: {min: 4, max: 8, mean: 6, std_dev: 1}",
            "output_distribution: {min: 0, max: 0, mean: 0, std_dev: 0}",
        );
        let (_, specs) = all(&zero, 1);
        assert!(specs.iter().all(|s| s.output_tokens == DEFAULT_MAX_TOKENS));
        assert!(refused(&random(51, 50)));
        // Lengths reach MAX_TOKENS and no further.
        let max = crate::MAX_TOKENS as u32;
        assert!(!refused(&random(50, max)));
        assert!(refused(&random(50, max + 1)));
        // A prompt length's floor is 1 (vLLM refuses an empty prompt), an
        // output length's 0, and each refusal says which.
        let message = |text: &str| InferencePerf::new(text, "c.yaml", 0).err().unwrap().message;
        let e = message(&random(0, 50));
        assert!(
            e.contains("lie in [1, ") && e.contains("a prompt of 0 tokens is empty"),
            "{e}"
        );
        let output_over = random(50, 60).replace(
            "output_distribution: {min: 4, max: 8,",
            &format!("output_distribution: {{min: 4, max: {},", max + 1),
        );
        let e = message(&output_over);
        assert!(e.contains("lie in [0, ") && !e.contains("empty"), "{e}");
        // The note on the gap between stages is for runs of several stages.
        let one_stage = EXPANDED.replace("  - rate: 2.5\n    duration: 2\n", "");
        let (reader, _) = all(&one_stage, 1);
        assert_eq!(reader.stages().len(), 1);
        assert!(reader.notes().iter().all(|n| !n.contains("load.interval")));
        let (reader, _) = all(EXPANDED, 1);
        assert!(reader.notes().iter().any(|n| n.contains("load.interval")));
        // A stage holds its requests and not the next one's.
        let plan = &reader.stages()[0];
        assert_eq!((plan.first_request, plan.requests), (1, 20));
        assert!(plan.contains(1) && plan.contains(20));
        assert!(!plan.contains(21) && !plan.contains(0));
    }

    #[test]
    fn numpy_rounds_half_to_even() {
        let d = LengthDraw {
            normal: Normal::new(2.5, 0.0).unwrap(),
            mean: 2.5,
            min: 0.0,
            max: 10.0,
            lane: 0,
        };
        let mut s = Stream::new(0, Purpose::Lengths, 0);
        assert_eq!(d.draw(&mut s), 2);
    }

    #[test]
    fn what_cannot_be_reproduced_is_refused_by_key_and_line() {
        let cases: &[(&str, &str, &str, &str)] = &[
            (
                "streaming: true",
                "streaming: false",
                "api.streaming",
                "streamed",
            ),
            (
                "  type: completion",
                "  type: chat",
                "api.type",
                "completion",
            ),
            (
                "headers: null",
                "headers: {x-a: b}",
                "api.headers",
                "router",
            ),
            (
                "ignore_eos: true",
                "ignore_eos: false",
                "server.ignore_eos",
                "end-of-sequence",
            ),
            (
                "  type: vllm",
                "  type: tgi",
                "server.type",
                "`tgi` is refused",
            ),
            (
                "  type: vllm",
                "  type: sglang",
                "server.type",
                "`sglang` is refused",
            ),
            (
                "sweep: null",
                "sweep: {type: linear}",
                "load.sweep",
                "saturation",
            ),
            (
                "  circuit_breakers: []",
                "  circuit_breakers: [a]",
                "load.circuit_breakers",
                "open-loop",
            ),
            (
                "input_distribution: null",
                "input_distribution: {min: 1}",
                "data.input_distribution",
                "release",
            ),
            (
                "  type: shared_prefix",
                "  type: shareGPT",
                "data.type",
                "dataset",
            ),
            ("  - rate: 5.0", "  - rate: 0.1", "load.stages[0]", "crash"),
            (
                "num_workers: 224",
                "num_workers: 0",
                "load.num_workers",
                "worker",
            ),
        ];
        for (from, to, key, why) in cases {
            assert!(EXPANDED.contains(from), "{from}");
            let text = EXPANDED.replacen(from, to, 1);
            let e = InferencePerf::new(&text, "c.yaml", 0)
                .err()
                .unwrap_or_else(|| panic!("{to}"));
            assert_eq!(e.column.as_deref(), Some(*key), "{e}");
            assert!(e.message.contains(why), "{e}");
            let line = text
                .lines()
                .position(|l| l.contains(to.lines().last().unwrap().trim()))
                .unwrap() as u64
                + 1;
            assert!(
                e.line > 0 && e.line <= line,
                "{e} (expected near line {line})"
            );
        }
        // Unknown keys are errors with their path and line.
        let text = EXPANDED.replace("  interval: 1.0\n", "  interval: 1.0\n  base_seed: 4\n");
        let e = InferencePerf::new(&text, "c.yaml", 0).err().unwrap();
        assert_eq!(e.line, 19, "{e}");
        assert!(e.message.contains("unknown field `base_seed`"), "{e}");
    }

    #[test]
    fn the_client_concurrency_note_appears_only_when_the_cap_can_bind() {
        // The busiest stage sends 5 × 4 = 20 requests, so a cap of 20 can
        // never hold one back, a cap of 19 can.
        let cap_note = |workers: u32, each: u32| {
            let text = EXPANDED
                .replacen("num_workers: 224", &format!("num_workers: {workers}"), 1)
                .replacen(
                    "worker_max_concurrency: 100",
                    &format!("worker_max_concurrency: {each}"),
                    1,
                );
            let reader = InferencePerf::new(&text, "c.yaml", 0).unwrap();
            reader
                .notes()
                .iter()
                .find(|n| n.contains("holds a request back"))
                .cloned()
        };
        assert_eq!(cap_note(224, 100), None);
        assert_eq!(cap_note(2, 10), None);
        let note = cap_note(1, 19).expect("a cap of 19 under 20 requests is noted");
        assert!(
            note.contains("19 (num_workers × worker_max_concurrency)"),
            "{note}"
        );
    }

    #[test]
    fn one_line_json_profiles_load_too() {
        let text = r#"{"api":{"streaming":true,"type":"completion"},"data":{"shared_prefix":{"num_unique_system_prompts":11,"num_users_per_system_prompt":4,"output_len":247,"question_len":466,"system_prompt_len":100},"type":"shared_prefix"},"load":{"stages":[{"duration":600,"rate":5},{"duration":600,"rate":10}],"type":"constant"},"server":{"base_url":"http://x:8000","ignore_eos":true,"model_name":"m","type":"vllm"}}"#;
        let reader = InferencePerf::new(text, "profile.yaml", 0).unwrap();
        let counts: Vec<u64> = reader.stages().iter().map(|s| s.requests).collect();
        assert_eq!(counts, [3000, 6000]);
        // Without num_workers the client's concurrency cap is unknown: said.
        assert!(reader.notes().iter().any(|n| n.contains("CPU count")));
        let specs: Vec<RequestSpec> = reader.map(|r| r.unwrap()).collect();
        assert_eq!(specs.len(), 9000);
        let groups: std::collections::BTreeSet<u64> =
            specs.iter().map(|s| s.prompt.segments[0].id).collect();
        assert_eq!(groups.len(), 11);
        assert!(
            specs
                .iter()
                .all(|s| s.prompt.tokens() == 566 && s.output_tokens == 247)
        );
    }

    #[test]
    fn limits_are_refused_past_their_bound_and_not_at_it() {
        let stages = "  stages:\n  - rate: 5.0\n    duration: 4\n  - rate: 2.5\n    duration: 2\n";
        assert!(EXPANDED.contains(stages));
        let with_stages = |n: usize| {
            let many: String = (0..n).map(|_| "  - rate: 1.0\n    duration: 1\n").collect();
            EXPANDED.replacen(stages, &format!("  stages:\n{many}"), 1)
        };
        // MAX_STAGES stages run; one more is refused.
        let reader = InferencePerf::new(&with_stages(MAX_STAGES), "c.yaml", 0).unwrap();
        assert_eq!(reader.stages().len(), MAX_STAGES);
        let e = InferencePerf::new(&with_stages(MAX_STAGES + 1), "c.yaml", 0)
            .err()
            .expect("one stage too many");
        assert_eq!(e.column.as_deref(), Some("load.stages"));
        assert!(e.message.contains("65 stages are more than the 64"), "{e}");
        // A random length list must hold the largest stage's 20 requests:
        // 20 lengths do, 1 is too few (not invalid), 0 is invalid.
        let random = |count: i64| {
            EXPANDED.replacen(
                "  type: shared_prefix\n  path: null\n  input_distribution: null\n  output_distribution: null\n  shared_prefix:\n    num_groups: 3\n    num_prompts_per_group: 2\n    system_prompt_len: 150\n    question_len: 600\n    output_len: 251\n",
                &format!("  type: random\n  input_distribution: {{min: 10, max: 100, mean: 50, std_dev: 30, total_count: {count}}}\n  output_distribution: {{min: 1, max: 8, mean: 2, std_dev: 4}}\n"),
                1,
            )
        };
        assert!(InferencePerf::new(&random(20), "c.yaml", 0).is_ok());
        let e = InferencePerf::new(&random(1), "c.yaml", 0).err().unwrap();
        assert!(
            e.message
                .contains("1 lengths are fewer than the 20 requests"),
            "{e}"
        );
        let e = InferencePerf::new(&random(0), "c.yaml", 0).err().unwrap();
        assert!(e.message.contains("0 must be a positive integer"), "{e}");
        // worker_max_concurrency: 1 is the least a worker can send.
        let concurrency = |n: i64| {
            EXPANDED.replacen(
                "worker_max_concurrency: 100",
                &format!("worker_max_concurrency: {n}"),
                1,
            )
        };
        assert!(InferencePerf::new(&concurrency(1), "c.yaml", 0).is_ok());
        let e = InferencePerf::new(&concurrency(0), "c.yaml", 0)
            .err()
            .unwrap();
        assert_eq!(
            e.column.as_deref(),
            Some("load.worker_max_concurrency"),
            "{e}"
        );
        // So is one TCP connection a worker; none is refused.
        let connections = |n: i64| {
            EXPANDED.replacen(
                "worker_max_tcp_connections: 2500",
                &format!("worker_max_tcp_connections: {n}"),
                1,
            )
        };
        assert!(InferencePerf::new(&connections(1), "c.yaml", 0).is_ok());
        let e = InferencePerf::new(&connections(0), "c.yaml", 0)
            .err()
            .unwrap();
        assert_eq!(
            e.column.as_deref(),
            Some("load.worker_max_tcp_connections"),
            "{e}"
        );
        // A random distribution's mean must lie in [min, max] (10 and 100
        // here), as inference-perf requires; the bounds themselves do.
        let mean = |m: &str| random(20).replacen("mean: 50,", &format!("mean: {m},"), 1);
        for ok in ["10", "100"] {
            assert!(InferencePerf::new(&mean(ok), "c.yaml", 0).is_ok(), "{ok}");
        }
        for bad in ["9.5", "100.5", ".nan"] {
            let e = InferencePerf::new(&mean(bad), "c.yaml", 0)
                .err()
                .unwrap_or_else(|| panic!("mean {bad} accepted"));
            assert!(e.message.contains("outside [min, max]"), "{bad}: {e}");
        }
        // A shared-prefix count below its floor and one above the token
        // bound are refused alike; the bounds themselves are not.
        let groups = |n: i64| EXPANDED.replacen("num_groups: 3", &format!("num_groups: {n}"), 1);
        let output = |n: i64| EXPANDED.replacen("output_len: 251", &format!("output_len: {n}"), 1);
        for text in [groups(0), output(MAX_LEN + 1)] {
            let e = InferencePerf::new(&text, "c.yaml", 0)
                .err()
                .expect("refused");
            assert!(e.message.contains("must lie in ["), "{e}");
        }
        assert!(InferencePerf::new(&groups(1), "c.yaml", 0).is_ok());
        assert!(InferencePerf::new(&output(MAX_LEN), "c.yaml", 0).is_ok());
    }

    #[test]
    fn a_refused_data_type_is_named_as_inference_perf_spells_it() {
        for spelled in [
            "shareGPT",
            "cnn_dailymail",
            "infinity_instruct",
            "billsum_conversations",
            "mock",
        ] {
            let text = EXPANDED.replacen("  type: shared_prefix", &format!("  type: {spelled}"), 1);
            let e = InferencePerf::new(&text, "c.yaml", 0).err().unwrap();
            assert!(
                e.message.starts_with(&format!("`{spelled}` is refused")),
                "{e}"
            );
        }
        // With random data, a shared_prefix block is refused naming it.
        let text = EXPANDED.replacen("  type: shared_prefix", "  type: random", 1);
        let e = InferencePerf::new(&text, "c.yaml", 0).err().unwrap();
        assert!(e.message.contains("with random data"), "{e}");
    }

    #[test]
    fn a_length_spread_must_be_a_finite_non_negative_number() {
        let with_std = |std: &str| {
            EXPANDED.replacen(
                "  type: shared_prefix\n  path: null\n  input_distribution: null\n  output_distribution: null\n  shared_prefix:\n    num_groups: 3\n    num_prompts_per_group: 2\n    system_prompt_len: 150\n    question_len: 600\n    output_len: 251\n",
                &format!("  type: random\n  input_distribution: {{min: 10, max: 100, mean: 50, std_dev: {std}}}\n  output_distribution: {{min: 1, max: 8, mean: 2, std_dev: 4}}\n"),
                1,
            )
        };
        assert!(InferencePerf::new(&with_std("0"), "c.yaml", 0).is_ok());
        for bad in ["-1", ".nan", ".inf"] {
            let e = InferencePerf::new(&with_std(bad), "c.yaml", 0)
                .err()
                .unwrap_or_else(|| panic!("std_dev {bad} accepted"));
            assert_eq!(
                e.column.as_deref(),
                Some("data.input_distribution.std_dev"),
                "{e}"
            );
            assert!(
                e.message.contains("must be a finite number, not negative"),
                "{e}"
            );
        }
    }

    #[test]
    fn a_client_timeout_and_the_stages_span_are_bounded() {
        // A timeout must be positive (and at most 30 days); 0 would give up
        // on every request at once.
        for (timeout, ok) in [
            ("0", false),
            ("-5", false),
            ("0.5", true),
            ("2592000", true),
            ("2592001", false),
        ] {
            let text = EXPANDED.replacen(
                "  request_timeout: null",
                &format!("  request_timeout: {timeout}"),
                1,
            );
            let result = InferencePerf::new(&text, "c.yaml", 0);
            assert_eq!(result.is_ok(), ok, "request_timeout {timeout}");
            if !ok {
                assert_eq!(
                    result.err().unwrap().column.as_deref(),
                    Some("load.request_timeout")
                );
            }
        }
        // Stages that last longer than the year pdsim replays are refused:
        // 40,000,000 s at 1e-6 requests per second (40 requests).
        let stages = "  stages:\n  - rate: 5.0\n    duration: 4\n  - rate: 2.5\n    duration: 2\n";
        let long = EXPANDED.replacen(
            stages,
            "  stages:\n  - rate: 0.000001\n    duration: 40000000\n",
            1,
        );
        let e = InferencePerf::new(&long, "c.yaml", 0)
            .err()
            .expect("over a year");
        assert!(e.message.contains("one year"), "{e}");
        let year = EXPANDED.replacen(
            stages,
            "  stages:\n  - rate: 0.000001\n    duration: 30000000\n",
            1,
        );
        InferencePerf::new(&year, "c.yaml", 0).unwrap_or_else(|e| panic!("{e}"));
        // A Poisson stage that fits the year on paper can still draw its
        // last requests past it (its per-second counts fall short of the
        // rate): that request is refused by number, never clamped to the
        // horizon. 31 requests at 1e-6/s over 31,535,000 s: the 31st
        // arrives after 31 M s on average, ± 5.6 M s.
        let poisson = EXPANDED
            .replacen("type: constant", "type: poisson", 1)
            .replacen(
                stages,
                "  stages:\n  - rate: 0.000001\n    duration: 31535000\n",
                1,
            );
        let mut outcomes = (0..6).map(|seed| {
            let reader = InferencePerf::new(&poisson, "c.yaml", seed).unwrap();
            let results: Vec<_> = reader.collect();
            assert!(results.iter().rev().skip(1).all(Result::is_ok));
            (results.len(), results.last().unwrap().clone())
        });
        let (count, late) = outcomes
            .find(|(_, last)| last.is_err())
            .expect("one of six seeds draws past the year");
        let e = late.unwrap_err();
        assert!(count <= 31, "{count}");
        assert!(e.message.contains("beyond the one year"), "{e}");
    }
}
