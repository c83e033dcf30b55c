//! Equi-joins of two inputs (inner, left, right, full), maintained incrementally.
//!
//! # Algorithm
//! A symmetric hash join over weighted changes. Each side keeps its rows in
//! state, indexed by join key, with their multiplicities. A change arriving
//! on one side is matched against the rows the other side holds now, and
//! every match goes out with the product of the two weights; then the change
//! is added to its own side. So each pair of rows is produced once, when the
//! later of the two arrives, and a retraction on either side retracts exactly
//! the pairs its row produced. Rows with a NULL in the key never match. A
//! residual predicate (the non-equality part of `ON`) filters the pairs.
//!
//! An outer join also keeps each row of a preserved side that has no match,
//! padded with NULLs. The padded row goes out while the other side holds
//! nothing under its key; when the other side's first row for the key
//! arrives it is retracted, and when the last one leaves it comes back.
//!
//! Interval and window joins of append-only inputs (or of an aggregate's
//! windows over them, which change only while open) bound each side's state
//! in time ([`Expiry`]): a row is deleted once the watermark shows that no
//! row still to come on the other side can match it. An interval join also
//! drops rows that arrive behind the watermark, as late, because partners
//! they would have matched may be gone; a window join leaves lateness to the
//! window operators before it.
//!
//! # State layout (under the operator's prefix)
//! A side whose rows fit in memory (up to 500,000) keeps them there and
//! logs its changes to state as chunks, one per barrier, read back on a
//! restart: a write per epoch rather than one per row ([`memory`]). Past
//! the limit, or in an interval or window join, each row is an entry of
//! its own, keyed by join key so that a key's rows are found without
//! reading the rest.
//! - chunks: `c` ++ `l` or `r` ++ sequence (u64 BE) -> records of key
//!   length (u32 LE), key, row length (u32 LE), row, diff (i64 LE)
//! - entries: `l` or `r` ++ key length (u32 BE) ++ key (row format) ++ row
//!   (row format) -> multiplicity (i64 LE); an arriving row adds to it as a
//!   merge, unread, and a zero left by additions and removals is no row
//! - bounded joins: `e` ++ expiry time (i64, order-preserving) ++ the key
//!   of the row's entry above (without the prefix) -> empty

use std::ops::Range;
use std::sync::Arc;

use datafusion::arrow::array::{
    Array, ArrayRef, Int64Array, RecordBatch, UInt32Array, new_null_array,
};
use datafusion::arrow::compute::{concat_batches, take_arrays};
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::row::{RowConverter, Rows, SortField};
use datafusion::physical_expr::PhysicalExpr;

use crate::dataflow::change::{ChangeBatch, Watermark, evaluate_all};
use crate::dataflow::errors::RowErrors;
use crate::dataflow::operator::{Context, Operator};
use crate::dataflow::operators::window::record_late;
use crate::dataflow::state::read_count;
use crate::error::Result;
use crate::state::keys::{ordered, prefix_end};

mod asof;
mod memory;
mod residual;

pub use asof::Asof;
use memory::{FastMap, InMemory};

/// One side of the join.
pub struct Side {
    /// Join key expressions over this side's rows.
    pub keys: Vec<Arc<dyn PhysicalExpr>>,
    /// This side's schema.
    pub schema: SchemaRef,
}

/// How long a row of one side can still find a partner: while its time
/// plus `keep` has not fallen behind the watermark.
#[derive(Debug, Clone, PartialEq)]
pub struct Expiry {
    /// The side's column holding the row's time.
    pub column: usize,
    /// Microseconds.
    pub keep: i64,
    /// The side's event-time column that the other side's expiry counts
    /// on: a row whose value there is behind the watermark on arrival may
    /// have lost partners already, so it is late and dropped.
    pub late: Option<usize>,
}

pub struct Join {
    sides: [Side; 2],
    /// Interval and window joins: when each side's rows expire.
    expiry: Option<[Expiry; 2]>,
    /// The view, named in late events.
    view: String,
    watermark: Option<i64>,
    /// The expiry index holds nothing below this any more: the next expiry
    /// scan starts here rather than walk the deletions of every earlier one.
    expired: Option<i64>,
    /// Each side's rows in memory, while the operator's state started empty
    /// and they fit: then a key the memory does not hold is held nowhere.
    /// Each side gives its memory up on its own, so that the small side of
    /// a join (a few maxima against every bid) stays in memory.
    memory: [Option<InMemory>; 2],
    /// Whether the state has been looked at for `memory` yet.
    checked: bool,
    /// What each side's `memory` may hold (tests lower it).
    memory_limit: Budget,
    /// Which sides' inputs never retract.
    append_only: [bool; 2],
    /// Converts join keys; both sides' keys have the same types.
    key_rows: RowConverter,
    /// Converts each side's whole rows.
    rows: [RowConverter; 2],
    /// Pairs must also satisfy this, over the joined schema.
    residual: Option<Arc<dyn PhysicalExpr>>,
    /// Left columns then right columns, all nullable.
    schema: SchemaRef,
    /// Which sides keep their unmatched rows, padded with NULLs.
    preserve: [bool; 2],
    /// An as-of join: each left row joins its closest right row only.
    asof: Option<Asof>,
    /// Keys match when both are NULL (EXCEPT and INTERSECT compare rows so).
    nulls_equal: bool,
}

/// What a join keeps of a side in memory at most; past it the join writes
/// the side's rows back and reads them from RocksDB from then on.
#[derive(Debug, Clone, Copy)]
pub(super) struct Budget {
    /// Rows of a side that has retracted, each distinct row allocated on
    /// its own.
    pub counted_rows: usize,
    /// Bytes of an append-only side, packed in one buffer, counted by what
    /// its buffers reserved: a Nexmark bid takes about 80 (and its buffer
    /// grows by doubling), so the 9.2 million bids of 10 M events fit, in
    /// a third of the memory Flink's heap state holds them in.
    pub packed_bytes: usize,
}

const MEMORY: Budget = Budget {
    counted_rows: 500_000,
    packed_bytes: 2 << 30,
};

/// Each join key of a batch with the range of its rows in an order of rows.
type Groups<'k> = Vec<(&'k [u8], Range<usize>)>;

/// The rows with a valid key, grouped by key without a vector per key:
/// each key with its range in the returned row order.
fn group_rows<'k>(keys: &'k Rows, valid: &[bool]) -> (Groups<'k>, Vec<u32>) {
    let mut seen: FastMap<&[u8], u32> = FastMap::default();
    seen.reserve(valid.len());
    let mut distinct: Vec<&[u8]> = Vec::new();
    let mut tagged: Vec<(u32, u32)> = Vec::with_capacity(valid.len());
    for i in (0..valid.len()).filter(|i| valid[*i]) {
        let key = keys.row(i).data();
        let next = distinct.len() as u32;
        let group = *seen.entry(key).or_insert(next);
        if group == next {
            distinct.push(key);
        }
        tagged.push((group, i as u32));
    }
    tagged.sort_unstable();
    let mut groups = Vec::with_capacity(distinct.len());
    let mut start = 0;
    for run in tagged.chunk_by(|a, b| a.0 == b.0) {
        groups.push((distinct[run[0].0 as usize], start..start + run.len()));
        start += run.len();
    }
    (groups, tagged.into_iter().map(|(_, i)| i).collect())
}

fn tag(side: usize) -> &'static [u8] {
    if side == 0 { b"l" } else { b"r" }
}

impl Join {
    pub fn new(
        left: Side,
        right: Side,
        residual: Option<Arc<dyn PhysicalExpr>>,
        schema: SchemaRef,
    ) -> Result<Join> {
        let key_types = left
            .keys
            .iter()
            .map(|k| Ok(SortField::new(k.data_type(&left.schema)?)))
            .collect::<Result<Vec<_>>>()?;
        let converter = |schema: &SchemaRef| {
            RowConverter::new(
                schema
                    .fields()
                    .iter()
                    .map(|f| SortField::new(f.data_type().clone()))
                    .collect(),
            )
        };
        Ok(Join {
            key_rows: RowConverter::new(key_types)?,
            rows: [converter(&left.schema)?, converter(&right.schema)?],
            sides: [left, right],
            residual,
            schema: crate::catalog::nullable(&schema),
            preserve: [false, false],
            expiry: None,
            view: String::new(),
            watermark: None,
            expired: None,
            memory: [None, None],
            checked: false,
            memory_limit: MEMORY,
            append_only: [false; 2],
            asof: None,
            nulls_equal: false,
        })
    }

    /// Delete each side's rows once they can no longer match (`view` is
    /// named in the late events of an interval join).
    pub fn bounded(mut self, expiry: [Expiry; 2], view: String) -> Join {
        self.expiry = Some(expiry);
        self.view = view;
        self
    }

    /// Each row's expiry time, `None` for rows without a time; and the batch
    /// without the rows that arrived late, which are recorded.
    fn expiring(
        &self,
        side: usize,
        batch: ChangeBatch,
        cx: &mut Context<'_>,
    ) -> Result<(ChangeBatch, Vec<Option<i64>>)> {
        let Some(expiry) = self.expiry.as_ref().map(|e| &e[side]) else {
            return Ok((batch, Vec::new()));
        };
        let times = crate::catalog::micros(batch.rows().column(expiry.column))?;
        let late = match (self.watermark, expiry.late) {
            (Some(w), Some(column)) => {
                let event = crate::catalog::micros(batch.rows().column(column))?;
                let late: Vec<u32> = (0..event.len() as u32)
                    .filter(|i| event.is_valid(*i as usize) && event.value(*i as usize) < w)
                    .collect();
                (!late.is_empty()).then_some((late, event, w))
            }
            _ => None,
        };
        let Some((late, event_times, watermark)) = late else {
            let at = times
                .iter()
                .map(|t| t.map(|t| t.saturating_add(expiry.keep)));
            return Ok((batch, at.collect()));
        };
        record_late(&self.view, batch.rows(), &event_times, &late, watermark, cx)?;
        let kept: Vec<u32> = (0..times.len() as u32)
            .filter(|i| late.binary_search(i).is_err())
            .collect();
        let at = kept.iter().map(|i| {
            let i = *i as usize;
            times
                .is_valid(i)
                .then(|| times.value(i).saturating_add(expiry.keep))
        });
        let at = at.collect();
        Ok((batch.take(&UInt32Array::from(kept))?, at))
    }

    /// Delete the rows of both sides that expire before `watermark`.
    fn expire(&mut self, watermark: i64, cx: &mut Context<'_>) -> Result<()> {
        let index = cx.key(b"e");
        let lower = match self.expired {
            Some(from) => [index.as_slice(), &ordered(from)].concat(),
            None => index.clone(),
        };
        let upper = [index.as_slice(), &ordered(watermark)].concat();
        self.expired = self.expired.max(Some(watermark));
        for (key, _) in cx.state.scan(&lower, &upper)? {
            let suffix = &key[index.len() + 8..];
            let side = usize::from(suffix.first() == Some(&b'r'));
            if let Some(memory) = &mut self.memory[side] {
                memory.forget(suffix);
            }
            let entry = cx.key(suffix);
            cx.state.delete(entry);
            cx.state.delete(key);
        }
        Ok(())
    }

    /// Keep unmatched rows of the left and/or right side (LEFT, RIGHT, FULL).
    pub fn outer(mut self, left: bool, right: bool) -> Join {
        self.preserve = [left, right];
        self
    }

    /// Match NULL keys with NULL keys, as `IS NOT DISTINCT FROM` does.
    pub fn nulls_equal(mut self) -> Join {
        self.nulls_equal = true;
        self
    }

    /// Note which sides' inputs never retract: such a side may keep more
    /// rows in memory, packed.
    pub fn appending(mut self, left: bool, right: bool) -> Join {
        self.append_only = [left, right];
        self
    }

    /// One side's columns beside the other side's: whole rows of the join.
    fn joined(
        &self,
        side: usize,
        mine: Vec<ArrayRef>,
        theirs: Vec<ArrayRef>,
    ) -> Result<RecordBatch> {
        let (left, right) = if side == 0 {
            (mine, theirs)
        } else {
            (theirs, mine)
        };
        let columns: Vec<ArrayRef> = left.into_iter().chain(right).collect();
        Ok(RecordBatch::try_new(self.schema.clone(), columns)?)
    }

    /// Rows of one side with the other side's columns NULL.
    fn padded(&self, present: usize, columns: Vec<ArrayRef>) -> Result<RecordBatch> {
        let n = columns.first().map_or(0, |c| c.len());
        let nulls = self.sides[1 - present]
            .schema
            .fields()
            .iter()
            .map(|f| new_null_array(f.data_type(), n))
            .collect();
        self.joined(present, columns, nulls)
    }

    /// Held rows of `side`, decoded.
    fn decode(&self, side: usize, held: &[&[u8]]) -> Result<Vec<ArrayRef>> {
        let parser = self.rows[side].parser();
        Ok(self.rows[side].convert_rows(held.iter().map(|r| parser.parse(r)))?)
    }

    fn prefix(cx: &Context<'_>, side: usize, key: &[u8]) -> Vec<u8> {
        let mut suffix = tag(side).to_vec();
        suffix.extend_from_slice(&(key.len() as u32).to_be_bytes());
        suffix.extend_from_slice(key);
        cx.key(&suffix)
    }

    /// The join keys of a batch's rows, and which may match: not those
    /// with a NULL key column, unless NULLs match each other.
    fn keys(
        &self,
        side: usize,
        rows: &RecordBatch,
        errors: &mut RowErrors,
    ) -> Result<(Rows, Vec<bool>)> {
        let columns = evaluate_all(&self.sides[side].keys, rows, errors)?;
        let valid = (0..rows.num_rows())
            .map(|i| self.nulls_equal || columns.iter().all(|c| c.is_valid(i)))
            .collect();
        Ok((self.key_rows.convert_columns(&columns)?, valid))
    }

    /// The rows `side` holds under `key`, with their multiplicities: from
    /// memory while the join keeps its rows there, else from state.
    fn held(&self, cx: &Context<'_>, side: usize, key: &[u8]) -> Result<Vec<(Vec<u8>, i64)>> {
        let mut held = Vec::new();
        self.each_held(cx, side, key, |row, count| held.push((row.to_vec(), count)))?;
        Ok(held)
    }

    /// Call `f` with each row `side` holds under `key`, and its
    /// multiplicity; from memory without copying the rows where it can.
    fn each_held(
        &self,
        cx: &Context<'_>,
        side: usize,
        key: &[u8],
        mut f: impl FnMut(&[u8], i64),
    ) -> Result<()> {
        let Some(memory) = &self.memory[side] else {
            for (row, count) in self.matches(cx, side, key)? {
                f(&row, count);
            }
            return Ok(());
        };
        memory.each(key, f);
        Ok(())
    }

    /// Add `diff` to a row's multiplicity on its side.
    fn count(
        &mut self,
        cx: &mut Context<'_>,
        side: usize,
        key: &[u8],
        row: &[u8],
        diff: i64,
    ) -> Result<()> {
        if let Some(memory) = &mut self.memory[side] {
            memory.add(key, row, diff);
            return Ok(());
        }
        let state_key = [Self::prefix(cx, side, key).as_slice(), row].concat();
        if diff > 0 {
            // Most rows are new: adding to their count reads nothing.
            return cx.state.add_count(state_key, diff);
        }
        let held = match cx.state.get(&state_key)? {
            Some(bytes) => read_count(&bytes)?,
            None => 0,
        };
        match held + diff {
            0 => cx.state.delete(state_key),
            count => cx.state.put(state_key, count.to_le_bytes().to_vec()),
        }
        Ok(())
    }

    /// A side's rows in memory as the join starts, where they can be held
    /// there: a key the memory does not hold is then held nowhere.
    fn start_memory(&self, cx: &mut Context<'_>, side: usize) -> Result<Option<InMemory>> {
        if self.expiry.is_some() {
            // Bounded joins index each row's entry by its expiry, so their
            // rows are entries of their own, held in memory only from empty.
            let end = prefix_end(cx.prefix);
            let empty = cx.state.first_in(cx.prefix, &end, false)?.is_none();
            return Ok(empty.then(InMemory::entries));
        }
        let rows = cx.key(tag(side));
        if cx
            .state
            .first_in(&rows, &prefix_end(&rows), false)?
            .is_some()
        {
            // The side gave its memory up in an earlier run.
            return Ok(None);
        }
        let chunks = cx.key(&[b"c", tag(side)].concat());
        let stored = cx.state.scan(&chunks, &prefix_end(&chunks))?;
        InMemory::from_chunks(stored).map(Some)
    }

    /// Write the rows changed in memory back to state; a side gives its
    /// memory up once it holds too many.
    fn write_back(&mut self, cx: &mut Context<'_>) {
        for side in 0..2 {
            let Some(memory) = self.memory[side].take() else {
                continue;
            };
            // A side that spills writes its rows as entries, so the chunk
            // of this epoch's changes would be written only to be deleted.
            if !memory.fits(self.memory_limit, self.append_only[side]) {
                memory.spill(cx.state, cx.prefix, tag(side));
                continue;
            }
            let memory = self.memory[side].insert(memory);
            memory.write(cx.state, cx.prefix, tag(side));
        }
    }

    /// The rows the other side holds under `key`, with their multiplicities.
    fn matches(&self, cx: &Context<'_>, other: usize, key: &[u8]) -> Result<Vec<(Vec<u8>, i64)>> {
        let prefix = Self::prefix(cx, other, key);
        let mut held = Vec::new();
        for (k, v) in cx.state.scan(&prefix, &prefix_end(&prefix))? {
            // Additions and removals that summed to nothing leave a zero.
            match read_count(&v)? {
                0 => {}
                count => held.push((k[prefix.len()..].to_vec(), count)),
            }
        }
        Ok(held)
    }

    /// Rows `mine` of the arriving batch.
    fn arriving(batch: &RecordBatch, mine: Vec<u32>) -> Result<Vec<ArrayRef>> {
        Ok(take_arrays(
            batch.columns(),
            &UInt32Array::from(mine),
            None,
        )?)
    }
}

impl Operator for Join {
    fn name(&self) -> &'static str {
        "HashJoin"
    }

    fn describe(&self) -> String {
        let keys = |side: &Side| {
            side.keys
                .iter()
                .map(|k| k.to_string())
                .collect::<Vec<_>>()
                .join(", ")
        };
        let kind = match self.preserve {
            [false, false] => "inner",
            [true, false] => "left",
            [false, true] => "right",
            [true, true] => "full",
        };
        let mut out = format!(
            "{kind} on [{}] = [{}]",
            keys(&self.sides[0]),
            keys(&self.sides[1])
        );
        if let Some(residual) = &self.residual {
            out.push_str(&format!(" filter {residual}"));
        }
        if let Some(asof) = &self.asof {
            out.push_str(&format!(" as of closest {} {:?}", asof.right, asof.closest));
        }
        if let Some([left, right]) = &self.expiry {
            let bound = |side: &Side, e: &Expiry| {
                let name = side.schema.field(e.column).name().clone();
                format!("{name} + {}s", e.keep as f64 / 1e6)
            };
            out.push_str(&format!(
                " expires left at {}, right at {}",
                bound(&self.sides[0], left),
                bound(&self.sides[1], right)
            ));
        }
        out
    }

    fn on_barrier(
        &mut self,
        _barrier: crate::dataflow::change::Barrier,
        cx: &mut Context<'_>,
    ) -> Result<()> {
        self.write_back(cx);
        Ok(())
    }

    fn on_watermark(&mut self, wm: Watermark, cx: &mut Context<'_>) -> Result<Option<Watermark>> {
        self.watermark = self.watermark.max(Some(wm.micros));
        if self.expiry.is_some() {
            self.expire(wm.micros, cx)?;
        }
        Ok(Some(wm))
    }

    fn on_changes(&mut self, input: usize, batch: ChangeBatch, cx: &mut Context<'_>) -> Result<()> {
        if !self.checked {
            self.checked = true;
            self.memory = [self.start_memory(cx, 0)?, self.start_memory(cx, 1)?];
        }
        let side = input.min(1);
        if self.asof.is_some() {
            return self.asof_changes(side, batch, cx);
        }
        if self.residual.is_some() && self.preserve != [false, false] && self.expiry.is_none() {
            return self.residual_changes(side, batch, cx);
        }
        let other = 1 - side;
        let (batch, expires) = self.expiring(side, batch, cx)?;
        let rows = batch.rows();
        let (keys, valid) = self.keys(side, rows, &mut cx.state.errors)?;
        let encoded = self.rows[side].convert_columns(rows.columns())?;
        let (groups, order) = group_rows(&keys, &valid);
        let mut joined: Vec<RecordBatch> = Vec::new();
        let mut weights: Vec<i64> = Vec::new();
        let diff = |row: u32| batch.diffs().value(row as usize);
        let mut unmatched: Vec<u32> = Vec::new();
        if self.preserve[side] {
            // A NULL key never matches: the row stays padded.
            unmatched.extend((0..valid.len() as u32).filter(|i| !valid[*i as usize]));
        }
        // Pairs, and the other side's rows whose padding comes or goes, are
        // gathered over all keys and built into batches once; the other
        // side's rows of the pairs are copied into one buffer.
        let (mut mine, mut theirs, mut pair_weights) = (Vec::new(), Vec::new(), Vec::new());
        let mut their_ends: Vec<usize> = Vec::new();
        let (mut repadded, mut repad_weights) = (Vec::new(), Vec::new());
        for (key, range) in &groups {
            let members = &order[range.clone()];
            let (mut other_total, mut other_rows) = (0, 0);
            self.each_held(cx, other, key, |other_row, count| {
                other_total += count;
                other_rows += 1;
                for row in members {
                    mine.push(*row);
                    theirs.extend_from_slice(other_row);
                    their_ends.push(theirs.len());
                    pair_weights.push(diff(*row) * count);
                }
            })?;
            if self.preserve[side] && other_total == 0 {
                unmatched.extend(members);
            }
            if self.preserve[other] && other_rows != 0 {
                // The other side's rows lose or regain their padding when
                // this side's rows under the key come or go.
                let mut before = 0;
                self.each_held(cx, side, key, |_, count| before += count)?;
                let after = before + members.iter().map(|r| diff(*r)).sum::<i64>();
                let sign = match (before > 0, after > 0) {
                    (false, true) => -1,
                    (true, false) => 1,
                    _ => 0,
                };
                if sign != 0 {
                    let held = self.held(cx, other, key)?;
                    repad_weights.extend(held.iter().map(|(_, c)| sign * c));
                    repadded.extend(held.into_iter().map(|(r, _)| r));
                }
            }
            // Then the change joins its own side.
            let prefix = match expires.is_empty() {
                true => Vec::new(),
                false => Self::prefix(cx, side, key),
            };
            // A row already past its time goes at the next scan.
            let floor = self.expired.unwrap_or(i64::MIN);
            for row in members {
                let encoded_row = encoded.row(*row as usize).data();
                if let Some(Some(at)) = expires.get(*row as usize) {
                    let at = (*at).max(floor);
                    let entry = &[prefix.as_slice(), encoded_row].concat()[cx.prefix.len()..];
                    let index = cx.key(&[b"e".as_slice(), &ordered(at), entry].concat());
                    cx.state.put(index, Vec::new());
                }
                self.count(cx, side, key, encoded_row, diff(*row))?;
            }
        }
        if !mine.is_empty() {
            let starts = std::iter::once(0).chain(their_ends.iter().copied());
            let theirs: Vec<&[u8]> = starts
                .zip(&their_ends)
                .map(|(a, b)| &theirs[a..*b])
                .collect();
            let pairs = self.joined(
                side,
                Self::arriving(rows, mine)?,
                self.decode(other, &theirs)?,
            )?;
            joined.push(pairs);
            weights.extend(pair_weights);
        }
        if !repadded.is_empty() {
            let held: Vec<&[u8]> = repadded.iter().map(Vec::as_slice).collect();
            joined.push(self.padded(other, self.decode(other, &held)?)?);
            weights.extend(repad_weights);
        }
        if !unmatched.is_empty() {
            weights.extend(unmatched.iter().map(|r| diff(*r)));
            joined.push(self.padded(side, Self::arriving(rows, unmatched)?)?);
        }
        if joined.is_empty() {
            return Ok(());
        }
        let rows = concat_batches(&self.schema, &joined)?;
        let changes = ChangeBatch::new(rows, Int64Array::from(weights))?;
        match &self.residual {
            Some(predicate) => {
                let kept = changes.filter(predicate, &mut cx.state.errors)?;
                cx.emit(kept);
            }
            None => cx.emit(changes),
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use datafusion::arrow::array::TimestampMicrosecondArray;
    use datafusion::arrow::datatypes::{DataType, Field, Schema};
    use datafusion::physical_expr::expressions::Column;

    use super::memory::REWRITE_RECORDS;
    use super::*;
    use crate::dataflow::state::EpochState;
    use crate::state::Store;

    fn side() -> Side {
        let time = crate::dataflow::window::timestamp_type();
        let schema = Arc::new(Schema::new(vec![
            Field::new("k", DataType::Int64, true),
            Field::new("ts", time, true),
        ]));
        Side {
            keys: vec![Arc::new(Column::new("k", 0))],
            schema,
        }
    }

    /// An inner join of two `side()`s on `k`.
    fn join() -> Join {
        let (left, right) = (side(), side());
        let joined: Vec<Field> = [&left.schema, &right.schema]
            .iter()
            .flat_map(|s| s.fields().iter().map(|f| f.as_ref().clone()))
            .collect();
        Join::new(left, right, None, Arc::new(Schema::new(joined))).expect("join")
    }

    fn rows(keys: Vec<i64>, times: Vec<i64>) -> ChangeBatch {
        let batch = RecordBatch::try_new(
            side().schema,
            vec![
                Arc::new(Int64Array::from(keys)),
                Arc::new(TimestampMicrosecondArray::from(times)),
            ],
        )
        .expect("batch");
        ChangeBatch::inserts(batch)
    }

    #[test]
    fn interval_join_state_stays_bounded_on_an_endless_stream() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = Store::open(dir.path()).expect("store");
        // left.ts BETWEEN right.ts AND right.ts + 10
        let expiry = |keep| Expiry {
            column: 1,
            keep,
            late: Some(1),
        };
        let mut op = join().bounded([expiry(0), expiry(10)], "v".into());
        let (mut most, mut pairs) = (0, 0i64);
        for step in 1..=200i64 {
            let mut state = EpochState::new(store.db().clone());
            let prefix = b"test".to_vec();
            let mut cx = Context::new(&mut state, &prefix);
            let keys: Vec<i64> = (0..10).collect();
            let at = |offset| vec![step * 100 + offset; 10];
            op.on_changes(1, rows(keys.clone(), at(0)), &mut cx)
                .expect("right");
            op.on_changes(0, rows(keys, at(5)), &mut cx).expect("left");
            op.on_watermark(
                Watermark {
                    micros: step * 100 + 50,
                },
                &mut cx,
            )
            .expect("watermark");
            let barrier = crate::dataflow::change::Barrier {
                epoch: step as u64,
                now: 0,
            };
            op.on_barrier(barrier, &mut cx).expect("barrier");
            pairs += cx
                .take_output()
                .iter()
                .map(|b| b.diffs().values().iter().sum::<i64>())
                .sum::<i64>();
            let mut batch = rocksdb::WriteBatch::default();
            state.drain_into(&mut batch);
            store.db().write(batch).expect("commit");
            most = most.max(store.state_entries(b"test"));
        }
        assert_eq!(pairs, 200 * 10);
        assert_eq!(store.state_entries(b"test"), 0);
        // One step's rows and their expiry index, at most.
        assert!(most <= 40, "state grew to {most} entries");
    }

    /// The output of each of five epochs of changes to an outer join,
    /// sorted, and the state entries left: memory limited to `limit` rows,
    /// the operator replaced by a fresh one (as on a restart) before epoch
    /// `restart`.
    fn outer_join_run(limit: usize, restart: usize) -> (Vec<Vec<String>>, usize) {
        join_run(limit, restart, false)
    }

    /// [`outer_join_run`], or with `appending` the same steps all as
    /// insertions, into a join that knows its inputs never retract.
    fn join_run(limit: usize, restart: usize, appending: bool) -> (Vec<Vec<String>>, usize) {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = Store::open(dir.path()).expect("store");
        let fresh = || {
            let mut op = join().outer(true, false).appending(appending, appending);
            // About as many packed rows as counted ones.
            op.memory_limit = Budget {
                counted_rows: limit,
                packed_bytes: limit.saturating_mul(64),
            };
            op
        };
        let mut op = fresh();
        let mut out = Vec::new();
        let steps: [(usize, Vec<i64>, Vec<i64>, i64); 5] = [
            (0, vec![1, 2, 3], vec![10, 20, 30], 1),
            (1, vec![1, 1, 4], vec![11, 12, 40], 1),
            (0, vec![1, 4], vec![10, 41], 1),
            (1, vec![1], vec![11], -1),
            (0, vec![2, 1], vec![20, 10], -1),
        ];
        for (epoch, (input, keys, times, sign)) in steps.into_iter().enumerate() {
            if epoch == restart {
                op = fresh();
            }
            let mut state = EpochState::new(store.db().clone());
            let prefix = b"test".to_vec();
            let mut cx = Context::new(&mut state, &prefix);
            let batch = rows(keys.clone(), times);
            let sign = if appending { 1 } else { sign };
            let diffs = Int64Array::from(vec![sign; keys.len()]);
            let batch = ChangeBatch::new(batch.rows().clone(), diffs).expect("batch");
            op.on_changes(input, batch, &mut cx).expect("changes");
            let barrier = crate::dataflow::change::Barrier {
                epoch: epoch as u64,
                now: 0,
            };
            op.on_barrier(barrier, &mut cx).expect("barrier");
            out.push(consolidated(crate::dataflow::change::render(
                &cx.take_output(),
            )));
            let mut batch = rocksdb::WriteBatch::default();
            state.drain_into(&mut batch);
            store.db().write(batch).expect("commit");
        }
        (out, store.state_entries(b"test"))
    }

    /// Rendered changes with each row's diffs summed: an appended side may
    /// hold a row twice over where a counted one holds it with count 2.
    fn consolidated(lines: Vec<String>) -> Vec<String> {
        let mut sums: std::collections::BTreeMap<String, i64> = Default::default();
        for line in lines {
            let (diff, row) = line.split_once(' ').expect("a diff and a row");
            *sums.entry(row.to_string()).or_default() += diff.parse::<i64>().expect("diff");
        }
        sums.into_iter()
            .filter(|(_, diff)| *diff != 0)
            .map(|(row, diff)| format!("{diff:+} {row}"))
            .collect()
    }

    #[test]
    fn rows_kept_in_memory_join_like_rows_read_from_state() {
        // Memory throughout, memory given up after the first epoch, and the
        // state alone (a limit of zero gives memory up at once).
        let (kept, _) = outer_join_run(MEMORY.counted_rows, usize::MAX);
        assert_eq!(kept, outer_join_run(3, usize::MAX).0);
        assert_eq!(kept, outer_join_run(0, usize::MAX).0);
    }

    #[test]
    fn a_packed_side_past_its_bytes_gives_its_memory_up_and_joins_alike() {
        let (kept, in_memory) = join_run(MEMORY.counted_rows, usize::MAX, true);
        let (spilled, entries) = join_run(3, usize::MAX, true);
        assert_eq!(kept, spilled);
        assert!(
            entries > in_memory,
            "{entries} entries spilled, {in_memory} kept in memory"
        );
        for restart in 1..5 {
            assert_eq!(kept, join_run(3, restart, true).0, "restart {restart}");
        }
    }

    #[test]
    fn a_restarted_join_reads_its_rows_back_from_chunks_or_entries() {
        let (kept, _) = outer_join_run(MEMORY.counted_rows, usize::MAX);
        for restart in 1..5 {
            // From chunks, and from entries once memory was given up.
            assert_eq!(
                kept,
                outer_join_run(MEMORY.counted_rows, restart).0,
                "restart {restart}"
            );
            assert_eq!(kept, outer_join_run(3, restart).0, "restart {restart}");
        }
    }

    #[test]
    fn chunks_are_rewritten_once_retractions_outweigh_rows() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = Store::open(dir.path()).expect("store");
        let mut op = join();
        let prefix = b"test".to_vec();
        // Each epoch inserts a key and retracts the one before it.
        let steps = 3 * REWRITE_RECORDS / 2;
        for (epoch, step) in (0..steps as i64).step_by(500).enumerate() {
            let mut state = EpochState::new(store.db().clone());
            let mut cx = Context::new(&mut state, &prefix);
            let keys: Vec<i64> = (step..step + 500).collect();
            let diffs = Int64Array::from(vec![1; 500]);
            let batch = ChangeBatch::new(rows(keys.clone(), keys.clone()).rows().clone(), diffs);
            op.on_changes(0, batch.expect("batch"), &mut cx)
                .expect("insert");
            let diffs = Int64Array::from(vec![-1; 500]);
            let batch = ChangeBatch::new(rows(keys.clone(), keys).rows().clone(), diffs);
            op.on_changes(0, batch.expect("batch"), &mut cx)
                .expect("retract");
            let barrier = crate::dataflow::change::Barrier {
                epoch: epoch as u64,
                now: 0,
            };
            op.on_barrier(barrier, &mut cx).expect("barrier");
            let mut batch = rocksdb::WriteBatch::default();
            state.drain_into(&mut batch);
            store.db().write(batch).expect("commit");
        }
        let records = op.memory[0].as_mut().map_or(0, |m| m.logged_records());
        assert!(
            records <= REWRITE_RECORDS + 1000,
            "{records} records logged"
        );
        assert!(
            store.state_entries(b"test") < steps / 500,
            "chunks were not deleted"
        );
    }
}
