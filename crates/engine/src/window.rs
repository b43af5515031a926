//! DeepSeek-V4.1's sliding-window groups and compressor ring in the KV
//! block pool, as vLLM 0.31.0 keeps them with `swa_bounded_replay` (its
//! default) and without it: `SlidingWindowManager` and `CircularBufferManager`
//! (`vllm/v1/core/single_type_kv_cache_manager.py`), the scheduler's
//! prefix replay (`Scheduler._mark_prefix_replay`,
//! `vllm/v1/core/sched/scheduler.py`) and the window spec's admission cap
//! (`SlidingWindowSpec.max_admission_blocks_per_request`,
//! `vllm/v1/kv_cache_interface.py`). The layout and its figures:
//! `research/deepseek-v4.1-in-vllm-0.31.0.md` sections 2 and 3.
//!
//! The model's KV cache groups share one block pool: the full group (the
//! compressed latents and indexer keys, the engine's ordinary blocks,
//! prefix-cached), `groups` window groups of `block_size`-token blocks
//! covering each request's last `window` tokens, and, when the model has
//! ratio-2 sources, a ring group holding one block a request. Under
//! bounded replay neither the window groups nor the ring take part in
//! prefix caching: a hit comes from the full group alone, a hit no longer
//! than the window is dropped, and a longer one recomputes its last
//! window (the window's KV is rebuilt; the full group's is reused).
//!
//! Without bounded replay the window groups are prefix-cached too
//! (`SlidingWindowManager`): a hit at a 128-token boundary needs, in every
//! window group, the blocks covering the window before it (`cdiv(window −
//! 1, block_size)` of them) still cached, and under vLLM's default
//! retention (`prefix_cache_retention_interval: 0`, `reachable_block_mask`)
//! a request keeps only the window tails ending at its prompt's replay
//! boundary and at the junction its hit pinned, so hits land there. The
//! window groups hash their own 32-token blocks.
//!
//! Every window group of a request allocates and frees the same positions
//! at the same moments, so a [`Lane`] keeps the positions once and
//! `groups` block ids for each. Positions below the window are null (freed
//! or never allocated), so a lane's held positions are one contiguous run.

use crate::kv::BlockPool;

/// What an engine's window side runs with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WindowConfig {
    /// Window groups (five of eight layers each for DeepSeek-V4.1 on
    /// Blackwell; `_get_packed_kv_cache_groups`, `vllm/v1/core/kv_cache_utils.py`).
    pub groups: u32,
    /// The sliding window, tokens (`sliding_window`, 128).
    pub window: u32,
    /// Tokens a window block holds (32).
    pub block_size: u32,
    /// A ring block a request (the compressor's state of ratio-2 sources).
    pub ring: bool,
    /// `max_admission_blocks_per_request`: the window blocks the whole
    /// sequence may claim at admission, `cdiv(min(window − 1 +
    /// max_in_flight_tokens, max_model_len), block_size) + 1`.
    pub admission_cap: u32,
    /// `prefix_replay_tokens`: the window under bounded replay, 0 without.
    pub replay: u32,
    /// The window groups take part in prefix caching (no bounded replay).
    pub cached: bool,
    /// The scheduler's block (the full group's), to which hits align.
    pub hit_alignment: u32,
}

impl WindowConfig {
    /// The admission cap for an engine whose steps keep up to
    /// `in_flight_tokens` tokens scheduled but not yet processed
    /// (`VllmConfig.max_in_flight_tokens`: concurrent batches × the token
    /// budget).
    pub fn admission_cap(
        window: u32,
        block_size: u32,
        in_flight_tokens: u32,
        max_model_len: u32,
    ) -> u32 {
        let tokens = (window.saturating_sub(1).saturating_add(in_flight_tokens)).min(max_model_len);
        tokens.div_ceil(block_size.max(1)) + 1
    }

    /// `get_num_skipped_tokens`: the tokens before the window of the next
    /// token to compute.
    fn skipped_tokens(&self, computed: u32) -> u32 {
        (computed + 1).saturating_sub(self.window)
    }

    /// Blocks a hit needs cached before its boundary
    /// (`_contiguous_blocks_for_hit`, no EAGLE).
    fn tail_blocks(&self) -> u32 {
        self.window
            .saturating_sub(1)
            .div_ceil(self.block_size.max(1))
    }
}

/// The pool key of window group `group`'s block whose hash is `hash`
/// (vLLM keys cached blocks by hash and group id).
pub fn group_key(hash: u64, group: u32) -> u64 {
    crate::mamba::group_key(hash, group.wrapping_add(0x5717))
}

/// `SlidingWindowManager.find_longest_cache_hit` within the full group's
/// hit of `full_tokens`, then the hybrid coordinator's cut (one pass: full
/// attention first, then the window groups): the longest hit, in tokens,
/// ending on an aligned boundary where every window group holds the tail
/// before it, and the junction to pin when the full group went further.
/// `hashes` are the request's window-block hashes; the tail's blocks
/// (`groups` for each of its positions, position-major) go to `blocks`.
pub fn longest_hit(
    pool: &BlockPool,
    config: &WindowConfig,
    hashes: &[u64],
    full_tokens: u32,
    blocks: &mut Vec<u32>,
) -> (u32, u32) {
    blocks.clear();
    let bs = config.block_size.max(1);
    let need = config.tail_blocks().max(1);
    let align = config.hit_alignment.max(1);
    let max_blocks = (full_tokens / bs).min(hashes.len() as u32);
    let gs = config.groups as usize;
    let mut run = 0;
    let mut hit = 0;
    // The run's blocks, `groups` a position, from its top position down
    // (a lookup over every scanned position: no allocation per position).
    let mut found: Vec<u32> = Vec::with_capacity(need as usize * gs);
    for i in (0..max_blocks).rev() {
        let hash = hashes[i as usize];
        let at = found.len();
        let all = (0..config.groups).all(|g| match pool.lookup(group_key(hash, g)) {
            Some(b) => {
                found.push(b);
                true
            }
            None => false,
        });
        if !all {
            run = 0;
            found.clear();
            continue;
        }
        // The run's last block must end on an aligned boundary.
        if run == 0 && !((i + 1) * bs).is_multiple_of(align) {
            found.truncate(at);
            continue;
        }
        run += 1;
        if run >= need {
            hit = (i + run) * bs;
            break;
        }
    }
    if hit == 0 {
        // No full tail, but a run from the first block: the window covers
        // it from the start, so it is a hit, cut to the alignment ("The
        // first `num_contiguous_blocks` is a cache hit even if
        // `num_contiguous_blocks < sliding_window_contiguous_blocks`").
        hit = run * bs / align * align;
        // `found` runs from the run's top down to position 0 (and is empty
        // when no run reaches it): keep the hit's positions, the lowest.
        let keep = (hit / bs) as usize * gs;
        found.drain(..found.len() - keep);
    }
    if hit > 0 {
        // The tail, lowest position first.
        for position in found.chunks(gs.max(1)).rev() {
            blocks.extend_from_slice(position);
        }
    }
    let junction = if full_tokens > hit { full_tokens } else { 0 };
    (hit, junction)
}

/// The hit a request may use (`Scheduler.schedule`): none when it is no
/// longer than the replayed window ("a hit no longer than the replayed
/// window would be recomputed in full and save nothing"), and the tokens
/// of it to recompute otherwise. Returns `(hit, replay)`.
pub fn replayed_hit(config: &WindowConfig, hit: u32) -> (u32, u32) {
    if hit <= config.replay {
        (0, 0)
    } else {
        (hit, config.replay)
    }
}

/// One request's window and ring blocks.
#[derive(Clone, Debug, Default)]
#[repr(C)]
pub struct Lane {
    /// Window-block hashes of the request's tokens, when the window groups
    /// are prefix-cached (first, `repr(C)`: every sampled token checks it,
    /// and it then shares a cache line with the request's other per-token
    /// state); with `cached_positions` below, the positions considered for
    /// caching so far (`num_cached_block`).
    pub hasher: Option<pdsim_core::prompt::BlockHasher>,
    /// Positions in each window group's block list, nulls included.
    len: u32,
    /// The first position holding a block; those below are null.
    first: u32,
    /// `groups` block ids per held position `first..len`, position-major.
    blocks: Vec<u32>,
    /// The request is in the window managers' `num_cached_block` (it was
    /// admitted on a hit), which changes how they count.
    adopted: bool,
    /// The ring block.
    ring: Option<u32>,
    cached_positions: u32,
    /// `request.shared_prefix_boundary`.
    pub junction: u32,
}

impl Lane {
    /// Blocks held, over every window group and the ring.
    pub fn held(&self) -> usize {
        self.blocks.len() + usize::from(self.ring.is_some())
    }

    /// The window blocks (the groups over `num_tokens` slots after
    /// `computed` tokens, capped for an admission check) and the ring block
    /// a request still needs (`get_num_blocks_to_allocate`).
    pub fn blocks_to_allocate(
        &self,
        pool: &BlockPool,
        config: &WindowConfig,
        num_tokens: u32,
        computed: u32,
        admission: bool,
        hit: &[u32],
    ) -> u32 {
        let mut required = num_tokens.div_ceil(config.block_size.max(1));
        if admission {
            required = required.min(config.admission_cap);
        }
        let skipped = config.skipped_tokens(computed) / config.block_size.max(1);
        let new = if self.adopted {
            required.saturating_sub(self.len)
        } else {
            // A hit's blocks count as positions the request has, nulls
            // included (`len(new_computed_blocks)`): the tail ends there.
            let hit_positions = if hit.is_empty() {
                0
            } else {
                skipped + hit.len() as u32 / config.groups.max(1)
            };
            required.saturating_sub(skipped.max(self.len + hit_positions))
        };
        // The hit's tail blocks nobody holds leave the free queue.
        let evictable = hit.iter().filter(|&&b| pool.is_free(b)).count() as u32;
        new * config.groups + evictable + u32::from(config.ring && self.ring.is_none())
    }

    /// `add_local_computed_blocks` for a request admitted on a hit of
    /// `computed` tokens: the window positions below the hit's window are
    /// null, nothing is touched (the window groups hit nothing).
    pub fn adopt(
        &mut self,
        pool: &mut BlockPool,
        config: &WindowConfig,
        computed: u32,
        hit: &[u32],
    ) {
        let skipped = config.skipped_tokens(computed) / config.block_size.max(1);
        for &b in hit {
            pool.touch(b);
        }
        let tail = hit.len() as u32 / config.groups.max(1);
        self.first = skipped;
        self.len = skipped + tail;
        self.blocks.extend_from_slice(hit);
        self.adopted = true;
        self.cached_positions = self.len;
    }

    /// `SlidingWindowManager.cache_blocks` for `num_tokens` tokens (the
    /// coordinator rounds them down to the scheduler's block): of the
    /// positions that became full, only those in a reachable tail keep a
    /// hash — the `tail_blocks` before the prompt's replay boundary
    /// (`num_prompt_tokens − 1` floored to the alignment) and before the
    /// junction (`reachable_block_mask` under `prefix_cache_retention_interval:
    /// 0`).
    pub fn cache(
        &mut self,
        pool: &mut BlockPool,
        config: &WindowConfig,
        num_tokens: u32,
        prompt: u32,
    ) {
        let Some(hasher) = &self.hasher else {
            return;
        };
        let bs = config.block_size.max(1);
        let full = num_tokens / bs;
        if self.cached_positions >= full {
            return;
        }
        let align = config.hit_alignment.max(1);
        let need = config.tail_blocks();
        let tail_end = |tokens: u32| tokens / align * align / bs;
        // A junction of 0 (none) ends no tail.
        let ends = [tail_end(prompt.saturating_sub(1)), tail_end(self.junction)];
        let gs = config.groups as usize;
        for p in self.cached_positions.max(self.first)..full.min(self.len) {
            let reachable = ends.iter().any(|&end| p < end && p + need >= end);
            let Some(&hash) = hasher.hashes.get(p as usize) else {
                continue;
            };
            if !reachable {
                continue;
            }
            let i = (p - self.first) as usize;
            for g in 0..gs {
                pool.cache(self.blocks[i * gs + g], group_key(hash, g as u32));
            }
        }
        self.cached_positions = full;
    }

    /// `remove_skipped_blocks` with `processed` the computed tokens whose
    /// step is processed: the blocks wholly before the window go back,
    /// each group's highest first.
    pub fn remove_skipped(&mut self, pool: &mut BlockPool, config: &WindowConfig, processed: u32) {
        let skipped = (config.skipped_tokens(processed) / config.block_size.max(1)).min(self.len);
        if skipped <= self.first {
            return;
        }
        let gs = config.groups as usize;
        let drop = (skipped - self.first) as usize;
        let mut released = Vec::with_capacity(drop);
        for g in 0..gs {
            released.clear();
            released.extend((0..drop).map(|i| self.blocks[i * gs + g]));
            // `release` hands blocks over last first.
            pool.release(&released);
        }
        self.blocks.drain(..drop * gs);
        self.first = skipped;
    }

    /// `allocate_new_blocks` of the window groups (to `num_tokens` slots)
    /// and of the ring, groups in order. The caller checked the pool has
    /// them. The ring comes after the full group in the coordinator's
    /// order, so it is allocated apart ([`Lane::allocate_ring`]).
    pub fn allocate(
        &mut self,
        pool: &mut BlockPool,
        config: &WindowConfig,
        num_tokens: u32,
        scratch: &mut Vec<u32>,
    ) {
        let required = num_tokens.div_ceil(config.block_size.max(1));
        if required <= self.len {
            return;
        }
        let new = (required - self.len) as usize;
        let gs = config.groups as usize;
        // Each group takes its blocks in turn; they are stored
        // position-major.
        let start = self.blocks.len();
        self.blocks.resize(start + new * gs, 0);
        for g in 0..gs {
            scratch.clear();
            pool.allocate(new as u32, scratch);
            debug_assert_eq!(scratch.len(), new, "the caller checked the pool has them");
            for (i, &b) in scratch.iter().enumerate() {
                self.blocks[start + i * gs + g] = b;
            }
        }
        // With nothing held `first` is `len`, so the run stays contiguous.
        self.len = required;
    }

    /// The ring's one block, claimed at the first allocation.
    pub fn allocate_ring(&mut self, pool: &mut BlockPool, config: &WindowConfig) {
        if config.ring && self.ring.is_none() {
            let mut one = Vec::with_capacity(1);
            pool.allocate(1, &mut one);
            self.ring = one.first().copied();
        }
    }

    /// Frees the window groups' blocks (each group's last position first),
    /// groups in order; the ring is freed apart ([`Lane::free_ring`]), after
    /// the full group.
    pub fn free_window(&mut self, pool: &mut BlockPool, config: &WindowConfig) {
        let gs = config.groups as usize;
        let held = self.blocks.len() / gs.max(1);
        let mut group = Vec::with_capacity(held);
        for g in 0..gs {
            group.clear();
            group.extend((0..held).map(|i| self.blocks[i * gs + g]));
            pool.release(&group);
        }
        let ring = self.ring;
        let hasher = self.hasher.take();
        *self = Lane::default();
        self.ring = ring;
        self.hasher = hasher;
    }

    pub fn free_ring(&mut self, pool: &mut BlockPool) {
        if let Some(b) = self.ring.take() {
            pool.release(&[b]);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> WindowConfig {
        WindowConfig {
            groups: 2,
            window: 16,
            block_size: 4,
            ring: true,
            admission_cap: WindowConfig::admission_cap(16, 4, 64, 1024),
            replay: 16,
            cached: false,
            hit_alignment: 16,
        }
    }

    #[test]
    fn cached_windows_keep_only_reachable_tails_and_hit_there() {
        let c = WindowConfig {
            cached: true,
            replay: 0,
            ..config()
        };
        let mut pool = BlockPool::new(64, true);
        let mut lane = Lane::default();
        let mut h = pdsim_core::prompt::BlockHasher::new(4);
        h.feed(7, 0, 40);
        lane.hasher = Some(h);
        let hashes = lane.hasher.as_ref().unwrap().hashes.clone();
        let mut scratch = Vec::new();
        lane.allocate(&mut pool, &c, 40, &mut scratch);
        // A 40-token prompt: its replay boundary is 32 (39 floored to 16),
        // so the 4 blocks before it (positions 4..8) keep a hash, a group
        // each; nothing else does.
        lane.cache(&mut pool, &c, 32, 40);
        for (p, &hash) in hashes.iter().enumerate().take(10) {
            let cached = (0..2).all(|g| pool.lookup(group_key(hash, g)).is_some());
            assert_eq!(cached, (4..8).contains(&p), "position {p}");
        }
        let mut tail = Vec::new();
        assert_eq!(longest_hit(&pool, &c, &hashes, 32, &mut tail), (32, 0));
        assert_eq!(tail.len(), 2 * 4);
        // At 16 the full group may hit but no tail was kept: none, and the
        // junction is pinned there.
        assert_eq!(longest_hit(&pool, &c, &hashes, 16, &mut tail), (0, 16));
        assert!(tail.is_empty());
        // Beyond the full group's hit nothing is looked at.
        assert_eq!(longest_hit(&pool, &c, &hashes, 0, &mut tail), (0, 0));
        // A junction at 16 keeps the tail before it as well.
        let mut other = Lane {
            junction: 16,
            hasher: lane.hasher.clone(),
            ..Lane::default()
        };
        other.allocate(&mut pool, &c, 40, &mut scratch);
        other.cache(&mut pool, &c, 32, 40);
        assert_eq!(longest_hit(&pool, &c, &hashes, 16, &mut tail), (16, 0));
        // Adopting the hit touches its tail and counts from it.
        let mut third = Lane {
            hasher: lane.hasher.clone(),
            ..Lane::default()
        };
        assert_eq!(
            third.blocks_to_allocate(&pool, &c, 40, 16, false, &tail),
            2 * (10 - 4) + 1
        );
        third.adopt(&mut pool, &c, 16, &tail);
        assert_eq!(third.held(), 2 * 4);
        assert_eq!(
            third.blocks_to_allocate(&pool, &c, 40, 16, false, &[]),
            2 * (10 - 4) + 1
        );
    }

    #[test]
    fn a_run_from_the_first_block_shorter_than_the_window_is_a_hit_cut_to_the_alignment() {
        // Hits aligned to 8 tokens, a 16-token window in 4-token blocks:
        // blocks 0..3 cached in both groups (12 tokens, no full tail) hit
        // 8 tokens, the first two blocks.
        let c = WindowConfig {
            cached: true,
            replay: 0,
            hit_alignment: 8,
            ..config()
        };
        let mut pool = BlockPool::new(64, true);
        let hashes: Vec<u64> = (1..=8).map(|h| h * 977).collect();
        let mut held = Vec::new();
        pool.allocate(6, &mut held);
        for p in 0..3usize {
            for g in 0..2 {
                pool.cache(held[p * 2 + g as usize], group_key(hashes[p], g));
            }
        }
        let mut tail = Vec::new();
        assert_eq!(longest_hit(&pool, &c, &hashes, 32, &mut tail), (8, 32));
        assert_eq!(tail, held[..4].to_vec());
        // Nothing from the first block: no hit.
        let mut empty = BlockPool::new(64, true);
        let mut other = Vec::new();
        empty.allocate(2, &mut other);
        empty.cache(other[0], group_key(hashes[1], 0));
        empty.cache(other[1], group_key(hashes[1], 1));
        assert_eq!(longest_hit(&empty, &c, &hashes, 32, &mut tail), (0, 32));
        assert!(tail.is_empty());
    }

    #[test]
    fn the_admission_cap_covers_the_window_and_the_tokens_in_flight() {
        // DeepSeek-V4.1: a 128 window in 32-token blocks with 8,192 tokens
        // in flight claims cdiv(127 + 8,192, 32) + 1 = 261 blocks a group.
        assert_eq!(WindowConfig::admission_cap(128, 32, 8192, 1 << 20), 261);
        // Never beyond max_model_len.
        assert_eq!(WindowConfig::admission_cap(128, 32, 8192, 1024), 33);
        assert_eq!(config().admission_cap, 21);
    }

    #[test]
    fn a_hit_within_the_window_is_dropped_and_a_longer_one_replays_it() {
        let c = config();
        assert_eq!(replayed_hit(&c, 0), (0, 0));
        assert_eq!(replayed_hit(&c, 16), (0, 0));
        assert_eq!(replayed_hit(&c, 32), (32, 16));
    }

    #[test]
    fn a_lane_holds_the_window_and_frees_what_slides_out() {
        let c = config();
        let mut pool = BlockPool::new(64, true);
        let mut lane = Lane::default();
        let mut scratch = Vec::new();
        // A 40-token chunk: 10 window blocks a group and the ring.
        assert_eq!(lane.blocks_to_allocate(&pool, &c, 40, 0, false, &[]), 21);
        lane.allocate(&mut pool, &c, 40, &mut scratch);
        lane.allocate_ring(&mut pool, &c);
        assert_eq!(lane.held(), 21);
        // Once 40 are processed the window (tokens 25..40) needs blocks
        // 6..10: blocks 0..6 go back.
        lane.remove_skipped(&mut pool, &c, 40);
        assert_eq!(lane.held(), 2 * 4 + 1);
        assert_eq!(lane.blocks_to_allocate(&pool, &c, 41, 40, false, &[]), 2);
        lane.allocate(&mut pool, &c, 41, &mut scratch);
        assert_eq!(lane.held(), 2 * 5 + 1);
        lane.free_window(&mut pool, &c);
        lane.free_ring(&mut pool);
        assert_eq!(lane.held(), 0);
        assert_eq!(pool.free(), pool.usable());
    }

    #[test]
    fn a_request_admitted_on_a_hit_holds_no_window_below_the_replay() {
        let c = config();
        let mut pool = BlockPool::new(64, true);
        let mut lane = Lane::default();
        let mut scratch = Vec::new();
        // A 32-token hit: tokens 16..32 are replayed, so blocks from 4 on
        // (17 skipped tokens: 4 blocks) are needed, to 48 tokens: 8 a group.
        assert_eq!(
            lane.blocks_to_allocate(&pool, &c, 48, 32, false, &[]),
            2 * 8 + 1
        );
        lane.adopt(&mut pool, &c, 32, &[]);
        lane.allocate(&mut pool, &c, 48, &mut scratch);
        assert_eq!(lane.held(), 2 * 8);
        // Adopted: the count is against the positions, nulls included.
        assert_eq!(
            lane.blocks_to_allocate(&pool, &c, 52, 48, false, &[]),
            2 + 1
        );
        // The admission check caps the window at 21 blocks a group.
        let fresh = Lane::default();
        assert_eq!(
            fresh.blocks_to_allocate(&pool, &c, 1000, 0, true, &[]),
            2 * 21 + 1
        );
    }
}
