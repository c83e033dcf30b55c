//! The join's as-of mode (`ASOF [LEFT] JOIN`): each left row joins the one
//! right row under its key whose value is closest to its own by the
//! condition's inequality ([`Closest`]); ties go to the right row that
//! sorts first (by its columns, ascending, NULLs first).
//!
//! Both sides keep their rows as a regular join does. A left change looks
//! its partner up among the right rows held under its key. A right change
//! may move the partner of any left row under its key: each such row's
//! partner is chosen before and after the change, and where they differ the
//! old pair is retracted and the new one emitted. A key's work is the
//! product of its two sides' rows, which suits the as-of joins of a series
//! against a slower one.

use std::collections::BTreeMap;
use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, Int64Array, RecordBatch};
use datafusion::arrow::compute::concat_batches;
use datafusion::arrow::row::{RowConverter, Rows, SortField};
use datafusion::physical_expr::PhysicalExpr;

use super::{Join, group_rows};
use crate::dataflow::asof::Closest;
use crate::dataflow::change::ChangeBatch;
use crate::dataflow::operator::Context;
use crate::error::Result;

/// The inequality of an as-of join, over physical expressions.
pub struct Asof {
    /// The inequality's operand over left rows.
    pub left: Arc<dyn PhysicalExpr>,
    /// Its operand over right rows, of the same type.
    pub right: Arc<dyn PhysicalExpr>,
    pub closest: Closest,
    /// Encodes the operands' values so that their bytes compare as they do.
    values: RowConverter,
}

impl Asof {
    pub fn new(
        left: Arc<dyn PhysicalExpr>,
        right: Arc<dyn PhysicalExpr>,
        closest: Closest,
        left_schema: &datafusion::arrow::datatypes::Schema,
    ) -> Result<Asof> {
        let values = RowConverter::new(vec![SortField::new(left.data_type(left_schema)?)])?;
        Ok(Asof {
            left,
            right,
            closest,
            values,
        })
    }

    /// Whether a right value can join a left one.
    fn admits(&self, left: &[u8], right: &[u8]) -> bool {
        match self.closest {
            Closest::Above { strict } => right > left || (!strict && right == left),
            Closest::Below { strict } => right < left || (!strict && right == left),
        }
    }

    /// Whether candidate `a` (value, row) is closer than `b`.
    fn closer(&self, a: (&[u8], &[u8]), b: (&[u8], &[u8])) -> bool {
        match self.closest {
            Closest::Above { .. } => a < b,
            Closest::Below { .. } => a.0 > b.0 || (a.0 == b.0 && a.1 < b.1),
        }
    }

    /// The candidate closest to `left`, by index.
    fn pick(&self, left: Option<&[u8]>, candidates: &[(Vec<u8>, Vec<u8>)]) -> Option<usize> {
        let left = left?;
        let mut best: Option<usize> = None;
        for (i, (value, row)) in candidates.iter().enumerate() {
            if !self.admits(left, value) {
                continue;
            }
            let better = best.is_none_or(|b| {
                let (bv, br) = &candidates[b];
                self.closer((value, row), (bv, br))
            });
            if better {
                best = Some(i);
            }
        }
        best
    }
}

/// Pairs and padded left rows to emit, as encoded rows.
#[derive(Default)]
struct Out {
    lefts: Vec<Vec<u8>>,
    rights: Vec<Vec<u8>>,
    weights: Vec<i64>,
    padded: Vec<Vec<u8>>,
    padded_weights: Vec<i64>,
}

impl Join {
    /// Make this join an as-of join by `asof`.
    pub fn asof(mut self, asof: Asof) -> Join {
        self.asof = Some(asof);
        self
    }

    pub(super) fn asof_changes(
        &mut self,
        side: usize,
        batch: ChangeBatch,
        cx: &mut Context<'_>,
    ) -> Result<()> {
        let rows = batch.rows();
        let (keys, valid) = self.keys(side, rows, &mut cx.state.errors)?;
        let encoded = self.rows[side].convert_columns(rows.columns())?;
        let (groups, order) = group_rows(&keys, &valid);
        let diff = |row: u32| batch.diffs().value(row as usize);
        let mut out = Out::default();
        if side == 0 {
            let values = self.values(0, rows, cx)?;
            for i in (0..valid.len()).filter(|i| !valid[*i]) {
                self.pair(&mut out, encoded.row(i).data(), None, diff(i as u32));
            }
            for (key, range) in &groups {
                let candidates = self.candidates(&self.held(cx, 1, key)?, cx)?;
                for row in &order[range.clone()] {
                    let value = valid_value(&values, *row as usize);
                    let partner = self
                        .asof_ref()
                        .pick(value, &candidates)
                        .map(|i| candidates[i].1.as_slice());
                    self.pair(
                        &mut out,
                        encoded.row(*row as usize).data(),
                        partner,
                        diff(*row),
                    );
                }
            }
        } else {
            for (key, range) in &groups {
                let members: Vec<(&[u8], i64)> = order[range.clone()]
                    .iter()
                    .map(|r| (encoded.row(*r as usize).data(), diff(*r)))
                    .collect();
                self.repartner(&mut out, key, &members, cx)?;
            }
        }
        for (key, range) in &groups {
            for row in &order[range.clone()] {
                let encoded_row = encoded.row(*row as usize).data();
                self.count(cx, side, key, encoded_row, diff(*row))?;
            }
        }
        self.emit_asof(out, cx)
    }

    fn asof_ref(&self) -> &Asof {
        self.asof.as_ref().expect("an as-of join")
    }

    /// A left row joined with its partner, or padded if it has none and the
    /// join is a LEFT one.
    fn pair(&self, out: &mut Out, left: &[u8], right: Option<&[u8]>, weight: i64) {
        match right {
            Some(right) => {
                out.lefts.push(left.to_vec());
                out.rights.push(right.to_vec());
                out.weights.push(weight);
            }
            None if self.preserve[0] => {
                out.padded.push(left.to_vec());
                out.padded_weights.push(weight);
            }
            None => {}
        }
    }

    /// The partners of the left rows under `key` before and after the
    /// right rows `members` change; pairs that changed are retracted and
    /// emitted.
    fn repartner(
        &self,
        out: &mut Out,
        key: &[u8],
        members: &[(&[u8], i64)],
        cx: &mut Context<'_>,
    ) -> Result<()> {
        let lefts = self.held(cx, 0, key)?;
        if lefts.is_empty() {
            return Ok(());
        }
        let before = self.held(cx, 1, key)?;
        let mut after: BTreeMap<Vec<u8>, i64> = before.iter().cloned().collect();
        for (row, diff) in members {
            *after.entry(row.to_vec()).or_default() += diff;
        }
        let after: Vec<(Vec<u8>, i64)> = after.into_iter().filter(|(_, c)| *c > 0).collect();
        let (before, after) = (self.candidates(&before, cx)?, self.candidates(&after, cx)?);
        let held: Vec<&[u8]> = lefts.iter().map(|(r, _)| r.as_slice()).collect();
        let columns = self.decode(0, &held)?;
        let batch = RecordBatch::try_new(self.sides[0].schema.clone(), columns)?;
        let values = self.values(0, &batch, cx)?;
        let asof = self.asof_ref();
        for (i, (row, count)) in lefts.iter().enumerate() {
            let value = valid_value(&values, i);
            let was = asof.pick(value, &before).map(|b| before[b].1.as_slice());
            let is = asof.pick(value, &after).map(|a| after[a].1.as_slice());
            if was != is {
                self.pair(out, row, was, -count);
                self.pair(out, row, is, *count);
            }
        }
        Ok(())
    }

    /// The inequality operand's values of a side's rows, encoded to
    /// compare; `None` where NULL.
    fn values(
        &self,
        side: usize,
        rows: &RecordBatch,
        cx: &mut Context<'_>,
    ) -> Result<(Rows, Vec<bool>)> {
        let asof = self.asof_ref();
        let expr = if side == 0 { &asof.left } else { &asof.right };
        let column: ArrayRef = cx.state.errors.evaluate(expr, rows)?;
        let valid = (0..column.len()).map(|i| column.is_valid(i)).collect();
        Ok((asof.values.convert_columns(&[column])?, valid))
    }

    /// Held right rows with a positive count, each with its operand value:
    /// (value, row), rows with a NULL value left out.
    fn candidates(
        &self,
        held: &[(Vec<u8>, i64)],
        cx: &mut Context<'_>,
    ) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        let rows: Vec<&[u8]> = held
            .iter()
            .filter(|(_, c)| *c > 0)
            .map(|(r, _)| r.as_slice())
            .collect();
        if rows.is_empty() {
            return Ok(Vec::new());
        }
        let columns = self.decode(1, &rows)?;
        let batch = RecordBatch::try_new(self.sides[1].schema.clone(), columns)?;
        let (values, valid) = self.values(1, &batch, cx)?;
        Ok(rows
            .iter()
            .enumerate()
            .filter(|(i, _)| valid[*i])
            .map(|(i, row)| (values.row(i).data().to_vec(), row.to_vec()))
            .collect())
    }

    fn emit_asof(&self, out: Out, cx: &mut Context<'_>) -> Result<()> {
        let mut batches = Vec::new();
        let mut weights = out.weights;
        if !out.lefts.is_empty() {
            let lefts: Vec<&[u8]> = out.lefts.iter().map(Vec::as_slice).collect();
            let rights: Vec<&[u8]> = out.rights.iter().map(Vec::as_slice).collect();
            batches.push(self.joined(0, self.decode(0, &lefts)?, self.decode(1, &rights)?)?);
        }
        if !out.padded.is_empty() {
            let padded: Vec<&[u8]> = out.padded.iter().map(Vec::as_slice).collect();
            batches.push(self.padded(0, self.decode(0, &padded)?)?);
            weights.extend(out.padded_weights);
        }
        if batches.is_empty() {
            return Ok(());
        }
        let rows = concat_batches(&self.schema, &batches)?;
        cx.emit(ChangeBatch::new(rows, Int64Array::from(weights))?);
        Ok(())
    }
}

fn valid_value(values: &(Rows, Vec<bool>), i: usize) -> Option<&[u8]> {
    values.1[i].then(|| values.0.row(i).data())
}
