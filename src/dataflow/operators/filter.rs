//! Keeps the rows a predicate holds for; weights pass through unchanged.

use std::sync::Arc;

use datafusion::physical_expr::PhysicalExpr;

use crate::dataflow::change::ChangeBatch;
use crate::dataflow::operator::{Context, Operator};
use crate::error::Result;

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
        let kept = batch.filter(&self.predicate, &mut cx.state.errors)?;
        cx.emit(kept);
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
