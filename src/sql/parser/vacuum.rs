//! `VACUUM [ ( option [value] [, ...] ) ] [FULL] [FREEZE] [VERBOSE]
//! [ANALYZE] [name [, ...]]`: PostgreSQL's syntax, for compacting the
//! store. Its options tune PostgreSQL's heap and mean nothing to an LSM
//! tree, so they are checked and ignored.

use sqlparser::keywords::Keyword;
use sqlparser::parser::Parser;
use sqlparser::tokenizer::{Token, TokenWithSpan};

use super::{Statement, expect_end, object_name, parser_after};
use crate::error::{Error, Result};

/// PostgreSQL 15's VACUUM options.
const OPTIONS: &[&str] = &[
    "full",
    "freeze",
    "verbose",
    "analyze",
    "disable_page_skipping",
    "skip_locked",
    "index_cleanup",
    "process_toast",
    "truncate",
    "parallel",
];

pub fn vacuum(tokens: &[TokenWithSpan]) -> Result<Statement> {
    let mut parser = parser_after(tokens, 1);
    if parser.consume_token(&Token::LParen) {
        options(&mut parser)?;
    }
    while parser
        .parse_one_of_keywords(&[
            Keyword::FULL,
            Keyword::FREEZE,
            Keyword::VERBOSE,
            Keyword::ANALYZE,
        ])
        .is_some()
    {}
    let names = if parser.peek_token().token == Token::EOF {
        Vec::new()
    } else {
        parser
            .parse_comma_separated(|p| p.parse_object_name(false))?
            .iter()
            .map(object_name)
            .collect::<Result<_>>()?
    };
    expect_end(&parser)?;
    Ok(Statement::Vacuum(names))
}

/// `( option [value] [, ...] )`, after its opening parenthesis.
fn options(parser: &mut Parser<'_>) -> Result<()> {
    loop {
        let option = parser.parse_identifier()?.value.to_lowercase();
        if !OPTIONS.contains(&option.as_str()) {
            return Err(Error::Syntax(format!(
                "unrecognized VACUUM option \"{option}\""
            )));
        }
        if !matches!(parser.peek_token().token, Token::Comma | Token::RParen) {
            parser.parse_expr()?;
        }
        if parser.consume_token(&Token::RParen) {
            return Ok(());
        }
        parser.expect_token(&Token::Comma)?;
    }
}

#[cfg(test)]
mod tests {
    use super::super::parse;
    use super::*;

    fn names(sql: &str) -> Vec<String> {
        match parse(sql).expect("parses").remove(0) {
            Statement::Vacuum(names) => names,
            other => panic!("{sql}: {other:?}"),
        }
    }

    #[test]
    fn postgresql_spellings() {
        assert!(names("VACUUM").is_empty());
        assert!(names("vacuum full analyze").is_empty());
        assert_eq!(names("VACUUM (FULL, PARALLEL 2, TRUNCATE off) t"), ["t"]);
        assert_eq!(names("VACUUM FULL VERBOSE t, \"Mixed\""), ["t", "Mixed"]);
    }

    #[test]
    fn what_postgresql_refuses() {
        for sql in ["VACUUM (BOGUS) t", "VACUUM t u", "VACUUM (FULL"] {
            let e = parse(sql).expect_err(sql);
            assert_eq!(e.sqlstate(), "42601", "{sql}: {e}");
        }
        let e = parse("VACUUM (bogus)").expect_err("unknown option");
        assert_eq!(e.to_string(), "unrecognized VACUUM option \"bogus\"");
    }
}
