//! weir's statements: PostgreSQL syntax through `sqlparser`, plus the
//! streaming extensions (`APPEND ONLY`, `CREATE STREAM`, `WATERMARK FOR`,
//! `FLUSH`, `SHOW TABLES`, ...), recognised on the token stream before the
//! remainder is handed to `sqlparser`.

use std::sync::Arc;

use datafusion_pg_catalog::sql::PostgresCompatibilityParser;
use sqlparser::ast::{self, VisitMut};
use sqlparser::dialect::PostgreSqlDialect;
use sqlparser::parser::Parser;
use sqlparser::tokenizer::{Token, TokenWithSpan, Tokenizer};

use crate::catalog::ObjectKind;
use crate::error::{Error, Result};

mod asof;
mod comment;
mod connector;
mod cursor;
mod date_trunc;
mod depth;
mod explain;
mod fetch;
mod frames;
mod grant;
mod index;
mod nulls;
mod precedence;
mod role;
mod setop;
mod srf;
mod using;
mod vacuum;

pub use depth::MAX_DEPTH;

pub use precedence::fix_distinct_from;

pub use comment::Comment;
pub use connector::CreateSink;
pub use cursor::{CursorSource, Fetch, Since, Subscribe, with_options};
pub use explain::ExplainFormat;
pub use grant::{Grant, GrantOn};
pub use role::RoleOptions;

/// One parsed statement.
#[derive(Debug, Clone)]
pub enum Statement {
    CreateTable(CreateTable),
    Drop(Drop),
    Show(ObjectKind),
    /// `SHOW CLUSTER`: the nodes and the partitions each owns.
    ShowCluster,
    ShowCreate {
        kind: ObjectKind,
        name: String,
    },
    ShowVariable(String),
    /// `SHOW LATE EVENTS`: late rows counted per object.
    ShowLateEvents,
    Describe(String),
    Flush,
    Copy(Box<ast::Statement>),
    Set {
        name: String,
        value: String,
    },
    /// `RESET name` (`None`: `RESET ALL`, `DISCARD ALL`), with its command tag.
    Reset {
        name: Option<String>,
        tag: &'static str,
    },
    /// `ADVANCE CLOCK BY <interval>`: moves a manual clock.
    AdvanceClock(Box<ast::Expr>),
    Transaction(Transaction),
    /// Statements planned by DataFusion: queries, INSERT, UPDATE, DELETE, EXPLAIN.
    /// Shared, so that running a prepared statement again copies no syntax tree.
    Query(Arc<ast::Statement>),
    CreateView(CreateView),
    /// `CREATE VIEW name AS query`: a named query, inlined where used.
    CreateLogicalView(CreateView),
    /// `EXPLAIN [(FORMAT DOT | JSON)] CREATE MATERIALIZED VIEW ...`: the
    /// dataflow graph it would run.
    ExplainView {
        create: CreateView,
        format: ExplainFormat,
    },
    /// `EXPLAIN [ANALYZE] [(...)] MATERIALIZED VIEW name`: the graph a view
    /// runs, with its operators' counters and state under ANALYZE.
    ExplainRunning {
        name: String,
        analyze: bool,
        format: ExplainFormat,
    },
    /// `SUBSCRIBE v ...` and `COPY (SUBSCRIBE v ...) TO STDOUT`: a change stream in COPY format.
    CopySubscribe(Subscribe),
    /// `DECLARE c CURSOR FOR ...`.
    Declare {
        name: String,
        source: CursorSource,
    },
    Fetch(Fetch),
    /// `CLOSE c` (`None`: `CLOSE ALL`).
    Close(Option<String>),
    /// `CREATE SUBSCRIPTION s FROM v WITH (retention = ...)`.
    CreateSubscription {
        name: String,
        from: String,
        retention: Option<String>,
        if_not_exists: bool,
    },
    /// `CREATE SINK s FROM v WITH (connector = ...) FORMAT ... ENCODE ...`.
    CreateSink(CreateSink),
    /// `CREATE FUNCTION f(...) RETURNS t LANGUAGE SQL AS ...`.
    CreateFunction {
        create: Box<ast::CreateFunction>,
        text: String,
    },
    /// `DROP FUNCTION [IF EXISTS] f [(types)]`.
    DropFunction {
        name: String,
        if_exists: bool,
    },
    /// `COMMENT ON ... IS ...`.
    Comment(Comment),
    /// `GRANT` or `REVOKE` on relations.
    Grant(Grant),
    /// `CREATE ROLE | USER`.
    CreateRole(RoleOptions),
    /// `ALTER ROLE | USER`: the attributes given change, the rest stay.
    AlterRole(RoleOptions),
    /// `DROP ROLE | USER [IF EXISTS] name, ...`.
    DropRole {
        names: Vec<String>,
        if_exists: bool,
    },
    /// `BACKUP TO 'directory'`: a consistent copy of the whole store.
    Backup(String),
    /// `VACUUM [name, ...]`: compact the store, or these relations.
    Vacuum(Vec<String>),
    /// Recognised, but not built yet.
    Unsupported(String),
    /// `CREATE INDEX [name] ON relation (columns) [INCLUDE (columns)]`.
    CreateIndex(index::CreateIndex),
    /// `ALTER TABLE | MATERIALIZED VIEW | VIEW | INDEX | SOURCE | SINK name RENAME TO new`.
    Rename(index::Rename),
    /// `SHOW INDEXES [FROM relation]`.
    ShowIndexes(Option<String>),
}

pub use index::{CreateIndex, Rename};

#[derive(Debug, Clone)]
pub struct CreateTable {
    /// The statement as `sqlparser` sees it, with our extensions removed.
    pub ast: Box<ast::Statement>,
    pub name: String,
    pub append_only: bool,
    pub watermark: Option<(String, String)>,
    pub if_not_exists: bool,
    /// The statement as the user wrote it.
    pub text: String,
    /// What feeds it from outside (`CREATE SOURCE`, `CREATE TABLE ... WITH (connector = ...)`).
    pub connector: Option<crate::catalog::ConnectorDef>,
    /// `ON CONFLICT action [WITH VERSION COLUMN (c, ...)]`.
    pub conflict: Option<(crate::catalog::ConflictAction, Vec<String>)>,
}

#[derive(Debug, Clone)]
pub struct CreateView {
    pub name: String,
    pub if_not_exists: bool,
    /// `name (a, b, ...)`: names for the query's first columns.
    pub columns: Vec<ast::Ident>,
    /// `WITH (key = value, ...)` before `AS`.
    pub options: Vec<(String, String)>,
    pub query: Box<ast::Query>,
    /// The `EMIT` clause ending the query, if any.
    pub emit: EmitClause,
    /// The statement as the user wrote it.
    pub text: String,
}

/// When a view's results change, as written.
#[derive(Debug, Clone, Default, PartialEq)]
pub enum EmitClause {
    /// `EMIT CHANGES` or `EMIT ON UPDATE`, and the default.
    #[default]
    Changes,
    /// `EMIT ON WINDOW CLOSE` or `EMIT FINAL`.
    OnWindowClose,
    /// `EMIT EVERY <interval>`.
    Every(Box<ast::Expr>),
}

#[derive(Debug, Clone)]
pub struct Drop {
    pub kind: ObjectKind,
    pub names: Vec<String>,
    pub if_exists: bool,
    pub cascade: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transaction {
    Begin,
    Commit,
    Rollback,
    /// `SAVEPOINT`, `RELEASE` and `ROLLBACK TO`: accepted inside a block
    /// (drivers set savepoints around their own catalog reads), and, as
    /// every statement commits on its own, with nothing to undo.
    Savepoint(&'static str),
}

/// Split and parse a query string into statements.
pub fn parse(sql: &str) -> Result<Vec<Statement>> {
    statement_tokens(sql)?.into_iter().map(parse_one).collect()
}

/// Split and parse a query string into statements, each with its text.
pub fn parse_texts(sql: &str) -> Result<Vec<(String, Statement)>> {
    let statements = statement_tokens(sql)?;
    // One statement is the whole string: its text needs no rebuilding
    // from tokens, which for a long INSERT is a string per value.
    let whole = statements.len() == 1;
    statements
        .into_iter()
        .map(|tokens| {
            let text = if whole {
                sql.trim().to_string()
            } else {
                text_of(&tokens)
            };
            parse_one(tokens).map(|statement| (text, statement))
        })
        .collect()
}

/// The tokens of each statement in a query string, empty ones left out.
fn statement_tokens(sql: &str) -> Result<Vec<Vec<TokenWithSpan>>> {
    let tokens = Tokenizer::new(&PostgreSqlDialect {}, sql)
        .tokenize_with_location()
        .map_err(|e| Error::Syntax(format!("syntax error: {e}")))?;
    Ok(split(tokens)
        .into_iter()
        .filter(|t| t.iter().any(|t| !is_space(&t.token)))
        .collect())
}

fn split(tokens: Vec<TokenWithSpan>) -> Vec<Vec<TokenWithSpan>> {
    let mut statements = vec![Vec::new()];
    for token in tokens {
        match token.token {
            Token::SemiColon => statements.push(Vec::new()),
            Token::EOF => {}
            _ => statements.last_mut().expect("never empty").push(token),
        }
    }
    statements
}

fn is_space(token: &Token) -> bool {
    matches!(token, Token::Whitespace(_))
}

fn text_of(tokens: &[TokenWithSpan]) -> String {
    tokens
        .iter()
        .map(|t| t.token.to_string())
        .collect::<String>()
        .trim()
        .to_string()
}

/// Upper-cased leading words, for classification.
fn leading_words(tokens: &[TokenWithSpan], n: usize) -> Vec<String> {
    tokens
        .iter()
        .filter(|t| !is_space(&t.token))
        .take(n)
        .map(|t| match &t.token {
            Token::Word(w) if w.quote_style.is_none() => w.value.to_uppercase(),
            other => other.to_string(),
        })
        .collect()
}

fn parse_one(tokens: Vec<TokenWithSpan>) -> Result<Statement> {
    depth::check(&tokens)?;
    let tokens = nulls::after_arguments(plain_numbers(character_types(tokens)));
    let words = leading_words(&tokens, 4);
    let w: Vec<&str> = words.iter().map(String::as_str).collect();
    match w.as_slice() {
        ["FLUSH"] => Ok(Statement::Flush),
        ["VACUUM", ..] => vacuum::vacuum(&tokens),
        ["BACKUP", "TO", ..] => backup(&tokens),
        ["ADVANCE", "CLOCK", "BY", ..] => {
            let mut parser = parser_after(&tokens, 3);
            let expr = parser.parse_expr()?;
            expect_end(&parser)?;
            Ok(Statement::AdvanceClock(Box::new(expr)))
        }
        ["SHOW", "CREATE", ..] => show_create(&tokens),
        ["SHOW", rest @ ..] => Ok(show(rest, &tokens)),
        ["DESCRIBE" | "DESC", ..] => Ok(Statement::Describe(object_name_after(&tokens, 1)?)),
        ["CREATE", "TABLE" | "STREAM", ..] => create_table(tokens).map(Statement::CreateTable),
        ["CREATE", "MATERIALIZED", "VIEW", ..] => {
            create_view(&tokens, 3).map(Statement::CreateView)
        }
        ["EXPLAIN", ..] if explain::is_about_a_view(&tokens) => explain::explain(&tokens),
        ["CREATE", "SUBSCRIPTION", ..] => cursor::create_subscription(&tokens),
        ["SUBSCRIBE", ..] => cursor::subscribe(&tokens).map(Statement::CopySubscribe),
        ["COPY", "(", "SUBSCRIBE", ..] => cursor::copy_subscribe(&tokens),
        ["DECLARE", ..] => cursor::declare(&tokens),
        ["FETCH", ..] => cursor::fetch(&tokens),
        ["CLOSE", ..] => cursor::close(&tokens),
        ["CREATE", "VIEW", ..] => {
            let create = create_view(&tokens, 2)?;
            if create.emit != EmitClause::Changes {
                return Err(Error::Syntax(
                    "EMIT belongs to materialized views; CREATE VIEW takes a plain query".into(),
                ));
            }
            Ok(Statement::CreateLogicalView(create))
        }
        ["CREATE", "SOURCE", ..] => connector::create_source(tokens).map(Statement::CreateTable),
        ["CREATE", "SINK", ..] => connector::create_sink(&tokens),
        ["CREATE", "FUNCTION", ..] | ["CREATE", "OR", "REPLACE", "FUNCTION", ..] => {
            create_function(&tokens)
        }
        ["DROP", "FUNCTION", ..] => drop_function(&tokens),
        ["CREATE", "OR", "REPLACE", ..] => Ok(Statement::Unsupported(format!(
            "{} is not supported yet",
            words[..w.len().min(3)].join(" ")
        ))),
        ["GRANT" | "REVOKE", ..] => grant::grant(tokens),
        ["CREATE", "ROLE" | "USER", ..] => role::create(tokens),
        ["ALTER", "ROLE" | "USER", ..] => role::alter(tokens),
        ["ALTER", ..] => index::alter(&tokens, &w),
        ["CREATE", "INDEX", ..] | ["CREATE", "UNIQUE", "INDEX", ..] => index::create_index(tokens),
        ["DROP", "ROLE" | "USER", ..] => role::drop(&tokens),
        ["DROP", ..] => drop(&tokens).map(Statement::Drop),
        ["COMMENT", "ON", ..] => comment::comment(tokens),
        ["SET", ..] => set(&tokens),
        ["RESET" | "DISCARD", ..] => Ok(reset(&tokens)),
        ["DEALLOCATE", ..] => Ok(Statement::Set {
            name: String::new(),
            value: String::new(),
        }),
        ["BEGIN" | "START", ..] => Ok(Statement::Transaction(Transaction::Begin)),
        ["COMMIT" | "END", ..] => Ok(Statement::Transaction(Transaction::Commit)),
        ["ROLLBACK", "TO", ..] => Ok(Statement::Transaction(Transaction::Savepoint("ROLLBACK"))),
        ["SAVEPOINT", ..] => Ok(Statement::Transaction(Transaction::Savepoint("SAVEPOINT"))),
        ["RELEASE", ..] => Ok(Statement::Transaction(Transaction::Savepoint("RELEASE"))),
        ["ROLLBACK" | "ABORT", ..] => Ok(Statement::Transaction(Transaction::Rollback)),
        ["COPY", ..] => Ok(Statement::Copy(Box::new(sqlparser_one(tokens)?))),
        _ => query(&tokens),
    }
}

/// `BACKUP TO 'directory'`.
fn backup(tokens: &[TokenWithSpan]) -> Result<Statement> {
    let mut parser = parser_after(tokens, 2);
    let to = parser.parse_literal_string()?;
    expect_end(&parser)?;
    Ok(Statement::Backup(to))
}

fn sqlparser_one(tokens: Vec<TokenWithSpan>) -> Result<ast::Statement> {
    let mut parser = Parser::new(&PostgreSqlDialect {}).with_tokens_with_locations(tokens);
    let mut statement = parser.parse_statement()?;
    expect_end(&parser)?;
    fix_distinct_from(&mut statement);
    Ok(statement)
}

fn create_function(tokens: &[TokenWithSpan]) -> Result<Statement> {
    match sqlparser_one(tokens.to_vec())? {
        ast::Statement::CreateFunction(create) => Ok(Statement::CreateFunction {
            create: Box::new(create),
            text: text_of(tokens),
        }),
        _ => Err(Error::Internal(
            "CREATE FUNCTION parsed as another statement".into(),
        )),
    }
}

/// `DROP FUNCTION [IF EXISTS] f [(types)]`: functions are not overloaded,
/// so the types, if given, are only read past.
fn drop_function(tokens: &[TokenWithSpan]) -> Result<Statement> {
    use sqlparser::keywords::Keyword;
    let mut parser = parser_after(tokens, 2);
    let if_exists = parser.parse_keywords(&[Keyword::IF, Keyword::EXISTS]);
    let name = object_name(&parser.parse_object_name(false)?)?;
    if parser.consume_token(&Token::LParen) && !parser.consume_token(&Token::RParen) {
        parser.parse_comma_separated(|p| p.parse_data_type())?;
        parser.expect_token(&Token::RParen)?;
    }
    expect_end(&parser)?;
    Ok(Statement::DropFunction { name, if_exists })
}

/// A stored view query, parsed again at start.
pub fn parse_query(sql: &str) -> Result<Box<ast::Query>> {
    let mut parser = Parser::new(&PostgreSqlDialect {}).try_with_sql(sql)?;
    let mut query = parser.parse_query()?;
    expect_end(&parser)?;
    normalize(query.as_mut())?;
    Ok(query)
}

/// The rewrites every query gets before DataFusion plans it.
fn normalize<V: VisitMut>(node: &mut V) -> Result<()> {
    fix_distinct_from(node);
    using::nest(node);
    srf::unnest(node);
    date_trunc::long_units(node);
    frames::empty_frames(node)?;
    fetch::as_limit(node)
}

fn query(tokens: &[TokenWithSpan]) -> Result<Statement> {
    let rewritten = rewrite_windows(crate::sql::corresponding::mark(tokens.to_vec())?);
    let tokens = rewritten.as_slice();
    // The compatibility parser rewrites the catalog queries psql and GUI clients send.
    let mut text = text_of(tokens);
    if let Some(replaced) = crate::sql::pg_catalog::replace_client_sql(&text) {
        text = replaced;
    }
    let mut statements = compat().parse(&text).map_err(|e| {
        // Re-parse for an error that carries the position.
        match sqlparser_one(tokens.to_vec()) {
            Err(positioned) => positioned,
            Ok(_) => Error::from(e),
        }
    })?;
    setop::refuse_counted(&statements)?;
    normalize(&mut statements)?;
    statements
        .iter_mut()
        .for_each(crate::sql::pg_catalog::rewrite);
    match statements.len() {
        1 => Ok(Statement::Query(Arc::new(statements.remove(0)))),
        _ => Err(Error::Syntax("expected exactly one statement".into())),
    }
}

fn compat() -> &'static PostgresCompatibilityParser {
    static PARSER: std::sync::OnceLock<PostgresCompatibilityParser> = std::sync::OnceLock::new();
    PARSER.get_or_init(PostgresCompatibilityParser::new)
}

fn show(rest: &[&str], tokens: &[TokenWithSpan]) -> Statement {
    match rest {
        ["TABLES", ..] => Statement::Show(ObjectKind::Table),
        ["SOURCES", ..] => Statement::Show(ObjectKind::Source),
        ["VIEWS", ..] => Statement::Show(ObjectKind::View),
        ["SINKS", ..] => Statement::Show(ObjectKind::Sink),
        ["MATERIALIZED", "VIEWS", ..] => Statement::Show(ObjectKind::MaterializedView),
        ["INDEXES", ..] => index::show_indexes(tokens),
        ["LATE", "EVENTS", ..] => Statement::ShowLateEvents,
        ["CLUSTER"] => Statement::ShowCluster,
        _ => {
            let name = tokens
                .iter()
                .filter(|t| !is_space(&t.token))
                .skip(1)
                .map(|t| t.token.to_string())
                .collect::<Vec<_>>()
                .join(" ")
                .replace(" . ", ".");
            Statement::ShowVariable(name.to_lowercase())
        }
    }
}

fn show_create(tokens: &[TokenWithSpan]) -> Result<Statement> {
    let words = leading_words(tokens, 4);
    let (kind, skip) = match words.get(2).map(String::as_str) {
        Some("TABLE") => (ObjectKind::Table, 3),
        Some("SOURCE") => (ObjectKind::Source, 3),
        Some("SINK") => (ObjectKind::Sink, 3),
        Some("VIEW") => (ObjectKind::View, 3),
        Some("MATERIALIZED") => (ObjectKind::MaterializedView, 4),
        Some("INDEX") => (ObjectKind::Index, 3),
        _ => {
            return Err(Error::Syntax(
                "expected SHOW CREATE TABLE | MATERIALIZED VIEW | VIEW | INDEX | SOURCE | SINK name"
                    .into(),
            ));
        }
    };
    Ok(Statement::ShowCreate {
        kind,
        name: object_name_after(tokens, skip)?,
    })
}

/// A parser over the tokens after `skip` leading words.
fn parser_after(tokens: &[TokenWithSpan], skip: usize) -> Parser<'static> {
    let rest: Vec<TokenWithSpan> = tokens
        .iter()
        .filter(|t| !is_space(&t.token))
        .skip(skip)
        .cloned()
        .collect();
    Parser::new(&PostgreSqlDialect {}).with_tokens_with_locations(rest)
}

fn expect_end(parser: &Parser<'_>) -> Result<()> {
    match parser.peek_token().token {
        Token::EOF => Ok(()),
        other => Err(Error::Syntax(format!(
            "syntax error at or near \"{other}\""
        ))),
    }
}

/// The object name that follows `skip` leading words.
fn object_name_after(tokens: &[TokenWithSpan], skip: usize) -> Result<String> {
    let mut parser = parser_after(tokens, skip);
    let name = parser.parse_object_name(false)?;
    expect_end(&parser)?;
    object_name(&name)
}

/// An object name as the catalog keys it: unquoted identifiers fold to lower case.
pub fn object_name(name: &ast::ObjectName) -> Result<String> {
    let parts: Vec<String> = name
        .0
        .iter()
        .map(|part| match part.as_ident() {
            Some(ident) => Ok(ident_name(ident)),
            None => Err(Error::Syntax(format!("invalid name {name}"))),
        })
        .collect::<Result<_>>()?;
    match parts.as_slice() {
        [name] => Ok(name.clone()),
        [schema, name] if schema == "public" => Ok(name.clone()),
        [_, _, name] => Ok(name.clone()),
        _ => Err(Error::UndefinedObject(format!(
            "schema of {name} does not exist"
        ))),
    }
}

pub fn ident_name(ident: &ast::Ident) -> String {
    match ident.quote_style {
        Some(_) => ident.value.clone(),
        None => ident.value.to_lowercase(),
    }
}

fn drop(tokens: &[TokenWithSpan]) -> Result<Drop> {
    let words = leading_words(tokens, 5);
    let (kind, skip) = match words.get(1).map(String::as_str) {
        Some("TABLE") | Some("STREAM") => (ObjectKind::Table, 2),
        Some("SOURCE") => (ObjectKind::Source, 2),
        Some("SINK") => (ObjectKind::Sink, 2),
        Some("VIEW") => (ObjectKind::View, 2),
        Some("SUBSCRIPTION") => (ObjectKind::Subscription, 2),
        Some("INDEX") if words.get(2).map(String::as_str) == Some("CONCURRENTLY") => {
            (ObjectKind::Index, 3)
        }
        Some("INDEX") => (ObjectKind::Index, 2),
        Some("MATERIALIZED") if words.get(2).map(String::as_str) == Some("VIEW") => {
            (ObjectKind::MaterializedView, 3)
        }
        _ => {
            return Err(Error::NotSupported(format!(
                "DROP {} is not supported",
                words.get(1).cloned().unwrap_or_default()
            )));
        }
    };
    let mut parser = parser_after(tokens, skip);
    use sqlparser::keywords::Keyword;
    let if_exists = parser.parse_keywords(&[Keyword::IF, Keyword::EXISTS]);
    let names = parser.parse_comma_separated(|p| p.parse_object_name(false))?;
    let cascade = parser.parse_keyword(Keyword::CASCADE);
    if !cascade {
        let _ = parser.parse_keyword(Keyword::RESTRICT);
    }
    expect_end(&parser)?;
    Ok(Drop {
        kind,
        names: names.iter().map(object_name).collect::<Result<_>>()?,
        if_exists,
        cascade,
    })
}

fn set(tokens: &[TokenWithSpan]) -> Result<Statement> {
    let words: Vec<&TokenWithSpan> = tokens.iter().filter(|t| !is_space(&t.token)).collect();
    let mut at = 1;
    if let Some(Token::Word(w)) = words.get(at).map(|t| &t.token)
        && matches!(w.value.to_uppercase().as_str(), "SESSION" | "LOCAL")
    {
        at += 1;
    }
    let mut name = words
        .get(at)
        .map(|t| t.token.to_string().to_lowercase())
        .ok_or_else(|| Error::Syntax("SET needs a parameter name".into()))?;
    // Qualified names, like weir.producer_id.
    while let (Some(Token::Period), Some(Token::Word(part))) = (
        words.get(at + 1).map(|t| &t.token),
        words.get(at + 2).map(|t| &t.token),
    ) {
        name = format!("{name}.{}", part.value.to_lowercase());
        at += 2;
    }
    let mut rest = words[at + 1..].iter().map(|t| &t.token).peekable();
    let value_tokens: Vec<&Token> = match rest.peek() {
        Some(Token::Eq) => rest.skip(1).collect(),
        Some(Token::Word(w)) if w.value.eq_ignore_ascii_case("TO") => rest.skip(1).collect(),
        _ if name == "time" => rest.skip(1).collect(),
        _ => {
            return Err(Error::Syntax(format!(
                "syntax error in SET {name}: expected = or TO"
            )));
        }
    };
    let value = value_tokens
        .iter()
        .map(|t| match t {
            Token::SingleQuotedString(s) => s.clone(),
            other => other.to_string(),
        })
        .collect::<Vec<_>>()
        .join(" ");
    let name = if name == "time" {
        "timezone".to_string()
    } else {
        name
    };
    Ok(Statement::Set { name, value })
}

/// `RESET name`, `RESET ALL` and `DISCARD ALL`: variables back to their defaults.
fn reset(tokens: &[TokenWithSpan]) -> Statement {
    let words: Vec<String> = tokens
        .iter()
        .filter(|t| !is_space(&t.token))
        .map(|t| t.token.to_string())
        .collect();
    let name = words[1..].join(" ").replace(" . ", ".").to_lowercase();
    let discard = words[0].eq_ignore_ascii_case("DISCARD");
    Statement::Reset {
        tag: if discard { "DISCARD ALL" } else { "RESET" },
        name: (!discard && name != "all").then_some(name),
    }
}

/// `CREATE MATERIALIZED VIEW [IF NOT EXISTS] name AS query [EMIT ...]`, after `skip` words.
fn create_view(tokens: &[TokenWithSpan], skip: usize) -> Result<CreateView> {
    let text = text_of(tokens);
    let tokens = rewrite_windows(crate::sql::corresponding::mark(tokens.to_vec())?);
    let (body, emit) = match top_level_word(&tokens, "EMIT") {
        Some(at) => (&tokens[..at], emit_clause(&tokens[at..])?),
        None => (&tokens[..], EmitClause::Changes),
    };
    let mut parser = parser_after(body, skip);
    use sqlparser::keywords::Keyword;
    let if_not_exists = parser.parse_keywords(&[Keyword::IF, Keyword::NOT, Keyword::EXISTS]);
    let name = object_name(&parser.parse_object_name(false)?)?;
    let columns = match parser.consume_token(&Token::LParen) {
        true => {
            let names = parser.parse_comma_separated(|p| p.parse_identifier())?;
            parser.expect_token(&Token::RParen)?;
            names
        }
        false => Vec::new(),
    };
    let options = if parser.parse_keyword(Keyword::WITH) {
        with_options(&mut parser)?
    } else {
        Vec::new()
    };
    parser.expect_keyword(Keyword::AS)?;
    let mut query = parser.parse_query()?;
    expect_end(&parser)?;
    setop::refuse_counted(&query)?;
    normalize(query.as_mut())?;
    // A view over the catalog fails as one (0A000), not on a function.
    crate::sql::pg_catalog::rewrite(query.as_mut());
    crate::sql::pg_catalog::qualify_catalog_tables(query.as_mut());
    Ok(CreateView {
        name,
        if_not_exists,
        columns,
        options,
        query,
        emit,
        text,
    })
}

/// The position of `word` outside any parentheses.
fn top_level_word(tokens: &[TokenWithSpan], word: &str) -> Option<usize> {
    let mut depth = 0i32;
    for (i, t) in tokens.iter().enumerate() {
        match &t.token {
            Token::LParen => depth += 1,
            Token::RParen => depth -= 1,
            token if depth == 0 && is_word(token, word) => return Some(i),
            _ => {}
        }
    }
    None
}

/// `EMIT CHANGES | ON UPDATE | ON WINDOW CLOSE | FINAL | EVERY <interval>`.
fn emit_clause(tokens: &[TokenWithSpan]) -> Result<EmitClause> {
    let words = leading_words(tokens, 5);
    let w: Vec<&str> = words.iter().map(String::as_str).collect();
    match w.as_slice() {
        ["EMIT", "CHANGES"] | ["EMIT", "ON", "UPDATE"] => Ok(EmitClause::Changes),
        ["EMIT", "ON", "WINDOW", "CLOSE"] | ["EMIT", "FINAL"] => Ok(EmitClause::OnWindowClose),
        ["EMIT", "EVERY", ..] => {
            let mut parser = parser_after(tokens, 2);
            let interval = parser.parse_expr()?;
            expect_end(&parser)?;
            Ok(EmitClause::Every(Box::new(interval)))
        }
        _ => Err(Error::Syntax(format!(
            "syntax error in \"{}\": expected EMIT CHANGES, EMIT ON UPDATE, EMIT ON WINDOW CLOSE, EMIT FINAL or EMIT EVERY INTERVAL '...'",
            text_of(tokens)
        ))),
    }
}

/// Window table functions as DataFusion's table-function calls take them:
/// `TUMBLE(bids, date_time, ...)` and Flink's
/// `TABLE(TUMBLE(TABLE bids, DESCRIPTOR(date_time), ...))` both become
/// `TUMBLE('bids', 'date_time', ...)`, names passed as strings.
pub fn rewrite_windows(tokens: Vec<TokenWithSpan>) -> Vec<TokenWithSpan> {
    let tokens = unwrap_flink_windows(rewrite_lookups(asof::rewrite(tokens)));
    let tokens = quote_gap_fill_columns(changelog_ctes(aggregate_calls(tokens)));
    let solid: Vec<usize> = (0..tokens.len())
        .filter(|i| !is_space(&tokens[*i].token))
        .collect();
    let mut out = tokens.clone();
    // Aliases to insert after a call: the window keeps its table's name.
    let mut aliases: Vec<(usize, String)> = Vec::new();
    for (n, &at) in solid.iter().enumerate() {
        let is_call = is_window_function(&tokens[at].token)
            && solid
                .get(n + 1)
                .is_some_and(|i| tokens[*i].token == Token::LParen);
        let after_from = n > 0
            && matches!(&tokens[solid[n - 1]].token,
                t if is_word(t, "FROM") || is_word(t, "JOIN") || *t == Token::Comma);
        if !(is_call && after_from) {
            continue;
        }
        // DataFusion looks table functions up by the name exactly as written.
        if let Token::Word(w) = &mut out[at].token {
            w.value = w.value.to_lowercase();
        }
        // The relation and the time column: the first two arguments.
        for offset in [2, 4] {
            let Some(&arg) = solid.get(n + offset) else {
                break;
            };
            let expected_comma = solid.get(n + offset + 1).map(|i| &tokens[*i].token);
            if let (Token::Word(w), Some(Token::Comma)) = (&tokens[arg].token, expected_comma) {
                let name = if w.quote_style.is_some() {
                    w.value.clone()
                } else {
                    w.value.to_lowercase()
                };
                if offset == 2
                    && let Some(close) = cursor::matching_paren(&tokens, solid[n + 1])
                    && !has_alias(&tokens, close + 1)
                {
                    aliases.push((close + 1, name.clone()));
                }
                out[arg].token = Token::SingleQuotedString(name);
            }
        }
    }
    for (at, name) in aliases.into_iter().rev() {
        let span = out[at - 1].span;
        let alias = [
            Token::Whitespace(sqlparser::tokenizer::Whitespace::Space),
            Token::make_keyword("AS"),
            Token::Whitespace(sqlparser::tokenizer::Whitespace::Space),
            Token::make_word(&name, Some('"')),
        ];
        out.splice(at..at, alias.map(|t| TokenWithSpan::new(t, span)));
    }
    out
}

/// `aggregate:f(x [ORDER BY ...])` (RisingWave's) applies the scalar
/// function `f` to the array of a group's values:
/// `f(array_agg(x [ORDER BY ...]))`.
fn aggregate_calls(tokens: Vec<TokenWithSpan>) -> Vec<TokenWithSpan> {
    let solid: Vec<usize> = (0..tokens.len())
        .filter(|i| !is_space(&tokens[*i].token))
        .collect();
    let token = |n: usize| solid.get(n).map(|i| &tokens[*i].token);
    let mut out = Vec::with_capacity(tokens.len() + 4);
    let mut copied = 0;
    for n in 0..solid.len() {
        let call = token(n).is_some_and(|t| is_word(t, "AGGREGATE"))
            && token(n + 1) == Some(&Token::Colon)
            && matches!(token(n + 2), Some(Token::Word(_)))
            && token(n + 3) == Some(&Token::LParen);
        if !call || solid[n] < copied {
            continue;
        }
        let open = solid[n + 3];
        let Some(close) = cursor::matching_paren(&tokens, open) else {
            continue;
        };
        let span = tokens[open].span;
        out.extend_from_slice(&tokens[copied..solid[n]]);
        out.extend_from_slice(&tokens[solid[n + 2]..=open]);
        out.push(TokenWithSpan::new(
            Token::make_word("array_agg", None),
            span,
        ));
        out.push(TokenWithSpan::new(Token::LParen, span));
        out.extend_from_slice(&tokens[open + 1..close]);
        out.push(TokenWithSpan::new(Token::RParen, span));
        out.push(tokens[close].clone());
        copied = close + 1;
    }
    out.extend_from_slice(&tokens[copied..]);
    out
}

/// `c AS changelog FROM t` in WITH (RisingWave's) becomes
/// `c AS (SELECT * FROM changelog_of('t'))`: `t`'s changes as rows.
fn changelog_ctes(tokens: Vec<TokenWithSpan>) -> Vec<TokenWithSpan> {
    let solid: Vec<usize> = (0..tokens.len())
        .filter(|i| !is_space(&tokens[*i].token))
        .collect();
    let token = |n: usize| solid.get(n).map(|i| &tokens[*i].token);
    let mut out = Vec::with_capacity(tokens.len());
    let mut copied = 0;
    for n in 1..solid.len() {
        let clause = token(n - 1).is_some_and(|t| is_word(t, "AS"))
            && token(n).is_some_and(|t| is_word(t, "CHANGELOG"))
            && token(n + 1).is_some_and(|t| is_word(t, "FROM"));
        if !clause || solid[n] < copied {
            continue;
        }
        // The relation: a name, maybe qualified; its last part names it.
        let mut last = n + 2;
        while token(last + 1) == Some(&Token::Period) && token(last + 2).is_some() {
            last += 2;
        }
        let Some(Token::Word(name)) = token(last) else {
            continue;
        };
        let name = match name.quote_style {
            Some(_) => name.value.clone(),
            None => name.value.to_lowercase(),
        };
        let span = tokens[solid[n]].span;
        out.extend_from_slice(&tokens[copied..solid[n]]);
        let space = || Token::Whitespace(sqlparser::tokenizer::Whitespace::Space);
        let replacement = [
            Token::LParen,
            Token::make_keyword("SELECT"),
            space(),
            Token::Mul,
            space(),
            Token::make_keyword("FROM"),
            space(),
            Token::make_word(crate::sql::changelog::FUNCTION, None),
            Token::LParen,
            Token::SingleQuotedString(name),
            Token::RParen,
            Token::RParen,
        ];
        out.extend(replacement.map(|t| TokenWithSpan::new(t, span)));
        copied = solid[last] + 1;
    }
    out.extend_from_slice(&tokens[copied..]);
    out
}

/// The columns named in GAP_FILL's `LOCF(c)`, `INTERPOLATE(c)`,
/// `KEEPNULL(c)` and `PARTITION_BY(c, ...)` become strings, as its table
/// and time column do: DataFusion plans a table function's arguments
/// against no columns at all.
fn quote_gap_fill_columns(mut tokens: Vec<TokenWithSpan>) -> Vec<TokenWithSpan> {
    const ARGUMENTS: [&str; 4] = ["LOCF", "INTERPOLATE", "KEEPNULL", "PARTITION_BY"];
    let mut at = 0;
    while at < tokens.len() {
        let named = ARGUMENTS.iter().any(|a| is_word(&tokens[at].token, a));
        let open = (at + 1..tokens.len()).find(|i| !is_space(&tokens[*i].token));
        let Some(open) = open.filter(|i| named && tokens[*i].token == Token::LParen) else {
            at += 1;
            continue;
        };
        let close = cursor::matching_paren(&tokens, open).unwrap_or(tokens.len());
        for token in &mut tokens[open..close] {
            if let Token::Word(w) = &token.token {
                let name = match w.quote_style {
                    Some(_) => w.value.clone(),
                    None => w.value.to_lowercase(),
                };
                token.token = Token::SingleQuotedString(name);
            }
        }
        at = close;
    }
    tokens
}

/// Whether a relation ending before `from` is followed by an alias
/// (`AS x`, or a name that is no keyword).
fn has_alias(tokens: &[TokenWithSpan], from: usize) -> bool {
    let next = tokens[from..].iter().find(|t| !is_space(&t.token));
    match next.map(|t| &t.token) {
        Some(Token::Word(w)) => {
            w.keyword == sqlparser::keywords::Keyword::AS
                || w.keyword == sqlparser::keywords::Keyword::NoKeyword
                || w.quote_style.is_some()
        }
        _ => false,
    }
}

/// `t FOR SYSTEM_TIME AS OF PROCTIME()` in FROM becomes the table function
/// call `lookup('t')`, which reads `t` as it is when a row is processed.
fn rewrite_lookups(tokens: Vec<TokenWithSpan>) -> Vec<TokenWithSpan> {
    const TAIL: [&str; 5] = ["FOR", "SYSTEM_TIME", "AS", "OF", "PROCTIME"];
    let solid: Vec<usize> = (0..tokens.len())
        .filter(|i| !is_space(&tokens[*i].token))
        .collect();
    let token = |n: usize| solid.get(n).map(|i| &tokens[*i].token);
    let mut out = Vec::with_capacity(tokens.len());
    let mut skip_to = 0;
    for (n, &at) in solid.iter().enumerate() {
        let matches = TAIL
            .iter()
            .enumerate()
            .all(|(k, word)| token(n + 1 + k).is_some_and(|t| is_word(t, word)))
            && token(n + 6) == Some(&Token::LParen)
            && token(n + 7) == Some(&Token::RParen);
        let Token::Word(name) = &tokens[at].token else {
            continue;
        };
        if !matches || at < skip_to {
            continue;
        }
        out.extend(tokens[skip_to..at].iter().cloned());
        let name = if name.quote_style.is_some() {
            name.value.clone()
        } else {
            name.value.to_lowercase()
        };
        let span = tokens[at].span;
        for token in [
            Token::make_word("lookup", None),
            Token::LParen,
            Token::SingleQuotedString(name),
            Token::RParen,
        ] {
            out.push(TokenWithSpan::new(token, span));
        }
        skip_to = solid[n + 7] + 1;
    }
    out.extend(tokens[skip_to..].iter().cloned());
    out
}

fn is_window_function(token: &Token) -> bool {
    ["TUMBLE", "HOP", "SESSION", "CUMULATE", "GAP_FILL"]
        .iter()
        .any(|f| is_word(token, f))
}

/// `TABLE(W(TABLE t, DESCRIPTOR(c), ...))` -> `W(t, c, ...)`.
fn unwrap_flink_windows(tokens: Vec<TokenWithSpan>) -> Vec<TokenWithSpan> {
    let flink = tokens
        .iter()
        .filter(|t| !is_space(&t.token))
        .collect::<Vec<_>>()
        .windows(3)
        .any(|w| {
            is_word(&w[0].token, "TABLE")
                && w[1].token == Token::LParen
                && is_window_function(&w[2].token)
        });
    if !flink {
        return tokens;
    }
    let mut solid: Vec<TokenWithSpan> =
        tokens.into_iter().filter(|t| !is_space(&t.token)).collect();
    let mut i = 0;
    while i + 3 < solid.len() {
        let wrapped = is_word(&solid[i].token, "TABLE")
            && solid[i + 1].token == Token::LParen
            && is_window_function(&solid[i + 2].token)
            && solid[i + 3].token == Token::LParen;
        if !wrapped {
            i += 1;
            continue;
        }
        // Find the parenthesis that closes `TABLE(`.
        let mut depth = 0;
        let mut close = None;
        for (j, t) in solid.iter().enumerate().skip(i + 1) {
            match t.token {
                Token::LParen => depth += 1,
                Token::RParen => {
                    depth -= 1;
                    if depth == 0 {
                        close = Some(j);
                        break;
                    }
                }
                _ => {}
            }
        }
        let Some(close) = close else { break };
        solid.remove(close);
        solid.drain(i..i + 2);
        // Inside: `TABLE t` -> `t`, `DESCRIPTOR(c)` -> `c`.
        let mut j = i;
        let end = close - 2;
        while j < end.min(solid.len()) {
            if is_word(&solid[j].token, "TABLE") {
                solid.remove(j);
                continue;
            }
            if is_word(&solid[j].token, "DESCRIPTOR")
                && solid.get(j + 1).is_some_and(|t| t.token == Token::LParen)
                && solid.get(j + 3).is_some_and(|t| t.token == Token::RParen)
            {
                solid.remove(j + 3);
                solid.remove(j + 1);
                solid.remove(j);
            }
            j += 1;
        }
        i += 1;
    }
    // Spaces between words were dropped: put one back between every token.
    let mut out = Vec::with_capacity(solid.len() * 2);
    for token in solid {
        if !out.is_empty() {
            out.push(TokenWithSpan::wrap(Token::Whitespace(
                sqlparser::tokenizer::Whitespace::Space,
            )));
        }
        out.push(token);
    }
    out
}

/// Numbers written with an exponent (`1e15`, `2.5E-3`) in plain digits:
/// literals with a fraction are numerics, as in PostgreSQL, and DataFusion
/// reads an exponent into a numeric wrongly (`1e15` became
/// 999999999999999.9 as a double).
fn plain_numbers(mut tokens: Vec<TokenWithSpan>) -> Vec<TokenWithSpan> {
    for token in &mut tokens {
        if let Token::Number(text, long) = &token.token
            && let Some(plain) = without_exponent(text)
        {
            token.token = Token::Number(plain, *long);
        }
    }
    tokens
}

fn without_exponent(text: &str) -> Option<String> {
    let (mantissa, exponent) = text.split_once(['e', 'E'])?;
    let exponent: i64 = exponent.parse().ok()?;
    if exponent.abs() > 100 || mantissa.is_empty() {
        return None;
    }
    let (whole, fraction) = mantissa.split_once('.').unwrap_or((mantissa, ""));
    let digits = format!("{whole}{fraction}");
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let point = whole.len() as i64 + exponent;
    let plain = if point <= 0 {
        format!("0.{}{digits}", "0".repeat(point.unsigned_abs() as usize))
    } else if point as usize >= digits.len() {
        format!("{digits}{}", "0".repeat(point as usize - digits.len()))
    } else {
        let (int, frac) = digits.split_at(point as usize);
        format!("{int}.{frac}")
    };
    let trimmed = plain.trim_start_matches('0');
    Some(match trimmed.starts_with('.') || trimmed.is_empty() {
        true => format!("0{trimmed}"),
        false => trimmed.to_string(),
    })
}

/// `CHARACTER VARYING` and `CHAR VARYING` as `VARCHAR`, `CHARACTER(n)` as
/// `CHAR(n)`: PostgreSQL's spellings of types DataFusion knows only by
/// their short names.
fn character_types(tokens: Vec<TokenWithSpan>) -> Vec<TokenWithSpan> {
    let mut out: Vec<TokenWithSpan> = Vec::with_capacity(tokens.len());
    let mut rest = tokens.into_iter().peekable();
    while let Some(token) = rest.next() {
        let long = is_word(&token.token, "CHARACTER");
        if !(long || is_word(&token.token, "CHAR")) {
            out.push(token);
            continue;
        }
        let mut gap = Vec::new();
        while let Some(space) = rest.next_if(|t| is_space(&t.token)) {
            gap.push(space);
        }
        let span = token.span;
        match rest.peek() {
            Some(next) if is_word(&next.token, "VARYING") => {
                rest.next();
                out.push(TokenWithSpan::new(Token::make_keyword("VARCHAR"), span));
            }
            Some(next) if long && next.token == Token::LParen => {
                out.push(TokenWithSpan::new(Token::make_keyword("CHAR"), span));
            }
            _ => out.push(token),
        }
        out.extend(gap);
    }
    out
}

fn is_word(token: &Token, word: &str) -> bool {
    matches!(token, Token::Word(w) if w.quote_style.is_none() && w.value.eq_ignore_ascii_case(word))
}

/// `CREATE TABLE|STREAM ... [APPEND ONLY]` with optional `WATERMARK FOR col AS expr`.
fn create_table(tokens: Vec<TokenWithSpan>) -> Result<CreateTable> {
    let text = text_of(&tokens);
    let mut tokens = tokens;
    let mut append_only = false;
    // CREATE STREAM is CREATE TABLE ... APPEND ONLY.
    if let Some(stream) = tokens.iter_mut().filter(|t| !is_space(&t.token)).nth(1)
        && matches!(&stream.token, Token::Word(w) if w.value.eq_ignore_ascii_case("STREAM"))
    {
        stream.token = Token::make_keyword("TABLE");
        append_only = true;
    }
    append_only |= strip_append_only(&mut tokens);
    let watermark = strip_watermark(&mut tokens)?;
    let conflict = strip_on_conflict(&mut tokens)?;
    let connector = connector::strip_table_connector(&mut tokens)?;
    let ast = sqlparser_one(tokens)?;
    let (name, if_not_exists) = match &ast {
        ast::Statement::CreateTable(c) => (object_name(&c.name)?, c.if_not_exists),
        _ => {
            return Err(Error::Internal(
                "CREATE TABLE parsed as another statement".into(),
            ));
        }
    };
    Ok(CreateTable {
        ast: Box::new(ast),
        name,
        append_only,
        watermark,
        if_not_exists,
        text,
        connector,
        conflict,
    })
}

/// Remove `ON CONFLICT DO NOTHING | OVERWRITE | DO UPDATE FULL | DO UPDATE
/// IF NOT NULL [WITH VERSION COLUMN (c, ...)]` after the column list.
fn strip_on_conflict(
    tokens: &mut Vec<TokenWithSpan>,
) -> Result<Option<(crate::catalog::ConflictAction, Vec<String>)>> {
    use crate::catalog::ConflictAction;
    let solid: Vec<usize> = (0..tokens.len())
        .filter(|i| !is_space(&tokens[*i].token))
        .collect();
    let word = |n: usize| solid.get(n).map(|i| &tokens[*i].token);
    let is = |n: usize, w: &str| word(n).is_some_and(|t| is_word(t, w));
    let mut depth = 0;
    let mut start = None;
    for (n, at) in solid.iter().enumerate() {
        match tokens[*at].token {
            Token::LParen => depth += 1,
            Token::RParen => depth -= 1,
            _ if depth == 0 && is(n, "ON") && is(n + 1, "CONFLICT") => {
                start = Some(n);
                break;
            }
            _ => {}
        }
    }
    let Some(start) = start else {
        return Ok(None);
    };
    let (action, mut next) = if is(start + 2, "DO") && is(start + 3, "NOTHING") {
        (ConflictAction::DoNothing, start + 4)
    } else if is(start + 2, "OVERWRITE") {
        (ConflictAction::Overwrite, start + 3)
    } else if is(start + 2, "DO") && is(start + 3, "UPDATE") && is(start + 4, "FULL") {
        (ConflictAction::Overwrite, start + 5)
    } else if is(start + 2, "DO")
        && is(start + 3, "UPDATE")
        && is(start + 4, "IF")
        && is(start + 5, "NOT")
        && is(start + 6, "NULL")
    {
        (ConflictAction::UpdateIfNotNull, start + 7)
    } else {
        return Err(Error::Syntax(
            "syntax error in ON CONFLICT: expected DO NOTHING, OVERWRITE, DO UPDATE FULL or DO UPDATE IF NOT NULL".into(),
        ));
    };
    let mut versions = Vec::new();
    if is(next, "WITH") && is(next + 1, "VERSION") && is(next + 2, "COLUMN") {
        next += 3;
        if word(next) != Some(&Token::LParen) {
            return Err(Error::Syntax("expected ( after WITH VERSION COLUMN".into()));
        }
        next += 1;
        loop {
            match word(next) {
                Some(Token::Word(w)) => versions.push(match w.quote_style {
                    Some(_) => w.value.clone(),
                    None => w.value.to_lowercase(),
                }),
                _ => {
                    return Err(Error::Syntax(
                        "expected a column name in WITH VERSION COLUMN".into(),
                    ));
                }
            }
            next += 1;
            match word(next) {
                Some(Token::Comma) => next += 1,
                Some(Token::RParen) => break,
                _ => {
                    return Err(Error::Syntax(
                        "expected , or ) in WITH VERSION COLUMN".into(),
                    ));
                }
            }
        }
        next += 1;
    }
    let end = solid.get(next).copied().unwrap_or(tokens.len());
    tokens.drain(solid[start]..end);
    Ok(Some((action, versions)))
}

fn strip_append_only(tokens: &mut Vec<TokenWithSpan>) -> bool {
    let solid: Vec<usize> = (0..tokens.len())
        .filter(|i| !is_space(&tokens[*i].token))
        .collect();
    let is = |i: usize, word: &str| matches!(&tokens[i].token, Token::Word(w) if w.quote_style.is_none() && w.value.eq_ignore_ascii_case(word));
    for pair in solid.windows(2) {
        if is(pair[0], "APPEND") && is(pair[1], "ONLY") {
            tokens.drain(pair[0]..=pair[1]);
            return true;
        }
    }
    false
}

/// Remove `WATERMARK FOR col AS expr` from the column list; returns (col, expr text).
fn strip_watermark(tokens: &mut Vec<TokenWithSpan>) -> Result<Option<(String, String)>> {
    let mut depth = 0;
    let mut start = None;
    for (i, t) in tokens.iter().enumerate() {
        match &t.token {
            Token::LParen => depth += 1,
            Token::RParen => depth -= 1,
            Token::Word(w)
                if depth == 1
                    && w.quote_style.is_none()
                    && w.value.eq_ignore_ascii_case("WATERMARK") =>
            {
                start = Some(i);
                break;
            }
            _ => {}
        }
    }
    let Some(start) = start else { return Ok(None) };
    // The clause ends at the next comma or the closing parenthesis at depth 1.
    let mut depth = 1;
    let mut end = tokens.len();
    for (i, t) in tokens.iter().enumerate().skip(start + 1) {
        match &t.token {
            Token::LParen => depth += 1,
            Token::RParen if depth == 1 => {
                end = i;
                break;
            }
            Token::RParen => depth -= 1,
            Token::Comma if depth == 1 => {
                end = i;
                break;
            }
            _ => {}
        }
    }
    let clause: Vec<TokenWithSpan> = tokens[start + 1..end]
        .iter()
        .filter(|t| !is_space(&t.token))
        .cloned()
        .collect();
    let mut parser = Parser::new(&PostgreSqlDialect {}).with_tokens_with_locations(clause);
    use sqlparser::keywords::Keyword;
    parser.expect_keyword(Keyword::FOR)?;
    let column = ident_name(&parser.parse_identifier()?);
    parser.expect_keyword(Keyword::AS)?;
    let expr = parser.parse_expr()?;
    // Remove the clause and the comma that separated it from its neighbour.
    let mut from = start;
    while from > 0 && is_space(&tokens[from - 1].token) {
        from -= 1;
    }
    let (from, to) = if from > 0 && tokens[from - 1].token == Token::Comma {
        (from - 1, end)
    } else if end < tokens.len() && tokens[end].token == Token::Comma {
        (start, end + 1)
    } else {
        (start, end)
    };
    tokens.drain(from..to);
    Ok(Some((column, expr.to_string())))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn one(sql: &str) -> Statement {
        let mut all = parse(sql).expect("parses");
        assert_eq!(all.len(), 1);
        all.remove(0)
    }

    #[test]
    fn streams_are_append_only_tables() {
        let Statement::CreateTable(c) = one("CREATE STREAM s (a BIGINT)") else {
            panic!("not a create table")
        };
        assert!(c.append_only);
        assert_eq!(c.name, "s");
    }

    #[test]
    fn watermark_and_append_only_are_stripped() {
        let sql = "CREATE TABLE bids (auction BIGINT, date_time TIMESTAMP, \
                   WATERMARK FOR date_time AS date_time - INTERVAL '4' SECOND) APPEND ONLY";
        let Statement::CreateTable(c) = one(sql) else {
            panic!("not a create table")
        };
        assert!(c.append_only);
        let (column, expr) = c.watermark.expect("watermark");
        assert_eq!(column, "date_time");
        assert!(expr.contains("INTERVAL"));
        assert_eq!(c.text, sql);
    }

    #[test]
    fn show_and_flush() {
        assert!(matches!(
            one("SHOW TABLES"),
            Statement::Show(ObjectKind::Table)
        ));
        assert!(matches!(
            one("show materialized views;"),
            Statement::Show(ObjectKind::MaterializedView)
        ));
        assert!(matches!(one("FLUSH"), Statement::Flush));
        assert!(matches!(
            one("SHOW search_path"),
            Statement::ShowVariable(_)
        ));
        assert!(matches!(
            one("RESET weir.producer_seq"),
            Statement::Reset { name: Some(n), tag: "RESET" } if n == "weir.producer_seq"
        ));
        assert!(matches!(
            one("DISCARD ALL"),
            Statement::Reset {
                name: None,
                tag: "DISCARD ALL"
            }
        ));
    }

    #[test]
    fn drop_forms() {
        let Statement::Drop(d) = one("DROP TABLE IF EXISTS a, B CASCADE") else {
            panic!("not a drop")
        };
        assert!(d.if_exists && d.cascade);
        assert_eq!(d.names, vec!["a".to_string(), "b".to_string()]);
    }

    #[test]
    fn multiple_statements_split_on_semicolons() {
        let all = parse("SELECT 1; SELECT ';'; ").expect("parses");
        assert_eq!(all.len(), 2);
    }

    #[test]
    fn long_character_types_take_their_short_names() {
        let Statement::Query(query) = one(
            "SELECT CAST(1 AS CHARACTER VARYING), 'a'::char varying(3), CAST('b' AS CHARACTER(2))",
        ) else {
            panic!("a query");
        };
        assert_eq!(
            query.to_string(),
            "SELECT CAST(1 AS VARCHAR), 'a'::VARCHAR(3), CAST('b' AS CHAR(2))"
        );
    }

    #[test]
    fn exponents_are_written_out() {
        for (text, plain) in [
            ("1e15", "1000000000000000"),
            ("2.5E-3", "0.0025"),
            ("1.25e1", "12.5"),
            ("0.5e0", "0.5"),
            ("12e-1", "1.2"),
        ] {
            assert_eq!(
                super::without_exponent(text).as_deref(),
                Some(plain),
                "{text}"
            );
        }
        assert_eq!(super::without_exponent("15"), None);
    }

    #[test]
    fn syntax_errors_are_42601() {
        let e = parse("SELEC 1").expect_err("bad sql");
        assert_eq!(e.sqlstate(), "42601");
    }
}
