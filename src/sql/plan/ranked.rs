//! Top-N per partition over an input that only grows, as Nexmark q18 and
//! q19 write it:
//!
//! ```sql
//! SELECT * FROM (
//!     SELECT *, row_number() OVER (PARTITION BY auction ORDER BY price DESC) AS rn
//!     FROM bid)
//! WHERE rn <= 10
//! ```
//!
//! planned as one [`Rank`] operator that keeps each partition's first `k`
//! rows, instead of the general window operator, which keeps all of them
//! and ranks each touched partition again at every epoch. Any other shape
//! (another window function, more than one, a bound the filter does not
//! give as a constant, an input that retracts, `EMIT ON WINDOW CLOSE`)
//! takes the general path.

use datafusion::common::{Column, ScalarValue};
use datafusion::logical_expr::expr::WindowFunction;
use datafusion::logical_expr::{BinaryExpr, Expr, LogicalPlan, Operator, Projection, Window};

use super::{Planner, arrow_schema};
use crate::catalog::{Emit, nullable};
use crate::dataflow::operators::rank::Rank;
use crate::error::Result;

impl Planner<'_> {
    /// `filter` as a [`Rank`] when it bounds a lone `row_number()` of an
    /// append-only input from above; `None` otherwise.
    pub(super) fn ranked(
        &mut self,
        filter: &datafusion::logical_expr::Filter,
    ) -> Result<Option<usize>> {
        let (w, projection) = match filter.input.as_ref() {
            LogicalPlan::Window(w) => (w, None),
            LogicalPlan::Projection(p) => match p.input.as_ref() {
                LogicalPlan::Window(w) => (w, Some(p)),
                _ => return Ok(None),
            },
            _ => return Ok(None),
        };
        let Some(rank) = rank_column(w, projection) else {
            return Ok(None);
        };
        let Some(limit) = rank_limit(&filter.predicate, &rank) else {
            return Ok(None);
        };
        let Some(f) = lone_row_number(w) else {
            return Ok(None);
        };
        // EMIT ON WINDOW CLOSE holds rows back until their time is final
        // (`closed_over`), which this operator does not.
        let on_close = self.emit == Emit::OnWindowClose;
        if on_close
            || self.revision < 1
            || f.params.order_by.is_empty()
            || !self.is_append_only(&w.input)
        {
            return Ok(None);
        }
        let schema = w.input.schema();
        let partition = f
            .params
            .partition_by
            .iter()
            .map(|e| self.expr(e, schema))
            .collect::<Result<Vec<_>>>()?;
        let order = self.sort_exprs(&f.params.order_by, schema)?;
        let input = self.node(&w.input)?;
        let op = Rank::new(
            partition,
            order,
            limit,
            &arrow_schema(&w.input),
            nullable(w.schema.as_arrow()),
        )?;
        let node = self.push(Box::new(op), vec![input]);
        match projection {
            Some(p) => self.project(p, node).map(Some),
            None => Ok(Some(node)),
        }
    }
}

/// The rank's column as the filter sees it: the window's last column,
/// or the column a projection between them passes it on as.
fn rank_column(w: &Window, projection: Option<&Projection>) -> Option<Column> {
    let rank = w.schema.columns().pop()?;
    let Some(p) = projection else {
        return Some(rank);
    };
    let at = p.expr.iter().position(|e| match e {
        Expr::Column(c) => *c == rank,
        _ => false,
    })?;
    Some(Column::from(p.schema.qualified_field(at)))
}

/// The window's only expression, if it is `row_number()`.
fn lone_row_number(w: &Window) -> Option<&WindowFunction> {
    let [expr] = w.window_expr.as_slice() else {
        return None;
    };
    let expr = match expr {
        Expr::Alias(a) => a.expr.as_ref(),
        other => other,
    };
    match expr {
        Expr::WindowFunction(f) if f.fun.name() == "row_number" && f.params.filter.is_none() => {
            Some(f.as_ref())
        }
        _ => None,
    }
}

/// How many ranks `predicate` keeps, when it is `rank <= n`, `rank < n`
/// or `rank = 1` (either way round).
fn rank_limit(predicate: &Expr, rank: &Column) -> Option<usize> {
    let Expr::BinaryExpr(BinaryExpr { left, op, right }) = predicate else {
        return None;
    };
    let (op, bound) = match (left.as_ref(), right.as_ref()) {
        (Expr::Column(c), bound) if c == rank => (*op, bound),
        (bound, Expr::Column(c)) if c == rank => (op.swap()?, bound),
        _ => return None,
    };
    let bound = match bound {
        Expr::Literal(value, _) => integer(value)?,
        Expr::Cast(cast) => match cast.expr.as_ref() {
            Expr::Literal(value, _) => integer(value)?,
            _ => return None,
        },
        _ => return None,
    };
    let limit = match op {
        Operator::LtEq => bound,
        Operator::Lt => bound.checked_sub(1)?,
        Operator::Eq if bound == 1 => 1,
        _ => return None,
    };
    usize::try_from(limit).ok().filter(|n| *n > 0)
}

fn integer(value: &ScalarValue) -> Option<i64> {
    match value {
        ScalarValue::UInt64(Some(v)) => i64::try_from(*v).ok(),
        ScalarValue::Int64(Some(v)) => Some(*v),
        ScalarValue::Int32(Some(v)) => Some(i64::from(*v)),
        ScalarValue::UInt32(Some(v)) => Some(i64::from(*v)),
        _ => None,
    }
}
