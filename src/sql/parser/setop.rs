//! `EXCEPT ALL` and `INTERSECT ALL` count copies in PostgreSQL: a row held
//! m times by the left query and n times by the right stays max(m - n, 0)
//! or min(m, n) times. DataFusion's plans drop or keep every copy instead,
//! so both are refused (0A000) rather than answered differently; without
//! `ALL` they are the same in both.

use std::ops::ControlFlow;

use sqlparser::ast::{Query, SetExpr, SetOperator, SetQuantifier, Visit, Visitor};

use crate::error::{Error, Result};

/// Refuse the first `EXCEPT ALL` or `INTERSECT ALL` in `node`.
pub fn refuse_counted<V: Visit>(node: &V) -> Result<()> {
    match node.visit(&mut Counted) {
        ControlFlow::Break(e) => Err(e),
        ControlFlow::Continue(()) => Ok(()),
    }
}

struct Counted;

impl Visitor for Counted {
    type Break = Error;

    fn pre_visit_query(&mut self, query: &Query) -> ControlFlow<Error> {
        match counted(&query.body) {
            Some(op) => ControlFlow::Break(Error::NotSupported(format!(
                "{op} ALL is not supported; write {op}, which keeps each distinct row once"
            ))),
            None => ControlFlow::Continue(()),
        }
    }
}

fn counted(body: &SetExpr) -> Option<&'static str> {
    let SetExpr::SetOperation {
        op,
        set_quantifier,
        left,
        right,
    } = body
    else {
        return None;
    };
    let all = matches!(
        set_quantifier,
        SetQuantifier::All | SetQuantifier::AllByName
    );
    match op {
        SetOperator::Except if all => Some("EXCEPT"),
        SetOperator::Intersect if all => Some("INTERSECT"),
        _ => counted(left).or_else(|| counted(right)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(sql: &str) -> Result<()> {
        let statements =
            sqlparser::parser::Parser::parse_sql(&sqlparser::dialect::PostgreSqlDialect {}, sql)
                .expect("parses");
        refuse_counted(&statements)
    }

    #[test]
    fn only_counted_set_operations_are_refused() {
        assert!(check("SELECT 1 EXCEPT SELECT 2").is_ok());
        assert!(check("SELECT 1 INTERSECT SELECT 2").is_ok());
        assert!(check("SELECT 1 UNION ALL SELECT 2").is_ok());
        assert!(check("SELECT 1 EXCEPT ALL SELECT 2").is_err());
        assert!(check("SELECT 1 UNION SELECT 1 INTERSECT ALL SELECT 2").is_err());
        assert!(check("SELECT * FROM (SELECT 1 EXCEPT ALL SELECT 2) AS t").is_err());
    }
}
