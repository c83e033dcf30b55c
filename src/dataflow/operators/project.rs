//! Computes output columns from input columns; weights pass through unchanged.

use std::sync::Arc;

use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::physical_expr::PhysicalExpr;

use crate::dataflow::change::{ChangeBatch, evaluate_all};
use crate::dataflow::operator::{Context, Operator};
use crate::error::Result;

pub struct Project {
    exprs: Vec<Arc<dyn PhysicalExpr>>,
    schema: SchemaRef,
}

impl Project {
    pub fn new(exprs: Vec<Arc<dyn PhysicalExpr>>, schema: SchemaRef) -> Project {
        Project { exprs, schema }
    }
}

impl Operator for Project {
    fn name(&self) -> &'static str {
        "Project"
    }

    fn describe(&self) -> String {
        self.exprs
            .iter()
            .map(|e| e.to_string())
            .collect::<Vec<_>>()
            .join(", ")
    }

    fn on_changes(
        &mut self,
        _input: usize,
        batch: ChangeBatch,
        cx: &mut Context<'_>,
    ) -> Result<()> {
        let columns = evaluate_all(&self.exprs, batch.rows(), &mut cx.state.errors)?;
        let rows = RecordBatch::try_new_with_options(
            self.schema.clone(),
            columns,
            &datafusion::arrow::array::RecordBatchOptions::new().with_row_count(Some(batch.len())),
        )?;
        cx.emit(ChangeBatch::new(rows, batch.diffs().clone())?);
        Ok(())
    }
}
