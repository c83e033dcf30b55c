//! `CREATE INDEX`: a view of a relation's rows kept by the indexed columns
//! and the relation's key, built and kept up to date as views are, read by
//! scans whose filters bound its first column and by lookup joins on it
//! ([`crate::dataflow::index_read`]).

use std::sync::Arc;

use crate::catalog::{Emit, IndexDef, ObjectKind, OnError, Storage, TableDef, ViewDef};
use crate::error::{Error, Result};
use crate::session::{Engine, Output, Session};
use crate::sql::parser::CreateIndex;
use crate::sql::plan::Planner;
use crate::sql::rename::quoted;

const TAG: &str = "CREATE INDEX";

pub async fn create(
    engine: &Arc<Engine>,
    session: &mut Session,
    create: CreateIndex,
) -> Result<Output> {
    let base = indexed(engine, &create.relation)?;
    crate::session::partitioned::refuse_follower(engine, &[base.def.id], "an index")?;
    let columns = index_columns(&base.def, &create)?;
    let name = match &create.name {
        Some(name) => name.clone(),
        None => free_name(engine, &create.relation, &create.columns),
    };
    if engine.catalog.get(&name).is_some() {
        if !create.if_not_exists {
            return Err(Error::DuplicateTable(name));
        }
        session.notice(format!("relation \"{name}\" already exists, skipping"));
        return Ok(Output::command(TAG));
    }
    let list = |names: &[String]| {
        names
            .iter()
            .map(|c| quoted(c).to_string())
            .collect::<Vec<_>>()
            .join(", ")
    };
    let query = format!(
        "SELECT {} FROM {}",
        list(&columns),
        quoted(&create.relation)
    );
    let mut definition = format!(
        "CREATE INDEX {} ON {} ({})",
        quoted(&name),
        quoted(&create.relation),
        list(&create.columns)
    );
    if !create.include.is_empty() {
        definition.push_str(&format!(" INCLUDE ({})", list(&create.include)));
    }
    let parsed = crate::sql::parser::parse_query(&query)?;
    let plan = super::create_mv::plan_query(engine, &parsed).await?;
    let shape = Planner::shape(&engine.catalog, &plan, Emit::Changes)?;
    let key_width = dedup(&create.columns).len();
    let key = shape.key.map(|base_key| {
        let mut key: Vec<usize> = (0..key_width).collect();
        key.extend(base_key.into_iter().filter(|i| *i >= key_width));
        key
    });
    let table = TableDef {
        id: engine.catalog.allocate_id()?,
        name,
        columns: super::create_mv::columns(plan.schema().as_arrow())?,
        storage: if key.is_some() {
            Storage::KeyedView
        } else {
            Storage::MultisetView
        },
        primary_key: key.unwrap_or_default(),
        watermark: None,
        partitions: 1,
        definition,
        watermarked: shape.watermarked,
        connector: None,
        retention: None,
        conflict: None,
        key_name: None,
    };
    let def = ViewDef {
        table,
        query: parsed.to_string(),
        depends_on: shape.depends_on,
        emit: Emit::Changes,
        retention: crate::catalog::DEFAULT_RETENTION,
        append_only: shape.append_only,
        on_error: OnError::Null,
        index: Some(IndexDef {
            on: base.def.id,
            key_columns: key_width,
            partial_cover: !create.include.is_empty(),
        }),
        shared_subplans: true,
        plan_revision: crate::sql::plan::PLAN_REVISION,
        partitioned: false,
    };
    let name = def.table.name.clone();
    super::create_mv::build_view(engine, session, def).await?;
    crate::session::privileges::own(engine, &session.user, &name)?;
    Ok(Output::command(TAG))
}

/// The relation an index can be made on: a table, source or materialized view.
fn indexed(engine: &Engine, name: &str) -> Result<Arc<crate::catalog::Table>> {
    let object = engine
        .catalog
        .get(name)
        .ok_or_else(|| Error::UndefinedTable(name.to_string()))?;
    match object.kind() {
        ObjectKind::Table | ObjectKind::Source | ObjectKind::MaterializedView => {}
        other => {
            return Err(Error::WrongObjectType(format!(
                "cannot create an index on {} \"{name}\"; index a table, source or materialized view",
                other.noun()
            )));
        }
    }
    if crate::catalog::is_system(name) {
        return Err(Error::InsufficientPrivilege(format!(
            "permission denied: \"{name}\" is a system table"
        )));
    }
    Ok(object.table().clone())
}

/// The index's columns: its key columns, then the others it holds in the
/// relation's order (all of them, or those of `INCLUDE` and the
/// relation's key).
fn index_columns(base: &TableDef, create: &CreateIndex) -> Result<Vec<String>> {
    let exists = |name: &String| -> Result<()> {
        if base.columns.iter().any(|c| c.name == *name) {
            Ok(())
        } else {
            Err(Error::UndefinedColumn(format!(
                "column \"{name}\" does not exist"
            )))
        }
    };
    for name in create.columns.iter().chain(&create.include) {
        exists(name)?;
    }
    let mut columns = dedup(&create.columns);
    let key_names: Vec<&String> = base
        .primary_key
        .iter()
        .map(|i| &base.columns[*i].name)
        .collect();
    for column in &base.columns {
        let held = create.include.is_empty()
            || create.include.contains(&column.name)
            || key_names.contains(&&column.name);
        if held && !columns.contains(&column.name) {
            columns.push(column.name.clone());
        }
    }
    Ok(columns)
}

fn dedup(names: &[String]) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for name in names {
        if !out.contains(name) {
            out.push(name.clone());
        }
    }
    out
}

/// PostgreSQL's name for an unnamed index: `<relation>_<columns>_idx`,
/// with a number added until no relation has it.
fn free_name(engine: &Engine, relation: &str, columns: &[String]) -> String {
    let stem = format!("{relation}_{}_idx", columns.join("_"));
    (0..)
        .map(|n| match n {
            0 => stem.clone(),
            n => format!("{stem}{n}"),
        })
        .find(|name| engine.catalog.get(name).is_none())
        .unwrap_or(stem)
}
