//! `ASOF JOIN` in queries: DataFusion has no as-of join, so a marked join
//! (see `dataflow::asof`) is planned as the join of each numbered left row
//! with every right row its inequality admits, ranked by closeness, the
//! first kept:
//!
//! ```text
//! Projection: the join's columns
//!   Filter: rank = 1
//!     Window: row_number() PARTITION BY row ORDER BY right value, right columns
//!       [Left] Join: equalities, filter: inequality
//!         Window: row_number() AS row     (the left side, numbered)
//!         the right side
//! ```
//!
//! The order is the one the dataflow's as-of join picks by, so a view and
//! the same query give the same rows.

use datafusion::common::tree_node::Transformed;
use datafusion::functions_window::expr_fn::row_number;
use datafusion::logical_expr::{
    BinaryExpr, Expr, ExprFunctionExt, LogicalPlan, LogicalPlanBuilder, Operator, col, lit,
};

use crate::dataflow::asof::{Closest, Condition};
use crate::error::{Error, Result};

const ROW: &str = "__weir_asof_row";
const RANK: &str = "__weir_asof_rank";

/// Every as-of join of `plan` planned as a ranked join.
pub fn for_batch(plan: LogicalPlan) -> Result<LogicalPlan> {
    let mut refused: Option<Error> = None;
    let rewritten = plan.transform_up_with_subqueries(|node| {
        let LogicalPlan::Join(join) = &node else {
            return Ok(Transformed::no(node));
        };
        let condition = match Condition::of(join) {
            Ok(Some(condition)) => condition,
            Ok(None) => return Ok(Transformed::no(node)),
            Err(e) => {
                refused.get_or_insert(e);
                return Ok(Transformed::no(node));
            }
        };
        ranked(join, condition).map(Transformed::yes)
    })?;
    match refused {
        Some(e) => Err(e),
        None => Ok(rewritten.data),
    }
}

fn ranked(
    join: &datafusion::logical_expr::Join,
    condition: Condition,
) -> datafusion::error::Result<LogicalPlan> {
    let numbered = LogicalPlanBuilder::from(join.left.as_ref().clone())
        .window(vec![row_number().alias(ROW)])?
        .build()?;
    let (op, ascending) = match condition.closest {
        Closest::Above { strict: false } => (Operator::LtEq, true),
        Closest::Above { strict: true } => (Operator::Lt, true),
        Closest::Below { strict: false } => (Operator::GtEq, false),
        Closest::Below { strict: true } => (Operator::Gt, false),
    };
    let inequality = Expr::BinaryExpr(BinaryExpr::new(
        Box::new(condition.left),
        op,
        Box::new(condition.right.clone()),
    ));
    let mut order = vec![condition.right.sort(ascending, false)];
    // Ties go to the right row that sorts first, column by column.
    order.extend(
        join.right
            .schema()
            .columns()
            .into_iter()
            .map(|c| Expr::Column(c).sort(true, true)),
    );
    let rank = row_number()
        .partition_by(vec![col(ROW)])
        .order_by(order)
        .build()?
        .alias(RANK);
    let (left_keys, right_keys): (Vec<Expr>, Vec<Expr>) = condition.equal.into_iter().unzip();
    let columns: Vec<Expr> = join
        .schema
        .columns()
        .into_iter()
        .map(Expr::Column)
        .collect();
    LogicalPlanBuilder::from(numbered)
        .join_with_expr_keys(
            join.right.as_ref().clone(),
            join.join_type,
            (left_keys, right_keys),
            Some(inequality),
        )?
        .window(vec![rank])?
        .filter(col(RANK).eq(lit(1u64)))?
        .project(columns)?
        .build()
}
