//! Where DataFusion's semantics differ from PostgreSQL's in ways clients
//! see, an analyzer rule run after type coercion puts PostgreSQL's in:
//!
//! - A cast of text to a date, time or timestamp (written, or implied by a
//!   comparison with a timestamp column) reads the text as PostgreSQL
//!   does (`sql::datetime`) instead of through Arrow's ISO-only parser. A
//!   literal is read at once, so bad text fails the statement at planning
//!   with 22007, as in PostgreSQL.
//! - A cast of a timestamp, time, interval or float to text gives the text
//!   PostgreSQL gives (`2024-01-01 10:00:00+00`, `1`, `1 day 02:00:00`),
//!   not Arrow's (`2024-01-01T10:00:00Z`, `1.0`).
//! - A cast of a float or a numeric to an integer rounds as PostgreSQL's
//!   does (`sql::rounding`); Arrow's truncates.
//! - Intervals compare as PostgreSQL compares them: by their length with a
//!   month of 30 days and a day of 24 hours (`interval_cmp_value`), so
//!   `'24 hours' = '1 day'`. DataFusion compares their fields one by one.

use std::sync::Arc;

use datafusion::arrow::array::{Array, AsArray, Decimal128Array};
use datafusion::arrow::datatypes::{DataType, IntervalMonthDayNanoType, IntervalUnit};
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::common::{DFSchema, ScalarValue};
use datafusion::config::ConfigOptions;
use datafusion::logical_expr::expr::{Cast, ScalarFunction};
use datafusion::logical_expr::{
    BinaryExpr, ColumnarValue, Expr, ExprSchemable, LogicalPlan, Operator, ScalarFunctionArgs,
    ScalarUDF, ScalarUDFImpl, Signature, Volatility,
};
use datafusion::optimizer::AnalyzerRule;
use datafusion::prelude::SessionContext;

use super::datetime;

/// Register the rule and the functions it calls.
pub fn register(ctx: &SessionContext) {
    ctx.register_udf(datetime::datetime_in().as_ref().clone());
    ctx.register_udf(ScalarUDF::new_from_impl(IntervalKey::default()));
    ctx.register_udf(super::text::text_out().as_ref().clone());
    ctx.register_udf(super::rounding::round_for_cast().as_ref().clone());
    ctx.register_udf(crate::dataflow::asof::marker());
    ctx.register_udaf(super::percentile::percentile_disc());
    ctx.register_udaf(super::percentile::mode());
    ctx.register_udaf(super::approx_percentile::approx_percentile());
    ctx.add_analyzer_rule(Arc::new(PostgresSemantics));
}

#[derive(Debug)]
struct PostgresSemantics;

impl AnalyzerRule for PostgresSemantics {
    fn name(&self) -> &str {
        "postgres_semantics"
    }

    fn analyze(
        &self,
        plan: LogicalPlan,
        _config: &ConfigOptions,
    ) -> datafusion::error::Result<LogicalPlan> {
        plan.transform_up_with_subqueries(|plan| {
            let mut schema = DFSchema::empty();
            for input in plan.inputs() {
                schema.merge(input.schema());
            }
            // A rewritten expression keeps its name, or the plan's schema
            // would no longer match what was planned.
            let names = datafusion::logical_expr::expr_rewriter::NamePreserver::new(&plan);
            plan.map_expressions(|expr| {
                let name = names.save(&expr);
                let rewritten = expr.transform_up(|e| rewrite(e, &schema))?;
                Ok(rewritten.update_data(|e| name.restore(e)))
            })
        })
        .map(|t| t.data)
    }
}

fn rewrite(expr: Expr, schema: &DFSchema) -> datafusion::error::Result<Transformed<Expr>> {
    match expr {
        Expr::Cast(Cast { expr, field })
            if datetime::is_datetime(field.data_type()) && is_text(&expr, schema) =>
        {
            let data_type = field.data_type();
            if let Expr::Literal(value, _) = expr.as_ref() {
                return Ok(Transformed::yes(read_literal(value, data_type)?));
            }
            let target = ScalarValue::try_from(data_type)?;
            let call = ScalarFunction::new_udf(
                datetime::datetime_in(),
                vec![*expr, Expr::Literal(target, None)],
            );
            Ok(Transformed::yes(Expr::ScalarFunction(call)))
        }
        Expr::Cast(Cast { expr, field })
            if field.data_type() == &DataType::Utf8 && prints_as_postgres(&expr, schema) =>
        {
            let call = ScalarFunction::new_udf(super::text::text_out(), vec![*expr]);
            Ok(Transformed::yes(Expr::ScalarFunction(call)))
        }
        Expr::Cast(Cast { expr, field })
            if expr
                .get_type(schema)
                .is_ok_and(|t| super::rounding::needs_rounding(&t, field.data_type())) =>
        {
            let call = ScalarFunction::new_udf(super::rounding::round_for_cast(), vec![*expr]);
            Ok(Transformed::yes(Expr::Cast(Cast::new(
                Box::new(Expr::ScalarFunction(call)),
                field.data_type().clone(),
            ))))
        }
        Expr::BinaryExpr(BinaryExpr { left, op, right })
            if is_comparison(op) && is_interval(&left, schema) && is_interval(&right, schema) =>
        {
            let key = |e: Expr| {
                Expr::ScalarFunction(ScalarFunction::new_udf(
                    Arc::new(ScalarUDF::new_from_impl(IntervalKey::default())),
                    vec![e],
                ))
            };
            Ok(Transformed::yes(Expr::BinaryExpr(BinaryExpr::new(
                Box::new(key(*left)),
                op,
                Box::new(key(*right)),
            ))))
        }
        other => Ok(Transformed::no(other)),
    }
}

fn read_literal(value: &ScalarValue, target: &DataType) -> datafusion::error::Result<Expr> {
    let text = value.cast_to(&DataType::Utf8)?;
    let parsed = match text {
        ScalarValue::Utf8(Some(text)) => datetime::parse(&text, target)?,
        _ => ScalarValue::try_from(target)?,
    };
    Ok(Expr::Literal(parsed, None))
}

fn is_text(expr: &Expr, schema: &DFSchema) -> bool {
    expr.get_type(schema).is_ok_and(|t| is_text_type(&t))
}

fn is_text_type(data_type: &DataType) -> bool {
    matches!(
        data_type,
        DataType::Utf8 | DataType::Utf8View | DataType::LargeUtf8
    )
}

fn prints_as_postgres(expr: &Expr, schema: &DFSchema) -> bool {
    expr.get_type(schema).is_ok_and(|t| super::text::prints(&t))
}

fn is_interval(expr: &Expr, schema: &DFSchema) -> bool {
    matches!(
        expr.get_type(schema),
        Ok(DataType::Interval(IntervalUnit::MonthDayNano))
    )
}

fn is_comparison(op: Operator) -> bool {
    matches!(
        op,
        Operator::Eq
            | Operator::NotEq
            | Operator::Lt
            | Operator::LtEq
            | Operator::Gt
            | Operator::GtEq
            | Operator::IsDistinctFrom
            | Operator::IsNotDistinctFrom
    )
}

/// An interval's length in nanoseconds, a month counted as 30 days and a
/// day as 24 hours: what PostgreSQL orders and equates intervals by.
#[derive(Debug, PartialEq, Eq, Hash)]
struct IntervalKey {
    signature: Signature,
}

impl Default for IntervalKey {
    fn default() -> IntervalKey {
        IntervalKey {
            signature: Signature::exact(
                vec![DataType::Interval(IntervalUnit::MonthDayNano)],
                Volatility::Immutable,
            ),
        }
    }
}

const NANOS_PER_DAY: i128 = 86_400_000_000_000;

/// `Decimal128(38, 0)`: the length of the longest interval needs 83 bits.
const KEY_TYPE: DataType = DataType::Decimal128(38, 0);

impl ScalarUDFImpl for IntervalKey {
    fn name(&self) -> &str {
        "weir_interval_key"
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _arg_types: &[DataType]) -> datafusion::error::Result<DataType> {
        Ok(KEY_TYPE)
    }

    fn invoke_with_args(
        &self,
        args: ScalarFunctionArgs,
    ) -> datafusion::error::Result<ColumnarValue> {
        let [interval] = args.args.as_slice() else {
            return datafusion::common::internal_err!("weir_interval_key takes one interval");
        };
        let array = interval.to_array(args.number_rows)?;
        let intervals = array.as_primitive::<IntervalMonthDayNanoType>();
        let keys: Decimal128Array = (0..intervals.len())
            .map(|i| {
                (!intervals.is_null(i)).then(|| {
                    let v = intervals.value(i);
                    (i128::from(v.months) * 30 + i128::from(v.days)) * NANOS_PER_DAY
                        + i128::from(v.nanoseconds)
                })
            })
            .collect();
        let keys = keys.with_data_type(KEY_TYPE);
        match interval {
            ColumnarValue::Scalar(_) => Ok(ColumnarValue::Scalar(ScalarValue::try_from_array(
                &keys, 0,
            )?)),
            ColumnarValue::Array(_) => Ok(ColumnarValue::Array(Arc::new(keys))),
        }
    }
}
