//! What a statement asks the writer to do: the table it writes, the rows,
//! and where the outcome goes. Kept apart from how requests are grouped
//! and checked, which callers never see.

use std::sync::Arc;

use tokio::sync::oneshot;

use super::producer::Producer;
use crate::error::{Error, Result};

/// What a write is applied to.
#[derive(Clone)]
pub struct Target {
    pub table: u64,
    pub name: String,
    pub topic: u64,
    pub partitions: u32,
    /// The constraint name reported on duplicate keys, e.g. `t_pkey`.
    pub constraint: String,
    /// Renders an encoded key for error messages, e.g. `(id)=(1)`.
    pub describe_key: KeyRenderer,
}

/// Renders an encoded key for messages; supplied by the catalog, which knows the key's types.
pub type KeyRenderer = Arc<dyn Fn(&[u8]) -> String + Send + Sync>;

impl std::fmt::Debug for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Target")
            .field("table", &self.table)
            .field("name", &self.name)
            .finish()
    }
}

/// One encoded row: its key in the `rows` family (without the table prefix) and its bytes.
#[derive(Debug, Clone)]
pub struct KeyedRow {
    pub key: Vec<u8>,
    pub row: Vec<u8>,
}

/// How a table with `ON CONFLICT` merges a row into the one stored under
/// its key: the row to store, or `None` to keep what is there.
pub type MergeFn = Arc<dyn Fn(Option<&[u8]>, &[u8]) -> Result<Option<Vec<u8>>> + Send + Sync>;

#[derive(Debug)]
pub enum WriteOp {
    /// Append-only tables: records go to the log only.
    Append { rows: Vec<Vec<u8>> },
    /// Keyed tables: insert rows whose keys must not exist yet.
    Insert { rows: Vec<KeyedRow> },
    /// Tables without a primary key: the writer keys each row by its log position.
    InsertUnkeyed { rows: Vec<Vec<u8>> },
    /// Delete rows by key; rows already gone are skipped.
    Delete { keys: Vec<Vec<u8>> },
    /// Replace rows: each old row must still be as the statement read it.
    Update { changes: Vec<Change> },
    /// Set each key's row whatever was there, or delete it (`None`): a
    /// table fed by an upsert connector, where the last message per key wins.
    Upsert { rows: Vec<UpsertRow> },
    /// Keyed tables with `ON CONFLICT`: each row merged, in order, into
    /// what its key holds.
    Merge { rows: Vec<KeyedRow>, merge: Merge },
}

/// A [`MergeFn`] that a `WriteOp` can print.
#[derive(Clone)]
pub struct Merge(pub MergeFn);

impl std::fmt::Debug for Merge {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Merge")
    }
}

/// A row key and its new row, or `None` to delete it.
pub type UpsertRow = (Vec<u8>, Option<Vec<u8>>);

impl WriteOp {
    /// Rows the write touches, as its command tag counts them.
    pub fn row_count(&self) -> u64 {
        let n = match self {
            WriteOp::Append { rows } | WriteOp::InsertUnkeyed { rows } => rows.len(),
            WriteOp::Insert { rows } => rows.len(),
            WriteOp::Delete { keys } => keys.len(),
            WriteOp::Update { changes } => changes.len(),
            WriteOp::Upsert { rows } => rows.len(),
            WriteOp::Merge { rows, .. } => rows.len(),
        };
        n as u64
    }
}

#[derive(Debug)]
pub struct Change {
    pub old_key: Vec<u8>,
    pub old_row: Vec<u8>,
    pub new: KeyedRow,
}

#[derive(Debug)]
pub struct WriteRequest {
    pub target: Target,
    pub op: WriteOp,
    /// The highest watermark the written rows imply (their event times
    /// minus the table's delay); `None` when the table has no watermark.
    pub watermark: Option<i64>,
    /// The producer ids and sequence numbers the write was published with:
    /// a session's one, or a connector's position in each partition it read.
    pub producers: Vec<Producer>,
    pub reply: oneshot::Sender<Result<u64>>,
}

/// The error for a row whose key the table holds already.
pub(super) fn duplicate(target: &Target, row: &KeyedRow) -> Error {
    Error::UniqueViolation {
        constraint: target.constraint.clone(),
        key: (target.describe_key)(&row.key),
    }
}
