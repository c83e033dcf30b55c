//! `ASOF JOIN`: each row of the left side joins the one row of the right
//! side that has the same keys and is closest to it by one inequality,
//! `t1 ASOF [LEFT] JOIN t2 ON t1.k = t2.k AND t1.ts <= t2.ts`.
//!
//! The parser turns the join into a plain (or LEFT) join whose whole `ON`
//! condition is wrapped in the marker function [`MARKER`], so DataFusion
//! plans it as an ordinary join and the condition reaches the planners
//! whole. The batch planner rewrites such a join into a join and a ranking
//! (`sql::asof`); the dataflow planner gives it to the join operator's
//! as-of mode. Both read the condition through [`Condition::of`].

use datafusion::arrow::datatypes::DataType;
use datafusion::common::DFSchema;
use datafusion::logical_expr::expr::ScalarFunction;
use datafusion::logical_expr::utils::split_conjunction;
use datafusion::logical_expr::{
    BinaryExpr, ColumnarValue, Expr, Operator, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl,
    Signature, Volatility,
};

use crate::error::{Error, Result};

/// The function that marks a join condition as an as-of condition.
pub const MARKER: &str = "weir_asof_match";

/// Which right rows a left row may join, and which of them is closest.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Closest {
    /// Right values at or above the left value (above only, if strict);
    /// the smallest wins.
    Above { strict: bool },
    /// Right values at or below the left value (below only, if strict);
    /// the largest wins.
    Below { strict: bool },
}

/// An as-of join condition, split into its parts.
#[derive(Debug, Clone)]
pub struct Condition {
    /// Equalities: an expression over the left side and one over the right.
    pub equal: Vec<(Expr, Expr)>,
    /// The inequality's operand over the left side.
    pub left: Expr,
    /// The inequality's operand over the right side.
    pub right: Expr,
    pub closest: Closest,
}

impl Condition {
    /// The as-of condition of a join, if its filter is one.
    pub fn of(join: &datafusion::logical_expr::Join) -> Result<Option<Condition>> {
        let Some(inner) = join.filter.as_ref().and_then(marked) else {
            return Ok(None);
        };
        if !join.on.is_empty() {
            return Err(refused("its ON condition was split by the planner"));
        }
        let (left, right) = (join.left.schema(), join.right.schema());
        let mut equal = Vec::new();
        let mut inequality = None;
        for conjunct in split_conjunction(inner) {
            let Expr::BinaryExpr(BinaryExpr {
                left: a,
                op,
                right: b,
            }) = conjunct
            else {
                return Err(refused(&format!("{conjunct} is neither")));
            };
            let (a, op, b) = match (on_side(a, left, right), on_side(b, left, right)) {
                (Some(true), Some(false)) => ((**a).clone(), *op, (**b).clone()),
                (Some(false), Some(true)) => match op.swap() {
                    Some(swapped) => ((**b).clone(), swapped, (**a).clone()),
                    None => return Err(refused(&format!("{conjunct} is neither"))),
                },
                _ => {
                    return Err(refused(&format!(
                        "{conjunct} does not compare the left side with the right"
                    )));
                }
            };
            let closest = match op {
                Operator::Eq => {
                    equal.push((a, b));
                    continue;
                }
                Operator::LtEq => Closest::Above { strict: false },
                Operator::Lt => Closest::Above { strict: true },
                Operator::GtEq => Closest::Below { strict: false },
                Operator::Gt => Closest::Below { strict: true },
                _ => return Err(refused(&format!("{conjunct} is neither"))),
            };
            if inequality.replace((a, b, closest)).is_some() {
                return Err(refused("it has more than one inequality"));
            }
        }
        let Some((left, right, closest)) = inequality else {
            return Err(refused("it has no inequality"));
        };
        if equal.is_empty() {
            return Err(refused("it has no equality"));
        }
        Ok(Some(Condition {
            equal,
            left,
            right,
            closest,
        }))
    }
}

fn refused(why: &str) -> Error {
    Error::NotSupported(format!(
        "an ASOF JOIN's ON takes equalities and one inequality (<, <=, >, >=) between the \
         left and the right side, like ON a.k = b.k AND a.ts <= b.ts; {why}"
    ))
}

/// The condition inside the marker, if `filter` is a marked one.
fn marked(filter: &Expr) -> Option<&Expr> {
    match filter {
        Expr::ScalarFunction(ScalarFunction { func, args }) if func.name() == MARKER => {
            args.first()
        }
        _ => None,
    }
}

/// `Some(true)` if `expr` reads only the left side, `Some(false)` only the
/// right, `None` both or neither.
fn on_side(expr: &Expr, left: &DFSchema, right: &DFSchema) -> Option<bool> {
    let columns = expr.column_refs();
    if columns.is_empty() {
        return None;
    }
    if columns.iter().all(|c| left.has_column(c)) {
        return Some(true);
    }
    columns.iter().all(|c| right.has_column(c)).then_some(false)
}

/// The marker function: to DataFusion it passes its argument through.
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct AsofMatch {
    signature: Signature,
}

impl Default for AsofMatch {
    fn default() -> AsofMatch {
        AsofMatch {
            signature: Signature::exact(vec![DataType::Boolean], Volatility::Immutable),
        }
    }
}

/// The marker, to register with a session.
pub fn marker() -> ScalarUDF {
    ScalarUDF::new_from_impl(AsofMatch::default())
}

impl ScalarUDFImpl for AsofMatch {
    fn name(&self) -> &str {
        MARKER
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _arg_types: &[DataType]) -> datafusion::error::Result<DataType> {
        Ok(DataType::Boolean)
    }

    fn invoke_with_args(
        &self,
        args: ScalarFunctionArgs,
    ) -> datafusion::error::Result<ColumnarValue> {
        // Reached only if a marked join escaped the rewrite: refuse rather
        // than join every matching row.
        let _ = args;
        datafusion::common::not_impl_err!("ASOF JOIN is planned as a join and a ranking")
    }
}
