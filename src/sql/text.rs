//! Values as PostgreSQL 15 prints them as text, where Arrow prints them
//! otherwise: timestamps, times and intervals print a fraction of a second
//! only as far as it has digits (`10:00:00.5`, never padded to six), a
//! timestamp with a zone prints in a zone with its offset
//! (`2024-01-01 10:00:00+00`), intervals in the `postgres` style
//! (`1 day 02:00:00`), and floats as `float8out` prints them (`1`,
//! `1e+20`, `Infinity`), honouring `extra_float_digits`. Results use it
//! (`server::text`, in the session's settings) and so do casts to text
//! (`sql::rules`, in UTC and the default digits).

use std::sync::Arc;

use datafusion::arrow::array::timezone::Tz;
use datafusion::arrow::array::{
    Array, ArrayRef, AsArray, Float32Array, Float64Array, Int64Array, StringArray,
};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::{
    DataType, Float32Type, Float64Type, IntervalMonthDayNanoType, IntervalUnit, TimeUnit,
};
use datafusion::common::ScalarValue;
use datafusion::logical_expr::{
    ColumnarValue, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, Volatility,
};

/// Whether [`render`] prints values of this type.
pub fn prints(data_type: &DataType) -> bool {
    matches!(
        data_type,
        DataType::Timestamp(..)
            | DataType::Time64(_)
            | DataType::Time32(_)
            | DataType::Float64
            | DataType::Float32
            | DataType::Interval(IntervalUnit::MonthDayNano)
    )
}

/// A column as text, when its type prints differently from Arrow's
/// encoder; zoned timestamps in `zone`, or in their own without one.
pub fn render(
    column: &ArrayRef,
    zone: Option<&Tz>,
    extra_float_digits: i32,
) -> Option<StringArray> {
    let own_zone: Option<Tz>;
    let text: StringArray = match column.data_type() {
        DataType::Timestamp(_, column_zone) => {
            own_zone = column_zone.as_ref().and_then(|z| z.parse().ok());
            let zone = column_zone.as_ref().and(zone.or(own_zone.as_ref()));
            let micros = as_micros(column, &DataType::Timestamp(TimeUnit::Microsecond, None))?;
            each(&micros, |v| format_timestamp(v, zone))
        }
        DataType::Time64(_) | DataType::Time32(_) => {
            let micros = as_micros(column, &DataType::Time64(TimeUnit::Microsecond))?;
            each(&micros, |v| Some(format_time(v)))
        }
        DataType::Float64 => {
            let floats: &Float64Array = column.as_primitive::<Float64Type>();
            floats
                .iter()
                .map(|v| v.map(|v| format_f64(v, extra_float_digits)))
                .collect()
        }
        DataType::Float32 => {
            let floats: &Float32Array = column.as_primitive::<Float32Type>();
            floats
                .iter()
                .map(|v| v.map(|v| format_f32(v, extra_float_digits)))
                .collect()
        }
        DataType::Interval(IntervalUnit::MonthDayNano) => column
            .as_primitive::<IntervalMonthDayNanoType>()
            .iter()
            .map(|v| v.map(|v| format_interval(v.months, v.days, v.nanoseconds / 1000)))
            .collect(),
        _ => return None,
    };
    Some(text)
}

/// A time or timestamp column as microseconds (since midnight or the epoch).
fn as_micros(column: &ArrayRef, micro_type: &DataType) -> Option<Int64Array> {
    let micros = cast(column, micro_type).ok()?;
    let micros = cast(&micros, &DataType::Int64).ok()?;
    Some(micros.as_primitive().clone())
}

fn each(values: &Int64Array, format: impl Fn(i64) -> Option<String>) -> StringArray {
    values.iter().map(|v| v.and_then(&format)).collect()
}

/// A timestamp; with a zone, in that zone with its offset as PostgreSQL
/// writes it (`+00`, `+05:30`).
fn format_timestamp(micros: i64, zone: Option<&Tz>) -> Option<String> {
    let utc = chrono::DateTime::from_timestamp_micros(micros)?;
    let Some(zone) = zone else {
        return format_micros(micros);
    };
    let local = utc.with_timezone(zone);
    let mut out = local.naive_local().format("%Y-%m-%d %H:%M:%S").to_string();
    push_fraction(&mut out, micros);
    let offset = chrono::Offset::fix(local.offset()).local_minus_utc();
    out.push(if offset < 0 { '-' } else { '+' });
    let offset = offset.unsigned_abs();
    out.push_str(&format!("{:02}", offset / 3600));
    if offset % 3600 != 0 {
        out.push_str(&format!(":{:02}", offset % 3600 / 60));
    }
    if offset % 60 != 0 {
        out.push_str(&format!(":{:02}", offset % 60));
    }
    Some(out)
}

fn format_micros(micros: i64) -> Option<String> {
    let at = chrono::DateTime::from_timestamp_micros(micros)?.naive_utc();
    let mut out = at.format("%Y-%m-%d %H:%M:%S").to_string();
    push_fraction(&mut out, micros);
    Some(out)
}

/// `.5` for half a second: only the digits there are, none for whole seconds.
fn push_fraction(out: &mut String, micros: i64) {
    let fraction = micros.rem_euclid(1_000_000);
    if fraction != 0 {
        let digits = format!("{fraction:06}");
        out.push('.');
        out.push_str(digits.trim_end_matches('0'));
    }
}

pub fn format_time(micros: i64) -> String {
    let seconds = micros.div_euclid(1_000_000);
    let mut out = format!(
        "{:02}:{:02}:{:02}",
        seconds / 3600,
        seconds / 60 % 60,
        seconds % 60
    );
    push_fraction(&mut out, micros);
    out
}

/// An interval in PostgreSQL's default `postgres` style: `1 year 2 mons`,
/// `-1 days`, `1 day 02:00:00`, `00:00:00.5`. After a negative part a
/// positive one is signed (`-1 days +02:00:00`), as PostgreSQL does.
pub fn format_interval(months: i32, days: i32, micros: i64) -> String {
    let mut out = String::new();
    let mut negative_before = false;
    let parts = [(months / 12, "year"), (months % 12, "mon"), (days, "day")];
    for (value, unit) in parts {
        if value == 0 {
            continue;
        }
        if !out.is_empty() {
            out.push(' ');
        }
        if negative_before && value > 0 {
            out.push('+');
        }
        let plural = if value == 1 { "" } else { "s" };
        out.push_str(&format!("{value} {unit}{plural}"));
        negative_before = value < 0;
    }
    if out.is_empty() || micros != 0 {
        if !out.is_empty() {
            out.push(' ');
        }
        if micros < 0 {
            out.push('-');
        } else if negative_before {
            out.push('+');
        }
        let magnitude = micros.unsigned_abs();
        let seconds = magnitude / 1_000_000;
        out.push_str(&format!(
            "{:02}:{:02}:{:02}",
            seconds / 3600,
            seconds / 60 % 60,
            seconds % 60
        ));
        push_fraction(&mut out, (magnitude % 1_000_000) as i64);
    }
    out
}

/// A `double precision` as `float8out` prints it.
pub fn format_f64(value: f64, extra_float_digits: i32) -> String {
    format_float(
        value,
        extra_float_digits,
        15,
        || value.to_string(),
        |p| format!("{value:.p$e}"),
        |d| format!("{value:.d$}"),
    )
}

/// A `real` as `float4out` prints it.
pub fn format_f32(value: f32, extra_float_digits: i32) -> String {
    format_float(
        value as f64,
        extra_float_digits,
        6,
        || value.to_string(),
        |p| format!("{value:.p$e}"),
        |d| format!("{value:.d$}"),
    )
}

/// PostgreSQL 12+: with `extra_float_digits` above 0, the shortest digits
/// that read back exactly, in plain notation for decimal exponents from -4
/// up to the type's digit count (15 or 6) and as `1.5e+20` beyond; else
/// `%g` with the type's digits plus `extra_float_digits`. Rust's own
/// formatting gives the digits (shortest, or rounded to a precision).
fn format_float(
    value: f64,
    extra_float_digits: i32,
    type_digits: i32,
    shortest: impl Fn() -> String,
    scientific: impl Fn(usize) -> String,
    fixed: impl Fn(usize) -> String,
) -> String {
    if value.is_nan() {
        return "NaN".into();
    }
    if value.is_infinite() {
        return if value > 0.0 { "Infinity" } else { "-Infinity" }.into();
    }
    if value == 0.0 {
        return if value.is_sign_negative() { "-0" } else { "0" }.into();
    }
    if extra_float_digits > 0 {
        let plain = shortest();
        let scientific = scientific_shortest(&plain);
        return match decimal_exponent(&scientific) {
            Some(exponent) if (-4..type_digits).contains(&exponent) => plain,
            _ => exponential(&scientific),
        };
    }
    let precision = (type_digits + extra_float_digits).max(1);
    let rounded = scientific((precision - 1) as usize);
    let Some(exponent) = decimal_exponent(&rounded) else {
        return rounded;
    };
    if exponent < -4 || exponent >= precision {
        return exponential(&rounded);
    }
    let plain = fixed((precision - 1 - exponent).max(0) as usize);
    trim_zeros(&plain).to_string()
}

/// Plain shortest digits (`0.00012`, `120000`) as `1.2e-4` / `1.2e5`.
fn scientific_shortest(plain: &str) -> String {
    let (sign, digits) = match plain.strip_prefix('-') {
        Some(rest) => ("-", rest),
        None => ("", plain),
    };
    let (whole, fraction) = digits.split_once('.').unwrap_or((digits, ""));
    let all: String = format!("{whole}{fraction}");
    let leading = all.len() - all.trim_start_matches('0').len();
    let significant = all.trim_start_matches('0').trim_end_matches('0');
    let exponent = whole.len() as i64 - 1 - leading as i64;
    let (first, rest) = significant.split_at(significant.len().min(1));
    if rest.is_empty() {
        format!("{sign}{first}e{exponent}")
    } else {
        format!("{sign}{first}.{rest}e{exponent}")
    }
}

fn decimal_exponent(scientific: &str) -> Option<i32> {
    scientific.split_once('e')?.1.parse().ok()
}

/// `1.50e20` as PostgreSQL writes it: `1.5e+20`, `1e-05`.
fn exponential(scientific: &str) -> String {
    let Some((mantissa, exponent)) = scientific.split_once('e') else {
        return scientific.to_string();
    };
    let exponent: i32 = exponent.parse().unwrap_or(0);
    let sign = if exponent < 0 { '-' } else { '+' };
    format!(
        "{}e{sign}{:02}",
        trim_zeros(mantissa),
        exponent.unsigned_abs()
    )
}

fn trim_zeros(number: &str) -> &str {
    if number.contains('.') {
        number.trim_end_matches('0').trim_end_matches('.')
    } else {
        number
    }
}

/// `weir_text_out(x)`: a value as PostgreSQL's text; `sql::rules` puts it
/// where a timestamp, time, interval or float is cast to text.
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct TextOut {
    signature: Signature,
}

/// The name of [`TextOut`].
pub const TEXT_OUT: &str = "weir_text_out";

impl Default for TextOut {
    fn default() -> TextOut {
        TextOut {
            signature: Signature::any(1, Volatility::Immutable),
        }
    }
}

impl ScalarUDFImpl for TextOut {
    fn name(&self) -> &str {
        TEXT_OUT
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _arg_types: &[DataType]) -> datafusion::error::Result<DataType> {
        Ok(DataType::Utf8)
    }

    fn invoke_with_args(
        &self,
        args: ScalarFunctionArgs,
    ) -> datafusion::error::Result<ColumnarValue> {
        let [value] = args.args.as_slice() else {
            return datafusion::common::internal_err!("{TEXT_OUT} takes one value");
        };
        let array = value.to_array(args.number_rows)?;
        let text = match render(&array, None, 1) {
            Some(text) => Arc::new(text) as ArrayRef,
            None => cast(&array, &DataType::Utf8)?,
        };
        match value {
            ColumnarValue::Scalar(_) => Ok(ColumnarValue::Scalar(ScalarValue::try_from_array(
                &text, 0,
            )?)),
            ColumnarValue::Array(_) => Ok(ColumnarValue::Array(text)),
        }
    }
}

/// The function for registration.
pub fn text_out() -> Arc<ScalarUDF> {
    Arc::new(ScalarUDF::new_from_impl(TextOut::default()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_zone(text: &str) -> Result<Tz, String> {
        crate::sql::datetime::parse_zone(text)
    }

    #[test]
    fn floats_print_as_postgres_prints_them() {
        let shortest = |v: f64| format_f64(v, 1);
        assert_eq!(shortest(1.0), "1");
        assert_eq!(shortest(1.5), "1.5");
        assert_eq!(shortest(1e20), "1e+20");
        assert_eq!(shortest(1.5e20), "1.5e+20");
        assert_eq!(shortest(1e15), "1e+15");
        assert_eq!(shortest(123456789012345.0), "123456789012345");
        assert_eq!(shortest(1e-5), "1e-05");
        assert_eq!(shortest(0.0001), "0.0001");
        assert_eq!(shortest(-0.1), "-0.1");
        assert_eq!(shortest(0.1 + 0.2), "0.30000000000000004");
        assert_eq!(shortest(f64::INFINITY), "Infinity");
        assert_eq!(shortest(f64::NEG_INFINITY), "-Infinity");
        assert_eq!(shortest(f64::NAN), "NaN");
        assert_eq!(shortest(1e300 * 10.0), "1e+301");
        assert_eq!(format_f32(0.1, 1), "0.1");
        assert_eq!(format_f32(1e6, 1), "1e+06");
        assert_eq!(format_f32(123456.0, 1), "123456");
        assert_eq!(format_f64(0.1 + 0.2, 0), "0.3");
        assert_eq!(format_f64(1e20, 0), "1e+20");
        assert_eq!(format_f64(123.456, -12), "123");
        assert_eq!(format_f64(2.0 / 3.0, 0), "0.666666666666667");
        assert_eq!(format_f32(2.0 / 3.0, 0), "0.666667");
    }

    #[test]
    fn intervals_print_in_postgres_style() {
        let hour = 3_600_000_000;
        assert_eq!(format_interval(0, 1, 2 * hour), "1 day 02:00:00");
        assert_eq!(format_interval(0, 0, 24 * hour), "24:00:00");
        assert_eq!(format_interval(1, 0, 0), "1 mon");
        assert_eq!(format_interval(14, 3, 0), "1 year 2 mons 3 days");
        assert_eq!(format_interval(0, -1, 0), "-1 days");
        assert_eq!(format_interval(0, -1, 2 * hour), "-1 days +02:00:00");
        assert_eq!(format_interval(0, 1, -hour), "1 day -01:00:00");
        assert_eq!(format_interval(0, 0, 1_500_000), "00:00:01.5");
        assert_eq!(format_interval(0, 0, -5_400_000_000), "-01:30:00");
        assert_eq!(format_interval(0, 0, 0), "00:00:00");
    }

    #[test]
    fn zoned_timestamps_carry_their_offset() {
        let zone = |z: &str| parse_zone(z).expect("a zone");
        let at = 1_704_103_200_000_000; // 2024-01-01 10:00:00 UTC
        assert_eq!(
            format_timestamp(at, Some(&zone("UTC"))).as_deref(),
            Some("2024-01-01 10:00:00+00")
        );
        assert_eq!(
            format_timestamp(at + 500_000, Some(&zone("Asia/Kolkata"))).as_deref(),
            Some("2024-01-01 15:30:00.5+05:30")
        );
        assert_eq!(
            format_timestamp(at, Some(&zone("America/New_York"))).as_deref(),
            Some("2024-01-01 05:00:00-05")
        );
        assert_eq!(format_time(36_001_500_000), "10:00:01.5");
    }

    #[test]
    fn fractions_print_only_their_digits() {
        assert_eq!(format_micros(0).as_deref(), Some("1970-01-01 00:00:00"));
        assert_eq!(
            format_micros(1_500_000).as_deref(),
            Some("1970-01-01 00:00:01.5")
        );
        assert_eq!(
            format_micros(-1).as_deref(),
            Some("1969-12-31 23:59:59.999999")
        );
    }
}
