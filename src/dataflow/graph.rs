//! A view's dataflow: operators in topological order, the sources that feed
//! them, and how changes travel between them. EXPLAIN prints this graph.

use std::sync::Arc;

use datafusion::arrow::array::{Array, BinaryBuilder, Int64Array, RecordBatch};
use datafusion::arrow::datatypes::{DataType, Field, Schema};

use crate::catalog::{Table, micros};
use crate::dataflow::change::ChangeBatch;
use crate::dataflow::operator::Operator;
use crate::error::Result;
use crate::log::embedded::Chunk;
use crate::state::rows::projected::Projection;

pub struct Node {
    pub operator: Box<dyn Operator>,
    /// Upstream nodes, by index; always lower than this node's own index.
    pub inputs: Vec<usize>,
}

/// Where a dataflow reads: a table's log topic or a view's changelog.
pub struct Source {
    pub table: Arc<Table>,
    /// The node that receives this source's changes, on its input 0.
    pub node: usize,
    /// Decodes only the string columns the dataflow reads, when it reads
    /// fewer than all of them.
    pub projection: Option<Projection>,
    /// For a window operator's input decoded in part: its event-time
    /// column. Each row that could be late is appended as stored, in a last
    /// column ([`WHOLE_ROW`]), for the operator to record whole.
    pub whole_rows: Option<usize>,
}

/// The column that carries each row as stored; see [`Source::whole_rows`].
pub const WHOLE_ROW: &str = "__whole_row";

impl Source {
    pub fn topic(&self) -> crate::log::Topic {
        self.table.def.log_topic()
    }

    /// Partitions of the topic: views keep their changelog in one.
    pub fn partitions(&self) -> u32 {
        if self.table.def.is_view() {
            1
        } else {
            self.table.def.partitions
        }
    }

    /// Decode a log chunk into changes in the table's schema. No watermark
    /// the operator fed has seen is above `bound`, the highest this source
    /// has read, this chunk's included.
    pub fn decode(&self, chunk: &Chunk<'_>, bound: Option<i64>) -> Result<ChangeBatch> {
        let encoded = chunk.entries.iter().map(|e| e.row);
        let rows = match &self.projection {
            Some(projection) => projection.decode(encoded)?,
            None => self.table.codec.decode(encoded)?,
        };
        let rows = match self.whole_rows {
            Some(time) => with_whole_rows(rows, chunk, time, bound)?,
            None => rows,
        };
        let diffs = Int64Array::from_iter_values(chunk.entries.iter().map(|e| e.diff));
        ChangeBatch::new(rows, diffs)
    }
}

/// `rows` with a last column, [`WHOLE_ROW`], holding as stored each row
/// that could be late, and nothing for the others.
///
/// A row is late only if one of its windows ended by the watermark, and
/// every window of a row ends after its event time: a row whose time is at
/// or above `bound` cannot be late. Rows mostly arrive ahead of the
/// watermark, so most are not copied at all.
fn with_whole_rows(
    rows: RecordBatch,
    chunk: &Chunk<'_>,
    time: usize,
    bound: Option<i64>,
) -> Result<RecordBatch> {
    let times = micros(rows.column(time))?;
    // Without a watermark, nothing is late.
    let may_be_late =
        |i: usize| bound.is_some_and(|bound| times.is_valid(i) && times.value(i) < bound);
    // Sized up front: growing the buffer row by row copied it over and over.
    let bytes = (0..chunk.entries.len())
        .filter(|i| may_be_late(*i))
        .map(|i| chunk.entries[i].row.len())
        .sum();
    let mut stored = BinaryBuilder::with_capacity(chunk.entries.len(), bytes);
    for (i, entry) in chunk.entries.iter().enumerate() {
        match may_be_late(i) {
            true => stored.append_value(entry.row),
            false => stored.append_value([]),
        }
    }
    let stored = stored.finish();
    let mut fields = rows.schema().fields().to_vec();
    fields.push(Arc::new(Field::new(WHOLE_ROW, DataType::Binary, false)));
    let mut columns = rows.columns().to_vec();
    columns.push(Arc::new(stored));
    Ok(RecordBatch::try_new(
        Arc::new(Schema::new(fields)),
        columns,
    )?)
}

pub struct Dataflow {
    /// The view this dataflow maintains.
    pub view: u64,
    /// Its name, for errors and the rows it records.
    pub name: Arc<str>,
    /// What it does when an expression fails on a row.
    pub on_error: crate::catalog::OnError,
    pub nodes: Vec<Node>,
    pub sources: Vec<Source>,
}
