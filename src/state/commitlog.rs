//! The commit log: where a small group commit becomes durable.
//!
//! RocksDB appends its write-ahead log to a growing file, so every sync
//! must also write the file's new size and extents: two more device writes
//! than a sync of bytes already allocated. PostgreSQL avoids that by
//! writing into WAL segments it zero-filled ahead of time. The commit log
//! does the same for weir's writer: a fixed-size, zero-filled file used as
//! a ring. A group's `WriteBatch` is written here and synced, then applied
//! to RocksDB without a sync; RocksDB still writes it to its own log, which
//! the operating system keeps however the process dies.
//!
//! Only a power cut or a kernel crash can lose the tail of RocksDB's log.
//! RocksDB then recovers a prefix of its writes, and the records here whose
//! group sequence comes after that prefix are applied again, in order.
//!
//! A statement that commits on its own thread replies as soon as its record
//! is synced and applies it to RocksDB afterwards, while the client reads
//! the reply ([`Unapplied`]): whatever reads RocksDB applies it first.
//!
//! The ring is opened for direct I/O where the file system allows it: a
//! record is written as the whole blocks it touches, from a copy of the
//! last block kept in memory, straight to the device, so the sync that
//! follows only has to flush the device's cache, with no pages to write
//! back first.
//!
//! Before the ring wraps, RocksDB's log is synced, so every record the wrap
//! overwrites is durable in RocksDB. Each record carries the lap it was
//! written in and a checksum; reading stops at the first record of another
//! lap, a torn record or the zeroes never written.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

use rocksdb::{DB, WriteBatch, WriteOptions};

use crate::error::{Error, Result};

/// Bytes in a new ring: about ten thousand single-row commits per lap.
const CAPACITY: u64 = 4 << 20;
/// Length, checksum, lap and sequence.
const HEADER: usize = 4 + 4 + 4 + 8;
/// Batches larger than this sync through RocksDB's own log: their sync is
/// shared by many rows, and writing them twice would cost more than it saves.
pub const MAX_RECORD: usize = 256 << 10;

const FILE_NAME: &str = "commit.ring";

/// The unit of a ring write: a multiple of every device's logical block,
/// as direct I/O requires of offsets, lengths and buffer addresses.
const BLOCK: usize = 4096;

/// The ring file and where the next record goes.
#[derive(Debug)]
pub struct CommitLog {
    file: File,
    capacity: u64,
    lap: u32,
    next: u64,
    tail: Tail,
}

impl CommitLog {
    /// Open the ring in RocksDB's directory, first applying every record
    /// RocksDB lost; creates it zero-filled when missing.
    pub fn open(db: &DB, committed: u64) -> Result<CommitLog> {
        let path = db.path().join(FILE_NAME);
        let lap = match std::fs::read(&path) {
            Ok(bytes) => replay(db, &bytes, committed)?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => 0,
            Err(e) => return Err(e.into()),
        };
        let file = open_ring(&path)?;
        let capacity = file.metadata()?.len();
        Ok(CommitLog {
            file,
            capacity,
            // A fresh lap from the start: what the last one held is durable
            // in RocksDB now, and reading must not run on into it.
            lap: lap.wrapping_add(1).max(1),
            next: 0,
            tail: Tail::new(),
        })
    }

    /// Make `batch`, the group with sequence `seq`, durable, then apply it,
    /// or with `later` leave it there to be applied after the reply.
    pub fn commit(
        &mut self,
        db: &DB,
        seq: u64,
        batch: WriteBatch,
        later: Option<&Unapplied>,
    ) -> Result<()> {
        let record_len = (HEADER + batch.data().len()) as u64;
        if batch.data().len() > MAX_RECORD || record_len > self.capacity {
            let mut options = WriteOptions::default();
            options.set_sync(true);
            return Ok(db.write_opt(batch, &options)?);
        }
        if self.next + record_len > self.capacity {
            // Everything the wrap overwrites must be durable elsewhere first.
            db.flush_wal(true)?;
            self.lap = self.lap.wrapping_add(1).max(1);
            self.next = 0;
            self.tail.clear();
        }
        let at = self.next;
        let record = encode(self.lap, seq, batch.data());
        let outcome = self.write(at, &record).and_then(|()| match later {
            Some(unapplied) => {
                unapplied.park(batch);
                Ok(())
            }
            None => write_unsynced(db, batch),
        });
        match outcome {
            Ok(()) => {
                self.next = at + record_len;
                self.tail.advance(at, self.next);
            }
            // The group failed, so its record must never be applied again;
            // the next group's record takes its place.
            Err(_) => {
                let _ = self.write(at, &[0; HEADER]);
            }
        }
        outcome
    }

    /// Write `bytes` at `at`, the ring's next position, as whole blocks:
    /// what precedes them in their first block comes from the tail, and
    /// zeroes follow them to the end of their last block.
    fn write(&mut self, at: u64, bytes: &[u8]) -> Result<()> {
        let base = at - at % BLOCK as u64;
        let blocks = self.tail.fill((at - base) as usize, bytes);
        self.file.write_all_at(blocks, base)?;
        self.file.sync_data()?;
        Ok(())
    }
}

/// The ring's bytes from the start of the block the next record goes in,
/// in a buffer aligned for direct I/O; all zeroes past the next record.
struct Tail {
    buffer: Vec<u8>,
    /// Where in `buffer` the aligned bytes start.
    start: usize,
}

impl std::fmt::Debug for Tail {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tail").finish_non_exhaustive()
    }
}

impl Tail {
    /// Room for the largest record starting at the end of a block.
    const LEN: usize = (HEADER + MAX_RECORD + 2 * BLOCK).next_multiple_of(BLOCK);

    fn new() -> Tail {
        let buffer = vec![0u8; Self::LEN + BLOCK];
        let start = buffer.as_ptr().align_offset(BLOCK);
        Tail { buffer, start }
    }

    fn aligned(&mut self) -> &mut [u8] {
        &mut self.buffer[self.start..self.start + Self::LEN]
    }

    /// Place `bytes` at `from` within the first block; the whole blocks
    /// that now hold them.
    fn fill(&mut self, from: usize, bytes: &[u8]) -> &[u8] {
        let end = from + bytes.len();
        let len = end.next_multiple_of(BLOCK);
        let aligned = self.aligned();
        aligned[from..end].copy_from_slice(bytes);
        aligned[end..len].fill(0);
        &aligned[..len]
    }

    /// The ring's next position moved from `at` to `next`: keep the block
    /// `next` falls in at the front.
    fn advance(&mut self, at: u64, next: u64) {
        let base = at - at % BLOCK as u64;
        let kept = (next - next % BLOCK as u64 - base) as usize;
        let end = (next - base) as usize;
        let aligned = self.aligned();
        aligned.copy_within(kept..end, 0);
        aligned[end - kept..end].fill(0);
    }

    fn clear(&mut self) {
        self.aligned().fill(0);
    }
}

/// The group last made durable in the ring whose write to RocksDB waits
/// until its statement has replied: at most one, since the next commit
/// applies it first. Readers of RocksDB apply it before they read, so a
/// reply is never ahead of what anyone can see.
#[derive(Default)]
pub struct Unapplied {
    waiting: AtomicBool,
    batch: parking_lot::Mutex<Option<WriteBatch>>,
    /// Why a parked group could not be applied: it stays in the ring, and
    /// only a restart applies it, so nothing may commit after it.
    failed: std::sync::OnceLock<String>,
}

impl std::fmt::Debug for Unapplied {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Unapplied")
            .field("waiting", &self.waiting.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

impl Unapplied {
    fn park(&self, batch: WriteBatch) {
        *self.batch.lock() = Some(batch);
        self.waiting.store(true, Ordering::Release);
    }

    pub fn is_waiting(&self) -> bool {
        self.waiting.load(Ordering::Acquire)
    }

    /// Apply the parked group, if any.
    pub fn settle(&self, db: &DB) -> Result<()> {
        if self.waiting.load(Ordering::Acquire) {
            let mut slot = self.batch.lock();
            if let Some(batch) = slot.take()
                && let Err(e) = write_unsynced(db, batch)
            {
                tracing::error!(cause = %e, "a committed group could not be applied");
                let _ = self.failed.set(e.to_string());
            }
            // Only now: a reader that saw the group waiting must not read
            // before it is applied.
            self.waiting.store(false, Ordering::Release);
        }
        match self.failed.get() {
            None => Ok(()),
            Some(cause) => Err(Error::Io(std::io::Error::other(format!(
                "a committed write could not be applied ({cause}); \
                 restart the server to apply it from the commit log"
            )))),
        }
    }

    /// Apply the parked group before a read; a failure is reported to
    /// writers, and readers go on with what the store holds.
    pub fn settle_for_read(&self, db: &DB) {
        let _ = self.settle(db);
    }
}

/// Apply a batch without a sync: one already durable in the ring, or one
/// whose writer chose not to sync.
pub fn write_unsynced(db: &DB, batch: WriteBatch) -> Result<()> {
    let mut options = WriteOptions::default();
    options.set_sync(false);
    Ok(db.write_opt(batch, &options)?)
}

/// The ring for writing, an existing one or a new one filled with zeroes
/// so that no later sync has to record a new size or allocation.
fn open_ring(path: &Path) -> Result<File> {
    create_ring(path)?;
    let direct = rustix::fs::OFlags::DIRECT.bits() as i32;
    match OpenOptions::new()
        .write(true)
        .custom_flags(direct)
        .open(path)
    {
        // tmpfs and some others refuse direct I/O; writes then go through
        // the page cache, and the sync writes them back.
        Err(e) if e.raw_os_error() == Some(rustix::io::Errno::INVAL.raw_os_error()) => {
            Ok(OpenOptions::new().write(true).open(path)?)
        }
        opened => Ok(opened?),
    }
}

fn create_ring(path: &Path) -> Result<()> {
    if std::fs::metadata(path).is_ok_and(|m| m.len() >= HEADER as u64 * 2) {
        return Ok(());
    }
    let fresh = PathBuf::from(format!("{}.new", path.display()));
    let mut file = File::create(&fresh)?;
    let zeroes = vec![0u8; 1 << 20];
    for _ in 0..CAPACITY / zeroes.len() as u64 {
        file.write_all(&zeroes)?;
    }
    file.sync_all()?;
    std::fs::rename(&fresh, path)?;
    if let Some(dir) = path.parent() {
        File::open(dir)?.sync_all()?;
    }
    Ok(())
}

fn encode(lap: u32, seq: u64, data: &[u8]) -> Vec<u8> {
    let mut record = Vec::with_capacity(HEADER + data.len());
    record.extend_from_slice(&(data.len() as u32).to_le_bytes());
    record.extend_from_slice(&[0; 4]);
    record.extend_from_slice(&lap.to_le_bytes());
    record.extend_from_slice(&seq.to_le_bytes());
    record.extend_from_slice(data);
    let crc = crc32fast::hash(&record[8..]);
    record[4..8].copy_from_slice(&crc.to_le_bytes());
    record
}

/// One record read back: its lap, sequence and batch.
struct Record<'a> {
    lap: u32,
    seq: u64,
    data: &'a [u8],
}

fn decode(bytes: &[u8]) -> Option<Record<'_>> {
    let header = bytes.get(..HEADER)?;
    let len = u32::from_le_bytes(header[0..4].try_into().ok()?) as usize;
    let crc = u32::from_le_bytes(header[4..8].try_into().ok()?);
    let body = bytes.get(8..HEADER + len)?;
    if len == 0 || crc32fast::hash(body) != crc {
        return None;
    }
    Some(Record {
        lap: u32::from_le_bytes(header[8..12].try_into().ok()?),
        seq: u64::from_le_bytes(header[12..20].try_into().ok()?),
        data: &bytes[HEADER..HEADER + len],
    })
}

/// The records of the newest lap, in the order they were written.
fn live_records(bytes: &[u8]) -> Vec<Record<'_>> {
    let mut records: Vec<Record<'_>> = Vec::new();
    let mut at = 0;
    while let Some(record) = bytes.get(at..).and_then(decode) {
        let in_step = records
            .last()
            .is_none_or(|last| record.lap == last.lap && record.seq > last.seq);
        if !in_step {
            break;
        }
        at += HEADER + record.data.len();
        records.push(record);
    }
    records
}

/// Apply the records after group `committed`, RocksDB's last; returns the
/// ring's newest lap.
fn replay(db: &DB, bytes: &[u8], committed: u64) -> Result<u32> {
    let records = live_records(bytes);
    let lost: Vec<&Record<'_>> = records.iter().filter(|r| r.seq > committed).collect();
    for record in &lost {
        db.write(WriteBatch::from_data(record.data))
            .map_err(|e| Error::Internal(format!("replaying the commit log: {e}")))?;
    }
    if !lost.is_empty() {
        tracing::warn!(
            groups = lost.len(),
            after = committed,
            "applied groups the store had lost from the commit log"
        );
        db.flush_wal(true)?;
    }
    Ok(records.last().map_or(0, |r| r.lap))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::{CF_STATE, Store, cf};

    fn batch(db: &DB, key: &[u8]) -> WriteBatch {
        let mut batch = WriteBatch::default();
        batch.put_cf(cf(db, CF_STATE), key, b"v");
        batch
    }

    #[test]
    fn records_read_back_stop_at_another_lap_or_a_torn_record() {
        let mut ring = [encode(2, 7, b"a"), encode(2, 8, b"bb"), encode(1, 9, b"c")].concat();
        let records = live_records(&ring);
        assert_eq!(records.iter().map(|r| r.seq).collect::<Vec<_>>(), [7, 8]);
        let torn = HEADER + 1 + HEADER;
        ring[torn] ^= 1;
        assert_eq!(live_records(&ring).len(), 1);
        assert!(live_records(&[0; 64]).is_empty());
    }

    #[test]
    fn groups_the_store_lost_are_applied_again_in_order() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = Store::open(dir.path()).expect("open");
        let db = store.db();
        let ring = [
            encode(3, 4, batch(db, b"k4").data()),
            encode(3, 5, batch(db, b"k5").data()),
        ]
        .concat();
        let lap = replay(db, &ring, 4).expect("replay");
        assert_eq!(lap, 3);
        let state = cf(db, CF_STATE);
        assert!(
            db.get_cf(state, b"k4").expect("get").is_none(),
            "kept by the store"
        );
        assert!(
            db.get_cf(state, b"k5").expect("get").is_some(),
            "lost, applied again"
        );
    }

    #[test]
    fn a_ring_that_wraps_keeps_every_commit() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = Store::open(dir.path()).expect("open");
        let db = store.db();
        let mut log = CommitLog::open(db, 0).expect("open ring");
        log.capacity = 256;
        for seq in 1..=20u64 {
            let key = format!("k{seq}");
            log.commit(db, seq, batch(db, key.as_bytes()), None)
                .expect("commit");
        }
        assert!(log.lap > 1, "the ring wrapped");
        let bytes = std::fs::read(db.path().join(FILE_NAME)).expect("read ring");
        let live = live_records(&bytes[..256]);
        assert_eq!(live.last().map(|r| r.seq), Some(20));
        let state = cf(db, CF_STATE);
        for seq in 1..=20u64 {
            let key = format!("k{seq}");
            assert!(db.get_cf(state, key.as_bytes()).expect("get").is_some());
        }
    }

    #[test]
    fn records_that_cross_blocks_read_back_whole_and_in_order() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = Store::open(dir.path()).expect("open");
        let db = store.db();
        let mut log = CommitLog::open(db, 0).expect("open ring");
        let mut written = Vec::new();
        for seq in 1..=30u64 {
            let mut batch = WriteBatch::default();
            let value = vec![seq as u8; 100 * seq as usize];
            batch.put_cf(cf(db, CF_STATE), format!("k{seq}"), &value);
            written.push(batch.data().to_vec());
            log.commit(db, seq, batch, None).expect("commit");
        }
        let bytes = std::fs::read(db.path().join(FILE_NAME)).expect("read ring");
        let live = live_records(&bytes);
        assert_eq!(
            live.iter().map(|r| r.seq).collect::<Vec<_>>(),
            (1..=30).collect::<Vec<_>>()
        );
        for (record, data) in live.iter().zip(&written) {
            assert_eq!(record.data, data.as_slice());
        }
    }
}
