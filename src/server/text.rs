//! Values in PostgreSQL's text format where the Arrow encoder differs from
//! it: PostgreSQL prints a timestamp's fraction of a second only as far as
//! it has digits (`10:00:00`, `10:00:00.5`), never padded to six.

use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, RecordBatch, StringArray};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::{DataType, Field, Schema, TimeUnit};
use pgwire::api::results::{FieldFormat, FieldInfo};
use pgwire::messages::data::DataRow;

use crate::sql::handlers::copy::CopyFormat;

/// The batch with its text-format timestamp columns rendered as PostgreSQL
/// renders them (ISO date style); other columns are left alone.
pub fn timestamps_as_postgres(batch: RecordBatch, fields: &[FieldInfo]) -> RecordBatch {
    let schema = batch.schema();
    let needs = |i: usize| {
        matches!(schema.field(i).data_type(), DataType::Timestamp(..))
            && fields
                .get(i)
                .is_some_and(|f| f.format() == FieldFormat::Text)
    };
    if !(0..batch.num_columns()).any(needs) {
        return batch;
    }
    let mut columns = batch.columns().to_vec();
    let mut schema_fields: Vec<Field> =
        schema.fields().iter().map(|f| f.as_ref().clone()).collect();
    for (i, column) in columns.iter_mut().enumerate() {
        if !needs(i) {
            continue;
        }
        let DataType::Timestamp(_, zone) = schema.field(i).data_type() else {
            continue;
        };
        let Some(rendered) = render(column, zone.is_some()) else {
            continue;
        };
        *column = rendered;
        schema_fields[i] = schema_fields[i].clone().with_data_type(DataType::Utf8);
    }
    RecordBatch::try_new(Arc::new(Schema::new(schema_fields)), columns).unwrap_or(batch)
}

/// Timestamps as text; zoned ones in UTC with PostgreSQL's `+00` suffix.
fn render(column: &ArrayRef, zoned: bool) -> Option<ArrayRef> {
    let micros = cast(column, &DataType::Timestamp(TimeUnit::Microsecond, None)).ok()?;
    let micros = cast(&micros, &DataType::Int64).ok()?;
    let values = micros
        .as_any()
        .downcast_ref::<datafusion::arrow::array::Int64Array>()?;
    let text: StringArray = (0..values.len())
        .map(|i| {
            if values.is_null(i) {
                return None;
            }
            let mut out = format_micros(values.value(i))?;
            if zoned {
                out.push_str("+00");
            }
            Some(out)
        })
        .collect();
    Some(Arc::new(text))
}

fn format_micros(micros: i64) -> Option<String> {
    let at = chrono::DateTime::from_timestamp_micros(micros)?.naive_utc();
    let mut out = at.format("%Y-%m-%d %H:%M:%S").to_string();
    let fraction = micros.rem_euclid(1_000_000);
    if fraction != 0 {
        let digits = format!("{fraction:06}");
        out.push('.');
        out.push_str(digits.trim_end_matches('0'));
    }
    Some(out)
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
    use super::{CopyFormat, copy_line, format_micros};

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
