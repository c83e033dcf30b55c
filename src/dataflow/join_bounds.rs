//! When a join's state may forget rows: interval joins and window joins.
//!
//! An interval join compares the two sides' event-time columns in its `ON`
//! clause (`a.ts BETWEEN b.ts - INTERVAL '1' HOUR AND b.ts`, or the same with
//! `<`, `<=`, `>`, `>=`). Each comparison `x + c1 <= y + c2` says a row `y`
//! can only match rows `x <= y + (c2 - c1)`; rows still to come on x's side
//! are at or past the watermark, so `y` is done once `y + (c2 - c1)` falls
//! behind it. A window join equates the two sides' window bounds: a row is
//! done once its window is final.
//!
//! Only the inputs' event-time columns (those a `WATERMARK FOR` is declared
//! on, or the bounds of a window over them) count: the watermark says
//! nothing about any other column.

use datafusion::logical_expr::utils::split_conjunction;
use datafusion::logical_expr::{BinaryExpr, Expr, LogicalPlan, Operator as Op};
use datafusion::logical_expr::{Join, expr::Between};

use crate::catalog::Catalog;
use crate::dataflow::operators::join::Expiry;
use crate::dataflow::window::{WINDOW_END, day_time_micros};
use crate::sql::window::{bound_of, trace_column, window_of};

/// How long each side's rows live, if the join is an interval or a window
/// join; `None` for a regular join, whose state is kept in full.
pub fn expiry(catalog: &Catalog, j: &Join) -> Option<[Expiry; 2]> {
    window_join(j).or_else(|| interval_join(catalog, j))
}

/// Both sides windowed alike and equated on a window bound.
fn window_join(j: &Join) -> Option<[Expiry; 2]> {
    j.on.iter().find_map(|(left, right)| {
        let (Expr::Column(l), Expr::Column(r)) = (left, right) else {
            return None;
        };
        let (lt, li) = trace_column(&j.left, l)?;
        let (rt, ri) = trace_column(&j.right, r)?;
        let bound = bound_of(&lt, li)?;
        if bound_of(&rt, ri) != Some(bound) || lt.spec.kind != rt.spec.kind {
            return None;
        }
        // Kept while the window is open: end > watermark.
        let keep = match bound {
            WINDOW_END => -1,
            _ => lt.spec.kind.longest()? - 1,
        };
        let side = |plan: &LogicalPlan, c| {
            Some(Expiry {
                column: plan.schema().index_of_column(c).ok()?,
                keep,
                drop_late: false,
            })
        };
        Some([side(&j.left, l)?, side(&j.right, r)?])
    })
}

/// `column + offset` on one side of the join.
struct Term {
    side: usize,
    column: usize,
    offset: i64,
}

fn interval_join(catalog: &Catalog, j: &Join) -> Option<[Expiry; 2]> {
    let mut keep: [Option<(usize, i64)>; 2] = [None, None];
    for conjunct in split_conjunction(j.filter.as_ref()?) {
        let comparisons = match conjunct {
            Expr::Between(Between {
                expr,
                negated: false,
                low,
                high,
            }) => vec![(expr, Op::GtEq, low), (expr, Op::LtEq, high)],
            Expr::BinaryExpr(BinaryExpr { left, op, right }) => vec![(left, *op, right)],
            _ => continue,
        };
        for (lhs, op, rhs) in comparisons {
            let (Some(x), Some(y)) = (term(catalog, j, lhs), term(catalog, j, rhs)) else {
                continue;
            };
            if x.side == y.side {
                continue;
            }
            // x + c1 op y + c2  <=>  x - y op d
            let d = y.offset - x.offset;
            let (side, column, limit) = match op {
                // x <= y + d: a y row is done once y + d is behind.
                Op::Lt | Op::LtEq => (y.side, y.column, d),
                // y <= x - d: an x row is done once x - d is behind.
                Op::Gt | Op::GtEq => (x.side, x.column, -d),
                _ => continue,
            };
            keep[side] = match keep[side] {
                None => Some((column, limit)),
                Some((c, k)) if c == column => Some((c, k.min(limit))),
                // Two time columns on one side: not an interval join we know.
                Some(_) => return None,
            };
        }
    }
    let side = |k: Option<(usize, i64)>| {
        k.map(|(column, keep)| Expiry {
            column,
            keep,
            drop_late: true,
        })
    };
    Some([side(keep[0])?, side(keep[1])?])
}

/// An event-time column of either side, plus or minus a constant interval.
fn term(catalog: &Catalog, j: &Join, expr: &Expr) -> Option<Term> {
    match expr {
        Expr::Column(c) => {
            let (side, plan) = if j.left.schema().has_column(c) {
                (0, &j.left)
            } else {
                (1, &j.right)
            };
            let column = plan.schema().index_of_column(c).ok()?;
            event_time(catalog, plan, column).then_some(Term {
                side,
                column,
                offset: 0,
            })
        }
        Expr::BinaryExpr(BinaryExpr { left, op, right }) => {
            let Expr::Literal(value, _) = right.as_ref() else {
                return None;
            };
            let micros = day_time_micros(value).or(match value {
                datafusion::common::ScalarValue::DurationMicrosecond(Some(v)) => Some(*v),
                _ => None,
            })?;
            let mut term = term(catalog, j, left)?;
            term.offset += match op {
                Op::Plus => micros,
                Op::Minus => -micros,
                _ => return None,
            };
            Some(term)
        }
        _ => None,
    }
}

/// Whether column `index` of `plan` is a relation's event time: the column
/// its `WATERMARK FOR` is declared on, passed through unchanged.
fn event_time(catalog: &Catalog, plan: &LogicalPlan, index: usize) -> bool {
    match plan {
        LogicalPlan::TableScan(scan) => {
            let at = scan.projection.as_ref().map_or(index, |p| p[index]);
            let table = match window_of(scan) {
                Some(window) => {
                    if at != window.spec.time_column {
                        return false;
                    }
                    window.relation.clone()
                }
                None => match catalog.relation(scan.table_name.table()) {
                    Some(table) => table,
                    None => return false,
                },
            };
            let name = table.schema.field(at).name();
            table
                .def
                .watermark
                .as_ref()
                .is_some_and(|w| &w.column == name)
        }
        LogicalPlan::Projection(p) => match p.expr[index].clone().unalias() {
            Expr::Column(c) => p
                .input
                .schema()
                .index_of_column(&c)
                .is_ok_and(|i| event_time(catalog, &p.input, i)),
            _ => false,
        },
        LogicalPlan::SubqueryAlias(a) => event_time(catalog, &a.input, index),
        LogicalPlan::Filter(f) => event_time(catalog, &f.input, index),
        _ => false,
    }
}
