//! Errors a view's expressions raise on single rows (division by zero, a
//! failed cast, an overflow), and what the view does about them.
//!
//! Expressions run on whole batches, so one bad row fails the batch. By
//! default (`on_error = 'null'`) the batch is then evaluated row by row:
//! on each failing row the innermost part that fails yields NULL and the rest
//! of the expression goes on from there (`10 / 0 IS NULL` is true), the view
//! carries on, and
//! the error is kept in the `view_errors` system table with the epoch that
//! met it. The evaluation is deterministic, so a row retracted later yields
//! the same NULL and cancels what it added. With `on_error = 'fail'` the
//! first error stops the view, keeping its SQLSTATE for whoever reads it.

use std::collections::HashMap;
use std::sync::Arc;

use datafusion::arrow::array::{ArrayRef, Int64Array, RecordBatch, StringArray, UInt32Array};
use datafusion::arrow::compute::{concat, take_record_batch};
use datafusion::arrow::datatypes::DataType;
use datafusion::common::ScalarValue;
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_expr::expressions::Literal;

use crate::catalog::{Table, TableDef};
use crate::dataflow::late::rows_as_json;
use crate::error::{Error, Result};

pub use crate::catalog::{OnError, VIEW_ERRORS};

/// Why a view stopped, as its readers are told.
#[derive(Debug, Clone, PartialEq)]
pub struct Failure {
    pub sqlstate: &'static str,
    pub message: String,
}

impl Failure {
    pub fn of(view: &str, e: &Error) -> Failure {
        Failure {
            sqlstate: e.sqlstate(),
            message: format!("materialized view \"{view}\" failed: {}", e.message()),
        }
    }

    pub fn to_error(&self) -> Error {
        Error::ViewFailed {
            sqlstate: self.sqlstate,
            message: self.message.clone(),
        }
    }
}

/// The views that stopped, by id: the runtime sets them, reads consult them.
#[derive(Debug, Clone, Default)]
pub struct Failures(Arc<parking_lot::RwLock<HashMap<u64, Failure>>>);

impl Failures {
    pub fn get(&self, view: u64) -> Option<Failure> {
        self.0.read().get(&view).cloned()
    }

    pub fn set(&self, view: u64, failure: Failure) {
        self.0.write().insert(view, failure);
    }

    pub fn clear(&self, view: u64) {
        self.0.write().remove(&view);
    }
}

/// One row an expression failed on.
#[derive(Debug, Clone, PartialEq)]
pub struct RowError {
    pub view: String,
    pub sqlstate: &'static str,
    pub message: String,
    /// The operator's input row, as a JSON object.
    pub row: String,
}

/// A dataflow's policy and the row errors of the current epoch.
#[derive(Debug, Default)]
pub struct RowErrors {
    /// The view and what it does on an error; none fails at once (tests).
    policy: Option<(Arc<str>, OnError)>,
    pub caught: Vec<RowError>,
}

impl RowErrors {
    pub fn new(view: Arc<str>, on_error: OnError) -> RowErrors {
        RowErrors {
            policy: Some((view, on_error)),
            caught: Vec::new(),
        }
    }

    /// `expr` over every row of `rows`; rows it fails on get NULL when
    /// the policy allows, and are recorded.
    pub fn evaluate(
        &mut self,
        expr: &Arc<dyn PhysicalExpr>,
        rows: &RecordBatch,
    ) -> Result<ArrayRef> {
        match evaluate(expr.as_ref(), rows) {
            Ok(array) => Ok(array),
            Err(e) => match &self.policy {
                Some((view, OnError::Null)) => {
                    let view = view.clone();
                    self.row_by_row(&view, expr, rows, e)
                }
                Some((view, OnError::Fail)) => Err(Failure::of(view, &e).to_error()),
                None => Err(e),
            },
        }
    }

    fn row_by_row(
        &mut self,
        view: &str,
        expr: &Arc<dyn PhysicalExpr>,
        rows: &RecordBatch,
        batch_error: Error,
    ) -> Result<ArrayRef> {
        let mut parts = Vec::with_capacity(rows.num_rows());
        let mut failed = Vec::new();
        for i in 0..rows.num_rows() {
            let row = rows.slice(i, 1);
            match evaluate(expr.as_ref(), &row) {
                Ok(value) => parts.push(value),
                Err(e) => {
                    failed.push((i as u32, e));
                    parts.push(evaluate_nulling_failures(expr, &row)?);
                }
            }
        }
        if parts.is_empty() {
            return Err(batch_error);
        }
        self.record(view, rows, failed)?;
        let parts: Vec<&dyn datafusion::arrow::array::Array> =
            parts.iter().map(|p| p.as_ref()).collect();
        Ok(concat(&parts)?)
    }

    /// Keep the failed rows, written as JSON together.
    fn record(&mut self, view: &str, rows: &RecordBatch, failed: Vec<(u32, Error)>) -> Result<()> {
        let indices = UInt32Array::from_iter_values(failed.iter().map(|(i, _)| *i));
        let json = rows_as_json(&take_record_batch(rows, &indices)?)?;
        for ((_, e), row) in failed.into_iter().zip(json) {
            tracing::debug!(view, code = e.sqlstate(), cause = %e, "a view's expression failed on a row");
            self.caught.push(RowError {
                view: view.to_string(),
                sqlstate: e.sqlstate(),
                message: e.message(),
                row,
            });
        }
        Ok(())
    }
}

fn evaluate(expr: &dyn PhysicalExpr, rows: &RecordBatch) -> Result<ArrayRef> {
    Ok(expr.evaluate(rows)?.into_array(rows.num_rows())?)
}

/// `expr` over one row, each part that fails on it replaced by NULL from
/// the leaves up, so a part that tests for NULL or skips the value (IS NULL,
/// COALESCE) still decides the result, as RisingWave's non-strict mode does.
fn evaluate_nulling_failures(expr: &Arc<dyn PhysicalExpr>, row: &RecordBatch) -> Result<ArrayRef> {
    let schema = row.schema();
    let lenient = Arc::clone(expr)
        .transform_up(|part| {
            if evaluate(part.as_ref(), row).is_ok() {
                return Ok(Transformed::no(part));
            }
            let null = ScalarValue::try_from(part.data_type(&schema)?)?;
            let null: Arc<dyn PhysicalExpr> = Arc::new(Literal::new(null));
            Ok(Transformed::yes(null))
        })?
        .data;
    evaluate(lenient.as_ref(), row)
}

/// The `view_errors` table's definition, created at first start.
pub fn definition(id: u64) -> TableDef {
    TableDef::system(
        id,
        VIEW_ERRORS,
        &[
            ("view", DataType::Utf8),
            ("epoch", DataType::Int64),
            ("sqlstate", DataType::Utf8),
            ("message", DataType::Utf8),
            ("row_json", DataType::Utf8),
        ],
    )
}

/// Row errors as rows of the table, met in `epoch`.
pub fn batch(table: &Table, errors: &[RowError], epoch: u64) -> Result<RecordBatch> {
    let text = |f: fn(&RowError) -> &str| -> ArrayRef {
        Arc::new(StringArray::from_iter_values(errors.iter().map(f)))
    };
    let columns: Vec<ArrayRef> = vec![
        text(|e| &e.view),
        Arc::new(Int64Array::from(vec![epoch as i64; errors.len()])),
        text(|e| e.sqlstate),
        text(|e| &e.message),
        text(|e| &e.row),
    ];
    Ok(RecordBatch::try_new(table.schema.clone(), columns)?)
}

#[cfg(test)]
mod tests {
    use datafusion::arrow::array::{Array, AsArray};
    use datafusion::arrow::datatypes::{Field, Int64Type, Schema};
    use datafusion::logical_expr::Operator as BinaryOp;
    use datafusion::physical_expr::expressions::{BinaryExpr, Column, IsNullExpr};

    use super::*;

    fn rows() -> RecordBatch {
        let schema = Arc::new(Schema::new(vec![
            Field::new("a", DataType::Int64, true),
            Field::new("b", DataType::Int64, true),
        ]));
        RecordBatch::try_new(
            schema,
            vec![
                Arc::new(Int64Array::from(vec![6, 7, 8])),
                Arc::new(Int64Array::from(vec![2, 0, 4])),
            ],
        )
        .expect("batch")
    }

    fn divide() -> Arc<dyn PhysicalExpr> {
        Arc::new(BinaryExpr::new(
            Arc::new(Column::new("a", 0)),
            BinaryOp::Divide,
            Arc::new(Column::new("b", 1)),
        ))
    }

    #[test]
    fn a_failing_row_yields_null_and_is_recorded() {
        let mut errors = RowErrors::new("v".into(), OnError::Null);
        let out = errors.evaluate(&divide(), &rows()).expect("lenient");
        let out = out.as_primitive::<Int64Type>();
        assert_eq!(out.value(0), 3);
        assert!(out.is_null(1));
        assert_eq!(out.value(2), 2);
        assert_eq!(errors.caught.len(), 1);
        assert_eq!(errors.caught[0].sqlstate, "22012");
        assert_eq!(errors.caught[0].row, r#"{"a":7,"b":0}"#);
    }

    #[test]
    fn only_the_failing_part_yields_null() {
        let mut errors = RowErrors::new("v".into(), OnError::Null);
        let is_null: Arc<dyn PhysicalExpr> = Arc::new(IsNullExpr::new(divide()));
        let out = errors.evaluate(&is_null, &rows()).expect("lenient");
        let out = out.as_boolean();
        assert_eq!(out.null_count(), 0);
        assert_eq!(
            (out.value(0), out.value(1), out.value(2)),
            (false, true, false)
        );
        assert_eq!(errors.caught.len(), 1);
    }

    #[test]
    fn fail_stops_with_the_sqlstate() {
        let mut errors = RowErrors::new("v".into(), OnError::Fail);
        let e = errors.evaluate(&divide(), &rows()).expect_err("fails");
        assert_eq!(e.sqlstate(), "22012");
        assert!(e.message().contains("\"v\""), "{}", e.message());
        assert!(!e.message().contains("bug"), "{}", e.message());
    }

    #[test]
    fn policies_parse() {
        assert_eq!(OnError::parse("FAIL").expect("fail"), OnError::Fail);
        assert_eq!(
            OnError::parse("abort").expect_err("unknown").sqlstate(),
            "22023"
        );
    }
}
