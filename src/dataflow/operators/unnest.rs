//! `unnest(list)` (and `generate_series` in a select list, which becomes
//! one): each row goes out once per element of its list, the other columns
//! repeated and the row's weight kept, so a retraction takes back exactly
//! the rows its insertion gave. It keeps no state.

use datafusion::arrow::array::{Array, ArrayRef, AsArray, RecordBatch, UInt32Array};
use datafusion::arrow::compute::{cast, take};
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::common::NullHandling;

use crate::dataflow::change::ChangeBatch;
use crate::dataflow::operator::{Context, Operator};
use crate::error::{Error, Result};

pub struct Unnest {
    /// The input column holding the lists.
    list: usize,
    /// For each output column, the input column it comes from.
    sources: Vec<usize>,
    schema: SchemaRef,
    nulls: NullHandling,
}

impl Unnest {
    pub fn new(list: usize, sources: Vec<usize>, schema: SchemaRef, nulls: NullHandling) -> Unnest {
        Unnest {
            list,
            sources,
            schema,
            nulls,
        }
    }

    /// For each output row, its input row and its element (`None`: a NULL
    /// element, for a NULL or empty list kept as one row).
    fn expand(&self, lists: &ArrayRef) -> Result<(Vec<u32>, Vec<Option<u32>>)> {
        let lists = lists
            .as_list_opt::<i32>()
            .ok_or_else(|| Error::NotSupported("unnest takes a list".into()))?;
        let offsets = lists.value_offsets();
        let (mut rows, mut elements) = (Vec::new(), Vec::new());
        for i in 0..lists.len() {
            let (start, end) = (offsets[i] as u32, offsets[i + 1] as u32);
            let kept_empty = match self.nulls {
                NullHandling::Drop => false,
                NullHandling::Preserve => lists.is_null(i),
                NullHandling::PreserveAndExpandEmpty => lists.is_null(i) || start == end,
            };
            if kept_empty {
                rows.push(i as u32);
                elements.push(None);
                continue;
            }
            if lists.is_null(i) {
                continue;
            }
            for element in start..end {
                rows.push(i as u32);
                elements.push(Some(element));
            }
        }
        Ok((rows, elements))
    }
}

impl Operator for Unnest {
    fn name(&self) -> &'static str {
        "Unnest"
    }

    fn describe(&self) -> String {
        format!("list@{}", self.list)
    }

    fn on_changes(
        &mut self,
        _input: usize,
        batch: ChangeBatch,
        cx: &mut Context<'_>,
    ) -> Result<()> {
        let input = batch.rows();
        let lists = input.column(self.list);
        let (rows, elements) = self.expand(lists)?;
        let rows = UInt32Array::from(rows);
        let elements = UInt32Array::from(elements);
        let values = take(lists.as_list::<i32>().values(), &elements, None)?;
        let columns = self
            .sources
            .iter()
            .zip(self.schema.fields())
            .map(|(source, field)| {
                let column = match *source == self.list {
                    true => values.clone(),
                    false => take(input.column(*source), &rows, None)?,
                };
                match column.data_type() == field.data_type() {
                    true => Ok(column),
                    false => Ok(cast(&column, field.data_type())?),
                }
            })
            .collect::<Result<Vec<ArrayRef>>>()?;
        let diffs = take(batch.diffs(), &rows, None)?;
        let unnested = RecordBatch::try_new(self.schema.clone(), columns)?;
        cx.emit(ChangeBatch::new(unnested, diffs.as_primitive().clone())?);
        Ok(())
    }
}
