//! Temporal filters: `WHERE t > now() - INTERVAL '1' HOUR` in a view keeps
//! the rows of the last hour as processing time moves on, retracting each
//! when it falls out (`dataflow::operators::sliding`).
//!
//! DataFusion reads `now()` once, when it plans. So before a view's plan is
//! optimized, `now()` in its filters becomes `weir_now()`, which DataFusion
//! cannot fold; the view planner then takes each conjunct of the form
//! `t > now() - d` or `t < now() + d` (or `>=`, `<=`, or written the other
//! way round; `BETWEEN now() - d AND now() + e` is both) out of the filter
//! as a temporal filter, and refuses any other use (0A000).

use std::sync::{Arc, LazyLock};

use datafusion::arrow::datatypes::{DataType, TimeUnit};
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::common::{Result as DfResult, exec_err};
use datafusion::logical_expr::expr::ScalarFunction;
use datafusion::logical_expr::utils::{conjunction, split_conjunction};
use datafusion::logical_expr::{
    BinaryExpr, ColumnarValue, Expr, LogicalPlan, Operator, ScalarFunctionArgs, ScalarUDF,
    ScalarUDFImpl, Signature, Volatility,
};

pub use crate::dataflow::operators::sliding::Bound;
use crate::dataflow::window::day_time_micros;
use crate::error::{Error, Result};

const NAME: &str = "weir_now";

/// One conjunct that bounds a row's time by processing time.
#[derive(Debug, Clone)]
pub struct Sliding {
    pub time: Expr,
    pub bound: Bound,
}

/// `now()` in every filter of a view's plan made `weir_now()`.
pub fn mark_now(plan: LogicalPlan) -> Result<LogicalPlan> {
    Ok(plan
        .transform_up(|node| match node {
            LogicalPlan::Filter(mut filter) => {
                let marked = filter.predicate.clone().transform_up(|e| match e {
                    Expr::ScalarFunction(f) if f.name() == "now" && f.args.is_empty() => {
                        let call = ScalarFunction::new_udf(weir_now(), Vec::new());
                        Ok(Transformed::yes(Expr::ScalarFunction(call)))
                    }
                    other => Ok(Transformed::no(other)),
                })?;
                if !marked.transformed {
                    return Ok(Transformed::no(LogicalPlan::Filter(filter)));
                }
                filter.predicate = marked.data;
                Ok(Transformed::yes(LogicalPlan::Filter(filter)))
            }
            other => Ok(Transformed::no(other)),
        })?
        .data)
}

/// A filter's predicate split into its plain part and its sliding parts.
pub fn split(predicate: &Expr) -> Result<(Option<Expr>, Vec<Sliding>)> {
    let mut plain = Vec::new();
    let mut sliding = Vec::new();
    for conjunct in split_conjunction(predicate) {
        match as_sliding(conjunct) {
            Some(s) => sliding.push(s),
            None if mentions_now(conjunct) => {
                return Err(Error::NotSupported(format!(
                    "now() in a materialized view works only as a temporal filter, \
                     like WHERE t > now() - INTERVAL '1' HOUR; found {}",
                    conjunct.to_string().replace(NAME, "now")
                )));
            }
            None => plain.push(conjunct.clone()),
        }
    }
    Ok((conjunction(plain), sliding))
}

/// Whether `expr` calls `weir_now()`.
pub fn mentions_now(expr: &Expr) -> bool {
    expr.exists(|e| Ok(matches!(e, Expr::ScalarFunction(f) if f.name() == NAME)))
        .unwrap_or(false)
}

fn as_sliding(conjunct: &Expr) -> Option<Sliding> {
    let Expr::BinaryExpr(BinaryExpr { left, op, right }) = conjunct else {
        return None;
    };
    // As `t <op> bound`, with now() in the bound only.
    let (time, op, bound) = match (mentions_now(left), mentions_now(right)) {
        (false, true) => (left, *op, right),
        (true, false) => (right, op.swap()?, left),
        _ => return None,
    };
    let (shift_op, d) = match strip_casts(bound) {
        e if is_now(e) => (None, 0),
        Expr::BinaryExpr(BinaryExpr { left, op, right }) if is_now(strip_casts(left)) => {
            (Some(*op), micros_of(strip_casts(right))?)
        }
        _ => return None,
    };
    let bound = match (op, shift_op) {
        // t > now() - d: out once now() reaches t + d (one later for >=).
        (Operator::Gt | Operator::GtEq, None | Some(Operator::Minus)) => Bound::Leaves {
            shift: d + i64::from(op == Operator::GtEq),
        },
        // t < now() + d: in once now() reaches t - d (one later for <).
        (Operator::Lt | Operator::LtEq, None | Some(Operator::Plus)) => Bound::Enters {
            shift: d - i64::from(op == Operator::Lt),
        },
        _ => return None,
    };
    Some(Sliding {
        time: time.as_ref().clone(),
        bound,
    })
}

fn strip_casts(expr: &Expr) -> &Expr {
    match expr {
        Expr::Cast(c) => strip_casts(&c.expr),
        Expr::TryCast(c) => strip_casts(&c.expr),
        other => other,
    }
}

fn is_now(expr: &Expr) -> bool {
    matches!(expr, Expr::ScalarFunction(f) if f.name() == NAME)
}

/// A constant interval of days and time, in microseconds; months vary in
/// length, so they do not count.
fn micros_of(expr: &Expr) -> Option<i64> {
    let Expr::Literal(value, _) = expr else {
        return None;
    };
    day_time_micros(value).filter(|micros| *micros >= 0)
}

/// `weir_now()`: `now()` in a view's filter, which only the view planner
/// may take; evaluating it anywhere else is a planning mistake.
pub fn weir_now() -> Arc<ScalarUDF> {
    static UDF: LazyLock<Arc<ScalarUDF>> =
        LazyLock::new(|| Arc::new(ScalarUDF::new_from_impl(WeirNow::default())));
    UDF.clone()
}

#[derive(Debug, PartialEq, Eq, Hash)]
struct WeirNow {
    signature: Signature,
}

impl Default for WeirNow {
    fn default() -> WeirNow {
        WeirNow {
            signature: Signature::nullary(Volatility::Volatile),
        }
    }
}

impl ScalarUDFImpl for WeirNow {
    fn name(&self) -> &str {
        NAME
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _arg_types: &[DataType]) -> DfResult<DataType> {
        Ok(DataType::Timestamp(
            TimeUnit::Nanosecond,
            Some("+00:00".into()),
        ))
    }

    fn invoke_with_args(&self, _args: ScalarFunctionArgs) -> DfResult<ColumnarValue> {
        exec_err!("now() in a view is evaluated only by a temporal filter")
    }
}
