//! Storage: one RocksDB instance per node.
//!
//! Column families, each with its key layout in [`keys`]:
//! - `catalog`: object definitions (JSON) and the id sequence;
//! - `rows`: current contents of keyed tables, `table id ++ key -> row`;
//! - `log`: the embedded log of tables and sources, `topic ++ partition ++
//!   base offset -> chunk`;
//! - `changelog`: views' changelogs, laid out as `log` (`log::Topic`);
//! - `state`: dataflow operator state and source offsets, `view id ++ node ++ ...`.
//!
//! Writes go through the log's writer (`log::writer`), which
//! group-commits. Reads take a [`ReadView`], one RocksDB snapshot shared by
//! everything a statement reads.

pub mod backup;
pub mod commitlog;
pub mod disk;
pub mod keys;
pub mod rows;

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use rocksdb::{
    ColumnFamily, ColumnFamilyDescriptor, DB, Options, ReadOptions, SnapshotWithThreadMode,
};

use crate::error::{Error, Result};

/// Entries read through [`ReadView`]s since the process started: the
/// `weir_state_entries_read_total` metric, and how tests tell a point read from a scan.
pub static ENTRIES_READ: AtomicU64 = AtomicU64::new(0);

pub const CF_CATALOG: &str = "catalog";
pub const CF_ROWS: &str = "rows";
pub const CF_LOG: &str = "log";
pub const CF_CHANGELOG: &str = "changelog";
pub const CF_STATE: &str = "state";
/// Every column family, in the order they are opened.
const FAMILIES: [&str; 5] = [CF_CATALOG, CF_ROWS, CF_LOG, CF_CHANGELOG, CF_STATE];
/// The families that hold log chunks, read once in order and written once.
const LOG_FAMILIES: [&str; 2] = [CF_LOG, CF_CHANGELOG];

/// The node's RocksDB instance.
pub struct Store {
    db: Arc<DB>,
    /// A write acknowledged but not yet in RocksDB; reads apply it first.
    unapplied: Arc<commitlog::Unapplied>,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store")
            .field("path", &self.db.path())
            .finish()
    }
}

impl Store {
    pub fn open(path: &Path) -> Result<Store> {
        std::fs::create_dir_all(path)?;
        let mut options = Options::default();
        options.create_if_missing(true);
        options.create_missing_column_families(true);
        options.increase_parallelism(2);
        // Memory stays bounded however long the streams run: memtables of
        // all families share one budget, and index and filter blocks live in
        // the block cache instead of growing with every file.
        options.set_db_write_buffer_size(MEMTABLE_BUDGET);
        // A view's backfill writes without the WAL (see the dataflow
        // runtime); flushing every family together makes what a crash
        // leaves of those writes one consistent cut.
        options.set_atomic_flush(true);
        // Flushes and compactions write files that no read needs soon (a
        // live view reads its input from the memtable): through the page
        // cache each written page is one more page the kernel must find,
        // fill and later drop, which on a stream cost a third of the
        // node's CPU (docs/benchmarks.md, "RocksDB writes past the page cache").
        let direct = direct_io_works(path);
        options.set_use_direct_io_for_flush_and_compaction(direct);
        tracing::debug!(
            direct,
            "RocksDB flushes and compactions bypass the page cache"
        );
        let cache = rocksdb::Cache::new_lru_cache(BLOCK_CACHE);
        let families = FAMILIES.into_iter().map(|name| {
            let mut options = family_options(&cache);
            if name == CF_ROWS {
                options.set_merge_operator_associative("weir_add_counts", add_counts);
            }
            if name == CF_STATE {
                options.set_merge_operator_associative("weir_add_i64", add_i64);
            }
            if LOG_FAMILIES.contains(&name) {
                // Every view's backfill reads the log from the start, so
                // decompressing it would be paid again by each one.
                options.set_compression_type(rocksdb::DBCompressionType::None);
                options.set_compression_per_level(&[]);
            }
            ColumnFamilyDescriptor::new(name, options)
        });
        let db = DB::open_cf_descriptors(&options, path, families)?;
        // RocksDB rewrites each file at the bottom of the tree, at once, to
        // zero its sequence numbers. While the tree is one level deep, that
        // is every file a flush writes: a second copy of every bulk load's
        // rows and of every changelog, for nothing a read needs. Log chunks
        // are written once, and table rows mostly so. Operator state, which
        // deletes what it no longer needs, keeps the rewrite that drops its
        // tombstones. The option is mutable only, hence set on the open store.
        for family in [CF_LOG, CF_CHANGELOG, CF_ROWS] {
            db.set_options_cf(
                cf(&db, family),
                &[("bottommost_file_compaction_delay", NEVER_SECONDS)],
            )?;
        }
        Ok(Store {
            db: Arc::new(db),
            unapplied: Arc::default(),
        })
    }

    pub fn db(&self) -> &Arc<DB> {
        &self.db
    }

    /// The writer parks here the group it acknowledged before applying.
    pub fn unapplied(&self) -> &Arc<commitlog::Unapplied> {
        &self.unapplied
    }

    /// Entries of the state family under `prefix`, counted one by one.
    pub fn state_entries(&self, prefix: &[u8]) -> usize {
        self.state_entries_up_to(prefix, usize::MAX)
    }

    /// Bytes the table files spend on the state family's keys under
    /// `prefix`, as RocksDB estimates them (what memtables hold is not in it).
    pub fn state_bytes(&self, prefix: &[u8]) -> u64 {
        let end = keys::prefix_end(prefix);
        let range = rocksdb::Range::new(prefix, &end);
        self.db
            .get_approximate_sizes_cf(cf(&self.db, CF_STATE), &[range])
            .first()
            .copied()
            .unwrap_or(0)
    }

    /// Like [`Store::state_entries`], stopping at `limit`.
    pub fn state_entries_up_to(&self, prefix: &[u8], limit: usize) -> usize {
        self.db
            .prefix_iterator_cf(cf(&self.db, CF_STATE), prefix)
            .filter_map(|entry| entry.ok())
            .take_while(|(key, _)| key.starts_with(prefix))
            .take(limit)
            .count()
    }

    /// Compact every family from end to end: deleted ranges (dropped
    /// objects) are gone from disk and no backlog is left for later writes
    /// to set off. Blocks until RocksDB is done.
    pub fn compact(&self) {
        for name in FAMILIES {
            self.db
                .compact_range_cf(cf(&self.db, name), None::<&[u8]>, None::<&[u8]>);
        }
    }

    /// Compact one relation's keys: its rows and its operator state under
    /// `id`, its log or changelog `topic` in `log_family` (`VACUUM name`).
    pub fn compact_relation(&self, id: u64, log_family: &str, topic: u64) {
        let ranges = [
            (CF_ROWS, keys::table_prefix(id)),
            (CF_STATE, keys::table_prefix(id)),
            (log_family, keys::table_prefix(topic)),
        ];
        for (name, prefix) in ranges {
            let end = keys::prefix_end(&prefix);
            self.db
                .compact_range_cf(cf(&self.db, name), Some(&prefix), Some(&end));
        }
    }

    /// Bytes of table files and of memtables, over every family.
    pub fn size(&self) -> (u64, u64) {
        let property = |family: &str, name: &str| {
            self.db
                .property_int_value_cf(cf(&self.db, family), name)
                .ok()
                .flatten()
                .unwrap_or(0)
        };
        FAMILIES.iter().fold((0, 0), |(files, memory), family| {
            (
                files + property(family, "rocksdb.total-sst-files-size"),
                memory + property(family, "rocksdb.size-all-mem-tables"),
            )
        })
    }

    /// A consistent view of everything committed so far.
    pub fn read_view(&self) -> Arc<ReadView> {
        self.unapplied.settle_for_read(&self.db);
        Arc::new(ReadView::new(self.db.clone(), |db| db.snapshot()))
    }
}

impl Drop for Store {
    fn drop(&mut self) {
        // Else the next start applies it from the commit log.
        self.unapplied.settle_for_read(&self.db);
    }
}

/// A keyless view stores `multiplicity ++ row` per row (`rows::encode_counted`).
/// Adding rows merges such values by summing the multiplicities, so that a
/// view adds a row without first reading how many it already holds.
fn add_counts(
    _key: &[u8],
    existing: Option<&[u8]>,
    operands: &rocksdb::MergeOperands,
) -> Option<Vec<u8>> {
    let mut values = existing.into_iter().chain(operands);
    let (mut count, row) = rows::decode_counted(values.next()?).ok()?;
    for value in values {
        count += rows::decode_counted(value).ok()?.0;
    }
    Some(rows::encode_counted(count, row))
}

/// Operators add to counts in state (an `i64`, little-endian) without
/// reading them first (`EpochState::add_count`); the additions sum.
fn add_i64(
    _key: &[u8],
    existing: Option<&[u8]>,
    operands: &rocksdb::MergeOperands,
) -> Option<Vec<u8>> {
    let mut total: i64 = 0;
    for value in existing.into_iter().chain(operands) {
        total = total.checked_add(i64::from_le_bytes(value.try_into().ok()?))?;
    }
    Some(total.to_le_bytes().to_vec())
}

/// Whether files in `dir` can be written with `O_DIRECT`: not on tmpfs
/// before Linux 6.6, nor on some network and overlay file systems, where
/// RocksDB would then fail every flush.
fn direct_io_works(dir: &Path) -> bool {
    use rustix::fs::{Mode, OFlags};
    const BLOCK: usize = 4096;
    let probe = dir.join(".direct-io-probe");
    let flags = OFlags::CREATE | OFlags::WRONLY | OFlags::TRUNC | OFlags::DIRECT;
    let works = rustix::fs::open(&probe, flags, Mode::from_raw_mode(0o600)).is_ok_and(|file| {
        // O_DIRECT wants the buffer aligned to the device's block.
        let buffer = vec![0u8; 2 * BLOCK];
        let start = buffer.as_ptr().align_offset(BLOCK);
        rustix::io::write(&file, &buffer[start..start + BLOCK]).is_ok_and(|n| n == BLOCK)
    });
    let _ = std::fs::remove_file(&probe);
    works
}

/// The longest delay RocksDB takes (a `u32` of seconds): never, in practice.
const NEVER_SECONDS: &str = "4294967295";

/// Memory for all memtables together.
const MEMTABLE_BUDGET: usize = 128 << 20;
/// Memory for cached blocks, indexes and filters.
const BLOCK_CACHE: usize = 64 << 20;

fn family_options(cache: &rocksdb::Cache) -> Options {
    use rocksdb::DBCompressionType::{Lz4, None as Plain};
    let mut options = Options::default();
    let mut table = rocksdb::BlockBasedOptions::default();
    table.set_block_cache(cache);
    // Index and filter blocks live in the bounded cache, partitioned so that
    // a point read loads one small partition, never a whole file's filter
    // (with whole filters, a cache too small for them re-reads hundreds of
    // KiB from disk for every lookup of a key that is not there).
    table.set_index_type(rocksdb::BlockBasedIndexType::TwoLevelIndexSearch);
    table.set_partition_filters(true);
    table.set_metadata_block_size(4096);
    table.set_cache_index_and_filter_blocks(true);
    table.set_cache_index_and_filter_blocks_with_high_priority(true);
    table.set_pin_top_level_index_and_filter(true);
    table.set_pin_l0_filter_and_index_blocks_in_cache(true);
    table.set_bloom_filter(10.0, false);
    options.set_block_based_table_factory(&table);
    // Views and operators look up many keys that are not there yet (a new
    // row, a new group); a bloom filter over each memtable answers those
    // without searching it.
    options.set_memtable_prefix_bloom_ratio(0.02);
    options.set_memtable_whole_key_filtering(true);
    // Larger memtables mean fewer flushes during bulk loads; the first
    // levels, rewritten soonest by compaction, are not worth compressing.
    options.set_write_buffer_size(64 << 20);
    options.set_max_write_buffer_number(3);
    options.set_compression_per_level(&[Plain, Plain, Lz4, Lz4, Lz4, Lz4, Lz4]);
    options
}

/// A column family handle; the families are created at open, so absence is a bug.
pub fn cf<'a>(db: &'a DB, name: &str) -> &'a ColumnFamily {
    db.cf_handle(name)
        .expect("column families are created when the store opens")
}

/// Write every family's memtable to disk, all at once, and wait: writes
/// made without the WAL are durable afterwards.
pub fn flush_memtables(db: &DB) -> Result<()> {
    let families: Vec<&ColumnFamily> = FAMILIES.iter().map(|name| cf(db, name)).collect();
    let mut options = rocksdb::FlushOptions::default();
    options.set_wait(true);
    Ok(db.flush_cfs_opt(&families, &options)?)
}

/// A u64 counter (big-endian) kept under `key` in the state family.
pub fn read_u64(db: &DB, key: &[u8]) -> Result<Option<u64>> {
    match db.get_cf(cf(db, CF_STATE), key)? {
        Some(bytes) => {
            let raw: [u8; 8] = bytes
                .as_slice()
                .try_into()
                .map_err(|_| Error::Internal("malformed counter in state".into()))?;
            Ok(Some(u64::from_be_bytes(raw)))
        }
        None => Ok(None),
    }
}

self_cell::self_cell!(
    /// A RocksDB snapshot that owns its database handle, so that a statement
    /// can share it across the tasks DataFusion runs.
    pub struct ReadView {
        owner: Arc<DB>,
        #[covariant]
        dependent: Snapshot,
    }
);

type Snapshot<'a> = SnapshotWithThreadMode<'a, DB>;

impl ReadView {
    /// Read options pinned to this snapshot.
    pub fn read_options(&self) -> ReadOptions {
        let mut options = ReadOptions::default();
        options.set_snapshot(self.borrow_dependent());
        options
    }

    pub fn db(&self) -> &DB {
        self.borrow_owner()
    }

    /// Point reads of many keys in one family, in order.
    pub fn multi_get(&self, family: &str, keys: &[Vec<u8>]) -> Result<Vec<Option<Vec<u8>>>> {
        let db = self.db();
        let handle = cf(db, family);
        let options = self.read_options();
        ENTRIES_READ.fetch_add(keys.len() as u64, Ordering::Relaxed);
        db.batched_multi_get_cf_opt(handle, keys.iter(), false, &options)
            .into_iter()
            .map(|r| r.map(|v| v.map(|p| p.to_vec())).map_err(Error::from))
            .collect()
    }

    /// One key's value in the snapshot.
    pub fn get(&self, family: &str, key: &[u8]) -> Result<Option<Vec<u8>>> {
        let db = self.db();
        Ok(db.get_cf_opt(cf(db, family), key, &self.read_options())?)
    }

    /// The last entry at or before `key` whose key starts with `prefix`.
    pub fn at_or_before(
        &self,
        family: &str,
        prefix: &[u8],
        key: &[u8],
    ) -> Result<Option<(Vec<u8>, Vec<u8>)>> {
        let db = self.db();
        let mut iter = db.raw_iterator_cf_opt(cf(db, family), self.read_options());
        iter.seek_for_prev(key);
        iter.status()?;
        Ok(match (iter.key(), iter.value()) {
            (Some(k), Some(v)) if k.starts_with(prefix) => Some((k.to_vec(), v.to_vec())),
            _ => None,
        })
    }

    /// Visit every entry whose key starts with `prefix` and lies in `[lower, upper)`.
    pub fn scan(
        &self,
        family: &str,
        lower: Vec<u8>,
        upper: Vec<u8>,
        mut visit: impl FnMut(&[u8], &[u8]) -> Result<bool>,
    ) -> Result<()> {
        let db = self.db();
        let mut options = self.read_options();
        options.set_iterate_range(lower.clone()..upper);
        if LOG_FAMILIES.contains(&family) {
            // Log chunks are read once, in order, and are large: caching
            // them would push out the state blocks that lookups reuse.
            options.fill_cache(false);
        }
        let mut iter = db.raw_iterator_cf_opt(cf(db, family), options);
        iter.seek(&lower);
        while iter.valid() {
            let (Some(key), Some(value)) = (iter.key(), iter.value()) else {
                break;
            };
            ENTRIES_READ.fetch_add(1, Ordering::Relaxed);
            if !visit(key, value)? {
                return Ok(());
            }
            iter.next();
        }
        iter.status()?;
        Ok(())
    }
}

impl std::fmt::Debug for ReadView {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ReadView")
    }
}

#[cfg(test)]
mod tests {
    use super::rows::encode_counted as counted;
    use super::{CF_ROWS, Store, cf};

    #[test]
    fn added_rows_sum_their_multiplicities_over_what_is_stored() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = Store::open(dir.path()).expect("open");
        let db = store.db();
        let rows = cf(db, CF_ROWS);
        db.merge_cf(rows, b"a", counted(2, b"row")).expect("merge");
        db.merge_cf(rows, b"a", counted(3, b"row")).expect("merge");
        assert_eq!(
            db.get_cf(rows, b"a").expect("get"),
            Some(counted(5, b"row"))
        );
        db.put_cf(rows, b"b", counted(1, b"other")).expect("put");
        db.merge_cf(rows, b"b", counted(1, b"other"))
            .expect("merge");
        db.flush_cf(rows).expect("flush");
        assert_eq!(
            db.get_cf(rows, b"b").expect("get"),
            Some(counted(2, b"other"))
        );
        db.delete_cf(rows, b"b").expect("delete");
        db.merge_cf(rows, b"b", counted(1, b"other"))
            .expect("merge");
        assert_eq!(
            db.get_cf(rows, b"b").expect("get"),
            Some(counted(1, b"other"))
        );
    }

    #[test]
    fn direct_io_is_used_where_the_file_system_takes_it() {
        let on_disk = tempfile::tempdir().expect("tempdir");
        assert!(
            super::direct_io_works(on_disk.path()),
            "ext4 takes O_DIRECT"
        );
        let gone = on_disk.path().join("missing");
        assert!(!super::direct_io_works(&gone), "no file, no direct writes");
        let files = std::fs::read_dir(on_disk.path()).expect("list");
        assert_eq!(files.count(), 0, "the probe is removed");
        // tmpfs takes O_DIRECT from Linux 6.6 on and refuses it before:
        // either way the store must flush.
        let Ok(in_memory) = tempfile::tempdir_in("/dev/shm") else {
            return;
        };
        let store = Store::open(in_memory.path()).expect("open");
        let db = store.db();
        db.put_cf(cf(db, CF_ROWS), b"a", counted(1, b"row"))
            .expect("put");
        db.flush_cf(cf(db, CF_ROWS)).expect("flush");
        assert_eq!(
            db.get_cf(cf(db, CF_ROWS), b"a").expect("get"),
            Some(counted(1, b"row"))
        );
    }
}
