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
//! In `x + c1 <= y + c2`, only `x` must be event time: a column a
//! `WATERMARK FOR` is declared on, the `window_end` of a window over one, or
//! a group key that is such a window end. The watermark says nothing about any
//! other column. `y` may be any timestamp: `b.date_time <= a.expires` lets
//! an auction go once its expiry is behind the bids' watermark.

use datafusion::logical_expr::utils::split_conjunction;
use datafusion::logical_expr::{BinaryExpr, Expr, LogicalPlan, Operator as Op};
use datafusion::logical_expr::{Join, expr::Between};

use crate::catalog::Catalog;
use crate::dataflow::operators::join::Expiry;
use crate::dataflow::window::{WINDOW_END, day_time_micros};
use crate::sql::window::{WindowTable, bound_of, trace_column, window_of};

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
                late: None,
            })
        };
        Some([side(&j.left, l)?, side(&j.right, r)?])
    })
}

/// `column + offset` on one side of the join.
#[derive(Clone, Copy)]
struct Term {
    side: usize,
    column: usize,
    offset: i64,
    /// Whether the column is event time: rows still to come hold values at
    /// or past the watermark.
    event_time: bool,
}

/// What the comparisons of a join's filter bound, per side.
#[derive(Default, Clone, Copy)]
struct Bounds {
    /// The column and the microseconds its rows are kept past it.
    keep: Option<(usize, i64)>,
    /// The event-time column another side's expiry counts on.
    late: Option<usize>,
}

fn interval_join(catalog: &Catalog, j: &Join) -> Option<[Expiry; 2]> {
    let mut bounds = [Bounds::default(); 2];
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
            // x + c1 op y + c2, as `early + d <= late_term`.
            let (early, later, d) = match op {
                Op::Lt | Op::LtEq => (x, y, y.offset - x.offset),
                Op::Gt | Op::GtEq => (y, x, x.offset - y.offset),
                _ => continue,
            };
            // `early <= later + d`: a row of `later`'s side matches only rows
            // whose `early` is at most its own value plus d. When `early` is
            // event time, rows still to come on that side are at or past the
            // watermark, so the row is done once its value plus d is behind.
            if !early.event_time {
                continue;
            }
            bound(&mut bounds[later.side].keep, (later.column, d))?;
            bound_late(&mut bounds[early.side].late, early.column)?;
        }
    }
    let side = |b: Bounds| {
        b.keep.map(|(column, keep)| Expiry {
            column,
            keep,
            late: b.late,
        })
    };
    Some([side(bounds[0])?, side(bounds[1])?])
}

/// Tightens a side's expiry; `None` (not an interval join we know) when
/// two different columns would bound it.
fn bound(keep: &mut Option<(usize, i64)>, (column, limit): (usize, i64)) -> Option<()> {
    *keep = match *keep {
        None => Some((column, limit)),
        Some((c, k)) if c == column => Some((c, k.min(limit))),
        Some(_) => return None,
    };
    Some(())
}

/// Records a side's late column; `None` when another column already is.
fn bound_late(late: &mut Option<usize>, column: usize) -> Option<()> {
    (*late.get_or_insert(column) == column).then_some(())
}

/// A timestamp column of either side, plus or minus a constant interval.
fn term(catalog: &Catalog, j: &Join, expr: &Expr) -> Option<Term> {
    match expr {
        Expr::Column(c) => {
            let (side, plan) = if j.left.schema().has_column(c) {
                (0, &j.left)
            } else {
                (1, &j.right)
            };
            let column = plan.schema().index_of_column(c).ok()?;
            let timestamp = matches!(
                plan.schema().field(column).data_type(),
                datafusion::arrow::datatypes::DataType::Timestamp(..)
            );
            timestamp.then(|| Term {
                side,
                column,
                offset: 0,
                event_time: event_time(catalog, plan, column),
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

/// Whether column `index` of `plan` is event time: rows still to come hold
/// values at or past the watermark. That is the column a `WATERMARK FOR` is
/// declared on, passed through unchanged, the end of a window over it, or
/// a group key that is such a window end.
fn event_time(catalog: &Catalog, plan: &LogicalPlan, index: usize) -> bool {
    match plan {
        LogicalPlan::TableScan(scan) => {
            let at = scan.projection.as_ref().map_or(index, |p| p[index]);
            if let Some(window) = window_of(scan) {
                return window_end_over_event_time(&window, at)
                    || (at == window.spec.time_column && has_watermark_on(&window.relation, at));
            }
            catalog
                .relation(scan.table_name.table())
                .is_some_and(|table| has_watermark_on(&table, at))
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
        // A window's group changes only while the window is open, and so
        // retracts nothing behind the watermark either. A group keyed by a
        // bare event-time column would: a late row changes it.
        LogicalPlan::Aggregate(a) => match a.group_expr.get(index).map(|e| e.clone().unalias()) {
            Some(Expr::Column(c)) => trace_column(&a.input, &c)
                .is_some_and(|(window, at)| window_end_over_event_time(&window, at)),
            _ => false,
        },
        _ => false,
    }
}

/// Whether column `at` of a window table is its `window_end`, over event
/// time. A window's end is past every row it holds, so rows to come are in
/// windows that end past the watermark.
fn window_end_over_event_time(window: &WindowTable, at: usize) -> bool {
    bound_of(window, at) == Some(WINDOW_END)
        && has_watermark_on(&window.relation, window.spec.time_column)
}

fn has_watermark_on(table: &crate::catalog::Table, column: usize) -> bool {
    let name = table.schema.field(column).name();
    table
        .def
        .watermark
        .as_ref()
        .is_some_and(|w| &w.column == name)
}
