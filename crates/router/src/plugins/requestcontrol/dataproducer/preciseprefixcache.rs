//! The precise prefix-cache path: llm-d's KV-block index fed by the
//! engines' KV events, and the precise-prefix-cache-producer that scores
//! a request's block keys against it (llm-d-router at `ebab687`, which
//! vendors the llm-d-kv-cache indexer: `pkg/kvcache/kvblock/in_memory.go`,
//! `pkg/kvcache/kvblock_scorer.go`, `pkg/kvevents/{pool,event_dedup_filter}.go`,
//! `pkg/epp/framework/plugins/requestcontrol/dataproducer/preciseprefixcache/`).
//!
//! Keys: the indexer hashes token ids itself, for the request
//! (`ComputeBlockKeysFromTokens`) and for every `BlockStored` event
//! (`TokensToKVBlockKeys` from the parent block's key), at its own
//! `tokenProcessorConfig` block size, dropping a trailing partial block.
//! Engine hashes only map to those keys. pdsim does the same with its
//! content-addressed hashes, so a block size different from the engine's
//! behaves as in the real system: an event whose tokens fill no indexer
//! block is dropped, and keys line up only where event boundaries fall on
//! indexer block boundaries. `hashSeed` changes the real hash on both sides
//! alike; pdsim's hashes are synthetic, so any seed gives the same matches.

use crate::flags::parse_go_duration;
use crate::plugins::{Checks, strict_block};
use pdsim_core::Prompt;
use pdsim_core::kv_events::{KvEvent, KvEventBatch, Medium};
use pdsim_core::prompt::{BlockHasher, ROOT_HASH};
use rustc_hash::FxHashMap;
use serde_yaml::Value;
use std::collections::VecDeque;

/// The time from the end of the engine step that queued an event to the
/// index holding it, in nanoseconds. vLLM publishes the step's batch at the
/// end of `update_from_output` (`vllm/v1/core/sched/scheduler.py`) through
/// a ZMQ PUB socket served by a publisher thread
/// (`vllm/distributed/kv_events.py`, `ZmqEventPublisher`); the EPP's
/// subscriber decodes it and a pool worker, sharded by pod, applies it
/// (`pkg/kvevents/{zmq_subscriber,pool}.go`). No source measures the sum:
/// **1 ms is an assumption** (a thread hand-off, one in-cluster TCP hop, a
/// msgpack decode and a work-queue hand-off, each well under a millisecond).
pub const KV_EVENT_DELAY_NS: u64 = 1_000_000;

/// One pod entry of a key (`kvblock.PodEntry`): the endpoint, the tier and
/// whether PreRequest put it there speculatively (those carry no tier).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Entry {
    pub endpoint: u32,
    pub tier: Option<Medium>,
    pub speculative: bool,
}

/// A fixed-capacity LRU map from u64 keys (hashicorp `golang-lru`'s
/// `Cache`: `Get` and `Add` make an entry the most recent; adding past the
/// capacity evicts the least recent). Looked up, never iterated for results.
#[derive(Clone, Debug)]
struct LruMap<V> {
    capacity: usize,
    map: pdsim_core::lru::LruMap<V>,
}

impl<V: Default> LruMap<V> {
    fn new(capacity: usize) -> LruMap<V> {
        LruMap {
            capacity: capacity.max(1),
            map: pdsim_core::lru::LruMap::default(),
        }
    }

    /// `Get`: the value, made most recent.
    fn get_mut(&mut self, key: u64) -> Option<&mut V> {
        self.map.get_mut(key)
    }

    /// `Add`: insert or replace, most recent; evicts the oldest when full.
    fn insert(&mut self, key: u64, value: V) -> &mut V {
        if !self.map.contains(key) && self.map.len() >= self.capacity {
            self.map.pop_lru();
        }
        let (slot, _) = self.map.touch_entry(key);
        *slot = value;
        slot
    }

    fn remove(&mut self, key: u64) {
        self.map.remove(key);
    }
}

/// The in-memory index (`InMemoryIndex`): request key → the pods holding
/// it (an LRU of at most `podCacheSize` entries, oldest first), both maps
/// bounded by `size` keys.
#[derive(Clone, Debug)]
pub struct Index {
    data: LruMap<Vec<Entry>>,
    engine_to_request: LruMap<Vec<u64>>,
    pod_cache_size: usize,
    /// Stores per (endpoint, tier, engine hash) not yet removed
    /// (`eventDedupFilter`): a removal is forwarded only for the last one.
    refs: FxHashMap<(u32, Medium, u64), u32>,
}

impl Index {
    /// Keys the index holds.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.data.map.len()
    }

    #[cfg(test)]
    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn new(size: usize, pod_cache_size: usize) -> Index {
        Index {
            data: LruMap::new(size),
            engine_to_request: LruMap::new(size),
            pod_cache_size: pod_cache_size.max(1),
            refs: FxHashMap::default(),
        }
    }

    /// `Add`: map each engine key to its request keys
    /// (`engineToRequestMapping`, proportional when the counts differ), then
    /// add the entry to every request key's pod LRU.
    pub fn add(&mut self, engine_keys: &[u64], request_keys: &[u64], entry: Entry) {
        if request_keys.is_empty() {
            return;
        }
        if !engine_keys.is_empty() {
            let n = engine_keys.len().max(request_keys.len());
            let mut i = 0;
            while i < n {
                let ek = engine_keys[i * engine_keys.len() / n];
                let mut rks = Vec::new();
                while i < n && engine_keys[i * engine_keys.len() / n] == ek {
                    rks.push(request_keys[i * request_keys.len() / n]);
                    i += 1;
                }
                self.engine_to_request.insert(ek, rks);
            }
        }
        for &key in request_keys {
            let cap = self.pod_cache_size;
            let pods = match self.data.get_mut(key) {
                Some(p) => p,
                None => self.data.insert(key, Vec::with_capacity(1)),
            };
            if let Some(at) = pods.iter().position(|e| *e == entry) {
                pods.remove(at);
            } else if pods.len() >= cap {
                pods.remove(0);
            }
            pods.push(entry);
        }
    }

    /// Drops `entry` from a request key; a key left with no pod goes.
    fn evict_request_key(&mut self, key: u64, entry: Entry) {
        let Some(pods) = self.data.get_mut(key) else {
            return;
        };
        pods.retain(|e| *e != entry);
        if pods.is_empty() {
            self.data.remove(key);
        }
    }

    /// `Evict` by engine key: the entry leaves every request key the engine
    /// key maps to; the mapping goes once none of them has a pod left.
    fn evict_engine_key(&mut self, key: u64, entry: Entry) {
        let Some(rks) = self.engine_to_request.get_mut(key).map(std::mem::take) else {
            return;
        };
        for rk in &rks {
            self.evict_request_key(*rk, entry);
        }
        if rks.iter().all(|rk| !self.data.map.contains(*rk)) {
            self.engine_to_request.remove(key);
        } else if let Some(value) = self.engine_to_request.map.peek_mut(key) {
            *value = rks;
        }
    }

    /// `GetRequestKey`: the last request key an engine key maps to.
    fn request_key(&mut self, engine_key: u64) -> Option<u64> {
        self.engine_to_request
            .get_mut(engine_key)
            .and_then(|rks| rks.last().copied())
    }

    /// The pods of a key, made most recent (`Lookup` uses `Get`).
    fn lookup(&mut self, key: u64) -> Option<&[Entry]> {
        self.data.get_mut(key).map(|v| &v[..])
    }

    /// Applies one pod's event batch as the pool's worker does
    /// (`processEventBatch`). `block_size` is the indexer's.
    pub fn apply(&mut self, endpoint: u32, batch: &KvEventBatch, block_size: u32) {
        for event in &batch.events {
            match event {
                KvEvent::Stored {
                    medium,
                    parent,
                    hashes,
                    pieces,
                } => {
                    let entry = Entry {
                        endpoint,
                        tier: Some(*medium),
                        speculative: false,
                    };
                    let engine_keys = batch.hashes_of(hashes);
                    let pieces = batch.pieces_of(pieces);
                    // The parent's request key; unknown: the event is
                    // skipped ("Failed to get request key for parent block").
                    let start = match parent {
                        None => ROOT_HASH,
                        Some(p) => match self.request_key(*p) {
                            Some(k) => k,
                            None => continue,
                        },
                    };
                    let mut hasher = BlockHasher::resume(block_size.max(1), start);
                    for piece in pieces {
                        hasher.feed(piece.id, piece.start, piece.len);
                    }
                    if !hasher.hashes.is_empty() {
                        self.add(engine_keys, &hasher.hashes, entry);
                    } else if pieces.is_empty() && !engine_keys.is_empty() {
                        // A tier update without tokens (the offload tier's
                        // stores): the engine keys' known request keys get
                        // the entry (`handleDeviceTierUpdate`).
                        let mut resolved: Vec<u64> = Vec::new();
                        for ek in engine_keys {
                            if let Some(rk) = self.request_key(*ek)
                                && !resolved.contains(&rk)
                            {
                                resolved.push(rk);
                            }
                        }
                        if resolved.is_empty() {
                            continue;
                        }
                        self.add(&[], &resolved, entry);
                    } else {
                        // Tokens that fill no indexer block: nothing added,
                        // nothing tracked.
                        continue;
                    }
                    for ek in engine_keys {
                        *self.refs.entry((endpoint, *medium, *ek)).or_insert(0) += 1;
                    }
                }
                KvEvent::Removed { medium, hashes } => {
                    let entry = Entry {
                        endpoint,
                        tier: Some(*medium),
                        speculative: false,
                    };
                    for ek in batch.hashes_of(hashes) {
                        let forward = match self.refs.get_mut(&(endpoint, *medium, *ek)) {
                            None => true,
                            Some(n) if *n <= 1 => {
                                self.refs.remove(&(endpoint, *medium, *ek));
                                true
                            }
                            Some(n) => {
                                *n -= 1;
                                false
                            }
                        };
                        if forward {
                            self.evict_engine_key(*ek, entry);
                        }
                    }
                }
            }
        }
    }
}

/// `kvCacheBackendConfigs` weights (defaults gpu 1.0, cpu 0.8,
/// `pkg/kvcache/backend.go`); a tier without a weight, speculative entries
/// included, weighs 1.0 (`fillMaxWeights`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Weights {
    pub gpu: Option<f64>,
    pub cpu: Option<f64>,
}

impl Default for Weights {
    fn default() -> Weights {
        Weights {
            gpu: Some(1.0),
            cpu: Some(0.8),
        }
    }
}

impl Weights {
    fn of(&self, tier: Option<Medium>) -> f64 {
        match tier {
            Some(Medium::Gpu) => self.gpu.unwrap_or(1.0),
            Some(Medium::Cpu) => self.cpu.unwrap_or(1.0),
            None => 1.0,
        }
    }
}

/// One precise producer: its index, settings, pending deliveries and the
/// current request's match info.
#[derive(Clone, Debug)]
pub struct Precise {
    pub block_size: u32,
    pub weights: Weights,
    pub index: Index,
    /// `speculativeIndexing`: TTL in nanoseconds.
    pub speculative_ttl: Option<u64>,
    /// Batches on their way: (delivery time, endpoint, batch), in delivery
    /// order (a constant delay keeps the order of the steps that sent them).
    pending: VecDeque<(u64, u32, KvEventBatch)>,
    /// Speculative entries to drop: (expiry, keys, entries).
    expiries: VecDeque<(u64, Vec<u64>, Vec<Entry>)>,
    spare: Vec<KvEventBatch>,
    /// The current request: its keys, and per endpoint the matched blocks
    /// (`int(score)`, as `produceFromBlockKeys` writes `matchLen`).
    pub keys: Vec<u64>,
    pub matches: Vec<u32>,
    scores: Vec<f64>,
    active: Vec<bool>,
    weight_at: Vec<f64>,
}

impl Precise {
    pub fn new(
        block_size: u32,
        weights: Weights,
        size: usize,
        pod_cache_size: usize,
        speculative_ttl: Option<u64>,
        endpoints: usize,
    ) -> Precise {
        Precise {
            block_size: block_size.max(1),
            weights,
            index: Index::new(size, pod_cache_size),
            speculative_ttl,
            pending: VecDeque::new(),
            expiries: VecDeque::new(),
            spare: Vec::new(),
            keys: Vec::new(),
            matches: vec![0; endpoints],
            scores: vec![0.0; endpoints],
            active: vec![false; endpoints],
            weight_at: vec![-1.0; endpoints],
        }
    }

    /// Takes an engine's step batch for delivery at `at`, leaving the
    /// engine an empty (recycled) one.
    pub fn send(&mut self, at: u64, endpoint: u32, batch: &mut KvEventBatch) {
        if batch.is_empty() {
            return;
        }
        let mut spare = self.spare.pop().unwrap_or_default();
        spare.clear();
        std::mem::swap(&mut spare, batch);
        self.pending.push_back((at, endpoint, spare));
    }

    /// Applies every delivery and speculative expiry due by `now`, in time
    /// order (deliveries first on a tie).
    pub fn advance(&mut self, now: u64) {
        loop {
            let batch_at = self.pending.front().map(|p| p.0).filter(|t| *t <= now);
            let expiry_at = self.expiries.front().map(|e| e.0).filter(|t| *t <= now);
            match (batch_at, expiry_at) {
                (Some(b), e) if e.is_none_or(|e| b <= e) => {
                    let (_, endpoint, batch) = self.pending.pop_front().expect("front");
                    self.index.apply(endpoint, &batch, self.block_size);
                    self.spare.push(batch);
                }
                (_, Some(_)) => {
                    let (_, keys, entries) = self.expiries.pop_front().expect("front");
                    for key in keys {
                        for entry in &entries {
                            self.index.evict_request_key(key, *entry);
                        }
                    }
                }
                _ => return,
            }
        }
    }

    /// `Produce`: block keys of the prompt at the indexer's block size,
    /// the pods holding each (`Lookup`, which skips absent keys and stops
    /// at a key with no pod), then `LongestPrefix`: a pod scores the
    /// best weight of its entries at each key for as long as it holds
    /// every key from the first.
    pub fn produce(&mut self, prompt: &Prompt) {
        let n = self.matches.len();
        self.scores.iter_mut().for_each(|s| *s = 0.0);
        self.active.iter_mut().for_each(|a| *a = false);
        let mut hasher = BlockHasher::new(self.block_size);
        for segment in &prompt.segments {
            hasher.feed_segment(*segment);
        }
        self.keys = hasher.hashes;
        for (i, key) in self.keys.iter().enumerate() {
            self.weight_at.iter_mut().for_each(|w| *w = -1.0);
            if let Some(pods) = self.index.lookup(*key) {
                for e in pods {
                    let w = self.weights.of(e.tier);
                    let slot = &mut self.weight_at[e.endpoint as usize];
                    if w > *slot {
                        *slot = w;
                    }
                }
            }
            let mut any = false;
            for e in 0..n {
                let here = self.weight_at[e] >= 0.0;
                if i == 0 {
                    self.active[e] = here;
                } else if self.active[e] && !here {
                    self.active[e] = false;
                }
                if self.active[e] {
                    self.scores[e] += self.weight_at[e];
                    any = true;
                }
            }
            if !any {
                break;
            }
        }
        for e in 0..n {
            self.matches[e] = self.scores[e] as u32;
        }
    }

    /// `PreRequest` with speculativeIndexing: the request's keys get
    /// speculative entries for the primary target and the `prefill`
    /// profile's target, dropped after the TTL (`prerequest.go`).
    pub fn speculate(&mut self, now: u64, targets: &[usize]) {
        let Some(ttl) = self.speculative_ttl else {
            return;
        };
        if self.keys.is_empty() || targets.is_empty() {
            return;
        }
        let entries: Vec<Entry> = targets
            .iter()
            .map(|t| Entry {
                endpoint: *t as u32,
                tier: None,
                speculative: true,
            })
            .collect();
        let keys = self.keys.clone();
        for entry in &entries {
            self.index.add(&[], &keys, *entry);
        }
        self.expiries
            .push_back((now.saturating_add(ttl), keys, entries));
    }
}

/// The precise producer's (and legacy scorer's) `PluginConfig`, decoded
/// strictly down to the nested llm-d-kv-cache structures
/// (`kvblock.TokenProcessorConfig`, `kvcache.Config`, `kvblock.IndexConfig`,
/// `InMemoryIndexConfig`, `KVCacheBackendConfig`, `kvevents.Config`,
/// `PodDiscoveryConfig`), with the factories' checks. What pdsim does not
/// simulate is refused by key: the Redis/Valkey and cost-aware index
/// backends, engines other than vLLM.
pub(crate) fn check(c: &mut Checks<'_>, plugin_type: &str, p: &serde_yaml::Mapping) {
    let not_simulated = |c: &mut Checks<'_>, key: &str, why: &str| c.not_simulated(key, why);
    let bad = |c: &mut Checks<'_>, key: &str, why: String| c.bad(key, why);
    if let Some(tp) = p.get("tokenProcessorConfig")
        && strict_block(
            c,
            "tokenProcessorConfig",
            tp,
            &["blockSize", "blockSizeTokens", "hashSeed", "hashAlgorithm"],
        )
    {
        for key in ["blockSize", "blockSizeTokens"] {
            if let Some(v) = tp.get(key) {
                match v.as_i64() {
                    Some(n) if n >= 0 => {}
                    _ => bad(
                        c,
                        &format!("tokenProcessorConfig.{key}"),
                        format!("{key} must be a non-negative integer"),
                    ),
                }
            }
        }
        // Zero means unset: blockSize is promoted, else the default 16
        // (`NewChunkedTokenDatabase`).
        if tp.get("hashSeed").is_some_and(|v| !v.is_string()) {
            bad(
                c,
                "tokenProcessorConfig.hashSeed",
                "hashSeed must be a string".into(),
            );
        }
        match tp.get("hashAlgorithm").map(Value::as_str) {
            None | Some(Some("" | "cbor-fnv" | "xxh64")) => {}
            _ => bad(
                c,
                "tokenProcessorConfig.hashAlgorithm",
                "hashAlgorithm must be `cbor-fnv` or `xxh64`".into(),
            ),
        }
    }
    if let Some(ix) = p.get("indexerConfig")
        && strict_block(
            c,
            "indexerConfig",
            ix,
            &[
                "kvBlockIndexConfig",
                "kvCacheBackendConfigs",
                "tokenizersPoolConfig",
            ],
        )
    {
        if let Some(tok) = ix.get("tokenizersPoolConfig") {
            if plugin_type == "precise-prefix-cache-producer" {
                bad(c,
                    "indexerConfig.tokenizersPoolConfig",
                    "tokenizersPoolConfig is not supported; configure a token-producer plugin instead".into(),
                );
            } else if !tok.is_mapping() {
                bad(
                    c,
                    "indexerConfig.tokenizersPoolConfig",
                    "tokenizersPoolConfig must be a mapping".into(),
                );
            }
        }
        if let Some(kb) = ix.get("kvBlockIndexConfig") {
            let at_kb = "indexerConfig.kvBlockIndexConfig";
            if strict_block(
                c,
                at_kb,
                kb,
                &[
                    "inMemoryConfig",
                    "redisConfig",
                    "costAwareMemoryConfig",
                    "enableMetrics",
                    "metricsLoggingInterval",
                ],
            ) {
                for (key, why) in [
                    (
                        "costAwareMemoryConfig",
                        "the cost-aware memory index is not simulated; use inMemoryConfig",
                    ),
                    (
                        "redisConfig",
                        "a Redis/Valkey index is a service outside the cluster model; use inMemoryConfig",
                    ),
                ] {
                    if kb.get(key).is_some_and(|v| !v.is_null()) {
                        not_simulated(c, &format!("{at_kb}.{key}"), why);
                    }
                }
                if let Some(mem) = kb.get("inMemoryConfig")
                    && strict_block(
                        c,
                        &format!("{at_kb}.inMemoryConfig"),
                        mem,
                        &["size", "podCacheSize"],
                    )
                {
                    // golang-lru refuses a size of zero or below.
                    for key in ["size", "podCacheSize"] {
                        if let Some(v) = mem.get(key)
                            && v.as_i64().is_none_or(|n| n <= 0)
                        {
                            bad(
                                c,
                                &format!("{at_kb}.inMemoryConfig.{key}"),
                                format!("{key} must be a positive integer"),
                            );
                        }
                    }
                }
                if kb.get("enableMetrics").is_some_and(|v| !v.is_bool()) {
                    bad(
                        c,
                        &format!("{at_kb}.enableMetrics"),
                        "enableMetrics must be a boolean".into(),
                    );
                }
            }
        }
        if let Some(list) = ix.get("kvCacheBackendConfigs") {
            match list.as_sequence() {
                None => bad(
                    c,
                    "indexerConfig.kvCacheBackendConfigs",
                    "kvCacheBackendConfigs must be a list".into(),
                ),
                Some(list) => {
                    for (i, backend) in list.iter().enumerate() {
                        let key = format!("indexerConfig.kvCacheBackendConfigs[{i}]");
                        if strict_block(c, &key, backend, &["name", "weight"])
                            && (!backend.get("name").is_none_or(Value::is_string)
                                || backend.get("weight").is_some_and(|w| w.as_f64().is_none()))
                        {
                            bad(c, &key, "name is a string and weight a number".into());
                        }
                    }
                }
            }
        }
    }
    if let Some(ev) = p.get("kvEventsConfig")
        && strict_block(
            c,
            "kvEventsConfig",
            ev,
            &[
                "zmqEndpoint",
                "topicFilter",
                "concurrency",
                "engineType",
                "discoverPods",
                "podDiscoveryConfig",
            ],
        )
    {
        match ev.get("engineType").map(Value::as_str) {
            None | Some(Some("" | "vllm")) => {}
            Some(Some("sglang")) => not_simulated(
                c,
                "kvEventsConfig.engineType",
                "pdsim simulates vLLM engines; sglang's events are not simulated",
            ),
            _ => bad(
                c,
                "kvEventsConfig.engineType",
                "engineType must be `vllm` or `sglang`".into(),
            ),
        }
        if let Some(v) = ev.get("concurrency")
            && v.as_i64().is_none_or(|n| n <= 0)
        {
            bad(
                c,
                "kvEventsConfig.concurrency",
                "concurrency must be a positive integer".into(),
            );
        }
        if let Some(pd) = ev.get("podDiscoveryConfig")
            && strict_block(
                c,
                "kvEventsConfig.podDiscoveryConfig",
                pd,
                &[
                    "podLabelSelector",
                    "podNamespace",
                    "socketPort",
                    "replaySocketPort",
                ],
            )
        {
            for key in ["socketPort", "replaySocketPort"] {
                if let Some(v) = pd.get(key)
                    && !v.as_i64().is_some_and(|n| (0..=65_535).contains(&n))
                {
                    bad(
                        c,
                        &format!("kvEventsConfig.podDiscoveryConfig.{key}"),
                        format!("{key} must be a port number"),
                    );
                }
            }
        }
    }
    if p.get("speculativeIndexing").is_some_and(|v| !v.is_bool()) {
        bad(
            c,
            "speculativeIndexing",
            "speculativeIndexing must be a boolean".into(),
        );
    }
    if let Some(ttl) = p.get("speculativeTTL") {
        let parsed = ttl
            .as_str()
            .map(|t| t.is_empty() || parse_go_duration(t).is_some());
        if parsed != Some(true) {
            bad(
                c,
                "speculativeTTL",
                format!("invalid speculativeTTL {ttl:?}: a Go duration such as `2s`"),
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{Entry, Precise, Weights};
    use pdsim_core::kv_events::{KvEvent, KvEventBatch, Medium, Piece};
    use pdsim_core::prompt::block_hashes;
    use pdsim_core::{Prompt, Segment};

    fn prompt(parts: &[(u64, u32)]) -> Prompt {
        Prompt::new(
            parts
                .iter()
                .map(|(id, tokens)| Segment {
                    id: *id,
                    tokens: *tokens,
                })
                .collect(),
        )
    }

    /// An engine's BlockStored for the full blocks of `p` at `block`.
    fn stored(batch: &mut KvEventBatch, p: &Prompt, block: u32, medium: Medium) {
        let hashes = block_hashes(p, block);
        let at = batch.hashes.len() as u32;
        batch.hashes.extend(&hashes);
        let first = batch.pieces.len() as u32;
        let mut left = hashes.len() as u32 * block;
        for s in &p.segments {
            let len = s.tokens.min(left);
            if len == 0 {
                break;
            }
            batch.pieces.push(Piece {
                id: s.id,
                start: 0,
                len,
            });
            left -= len;
        }
        batch.events.push(KvEvent::Stored {
            medium,
            parent: None,
            hashes: at..at + hashes.len() as u32,
            pieces: first..batch.pieces.len() as u32,
        });
    }

    fn precise(block: u32, endpoints: usize) -> Precise {
        Precise::new(block, Weights::default(), 1 << 20, 10, None, endpoints)
    }

    #[test]
    fn longest_prefix_counts_leading_blocks_per_pod() {
        let mut p = precise(16, 3);
        let long = prompt(&[(1, 64), (2, 64)]);
        let short = prompt(&[(1, 32)]);
        let mut b = KvEventBatch::default();
        stored(&mut b, &long, 16, Medium::Gpu);
        p.send(10, 0, &mut b);
        stored(&mut b, &short, 16, Medium::Gpu);
        p.send(10, 1, &mut b);
        p.advance(10);
        p.produce(&prompt(&[(1, 64), (2, 64), (3, 40)]));
        assert_eq!(p.keys.len(), 10, "a trailing partial block has no key");
        assert_eq!(p.matches, vec![8, 2, 0]);
        // A different first block matches nothing anywhere.
        p.produce(&prompt(&[(9, 16), (1, 64)]));
        assert_eq!(p.matches, vec![0, 0, 0]);
    }

    #[test]
    fn cpu_entries_weigh_less_and_the_best_tier_counts() {
        let mut p = precise(16, 2);
        let text = prompt(&[(1, 80)]);
        let mut b = KvEventBatch::default();
        // Pod 0: GPU then the offload tier's store (no tokens).
        stored(&mut b, &text, 16, Medium::Gpu);
        for h in block_hashes(&text, 16) {
            let at = b.hashes.len() as u32;
            b.hashes.push(h);
            let pc = b.pieces.len() as u32;
            b.events.push(KvEvent::Stored {
                medium: Medium::Cpu,
                parent: None,
                hashes: at..at + 1,
                pieces: pc..pc,
            });
        }
        p.send(0, 0, &mut b);
        // Pod 1: only on CPU after a GPU store evicted from GPU.
        stored(&mut b, &text, 16, Medium::Gpu);
        let hashes = block_hashes(&text, 16);
        for h in &hashes {
            let at = b.hashes.len() as u32;
            b.hashes.push(*h);
            let pc = b.pieces.len() as u32;
            b.events.push(KvEvent::Stored {
                medium: Medium::Cpu,
                parent: None,
                hashes: at..at + 1,
                pieces: pc..pc,
            });
        }
        for h in &hashes {
            b.removed(Medium::Gpu, *h);
        }
        p.send(0, 1, &mut b);
        p.advance(0);
        p.produce(&text);
        // Five blocks: 5 × 1.0 on pod 0; 5 × 0.8 = 4 on pod 1.
        assert_eq!(p.matches, vec![5, 4]);
    }

    #[test]
    fn a_removed_block_cuts_the_pods_prefix() {
        let mut p = precise(16, 2);
        let text = prompt(&[(1, 64)]);
        let hashes = block_hashes(&text, 16);
        let mut b = KvEventBatch::default();
        stored(&mut b, &text, 16, Medium::Gpu);
        p.send(0, 0, &mut b);
        stored(&mut b, &text, 16, Medium::Gpu);
        p.send(0, 1, &mut b);
        b.removed(Medium::Gpu, hashes[1]);
        p.send(5, 1, &mut b);
        p.advance(5);
        p.produce(&text);
        assert_eq!(
            p.matches,
            vec![4, 1],
            "pod 1 lost block 1, so blocks 2 and 3 no longer count"
        );
        // Every pod gone from a key: the key leaves the index.
        b.removed(Medium::Gpu, hashes[1]);
        p.send(6, 0, &mut b);
        p.advance(6);
        assert_eq!(p.index.len(), 3);
    }

    #[test]
    fn duplicate_stores_need_as_many_removals() {
        let mut p = precise(16, 1);
        let text = prompt(&[(1, 16)]);
        let hash = block_hashes(&text, 16)[0];
        let mut b = KvEventBatch::default();
        stored(&mut b, &text, 16, Medium::Gpu);
        stored(&mut b, &text, 16, Medium::Gpu);
        b.removed(Medium::Gpu, hash);
        p.send(0, 0, &mut b);
        p.advance(0);
        p.produce(&text);
        assert_eq!(p.matches, vec![1], "a second block still holds the hash");
        b.removed(Medium::Gpu, hash);
        p.send(1, 0, &mut b);
        p.advance(1);
        p.produce(&text);
        assert_eq!(p.matches, vec![0]);
    }

    #[test]
    fn an_event_not_yet_delivered_does_not_count() {
        let mut p = precise(16, 1);
        let text = prompt(&[(1, 32)]);
        let mut b = KvEventBatch::default();
        stored(&mut b, &text, 16, Medium::Gpu);
        p.send(1_000, 0, &mut b);
        assert!(b.is_empty(), "the batch was taken");
        p.advance(999);
        p.produce(&text);
        assert_eq!(p.matches, vec![0]);
        p.advance(1_000);
        p.produce(&text);
        assert_eq!(p.matches, vec![2]);
    }

    #[test]
    fn indexer_block_size_rechunks_event_tokens() {
        // Engine blocks of 16, index blocks of 64: one event carrying 160
        // tokens gives two index keys; a lone 16-token event gives none.
        let mut p = precise(64, 1);
        let text = prompt(&[(1, 100), (2, 60)]);
        let mut b = KvEventBatch::default();
        stored(&mut b, &text, 16, Medium::Gpu);
        p.send(0, 0, &mut b);
        p.advance(0);
        p.produce(&text);
        assert_eq!(p.matches, vec![2]);
        let mut q = precise(64, 1);
        stored(&mut b, &prompt(&[(1, 16)]), 16, Medium::Gpu);
        q.send(0, 0, &mut b);
        q.advance(0);
        assert!(q.index.is_empty());
        // Nor does it when its engine key is one another pod's event
        // already mapped to an index key: only a store without tokens (a
        // tier update) reaches the known keys (`handleDeviceTierUpdate`).
        let mut r = precise(64, 2);
        stored(&mut b, &text, 16, Medium::Gpu);
        r.send(0, 0, &mut b);
        stored(&mut b, &prompt(&[(1, 16)]), 16, Medium::Gpu);
        r.send(0, 1, &mut b);
        r.advance(0);
        r.produce(&text);
        assert_eq!(r.matches, vec![2, 0]);
    }

    #[test]
    fn speculative_entries_expire_after_the_ttl() {
        let mut p = Precise::new(16, Weights::default(), 1 << 20, 10, Some(2_000), 2);
        let text = prompt(&[(1, 48)]);
        p.produce(&text);
        p.speculate(100, &[1]);
        p.produce(&text);
        assert_eq!(p.matches, vec![0, 3]);
        p.advance(2_099);
        p.produce(&text);
        assert_eq!(p.matches, vec![0, 3]);
        p.advance(2_100);
        p.produce(&text);
        assert_eq!(p.matches, vec![0, 0]);
    }

    #[test]
    fn a_delivery_due_with_an_expiry_is_applied_first() {
        // An index of two keys: A stored on pod 0, then K speculative on
        // pod 1 until 2,100. A batch storing J is delivered at 2,100 too.
        // Delivered first (`advance` on a tie), J makes room by evicting A,
        // the least recent key, and then K expires: only J is left. The
        // other order would expire K first and keep A beside J.
        let mut p = Precise::new(16, Weights::default(), 2, 10, Some(2_000), 2);
        let (a, k, j) = (prompt(&[(1, 16)]), prompt(&[(2, 16)]), prompt(&[(3, 16)]));
        let mut b = KvEventBatch::default();
        stored(&mut b, &a, 16, Medium::Gpu);
        p.send(0, 0, &mut b);
        p.advance(0);
        p.produce(&k);
        p.speculate(100, &[1]);
        assert_eq!(p.index.len(), 2);
        stored(&mut b, &j, 16, Medium::Gpu);
        p.send(2_100, 0, &mut b);
        p.advance(2_100);
        assert_eq!(p.index.len(), 1, "only J is left");
        p.produce(&a);
        assert_eq!(p.matches, vec![0, 0], "A was evicted");
        p.produce(&j);
        assert_eq!(p.matches, vec![1, 0]);
    }

    #[test]
    fn pod_caches_and_the_index_are_bounded() {
        let mut p = Precise::new(16, Weights::default(), 2, 1, None, 2);
        let a = prompt(&[(1, 16)]);
        let mut b = KvEventBatch::default();
        stored(&mut b, &a, 16, Medium::Gpu);
        p.send(0, 0, &mut b);
        stored(&mut b, &a, 16, Medium::Gpu);
        p.send(0, 1, &mut b);
        p.advance(0);
        p.produce(&a);
        assert_eq!(p.matches, vec![0, 1], "podCacheSize 1 keeps the newest pod");
        stored(&mut b, &prompt(&[(2, 16)]), 16, Medium::Gpu);
        stored(&mut b, &prompt(&[(3, 16)]), 16, Medium::Gpu);
        p.send(1, 0, &mut b);
        p.advance(1);
        assert_eq!(p.index.len(), 2, "size 2 evicts the least recent key");
        p.produce(&a);
        assert_eq!(p.matches, vec![0, 0]);
        let _ = Entry {
            endpoint: 0,
            tier: None,
            speculative: true,
        };
    }
}
