//! LMCache as vLLM runs it through `LMCacheConnectorV1` with LMCache's
//! local CPU backend: KV kept in host memory in chunks of `chunk_size`
//! tokens, looked up and loaded when a request is admitted, stored as a
//! prefill computes it.
//!
//! Mirrors, in vLLM 0.31.0,
//! `vllm/distributed/kv_transfer/kv_connector/v1/lmcache_integration/vllm_v1_adapter.py`
//! (the same adapter LMCache ships as `lmcache/integration/vllm/vllm_v1_adapter.py`),
//! and in LMCache `lmcache/v1/storage_backend/local_cpu_backend.py` with
//! `cache_policy/lru.py`:
//!
//! * **Lookup** (`get_num_new_matched_tokens`): the prompt's chunks are
//!   looked up from the first one on and the hit is the run of chunks
//!   found, in whole chunks (`save_unfull_chunk` is false by default, so no
//!   partial chunk is ever stored). The hit tokens beyond vLLM's own prefix
//!   hit are loaded, less one when the hit covers every token ("we need to
//!   recompute the last token"). The chunks a lookup finds move to the most
//!   recently used end, the first chunk last (`touch_cache` walks the
//!   request's hits in reverse).
//! * **Load**: not asynchronous (`get_num_new_matched_tokens` reports
//!   `load_kv_async = False`): `start_load_kv` retrieves before the forward
//!   pass of the step that schedules the request, so the copy lengthens
//!   that step (`use_layerwise` is off by default). It retrieves from the
//!   chunk holding vLLM's hit boundary on (`token_mask[:vllm_cached_tokens
//!   // chunk_size * chunk_size] = False`).
//! * **Store** (`ReqMeta.from_request_tracker`, `wait_for_save`): after the
//!   forward pass, blocking, the request's tokens computed so far are
//!   stored in whole chunks from the last saved chunk on; a step that has
//!   not reached the next chunk boundary stores nothing, and decode steps
//!   (a cached request scheduled one token: `is_decode_phase`) store
//!   nothing (`save_decode_cache` false). A new request starts saved up to
//!   its LMCache hit (`num_saved_tokens = lmcache_cached_tokens`).
//! * **Eviction**: a chunk already held is not stored again and keeps its
//!   place (`submit_put_task` returns early); a new chunk goes in as the
//!   most recently used and the least recently used ones leave while the
//!   backend is over its capacity (`LRUCachePolicy.get_evict_candidates`).
//!
//! pdsim inserts a step's chunks when the step completes, as the worker's
//! `wait_for_save` does at the end of the forward pass, and keys a chunk by
//! the prompt's block hash at its last token, the prefix hash LMCache's
//! token database computes chunk by chunk. Chunks pinned by a lookup for
//! the one step until `lookup_unpin` are not kept out of eviction [assumed:
//! a pin lasts one step and eviction needs the backend full in that step].

use pdsim_core::lru::Lru;

/// LMCache's settings for one engine, resolved from the deployment and the
/// rules pack.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LmCacheConfig {
    /// `chunk_size` (`LMCACHE_CHUNK_SIZE`), tokens per chunk.
    pub chunk_tokens: u32,
    /// The local CPU backend's capacity in chunks (`max_local_cpu_size`
    /// over the bytes of one chunk).
    pub capacity_chunks: u64,
}

/// The local CPU backend's chunks.
#[derive(Clone, Debug)]
pub(crate) struct LmCacheTier {
    pub config: LmCacheConfig,
    entries: Lru,
    pub stores: u64,
    pub evictions: u64,
}

impl LmCacheTier {
    pub fn new(config: LmCacheConfig) -> LmCacheTier {
        LmCacheTier {
            config,
            entries: Lru::default(),
            stores: 0,
            evictions: 0,
        }
    }

    /// The run of chunks found from the first on, touching the ones found
    /// in reverse so that the first ends most recently used.
    pub fn lookup(&mut self, keys: &[u64]) -> u32 {
        let found = keys
            .iter()
            .take_while(|k| self.entries.contains(**k))
            .count();
        for key in keys[..found].iter().rev() {
            self.entries.touch(*key);
        }
        found as u32
    }

    pub fn contains(&self, key: u64) -> bool {
        self.entries.contains(key)
    }

    /// Puts a chunk: a held one is left where it is; a new one goes in most
    /// recently used and the least recently used leave while over capacity.
    pub fn put(&mut self, key: u64) {
        if self.config.capacity_chunks == 0 || self.entries.contains(key) {
            return;
        }
        self.entries.touch(key);
        self.stores += 1;
        while self.entries.len() as u64 > self.config.capacity_chunks {
            if self.entries.pop_lru().is_none() {
                break;
            }
            self.evictions += 1;
        }
    }
}

/// Where a request stands with LMCache (the adapter's `RequestTracker`).
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Tracker {
    /// `num_saved_tokens`.
    pub saved: u32,
    /// `is_decode_phase`.
    pub decode: bool,
    /// Scheduled for the first time since its admission
    /// (`scheduled_new_reqs`): its tracker is new this step.
    pub new: bool,
}

impl Tracker {
    /// The chunks a step stores, as `from_request_tracker` decides: `input`
    /// is the request's tokens computed through this step. Returns the
    /// first and one past the last chunk index to store and updates the
    /// tracker.
    pub fn save(&mut self, input: u32, scheduled: u32, chunk: u32) -> (u32, u32) {
        let chunk = chunk.max(1);
        // A new tracker never starts in the decode phase; a cached request
        // scheduled one token enters it for good.
        let new = std::mem::take(&mut self.new);
        if !new && scheduled == 1 {
            self.decode = true;
        }
        let boundary = (self.saved / chunk + 1) * chunk;
        let skip = (self.saved > 0 && input < boundary) || self.decode;
        if skip {
            return (0, 0);
        }
        let to_save = input / chunk * chunk;
        let from = self.saved / chunk;
        self.saved = to_save;
        (from, to_save / chunk)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tier(capacity: u64) -> LmCacheTier {
        LmCacheTier::new(LmCacheConfig {
            chunk_tokens: 256,
            capacity_chunks: capacity,
        })
    }

    #[test]
    fn a_lookup_counts_the_run_from_the_first_chunk() {
        let mut t = tier(8);
        for k in [1, 2, 4] {
            t.put(k);
        }
        assert_eq!(t.lookup(&[1, 2, 3, 4]), 2);
        assert_eq!(t.lookup(&[3, 1]), 0);
    }

    #[test]
    fn a_lookup_leaves_the_first_chunk_most_recently_used() {
        let mut t = tier(3);
        for k in [1, 2, 3] {
            t.put(k);
        }
        // 1 and 2 are touched, 2 first: 3 is now the least recently used.
        assert_eq!(t.lookup(&[1, 2]), 2);
        t.put(4);
        assert!(!t.contains(3));
        t.put(5);
        assert!(!t.contains(2), "2 was touched before 1");
        assert!(t.contains(1));
        assert_eq!((t.stores, t.evictions), (5, 2));
    }

    #[test]
    fn a_held_chunk_is_not_stored_again_nor_refreshed() {
        let mut t = tier(2);
        t.put(1);
        t.put(2);
        t.put(1);
        t.put(3);
        assert!(!t.contains(1), "putting 1 again did not make it recent");
        assert_eq!(t.stores, 3);
    }

    #[test]
    fn no_capacity_stores_nothing() {
        let mut t = tier(0);
        t.put(1);
        assert_eq!((t.stores, t.contains(1)), (0, false));
    }

    #[test]
    fn a_prefill_stores_whole_chunks_as_it_reaches_them() {
        let mut tr = Tracker {
            new: true,
            ..Tracker::default()
        };
        // 512-token chunks of a 1,300-token prompt, 512 tokens a step.
        assert_eq!(tr.save(512, 512, 256), (0, 2));
        assert_eq!(tr.save(1024, 512, 256), (2, 4));
        // The last chunk is partial: whole chunks only.
        assert_eq!(tr.save(1300, 276, 256), (4, 5));
        // Decode steps store nothing, even past a chunk boundary.
        assert_eq!(tr.save(1301, 1, 256), (0, 0));
        assert_eq!(tr.save(1600, 1, 256), (0, 0));
    }

    #[test]
    fn a_step_short_of_the_next_boundary_stores_nothing() {
        let mut tr = Tracker {
            saved: 256,
            new: true,
            ..Tracker::default()
        };
        assert_eq!(tr.save(400, 144, 256), (0, 0));
        assert_eq!(tr.save(512, 112, 256), (1, 2));
        // A fresh tracker with nothing saved stores what it has, even none.
        let mut fresh = Tracker {
            new: true,
            ..Tracker::default()
        };
        assert_eq!(fresh.save(100, 100, 256), (0, 0));
        assert_eq!(fresh.save(300, 200, 256), (0, 1));
    }

    #[test]
    fn a_new_request_of_one_token_is_not_in_the_decode_phase() {
        let mut tr = Tracker {
            saved: 0,
            new: true,
            ..Tracker::default()
        };
        assert_eq!(tr.save(512, 1, 256), (0, 2));
        assert!(!tr.decode);
    }
}
