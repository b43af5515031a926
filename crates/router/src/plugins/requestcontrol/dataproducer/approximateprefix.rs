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
use pdsim_core::Prompt;
use rustc_hash::FxHashMap;
use serde_yaml::Value;
use std::collections::VecDeque;

/// The approx-prefix-cache-producer's per-endpoint index: an LRU of block
/// hashes, capacity fixed at the first insert (`approximateprefix`, which
/// keeps one fixed-size LRU cache per server).
#[derive(Clone, Debug, Default)]
pub(crate) struct PrefixIndex {
    lrus: Vec<Lru>,
    /// With at most 64 endpoints: the endpoints whose LRU holds each hash,
    /// one bit per endpoint, kept in step with the LRUs. The Go indexer
    /// answers a block with its set of servers in one lookup
    /// (`Get` in `approximateprefix/indexer.go`); this does the same, where probing every endpoint's
    /// LRU for every block cost one cache miss per endpoint. Looked up,
    /// never iterated.
    holders: Option<FxHashMap<u64, u64>>,
}

impl PrefixIndex {
    pub(crate) fn new(endpoints: usize) -> PrefixIndex {
        PrefixIndex {
            lrus: vec![Lru::default(); endpoints],
            holders: (endpoints <= 64).then(FxHashMap::default),
        }
    }

    #[cfg(test)]
    fn holds(&self, endpoint: usize, hash: u64) -> bool {
        self.lrus[endpoint].contains(hash)
    }

    /// Counts `hash` in `matches` for each endpoint holding it; whether
    /// any does (`matchLongestPrefix` in `approximateprefix/plugin.go`, over
    /// the server set `indexer.Get` in `indexer.go` returns).
    /// One lookup of the holder bits, or past 64 endpoints a probe of each
    /// endpoint's LRU.
    fn count_holders(&self, hash: u64, matches: &mut [u32]) -> bool {
        if let Some(holders) = &self.holders {
            let mut bits = holders.get(&hash).copied().unwrap_or(0);
            let any = bits != 0;
            while bits != 0 {
                matches[bits.trailing_zeros() as usize] += 1;
                bits &= bits - 1;
            }
            return any;
        }
        let mut any = false;
        for (e, m) in matches.iter_mut().enumerate() {
            if self.lrus[e].contains(hash) {
                *m += 1;
                any = true;
            }
        }
        any
    }

    /// The endpoints holding `hash`, one bit each, when the index keeps
    /// them (at most 64 endpoints); `Some(0)` when none does.
    #[cfg(test)]
    fn holders_of(&self, hash: u64) -> Option<u64> {
        self.holders
            .as_ref()
            .map(|h| h.get(&hash).copied().unwrap_or(0))
    }

    pub(crate) fn add(&mut self, endpoint: usize, hash: u64, capacity: u64) {
        let (added, evicted) = self.lrus[endpoint].touch(hash, capacity);
        if let Some(holders) = &mut self.holders {
            let bit = 1u64 << endpoint;
            if added {
                *holders.entry(hash).or_insert(0) |= bit;
            }
            if let Some(old) = evicted
                && let std::collections::hash_map::Entry::Occupied(mut held) = holders.entry(old)
            {
                *held.get_mut() &= !bit;
                if *held.get() == 0 {
                    held.remove();
                }
            }
        }
    }
}

/// One endpoint's LRU of block hashes, its capacity fixed by the first
/// insert (the producer sizes each server's cache once).
#[derive(Clone, Debug, Default)]
pub(crate) struct Lru {
    capacity: Option<u64>,
    lru: pdsim_core::lru::Lru,
}

impl Lru {
    /// Adds `hash` as the most recently used entry, evicting the least
    /// recently used one when the cache is full; whether `hash` was new,
    /// and the hash evicted.
    pub(crate) fn touch(&mut self, hash: u64, capacity: u64) -> (bool, Option<u64>) {
        let cap = *self.capacity.get_or_insert(capacity.max(1));
        // A new hash goes in as the most recently used, so making room
        // after it never evicts it.
        let added = self.lru.touch(hash);
        let evicted = if added && self.lru.len() as u64 > cap {
            self.lru.pop_lru().map(|(old, ())| old)
        } else {
            None
        };
        (added, evicted)
    }

    fn contains(&self, hash: u64) -> bool {
        self.lru.contains(hash)
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.lru.len()
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
    use super::{Approx, ApproxPrefixProducer, Lru, PrefixIndex};
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
                let entry = index.holders.as_ref().unwrap().contains_key(&hash);
                proptest::prop_assert_eq!(entry, held != 0);
            }
        }
    }

    #[test]
    fn past_64_endpoints_the_index_probes_each_lru() {
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
        let mut lru = Lru::default();
        // The capacity is fixed by the first insert, as in the producer.
        lru.touch(1, 2);
        lru.touch(2, 99);
        lru.touch(1, 99); // 1 is now the most recent
        lru.touch(3, 99); // evicts 2
        assert!(lru.contains(1) && lru.contains(3));
        assert!(!lru.contains(2));
        assert_eq!(lru.len(), 2);
        lru.touch(4, 99); // evicts 1
        assert!(!lru.contains(1));
        assert_eq!(lru.len(), 2);
    }
}
