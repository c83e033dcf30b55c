//! A view's dataflow as tasks: one task reads the view's sources, one task
//! runs each operator, and bounded channels join them in the graph's shape,
//! so a slow operator holds back everything upstream of it (backpressure)
//! and the stages of a view run at the same time on different cores.
//!
//! Each epoch the runtime sends the source task a [`Trigger`]. The source
//! task reads what its topics gained, sends the changes and watermarks down
//! its edges and then a barrier. An operator with several inputs aligns the
//! barrier: once it arrives on one input that input is not read again until
//! it has arrived on all of them, so every operator's epoch holds exactly
//! the changes its sources read in that epoch. After the barrier each task
//! hands its writes for the epoch to the runtime, which commits all of them,
//! from every view, in one write batch.

use std::collections::HashMap;
use std::future::poll_fn;
use std::panic::AssertUnwindSafe;
use std::sync::atomic::AtomicUsize;
use std::sync::{Arc, Weak};
use std::task::Poll;

use futures::FutureExt;
use rocksdb::DB;
use tokio::runtime::Handle;
use tokio::sync::mpsc::{Receiver, Sender, channel};

use crate::catalog::OnError;
use crate::dataflow::change::{Barrier, ChangeBatch, Message, Watermark};
use crate::dataflow::errors::{Failure, RowErrors};
use crate::dataflow::graph::{Dataflow, Source};
use crate::dataflow::operator::{Context, Operator};
use crate::dataflow::profile::Profile;
use crate::dataflow::state::EpochState;
use crate::error::{Error, Result};
use crate::log::embedded::read_partition;
use crate::state::{ReadView, keys};

/// Most records one source partition contributes to one epoch.
pub const EPOCH_ROWS: u64 = 1 << 20;

/// Records read from a partition between checks of the epoch's size.
const ROUND_ROWS: u64 = 16_384;

/// Bytes of pending writes after which an epoch stops reading and commits.
const EPOCH_BYTES: usize = 8 << 20;

/// Messages an edge holds before its sender waits.
const EDGE_CAPACITY: usize = 8;

/// Changes read from a log, with the watermark the last chunk carried.
type Marked = (ChangeBatch, Option<i64>);

/// The runtime's order to run one epoch.
pub struct Trigger {
    pub barrier: Barrier,
    /// What the sources read: everything committed when the epoch began.
    pub view: Arc<ReadView>,
    /// Processing time without records after which a source is idle, µs.
    pub idle_timeout: i64,
}

/// What the tasks of a dataflow tell the runtime during an epoch.
pub enum Report {
    /// The source task has read this many records, up to these offsets.
    Read {
        records: u64,
        offsets: HashMap<(usize, u32), u64>,
    },
    /// One task's writes for the epoch, sent after its barrier.
    Sealed(Box<EpochState>),
    /// A task stopped: the dataflow can no longer run.
    Failed(Failure),
}

/// Where a dataflow restarts: what its last committed epoch stored.
#[derive(Default)]
pub struct Resume {
    /// Next offset per (source index, partition).
    pub offsets: HashMap<(usize, u32), u64>,
    /// Per source: the watermark read from its topic.
    pub sources: Vec<Option<i64>>,
    /// Per node: the watermark it had forwarded.
    pub nodes: Vec<Option<i64>>,
    /// Processing time at which the sources count as last active.
    pub now: i64,
}

/// The runtime's handle on a running dataflow; dropping it stops the tasks.
pub struct Tasks {
    pub control: Sender<Trigger>,
    pub reports: Receiver<Report>,
    /// Reports one epoch brings: a `Read` and a `Sealed` from the source
    /// task, and a `Sealed` from every operator.
    pub expected: usize,
    /// Bytes the dataflow's tasks have written in the current epoch.
    pub budget: Arc<AtomicUsize>,
}

/// What every task of a dataflow shares.
#[derive(Clone)]
struct Shared {
    db: Weak<DB>,
    view: Arc<str>,
    on_error: OnError,
    budget: Arc<AtomicUsize>,
    reports: Sender<Report>,
}

impl Shared {
    /// A fresh epoch's state. Tasks hold the database only within an epoch,
    /// so that whoever owns the store is the one that closes it.
    fn state(&self) -> Result<EpochState> {
        let db = self.db.upgrade().ok_or(Error::ShuttingDown)?;
        let mut state = EpochState::with_budget(db, self.budget.clone());
        state.errors = RowErrors::new(self.view.clone(), self.on_error);
        Ok(state)
    }

    async fn report(&self, report: Report) -> Result<()> {
        self.reports
            .send(report)
            .await
            .map_err(|_| Error::ShuttingDown)
    }
}

/// Start a dataflow's tasks on `handle`, resuming from `resume`.
pub fn spawn(
    dataflow: Dataflow,
    handle: &Handle,
    db: Weak<DB>,
    resume: Resume,
    profile: Arc<Profile>,
) -> Tasks {
    let Dataflow {
        view,
        name,
        on_error,
        nodes,
        sources,
    } = dataflow;
    let mut inputs: Vec<Vec<Receiver<Message>>> = nodes.iter().map(|_| Vec::new()).collect();
    let mut outputs: Vec<Vec<Sender<Message>>> = nodes.iter().map(|_| Vec::new()).collect();
    for (to, node) in nodes.iter().enumerate() {
        for from in &node.inputs {
            let (tx, rx) = channel(EDGE_CAPACITY);
            outputs[*from].push(tx);
            inputs[to].push(rx);
        }
    }
    let mut source_outputs = Vec::new();
    for source in &sources {
        let (tx, rx) = channel(EDGE_CAPACITY);
        source_outputs.push(tx);
        inputs[source.node].push(rx);
    }
    let expected = nodes.len() + 2;
    let (reports_tx, reports) = channel(expected + 2);
    let (control, control_rx) = channel(1);
    let budget = Arc::new(AtomicUsize::new(0));
    let shared = Shared {
        db,
        view: name,
        on_error,
        budget: budget.clone(),
        reports: reports_tx,
    };
    for (index, (node, (inputs, outputs))) in nodes
        .into_iter()
        .zip(inputs.into_iter().zip(outputs))
        .enumerate()
    {
        let task = NodeTask {
            operator: node.operator,
            prefix: keys::node_prefix(view, index),
            mark_key: keys::node_watermark_key(view, index),
            marks: vec![(None, false); inputs.len()],
            blocked: vec![false; inputs.len()],
            inputs,
            outputs,
            forwarded: None,
            saved: resume.nodes.get(index).copied().flatten(),
            idle: false,
            replayed: false,
            state: None,
            shared: shared.clone(),
            profile: profile.clone(),
            index,
        };
        handle.spawn(guard(task.run(), shared.clone()));
    }
    let count = sources.len();
    let marks: Vec<Option<i64>> = (0..count)
        .map(|i| resume.sources.get(i).copied().flatten())
        .collect();
    let task = SourceTask {
        view,
        sources,
        outputs: source_outputs,
        offsets: resume.offsets,
        saved: marks.clone(),
        bounds: marks.clone(),
        marks,
        partition_marks: HashMap::new(),
        idle: vec![false; count],
        last_active: vec![resume.now; count],
        replayed: false,
        control: control_rx,
        shared: shared.clone(),
        profile,
    };
    handle.spawn(guard(task.run(), shared));
    Tasks {
        control,
        reports,
        expected,
        budget,
    }
}

/// Run a task; a failure or a panic is reported instead of vanishing.
async fn guard(task: impl Future<Output = Result<()>>, shared: Shared) {
    let outcome = AssertUnwindSafe(task)
        .catch_unwind()
        .await
        .unwrap_or_else(|panic| Err(Error::Internal(panic_message(panic.as_ref()))));
    match outcome {
        Ok(()) | Err(Error::ShuttingDown) => {}
        Err(e) => {
            let failure = match e {
                Error::ViewFailed { sqlstate, message } => Failure { sqlstate, message },
                other => Failure::of(&shared.view, &other),
            };
            let _ = shared.reports.try_send(Report::Failed(failure));
        }
    }
}

fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    format!(
        "an operator panicked: {}",
        crate::error::panic_message(panic)
    )
}

pub fn encode_mark(mark: Option<i64>) -> Vec<u8> {
    mark.unwrap_or(i64::MIN).to_le_bytes().to_vec()
}

pub fn decode_mark(bytes: &[u8]) -> Option<i64> {
    let raw: [u8; 8] = bytes.try_into().ok()?;
    Some(i64::from_le_bytes(raw)).filter(|v| *v != i64::MIN)
}

async fn send_all(outputs: &[Sender<Message>], message: Message) -> Result<()> {
    if let Some((last, rest)) = outputs.split_last() {
        for output in rest {
            send(output, message.clone()).await?;
        }
        send(last, message).await?;
    }
    Ok(())
}

async fn emit(outputs: &[Sender<Message>], output: Vec<ChangeBatch>) -> Result<()> {
    for batch in output {
        send_all(outputs, Message::Changes(batch)).await?;
    }
    Ok(())
}

async fn send(output: &Sender<Message>, message: Message) -> Result<()> {
    output.send(message).await.map_err(|_| Error::ShuttingDown)
}

/// The task that runs one operator.
struct NodeTask {
    operator: Box<dyn Operator>,
    prefix: Vec<u8>,
    mark_key: Vec<u8>,
    inputs: Vec<Receiver<Message>>,
    outputs: Vec<Sender<Message>>,
    /// Per input: its watermark, and whether its sources are idle.
    marks: Vec<(Option<i64>, bool)>,
    /// Per input: its barrier has arrived and the others' have not.
    blocked: Vec<bool>,
    /// The watermark this operator has passed downstream.
    forwarded: Option<i64>,
    /// The watermark stored with the last epoch.
    saved: Option<i64>,
    idle: bool,
    replayed: bool,
    /// The current epoch's state, from the first message of the epoch.
    state: Option<EpochState>,
    shared: Shared,
    /// Where its counters go, as operator `index`.
    profile: Arc<Profile>,
    index: usize,
}

impl NodeTask {
    async fn run(mut self) -> Result<()> {
        let mut turn = 0;
        while let Some((input, message)) = self.next(&mut turn).await {
            if !self.replayed {
                self.replay().await?;
            }
            match message {
                Message::Changes(batch) => {
                    let (rows, started) = (batch.len(), std::time::Instant::now());
                    let ((), output) = self.call(|op, cx| op.on_changes(input, batch, cx))?;
                    self.count(rows, &output, started);
                    emit(&self.outputs, output).await?;
                }
                Message::Watermark(w) => {
                    let mark = &mut self.marks[input].0;
                    *mark = (*mark).max(Some(w.micros));
                    self.advance().await?;
                }
                Message::Idle(idle) => {
                    self.marks[input].1 = idle;
                    self.advance().await?;
                }
                Message::Barrier(barrier) => {
                    self.blocked[input] = true;
                    if self.blocked.iter().all(|b| *b) {
                        self.blocked.fill(false);
                        self.barrier(barrier).await?;
                    }
                }
            }
        }
        Ok(())
    }

    /// The next message from an input that is not blocked, taking the
    /// inputs in turn; `None` once every input has closed.
    async fn next(&mut self, turn: &mut usize) -> Option<(usize, Message)> {
        let (inputs, blocked) = (&mut self.inputs, &self.blocked);
        let count = inputs.len();
        poll_fn(|cx| {
            let mut open = false;
            for step in 0..count {
                let input = (*turn + step) % count;
                if blocked[input] {
                    open = true;
                    continue;
                }
                match inputs[input].poll_recv(cx) {
                    Poll::Ready(Some(message)) => {
                        *turn = input + 1;
                        return Poll::Ready(Some((input, message)));
                    }
                    Poll::Ready(None) => {}
                    Poll::Pending => open = true,
                }
            }
            if open {
                Poll::Pending
            } else {
                Poll::Ready(None)
            }
        })
        .await
    }

    fn count(&self, rows_in: usize, output: &[ChangeBatch], started: std::time::Instant) {
        let rows_out = output.iter().map(ChangeBatch::len).sum();
        self.profile.operators[self.index].record(rows_in, rows_out, started.elapsed());
    }

    /// Run one operator method against the epoch's state; returns what it
    /// returned and the changes it emitted. A panic fails the dataflow only.
    fn call<T>(
        &mut self,
        f: impl FnOnce(&mut dyn Operator, &mut Context<'_>) -> Result<T>,
    ) -> Result<(T, Vec<ChangeBatch>)> {
        if self.state.is_none() {
            self.state = Some(self.shared.state()?);
        }
        let state = self.state.as_mut().expect("created above");
        let mut cx = Context::new(state, &self.prefix);
        let operator = self.operator.as_mut();
        let value = std::panic::catch_unwind(AssertUnwindSafe(|| f(operator, &mut cx)))
            .unwrap_or_else(|panic| Err(Error::Internal(panic_message(panic.as_ref()))))?;
        Ok((value, cx.take_output()))
    }

    /// Tell the operator the watermark it had reached before a restart
    /// (operators keep their watermark in memory).
    async fn replay(&mut self) -> Result<()> {
        self.replayed = true;
        let Some(micros) = self.saved else {
            return Ok(());
        };
        let started = std::time::Instant::now();
        let (forwarded, output) = self.call(|op, cx| op.on_watermark(Watermark { micros }, cx))?;
        self.count(0, &output, started);
        emit(&self.outputs, output).await?;
        self.forwarded = forwarded.map(|w| w.micros).max(self.saved);
        // Downstream operators learn where this input stands.
        if let Some(micros) = self.forwarded {
            send_all(&self.outputs, Message::Watermark(Watermark { micros })).await?;
        }
        Ok(())
    }

    /// The operator's watermark is the minimum of its inputs', leaving out
    /// idle inputs unless all are idle; pass on what changed.
    async fn advance(&mut self) -> Result<()> {
        let idle = self.marks.iter().all(|(_, idle)| *idle);
        if idle != self.idle {
            self.idle = idle;
            send_all(&self.outputs, Message::Idle(idle)).await?;
        }
        let low = self
            .marks
            .iter()
            .filter(|(_, i)| !*i || idle)
            .map(|(mark, _)| *mark)
            .min();
        // A missing watermark on any active input holds the minimum back.
        let Some(Some(micros)) = low else {
            return Ok(());
        };
        if self.forwarded >= Some(micros) {
            return Ok(());
        }
        let started = std::time::Instant::now();
        let (forwarded, output) = self.call(|op, cx| op.on_watermark(Watermark { micros }, cx))?;
        self.count(0, &output, started);
        emit(&self.outputs, output).await?;
        if let Some(w) = forwarded.filter(|w| Some(w.micros) > self.forwarded) {
            self.forwarded = Some(w.micros);
            send_all(&self.outputs, Message::Watermark(w)).await?;
        }
        Ok(())
    }

    async fn barrier(&mut self, barrier: Barrier) -> Result<()> {
        let started = std::time::Instant::now();
        let ((), output) = self.call(|op, cx| {
            cx.state.now = barrier.now;
            op.on_barrier(barrier, cx)
        })?;
        self.count(0, &output, started);
        emit(&self.outputs, output).await?;
        let mut state = self.state.take().expect("created by the call above");
        if self.forwarded != self.saved {
            state.put(self.mark_key.clone(), encode_mark(self.forwarded));
            self.saved = self.forwarded;
        }
        send_all(&self.outputs, Message::Barrier(barrier)).await?;
        self.shared.report(Report::Sealed(Box::new(state))).await
    }
}

/// Where the reading of one partition of a source stands in an epoch.
struct Cursor {
    source: usize,
    partition: u32,
    from: u64,
    at: u64,
    /// Everything the epoch's snapshot holds has been read.
    caught_up: bool,
}

impl Cursor {
    /// Caught up, or at the epoch's limit of rows.
    fn done(&self) -> bool {
        self.caught_up || self.at - self.from >= EPOCH_ROWS
    }
}

/// The task that reads a dataflow's sources.
struct SourceTask {
    view: u64,
    sources: Vec<Source>,
    /// Per source: the edge to the node it feeds.
    outputs: Vec<Sender<Message>>,
    /// Next offset per (source index, partition).
    offsets: HashMap<(usize, u32), u64>,
    /// Per source: the highest watermark its topic has announced.
    marks: Vec<Option<i64>>,
    /// Per source: the highest watermark read from its topic, or restored.
    /// What the source has passed on, and so every watermark downstream,
    /// is at most this.
    bounds: Vec<Option<i64>>,
    /// Per source of several partitions and partition: the watermark of
    /// the last chunk read.
    partition_marks: HashMap<(usize, u32), i64>,
    saved: Vec<Option<i64>>,
    idle: Vec<bool>,
    /// Per source: processing time of the last epoch that read records.
    last_active: Vec<i64>,
    replayed: bool,
    control: Receiver<Trigger>,
    shared: Shared,
    profile: Arc<Profile>,
}

impl SourceTask {
    async fn run(mut self) -> Result<()> {
        while let Some(trigger) = self.control.recv().await {
            let mut state = self.shared.state()?;
            state.now = trigger.barrier.now;
            if !self.replayed {
                self.replayed = true;
                for (output, mark) in self.outputs.iter().zip(&self.marks) {
                    if let Some(micros) = mark {
                        send(output, Message::Watermark(Watermark { micros: *micros })).await?;
                    }
                }
            }
            let reads = self.read_sources(&trigger.view, &mut state).await?;
            let mut records = 0;
            for (index, (read, caught_up)) in reads.into_iter().enumerate() {
                // A source with records left to read is behind, not idle.
                if read > 0 || !caught_up {
                    self.last_active[index] = state.now;
                }
                let idle =
                    state.now.saturating_sub(self.last_active[index]) >= trigger.idle_timeout;
                if idle != self.idle[index] {
                    self.idle[index] = idle;
                    send(&self.outputs[index], Message::Idle(idle)).await?;
                }
                records += read;
            }
            for (index, mark) in self.marks.iter().enumerate() {
                if *mark != self.saved[index] {
                    state.put(
                        keys::source_watermark_key(self.view, index),
                        encode_mark(*mark),
                    );
                }
            }
            self.saved = self.marks.clone();
            send_all(&self.outputs, Message::Barrier(trigger.barrier)).await?;
            let offsets = self.offsets.clone();
            self.shared
                .report(Report::Read { records, offsets })
                .await?;
            self.shared.report(Report::Sealed(Box::new(state))).await?;
        }
        Ok(())
    }

    /// Send what the sources' topics gained down their edges, with the
    /// watermarks their chunks carry; per source, how many records it read
    /// and whether it read all it had.
    ///
    /// Every partition of every source reads a round in turn, so that the
    /// epoch's budget is shared: an input left waiting while another read
    /// the whole budget would hold back its joins, and pass for idle.
    async fn read_sources(
        &mut self,
        view: &ReadView,
        state: &mut EpochState,
    ) -> Result<Vec<(u64, bool)>> {
        let mut cursors = self.cursors();
        let mut highest: Vec<Option<i64>> = vec![None; self.sources.len()];
        'epoch: while cursors.iter().any(|c| !c.done()) {
            for cursor in cursors.iter_mut().filter(|c| !c.done()) {
                // An epoch's writes are held in memory until it commits.
                if state.pending_bytes() > EPOCH_BYTES {
                    break 'epoch;
                }
                let budget = (EPOCH_ROWS - (cursor.at - cursor.from)).min(ROUND_ROWS);
                let (index, partition) = (cursor.source, cursor.partition);
                let mut bound = self.bounds[index];
                let (batches, read, next) =
                    self.read_round(index, view, partition, cursor.at, budget, &mut bound)?;
                self.bounds[index] = bound;
                // With one partition, each write's watermark applies right
                // after its rows; with several, after the epoch's reads.
                let exact = self.sources[index].partitions() == 1;
                for (batch, watermark) in batches {
                    if !batch.is_empty() {
                        self.profile.source_rows[index]
                            .fetch_add(batch.len() as u64, std::sync::atomic::Ordering::Relaxed);
                        send(&self.outputs[index], Message::Changes(batch)).await?;
                    }
                    match watermark {
                        Some(w) if exact => self.raise(index, w).await?,
                        Some(w) => {
                            highest[index] = highest[index].max(Some(w));
                            self.partition_marks.insert((index, partition), w);
                        }
                        None => {}
                    }
                }
                cursor.at = next;
                cursor.caught_up = read < budget;
            }
        }
        let mut reads = vec![(0, true); self.sources.len()];
        for cursor in &cursors {
            let read = cursor.at - cursor.from;
            if read > 0 {
                let (index, partition) = (cursor.source, cursor.partition);
                self.offsets.insert((index, partition), cursor.at);
                let key = keys::source_offset_key(self.view, index, partition);
                state.put(key, cursor.at.to_be_bytes().to_vec());
            }
            reads[cursor.source].0 += read;
            reads[cursor.source].1 &= cursor.caught_up;
        }
        for (index, high) in highest.into_iter().enumerate() {
            if let Some(w) = high.and_then(|w| self.settled_mark(index, w, &cursors)) {
                self.raise(index, w).await?;
            }
        }
        Ok(reads)
    }

    /// Where each partition of each source starts this epoch.
    fn cursors(&self) -> Vec<Cursor> {
        let mut cursors = Vec::new();
        for (source, s) in self.sources.iter().enumerate() {
            for partition in 0..s.partitions() {
                let from = self.offsets.get(&(source, partition)).copied().unwrap_or(0);
                cursors.push(Cursor {
                    source,
                    partition,
                    from,
                    at: from,
                    caught_up: false,
                });
            }
        }
        cursors
    }

    /// The watermark a source of several partitions may pass on after an
    /// epoch that read chunks up to `highest`: no higher than the last
    /// chunk read of a partition with rows still unread, whose next write
    /// was judged against at least that; `None` while such a partition has
    /// not had a chunk read at all.
    fn settled_mark(&self, index: usize, highest: i64, cursors: &[Cursor]) -> Option<i64> {
        cursors
            .iter()
            .filter(|c| c.source == index && !c.caught_up)
            .try_fold(highest, |w, c| {
                let mark = self.partition_marks.get(&(index, c.partition))?;
                Some(w.min(*mark))
            })
    }

    /// Up to `budget` records of one partition from offset `at`, as change
    /// batches with the watermark that ends each; how many were read, and
    /// the offset after the last (a compacted changelog has gaps). `bound`
    /// rises to the highest watermark read.
    fn read_round(
        &self,
        index: usize,
        view: &ReadView,
        partition: u32,
        at: u64,
        budget: u64,
        bound: &mut Option<i64>,
    ) -> Result<(Vec<Marked>, u64, u64)> {
        let source = &self.sources[index];
        let mut batches = Vec::new();
        let mut read = 0;
        let mut next = at;
        read_partition(view, source.topic(), partition, at, |base, chunk| {
            let take = (budget - read).min(chunk.entries.len() as u64) as usize;
            *bound = (*bound).max(chunk.watermark);
            // A watermark holds only once its whole chunk has been read.
            let watermark = chunk.watermark.filter(|_| take == chunk.entries.len());
            let mut entries = chunk.entries;
            entries.truncate(take);
            let chunk = crate::log::Chunk {
                entries,
                watermark,
                stamp: chunk.stamp,
            };
            batches.push((source.decode(&chunk, *bound)?, watermark));
            read += take as u64;
            next = base + take as u64;
            Ok(read < budget)
        })?;
        Ok((batches, read, next))
    }

    /// Raise source `index`'s watermark and pass it on.
    async fn raise(&mut self, index: usize, watermark: i64) -> Result<()> {
        if self.marks[index] >= Some(watermark) {
            return Ok(());
        }
        self.marks[index] = Some(watermark);
        send(
            &self.outputs[index],
            Message::Watermark(Watermark { micros: watermark }),
        )
        .await
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use super::*;
    use crate::dataflow::change::pretty;
    use crate::state::Store;

    /// Records what it sees, as text.
    struct Recorder(Arc<Mutex<Vec<String>>>);

    impl Operator for Recorder {
        fn name(&self) -> &'static str {
            "Recorder"
        }

        fn on_changes(
            &mut self,
            input: usize,
            batch: ChangeBatch,
            _: &mut Context<'_>,
        ) -> Result<()> {
            let rows = crate::dataflow::change::render(&[batch]).join(",");
            self.0
                .lock()
                .expect("lock")
                .push(format!("{input}: {rows}"));
            Ok(())
        }

        fn on_barrier(&mut self, barrier: Barrier, _: &mut Context<'_>) -> Result<()> {
            let seen = format!("barrier {}", barrier.epoch);
            self.0.lock().expect("lock").push(seen);
            Ok(())
        }
    }

    #[tokio::test]
    async fn a_two_input_operator_waits_for_the_barrier_on_both_inputs() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = Store::open(dir.path()).expect("store");
        let seen = Arc::new(Mutex::new(Vec::new()));
        let (left, left_rx) = channel(EDGE_CAPACITY);
        let (right, right_rx) = channel(EDGE_CAPACITY);
        let (reports_tx, mut reports) = channel(4);
        let profile = Arc::new(Profile::of(&Dataflow {
            view: 1,
            name: "v".into(),
            on_error: OnError::Null,
            nodes: vec![crate::dataflow::graph::Node {
                operator: Box::new(Recorder(Arc::default())),
                inputs: Vec::new(),
            }],
            sources: Vec::new(),
        }));
        let task = NodeTask {
            operator: Box::new(Recorder(seen.clone())),
            prefix: keys::node_prefix(1, 0),
            mark_key: keys::node_watermark_key(1, 0),
            marks: vec![(None, false); 2],
            blocked: vec![false; 2],
            inputs: vec![left_rx, right_rx],
            outputs: Vec::new(),
            forwarded: None,
            saved: None,
            idle: false,
            replayed: false,
            state: None,
            shared: Shared {
                db: Arc::downgrade(store.db()),
                view: "v".into(),
                on_error: OnError::Null,
                budget: Arc::default(),
                reports: reports_tx,
            },
            profile: profile.clone(),
            index: 0,
        };
        let running = tokio::spawn(task.run());
        let barrier = |epoch| Message::Barrier(Barrier { epoch, now: 0 });
        let changes = |row: &str| Message::Changes(pretty("I", row));
        // The left input runs an epoch ahead of the right one.
        for message in [changes("+ 1"), barrier(1), changes("+ 2"), barrier(2)] {
            left.send(message).await.expect("send");
        }
        right.send(changes("+ 10")).await.expect("send");
        right.send(barrier(1)).await.expect("send");
        assert!(matches!(reports.recv().await, Some(Report::Sealed(_))));
        right.send(barrier(2)).await.expect("send");
        assert!(matches!(reports.recv().await, Some(Report::Sealed(_))));
        drop((left, right));
        running.await.expect("join").expect("run");
        let seen = seen.lock().expect("lock").clone();
        assert_eq!(
            seen,
            vec!["0: +1 1", "1: +1 10", "barrier 1", "0: +1 2", "barrier 2"]
        );
    }
}
