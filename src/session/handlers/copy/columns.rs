//! Parsed fields gathered into columns, a batch at a time.
//!
//! Most columns stay text, which Arrow's casts read afterwards. An integer
//! column, and a timestamp column in the shape exporters write, is read
//! straight into its type as its fields arrive, by the rule the cast from
//! text uses ([`Parser`] for integers, `timestamps.rs` for timestamps): a
//! large COPY then copies no number into a string column first. A value
//! that does not read so marks the batch as missed; its caller reads the
//! batch again with that column as text, so that the cast reads it and
//! names what is wrong, and the column stays text from then on.

use std::sync::Arc;

use datafusion::arrow::array::{
    ArrayRef, Int16Array, Int32Array, Int64Array, NullBufferBuilder, StringBuilder,
    TimestampMicrosecondArray, TimestampNanosecondArray,
};
use datafusion::arrow::buffer::NullBuffer;
use datafusion::arrow::compute::kernels::cast_utils::Parser;
use datafusion::arrow::datatypes::{DataType, Int16Type, Int32Type, Int64Type, TimeUnit};

use super::{BATCH_ROWS, timestamps};

/// How one column of the data is gathered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Text,
    Int16,
    Int32,
    Int64,
    /// Timestamps without a time zone, in microseconds (1) or
    /// nanoseconds (1,000).
    Timestamp {
        per_micro: i64,
    },
}

impl Kind {
    /// The kind a column of type `to` is read as.
    pub fn of(to: &DataType) -> Kind {
        match to {
            DataType::Int16 => Kind::Int16,
            DataType::Int32 => Kind::Int32,
            DataType::Int64 => Kind::Int64,
            DataType::Timestamp(TimeUnit::Microsecond, None) => Kind::Timestamp { per_micro: 1 },
            DataType::Timestamp(TimeUnit::Nanosecond, None) => Kind::Timestamp { per_micro: 1_000 },
            _ => Kind::Text,
        }
    }

    fn read(self, text: &str) -> Option<i64> {
        match self {
            Kind::Int64 => Int64Type::parse(text),
            Kind::Int32 => Int32Type::parse(text).map(i64::from),
            Kind::Int16 => Int16Type::parse(text).map(i64::from),
            Kind::Timestamp { per_micro } => {
                timestamps::parse(text.as_bytes())?.checked_mul(per_micro)
            }
            Kind::Text => None,
        }
    }

    /// The values read, as an array of the column's type. Narrowing
    /// cannot truncate: each value was read as the narrower type.
    fn array(self, values: Vec<i64>, nulls: Option<NullBuffer>) -> ArrayRef {
        match self {
            Kind::Int16 => Arc::new(Int16Array::new(
                values.into_iter().map(|v| v as i16).collect(),
                nulls,
            )),
            Kind::Int32 => Arc::new(Int32Array::new(
                values.into_iter().map(|v| v as i32).collect(),
                nulls,
            )),
            Kind::Timestamp { per_micro: 1 } => {
                Arc::new(TimestampMicrosecondArray::new(values.into(), nulls))
            }
            Kind::Timestamp { .. } => Arc::new(TimestampNanosecondArray::new(values.into(), nulls)),
            Kind::Int64 | Kind::Text => Arc::new(Int64Array::new(values.into(), nulls)),
        }
    }
}

/// The batch being gathered.
pub struct Columns {
    kinds: Vec<Kind>,
    columns: Vec<Column>,
    rows: usize,
    /// Columns whose value did not read as their kind in this batch.
    missed: Vec<usize>,
}

enum Column {
    Text(StringBuilder),
    Read {
        values: Vec<i64>,
        nulls: NullBufferBuilder,
    },
}

impl Column {
    fn new(kind: Kind, text_bytes: usize) -> Column {
        match kind {
            Kind::Text => Column::Text(StringBuilder::with_capacity(BATCH_ROWS, text_bytes)),
            _ => Column::Read {
                values: Vec::with_capacity(BATCH_ROWS),
                nulls: NullBufferBuilder::new(BATCH_ROWS),
            },
        }
    }
}

impl Columns {
    pub fn new(kinds: Vec<Kind>) -> Columns {
        let columns = kinds.iter().map(|k| Column::new(*k, 0)).collect();
        Columns {
            kinds,
            columns,
            rows: 0,
            missed: Vec::new(),
        }
    }

    /// Text columns only, whatever the types.
    pub fn text(width: usize) -> Columns {
        Columns::new(vec![Kind::Text; width])
    }

    /// Rows gathered since the last batch.
    pub fn rows(&self) -> usize {
        self.rows
    }

    pub fn push<S: AsRef<str>>(&mut self, fields: impl Iterator<Item = Option<S>>) {
        for (index, field) in fields.enumerate() {
            match (&mut self.columns[index], field) {
                (Column::Text(builder), field) => builder.append_option(field),
                (Column::Read { values, nulls }, None) => {
                    values.push(0);
                    nulls.append_null();
                }
                (Column::Read { values, nulls }, Some(text)) => {
                    let value = self.kinds[index].read(text.as_ref());
                    if value.is_none() && !self.missed.contains(&index) {
                        self.missed.push(index);
                    }
                    values.push(value.unwrap_or(0));
                    nulls.append_non_null();
                }
            }
        }
        self.rows += 1;
    }

    /// The batch gathered, and a new one begun. `None` when a value did
    /// not read as its column's kind: the columns it missed in are text
    /// from now on, and the caller reads the batch again.
    pub fn take(&mut self) -> Option<Vec<ArrayRef>> {
        self.rows = 0;
        if !self.missed.is_empty() {
            for index in std::mem::take(&mut self.missed) {
                self.kinds[index] = Kind::Text;
            }
            self.columns = self.kinds.iter().map(|k| Column::new(*k, 0)).collect();
            return None;
        }
        let batch = self
            .kinds
            .iter()
            .zip(self.columns.iter_mut())
            .map(|(kind, column)| take_column(*kind, column))
            .collect();
        Some(batch)
    }

    /// The batches of all rows, for data read as text alone.
    pub fn finish_text(mut self, mut batches: Vec<Vec<ArrayRef>>) -> Vec<Vec<ArrayRef>> {
        if self.rows > 0 {
            batches.extend(self.take());
        }
        batches
    }
}

/// A column's array, and the column begun again. A text column starts
/// with room for as many bytes as its last batch held, so that a long
/// column is not grown and copied bit by bit.
fn take_column(kind: Kind, column: &mut Column) -> ArrayRef {
    match column {
        Column::Text(builder) => {
            let array = builder.finish();
            let bytes = array.value_data().len();
            *column = Column::new(kind, bytes + bytes / 8);
            Arc::new(array)
        }
        Column::Read { values, nulls } => {
            let (values, nulls) = (std::mem::take(values), nulls.finish());
            let array = kind.array(values, nulls);
            *column = Column::new(kind, 0);
            array
        }
    }
}

#[cfg(test)]
mod tests {
    use datafusion::arrow::array::Array;
    use datafusion::arrow::compute::cast;

    use super::*;

    fn gather(kind: Kind, texts: &[Option<&str>]) -> Option<ArrayRef> {
        let mut columns = Columns::new(vec![kind]);
        for text in texts {
            columns.push(std::iter::once(*text));
        }
        columns.take().map(|mut batch| batch.remove(0))
    }

    #[test]
    fn values_read_as_the_cast_from_text_reads_them() {
        let texts = [Some("42"), None, Some(" -7 "), Some("+3"), Some("0")];
        for to in [DataType::Int16, DataType::Int32, DataType::Int64] {
            let ours = gather(Kind::of(&to), &texts).expect("all read");
            let strings: ArrayRef =
                Arc::new(datafusion::arrow::array::StringArray::from(texts.to_vec()));
            assert_eq!(ours.as_ref(), cast(&strings, &to).expect("cast").as_ref());
        }
        let to = DataType::Timestamp(TimeUnit::Nanosecond, None);
        let stamps = [Some("2015-07-15 00:00:01.5"), None];
        let ours = gather(Kind::of(&to), &stamps).expect("canonical");
        let strings: ArrayRef =
            Arc::new(datafusion::arrow::array::StringArray::from(stamps.to_vec()));
        assert_eq!(ours.as_ref(), cast(&strings, &to).expect("cast").as_ref());
    }

    #[test]
    fn a_value_that_does_not_read_sends_the_batch_back_as_text() {
        let mut columns = Columns::new(vec![Kind::Int16, Kind::Int64]);
        columns.push([Some("1"), Some("2")].into_iter());
        columns.push([Some("70000"), Some("3")].into_iter());
        assert!(columns.take().is_none());
        columns.push([Some("1"), Some("2")].into_iter());
        let batch = columns.take().expect("read again");
        assert_eq!(batch[0].data_type(), &DataType::Utf8);
        assert_eq!(batch[1].data_type(), &DataType::Int64);
        assert_eq!(batch[1].len(), 1);
    }
}
