//! A table's `ON CONFLICT` clause (RisingWave's): what an INSERT does with a
//! row whose primary key is taken, by the table or by an earlier row of the
//! same statement. `DO NOTHING` keeps the row there; `OVERWRITE` and
//! `DO UPDATE FULL` replace it; `DO UPDATE IF NOT NULL` replaces only the
//! columns the new row has a value for. `WITH VERSION COLUMN (v, ...)`
//! applies the new row only if its versions, compared in order, are at
//! least the stored row's.
//!
//! The writer merges each row with the one stored under its key (see
//! `log::writer`), through [`merger`], so a merge sees every write before
//! it.

use std::sync::Arc;

use datafusion::arrow::array::{ArrayRef, RecordBatch, UInt32Array};
use datafusion::arrow::compute::take;
use datafusion::arrow::row::{RowConverter, SortField};

use crate::catalog::{ConflictAction, Table};
use crate::error::{Error, Result};
use crate::log::writer::MergeFn;
use crate::state::rows::RowCodec;

/// The writer's merge for `table`'s rows: the row to store under a key
/// holding `old` (if anything) when `new` comes, or `None` to keep `old`.
pub fn merger(table: &Table) -> Result<MergeFn> {
    let Some(conflict) = table.def.conflict.clone() else {
        return Err(Error::Internal(
            "a merge for a table without ON CONFLICT".into(),
        ));
    };
    let versions = match conflict.version_columns.is_empty() {
        true => None,
        false => {
            let fields = conflict
                .version_columns
                .iter()
                .map(|c| SortField::new(table.schema.field(*c).data_type().clone()))
                .collect();
            Some(RowConverter::new(fields)?)
        }
    };
    let codec = RowCodec::new(table.schema.clone(), &table.def.primary_key)?;
    Ok(Arc::new(move |old: Option<&[u8]>, new: &[u8]| {
        let Some(old) = old else {
            return Ok(Some(new.to_vec()));
        };
        if conflict.action == ConflictAction::DoNothing {
            return Ok(None);
        }
        let both = codec.decode([old, new])?;
        if let Some(versions) = &versions {
            let columns: Vec<ArrayRef> = conflict
                .version_columns
                .iter()
                .map(|c| both.column(*c).clone())
                .collect();
            let rows = versions.convert_columns(&columns)?;
            if rows.row(1) < rows.row(0) {
                return Ok(None);
            }
        }
        let merged = match conflict.action {
            ConflictAction::UpdateIfNotNull => filled_from_old(&both)?,
            _ => both.slice(1, 1),
        };
        let encoded = codec.encode_rows(&merged)?;
        Ok(Some(encoded.row(0).data().to_vec()))
    }))
}

/// The new row (the second of `both`) with each NULL replaced by the old
/// row's value.
fn filled_from_old(both: &RecordBatch) -> Result<RecordBatch> {
    let columns = both
        .columns()
        .iter()
        .map(|column| {
            let from = if column.is_null(1) { 0 } else { 1 };
            Ok(take(column, &UInt32Array::from(vec![from]), None)?)
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(RecordBatch::try_new(both.schema(), columns)?)
}
