//! Decoding only the string columns a dataflow reads.
//!
//! Arrow's row format lays a row's fields end to end, each in an encoding
//! that ends itself: a fixed-width field is a validity byte and the value;
//! a string or binary field is a sentinel byte and, when it holds bytes,
//! blocks of 8 and then 32 bytes, each followed by a byte that says whether
//! another block follows. So a row's fields can be cut apart without
//! decoding them. A string column no operator reads is stepped over block
//! by block instead of being copied out and checked as UTF-8, and comes
//! back as empty strings; the other columns are cut out and decoded by a
//! converter of their own.

use std::sync::Arc;

use datafusion::arrow::array::{ArrayRef, RecordBatch, StringArray};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::{DataType, SchemaRef};
use datafusion::arrow::row::{RowConverter, SortField};

use crate::error::{Error, Result};

/// Sentinel of a string that holds bytes (ascending order).
const NON_EMPTY: u8 = 2;
/// Trailing byte of a block that another block follows.
const CONTINUATION: u8 = 0xFF;
const MINI_BLOCK: usize = 8;
const MINI_BLOCKS: usize = 4;
const BLOCK: usize = 32;

#[derive(Clone, Copy)]
enum Width {
    Fixed(usize),
    Variable,
}

/// How to decode a table's rows keeping some of its string columns.
pub struct Projection {
    widths: Vec<Width>,
    keep: Vec<bool>,
    converter: RowConverter,
    schema: SchemaRef,
}

impl Projection {
    /// A projection reading the columns `read` of `schema` (every
    /// fixed-width column is decoded anyway); `None` when it would skip no
    /// string column, or when a column's type is one it cannot step over.
    pub fn new(schema: &SchemaRef, read: &[usize]) -> Result<Option<Projection>> {
        let Some(widths) = schema
            .fields()
            .iter()
            .map(|f| width(f.data_type()))
            .collect::<Option<Vec<Width>>>()
        else {
            return Ok(None);
        };
        let keep: Vec<bool> = widths
            .iter()
            .enumerate()
            .map(|(i, w)| matches!(w, Width::Fixed(_)) || read.contains(&i))
            .collect();
        if keep.iter().all(|k| *k) {
            return Ok(None);
        }
        let fields = schema
            .fields()
            .iter()
            .zip(&keep)
            .filter(|(_, keep)| **keep)
            .map(|(f, _)| SortField::new(f.data_type().clone()))
            .collect();
        Ok(Some(Projection {
            widths,
            keep,
            converter: RowConverter::new(fields)?,
            schema: schema.clone(),
        }))
    }

    /// Rows in the table's schema, the skipped columns empty.
    pub fn decode<'a>(&self, encoded: impl IntoIterator<Item = &'a [u8]>) -> Result<RecordBatch> {
        let mut cut = Vec::new();
        let mut ends = vec![0];
        for row in encoded {
            self.cut(row, &mut cut)?;
            ends.push(cut.len());
        }
        let parser = self.converter.parser();
        let rows: Vec<_> = ends
            .windows(2)
            .map(|w| parser.parse(&cut[w[0]..w[1]]))
            .collect();
        let count = rows.len();
        let mut kept = self.converter.convert_rows(rows)?.into_iter();
        let columns = self
            .schema
            .fields()
            .iter()
            .zip(&self.keep)
            .map(|(field, keep)| match keep {
                true => kept
                    .next()
                    .ok_or_else(|| Error::Internal("a kept column is missing".into())),
                false => empty(field.data_type(), count),
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(RecordBatch::try_new(self.schema.clone(), columns)?)
    }

    /// Append the bytes of `row`'s kept fields to `out`.
    fn cut(&self, row: &[u8], out: &mut Vec<u8>) -> Result<()> {
        let mut at = 0;
        for (width, keep) in self.widths.iter().zip(&self.keep) {
            let rest = row.get(at..).unwrap_or_default();
            let len = match width {
                Width::Fixed(len) => Some(*len),
                Width::Variable => variable_len(rest),
            };
            let field = len.and_then(|len| rest.get(..len)).ok_or_else(malformed)?;
            if *keep {
                out.extend_from_slice(field);
            }
            at += field.len();
        }
        if at != row.len() {
            return Err(malformed());
        }
        Ok(())
    }
}

fn malformed() -> Error {
    Error::Internal("a stored row does not match its table's columns".into())
}

/// How many bytes a field of this type takes in a row, if this module can
/// tell without decoding it.
fn width(data_type: &DataType) -> Option<Width> {
    match data_type {
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Binary | DataType::LargeBinary => {
            Some(Width::Variable)
        }
        DataType::Boolean => Some(Width::Fixed(2)),
        DataType::Int8
        | DataType::Int16
        | DataType::Int32
        | DataType::Int64
        | DataType::UInt8
        | DataType::UInt16
        | DataType::UInt32
        | DataType::UInt64
        | DataType::Float32
        | DataType::Float64
        | DataType::Date32
        | DataType::Date64
        | DataType::Timestamp(..)
        | DataType::Decimal128(..) => data_type.primitive_width().map(|w| Width::Fixed(1 + w)),
        _ => None,
    }
}

/// The length of the string or binary field that `field` starts with.
fn variable_len(field: &[u8]) -> Option<usize> {
    if *field.first()? != NON_EMPTY {
        // Null or empty: the sentinel alone.
        return Some(1);
    }
    let mut at = 1;
    for _ in 0..MINI_BLOCKS {
        let more = *field.get(at + MINI_BLOCK)? == CONTINUATION;
        at += MINI_BLOCK + 1;
        if !more {
            return Some(at);
        }
    }
    loop {
        let more = *field.get(at + BLOCK)? == CONTINUATION;
        at += BLOCK + 1;
        if !more {
            return Some(at);
        }
    }
}

/// `count` empty values of a string or binary type.
fn empty(data_type: &DataType, count: usize) -> Result<ArrayRef> {
    let strings: ArrayRef = Arc::new(StringArray::from_iter_values(std::iter::repeat_n(
        "", count,
    )));
    Ok(cast(&strings, data_type)?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::rows::RowCodec;
    use datafusion::arrow::array::{
        Array, BinaryArray, BooleanArray, Decimal128Array, Float64Array, Int32Array, Int64Array,
        TimestampMicrosecondArray,
    };
    use datafusion::arrow::datatypes::{Field, IntervalUnit, Schema, TimeUnit};

    /// Strings of every length up to 100 (so every mix of mini blocks and
    /// blocks, and lengths on block boundaries), nulls among every type.
    fn batch() -> RecordBatch {
        let n = 101;
        let text = |i: usize| (i % 7 != 3).then(|| "x".repeat(i));
        let schema = Arc::new(Schema::new(vec![
            Field::new("id", DataType::Int64, true),
            Field::new("name", DataType::Utf8, true),
            Field::new("flag", DataType::Boolean, true),
            Field::new("blob", DataType::Binary, true),
            Field::new("small", DataType::Int32, true),
            Field::new("note", DataType::Utf8, true),
            Field::new("score", DataType::Float64, true),
            Field::new("at", DataType::Timestamp(TimeUnit::Microsecond, None), true),
            Field::new("price", DataType::Decimal128(10, 2), true),
        ]));
        let columns: Vec<ArrayRef> = vec![
            Arc::new(Int64Array::from_iter(
                (0..n).map(|i| (i % 5 != 0).then_some(i as i64)),
            )),
            Arc::new(StringArray::from_iter((0..n).map(text))),
            Arc::new(BooleanArray::from_iter(
                (0..n).map(|i| (i % 4 != 0).then_some(i % 2 == 0)),
            )),
            Arc::new(BinaryArray::from_iter(
                (0..n).map(|i| text(n - 1 - i).map(String::into_bytes)),
            )),
            Arc::new(Int32Array::from_iter(
                (0..n).map(|i| (i % 3 != 0).then_some(-(i as i32))),
            )),
            Arc::new(StringArray::from_iter((0..n).map(|i| text((i * 37) % 100)))),
            Arc::new(Float64Array::from_iter(
                (0..n).map(|i| (i % 6 != 0).then_some(i as f64 / 3.0)),
            )),
            Arc::new(TimestampMicrosecondArray::from_iter(
                (0..n).map(|i| (i % 8 != 0).then_some(i as i64 * 1_000_000)),
            )),
            Arc::new(
                Decimal128Array::from_iter((0..n).map(|i| (i % 9 != 0).then_some(i as i128 * 101)))
                    .with_precision_and_scale(10, 2)
                    .expect("decimal"),
            ),
        ];
        RecordBatch::try_new(schema, columns).expect("batch")
    }

    #[test]
    fn read_columns_decode_as_in_full_and_skipped_strings_come_back_empty() {
        let batch = batch();
        let codec = RowCodec::new(batch.schema(), &[]).expect("codec");
        let rows = codec.encode_rows(&batch).expect("encode");
        for read in [vec![0], vec![1], vec![3, 5], vec![5, 7], vec![]] {
            let projection = Projection::new(&batch.schema(), &read)
                .expect("projection")
                .expect("skips a string column");
            let back = projection
                .decode(rows.iter().map(|r| r.data()))
                .expect("decode");
            for (i, column) in back.columns().iter().enumerate() {
                if read.contains(&i) || !matches!(width(column.data_type()), Some(Width::Variable))
                {
                    assert_eq!(column, batch.column(i), "column {i}, reading {read:?}");
                } else {
                    assert_eq!(column.null_count(), 0);
                    assert_eq!(
                        column,
                        &empty(column.data_type(), batch.num_rows()).expect("empty")
                    );
                }
            }
        }
    }

    #[test]
    fn no_projection_when_every_string_is_read_or_a_type_is_unknown() {
        let batch = batch();
        assert!(
            Projection::new(&batch.schema(), &[1, 3, 5])
                .expect("new")
                .is_none()
        );
        let listed = Arc::new(Schema::new(vec![
            Field::new("s", DataType::Utf8, true),
            Field::new("d", DataType::Decimal128(10, 2), true),
            Field::new("i", DataType::Interval(IntervalUnit::DayTime), true),
        ]));
        assert!(Projection::new(&listed, &[]).expect("new").is_none());
    }

    #[test]
    fn a_row_that_does_not_match_its_columns_is_an_error() {
        let batch = batch();
        let codec = RowCodec::new(batch.schema(), &[]).expect("codec");
        let rows = codec.encode_rows(&batch).expect("encode");
        let projection = Projection::new(&batch.schema(), &[0])
            .expect("new")
            .expect("some");
        let mut row = rows.row(40).data().to_vec();
        row.push(0);
        assert!(projection.decode([row.as_slice()]).is_err());
        assert!(projection.decode([&row[..20]]).is_err());
    }
}
