//! Views over rows the query itself spells out: `VALUES (...)`, and
//! `SELECT` without FROM (`SELECT random()`, `SELECT min(1)`).
//!
//! A view's dataflow is fed by the topics of what it reads, and a constant
//! reads no topic. So each constant part of the query is kept in a table of
//! its own, written once when the view is created, and the view reads that
//! table instead: its rows are durable and replayed like any other input,
//! and a restarted view sees them exactly once. The tables are weir's
//! (`catalog::is_constant_table`): left out of listings, closed to writes, and
//! dropped with their view.

use std::ops::ControlFlow;

use datafusion::common::tree_node::TreeNode;
use datafusion::logical_expr::LogicalPlan;
use sqlparser::ast::{Query, SetExpr, TableWithJoins, VisitMut, VisitorMut};
use sqlparser::dialect::PostgreSqlDialect;
use sqlparser::parser::Parser;

use crate::error::{Error, Result};

/// Whether a planned view reads rows that come from no table.
pub fn reads_constants(plan: &LogicalPlan) -> bool {
    plan.exists(|node| {
        Ok(matches!(node, LogicalPlan::Values(_))
            || matches!(node, LogicalPlan::EmptyRelation(e) if e.produce_one_row))
    })
    .unwrap_or(false)
}

/// One constant part of a query, moved out into a table.
#[derive(Debug)]
pub struct Constant {
    /// The table that now stands in its place.
    pub table: String,
    /// The `VALUES` whose rows the table must hold; `None` for a SELECT
    /// without FROM, which now reads one row with no columns it uses.
    pub values: Option<Box<Query>>,
}

/// Replace each constant part of `query` with a read of a new table, named
/// by `name`; returns what each table must hold.
pub fn lift(query: &mut Query, name: &mut dyn FnMut() -> Result<String>) -> Result<Vec<Constant>> {
    let mut lifting = Lifting {
        name,
        lifted: Vec::new(),
    };
    match query.visit(&mut lifting) {
        ControlFlow::Break(e) => Err(e),
        ControlFlow::Continue(()) => Ok(lifting.lifted),
    }
}

struct Lifting<'a> {
    name: &'a mut dyn FnMut() -> Result<String>,
    lifted: Vec<Constant>,
}

impl VisitorMut for Lifting<'_> {
    type Break = Error;

    fn pre_visit_query(&mut self, query: &mut Query) -> ControlFlow<Error> {
        match self.lift_set(&mut query.body) {
            Ok(()) => ControlFlow::Continue(()),
            Err(e) => ControlFlow::Break(e),
        }
    }
}

impl Lifting<'_> {
    /// Nested queries are visited on their own, so only this level's
    /// selects, VALUES and set operations are looked at here.
    fn lift_set(&mut self, body: &mut SetExpr) -> Result<()> {
        match body {
            SetExpr::Values(_) => {
                let table = (self.name)()?;
                let reading = read_all(&table)?;
                let values = std::mem::replace(body, reading);
                self.lifted.push(Constant {
                    table,
                    values: Some(as_query(values)?),
                });
            }
            SetExpr::Select(select) if select.from.is_empty() => {
                let table = (self.name)()?;
                select.from = from(&table)?;
                self.lifted.push(Constant {
                    table,
                    values: None,
                });
            }
            SetExpr::SetOperation { left, right, .. } => {
                self.lift_set(left)?;
                self.lift_set(right)?;
            }
            _ => {}
        }
        Ok(())
    }
}

fn parse(sql: &str) -> Result<Box<Query>> {
    Ok(Parser::new(&PostgreSqlDialect {})
        .try_with_sql(sql)?
        .parse_query()?)
}

fn read_all(table: &str) -> Result<SetExpr> {
    Ok(*parse(&format!("SELECT * FROM {table}"))?.body)
}

fn from(table: &str) -> Result<Vec<TableWithJoins>> {
    match *parse(&format!("SELECT 1 FROM {table}"))?.body {
        SetExpr::Select(select) => Ok(select.from),
        _ => Err(Error::Internal("a parsed SELECT is not a select".into())),
    }
}

fn as_query(body: SetExpr) -> Result<Box<Query>> {
    let mut query = parse("VALUES (1)")?;
    *query.body = body;
    Ok(query)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lifted(sql: &str) -> (String, Vec<Constant>) {
        let mut query = parse(sql).expect("parses");
        let mut n = 0;
        let constants = lift(&mut query, &mut || {
            n += 1;
            Ok(crate::catalog::constant_table_name(n))
        })
        .expect("lifts");
        (query.to_string(), constants)
    }

    #[test]
    fn values_become_reads_of_their_table() {
        let (sql, constants) = lifted(
            "WITH dict(abbr, name) AS (VALUES ('cn', 'China')) \
             SELECT * FROM t JOIN dict ON t.c = dict.name",
        );
        assert_eq!(
            sql,
            "WITH dict (abbr, name) AS (SELECT * FROM _weir_constant_1) \
             SELECT * FROM t JOIN dict ON t.c = dict.name"
        );
        assert_eq!(constants.len(), 1);
        assert_eq!(
            constants[0].values.as_ref().map(|q| q.to_string()),
            Some("VALUES ('cn', 'China')".to_string())
        );
    }

    #[test]
    fn a_select_without_from_reads_one_row() {
        let (sql, constants) = lifted("SELECT 1 AS a UNION ALL SELECT b FROM t");
        assert_eq!(
            sql,
            "SELECT 1 AS a FROM _weir_constant_1 UNION ALL SELECT b FROM t"
        );
        assert!(constants[0].values.is_none());
    }
}
