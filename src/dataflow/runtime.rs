//! The dataflow runtime: a thread, apart from the connection runtime, that
//! paces every view's dataflow in epochs, and a task runtime of its own on
//! which the dataflows' tasks run (see [`crate::dataflow::task`]).
//!
//! Each epoch the runtime triggers every dataflow's source task, which reads
//! what its topics gained since its committed offset (at most
//! [`EPOCH_ROWS`] records per partition, so a large backfill spans many
//! epochs and reports progress) and ends the epoch with a barrier. Once every
//! task of every dataflow has passed the barrier and handed over its writes,
//! all views' state changes, view rows, changelog records and new source
//! offsets commit in one RocksDB write batch: any snapshot sees every view at
//! the same epoch. Epochs start every `barrier_interval` (the next one at
//! once when an epoch takes longer), or at once when FLUSH asks.
//!
//! An epoch in which only views still being created changed anything is
//! written without RocksDB's WAL: a backfill writes each of its bytes once
//! to a memtable and once to a table file, not a third time to the log. A
//! crash then takes such a view back to its last flushed epoch, a
//! consistent one, since every family flushes at once (`atomic_flush`), and
//! it reads its sources again from there. Before any epoch that does use
//! the WAL, and before a CREATE returns, the memtables are flushed, so
//! nothing logged ever builds on writes a crash could lose. The epoch
//! number itself always goes through the WAL and never repeats.
//!
//! Watermarks travel in the log: a table's write ends with a chunk that
//! carries the table's watermark after the write, so a view sees the rows of
//! a write before the watermark they raise. A source with no records for
//! `idle_timeout` of processing time stops holding back operators that read
//! other sources too. Late rows that operators refuse are appended to the
//! `late_events` table's log in the epoch's write.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender, channel};
use std::time::{Duration, Instant};

use rocksdb::{DB, WriteBatch, WriteOptions};
use tokio::sync::{oneshot, watch};

use crate::dataflow::change::Barrier;
use crate::dataflow::errors::{Failure, Failures, RowError};
use crate::dataflow::graph::Dataflow;
use crate::dataflow::profile::{Profile, Profiles};
use crate::dataflow::state::LateEvent;
use crate::dataflow::task::{self, Report, Resume, Tasks, Trigger, decode_mark};
use crate::error::{Error, Result};
use crate::log::Topic;
use crate::log::writer::log_end;
use crate::state::{CF_STATE, ReadView, cf, keys, read_u64};

pub use crate::dataflow::task::EPOCH_ROWS;

/// An epoch's write batch is sized up front for at most this many bytes;
/// the views' own count overstates it where they overwrite a key.
const PRESIZE_BYTES: usize = 64 << 20;

pub use crate::log::writer::Now;

/// How the runtime runs.
#[derive(Clone)]
pub struct Settings {
    pub barrier_interval: Duration,
    pub idle_timeout: Duration,
    pub now: Now,
    /// Where late rows are recorded.
    pub late_events: Option<Arc<crate::catalog::Table>>,
    /// Where rows that views' expressions failed on are recorded.
    pub view_errors: Option<Arc<crate::catalog::Table>>,
    /// The views that stopped, for their readers.
    pub failures: Failures,
    /// Epochs wait while the disk is nearly full.
    pub disk: Option<crate::state::disk::DiskGuard>,
    /// A table write acknowledged but not yet in RocksDB: applied before
    /// the logs are read.
    pub unapplied: Arc<crate::state::commitlog::Unapplied>,
}

enum Command {
    /// Run a dataflow; `true` for a view being created, whose CREATE waits.
    Add(Box<Dataflow>, bool, oneshot::Sender<Result<()>>),
    Drop(u64, oneshot::Sender<()>),
    Flush(oneshot::Sender<Result<()>>),
    /// Wait until one view has read everything its sources held when asked.
    CatchUp(u64, oneshot::Sender<Result<()>>),
    /// Keep a topic's changes as written for at least this long.
    Retain(Topic, Retention),
}

/// How long a topic's changes stay as written, and what becomes of them
/// after: folded into one consolidated run (a view's changelog, a table's
/// log) or dropped (an append-only table with a retention).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Retention {
    /// Microseconds.
    pub micros: i64,
    pub partitions: u32,
    pub expire: bool,
}

impl Retention {
    /// Older changes are folded into one run per partition.
    pub fn fold(micros: i64, partitions: u32) -> Retention {
        Retention {
            micros,
            partitions,
            expire: false,
        }
    }

    /// Older changes are dropped.
    pub fn expire(micros: i64, partitions: u32) -> Retention {
        Retention {
            micros,
            partitions,
            expire: true,
        }
    }
}

/// A handle to the runtime thread.
#[derive(Clone, Debug)]
pub struct Runtime {
    tx: Sender<Command>,
    progress: Arc<std::sync::Mutex<HashMap<u64, f64>>>,
    profiles: Profiles,
    failures: Failures,
    /// The last committed epoch.
    committed: watch::Receiver<u64>,
}

/// A topic a dataflow reads.
struct Input {
    topic: Topic,
    partitions: u32,
    is_view: bool,
}

struct Running {
    view: u64,
    /// Its name, for the log.
    name: Arc<str>,
    profile: Arc<Profile>,
    /// Its CREATE waits for the backfill.
    creating: bool,
    inputs: Vec<Input>,
    tasks: Tasks,
    /// Next offset per (source index, partition), as of the last epoch.
    offsets: HashMap<(usize, u32), u64>,
    failed: Option<Failure>,
}

/// What one dataflow did in one epoch.
struct Outcome {
    records: u64,
    offsets: HashMap<(usize, u32), u64>,
    states: Vec<crate::dataflow::state::EpochState>,
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
        let failures = settings.failures.clone();
        let profiles = Profiles::default();
        let worker_profiles = profiles.clone();
        let (epochs, committed) = watch::channel(read_u64(&db, keys::EPOCH_KEY)?.unwrap_or(0));
        let db = Arc::downgrade(&db);
        let interval = settings.barrier_interval;
        let threads = std::thread::available_parallelism().map_or(2, |n| n.get());
        let tasks = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(threads)
            .thread_name("weir-operator")
            .thread_stack_size(crate::config::STATEMENT_STACK_BYTES)
            .build()?;
        std::thread::Builder::new()
            .name("weir-dataflow".into())
            .spawn(move || {
                Worker::new(db, shared, settings, tasks, epochs, worker_profiles).run(rx, interval)
            })?;
        Ok(Runtime {
            tx,
            progress,
            profiles,
            failures,
            committed,
        })
    }

    /// Watches the last committed epoch: every view changelog chunk is
    /// stamped with the epoch that wrote it.
    pub fn committed(&self) -> watch::Receiver<u64> {
        self.committed.clone()
    }

    /// Run a view's dataflow; `creating` when its CREATE is running, which
    /// lets the backfill skip the WAL until [`Runtime::catch_up`] answers.
    pub async fn add(&self, dataflow: Dataflow, creating: bool) -> Result<()> {
        let (reply, rx) = oneshot::channel();
        self.send(Command::Add(Box::new(dataflow), creating, reply))?;
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

    /// Keep `topic`'s changes as written for at least `retention`'s
    /// time; a longer one asked for the same topic wins.
    pub fn retain(&self, topic: Topic, retention: Retention) -> Result<()> {
        self.send(Command::Retain(topic, retention))
    }

    /// Stop compacting a dropped table's log.
    pub async fn forget(&self, topic: u64) -> Result<()> {
        self.drop_view(topic).await
    }

    /// How far a view has read its sources, from 0 to 1.
    pub fn progress(&self, view: u64) -> Option<f64> {
        self.progress
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&view)
            .copied()
    }

    /// A running view's graph and counters.
    pub fn profile(&self, view: u64) -> Option<Arc<Profile>> {
        self.profiles.get(view)
    }

    /// Every running view's graph and counters.
    pub fn profiles(&self) -> Vec<Arc<Profile>> {
        self.profiles.all()
    }

    /// Why a view stopped, if it did.
    pub fn failure(&self, view: u64) -> Option<Failure> {
        self.failures.get(view)
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
    /// Where the dataflows' tasks run.
    tasks: tokio::runtime::Runtime,
    /// Tells change streams an epoch committed.
    epochs: watch::Sender<u64>,
    /// How long each topic's changes stay as written, and when it was last compacted.
    retention: HashMap<Topic, (Retention, i64)>,
    /// Epochs were written without the WAL since the last flush.
    unlogged: bool,
    /// Every running view's graph and counters.
    profiles: Profiles,
}

impl Worker {
    fn new(
        db: std::sync::Weak<DB>,
        progress: Arc<std::sync::Mutex<HashMap<u64, f64>>>,
        settings: Settings,
        tasks: tokio::runtime::Runtime,
        epochs: watch::Sender<u64>,
        profiles: Profiles,
    ) -> Worker {
        let epoch = *epochs.borrow();
        Worker {
            db,
            profiles,
            running: Vec::new(),
            waiters: Vec::new(),
            epoch,
            progress,
            settings,
            tasks,
            epochs,
            retention: HashMap::new(),
            unlogged: false,
        }
    }

    fn run(mut self, rx: Receiver<Command>, interval: Duration) {
        // Barriers keep a fixed pace: the next epoch starts an interval after
        // this one started, not after it ended. Otherwise a busy epoch would
        // stretch the wait of every change that arrives during it.
        let mut next = Instant::now() + interval;
        loop {
            let timeout = if self.waiters.is_empty() {
                next.saturating_duration_since(Instant::now())
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
            self.settings.unapplied.settle_for_read(&db);
            next = Instant::now() + interval;
            if let Err(e) = self.epoch(&db) {
                tracing::error!(cause = %e, "epoch failed");
            }
            self.compact(&db);
            let answers = self.answer_waiters(&db);
            if !self.creating() {
                // Nothing is being created: a lone CREATE returns with its
                // view durable.
                self.flush_unlogged(&db);
            }
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
            Command::Add(dataflow, creating, reply) => {
                let outcome = self.add(*dataflow, creating);
                let _ = reply.send(outcome);
            }
            Command::Retain(topic, retention) => {
                let now = (self.settings.now)();
                let entry = self.retention.entry(topic).or_insert((retention, now));
                entry.0.micros = entry.0.micros.max(retention.micros);
            }
            Command::Drop(view, reply) => {
                // Dropping a dataflow's handle closes its channels: its tasks end.
                self.running.retain(|r| r.view != view);
                self.profiles.remove(view);
                self.retention.retain(|topic, _| topic.id != view);
                self.settings.failures.clear(view);
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

    fn add(&mut self, dataflow: Dataflow, creating: bool) -> Result<()> {
        let db = self.db.upgrade().ok_or(Error::ShuttingDown)?;
        let view = dataflow.view;
        let mut resume = Resume {
            now: (self.settings.now)(),
            ..Resume::default()
        };
        let mut inputs = Vec::new();
        for (index, source) in dataflow.sources.iter().enumerate() {
            for partition in 0..source.partitions() {
                let key = keys::source_offset_key(view, index, partition);
                let offset = read_u64(&db, &key)?.unwrap_or(0);
                resume.offsets.insert((index, partition), offset);
            }
            resume
                .sources
                .push(read_mark(&db, &keys::source_watermark_key(view, index))?);
            inputs.push(Input {
                topic: source.topic(),
                partitions: source.partitions(),
                is_view: source.table.def.is_view(),
            });
        }
        for node in 0..dataflow.nodes.len() {
            resume
                .nodes
                .push(read_mark(&db, &keys::node_watermark_key(view, node))?);
        }
        let offsets = resume.offsets.clone();
        let name = dataflow.name.clone();
        let profile = Arc::new(Profile::of(&dataflow));
        self.profiles.insert(profile.clone());
        let tasks = task::spawn(
            dataflow,
            self.tasks.handle(),
            self.db.clone(),
            resume,
            profile.clone(),
        );
        self.running.push(Running {
            view,
            name,
            profile,
            creating,
            inputs,
            tasks,
            offsets,
            failed: None,
        });
        Ok(())
    }

    /// Log ends of the table topics that feed the chosen dataflows.
    fn table_targets(&self, db: &DB, view: Option<u64>) -> Result<HashMap<(u64, u32), u64>> {
        self.settings.unapplied.settle_for_read(db);
        let mut targets = HashMap::new();
        for running in self
            .running
            .iter()
            .filter(|r| view.is_none_or(|v| r.view == v))
        {
            for input in &running.inputs {
                for partition in 0..input.partitions {
                    targets.insert(
                        (input.topic.id, partition),
                        log_end(db, input.topic, partition)?,
                    );
                }
            }
        }
        Ok(targets)
    }

    fn epoch(&mut self, db: &Arc<DB>) -> Result<()> {
        // Decided before any task runs: an epoch that started must commit,
        // or operators would hold state the store does not.
        if let Some(Err(full)) = self.settings.disk.as_ref().map(|d| d.check()) {
            tracing::warn!(cause = %full, "views wait for disk space");
            return Ok(());
        }
        let now = (self.settings.now)();
        let barrier = Barrier {
            epoch: self.epoch + 1,
            now,
        };
        let view = Arc::new(ReadView::new(db.clone(), |db| db.snapshot()));
        let idle_timeout = self.settings.idle_timeout.as_micros() as i64;
        // Every dataflow runs its epoch at the same time; then each is heard.
        for running in self.running.iter_mut().filter(|r| r.failed.is_none()) {
            running.tasks.budget.store(0, Ordering::Relaxed);
            let trigger = Trigger {
                barrier,
                view: view.clone(),
                idle_timeout,
            };
            if running.tasks.control.blocking_send(trigger).is_err() {
                let failure = stopped(running.view);
                self.settings.failures.set(running.view, failure.clone());
                running.failed = Some(failure);
            }
        }
        drop(view);
        let mut states = Vec::new();
        let mut changed = false;
        let mut logged = false;
        let mut late: Vec<LateEvent> = Vec::new();
        let mut errors: Vec<RowError> = Vec::new();
        for running in self.running.iter_mut().filter(|r| r.failed.is_none()) {
            match collect(&mut running.tasks, running.view) {
                Ok(outcome) => {
                    running
                        .profile
                        .epochs
                        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    let mut touched = outcome.records > 0;
                    for mut state in outcome.states {
                        touched |= !state.is_empty();
                        late.append(&mut state.late);
                        errors.append(&mut state.errors.caught);
                        states.push(state);
                    }
                    changed |= touched;
                    logged |= touched && !running.creating;
                    running.offsets = outcome.offsets;
                }
                Err(failure) => {
                    tracing::error!(
                        view = %running.name,
                        code = failure.sqlstate,
                        cause = %failure.message,
                        "view failed; it stops updating"
                    );
                    self.settings.failures.set(running.view, failure.clone());
                    running.failed = Some(failure);
                }
            }
        }
        if !changed {
            return Ok(());
        }
        // Sized up front: a batch grown by doubling copies itself again and
        // faults in fresh pages at each step.
        let written: usize = self
            .running
            .iter()
            .filter(|r| r.failed.is_none())
            .map(|r| r.tasks.budget.load(Ordering::Relaxed))
            .sum();
        let mut batch = WriteBatch::with_capacity_bytes(written.min(PRESIZE_BYTES) * 9 / 8);
        for mut state in states {
            state.drain_into(&mut batch);
        }
        if let Some(table) = self
            .settings
            .late_events
            .as_ref()
            .filter(|_| !late.is_empty())
        {
            let rows = crate::dataflow::late::batch(table, &late, barrier.now)?;
            append_system(db, table, &rows, barrier, &mut batch)?;
        }
        if let Some(table) = self
            .settings
            .view_errors
            .as_ref()
            .filter(|_| !errors.is_empty())
        {
            let rows = crate::dataflow::errors::batch(table, &errors, barrier.epoch)?;
            append_system(db, table, &rows, barrier, &mut batch)?;
        }
        // Late rows and errors go to tables other views may read: never unlogged.
        let logged = logged || !late.is_empty() || !errors.is_empty();
        self.write_epoch(db, batch, barrier.epoch, logged)?;
        self.epoch = barrier.epoch;
        self.epochs.send_replace(barrier.epoch);
        self.report_progress(db);
        Ok(())
    }

    /// Commit an epoch's batch; without the WAL unless it is `logged` (see
    /// the module's documentation).
    fn write_epoch(
        &mut self,
        db: &DB,
        mut batch: WriteBatch,
        epoch: u64,
        logged: bool,
    ) -> Result<()> {
        // Views are derived from the log, which is already durable: after a
        // crash they replay from the offsets of their last surviving epoch.
        let mut options = WriteOptions::default();
        options.set_sync(false);
        // Should the flush fail, the epoch stays unlogged like the ones
        // before it, so that a crash still leaves a consistent cut.
        if !logged || !self.flush_unlogged(db) {
            options.disable_wal(true);
            db.write_opt(std::mem::take(&mut batch), &options)?;
            self.unlogged = true;
            options.disable_wal(false);
        }
        // The epoch's number goes through the WAL either way, alone when the
        // rest of the epoch did not.
        batch.put_cf(cf(db, CF_STATE), keys::EPOCH_KEY, epoch.to_be_bytes());
        Ok(db.write_opt(batch, &options)?)
    }

    /// Make the unlogged epochs durable; whether none is left.
    fn flush_unlogged(&mut self, db: &DB) -> bool {
        if !self.unlogged {
            return true;
        }
        match crate::state::flush_memtables(db) {
            Ok(()) => self.unlogged = false,
            Err(e) => tracing::warn!(cause = %e, "flushing unlogged epochs failed; retried later"),
        }
        !self.unlogged
    }

    /// Whether some view's CREATE waits for its backfill.
    fn creating(&self) -> bool {
        self.running.iter().any(|r| r.creating)
    }

    /// Fold (or drop) each topic's changes older than its retention, every
    /// half retention; never past what a view reading it has yet to read.
    fn compact(&mut self, db: &DB) {
        // A logged compaction must not fold in changes a crash could lose.
        if self.unlogged {
            return;
        }
        let now = (self.settings.now)();
        let mut due = Vec::new();
        for (topic, (retention, last)) in self.retention.iter_mut() {
            if now - *last >= retention.micros / 2 {
                *last = now;
                due.push((*topic, *retention));
            }
        }
        for (topic, retention) in due {
            for partition in 0..retention.partitions.max(1) {
                let limit = self.unread(topic.id, partition);
                let before = now - retention.micros;
                let outcome = match retention.expire {
                    true => crate::log::embedded::expire(db, topic, partition, before, limit),
                    false => crate::log::embedded::compact(db, topic, partition, before, limit),
                };
                match outcome {
                    Ok(Some(epoch)) => {
                        tracing::debug!(topic = topic.id, partition, epoch, "log compacted")
                    }
                    Ok(None) => {}
                    Err(e) => {
                        tracing::warn!(topic = topic.id, partition, cause = %e, "log compaction failed")
                    }
                }
            }
        }
    }

    /// The lowest offset of a topic partition some running dataflow has not read yet.
    fn unread(&self, topic: u64, partition: u32) -> u64 {
        self.running
            .iter()
            .flat_map(|r| {
                r.inputs
                    .iter()
                    .enumerate()
                    .filter(|(_, input)| input.topic.id == topic)
                    .map(|(index, _)| r.offsets.get(&(index, partition)).copied().unwrap_or(0))
            })
            .min()
            .unwrap_or(u64::MAX)
    }

    fn report_progress(&self, db: &DB) {
        let mut progress = self.progress.lock().unwrap_or_else(|p| p.into_inner());
        for running in &self.running {
            let (mut read, mut total) = (0u64, 0u64);
            for (index, input) in running.inputs.iter().enumerate() {
                for partition in 0..input.partitions {
                    read += running
                        .offsets
                        .get(&(index, partition))
                        .copied()
                        .unwrap_or(0);
                    total += log_end(db, input.topic, partition).unwrap_or(0);
                }
            }
            let fraction = if total == 0 {
                1.0
            } else {
                (read as f64 / total as f64).min(1.0)
            };
            progress.insert(running.view, fraction);
            running.profile.behind.store(
                total.saturating_sub(read),
                std::sync::atomic::Ordering::Relaxed,
            );
        }
    }

    /// The waiters whose wait is over, with their outcome; the rest keep waiting.
    fn answer_waiters(&mut self, db: &DB) -> Vec<(oneshot::Sender<Result<()>>, Result<()>)> {
        let mut answers = Vec::new();
        for waiter in std::mem::take(&mut self.waiters) {
            let outcome = match self.satisfied(db, &waiter) {
                Ok(false) => {
                    self.waiters.push(waiter);
                    continue;
                }
                outcome => outcome.map(drop),
            };
            // A CREATE that hears back is over: its view's epochs use the WAL.
            for running in self.running.iter_mut() {
                running.creating &= waiter.view != Some(running.view);
            }
            answers.push((waiter.reply, outcome));
        }
        answers
    }

    /// Every chosen dataflow has read its table topics up to the targets, and
    /// its view changelogs up to their current ends (chains settle one epoch a link).
    fn satisfied(&self, db: &DB, waiter: &Waiter) -> Result<bool> {
        for running in self
            .running
            .iter()
            .filter(|r| waiter.view.is_none_or(|v| r.view == v))
        {
            // A stopped view holds back only those who wait for it alone:
            // FLUSH is about the views that still run.
            if let Some(failure) = &running.failed {
                if waiter.view.is_some() {
                    return Err(failure.to_error());
                }
                continue;
            }
            for (index, input) in running.inputs.iter().enumerate() {
                for partition in 0..input.partitions {
                    let read = running
                        .offsets
                        .get(&(index, partition))
                        .copied()
                        .unwrap_or(0);
                    let target = match waiter.targets.get(&(input.topic.id, partition)) {
                        Some(t) if !input.is_view => *t,
                        _ => log_end(db, input.topic, partition)?,
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

/// Wait for every report of one dataflow's epoch.
fn collect(tasks: &mut Tasks, view: u64) -> std::result::Result<Outcome, Failure> {
    let mut outcome = Outcome {
        records: 0,
        offsets: HashMap::new(),
        states: Vec::new(),
    };
    for _ in 0..tasks.expected {
        match tasks.reports.blocking_recv() {
            Some(Report::Read { records, offsets }) => {
                outcome.records = records;
                outcome.offsets = offsets;
            }
            Some(Report::Sealed(state)) => outcome.states.push(*state),
            Some(Report::Failed(failure)) => return Err(failure),
            None => return Err(stopped(view)),
        }
    }
    Ok(outcome)
}

/// A dataflow whose tasks ended without saying why.
fn stopped(view: u64) -> Failure {
    Failure {
        sqlstate: "XX000",
        message: format!("internal error: the dataflow of view {view} stopped; this is a bug"),
    }
}

/// Append rows the epoch produced to a system table's log (`late_events`,
/// `view_errors`).
fn append_system(
    db: &DB,
    table: &crate::catalog::Table,
    rows: &datafusion::arrow::array::RecordBatch,
    barrier: Barrier,
    batch: &mut WriteBatch,
) -> Result<()> {
    let stamp = crate::log::embedded::Stamp {
        epoch: barrier.epoch,
        time: barrier.now,
        compacted: false,
    };
    let encoded = table.codec.encode_rows(rows)?;
    let topic = table.def.log_topic();
    let mut next = log_end(db, topic, 0)?;
    let records: Vec<&[u8]> = encoded.iter().map(|r| r.data()).collect();
    for chunk in records.chunks(crate::log::embedded::CHUNK_ROWS) {
        let bytes =
            crate::log::embedded::encode_chunk(chunk.iter().map(|r| (1, *r)), None, Some(stamp));
        batch.put_cf(
            cf(db, topic.family),
            keys::log_key(topic.id, 0, next),
            bytes,
        );
        next += chunk.len() as u64;
    }
    Ok(())
}

fn read_mark(db: &DB, key: &[u8]) -> Result<Option<i64>> {
    Ok(db
        .get_cf(cf(db, CF_STATE), key)?
        .and_then(|bytes| decode_mark(&bytes)))
}
