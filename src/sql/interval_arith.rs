//! `interval '1 day' * 365`, `2.5 * interval '1 hour'` and
//! `interval '1 hour' / 4`, which PostgreSQL computes and DataFusion's
//! planner refuses. A planner for the binary operators turns them into a
//! call of `weir_interval_scale`, which scales as PostgreSQL's
//! `interval_mul` does: months, then days, then time, each fraction spilling
//! into the next smaller field with a month of 30 days and a day of 24 hours.

use std::sync::{Arc, LazyLock};

use datafusion::arrow::array::{Array, ArrayRef, AsArray, IntervalMonthDayNanoArray};
use datafusion::arrow::datatypes::{
    DataType, Float64Type, IntervalMonthDayNano, IntervalMonthDayNanoType, IntervalUnit,
};
use datafusion::arrow::error::ArrowError;
use datafusion::common::{DFSchema, DataFusionError, Result as DfResult, exec_err};
use datafusion::logical_expr::expr::ScalarFunction;
use datafusion::logical_expr::planner::{ExprPlanner, PlannerResult, RawBinaryExpr};
use datafusion::logical_expr::{
    ColumnarValue, Expr, ExprSchemable, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature,
    Volatility, cast, lit,
};
use sqlparser::ast::BinaryOperator;

use crate::error::Error;

const INTERVAL: DataType = DataType::Interval(IntervalUnit::MonthDayNano);
const DAYS_PER_MONTH: f64 = 30.0;
const SECONDS_PER_DAY: f64 = 86_400.0;

/// Plans `interval * number`, `number * interval` and `interval / number`.
#[derive(Debug, Default)]
pub struct IntervalArithmetic;

impl ExprPlanner for IntervalArithmetic {
    fn plan_binary_op(
        &self,
        expr: RawBinaryExpr,
        schema: &DFSchema,
    ) -> DfResult<PlannerResult<RawBinaryExpr>> {
        let is_interval = |e: &Expr| matches!(e.get_type(schema), Ok(DataType::Interval(_)));
        let is_number = |e: &Expr| e.get_type(schema).is_ok_and(|t| t.is_numeric());
        let (span, factor, divide) = match expr.op {
            BinaryOperator::Multiply if is_interval(&expr.left) && is_number(&expr.right) => {
                (&expr.left, &expr.right, false)
            }
            BinaryOperator::Multiply if is_number(&expr.left) && is_interval(&expr.right) => {
                (&expr.right, &expr.left, false)
            }
            BinaryOperator::Divide if is_interval(&expr.left) && is_number(&expr.right) => {
                (&expr.left, &expr.right, true)
            }
            _ => return Ok(PlannerResult::Original(expr)),
        };
        let call = ScalarFunction::new_udf(
            interval_scale(),
            vec![
                cast(span.clone(), INTERVAL),
                cast(factor.clone(), DataType::Float64),
                lit(divide),
            ],
        );
        Ok(PlannerResult::Planned(Expr::ScalarFunction(call)))
    }
}

fn interval_scale() -> Arc<ScalarUDF> {
    static UDF: LazyLock<Arc<ScalarUDF>> =
        LazyLock::new(|| Arc::new(ScalarUDF::new_from_impl(IntervalScale::default())));
    UDF.clone()
}

#[derive(Debug, PartialEq, Eq, Hash)]
struct IntervalScale {
    signature: Signature,
}

impl Default for IntervalScale {
    fn default() -> IntervalScale {
        IntervalScale {
            signature: Signature::exact(
                vec![INTERVAL, DataType::Float64, DataType::Boolean],
                Volatility::Immutable,
            ),
        }
    }
}

impl ScalarUDFImpl for IntervalScale {
    fn name(&self) -> &str {
        "weir_interval_scale"
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _arg_types: &[DataType]) -> DfResult<DataType> {
        Ok(INTERVAL)
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> DfResult<ColumnarValue> {
        let [span, factor, ColumnarValue::Scalar(divide)] = args.args.as_slice() else {
            return exec_err!("weir_interval_scale takes an interval, a factor and a flag");
        };
        let divide = matches!(divide, datafusion::common::ScalarValue::Boolean(Some(true)));
        let scalar = args
            .args
            .iter()
            .all(|a| matches!(a, ColumnarValue::Scalar(_)));
        let spans = span.to_array(args.number_rows)?;
        let factors = factor.to_array(args.number_rows)?;
        let scaled = scale_all(&spans, &factors, divide)?;
        if scalar {
            let value = datafusion::common::ScalarValue::try_from_array(&scaled, 0)?;
            return Ok(ColumnarValue::Scalar(value));
        }
        Ok(ColumnarValue::Array(scaled))
    }
}

fn scale_all(spans: &ArrayRef, factors: &ArrayRef, divide: bool) -> DfResult<ArrayRef> {
    let spans = spans.as_primitive::<IntervalMonthDayNanoType>();
    let factors = factors.as_primitive::<Float64Type>();
    let mut out = Vec::with_capacity(spans.len());
    for i in 0..spans.len() {
        if spans.is_null(i) || factors.is_null(i) {
            out.push(None);
            continue;
        }
        let factor = factors.value(i);
        if divide && factor == 0.0 {
            return Err(DataFusionError::ArrowError(
                Box::new(ArrowError::DivideByZero),
                None,
            ));
        }
        let factor = if divide { 1.0 / factor } else { factor };
        out.push(Some(scale(spans.value(i), factor)?));
    }
    Ok(Arc::new(IntervalMonthDayNanoArray::from(out)))
}

/// PostgreSQL's `interval_mul`, at nanosecond rather than microsecond precision.
fn scale(span: IntervalMonthDayNano, factor: f64) -> DfResult<IntervalMonthDayNano> {
    let months = span.months as f64 * factor;
    let days = span.days as f64 * factor;
    let whole_months = whole_i32(months)?;
    let mut whole_days = whole_i32(days)?;
    let month_remainder_days = round_micros((months - whole_months as f64) * DAYS_PER_MONTH);
    let mut seconds = round_micros(
        (days - whole_days as f64 + month_remainder_days - month_remainder_days.trunc())
            * SECONDS_PER_DAY,
    );
    if seconds.abs() >= SECONDS_PER_DAY {
        let carried = (seconds / SECONDS_PER_DAY).trunc();
        whole_days = whole_i32(whole_days as f64 + carried)?;
        seconds -= carried * SECONDS_PER_DAY;
    }
    whole_days = whole_i32(whole_days as f64 + month_remainder_days.trunc())?;
    let nanos = (span.nanoseconds as f64 * factor + seconds * 1e9).round();
    if !nanos.is_finite() || nanos.abs() >= i64::MAX as f64 {
        return Err(out_of_range());
    }
    Ok(IntervalMonthDayNano::new(
        whole_months,
        whole_days,
        nanos as i64,
    ))
}

fn whole_i32(value: f64) -> DfResult<i32> {
    let whole = value.trunc();
    if !whole.is_finite() || whole < i32::MIN as f64 || whole > i32::MAX as f64 {
        return Err(out_of_range());
    }
    Ok(whole as i32)
}

/// Rounded to the microsecond, as PostgreSQL rounds its fractions of a day.
fn round_micros(value: f64) -> f64 {
    (value * 1e6).round() / 1e6
}

fn out_of_range() -> DataFusionError {
    DataFusionError::External(Box::new(Error::DatetimeOutOfRange(
        "interval out of range".into(),
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn span(months: i32, days: i32, seconds: i64) -> IntervalMonthDayNano {
        IntervalMonthDayNano::new(months, days, seconds * 1_000_000_000)
    }

    #[test]
    fn fractions_spill_into_smaller_fields() {
        // PostgreSQL: interval '1 month' * 1.5 = '1 mon 15 days'
        assert_eq!(scale(span(1, 0, 0), 1.5).expect("scales"), span(1, 15, 0));
        // interval '1 day' * 1.5 = '1 day 12:00:00'
        assert_eq!(
            scale(span(0, 1, 0), 1.5).expect("scales"),
            span(0, 1, 43_200)
        );
        // interval '1 hour' * 365 * 2 keeps hours as time, as PostgreSQL does.
        assert_eq!(
            scale(span(0, 0, 3_600), 730.0).expect("scales"),
            span(0, 0, 730 * 3_600)
        );
        // interval '1 mon 1 day' / 2 = '15 days 12:00:00'
        assert_eq!(
            scale(span(1, 1, 0), 0.5).expect("scales"),
            span(0, 15, 43_200)
        );
    }

    #[test]
    fn overflow_is_out_of_range() {
        assert!(scale(span(i32::MAX, 0, 0), 2.0).is_err());
    }
}
