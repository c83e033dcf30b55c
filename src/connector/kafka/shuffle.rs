//! A source split over a cluster's nodes (`partition_by`).
//!
//! Each node reads its share of the source topic's partitions (partition
//! `p` belongs to the node owning cluster partition `p mod n`) and sends
//! every message on, unchanged, to the cluster's rows topic for the
//! source, into the partition its `partition_by` values hash to. Each node
//! reads the rows topic's partitions it owns into the source's log. So a
//! node decodes and logs only its share, and its log holds every row of
//! the groups it owns. With standbys a node's log keeps more rows
//! partitions than it owns, so that it serves them at once if their owner
//! fails; it feeds only the source partitions of those it owns.
//!
//! The feed commits its source offsets to Kafka after the rows topic
//! acknowledged what it sent; a feed that restarts sends part of it again.
//! Every message it sends names where it was in the source (header
//! `weir.from`), and the reader keeps, with each write, how far it has
//! read each source partition in each rows partition, and drops repeats.
//! The rows topic keeps everything: a node that gains a partition reads it
//! from where its log ends.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use datafusion::arrow::array::ArrayRef;
use datafusion::arrow::datatypes::Schema;
use rdkafka::admin::{AdminClient, AdminOptions};
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::{CommitMode, Consumer, StreamConsumer};
use rdkafka::error::KafkaResult;
use rdkafka::message::{Header, Headers, Message, OwnedHeaders, OwnedMessage};
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::{Offset, TopicPartitionList};
use tokio::sync::watch;

use super::source::{LAG_INTERVAL, Reader, messages_within, next_messages, options_of, record_lag};
use super::{REQUEST_TIMEOUT, SourceOptions, Startup, partitions};
use crate::catalog::Table;
use crate::connector::format::{Decoder, Encode};
use crate::connector::{Failure, Handle, Status};
use crate::dataflow::node::Node;
use crate::dataflow::node::Share;
use crate::dataflow::partition::Owned;
use crate::log::writer;
use crate::state::{CF_STATE, cf, keys};

/// The header naming a relayed message's source partition and offset.
const FROM: &str = "weir.from";

/// How often a reader with nothing to read checks whether idle partitions
/// let the watermark rise.
const TICK: Duration = Duration::from_secs(1);

/// How long an assignment must hold before the feed and the reader move:
/// a rebalance revokes and assigns in quick steps.
const SETTLE: Duration = Duration::from_millis(500);

/// Where a round's messages end in each partition: one entry a partition,
/// since each entry added is a search of the list by name.
fn reached(
    topic: &str,
    messages: &[OwnedMessage],
) -> std::result::Result<TopicPartitionList, Failure> {
    let mut next: HashMap<i32, i64> = HashMap::new();
    for message in messages {
        let at = next.entry(message.partition()).or_default();
        *at = (*at).max(message.offset() + 1);
    }
    let mut list = TopicPartitionList::with_capacity(next.len());
    for (partition, offset) in next {
        list.add_partition_offset(topic, partition, Offset::Offset(offset))?;
    }
    Ok(list)
}

/// The consumer group whose offsets say how far this cluster's feeds
/// have relayed split source `table`, on the source's Kafka.
fn feed_group(cluster: &str, table: u64) -> String {
    format!("weir-{cluster}-feed-{table}")
}

/// Deletes what a dropped split source left on Kafka: its rows topic on
/// the cluster's Kafka and its feed group on the source's. Each node tries
/// once it has stopped its own feed; what a later node's feed still uses
/// (a group with members) stays for that node to delete.
pub async fn forget(table: &Table, share: &Share) {
    let id = table.def.id;
    let options = AdminOptions::new().operation_timeout(Some(REQUEST_TIMEOUT));
    let rows = rows_topic(&share.cluster, id);
    let deleted = match admin(crate::cluster::client_config(&share.kafka)) {
        Ok(admin) => admin.delete_topics(&[&rows], &options).await,
        Err(e) => Err(e),
    };
    report(deleted, "rows topic", &rows);
    let Ok(source) = options_of(table) else {
        return;
    };
    let group = feed_group(&share.cluster, id);
    let deleted = match admin(source.client.config()) {
        Ok(admin) => admin.delete_groups(&[&group], &options).await,
        Err(e) => Err(e),
    };
    report(deleted, "feed group", &group);
}

fn admin(config: rdkafka::ClientConfig) -> KafkaResult<AdminClient<DefaultClientContext>> {
    config.create()
}

/// Gone already, or still used by a node that has not dropped the source
/// yet: both are expected.
fn report(
    deleted: KafkaResult<Vec<Result<String, (String, RDKafkaErrorCode)>>>,
    what: &str,
    name: &str,
) {
    let results = match deleted {
        Ok(results) => results,
        Err(e) => {
            tracing::warn!(%name, cause = %e, "cannot delete a dropped split source's {what}");
            return;
        }
    };
    for (name, code) in results.into_iter().filter_map(|r| r.err()) {
        match code {
            RDKafkaErrorCode::UnknownTopicOrPartition
            | RDKafkaErrorCode::GroupIdNotFound
            | RDKafkaErrorCode::NonEmptyGroup => {
                tracing::debug!(%name, ?code, "left for another node: a dropped split source's {what}")
            }
            code => tracing::warn!(%name, ?code, "cannot delete a dropped split source's {what}"),
        }
    }
}

/// The rows topic of split source `table`.
pub fn rows_topic(cluster: &str, table: u64) -> String {
    format!("weir-{cluster}-rows-{table}")
}

/// What the producer ids of split source `table`'s read positions start
/// with.
pub fn positions_prefix(table: u64) -> String {
    format!("rows:{table}:")
}

/// The producer id of a rows partition's read position.
pub(super) fn position_id(table: u64, partition: i32) -> String {
    format!("{}{partition}", positions_prefix(table))
}

/// The producer id of how far rows partition `partition` has brought
/// source partition `from`.
pub(super) fn origin_id(table: u64, partition: i32, from: i32) -> String {
    format!("{}{partition}:{from}", positions_prefix(table))
}

/// Where a relayed message was in the source topic.
pub(super) fn origin(message: &OwnedMessage) -> Option<(i32, i64)> {
    let headers = message.headers()?;
    let header = headers.iter().find(|h| h.key == FROM)?;
    let bytes = header.value?;
    let partition = i32::from_be_bytes(bytes.get(..4)?.try_into().ok()?);
    let offset = i64::from_be_bytes(bytes.get(4..12)?.try_into().ok()?);
    Some((partition, offset))
}

/// Feed split source `table` on this node, until stopped, for the
/// partitions its log is kept for: as stored beside it, else those the
/// node owns once they settle. When the cluster gives the node other
/// partitions, the session stops it, clears its log, stores the new
/// partitions and starts it again, and builds the views over it again.
pub async fn split_source(
    node: &Node,
    table: &Arc<Table>,
    handle: Handle,
) -> std::result::Result<(), Failure> {
    let share = joined(node).await;
    let options = options_of(table)?;
    let topic = rows_topic(&share.cluster, table.def.id);
    crate::cluster::ensure_rows_topic(&share.kafka, &topic, share.count)
        .await
        .map_err(|e| Failure::Transient(e.to_string()))?;
    let now = kept_for(node, table, &share).await?;
    share.set_ready(table.def.id, None);
    let relay = Relay {
        node,
        table,
        options: &options,
        share: &share,
        topic: &topic,
        owned: &now,
    };
    tokio::try_join!(relay.feed(), relay.read(&handle)).map(|_| ())
}

/// The cluster's share, once this node has joined it.
async fn joined(node: &Node) -> Arc<Share> {
    let mut slot = node.share.clone();
    loop {
        if let Some(share) = slot.borrow_and_update().clone() {
            return share;
        }
        if slot.changed().await.is_err() {
            std::future::pending::<()>().await;
        }
    }
}

/// The partitions `table`'s log is kept for on this node.
async fn kept_for(
    node: &Node,
    table: &Table,
    share: &Share,
) -> std::result::Result<Vec<u32>, Failure> {
    let db = node.store.db();
    let key = keys::owned_partitions_key(table.def.id);
    let stored = db
        .get_cf(cf(db, CF_STATE), &key)
        .map_err(crate::error::Error::from)?;
    if let Some(owned) = stored.and_then(|bytes| Owned::decode(&bytes)) {
        return Ok(owned.partitions);
    }
    let owned = Owned {
        count: share.count,
        partitions: (share.keep)(&settled(&mut share.owned.clone()).await),
    };
    db.put_cf(cf(db, CF_STATE), &key, owned.encode())
        .map_err(crate::error::Error::from)?;
    Ok(owned.partitions)
}

/// This node's partitions once they stop changing for a moment.
async fn settled(owned: &mut watch::Receiver<Vec<i32>>) -> Vec<u32> {
    while let Ok(Ok(())) = tokio::time::timeout(SETTLE, owned.changed()).await {}
    let mut now: Vec<u32> = owned
        .borrow_and_update()
        .iter()
        .map(|p| *p as u32)
        .collect();
    now.sort_unstable();
    now
}

/// The feed of this node's share of the source, and the reading of the
/// rows partitions its log keeps (`owned`: its own, and with standbys more).
struct Relay<'a> {
    node: &'a Node,
    table: &'a Arc<Table>,
    options: &'a SourceOptions,
    share: &'a Share,
    topic: &'a str,
    owned: &'a [u32],
}

impl Relay<'_> {
    /// Sends the share of the source this node owns on to the rows topic,
    /// following what it owns: its log may keep more partitions (standbys)
    /// than it feeds, and with standbys a node that gains partitions keeps
    /// its log and starts feeding them.
    async fn feed(&self) -> std::result::Result<(), Failure> {
        let mut owned = self.share.owned.clone();
        loop {
            let mine = settled(&mut owned).await;
            tokio::select! {
                fed = self.feed_for(&mine) => return fed,
                changed = owned.changed() => {
                    // The node left its cluster: it is stopping.
                    if changed.is_err() {
                        return std::future::pending().await;
                    }
                }
            }
        }
    }

    /// Feeds the source partitions of cluster partitions `owned`. A feed
    /// stopped by a rebalance may have relayed messages it did not commit:
    /// the next feeder sends them again and readers drop the repeats.
    async fn feed_for(&self, owned: &[u32]) -> std::result::Result<(), Failure> {
        let source = &self.options.client.topic;
        let group = feed_group(&self.share.cluster, self.table.def.id);
        let consumer: StreamConsumer = self
            .options
            .client
            .config()
            .set("group.id", group)
            .set("enable.auto.commit", "false")
            .set("isolation.level", "read_committed")
            .create()?;
        let consumer = Arc::new(consumer);
        let mine: Vec<i32> = partitions(&consumer, source)
            .await?
            .into_iter()
            .filter(|p| owned.contains(&(*p as u32 % self.share.count)))
            .collect();
        if mine.is_empty() {
            return std::future::pending().await;
        }
        consumer.assign(&self.feed_start(&consumer, &mine).await?)?;
        let producer: FutureProducer = crate::cluster::client_config(&self.share.kafka)
            .set("enable.idempotence", "true")
            .set("linger.ms", "5")
            .create()?;
        let mut router = Router::new(self.table, self.options, self.share.count)?;
        loop {
            let messages = next_messages(&consumer).await?;
            let targets = router.route(&messages)?;
            let sends = messages
                .iter()
                .zip(&targets)
                .map(|(m, q)| producer.send(relayed(self.topic, m, *q), REQUEST_TIMEOUT));
            for sent in futures::future::join_all(sends).await {
                sent.map_err(|(e, _)| {
                    Failure::Transient(format!("rows topic: {}", super::message(&e)))
                })?;
            }
            consumer.commit(&reached(source, &messages)?, CommitMode::Async)?;
        }
    }

    /// Where the feed resumes: after what it committed, else per
    /// `scan.startup.mode`.
    async fn feed_start(
        &self,
        consumer: &Arc<StreamConsumer>,
        mine: &[i32],
    ) -> std::result::Result<TopicPartitionList, Failure> {
        let source = self.options.client.topic.clone();
        let mut wanted = TopicPartitionList::new();
        for p in mine {
            wanted.add_partition(&source, *p);
        }
        let client = consumer.clone();
        let committed =
            tokio::task::spawn_blocking(move || client.committed_offsets(wanted, REQUEST_TIMEOUT))
                .await
                .map_err(|e| Failure::Transient(e.to_string()))??;
        let mut list = TopicPartitionList::new();
        let mut by_time = TopicPartitionList::new();
        for element in committed.elements() {
            let offset = match (element.offset(), self.options.startup) {
                (Offset::Offset(n), _) => Offset::Offset(n),
                (_, Startup::Earliest) => Offset::Beginning,
                (_, Startup::Latest) => Offset::End,
                (_, Startup::Timestamp(millis)) => {
                    by_time.add_partition_offset(
                        &source,
                        element.partition(),
                        Offset::Offset(millis),
                    )?;
                    continue;
                }
            };
            list.add_partition_offset(&source, element.partition(), offset)?;
        }
        if by_time.count() > 0 {
            let client = consumer.clone();
            let found = tokio::task::spawn_blocking(move || {
                client.offsets_for_times(by_time, REQUEST_TIMEOUT)
            })
            .await
            .map_err(|e| Failure::Transient(e.to_string()))??;
            for element in found.elements() {
                list.add_partition_offset(&source, element.partition(), element.offset())?;
            }
        }
        Ok(list)
    }

    /// Reads this node's rows partitions into the source's log.
    async fn read(&self, handle: &Handle) -> std::result::Result<(), Failure> {
        let table = self.table.def.id;
        let mine: Vec<i32> = self.owned.iter().map(|p| *p as i32).collect();
        if mine.is_empty() {
            self.share.set_ready(table, Some(self.owned));
            return std::future::pending().await;
        }
        let group = format!("weir-{}-read-{table}", self.share.cluster);
        let consumer: StreamConsumer = crate::cluster::client_config(&self.share.kafka)
            .set("group.id", group)
            .set("enable.auto.commit", "false")
            .create()?;
        let consumer = Arc::new(consumer);
        let sources = self.source_partitions().await?;
        let mut reader = Reader::new(self.node, self.table, self.options.clone(), &mine)?
            .of_rows(&mine, &sources);
        let mut list = TopicPartitionList::new();
        let mut reached = HashMap::new();
        let db = self.node.store.db();
        for q in &mine {
            let next = writer::producer_seq(db, &reader.position_id(*q))?;
            reached.insert(*q, next.map_or(0, |n| n as i64));
            let offset = next.map_or(Offset::Beginning, |n| Offset::Offset(n as i64));
            list.add_partition_offset(self.topic, *q, offset)?;
        }
        let ends = self.ends(&consumer, &mine).await?;
        consumer.assign(&list)?;
        handle.progress.set(Status::Running);
        let mut asked = None;
        loop {
            if ends.iter().all(|(q, end)| reached[q] >= *end) {
                self.share.set_ready(table, Some(self.owned));
            }
            let messages = messages_within(&consumer, TICK).await?;
            if messages.is_empty() {
                reader.tick().await?;
                continue;
            }
            reached.extend(reader.ingest(messages, &handle.progress).await?);
            if asked.is_none_or(|at: std::time::Instant| at.elapsed() >= LAG_INTERVAL) {
                asked = Some(std::time::Instant::now());
                let positions = reached.iter().map(|(q, n)| (*q, *n)).collect();
                record_lag(
                    &consumer,
                    self.topic.to_string(),
                    &positions,
                    &handle.progress,
                )
                .await;
            }
        }
    }

    /// The source topic's partitions. The client that asks goes right
    /// after: each client's threads poll for as long as it lives.
    async fn source_partitions(&self) -> std::result::Result<Vec<i32>, Failure> {
        let client: Arc<rdkafka::consumer::BaseConsumer> =
            Arc::new(self.options.client.config().create()?);
        partitions(&client, &self.options.client.topic).await
    }

    /// Where each of `partitions` of the rows topic ends now.
    async fn ends(
        &self,
        consumer: &Arc<StreamConsumer>,
        partitions: &[i32],
    ) -> std::result::Result<Vec<(i32, i64)>, Failure> {
        let client = consumer.clone();
        let topic = self.topic.to_string();
        let wanted = partitions.to_vec();
        tokio::task::spawn_blocking(move || {
            wanted
                .into_iter()
                .map(|q| Ok((q, client.fetch_watermarks(&topic, q, REQUEST_TIMEOUT)?.1)))
                .collect::<std::result::Result<Vec<_>, rdkafka::error::KafkaError>>()
        })
        .await
        .map_err(|e| Failure::Transient(e.to_string()))?
        .map_err(Failure::from)
    }
}

/// `message` as sent on to rows partition `partition`: its key, value,
/// time and headers, and where it was read.
fn relayed<'a>(
    topic: &'a str,
    message: &'a OwnedMessage,
    partition: i32,
) -> FutureRecord<'a, [u8], [u8]> {
    let mut from = message.partition().to_be_bytes().to_vec();
    from.extend_from_slice(&message.offset().to_be_bytes());
    let mut headers = OwnedHeaders::new();
    if let Some(theirs) = message.headers() {
        for header in theirs.iter().filter(|h| h.key != FROM) {
            headers = headers.insert(header);
        }
    }
    headers = headers.insert(Header {
        key: FROM,
        value: Some(&from),
    });
    let mut record = FutureRecord::to(topic)
        .partition(partition)
        .headers(headers);
    if let Some(key) = message.key() {
        record = record.key(key);
    }
    if let Some(payload) = message.payload() {
        record = record.payload(payload);
    }
    if let Some(millis) = message.timestamp().to_millis() {
        record = record.timestamp(millis);
    }
    record
}

/// Picks each message's rows partition from its `partition_by` values.
struct Router {
    decoder: Decoder,
    /// The `partition_by` columns among what the decoder reads.
    by: Vec<usize>,
    count: u32,
}

impl Router {
    fn new(
        table: &Table,
        options: &SourceOptions,
        count: u32,
    ) -> std::result::Result<Router, Failure> {
        let fields = &table.nullable_schema.fields()[..options.payload_columns];
        // JSON is read by name: the key's fields are enough. CSV is read
        // by place, every field.
        let (schema, by) = match options.encode {
            Encode::Json => (
                options
                    .partition_by
                    .iter()
                    .map(|i| fields[*i].clone())
                    .collect(),
                (0..options.partition_by.len()).collect(),
            ),
            Encode::Csv => (fields.to_vec(), options.partition_by.clone()),
        };
        let decoder = Decoder::new(
            Arc::new(Schema::new(schema)),
            options.encode,
            options.csv.clone(),
        )
        .map_err(|e| Failure::Fatal(e.to_string()))?;
        Ok(Router { decoder, by, count })
    }

    /// Each message's rows partition. One that does not decode goes by its
    /// source partition: the reader there reports it as the source's
    /// `on_error` says.
    fn route(&mut self, messages: &[OwnedMessage]) -> std::result::Result<Vec<i32>, Failure> {
        let mut targets: Vec<i32> = messages
            .iter()
            .map(|m| (m.partition() as u32 % self.count) as i32)
            .collect();
        let valued: Vec<usize> = (0..messages.len())
            .filter(|i| messages[*i].payload().is_some())
            .collect();
        let payloads: Vec<&[u8]> = valued
            .iter()
            .map(|i| messages[*i].payload().unwrap_or_default())
            .collect();
        let decoded = self
            .decoder
            .decode(&payloads)
            .map_err(|e| Failure::Fatal(e.to_string()))?;
        let columns: Vec<ArrayRef> = self
            .by
            .iter()
            .map(|c| decoded.batch.column(*c).clone())
            .collect();
        let partitions = crate::dataflow::partition::partitions_of(&columns, self.count)?;
        for (row, at) in decoded.rows.iter().enumerate() {
            targets[valued[*at]] = partitions[row] as i32;
        }
        Ok(targets)
    }
}
