//! `a ASOF [LEFT [OUTER]] JOIN b ON cond` becomes `a [LEFT] JOIN b ON
//! weir_asof_match((cond))`: a join DataFusion plans as any other, whose
//! condition reaches weir's planners whole (see `dataflow::asof`).
//! sqlparser reads only Snowflake's `ASOF JOIN … MATCH_CONDITION (…)`.

use sqlparser::tokenizer::{Token, TokenWithSpan};

use super::{is_space, is_word};
use crate::dataflow::asof::MARKER;

/// Words that end a join condition when met outside parentheses.
const ENDS: [&str; 19] = [
    "WHERE",
    "GROUP",
    "HAVING",
    "ORDER",
    "LIMIT",
    "OFFSET",
    "UNION",
    "EXCEPT",
    "INTERSECT",
    "WINDOW",
    "EMIT",
    "JOIN",
    "INNER",
    "LEFT",
    "RIGHT",
    "FULL",
    "CROSS",
    "NATURAL",
    "ASOF",
];

/// Every as-of join in `tokens` rewritten; anything else left as it is.
pub fn rewrite(mut tokens: Vec<TokenWithSpan>) -> Vec<TokenWithSpan> {
    let mut from = 0;
    while let Some(at) = (from..tokens.len()).find(|i| is_word(&tokens[*i].token, "ASOF")) {
        match rewrite_one(&tokens, at) {
            Some(rewritten) => tokens = rewritten,
            None => from = at + 1,
        }
    }
    tokens
}

/// The tokens with the as-of join starting at `at` rewritten, if it is one.
fn rewrite_one(tokens: &[TokenWithSpan], at: usize) -> Option<Vec<TokenWithSpan>> {
    let solid = |from: usize| (from..tokens.len()).find(|i| !is_space(&tokens[*i].token));
    let mut next = solid(at + 1)?;
    let left = is_word(&tokens[next].token, "LEFT");
    if left {
        next = solid(next + 1)?;
        if is_word(&tokens[next].token, "OUTER") {
            next = solid(next + 1)?;
        }
    }
    if !is_word(&tokens[next].token, "JOIN") {
        return None;
    }
    let on = top_level(tokens, next + 1, |t| is_word(t, "ON"))?;
    let end = condition_end(tokens, on + 1);
    let span = tokens[at].span;
    let token = |t: Token| TokenWithSpan::new(t, span);
    let space = || token(Token::Whitespace(sqlparser::tokenizer::Whitespace::Space));
    let mut out: Vec<TokenWithSpan> = tokens[..at].to_vec();
    if left {
        out.extend([token(Token::make_keyword("LEFT")), space()]);
    }
    out.extend(tokens[next..=on].iter().cloned());
    out.extend([
        space(),
        token(Token::make_word(MARKER, None)),
        token(Token::LParen),
        token(Token::LParen),
    ]);
    out.extend(tokens[on + 1..end].iter().cloned());
    out.extend([token(Token::RParen), token(Token::RParen), space()]);
    out.extend(tokens[end..].iter().cloned());
    Some(out)
}

/// The first token from `from` on that satisfies `wanted` outside
/// parentheses opened after `from`.
fn top_level(
    tokens: &[TokenWithSpan],
    from: usize,
    wanted: impl Fn(&Token) -> bool,
) -> Option<usize> {
    let mut depth = 0i32;
    for (i, t) in tokens.iter().enumerate().skip(from) {
        match t.token {
            Token::LParen => depth += 1,
            Token::RParen if depth == 0 => return None,
            Token::RParen => depth -= 1,
            _ if depth == 0 && wanted(&t.token) => return Some(i),
            _ => {}
        }
    }
    None
}

/// Where the condition starting at `from` ends: at a word that starts the
/// next clause, a comma or a closing parenthesis outside its own
/// parentheses, or the end.
fn condition_end(tokens: &[TokenWithSpan], from: usize) -> usize {
    let mut depth = 0i32;
    for (i, t) in tokens.iter().enumerate().skip(from) {
        match &t.token {
            Token::LParen => depth += 1,
            Token::RParen if depth == 0 => return i,
            Token::RParen => depth -= 1,
            Token::Comma if depth == 0 => return i,
            Token::SemiColon | Token::EOF => return i,
            word if depth == 0 && ENDS.iter().any(|w| is_word(word, w)) => return i,
            _ => {}
        }
    }
    tokens.len()
}

#[cfg(test)]
mod tests {
    use sqlparser::dialect::PostgreSqlDialect;
    use sqlparser::tokenizer::Tokenizer;

    fn rewritten(sql: &str) -> String {
        let tokens = Tokenizer::new(&PostgreSqlDialect {}, sql)
            .tokenize_with_location()
            .expect("tokens");
        let out: String = super::rewrite(tokens)
            .iter()
            .map(|t| t.token.to_string())
            .collect();
        out.split_whitespace()
            .collect::<Vec<_>>()
            .join(" ")
            .replace("( ", "(")
            .replace(" )", ")")
    }

    #[test]
    fn asof_joins_become_marked_joins() {
        assert_eq!(
            rewritten("SELECT * FROM a ASOF JOIN b ON a.k = b.k AND a.t <= b.t WHERE a.x > 1"),
            "SELECT * FROM a JOIN b ON weir_asof_match((a.k = b.k AND a.t <= b.t)) WHERE a.x > 1"
        );
        assert_eq!(
            rewritten("SELECT * FROM (a asof left outer join b on (a.k = b.k) and a.t > b.t)"),
            "SELECT * FROM (a LEFT join b on weir_asof_match(((a.k = b.k) and a.t > b.t)))"
        );
        assert_eq!(
            rewritten("SELECT 1 FROM a ASOF JOIN b ON a.k = b.k AND a.t < b.t JOIN c ON c.k = a.k"),
            "SELECT 1 FROM a JOIN b ON weir_asof_match((a.k = b.k AND a.t < b.t)) JOIN c ON c.k = a.k"
        );
    }

    #[test]
    fn other_uses_of_the_word_are_left_alone() {
        assert_eq!(rewritten("SELECT asof FROM t"), "SELECT asof FROM t");
        assert_eq!(
            rewritten("SELECT * FROM a ASOF JOIN b USING (k)"),
            "SELECT * FROM a ASOF JOIN b USING (k)"
        );
    }
}
