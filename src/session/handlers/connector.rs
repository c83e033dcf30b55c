//! CREATE SOURCE (and tables with a connector), CREATE SINK, DROP SINK, and
//! how SHOW lists them.

use std::sync::Arc;

use datafusion::arrow::datatypes::{DataType, TimeUnit};

use crate::catalog::{
    ColumnDef, ConnectorDef, ConnectorKind, Metadata, Object, SinkDef, Table, TableDef,
};
use crate::connector::{self, Status};
use crate::error::{Error, Result};
use crate::session::{Engine, Output, Session};
use crate::sql::parser::CreateSink;

/// The metadata columns a connector's `INCLUDE` adds after the declared ones.
pub fn include_columns(connector: &ConnectorDef, declared: &[ColumnDef]) -> Result<Vec<ColumnDef>> {
    if !connector.include.is_empty() && connector.connector != ConnectorKind::Kafka {
        return Err(Error::InvalidParameter(format!(
            "INCLUDE reads Kafka message metadata; connector '{}' has none",
            connector.connector
        )));
    }
    let mut out: Vec<ColumnDef> = Vec::new();
    for include in &connector.include {
        let taken = declared
            .iter()
            .chain(&out)
            .any(|c| c.name == include.column);
        if taken {
            return Err(Error::DuplicateColumn(include.column.clone()));
        }
        let (data_type, sql_type) = match include.what {
            Metadata::Key => (DataType::Binary, "bytea"),
            Metadata::Partition => (DataType::Int32, "integer"),
            Metadata::Offset => (DataType::Int64, "bigint"),
            Metadata::Timestamp => (
                DataType::Timestamp(TimeUnit::Microsecond, None),
                "timestamp without time zone",
            ),
        };
        out.push(ColumnDef {
            name: include.column.clone(),
            data_type,
            sql_type: sql_type.into(),
            nullable: true,
        });
    }
    Ok(out)
}

/// Check a new source or connector table before it is created: its options,
/// and that the broker answers.
pub async fn check_source(def: &TableDef) -> Result<()> {
    let Some(connector) = &def.connector else {
        return Ok(());
    };
    connector::check_source(connector, def)?;
    if connector.connector == ConnectorKind::Kafka {
        connector::kafka::probe(connector).await?;
    }
    Ok(())
}

pub async fn create_sink(
    engine: &Arc<Engine>,
    session: &mut Session,
    create: CreateSink,
) -> Result<Output> {
    if engine.catalog.sink(&create.name).is_some() {
        if create.if_not_exists {
            session.notice(format!("sink \"{}\" already exists, skipping", create.name));
            return Ok(Output::command("CREATE SINK"));
        }
        return Err(Error::DuplicateObject(format!(
            "sink \"{}\" already exists",
            create.name
        )));
    }
    let (from, append_only) = relation(engine, &create.from)?;
    crate::session::partitioned::refuse_follower(engine, &[from.def.id], "a sink")?;
    connector::check_sink(&create.connector, &from, append_only)?;
    connector::kafka::probe(&create.connector).await?;
    let def = SinkDef {
        id: engine.catalog.allocate_id()?,
        name: create.name,
        from: from.def.id,
        connector: create.connector,
        definition: crate::catalog::redacted(&create.text),
        node: sink_node(engine, session),
    };
    if !def.runs_on(&engine.config.node_name) {
        engine.catalog.create_sink(def)?;
        return Ok(Output::command("CREATE SINK"));
    }
    let opened = connector::kafka::open_sink_stream(&engine.node, &from, None)?;
    engine.catalog.create_sink(def.clone())?;
    engine
        .connectors
        .start_sink(&engine.node, def, Some(opened));
    Ok(Output::command("CREATE SINK"))
}

/// In a cluster one node writes a sink, the one it was sent to: every node
/// writing it would repeat each change once per node.
fn sink_node(engine: &Engine, session: &Session) -> Option<String> {
    engine.cluster()?;
    Some(
        session
            .origin
            .clone()
            .unwrap_or_else(|| engine.config.node_name.clone()),
    )
}

/// The table, source or materialized view a sink reads, and whether it never retracts.
fn relation(engine: &Arc<Engine>, name: &str) -> Result<(Arc<Table>, bool)> {
    match engine.catalog.get(name) {
        Some(Object::Table(table)) => {
            let append_only = table.def.is_append_only();
            Ok((table, append_only))
        }
        Some(Object::MaterializedView(view)) => Ok((view.table.clone(), view.def.append_only)),
        Some(Object::View(_)) => Err(Error::WrongObjectType(format!(
            "\"{name}\" is a view, which stores nothing to sink; sink a materialized view"
        ))),
        None => Err(Error::UndefinedTable(name.to_string())),
    }
}

pub async fn drop_sinks(
    engine: &Arc<Engine>,
    session: &mut Session,
    names: &[String],
    if_exists: bool,
) -> Result<Output> {
    for name in names {
        let Some(sink) = engine.catalog.sink(name) else {
            super::ddl::skip_missing(session, crate::catalog::ObjectKind::Sink, name, if_exists)?;
            continue;
        };
        engine.connectors.stop(sink.id).await;
        engine.catalog.drop_sink(name)?;
    }
    Ok(Output::command("DROP SINK"))
}

/// What SHOW SOURCES and SHOW SINKS print as a connector's status.
pub fn status(engine: &Engine, id: u64) -> String {
    match engine.connectors.progress(id) {
        Some(progress) => progress.status().to_string(),
        None => Status::Failed("not running".into()).to_string(),
    }
}

/// Messages read (sources) or written (sinks) since the server started, and errors.
pub fn counts(engine: &Engine, id: u64) -> (u64, u64) {
    use std::sync::atomic::Ordering::Relaxed;
    engine.connectors.progress(id).map_or((0, 0), |p| {
        (p.messages.load(Relaxed), p.errors.load(Relaxed))
    })
}
