//! Writing to the cluster's topics, and following its catalog log.

use std::time::Duration;

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::{Message, Offset, TopicPartitionList};
use tokio::sync::mpsc;

use super::topics::{blocking, consumer};
use super::{REQUEST_TIMEOUT, client_config, kafka_error};
use crate::error::Result;

/// A statement of the catalog log, at its offset.
#[derive(Debug)]
pub struct Entry {
    pub offset: i64,
    pub key: String,
    pub value: Vec<u8>,
}

/// The catalog log's topic: appended to, followed, and asked for its end.
pub struct CatalogLog {
    producer: FutureProducer,
    reader: std::sync::Arc<BaseConsumer>,
    kafka: String,
    topic: String,
}

impl CatalogLog {
    pub fn open(kafka: &str, topic: &str) -> Result<CatalogLog> {
        let producer = client_config(kafka)
            // Statements must land once and in the order they were sent.
            .set("enable.idempotence", "true")
            .set("message.timeout.ms", "10000")
            .create()
            .map_err(|e| kafka_error("cannot make a Kafka producer", e))?;
        Ok(CatalogLog {
            producer,
            reader: std::sync::Arc::new(consumer(kafka)?),
            kafka: kafka.to_string(),
            topic: topic.to_string(),
        })
    }

    /// Appends a statement; returns once Kafka holds it.
    pub async fn append(&self, key: &str, value: &[u8]) -> Result<()> {
        let record = FutureRecord::to(&self.topic).key(key).payload(value);
        self.producer
            .send(record, REQUEST_TIMEOUT)
            .await
            .map_err(|(e, _)| kafka_error(&format!("cannot write to {}", self.topic), e))?;
        Ok(())
    }

    /// Reads the log from `offset` on, as statements arrive.
    pub fn follow(&self, offset: i64) -> Result<Follower> {
        Follower::start(&self.kafka, &self.topic, offset)
    }

    /// The offset after the catalog log's last statement.
    pub async fn end(&self) -> Result<i64> {
        let reader = self.reader.clone();
        let topic = self.topic.clone();
        blocking(move || {
            reader
                .fetch_watermarks(&topic, 0, REQUEST_TIMEOUT)
                .map(|(_, high)| high)
                .map_err(|e| kafka_error("cannot read the catalog log's end", e))
        })
        .await
    }
}

/// The catalog log's statements as they arrive, read by a thread of its own.
pub struct Follower {
    entries: mpsc::UnboundedReceiver<Entry>,
}

impl Follower {
    pub fn start(kafka: &str, topic: &str, offset: i64) -> Result<Follower> {
        let consumer = consumer(kafka)?;
        let mut list = TopicPartitionList::new();
        list.add_partition_offset(topic, 0, Offset::Offset(offset))
            .map_err(|e| kafka_error("cannot follow the catalog log", e))?;
        consumer
            .assign(&list)
            .map_err(|e| kafka_error("cannot follow the catalog log", e))?;
        let (sender, entries) = mpsc::unbounded_channel();
        std::thread::Builder::new()
            .name("weir-catalog".into())
            .spawn(move || follow(consumer, sender))
            .map_err(|e| kafka_error("cannot start the catalog log's thread", e))?;
        Ok(Follower { entries })
    }

    /// The next statement; `None` once the reading thread has stopped.
    pub async fn next(&mut self) -> Option<Entry> {
        self.entries.recv().await
    }
}

/// Runs until the receiving side is gone.
fn follow(consumer: BaseConsumer, sender: mpsc::UnboundedSender<Entry>) {
    while !sender.is_closed() {
        match consumer.poll(Duration::from_millis(100)) {
            None => {}
            Some(Err(e)) => {
                tracing::warn!(cause = %e, "reading the cluster's catalog log");
                std::thread::sleep(Duration::from_millis(500));
            }
            Some(Ok(message)) => {
                let entry = Entry {
                    offset: message.offset(),
                    key: String::from_utf8_lossy(message.key().unwrap_or_default()).into_owned(),
                    value: message.payload().unwrap_or_default().to_vec(),
                };
                if sender.send(entry).is_err() {
                    return;
                }
            }
        }
    }
}
