//! A least-recently-used set of 64-bit keys (block hashes) with O(1)
//! touch and eviction: a hash map into a slab of nodes linked from most to
//! least recently used, so an entry costs a map slot and 16 bytes and
//! evicted slots are reused. Hand-written rather than a crate's because
//! the order of evictions must be exactly the order of last use for runs
//! to be reproducible, and both users (the offload tier, the EPP's prefix
//! index) need only these four operations.

use rustc_hash::FxHashMap;

const NIL: u32 = u32::MAX;

#[derive(Clone, Copy, Debug)]
struct Node {
    key: u64,
    prev: u32,
    next: u32,
}

#[derive(Clone, Debug)]
pub struct Lru {
    map: FxHashMap<u64, u32>,
    nodes: Vec<Node>,
    /// Slots of evicted entries, reused before the slab grows.
    free: Vec<u32>,
    head: u32,
    tail: u32,
}

impl Default for Lru {
    fn default() -> Lru {
        Lru {
            map: FxHashMap::default(),
            nodes: Vec::new(),
            free: Vec::new(),
            head: NIL,
            tail: NIL,
        }
    }
}

impl Lru {
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
        let Node { prev, next, .. } = self.nodes[slot as usize];
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

    /// Makes `key` the most recently used entry, adding it if absent.
    /// Returns whether it was added.
    pub fn touch(&mut self, key: u64) -> bool {
        // One probe of the map whether the key is held or not: the tier and
        // the index are large, and each probe is a likely cache miss.
        let (slot, added) = match self.map.entry(key) {
            std::collections::hash_map::Entry::Occupied(held) => (*held.get(), false),
            std::collections::hash_map::Entry::Vacant(vacant) => {
                let node = Node {
                    key,
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
        added
    }

    /// Removes and returns the least recently used key.
    pub fn pop_lru(&mut self) -> Option<u64> {
        let slot = self.tail;
        if slot == NIL {
            return None;
        }
        self.unlink(slot);
        let key = self.nodes[slot as usize].key;
        self.map.remove(&key);
        self.free.push(slot);
        Some(key)
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
        assert_eq!(lru.pop_lru(), Some(2));
        assert!(lru.touch(4));
        assert_eq!(lru.len(), 3);
        assert!(lru.contains(1) && !lru.contains(2));
        assert_eq!(lru.pop_lru(), Some(3));
        assert_eq!(lru.pop_lru(), Some(1));
        assert_eq!(lru.pop_lru(), Some(4));
        assert_eq!(lru.pop_lru(), None);
        assert!(lru.is_empty());
        // Freed slots are reused.
        lru.touch(5);
        assert_eq!(lru.nodes.len(), 3);
    }
}
