//! The dataflow runtime: one thread, apart from the connection runtime, that
//! runs every view's dataflow in epochs.
//!
//! Each epoch, every source reads what its topic gained since its committed
//! offset (at most [`EPOCH_ROWS`] records per partition, so a large backfill
//! spans many epochs and reports progress), pushes it through its dataflow,
//! and then every operator sees the barrier. All views' state changes, view
//! rows, changelog records and the new source offsets of one epoch commit in
//! one RocksDB write batch: any snapshot sees every view at the same epoch.
//! Epochs start every `barrier_interval`, or at once when FLUSH asks.
//!
//! Watermarks travel in the log: a table's write ends with a chunk that
//! carries the table's watermark after the write, so a view sees the rows of
//! a write before the watermark they raise. A source with no records for
//! `idle_timeout` of processing time stops holding back operators that read
//! other sources too. Late rows that operators refuse are appended to the
//! `late_events` table's log in the epoch's write.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender, channel};
use std::time::Duration;

use rocksdb::{DB, WriteBatch, WriteOptions};
use tokio::sync::oneshot;

use crate::dataflow::change::Barrier;
use crate::dataflow::graph::Dataflow;
use crate::dataflow::state::EpochState;
use crate::error::{Error, Result};
use crate::log::embedded::read_partition;
use crate::state::writer::log_end;
use crate::state::{CF_STATE, ReadView, cf, keys};

/// Most records one source partition contributes to one epoch.
pub const EPOCH_ROWS: u64 = 262_144;

/// Records read from a partition between checks of the epoch's size.
const ROUND_ROWS: u64 = 16_384;

/// Bytes of pending writes after which an epoch stops reading and commits.
const EPOCH_BYTES: usize = 16 << 20;

const EPOCH_KEY: &[u8] = b"\xffepoch";

/// Processing time in microseconds since the Unix epoch.
pub type Now = Arc<dyn Fn() -> i64 + Send + Sync>;

/// How the runtime runs.
#[derive(Clone)]
pub struct Settings {
    pub barrier_interval: Duration,
    pub idle_timeout: Duration,
    pub now: Now,
    /// Where late rows are recorded.
    pub late_events: Option<Arc<crate::catalog::Table>>,
}

enum Command {
    Add(Box<Dataflow>, oneshot::Sender<Result<()>>),
    Drop(u64, oneshot::Sender<()>),
    Flush(oneshot::Sender<Result<()>>),
    /// Wait until one view has read everything its sources held when asked.
    CatchUp(u64, oneshot::Sender<Result<()>>),
}

/// A handle to the runtime thread.
#[derive(Clone, Debug)]
pub struct Runtime {
    tx: Sender<Command>,
    progress: Arc<std::sync::Mutex<HashMap<u64, f64>>>,
}

struct Running {
    dataflow: Dataflow,
    /// Next offset per (source index, partition).
    offsets: HashMap<(usize, u32), u64>,
    /// Per source: processing time of the last epoch that read records.
    last_active: Vec<i64>,
    /// Operators have been told the watermarks restored from state.
    replayed: bool,
    failed: Option<String>,
}

struct Waiter {
    /// Offsets of table topics that must be read; `None` checks every view.
    targets: HashMap<(u64, u32), u64>,
    view: Option<u64>,
    reply: oneshot::Sender<Result<()>>,
}

impl Runtime {
    pub fn start(db: Arc<DB>, settings: Settings) -> Result<Runtime> {
        let (tx, rx) = channel();
        let progress = Arc::new(std::sync::Mutex::new(HashMap::new()));
        let shared = progress.clone();
        let db = Arc::downgrade(&db);
        let interval = settings.barrier_interval;
        std::thread::Builder::new()
            .name("weir-dataflow".into())
            .spawn(move || Worker::new(db, shared, settings).run(rx, interval))?;
        Ok(Runtime { tx, progress })
    }

    pub async fn add(&self, dataflow: Dataflow) -> Result<()> {
        let (reply, rx) = oneshot::channel();
        self.send(Command::Add(Box::new(dataflow), reply))?;
        rx.await.map_err(|_| Error::ShuttingDown)?
    }

    pub async fn drop_view(&self, view: u64) -> Result<()> {
        let (reply, rx) = oneshot::channel();
        self.send(Command::Drop(view, reply))?;
        rx.await.map_err(|_| Error::ShuttingDown)
    }

    /// Returns once every write committed before the call is in every view.
    pub async fn flush(&self) -> Result<()> {
        let (reply, rx) = oneshot::channel();
        self.send(Command::Flush(reply))?;
        rx.await.map_err(|_| Error::ShuttingDown)?
    }

    /// Returns once `view` has read everything its sources hold now.
    pub async fn catch_up(&self, view: u64) -> Result<()> {
        let (reply, rx) = oneshot::channel();
        self.send(Command::CatchUp(view, reply))?;
        rx.await.map_err(|_| Error::ShuttingDown)?
    }

    /// How far a view has read its sources, from 0 to 1.
    pub fn progress(&self, view: u64) -> Option<f64> {
        self.progress
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&view)
            .copied()
    }

    fn send(&self, command: Command) -> Result<()> {
        self.tx.send(command).map_err(|_| Error::ShuttingDown)
    }
}

struct Worker {
    db: std::sync::Weak<DB>,
    running: Vec<Running>,
    waiters: Vec<Waiter>,
    epoch: u64,
    progress: Arc<std::sync::Mutex<HashMap<u64, f64>>>,
    settings: Settings,
}

impl Worker {
    fn new(
        db: std::sync::Weak<DB>,
        progress: Arc<std::sync::Mutex<HashMap<u64, f64>>>,
        settings: Settings,
    ) -> Worker {
        Worker {
            db,
            running: Vec::new(),
            waiters: Vec::new(),
            epoch: 0,
            progress,
            settings,
        }
    }

    fn run(mut self, rx: Receiver<Command>, interval: Duration) {
        loop {
            let timeout = if self.waiters.is_empty() {
                interval
            } else {
                Duration::ZERO
            };
            match rx.recv_timeout(timeout) {
                Ok(command) => self.handle(command),
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => return,
            }
            while let Ok(command) = rx.try_recv() {
                self.handle(command);
            }
            let Some(db) = self.db.upgrade() else { return };
            if let Err(e) = self.epoch(&db) {
                tracing::error!(cause = %e, "epoch failed");
            }
            let answers = self.answer_waiters(&db);
            // Let go of the database before anyone hears back: whoever owns
            // the store must be the one that closes it.
            drop(db);
            for (reply, outcome) in answers {
                let _ = reply.send(outcome);
            }
        }
    }

    fn handle(&mut self, command: Command) {
        match command {
            Command::Add(dataflow, reply) => {
                let outcome = self.add(*dataflow);
                let _ = reply.send(outcome);
            }
            Command::Drop(view, reply) => {
                self.running.retain(|r| r.dataflow.view != view);
                self.progress
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .remove(&view);
                let _ = reply.send(());
            }
            Command::Flush(reply) => {
                let Some(db) = self.db.upgrade() else { return };
                match self.table_targets(&db, None) {
                    Ok(targets) => self.waiters.push(Waiter {
                        targets,
                        view: None,
                        reply,
                    }),
                    Err(e) => {
                        let _ = reply.send(Err(e));
                    }
                }
            }
            Command::CatchUp(view, reply) => {
                let Some(db) = self.db.upgrade() else { return };
                match self.table_targets(&db, Some(view)) {
                    Ok(targets) => self.waiters.push(Waiter {
                        targets,
                        view: Some(view),
                        reply,
                    }),
                    Err(e) => {
                        let _ = reply.send(Err(e));
                    }
                }
            }
        }
    }

    fn add(&mut self, mut dataflow: Dataflow) -> Result<()> {
        let db = self.db.upgrade().ok_or(Error::ShuttingDown)?;
        if let Some(bytes) = db.get_cf(cf(&db, CF_STATE), marks_key(&dataflow))? {
            dataflow.marks.decode(&bytes);
        }
        let now = (self.settings.now)();
        let last_active = vec![now; dataflow.sources.len()];
        if self.epoch == 0 {
            self.epoch = read_u64(&db, EPOCH_KEY)?.unwrap_or(0);
        }
        let mut offsets = HashMap::new();
        for (index, source) in dataflow.sources.iter().enumerate() {
            for partition in 0..source.partitions() {
                let key = offset_key(&dataflow, index, partition);
                offsets.insert((index, partition), read_u64(&db, &key)?.unwrap_or(0));
            }
        }
        self.running.push(Running {
            dataflow,
            offsets,
            last_active,
            replayed: false,
            failed: None,
        });
        Ok(())
    }

    /// Log ends of the table topics that feed the chosen dataflows.
    fn table_targets(&self, db: &DB, view: Option<u64>) -> Result<HashMap<(u64, u32), u64>> {
        let mut targets = HashMap::new();
        for running in self
            .running
            .iter()
            .filter(|r| view.is_none_or(|v| r.dataflow.view == v))
        {
            for source in &running.dataflow.sources {
                for partition in 0..source.partitions() {
                    targets.insert(
                        (source.topic(), partition),
                        log_end(db, source.topic(), partition)?,
                    );
                }
            }
        }
        Ok(targets)
    }

    fn epoch(&mut self, db: &Arc<DB>) -> Result<()> {
        let view = Arc::new(ReadView::new(db.clone(), |db| db.snapshot()));
        let barrier = Barrier {
            epoch: self.epoch + 1,
        };
        let mut batch = WriteBatch::default();
        let mut changed = false;
        let now = (self.settings.now)();
        let idle_timeout = self.settings.idle_timeout.as_micros() as i64;
        let mut late = Vec::new();
        for running in &mut self.running {
            if running.failed.is_some() {
                continue;
            }
            let mut state = EpochState::new(db.clone());
            state.now = now;
            // A bug in one operator must not take every view, or the server, down.
            let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                step(running, &view, barrier, idle_timeout, &mut state)
            }))
            .unwrap_or_else(|panic| Err(Error::Internal(panic_message(&panic))));
            match outcome {
                Ok(read) => {
                    changed |= read > 0 || !state.is_empty();
                    late.append(&mut state.late);
                    state.drain_into(&mut batch);
                }
                Err(e) => {
                    tracing::error!(view = running.dataflow.view, cause = %e, "view failed; it stops updating");
                    running.failed = Some(e.to_string());
                }
            }
        }
        if !changed {
            return Ok(());
        }
        if let Some(table) = &self.settings.late_events {
            record_late(db, table, &late, now, &mut batch)?;
        }
        batch.put_cf(cf(db, CF_STATE), EPOCH_KEY, barrier.epoch.to_be_bytes());
        // Views are derived from the log, which is already durable: after a
        // crash they replay from the offsets of their last surviving epoch.
        let mut options = WriteOptions::default();
        options.set_sync(false);
        db.write_opt(batch, &options)?;
        self.epoch = barrier.epoch;
        self.report_progress(db);
        Ok(())
    }

    fn report_progress(&self, db: &DB) {
        let mut progress = self.progress.lock().unwrap_or_else(|p| p.into_inner());
        for running in &self.running {
            let (mut read, mut total) = (0u64, 0u64);
            for (index, source) in running.dataflow.sources.iter().enumerate() {
                for partition in 0..source.partitions() {
                    read += running
                        .offsets
                        .get(&(index, partition))
                        .copied()
                        .unwrap_or(0);
                    total += log_end(db, source.topic(), partition).unwrap_or(0);
                }
            }
            let fraction = if total == 0 {
                1.0
            } else {
                (read as f64 / total as f64).min(1.0)
            };
            progress.insert(running.dataflow.view, fraction);
        }
    }

    /// The waiters whose wait is over, with their outcome; the rest keep waiting.
    fn answer_waiters(&mut self, db: &DB) -> Vec<(oneshot::Sender<Result<()>>, Result<()>)> {
        let mut answers = Vec::new();
        for waiter in std::mem::take(&mut self.waiters) {
            match self.satisfied(db, &waiter) {
                Ok(false) => self.waiters.push(waiter),
                Ok(true) => answers.push((waiter.reply, Ok(()))),
                Err(e) => answers.push((waiter.reply, Err(e))),
            }
        }
        answers
    }

    /// Every chosen dataflow has read its table topics up to the targets, and
    /// its view changelogs up to their current ends (chains settle one epoch a link).
    fn satisfied(&self, db: &DB, waiter: &Waiter) -> Result<bool> {
        for running in self
            .running
            .iter()
            .filter(|r| waiter.view.is_none_or(|v| r.dataflow.view == v))
        {
            if let Some(reason) = &running.failed {
                return Err(Error::Internal(format!(
                    "view {} failed: {reason}",
                    running.dataflow.view
                )));
            }
            for (index, source) in running.dataflow.sources.iter().enumerate() {
                for partition in 0..source.partitions() {
                    let read = running
                        .offsets
                        .get(&(index, partition))
                        .copied()
                        .unwrap_or(0);
                    let target = match waiter.targets.get(&(source.topic(), partition)) {
                        Some(t) if !source.table.def.is_view => *t,
                        _ => log_end(db, source.topic(), partition)?,
                    };
                    if read < target {
                        return Ok(false);
                    }
                }
            }
        }
        Ok(true)
    }
}

/// One epoch of one dataflow; returns how many records it read.
fn step(
    running: &mut Running,
    view: &ReadView,
    barrier: Barrier,
    idle_timeout: i64,
    state: &mut EpochState,
) -> Result<u64> {
    if !running.replayed {
        running.dataflow.replay_watermarks(state)?;
        running.replayed = true;
    }
    let mut total = 0;
    let mut next_offsets = running.offsets.clone();
    let marks_before = running.dataflow.marks.clone();
    for index in 0..running.dataflow.sources.len() {
        let read = read_source(running, index, view, &mut next_offsets, state)?;
        if read > 0 {
            running.last_active[index] = state.now;
        }
        running.dataflow.marks.idle[index] =
            state.now.saturating_sub(running.last_active[index]) >= idle_timeout;
        total += read;
    }
    running.dataflow.advance_watermarks(state)?;
    running.dataflow.barrier(barrier, state)?;
    running.offsets = next_offsets;
    let marks = &running.dataflow.marks;
    if marks.sources != marks_before.sources || marks.nodes != marks_before.nodes {
        state.put(marks_key(&running.dataflow), marks.encode());
    }
    Ok(total)
}

/// Push what one source's topic gained into its dataflow, with the
/// watermarks its chunks carry; returns how many records it read.
fn read_source(
    running: &mut Running,
    index: usize,
    view: &ReadView,
    next_offsets: &mut HashMap<(usize, u32), u64>,
    state: &mut EpochState,
) -> Result<u64> {
    let (topic, partitions, node) = {
        let source = &running.dataflow.sources[index];
        (source.topic(), source.partitions(), source.node)
    };
    // With one partition, each write's watermark applies right after its
    // rows; with several, after the epoch's reads of all of them, so that no
    // row is judged against a watermark its own write had not yet raised.
    let exact = partitions == 1;
    let mut highest = None;
    let mut total = 0;
    for partition in 0..partitions {
        let from = next_offsets.get(&(index, partition)).copied().unwrap_or(0);
        let mut at = from;
        // Read in rounds, and end the epoch early once its writes grow
        // large: an epoch's writes are held in memory until it commits.
        loop {
            let budget = (EPOCH_ROWS - (at - from)).min(ROUND_ROWS);
            if budget == 0 || state.pending_bytes() > EPOCH_BYTES {
                break;
            }
            let mut batches = Vec::new();
            let mut read = 0;
            read_partition(view, topic, partition, at, |_, chunk| {
                let take = (budget - read).min(chunk.entries.len() as u64) as usize;
                // A watermark holds only once its whole chunk has been read.
                let watermark = chunk.watermark.filter(|_| take == chunk.entries.len());
                let mut entries = chunk.entries;
                entries.truncate(take);
                let chunk = crate::log::Chunk { entries, watermark };
                batches.push((running.dataflow.sources[index].decode(&chunk)?, watermark));
                read += take as u64;
                Ok(read < budget)
            })?;
            for (batch, watermark) in batches {
                if !batch.is_empty() {
                    running.dataflow.deliver(node, 0, batch, state)?;
                }
                match watermark {
                    Some(w) if exact => running.dataflow.source_watermark(index, w, state)?,
                    other => highest = highest.max(other),
                }
            }
            at += read;
            if read < budget {
                break;
            }
        }
        let read = at - from;
        if read > 0 {
            next_offsets.insert((index, partition), at);
            state.put(
                offset_key(&running.dataflow, index, partition),
                at.to_be_bytes().to_vec(),
            );
            total += read;
        }
    }
    if let Some(w) = highest {
        running.dataflow.source_watermark(index, w, state)?;
    }
    Ok(total)
}

/// Append the epoch's late rows to the `late_events` table's log.
fn record_late(
    db: &DB,
    table: &crate::catalog::Table,
    late: &[crate::dataflow::state::LateEvent],
    now: i64,
    batch: &mut WriteBatch,
) -> Result<()> {
    if late.is_empty() {
        return Ok(());
    }
    let rows = crate::dataflow::late::batch(table, late, now)?;
    let encoded = table.codec.encode_rows(&rows)?;
    let topic = table.def.topic();
    let mut next = log_end(db, topic, 0)?;
    let records: Vec<&[u8]> = encoded.iter().map(|r| r.data()).collect();
    for chunk in records.chunks(crate::log::embedded::CHUNK_ROWS) {
        let bytes = crate::log::embedded::encode_chunk(chunk.iter().map(|r| (1, *r)), None);
        batch.put_cf(
            cf(db, crate::state::CF_LOG),
            keys::log_key(topic, 0, next),
            bytes,
        );
        next += chunk.len() as u64;
    }
    Ok(())
}

fn panic_message(panic: &Box<dyn std::any::Any + Send>) -> String {
    let text = panic
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_else(|| "unknown panic".into());
    format!("an operator panicked: {text}")
}

fn offset_key(dataflow: &Dataflow, source: usize, partition: u32) -> Vec<u8> {
    let mut key = dataflow.view.to_be_bytes().to_vec();
    key.extend_from_slice(b"\xffsrc");
    key.extend_from_slice(&(source as u32).to_be_bytes());
    key.extend_from_slice(&partition.to_be_bytes());
    key
}

fn marks_key(dataflow: &Dataflow) -> Vec<u8> {
    let mut key = dataflow.view.to_be_bytes().to_vec();
    key.extend_from_slice(b"\xffwm");
    key
}

fn read_u64(db: &DB, key: &[u8]) -> Result<Option<u64>> {
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
