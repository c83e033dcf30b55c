//! CREATE TABLE / CREATE STREAM and DROP.

use std::collections::HashSet;
use std::sync::Arc;

use datafusion::arrow::datatypes::{DataType, Field, Schema};
use datafusion::common::Constraint;
use datafusion::logical_expr::{CreateMemoryTable, DdlStatement, LogicalPlan};
use datafusion::sql::parser::Statement as DfStatement;
use sqlparser::ast;

use crate::catalog::{
    ColumnDef, ConflictAction, ConflictDef, ConnectorKind, Object, ObjectDef, ObjectKind, Storage,
    TableDef, WatermarkDef,
};
use crate::dataflow::runtime::Retention;
use crate::error::{Error, Result};
use crate::session::{Engine, Output, Session};
use crate::sql::parser::{CreateTable, Drop, ident_name};

pub async fn create_table(
    engine: &Arc<Engine>,
    session: &mut Session,
    create: CreateTable,
) -> Result<Output> {
    let tag = match create.connector.as_ref().is_some_and(|c| c.source) {
        true => "CREATE SOURCE",
        false => "CREATE TABLE",
    };
    if engine.catalog.get(&create.name).is_some() {
        if create.if_not_exists {
            session.notice(format!(
                "relation \"{}\" already exists, skipping",
                create.name
            ));
            return Ok(Output::command(tag));
        }
        return Err(Error::DuplicateTable(create.name));
    }
    let mut create = with_generated_columns(create)?;
    let retention = take_retention(&mut create)?;
    let ast::Statement::CreateTable(parsed) = create.ast.as_ref() else {
        return Err(Error::Internal("CREATE TABLE without its statement".into()));
    };
    refuse_unsupported(parsed)?;
    let plan = plan_create(engine, &create).await?;
    let columns = column_defs(parsed, &plan);
    let primary_key = primary_key(&create, &plan, &columns)?;
    let columns = columns
        .into_iter()
        .enumerate()
        .map(|(i, c)| ColumnDef {
            nullable: c.nullable && !primary_key.contains(&i),
            ..c
        })
        .collect::<Vec<_>>();
    let mut columns = columns;
    if let Some(connector) = &create.connector {
        columns.extend(super::connector::include_columns(connector, &columns)?);
    }
    let watermark = watermark(&create, &columns)?;
    let conflict = conflict(&create, &columns, &primary_key)?;
    let storage = match (create.append_only, primary_key.is_empty()) {
        (true, true) => Storage::AppendOnly,
        (true, false) => Storage::KeyedAppendOnly,
        (false, _) => Storage::Rows,
    };
    let def = TableDef {
        id: engine.catalog.allocate_id()?,
        name: create.name.clone(),
        columns,
        primary_key,
        storage,
        watermark,
        partitions: engine.config.default_partitions,
        // Shown by SHOW CREATE and pg_catalog: no secret may be in it.
        definition: crate::catalog::redacted(&create.text),
        watermarked: false,
        connector: create.connector.clone(),
        retention,
        conflict,
        key_name: None,
    };
    super::connector::check_source(&def).await?;
    let object = engine.catalog.create(ObjectDef::Table(def))?;
    retain_log(engine, &object.table().def, 0)?;
    if let Object::Table(table) = object
        && table.def.connector.is_some()
    {
        engine
            .connectors
            .start_source(&engine.node, table, engine.config.cluster.is_some());
    }
    Ok(Output::command(tag))
}

/// Hand a table's log to the runtime's compaction: a table's changes fold
/// into its live rows after its retention (an hour unless set), an
/// append-only table's are dropped after its retention, if it has one.
/// `at_least` is what a subscription to it asks for.
pub fn retain_log(engine: &Engine, def: &TableDef, at_least: i64) -> Result<()> {
    let partitions = def.partitions.max(1);
    let retention = match (def.contents_in_log(), def.retention) {
        (true, None) => return Ok(()),
        (true, Some(micros)) => Retention::expire(micros.max(at_least), partitions),
        (false, micros) => {
            let micros = micros.unwrap_or(crate::catalog::DEFAULT_RETENTION);
            Retention::fold(micros.max(at_least), partitions)
        }
    };
    engine.runtime.retain(def.log_topic(), retention)
}

/// `WITH (retention = '1 day')` (or RisingWave's `retention_seconds = 86400`),
/// taken from the table's options or its connector's; any other plain
/// option is refused, as PostgreSQL refuses a parameter it does not know.
fn take_retention(create: &mut CreateTable) -> Result<Option<i64>> {
    let mut options: Vec<(String, String)> = Vec::new();
    if let Some(connector) = create.connector.as_mut() {
        for key in ["retention", "retention_seconds"] {
            if let Some(value) = connector.options.remove(key) {
                options.push((key.to_string(), value));
            }
        }
    }
    if let ast::Statement::CreateTable(parsed) = create.ast.as_mut() {
        let table_options = std::mem::take(&mut parsed.table_options);
        if let ast::CreateTableOptions::With(with) = table_options {
            for option in with {
                options.push(plain_option(option)?);
            }
        } else if table_options != ast::CreateTableOptions::None {
            return Err(Error::NotSupported(format!(
                "table options {table_options} are not supported; weir takes WITH (retention = '1 day')"
            )));
        }
    }
    let mut retention = None;
    for (key, value) in options {
        let micros = match key.as_str() {
            "retention" => super::subscribe::parse_duration(&value)
                .map_err(|e| Error::InvalidParameter(format!("retention: {e}")))?
                .as_micros() as i64,
            "retention_seconds" => value
                .parse::<i64>()
                .ok()
                .filter(|s| *s > 0)
                .and_then(|s| s.checked_mul(1_000_000))
                .ok_or_else(|| {
                    Error::InvalidParameter(format!(
                        "retention_seconds must be a positive whole number of seconds, not \"{value}\""
                    ))
                })?,
            other => {
                return Err(Error::InvalidParameter(format!(
                    "unrecognized parameter \"{other}\"; a table takes WITH (retention = '1 day')"
                )));
            }
        };
        if retention.replace(micros).is_some() {
            return Err(Error::Syntax("the retention is given twice".into()));
        }
    }
    Ok(retention)
}

/// One `key = value` of a plain `WITH (...)`, the value as written.
fn plain_option(option: ast::SqlOption) -> Result<(String, String)> {
    let ast::SqlOption::KeyValue { key, value } = option else {
        return Err(Error::Syntax(format!(
            "table option {option} is not a key = value pair"
        )));
    };
    let value = match value {
        ast::Expr::Value(ast::ValueWithSpan {
            value: ast::Value::SingleQuotedString(text),
            ..
        }) => text,
        other => other.to_string(),
    };
    Ok((key.value.to_lowercase(), value))
}

/// A generator source written without columns takes the generator's own.
fn with_generated_columns(create: CreateTable) -> Result<CreateTable> {
    let (Some(connector), ast::Statement::CreateTable(parsed)) =
        (&create.connector, create.ast.as_ref())
    else {
        return Ok(create);
    };
    if !parsed.columns.is_empty() {
        return Ok(create);
    }
    if connector.connector == ConnectorKind::Kafka {
        return Err(Error::Syntax(
            "a Kafka source declares its columns: CREATE SOURCE name (column type, ...) WITH (...)"
                .into(),
        ));
    }
    let Some(columns) = crate::connector::generator::columns(connector)? else {
        return Ok(create);
    };
    let sql = format!("CREATE TABLE {} ({columns})", create.name);
    let Some(crate::sql::parser::Statement::CreateTable(generated)) =
        crate::sql::parser::parse(&sql)?.into_iter().next()
    else {
        return Err(Error::Internal("generated columns did not parse".into()));
    };
    Ok(CreateTable {
        ast: generated.ast,
        ..create
    })
}

fn refuse_unsupported(parsed: &ast::CreateTable) -> Result<()> {
    if parsed.query.is_some() {
        return Err(Error::NotSupported(
            "CREATE TABLE ... AS is not supported; use CREATE MATERIALIZED VIEW".into(),
        ));
    }
    if parsed.columns.is_empty() {
        return Err(Error::Syntax(
            "CREATE TABLE needs at least one column".into(),
        ));
    }
    let mut seen = HashSet::new();
    for column in &parsed.columns {
        let name = ident_name(&column.name);
        if !seen.insert(name.clone()) {
            return Err(Error::DuplicateColumn(name));
        }
        for option in &column.options {
            match &option.option {
                ast::ColumnOption::Null | ast::ColumnOption::NotNull => {}
                ast::ColumnOption::PrimaryKey(_) => {}
                other => {
                    return Err(Error::NotSupported(format!(
                        "column option {other} (on column \"{name}\") is not supported"
                    )));
                }
            }
        }
    }
    Ok(())
}

/// Column names and types, with the Arrow types DataFusion chooses for the SQL types.
fn column_defs(parsed: &ast::CreateTable, plan: &CreateMemoryTable) -> Vec<ColumnDef> {
    let schema = plan.input.schema();
    parsed
        .columns
        .iter()
        .zip(schema.fields())
        .map(|(column, field)| ColumnDef {
            name: field.name().clone(),
            data_type: field.data_type().clone(),
            sql_type: crate::sql::pg_catalog::pg_type_name(field.data_type())
                .unwrap_or_else(|| column.data_type.to_string().to_lowercase()),
            nullable: field.is_nullable(),
        })
        .collect()
}

async fn plan_create(engine: &Arc<Engine>, create: &CreateTable) -> Result<CreateMemoryTable> {
    let state = engine.state();
    let plan = state
        .statement_to_plan(DfStatement::Statement(create.ast.clone()))
        .await?;
    match plan {
        LogicalPlan::Ddl(DdlStatement::CreateMemoryTable(table)) => Ok(table),
        _ => Err(Error::Internal(
            "CREATE TABLE planned as another statement".into(),
        )),
    }
}

fn primary_key(
    create: &CreateTable,
    plan: &CreateMemoryTable,
    columns: &[ColumnDef],
) -> Result<Vec<usize>> {
    if !plan.column_defaults.is_empty() {
        return Err(Error::NotSupported(
            "DEFAULT values are not supported yet".into(),
        ));
    }
    let mut key = Vec::new();
    for constraint in plan.constraints.iter() {
        match constraint {
            Constraint::PrimaryKey(indices) if key.is_empty() => key = indices.clone(),
            Constraint::PrimaryKey(_) => {
                return Err(Error::Syntax(
                    "multiple primary keys are not allowed".into(),
                ));
            }
            Constraint::Unique(_) => {
                return Err(Error::NotSupported(
                    "UNIQUE constraints are not supported; use a PRIMARY KEY".into(),
                ));
            }
        }
    }
    if key.iter().any(|i| *i >= columns.len()) {
        return Err(Error::Internal("primary key names a missing column".into()));
    }
    // A connector's rows replace those of the same key, which would
    // change rows of a table that views read as only growing.
    if create.append_only && !key.is_empty() && create.connector.is_some() {
        return Err(Error::NotSupported(
            "an append-only table with a connector cannot have a primary key: rows of a repeated key would replace each other; drop APPEND ONLY or the key".into(),
        ));
    }
    Ok(key)
}

/// The table's `ON CONFLICT` clause, checked against its columns and key.
fn conflict(
    create: &CreateTable,
    columns: &[ColumnDef],
    key: &[usize],
) -> Result<Option<ConflictDef>> {
    let Some((action, versions)) = &create.conflict else {
        return Ok(None);
    };
    if key.is_empty() {
        return Err(Error::NotSupported(
            "ON CONFLICT needs a primary key: it says what a row whose key is taken does".into(),
        ));
    }
    if create.append_only && *action != ConflictAction::DoNothing {
        return Err(Error::NotSupported(
            "an append-only table takes only ON CONFLICT DO NOTHING: its rows never change".into(),
        ));
    }
    if create.connector.is_some() {
        return Err(Error::NotSupported(
            "ON CONFLICT is for INSERT; a table fed by a connector keeps the last row per key"
                .into(),
        ));
    }
    if *action == ConflictAction::DoNothing && !versions.is_empty() {
        return Err(Error::Syntax(
            "WITH VERSION COLUMN needs DO UPDATE FULL, OVERWRITE or DO UPDATE IF NOT NULL: DO NOTHING keeps the stored row whatever its version".into(),
        ));
    }
    let version_columns = versions
        .iter()
        .map(|name| {
            columns.iter().position(|c| &c.name == name).ok_or_else(|| {
                Error::UndefinedColumn(format!("version column \"{name}\" does not exist"))
            })
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(Some(ConflictDef {
        action: *action,
        version_columns,
    }))
}

fn watermark(create: &CreateTable, columns: &[ColumnDef]) -> Result<Option<WatermarkDef>> {
    let Some((column, expr)) = &create.watermark else {
        return Ok(None);
    };
    let Some(def) = columns.iter().find(|c| &c.name == column) else {
        return Err(Error::UndefinedColumn(format!(
            "column \"{column}\" named in WATERMARK FOR does not exist"
        )));
    };
    if !matches!(def.data_type, DataType::Timestamp(..) | DataType::Date32) {
        return Err(Error::WrongObjectType(format!(
            "WATERMARK FOR needs a timestamp column; \"{column}\" is {}",
            def.sql_type
        )));
    }
    let fields: Vec<Field> = columns
        .iter()
        .map(|c| Field::new(&c.name, c.data_type.clone(), true))
        .collect();
    let schema = Arc::new(Schema::new(fields));
    crate::catalog::watermark_expr(&schema, expr)?;
    Ok(Some(WatermarkDef {
        column: column.clone(),
        expr: expr.clone(),
    }))
}

pub async fn drop(engine: &Arc<Engine>, session: &mut Session, drop: Drop) -> Result<Output> {
    let tag = format!("DROP {}", drop.kind.noun().to_uppercase());
    let mut doomed: Vec<Object> = Vec::new();
    for name in &drop.names {
        let Some(object) = engine.catalog.get(name) else {
            skip_missing(session, drop.kind, name, drop.if_exists)?;
            continue;
        };
        if object.kind() != drop.kind {
            return Err(Error::WrongObjectType(format!(
                "\"{name}\" is not {}; use DROP {} to remove it",
                drop.kind.a(),
                object.kind().noun().to_uppercase()
            )));
        }
        if crate::catalog::is_system(name) {
            return Err(Error::InsufficientPrivilege(format!(
                "permission denied: \"{name}\" is a system table"
            )));
        }
        let dependents = dependents(engine, &object);
        let readers = dependents.iter().chain(std::iter::once(&object));
        let subscriptions: Vec<String> = readers
            .clone()
            .flat_map(|o| engine.catalog.subscriptions_of(o.id()))
            .map(|s| format!("subscription {s}"))
            .chain(
                readers
                    .flat_map(|o| engine.catalog.sinks_of(o.id()))
                    .map(|s| format!("sink {s}")),
            )
            .collect();
        // Indexes go with what they index, as in PostgreSQL, unannounced.
        let mut described: Vec<String> = dependents
            .iter()
            .filter(|o| o.kind() != ObjectKind::Index)
            .map(describe)
            .collect();
        described.extend(subscriptions);
        if !described.is_empty() && !drop.cascade {
            return Err(Error::DependentObjects {
                kind: drop.kind.noun(),
                name: name.clone(),
                dependents: described,
            });
        }
        for dependent in described {
            session.notice(format!("drop cascades to {dependent}"));
        }
        doomed.extend(dependents);
        doomed.push(object);
    }
    let constants: Vec<Object> = doomed
        .iter()
        .filter_map(|o| match o {
            Object::MaterializedView(view) => Some(view),
            _ => None,
        })
        .flat_map(|view| super::constants::of_view(engine, &view.def.depends_on))
        .collect();
    doomed.extend(constants);
    let mut seen = HashSet::new();
    doomed.retain(|o| seen.insert(o.id()));
    // Not while partitioned views are being rebuilt, which could start
    // one again after it is stopped here.
    let partitioned = doomed
        .iter()
        .any(|o| matches!(o, Object::MaterializedView(v) if v.def.partitioned));
    let _partitioning = crate::session::partitioned::hold_rebuilds(engine, partitioned).await;
    for object in &doomed {
        for sink in engine.catalog.sinks_of(object.id()) {
            if let Some(sink) = engine.catalog.sink(&sink) {
                engine.connectors.stop(sink.id).await;
            }
        }
        match object {
            Object::MaterializedView(view) => engine.runtime.drop_view(view.table.def.id).await?,
            Object::Table(table) => {
                engine.connectors.stop(table.def.id).await;
                engine.runtime.forget(table.def.topic()).await?;
                forget_split(engine, table);
            }
            Object::View(_) => {}
        }
    }
    engine.catalog.drop_objects(&doomed)?;
    Ok(Output::command(&tag))
}

/// A split source's rows topic and feed group go once its feed here has
/// stopped; in the background, since Kafka may be slow to answer.
fn forget_split(engine: &Arc<Engine>, table: &Arc<crate::catalog::Table>) {
    let split = crate::session::partitioned::split_sources(engine, &[table.def.id]);
    let share = engine.share.borrow().clone();
    let (Some(share), false) = (share, split.is_empty()) else {
        return;
    };
    let table = table.clone();
    engine.background.spawn(async move {
        crate::connector::kafka::forget_split_source(&table, &share).await;
    });
}

/// Everything that reads `object`, directly or through other views, dependents first.
fn dependents(engine: &Arc<Engine>, object: &Object) -> Vec<Object> {
    let mut out = Vec::new();
    for name in engine.catalog.dependents(object.id()) {
        if let Some(dependent) = engine.catalog.get(&name) {
            out.extend(dependents(engine, &dependent));
            out.push(dependent);
        }
    }
    out
}

fn describe(object: &Object) -> String {
    format!("{} {}", object.kind().noun(), object.table().def.name)
}

/// DROP of an object that does not exist: a notice with IF EXISTS, else
/// the error PostgreSQL gives.
pub fn skip_missing(
    session: &mut Session,
    kind: ObjectKind,
    name: &str,
    if_exists: bool,
) -> Result<()> {
    if !if_exists {
        return Err(missing(kind, name));
    }
    session.notice(format!(
        "{} \"{name}\" does not exist, skipping",
        kind.noun()
    ));
    Ok(())
}

fn missing(kind: ObjectKind, name: &str) -> Error {
    match kind {
        ObjectKind::Table | ObjectKind::MaterializedView | ObjectKind::View => {
            Error::UndefinedTable(name.to_string())
        }
        ObjectKind::Source | ObjectKind::Sink | ObjectKind::Subscription | ObjectKind::Index => {
            Error::UndefinedObject(format!("{} \"{name}\" does not exist", kind.noun()))
        }
    }
}
