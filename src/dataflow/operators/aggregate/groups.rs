//! The aggregate's groups in memory: a slab indexed by group key, the
//! touched groups, and for windowed groups the slab's groups by closing
//! time, so that closing a window visits its groups alone.
//!
//! A key is held once, in its group; the index holds slab positions and
//! finds them by the key's hash. Buckets by closing time may keep the
//! position of a group that has gone (a group whose rows all went); such
//! stale positions are skipped when the bucket is closed.

use std::collections::BTreeMap;

use hashbrown::HashTable;

use super::codec::GroupState;

/// A group's key, held in the group itself up to the size of a windowed
/// key of a few columns: finding a group then reads no second allocation.
pub(super) type GroupKey = smallvec::SmallVec<[u8; 40]>;

/// A group in memory, with the row it last emitted.
pub(super) struct Group {
    pub key: GroupKey,
    pub state: GroupState,
    pub emitted: Option<Vec<u8>>,
    /// Touched since it was last written back.
    pub dirty: bool,
    /// State may hold it: it was read from there or written back. A group
    /// born and closed within one epoch never reaches state.
    pub stored: bool,
    /// The window's end for windowed groups; 0 otherwise.
    pub close: i64,
    /// The key's hash, kept so that taking the group out needs no second.
    pub hash: u64,
    /// Listed among the groups whose window is closing.
    pub closing: bool,
}

/// Which stored groups the cache is known to hold.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Horizon {
    /// Not known yet: found from state at the first miss.
    Unknown,
    /// Every stored group is in the cache.
    All,
    /// Every stored group with a key above this one is in the cache.
    Above(Vec<u8>),
}

impl Horizon {
    /// Whether a group missing from the cache cannot be in state either.
    pub fn rules_out(&self, group: &[u8]) -> bool {
        match self {
            Horizon::Unknown => false,
            Horizon::All => true,
            Horizon::Above(key) => group > key.as_slice(),
        }
    }

    /// Groups up to `key` left the cache.
    pub fn lower_to(&mut self, key: &[u8]) {
        match self {
            Horizon::Unknown => {}
            Horizon::Above(held) if held.as_slice() >= key => {}
            _ => *self = Horizon::Above(key.to_vec()),
        }
    }
}

#[derive(Default)]
pub(super) struct Groups {
    slab: Vec<Option<Group>>,
    free: Vec<u32>,
    index: HashTable<u32>,
    hasher: ahash::RandomState,
    /// Positions of the groups touched since the last flush, so that a
    /// flush visits them alone and an idle view's barriers cost nothing.
    dirty: Vec<u32>,
    /// Windowed groups' positions by closing time.
    by_close: BTreeMap<i64, Vec<u32>>,
    len: usize,
}

impl Groups {
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn hash(&self, key: &[u8]) -> u64 {
        self.hasher.hash_one(key)
    }

    /// The position of the group with `key` (of hash `hash`), marked touched.
    pub fn touch(&mut self, key: &[u8], hash: u64) -> Option<u32> {
        let slab = &self.slab;
        let at = *self.index.find(hash, |at| {
            slab[*at as usize]
                .as_ref()
                .is_some_and(|g| g.key.as_slice() == key)
        })?;
        self.mark(at);
        Some(at)
    }

    fn mark(&mut self, at: u32) {
        let group = self.slab[at as usize]
            .as_mut()
            .expect("indexed groups exist");
        if !group.dirty {
            group.dirty = true;
            self.dirty.push(at);
        }
    }

    /// Add a group, touched; `windowed` files it under its closing time.
    pub fn insert(&mut self, mut group: Group, hash: u64, windowed: bool) -> u32 {
        group.dirty = false;
        group.hash = hash;
        let close = group.close;
        let at = match self.free.pop() {
            Some(at) => {
                self.slab[at as usize] = Some(group);
                at
            }
            None => {
                self.slab.push(Some(group));
                (self.slab.len() - 1) as u32
            }
        };
        let slab = &self.slab;
        self.index.insert_unique(hash, at, |at| {
            slab[*at as usize]
                .as_ref()
                .expect("indexed groups exist")
                .hash
        });
        if windowed {
            self.by_close.entry(close).or_default().push(at);
        }
        self.len += 1;
        self.mark(at);
        at
    }

    /// The group at `at`, if a group is there.
    pub fn find(&self, at: u32) -> Option<&Group> {
        self.slab.get(at as usize).and_then(Option::as_ref)
    }

    pub fn get(&self, at: u32) -> &Group {
        self.slab[at as usize].as_ref().expect("live position")
    }

    pub fn get_mut(&mut self, at: u32) -> &mut Group {
        self.slab[at as usize].as_mut().expect("live position")
    }

    /// The touched groups' positions, clearing the list (not their marks).
    pub fn take_dirty(&mut self) -> Vec<u32> {
        std::mem::take(&mut self.dirty)
    }

    pub fn has_dirty(&self) -> bool {
        !self.dirty.is_empty()
    }

    /// Take a group out of memory.
    pub fn remove(&mut self, at: u32) -> Group {
        let group = self.slab[at as usize].take().expect("live position");
        self.unindex(at, group.hash);
        group
    }

    /// Forget the group at `at`, which is gone or about to go.
    fn unindex(&mut self, at: u32, hash: u64) {
        if let Ok(entry) = self.index.find_entry(hash, |p| *p == at) {
            entry.remove();
        }
        self.free.push(at);
        self.len -= 1;
    }

    pub fn contains(&self, key: &[u8]) -> bool {
        let slab = &self.slab;
        self.index
            .find(self.hash(key), |at| {
                slab[*at as usize]
                    .as_ref()
                    .is_some_and(|g| g.key.as_slice() == key)
            })
            .is_some()
    }

    /// Whether a windowed group in memory closes by `close`.
    pub fn closes_by(&self, close: i64) -> bool {
        self.by_close
            .keys()
            .next()
            .is_some_and(|first| *first <= close)
    }

    /// The positions of the windowed groups that close by `close`, the
    /// earliest closing first, each once. The groups stay where they are,
    /// to be settled in place and then [discarded](Groups::discard).
    pub fn closing(&mut self, close: i64) -> Vec<u32> {
        let later = self.by_close.split_off(&close.saturating_add(1));
        let closing = std::mem::replace(&mut self.by_close, later);
        let mut out = Vec::with_capacity(closing.values().map(Vec::len).sum());
        for (time, positions) in closing {
            for at in positions {
                // A place left by a group and taken by one of the same
                // closing time is listed twice.
                let group = self.slab[at as usize]
                    .as_mut()
                    .filter(|g| g.close == time && !g.closing);
                if let Some(group) = group {
                    group.closing = true;
                    out.push(at);
                }
            }
        }
        out
    }

    /// Drop the group at `at` where it lies.
    pub fn discard(&mut self, at: u32) {
        let hash = self.get(at).hash;
        self.unindex(at, hash);
        self.slab[at as usize] = None;
    }

    /// Drop groups, written back already, until at most `keep` are left,
    /// smallest keys first; returns the largest key dropped. Windowed
    /// groups go a whole closing time at a time, the oldest first, so that
    /// every group left has a key above every one dropped.
    pub fn evict(&mut self, keep: usize, windowed: bool) -> Option<Vec<u8>> {
        if self.len <= keep {
            return None;
        }
        if windowed {
            return self.evict_windows(keep);
        }
        let mut live: Vec<u32> = (0..self.slab.len() as u32)
            .filter(|at| self.slab[*at as usize].is_some())
            .collect();
        let cut = live.len() - keep - 1;
        let slab = &self.slab;
        let key = |at: &u32| slab[*at as usize].as_ref().map(|g| g.key.as_slice());
        live.select_nth_unstable_by(cut, |a, b| key(a).cmp(&key(b)));
        let mut highest: Option<Vec<u8>> = None;
        for at in live.into_iter().take(cut + 1) {
            let group = self.remove(at);
            if highest.as_deref().is_none_or(|h| group.key.as_slice() > h) {
                highest = Some(group.key.to_vec());
            }
        }
        highest
    }

    fn evict_windows(&mut self, keep: usize) -> Option<Vec<u8>> {
        let mut highest: Option<Vec<u8>> = None;
        while self.len > keep {
            let Some((time, positions)) = self.by_close.pop_first() else {
                break;
            };
            for at in positions {
                let live = self.slab[at as usize]
                    .as_ref()
                    .is_some_and(|g| g.close == time);
                if !live {
                    continue;
                }
                let group = self.remove(at);
                if highest.as_deref().is_none_or(|h| group.key.as_slice() > h) {
                    highest = Some(group.key.to_vec());
                }
            }
        }
        highest
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn group(key: &[u8], close: i64) -> Group {
        Group {
            key: key.into(),
            state: GroupState::new(0),
            emitted: None,
            dirty: false,
            stored: false,
            close,
            hash: 0,
            closing: false,
        }
    }

    fn add(groups: &mut Groups, key: &[u8], close: i64, windowed: bool) -> u32 {
        let hash = groups.hash(key);
        groups.insert(group(key, close), hash, windowed)
    }

    #[test]
    fn groups_are_found_by_key_and_touched_once() {
        let mut groups = Groups::default();
        let a = add(&mut groups, b"a", 0, false);
        let b = add(&mut groups, b"b", 0, false);
        assert_eq!(groups.take_dirty(), vec![a, b]);
        for at in [a, b] {
            groups.get_mut(at).dirty = false;
        }
        let hash = groups.hash(b"b");
        assert_eq!(groups.touch(b"b", hash), Some(b));
        assert_eq!(groups.touch(b"b", hash), Some(b));
        assert_eq!(groups.take_dirty(), vec![b]);
        let hash = groups.hash(b"c");
        assert_eq!(groups.touch(b"c", hash), None);
    }

    #[test]
    fn eviction_drops_the_smallest_keys_and_reports_the_largest_dropped() {
        let mut groups = Groups::default();
        for key in [b"d", b"b", b"e", b"a", b"c"] {
            add(&mut groups, key, 0, false);
        }
        assert_eq!(groups.evict(2, false), Some(b"c".to_vec()));
        assert_eq!(groups.len(), 2);
        for (key, kept) in [(b"a", false), (b"c", false), (b"d", true), (b"e", true)] {
            let hash = groups.hash(key);
            assert_eq!(groups.touch(key, hash).is_some(), kept, "{key:?}");
        }
    }

    #[test]
    fn windows_close_and_leave_by_closing_time_whole() {
        let mut groups = Groups::default();
        for (key, close) in [(b"1a", 1), (b"2a", 2), (b"1b", 1), (b"3a", 3), (b"2b", 2)] {
            add(&mut groups, key, close, true);
        }
        assert!(groups.closes_by(1) && !groups.closes_by(0));
        let closing = groups.closing(1);
        let closed: Vec<Vec<u8>> = closing
            .iter()
            .map(|at| groups.get(*at).key.to_vec())
            .collect();
        assert_eq!(closed, vec![b"1a".to_vec(), b"1b".to_vec()]);
        for at in closing {
            groups.discard(at);
        }
        // A group that went leaves its place in its window's bucket; the
        // group that takes the place next is not dropped with that window.
        let hash = groups.hash(b"2a");
        let gone = groups.touch(b"2a", hash).expect("held");
        groups.remove(gone);
        assert_eq!(add(&mut groups, b"4a", 4, true), gone);
        // Keeping one group drops the rest of window 2, then window 3.
        assert_eq!(groups.evict(1, true), Some(b"3a".to_vec()));
        assert_eq!(groups.len(), 1);
        let closing = groups.closing(4);
        assert_eq!(closing.len(), 1);
        groups.discard(closing[0]);
        assert_eq!(groups.len(), 0);
    }

    #[test]
    fn the_horizon_only_rules_out_keys_above_every_dropped_one() {
        let mut horizon = Horizon::All;
        assert!(horizon.rules_out(b"a"));
        horizon.lower_to(b"m");
        assert!(!horizon.rules_out(b"a") && !horizon.rules_out(b"m"));
        assert!(horizon.rules_out(b"n"));
        // Dropping smaller keys later never lowers what is known.
        horizon.lower_to(b"c");
        assert_eq!(horizon, Horizon::Above(b"m".to_vec()));
        // Until state has been looked at, nothing is ruled out.
        let mut unknown = Horizon::Unknown;
        unknown.lower_to(b"z");
        assert!(!unknown.rules_out(b"zz"));
    }
}
