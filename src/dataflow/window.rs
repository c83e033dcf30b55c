//! Time windows: which windows an event time falls into.
//!
//! Shared by the batch engine (the window table functions of a SELECT) and
//! the incremental one (the window operators of a view), so both assign
//! exactly the same windows. Times are microseconds since the Unix epoch;
//! a window is `[start, end)`.

use std::sync::Arc;

use datafusion::arrow::array::{
    Array, ArrayRef, Int64Array, RecordBatch, TimestampMicrosecondArray, UInt32Array,
};
use datafusion::arrow::compute::{SortColumn, cast, lexsort_to_indices, take_arrays};
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef, TimeUnit};
use datafusion::arrow::row::{RowConverter, SortField};

use crate::catalog::micros;
use crate::error::{Error, Result};

/// The window columns every window function adds.
pub const WINDOW_START: &str = "window_start";
pub const WINDOW_END: &str = "window_end";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WindowKind {
    /// Fixed windows of `size`, starting at multiples of `size` plus `offset`.
    Tumble { size: i64, offset: i64 },
    /// Windows of `size` starting every `slide`.
    Hop { slide: i64, size: i64 },
    /// Windows that start with a tumbling window of `max` and grow by `step`.
    Cumulate { step: i64, max: i64 },
    /// Per key, events closer than `gap` share a window, which ends `gap`
    /// after its last event.
    Session { gap: i64 },
}

impl WindowKind {
    pub fn name(&self) -> &'static str {
        match self {
            WindowKind::Tumble { .. } => "TUMBLE",
            WindowKind::Hop { .. } => "HOP",
            WindowKind::Cumulate { .. } => "CUMULATE",
            WindowKind::Session { .. } => "SESSION",
        }
    }

    /// How far a window's end lies beyond its start, at most; `None` for
    /// sessions, whose length depends on their events.
    pub fn longest(&self) -> Option<i64> {
        match *self {
            WindowKind::Tumble { size, .. } | WindowKind::Hop { size, .. } => Some(size),
            WindowKind::Cumulate { max, .. } => Some(max),
            WindowKind::Session { .. } => None,
        }
    }

    /// The windows `[start, end)` that hold event time `ts`, by start.
    pub fn windows(&self, ts: i64, out: &mut Vec<(i64, i64)>) {
        match *self {
            WindowKind::Tumble { size, offset } => {
                let start = ts - (ts - offset).rem_euclid(size);
                out.push((start, start + size));
            }
            WindowKind::Hop { slide, size } => {
                // The windows start every `slide` from the first that
                // starts after `ts - size` to the last at or before `ts`.
                let last = ts - ts.rem_euclid(slide);
                let count = (last - ts + size + slide - 1) / slide;
                let mut start = last - (count - 1) * slide;
                while start <= last {
                    out.push((start, start + size));
                    start += slide;
                }
            }
            WindowKind::Cumulate { step, max } => {
                let start = ts - ts.rem_euclid(max);
                let mut end = start + step;
                while end <= start + max {
                    if end > ts {
                        out.push((start, end));
                    }
                    end += step;
                }
            }
            WindowKind::Session { gap } => out.push((ts, ts + gap)),
        }
    }
}

/// A window function applied to a relation: its kind and the column of
/// the relation that holds event time.
#[derive(Debug, Clone)]
pub struct WindowSpec {
    pub kind: WindowKind,
    pub time_column: usize,
}

impl WindowSpec {
    /// The relation's schema with `window_start` and `window_end` appended,
    /// typed like the time column.
    pub fn schema(&self, input: &Schema) -> SchemaRef {
        let time_type = input.field(self.time_column).data_type().clone();
        let mut fields: Vec<Field> = input.fields().iter().map(|f| f.as_ref().clone()).collect();
        fields.push(Field::new(WINDOW_START, time_type.clone(), true));
        fields.push(Field::new(WINDOW_END, time_type, true));
        Arc::new(Schema::new(fields))
    }

    /// Event times of a batch in microseconds.
    pub fn times(&self, batch: &RecordBatch) -> Result<Int64Array> {
        micros(batch.column(self.time_column))
    }

    /// Every (row, window) pair of a batch, as input row indices and window
    /// bounds; rows with a NULL event time belong to no window.
    pub fn assign(&self, times: &Int64Array) -> Assigned {
        let mut assigned = Assigned::default();
        let mut windows = Vec::new();
        for row in 0..times.len() {
            if times.is_null(row) {
                continue;
            }
            windows.clear();
            self.kind.windows(times.value(row), &mut windows);
            for (start, end) in &windows {
                assigned.rows.push(row as u32);
                assigned.starts.push(*start);
                assigned.ends.push(*end);
            }
        }
        assigned
    }

    /// Session windows of a whole relation: per key (the `keys` columns),
    /// events closer than the gap share a window.
    pub fn sessions(&self, batch: &RecordBatch, keys: &[usize], gap: i64) -> Result<Assigned> {
        let times = self.times(batch)?;
        let mut sort: Vec<SortColumn> = keys
            .iter()
            .map(|k| SortColumn {
                values: batch.column(*k).clone(),
                options: None,
            })
            .collect();
        sort.push(SortColumn {
            values: Arc::new(times.clone()),
            options: None,
        });
        let order = lexsort_to_indices(&sort, None)?;
        let key_columns: Vec<ArrayRef> = keys.iter().map(|k| batch.column(*k).clone()).collect();
        let converter = RowConverter::new(
            key_columns
                .iter()
                .map(|c| SortField::new(c.data_type().clone()))
                .collect(),
        )?;
        // Without key columns every row shares the one (empty) key.
        let key_rows = converter.convert_columns(&key_columns)?;
        let mut assigned = Assigned::default();
        let mut run: Vec<u32> = Vec::new();
        let flush = |run: &mut Vec<u32>, assigned: &mut Assigned| {
            if let (Some(first), Some(last)) = (run.first(), run.last()) {
                let start = times.value(*first as usize);
                let end = times.value(*last as usize) + gap;
                for row in run.drain(..) {
                    assigned.rows.push(row);
                    assigned.starts.push(start);
                    assigned.ends.push(end);
                }
            }
        };
        for row in order.values().iter().copied() {
            if times.is_null(row as usize) {
                continue;
            }
            let joins = run.last().is_some_and(|last| {
                let last = *last as usize;
                let same_key = keys.is_empty() || key_rows.row(last) == key_rows.row(row as usize);
                same_key && times.value(row as usize) < times.value(last) + gap
            });
            if !joins {
                flush(&mut run, &mut assigned);
            }
            run.push(row);
        }
        flush(&mut run, &mut assigned);
        Ok(assigned)
    }
}

/// (row, window) pairs.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Assigned {
    pub rows: Vec<u32>,
    pub starts: Vec<i64>,
    pub ends: Vec<i64>,
}

impl Assigned {
    /// Every one of `n` input rows has exactly one pair, in order (TUMBLE,
    /// nothing late): the input needs no reshuffling.
    pub fn is_identity(&self, n: usize) -> bool {
        self.rows.len() == n && self.rows.iter().enumerate().all(|(i, r)| *r as usize == i)
    }

    pub fn indices(&self) -> UInt32Array {
        UInt32Array::from(self.rows.clone())
    }

    /// The input rows of the pairs with the window columns appended.
    pub fn apply(&self, batch: &RecordBatch, schema: &SchemaRef) -> Result<RecordBatch> {
        let time_type = schema.field(schema.fields().len() - 1).data_type();
        let mut columns = if self.is_identity(batch.num_rows()) {
            batch.columns().to_vec()
        } else {
            take_arrays(batch.columns(), &self.indices(), None)?
        };
        columns.push(bounds(&self.starts, time_type)?);
        columns.push(bounds(&self.ends, time_type)?);
        Ok(RecordBatch::try_new(schema.clone(), columns)?)
    }
}

fn bounds(values: &[i64], time_type: &DataType) -> Result<ArrayRef> {
    let micros: ArrayRef = Arc::new(TimestampMicrosecondArray::from(values.to_vec()));
    if time_type == micros.data_type() {
        return Ok(micros);
    }
    Ok(cast(&micros, time_type)?)
}

/// An interval argument as microseconds; it must be positive and may not
/// count months, whose length varies.
pub fn interval_micros(what: &str, value: &datafusion::common::ScalarValue) -> Result<i64> {
    use datafusion::common::ScalarValue;
    let micros = match (day_time_micros(value), value) {
        (Some(micros), _) => micros,
        (None, ScalarValue::DurationMicrosecond(Some(v))) => *v,
        (
            None,
            ScalarValue::IntervalMonthDayNano(Some(_)) | ScalarValue::IntervalYearMonth(Some(_)),
        ) => {
            return Err(Error::InvalidParameter(format!(
                "the {what} of a window cannot count months or years; use days"
            )));
        }
        (None, other) => {
            return Err(Error::InvalidParameter(format!(
                "the {what} of a window must be an interval such as INTERVAL '10' SECOND, not {other}"
            )));
        }
    };
    if micros <= 0 {
        return Err(Error::InvalidParameter(format!(
            "the {what} of a window must be positive"
        )));
    }
    Ok(micros)
}

/// An interval of days and less as microseconds; `None` for other values,
/// months included (their length varies).
pub fn day_time_micros(value: &datafusion::common::ScalarValue) -> Option<i64> {
    use datafusion::common::ScalarValue;
    match value {
        ScalarValue::IntervalMonthDayNano(Some(v)) if v.months == 0 => {
            Some(i64::from(v.days) * 86_400_000_000 + v.nanoseconds / 1000)
        }
        ScalarValue::IntervalDayTime(Some(v)) => {
            Some(i64::from(v.days) * 86_400_000_000 + i64::from(v.milliseconds) * 1000)
        }
        _ => None,
    }
}

/// Microseconds as a Unix timestamp type.
pub fn timestamp_type() -> DataType {
    DataType::Timestamp(TimeUnit::Microsecond, None)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn windows(kind: WindowKind, ts: i64) -> Vec<(i64, i64)> {
        let mut out = Vec::new();
        kind.windows(ts, &mut out);
        out
    }

    #[test]
    fn tumbling_windows_hold_their_start_but_not_their_end() {
        let kind = WindowKind::Tumble {
            size: 10,
            offset: 0,
        };
        assert_eq!(windows(kind, 0), vec![(0, 10)]);
        assert_eq!(windows(kind, 9), vec![(0, 10)]);
        assert_eq!(windows(kind, 10), vec![(10, 20)]);
        assert_eq!(windows(kind, -1), vec![(-10, 0)]);
        let shifted = WindowKind::Tumble {
            size: 10,
            offset: 3,
        };
        assert_eq!(windows(shifted, 2), vec![(-7, 3)]);
    }

    #[test]
    fn hopping_windows_overlap() {
        let kind = WindowKind::Hop { slide: 2, size: 10 };
        assert_eq!(
            windows(kind, 11),
            vec![(2, 12), (4, 14), (6, 16), (8, 18), (10, 20)]
        );
        assert_eq!(windows(kind, 10), windows(kind, 11));
        assert_eq!(windows(kind, -1)[0], (-10, 0));
        let uneven = WindowKind::Hop { slide: 3, size: 7 };
        assert_eq!(windows(uneven, 7), vec![(3, 10), (6, 13)]);
        assert_eq!(windows(uneven, 6), vec![(0, 7), (3, 10), (6, 13)]);
        let gaps = WindowKind::Hop { slide: 10, size: 3 };
        assert_eq!(windows(gaps, 12), vec![(10, 13)]);
        assert_eq!(windows(gaps, 14), vec![]);
        assert_eq!(windows(gaps, 21), vec![(20, 23)]);
        for ts in -40..40 {
            let found = windows(uneven, ts);
            assert!(found.iter().all(|(s, e)| *s <= ts && ts < *e && e - s == 7));
            let holding = (-50..50).filter(|s| s % 3 == 0 && *s <= ts && ts < s + 7);
            assert_eq!(found.len(), holding.count());
        }
    }

    #[test]
    fn cumulating_windows_grow_within_their_maximum() {
        let kind = WindowKind::Cumulate { step: 2, max: 6 };
        assert_eq!(windows(kind, 3), vec![(0, 4), (0, 6)]);
        assert_eq!(windows(kind, 6), vec![(6, 8), (6, 10), (6, 12)]);
    }
}
