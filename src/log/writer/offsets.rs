//! Where the next record of each partition goes, and what the writer
//! remembers of each table between groups. Offsets are assigned under the
//! commit lock, so they stay dense and in commit order; they are read from
//! the log once and then kept, since a point read per write would cost more
//! than the write.

use std::collections::HashMap;
use std::collections::hash_map::Entry;

use rocksdb::DB;

use crate::error::{Error, Result};
use crate::log::Topic;
use crate::log::embedded::{chunk_len, decode_chunk};
use crate::state::{CF_ROWS, cf, keys};

/// Next offset of each topic partition and each topic's watermark, loaded
/// from the log on first use.
#[derive(Default)]
pub(super) struct Offsets {
    pub(super) next: HashMap<(u64, u32), u64>,
    pub(super) watermarks: HashMap<u64, Option<i64>>,
    /// Per table, a row key (with table prefix) no row key sorts after, or
    /// `None` when the table has no rows. Only ever too high, never too
    /// low: deletes and failed groups leave it be, which costs a point read
    /// later, never a missed duplicate.
    ends: HashMap<u64, Option<Vec<u8>>>,
}

impl Offsets {
    pub(super) fn watermark(
        &mut self,
        db: &DB,
        topic: u64,
        partitions: u32,
    ) -> Result<Option<i64>> {
        if let Some(known) = self.watermarks.get(&topic) {
            return Ok(*known);
        }
        let mut watermark = None;
        for partition in 0..partitions.max(1) {
            watermark = watermark.max(log_watermark(db, Topic::table(topic), partition)?);
        }
        self.watermarks.insert(topic, watermark);
        Ok(watermark)
    }

    pub(super) fn get(&mut self, db: &DB, topic: u64, partition: u32) -> Result<u64> {
        if let Some(next) = self.next.get(&(topic, partition)) {
            return Ok(*next);
        }
        let next = log_end(db, Topic::table(topic), partition)?;
        self.next.insert((topic, partition), next);
        Ok(next)
    }

    /// Forgets `topic`'s log and `table`'s rows, whose records were deleted.
    pub(super) fn forget_table(&mut self, table: u64, topic: u64) {
        self.next.retain(|(t, _), _| *t != topic);
        self.watermarks.remove(&topic);
        self.ends.remove(&table);
    }

    pub(super) fn forget(&mut self) {
        self.next.clear();
        self.watermarks.clear();
        self.ends.clear();
    }

    /// The bound of `table`'s row keys, read from the store on first use.
    pub(super) fn end(&mut self, db: &DB, table: u64) -> Result<Option<&[u8]>> {
        let end = match self.ends.entry(table) {
            Entry::Occupied(known) => known.into_mut(),
            Entry::Vacant(unknown) => {
                let prefix = keys::table_prefix(table);
                let mut iter = db.raw_iterator_cf(cf(db, CF_ROWS));
                iter.seek_for_prev(keys::prefix_end(&prefix));
                iter.status()?;
                let last = iter.key().filter(|k| k.starts_with(&prefix));
                unknown.insert(last.map(<[u8]>::to_vec))
            }
        };
        Ok(end.as_deref())
    }

    /// Raise the bound of the table a written row key belongs to.
    pub(super) fn raise_end(&mut self, full_key: &[u8]) {
        let Some(table) = full_key.get(..8).and_then(|b| b.try_into().ok()) else {
            return;
        };
        // Unknown tables load their bound from the store when first asked.
        if let Some(end) = self.ends.get_mut(&u64::from_be_bytes(table))
            && end.as_deref().is_none_or(|e| e < full_key)
        {
            *end = Some(full_key.to_vec());
        }
    }
}

/// The watermark carried by a partition's last chunk, if any.
pub fn log_watermark(db: &DB, topic: Topic, partition: u32) -> Result<Option<i64>> {
    let prefix = keys::log_partition_prefix(topic.id, partition);
    let mut iter = db.raw_iterator_cf(cf(db, topic.family));
    iter.seek_for_prev(keys::prefix_end(&prefix));
    iter.status()?;
    match (iter.key(), iter.value()) {
        (Some(key), Some(value)) if key.starts_with(&prefix) => Ok(decode_chunk(value)?.watermark),
        _ => Ok(None),
    }
}

/// The offset after the last record of a partition.
pub fn log_end(db: &DB, topic: Topic, partition: u32) -> Result<u64> {
    let prefix = keys::log_partition_prefix(topic.id, partition);
    let mut iter = db.raw_iterator_cf(cf(db, topic.family));
    iter.seek_for_prev(keys::prefix_end(&prefix));
    iter.status()?;
    if !iter.valid() {
        return Ok(0);
    }
    match (iter.key(), iter.value()) {
        (Some(key), Some(value)) if key.starts_with(&prefix) => {
            let base = keys::log_key_offset(key)
                .ok_or_else(|| Error::Internal("malformed log key".into()))?;
            Ok(base + chunk_len(value)?)
        }
        _ => Ok(0),
    }
}
