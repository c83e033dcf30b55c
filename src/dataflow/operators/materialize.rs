//! The end of every view's dataflow: keeps the view's rows and appends its
//! changes to the view's changelog topic, once per epoch.
//!
//! Views with a unique key (the group key of an aggregate) store
//! `view id ++ key -> row`, so a lookup by key is a point read. Other views
//! store `view id ++ row -> multiplicity ++ row`, a multiset.

use std::collections::HashMap;
use std::sync::Arc;

use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::compute::concat_batches;

use crate::catalog::Table;
use crate::dataflow::change::{Barrier, ChangeBatch};
use crate::dataflow::operator::{Context, Operator};
use crate::error::{Error, Result};
use crate::log::embedded::{CHUNK_ROWS, encode_chunk};
use crate::state::keys;

pub struct Materialize {
    view: Arc<Table>,
    /// Changes received this epoch, in order.
    pending: Vec<ChangeBatch>,
    /// The next offset of the changelog topic (one partition).
    next_offset: u64,
}

/// A multiset entry: multiplicity (i64 LE) then the row.
pub fn encode_counted(count: i64, row: &[u8]) -> Vec<u8> {
    let mut out = count.to_le_bytes().to_vec();
    out.extend_from_slice(row);
    out
}

pub fn decode_counted(value: &[u8]) -> Result<(i64, &[u8])> {
    let head: [u8; 8] = value
        .get(..8)
        .and_then(|h| h.try_into().ok())
        .ok_or_else(|| Error::Internal("a view row is truncated".into()))?;
    Ok((i64::from_le_bytes(head), &value[8..]))
}

impl Materialize {
    pub fn new(view: Arc<Table>, next_offset: u64) -> Materialize {
        Materialize {
            view,
            pending: Vec::new(),
            next_offset,
        }
    }

    /// Net change per row this epoch, in first-seen order.
    fn consolidate(&self, batch: &ChangeBatch) -> Result<Vec<(Vec<u8>, i64)>> {
        let rows = self.view.codec.encode_rows(batch.rows())?;
        let mut order: Vec<Vec<u8>> = Vec::new();
        let mut net: HashMap<Vec<u8>, i64> = HashMap::new();
        for (i, row) in rows.iter().enumerate() {
            let entry = net.entry(row.data().to_vec()).or_insert_with(|| {
                order.push(row.data().to_vec());
                0
            });
            *entry += batch.diffs().value(i);
        }
        Ok(order
            .into_iter()
            .filter_map(|row| {
                let diff = net.get(&row).copied().unwrap_or(0);
                (diff != 0).then_some((row, diff))
            })
            .collect())
    }

    fn apply_keyed(&self, changes: &[(Vec<u8>, i64)], cx: &mut Context<'_>) -> Result<()> {
        let id = self.view.def.id;
        // Retractions first, so that a -old/+new pair on one key leaves the new row.
        let decoded = self
            .view
            .codec
            .decode(changes.iter().map(|(r, _)| r.as_slice()))?;
        let keys = self.view.codec.encode_keys(&decoded)?;
        for (i, (_, diff)) in changes.iter().enumerate() {
            if *diff < 0 {
                cx.state.delete_row(keys::row_key(id, keys.row(i).data()));
            }
        }
        for (i, (row, diff)) in changes.iter().enumerate() {
            if *diff > 0 {
                cx.state
                    .put_row(keys::row_key(id, keys.row(i).data()), row.clone());
            }
        }
        Ok(())
    }

    fn apply_multiset(&self, changes: &[(Vec<u8>, i64)], cx: &mut Context<'_>) -> Result<()> {
        let id = self.view.def.id;
        for (row, diff) in changes {
            let key = keys::row_key(id, row);
            let old = match cx.state.get_row(&key)? {
                Some(value) => decode_counted(&value)?.0,
                None => 0,
            };
            let new = old + diff;
            if new < 0 {
                return Err(Error::Internal(format!(
                    "view \"{}\" would hold a row a negative number of times",
                    self.view.def.name
                )));
            }
            if new == 0 {
                cx.state.delete_row(key);
            } else {
                cx.state.put_row(key, encode_counted(new, row));
            }
        }
        Ok(())
    }

    fn append_changelog(&mut self, changes: &[(Vec<u8>, i64)], cx: &mut Context<'_>) {
        let topic = self.view.def.topic();
        for chunk in changes.chunks(CHUNK_ROWS) {
            let encoded = encode_chunk(chunk.iter().map(|(row, diff)| (*diff, row.as_slice())));
            cx.state
                .append_log(keys::log_key(topic, 0, self.next_offset), encoded);
            self.next_offset += chunk.len() as u64;
        }
    }
}

impl Operator for Materialize {
    fn name(&self) -> &'static str {
        "Materialize"
    }

    fn describe(&self) -> String {
        let mode = if self.view.def.multiset {
            "multiset"
        } else {
            "keyed"
        };
        format!("view={} {mode}", self.view.def.name)
    }

    fn on_changes(
        &mut self,
        _input: usize,
        batch: ChangeBatch,
        _cx: &mut Context<'_>,
    ) -> Result<()> {
        self.pending.push(batch);
        Ok(())
    }

    fn on_barrier(&mut self, _barrier: Barrier, cx: &mut Context<'_>) -> Result<()> {
        let pending = std::mem::take(&mut self.pending);
        if pending.is_empty() {
            return Ok(());
        }
        let relaxed = self.view.nullable_schema.clone();
        let rows: Vec<RecordBatch> = pending
            .iter()
            .map(|b| RecordBatch::try_new(relaxed.clone(), b.rows().columns().to_vec()))
            .collect::<Result<_, _>>()?;
        let diffs: Vec<i64> = pending
            .iter()
            .flat_map(|b| b.diffs().values().iter().copied())
            .collect();
        let all = ChangeBatch::new(
            concat_batches(&relaxed, &rows)?,
            datafusion::arrow::array::Int64Array::from(diffs),
        )?;
        let changes = self.consolidate(&all)?;
        if self.view.def.multiset {
            self.apply_multiset(&changes, cx)?;
        } else {
            self.apply_keyed(&changes, cx)?;
        }
        self.append_changelog(&changes, cx);
        Ok(())
    }
}
