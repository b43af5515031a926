//! A least-recently-used map from 64-bit keys (block hashes) to values,
//! with O(1) touch and eviction: a hash map into a slab of nodes linked
//! from most to least recently used, so an entry costs a map slot, 16
//! bytes and its value, and evicted slots are reused. [`Lru`] is the set
//! (no value). Hand-written rather than a crate's because the order of
//! evictions must be exactly the order of last use for runs to be
//! reproducible, and its users (the offload tier, the EPP's approx prefix
//! index, the precise index's key map) need only these few operations.

use rustc_hash::FxHashMap;

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
    map: FxHashMap<u64, u32>,
    nodes: Vec<Node<V>>,
    /// Slots of removed entries, reused before the slab grows.
    free: Vec<u32>,
    head: u32,
    tail: u32,
}

/// A set of keys, least recently used first out.
pub type Lru = LruMap<()>;

impl<V> Default for LruMap<V> {
    fn default() -> LruMap<V> {
        LruMap {
            map: FxHashMap::default(),
            nodes: Vec::new(),
            free: Vec::new(),
            head: NIL,
            tail: NIL,
        }
    }
}

impl<V: Default> LruMap<V> {
    pub fn len(&self) -> usize {
        self.map.len()
    }

    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    pub fn contains(&self, key: u64) -> bool {
        self.map.contains_key(&key)
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
        // One probe of the map whether the key is held or not: the maps
        // are large, and each probe is a likely cache miss.
        let (slot, added) = match self.map.entry(key) {
            std::collections::hash_map::Entry::Occupied(held) => (*held.get(), false),
            std::collections::hash_map::Entry::Vacant(vacant) => {
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
        let slot = *self.map.get(&key)?;
        self.unlink(slot);
        self.push_front(slot);
        Some(&mut self.nodes[slot as usize].value)
    }

    /// The value of `key`, its recency unchanged.
    pub fn peek_mut(&mut self, key: u64) -> Option<&mut V> {
        let slot = *self.map.get(&key)?;
        Some(&mut self.nodes[slot as usize].value)
    }

    /// Removes `key`, returning its value.
    pub fn remove(&mut self, key: u64) -> Option<V> {
        let slot = self.map.remove(&key)?;
        self.unlink(slot);
        self.free.push(slot);
        Some(std::mem::take(&mut self.nodes[slot as usize].value))
    }

    /// Removes and returns the least recently used key and its value.
    pub fn pop_lru(&mut self) -> Option<(u64, V)> {
        let slot = self.tail;
        if slot == NIL {
            return None;
        }
        let key = self.nodes[slot as usize].key;
        self.remove(key).map(|value| (key, value))
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
}
