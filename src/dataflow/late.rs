//! The `late_events` system table: rows that arrived for a window whose
//! result was already final, kept so that they are not silently lost.
//!
//! It is an append-only table like any other (SELECT reads it, views may be
//! built on it), but only the dataflow runtime writes it, and it is hidden
//! from listings such as SHOW TABLES and `\dt`.

use std::sync::Arc;

use datafusion::arrow::array::{ArrayRef, RecordBatch, StringArray, TimestampMicrosecondArray};
use datafusion::arrow::datatypes::{DataType, TimeUnit};

use crate::catalog::{Table, TableDef};
use crate::dataflow::state::LateEvent;
use crate::error::Result;

pub use crate::catalog::LATE_EVENTS;

/// The table's definition, created at first start.
pub fn definition(id: u64) -> TableDef {
    let timestamp = DataType::Timestamp(TimeUnit::Microsecond, None);
    TableDef::system(
        id,
        LATE_EVENTS,
        &[
            ("object", DataType::Utf8),
            ("event_time", timestamp.clone()),
            ("watermark", timestamp.clone()),
            ("arrival_time", timestamp),
            ("row_json", DataType::Utf8),
        ],
    )
}

/// Late events as rows of the table, arrived at `now`.
pub fn batch(table: &Table, late: &[LateEvent], now: i64) -> Result<RecordBatch> {
    let columns: Vec<ArrayRef> = vec![
        Arc::new(StringArray::from_iter_values(
            late.iter().map(|e| e.object.as_str()),
        )),
        Arc::new(TimestampMicrosecondArray::from_iter_values(
            late.iter().map(|e| e.event_time),
        )),
        Arc::new(TimestampMicrosecondArray::from_iter_values(
            late.iter().map(|e| e.watermark),
        )),
        Arc::new(TimestampMicrosecondArray::from_iter_values(
            late.iter().map(|_| now),
        )),
        Arc::new(StringArray::from_iter_values(
            late.iter().map(|e| e.row.as_str()),
        )),
    ];
    Ok(RecordBatch::try_new(table.schema.clone(), columns)?)
}

/// Rows of a batch as JSON objects, one string per row.
pub fn rows_as_json(batch: &RecordBatch) -> Result<Vec<String>> {
    let mut writer = datafusion::arrow::json::LineDelimitedWriter::new(Vec::new());
    writer.write(batch)?;
    writer.finish()?;
    let text = String::from_utf8_lossy(&writer.into_inner()).into_owned();
    Ok(text.lines().map(str::to_string).collect())
}
