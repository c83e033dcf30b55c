//! Dates, times and timestamps read from text as PostgreSQL 15 reads them
//! (`datetime.c`, with `DateStyle = ISO, MDY`): `2024-01-01`,
//! `2024-01-01 10:00`, `2024-01-01T10:00:00.5Z`, `Jan 1 2024`,
//! `01/02/2024`, `20240102`, `10:00 pm`, offsets (`+02`, `-07:30`) and zone
//! names (`Europe/Paris`), and `epoch`. Arrow's own parser takes only ISO
//! 8601 with seconds, so SQL casts of text (`sql::rules`), INSERT values and
//! text-format bind parameters all come here instead.
//!
//! The parts are found in order: a time (`H:MM[:SS[.frac]]`) splits the
//! text into the date before it and an AM/PM marker and zone after it; the
//! date is then read from its words and numbers.

use std::sync::Arc;

use chrono::{NaiveDate, NaiveDateTime, Offset, TimeZone};
use datafusion::arrow::array::timezone::Tz;
use datafusion::arrow::compute::kernels::cast_utils::parse_interval_month_day_nano;
use datafusion::arrow::datatypes::{DataType, IntervalUnit, TimeUnit};
use datafusion::common::ScalarValue;
use regex::Regex;

use crate::error::{Error, Result};

/// The types this module reads.
pub fn is_datetime(data_type: &DataType) -> bool {
    matches!(
        data_type,
        DataType::Timestamp(..)
            | DataType::Date32
            | DataType::Date64
            | DataType::Time64(_)
            | DataType::Interval(IntervalUnit::MonthDayNano)
    )
}

/// `text` as a value of `target`, one of the types [`is_datetime`] accepts.
pub fn parse(text: &str, target: &DataType) -> Result<ScalarValue> {
    let fail = |e: Failure| e.into_error(text, target);
    Ok(match target {
        DataType::Timestamp(unit, zone) => {
            let local = timestamp(text).map_err(fail)?;
            let micros = match zone {
                None => local.at.and_utc().timestamp_micros(),
                Some(session) => {
                    let zone = local.zone.map_or_else(|| zone_named(session), Ok);
                    to_utc(local.at, zone.map_err(fail)?).map_err(fail)?
                }
            };
            let zone = zone.clone();
            match unit {
                TimeUnit::Second => ScalarValue::TimestampSecond(Some(micros / 1_000_000), zone),
                TimeUnit::Millisecond => {
                    ScalarValue::TimestampMillisecond(Some(micros / 1_000), zone)
                }
                TimeUnit::Microsecond => ScalarValue::TimestampMicrosecond(Some(micros), zone),
                TimeUnit::Nanosecond => {
                    let nanos = micros.checked_mul(1_000).ok_or(Failure::Range);
                    ScalarValue::TimestampNanosecond(Some(nanos.map_err(fail)?), zone)
                }
            }
        }
        DataType::Date32 | DataType::Date64 => {
            let at = timestamp(text).map_err(fail)?.at;
            let days = (at.date() - NaiveDate::default()).num_days();
            match target {
                DataType::Date64 => ScalarValue::Date64(Some(days * 86_400_000)),
                _ => ScalarValue::Date32(Some(
                    i32::try_from(days).map_err(|_| fail(Failure::Range))?,
                )),
            }
        }
        DataType::Time64(unit) => {
            let micros = time_of_day(text).map_err(fail)?;
            match unit {
                TimeUnit::Nanosecond => ScalarValue::Time64Nanosecond(Some(micros * 1_000)),
                _ => ScalarValue::Time64Microsecond(Some(micros)),
            }
        }
        DataType::Interval(IntervalUnit::MonthDayNano) => {
            let value = parse_interval_month_day_nano(&interval_text(text))
                .map_err(|_| fail(Failure::Syntax))?;
            ScalarValue::IntervalMonthDayNano(Some(value))
        }
        other => {
            return Err(Error::Internal(format!(
                "datetime input asked for type {other}"
            )));
        }
    })
}

/// Why text is not a datetime; PostgreSQL tells a malformed one (22007)
/// from a well-formed one with a field out of range (22008).
#[derive(Debug)]
enum Failure {
    Syntax,
    Range,
    Zone(String),
}

impl Failure {
    fn into_error(self, text: &str, target: &DataType) -> Error {
        match self {
            Failure::Syntax => Error::InvalidDatetime(format!(
                "invalid input syntax for type {}: \"{text}\"",
                type_name(target)
            )),
            Failure::Range => {
                Error::DatetimeOutOfRange(format!("date/time field value out of range: \"{text}\""))
            }
            Failure::Zone(zone) => {
                Error::InvalidParameter(format!("time zone \"{zone}\" not recognized"))
            }
        }
    }
}

fn type_name(target: &DataType) -> &'static str {
    match target {
        DataType::Interval(_) => "interval",
        DataType::Timestamp(_, Some(_)) => "timestamp with time zone",
        DataType::Timestamp(_, None) => "timestamp",
        DataType::Time64(_) => "time",
        _ => "date",
    }
}

/// An interval as PostgreSQL writes it, in words Arrow's parser reads:
/// its time fields (`1 day 02:00:00`, `-01:30`) become hours, minutes and
/// seconds, and the `@` of the verbose style goes.
pub fn interval_text(text: &str) -> String {
    static PATTERN: std::sync::OnceLock<Regex> = std::sync::OnceLock::new();
    let pattern = PATTERN.get_or_init(|| {
        Regex::new(r"([+-]?)(\d+):(\d{1,2})(?::(\d{1,2}(?:\.\d*)?))?")
            .expect("the interval time pattern is valid")
    });
    let text = text.trim().trim_start_matches('@');
    pattern
        .replace_all(text, |c: &regex::Captures<'_>| {
            let sign = if &c[1] == "-" { "-" } else { "" };
            let seconds = c.get(4).map_or("0", |m| m.as_str());
            format!(
                "{sign}{} hours {sign}{} minutes {sign}{seconds} seconds",
                &c[2], &c[3]
            )
        })
        .into_owned()
}

/// Interval literals (`INTERVAL '1 day 02:00:00'`) in words DataFusion's
/// planner reads; it parses them before any rule runs.
pub fn rewrite_interval_literals(statement: &mut sqlparser::ast::Statement) {
    use sqlparser::ast::{Expr, Value, ValueWithSpan, visit_expressions_mut};
    let _ = visit_expressions_mut(statement, |expr| {
        if let Expr::Interval(interval) = expr
            && interval.leading_field.is_none()
            && let Expr::Value(ValueWithSpan {
                value: Value::SingleQuotedString(text),
                ..
            }) = interval.value.as_mut()
            && text.contains(':')
        {
            *text = interval_text(text);
        }
        std::ops::ControlFlow::<()>::Continue(())
    });
}

/// A local date and time, and the zone written after it, if any.
struct Local {
    at: NaiveDateTime,
    zone: Option<Tz>,
}

fn time_pattern() -> &'static Regex {
    static PATTERN: std::sync::OnceLock<Regex> = std::sync::OnceLock::new();
    PATTERN.get_or_init(|| {
        Regex::new(r"(\d{1,2}):(\d{1,2})(?::(\d{1,2})(?:\.(\d*))?)?")
            .expect("the time pattern is valid")
    })
}

fn timestamp(text: &str) -> std::result::Result<Local, Failure> {
    let trimmed = text.trim();
    if trimmed.eq_ignore_ascii_case("epoch") {
        return Ok(Local {
            at: NaiveDateTime::default(),
            zone: Some(utc()),
        });
    }
    let (date_text, time, rest) = match time_pattern().captures(trimmed) {
        Some(found) => {
            let whole = found.get(0).ok_or(Failure::Syntax)?;
            let time = clock(&found)?;
            (&trimmed[..whole.start()], time, &trimmed[whole.end()..])
        }
        None => (trimmed, 0, ""),
    };
    let date_text = date_text.trim_end();
    let date_text = date_text.strip_suffix(['T', 't']).unwrap_or(date_text);
    let date = date(date_text)?;
    let (time, zone) = suffix(rest, time)?;
    let at = date
        .and_hms_opt(0, 0, 0)
        .ok_or(Failure::Range)?
        .checked_add_signed(chrono::TimeDelta::microseconds(time))
        .ok_or(Failure::Range)?;
    Ok(Local { at, zone })
}

/// A time of day alone (`time` input): a time, an AM/PM marker, a zone
/// (which `time without time zone` ignores), and no date.
fn time_of_day(text: &str) -> std::result::Result<i64, Failure> {
    let trimmed = text.trim();
    let found = time_pattern().captures(trimmed).ok_or(Failure::Syntax)?;
    let whole = found.get(0).ok_or(Failure::Syntax)?;
    let before = &trimmed[..whole.start()];
    // A date before the time is allowed and ignored, as PostgreSQL does.
    if !before.trim().is_empty() {
        date(before.trim_end().trim_end_matches(['T', 't']))?;
    }
    let (micros, _) = suffix(&trimmed[whole.end()..], clock(&found)?)?;
    Ok(micros)
}

/// `H:MM[:SS[.frac]]` as microseconds since midnight; 24:00:00 is allowed.
fn clock(found: &regex::Captures<'_>) -> std::result::Result<i64, Failure> {
    let number = |i: usize| -> std::result::Result<i64, Failure> {
        found
            .get(i)
            .map_or(Ok(0), |m| m.as_str().parse().map_err(|_| Failure::Syntax))
    };
    let (hour, minute, second) = (number(1)?, number(2)?, number(3)?);
    let fraction = found.get(4).map_or("", |m| m.as_str());
    // Microseconds, rounded as PostgreSQL rounds input with more digits.
    let digits: String = fraction.chars().chain("0000000".chars()).take(7).collect();
    let tenths_of_micros: i64 = digits.parse().map_err(|_| Failure::Syntax)?;
    let micros = (tenths_of_micros + 5) / 10;
    if minute > 59
        || second > 60
        || hour > 24
        || (hour == 24 && (minute, second, micros) != (0, 0, 0))
    {
        return Err(Failure::Range);
    }
    Ok(((hour * 60 + minute) * 60 + second) * 1_000_000 + micros)
}

/// What may follow a time: `AM`/`PM`, then a zone.
fn suffix(rest: &str, time: i64) -> std::result::Result<(i64, Option<Tz>), Failure> {
    let mut rest = rest.trim();
    let mut time = time;
    let lower = rest.to_ascii_lowercase();
    for (marker, shift) in [("am", 0), ("pm", 12)] {
        if lower.starts_with(marker) && !lower[2..].starts_with(|c: char| c.is_alphabetic()) {
            let hour = time / 3_600_000_000;
            if hour > 12 {
                return Err(Failure::Range);
            }
            time = time % (12 * 3_600_000_000) + shift * 3_600_000_000;
            rest = rest[2..].trim_start();
            break;
        }
    }
    if rest.is_empty() {
        return Ok((time, None));
    }
    Ok((time, Some(zone_in_text(rest)?)))
}

/// A zone written after a time: `Z`, `UTC`, `+02`, `-07:30`, `+0530`, or a name.
fn zone_in_text(text: &str) -> std::result::Result<Tz, Failure> {
    let text = text.trim();
    if let Some(sign) = text.strip_prefix(['+', '-']).map(|_| &text[..1]) {
        let digits: String = text[1..].chars().filter(|c| *c != ':').collect();
        if digits.is_empty() || digits.len() > 6 || !digits.chars().all(|c| c.is_ascii_digit()) {
            return Err(Failure::Syntax);
        }
        let padded = if digits.len() % 2 == 1 {
            format!("0{digits}")
        } else {
            digits
        };
        let field = |i: usize| padded.get(i..i + 2).map_or(Ok(0), str::parse::<i32>);
        let (h, m, s) = (
            field(0).map_err(|_| Failure::Syntax)?,
            field(2).map_err(|_| Failure::Syntax)?,
            field(4).map_err(|_| Failure::Syntax)?,
        );
        if h > 15 || m > 59 || s > 59 {
            return Err(Failure::Range);
        }
        return format!("{sign}{h:02}:{m:02}")
            .parse()
            .map_err(|_| Failure::Syntax);
    }
    zone_named(text)
}

fn utc() -> Tz {
    "+00:00".parse().expect("a fixed offset is a zone")
}

/// A zone by name, as `SET TimeZone` and text after a time give it.
fn zone_named(name: &str) -> std::result::Result<Tz, Failure> {
    parse_zone(name).map_err(|_| Failure::Zone(name.to_string()))
}

/// A `TimeZone` setting: an IANA name, `UTC`/`GMT`/`Z`, or an offset such
/// as `+02:00`.
pub fn parse_zone(text: &str) -> std::result::Result<Tz, String> {
    let text = text.trim();
    if ["utc", "gmt", "z", "zulu", "etc/utc"].contains(&text.to_ascii_lowercase().as_str()) {
        return Ok(utc());
    }
    text.parse().map_err(|e| format!("{e}"))
}

/// A local time in a zone as microseconds since the epoch, as
/// `make_timestamptz` reads its fields.
pub fn local_to_utc(at: NaiveDateTime, zone: Tz) -> i64 {
    match to_utc(at, zone) {
        Ok(micros) => micros,
        Err(_) => at.and_utc().timestamp_micros(),
    }
}

/// A local time in a zone as microseconds since the epoch; in a gap or
/// overlap of a daylight-saving change, the earlier reading.
fn to_utc(at: NaiveDateTime, zone: Tz) -> std::result::Result<i64, Failure> {
    let offset = match zone.offset_from_local_datetime(&at) {
        chrono::LocalResult::Single(o) | chrono::LocalResult::Ambiguous(o, _) => o.fix(),
        chrono::LocalResult::None => zone.offset_from_utc_datetime(&at).fix(),
    };
    let utc = at - chrono::TimeDelta::seconds(offset.local_minus_utc().into());
    Ok(utc.and_utc().timestamp_micros())
}

const MONTHS: [&str; 12] = [
    "jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec",
];
const WEEKDAYS: [&str; 7] = ["mon", "tue", "wed", "thu", "fri", "sat", "sun"];

fn month_named(word: &str) -> Option<u32> {
    let lower = word.to_ascii_lowercase();
    let full = [
        "january",
        "february",
        "march",
        "april",
        "may",
        "june",
        "july",
        "august",
        "september",
        "october",
        "november",
        "december",
    ];
    let short = lower.get(..3)?;
    let at = MONTHS.iter().position(|m| *m == short)?;
    // An abbreviation, an abbreviation with a dot, or the whole name.
    let ok = lower.len() == 3 || full[at] == lower || (at == 8 && lower == "sept");
    ok.then_some(at as u32 + 1)
}

fn is_weekday(word: &str) -> bool {
    let lower = word.to_ascii_lowercase();
    lower.len() >= 3 && WEEKDAYS.iter().any(|d| lower.starts_with(d))
}

/// A date from its words and numbers: `2024-01-02`, `2024/01/02`,
/// `01/02/2024` (month first), `20240102`, `Jan 2 2024`, `2 Jan 2024`,
/// `January 2, 2024`, `2024-Jan-02`, each with an optional weekday.
fn date(text: &str) -> std::result::Result<NaiveDate, Failure> {
    let mut numbers: Vec<&str> = Vec::new();
    let mut month = None;
    for token in text
        .split([' ', ',', '-', '/', '.'])
        .filter(|t| !t.is_empty())
    {
        if token.chars().all(|c| c.is_ascii_digit()) {
            numbers.push(token);
        } else if let Some(m) = month_named(token) {
            if month.replace(m).is_some() {
                return Err(Failure::Syntax);
            }
        } else if !is_weekday(token) {
            return Err(Failure::Syntax);
        }
    }
    let number = |s: &str| s.parse::<u32>().map_err(|_| Failure::Syntax);
    let (year, month, day) = match (month, numbers.as_slice()) {
        (None, [compact]) if compact.len() == 8 => (
            number(&compact[..4])?,
            number(&compact[4..6])?,
            number(&compact[6..])?,
        ),
        (None, [y, m, d]) if y.len() >= 3 => (number(y)?, number(m)?, number(d)?),
        (None, [m, d, y]) => (year_of(y)?, number(m)?, number(d)?),
        (Some(month), [a, b]) if a.len() >= 3 => (number(a)?, month, number(b)?),
        (Some(month), [a, b]) => (year_of(b)?, month, number(a)?),
        _ => return Err(Failure::Syntax),
    };
    NaiveDate::from_ymd_opt(year as i32, month, day).ok_or(Failure::Range)
}

/// A year; two digits mean the nearest year to 2020, as PostgreSQL reads them.
fn year_of(text: &str) -> std::result::Result<u32, Failure> {
    let year: u32 = text.parse().map_err(|_| Failure::Syntax)?;
    Ok(match text.len() {
        1 | 2 if year < 70 => year + 2000,
        1 | 2 => year + 1900,
        _ => year,
    })
}

/// `pg_datetime_in(text, typed null)`: the text read as the second
/// argument's type; `sql::rules` puts it where a cast of text would use
/// Arrow's parser.
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct DatetimeIn {
    signature: datafusion::logical_expr::Signature,
}

/// The name of [`DatetimeIn`].
pub const DATETIME_IN: &str = "weir_datetime_in";

impl Default for DatetimeIn {
    fn default() -> DatetimeIn {
        DatetimeIn {
            signature: datafusion::logical_expr::Signature::any(
                2,
                datafusion::logical_expr::Volatility::Immutable,
            ),
        }
    }
}

impl datafusion::logical_expr::ScalarUDFImpl for DatetimeIn {
    fn name(&self) -> &str {
        DATETIME_IN
    }

    fn signature(&self) -> &datafusion::logical_expr::Signature {
        &self.signature
    }

    fn return_type(&self, arg_types: &[DataType]) -> datafusion::error::Result<DataType> {
        Ok(arg_types.get(1).cloned().unwrap_or(DataType::Null))
    }

    fn invoke_with_args(
        &self,
        args: datafusion::logical_expr::ScalarFunctionArgs,
    ) -> datafusion::error::Result<datafusion::logical_expr::ColumnarValue> {
        use datafusion::arrow::array::{Array, AsArray};
        use datafusion::logical_expr::ColumnarValue;
        let target = args.return_field.data_type().clone();
        let read = |value: Option<&str>| match value {
            Some(text) => parse(text, &target).map_err(datafusion::error::DataFusionError::from),
            None => ScalarValue::try_from(&target),
        };
        let text = match args.args.first() {
            Some(ColumnarValue::Scalar(scalar)) => {
                let scalar = scalar.cast_to(&DataType::Utf8)?;
                let ScalarValue::Utf8(value) = scalar else {
                    return datafusion::common::internal_err!("text cast to Utf8 is {scalar}");
                };
                return Ok(ColumnarValue::Scalar(read(value.as_deref())?));
            }
            Some(ColumnarValue::Array(array)) => {
                datafusion::arrow::compute::cast(array, &DataType::Utf8)?
            }
            None => return datafusion::common::internal_err!("{DATETIME_IN} without text"),
        };
        let strings = text.as_string::<i32>();
        let values = (0..strings.len())
            .map(|i| read((!strings.is_null(i)).then(|| strings.value(i))))
            .collect::<datafusion::error::Result<Vec<_>>>()?;
        if values.is_empty() {
            return Ok(ColumnarValue::Array(
                datafusion::arrow::array::new_empty_array(&target),
            ));
        }
        Ok(ColumnarValue::Array(ScalarValue::iter_to_array(values)?))
    }
}

/// The function for registration.
pub fn datetime_in() -> Arc<datafusion::logical_expr::ScalarUDF> {
    Arc::new(datafusion::logical_expr::ScalarUDF::new_from_impl(
        DatetimeIn::default(),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shown(text: &str, target: &DataType) -> String {
        match parse(text, target) {
            Ok(value) => {
                let array = value.to_array().expect("a scalar is an array");
                datafusion::arrow::util::display::array_value_to_string(&array, 0).expect("shown")
            }
            Err(e) => format!("{}: {}", e.sqlstate(), e.message()),
        }
    }

    const TS: DataType = DataType::Timestamp(TimeUnit::Microsecond, None);

    fn tstz() -> DataType {
        DataType::Timestamp(TimeUnit::Microsecond, Some("+00:00".into()))
    }

    #[test]
    fn timestamps_in_every_spelling() {
        for (text, expected) in [
            ("2024-01-01", "2024-01-01T00:00:00"),
            ("2024-01-01 10:00", "2024-01-01T10:00:00"),
            ("2024-01-01T10:00:00Z", "2024-01-01T10:00:00"),
            ("2024-01-01T10:00:00.000+02:00", "2024-01-01T10:00:00"),
            ("Jan 1 2024", "2024-01-01T00:00:00"),
            ("January 2, 2024 10:30 pm", "2024-01-02T22:30:00"),
            ("2 Jan 2024", "2024-01-02T00:00:00"),
            ("2024-Jan-02", "2024-01-02T00:00:00"),
            ("Tue Jan 02 2024 10:00", "2024-01-02T10:00:00"),
            ("01/02/2024", "2024-01-02T00:00:00"),
            ("2024/01/02", "2024-01-02T00:00:00"),
            ("20240102", "2024-01-02T00:00:00"),
            ("2024-1-2 3:4:5", "2024-01-02T03:04:05"),
            ("2024-01-02 12:00 am", "2024-01-02T00:00:00"),
            ("2024-01-01 10:00:00.123456", "2024-01-01T10:00:00.123456"),
            ("2024-01-01 24:00", "2024-01-02T00:00:00"),
            (" epoch ", "1970-01-01T00:00:00"),
        ] {
            assert_eq!(shown(text, &TS), expected, "{text}");
        }
    }

    #[test]
    fn zones_apply_to_timestamps_with_time_zone() {
        for (text, expected) in [
            ("2024-01-01 10:00", "2024-01-01T10:00:00Z"),
            ("2024-01-01 10:00+02", "2024-01-01T08:00:00Z"),
            ("2024-01-02 10:00:00.5-07:30", "2024-01-02T17:30:00.500Z"),
            ("2024-01-01 10:00 Europe/Paris", "2024-01-01T09:00:00Z"),
            ("2024-01-01T10:00:00Z", "2024-01-01T10:00:00Z"),
        ] {
            assert_eq!(shown(text, &tstz()), expected, "{text}");
        }
    }

    #[test]
    fn dates_and_times() {
        assert_eq!(shown("2024-01-02 10:00", &DataType::Date32), "2024-01-02");
        assert_eq!(shown("January 2, 2024", &DataType::Date32), "2024-01-02");
        let time = DataType::Time64(TimeUnit::Microsecond);
        assert_eq!(shown("10:00:00.123+02", &time), "10:00:00.123");
        assert_eq!(shown("10:00 pm", &time), "22:00:00");
        let interval = DataType::Interval(IntervalUnit::MonthDayNano);
        assert_eq!(
            interval_text("1 day -02:30:00.5"),
            "1 day -02 hours -30 minutes -00.5 seconds"
        );
        assert!(parse("1 year 2 mons 3 days 04:05:06.5", &interval).is_ok());
        assert_eq!(
            shown("nonsense", &interval),
            "22007: invalid input syntax for type interval: \"nonsense\""
        );
    }

    #[test]
    fn bad_text_fails_as_postgres_does() {
        assert_eq!(
            shown("garbage", &TS),
            "22007: invalid input syntax for type timestamp: \"garbage\""
        );
        assert_eq!(
            shown("garbage", &tstz()),
            "22007: invalid input syntax for type timestamp with time zone: \"garbage\""
        );
        assert_eq!(
            shown("2024-13-01", &TS),
            "22008: date/time field value out of range: \"2024-13-01\""
        );
        assert_eq!(
            shown("2024-02-30", &DataType::Date32),
            "22008: date/time field value out of range: \"2024-02-30\""
        );
        let time = DataType::Time64(TimeUnit::Microsecond);
        assert_eq!(
            shown("25:00", &time),
            "22008: date/time field value out of range: \"25:00\""
        );
        assert_eq!(
            shown("garbage", &time),
            "22007: invalid input syntax for type time: \"garbage\""
        );
    }
}
