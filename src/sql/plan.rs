//! From a DataFusion logical plan to a dataflow of incremental operators.
//!
//! Supported: projection, filter, GROUP BY with count, count(DISTINCT), sum,
//! avg, min, max, HAVING (a filter over the aggregate), DISTINCT, UNION ALL,
//! window table functions (TUMBLE, HOP, CUMULATE, SESSION) and any
//! DataFusion scalar expression inside them. Anything else is refused with
//! 0A000, naming the construct.
//!
//! An aggregate grouped by a window bound is windowed: it forgets a window
//! once the watermark passes its end, and under `EMIT ON WINDOW CLOSE` (which
//! the outermost aggregate takes) emits each window's row only then.

use std::collections::HashMap;
use std::sync::Arc;

use datafusion::arrow::datatypes::{DataType, SchemaRef};
use datafusion::common::{DFSchema, ScalarValue};
use datafusion::execution::context::ExecutionProps;
use datafusion::logical_expr::expr::AggregateFunction;
use datafusion::logical_expr::physical_planning_context::PhysicalPlanningContext;
use datafusion::logical_expr::{Distinct, Expr, ExprSchemable, LogicalPlan};
use datafusion::physical_expr::aggregate::AggregateExprBuilder;
use datafusion::physical_expr::{PhysicalExpr, PhysicalSortExpr, create_physical_expr};
use datafusion::physical_plan::WindowExpr;
use datafusion::physical_planner::create_window_expr;

use datafusion::physical_expr::expressions::Column as PhysicalColumn;

use crate::catalog::{Catalog, Emit, OnError, Table, nullable};
use crate::dataflow::graph::{Dataflow, Node, Source};
use crate::dataflow::operator::Operator;
use crate::dataflow::operators::aggregate::{AggKind, AggSpec, WindowClose};
use crate::dataflow::operators::join::{Asof, Join, Side};
use crate::dataflow::operators::lookup::{Lookup, LookupJoin, Step};
use crate::dataflow::operators::over::{Evaluate, Over, Recompute, Recomputed};
use crate::dataflow::operators::sliding::Sliding;
use crate::dataflow::operators::{
    Aggregate, Filter, Hold, Materialize, Project, SessionAssign, Union, Unnest, WindowAssign,
};
use crate::dataflow::window::{WINDOW_END, WindowKind};
use crate::error::{Error, Result};
use crate::sql::changelog::changelog_of;
use crate::sql::gap_fill::gap_fill_of;
use crate::sql::window::{WindowTable, bound_of, trace_column, window_of};
use crate::state::rows::projected::Projection;

mod closed_over;
mod derived_scans;
mod join_bounds;
mod ranked;
mod sessioned;
mod sliced;

/// The planner's revision, recorded with each view it builds. A revision
/// changes where a view's plan, and so the layout of its state, changes:
/// - 1: `row_number()` top-N over append-only input as `Rank`, `FILTER`
///   kept by the aggregate (decision 0024);
/// - 2: aggregates over SESSION as `SessionAggregate` (decision 0025);
/// - 3: count(DISTINCT)s of one argument over append-only input share one
///   record of the values seen (decision 0026).
pub const PLAN_REVISION: u32 = 3;

pub struct Planner<'a> {
    catalog: &'a Catalog,
    props: &'a ExecutionProps,
    nodes: Vec<Node>,
    sources: Vec<Source>,
    /// The view's name, recorded with its late events.
    view_name: String,
    emit: Emit,
    on_error: OnError,
    /// Whether an aggregate has taken `EMIT ON WINDOW CLOSE`.
    on_close_taken: bool,
    /// The node built for each subplan, when subplans are shared.
    built: Option<HashMap<LogicalPlan, usize>>,
    /// The revision whose plans to build ([`PLAN_REVISION`]).
    revision: u32,
}

/// The shape of a view's output, decided from its plan.
pub struct ViewShape {
    /// Output columns that are unique per row (an aggregate's group key), if any.
    pub key: Option<Vec<usize>>,
    /// Ids of the tables and views the plan reads.
    pub depends_on: Vec<u64>,
    /// Some input has event time, so the view's changelog carries watermarks.
    pub watermarked: bool,
    /// The view never retracts a row it emitted.
    pub append_only: bool,
    /// Its query never retracts, and either has no key or is the aggregate
    /// that emits on window close: the changelog alone holds it.
    pub log_only: bool,
}

impl<'a> Planner<'a> {
    pub fn new(catalog: &'a Catalog, props: &'a ExecutionProps) -> Planner<'a> {
        Planner {
            catalog,
            props,
            nodes: Vec::new(),
            sources: Vec::new(),
            view_name: String::new(),
            emit: Emit::Changes,
            on_error: OnError::default(),
            on_close_taken: false,
            built: None,
            revision: PLAN_REVISION,
        }
    }

    /// Build the plans of an earlier revision, for a view created then:
    /// its stored state is laid out by them.
    pub fn revision(mut self, revision: u32) -> Planner<'a> {
        self.revision = revision;
        self
    }

    /// Build a subplan that occurs more than once (q5's count per auction
    /// and window, written twice) once, and feed every reader from it.
    /// Views created before subplans were shared keep the graph, and so the
    /// node numbers of their stored state, they were created with.
    pub fn sharing(mut self, share: bool) -> Planner<'a> {
        self.built = share.then(HashMap::new);
        self
    }

    /// Plan with the view's emit policy.
    pub fn with_emit(mut self, emit: Emit) -> Planner<'a> {
        self.emit = emit;
        self
    }

    /// Plan with the view's policy for rows its expressions fail on.
    pub fn with_on_error(mut self, on_error: OnError) -> Planner<'a> {
        self.on_error = on_error;
        self
    }

    /// Check a plan and decide its shape, without building operators' state.
    pub fn shape(catalog: &Catalog, plan: &LogicalPlan, emit: Emit) -> Result<ViewShape> {
        let props = ExecutionProps::new();
        let mut planner = Planner::new(catalog, &props).with_emit(emit);
        planner.root(plan)?;
        let mut depends_on: Vec<u64> = planner.sources.iter().map(|s| s.table.def.id).collect();
        depends_on.sort_unstable();
        depends_on.dedup();
        let key = unique_key(plan);
        let never_retracts = planner.is_append_only(plan);
        let final_rows = emit == Emit::OnWindowClose && closes_at_root(plan);
        Ok(ViewShape {
            log_only: (key.is_none() && never_retracts) || final_rows,
            key,
            depends_on,
            watermarked: planner.sources.iter().any(|s| s.table.def.has_watermark()),
            // Under EMIT ON WINDOW CLOSE, an aggregate or an outer join
            // above the windowed aggregate still retracts its rows.
            append_only: final_rows || never_retracts,
        })
    }

    /// Build the dataflow that maintains `view` from `plan`.
    pub fn build(
        mut self,
        view: Arc<Table>,
        plan: &LogicalPlan,
        changelog_end: u64,
    ) -> Result<Dataflow> {
        self.view_name = view.def.name.clone();
        let root = self.root(plan)?;
        let every = match self.emit {
            Emit::Every { micros } => Some(micros),
            Emit::Changes | Emit::OnWindowClose => None,
        };
        let sink = Materialize::new(view.clone(), changelog_end, every);
        self.push(Box::new(sink), vec![root]);
        Ok(Dataflow {
            view: view.def.id,
            name: view.def.name.as_str().into(),
            on_error: self.on_error,
            nodes: self.nodes,
            sources: self.sources,
        })
    }

    fn root(&mut self, plan: &LogicalPlan) -> Result<usize> {
        let root = self.node(plan)?;
        if self.emit == Emit::OnWindowClose
            && !self.on_close_taken
            && let Some(column) = self.held_until_closed(plan)
        {
            self.on_close_taken = true;
            let hold = Hold::new(column, arrow_schema(plan))?;
            return Ok(self.push(Box::new(hold), vec![root]));
        }
        if self.emit == Emit::OnWindowClose && !self.on_close_taken {
            return Err(Error::NotSupported(
                "EMIT ON WINDOW CLOSE needs a GROUP BY on window_start or window_end of a window function (TUMBLE, HOP, CUMULATE, SESSION)".into(),
            ));
        }
        Ok(root)
    }

    /// `unnest` of one list column, one level deep.
    fn unnest(
        &mut self,
        u: &datafusion::logical_expr::Unnest,
        plan: &LogicalPlan,
    ) -> Result<usize> {
        let [(list, column)] = u.list_type_columns.as_slice() else {
            return Err(unsupported(plan));
        };
        if column.depth != 1 || !u.struct_type_columns.is_empty() {
            return Err(unsupported(plan));
        }
        let input = self.node(&u.input)?;
        let op = Unnest::new(
            *list,
            u.dependency_indices.clone(),
            arrow_schema(plan),
            u.options.null_handling,
        );
        Ok(self.push(Box::new(op), vec![input]))
    }

    /// For `EMIT ON WINDOW CLOSE` without a windowed aggregate: the output
    /// column that is its input's event time, if the view only grows.
    fn held_until_closed(&self, plan: &LogicalPlan) -> Option<usize> {
        if !self.is_append_only(plan) {
            return None;
        }
        let columns = plan.schema().columns();
        columns.iter().position(|c| self.is_event_time(plan, c))
    }

    /// Whether `column` of `plan` is, unchanged, the column a table's
    /// watermark is declared on.
    fn is_event_time(&self, plan: &LogicalPlan, column: &datafusion::common::Column) -> bool {
        let Ok(index) = plan.schema().index_of_column(column) else {
            return false;
        };
        match plan {
            LogicalPlan::TableScan(scan) => {
                let Some(relation) = self.catalog.relation(scan.table_name.table()) else {
                    return false;
                };
                let at = scan.projection.as_ref().map_or(index, |p| p[index]);
                let watermark = relation.def.watermark.as_ref();
                watermark.is_some_and(|w| {
                    relation
                        .def
                        .columns
                        .get(at)
                        .is_some_and(|c| c.name == w.column)
                })
            }
            LogicalPlan::Projection(p) => match &p.expr[index] {
                Expr::Column(inner) => self.is_event_time(&p.input, inner),
                Expr::Alias(alias) => match alias.expr.as_ref() {
                    Expr::Column(inner) => self.is_event_time(&p.input, inner),
                    _ => false,
                },
                _ => false,
            },
            LogicalPlan::SubqueryAlias(a) => {
                self.is_event_time(&a.input, &a.input.schema().columns()[index])
            }
            LogicalPlan::Filter(f) => self.is_event_time(&f.input, column),
            // Columns an unnest does not unnest pass through under their names.
            LogicalPlan::Unnest(u) => {
                u.input.schema().has_column(column) && self.is_event_time(&u.input, column)
            }
            _ => false,
        }
    }

    fn push(&mut self, operator: Box<dyn Operator>, inputs: Vec<usize>) -> usize {
        self.nodes.push(Node { operator, inputs });
        self.nodes.len() - 1
    }

    fn expr(&self, expr: &Expr, schema: &DFSchema) -> Result<Arc<dyn PhysicalExpr>> {
        if crate::sql::temporal::mentions_now(expr) {
            return Err(Error::NotSupported(format!(
                "now() in a materialized view works only as a temporal filter in WHERE, \
                 like t > now() - INTERVAL '1' HOUR; found {}",
                expr.to_string().replace("weir_now", "now")
            )));
        }
        Ok(create_physical_expr(
            expr,
            schema,
            self.props,
            &PhysicalPlanningContext::default(),
        )?)
    }

    fn node(&mut self, plan: &LogicalPlan) -> Result<usize> {
        // Under EMIT ON WINDOW CLOSE the first windowed aggregate built
        // holds its rows and later ones do not: a second occurrence of the
        // same subplan is not the same operator.
        let share = self.emit != Emit::OnWindowClose;
        if let Some(built) = self.built.as_ref().filter(|_| share)
            && let Some(node) = built.get(plan)
        {
            return Ok(*node);
        }
        let node = self.build_node(plan)?;
        if let Some(built) = self.built.as_mut().filter(|_| share) {
            built.insert(plan.clone(), node);
        }
        Ok(node)
    }

    /// `p`'s expressions over the node `input`, which computes `p`'s input.
    fn project(&mut self, p: &datafusion::logical_expr::Projection, input: usize) -> Result<usize> {
        let exprs = p
            .expr
            .iter()
            .map(|e| self.expr(e, p.input.schema()))
            .collect::<Result<Vec<_>>>()?;
        let schema = nullable(p.schema.as_arrow());
        Ok(self.push(Box::new(Project::new(exprs, schema)), vec![input]))
    }

    fn build_node(&mut self, plan: &LogicalPlan) -> Result<usize> {
        match plan {
            LogicalPlan::Projection(p) => {
                let input = self.node(&p.input)?;
                self.project(p, input)
            }
            LogicalPlan::Filter(f) => {
                if let Some(node) = self.ranked(f)? {
                    return Ok(node);
                }
                let mut node = self.node(&f.input)?;
                let (plain, sliding) = crate::sql::temporal::split(&f.predicate)?;
                if let Some(plain) = plain {
                    let predicate = self.expr(&plain, f.input.schema())?;
                    node = self.push(Box::new(Filter::new(predicate)), vec![node]);
                }
                for s in sliding {
                    let time = self.expr(&s.time, f.input.schema())?;
                    let schema = arrow_schema(&f.input);
                    let filter = Sliding::new(time, s.bound, schema)?;
                    node = self.push(Box::new(filter), vec![node]);
                }
                Ok(node)
            }
            LogicalPlan::Aggregate(a) => {
                let window = self.window_close(a)?;
                if let Some((close, true)) = window
                    && let Some(node) = self.sliced(a, plan, close)?
                {
                    return Ok(node);
                }
                if let Some(node) = self.sessioned(a, plan, window)? {
                    return Ok(node);
                }
                if window.is_none() && !self.kept_natively(a) {
                    return self.recompute(a, plan);
                }
                let input = self.node(&a.input)?;
                let schema = a.input.schema();
                let groups = a
                    .group_expr
                    .iter()
                    .map(|g| self.expr(g, schema))
                    .collect::<Result<Vec<_>>>()?;
                let group_types = a
                    .group_expr
                    .iter()
                    .map(|g| Ok(g.get_type(schema)?))
                    .collect::<Result<Vec<DataType>>>()?;
                let append_only = self.is_append_only(&a.input);
                let aggs = a
                    .aggr_expr
                    .iter()
                    .map(|e| self.aggregate(e, schema, append_only))
                    .collect::<Result<Vec<_>>>()?;
                let mut op = Aggregate::new(groups, group_types, aggs, arrow_schema(plan))?;
                if let Some((close, on_close)) = window {
                    op = op.with_window(close, on_close)?;
                }
                Ok(self.push(Box::new(op), vec![input]))
            }
            LogicalPlan::Distinct(Distinct::All(input)) => {
                let node = self.node(input)?;
                let schema = input.schema();
                let columns: Vec<Expr> = schema.columns().into_iter().map(Expr::Column).collect();
                let groups = columns
                    .iter()
                    .map(|c| self.expr(c, schema))
                    .collect::<Result<Vec<_>>>()?;
                let types = schema
                    .fields()
                    .iter()
                    .map(|f| f.data_type().clone())
                    .collect();
                let op = Aggregate::new(groups, types, Vec::new(), arrow_schema(plan))?;
                Ok(self.push(Box::new(op), vec![node]))
            }
            LogicalPlan::Union(u) => {
                let inputs = u
                    .inputs
                    .iter()
                    .map(|i| self.node(i))
                    .collect::<Result<Vec<_>>>()?;
                Ok(self.push(Box::new(Union::new(arrow_schema(plan))), inputs))
            }
            LogicalPlan::Join(j) => self.join(j, plan),
            LogicalPlan::SubqueryAlias(a) => self.node(&a.input),
            LogicalPlan::TableScan(scan) => self.scan(scan),
            LogicalPlan::Window(w) => self.over(w, plan),
            // A view is a set: ORDER BY alone orders nothing.
            LogicalPlan::Sort(sort) if sort.fetch.is_none() => self.node(&sort.input),
            LogicalPlan::Sort(sort) => self.top_n(&sort.input, &sort.expr, 0, sort.fetch, plan),
            LogicalPlan::Limit(limit) => self.limit(limit, plan),
            LogicalPlan::Unnest(u) => self.unnest(u, plan),
            other => Err(unsupported(other)),
        }
    }

    /// `IN`/`EXISTS` (semi) and `NOT EXISTS` (anti) joins, built from the
    /// operators there are: the kept side joined with the distinct keys of
    /// the other, so that each kept row goes out once whatever number of
    /// rows match it; for an anti join, a left join whose unmatched rows
    /// are the answer.
    fn semi_join(
        &mut self,
        j: &datafusion::logical_expr::Join,
        kept: &LogicalPlan,
        other: &LogicalPlan,
        pick: fn(&(Expr, Expr)) -> (&Expr, &Expr),
        anti: bool,
        plan: &LogicalPlan,
    ) -> Result<usize> {
        if j.null_aware {
            return self.not_in(j, kept, plan);
        }
        // EXCEPT and INTERSECT: a row matches a row with NULLs in the same places.
        let nulls_equal = j.null_equality == datafusion::common::NullEquality::NullEqualsNull;
        if kept.schema().fields().is_empty() {
            return Err(Error::NotSupported(
                "an IN, EXISTS or EXCEPT in a materialized view must keep at least one column of its query".into(),
            ));
        }
        if !anti && j.filter.is_some() && unique_on(other, j.on.iter().map(|p| pick(p).1)) {
            return self.unique_semi_join(j, kept, plan);
        }
        if j.filter.is_some() || j.on.is_empty() {
            return Err(Error::NotSupported(
                "IN and EXISTS subqueries in a materialized view need equalities only between the query and the subquery, like WHERE a.k IN (SELECT k FROM b)".into(),
            ));
        }
        let kept_keys =
            j.on.iter()
                .map(|pair| self.expr(pick(pair).0, kept.schema()))
                .collect::<Result<Vec<_>>>()?;
        let other_keys =
            j.on.iter()
                .map(|pair| self.expr(pick(pair).1, other.schema()))
                .collect::<Result<Vec<_>>>()?;
        let key_fields =
            j.on.iter()
                .enumerate()
                .map(|(i, pair)| {
                    let data_type = pick(pair).1.get_type(other.schema())?;
                    Ok(datafusion::arrow::datatypes::Field::new(
                        format!("k{i}"),
                        data_type,
                        true,
                    ))
                })
                .collect::<Result<Vec<_>>>()?;
        let key_types = key_fields.iter().map(|f| f.data_type().clone()).collect();
        let keys_schema: SchemaRef =
            Arc::new(datafusion::arrow::datatypes::Schema::new(key_fields));
        let kept_node = self.node(kept)?;
        let other_node = self.node(other)?;
        let distinct = Aggregate::new(other_keys, key_types, Vec::new(), keys_schema.clone())?;
        let mut distinct = self.push(Box::new(distinct), vec![other_node]);
        // A matched key may itself be NULL, so an anti join whose NULLs
        // match tells unmatched rows by a marker column that never is.
        let (keys_schema, marker) = if nulls_equal {
            let (node, schema) = self.marked(distinct, &keys_schema)?;
            distinct = node;
            (schema, keys_schema.fields().len())
        } else {
            (keys_schema, 0)
        };
        let kept_schema = arrow_schema(kept);
        let width = kept_schema.fields().len();
        let joined_fields: Vec<_> = kept_schema
            .fields()
            .iter()
            .chain(keys_schema.fields().iter())
            .cloned()
            .collect();
        let joined = Arc::new(datafusion::arrow::datatypes::Schema::new(joined_fields));
        let matches: Vec<Arc<dyn PhysicalExpr>> = (0..j.on.len())
            .map(|i| Arc::new(PhysicalColumn::new(&format!("k{i}"), i)) as Arc<dyn PhysicalExpr>)
            .collect();
        let left = Side {
            keys: kept_keys,
            schema: kept_schema.clone(),
        };
        let right = Side {
            keys: matches,
            schema: keys_schema,
        };
        let mut op = Join::new(left, right, None, joined)?
            .outer(anti, false)
            .appending(self.is_append_only(kept), false);
        if nulls_equal {
            op = op.nulls_equal();
        }
        let mut node = self.push(Box::new(op), vec![kept_node, distinct]);
        if anti {
            let unmatched = datafusion::physical_expr::expressions::is_null(Arc::new(
                PhysicalColumn::new(&format!("k{marker}"), width + marker),
            ))?;
            node = self.push(Box::new(Filter::new(unmatched)), vec![node]);
        }
        Ok(self.project_columns(node, &kept_schema, 0..width, plan))
    }

    /// `k NOT IN (SELECT s FROM ...)` by SQL's rules: no row passes while the
    /// subquery holds a NULL, and a row whose `k` is NULL passes only while
    /// the subquery is empty. Planned as the anti join that ignores NULLs,
    /// paired with the subquery's one row of counts and filtered by them.
    fn not_in(
        &mut self,
        j: &datafusion::logical_expr::Join,
        kept: &LogicalPlan,
        plan: &LogicalPlan,
    ) -> Result<usize> {
        use datafusion::functions_aggregate::count::count;
        use datafusion::logical_expr::{LogicalPlanBuilder, lit};
        let (kept_is_left, other) = match j.join_type {
            datafusion::logical_expr::JoinType::LeftAnti => (true, &j.right),
            _ => (false, &j.left),
        };
        let [(left_key, right_key)] = j.on.as_slice() else {
            return Err(Error::NotSupported(
                "NOT IN (subquery) of several columns is not supported in materialized views; write NOT EXISTS".into(),
            ));
        };
        let (kept_key, other_key) = if kept_is_left {
            (left_key, right_key)
        } else {
            (right_key, left_key)
        };
        let counts = LogicalPlanBuilder::from(other.as_ref().clone())
            .aggregate(
                Vec::<Expr>::new(),
                vec![
                    count(lit(1)).alias("__not_in_rows"),
                    count(other_key.clone()).alias("__not_in_keys"),
                ],
            )?
            .build()?;
        let mut plain = j.clone();
        plain.null_aware = false;
        let rows = datafusion::logical_expr::col("__not_in_rows");
        let keys = datafusion::logical_expr::col("__not_in_keys");
        let passes = rows
            .clone()
            .eq(keys)
            .and(kept_key.clone().is_not_null().or(rows.eq(lit(0i64))));
        let columns: Vec<Expr> = kept
            .schema()
            .columns()
            .into_iter()
            .map(Expr::Column)
            .collect();
        let rewritten = LogicalPlanBuilder::from(LogicalPlan::Join(plain))
            .cross_join(counts)?
            .filter(passes)?
            .project(columns)?
            .build()?;
        let node = self.node(&rewritten)?;
        let from = arrow_schema(&rewritten);
        Ok(self.project_columns(node, &from, 0..from.fields().len(), plan))
    }

    /// `node`'s rows (of schema `schema`) with one more column, never NULL.
    fn marked(&mut self, node: usize, schema: &SchemaRef) -> Result<(usize, SchemaRef)> {
        let mut fields: Vec<_> = schema.fields().iter().cloned().collect();
        let marker = format!("k{}", fields.len());
        fields.push(Arc::new(datafusion::arrow::datatypes::Field::new(
            &marker,
            DataType::Boolean,
            false,
        )));
        let marked: SchemaRef = Arc::new(datafusion::arrow::datatypes::Schema::new(fields));
        let mut exprs = column_exprs(schema, 0..schema.fields().len());
        exprs.push(datafusion::physical_expr::expressions::lit(true));
        let project = Project::new(exprs, marked.clone());
        Ok((self.push(Box::new(project), vec![node]), marked))
    }

    /// The columns `at` of a node's output (of schema `from`), as `plan`'s.
    fn project_columns(
        &mut self,
        node: usize,
        from: &datafusion::arrow::datatypes::Schema,
        at: impl IntoIterator<Item = usize>,
        plan: &LogicalPlan,
    ) -> usize {
        let columns = column_exprs(from, at);
        self.push(
            Box::new(Project::new(columns, arrow_schema(plan))),
            vec![node],
        )
    }

    /// A join side: its rows' schema and its key expressions over them.
    fn side<'e>(
        &self,
        input: &LogicalPlan,
        keys: impl IntoIterator<Item = &'e Expr>,
    ) -> Result<Side> {
        let keys = keys
            .into_iter()
            .map(|k| self.expr(k, input.schema()))
            .collect::<Result<Vec<_>>>()?;
        Ok(Side {
            keys,
            schema: arrow_schema(input),
        })
    }

    /// A semi join whose other side holds one row per join key at most (an
    /// inner join DataFusion turned into one, its other side's columns
    /// unused): the inner join, with its condition, of the two sides, and
    /// the kept side's columns of each pair.
    fn unique_semi_join(
        &mut self,
        j: &datafusion::logical_expr::Join,
        kept: &LogicalPlan,
        plan: &LogicalPlan,
    ) -> Result<usize> {
        let both = j.left.schema().join(j.right.schema())?;
        let left = self.side(&j.left, j.on.iter().map(|p| &p.0))?;
        let right = self.side(&j.right, j.on.iter().map(|p| &p.1))?;
        let residual = j.filter.as_ref().map(|f| self.expr(f, &both)).transpose()?;
        let left_node = self.node(&j.left)?;
        let right_node = self.node(&j.right)?;
        let joined = Arc::new(both.as_arrow().clone());
        let op = Join::new(left, right, residual, joined.clone())?
            .appending(self.is_append_only(&j.left), self.is_append_only(&j.right));
        let node = self.push(Box::new(op), vec![left_node, right_node]);
        let offset = match std::ptr::eq(kept, j.left.as_ref()) {
            true => 0,
            false => j.left.schema().fields().len(),
        };
        let width = kept.schema().fields().len();
        Ok(self.project_columns(node, &joined, offset..offset + width, plan))
    }

    /// Window functions: each partition's rows kept, its answer recomputed
    /// when it changes.
    fn over(&mut self, w: &datafusion::logical_expr::Window, plan: &LogicalPlan) -> Result<usize> {
        if let Some(node) = self.closed_over(w, plan)? {
            return Ok(node);
        }
        let input = self.node(&w.input)?;
        self.window_over(w, &w.window_expr, arrow_schema(plan), input)
    }

    /// The `Over` operator evaluating `exprs` over `w`'s input, partitioned
    /// as `w`'s own expressions are, fed by `input`.
    fn window_over(
        &mut self,
        w: &datafusion::logical_expr::Window,
        exprs: &[Expr],
        output: SchemaRef,
        input: usize,
    ) -> Result<usize> {
        let schema = w.input.schema();
        let exprs = exprs
            .iter()
            .map(|e| self.window_expr(e, schema))
            .collect::<Result<Vec<_>>>()?;
        let partition = shared_partition(&w.window_expr)
            .iter()
            .map(|e| self.expr(e, schema))
            .collect::<Result<Vec<_>>>()?;
        let op = Over::new(
            partition,
            arrow_schema(&w.input),
            output,
            Evaluate::Window(exprs),
        )?;
        Ok(self.push(Box::new(op), vec![input]))
    }

    fn window_expr(&self, expr: &Expr, schema: &DFSchema) -> Result<Arc<dyn WindowExpr>> {
        Ok(create_window_expr(
            expr,
            schema,
            self.props,
            &PhysicalPlanningContext::default(),
        )?)
    }

    /// `LIMIT n [OFFSET m]`, ordered by the `ORDER BY` beneath it if any.
    fn limit(
        &mut self,
        limit: &datafusion::logical_expr::Limit,
        plan: &LogicalPlan,
    ) -> Result<usize> {
        use datafusion::logical_expr::{FetchType, SkipType};
        let (SkipType::Literal(skip), FetchType::Literal(fetch)) =
            (limit.get_skip_type()?, limit.get_fetch_type()?)
        else {
            return Err(Error::NotSupported(
                "LIMIT and OFFSET in a materialized view take constants".into(),
            ));
        };
        match limit.input.as_ref() {
            LogicalPlan::Sort(sort) => self.top_n(&sort.input, &sort.expr, skip, fetch, plan),
            other => self.top_n(other, &[], skip, fetch, plan),
        }
    }

    fn top_n(
        &mut self,
        input_plan: &LogicalPlan,
        order: &[datafusion::logical_expr::SortExpr],
        skip: usize,
        fetch: Option<usize>,
        plan: &LogicalPlan,
    ) -> Result<usize> {
        let input = self.node(input_plan)?;
        let order = self.sort_exprs(order, input_plan.schema())?;
        let evaluate = Evaluate::TopN { order, skip, fetch };
        let op = Over::new(
            Vec::new(),
            arrow_schema(input_plan),
            arrow_schema(plan),
            evaluate,
        )?;
        Ok(self.push(Box::new(op), vec![input]))
    }

    /// An `ORDER BY` list over `schema`, as physical sort expressions.
    fn sort_exprs(
        &self,
        order: &[datafusion::logical_expr::SortExpr],
        schema: &DFSchema,
    ) -> Result<Vec<PhysicalSortExpr>> {
        order
            .iter()
            .map(|s| {
                let options = datafusion::arrow::compute::SortOptions {
                    descending: !s.asc,
                    nulls_first: s.nulls_first,
                };
                Ok(PhysicalSortExpr::new(self.expr(&s.expr, schema)?, options))
            })
            .collect()
    }

    /// An inner equi-join: both sides' rows kept in state by join key.
    fn join(&mut self, j: &datafusion::logical_expr::Join, plan: &LogicalPlan) -> Result<usize> {
        use datafusion::common::NullEquality;
        use datafusion::logical_expr::JoinType;
        let (left_outer, right_outer) = match j.join_type {
            JoinType::Inner => (false, false),
            JoinType::Left => (true, false),
            JoinType::Right => (false, true),
            JoinType::Full => (true, true),
            JoinType::LeftSemi | JoinType::LeftAnti => {
                let anti = j.join_type == JoinType::LeftAnti;
                return self.semi_join(j, &j.left, &j.right, |pair| (&pair.0, &pair.1), anti, plan);
            }
            JoinType::RightSemi | JoinType::RightAnti => {
                let anti = j.join_type == JoinType::RightAnti;
                return self.semi_join(j, &j.right, &j.left, |pair| (&pair.1, &pair.0), anti, plan);
            }
            other => {
                return Err(Error::NotSupported(format!(
                    "{other} joins are not supported in materialized views yet; inner, left, right and full joins are"
                )));
            }
        };
        let nulls_equal = j.null_equality == NullEquality::NullEqualsNull;
        if let Some(condition) = crate::dataflow::asof::Condition::of(j)? {
            if nulls_equal {
                return Err(Error::NotSupported(
                    "an ASOF join on IS NOT DISTINCT FROM is not supported; join on =".into(),
                ));
            }
            return self.asof_join(j, condition, plan);
        }
        if nulls_equal && self.lookup(&j.right)?.is_some() {
            return Err(Error::NotSupported(
                "a lookup join (FOR SYSTEM_TIME AS OF PROCTIME()) on IS NOT DISTINCT FROM is not supported; join on =".into(),
            ));
        }
        if self.lookup(&j.left)?.is_some() {
            return Err(Error::NotSupported(
                "the table read FOR SYSTEM_TIME AS OF PROCTIME() must be on the right of its join"
                    .into(),
            ));
        }
        let mut left = self.side(&j.left, j.on.iter().map(|p| &p.0))?;
        let mut right = self.side(&j.right, j.on.iter().map(|p| &p.1))?;
        if j.on.is_empty() {
            // No equality: every row under one key, pairs found by the
            // condition alone (a nested-loop join).
            let one = datafusion::physical_expr::expressions::lit(ScalarValue::Int32(Some(0)));
            left.keys = vec![one.clone()];
            right.keys = vec![one];
        }
        let residual = j
            .filter
            .as_ref()
            .map(|f| self.expr(f, &j.schema))
            .transpose()?;
        if let Some((table, steps)) = self.lookup(&j.right)? {
            if right_outer {
                return Err(Error::NotSupported(
                    "a lookup join (FOR SYSTEM_TIME AS OF PROCTIME()) is an inner or a left join"
                        .into(),
                ));
            }
            let stream = self.node(&j.left)?;
            let indexes = crate::dataflow::index_read::IndexRead::all_of(self.catalog, &table);
            let lookup = Lookup {
                table,
                steps,
                keys: right.keys,
                indexes,
            };
            let stream_schema = left.schema.clone();
            let mut op = LookupJoin::new(left, lookup, residual, arrow_schema(plan), left_outer)?;
            if !self.is_append_only(&j.left) {
                op = op.remembering(&stream_schema)?;
            }
            return Ok(self.push(Box::new(op), vec![stream]));
        }
        let columnless = left.schema.fields().is_empty() || right.schema.fields().is_empty();
        if columnless {
            return self.columnless_join(j, left, right, residual, plan);
        }
        let left_node = self.node(&j.left)?;
        let right_node = self.node(&j.right)?;
        let mut op = Join::new(left, right, residual, arrow_schema(plan))?
            .outer(left_outer, right_outer)
            .appending(self.is_append_only(&j.left), self.is_append_only(&j.right));
        if nulls_equal {
            op = op.nulls_equal();
        }
        // An outer join with a condition beyond its keys pads by the
        // condition, which its unbounded path alone evaluates.
        let outer = left_outer || right_outer;
        if !outer
            && self.changes_while_open(&j.left)
            && self.changes_while_open(&j.right)
            && let Some(expiry) = join_bounds::expiry(self.catalog, j)
        {
            op = op.bounded(expiry, self.view_name.clone());
        }
        Ok(self.push(Box::new(op), vec![left_node, right_node]))
    }

    /// A join of which a side reads no column (`SELECT count(*) FROM a
    /// CROSS JOIN b`): the join holds whole rows, so such a side gets a
    /// constant column for the join, dropped after it.
    fn columnless_join(
        &mut self,
        j: &datafusion::logical_expr::Join,
        mut left: Side,
        mut right: Side,
        residual: Option<Arc<dyn PhysicalExpr>>,
        plan: &LogicalPlan,
    ) -> Result<usize> {
        use datafusion::logical_expr::JoinType;
        if residual.is_some() || j.join_type != JoinType::Inner {
            return Err(Error::NotSupported(
                "a join in a materialized view that reads no column of one side takes no condition and is an inner join".into(),
            ));
        }
        let mut nodes = [self.node(&j.left)?, self.node(&j.right)?];
        let mut kept: Vec<usize> = Vec::new();
        let mut at = 0;
        for (n, side) in [&mut left, &mut right].into_iter().enumerate() {
            if side.schema.fields().is_empty() {
                let one = datafusion::arrow::datatypes::Field::new("one", DataType::Int32, false);
                side.schema = Arc::new(datafusion::arrow::datatypes::Schema::new(vec![one]));
                let constant =
                    datafusion::physical_expr::expressions::lit(ScalarValue::Int32(Some(1)));
                let project = Project::new(vec![constant], side.schema.clone());
                nodes[n] = self.push(Box::new(project), vec![nodes[n]]);
                at += 1;
                continue;
            }
            kept.extend(at..at + side.schema.fields().len());
            at += side.schema.fields().len();
        }
        let fields: Vec<_> = [&left.schema, &right.schema]
            .iter()
            .flat_map(|s| s.fields().iter().cloned())
            .collect();
        let joined = Arc::new(datafusion::arrow::datatypes::Schema::new(fields));
        let op = Join::new(left, right, None, joined.clone())?;
        let node = self.push(Box::new(op), nodes.to_vec());
        Ok(self.project_columns(node, &joined, kept, plan))
    }

    fn asof_join(
        &mut self,
        j: &datafusion::logical_expr::Join,
        condition: crate::dataflow::asof::Condition,
        plan: &LogicalPlan,
    ) -> Result<usize> {
        use datafusion::logical_expr::JoinType;
        let left_outer = match j.join_type {
            JoinType::Inner => false,
            JoinType::Left => true,
            other => {
                return Err(Error::NotSupported(format!(
                    "an ASOF JOIN is an inner or a left join, not {other}"
                )));
            }
        };
        let left = self.side(&j.left, condition.equal.iter().map(|p| &p.0))?;
        let right = self.side(&j.right, condition.equal.iter().map(|p| &p.1))?;
        let asof = Asof::new(
            self.expr(&condition.left, j.left.schema())?,
            self.expr(&condition.right, j.right.schema())?,
            condition.closest,
            &left.schema,
        )?;
        let left_node = self.node(&j.left)?;
        let right_node = self.node(&j.right)?;
        let op = Join::new(left, right, None, arrow_schema(plan))?
            .outer(left_outer, false)
            .appending(self.is_append_only(&j.left), self.is_append_only(&j.right))
            .asof(asof);
        Ok(self.push(Box::new(op), vec![left_node, right_node]))
    }

    /// The table a join side reads FOR SYSTEM_TIME AS OF PROCTIME(), and the
    /// steps from its rows to the side's, if the side is such a lookup.
    fn lookup(&self, plan: &LogicalPlan) -> Result<Option<(Arc<Table>, Vec<Step>)>> {
        let (inner, step) = match plan {
            LogicalPlan::TableScan(scan) => {
                let Some(lookup) = crate::sql::lookup::lookup_of(scan) else {
                    return Ok(None);
                };
                let all = (0..lookup.relation.schema.fields().len()).collect();
                let columns = scan.projection.clone().unwrap_or(all);
                let step =
                    Step::Columns(columns, Arc::new(scan.projected_schema.as_arrow().clone()));
                return Ok(Some((lookup.relation, vec![step])));
            }
            LogicalPlan::SubqueryAlias(a) => return self.lookup(&a.input),
            LogicalPlan::Projection(p) => {
                let exprs = p
                    .expr
                    .iter()
                    .map(|e| self.expr(e, p.input.schema()))
                    .collect::<Result<Vec<_>>>()?;
                (&p.input, Step::Project(exprs, arrow_schema(plan)))
            }
            LogicalPlan::Filter(f) => (
                &f.input,
                Step::Filter(self.expr(&f.predicate, f.input.schema())?),
            ),
            _ => return Ok(None),
        };
        Ok(self.lookup(inner)?.map(|(table, mut steps)| {
            steps.push(step);
            (table, steps)
        }))
    }

    /// How an aggregate's groups close, if it groups by a window bound, and
    /// whether it takes `EMIT ON WINDOW CLOSE`.
    fn window_close(
        &mut self,
        a: &datafusion::logical_expr::Aggregate,
    ) -> Result<Option<(WindowClose, bool)>> {
        let mut end = None;
        let mut start = None;
        let mut relation = None;
        for (i, expr) in a.group_expr.iter().enumerate() {
            let Expr::Column(c) = expr else { continue };
            let Some((table, index)) = trace_column(&a.input, c) else {
                continue;
            };
            match bound_of(&table, index) {
                Some(WINDOW_END) => {
                    end = end.or(Some(WindowClose {
                        column: i,
                        offset: 0,
                    }))
                }
                Some(_) => {
                    if let Some(longest) = table.spec.kind.longest() {
                        start = start.or(Some(WindowClose {
                            column: i,
                            offset: longest,
                        }));
                    }
                }
                None => continue,
            }
            relation = Some(table.relation.clone());
        }
        let close = end.or(start);
        let on_close = self.emit == Emit::OnWindowClose && !self.on_close_taken;
        if !on_close {
            return Ok(close.map(|c| (c, false)));
        }
        self.on_close_taken = true;
        let (Some(close), Some(relation)) = (close, relation) else {
            return Err(Error::NotSupported(
                "EMIT ON WINDOW CLOSE needs a GROUP BY on window_end (or window_start, except for SESSION) of a window function".into(),
            ));
        };
        if !relation.def.has_watermark() {
            return Err(Error::NotSupported(format!(
                "EMIT ON WINDOW CLOSE needs event time: \"{}\" has no watermark; declare one with WATERMARK FOR column AS column - INTERVAL '...'",
                relation.def.name
            )));
        }
        Ok(Some((close, true)))
    }

    /// A window table function: its relation's changes go through the
    /// window operator, then the scan's projection.
    fn window_scan(
        &mut self,
        scan: &datafusion::logical_expr::TableScan,
        window: WindowTable,
    ) -> Result<usize> {
        self.window_scan_graced(scan, window, 0)
    }

    /// A window scan whose windows take rows until `grace` after their end.
    fn window_scan_graced(
        &mut self,
        scan: &datafusion::logical_expr::TableScan,
        window: WindowTable,
        grace: i64,
    ) -> Result<usize> {
        let table = window.relation.clone();
        let schema = window.schema();
        let columns: Vec<usize> = match &scan.projection {
            Some(p) => p.clone(),
            None => (0..schema.fields().len()).collect(),
        };
        // Where each scanned column lands in the window operator's output.
        let mut at: Vec<usize> = (0..schema.fields().len()).collect();
        let mut projection = None;
        let assign: Box<dyn Operator> = match window.spec.kind {
            WindowKind::Session { gap } => {
                if !table.def.is_append_only() {
                    return Err(Error::NotSupported(format!(
                        "SESSION windows need an append-only input; \"{}\" can change its rows",
                        table.def.name
                    )));
                }
                Box::new(SessionAssign::new(
                    &table.schema,
                    window.spec.time_column,
                    gap,
                    window.session_keys.clone(),
                    schema.clone(),
                    self.view_name.clone(),
                )?)
            }
            _ => {
                let width = table.schema.fields().len();
                let keep: Vec<usize> = columns.iter().copied().filter(|i| *i < width).collect();
                for (i, column) in keep.iter().enumerate() {
                    at[*column] = i;
                }
                at[width] = keep.len();
                at[width + 1] = keep.len() + 1;
                let mut read = keep.clone();
                read.push(window.spec.time_column);
                projection = Projection::new(table.codec.schema(), &read)?;
                let mut assign =
                    WindowAssign::new(window.spec.clone(), schema.clone(), self.view_name.clone())
                        .keeping(keep)
                        .with_grace(grace);
                if projection.is_some() {
                    assign = assign.with_whole_rows(table.clone());
                }
                Box::new(assign)
            }
        };
        let node = self.push(assign, Vec::new());
        // Late rows are recorded whole: a projected input carries them as stored.
        self.sources.push(Source {
            whole_rows: projection.is_some().then_some(window.spec.time_column),
            table,
            node,
            projection,
        });
        let exprs = columns
            .iter()
            .map(|i| {
                Arc::new(PhysicalColumn::new(schema.field(*i).name(), at[*i]))
                    as Arc<dyn PhysicalExpr>
            })
            .collect();
        let project = Project::new(exprs, nullable(scan.projected_schema.as_arrow()));
        Ok(self.push(Box::new(project), vec![node]))
    }

    fn scan(&mut self, scan: &datafusion::logical_expr::TableScan) -> Result<usize> {
        if let Some(window) = window_of(scan) {
            return self.window_scan(scan, window);
        }
        if let Some(filled) = gap_fill_of(scan) {
            return self.gap_fill_scan(scan, filled);
        }
        if let Some(changes) = changelog_of(scan) {
            return self.changelog_scan(scan, changes);
        }
        let name = scan.table_name.table();
        let table = self.catalog.relation(name).ok_or_else(|| {
            Error::NotSupported(format!("a materialized view cannot read \"{name}\""))
        })?;
        let all = Arc::new(DFSchema::try_from_qualified_schema(
            scan.table_name.clone(),
            &table.schema,
        )?);
        let columns: Vec<usize> = match &scan.projection {
            Some(p) => p.clone(),
            None => (0..table.schema.fields().len()).collect(),
        };
        let exprs = columns
            .iter()
            .map(|i| self.expr(&Expr::Column(all.columns()[*i].clone()), &all))
            .collect::<Result<Vec<_>>>()?;
        let project = Project::new(exprs, nullable(scan.projected_schema.as_arrow()));
        let node = self.push(Box::new(project), Vec::new());
        let projection = Projection::new(table.codec.schema(), &columns)?;
        self.sources.push(Source {
            table,
            node,
            projection,
            whole_rows: None,
        });
        Ok(node)
    }

    /// Whether `plan` changes nothing a join could bound by time once that
    /// time is behind the watermark: append-only rows, or the per-window
    /// rows of an aggregate over them, which change only while the window
    /// is open (under `EMIT ON WINDOW CLOSE` a window's row comes just
    /// before the watermark that closed it). Rows that could go at any time
    /// have no time after which they are done.
    fn changes_while_open(&self, plan: &LogicalPlan) -> bool {
        match plan {
            LogicalPlan::Projection(p) => self.changes_while_open(&p.input),
            LogicalPlan::Filter(f) => !slides(f) && self.changes_while_open(&f.input),
            LogicalPlan::SubqueryAlias(a) => self.changes_while_open(&a.input),
            LogicalPlan::Aggregate(a) => self.is_append_only(&a.input),
            _ => self.is_append_only(plan),
        }
    }

    /// Whether a plan's output only ever grows: it reads append-only tables
    /// through filters, projections and unions.
    fn is_append_only(&self, plan: &LogicalPlan) -> bool {
        match plan {
            // Made-up rows go when a row lands in their gap.
            LogicalPlan::TableScan(scan) if gap_fill_of(scan).is_some() => false,
            LogicalPlan::TableScan(scan) if changelog_of(scan).is_some() => true,
            LogicalPlan::TableScan(scan) => match window_of(scan) {
                // Sessions retract rows when they merge.
                Some(w) => {
                    !matches!(w.spec.kind, WindowKind::Session { .. })
                        && w.relation.def.is_append_only()
                }
                None => self
                    .catalog
                    .relation(scan.table_name.table())
                    .is_some_and(|t| t.def.is_append_only()),
            },
            LogicalPlan::Projection(p) => self.is_append_only(&p.input),
            // A temporal filter takes rows back as time passes.
            LogicalPlan::Filter(f) => !slides(f) && self.is_append_only(&f.input),
            LogicalPlan::SubqueryAlias(a) => self.is_append_only(&a.input),
            LogicalPlan::Union(u) => u.inputs.iter().all(|i| self.is_append_only(i)),
            // Each row's elements come and never go while the row stays.
            LogicalPlan::Unnest(u) => self.is_append_only(&u.input),
            // A pair of rows that never leave never leaves either; an outer
            // join retracts its padded rows.
            // An as-of join retracts a pair when a closer partner comes.
            LogicalPlan::Join(j) => {
                j.join_type == datafusion::logical_expr::JoinType::Inner
                    && !crate::dataflow::asof::Condition::of(j).is_ok_and(|c| c.is_some())
                    && self.is_append_only(&j.left)
                    && self.is_append_only(&j.right)
            }
            _ => false,
        }
    }

    fn aggregate(&self, expr: &Expr, schema: &DFSchema, append_only: bool) -> Result<AggSpec> {
        let expr = match expr {
            Expr::Alias(alias) => alias.expr.as_ref(),
            other => other,
        };
        let Expr::AggregateFunction(AggregateFunction { func, params }) = expr else {
            return Err(Error::NotSupported(format!(
                "{expr} is not supported in a materialized view"
            )));
        };
        if !params.order_by.is_empty() {
            return Err(Error::NotSupported(format!(
                "ORDER BY inside aggregates is not supported in a materialized view: {expr}"
            )));
        }
        let filter = params.filter.as_deref();
        if filter.is_some() && self.revision < 1 {
            return Err(Error::NotSupported(format!(
                "FILTER is recomputed in views of planner revision 0: {expr}"
            )));
        }
        let kind = match (func.name().to_lowercase().as_str(), params.distinct) {
            ("count", false) => AggKind::Count,
            ("count", true) => AggKind::CountDistinct,
            ("sum", false) => AggKind::Sum,
            ("avg", false) | ("mean", false) => AggKind::Avg,
            ("min", _) => AggKind::Min,
            ("max", _) => AggKind::Max,
            _ if append_only && filter.is_none() => {
                return self.accumulator(func, &params.args, params.distinct, schema);
            }
            (name, distinct) => {
                let what = if distinct {
                    format!("{name}(DISTINCT ...)")
                } else {
                    format!("{name}(...)")
                };
                return Err(Error::NotSupported(format!(
                    "aggregate {what} over an input that can change is not supported in a materialized view yet; supported: count, count(DISTINCT), sum, avg, min, max, and any aggregate over append-only input"
                )));
            }
        };
        let arg = match params.args.as_slice() {
            [] => None,
            [arg] => Some(arg),
            _ => {
                return Err(Error::NotSupported(format!(
                    "{expr}: aggregates of several arguments"
                )));
            }
        };
        let (kind, arg) = match (kind, arg) {
            // count(*) is planned as count(1): count rows.
            (AggKind::Count, Some(Expr::Literal(v, _))) if !v.is_null() => {
                (AggKind::CountStar, None)
            }
            (AggKind::Count, None) => (AggKind::CountStar, None),
            (kind, arg) => (kind, arg.cloned()),
        };
        let presence = match (kind, &arg) {
            (AggKind::CountDistinct, Some(value)) if append_only && self.revision >= 3 => {
                Some(self.expr(value, schema)?)
            }
            _ => None,
        };
        let (kind, arg) = match filter {
            None => (kind, arg),
            Some(filter) => filtered(kind, arg, filter)?,
        };
        let arg = arg.as_ref();
        let arg_type = match arg {
            Some(arg) => arg.get_type(schema)?,
            None => DataType::Null,
        };
        let exact = arg_type.is_integer()
            || arg_type.is_floating()
            || matches!(arg_type, DataType::Decimal128(..));
        if matches!(kind, AggKind::Sum | AggKind::Avg) && !exact && append_only && filter.is_none()
        {
            return self.accumulator(func, &params.args, params.distinct, schema);
        }
        if matches!(kind, AggKind::Sum | AggKind::Avg)
            && !(arg_type.is_integer()
                || arg_type.is_floating()
                || matches!(arg_type, DataType::Decimal128(..)))
        {
            return Err(Error::NotSupported(format!(
                "{expr}: sum and avg of {arg_type} are not supported"
            )));
        }
        let arg = arg.map(|a| self.expr(a, schema)).transpose()?;
        Ok(AggSpec {
            append_only,
            kind,
            arg,
            arg_type,
            accumulator: None,
            presence,
        })
    }

    /// Whether the aggregate operator keeps every aggregate of `a` by
    /// itself.
    fn kept_natively(&self, a: &datafusion::logical_expr::Aggregate) -> bool {
        let append_only = self.is_append_only(&a.input);
        a.aggr_expr
            .iter()
            .all(|e| self.aggregate(e, a.input.schema(), append_only).is_ok())
    }

    /// A GROUP BY whose aggregates are computed again from each group's
    /// rows when they change (see `over::Recompute`).
    fn recompute(
        &mut self,
        a: &datafusion::logical_expr::Aggregate,
        plan: &LogicalPlan,
    ) -> Result<usize> {
        let schema = a.input.schema();
        let append_only = self.is_append_only(&a.input);
        let aggregates = a
            .aggr_expr
            .iter()
            .map(|e| match self.recomputed(e, schema) {
                Ok(recomputed) => Ok(recomputed),
                // Refused as the aggregate operator refuses it, if it does.
                Err(e2) => Err(self.aggregate(e, schema, append_only).err().unwrap_or(e2)),
            })
            .collect::<Result<Vec<_>>>()?;
        let groups = a
            .group_expr
            .iter()
            .map(|g| self.expr(g, schema))
            .collect::<Result<Vec<_>>>()?;
        let input = self.node(&a.input)?;
        let evaluate = Evaluate::Aggregate(Recompute {
            groups: groups.clone(),
            aggregates,
        });
        let op = Over::new(groups, arrow_schema(&a.input), arrow_schema(plan), evaluate)?;
        Ok(self.push(Box::new(op), vec![input]))
    }

    fn recomputed(&self, expr: &Expr, schema: &DFSchema) -> Result<Recomputed> {
        let expr = match expr {
            Expr::Alias(alias) => alias.expr.as_ref(),
            other => other,
        };
        let Expr::AggregateFunction(AggregateFunction { func, params }) = expr else {
            return Err(Error::NotSupported(format!(
                "{expr} is not supported in a materialized view"
            )));
        };
        let args = params
            .args
            .iter()
            .map(|a| self.expr(a, schema))
            .collect::<Result<Vec<_>>>()?;
        let filter = params
            .filter
            .as_ref()
            .map(|f| self.expr(f, schema))
            .transpose()?;
        let order = params
            .order_by
            .iter()
            .map(|sort| {
                let options = datafusion::arrow::compute::SortOptions {
                    descending: !sort.asc,
                    nulls_first: sort.nulls_first,
                };
                Ok(PhysicalSortExpr::new(
                    self.expr(&sort.expr, schema)?,
                    options,
                ))
            })
            .collect::<Result<Vec<_>>>()?;
        let first_of_each = params.distinct && !order.is_empty();
        let mut builder = AggregateExprBuilder::new(func.clone(), args)
            .schema(Arc::new(schema.as_arrow().clone()))
            .alias(func.name())
            .with_distinct(params.distinct && !first_of_each);
        // A WITHIN GROUP aggregate reads its direction from the ordering
        // (percentile_disc ... ORDER BY x DESC); other ordered aggregates
        // get their rows sorted instead, so their accumulators stay plain.
        if func.inner().supports_within_group_clause() {
            builder = builder.order_by(order.clone());
        }
        let function = builder.build()?;
        function.create_accumulator()?;
        Ok(Recomputed {
            function: Arc::new(function),
            filter,
            order,
            first_of_each,
        })
    }

    /// Any DataFusion aggregate over append-only input: its accumulator
    /// never has to retract, and its state is kept per group.
    fn accumulator(
        &self,
        func: &Arc<datafusion::logical_expr::AggregateUDF>,
        args: &[Expr],
        distinct: bool,
        schema: &DFSchema,
    ) -> Result<AggSpec> {
        let args = args
            .iter()
            .map(|a| self.expr(a, schema))
            .collect::<Result<Vec<_>>>()?;
        let aggregate = AggregateExprBuilder::new(func.clone(), args)
            .schema(Arc::new(schema.as_arrow().clone()))
            .alias(func.name())
            .with_distinct(distinct)
            .build()?;
        // Refuse at CREATE what could not run.
        aggregate.create_accumulator()?;
        Ok(AggSpec {
            append_only: true,
            kind: AggKind::Accumulator,
            arg: None,
            arg_type: DataType::Null,
            accumulator: Some(Arc::new(aggregate)),
            presence: None,
        })
    }
}

/// The `PARTITION BY` every window expression shares; none when they
/// differ, so that state is kept for the whole input as one partition.
fn shared_partition(exprs: &[Expr]) -> Vec<Expr> {
    let partitions: Vec<Option<&Vec<Expr>>> = exprs
        .iter()
        .map(|e| match e {
            Expr::Alias(alias) => alias.expr.as_ref(),
            other => other,
        })
        .map(|e| match e {
            Expr::WindowFunction(f) => Some(&f.params.partition_by),
            _ => None,
        })
        .collect();
    match partitions.first() {
        Some(Some(first)) if partitions.iter().all(|p| *p == Some(*first)) => (*first).clone(),
        _ => Vec::new(),
    }
}

/// The columns `at` of a node's output (of schema `from`), as expressions.
fn column_exprs(
    from: &datafusion::arrow::datatypes::Schema,
    at: impl IntoIterator<Item = usize>,
) -> Vec<Arc<dyn PhysicalExpr>> {
    at.into_iter()
        .map(|i| Arc::new(PhysicalColumn::new(from.field(i).name(), i)) as Arc<dyn PhysicalExpr>)
        .collect()
}

/// The plan's columns, every one nullable: a view's expression that fails
/// on a row yields NULL there (see `dataflow::errors`), whatever the batch
/// planner inferred.
fn arrow_schema(plan: &LogicalPlan) -> SchemaRef {
    nullable(plan.schema().as_arrow())
}

fn unsupported(plan: &LogicalPlan) -> Error {
    let what = match plan {
        LogicalPlan::Sort(_) => {
            "ORDER BY is not supported in a materialized view; order when you read it".to_string()
        }
        LogicalPlan::Limit(_) => "LIMIT is not supported in a materialized view".to_string(),
        LogicalPlan::Window(_) => {
            "window functions (OVER) are not supported in materialized views yet".to_string()
        }
        LogicalPlan::Values(_) | LogicalPlan::EmptyRelation(_) => {
            "a materialized view must read at least one table".to_string()
        }
        other => format!(
            "{} is not supported in a materialized view",
            other.display()
        ),
    };
    Error::NotSupported(what)
}

/// Whether the view's rows are those of its only aggregate, seen through
/// projections and filters. Under `EMIT ON WINDOW CLOSE` that aggregate is
/// the windowed one, which emits each group's final row once and never
/// retracts it.
/// Whether a filter is a temporal one, which retracts rows as time passes.
fn slides(filter: &datafusion::logical_expr::Filter) -> bool {
    crate::sql::temporal::mentions_now(&filter.predicate)
}

fn closes_at_root(plan: &LogicalPlan) -> bool {
    match plan {
        LogicalPlan::Projection(p) => closes_at_root(&p.input),
        LogicalPlan::Filter(f) => !slides(f) && closes_at_root(&f.input),
        LogicalPlan::SubqueryAlias(a) => closes_at_root(&a.input),
        LogicalPlan::Aggregate(a) => !groups_anywhere(&a.input),
        _ => false,
    }
}

fn groups_anywhere(plan: &LogicalPlan) -> bool {
    matches!(plan, LogicalPlan::Aggregate(_) | LogicalPlan::Distinct(_))
        || plan.inputs().into_iter().any(groups_anywhere)
}

/// Whether `plan` holds one row per value of `keys` at most: its unique
/// columns are among them.
fn unique_on<'e>(plan: &LogicalPlan, keys: impl Iterator<Item = &'e Expr>) -> bool {
    let Some(unique) = unique_key(plan) else {
        return false;
    };
    let schema = plan.schema();
    let keyed: Vec<usize> = keys
        .filter_map(|k| match k {
            Expr::Column(c) => schema.index_of_column(c).ok(),
            _ => None,
        })
        .collect();
    !unique.is_empty() && unique.iter().all(|u| keyed.contains(u))
}

/// An aggregate's group columns, if the plan ends in one (possibly under a
/// projection that keeps them as plain columns).
fn unique_key(plan: &LogicalPlan) -> Option<Vec<usize>> {
    match plan {
        LogicalPlan::Aggregate(a) if !a.group_expr.is_empty() => {
            Some((0..a.group_expr.len()).collect())
        }
        LogicalPlan::Distinct(Distinct::All(input)) => {
            Some((0..input.schema().fields().len()).collect())
        }
        LogicalPlan::Projection(p) => {
            let inner = unique_key(&p.input)?;
            let input_columns = p.input.schema().columns();
            inner
                .iter()
                .map(|k| {
                    let wanted = &input_columns[*k];
                    p.expr.iter().position(|e| match e {
                        Expr::Column(c) => c == wanted,
                        Expr::Alias(a) => matches!(a.expr.as_ref(), Expr::Column(c) if c == wanted),
                        _ => false,
                    })
                })
                .collect()
        }
        LogicalPlan::SubqueryAlias(a) => unique_key(&a.input),
        LogicalPlan::Filter(f) => unique_key(&f.input),
        _ => None,
    }
}

/// `agg(x) FILTER (WHERE c)` as `agg(CASE WHEN c THEN x END)`: each of the
/// kinds kept natively skips NULLs, so a row the filter turns away counts
/// as a NULL argument; `count(*)` becomes a count of a constant.
fn filtered(kind: AggKind, arg: Option<Expr>, filter: &Expr) -> Result<(AggKind, Option<Expr>)> {
    let (kind, value) = match (kind, arg) {
        (AggKind::CountStar, _) => (AggKind::Count, datafusion::logical_expr::lit(1i64)),
        (kind, Some(arg)) => (kind, arg),
        (_, None) => {
            return Err(Error::Internal(
                "an aggregate with FILTER and no argument".into(),
            ));
        }
    };
    let case = datafusion::logical_expr::when(filter.clone(), value).end()?;
    Ok((kind, Some(case)))
}

/// The window function scan an aggregate reads directly (through aliases
/// only), with its window.
fn window_scan_under(
    a: &datafusion::logical_expr::Aggregate,
) -> Option<(&datafusion::logical_expr::TableScan, WindowTable)> {
    let mut input = a.input.as_ref();
    while let LogicalPlan::SubqueryAlias(alias) = input {
        input = &alias.input;
    }
    let LogicalPlan::TableScan(scan) = input else {
        return None;
    };
    Some((scan, window_of(scan)?))
}
