//! Privileges: what a role may do with a relation.
//!
//! A superuser may do anything, an owner anything with what it owns,
//! another role what it was granted. Without password checks a user that
//! is no role acts as a superuser, so that a node nobody configured works
//! as it always did. A statement is checked against the relations it
//! names; a view reads its own inputs with its owner's rights, which were
//! checked when it was created.

use std::ops::ControlFlow;

use sqlparser::ast;

use crate::catalog::{Acl, BOOTSTRAP_ROLE, Object, Privilege};
use crate::error::{Error, Result};
use crate::session::Engine;
use crate::session::handlers::role::is_superuser;
use crate::sql::parser::ident_name;

/// Fail with 42501 unless `user` holds `privilege` on the relation `name`.
/// A name that is no relation of the catalog (a system table, a CTE, a
/// missing table) is left to planning.
pub fn check(engine: &Engine, user: &str, name: &str, privilege: Privilege) -> Result<()> {
    let Some(object) = engine.catalog.get(name) else {
        return Ok(());
    };
    if is_superuser(engine, user) {
        return Ok(());
    }
    check_schema(engine, user, Privilege::Usage)?;
    if engine.catalog.acl(object.id()).allows(user, privilege) {
        return Ok(());
    }
    Err(Error::InsufficientPrivilege(format!(
        "permission denied for {} {name}",
        noun(&object)
    )))
}

/// Fail with 42501 unless `user` may create relations: CREATE on schema
/// `public`, which PostgreSQL 15 grants to no one but its owner by default.
pub fn check_create(engine: &Engine, user: &str) -> Result<()> {
    if is_superuser(engine, user) {
        return Ok(());
    }
    check_schema(engine, user, Privilege::Usage)?;
    check_schema(engine, user, Privilege::Create)
}

fn check_schema(engine: &Engine, user: &str, privilege: Privilege) -> Result<()> {
    if engine.catalog.schema_acl().allows(user, privilege) {
        return Ok(());
    }
    Err(Error::InsufficientPrivilege(
        "permission denied for schema public".into(),
    ))
}

/// PostgreSQL's word for a relation in "permission denied for ...".
fn noun(object: &Object) -> &'static str {
    match object {
        Object::Table(_) => "table",
        Object::MaterializedView(_) => "materialized view",
        Object::View(_) => "view",
    }
}

/// Fail with 42501 unless `user` may drop, grant on or otherwise own
/// `name`: its owner or a superuser.
pub fn check_owner(engine: &Engine, user: &str, name: &str) -> Result<()> {
    let Some(object) = engine.catalog.get(name) else {
        return Ok(());
    };
    let owner = engine.catalog.acl(object.id()).owner;
    if is_superuser(engine, user) || owner.as_deref() == Some(user) {
        return Ok(());
    }
    Err(Error::InsufficientPrivilege(format!(
        "must be owner of {} {name}",
        noun(&object)
    )))
}

/// Record `user` as the owner of the relation just created as `name`.
pub fn own(engine: &Engine, user: &str, name: &str) -> Result<()> {
    let Some(object) = engine.catalog.get(name) else {
        return Ok(());
    };
    let owner = if user.is_empty() {
        BOOTSTRAP_ROLE
    } else {
        user
    };
    engine.catalog.set_acl(object.id(), Acl::owned_by(owner))
}

/// Check a statement DataFusion plans: its target needs the write's
/// privilege, every other relation it names SELECT.
pub fn check_statement(engine: &Engine, user: &str, statement: &ast::Statement) -> Result<()> {
    if is_superuser(engine, user) {
        return Ok(());
    }
    let target = target(statement);
    for name in relations(statement) {
        let privilege = match &target {
            Some((table, privilege)) if *table == name => *privilege,
            _ => Privilege::Select,
        };
        check(engine, user, &name, privilege)?;
    }
    Ok(())
}

/// Check that `user` may read every relation a query names.
pub fn check_query(engine: &Engine, user: &str, query: &ast::Query) -> Result<()> {
    if is_superuser(engine, user) {
        return Ok(());
    }
    relations(query)
        .iter()
        .try_for_each(|name| check(engine, user, name, Privilege::Select))
}

/// Check a `COPY`: `FROM` writes its table, `TO` reads it (or a query's).
pub fn check_copy(engine: &Engine, user: &str, statement: &ast::Statement) -> Result<()> {
    if is_superuser(engine, user) {
        return Ok(());
    }
    let ast::Statement::Copy { source, to, .. } = statement else {
        return Ok(());
    };
    match source {
        ast::CopySource::Table { table_name, .. } => {
            let privilege = if *to {
                Privilege::Select
            } else {
                Privilege::Insert
            };
            match catalog_name(table_name) {
                Some(name) => check(engine, user, &name, privilege),
                None => Ok(()),
            }
        }
        ast::CopySource::Query(query) => check_query(engine, user, query),
    }
}

/// The table a write changes, and the privilege that takes.
fn target(statement: &ast::Statement) -> Option<(String, Privilege)> {
    match statement {
        ast::Statement::Insert(insert) => match &insert.table {
            ast::TableObject::TableName(name) => Some((catalog_name(name)?, Privilege::Insert)),
            ast::TableObject::TableFunction(_) | ast::TableObject::TableQuery(_) => None,
        },
        ast::Statement::Update(update) => match &update.table.relation {
            ast::TableFactor::Table { name, .. } => Some((catalog_name(name)?, Privilege::Update)),
            _ => None,
        },
        ast::Statement::Delete(delete) => {
            let tables = match &delete.from {
                ast::FromTable::WithFromKeyword(t) | ast::FromTable::WithoutKeyword(t) => t,
            };
            match &tables.first()?.relation {
                ast::TableFactor::Table { name, .. } => {
                    Some((catalog_name(name)?, Privilege::Delete))
                }
                _ => None,
            }
        }
        _ => None,
    }
}

/// Every relation a statement or query names, as the catalog keys them.
fn relations<V: ast::Visit>(node: &V) -> Vec<String> {
    let mut names = Vec::new();
    let _ = ast::visit_relations(node, |name| {
        if let Some(name) = catalog_name(name)
            && !names.contains(&name)
        {
            names.push(name);
        }
        ControlFlow::<()>::Continue(())
    });
    names
}

/// A relation name in weir's one schema; `None` for another schema's
/// (`pg_catalog`, `information_schema`), which everyone may read.
fn catalog_name(name: &ast::ObjectName) -> Option<String> {
    let parts: Vec<String> = name
        .0
        .iter()
        .map(|part| part.as_ident().map(ident_name))
        .collect::<Option<_>>()?;
    match parts.as_slice() {
        [name] => Some(name.clone()),
        [schema, name] if schema == "public" => Some(name.clone()),
        [_, schema, name] if schema == "public" => Some(name.clone()),
        _ => None,
    }
}
