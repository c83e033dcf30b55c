//! The change model: Arrow rows with signed weights beside them.

use datafusion::arrow::array::{Int64Array, RecordBatch};

use crate::error::{Error, Result};

/// Rows with signed multiplicities: row i occurs `diffs[i]` more (+) or fewer (-) times.
#[derive(Debug, Clone)]
pub struct ChangeBatch {
    rows: RecordBatch,
    diffs: Int64Array,
}

impl ChangeBatch {
    /// Pair rows with their weights; there must be one weight per row.
    pub fn new(rows: RecordBatch, diffs: Int64Array) -> Result<ChangeBatch> {
        if rows.num_rows() != diffs.len() {
            return Err(Error::Internal(format!(
                "a change batch has {} rows but {} diffs",
                rows.num_rows(),
                diffs.len()
            )));
        }
        Ok(ChangeBatch { rows, diffs })
    }

    /// Every row inserted once.
    pub fn inserts(rows: RecordBatch) -> ChangeBatch {
        let diffs = Int64Array::from(vec![1; rows.num_rows()]);
        ChangeBatch { rows, diffs }
    }

    pub fn rows(&self) -> &RecordBatch {
        &self.rows
    }

    pub fn diffs(&self) -> &Int64Array {
        &self.diffs
    }

    pub fn len(&self) -> usize {
        self.rows.num_rows()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The end of an epoch: everything before it belongs to `epoch`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Barrier {
    pub epoch: u64,
}

/// Event-time progress, in microseconds since the epoch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Watermark {
    pub micros: i64,
}

/// Everything on a dataflow edge, data and control, in order.
#[derive(Debug, Clone)]
pub enum Message {
    Changes(ChangeBatch),
    Watermark(Watermark),
    Barrier(Barrier),
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    use datafusion::arrow::array::Int32Array;
    use datafusion::arrow::datatypes::{DataType, Field, Schema};

    #[test]
    fn diffs_must_match_rows() {
        let schema = Arc::new(Schema::new(vec![Field::new("a", DataType::Int32, false)]));
        let rows = RecordBatch::try_new(schema, vec![Arc::new(Int32Array::from(vec![1, 2]))])
            .expect("batch");
        assert!(ChangeBatch::new(rows.clone(), Int64Array::from(vec![1])).is_err());
        let batch = ChangeBatch::new(rows, Int64Array::from(vec![1, -1])).expect("valid");
        assert_eq!(batch.len(), 2);
    }
}
