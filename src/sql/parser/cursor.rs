//! Change-stream statements: `SUBSCRIBE`, `COPY (SUBSCRIBE ...) TO STDOUT`,
//! `DECLARE ... CURSOR`, `FETCH`, `CLOSE`, and RisingWave's
//! `CREATE SUBSCRIPTION` with its subscription cursors.

use sqlparser::ast;
use sqlparser::keywords::Keyword;
use sqlparser::parser::Parser;
use sqlparser::tokenizer::{Token, TokenWithSpan};

use super::{
    EmitClause, Statement, emit_clause, expect_end, is_space, is_word, leading_words, object_name,
    parser_after, top_level_word,
};
use crate::error::{Error, Result};

/// `SUBSCRIBE [TO] name [WITH (snapshot = .., progress = ..)] [AS OF n] [EMIT ...]`.
#[derive(Debug, Clone, PartialEq)]
pub struct Subscribe {
    pub name: String,
    pub options: Vec<(String, String)>,
    pub as_of: Option<u64>,
    pub emit: Option<EmitClause>,
}

/// What a cursor reads.
#[derive(Debug, Clone)]
pub enum CursorSource {
    Subscribe(Subscribe),
    /// `DECLARE c CURSOR FOR SELECT ...`.
    Query(Box<ast::Statement>),
    /// `DECLARE c SUBSCRIPTION CURSOR FOR s [SINCE n | FULL]`.
    Subscription {
        name: String,
        since: Since,
    },
}

/// Where a subscription cursor starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Since {
    /// Changes from now on (the default).
    Now,
    /// The contents first, then every change.
    Full,
    /// Right after this epoch.
    Epoch(u64),
}

/// `FETCH [n | ALL | NEXT | FORWARD [n | ALL]] [FROM | IN] c [WITH (timeout = '1s')]`.
#[derive(Debug, Clone, PartialEq)]
pub struct Fetch {
    pub cursor: String,
    /// At most this many rows; `None` for ALL.
    pub count: Option<u64>,
    /// How long to wait for a first row, as written.
    pub timeout: Option<String>,
}

/// `SUBSCRIBE ...` after `skip` leading tokens (and up to `end`).
pub fn subscribe(tokens: &[TokenWithSpan]) -> Result<Subscribe> {
    let (body, emit) = match top_level_word(tokens, "EMIT") {
        Some(at) => (&tokens[..at], Some(emit_clause(&tokens[at..])?)),
        None => (tokens, None),
    };
    let mut parser = parser_after(body, 1);
    let _ = parser.parse_keyword(Keyword::TO);
    let name = object_name(&parser.parse_object_name(false)?)?;
    let mut options = Vec::new();
    let mut as_of = None;
    loop {
        if parser.parse_keyword(Keyword::WITH) {
            options.extend(with_options(&mut parser)?);
        } else if parser.parse_keywords(&[Keyword::AS, Keyword::OF]) {
            as_of = Some(epoch(&mut parser, "AS OF")?);
        } else {
            break;
        }
    }
    expect_end(&parser)?;
    Ok(Subscribe {
        name,
        options,
        as_of,
        emit,
    })
}

/// `COPY (SUBSCRIBE ...) TO STDOUT [WITH (...)]`.
pub fn copy_subscribe(tokens: &[TokenWithSpan]) -> Result<Statement> {
    let solid: Vec<TokenWithSpan> = tokens
        .iter()
        .filter(|t| !is_space(&t.token))
        .cloned()
        .collect();
    let close = matching_paren(&solid, 1)
        .ok_or_else(|| Error::Syntax("COPY (SUBSCRIBE ...: missing closing parenthesis".into()))?;
    let inner = subscribe(&solid[2..close])?;
    let mut parser = parser_after(&solid[close + 1..], 0);
    parser.expect_keyword(Keyword::TO)?;
    if !parser.parse_keyword(Keyword::STDOUT) {
        return Err(Error::NotSupported(
            "COPY (SUBSCRIBE ...) writes only TO STDOUT".into(),
        ));
    }
    if parser.parse_keyword(Keyword::WITH) || parser.peek_token().token == Token::LParen {
        for (key, value) in with_options(&mut parser)? {
            let text = key == "format" && value.eq_ignore_ascii_case("text");
            if !text {
                return Err(Error::NotSupported(format!(
                    "COPY (SUBSCRIBE ...) TO STDOUT option {key} = {value} is not supported; it writes the text format"
                )));
            }
        }
    }
    expect_end(&parser)?;
    Ok(Statement::CopySubscribe(inner))
}

/// The parenthesis that closes the one at `open`.
pub(super) fn matching_paren(tokens: &[TokenWithSpan], open: usize) -> Option<usize> {
    let mut depth = 0;
    for (i, t) in tokens.iter().enumerate().skip(open) {
        match t.token {
            Token::LParen => depth += 1,
            Token::RParen => {
                depth -= 1;
                if depth == 0 {
                    return Some(i);
                }
            }
            _ => {}
        }
    }
    None
}

/// `DECLARE name [BINARY] [NO SCROLL] CURSOR [WITH[OUT] HOLD] FOR ...` and
/// `DECLARE name SUBSCRIPTION CURSOR FOR s [SINCE n | FULL]`.
pub fn declare(tokens: &[TokenWithSpan]) -> Result<Statement> {
    let solid: Vec<TokenWithSpan> = tokens
        .iter()
        .filter(|t| !is_space(&t.token))
        .cloned()
        .collect();
    let name = super::ident_name(&parser_after(&solid, 1).parse_identifier()?);
    let for_at = solid
        .iter()
        .position(|t| is_word(&t.token, "FOR"))
        .ok_or_else(|| Error::Syntax("DECLARE ... CURSOR needs FOR and a query".into()))?;
    let between = leading_words(&solid[2..for_at], 8);
    if !between.iter().any(|w| w == "CURSOR") {
        return Err(Error::Syntax(format!(
            "syntax error in DECLARE {name}: expected CURSOR"
        )));
    }
    if between.iter().any(|w| w == "SCROLL") && !between.iter().any(|w| w == "NO") {
        return Err(Error::NotSupported(
            "scrollable cursors are not supported; DECLARE ... NO SCROLL CURSOR".into(),
        ));
    }
    let body = &solid[for_at + 1..];
    let source = if between.first().map(String::as_str) == Some("SUBSCRIPTION") {
        subscription_cursor(body)?
    } else if body.first().is_some_and(|t| is_word(&t.token, "SUBSCRIBE")) {
        CursorSource::Subscribe(subscribe(body)?)
    } else {
        let mut parser = Parser::new(&sqlparser::dialect::PostgreSqlDialect {})
            .with_tokens_with_locations(body.to_vec());
        let mut query = parser.parse_query()?;
        expect_end(&parser)?;
        super::fix_distinct_from(&mut query);
        CursorSource::Query(Box::new(ast::Statement::Query(query)))
    };
    Ok(Statement::Declare { name, source })
}

fn subscription_cursor(body: &[TokenWithSpan]) -> Result<CursorSource> {
    let mut parser = parser_after(body, 0);
    let name = object_name(&parser.parse_object_name(false)?)?;
    let since = if parser.parse_keyword(Keyword::FULL) {
        Since::Full
    } else if matches!(&parser.peek_token().token, Token::Word(w) if w.value.eq_ignore_ascii_case("SINCE"))
    {
        parser.next_token();
        match parser.peek_token().token {
            Token::Number(..) => Since::Epoch(epoch(&mut parser, "SINCE")?),
            _ => {
                // SINCE now() / proctime(): changes from now on.
                parser.parse_expr()?;
                Since::Now
            }
        }
    } else {
        Since::Now
    };
    expect_end(&parser)?;
    Ok(CursorSource::Subscription { name, since })
}

/// `FETCH ...`.
pub fn fetch(tokens: &[TokenWithSpan]) -> Result<Statement> {
    let mut parser = parser_after(tokens, 1);
    let mut count = Some(1);
    let _ = parser.parse_keyword(Keyword::FORWARD);
    if parser.parse_keyword(Keyword::NEXT) {
        count = Some(1);
    } else if parser.parse_keyword(Keyword::ALL) {
        count = None;
    } else if let Token::Number(..) = parser.peek_token().token {
        count = Some(epoch(&mut parser, "FETCH")?);
    }
    let _ = parser.parse_one_of_keywords(&[Keyword::FROM, Keyword::IN]);
    let cursor = super::ident_name(&parser.parse_identifier()?);
    let mut timeout = None;
    if parser.parse_keyword(Keyword::WITH) {
        for (key, value) in with_options(&mut parser)? {
            match key.as_str() {
                "timeout" => timeout = Some(value),
                other => {
                    return Err(Error::Syntax(format!(
                        "FETCH option {other} is not recognised; FETCH takes WITH (timeout = '1s')"
                    )));
                }
            }
        }
    }
    expect_end(&parser)?;
    Ok(Statement::Fetch(Fetch {
        cursor,
        count,
        timeout,
    }))
}

/// `CLOSE name | CLOSE ALL`.
pub fn close(tokens: &[TokenWithSpan]) -> Result<Statement> {
    let mut parser = parser_after(tokens, 1);
    let name = if parser.parse_keyword(Keyword::ALL) {
        None
    } else {
        Some(super::ident_name(&parser.parse_identifier()?))
    };
    expect_end(&parser)?;
    Ok(Statement::Close(name))
}

/// `CREATE SUBSCRIPTION [IF NOT EXISTS] s FROM v [WITH (retention = '1 day')]`.
pub fn create_subscription(tokens: &[TokenWithSpan]) -> Result<Statement> {
    let mut parser = parser_after(tokens, 2);
    let if_not_exists = parser.parse_keywords(&[Keyword::IF, Keyword::NOT, Keyword::EXISTS]);
    let name = object_name(&parser.parse_object_name(false)?)?;
    parser.expect_keyword(Keyword::FROM)?;
    let from = object_name(&parser.parse_object_name(false)?)?;
    let mut retention = None;
    if parser.parse_keyword(Keyword::WITH) {
        for (key, value) in with_options(&mut parser)? {
            match key.as_str() {
                "retention" => retention = Some(value),
                other => {
                    return Err(Error::InvalidParameter(format!(
                        "unrecognized subscription option \"{other}\"; CREATE SUBSCRIPTION takes WITH (retention = '1 day')"
                    )));
                }
            }
        }
    }
    expect_end(&parser)?;
    Ok(Statement::CreateSubscription {
        name,
        from,
        retention,
        if_not_exists,
    })
}

/// A non-negative integer: an epoch or a count.
fn epoch(parser: &mut Parser<'_>, after: &str) -> Result<u64> {
    let token = parser.next_token();
    match &token.token {
        Token::Number(n, _) => n
            .parse()
            .map_err(|_| Error::Syntax(format!("{after} takes a non-negative integer; got {n}"))),
        other => Err(Error::Syntax(format!(
            "syntax error at or near \"{other}\": {after} takes a non-negative integer"
        ))),
    }
}

/// `( key [= value], ... )`: keys lower-cased and dotted keys joined, values
/// unquoted; a key without a value means `true`.
pub fn with_options(parser: &mut Parser<'_>) -> Result<Vec<(String, String)>> {
    parser.expect_token(&Token::LParen)?;
    let mut options = Vec::new();
    loop {
        let mut key = parser.parse_identifier()?.value.to_lowercase();
        while parser.consume_token(&Token::Period) {
            key = format!("{key}.{}", parser.parse_identifier()?.value.to_lowercase());
        }
        let value = if parser.consume_token(&Token::Eq) {
            option_value(parser)?
        } else {
            "true".to_string()
        };
        options.push((key, value));
        if !parser.consume_token(&Token::Comma) {
            break;
        }
    }
    parser.expect_token(&Token::RParen)?;
    Ok(options)
}

fn option_value(parser: &mut Parser<'_>) -> Result<String> {
    let token = parser.next_token();
    Ok(match token.token {
        Token::SingleQuotedString(s) => s,
        Token::Number(n, _) => n,
        Token::Word(w) if w.keyword == Keyword::INTERVAL => match parser.next_token().token {
            Token::SingleQuotedString(s) => {
                let mut text = s;
                if let Token::Word(unit) = parser.peek_token().token
                    && unit.quote_style.is_none()
                    && !matches!(unit.keyword, Keyword::NoKeyword)
                {
                    parser.next_token();
                    text = format!("{text} {}", unit.value.to_lowercase());
                }
                text
            }
            other => {
                return Err(Error::Syntax(format!(
                    "syntax error at or near \"{other}\": INTERVAL takes a quoted value"
                )));
            }
        },
        Token::Word(w) => w.value.to_lowercase(),
        other => {
            return Err(Error::Syntax(format!(
                "syntax error at or near \"{other}\": expected an option value"
            )));
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sql::parser::parse;

    fn one(sql: &str) -> Statement {
        parse(sql).expect("parses").remove(0)
    }

    #[test]
    fn subscribe_takes_options_an_epoch_and_a_pace() {
        let Statement::CopySubscribe(s) = one(
            "COPY (SUBSCRIBE TO v WITH (snapshot = false, progress) AS OF 42 EMIT EVERY INTERVAL '5' SECOND) TO STDOUT",
        ) else {
            panic!("not a COPY SUBSCRIBE")
        };
        assert_eq!(s.name, "v");
        assert_eq!(
            s.options,
            vec![
                ("snapshot".to_string(), "false".to_string()),
                ("progress".to_string(), "true".to_string())
            ]
        );
        assert_eq!(s.as_of, Some(42));
        assert!(matches!(s.emit, Some(EmitClause::Every(_))));
    }

    #[test]
    fn cursors_declare_fetch_and_close() {
        let Statement::Declare { name, source } = one("DECLARE C CURSOR FOR SUBSCRIBE v") else {
            panic!("not a DECLARE")
        };
        assert_eq!(name, "c");
        assert!(matches!(source, CursorSource::Subscribe(_)));
        let Statement::Fetch(fetch) = one("FETCH 10 c WITH (timeout = '1s')") else {
            panic!("not a FETCH")
        };
        assert_eq!(fetch.count, Some(10));
        assert_eq!(fetch.timeout.as_deref(), Some("1s"));
        let Statement::Fetch(all) = one("FETCH ALL FROM c") else {
            panic!("not a FETCH")
        };
        assert_eq!(all.count, None);
        assert!(matches!(one("CLOSE ALL"), Statement::Close(None)));
        let Statement::Declare { source, .. } =
            one("DECLARE cur SUBSCRIPTION CURSOR FOR sub SINCE 7")
        else {
            panic!("not a DECLARE")
        };
        assert!(matches!(
            source,
            CursorSource::Subscription {
                since: Since::Epoch(7),
                ..
            }
        ));
    }

    #[test]
    fn malformed_statements_are_syntax_errors() {
        for sql in [
            "SUBSCRIBE",
            "SUBSCRIBE v AS OF x",
            "FETCH 1",
            "DECLARE c CURSOR",
            "COPY (SUBSCRIBE v TO STDOUT",
            "CREATE SUBSCRIPTION s v",
        ] {
            assert!(parse(sql).is_err(), "{sql} should not parse");
        }
    }
}
