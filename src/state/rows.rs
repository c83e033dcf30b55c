//! Row encoding: Arrow's row format, one byte string per row.
//!
//! Keys use the same format over the key columns, so byte order is SQL order
//! and range scans on a primary key are RocksDB range scans. The format is
//! tied to the Arrow version weir is built with, so a store written by a
//! build on another Arrow version may not read back (see docs/internals.md).

use std::sync::Arc;

use datafusion::arrow::array::{ArrayRef, RecordBatch};
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::row::{RowConverter, Rows, SortField};

use crate::error::{Error, Result};

pub mod projected;

/// Encodes and decodes one table's rows and keys.
pub struct RowCodec {
    schema: SchemaRef,
    rows: RowConverter,
    key_columns: Vec<usize>,
    keys: RowConverter,
}

impl RowCodec {
    pub fn new(schema: SchemaRef, key_columns: &[usize]) -> Result<RowCodec> {
        let fields = |indices: &mut dyn Iterator<Item = usize>| {
            indices
                .map(|i| SortField::new(schema.field(i).data_type().clone()))
                .collect::<Vec<_>>()
        };
        let rows = RowConverter::new(fields(&mut (0..schema.fields().len())))?;
        let keys = RowConverter::new(fields(&mut key_columns.iter().copied()))?;
        Ok(RowCodec {
            schema,
            rows,
            key_columns: key_columns.to_vec(),
            keys,
        })
    }

    pub fn schema(&self) -> &SchemaRef {
        &self.schema
    }

    pub fn key_columns(&self) -> &[usize] {
        &self.key_columns
    }

    /// Whole rows of a batch in the table's schema.
    pub fn encode_rows(&self, batch: &RecordBatch) -> Result<Rows> {
        Ok(self.rows.convert_columns(batch.columns())?)
    }

    /// Primary keys of a batch in the table's schema.
    pub fn encode_keys(&self, batch: &RecordBatch) -> Result<Rows> {
        let columns: Vec<ArrayRef> = self
            .key_columns
            .iter()
            .map(|i| batch.column(*i).clone())
            .collect();
        self.encode_key_columns(&columns)
    }

    /// Keys from arrays that hold only the key columns, in key order.
    pub fn encode_key_columns(&self, columns: &[ArrayRef]) -> Result<Rows> {
        Ok(self.keys.convert_columns(columns)?)
    }

    /// One encoded key back into its key columns.
    pub fn decode_key(&self, key: &[u8]) -> Result<Vec<ArrayRef>> {
        let parser = self.keys.parser();
        Ok(self.keys.convert_rows([parser.parse(key)])?)
    }

    /// Rows back into a batch in the table's schema.
    pub fn decode<'a>(&self, encoded: impl IntoIterator<Item = &'a [u8]>) -> Result<RecordBatch> {
        let parser = self.rows.parser();
        let rows: Vec<_> = encoded
            .into_iter()
            .map(|bytes| parser.parse(bytes))
            .collect();
        let columns = self.rows.convert_rows(rows)?;
        Ok(RecordBatch::try_new(Arc::clone(&self.schema), columns)?)
    }
}

/// A keyless view's entry: multiplicity (i64 LE) then the row.
pub fn encode_counted(count: i64, row: &[u8]) -> Vec<u8> {
    let mut out = count.to_le_bytes().to_vec();
    out.extend_from_slice(row);
    out
}

pub fn decode_counted(value: &[u8]) -> Result<(i64, &[u8])> {
    let head: [u8; 8] = value
        .get(..8)
        .and_then(|h| h.try_into().ok())
        .ok_or_else(|| Error::Internal("a view row is truncated".into()))?;
    Ok((i64::from_le_bytes(head), &value[8..]))
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::array::{Int64Array, StringArray};
    use datafusion::arrow::datatypes::{DataType, Field, Schema};

    fn batch() -> RecordBatch {
        let schema = Arc::new(Schema::new(vec![
            Field::new("id", DataType::Int64, false),
            Field::new("name", DataType::Utf8, true),
        ]));
        RecordBatch::try_new(
            schema,
            vec![
                Arc::new(Int64Array::from(vec![-5, 3, 10])),
                Arc::new(StringArray::from(vec![Some("a"), None, Some("c")])),
            ],
        )
        .expect("valid batch")
    }

    #[test]
    fn rows_round_trip() {
        let batch = batch();
        let codec = RowCodec::new(batch.schema(), &[0]).expect("codec");
        let rows = codec.encode_rows(&batch).expect("encode");
        let back = codec.decode(rows.iter().map(|r| r.data())).expect("decode");
        assert_eq!(back, batch);
    }

    #[test]
    fn key_bytes_sort_like_values() {
        let batch = batch();
        let codec = RowCodec::new(batch.schema(), &[0]).expect("codec");
        let keys = codec.encode_keys(&batch).expect("keys");
        assert!(keys.row(0).data() < keys.row(1).data());
        assert!(keys.row(1).data() < keys.row(2).data());
    }
}
