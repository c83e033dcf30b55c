//! Operator state for one epoch: reads see committed state plus the epoch's
//! own writes; the writes commit together with the epoch.

use std::collections::BTreeMap;
use std::ops::Bound;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use rocksdb::{DB, WriteBatch};

use crate::dataflow::errors::RowErrors;
use crate::error::Result;
use crate::state::{CF_CHANGELOG, CF_ROWS, CF_STATE, cf};

/// A row a window operator refused because its window was already final.
#[derive(Debug, Clone, PartialEq)]
pub struct LateEvent {
    /// The view whose window the row came too late for.
    pub object: String,
    pub event_time: i64,
    pub watermark: i64,
    /// The row, as a JSON object.
    pub row: String,
}

/// A multiplicity or counter kept in state as an `i64`, little-endian.
pub fn read_count(bytes: &[u8]) -> Result<i64> {
    let raw: [u8; 8] = bytes
        .try_into()
        .map_err(|_| crate::error::Error::Internal("a count kept in state is malformed".into()))?;
    Ok(i64::from_le_bytes(raw))
}

/// Writes packed in one buffer: each entry is its key's start, key end and
/// value end (`None` deletes).
#[derive(Default)]
struct LastWrites {
    bytes: Vec<u8>,
    entries: Vec<(usize, usize, Option<usize>)>,
}

impl LastWrites {
    /// Add a write whose key is `parts` joined; returns the bytes it took.
    fn push(&mut self, parts: &[&[u8]], value: Option<&[u8]>) -> usize {
        let start = self.bytes.len();
        for part in parts {
            self.bytes.extend_from_slice(part);
        }
        let key_end = self.bytes.len();
        if let Some(value) = value {
            self.bytes.extend_from_slice(value);
        }
        let end = value.map(|_| self.bytes.len());
        self.entries.push((start, key_end, end));
        self.bytes.len() - start
    }

    /// Into `batch` in key order, which makes RocksDB's memtable inserts
    /// cheap: each search starts where the last one ended. The sort is
    /// stable, so of two writes of one key the later still wins.
    fn drain_into(mut self, batch: &mut WriteBatch, family: &rocksdb::ColumnFamily) {
        let bytes = &self.bytes;
        self.entries
            .sort_by(|a, b| bytes[a.0..a.1].cmp(&bytes[b.0..b.1]));
        for (start, key_end, value_end) in self.entries {
            let key = &self.bytes[start..key_end];
            match value_end {
                Some(end) => batch.put_cf(family, key, &self.bytes[key_end..end]),
                None => batch.delete_cf(family, key),
            }
        }
    }
}

pub struct EpochState {
    db: Arc<DB>,
    /// Processing time of the epoch, microseconds since the Unix epoch.
    pub now: i64,
    /// Late rows seen during the epoch, recorded with it.
    pub late: Vec<LateEvent>,
    /// What the view does with rows its expressions fail on, and those
    /// it met during the epoch, recorded with it.
    pub errors: RowErrors,
    /// Pending writes of this epoch to the state family: `None` deletes.
    writes: BTreeMap<Vec<u8>, Option<Vec<u8>>>,
    /// Pending additions to counts in the state family, merged by RocksDB
    /// so that adding reads nothing; never a key that `writes` holds.
    adds: BTreeMap<Vec<u8>, i64>,
    /// Pending writes to view contents in the rows family.
    rows: BTreeMap<Vec<u8>, Option<Vec<u8>>>,
    /// Pending additions to multiset view rows (merged by summing counts).
    added: Vec<(Vec<u8>, Vec<u8>)>,
    /// Log chunks appended this epoch.
    log: Vec<(Vec<u8>, Vec<u8>)>,
    /// State writes made as the epoch ends, applied after `writes`.
    last: LastWrites,
    /// View rows written once in the epoch by a view that reads none back,
    /// applied after `rows`.
    rows_last: LastWrites,
    /// Bytes written so far, roughly: keys and values, overwrites counted
    /// again; shared by every task of a dataflow, which sizes its epochs by it.
    bytes: Arc<AtomicUsize>,
}

impl EpochState {
    pub fn new(db: Arc<DB>) -> EpochState {
        EpochState::with_budget(db, Arc::default())
    }

    /// State whose writes are counted in `bytes`, with other tasks' writes.
    pub fn with_budget(db: Arc<DB>, bytes: Arc<AtomicUsize>) -> EpochState {
        EpochState {
            db,
            now: 0,
            late: Vec::new(),
            errors: RowErrors::default(),
            writes: BTreeMap::new(),
            adds: BTreeMap::new(),
            rows: BTreeMap::new(),
            added: Vec::new(),
            log: Vec::new(),
            last: LastWrites::default(),
            rows_last: LastWrites::default(),
            bytes,
        }
    }

    /// Whether the epoch changed anything.
    pub fn is_empty(&self) -> bool {
        self.writes.is_empty()
            && self.adds.is_empty()
            && self.rows.is_empty()
            && self.added.is_empty()
            && self.log.is_empty()
            && self.last.entries.is_empty()
            && self.rows_last.entries.is_empty()
            && self.late.is_empty()
    }

    pub fn get_row(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        if let Some(pending) = self.rows.get(key) {
            return Ok(pending.clone());
        }
        Ok(self.db.get_cf(cf(&self.db, CF_ROWS), key)?)
    }

    /// Bytes of writes pending, roughly.
    pub fn pending_bytes(&self) -> usize {
        self.bytes.load(Ordering::Relaxed)
    }

    /// Count memory an operator holds until the barrier as pending writes.
    pub fn account(&self, bytes: usize) {
        self.count(bytes);
    }

    fn count(&self, bytes: usize) {
        self.bytes.fetch_add(bytes, Ordering::Relaxed);
    }

    pub fn put_row(&mut self, key: Vec<u8>, value: Vec<u8>) {
        self.count(key.len() + value.len());
        self.rows.insert(key, Some(value));
    }

    /// Add to a multiset row's multiplicity without reading it: the value
    /// is `count ++ row`, summed with what is stored when it commits. A key
    /// takes either this or put/delete within one epoch, never both.
    pub fn add_row(&mut self, key: Vec<u8>, value: Vec<u8>) {
        self.count(key.len() + value.len());
        self.added.push((key, value));
    }

    pub fn delete_row(&mut self, key: Vec<u8>) {
        self.count(key.len());
        self.rows.insert(key, None);
    }

    pub fn append_log(&mut self, key: Vec<u8>, chunk: Vec<u8>) {
        self.count(key.len() + chunk.len());
        self.log.push((key, chunk));
    }

    pub fn db(&self) -> &Arc<DB> {
        &self.db
    }

    pub fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        if let Some(pending) = self.writes.get(key) {
            return Ok(pending.clone());
        }
        let stored = self.db.get_cf(cf(&self.db, CF_STATE), key)?;
        match self.adds.get(key) {
            Some(delta) => added(stored.as_deref(), *delta),
            None => Ok(stored),
        }
    }

    /// [`EpochState::get`] of many keys, those not written this epoch read
    /// from RocksDB in one sorted batch.
    pub fn get_many(&self, keys: &[Vec<u8>]) -> Result<Vec<Option<Vec<u8>>>> {
        let mut out = vec![None; keys.len()];
        let mut stored: Vec<usize> = Vec::with_capacity(keys.len());
        for (i, key) in keys.iter().enumerate() {
            match self.writes.get(key) {
                Some(pending) => out[i] = pending.clone(),
                None => stored.push(i),
            }
        }
        stored.sort_unstable_by(|a, b| keys[*a].cmp(&keys[*b]));
        let family = cf(&self.db, CF_STATE);
        let found = self
            .db
            .batched_multi_get_cf(family, stored.iter().map(|i| &keys[*i]), true);
        for (i, value) in stored.into_iter().zip(found) {
            let value = value?.map(|v| v.to_vec());
            out[i] = match self.adds.get(&keys[i]) {
                Some(delta) => added(value.as_deref(), *delta)?,
                None => value,
            };
        }
        Ok(out)
    }

    pub fn put(&mut self, key: Vec<u8>, value: Vec<u8>) {
        self.count(key.len() + value.len());
        self.adds.remove(&key);
        self.writes.insert(key, Some(value));
    }

    pub fn delete(&mut self, key: Vec<u8>) {
        self.count(key.len());
        self.adds.remove(&key);
        self.writes.insert(key, None);
    }

    /// Add `delta` to the count (see [`read_count`]) kept under `key`
    /// without reading it; RocksDB sums the additions when the key is read
    /// or compacted. Only counts may be kept under such a key. A pending
    /// count that comes to zero reads as no entry.
    pub fn add_count(&mut self, key: Vec<u8>, delta: i64) -> Result<()> {
        self.count(key.len() + 8);
        if let Some(pending) = self.writes.get_mut(&key) {
            *pending = added(pending.as_deref(), delta)?;
            return Ok(());
        }
        *self.adds.entry(key).or_insert(0) += delta;
        Ok(())
    }

    /// Write state at the end of the epoch from what an operator keeps in
    /// memory: nothing reads it back before the epoch commits, so it skips
    /// the ordered map reads go through, and it lands after the epoch's
    /// other writes. The key is `parts` joined; `None` deletes.
    pub fn write_last(&mut self, parts: &[&[u8]], value: Option<&[u8]>) {
        let added = self.last.push(parts, value);
        self.count(added);
    }

    /// Write a view row as [`EpochState::write_last`] writes state: for a
    /// view that never reads its own rows back within an epoch; later
    /// writes of a key win.
    pub fn write_row_last(&mut self, parts: &[&[u8]], value: Option<&[u8]>) {
        let added = self.rows_last.push(parts, value);
        self.count(added);
    }

    /// The first (or last) live entry with a key in `[lower, upper)`.
    pub fn first_in(
        &self,
        lower: &[u8],
        upper: &[u8],
        last: bool,
    ) -> Result<Option<(Vec<u8>, Vec<u8>)>> {
        let range = (Bound::Included(lower), Bound::Excluded(upper));
        if self.adds.range::<[u8], _>(range).next().is_some() {
            // Rare enough to answer from a whole scan of the range.
            let mut all = self.scan(lower, upper)?;
            return Ok(if last {
                all.pop()
            } else {
                all.into_iter().next()
            });
        }
        // Bounds keep the iterator from walking through deleted state
        // outside the range (a dropped view leaves tombstones behind).
        let mut options = rocksdb::ReadOptions::default();
        options.set_iterate_range(lower.to_vec()..upper.to_vec());
        let mut committed = self.db.raw_iterator_cf_opt(cf(&self.db, CF_STATE), options);
        let pending = self
            .writes
            .range::<[u8], _>((Bound::Included(lower), Bound::Excluded(upper)));
        let mut pending: Vec<(&Vec<u8>, &Option<Vec<u8>>)> = pending.collect();
        if last {
            pending.reverse();
            committed.seek_for_prev(upper);
            // seek_for_prev lands on `upper` itself when it exists; it is excluded.
            if committed.key() == Some(upper) {
                committed.prev();
            }
        } else {
            committed.seek(lower);
        }
        let mut pending = pending.into_iter().peekable();
        loop {
            let from_db = committed
                .key()
                .filter(|k| *k >= lower && *k < upper)
                .map(|k| k.to_vec());
            let next_pending = pending.peek().map(|(k, _)| (*k).clone());
            let take_pending = match (&from_db, &next_pending) {
                (None, None) => return Ok(None),
                (None, Some(_)) => true,
                (Some(_), None) => false,
                (Some(d), Some(p)) => {
                    if last {
                        p >= d
                    } else {
                        p <= d
                    }
                }
            };
            if take_pending {
                let (key, value) = pending.next().expect("peeked");
                if from_db.as_ref() == Some(key) {
                    step(&mut committed, last);
                }
                if let Some(value) = value {
                    return Ok(Some((key.clone(), value.clone())));
                }
            } else {
                let key = from_db.expect("checked above");
                let value = committed.value().map(<[u8]>::to_vec).unwrap_or_default();
                return Ok(Some((key, value)));
            }
        }
    }

    /// Every live entry with a key in `[lower, upper)`, in key order.
    pub fn scan(&self, lower: &[u8], upper: &[u8]) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        let mut options = rocksdb::ReadOptions::default();
        options.set_iterate_range(lower.to_vec()..upper.to_vec());
        let mut iter = self.db.raw_iterator_cf_opt(cf(&self.db, CF_STATE), options);
        iter.seek(lower);
        let mut merged = BTreeMap::new();
        while let (Some(key), Some(value)) = (iter.key(), iter.value()) {
            merged.insert(key.to_vec(), value.to_vec());
            iter.next();
        }
        iter.status()?;
        let pending = self
            .writes
            .range::<[u8], _>((Bound::Included(lower), Bound::Excluded(upper)));
        for (key, value) in pending {
            match value {
                Some(v) => merged.insert(key.clone(), v.clone()),
                None => merged.remove(key),
            };
        }
        let adds = self
            .adds
            .range::<[u8], _>((Bound::Included(lower), Bound::Excluded(upper)));
        for (key, delta) in adds {
            match added(merged.get(key).map(Vec::as_slice), *delta)? {
                Some(count) => merged.insert(key.clone(), count),
                None => merged.remove(key),
            };
        }
        Ok(merged.into_iter().collect())
    }

    /// Move every pending write into `batch`.
    pub fn drain_into(&mut self, batch: &mut WriteBatch) {
        for (name, writes) in [(CF_STATE, &mut self.writes), (CF_ROWS, &mut self.rows)] {
            let family = cf(&self.db, name);
            for (key, value) in std::mem::take(writes) {
                match value {
                    Some(v) => batch.put_cf(family, key, v),
                    None => batch.delete_cf(family, key),
                }
            }
        }
        let state = cf(&self.db, CF_STATE);
        for (key, delta) in std::mem::take(&mut self.adds) {
            batch.merge_cf(state, key, delta.to_le_bytes());
        }
        std::mem::take(&mut self.last).drain_into(batch, state);
        let rows = cf(&self.db, CF_ROWS);
        std::mem::take(&mut self.rows_last).drain_into(batch, rows);
        for (key, value) in std::mem::take(&mut self.added) {
            batch.merge_cf(rows, key, value);
        }
        let log = cf(&self.db, CF_CHANGELOG);
        for (key, chunk) in std::mem::take(&mut self.log) {
            batch.put_cf(log, key, chunk);
        }
    }
}

/// A stored count (or none) with `delta` added; none when it comes to zero.
fn added(stored: Option<&[u8]>, delta: i64) -> Result<Option<Vec<u8>>> {
    let count = stored.map_or(Ok(0), read_count)? + delta;
    Ok((count != 0).then(|| count.to_le_bytes().to_vec()))
}

fn step(iter: &mut rocksdb::DBRawIterator<'_>, backwards: bool) {
    if backwards {
        iter.prev();
    } else {
        iter.next();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::Store;

    fn commit(store: &Store, mut state: EpochState) {
        let mut batch = WriteBatch::default();
        state.drain_into(&mut batch);
        store.db().write(batch).expect("commit");
    }

    fn count_of(state: &EpochState, key: &[u8]) -> Option<i64> {
        let value = state.get(key).expect("get")?;
        Some(read_count(&value).expect("a count"))
    }

    #[test]
    fn added_counts_read_summed_before_and_after_they_commit() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = Store::open(dir.path()).expect("store");
        let mut state = EpochState::new(store.db().clone());
        state.add_count(b"k1".to_vec(), 1).expect("add");
        state.add_count(b"k1".to_vec(), 2).expect("add");
        state.put(b"k2".to_vec(), 5i64.to_le_bytes().to_vec());
        state.add_count(b"k2".to_vec(), 1).expect("add");
        assert_eq!(count_of(&state, b"k1"), Some(3));
        assert_eq!(count_of(&state, b"k2"), Some(6));
        commit(&store, state);

        let mut state = EpochState::new(store.db().clone());
        assert_eq!(count_of(&state, b"k1"), Some(3), "merged by RocksDB");
        state.add_count(b"k1".to_vec(), 4).expect("add");
        state.add_count(b"k3".to_vec(), 1).expect("add");
        let scanned: Vec<(Vec<u8>, i64)> = state
            .scan(b"k", b"l")
            .expect("scan")
            .into_iter()
            .map(|(k, v)| (k, read_count(&v).expect("a count")))
            .collect();
        let expected = [
            (b"k1".to_vec(), 7),
            (b"k2".to_vec(), 6),
            (b"k3".to_vec(), 1),
        ];
        assert_eq!(scanned, expected);
        let last = state.first_in(b"k", b"l", true).expect("first_in");
        assert_eq!(last.map(|(k, _)| k), Some(b"k3".to_vec()));
        state.add_count(b"k3".to_vec(), -1).expect("add");
        assert_eq!(count_of(&state, b"k3"), None, "a count of zero is no entry");
        commit(&store, state);

        let mut state = EpochState::new(store.db().clone());
        assert_eq!(count_of(&state, b"k1"), Some(7));
        state.add_count(b"k1".to_vec(), 1).expect("add");
        state.delete(b"k1".to_vec());
        assert_eq!(
            count_of(&state, b"k1"),
            None,
            "a delete drops a pending addition"
        );
        commit(&store, state);
        let state = EpochState::new(store.db().clone());
        assert_eq!(count_of(&state, b"k1"), None);
    }
}
