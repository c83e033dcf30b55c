//! One module per statement family; [`dispatch`] routes a parsed statement.

pub mod comment;
pub mod connector;
mod constants;
pub mod copy;
pub mod create_mv;
mod csv;
pub mod ddl;
pub mod function;
mod grant;
mod index;
pub mod insert;
mod maintenance;
pub mod query;
mod rename;
pub mod role;
pub mod show;
pub mod subscribe;

use std::sync::Arc;

use datafusion::arrow::datatypes::{DataType, SchemaRef};
use datafusion::common::ParamValues;

use crate::catalog::Privilege;
use crate::error::{Error, Result};
use crate::session::privileges;
use crate::session::{Engine, Output, Session};
use crate::sql::parser::{CursorSource, Statement, Transaction};

pub async fn dispatch(
    engine: &Arc<Engine>,
    session: &mut Session,
    statement: Statement,
    params: Option<&ParamValues>,
) -> Result<Output> {
    match statement {
        Statement::CreateTable(create) => {
            privileges::check_create(engine, &session.user)?;
            let name = create.name.clone();
            let created = engine.catalog.get(&name).is_none();
            let output = ddl::create_table(engine, session, create).await?;
            owned(engine, session, &name, created)?;
            Ok(output)
        }
        Statement::Drop(drop) if drop.kind == crate::catalog::ObjectKind::Subscription => {
            subscribe::drop_subscriptions(engine, session, &drop.names, drop.if_exists)
        }
        Statement::Drop(drop) if drop.kind == crate::catalog::ObjectKind::Sink => {
            connector::drop_sinks(engine, session, &drop.names, drop.if_exists).await
        }
        Statement::Drop(drop) => {
            for name in &drop.names {
                privileges::check_owner(engine, &session.user, name)?;
            }
            ddl::drop(engine, session, drop).await
        }
        Statement::CreateFunction { create, text } => {
            function::create(engine, session, &create, &text)
        }
        Statement::DropFunction { name, if_exists } => {
            function::drop(engine, session, &name, if_exists)
        }
        Statement::CreateSink(create) => {
            privileges::check_create(engine, &session.user)?;
            privileges::check(engine, &session.user, &create.from, Privilege::Select)?;
            connector::create_sink(engine, session, create).await
        }
        Statement::Show(kind) => show::objects(engine, kind),
        Statement::ShowIndexes(from) => show::indexes(engine, from.as_deref()),
        Statement::ShowCluster => show::cluster(engine),
        Statement::ShowCreate { kind, name } => show::create(engine, kind, &name),
        Statement::ShowVariable(name) => show::variable(session, &name),
        Statement::ShowLateEvents => query::run(engine, &show::late_events_query()?, None).await,
        Statement::Describe(name) => show::describe(engine, &name),
        Statement::Flush => {
            engine.runtime.flush().await?;
            Ok(Output::command("FLUSH"))
        }
        Statement::Copy(ast) => {
            privileges::check_copy(engine, &session.user, &ast)?;
            copy::start(engine, session, &ast).await
        }
        Statement::Set { name, value } => {
            if value.eq_ignore_ascii_case("default") {
                session.variables.remove(&name);
                return Ok(Output::command("SET"));
            }
            if name == crate::session::PRODUCER_SEQ {
                crate::session::parse_seq(&value)?;
            }
            if crate::session::TIMEOUTS.contains(&name.as_str()) {
                crate::session::parse_timeout(&name, &value)?;
            }
            check_format_setting(&name, &value)?;
            if !name.is_empty() {
                session.variables.insert(name, value);
            }
            Ok(Output::command("SET"))
        }
        Statement::Reset { name, tag } => {
            match name {
                Some(name) => session.variables.remove(&name),
                None => {
                    session.variables.clear();
                    None
                }
            };
            Ok(Output::command(tag))
        }
        Statement::Transaction(t) => Ok(transaction(session, t)),
        Statement::CopySubscribe(subscribe) => {
            privileges::check(engine, &session.user, &subscribe.name, Privilege::Select)?;
            Ok(Output::CopyOut(Box::new(
                subscribe::open(engine, &subscribe).await?,
            )))
        }
        Statement::Declare { name, source } => {
            check_cursor(engine, session, &source)?;
            subscribe::declare(engine, session, name, source).await
        }
        Statement::Fetch(fetch) => subscribe::fetch(engine, session, fetch).await,
        Statement::Close(name) => subscribe::close(session, name),
        Statement::CreateSubscription {
            name,
            from,
            retention,
            if_not_exists,
        } => {
            privileges::check_create(engine, &session.user)?;
            privileges::check(engine, &session.user, &from, Privilege::Select)?;
            subscribe::create_subscription(engine, session, name, from, retention, if_not_exists)
        }
        Statement::AdvanceClock(by) => query::advance_clock(engine, &by).await,
        Statement::Query(mut ast) => {
            if let Some(zone) = session_zone(session) {
                crate::sql::make_time::spell_zone(Arc::make_mut(&mut ast), &zone);
            }
            privileges::check_statement(engine, &session.user, &ast)?;
            let producer = session.producer()?;
            let run = query::run(engine, &ast, params);
            let output = crate::log::writer::PRODUCER.scope(producer, run).await?;
            if session.implicit_flush() && is_write(&output) {
                engine.runtime.flush().await?;
            }
            Ok(output)
        }
        Statement::CreateView(mut create) => {
            if let Some(zone) = session_zone(session) {
                crate::sql::make_time::spell_zone(&mut create.query, &zone);
            }
            privileges::check_create(engine, &session.user)?;
            privileges::check_query(engine, &session.user, &create.query)?;
            let name = create.name.clone();
            let created = engine.catalog.get(&name).is_none();
            let output = create_mv::create(engine, session, create).await?;
            owned(engine, session, &name, created)?;
            Ok(output)
        }
        Statement::CreateLogicalView(mut create) => {
            if let Some(zone) = session_zone(session) {
                crate::sql::make_time::spell_zone(&mut create.query, &zone);
            }
            privileges::check_create(engine, &session.user)?;
            privileges::check_query(engine, &session.user, &create.query)?;
            let name = create.name.clone();
            let created = engine.catalog.get(&name).is_none();
            let output = create_mv::create_logical(engine, session, create).await?;
            owned(engine, session, &name, created)?;
            Ok(output)
        }
        Statement::ExplainRunning {
            name,
            analyze,
            format,
        } => {
            privileges::check(engine, &session.user, &name, Privilege::Select)?;
            create_mv::explain_running(engine, &name, analyze, format)
        }
        Statement::ExplainView { create, format } => {
            privileges::check_query(engine, &session.user, &create.query)?;
            create_mv::explain(engine, create, format).await
        }
        Statement::Comment(c) => comment::comment(engine, c),
        Statement::Grant(g) => grant::grant(engine, session, g),
        Statement::CreateRole(options) => role::create(engine, session, options),
        Statement::AlterRole(options) => role::alter(engine, session, options),
        Statement::DropRole { names, if_exists } => role::drop(engine, session, names, if_exists),
        Statement::Vacuum(names) => maintenance::vacuum(engine, session, names).await,
        Statement::Backup(to) => maintenance::backup(engine, session, to).await,
        Statement::CreateIndex(create) => {
            privileges::check_owner(engine, &session.user, &create.relation)?;
            index::create(engine, session, create).await
        }
        Statement::Rename(alter) => {
            privileges::check_owner(engine, &session.user, &alter.name)?;
            rename::rename(engine, session, alter)
        }
        Statement::Unsupported(message) => Err(Error::NotSupported(message)),
    }
}

/// The session's `TimeZone`, when it set one.
fn session_zone(session: &Session) -> Option<String> {
    session.variables.get("timezone").cloned()
}

/// The creator owns what a CREATE made (not what IF NOT EXISTS found).
fn owned(engine: &Engine, session: &Session, name: &str, created: bool) -> Result<()> {
    if created {
        privileges::own(engine, &session.user, name)?;
    }
    Ok(())
}

/// A cursor reads what it is declared on.
fn check_cursor(engine: &Engine, session: &Session, source: &CursorSource) -> Result<()> {
    let user = &session.user;
    match source {
        CursorSource::Subscribe(subscribe) => {
            privileges::check(engine, user, &subscribe.name, Privilege::Select)
        }
        CursorSource::Query(statement) => privileges::check_statement(engine, user, statement),
        CursorSource::Subscription { name, .. } => {
            let Some(from) = engine
                .catalog
                .subscription(name)
                .and_then(|s| engine.catalog.by_id(s.from))
            else {
                return Ok(());
            };
            privileges::check(engine, user, &from.table().def.name, Privilege::Select)
        }
    }
}

fn is_write(output: &Output) -> bool {
    matches!(output, Output::Command { tag, .. } if matches!(tag.as_str(), "INSERT" | "UPDATE" | "DELETE" | "COPY"))
}

/// Each statement commits on its own; transaction blocks are accepted so that
/// drivers which wrap statements in them work, and they scope cursors.
fn transaction(session: &mut Session, t: Transaction) -> Output {
    if let Transaction::Savepoint(tag) = t {
        return Output::command(tag);
    }
    session.in_transaction = t == Transaction::Begin;
    if t != Transaction::Begin {
        session.cursors.clear();
    }
    match t {
        Transaction::Begin => Output::Transaction {
            tag: "BEGIN",
            begin: true,
        },
        Transaction::Commit => Output::Transaction {
            tag: "COMMIT",
            begin: false,
        },
        Transaction::Rollback | Transaction::Savepoint(_) => Output::Transaction {
            tag: "ROLLBACK",
            begin: false,
        },
    }
}

/// Parameter types and result columns, for the extended protocol's Describe.
/// A FETCH returns its cursor's columns, so it needs the session.
pub async fn describe(
    engine: &Arc<Engine>,
    session: Option<&Session>,
    statement: &Statement,
) -> Result<(Vec<Option<DataType>>, Option<SchemaRef>)> {
    let columns = |schema| Ok((Vec::new(), Some(schema)));
    match statement {
        Statement::Fetch(fetch) => match session.and_then(|s| s.cursors.get(&fetch.cursor)) {
            Some(cursor) => columns(cursor.schema()),
            None => Err(Error::UndefinedCursor(fetch.cursor.clone())),
        },
        Statement::Show(kind) => columns(show::objects_schema(*kind)),
        Statement::ShowIndexes(_) => {
            columns(show::objects_schema(crate::catalog::ObjectKind::Index))
        }
        Statement::ExplainView { .. } | Statement::ExplainRunning { .. } => {
            columns(show::text_lines_schema())
        }
        Statement::ShowCreate { .. } => columns(show::create_schema()),
        Statement::ShowCluster => columns(show::cluster_schema()),
        Statement::ShowVariable(name) => columns(show::variable_schema(name)),
        Statement::ShowLateEvents => query::describe(engine, &show::late_events_query()?).await,
        Statement::Describe(_) => columns(show::describe_schema()),
        Statement::Query(ast) => query::describe(engine, ast).await,
        Statement::CreateTable(_)
        | Statement::Drop(_)
        | Statement::Flush
        | Statement::Copy(_)
        | Statement::Set { .. }
        | Statement::Reset { .. }
        | Statement::Transaction(_)
        | Statement::AdvanceClock(_)
        | Statement::CreateView(_)
        | Statement::CreateLogicalView(_)
        | Statement::CopySubscribe(_)
        | Statement::Declare { .. }
        | Statement::Close(_)
        | Statement::CreateSubscription { .. }
        | Statement::CreateSink(_)
        | Statement::CreateFunction { .. }
        | Statement::DropFunction { .. }
        | Statement::Comment(_)
        | Statement::Grant(_)
        | Statement::CreateRole(_)
        | Statement::AlterRole(_)
        | Statement::DropRole { .. }
        | Statement::Vacuum(_)
        | Statement::CreateIndex(_)
        | Statement::Rename(_)
        | Statement::Backup(_)
        | Statement::Unsupported(_) => Ok((Vec::new(), None)),
    }
}

/// The settings that change how values print must parse, as PostgreSQL
/// refuses a bad one at SET.
fn check_format_setting(name: &str, value: &str) -> Result<()> {
    let valid = match name {
        "timezone" => crate::sql::datetime::parse_zone(value).is_ok(),
        "extra_float_digits" => value
            .trim()
            .parse::<i32>()
            .is_ok_and(|d| (-15..=3).contains(&d)),
        _ => true,
    };
    if valid {
        return Ok(());
    }
    let shown = if name == "timezone" { "TimeZone" } else { name };
    Err(Error::InvalidParameter(format!(
        "invalid value for parameter \"{shown}\": \"{value}\""
    )))
}
