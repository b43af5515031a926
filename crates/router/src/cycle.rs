//! The EPP's scheduling cycle for the plugins pdsim simulates
//! (`research/epp.md` §2–§3): data producers, the profile handler loop,
//! filters (the chain stops when one empties the set), scorers (a weighted
//! sum of scores clamped to [0, 1]), the picker, and the pre-request index
//! update. Randomness (picker ties, random pickers) comes from one seeded
//! stream; the Go shuffle before a stable sort that breaks ties in the real
//! picker is reproduced as a seeded shuffle.

use crate::RouterInputs;
#[cfg(test)]
use crate::config::EndpointPickerConfig;
use crate::config::{Plugin, prefill_header_writers};
use crate::plugins::requestcontrol::dataproducer::approximateprefix::ApproxPrefixProducer;
use crate::plugins::requestcontrol::dataproducer::burstprefix::BurstPrefixProducer;
pub use crate::plugins::requestcontrol::dataproducer::burstprefix::{BurstJoin, BurstMember};
use crate::plugins::requestcontrol::dataproducer::inflightload::InFlightLoad;
pub use crate::plugins::requestcontrol::dataproducer::inflightload::Ticket;
use crate::plugins::requestcontrol::dataproducer::preciseprefixcache::{Precise, Weights};
use crate::plugins::scheduling::filter::{Filter, FilterPlugin};
use crate::plugins::scheduling::picker::{Picker, PickerPlugin, shuffle};
use crate::plugins::scheduling::profilehandler::disagg::{Decider, DeciderPlugin};
use crate::plugins::scheduling::profilehandler::{HandlerPlugin, ProfileHandler, Profiles};
use crate::plugins::scheduling::scorer::{Scorer, ScorerPlugin};
use crate::plugins::{Build, Cycle, MatchInfo, PrefixSource};
use pdsim_core::kv_events::KvEventBatch;
use pdsim_core::{Prompt, Purpose, Stream};
use serde_yaml::Value;
use std::collections::{BTreeMap, VecDeque};

/// What the EPP knows of one endpoint: its labels and its last scraped
/// metrics (`vllm:num_requests_waiting`, `vllm:num_requests_running`,
/// `vllm:kv_cache_usage_perc`, `vllm:cache_config_info`).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct EndpointView {
    pub labels: BTreeMap<String, String>,
    pub waiting: u32,
    pub running: u32,
    pub kv_usage: f64,
    /// From `vllm:cache_config_info`, once scraped.
    pub block_size: Option<u32>,
    pub num_blocks: Option<u64>,
    /// When these metrics were last refreshed (simulated ns); `None`: never
    /// scraped. The utilization detector treats old metrics as saturated.
    pub updated_ns: Option<u64>,
}

/// The endpoints a request goes to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Decision {
    pub decode: usize,
    /// The prefill endpoint when the request is disaggregated.
    pub prefill: Option<usize>,
    /// What the in-flight load counters added, to be taken off again at the
    /// first chunk (prefill) and the end of the stream (decode).
    pub ticket: Ticket,
}

/// What a request carries besides its prompt that plugins read: its
/// headers (names lower-case, as the EPP stores them) and when it reaches
/// the EPP. pdsim's workloads carry no headers: `RequestSpec` has no
/// session or conversation id (TraceV2's `session_id` column describes
/// closed-loop replay, which the reader does not model, and no trace says
/// what a client would echo back), so the simulation routes every request
/// through [`Router::pick`], with none.
#[derive(Clone, Copy, Debug)]
pub struct RequestContext<'a> {
    pub headers: &'a BTreeMap<String, String>,
    /// Simulated time in nanoseconds (session bindings expire by it).
    pub now_ns: u64,
}

static NO_HEADERS: BTreeMap<String, String> = BTreeMap::new();

impl Default for RequestContext<'_> {
    fn default() -> Self {
        RequestContext {
            headers: &NO_HEADERS,
            now_ns: 0,
        }
    }
}

/// What the profile handler runs for one request: the router's profiles
/// over these endpoints, and its decider.
struct RunProfiles<'a, 'r> {
    router: &'a mut Router,
    endpoints: &'a [EndpointView],
    request: &'a RequestContext<'r>,
}

impl Profiles for RunProfiles<'_, '_> {
    fn run(&mut self, profile: usize, peer: Option<usize>) -> Option<usize> {
        self.router
            .run_profile(profile, peer, self.endpoints, self.request)
    }

    fn disaggregate(&mut self, decode: usize) -> bool {
        let cycle = self.router.data.cycle(self.endpoints, self.request);
        self.router.decider.disaggregate(&cycle, decode)
    }

    fn index_of(&self, name: &str) -> Option<usize> {
        self.router.profiles.iter().position(|p| p.name == name)
    }
}

/// A scheduling profile as the cycle runs it (`scheduler_profile.go`).
#[derive(Debug)]
struct RunProfile {
    name: String,
    /// Filter instances by their index in `Router::filters` (`None`: a
    /// reference the configuration does not define, which keeps all).
    filters: Vec<Option<usize>>,
    /// Scorer instances by their index in `Router::scorers` (`None`: a
    /// reference the configuration does not define, which scores 0), with
    /// their weights.
    scorers: Vec<(Option<usize>, f64)>,
    picker: PickerPlugin,
}

/// The router state plugins read during a cycle, apart from the plugin
/// instances themselves, so that an instance can update its own state
/// while it reads this.
struct CycleData {
    labels: Vec<BTreeMap<String, String>>,
    /// Endpoint ids as the EPP names endpoints (`namespace/name`).
    ids: Vec<String>,
    /// The inflight-load-producer's counters per endpoint, when a plugin
    /// consumes them.
    inflight: Option<InFlightLoad>,
    /// Per endpoint, the approx producer's matched blocks for the current
    /// request.
    matches: Vec<u32>,
    block_size: u32,
    /// The current request's block hashes, as the approx producer hashed
    /// them (capped); their count is the match info's total.
    hashes: VecDeque<u64>,
    prompt_tokens: u64,
    /// The precise-prefix-cache-producer (or the legacy scorer's own one).
    precise: Option<Precise>,
    /// Whose match info the inflight-load-producer reads.
    load_source: PrefixSource,
    /// The burst-prefix-cache-producer's match info for the current
    /// request, when it is configured: all blocks on the assigned replica.
    burst: Option<BurstData>,
    /// The producers did not run for the current request: the burst
    /// producer's batch was full, and the director skips the producers
    /// after a failing one ([`BurstJoin::Full`]).
    skipped: bool,
}

/// The burst producer's `PrefixCacheMatchInfo` for one request.
#[derive(Clone, Debug)]
struct BurstData {
    matches: Vec<u32>,
    total: u32,
    block_size: u32,
}

impl CycleData {
    /// The match info a producer made for the current request.
    fn source_info(&self, source: PrefixSource) -> MatchInfo<'_> {
        match (source, &self.precise, &self.burst) {
            (PrefixSource::Precise, Some(precise), _) => MatchInfo {
                matches: &precise.matches,
                total: precise.keys.len() as u32,
                block_size: precise.block_size,
            },
            (PrefixSource::Burst, _, Some(burst)) => MatchInfo {
                matches: &burst.matches,
                total: burst.total,
                block_size: burst.block_size,
            },
            _ => MatchInfo {
                matches: &self.matches,
                total: self.hashes.len() as u32,
                block_size: self.block_size,
            },
        }
    }

    /// What the plugins read of the cycle in progress.
    fn cycle<'a, 'r>(
        &'a self,
        endpoints: &'a [EndpointView],
        request: &'a RequestContext<'r>,
    ) -> Cycle<'a, 'r> {
        Cycle {
            endpoints,
            labels: &self.labels,
            request,
            ids: &self.ids,
            prompt_tokens: self.prompt_tokens,
            approx: self.source_info(PrefixSource::Approx),
            precise: self
                .precise
                .is_some()
                .then(|| self.source_info(PrefixSource::Precise)),
            burst: self
                .burst
                .is_some()
                .then(|| self.source_info(PrefixSource::Burst)),
            inflight: self.inflight.as_ref(),
            load_source: self.load_source,
            peer: None,
            producers_skipped: self.skipped,
        }
    }
}

/// Buffers one scheduling cycle fills and the next reuses.
#[derive(Clone, Debug, Default)]
struct Scratch {
    candidates: Vec<usize>,
    totals: Vec<f64>,
    scores: Vec<f64>,
}

/// The simulated EPP.
pub struct Router {
    /// The configuration, which only tests read after the build: the
    /// cycle runs the plugin instances built from it.
    #[cfg(test)]
    config: EndpointPickerConfig,
    /// What the endpoints are and what the producers made for the
    /// current request: what the plugins read.
    data: CycleData,
    /// The approx-prefix-cache-producer, when configured or needed.
    approx: Option<ApproxPrefixProducer>,
    /// The burst-prefix-cache-producer, when configured.
    burst: Option<BurstPrefixProducer>,
    rng: Stream,
    order: Vec<usize>,
    /// The cycle's candidates, summed scores and one scorer's scores,
    /// kept between cycles: over thousands of endpoints each is larger
    /// than the allocator's mmap threshold, so allocating them afresh cost
    /// page faults on every request (`perf`, the 16,384-engine cluster).
    scratch: Scratch,
    /// Requests routed and how many were disaggregated.
    pub routed: u64,
    pub disaggregated: u64,
    /// One scorer instance per configured plugin, in the configuration's
    /// order ([`ScorerPlugin::Zero`] for a plugin that is no scorer).
    scorers: Vec<ScorerPlugin>,
    /// The profiles as the cycle runs them: scorers by instance index, the
    /// picker built.
    profiles: std::sync::Arc<Vec<RunProfile>>,
    /// The decider the P/D profile handler asks.
    decider: DeciderPlugin,
    /// One filter instance per configured plugin, in the configuration's
    /// order ([`FilterPlugin::PassAll`] for a plugin that is no filter).
    filters: Vec<FilterPlugin>,
    /// Shared so a request's cycle can run it while it runs profiles.
    handler: std::sync::Arc<HandlerPlugin>,
    /// The profile whose first target `x-prefiller-host-port` names, when
    /// some plugin writes that header (the loader refuses writers that
    /// disagree) and the configuration has a profile of that name.
    header_profile: Option<usize>,
    /// The profile literally named `prefill`, whose target the approx
    /// producer and no-hit-lru-scorer index besides the primary's.
    prefill_profile: Option<usize>,
    /// Whether engine KV events reach the precise index.
    kv_events_wired: bool,
    /// Whose match info the configuration's prefix scorer reads, if it
    /// has one: what the router believes each endpoint caches.
    scorer_source: Option<PrefixSource>,
    /// Simulated time of the last [`Router::advance`], in nanoseconds.
    clock: u64,
}

/// Whether a consumer of PrefixCacheMatchInfo reads the precise producer's:
/// its `prefixMatchInfoProducerName` names it, or it is the legacy
/// precise-prefix-cache-scorer, whose inner prefix-cache-scorer reads its
/// own producer (`scorer/preciseprefixcache/precise_prefix_cache.go`).
/// Others read the default key, the approx producer's.
fn reads_precise(plugin: &Plugin, precise: &str) -> bool {
    plugin.plugin_type == "precise-prefix-cache-scorer" || names_producer(plugin, precise)
}

/// Whether a consumer's `prefixMatchInfoProducerName` names `producer`
/// (an empty name reads the default key).
fn names_producer(plugin: &Plugin, producer: &str) -> bool {
    plugin
        .parameters
        .get("prefixMatchInfoProducerName")
        .and_then(Value::as_str)
        .is_some_and(|n| !n.is_empty() && n == producer)
}

/// The precise producer a configuration runs, if any: an explicit
/// precise-prefix-cache-producer (a legacy scorer then defers to it), else
/// the first legacy scorer's own.
pub(crate) fn precise_plugin(plugins: &[Plugin]) -> Option<&Plugin> {
    plugins
        .iter()
        .find(|p| p.plugin_type == "precise-prefix-cache-producer")
        .or_else(|| {
            plugins
                .iter()
                .find(|p| p.plugin_type == "precise-prefix-cache-scorer")
        })
}

/// The precise producer's settings with the source's defaults
/// (`preciseprefixcache/producer.go`, `PluginFactory`/`New`;
/// `kvblock.DefaultTokenProcessorConfig`, `DefaultInMemoryIndexConfig`,
/// `kvcache.DefaultKVCacheBackendConfig`; TTL 2 s in `prerequest.go`).
fn build_precise(plugin: &Plugin, endpoints: usize) -> Precise {
    let p = &plugin.parameters;
    let tp = p.get("tokenProcessorConfig");
    let int = |v: Option<&Value>| v.and_then(Value::as_i64).filter(|v| *v > 0);
    let block = int(tp.and_then(|t| t.get("blockSizeTokens")))
        .or_else(|| int(tp.and_then(|t| t.get("blockSize"))))
        .unwrap_or(16);
    let indexer = p.get("indexerConfig");
    let memory = indexer
        .and_then(|i| i.get("kvBlockIndexConfig"))
        .and_then(|k| k.get("inMemoryConfig"));
    let size = memory
        .and_then(|m| m.get("size"))
        .and_then(Value::as_i64)
        .unwrap_or(100_000_000);
    let pods = memory
        .and_then(|m| m.get("podCacheSize"))
        .and_then(Value::as_i64)
        .unwrap_or(10);
    let mut weights = Weights::default();
    if let Some(list) = indexer
        .and_then(|i| i.get("kvCacheBackendConfigs"))
        .and_then(Value::as_sequence)
    {
        // The list replaces the defaults; a tier it omits weighs 1.0.
        weights = Weights {
            gpu: None,
            cpu: None,
        };
        for backend in list {
            let w = backend.get("weight").and_then(Value::as_f64).unwrap_or(0.0);
            match backend.get("name").and_then(Value::as_str) {
                Some("gpu") => weights.gpu = Some(w),
                Some("cpu") => weights.cpu = Some(w),
                _ => {}
            }
        }
    }
    let speculative = p
        .get("speculativeIndexing")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    let ttl = p
        .get("speculativeTTL")
        .and_then(Value::as_str)
        .filter(|t| !t.is_empty())
        .and_then(crate::flags::parse_go_duration)
        .filter(|t| *t > 0)
        .map_or(2_000_000_000, |t| t as u64);
    Precise::new(
        block.min(u32::MAX as i64) as u32,
        weights,
        size.max(1) as usize,
        pods.max(1) as usize,
        speculative.then_some(ttl),
        endpoints,
    )
}

impl Router {
    /// A router over endpoints with these labels.
    pub fn new(inputs: &RouterInputs, labels: Vec<BTreeMap<String, String>>, seed: u64) -> Router {
        let config = &inputs.config;
        // Plugins whose `Consumes()` requires PrefixCacheMatchInfo: the
        // scorers, the affinity filter, the decider and both P/D handlers.
        let precise_name = precise_plugin(&config.plugins).map(|p| p.name.clone());
        let burst_plugin = config
            .plugins
            .iter()
            .find(|p| p.plugin_type == "burst-prefix-cache-producer");
        let reads_burst = |p: &Plugin| burst_plugin.is_some_and(|b| names_producer(p, &b.name));
        let consumes_prefix = config.plugins.iter().any(|p| {
            matches!(
                p.plugin_type.as_str(),
                "prefix-cache-scorer"
                    | "prefix-based-pd-decider"
                    | "no-hit-lru-scorer"
                    | "prefix-cache-affinity-filter"
                    | "disagg-profile-handler"
                    | "pd-profile-handler"
            ) && !precise_name
                .as_deref()
                .is_some_and(|name| reads_precise(p, name))
                && !reads_burst(p)
        });
        // The producer is created with its defaults when a consumer needs
        // it and none is configured (`CreateMissingDataProducers`).
        let producer = config
            .plugins
            .iter()
            .find(|p| p.plugin_type == "approx-prefix-cache-producer");
        let approx = (consumes_prefix || producer.is_some())
            .then(|| ApproxPrefixProducer::new(producer, labels.len()));
        let n = labels.len();
        // Whose PrefixCacheMatchInfo a consumer reads, fixed now.
        let source_of = |p: &Plugin| match &precise_name {
            _ if reads_burst(p) => PrefixSource::Burst,
            Some(name) if reads_precise(p, name) => PrefixSource::Precise,
            _ => PrefixSource::Approx,
        };
        let names: Vec<String> = config.profiles.iter().map(|p| p.name.clone()).collect();
        let build = Build {
            plugins: &config.plugins,
            labels: &labels,
            profiles: &names,
        };
        let scorers: Vec<ScorerPlugin> = config
            .plugins
            .iter()
            .map(|p| ScorerPlugin::new(p, &build, source_of(p)))
            .collect();
        let profiles = config
            .profiles
            .iter()
            .map(|profile| RunProfile {
                name: profile.name.clone(),
                filters: profile
                    .filters
                    .iter()
                    .map(|name| config.plugins.iter().position(|p| &p.name == name))
                    .collect(),
                scorers: profile
                    .scorers
                    .iter()
                    .map(|(name, weight)| {
                        let index = config.plugins.iter().position(|p| &p.name == name);
                        (index, *weight)
                    })
                    .collect(),
                picker: PickerPlugin::new(config.plugin(&profile.picker)),
            })
            .collect::<Vec<_>>()
            .into();
        let load_source = config
            .plugins
            .iter()
            .find(|p| p.plugin_type == "inflight-load-producer")
            .map_or(PrefixSource::Approx, source_of);
        let filters: Vec<FilterPlugin> = config
            .plugins
            .iter()
            .map(|p| FilterPlugin::new(p, &build, source_of(p)))
            .collect();
        let handler = HandlerPlugin::new(config);
        let decider = DeciderPlugin::new(handler.decider().and_then(|d| config.plugin(d)));
        let profile_index = |name: &str| config.profiles.iter().position(|p| p.name == name);
        let header_profile = prefill_header_writers(&config.plugins, &config.handler)
            .into_iter()
            .map(|(_, profile)| profile)
            .next()
            .and_then(|name| profile_index(&name));
        let prefill_profile = profile_index("prefill");
        let consumes_load = config.plugins.iter().any(|p| {
            matches!(
                p.plugin_type.as_str(),
                "inflight-load-producer"
                    | "token-load-scorer"
                    | "active-request-scorer"
                    | "prefix-cache-affinity-filter"
                    | "concurrency-detector"
            ) || crate::config::utilization_reads_load(p)
        });
        let precise = precise_plugin(&config.plugins).map(|p| build_precise(p, n));
        // Events reach the index through a subscriber: one on the global
        // `zmqEndpoint`, or per pod when `discoverPods` (default true) and
        // the producer is an extractor of the endpoint-notification-source,
        // whose add events install them (`preciseprefixcache/extractor.go`,
        // `producer.go` `New`). Otherwise the index stays empty.
        let kv_events_wired = precise_plugin(&config.plugins).is_some_and(|p| {
            let events = p.parameters.get("kvEventsConfig");
            let global = events
                .and_then(|e| e.get("zmqEndpoint"))
                .and_then(Value::as_str)
                .is_some_and(|z| !z.is_empty());
            let discover = events
                .and_then(|e| e.get("discoverPods"))
                .and_then(Value::as_bool)
                .unwrap_or(true)
                && events
                    .and_then(|e| e.get("podDiscoveryConfig"))
                    .is_none_or(|c| !c.is_null());
            let extractor = config.extractors.iter().any(|(source, extractor)| {
                extractor == &p.name
                    && config
                        .plugin(source)
                        .is_some_and(|s| s.plugin_type == "endpoint-notification-source")
            });
            global || (discover && extractor)
        });
        let scorer_source = config
            .plugins
            .iter()
            .find(|p| {
                matches!(
                    p.plugin_type.as_str(),
                    "prefix-cache-scorer" | "precise-prefix-cache-scorer"
                )
            })
            .map(source_of);
        Router {
            data: CycleData {
                labels,
                ids: (0..n).map(|i| format!("pdsim/endpoint-{i}")).collect(),
                inflight: consumes_load.then(|| InFlightLoad::new(n)),
                matches: vec![0; n],
                block_size: 16,
                hashes: VecDeque::new(),
                prompt_tokens: 0,
                precise,
                load_source,
                burst: burst_plugin.map(|_| BurstData {
                    matches: vec![0; n],
                    total: 0,
                    block_size: 0,
                }),
                skipped: false,
            },
            kv_events_wired,
            scorer_source,
            clock: 0,
            #[cfg(test)]
            config: config.clone(),
            approx,
            burst: burst_plugin.map(BurstPrefixProducer::new),
            rng: Stream::new(seed, Purpose::RouterTies, 0),
            order: Vec::with_capacity(n),
            scratch: Scratch::default(),
            routed: 0,
            disaggregated: 0,
            scorers,
            profiles,
            decider,
            filters,
            handler: handler.into(),
            header_profile,
            prefill_profile,
        }
    }

    /// Whether a precise producer reads the engines' KV events; without
    /// one, engines need not publish any.
    pub fn wants_kv_events(&self) -> bool {
        self.data.precise.is_some() && self.kv_events_wired
    }

    /// Sends an engine step's KV events, taken from `batch` (left empty),
    /// to arrive at the index `KV_EVENT_DELAY_NS` after `now_ns`.
    pub fn send_kv_events(&mut self, now_ns: u64, endpoint: usize, batch: &mut KvEventBatch) {
        if let Some(precise) = self.data.precise.as_mut().filter(|_| self.kv_events_wired) {
            let at = now_ns.saturating_add(
                crate::plugins::requestcontrol::dataproducer::preciseprefixcache::KV_EVENT_DELAY_NS,
            );
            precise.send(at, endpoint as u32, batch);
        } else {
            batch.clear();
        }
    }

    /// Moves the router's clock to `now_ns`, applying the KV events and
    /// speculative expiries due by then.
    pub fn advance(&mut self, now_ns: u64) {
        self.clock = self.clock.max(now_ns);
        if let Some(precise) = &mut self.data.precise {
            precise.advance(self.clock);
        }
    }

    /// Relabels the endpoints, as a test may mid-run; the label filters'
    /// pass lists follow.
    #[cfg(test)]
    fn set_labels(&mut self, labels: Vec<BTreeMap<String, String>>) {
        for (filter, plugin) in self.filters.iter_mut().zip(&self.config.plugins) {
            if let FilterPlugin::ByLabel(_) = filter {
                let build = Build {
                    plugins: &[],
                    labels: &labels,
                    profiles: &[],
                };
                *filter = FilterPlugin::new(plugin, &build, PrefixSource::Approx);
            }
        }
        self.data.labels = labels;
    }

    /// Runs the filter named `name` over `candidates`, as a profile would.
    #[cfg(test)]
    fn run_filter(
        &mut self,
        name: &str,
        endpoints: &[EndpointView],
        request: &RequestContext<'_>,
        candidates: &mut Vec<usize>,
    ) {
        let index = self.config.plugins.iter().position(|p| p.name == name);
        let cycle = self.data.cycle(endpoints, request);
        if let Some(i) = index {
            self.filters[i].filter(&cycle, &mut self.rng, candidates);
        }
    }

    /// Whether the filter named `name` keeps endpoint `e` alone, for a
    /// request with no headers over never-scraped endpoints.
    #[cfg(test)]
    fn passes(&mut self, name: &str, e: usize) -> bool {
        let views = vec![EndpointView::default(); self.data.labels.len()];
        let mut candidates = vec![e];
        self.run_filter(name, &views, &RequestContext::default(), &mut candidates);
        !candidates.is_empty()
    }

    /// The `x-session-token` value the session-affinity-scorer's
    /// `encoded_endpoint_header` strategy writes on a response served by
    /// `e` (`util/sessionaffinity/header.go`, `WriteResponseHeader`):
    /// base64 of the endpoint id. A client that echoes it is routed back.
    /// pdsim's clients never echo it; only the tests do.
    #[cfg(test)]
    pub fn session_token(&self, e: usize) -> String {
        crate::plugins::scheduling::util::sessionaffinity::base64_encode(
            self.data.ids[e].as_bytes(),
        )
    }

    /// The scores the scorer named `scorer` gives these candidates, as a
    /// profile would have it score them (without the state it leaves).
    #[cfg(test)]
    fn score(
        &self,
        scorer: &str,
        candidates: &[usize],
        endpoints: &[EndpointView],
        request: &RequestContext<'_>,
        out: &mut Vec<f64>,
    ) {
        let index = self.config.plugins.iter().position(|p| p.name == scorer);
        let zero = ScorerPlugin::Zero;
        let plugin = index.map_or(&zero, |i| &self.scorers[i]);
        plugin.score(&self.data.cycle(endpoints, request), candidates, out);
    }

    /// The verdict of the decider named `decider` (none: never) on the
    /// decode target `decode`.
    #[cfg(test)]
    fn decide(&self, decider: Option<&str>, decode: usize) -> bool {
        let plugin = DeciderPlugin::new(decider.and_then(|d| self.config.plugin(d)));
        plugin.disaggregate(&self.data.cycle(&[], &RequestContext::default()), decode)
    }

    /// The no-hit-lru-scorer instance named `name`.
    #[cfg(test)]
    fn no_hit_mut(
        &mut self,
        name: &str,
    ) -> &mut crate::plugins::scheduling::scorer::nohitlru::NoHitLruScorer {
        let index = self.config.plugins.iter().position(|p| p.name == name);
        match index.map(|i| &mut self.scorers[i]) {
            Some(ScorerPlugin::NoHitLru(s)) => s,
            _ => panic!("no no-hit-lru-scorer named {name}"),
        }
    }

    /// The approx producer (`requestcontrol/dataproducer/approximateprefix/
    /// plugin.go`, `Produce`): hash the prompt at the block size
    /// `GetBlockSize` gives, up to the prefix cap, then count, per endpoint,
    /// the leading blocks it holds, stopping at the first block no endpoint
    /// holds.
    fn produce(&mut self, prompt: &Prompt, endpoints: &[EndpointView]) {
        // Producers the director skipped leave no data: no match info and
        // nothing for their PreRequest to index (an empty prompt produces
        // exactly that).
        let prompt = if self.data.skipped {
            &Prompt::default()
        } else {
            prompt
        };
        if let Some(precise) = &mut self.data.precise {
            precise.produce(prompt);
        }
        self.data.matches.iter_mut().for_each(|m| *m = 0);
        self.data.hashes.clear();
        let Some(approx) = &self.approx else { return };
        self.data.block_size = approx.produce(
            prompt,
            endpoints,
            &mut self.data.matches,
            &mut self.data.hashes,
        );
    }

    /// Tokens of the prompt an endpoint's index lacks: the unmatched blocks
    /// plus the tail past the last full block (`inflightload`, R).
    fn uncached_tokens(&self, endpoint: usize, prompt_tokens: u64) -> u64 {
        self.data
            .source_info(self.data.load_source)
            .uncached_tokens(endpoint, prompt_tokens)
    }

    /// Runs one profile: filters, scorers, picker
    /// (`pkg/epp/scheduling/scheduler_profile.go`, `Run`). `None` when the
    /// filters leave nothing.
    fn run_profile(
        &mut self,
        profile: usize,
        peer: Option<usize>,
        endpoints: &[EndpointView],
        request: &RequestContext<'_>,
    ) -> Option<usize> {
        let mut scratch = std::mem::take(&mut self.scratch);
        let chosen = self.run_profile_in(profile, peer, endpoints, request, &mut scratch);
        self.scratch = scratch;
        chosen
    }

    /// [`Router::run_profile`] with the cycle's buffers.
    fn run_profile_in(
        &mut self,
        profile: usize,
        peer: Option<usize>,
        endpoints: &[EndpointView],
        request: &RequestContext<'_>,
        scratch: &mut Scratch,
    ) -> Option<usize> {
        let profiles = std::sync::Arc::clone(&self.profiles);
        let profile = profiles.get(profile)?;
        let Scratch {
            candidates,
            totals,
            scores,
        } = scratch;
        candidates.clear();
        candidates.extend(0..endpoints.len());
        // A pool whose selector matches no pod has no endpoint at all.
        if candidates.is_empty() {
            return None;
        }
        let mut cycle = self.data.cycle(endpoints, request);
        cycle.peer = peer;
        for index in profile.filters.iter().flatten() {
            self.filters[*index].filter(&cycle, &mut self.rng, candidates);
            if candidates.is_empty() {
                return None;
            }
        }
        // The weighted sum of the scores, each clamped to [0, 1]
        // (`scheduler_profile.go`, `runScorerPlugins`, `enforceScoreRange`).
        totals.clear();
        totals.resize(candidates.len(), 0.0);
        let mut zero = ScorerPlugin::Zero;
        for (index, weight) in &profile.scorers {
            let scorer = match index {
                Some(i) => &mut self.scorers[*i],
                None => &mut zero,
            };
            scorer.score(&cycle, candidates, scores);
            for (t, s) in totals.iter_mut().zip(scores.iter()) {
                *t += weight * s.clamp(0.0, 1.0);
            }
            scorer.scored(&cycle, candidates);
        }
        shuffle(&mut self.order, candidates.len(), &mut self.rng);
        let chosen = profile.picker.pick(totals, &self.order, &mut self.rng);
        Some(candidates[chosen])
    }

    /// The prompt tokens the configuration's prefix scorer believed
    /// `endpoint` held for the request last routed (its match info's
    /// matched blocks × block size), or `None` without a prefix scorer or
    /// when the producers were skipped. Its approx producer sizes each
    /// endpoint's index from the engine's HBM blocks (`cache_config_info`),
    /// so blocks an offload tier holds are not in it.
    pub fn predicted_cached_tokens(&self, endpoint: usize) -> Option<u64> {
        let source = self.scorer_source?;
        if self.data.skipped {
            return None;
        }
        let info = self.data.source_info(source);
        let matched = *info.matches.get(endpoint)?;
        Some(matched as u64 * info.block_size as u64)
    }

    /// One scheduling cycle for a request with no headers. `None` when no
    /// endpoint survives (the EPP answers 503).
    pub fn pick(&mut self, prompt: &Prompt, endpoints: &[EndpointView]) -> Option<Decision> {
        self.pick_request(prompt, &RequestContext::default(), endpoints)
    }

    /// The burst-prefix-cache-producer's window in nanoseconds, when one
    /// is configured: the caller then hands each request to
    /// [`Router::burst_join`] instead of picking it at once.
    pub fn burst_window_ns(&self) -> Option<u64> {
        self.burst.as_ref().map(|b| b.settings.window_ns)
    }

    /// The burst producer's `Produce` up to its wait, for a request that
    /// reaches the producers now with the endpoints as `endpoints` has
    /// them (the snapshot it is scheduled on). `token` is the caller's.
    pub fn burst_join(
        &mut self,
        token: u32,
        prompt: &Prompt,
        endpoints: &[EndpointView],
        now_ns: u64,
    ) -> BurstJoin {
        match &mut self.burst {
            Some(burst) => burst.join(token, prompt, endpoints, now_ns),
            None => BurstJoin::Full,
        }
    }

    /// Seals the burst producer's batch: its members, each with the
    /// replica it was assigned, in the order they joined, for
    /// [`Router::pick_member`].
    pub fn burst_seal(&mut self) -> Vec<BurstMember> {
        match &mut self.burst {
            Some(burst) => burst.seal(&self.data.ids),
            None => Vec::new(),
        }
    }

    /// The scheduling cycle of a sealed batch's member, on the endpoints
    /// as it found them, with the burst producer's match info.
    pub fn pick_member(&mut self, prompt: &Prompt, member: &BurstMember) -> Option<Decision> {
        if let (Some(burst), Some(data)) = (&self.burst, &mut self.data.burst) {
            (data.total, data.block_size) = burst.match_info(member, &mut data.matches);
        }
        let decision = self.pick(prompt, &member.views);
        // Other requests carry none of this producer's data.
        if let Some(data) = &mut self.data.burst {
            data.total = 0;
            data.matches.iter_mut().for_each(|m| *m = 0);
        }
        decision
    }

    /// The scheduling cycle of a request the burst producer's full batch
    /// refused: the director skips the producers after the failing one,
    /// so the cycle runs without any producer's data.
    pub fn pick_skipping_producers(
        &mut self,
        prompt: &Prompt,
        endpoints: &[EndpointView],
    ) -> Option<Decision> {
        self.data.skipped = true;
        let decision = self.pick(prompt, endpoints);
        self.data.skipped = false;
        decision
    }

    /// One scheduling cycle: producers, the profile handler's loop over
    /// the profiles, then the PreRequest plugins. `None` when the handler
    /// yields no primary result (the EPP answers 503).
    pub fn pick_request(
        &mut self,
        prompt: &Prompt,
        request: &RequestContext<'_>,
        endpoints: &[EndpointView],
    ) -> Option<Decision> {
        self.data.prompt_tokens = prompt.tokens();
        self.produce(prompt, endpoints);
        for scorer in &mut self.scorers {
            match scorer {
                ScorerPlugin::NoHitLru(s) => s.begin_request(),
                ScorerPlugin::SessionAffinity(s) => s.session.present = None,
                _ => {}
            }
        }
        for filter in &mut self.filters {
            if let FilterPlugin::SessionAffinity(f) = filter {
                f.session.present = None;
            }
        }
        // (primary profile, its target, the other profile that ran and its
        // target).
        let handler = std::sync::Arc::clone(&self.handler);
        let picked = handler.pick(
            request,
            &mut RunProfiles {
                router: self,
                endpoints,
                request,
            },
        )?;
        let (decode_profile, decode, prefill) = (picked.primary, picked.target, picked.other);
        // PreRequest: `x-prefiller-host-port` is the first target of the
        // profile its writer reads (the disagg handler's own prefill
        // profile, `disagg/disagg_profile_handler.go`, or a
        // prefill-header-handler's `prefillProfile`,
        // `disagg/disagg_headers_handler.go`). The
        // deprecated pd-profile-handler writes no header: without a header
        // handler its prefill profile runs and is counted, but the sidecar
        // serves the request whole on the decode endpoint.
        let header = self.header_profile.and_then(|h| match prefill {
            Some((profile, target)) if profile == h => Some(target),
            _ if h == decode_profile => Some(decode),
            _ => None,
        });
        let prefill_target = prefill.map(|(_, t)| t);
        // The approx producer and no-hit-lru-scorer index the primary
        // target and the target of the profile literally named `prefill`.
        let named_prefill = prefill
            .filter(|(profile, _)| Some(*profile) == self.prefill_profile)
            .map(|(_, t)| t);
        let mut decision = Decision {
            decode,
            prefill: header,
            ticket: Ticket::default(),
        };
        // PreRequest: the in-flight load of each profile's target grows by
        // one request and by the prompt tokens its index lacks
        // (`requestcontrol/dataproducer/inflightload/producer.go`).
        if self.data.inflight.is_some() {
            let prompt_tokens = self.data.prompt_tokens;
            let uncached = |router: &Router, e: usize| router.uncached_tokens(e, prompt_tokens);
            let (d, p) = (
                uncached(self, decode),
                prefill_target.map(|p| (p, uncached(self, p))),
            );
            if let Some(load) = self.data.inflight.as_mut() {
                decision.ticket.decode = Some(load.add(decode, d));
                decision.ticket.prefill = p.map(|(e, tokens)| load.add(e, tokens));
                decision.ticket.prefill_named = named_prefill.is_some();
            }
        }
        // PreRequest: the approx producer indexes the prompt on the primary
        // target and on the `prefill` profile's target
        // (`requestcontrol/dataproducer/approximateprefix/plugin.go`).
        // At most two, on the stack: this runs for every request.
        let both;
        let targets: &[usize] = match named_prefill {
            Some(p) => {
                both = [decode, p];
                &both
            }
            None => std::slice::from_ref(&decode),
        };
        if let Some(approx) = &mut self.approx {
            approx.pre_request(targets, endpoints, &self.data.hashes);
        }
        // The precise producer's PreRequest (speculative indexing,
        // `requestcontrol/dataproducer/preciseprefixcache/prerequest.go`).
        if let Some(precise) = &mut self.data.precise {
            precise.speculate(self.clock, targets);
        }
        // no-hit-lru-scorer's PreRequest: a request its last Score found
        // cold touches the primary target, then the `prefill` profile's
        // (`scorer/nohitlru/no_hit_lru.go`).
        for scorer in &mut self.scorers {
            if let ScorerPlugin::NoHitLru(s) = scorer {
                s.pre_request(targets);
            }
        }
        // session-affinity-scorer's PreRequest (`session_id` strategy,
        // `scorer/sessionaffinity/session_affinity.go` and
        // `util/sessionaffinity/session_id.go`): bind the session to the
        // target of `profileName` (default the primary).
        let scorer_sessions = self.scorers.iter_mut().filter_map(|s| match s {
            ScorerPlugin::SessionAffinity(s) => Some(&mut s.session),
            _ => None,
        });
        let filter_sessions = self.filters.iter_mut().filter_map(|f| match f {
            FilterPlugin::SessionAffinity(f) => Some(&mut f.session),
            _ => None,
        });
        for session in filter_sessions.chain(scorer_sessions) {
            session.pre_request(request, (decode_profile, decode), prefill);
        }
        self.routed += 1;
        self.disaggregated += u64::from(decision.prefill.is_some());
        Some(decision)
    }

    /// ResponseBody at the first chunk: the in-flight load producer
    /// releases what the ticket says ([`InFlightLoad::first_chunk`]).
    pub fn first_chunk(&mut self, ticket: &mut Ticket) {
        if let Some(load) = self.data.inflight.as_mut() {
            load.first_chunk(ticket);
        }
    }

    /// ResponseBody at the end of the stream: release what is left, once.
    pub fn end_of_stream(&mut self, ticket: &mut Ticket) {
        if let Some(load) = self.data.inflight.as_mut() {
            load.end_of_stream(ticket);
        }
    }

    /// The in-flight (requests, tokens) counters of an endpoint.
    pub fn inflight(&self, endpoint: usize) -> (u64, u64) {
        self.data
            .inflight
            .as_ref()
            .map_or((0, 0), |l| (l.requests[endpoint], l.tokens[endpoint]))
    }
}

#[cfg(test)]
mod tests {
    use super::{EndpointView, InFlightLoad, RequestContext, Router};
    use crate::RouterInputs;
    use crate::config::load_config;
    use crate::plugins::scheduling::util::sessionaffinity::Session;
    use crate::plugins::scheduling::util::sessionaffinity::{base64_decode, base64_encode};
    use pdsim_core::{Prompt, Segment};
    use std::collections::BTreeMap;

    fn inputs(text: &str) -> RouterInputs {
        RouterInputs {
            flags: Default::default(),
            config: load_config("t", text, false).unwrap(),
            config_origin: "t".into(),
            manifests: Default::default(),
        }
    }

    fn labels(roles: &[&str]) -> Vec<BTreeMap<String, String>> {
        roles
            .iter()
            .map(|r| BTreeMap::from([("llm-d.ai/role".to_string(), r.to_string())]))
            .collect()
    }

    fn prompt(id: u64, tokens: u32) -> Prompt {
        Prompt::new(vec![Segment { id, tokens }])
    }

    const QUEUE: &str = "apiVersion: llm-d.ai/v1alpha1\nkind: EndpointPickerConfig\nplugins:\n- type: queue-scorer\n";

    #[test]
    fn the_deprecated_block_size_stands_in_for_a_default_block_size_tokens() {
        let approx_block = |params: &str| {
            let text = format!(
                "apiVersion: llm-d.ai/v1alpha1\nkind: EndpointPickerConfig\nplugins:\n- type: prefix-cache-scorer\n- type: approx-prefix-cache-producer\n  parameters: {params}\n"
            );
            let router = Router::new(&inputs(&text), labels(&["prefill-decode"; 2]), 1);
            router.approx.as_ref().map(|a| a.settings.block_size_tokens)
        };
        assert_eq!(approx_block("{autoTune: false, blockSize: 128}"), Some(128));
        // An explicit blockSizeTokens other than the default wins.
        assert_eq!(
            approx_block("{autoTune: false, blockSize: 128, blockSizeTokens: 256}"),
            Some(256)
        );
        // At its default value it is overridden, as `ApproxPrefixCacheFactory`
        // cannot tell it from an omitted one.
        assert_eq!(
            approx_block("{autoTune: false, blockSize: 128, blockSizeTokens: 16}"),
            Some(128)
        );
        // Only a positive deprecated size stands in: a negative one is
        // ignored, not refused, and the default holds.
        assert_eq!(approx_block("{autoTune: false, blockSize: -4}"), Some(16));
    }

    #[test]
    fn queue_scorer_picks_the_shortest_queue() {
        let mut router = Router::new(&inputs(QUEUE), labels(&["prefill-decode"; 3]), 1);
        let views: Vec<EndpointView> = [5, 0, 9]
            .iter()
            .map(|w| EndpointView {
                waiting: *w,
                ..Default::default()
            })
            .collect();
        assert_eq!(router.pick(&prompt(1, 64), &views).unwrap().decode, 1);
    }

    #[test]
    fn ties_break_at_random_but_deterministically() {
        let views = vec![EndpointView::default(); 4];
        let picks = |seed| {
            let mut router = Router::new(&inputs(QUEUE), labels(&["prefill-decode"; 4]), seed);
            (0..32)
                .map(|i| router.pick(&prompt(i, 16), &views).unwrap().decode)
                .collect::<Vec<_>>()
        };
        assert_eq!(picks(7), picks(7), "same seed, same decisions");
        let spread: std::collections::BTreeSet<usize> = picks(7).into_iter().collect();
        assert!(spread.len() > 1, "ties are not always broken the same way");
    }

    #[test]
    fn the_prefix_index_steers_repeat_prompts_to_the_same_endpoint() {
        let text = "apiVersion: llm-d.ai/v1alpha1\nkind: EndpointPickerConfig\nplugins:\n- type: prefix-cache-scorer\n- type: approx-prefix-cache-producer\n  parameters: {autoTune: false, blockSizeTokens: 16}\n";
        let mut router = Router::new(&inputs(text), labels(&["prefill-decode"; 4]), 3);
        let views = vec![EndpointView::default(); 4];
        let first = router.pick(&prompt(42, 256), &views).unwrap().decode;
        for _ in 0..10 {
            assert_eq!(router.pick(&prompt(42, 256), &views).unwrap().decode, first);
        }
    }

    #[test]
    fn the_prefix_based_decider_disaggregates_only_uncached_prompts() {
        let text = "apiVersion: llm-d.ai/v1alpha1\nkind: EndpointPickerConfig\nplugins:\n- type: prefill-filter\n- type: decode-filter\n- type: prefix-cache-scorer\n- type: approx-prefix-cache-producer\n  parameters: {autoTune: false, blockSizeTokens: 16}\n- type: prefix-based-pd-decider\n  parameters: {nonCachedTokens: 64}\n- type: disagg-profile-handler\n  parameters: {deciders: {prefill: prefix-based-pd-decider}}\nschedulingProfiles:\n- name: prefill\n  plugins: [{pluginRef: prefill-filter}, {pluginRef: prefix-cache-scorer}]\n- name: decode\n  plugins: [{pluginRef: decode-filter}, {pluginRef: prefix-cache-scorer}]\n";
        let mut router = Router::new(&inputs(text), labels(&["prefill", "decode"]), 5);
        let views = vec![EndpointView::default(); 2];
        // New 256-token prompt: all uncached, so prefill runs on endpoint 0.
        let d = router.pick(&prompt(9, 256), &views).unwrap();
        assert_eq!((d.decode, d.prefill), (1, Some(0)));
        // The same prompt again: the decode endpoint is indexed for it, so
        // fewer than 64 tokens are uncached and it stays decode-only.
        let d = router.pick(&prompt(9, 256), &views).unwrap();
        assert_eq!((d.decode, d.prefill), (1, None));
        // A short prompt below the threshold never disaggregates.
        let d = router.pick(&prompt(10, 32), &views).unwrap();
        assert_eq!(d.prefill, None);
        assert_eq!((router.routed, router.disaggregated), (3, 1));
    }

    /// Topology affinity over five endpoints: prefill 0 shares the decode
    /// endpoint's rack, 1 its host, 2 only its zone, 4 carries no topology
    /// labels; 3 is the decode endpoint.
    fn topology_labels() -> Vec<BTreeMap<String, String>> {
        let pod = |role: &str, topology: &[(&str, &str)]| {
            let mut l = BTreeMap::from([("llm-d.ai/role".to_string(), role.to_string())]);
            for (k, v) in topology {
                l.insert(format!("topology.kubernetes.io/{k}"), v.to_string());
            }
            l
        };
        let host = |l: BTreeMap<String, String>, h: &str| {
            let mut l = l;
            l.insert("kubernetes.io/hostname".into(), h.into());
            l
        };
        vec![
            host(pod("prefill", &[("rack", "r1"), ("zone", "z1")]), "h0"),
            host(pod("prefill", &[("rack", "r1"), ("zone", "z1")]), "h3"),
            host(pod("prefill", &[("rack", "r2"), ("zone", "z1")]), "h2"),
            host(pod("decode", &[("rack", "r1"), ("zone", "z1")]), "h3"),
            pod("prefill", &[]),
        ]
    }

    fn topology_config(filter: &str, queue_weight: f64, stage_order: &str) -> String {
        format!(
            "apiVersion: llm-d.ai/v1alpha1\nkind: EndpointPickerConfig\nplugins:\n- type: prefill-filter\n- type: decode-filter\n- type: queue-scorer\n- type: topology-extractor\n- type: topology-affinity-filter\n  parameters: {filter}\n- type: topology-affinity-scorer\n- type: always-disagg-pd-decider\n- type: disagg-profile-handler\n  parameters: {{deciders: {{prefill: always-disagg-pd-decider}}, stageOrder: {stage_order}}}\nschedulingProfiles:\n- name: prefill\n  plugins: [{{pluginRef: prefill-filter}}, {{pluginRef: topology-affinity-filter}}, {{pluginRef: queue-scorer, weight: {queue_weight}}}, {{pluginRef: topology-affinity-scorer}}]\n- name: decode\n  plugins: [{{pluginRef: decode-filter}}]\n"
        )
    }

    /// Waiting requests per endpoint: the queue scorer prefers 0 (min-max:
    /// 0 waiting scores 1, the most waiting 0).
    fn topology_views() -> Vec<EndpointView> {
        [0, 10, 10, 0, 10]
            .iter()
            .map(|w| EndpointView {
                waiting: *w,
                ..Default::default()
            })
            .collect()
    }

    #[test]
    fn the_topology_filter_keeps_prefill_endpoints_near_the_decode_pick() {
        let views = topology_views();
        // With no filter in play (`minAffinity: region` keeps all but the
        // unlabelled endpoint), queue weight 2 makes endpoint 0 win:
        // 0.2 (rack) + 2 × 1 against 1.0 (host) + 2 × 0.
        let picks = |filter: &str| {
            let mut router = Router::new(
                &inputs_experimental(&topology_config(filter, 2.0, "decode-first")),
                topology_labels(),
                1,
            );
            let d = router.pick(&prompt(1, 64), &views).unwrap();
            assert_eq!(d.decode, 3);
            d.prefill.unwrap()
        };
        assert_eq!(picks("{minAffinity: region}"), 0);
        // `host`, the default: only the decode endpoint's host is left.
        assert_eq!(picks("{}"), 1);
        assert_eq!(picks("{minAffinity: host}"), 1);
        // `rack`: 0 and 1 are in rack r1, and the queue decides.
        assert_eq!(picks("{minAffinity: rack}"), 0);
    }

    #[test]
    fn the_topology_filter_fails_open_and_drops_endpoints_without_topology() {
        let views = topology_views();
        // The decode endpoint without topology labels: no peer topology,
        // every prefill candidate stays (the unlabelled 4 too), the scorer
        // gives 0 everywhere and the queue picks 0, the only one idle.
        let mut labels = topology_labels();
        labels[3] = BTreeMap::from([("llm-d.ai/role".to_string(), "decode".to_string())]);
        let mut router = Router::new(
            &inputs_experimental(&topology_config("{}", 2.0, "decode-first")),
            labels,
            1,
        );
        assert_eq!(
            router.pick(&prompt(1, 64), &views).unwrap().prefill,
            Some(0)
        );
        // A peer whose host and rack no candidate shares: `host` fails open
        // (all four stay). Make endpoint 4 the queue's favourite to see it
        // stay in; with the filter able to act it would be dropped for
        // lacking the attribute.
        let mut views = topology_views();
        views[0].waiting = 10;
        views[4].waiting = 0;
        let mut labels = topology_labels();
        labels[3].insert("kubernetes.io/hostname".into(), "h9".into());
        labels[3].insert("topology.kubernetes.io/rack".into(), "r9".into());
        let mut router = Router::new(
            &inputs_experimental(&topology_config("{}", 2.0, "decode-first")),
            labels,
            1,
        );
        assert_eq!(
            router.pick(&prompt(1, 64), &views).unwrap().prefill,
            Some(4)
        );
        // `zone` can act (0, 1, 2 share z1): 4 has no attribute and goes;
        // the scorer gives 0.05 each, the queue ties 0, 1 and 2 at 0 and
        // the max-score picker takes one of them.
        let mut labels = topology_labels();
        labels[3].insert("kubernetes.io/hostname".into(), "h9".into());
        labels[3].insert("topology.kubernetes.io/rack".into(), "r9".into());
        let mut router = Router::new(
            &inputs_experimental(&topology_config("{minAffinity: zone}", 2.0, "decode-first")),
            labels,
            1,
        );
        let p = router
            .pick(&prompt(1, 64), &views)
            .unwrap()
            .prefill
            .unwrap();
        assert!(p < 3, "endpoint 4 lacks the attribute and is filtered out");
    }

    #[test]
    fn the_topology_scorer_grades_host_1_rack_0_2() {
        let views = topology_views();
        let pick = |queue_weight: f64| {
            let mut router = Router::new(
                &inputs_experimental(&topology_config(
                    "{minAffinity: region}",
                    queue_weight,
                    "decode-first",
                )),
                topology_labels(),
                1,
            );
            router
                .pick(&prompt(1, 64), &views)
                .unwrap()
                .prefill
                .unwrap()
        };
        // Endpoint 1 (same host): 1.0 + w × 0; endpoint 0 (same rack):
        // 0.2 + w × 1; endpoint 2 (same zone): 0.05 + w × 0. So 1 wins
        // below w = 0.8 and 0 above it.
        assert_eq!(pick(0.7), 1);
        assert_eq!(pick(0.9), 0);
    }

    #[test]
    fn topology_prefill_first_publishes_the_prefill_pick_to_the_decode_profile() {
        // Two decode endpoints on different hosts; the decode profile
        // filters by topology against the prefill pick (endpoint 0, the
        // only prefill endpoint), so decode goes to its host although the
        // queue prefers the other.
        let text = "apiVersion: llm-d.ai/v1alpha1\nkind: EndpointPickerConfig\nplugins:\n- type: prefill-filter\n- type: decode-filter\n- type: queue-scorer\n- type: topology-extractor\n- type: topology-affinity-filter\n- type: disagg-profile-handler\n  parameters: {stageOrder: prefill-first}\nschedulingProfiles:\n- name: prefill\n  plugins: [{pluginRef: prefill-filter}]\n- name: decode\n  plugins: [{pluginRef: decode-filter}, {pluginRef: topology-affinity-filter}, {pluginRef: queue-scorer}]\n";
        let host = |role: &str, h: &str| {
            BTreeMap::from([
                ("llm-d.ai/role".to_string(), role.to_string()),
                ("kubernetes.io/hostname".to_string(), h.to_string()),
            ])
        };
        let labels = vec![
            host("prefill", "a"),
            host("decode", "b"),
            host("decode", "a"),
        ];
        let views: Vec<EndpointView> = [0, 0, 10]
            .iter()
            .map(|w| EndpointView {
                waiting: *w,
                ..Default::default()
            })
            .collect();
        let mut router = Router::new(&inputs_experimental(text), labels.clone(), 1);
        let d = router.pick(&prompt(1, 64), &views).unwrap();
        assert_eq!((d.prefill, d.decode), (Some(0), 2));
        // Decode-first publishes nothing to the decode profile: the queue
        // decides.
        let decode_first = text.replace("stageOrder: prefill-first", "stageOrder: decode-first");
        let mut router = Router::new(&inputs_experimental(&decode_first), labels, 1);
        assert_eq!(router.pick(&prompt(1, 64), &views).unwrap().decode, 1);
    }

    const AGG: &str = "apiVersion: llm-d.ai/v1alpha1\nkind: EndpointPickerConfig\nplugins:\n- type: approx-prefix-cache-producer\n  parameters: {autoTune: false, blockSizeTokens: 16}\n- type: inflight-load-producer\n- type: prefix-cache-affinity-filter\n  parameters: {peakPrefillThroughput: 2256}\n- type: token-load-scorer\nschedulingProfiles:\n- name: default\n  plugins: [{pluginRef: prefix-cache-affinity-filter}, {pluginRef: token-load-scorer}]\n";

    #[test]
    fn in_flight_load_grows_at_pick_and_shrinks_at_first_chunk_and_end_of_stream() {
        let text = "apiVersion: llm-d.ai/v1alpha1\nkind: EndpointPickerConfig\nplugins:\n- type: prefill-filter\n- type: decode-filter\n- type: token-load-scorer\n- type: always-disagg-pd-decider\n- type: disagg-profile-handler\n  parameters: {deciders: {prefill: always-disagg-pd-decider}}\nschedulingProfiles:\n- name: prefill\n  plugins: [{pluginRef: prefill-filter}, {pluginRef: token-load-scorer}]\n- name: decode\n  plugins: [{pluginRef: decode-filter}, {pluginRef: token-load-scorer}]\n";
        let mut router = Router::new(&inputs(text), labels(&["prefill", "decode"]), 1);
        let views = vec![EndpointView::default(); 2];
        let mut d = router.pick(&prompt(1, 100), &views).unwrap();
        assert_eq!((d.decode, d.prefill), (1, Some(0)));
        // Nothing indexed: every block is uncached on both. The 100 tokens
        // are a full block of 64 and a partial one the producer hashes too,
        // so the EPP counts two blocks' worth, 128 tokens
        // (`uncachedInputTokens` in `inflightload/producer.go`: (total −
        // matched) · block size, the tail past them 0).
        assert_eq!(router.inflight(0), (1, 128));
        assert_eq!(router.inflight(1), (1, 128));
        router.first_chunk(&mut d.ticket);
        // The prompt is computed: tokens go at the first chunk; the
        // `prefill` profile's entry goes whole, the decode request stays in
        // flight until the end of the stream.
        assert_eq!(router.inflight(0), (0, 0));
        assert_eq!(router.inflight(1), (1, 0));
        router.first_chunk(&mut d.ticket);
        assert_eq!(router.inflight(1), (1, 0), "tokens released once");
        router.end_of_stream(&mut d.ticket);
        assert_eq!(router.inflight(0), (0, 0));
        assert_eq!(router.inflight(1), (0, 0));
        router.end_of_stream(&mut d.ticket);
        assert_eq!(router.inflight(1), (0, 0), "released once");
    }

    #[test]
    fn the_affinity_filter_draws_no_exploration_when_it_cannot_act() {
        // `Filter` returns before its exploration draw when there is at
        // most one candidate or `affinityThreshold` is not above 0
        // (`filter/prefixcacheaffinity/plugin.go`), so the random picker
        // after it sees the same stream as with no filter at all.
        let head = "apiVersion: llm-d.ai/v1alpha1\nkind: EndpointPickerConfig\nplugins:\n- type: approx-prefix-cache-producer\n  parameters: {autoTune: false, blockSizeTokens: 16}\n- type: random-picker\n";
        let picks = |filter: &str, n: usize| {
            let text = format!(
                "{head}{filter}schedulingProfiles:\n- name: default\n  plugins: [{{pluginRef: random-picker}}{}]\n",
                if filter.is_empty() {
                    ""
                } else {
                    ", {pluginRef: prefix-cache-affinity-filter}"
                }
            );
            let mut router = Router::new(&inputs(&text), labels(&vec!["prefill-decode"; n]), 5);
            let views = vec![EndpointView::default(); n];
            (0..40)
                .map(|i| router.pick(&prompt(i, 64), &views).unwrap().decode)
                .collect::<Vec<_>>()
        };
        let off = "- type: prefix-cache-affinity-filter\n  parameters: {affinityThreshold: 0, explorationProbability: 0.5}\n";
        assert_eq!(picks(off, 4), picks("", 4));
        let on = "- type: prefix-cache-affinity-filter\n  parameters: {affinityThreshold: 0.5, explorationProbability: 0.5}\n";
        // Acting, it draws: the picks differ (each fresh prompt matches
        // nothing, so the filter itself keeps every candidate).
        assert_ne!(picks(on, 4), picks("", 4));
    }

    #[test]
    fn token_load_scorer_prefers_the_endpoint_with_less_work_in_flight() {
        let mut router = Router::new(&inputs(AGG), labels(&["prefill-decode"; 2]), 2);
        let views = vec![EndpointView::default(); 2];
        // Two different prompts: the second avoids the first's endpoint.
        let first = router.pick(&prompt(1, 4096), &views).unwrap().decode;
        let second = router.pick(&prompt(2, 4096), &views).unwrap().decode;
        assert_ne!(first, second);
    }

    #[test]
    fn the_affinity_filter_sticks_to_the_cached_endpoint_until_its_backlog_costs_too_much() {
        let mut router = Router::new(&inputs(AGG), labels(&["prefill-decode"; 2]), 3);
        let views = vec![EndpointView::default(); 2];
        let home = router.pick(&prompt(7, 1024), &views).unwrap().decode;
        // Same prompt: sticky to `home` although it carries more load.
        for _ in 0..5 {
            assert_eq!(router.pick(&prompt(7, 1024), &views).unwrap().decode, home);
        }
        // Pile 18 s worth of prefill (at 2256 tokens/s) onto `home`: the
        // TTFT penalty exceeds maxTTFTPenaltyMs and the filter lets the other
        // endpoint compete.
        for i in 0..40 {
            let _ = router.pick(
                &prompt(100 + i, 4096),
                &[EndpointView::default(), EndpointView::default()],
            );
        }
        let (_, home_tokens) = router.inflight(home);
        let (_, away_tokens) = router.inflight(1 - home);
        assert!(home_tokens > 0 && away_tokens > 0);
        let penalty_s = (home_tokens as f64 - away_tokens as f64) / 2256.0;
        let d = router.pick(&prompt(7, 1024), &views).unwrap().decode;
        if penalty_s > 18.0 {
            assert_ne!(d, home, "penalty {penalty_s:.1} s > 18 s");
        } else {
            assert_eq!(d, home, "penalty {penalty_s:.1} s <= 18 s");
        }
    }

    #[test]
    fn label_selectors_keep_matching_endpoints() {
        let text = "apiVersion: llm-d.ai/v1alpha1\nkind: EndpointPickerConfig\nplugins:\n- type: label-selector-filter\n  parameters:\n    matchLabels: {tier: gold}\n    matchExpressions: [{key: zone, operator: In, values: [a, b]}]\n- type: queue-scorer\n";
        let mut labels = labels(&["prefill-decode"; 3]);
        labels[0].insert("tier".into(), "gold".into());
        labels[0].insert("zone".into(), "c".into());
        labels[1].insert("tier".into(), "gold".into());
        labels[1].insert("zone".into(), "b".into());
        let mut router = Router::new(&inputs(text), labels, 1);
        let views = vec![EndpointView::default(); 3];
        for i in 0..8 {
            assert_eq!(router.pick(&prompt(i, 16), &views).unwrap().decode, 1);
        }
        // Each requirement operator (`selector.go`): Exists needs the key,
        // DoesNotExist its absence, NotIn any other value or none.
        let kept = |expression: &str| {
            let text = format!(
                "apiVersion: llm-d.ai/v1alpha1\nkind: EndpointPickerConfig\nplugins:\n- type: label-selector-filter\n  parameters:\n    matchExpressions: [{expression}]\n- type: queue-scorer\n"
            );
            let mut zoned = super::tests::labels(&["prefill-decode"; 3]);
            zoned[0].insert("zone".into(), "a".into());
            zoned[1].insert("zone".into(), "b".into());
            let mut router = Router::new(&inputs(&text), zoned, 1);
            let mut kept: Vec<usize> = (0..12)
                .map(|i| router.pick(&prompt(i, 16), &views).unwrap().decode)
                .collect();
            kept.sort_unstable();
            kept.dedup();
            kept
        };
        assert_eq!(kept("{key: zone, operator: Exists}"), [0, 1]);
        assert_eq!(kept("{key: zone, operator: DoesNotExist}"), [2]);
        assert_eq!(kept("{key: zone, operator: NotIn, values: [a]}"), [1, 2]);
    }

    #[test]
    fn no_hit_lru_spreads_cold_requests_over_the_least_recently_used() {
        let text = "apiVersion: llm-d.ai/v1alpha1\nkind: EndpointPickerConfig\nplugins:\n- type: no-hit-lru-scorer\n";
        let mut router = Router::new(&inputs(text), labels(&["prefill-decode"; 3]), 4);
        let views = vec![EndpointView::default(); 3];
        // Cold requests visit never-used endpoints in order, then the least
        // recently used one.
        let picks: Vec<usize> = (0..6)
            .map(|i| router.pick(&prompt(100 + i, 8), &views).unwrap().decode)
            .collect();
        assert_eq!(picks, vec![0, 1, 2, 0, 1, 2]);
    }

    fn inputs_experimental(text: &str) -> RouterInputs {
        RouterInputs {
            flags: Default::default(),
            config: load_config("t", text, true).unwrap(),
            config_origin: "t".into(),
            manifests: Default::default(),
        }
    }

    fn headers(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    /// The scores `scorer` (configured by `parameters`) gives `candidates`.
    fn scores(
        scorer: &str,
        parameters: &str,
        views: &[EndpointView],
        setup: impl FnOnce(&mut Router),
    ) -> Vec<f64> {
        let text = format!(
            "apiVersion: llm-d.ai/v1alpha1\nkind: EndpointPickerConfig\nplugins:\n- type: {scorer}\n  parameters: {parameters}\n"
        );
        let mut router = Router::new(
            &inputs(&text),
            labels(&vec!["prefill-decode"; views.len()]),
            1,
        );
        setup(&mut router);
        let candidates: Vec<usize> = (0..views.len()).collect();
        let mut out = Vec::new();
        router.score(
            scorer,
            &candidates,
            views,
            &RequestContext::default(),
            &mut out,
        );
        out
    }

    fn close(a: &[f64], b: &[f64]) -> bool {
        a.len() == b.len() && a.iter().zip(b).all(|(x, y)| (x - y).abs() < 1e-12)
    }

    #[test]
    fn prefix_scorer_blends_the_match_ratio_with_the_squared_match_length() {
        // `scorer/prefix/plugin.go`: w · min(1, matched·blockSize/scale)² +
        // (1 − w) · matched/total. 10 blocks of 16 tokens in the request;
        // endpoints match 0, 5 and 10 blocks; w = 0.4, scale 320 tokens.
        // Endpoint 1: length 5·16/320 = 0.25 → 0.4·0.0625 + 0.6·0.5 = 0.325.
        // Endpoint 2: length 10·16/320 = 0.5 → 0.4·0.25 + 0.6·1.0 = 0.7.
        let views = vec![EndpointView::default(); 3];
        let out = scores(
            "prefix-cache-scorer",
            "{matchLengthWeight: 0.4, matchLengthScaleTokens: 320}",
            &views,
            |r| {
                r.data.matches = vec![0, 5, 10];
                r.data.hashes = [0; 10].into();
                r.data.block_size = 16;
            },
        );
        assert!(close(&out, &[0.0, 0.325, 0.7]), "{out:?}");
        // Without the weight only the ratio counts: 0, 0.5, 1.
        let out = scores("prefix-cache-scorer", "{}", &views, |r| {
            r.data.matches = vec![0, 5, 10];
            r.data.hashes = [0; 10].into();
            r.data.block_size = 16;
        });
        assert!(close(&out, &[0.0, 0.5, 1.0]), "{out:?}");
    }

    #[test]
    fn the_approx_producer_hashes_a_trailing_partial_block() {
        // `prefixhash.GetBlockHashes` hashes a prompt's last, shorter slice
        // too (`getKVCacheBlocksFromTokens`), so a repeated prompt matches
        // whole while another prompt with the same first block and a
        // different tail matches half.
        let text = "apiVersion: llm-d.ai/v1alpha1\nkind: EndpointPickerConfig\nplugins:\n- type: approx-prefix-cache-producer\n  parameters: {autoTune: false, blockSizeTokens: 64}\n- type: prefix-cache-scorer\n- type: queue-scorer\nschedulingProfiles:\n- name: default\n  plugins: [{pluginRef: prefix-cache-scorer, weight: 2}, {pluginRef: queue-scorer}]\n";
        let mut router = Router::new(&inputs(text), labels(&["prefill-decode"; 2]), 1);
        let a = Prompt::new(vec![
            Segment { id: 1, tokens: 64 },
            Segment { id: 2, tokens: 36 },
        ]);
        let b = Prompt::new(vec![
            Segment { id: 1, tokens: 64 },
            Segment { id: 3, tokens: 36 },
        ]);
        // The queue sends the first request to endpoint 0.
        let busy = vec![
            EndpointView::default(),
            EndpointView {
                waiting: 10,
                ..Default::default()
            },
        ];
        assert_eq!(router.pick(&a, &busy).unwrap().decode, 0);
        assert_eq!(
            router.data.hashes.len(),
            2,
            "a full block and a partial one"
        );
        let idle = vec![EndpointView::default(); 2];
        // Same first block, other 36 tokens: one of two blocks held.
        assert_eq!(router.pick(&b, &idle).unwrap().decode, 0);
        assert_eq!(router.data.matches, [1, 0]);
        // The first prompt again: both blocks, its partial one included.
        assert_eq!(router.pick(&a, &idle).unwrap().decode, 0);
        assert_eq!(router.data.matches, [2, 0]);
        assert_eq!(router.data.hashes.len(), 2);
        // A prompt ending on a block boundary has no partial block.
        router.pick(&prompt(1, 64), &idle).unwrap();
        assert_eq!((router.data.hashes.len(), router.data.matches[0]), (1, 1));
    }

    /// What the router believed an endpoint held for the request it last
    /// routed: its prefix scorer's matched blocks × the producer's block
    /// size; nothing without a prefix scorer.
    #[test]
    fn the_prediction_is_the_prefix_scorers_match_in_tokens() {
        let text = "apiVersion: llm-d.ai/v1alpha1\nkind: EndpointPickerConfig\nplugins:\n- type: approx-prefix-cache-producer\n  parameters: {autoTune: false, blockSizeTokens: 64}\n- type: prefix-cache-scorer\n- type: queue-scorer\nschedulingProfiles:\n- name: default\n  plugins: [{pluginRef: prefix-cache-scorer, weight: 2}, {pluginRef: queue-scorer}]\n";
        let mut router = Router::new(&inputs(text), labels(&["prefill-decode"; 2]), 1);
        let idle = vec![EndpointView::default(); 2];
        let decode = router.pick(&prompt(1, 192), &idle).unwrap().decode;
        assert_eq!(
            router.predicted_cached_tokens(decode),
            Some(0),
            "a first sight"
        );
        let again = router.pick(&prompt(1, 192), &idle).unwrap().decode;
        assert_eq!(again, decode);
        assert_eq!(router.predicted_cached_tokens(decode), Some(3 * 64));
        assert_eq!(router.predicted_cached_tokens(1 - decode), Some(0));
        assert_eq!(router.predicted_cached_tokens(2), None, "no such endpoint");
        let text = "apiVersion: llm-d.ai/v1alpha1\nkind: EndpointPickerConfig\nplugins:\n- type: queue-scorer\nschedulingProfiles:\n- name: default\n  plugins: [{pluginRef: queue-scorer}]\n";
        let mut router = Router::new(&inputs(text), labels(&["prefill-decode"; 2]), 1);
        router.pick(&prompt(1, 192), &idle).unwrap();
        assert_eq!(router.predicted_cached_tokens(0), None);
    }

    #[test]
    fn a_burst_member_is_scheduled_on_its_snapshot_with_a_full_match_on_its_replica() {
        use super::BurstJoin;
        let text = "apiVersion: llm-d.ai/v1alpha1\nkind: EndpointPickerConfig\nplugins:\n- type: burst-prefix-cache-producer\n  parameters: {maxBatchSize: 2, blockSizeTokens: 64}\n- type: prefix-cache-scorer\n  parameters: {prefixMatchInfoProducerName: burst-prefix-cache-producer}\n- type: approx-prefix-cache-producer\n  parameters: {autoTune: false, blockSizeTokens: 64}\n- type: load-aware-scorer\nschedulingProfiles:\n- name: default\n  plugins: [{pluginRef: prefix-cache-scorer, weight: 2}, {pluginRef: load-aware-scorer}]\n";
        let mut router = Router::new(
            &inputs_experimental(text),
            labels(&["prefill-decode"; 3]),
            1,
        );
        assert_eq!(router.burst_window_ns(), Some(100_000_000));
        let p = prompt(1, 100);
        // Endpoint 0 is busy as the burst arrives, endpoint 1 less so.
        let busy = |w: [u32; 3]| -> Vec<EndpointView> {
            w.iter()
                .map(|w| EndpointView {
                    waiting: *w,
                    ..Default::default()
                })
                .collect()
        };
        let at_arrival = busy([10, 0, 5]);
        assert_eq!(
            router.burst_join(1, &p, &at_arrival, 7),
            BurstJoin::Opened {
                seal_at_ns: 100_000_007
            }
        );
        assert_eq!(router.burst_join(2, &p, &at_arrival, 8), BurstJoin::Joined);
        // The batch holds maxBatchSize 2: the third fails `Produce` and is
        // scheduled without any producer's data, so the approx producer
        // neither matches nor indexes it.
        assert_eq!(router.burst_join(3, &p, &at_arrival, 9), BurstJoin::Full);
        router.pick_skipping_producers(&p, &at_arrival).unwrap();
        assert!(router.data.hashes.is_empty());
        // The seal places the two identical samples on one replica: the
        // first by name, all batch loads and running counts being equal.
        let members = router.burst_seal();
        assert_eq!(members.iter().map(|m| m.token).collect::<Vec<_>>(), [1, 2]);
        // Members that found the same metrics share one snapshot of them.
        assert!(std::sync::Arc::ptr_eq(&members[0].views, &members[1].views));
        assert_eq!(*members[0].views, at_arrival[..]);
        assert_eq!(members[0].assigned, Some(0));
        // Scheduled later, on the metrics as they arrived: endpoint 0 has
        // the full match (2 blocks: 64 + a partial 36), which outweighs
        // its queue.
        let d = router.pick_member(&p, &members[0]).unwrap();
        assert_eq!(d.decode, 0);
        // The approx producer ran this time, on an index the skipped
        // request left empty.
        assert_eq!((router.data.hashes.len(), router.data.matches[0]), (2, 0));
        // Outside a member's cycle no burst data remains.
        let data = router.data.burst.as_ref().unwrap();
        assert_eq!((data.total, data.matches.iter().sum::<u32>()), (0, 0));
        // A new batch opens after the seal; a member that finds other
        // metrics keeps its own snapshot.
        assert!(matches!(
            router.burst_join(4, &p, &at_arrival, 200_000_000),
            BurstJoin::Opened { .. }
        ));
        let later = busy([0, 0, 0]);
        router.burst_join(5, &p, &later, 200_000_001);
        let members = router.burst_seal();
        assert!(!std::sync::Arc::ptr_eq(
            &members[0].views,
            &members[1].views
        ));
        assert_eq!(*members[1].views, later[..]);
    }

    #[test]
    fn header_label_affinity_scores_the_endpoints_whose_label_the_header_names() {
        // `headerlabelaffinity/plugin.go`: 1 where the endpoint's label
        // `labelKey` equals the request's header, else 0; no header: 0.
        let text = "apiVersion: llm-d.ai/v1alpha1\nkind: EndpointPickerConfig\nplugins:\n- type: header-label-affinity-scorer\n  parameters: {headerName: X-Tenant, labelKey: tenant}\n";
        let tenant = |t: Option<&str>| {
            let mut l = BTreeMap::from([("llm-d.ai/role".to_string(), "decode".to_string())]);
            if let Some(t) = t {
                l.insert("tenant".to_string(), t.to_string());
            }
            l
        };
        let router = Router::new(
            &inputs_experimental(text),
            vec![
                tenant(Some("a")),
                tenant(Some("b")),
                tenant(None),
                tenant(Some("a")),
            ],
            1,
        );
        let views = vec![EndpointView::default(); 4];
        let score = |headers: &BTreeMap<String, String>| {
            let mut out = Vec::new();
            let ctx = RequestContext { headers, now_ns: 0 };
            router.score(
                "header-label-affinity-scorer",
                &[0, 1, 2, 3],
                &views,
                &ctx,
                &mut out,
            );
            out
        };
        // Header names are lower-case in the EPP; the factory lowers
        // `headerName` to match.
        assert_eq!(score(&headers(&[("x-tenant", "a")])), [1.0, 0.0, 0.0, 1.0]);
        assert_eq!(score(&headers(&[("x-tenant", "c")])), [0.0; 4]);
        // No header, or an empty one, prefers nothing: not even the
        // endpoint without the label.
        assert_eq!(score(&headers(&[])), [0.0; 4]);
        assert_eq!(score(&headers(&[("x-tenant", "")])), [0.0; 4]);
    }

    /// A core-metrics-extractor restating vLLM's mapping with custom
    /// metrics over the series pdsim's engines export.
    const CUSTOM: &str = "- type: core-metrics-extractor\n  parameters:\n    engineConfigs:\n    - name: vllm\n      queuedRequestsSpec: vllm:num_requests_waiting\n      runningRequestsSpec: vllm:num_requests_running\n      kvUsageSpec: vllm:kv_cache_usage_perc\n      cacheInfoSpec: vllm:cache_config_info\n      customMetrics:\n      - {attributeKey: queue, metricSpec: vllm:num_requests_waiting}\n      - {attributeKey: kv, metricSpec: vllm:kv_cache_usage_perc}\n";

    #[test]
    fn endpoint_attribute_plugins_read_the_custom_metrics_of_the_scrape() {
        let views = |waiting: [Option<u32>; 4]| -> Vec<EndpointView> {
            waiting
                .iter()
                .map(|w| EndpointView {
                    waiting: w.unwrap_or(0),
                    kv_usage: f64::from(w.unwrap_or(0)) / 10.0,
                    updated_ns: w.map(|_| 1),
                    ..Default::default()
                })
                .collect()
        };
        // Waiting 2, 7, 5 and an endpoint never scraped (the attribute is
        // missing there).
        let v = views([Some(2), Some(7), Some(5), None]);
        let router = |plugin: &str| {
            let text = format!(
                "apiVersion: llm-d.ai/v1alpha1\nkind: EndpointPickerConfig\nplugins:\n{CUSTOM}{plugin}"
            );
            Router::new(&inputs_experimental(&text), labels(&["decode"; 4]), 1)
        };
        // `filter.go`: LessThan 5 keeps 2; a missing attribute passes by
        // default, fails with onMissing Fail.
        let filter = |params: &str| {
            let mut r = router(&format!(
                "- type: endpoint-attribute-filter\n  parameters: {params}\n"
            ));
            let mut candidates = vec![0, 1, 2, 3];
            r.run_filter(
                "endpoint-attribute-filter",
                &v,
                &RequestContext::default(),
                &mut candidates,
            );
            candidates
        };
        let lt5 = "{attribute: queue, algorithm: {type: threshold, threshold: {operator: LessThan, value: 5}}}";
        assert_eq!(filter(lt5), [0, 3]);
        assert_eq!(
            filter(&lt5.replace("{attribute", "{onMissing: Fail, attribute")),
            [0]
        );
        let ge5 = "{attribute: queue, onMissing: Fail, algorithm: {type: threshold, threshold: {operator: GreaterThanOrEqual, value: 5}}}";
        assert_eq!(filter(ge5), [1, 2]);
        let eq9 = "{attribute: kv, onMissing: Fail, algorithm: {type: threshold, threshold: {operator: Equal, value: 0.9}}}";
        assert!(filter(eq9).is_empty());
        assert_eq!(
            filter(&eq9.replace("onMissing: Fail", "onMissing: Fail, fallbackOnEmpty: true")),
            [0, 1, 2, 3]
        );
        // An attribute nothing produces is missing everywhere.
        assert_eq!(
            filter(&lt5.replace("attribute: queue", "attribute: other")),
            [0, 1, 2, 3]
        );
        // Naming the extractor as the producer reads the same series; a
        // producer of another type produces nothing here, so the attribute
        // is missing and (onMissing Fail) every endpoint fails.
        let named = |producer: &str| {
            ge5.replace("{attribute", &format!("{{producer: {producer}, attribute"))
        };
        assert_eq!(filter(&named("core-metrics-extractor")), [1, 2]);
        assert!(filter(&named("some-other-extractor")).is_empty());
        // `endpointattribute.go`: adaptive range over the present values
        // 2..7: (v − 2)/5, flipped when lower is better; missing scores 0.
        let scores = |params: &str| {
            let r = router(&format!(
                "- type: endpoint-attribute-scorer\n  parameters: {params}\n"
            ));
            let mut out = Vec::new();
            r.score(
                "endpoint-attribute-scorer",
                &[0, 1, 2, 3],
                &v,
                &RequestContext::default(),
                &mut out,
            );
            out
        };
        let lower = scores("{attributeKey: queue, algorithm: {type: linear_lower_is_better}}");
        assert!(close(&lower, &[1.0, 0.0, 0.4, 0.0]), "{lower:?}");
        let higher = scores("{attributeKey: queue, algorithm: {type: linear_higher_is_better}}");
        assert!(close(&higher, &[0.0, 1.0, 0.6, 0.0]), "{higher:?}");
        // Fixed range [0, 4], clamped.
        let fixed = scores(
            "{attributeKey: queue, algorithm: {type: linear_higher_is_better, normalization: {fixedRange: {min: 0, max: 4}}}}",
        );
        assert!(close(&fixed, &[0.5, 1.0, 1.0, 0.0]), "{fixed:?}");
        // One present value: 1.0.
        let one = views([Some(3), None, None, None]);
        let r = router(
            "- type: endpoint-attribute-scorer\n  parameters: {attributeKey: queue, algorithm: {type: linear_lower_is_better}}\n",
        );
        let mut out = Vec::new();
        r.score(
            "endpoint-attribute-scorer",
            &[0, 1, 2, 3],
            &one,
            &RequestContext::default(),
            &mut out,
        );
        assert_eq!(out, [1.0, 0.0, 0.0, 0.0]);
    }

    #[test]
    fn load_aware_scorer_halves_and_falls_linearly_to_its_threshold() {
        // `scorer/loadaware/load_aware.go`: 0.5 for an empty queue, else
        // 0.5 · (1 − min(waiting, threshold)/threshold). Threshold 10:
        // waiting 0 → 0.5, 4 → 0.5·0.6 = 0.3, 10 → 0, 25 → 0.
        let views: Vec<EndpointView> = [0, 4, 10, 25]
            .iter()
            .map(|w| EndpointView {
                waiting: *w,
                ..Default::default()
            })
            .collect();
        let out = scores("load-aware-scorer", "{threshold: 10}", &views, |_| {});
        assert!(close(&out, &[0.5, 0.3, 0.0, 0.0]), "{out:?}");
    }

    #[test]
    fn active_request_scorer_scales_busy_endpoints_below_the_busiest() {
        // `scorer/activerequest/active_request.go`: a count at or below
        // idleThreshold scores 1; else (max − n)/max · maxBusyScore.
        // Counts 0, 2, 5, 10 with idleThreshold 2, maxBusyScore 0.8:
        // 1, 1, (10 − 5)/10 · 0.8 = 0.4, 0.
        let views = vec![EndpointView::default(); 4];
        let out = scores(
            "active-request-scorer",
            "{idleThreshold: 2, maxBusyScore: 0.8}",
            &views,
            |r| {
                r.data.inflight = Some(InFlightLoad {
                    requests: vec![0, 2, 5, 10],
                    tokens: vec![0; 4],
                })
            },
        );
        assert!(close(&out, &[1.0, 1.0, 0.4, 0.0]), "{out:?}");
    }

    #[test]
    fn kv_cache_utilization_and_running_requests_scorers() {
        // `scorer/kvcacheutilization`: 1 − usage.
        let views: Vec<EndpointView> = [(0.0, 3), (0.25, 7), (0.9, 5)]
            .iter()
            .map(|(kv, running)| EndpointView {
                kv_usage: *kv,
                running: *running,
                ..Default::default()
            })
            .collect();
        let out = scores("kv-cache-utilization-scorer", "{}", &views, |_| {});
        assert!(close(&out, &[1.0, 0.75, 0.1]), "{out:?}");
        // `scorer/runningrequests`: min-max over running, fewer is better:
        // (max − n)/(max − min) with running 3, 7, 5 → 1, 0, 0.5.
        let out = scores("running-requests-size-scorer", "{}", &views, |_| {});
        assert!(close(&out, &[1.0, 0.0, 0.5]), "{out:?}");
    }

    #[test]
    fn no_hit_lru_is_cold_over_the_candidates_only() {
        let text = "apiVersion: llm-d.ai/v1alpha1\nkind: EndpointPickerConfig\nplugins:\n- type: no-hit-lru-scorer\n";
        let mut router = Router::new(&inputs(text), labels(&["prefill-decode"; 3]), 1);
        let views = vec![EndpointView::default(); 3];
        let request = RequestContext::default();
        let mut out = Vec::new();
        // Endpoint 0 holds the prefix, but it is not a candidate: the
        // request is cold over 1 and 2, both never used: 1 − i/(n−1).
        router.data.matches = vec![4, 0, 0];
        router.data.hashes = [0; 4].into();
        router.score("no-hit-lru-scorer", &[1, 2], &views, &request, &mut out);
        assert_eq!(out, vec![1.0, 0.0]);
        // With 0 among the candidates it is warm: 0.5 everywhere.
        router.score("no-hit-lru-scorer", &[0, 1, 2], &views, &request, &mut out);
        assert_eq!(out, vec![0.5, 0.5, 0.5]);
        // Cold with history: LRU (oldest first) [2, 0]; 1 never used ranks
        // 0, then 2 ranks 1 and 0 ranks 2, over n − 1 = 2.
        router.data.matches = vec![0, 0, 0];
        router.no_hit_mut("no-hit-lru-scorer").lru = [2, 0].into();
        router.score("no-hit-lru-scorer", &[0, 1, 2], &views, &request, &mut out);
        assert_eq!(out, vec![0.0, 1.0, 0.5]);
        // A lone candidate scores 1.
        router.score("no-hit-lru-scorer", &[0], &views, &request, &mut out);
        assert_eq!(out, vec![1.0]);
    }

    #[test]
    fn no_hit_lru_records_only_requests_its_last_score_found_cold() {
        // Defined but in no profile: it never scores, so PreRequest finds
        // no cold state and leaves the LRU alone.
        let idle = "apiVersion: llm-d.ai/v1alpha1\nkind: EndpointPickerConfig\nplugins:\n- type: no-hit-lru-scorer\n- type: queue-scorer\nschedulingProfiles:\n- name: default\n  plugins: [{pluginRef: queue-scorer}]\n";
        let mut router = Router::new(&inputs(idle), labels(&["prefill-decode"; 2]), 1);
        let views = vec![EndpointView::default(); 2];
        router.pick(&prompt(1, 64), &views).unwrap();
        assert!(router.no_hit_mut("no-hit-lru-scorer").lru.is_empty());
        // In the profile, with the producer it needs auto-created: a new
        // prompt is cold and touches its endpoint; the same prompt again is
        // warm (its endpoint holds it) and touches nothing.
        let used = "apiVersion: llm-d.ai/v1alpha1\nkind: EndpointPickerConfig\nplugins:\n- type: no-hit-lru-scorer\n";
        let mut router = Router::new(&inputs(used), labels(&["prefill-decode"; 2]), 1);
        let first = router.pick(&prompt(7, 256), &views).unwrap().decode;
        assert_eq!(
            Vec::from(router.no_hit_mut("no-hit-lru-scorer").lru.clone()),
            vec![first]
        );
        router.pick(&prompt(7, 256), &views).unwrap();
        assert_eq!(router.no_hit_mut("no-hit-lru-scorer").cold, Some(false));
        assert_eq!(router.no_hit_mut("no-hit-lru-scorer").lru.len(), 1);
    }

    #[test]
    fn no_hit_lru_state_does_not_outlive_its_request() {
        // The scorer is in the prefill profile only. A new long prompt is
        // disaggregated, scored cold, and touches its targets; a short one
        // the decider keeps on decode runs no prefill profile, so it was
        // never scored and must touch nothing (`coldRequestState` is per
        // request), even though the request before it was cold.
        let text = "apiVersion: llm-d.ai/v1alpha1\nkind: EndpointPickerConfig\nplugins:\n- type: prefill-filter\n- type: decode-filter\n- type: no-hit-lru-scorer\n- type: queue-scorer\n- type: approx-prefix-cache-producer\n  parameters: {autoTune: false, blockSizeTokens: 16}\n- type: prefix-based-pd-decider\n  parameters: {nonCachedTokens: 64}\n- type: disagg-profile-handler\n  parameters: {deciders: {prefill: prefix-based-pd-decider}}\nschedulingProfiles:\n- name: prefill\n  plugins: [{pluginRef: prefill-filter}, {pluginRef: no-hit-lru-scorer}]\n- name: decode\n  plugins: [{pluginRef: decode-filter}, {pluginRef: queue-scorer}]\n";
        let mut router = Router::new(&inputs(text), labels(&["prefill", "decode", "decode"]), 1);
        let views = vec![EndpointView::default(); 3];
        let long = router.pick(&prompt(1, 256), &views).unwrap();
        assert!(long.prefill.is_some(), "disaggregated: {long:?}");
        let after_long = router.no_hit_mut("no-hit-lru-scorer").lru.clone();
        assert_eq!(after_long.len(), 2, "{after_long:?}");
        let short = router.pick(&prompt(2, 16), &views).unwrap();
        assert!(short.prefill.is_none(), "decode only: {short:?}");
        assert_eq!(router.no_hit_mut("no-hit-lru-scorer").lru, after_long);
    }

    #[test]
    fn base64_matches_go_std_encoding() {
        assert_eq!(base64_encode(b"default/pod-a"), "ZGVmYXVsdC9wb2QtYQ==");
        assert_eq!(base64_encode(b"ab"), "YWI=");
        assert_eq!(
            base64_decode("cGRzaW0vZW5kcG9pbnQtMg==").unwrap(),
            b"pdsim/endpoint-2"
        );
        assert_eq!(base64_decode("YWI=").unwrap(), b"ab");
        assert_eq!(
            base64_decode("YW\nI=").unwrap(),
            b"ab",
            "line breaks ignored"
        );
        assert_eq!(base64_decode("YWI"), None, "padding required");
        assert_eq!(base64_decode("Y=I="), None);
        assert_eq!(base64_decode("!!!!"), None);
    }

    const SESSION: &str = "apiVersion: llm-d.ai/v1alpha1\nkind: EndpointPickerConfig\nplugins:\n- type: session-affinity-scorer\n";

    #[test]
    fn session_affinity_scores_the_endpoint_the_token_names() {
        let mut router = Router::new(
            &inputs_experimental(SESSION),
            labels(&["prefill-decode"; 3]),
            1,
        );
        let views = vec![EndpointView::default(); 3];
        let mut out = Vec::new();
        let token = router.session_token(2);
        assert_eq!(token, "cGRzaW0vZW5kcG9pbnQtMg==");
        let with = headers(&[("x-session-token", &token)]);
        let request = RequestContext {
            headers: &with,
            now_ns: 0,
        };
        router.score(
            "session-affinity-scorer",
            &[0, 1, 2],
            &views,
            &request,
            &mut out,
        );
        assert_eq!(out, vec![0.0, 0.0, 1.0]);
        for _ in 0..8 {
            assert_eq!(
                router
                    .pick_request(&prompt(1, 16), &request, &views)
                    .unwrap()
                    .decode,
                2
            );
        }
        // No header (every pdsim request), an undecodable token, or a token
        // naming no candidate: 0 everywhere.
        for h in [
            headers(&[]),
            headers(&[("x-session-token", "%%%")]),
            headers(&[("x-session-token", &base64_encode(b"elsewhere/pod"))]),
        ] {
            let request = RequestContext {
                headers: &h,
                now_ns: 0,
            };
            router.score(
                "session-affinity-scorer",
                &[0, 1, 2],
                &views,
                &request,
                &mut out,
            );
            assert_eq!(out, vec![0.0; 3], "{h:?}");
        }
        // The header name is configurable and normalised.
        let custom = SESSION.to_string()
            + "  parameters: {encodedEndpointHeaderConfig: {header: ' X-Sticky '}}\n";
        let router = Router::new(
            &inputs_experimental(&custom),
            labels(&["prefill-decode"; 3]),
            1,
        );
        let with = headers(&[("x-sticky", &token)]);
        let request = RequestContext {
            headers: &with,
            now_ns: 0,
        };
        router.score(
            "session-affinity-scorer",
            &[0, 1, 2],
            &views,
            &request,
            &mut out,
        );
        assert_eq!(out, vec![0.0, 0.0, 1.0]);
    }

    #[test]
    fn session_ids_bind_to_the_endpoint_that_served_them_until_swept() {
        let text = SESSION.to_string()
            + "  parameters: {strategy: session_id, sessionIdConfig: {evictionTtlSeconds: 300, evictionSweepSeconds: 10}}\n";
        let mut router = Router::new(
            &inputs_experimental(&text),
            labels(&["prefill-decode"; 4]),
            5,
        );
        let views = vec![EndpointView::default(); 4];
        let mut out = Vec::new();
        let with = headers(&[("x-session-id", " abc ")]);
        let at = |now_ns| RequestContext {
            headers: &with,
            now_ns,
        };
        // Unbound: no preference; the pick binds the session.
        router.score(
            "session-affinity-scorer",
            &[0, 1, 2, 3],
            &views,
            &at(0),
            &mut out,
        );
        assert_eq!(out, vec![0.0; 4]);
        let home = router
            .pick_request(&prompt(1, 16), &at(0), &views)
            .unwrap()
            .decode;
        router.score(
            "session-affinity-scorer",
            &[0, 1, 2, 3],
            &views,
            &at(1),
            &mut out,
        );
        let mut expected = vec![0.0; 4];
        expected[home] = 1.0;
        assert_eq!(out, expected);
        for i in 0..8 {
            assert_eq!(
                router
                    .pick_request(&prompt(i, 16), &at(1), &views)
                    .unwrap()
                    .decode,
                home
            );
        }
        // Last seen at 1 ns; the first sweep more than 300 s later is at
        // 310 s: bound at 309.9 s, gone at 310 s.
        router.score(
            "session-affinity-scorer",
            &[0, 1, 2, 3],
            &views,
            &at(309_900_000_000),
            &mut out,
        );
        assert_eq!(out, expected);
        router.score(
            "session-affinity-scorer",
            &[0, 1, 2, 3],
            &views,
            &at(310_000_000_000),
            &mut out,
        );
        assert_eq!(out, vec![0.0; 4]);
    }

    /// Under `session_id` the scorer notes whether the bound endpoint was
    /// a candidate (`Choose` writes `boundPodPresence`): a session whose
    /// endpoint a filter removed moves to where its request went, while
    /// one merely outscored elsewhere stays bound.
    #[test]
    fn a_session_scorer_moves_its_binding_only_when_its_endpoint_was_filtered_out() {
        let text = "apiVersion: llm-d.ai/v1alpha1\nkind: EndpointPickerConfig\nplugins:\n- type: decode-filter\n- type: session-affinity-scorer\n  parameters: {strategy: session_id}\n- type: queue-scorer\nschedulingProfiles:\n- name: default\n  plugins: [{pluginRef: decode-filter}, {pluginRef: session-affinity-scorer}, {pluginRef: queue-scorer, weight: 2}]\n";
        let mut router = Router::new(&inputs_experimental(text), labels(&["decode"; 2]), 5);
        let with = headers(&[("x-session-id", "s1")]);
        let ctx = RequestContext {
            headers: &with,
            now_ns: 0,
        };
        let queue = |w: [u32; 2]| -> Vec<EndpointView> {
            w.iter()
                .map(|w| EndpointView {
                    waiting: *w,
                    ..Default::default()
                })
                .collect()
        };
        // Bound to endpoint 1, the idle one.
        assert_eq!(
            router
                .pick_request(&prompt(1, 16), &ctx, &queue([9, 0]))
                .unwrap()
                .decode,
            1
        );
        // Endpoint 1's queue outweighs the session (weight 2 against 1):
        // the request goes to 0, but the session stays bound to 1.
        assert_eq!(
            router
                .pick_request(&prompt(1, 16), &ctx, &queue([0, 9]))
                .unwrap()
                .decode,
            0
        );
        let idle = queue([0, 0]);
        assert_eq!(
            router
                .pick_request(&prompt(1, 16), &ctx, &idle)
                .unwrap()
                .decode,
            1
        );
        // Endpoint 1 stops being a decode endpoint: the filter removes it,
        // the request goes to 0 and the session moves there.
        router.set_labels(labels(&["decode", "prefill"]));
        assert_eq!(
            router
                .pick_request(&prompt(1, 16), &ctx, &idle)
                .unwrap()
                .decode,
            0
        );
        // Back as it was, with equal queues: the session decides, for 0.
        router.set_labels(labels(&["decode"; 2]));
        for _ in 0..4 {
            assert_eq!(
                router
                    .pick_request(&prompt(1, 16), &ctx, &idle)
                    .unwrap()
                    .decode,
                0
            );
        }
    }

    /// `profileName` names whose target a binding records
    /// (`session_affinity.go`): under P/D the prefill profile's, so the
    /// session sticks to the prefill endpoint, or the decode (primary)
    /// profile's, so it sticks to the decode one.
    #[test]
    fn a_session_binds_to_the_target_of_the_profile_it_names() {
        for profile in ["prefill", "decode"] {
            let text = format!(
                "apiVersion: llm-d.ai/v1alpha1\nkind: EndpointPickerConfig\nplugins:\n- type: prefill-filter\n- type: decode-filter\n- type: queue-scorer\n- type: always-disagg-pd-decider\n- type: session-affinity-scorer\n  parameters: {{strategy: session_id, profileName: {profile}}}\n- type: disagg-profile-handler\n  parameters: {{deciders: {{prefill: always-disagg-pd-decider}}}}\nschedulingProfiles:\n- name: prefill\n  plugins: [{{pluginRef: prefill-filter}}, {{pluginRef: session-affinity-scorer}}, {{pluginRef: queue-scorer}}]\n- name: decode\n  plugins: [{{pluginRef: decode-filter}}, {{pluginRef: queue-scorer}}]\n"
            );
            let mut router = Router::new(
                &inputs_experimental(&text),
                labels(&["prefill", "prefill", "decode", "decode"]),
                5,
            );
            let views = vec![EndpointView::default(); 4];
            let with = headers(&[("x-session-id", "abc")]);
            let request = RequestContext {
                headers: &with,
                now_ns: 0,
            };
            let decision = router
                .pick_request(&prompt(1, 16), &request, &views)
                .unwrap();
            let prefill = decision.prefill.expect("disaggregated");
            assert!(prefill < 2 && decision.decode >= 2);
            let target = if profile == "prefill" {
                prefill
            } else {
                decision.decode
            };
            let mut out = Vec::new();
            router.score(
                "session-affinity-scorer",
                &[0, 1, 2, 3],
                &views,
                &request,
                &mut out,
            );
            let mut expected = vec![0.0; 4];
            expected[target] = 1.0;
            assert_eq!(out, expected, "bound to the {profile} target");
        }
    }

    #[test]
    fn a_session_rebinds_only_when_its_endpoint_was_not_a_candidate() {
        let text = SESSION.to_string() + "  parameters: {strategy: session_id}\n";
        let config = load_config("t", &text, true).unwrap();
        let mut session = Session::new(config.plugin("session-affinity-scorer").unwrap(), &[]);
        let with = headers(&[("x-session-id", "s")]);
        let request = RequestContext {
            headers: &with,
            now_ns: 0,
        };
        session.bind(&request, 1);
        assert_eq!(session.bound(&request), Some(1));
        // Bound endpoint among the candidates, request sent elsewhere (the
        // scorer was outweighed): the binding stays.
        session.note_presence(&request, &[0, 1]);
        session.bind(&request, 0);
        assert_eq!(session.bound(&request), Some(1));
        // Bound endpoint filtered out: the session moves.
        session.note_presence(&request, &[0, 2]);
        session.bind(&request, 2);
        assert_eq!(session.bound(&request), Some(2));
    }

    const PD_HEAD: &str = "apiVersion: llm-d.ai/v1alpha1\nkind: EndpointPickerConfig\nplugins:\n- type: prefill-filter\n- type: decode-filter\n- type: token-load-scorer\n";
    const PD_PROFILES: &str = "schedulingProfiles:\n- name: prefill\n  plugins: [{pluginRef: prefill-filter}, {pluginRef: token-load-scorer}]\n- name: decode\n  plugins: [{pluginRef: decode-filter}, {pluginRef: token-load-scorer}]\n";

    #[test]
    fn the_deprecated_pd_handler_disaggregates_through_the_header_handler() {
        let handler = "- type: always-disagg-pd-decider\n- type: pd-profile-handler\n  parameters: {deciderPluginName: always-disagg-pd-decider}\n";
        let views = vec![EndpointView::default(); 2];
        // With prefill-header-handler: the same decision as
        // disagg-profile-handler.
        let text = format!("{PD_HEAD}{handler}- type: prefill-header-handler\n{PD_PROFILES}");
        let mut router = Router::new(&inputs(&text), labels(&["prefill", "decode"]), 1);
        let d = router.pick(&prompt(1, 100), &views).unwrap();
        assert_eq!((d.decode, d.prefill), (1, Some(0)));
        assert_eq!(router.disaggregated, 1);
        let disagg = format!(
            "{PD_HEAD}- type: always-disagg-pd-decider\n- type: disagg-profile-handler\n  parameters: {{deciders: {{prefill: always-disagg-pd-decider}}}}\n{PD_PROFILES}"
        );
        let mut reference = Router::new(&inputs(&disagg), labels(&["prefill", "decode"]), 1);
        let r = reference.pick(&prompt(1, 100), &views).unwrap();
        assert_eq!(d, r, "pd + header handler decides as disagg does");
        // Without a header handler the prefill profile still runs and its
        // target carries the in-flight load, but no header reaches the
        // sidecar: the request is served whole on the decode endpoint.
        let text = format!("{PD_HEAD}{handler}{PD_PROFILES}");
        let mut router = Router::new(&inputs(&text), labels(&["prefill", "decode"]), 1);
        let d = router.pick(&prompt(1, 100), &views).unwrap();
        assert_eq!((d.decode, d.prefill), (1, None));
        assert_eq!(router.inflight(0), (1, 128));
        assert_eq!(router.disaggregated, 0);
        // A header handler reading another profile sets no header either.
        let text = format!(
            "{PD_HEAD}{handler}- type: prefill-header-handler\n  parameters: {{prefillProfile: elsewhere}}\n{PD_PROFILES}"
        );
        let mut router = Router::new(&inputs(&text), labels(&["prefill", "decode"]), 1);
        assert_eq!(router.pick(&prompt(1, 100), &views).unwrap().prefill, None);
    }

    #[test]
    fn the_pd_handler_default_decider_uses_the_non_cached_threshold() {
        // deciderPluginName defaults to the plugin named
        // prefix-based-pd-decider; nonCachedTokens 64 as in disagg.
        let text = format!(
            "{PD_HEAD}- type: approx-prefix-cache-producer\n  parameters: {{autoTune: false, blockSizeTokens: 16}}\n- type: prefix-based-pd-decider\n  parameters: {{nonCachedTokens: 64}}\n- type: pd-profile-handler\n- type: disagg-headers-handler\n{PD_PROFILES}"
        );
        let mut router = Router::new(&inputs(&text), labels(&["prefill", "decode"]), 5);
        let views = vec![EndpointView::default(); 2];
        assert_eq!(
            router.pick(&prompt(9, 256), &views).unwrap().prefill,
            Some(0)
        );
        // Indexed on the decode endpoint now: the uncached part is below 64.
        assert_eq!(router.pick(&prompt(9, 256), &views).unwrap().prefill, None);
        // Shorter than nonCachedTokens: decode-only.
        assert_eq!(router.pick(&prompt(10, 63), &views).unwrap().prefill, None);
        assert_eq!(
            router.pick(&prompt(11, 64), &views).unwrap().prefill,
            Some(0)
        );
        // A decode profile alone: Pick stops after it, the decider unasked.
        let alone = text.replace("- name: prefill\n  plugins: [{pluginRef: prefill-filter}, {pluginRef: token-load-scorer}]\n", "");
        let alone = alone.replace(
            "- type: pd-profile-handler\n",
            "- type: pd-profile-handler\n  parameters: {prefillProfile: decode}\n",
        );
        let mut router = Router::new(&inputs(&alone), labels(&["prefill", "decode"]), 5);
        let d = router.pick(&prompt(12, 256), &views).unwrap();
        assert_eq!((d.decode, d.prefill), (1, None));
    }

    #[test]
    fn prefill_first_runs_the_prefill_profile_for_every_request() {
        let text = format!(
            "{PD_HEAD}- type: disagg-profile-handler\n  parameters: {{stageOrder: prefill-first}}\n{PD_PROFILES}"
        );
        let mut router = Router::new(&inputs(&text), labels(&["prefill", "decode", "decode"]), 2);
        let views = vec![EndpointView::default(); 3];
        for i in 0..6 {
            let d = router.pick(&prompt(i, 32), &views).unwrap();
            assert_eq!(d.prefill, Some(0));
            assert_ne!(d.decode, 0);
        }
        // Decode-first without a decider never disaggregates.
        let text = text.replace("stageOrder: prefill-first", "stageOrder: decode-first");
        let mut router = Router::new(&inputs(&text), labels(&["prefill", "decode", "decode"]), 2);
        assert_eq!(router.pick(&prompt(1, 32), &views).unwrap().prefill, None);
    }

    #[test]
    fn the_data_parallel_handler_routes_to_the_picked_rank_and_needs_one_profile() {
        let text = "apiVersion: llm-d.ai/v1alpha1\nkind: EndpointPickerConfig\nplugins:\n- type: queue-scorer\n- type: data-parallel-profile-handler\n  parameters: {primaryPort: 8000}\nschedulingProfiles:\n- name: default\n  plugins: [{pluginRef: queue-scorer}]\n";
        let mut router = Router::new(&inputs(text), labels(&["decode"; 4]), 1);
        let views: Vec<EndpointView> = [3, 1, 0, 2]
            .iter()
            .map(|w| EndpointView {
                waiting: *w,
                ..Default::default()
            })
            .collect();
        let d = router.pick(&prompt(1, 16), &views).unwrap();
        assert_eq!((d.decode, d.prefill), (2, None));
        // Two profiles: its Pick returns none, and every request fails.
        let two = text.replace(
            "schedulingProfiles:\n",
            "schedulingProfiles:\n- name: other\n  plugins: [{pluginRef: queue-scorer}]\n",
        );
        let mut router = Router::new(&inputs(&two), labels(&["decode"; 4]), 1);
        assert!(router.pick(&prompt(1, 16), &views).is_none());
        assert_eq!(router.routed, 0);
    }

    fn loaded(waiting: u32, running: u32, kv_usage: f64) -> EndpointView {
        EndpointView {
            waiting,
            running,
            kv_usage,
            ..Default::default()
        }
    }

    #[test]
    fn the_utilization_filter_drops_endpoints_over_any_cap() {
        let text = |params: &str| {
            format!(
                "apiVersion: llm-d.ai/v1alpha1\nkind: EndpointPickerConfig\nplugins:\n- type: utilization-filter\n  parameters: {params}\n- type: queue-scorer\n"
            )
        };
        let caps = text(
            "{conditions: [{metric: waiting-queue, maxValue: 3}, {metric: kv-cache-utilization, maxValue: 0.8}, {metric: running-requests, maxValue: 10}]}",
        );
        let mut router = Router::new(&inputs_experimental(&caps), labels(&["decode"; 5]), 1);
        let views = vec![
            loaded(3, 10, 0.8),      // exactly at every cap: kept
            loaded(4, 0, 0.0),       // queue over
            loaded(0, 0, 0.81),      // KV over
            loaded(0, 11, 0.0),      // running over
            EndpointView::default(), // never scraped: zeros, kept
        ];
        let mut candidates = vec![0, 1, 2, 3, 4];
        router.run_filter(
            "utilization-filter",
            &views,
            &RequestContext::default(),
            &mut candidates,
        );
        assert_eq!(candidates, vec![0, 4]);
        // Everything saturated: without fallback the set empties and the
        // request fails; with fallbackOnEmpty the candidates pass whole.
        let full = vec![loaded(9, 0, 0.0); 3];
        let mut router = Router::new(&inputs_experimental(&caps), labels(&["decode"; 3]), 1);
        let mut candidates = vec![0, 1, 2];
        router.run_filter(
            "utilization-filter",
            &full,
            &RequestContext::default(),
            &mut candidates,
        );
        assert!(candidates.is_empty());
        assert!(router.pick(&prompt(1, 16), &full).is_none());
        let fallback =
            text("{conditions: [{metric: waiting-queue, maxValue: 3}], fallbackOnEmpty: true}");
        let mut router = Router::new(&inputs_experimental(&fallback), labels(&["decode"; 3]), 1);
        let mut candidates = vec![0, 2];
        router.run_filter(
            "utilization-filter",
            &full,
            &RequestContext::default(),
            &mut candidates,
        );
        assert_eq!(candidates, vec![0, 2]);
        assert!(router.pick(&prompt(1, 16), &full).is_some());
        // The filter runs before the scorers: the shortest queue (1) is
        // over the KV cap, so the pick is the next shortest that passes.
        let views = vec![loaded(2, 0, 0.1), loaded(0, 0, 0.95), loaded(1, 0, 0.2)];
        let mut router = Router::new(&inputs_experimental(&caps), labels(&["decode"; 3]), 1);
        assert_eq!(router.pick(&prompt(1, 16), &views).unwrap().decode, 2);
    }

    #[test]
    fn the_utilization_filter_caps_the_epp_in_flight_requests() {
        let text = "apiVersion: llm-d.ai/v1alpha1\nkind: EndpointPickerConfig\nplugins:\n- type: utilization-filter\n  parameters: {conditions: [{metric: active-requests, maxValue: 0}]}\n- type: random-picker\n";
        let mut router = Router::new(&inputs_experimental(text), labels(&["decode"; 2]), 3);
        // The in-flight producer is auto-created for it.
        assert!(router.data.inflight.is_some());
        let views = vec![EndpointView::default(); 2];
        // maxValue 0: an endpoint with a request in flight is over the cap
        // (a value equal to it passes), so two requests take both and the
        // third finds none.
        let a = router.pick(&prompt(1, 16), &views).unwrap();
        let b = router.pick(&prompt(2, 16), &views).unwrap();
        assert_ne!(a.decode, b.decode);
        assert!(router.pick(&prompt(3, 16), &views).is_none());
        // Releasing one at the end of its stream makes room again.
        let mut ticket = a.ticket;
        router.end_of_stream(&mut ticket);
        assert_eq!(
            router.pick(&prompt(5, 16), &views).unwrap().decode,
            a.decode
        );
        // Without an active-requests cap no producer is created.
        let plain = text.replace("active-requests", "waiting-queue");
        let router = Router::new(&inputs_experimental(&plain), labels(&["decode"; 2]), 3);
        assert!(router.data.inflight.is_none());
    }

    fn ranges(values: &[Option<&str>]) -> Vec<BTreeMap<String, String>> {
        values
            .iter()
            .map(|v| {
                v.map(|v| BTreeMap::from([("tier".to_string(), v.to_string())]))
                    .unwrap_or_default()
            })
            .collect()
    }

    const CLA: &str = "apiVersion: llm-d.ai/v1alpha1\nkind: EndpointPickerConfig\nplugins:\n- type: token-producer\n  parameters: {modelName: m, vllm: {url: 'http://tokenizer:8000'}}\n- type: context-length-aware\n  parameters: {label: tier";

    #[test]
    fn context_range_labels_parse_as_the_epp_parses_them() {
        use crate::plugins::scheduling::scorer::contextlengthaware::{
            context_range_score, parse_context_range,
        };
        assert_eq!(parse_context_range("0-2048"), Some((0, 2048)));
        assert_eq!(parse_context_range(" 10 - +20 "), Some((10, 20)));
        assert_eq!(parse_context_range("5-5"), Some((5, 5)));
        for bad in ["", "2048", "1-2-3", "9-1", "a-5", "5-", "-5", "1_0-20"] {
            assert_eq!(parse_context_range(bad), None, "{bad}");
        }
        let close = |a: f64, b: f64| assert!((a - b).abs() < 1e-12, "{a} vs {b}");
        close(
            context_range_score(1000, (0, 2048)),
            0.814_167_444_804_116_7,
        );
        close(context_range_score(1000, (1000, 1000)), 1.0);
        close(context_range_score(1000, (2048, 8192)), 0.146_484_375);
        close(context_range_score(1000, (0, 999)), 0.299_700_299_700_299_7);
        close(
            context_range_score(3000, (0, 2048)),
            0.153_688_524_590_163_94,
        );
    }

    #[test]
    fn context_length_aware_scores_and_filters_by_the_prompt_tokens() {
        let views = vec![EndpointView::default(); 4];
        let endpoints = ranges(&[Some("0-2048"), Some("2048-8192"), None, Some("junk")]);
        let scoring = format!("{CLA}}}\n");
        let mut router = Router::new(&inputs(&scoring), endpoints.clone(), 1);
        let mut out = Vec::new();
        router.data.prompt_tokens = 1000;
        let request = RequestContext::default();
        router.score(
            "context-length-aware",
            &[0, 1, 2, 3],
            &views,
            &request,
            &mut out,
        );
        assert!((out[0] - 0.814_167_444_804_116_7).abs() < 1e-12);
        assert!((out[1] - 0.146_484_375).abs() < 1e-12);
        assert_eq!(&out[2..], &[0.5, 0.0]);
        // Scoring only (the default): every endpoint passes the filter,
        // and the in-range one wins.
        assert!((0..4).all(|e| router.passes("context-length-aware", e)));
        assert_eq!(router.pick(&prompt(1, 1000), &views).unwrap().decode, 0);
        // A 4000-token prompt fits the second range best.
        assert_eq!(router.pick(&prompt(2, 4000), &views).unwrap().decode, 1);
        // Filtering: unlabelled endpoints stay, unparsable labels go,
        // ranges are inclusive at both ends.
        let filtering = format!("{CLA}, enableFiltering: true}}\n");
        let mut router = Router::new(&inputs(&filtering), endpoints, 1);
        router.data.prompt_tokens = 2048;
        let kept: Vec<usize> = (0..4)
            .filter(|e| router.passes("context-length-aware", *e))
            .collect();
        assert_eq!(kept, vec![0, 1, 2]);
        router.data.prompt_tokens = 9000;
        let kept: Vec<usize> = (0..4)
            .filter(|e| router.passes("context-length-aware", *e))
            .collect();
        assert_eq!(kept, vec![2]);
        // Nothing fits and nothing is unlabelled: the request fails.
        let mut router = Router::new(
            &inputs(&filtering),
            ranges(&[Some("0-10"), Some("11-20")]),
            1,
        );
        let two = vec![EndpointView::default(); 2];
        assert!(router.pick(&prompt(3, 21), &two).is_none());
        assert_eq!(router.pick(&prompt(4, 15), &two).unwrap().decode, 1);
    }

    const SESSION_FILTER: &str = "apiVersion: llm-d.ai/v1alpha1\nkind: EndpointPickerConfig\nplugins:\n- type: session-affinity-filter\n- type: queue-scorer\n";

    #[test]
    fn the_session_filter_pins_the_token_endpoint_when_it_is_a_candidate() {
        let mut router = Router::new(
            &inputs_experimental(SESSION_FILTER),
            labels(&["decode"; 3]),
            1,
        );
        // The queue scorer prefers endpoint 0; the token names 2.
        let views = vec![loaded(0, 0, 0.0), loaded(5, 0, 0.0), loaded(9, 0, 0.0)];
        let token = router.session_token(2);
        let with = headers(&[("x-session-token", &token)]);
        let request = RequestContext {
            headers: &with,
            now_ns: 0,
        };
        let mut candidates = vec![0, 1, 2];
        router.run_filter("session-affinity-filter", &[], &request, &mut candidates);
        assert_eq!(candidates, vec![2]);
        assert_eq!(
            router
                .pick_request(&prompt(1, 16), &request, &views)
                .unwrap()
                .decode,
            2
        );
        // The token's endpoint not a candidate, no header (every pdsim
        // request), or an undecodable token: every candidate passes.
        let mut candidates = vec![0, 1];
        router.run_filter("session-affinity-filter", &[], &request, &mut candidates);
        assert_eq!(candidates, vec![0, 1]);
        for h in [headers(&[]), headers(&[("x-session-token", "%%%")])] {
            let request = RequestContext {
                headers: &h,
                now_ns: 0,
            };
            let mut candidates = vec![0, 1, 2];
            router.run_filter("session-affinity-filter", &[], &request, &mut candidates);
            assert_eq!(candidates, vec![0, 1, 2], "{h:?}");
            assert_eq!(
                router
                    .pick_request(&prompt(2, 16), &request, &views)
                    .unwrap()
                    .decode,
                0
            );
        }
    }

    #[test]
    fn the_session_filter_binds_session_ids_and_moves_them_only_when_filtered_out() {
        // The label filter runs first and may remove the bound endpoint.
        let text = "apiVersion: llm-d.ai/v1alpha1\nkind: EndpointPickerConfig\nplugins:\n- type: label-selector-filter\n  parameters: {matchLabels: {up: 'yes'}}\n- type: session-affinity-filter\n  parameters: {strategy: session_id}\n- type: queue-scorer\n";
        let up = |flags: &[&str]| -> Vec<BTreeMap<String, String>> {
            flags
                .iter()
                .map(|f| BTreeMap::from([("up".to_string(), f.to_string())]))
                .collect()
        };
        let mut router = Router::new(&inputs_experimental(text), up(&["yes", "yes"]), 4);
        let with = headers(&[("x-session-id", "conversation-7")]);
        let request = RequestContext {
            headers: &with,
            now_ns: 0,
        };
        // First request: unbound, the shortest queue (1) wins and binds.
        let views = vec![loaded(3, 0, 0.0), loaded(0, 0, 0.0)];
        assert_eq!(
            router
                .pick_request(&prompt(1, 16), &request, &views)
                .unwrap()
                .decode,
            1
        );
        // Queues flip, but the session stays on 1.
        let flipped = vec![loaded(0, 0, 0.0), loaded(3, 0, 0.0)];
        for i in 0..4 {
            assert_eq!(
                router
                    .pick_request(&prompt(2 + i, 16), &request, &flipped)
                    .unwrap()
                    .decode,
                1
            );
        }
        // A request without the id is free to go to 0 and binds nothing.
        assert_eq!(router.pick(&prompt(9, 16), &flipped).unwrap().decode, 0);
        assert_eq!(
            router
                .pick_request(&prompt(10, 16), &request, &flipped)
                .unwrap()
                .decode,
            1
        );
        // Endpoint 1 filtered out upstream: the session moves to 0 and
        // stays there once 1 is back.
        router.set_labels(up(&["yes", "no"]));
        assert_eq!(
            router
                .pick_request(&prompt(11, 16), &request, &views)
                .unwrap()
                .decode,
            0
        );
        router.set_labels(up(&["yes", "yes"]));
        assert_eq!(
            router
                .pick_request(&prompt(12, 16), &request, &views)
                .unwrap()
                .decode,
            0
        );
    }

    #[test]
    fn the_header_profile_handler_runs_the_profile_the_header_names() {
        let text = |params: &str| {
            format!(
                "{PD_HEAD}- type: header-profile-handler\n  parameters: {params}\n{PD_PROFILES}"
            )
        };
        let views = vec![EndpointView::default(); 2];
        let mut router = Router::new(
            &inputs_experimental(&text("{}")),
            labels(&["prefill", "decode"]),
            1,
        );
        let run = |router: &mut Router, h: &[(&str, &str)]| {
            let h = headers(h);
            let request = RequestContext {
                headers: &h,
                now_ns: 0,
            };
            router
                .pick_request(&prompt(1, 16), &request, &views)
                .map(|d| (d.decode, d.prefill))
        };
        // No header (every pdsim request) or a blank one: `decode`.
        assert_eq!(
            router.pick(&prompt(1, 16), &views).map(|d| d.decode),
            Some(1)
        );
        assert_eq!(run(&mut router, &[("epp-profile", "  ")]), Some((1, None)));
        // The header (stored lower-case) names the profile, trimmed; the
        // picked profile is the primary and nothing is disaggregated.
        assert_eq!(
            run(&mut router, &[("epp-profile", " prefill ")]),
            Some((0, None))
        );
        assert_eq!(router.disaggregated, 0);
        // An unknown profile runs nothing: the request fails.
        let routed = router.routed;
        assert_eq!(run(&mut router, &[("epp-profile", "Prefill")]), None);
        assert_eq!(router.routed, routed);
        // A configured header name is lower-cased; a default profile that
        // does not exist fails every headerless request.
        let mut router = Router::new(
            &inputs_experimental(&text("{headerName: ' X-Stage ', defaultProfile: encode}")),
            labels(&["prefill", "decode"]),
            1,
        );
        assert!(router.pick(&prompt(1, 16), &views).is_none());
        assert_eq!(run(&mut router, &[("x-stage", "decode")]), Some((1, None)));
        assert_eq!(run(&mut router, &[("epp-profile", "decode")]), None);
        // A lone profile always runs, whatever the header says.
        let lone = format!(
            "{PD_HEAD}- type: header-profile-handler\n  parameters: {{defaultProfile: encode}}\nschedulingProfiles:\n- name: prefill\n  plugins: [{{pluginRef: prefill-filter}}]\n"
        );
        let mut router = Router::new(
            &inputs_experimental(&lone),
            labels(&["prefill", "decode"]),
            1,
        );
        assert_eq!(
            router.pick(&prompt(1, 16), &views).map(|d| d.decode),
            Some(0)
        );
        assert_eq!(
            run(&mut router, &[("epp-profile", "decode")]),
            Some((0, None))
        );
    }

    #[test]
    fn queue_scorer_is_min_max_over_the_waiting_queues() {
        // `scorer/queuedepth/queue.go`: (max − w)/(max − min) over the
        // candidates; every queue equal → 1 for all. Waiting 5, 0, 9, 9:
        // (9 − 5)/9 = 4/9, 1, 0, 0.
        let views: Vec<EndpointView> = [5, 0, 9, 9]
            .iter()
            .map(|w| EndpointView {
                waiting: *w,
                ..Default::default()
            })
            .collect();
        let out = scores("queue-scorer", "{}", &views, |_| {});
        assert!(close(&out, &[4.0 / 9.0, 1.0, 0.0, 0.0]), "{out:?}");
        let same = vec![
            EndpointView {
                waiting: 3,
                ..Default::default()
            };
            2
        ];
        let out = scores("queue-scorer", "{}", &same, |_| {});
        assert!(close(&out, &[1.0, 1.0]), "{out:?}");
    }

    #[test]
    fn token_load_scorer_falls_linearly_with_in_flight_and_uncached_tokens() {
        // `scorer/tokenload/token_load.go`: load = in-flight tokens + the
        // request's uncached tokens; 0 → 1, else 1 − min(load, T)/T. With
        // no prefix index the whole 100-token prompt is uncached; in-flight
        // 0, 900, 4,900 and 20,000 tokens, T = 10,000: loads 100, 1,000,
        // 5,000, 20,100 → 0.99, 0.9, 0.5, 0.
        let views = vec![EndpointView::default(); 4];
        let out = scores(
            "token-load-scorer",
            "{queueThresholdTokens: 10000}",
            &views,
            |r| {
                r.data.inflight = Some(InFlightLoad {
                    requests: vec![0; 4],
                    tokens: vec![0, 900, 4_900, 20_000],
                });
                r.data.prompt_tokens = 100;
            },
        );
        assert!(close(&out, &[0.99, 0.9, 0.5, 0.0]), "{out:?}");
        // Nothing in flight and nothing to compute: 1.
        let out = scores(
            "token-load-scorer",
            "{queueThresholdTokens: 10000}",
            &views[..1],
            |r| {
                r.data.inflight = Some(InFlightLoad {
                    requests: vec![0],
                    tokens: vec![0],
                })
            },
        );
        assert!(close(&out, &[1.0]), "{out:?}");
    }

    /// A config whose one profile scores with kv-cache-utilization (1 −
    /// usage) and queue-scorer at the given weights, then runs `picker`.
    fn weighted(kv_weight: f64, queue_weight: f64, picker: &str) -> RouterInputs {
        inputs(&format!(
            "apiVersion: llm-d.ai/v1alpha1\nkind: EndpointPickerConfig\nplugins:\n- type: kv-cache-utilization-scorer\n- type: queue-scorer\n- type: {picker}\nschedulingProfiles:\n- name: default\n  plugins:\n  - {{pluginRef: kv-cache-utilization-scorer, weight: {kv_weight}}}\n  - {{pluginRef: queue-scorer, weight: {queue_weight}}}\n  - {{pluginRef: {picker}}}\n"
        ))
    }

    fn view(kv_usage: f64, waiting: u32) -> EndpointView {
        EndpointView {
            kv_usage,
            waiting,
            ..Default::default()
        }
    }

    #[test]
    fn the_max_score_picker_takes_the_weighted_sum_of_the_scores() {
        // `scheduler_profile.go` `runScorerPlugins`: Σ weight · score.
        // Endpoint 0: usage 0 (score 1), queue the longest (0).
        // Endpoint 1: usage 0.6 (0.4), queue the shortest (1).
        // Weights 3, 1: 3 against 2.2 → 0. Weights 1, 3: 1 against 3.4 → 1.
        // Weights 1, 1: 1 against 1.4 → 1.
        let views = [view(0.0, 10), view(0.6, 0)];
        let cases = [((3.0, 1.0), 0), ((1.0, 3.0), 1), ((1.0, 1.0), 1)];
        for ((kv, queue), want) in cases {
            for seed in 0..8 {
                let mut router = Router::new(
                    &weighted(kv, queue, "max-score-picker"),
                    labels(&["prefill-decode"; 2]),
                    seed,
                );
                let got = router.pick(&prompt(seed, 16), &views).unwrap().decode;
                assert_eq!(got, want, "weights {kv}, {queue}, seed {seed}");
            }
        }
    }

    #[test]
    fn scores_are_clamped_to_the_unit_interval_before_they_are_weighted() {
        // `enforceScoreRange`: a scorer's value outside [0, 1] counts as
        // the nearest bound. A usage of −1 would score 2: clamped to 1, so
        // endpoint 0 totals 1 + 0 against endpoint 1's 1 + 1. Unclamped
        // they would tie at 2 and the picker would split them.
        let views = [view(-1.0, 5), view(0.0, 0)];
        for seed in 0..16 {
            let mut router = Router::new(
                &weighted(1.0, 1.0, "max-score-picker"),
                labels(&["prefill-decode"; 2]),
                seed,
            );
            assert_eq!(router.pick(&prompt(seed, 16), &views).unwrap().decode, 1);
        }
    }

    /// How often each endpoint is picked over `n` requests.
    fn shares(inputs: &RouterInputs, views: &[EndpointView], n: u64) -> Vec<f64> {
        let mut router = Router::new(inputs, labels(&vec!["prefill-decode"; views.len()]), 11);
        let mut counts = vec![0u64; views.len()];
        for i in 0..n {
            counts[router.pick(&prompt(i, 16), views).unwrap().decode] += 1;
        }
        counts.iter().map(|c| *c as f64 / n as f64).collect()
    }

    #[test]
    fn the_weighted_random_picker_picks_in_proportion_to_the_score() {
        // `picker/weightedrandom/picker.go`, A-Res with one pick: key
        // U^(1/w), the largest wins, so P(i) = wᵢ / Σw, and a zero score
        // is never picked. Scores (queue weight 0) 0.2, 0.6, 0: shares
        // 0.25, 0.75, 0. Over 20,000 picks the standard error of a share
        // is at most 0.0035; the bound is 0.015.
        let views = [view(0.8, 0), view(0.4, 0), view(1.0, 0)];
        let got = shares(
            &weighted(1.0, 0.0, "weighted-random-picker"),
            &views,
            20_000,
        );
        assert!((got[0] - 0.25).abs() < 0.015, "{got:?}");
        assert!((got[1] - 0.75).abs() < 0.015, "{got:?}");
        assert_eq!(got[2], 0.0, "{got:?}");
        // Every score above 0 (no zero among them): the same A-Res draw,
        // 0.2 against 0.6 → 0.25 and 0.75.
        let got = shares(
            &weighted(1.0, 0.0, "weighted-random-picker"),
            &views[..2],
            20_000,
        );
        assert!((got[0] - 0.25).abs() < 0.015, "{got:?}");
        // Every score 0: it defers to the random picker, uniform.
        let views = [view(1.0, 0), view(1.0, 0), view(1.0, 0)];
        let got = shares(
            &weighted(1.0, 0.0, "weighted-random-picker"),
            &views,
            20_000,
        );
        for share in &got {
            assert!((share - 1.0 / 3.0).abs() < 0.015, "{got:?}");
        }
    }

    #[test]
    fn the_random_picker_ignores_the_scores() {
        // `picker/random/picker.go`: uniform over the candidates whatever
        // they scored. Scores 1, 0.5, 0 → shares 1/3 each.
        let views = [view(0.0, 0), view(0.5, 0), view(1.0, 0)];
        let got = shares(&weighted(1.0, 0.0, "random-picker"), &views, 20_000);
        for share in &got {
            assert!((share - 1.0 / 3.0).abs() < 0.015, "{got:?}");
        }
    }

    #[test]
    fn a_filter_that_leaves_no_endpoint_ends_the_cycle_without_a_pick() {
        // `scheduler_profile.go` `runFilterPlugins`: an empty result stops
        // the profile, and with no primary result the EPP answers 503.
        let text = "apiVersion: llm-d.ai/v1alpha1\nkind: EndpointPickerConfig\nplugins:\n- type: decode-filter\n- type: queue-scorer\nschedulingProfiles:\n- name: default\n  plugins: [{pluginRef: decode-filter}, {pluginRef: queue-scorer}]\n";
        let views = vec![EndpointView::default(); 2];
        let mut router = Router::new(&inputs(text), labels(&["prefill", "prefill"]), 1);
        assert_eq!(router.pick(&prompt(1, 16), &views), None);
        // One decode endpoint: it is the pick whatever the scores say.
        let views = [view(0.0, 50), view(0.0, 0)];
        let mut router = Router::new(&inputs(text), labels(&["decode", "prefill"]), 1);
        assert_eq!(router.pick(&prompt(1, 16), &views).unwrap().decode, 0);
    }

    #[test]
    fn the_prefix_based_decider_compares_the_uncached_suffix_with_its_thresholds() {
        // `disagg/prefix_based_pd_decider.go` `disaggregate`: nonCachedTokens
        // 0 never; input < promptTokens no; input < nonCachedTokens no;
        // else yes when input − cachedBlocks · blockSize ≥ nonCachedTokens.
        // Here nonCachedTokens 64, promptTokens 100, blocks of 16.
        let decider = |params: &str| {
            inputs(&format!(
                "apiVersion: llm-d.ai/v1alpha1\nkind: EndpointPickerConfig\nplugins:\n- type: prefix-based-pd-decider\n  parameters: {params}\n- type: queue-scorer\n"
            ))
        };
        let config = decider("{nonCachedTokens: 64, promptTokens: 100}");
        let mut router = Router::new(&config, labels(&["decode"]), 1);
        let name = "prefix-based-pd-decider";
        let mut case = |input: u64, cached_blocks: u32| {
            router.data.prompt_tokens = input;
            router.data.block_size = 16;
            router.data.matches = vec![cached_blocks];
            router.decide(Some(name), 0)
        };
        assert!(!case(99, 0), "99 < promptTokens 100");
        assert!(case(100, 0), "100 uncached ≥ 64");
        assert!(case(128, 4), "128 − 64 = 64 ≥ 64: at the threshold");
        assert!(!case(128, 5), "128 − 80 = 48 < 64");
        let config = decider("{nonCachedTokens: 64}");
        let mut router = Router::new(&config, labels(&["decode"]), 1);
        router.data.prompt_tokens = 63;
        router.data.block_size = 16;
        router.data.matches = vec![0];
        assert!(!router.decide(Some(name), 0), "63 < nonCachedTokens 64");
        router.data.prompt_tokens = 64;
        assert!(router.decide(Some(name), 0), "64, nothing cached");
        let config = decider("{nonCachedTokens: 0}");
        let mut router = Router::new(&config, labels(&["decode"]), 1);
        router.data.prompt_tokens = 10_000;
        router.data.block_size = 16;
        router.data.matches = vec![0];
        assert!(!router.decide(Some(name), 0), "0 disables disaggregation");
        // No decider configured: decode only.
        assert!(!router.decide(None, 0));
    }

    /// Without LoRA adapters (pdsim's engines serve none, so they export no
    /// `vllm:lora_requests_info`: no active or waiting adapter, and a
    /// maximum of 0) lora-affinity-scorer's switch reaches its last case
    /// for every endpoint: 0 (`scorer/loraaffinity/lora_affinity.go`). So a
    /// profile that adds it picks exactly as one without it.
    #[test]
    fn lora_affinity_scores_every_endpoint_zero_without_adapters() {
        let with = "apiVersion: llm-d.ai/v1alpha1\nkind: EndpointPickerConfig\nplugins:\n- type: queue-scorer\n- type: lora-affinity-scorer\nschedulingProfiles:\n- name: default\n  plugins: [{pluginRef: queue-scorer}, {pluginRef: lora-affinity-scorer, weight: 5}]\n";
        let without = "apiVersion: llm-d.ai/v1alpha1\nkind: EndpointPickerConfig\nplugins:\n- type: queue-scorer\nschedulingProfiles:\n- name: default\n  plugins: [{pluginRef: queue-scorer}]\n";
        let views: Vec<EndpointView> = [3, 0, 7, 0]
            .iter()
            .map(|w| EndpointView {
                waiting: *w,
                ..Default::default()
            })
            .collect();
        let router = Router::new(&inputs(with), labels(&["prefill-decode"; 4]), 1);
        let mut out = Vec::new();
        router.score(
            "lora-affinity-scorer",
            &[0, 1, 2, 3],
            &views,
            &RequestContext::default(),
            &mut out,
        );
        assert_eq!(out, vec![0.0; 4]);
        let picks = |text: &str| {
            let mut router = Router::new(&inputs(text), labels(&["prefill-decode"; 4]), 9);
            (0..20)
                .map(|i| router.pick(&prompt(i, 16), &views).unwrap().decode)
                .collect::<Vec<usize>>()
        };
        assert_eq!(picks(with), picks(without));
    }

    /// Engines publish KV events only to a precise producer wired to
    /// receive them: not without one, and not to one whose events have no
    /// way in (no `zmqEndpoint`, `discoverPods` off).
    #[test]
    fn kv_events_are_wanted_only_by_a_wired_precise_producer() {
        let wants = |text: &str| {
            Router::new(&inputs(text), labels(&["prefill-decode"; 2]), 1).wants_kv_events()
        };
        let precise = |params: &str| {
            format!(
                "apiVersion: llm-d.ai/v1alpha1\nkind: EndpointPickerConfig\nplugins:\n- type: precise-prefix-cache-producer\n  parameters: {params}\n- type: prefix-cache-scorer\n  parameters: {{prefixMatchInfoProducerName: precise-prefix-cache-producer}}\n"
            )
        };
        assert!(!wants(
            "apiVersion: llm-d.ai/v1alpha1\nkind: EndpointPickerConfig\nplugins:\n- type: queue-scorer\n"
        ));
        assert!(wants(&precise(
            "{kvEventsConfig: {zmqEndpoint: 'tcp://*:5557'}}"
        )));
        assert!(!wants(&precise("{kvEventsConfig: {discoverPods: false}}")));
    }

    /// `speculativeTTL` is a Go duration, 2 s when absent
    /// (`preciseprefixcache/prerequest.go`), read only with
    /// `speculativeIndexing`.
    #[test]
    fn the_speculative_ttl_is_read_as_a_duration_with_its_default() {
        let ttl = |params: &str| {
            let text = format!(
                "apiVersion: llm-d.ai/v1alpha1\nkind: EndpointPickerConfig\nplugins:\n- type: precise-prefix-cache-producer\n  parameters: {params}\n- type: prefix-cache-scorer\n  parameters: {{prefixMatchInfoProducerName: precise-prefix-cache-producer}}\n"
            );
            let router = Router::new(&inputs(&text), labels(&["prefill-decode"; 2]), 1);
            router
                .data
                .precise
                .as_ref()
                .expect("a precise producer")
                .speculative_ttl
        };
        assert_eq!(
            ttl("{speculativeIndexing: true, speculativeTTL: 500ms}"),
            Some(500_000_000)
        );
        assert_eq!(ttl("{speculativeIndexing: true}"), Some(2_000_000_000));
        assert_eq!(
            ttl("{speculativeIndexing: false, speculativeTTL: 500ms}"),
            None
        );
    }

    #[test]
    fn which_consumers_read_the_precise_producer() {
        // `scorer/preciseprefixcache/precise_prefix_cache.go`: the legacy
        // scorer always reads its own (precise) producer; any other
        // consumer reads it only when its `prefixMatchInfoProducerName`
        // names it, else the default key (the approx producer's).
        let plugin = |plugin_type: &str, parameters: &str| crate::config::Plugin {
            name: "p".into(),
            plugin_type: plugin_type.into(),
            parameters: serde_yaml::from_str(parameters).unwrap(),
        };
        assert!(super::reads_precise(
            &plugin("precise-prefix-cache-scorer", "{}"),
            "precise"
        ));
        let named = plugin(
            "prefix-cache-scorer",
            "{prefixMatchInfoProducerName: precise}",
        );
        assert!(super::reads_precise(&named, "precise"));
        assert!(!super::reads_precise(&named, "other"));
        assert!(!super::reads_precise(
            &plugin("prefix-cache-scorer", "{}"),
            "precise"
        ));
        let blank = plugin("prefix-cache-scorer", "{prefixMatchInfoProducerName: \"\"}");
        assert!(
            !super::reads_precise(&blank, ""),
            "an empty name names nothing"
        );
    }

    #[test]
    fn a_prefix_scorer_that_reads_the_precise_producer_scores_its_matches() {
        // The legacy precise-prefix-cache-scorer reads its own producer's
        // `PrefixCacheMatchInfo`, not the approx producer's: precise
        // matches 4 and 1 of 4 blocks score 1.0 and 0.25 (ratio, no length
        // weight), while the approx index's 0 and 4 would score the other
        // way round.
        let views = vec![EndpointView::default(); 2];
        let out = scores("precise-prefix-cache-scorer", "{}", &views, |r| {
            let precise = r
                .data
                .precise
                .as_mut()
                .expect("the legacy scorer's producer");
            precise.keys = vec![1, 2, 3, 4];
            precise.matches = vec![4, 1];
            r.data.matches = vec![0, 4];
            r.data.hashes = [0; 4].into();
        });
        assert!(close(&out, &[1.0, 0.25]), "{out:?}");
    }

    #[test]
    fn no_hit_lru_forgets_beyond_its_size() {
        // `lruSize: 3` over 4 endpoints: after cold requests to 0, 1, 2 the
        // LRU holds exactly those three, so the fourth goes to the one never
        // used, 3. Were it to hold only two, 0 would count as never used and
        // win by input order.
        let text = "apiVersion: llm-d.ai/v1alpha1\nkind: EndpointPickerConfig\nplugins:\n- type: no-hit-lru-scorer\n  parameters: {lruSize: 3}\n";
        let mut router = Router::new(&inputs(text), labels(&["prefill-decode"; 4]), 4);
        let views = vec![EndpointView::default(); 4];
        let picks: Vec<usize> = (0..5)
            .map(|i| router.pick(&prompt(100 + i, 8), &views).unwrap().decode)
            .collect();
        // Taking 3 in evicts 0, the oldest, which then counts as never used
        // again and comes first for the fifth.
        assert_eq!(picks, vec![0, 1, 2, 3, 0]);
    }

    #[test]
    fn the_affinity_filter_gives_way_when_the_cached_endpoint_costs_too_much_ttft() {
        // `filter/prefixcacheaffinity/plugin.go`: endpoint 0 holds the whole
        // prompt (10 of 10 blocks ≥ affinityThreshold 0.8), endpoint 1 none.
        // At peakPrefillThroughput 1000 tokens/s, 0's in-flight backlog of
        // 10,000 tokens is 10 s of TTFT over 1's 0: within
        // maxTTFTPenaltyMs 18,000, so only 0 stays. At 30,000 tokens (30 s)
        // it is not, and both stay.
        let text = "apiVersion: llm-d.ai/v1alpha1\nkind: EndpointPickerConfig\nplugins:\n- type: prefix-cache-affinity-filter\n  parameters: {affinityThreshold: 0.8, maxTTFTPenaltyMs: 18000, peakPrefillThroughput: 1000}\n- type: queue-scorer\n";
        // The candidates the filter keeps under `config` with endpoint 0's
        // backlog of `backlog` tokens.
        let filtered_by = |config: &str, backlog: u64| {
            let mut router = Router::new(&inputs(config), labels(&["prefill-decode"; 2]), 1);
            router.data.matches = vec![10, 0];
            router.data.hashes = [0; 10].into();
            router.data.block_size = 16;
            router.data.inflight = Some(InFlightLoad {
                requests: vec![1, 0],
                tokens: vec![backlog, 0],
            });
            let mut candidates = vec![0, 1];
            router.run_filter(
                "prefix-cache-affinity-filter",
                &[],
                &RequestContext::default(),
                &mut candidates,
            );
            candidates
        };
        let filtered = |backlog: u64| filtered_by(text, backlog);
        assert_eq!(filtered(10_000), vec![0]);
        assert_eq!(
            filtered(18_000),
            vec![0],
            "exactly the penalty is within it"
        );
        assert_eq!(filtered(30_000), vec![0, 1]);
        // maxTTFTPenaltyMs 0 turns the check off (`MaxTTFTPenaltyMs > 0` in
        // `Filter`): stickiness holds whatever the backlog.
        let off = text.replace("maxTTFTPenaltyMs: 18000", "maxTTFTPenaltyMs: 0");
        assert_eq!(filtered_by(&off, 300_000), vec![0]);
        // peakPrefillThroughput 0 is no throughput: the default 15,928
        // tokens/s stands, so a backlog of 300,000 tokens is 18.8 s, past
        // the penalty, and the filter gives way.
        let slow = text.replace("peakPrefillThroughput: 1000", "peakPrefillThroughput: 0");
        assert_eq!(filtered_by(&slow, 300_000), vec![0, 1]);
    }
}
