//! Aggregates the aggregate operator cannot keep up by itself over input
//! that retracts (`string_agg`, `array_agg`, `bool_and`, `percentile_cont`,
//! any aggregate with `FILTER (WHERE ...)` or `ORDER BY` inside, ...): each
//! group's rows are kept, as a window partition's are, and a group the epoch
//! touched is aggregated again from its rows by DataFusion's accumulators,
//! as it was and as it is. A group costs its size at each epoch that
//! changes it.

use std::collections::HashSet;
use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, BooleanArray, RecordBatch};
use datafusion::arrow::compute::prep_null_mask_filter;
use datafusion::arrow::compute::{cast, filter, filter_record_batch, take_record_batch};
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::row::{RowConverter, SortField};
use datafusion::common::ScalarValue;
use datafusion::physical_expr::aggregate::AggregateFunctionExpr;
use datafusion::physical_expr::{PhysicalExpr, PhysicalSortExpr};

use super::sort_indices;
use crate::error::{Error, Result};

/// A GROUP BY whose aggregates are computed again from each group's rows.
pub struct Recompute {
    /// The group expressions over input rows; none for a global aggregate.
    pub groups: Vec<Arc<dyn PhysicalExpr>>,
    pub aggregates: Vec<Recomputed>,
}

/// One aggregate: the function (built without its inner ORDER BY, which
/// the rows are sorted by before they reach it), its FILTER and its order.
pub struct Recomputed {
    pub function: Arc<AggregateFunctionExpr>,
    pub filter: Option<Arc<dyn PhysicalExpr>>,
    pub order: Vec<PhysicalSortExpr>,
    /// `DISTINCT` with an inner ORDER BY: the function is built without
    /// DISTINCT, whose set would lose the order, and each argument tuple
    /// reaches it once, where it first comes in that order.
    pub first_of_each: bool,
}

impl Recompute {
    /// The output row of one group's rows (each as often as it occurs):
    /// the group's values, then each aggregate's. No rows give no row,
    /// except for a global aggregate, which always has its one row.
    pub fn evaluate(&self, rows: &RecordBatch, output: &SchemaRef) -> Result<RecordBatch> {
        if rows.num_rows() == 0 && !self.groups.is_empty() {
            return Ok(RecordBatch::new_empty(output.clone()));
        }
        let mut columns: Vec<ArrayRef> = Vec::new();
        for group in &self.groups {
            let values = group.evaluate(rows)?.into_array(rows.num_rows())?;
            columns.push(values.slice(0, 1));
        }
        for aggregate in &self.aggregates {
            columns.push(aggregate.evaluate(rows)?);
        }
        let columns = columns
            .into_iter()
            .zip(output.fields())
            .map(
                |(column, field)| match column.data_type() == field.data_type() {
                    true => Ok(column),
                    false => Ok(cast(&column, field.data_type())?),
                },
            )
            .collect::<Result<Vec<_>>>()?;
        Ok(RecordBatch::try_new(output.clone(), columns)?)
    }
}

impl Recomputed {
    /// The aggregate over `rows`, as a one-value array.
    fn evaluate(&self, rows: &RecordBatch) -> Result<ArrayRef> {
        let mut accumulator = self.function.create_accumulator()?;
        if rows.num_rows() == 0 {
            return Ok(accumulator.evaluate()?.to_array()?);
        }
        let rows = match sort_indices(&self.order, rows)? {
            Some(indices) => take_record_batch(rows, &indices)?,
            None => rows.clone(),
        };
        let rows = match &self.filter {
            Some(filter) => {
                let mask = filter.evaluate(&rows)?.into_array(rows.num_rows())?;
                let mask = mask
                    .as_any()
                    .downcast_ref::<BooleanArray>()
                    .ok_or_else(|| Error::Internal("a FILTER is not boolean".into()))?;
                // NULL counts as false; the helper needs a null buffer.
                let mask = match mask.null_count() {
                    0 => mask.clone(),
                    _ => prep_null_mask_filter(mask),
                };
                filter_record_batch(&rows, &mask)?
            }
            None => rows,
        };
        let mut args = self
            .function
            .expressions()
            .iter()
            .map(|e| Ok(e.evaluate(&rows)?.into_array(rows.num_rows())?))
            .collect::<Result<Vec<ArrayRef>>>()?;
        if self.first_of_each {
            args = first_of_each(&args)?;
        }
        accumulator.update_batch(&args)?;
        let value: ScalarValue = accumulator.evaluate()?;
        Ok(value.to_array()?)
    }
}

/// `args` with each tuple of values kept only where it first occurs.
fn first_of_each(args: &[ArrayRef]) -> Result<Vec<ArrayRef>> {
    let fields = args
        .iter()
        .map(|a| SortField::new(a.data_type().clone()))
        .collect();
    let rows = RowConverter::new(fields)?.convert_columns(args)?;
    let mut seen = HashSet::new();
    let first: BooleanArray = (0..rows.num_rows())
        .map(|i| Some(seen.insert(rows.row(i))))
        .collect();
    Ok(args
        .iter()
        .map(|a| filter(a, &first))
        .collect::<std::result::Result<Vec<_>, _>>()?)
}
