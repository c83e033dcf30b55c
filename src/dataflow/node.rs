//! The parts of a node that work below statements: what sources, sinks and
//! change streams use, without the session layer that owns them.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

use crate::catalog::Catalog;
use crate::dataflow::clock::Clock;
use crate::log::writer::Writer;
use crate::state::Store;

/// A node's storage, names, writes, clock and commits.
#[derive(Clone)]
pub struct Node {
    pub store: Arc<Store>,
    pub catalog: Arc<Catalog>,
    pub writer: Writer,
    pub clock: Arc<Clock>,
    /// The last epoch the dataflow runtime committed.
    pub epochs: watch::Receiver<u64>,
    /// How long a source without records holds back others' watermarks.
    pub idle_timeout: Duration,
    /// The runtime the node started on: work that outlives a statement
    /// runs there, not on the thread of the connection that started it.
    pub background: tokio::runtime::Handle,
    /// What this node shares with its cluster, once it joined one; stays
    /// `None` outside a cluster.
    pub share: tokio::sync::watch::Receiver<Option<Arc<Share>>>,
}

/// Run blocking work from a task: on a multi-threaded runtime the worker
/// hands its other tasks off first; a connection thread runs it in place,
/// since its other connections have nowhere else to go.
pub fn blocking<T>(work: impl FnOnce() -> T) -> T {
    match tokio::runtime::Handle::try_current().map(|h| h.runtime_flavor()) {
        Ok(tokio::runtime::RuntimeFlavor::MultiThread) => tokio::task::block_in_place(work),
        _ => work(),
    }
}

/// The partitions a node keeps built when it owns the ones given.
pub type Keep = Box<dyn Fn(&[u32]) -> Vec<u32> + Send + Sync>;

/// What a node of a cluster shares with split sources.
pub struct Share {
    pub cluster: String,
    /// The cluster's Kafka, which holds the rows topics.
    pub kafka: String,
    /// The cluster's partitions.
    pub count: u32,
    pub owned: tokio::sync::watch::Receiver<Vec<i32>>,
    /// What a split source's log keeps, for what the node owns: more than
    /// that with standbys.
    pub keep: Keep,
    /// Per split source, the partitions whose rows its log holds up to
    /// where their rows topic ended when this node began reading them.
    ready: parking_lot::Mutex<std::collections::HashMap<u64, Vec<u32>>>,
}

impl Share {
    pub fn new(
        cluster: &str,
        kafka: &str,
        count: u32,
        owned: tokio::sync::watch::Receiver<Vec<i32>>,
        keep: Keep,
    ) -> Share {
        Share {
            cluster: cluster.to_string(),
            kafka: kafka.to_string(),
            count,
            owned,
            keep,
            ready: Default::default(),
        }
    }

    /// Whether `table`'s log holds its rows of exactly `partitions`, read
    /// up to where they ended when the reader took them.
    pub fn ready_for(&self, table: u64, partitions: &[u32]) -> bool {
        self.ready.lock().get(&table).map(Vec::as_slice) == Some(partitions)
    }

    pub fn set_ready(&self, table: u64, partitions: Option<&[u32]>) {
        let mut ready = self.ready.lock();
        match partitions {
            Some(p) => ready.insert(table, p.to_vec()),
            None => ready.remove(&table),
        };
    }
}
