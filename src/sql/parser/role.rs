//! `CREATE ROLE | USER name [WITH] [LOGIN | NOLOGIN] [SUPERUSER | NOSUPERUSER]
//! [PASSWORD 'text' | PASSWORD NULL]`, `ALTER ROLE | USER name [WITH] ...`
//! and `DROP ROLE | USER [IF EXISTS] name [, ...]`.

use sqlparser::ast::{self, AlterRoleOperation, Expr, RoleOption, Value};
use sqlparser::keywords::Keyword;
use sqlparser::tokenizer::{Token, TokenWithSpan, Word};

use super::{
    Statement, expect_end, ident_name, leading_words, object_name, parser_after, sqlparser_one,
};
use crate::error::{Error, Result};

/// A role's attributes as a statement gives them; `None` leaves one as it
/// is (ALTER) or at its default (CREATE).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RoleOptions {
    pub name: String,
    pub login: Option<bool>,
    pub superuser: Option<bool>,
    /// `Some(None)`: `PASSWORD NULL`, which removes the password.
    pub password: Option<Option<String>>,
}

/// `CREATE ROLE` or `CREATE USER`; a user may log in unless told otherwise.
pub fn create(tokens: Vec<TokenWithSpan>) -> Result<Statement> {
    let user = leading_words(&tokens, 2).get(1).map(String::as_str) == Some("USER");
    let ast::Statement::CreateRole(create) = sqlparser_one(as_role(tokens))? else {
        return Err(Error::Internal(
            "CREATE ROLE parsed as another statement".into(),
        ));
    };
    let [name] = create.names.as_slice() else {
        return Err(Error::Syntax("CREATE ROLE takes one role name".into()));
    };
    let unsupported = create.inherit.is_some()
        || create.bypassrls.is_some()
        || create.create_db.is_some()
        || create.create_role.is_some()
        || create.replication.is_some()
        || create.connection_limit.is_some()
        || create.valid_until.is_some()
        || !create.in_role.is_empty()
        || !create.in_group.is_empty()
        || !create.role.is_empty()
        || !create.user.is_empty()
        || !create.admin.is_empty();
    if unsupported {
        return Err(not_supported());
    }
    Ok(Statement::CreateRole(RoleOptions {
        name: object_name(name)?,
        login: create.login.or(user.then_some(true)),
        superuser: create.superuser,
        password: create.password.map(password).transpose()?,
    }))
}

/// `ALTER ROLE` or `ALTER USER`.
pub fn alter(tokens: Vec<TokenWithSpan>) -> Result<Statement> {
    let ast::Statement::AlterRole { name, operation } = sqlparser_one(as_role(tokens))? else {
        return Err(Error::Internal(
            "ALTER ROLE parsed as another statement".into(),
        ));
    };
    let AlterRoleOperation::WithOptions { options } = operation else {
        return Err(not_supported());
    };
    let mut role = RoleOptions {
        name: ident_name(&name),
        ..RoleOptions::default()
    };
    for option in options {
        match option {
            RoleOption::Login(on) => role.login = Some(on),
            RoleOption::SuperUser(on) => role.superuser = Some(on),
            RoleOption::Password(p) => role.password = Some(password(p)?),
            _ => return Err(not_supported()),
        }
    }
    Ok(Statement::AlterRole(role))
}

/// `DROP ROLE [IF EXISTS] a, b`.
pub fn drop(tokens: &[TokenWithSpan]) -> Result<Statement> {
    let mut parser = parser_after(tokens, 2);
    let if_exists = parser.parse_keywords(&[Keyword::IF, Keyword::EXISTS]);
    let names = parser.parse_comma_separated(|p| p.parse_identifier())?;
    expect_end(&parser)?;
    Ok(Statement::DropRole {
        names: names.iter().map(ident_name).collect(),
        if_exists,
    })
}

fn password(password: ast::Password) -> Result<Option<String>> {
    match password {
        ast::Password::NullPassword => Ok(None),
        ast::Password::Password(Expr::Value(value)) => match value.value {
            Value::SingleQuotedString(text) => Ok(Some(text)),
            _ => Err(Error::Syntax("a password is a string literal".into())),
        },
        ast::Password::Password(_) => Err(Error::Syntax("a password is a string literal".into())),
    }
}

fn not_supported() -> Error {
    Error::NotSupported(
        "weir roles take LOGIN | NOLOGIN, SUPERUSER | NOSUPERUSER and PASSWORD only".into(),
    )
}

/// `... USER name ...` spelled `... ROLE name ...` for sqlparser.
fn as_role(mut tokens: Vec<TokenWithSpan>) -> Vec<TokenWithSpan> {
    let second = tokens
        .iter()
        .enumerate()
        .filter(|(_, t)| !matches!(t.token, Token::Whitespace(_)))
        .nth(1)
        .map(|(i, _)| i);
    if let Some(i) = second
        && matches!(&tokens[i].token, Token::Word(w) if w.keyword == Keyword::USER)
    {
        tokens[i].token = Token::Word(Word {
            value: "ROLE".into(),
            quote_style: None,
            keyword: Keyword::ROLE,
        });
    }
    tokens
}

#[cfg(test)]
mod tests {
    use super::super::parse;
    use super::*;

    fn one(sql: &str) -> Statement {
        parse(sql).expect("parses").remove(0)
    }

    #[test]
    fn create_user_logs_in_and_create_role_does_not_by_default() {
        let Statement::CreateRole(user) = one("CREATE USER Ann WITH PASSWORD 'pw'") else {
            panic!("a role");
        };
        assert_eq!(user.name, "ann");
        assert_eq!(user.login, Some(true));
        assert_eq!(user.password, Some(Some("pw".into())));
        let Statement::CreateRole(role) = one("CREATE ROLE r SUPERUSER") else {
            panic!("a role");
        };
        assert_eq!((role.login, role.superuser), (None, Some(true)));
    }

    #[test]
    fn alter_and_drop() {
        let Statement::AlterRole(role) = one("ALTER ROLE r WITH NOLOGIN PASSWORD NULL") else {
            panic!("alter");
        };
        assert_eq!(role.login, Some(false));
        assert_eq!(role.password, Some(None));
        let Statement::DropRole { names, if_exists } = one("DROP USER IF EXISTS a, \"B\"") else {
            panic!("drop");
        };
        assert_eq!(names, ["a", "B"]);
        assert!(if_exists);
    }
}
