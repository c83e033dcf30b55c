//! The connector clauses of `CREATE SOURCE`, `CREATE TABLE ... WITH
//! (connector = ...)` and `CREATE SINK`: `INCLUDE`, `WITH (...)` and
//! `FORMAT ... ENCODE ...`, in RisingWave's syntax.

use std::collections::BTreeMap;

use sqlparser::keywords::Keyword;
use sqlparser::parser::Parser;
use sqlparser::tokenizer::{Token, TokenWithSpan};

use super::cursor::with_options;
use super::{CreateTable, Statement, expect_end, is_space, is_word, object_name, text_of};
use crate::catalog::{ConnectorDef, ConnectorKind, Encoding, Format, Include, Metadata};
use crate::error::{Error, Result};

/// `CREATE SINK [IF NOT EXISTS] name FROM relation WITH (...) [FORMAT f ENCODE e [(...)]]`.
#[derive(Debug, Clone)]
pub struct CreateSink {
    pub name: String,
    pub if_not_exists: bool,
    pub from: String,
    pub connector: ConnectorDef,
    /// The statement as the user wrote it.
    pub text: String,
}

/// `CREATE SOURCE name [(columns)] [INCLUDE ...] WITH (...) [FORMAT ... ENCODE ...]`:
/// an append-only table fed by its connector.
pub fn create_source(tokens: Vec<TokenWithSpan>) -> Result<CreateTable> {
    let text = text_of(&tokens);
    let mut tokens = tokens;
    let solid = solid_indices(&tokens);
    if let Some(word) = solid.get(1).map(|i| &mut tokens[*i]) {
        word.token = Token::make_keyword("TABLE");
    }
    let tail = tail_start(&tokens)
        .ok_or_else(|| Error::Syntax("CREATE SOURCE needs WITH (connector = '...', ...)".into()))?;
    let clause = parse_tail(&tokens[tail..])?;
    tokens.truncate(tail);
    let mut create = super::create_table(tokens)?;
    let mut connector = connector_def(clause)?;
    connector.source = true;
    create.append_only = !connector.is_upsert();
    create.connector = Some(connector);
    create.text = text;
    Ok(create)
}

/// Split a CREATE TABLE's connector clauses off, when it has any.
pub fn strip_table_connector(tokens: &mut Vec<TokenWithSpan>) -> Result<Option<ConnectorDef>> {
    let Some(tail) = tail_start(tokens) else {
        return Ok(None);
    };
    let clause = parse_tail(&tokens[tail..])?;
    // A plain WITH (...) without a connector stays PostgreSQL's table options.
    if !clause.options.iter().any(|(k, _)| k == "connector")
        && clause.format.is_none()
        && clause.include.is_empty()
    {
        return Ok(None);
    }
    tokens.truncate(tail);
    connector_def(clause).map(Some)
}

pub fn create_sink(tokens: &[TokenWithSpan]) -> Result<Statement> {
    let text = text_of(tokens);
    let mut parser = super::parser_after(tokens, 2);
    let if_not_exists = parser.parse_keywords(&[Keyword::IF, Keyword::NOT, Keyword::EXISTS]);
    let name = object_name(&parser.parse_object_name(false)?)?;
    if parser.parse_keyword(Keyword::AS) {
        return Err(Error::NotSupported(
            "CREATE SINK ... AS SELECT is not supported; create a materialized view and \
             CREATE SINK ... FROM it"
                .into(),
        ));
    }
    parser.expect_keyword(Keyword::FROM)?;
    let from = object_name(&parser.parse_object_name(false)?)?;
    let clause = parse_clauses(&mut parser)?;
    expect_end(&parser)?;
    if !clause.include.is_empty() {
        return Err(Error::Syntax(
            "INCLUDE belongs to sources, not sinks".into(),
        ));
    }
    Ok(Statement::CreateSink(CreateSink {
        name,
        if_not_exists,
        from,
        connector: connector_def(clause)?,
        text,
    }))
}

#[derive(Default)]
struct Clause {
    options: Vec<(String, String)>,
    format: Option<String>,
    encode: Option<String>,
    encode_options: Vec<(String, String)>,
    include: Vec<Include>,
}

fn solid_indices(tokens: &[TokenWithSpan]) -> Vec<usize> {
    (0..tokens.len())
        .filter(|i| !is_space(&tokens[*i].token))
        .collect()
}

/// Where the first top-level `INCLUDE`, `WITH` or `FORMAT` starts.
fn tail_start(tokens: &[TokenWithSpan]) -> Option<usize> {
    let mut depth = 0i32;
    for (i, t) in tokens.iter().enumerate() {
        match &t.token {
            Token::LParen => depth += 1,
            Token::RParen => depth -= 1,
            token
                if depth == 0
                    && ["INCLUDE", "WITH", "FORMAT"]
                        .iter()
                        .any(|w| is_word(token, w)) =>
            {
                return Some(i);
            }
            _ => {}
        }
    }
    None
}

fn parse_tail(tokens: &[TokenWithSpan]) -> Result<Clause> {
    let mut parser = Parser::new(&sqlparser::dialect::PostgreSqlDialect {})
        .with_tokens_with_locations(tokens.to_vec());
    let clause = parse_clauses(&mut parser)?;
    expect_end(&parser)?;
    Ok(clause)
}

fn parse_clauses(parser: &mut Parser<'_>) -> Result<Clause> {
    let mut clause = Clause::default();
    loop {
        if parser.parse_keyword(Keyword::INCLUDE) {
            include(parser, &mut clause.include)?;
        } else if parser.parse_keyword(Keyword::WITH) {
            clause.options.extend(with_options(parser)?);
        } else if parser.parse_keyword(Keyword::FORMAT) {
            clause.format = Some(word(parser)?);
            if !next_is_word(parser, "ENCODE") {
                return Err(Error::Syntax(
                    "FORMAT needs ENCODE: FORMAT PLAIN ENCODE JSON".into(),
                ));
            }
            clause.encode = Some(word(parser)?);
            if parser.peek_token().token == Token::LParen {
                clause.encode_options = with_options(parser)?;
            }
        } else {
            return Ok(clause);
        }
    }
}

/// `INCLUDE what [AS name] [, what [AS name] ...]`.
fn include(parser: &mut Parser<'_>, out: &mut Vec<Include>) -> Result<()> {
    loop {
        let what = Metadata::parse(&parser.parse_identifier()?.value)?;
        let column = if parser.parse_keyword(Keyword::AS) {
            super::ident_name(&parser.parse_identifier()?)
        } else {
            what.default_column().to_string()
        };
        out.push(Include { what, column });
        if !parser.consume_token(&Token::Comma) {
            return Ok(());
        }
    }
}

/// Consume the next token when it is `word` (for words sqlparser has no keyword for).
fn next_is_word(parser: &mut Parser<'_>, word: &str) -> bool {
    if is_word(&parser.peek_token().token, word) {
        parser.next_token();
        return true;
    }
    false
}

fn word(parser: &mut Parser<'_>) -> Result<String> {
    Ok(parser.parse_identifier()?.value.to_lowercase())
}

fn connector_def(clause: Clause) -> Result<ConnectorDef> {
    let mut options = BTreeMap::new();
    for (key, value) in clause.options {
        if options.insert(key.clone(), value).is_some() {
            return Err(Error::Syntax(format!("option {key} is given twice")));
        }
    }
    let connector = options.remove("connector").ok_or_else(|| {
        Error::Syntax("WITH (...) needs connector = 'kafka' (or 'nexmark', 'datagen')".into())
    })?;
    Ok(ConnectorDef {
        connector: ConnectorKind::from(connector.to_lowercase()),
        options,
        format: clause.format.map(Format::from),
        encode: clause.encode.map(Encoding::from),
        encode_options: clause.encode_options.into_iter().collect(),
        include: clause.include,
        source: false,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sql::parser::parse;

    fn one(sql: &str) -> Statement {
        parse(sql).expect(sql).remove(0)
    }

    #[test]
    fn a_kafka_source_keeps_columns_options_format_and_includes() {
        let Statement::CreateTable(create) =
            one("CREATE SOURCE bids (auction BIGINT, date_time TIMESTAMP, \
             WATERMARK FOR date_time AS date_time - INTERVAL '5' SECOND) \
             INCLUDE key AS k, offset WITH (connector = 'kafka', topic = 'bids', \
             properties.bootstrap.server = '127.0.0.1:9092') FORMAT PLAIN ENCODE JSON")
        else {
            panic!("not a create")
        };
        assert_eq!(create.name, "bids");
        assert!(create.append_only);
        assert!(create.watermark.is_some());
        let connector = create.connector.expect("a connector");
        assert!(connector.source);
        assert_eq!(connector.connector, ConnectorKind::Kafka);
        assert_eq!(connector.option("topic"), Some("bids"));
        assert_eq!(
            connector.option("properties.bootstrap.server"),
            Some("127.0.0.1:9092")
        );
        assert_eq!(connector.format, Some(Format::Plain));
        assert_eq!(connector.encode, Some(Encoding::Json));
        assert_eq!(connector.include.len(), 2);
        assert_eq!(connector.include[0].column, "k");
        assert_eq!(connector.include[1].column, "_kafka_offset");
    }

    #[test]
    fn an_upsert_table_is_keyed_and_a_plain_with_is_left_alone() {
        let Statement::CreateTable(create) = one(
            "CREATE TABLE t (id INT PRIMARY KEY, v VARCHAR) WITH (connector = 'kafka', \
             topic = 't') FORMAT UPSERT ENCODE JSON",
        ) else {
            panic!("not a create")
        };
        let connector = create.connector.expect("a connector");
        assert!(!connector.source && connector.is_upsert());
        let Statement::CreateTable(plain) = one("CREATE TABLE p (id INT) WITH (fillfactor = 70)")
        else {
            panic!("not a create")
        };
        assert!(plain.connector.is_none());
    }

    #[test]
    fn a_sink_names_its_relation() {
        let Statement::CreateSink(sink) = one(
            "CREATE SINK IF NOT EXISTS s FROM v WITH (connector = 'kafka', topic = 'out') \
             FORMAT UPSERT ENCODE JSON (force_append_only = 'true')",
        ) else {
            panic!("not a sink")
        };
        assert!(sink.if_not_exists);
        assert_eq!((sink.name.as_str(), sink.from.as_str()), ("s", "v"));
        assert_eq!(
            sink.connector.encode_options.get("force_append_only"),
            Some(&"true".to_string())
        );
    }

    #[test]
    fn bad_clauses_say_what_to_write() {
        for sql in [
            "CREATE SOURCE s (a INT)",
            "CREATE SOURCE s (a INT) WITH (topic = 'x')",
            "CREATE SOURCE s (a INT) WITH (connector = 'kafka') FORMAT PLAIN",
            "CREATE SOURCE s (a INT) INCLUDE nothing WITH (connector = 'kafka')",
            "CREATE SINK s FROM v WITH (connector = 'kafka', connector = 'kafka')",
        ] {
            assert!(parse(sql).is_err(), "{sql} parsed");
        }
        assert!(matches!(
            parse("CREATE SINK s AS SELECT 1"),
            Err(Error::NotSupported(_))
        ));
    }
}
