//! Prompts as content-addressed segments (DESIGN decision 4).
//!
//! A prompt is a list of segments, each an id standing for some content and
//! a length in tokens. Token `i` of segment `s` is identified by `(s.id, i)`,
//! so two prompts that start with the same segments share exactly those
//! tokens. A block hash at any block size chains over the pieces of segments
//! the block covers, which is how vLLM chains its block hashes over token
//! ids (`vllm/v1/core/kv_cache_utils.py`, `hash_block_tokens`): the engine's
//! 16-token blocks, the router's own block size and Mooncake's 512-token
//! `hash_ids` all agree on what is shared, without carrying tokens.

use serde::Serialize;

/// A run of tokens with one content identity.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
pub struct Segment {
    pub id: u64,
    pub tokens: u32,
}

/// A request's prompt.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Prompt {
    pub segments: Vec<Segment>,
}

impl Prompt {
    pub fn new(segments: Vec<Segment>) -> Prompt {
        Prompt {
            segments: segments.into_iter().filter(|s| s.tokens > 0).collect(),
        }
    }

    pub fn tokens(&self) -> u64 {
        self.segments.iter().map(|s| s.tokens as u64).sum()
    }
}

/// The hash every chain starts from (vLLM's `NONE_HASH`).
pub const ROOT_HASH: u64 = 0x9e37_79b9_7f4a_7c15;

/// A strong 64-bit mixer (the splitmix64 finaliser).
pub fn mix64(mut x: u64) -> u64 {
    x ^= x >> 30;
    x = x.wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x ^= x >> 27;
    x = x.wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// Combines a parent hash with one piece of a segment, given the segment id
/// as `mix64(segment_id)`.
fn combine(hash: u64, mixed_id: u64, offset: u32, len: u32) -> u64 {
    mix64(
        hash.rotate_left(23)
            ^ mixed_id
            ^ (((offset as u64) << 32) | len as u64).wrapping_mul(0xa076_1d64_78bd_642f),
    )
}

/// Derives a content id for generated or unique content from a seed value
/// and a salt, so ids never collide with trace-given ids by accident.
pub fn content_id(seed: u64, salt: u64) -> u64 {
    mix64(mix64(seed ^ 0x5bd1_e995) ^ salt)
}

/// Walks a token sequence given as segments and yields the chained hash of
/// every full block of `block_size` tokens.
///
/// The fields [`BlockHasher::feed`]'s one-token path reads come first and
/// in this order (`repr(C)`), with the hashes' vector, whose length the
/// engine checks after every token: a decoding request's token then
/// touches one cache line of its hasher.
#[derive(Clone, Debug)]
#[repr(C)]
pub struct BlockHasher {
    /// The run of tokens of one segment fed into the current block and not
    /// combined yet: (segment id, first offset, tokens). A block's hash
    /// combines each maximal run once, so it depends on which tokens the
    /// block holds and not on how they were fed: a decoding request feeds
    /// its output one token at a time, and a later prompt that repeats the
    /// output as one segment (a conversation's next turn) gets the same
    /// hashes.
    piece: Option<(u64, u32, u32)>,
    block_size: u32,
    /// Tokens of the current block consumed so far.
    filled: u32,
    /// Hashes of completed blocks.
    pub hashes: Vec<u64>,
    hash: u64,
    /// The last segment id combined and its `mix64`, reused while the same
    /// segment goes on.
    mixed: (u64, u64),
}

impl BlockHasher {
    pub fn new(block_size: u32) -> BlockHasher {
        assert!(block_size > 0, "block size must be positive");
        BlockHasher {
            block_size,
            hash: ROOT_HASH,
            filled: 0,
            mixed: (0, mix64(0)),
            piece: None,
            hashes: Vec::new(),
        }
    }

    /// Combines the open run into the chain.
    #[inline]
    fn flush_piece(&mut self) {
        if let Some((id, offset, len)) = self.piece.take() {
            if self.mixed.0 != id {
                self.mixed = (id, mix64(id));
            }
            self.hash = combine(self.hash, self.mixed.1, offset, len);
        }
    }

    /// Feeds `tokens` tokens of segment `id`, starting at offset `start`
    /// within that segment. Inline across crates: every decoding request
    /// feeds its token here every step.
    #[inline]
    pub fn feed(&mut self, id: u64, start: u32, tokens: u32) {
        // A decoding request feeds one token a step, continuing the run it
        // fed last and not filling the block: the loop below would only
        // lengthen the run, so that is done here without it (every output
        // token of a run passes through this).
        if let Some((piece_id, first, len)) = &mut self.piece
            && *piece_id == id
            && *first + *len == start
            && self.filled + tokens < self.block_size
        {
            *len += tokens;
            self.filled += tokens;
            return;
        }
        self.feed_blocks(id, start, tokens);
    }

    /// [`BlockHasher::feed`] past its one-run case.
    fn feed_blocks(&mut self, id: u64, start: u32, tokens: u32) {
        let mut offset = start;
        let mut left = tokens;
        while left > 0 {
            if self.filled == 0 && self.piece.is_none() && left >= self.block_size {
                // Whole blocks of one segment, from a block boundary (most
                // of a long prompt): each is one run combined into the
                // chain, as the general step below would do it one block
                // at a time.
                if self.mixed.0 != id {
                    self.mixed = (id, mix64(id));
                }
                let mixed = self.mixed.1;
                let bs = self.block_size;
                self.hashes.reserve((left / bs) as usize);
                while left >= bs {
                    self.hash = combine(self.hash, mixed, offset, bs);
                    self.hashes.push(self.hash);
                    offset += bs;
                    left -= bs;
                }
                continue;
            }
            let take = left.min(self.block_size - self.filled);
            match &mut self.piece {
                Some((piece_id, first, len)) if *piece_id == id && *first + *len == offset => {
                    *len += take;
                }
                _ => {
                    self.flush_piece();
                    self.piece = Some((id, offset, take));
                }
            }
            self.filled += take;
            offset += take;
            left -= take;
            if self.filled == self.block_size {
                self.flush_piece();
                self.hashes.push(self.hash);
                self.filled = 0;
            }
        }
    }

    /// A hasher whose chain continues from `parent`, the hash of the block
    /// before the first one fed (`ROOT_HASH` for none): how the KV-block
    /// indexer hashes the tokens of a `BlockStored` event from its parent's
    /// key (llm-d-router `pkg/kvevents/pool.go`, `TokensToKVBlockKeys`).
    pub fn resume(block_size: u32, parent: u64) -> BlockHasher {
        let mut hasher = BlockHasher::new(block_size);
        hasher.hash = parent;
        hasher
    }

    pub fn feed_segment(&mut self, segment: Segment) {
        self.feed(segment.id, 0, segment.tokens);
    }

    pub fn full_blocks(&self) -> usize {
        self.hashes.len()
    }

    /// The chained hash of the block being filled, when tokens were fed
    /// past the last full block: the trailing partial block the EPP's
    /// `prefixhash` hashes too (`getKVCacheBlocksFromTokens` yields the
    /// last, shorter slice). It covers exactly the tokens fed so far, so a
    /// block holding more of the same content hashes differently, as a
    /// hash over different token ids would.
    pub fn partial(&self) -> Option<u64> {
        let (id, offset, len) = self.piece?;
        let mixed = if self.mixed.0 == id {
            self.mixed.1
        } else {
            mix64(id)
        };
        Some(combine(self.hash, mixed, offset, len))
    }
}

/// Hashes of every full block of `prompt` at `block_size`.
pub fn block_hashes(prompt: &Prompt, block_size: u32) -> Vec<u64> {
    let mut hasher = BlockHasher::new(block_size);
    for segment in &prompt.segments {
        hasher.feed_segment(*segment);
    }
    hasher.hashes
}

#[cfg(test)]
mod tests {
    use super::{Prompt, Segment, block_hashes};
    use proptest::prelude::*;

    fn seg(id: u64, tokens: u32) -> Segment {
        Segment { id, tokens }
    }

    #[test]
    fn shared_leading_segments_share_block_hashes() {
        let a = Prompt::new(vec![seg(1, 512), seg(2, 100)]);
        let b = Prompt::new(vec![seg(1, 512), seg(3, 100)]);
        let (ha, hb) = (block_hashes(&a, 16), block_hashes(&b, 16));
        assert_eq!(ha.len(), 38);
        assert_eq!(ha[..32], hb[..32]);
        assert_ne!(ha[32], hb[32]);
    }

    #[test]
    fn a_block_hash_does_not_depend_on_how_its_tokens_were_fed() {
        // A prompt's tail then an output fed one token at a time hashes as
        // the same prompt followed by the output as one segment.
        let mut decoded = super::BlockHasher::new(16);
        decoded.feed_segment(seg(1, 40));
        for i in 0..30 {
            decoded.feed(7, i, 1);
        }
        let repeated = block_hashes(&Prompt::new(vec![seg(1, 40), seg(7, 30)]), 16);
        assert_eq!(decoded.hashes, repeated);
        assert_eq!(repeated.len(), 4);
        // A gap in the offsets is other content: the block holding the gap
        // (tokens 48-63) and every block after it differ.
        let mut gapped = super::BlockHasher::new(16);
        gapped.feed_segment(seg(1, 40));
        gapped.feed(7, 0, 10);
        gapped.feed(7, 11, 20);
        assert_eq!(gapped.hashes[..3], repeated[..3]);
        assert_ne!(gapped.hashes[3], repeated[3]);
    }

    #[test]
    fn a_partial_block_hashes_its_own_tokens_only() {
        let hash = |segments: Vec<Segment>| {
            let mut h = super::BlockHasher::new(16);
            for s in segments {
                h.feed_segment(s);
            }
            (h.hashes.clone(), h.partial())
        };
        // 40 tokens: two full blocks and a partial one of 8.
        let (full, partial) = hash(vec![seg(1, 40)]);
        assert_eq!(full.len(), 2);
        let partial = partial.expect("8 tokens past the last full block");
        // The same 40 tokens fed in two segments of the same content: same.
        let mut split = super::BlockHasher::new(16);
        split.feed(1, 0, 35);
        split.feed(1, 35, 5);
        assert_eq!(split.partial(), Some(partial));
        // One more token of that content is another partial block.
        assert_ne!(hash(vec![seg(1, 41)]).1, Some(partial));
        // So is the same length of other content after the same blocks.
        let (other_full, other) = hash(vec![seg(1, 32), seg(2, 8)]);
        assert_eq!(other_full, full);
        assert_ne!(other, Some(partial));
        // A prompt that ends on a block boundary has none; the partial hash
        // is not the next full block's either.
        assert_eq!(hash(vec![seg(1, 32)]).1, None);
        assert_ne!(hash(vec![seg(1, 48)]).0[2], partial);
        // A block mixing two segments chains both pieces.
        let (_, mixed) = hash(vec![seg(1, 36), seg(2, 4)]);
        assert_ne!(mixed, hash(vec![seg(1, 40)]).1);
        assert_ne!(mixed, hash(vec![seg(1, 32), seg(2, 8)]).1);
    }

    #[test]
    fn a_block_hash_depends_on_everything_before_it() {
        // Same second segment after different first ones: no shared block.
        let a = Prompt::new(vec![seg(1, 16), seg(9, 32)]);
        let b = Prompt::new(vec![seg(2, 16), seg(9, 32)]);
        let (ha, hb) = (block_hashes(&a, 16), block_hashes(&b, 16));
        assert!(ha.iter().zip(&hb).all(|(x, y)| x != y));
    }

    /// The block walk as it was before its fast paths (one token, whole
    /// blocks of one segment), kept to check them against.
    fn feed_reference(h: &mut super::BlockHasher, id: u64, start: u32, tokens: u32) {
        let mut offset = start;
        let mut left = tokens;
        while left > 0 {
            let take = left.min(h.block_size - h.filled);
            match &mut h.piece {
                Some((piece_id, first, len)) if *piece_id == id && *first + *len == offset => {
                    *len += take;
                }
                _ => {
                    h.flush_piece();
                    h.piece = Some((id, offset, take));
                }
            }
            h.filled += take;
            offset += take;
            left -= take;
            if h.filled == h.block_size {
                h.flush_piece();
                h.hashes.push(h.hash);
                h.filled = 0;
            }
        }
    }

    proptest! {
        /// Feeding through the fast paths gives every hash, and the open
        /// block's partial hash, that the plain block walk gives, whatever
        /// the pieces: runs continued or not, single tokens, long segments.
        #[test]
        fn the_fast_paths_hash_as_the_block_walk(
            block in 1u32..80,
            pieces in prop::collection::vec((0u64..4, 0u32..3, 0u32..300), 0..40),
        ) {
            let mut fast = super::BlockHasher::new(block);
            let mut slow = super::BlockHasher::new(block);
            // Offsets continue the segment's last piece unless told to jump.
            let mut next = [0u32; 4];
            for (id, jump, tokens) in pieces {
                let tokens = if jump == 0 { tokens % 3 } else { tokens };
                let start = next[id as usize] + if jump == 2 { 7 } else { 0 };
                fast.feed(id, start, tokens);
                feed_reference(&mut slow, id, start, tokens);
                next[id as usize] = start + tokens;
                prop_assert_eq!(&fast.hashes, &slow.hashes);
                prop_assert_eq!(fast.partial(), slow.partial());
            }
        }

        /// Splitting the same content at a different block size never makes
        /// prompts that differ early agree later, and equal prefixes agree at
        /// every block size.
        #[test]
        fn equal_prefixes_agree_at_every_block_size(
            shared in prop::collection::vec((0u64..50, 1u32..300), 1..5),
            tail_a in 1u64..1000, tail_b in 1001u64..2000, block in 1u32..700,
        ) {
            let shared: Vec<Segment> = shared.into_iter().map(|(i, t)| seg(i, t)).collect();
            let shared_tokens: u64 = shared.iter().map(|s| s.tokens as u64).sum();
            let mut a = shared.clone();
            a.push(seg(tail_a, 64));
            let mut b = shared;
            b.push(seg(tail_b, 64));
            let (ha, hb) = (block_hashes(&Prompt::new(a), block), block_hashes(&Prompt::new(b), block));
            let common = (shared_tokens / block as u64) as usize;
            prop_assert_eq!(&ha[..common], &hb[..common]);
            if ha.len() > common && hb.len() > common {
                prop_assert_ne!(ha[common], hb[common]);
            }
        }
    }
}
