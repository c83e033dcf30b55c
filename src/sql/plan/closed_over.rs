//! `EMIT ON WINDOW CLOSE` over window functions, as RisingWave has it:
//!
//! ```sql
//! SELECT tm, foo, row_number() OVER (PARTITION BY bar ORDER BY tm) AS rn
//! FROM t EMIT ON WINDOW CLOSE
//! ```
//!
//! A row comes out once nothing can change its answer: its event time is
//! behind the watermark, and so are the rows its frame reaches after it
//! (`lead(x, 2)`, `ROWS BETWEEN ... AND 1 FOLLOWING`). The input rows are
//! held until the watermark passes their time, so the window functions see
//! each partition's rows in event-time order and only once they are final;
//! a row whose frame reaches `k` rows ahead waits, behind a filter, for
//! `k` final rows after it, counted by a hidden `lead(1, k)` over the same
//! window. Rows of one event time are released together, so peers share a
//! frame as they should.
//!
//! Functions that read the whole partition (`ntile`, `percent_rank`,
//! `cume_dist`, frames to UNBOUNDED FOLLOWING) would never be final, and
//! RANGE or GROUPS frames ending after the current row would need time
//! rather than rows ahead: these are refused.

use std::sync::Arc;

use datafusion::arrow::datatypes::Field;
use datafusion::common::{DFSchema, ScalarValue};
use datafusion::logical_expr::expr::{Sort, WindowFunction};
use datafusion::logical_expr::{
    Expr, LogicalPlan, Window, WindowFrameBound, WindowFrameUnits, WindowFunctionDefinition,
};
use datafusion::physical_expr::expressions::{Column as PhysicalColumn, IsNotNullExpr};

use super::{Planner, arrow_schema, column_exprs, groups_anywhere, shared_partition};
use crate::catalog::nullable;
use crate::dataflow::operators::{Filter, Hold, Project};
use crate::dataflow::window::WINDOW_END;
use crate::error::{Error, Result};
use crate::sql::window::{bound_of, trace_column};

impl Planner<'_> {
    /// The window `w` under `EMIT ON WINDOW CLOSE`, if the view emits so
    /// and nothing beneath has taken it.
    pub(super) fn closed_over(&mut self, w: &Window, plan: &LogicalPlan) -> Result<Option<usize>> {
        // A windowed aggregate beneath takes it, and the window reads its
        // final rows.
        if self.emit != crate::catalog::Emit::OnWindowClose
            || self.on_close_taken
            || groups_anywhere(&w.input)
        {
            return Ok(None);
        }
        self.on_close_taken = true;
        // Partitions that are windows close whole; others row by row.
        let (time, offset, ahead) = match self.closing_window(w)? {
            Some((column, offset)) => (column, offset, vec![0; w.window_expr.len()]),
            None => {
                let ahead = w
                    .window_expr
                    .iter()
                    .map(rows_ahead)
                    .collect::<Result<Vec<_>>>()?;
                (self.event_time_order(w)?, 0, ahead)
            }
        };
        let input = self.node(&w.input)?;
        let held = Hold::new(time, arrow_schema(&w.input))?
            .offset_by(offset)
            .dropping_late(&self.view_name);
        let input = self.push(Box::new(held), vec![input]);

        let mut exprs = w.window_expr.clone();
        for (expr, k) in w.window_expr.iter().zip(&ahead) {
            if *k > 0 {
                exprs.push(lead_marker(expr, *k)?);
            }
        }
        let output = widened(plan, exprs.len() - w.window_expr.len());
        let mut node = self.window_over(w, &exprs, output.clone(), input)?;
        let shown = plan.schema().fields().len();
        for marker in shown..output.fields().len() {
            let column = PhysicalColumn::new(output.field(marker).name(), marker);
            let complete = Arc::new(IsNotNullExpr::new(Arc::new(column)));
            node = self.push(Box::new(Filter::new(complete)), vec![node]);
        }
        if output.fields().len() > shown {
            let project = Project::new(column_exprs(&output, 0..shown), arrow_schema(plan));
            node = self.push(Box::new(project), vec![node]);
        }
        Ok(Some(node))
    }

    /// A window bound every window is partitioned by (`PARTITION BY
    /// window_start` over TUMBLE): its column, and what to add to it for
    /// the time its window closes at, less a microsecond.
    fn closing_window(&self, w: &Window) -> Result<Option<(usize, i64)>> {
        if !self.is_append_only(&w.input) {
            return Ok(None);
        }
        for expr in shared_partition(&w.window_expr) {
            let Expr::Column(c) = &expr else { continue };
            let Some((table, at)) = trace_column(&w.input, c) else {
                continue;
            };
            if !table.relation.def.has_watermark() {
                continue;
            }
            let offset = match bound_of(&table, at) {
                Some(WINDOW_END) => -1,
                Some(_) => match table.spec.kind.longest() {
                    Some(longest) => longest - 1,
                    None => continue,
                },
                None => continue,
            };
            return Ok(Some((w.input.schema().index_of_column(c)?, offset)));
        }
        Ok(None)
    }

    /// The input column every window orders by first, ascending: the
    /// event time of an input that only grows.
    fn event_time_order(&self, w: &Window) -> Result<usize> {
        if !self.is_append_only(&w.input) {
            return Err(Error::NotSupported(
                "EMIT ON WINDOW CLOSE over window functions needs an input that only grows: an append-only table or source, or a view of them that never retracts".into(),
            ));
        }
        let firsts: Vec<Option<&Sort>> = w
            .window_expr
            .iter()
            .map(|e| function(e).and_then(|f| f.params.order_by.first()))
            .collect();
        let time = match firsts.first() {
            Some(Some(Sort {
                expr: Expr::Column(c),
                asc: true,
                ..
            })) if firsts.iter().all(|f| *f == firsts[0]) && self.is_event_time(&w.input, c) => {
                w.input.schema().index_of_column(c)?
            }
            _ => {
                return Err(Error::NotSupported(
                    "EMIT ON WINDOW CLOSE over window functions needs every OVER (...) to ORDER BY the input's event-time column (the one its WATERMARK FOR names) first, ascending".into(),
                ));
            }
        };
        Ok(time)
    }
}

fn function(expr: &Expr) -> Option<&WindowFunction> {
    match expr {
        Expr::Alias(a) => function(&a.expr),
        Expr::WindowFunction(f) => Some(f),
        _ => None,
    }
}

/// How many rows after the current one the answer for a row reads.
fn rows_ahead(expr: &Expr) -> Result<u64> {
    let Some(f) = function(expr) else {
        return Err(Error::Internal(format!(
            "window expression expected, found {expr}"
        )));
    };
    let name = f.fun.name();
    if matches!(name, "ntile" | "percent_rank" | "cume_dist") {
        return Err(whole_partition(&format!("{name}()")));
    }
    if name == "lead" {
        return match f.params.args.get(1) {
            None => Ok(1),
            Some(Expr::Literal(value, _)) => offset(value).ok_or_else(|| {
                Error::NotSupported(format!(
                    "EMIT ON WINDOW CLOSE needs lead()'s offset as a non-negative constant; found {value}"
                ))
            }),
            Some(other) => Err(Error::NotSupported(format!(
                "EMIT ON WINDOW CLOSE needs lead()'s offset as a constant; found {other}"
            ))),
        };
    }
    if !uses_frame(&f.fun) {
        return Ok(0);
    }
    let frame = &f.params.window_frame;
    match (&frame.end_bound, frame.units) {
        (WindowFrameBound::Following(v), _) if v.is_null() => {
            Err(whole_partition("a frame to UNBOUNDED FOLLOWING"))
        }
        (WindowFrameBound::Following(v), WindowFrameUnits::Rows) => {
            offset(v).ok_or_else(|| Error::Internal(format!("frame offset {v}")))
        }
        (WindowFrameBound::Following(v), units) if offset(v) != Some(0) => {
            Err(Error::NotSupported(format!(
                "EMIT ON WINDOW CLOSE takes frames that end some ROWS after the current row, not {units} FOLLOWING"
            )))
        }
        _ => Ok(0),
    }
}

/// Ranking and offset functions ignore the frame; aggregates and
/// `first_value`, `last_value`, `nth_value` read it.
fn uses_frame(fun: &WindowFunctionDefinition) -> bool {
    match fun {
        WindowFunctionDefinition::AggregateUDF(_) => true,
        WindowFunctionDefinition::WindowUDF(udf) => {
            matches!(udf.name(), "first_value" | "last_value" | "nth_value")
        }
    }
}

fn offset(value: &ScalarValue) -> Option<u64> {
    match value.cast_to(&datafusion::arrow::datatypes::DataType::Int64) {
        Ok(ScalarValue::Int64(Some(v))) => u64::try_from(v).ok(),
        Ok(ScalarValue::Int64(None)) => Some(1),
        _ => None,
    }
}

fn whole_partition(what: &str) -> Error {
    Error::NotSupported(format!(
        "EMIT ON WINDOW CLOSE cannot emit {what}: it reads the whole partition, which never closes"
    ))
}

/// `lead(1, k)` over the window of `expr`: NULL until `k` rows follow.
fn lead_marker(expr: &Expr, k: u64) -> Result<Expr> {
    let Some(f) = function(expr) else {
        return Err(Error::Internal("window expression expected".into()));
    };
    let lead = datafusion::functions_window::lead_lag::lead(
        Expr::Literal(ScalarValue::Int64(Some(1)), None),
        Some(i64::try_from(k).map_err(|_| Error::Internal("lead offset".into()))?),
        None,
    );
    let Expr::WindowFunction(mut marker) = lead else {
        return Err(Error::Internal("lead() is not a window function".into()));
    };
    marker.params.partition_by = f.params.partition_by.clone();
    marker.params.order_by = f.params.order_by.clone();
    Ok(Expr::WindowFunction(marker).alias(format!("__weir_complete_{k}")))
}

/// The window's output schema with `markers` hidden columns after it.
fn widened(plan: &LogicalPlan, markers: usize) -> datafusion::arrow::datatypes::SchemaRef {
    let shown: &DFSchema = plan.schema();
    let mut fields: Vec<Field> = shown.fields().iter().map(|f| f.as_ref().clone()).collect();
    for i in 0..markers {
        fields.push(Field::new(
            format!("__weir_complete{i}"),
            datafusion::arrow::datatypes::DataType::Int64,
            true,
        ));
    }
    nullable(&datafusion::arrow::datatypes::Schema::new(fields))
}
