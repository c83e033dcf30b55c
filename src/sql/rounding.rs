//! PostgreSQL rounds when it casts a fraction to an integer: a float to the
//! nearest, ties to even (`2.5::float8::int` is 2, `3.5` is 4), a numeric
//! to the nearest, ties away from zero (`2.5::numeric::int` is 3). Arrow's
//! cast truncates (`10444.6` becomes 10444). So the cast's input is first
//! rounded by this function, which keeps its type, and the cast then only
//! changes the type.

use std::sync::{Arc, LazyLock};

use datafusion::arrow::array::{Array, ArrayRef, AsArray};
use datafusion::arrow::datatypes::{DataType, Decimal128Type, Float32Type, Float64Type};
use datafusion::common::{Result as DfResult, exec_err};
use datafusion::logical_expr::{
    ColumnarValue, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, Volatility,
};

/// Whether a cast from `from` to `to` needs its input rounded first.
pub fn needs_rounding(from: &DataType, to: &DataType) -> bool {
    to.is_integer()
        && matches!(
            from,
            DataType::Float32 | DataType::Float64 | DataType::Decimal128(_, 1..)
        )
}

/// The function, to call in a rewritten cast.
pub fn round_for_cast() -> Arc<ScalarUDF> {
    static UDF: LazyLock<Arc<ScalarUDF>> =
        LazyLock::new(|| Arc::new(ScalarUDF::new_from_impl(RoundForCast::default())));
    UDF.clone()
}

#[derive(Debug, PartialEq, Eq, Hash)]
struct RoundForCast {
    signature: Signature,
}

impl Default for RoundForCast {
    fn default() -> RoundForCast {
        RoundForCast {
            signature: Signature::any(1, Volatility::Immutable),
        }
    }
}

impl ScalarUDFImpl for RoundForCast {
    fn name(&self) -> &str {
        "weir_round_for_cast"
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, arg_types: &[DataType]) -> DfResult<DataType> {
        Ok(arg_types[0].clone())
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> DfResult<ColumnarValue> {
        let [value] = args.args.as_slice() else {
            return exec_err!("weir_round_for_cast takes one argument");
        };
        let scalar = matches!(value, ColumnarValue::Scalar(_));
        let rounded = round(&value.to_array(args.number_rows)?)?;
        if scalar {
            let value = datafusion::common::ScalarValue::try_from_array(&rounded, 0)?;
            return Ok(ColumnarValue::Scalar(value));
        }
        Ok(ColumnarValue::Array(rounded))
    }
}

fn round(array: &ArrayRef) -> DfResult<ArrayRef> {
    Ok(match array.data_type() {
        DataType::Float64 => {
            let floats = array.as_primitive::<Float64Type>();
            Arc::new(floats.unary::<_, Float64Type>(f64::round_ties_even))
        }
        DataType::Float32 => {
            let floats = array.as_primitive::<Float32Type>();
            Arc::new(floats.unary::<_, Float32Type>(f32::round_ties_even))
        }
        DataType::Decimal128(precision, scale) => {
            let unit = 10i128.pow((*scale).max(0) as u32);
            let decimals = array.as_primitive::<Decimal128Type>();
            let rounded = decimals
                .unary::<_, Decimal128Type>(|v| half_away_from_zero(v, unit))
                .with_precision_and_scale(*precision, *scale)?;
            Arc::new(rounded)
        }
        other => return exec_err!("weir_round_for_cast does not round {other}"),
    })
}

/// `v` (in units of 1/`unit`) to the nearest whole, ties away from zero.
fn half_away_from_zero(v: i128, unit: i128) -> i128 {
    let whole = v / unit;
    let rest = v % unit;
    let up = if rest.abs() * 2 >= unit {
        v.signum()
    } else {
        0
    };
    (whole + up) * unit
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decimals_round_half_away_from_zero() {
        assert_eq!(half_away_from_zero(25, 10), 30);
        assert_eq!(half_away_from_zero(-25, 10), -30);
        assert_eq!(half_away_from_zero(24, 10), 20);
        assert_eq!(half_away_from_zero(-149, 100), -100);
        assert_eq!(half_away_from_zero(150, 100), 200);
    }

    #[test]
    fn only_fractions_cast_to_integers_are_rounded() {
        assert!(needs_rounding(&DataType::Float64, &DataType::Int32));
        assert!(needs_rounding(
            &DataType::Decimal128(10, 2),
            &DataType::Int64
        ));
        assert!(!needs_rounding(
            &DataType::Decimal128(10, 0),
            &DataType::Int64
        ));
        assert!(!needs_rounding(&DataType::Float64, &DataType::Utf8));
        assert!(!needs_rounding(&DataType::Int64, &DataType::Int32));
    }
}
