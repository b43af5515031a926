//! The prefix cache's index as a tree of hash chains: what vLLM's
//! `BlockHashToBlockMap` (`vllm/v1/core/block_pool.py`) answers, kept where
//! a request's blocks sit side by side.
//!
//! vLLM maps each cached block hash to the blocks holding it, one hash
//! table probe for every block cached, every cached block reused and every
//! block of a prompt looked up. The hashes are random, so on a trace of long
//! prompts nearly every probe misses the processor's caches: the table was
//! about a third of the peer benchmark (benches/README.md, thirteenth
//! session). But block hashes are cumulative (a block's hash covers the
//! whole prefix before it), so the hashes a request caches form a chain,
//! and the chains of all requests form a tree. Here each node of that tree
//! is a run of consecutive chain positions no chain branches inside, with
//! the hash and the block of each position in two arrays, and one table
//! links each node to those continuing it. Caching the next block of a
//! request appends to its node; a lookup compares a prompt with a node at
//! the node's last position (equal there, equal all along) and
//! binary-searches inside only where they part; a reused block is dropped
//! from its position directly. The probes are per node, not per block.
//!
//! It answers exactly as the map does:
//!
//! * A position holds the blocks that cached its hash in the order they
//!   did; the first is the one a lookup returns (`get_one_block`), and when
//!   it is reused the next takes its place (`BlockHashToBlockMap.pop`).
//!   Duplicates (two requests filling the same block in one step) are kept
//!   per hash, as the pool kept them.
//! * A lookup walks a prompt's hashes from the first and stops at the first
//!   one nobody caches (`find_longest_cache_hit`). A position whose blocks
//!   were all reused becomes a hole that stops the walk, and is trimmed
//!   away once nothing is cached after it. vLLM frees a request's blocks
//!   tail first (`SingleTypeKVCacheManager.free`), so the least recently
//!   freed cached block is always at the end of its chain and holes do not
//!   arise in practice (a probe over about 90 million cachings and
//!   reuses, swarm seeds included, found none); they are handled so that
//!   any order gives the map's answers.
//!
//! Nothing that shapes a result iterates a hash map (only
//! [`ChainIndex::check`] counts over one), so no iteration order reaches a
//! result.

use rustc_hash::FxHashMap;

const NO: u32 = u32::MAX;

/// A run of chain positions: their hashes, their first blocks (`NO` for a
/// hole), and how many nodes continue the chain after the last one.
#[derive(Clone, Debug, Default)]
struct Node {
    hashes: Vec<u64>,
    blocks: Vec<u32>,
    /// Positions holding no block.
    holes: u32,
    /// The node this one continues (`NO` for a chain's first node) and
    /// the hash it is found by there (its first position's).
    parent: u32,
    key: u64,
    /// Nodes continuing this one ([`ChainIndex::links`]).
    continuations: u32,
}

/// The index of one block pool's cached hashes.
#[derive(Clone, Debug, Default)]
pub struct ChainIndex {
    nodes: Vec<Node>,
    free_nodes: Vec<u32>,
    /// (node continued, or `NO` for a chain's start; first hash) → the
    /// node continuing there. One table for every node's continuations, so
    /// a node continued by thousands of chains (a shared system prompt)
    /// finds and drops each with one probe.
    links: FxHashMap<(u32, u64), u32>,
    /// Per block id: the (node, offset) of the position it caches, `NO`
    /// while it caches none.
    at: Vec<(u32, u32)>,
    /// Blocks holding a hash after the position's first block, oldest first.
    dups: FxHashMap<u64, Vec<u32>>,
}

impl ChainIndex {
    /// Makes room for block ids below `blocks`.
    pub fn grow(&mut self, blocks: usize) {
        if self.at.len() < blocks {
            self.at.resize(blocks, (NO, NO));
        }
    }

    fn alloc(&mut self, node: Node) -> u32 {
        match self.free_nodes.pop() {
            Some(n) => {
                self.nodes[n as usize] = node;
                n
            }
            None => {
                self.nodes.push(node);
                (self.nodes.len() - 1) as u32
            }
        }
    }

    /// A new node of one position, continuing `parent` (or a chain's first).
    fn start(&mut self, hash: u64, block: u32, parent: u32) {
        let n = self.alloc(Node {
            hashes: vec![hash],
            blocks: vec![block],
            holes: 0,
            parent,
            key: hash,
            continuations: 0,
        });
        self.links.insert((parent, hash), n);
        if parent != NO {
            self.nodes[parent as usize].continuations += 1;
        }
        self.at[block as usize] = (n, 0);
    }

    /// Splits node `n` before offset `at`: a new node takes the positions
    /// before it and `n` keeps the rest and its continuations (so their
    /// links stand), continuing the new one.
    fn split(&mut self, n: u32, at: usize) {
        let node = &mut self.nodes[n as usize];
        let tail_hashes = node.hashes.split_off(at);
        let tail_blocks = node.blocks.split_off(at);
        let head_hashes = std::mem::replace(&mut node.hashes, tail_hashes);
        let head_blocks = std::mem::replace(&mut node.blocks, tail_blocks);
        let head_holes = head_blocks.iter().filter(|&&b| b == NO).count() as u32;
        node.holes -= head_holes;
        let (parent, key) = (node.parent, node.key);
        let tail_key = node.hashes[0];
        let h = self.alloc(Node {
            hashes: head_hashes,
            blocks: head_blocks,
            holes: head_holes,
            parent,
            key,
            continuations: 1,
        });
        let node = &mut self.nodes[n as usize];
        node.parent = h;
        node.key = tail_key;
        self.links.insert((parent, key), h);
        self.links.insert((h, tail_key), n);
        for node in [h, n] {
            for i in 0..self.nodes[node as usize].hashes.len() {
                let (hash, block) = {
                    let x = &self.nodes[node as usize];
                    (x.hashes[i], x.blocks[i])
                };
                if block == NO {
                    continue;
                }
                self.at[block as usize] = (node, i as u32);
                if let Some(dups) = self.dups.get(&hash) {
                    for &d in dups {
                        self.at[d as usize] = (node, i as u32);
                    }
                }
            }
        }
    }

    /// `block` caches `hash`, the chain position after the one `parent`
    /// caches (`None`: a chain's first position).
    pub fn cache(&mut self, block: u32, hash: u64, parent: Option<u32>) {
        let (n, o) = match parent {
            None => match self.links.get(&(NO, hash)) {
                Some(&n) => (n, 0),
                None => {
                    self.start(hash, block, NO);
                    return;
                }
            },
            Some(p) => {
                let (mut pn, po) = self.at[p as usize];
                assert!(pn != NO, "block {p} continues a chain but caches nothing");
                let next = po as usize + 1;
                let node = &self.nodes[pn as usize];
                if next < node.hashes.len() {
                    if node.hashes[next] == hash {
                        (pn, next as u32)
                    } else {
                        // The parent's position ends the new head.
                        self.split(pn, next);
                        pn = self.nodes[pn as usize].parent;
                        self.start(hash, block, pn);
                        return;
                    }
                } else if let Some(&c) = self.links.get(&(pn, hash)) {
                    (c, 0)
                } else if node.continuations == 0 {
                    let node = &mut self.nodes[pn as usize];
                    node.hashes.push(hash);
                    node.blocks.push(block);
                    self.at[block as usize] = (pn, next as u32);
                    return;
                } else {
                    self.start(hash, block, pn);
                    return;
                }
            }
        };
        // The position exists: its hole filled, or one more block of it.
        let node = &mut self.nodes[n as usize];
        if node.blocks[o as usize] == NO {
            node.blocks[o as usize] = block;
            node.holes -= 1;
        } else {
            self.dups.entry(hash).or_default().push(block);
        }
        self.at[block as usize] = (n, o);
    }

    /// `block` no longer caches `hash` (it is being reused).
    pub fn uncache(&mut self, hash: u64, block: u32) {
        let (n, o) = std::mem::replace(&mut self.at[block as usize], (NO, NO));
        assert!(n != NO, "block {block} caches nothing");
        let first = self.nodes[n as usize].blocks[o as usize];
        if first != block {
            if let Some(dups) = self.dups.get_mut(&hash) {
                dups.retain(|&d| d != block);
                if dups.is_empty() {
                    self.dups.remove(&hash);
                }
            }
            return;
        }
        if let Some(dups) = self.dups.get_mut(&hash) {
            self.nodes[n as usize].blocks[o as usize] = dups.remove(0);
            if dups.is_empty() {
                self.dups.remove(&hash);
            }
            return;
        }
        let node = &mut self.nodes[n as usize];
        node.blocks[o as usize] = NO;
        node.holes += 1;
        self.trim(n);
    }

    /// Drops the holes at the end of `n` and of the nodes it continues
    /// once nothing is cached after them.
    fn trim(&mut self, mut n: u32) {
        loop {
            let node = &mut self.nodes[n as usize];
            if node.continuations > 0 {
                return;
            }
            while node.blocks.last() == Some(&NO) {
                node.blocks.pop();
                node.hashes.pop();
                node.holes -= 1;
            }
            if !node.hashes.is_empty() {
                return;
            }
            let (parent, key) = (node.parent, node.key);
            self.free_nodes.push(n);
            self.links.remove(&(parent, key));
            if parent == NO {
                return;
            }
            self.nodes[parent as usize].continuations -= 1;
            n = parent;
        }
    }

    /// How many of `hashes`' first `max` positions are cached, walking from
    /// the first and stopping at the first that is not; `visit` sees their
    /// first blocks in order, a node's run at a time.
    pub fn walk(&self, hashes: &[u64], max: usize, mut visit: impl FnMut(&[u32])) -> usize {
        let max = max.min(hashes.len());
        let h = |i: usize| hashes[i].max(1);
        let (mut from, mut pos) = (NO, 0usize);
        while pos < max {
            let Some(&n) = self.links.get(&(from, h(pos))) else {
                break;
            };
            let node = &self.nodes[n as usize];
            let take = node.hashes.len().min(max - pos);
            // Position 0 of the node matched on the way in (its key).
            let matched = if node.holes == 0 {
                if node.hashes[take - 1] == h(pos + take - 1) {
                    take
                } else {
                    // Cumulative hashes: the matches are a prefix.
                    let (mut lo, mut hi) = (0, take - 1);
                    while hi - lo > 1 {
                        let mid = (lo + hi) / 2;
                        if node.hashes[mid] == h(pos + mid) {
                            lo = mid;
                        } else {
                            hi = mid;
                        }
                    }
                    lo + 1
                }
            } else {
                (0..take)
                    .take_while(|&i| node.blocks[i] != NO && node.hashes[i] == h(pos + i))
                    .count()
            };
            visit(&node.blocks[..matched]);
            pos += matched;
            if matched < node.hashes.len() {
                break;
            }
            from = n;
        }
        pos
    }

    /// Checks the index's own invariants: each node's hole and
    /// continuation counts, no node ending in a hole with nothing after it,
    /// no empty node in the tree, every node linked from the node it
    /// continues, and every block's position holding it. For `--check` and
    /// tests; O(positions).
    pub fn check(&self) -> Result<(), String> {
        let free: std::collections::BTreeSet<u32> = self.free_nodes.iter().copied().collect();
        let mut continuations = vec![0u32; self.nodes.len()];
        for (&(parent, key), &n) in &self.links {
            let node = self.nodes.get(n as usize).filter(|_| !free.contains(&n));
            if node.is_none_or(|x| x.parent != parent || x.key != key) {
                return Err(format!("chain link ({parent}, {key:x}) → {n} is stale"));
            }
            if parent != NO {
                continuations[parent as usize] += 1;
            }
        }
        for (i, node) in self.nodes.iter().enumerate() {
            let n = i as u32;
            if free.contains(&n) {
                continue;
            }
            let holes = node.blocks.iter().filter(|&&b| b == NO).count() as u32;
            if holes != node.holes || node.hashes.len() != node.blocks.len() {
                return Err(format!(
                    "chain node {n}: {holes} holes counted {}",
                    node.holes
                ));
            }
            if node.continuations != continuations[i] {
                return Err(format!("chain node {n}: continuations miscounted"));
            }
            if node.hashes.is_empty() {
                return Err(format!("chain node {n} is empty but in the tree"));
            }
            if node.continuations == 0 && node.blocks.last() == Some(&NO) {
                return Err(format!(
                    "chain node {n} ends in a hole with nothing after it"
                ));
            }
            if self.links.get(&(node.parent, node.key)) != Some(&n) || node.hashes[0] != node.key {
                return Err(format!("chain node {n} is not linked where it continues"));
            }
        }
        for (block, &(n, o)) in self.at.iter().enumerate() {
            if n == NO {
                continue;
            }
            let node = &self.nodes[n as usize];
            let first = node.blocks.get(o as usize).copied();
            let dup = self
                .dups
                .get(&node.hashes[o as usize])
                .is_some_and(|d| d.contains(&(block as u32)));
            if first != Some(block as u32) && !dup {
                return Err(format!("block {block} is not at its chain position"));
            }
        }
        Ok(())
    }

    /// The first block caching `hash`, found by a scan of every node: for
    /// tests and checks, which ask by hash alone; the scheduler walks.
    pub fn find(&self, hash: u64) -> Option<u32> {
        let free: std::collections::BTreeSet<u32> = self.free_nodes.iter().copied().collect();
        self.nodes
            .iter()
            .enumerate()
            .filter(|(i, _)| !free.contains(&(*i as u32)))
            .find_map(|(_, node)| {
                let i = node.hashes.iter().position(|&h| h == hash)?;
                (node.blocks[i] != NO).then_some(node.blocks[i])
            })
    }
}

#[cfg(test)]
mod tests {
    use super::ChainIndex;
    use proptest::prelude::*;
    use std::collections::BTreeMap;

    /// Chain `a`'s hashes (see the pool's chain workload): three-letter
    /// tokens picked by `a`'s digits, so chains share prefixes.
    fn chain(a: u32, len: usize) -> Vec<u64> {
        let mut digits = a;
        let mut h = 0x9e37_79b9_7f4a_7c15u64;
        (0..len)
            .map(|_| {
                h = (h ^ u64::from(digits % 3))
                    .wrapping_mul(0x0100_0000_01b3)
                    .rotate_left(17)
                    | 1;
                digits /= 3;
                h
            })
            .collect()
    }

    /// A valid index: a chain of four positions continued two ways after
    /// its second, with a duplicate at its first.
    fn sample() -> ChainIndex {
        let mut index = ChainIndex::default();
        index.grow(16);
        let (a, b) = (chain(0, 4), chain(2, 4)); // part after position 0
        index.cache(1, a[0], None);
        index.cache(2, a[1], Some(1));
        index.cache(3, a[2], Some(2));
        index.cache(4, a[3], Some(3));
        index.cache(5, b[1], Some(1));
        index.cache(6, a[0], None); // a duplicate of position 0
        assert_ne!(a[1], b[1]);
        index.check().expect("a valid index");
        index
    }

    /// A node nothing continues.
    fn leaf(x: &ChainIndex) -> usize {
        x.nodes
            .iter()
            .position(|n| n.continuations == 0)
            .expect("a leaf")
    }

    /// Each invariant `check` states fails on an index broken just there.
    #[test]
    fn a_broken_index_fails_its_check() {
        type Corruption = (&'static str, fn(&mut ChainIndex));
        let broken: [Corruption; 11] = [
            ("hole count", |x| x.nodes[0].holes += 1),
            ("arrays apart", |x| x.nodes[0].hashes.push(7)),
            ("continuations", |x| x.nodes[0].continuations += 1),
            ("empty node", |x| {
                let n = leaf(x);
                let block = x.nodes[n].blocks[0];
                x.at[block as usize] = (super::NO, super::NO);
                x.nodes[n].hashes.clear();
                x.nodes[n].blocks.clear();
            }),
            ("trailing hole", |x| {
                let n = leaf(x);
                let last = x.nodes[n].blocks.len() - 1;
                let block = std::mem::replace(&mut x.nodes[n].blocks[last], super::NO);
                x.nodes[n].holes += 1;
                x.at[block as usize] = (super::NO, super::NO);
            }),
            ("link to a wrong parent", |x| {
                let n = x
                    .nodes
                    .iter()
                    .position(|n| n.parent != super::NO)
                    .expect("one");
                x.nodes[n].parent = super::NO;
            }),
            ("link under a wrong key", |x| x.nodes[1].key ^= 1),
            ("first hash not the key", |x| x.nodes[1].hashes[0] ^= 1),
            ("a chain start linked under another hash", |x| {
                let root = x
                    .nodes
                    .iter()
                    .position(|n| n.parent == super::NO)
                    .expect("one");
                x.links.insert((super::NO, 12_345), root as u32);
            }),
            ("unlinked node", |x| {
                let key = (x.nodes[1].parent, x.nodes[1].key);
                x.links.remove(&key);
            }),
            ("block out of place", |x| {
                let (n, o) = x.at[3];
                x.at[2] = (n, o);
            }),
        ];
        let valid = sample();
        for (what, corrupt) in broken {
            let mut index = valid.clone();
            corrupt(&mut index);
            assert!(index.check().is_err(), "{what}");
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        /// Cached and uncached in any order (holes included, which vLLM's
        /// tail-first frees never make), the index answers as the map of
        /// each hash to its blocks in caching order: a walk stops at the
        /// first hash no block caches and returns each position's first
        /// block, and a hash's first block is the oldest still caching it.
        #[test]
        fn the_index_answers_as_the_map_in_any_order(
            ops in prop::collection::vec((any::<bool>(), 0u32..81, 0usize..6, 0u32..40), 0..400),
        ) {
            let mut index = ChainIndex::default();
            index.grow(40);
            let mut model: BTreeMap<u64, Vec<u32>> = BTreeMap::new();
            let mut caching: Vec<Option<u64>> = vec![None; 40];
            for (step, &(cache, a, k, block)) in ops.iter().enumerate() {
                let hashes = chain(a, 6);
                if cache {
                    if caching[block as usize].is_some() {
                        continue;
                    }
                    let parent = match k.checked_sub(1) {
                        None => None,
                        Some(p) => match model.get(&hashes[p]) {
                            // Any block caching the position before.
                            Some(blocks) => Some(blocks[block as usize % blocks.len()]),
                            None => continue,
                        },
                    };
                    index.cache(block, hashes[k], parent);
                    model.entry(hashes[k]).or_default().push(block);
                    caching[block as usize] = Some(hashes[k]);
                } else if let Some(hash) = caching[block as usize].take() {
                    index.uncache(hash, block);
                    let blocks = model.get_mut(&hash).expect("cached");
                    blocks.retain(|&b| b != block);
                    if blocks.is_empty() {
                        model.remove(&hash);
                    }
                }
                for c in 0..81 {
                    let hashes = chain(c, 6);
                    let mut got = Vec::new();
                    let n = index.walk(&hashes, 6, |run| got.extend_from_slice(run));
                    let want: Vec<u32> = hashes
                        .iter()
                        .map_while(|h| model.get(h).map(|b| b[0]))
                        .collect();
                    prop_assert_eq!(n, want.len(), "step {} chain {}", step, c);
                    prop_assert_eq!(&got, &want, "step {} chain {}", step, c);
                    for h in &hashes {
                        prop_assert_eq!(index.find(*h), model.get(h).map(|b| b[0]));
                    }
                }
                if let Err(e) = index.check() {
                    return Err(TestCaseError::fail(format!("step {step}: {e}")));
                }
            }
        }
    }
}
