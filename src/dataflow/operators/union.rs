//! UNION ALL: every input's changes, unchanged.

use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::datatypes::SchemaRef;

use crate::dataflow::change::ChangeBatch;
use crate::dataflow::operator::{Context, Operator};
use crate::error::Result;

pub struct Union {
    schema: SchemaRef,
}

impl Union {
    pub fn new(schema: SchemaRef) -> Union {
        Union { schema }
    }
}

impl Operator for Union {
    fn name(&self) -> &'static str {
        "Union"
    }

    fn on_changes(
        &mut self,
        _input: usize,
        batch: ChangeBatch,
        cx: &mut Context<'_>,
    ) -> Result<()> {
        // Inputs agree on types but may name columns differently.
        // Counted rows (`count(*)` over a union) may have no columns at all.
        let rows = RecordBatch::try_new_with_options(
            self.schema.clone(),
            batch.rows().columns().to_vec(),
            &datafusion::arrow::array::RecordBatchOptions::new().with_row_count(Some(batch.len())),
        )?;
        cx.emit(ChangeBatch::new(rows, batch.diffs().clone())?);
        Ok(())
    }
}
