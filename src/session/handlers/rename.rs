//! `ALTER TABLE | MATERIALIZED VIEW | VIEW | INDEX | SOURCE | SINK name
//! RENAME TO new`. Objects refer to each other by id, so a rename changes
//! the object's name and the SQL text that names it: the queries of the
//! views that read it (kept as SQL and planned again at every start) and
//! their definitions. Running views keep running as they are.

use std::sync::Arc;

use crate::catalog::{ObjectDef, ObjectKind};
use crate::error::{Error, Result};
use crate::session::{Engine, Output, Session};
use crate::sql::parser::Rename;
use crate::sql::rename;

pub fn rename(engine: &Arc<Engine>, session: &mut Session, alter: Rename) -> Result<Output> {
    let tag = format!("ALTER {}", alter.kind.noun().to_uppercase());
    if alter.kind == ObjectKind::Sink {
        return rename_sink(engine, session, &alter, tag);
    }
    let Some(object) = engine.catalog.get(&alter.name) else {
        if alter.if_exists {
            session.notice(format!(
                "relation \"{}\" does not exist, skipping",
                alter.name
            ));
            return Ok(Output::command(&tag));
        }
        return Err(Error::UndefinedTable(alter.name));
    };
    if !rename::kind_fits(alter.kind, object.kind()) {
        return Err(Error::WrongObjectType(format!(
            "\"{}\" is not {}",
            alter.name,
            alter.kind.a()
        )));
    }
    if crate::catalog::is_system(&alter.name) {
        return Err(Error::InsufficientPrivilege(format!(
            "permission denied: \"{}\" is a system table",
            alter.name
        )));
    }
    if engine.catalog.get(&alter.to).is_some() {
        return Err(Error::DuplicateTable(alter.to));
    }
    let mut def = object.def();
    let table = def.table_def_mut();
    if table.is_keyed() && !table.is_view() {
        table.key_name = Some(table.key_constraint());
    }
    table.name = alter.to.clone();
    table.definition = rename::rename_created(&table.definition, &alter.to)?;
    let mut changed = vec![def];
    for reader in engine.catalog.objects() {
        if reader.def().depends_on().contains(&object.id())
            && let Some(renamed) = renamed_reader(reader.def(), &alter.name, &alter.to)?
        {
            changed.push(renamed);
        }
    }
    engine.catalog.replace(changed)?;
    Ok(Output::command(&tag))
}

/// A view that reads `from`, reading `to` instead.
fn renamed_reader(def: ObjectDef, from: &str, to: &str) -> Result<Option<ObjectDef>> {
    Ok(match def {
        ObjectDef::MaterializedView(view) => {
            rename::renamed_view(&view, from, to)?.map(ObjectDef::MaterializedView)
        }
        ObjectDef::View(mut view) => {
            let Some(query) = rename::rename_in_text(&view.query, from, to)? else {
                return Ok(None);
            };
            view.query = query;
            if let Some(text) = rename::rename_in_view_definition(&view.table.definition, from, to)?
            {
                view.table.definition = text;
            }
            Some(ObjectDef::View(view))
        }
        ObjectDef::Table(_) => None,
    })
}

fn rename_sink(
    engine: &Arc<Engine>,
    session: &mut Session,
    alter: &Rename,
    tag: String,
) -> Result<Output> {
    let Some(sink) = engine.catalog.sink(&alter.name) else {
        if alter.if_exists {
            session.notice(format!("sink \"{}\" does not exist, skipping", alter.name));
            return Ok(Output::command(&tag));
        }
        return Err(Error::UndefinedObject(format!(
            "sink \"{}\" does not exist",
            alter.name
        )));
    };
    let definition = rename::rename_created(&sink.definition, &alter.to)?;
    engine
        .catalog
        .rename_sink(&alter.name, &alter.to, definition)?;
    Ok(Output::command(&tag))
}
