//! `GRANT` and `REVOKE` on relations.

use crate::error::{Error, Result};
use crate::session::privileges;
use crate::session::{Engine, Output, Session};
use crate::sql::parser::Grant;

pub fn grant(engine: &Engine, session: &Session, grant: Grant) -> Result<Output> {
    // Everything is checked before anything changes.
    let mut objects = Vec::new();
    for name in &grant.relations {
        let object = engine
            .catalog
            .get(name)
            .ok_or_else(|| Error::UndefinedTable(name.clone()))?;
        privileges::check_owner(engine, &session.user, name)?;
        objects.push(object);
    }
    for role in &grant.roles {
        if engine.catalog.role(role).is_none() {
            return Err(Error::UndefinedObject(format!(
                "role \"{role}\" does not exist"
            )));
        }
    }
    for object in objects {
        let mut acl = engine.catalog.acl(object.id());
        for role in &grant.roles {
            if grant.grant {
                acl.grant(role, &grant.privileges);
            } else {
                acl.revoke(role, &grant.privileges);
            }
        }
        engine.catalog.set_acl(object.id(), acl)?;
    }
    Ok(Output::command(if grant.grant {
        "GRANT"
    } else {
        "REVOKE"
    }))
}
