//! Filling the gaps of a relation's rows, for `GAP_FILL(...)` (see
//! `sql::gap_fill`): between two rows of a partition more than a step
//! apart, one made-up row at every step after the first.

use datafusion::arrow::array::{
    Array, ArrayRef, Float64Array, Int64Array, RecordBatch, UInt32Array,
};
use datafusion::arrow::compute::{SortColumn, cast, concat_batches, lexsort_to_indices, take};
use datafusion::arrow::datatypes::{DataType, TimeUnit};

use crate::catalog::micros;
use crate::dataflow::change::column_rows;
use crate::error::{Error, Result};

/// Made-up rows one evaluation may add: a step of a second over a gap of
/// years would otherwise fill memory.
pub const MOST_FILLED: usize = 1_000_000;

/// What a made-up row holds in a column.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fill {
    Null,
    /// The value of the row before it.
    Locf,
    /// On the line between the rows before and after it.
    Interpolate,
}

/// How one GAP_FILL fills its relation's rows.
#[derive(Debug, Clone)]
pub struct GapFill {
    pub time_column: usize,
    /// Microseconds between made-up rows.
    pub step: i64,
    /// Per column of the relation.
    pub fills: Vec<Fill>,
    /// Columns whose values partition the rows.
    pub partition: Vec<usize>,
}

/// One made-up row: the rows around it, its time and where it lies between them.
struct Made {
    before: u32,
    after: u32,
    time: i64,
    /// Steps between the rows around it.
    span: f64,
}

impl GapFill {
    /// `rows` and the rows that fill their gaps.
    pub fn fill(&self, rows: &RecordBatch) -> Result<RecordBatch> {
        let made = self.made_rows(rows)?;
        if made.is_empty() {
            return Ok(rows.clone());
        }
        let columns = (0..rows.num_columns())
            .map(|c| self.made_column(rows, c, &made))
            .collect::<Result<Vec<_>>>()?;
        let filled = RecordBatch::try_new(rows.schema(), columns)?;
        Ok(concat_batches(&rows.schema(), [rows, &filled])?)
    }

    fn made_rows(&self, rows: &RecordBatch) -> Result<Vec<Made>> {
        let times = micros(rows.column(self.time_column))?;
        let order = self.sorted(rows)?;
        let keys = column_rows(rows, &self.partition)?;
        let mut made = Vec::new();
        for pair in order.values().windows(2) {
            let (before, after) = (pair[0], pair[1]);
            let (i, j) = (before as usize, after as usize);
            if times.is_null(i) || times.is_null(j) {
                continue;
            }
            if keys.as_ref().is_some_and(|k| k.row(i) != k.row(j)) {
                continue;
            }
            let (from, to) = (times.value(i), times.value(j));
            let mut time = from.saturating_add(self.step);
            while time < to {
                if made.len() == MOST_FILLED {
                    return Err(Error::ProgramLimitExceeded(format!(
                        "GAP_FILL would make more than {MOST_FILLED} rows; use a longer step"
                    )));
                }
                made.push(Made {
                    before,
                    after,
                    time,
                    span: (to - from) as f64 / self.step as f64,
                });
                time = time.saturating_add(self.step);
            }
        }
        Ok(made)
    }

    /// Row indices by partition, then time, rows without a time last.
    fn sorted(&self, rows: &RecordBatch) -> Result<UInt32Array> {
        let columns: Vec<SortColumn> = self
            .partition
            .iter()
            .chain([&self.time_column])
            .map(|c| SortColumn {
                values: rows.column(*c).clone(),
                options: None,
            })
            .collect();
        Ok(lexsort_to_indices(&columns, None)?)
    }

    fn made_column(&self, rows: &RecordBatch, column: usize, made: &[Made]) -> Result<ArrayRef> {
        let values = rows.column(column);
        let before = UInt32Array::from_iter_values(made.iter().map(|m| m.before));
        if column == self.time_column {
            let times = Int64Array::from_iter_values(made.iter().map(|m| m.time));
            let stamps = cast(&times, &DataType::Timestamp(TimeUnit::Microsecond, None))?;
            return Ok(cast(&stamps, values.data_type())?);
        }
        if self.partition.contains(&column) {
            return Ok(take(values, &before, None)?);
        }
        match self.fills[column] {
            Fill::Null => Ok(datafusion::arrow::array::new_null_array(
                values.data_type(),
                made.len(),
            )),
            Fill::Locf => Ok(take(values, &before, None)?),
            Fill::Interpolate => interpolate(values, made),
        }
    }
}

/// Each made-up row's value on the line between the rows around it, in
/// the column's own type (integers truncated toward zero).
fn interpolate(values: &ArrayRef, made: &[Made]) -> Result<ArrayRef> {
    let floats = cast(values, &DataType::Float64)?;
    let floats = floats
        .as_any()
        .downcast_ref::<Float64Array>()
        .ok_or_else(|| Error::Internal("interpolated column is not numeric".into()))?;
    // Each made-up row adds one step's share to the one before it, as
    // RisingWave computes it, so that the values agree to the last digit.
    // A gap's rows are consecutive in `made`.
    let mut line = Vec::with_capacity(made.len());
    let mut last: Option<(u32, f64)> = None;
    for m in made {
        let (a, b) = (m.before as usize, m.after as usize);
        if !(floats.is_valid(a) && floats.is_valid(b)) {
            line.push(None);
            continue;
        }
        let (from, to) = (floats.value(a), floats.value(b));
        let delta = (to - from) / m.span;
        let value = match last {
            Some((before, previous)) if before == m.before => previous + delta,
            _ => from + delta,
        };
        last = Some((m.before, value));
        line.push(Some(value));
    }
    let line = Float64Array::from(line);
    Ok(cast(&line, values.data_type())?)
}
