//! Window table functions in FROM: `TUMBLE(t, ts, size [, offset])`,
//! `HOP(t, ts, slide, size)`, `CUMULATE(t, ts, step, max_size)` and
//! `SESSION(t, ts, gap)`. Each is the relation `t` with `window_start` and
//! `window_end` appended, one row per (row, window) pair.
//!
//! A SELECT reads them through [`WindowTable`]'s scan; a materialized view's
//! planner recognises the same provider and builds window operators, and
//! both assign windows with [`crate::dataflow::window`]. Session windows
//! depend on the query's GROUP BY: [`session_keys`] tells the provider which
//! columns partition the sessions before the batch engine runs the plan.

use std::sync::Arc;

use async_trait::async_trait;
use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::compute::concat_batches;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::catalog::TableFunctionArgs;
use datafusion::catalog::{Session, TableFunctionImpl, TableProvider};
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::common::{Column, ScalarValue};
use datafusion::datasource::{TableType, provider_as_source, source_as_provider};
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::logical_expr::{Expr, LogicalPlan, TableScan};
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::streaming::PartitionStream;
use datafusion::physical_plan::{ExecutionPlan, execute_stream};
use futures::{StreamExt, TryStreamExt};

use crate::catalog::{Catalog, Table};
use crate::dataflow::window::{WINDOW_END, WINDOW_START, WindowKind, WindowSpec, interval_micros};
use crate::error::Error;
use crate::log::writer::Writer;
use crate::sql::provider::TableSource;
use crate::state::Store;

type DfResult<T> = datafusion::error::Result<T>;

/// The window table functions, for registration.
pub const FUNCTIONS: [&str; 4] = ["tumble", "hop", "cumulate", "session"];

/// One window table function.
#[derive(Debug)]
pub struct WindowFunction {
    name: &'static str,
    catalog: Arc<Catalog>,
    store: Arc<Store>,
    writer: Writer,
}

impl WindowFunction {
    pub fn new(
        name: &'static str,
        catalog: Arc<Catalog>,
        store: Arc<Store>,
        writer: Writer,
    ) -> Self {
        WindowFunction {
            name,
            catalog,
            store,
            writer,
        }
    }

    fn usage(&self) -> &'static str {
        match self.name {
            "tumble" => "TUMBLE(table, time_column, size [, offset])",
            "hop" => "HOP(table, time_column, slide, size)",
            "cumulate" => "CUMULATE(table, time_column, step, max_size)",
            _ => "SESSION(table, time_column, gap)",
        }
    }

    fn kind(&self, intervals: &[i64]) -> crate::Result<WindowKind> {
        let wrong =
            || Error::InvalidParameter(format!("wrong number of arguments; use {}", self.usage()));
        Ok(match (self.name, intervals) {
            ("tumble", [size]) => WindowKind::Tumble {
                size: *size,
                offset: 0,
            },
            ("tumble", [size, offset]) => WindowKind::Tumble {
                size: *size,
                offset: *offset,
            },
            ("hop", [slide, size]) => WindowKind::Hop {
                slide: *slide,
                size: *size,
            },
            ("cumulate", [step, max]) => {
                if max % step != 0 {
                    return Err(Error::InvalidParameter(
                        "the max_size of CUMULATE must be a whole multiple of its step".into(),
                    ));
                }
                WindowKind::Cumulate {
                    step: *step,
                    max: *max,
                }
            }
            ("session", [gap]) => WindowKind::Session { gap: *gap },
            _ => return Err(wrong()),
        })
    }

    fn build(&self, args: &[Expr]) -> crate::Result<WindowTable> {
        let (Some(relation), Some(column)) = (args.first(), args.get(1)) else {
            return Err(Error::InvalidParameter(format!(
                "missing arguments; use {}",
                self.usage()
            )));
        };
        let relation = name_argument(relation, "table")?;
        let column = name_argument(column, "time column")?;
        let table = self
            .catalog
            .relation(&relation)
            .ok_or_else(|| Error::UndefinedTable(relation.clone()))?;
        let time_column = table.schema.index_of(&column).map_err(|_| {
            Error::UndefinedColumn(format!(
                "column \"{column}\" does not exist in \"{relation}\""
            ))
        })?;
        if !matches!(
            table.schema.field(time_column).data_type(),
            datafusion::arrow::datatypes::DataType::Timestamp(..)
                | datafusion::arrow::datatypes::DataType::Date32
        ) {
            return Err(Error::DatatypeMismatch(format!(
                "the time column of {} must be a timestamp; \"{column}\" is {}",
                self.name.to_uppercase(),
                table.schema.field(time_column).data_type()
            )));
        }
        for bound in [WINDOW_START, WINDOW_END] {
            if table.schema.index_of(bound).is_ok() {
                return Err(Error::DuplicateColumn(format!(
                    "{bound}\" of \"{relation}\" clashes with the window column of the same name; rename it in a view first, e.g. SELECT {bound} AS inner_start, ... FROM {relation} (column \"{bound}"
                )));
            }
        }
        let names = match self.name {
            "tumble" => ["size", "offset"],
            "hop" => ["slide", "size"],
            "cumulate" => ["step", "max_size"],
            _ => ["gap", "gap"],
        };
        let intervals = args[2..]
            .iter()
            .enumerate()
            .map(|(i, arg)| match arg {
                Expr::Literal(value, _) => interval_micros(names[i.min(1)], value),
                other => Err(Error::InvalidParameter(format!(
                    "window sizes must be constant intervals, not {other}"
                ))),
            })
            .collect::<crate::Result<Vec<_>>>()?;
        let spec = WindowSpec {
            kind: self.kind(&intervals)?,
            time_column,
        };
        Ok(WindowTable {
            schema: spec.schema(&table.schema),
            source: Arc::new(TableSource::new(
                table.clone(),
                self.store.clone(),
                self.writer.clone(),
            )),
            relation: table,
            spec,
            session_keys: Vec::new(),
        })
    }
}

/// A table or column name, passed as a string (see `rewrite_windows`) or a plain name.
pub fn name_argument(arg: &Expr, what: &str) -> crate::Result<String> {
    match arg {
        Expr::Literal(ScalarValue::Utf8(Some(name)), _) => Ok(name.clone()),
        Expr::Column(c) => Ok(c.name.clone()),
        other => Err(Error::InvalidParameter(format!(
            "the {what} of a window function must be a name, not {other}"
        ))),
    }
}

impl TableFunctionImpl for WindowFunction {
    fn call_with_args(&self, args: TableFunctionArgs) -> DfResult<Arc<dyn TableProvider>> {
        Ok(Arc::new(self.build(args.exprs())?))
    }
}

/// A relation with its windows.
#[derive(Debug, Clone)]
pub struct WindowTable {
    pub relation: Arc<Table>,
    pub spec: WindowSpec,
    /// SESSION only: the relation's columns whose values partition sessions.
    pub session_keys: Vec<usize>,
    schema: SchemaRef,
    source: Arc<TableSource>,
}

impl WindowTable {
    /// The relation's schema with the window columns.
    pub fn schema(&self) -> SchemaRef {
        self.schema.clone()
    }
}

#[async_trait]
impl TableProvider for WindowTable {
    fn schema(&self) -> SchemaRef {
        self.schema.clone()
    }

    fn table_type(&self) -> TableType {
        TableType::Temporary
    }

    async fn scan(
        &self,
        state: &dyn Session,
        projection: Option<&Vec<usize>>,
        _filters: &[Expr],
        limit: Option<usize>,
    ) -> DfResult<Arc<dyn ExecutionPlan>> {
        let input = self.source.scan(state, None, &[], None).await?;
        let scan = WindowScan {
            input,
            table: self.clone(),
        };
        crate::sql::provider::streams_exec(
            self.schema.clone(),
            vec![Arc::new(scan)],
            projection,
            limit,
        )
    }
}

#[derive(Debug)]
struct WindowScan {
    input: Arc<dyn ExecutionPlan>,
    table: WindowTable,
}

impl PartitionStream for WindowScan {
    fn schema(&self) -> &SchemaRef {
        &self.table.schema
    }

    fn execute(&self, ctx: Arc<TaskContext>) -> SendableRecordBatchStream {
        let table = self.table.clone();
        let schema = table.schema.clone();
        let input = match execute_stream(self.input.clone(), ctx) {
            Ok(stream) => stream,
            Err(e) => {
                let failed = futures::stream::once(async move { Err(e) });
                return Box::pin(RecordBatchStreamAdapter::new(schema, failed));
            }
        };
        match table.spec.kind {
            WindowKind::Session { gap } => {
                let input_schema = table.relation.schema.clone();
                let all = async move {
                    let batches: Vec<RecordBatch> = input.try_collect().await?;
                    let batch = concat_batches(&input_schema, &batches)?;
                    let assigned = table.spec.sessions(&batch, &table.session_keys, gap)?;
                    Ok(assigned.apply(&batch, &table.schema)?)
                };
                let stream = futures::stream::once(all);
                Box::pin(RecordBatchStreamAdapter::new(schema, stream))
            }
            _ => {
                let stream = input.map(move |batch| {
                    let batch = batch?;
                    let times = table.spec.times(&batch)?;
                    Ok(table.spec.assign(&times).apply(&batch, &table.schema)?)
                });
                Box::pin(RecordBatchStreamAdapter::new(schema, stream))
            }
        }
    }
}

/// The window table a scan reads, if it reads one.
pub fn window_of(scan: &TableScan) -> Option<WindowTable> {
    let provider = source_as_provider(&scan.source).ok()?;
    provider.downcast_ref::<WindowTable>().cloned()
}

/// Where a column of a plan's output comes from, when it is a plain column
/// of a window table: the scan and the column's index in the window table.
pub fn trace_column(plan: &LogicalPlan, column: &Column) -> Option<(WindowTable, usize)> {
    let index = plan.schema().index_of_column(column).ok()?;
    match plan {
        LogicalPlan::TableScan(scan) => {
            let table = window_of(scan)?;
            let at = scan.projection.as_ref().map_or(index, |p| p[index]);
            Some((table, at))
        }
        LogicalPlan::Projection(p) => match unalias(&p.expr[index]) {
            Expr::Column(inner) => trace_column(&p.input, inner),
            _ => None,
        },
        LogicalPlan::SubqueryAlias(a) => trace_column(&a.input, &a.input.schema().columns()[index]),
        LogicalPlan::Filter(f) => trace_column(&f.input, column),
        // Union columns are positional; every input is windowed alike or
        // the window's close is not known.
        LogicalPlan::Union(u) => {
            let traced: Vec<(WindowTable, usize)> = u
                .inputs
                .iter()
                .map(|input| trace_column(input, &input.schema().columns()[index]))
                .collect::<Option<_>>()?;
            let (first, at) = traced.first()?.clone();
            let alike = traced.iter().all(|(t, i)| {
                t.spec.kind == first.spec.kind && bound_of(t, *i) == bound_of(&first, at)
            });
            alike.then_some((first, at))
        }
        _ => None,
    }
}

fn unalias(expr: &Expr) -> &Expr {
    match expr {
        Expr::Alias(a) => unalias(&a.expr),
        other => other,
    }
}

/// Which window bound a window table's column is, if any.
pub fn bound_of(table: &WindowTable, index: usize) -> Option<&'static str> {
    let fields = table.schema.fields().len();
    match fields - index {
        2 => Some(WINDOW_START),
        1 => Some(WINDOW_END),
        _ => None,
    }
}

/// For every GROUP BY over a SESSION window, tell the window which of its
/// columns partition the sessions: the grouped columns other than the bounds.
pub fn session_keys(plan: LogicalPlan) -> crate::Result<LogicalPlan> {
    let rewritten = plan.transform_down(|node| {
        let LogicalPlan::Aggregate(aggregate) = &node else {
            return Ok(Transformed::no(node));
        };
        let mut keys: Vec<usize> = Vec::new();
        for expr in &aggregate.group_expr {
            if let Expr::Column(c) = unalias(expr)
                && let Some((table, index)) = trace_column(&aggregate.input, c)
                && matches!(table.spec.kind, WindowKind::Session { .. })
                && bound_of(&table, index).is_none()
            {
                keys.push(index);
            }
        }
        if keys.is_empty() {
            return Ok(Transformed::no(node));
        }
        let input = Arc::unwrap_or_clone(aggregate.input.clone()).transform_up(|inner| {
            let LogicalPlan::TableScan(scan) = &inner else {
                return Ok(Transformed::no(inner));
            };
            let Some(mut table) = window_of(scan) else {
                return Ok(Transformed::no(inner));
            };
            if !matches!(table.spec.kind, WindowKind::Session { .. }) {
                return Ok(Transformed::no(inner));
            }
            table.session_keys = keys.clone();
            let mut scan = scan.clone();
            scan.source = provider_as_source(Arc::new(table));
            Ok(Transformed::yes(LogicalPlan::TableScan(scan)))
        })?;
        let mut aggregate = aggregate.clone();
        aggregate.input = Arc::new(input.data);
        Ok(Transformed::yes(LogicalPlan::Aggregate(aggregate)))
    })?;
    Ok(rewritten.data)
}
