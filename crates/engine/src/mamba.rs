//! A hybrid model's Mamba2 states in the KV block pool, as vLLM 0.31.0
//! keeps them: `MambaManager` (`vllm/v1/core/single_type_kv_cache_manager.py`),
//! the hybrid coordinator's cache hit (`HybridKVCacheCoordinator`,
//! `vllm/v1/core/kv_cache_coordinator.py`) and the scheduler's
//! `_mamba_block_aligned_split` (`vllm/v1/core/sched/scheduler.py`).
//! The model and the mechanism are described in
//! `research/nemotron-h-in-vllm-0.31.0.md`.
//!
//! A hybrid's layers are grouped into KV cache groups that share one block
//! pool: one attention group (the engine's ordinary blocks) and `groups`
//! Mamba groups, each holding one sequence's state per block. A block
//! position `p` of a Mamba group stands for the state after `(p + 1) ·
//! block_size` tokens; vLLM keeps the request's list of positions with null
//! blocks where no state is held, so a request holds at most two real
//! blocks a group (align mode): the state being advanced, and, in the step
//! after a block boundary is crossed, the one it was copied from.
//!
//! Every Mamba group of a request allocates, caches and frees the same
//! positions at the same moments (they differ only in their layers), so a
//! [`Lane`] keeps the positions once and `groups` block ids for each. What
//! differs per group is the block pool's view: each group's block is cached
//! under its own key (vLLM keys cached blocks by hash and group id,
//! `BlockHashWithGroupId`) and is evicted on its own, so a state is a hit
//! only while every group still has it.
//!
//! What pdsim does not run here, refused when the cluster is built: the
//! deprecated `all` mode, speculative decoding's extra state blocks,
//! fine-grained hits (`prefix_match_unit`), prefill checkpoint blocks
//! (Kimi's KDA; a Mamba2 state has none), periodic retention
//! (`prefix_cache_retention_interval > 0`) and connectors (P/D, offload).

use crate::kv::BlockPool;

/// `mamba_cache_mode` as resolved (`MambaModelConfig.verify_and_update_config`,
/// `vllm/model_executor/models/config.py`): `align` whenever prefix caching
/// is on, `none` when it is off.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MambaMode {
    /// One state block a group for the whole request, updated in place;
    /// nothing is cached (prefix caching is off).
    None,
    /// States at block boundaries, prefill chunks cut to reach them, and
    /// prefix hits only where every group kept one.
    Align,
}

/// What an engine's Mamba side runs with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MambaConfig {
    /// Mamba KV cache groups (`_get_kv_cache_groups_uniform_page_size`,
    /// `vllm/v1/core/kv_cache_utils.py`): Nemotron-H-8B's 24 Mamba2 layers
    /// in groups of 4 (its attention layer count) make 6.
    pub groups: u32,
    pub mode: MambaMode,
    /// Tokens a state block stands for in align mode: the engine's block,
    /// which vLLM raised until an attention page holds a state
    /// (`_align_hybrid_block_size`, `vllm/platforms/interface.py`).
    pub block_size: u32,
}

/// The pool key of group `group`'s state at a block whose hash is `hash`.
/// vLLM caches a block under `(hash, group id)`; pdsim's pool has one key
/// space, so each Mamba group's key is the block hash mixed with the group
/// (a bijection per group, so two hashes never share a key within one).
pub fn group_key(hash: u64, group: u32) -> u64 {
    (hash ^ 0x9E37_79B9_7F4A_7C15u64.wrapping_mul(u64::from(group) + 1)).rotate_left(23)
}

/// `Scheduler._mamba_block_aligned_split`: the tokens of a prefill chunk
/// once it is cut to end where a state can be cached. `start` is the
/// request's computed tokens plus its new local hit, `n` the tokens the
/// budget allows, `prompt` and `tokens` the request's prompt and all its
/// tokens, `junction` its `shared_prefix_boundary`, `max_prefill` the
/// scheduler's `max_num_scheduled_tokens` capped by the long-prefill
/// threshold. With no fine-grained hits, no checkpoint blocks and no
/// shared-prefix checkpoint (vLLM's defaults), the tail and checkpoint
/// stops of the source are inactive and the junction is floored to a block.
pub fn aligned_split(
    start: u32,
    n: u32,
    prompt: u32,
    tokens: u32,
    junction: u32,
    block_size: u32,
    max_prefill: u32,
) -> u32 {
    let bs = block_size.max(1);
    // Split only during prefill; `num_tokens - 1` extends it to a resumed
    // request replaying its output.
    let prefill_end = prompt.max(tokens.saturating_sub(1));
    if start >= prefill_end {
        return n;
    }
    let last_cache_position = tokens - tokens % bs;
    let mut end = start + n;
    // A chunk that is not the prefill's last ends on a block boundary
    // (slot p holds the state after exactly (p + 1) · block_size tokens);
    // a block wider than a chunk may advance within it.
    if end < prefill_end {
        let aligned = end / bs * bs;
        if aligned > start || bs <= max_prefill {
            end = aligned;
        }
    }
    let next_boundary = if !start.is_multiple_of(bs) {
        (start / bs + 1) * bs
    } else {
        0
    };
    let junction_stop = if start < junction && junction < end {
        start + (junction - start) / bs * bs
    } else {
        0
    };
    // The earliest mandatory stop strictly inside the chunk.
    for stop in [next_boundary, last_cache_position, junction_stop] {
        if start < stop && stop < end {
            end = stop;
        }
    }
    end.saturating_sub(start)
}

/// One request's Mamba side: its block positions (`req_to_blocks` of each
/// Mamba group, nulls implied) and the real blocks it holds.
#[derive(Clone, Debug, Default)]
pub struct Lane {
    /// Positions in the request's block list, nulls included.
    len: u32,
    /// Positions holding a real block, ascending (at most three).
    positions: Vec<u32>,
    /// `groups` block ids per held position, position-major.
    blocks: Vec<u32>,
    /// `_num_retired_blocks`: positions below it were handed back.
    retired: u32,
    /// `num_cached_block`: positions considered for caching so far.
    cached: u32,
    /// `request.shared_prefix_boundary`: where the attention group's hit
    /// went further than the states' (0 for none).
    pub junction: u32,
}

impl Lane {
    /// Real blocks held, over all groups.
    pub fn held(&self) -> usize {
        self.blocks.len()
    }

    /// Whether any block is held.
    pub fn is_empty(&self) -> bool {
        self.blocks.is_empty()
    }

    /// Group `g`'s blocks, lowest position first.
    fn group_blocks(&self, groups: u32, g: u32, out: &mut Vec<u32>) {
        out.clear();
        out.extend(
            (0..self.positions.len()).map(|i| self.blocks[i * groups as usize + g as usize]),
        );
    }

    /// Hands back the blocks at the positions `drop` selects, group by
    /// group in group order, highest position first within a group, as
    /// the coordinator calls each manager in turn.
    fn free_where(&mut self, pool: &mut BlockPool, groups: u32, drop: impl Fn(u32) -> bool) {
        let gs = groups as usize;
        if !self.positions.iter().any(|&p| drop(p)) {
            return;
        }
        let mut released = Vec::new();
        for g in 0..gs {
            released.clear();
            for (i, &p) in self.positions.iter().enumerate() {
                if drop(p) {
                    released.push(self.blocks[i * gs + g]);
                }
            }
            // `release` hands blocks over last first.
            pool.release(&released);
        }
        let mut keep = 0;
        for i in 0..self.positions.len() {
            if !drop(self.positions[i]) {
                self.positions[keep] = self.positions[i];
                self.blocks.copy_within(i * gs..(i + 1) * gs, keep * gs);
                keep += 1;
            }
        }
        self.positions.truncate(keep);
        self.blocks.truncate(keep * gs);
    }

    /// `MambaManager.remove_skipped_blocks` with `processed` the request's
    /// computed tokens whose step is processed: the states wholly before
    /// the last processed token (`get_num_skipped_tokens` is
    /// `num_computed_tokens - 1`).
    ///
    /// vLLM also frees `last_state_block_idx`, the position held before the
    /// last allocation, once it is below `cdiv(processed, block_size) - 1`.
    /// Without speculative blocks that position is `prev_len - 1` and the
    /// bound is `(processed - 1) // block_size`, the very bound of the range
    /// freed here, so that second free never finds a block this one left;
    /// it is not repeated.
    pub fn remove_skipped(&mut self, pool: &mut BlockPool, config: MambaConfig, processed: u32) {
        if config.mode != MambaMode::Align {
            // A none-mode block spans max_model_len: nothing is ever skipped.
            return;
        }
        if processed < 2 {
            return;
        }
        let last = ((processed - 1) / config.block_size.max(1)).min(self.len);
        let first = self.retired;
        if first < last {
            self.free_where(pool, config.groups, |p| p >= first && p < last);
            self.retired = last;
        }
    }

    /// The blocks `get_num_blocks_to_allocate` counts over the Mamba groups
    /// for `num_tokens` tokens (the main model's) when the request adds
    /// `hit` (the position and blocks of a state it hits) now.
    pub fn blocks_to_allocate(
        &self,
        pool: &BlockPool,
        config: MambaConfig,
        num_tokens: u32,
        hit: Option<(u32, &[u32])>,
    ) -> u32 {
        let g = config.groups;
        let (hit_len, evictable) = match hit {
            Some((pos, blocks)) => (
                pos + 1,
                blocks.iter().filter(|&&b| pool.is_free(b)).count() as u32,
            ),
            None => (0, 0),
        };
        let new = match config.mode {
            // One block a group spanning the whole request.
            MambaMode::None => u32::from(self.len == 0 && num_tokens > 0),
            // Align: never more than one new block a step.
            MambaMode::Align => {
                let required = num_tokens.div_ceil(config.block_size.max(1));
                required.saturating_sub(hit_len + self.len).min(1)
            }
        };
        new * g + evictable
    }

    /// `add_local_computed_blocks`: the hit state's blocks at `pos`, the
    /// positions before it null; each block is touched.
    pub fn add_hit(&mut self, pool: &mut BlockPool, pos: u32, blocks: &[u32]) {
        for &b in blocks {
            pool.touch(b);
        }
        self.len = pos + 1;
        self.positions.push(pos);
        self.blocks.extend_from_slice(blocks);
        self.cached = pos + 1;
    }

    /// `MambaManager.allocate_new_blocks` for `num_tokens` tokens: a new
    /// state block a group when the request crosses into a new block
    /// position (the runner copies the state into it), the positions
    /// skipped left null. The caller checked the pool has the blocks.
    pub fn allocate(
        &mut self,
        pool: &mut BlockPool,
        config: MambaConfig,
        num_tokens: u32,
        scratch: &mut Vec<u32>,
    ) {
        let required = match config.mode {
            MambaMode::None => u32::from(num_tokens > 0),
            MambaMode::Align => num_tokens.div_ceil(config.block_size.max(1)),
        };
        if required <= self.len {
            return;
        }
        let position = required - 1;
        scratch.clear();
        // Groups in order, one block each.
        pool.allocate(config.groups, scratch);
        self.positions.push(position);
        self.blocks.extend_from_slice(scratch);
        self.len = required;
    }

    /// `MambaManager.cache_blocks` for `num_tokens` tokens (rounded down to
    /// a block by the coordinator) under vLLM's default retention
    /// (`prefix_cache_retention_interval: 0`, `reachable_block_mask`): of
    /// the positions that became full, only those ending at a reachable
    /// boundary keep a hash — the prompt's replay boundary
    /// (`num_prompt_tokens − 1` floored to a block: where a resend of the
    /// prompt resumes) and the junction. Returns the block hashes newly
    /// cached (for `cached_blocks_this_step`).
    pub fn cache(
        &mut self,
        pool: &mut BlockPool,
        config: MambaConfig,
        num_tokens: u32,
        prompt: u32,
        hashes: &[u64],
        newly: &mut Vec<u64>,
    ) {
        if config.mode != MambaMode::Align {
            return;
        }
        let bs = config.block_size.max(1);
        let full = num_tokens / bs;
        if self.cached >= full {
            return;
        }
        let boundary_block = |tokens: u32| (tokens / bs).checked_sub(1);
        let reachable = [
            boundary_block(prompt.saturating_sub(1)),
            (self.junction > 0)
                .then(|| boundary_block(self.junction))
                .flatten(),
        ];
        for (i, &p) in self.positions.iter().enumerate() {
            if p < self.cached || p >= full || !reachable.contains(&Some(p)) {
                continue;
            }
            let Some(&hash) = hashes.get(p as usize) else {
                continue;
            };
            for g in 0..config.groups {
                let block = self.blocks[i * config.groups as usize + g as usize];
                pool.cache(block, group_key(hash, g));
            }
            newly.push(hash);
        }
        self.cached = full;
    }

    /// `pop_blocks_for_free` and `free` of every Mamba group: each group's
    /// blocks go back last position first, groups in order.
    pub fn free_all(&mut self, pool: &mut BlockPool, config: MambaConfig) {
        let mut group = Vec::new();
        for g in 0..config.groups {
            self.group_blocks(config.groups, g, &mut group);
            pool.release(&group);
        }
        *self = Lane::default();
    }
}

/// The hybrid coordinator's cache hit (`HybridKVCacheCoordinator.
/// find_longest_cache_hit`, one pass for full attention plus one other
/// type): the attention group's hit of `attention_blocks` blocks is cut to
/// the last position below it where every Mamba group holds a cached
/// state (`MambaManager.find_longest_cache_hit` scans right to left).
/// Returns the hit in blocks and, when the states lag the attention hit,
/// the junction to pin (`shared_prefix_boundary`, in tokens), with the hit
/// state's blocks in `blocks`.
pub fn longest_hit(
    pool: &BlockPool,
    config: MambaConfig,
    hashes: &[u64],
    attention_blocks: u32,
    blocks: &mut Vec<u32>,
) -> (u32, u32) {
    blocks.clear();
    let mut hit = 0;
    'scan: for i in (0..attention_blocks).rev() {
        let Some(&hash) = hashes.get(i as usize) else {
            continue;
        };
        blocks.clear();
        for g in 0..config.groups {
            match pool.lookup(group_key(hash, g)) {
                Some(b) => blocks.push(b),
                None => continue 'scan,
            }
        }
        hit = i + 1;
        break;
    }
    if hit == 0 {
        blocks.clear();
    }
    let junction = if attention_blocks > hit {
        attention_blocks * config.block_size
    } else {
        0
    };
    (hit, junction)
}

#[cfg(test)]
mod tests {
    use super::*;

    const BS: u32 = 1040;

    #[test]
    fn each_group_keys_every_hash_apart() {
        // A group's key is a bijection of the hash, and no two groups (nor
        // the attention group, which uses the hash itself) share one here.
        let mut keys = std::collections::BTreeSet::new();
        for h in 0..2000u64 {
            keys.insert(h);
            for g in 0..6 {
                keys.insert(group_key(h, g));
            }
        }
        assert_eq!(keys.len(), 2000 * 7);
    }

    #[test]
    fn a_prompt_that_fits_is_still_cut_at_its_last_full_block() {
        // research/nemotron-h-in-vllm-0.31.0.md §4 (a): 3000 tokens with a
        // budget of 8192 run as 2080 and then 920.
        assert_eq!(aligned_split(0, 3000, 3000, 3000, 0, BS, 8192), 2080);
        assert_eq!(aligned_split(2080, 920, 3000, 3000, 0, BS, 8192), 920);
        // A prompt of whole blocks is not cut; one under a block neither.
        assert_eq!(aligned_split(0, 2080, 2080, 2080, 0, BS, 8192), 2080);
        assert_eq!(aligned_split(0, 900, 900, 900, 0, BS, 8192), 900);
    }

    #[test]
    fn a_chunk_short_of_its_prefill_ends_on_a_block_or_not_at_all() {
        // A budget of 1500 leaves 1040; of 1000, nothing (the block fits
        // in a chunk, so the chunk may not stop inside it).
        assert_eq!(aligned_split(0, 1500, 5000, 5000, 0, BS, 8192), 1040);
        assert_eq!(aligned_split(0, 1000, 5000, 5000, 0, BS, 8192), 0);
        // A block wider than any chunk advances inside it.
        assert_eq!(aligned_split(0, 1000, 5000, 5000, 0, BS, 512), 1000);
        // ... and a chunk starting inside a block stops at its boundary.
        assert_eq!(aligned_split(1000, 512, 5000, 5000, 0, BS, 512), 40);
        // Decode is never cut.
        assert_eq!(aligned_split(5000, 1, 5000, 5001, 0, BS, 8192), 1);
    }

    #[test]
    fn a_junction_inside_the_chunk_stops_it_there() {
        // The attention hit went to 2080 but states only to 0: the chunk
        // stops at 2080 so the state there is cached for the next sibling.
        assert_eq!(aligned_split(0, 4000, 4000, 4000, 2080, BS, 8192), 2080);
        // From a hit at 1040, a junction at 3120 stops the chunk at 3120.
        assert_eq!(aligned_split(1040, 3000, 4100, 4100, 3120, BS, 8192), 2080);
        // A junction at the start or past the end changes nothing.
        assert_eq!(aligned_split(1040, 500, 1540, 1540, 1040, BS, 8192), 500);
    }

    fn config(groups: u32) -> MambaConfig {
        MambaConfig {
            groups,
            mode: MambaMode::Align,
            block_size: BS,
        }
    }

    #[test]
    fn a_lane_holds_two_states_a_group_only_in_the_step_after_a_boundary() {
        let mut pool = BlockPool::new(64, true);
        let c = config(3);
        let mut lane = Lane::default();
        let mut scratch = Vec::new();
        // First chunk to 2080: one state at position 1 (position 0 null).
        assert_eq!(lane.blocks_to_allocate(&pool, c, 2080, None), 3);
        lane.allocate(&mut pool, c, 2080, &mut scratch);
        assert_eq!(lane.held(), 3);
        // Second chunk to 3000: a new state at position 2, the old kept.
        lane.remove_skipped(&mut pool, c, 2080);
        assert_eq!(lane.blocks_to_allocate(&pool, c, 3000, None), 3);
        lane.allocate(&mut pool, c, 3000, &mut scratch);
        assert_eq!(lane.held(), 6);
        // The next step frees position 1.
        lane.remove_skipped(&mut pool, c, 3000);
        assert_eq!(lane.held(), 3);
        assert_eq!(lane.blocks_to_allocate(&pool, c, 3001, None), 0);
        // Decoding up to the boundary at 3120 needs nothing new; past it, a
        // block a group, and the one before goes a step later.
        lane.allocate(&mut pool, c, 3120, &mut scratch);
        assert_eq!(lane.held(), 3);
        lane.remove_skipped(&mut pool, c, 3120);
        assert_eq!(lane.blocks_to_allocate(&pool, c, 3121, None), 3);
        lane.allocate(&mut pool, c, 3121, &mut scratch);
        assert_eq!(lane.held(), 6);
        lane.remove_skipped(&mut pool, c, 3121);
        assert_eq!(lane.held(), 3);
        lane.free_all(&mut pool, c);
        assert_eq!(pool.free(), pool.usable());
    }

    #[test]
    fn only_the_replay_boundary_and_the_junction_keep_a_state() {
        let mut pool = BlockPool::new(64, true);
        let c = config(2);
        let hashes: Vec<u64> = (1..=8).map(|h| h * 1000).collect();
        let mut lane = Lane::default();
        let mut scratch = Vec::new();
        let mut newly = Vec::new();
        // A 3000-token prompt: its replay boundary is 2080 (position 1).
        lane.allocate(&mut pool, c, 2080, &mut scratch);
        lane.cache(&mut pool, c, 2080, 3000, &hashes, &mut newly);
        assert_eq!(newly, vec![2000]);
        let mut blocks = Vec::new();
        assert_eq!(longest_hit(&pool, c, &hashes, 2, &mut blocks), (2, 0));
        assert_eq!(blocks.len(), 2);
        // A state at 1040 was never written: a hit of one attention block
        // finds none and pins the junction at 1040.
        assert_eq!(longest_hit(&pool, c, &hashes, 1, &mut blocks), (0, 1040));
        assert!(blocks.is_empty());
        // Evicting one group's copy ends the hit.
        lane.free_all(&mut pool, c);
        let mut taken = Vec::new();
        pool.allocate(pool.free(), &mut taken);
        assert_eq!(longest_hit(&pool, c, &hashes, 2, &mut blocks), (0, 2080));
    }
}
