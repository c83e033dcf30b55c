//! Statements DataFusion plans: SELECT (any query), INSERT, UPDATE, DELETE, EXPLAIN.
//!
//! Every statement reads one snapshot, shared by all the tables it scans.
//! INSERT runs through DataFusion into the table sink; UPDATE and DELETE take
//! DataFusion's plan of the affected rows and send them to the writer, which
//! re-checks them against the latest committed state.

use std::ops::ControlFlow;
use std::sync::Arc;

use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::datatypes::{DataType, SchemaRef};
use datafusion::common::{Column, ParamValues};
use datafusion::dataframe::DataFrame;
use datafusion::execution::SessionState;
use datafusion::logical_expr::{DmlStatement, Expr, LogicalPlan, LogicalPlanBuilder, WriteOp};
use datafusion::sql::parser::Statement as DfStatement;
use sqlparser::ast;

use crate::catalog::Table;
use crate::error::{Error, Result};
use crate::session::{Engine, Output};
use crate::sql::colnames::Names;
use crate::sql::write;

/// A statement's DataFusion plan, against a state that reads one snapshot,
/// and the names its result columns take (see [`crate::sql::colnames`]).
pub async fn plan(
    engine: &Arc<Engine>,
    ast: &ast::Statement,
) -> Result<(SessionState, LogicalPlan, Names)> {
    let mut state = engine.state();
    state.config_mut().set_extension(engine.store.read_view());
    let mut ast = ast.clone();
    if let ast::Statement::Query(query) = &mut ast {
        crate::sql::corresponding::rewrite(&state, query).await?;
    }
    let names = crate::sql::colnames::rewrite(&mut ast);
    crate::sql::colnames::name_derived_columns(&mut ast);
    crate::sql::datetime::rewrite_interval_literals(&mut ast);
    let plan = state
        .statement_to_plan(DfStatement::Statement(Box::new(ast)))
        .await?;
    let plan = crate::sql::window::session_keys(plan)?;
    let plan = crate::sql::asof::for_batch(plan)?;
    let plan = narrow_decimals(plan)?;
    Ok((state, plan, names))
}

/// The most decimal places a result column carries: the numeric encoder
/// (rust_decimal) holds 28, and a wider value, such as DataFusion's
/// scale-30 product of a scale-20 and a scale-10 decimal, hung it.
const MAX_DECIMAL_SCALE: i8 = 28;

/// A query whose result has decimals wider than [`MAX_DECIMAL_SCALE`]
/// rounds them to it, as RisingWave's decimals do.
fn narrow_decimals(plan: LogicalPlan) -> Result<LogicalPlan> {
    if matches!(
        plan,
        LogicalPlan::Dml(_)
            | LogicalPlan::Ddl(_)
            | LogicalPlan::Statement(_)
            | LogicalPlan::Copy(_)
    ) {
        return Ok(plan);
    }
    let wide = |t: &DataType| matches!(t, DataType::Decimal128(_, s) | DataType::Decimal256(_, s) if *s > MAX_DECIMAL_SCALE);
    let schema = plan.schema().clone();
    if !schema.fields().iter().any(|f| wide(f.data_type())) {
        return Ok(plan);
    }
    let exprs = schema
        .iter()
        .map(|(qualifier, field)| {
            let column = Expr::Column(Column::from((qualifier, field)));
            match wide(field.data_type()) {
                true => {
                    let narrow = DataType::Decimal128(38, MAX_DECIMAL_SCALE);
                    datafusion::logical_expr::cast(column, narrow).alias(field.name())
                }
                false => column,
            }
        })
        .collect::<Vec<_>>();
    Ok(LogicalPlanBuilder::from(plan).project(exprs)?.build()?)
}

pub async fn run(
    engine: &Arc<Engine>,
    ast: &ast::Statement,
    params: Option<&ParamValues>,
) -> Result<Output> {
    if let Some(insert) = super::insert::recognise(engine, ast) {
        return insert.run(engine, params).await;
    }
    let (state, mut plan, names) = plan(engine, ast).await?;
    if let Some(params) = params {
        plan = plan.replace_params_with_values(params)?;
    }
    match &plan {
        LogicalPlan::Dml(dml) => match &dml.op {
            WriteOp::Insert(_) => insert(state, plan).await,
            WriteOp::Delete => delete(engine, state, dml).await,
            WriteOp::Update => update(engine, state, dml).await,
            other => Err(Error::NotSupported(format!("{other} is not supported"))),
        },
        LogicalPlan::Ddl(ddl) => Err(Error::NotSupported(format!(
            "{} is not supported",
            ddl.name()
        ))),
        LogicalPlan::Statement(_) | LogicalPlan::Copy(_) => Err(Error::NotSupported(format!(
            "{} is not supported",
            first_words(ast)
        ))),
        _ => {
            let schema = names.apply(Arc::new(plan.schema().as_arrow().clone()));
            let rows = DataFrame::new(state, plan).execute_stream().await?;
            Ok(Output::Stream {
                rows: crate::session::RowStream(first_computed(schema.clone(), rows).await?),
                schema,
                tag: "SELECT",
            })
        }
    }
}

/// The stream with its first batch computed, so that an error there (most
/// errors) is the statement's, before any row is sent. The stream keeps
/// DataFusion's column names; `schema` carries the client's.
async fn first_computed(
    schema: SchemaRef,
    mut rows: datafusion::execution::SendableRecordBatchStream,
) -> Result<datafusion::execution::SendableRecordBatchStream> {
    use futures::StreamExt;
    let first = match rows.next().await {
        Some(batch) => Some(batch?),
        None => None,
    };
    let rest = futures::stream::iter(first.map(Ok)).chain(rows);
    Ok(Box::pin(
        datafusion::physical_plan::stream::RecordBatchStreamAdapter::new(schema, rest.boxed()),
    ))
}

fn first_words(ast: &ast::Statement) -> String {
    ast.to_string()
        .split_whitespace()
        .take(2)
        .collect::<Vec<_>>()
        .join(" ")
}

/// What the extended protocol's Describe reports: parameter types (`$1`
/// first) and result columns (none for statements that return a tag).
pub async fn describe(
    engine: &Arc<Engine>,
    ast: &ast::Statement,
) -> Result<(Vec<Option<DataType>>, Option<SchemaRef>)> {
    if let Some(insert) = super::insert::recognise(engine, ast) {
        return Ok((insert.parameter_types(), None));
    }
    let (_, plan, names) = plan(engine, ast).await?;
    let schema = match &plan {
        LogicalPlan::Dml(_)
        | LogicalPlan::Ddl(_)
        | LogicalPlan::Statement(_)
        | LogicalPlan::Copy(_) => None,
        other => Some(names.apply(Arc::new(other.schema().as_arrow().clone()))),
    };
    Ok((parameter_types(&plan, highest_placeholder(ast))?, schema))
}

/// The highest `$n` written in the statement: the number of parameters a
/// client binds, whether or not the plan still reads each one.
fn highest_placeholder(ast: &ast::Statement) -> usize {
    use sqlparser::ast::{Visit, Visitor};
    struct Highest(usize);
    impl Visitor for Highest {
        type Break = ();
        fn pre_visit_value(&mut self, value: &ast::ValueWithSpan) -> ControlFlow<()> {
            if let ast::Value::Placeholder(p) = &value.value
                && let Some(n) = p.strip_prefix('$').and_then(|n| n.parse().ok())
            {
                self.0 = self.0.max(n);
            }
            ControlFlow::Continue(())
        }
    }
    let mut highest = Highest(0);
    let _ = ast.visit(&mut highest);
    highest.0
}

fn parameter_types(plan: &LogicalPlan, written: usize) -> Result<Vec<Option<DataType>>> {
    let cast = cast_parameter_types(plan)?;
    let types: Vec<(usize, Option<DataType>)> = plan
        .get_parameter_types()?
        .into_iter()
        .map(|(name, t)| {
            let t = t.or_else(|| cast.get(&name).cloned());
            (name, t)
        })
        .filter_map(|(name, t)| {
            name.trim_start_matches('$')
                .parse::<usize>()
                .ok()
                .map(|i| (i, t))
        })
        .collect();
    // A parameter the plan no longer reads (its subquery was folded away)
    // keeps its place, untyped, so the ones after it keep their numbers.
    let count = types
        .iter()
        .map(|(i, _)| *i)
        .max()
        .unwrap_or(0)
        .max(written);
    let mut by_position = vec![None; count];
    for (i, t) in types {
        if let Some(slot) = i.checked_sub(1).and_then(|i| by_position.get_mut(i)) {
            *slot = t;
        }
    }
    Ok(by_position)
}

/// The type of each parameter written `$n::type`: PostgreSQL gives the
/// parameter that type, where DataFusion leaves it unknown (and a client
/// would then send a `timedelta` for `$1::interval` as text).
fn cast_parameter_types(plan: &LogicalPlan) -> Result<std::collections::HashMap<String, DataType>> {
    use datafusion::common::tree_node::{TreeNode, TreeNodeRecursion};
    use datafusion::logical_expr::Expr;
    let mut types = std::collections::HashMap::new();
    plan.apply_with_subqueries(|node| {
        node.apply_expressions(|expr| {
            expr.apply(|e| {
                if let Expr::Cast(cast) = e
                    && let Expr::Placeholder(p) = cast.expr.as_ref()
                    && p.field.is_none()
                {
                    types
                        .entry(p.id.clone())
                        .or_insert_with(|| cast.field.data_type().clone());
                }
                Ok(TreeNodeRecursion::Continue)
            })
        })
    })?;
    Ok(types)
}

async fn insert(state: SessionState, plan: LogicalPlan) -> Result<Output> {
    let batches = DataFrame::new(state, plan).collect().await?;
    let count = batches
        .first()
        .and_then(|b| b.column_by_name("count"))
        .and_then(|c| {
            c.as_any()
                .downcast_ref::<datafusion::arrow::array::UInt64Array>()
        })
        .map_or(0, |a| a.value(0));
    Ok(Output::with_rows("INSERT", count))
}

fn target_table(engine: &Arc<Engine>, dml: &DmlStatement) -> Result<Arc<Table>> {
    let name = dml.table_name.table();
    engine
        .catalog
        .table(name)
        .ok_or_else(|| Error::UndefinedTable(name.to_string()))
}

async fn delete(engine: &Arc<Engine>, state: SessionState, dml: &DmlStatement) -> Result<Output> {
    let table = target_table(engine, dml)?;
    let rows = DataFrame::new(state, dml.input.as_ref().clone())
        .collect()
        .await?;
    let view = engine.store.read_view();
    let count = write::delete_rows(&table, &engine.writer, &view, &rows).await?;
    Ok(Output::with_rows("DELETE", count))
}

/// DataFusion plans UPDATE as a projection of the new rows over the matching
/// old ones; we add the old columns to that projection so one pass yields both.
async fn update(engine: &Arc<Engine>, state: SessionState, dml: &DmlStatement) -> Result<Output> {
    let table = target_table(engine, dml)?;
    let LogicalPlan::Projection(projection) = dml.input.as_ref() else {
        return Err(Error::Internal(
            "UPDATE was not planned as a projection".into(),
        ));
    };
    let width = table.schema.fields().len();
    let source = projection.input.schema();
    let mut exprs = projection.expr.clone();
    for i in 0..width {
        exprs.push(
            Expr::Column(Column::from(source.qualified_field(i))).alias(format!("__weir_old_{i}")),
        );
    }
    let plan = LogicalPlanBuilder::from(projection.input.as_ref().clone())
        .project(exprs)?
        .build()?;
    let batches = DataFrame::new(state, plan).collect().await?;
    let new: Vec<RecordBatch> = batches
        .iter()
        .map(|b| b.project(&(0..width).collect::<Vec<_>>()))
        .collect::<Result<_, _>>()?;
    let old: Vec<RecordBatch> = batches
        .iter()
        .map(|b| b.project(&(width..2 * width).collect::<Vec<_>>()))
        .collect::<Result<_, _>>()?;
    let view = engine.store.read_view();
    let count = write::update_rows(&table, &engine.writer, &view, &old, &new).await?;
    Ok(Output::with_rows("UPDATE", count))
}

/// `ADVANCE CLOCK BY <interval>`: DataFusion evaluates the interval.
/// The value of a constant expression.
pub async fn evaluate(
    engine: &Arc<Engine>,
    expr: &ast::Expr,
) -> Result<datafusion::common::ScalarValue> {
    let state = engine.state();
    let plan = state.create_logical_plan(&format!("SELECT {expr}")).await?;
    let rows = DataFrame::new(state, plan).collect().await?;
    rows.first()
        .filter(|b| b.num_rows() == 1)
        .map(|b| datafusion::common::ScalarValue::try_from_array(b.column(0), 0))
        .transpose()?
        .ok_or_else(|| Error::InvalidParameter(format!("{expr} has no value")))
}

pub async fn advance_clock(engine: &Arc<Engine>, by: &ast::Expr) -> Result<Output> {
    let value = evaluate(engine, by).await.ok();
    let micros = value
        .as_ref()
        .and_then(crate::dataflow::window::day_time_micros)
        .ok_or_else(|| {
            Error::InvalidParameter(format!(
                "ADVANCE CLOCK BY needs an interval of days or less, like INTERVAL '1' SECOND; got {by}"
            ))
        })?;
    engine.clock.advance(micros)?;
    Ok(Output::command("ADVANCE CLOCK"))
}
