//! `GRANT` and `REVOKE` on relations and on schema `public`.

use crate::catalog::{Acl, Object, PUBLIC};
use crate::error::{Error, Result};
use crate::session::handlers::role::is_superuser;
use crate::session::privileges;
use crate::session::{Engine, Output, Session};
use crate::sql::parser::{Grant, GrantOn};

pub fn grant(engine: &Engine, session: &Session, grant: Grant) -> Result<Output> {
    // Everything is checked before anything changes.
    check_roles(engine, &grant.roles)?;
    match &grant.on {
        GrantOn::Relations(names) => change_relations(engine, session, &grant, names)?,
        GrantOn::AllTablesIn(schemas) => {
            schemas.iter().try_for_each(|s| check_schema(s))?;
            let names: Vec<String> = engine
                .catalog
                .objects()
                .iter()
                .map(|o| o.table().def.name.clone())
                .filter(|name| !crate::catalog::is_system(name))
                .collect();
            change_relations(engine, session, &grant, &names)?;
        }
        GrantOn::Schemas(schemas) => {
            schemas.iter().try_for_each(|s| check_schema(s))?;
            // Schema public belongs to the bootstrap superuser, as it
            // belongs to the database owner in PostgreSQL.
            if !is_superuser(engine, &session.user) {
                return Err(Error::InsufficientPrivilege(
                    "must be owner of schema public".into(),
                ));
            }
            let mut acl = engine.catalog.schema_acl();
            apply(&mut acl, &grant);
            engine.catalog.set_schema_acl(acl)?;
        }
    }
    Ok(Output::command(if grant.grant {
        "GRANT"
    } else {
        "REVOKE"
    }))
}

fn check_roles(engine: &Engine, roles: &[String]) -> Result<()> {
    match roles
        .iter()
        .find(|role| role.as_str() != PUBLIC && engine.catalog.role(role).is_none())
    {
        Some(role) => Err(Error::UndefinedObject(format!(
            "role \"{role}\" does not exist"
        ))),
        None => Ok(()),
    }
}

/// weir has one schema for what users create.
fn check_schema(name: &str) -> Result<()> {
    match name {
        "public" => Ok(()),
        "pg_catalog" | "information_schema" => Err(Error::NotSupported(format!(
            "the system schema {name} is read-only; grants are on schema public"
        ))),
        _ => Err(Error::UndefinedSchema(name.to_string())),
    }
}

fn owned_relation(engine: &Engine, session: &Session, name: &str) -> Result<Object> {
    let object = engine
        .catalog
        .get(name)
        .ok_or_else(|| Error::UndefinedTable(name.to_string()))?;
    privileges::check_owner(engine, &session.user, name)?;
    Ok(object)
}

/// Grant or revoke on relations, once every one of them is found owned.
fn change_relations(
    engine: &Engine,
    session: &Session,
    grant: &Grant,
    names: &[String],
) -> Result<()> {
    let objects = names
        .iter()
        .map(|name| owned_relation(engine, session, name))
        .collect::<Result<Vec<_>>>()?;
    for object in objects {
        let mut acl = engine.catalog.acl(object.id());
        apply(&mut acl, grant);
        engine.catalog.set_acl(object.id(), acl)?;
    }
    Ok(())
}

fn apply(acl: &mut Acl, grant: &Grant) {
    for role in &grant.roles {
        if grant.grant {
            acl.grant(role, &grant.privileges);
        } else {
            acl.revoke(role, &grant.privileges);
        }
    }
}
