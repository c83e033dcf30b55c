//! GROUP BY over SESSION windows kept per session.
//!
//! An aggregate straight over a SESSION window of an append-only relation,
//! grouped by plain columns and the window's bounds, with count, sum, avg,
//! min and max, is planned as one
//! [`SessionAggregate`](crate::dataflow::operators::aggregate::SessionAggregate)
//! that reads the relation's rows: sessions merge their running states
//! instead of re-sending their rows every time they grow. Any other
//! aggregate over SESSION (count(DISTINCT), a filter between, a group by an
//! expression) keeps the plain plan: `SessionAssign`, then the aggregate.

use datafusion::common::DFSchema;
use datafusion::logical_expr::{Aggregate as AggregatePlan, Expr, LogicalPlan};

use super::{Planner, arrow_schema, window_scan_under};
use crate::dataflow::graph::Source;
use crate::dataflow::operators::aggregate::{
    AggKind, AggSpec, SessionAggregate, SessionColumn, WindowClose,
};
use crate::dataflow::window::{WINDOW_START, WindowKind};
use crate::error::Result;
use crate::sql::window::{bound_of, trace_column};

impl Planner<'_> {
    /// Plan an aggregate over SESSION per session, if it can be (see the
    /// module documentation); `None` leaves it to the plain plan.
    pub(super) fn sessioned(
        &mut self,
        a: &AggregatePlan,
        plan: &LogicalPlan,
        window: Option<(WindowClose, bool)>,
    ) -> Result<Option<usize>> {
        let Some((_, on_close)) = window else {
            return Ok(None);
        };
        if self.revision < 2 {
            return Ok(None);
        }
        let Some((scan, window)) = window_scan_under(a) else {
            return Ok(None);
        };
        let WindowKind::Session { gap } = window.spec.kind else {
            return Ok(None);
        };
        let table = window.relation.clone();
        if !scan.filters.is_empty() || !table.def.is_append_only() {
            return Ok(None);
        }
        let mut keys = Vec::new();
        let mut layout = Vec::new();
        for expr in &a.group_expr {
            let Expr::Column(c) = expr else {
                return Ok(None);
            };
            let Some((_, index)) = trace_column(&a.input, c) else {
                return Ok(None);
            };
            layout.push(match bound_of(&window, index) {
                Some(WINDOW_START) => SessionColumn::Start,
                Some(_) => SessionColumn::End,
                None => {
                    keys.push(index);
                    SessionColumn::Key(keys.len() - 1)
                }
            });
        }
        let Some(aggs) = self.session_aggs(a, &table.schema)? else {
            return Ok(None);
        };
        let mut op = SessionAggregate::new(
            &table.schema,
            window.spec.time_column,
            gap,
            keys,
            layout,
            aggs,
            arrow_schema(plan),
            self.view_name.clone(),
        )?;
        if on_close {
            op = op.emitting_on_close();
        }
        let node = self.push(Box::new(op), Vec::new());
        self.sources.push(Source {
            whole_rows: None,
            table,
            node,
            projection: None,
        });
        Ok(Some(node))
    }

    /// The aggregates, reading the relation's own rows, if all of them
    /// merge from sessions' states and none reads a window bound.
    fn session_aggs(
        &self,
        a: &AggregatePlan,
        relation: &datafusion::arrow::datatypes::SchemaRef,
    ) -> Result<Option<Vec<AggSpec>>> {
        // The relation's columns, named as the aggregate names them.
        let qualifier = a.input.schema().qualified_field(0).0.cloned();
        let schema = match qualifier {
            Some(q) => DFSchema::try_from_qualified_schema(q, relation)?,
            None => DFSchema::try_from(relation.as_ref().clone())?,
        };
        let mut aggs = Vec::with_capacity(a.aggr_expr.len());
        for expr in &a.aggr_expr {
            // An aggregate of a window bound does not resolve here.
            let Ok(spec) = self.aggregate(expr, &schema, true) else {
                return Ok(None);
            };
            let merges = matches!(
                spec.kind,
                AggKind::CountStar
                    | AggKind::Count
                    | AggKind::Sum
                    | AggKind::Avg
                    | AggKind::Min
                    | AggKind::Max
            );
            if !merges {
                return Ok(None);
            }
            aggs.push(spec);
        }
        Ok(Some(aggs))
    }
}
