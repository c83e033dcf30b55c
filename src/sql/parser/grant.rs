//! `GRANT { SELECT | INSERT | UPDATE | DELETE } [, ...] | ALL [PRIVILEGES]
//! ON [TABLE] name [, ...] TO role [, ...]` and `REVOKE ... FROM role [, ...]`.

use sqlparser::ast::{self, Action, GrantObjects, GranteeName, GranteesType, Privileges};
use sqlparser::tokenizer::TokenWithSpan;

use super::{Statement, object_name, sqlparser_one};
use crate::catalog::Privilege;
use crate::error::{Error, Result};

/// A parsed `GRANT` or `REVOKE` on relations.
#[derive(Debug, Clone, PartialEq)]
pub struct Grant {
    /// `false` for `REVOKE`.
    pub grant: bool,
    pub privileges: Vec<Privilege>,
    pub relations: Vec<String>,
    pub roles: Vec<String>,
}

pub fn grant(tokens: Vec<TokenWithSpan>) -> Result<Statement> {
    let (grant, privileges, objects, grantees) = match sqlparser_one(tokens)? {
        ast::Statement::Grant(g) => (true, g.privileges, g.objects, g.grantees),
        ast::Statement::Revoke(r) => (false, r.privileges, r.objects, r.grantees),
        _ => return Err(Error::Internal("GRANT parsed as another statement".into())),
    };
    let relations = match objects {
        Some(GrantObjects::Tables(names) | GrantObjects::Views(names)) => {
            names.iter().map(object_name).collect::<Result<Vec<_>>>()?
        }
        _ => return Err(not_supported()),
    };
    Ok(Statement::Grant(Grant {
        grant,
        privileges: privileges_of(privileges)?,
        relations,
        roles: grantees
            .into_iter()
            .map(grantee)
            .collect::<Result<Vec<_>>>()?,
    }))
}

fn privileges_of(privileges: Privileges) -> Result<Vec<Privilege>> {
    let actions = match privileges {
        Privileges::All { .. } => return Ok(Privilege::ALL.to_vec()),
        Privileges::Actions(actions) => actions,
    };
    actions
        .into_iter()
        .map(|action| match action {
            Action::Select { columns: None } => Ok(Privilege::Select),
            Action::Insert { columns: None } => Ok(Privilege::Insert),
            Action::Update { columns: None } => Ok(Privilege::Update),
            Action::Delete => Ok(Privilege::Delete),
            _ => Err(not_supported()),
        })
        .collect()
}

fn grantee(grantee: ast::Grantee) -> Result<String> {
    match (grantee.grantee_type, grantee.name) {
        (GranteesType::Public, _) => Err(Error::NotSupported(
            "GRANT ... TO PUBLIC is not supported; grant to each role".into(),
        )),
        (_, Some(GranteeName::ObjectName(name))) => object_name(&name),
        _ => Err(not_supported()),
    }
}

fn not_supported() -> Error {
    Error::NotSupported(
        "weir grants SELECT, INSERT, UPDATE, DELETE or ALL on tables and views to roles".into(),
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
        assert_eq!(g.relations, ["t", "v"]);
        assert_eq!(g.roles, ["ann", "bob"]);
        let Statement::Grant(r) = parse("REVOKE ALL ON t FROM ann").expect("parses").remove(0)
        else {
            panic!("a revoke");
        };
        assert!(!r.grant);
        assert_eq!(r.privileges, Privilege::ALL);
    }

    #[test]
    fn other_objects_are_refused() {
        for sql in [
            "GRANT USAGE ON SCHEMA public TO ann",
            "GRANT SELECT ON t TO PUBLIC",
        ] {
            let e = parse(sql).expect_err("refused");
            assert_eq!(e.sqlstate(), "0A000", "{sql}: {e}");
        }
    }
}
