//! `FETCH FIRST n ROWS ONLY` is the standard spelling of `LIMIT n`, which
//! PostgreSQL accepts and DataFusion's planner does not; it becomes the
//! LIMIT it means. `WITH TIES` keeps the rows tied with the last, through
//! a rank (see [`with_ties`]); `PERCENT` is refused (0A000) rather than
//! answered otherwise.

use std::ops::ControlFlow;

use sqlparser::ast::{
    Expr, Ident, LimitClause, OrderBy, OrderByKind, Query, SelectItem, SetExpr, Value, VisitMut,
    VisitorMut,
};

use crate::error::{Error, Result};
use crate::sql::colnames::{figure, folded};

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
        if fetch.percent {
            return ControlFlow::Break(Error::NotSupported(
                "FETCH FIRST ... PERCENT is not supported; write FETCH FIRST n ROWS ONLY or LIMIT n"
                    .into(),
            ));
        }
        if fetch.with_ties {
            return match with_ties(query, fetch.quantity) {
                Ok(()) => ControlFlow::Continue(()),
                Err(e) => ControlFlow::Break(e),
            };
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

/// `ORDER BY k FETCH FIRST n ROWS WITH TIES` keeps the rows ranked `n` or
/// better by `k`, which is what it becomes: `SELECT t0 AS a, ... FROM
/// (SELECT a AS t0, ..., rank() OVER (ORDER BY k) AS r ...) WHERE r <= n
/// ORDER BY r`. The rank is computed where the ORDER BY was, with its
/// output names and positions put back as the expressions they name.
fn with_ties(query: &mut Query, quantity: Option<Expr>) -> Result<()> {
    const RANK: &str = "__weir_rank";
    let Some(OrderBy {
        kind: OrderByKind::Expressions(keys),
        ..
    }) = query.order_by.take()
    else {
        return Err(Error::Syntax(
            "WITH TIES cannot be specified without ORDER BY clause".into(),
        ));
    };
    if query.limit_clause.is_some() {
        return Err(Error::NotSupported(
            "FETCH FIRST ... WITH TIES after OFFSET is not supported".into(),
        ));
    }
    let SetExpr::Select(select) = query.body.as_mut() else {
        return Err(Error::NotSupported(
            "FETCH FIRST ... WITH TIES of a set operation is not supported; wrap it in a subquery"
                .into(),
        ));
    };
    let mut outputs = Vec::new();
    for (i, item) in select.projection.iter_mut().enumerate() {
        let (expr, name) = match item {
            SelectItem::UnnamedExpr(expr) => (expr.clone(), figure(expr).0),
            SelectItem::ExprWithAlias { expr, alias } => (expr.clone(), folded(alias)),
            _ => {
                return Err(Error::NotSupported(
                    "FETCH FIRST ... WITH TIES needs its columns listed, not *".into(),
                ));
            }
        };
        let alias = format!("__weir_tie_{i}");
        *item = SelectItem::ExprWithAlias {
            expr: expr.clone(),
            alias: Ident::new(&alias),
        };
        outputs.push((expr, name, alias));
    }
    let order = keys
        .iter()
        .map(|key| {
            let mut key = key.clone();
            key.expr = named_key(&key.expr, &outputs);
            key.to_string()
        })
        .collect::<Vec<_>>()
        .join(", ");
    let rank = parse(&format!("SELECT rank() OVER (ORDER BY {order}) AS {RANK}"))?;
    let SetExpr::Select(rank) = *rank.body else {
        return Err(Error::Internal("rank() did not parse as a select".into()));
    };
    select.projection.extend(rank.projection);
    let columns = outputs
        .iter()
        .map(|(_, name, alias)| format!("{alias} AS {}", Ident::with_quote('"', name)))
        .collect::<Vec<_>>()
        .join(", ");
    let count = quantity.unwrap_or_else(|| Expr::value(Value::Number("1".into(), false)));
    let outer = parse(&format!(
        "SELECT {columns} FROM ({}) AS __weir_ranked WHERE {RANK} <= {count} ORDER BY {RANK}",
        query.body
    ))?;
    query.body = outer.body;
    query.order_by = outer.order_by;
    Ok(())
}

/// An ORDER BY key as an expression over the select's input: an output
/// name or position becomes the expression it names.
fn named_key(key: &Expr, outputs: &[(Expr, String, String)]) -> Expr {
    match key {
        Expr::Value(v) => match &v.value {
            Value::Number(n, _) => n
                .parse::<usize>()
                .ok()
                .and_then(|n| outputs.get(n.wrapping_sub(1)))
                .map_or_else(|| key.clone(), |(expr, _, _)| expr.clone()),
            _ => key.clone(),
        },
        Expr::Identifier(ident) => outputs
            .iter()
            .find(|(_, name, _)| *name == folded(ident))
            .map_or_else(|| key.clone(), |(expr, _, _)| expr.clone()),
        _ => key.clone(),
    }
}

fn parse(sql: &str) -> Result<Query> {
    let dialect = sqlparser::dialect::GenericDialect {};
    match sqlparser::parser::Parser::parse_sql(&dialect, sql)?.pop() {
        Some(sqlparser::ast::Statement::Query(query)) => Ok(*query),
        _ => Err(Error::Internal(format!("not a query: {sql}"))),
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
    fn ties_become_a_rank_and_percent_is_refused() {
        assert_eq!(
            rewritten("SELECT a FROM t ORDER BY a FETCH FIRST 3 ROWS WITH TIES").expect("ties"),
            "SELECT __weir_tie_0 AS \"a\" FROM (SELECT a AS __weir_tie_0, rank() OVER (ORDER BY a) \
             AS __weir_rank FROM t) AS __weir_ranked WHERE __weir_rank <= 3 ORDER BY __weir_rank"
        );
        let percent = "SELECT a FROM t FETCH FIRST 10 PERCENT ROWS ONLY";
        assert_eq!(rewritten(percent).expect_err(percent).sqlstate(), "0A000");
        let unordered = "SELECT a FROM t FETCH FIRST 3 ROWS WITH TIES";
        assert_eq!(
            rewritten(unordered).expect_err(unordered).sqlstate(),
            "42601"
        );
    }
}
