//! The change model: Arrow rows with signed weights beside them.

use std::sync::Arc;

use datafusion::arrow::array::{
    Array, ArrayRef, AsArray, BooleanArray, Int64Array, RecordBatch, UInt32Array,
};
use datafusion::arrow::compute::{
    filter, filter_record_batch, prep_null_mask_filter, take, take_record_batch,
};
use datafusion::arrow::datatypes::Int64Type;
use datafusion::arrow::row::{RowConverter, Rows, SortField};
use datafusion::physical_expr::PhysicalExpr;

use crate::dataflow::errors::RowErrors;
use crate::error::{Error, Result};

/// Each expression evaluated over every row of `rows`, as a column; rows
/// an expression fails on go to `errors`, which decides what they yield.
pub fn evaluate_all(
    exprs: &[Arc<dyn PhysicalExpr>],
    rows: &RecordBatch,
    errors: &mut RowErrors,
) -> Result<Vec<ArrayRef>> {
    exprs.iter().map(|e| errors.evaluate(e, rows)).collect()
}

/// The values of `columns` of `batch`, row by row, in Arrow's row format
/// (comparable as bytes); `None` for no columns.
pub fn column_rows(batch: &RecordBatch, columns: &[usize]) -> Result<Option<Rows>> {
    if columns.is_empty() {
        return Ok(None);
    }
    let fields = columns
        .iter()
        .map(|c| SortField::new(batch.schema().field(*c).data_type().clone()))
        .collect();
    let arrays: Vec<ArrayRef> = columns.iter().map(|c| batch.column(*c).clone()).collect();
    Ok(Some(RowConverter::new(fields)?.convert_columns(&arrays)?))
}

/// Rows with signed multiplicities: row i occurs `diffs[i]` more (+) or fewer (-) times.
#[derive(Debug, Clone)]
pub struct ChangeBatch {
    rows: RecordBatch,
    diffs: Int64Array,
}

impl ChangeBatch {
    /// Pair rows with their weights; there must be one weight per row.
    pub fn new(rows: RecordBatch, diffs: Int64Array) -> Result<ChangeBatch> {
        if rows.num_rows() != diffs.len() {
            return Err(Error::Internal(format!(
                "a change batch has {} rows but {} diffs",
                rows.num_rows(),
                diffs.len()
            )));
        }
        Ok(ChangeBatch { rows, diffs })
    }

    /// Every row inserted once.
    pub fn inserts(rows: RecordBatch) -> ChangeBatch {
        let diffs = Int64Array::from(vec![1; rows.num_rows()]);
        ChangeBatch { rows, diffs }
    }

    pub fn rows(&self) -> &RecordBatch {
        &self.rows
    }

    pub fn diffs(&self) -> &Int64Array {
        &self.diffs
    }

    pub fn len(&self) -> usize {
        self.rows.num_rows()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The rows a predicate holds for, with their weights; NULL counts as
    /// false, as in SQL.
    pub fn filter(
        &self,
        predicate: &Arc<dyn PhysicalExpr>,
        errors: &mut RowErrors,
    ) -> Result<ChangeBatch> {
        self.filter_by(&self.mask(predicate, errors)?)
    }

    /// Which rows `predicate` keeps: true where it is true, false where it
    /// is false or NULL.
    pub fn mask(
        &self,
        predicate: &Arc<dyn PhysicalExpr>,
        errors: &mut RowErrors,
    ) -> Result<BooleanArray> {
        let mask = errors.evaluate(predicate, &self.rows)?;
        let mask = mask
            .as_any()
            .downcast_ref::<BooleanArray>()
            .ok_or_else(|| Error::Internal("a filter predicate is not boolean".into()))?;
        Ok(match mask.null_count() > 0 {
            true => prep_null_mask_filter(mask),
            false => mask.clone(),
        })
    }

    /// The rows `mask` keeps, with their weights.
    pub fn filter_by(&self, mask: &BooleanArray) -> Result<ChangeBatch> {
        let rows = filter_record_batch(&self.rows, mask)?;
        let diffs = filter(&self.diffs, mask)?
            .as_primitive::<Int64Type>()
            .clone();
        ChangeBatch::new(rows, diffs)
    }

    /// The rows at `indices`, with their weights.
    pub fn take(&self, indices: &UInt32Array) -> Result<ChangeBatch> {
        let rows = take_record_batch(&self.rows, indices)?;
        let diffs = take(&self.diffs, indices, None)?
            .as_primitive::<Int64Type>()
            .clone();
        ChangeBatch::new(rows, diffs)
    }
}

/// The end of an epoch: everything before it belongs to `epoch`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Barrier {
    pub epoch: u64,
    /// Processing time of the epoch, microseconds since the Unix epoch.
    pub now: i64,
}

/// Event-time progress, in microseconds since the epoch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Watermark {
    pub micros: i64,
}

/// Everything on a dataflow edge, data and control, in order.
#[derive(Debug, Clone)]
pub enum Message {
    Changes(ChangeBatch),
    Watermark(Watermark),
    /// Whether every source behind the edge has been idle past the timeout.
    Idle(bool),
    Barrier(Barrier),
}

/// Test notation for change batches, after RisingWave's `from_pretty`:
/// a header of column types (`I` Int64, `F` Float64, `T` Utf8), then a line a
/// row: its weight (`+`, `-` or a number) and one value per column, `.` for NULL.
#[cfg(test)]
pub fn pretty(header: &str, rows: &str) -> ChangeBatch {
    use std::sync::Arc;

    use datafusion::arrow::array::{ArrayRef, Float64Array, StringArray};
    use datafusion::arrow::datatypes::{DataType, Field, Schema};

    let types: Vec<char> = header
        .split_whitespace()
        .filter_map(|t| t.chars().next())
        .collect();
    let lines: Vec<Vec<&str>> = rows
        .lines()
        .map(str::split_whitespace)
        .map(Iterator::collect)
        .filter(|l: &Vec<&str>| !l.is_empty())
        .collect();
    let diffs: Vec<i64> = lines
        .iter()
        .map(|l| match l[0] {
            "+" => 1,
            "-" => -1,
            n => n.parse().expect("a weight"),
        })
        .collect();
    let value = |l: &Vec<&str>, c: usize| -> Option<String> {
        let v = l[c + 1];
        (v != ".").then(|| v.to_string())
    };
    let mut fields = Vec::new();
    let mut columns: Vec<ArrayRef> = Vec::new();
    for (c, t) in types.iter().enumerate() {
        let (data_type, column): (DataType, ArrayRef) = match t {
            'I' => (
                DataType::Int64,
                Arc::new(Int64Array::from_iter(
                    lines
                        .iter()
                        .map(|l| value(l, c).map(|v| v.parse::<i64>().expect("int"))),
                )),
            ),
            'F' => (
                DataType::Float64,
                Arc::new(Float64Array::from_iter(
                    lines
                        .iter()
                        .map(|l| value(l, c).map(|v| v.parse::<f64>().expect("float"))),
                )),
            ),
            _ => (
                DataType::Utf8,
                Arc::new(StringArray::from_iter(lines.iter().map(|l| value(l, c)))),
            ),
        };
        fields.push(Field::new(format!("c{c}"), data_type, true));
        columns.push(column);
    }
    let rows =
        RecordBatch::try_new(Arc::new(Schema::new(fields)), columns).expect("a valid pretty batch");
    ChangeBatch::new(rows, Int64Array::from(diffs)).expect("one weight a row")
}

/// The rows of batches as `weight value...` lines, sorted, for assertions.
#[cfg(test)]
pub fn render(batches: &[ChangeBatch]) -> Vec<String> {
    use datafusion::arrow::util::display::array_value_to_string;
    let mut out: Vec<String> = batches
        .iter()
        .flat_map(|b| {
            (0..b.len()).map(move |i| {
                let mut line = format!("{:+}", b.diffs().value(i));
                for column in b.rows().columns() {
                    let text = if column.is_null(i) {
                        ".".to_string()
                    } else {
                        array_value_to_string(column, i).unwrap_or_default()
                    };
                    line.push(' ');
                    line.push_str(&text);
                }
                line
            })
        })
        .collect();
    out.sort();
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    use datafusion::arrow::array::Int32Array;
    use datafusion::arrow::datatypes::{DataType, Field, Schema};

    #[test]
    fn diffs_must_match_rows() {
        let schema = Arc::new(Schema::new(vec![Field::new("a", DataType::Int32, false)]));
        let rows = RecordBatch::try_new(schema, vec![Arc::new(Int32Array::from(vec![1, 2]))])
            .expect("batch");
        assert!(ChangeBatch::new(rows.clone(), Int64Array::from(vec![1])).is_err());
        let batch = ChangeBatch::new(rows, Int64Array::from(vec![1, -1])).expect("valid");
        assert_eq!(batch.len(), 2);
    }
}
