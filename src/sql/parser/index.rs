//! `CREATE INDEX` as PostgreSQL writes it, with RisingWave's trailing
//! `DISTRIBUTED BY (...)` read past (one node holds every partition), and
//! `ALTER <kind> name RENAME TO new`.

use sqlparser::ast;
use sqlparser::keywords::Keyword;
use sqlparser::tokenizer::{Token, TokenWithSpan};

use super::{Statement, expect_end, ident_name, is_space, object_name, parser_after, text_of};
use crate::catalog::ObjectKind;
use crate::error::{Error, Result};

#[derive(Debug, Clone)]
pub struct CreateIndex {
    /// `None`: named after the relation and columns, as PostgreSQL names it.
    pub name: Option<String>,
    pub relation: String,
    pub columns: Vec<String>,
    /// `INCLUDE (...)`: the other columns the index holds; empty for all.
    pub include: Vec<String>,
    pub if_not_exists: bool,
    pub text: String,
}

#[derive(Debug, Clone)]
pub struct Rename {
    /// What the statement says the object is; `ALTER TABLE` renames any
    /// relation, as in PostgreSQL.
    pub kind: ObjectKind,
    pub name: String,
    pub to: String,
    pub if_exists: bool,
}

pub fn create_index(tokens: Vec<TokenWithSpan>) -> Result<Statement> {
    let text = text_of(&tokens);
    let tokens = without_distribution(tokens)?;
    let create = match super::sqlparser_one(tokens)? {
        ast::Statement::CreateIndex(create) => create,
        _ => {
            return Err(Error::Internal(
                "CREATE INDEX parsed as another statement".into(),
            ));
        }
    };
    refuse_unsupported(&create)?;
    let columns = create
        .columns
        .iter()
        .map(|c| match &c.column.expr {
            ast::Expr::Identifier(ident) => Ok(ident_name(ident)),
            other => Err(Error::NotSupported(format!(
                "an index on the expression {other} is not supported; index a column"
            ))),
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(Statement::CreateIndex(CreateIndex {
        name: create.name.as_ref().map(object_name).transpose()?,
        relation: object_name(&create.table_name)?,
        columns,
        include: create.include.iter().map(ident_name).collect(),
        if_not_exists: create.if_not_exists,
        text,
    }))
}

/// What an ordered index of a whole relation cannot be.
fn refuse_unsupported(create: &ast::CreateIndex) -> Result<()> {
    if create.unique {
        return Err(Error::NotSupported(
            "unique indexes are not supported; a PRIMARY KEY keeps its column unique".into(),
        ));
    }
    if create.predicate.is_some() {
        return Err(Error::NotSupported(
            "partial indexes (CREATE INDEX ... WHERE) are not supported; index the whole relation"
                .into(),
        ));
    }
    if let Some(using) = &create.using {
        let method = using.to_string().to_lowercase();
        match method.as_str() {
            "btree" | "hash" => {}
            "gin" | "gist" | "spgist" | "brin" | "bloom" => {
                return Err(Error::NotSupported(format!(
                    "index access method \"{method}\" is not supported; weir's indexes are ordered (btree)"
                )));
            }
            _ => {
                return Err(Error::UndefinedObject(format!(
                    "access method \"{method}\" does not exist"
                )));
            }
        }
    }
    if create.columns.iter().any(|c| c.operator_class.is_some()) {
        return Err(Error::NotSupported(
            "operator classes in an index are not supported".into(),
        ));
    }
    Ok(())
}

/// The tokens without RisingWave's `DISTRIBUTED BY (...)` at the end.
fn without_distribution(tokens: Vec<TokenWithSpan>) -> Result<Vec<TokenWithSpan>> {
    let words: Vec<usize> = (0..tokens.len())
        .filter(|i| !is_space(&tokens[*i].token))
        .collect();
    let is_word = |at: usize, word: &str| matches!(&tokens[at].token, Token::Word(w) if w.value.eq_ignore_ascii_case(word));
    let found = words
        .windows(2)
        .position(|w| is_word(w[0], "DISTRIBUTED") && is_word(w[1], "BY"));
    let Some(at) = found else {
        return Ok(tokens);
    };
    let mut parser = parser_after(&tokens, at + 2);
    parser.expect_token(&Token::LParen)?;
    parser.parse_comma_separated(|p| p.parse_identifier())?;
    parser.expect_token(&Token::RParen)?;
    expect_end(&parser)?;
    Ok(tokens[..words[at]].to_vec())
}

/// `ALTER TABLE | MATERIALIZED VIEW | VIEW | INDEX | SOURCE | SINK [IF
/// EXISTS] name RENAME TO new`; `words` are the statement's leading words.
pub fn alter(tokens: &[TokenWithSpan], words: &[&str]) -> Result<Statement> {
    let (kind, skip) = match words {
        ["ALTER", "MATERIALIZED", "VIEW", ..] => (ObjectKind::MaterializedView, 3),
        ["ALTER", "TABLE", ..] => (ObjectKind::Table, 2),
        ["ALTER", "VIEW", ..] => (ObjectKind::View, 2),
        ["ALTER", "INDEX", ..] => (ObjectKind::Index, 2),
        ["ALTER", "SOURCE", ..] => (ObjectKind::Source, 2),
        ["ALTER", "SINK", ..] => (ObjectKind::Sink, 2),
        _ => {
            return Err(Error::NotSupported(format!(
                "{} is not supported",
                words[..words.len().min(2)].join(" ")
            )));
        }
    };
    let mut parser = parser_after(tokens, skip);
    let if_exists = parser.parse_keywords(&[Keyword::IF, Keyword::EXISTS]);
    let name = object_name(&parser.parse_object_name(false)?)?;
    if !parser.parse_keywords(&[Keyword::RENAME, Keyword::TO]) {
        let noun = kind.noun().to_uppercase();
        return Err(Error::NotSupported(format!(
            "ALTER {noun} supports only RENAME TO new_name"
        )));
    }
    let to = object_name(&parser.parse_object_name(false)?)?;
    expect_end(&parser)?;
    Ok(Statement::Rename(Rename {
        kind,
        name,
        to,
        if_exists,
    }))
}

/// `SHOW INDEXES [FROM | IN relation]`; anything else after it is a variable's name.
pub fn show_indexes(tokens: &[TokenWithSpan]) -> Statement {
    let mut parser = parser_after(tokens, 2);
    if parser.peek_token().token == Token::EOF {
        return Statement::ShowIndexes(None);
    }
    let from = parser
        .parse_one_of_keywords(&[Keyword::FROM, Keyword::IN])
        .is_some();
    match parser
        .parse_object_name(false)
        .ok()
        .map(|n| object_name(&n))
    {
        Some(Ok(name)) if from && expect_end(&parser).is_ok() => Statement::ShowIndexes(Some(name)),
        _ => Statement::ShowVariable("indexes".into()),
    }
}
