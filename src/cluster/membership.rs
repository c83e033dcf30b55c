//! A node's place in its cluster: the partitions the group's rebalances
//! give it, announced in the address book, and the book read back.
//!
//! Kafka's group protocol decides who owns what; but brokers differ in what
//! they tell a member about the others, so each node says for itself, in
//! the address book, where it listens and what it owns: at once after each
//! rebalance, and every [`ANNOUNCE_EVERY`] as a heartbeat. A node whose
//! last word is older than [`LIVE_FOR`] is gone, as is one that said it
//! was leaving.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext, Rebalance};
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use rdkafka::{ClientContext, Message, Offset, TopicPartitionList};
use serde::{Deserialize, Serialize};

use super::{NodeInfo, client_config, kafka_error};
use crate::error::Result;

/// How often a node repeats its announcement.
const ANNOUNCE_EVERY: Duration = Duration::from_secs(2);

/// How long an announcement keeps its node in the cluster's listing.
const LIVE_FOR: Duration = Duration::from_secs(8);

/// How often the group's thread polls: heartbeats and rebalances happen
/// inside polls.
const POLL: Duration = Duration::from_millis(100);

/// A node that stops heartbeating for this long leaves the group, and its
/// partitions go to the others. Kafka's smallest by default.
const SESSION_TIMEOUT_MS: &str = "6000";

/// What a node says of itself in the address book.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Announcement {
    #[serde(flatten)]
    info: NodeInfo,
    partitions: Vec<i32>,
    leaving: bool,
}

/// A live node of the cluster and the partitions it owns.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Member {
    pub info: NodeInfo,
    pub partitions: Vec<i32>,
}

pub struct Membership {
    book: Arc<Mutex<Book>>,
    owned: tokio::sync::watch::Receiver<Vec<i32>>,
    stop: Arc<AtomicBool>,
    threads: Mutex<Vec<std::thread::JoinHandle<()>>>,
}

/// The address book as read so far: each node's last announcement, when
/// it was made (milliseconds since the epoch), and who claimed each
/// partition last.
#[derive(Default)]
struct Book {
    latest: HashMap<String, (Announcement, i64)>,
    owners: HashMap<i32, String>,
}

impl Book {
    fn read(&mut self, announcement: Announcement, at: i64) {
        let node = announcement.info.node.clone();
        self.owners.retain(|_, owner| *owner != node);
        if !announcement.leaving {
            for p in &announcement.partitions {
                self.owners.insert(*p, node.clone());
            }
        }
        self.latest.insert(node, (announcement, at));
    }

    /// Nodes heard from lately that have not left, with the partitions
    /// no later announcement took from them.
    fn members(&self, now: i64) -> Vec<Member> {
        let live_ms = LIVE_FOR.as_millis() as i64;
        let mut members: Vec<Member> = self
            .latest
            .values()
            .filter(|(a, at)| !a.leaving && now - at < live_ms)
            .map(|(a, _)| Member {
                info: a.info.clone(),
                partitions: a
                    .partitions
                    .iter()
                    .copied()
                    .filter(|p| self.owners.get(p) == Some(&a.info.node))
                    .collect(),
            })
            .collect();
        members.sort_by(|a, b| a.info.node.cmp(&b.info.node));
        members
    }
}

/// Keeps the partitions of the last assignment and notes that it changed.
struct Rebalances {
    owned: Arc<Mutex<Vec<i32>>>,
    changed: Arc<AtomicBool>,
    /// Tells the node's partitioned views what it owns now.
    published: tokio::sync::watch::Sender<Vec<i32>>,
}

impl ClientContext for Rebalances {}

impl ConsumerContext for Rebalances {
    fn post_rebalance(&self, _: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        let mut owned = self.owned.lock().expect("owned partitions lock");
        match rebalance {
            Rebalance::Assign(list) => {
                *owned = list.elements().iter().map(|e| e.partition()).collect();
                owned.sort_unstable();
                tracing::info!(partitions = ?*owned, "this node's partitions");
            }
            Rebalance::Revoke(_) => owned.clear(),
            Rebalance::Error(e) => tracing::warn!(cause = %e, "a cluster rebalance failed"),
        }
        self.published.send_replace(owned.clone());
        self.changed.store(true, Ordering::Relaxed);
    }
}

/// Where a node's group and book live.
pub struct Place<'a> {
    pub kafka: &'a str,
    pub group: &'a str,
    pub work_topic: &'a str,
    pub book_topic: &'a str,
}

impl Membership {
    pub fn join(place: &Place<'_>, me: NodeInfo) -> Result<Membership> {
        let book = Arc::new(Mutex::new(Book::default()));
        let stop = Arc::new(AtomicBool::new(false));
        let (published, owned) = tokio::sync::watch::channel(Vec::new());
        let announcer = Announcer::new(place, me, published)?;
        let reader = book_reader(place.kafka, place.book_topic)?;
        let threads = vec![
            spawn("weir-cluster", {
                let stop = stop.clone();
                move || announcer.run(&stop)
            })?,
            spawn("weir-cluster-book", {
                let (book, stop) = (book.clone(), stop.clone());
                move || read_book(reader, &book, &stop)
            })?,
        ];
        Ok(Membership {
            book,
            owned,
            stop,
            threads: Mutex::new(threads),
        })
    }

    pub fn members(&self) -> Vec<Member> {
        self.book.lock().expect("book lock").members(now_ms())
    }

    /// This node's partitions, as each rebalance leaves them: empty
    /// between a revocation and the assignment that follows it.
    pub fn owned(&self) -> tokio::sync::watch::Receiver<Vec<i32>> {
        self.owned.clone()
    }

    /// Leaves the group and says so in the book; waits until both are done.
    pub fn leave(&self) {
        self.stop.store(true, Ordering::Relaxed);
        let threads = std::mem::take(&mut *self.threads.lock().expect("threads lock"));
        for thread in threads {
            let _ = thread.join();
        }
    }
}

impl Drop for Membership {
    fn drop(&mut self) {
        self.leave();
    }
}

fn spawn(name: &str, work: impl FnOnce() + Send + 'static) -> Result<std::thread::JoinHandle<()>> {
    std::thread::Builder::new()
        .name(name.into())
        .spawn(work)
        .map_err(|e| kafka_error("cannot start the cluster's threads", e))
}

/// The group member, and the producer of its announcements.
struct Announcer {
    consumer: BaseConsumer<Rebalances>,
    producer: BaseProducer,
    topic: String,
    me: NodeInfo,
    owned: Arc<Mutex<Vec<i32>>>,
    changed: Arc<AtomicBool>,
}

impl Announcer {
    fn new(
        place: &Place<'_>,
        me: NodeInfo,
        published: tokio::sync::watch::Sender<Vec<i32>>,
    ) -> Result<Announcer> {
        let owned = Arc::new(Mutex::new(Vec::new()));
        let changed = Arc::new(AtomicBool::new(true));
        let context = Rebalances {
            owned: owned.clone(),
            changed: changed.clone(),
            published,
        };
        let consumer: BaseConsumer<Rebalances> = client_config(place.kafka)
            .set("group.id", place.group)
            .set("client.id", &me.node)
            .set("enable.auto.commit", "false")
            .set("session.timeout.ms", SESSION_TIMEOUT_MS)
            .set("heartbeat.interval.ms", "1000")
            .set("partition.assignment.strategy", "range")
            .create_with_context(context)
            .map_err(|e| kafka_error("cannot join the cluster's group", e))?;
        consumer
            .subscribe(&[place.work_topic])
            .map_err(|e| kafka_error("cannot join the cluster's group", e))?;
        let producer = client_config(place.kafka)
            .set("message.timeout.ms", "5000")
            .create()
            .map_err(|e| kafka_error("cannot make a Kafka producer", e))?;
        Ok(Announcer {
            consumer,
            producer,
            topic: place.book_topic.to_string(),
            me,
            owned,
            changed,
        })
    }

    fn run(self, stop: &AtomicBool) {
        let mut announced = Instant::now();
        while !stop.load(Ordering::Relaxed) {
            // The topic carries no messages: polls only heartbeat and rebalance.
            if let Some(Err(e)) = self.consumer.poll(POLL) {
                tracing::debug!(cause = %e, "cluster group");
            }
            if self.changed.swap(false, Ordering::Relaxed) || announced.elapsed() >= ANNOUNCE_EVERY
            {
                self.announce(false);
                announced = Instant::now();
            }
            self.producer.poll(Duration::ZERO);
        }
        self.consumer.unsubscribe();
        self.announce(true);
        let _ = self.producer.flush(Duration::from_secs(2));
    }

    fn announce(&self, leaving: bool) {
        let announcement = Announcement {
            info: self.me.clone(),
            partitions: if leaving {
                Vec::new()
            } else {
                self.owned.lock().expect("owned partitions lock").clone()
            },
            leaving,
        };
        let Ok(payload) = serde_json::to_vec(&announcement) else {
            return;
        };
        let record = BaseRecord::<str, [u8]>::to(&self.topic)
            .key(&self.me.node)
            .payload(&payload)
            .timestamp(now_ms());
        if let Err((e, _)) = self.producer.send(record) {
            tracing::debug!(cause = %e, "cannot announce this node");
        }
    }
}

fn book_reader(kafka: &str, topic: &str) -> Result<BaseConsumer> {
    let consumer = super::topics::consumer(kafka)?;
    let mut list = TopicPartitionList::new();
    list.add_partition_offset(topic, 0, Offset::Beginning)
        .map_err(|e| kafka_error("cannot read the cluster's nodes", e))?;
    consumer
        .assign(&list)
        .map_err(|e| kafka_error("cannot read the cluster's nodes", e))?;
    Ok(consumer)
}

fn read_book(reader: BaseConsumer, book: &Mutex<Book>, stop: &AtomicBool) {
    while !stop.load(Ordering::Relaxed) {
        let Some(Ok(message)) = reader.poll(POLL) else {
            continue;
        };
        let Some(announcement) = message
            .payload()
            .and_then(|p| serde_json::from_slice::<Announcement>(p).ok())
        else {
            continue;
        };
        let at = message.timestamp().to_millis().unwrap_or_else(now_ms);
        book.lock().expect("book lock").read(announcement, at);
    }
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn said(node: &str, partitions: &[i32], leaving: bool) -> Announcement {
        Announcement {
            info: NodeInfo {
                node: node.into(),
                address: format!("{node}:6544"),
                http_address: format!("{node}:6545"),
                token: String::new(),
            },
            partitions: partitions.to_vec(),
            leaving,
        }
    }

    fn listing(book: &Book, now: i64) -> Vec<(String, Vec<i32>)> {
        book.members(now)
            .into_iter()
            .map(|m| (m.info.node, m.partitions))
            .collect()
    }

    #[test]
    fn a_later_claim_takes_a_partition_from_a_silent_node() {
        let mut book = Book::default();
        book.read(said("a", &[0, 1], false), 1_000);
        book.read(said("b", &[2, 3], false), 1_000);
        book.read(said("b", &[0, 1, 2, 3], false), 2_000);
        assert_eq!(
            listing(&book, 2_000),
            [("a".into(), vec![]), ("b".into(), vec![0, 1, 2, 3])]
        );
    }

    #[test]
    fn silent_or_leaving_nodes_drop_out() {
        let mut book = Book::default();
        book.read(said("a", &[0], false), 1_000);
        book.read(said("b", &[1], false), 5_000);
        book.read(said("c", &[2], false), 5_000);
        book.read(said("c", &[], true), 6_000);
        let later = 1_000 + LIVE_FOR.as_millis() as i64;
        assert_eq!(listing(&book, later), [("b".into(), vec![1])]);
    }
}
