//! Keeps the rows a predicate holds for; weights pass through unchanged.

use std::sync::Arc;

use datafusion::arrow::array::{Array, BooleanArray, Int64Array};
use datafusion::arrow::compute::{filter, filter_record_batch};
use datafusion::physical_expr::PhysicalExpr;

use crate::dataflow::change::ChangeBatch;
use crate::dataflow::operator::{Context, Operator};
use crate::error::{Error, Result};

pub struct Filter {
    predicate: Arc<dyn PhysicalExpr>,
}

impl Filter {
    pub fn new(predicate: Arc<dyn PhysicalExpr>) -> Filter {
        Filter { predicate }
    }
}

impl Operator for Filter {
    fn name(&self) -> &'static str {
        "Filter"
    }

    fn describe(&self) -> String {
        self.predicate.to_string()
    }

    fn on_changes(
        &mut self,
        _input: usize,
        batch: ChangeBatch,
        cx: &mut Context<'_>,
    ) -> Result<()> {
        let mask = self
            .predicate
            .evaluate(batch.rows())?
            .into_array(batch.len())?;
        let mask = mask
            .as_any()
            .downcast_ref::<BooleanArray>()
            .ok_or_else(|| Error::Internal("a filter predicate is not boolean".into()))?;
        // NULL counts as false, as in SQL.
        let mask = if mask.null_count() > 0 {
            datafusion::arrow::compute::prep_null_mask_filter(mask)
        } else {
            mask.clone()
        };
        let rows = filter_record_batch(batch.rows(), &mask)?;
        let diffs = filter(batch.diffs(), &mask)?;
        let diffs = diffs
            .as_any()
            .downcast_ref::<Int64Array>()
            .ok_or_else(|| Error::Internal("filtered diffs are not Int64".into()))?
            .clone();
        cx.emit(ChangeBatch::new(rows, diffs)?);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use datafusion::logical_expr::Operator as BinaryOp;
    use datafusion::physical_expr::expressions::{BinaryExpr, Column, Literal};

    use super::*;
    use crate::dataflow::change::{pretty, render};
    use crate::dataflow::state::EpochState;
    use crate::state::Store;

    #[test]
    fn weights_pass_through_and_null_is_false() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = Store::open(dir.path()).expect("store");
        let predicate = Arc::new(BinaryExpr::new(
            Arc::new(Column::new("c0", 0)),
            BinaryOp::Gt,
            Arc::new(Literal::new(datafusion::common::ScalarValue::Int64(Some(
                2,
            )))),
        ));
        let mut filter = Filter::new(predicate);
        let mut state = EpochState::new(store.db().clone());
        let mut cx = Context::new(&mut state, b"f");
        filter
            .on_changes(0, pretty("I T", "+ 1 a\n- 3 b\n2 5 c\n+ . d"), &mut cx)
            .expect("filter");
        assert_eq!(render(&cx.take_output()), vec!["+2 5 c", "-1 3 b"]);
    }
}
