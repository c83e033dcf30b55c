//! EXPLAIN of a materialized view: `EXPLAIN [ANALYZE] [(option, ...)]`
//! before `CREATE MATERIALIZED VIEW ...` (the graph it would run) or
//! `MATERIALIZED VIEW name` (the graph it runs, with counters under
//! ANALYZE). Options as PostgreSQL spells them: `ANALYZE [boolean]`,
//! `FORMAT { TEXT | DOT | JSON }`, and `VERBOSE`, `COSTS`, `TIMING`,
//! `SUMMARY`, `BUFFERS`, which change nothing here.

use sqlparser::tokenizer::{Token, TokenWithSpan};

use super::{Statement, create_view, is_space, is_word, object_name_after};
use crate::error::{Error, Result};

/// How EXPLAIN prints a graph.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExplainFormat {
    Text,
    Dot,
    Json,
}

/// Options that only change how PostgreSQL's EXPLAIN prints costs.
const IGNORED: &[&str] = &[
    "VERBOSE", "COSTS", "TIMING", "SUMMARY", "BUFFERS", "SETTINGS", "WAL",
];

/// Whether `tokens` (an EXPLAIN) is about a materialized view, created or running.
pub fn is_about_a_view(tokens: &[TokenWithSpan]) -> bool {
    let words = solid(tokens);
    let at = options_end(&words);
    let word = |i: usize, w: &str| words.get(i).is_some_and(|t| is_word(&t.token, w));
    (word(at, "CREATE") && word(at + 1, "MATERIALIZED"))
        || (word(at, "MATERIALIZED") && word(at + 1, "VIEW"))
}

pub fn explain(tokens: &[TokenWithSpan]) -> Result<Statement> {
    let words = solid(tokens);
    let at = options_end(&words);
    let (analyze, format) = options(&words[1..at])?;
    if is_word(&words[at].token, "CREATE") {
        if analyze {
            return Err(Error::NotSupported(
                "EXPLAIN ANALYZE reads a running view: EXPLAIN ANALYZE MATERIALIZED VIEW name"
                    .into(),
            ));
        }
        let create = create_view(&words[at..], 3)?;
        return Ok(Statement::ExplainView { create, format });
    }
    let name = object_name_after(&words[at..], 2)?;
    Ok(Statement::ExplainRunning {
        name,
        analyze,
        format,
    })
}

fn solid(tokens: &[TokenWithSpan]) -> Vec<TokenWithSpan> {
    tokens
        .iter()
        .filter(|t| !is_space(&t.token))
        .cloned()
        .collect()
}

/// Where the options after EXPLAIN end: after a bare ANALYZE and a
/// parenthesized list.
fn options_end(words: &[TokenWithSpan]) -> usize {
    let mut at = 1;
    if words.get(at).is_some_and(|t| is_word(&t.token, "ANALYZE")) {
        at += 1;
    }
    if words.get(at).is_some_and(|t| t.token == Token::LParen) {
        while let Some(t) = words.get(at) {
            at += 1;
            if t.token == Token::RParen {
                break;
            }
        }
    }
    at.min(words.len().saturating_sub(1))
}

/// `ANALYZE` and the parenthesized options: whether to analyze, and the format.
fn options(mut words: &[TokenWithSpan]) -> Result<(bool, ExplainFormat)> {
    let mut analyze = false;
    let mut format = ExplainFormat::Text;
    // `EXPLAIN ANALYZE (...)`: the bare word comes before the list.
    if words.first().is_some_and(|t| is_word(&t.token, "ANALYZE")) {
        analyze = true;
        words = &words[1..];
    }
    let text: Vec<String> = words
        .iter()
        .filter(|t| !matches!(t.token, Token::LParen | Token::RParen))
        .map(|t| t.token.to_string())
        .collect();
    for option in text.split(|w| w == ",") {
        let upper: Vec<String> = option.iter().map(|w| w.to_uppercase()).collect();
        match upper
            .iter()
            .map(String::as_str)
            .collect::<Vec<_>>()
            .as_slice()
        {
            [] => {}
            ["ANALYZE"] | ["ANALYZE", "TRUE" | "ON" | "1"] => analyze = true,
            ["ANALYZE", "FALSE" | "OFF" | "0"] => analyze = false,
            ["FORMAT", "TEXT"] => format = ExplainFormat::Text,
            ["FORMAT", "DOT"] => format = ExplainFormat::Dot,
            ["FORMAT", "JSON"] => format = ExplainFormat::Json,
            ["FORMAT", other] => {
                return Err(Error::NotSupported(format!(
                    "EXPLAIN of a materialized view prints FORMAT TEXT, DOT or JSON, not {other}"
                )));
            }
            [name, ..] if IGNORED.contains(name) => {}
            [name, ..] => {
                return Err(Error::Syntax(format!(
                    "unrecognized EXPLAIN option \"{}\"",
                    name.to_lowercase()
                )));
            }
        }
    }
    Ok((analyze, format))
}

#[cfg(test)]
mod tests {
    use super::super::parse;
    use super::*;

    fn running(sql: &str) -> (String, bool, ExplainFormat) {
        match parse(sql).expect("parses").remove(0) {
            Statement::ExplainRunning {
                name,
                analyze,
                format,
            } => (name, analyze, format),
            other => panic!("{sql}: {other:?}"),
        }
    }

    #[test]
    fn spellings() {
        assert_eq!(
            running("EXPLAIN ANALYZE MATERIALIZED VIEW v"),
            ("v".into(), true, ExplainFormat::Text)
        );
        assert_eq!(
            running("explain (analyze, format json) materialized view \"V\""),
            ("V".into(), true, ExplainFormat::Json)
        );
        assert_eq!(
            running("EXPLAIN (FORMAT DOT, VERBOSE) MATERIALIZED VIEW v"),
            ("v".into(), false, ExplainFormat::Dot)
        );
        assert_eq!(
            running("EXPLAIN ANALYZE (FORMAT JSON) MATERIALIZED VIEW v"),
            ("v".into(), true, ExplainFormat::Json)
        );
        assert!(matches!(
            parse("EXPLAIN (FORMAT JSON) CREATE MATERIALIZED VIEW v AS SELECT 1")
                .expect("parses")
                .remove(0),
            Statement::ExplainView {
                format: ExplainFormat::Json,
                ..
            }
        ));
    }

    #[test]
    fn refusals() {
        for (sql, state) in [
            ("EXPLAIN (FORMAT YAML) MATERIALIZED VIEW v", "0A000"),
            ("EXPLAIN (BOGUS) MATERIALIZED VIEW v", "42601"),
            (
                "EXPLAIN ANALYZE CREATE MATERIALIZED VIEW v AS SELECT 1",
                "0A000",
            ),
        ] {
            let e = parse(sql).expect_err(sql);
            assert_eq!(e.sqlstate(), state, "{sql}: {e}");
        }
    }
}
