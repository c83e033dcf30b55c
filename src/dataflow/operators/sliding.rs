//! A temporal filter. `WHERE t > now() - d`: a row is in while the
//! processing time of the epoch is before `t + d`, and is retracted at the
//! first epoch at or after it. `WHERE t < now() + d`: a row is held until
//! the epoch's time reaches `t - d`, then sent, for good. Rows are judged at
//! the end of the epoch that brings them, against that epoch's time, so a
//! replayed epoch judges them alike.
//!
//! # State layout (under the operator's prefix)
//! - time it leaves or enters (i64, order-preserving) ++ row (row format)
//!   -> count (i64 LE): the rows in, or the rows waiting

use std::collections::BTreeMap;
use std::sync::Arc;

use datafusion::arrow::array::Array;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::row::{RowConverter, SortField};
use datafusion::physical_expr::PhysicalExpr;

use crate::dataflow::change::{Barrier, ChangeBatch};
use crate::dataflow::operator::{Context, Operator};
use crate::dataflow::state::read_count;
use crate::error::Result;
use crate::state::keys::{ordered, prefix_end};

/// When a row is in, as a shift of its time, in microseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Bound {
    /// `t > now() - d`: in from the start, out once now() reaches `t + shift`.
    Leaves { shift: i64 },
    /// `t < now() + d`: in once now() reaches `t - shift`, for good.
    Enters { shift: i64 },
}

pub struct Sliding {
    /// Each row's time, as the filter compares it.
    time: Arc<dyn PhysicalExpr>,
    bound: Bound,
    schema: SchemaRef,
    rows: RowConverter,
    /// This epoch's changes, judged at its barrier.
    pending: Vec<ChangeBatch>,
}

impl Sliding {
    pub fn new(time: Arc<dyn PhysicalExpr>, bound: Bound, schema: SchemaRef) -> Result<Sliding> {
        let fields = schema
            .fields()
            .iter()
            .map(|f| SortField::new(f.data_type().clone()))
            .collect();
        Ok(Sliding {
            time,
            bound,
            rows: RowConverter::new(fields)?,
            schema,
            pending: Vec::new(),
        })
    }

    /// The time at which a row at `time` leaves or enters.
    fn turn(&self, time: i64) -> i64 {
        match self.bound {
            Bound::Leaves { shift } => time.saturating_add(shift),
            Bound::Enters { shift } => time.saturating_sub(shift),
        }
    }

    /// This epoch's rows: those in at `now` go on, and each row that will
    /// leave or enter later is kept under the time it does.
    fn admit(&mut self, now: i64, cx: &mut Context<'_>) -> Result<BTreeMap<Vec<u8>, i64>> {
        let mut out: BTreeMap<Vec<u8>, i64> = BTreeMap::new();
        for batch in std::mem::take(&mut self.pending) {
            let rows = batch.rows();
            let values = cx.state.errors.evaluate(&self.time, rows)?;
            let times = crate::catalog::micros(&values)?;
            let encoded = self.rows.convert_columns(rows.columns())?;
            for (i, diff) in batch.diffs().values().iter().enumerate() {
                // NULL compares as false: never in.
                if times.is_null(i) {
                    continue;
                }
                let turn = self.turn(times.value(i));
                let passed = turn <= now;
                let leaves = matches!(self.bound, Bound::Leaves { .. });
                // Out already: if it was in, its leaving took it back.
                if leaves && passed {
                    continue;
                }
                let row = encoded.row(i).as_ref().to_vec();
                // In now (a retraction too): it goes on.
                if leaves || passed {
                    *out.entry(row.clone()).or_default() += diff;
                }
                // It leaves or enters later: kept under that time.
                if !passed {
                    let key = cx.key(&[ordered(turn).as_slice(), &row].concat());
                    cx.state.add_count(key, *diff)?;
                }
            }
        }
        Ok(out)
    }

    /// Rows whose time to leave (taken back) or enter (sent) has come.
    fn turn_due(
        &self,
        now: i64,
        out: &mut BTreeMap<Vec<u8>, i64>,
        cx: &mut Context<'_>,
    ) -> Result<()> {
        let sign = match self.bound {
            Bound::Leaves { .. } => -1,
            Bound::Enters { .. } => 1,
        };
        let lower = cx.prefix.to_vec();
        let upper = cx.key(&ordered(now.saturating_add(1)));
        let upper = upper.min(prefix_end(cx.prefix));
        for (key, value) in cx.state.scan(&lower, &upper)? {
            let count = read_count(&value)?;
            if count != 0 {
                *out.entry(key[cx.prefix.len() + 8..].to_vec()).or_default() += sign * count;
            }
            cx.state.delete(key);
        }
        Ok(())
    }

    fn send(&self, rows: BTreeMap<Vec<u8>, i64>, cx: &mut Context<'_>) -> Result<()> {
        let rows = rows.into_iter().filter(|(_, c)| *c != 0).collect();
        super::hold::send_rows(&self.rows, &self.schema, rows, cx)
    }
}

impl Operator for Sliding {
    fn name(&self) -> &'static str {
        "TemporalFilter"
    }

    fn describe(&self) -> String {
        match self.bound {
            Bound::Leaves { shift } => format!("{} + {shift} µs > now()", self.time),
            Bound::Enters { shift } => format!("{} - {shift} µs <= now()", self.time),
        }
    }

    fn on_changes(
        &mut self,
        _input: usize,
        batch: ChangeBatch,
        _cx: &mut Context<'_>,
    ) -> Result<()> {
        if !batch.is_empty() {
            self.pending.push(batch);
        }
        Ok(())
    }

    fn on_barrier(&mut self, barrier: Barrier, cx: &mut Context<'_>) -> Result<()> {
        let mut out = self.admit(barrier.now, cx)?;
        self.turn_due(barrier.now, &mut out, cx)?;
        self.send(out, cx)
    }
}
