//! A temporal filter, `WHERE t > now() - keep`: a row is in while the
//! processing time of the epoch is before `t + keep`, and is retracted at
//! the first epoch at or after it. Rows are judged at the end of the epoch
//! that brings them, against that epoch's time, so a replayed epoch judges
//! them alike.
//!
//! # State layout (under the operator's prefix)
//! - time it leaves (i64, order-preserving) ++ row (row format) -> count (i64 LE)

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

pub struct Sliding {
    /// Each row's time, as the filter compares it.
    time: Arc<dyn PhysicalExpr>,
    /// How long after its time a row stays in, in microseconds; one more
    /// for `>=`, where the boundary itself is still in.
    keep_micros: i64,
    schema: SchemaRef,
    rows: RowConverter,
    /// This epoch's changes, judged at its barrier.
    pending: Vec<ChangeBatch>,
}

impl Sliding {
    pub fn new(
        time: Arc<dyn PhysicalExpr>,
        keep_micros: i64,
        inclusive: bool,
        schema: SchemaRef,
    ) -> Result<Sliding> {
        let fields = schema
            .fields()
            .iter()
            .map(|f| SortField::new(f.data_type().clone()))
            .collect();
        Ok(Sliding {
            time,
            keep_micros: keep_micros + i64::from(inclusive),
            rows: RowConverter::new(fields)?,
            schema,
            pending: Vec::new(),
        })
    }

    /// Rows still in at `now` go on and are kept until they leave.
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
                let leaves = times.value(i).saturating_add(self.keep_micros);
                // Out already: if it was in, its leaving took it back.
                if leaves <= now {
                    continue;
                }
                let row = encoded.row(i).as_ref().to_vec();
                *out.entry(row.clone()).or_default() += diff;
                let key = cx.key(&[ordered(leaves).as_slice(), &row].concat());
                cx.state.add_count(key, *diff)?;
            }
        }
        Ok(out)
    }

    /// Rows whose time to leave has come, taken back.
    fn expire(
        &self,
        now: i64,
        out: &mut BTreeMap<Vec<u8>, i64>,
        cx: &mut Context<'_>,
    ) -> Result<()> {
        let lower = cx.prefix.to_vec();
        let upper = cx.key(&ordered(now.saturating_add(1)));
        let upper = upper.min(prefix_end(cx.prefix));
        for (key, value) in cx.state.scan(&lower, &upper)? {
            let count = read_count(&value)?;
            if count != 0 {
                *out.entry(key[cx.prefix.len() + 8..].to_vec()).or_default() -= count;
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
        format!("{} + {} µs > now()", self.time, self.keep_micros)
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
        self.expire(barrier.now, &mut out, cx)?;
        self.send(out, cx)
    }
}
