//! How deep a statement's expressions can be, judged from its tokens before
//! any syntax tree exists.
//!
//! `sqlparser` limits nesting (parentheses, prefix operators) by recursion,
//! but builds a chain of infix operators (`1 + 1 + … + 1`, `a OR b OR …`)
//! in a loop, so a long chain becomes a tree as deep as the chain is long.
//! Everything after the parser walks such a tree recursively — planning,
//! cloning, even dropping it — and a deep enough one overflows the thread's
//! stack, which aborts the whole process. Measuring the tree would itself
//! recurse, so the bound comes from the tokens: within one expression, each
//! level of a chain takes at least one token, so the tokens between two
//! separators at one nesting level, plus the deepest group nested inside
//! them, bound the depth of the tree they become.

use sqlparser::tokenizer::{Token, TokenWithSpan};

use crate::error::{Error, Result};

/// The deepest expression a statement may hold, counted in tokens (a chain
/// of `1 + 1` may be about 1,000 terms long, of `a = 1 OR` about 500).
/// Statement work runs on threads whose stack holds trees this deep
/// ([`crate::config::STATEMENT_STACK_BYTES`]). PostgreSQL's default
/// `max_stack_depth` refuses a chain of about 4,500 additions; weir stops
/// earlier because DataFusion types a chain in time quadratic in its
/// length, and a statement plans on its connection's thread.
pub const MAX_DEPTH: usize = 2_000;

/// One nesting level: a parenthesised group, a bracket or a CASE.
#[derive(Default)]
struct Level {
    /// Tokens since this level's last separator.
    tokens: usize,
    /// The deepest group closed since this level's last separator.
    inner: usize,
    /// The deepest element this level has held.
    deepest: usize,
}

impl Level {
    fn element(&self) -> usize {
        self.tokens + self.inner + 1
    }

    fn separate(&mut self) {
        self.deepest = self.deepest.max(self.element());
        self.tokens = 0;
        self.inner = 0;
    }

    /// The depth of the whole group.
    fn close(mut self) -> usize {
        self.separate();
        self.deepest + 1
    }
}

/// Refuse a statement whose expressions could be deeper than [`MAX_DEPTH`]
/// with SQLSTATE 54001, as PostgreSQL refuses one that exceeds its stack.
pub fn check(tokens: &[TokenWithSpan]) -> Result<()> {
    let depth = bound(tokens);
    if depth > MAX_DEPTH {
        return Err(Error::TooComplex(format!(
            "statement too complex: an expression is chained or nested about {depth} levels deep, \
             more than the {MAX_DEPTH} weir allows"
        )));
    }
    Ok(())
}

/// An upper bound on the depth of the statement's syntax tree.
fn bound(tokens: &[TokenWithSpan]) -> usize {
    let mut levels = vec![Level::default()];
    let mut previous: Option<&Token> = None;
    for token in tokens.iter().map(|t| &t.token) {
        if matches!(token, Token::Whitespace(_)) {
            continue;
        }
        match Role::of(token, previous) {
            Role::Open => levels.push(Level::default()),
            Role::Close if levels.len() > 1 => close_group(&mut levels),
            Role::Separator => levels.last_mut().expect("never empty").separate(),
            Role::Close | Role::Term => levels.last_mut().expect("never empty").tokens += 1,
        }
        previous = Some(token);
    }
    while levels.len() > 1 {
        close_group(&mut levels);
    }
    levels.pop().map_or(0, Level::close)
}

/// The innermost group ends: its depth counts in the level around it.
fn close_group(levels: &mut Vec<Level>) {
    let group = levels.pop().expect("more than one level").close();
    let top = levels.last_mut().expect("the outermost level stays");
    top.inner = top.inner.max(group);
}

/// What a token does to the nesting.
enum Role {
    Open,
    Close,
    /// Ends one expression at its level; what follows is a sibling.
    Separator,
    Term,
}

impl Role {
    fn of(token: &Token, previous: Option<&Token>) -> Role {
        match token {
            Token::LParen | Token::LBracket | Token::LBrace => Role::Open,
            Token::RParen | Token::RBracket | Token::RBrace => Role::Close,
            Token::Comma => Role::Separator,
            Token::Word(word) if word.quote_style.is_none() => {
                keyword_role(&word.value.to_ascii_uppercase(), previous)
            }
            _ => Role::Term,
        }
    }
}

/// Keywords that open or close an expression of their own (CASE … END) or
/// start a clause, which no infix operator chain runs through.
fn keyword_role(word: &str, previous: Option<&Token>) -> Role {
    match word {
        "CASE" => Role::Open,
        "END" => Role::Close,
        // `a IS DISTINCT FROM b` is an operator, and chains like any other.
        "FROM" if is_word(previous, "DISTINCT") => Role::Term,
        "SELECT" | "FROM" | "WHERE" | "GROUP" | "HAVING" | "ORDER" | "LIMIT" | "OFFSET"
        | "JOIN" | "ON" | "USING" | "VALUES" | "SET" | "RETURNING" | "UNION" | "EXCEPT"
        | "INTERSECT" | "WINDOW" | "WHEN" | "THEN" | "ELSE" => Role::Separator,
        _ => Role::Term,
    }
}

fn is_word(token: Option<&Token>, expected: &str) -> bool {
    matches!(token, Some(Token::Word(w)) if w.value.eq_ignore_ascii_case(expected))
}

#[cfg(test)]
mod tests {
    use sqlparser::dialect::PostgreSqlDialect;
    use sqlparser::tokenizer::Tokenizer;

    use super::*;

    fn depth(sql: &str) -> usize {
        let tokens = Tokenizer::new(&PostgreSqlDialect {}, sql)
            .tokenize_with_location()
            .expect("tokens");
        bound(&tokens)
    }

    fn chain(operator: &str, terms: usize) -> String {
        vec!["1"; terms].join(operator)
    }

    #[test]
    fn a_chain_counts_every_link() {
        let short = depth(&format!("SELECT {}", chain(" + ", 10)));
        let long = depth(&format!("SELECT {}", chain(" + ", 1000)));
        assert!(long >= 1000, "{long}");
        assert!(long > short * 50, "{short} {long}");
    }

    #[test]
    fn lists_and_clauses_are_siblings_not_links() {
        let values: Vec<String> = (0..5000).map(|i| format!("({i}, 'x{i}', -{i})")).collect();
        let insert = format!("INSERT INTO t VALUES {}", values.join(", "));
        assert!(depth(&insert) < 20, "{}", depth(&insert));
        let list = format!("SELECT * FROM t WHERE a IN ({})", chain(", ", 20_000));
        assert!(depth(&list) < 20, "{}", depth(&list));
        let case: String = (0..3000)
            .map(|i| format!(" WHEN a = {i} THEN {i}"))
            .collect();
        assert!(depth(&format!("SELECT CASE{case} END FROM t")) < 20);
    }

    #[test]
    fn nesting_adds_to_the_chain_around_it() {
        let inner = chain(" + ", 100);
        let nested = depth(&format!("SELECT 1 + (1 + ({inner}))"));
        assert!(nested >= depth(&format!("SELECT {inner}")) + 2);
    }

    #[test]
    fn distinct_from_chains_like_an_operator() {
        let link = " IS DISTINCT FROM 1";
        let chained = depth(&format!("SELECT 1{}", link.repeat(500)));
        assert!(chained >= 500, "{chained}");
    }

    #[test]
    fn unbalanced_groups_do_not_panic() {
        assert!(depth(") ) ( ( ( END END CASE") > 0);
        assert!(depth("") > 0);
    }

    #[test]
    fn too_deep_is_statement_too_complex() {
        let tokens = Tokenizer::new(
            &PostgreSqlDialect {},
            &format!("SELECT {}", chain("+", 1_001)),
        )
        .tokenize_with_location()
        .expect("tokens");
        let e = check(&tokens).expect_err("too deep");
        assert_eq!(e.sqlstate(), "54001");
    }
}
