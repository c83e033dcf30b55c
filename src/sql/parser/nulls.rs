//! `first_value(v IGNORE NULLS) OVER (...)`: RisingWave (like BigQuery)
//! takes the null treatment inside the call's parentheses; sqlparser's
//! PostgreSQL dialect takes it only after them, where the SQL standard
//! puts it (`first_value(v) IGNORE NULLS OVER (...)`). The words move to
//! after the closing parenthesis, and DataFusion's window functions carry
//! them out.

use sqlparser::tokenizer::{Token, TokenWithSpan};

use super::{is_space, is_word};

pub fn after_arguments(tokens: Vec<TokenWithSpan>) -> Vec<TokenWithSpan> {
    let mut out: Vec<TokenWithSpan> = Vec::with_capacity(tokens.len());
    let mut moved: Vec<TokenWithSpan> = Vec::new();
    let mut i = 0;
    while i < tokens.len() {
        if let Some((words, next)) = null_treatment_before_paren(&tokens, i) {
            // The words wait for the parenthesis, each with a space before it.
            moved = words;
            i = next;
            continue;
        }
        let closing = tokens[i].token == Token::RParen;
        out.push(tokens[i].clone());
        if closing && !moved.is_empty() {
            for word in moved.drain(..) {
                out.push(TokenWithSpan::new(
                    Token::Whitespace(sqlparser::tokenizer::Whitespace::Space),
                    word.span,
                ));
                out.push(word);
            }
        }
        i += 1;
    }
    out
}

/// `IGNORE NULLS` or `RESPECT NULLS` at `at`, then only spaces before a
/// closing parenthesis: the two words, and where the parenthesis is.
fn null_treatment_before_paren(
    tokens: &[TokenWithSpan],
    at: usize,
) -> Option<(Vec<TokenWithSpan>, usize)> {
    let first = &tokens[at];
    if !is_word(&first.token, "IGNORE") && !is_word(&first.token, "RESPECT") {
        return None;
    }
    let next_solid = |from: usize| (from..tokens.len()).find(|&j| !is_space(&tokens[j].token));
    let nulls = next_solid(at + 1)?;
    if !is_word(&tokens[nulls].token, "NULLS") {
        return None;
    }
    let paren = next_solid(nulls + 1)?;
    if tokens[paren].token != Token::RParen {
        return None;
    }
    Some((vec![first.clone(), tokens[nulls].clone()], paren))
}

#[cfg(test)]
mod tests {
    use super::super::Statement;
    use super::super::parse;

    #[test]
    fn the_words_move_after_the_arguments() {
        let Statement::Query(query) = parse(
            "SELECT first_value(v IGNORE NULLS) OVER (ORDER BY t), lag(v respect nulls) OVER (ORDER BY t) FROM x",
        )
        .expect("parses")
        .remove(0) else {
            panic!("a query");
        };
        let text = query.to_string();
        assert!(text.contains("first_value(v) IGNORE NULLS OVER"), "{text}");
        assert!(text.contains("lag(v) RESPECT NULLS OVER"), "{text}");
    }

    #[test]
    fn words_elsewhere_stay() {
        // A column named ignore, and the standard's own spelling.
        for sql in [
            "SELECT ignore FROM x",
            "SELECT first_value(v) IGNORE NULLS OVER (ORDER BY t) FROM x",
        ] {
            parse(sql).expect(sql);
        }
    }
}
