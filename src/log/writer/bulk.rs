//! Bulk loads: a large COPY's rows staged on disk part by part, then
//! committed as RocksDB table files, so that no step holds the whole load.
//!
//! A [`Stage`] is a directory under `copy/` in the store's directory. While
//! the client sends data, each encoded part is appended to its `stage`
//! file: keyed rows sorted by key (a sorted run), other rows in data order;
//! rows of an append-only table as the bodies of the log chunks they will
//! be, since only a chunk's key (its first offset) and trailer (watermark,
//! commit stamp) depend on the commit.
//! Nothing of it is in RocksDB, so no reader can see it, and a COPY that
//! fails, is cancelled or loses its client just removes the directory.
//!
//! The commit holds the writer's commit lock, so that log offsets stay
//! dense and ordered by commit, and runs in four steps:
//! 1. the runs are read back (merged by key for keyed tables, which finds
//!    duplicate keys as neighbours; keys not beyond the table's last row
//!    are looked up in the store) and written with their final keys, log
//!    offsets and commit stamp into SST files beside the stage (an
//!    append-only table's chunk bodies only get their keys and trailers);
//! 2. one small write, synced like any group, advances the commit sequence
//!    and records a marker naming the directory: the commit point;
//! 3. the SST files are ingested, the log's first and then the rows';
//!    each ingestion is atomic in its column family;
//! 4. the marker and the directory are removed.
//!
//! A restart ingests what a marker names and is still there ([`recover`]),
//! and removes every other staging directory: a load killed before its
//! marker leaves nothing behind.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap};
use std::fs::File;
use std::io::{BufWriter, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use rocksdb::{DB, IngestExternalFileOptions, Options, SstFileWriter, WriteBatch};

use super::group::Committer;
use super::offsets::Offsets;
use super::producer::{Producer, put_sequences};
use super::request::{KeyedRow, Target, WriteOp, duplicate};
use crate::error::{Error, Result};
use crate::log::embedded::{
    CHUNK_ROWS, ChunkBody, Stamp, TRAILER_BYTES, encode_chunk, push_trailer,
};
use crate::state::commitlog;
use crate::state::{CF_LOG, CF_ROWS, CF_STATE, cf, keys};

/// The staging directories' parent, in the store's directory.
const STAGE_DIR: &str = "copy";
/// Bytes read from a run at a time while merging.
const READ_BUFFER: usize = 64 << 10;
/// Room a chunk body starts with: [`CHUNK_ROWS`] rows of about 200 bytes.
const CHUNK_BYTES: usize = CHUNK_ROWS * 200;
/// Keys looked up in the store at a time, when they may exist already.
const LOOKUP_KEYS: usize = 4096;

/// Which write the staged rows are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Append,
    Unkeyed,
    Keyed,
}

/// A load's rows so far, on disk; see the module documentation.
pub struct Stage {
    name: String,
    dir: PathBuf,
    file: BufWriter<File>,
    written: u64,
    /// Byte ranges of the parts in the stage file, in data order.
    runs: Vec<(u64, u64)>,
    kind: Option<Kind>,
    rows: u64,
    watermark: Option<i64>,
    /// Append-only rows: the chunk being filled, and where each full one
    /// is in the stage file (offset, bytes, rows).
    body: Option<ChunkBody>,
    /// Room a new body starts with.
    chunk_bytes: usize,
    chunks: Vec<(u64, usize, u64)>,
    /// The directory belongs to a commit marker now; dropping keeps it.
    committed: bool,
}

impl std::fmt::Debug for Stage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Stage")
            .field("dir", &self.dir)
            .field("rows", &self.rows)
            .finish_non_exhaustive()
    }
}

impl Drop for Stage {
    fn drop(&mut self) {
        if !self.committed {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

impl Stage {
    /// A new, empty stage in the store at `root`.
    pub(super) fn create(root: &Path) -> Result<Stage> {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        let name = format!("{nanos}-{}", NEXT.fetch_add(1, Ordering::Relaxed));
        let dir = root.join(STAGE_DIR).join(&name);
        std::fs::create_dir_all(&dir)?;
        let file = File::options()
            .create_new(true)
            .read(true)
            .write(true)
            .open(dir.join("stage"))?;
        Ok(Stage {
            name,
            dir,
            file: BufWriter::with_capacity(1 << 20, file),
            written: 0,
            runs: Vec::new(),
            kind: None,
            rows: 0,
            watermark: None,
            body: None,
            chunk_bytes: CHUNK_BYTES,
            chunks: Vec::new(),
            committed: false,
        })
    }

    /// Rows staged so far.
    pub fn rows(&self) -> u64 {
        self.rows
    }

    /// Append one part's rows. Keyed rows are sorted, and a key the part
    /// holds twice fails the load at once.
    pub fn push(&mut self, target: &Target, op: WriteOp, watermark: Option<i64>) -> Result<()> {
        let start = self.written;
        match op {
            WriteOp::Append { rows } => self.push_appended(rows.iter().map(Vec::as_slice))?,
            WriteOp::InsertUnkeyed { rows } => self.push_rows(Kind::Unkeyed, &rows)?,
            WriteOp::Insert { mut rows } => {
                self.set_kind(Kind::Keyed)?;
                rows.sort_unstable_by(|a, b| a.key.cmp(&b.key));
                if let Some(pair) = rows.windows(2).find(|pair| pair[0].key == pair[1].key) {
                    return Err(duplicate(target, &pair[1]));
                }
                for row in &rows {
                    self.put(&row.key, &row.row)?;
                }
                self.rows += rows.len() as u64;
            }
            _ => return Err(Error::Internal("only inserts are staged".into())),
        }
        self.raise_watermark(watermark);
        self.runs.push((start, self.written));
        Ok(())
    }

    /// The watermark of rows staged without [`Stage::push`].
    pub fn raise_watermark(&mut self, watermark: Option<i64>) {
        self.watermark = self.watermark.max(watermark);
    }

    fn push_rows(&mut self, kind: Kind, rows: &[Vec<u8>]) -> Result<()> {
        self.set_kind(kind)?;
        for row in rows {
            self.put(&[], row)?;
        }
        self.rows += rows.len() as u64;
        Ok(())
    }

    /// Rows of an append-only table: they go into chunk bodies of
    /// [`CHUNK_ROWS`] rows, each written out once full, so that chunks cut
    /// where the log would.
    pub fn push_appended<'r>(&mut self, rows: impl Iterator<Item = &'r [u8]>) -> Result<()> {
        self.set_kind(Kind::Append)?;
        for row in rows {
            let room = self.chunk_bytes;
            let body = self
                .body
                .get_or_insert_with(|| ChunkBody::with_capacity(room));
            body.push(1, row);
            self.rows += 1;
            if body.count() as usize == CHUNK_ROWS {
                self.write_body()?;
            }
        }
        Ok(())
    }

    /// Writes the chunk being filled, if it has rows.
    fn write_body(&mut self) -> Result<()> {
        let Some(body) = self.body.take() else {
            return Ok(());
        };
        let rows = u64::from(body.count());
        let bytes = body.finish();
        // The next body starts with room for one like this, so that it
        // does not grow, and copy itself, as it fills.
        self.chunk_bytes = CHUNK_BYTES.max(bytes.len() + bytes.len() / 8);
        // A body is larger than the buffer: written past it, not through it.
        self.file.flush()?;
        self.file.get_mut().write_all(&bytes)?;
        self.chunks.push((self.written, bytes.len(), rows));
        self.written += bytes.len() as u64;
        Ok(())
    }

    fn set_kind(&mut self, kind: Kind) -> Result<()> {
        match self.kind.replace(kind) {
            Some(was) if was != kind => Err(Error::Internal(
                "parts of one load were encoded for different tables".into(),
            )),
            _ => Ok(()),
        }
    }

    /// An entry: `u32` key length, key, `u32` row length, row (little-endian).
    fn put(&mut self, key: &[u8], row: &[u8]) -> Result<()> {
        self.file.write_all(&(key.len() as u32).to_le_bytes())?;
        self.file.write_all(key)?;
        self.file.write_all(&(row.len() as u32).to_le_bytes())?;
        self.file.write_all(row)?;
        self.written += (8 + key.len() + row.len()) as u64;
        Ok(())
    }
}

/// One run of the stage file, read back entry by entry.
struct Run<'f> {
    file: &'f File,
    at: u64,
    end: u64,
    buffer: Vec<u8>,
    pos: usize,
}

impl<'f> Run<'f> {
    fn new(file: &'f File, (start, end): (u64, u64)) -> Run<'f> {
        Run {
            file,
            at: start,
            end,
            buffer: Vec::new(),
            pos: 0,
        }
    }

    /// The next entry's key and row, `None` at the run's end.
    fn next(&mut self) -> Result<Option<(Vec<u8>, Vec<u8>)>> {
        if self.at == self.end && self.pos == self.buffer.len() {
            return Ok(None);
        }
        let key_len = self.len()?;
        let key = self.take(key_len)?.to_vec();
        let row_len = self.len()?;
        let row = self.take(row_len)?.to_vec();
        Ok(Some((key, row)))
    }

    fn len(&mut self) -> Result<usize> {
        let bytes: [u8; 4] = self.take(4)?.try_into().map_err(|_| torn())?;
        Ok(u32::from_le_bytes(bytes) as usize)
    }

    fn take(&mut self, n: usize) -> Result<&[u8]> {
        let available = self.buffer.len() - self.pos;
        if available < n {
            self.buffer.drain(..self.pos);
            self.pos = 0;
            let left = (self.end - self.at) as usize;
            let want = (n - available).max(READ_BUFFER).min(left);
            if available + want < n {
                return Err(torn());
            }
            let old = self.buffer.len();
            self.buffer.resize(old + want, 0);
            self.file.read_exact_at(&mut self.buffer[old..], self.at)?;
            self.at += want as u64;
        }
        let bytes = &self.buffer[self.pos..self.pos + n];
        self.pos += n;
        Ok(bytes)
    }
}

fn torn() -> Error {
    Error::Internal("a staged COPY part is truncated".into())
}

/// Write `stage` as SST files and commit it; see the module documentation.
/// The caller holds the commit lock and has applied any parked group.
pub(super) fn commit(
    db: &DB,
    committer: &mut Committer,
    target: &Target,
    stage: &mut Stage,
    stamp: Stamp,
    producers: &[Producer],
) -> Result<u64> {
    stage.write_body()?;
    stage.file.flush()?;
    let Some(kind) = stage.kind else {
        return Ok(0);
    };
    let offsets = &mut committer.offsets;
    let current = offsets.watermark(db, target.topic, target.partitions)?;
    let watermark = current.max(stage.watermark);
    let written = write_files(db, offsets, target, stage, kind, stamp, watermark)?;
    commit_marker(db, committer, stage, stamp, producers)?;
    stage.committed = true;
    apply(db, &stage.dir, &stage.name).map_err(|e| {
        Error::Io(std::io::Error::other(format!(
            "a committed COPY could not be applied ({e}); restart the server to apply it"
        )))
    })?;
    remember(&mut committer.offsets, target.topic, written, watermark);
    Ok(stage.rows)
}

/// Step 1: the staged rows with their final keys, offsets and stamp, as
/// SST files beside the stage.
fn write_files(
    db: &DB,
    offsets: &mut Offsets,
    target: &Target,
    stage: &Stage,
    kind: Kind,
    stamp: Stamp,
    watermark: Option<i64>,
) -> Result<Written> {
    let options = sst_options();
    let mut out = Files::new(db, offsets, target, &stage.dir, &options, stamp, watermark)?;
    let file = stage.file.get_ref();
    let partitions = target.partitions.max(1);
    match kind {
        Kind::Keyed => merge_keyed(db, offsets, target, file, &stage.runs, &mut out)?,
        Kind::Append => {
            // As a single statement's: all in one partition, in order.
            let partition = (target.table as u32).wrapping_add(stage.rows as u32) % partitions;
            let mut value = Vec::new();
            for (i, &(at, len, rows)) in stage.chunks.iter().enumerate() {
                // Only bytes beyond the last chunk's are zeroed before the
                // read overwrites them: chunks are about the same size.
                value.resize(len, 0);
                value.reserve(TRAILER_BYTES);
                file.read_exact_at(&mut value, at)?;
                release(file, at, len);
                let last = i + 1 == stage.chunks.len();
                push_trailer(&mut value, watermark.filter(|_| last), Some(stamp));
                out.log_chunk(partition, &value, rows)?;
            }
        }
        Kind::Unkeyed => {
            let partition = (stage.rows as u32) % partitions;
            for_each(file, &stage.runs, |_, row| {
                let offset = out.log(partition, &row)?;
                let key = &keys::log_key(0, partition, offset)[8..];
                out.row(keys::row_key(target.table, key), &row)
            })?;
        }
    }
    out.finish()
}

/// Drop bytes of the stage file the commit has read: their pages go back
/// to the kernel at once, dirty or not, and the SST files being written
/// take them up. Pages freed moments ago cost only the copy, where fresh
/// ones cost far more on a virtual machine whose host takes back free
/// memory (benchmark notebook, 2026-12-07). Filesystems without holes
/// keep the bytes until the stage is removed.
fn release(file: &File, at: u64, len: usize) {
    use rustix::fs::FallocateFlags;
    let punch = FallocateFlags::PUNCH_HOLE | FallocateFlags::KEEP_SIZE;
    let _ = rustix::fs::fallocate(file, punch, at, len as u64);
}

/// Step 2, the commit point: a small synced write, like any group's.
fn commit_marker(
    db: &DB,
    committer: &mut Committer,
    stage: &Stage,
    stamp: Stamp,
    producers: &[Producer],
) -> Result<()> {
    let state = cf(db, CF_STATE);
    let mut batch = WriteBatch::default();
    batch.put_cf(state, keys::SEQUENCE_KEY, stamp.epoch.to_be_bytes());
    put_sequences(
        db,
        &mut batch,
        producers.iter().map(|(id, seq)| (id.as_str(), *seq)),
    );
    batch.put_cf(state, keys::load_marker_key(&stage.name), b"");
    match committer.log.as_mut() {
        Some(ring) => ring.commit(db, stamp.epoch, batch, None),
        None => commitlog::write_unsynced(db, batch),
    }
}

/// What the writer keeps between groups, moved past the load.
fn remember(offsets: &mut Offsets, topic: u64, written: Written, watermark: Option<i64>) {
    offsets.next.extend(
        written
            .next
            .into_iter()
            .map(|(partition, next)| ((topic, partition), next)),
    );
    if watermark.is_some() {
        offsets.watermarks.insert(topic, watermark);
    }
    if let Some(key) = written.highest_row {
        offsets.raise_end(&key);
    }
}

/// Every entry of the runs in file order.
fn for_each(
    file: &File,
    runs: &[(u64, u64)],
    mut visit: impl FnMut(Vec<u8>, Vec<u8>) -> Result<()>,
) -> Result<()> {
    for range in runs {
        let mut run = Run::new(file, *range);
        while let Some((key, row)) = run.next()? {
            visit(key, row)?;
        }
    }
    Ok(())
}

/// Keyed rows in key order across all runs: a key seen twice, or one the
/// table holds already, fails the load. Each row's log record goes to its
/// key's partition; within one statement their order does not matter.
fn merge_keyed(
    db: &DB,
    offsets: &mut Offsets,
    target: &Target,
    file: &File,
    runs: &[(u64, u64)],
    out: &mut Files<'_>,
) -> Result<()> {
    let mut runs: Vec<Run<'_>> = runs.iter().map(|r| Run::new(file, *r)).collect();
    let mut heap = BinaryHeap::with_capacity(runs.len());
    for (index, run) in runs.iter_mut().enumerate() {
        if let Some((key, row)) = run.next()? {
            heap.push(Reverse((key, index, row)));
        }
    }
    let mut previous: Option<Vec<u8>> = None;
    let mut unchecked: Vec<KeyedRow> = Vec::new();
    let mut check = None;
    while let Some(Reverse((key, index, row))) = heap.pop() {
        if let Some((next_key, next_row)) = runs[index].next()? {
            heap.push(Reverse((next_key, index, next_row)));
        }
        let full = keys::row_key(target.table, &key);
        let check = match check {
            Some(check) => check,
            // The smallest key: when it sorts after the table's last row,
            // none of them can exist yet.
            None => *check.insert(
                offsets
                    .end(db, target.table)?
                    .is_some_and(|last| last >= full.as_slice()),
            ),
        };
        if previous.as_deref() == Some(key.as_slice()) {
            return Err(duplicate(target, &KeyedRow { key, row }));
        }
        let partition = keys::partition_of(&key, target.partitions);
        out.log(partition, &row)?;
        out.row(full, &row)?;
        if check {
            unchecked.push(KeyedRow {
                key: key.clone(),
                row: Vec::new(),
            });
            if unchecked.len() == LOOKUP_KEYS {
                refuse_existing(db, target, &mut unchecked)?;
            }
        }
        previous = Some(key);
    }
    refuse_existing(db, target, &mut unchecked)
}

/// Fail when any of `rows` exists in the table already.
fn refuse_existing(db: &DB, target: &Target, rows: &mut Vec<KeyedRow>) -> Result<()> {
    let full: Vec<Vec<u8>> = rows
        .iter()
        .map(|r| keys::row_key(target.table, &r.key))
        .collect();
    let found = db.batched_multi_get_cf(cf(db, CF_ROWS), full.iter(), false);
    for (row, value) in rows.iter().zip(found) {
        if value?.is_some() {
            return Err(duplicate(target, row));
        }
    }
    rows.clear();
    Ok(())
}

/// Options for the SST files: uncompressed, as the families' first levels.
fn sst_options() -> Options {
    let mut options = Options::default();
    options.set_compression_type(rocksdb::DBCompressionType::None);
    options
}

/// The SST files a commit writes: one per log partition, one of rows.
struct Files<'o> {
    dir: &'o Path,
    options: &'o Options,
    topic: u64,
    stamp: Stamp,
    watermark: Option<i64>,
    starts: Vec<u64>,
    logs: BTreeMap<u32, LogFile<'o>>,
    rows: Option<SstFileWriter<'o>>,
    highest_row: Option<Vec<u8>>,
}

struct LogFile<'o> {
    writer: SstFileWriter<'o>,
    next: u64,
    /// Rows of the chunk being filled; the last one waits for the end,
    /// which puts the watermark on it.
    pending: Vec<Vec<u8>>,
}

/// What a commit wrote: each partition's next offset, the highest row key.
struct Written {
    next: Vec<(u32, u64)>,
    highest_row: Option<Vec<u8>>,
}

impl<'o> Files<'o> {
    fn new(
        db: &DB,
        offsets: &mut Offsets,
        target: &Target,
        dir: &'o Path,
        options: &'o Options,
        stamp: Stamp,
        watermark: Option<i64>,
    ) -> Result<Files<'o>> {
        let starts = (0..target.partitions.max(1))
            .map(|p| offsets.get(db, target.topic, p))
            .collect::<Result<_>>()?;
        Ok(Files {
            dir,
            options,
            topic: target.topic,
            stamp,
            watermark,
            starts,
            logs: BTreeMap::new(),
            rows: None,
            highest_row: None,
        })
    }

    /// Add a log record in `partition`; returns its offset.
    fn log(&mut self, partition: u32, row: &[u8]) -> Result<u64> {
        let (topic, stamp) = (self.topic, self.stamp);
        let log = self.log_file(partition)?;
        if log.pending.len() == CHUNK_ROWS {
            write_chunk(log, topic, partition, None, stamp)?;
        }
        log.pending.push(row.to_vec());
        Ok(log.next + log.pending.len() as u64 - 1)
    }

    /// Add a whole encoded chunk of `rows` records to `partition`, after
    /// whatever it holds; records are not to be added one by one too.
    fn log_chunk(&mut self, partition: u32, chunk: &[u8], rows: u64) -> Result<()> {
        let topic = self.topic;
        let log = self.log_file(partition)?;
        log.writer
            .put(keys::log_key(topic, partition, log.next), chunk)?;
        log.next += rows;
        Ok(())
    }

    fn log_file(&mut self, partition: u32) -> Result<&mut LogFile<'o>> {
        Ok(match self.logs.entry(partition) {
            std::collections::btree_map::Entry::Occupied(log) => log.into_mut(),
            std::collections::btree_map::Entry::Vacant(slot) => {
                let writer = SstFileWriter::create(self.options);
                writer.open(self.dir.join(format!("log-{partition:010}.sst")))?;
                let next = self.starts.get(partition as usize).copied().unwrap_or(0);
                slot.insert(LogFile {
                    writer,
                    next,
                    pending: Vec::with_capacity(CHUNK_ROWS),
                })
            }
        })
    }

    /// Add a row under its full key; keys must come in ascending order.
    fn row(&mut self, full_key: Vec<u8>, row: &[u8]) -> Result<()> {
        let writer = match &mut self.rows {
            Some(writer) => writer,
            None => {
                let writer = SstFileWriter::create(self.options);
                writer.open(self.dir.join("rows.sst"))?;
                self.rows.insert(writer)
            }
        };
        writer.put(&full_key, row)?;
        self.highest_row = Some(full_key);
        Ok(())
    }

    fn finish(mut self) -> Result<Written> {
        let mut next = Vec::with_capacity(self.logs.len());
        for (partition, mut log) in std::mem::take(&mut self.logs) {
            // Whole chunks carry their own trailers; rows added one by one
            // end with a chunk that carries the watermark.
            if !log.pending.is_empty() {
                write_chunk(&mut log, self.topic, partition, self.watermark, self.stamp)?;
            }
            log.writer.finish()?;
            next.push((partition, log.next));
        }
        if let Some(mut rows) = self.rows.take() {
            rows.finish()?;
        }
        Ok(Written {
            next,
            highest_row: self.highest_row,
        })
    }
}

fn write_chunk(
    log: &mut LogFile<'_>,
    topic: u64,
    partition: u32,
    watermark: Option<i64>,
    stamp: Stamp,
) -> Result<()> {
    let entries = log.pending.iter().map(|row| (1, row.as_slice()));
    let chunk = encode_chunk(entries, watermark, Some(stamp));
    log.writer
        .put(keys::log_key(topic, partition, log.next), chunk)?;
    log.next += log.pending.len() as u64;
    log.pending.clear();
    Ok(())
}

/// Ingest a committed load's files that are still there, then forget it.
fn apply(db: &DB, dir: &Path, name: &str) -> Result<()> {
    let mut logs = Vec::new();
    if dir.exists() {
        for entry in std::fs::read_dir(dir)? {
            let path = entry?.path();
            let is_log = path
                .file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("log-") && n.ends_with(".sst"));
            if is_log {
                logs.push(path);
            }
        }
    }
    logs.sort();
    ingest(db, CF_LOG, logs)?;
    let rows = dir.join("rows.sst");
    if rows.exists() {
        ingest(db, CF_ROWS, vec![rows])?;
    }
    db.delete_cf(cf(db, CF_STATE), keys::load_marker_key(name))?;
    match std::fs::remove_dir_all(dir) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e.into()),
        _ => Ok(()),
    }
}

/// Ingest files into one family, atomically, and remove them: a restart
/// that finds one again ingests the same entries once more, which changes
/// nothing.
fn ingest(db: &DB, family: &str, files: Vec<PathBuf>) -> Result<()> {
    if files.is_empty() {
        return Ok(());
    }
    let mut options = IngestExternalFileOptions::default();
    options.set_move_files(true);
    db.ingest_external_file_cf_opts(cf(db, family), &options, files.clone())?;
    for file in files {
        match std::fs::remove_file(&file) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e.into()),
            _ => {}
        }
    }
    Ok(())
}

/// At start: finish every load that committed, remove every other stage.
pub(super) fn recover(db: &DB) -> Result<()> {
    let mut names = Vec::new();
    let mut iter = db.raw_iterator_cf(cf(db, CF_STATE));
    iter.seek(keys::LOAD_MARKER_PREFIX);
    while let Some(key) = iter.key() {
        let Some(name) = key.strip_prefix(keys::LOAD_MARKER_PREFIX) else {
            break;
        };
        names.push(String::from_utf8_lossy(name).into_owned());
        iter.next();
    }
    iter.status()?;
    drop(iter);
    let root = db.path().join(STAGE_DIR);
    for name in names {
        tracing::warn!(load = %name, "finishing a COPY that committed before a restart");
        apply(db, &root.join(&name), &name)?;
    }
    match std::fs::remove_dir_all(&root) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e.into()),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use std::io::Write;
    use std::os::unix::fs::FileExt;

    use super::release;

    #[test]
    fn releasing_a_read_chunk_keeps_its_neighbours_in_shared_pages() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("stage");
        let chunks: Vec<Vec<u8>> = [5000usize, 9000, 3000]
            .iter()
            .enumerate()
            .map(|(i, len)| vec![i as u8 + 1; *len])
            .collect();
        let mut file = std::fs::File::create_new(&path).expect("create");
        for chunk in &chunks {
            file.write_all(chunk).expect("write");
        }
        release(&file, 5000, 9000);
        let read = |at: u64, len: usize| {
            let mut out = vec![0; len];
            file.read_exact_at(&mut out, at).expect("read");
            out
        };
        assert_eq!(read(0, 5000), chunks[0]);
        assert_eq!(read(14_000, 3000), chunks[2]);
        let middle = read(5000, 9000);
        // Zeroes where the filesystem punches holes, the bytes where not.
        assert!(middle == vec![0; 9000] || middle == chunks[1]);
        assert_eq!(file.metadata().expect("stat").len(), 17_000);
    }
}
