//! `WITH c AS changelog FROM t` (RisingWave's): every change to `t` as a
//! row of its own, with `changelog_op` saying what it was: 1 insert,
//! 2 delete, 3 the new row of an update, 4 its old row. What comes out only
//! grows, so views over it read a stream.
//!
//! The writer logs an update's old row and new row side by side (see
//! `log::writer`), so a retraction directly followed by an insertion of the
//! same key, within one chunk, is an update. A table without a primary key
//! has no key to compare: its adjacent pairs count as updates, as its
//! UPDATE statements write them.

use std::sync::Arc;

use datafusion::arrow::array::{Int16Array, Int64Array, RecordBatch, UInt32Array};
use datafusion::arrow::compute::take_arrays;
use datafusion::arrow::datatypes::SchemaRef;

use crate::dataflow::change::{ChangeBatch, column_rows};
use crate::dataflow::operator::{Context, Operator};
use crate::error::Result;

pub const INSERT: i16 = 1;
pub const DELETE: i16 = 2;
pub const UPDATE_INSERT: i16 = 3;
pub const UPDATE_DELETE: i16 = 4;

pub struct Changelog {
    /// The relation's primary key columns; empty without one.
    key: Vec<usize>,
    /// The relation's columns, then `changelog_op`.
    schema: SchemaRef,
}

impl Changelog {
    pub fn new(key: Vec<usize>, schema: SchemaRef) -> Changelog {
        Changelog { key, schema }
    }
}

impl Operator for Changelog {
    fn name(&self) -> &'static str {
        "Changelog"
    }

    fn describe(&self) -> String {
        format!("key {:?}", self.key)
    }

    fn on_changes(
        &mut self,
        _input: usize,
        batch: ChangeBatch,
        cx: &mut Context<'_>,
    ) -> Result<()> {
        let rows = batch.rows();
        let diffs = batch.diffs().values();
        let keys = column_rows(rows, &self.key)?;
        let same_key = |i: usize, j: usize| keys.as_ref().is_none_or(|k| k.row(i) == k.row(j));
        let (mut at, mut ops, mut weights) = (Vec::new(), Vec::new(), Vec::new());
        let mut i = 0;
        while i < diffs.len() {
            let update = diffs[i] == -1 && diffs.get(i + 1) == Some(&1) && same_key(i, i + 1);
            if update {
                at.extend([i as u32, i as u32 + 1]);
                ops.extend([UPDATE_DELETE, UPDATE_INSERT]);
                weights.extend([1, 1]);
                i += 2;
                continue;
            }
            at.push(i as u32);
            ops.push(if diffs[i] > 0 { INSERT } else { DELETE });
            weights.push(diffs[i].abs());
            i += 1;
        }
        let mut columns = take_arrays(rows.columns(), &UInt32Array::from(at), None)?;
        columns.push(Arc::new(Int16Array::from(ops)));
        let changes = RecordBatch::try_new(self.schema.clone(), columns)?;
        cx.emit(ChangeBatch::new(changes, Int64Array::from(weights))?);
        Ok(())
    }
}
