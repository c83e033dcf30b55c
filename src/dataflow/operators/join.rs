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
//! Interval and window joins of append-only inputs bound each side's state
//! in time ([`Expiry`]): a row is deleted once the watermark shows that no
//! row still to come on the other side can match it. An interval join also
//! drops rows that arrive behind the watermark, as late, because partners
//! they would have matched may be gone; a window join leaves lateness to the
//! window operators before it.
//!
//! # State layout (under the operator's prefix)
//! - `l` or `r` ++ key length (u32 BE) ++ key (row format) ++ row (row
//!   format) -> multiplicity (i64 LE)
//! - bounded joins: `e` ++ expiry time (i64, order-preserving) ++ the key
//!   of the row's entry above (without the prefix) -> empty

use std::collections::HashMap;
use std::sync::Arc;

use datafusion::arrow::array::{
    Array, ArrayRef, Int64Array, RecordBatch, UInt32Array, new_null_array,
};
use datafusion::arrow::compute::{concat_batches, take_arrays};
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::row::{RowConverter, Rows, SortField};
use datafusion::physical_expr::PhysicalExpr;

use crate::dataflow::change::{ChangeBatch, Watermark, evaluate_all};
use crate::dataflow::operator::{Context, Operator};
use crate::dataflow::operators::window::record_late;
use crate::dataflow::state::read_count;
use crate::error::Result;
use crate::state::keys::prefix_end;

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
    /// Rows behind the watermark on arrival are late and dropped.
    pub drop_late: bool,
}

pub struct Join {
    sides: [Side; 2],
    /// Interval and window joins: when each side's rows expire.
    expiry: Option<[Expiry; 2]>,
    /// The view, named in late events.
    view: String,
    watermark: Option<i64>,
    /// Each side's rows in memory, while the operator's state started empty
    /// and they fit: then a key the memory does not hold is held nowhere.
    /// Each side gives its memory up on its own, so that the small side of
    /// a join (a few maxima against every bid) stays in memory.
    memory: [Option<Memory>; 2],
    /// Whether the state has been looked at for `memory` yet.
    checked: bool,
    /// Rows each side's `memory` may hold (tests lower it).
    memory_limit: usize,
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
}

/// Rows kept in memory per side at most; past it the join writes them back
/// and reads that side's state from RocksDB from then on.
/// its state from RocksDB from then on.
const MEMORY_ROWS: usize = 500_000;

/// One side's rows (row format) by join key (row format), with multiplicities.
type RowsByKey = HashMap<Vec<u8>, HashMap<Vec<u8>, i64>>;

/// One side's rows by join key, with multiplicities, and the keys changed
/// since the last barrier (written back to state there).
#[derive(Default)]
struct Memory {
    rows: RowsByKey,
    dirty: std::collections::HashSet<Vec<u8>>,
}

/// Drop a row from memory by its state suffix: side tag, key length (u32
/// BE), key, row.
fn forget(memory: &mut [Option<Memory>; 2], suffix: &[u8]) {
    let side = usize::from(suffix.first() == Some(&b'r'));
    let Some(memory) = &mut memory[side] else {
        return;
    };
    let Some(len) = suffix
        .get(1..5)
        .and_then(|b| b.try_into().ok())
        .map(u32::from_be_bytes)
    else {
        return;
    };
    let Some(key) = suffix.get(5..5 + len as usize) else {
        return;
    };
    let row = &suffix[5 + len as usize..];
    if let Some(rows) = memory.rows.get_mut(key) {
        rows.remove(row);
        if rows.is_empty() {
            memory.rows.remove(key);
        }
    }
}

/// An `i64` as bytes that sort like the numbers.
fn ordered(value: i64) -> [u8; 8] {
    ((value as u64) ^ (1 << 63)).to_be_bytes()
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
            memory: [None, None],
            checked: false,
            memory_limit: MEMORY_ROWS,
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
        let late: Vec<u32> = match self.watermark {
            Some(w) if expiry.drop_late => (0..times.len() as u32)
                .filter(|i| times.is_valid(*i as usize) && times.value(*i as usize) < w)
                .collect(),
            _ => Vec::new(),
        };
        if late.is_empty() {
            let at = times
                .iter()
                .map(|t| t.map(|t| t.saturating_add(expiry.keep)));
            return Ok((batch, at.collect()));
        }
        let watermark = self.watermark.unwrap_or(i64::MIN);
        record_late(&self.view, batch.rows(), &times, &late, watermark, cx)?;
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
        let lower = cx.key(b"e");
        let upper = cx.key(&[b"e".as_slice(), &ordered(watermark)].concat());
        for (key, _) in cx.state.scan(&lower, &upper)? {
            let suffix = &key[lower.len() + 8..];
            forget(&mut self.memory, suffix);
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

    /// The join keys of a batch's rows; `None` where a key column is NULL.
    fn keys(&self, side: usize, rows: &RecordBatch) -> Result<(Rows, Vec<bool>)> {
        let columns = evaluate_all(&self.sides[side].keys, rows)?;
        let valid = (0..rows.num_rows())
            .map(|i| columns.iter().all(|c| c.is_valid(i)))
            .collect();
        Ok((self.key_rows.convert_columns(&columns)?, valid))
    }

    /// The rows `side` holds under `key`, with their multiplicities: from
    /// memory while the join keeps its rows there, else from state.
    fn held(&self, cx: &Context<'_>, side: usize, key: &[u8]) -> Result<Vec<(Vec<u8>, i64)>> {
        match &self.memory[side] {
            Some(memory) => Ok(memory
                .rows
                .get(key)
                .map(|rows| {
                    rows.iter()
                        .filter(|(_, c)| **c != 0)
                        .map(|(r, c)| (r.clone(), *c))
                        .collect()
                })
                .unwrap_or_default()),
            None => self.matches(cx, side, key),
        }
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
            let rows = memory.rows.entry(key.to_vec()).or_default();
            *rows.entry(row.to_vec()).or_insert(0) += diff;
            memory.dirty.insert(key.to_vec());
            return Ok(());
        }
        let state_key = [Self::prefix(cx, side, key).as_slice(), row].concat();
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

    /// Write the rows changed in memory back to state; a side gives its
    /// memory up once it holds too many.
    fn write_back(&mut self, cx: &mut Context<'_>) {
        for side in 0..2 {
            let Some(memory) = &mut self.memory[side] else {
                continue;
            };
            for key in std::mem::take(&mut memory.dirty) {
                let prefix = Self::prefix(cx, side, &key);
                let Some(rows) = memory.rows.get_mut(&key) else {
                    continue;
                };
                rows.retain(|row, count| {
                    let state_key = [prefix.as_slice(), row].concat();
                    if *count == 0 {
                        cx.state.delete(state_key);
                    } else {
                        cx.state.put(state_key, count.to_le_bytes().to_vec());
                    }
                    *count != 0
                });
                if rows.is_empty() {
                    memory.rows.remove(&key);
                }
            }
            let held: usize = memory.rows.values().map(HashMap::len).sum();
            if held > self.memory_limit {
                self.memory[side] = None;
            }
        }
    }

    /// The rows the other side holds under `key`, with their multiplicities.
    fn matches(&self, cx: &Context<'_>, other: usize, key: &[u8]) -> Result<Vec<(Vec<u8>, i64)>> {
        let prefix = Self::prefix(cx, other, key);
        cx.state
            .scan(&prefix, &prefix_end(&prefix))?
            .into_iter()
            .map(|(k, v)| Ok((k[prefix.len()..].to_vec(), read_count(&v)?)))
            .collect()
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
            // A join that starts on empty state (a new view) can keep its
            // rows in memory: a key it does not hold is then held nowhere.
            self.checked = true;
            let end = prefix_end(cx.prefix);
            if cx.state.first_in(cx.prefix, &end, false)?.is_none() {
                self.memory = [Some(Memory::default()), Some(Memory::default())];
            }
        }
        let side = input.min(1);
        let other = 1 - side;
        let (batch, expires) = self.expiring(side, batch, cx)?;
        let rows = batch.rows();
        let (keys, valid) = self.keys(side, rows)?;
        let encoded = self.rows[side].convert_columns(rows.columns())?;
        let mut by_key: HashMap<&[u8], Vec<u32>> = HashMap::new();
        let mut joined: Vec<RecordBatch> = Vec::new();
        let mut weights: Vec<i64> = Vec::new();
        let diff = |row: u32| batch.diffs().value(row as usize);
        let mut unmatched: Vec<u32> = Vec::new();
        for (i, ok) in valid.iter().enumerate() {
            if *ok {
                by_key.entry(keys.row(i).data()).or_default().push(i as u32);
            } else if self.preserve[side] {
                // A NULL key never matches: the row stays padded.
                unmatched.push(i as u32);
            }
        }
        // Pairs, and the other side's rows whose padding comes or goes, are
        // gathered over all keys and built into batches once.
        let (mut mine, mut theirs, mut pair_weights) = (Vec::new(), Vec::new(), Vec::new());
        let (mut repadded, mut repad_weights) = (Vec::new(), Vec::new());
        for (key, members) in &by_key {
            let held = self.held(cx, other, key)?;
            for row in members {
                for (other_row, count) in &held {
                    mine.push(*row);
                    theirs.push(other_row.clone());
                    pair_weights.push(diff(*row) * count);
                }
            }
            let other_total: i64 = held.iter().map(|(_, c)| c).sum();
            if self.preserve[side] && other_total == 0 {
                unmatched.extend(members);
            }
            if self.preserve[other] && !held.is_empty() {
                // The other side's rows lose or regain their padding when
                // this side's rows under the key come or go.
                let before: i64 = self.held(cx, side, key)?.iter().map(|(_, c)| c).sum();
                let after = before + members.iter().map(|r| diff(*r)).sum::<i64>();
                let sign = match (before > 0, after > 0) {
                    (false, true) => -1,
                    (true, false) => 1,
                    _ => 0,
                };
                if sign != 0 {
                    repad_weights.extend(held.iter().map(|(_, c)| sign * c));
                    repadded.extend(held.into_iter().map(|(r, _)| r));
                }
            }
            // Then the change joins its own side.
            let prefix = Self::prefix(cx, side, key);
            for row in members {
                let encoded_row = encoded.row(*row as usize).data();
                if let Some(Some(at)) = expires.get(*row as usize) {
                    let entry = &[prefix.as_slice(), encoded_row].concat()[cx.prefix.len()..];
                    let index = cx.key(&[b"e".as_slice(), &ordered(*at), entry].concat());
                    cx.state.put(index, Vec::new());
                }
                self.count(cx, side, key, encoded_row, diff(*row))?;
            }
        }
        if !mine.is_empty() {
            let theirs: Vec<&[u8]> = theirs.iter().map(Vec::as_slice).collect();
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
            Some(predicate) => cx.emit(changes.filter(predicate.as_ref())?),
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
            drop_late: true,
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

    #[test]
    fn rows_kept_in_memory_join_like_rows_read_from_state() {
        let run = |limit: usize| {
            let dir = tempfile::tempdir().expect("tempdir");
            let store = Store::open(dir.path()).expect("store");
            let mut op = join().outer(true, false);
            op.memory_limit = limit;
            let mut out = Vec::new();
            let steps: [(usize, Vec<i64>, Vec<i64>, i64); 5] = [
                (0, vec![1, 2, 3], vec![10, 20, 30], 1),
                (1, vec![1, 1, 4], vec![11, 12, 40], 1),
                (0, vec![1, 4], vec![10, 41], 1),
                (1, vec![1], vec![11], -1),
                (0, vec![2, 1], vec![20, 10], -1),
            ];
            for (epoch, (input, keys, times, sign)) in steps.into_iter().enumerate() {
                let mut state = EpochState::new(store.db().clone());
                let prefix = b"test".to_vec();
                let mut cx = Context::new(&mut state, &prefix);
                let batch = rows(keys.clone(), times);
                let diffs = Int64Array::from(vec![sign; keys.len()]);
                let batch = ChangeBatch::new(batch.rows().clone(), diffs).expect("batch");
                op.on_changes(input, batch, &mut cx).expect("changes");
                let barrier = crate::dataflow::change::Barrier {
                    epoch: epoch as u64,
                    now: 0,
                };
                op.on_barrier(barrier, &mut cx).expect("barrier");
                let mut lines = crate::dataflow::change::render(&cx.take_output());
                lines.sort();
                out.push(lines);
                let mut batch = rocksdb::WriteBatch::default();
                state.drain_into(&mut batch);
                store.db().write(batch).expect("commit");
            }
            (out, store.state_entries(b"test"))
        };
        // Memory throughout, memory given up after the first epoch, and the
        // state alone (a limit of zero gives memory up at once).
        let kept = run(MEMORY_ROWS);
        assert_eq!(kept, run(3));
        assert_eq!(kept, run(0));
    }
}
