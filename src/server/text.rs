//! Values in PostgreSQL's text format where the Arrow encoder differs from
//! it (`sql::text` says how), in the session's `TimeZone` and
//! `extra_float_digits`; and COPY lines.

use std::sync::Arc;

use datafusion::arrow::array::timezone::Tz;
use datafusion::arrow::array::{ArrayRef, RecordBatch};
use datafusion::arrow::datatypes::{DataType, Field, Schema};
use pgwire::api::results::{FieldFormat, FieldInfo};
use pgwire::messages::data::DataRow;

use crate::session::handlers::copy::CopyFormat;
use crate::session::wire::{self, parse_zone};

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

/// The schema a result is described by on the wire. PostgreSQL has no
/// unsigned integers, and types `row_number()`, `rank()` and `dense_rank()`
/// `bigint` where DataFusion's are `UInt64`: such columns go out as
/// `bigint` (not `numeric`, as Arrow's encoder would have them).
pub fn wire_schema(schema: &Schema) -> Schema {
    let fields: Vec<Field> = schema
        .fields()
        .iter()
        .map(|f| match f.data_type() {
            DataType::UInt64 => f.as_ref().clone().with_data_type(DataType::Int64),
            _ => f.as_ref().clone(),
        })
        .collect();
    Schema::new_with_metadata(fields, schema.metadata().clone())
}

/// The batch with its `UInt64` columns as `Int64`, as [`wire_schema`]
/// describes them. A value past `bigint`'s range (no window function
/// numbers that many rows) stays unsigned and prints as its digits.
fn signed(batch: RecordBatch) -> RecordBatch {
    if !batch
        .columns()
        .iter()
        .any(|c| c.data_type() == &DataType::UInt64)
    {
        return batch;
    }
    let strict = datafusion::arrow::compute::CastOptions {
        safe: false,
        ..Default::default()
    };
    let columns: Vec<ArrayRef> = batch
        .columns()
        .iter()
        .map(|c| match c.data_type() {
            DataType::UInt64 => {
                datafusion::arrow::compute::cast_with_options(c, &DataType::Int64, &strict)
                    .unwrap_or_else(|_| c.clone())
            }
            _ => c.clone(),
        })
        .collect();
    let fields: Vec<Field> = batch
        .schema()
        .fields()
        .iter()
        .zip(&columns)
        .map(|(f, c)| f.as_ref().clone().with_data_type(c.data_type().clone()))
        .collect();
    RecordBatch::try_new(Arc::new(Schema::new(fields)), columns).unwrap_or(batch)
}

/// The batch with its text-format columns of the types above rendered as
/// PostgreSQL renders them; other columns are left alone.
pub fn as_postgres(batch: RecordBatch, fields: &[FieldInfo], style: &TextStyle) -> RecordBatch {
    let batch = signed(batch);
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
    let text = wire::render(column, Some(&style.zone), style.extra_float_digits)?;
    Some(Arc::new(text))
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
