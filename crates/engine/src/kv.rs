//! KV blocks and the prefix cache of one engine core, mirroring vLLM V1's
//! block pool (`vllm/v1/core/block_pool.py`), its free-block queue
//! (`vllm/v1/core/kv_cache_utils.py`, `FreeKVCacheBlockQueue`) and the
//! single-type manager's allocation (`vllm/v1/core/kv_cache_manager.py`,
//! `allocate_slots`).
//!
//! Block 0 is vLLM's null block and is never handed out, so an engine with
//! `num_blocks` blocks has `num_blocks - 1` usable ones. Free blocks sit in a
//! doubly linked queue threaded through an index array: allocation pops the
//! head; a released block with a hash goes to the tail, so cached blocks are
//! evicted least recently released first, and a cached block stays a prefix
//! hit until it is physically reused ("lazy eviction").
//!
//! The pool grows with the blocks an engine has used, not with its capacity:
//! an H200 engine has hundreds of thousands of blocks and a 2,048-node
//! cluster sixteen thousand engines, most of which touch a few hundred. vLLM
//! starts its free queue with every block in id order; the blocks never
//! handed out yet are always a contiguous id range `[next_unused,
//! num_blocks)` in that order, because nothing can unlink or reorder a
//! block nobody has held. So the queue is kept as its real entries with the
//! whole untouched range standing in one place among them, represented by
//! the null block's slot (which is never queued otherwise): what was pushed
//! to the front since sits before it, what was released to the tail after
//! it. Popping the stand-in hands out `next_unused` and materialises that
//! block; once the range is exhausted the stand-in leaves the queue. The
//! order blocks come out is exactly the eager queue's.
//!
//! The cached hashes are indexed either as vLLM keeps them, a table from
//! each hash to its blocks, or, for a plain decoder's pool
//! ([`BlockPool::index_by_chains`]), as a tree of hash chains
//! ([`crate::chains`]) that gives the same answers with a probe per run of
//! blocks rather than per block. The free queue, and so every allocation
//! and eviction, is the same either way.

use hashbrown::HashTable;
use pdsim_core::kv_events::{KvEventBatch, Medium};
use pdsim_core::lru::table_hash as fx;
use rustc_hash::FxHashMap;

const NONE: u32 = u32::MAX;
/// The queue node standing for the blocks never handed out: the null
/// block's slot, which is never queued as a block.
const UNTOUCHED: u32 = 0;

/// The block pool: reference counts, hashes and the free queue.
#[derive(Clone, Copy, Debug)]
struct Meta {
    prev: u32,
    next: u32,
    ref_cnt: u32,
    in_free: bool,
}

impl Default for Meta {
    fn default() -> Meta {
        Meta {
            prev: NONE,
            next: NONE,
            ref_cnt: 0,
            in_free: false,
        }
    }
}

#[derive(Clone, Debug)]
pub struct BlockPool {
    /// Per block ever handed out (ids below `next_unused`): free-queue
    /// links, reference count and membership, side by side so that popping
    /// a cold block from the free queue touches one cache line rather than
    /// four. Slot 0 (the null block) is the stand-in for the untouched range
    /// while that range is queued.
    meta: Vec<Meta>,
    /// Hashes of the prefix-reuse units each materialised block holds,
    /// `units_per_block` per block, 0 for none. Units fill in order, so a
    /// block is cached iff its first unit has a hash.
    unit_hash: Vec<u64>,
    units_per_block: u32,
    /// Blocks in the pool, the null block included.
    num_blocks: u32,
    /// The lowest id never handed out: `[next_unused, num_blocks)` are free,
    /// unhashed, and queued in id order where the stand-in sits.
    next_unused: u32,
    head: u32,
    tail: u32,
    /// Free blocks: the queued real entries plus the untouched range.
    free_count: u32,
    /// The unit slot (`block · units_per_block + unit`) that holds each
    /// cached unit hash, hashed by the hash in `unit_hash`. Looked up,
    /// never iterated, so its order cannot leak into results. A table of
    /// four-byte slots rather than a `hash → (block, unit)` map: it holds
    /// up to millions of entries and every eviction probes a cold one, so a
    /// quarter of the size means fewer cache misses, and an eviction finds
    /// its entry by slot number without loading another unit's hash.
    cached: HashTable<u32>,
    /// Further blocks holding a hash `cached` already maps, oldest first.
    /// vLLM does not de-duplicate cached blocks: `BlockHashToBlockMap`
    /// (`vllm/v1/core/block_pool.py`) keeps every block of a hash in
    /// insertion order and `get_one_block` returns the first left, so when
    /// the first is evicted the next one is still a hit. Two requests that
    /// fill the same block in one step make such duplicates.
    dups: FxHashMap<u64, Vec<(u32, u32)>>,
    /// Whether freed blocks without a hash go to the head of the queue
    /// (reused first, vLLM 0.31 and later: `BlockPool.free_blocks` in
    /// `vllm/v1/core/block_pool.py` prepends them) or to the tail like the
    /// rest.
    unhashed_to_front: bool,
    /// Cached blocks evicted so far (a hash dropped on reuse).
    pub evictions: u64,
    /// Σ reference counts, kept as blocks are touched, allocated and
    /// released, so the conservation check is O(requests), not O(blocks).
    referenced: u64,
    /// The step's KV events when the engine publishes them (vLLM's
    /// `enable_kv_cache_events`); `None` costs nothing.
    pub kv_events: Option<KvEventBatch>,
    /// The cached hashes as a tree of chains
    /// ([`crate::chains::ChainIndex`]) instead of `cached` and `dups`,
    /// when the pool is indexed by chains ([`BlockPool::index_by_chains`]):
    /// the same answers with a probe per run of blocks, not per block.
    chains: Option<Box<crate::chains::ChainIndex>>,
}

impl BlockPool {
    /// A pool of `num_blocks` blocks, block 0 reserved as the null block,
    /// whose prefix cache works in whole blocks.
    pub fn new(num_blocks: u32, unhashed_to_front: bool) -> BlockPool {
        BlockPool::with_units(num_blocks, 1, unhashed_to_front)
    }

    /// A pool whose prefix cache works in `units_per_block` units per block:
    /// vllm-rbln's sub-block prefix caching (`VLLM_RBLN_SUB_BLOCK_CACHE`),
    /// where a prefix is reused in `max_num_batched_tokens` units inside
    /// much larger blocks (seeds/001).
    pub fn with_units(num_blocks: u32, units_per_block: u32, unhashed_to_front: bool) -> BlockPool {
        let num_blocks = num_blocks.max(1);
        let units_per_block = units_per_block.max(1);
        let mut pool = BlockPool {
            meta: vec![Meta::default()],
            unit_hash: vec![0; units_per_block as usize],
            units_per_block,
            num_blocks,
            next_unused: 1,
            head: NONE,
            tail: NONE,
            free_count: 0,
            cached: HashTable::new(),
            dups: FxHashMap::default(),
            unhashed_to_front,
            evictions: 0,
            referenced: 0,
            kv_events: None,
            chains: None,
        };
        if num_blocks > 1 {
            // The whole queue is the untouched range 1..num_blocks.
            pool.link_back(UNTOUCHED);
            pool.free_count = num_blocks - 1;
        }
        pool
    }

    /// Indexes the cached hashes by their chains
    /// ([`crate::chains::ChainIndex`]). Only for a pool whose blocks each
    /// hold one prefix unit and whose every hash is cached by
    /// [`BlockPool::cache_next`] after the block before it in its request:
    /// the single attention group of a plain decoder (Mamba and window
    /// groups cache keys of their own, looked up by hash alone).
    pub fn index_by_chains(mut self) -> BlockPool {
        if self.units_per_block == 1 && self.cached.is_empty() {
            let mut chains = crate::chains::ChainIndex::default();
            chains.grow(self.meta.len());
            self.chains = Some(Box::new(chains));
        }
        self
    }

    /// Whether the pool is indexed by chains.
    pub fn by_chains(&self) -> bool {
        self.chains.is_some()
    }

    /// Usable blocks (the null block excluded).
    pub fn usable(&self) -> u32 {
        self.num_blocks - 1
    }

    /// Blocks handed out at least once: what the pool's memory grows with.
    pub fn materialised(&self) -> u32 {
        self.next_unused - 1
    }

    /// Free blocks, cached-but-unreferenced ones included.
    pub fn free(&self) -> u32 {
        self.free_count
    }

    /// `vllm:kv_cache_usage_perc`: 1 − free / usable.
    pub fn usage(&self) -> f64 {
        let usable = self.usable();
        if usable == 0 {
            0.0
        } else {
            1.0 - self.free_count as f64 / usable as f64
        }
    }

    /// Links a node (a block or the stand-in) at the tail.
    fn link_back(&mut self, block: u32) {
        let b = block as usize;
        self.meta[b].prev = self.tail;
        self.meta[b].next = NONE;
        if self.tail != NONE {
            self.meta[self.tail as usize].next = block;
        } else {
            self.head = block;
        }
        self.tail = block;
        self.meta[b].in_free = true;
    }

    fn push_back(&mut self, block: u32) {
        self.link_back(block);
        self.free_count += 1;
    }

    fn push_front(&mut self, block: u32) {
        let b = block as usize;
        self.meta[b].next = self.head;
        self.meta[b].prev = NONE;
        if self.head != NONE {
            self.meta[self.head as usize].prev = block;
        } else {
            self.tail = block;
        }
        self.head = block;
        self.meta[b].in_free = true;
        self.free_count += 1;
    }

    /// Unlinks a node (a block or the stand-in) from the queue.
    fn unlink_node(&mut self, block: u32) {
        let b = block as usize;
        let (p, n) = (self.meta[b].prev, self.meta[b].next);
        if p != NONE {
            self.meta[p as usize].next = n;
        } else {
            self.head = n;
        }
        if n != NONE {
            self.meta[n as usize].prev = p;
        } else {
            self.tail = p;
        }
        self.meta[b].prev = NONE;
        self.meta[b].next = NONE;
        self.meta[b].in_free = false;
    }

    fn unlink(&mut self, block: u32) {
        self.unlink_node(block);
        self.free_count -= 1;
    }

    /// Hands out the lowest never-used block, which the stand-in at the
    /// head of the queue represents, and gives it its own slots.
    fn take_untouched(&mut self) -> u32 {
        let block = self.next_unused;
        self.next_unused += 1;
        self.meta.push(Meta::default());
        self.unit_hash
            .extend(std::iter::repeat_n(0, self.units_per_block as usize));
        if let Some(chains) = &mut self.chains {
            chains.grow(self.meta.len());
        }
        self.free_count -= 1;
        if self.next_unused == self.num_blocks {
            self.unlink_node(UNTOUCHED);
        }
        block
    }

    /// The cached block holding unit `hash`, if any.
    pub fn lookup(&self, hash: u64) -> Option<u32> {
        self.lookup_unit(hash).map(|(block, _)| block)
    }

    /// The cached block and unit slot holding unit `hash`, if any. A pool
    /// indexed by chains answers by scanning them: for tests and checks,
    /// which ask by hash alone (the scheduler walks a request's hashes,
    /// [`BlockPool::cached_prefix`]).
    pub fn lookup_unit(&self, hash: u64) -> Option<(u32, u32)> {
        let hash = hash.max(1);
        if let Some(chains) = &self.chains {
            return chains.find(hash).map(|block| (block, 0));
        }
        let unit_hash = &self.unit_hash;
        let upb = self.units_per_block;
        self.cached
            .find(fx(hash), |&slot| unit_hash[slot as usize] == hash)
            .map(|&slot| (slot / upb, slot % upb))
    }

    pub fn units_per_block(&self) -> u32 {
        self.units_per_block
    }

    fn is_hashed(&self, block: u32) -> bool {
        self.unit_hash[(block * self.units_per_block) as usize] != 0
    }

    /// Whether a block is in the free queue (reference count zero).
    pub fn is_free(&self, block: u32) -> bool {
        match self.meta.get(block as usize) {
            Some(meta) => block != UNTOUCHED && meta.in_free,
            None => block < self.num_blocks,
        }
    }

    /// Takes a reference on a prefix-hit block, pulling it out of the free
    /// queue if nobody held it (`BlockPool.touch`).
    pub fn touch(&mut self, block: u32) {
        if self.meta[block as usize].in_free {
            self.unlink(block);
        }
        self.meta[block as usize].ref_cnt += 1;
        self.referenced += 1;
    }

    /// Pops `count` blocks from the head of the free queue, dropping the hash
    /// of any cached block it reuses. The caller checked there are enough.
    pub fn allocate(&mut self, count: u32, out: &mut Vec<u32>) {
        for _ in 0..count {
            let block = self.head;
            debug_assert!(block != NONE, "allocate beyond the free queue");
            if block == NONE {
                return;
            }
            if block == UNTOUCHED {
                // A never-used block: no hash to drop.
                let block = self.take_untouched();
                self.meta[block as usize].ref_cnt = 1;
                self.referenced += 1;
                out.push(block);
                continue;
            }
            self.unlink(block);
            if self.is_hashed(block) {
                let first = (block * self.units_per_block) as usize;
                for unit in 0..self.units_per_block as usize {
                    let hash = std::mem::take(&mut self.unit_hash[first + unit]);
                    if hash != 0 {
                        self.uncache(hash, block, (first + unit) as u32);
                    }
                    // `_maybe_evict_cached_block` (`vllm/v1/core/block_pool.py`)
                    // queues `BlockRemoved(medium="GPU")` for every cached
                    // block it evicts, duplicates of a hash included.
                    if hash != 0
                        && let Some(log) = &mut self.kv_events
                    {
                        log.removed(Medium::Gpu, hash);
                    }
                }
                self.evictions += 1;
            }
            self.meta[block as usize].ref_cnt = 1;
            self.referenced += 1;
            out.push(block);
        }
    }

    /// Marks a full block as holding `hash` so later requests can hit it.
    /// When another block already holds the hash, the first one stays the
    /// lookup target and this one is kept behind it, as vLLM keeps both.
    pub fn cache(&mut self, block: u32, hash: u64) {
        self.cache_unit(block, 0, hash);
    }

    /// Caches `hash` in `block`, the chain position after the one `parent`
    /// caches in the same request (`None` for a request's first block): in
    /// a pool indexed by chains at that position, else as
    /// [`BlockPool::cache_unit`] does for a block of one unit.
    pub fn cache_next(&mut self, block: u32, hash: u64, parent: Option<u32>) {
        let Some(chains) = &mut self.chains else {
            return self.cache_unit(block, 0, hash);
        };
        let hash = hash.max(1); // 0 marks "no hash"
        let slot = &mut self.unit_hash[block as usize];
        if *slot != 0 {
            return;
        }
        *slot = hash;
        chains.cache(block, hash, parent);
    }

    /// How many of `hashes`' first `max` units are cached, walking from
    /// the first and stopping at the first that is not
    /// (`find_longest_cache_hit`). For a pool of one unit a block.
    pub fn cached_prefix(&self, hashes: &[u64], max: usize) -> usize {
        match &self.chains {
            Some(chains) => chains.walk(hashes, max, |_| {}),
            None => hashes
                .iter()
                .take(max)
                .take_while(|&&hash| self.lookup(hash).is_some())
                .count(),
        }
    }

    /// The blocks of a prefix hit's first `count` blocks, whose first units
    /// are every `per_block`-th of `hashes` and which the caller found
    /// cached ([`BlockPool::cached_prefix`]); `visit` sees them in order,
    /// in runs. (The table skips a hash it no longer finds; a hit's hashes
    /// are all found, so the two indexes give the same blocks.)
    pub fn hit_blocks(
        &self,
        hashes: &[u64],
        per_block: usize,
        count: usize,
        mut visit: impl FnMut(&[u32]),
    ) {
        match &self.chains {
            Some(chains) => {
                debug_assert_eq!(
                    per_block, 1,
                    "a pool indexed by chains has one unit a block"
                );
                chains.walk(hashes, count, visit);
            }
            None => {
                for b in 0..count {
                    if let Some(block) = self.lookup(hashes[b * per_block]) {
                        visit(&[block]);
                    }
                }
            }
        }
    }

    /// Marks unit `unit` of `block` as holding `hash`. Not for a pool
    /// indexed by chains, whose hashes need their position
    /// ([`BlockPool::cache_next`]).
    pub fn cache_unit(&mut self, block: u32, unit: u32, hash: u64) {
        debug_assert!(
            self.chains.is_none(),
            "cache_unit on a pool indexed by chains"
        );
        let hash = hash.max(1); // 0 marks "no hash"
        let slot = (block * self.units_per_block + unit) as usize;
        if self.unit_hash[slot] != 0 {
            return;
        }
        self.unit_hash[slot] = hash;
        let unit_hash = &self.unit_hash;
        let upb = self.units_per_block;
        match self.cached.entry(
            fx(hash),
            |&held| unit_hash[held as usize] == hash,
            |&held| fx(unit_hash[held as usize]),
        ) {
            hashbrown::hash_table::Entry::Vacant(entry) => {
                entry.insert(slot as u32);
            }
            hashbrown::hash_table::Entry::Occupied(entry) if *entry.get() / upb != block => {
                self.dups.entry(hash).or_default().push((block, unit));
            }
            hashbrown::hash_table::Entry::Occupied(_) => {}
        }
    }

    /// Drops `block` from the blocks holding `hash` (`BlockHashToBlockMap.pop`):
    /// when it was the lookup target, the oldest duplicate takes its place.
    /// `slot` is the unit slot of `block` that held `hash`, its hash
    /// already cleared. Units are uncached in order and a block's lower
    /// unit is the one recorded for a hash it holds twice, so the table
    /// maps `hash` to this block exactly when it maps it to `slot`.
    fn uncache(&mut self, hash: u64, block: u32, slot: u32) {
        if let Some(chains) = &mut self.chains {
            chains.uncache(hash, block);
            return;
        }
        let upb = self.units_per_block;
        if let Ok(mut entry) = self.cached.find_entry(fx(hash), |&held| held == slot) {
            match self.dups.get_mut(&hash) {
                // A list of duplicates is dropped as soon as it empties
                // (here and below), so one that is held has a first entry.
                Some(dups) => {
                    let (b, u) = dups.remove(0);
                    *entry.get_mut() = b * upb + u;
                    if dups.is_empty() {
                        self.dups.remove(&hash);
                    }
                }
                _ => {
                    entry.remove();
                }
            }
            return;
        }
        if let Some(dups) = self.dups.get_mut(&hash) {
            dups.retain(|d| d.0 != block);
            if dups.is_empty() {
                self.dups.remove(&hash);
            }
        }
    }

    /// Releases a request's blocks, tail block first, as
    /// `SingleTypeKVCacheManager.free`
    /// (`vllm/v1/core/single_type_kv_cache_manager.py`) hands them to
    /// `BlockPool.free_blocks` in reverse, so within one request the blocks
    /// least likely to be shared are evicted first.
    pub fn release(&mut self, blocks: &[u32]) {
        for &block in blocks.iter().rev() {
            let b = block as usize;
            debug_assert!(self.meta[b].ref_cnt > 0, "double free of block {block}");
            if self.meta[b].ref_cnt == 0 {
                continue;
            }
            self.meta[b].ref_cnt -= 1;
            self.referenced -= 1;
            if self.meta[b].ref_cnt == 0 {
                if !self.is_hashed(block) && self.unhashed_to_front {
                    self.push_front(block);
                } else {
                    self.push_back(block);
                }
            }
        }
    }

    /// Checks the pool's invariants: the free queue holds exactly the
    /// blocks with reference count zero, and the count matches. For tests
    /// and `--check`; returns a description of the first violation.
    pub fn check(&self) -> Result<(), String> {
        let untouched = self.num_blocks - self.next_unused;
        if self.meta.len() != self.next_unused as usize
            || self.unit_hash.len() != self.meta.len() * self.units_per_block as usize
        {
            return Err(format!(
                "{} block slots for {} blocks handed out",
                self.meta.len(),
                self.next_unused
            ));
        }
        if self.meta[UNTOUCHED as usize].in_free != (untouched > 0) {
            return Err(format!(
                "{untouched} never-used blocks but their place in the queue is {}",
                if untouched > 0 {
                    "missing"
                } else {
                    "still there"
                }
            ));
        }
        let mut seen = 0u32;
        let mut block = self.head;
        let mut prev = NONE;
        while block != NONE {
            let b = block as usize;
            if block == UNTOUCHED {
                seen += untouched;
                if self.meta[b].prev != prev {
                    return Err("the never-used range's back link is broken".into());
                }
                prev = block;
                block = self.meta[b].next;
                continue;
            }
            if self.meta[b].ref_cnt != 0 {
                return Err(format!(
                    "block {block} is in the free queue with {} references",
                    self.meta[b].ref_cnt
                ));
            }
            if self.meta[b].prev != prev {
                return Err(format!("block {block}'s back link is broken"));
            }
            seen += 1;
            if seen > self.usable() {
                return Err("the free queue has a cycle".into());
            }
            prev = block;
            block = self.meta[b].next;
        }
        if seen != self.free_count {
            return Err(format!(
                "free count {} but {seen} blocks queued",
                self.free_count
            ));
        }
        if let Some(chains) = &self.chains {
            chains.check()?;
        }
        let unreferenced = (1..self.meta.len())
            .filter(|b| self.meta[*b].ref_cnt == 0)
            .count() as u32
            + untouched;
        if unreferenced != self.free_count {
            return Err(format!(
                "{unreferenced} blocks unreferenced but {} free",
                self.free_count
            ));
        }
        Ok(())
    }

    /// The free queue from head to tail, for tests.
    pub fn free_order(&self) -> Vec<u32> {
        let mut order = Vec::new();
        let mut block = self.head;
        while block != NONE {
            if block == UNTOUCHED {
                order.extend(self.next_unused..self.num_blocks);
            } else {
                order.push(block);
            }
            block = self.meta[block as usize].next;
        }
        order
    }

    /// Σ reference counts over all blocks, maintained incrementally.
    pub fn referenced(&self) -> u64 {
        self.referenced
    }

    /// Breaks the free queue's marker for the never-used range, a fault
    /// only the full walk ([`BlockPool::check`]) sees: for the tests of
    /// how often the engine runs that walk.
    #[cfg(test)]
    pub(crate) fn break_untouched_marker(&mut self) {
        let marker = &mut self.meta[UNTOUCHED as usize].in_free;
        *marker = !*marker;
    }

    /// Σ reference counts recounted block by block, for `check_full`:
    /// O(blocks handed out), the never-used ones holding none.
    pub fn recount_references(&self) -> u64 {
        self.meta[1..].iter().map(|m| m.ref_cnt as u64).sum()
    }

    pub fn ref_count(&self, block: u32) -> u32 {
        if block == UNTOUCHED {
            return 0;
        }
        self.meta.get(block as usize).map_or(0, |m| m.ref_cnt)
    }
}

#[cfg(test)]
mod tests {
    use super::BlockPool;
    use proptest::prelude::*;
    use std::collections::{BTreeMap, VecDeque};

    /// The eager pool as vLLM builds it, as the reference the lazy one must
    /// match: `FreeKVCacheBlockQueue` starts with every block but the null
    /// block in id order, allocation pops the front, a released block goes
    /// to the back (or to the front when it has no hash and the release
    /// says so), and touching a free block removes it wherever it is.
    struct Eager {
        queue: VecDeque<u32>,
        ref_cnt: Vec<u32>,
        /// Unit hashes per block, `units` per block.
        hashes: Vec<u64>,
        units: u32,
        /// Every block holding a hash, in caching order; the first is the
        /// lookup target.
        cached: BTreeMap<u64, Vec<(u32, u32)>>,
        unhashed_to_front: bool,
        evictions: u64,
    }

    impl Eager {
        fn new(num_blocks: u32, units: u32, unhashed_to_front: bool) -> Eager {
            let n = num_blocks.max(1);
            Eager {
                queue: (1..n).collect(),
                ref_cnt: vec![0; n as usize],
                hashes: vec![0; (n * units) as usize],
                units,
                cached: BTreeMap::new(),
                unhashed_to_front,
                evictions: 0,
            }
        }

        fn allocate(&mut self, count: u32, out: &mut Vec<u32>) {
            for _ in 0..count {
                let block = self.queue.pop_front().expect("enough free blocks");
                let first = (block * self.units) as usize;
                if self.hashes[first] != 0 {
                    for unit in 0..self.units as usize {
                        let hash = std::mem::take(&mut self.hashes[first + unit]);
                        if let Some(blocks) = self.cached.get_mut(&hash) {
                            blocks.retain(|e| e.0 != block);
                            if blocks.is_empty() {
                                self.cached.remove(&hash);
                            }
                        }
                    }
                    self.evictions += 1;
                }
                self.ref_cnt[block as usize] = 1;
                out.push(block);
            }
        }

        fn cache_unit(&mut self, block: u32, unit: u32, hash: u64) {
            let hash = hash.max(1);
            let slot = (block * self.units + unit) as usize;
            if self.hashes[slot] == 0 {
                self.hashes[slot] = hash;
                self.cached.entry(hash).or_default().push((block, unit));
            }
        }

        fn touch(&mut self, block: u32) {
            if self.ref_cnt[block as usize] == 0 {
                let at = self.queue.iter().position(|b| *b == block).unwrap();
                self.queue.remove(at);
            }
            self.ref_cnt[block as usize] += 1;
        }

        fn release(&mut self, blocks: &[u32]) {
            for &block in blocks.iter().rev() {
                self.ref_cnt[block as usize] -= 1;
                if self.ref_cnt[block as usize] == 0 {
                    let hashed = self.hashes[(block * self.units) as usize] != 0;
                    if !hashed && self.unhashed_to_front {
                        self.queue.push_front(block);
                    } else {
                        self.queue.push_back(block);
                    }
                }
            }
        }
    }

    /// One step of a random workload on the pool: (kind, a, b).
    /// kind 0 allocates a new request of `a % 6 + 1` blocks, 1 caches unit
    /// `b` of one held block with a hash from a small set (so hashes
    /// repeat), 2 starts a request on a prefix hit (touch), 3 releases a
    /// request.
    type Op = (u8, u32, u32);

    fn compare(num_blocks: u32, units: u32, unhashed_to_front: bool, ops: &[Op]) {
        let mut lazy = BlockPool::with_units(num_blocks, units, unhashed_to_front);
        let mut eager = Eager::new(num_blocks, units, unhashed_to_front);
        let mut requests: Vec<Vec<u32>> = Vec::new();
        for (step, &(kind, a, b)) in ops.iter().enumerate() {
            match kind {
                0 => {
                    let count = a % 6 + 1;
                    if count <= eager.queue.len() as u32 {
                        let (mut x, mut y) = (Vec::new(), Vec::new());
                        lazy.allocate(count, &mut x);
                        eager.allocate(count, &mut y);
                        assert_eq!(x, y, "step {step}: blocks handed out");
                        requests.push(x);
                    }
                }
                1 if !requests.is_empty() => {
                    let request = &requests[a as usize % requests.len()];
                    let block = request[b as usize % request.len()];
                    let unit = b % units;
                    let hash = u64::from(a % 23);
                    lazy.cache_unit(block, unit, hash);
                    eager.cache_unit(block, unit, hash);
                }
                2 => {
                    let hash = u64::from(a % 23).max(1);
                    let hit = lazy.lookup_unit(hash);
                    assert_eq!(
                        hit,
                        eager.cached.get(&hash).map(|b| b[0]),
                        "step {step}: lookup"
                    );
                    if let Some((block, _)) = hit {
                        assert_eq!(lazy.is_free(block), eager.ref_cnt[block as usize] == 0);
                        lazy.touch(block);
                        eager.touch(block);
                        requests.push(vec![block]);
                    }
                }
                3 if !requests.is_empty() => {
                    let request = requests.swap_remove(a as usize % requests.len());
                    lazy.release(&request);
                    eager.release(&request);
                }
                _ => {}
            }
            assert_eq!(
                lazy.free_order(),
                eager.queue.iter().copied().collect::<Vec<_>>(),
                "step {step}: free queue"
            );
            assert_eq!(lazy.free(), eager.queue.len() as u32);
            assert_eq!(lazy.evictions, eager.evictions);
            assert_eq!(
                lazy.referenced(),
                eager.ref_cnt.iter().map(|r| u64::from(*r)).sum::<u64>()
            );
            assert_eq!(lazy.recount_references(), lazy.referenced());
            for block in 0..num_blocks.max(1) {
                assert_eq!(lazy.ref_count(block), eager.ref_cnt[block as usize]);
            }
            lazy.check().unwrap_or_else(|e| panic!("step {step}: {e}"));
        }
        for hash in 1..23 {
            assert_eq!(
                lazy.lookup_unit(hash),
                eager.cached.get(&hash).map(|b| b[0])
            );
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        /// The lazily materialised pool hands out the same block ids in the
        /// same order as the eager queue, and keeps the same queue, hits
        /// and evictions, under random allocate/cache/touch/release.
        #[test]
        fn the_lazy_pool_hands_out_blocks_in_the_eager_order(
            num_blocks in prop_oneof![Just(0u32), Just(1), Just(2), 3u32..40],
            units in prop_oneof![Just(1u32), Just(4)],
            unhashed_to_front in any::<bool>(),
            ops in prop::collection::vec((0u8..4, 0u32..1000, 0u32..1000), 0..200),
        ) {
            compare(num_blocks, units, unhashed_to_front, &ops);
        }
    }

    /// A request of the chain workload: its hashes (cumulative, so a
    /// shared prefix is a shared run of hashes), its blocks, how many of
    /// them it has cached.
    struct ChainRequest {
        hashes: Vec<u64>,
        blocks: Vec<u32>,
        cached: usize,
    }

    /// The hashes of chain `a` of length `len`: each position's hash mixes
    /// the one before with a token from a three-letter alphabet picked by
    /// `a`'s digits, so chains share prefixes and part at many points.
    fn chain(a: u32, len: usize) -> Vec<u64> {
        let mut digits = a;
        let mut h = 0x9e37_79b9_7f4a_7c15u64;
        (0..len)
            .map(|_| {
                let token = u64::from(digits % 3);
                digits /= 3;
                h = (h ^ token).wrapping_mul(0x0100_0000_01b3).rotate_left(17) | 1;
                h
            })
            .collect()
    }

    /// The chain index ([`super::super::chains::ChainIndex`]) against
    /// vLLM's `hash → blocks` table, on request-shaped work: prefix hits
    /// touched, new blocks allocated (evicting), blocks cached a few at a
    /// time after the one before (so two requests can cache the same
    /// hashes: duplicates), requests released tail first.
    fn compare_chains(num_blocks: u32, unhashed_to_front: bool, ops: &[Op]) {
        let mut chains = BlockPool::new(num_blocks, unhashed_to_front).index_by_chains();
        let mut table = BlockPool::new(num_blocks, unhashed_to_front);
        assert!(chains.by_chains() && !table.by_chains());
        let mut requests: Vec<ChainRequest> = Vec::new();
        for (step, &(kind, a, b)) in ops.iter().enumerate() {
            match kind % 3 {
                0 => {
                    let hashes = chain(a % 729, (b % 8 + 1) as usize);
                    let (mut x, mut y) = (Vec::new(), Vec::new());
                    let hit = chains.cached_prefix(&hashes, hashes.len());
                    chains.hit_blocks(&hashes, 1, hit, |r| x.extend_from_slice(r));
                    // The table as vLLM walks it: hash by hash to the first miss.
                    y.extend(hashes.iter().map_while(|&h| table.lookup(h)));
                    let hit_t = y.len();
                    assert_eq!((hit, &x), (hit_t, &y), "step {step}: hit");
                    let free_hits = x.iter().filter(|&&block| chains.is_free(block)).count() as u32;
                    let new = (hashes.len() - hit) as u32;
                    if new + free_hits > chains.free() {
                        continue;
                    }
                    for &block in &x {
                        chains.touch(block);
                        table.touch(block);
                    }
                    let (mut p, mut q) = (x.clone(), y);
                    chains.allocate(new, &mut p);
                    table.allocate(new, &mut q);
                    assert_eq!(p, q, "step {step}: blocks handed out");
                    requests.push(ChainRequest {
                        hashes,
                        blocks: p,
                        cached: hit,
                    });
                }
                1 if !requests.is_empty() => {
                    let i = a as usize % requests.len();
                    let r = &mut requests[i];
                    let upto = (r.cached + (b % 3 + 1) as usize).min(r.hashes.len());
                    for u in r.cached..upto {
                        let parent = u.checked_sub(1).map(|p| r.blocks[p]);
                        chains.cache_next(r.blocks[u], r.hashes[u], parent);
                        table.cache_unit(r.blocks[u], 0, r.hashes[u]);
                    }
                    r.cached = upto;
                }
                2 if !requests.is_empty() => {
                    let r = requests.swap_remove(a as usize % requests.len());
                    chains.release(&r.blocks);
                    table.release(&r.blocks);
                }
                _ => {}
            }
            assert_eq!(
                chains.free_order(),
                table.free_order(),
                "step {step}: free queue"
            );
            assert_eq!(chains.evictions, table.evictions, "step {step}: evictions");
            chains
                .check()
                .unwrap_or_else(|e| panic!("step {step}: {e}"));
        }
        // Every chain's hit, and every hash's block, agree at the end.
        for a in 0..729 {
            let hashes = chain(a, 8);
            let (mut x, mut y) = (Vec::new(), Vec::new());
            let hit = chains.cached_prefix(&hashes, 8);
            chains.hit_blocks(&hashes, 1, hit, |r| x.extend_from_slice(r));
            y.extend(hashes.iter().map_while(|&h| table.lookup(h)));
            assert_eq!(x, y, "chain {a}");
            for &h in &hashes {
                assert_eq!(chains.lookup(h), table.lookup(h), "hash {h:x}");
            }
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        /// The pool indexed by chains finds, touches, hands out and evicts
        /// exactly as the pool indexed by vLLM's table, duplicates, partial
        /// caching and tight pools included.
        #[test]
        fn the_chain_index_answers_as_the_hash_table(
            num_blocks in prop_oneof![Just(1u32), Just(2), 3u32..24, 24u32..80],
            unhashed_to_front in any::<bool>(),
            ops in prop::collection::vec((0u8..3, 0u32..100_000, 0u32..1000), 0..300),
        ) {
            compare_chains(num_blocks, unhashed_to_front, &ops);
        }
    }

    #[test]
    fn the_check_sees_slot_tables_out_of_step_with_the_blocks_handed_out() {
        // Each table on its own: the blocks' metadata, then the unit hashes.
        let mut pool = BlockPool::with_units(8, 2, false);
        let mut out = Vec::new();
        pool.allocate(3, &mut out);
        pool.check().expect("a fresh pool is sound");
        let mut extra_meta = pool.clone();
        extra_meta.meta.push(Default::default());
        assert!(extra_meta.check().unwrap_err().contains("block slots"));
        let mut extra_hash = pool.clone();
        extra_hash.unit_hash.push(0);
        assert!(extra_hash.check().unwrap_err().contains("block slots"));
    }

    #[test]
    fn untouched_blocks_stay_between_front_pushes_and_tail_releases() {
        // Freed unhashed blocks go before the never-used range, freed
        // hashed ones after it, exactly where vLLM's queue has them.
        let mut pool = BlockPool::new(8, true);
        let mut a = Vec::new();
        pool.allocate(3, &mut a);
        assert_eq!(a, vec![1, 2, 3]);
        assert_eq!(pool.materialised(), 3);
        pool.cache(2, 42);
        pool.release(&a);
        assert_eq!(pool.free_order(), vec![1, 3, 4, 5, 6, 7, 2]);
        let mut b = Vec::new();
        pool.allocate(6, &mut b);
        assert_eq!(b, vec![1, 3, 4, 5, 6, 7]);
        assert_eq!(pool.materialised(), 7);
        assert_eq!(pool.free_order(), vec![2]);
        assert!(pool.check().is_ok());
        pool.release(&b);
        assert_eq!(pool.free_order(), vec![1, 3, 4, 5, 6, 7, 2]);
        assert!(pool.check().is_ok());
    }

    #[test]
    fn a_large_pool_costs_what_it_uses() {
        // An H200's worth of blocks: only the blocks handed out get slots.
        let mut pool = BlockPool::with_units(4_000_000, 8, false);
        let mut a = Vec::new();
        pool.allocate(10, &mut a);
        assert_eq!(pool.usable(), 3_999_999);
        assert_eq!(pool.free(), 3_999_989);
        assert_eq!(pool.materialised(), 10);
        assert!(pool.meta.len() <= 11 && pool.unit_hash.len() <= 88);
        assert!(pool.is_free(3_999_999) && !pool.is_free(10));
    }

    #[test]
    fn allocation_pops_the_head_and_release_goes_to_the_tail_in_reverse() {
        let mut pool = BlockPool::new(6, false);
        assert_eq!(pool.usable(), 5);
        let mut a = Vec::new();
        pool.allocate(3, &mut a);
        assert_eq!(a, vec![1, 2, 3]);
        for (i, block) in a.iter().enumerate() {
            pool.cache(*block, 100 + i as u64);
        }
        pool.release(&a);
        // Released tail first: 3, 2, 1 after the never-used 4, 5.
        assert_eq!(pool.free_order(), vec![4, 5, 3, 2, 1]);
        assert!(pool.check().is_ok());
        // Cached blocks stay hits until reused.
        assert_eq!(pool.lookup(100), Some(1));
        let mut b = Vec::new();
        pool.allocate(3, &mut b);
        assert_eq!(b, vec![4, 5, 3]);
        assert_eq!(pool.lookup(102), None, "reusing block 3 evicts its hash");
        assert_eq!(pool.lookup(101), Some(2));
        assert_eq!(pool.evictions, 1);
    }

    #[test]
    fn touching_a_free_cached_block_takes_it_out_of_the_queue() {
        let mut pool = BlockPool::new(4, false);
        let mut a = Vec::new();
        pool.allocate(1, &mut a);
        pool.cache(a[0], 7);
        pool.release(&a);
        assert_eq!(pool.free(), 3);
        pool.touch(1);
        assert_eq!(pool.free(), 2);
        assert_eq!(pool.ref_count(1), 1);
        pool.touch(1);
        assert_eq!(pool.ref_count(1), 2);
        pool.release(&[1]);
        assert_eq!(pool.free(), 2, "still referenced once");
        pool.release(&[1]);
        assert_eq!(pool.free(), 3);
        assert!(pool.check().is_ok());
    }

    #[test]
    fn unhashed_blocks_go_to_the_front_when_the_release_says_so() {
        let mut pool = BlockPool::new(5, true);
        let mut a = Vec::new();
        pool.allocate(2, &mut a);
        pool.cache(a[0], 1);
        pool.release(&a);
        // Block 2 has no hash: reused first. Block 1 is cached: tail.
        assert_eq!(pool.free_order(), vec![2, 3, 4, 1]);
    }

    /// Each hash keeps its blocks in caching order at scale: with
    /// thousands of blocks cached, four or five of each hash, each hash
    /// finds its first-cached block, then the next as blocks go, and the
    /// table and the duplicate lists empty as the last go.
    #[test]
    fn each_hash_keeps_its_first_cached_block_through_thousands() {
        let mut pool = BlockPool::new(3001, false);
        let mut blocks = Vec::new();
        pool.allocate(3000, &mut blocks);
        for (i, &block) in blocks.iter().enumerate() {
            pool.cache(block, 1 + i as u64 % 700);
        }
        pool.check().expect("a sound pool");
        for hash in 1..=700u64 {
            assert_eq!(pool.lookup(hash), Some(blocks[hash as usize - 1]));
        }
        // Free every block, first allocated first, then reuse the first
        // 700: each hash's first block is evicted and its second hits.
        for &block in &blocks {
            pool.release(&[block]);
        }
        let mut reused = Vec::new();
        pool.allocate(700, &mut reused);
        assert_eq!(reused, blocks[..700]);
        for hash in 1..=700u64 {
            assert_eq!(pool.lookup(hash), Some(blocks[699 + hash as usize]));
        }
        assert_eq!(pool.evictions, 700);
        let mut rest = Vec::new();
        pool.allocate(2300, &mut rest);
        assert_eq!(pool.cached.len(), 0);
        assert!(pool.dups.is_empty());
        assert!((1..=700).all(|h| pool.lookup(h).is_none()));
        pool.check().expect("a sound pool");
    }

    /// vLLM keeps every block of a hash (`BlockHashToBlockMap`): when the
    /// first is evicted, the second still hits; when the second goes, the
    /// first stays the target.
    #[test]
    fn a_duplicate_block_stays_a_hit_when_the_first_is_evicted() {
        let mut pool = BlockPool::new(4, false);
        let mut a = Vec::new();
        pool.allocate(2, &mut a);
        pool.cache(a[0], 7);
        pool.cache(a[1], 7);
        assert_eq!(pool.lookup(7), Some(a[0]));
        // Free the first alone: it heads the free queue and is reused.
        pool.release(&a[..1]);
        let mut b = Vec::new();
        pool.allocate(1, &mut b);
        assert_eq!(b, vec![3], "the untouched block comes first");
        pool.allocate(1, &mut b);
        assert_eq!(b[1], a[0], "then the freed cached block, evicted");
        assert_eq!(pool.lookup(7), Some(a[1]), "the duplicate still hits");
        assert!(pool.check().is_ok());
    }
}
