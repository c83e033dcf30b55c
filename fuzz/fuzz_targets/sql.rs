//! Arbitrary statement text through weir's depth bound and sqlparser.
//!
//! Whatever the bound lets through must parse (or fail to), print, clone
//! and drop on a thread with the stack weir's statement threads get: a
//! statement the bound underrates would overflow it and abort the node.

#![no_main]

#[path = "../shim.rs"]
mod error;

#[allow(dead_code)]
#[path = "../../src/sql/parser/depth.rs"]
mod depth;

use libfuzzer_sys::fuzz_target;
use sqlparser::dialect::PostgreSqlDialect;
use sqlparser::parser::Parser;
use sqlparser::tokenizer::Tokenizer;

/// `config::STATEMENT_STACK_BYTES`.
const STACK: usize = 32 << 20;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(tokens) = Tokenizer::new(&PostgreSqlDialect {}, text).tokenize_with_location() else {
        return;
    };
    if depth::check(&tokens).is_err() {
        return;
    }
    let walk = move || {
        let parsed = Parser::new(&PostgreSqlDialect {})
            .with_tokens_with_locations(tokens)
            .parse_statements();
        if let Ok(statements) = parsed {
            let copy = statements.clone();
            for statement in &copy {
                let _ = statement.to_string();
            }
            let _ = format!("{statements:?}");
        }
    };
    std::thread::Builder::new()
        .stack_size(STACK)
        .spawn(walk)
        .expect("a thread")
        .join()
        .expect("no panic");
});
