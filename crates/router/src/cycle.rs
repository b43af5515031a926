//! The EPP's scheduling cycle for the plugins pdsim simulates
//! (`research/epp.md` §2–§3): data producers, the profile handler loop,
//! filters (the chain stops when one empties the set), scorers (a weighted
//! sum of scores clamped to [0, 1]), the picker, and the pre-request index
//! update. Randomness (picker ties, random pickers) comes from one seeded
//! stream; the Go shuffle before a stable sort that breaks ties in the real
//! picker is reproduced as a seeded shuffle.

use crate::RouterInputs;
use crate::config::{EndpointPickerConfig, Plugin, Profile, disagg_profiles};
use pdsim_core::prompt::BlockHasher;
use pdsim_core::{Prompt, Purpose, Stream};
use rustc_hash::FxHashMap;
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

/// The in-flight load a request added to its endpoints (`inflightload`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Ticket {
    decode: Option<(usize, u64)>,
    prefill: Option<(usize, u64)>,
}

/// The approx-prefix-cache-producer's per-endpoint index: an LRU of block
/// hashes, capacity fixed at the first insert (`approximateprefix`, which
/// keeps one fixed-size LRU cache per server).
#[derive(Clone, Debug, Default)]
struct PrefixIndex {
    lrus: Vec<Lru>,
}

impl PrefixIndex {
    fn new(endpoints: usize) -> PrefixIndex {
        PrefixIndex {
            lrus: vec![Lru::default(); endpoints],
        }
    }

    fn holds(&self, endpoint: usize, hash: u64) -> bool {
        self.lrus[endpoint].map.contains_key(&hash)
    }

    fn add(&mut self, endpoint: usize, hash: u64, capacity: u64) {
        self.lrus[endpoint].touch(hash, capacity);
    }
}

const NIL: u32 = u32::MAX;

/// One endpoint's LRU: a hash map into a slab of nodes linked from most to
/// least recently used, so a touch and an eviction are O(1) and an entry
/// costs a map slot and 16 bytes.
#[derive(Clone, Debug)]
struct Lru {
    capacity: Option<u64>,
    map: FxHashMap<u64, u32>,
    nodes: Vec<LruNode>,
    head: u32,
    tail: u32,
}

#[derive(Clone, Copy, Debug)]
struct LruNode {
    hash: u64,
    prev: u32,
    next: u32,
}

impl Default for Lru {
    fn default() -> Lru {
        Lru {
            capacity: None,
            map: FxHashMap::default(),
            nodes: Vec::new(),
            head: NIL,
            tail: NIL,
        }
    }
}

impl Lru {
    fn unlink(&mut self, slot: u32) {
        let LruNode { prev, next, .. } = self.nodes[slot as usize];
        match prev {
            NIL => self.head = next,
            p => self.nodes[p as usize].next = next,
        }
        match next {
            NIL => self.tail = prev,
            n => self.nodes[n as usize].prev = prev,
        }
    }

    fn push_front(&mut self, slot: u32) {
        self.nodes[slot as usize].prev = NIL;
        self.nodes[slot as usize].next = self.head;
        if self.head != NIL {
            self.nodes[self.head as usize].prev = slot;
        }
        self.head = slot;
        if self.tail == NIL {
            self.tail = slot;
        }
    }

    /// Adds `hash` as the most recently used entry, evicting the least
    /// recently used one when the cache is full.
    fn touch(&mut self, hash: u64, capacity: u64) {
        let cap = *self.capacity.get_or_insert(capacity.max(1));
        if let Some(&slot) = self.map.get(&hash) {
            self.unlink(slot);
            self.push_front(slot);
            return;
        }
        let slot = if self.map.len() as u64 >= cap && self.tail != NIL {
            let victim = self.tail;
            self.unlink(victim);
            self.map.remove(&self.nodes[victim as usize].hash);
            self.nodes[victim as usize].hash = hash;
            victim
        } else {
            self.nodes.push(LruNode {
                hash,
                prev: NIL,
                next: NIL,
            });
            (self.nodes.len() - 1) as u32
        };
        self.map.insert(hash, slot);
        self.push_front(slot);
    }
}

/// The approx producer's settings.
#[derive(Clone, Debug)]
struct Approx {
    auto_tune: bool,
    block_size_tokens: u32,
    /// `maxPrefixTokensToMatch`, converted to blocks at the block size in
    /// use; when zero, `maxPrefixBlocksToMatch`; both zero: no cap.
    max_prefix_tokens: u64,
    max_prefix_blocks: u64,
    lru_capacity: u64,
}

/// The floor `GetBlockSize` applies to the producer's block size, whatever
/// the configuration or autoTune says (`minBlockSizeTokens` in
/// `requestcontrol/dataproducer/approximateprefix/plugin.go`): smaller
/// blocks would make the routing-side index grow without bound.
const MIN_BLOCK_SIZE_TOKENS: u32 = 64;

impl Approx {
    /// The block size the producer hashes at (`GetBlockSize`): under
    /// autoTune the first endpoint's `cache_config_info` block size when it
    /// has been read, else `blockSizeTokens`; never below the floor.
    fn block_size(&self, endpoints: &[EndpointView]) -> u32 {
        let tuned = if self.auto_tune {
            endpoints
                .first()
                .and_then(|e| e.block_size)
                .filter(|b| *b > 0)
        } else {
            None
        };
        tuned
            .unwrap_or(self.block_size_tokens)
            .max(MIN_BLOCK_SIZE_TOKENS)
    }

    /// The prefix cap in blocks of `block` tokens (`resolveMaxBlocks`).
    fn max_blocks(&self, block: u32) -> usize {
        let blocks = if self.max_prefix_tokens > 0 {
            (self.max_prefix_tokens / u64::from(block.max(1))).max(1)
        } else if self.max_prefix_blocks > 0 {
            self.max_prefix_blocks
        } else {
            u64::MAX
        };
        usize::try_from(blocks).unwrap_or(usize::MAX)
    }
}

/// The simulated EPP.
pub struct Router {
    config: EndpointPickerConfig,
    labels: Vec<BTreeMap<String, String>>,
    approx: Option<Approx>,
    index: PrefixIndex,
    rng: Stream,
    order: Vec<usize>,
    /// The inflight-load-producer's counters per endpoint, when a plugin
    /// consumes them.
    inflight: Option<(Vec<u64>, Vec<u64>)>,
    /// Requests routed and how many were disaggregated.
    pub routed: u64,
    pub disaggregated: u64,
    /// Scratch: per endpoint, matched blocks for the current request.
    matches: Vec<u32>,
    total_blocks: u32,
    block_size: u32,
    hashes: VecDeque<u64>,
    prompt_tokens: u64,
    /// no-hit-lru-scorer's endpoints, least recently used first.
    lru: VecDeque<usize>,
    lru_size: usize,
}

fn param_f64(p: &Plugin, key: &str) -> Option<f64> {
    p.parameters.get(key).and_then(Value::as_f64)
}

/// Role labels `decode-filter` keeps (`bylabel/roles.go`).
const DECODE_ROLES: &[&str] = &["decode", "prefill-decode", "both", "encode-prefill-decode"];
const PREFILL_ROLES: &[&str] = &[
    "prefill",
    "encode-prefill",
    "prefill-decode",
    "both",
    "encode-prefill-decode",
];
const ROLE: &str = "llm-d.ai/role";

impl Router {
    /// A router over endpoints with these labels.
    pub fn new(inputs: &RouterInputs, labels: Vec<BTreeMap<String, String>>, seed: u64) -> Router {
        let config = inputs.config.clone();
        let consumes_prefix = config.plugins.iter().any(|p| {
            p.plugin_type == "prefix-cache-scorer" || p.plugin_type == "prefix-based-pd-decider"
        });
        let producer = config
            .plugins
            .iter()
            .find(|p| p.plugin_type == "approx-prefix-cache-producer");
        // The producer is created with its defaults when a consumer needs
        // it and none is configured (`CreateMissingDataProducers`).
        let approx = (consumes_prefix || producer.is_some()).then(|| {
            let get = |k: &str| producer.and_then(|p| param_f64(p, k));
            let block_size_tokens =
                get("blockSizeTokens").filter(|v| *v > 0.0).unwrap_or(16.0) as u32;
            let max_prefix_tokens =
                get("maxPrefixTokensToMatch").unwrap_or(131_072.0).max(0.0) as u64;
            let max_prefix_blocks = get("maxPrefixBlocksToMatch").unwrap_or(2048.0).max(0.0) as u64;
            Approx {
                auto_tune: producer
                    .and_then(|p| p.parameters.get("autoTune"))
                    .and_then(Value::as_bool)
                    .unwrap_or(true),
                block_size_tokens,
                max_prefix_tokens,
                max_prefix_blocks,
                lru_capacity: get("lruCapacityPerServer")
                    .filter(|v| *v > 0.0)
                    .unwrap_or(31_250.0) as u64,
            }
        });
        let n = labels.len();
        let config_lru_size = config
            .plugins
            .iter()
            .find(|p| p.plugin_type == "no-hit-lru-scorer")
            .and_then(|p| param_f64(p, "lruSize"))
            .filter(|v| *v > 0.0)
            .unwrap_or(1024.0) as usize;
        let consumes_load = config.plugins.iter().any(|p| {
            matches!(
                p.plugin_type.as_str(),
                "inflight-load-producer"
                    | "token-load-scorer"
                    | "active-request-scorer"
                    | "prefix-cache-affinity-filter"
            )
        });
        Router {
            inflight: consumes_load.then(|| (vec![0; n], vec![0; n])),
            config,
            labels,
            approx,
            index: PrefixIndex::new(n),
            rng: Stream::new(seed, Purpose::RouterTies, 0),
            order: Vec::with_capacity(n),
            routed: 0,
            disaggregated: 0,
            matches: vec![0; n],
            total_blocks: 0,
            block_size: 16,
            hashes: VecDeque::new(),
            prompt_tokens: 0,
            lru: VecDeque::new(),
            lru_size: config_lru_size,
        }
    }

    fn profile(&self, name: &str) -> Option<&Profile> {
        self.config.profiles.iter().find(|p| p.name == name)
    }

    /// The approx producer (`requestcontrol/dataproducer/approximateprefix/
    /// plugin.go`, `Produce`): hash the prompt at the block size
    /// `GetBlockSize` gives, up to the prefix cap, then count, per endpoint,
    /// the leading blocks it holds, stopping at the first block no endpoint
    /// holds.
    fn produce(&mut self, prompt: &Prompt, endpoints: &[EndpointView]) {
        self.matches.iter_mut().for_each(|m| *m = 0);
        self.hashes.clear();
        self.total_blocks = 0;
        let Some(approx) = &self.approx else { return };
        let block = approx.block_size(endpoints);
        let max_blocks = approx.max_blocks(block);
        self.block_size = block;
        let mut hasher = BlockHasher::new(block);
        for segment in &prompt.segments {
            hasher.feed_segment(*segment);
            if hasher.full_blocks() >= max_blocks {
                break;
            }
        }
        hasher.hashes.truncate(max_blocks);
        self.total_blocks = hasher.hashes.len() as u32;
        for hash in &hasher.hashes {
            let mut any = false;
            for (e, m) in self.matches.iter_mut().enumerate() {
                if self.index.holds(e, *hash) {
                    *m += 1;
                    any = true;
                }
            }
            if !any {
                break;
            }
        }
        self.hashes.extend(hasher.hashes);
    }

    fn passes(&self, filter: &str, endpoint: usize) -> bool {
        let Some(plugin) = self.config.plugin(filter) else {
            return true;
        };
        let plugin_type = plugin.plugin_type.as_str();
        let labels = &self.labels[endpoint];
        let role = labels.get(ROLE).map(String::as_str);
        match plugin_type {
            // A Kubernetes LabelSelector: every matchLabels pair and every
            // matchExpressions requirement must hold.
            "label-selector-filter" | "by-label-selector" => {
                let p = &plugin.parameters;
                let labels_ok = p
                    .get("matchLabels")
                    .and_then(Value::as_mapping)
                    .is_none_or(|m| {
                        m.iter().all(|(k, v)| {
                            labels.get(k.as_str().unwrap_or("")).map(String::as_str) == v.as_str()
                        })
                    });
                let expressions_ok = p
                    .get("matchExpressions")
                    .and_then(Value::as_sequence)
                    .is_none_or(|list| {
                        list.iter().all(|e| {
                            let key = e.get("key").and_then(Value::as_str).unwrap_or("");
                            let values: Vec<&str> = e
                                .get("values")
                                .and_then(Value::as_sequence)
                                .into_iter()
                                .flatten()
                                .filter_map(Value::as_str)
                                .collect();
                            let value = labels.get(key).map(String::as_str);
                            match e.get("operator").and_then(Value::as_str).unwrap_or("") {
                                "In" => value.is_some_and(|v| values.contains(&v)),
                                "NotIn" => value.is_none_or(|v| !values.contains(&v)),
                                "Exists" => value.is_some(),
                                "DoesNotExist" => value.is_none(),
                                _ => false,
                            }
                        })
                    });
                labels_ok && expressions_ok
            }
            // by-label: keep a listed value, or an absent label when allowed.
            "by-label" => {
                let p = &plugin.parameters;
                let key = p.get("label").and_then(Value::as_str).unwrap_or("");
                let allow_none = p
                    .get("allowsNoLabel")
                    .and_then(Value::as_bool)
                    .unwrap_or(false);
                match labels.get(key) {
                    None => allow_none,
                    Some(v) => p
                        .get("validValues")
                        .and_then(Value::as_sequence)
                        .is_some_and(|vals| vals.iter().any(|x| x.as_str() == Some(v.as_str()))),
                }
            }
            "decode-filter" => role.is_none_or(|r| DECODE_ROLES.contains(&r)),
            "prefill-filter" => role.is_some_and(|r| PREFILL_ROLES.contains(&r)),
            _ => true,
        }
    }

    /// Tokens of the prompt an endpoint's index lacks: the unmatched blocks
    /// plus the tail past the last full block (`inflightload`, R).
    fn uncached_tokens(&self, endpoint: usize, prompt_tokens: u64) -> u64 {
        let indexed = self.total_blocks as u64 * self.block_size as u64;
        let tail = prompt_tokens.saturating_sub(indexed);
        (self.total_blocks - self.matches[endpoint].min(self.total_blocks)) as u64
            * self.block_size as u64
            + tail
    }

    /// prefix-cache-affinity-filter (`prefixcacheaffinity`): keep the
    /// endpoints whose prefix match reaches the threshold, unless exploring,
    /// none qualifies, or their in-flight prefill backlog would cost more
    /// TTFT than `maxTTFTPenaltyMs` over the best other endpoint.
    fn affinity_filter(&mut self, filter: &str, candidates: &mut Vec<usize>) {
        let Some(plugin) = self.config.plugin(filter).cloned() else {
            return;
        };
        let threshold = param_f64(&plugin, "affinityThreshold").unwrap_or(0.80);
        if candidates.len() <= 1 || threshold <= 0.0 {
            return;
        }
        let explore = param_f64(&plugin, "explorationProbability").unwrap_or(0.0);
        if explore > 0.0 && self.rng.bernoulli(explore) {
            return;
        }
        let score = |e: usize| {
            if self.total_blocks == 0 {
                0.0
            } else {
                self.matches[e] as f64 / self.total_blocks as f64
            }
        };
        let (sticky, other): (Vec<usize>, Vec<usize>) =
            candidates.iter().partition(|e| score(**e) >= threshold);
        if sticky.is_empty() {
            return;
        }
        let penalty_ms = param_f64(&plugin, "maxTTFTPenaltyMs").unwrap_or(18_000.0);
        if penalty_ms > 0.0 && !other.is_empty() {
            let peak = param_f64(&plugin, "peakPrefillThroughput")
                .filter(|p| *p > 0.0)
                .unwrap_or(15_928.0);
            let tokens = |e: usize| self.inflight.as_ref().map_or(0, |(_, t)| t[e]) as f64;
            let ttft = |set: &[usize]| {
                set.iter()
                    .map(|e| tokens(*e) / peak * 1000.0)
                    .fold(f64::MAX, f64::min)
            };
            if ttft(&sticky) - ttft(&other) > penalty_ms {
                return;
            }
        }
        *candidates = sticky;
    }

    fn score(
        &self,
        scorer: &str,
        candidates: &[usize],
        endpoints: &[EndpointView],
        out: &mut Vec<f64>,
    ) {
        out.clear();
        let Some(plugin) = self.config.plugin(scorer) else {
            out.resize(candidates.len(), 0.0);
            return;
        };
        let minmax = |values: &mut dyn Iterator<Item = f64>, out: &mut Vec<f64>| {
            let values: Vec<f64> = values.collect();
            let (lo, hi) = values
                .iter()
                .fold((f64::MAX, f64::MIN), |(lo, hi), v| (lo.min(*v), hi.max(*v)));
            out.extend(
                values
                    .iter()
                    .map(|v| if hi > lo { (hi - v) / (hi - lo) } else { 1.0 }),
            );
        };
        match plugin.plugin_type.as_str() {
            "queue-scorer" => minmax(
                &mut candidates.iter().map(|c| endpoints[*c].waiting as f64),
                out,
            ),
            "running-requests-size-scorer" => minmax(
                &mut candidates.iter().map(|c| endpoints[*c].running as f64),
                out,
            ),
            "kv-cache-utilization-scorer" => {
                out.extend(candidates.iter().map(|c| 1.0 - endpoints[*c].kv_usage))
            }
            "load-aware-scorer" => {
                let threshold = param_f64(plugin, "threshold")
                    .filter(|t| *t > 0.0)
                    .unwrap_or(128.0);
                out.extend(candidates.iter().map(|c| {
                    let w = endpoints[*c].waiting as f64;
                    if w == 0.0 {
                        0.5
                    } else {
                        0.5 * (1.0 - w.min(threshold) / threshold)
                    }
                }));
            }
            "token-load-scorer" => {
                let threshold = param_f64(plugin, "queueThresholdTokens")
                    .filter(|t| *t > 0.0)
                    .unwrap_or(4_194_304.0);
                out.extend(candidates.iter().map(|c| {
                    let load = self.inflight.as_ref().map_or(0, |(_, t)| t[*c])
                        + self.uncached_tokens(*c, self.prompt_tokens);
                    if load == 0 {
                        1.0
                    } else {
                        1.0 - (load as f64).min(threshold) / threshold
                    }
                }));
            }
            "active-request-scorer" => {
                let idle = param_f64(plugin, "idleThreshold").unwrap_or(0.0);
                let max_busy = param_f64(plugin, "maxBusyScore").unwrap_or(1.0);
                let requests = |c: usize| self.inflight.as_ref().map_or(0, |(r, _)| r[c]) as f64;
                let max_n = candidates.iter().map(|c| requests(*c)).fold(0.0, f64::max);
                out.extend(candidates.iter().map(|c| {
                    let n = requests(*c);
                    if n <= idle || max_n == 0.0 {
                        1.0
                    } else {
                        (max_n - n) / max_n * max_busy
                    }
                }));
            }
            "no-hit-lru-scorer" => {
                // Warm (some endpoint has the prefix): 0.5 everywhere. Cold:
                // never-used endpoints first in input order, then the least
                // recently used (`nohitlru`).
                let cold = candidates.iter().all(|c| self.matches[*c] == 0);
                let n = candidates.len();
                if !cold {
                    out.resize(n, 0.5);
                } else if n == 1 {
                    out.push(1.0);
                } else {
                    let used: Vec<usize> = self
                        .lru
                        .iter()
                        .copied()
                        .filter(|e| candidates.contains(e))
                        .collect();
                    let never = candidates.iter().filter(|c| !used.contains(c)).count();
                    let mut never_index = 0;
                    for c in candidates {
                        let rank = match used.iter().position(|u| u == c) {
                            Some(position) => never + position,
                            None => {
                                never_index += 1;
                                never_index - 1
                            }
                        };
                        out.push((1.0 - rank as f64 / (n - 1) as f64).max(0.0));
                    }
                }
            }
            "prefix-cache-scorer" => {
                let weight = param_f64(plugin, "matchLengthWeight")
                    .unwrap_or(0.0)
                    .clamp(0.0, 1.0);
                let scale = param_f64(plugin, "matchLengthScaleTokens")
                    .filter(|s| *s > 0.0)
                    .unwrap_or(8192.0);
                out.extend(candidates.iter().map(|c| {
                    if self.total_blocks == 0 {
                        return 0.0;
                    }
                    let matched = self.matches[*c] as f64;
                    let ratio = matched / self.total_blocks as f64;
                    let length = (matched * self.block_size as f64 / scale).min(1.0);
                    weight * length * length + (1.0 - weight) * ratio
                }));
            }
            _ => out.resize(candidates.len(), 0.0),
        }
    }

    /// Runs one profile: filters, scorers, picker. `None` when the filters
    /// leave nothing.
    fn run_profile(&mut self, name: &str, endpoints: &[EndpointView]) -> Option<usize> {
        let profile = self.profile(name)?.clone();
        let mut candidates: Vec<usize> = (0..endpoints.len()).collect();
        for filter in &profile.filters {
            if self
                .config
                .plugin(filter)
                .is_some_and(|p| p.plugin_type == "prefix-cache-affinity-filter")
            {
                self.affinity_filter(filter, &mut candidates);
            } else {
                candidates.retain(|e| self.passes(filter, *e));
            }
            if candidates.is_empty() {
                return None;
            }
        }
        let mut totals = vec![0.0; candidates.len()];
        let mut scores = Vec::new();
        for (scorer, weight) in &profile.scorers {
            self.score(scorer, &candidates, endpoints, &mut scores);
            for (t, s) in totals.iter_mut().zip(&scores) {
                *t += weight * s.clamp(0.0, 1.0);
            }
        }
        let picker_type = self
            .config
            .plugin(&profile.picker)
            .map_or("max-score-picker", |p| p.plugin_type.as_str())
            .to_string();
        // Shuffle (the EPP's PCG shuffle), then pick.
        self.order.clear();
        self.order.extend(0..candidates.len());
        for i in (1..self.order.len()).rev() {
            let j = self.rng.below(i as u64 + 1) as usize;
            self.order.swap(i, j);
        }
        let chosen = match picker_type.as_str() {
            "random-picker" => self.order[0],
            "weighted-random-picker" if totals.iter().any(|t| *t > 0.0) => {
                // A-Res: key = U^(1/score), largest key wins.
                let mut best = (f64::MIN, self.order[0]);
                for &i in &self.order {
                    let u = self.rng.unit().max(1e-10);
                    let key = if totals[i] > 0.0 {
                        u.powf(1.0 / totals[i])
                    } else {
                        0.0
                    };
                    if key > best.0 {
                        best = (key, i);
                    }
                }
                best.1
            }
            "weighted-random-picker" => self.order[0],
            // max-score-picker: stable sort by score descending after the
            // shuffle, so ties fall uniformly at random.
            _ => {
                let mut best = self.order[0];
                for &i in &self.order {
                    if totals[i] > totals[best] {
                        best = i;
                    }
                }
                best
            }
        };
        Some(candidates[chosen])
    }

    /// One scheduling cycle for a request of `prompt_tokens` tokens. `None`
    /// when no endpoint survives (the EPP answers 503).
    pub fn pick(&mut self, prompt: &Prompt, endpoints: &[EndpointView]) -> Option<Decision> {
        self.prompt_tokens = prompt.tokens();
        self.produce(prompt, endpoints);
        let handler = self.config.plugin(&self.config.handler).cloned();
        let decision = match handler.as_ref().map(|h| h.plugin_type.as_str()) {
            Some("disagg-profile-handler") => {
                let (decode_name, prefill_name, decider) =
                    disagg_profiles(&handler.as_ref().expect("handler").parameters);
                let decode = self.run_profile(&decode_name, endpoints)?;
                let disaggregate = match decider.as_deref().and_then(|d| self.config.plugin(d)) {
                    None => false,
                    Some(d) if d.plugin_type == "always-disagg-pd-decider" => true,
                    Some(d) => {
                        // prefix-based-pd-decider: disaggregate when the
                        // uncached part is at least nonCachedTokens.
                        let non_cached = param_f64(d, "nonCachedTokens").unwrap_or(0.0);
                        let prompt_min = param_f64(d, "promptTokens").unwrap_or(0.0);
                        let input = prompt.tokens() as f64;
                        let cached = self.matches[decode] as f64 * self.block_size as f64;
                        non_cached > 0.0
                            && !(prompt_min > 0.0 && input < prompt_min)
                            && input - cached >= non_cached
                    }
                };
                let prefill = if disaggregate {
                    self.run_profile(&prefill_name, endpoints)
                } else {
                    None
                };
                Decision {
                    decode,
                    prefill,
                    ticket: Ticket::default(),
                }
            }
            _ => {
                let name = self
                    .config
                    .profiles
                    .first()
                    .map(|p| p.name.clone())
                    .unwrap_or_default();
                Decision {
                    decode: self.run_profile(&name, endpoints)?,
                    prefill: None,
                    ticket: Ticket::default(),
                }
            }
        };
        let mut decision = decision;
        // PreRequest: the in-flight load of each profile's target grows by
        // one request and by the prompt tokens its index lacks.
        if self.inflight.is_some() {
            let prompt_tokens = self.prompt_tokens;
            let add = |router: &mut Router, e: usize| {
                let tokens = router.uncached_tokens(e, prompt_tokens);
                if let Some((requests, load)) = router.inflight.as_mut() {
                    requests[e] += 1;
                    load[e] += tokens;
                }
                (e, tokens)
            };
            decision.ticket.decode = Some(add(self, decision.decode));
            decision.ticket.prefill = decision.prefill.map(|p| add(self, p));
        }
        // PreRequest: the approx producer indexes the prompt on the primary
        // target and on the `prefill` profile's target.
        if let Some(approx) = self.approx.clone() {
            for target in [Some(decision.decode), decision.prefill]
                .into_iter()
                .flatten()
            {
                let capacity = if approx.auto_tune {
                    endpoints[target]
                        .num_blocks
                        .filter(|n| *n > 0)
                        .unwrap_or(approx.lru_capacity)
                } else {
                    approx.lru_capacity
                };
                for hash in &self.hashes {
                    self.index.add(target, *hash, capacity);
                }
            }
        }
        // no-hit-lru-scorer's PreRequest: a cold request touches its
        // primary and prefill targets.
        if self
            .config
            .plugins
            .iter()
            .any(|p| p.plugin_type == "no-hit-lru-scorer")
            && self.matches.iter().all(|m| *m == 0)
        {
            for target in [Some(decision.decode), decision.prefill]
                .into_iter()
                .flatten()
            {
                self.lru.retain(|e| *e != target);
                self.lru.push_back(target);
                while self.lru.len() > self.lru_size {
                    self.lru.pop_front();
                }
            }
        }
        self.routed += 1;
        self.disaggregated += u64::from(decision.prefill.is_some());
        Some(decision)
    }

    fn release(&mut self, slot: Option<(usize, u64)>) {
        if let (Some((e, tokens)), Some((requests, load))) = (slot, self.inflight.as_mut()) {
            requests[e] = requests[e].saturating_sub(1);
            load[e] = load[e].saturating_sub(tokens);
        }
    }

    /// ResponseBody at the first chunk (`requestcontrol/dataproducer/
    /// inflightload/producer.go`, `releaseTokensEarly`): with
    /// `addEstimatedOutputTokens` off (the only setting pdsim accepts) the
    /// tokens stood for the prompt, which every target has now computed, so
    /// each target's tokens are released; its request stays counted.
    pub fn first_chunk(&mut self, ticket: &mut Ticket) {
        for (e, tokens) in [ticket.decode.as_mut(), ticket.prefill.as_mut()]
            .into_iter()
            .flatten()
        {
            if let Some((_, load)) = self.inflight.as_mut() {
                load[*e] = load[*e].saturating_sub(*tokens);
            }
            *tokens = 0;
        }
    }

    /// ResponseBody at the end of the stream (same file, the
    /// `PluginState.Delete` eviction): release what is left, once.
    pub fn end_of_stream(&mut self, ticket: &mut Ticket) {
        let (decode, prefill) = (ticket.decode.take(), ticket.prefill.take());
        self.release(decode);
        self.release(prefill);
    }

    /// The in-flight (requests, tokens) counters of an endpoint.
    pub fn inflight(&self, endpoint: usize) -> (u64, u64) {
        self.inflight
            .as_ref()
            .map_or((0, 0), |(r, t)| (r[endpoint], t[endpoint]))
    }
}

#[cfg(test)]
mod tests {
    use super::{Approx, EndpointView, Lru, Router};
    use crate::RouterInputs;
    use crate::config::load_config;
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
    fn the_producer_block_size_has_a_floor_and_tunes_to_the_first_endpoint() {
        let approx = Approx {
            auto_tune: true,
            block_size_tokens: 16,
            max_prefix_tokens: 131_072,
            max_prefix_blocks: 2048,
            lru_capacity: 31_250,
        };
        let unread = EndpointView::default();
        let read = |b| EndpointView {
            block_size: Some(b),
            ..Default::default()
        };
        // Nothing scraped yet: blockSizeTokens, raised to 64.
        assert_eq!(approx.block_size(&[unread.clone(), read(4096)]), 64);
        assert_eq!(approx.block_size(&[read(4096), unread]), 4096);
        assert_eq!(approx.block_size(&[read(16)]), 64);
        // The token cap is converted at the block size in use.
        assert_eq!(approx.max_blocks(64), 2048);
        assert_eq!(approx.max_blocks(4096), 32);
        let uncapped = Approx {
            max_prefix_tokens: 0,
            max_prefix_blocks: 0,
            ..approx
        };
        assert_eq!(uncapped.max_blocks(64), usize::MAX);
    }

    #[test]
    fn the_prefix_lru_evicts_the_least_recently_used_hash_at_capacity() {
        let mut lru = Lru::default();
        // The capacity is fixed by the first insert, as in the producer.
        lru.touch(1, 2);
        lru.touch(2, 99);
        lru.touch(1, 99); // 1 is now the most recent
        lru.touch(3, 99); // evicts 2
        assert!(lru.map.contains_key(&1) && lru.map.contains_key(&3));
        assert!(!lru.map.contains_key(&2));
        assert_eq!(lru.map.len(), 2);
        lru.touch(4, 99); // evicts 1
        assert!(!lru.map.contains_key(&1));
        assert_eq!(lru.nodes.len(), 2, "evicted slots are reused");
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

    const AGG: &str = "apiVersion: llm-d.ai/v1alpha1\nkind: EndpointPickerConfig\nplugins:\n- type: approx-prefix-cache-producer\n  parameters: {autoTune: false, blockSizeTokens: 16}\n- type: inflight-load-producer\n- type: prefix-cache-affinity-filter\n  parameters: {peakPrefillThroughput: 2256}\n- type: token-load-scorer\nschedulingProfiles:\n- name: default\n  plugins: [{pluginRef: prefix-cache-affinity-filter}, {pluginRef: token-load-scorer}]\n";

    #[test]
    fn in_flight_load_grows_at_pick_and_shrinks_at_first_chunk_and_end_of_stream() {
        let text = "apiVersion: llm-d.ai/v1alpha1\nkind: EndpointPickerConfig\nplugins:\n- type: prefill-filter\n- type: decode-filter\n- type: token-load-scorer\n- type: always-disagg-pd-decider\n- type: disagg-profile-handler\n  parameters: {deciders: {prefill: always-disagg-pd-decider}}\nschedulingProfiles:\n- name: prefill\n  plugins: [{pluginRef: prefill-filter}, {pluginRef: token-load-scorer}]\n- name: decode\n  plugins: [{pluginRef: decode-filter}, {pluginRef: token-load-scorer}]\n";
        let mut router = Router::new(&inputs(text), labels(&["prefill", "decode"]), 1);
        let views = vec![EndpointView::default(); 2];
        let mut d = router.pick(&prompt(1, 100), &views).unwrap();
        assert_eq!((d.decode, d.prefill), (1, Some(0)));
        // Nothing indexed: every prompt token is uncached on both.
        assert_eq!(router.inflight(0), (1, 100));
        assert_eq!(router.inflight(1), (1, 100));
        router.first_chunk(&mut d.ticket);
        // The prompt is computed: tokens go at the first chunk, on both
        // targets; the requests stay in flight until the end of the stream.
        assert_eq!(router.inflight(0), (1, 0));
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
}
