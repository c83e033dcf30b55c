//! The tables that keep a view's constant rows (see `sql::constants`):
//! created and written before the view starts, dropped with it.

use std::sync::Arc;

use datafusion::arrow::array::{Int32Array, RecordBatch};
use datafusion::arrow::datatypes::{DataType, Field, Schema};
use datafusion::sql::parser::Statement as DfStatement;
use sqlparser::ast;

use crate::catalog::{Object, ObjectDef, Table, TableDef, constant_table_name};
use crate::error::{Error, Result};
use crate::session::Engine;
use crate::sql::constants::{self, Constant};

/// Move the constant parts of `query` into tables of their own, filled now;
/// returns the tables, for the caller to drop if the view is not made.
pub async fn lift(engine: &Arc<Engine>, query: &mut ast::Query) -> Result<Vec<Arc<Table>>> {
    let mut ids = Vec::new();
    let mut name = || {
        let id = engine.catalog.allocate_id()?;
        ids.push(id);
        Ok(constant_table_name(id))
    };
    let lifted = constants::lift(query, &mut name)?;
    let mut tables = Vec::with_capacity(lifted.len());
    for (id, constant) in ids.into_iter().zip(lifted) {
        match keep(engine, id, constant).await {
            Ok(table) => tables.push(table),
            Err(e) => {
                drop_tables(engine, &tables).await;
                return Err(e);
            }
        }
    }
    Ok(tables)
}

/// Create the table for one constant and write its rows.
async fn keep(engine: &Arc<Engine>, id: u64, constant: Constant) -> Result<Arc<Table>> {
    let rows = match &constant.values {
        Some(values) => evaluate(engine, values).await?,
        None => vec![one_row()?],
    };
    let Some(first) = rows.first() else {
        return Err(Error::Internal("a constant query returned no batch".into()));
    };
    let columns = super::create_mv::columns(first.schema().as_ref())?;
    let def = TableDef::append_only(id, &constant.table, columns, String::new());
    let Object::Table(table) = engine.catalog.create(ObjectDef::Table(def))? else {
        return Err(Error::Internal("a created table is not a table".into()));
    };
    if let Err(e) = crate::sql::write::insert_own(&table, &engine.writer, &rows).await {
        drop_tables(engine, std::slice::from_ref(&table)).await;
        return Err(e);
    }
    Ok(table)
}

/// The rows of a VALUES list, evaluated once.
async fn evaluate(engine: &Arc<Engine>, values: &ast::Query) -> Result<Vec<RecordBatch>> {
    let state = engine.state();
    let statement = ast::Statement::Query(Box::new(values.clone()));
    let plan = state
        .statement_to_plan(DfStatement::Statement(Box::new(statement)))
        .await?;
    let physical = state.create_physical_plan(&plan).await?;
    let mut batches = datafusion::physical_plan::collect(physical, state.task_ctx()).await?;
    if batches.is_empty() {
        batches.push(RecordBatch::new_empty(Arc::new(
            plan.schema().as_arrow().clone(),
        )));
    }
    Ok(batches)
}

/// What a SELECT without FROM reads: one row, whose column it never names.
fn one_row() -> Result<RecordBatch> {
    let schema = Schema::new(vec![Field::new("one", DataType::Int32, false)]);
    Ok(RecordBatch::try_new(
        Arc::new(schema),
        vec![Arc::new(Int32Array::from(vec![1]))],
    )?)
}

/// Drop constant tables and their rows; a failure is logged, as the
/// statement that made them has already failed.
pub async fn drop_tables(engine: &Arc<Engine>, tables: &[Arc<Table>]) {
    // Those the view took with it when it went are gone already.
    let objects: Vec<Object> = tables
        .iter()
        .filter_map(|t| engine.catalog.by_id(t.def.id))
        .collect();
    for object in &objects {
        let _ = engine.runtime.forget(object.table().def.topic()).await;
    }
    if let Err(e) = engine.catalog.drop_objects(&objects) {
        tracing::error!(cause = %e, "could not drop a view's constant tables");
    }
}

/// The constant tables a view reads, which go when it goes.
pub fn of_view(engine: &Engine, depends_on: &[u64]) -> Vec<Object> {
    depends_on
        .iter()
        .filter_map(|id| engine.catalog.by_id(*id))
        .filter(|o| crate::catalog::is_constant_table(&o.table().def.name))
        .collect()
}
