//! `FETCH FIRST n ROWS ONLY` is the standard spelling of `LIMIT n`, which
//! PostgreSQL accepts and DataFusion's planner does not; it becomes the
//! LIMIT it means. `WITH TIES` and `PERCENT` keep more or fewer rows than a
//! LIMIT would, so they are refused (0A000) rather than answered otherwise.

use std::ops::ControlFlow;

use sqlparser::ast::{Expr, LimitClause, Query, Value, VisitMut, VisitorMut};

use crate::error::{Error, Result};

/// Turn every plain `FETCH FIRST` in `node` into a LIMIT.
pub fn as_limit<V: VisitMut>(node: &mut V) -> Result<()> {
    match node.visit(&mut AsLimit) {
        ControlFlow::Break(e) => Err(e),
        ControlFlow::Continue(()) => Ok(()),
    }
}

struct AsLimit;

impl VisitorMut for AsLimit {
    type Break = Error;

    fn pre_visit_query(&mut self, query: &mut Query) -> ControlFlow<Error> {
        let Some(fetch) = query.fetch.take() else {
            return ControlFlow::Continue(());
        };
        if fetch.with_ties || fetch.percent {
            let what = if fetch.with_ties {
                "WITH TIES"
            } else {
                "PERCENT"
            };
            return ControlFlow::Break(Error::NotSupported(format!(
                "FETCH FIRST ... {what} is not supported; write FETCH FIRST n ROWS ONLY or LIMIT n"
            )));
        }
        let count = fetch
            .quantity
            .unwrap_or_else(|| Expr::value(Value::Number("1".into(), false)));
        query.limit_clause = Some(match query.limit_clause.take() {
            Some(LimitClause::LimitOffset { offset, .. }) => LimitClause::LimitOffset {
                limit: Some(count),
                offset,
                limit_by: Vec::new(),
            },
            _ => LimitClause::LimitOffset {
                limit: Some(count),
                offset: None,
                limit_by: Vec::new(),
            },
        });
        ControlFlow::Continue(())
    }
}

#[cfg(test)]
mod tests {
    use sqlparser::dialect::PostgreSqlDialect;
    use sqlparser::parser::Parser;

    use super::*;

    fn rewritten(sql: &str) -> Result<String> {
        let mut query = Parser::new(&PostgreSqlDialect {})
            .try_with_sql(sql)?
            .parse_query()?;
        as_limit(&mut query)?;
        Ok(query.to_string())
    }

    #[test]
    fn fetch_first_is_a_limit() {
        assert_eq!(
            rewritten("SELECT a FROM t ORDER BY a FETCH FIRST 3 ROWS ONLY").expect("plain"),
            "SELECT a FROM t ORDER BY a LIMIT 3"
        );
        assert_eq!(
            rewritten("SELECT a FROM t OFFSET 2 ROWS FETCH NEXT ROW ONLY").expect("offset"),
            "SELECT a FROM t LIMIT 1 OFFSET 2 ROWS"
        );
    }

    #[test]
    fn ties_and_percent_are_refused() {
        for sql in [
            "SELECT a FROM t ORDER BY a FETCH FIRST 3 ROWS WITH TIES",
            "SELECT a FROM t FETCH FIRST 10 PERCENT ROWS ONLY",
        ] {
            assert_eq!(rewritten(sql).expect_err(sql).sqlstate(), "0A000");
        }
    }
}
