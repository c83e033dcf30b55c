//! Maintenance of the store. `VACUUM` compacts it, so that what deletes,
//! updates and dropped objects left behind is gone from disk; `BACKUP TO`
//! copies it.
//!
//! A superuser's `VACUUM` compacts everything, any other role's the
//! relations it owns; `VACUUM name` compacts that relation's rows, state
//! and changelog. As in PostgreSQL, a relation the role does not own is
//! skipped with a warning, not an error.

use std::sync::Arc;

use crate::catalog::{BOOTSTRAP_ROLE, Object, Table};
use crate::error::{Error, Result};
use crate::session::handlers::role::is_superuser;
use crate::session::{Engine, Output, Session};

/// `BACKUP TO 'directory'`: a superuser's, since it writes files where the
/// server runs, as PostgreSQL's `COPY ... TO 'file'` is.
pub async fn backup(engine: &Arc<Engine>, session: &mut Session, to: String) -> Result<Output> {
    not_in_transaction(session, "BACKUP")?;
    if !is_superuser(engine, &session.user) {
        return Err(Error::InsufficientPrivilege(
            "must be superuser to back up the store".into(),
        ));
    }
    let to = std::path::PathBuf::from(to);
    if !to.is_absolute() {
        return Err(Error::InvalidParameter(format!(
            "BACKUP TO needs an absolute path on the server, not '{}'",
            to.display()
        )));
    }
    let store = engine.clone();
    let target = to.clone();
    let manifest = tokio::task::spawn_blocking(move || store.backup(&target))
        .await
        .map_err(|e| Error::Internal(format!("the backup stopped: {e}")))??;
    session.notice(format!(
        "backed up {} files, {:.1} MiB, into {}",
        manifest.files,
        manifest.bytes as f64 / (1024.0 * 1024.0),
        to.display()
    ));
    Ok(Output::command("BACKUP"))
}

fn not_in_transaction(session: &Session, statement: &str) -> Result<()> {
    if session.in_transaction {
        return Err(Error::ActiveTransaction(format!(
            "{statement} cannot run inside a transaction block"
        )));
    }
    Ok(())
}

pub async fn vacuum(
    engine: &Arc<Engine>,
    session: &mut Session,
    names: Vec<String>,
) -> Result<Output> {
    not_in_transaction(session, "VACUUM")?;
    let superuser = is_superuser(engine, &session.user);
    let targets = if names.is_empty() && superuser {
        None
    } else if names.is_empty() {
        Some(owned(engine, &session.user))
    } else {
        Some(named(engine, session, &names, superuser)?)
    };
    let engine = engine.clone();
    // RocksDB's compaction blocks until it is done: off the connection's thread.
    tokio::task::spawn_blocking(move || match targets {
        None => engine.compact(),
        Some(tables) => tables.iter().for_each(|t| engine.compact_relation(t)),
    })
    .await
    .map_err(|e| Error::Internal(format!("compaction stopped: {e}")))?;
    Ok(Output::command("VACUUM"))
}

fn owned(engine: &Engine, user: &str) -> Vec<Arc<Table>> {
    engine
        .catalog
        .owned_by(user)
        .iter()
        .filter_map(|name| engine.catalog.relation(name))
        .collect()
}

/// The named relations the role may compact; the others are skipped with
/// PostgreSQL's warnings.
fn named(
    engine: &Engine,
    session: &mut Session,
    names: &[String],
    superuser: bool,
) -> Result<Vec<Arc<Table>>> {
    let mut tables = Vec::new();
    for name in names {
        let object = engine
            .catalog
            .get(name)
            .ok_or_else(|| Error::UndefinedTable(name.clone()))?;
        let owner = engine.catalog.acl(object.id()).owner;
        let owns = owner.as_deref().unwrap_or(BOOTSTRAP_ROLE) == session.user;
        if !superuser && !owns {
            session.warning(
                "01000",
                format!("skipping \"{name}\" --- only table or database owner can vacuum it"),
            );
            continue;
        }
        match object {
            Object::View(_) => session.warning(
                "01000",
                format!(
                    "skipping \"{name}\" --- cannot vacuum non-tables or special system tables"
                ),
            ),
            other => tables.push(other.table().clone()),
        }
    }
    Ok(tables)
}
