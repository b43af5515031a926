//! The host-memory tier of vLLM's OffloadingConnector (`CPUOffloadingSpec`):
//! the CPU offloading manager and its cache policies, as the engine's
//! scheduler drives them.
//!
//! Mirrors `vllm/v1/kv_offload/cpu/manager.py` (`CPUOffloadingManager`),
//! `vllm/v1/kv_offload/cpu/policies/lru.py` and `policies/arc.py`, and the
//! calls `vllm/distributed/kv_transfer/kv_connector/v1/offloading/scheduler.py`
//! makes into them, in two releases whose recency rules differ:
//!
//! * **vLLM 0.29.0** ([`Release::V0_29_0`]): every lookup of a waiting request
//!   (`get_num_new_matched_tokens`) and every store that stored something
//!   touches all of the request's chunk keys, last chunk first
//!   (`OffloadingConnectorScheduler._touch`). LRU moves a touched chunk to
//!   the most recently used end unless a load is reading it (such a chunk is
//!   out of the evictable list and goes back to its end when the load
//!   completes); ARC promotes a touched T1 chunk to T2, so a chunk a
//!   request stored one step ago counts as reused by its next store.
//! * **vLLM 0.31.0** ([`Release::V0_31_0`]): lookups and stores record
//!   which chunks a request inserted and which it reused (loaded, or offered
//!   for store while already held), and the policy applies them once, when
//!   the request ends (`on_request_finished`), last chunk first so the first
//!   chunk ends most recent. LRU ranks every one of them as just used; ARC
//!   promotes only reused chunks to T2 ("a store is not a frequency hit"),
//!   and adapts its target size once per request, on a store whose key is in
//!   a ghost list (`on_store_miss`).
//!
//! Common to both: a new chunk is inserted as the most recently used (ARC:
//! into T1, leaving the ghost lists); the chunks a store offers are never
//! its victims (`protected`); a chunk being loaded is not evictable; when
//! too few chunks can be evicted the whole store fails and is offered again
//! at the request's next step (`prepare_store` returns `None` and
//! `next_stored_chunk_idx` does not advance). ARC evicts from T1 while T1
//! holds at least `int(target_t1_size)` chunks, else from T2, into ghost
//! lists trimmed to the capacity.
//!
//! pdsim completes a store the moment it is prepared (the copy's time is
//! not modelled), so a chunk is never seen half-written (`HIT_PENDING`);
//! with 0.29.0 the chunks a store inserted are kept out of that store's
//! touch, as vLLM's are (not ready yet), and become the most recently used
//! after it, as their store's completion makes them in vLLM.

use pdsim_core::kv_events::{KvEventBatch, Medium};
use pdsim_core::lru::{Lru, LruMap};

/// The tier's cache policy (`offload.eviction_policy`, vLLM's
/// `CachePolicyFactory` names `lru` and `arc`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EvictionPolicy {
    Lru,
    Arc,
}

/// The release whose manager, policies and connector calls the tier
/// mirrors (see the module documentation).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Release {
    /// vLLM 0.29.0: recency at every lookup and successful store; ARC
    /// evicts from T2 once T1 is below its target and fails when T2 has no
    /// candidate.
    #[allow(non_camel_case_types)]
    V0_29_0,
    /// vLLM 0.31.0: recency once, when the request ends; ARC falls back to
    /// T1 when T2 has no candidate.
    #[allow(non_camel_case_types)]
    V0_31_0,
}

/// The tier as an engine is configured with it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OffloadConfig {
    /// Capacity in chunks (one GPU block each: `CPUOffloadingSpec`'s block
    /// size defaults to the GPU's).
    pub chunks: u64,
    pub policy: EvictionPolicy,
    pub release: Release,
}

/// A held chunk: how many loads (to the GPU, or to a secondary tier)
/// are reading it (`ref_cnt`), and whether it is still being written
/// (`ref_cnt == -1`, not ready). The GPU's stores complete at once here,
/// so only a promotion from a secondary tier (see [`crate::tiering`])
/// leaves a chunk being written.
#[derive(Clone, Copy, Debug, Default)]
struct Chunk {
    loads: u32,
    writing: bool,
}

impl Chunk {
    /// Out of the evictable set (`_num_evictable_cache_chunks` counts the
    /// others): being read or not ready.
    fn pinned(&self) -> bool {
        self.loads > 0 || self.writing
    }
}

/// What a lookup finds (`LookupResult` in `vllm/v1/kv_offload/base.py`,
/// as `CPUOffloadingManager.lookup` answers).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lookup {
    Miss,
    /// Held and ready to load.
    Hit,
    /// Held but still being written (`HIT_PENDING`).
    Pending,
}

/// One chunk a request has observed (`_RequestCacheAccess` in
/// `cpu/manager.py`): its position, key and how it was used.
#[derive(Clone, Copy, Debug)]
struct Seen {
    chunk: u32,
    key: u64,
    inserted: bool,
    reused: bool,
    store_miss: bool,
}

impl Seen {
    fn new(chunk: u32, key: u64) -> Seen {
        Seen {
            chunk,
            key,
            inserted: false,
            reused: false,
            store_miss: false,
        }
    }
}

/// The tier's view of one request: the next chunk its stores offer
/// (`next_stored_chunk_idx`), the chunks a load is reading, and (0.31.0)
/// what it observed.
/// `next_chunk`, read after every sampled token, comes first (`repr(C)`)
/// so that it shares a cache line with the request's block hasher, which
/// the engine's `Req` puts just before it.
#[derive(Clone, Debug, Default)]
#[repr(C)]
pub struct RequestState {
    /// Chunks before this one are not offered again.
    pub next_chunk: u32,
    /// Keys of the chunks the request's load is reading.
    loading: Vec<u64>,
    /// Observed chunks, ordered by position.
    seen: Vec<Seen>,
}

impl RequestState {
    /// Keys of the chunks the request's load is reading.
    pub fn loading(&self) -> &[u64] {
        &self.loading
    }

    /// The record of `chunk`, added if new.
    fn seen(&mut self, chunk: u32, key: u64) -> &mut Seen {
        // A request's stores offer its chunks in position order, each
        // asked for twice (its store miss, then its insertion), so the
        // chunk asked for is nearly always the last one recorded or the
        // next: both are answered without the search.
        let last = self.seen.last().map(|s| s.chunk);
        let at = match last {
            Some(c) if c == chunk => self.seen.len() - 1,
            Some(c) if c > chunk => match self.seen.binary_search_by_key(&chunk, |s| s.chunk) {
                Ok(at) => at,
                Err(at) => {
                    self.seen.insert(at, Seen::new(chunk, key));
                    at
                }
            },
            _ => {
                self.seen.push(Seen::new(chunk, key));
                self.seen.len() - 1
            }
        };
        &mut self.seen[at]
    }
}

/// The tier of one engine core.
#[derive(Clone, Debug)]
pub struct OffloadManager {
    config: OffloadConfig,
    /// LRU: every held chunk, by recency. ARC: T1, chunks used once.
    t1: LruMap<Chunk>,
    /// ARC: T2, chunks reused.
    t2: LruMap<Chunk>,
    /// ARC's ghost lists: keys recently evicted from T1 and from T2.
    b1: Lru,
    b2: Lru,
    target_t1: f64,
    /// Held chunks that cannot be evicted: read by a load or a cascade, or
    /// still being written.
    pinned: u64,
    pub stores: u64,
    pub evictions: u64,
    /// Stores refused because too few chunks could be evicted
    /// (`ALLOCATION_FAILURE` in the connector's metrics).
    pub failed_stores: u64,
    /// Vectors a store fills, reused: a store is offered every time a
    /// request's block fills, so allocating them each time showed in
    /// profiles.
    scratch: StoreScratch,
}

/// [`OffloadManager::prepare_store`]'s working vectors.
#[derive(Clone, Debug, Default)]
struct StoreScratch {
    held: Vec<Lookup>,
    to_store: Vec<(u32, u64)>,
    misses: Vec<u64>,
    protected: Vec<u64>,
    victims: Vec<(u64, bool)>,
    /// The keys the last successful store inserted.
    inserted: Vec<u64>,
}

impl OffloadManager {
    pub fn new(config: OffloadConfig) -> OffloadManager {
        OffloadManager {
            config,
            t1: LruMap::default(),
            t2: LruMap::default(),
            b1: Lru::default(),
            b2: Lru::default(),
            target_t1: 0.0,
            pinned: 0,
            stores: 0,
            evictions: 0,
            failed_stores: 0,
            scratch: StoreScratch::default(),
        }
    }

    pub fn release(&self) -> Release {
        self.config.release
    }

    /// Chunks held.
    fn len(&self) -> u64 {
        (self.t1.len() + self.t2.len()) as u64
    }

    fn get(&self, key: u64) -> Option<&Chunk> {
        self.t1.peek(key).or_else(|| self.t2.peek(key))
    }

    fn get_mut(&mut self, key: u64) -> Option<&mut Chunk> {
        match self.t1.peek_mut(key) {
            Some(chunk) => Some(chunk),
            None => self.t2.peek_mut(key),
        }
    }

    /// Whether the tier holds `key`, ready or not.
    pub fn contains(&self, key: u64) -> bool {
        self.get(key).is_some()
    }

    /// `CPUOffloadingManager.lookup`: a held chunk is a hit once written.
    pub fn lookup(&self, key: u64) -> Lookup {
        match self.get(key) {
            None => Lookup::Miss,
            Some(c) if c.writing => Lookup::Pending,
            Some(_) => Lookup::Hit,
        }
    }

    /// ARC's adaptation to a key found in a ghost list
    /// (`_adapt_to_ghost_hit`).
    fn adapt_to_ghost_hit(&mut self, key: u64) {
        if self.b1.contains(key) {
            let delta = (self.b2.len() as f64 / self.b1.len() as f64).max(1.0);
            self.target_t1 = (self.target_t1 + delta).min(self.config.chunks as f64);
            self.b1.touch(key);
        } else if self.b2.contains(key) {
            let delta = (self.b1.len() as f64 / self.b2.len() as f64).max(1.0);
            self.target_t1 = (self.target_t1 - delta).max(0.0);
            self.b2.touch(key);
        }
    }

    /// vLLM 0.29.0's `touch` of `keys`, given in prefix order and applied
    /// last first; `not_ready` are the keys the store being completed has
    /// just inserted.
    fn touch_keys(&mut self, keys: impl DoubleEndedIterator<Item = u64>, not_ready: &[u64]) {
        for key in keys.rev() {
            match self.config.policy {
                EvictionPolicy::Lru => {
                    // A chunk being loaded or stored is out of the evictable
                    // list, so the touch passes it by.
                    let evictable = self.t1.peek(key).is_some_and(|c| !c.pinned());
                    if evictable && !not_ready.contains(&key) {
                        self.t1.get_mut(key);
                    }
                }
                EvictionPolicy::Arc => {
                    if self.t1.contains(key) {
                        if not_ready.contains(&key) {
                            // "chunk was just prepared to be stored, not
                            // really touched twice".
                            self.t1.get_mut(key);
                        } else {
                            let chunk = self.t1.remove(key).unwrap_or_default();
                            *self.t2.touch_entry(key).0 = chunk;
                        }
                    } else if self.t2.contains(key) {
                        self.t2.get_mut(key);
                    } else {
                        self.adapt_to_ghost_hit(key);
                    }
                }
            }
        }
    }

    /// A waiting request looked its prompt up (`get_num_new_matched_tokens`):
    /// with 0.29.0 every chunk key it has is touched.
    pub fn on_lookup(&mut self, keys: impl DoubleEndedIterator<Item = u64>) {
        if self.config.release == Release::V0_29_0 {
            self.touch_keys(keys, &[]);
        }
    }

    /// Starts loading `keys` (chunks `first..` of the request) into the
    /// GPU (`prepare_load`): they stay held until [`Self::complete_load`].
    pub fn prepare_load(&mut self, first: u32, keys: &[u64], req: &mut RequestState) {
        self.pin_reads(keys);
        req.loading.extend_from_slice(keys);
        if self.config.release == Release::V0_31_0 {
            for (i, &key) in keys.iter().enumerate() {
                let seen = req.seen(first + i as u32, key);
                if !seen.inserted {
                    seen.reused = true;
                }
            }
        }
    }

    /// The request's load is over (`complete_load`): its chunks can be
    /// evicted again. With 0.29.0's LRU a chunk re-enters the evictable
    /// list at its most recently used end.
    pub fn complete_load(&mut self, req: &mut RequestState) {
        let keys = std::mem::take(&mut req.loading);
        self.unpin_reads(&keys);
    }

    /// Pins `keys` for a read without counting it as the request's use:
    /// a load's own pins, and a cascade's copy to a secondary tier
    /// (`CPUPrimaryTierOffloadingManager.prepare_read`, `record_access=False`
    /// in 0.31.0; 0.29.0's is its `prepare_load`, which records nothing
    /// either).
    pub fn pin_reads(&mut self, keys: &[u64]) {
        for &key in keys {
            if let Some(chunk) = self.get_mut(key) {
                let was = chunk.pinned();
                chunk.loads += 1;
                if !was {
                    self.pinned += 1;
                }
            }
        }
    }

    /// The reads of `keys` are over (`complete_load`, `complete_read`).
    /// With 0.29.0's LRU a chunk re-enters the evictable list at its most
    /// recently used end.
    pub fn unpin_reads(&mut self, keys: &[u64]) {
        for &key in keys {
            let Some(chunk) = self.get_mut(key) else {
                continue;
            };
            chunk.loads -= 1;
            if !chunk.pinned() {
                self.pinned -= 1;
                if self.config.policy == EvictionPolicy::Lru
                    && self.config.release == Release::V0_29_0
                {
                    self.t1.get_mut(key);
                }
            }
        }
    }

    /// Picks `n` chunks to evict, none of them `protected` or being
    /// loaded, or `None` if there are not that many (`evict`, atomic).
    ///
    /// The victims go into `victims`; `sorted` is scratch for the
    /// protected keys.
    fn pick_victims(
        &self,
        n: usize,
        protected: &[(u32, u64)],
        sorted: &mut Vec<u64>,
        victims: &mut Vec<(u64, bool)>,
    ) -> Option<()> {
        sorted.clear();
        sorted.extend(protected.iter().map(|&(_, k)| k));
        sorted.sort_unstable();
        let protected = &*sorted;
        victims.clear();
        let free =
            |key: u64, chunk: &Chunk| !chunk.pinned() && protected.binary_search(&key).is_err();
        let mut t1 = self
            .t1
            .iter_lru()
            .filter(|&(k, c)| free(k, c))
            .map(|(k, _)| k);
        if self.config.policy == EvictionPolicy::Lru {
            victims.extend(t1.take(n).map(|k| (k, true)));
            return (victims.len() == n).then_some(());
        }
        // ARC: from T1 while it is at or above the target, else from T2;
        // the scans never restart.
        let mut t2 = self
            .t2
            .iter_lru()
            .filter(|&(k, c)| free(k, c))
            .map(|(k, _)| k);
        let mut virtual_t1 = self.t1.len() as i64;
        let target = self.target_t1 as i64;
        for _ in 0..n {
            let mut pick = None;
            if virtual_t1 >= target
                && let Some(key) = t1.next()
            {
                pick = Some((key, true));
                virtual_t1 -= 1;
            }
            if pick.is_none() {
                pick = t2.next().map(|key| (key, false));
            }
            if pick.is_none() {
                // 0.31.0 falls back to T1; 0.29.0's eviction fails here.
                if self.config.release == Release::V0_29_0 {
                    return None;
                }
                pick = Some((t1.next()?, true));
                virtual_t1 -= 1;
            }
            victims.extend(pick);
        }
        Some(())
    }

    /// Offers chunks `offer` (position and key, in prefix order) of a
    /// request for storing (`prepare_store`); those not held are inserted,
    /// evicting as needed, and their store completes at once
    /// (`complete_store`). `request_keys` are all of the request's chunk
    /// keys in prefix order (0.29.0 touches them after a store). Returns
    /// false if the store failed and must be offered again.
    pub fn store(
        &mut self,
        offer: &[(u32, u64)],
        req: &mut RequestState,
        request_keys: impl DoubleEndedIterator<Item = u64>,
        log: Option<&mut KvEventBatch>,
    ) -> bool {
        self.store_keys(offer, req, request_keys, log).is_some()
    }

    /// [`Self::store`], returning the keys the store inserted (its
    /// `keys_to_store`, which a tiering manager cascades to its secondary
    /// tiers: [`Self::cascade_inserted`]), or `None` if it failed.
    pub fn store_keys(
        &mut self,
        offer: &[(u32, u64)],
        req: &mut RequestState,
        request_keys: impl DoubleEndedIterator<Item = u64>,
        mut log: Option<&mut KvEventBatch>,
    ) -> Option<&[u64]> {
        self.prepare_store(offer, req, log.as_deref_mut(), false)?;
        if self.scratch.inserted.is_empty() {
            return Some(&self.scratch.inserted);
        }
        let inserted = std::mem::take(&mut self.scratch.inserted);
        if self.config.release == Release::V0_29_0 {
            self.touch_keys(request_keys, &inserted);
            if self.config.policy == EvictionPolicy::Lru {
                // Their stores complete: into the evictable list's end.
                for &key in &inserted {
                    self.t1.get_mut(key);
                }
            }
        }
        if let Some(log) = log {
            // `BlockStored(medium="CPU")` without tokens or parent, as the
            // connector's `take_events` reports a completed store.
            for &key in &inserted {
                log.stored(Medium::Cpu, None, &[key], []);
            }
        }
        self.scratch.inserted = inserted;
        Some(&self.scratch.inserted)
    }

    /// Hands the keys the last successful store inserted to a tiering
    /// manager's cascade ([`crate::tiering::Tiering::cascade`]).
    pub fn cascade_inserted(&mut self, tiering: &mut crate::tiering::Tiering) {
        let inserted = std::mem::take(&mut self.scratch.inserted);
        tiering.cascade(self, &inserted);
        self.scratch.inserted = inserted;
    }

    /// Allocates chunk `chunk` (key `key`) of a request for a promotion
    /// from a secondary tier (`prepare_write`, which is `prepare_store` on
    /// the primary tier: `TieringOffloadingManager._initiate_promotion` in
    /// `vllm/v1/kv_offload/tiering/manager.py`). The chunk is held but not
    /// ready until [`Self::complete_write`]. False when too few chunks can
    /// be evicted ("primary tier is full").
    pub fn prepare_write(
        &mut self,
        chunk: u32,
        key: u64,
        req: &mut RequestState,
        log: Option<&mut KvEventBatch>,
    ) -> bool {
        self.prepare_store(&[(chunk, key)], req, log, true)
            .is_some()
    }

    /// A promotion's copy into this tier is over (`complete_write`, which
    /// is `complete_store` with success: a secondary tier's reads do not
    /// fail here): the chunk becomes ready and evictable, keeping the rank
    /// it was inserted with (vLLM 0.31.0's policies; only 0.31.0's tiering
    /// is simulated, so no other release promotes).
    pub fn complete_write(&mut self, key: u64, log: Option<&mut KvEventBatch>) {
        let Some(chunk) = self.get_mut(key) else {
            return;
        };
        if !chunk.writing {
            return;
        }
        chunk.writing = false;
        if !chunk.pinned() {
            self.pinned -= 1;
        }
        if let Some(log) = log {
            log.stored(Medium::Cpu, None, &[key], []);
        }
    }

    /// `CPUOffloadingManager.prepare_store`: the offered chunks not held
    /// are inserted (ready, or being written if `writing`), evicting as
    /// needed; returns them, or `None` if too few chunks could be evicted.
    ///
    /// The keys inserted are left in `scratch.inserted` (empty when the
    /// tier held every offered chunk); `None` when the store failed.
    fn prepare_store(
        &mut self,
        offer: &[(u32, u64)],
        req: &mut RequestState,
        log: Option<&mut KvEventBatch>,
        writing: bool,
    ) -> Option<()> {
        let mut scratch = std::mem::take(&mut self.scratch);
        let stored = self.prepare_store_with(&mut scratch, offer, req, log, writing);
        self.scratch = scratch;
        stored
    }

    fn prepare_store_with(
        &mut self,
        scratch: &mut StoreScratch,
        offer: &[(u32, u64)],
        req: &mut RequestState,
        mut log: Option<&mut KvEventBatch>,
        writing: bool,
    ) -> Option<()> {
        let StoreScratch {
            held,
            to_store,
            misses,
            protected,
            victims,
            inserted,
        } = scratch;
        inserted.clear();
        // One probe a key: which offered chunks the tier holds already,
        // and whether they are ready (a chunk being written is neither
        // stored again nor a reuse).
        held.clear();
        held.extend(offer.iter().map(|&(_, key)| self.lookup(key)));
        to_store.clear();
        to_store.extend(
            offer
                .iter()
                .zip(held.iter())
                .filter(|&(_, &held)| held == Lookup::Miss)
                .map(|(&chunk, _)| chunk),
        );
        if self.config.release == Release::V0_31_0 {
            // ARC learns from the ghost lists once per request, before the
            // insertion takes the key out of them; LRU's `on_store_miss`
            // touches keys it does not hold, which does nothing.
            misses.clear();
            for &(chunk, key) in to_store.iter() {
                let seen = req.seen(chunk, key);
                if !seen.store_miss {
                    seen.store_miss = true;
                    misses.push(key);
                }
            }
            if self.config.policy == EvictionPolicy::Arc {
                for &key in misses.iter().rev() {
                    self.adapt_to_ghost_hit(key);
                }
            }
            for (&(chunk, key), _) in offer
                .iter()
                .zip(held.iter())
                .filter(|&(_, &h)| h == Lookup::Hit)
            {
                let seen = req.seen(chunk, key);
                if !seen.inserted {
                    seen.reused = true;
                }
            }
        }
        if to_store.is_empty() {
            return Some(());
        }
        let free = self.config.chunks.saturating_sub(self.len());
        let need = (to_store.len() as u64).saturating_sub(free) as usize;
        if need > 0 {
            let picked = need as u64 <= self.len() - self.pinned
                && self.pick_victims(need, offer, protected, victims).is_some();
            if !picked {
                self.failed_stores += 1;
                return None;
            }
            for &(key, from_t1) in victims.iter() {
                if from_t1 {
                    self.t1.remove(key);
                } else {
                    self.t2.remove(key);
                }
                if self.config.policy == EvictionPolicy::Arc {
                    if from_t1 {
                        self.b1.touch(key);
                    } else {
                        self.b2.touch(key);
                    }
                }
                self.evictions += 1;
                if let Some(log) = log.as_deref_mut() {
                    log.removed(Medium::Cpu, key);
                }
            }
            if self.config.policy == EvictionPolicy::Arc {
                let cap = self.config.chunks as usize;
                for ghost in [&mut self.b1, &mut self.b2] {
                    while ghost.len() > cap {
                        ghost.pop_lru();
                    }
                }
            }
        }
        inserted.extend(to_store.iter().map(|&(_, key)| key));
        for &(chunk, key) in to_store.iter() {
            self.t1.touch_entry(key).0.writing = writing;
            if writing {
                self.pinned += 1;
            }
            if self.config.policy == EvictionPolicy::Arc {
                self.b1.remove(key);
                self.b2.remove(key);
            }
            if self.config.release == Release::V0_31_0 {
                req.seen(chunk, key).inserted = true;
            }
        }
        self.stores += inserted.len() as u64;
        Some(())
    }

    /// The request has ended (`on_request_finished`, 0.31.0): its observed
    /// chunks take their recency, last chunk first.
    pub fn on_request_finished(&mut self, req: &mut RequestState) {
        let seen = std::mem::take(&mut req.seen);
        if self.config.release != Release::V0_31_0 {
            return;
        }
        for s in seen.iter().rev() {
            match self.config.policy {
                EvictionPolicy::Lru => {
                    self.t1.get_mut(s.key);
                }
                EvictionPolicy::Arc => {
                    if s.inserted && !s.reused {
                        if self.t1.get_mut(s.key).is_none() {
                            self.t2.get_mut(s.key);
                        }
                    } else if s.reused {
                        if let Some(chunk) = self.t1.remove(s.key) {
                            *self.t2.touch_entry(s.key).0 = chunk;
                        } else {
                            self.t2.get_mut(s.key);
                        }
                    }
                }
            }
        }
    }

    /// ARC's partition sizes and target (T1, T2, B1, B2, target), for
    /// tests and reports.
    pub fn arc_state(&self) -> (usize, usize, usize, usize, f64) {
        (
            self.t1.len(),
            self.t2.len(),
            self.b1.len(),
            self.b2.len(),
            self.target_t1,
        )
    }

    /// The held keys from least to most recently used (T1 then T2 under
    /// ARC), for tests.
    pub fn order(&self) -> Vec<u64> {
        let mut keys: Vec<u64> = self.t1.iter_lru().map(|(k, _)| k).collect();
        keys.extend(self.t2.iter_lru().map(|(k, _)| k));
        keys
    }
}

#[cfg(test)]
mod tests {
    use super::{EvictionPolicy, OffloadConfig, OffloadManager, Release, RequestState};

    fn manager(chunks: u64, policy: EvictionPolicy, release: Release) -> OffloadManager {
        OffloadManager::new(OffloadConfig {
            chunks,
            policy,
            release,
        })
    }

    /// Stores a request's chunks `keys` (positions from 0) in one offer,
    /// with every key as the request's own.
    fn store(tier: &mut OffloadManager, req: &mut RequestState, keys: &[u64]) -> bool {
        let offer: Vec<(u32, u64)> = keys
            .iter()
            .enumerate()
            .map(|(i, &k)| (i as u32, k))
            .collect();
        tier.store(&offer, req, keys.iter().copied(), None)
    }

    /// 0.31.0's LRU: inserted chunks are most recent in offer order; at a
    /// request's end its chunks are ranked last first, so its first chunk
    /// ends most recent; a held chunk a store offers is its victim never.
    #[test]
    fn lru_at_request_end_ranks_the_requests_chunks_first_chunk_last() {
        let mut tier = manager(4, EvictionPolicy::Lru, Release::V0_31_0);
        let (mut a, mut b, mut c) = Default::default();
        assert!(store(&mut tier, &mut a, &[1, 2]));
        assert_eq!(tier.order(), vec![1, 2]);
        tier.on_request_finished(&mut a);
        assert_eq!(tier.order(), vec![2, 1]);
        assert!(store(&mut tier, &mut b, &[3, 4]));
        tier.on_request_finished(&mut b);
        assert_eq!(tier.order(), vec![2, 1, 4, 3]);
        // C offers 2 (held, the oldest: reused, and protected) and 5 (new):
        // one eviction, which passes 2 over and takes 1.
        assert!(store(&mut tier, &mut c, &[2, 5]));
        assert_eq!((tier.stores, tier.evictions), (5, 1));
        assert_eq!(tier.order(), vec![2, 4, 3, 5], "a reuse moves nothing yet");
        tier.on_request_finished(&mut c);
        assert_eq!(tier.order(), vec![4, 3, 5, 2]);
    }

    /// 0.29.0's LRU: a lookup touches the request's chunks; a store's new
    /// chunks skip its touch and end most recent, as their completion
    /// appends them to the evictable list.
    #[test]
    fn lru_with_touches_moves_chunks_at_lookup_and_after_a_store() {
        let mut tier = manager(4, EvictionPolicy::Lru, Release::V0_29_0);
        let (mut a, mut b, mut c) = Default::default();
        assert!(store(&mut tier, &mut a, &[1, 2]));
        tier.on_request_finished(&mut a);
        assert_eq!(tier.order(), vec![1, 2], "no change at the end");
        assert!(store(&mut tier, &mut b, &[3, 4]));
        tier.on_lookup([1, 5].into_iter());
        assert_eq!(tier.order(), vec![2, 3, 4, 1]);
        assert!(store(&mut tier, &mut c, &[1, 5]));
        // 2 evicted; the touch moves 1, then 5's store completes.
        assert_eq!(tier.order(), vec![3, 4, 1, 5]);
    }

    /// A chunk being loaded cannot be evicted: a store that would need it
    /// fails, counts as failed, and succeeds once the load is over.
    #[test]
    fn a_store_fails_while_the_only_victims_are_being_loaded() {
        for release in [Release::V0_29_0, Release::V0_31_0] {
            let mut tier = manager(2, EvictionPolicy::Lru, release);
            let (mut a, mut b, mut c) = Default::default();
            assert!(store(&mut tier, &mut a, &[1, 2]));
            tier.prepare_load(0, &[1, 2], &mut b);
            assert!(!store(&mut tier, &mut c, &[3]));
            assert_eq!((tier.stores, tier.evictions, tier.failed_stores), (2, 0, 1));
            tier.complete_load(&mut b);
            assert!(store(&mut tier, &mut c, &[3]));
            assert_eq!((tier.stores, tier.evictions), (3, 1));
            assert!(tier.contains(3) && tier.len() == 2);
        }
    }

    /// 0.31.0's ARC: a load is a reuse (T1 → T2 at the request's end), a
    /// store is not; T1 at or above its target gives the victim, into B1;
    /// storing a B1 key again raises the target by one and takes it out of
    /// the ghost list.
    #[test]
    fn arc_promotes_reused_chunks_and_learns_from_its_ghosts() {
        let mut tier = manager(2, EvictionPolicy::Arc, Release::V0_31_0);
        let (mut a, mut b, mut c, mut d) = Default::default();
        assert!(store(&mut tier, &mut a, &[1, 2]));
        tier.on_request_finished(&mut a);
        assert_eq!(tier.arc_state(), (2, 0, 0, 0, 0.0), "stores stay in T1");
        tier.prepare_load(0, &[1], &mut b);
        tier.complete_load(&mut b);
        tier.on_request_finished(&mut b);
        assert_eq!(
            tier.arc_state(),
            (1, 1, 0, 0, 0.0),
            "the loaded chunk is in T2"
        );
        assert!(store(&mut tier, &mut c, &[3]));
        assert_eq!(tier.order(), vec![3, 1], "2 left T1 for B1");
        assert_eq!(tier.arc_state(), (1, 1, 1, 0, 0.0));
        tier.on_request_finished(&mut c);
        assert!(store(&mut tier, &mut d, &[2]));
        // The B1 hit raised the target to 1; T1 (3) was still at it.
        assert_eq!(tier.arc_state(), (1, 1, 1, 0, 1.0));
        assert_eq!(tier.order(), vec![2, 1]);
    }

    /// 0.31.0's ARC at a request's end: a chunk it reused counts as reused
    /// even if it also stored it again (`insertion_only = inserted −
    /// reused`), and a chunk it offered but could not store moves nowhere.
    #[test]
    fn arc_at_request_end_goes_by_reuse_not_by_insertion() {
        let mut tier = manager(2, EvictionPolicy::Arc, Release::V0_31_0);
        let (mut a, mut b, mut c) = Default::default();
        assert!(store(&mut tier, &mut a, &[1, 2]));
        tier.on_request_finished(&mut a);
        // B loads 1, which C's store then evicts; B stores it back.
        tier.prepare_load(0, &[1], &mut b);
        tier.complete_load(&mut b);
        assert!(store(&mut tier, &mut c, &[3, 4]));
        assert!(!tier.contains(1));
        assert!(tier.store(&[(0, 1)], &mut b, [1].into_iter(), None));
        tier.on_request_finished(&mut b);
        let (t1, t2, ..) = tier.arc_state();
        assert_eq!((t1, t2), (1, 1), "1 was reused: T2");
        assert_eq!(tier.order(), vec![4, 1]);
        // D offers 5 while E's load pins every chunk: the store fails; C
        // then stores 5 and finishes; D's end must not move 5.
        let (mut d, mut e) = (RequestState::default(), RequestState::default());
        tier.prepare_load(0, &[4, 1], &mut e);
        assert!(!tier.store(&[(0, 5)], &mut d, [5].into_iter(), None));
        tier.complete_load(&mut e);
        let mut f = RequestState::default();
        assert!(tier.store(&[(0, 5), (1, 6)], &mut f, [5, 6].into_iter(), None));
        let before = tier.order();
        tier.on_request_finished(&mut d);
        assert_eq!(tier.order(), before);
    }

    /// 0.29.0's ARC touches after every store, so a request's chunk stored
    /// one step is promoted to T2 by its next store; 0.31.0 keeps both in T1.
    #[test]
    fn arc_with_touches_counts_a_requests_own_earlier_store_as_reuse() {
        for (release, expected) in [(Release::V0_29_0, (1, 1)), (Release::V0_31_0, (2, 0))] {
            let mut tier = manager(8, EvictionPolicy::Arc, release);
            let mut a = RequestState::default();
            assert!(tier.store(&[(0, 1)], &mut a, [1].into_iter(), None));
            assert!(tier.store(&[(1, 2)], &mut a, [1, 2].into_iter(), None));
            tier.on_request_finished(&mut a);
            let (t1, t2, ..) = tier.arc_state();
            assert_eq!((t1, t2), expected, "{release:?}");
        }
    }

    proptest::proptest! {
        /// `seen` keeps one record a chunk, in position order, whatever
        /// order chunks are asked for in (the common in-order case takes
        /// a shortcut, the rest the search), and hands back the record of
        /// the chunk asked for, with the key it was first seen with.
        #[test]
        fn seen_keeps_one_record_a_chunk_in_order(
            asks in proptest::collection::vec((0u32..40, 0u64..1000), 0..120),
        ) {
            let mut req = RequestState::default();
            let mut expected = std::collections::BTreeMap::new();
            for (i, &(chunk, key)) in asks.iter().enumerate() {
                let first_key = *expected.entry(chunk).or_insert(key);
                let seen = req.seen(chunk, key);
                proptest::prop_assert_eq!((seen.chunk, seen.key), (chunk, first_key));
                // Mark it, so a later ask must find this very record.
                seen.reused = i % 2 == 0;
                let marked = seen.reused;
                proptest::prop_assert_eq!(req.seen(chunk, key).reused, marked);
            }
            let got: Vec<(u32, u64)> = req.seen.iter().map(|s| (s.chunk, s.key)).collect();
            let want: Vec<(u32, u64)> = expected.into_iter().collect();
            proptest::prop_assert_eq!(got, want);
        }
    }
}
