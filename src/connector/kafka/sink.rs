//! The Kafka sink task: a relation's changes into a topic, each once.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use datafusion::arrow::array::{AsArray, RecordBatch};
use datafusion::arrow::compute::concat_batches;
use datafusion::arrow::datatypes::{Int32Type, Int64Type, Schema, SchemaRef};
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::{Header, Headers, Message, OwnedHeaders};
use rdkafka::producer::{FutureProducer, FutureRecord, Producer};
use rdkafka::{Offset, TopicPartitionList};

use super::{REQUEST_TIMEOUT, SinkOptions, partitions};
use parking_lot::Mutex;

use crate::catalog::{SinkDef, Table};
use crate::connector::format::Encoder;
use crate::connector::{Failure, Handle, Progress, Status};
use crate::dataflow::node::Node;
use crate::dataflow::subscribe::{Options, Pace, Subscription};
use crate::error::{Error, Result};
use crate::state::{CF_STATE, cf, keys};

/// The last message of each partition: its epoch and place in that epoch.
type Tails = HashMap<i32, (u64, u64)>;

/// Write the relation's changes to the topic until stopped or failed.
/// The change stream a new sink starts from: the relation as CREATE SINK
/// found it, then every change after. Opened by the statement itself, so
/// that changes committed while the task connects are not folded into it.
pub fn open(node: &Node, table: &Arc<Table>, resume: Option<u64>) -> Result<Subscription> {
    Subscription::open(
        node,
        table.clone(),
        Options {
            snapshot: resume.is_none(),
            progress: true,
            as_of: resume,
            pace: Pace::Changes,
        },
    )
}

/// Write the relation's changes to the topic until stopped or failed;
/// `first` holds the stream CREATE SINK opened, until an attempt takes it.
pub async fn sink(
    node: &Node,
    def: &SinkDef,
    first: &Mutex<Option<Subscription>>,
    handle: Handle,
) -> std::result::Result<(), Failure> {
    let fatal = |e: Error| Failure::Fatal(e.to_string());
    let table = node
        .catalog
        .by_id(def.from)
        .map(|o| o.table().clone())
        .ok_or_else(|| Failure::Fatal("the relation it reads was dropped".into()))?;
    let options = SinkOptions::parse(&def.connector, &table).map_err(fatal)?;
    let mut config = options.client.config();
    config
        .set("enable.idempotence", "true")
        .set("acks", "all")
        .set("linger.ms", "5");
    if options.transactional {
        config.set("transactional.id", format!("weir-sink-{}", def.id));
    }
    let producer: FutureProducer = config.create()?;
    if options.transactional {
        // Fences an older instance of this sink and aborts what it left open.
        let client = producer.clone();
        tokio::task::spawn_blocking(move || client.init_transactions(REQUEST_TIMEOUT))
            .await
            .map_err(|e| Failure::Transient(e.to_string()))??;
    }
    let reader: BaseConsumer = options
        .client
        .config()
        .set("group.id", format!("weir-sink-{}", def.id))
        .set("enable.auto.commit", "false")
        .set("isolation.level", "read_committed")
        .create()?;
    let reader = Arc::new(reader);
    let partitions = partitions(&reader, &options.client.topic).await?;
    let tails = tails(&reader, &options.client.topic, &partitions).await?;
    let db = node.store.db();
    let resume = crate::state::read_u64(db, &keys::sink_epoch_key(def.id))?;
    let opened = match resume {
        None => first.lock().take(),
        Some(_) => None,
    };
    let mut subscription = match opened {
        Some(subscription) => subscription,
        None => open(node, &table, resume).map_err(fatal)?,
    };
    let encoder = Encoder::new(
        table.nullable_schema.clone(),
        options.format,
        options.key.clone(),
        options.force_append_only,
    )
    .map_err(fatal)?;
    let mut writer = SinkWriter {
        node: node.clone(),
        id: def.id,
        topic: options.client.topic.clone(),
        producer,
        encoder,
        partitions: partitions.len() as i32,
        tails,
        transactional: options.transactional,
    };
    handle.progress.set(Status::Running);
    let mut pending = Epochs::default();
    loop {
        let batch = subscription
            .fetch(node, 65_536, None)
            .await
            .map_err(|e| match e {
                Error::UndefinedTable(_) | Error::PrerequisiteState(_) => {
                    Failure::Fatal(e.to_string())
                }
                other => Failure::from(other),
            })?;
        pending.add(&batch)?;
        let complete = match subscription.caught_up() {
            true => pending.take_all(),
            false => pending.take_finished(),
        };
        for (epoch, changes) in complete {
            let written = writer.write_epoch(epoch, changes).await?;
            Progress::count(&handle.progress.messages, written);
        }
    }
}

/// Changes received but not yet written, by epoch.
#[derive(Default)]
struct Epochs {
    by_epoch: BTreeMap<u64, Vec<RecordBatch>>,
}

impl Epochs {
    /// Add a fetched batch (`_epoch`, `_diff`, columns...); progress rows mark an epoch with no changes.
    fn add(&mut self, batch: &RecordBatch) -> Result<()> {
        if batch.num_rows() == 0 {
            return Ok(());
        }
        let epochs = batch.column(0).as_primitive::<Int64Type>();
        let mut start = 0;
        for row in 1..=batch.num_rows() {
            if row == batch.num_rows() || epochs.value(row) != epochs.value(start) {
                let epoch = epochs.value(start) as u64;
                let slice = batch.slice(start, row - start);
                let changes = slice.column(1).len() - slice.column(1).null_count();
                let entry = self.by_epoch.entry(epoch).or_default();
                if changes > 0 {
                    entry.push(slice);
                }
                start = row;
            }
        }
        Ok(())
    }

    /// Every epoch but the last, which may continue in the next fetch.
    fn take_finished(&mut self) -> Vec<(u64, Vec<RecordBatch>)> {
        let Some(last) = self.by_epoch.keys().next_back().copied() else {
            return Vec::new();
        };
        let rest = self.by_epoch.split_off(&last);
        std::mem::replace(&mut self.by_epoch, rest)
            .into_iter()
            .collect()
    }

    fn take_all(&mut self) -> Vec<(u64, Vec<RecordBatch>)> {
        std::mem::take(&mut self.by_epoch).into_iter().collect()
    }
}

struct SinkWriter {
    node: Node,
    id: u64,
    topic: String,
    producer: FutureProducer,
    encoder: Encoder,
    partitions: i32,
    /// What each partition already holds from before a restart.
    tails: Tails,
    transactional: bool,
}

impl SinkWriter {
    /// Write one epoch's changes and record it as done; returns messages written.
    async fn write_epoch(
        &mut self,
        epoch: u64,
        changes: Vec<RecordBatch>,
    ) -> std::result::Result<u64, Failure> {
        let fatal = |e: Error| Failure::Fatal(e.to_string());
        let mut written = 0;
        if !changes.is_empty() {
            let (rows, diffs) = split_changes(&changes).map_err(fatal)?;
            let now_ms = self.node.clock.now().timestamp_millis();
            let messages = self.encoder.encode(&rows, &diffs, now_ms).map_err(fatal)?;
            if self.transactional {
                self.producer.begin_transaction()?;
            }
            let mut seqs: HashMap<i32, u64> = HashMap::new();
            let mut deliveries = Vec::with_capacity(messages.len());
            for (n, message) in messages.iter().enumerate() {
                let partition = match &message.key {
                    Some(key) => partition_of(key, self.partitions),
                    None => ((epoch as usize + n) % self.partitions as usize) as i32,
                };
                let seq = seqs.entry(partition).or_insert(0);
                let place = *seq;
                *seq += 1;
                if self.already_written(partition, epoch, place) {
                    continue;
                }
                deliveries.push(self.send(message, partition, epoch, place)?);
            }
            for delivery in deliveries {
                match delivery.await {
                    Ok(Ok(_)) => written += 1,
                    Ok(Err((e, _))) => return Err(Failure::from(e)),
                    Err(_) => return Err(Failure::Transient("Kafka delivery canceled".into())),
                }
            }
            if self.transactional {
                let client = self.producer.clone();
                tokio::task::spawn_blocking(move || client.commit_transaction(REQUEST_TIMEOUT))
                    .await
                    .map_err(|e| Failure::Transient(e.to_string()))??;
            }
        }
        let db = self.node.store.db();
        db.put_cf(
            cf(db, CF_STATE),
            keys::sink_epoch_key(self.id),
            epoch.to_be_bytes(),
        )
        .map_err(|e| Failure::Transient(e.to_string()))?;
        Ok(written)
    }

    fn already_written(&self, partition: i32, epoch: u64, place: u64) -> bool {
        match self.tails.get(&partition) {
            Some((last_epoch, last_place)) => {
                epoch < *last_epoch || (epoch == *last_epoch && place <= *last_place)
            }
            None => false,
        }
    }

    fn send(
        &self,
        message: &crate::connector::format::Message,
        partition: i32,
        epoch: u64,
        place: u64,
    ) -> std::result::Result<rdkafka::producer::DeliveryFuture, Failure> {
        let epoch_text = epoch.to_string();
        let place_text = place.to_string();
        let headers = OwnedHeaders::new()
            .insert(Header {
                key: "weir.epoch",
                value: Some(epoch_text.as_bytes()),
            })
            .insert(Header {
                key: "weir.seq",
                value: Some(place_text.as_bytes()),
            });
        let mut record = FutureRecord::<[u8], [u8]>::to(&self.topic)
            .partition(partition)
            .headers(headers);
        if let Some(key) = &message.key {
            record = record.key(key.as_slice());
        }
        if let Some(value) = &message.value {
            record = record.payload(value.as_slice());
        }
        self.producer
            .send_result(record)
            .map_err(|(e, _)| Failure::from(e))
    }
}

/// The relation's columns and the weights, from fetched change rows.
fn split_changes(changes: &[RecordBatch]) -> Result<(RecordBatch, Vec<i64>)> {
    let schema = changes[0].schema();
    let all = concat_batches(&schema, changes)?;
    let diffs: Vec<i64> = all
        .column(1)
        .as_primitive::<Int32Type>()
        .iter()
        .map(|d| i64::from(d.unwrap_or(0)))
        .collect();
    let fields: Vec<_> = schema.fields()[2..].to_vec();
    let rows = RecordBatch::try_new(
        SchemaRef::new(Schema::new(fields)),
        all.columns()[2..].to_vec(),
    )?;
    Ok((rows, diffs))
}

/// The partition Kafka's default partitioner picks for a key (murmur2), so
/// that weir's output lands where a Java producer's would.
pub fn partition_of(key: &[u8], partitions: i32) -> i32 {
    ((murmur2(key) & 0x7fff_ffff) as i32) % partitions.max(1)
}

fn murmur2(data: &[u8]) -> u32 {
    const M: u32 = 0x5bd1_e995;
    let mut h: u32 = 0x9747_b28c ^ data.len() as u32;
    let chunks = data.chunks_exact(4);
    let tail = chunks.remainder();
    for chunk in chunks {
        let mut k = u32::from_le_bytes([chunk[0], chunk[1], chunk[2], chunk[3]]);
        k = k.wrapping_mul(M);
        k ^= k >> 24;
        k = k.wrapping_mul(M);
        h = h.wrapping_mul(M);
        h ^= k;
    }
    if tail.len() >= 3 {
        h ^= u32::from(tail[2]) << 16;
    }
    if tail.len() >= 2 {
        h ^= u32::from(tail[1]) << 8;
    }
    if !tail.is_empty() {
        h ^= u32::from(tail[0]);
        h = h.wrapping_mul(M);
    }
    h ^= h >> 13;
    h = h.wrapping_mul(M);
    h ^= h >> 15;
    h
}

/// The epoch and place of each partition's last message, read committed.
async fn tails(
    reader: &Arc<BaseConsumer>,
    topic: &str,
    partitions: &[i32],
) -> std::result::Result<Tails, Failure> {
    let reader = reader.clone();
    let topic = topic.to_string();
    let partitions = partitions.to_vec();
    tokio::task::spawn_blocking(move || {
        let mut out = Tails::new();
        for partition in partitions {
            if let Some(tail) = tail(&reader, &topic, partition)? {
                out.insert(partition, tail);
            }
        }
        Ok(out)
    })
    .await
    .map_err(|e| Failure::Transient(e.to_string()))?
}

fn tail(
    reader: &BaseConsumer,
    topic: &str,
    partition: i32,
) -> std::result::Result<Option<(u64, u64)>, Failure> {
    let (low, high) = reader.fetch_watermarks(topic, partition, REQUEST_TIMEOUT)?;
    if high <= low {
        return Ok(None);
    }
    let mut list = TopicPartitionList::new();
    list.add_partition_offset(topic, partition, Offset::Offset(high - 1))?;
    reader.assign(&list)?;
    let deadline = std::time::Instant::now() + REQUEST_TIMEOUT;
    while std::time::Instant::now() < deadline {
        let Some(message) = reader.poll(Duration::from_millis(200)) else {
            continue;
        };
        let message = message?;
        return Ok(stamp_of(&message));
    }
    Err(Failure::Transient(format!(
        "could not read the last message of topic \"{topic}\" partition {partition}"
    )))
}

/// The `weir.epoch` and `weir.seq` headers of a message weir wrote.
fn stamp_of<M: Message>(message: &M) -> Option<(u64, u64)> {
    let headers = message.headers()?;
    let mut epoch = None;
    let mut place = None;
    for header in headers.iter() {
        let value = header
            .value
            .and_then(|v| std::str::from_utf8(v).ok())
            .and_then(|v| v.parse::<u64>().ok());
        match header.key {
            "weir.epoch" => epoch = value,
            "weir.seq" => place = value,
            _ => {}
        }
    }
    Some((epoch?, place?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_land_where_kafkas_default_partitioner_puts_them() {
        // Values from Kafka's own murmur2 test vectors.
        assert_eq!(murmur2(b"21") as i32, -973932308);
        assert_eq!(murmur2(b"foobar") as i32, -790332482);
        assert_eq!(murmur2(b"a-little-bit-long-string") as i32, -985981536);
        assert_eq!(murmur2(b"a-little-bit-longer-string") as i32, -1486304829);
        assert_eq!(
            murmur2(b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8") as i32,
            -58897971
        );
        assert_eq!(murmur2(b"abc") as i32, 479470107);
        assert!((0..4).contains(&partition_of(b"abc", 4)));
    }
}
