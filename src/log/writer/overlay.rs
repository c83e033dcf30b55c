//! The conflict overlay: a request in a group is checked against the
//! committed rows plus what the requests before it in the same group
//! staged, so two inserts of one key in one group conflict as they would
//! in two groups. What it would change is kept apart until its checks pass.

use std::collections::{HashMap, HashSet};

use rocksdb::DB;

use super::group::Group;
use super::offsets::Offsets;
use super::request::{Change, KeyedRow, MergeFn, Target, UpsertRow, WriteOp, duplicate};
use crate::error::{Error, Result};
use crate::log::embedded::{CHUNK_ROWS, encode_chunk};
use crate::state::{CF_ROWS, cf, keys};

/// A row key (with table prefix) and its new value, `None` to delete it.
type StagedRow = (Vec<u8>, Option<Vec<u8>>);

/// What one request would change, kept apart until its checks pass.
#[derive(Default)]
pub(super) struct Staged {
    pub(super) rows: Vec<StagedRow>,
    pub(super) log: Vec<(Vec<u8>, Vec<u8>)>,
    pub(super) offsets: HashMap<(u64, u32), u64>,
    pub(super) watermark: Option<(u64, i64)>,
}

/// One request being checked: reads go through the group's overlay to
/// the store, and changes are staged apart until every check passes.
pub(super) struct Pending<'g> {
    group: &'g Group,
    offsets: &'g mut Offsets,
    staged: Staged,
    /// Log records per partition, in order.
    records: HashMap<u32, Vec<(i64, Logged)>>,
}

/// A log record's row: bytes of its own, or those of a staged row, which
/// a bulk insert then holds once.
enum Logged {
    Own(Vec<u8>),
    Staged(usize),
}

impl Logged {
    fn bytes<'a>(&'a self, staged: &'a [StagedRow]) -> &'a [u8] {
        match self {
            Logged::Own(row) => row,
            Logged::Staged(at) => staged[*at].1.as_deref().unwrap_or_default(),
        }
    }
}

impl<'g> Pending<'g> {
    pub(super) fn new(group: &'g Group, offsets: &'g mut Offsets) -> Self {
        Pending {
            group,
            offsets,
            staged: Staged::default(),
            records: HashMap::new(),
        }
    }

    pub(super) fn apply(
        &mut self,
        db: &DB,
        target: &Target,
        op: WriteOp,
        watermark: Option<i64>,
    ) -> Result<u64> {
        let count = match op {
            WriteOp::Append { rows } => self.append(target, rows),
            WriteOp::Insert { rows } => self.insert(db, target, rows)?,
            WriteOp::InsertUnkeyed { rows } => self.insert_unkeyed(db, target, rows)?,
            WriteOp::Delete { keys } => self.delete(db, target, keys)?,
            WriteOp::Update { changes } => self.update(db, target, changes)?,
            WriteOp::Upsert { rows } => self.upsert(db, target, rows)?,
            WriteOp::Merge { rows, merge } => self.merge(db, target, rows, &merge.0)?,
        };
        let current = self
            .offsets
            .watermark(db, target.topic, target.partitions)?;
        let after = current.max(watermark);
        if let Some(after) = after.filter(|a| Some(*a) != current) {
            self.staged.watermark = Some((target.topic, after));
            if count == 0 {
                self.log_watermark_alone(db, target, after)?;
            }
        }
        self.flush_log(db, target, after)?;
        Ok(count)
    }

    /// A write of no rows that raises the watermark leaves an empty chunk
    /// carrying it in every partition, at the partition's next offset,
    /// where the next write's first chunk takes its place.
    fn log_watermark_alone(&mut self, db: &DB, target: &Target, watermark: i64) -> Result<()> {
        for partition in 0..target.partitions.max(1) {
            let next = self.next_offset(db, target.topic, partition)?;
            let empty = encode_chunk(
                std::iter::empty::<(i64, &[u8])>(),
                Some(watermark),
                Some(self.group.stamp),
            );
            self.staged
                .log
                .push((keys::log_key(target.topic, partition, next), empty));
        }
        Ok(())
    }

    pub(super) fn finish(self) -> Staged {
        self.staged
    }

    fn append(&mut self, target: &Target, rows: Vec<Vec<u8>>) -> u64 {
        let count = rows.len() as u64;
        // Spread statements over partitions; each statement stays in one partition, in order.
        let partition = (target.table as u32).wrapping_add(count as u32) % target.partitions.max(1);
        let records = self.records.entry(partition).or_default();
        records.extend(rows.into_iter().map(|row| (1, Logged::Own(row))));
        count
    }

    fn insert(&mut self, db: &DB, target: &Target, rows: Vec<KeyedRow>) -> Result<u64> {
        let ascending = rows.windows(2).all(|pair| pair[0].key < pair[1].key);
        if !ascending {
            let mut seen = ahash::AHashSet::with_capacity(rows.len());
            if let Some(row) = rows.iter().find(|row| !seen.insert(row.key.as_slice())) {
                return Err(duplicate(target, row));
            }
        }
        let full: Vec<Vec<u8>> = rows
            .iter()
            .map(|r| keys::row_key(target.table, &r.key))
            .collect();
        if !self.all_beyond_end(db, target, &full)? {
            let current = self.current(db, &full)?;
            if let Some(i) = current.iter().position(Option::is_some) {
                return Err(duplicate(target, &rows[i]));
            }
        }
        let count = rows.len() as u64;
        self.staged.rows.reserve(rows.len());
        for (key, row) in full.into_iter().zip(rows) {
            let partition = keys::partition_of(&row.key, target.partitions);
            let logged = Logged::Staged(self.staged.rows.len());
            self.records.entry(partition).or_default().push((1, logged));
            self.staged.rows.push((key, Some(row.row)));
        }
        Ok(count)
    }

    fn insert_unkeyed(&mut self, db: &DB, target: &Target, rows: Vec<Vec<u8>>) -> Result<u64> {
        let count = rows.len() as u64;
        let partition = (count as u32) % target.partitions.max(1);
        let mut offset = self.next_offset(db, target.topic, partition)?;
        offset += self.records.get(&partition).map_or(0, Vec::len) as u64;
        self.staged.rows.reserve(rows.len());
        let records = self.records.entry(partition).or_default();
        for row in rows {
            let key = keys::log_key(0, partition, offset)[8..].to_vec();
            records.push((1, Logged::Staged(self.staged.rows.len())));
            self.staged
                .rows
                .push((keys::row_key(target.table, &key), Some(row)));
            offset += 1;
        }
        Ok(count)
    }

    fn delete(&mut self, db: &DB, target: &Target, row_keys: Vec<Vec<u8>>) -> Result<u64> {
        let unique: Vec<Vec<u8>> = {
            let mut seen = HashSet::new();
            row_keys
                .into_iter()
                .filter(|k| seen.insert(k.clone()))
                .collect()
        };
        let full: Vec<Vec<u8>> = unique
            .iter()
            .map(|k| keys::row_key(target.table, k))
            .collect();
        let current = self.current(db, &full)?;
        let mut count = 0;
        for ((key, full), old) in unique.iter().zip(full).zip(current) {
            if let Some(old) = old {
                self.record(target, key, -1, old);
                self.staged.rows.push((full, None));
                count += 1;
            }
        }
        Ok(count)
    }

    fn update(&mut self, db: &DB, target: &Target, changes: Vec<Change>) -> Result<u64> {
        let old_full: Vec<Vec<u8>> = changes
            .iter()
            .map(|c| keys::row_key(target.table, &c.old_key))
            .collect();
        let current = self.current(db, &old_full)?;
        let mut removed = HashSet::new();
        for ((change, full), now) in changes.iter().zip(&old_full).zip(&current) {
            if now.as_deref() != Some(change.old_row.as_slice()) {
                return Err(Error::SerializationFailure);
            }
            removed.insert(full.clone());
        }
        // Keys are checked after every old row is gone, so `SET id = id + 1` works.
        let new_full: Vec<Vec<u8>> = changes
            .iter()
            .map(|c| keys::row_key(target.table, &c.new.key))
            .collect();
        let mut taken = HashSet::new();
        let outside: Vec<Vec<u8>> = new_full
            .iter()
            .filter(|k| !removed.contains(*k))
            .cloned()
            .collect();
        let existing: HashSet<Vec<u8>> = outside
            .iter()
            .zip(self.current(db, &outside)?)
            .filter_map(|(k, v)| v.map(|_| k.clone()))
            .collect();
        for (change, full) in changes.iter().zip(&new_full) {
            if !taken.insert(full.clone()) || existing.contains(full) {
                return Err(duplicate(target, &change.new));
            }
        }
        // Each change is logged as its old row then its new one, side by
        // side, so that a change stream can tell an update from a delete
        // and an insert (`AS changelog`); the rows themselves are staged
        // all gone first, or `SET id = id + 1` would delete what it wrote.
        for change in &changes {
            self.record(target, &change.old_key, -1, change.old_row.clone());
            self.record(target, &change.new.key, 1, change.new.row.clone());
        }
        for full in &old_full {
            self.staged.rows.push((full.clone(), None));
        }
        for (change, full) in changes.iter().zip(new_full) {
            self.staged.rows.push((full, Some(change.new.row.clone())));
        }
        Ok(changes.len() as u64)
    }

    fn upsert(&mut self, db: &DB, target: &Target, rows: Vec<UpsertRow>) -> Result<u64> {
        let count = rows.len() as u64;
        // The last message per key wins.
        let mut last: HashMap<Vec<u8>, Option<Vec<u8>>> = HashMap::with_capacity(rows.len());
        let mut order = Vec::with_capacity(rows.len());
        for (key, row) in rows {
            if last.insert(key.clone(), row).is_none() {
                order.push(key);
            }
        }
        let full: Vec<Vec<u8>> = order
            .iter()
            .map(|k| keys::row_key(target.table, k))
            .collect();
        let current = self.current(db, &full)?;
        for ((key, full), old) in order.into_iter().zip(full).zip(current) {
            let new = last.remove(&key).flatten();
            self.replace(target, &key, full, old, new);
        }
        Ok(count)
    }

    fn merge(
        &mut self,
        db: &DB,
        target: &Target,
        rows: Vec<KeyedRow>,
        merge: &MergeFn,
    ) -> Result<u64> {
        let count = rows.len() as u64;
        let mut order: Vec<Vec<u8>> = Vec::new();
        let mut seen = HashSet::new();
        for row in &rows {
            if seen.insert(row.key.clone()) {
                order.push(row.key.clone());
            }
        }
        let full: Vec<Vec<u8>> = order
            .iter()
            .map(|k| keys::row_key(target.table, k))
            .collect();
        let stored = self.current(db, &full)?;
        let mut now: HashMap<Vec<u8>, Option<Vec<u8>>> =
            order.iter().cloned().zip(stored.iter().cloned()).collect();
        // Rows of one key merge in order, the first into what is stored.
        for row in rows {
            let held = now.entry(row.key).or_default();
            if let Some(merged) = merge(held.as_deref(), &row.row)? {
                *held = Some(merged);
            }
        }
        for ((key, full), old) in order.into_iter().zip(full).zip(stored) {
            let new = now.remove(&key).flatten();
            self.replace(target, &key, full, old, new);
        }
        Ok(count)
    }

    /// Put `new` where `old` is under `key` (`None`: no row), logging the
    /// change; nothing if they are the same.
    fn replace(
        &mut self,
        target: &Target,
        key: &[u8],
        full: Vec<u8>,
        old: Option<Vec<u8>>,
        new: Option<Vec<u8>>,
    ) {
        if old == new {
            return;
        }
        if let Some(old) = old {
            self.record(target, key, -1, old);
        }
        if let Some(new) = &new {
            self.record(target, key, 1, new.clone());
        }
        self.staged.rows.push((full, new));
    }

    /// Whether every key sorts after the table's last row, so none can exist:
    /// bulk loads into new tables, and ascending keys, skip the point reads.
    fn all_beyond_end(&mut self, db: &DB, target: &Target, full_keys: &[Vec<u8>]) -> Result<bool> {
        let Some(smallest) = full_keys.iter().min() else {
            return Ok(true);
        };
        let prefix = keys::table_prefix(target.table);
        if self.group.overlay.keys().any(|k| k.starts_with(&prefix)) {
            return Ok(false);
        }
        Ok(match self.offsets.end(db, target.table)? {
            Some(last) => last < smallest.as_slice(),
            None => true,
        })
    }

    /// Current values of full row keys: earlier requests of the group first, then the store.
    fn current(&self, db: &DB, full_keys: &[Vec<u8>]) -> Result<Vec<Option<Vec<u8>>>> {
        let mut out = vec![None; full_keys.len()];
        let mut misses = Vec::new();
        for (i, key) in full_keys.iter().enumerate() {
            match self.group.lookup(key) {
                Some(value) => out[i] = value,
                None => misses.push(i),
            }
        }
        let handle = cf(db, CF_ROWS);
        let found = db.batched_multi_get_cf(handle, misses.iter().map(|i| &full_keys[*i]), false);
        for (i, value) in misses.into_iter().zip(found) {
            out[i] = value?.map(|v| v.to_vec());
        }
        Ok(out)
    }

    fn record(&mut self, target: &Target, key: &[u8], diff: i64, row: Vec<u8>) {
        let partition = keys::partition_of(key, target.partitions);
        self.records
            .entry(partition)
            .or_default()
            .push((diff, Logged::Own(row)));
    }

    fn next_offset(&mut self, db: &DB, topic: u64, partition: u32) -> Result<u64> {
        match self.staged.offsets.get(&(topic, partition)) {
            Some(next) => Ok(*next),
            None => self.offsets.get(db, topic, partition),
        }
    }

    /// Stage the write's records as chunks; the last chunk of each partition
    /// carries the table's watermark after the write.
    fn flush_log(&mut self, db: &DB, target: &Target, watermark: Option<i64>) -> Result<()> {
        let records = std::mem::take(&mut self.records);
        for (partition, entries) in records {
            let mut next = self.next_offset(db, target.topic, partition)?;
            let rows = &self.staged.rows;
            let chunks = entries.len().div_ceil(CHUNK_ROWS);
            let mut log = Vec::with_capacity(chunks);
            for (i, chunk) in entries.chunks(CHUNK_ROWS).enumerate() {
                let mark = if i + 1 == chunks { watermark } else { None };
                let encoded = encode_chunk(
                    chunk.iter().map(|(d, r)| (*d, r.bytes(rows))),
                    mark,
                    Some(self.group.stamp),
                );
                log.push((keys::log_key(target.topic, partition, next), encoded));
                next += chunk.len() as u64;
            }
            self.staged.log.extend(log);
            self.staged.offsets.insert((target.topic, partition), next);
        }
        Ok(())
    }
}
