//! The end of every view's dataflow: keeps the view's rows and appends its
//! changes to the view's changelog topic, once per epoch.
//!
//! Views with a unique key (the group key of an aggregate) store
//! `view id ++ key -> row`, so a lookup by key is a point read. Other views
//! store `view id ++ row -> multiplicity ++ row`, a multiset; additions are
//! RocksDB merges that sum the multiplicities, so appending reads nothing.
//! A view that never retracts stores no rows at all (`TableDef::log_only`):
//! a keyless filter or projection of append-only inputs, or an aggregate
//! that emits on window close, whose groups each emit one final row. Its
//! changelog, read from the start, is its contents, as a stream's topic is.
//! Each epoch then writes one entry per chunk of rows instead of one per
//! row, and nothing is flushed or compacted twice.
//!
//! Every changelog chunk carries the view's watermark, so views on this view
//! see event time advance; a watermark that rises without changes is written
//! as an empty chunk.
//!
//! With `EMIT EVERY` the view holds its changes back: they are summed per row
//! in state (`p` ++ row -> diff) and applied at the first barrier at least an
//! interval after the previous emission (`t` -> when the next one is due).

use std::collections::HashMap;
use std::sync::Arc;

use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::compute::concat_batches;

use crate::catalog::{Storage, Table};
use crate::dataflow::change::{Barrier, ChangeBatch, Watermark};
use crate::dataflow::operator::{Context, Operator};
use crate::dataflow::state::read_count;
use crate::error::{Error, Result};
use crate::log::embedded::{CHUNK_ROWS, ChunkBody, Stamp, encode_chunk, push_trailer};
use crate::state::keys;
use crate::state::rows::{decode_counted, encode_counted};

pub struct Materialize {
    view: Arc<Table>,
    /// Changes received this epoch, in order.
    pending: Vec<ChangeBatch>,
    /// The next offset of the changelog topic (one partition).
    next_offset: u64,
    /// Hold changes back for this long (`EMIT EVERY`), in microseconds.
    every: Option<i64>,
    /// The input's watermark.
    watermark: Option<i64>,
    /// The watermark the changelog last carried.
    published: Option<i64>,
}

/// A stored view row as the rows it stands for: a multiset view keeps one
/// entry with a count, a keyed view the row itself.
pub fn expand_row(table: &Table, value: &[u8], out: &mut Vec<Vec<u8>>) -> Result<()> {
    if table.def.is_multiset() {
        let (count, row) = decode_counted(value)?;
        for _ in 0..count {
            out.push(row.to_vec());
        }
    } else {
        out.push(value.to_vec());
    }
    Ok(())
}

impl Materialize {
    pub fn new(view: Arc<Table>, next_offset: u64, every: Option<i64>) -> Materialize {
        Materialize {
            view,
            pending: Vec::new(),
            next_offset,
            every,
            watermark: None,
            published: None,
        }
    }

    /// Net change per row this epoch, in first-seen order. A view that
    /// keeps no rows takes its changes as they come: with nothing to
    /// retract, netting would only find equal rows to count together.
    fn consolidate(&self, batch: &ChangeBatch) -> Result<Vec<(Vec<u8>, i64)>> {
        let rows = self.view.codec.encode_rows(batch.rows())?;
        let diffs = batch.diffs().values();
        if self.view.def.storage == Storage::LogView {
            return Ok(rows
                .iter()
                .zip(diffs.iter())
                .map(|(row, diff)| (row.data().to_vec(), *diff))
                .collect());
        }
        let mut net: Vec<(Vec<u8>, i64)> = Vec::with_capacity(rows.num_rows());
        let mut seen: HashMap<&[u8], usize, ahash::RandomState> =
            HashMap::with_capacity_and_hasher(rows.num_rows(), ahash::RandomState::new());
        for (row, diff) in rows.iter().zip(diffs.iter()) {
            let slot = *seen.entry(row.data()).or_insert_with(|| {
                net.push((row.data().to_vec(), 0));
                net.len() - 1
            });
            net[slot].1 += diff;
        }
        net.retain(|(_, diff)| *diff != 0);
        Ok(net)
    }

    fn apply_keyed(&self, changes: &[(Vec<u8>, i64)], cx: &mut Context<'_>) -> Result<()> {
        let id = self.view.def.id;
        // Retractions first, so that a -old/+new pair on one key leaves the new row.
        let decoded = self
            .view
            .codec
            .decode(changes.iter().map(|(r, _)| r.as_slice()))?;
        let keys = self.view.codec.encode_keys(&decoded)?;
        // A keyed view never reads its rows back within the epoch, so they
        // go past the ordered map, in order: a later write of a key wins.
        let table = id.to_be_bytes();
        for (i, (_, diff)) in changes.iter().enumerate() {
            if *diff < 0 {
                cx.state.write_row_last(&[&table, keys.row(i).data()], None);
            }
        }
        for (i, (row, diff)) in changes.iter().enumerate() {
            if *diff > 0 {
                cx.state
                    .write_row_last(&[&table, keys.row(i).data()], Some(row));
            }
        }
        Ok(())
    }

    /// Additions merge into the stored count unread; only a retraction
    /// reads it, to delete the row when none is left.
    fn apply_multiset(&self, changes: &[(Vec<u8>, i64)], cx: &mut Context<'_>) -> Result<()> {
        let id = self.view.def.id;
        for (row, diff) in changes {
            let key = keys::row_key(id, row);
            if *diff > 0 {
                cx.state.add_row(key, encode_counted(*diff, row));
                continue;
            }
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

    /// A view that keeps no rows can only grow: its changelog is all there is.
    fn check_additions(&self, changes: &[(Vec<u8>, i64)]) -> Result<()> {
        if changes.iter().any(|(_, diff)| *diff < 0) {
            return Err(self.retracted());
        }
        Ok(())
    }

    fn retracted(&self) -> Error {
        Error::Internal(format!(
            "append-only view \"{}\" received a retraction",
            self.view.def.name
        ))
    }

    fn append_changelog(
        &mut self,
        changes: &[(Vec<u8>, i64)],
        barrier: Barrier,
        cx: &mut Context<'_>,
    ) {
        if changes.is_empty() {
            self.append_watermark(barrier, cx);
            return;
        }
        let stamp = stamp(barrier);
        for chunk in changes.chunks(CHUNK_ROWS) {
            let encoded = encode_chunk(
                chunk.iter().map(|(row, diff)| (*diff, row.as_slice())),
                self.watermark,
                stamp,
            );
            self.append_chunk(encoded, chunk.len(), cx);
        }
        self.published = self.watermark;
    }

    /// An epoch without changes: an empty chunk if the watermark rose.
    fn append_watermark(&mut self, barrier: Barrier, cx: &mut Context<'_>) {
        if self.watermark > self.published {
            let empty = encode_chunk(std::iter::empty(), self.watermark, stamp(barrier));
            self.append_chunk(empty, 0, cx);
            self.published = self.watermark;
        }
    }

    fn append_chunk(&mut self, chunk: Vec<u8>, records: usize, cx: &mut Context<'_>) {
        let key = keys::log_key(self.view.def.topic(), 0, self.next_offset);
        cx.state.append_log(key, chunk);
        self.next_offset += records as u64;
    }

    /// A view that keeps no rows: each batch's rows are encoded straight
    /// into changelog chunks. Its changes are not netted (nothing retracts)
    /// and need no list of rows, one allocation each, in between.
    fn append_batches(
        &mut self,
        pending: &[ChangeBatch],
        barrier: Barrier,
        cx: &mut Context<'_>,
    ) -> Result<()> {
        let stamp = stamp(barrier);
        let mut body: Option<ChunkBody> = None;
        let mut appended = false;
        for batch in pending {
            let rows = self.view.codec.encode_rows(batch.rows())?;
            let per_row = rows.size() / rows.num_rows().max(1);
            for (row, diff) in rows.iter().zip(batch.diffs().values()) {
                if *diff < 0 {
                    return Err(self.retracted());
                }
                let chunk = body.get_or_insert_with(|| ChunkBody::for_rows(CHUNK_ROWS, per_row));
                chunk.push(*diff, row.data());
                if chunk.count() as usize == CHUNK_ROWS
                    && let Some(full) = body.take()
                {
                    self.append_body(full, stamp, cx);
                    appended = true;
                }
            }
        }
        match body {
            Some(last) => self.append_body(last, stamp, cx),
            None if !appended => self.append_watermark(barrier, cx),
            None => {}
        }
        self.published = self.watermark;
        Ok(())
    }

    fn append_body(&mut self, body: ChunkBody, stamp: Option<Stamp>, cx: &mut Context<'_>) {
        let records = body.count() as usize;
        let mut chunk = body.finish();
        push_trailer(&mut chunk, self.watermark, stamp);
        self.append_chunk(chunk, records, cx);
    }

    /// Apply net changes to the view's rows and its changelog.
    fn publish(
        &mut self,
        changes: &[(Vec<u8>, i64)],
        barrier: Barrier,
        cx: &mut Context<'_>,
    ) -> Result<()> {
        match self.view.def.storage {
            Storage::LogView => self.check_additions(changes)?,
            Storage::MultisetView => self.apply_multiset(changes, cx)?,
            _ => self.apply_keyed(changes, cx)?,
        }
        self.append_changelog(changes, barrier, cx);
        Ok(())
    }

    /// `EMIT EVERY`: add this epoch's changes to the held ones, and publish
    /// them all once the interval has passed.
    fn hold(
        &mut self,
        every: i64,
        changes: Vec<(Vec<u8>, i64)>,
        barrier: Barrier,
        cx: &mut Context<'_>,
    ) -> Result<()> {
        for (row, diff) in changes {
            let key = cx.key(&[b"p".as_slice(), &row].concat());
            let held = match cx.state.get(&key)? {
                Some(bytes) => read_count(&bytes)?,
                None => 0,
            };
            match held + diff {
                0 => cx.state.delete(key),
                sum => cx.state.put(key, sum.to_le_bytes().to_vec()),
            }
        }
        let due_key = cx.key(b"t");
        let now = cx.state.now;
        let due = match cx.state.get(&due_key)? {
            Some(bytes) => read_count(&bytes)?,
            None => {
                cx.state.put(due_key, (now + every).to_le_bytes().to_vec());
                return Ok(());
            }
        };
        if now < due {
            return Ok(());
        }
        let prefix = cx.key(b"p");
        let held = cx.state.scan(&prefix, &keys::prefix_end(&prefix))?;
        let mut changes = Vec::with_capacity(held.len());
        for (key, value) in held {
            cx.state.delete(key.clone());
            changes.push((key[prefix.len()..].to_vec(), read_count(&value)?));
        }
        cx.state.put(due_key, (now + every).to_le_bytes().to_vec());
        self.publish(&changes, barrier, cx)
    }
}

/// What a changelog chunk of this epoch carries besides its rows.
fn stamp(barrier: Barrier) -> Option<Stamp> {
    Some(Stamp {
        epoch: barrier.epoch,
        time: barrier.now,
        compacted: false,
    })
}

impl Operator for Materialize {
    fn name(&self) -> &'static str {
        "Materialize"
    }

    fn describe(&self) -> String {
        let mode = match self.view.def.storage {
            Storage::LogView => "changelog only",
            Storage::MultisetView => "multiset",
            _ => "keyed",
        };
        format!("view={} {mode}", self.view.def.name)
    }

    fn on_changes(
        &mut self,
        _input: usize,
        batch: ChangeBatch,
        cx: &mut Context<'_>,
    ) -> Result<()> {
        // Held until the barrier: it counts towards the epoch's size.
        cx.state.account(batch.rows().get_array_memory_size());
        self.pending.push(batch);
        Ok(())
    }

    fn on_watermark(&mut self, wm: Watermark, _cx: &mut Context<'_>) -> Result<Option<Watermark>> {
        self.watermark = self.watermark.max(Some(wm.micros));
        Ok(Some(wm))
    }

    fn on_barrier(&mut self, barrier: Barrier, cx: &mut Context<'_>) -> Result<()> {
        let pending = std::mem::take(&mut self.pending);
        if self.every.is_none() && self.view.def.storage == Storage::LogView {
            return self.append_batches(&pending, barrier, cx);
        }
        let changes = self.epoch_changes(pending)?;
        match self.every {
            Some(every) => self.hold(every, changes, barrier, cx),
            None => self.publish(&changes, barrier, cx),
        }
    }
}

impl Materialize {
    /// The epoch's changes, netted per row.
    fn epoch_changes(&self, pending: Vec<ChangeBatch>) -> Result<Vec<(Vec<u8>, i64)>> {
        if pending.is_empty() {
            return Ok(Vec::new());
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
        self.consolidate(&all)
    }
}
