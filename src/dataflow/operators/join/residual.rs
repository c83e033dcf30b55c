//! Outer joins whose `ON` keeps a condition beyond the key equalities
//! (`t1 LEFT JOIN t2 ON t1.k = t2.k AND t1.v > t2.v`).
//!
//! Whether a preserved row is padded then depends on the condition, not on
//! the key alone: a row is padded while no row of the other side under its
//! key satisfies the condition with it. So for each key a change touches,
//! the condition is evaluated over the pairs of the change's rows with the
//! other side's rows; and where the other side is preserved, over the pairs
//! of its rows with this side's rows held before the change, to tell which
//! of them gain their first match or lose their last. A key's work is the
//! product of its two sides' rows.

use datafusion::arrow::array::{
    Array, ArrayRef, BooleanArray, Int64Array, RecordBatch, UInt32Array,
};
use datafusion::arrow::compute::{concat_batches, take_arrays};

use super::{Join, group_rows};
use crate::dataflow::change::ChangeBatch;
use crate::dataflow::operator::Context;
use crate::error::{Error, Result};

/// What a change emits, gathered over its keys.
#[derive(Default)]
struct Out {
    /// Arriving rows (by index) and the other side's rows they pair with.
    mine: Vec<u32>,
    theirs: Vec<Vec<u8>>,
    weights: Vec<i64>,
    /// Arriving rows that go out padded, and their weights.
    unmatched: Vec<u32>,
    unmatched_weights: Vec<i64>,
    /// The other side's rows whose padding comes (+) or goes (-).
    repadded: Vec<Vec<u8>>,
    repad_weights: Vec<i64>,
}

impl Join {
    pub(super) fn residual_changes(
        &mut self,
        side: usize,
        batch: ChangeBatch,
        cx: &mut Context<'_>,
    ) -> Result<()> {
        let other = 1 - side;
        let rows = batch.rows();
        let (keys, valid) = self.keys(side, rows, &mut cx.state.errors)?;
        let encoded = self.rows[side].convert_columns(rows.columns())?;
        let (groups, order) = group_rows(&keys, &valid);
        let diff = |row: u32| batch.diffs().value(row as usize);
        let mut out = Out::default();
        if self.preserve[side] {
            // A NULL key never matches: the row stays padded.
            for row in (0..valid.len() as u32).filter(|i| !valid[*i as usize]) {
                out.unmatched.push(row);
                out.unmatched_weights.push(diff(row));
            }
        }
        for (key, range) in &groups {
            let members = &order[range.clone()];
            let held: Vec<(Vec<u8>, i64)> = self
                .held(cx, other, key)?
                .into_iter()
                .filter(|(_, c)| *c != 0)
                .collect();
            let arriving = Self::arriving(rows, members.to_vec())?;
            let pass = self.passing(side, &arriving, &held, cx)?;
            for (m, row) in members.iter().enumerate() {
                let mut matched = 0;
                for (o, (their_row, count)) in held.iter().enumerate() {
                    if pass[m * held.len() + o] {
                        out.mine.push(*row);
                        out.theirs.push(their_row.clone());
                        out.weights.push(diff(*row) * count);
                        matched += count;
                    }
                }
                if self.preserve[side] && matched == 0 {
                    out.unmatched.push(*row);
                    out.unmatched_weights.push(diff(*row));
                }
            }
            if self.preserve[other] && !held.is_empty() {
                let changes: Vec<i64> = members.iter().map(|r| diff(*r)).collect();
                self.repad(&mut out, key, &held, &pass, &changes, side, cx)?;
            }
            for row in members {
                self.count(cx, side, key, encoded.row(*row as usize).data(), diff(*row))?;
            }
        }
        self.emit_residual(side, rows, out, cx)
    }

    /// The other side's rows under `key` that gain their first match or
    /// lose their last as this side's rows change by `changes` (whose pairs
    /// with `held` passed as `pass` says).
    #[allow(clippy::too_many_arguments)]
    fn repad(
        &self,
        out: &mut Out,
        key: &[u8],
        held: &[(Vec<u8>, i64)],
        pass: &[bool],
        changes: &[i64],
        side: usize,
        cx: &mut Context<'_>,
    ) -> Result<()> {
        let mine: Vec<(Vec<u8>, i64)> = self
            .held(cx, side, key)?
            .into_iter()
            .filter(|(_, c)| *c != 0)
            .collect();
        let before_pass = match mine.is_empty() {
            true => Vec::new(),
            false => {
                let rows: Vec<&[u8]> = mine.iter().map(|(r, _)| r.as_slice()).collect();
                let columns = self.decode(side, &rows)?;
                self.passing(side, &columns, held, cx)?
            }
        };
        for (o, (their_row, count)) in held.iter().enumerate() {
            let before: i64 = (0..mine.len())
                .filter(|h| before_pass[h * held.len() + o])
                .map(|h| mine[h].1)
                .sum();
            let delta: i64 = (0..changes.len())
                .filter(|m| pass[m * held.len() + o])
                .map(|m| changes[m])
                .sum();
            let sign = match (before > 0, before + delta > 0) {
                (false, true) => -1,
                (true, false) => 1,
                _ => continue,
            };
            out.repadded.push(their_row.clone());
            out.repad_weights.push(sign * count);
        }
        Ok(())
    }

    /// Whether each pair of one of `mine` (this side's columns) with one of
    /// `theirs` satisfies the residual condition, row-major by `mine`.
    fn passing(
        &self,
        side: usize,
        mine: &[ArrayRef],
        theirs: &[(Vec<u8>, i64)],
        cx: &mut Context<'_>,
    ) -> Result<Vec<bool>> {
        let n = mine.first().map_or(0, |c| c.len());
        if n == 0 || theirs.is_empty() {
            return Ok(Vec::new());
        }
        let left: Vec<u32> = (0..n as u32)
            .flat_map(|m| std::iter::repeat_n(m, theirs.len()))
            .collect();
        let right: Vec<&[u8]> = (0..n)
            .flat_map(|_| theirs.iter().map(|(r, _)| r.as_slice()))
            .collect();
        let mine = take_arrays(mine, &UInt32Array::from(left), None)?;
        let pairs = self.joined(side, mine, self.decode(1 - side, &right)?)?;
        let predicate = self.residual.as_ref().expect("a residual condition");
        let mask = cx.state.errors.evaluate(predicate, &pairs)?;
        let mask = mask
            .as_any()
            .downcast_ref::<BooleanArray>()
            .ok_or_else(|| Error::Internal("a join condition is not boolean".into()))?;
        Ok((0..mask.len())
            .map(|i| mask.is_valid(i) && mask.value(i))
            .collect())
    }

    fn emit_residual(
        &self,
        side: usize,
        rows: &RecordBatch,
        out: Out,
        cx: &mut Context<'_>,
    ) -> Result<()> {
        let other = 1 - side;
        let mut batches = Vec::new();
        let mut weights = out.weights;
        if !out.mine.is_empty() {
            let theirs: Vec<&[u8]> = out.theirs.iter().map(Vec::as_slice).collect();
            let mine = Self::arriving(rows, out.mine)?;
            batches.push(self.joined(side, mine, self.decode(other, &theirs)?)?);
        }
        if !out.repadded.is_empty() {
            let held: Vec<&[u8]> = out.repadded.iter().map(Vec::as_slice).collect();
            batches.push(self.padded(other, self.decode(other, &held)?)?);
            weights.extend(out.repad_weights);
        }
        if !out.unmatched.is_empty() {
            weights.extend(out.unmatched_weights);
            batches.push(self.padded(side, Self::arriving(rows, out.unmatched)?)?);
        }
        if batches.is_empty() {
            return Ok(());
        }
        let joined = concat_batches(&self.schema, &batches)?;
        cx.emit(ChangeBatch::new(joined, Int64Array::from(weights))?);
        Ok(())
    }
}
