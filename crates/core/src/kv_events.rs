//! KV-cache events as a vLLM engine publishes them (`vllm/distributed/
//! kv_events.py`: `BlockStored`, `BlockRemoved`, batched per scheduler step
//! into a `KVEventBatch`), in a flat form an engine fills and a router's
//! KV-block index reads without per-event allocation.

use std::ops::Range;

/// Where a block lives: vLLM's GPU block pool (`medium="GPU"`) or the
/// OffloadingConnector's host tier (`medium="CPU"`). The indexer lower-cases
/// the medium (`pkg/kvevents/pool.go`, `normalizeDeviceTier`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Medium {
    Gpu,
    Cpu,
}

/// A run of tokens of one content segment (see `prompt.rs`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Piece {
    pub id: u64,
    pub start: u32,
    pub len: u32,
}

/// One event; ranges index the batch's `hashes` and `pieces`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum KvEvent {
    /// Blocks entered the cache: their engine hashes, the hash of the block
    /// before the first (`parent_block_hash`, `None` at the start of a
    /// sequence) and their tokens. The offload tier's stores carry no
    /// tokens and no parent (`OffloadingConnectorScheduler.take_events`).
    Stored {
        medium: Medium,
        parent: Option<u64>,
        hashes: Range<u32>,
        pieces: Range<u32>,
    },
    /// Blocks left the cache.
    Removed { medium: Medium, hashes: Range<u32> },
}

/// The events of one engine step, in the order the engine queued them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct KvEventBatch {
    pub events: Vec<KvEvent>,
    pub hashes: Vec<u64>,
    pub pieces: Vec<Piece>,
}

impl KvEventBatch {
    pub fn is_empty(&self) -> bool {
        self.events.is_empty()
    }

    pub fn clear(&mut self) {
        self.events.clear();
        self.hashes.clear();
        self.pieces.clear();
    }

    /// Queues a store of the blocks `hashes`, chained after `parent`, holding
    /// `pieces` of content (none for the offload tier).
    pub fn stored(
        &mut self,
        medium: Medium,
        parent: Option<u64>,
        hashes: &[u64],
        pieces: impl IntoIterator<Item = Piece>,
    ) {
        let at = self.hashes.len() as u32;
        self.hashes.extend_from_slice(hashes);
        let first_piece = self.pieces.len() as u32;
        self.pieces.extend(pieces);
        self.events.push(KvEvent::Stored {
            medium,
            parent,
            hashes: at..self.hashes.len() as u32,
            pieces: first_piece..self.pieces.len() as u32,
        });
    }

    /// Queues a removal of one block.
    pub fn removed(&mut self, medium: Medium, hash: u64) {
        let at = self.hashes.len() as u32;
        self.hashes.push(hash);
        // Consecutive removals of one medium share an event, as vLLM's
        // offloading manager batches its keys.
        if let Some(KvEvent::Removed { medium: m, hashes }) = self.events.last_mut()
            && *m == medium
            && hashes.end == at
        {
            hashes.end = at + 1;
            return;
        }
        self.events.push(KvEvent::Removed {
            medium,
            hashes: at..at + 1,
        });
    }

    pub fn hashes_of(&self, range: &Range<u32>) -> &[u64] {
        &self.hashes[range.start as usize..range.end as usize]
    }

    pub fn pieces_of(&self, range: &Range<u32>) -> &[Piece] {
        &self.pieces[range.start as usize..range.end as usize]
    }
}

#[cfg(test)]
mod tests {
    use super::{KvEvent, KvEventBatch, Medium, Piece};

    #[test]
    fn stored_events_index_their_hashes_and_pieces() {
        let mut batch = KvEventBatch::default();
        batch.removed(Medium::Gpu, 9);
        let piece = Piece {
            id: 4,
            start: 0,
            len: 32,
        };
        batch.stored(Medium::Gpu, Some(9), &[1, 2], [piece]);
        batch.stored(Medium::Cpu, None, &[3], []);
        assert_eq!(
            batch.events[1..],
            [
                KvEvent::Stored {
                    medium: Medium::Gpu,
                    parent: Some(9),
                    hashes: 1..3,
                    pieces: 0..1,
                },
                KvEvent::Stored {
                    medium: Medium::Cpu,
                    parent: None,
                    hashes: 3..4,
                    pieces: 1..1,
                },
            ]
        );
        assert_eq!(batch.hashes_of(&(1..3)), [1, 2]);
        assert_eq!(batch.pieces_of(&(0..1)), [piece]);
    }
}
