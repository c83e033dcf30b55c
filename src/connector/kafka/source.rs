//! The Kafka source task: a topic's messages into a table's log.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use datafusion::arrow::array::{
    Array, ArrayRef, BinaryArray, BooleanArray, Int32Array, Int64Array, RecordBatch,
    TimestampMicrosecondArray, new_null_array,
};
use datafusion::arrow::compute::filter_record_batch;
use datafusion::arrow::datatypes::{Field, Schema};
use futures::FutureExt;
use rdkafka::consumer::{Consumer, StreamConsumer};
use rdkafka::message::{Header, Message, OwnedHeaders, OwnedMessage};
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::{Offset, TopicPartitionList};

use super::{MAX_BATCH, OnError, REQUEST_TIMEOUT, SourceOptions, Startup, partitions};
use crate::catalog::{Metadata, SOURCE_ERRORS, Table};
use crate::connector::errors::{self, BadMessage};
use crate::connector::format::{CsvOptions, Decoder, Encode};
use crate::connector::{Failure, Handle, Position, Progress, Status};
use crate::dataflow::node::Node;
use crate::error::{Error, Result};
use crate::log::writer::{self, WriteOp};

/// Messages that failed: their place in the batch and why.
type Failed = Vec<(usize, String)>;

/// Feed `table` from its topic until stopped or failed.
pub async fn source(
    node: &Node,
    table: &Arc<Table>,
    handle: Handle,
) -> std::result::Result<(), Failure> {
    let options = options_of(table)?;
    let consumer: StreamConsumer = options
        .client
        .config()
        .set("group.id", format!("weir-source-{}", table.def.id))
        .set("enable.auto.commit", "false")
        .set("isolation.level", "read_committed")
        .create()?;
    let consumer = Arc::new(consumer);
    let partitions = partitions(&consumer, &options.client.topic).await?;
    let assignment = start_positions(node, table, &consumer, &options, &partitions).await?;
    consumer.assign(&assignment)?;
    let mut reader = Reader::new(node, table, options, &partitions)?;
    handle.progress.set(Status::Running);
    let mut positions = BTreeMap::new();
    let mut asked = None;
    loop {
        let messages = next_messages(&consumer).await?;
        positions.extend(reader.ingest(messages, &handle.progress).await?);
        if asked.is_none_or(|at: std::time::Instant| at.elapsed() >= LAG_INTERVAL) {
            asked = Some(std::time::Instant::now());
            let topic = reader.options.client.topic.clone();
            record_lag(&consumer, topic, &positions, &handle.progress).await;
        }
    }
}

/// The source options of `table`, as CREATE checked them.
pub(super) fn options_of(table: &Table) -> std::result::Result<SourceOptions, Failure> {
    let connector = table
        .def
        .connector
        .as_ref()
        .ok_or_else(|| Failure::Fatal("the table has no connector".into()))?;
    SourceOptions::parse(connector, &table.def).map_err(|e| Failure::Fatal(e.to_string()))
}

/// How often a source asks the broker where its partitions end.
pub(super) const LAG_INTERVAL: std::time::Duration = std::time::Duration::from_secs(5);

/// Keep each partition's read position beside its end, for the lag the
/// metrics and the dashboard show. A broker that does not answer leaves
/// the last figures.
pub(super) async fn record_lag(
    consumer: &Arc<StreamConsumer>,
    topic: String,
    positions: &BTreeMap<i32, i64>,
    progress: &Progress,
) {
    let client = consumer.clone();
    let wanted: Vec<i32> = positions.keys().copied().collect();
    let ends = tokio::task::spawn_blocking(move || {
        wanted
            .into_iter()
            .filter_map(|p| {
                Some((
                    p,
                    client.fetch_watermarks(&topic, p, REQUEST_TIMEOUT).ok()?.1,
                ))
            })
            .collect::<Vec<_>>()
    })
    .await
    .unwrap_or_default();
    for (partition, high) in ends {
        let next = positions[&partition];
        progress.set_position(partition, Position { next, high });
    }
}

/// The producer id under which a partition's read position commits.
fn position_id(table: u64, partition: i32) -> String {
    format!("kafka:{table}:{partition}")
}

/// Where each partition resumes: after what the table committed, else per
/// `scan.startup.mode`.
async fn start_positions(
    node: &Node,
    table: &Table,
    consumer: &Arc<StreamConsumer>,
    options: &SourceOptions,
    partitions: &[i32],
) -> std::result::Result<TopicPartitionList, Failure> {
    let topic = &options.client.topic;
    let db = node.store.db();
    let mut list = TopicPartitionList::new();
    let mut by_time = TopicPartitionList::new();
    for &partition in partitions {
        let committed = writer::producer_seq(db, &position_id(table.def.id, partition))?;
        let offset = match (committed, options.startup) {
            (Some(next), _) => Offset::Offset(next as i64),
            (None, Startup::Earliest) => Offset::Beginning,
            (None, Startup::Latest) => Offset::End,
            (None, Startup::Timestamp(millis)) => {
                by_time.add_partition_offset(topic, partition, Offset::Offset(millis))?;
                continue;
            }
        };
        list.add_partition_offset(topic, partition, offset)?;
    }
    if by_time.count() > 0 {
        let client = consumer.clone();
        let found =
            tokio::task::spawn_blocking(move || client.offsets_for_times(by_time, REQUEST_TIMEOUT))
                .await
                .map_err(|e| Failure::Transient(e.to_string()))??;
        for element in found.elements() {
            list.add_partition_offset(topic, element.partition(), element.offset())?;
        }
    }
    Ok(list)
}

/// How long a round waits for more messages after its first: every round
/// is one durable write, so a few milliseconds buy much larger writes.
const ROUND_WAIT: Duration = Duration::from_millis(10);

/// The next messages: waits for one, then gathers more for a short while.
pub(super) async fn next_messages(
    consumer: &StreamConsumer,
) -> std::result::Result<Vec<OwnedMessage>, Failure> {
    let first = consumer.recv().await?.detach();
    gather(consumer, first).await
}

/// The next messages if one comes within `wait`, else none. Only the wait
/// for the first may time out: a message taken from the consumer is never
/// dropped.
pub(super) async fn messages_within(
    consumer: &StreamConsumer,
    wait: Duration,
) -> std::result::Result<Vec<OwnedMessage>, Failure> {
    match tokio::time::timeout(wait, consumer.recv()).await {
        Ok(first) => gather(consumer, first?.detach()).await,
        Err(_) => Ok(Vec::new()),
    }
}

/// `first` and the messages that follow it within the round's wait.
async fn gather(
    consumer: &StreamConsumer,
    first: OwnedMessage,
) -> std::result::Result<Vec<OwnedMessage>, Failure> {
    let deadline = tokio::time::Instant::now() + ROUND_WAIT;
    let mut out = vec![first];
    while out.len() < MAX_BATCH {
        let next = match consumer.recv().now_or_never() {
            Some(ready) => ready,
            None => match tokio::time::timeout_at(deadline, consumer.recv()).await {
                Ok(ready) => ready,
                Err(_) => break,
            },
        };
        out.push(next?.detach());
    }
    Ok(out)
}

/// Turns messages into writes to the table.
pub(super) struct Reader {
    node: Node,
    table: Arc<Table>,
    options: SourceOptions,
    decoder: Decoder,
    /// Decodes message keys of an upsert table into its key columns.
    keys: Option<Decoder>,
    dead_letters: Option<FutureProducer>,
    errors: Arc<Table>,
    marks: Marks,
    /// Reading a cluster's rows topic: where each source partition's rows
    /// were read up to, per rows partition, to drop what a feed sent twice.
    origins: Option<HashMap<(i32, i32), i64>>,
    /// The highest watermark written.
    written_mark: Option<i64>,
}

/// Event time per partition. The source's watermark is the slowest active
/// partition's: partitions are read at different speeds, and one that runs
/// ahead must not make the others' rows late. A partition silent for the
/// idle timeout stops holding the watermark back. A partition is the
/// topic's partition and, read through a rows topic, the source partition
/// its rows came from: each pair keeps its own order, no wider set does.
#[derive(Debug)]
struct Marks {
    by_partition: HashMap<(i32, i32), (Option<i64>, Instant)>,
    /// Whether the idle clock starts again with the first rows: a rows
    /// topic brings each source partition from the node that reads it, and
    /// the nodes start sending at different times.
    wait_for_first: bool,
    /// Whether it starts again too with the first rows after the whole
    /// source was idle: those nodes also resume at different times, after a
    /// pause or a rebalance, and the first to send must not carry the
    /// watermark past what the others are about to send.
    again_after_idle: bool,
}

impl Marks {
    /// Every partition counts from the start, read or not yet.
    fn new(partitions: &[(i32, i32)], wait_for_first: bool) -> Marks {
        let now = Instant::now();
        Marks {
            by_partition: partitions.iter().map(|p| (*p, (None, now))).collect(),
            wait_for_first,
            again_after_idle: wait_for_first,
        }
    }

    fn observe(&mut self, partition: (i32, i32), mark: Option<i64>, idle: Duration) {
        let all_idle = || {
            self.by_partition
                .values()
                .all(|(_, seen)| seen.elapsed() >= idle)
        };
        if self.wait_for_first || (self.again_after_idle && all_idle()) {
            self.wait_for_first = false;
            let now = Instant::now();
            for entry in self.by_partition.values_mut() {
                entry.1 = now;
            }
        }
        let entry = self
            .by_partition
            .entry(partition)
            .or_insert((None, Instant::now()));
        entry.0 = entry.0.max(mark);
        entry.1 = Instant::now();
    }

    fn watermark(&self, idle: Duration) -> Option<i64> {
        let active: Vec<Option<i64>> = self
            .by_partition
            .values()
            .filter(|(_, seen)| seen.elapsed() < idle)
            .map(|(mark, _)| *mark)
            .collect();
        if active.is_empty() {
            return self
                .by_partition
                .values()
                .filter_map(|(mark, _)| *mark)
                .max();
        }
        // A partition that has no event time yet holds everything back (None sorts first).
        active.into_iter().min().flatten()
    }
}

/// Per (rows partition, source partition), the source offset read next.
type Origins = BTreeMap<(i32, i32), i64>;

/// An event-time clock (partition, source partition or -1) and the
/// watermark a read's rows imply for it.
type ClockMark = ((i32, i32), Option<i64>);

/// One partition's messages, read into rows.
struct Read {
    partition: i32,
    /// The offset after the last message taken.
    next: i64,
    rows: Vec<Row>,
    /// The highest watermark the rows imply, per event-time clock.
    marks: Vec<ClockMark>,
    bad: Vec<BadMessage>,
    /// The message that stops the source (`on_error = 'fail'`).
    fatal: Option<String>,
    /// From the stop on, per source partition, the first offset in the
    /// source topic left unread.
    unread: BTreeMap<i32, i64>,
}

impl Reader {
    pub(super) fn new(
        node: &Node,
        table: &Arc<Table>,
        options: SourceOptions,
        partitions: &[i32],
    ) -> std::result::Result<Reader, Failure> {
        let fatal = |e: Error| Failure::Fatal(e.to_string());
        let payload = Arc::new(Schema::new(
            table.nullable_schema.fields()[..options.payload_columns].to_vec(),
        ));
        let decoder = Decoder::new(payload, options.encode, options.csv.clone()).map_err(fatal)?;
        let keys = match table.def.connector.as_ref().is_some_and(|c| c.is_upsert()) {
            true => {
                let key_fields: Vec<Field> = table
                    .def
                    .primary_key
                    .iter()
                    .map(|i| table.nullable_schema.field(*i).clone())
                    .collect();
                Some(
                    Decoder::new(
                        Arc::new(Schema::new(key_fields)),
                        Encode::Json,
                        CsvOptions::default(),
                    )
                    .map_err(fatal)?,
                )
            }
            false => None,
        };
        let dead_letters = match &options.on_error {
            OnError::DeadLetter(_) => Some(
                options
                    .client
                    .config()
                    .set("enable.idempotence", "true")
                    .create()?,
            ),
            _ => None,
        };
        let errors = node
            .catalog
            .table(SOURCE_ERRORS)
            .ok_or_else(|| Failure::Fatal("the source_errors table is missing".into()))?;
        Ok(Reader {
            node: node.clone(),
            table: table.clone(),
            options,
            decoder,
            keys,
            dead_letters,
            errors,
            marks: Marks::new(
                &partitions.iter().map(|p| (*p, -1)).collect::<Vec<_>>(),
                false,
            ),
            origins: None,
            written_mark: None,
        })
    }

    /// A reader of rows partitions `partitions` of a cluster's rows topic,
    /// whose messages carry the place in the source (of partitions
    /// `sources`) they were read from.
    pub(super) fn of_rows(mut self, partitions: &[i32], sources: &[i32]) -> Reader {
        self.origins = Some(HashMap::new());
        let pairs: Vec<(i32, i32)> = partitions
            .iter()
            .flat_map(|q| sources.iter().map(move |p| (*q, *p)))
            .collect();
        self.marks = Marks::new(&pairs, true);
        self
    }

    /// Writes the watermark alone when it rose without new rows: a rows
    /// topic's pairs of partitions that carry nothing stop holding it back
    /// once idle, and a window they held open must close then.
    pub(super) async fn tick(&mut self) -> std::result::Result<(), Failure> {
        let watermark = self.marks.watermark(self.node.idle_timeout);
        if watermark <= self.written_mark {
            return Ok(());
        }
        self.written_mark = watermark;
        let op = self.write_op(Vec::new());
        self.node
            .writer
            .write_from(self.table.target(), op, watermark, Vec::new())
            .await?;
        Ok(())
    }

    /// The producer id under which a partition's read position commits.
    pub(super) fn position_id(&self, partition: i32) -> String {
        let table = self.table.def.id;
        match self.origins {
            Some(_) => super::shuffle::position_id(table, partition),
            None => position_id(table, partition),
        }
    }

    /// Drops the messages already written, by their place in the source:
    /// a feed that restarts sends again what it sent after its last
    /// commit. Also where each (rows partition, source partition) now
    /// reads on, to record with the write.
    fn drop_repeats(
        &mut self,
        messages: Vec<OwnedMessage>,
    ) -> std::result::Result<(Vec<OwnedMessage>, Origins), Failure> {
        let mut moved = BTreeMap::new();
        let Some(origins) = self.origins.as_mut() else {
            return Ok((messages, moved));
        };
        let db = self.node.store.db();
        let table = self.table.def.id;
        let mut kept = Vec::with_capacity(messages.len());
        for message in messages {
            let Some((from, offset)) = super::shuffle::origin(&message) else {
                kept.push(message);
                continue;
            };
            let place = (message.partition(), from);
            let next = match origins.get(&place) {
                Some(next) => *next,
                None => {
                    let id = super::shuffle::origin_id(table, place.0, place.1);
                    writer::producer_seq(db, &id)?.map_or(0, |n| n as i64)
                }
            };
            origins.insert(place, next.max(offset + 1));
            if offset >= next {
                moved.insert(place, offset + 1);
                kept.push(message);
            }
        }
        Ok((kept, moved))
    }

    /// Write the messages, each partition's as one write with its position;
    /// the position reached in each partition.
    pub(super) async fn ingest(
        &mut self,
        messages: Vec<OwnedMessage>,
        progress: &Progress,
    ) -> std::result::Result<Vec<(i32, i64)>, Failure> {
        let mut reached = BTreeMap::new();
        for message in &messages {
            reached.insert(message.partition(), message.offset() + 1);
        }
        let (messages, mut moved) = self.drop_repeats(messages)?;
        let mut by_partition: BTreeMap<i32, Vec<OwnedMessage>> = BTreeMap::new();
        for message in messages {
            by_partition
                .entry(message.partition())
                .or_default()
                .push(message);
        }
        let mut reads = Vec::with_capacity(by_partition.len());
        for (partition, messages) in by_partition {
            reads.push(self.read(partition, &messages).await?);
        }
        let bad: Vec<BadMessage> = reads
            .iter_mut()
            .flat_map(|r| std::mem::take(&mut r.bad))
            .collect();
        Progress::count(&progress.errors, bad.len() as u64);
        // Kept before the rows commit: after a crash a bad message may be listed twice, never lost.
        let now = self.node.clock.now().timestamp_micros();
        errors::record(&self.node.writer, &self.errors, &bad, now).await?;
        let fatal = reads.iter().find_map(|r| r.fatal.clone());
        // One write for the whole round, as SPEC's "a batch read from a
        // source": its rows are judged against the watermark from before it.
        let mut rows = Vec::new();
        let mut next: BTreeMap<i32, i64> = BTreeMap::new();
        for read in reads {
            for (clock, mark) in read.marks {
                self.marks.observe(clock, mark, self.node.idle_timeout);
            }
            next.insert(read.partition, read.next);
            // What a stop left unread is read again after a restart, not
            // taken for a repeat.
            for (from, offset) in read.unread {
                moved.insert((read.partition, from), offset);
            }
            rows.extend(read.rows);
        }
        let table = self.table.def.id;
        let mut producers: Vec<(String, u64)> = moved
            .into_iter()
            .map(|((partition, from), next)| {
                (
                    super::shuffle::origin_id(table, partition, from),
                    next as u64,
                )
            })
            .collect();
        for (partition, next) in &next {
            producers.push((self.position_id(*partition), *next as u64));
        }
        let positions: Vec<(i32, i64)> = next.into_iter().collect();
        let watermark = self.marks.watermark(self.node.idle_timeout);
        self.written_mark = self.written_mark.max(watermark);
        let op = self.write_op(rows);
        let written = self
            .node
            .writer
            .write_from(self.table.target(), op, watermark, producers)
            .await?;
        Progress::count(&progress.messages, written);
        match fatal {
            Some(why) => Err(Failure::Fatal(why)),
            // Repeats dropped whole still move the partition on.
            None if self.origins.is_some() => Ok(reached.into_iter().collect()),
            None => Ok(positions),
        }
    }

    /// Decode one partition's messages; bad ones follow `on_error`.
    async fn read(
        &mut self,
        partition: i32,
        messages: &[OwnedMessage],
    ) -> std::result::Result<Read, Failure> {
        let payloads: Vec<&[u8]> = messages
            .iter()
            .map(|m| m.payload().unwrap_or_default())
            .collect();
        let Decoded {
            rows,
            mut failed,
            values,
        } = self.decode(messages, &payloads)?;
        failed.sort_by_key(|(i, _)| *i);
        let mut bad = Vec::new();
        let mut fatal = None;
        let mut take = messages.len();
        for (index, why) in &failed {
            let message = &messages[*index];
            bad.push(self.bad_message(message, why));
            match &self.options.on_error {
                OnError::Fail => {
                    let (partition, offset) = self.place(message);
                    fatal = Some(format!(
                        "topic \"{}\" partition {partition} offset {offset}: {why}",
                        self.options.client.topic,
                    ));
                    take = *index;
                    break;
                }
                OnError::DeadLetter(topic) => self.dead_letter(topic, message, why).await?,
                OnError::Skip => {}
            }
        }
        for b in &bad {
            tracing::warn!(source = %b.source, topic = %b.topic, partition = b.partition,
                offset = b.offset, error = %b.error, "skipped a message that does not parse");
        }
        let rows: Vec<Row> = rows.into_iter().filter(|r| r.index < take).collect();
        let next = match take {
            0 => messages[0].offset(),
            n => messages[n - 1].offset() + 1,
        };
        let marks = self.marks_of(partition, messages, &rows, &values)?;
        let unread = match self.origins {
            Some(_) => self.first_unread(&messages[take..]),
            None => BTreeMap::new(),
        };
        Ok(Read {
            partition,
            next,
            rows,
            marks,
            bad,
            fatal,
            unread,
        })
    }

    /// The watermark the taken rows imply, per event-time clock: the
    /// partition's, or, for a rows partition, each source partition's in
    /// it, since each brings its own rows in their order.
    fn marks_of(
        &self,
        partition: i32,
        messages: &[OwnedMessage],
        rows: &[Row],
        values: &RecordBatch,
    ) -> std::result::Result<Vec<ClockMark>, Failure> {
        // Value rows are in message order: those before the cut are a prefix.
        let valued: Vec<usize> = rows
            .iter()
            .filter(|r| r.row.is_some())
            .map(|r| r.index)
            .collect();
        let taken = valued.len().min(values.num_rows());
        if self.origins.is_none() {
            let mark = self.table.watermark_of(&[values.slice(0, taken)])?;
            return Ok(vec![((partition, -1), mark)]);
        }
        let froms: Vec<i32> = messages.iter().map(|m| self.place(m).0).collect();
        let mut by_origin: BTreeMap<i32, Vec<u32>> =
            froms.iter().map(|from| (*from, Vec::new())).collect();
        for (n, index) in valued.iter().take(taken).enumerate() {
            by_origin.entry(froms[*index]).or_default().push(n as u32);
        }
        let mut marks = Vec::with_capacity(by_origin.len());
        for (from, indices) in by_origin {
            let mark = match indices.is_empty() || self.table.def.watermark.is_none() {
                true => None,
                false => {
                    let indices = datafusion::arrow::array::UInt32Array::from(indices);
                    let picked = datafusion::arrow::compute::take_record_batch(values, &indices)
                        .map_err(Error::from)?;
                    self.table.watermark_of(&[picked])?
                }
            };
            marks.push(((partition, from), mark));
        }
        Ok(marks)
    }

    /// Per source partition, the first offset among `unread` messages.
    fn first_unread(&self, unread: &[OwnedMessage]) -> BTreeMap<i32, i64> {
        let mut first = BTreeMap::new();
        for message in unread {
            let (from, offset) = self.place(message);
            first
                .entry(from)
                .and_modify(|o: &mut i64| *o = (*o).min(offset))
                .or_insert(offset);
        }
        first
    }

    /// Where a message was in the source's topic.
    fn place(&self, message: &OwnedMessage) -> (i32, i64) {
        self.origins
            .as_ref()
            .and_then(|_| super::shuffle::origin(message))
            .unwrap_or((message.partition(), message.offset()))
    }

    fn bad_message(&self, message: &OwnedMessage, why: &str) -> BadMessage {
        let (partition, offset) = self.place(message);
        BadMessage {
            source: self.table.def.name.clone(),
            topic: self.options.client.topic.clone(),
            partition,
            offset,
            error: why.to_string(),
            payload: message
                .payload()
                .map(|p| String::from_utf8_lossy(p).into_owned()),
        }
    }

    async fn dead_letter(
        &self,
        topic: &str,
        message: &OwnedMessage,
        why: &str,
    ) -> std::result::Result<(), Failure> {
        let Some(producer) = &self.dead_letters else {
            return Ok(());
        };
        let headers = OwnedHeaders::new().insert(Header {
            key: "weir.error",
            value: Some(why.as_bytes()),
        });
        let mut record = FutureRecord::<[u8], [u8]>::to(topic).headers(headers);
        if let Some(key) = message.key() {
            record = record.key(key);
        }
        if let Some(payload) = message.payload() {
            record = record.payload(payload);
        }
        producer
            .send(record, REQUEST_TIMEOUT)
            .await
            .map_err(|(e, _)| {
                Failure::Transient(format!(
                    "dead-letter topic \"{topic}\": {}",
                    super::message(&e)
                ))
            })?;
        Ok(())
    }
}

/// A message read into its change: a row to add (or to set, for a keyed
/// table), or a key to delete; encoded once per batch, not per message.
struct Row {
    /// The message's place in its partition's batch.
    index: usize,
    /// The encoded key, for a keyed table.
    key: Option<Vec<u8>>,
    /// The encoded row; `None` for an upsert tombstone.
    row: Option<Vec<u8>>,
}

/// One partition's messages decoded.
struct Decoded {
    /// In message order.
    rows: Vec<Row>,
    failed: Failed,
    /// The rows with values, as a batch in message order: for the watermark.
    values: RecordBatch,
}

impl Reader {
    /// Rows in message order, and the messages that failed with why.
    fn decode(
        &mut self,
        messages: &[OwnedMessage],
        payloads: &[&[u8]],
    ) -> std::result::Result<Decoded, Failure> {
        let upsert = self.keys.is_some();
        let valued: Vec<usize> = (0..messages.len())
            .filter(|i| messages[*i].payload().is_some())
            .collect();
        let mut failed: Failed = Vec::new();
        if !upsert {
            failed.extend(
                (0..messages.len())
                    .filter(|i| messages[*i].payload().is_none())
                    .map(|i| (i, "the message has no value".to_string())),
            );
        }
        let selected: Vec<&[u8]> = valued.iter().map(|i| payloads[*i]).collect();
        let decoded = self
            .decoder
            .decode(&selected)
            .map_err(|e| Failure::Fatal(e.to_string()))?;
        failed.extend(
            decoded
                .failed
                .iter()
                .map(|(i, why)| (valued[*i], why.clone())),
        );
        let full = self.with_metadata(&decoded.batch, &decoded.rows, &valued, messages)?;
        let (values, nulls) = drop_null_violations(&self.table, full)?;
        let indices: Vec<usize> = decoded.rows.iter().map(|at| valued[*at]).collect();
        let mut kept = Vec::with_capacity(values.num_rows());
        for (n, index) in indices.into_iter().enumerate() {
            match nulls.get(&n) {
                Some(why) => failed.push((index, why.clone())),
                None => kept.push(index),
            }
        }
        let mut rows = self.encode(&values, &kept)?;
        if upsert {
            let (tombstones, bad) = self.tombstones(messages)?;
            failed.extend(bad);
            rows.extend(tombstones);
            rows.sort_by_key(|r| r.index);
        }
        Ok(Decoded {
            rows,
            failed,
            values,
        })
    }

    /// Encode a batch's rows (and keys, for a keyed table) in one go.
    fn encode(
        &self,
        batch: &RecordBatch,
        indices: &[usize],
    ) -> std::result::Result<Vec<Row>, Failure> {
        let codec = &self.table.codec;
        let rows = codec.encode_rows(batch)?;
        let keys = match self.table.def.is_keyed() {
            true => Some(codec.encode_keys(batch)?),
            false => None,
        };
        Ok(indices
            .iter()
            .enumerate()
            .map(|(n, index)| Row {
                index: *index,
                key: keys.as_ref().map(|k| k.row(n).data().to_vec()),
                row: Some(rows.row(n).data().to_vec()),
            })
            .collect())
    }

    /// The keys of an upsert table's tombstones (messages without a value).
    fn tombstones(
        &mut self,
        messages: &[OwnedMessage],
    ) -> std::result::Result<(Vec<Row>, Failed), Failure> {
        let Some(keys) = self.keys.as_mut() else {
            return Ok((Vec::new(), Vec::new()));
        };
        let mut failed = Vec::new();
        let mut with_key = Vec::new();
        for (i, message) in messages.iter().enumerate() {
            match (message.payload(), message.key()) {
                (Some(_), _) => {}
                (None, Some(_)) => with_key.push(i),
                (None, None) => {
                    failed.push((i, "a message without value or key deletes nothing".into()))
                }
            }
        }
        let key_payloads: Vec<&[u8]> = with_key
            .iter()
            .map(|i| messages[*i].key().unwrap_or_default())
            .collect();
        let decoded = keys
            .decode(&key_payloads)
            .map_err(|e| Failure::Fatal(e.to_string()))?;
        failed.extend(
            decoded
                .failed
                .iter()
                .map(|(i, why)| (with_key[*i], format!("key: {why}"))),
        );
        let full = key_only_rows(&self.table, &decoded.batch)?;
        let encoded = self.table.codec.encode_keys(&full)?;
        let rows = decoded
            .rows
            .iter()
            .enumerate()
            .map(|(n, at)| Row {
                index: with_key[*at],
                key: Some(encoded.row(n).data().to_vec()),
                row: None,
            })
            .collect();
        Ok((rows, failed))
    }

    /// The decoded payload columns plus the INCLUDEd metadata columns.
    fn with_metadata(
        &self,
        batch: &RecordBatch,
        rows: &[usize],
        valued: &[usize],
        messages: &[OwnedMessage],
    ) -> std::result::Result<RecordBatch, Failure> {
        let include = self
            .table
            .def
            .connector
            .as_ref()
            .map(|c| c.include.clone())
            .unwrap_or_default();
        let mut columns: Vec<ArrayRef> = batch.columns().to_vec();
        let picked: Vec<&OwnedMessage> = rows.iter().map(|r| &messages[valued[*r]]).collect();
        for item in &include {
            columns.push(metadata_column(item.what, &picked, self.origins.is_some()));
        }
        RecordBatch::try_new(self.table.nullable_schema.clone(), columns)
            .map_err(|e| Failure::Fatal(format!("source rows do not fit the table: {e}")))
    }

    /// The write for a round's rows.
    fn write_op(&self, rows: Vec<Row>) -> WriteOp {
        let def = &self.table.def;
        if def.is_keyed() {
            // A keyed table keeps the last value per key, as an upsert does.
            let rows = rows
                .into_iter()
                .filter_map(|r| Some((r.key?, r.row)))
                .collect();
            return WriteOp::Upsert { rows };
        }
        let rows = rows.into_iter().filter_map(|r| r.row).collect();
        match def.contents_in_log() {
            true => WriteOp::Append { rows },
            false => WriteOp::InsertUnkeyed { rows },
        }
    }
}

/// Rows of the table with only the key columns set.
fn key_only_rows(table: &Table, key: &RecordBatch) -> Result<RecordBatch> {
    let schema = &table.nullable_schema;
    let columns = schema
        .fields()
        .iter()
        .enumerate()
        .map(
            |(i, field)| match table.def.primary_key.iter().position(|k| *k == i) {
                Some(at) => key.column(at).clone(),
                None => new_null_array(field.data_type(), key.num_rows()),
            },
        )
        .collect();
    Ok(RecordBatch::try_new(schema.clone(), columns)?)
}

/// A message's metadata; read through a cluster's rows topic (`relayed`),
/// its partition and offset are those it had in the source.
fn metadata_column(what: Metadata, messages: &[&OwnedMessage], relayed: bool) -> ArrayRef {
    let place = |m: &OwnedMessage| match relayed {
        true => super::shuffle::origin(m).unwrap_or((m.partition(), m.offset())),
        false => (m.partition(), m.offset()),
    };
    match what {
        Metadata::Key => Arc::new(BinaryArray::from_iter(messages.iter().map(|m| m.key()))),
        Metadata::Partition => Arc::new(Int32Array::from_iter_values(
            messages.iter().map(|m| place(m).0),
        )),
        Metadata::Offset => Arc::new(Int64Array::from_iter_values(
            messages.iter().map(|m| place(m).1),
        )),
        Metadata::Timestamp => Arc::new(TimestampMicrosecondArray::from_iter(
            messages
                .iter()
                .map(|m| m.timestamp().to_millis().map(|ms| ms * 1000)),
        )),
    }
}

/// Rows with NULL in a NOT NULL column leave the batch; each is reported by its row number.
fn drop_null_violations(
    table: &Table,
    batch: RecordBatch,
) -> std::result::Result<(RecordBatch, HashMap<usize, String>), Failure> {
    let mut bad = HashMap::new();
    for (i, field) in table.schema.fields().iter().enumerate() {
        if field.is_nullable() && !table.def.primary_key.contains(&i) {
            continue;
        }
        let column = batch.column(i);
        for row in 0..batch.num_rows() {
            if column.is_null(row) {
                bad.entry(row)
                    .or_insert_with(|| format!("column \"{}\" is NOT NULL", field.name()));
            }
        }
    }
    if bad.is_empty() {
        return Ok((batch, bad));
    }
    let keep = BooleanArray::from_iter((0..batch.num_rows()).map(|r| Some(!bad.contains_key(&r))));
    let kept = filter_record_batch(&batch, &keep).map_err(|e| Failure::Fatal(e.to_string()))?;
    Ok((kept, bad))
}
