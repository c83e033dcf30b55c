//! Connectors: sources that feed tables from outside (Kafka, generators)
//! and sinks that write a relation's changes out (Kafka).
//!
//! A source writes what it reads into its table's log through the writer,
//! like an INSERT, and each write commits together with the source's read
//! position (a producer sequence, see `log::writer`). After a crash the
//! source resumes from the committed position, so every message lands in
//! the log exactly once, and everything downstream (views, change streams,
//! sinks) reads the log as it reads any table's.
//!
//! Each connector runs as one task, supervised here: a failure that a retry
//! may cure (a broker away) is retried with backoff; one that it cannot (a
//! bad message under `on_error = 'fail'`) stops the task, and SHOW SOURCES
//! or SHOW SINKS says why.

pub mod errors;
pub mod format;
pub mod generator;
pub mod kafka;

use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Duration;

use futures::FutureExt;
use parking_lot::Mutex;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::catalog::{ConnectorDef, ConnectorKind, SinkDef, Table, TableDef};
use crate::dataflow::node::Node;
use crate::error::{Error, Result};

/// How a connector task is doing, as SHOW SOURCES and SHOW SINKS print it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Status {
    Starting,
    Running,
    /// Failed in a way a retry may cure; retrying.
    Retrying(String),
    /// Stopped for good until the object is recreated or the server restarts.
    Failed(String),
    /// A bounded generator that has written everything it was asked for.
    Finished,
}

impl std::fmt::Display for Status {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Status::Starting => write!(f, "starting"),
            Status::Running => write!(f, "running"),
            Status::Retrying(why) => write!(f, "retrying: {why}"),
            Status::Failed(why) => write!(f, "failed: {why}"),
            Status::Finished => write!(f, "finished"),
        }
    }
}

/// Why a connector task stopped.
#[derive(Debug)]
pub enum Failure {
    /// Retrying may help: the broker is away, a request timed out.
    Transient(String),
    /// Retrying cannot help: the task stops.
    Fatal(String),
}

impl From<Error> for Failure {
    fn from(e: Error) -> Failure {
        match e {
            Error::ShuttingDown => Failure::Fatal("the server is shutting down".into()),
            other => Failure::Transient(other.to_string()),
        }
    }
}

impl From<rdkafka::error::KafkaError> for Failure {
    fn from(e: rdkafka::error::KafkaError) -> Failure {
        Failure::Transient(format!("Kafka: {}", kafka::message(&e)))
    }
}

/// What a task shares with the registry.
#[derive(Debug, Default)]
pub struct Progress {
    status: Mutex<Option<Status>>,
    /// Messages read (sources) or written (sinks).
    pub messages: std::sync::atomic::AtomicU64,
    /// Messages a source could not read.
    pub errors: std::sync::atomic::AtomicU64,
    /// A Kafka source's position in each partition it reads.
    partitions: Mutex<BTreeMap<i32, Position>>,
}

/// Where a source stands in one Kafka partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Position {
    /// The offset after the last message it took.
    pub next: i64,
    /// The partition's end (high watermark) as last fetched.
    pub high: i64,
}

impl Position {
    /// Messages in the partition the source has not read yet.
    pub fn lag(&self) -> i64 {
        (self.high - self.next).max(0)
    }
}

impl Progress {
    pub fn set_position(&self, partition: i32, position: Position) {
        self.partitions.lock().insert(partition, position);
    }

    pub fn positions(&self) -> BTreeMap<i32, Position> {
        self.partitions.lock().clone()
    }

    pub fn set(&self, status: Status) {
        *self.status.lock() = Some(status);
    }

    pub fn status(&self) -> Status {
        self.status.lock().clone().unwrap_or(Status::Starting)
    }

    pub fn count(counter: &std::sync::atomic::AtomicU64, n: u64) {
        counter.fetch_add(n, std::sync::atomic::Ordering::Relaxed);
    }
}

/// A task's view of its registry entry: where to report and when to stop.
#[derive(Clone)]
pub struct Handle {
    pub progress: Arc<Progress>,
    stop: watch::Receiver<bool>,
}

impl Handle {
    /// Resolves once the task is asked to stop.
    pub async fn stopped(&mut self) {
        let _ = self.stop.wait_for(|stop| *stop).await;
    }
}

struct Running {
    progress: Arc<Progress>,
    stop: watch::Sender<bool>,
    task: JoinHandle<()>,
}

/// The connector tasks of a node, by object id.
#[derive(Default)]
pub struct Connectors {
    running: Mutex<HashMap<u64, Running>>,
}

impl std::fmt::Debug for Connectors {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Connectors")
            .field("running", &self.running.lock().len())
            .finish()
    }
}

impl Connectors {
    /// Start feeding `table` from its connector; in a cluster
    /// (`clustered`), a split source reads its share through the cluster.
    pub fn start_source(&self, node: &Node, table: Arc<Table>, clustered: bool) {
        let Some(connector) = table.def.connector.clone() else {
            return;
        };
        let node = node.clone();
        let id = table.def.id;
        let runtime = node.background.clone();
        let span = tracing::info_span!("source", source = %table.def.name);
        let split = clustered && !table.def.split_by().is_empty();
        self.spawn(&runtime, id, span, move |handle| async move {
            match &connector.connector {
                ConnectorKind::Kafka if split => {
                    supervise(handle, |h| kafka::split_source(&node, &table, h)).await
                }
                ConnectorKind::Kafka => {
                    supervise(handle, |h| kafka::source(&node, &table, h)).await
                }
                ConnectorKind::Nexmark | ConnectorKind::Datagen => {
                    supervise(handle, |h| generator::source(&node, &table, h)).await
                }
                ConnectorKind::Unknown(other) => handle.progress.set(Status::Failed(format!(
                    "connector '{other}' cannot feed a table"
                ))),
            }
        });
    }

    /// Start writing a relation's changes out; `opened` is the change
    /// stream CREATE SINK opened, `None` when the sink resumes.
    pub fn start_sink(
        &self,
        node: &Node,
        sink: SinkDef,
        opened: Option<crate::dataflow::subscribe::Subscription>,
    ) {
        let node = node.clone();
        let id = sink.id;
        let first = Mutex::new(opened);
        let runtime = node.background.clone();
        let span = tracing::info_span!("sink", sink = %sink.name);
        self.spawn(&runtime, id, span, move |handle| async move {
            supervise(handle, |h| kafka::sink(&node, &sink, &first, h)).await
        });
    }

    /// Run a connector's task; every line it logs carries `span`, which
    /// names the source or sink.
    fn spawn<F, Fut>(&self, runtime: &tokio::runtime::Handle, id: u64, span: tracing::Span, run: F)
    where
        F: FnOnce(Handle) -> Fut,
        Fut: Future<Output = ()> + Send + 'static,
    {
        let progress = Arc::new(Progress::default());
        let (stop, stopped) = watch::channel(false);
        let handle = Handle {
            progress: progress.clone(),
            stop: stopped,
        };
        let task = runtime.spawn(tracing::Instrument::instrument(run(handle), span));
        let previous = self.running.lock().insert(
            id,
            Running {
                progress,
                stop,
                task,
            },
        );
        if let Some(previous) = previous {
            previous.task.abort();
        }
    }

    /// Stop a connector task and wait until it has let go of everything.
    pub async fn stop(&self, id: u64) {
        let Some(running) = self.running.lock().remove(&id) else {
            return;
        };
        let _ = running.stop.send(true);
        let mut task = running.task;
        if tokio::time::timeout(Duration::from_secs(10), &mut task)
            .await
            .is_err()
        {
            task.abort();
        }
    }

    /// The task's status and counters, when one runs for `id`.
    pub fn progress(&self, id: u64) -> Option<Arc<Progress>> {
        self.running.lock().get(&id).map(|r| r.progress.clone())
    }
}

/// Run `attempt` until it ends, retrying transient failures with backoff.
async fn supervise<F, Fut>(handle: Handle, mut attempt: F)
where
    F: FnMut(Handle) -> Fut,
    Fut: Future<Output = std::result::Result<(), Failure>>,
{
    let mut backoff = Duration::from_millis(500);
    let mut stop = handle.clone();
    loop {
        // A panic ends this connector, shown by SHOW SOURCES, never the node.
        let attempt = AssertUnwindSafe(attempt(handle.clone())).catch_unwind();
        let outcome = tokio::select! {
            outcome = attempt => outcome.unwrap_or_else(|panic| {
                let what = crate::error::panic_message(panic.as_ref());
                Err(Failure::Fatal(format!("internal error: the connector panicked: {what}; this is a bug")))
            }),
            _ = stop.stopped() => return,
        };
        match outcome {
            Ok(()) => {
                handle.progress.set(Status::Finished);
                return;
            }
            Err(Failure::Fatal(why)) => {
                tracing::error!(cause = %why, "connector stopped");
                handle.progress.set(Status::Failed(why));
                return;
            }
            Err(Failure::Transient(why)) => {
                tracing::warn!(cause = %why, retry_in = ?backoff, "connector failed; retrying");
                handle.progress.set(Status::Retrying(why));
            }
        }
        tokio::select! {
            _ = tokio::time::sleep(backoff) => {}
            _ = stop.stopped() => return,
        }
        backoff = (backoff * 2).min(Duration::from_secs(30));
    }
}

/// Refuse options the connector does not read, so that a typo is not
/// silently ignored. Options under `open`'s prefix are checked by their
/// reader (its second part is how the message lists them).
pub fn refuse_unknown(
    connector: &ConnectorDef,
    known: &[&str],
    open: Option<(&str, &str)>,
) -> Result<()> {
    let unknown = connector.options.keys().find(|key| {
        !known.contains(&key.as_str()) && open.is_none_or(|(prefix, _)| !key.starts_with(prefix))
    });
    let Some(key) = unknown else {
        return Ok(());
    };
    let mut list = known.join(", ");
    if let Some((_, shown)) = open {
        list.push_str(&format!(", {shown}"));
    }
    Err(Error::InvalidParameter(format!(
        "option {key} is not known to connector '{}'; known: {list}",
        connector.connector
    )))
}

/// Check a source's connector clauses against its columns, at CREATE.
pub fn check_source(connector: &ConnectorDef, table: &TableDef) -> Result<()> {
    match &connector.connector {
        ConnectorKind::Kafka => kafka::SourceOptions::parse(connector, table).map(|_| ()),
        ConnectorKind::Nexmark | ConnectorKind::Datagen => generator::check(connector, table),
        ConnectorKind::Unknown(other) => Err(Error::InvalidParameter(format!(
            "connector '{other}' is not known; use {}",
            crate::catalog::CONNECTORS.join(", ")
        ))),
    }
}

/// Check a sink's connector clauses against the relation it reads, at CREATE.
pub fn check_sink(connector: &ConnectorDef, from: &Table, append_only: bool) -> Result<()> {
    match &connector.connector {
        ConnectorKind::Kafka => {
            let options = kafka::SinkOptions::parse(connector, from)?;
            options.refuse_retractions(from, append_only)
        }
        other => Err(Error::InvalidParameter(format!(
            "sinks write to Kafka; connector '{other}' cannot be a sink"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_panicking_connector_fails_alone() {
        let progress = Arc::new(Progress::default());
        let (_stop, stopped) = watch::channel(false);
        let handle = Handle {
            progress: progress.clone(),
            stop: stopped,
        };
        supervise(handle, |_| async {
            let bytes: &[u8] = &[];
            let _ = bytes[usize::from(bytes.is_empty())];
            Ok::<(), Failure>(())
        })
        .await;
        match progress.status() {
            Status::Failed(why) => assert!(why.contains("panicked"), "{why}"),
            other => panic!("expected a failed connector, got {other}"),
        }
    }
}
