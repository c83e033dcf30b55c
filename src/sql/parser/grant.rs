//! `GRANT { SELECT | INSERT | UPDATE | DELETE } [, ...] | ALL [PRIVILEGES]
//! ON { [TABLE] name [, ...] | ALL TABLES IN SCHEMA public }`,
//! `GRANT { USAGE | CREATE } [, ...] | ALL ON SCHEMA public`, each
//! `TO { role | PUBLIC } [, ...]`, and `REVOKE ... FROM ...`.

use sqlparser::ast::{self, Action, GrantObjects, GranteeName, GranteesType, Privileges};
use sqlparser::tokenizer::TokenWithSpan;

use super::{Statement, object_name, sqlparser_one};
use crate::catalog::{PUBLIC, Privilege};
use crate::error::{Error, Result};

/// A parsed `GRANT` or `REVOKE`.
#[derive(Debug, Clone, PartialEq)]
pub struct Grant {
    /// `false` for `REVOKE`.
    pub grant: bool,
    pub privileges: Vec<Privilege>,
    pub on: GrantOn,
    /// Role names; [`PUBLIC`] for `PUBLIC`.
    pub roles: Vec<String>,
}

/// What a grant is on.
#[derive(Debug, Clone, PartialEq)]
pub enum GrantOn {
    Relations(Vec<String>),
    /// `ALL TABLES IN SCHEMA s, ...`: every relation there at the time.
    AllTablesIn(Vec<String>),
    Schemas(Vec<String>),
}

pub fn grant(tokens: Vec<TokenWithSpan>) -> Result<Statement> {
    let (grant, privileges, objects, grantees) = match sqlparser_one(tokens)? {
        ast::Statement::Grant(g) => (true, g.privileges, g.objects, g.grantees),
        ast::Statement::Revoke(r) => (false, r.privileges, r.objects, r.grantees),
        _ => return Err(Error::Internal("GRANT parsed as another statement".into())),
    };
    let names = |names: &[ast::ObjectName]| names.iter().map(object_name).collect::<Result<_>>();
    let on = match objects {
        Some(GrantObjects::Tables(n) | GrantObjects::Views(n)) => GrantOn::Relations(names(&n)?),
        Some(GrantObjects::AllTablesInSchema { schemas }) => GrantOn::AllTablesIn(names(&schemas)?),
        Some(GrantObjects::Schemas(n)) => GrantOn::Schemas(names(&n)?),
        _ => return Err(not_supported()),
    };
    let privileges = privileges_of(privileges, matches!(on, GrantOn::Schemas(_)))?;
    Ok(Statement::Grant(Grant {
        grant,
        privileges,
        on,
        roles: grantees
            .into_iter()
            .map(grantee)
            .collect::<Result<Vec<_>>>()?,
    }))
}

fn privileges_of(privileges: Privileges, on_schema: bool) -> Result<Vec<Privilege>> {
    let actions = match privileges {
        Privileges::All { .. } if on_schema => return Ok(Privilege::ALL_ON_SCHEMA.to_vec()),
        Privileges::All { .. } => return Ok(Privilege::ALL.to_vec()),
        Privileges::Actions(actions) => actions,
    };
    let noun = if on_schema { "schema" } else { "relation" };
    actions
        .into_iter()
        .map(|action| {
            let privilege = match action {
                Action::Select { columns: None } => Privilege::Select,
                Action::Insert { columns: None } => Privilege::Insert,
                Action::Update { columns: None } => Privilege::Update,
                Action::Delete => Privilege::Delete,
                Action::Usage => Privilege::Usage,
                Action::Create { obj_type: None } => Privilege::Create,
                _ => return Err(not_supported()),
            };
            if privilege.on_schema() != on_schema {
                return Err(Error::InvalidGrantOperation(format!(
                    "invalid privilege type {} for {noun}",
                    privilege.keyword()
                )));
            }
            Ok(privilege)
        })
        .collect()
}

fn grantee(grantee: ast::Grantee) -> Result<String> {
    match (grantee.grantee_type, grantee.name) {
        (GranteesType::Public, _) => Ok(PUBLIC.to_string()),
        (_, Some(GranteeName::ObjectName(name))) => object_name(&name),
        _ => Err(not_supported()),
    }
}

fn not_supported() -> Error {
    Error::NotSupported(
        "weir grants SELECT, INSERT, UPDATE, DELETE or ALL on tables and views, and USAGE or CREATE on schema public, to roles or PUBLIC".into(),
    )
}

#[cfg(test)]
mod tests {
    use super::super::parse;
    use super::*;

    #[test]
    fn grant_and_revoke_on_tables() {
        let Statement::Grant(g) = parse("GRANT SELECT, INSERT ON TABLE t, v TO ann, Bob")
            .expect("parses")
            .remove(0)
        else {
            panic!("a grant");
        };
        assert!(g.grant);
        assert_eq!(g.privileges, [Privilege::Select, Privilege::Insert]);
        assert_eq!(g.on, GrantOn::Relations(vec!["t".into(), "v".into()]));
        assert_eq!(g.roles, ["ann", "bob"]);
        let Statement::Grant(r) = parse("REVOKE ALL ON t FROM ann").expect("parses").remove(0)
        else {
            panic!("a revoke");
        };
        assert!(!r.grant);
        assert_eq!(r.privileges, Privilege::ALL);
    }

    #[test]
    fn schema_privileges_and_public() {
        let Statement::Grant(g) = parse("GRANT CREATE, USAGE ON SCHEMA public TO ann, PUBLIC")
            .expect("parses")
            .remove(0)
        else {
            panic!("a grant");
        };
        assert_eq!(g.privileges, [Privilege::Create, Privilege::Usage]);
        assert_eq!(g.on, GrantOn::Schemas(vec!["public".into()]));
        assert_eq!(g.roles, ["ann", PUBLIC]);
        let Statement::Grant(all) = parse("GRANT ALL ON ALL TABLES IN SCHEMA public TO ann")
            .expect("parses")
            .remove(0)
        else {
            panic!("a grant");
        };
        assert_eq!(all.on, GrantOn::AllTablesIn(vec!["public".into()]));
        assert_eq!(all.privileges, Privilege::ALL);
    }

    #[test]
    fn a_privilege_the_object_cannot_have_is_refused() {
        for (sql, state) in [
            ("GRANT INSERT ON SCHEMA public TO ann", "0LP01"),
            ("GRANT CREATE ON t TO ann", "0LP01"),
            ("GRANT SELECT (a) ON t TO ann", "0A000"),
            ("GRANT EXECUTE ON FUNCTION f() TO ann", "0A000"),
        ] {
            let e = parse(sql).expect_err("refused");
            assert_eq!(e.sqlstate(), state, "{sql}: {e}");
        }
    }
}
