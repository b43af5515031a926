//! A least-recently-used map from 64-bit keys (block hashes) to values,
//! with O(1) touch and eviction: a hash table of slot numbers into a slab
//! of nodes linked from most to least recently used, so an entry costs
//! four bytes of table, its node and its value, and evicted slots are
//! reused. [`Lru`] is the set (no value). Hand-written rather than a
//! crate's because the order of evictions must be exactly the order of
//! last use for runs to be reproducible, and its users (the offload tier,
//! the EPP's approx prefix index, the precise index's key map) need only
//! these few operations.
//!
//! Why a table of slots (`hashbrown::HashTable<u32>`) rather than a map
//! from key to slot: these tables hold up to millions of entries and every
//! eviction removes a cold one, whose probe is a cache miss. Four-byte
//! entries make the table a quarter of a `u64 → u32` map's size, and the
//! least recently used entry is found by its slot number, which needs no
//! load of any other node to compare.

use hashbrown::HashTable;
use std::hash::BuildHasher;

const NIL: u32 = u32::MAX;

#[derive(Clone, Debug)]
struct Node<V> {
    key: u64,
    value: V,
    prev: u32,
    next: u32,
}

/// Keys with a value each, least recently used first out.
#[derive(Clone, Debug)]
pub struct LruMap<V> {
    /// The slot of every held key, hashed by the key in its node.
    table: HashTable<u32>,
    nodes: Vec<Node<V>>,
    /// Slots of removed entries, reused before the slab grows.
    free: Vec<u32>,
    head: u32,
    tail: u32,
}

/// A set of keys, least recently used first out.
pub type Lru = LruMap<()>;

/// The hash a `hashbrown` table of block hashes files a key under:
/// FxHash, which is deterministic (no random seed) and cheap; the keys are
/// already well mixed block hashes. Shared with the engine's block pool.
pub fn table_hash(key: u64) -> u64 {
    rustc_hash::FxBuildHasher.hash_one(key)
}

impl<V> Default for LruMap<V> {
    fn default() -> LruMap<V> {
        LruMap {
            table: HashTable::new(),
            nodes: Vec::new(),
            free: Vec::new(),
            head: NIL,
            tail: NIL,
        }
    }
}

impl<V: Default> LruMap<V> {
    pub fn len(&self) -> usize {
        self.table.len()
    }

    pub fn is_empty(&self) -> bool {
        self.table.is_empty()
    }

    /// The slot holding `key`.
    fn find(&self, key: u64) -> Option<u32> {
        let nodes = &self.nodes;
        self.table
            .find(table_hash(key), |&slot| nodes[slot as usize].key == key)
            .copied()
    }

    pub fn contains(&self, key: u64) -> bool {
        self.find(key).is_some()
    }

    fn unlink(&mut self, slot: u32) {
        let (prev, next) = (
            self.nodes[slot as usize].prev,
            self.nodes[slot as usize].next,
        );
        match prev {
            NIL => self.head = next,
            p => self.nodes[p as usize].next = next,
        }
        match next {
            NIL => self.tail = prev,
            n => self.nodes[n as usize].prev = prev,
        }
    }

    fn push_front(&mut self, slot: u32) {
        self.nodes[slot as usize].prev = NIL;
        self.nodes[slot as usize].next = self.head;
        if self.head != NIL {
            self.nodes[self.head as usize].prev = slot;
        }
        self.head = slot;
        if self.tail == NIL {
            self.tail = slot;
        }
    }

    /// Makes `key` the most recently used entry, adding it with a default
    /// value if absent; its value, and whether it was added.
    pub fn touch_entry(&mut self, key: u64) -> (&mut V, bool) {
        // One probe of the table whether the key is held or not: the
        // tables are large, and each probe is a likely cache miss.
        let nodes = &self.nodes;
        let entry = self.table.entry(
            table_hash(key),
            |&slot| nodes[slot as usize].key == key,
            |&slot| table_hash(nodes[slot as usize].key),
        );
        let (slot, added) = match entry {
            hashbrown::hash_table::Entry::Occupied(held) => (*held.get(), false),
            hashbrown::hash_table::Entry::Vacant(vacant) => {
                let node = Node {
                    key,
                    value: V::default(),
                    prev: NIL,
                    next: NIL,
                };
                let slot = match self.free.pop() {
                    Some(slot) => {
                        self.nodes[slot as usize] = node;
                        slot
                    }
                    None => {
                        self.nodes.push(node);
                        (self.nodes.len() - 1) as u32
                    }
                };
                vacant.insert(slot);
                (slot, true)
            }
        };
        if !added {
            self.unlink(slot);
        }
        self.push_front(slot);
        (&mut self.nodes[slot as usize].value, added)
    }

    /// The value of `key`, made the most recently used.
    pub fn get_mut(&mut self, key: u64) -> Option<&mut V> {
        let slot = self.find(key)?;
        self.unlink(slot);
        self.push_front(slot);
        Some(&mut self.nodes[slot as usize].value)
    }

    /// The value of `key`, its recency unchanged.
    pub fn peek(&self, key: u64) -> Option<&V> {
        let slot = self.find(key)?;
        Some(&self.nodes[slot as usize].value)
    }

    /// The entries from the least recently used to the most, without
    /// changing their order: for an eviction that must pass over entries
    /// it may not take.
    pub fn iter_lru(&self) -> impl Iterator<Item = (u64, &V)> + '_ {
        let mut slot = self.tail;
        std::iter::from_fn(move || {
            if slot == NIL {
                return None;
            }
            let node = &self.nodes[slot as usize];
            slot = node.prev;
            Some((node.key, &node.value))
        })
    }

    /// The value of `key`, its recency unchanged.
    pub fn peek_mut(&mut self, key: u64) -> Option<&mut V> {
        let slot = self.find(key)?;
        Some(&mut self.nodes[slot as usize].value)
    }

    /// Takes `slot`, already out of the table, out of the order and the
    /// slab.
    fn release(&mut self, slot: u32) -> V {
        self.unlink(slot);
        self.free.push(slot);
        std::mem::take(&mut self.nodes[slot as usize].value)
    }

    /// Removes `key`, returning its value.
    pub fn remove(&mut self, key: u64) -> Option<V> {
        let nodes = &self.nodes;
        let found = self
            .table
            .find_entry(table_hash(key), |&slot| nodes[slot as usize].key == key)
            .ok()?;
        let (slot, _) = found.remove();
        Some(self.release(slot))
    }

    /// Removes and returns the least recently used key and its value.
    pub fn pop_lru(&mut self) -> Option<(u64, V)> {
        let slot = self.tail;
        if slot == NIL {
            return None;
        }
        let key = self.nodes[slot as usize].key;
        // Found by its slot number: no other node is loaded to compare.
        if let Ok(found) = self.table.find_entry(table_hash(key), |&s| s == slot) {
            found.remove();
        }
        Some((key, self.release(slot)))
    }
}

impl LruMap<()> {
    /// Makes `key` the most recently used, adding it if absent; whether it
    /// was added.
    pub fn touch(&mut self, key: u64) -> bool {
        self.touch_entry(key).1
    }
}

#[cfg(test)]
mod tests {
    use super::Lru;

    #[test]
    fn evictions_follow_the_order_of_last_use() {
        let mut lru = Lru::default();
        assert!(lru.touch(1) && lru.touch(2) && lru.touch(3));
        assert!(!lru.touch(1), "already held: moved to the front");
        assert_eq!(lru.pop_lru(), Some((2, ())));
        assert!(lru.touch(4));
        assert_eq!(lru.len(), 3);
        assert!(lru.contains(1) && !lru.contains(2));
        assert_eq!(lru.pop_lru(), Some((3, ())));
        assert_eq!(lru.pop_lru(), Some((1, ())));
        assert_eq!(lru.pop_lru(), Some((4, ())));
        assert_eq!(lru.pop_lru(), None);
        assert!(lru.is_empty());
        // Freed slots are reused.
        lru.touch(5);
        assert_eq!(lru.nodes.len(), 3);
    }

    #[test]
    fn iteration_runs_from_the_least_recent_and_changes_nothing() {
        let mut map: super::LruMap<u32> = super::LruMap::default();
        for key in [5, 6, 7] {
            *map.touch_entry(key).0 = key as u32 * 10;
        }
        map.get_mut(5);
        let order: Vec<(u64, u32)> = map.iter_lru().map(|(k, v)| (k, *v)).collect();
        assert_eq!(order, vec![(6, 60), (7, 70), (5, 50)]);
        assert_eq!(map.peek(7), Some(&70));
        assert_eq!(map.peek(8), None);
        assert_eq!(
            map.pop_lru(),
            Some((6, 60)),
            "peek and iteration kept the order"
        );
    }

    #[test]
    fn a_map_keeps_values_and_returns_them_on_removal() {
        let mut map: super::LruMap<Vec<u32>> = super::LruMap::default();
        map.touch_entry(7).0.push(1);
        map.touch_entry(8).0.push(2);
        assert_eq!(map.touch_entry(7), (&mut vec![1], false));
        assert_eq!(map.get_mut(8), Some(&mut vec![2]));
        // Peeking leaves the order: 7 is still the least recent.
        map.peek_mut(7).unwrap().push(3);
        assert_eq!(map.pop_lru(), Some((7, vec![1, 3])));
        assert_eq!(map.remove(8), Some(vec![2]));
        assert_eq!(map.remove(8), None);
        // A reused slot starts from the default value.
        assert_eq!(map.touch_entry(9), (&mut vec![], true));
    }

    /// One operation of the property test, on a key of a small range so
    /// that operations meet the same keys often.
    #[derive(Clone, Debug)]
    enum Op {
        Touch(u64),
        Get(u64),
        Peek(u64),
        Remove(u64),
        PopLru,
    }

    fn op() -> impl proptest::strategy::Strategy<Value = Op> {
        use proptest::prelude::*;
        prop_oneof![
            4 => (0u64..40).prop_map(Op::Touch),
            1 => (0u64..40).prop_map(Op::Get),
            1 => (0u64..40).prop_map(Op::Peek),
            1 => (0u64..40).prop_map(Op::Remove),
            2 => Just(Op::PopLru),
        ]
    }

    proptest::proptest! {
        /// The map behaves as a list ordered by last use: the reference
        /// keeps (key, value) pairs most recent first and searches it.
        #[test]
        fn the_map_follows_a_list_ordered_by_last_use(ops in proptest::collection::vec(op(), 0..400)) {
            let mut map: super::LruMap<u32> = super::LruMap::default();
            let mut list: Vec<(u64, u32)> = Vec::new();
            for (n, op) in ops.into_iter().enumerate() {
                let n = n as u32;
                let at = |list: &Vec<(u64, u32)>, key| list.iter().position(|&(k, _)| k == key);
                match op {
                    Op::Touch(key) => {
                        let (value, added) = map.touch_entry(key);
                        let held = at(&list, key).map(|i| list.remove(i));
                        proptest::prop_assert_eq!(added, held.is_none());
                        proptest::prop_assert_eq!(*value, held.map_or(0, |(_, v)| v));
                        *value = n;
                        list.insert(0, (key, n));
                    }
                    Op::Get(key) => {
                        let got = map.get_mut(key).map(|v| *v);
                        let held = at(&list, key).map(|i| list.remove(i));
                        proptest::prop_assert_eq!(got, held.map(|(_, v)| v));
                        if let Some(held) = held {
                            list.insert(0, held);
                        }
                    }
                    Op::Peek(key) => {
                        let got = map.peek_mut(key).map(|v| *v);
                        proptest::prop_assert_eq!(got, at(&list, key).map(|i| list[i].1));
                    }
                    Op::Remove(key) => {
                        let held = at(&list, key).map(|i| list.remove(i).1);
                        proptest::prop_assert_eq!(map.remove(key), held);
                    }
                    Op::PopLru => proptest::prop_assert_eq!(map.pop_lru(), list.pop()),
                }
                proptest::prop_assert_eq!(map.len(), list.len());
                for key in 0..40 {
                    proptest::prop_assert_eq!(map.contains(key), at(&list, key).is_some());
                }
                // The slab never holds more nodes than the most entries held
                // at once: freed slots are reused.
                proptest::prop_assert!(map.nodes.len() <= 40);
            }
        }
    }
}
