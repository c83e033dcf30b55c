//! The writer: applies every table write, one group at a time, and group-commits.
//!
//! A statement that finds the writer idle commits its own write on its own
//! thread, as a PostgreSQL backend flushes its own WAL: a single client then
//! pays for no hand-off to another thread and back. Otherwise it sends a
//! [`WriteRequest`] to the writer thread and waits for the reply. The writer
//! thread takes every request that is waiting, checks each against the
//! committed state plus the requests before it in the same group (an
//! overlay), and commits the group in one RocksDB `WriteBatch` with one fsync.
//! A request that fails its checks (a duplicate key, a concurrent update)
//! contributes nothing and gets its own error; the others commit. So a
//! statement is atomic, and many concurrent writers share one sync.
//!
//! Log offsets are assigned under the commit lock, which makes each
//! partition's offsets dense and ordered by commit.
//!
//! A bulk load too large for one `WriteBatch` is staged on disk and
//! committed apart from the groups, under the same lock: see [`bulk`].

mod bulk;

use std::collections::hash_map::Entry;
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use rocksdb::{DB, WriteBatch};
use tokio::sync::{mpsc, oneshot, watch};

use crate::error::{Error, Result};
use crate::log::embedded::{CHUNK_ROWS, Stamp, chunk_len, decode_chunk, encode_chunk};
use crate::state::commitlog::{self, CommitLog, Unapplied};
use crate::state::disk::{DiskGuard, is_disk_full};
use crate::state::{CF_LOG, CF_ROWS, CF_STATE, Store, cf, keys};

pub use bulk::Stage;

/// What a write is applied to.
#[derive(Clone)]
pub struct Target {
    pub table: u64,
    pub name: String,
    pub topic: u64,
    pub partitions: u32,
    /// The constraint name reported on duplicate keys, e.g. `t_pkey`.
    pub constraint: String,
    /// Renders an encoded key for error messages, e.g. `(id)=(1)`.
    pub describe_key: KeyRenderer,
}

/// Renders an encoded key for messages; supplied by the catalog, which knows the key's types.
pub type KeyRenderer = Arc<dyn Fn(&[u8]) -> String + Send + Sync>;

impl std::fmt::Debug for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Target")
            .field("table", &self.table)
            .field("name", &self.name)
            .finish()
    }
}

/// One encoded row: its key in the `rows` family (without the table prefix) and its bytes.
#[derive(Debug, Clone)]
pub struct KeyedRow {
    pub key: Vec<u8>,
    pub row: Vec<u8>,
}

#[derive(Debug)]
pub enum WriteOp {
    /// Append-only tables: records go to the log only.
    Append { rows: Vec<Vec<u8>> },
    /// Keyed tables: insert rows whose keys must not exist yet.
    Insert { rows: Vec<KeyedRow> },
    /// Tables without a primary key: the writer keys each row by its log position.
    InsertUnkeyed { rows: Vec<Vec<u8>> },
    /// Delete rows by key; rows already gone are skipped.
    Delete { keys: Vec<Vec<u8>> },
    /// Replace rows: each old row must still be as the statement read it.
    Update { changes: Vec<Change> },
    /// Set each key's row whatever was there, or delete it (`None`): a
    /// table fed by an upsert connector, where the last message per key wins.
    Upsert { rows: Vec<UpsertRow> },
}

/// A row key and its new row, or `None` to delete it.
pub type UpsertRow = (Vec<u8>, Option<Vec<u8>>);

impl WriteOp {
    /// Rows the write touches, as its command tag counts them.
    pub fn row_count(&self) -> u64 {
        let n = match self {
            WriteOp::Append { rows } | WriteOp::InsertUnkeyed { rows } => rows.len(),
            WriteOp::Insert { rows } => rows.len(),
            WriteOp::Delete { keys } => keys.len(),
            WriteOp::Update { changes } => changes.len(),
            WriteOp::Upsert { rows } => rows.len(),
        };
        n as u64
    }
}

#[derive(Debug)]
pub struct Change {
    pub old_key: Vec<u8>,
    pub old_row: Vec<u8>,
    pub new: KeyedRow,
}

#[derive(Debug)]
pub struct WriteRequest {
    pub target: Target,
    pub op: WriteOp,
    /// The highest watermark the written rows imply (their event times
    /// minus the table's delay); `None` when the table has no watermark.
    pub watermark: Option<i64>,
    /// The producer ids and sequence numbers the write was published with:
    /// a session's one, or a connector's position in each partition it read.
    pub producers: Vec<Producer>,
    pub reply: oneshot::Sender<Result<u64>>,
}

/// An idempotent publisher's id and the sequence number of one write.
pub type Producer = (String, u64);

tokio::task_local! {
    /// The producer id and sequence number of the statement being run, when
    /// its session set them (`SET weir.producer_id`, `SET weir.producer_seq`).
    pub static PRODUCER: Option<Producer>;
}

/// The producer of the statement this task runs, if any.
pub fn current_producer() -> Option<Producer> {
    PRODUCER.try_with(Clone::clone).ok().flatten()
}

/// Where the last committed sequence number of a producer is kept.
fn producer_key(id: &str) -> Vec<u8> {
    [b"\xffproducer\x00".as_slice(), id.as_bytes()].concat()
}

/// The last sequence number `id` committed: for a connector, where it resumes.
pub fn producer_seq(db: &DB, id: &str) -> Result<Option<u64>> {
    crate::state::read_u64(db, &producer_key(id))
}

/// A handle to the writer.
#[derive(Clone, Debug)]
pub struct Writer {
    tx: mpsc::Sender<WriteRequest>,
    /// The sequence number of the last committed group.
    committed: watch::Receiver<u64>,
    shared: Arc<Shared>,
}

/// What every committer shares: the writer thread and inline callers.
struct Shared {
    db: Weak<DB>,
    disk: Option<DiskGuard>,
    /// Held while a group commits, so that one group commits at a time.
    committer: parking_lot::Mutex<Committer>,
    /// An inline commit's group, synced and acknowledged, not yet applied.
    unapplied: Arc<Unapplied>,
    sequence: watch::Sender<u64>,
    /// Requests sent to the writer thread that it has not taken yet; while
    /// there are any, nobody commits inline ahead of them.
    queued: AtomicUsize,
    /// Until when (microseconds since `started`) statements leave commits
    /// to the writer thread, because several were writing at once lately.
    contended_until: AtomicU64,
    started: Instant,
    now: Now,
}

/// How long statements stop committing inline after two wrote at once.
/// Under concurrency an inline commit would block one of the few threads
/// that serve connections for a whole sync, and commit a group of one.
const CONTENDED: Duration = Duration::from_millis(100);

impl Shared {
    fn now(&self) -> u64 {
        self.started.elapsed().as_micros() as u64
    }

    fn contended(&self) -> bool {
        self.now() < self.contended_until.load(Ordering::Relaxed)
    }

    fn mark_contended(&self) {
        let until = self.now() + CONTENDED.as_micros() as u64;
        self.contended_until.fetch_max(until, Ordering::Relaxed);
    }
}

impl Shared {
    /// Apply an inline group once its statement has replied. On a
    /// connection thread the task runs when the connection turns to wait
    /// for its client, so the reply does not wait for RocksDB.
    fn apply_after_reply(self: &Arc<Self>) {
        if !self.unapplied.is_waiting() {
            return;
        }
        let shared = self.clone();
        let apply = move || {
            if let Some(db) = shared.db.upgrade() {
                shared.unapplied.settle_for_read(&db);
            }
        };
        match tokio::runtime::Handle::try_current() {
            Ok(handle) => drop(handle.spawn(async move { apply() })),
            Err(_) => apply(),
        }
    }
}

impl std::fmt::Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shared").finish_non_exhaustive()
    }
}

impl Writer {
    /// Start the writer thread. It stops when every handle is dropped.
    ///
    /// The thread holds the database only while it commits, so that whoever
    /// owns the store decides when RocksDB closes (it must close before exit).
    ///
    /// `sync` false acknowledges writes before they reach the disk: for
    /// measuring what fsync costs, never for data a power cut must not lose.
    /// Log chunks are stamped with `now`'s time: what retention and
    /// compaction measure age by.
    pub fn start(store: &Store, disk: Option<DiskGuard>, sync: bool, now: Now) -> Result<Writer> {
        let db = store.db();
        let (tx, rx) = mpsc::channel(1024);
        // Opened even when writes are not synced: what a power cut took from
        // an earlier run that synced must come back either way.
        let log = CommitLog::open(db, read_sequence(db)?)?;
        // After the ring: a load's commit marker may be among what it replayed.
        bulk::recover(db)?;
        let log = sync.then_some(log);
        let (sequence, committed) = watch::channel(read_sequence(db)?);
        let shared = Arc::new(Shared {
            db: Arc::downgrade(db),
            disk,
            committer: parking_lot::Mutex::new(Committer {
                offsets: Offsets::default(),
                log,
            }),
            unapplied: store.unapplied().clone(),
            sequence,
            queued: AtomicUsize::new(0),
            contended_until: AtomicU64::new(0),
            started: Instant::now(),
            now,
        });
        let thread = shared.clone();
        std::thread::Builder::new()
            .name("weir-writer".into())
            .spawn(move || run(&thread, rx))?;
        Ok(Writer {
            tx,
            committed,
            shared,
        })
    }

    /// Watches the sequence number of the last committed group: every table
    /// log chunk is stamped with the sequence of the group that wrote it.
    pub fn committed(&self) -> watch::Receiver<u64> {
        self.committed.clone()
    }

    /// Apply one statement's writes; returns the rows affected once durable.
    pub async fn write(&self, target: Target, op: WriteOp) -> Result<u64> {
        self.write_marked(target, op, None).await
    }

    /// Like [`Writer::write`], for a table with a watermark: the table's
    /// watermark becomes `max(current, watermark)` once the write commits,
    /// and the write's last log chunks carry it.
    pub async fn write_marked(
        &self,
        target: Target,
        op: WriteOp,
        watermark: Option<i64>,
    ) -> Result<u64> {
        let producers = current_producer().into_iter().collect();
        self.write_from(target, op, watermark, producers).await
    }

    /// Like [`Writer::write_marked`], for a connector: the write commits
    /// together with its producer's position, and a position already
    /// committed is not written again.
    pub async fn write_from(
        &self,
        target: Target,
        op: WriteOp,
        watermark: Option<i64>,
        producers: Vec<Producer>,
    ) -> Result<u64> {
        let (reply, rx) = oneshot::channel();
        let request = WriteRequest {
            target,
            op,
            watermark,
            producers,
            reply,
        };
        if let Some(request) = self.commit_inline(request) {
            self.shared.queued.fetch_add(1, Ordering::AcqRel);
            self.tx
                .send(request)
                .await
                .map_err(|_| Error::ShuttingDown)?;
        }
        rx.await.map_err(|_| Error::ShuttingDown)?
    }

    /// A new, empty stage for a bulk load into this store.
    pub fn stage(&self) -> Result<Stage> {
        let db = self.shared.db.upgrade().ok_or(Error::ShuttingDown)?;
        Stage::create(db.path())
    }

    /// Commit a staged load as one statement, atomically; returns its rows.
    /// Other writes wait while its files are written and ingested.
    pub async fn commit_stage(&self, target: Target, stage: Stage) -> Result<u64> {
        let producers: Vec<Producer> = current_producer().into_iter().collect();
        let shared = self.shared.clone();
        let commit = move || shared.commit_stage(&target, stage, &producers);
        tokio::task::spawn_blocking(commit)
            .await
            .map_err(|e| Error::Internal(format!("a bulk load's commit failed: {e}")))?
    }

    /// Commit `request` on this thread when the writer is idle and nobody
    /// else wrote lately; hands it back otherwise.
    ///
    /// This blocks the calling thread for one sync. At most one thread does
    /// so at a time, and only while statements write one at a time.
    fn commit_inline(&self, request: WriteRequest) -> Option<WriteRequest> {
        let shared = &self.shared;
        if shared.queued.load(Ordering::Acquire) != 0 || shared.contended() {
            return Some(request);
        }
        let Some(mut committer) = shared.committer.try_lock() else {
            shared.mark_contended();
            return Some(request);
        };
        shared.commit(&mut committer, vec![request], true);
        drop(committer);
        shared.apply_after_reply();
        if shared.queued.load(Ordering::Acquire) != 0 {
            shared.mark_contended();
        }
        None
    }
}

/// Requests committed together at most; bounds a group's memory.
const MAX_GROUP: usize = 256;

/// Where the sequence number of the last committed group is kept.
pub const SEQUENCE_KEY: &[u8] = b"\xffwseq";

/// Processing time in microseconds since the Unix epoch: the node's clock,
/// which tests may drive by hand.
pub type Now = Arc<dyn Fn() -> i64 + Send + Sync>;

/// The wall clock, as a [`Now`].
pub fn wall_clock() -> Now {
    Arc::new(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_micros() as i64)
    })
}

fn read_sequence(db: &DB) -> Result<u64> {
    Ok(crate::state::read_u64(db, SEQUENCE_KEY)?.unwrap_or(0))
}

fn run(shared: &Shared, mut rx: mpsc::Receiver<WriteRequest>) {
    while let Some(first) = rx.blocking_recv() {
        let mut requests = vec![first];
        while requests.len() < MAX_GROUP {
            match rx.try_recv() {
                Ok(next) => requests.push(next),
                Err(_) => break,
            }
        }
        shared.queued.fetch_sub(requests.len(), Ordering::AcqRel);
        if requests.len() > 1 {
            shared.mark_contended();
        }
        let mut committer = shared.committer.lock();
        if !shared.commit(&mut committer, requests, false) {
            break;
        }
    }
}

impl Shared {
    /// Commit one group and answer each request; false once the store is
    /// gone. An `inline` group is applied to RocksDB after its reply.
    fn commit(&self, committer: &mut Committer, requests: Vec<WriteRequest>, inline: bool) -> bool {
        let Some(db) = self.db.upgrade() else {
            for request in requests {
                let _ = request.reply.send(Err(Error::ShuttingDown));
            }
            return false;
        };
        let stamp = Stamp {
            epoch: *self.sequence.borrow() + 1,
            time: (self.now)(),
            compacted: false,
        };
        let later = inline.then_some(self.unapplied.as_ref());
        let replies = match self.disk.as_ref().map(DiskGuard::check) {
            Some(Err(full)) => refuse(requests, &full),
            // Checks read the store: the group before must be in it.
            _ => match self.unapplied.settle(&db) {
                Err(e) => refuse(requests, &e),
                Ok(()) => commit_group(&db, committer, requests, stamp, later),
            },
        };
        if replies.iter().any(|(_, outcome)| outcome.is_ok()) {
            self.sequence.send_replace(stamp.epoch);
        }
        // Let go of the database before anyone hears back: whoever owns the
        // store must be the one that closes it.
        drop(db);
        for (reply, outcome) in replies {
            // A client that went away does not undo a committed write.
            let _ = reply.send(outcome);
        }
        true
    }
}

impl Shared {
    fn commit_stage(
        &self,
        target: &Target,
        mut stage: Stage,
        producers: &[Producer],
    ) -> Result<u64> {
        let db = self.db.upgrade().ok_or(Error::ShuttingDown)?;
        if let Some(disk) = &self.disk {
            disk.check()?;
        }
        let mut committer = self.committer.lock();
        // Checks read the store: the group before must be in it.
        self.unapplied.settle(&db)?;
        if stage.rows() == 0 || Group::default().all_committed(&db, producers)? {
            return Ok(stage.rows());
        }
        let stamp = Stamp {
            epoch: *self.sequence.borrow() + 1,
            time: (self.now)(),
            compacted: false,
        };
        match bulk::commit(&db, &mut committer, target, &mut stage, stamp, producers) {
            Ok(rows) => {
                self.sequence.send_replace(stamp.epoch);
                Ok(rows)
            }
            Err(e) => {
                committer.offsets.forget();
                Err(e)
            }
        }
    }
}

type Reply = (oneshot::Sender<Result<u64>>, Result<u64>);

/// Every request of a group refused: the disk is nearly full, or the
/// group before could not be applied.
fn refuse(requests: Vec<WriteRequest>, error: &Error) -> Vec<Reply> {
    let message = error.to_string();
    requests
        .into_iter()
        .map(|r| {
            let failed = match error {
                Error::DiskFull(_) => Error::DiskFull(message.clone()),
                _ => Error::Io(std::io::Error::other(message.clone())),
            };
            (r.reply, Err(failed))
        })
        .collect()
}

/// What the one committing thread owns.
struct Committer {
    offsets: Offsets,
    /// Where groups become durable; `None` when writes are not synced.
    log: Option<CommitLog>,
}

/// Apply and commit one group; returns each request's reply.
fn commit_group(
    db: &DB,
    committer: &mut Committer,
    requests: Vec<WriteRequest>,
    stamp: Stamp,
    later: Option<&Unapplied>,
) -> Vec<Reply> {
    let offsets = &mut committer.offsets;
    let mut group = Group {
        stamp,
        ..Group::default()
    };
    let mut replies = Vec::with_capacity(requests.len());
    let count = requests.len();
    for (index, request) in requests.into_iter().enumerate() {
        match group.all_committed(db, &request.producers) {
            // Already committed: a retry after a lost acknowledgement.
            Ok(true) => {
                replies.push((request.reply, Ok(request.op.row_count())));
                continue;
            }
            Ok(false) => {}
            Err(e) => {
                replies.push((request.reply, Err(e)));
                continue;
            }
        }
        let mut pending = Pending::new(&group, offsets);
        let outcome = pending
            .apply(db, &request.target, request.op, request.watermark)
            .map(|count| (count, pending.finish()));
        match outcome {
            Ok((rows, staged)) => {
                // Only later requests of the group read the overlay.
                group.absorb(staged, offsets, index + 1 < count);
                group.producers.extend(request.producers);
                replies.push((request.reply, Ok(rows)));
            }
            Err(e) => replies.push((request.reply, Err(e))),
        }
    }
    if let Err(e) = group.commit(db, committer.log.as_mut(), later) {
        tracing::error!(cause = %e, "group commit failed");
        committer.offsets.forget();
        let full = is_disk_full(&e);
        let message = e.to_string();
        return replies
            .into_iter()
            .map(|(reply, outcome)| {
                let failed = if full {
                    Error::DiskFull(format!("could not write, the disk is full: {message}"))
                } else {
                    Error::Internal(format!("commit failed: {message}"))
                };
                (reply, outcome.and(Err(failed)))
            })
            .collect();
    }
    replies
}

/// Next offset of each topic partition and each topic's watermark, loaded
/// from the log on first use.
#[derive(Default)]
struct Offsets {
    next: HashMap<(u64, u32), u64>,
    watermarks: HashMap<u64, Option<i64>>,
    /// Per table, a row key (with table prefix) no row key sorts after, or
    /// `None` when the table has no rows. Only ever too high, never too
    /// low: deletes and failed groups leave it be, which costs a point read
    /// later, never a missed duplicate.
    ends: HashMap<u64, Option<Vec<u8>>>,
}

impl Offsets {
    fn watermark(&mut self, db: &DB, topic: u64, partitions: u32) -> Result<Option<i64>> {
        if let Some(known) = self.watermarks.get(&topic) {
            return Ok(*known);
        }
        let mut watermark = None;
        for partition in 0..partitions.max(1) {
            watermark = watermark.max(log_watermark(db, topic, partition)?);
        }
        self.watermarks.insert(topic, watermark);
        Ok(watermark)
    }

    fn get(&mut self, db: &DB, topic: u64, partition: u32) -> Result<u64> {
        if let Some(next) = self.next.get(&(topic, partition)) {
            return Ok(*next);
        }
        let next = log_end(db, topic, partition)?;
        self.next.insert((topic, partition), next);
        Ok(next)
    }

    fn forget(&mut self) {
        self.next.clear();
        self.watermarks.clear();
        self.ends.clear();
    }

    /// The bound of `table`'s row keys, read from the store on first use.
    fn end(&mut self, db: &DB, table: u64) -> Result<Option<&[u8]>> {
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
    fn raise_end(&mut self, full_key: &[u8]) {
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
pub fn log_watermark(db: &DB, topic: u64, partition: u32) -> Result<Option<i64>> {
    let prefix = keys::log_partition_prefix(topic, partition);
    let mut iter = db.raw_iterator_cf(cf(db, CF_LOG));
    iter.seek_for_prev(keys::prefix_end(&prefix));
    iter.status()?;
    match (iter.key(), iter.value()) {
        (Some(key), Some(value)) if key.starts_with(&prefix) => Ok(decode_chunk(value)?.watermark),
        _ => Ok(None),
    }
}

/// The offset after the last record of a partition.
pub fn log_end(db: &DB, topic: u64, partition: u32) -> Result<u64> {
    let prefix = keys::log_partition_prefix(topic, partition);
    let mut iter = db.raw_iterator_cf(cf(db, CF_LOG));
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

/// Everything the requests of one group have staged so far.
#[derive(Default)]
struct Group {
    ops: Vec<Op>,
    /// Row keys (with table prefix) written by earlier requests, to the op that wrote them last.
    overlay: HashMap<Vec<u8>, usize>,
    /// The last sequence number each producer committed in this group.
    producers: HashMap<String, u64>,
    /// Stamped on every log chunk the group writes.
    stamp: Stamp,
}

enum Op {
    PutRow(Vec<u8>, Vec<u8>),
    DeleteRow(Vec<u8>),
    PutLog(Vec<u8>, Vec<u8>),
}

impl Group {
    fn absorb(&mut self, staged: Staged, offsets: &mut Offsets, visible: bool) {
        // A request writes one table: its highest new key is its bound.
        let highest = staged
            .rows
            .iter()
            .filter(|(_, value)| value.is_some())
            .map(|(key, _)| key)
            .max();
        if let Some(key) = highest {
            offsets.raise_end(key);
        }
        self.ops.reserve(staged.rows.len() + staged.log.len());
        for (key, value) in staged.rows {
            if visible {
                self.overlay.insert(key.clone(), self.ops.len());
            }
            self.ops.push(match value {
                Some(v) => Op::PutRow(key, v),
                None => Op::DeleteRow(key),
            });
        }
        for (key, chunk) in staged.log {
            self.ops.push(Op::PutLog(key, chunk));
        }
        offsets.next.extend(staged.offsets);
        if let Some((topic, watermark)) = staged.watermark {
            offsets.watermarks.insert(topic, Some(watermark));
        }
    }

    /// The value an earlier request of this group left under a row key, if any wrote it.
    fn lookup(&self, key: &[u8]) -> Option<Option<Vec<u8>>> {
        let index = self.overlay.get(key)?;
        match &self.ops[*index] {
            Op::PutRow(_, value) => Some(Some(value.clone())),
            Op::DeleteRow(_) | Op::PutLog(..) => Some(None),
        }
    }

    /// Whether the write of these positions has committed already: they
    /// commit together, so any one of them tells.
    fn all_committed(&self, db: &DB, producers: &[Producer]) -> Result<bool> {
        for (id, seq) in producers {
            match self.last_seq(db, id)? {
                Some(last) if *seq <= last => {}
                _ => return Ok(false),
            }
        }
        Ok(!producers.is_empty())
    }

    /// The last sequence number `id` committed, in this group or before.
    fn last_seq(&self, db: &DB, id: &str) -> Result<Option<u64>> {
        if let Some(seq) = self.producers.get(id) {
            return Ok(Some(*seq));
        }
        let Some(bytes) = db.get_cf(cf(db, CF_STATE), producer_key(id))? else {
            return Ok(None);
        };
        let raw: [u8; 8] = bytes
            .as_slice()
            .try_into()
            .map_err(|_| Error::Internal("malformed producer sequence in state".into()))?;
        Ok(Some(u64::from_be_bytes(raw)))
    }

    /// About what the group's `WriteBatch` will hold: each record's key and
    /// value plus a few bytes of tag, family and lengths.
    fn batch_bytes(&self) -> usize {
        const RECORD: usize = 16;
        let ops: usize = self
            .ops
            .iter()
            .map(|op| match op {
                Op::PutRow(k, v) | Op::PutLog(k, v) => k.len() + v.len() + RECORD,
                Op::DeleteRow(k) => k.len() + RECORD,
            })
            .sum();
        let producers: usize = self.producers.keys().map(|id| id.len() + 40).sum();
        ops + producers + 64
    }

    fn commit(
        self,
        db: &DB,
        ring: Option<&mut CommitLog>,
        later: Option<&Unapplied>,
    ) -> Result<()> {
        let rows = cf(db, CF_ROWS);
        let log = cf(db, CF_LOG);
        // Sized up front: a bulk load's batch would otherwise grow by
        // doubling, copying itself and faulting in fresh pages each time.
        let mut batch = WriteBatch::with_capacity_bytes(self.batch_bytes());
        batch.put_cf(
            cf(db, CF_STATE),
            SEQUENCE_KEY,
            self.stamp.epoch.to_be_bytes(),
        );
        // A producer's sequence commits in the same write as its rows.
        for (id, seq) in &self.producers {
            batch.put_cf(cf(db, CF_STATE), producer_key(id), seq.to_be_bytes());
        }
        for op in self.ops {
            match op {
                Op::PutRow(k, v) => batch.put_cf(rows, k, v),
                Op::DeleteRow(k) => batch.delete_cf(rows, k),
                Op::PutLog(k, v) => batch.put_cf(log, k, v),
            }
        }
        match ring {
            Some(ring) => ring.commit(db, self.stamp.epoch, batch, later),
            None => commitlog::write_unsynced(db, batch),
        }
    }
}

/// A row key (with table prefix) and its new value, `None` to delete it.
type StagedRow = (Vec<u8>, Option<Vec<u8>>);

/// What one request would change, kept apart until its checks pass.
#[derive(Default)]
struct Staged {
    rows: Vec<StagedRow>,
    log: Vec<(Vec<u8>, Vec<u8>)>,
    offsets: HashMap<(u64, u32), u64>,
    watermark: Option<(u64, i64)>,
}

struct Pending<'g> {
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
    fn new(group: &'g Group, offsets: &'g mut Offsets) -> Self {
        Pending {
            group,
            offsets,
            staged: Staged::default(),
            records: HashMap::new(),
        }
    }

    fn apply(
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

    fn finish(self) -> Staged {
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
        for (change, full) in changes.iter().zip(&old_full) {
            self.record(target, &change.old_key, -1, change.old_row.clone());
            self.staged.rows.push((full.clone(), None));
        }
        for (change, full) in changes.iter().zip(new_full) {
            self.record(target, &change.new.key, 1, change.new.row.clone());
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
            if old == new {
                continue;
            }
            if let Some(old) = old {
                self.record(target, &key, -1, old);
            }
            if let Some(new) = &new {
                self.record(target, &key, 1, new.clone());
            }
            self.staged.rows.push((full, new));
        }
        Ok(count)
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

fn duplicate(target: &Target, row: &KeyedRow) -> Error {
    Error::UniqueViolation {
        constraint: target.constraint.clone(),
        key: (target.describe_key)(&row.key),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::Store;

    fn target() -> Target {
        Target {
            table: 7,
            name: "t".into(),
            topic: 7,
            partitions: 2,
            constraint: "t_pkey".into(),
            describe_key: Arc::new(|k| format!("{k:?}")),
        }
    }

    fn row(key: &[u8], value: &[u8]) -> KeyedRow {
        KeyedRow {
            key: key.to_vec(),
            row: value.to_vec(),
        }
    }

    /// A store in `dir` with a syncing writer.
    fn open(dir: &std::path::Path) -> (Store, Writer) {
        let store = Store::open(dir).expect("open");
        let writer = Writer::start(&store, None, true, wall_clock()).expect("writer");
        (store, writer)
    }

    fn insert_one(key: &[u8], value: &[u8]) -> WriteOp {
        WriteOp::Insert {
            rows: vec![row(key, value)],
        }
    }

    /// Every record of the test table's log, as a reader sees it.
    fn total_log(store: &Store) -> u64 {
        let _ = store.read_view();
        let db = store.db();
        (0..2).map(|p| log_end(db, 7, p).expect("log end")).sum()
    }

    /// Records in the test table's log as stored, compacted runs included.
    fn stored_records(store: &Store) -> u64 {
        let view = store.read_view();
        let mut records = 0;
        for partition in 0..2 {
            crate::log::embedded::read_raw(&view, 7, partition, 0, |_, count, _, _| {
                records += count;
                Ok(true)
            })
            .expect("read");
        }
        records
    }

    #[tokio::test]
    async fn an_upserted_tables_compacted_log_holds_its_live_rows() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (store, writer) = open(dir.path());
        for round in 0..200u32 {
            let rows = (0..10u8)
                .map(|k| (vec![k], Some(round.to_be_bytes().to_vec())))
                .collect();
            writer
                .write(target(), WriteOp::Upsert { rows })
                .await
                .expect("upsert");
        }
        let deleted = (0..3u8).map(|k| (vec![k], None)).collect();
        writer
            .write(target(), WriteOp::Upsert { rows: deleted })
            .await
            .expect("delete");
        let written = stored_records(&store);
        let ends = total_log(&store);
        for partition in 0..2 {
            crate::log::embedded::compact(store.db(), 7, partition, i64::MAX, u64::MAX)
                .expect("compact");
        }
        let kept = stored_records(&store);
        // Seven live rows, plus each partition's last write kept as written.
        assert!(written > 3_000, "{written} records written");
        assert!(kept <= 7 + 2 * 10, "{kept} records after compaction");
        assert_eq!(total_log(&store), ends, "offsets keep their meaning");
    }

    #[tokio::test]
    async fn inserts_deletes_and_updates_keep_rows_and_log_in_step() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (store, writer) = open(dir.path());
        let insert = WriteOp::Insert {
            rows: vec![row(b"a", b"1"), row(b"b", b"2")],
        };
        assert_eq!(writer.write(target(), insert).await.expect("insert"), 2);

        let dup = WriteOp::Insert {
            rows: vec![row(b"c", b"3"), row(b"a", b"9")],
        };
        let err = writer.write(target(), dup).await.expect_err("duplicate");
        assert_eq!(err.sqlstate(), "23505");
        assert_eq!(
            total_log(&store),
            2,
            "a failed statement writes no log records"
        );

        let update = WriteOp::Update {
            changes: vec![Change {
                old_key: b"a".to_vec(),
                old_row: b"1".to_vec(),
                new: row(b"z", b"5"),
            }],
        };
        assert_eq!(writer.write(target(), update).await.expect("update"), 1);
        let stale = WriteOp::Update {
            changes: vec![Change {
                old_key: b"b".to_vec(),
                old_row: b"old".to_vec(),
                new: row(b"b", b"6"),
            }],
        };
        assert_eq!(
            writer
                .write(target(), stale)
                .await
                .expect_err("stale")
                .sqlstate(),
            "40001"
        );

        let delete = WriteOp::Delete {
            keys: vec![b"b".to_vec(), b"missing".to_vec()],
        };
        assert_eq!(writer.write(target(), delete).await.expect("delete"), 1);
        // +a +b, then -a +z, then -b.
        assert_eq!(total_log(&store), 5);
        let view = store.read_view();
        let found = view
            .multi_get(
                crate::state::CF_ROWS,
                &[keys::row_key(7, b"z"), keys::row_key(7, b"b")],
            )
            .expect("read");
        assert_eq!(found, vec![Some(b"5".to_vec()), None]);
    }

    #[tokio::test]
    async fn keys_at_or_below_the_last_row_are_checked_after_ascending_inserts() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (_store, writer) = open(dir.path());
        for key in [b"b", b"d", b"f"] {
            let insert = insert_one(key, b"1");
            writer
                .write(target(), insert)
                .await
                .expect("ascending insert");
        }
        for key in [b"f", b"b"] {
            let again = insert_one(key, b"2");
            let err = writer.write(target(), again).await.expect_err("duplicate");
            assert_eq!(err.sqlstate(), "23505", "key {key:?}");
        }
        let delete = WriteOp::Delete {
            keys: vec![b"f".to_vec()],
        };
        writer.write(target(), delete).await.expect("delete");
        for key in [b"f", b"c", b"g"] {
            let insert = insert_one(key, b"3");
            writer.write(target(), insert).await.expect("free key");
        }
        let dup = insert_one(b"g", b"4");
        let err = writer.write(target(), dup).await.expect_err("duplicate");
        assert_eq!(err.sqlstate(), "23505");
    }

    #[tokio::test]
    async fn an_acknowledged_inline_write_is_seen_by_every_read_before_it_is_applied() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (store, writer) = open(dir.path());
        let raw = |key: &[u8]| {
            let family = crate::state::cf(store.db(), CF_ROWS);
            store
                .db()
                .get_cf(family, keys::row_key(7, key))
                .expect("get")
        };
        writer
            .write(target(), insert_one(b"a", b"1"))
            .await
            .expect("insert");
        // This task has not yielded since the reply, so the group is parked.
        assert!(store.unapplied().is_waiting());
        assert_eq!(raw(b"a"), None, "not in RocksDB yet");
        let view = store.read_view();
        assert!(!store.unapplied().is_waiting());
        assert_eq!(
            view.get(CF_ROWS, &keys::row_key(7, b"a")).expect("read"),
            Some(b"1".to_vec())
        );

        writer
            .write(target(), insert_one(b"b", b"1"))
            .await
            .expect("insert");
        assert!(store.unapplied().is_waiting());
        let err = writer
            .write(target(), insert_one(b"b", b"2"))
            .await
            .expect_err("the parked row is checked");
        assert_eq!(err.sqlstate(), "23505");
        assert_eq!(total_log(&store), 2);

        writer
            .write(target(), insert_one(b"c", b"1"))
            .await
            .expect("insert");
        tokio::task::yield_now().await;
        assert!(
            !store.unapplied().is_waiting(),
            "applied once the task yields"
        );
        assert_eq!(raw(b"c"), Some(b"1".to_vec()));
    }

    #[tokio::test]
    async fn a_store_that_lost_its_unsynced_writes_gets_them_back_from_the_commit_log() {
        let synced = tempfile::tempdir().expect("tempdir");
        let (store, writer) = open(synced.path());
        for key in [b"a", b"b", b"c"] {
            let insert = insert_one(key, b"1");
            writer.write(target(), insert).await.expect("insert");
        }
        let ring = std::fs::read(store.db().path().join("commit.ring")).expect("ring");

        // A store whose own log lost every write, beside the ring that kept them.
        let lost = tempfile::tempdir().expect("tempdir");
        let store = Store::open(lost.path()).expect("open");
        std::fs::write(store.db().path().join("commit.ring"), ring).expect("copy ring");
        let writer = Writer::start(&store, None, true, wall_clock()).expect("writer");
        assert_eq!(*writer.committed().borrow(), 3);
        assert_eq!(total_log(&store), 3);
        let again = insert_one(b"a", b"2");
        let err = writer.write(target(), again).await.expect_err("duplicate");
        assert_eq!(err.sqlstate(), "23505", "the replayed row is there");
    }

    #[tokio::test]
    async fn concurrent_requests_in_one_group_see_each_other() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (_store, writer) = open(dir.path());
        let attempts = (0..20).map(|_| {
            let writer = writer.clone();
            tokio::spawn(async move {
                writer
                    .write(target(), insert_one(b"same", b"x"))
                    .await
                    .is_ok()
            })
        });
        let mut wins = 0;
        for attempt in attempts {
            wins += usize::from(attempt.await.expect("task"));
        }
        assert_eq!(wins, 1);
    }

    #[test]
    fn a_producers_repeated_sequence_in_one_group_applies_once() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = Store::open(dir.path()).expect("open");
        let request = |seq| {
            let (reply, rx) = oneshot::channel();
            let request = WriteRequest {
                target: target(),
                op: WriteOp::Append {
                    rows: vec![b"x".to_vec()],
                },
                watermark: None,
                producers: vec![("p".into(), seq)],
                reply,
            };
            (request, rx)
        };
        let (first, _) = request(1);
        let (again, _) = request(1);
        let (next, _) = request(2);
        let mut committer = Committer {
            offsets: Offsets::default(),
            log: None,
        };
        let replies = commit_group(
            store.db(),
            &mut committer,
            vec![first, again, next],
            Stamp::default(),
            None,
        );
        let outcomes: Vec<u64> = replies
            .into_iter()
            .map(|(_, r)| r.expect("reply"))
            .collect();
        assert_eq!(
            outcomes,
            vec![1, 1, 1],
            "a dropped retry still answers its count"
        );
        assert_eq!(total_log(&store), 2);
    }
}
