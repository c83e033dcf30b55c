//! Change streams: `SUBSCRIBE`, the cursors over it, and `COPY (SUBSCRIBE ...)`.
//!
//! A subscriber reads, in one RocksDB snapshot, the relation's contents and
//! where its log topic ended; then it reads the topic from there, each time
//! an epoch (a view) or a write group (a table) commits. Every log chunk is
//! stamped with the commit that wrote it, so changes come out in commit
//! order and `AS OF <epoch>` can start right after any commit the topic
//! still holds. The subscriber keeps only its read position and what it has
//! not handed out yet: a slow reader holds back nobody, and a vanished one
//! leaves nothing behind.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use datafusion::arrow::array::{
    Array, ArrayRef, AsArray, Int32Array, Int64Array, RecordBatch, new_null_array,
};
use datafusion::arrow::compute::{cast, concat_batches};
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef, TimeUnit};
use tokio::sync::watch;

use crate::catalog::{LATE_EVENTS, Table, VIEW_ERRORS};
use crate::dataflow::node::{Node, blocking};
use crate::error::{Error, Result};
use crate::log::embedded::{self, Chunk};
use crate::state::rows::decode_counted;
use crate::state::{CF_ROWS, CF_STATE, ReadView, keys};

/// How a subscriber wants its changes.
#[derive(Debug, Clone, PartialEq)]
pub struct Options {
    /// Start with the relation's contents (default true).
    pub snapshot: bool,
    /// Add a row for every commit that changed nothing here.
    pub progress: bool,
    /// Resume right after this epoch instead of taking a snapshot.
    pub as_of: Option<u64>,
    pub pace: Pace,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            snapshot: true,
            progress: false,
            as_of: None,
            pace: Pace::Changes,
        }
    }
}

/// The subscriber's own emit policy, whatever the view's.
#[derive(Debug, Clone, PartialEq)]
pub enum Pace {
    /// Every commit's changes as they come.
    Changes,
    /// Changes summed per row and handed out once an interval (microseconds).
    Every(i64),
    /// Only rows of windows the watermark has closed, once, final.
    OnWindowClose,
}

/// Records a reader far behind reads at most (about) per poll, so that its
/// memory stays bounded however far behind it is.
const POLL_RECORDS: usize = 65_536;

/// Rows a stream encodes into one piece at most.
const ENCODE_ROWS: usize = 4096;

/// Changelog chunks one shared read hands out at most.
const SHARED_CHUNKS: usize = 16;

/// Turns change rows into a client's wire text; `format` names the
/// client's output settings, so that only alike clients share a piece.
pub struct Encoder<'a> {
    pub format: String,
    pub encode: &'a (dyn Fn(RecordBatch) -> Result<Bytes> + Send + Sync),
}

/// A chunk of a topic encoded for clients with one format.
type PieceKey = (u64, u64, usize, String);

/// Encoded changelog chunks shared by the COPY streams of every session,
/// the oldest dropped once they pass `capacity` bytes.
pub struct LineCache {
    inner: std::sync::Mutex<Pieces>,
    capacity: usize,
}

impl Default for LineCache {
    /// 64 MiB: many epochs of a busy view, for subscribers a little behind.
    fn default() -> Self {
        LineCache::with_capacity(64 << 20)
    }
}

#[derive(Default)]
struct Pieces {
    map: HashMap<PieceKey, Bytes>,
    order: VecDeque<PieceKey>,
    bytes: usize,
}

impl std::fmt::Debug for LineCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("LineCache")
    }
}

impl LineCache {
    pub fn with_capacity(capacity: usize) -> LineCache {
        LineCache {
            inner: Default::default(),
            capacity,
        }
    }

    fn get(&self, key: &PieceKey) -> Option<Bytes> {
        self.lock().map.get(key).cloned()
    }

    fn put(&self, key: PieceKey, piece: Bytes) -> Bytes {
        let mut pieces = self.lock();
        if pieces.map.contains_key(&key) {
            return piece;
        }
        pieces.bytes += piece.len();
        pieces.order.push_back(key.clone());
        pieces.map.insert(key, piece.clone());
        while pieces.bytes > self.capacity {
            let Some(oldest) = pieces.order.pop_front() else {
                break;
            };
            if let Some(dropped) = pieces.map.remove(&oldest) {
                pieces.bytes -= dropped.len();
            }
        }
        piece
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Pieces> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// One chunk read from the topic, with its updates.
struct Read {
    epoch: u64,
    end: u64,
    watermark: Option<i64>,
    updates: Vec<Update>,
}

/// One delivered update: a change to a row, or (no row) a progress mark.
#[derive(Debug)]
struct Update {
    epoch: u64,
    change: Option<(i64, Vec<u8>)>,
}

/// Which commit counter stamps the relation's topic.
#[derive(Debug, Clone, Copy)]
enum Clock {
    /// Dataflow epochs: views, and the `late_events` table the dataflows write.
    Epochs,
    /// The writer's commit groups: tables.
    Writes,
}

impl Clock {
    fn key(self) -> &'static [u8] {
        match self {
            Clock::Epochs => keys::EPOCH_KEY,
            Clock::Writes => keys::SEQUENCE_KEY,
        }
    }

    fn watch(self, node: &Node) -> watch::Receiver<u64> {
        match self {
            Clock::Epochs => {
                // As a fresh subscription to the runtime's commits would be.
                let mut epochs = node.epochs.clone();
                epochs.mark_unchanged();
                epochs
            }
            Clock::Writes => node.writer.committed(),
        }
    }
}

/// A change stream over one relation, read at the subscriber's pace.
pub struct Subscription {
    table: Arc<Table>,
    schema: SchemaRef,
    clock: Clock,
    options: Options,
    /// Next offset to read, per partition.
    positions: Vec<u64>,
    /// The highest epoch handed out (or known finished) so far.
    delivered: u64,
    ready: VecDeque<Update>,
    held: Held,
    /// The last read stopped before the topic's end.
    behind: bool,
}

/// Changes a paced subscriber holds back, summed per row, in first-seen order.
#[derive(Default)]
struct Held {
    order: Vec<Vec<u8>>,
    sums: HashMap<Vec<u8>, i64>,
    /// `EMIT EVERY`: when the held changes are next handed out (clock micros).
    due: Option<i64>,
    /// `EMIT ON WINDOW CLOSE`: the relation's event-time watermark.
    watermark: Option<i64>,
    /// `EMIT ON WINDOW CLOSE`: each held row's window end (microseconds),
    /// read once when the row is first held.
    ends: HashMap<Vec<u8>, i64>,
}

impl Held {
    fn add(&mut self, diff: i64, row: Vec<u8>) {
        match self.sums.get_mut(&row) {
            Some(sum) => *sum += diff,
            None => {
                self.order.push(row.clone());
                self.sums.insert(row, diff);
            }
        }
    }

    fn is_empty(&self) -> bool {
        self.order.is_empty()
    }

    /// The held rows `keep` rejects, with their non-zero sums; the rest stay.
    fn release(&mut self, mut keep: impl FnMut(&[u8]) -> bool) -> Vec<(i64, Vec<u8>)> {
        let mut out = Vec::new();
        let mut kept = Vec::new();
        for row in std::mem::take(&mut self.order) {
            if keep(&row) {
                kept.push(row);
                continue;
            }
            if let Some(sum) = self.sums.remove(&row).filter(|s| *s != 0) {
                out.push((sum, row));
            }
        }
        self.order = kept;
        out
    }
}

/// The output columns: `_epoch`, `_diff`, then the relation's, all nullable
/// except the epoch (a progress row has no change and no row).
pub fn output_schema(table: &Table) -> SchemaRef {
    let mut fields = vec![
        Field::new("_epoch", DataType::Int64, false),
        Field::new("_diff", DataType::Int32, true),
    ];
    fields.extend(
        table
            .nullable_schema
            .fields()
            .iter()
            .map(|f| f.as_ref().clone()),
    );
    Arc::new(Schema::new(fields))
}

impl std::fmt::Debug for Subscription {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Subscription")
            .field("relation", &self.table.def.name)
            .field("delivered", &self.delivered)
            .finish()
    }
}

impl Subscription {
    /// A stream that starts now: its snapshot is read (and queued for the
    /// first fetch), or the first change after the `AS OF` epoch found.
    pub fn open(node: &Node, table: Arc<Table>, options: Options) -> Result<Subscription> {
        check_pace(&table, &options.pace)?;
        let clock = if table.def.is_view()
            || table.def.name == LATE_EVENTS
            || table.def.name == VIEW_ERRORS
        {
            Clock::Epochs
        } else {
            Clock::Writes
        };
        let mut subscription = Subscription {
            schema: output_schema(&table),
            table,
            clock,
            options,
            positions: Vec::new(),
            delivered: 0,
            ready: VecDeque::new(),
            held: Held::default(),
            behind: false,
        };
        let view = node.store.read_view();
        let committed = read_counter(&view, clock.key())?;
        subscription.positions = blocking(|| subscription.start(&view, committed))?;
        Ok(subscription)
    }

    pub fn schema(&self) -> &SchemaRef {
        &self.schema
    }

    /// Everything committed so far has been handed out: the last epoch
    /// fetched is complete.
    pub fn caught_up(&self) -> bool {
        self.ready.is_empty() && !self.behind && self.held.is_empty()
    }

    /// A view keeps its changelog in one partition.
    fn partitions(&self) -> u32 {
        match self.table.def.is_view() {
            true => 1,
            false => self.table.def.partitions.max(1),
        }
    }

    /// Up to `max` rows as one batch. Waits for the first row for at most
    /// `timeout` (forever when `None`); an empty batch means none came.
    pub async fn fetch(
        &mut self,
        node: &Node,
        max: usize,
        timeout: Option<Duration>,
    ) -> Result<RecordBatch> {
        let deadline = timeout.map(|t| tokio::time::Instant::now() + t);
        let mut commits = self.clock.watch(node);
        self.check_exists(node)?;
        loop {
            if !self.ready.is_empty() {
                return self.take(max);
            }
            commits.borrow_and_update();
            blocking(|| self.poll(node))?;
            if !self.ready.is_empty() || self.behind {
                continue;
            }
            // A paced subscriber wakes for its interval even when nothing commits.
            let nap = match self.options.pace {
                Pace::Every(every) => {
                    Some(tokio::time::Instant::now() + Duration::from_micros(every.max(0) as u64))
                }
                _ => None,
            };
            let changed = commits.changed();
            match [deadline, nap].into_iter().flatten().min() {
                Some(wake) => {
                    let timed_out = tokio::time::timeout_at(wake, changed).await.is_err();
                    if timed_out && deadline.is_some_and(|d| d <= tokio::time::Instant::now()) {
                        blocking(|| self.poll(node))?;
                        return self.take(max);
                    }
                }
                None => changed.await.map_err(|_| Error::ShuttingDown)?,
            }
        }
    }

    /// For a COPY stream: the next changes as encoded text, at least one
    /// piece. Subscribers that read a view's changes as they come share the
    /// encoding of each changelog chunk through `cache`, so a hundred of
    /// them cost about what one does; other streams encode their own.
    pub async fn fetch_encoded(
        &mut self,
        node: &Node,
        cache: &LineCache,
        encoder: &Encoder<'_>,
    ) -> Result<Vec<Bytes>> {
        let mut commits = self.clock.watch(node);
        loop {
            if !self.ready.is_empty() || !self.shareable() {
                let batch = self.fetch(node, ENCODE_ROWS, None).await?;
                return Ok(vec![(encoder.encode)(batch)?]);
            }
            commits.borrow_and_update();
            let pieces = blocking(|| self.read_shared(node, cache, encoder))?;
            if !pieces.is_empty() {
                return Ok(pieces);
            }
            commits.changed().await.map_err(|_| Error::ShuttingDown)?;
        }
    }

    /// Changes as they come from a view's one-partition changelog: these
    /// can be encoded once per chunk for every subscriber.
    fn shareable(&self) -> bool {
        self.options.pace == Pace::Changes && self.partitions() == 1
    }

    /// Up to [`SHARED_CHUNKS`] chunks after the position, encoded (or found
    /// encoded), then a progress row when one is due.
    fn read_shared(
        &mut self,
        node: &Node,
        cache: &LineCache,
        encoder: &Encoder<'_>,
    ) -> Result<Vec<Bytes>> {
        self.check_exists(node)?;
        let view = node.store.read_view();
        let committed = read_counter(&view, self.clock.key())?;
        let topic = self.table.def.log_topic();
        let from = self.positions.first().copied().unwrap_or(0);
        let mut next = from;
        let mut pieces = Vec::new();
        let mut failed = None;
        // Positions sit where chunks begin: a chunk is read whole, and its
        // records are decoded only when no other subscriber encoded it yet.
        embedded::read_raw(&view, topic, 0, from, |base, count, stamp, bytes| {
            let stamp = stamp.unwrap_or_default();
            if stamp.compacted {
                return Err(self.fell_behind(stamp.epoch));
            }
            next = base + count;
            if count == 0 {
                return Ok(true);
            }
            self.delivered = self.delivered.max(stamp.epoch);
            let key = (topic.id, base, count as usize, encoder.format.clone());
            let piece = match cache.get(&key) {
                Some(piece) => piece,
                None => {
                    let encoded = embedded::decode_chunk(bytes).and_then(|chunk| {
                        let mut updates = Vec::with_capacity(chunk.entries.len());
                        push_chunk(&chunk, &mut updates);
                        let batch = self.changes_batch(&updates.iter().collect::<Vec<_>>())?;
                        (encoder.encode)(batch)
                    });
                    match encoded {
                        Ok(piece) => cache.put(key, piece),
                        Err(e) => {
                            failed = Some(e);
                            return Ok(false);
                        }
                    }
                }
            };
            pieces.push(piece);
            Ok(pieces.len() < SHARED_CHUNKS)
        })?;
        if let Some(e) = failed {
            return Err(e);
        }
        self.positions = vec![next];
        let caught_up = pieces.len() < SHARED_CHUNKS;
        if self.options.progress && committed > self.delivered && caught_up {
            pieces.push((encoder.encode)(self.progress_batch(committed)?)?);
            self.delivered = committed;
        }
        Ok(pieces)
    }

    /// A stream ends when its relation is dropped.
    fn check_exists(&self, node: &Node) -> Result<()> {
        let name = &self.table.def.name;
        match node.catalog.relation(name) {
            Some(table) if table.def.id == self.table.def.id => Ok(()),
            _ => Err(Error::UndefinedTable(name.clone())),
        }
    }

    /// Read what committed since the last read, into `ready`.
    fn poll(&mut self, node: &Node) -> Result<()> {
        self.check_exists(node)?;
        let view = node.store.read_view();
        let committed = read_counter(&view, self.clock.key())?;
        let positions = std::mem::take(&mut self.positions);
        let (updates, positions) = self.read_topic(&view, positions)?;
        self.positions = positions;
        let before = self.ready.len();
        self.pace(updates, committed, Some(node));
        let newest = self.ready.iter().skip(before).map(|u| u.epoch).max();
        if let Some(newest) = newest {
            self.delivered = self.delivered.max(newest);
        }
        let caught_up = !self.behind && self.held.is_empty();
        if self.options.progress && committed > self.delivered && caught_up {
            self.ready.push_back(Update {
                epoch: committed,
                change: None,
            });
            self.delivered = committed;
        }
        Ok(())
    }

    /// Where reading starts: the snapshot's end (after queueing the
    /// snapshot itself), or right after the `AS OF` epoch.
    fn start(&mut self, view: &ReadView, committed: u64) -> Result<Vec<u64>> {
        let topic = self.table.def.log_topic();
        let partitions = self.partitions();
        if let Some(epoch) = self.options.as_of {
            if epoch > committed {
                return Err(Error::InvalidParameter(format!(
                    "epoch {epoch} has not been committed yet; the latest committed epoch of \"{}\" is {committed}",
                    self.table.def.name
                )));
            }
            let mut positions = Vec::new();
            for partition in 0..partitions {
                match embedded::after_epoch(view, topic, partition, epoch)? {
                    Ok(offset) => positions.push(offset),
                    Err(oldest) => {
                        return Err(Error::InvalidParameter(format!(
                            "epoch {epoch} is no longer retained for \"{}\"; the oldest epoch a subscription can resume after is {oldest}",
                            self.table.def.name
                        )));
                    }
                }
            }
            self.delivered = epoch;
            return Ok(positions);
        }
        let mut positions = Vec::new();
        let mut watermark = None;
        for partition in 0..partitions {
            let tail = embedded::tail(view, topic, partition)?;
            positions.push(tail.end);
            watermark = watermark.max(tail.watermark);
        }
        self.held.watermark = watermark;
        self.delivered = committed;
        if self.options.snapshot {
            let rows = self.snapshot(view)?;
            let updates = rows
                .into_iter()
                .map(|(diff, row)| Update {
                    epoch: committed,
                    change: Some((diff, row)),
                })
                .collect();
            self.pace(updates, committed, None);
        }
        Ok(positions)
    }

    /// The relation's contents in the snapshot, each row with its multiplicity.
    fn snapshot(&self, view: &ReadView) -> Result<Vec<(i64, Vec<u8>)>> {
        let def = &self.table.def;
        let mut rows = Vec::new();
        if def.contents_in_log() {
            for partition in 0..def.partitions.max(1) {
                embedded::read_partition(view, def.log_topic(), partition, 0, |_, chunk| {
                    rows.extend(chunk.entries.iter().map(|e| (e.diff, e.row.to_vec())));
                    Ok(true)
                })?;
            }
            return Ok(rows);
        }
        let prefix = keys::table_prefix(def.id);
        view.scan(
            CF_ROWS,
            prefix.clone(),
            keys::prefix_end(&prefix),
            |_, value| {
                if def.is_multiset() {
                    let (count, row) = decode_counted(value)?;
                    rows.push((count, row.to_vec()));
                } else {
                    rows.push((1, value.to_vec()));
                }
                Ok(true)
            },
        )?;
        Ok(rows)
    }

    /// Records from the positions on, in commit order: to the topic's end,
    /// or, for a reader far behind, about [`POLL_RECORDS`] of them, cut
    /// where an epoch ends in every partition, so epochs never interleave.
    fn read_topic(
        &mut self,
        view: &ReadView,
        positions: Vec<u64>,
    ) -> Result<(Vec<Update>, Vec<u64>)> {
        let topic = self.table.def.log_topic();
        let budget = POLL_RECORDS / positions.len().max(1);
        let mut chunks: Vec<Vec<Read>> = Vec::new();
        let mut cutoff = u64::MAX;
        for (partition, from) in positions.iter().enumerate() {
            let mut read: Vec<Read> = Vec::new();
            let mut records = 0;
            let mut cut = false;
            embedded::read_partition(view, topic, partition as u32, *from, |base, chunk| {
                let stamp = chunk.stamp.unwrap_or_default();
                if stamp.compacted {
                    return Err(self.fell_behind(stamp.epoch));
                }
                // Stop only where an epoch ends.
                if records >= budget && read.last().is_some_and(|r| r.epoch != stamp.epoch) {
                    cut = true;
                    return Ok(false);
                }
                records += chunk.entries.len();
                let mut updates = Vec::with_capacity(chunk.entries.len());
                push_chunk(&chunk, &mut updates);
                read.push(Read {
                    epoch: stamp.epoch,
                    end: base + chunk.entries.len() as u64,
                    watermark: chunk.watermark,
                    updates,
                });
                Ok(true)
            })?;
            if cut && let Some(last) = read.last() {
                cutoff = cutoff.min(last.epoch);
            }
            chunks.push(read);
        }
        let mut next = positions;
        let mut updates = Vec::new();
        for (partition, read) in chunks.into_iter().enumerate() {
            for chunk in read.into_iter().take_while(|r| r.epoch <= cutoff) {
                next[partition] = chunk.end;
                self.held.watermark = self.held.watermark.max(chunk.watermark);
                updates.extend(chunk.updates);
            }
        }
        self.behind = cutoff != u64::MAX;
        // Partitions interleave by commit; the sort is stable within each.
        if next.len() > 1 {
            updates.sort_by_key(|u| u.epoch);
        }
        Ok((updates, next))
    }

    fn fell_behind(&self, epoch: u64) -> Error {
        Error::PrerequisiteState(format!(
            "this subscription to \"{}\" fell behind its retention: changes up to epoch {epoch} were compacted before it read them; subscribe again",
            self.table.def.name
        ))
    }

    /// Pass updates through the subscriber's pace into `ready`.
    fn pace(&mut self, updates: Vec<Update>, committed: u64, node: Option<&Node>) {
        match self.options.pace.clone() {
            Pace::Changes => self.ready.extend(updates),
            Pace::Every(every) => {
                for update in updates {
                    if let Some((diff, row)) = update.change {
                        self.held.add(diff, row);
                    }
                }
                let Some(node) = node else { return };
                let now = node.clock.now().timestamp_micros();
                let due = *self.held.due.get_or_insert(now + every);
                if now >= due {
                    self.held.due = Some(now + every);
                    self.release(committed, |_| false);
                }
            }
            Pace::OnWindowClose => {
                let fresh: Vec<&[u8]> = updates
                    .iter()
                    .filter_map(|u| u.change.as_ref())
                    .map(|(_, row)| row.as_slice())
                    .filter(|row| !self.held.ends.contains_key(*row))
                    .collect();
                let ends = self.window_ends(&fresh);
                self.held.ends.extend(ends);
                for update in updates {
                    if let Some((diff, row)) = update.change {
                        self.held.add(diff, row);
                    }
                }
                let Some(watermark) = self.held.watermark else {
                    return;
                };
                let mut ends = std::mem::take(&mut self.held.ends);
                self.release(committed, |row| {
                    ends.get(row).is_none_or(|end| *end > watermark)
                });
                ends.retain(|row, _| self.held.sums.contains_key(row));
                self.held.ends = ends;
            }
        }
    }

    fn release(&mut self, epoch: u64, keep: impl FnMut(&[u8]) -> bool) {
        for change in self.held.release(keep) {
            self.ready.push_back(Update {
                epoch,
                change: Some(change),
            });
        }
    }

    /// The window end of each row, in microseconds.
    fn window_ends(&self, rows: &[&[u8]]) -> HashMap<Vec<u8>, i64> {
        let Ok(column) = window_end_column(&self.table) else {
            return HashMap::new();
        };
        let decoded = self.table.codec.decode(rows.iter().copied());
        let Ok(batch) = decoded else {
            return HashMap::new();
        };
        let micros = cast(
            batch.column(column),
            &DataType::Timestamp(TimeUnit::Microsecond, None),
        )
        .and_then(|a| cast(&a, &DataType::Int64));
        let Ok(micros) = micros else {
            return HashMap::new();
        };
        let micros = micros.as_primitive::<datafusion::arrow::datatypes::Int64Type>();
        rows.iter()
            .enumerate()
            .filter(|(i, _)| micros.is_valid(*i))
            .map(|(i, row)| (row.to_vec(), micros.value(i)))
            .collect()
    }

    /// Up to `max` ready updates as one batch.
    fn take(&mut self, max: usize) -> Result<RecordBatch> {
        let count = self.ready.len().min(max.max(1));
        let updates: Vec<Update> = self.ready.drain(..count).collect();
        let mut batches = Vec::new();
        // Runs of changes decode together; a progress row stands alone.
        let mut run: Vec<&Update> = Vec::new();
        for update in &updates {
            if update.change.is_some() {
                run.push(update);
                continue;
            }
            if !run.is_empty() {
                batches.push(self.changes_batch(&std::mem::take(&mut run))?);
            }
            batches.push(self.progress_batch(update.epoch)?);
        }
        if !run.is_empty() {
            batches.push(self.changes_batch(&run)?);
        }
        Ok(concat_batches(&self.schema, &batches)?)
    }

    fn changes_batch(&self, updates: &[&Update]) -> Result<RecordBatch> {
        let changes: Vec<&(i64, Vec<u8>)> =
            updates.iter().filter_map(|u| u.change.as_ref()).collect();
        let rows = self
            .table
            .codec
            .decode(changes.iter().map(|(_, row)| row.as_slice()))?;
        let mut columns: Vec<ArrayRef> = vec![
            Arc::new(Int64Array::from_iter_values(
                updates.iter().map(|u| u.epoch as i64),
            )),
            Arc::new(Int32Array::from_iter_values(changes.iter().map(
                |(diff, _)| (*diff).clamp(i32::MIN as i64, i32::MAX as i64) as i32,
            ))),
        ];
        columns.extend(rows.columns().iter().cloned());
        Ok(RecordBatch::try_new(self.schema.clone(), columns)?)
    }

    fn progress_batch(&self, epoch: u64) -> Result<RecordBatch> {
        let columns: Vec<ArrayRef> = self
            .schema
            .fields()
            .iter()
            .enumerate()
            .map(|(i, field)| match i {
                0 => Arc::new(Int64Array::from(vec![epoch as i64])) as ArrayRef,
                _ => new_null_array(field.data_type(), 1),
            })
            .collect();
        Ok(RecordBatch::try_new(self.schema.clone(), columns)?)
    }
}

fn push_chunk(chunk: &Chunk<'_>, updates: &mut Vec<Update>) {
    let epoch = chunk.stamp.map_or(0, |s| s.epoch);
    updates.extend(chunk.entries.iter().map(|e| Update {
        epoch,
        change: Some((e.diff, e.row.to_vec())),
    }));
}

fn read_counter(view: &ReadView, key: &[u8]) -> Result<u64> {
    let value = view.get(CF_STATE, key)?;
    Ok(value
        .and_then(|bytes| bytes.as_slice().try_into().ok())
        .map_or(0, u64::from_be_bytes))
}

/// Fails when `table` cannot be followed at `pace`.
pub fn check_pace(table: &Table, pace: &Pace) -> Result<()> {
    if *pace == Pace::OnWindowClose {
        window_end_column(table)?;
    }
    Ok(())
}

/// The `window_end` column `EMIT ON WINDOW CLOSE` judges rows by.
fn window_end_column(table: &Table) -> Result<usize> {
    let index = table.schema.index_of("window_end").ok().filter(|i| {
        matches!(
            table.schema.field(*i).data_type(),
            DataType::Timestamp(..) | DataType::Date32 | DataType::Date64
        )
    });
    match index {
        Some(index) if table.def.has_watermark() => Ok(index),
        _ => Err(Error::NotSupported(format!(
            "SUBSCRIBE ... EMIT ON WINDOW CLOSE needs a relation with event time and a window_end column; \"{}\" has {}",
            table.def.name,
            if table.def.has_watermark() {
                "no window_end timestamp column"
            } else {
                "no event time (no watermark)"
            }
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn held_changes_sum_per_row_and_drop_when_they_cancel() {
        let mut held = Held::default();
        held.add(1, b"a".to_vec());
        held.add(1, b"b".to_vec());
        held.add(-1, b"a".to_vec());
        held.add(2, b"b".to_vec());
        held.add(1, b"c".to_vec());
        let out = held.release(|row| row == b"c");
        assert_eq!(out, vec![(3, b"b".to_vec())]);
        assert_eq!(held.order, vec![b"c".to_vec()]);
        assert_eq!(held.release(|_| false), vec![(1, b"c".to_vec())]);
        assert!(held.is_empty());
    }

    #[test]
    fn the_line_cache_drops_its_oldest_pieces_past_its_capacity() {
        let cache = LineCache::with_capacity(10);
        let key = |base: u64| (7, base, 1, String::new());
        cache.put(key(0), Bytes::from_static(b"aaaa"));
        cache.put(key(1), Bytes::from_static(b"bbbb"));
        assert_eq!(cache.get(&key(0)), Some(Bytes::from_static(b"aaaa")));
        cache.put(key(2), Bytes::from_static(b"cccc"));
        assert_eq!(cache.get(&key(0)), None, "the oldest went");
        assert_eq!(cache.get(&key(2)), Some(Bytes::from_static(b"cccc")));
    }
}
