//! Statements: per-connection state, and the engine every connection shares.

pub mod cluster;
mod engine;
pub mod handlers;
pub mod merged;
mod observe;
pub mod partitioned;
pub mod privileges;
pub mod streams;
pub mod wire;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::common::ParamValues;

pub use crate::dataflow::clock::Clock;
pub use crate::dataflow::node::blocking;
pub use crate::dataflow::subscribe;
pub use engine::{Engine, Metrics};
pub use observe::{ConnectorStatus, ViewStatus};

use crate::catalog::Table;
use crate::error::Result;
use crate::sql::parser::Statement;

/// What a statement returns to the client.
#[derive(Debug)]
pub enum Output {
    /// Rows, with the command tag to close them (`SELECT`, `SHOW`, ...).
    Rows {
        schema: SchemaRef,
        batches: Vec<RecordBatch>,
        tag: &'static str,
    },
    /// Rows as the query computes them, sent as they come, so that a large
    /// result is never held whole; its first batch is already computed, so
    /// an error on it is the statement's.
    Stream {
        schema: SchemaRef,
        rows: RowStream,
        tag: &'static str,
    },
    /// A command tag, with the row count where PostgreSQL reports one.
    Command { tag: String, rows: Option<u64> },
    /// The client should now send COPY data.
    CopyIn { columns: usize },
    /// Transaction control: accepted, reported with its tag.
    Transaction { tag: &'static str, begin: bool },
    /// A change stream to send as COPY data until the client cancels.
    CopyOut(Box<merged::ChangeStream>),
    /// Rows to send as COPY data as the query computes them, then `COPY n`.
    CopyOutRows {
        schema: SchemaRef,
        rows: RowStream,
        format: handlers::copy::CopyFormat,
    },
}

/// The batches a query computes, as they come.
pub struct RowStream(pub datafusion::execution::SendableRecordBatchStream);

impl std::fmt::Debug for RowStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("RowStream")
    }
}

impl Output {
    /// Streamed rows collected, for statements that keep them (cursors).
    pub async fn collected(self) -> Result<Output> {
        use futures::TryStreamExt;
        match self {
            Output::Stream { schema, rows, tag } => Ok(Output::Rows {
                schema,
                batches: rows.0.try_collect().await?,
                tag,
            }),
            other => Ok(other),
        }
    }

    pub fn command(tag: &str) -> Output {
        Output::Command {
            tag: tag.to_string(),
            rows: None,
        }
    }

    pub fn with_rows(tag: &str, rows: u64) -> Output {
        Output::Command {
            tag: tag.to_string(),
            rows: Some(rows),
        }
    }
}

/// A COPY FROM STDIN in progress.
#[derive(Debug)]
pub struct CopyIn {
    pub table: Arc<Table>,
    /// Indices of the table columns the data fills, in data order.
    pub columns: Vec<usize>,
    pub format: handlers::copy::CopyFormat,
    /// The data received and not yet handed on as a part.
    pub data: Vec<u8>,
    /// Once the data outgrows one part: parses and stages parts as they
    /// come, so that a COPY of any size holds a few parts in memory.
    pub loader: Option<handlers::copy::Loader>,
    /// Where `data` is next tried for a part boundary.
    pub next_cut: usize,
    /// When the session's statement timeout ends the COPY, data included.
    pub deadline: Option<std::time::Instant>,
}

/// A message for the client that is not an error.
#[derive(Debug, Clone)]
pub struct Notice {
    pub severity: &'static str,
    pub code: &'static str,
    pub message: String,
}

/// One connection's state.
#[derive(Debug, Default)]
pub struct Session {
    /// The user the client logged in as (the startup packet's).
    pub user: String,
    /// `SET` variables, by lower-case name.
    pub variables: BTreeMap<String, String>,
    pub copy: Option<CopyIn>,
    /// Notices for the client, sent before the statement's result.
    pub notices: Vec<Notice>,
    /// Notices sent while a long statement runs (backfill progress).
    pub progress: Option<tokio::sync::mpsc::UnboundedSender<String>>,
    /// Open cursors, by name.
    pub cursors: BTreeMap<String, handlers::subscribe::Cursor>,
    /// Inside `BEGIN ... COMMIT`: cursors may be declared, and close at its end.
    pub in_transaction: bool,
    /// The node that sent the statement this session applies from the
    /// cluster's catalog log; `None` for a client's own session.
    pub origin: Option<String>,
}

impl Session {
    pub fn notice(&mut self, message: String) {
        self.notices.push(Notice {
            severity: "NOTICE",
            code: "00000",
            message,
        });
    }

    /// A WARNING: the statement goes on, but did not do all it was asked.
    pub fn warning(&mut self, code: &'static str, message: String) {
        self.notices.push(Notice {
            severity: "WARNING",
            code,
            message,
        });
    }

    /// A notice the client sees at once, while the statement still runs.
    pub fn progress(&self, message: String) {
        if let Some(tx) = &self.progress {
            let _ = tx.send(message);
        }
    }

    /// The producer id and sequence number the session's next write is
    /// published with (`SET weir.producer_id`, `SET weir.producer_seq`).
    pub fn producer(&self) -> crate::Result<Option<crate::log::writer::Producer>> {
        let set = |name: &str| {
            self.variables
                .get(name)
                .filter(|v| !v.is_empty() && !v.eq_ignore_ascii_case("default"))
        };
        match (set(PRODUCER_ID), set(PRODUCER_SEQ)) {
            (Some(id), Some(seq)) => Ok(Some((id.clone(), parse_seq(seq)?))),
            (None, Some(_)) => Err(crate::Error::InvalidParameter(format!(
                "{PRODUCER_SEQ} is set but {PRODUCER_ID} is not; SET {PRODUCER_ID} = '...' to publish idempotently"
            ))),
            _ => Ok(None),
        }
    }

    /// `SET implicit_flush = true` (or RisingWave's `rw_implicit_flush`).
    pub fn implicit_flush(&self) -> bool {
        ["implicit_flush", "rw_implicit_flush"].iter().any(|name| {
            self.variables
                .get(*name)
                .is_some_and(|v| v.eq_ignore_ascii_case("true") || v == "on")
        })
    }
}

/// `SET statement_timeout`: how long a statement may run (0: no limit).
pub const STATEMENT_TIMEOUT: &str = "statement_timeout";

/// `SET idle_in_transaction_session_timeout`: how long a session may wait
/// inside a transaction block before it is ended (0: no limit).
pub const IDLE_IN_TRANSACTION_TIMEOUT: &str = "idle_in_transaction_session_timeout";

/// The settings that hold a timeout.
pub const TIMEOUTS: [&str; 2] = [STATEMENT_TIMEOUT, IDLE_IN_TRANSACTION_TIMEOUT];

impl Session {
    /// The session's statement timeout, if it set one.
    pub fn statement_timeout(&self) -> Option<Duration> {
        self.timeout(STATEMENT_TIMEOUT)
    }

    /// How long the session may sit idle in a transaction block, if limited.
    pub fn idle_in_transaction_timeout(&self) -> Option<Duration> {
        self.timeout(IDLE_IN_TRANSACTION_TIMEOUT)
            .filter(|_| self.in_transaction)
    }

    fn timeout(&self, name: &str) -> Option<Duration> {
        let value = self.variables.get(name)?;
        parse_timeout(name, value).ok().flatten()
    }
}

/// A timeout setting as PostgreSQL takes it: a number of milliseconds, or a
/// number with a unit ('5s', '1min'); zero turns it off.
pub fn parse_timeout(name: &str, value: &str) -> crate::Result<Option<Duration>> {
    let text = value.trim().trim_matches('\'');
    let duration = match text.parse::<u64>() {
        Ok(millis) => Duration::from_millis(millis),
        Err(_) => handlers::subscribe::parse_duration(text).map_err(|_| {
            crate::Error::InvalidParameter(format!(
                "invalid value for parameter \"{name}\": \"{value}\"; \
                 write milliseconds or a number with a unit, like '5s' or '1min'"
            ))
        })?,
    };
    Ok((!duration.is_zero()).then_some(duration))
}

pub const PRODUCER_ID: &str = "weir.producer_id";
pub const PRODUCER_SEQ: &str = "weir.producer_seq";

/// A producer sequence number: a non-negative integer.
pub fn parse_seq(value: &str) -> crate::Result<u64> {
    value.trim().parse().map_err(|_| {
        crate::Error::InvalidInput(format!(
            "invalid value for {PRODUCER_SEQ}: \"{value}\"; it takes a non-negative integer"
        ))
    })
}

/// Run one statement; `text` is how the client wrote it.
pub async fn execute(
    engine: &Arc<Engine>,
    session: &mut Session,
    statement: Statement,
    text: &str,
    params: Option<&ParamValues>,
) -> Result<Output> {
    use tracing::Instrument;
    let timeout = session.statement_timeout();
    let run = route(engine, session, statement, text, params)
        .instrument(tracing::debug_span!("statement"));
    let Some(limit) = timeout else {
        return run.await;
    };
    let deadline = tokio::time::Instant::now() + limit;
    // Dropping the statement's future stops it where it waits; what it
    // started cleans up as a cancel does.
    match tokio::time::timeout_at(deadline, run).await {
        Ok(Ok(Output::Stream { schema, rows, tag })) => Ok(Output::Stream {
            rows: RowStream(until(deadline, schema.clone(), rows.0)),
            schema,
            tag,
        }),
        Ok(Ok(Output::CopyOutRows {
            schema,
            rows,
            format,
        })) => Ok(Output::CopyOutRows {
            rows: RowStream(until(deadline, schema.clone(), rows.0)),
            schema,
            format,
        }),
        Ok(output) => output,
        Err(_) => Err(crate::Error::StatementTimeout),
    }
}

/// In a cluster, a statement that changes the catalog goes through the
/// cluster's catalog log; everything else runs here.
async fn route(
    engine: &Arc<Engine>,
    session: &mut Session,
    statement: Statement,
    text: &str,
    params: Option<&ParamValues>,
) -> Result<Output> {
    match engine.cluster() {
        Some(replication) if cluster::replicated(&statement) => {
            if params.is_some() {
                return Err(crate::Error::NotSupported(
                    "parameters in a statement that changes the catalog of a cluster".into(),
                ));
            }
            replication.propose(session, text).await
        }
        _ => handlers::dispatch(engine, session, statement, params).await,
    }
}

/// A row stream that ends with the statement timeout's error at `deadline`.
fn until(
    deadline: tokio::time::Instant,
    schema: SchemaRef,
    rows: datafusion::execution::SendableRecordBatchStream,
) -> datafusion::execution::SendableRecordBatchStream {
    use futures::StreamExt;
    let limited = futures::stream::unfold(Some(rows), move |rows| async move {
        let mut rows = rows?;
        match tokio::time::timeout_at(deadline, rows.next()).await {
            Ok(Some(batch)) => Some((batch, Some(rows))),
            Ok(None) => None,
            Err(_) => {
                let e = datafusion::error::DataFusionError::from(crate::Error::StatementTimeout);
                Some((Err(e), None))
            }
        }
    });
    Box::pin(
        datafusion::physical_plan::stream::RecordBatchStreamAdapter::new(schema, limited.boxed()),
    )
}
