//! A scan that says in EXPLAIN how it reads: DataFusion prints a streaming
//! scan by its partition count alone, so a read through an index wraps it
//! in a node that names the index.

use std::sync::Arc;

use datafusion::common::tree_node::TreeNodeRecursion;
use datafusion::error::Result;
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_plan::{DisplayAs, DisplayFormatType, ExecutionPlan, PlanProperties};

/// A leaf plan that runs `inner` and prints `label` before it.
#[derive(Debug)]
pub struct Labelled {
    inner: Arc<dyn ExecutionPlan>,
    label: String,
}

impl Labelled {
    pub fn new(inner: Arc<dyn ExecutionPlan>, label: String) -> Labelled {
        Labelled { inner, label }
    }
}

impl DisplayAs for Labelled {
    fn fmt_as(&self, t: DisplayFormatType, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}, ", self.label)?;
        self.inner.fmt_as(t, f)
    }
}

impl ExecutionPlan for Labelled {
    fn name(&self) -> &str {
        "Labelled"
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        self.inner.properties()
    }

    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        vec![]
    }

    fn apply_expressions(
        &self,
        _f: &mut dyn FnMut(&Arc<dyn PhysicalExpr>) -> Result<TreeNodeRecursion>,
    ) -> Result<TreeNodeRecursion> {
        Ok(TreeNodeRecursion::Continue)
    }

    fn with_new_children(
        self: Arc<Self>,
        _children: Vec<Arc<dyn ExecutionPlan>>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        Ok(self)
    }

    fn execute(
        &self,
        partition: usize,
        context: Arc<TaskContext>,
    ) -> Result<SendableRecordBatchStream> {
        self.inner.execute(partition, context)
    }
}
