//! `COMMENT ON { TABLE | VIEW | MATERIALIZED VIEW | SOURCE } name IS 'text' | NULL`
//! and `COMMENT ON COLUMN relation.column IS ...`.

use sqlparser::ast::{CommentObject, Ident, ObjectName, ObjectNamePart};
use sqlparser::tokenizer::TokenWithSpan;

use super::{Statement, ident_name, leading_words, object_name, sqlparser_one};
use crate::catalog::ObjectKind;
use crate::error::{Error, Result};

/// A parsed `COMMENT ON`.
#[derive(Debug, Clone, PartialEq)]
pub struct Comment {
    /// The kind the statement names; the object must be of that kind.
    pub kind: ObjectKind,
    pub object: String,
    /// The column, for `COMMENT ON COLUMN`.
    pub column: Option<String>,
    /// `None` (`IS NULL`) removes the comment.
    pub text: Option<String>,
}

pub fn comment(tokens: Vec<TokenWithSpan>) -> Result<Statement> {
    // sqlparser has no SOURCE here; a source is commented on like a table.
    let source = leading_words(&tokens, 3).get(2).map(String::as_str) == Some("SOURCE");
    let tokens = if source { as_table(tokens) } else { tokens };
    let sqlparser::ast::Statement::Comment {
        object_type,
        object_name: name,
        comment: text,
        ..
    } = sqlparser_one(tokens)?
    else {
        return Err(Error::Internal(
            "COMMENT ON parsed as another statement".into(),
        ));
    };
    let (kind, object, column) = match object_type {
        CommentObject::Table if source => (ObjectKind::Source, object_name(&name)?, None),
        CommentObject::Table => (ObjectKind::Table, object_name(&name)?, None),
        CommentObject::View => (ObjectKind::View, object_name(&name)?, None),
        CommentObject::MaterializedView => {
            (ObjectKind::MaterializedView, object_name(&name)?, None)
        }
        CommentObject::Column => {
            let (relation, column) = split_column(&name)?;
            (ObjectKind::Table, relation, Some(column))
        }
        other => {
            return Err(Error::NotSupported(format!(
                "COMMENT ON {other} is not supported; weir keeps comments on tables, sources, \
                 views, materialized views and their columns"
            )));
        }
    };
    Ok(Statement::Comment(Comment {
        kind,
        object,
        column,
        text,
    }))
}

/// `COMMENT ON SOURCE` spelled as `COMMENT ON TABLE` for sqlparser.
fn as_table(mut tokens: Vec<TokenWithSpan>) -> Vec<TokenWithSpan> {
    use sqlparser::tokenizer::{Token, Word};
    let position = tokens.iter().enumerate().find_map(|(i, t)| match &t.token {
        Token::Word(w) if w.value.eq_ignore_ascii_case("source") => Some(i),
        _ => None,
    });
    if let Some(i) = position {
        tokens[i].token = Token::Word(Word {
            value: "TABLE".into(),
            quote_style: None,
            keyword: sqlparser::keywords::Keyword::TABLE,
        });
    }
    tokens
}

/// `relation.column` (optionally schema-qualified) into its two names.
fn split_column(name: &ObjectName) -> Result<(String, String)> {
    let idents: Vec<&Ident> = name.0.iter().filter_map(ObjectNamePart::as_ident).collect();
    match idents.split_last() {
        Some((column, relation)) if !relation.is_empty() => {
            let relation = ObjectName(
                relation
                    .iter()
                    .map(|i| ObjectNamePart::Identifier((*i).clone()))
                    .collect(),
            );
            Ok((object_name(&relation)?, ident_name(column)))
        }
        _ => Err(Error::Syntax(format!(
            "column name must be qualified: COMMENT ON COLUMN table.column, not {name}"
        ))),
    }
}
