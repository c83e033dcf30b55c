//! SHOW, SHOW CREATE and DESCRIBE.

use std::sync::Arc;

use datafusion::arrow::array::{ArrayRef, RecordBatch, StringArray};
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};

use crate::catalog::{Object, ObjectKind};
use crate::error::{Error, Result};
use crate::session::{Engine, Output, Session};

fn text_schema(names: &[&str]) -> SchemaRef {
    Arc::new(Schema::new(
        names
            .iter()
            .map(|n| Field::new(*n, DataType::Utf8, true))
            .collect::<Vec<_>>(),
    ))
}

fn text_rows(
    schema: SchemaRef,
    rows: Vec<Vec<Option<String>>>,
    tag: &'static str,
) -> Result<Output> {
    let columns: Vec<ArrayRef> = (0..schema.fields().len())
        .map(|c| Arc::new(StringArray::from_iter(rows.iter().map(|r| r[c].clone()))) as ArrayRef)
        .collect();
    let batch = RecordBatch::try_new(schema.clone(), columns)?;
    Ok(Output::Rows {
        schema,
        batches: vec![batch],
        tag,
    })
}

pub fn text_lines_schema() -> SchemaRef {
    text_schema(&["QUERY PLAN"])
}

/// One text column holding `text` a line a row (EXPLAIN output).
pub fn text_lines(column: &str, text: &str) -> Result<Output> {
    let rows = text.lines().map(|l| vec![Some(l.to_string())]).collect();
    text_rows(text_schema(&[column]), rows, "EXPLAIN")
}

/// One text column with one row holding `text` whole (EXPLAIN's JSON).
pub fn text_value(column: &str, text: String) -> Result<Output> {
    text_rows(text_schema(&[column]), vec![vec![Some(text)]], "EXPLAIN")
}

pub fn objects_schema(kind: ObjectKind) -> SchemaRef {
    match kind {
        ObjectKind::MaterializedView => text_schema(&["Name", "Progress", "Status"]),
        ObjectKind::Source => text_schema(&["Name", "Connector", "Status"]),
        ObjectKind::Sink => text_schema(&["Name", "From", "Connector", "Status"]),
        ObjectKind::Index => text_schema(&["Name", "On", "Key", "Include"]),
        _ => text_schema(&["Name"]),
    }
}

/// SHOW INDEXES [FROM relation]: each index, what it indexes, its key
/// columns and the other columns it holds.
pub fn indexes(engine: &Arc<Engine>, from: Option<&str>) -> Result<Output> {
    let on = match from {
        Some(name) => Some(
            engine
                .catalog
                .get(name)
                .ok_or_else(|| Error::UndefinedTable(name.to_string()))?
                .id(),
        ),
        None => None,
    };
    let rows = engine
        .catalog
        .objects()
        .into_iter()
        .filter_map(|o| match o {
            Object::MaterializedView(v) => v.def.index.as_ref().map(|i| (i.on, v.clone())),
            _ => None,
        })
        .filter(|(indexed, _)| on.is_none_or(|id| *indexed == id))
        .filter_map(|(indexed, v)| {
            let (key, rest) = v.index_columns()?;
            let relation = engine
                .catalog
                .by_id(indexed)
                .map(|o| o.def().name().to_string());
            Some(vec![
                Some(v.table.def.name.clone()),
                relation,
                Some(key.join(", ")),
                Some(rest.join(", ")),
            ])
        })
        .collect();
    text_rows(objects_schema(ObjectKind::Index), rows, "SHOW")
}

/// SHOW SINKS: each sink, what it reads, and how its task is doing.
fn sinks(engine: &Arc<Engine>) -> Result<Output> {
    let rows = engine
        .catalog
        .sinks()
        .into_iter()
        .map(|sink| {
            let from = engine
                .catalog
                .by_id(sink.from)
                .map(|o| o.def().name().to_string());
            vec![
                Some(sink.name.clone()),
                from,
                Some(sink.connector.connector.to_string()),
                Some(sink_status(engine, &sink)),
            ]
        })
        .collect();
    text_rows(objects_schema(ObjectKind::Sink), rows, "SHOW")
}

/// A sink another node of the cluster writes says which.
fn sink_status(engine: &Arc<Engine>, sink: &crate::catalog::SinkDef) -> String {
    match &sink.node {
        Some(node) if !sink.runs_on(&engine.config().node_name) => format!("runs on {node}"),
        _ => super::connector::status(engine, sink.id),
    }
}

/// SHOW TABLES and friends; materialized views also show how far they have read their inputs.
pub fn objects(engine: &Arc<Engine>, kind: ObjectKind) -> Result<Output> {
    if kind == ObjectKind::Sink {
        return sinks(engine);
    }
    let rows = engine
        .catalog
        .objects()
        .into_iter()
        .filter(|o| o.kind() == kind && !crate::catalog::is_system(o.def().name()))
        .map(|o| {
            let name = Some(o.def().name().to_string());
            match kind {
                ObjectKind::MaterializedView => {
                    let progress = engine.runtime.progress(o.id()).unwrap_or(0.0);
                    let status = match engine.runtime.failure(o.id()) {
                        Some(f) => format!("failed: {} (SQLSTATE {})", f.message, f.sqlstate),
                        None => "running".to_string(),
                    };
                    vec![
                        name,
                        Some(format!("{:.1}%", progress * 100.0)),
                        Some(status),
                    ]
                }
                ObjectKind::Source => {
                    let connector = o
                        .table()
                        .def
                        .connector
                        .as_ref()
                        .map(|c| c.connector.to_string());
                    let status = super::connector::status(engine, o.id());
                    vec![name, connector, Some(status)]
                }
                _ => vec![name],
            }
        })
        .collect();
    text_rows(objects_schema(kind), rows, "SHOW")
}

pub fn create_schema() -> SchemaRef {
    text_schema(&["Name", "Create Sql"])
}

pub fn create(engine: &Arc<Engine>, kind: ObjectKind, name: &str) -> Result<Output> {
    let definition = match kind {
        ObjectKind::Sink => {
            engine
                .catalog
                .sink(name)
                .ok_or_else(|| Error::UndefinedObject(format!("sink \"{name}\" does not exist")))?
                .definition
        }
        _ => find(engine, kind, name)?.table().def.definition.clone(),
    };
    // Definitions stored before secrets were redacted on creation are redacted here.
    let definition = crate::catalog::redacted(&definition);
    text_rows(
        create_schema(),
        vec![vec![Some(name.to_string()), Some(definition)]],
        "SHOW",
    )
}

pub fn describe_schema() -> SchemaRef {
    text_schema(&["Name", "Type", "Is Hidden", "Description"])
}

pub fn describe(engine: &Arc<Engine>, name: &str) -> Result<Output> {
    let object = engine
        .catalog
        .get(name)
        .ok_or_else(|| Error::UndefinedTable(name.to_string()))?;
    let table = object.table();
    let mut rows: Vec<Vec<Option<String>>> = table
        .def
        .columns
        .iter()
        .map(|c| {
            vec![
                Some(c.name.clone()),
                Some(c.sql_type.clone()),
                Some("false".into()),
                None,
            ]
        })
        .collect();
    if table.def.is_keyed() {
        rows.push(vec![
            Some("primary key".into()),
            Some(table.key_names().join(", ")),
            None,
            None,
        ]);
    }
    if let Some(w) = &table.def.watermark {
        rows.push(vec![
            Some("watermark".into()),
            Some(format!("{} AS {}", w.column, w.expr)),
            None,
            None,
        ]);
    }
    if let Some(connector) = &table.def.connector {
        rows.push(vec![
            Some("connector".into()),
            Some(connector.connector.to_string()),
            None,
            None,
        ]);
    }
    if table.def.is_append_only() {
        rows.push(vec![
            Some("append only".into()),
            Some("true".into()),
            None,
            None,
        ]);
    }
    if let Object::MaterializedView(view) = &object {
        rows.push(vec![
            Some("emit".into()),
            Some(view.def.emit.clause()),
            None,
            None,
        ]);
    }
    text_rows(describe_schema(), rows, "DESCRIBE")
}

/// SHOW LATE EVENTS: late rows per object, from the `late_events` table.
pub fn late_events_query() -> Result<sqlparser::ast::Statement> {
    let sql = format!(
        "SELECT object, count(*) AS late_events, max(arrival_time) AS last_arrival \
         FROM {} GROUP BY object ORDER BY object",
        crate::catalog::LATE_EVENTS
    );
    let mut parser = sqlparser::parser::Parser::new(&sqlparser::dialect::PostgreSqlDialect {})
        .try_with_sql(&sql)?;
    Ok(parser.parse_statement()?)
}

fn find(engine: &Arc<Engine>, kind: ObjectKind, name: &str) -> Result<Object> {
    match engine.catalog.get(name) {
        Some(object) if object.kind() == kind => Ok(object),
        Some(_) => Err(Error::WrongObjectType(format!(
            "\"{name}\" is not a {}",
            kind.noun()
        ))),
        None => Err(Error::UndefinedTable(name.to_string())),
    }
}

pub fn variable_schema(name: &str) -> SchemaRef {
    if name == "all" {
        return text_schema(&["name", "setting"]);
    }
    text_schema(&[name])
}

/// Session variables, with the values PostgreSQL clients ask for at connect time.
pub fn variable(session: &Session, name: &str) -> Result<Output> {
    let schema = variable_schema(name);
    if name == "all" {
        let rows = session
            .variables
            .iter()
            .map(|(k, v)| vec![Some(k.clone()), Some(v.clone())])
            .collect();
        return text_rows(schema, rows, "SHOW");
    }
    let value = session
        .variables
        .get(name)
        .cloned()
        .or_else(|| default_variable(name).map(str::to_string))
        .ok_or_else(|| {
            Error::UndefinedObject(format!("unrecognized configuration parameter \"{name}\""))
        })?;
    text_rows(schema, vec![vec![Some(value)]], "SHOW")
}

fn default_variable(name: &str) -> Option<&'static str> {
    Some(match name {
        "server_version" => crate::sql::functions::SERVER_VERSION,
        "server_version_num" => crate::sql::functions::SERVER_VERSION_NUM,
        "server_encoding" | "client_encoding" => "UTF8",
        "datestyle" => "ISO, MDY",
        "intervalstyle" => "postgres",
        "timezone" | "time zone" => "UTC",
        "search_path" => "\"$user\", public",
        "standard_conforming_strings" => "on",
        "transaction_isolation" | "transaction isolation level" => "read committed",
        "default_transaction_isolation" => "read committed",
        "max_identifier_length" => "63",
        "lc_collate" | "lc_ctype" => "C",
        "implicit_flush" | "rw_implicit_flush" => "false",
        "statement_timeout" => "0",
        "application_name" => "",
        _ => return None,
    })
}

pub fn cluster_schema() -> SchemaRef {
    text_schema(&["Node", "Address", "HTTP Address", "Partitions", "Is Self"])
}

/// SHOW CLUSTER: the live nodes and the partitions each owns. A node on
/// its own is a cluster of one that owns every partition.
pub fn cluster(engine: &Arc<Engine>) -> Result<Output> {
    let config = engine.config();
    let rows = match engine.cluster() {
        None => {
            let all: Vec<i32> = (0..config.cluster_partitions as i32).collect();
            vec![vec![
                Some(config.node_name.clone()),
                Some(config.advertise.clone()),
                Some(config.http_listen.to_string()),
                Some(partition_list(&all)),
                Some("true".into()),
            ]]
        }
        Some(replication) => replication
            .cluster
            .members()
            .into_iter()
            .map(|member| {
                let is_self = member.info.node == config.node_name;
                vec![
                    Some(member.info.node),
                    Some(member.info.address),
                    Some(member.info.http_address),
                    Some(partition_list(&member.partitions)),
                    Some(is_self.to_string()),
                ]
            })
            .collect(),
    };
    text_rows(cluster_schema(), rows, "SHOW")
}

fn partition_list(partitions: &[i32]) -> String {
    partitions
        .iter()
        .map(i32::to_string)
        .collect::<Vec<_>>()
        .join(",")
}
