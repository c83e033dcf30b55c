//! `source_errors`: the messages sources could not read, kept as a system
//! table so that a skipped message is counted and can still be found.

use std::sync::Arc;

use datafusion::arrow::array::{
    ArrayRef, Int32Array, Int64Array, RecordBatch, StringArray, TimestampMicrosecondArray,
};
use datafusion::arrow::datatypes::{DataType, TimeUnit};

use crate::catalog::{SOURCE_ERRORS, Table, TableDef};
use crate::error::Result;
use crate::log::writer::{WriteOp, Writer};

/// One message a source could not read.
#[derive(Debug, Clone)]
pub struct BadMessage {
    pub source: String,
    pub topic: String,
    pub partition: i32,
    pub offset: i64,
    pub error: String,
    /// The payload as text (invalid UTF-8 replaced).
    pub payload: Option<String>,
}

/// The table's definition, created at first start.
pub fn definition(id: u64) -> TableDef {
    TableDef::system(
        id,
        SOURCE_ERRORS,
        &[
            ("source", DataType::Utf8),
            ("topic", DataType::Utf8),
            ("partition", DataType::Int32),
            ("offset", DataType::Int64),
            ("error", DataType::Utf8),
            ("payload", DataType::Utf8),
            (
                "arrival_time",
                DataType::Timestamp(TimeUnit::Microsecond, None),
            ),
        ],
    )
}

/// Append bad messages to the table, arrived at `now` (microseconds).
pub async fn record(
    writer: &Writer,
    table: &Arc<Table>,
    bad: &[BadMessage],
    now: i64,
) -> Result<()> {
    if bad.is_empty() {
        return Ok(());
    }
    let batch = batch(table, bad, now)?;
    let rows = table.codec.encode_rows(&batch)?;
    let rows = rows.iter().map(|r| r.data().to_vec()).collect();
    writer
        .write(table.target(), WriteOp::Append { rows })
        .await
        .map(|_| ())
}

fn batch(table: &Table, bad: &[BadMessage], now: i64) -> Result<RecordBatch> {
    let columns: Vec<ArrayRef> = vec![
        Arc::new(StringArray::from_iter_values(
            bad.iter().map(|b| b.source.as_str()),
        )),
        Arc::new(StringArray::from_iter_values(
            bad.iter().map(|b| b.topic.as_str()),
        )),
        Arc::new(Int32Array::from_iter_values(
            bad.iter().map(|b| b.partition),
        )),
        Arc::new(Int64Array::from_iter_values(bad.iter().map(|b| b.offset))),
        Arc::new(StringArray::from_iter_values(
            bad.iter().map(|b| b.error.as_str()),
        )),
        Arc::new(StringArray::from_iter(
            bad.iter().map(|b| b.payload.as_deref()),
        )),
        Arc::new(TimestampMicrosecondArray::from_iter_values(
            bad.iter().map(|_| now),
        )),
    ];
    Ok(RecordBatch::try_new(table.schema.clone(), columns)?)
}
