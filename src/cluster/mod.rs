//! Several nodes as one cluster, coordinated through Kafka.
//!
//! A cluster named `c` keeps three topics on its Kafka:
//!
//! - `weir-c-partitions`: its partitions are the cluster's units of work.
//!   Every node is a member of the consumer group `weir-c` subscribed to it,
//!   so Kafka's group protocol gives each live node its share and moves a
//!   share to the others when its node leaves or stops heartbeating.
//! - `weir-c-nodes`: the address book, where each node says where it
//!   listens and what it owns (compacted, keyed by node).
//! - `weir-c-catalog`: every DDL statement, in one partition, in the order
//!   every node applies it; compacted, so retention never drops one, with
//!   a key of its own for each statement, so compaction keeps them all.
//!
//! This module moves bytes to and from those topics; what a statement
//! means, and applying it, belong to the session layer above.

mod catalog_log;
mod membership;
mod standby;
mod topics;

use std::time::Duration;

use rdkafka::ClientConfig;
use serde::{Deserialize, Serialize};

pub use catalog_log::{Entry, Follower};
pub use membership::Member;
pub use topics::ensure_rows_topic;

use crate::error::{Error, Result};

/// How long a request to the cluster's Kafka may take.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// A node as the address book lists it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeInfo {
    pub node: String,
    /// Its pgwire address.
    pub address: String,
    /// Its HTTP address (`/metrics`, the dashboard, and the rows of its
    /// partitions of partitioned views).
    pub http_address: String,
    /// What a peer shows to read rows from it: only the cluster's nodes,
    /// which read it in the address book, know it.
    #[serde(default)]
    pub token: String,
}

/// This node's membership of its cluster.
pub struct Cluster {
    pub me: NodeInfo,
    /// The partitions the cluster's work is split into.
    pub partitions: u32,
    /// Failures of other nodes to keep warm copies for (`--standbys`).
    pub standbys: u32,
    membership: membership::Membership,
    log: catalog_log::CatalogLog,
}

impl Cluster {
    /// Creates the cluster's topics when this is its first node, lists
    /// this node in the address book and joins the group.
    pub async fn join(
        name: &str,
        kafka: &str,
        me: NodeInfo,
        partitions: u32,
        standbys: u32,
    ) -> Result<Cluster> {
        let topics = topics::Topics::of(name);
        let partitions = topics::ensure(kafka, &topics, partitions).await?;
        let log = catalog_log::CatalogLog::open(kafka, &topics.catalog)?;
        let place = membership::Place {
            kafka,
            group: &topics.group,
            work_topic: &topics.partitions,
            book_topic: &topics.nodes,
        };
        let membership = membership::Membership::join(&place, me.clone())?;
        Ok(Cluster {
            me,
            partitions,
            standbys,
            membership,
            log,
        })
    }

    /// The live nodes and what each owns, as their announcements say.
    pub fn members(&self) -> Vec<Member> {
        self.membership.members()
    }

    /// This node's partitions, as they change.
    pub fn owned(&self) -> tokio::sync::watch::Receiver<Vec<i32>> {
        self.membership.owned()
    }

    /// The partitions this node keeps built when it owns `owned`: those,
    /// and what the failure of up to `standbys` others would bring it. The
    /// nodes are those the book lists with partitions: one that died stops
    /// counting once the others have claimed what it had.
    pub fn kept(&self, owned: &[u32]) -> Vec<u32> {
        let mut nodes: Vec<String> = self
            .members()
            .into_iter()
            .filter(|m| !m.partitions.is_empty())
            .map(|m| m.info.node)
            .collect();
        nodes.push(self.me.node.clone());
        standby::kept(&nodes, &self.me.node, owned, self.partitions, self.standbys)
    }

    /// Appends a statement to the catalog log; returns once Kafka holds it.
    pub async fn propose(&self, key: &str, value: &[u8]) -> Result<()> {
        self.log.append(key, value).await
    }

    /// The offset after the catalog log's last statement.
    pub async fn catalog_end(&self) -> Result<i64> {
        self.log.end().await
    }

    /// Reads the catalog log from `offset` on, as statements arrive.
    pub fn follow(&self, offset: i64) -> Result<Follower> {
        self.log.follow(offset)
    }

    /// Leaves the group at once, so that the others take this node's
    /// partitions without waiting for its session to time out.
    pub fn leave(&self) {
        self.membership.leave();
    }
}

/// The settings every client of the cluster's Kafka shares.
pub fn client_config(kafka: &str) -> ClientConfig {
    let mut config = ClientConfig::new();
    config
        .set("bootstrap.servers", kafka)
        .set("socket.timeout.ms", "10000")
        .set("log_level", "3");
    config
}

fn kafka_error(what: &str, e: impl std::fmt::Display) -> Error {
    Error::ConnectionFailure(format!("{what}: {e}"))
}
