//! Turning rows into write requests: the shared path of INSERT, COPY, UPDATE and DELETE.

use std::collections::HashMap;
use std::sync::Arc;

use datafusion::arrow::array::{Array, RecordBatch};
use datafusion::arrow::row::Rows;

use crate::catalog::Table;
use crate::error::{Error, Result};
use crate::log::writer::{Change, KeyedRow, Merge, Stage, WriteOp, Writer};
use crate::state::{CF_ROWS, ReadView, keys};

/// Arrow bytes of rows after which an INSERT stages them on disk instead
/// of holding them for one write.
pub const STAGE_AFTER_BYTES: usize = 8 << 20;

/// Add rows to a bulk load's stage; nothing to add is not an error.
pub fn stage_batches(table: &Arc<Table>, batches: &[RecordBatch], stage: &mut Stage) -> Result<()> {
    encode_part(table, batches)?.stage(table, stage)
}

/// Some of a bulk load's rows, encoded and not yet staged. Encoding needs
/// nothing but the rows, so a load encodes its parts side by side and
/// stages them in order.
pub struct EncodedPart(Encoded);

enum Encoded {
    Empty,
    /// Rows that only go to the log, staged straight into the stage's
    /// chunks without a copy of each row of their own.
    Appended {
        rows: Vec<Rows>,
        watermark: Option<i64>,
    },
    Other(NewRows),
}

/// Encode rows for a bulk load's stage.
pub fn encode_part(table: &Table, batches: &[RecordBatch]) -> Result<EncodedPart> {
    if batches.iter().all(|b| b.num_rows() == 0) {
        return Ok(EncodedPart(Encoded::Empty));
    }
    if !table.def.contents_in_log() {
        return Ok(EncodedPart(Encoded::Other(NewRows::encode(
            table, batches,
        )?)));
    }
    refuse_system(table)?;
    let watermark = checked_watermark(table, batches)?;
    let rows = batches
        .iter()
        .map(|batch| table.codec.encode_rows(batch))
        .collect::<Result<_>>()?;
    Ok(EncodedPart(Encoded::Appended { rows, watermark }))
}

impl EncodedPart {
    pub fn stage(self, table: &Arc<Table>, stage: &mut Stage) -> Result<()> {
        match self.0 {
            Encoded::Empty => Ok(()),
            Encoded::Appended { rows, watermark } => {
                for part in &rows {
                    stage.push_appended(part.iter().map(|r| r.data()))?;
                }
                stage.raise_watermark(watermark);
                Ok(())
            }
            Encoded::Other(rows) => rows.stage(table, stage),
        }
    }
}

/// Write a statement's rows to a table; returns how many were inserted.
pub async fn insert_batches(
    table: &Arc<Table>,
    writer: &Writer,
    batches: &[RecordBatch],
) -> Result<u64> {
    let rows = NewRows::encode(table, batches)?;
    rows.write(table, writer).await
}

/// The watermark new rows carry, once they are known to leave no NOT NULL
/// column empty.
fn checked_watermark(table: &Table, batches: &[RecordBatch]) -> Result<Option<i64>> {
    for batch in batches {
        check_not_null(table, batch)?;
    }
    table.watermark_of(batches)
}

/// New rows encoded for the writer. Encoding needs nothing but the rows,
/// so a bulk load encodes its parts apart and joins them.
pub struct NewRows {
    op: WriteOp,
    watermark: Option<i64>,
}

/// Write rows to a table weir keeps for itself, which statements cannot write.
pub async fn insert_own(
    table: &Arc<Table>,
    writer: &Writer,
    batches: &[RecordBatch],
) -> Result<u64> {
    NewRows::encode_any(table, batches)?
        .write(table, writer)
        .await
}

impl NewRows {
    pub fn encode(table: &Table, batches: &[RecordBatch]) -> Result<NewRows> {
        refuse_system(table)?;
        NewRows::encode_any(table, batches)
    }

    fn encode_any(table: &Table, batches: &[RecordBatch]) -> Result<NewRows> {
        let watermark = checked_watermark(table, batches)?;
        let op = if table.def.contents_in_log() {
            WriteOp::Append {
                rows: encode_rows(table, batches)?,
            }
        } else if table.def.is_keyed() {
            let rows = keyed_rows(table, batches)?;
            match table.def.conflict {
                Some(_) => WriteOp::Merge {
                    rows,
                    merge: Merge(crate::sql::conflict::merger(table)?),
                },
                None => WriteOp::Insert { rows },
            }
        } else {
            WriteOp::InsertUnkeyed {
                rows: encode_rows(table, batches)?,
            }
        };
        Ok(NewRows { op, watermark })
    }

    /// The rows of `parts` in order, as one statement's.
    pub fn join(parts: Vec<NewRows>) -> Result<Option<NewRows>> {
        let mut parts = parts.into_iter();
        let Some(mut joined) = parts.next() else {
            return Ok(None);
        };
        for part in parts {
            joined.watermark = joined.watermark.max(part.watermark);
            match (&mut joined.op, part.op) {
                (WriteOp::Append { rows }, WriteOp::Append { rows: more })
                | (WriteOp::InsertUnkeyed { rows }, WriteOp::InsertUnkeyed { rows: more }) => {
                    rows.extend(more)
                }
                (WriteOp::Insert { rows }, WriteOp::Insert { rows: more }) => rows.extend(more),
                _ => {
                    return Err(Error::Internal(
                        "parts of one write were encoded for different tables".into(),
                    ));
                }
            }
        }
        Ok(Some(joined))
    }

    /// Add the rows to a bulk load's stage instead of writing them now.
    pub fn stage(self, table: &Arc<Table>, stage: &mut Stage) -> Result<()> {
        stage.push(&table.target(), self.op, self.watermark)
    }

    pub async fn write(self, table: &Arc<Table>, writer: &Writer) -> Result<u64> {
        writer
            .write_marked(table.target(), self.op, self.watermark)
            .await
    }
}

/// Delete the given current rows (full rows in the table's schema).
/// Delete the rows a statement read from `view`.
pub async fn delete_rows(
    table: &Arc<Table>,
    writer: &Writer,
    view: &ReadView,
    rows: &[RecordBatch],
) -> Result<u64> {
    refuse_append_only(table, "DELETE")?;
    let keys = read_rows(table, view, rows)?
        .into_iter()
        .map(|r| r.key)
        .collect();
    writer.write(table.target(), WriteOp::Delete { keys }).await
}

/// Replace `old` rows, as a statement read them from `view`, by `new`
/// rows, pairwise. A row of a table without a primary key keeps its
/// position, as RisingWave's rows keep their `_row_id`.
pub async fn update_rows(
    table: &Arc<Table>,
    writer: &Writer,
    view: &ReadView,
    old: &[RecordBatch],
    new: &[RecordBatch],
) -> Result<u64> {
    refuse_append_only(table, "UPDATE")?;
    for batch in new {
        check_not_null(table, batch)?;
    }
    let watermark = table.watermark_of(new)?;
    let old = read_rows(table, view, old)?;
    let new = match table.def.is_keyed() {
        true => keyed_rows(table, new)?,
        false => {
            let rows = encode_rows(table, new)?;
            old.iter()
                .zip(rows)
                .map(|(old, row)| KeyedRow {
                    key: old.key.clone(),
                    row,
                })
                .collect()
        }
    };
    let changes = old
        .into_iter()
        .zip(new)
        .map(|(old, new)| Change {
            old_key: old.key,
            old_row: old.row,
            new,
        })
        .collect();
    writer
        .write_marked(table.target(), WriteOp::Update { changes }, watermark)
        .await
}

fn refuse_system(table: &Table) -> Result<()> {
    if crate::catalog::is_system(&table.def.name) {
        return Err(Error::WrongObjectType(format!(
            "\"{}\" is a system table; weir writes it",
            table.def.name
        )));
    }
    if table.def.is_source() {
        return Err(Error::WrongObjectType(format!(
            "\"{}\" is a source, fed by its connector; write to the connector's topic instead",
            table.def.name
        )));
    }
    Ok(())
}

fn refuse_append_only(table: &Table, verb: &str) -> Result<()> {
    refuse_system(table)?;
    if table.def.is_append_only() {
        return Err(Error::NotSupported(format!(
            "{verb} is not supported on append-only table \"{}\"",
            table.def.name
        )));
    }
    Ok(())
}

fn check_not_null(table: &Table, batch: &RecordBatch) -> Result<()> {
    for (i, field) in table.schema.fields().iter().enumerate() {
        let nullable = field.is_nullable() && !table.def.primary_key.contains(&i);
        if !nullable && batch.column(i).null_count() > 0 {
            return Err(Error::NotNullViolation {
                table: table.def.name.clone(),
                column: field.name().clone(),
            });
        }
    }
    Ok(())
}

fn encode_rows(table: &Table, batches: &[RecordBatch]) -> Result<Vec<Vec<u8>>> {
    let mut out = Vec::with_capacity(batches.iter().map(RecordBatch::num_rows).sum());
    for batch in batches {
        let rows = table.codec.encode_rows(batch)?;
        out.extend(rows.iter().map(|r| r.data().to_vec()));
    }
    Ok(out)
}

/// Rows a statement read, with their keys: a keyed table's from the rows;
/// a table without a primary key keys each row by its position, found by
/// looking the row up in `view`. Equal rows are interchangeable there:
/// a statement that matched one matched each of them alike.
fn read_rows(table: &Table, view: &ReadView, batches: &[RecordBatch]) -> Result<Vec<KeyedRow>> {
    if table.def.is_keyed() {
        return keyed_rows(table, batches);
    }
    let rows = encode_rows(table, batches)?;
    let mut wanted: HashMap<&[u8], Vec<usize>> = HashMap::with_capacity(rows.len());
    for (i, row) in rows.iter().enumerate() {
        wanted.entry(row.as_slice()).or_default().push(i);
    }
    let mut keys: Vec<Option<Vec<u8>>> = vec![None; rows.len()];
    let prefix = keys::table_prefix(table.def.id);
    view.scan(
        CF_ROWS,
        prefix.clone(),
        keys::prefix_end(&prefix),
        |key, value| {
            if let Some(index) = wanted.get_mut(value).and_then(Vec::pop) {
                keys[index] = Some(key[prefix.len()..].to_vec());
            }
            Ok(true)
        },
    )?;
    // A row gone since the statement read it is skipped, as a DELETE of a
    // keyed row that is gone is.
    Ok(rows
        .into_iter()
        .zip(keys)
        .filter_map(|(row, key)| key.map(|key| KeyedRow { key, row }))
        .collect())
}

/// Rows of a keyed table with their keys.
fn keyed_rows(table: &Table, batches: &[RecordBatch]) -> Result<Vec<KeyedRow>> {
    let mut out = Vec::with_capacity(batches.iter().map(RecordBatch::num_rows).sum());
    for batch in batches {
        let keys = table.codec.encode_keys(batch)?;
        let rows = table.codec.encode_rows(batch)?;
        out.extend(keys.iter().zip(rows.iter()).map(|(k, r)| KeyedRow {
            key: k.data().to_vec(),
            row: r.data().to_vec(),
        }));
    }
    Ok(out)
}
