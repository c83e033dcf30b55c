//! `UNION | EXCEPT | INTERSECT [ALL] CORRESPONDING [BY (a, b)]` (SQL
//! standard, RisingWave): the two sides are matched by column name, not
//! position. With `BY`, the columns listed (each on both sides); without,
//! the columns both sides have, in the left side's order.
//!
//! The parser cannot read the clause, so [`mark`] takes it out of the
//! tokens and leaves the right side as `SELECT * FROM (right) AS
//! __weir_corresponding[(a, b)]`. [`rewrite`] then plans each side to learn
//! its columns and makes both `SELECT <columns> FROM (side)`.

use datafusion::execution::SessionState;
use datafusion::sql::parser::Statement as DfStatement;
use sqlparser::ast::{Query, SetExpr, Statement, TableFactor};
use sqlparser::tokenizer::{Token, TokenWithSpan, Whitespace};

use crate::error::{Error, Result};

const MARK: &str = "__weir_corresponding";

/// Words that end a set operation's right side at its own depth.
const ENDS: [&str; 9] = [
    "UNION",
    "EXCEPT",
    "INTERSECT",
    "ORDER",
    "LIMIT",
    "OFFSET",
    "FETCH",
    "EMIT",
    "WITH",
];

fn word(token: &Token, w: &str) -> bool {
    matches!(token, Token::Word(x) if x.quote_style.is_none() && x.value.eq_ignore_ascii_case(w))
}

fn space(token: &Token) -> bool {
    matches!(token, Token::Whitespace(_))
}

/// Take each `CORRESPONDING [BY (...)]` out of the tokens, marking the
/// right side it applies to.
pub fn mark(tokens: Vec<TokenWithSpan>) -> Result<Vec<TokenWithSpan>> {
    let mut tokens = tokens;
    while let Some(at) = tokens.iter().position(|t| word(&t.token, "CORRESPONDING")) {
        tokens = mark_one(tokens, at)?;
    }
    Ok(tokens)
}

fn mark_one(tokens: Vec<TokenWithSpan>, at: usize) -> Result<Vec<TokenWithSpan>> {
    let next = |from: usize| (from..tokens.len()).find(|i| !space(&tokens[*i].token));
    let mut after = at + 1;
    let mut by = Vec::new();
    if let Some(b) = next(after).filter(|i| word(&tokens[*i].token, "BY")) {
        let open = next(b + 1).filter(|i| tokens[*i].token == Token::LParen);
        let Some(open) = open else {
            return Err(Error::Syntax("expected ( after CORRESPONDING BY".into()));
        };
        let close = (open..tokens.len()).find(|i| tokens[*i].token == Token::RParen);
        let Some(close) = close else {
            return Err(Error::Syntax(
                "expected ) after CORRESPONDING BY (...".into(),
            ));
        };
        by = tokens[open..=close].to_vec();
        after = close + 1;
    }
    // The right side runs to a word that ends it at its own depth, or to
    // the parenthesis that closes that depth.
    let mut depth = 0i32;
    let mut end = tokens.len();
    for (i, t) in tokens.iter().enumerate().skip(after) {
        match &t.token {
            Token::LParen => depth += 1,
            Token::RParen if depth == 0 => {
                end = i;
                break;
            }
            Token::RParen => depth -= 1,
            Token::SemiColon if depth == 0 => {
                end = i;
                break;
            }
            token if depth == 0 && ENDS.iter().any(|w| word(token, w)) => {
                end = i;
                break;
            }
            _ => {}
        }
    }
    let span = tokens[at].span;
    let made = |t: Token| TokenWithSpan::new(t, span);
    let mut out = tokens[..at].to_vec();
    out.extend(
        [
            Token::make_keyword("SELECT"),
            Token::Whitespace(Whitespace::Space),
            Token::Mul,
            Token::Whitespace(Whitespace::Space),
            Token::make_keyword("FROM"),
            Token::Whitespace(Whitespace::Space),
            Token::LParen,
        ]
        .map(made),
    );
    out.extend_from_slice(&tokens[after..end]);
    out.extend(
        [
            Token::RParen,
            Token::Whitespace(Whitespace::Space),
            Token::make_keyword("AS"),
            Token::Whitespace(Whitespace::Space),
            Token::make_word(MARK, None),
        ]
        .map(made),
    );
    out.extend(by);
    out.push(made(Token::Whitespace(Whitespace::Space)));
    out.extend_from_slice(&tokens[end..]);
    Ok(out)
}

/// One marked set operation: its left side, its right side, and the
/// columns of `BY`.
struct Marked {
    left: String,
    right: String,
    by: Vec<String>,
}

/// Match the sides of every marked set operation in `query` by name.
pub async fn rewrite(state: &SessionState, query: &mut Query) -> Result<()> {
    while let Some(marked) = find(&query.body) {
        let left = names(state, &marked.left).await?;
        let right = names(state, &marked.right).await?;
        let columns = matched(&marked, &left, &right)?;
        let list = columns
            .iter()
            .map(|c| format!("\"{}\"", c.replace('"', "\"\"")))
            .collect::<Vec<_>>()
            .join(", ");
        let side =
            |sql: &str, alias: &str| parse_body(&format!("SELECT {list} FROM ({sql}) AS {alias}"));
        let (left, right) = (
            side(&marked.left, "__weir_left")?,
            side(&marked.right, "__weir_right")?,
        );
        replace(&mut query.body, left, right);
    }
    Ok(())
}

fn find(body: &SetExpr) -> Option<Marked> {
    match body {
        SetExpr::SetOperation { left, right, .. } => {
            if let Some((inner, by)) = marked_side(right) {
                return Some(Marked {
                    left: left.to_string(),
                    right: inner,
                    by,
                });
            }
            find(left).or_else(|| find(right))
        }
        SetExpr::Query(q) => find(&q.body),
        _ => None,
    }
}

/// `SELECT * FROM (q) AS __weir_corresponding[(cols)]`: `q` and `cols`.
fn marked_side(side: &SetExpr) -> Option<(String, Vec<String>)> {
    let SetExpr::Select(select) = side else {
        return None;
    };
    let [from] = select.from.as_slice() else {
        return None;
    };
    let TableFactor::Derived {
        subquery,
        alias: Some(alias),
        ..
    } = &from.relation
    else {
        return None;
    };
    if alias.name.value != MARK {
        return None;
    }
    let by = alias
        .columns
        .iter()
        .map(|c| match c.name.quote_style {
            Some(_) => c.name.value.clone(),
            None => c.name.value.to_lowercase(),
        })
        .collect();
    Some((subquery.to_string(), by))
}

fn replace(body: &mut SetExpr, left_side: SetExpr, right_side: SetExpr) -> bool {
    match body {
        SetExpr::SetOperation { left, right, .. } => {
            if marked_side(right).is_some() {
                **left = left_side;
                **right = right_side;
                return true;
            }
            replace(left, left_side.clone(), right_side.clone())
                || replace(right, left_side, right_side)
        }
        SetExpr::Query(q) => replace(&mut q.body, left_side, right_side),
        _ => false,
    }
}

async fn names(state: &SessionState, sql: &str) -> Result<Vec<String>> {
    let dialect = sqlparser::dialect::PostgreSqlDialect {};
    let statement = sqlparser::parser::Parser::parse_sql(&dialect, sql)?
        .pop()
        .ok_or_else(|| Error::Internal(format!("no statement in {sql}")))?;
    let plan = state
        .statement_to_plan(DfStatement::Statement(Box::new(statement)))
        .await?;
    Ok(plan
        .schema()
        .fields()
        .iter()
        .map(|f| f.name().clone())
        .collect())
}

fn matched(marked: &Marked, left: &[String], right: &[String]) -> Result<Vec<String>> {
    if !marked.by.is_empty() {
        for column in &marked.by {
            if !left.contains(column) || !right.contains(column) {
                return Err(Error::UndefinedColumn(format!(
                    "column \"{column}\" in CORRESPONDING BY is not on both sides of the set operation"
                )));
            }
        }
        return Ok(marked.by.clone());
    }
    let common: Vec<String> = left.iter().filter(|c| right.contains(c)).cloned().collect();
    if common.is_empty() {
        return Err(Error::Syntax(format!(
            "CORRESPONDING finds no column name on both sides: the left has {}, the right {}",
            left.join(", "),
            right.join(", ")
        )));
    }
    Ok(common)
}

fn parse_body(sql: &str) -> Result<SetExpr> {
    let dialect = sqlparser::dialect::PostgreSqlDialect {};
    match sqlparser::parser::Parser::parse_sql(&dialect, sql)?.pop() {
        Some(Statement::Query(q)) => Ok(*q.body),
        _ => Err(Error::Internal(format!("not a query: {sql}"))),
    }
}
