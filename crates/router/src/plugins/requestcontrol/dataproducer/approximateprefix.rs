//! approx-prefix-cache-producer
//! (`requestcontrol/dataproducer/approximateprefix/plugin.go`): hashes each
//! prompt into blocks, counts per endpoint the leading blocks the EPP's own
//! index says it holds (the `PrefixCacheMatchInfo` the prefix consumers
//! read), and at PreRequest records the prompt's blocks on the endpoints
//! the request went to.

use super::prefixhash::block_hashes;
use crate::config::Plugin;
use crate::cycle::EndpointView;
use crate::plugins::param_f64;
use crate::plugins::{Checks, number};
use hashbrown::HashTable;
use hashbrown::hash_table::Entry;
use pdsim_core::Prompt;
use pdsim_core::lru::table_hash;
use serde_yaml::Value;
use std::collections::VecDeque;

/// The approx-prefix-cache-producer's index: per endpoint an LRU of block
/// hashes, capacity fixed at the first insert, and per hash the endpoints
/// holding it (`approximateprefix/indexer.go`, which keeps one fixed-size
/// LRU cache per server and a map from each block hash to its set of
/// servers, updated by the LRUs' eviction callbacks).
///
/// One table serves both: it maps a hash to its record, which chains the
/// LRU nodes of the endpoints holding it. Indexing a block costs one probe
/// of the table, and evicting one costs a probe only when no endpoint holds
/// its hash any more; with a table per endpoint LRU plus a holder map, a
/// new block cost four probes (its LRU's, the evicted hash's in that LRU,
/// the holder map's for each), each a likely cache miss in tables as large
/// as the endpoints' caches.
#[derive(Clone, Debug)]
pub(crate) struct PrefixIndex {
    /// The record of every hash some endpoint holds, hashed by its hash.
    table: HashTable<u32>,
    records: Vec<Record>,
    free_records: Vec<u32>,
    nodes: Vec<Node>,
    free_nodes: Vec<u32>,
    lrus: Vec<EndpointLru>,
    /// At most 64 endpoints: each record keeps its holders as bits too, so
    /// counting a block's holders loads nothing but the record. Past 64
    /// the holders are counted along the record's chain.
    bits: bool,
}

const NIL: u32 = u32::MAX;

/// Puts `item` in a free slot of `slab`, or at its end; its slot.
fn place<T>(slab: &mut Vec<T>, free: &mut Vec<u32>, item: T) -> u32 {
    match free.pop() {
        Some(slot) => {
            slab[slot as usize] = item;
            slot
        }
        None => {
            slab.push(item);
            (slab.len() - 1) as u32
        }
    }
}

/// A hash some endpoint holds.
#[derive(Clone, Debug)]
struct Record {
    hash: u64,
    /// With at most 64 endpoints: the holders, one bit each.
    bits: u64,
    /// The first node of the chain of its holders' nodes.
    first: u32,
}

/// One endpoint's entry for one hash: a node of the endpoint's LRU and of
/// the hash's chain of holders.
#[derive(Clone, Debug)]
struct Node {
    record: u32,
    endpoint: u32,
    newer: u32,
    older: u32,
    next_holder: u32,
    prev_holder: u32,
}

/// One endpoint's LRU, its capacity fixed by the first insert (the
/// producer sizes each server's cache once).
#[derive(Clone, Debug)]
struct EndpointLru {
    capacity: Option<u64>,
    len: u64,
    newest: u32,
    oldest: u32,
}

impl PrefixIndex {
    pub(crate) fn new(endpoints: usize) -> PrefixIndex {
        PrefixIndex {
            table: HashTable::new(),
            records: Vec::new(),
            free_records: Vec::new(),
            nodes: Vec::new(),
            free_nodes: Vec::new(),
            lrus: vec![
                EndpointLru {
                    capacity: None,
                    len: 0,
                    newest: NIL,
                    oldest: NIL,
                };
                endpoints
            ],
            bits: endpoints <= 64,
        }
    }

    /// The record of `hash`, when some endpoint holds it.
    fn find(&self, hash: u64) -> Option<u32> {
        let records = &self.records;
        self.table
            .find(table_hash(hash), |&r| records[r as usize].hash == hash)
            .copied()
    }

    /// `endpoint`'s node for `record`, when it holds the hash.
    fn node_of(&self, record: u32, endpoint: usize) -> Option<u32> {
        let r = &self.records[record as usize];
        if self.bits && r.bits & (1u64 << endpoint) == 0 {
            return None;
        }
        let mut n = r.first;
        while n != NIL {
            let node = &self.nodes[n as usize];
            if node.endpoint as usize == endpoint {
                return Some(n);
            }
            n = node.next_holder;
        }
        None
    }

    #[cfg(test)]
    fn holds(&self, endpoint: usize, hash: u64) -> bool {
        self.find(hash)
            .is_some_and(|r| self.node_of(r, endpoint).is_some())
    }

    /// Counts `hash` in `matches` for each endpoint holding it; whether
    /// any does (`matchLongestPrefix` in `approximateprefix/plugin.go`, over
    /// the server set `indexer.Get` in `indexer.go` returns). A record
    /// exists only while some endpoint holds its hash.
    fn count_holders(&self, hash: u64, matches: &mut [u32]) -> bool {
        let Some(record) = self.find(hash) else {
            return false;
        };
        let r = &self.records[record as usize];
        if self.bits {
            let mut bits = r.bits;
            while bits != 0 {
                matches[bits.trailing_zeros() as usize] += 1;
                bits &= bits - 1;
            }
        } else {
            let mut n = r.first;
            while n != NIL {
                let node = &self.nodes[n as usize];
                matches[node.endpoint as usize] += 1;
                n = node.next_holder;
            }
        }
        true
    }

    /// The endpoints holding `hash`, one bit each, when the index keeps
    /// them (at most 64 endpoints); `Some(0)` when none does.
    #[cfg(test)]
    fn holders_of(&self, hash: u64) -> Option<u64> {
        self.bits
            .then(|| self.find(hash).map_or(0, |r| self.records[r as usize].bits))
    }

    /// Makes `hash` the most recently used entry of `endpoint`'s LRU,
    /// evicting its least recently used entry when the LRU is over its
    /// capacity (fixed by the endpoint's first insert at `capacity`).
    pub(crate) fn add(&mut self, endpoint: usize, hash: u64, capacity: u64) {
        let cap = *self.lrus[endpoint].capacity.get_or_insert(capacity.max(1));
        let records = &self.records;
        let record = match self.table.entry(
            table_hash(hash),
            |&r| records[r as usize].hash == hash,
            |&r| table_hash(records[r as usize].hash),
        ) {
            Entry::Occupied(held) => *held.get(),
            Entry::Vacant(vacant) => {
                let fresh = Record {
                    hash,
                    bits: 0,
                    first: NIL,
                };
                let r = place(&mut self.records, &mut self.free_records, fresh);
                vacant.insert(r);
                r
            }
        };
        if let Some(n) = self.node_of(record, endpoint) {
            self.unlink_lru(n);
            self.push_newest(n);
            return;
        }
        // A new entry goes in as the most recently used, so making room
        // after it never evicts it.
        let fresh = Node {
            record,
            endpoint: endpoint as u32,
            newer: NIL,
            older: NIL,
            next_holder: self.records[record as usize].first,
            prev_holder: NIL,
        };
        let n = place(&mut self.nodes, &mut self.free_nodes, fresh);
        let r = &mut self.records[record as usize];
        if r.first != NIL {
            self.nodes[r.first as usize].prev_holder = n;
        }
        r.first = n;
        if self.bits {
            r.bits |= 1u64 << endpoint;
        }
        self.push_newest(n);
        self.lrus[endpoint].len += 1;
        if self.lrus[endpoint].len > cap {
            let oldest = self.lrus[endpoint].oldest;
            self.evict(oldest);
        }
    }

    /// Takes node `n` out of its endpoint's LRU and its hash's holders,
    /// dropping the hash's record when no endpoint holds it any more.
    fn evict(&mut self, n: u32) {
        self.unlink_lru(n);
        let Node {
            record,
            endpoint,
            next_holder,
            prev_holder,
            ..
        } = self.nodes[n as usize];
        self.lrus[endpoint as usize].len -= 1;
        match prev_holder {
            NIL => self.records[record as usize].first = next_holder,
            p => self.nodes[p as usize].next_holder = next_holder,
        }
        if next_holder != NIL {
            self.nodes[next_holder as usize].prev_holder = prev_holder;
        }
        self.free_nodes.push(n);
        let r = &mut self.records[record as usize];
        if self.bits {
            r.bits &= !(1u64 << endpoint);
        }
        if r.first == NIL {
            // Found by its record number: no other record is loaded.
            if let Ok(found) = self
                .table
                .find_entry(table_hash(r.hash), |&held| held == record)
            {
                found.remove();
            }
            self.free_records.push(record);
        }
    }

    fn unlink_lru(&mut self, n: u32) {
        let (endpoint, newer, older) = {
            let node = &self.nodes[n as usize];
            (node.endpoint as usize, node.newer, node.older)
        };
        match newer {
            NIL => self.lrus[endpoint].newest = older,
            m => self.nodes[m as usize].older = older,
        }
        match older {
            NIL => self.lrus[endpoint].oldest = newer,
            o => self.nodes[o as usize].newer = newer,
        }
    }

    fn push_newest(&mut self, n: u32) {
        let endpoint = self.nodes[n as usize].endpoint as usize;
        let lru = &mut self.lrus[endpoint];
        let head = lru.newest;
        lru.newest = n;
        if lru.oldest == NIL {
            lru.oldest = n;
        }
        if head != NIL {
            self.nodes[head as usize].newer = n;
        }
        let node = &mut self.nodes[n as usize];
        node.newer = NIL;
        node.older = head;
    }

    #[cfg(test)]
    fn len(&self, endpoint: usize) -> u64 {
        self.lrus[endpoint].len
    }
}

/// The approx producer's settings.
#[derive(Clone, Debug)]
pub(crate) struct Approx {
    auto_tune: bool,
    pub(crate) block_size_tokens: u32,
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
    pub(crate) fn block_size(&self, endpoints: &[EndpointView]) -> u32 {
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
    pub(crate) fn max_blocks(&self, block: u32) -> usize {
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

/// The producer: its settings and its index.
#[derive(Clone, Debug)]
pub(crate) struct ApproxPrefixProducer {
    pub(crate) settings: Approx,
    index: PrefixIndex,
}

impl ApproxPrefixProducer {
    /// The producer `plugin` configures, or the one the EPP creates with
    /// its defaults for a consumer (`None`), over `endpoints` endpoints.
    pub fn new(producer: Option<&Plugin>, endpoints: usize) -> ApproxPrefixProducer {
        let get = |k: &str| producer.and_then(|p| param_f64(p, k));
        // The deprecated `blockSize` is taken as `blockSizeTokens` when
        // that is left at its default of 16 (`ApproxPrefixCacheFactory`,
        // `approximateprefix/plugin.go`; the default in `types.go`).
        let mut block_size_tokens =
            get("blockSizeTokens").filter(|v| *v > 0.0).unwrap_or(16.0) as u32;
        if let Some(deprecated) = get("blockSize").filter(|v| *v > 0.0)
            && block_size_tokens == 16
        {
            block_size_tokens = deprecated as u32;
        }
        let max_prefix_tokens = get("maxPrefixTokensToMatch").unwrap_or(131_072.0).max(0.0) as u64;
        let max_prefix_blocks = get("maxPrefixBlocksToMatch").unwrap_or(2048.0).max(0.0) as u64;
        let settings = Approx {
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
        };
        ApproxPrefixProducer {
            settings,
            index: PrefixIndex::new(endpoints),
        }
    }

    /// `Produce`: hash the prompt at the block size `GetBlockSize` gives,
    /// up to the prefix cap, into `hashes`, then count in `matches`, per
    /// endpoint, the leading blocks it holds, stopping at the first block
    /// no endpoint holds. Returns the block size used. A trailing partial
    /// block is hashed too ([`block_hashes`]): it counts in the match
    /// info's total, matches only where a prompt with the same last tokens
    /// was indexed, and is indexed at PreRequest.
    pub fn produce(
        &self,
        prompt: &Prompt,
        endpoints: &[EndpointView],
        matches: &mut [u32],
        hashes: &mut VecDeque<u64>,
    ) -> u32 {
        let block = self.settings.block_size(endpoints);
        let prompt_hashes = block_hashes(prompt, block, self.settings.max_blocks(block));
        for hash in &prompt_hashes {
            if !self.index.count_holders(*hash, matches) {
                break;
            }
        }
        hashes.extend(prompt_hashes);
        block
    }

    /// PreRequest: index the prompt's blocks on each target (the primary
    /// one, then the `prefill` profile's), each endpoint's LRU sized by its
    /// scraped block count under autoTune.
    pub fn pre_request(
        &mut self,
        targets: &[usize],
        endpoints: &[EndpointView],
        hashes: &VecDeque<u64>,
    ) {
        let s = &self.settings;
        for &target in targets {
            let capacity = if s.auto_tune {
                endpoints[target]
                    .num_blocks
                    .filter(|n| *n > 0)
                    .unwrap_or(s.lru_capacity)
            } else {
                s.lru_capacity
            };
            for hash in hashes {
                self.index.add(target, *hash, capacity);
            }
        }
    }
}

/// `ApproxPrefixCacheFactory` and `newDataProducer`'s checks, over the
/// defaults (blockSizeTokens 16), a positive deprecated blockSize standing
/// in for a default one.
pub(crate) fn check(c: &mut Checks<'_>, parameters: &serde_yaml::Mapping) {
    let auto_tune = parameters
        .get("autoTune")
        .and_then(Value::as_bool)
        .unwrap_or(true);
    let mut block = number(parameters, "blockSizeTokens").unwrap_or(16.0);
    if let Some(deprecated) = number(parameters, "blockSize").filter(|v| *v > 0.0)
        && block == 16.0
    {
        block = deprecated;
    }
    if !auto_tune && block <= 0.0 {
        c.bad(
            "blockSizeTokens",
            "with autoTune false, blockSizeTokens must be above 0",
        );
    }
}

#[cfg(test)]
mod tests {
    use super::{Approx, ApproxPrefixProducer, PrefixIndex};
    use crate::cycle::EndpointView;
    use std::collections::VecDeque;

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
        // A scraped block size of 0 is no value (`> 0` in `GetBlockSize`):
        // blockSizeTokens stands.
        let configured = Approx {
            block_size_tokens: 128,
            ..approx
        };
        assert_eq!(configured.block_size(&[read(0)]), 128);
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
    fn each_endpoints_lru_is_sized_by_its_scraped_blocks_when_it_has_some() {
        // `PreRequest` in `approximateprefix/plugin.go`: under autoTune an
        // endpoint's capacity is its `CacheNumBlocks` when above 0, else
        // `lruCapacityPerServer`.
        let settings = Approx {
            auto_tune: true,
            block_size_tokens: 64,
            max_prefix_tokens: 0,
            max_prefix_blocks: 0,
            lru_capacity: 3,
        };
        let mut producer = ApproxPrefixProducer {
            settings,
            index: PrefixIndex::new(3),
        };
        let view = |blocks| EndpointView {
            num_blocks: blocks,
            ..Default::default()
        };
        let endpoints = [view(Some(2)), view(Some(0)), view(None)];
        let hashes: VecDeque<u64> = (1..=5).collect();
        producer.pre_request(&[0, 1, 2], &endpoints, &hashes);
        let held = |e: usize| (1..=5).filter(|h| producer.index.holds(e, *h)).count();
        assert_eq!((held(0), held(1), held(2)), (2, 3, 3));
    }

    proptest::proptest! {
        /// The per-hash holder bits follow the endpoints' LRUs through
        /// every insert and eviction: a hash's bits are exactly the
        /// endpoints whose LRU holds it, and a hash no LRU holds has no
        /// entry left.
        #[test]
        fn the_holder_bits_are_the_endpoints_whose_lru_holds_the_hash(
            adds in proptest::collection::vec((0usize..5, 0u64..30), 0..300),
        ) {
            let mut index = PrefixIndex::new(5);
            for (endpoint, hash) in adds {
                // Capacities 2..6, fixed by each endpoint's first insert.
                index.add(endpoint, hash, 2 + endpoint as u64);
            }
            for hash in 0..30 {
                let held: u64 = (0..5)
                    .filter(|e| index.holds(*e, hash))
                    .map(|e| 1u64 << e)
                    .sum();
                proptest::prop_assert_eq!(index.holders_of(hash), Some(held));
                proptest::prop_assert_eq!(index.find(hash).is_some(), held != 0);
            }
        }
    }

    proptest::proptest! {
        /// The index against the plainest model of the Go indexer: per
        /// endpoint a list of hashes, most recent first, cut at the
        /// capacity its first insert fixed. After every insert each
        /// endpoint holds exactly what its list holds, in any mix of
        /// shared and private hashes, with holder bits (5 endpoints) and
        /// along the chains (70).
        #[test]
        fn the_index_holds_what_per_endpoint_lrus_hold(
            wide in proptest::bool::ANY,
            adds in proptest::collection::vec((0usize..70, 0u64..40, 1u64..6), 0..400),
        ) {
            let endpoints = if wide { 70 } else { 5 };
            let mut index = PrefixIndex::new(endpoints);
            let mut model: Vec<(Option<u64>, VecDeque<u64>)> = vec![(None, VecDeque::new()); endpoints];
            for (endpoint, hash, capacity) in adds {
                let endpoint = endpoint % endpoints;
                index.add(endpoint, hash, capacity);
                let (cap, list) = &mut model[endpoint];
                let cap = *cap.get_or_insert(capacity);
                list.retain(|h| *h != hash);
                list.push_front(hash);
                list.truncate(cap as usize);
                for h in 0..40 {
                    let mut matches = vec![0u32; endpoints];
                    let any = index.count_holders(h, &mut matches);
                    for (e, (_, list)) in model.iter().enumerate() {
                        let held = list.contains(&h);
                        proptest::prop_assert_eq!(index.holds(e, h), held);
                        proptest::prop_assert_eq!(matches[e], u32::from(held));
                    }
                    proptest::prop_assert_eq!(any, matches.iter().any(|m| *m > 0));
                }
                proptest::prop_assert_eq!(index.len(endpoint), model[endpoint].1.len() as u64);
            }
        }
    }

    #[test]
    fn past_64_endpoints_the_holders_are_counted_along_the_chain() {
        let mut index = PrefixIndex::new(65);
        index.add(64, 7, 10);
        assert_eq!(index.holders_of(7), None);
        assert!(index.holds(64, 7) && !index.holds(0, 7));
        // Counting a block's holders adds one for each endpoint holding it,
        // on top of what earlier blocks counted.
        index.add(0, 7, 10);
        let mut matches = vec![0u32; 65];
        matches[0] = 2;
        assert!(index.count_holders(7, &mut matches));
        assert_eq!((matches[0], matches[1], matches[64]), (3, 0, 1));
        assert!(!index.count_holders(8, &mut matches));
        assert_eq!(matches.iter().sum::<u32>(), 4);
    }

    #[test]
    fn the_prefix_lru_evicts_the_least_recently_used_hash_at_capacity() {
        let mut index = PrefixIndex::new(2);
        // The capacity is fixed by the first insert, as in the producer.
        index.add(0, 1, 2);
        index.add(0, 2, 99);
        index.add(1, 2, 5); // another endpoint's LRU is its own
        index.add(0, 1, 99); // 1 is now the most recent
        index.add(0, 3, 99); // evicts 2
        assert!(index.holds(0, 1) && index.holds(0, 3));
        assert!(!index.holds(0, 2) && index.holds(1, 2));
        assert_eq!(index.len(0), 2);
        index.add(0, 4, 99); // evicts 1, whose record goes with it
        assert!(!index.holds(0, 1));
        assert_eq!(index.find(1), None);
        assert_eq!(index.len(0), 2);
    }
}
