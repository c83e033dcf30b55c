//! `CREATE FUNCTION ... LANGUAGE SQL` and `DROP FUNCTION` (see
//! `sql::sql_function`).

use std::sync::Arc;

use sqlparser::ast;

use crate::error::{Error, Result};
use crate::session::{Engine, Output, Session, privileges};

pub fn create(
    engine: &Arc<Engine>,
    session: &mut Session,
    create: &ast::CreateFunction,
    text: &str,
) -> Result<Output> {
    privileges::check_create(engine, &session.user)?;
    let def = crate::sql::sql_function::definition(create, text, &session.user)?;
    if engine.catalog.function(&def.name).is_some() {
        if create.if_not_exists {
            session.notice(format!(
                "function \"{}\" already exists, skipping",
                def.name
            ));
            return Ok(Output::command("CREATE FUNCTION"));
        }
        return Err(Error::DuplicateFunction(format!(
            "function \"{}\" already exists",
            def.name
        )));
    }
    // Planned now, so a body that does not plan is refused at CREATE.
    let udf = crate::sql::sql_function::udf(&engine.state(), &def)?;
    engine.catalog.create_function(def)?;
    engine.register_function(udf);
    Ok(Output::command("CREATE FUNCTION"))
}

pub fn drop(
    engine: &Arc<Engine>,
    session: &mut Session,
    name: &str,
    if_exists: bool,
) -> Result<Output> {
    let Some(def) = engine.catalog.function(name) else {
        if if_exists {
            session.notice(format!("function {name}() does not exist, skipping"));
            return Ok(Output::command("DROP FUNCTION"));
        }
        return Err(Error::UndefinedFunction(format!(
            "function {name}() does not exist"
        )));
    };
    if def.owner != session.user && !super::role::is_superuser(engine, &session.user) {
        return Err(Error::InsufficientPrivilege(format!(
            "must be owner of function {name}"
        )));
    }
    // A view keeps the text of its query and plans it again at start.
    let users = engine
        .catalog
        .views_calling(|sql| crate::sql::sql_function::calls(sql, name));
    if !users.is_empty() {
        return Err(Error::DependentObjects {
            kind: "function",
            name: format!("{name}()"),
            dependents: users,
        });
    }
    engine.catalog.drop_function(name)?;
    engine.deregister_function(name);
    Ok(Output::command("DROP FUNCTION"))
}
