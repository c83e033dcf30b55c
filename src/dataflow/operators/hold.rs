//! `EMIT ON WINDOW CLOSE` for a view that is not a windowed aggregate
//! (`SELECT ts, v FROM t EMIT ON WINDOW CLOSE`): each row is held until the
//! watermark passes its event time, then sent, so the view takes rows in
//! event-time order and only once their time is closed. The view's input
//! only grows, so a row once sent is never taken back.
//!
//! # State layout (under the operator's prefix)
//! - event time (i64, order-preserving) ++ row (row format) -> count (i64 LE)

use std::collections::BTreeMap;

use datafusion::arrow::array::{Array, Int64Array, RecordBatch};
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::row::RowConverter;

use crate::dataflow::change::{ChangeBatch, Watermark};
use crate::dataflow::operator::{Context, Operator};
use crate::dataflow::operators::window::record_late;
use crate::dataflow::state::read_count;
use crate::error::Result;
use crate::state::keys::{ordered, prefix_end};

pub struct Hold {
    /// The column holding each row's event time.
    column: usize,
    schema: SchemaRef,
    rows: RowConverter,
    watermark: Option<i64>,
    /// The view whose late rows are dropped and recorded, when a row
    /// already behind the watermark must not reach what is downstream.
    drops_late: Option<String>,
    /// Added to the column's time: a row goes once the sum is behind the
    /// watermark (a window's start plus its length, less one microsecond,
    /// closes the window when the watermark reaches its end).
    offset: i64,
}

impl Hold {
    pub fn new(column: usize, schema: SchemaRef) -> Result<Hold> {
        Ok(Hold {
            column,
            rows: super::over::converter(&schema)?,
            schema,
            watermark: None,
            drops_late: None,
            offset: 0,
        })
    }

    /// Hold each row until the watermark passes its time plus `offset`.
    pub fn offset_by(mut self, offset: i64) -> Hold {
        self.offset = offset;
        self
    }

    /// Rows that come after the watermark passed their time are recorded
    /// in `late_events` for `view` and dropped: window functions over
    /// final rows would otherwise change answers already given.
    pub fn dropping_late(mut self, view: &str) -> Hold {
        self.drops_late = Some(view.to_string());
        self
    }

    fn send(&self, rows: Vec<(Vec<u8>, i64)>, cx: &mut Context<'_>) -> Result<()> {
        send_rows(&self.rows, &self.schema, rows, cx)
    }
}

/// Send rows (in `converter`'s row format, with their counts) downstream.
pub(super) fn send_rows(
    converter: &RowConverter,
    schema: &SchemaRef,
    rows: Vec<(Vec<u8>, i64)>,
    cx: &mut Context<'_>,
) -> Result<()> {
    if rows.is_empty() {
        return Ok(());
    }
    let parser = converter.parser();
    let columns = converter.convert_rows(rows.iter().map(|(r, _)| parser.parse(r)))?;
    let batch = RecordBatch::try_new(schema.clone(), columns)?;
    let diffs = Int64Array::from_iter_values(rows.iter().map(|(_, c)| *c));
    cx.emit(ChangeBatch::new(batch, diffs)?);
    Ok(())
}

impl Operator for Hold {
    fn name(&self) -> &'static str {
        "HoldUntilClosed"
    }

    fn describe(&self) -> String {
        format!("by {}", self.schema.field(self.column).name())
    }

    fn on_changes(
        &mut self,
        _input: usize,
        batch: ChangeBatch,
        cx: &mut Context<'_>,
    ) -> Result<()> {
        let rows = batch.rows();
        let raw = crate::catalog::micros(rows.column(self.column))?;
        // Most holds wait for the row's own time: no copy then.
        let times: Int64Array = match self.offset {
            0 => raw.clone(),
            offset => raw
                .iter()
                .map(|t| t.map(|t| t.saturating_add(offset)))
                .collect(),
        };
        let encoded = self.rows.convert_columns(rows.columns())?;
        let mut now: BTreeMap<Vec<u8>, i64> = BTreeMap::new();
        let mut late = Vec::new();
        for (i, diff) in batch.diffs().values().iter().enumerate() {
            let row = encoded.row(i).as_ref().to_vec();
            // A row without a time, or one already closed, goes at once.
            let closed = !times.is_valid(i) || self.watermark.is_some_and(|w| times.value(i) < w);
            if closed && self.drops_late.is_some() {
                late.push(i as u32);
                continue;
            }
            if closed {
                *now.entry(row).or_default() += diff;
                continue;
            }
            // Counted without reading: the scan at the watermark sums.
            let key = cx.key(&[ordered(times.value(i)).as_slice(), &row].concat());
            cx.state.add_count(key, *diff)?;
        }
        if let (Some(view), Some(watermark)) = (&self.drops_late, self.watermark)
            && !late.is_empty()
        {
            record_late(view, rows, &raw, &late, watermark, cx)?;
        }
        self.send(now.into_iter().filter(|(_, c)| *c != 0).collect(), cx)
    }

    fn on_watermark(&mut self, wm: Watermark, cx: &mut Context<'_>) -> Result<Option<Watermark>> {
        self.watermark = self.watermark.max(Some(wm.micros));
        let lower = cx.prefix.to_vec();
        let upper = cx.key(&ordered(wm.micros));
        let upper = upper.min(prefix_end(cx.prefix));
        let mut closed = Vec::new();
        for (key, value) in cx.state.scan(&lower, &upper)? {
            let count = read_count(&value)?;
            if count != 0 {
                closed.push((key[cx.prefix.len() + 8..].to_vec(), count));
            }
            cx.state.delete(key);
        }
        self.send(closed, cx)?;
        Ok(Some(wm))
    }
}
