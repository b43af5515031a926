//! `requestcontrol/dataproducer/prefixhash/hashing.go`: the block hashes
//! the prefix-aware producers (approx and burst) derive from a tokenized
//! prompt, so that both see the same blocks for the same request.

use pdsim_core::Prompt;
use pdsim_core::prompt::BlockHasher;

/// `GetBlockHashes` for pdsim's one prompt per request: the chained hash
/// of every `block`-token slice of the prompt, the last, shorter slice
/// included (`getKVCacheBlocksFromTokens` yields it), at most `max_blocks`
/// of them (`computeBlockHashes` stops at the cap). Hashing stops feeding
/// once the cap is reached, so a long prompt costs no more than its
/// capped blocks.
pub(crate) fn block_hashes(prompt: &Prompt, block: u32, max_blocks: usize) -> Vec<u64> {
    let mut hasher = BlockHasher::new(block);
    for segment in &prompt.segments {
        hasher.feed_segment(*segment);
        if hasher.full_blocks() >= max_blocks {
            break;
        }
    }
    let partial = hasher.partial();
    let mut hashes = hasher.hashes;
    hashes.extend(partial);
    hashes.truncate(max_blocks);
    hashes
}

#[cfg(test)]
mod tests {
    use super::block_hashes;
    use pdsim_core::{Prompt, Segment};

    #[test]
    fn a_prompt_hashes_its_full_blocks_then_its_tail_up_to_the_cap() {
        // `TestGetKVCacheBlocksFromTokens`: 10 tokens at 4 per block are
        // blocks of 4, 4 and 2.
        let ten = Prompt::new(vec![Segment { id: 1, tokens: 10 }]);
        assert_eq!(block_hashes(&ten, 4, 2048).len(), 3);
        // An even split has no partial block.
        let eight = Prompt::new(vec![Segment { id: 1, tokens: 8 }]);
        assert_eq!(block_hashes(&eight, 4, 2048).len(), 2);
        assert_eq!(
            block_hashes(&ten, 4, 2048)[..2],
            block_hashes(&eight, 4, 2048)[..]
        );
        // The cap keeps the leading blocks.
        assert_eq!(block_hashes(&ten, 4, 2), block_hashes(&eight, 4, 2048));
        assert!(block_hashes(&Prompt::default(), 4, 2048).is_empty());
    }
}
