//! Values in PostgreSQL's text format where the Arrow encoder differs from
//! it: PostgreSQL prints a timestamp's fraction of a second only as far as
//! it has digits (`10:00:00`, `10:00:00.5`), never padded to six.

use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, RecordBatch, StringArray};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::{DataType, Field, Schema, TimeUnit};
use pgwire::api::results::{FieldFormat, FieldInfo};

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

/// One row in COPY's text format: fields as the row encoder wrote them
/// (each a big-endian length, -1 for NULL, then the text), tab-separated,
/// with backslash, tab, newline and carriage return escaped, `\N` for NULL.
pub fn copy_text_line(row: &pgwire::messages::data::DataRow, out: &mut bytes::BytesMut) {
    let data = &row.data;
    let mut at = 0;
    for field in 0..row.field_count {
        if field > 0 {
            out.extend_from_slice(b"\t");
        }
        let Some(head) = data.get(at..at + 4) else {
            break;
        };
        let len = i32::from_be_bytes([head[0], head[1], head[2], head[3]]);
        at += 4;
        if len < 0 {
            out.extend_from_slice(b"\\N");
            continue;
        }
        let end = (at + len as usize).min(data.len());
        for &byte in &data[at..end] {
            match byte {
                b'\\' => out.extend_from_slice(b"\\\\"),
                b'\t' => out.extend_from_slice(b"\\t"),
                b'\n' => out.extend_from_slice(b"\\n"),
                b'\r' => out.extend_from_slice(b"\\r"),
                other => out.extend_from_slice(&[other]),
            }
        }
        at = end;
    }
    out.extend_from_slice(b"\n");
}

#[cfg(test)]
mod tests {
    use super::{copy_text_line, format_micros};

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

    #[test]
    fn copy_lines_escape_and_mark_nulls() {
        let mut data = bytes::BytesMut::new();
        for field in [Some("a\tb\\c\n"), None, Some("")] {
            match field {
                Some(text) => {
                    data.extend_from_slice(&(text.len() as i32).to_be_bytes());
                    data.extend_from_slice(text.as_bytes());
                }
                None => data.extend_from_slice(&(-1i32).to_be_bytes()),
            }
        }
        let row = pgwire::messages::data::DataRow::new(data, 3);
        let mut out = bytes::BytesMut::new();
        copy_text_line(&row, &mut out);
        assert_eq!(&out[..], b"a\\tb\\\\c\\n\t\\N\t\n");
    }
}
