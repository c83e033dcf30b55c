//! The cluster's topics: their names, their creation by the first node,
//! and reading a small one whole.

use std::time::Instant;

use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::types::RDKafkaErrorCode;

use super::{REQUEST_TIMEOUT, client_config, kafka_error};
use crate::error::{Error, Result};

/// The names a cluster's topics and group take from the cluster's name.
pub struct Topics {
    pub group: String,
    pub partitions: String,
    pub nodes: String,
    pub catalog: String,
}

impl Topics {
    pub fn of(cluster: &str) -> Topics {
        Topics {
            group: format!("weir-{cluster}"),
            partitions: format!("weir-{cluster}-partitions"),
            nodes: format!("weir-{cluster}-nodes"),
            catalog: format!("weir-{cluster}-catalog"),
        }
    }
}

/// Creates whichever of the topics does not exist yet, and waits until the
/// work topic shows its partitions: the first node's number, which later
/// nodes keep whatever they were told. Returns that number.
pub async fn ensure(kafka: &str, topics: &Topics, partitions: u32) -> Result<u32> {
    let compacted =
        |name| NewTopic::new(name, 1, TopicReplication::Fixed(1)).set("cleanup.policy", "compact");
    let work = NewTopic::new(
        &topics.partitions,
        partitions as i32,
        TopicReplication::Fixed(1),
    );
    let wanted = [compacted(&topics.nodes), compacted(&topics.catalog), work];
    create(kafka, &wanted).await?;
    let found = partition_count(kafka, &topics.partitions).await?;
    if found != partitions {
        tracing::info!(
            found,
            asked = partitions,
            "the cluster already has its number of partitions; keeping it"
        );
    }
    Ok(found)
}

/// Creates a split source's rows topic unless it exists: one partition
/// per cluster partition, kept for ever, since a node that gains a
/// partition reads it from where its own log ends.
pub async fn ensure_rows_topic(kafka: &str, topic: &str, partitions: u32) -> Result<()> {
    let rows = NewTopic::new(topic, partitions as i32, TopicReplication::Fixed(1))
        .set("retention.ms", "-1")
        .set("retention.bytes", "-1");
    create(kafka, &[rows]).await?;
    partition_count(kafka, topic).await.map(|_| ())
}

/// Creates the topics of `wanted` that do not exist yet.
async fn create(kafka: &str, wanted: &[NewTopic<'_>]) -> Result<()> {
    let admin: AdminClient<DefaultClientContext> = client_config(kafka)
        .create()
        .map_err(|e| kafka_error("cannot make a Kafka client", e))?;
    let options = AdminOptions::new().operation_timeout(Some(REQUEST_TIMEOUT));
    let results = admin
        .create_topics(wanted, &options)
        .await
        .map_err(|e| kafka_error("cannot reach the cluster's Kafka", e))?;
    for result in results {
        match result {
            Ok(_) | Err((_, RDKafkaErrorCode::TopicAlreadyExists)) => {}
            Err((topic, code)) => {
                return Err(kafka_error(&format!("cannot create topic {topic}"), code));
            }
        }
    }
    Ok(())
}

/// A topic's partitions, once its metadata shows them.
async fn partition_count(kafka: &str, topic: &str) -> Result<u32> {
    let consumer = consumer(kafka)?;
    let topic = topic.to_string();
    blocking(move || {
        let deadline = Instant::now() + REQUEST_TIMEOUT;
        loop {
            let metadata = consumer
                .fetch_metadata(Some(&topic), REQUEST_TIMEOUT)
                .map_err(|e| kafka_error("cannot read the cluster's topics", e))?;
            let count = metadata
                .topics()
                .iter()
                .find(|t| t.name() == topic && t.error().is_none())
                .map_or(0, |t| t.partitions().len() as u32);
            if count > 0 {
                return Ok(count);
            }
            if Instant::now() > deadline {
                return Err(Error::ConnectionFailure(format!(
                    "topic {topic} did not appear on the cluster's Kafka"
                )));
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
    })
    .await
}

/// A consumer outside any group, for metadata and whole reads.
pub fn consumer(kafka: &str) -> Result<BaseConsumer> {
    client_config(kafka)
        .set("enable.auto.commit", "false")
        .set("group.id", "weir-cluster-reader")
        .create()
        .map_err(|e| kafka_error("cannot make a Kafka client", e))
}

/// Runs a blocking Kafka call off the async threads.
pub async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> Result<T> + Send + 'static,
) -> Result<T> {
    tokio::task::spawn_blocking(work)
        .await
        .map_err(|e| Error::Internal(format!("a Kafka call failed: {e}")))?
}
