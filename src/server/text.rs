//! Values in PostgreSQL's text format where the Arrow encoder differs from
//! it: timestamps, times and intervals print a fraction of a second only as
//! far as it has digits (`10:00:00.5`, never padded to six), a timestamp
//! with a zone prints in the session's `TimeZone` with its offset
//! (`2024-01-01 10:00:00+00`), and floats print as PostgreSQL 15 prints
//! them (`1`, `1e+20`, `Infinity`), honouring `extra_float_digits`.

use std::sync::Arc;

use datafusion::arrow::array::timezone::Tz;
use datafusion::arrow::array::{
    Array, ArrayRef, AsArray, Float32Array, Float64Array, Int64Array, RecordBatch, StringArray,
};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::{
    DataType, Field, Float32Type, Float64Type, IntervalMonthDayNanoType, IntervalUnit, Schema,
    TimeUnit,
};
use pgwire::api::results::{FieldFormat, FieldInfo};
use pgwire::messages::data::DataRow;

use crate::sql::datetime::parse_zone;
use crate::sql::handlers::copy::CopyFormat;

/// How a session wants values printed (`SET TimeZone`, `SET extra_float_digits`).
#[derive(Debug, Clone)]
pub struct TextStyle {
    /// Where timestamps with a zone are shown.
    pub zone: Tz,
    /// Above 0: the shortest text that reads back exactly; else that many
    /// digits more or fewer than 15 (6 for `real`).
    pub extra_float_digits: i32,
}

impl Default for TextStyle {
    fn default() -> TextStyle {
        TextStyle {
            zone: "+00:00".parse().expect("a fixed offset is a zone"),
            extra_float_digits: 1,
        }
    }
}

impl TextStyle {
    /// The style of session variables by lower-case name; values that do
    /// not parse keep the default (SET refuses them).
    pub fn from_settings<'a>(setting: impl Fn(&str) -> Option<&'a str>) -> TextStyle {
        let mut style = TextStyle::default();
        if let Some(zone) = setting("timezone").and_then(|z| parse_zone(z).ok()) {
            style.zone = zone;
        }
        if let Some(digits) = setting("extra_float_digits").and_then(|d| d.trim().parse().ok()) {
            style.extra_float_digits = digits;
        }
        style
    }
}

/// The batch with its text-format columns of the types above rendered as
/// PostgreSQL renders them; other columns are left alone.
pub fn as_postgres(batch: RecordBatch, fields: &[FieldInfo], style: &TextStyle) -> RecordBatch {
    let schema = batch.schema();
    let text = |i: usize| {
        fields
            .get(i)
            .is_some_and(|f| f.format() == FieldFormat::Text)
    };
    let rendered: Vec<Option<ArrayRef>> = batch
        .columns()
        .iter()
        .enumerate()
        .map(|(i, column)| if text(i) { render(column, style) } else { None })
        .collect();
    if rendered.iter().all(Option::is_none) {
        return batch;
    }
    let mut columns = batch.columns().to_vec();
    let mut schema_fields: Vec<Field> =
        schema.fields().iter().map(|f| f.as_ref().clone()).collect();
    for (i, column) in rendered.into_iter().enumerate() {
        if let Some(column) = column {
            columns[i] = column;
            schema_fields[i] = schema_fields[i].clone().with_data_type(DataType::Utf8);
        }
    }
    RecordBatch::try_new(Arc::new(Schema::new(schema_fields)), columns).unwrap_or(batch)
}

/// A column as text, when its type prints differently from Arrow's encoder.
fn render(column: &ArrayRef, style: &TextStyle) -> Option<ArrayRef> {
    let text: StringArray = match column.data_type() {
        DataType::Timestamp(_, zone) => {
            let zone = zone.as_ref().map(|_| &style.zone);
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
                .map(|v| v.map(|v| format_f64(v, style.extra_float_digits)))
                .collect()
        }
        DataType::Float32 => {
            let floats: &Float32Array = column.as_primitive::<Float32Type>();
            floats
                .iter()
                .map(|v| v.map(|v| format_f32(v, style.extra_float_digits)))
                .collect()
        }
        DataType::Interval(IntervalUnit::MonthDayNano) => column
            .as_primitive::<IntervalMonthDayNanoType>()
            .iter()
            .map(|v| v.map(|v| format_interval(v.months, v.days, v.nanoseconds / 1000)))
            .collect(),
        _ => return None,
    };
    Some(Arc::new(text))
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

fn format_time(micros: i64) -> String {
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

/// One row as a COPY line in the client's format. The row encoder wrote
/// each field as a big-endian length (-1 for NULL) and its text.
pub fn copy_line(row: &DataRow, format: &CopyFormat, out: &mut bytes::BytesMut) {
    let data = &row.data;
    let mut at = 0;
    for field in 0..row.field_count {
        if field > 0 {
            out.extend_from_slice(&[format.delimiter]);
        }
        let Some(head) = data.get(at..at + 4) else {
            break;
        };
        let len = i32::from_be_bytes([head[0], head[1], head[2], head[3]]);
        at += 4;
        if len < 0 {
            out.extend_from_slice(format.null.as_bytes());
            continue;
        }
        let end = (at + len as usize).min(data.len());
        if format.csv {
            csv_field(&data[at..end], format, out);
        } else {
            text_field(&data[at..end], format.delimiter, out);
        }
        at = end;
    }
    out.extend_from_slice(b"\n");
}

/// The text format escapes backslash, the delimiter and line breaks.
fn text_field(value: &[u8], delimiter: u8, out: &mut bytes::BytesMut) {
    for &byte in value {
        match byte {
            b'\\' => out.extend_from_slice(b"\\\\"),
            b'\n' => out.extend_from_slice(b"\\n"),
            b'\r' => out.extend_from_slice(b"\\r"),
            b'\t' if delimiter == b'\t' => out.extend_from_slice(b"\\t"),
            other if other == delimiter => out.extend_from_slice(&[b'\\', other]),
            other => out.extend_from_slice(&[other]),
        }
    }
}

/// CSV quotes a value that could be misread: one holding the delimiter, a
/// quote or a line break, one equal to the NULL string, and the empty
/// string when NULL is written as nothing.
fn csv_field(value: &[u8], format: &CopyFormat, out: &mut bytes::BytesMut) {
    let quote = value == format.null.as_bytes()
        || value
            .iter()
            .any(|&b| b == format.delimiter || matches!(b, b'"' | b'\n' | b'\r'));
    if !quote {
        out.extend_from_slice(value);
        return;
    }
    out.extend_from_slice(b"\"");
    for &byte in value {
        if byte == b'"' {
            out.extend_from_slice(b"\"");
        }
        out.extend_from_slice(&[byte]);
    }
    out.extend_from_slice(b"\"");
}

/// The header line of a CSV or text COPY: the column names.
pub fn copy_header(names: &[&str], format: &CopyFormat, out: &mut bytes::BytesMut) {
    let mut data = bytes::BytesMut::new();
    for name in names {
        data.extend_from_slice(&(name.len() as i32).to_be_bytes());
        data.extend_from_slice(name.as_bytes());
    }
    copy_line(&DataRow::new(data, names.len() as i16), format, out);
}

#[cfg(test)]
mod tests {
    use super::*;

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

    fn row(fields: &[Option<&str>]) -> pgwire::messages::data::DataRow {
        let mut data = bytes::BytesMut::new();
        for field in fields {
            match field {
                Some(text) => {
                    data.extend_from_slice(&(text.len() as i32).to_be_bytes());
                    data.extend_from_slice(text.as_bytes());
                }
                None => data.extend_from_slice(&(-1i32).to_be_bytes()),
            }
        }
        pgwire::messages::data::DataRow::new(data, fields.len() as i16)
    }

    #[test]
    fn copy_lines_escape_and_mark_nulls() {
        let mut out = bytes::BytesMut::new();
        let fields = [Some("a\tb\\c\n"), None, Some("")];
        copy_line(&row(&fields), &CopyFormat::default(), &mut out);
        assert_eq!(&out[..], b"a\\tb\\\\c\\n\t\\N\t\n");
    }

    #[test]
    fn csv_lines_quote_what_could_be_misread() {
        let csv = CopyFormat {
            csv: true,
            delimiter: b',',
            header: false,
            null: String::new(),
        };
        let mut out = bytes::BytesMut::new();
        let fields = [
            Some("plain"),
            Some("a,b"),
            Some("say \"hi\""),
            None,
            Some(""),
        ];
        copy_line(&row(&fields), &csv, &mut out);
        assert_eq!(&out[..], b"plain,\"a,b\",\"say \"\"hi\"\"\",,\"\"\n");
    }
}
