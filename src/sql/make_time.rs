//! PostgreSQL's `make_timestamp(year, month, mday, hour, min, sec)` and
//! `make_timestamptz(..., [timezone])`: a time from its fields, checked as
//! PostgreSQL checks them (22008 for a field out of range, 22023 for an
//! unknown zone). Without a zone, `make_timestamptz` reads the fields in
//! the session's time zone: [`spell_zone`] writes the session's `TimeZone`
//! into the call, so that a view keeps the zone it was created in.

use std::sync::Arc;

use std::ops::ControlFlow;

use chrono::{NaiveDate, NaiveDateTime, NaiveTime};
use datafusion::arrow::array::{Array, ArrayRef, AsArray, TimestampMicrosecondArray};
use datafusion::arrow::datatypes::{DataType, Float64Type, Int64Type, TimeUnit};
use datafusion::common::{DataFusionError, Result as DfResult, ScalarValue};
use datafusion::logical_expr::{
    ColumnarValue, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, TypeSignature,
    Volatility,
};
use sqlparser::ast::{
    Expr, FunctionArg, FunctionArgExpr, FunctionArguments, Value, VisitMut, VisitorMut,
};

use crate::error::Error;

/// Both functions, to register.
pub fn functions() -> Vec<ScalarUDF> {
    vec![
        ScalarUDF::new_from_impl(MakeTimestamp::new(false)),
        ScalarUDF::new_from_impl(MakeTimestamp::new(true)),
    ]
}

/// Give every `make_timestamptz` without a zone the session's `zone`.
pub fn spell_zone<V: VisitMut>(node: &mut V, zone: &str) {
    let _ = node.visit(&mut SpellZone(zone));
}

struct SpellZone<'a>(&'a str);

impl VisitorMut for SpellZone<'_> {
    type Break = ();

    fn post_visit_expr(&mut self, expr: &mut Expr) -> ControlFlow<()> {
        if let Expr::Function(function) = expr
            && function
                .name
                .to_string()
                .eq_ignore_ascii_case("make_timestamptz")
            && let FunctionArguments::List(list) = &mut function.args
            && list.args.len() == 6
        {
            let zone = Expr::value(Value::SingleQuotedString(self.0.to_string()));
            list.args
                .push(FunctionArg::Unnamed(FunctionArgExpr::Expr(zone)));
        }
        ControlFlow::Continue(())
    }
}

#[derive(Debug, PartialEq, Eq, Hash)]
struct MakeTimestamp {
    signature: Signature,
    /// `make_timestamptz`: the result is an instant, read in a zone.
    with_zone: bool,
}

impl MakeTimestamp {
    fn new(with_zone: bool) -> MakeTimestamp {
        let fields = vec![
            DataType::Int64,
            DataType::Int64,
            DataType::Int64,
            DataType::Int64,
            DataType::Int64,
            DataType::Float64,
        ];
        let mut signatures = vec![TypeSignature::Exact(fields.clone())];
        if with_zone {
            let mut zoned = fields;
            zoned.push(DataType::Utf8);
            signatures.push(TypeSignature::Exact(zoned));
        }
        MakeTimestamp {
            signature: Signature::one_of(signatures, Volatility::Immutable),
            with_zone,
        }
    }
}

impl ScalarUDFImpl for MakeTimestamp {
    fn name(&self) -> &str {
        if self.with_zone {
            "make_timestamptz"
        } else {
            "make_timestamp"
        }
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _args: &[DataType]) -> DfResult<DataType> {
        let zone = self.with_zone.then(|| Arc::from("+00:00"));
        Ok(DataType::Timestamp(TimeUnit::Microsecond, zone))
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> DfResult<ColumnarValue> {
        let scalar = args
            .args
            .iter()
            .all(|a| matches!(a, ColumnarValue::Scalar(_)));
        let arrays = ColumnarValue::values_to_arrays(&args.args)?;
        let session_zone = args
            .config_options
            .execution
            .time_zone
            .clone()
            .unwrap_or_else(|| "+00:00".to_string());
        let mut out = Vec::with_capacity(args.number_rows);
        for row in 0..args.number_rows {
            out.push(self.one(&arrays, row, &session_zone)?);
        }
        let micros = TimestampMicrosecondArray::from(out);
        let result: ArrayRef = match self.with_zone {
            true => Arc::new(micros.with_timezone("+00:00")),
            false => Arc::new(micros),
        };
        if scalar {
            return Ok(ColumnarValue::Scalar(ScalarValue::try_from_array(
                &result, 0,
            )?));
        }
        Ok(ColumnarValue::Array(result))
    }
}

impl MakeTimestamp {
    /// One row's time in microseconds since 1970; NULL when any field is.
    fn one(&self, arrays: &[ArrayRef], row: usize, session_zone: &str) -> DfResult<Option<i64>> {
        if arrays.iter().any(|a| a.is_null(row)) {
            return Ok(None);
        }
        let int = |i: usize| arrays[i].as_primitive::<Int64Type>().value(row);
        let seconds = arrays[5].as_primitive::<Float64Type>().value(row);
        let at = local_time([int(0), int(1), int(2), int(3), int(4)], seconds)?;
        if !self.with_zone {
            return Ok(Some(at.and_utc().timestamp_micros()));
        }
        let zone = match arrays.get(6) {
            Some(zones) => zones.as_string::<i32>().value(row).to_string(),
            None => session_zone.to_string(),
        };
        let zone = crate::sql::datetime::parse_zone(&zone).map_err(|_| {
            external(Error::InvalidParameter(format!(
                "time zone \"{zone}\" not recognized"
            )))
        })?;
        Ok(Some(crate::sql::datetime::local_to_utc(at, zone)))
    }
}

/// The fields as a time, or PostgreSQL's error for the first out of range.
fn local_time([year, month, day, hour, minute]: [i64; 5], seconds: f64) -> DfResult<NaiveDateTime> {
    // PostgreSQL counts years before 1 as BC: -1 is 1 BC, year 0 of the
    // proleptic calendar; there is no year 0.
    let calendar_year = if year < 0 { year + 1 } else { year };
    let date = (year != 0)
        .then(|| {
            NaiveDate::from_ymd_opt(
                i32::try_from(calendar_year).ok()?,
                u32::try_from(month).ok()?,
                u32::try_from(day).ok()?,
            )
        })
        .flatten()
        .ok_or_else(|| {
            external(Error::DatetimeOutOfRange(format!(
                "date field value out of range: {year}-{month:02}-{day:02}"
            )))
        })?;
    let time_error = || {
        external(Error::DatetimeOutOfRange(format!(
            "time field value out of range: {hour:02}:{minute:02}:{}",
            seconds_text(seconds)
        )))
    };
    // 24:00:00 is allowed, as the end of the day.
    let whole_day = hour == 24 && minute == 0 && seconds == 0.0;
    if !whole_day
        && (!(0..24).contains(&hour)
            || !(0..60).contains(&minute)
            || !(0.0..60.0).contains(&seconds)
            || !seconds.is_finite())
    {
        return Err(time_error());
    }
    let micros = (seconds * 1e6).round() as i64;
    let time = NaiveTime::from_hms_opt(0, 0, 0).expect("midnight");
    let start = NaiveDateTime::new(date, time);
    let offset = chrono::TimeDelta::hours(hour)
        + chrono::TimeDelta::minutes(minute)
        + chrono::TimeDelta::microseconds(micros);
    start.checked_add_signed(offset).ok_or_else(time_error)
}

/// Seconds as PostgreSQL prints them in its message: `55.33`, `61`.
fn seconds_text(seconds: f64) -> String {
    let text = format!("{seconds:.6}");
    text.trim_end_matches('0').trim_end_matches('.').to_string()
}

fn external(e: Error) -> DataFusionError {
    DataFusionError::External(Box::new(e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_make_a_time_or_postgresqls_error() {
        let at = local_time([1973, 7, 15, 8, 15], 55.33).expect("valid");
        assert_eq!(at.to_string(), "1973-07-15 08:15:55.330");
        let end = local_time([2024, 2, 29, 24, 0], 0.0).expect("the end of the day");
        assert_eq!(end.to_string(), "2024-03-01 00:00:00");
        let e = local_time([2021, 13, 1, 0, 0], 0.0).expect_err("month 13");
        assert_eq!(
            e.to_string(),
            "External error: date field value out of range: 2021-13-01"
        );
        let e = local_time([2021, 1, 1, 25, 0], 55.33).expect_err("hour 25");
        assert!(
            e.to_string()
                .ends_with("time field value out of range: 25:00:55.33"),
            "{e}"
        );
        assert!(local_time([0, 1, 1, 0, 0], 0.0).is_err(), "no year 0");
        assert!(local_time([2021, 1, 1, 0, 0], 60.0).is_err());
    }
}
