//! `COMMENT ON`: a comment on a relation or one of its columns, kept in the
//! catalog and read back through `pg_description`.

use std::sync::Arc;

use crate::catalog::{Object, ObjectKind};
use crate::error::{Error, Result};
use crate::session::{Engine, Output};
use crate::sql::parser::Comment;

pub fn comment(engine: &Arc<Engine>, comment: Comment) -> Result<Output> {
    let object = engine
        .catalog
        .get(&comment.object)
        .filter(|o| !crate::catalog::is_system(o.def().name()))
        .ok_or_else(|| {
            Error::UndefinedTable(format!("relation \"{}\" does not exist", comment.object))
        })?;
    let subid = match &comment.column {
        Some(column) => column_number(&object, column)?,
        None => {
            check_kind(&object, comment.kind)?;
            0
        }
    };
    engine
        .catalog
        .set_comment((object.id(), subid), comment.text.filter(|t| !t.is_empty()))?;
    Ok(Output::command("COMMENT"))
}

/// A column's 1-based position (`attnum`), as PostgreSQL numbers it.
fn column_number(object: &Object, column: &str) -> Result<i32> {
    let table = object.table();
    let position = table.def.columns.iter().position(|c| c.name == column);
    match position {
        Some(i) => Ok(i as i32 + 1),
        None => Err(Error::UndefinedColumn(format!(
            "column \"{column}\" of relation \"{}\" does not exist",
            table.def.name
        ))),
    }
}

/// `COMMENT ON TABLE` names a table (or a source, which psql lists as one),
/// `COMMENT ON VIEW` a view, and so on; PostgreSQL refuses the others.
fn check_kind(object: &Object, named: ObjectKind) -> Result<()> {
    let actual = object.kind();
    let fits = match named {
        ObjectKind::Table | ObjectKind::Source => {
            matches!(actual, ObjectKind::Table | ObjectKind::Source)
        }
        other => actual == other,
    };
    if fits {
        return Ok(());
    }
    Err(Error::WrongObjectType(format!(
        "\"{}\" is not a {}",
        object.def().name(),
        named.noun()
    )))
}
