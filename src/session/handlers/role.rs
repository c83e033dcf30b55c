//! `CREATE ROLE`, `ALTER ROLE`, `DROP ROLE`: who may log in, with what
//! password, as a superuser or not.

use crate::catalog::{BOOTSTRAP_ROLE, RoleDef, Verifier};
use crate::config::Auth;
use crate::error::{Error, Result};
use crate::session::{Engine, Output, Session};
use crate::sql::parser::RoleOptions;

/// Whether `user` acts as a superuser. Without password checks, a user
/// name that is no role is one, as every user was before roles existed.
pub fn is_superuser(engine: &Engine, user: &str) -> bool {
    match engine.catalog.role(user) {
        Some(role) => role.superuser,
        None => !matches!(engine.config.auth, Auth::Password(_)),
    }
}

pub fn create(engine: &Engine, session: &Session, options: RoleOptions) -> Result<Output> {
    check_name(&options.name)?;
    if !is_superuser(engine, &session.user) {
        return Err(Error::InsufficientPrivilege(
            "permission denied to create role".into(),
        ));
    }
    if engine.catalog.role(&options.name).is_some() {
        return Err(duplicate(&options.name));
    }
    let verifier = match options.password.flatten() {
        Some(password) => Some(verifier(&password)?),
        None => None,
    };
    engine.catalog.create_role(RoleDef {
        id: engine.catalog.allocate_id()?,
        name: options.name,
        superuser: options.superuser.unwrap_or(false),
        login: options.login.unwrap_or(false),
        verifier,
    })?;
    Ok(Output::command("CREATE ROLE"))
}

/// PUBLIC names every role in grants; PostgreSQL keeps `none` and names
/// starting with `pg_` too.
fn check_name(name: &str) -> Result<()> {
    if name == crate::catalog::PUBLIC || name == "none" || name.starts_with("pg_") {
        return Err(Error::ReservedName(format!(
            "role name \"{name}\" is reserved"
        )));
    }
    Ok(())
}

pub fn alter(engine: &Engine, session: &Session, options: RoleOptions) -> Result<Output> {
    let Some(mut role) = engine.catalog.role(&options.name) else {
        return Err(undefined(&options.name));
    };
    // As in PostgreSQL, a role may change its own password.
    let own_password =
        options.name == session.user && options.login.is_none() && options.superuser.is_none();
    if !own_password && !is_superuser(engine, &session.user) {
        return Err(Error::InsufficientPrivilege(format!(
            "permission denied to alter role \"{}\"",
            options.name
        )));
    }
    if options.name == BOOTSTRAP_ROLE && options.superuser == Some(false) {
        return Err(Error::InsufficientPrivilege(
            "the bootstrap superuser weir must remain a superuser".into(),
        ));
    }
    role.login = options.login.unwrap_or(role.login);
    role.superuser = options.superuser.unwrap_or(role.superuser);
    if let Some(password) = options.password {
        role.verifier = password.as_deref().map(verifier).transpose()?;
    }
    engine.catalog.replace_role(role)?;
    Ok(Output::command("ALTER ROLE"))
}

pub fn drop(
    engine: &Engine,
    session: &mut Session,
    names: Vec<String>,
    if_exists: bool,
) -> Result<Output> {
    if !is_superuser(engine, &session.user) {
        return Err(Error::InsufficientPrivilege(
            "permission denied to drop role".into(),
        ));
    }
    // Every name is checked before any role goes, as one statement.
    for name in &names {
        if engine.catalog.role(name).is_none() && !if_exists {
            return Err(undefined(name));
        }
        if *name == session.user {
            return Err(Error::PrerequisiteState(
                "current user cannot be dropped".into(),
            ));
        }
        if name == BOOTSTRAP_ROLE && matches!(engine.config.auth, Auth::Password(_)) {
            return Err(Error::InsufficientPrivilege(
                "the bootstrap superuser weir cannot be dropped".into(),
            ));
        }
        let owned = engine.catalog.owned_by(name);
        if !owned.is_empty() {
            return Err(Error::DependentObjects {
                kind: "role",
                name: name.clone(),
                dependents: owned.iter().map(|o| format!("owner of {o}")).collect(),
            });
        }
    }
    for name in names {
        engine.catalog.revoke_all_from(&name)?;
        if !engine.catalog.drop_role(&name)? {
            session.notice(format!("role \"{name}\" does not exist, skipping"));
        }
    }
    Ok(Output::command("DROP ROLE"))
}

fn verifier(password: &str) -> Result<String> {
    if password.is_empty() {
        return Err(Error::InvalidParameter(
            "a password must not be empty".into(),
        ));
    }
    // A verifier given as the password (as pg_dump writes them) is stored as is.
    if Verifier::parse(password).is_some() {
        return Ok(password.to_string());
    }
    Ok(Verifier::new(password)?.to_string())
}

fn duplicate(name: &str) -> Error {
    Error::DuplicateObject(format!("role \"{name}\" already exists"))
}

fn undefined(name: &str) -> Error {
    Error::UndefinedObject(format!("role \"{name}\" does not exist"))
}
