//! `row_number() OVER (PARTITION BY p ORDER BY o) <= k` over an input that
//! only grows: the first `k` rows of each partition, each with its rank.
//!
//! A row beyond the `k`th can never come back into the first `k` when no
//! row ever leaves, so each partition keeps only its first `k` rows, not
//! all of them as the general window operator must. They are stored as
//! one state entry per partition and held in memory while the cache has
//! room; at a barrier each partition the epoch touched merges its new rows
//! in and sends, for every rank whose row changed, the old row's
//! retraction and the new row.
//!
//! Ties in `o` are ranked by the row's encoding, as the general window
//! operator ranks them, so the same rows always get the same ranks.
//!
//! # State layout (under the operator's prefix)
//! - partition key -> `u32` count, then per kept row in rank order: `u32`
//!   length and the sort key (row format of `o`), `u32` length and the row
//!   (row format of the input); integers little-endian.

use crate::dataflow::operators::FastMap;
use std::sync::Arc;

use datafusion::arrow::array::{ArrayRef, Int64Array, RecordBatch, UInt64Array};
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::row::{RowConverter, SortField};
use datafusion::physical_expr::{LexOrdering, PhysicalExpr, PhysicalSortExpr};

use crate::dataflow::change::{ChangeBatch, evaluate_all};
use crate::dataflow::operator::{Context, Operator};
use crate::dataflow::operators::over::converter;
use crate::error::{Error, Result};

/// Kept rows held in memory across epochs; beyond this the cache is
/// emptied and partitions are read from state again.
const CACHE_ROWS: usize = 500_000;

/// Bytes a pending row costs beyond its encodings: two vectors and its
/// share of the map.
const ENTRY_OVERHEAD: usize = 64;

/// One kept row: its sort key and the row, both in row format.
type Entry = (Vec<u8>, Vec<u8>);

pub struct Rank {
    partition: Vec<Arc<dyn PhysicalExpr>>,
    order: Vec<PhysicalSortExpr>,
    limit: usize,
    keys: RowConverter,
    sort_keys: RowConverter,
    rows: RowConverter,
    output: SchemaRef,
    /// This epoch's new rows, per partition key.
    pending: FastMap<Vec<u8>, Vec<Entry>>,
    /// Partitions' kept rows as state holds them, for those held.
    cache: FastMap<Vec<u8>, Vec<Entry>>,
    cached_rows: usize,
    /// Bytes `pending` holds, roughly.
    pending_bytes: usize,
}

impl Rank {
    /// Ranks `input`'s rows in each partition by `order`, keeping the first
    /// `limit`; `output` is the input's columns and then the rank.
    pub fn new(
        partition: Vec<Arc<dyn PhysicalExpr>>,
        order: Vec<PhysicalSortExpr>,
        limit: usize,
        input: &SchemaRef,
        output: SchemaRef,
    ) -> Result<Rank> {
        let key_fields = partition
            .iter()
            .map(|e| Ok(SortField::new(e.data_type(input)?)))
            .collect::<Result<Vec<_>>>()?;
        let sort_fields = order
            .iter()
            .map(|e| {
                let kind = e.expr.data_type(input)?;
                Ok(SortField::new_with_options(kind, e.options))
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(Rank {
            partition,
            order,
            limit,
            keys: RowConverter::new(key_fields)?,
            sort_keys: RowConverter::new(sort_fields)?,
            rows: converter(input)?,
            output,
            pending: FastMap::default(),
            cache: FastMap::default(),
            cached_rows: 0,
            pending_bytes: 0,
        })
    }

    /// A partition's kept rows: from the cache, else from state.
    fn kept(&mut self, key: &[u8], cx: &Context<'_>) -> Result<Vec<Entry>> {
        if let Some(entries) = self.cache.remove(key) {
            self.cached_rows -= entries.len();
            return Ok(entries);
        }
        match cx.state.get(&cx.key(key))? {
            Some(bytes) => decode_entries(&bytes),
            None => Ok(Vec::new()),
        }
    }

    /// Merge a partition's new rows into its kept ones, store the first
    /// `limit`, and collect the changed ranks' retractions and rows.
    fn settle(
        &mut self,
        key: Vec<u8>,
        added: Vec<Entry>,
        out: &mut Changes,
        cx: &mut Context<'_>,
    ) -> Result<()> {
        let old = self.kept(&key, cx)?;
        let mut first: Vec<&Entry> = old.iter().chain(&added).collect();
        first.sort_unstable();
        first.truncate(self.limit);
        let mut changed = false;
        for rank in 0..first.len().max(old.len()) {
            let (before, after) = (old.get(rank), first.get(rank));
            if before.map(|e| &e.1) == after.map(|e| &e.1) {
                continue;
            }
            changed = true;
            if let Some((_, row)) = before {
                out.push(row, rank, -1);
            }
            if let Some((_, row)) = after {
                out.push(row, rank, 1);
            }
        }
        let kept = match changed {
            true => {
                let kept: Vec<Entry> = first.into_iter().cloned().collect();
                cx.state.put(cx.key(&key), encode_entries(&kept));
                kept
            }
            false => old,
        };
        self.cached_rows += kept.len();
        self.cache.insert(key, kept);
        Ok(())
    }
}

/// Changed ranks of one barrier, as rows, ranks and weights.
#[derive(Default)]
struct Changes {
    rows: Vec<Vec<u8>>,
    ranks: Vec<u64>,
    diffs: Vec<i64>,
}

impl Changes {
    fn push(&mut self, row: &[u8], rank: usize, diff: i64) {
        self.rows.push(row.to_vec());
        self.ranks.push(rank as u64 + 1);
        self.diffs.push(diff);
    }
}

/// Bytes a pending row holds: its sort key, its row and their upkeep.
fn held(entry: &Entry) -> usize {
    entry.0.len() + entry.1.len() + ENTRY_OVERHEAD
}

fn encode_entries(entries: &[Entry]) -> Vec<u8> {
    let bytes: usize = entries.iter().map(|(k, r)| 8 + k.len() + r.len()).sum();
    let mut out = Vec::with_capacity(4 + bytes);
    out.extend_from_slice(&(entries.len() as u32).to_le_bytes());
    for (sort_key, row) in entries {
        for part in [sort_key, row] {
            out.extend_from_slice(&(part.len() as u32).to_le_bytes());
            out.extend_from_slice(part);
        }
    }
    out
}

fn decode_entries(bytes: &[u8]) -> Result<Vec<Entry>> {
    let mut cursor = Cursor { bytes, at: 0 };
    let count = cursor.length()?;
    let mut entries = Vec::with_capacity(count);
    for _ in 0..count {
        let sort_key = cursor.part()?.to_vec();
        entries.push((sort_key, cursor.part()?.to_vec()));
    }
    Ok(entries)
}

struct Cursor<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Cursor<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8]> {
        let part = self.bytes.get(self.at..self.at + n).ok_or_else(malformed)?;
        self.at += n;
        Ok(part)
    }

    fn length(&mut self) -> Result<usize> {
        let raw: [u8; 4] = self.take(4)?.try_into().map_err(|_| malformed())?;
        Ok(u32::from_le_bytes(raw) as usize)
    }

    fn part(&mut self) -> Result<&'a [u8]> {
        let n = self.length()?;
        self.take(n)
    }
}

fn malformed() -> Error {
    Error::Internal("a partition's ranked rows kept in state are malformed".into())
}

impl Operator for Rank {
    fn name(&self) -> &'static str {
        "Rank"
    }

    fn describe(&self) -> String {
        let order = LexOrdering::new(self.order.iter().cloned())
            .map_or_else(String::new, |o| o.to_string());
        let partition: Vec<String> = self.partition.iter().map(|e| e.to_string()).collect();
        format!(
            "row_number() partition by [{}] order by [{order}] <= {}, append-only",
            partition.join(", "),
            self.limit
        )
    }

    fn on_changes(
        &mut self,
        _input: usize,
        batch: ChangeBatch,
        cx: &mut Context<'_>,
    ) -> Result<()> {
        if batch.diffs().values().iter().any(|d| *d != 1) {
            return Err(Error::Internal(
                "a ranking of an append-only input received a retraction".into(),
            ));
        }
        let rows = batch.rows();
        let count = rows.num_rows();
        let keys = evaluate_all(&self.partition, rows, &mut cx.state.errors)?;
        let keys = (!keys.is_empty())
            .then(|| self.keys.convert_columns(&keys))
            .transpose()?;
        let sort_columns = self
            .order
            .iter()
            .map(|e| Ok(e.expr.evaluate(rows)?.into_array(count)?))
            .collect::<Result<Vec<ArrayRef>>>()?;
        let sort_keys = self.sort_keys.convert_columns(&sort_columns)?;
        let encoded = self.rows.convert_columns(rows.columns())?;
        let before = self.pending_bytes;
        for i in 0..count {
            let key = keys.as_ref().map_or(&[][..], |k| k.row(i).data());
            let entry = (
                sort_keys.row(i).data().to_vec(),
                encoded.row(i).data().to_vec(),
            );
            self.pending_bytes += held(&entry);
            match self.pending.get_mut(key) {
                Some(entries) => {
                    entries.push(entry);
                    // Of an epoch's rows of a partition only the first
                    // `limit` can rank: the rest need not be held.
                    if entries.len() >= 2 * self.limit.max(4) {
                        entries.sort_unstable();
                        let dropped: usize = entries[self.limit..].iter().map(held).sum();
                        self.pending_bytes -= dropped;
                        entries.truncate(self.limit);
                    }
                }
                None => {
                    self.pending.insert(key.to_vec(), vec![entry]);
                }
            }
        }
        // Held until the barrier: counted as pending writes, so that the
        // epoch ends before they outgrow its budget.
        cx.state.account(self.pending_bytes.saturating_sub(before));
        Ok(())
    }

    fn on_barrier(
        &mut self,
        _barrier: crate::dataflow::change::Barrier,
        cx: &mut Context<'_>,
    ) -> Result<()> {
        let mut out = Changes::default();
        self.pending_bytes = 0;
        for (key, added) in std::mem::take(&mut self.pending) {
            self.settle(key, added, &mut out, cx)?;
        }
        if self.cached_rows > CACHE_ROWS {
            self.cache.clear();
            self.cached_rows = 0;
        }
        if out.rows.is_empty() {
            return Ok(());
        }
        let parser = self.rows.parser();
        let mut columns = self
            .rows
            .convert_rows(out.rows.iter().map(|r| parser.parse(r)))?;
        columns.push(Arc::new(UInt64Array::from(out.ranks)));
        let batch = RecordBatch::try_new(self.output.clone(), columns)?;
        cx.emit(ChangeBatch::new(batch, Int64Array::from(out.diffs))?);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use datafusion::arrow::compute::SortOptions;
    use datafusion::arrow::datatypes::{DataType, Field, Schema};
    use datafusion::physical_expr::expressions::Column;

    use super::*;
    use crate::dataflow::change::{Barrier, pretty, render};
    use crate::dataflow::state::EpochState;
    use crate::state::Store;

    /// The two largest `v` of each `g`.
    fn top_two() -> Rank {
        let input = Arc::new(Schema::new(vec![
            Field::new("g", DataType::Utf8, true),
            Field::new("v", DataType::Int64, true),
        ]));
        let mut fields = input.fields().to_vec();
        fields.push(Arc::new(Field::new("rn", DataType::UInt64, false)));
        let output = Arc::new(Schema::new(fields));
        let column = |i| Arc::new(Column::new("c", i)) as Arc<dyn PhysicalExpr>;
        let descending = SortOptions {
            descending: true,
            nulls_first: true,
        };
        let order = vec![PhysicalSortExpr::new(column(1), descending)];
        Rank::new(vec![column(0)], order, 2, &input, output).expect("rank")
    }

    fn epoch(op: &mut Rank, store: &Store, input: ChangeBatch) -> Vec<String> {
        let mut state = EpochState::new(store.db().clone());
        let prefix = b"rank".to_vec();
        let mut cx = Context::new(&mut state, &prefix);
        op.on_changes(0, input, &mut cx).expect("changes");
        op.on_barrier(Barrier { epoch: 1, now: 0 }, &mut cx)
            .expect("barrier");
        let mut out = render(&cx.take_output());
        out.sort();
        let mut batch = rocksdb::WriteBatch::default();
        state.drain_into(&mut batch);
        store.db().write(batch).expect("commit");
        out
    }

    #[test]
    fn a_new_first_row_moves_the_rest_down_and_the_last_out() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = Store::open(dir.path()).expect("store");
        let mut op = top_two();
        let first = epoch(&mut op, &store, pretty("T I", "+ a 5\n+ a 3\n+ a 1\n+ b 7"));
        assert_eq!(first, vec!["+1 a 3 2", "+1 a 5 1", "+1 b 7 1"]);
        let second = epoch(&mut op, &store, pretty("T I", "+ a 9\n+ b 2"));
        assert_eq!(
            second,
            vec!["+1 a 5 2", "+1 a 9 1", "+1 b 2 2", "-1 a 3 2", "-1 a 5 1"]
        );
        // Below the second: nothing changes.
        assert!(epoch(&mut op, &store, pretty("T I", "+ a 4")).is_empty());
    }

    #[test]
    fn many_rows_of_a_partition_in_one_epoch_keep_the_first() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = Store::open(dir.path()).expect("store");
        let mut op = top_two();
        epoch(&mut op, &store, pretty("T I", "+ a 10"));
        // More rows than the epoch holds for a partition, the best ones
        // early, late and in between.
        let values = [3, 12, 1, 4, 9, 2, 8, 7, 6, 5, 11, 0, 13, 2, 1];
        let input: Vec<String> = values.iter().map(|v| format!("+ a {v}")).collect();
        let out = epoch(&mut op, &store, pretty("T I", &input.join("\n")));
        assert_eq!(out, vec!["+1 a 12 2", "+1 a 13 1", "-1 a 10 1"]);
    }

    #[test]
    fn a_fresh_operator_reads_the_kept_rows_from_state() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = Store::open(dir.path()).expect("store");
        epoch(&mut top_two(), &store, pretty("T I", "+ a 5\n+ a 3"));
        let mut restarted = top_two();
        let out = epoch(&mut restarted, &store, pretty("T I", "+ a 4"));
        assert_eq!(out, vec!["+1 a 4 2", "-1 a 3 2"]);
    }

    #[test]
    fn a_retraction_is_refused() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = Store::open(dir.path()).expect("store");
        let mut state = EpochState::new(store.db().clone());
        let prefix = b"rank".to_vec();
        let mut cx = Context::new(&mut state, &prefix);
        let refused = top_two().on_changes(0, pretty("T I", "- a 5"), &mut cx);
        assert!(refused.is_err());
    }

    #[test]
    fn kept_rows_round_trip_and_truncation_is_an_error() {
        let entries = vec![
            (vec![1, 2], vec![3]),
            (vec![], vec![4, 5, 6]),
            (vec![7], vec![]),
        ];
        let bytes = encode_entries(&entries);
        assert_eq!(decode_entries(&bytes).expect("decodes"), entries);
        assert!(decode_entries(&bytes[..bytes.len() - 1]).is_err());
        assert_eq!(decode_entries(&encode_entries(&[])).expect("empty"), vec![]);
    }
}
