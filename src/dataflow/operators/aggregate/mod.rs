//! GROUP BY with count, count(DISTINCT), sum, avg, min and max, exact under
//! deletes.
//!
//! # Algorithm
//! Each input row adds its weight to its group: the group's row count, and
//! each aggregate's running state. Groups are kept in memory (up to
//! [`CACHE_GROUPS`] of them, beyond which the half with the smallest keys
//! is written back and dropped) and marked when touched; at the barrier the
//! operator emits, per touched group, a retraction of the row it last
//! emitted and the group's new row (nothing when they are equal), and
//! writes the group back to state, which is the truth after a restart.
//! The new rows of all touched groups are built as columns together, not
//! one row at a time. A group whose row count
//! drops to zero disappears (except the single group of an aggregate without
//! GROUP BY, which always has a row, as in SQL).
//!
//! min, max and count(DISTINCT) keep a multiset of values per group, so a
//! deleted minimum is replaced by the next one instead of recomputing.
//!
//! # Windows
//! When the group key holds a window bound (`window_start` or `window_end`
//! of a window function), every group has a closing time: the window's end.
//! Group keys then start with that time, so the groups whose window the
//! watermark has passed form one key range; they are emitted (`EMIT ON
//! WINDOW CLOSE`: one final row each, and nothing before) and their state is
//! deleted, which keeps state bounded on an endless stream. Rows for a window
//! that is already final never arrive: the window operator drops them.
//!
//! The cache files windowed groups by closing time, so a watermark visits
//! the closing groups alone. A group that opens and closes within one epoch
//! never reaches state: nothing is written for it, and nothing deleted.
//! State is read at a close only for groups the horizon (below) leaves out
//! of memory, and never below the floor, the bound of the last close: state
//! holds nothing under it.
//!
//! # Reads the cache saves
//! A group missing from the cache is read from state, unless the operator
//! knows state cannot hold it: every stored group with a key above a
//! horizon is also in the cache, and only the smallest keys ever leave it.
//! A fresh operator's horizon is below every key; windowed keys lead with
//! the closing time, so a new window's groups fall above the horizon and
//! cost no read.
//!
//! # State layout (under the operator's prefix)
//! - `g` ++ group key -> [`GroupState`] ++ the last emitted row (row format);
//!   for windowed groups the group key starts with the closing time (8 bytes,
//!   order-preserving)
//! - `m` ++ aggregate index (u8) ++ group key length (u32 BE) ++ group key ++
//!   value (row format, so keys sort by value) -> multiplicity (i64 BE)

use std::collections::HashMap;
use std::sync::Arc;

use datafusion::arrow::array::UInt32Array;
use datafusion::arrow::array::{
    Array, ArrayRef, AsArray, Decimal128Array, Float64Array, Int64Array, RecordBatch,
};
use datafusion::arrow::compute::take_arrays;
use datafusion::arrow::compute::{cast, concat_batches};
use datafusion::arrow::datatypes::{DataType, Decimal128Type, Float64Type, Int64Type, SchemaRef};
use datafusion::arrow::row::{RowConverter, Rows, SortField};
use datafusion::common::ScalarValue;
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_expr::aggregate::AggregateFunctionExpr;

use crate::dataflow::change::{ChangeBatch, Watermark, evaluate_all};
use crate::dataflow::errors::RowErrors;
use crate::dataflow::operator::{Context, Operator};
use crate::error::{Error, Result};
use crate::state::keys::prefix_end;

mod groups;

use groups::{Group, Groups, Horizon};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AggKind {
    CountStar,
    Count,
    CountDistinct,
    Sum,
    Avg,
    Min,
    Max,
    /// Any DataFusion aggregate, through its accumulator (append-only input).
    Accumulator,
}

#[derive(Clone)]
pub struct AggSpec {
    pub kind: AggKind,
    /// The input never retracts, so min and max need no multiset.
    pub append_only: bool,
    /// The argument; `None` for count(*).
    pub arg: Option<Arc<dyn PhysicalExpr>>,
    pub arg_type: DataType,
    /// For [`AggKind::Accumulator`]: the aggregate, with its arguments.
    pub accumulator: Option<Arc<AggregateFunctionExpr>>,
}

/// Running state of one group: its row count and one slot per aggregate,
/// in one allocation so that updating a group touches one place in memory.
/// The slot of a single aggregate is held inline: a windowed view opens a
/// group for every key in every window, and a second allocation for each
/// cost as much as finding the group. More inline slots would make every
/// group larger to move when its window closes.
#[derive(Debug, Clone, Default, PartialEq)]
struct GroupState {
    rows: i64,
    slots: smallvec::SmallVec<[Slot; 1]>,
}

/// One aggregate's running state in one group.
#[derive(Debug, Clone, Default, PartialEq)]
struct Slot {
    /// Non-null inputs (count, sum, avg, min, max) or distinct values.
    count: i64,
    /// Exact sum of integer or decimal inputs.
    int_sum: i128,
    /// Sum of floating-point inputs.
    float_sum: f64,
    /// Min or max over append-only input (row format), kept without a
    /// multiset since nothing is ever retracted; or an accumulator's state
    /// (row format).
    extreme: Option<Vec<u8>>,
}

/// min and max over input that can change keep the current extreme beside
/// their multiset while they know it: `count` values are held, and
/// `extreme` is the extreme of them, or `None` once the extreme itself was
/// retracted (then the multiset is read, once, when the group is settled).
fn track_extreme(slot: &mut Slot, value: &[u8], diff: i64, kind: AggKind) {
    if diff > 0 && slot.count <= 0 {
        slot.extreme = Some(value.to_vec());
    } else if diff > 0 && slot.extreme.is_some() {
        keep_extreme(&mut slot.extreme, value, kind);
    } else if diff < 0 && slot.extreme.as_deref() == Some(value) {
        slot.extreme = None;
    }
    slot.count += diff;
    if slot.count <= 0 {
        slot.extreme = None;
    }
}

/// Keep the smaller (min) or larger (max) of two row-format values.
fn keep_extreme(current: &mut Option<Vec<u8>>, value: &[u8], kind: AggKind) {
    let better = match current {
        None => true,
        Some(held) if kind == AggKind::Min => value < held.as_slice(),
        Some(held) => value > held.as_slice(),
    };
    if better {
        *current = Some(value.to_vec());
    }
}

impl GroupState {
    fn new(aggs: usize) -> GroupState {
        GroupState {
            rows: 0,
            slots: smallvec::smallvec![Slot::default(); aggs],
        }
    }

    fn encode(&self, emitted: Option<&[u8]>) -> Vec<u8> {
        let mut out = Vec::with_capacity(8 + self.slots.len() * 32);
        self.encode_into(emitted, &mut out);
        out
    }

    fn encode_into(&self, emitted: Option<&[u8]>, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.rows.to_le_bytes());
        for slot in &self.slots {
            out.extend_from_slice(&slot.count.to_le_bytes());
            out.extend_from_slice(&slot.int_sum.to_le_bytes());
            out.extend_from_slice(&slot.float_sum.to_le_bytes());
        }
        for slot in &self.slots {
            match &slot.extreme {
                Some(value) => {
                    out.extend_from_slice(&(value.len() as u32).to_le_bytes());
                    out.extend_from_slice(value);
                }
                None => out.extend_from_slice(&u32::MAX.to_le_bytes()),
            }
        }
        if let Some(row) = emitted {
            out.extend_from_slice(row);
        }
    }

    /// The state and the last emitted row, if any.
    fn decode(bytes: &[u8], aggs: usize) -> Result<(GroupState, Option<Vec<u8>>)> {
        let bad = || Error::Internal("aggregate state is truncated".into());
        let field = |at: usize, len: usize| bytes.get(at..at + len).ok_or_else(bad);
        let mut state = GroupState::new(aggs);
        state.rows = i64::from_le_bytes(field(0, 8)?.try_into().map_err(|_| bad())?);
        for i in 0..aggs {
            let at = 8 + i * 32;
            let slot = &mut state.slots[i];
            slot.count = i64::from_le_bytes(field(at, 8)?.try_into().map_err(|_| bad())?);
            slot.int_sum = i128::from_le_bytes(field(at + 8, 16)?.try_into().map_err(|_| bad())?);
            slot.float_sum = f64::from_le_bytes(field(at + 24, 8)?.try_into().map_err(|_| bad())?);
        }
        let mut end = 8 + aggs * 32;
        for i in 0..aggs {
            let len = u32::from_le_bytes(field(end, 4)?.try_into().map_err(|_| bad())?);
            end += 4;
            if len != u32::MAX {
                state.slots[i].extreme = Some(field(end, len as usize)?.to_vec());
                end += len as usize;
            }
        }
        let emitted = (bytes.len() > end).then(|| bytes[end..].to_vec());
        Ok((state, emitted))
    }
}

/// Groups kept in memory between barriers; beyond this the half with the
/// smallest keys is dropped.
pub const CACHE_GROUPS: usize = 100_000;

type FastMap<K, V> = HashMap<K, V, ahash::RandomState>;

/// Where a windowed group's closing time comes from: a group column holding
/// a window bound, plus what lies between that bound and the window's end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WindowClose {
    /// Index of the group expression.
    pub column: usize,
    /// Microseconds from the column's value to the window's end.
    pub offset: i64,
}

pub struct Aggregate {
    groups: Vec<Arc<dyn PhysicalExpr>>,
    group_types: Vec<DataType>,
    /// Set when groups belong to windows.
    window: Option<WindowClose>,
    /// Emit a group once, when its window closes, instead of at every change.
    on_close: bool,
    /// Group keys in row format; windowed keys lead with the closing time.
    group_keys: RowConverter,
    aggs: Vec<AggSpec>,
    /// Per aggregate with a multiset: the converter for its values.
    values: Vec<Option<RowConverter>>,
    /// Per accumulator aggregate: the converter for its state.
    states: Vec<Option<RowConverter>>,
    schema: SchemaRef,
    /// `schema` with every column nullable, for the batches it emits.
    nullable_schema: SchemaRef,
    output: RowConverter,
    /// Groups in memory.
    groups_cache: Groups,
    /// Which stored groups are known to be in the cache.
    horizon: Horizon,
    /// State holds no group with a key below this one: every window
    /// before it has closed and been deleted.
    floor: Vec<u8>,
    /// Most groups kept in memory.
    cache_limit: usize,
    /// Pending multiset changes: (aggregate, group key, value) -> weight.
    multiset: FastMap<(usize, Vec<u8>, Vec<u8>), i64>,
    /// The last watermark: windows closing by it are final.
    closed_to: Option<i64>,
}

impl Aggregate {
    pub fn new(
        groups: Vec<Arc<dyn PhysicalExpr>>,
        group_types: Vec<DataType>,
        aggs: Vec<AggSpec>,
        schema: SchemaRef,
    ) -> Result<Aggregate> {
        let group_keys =
            RowConverter::new(group_types.iter().cloned().map(SortField::new).collect())?;
        let values = aggs
            .iter()
            .map(|a| match a.kind {
                AggKind::Min | AggKind::Max | AggKind::CountDistinct => {
                    RowConverter::new(vec![SortField::new(a.arg_type.clone())]).map(Some)
                }
                _ => Ok(None),
            })
            .collect::<Result<_, _>>()?;
        let states = aggs
            .iter()
            .map(|a| match &a.accumulator {
                Some(aggregate) => {
                    let fields = aggregate
                        .state_fields()?
                        .iter()
                        .map(|f| SortField::new(f.data_type().clone()))
                        .collect();
                    Ok(Some(RowConverter::new(fields)?))
                }
                None => Ok(None),
            })
            .collect::<Result<_>>()?;
        let output = RowConverter::new(
            schema
                .fields()
                .iter()
                .map(|f| SortField::new(f.data_type().clone()))
                .collect(),
        )?;
        Ok(Aggregate {
            groups,
            states,
            group_types,
            window: None,
            on_close: false,
            group_keys,
            aggs,
            values,
            nullable_schema: crate::catalog::nullable(&schema),
            schema,
            output,
            groups_cache: Groups::default(),
            horizon: Horizon::Unknown,
            floor: Vec::new(),
            cache_limit: CACHE_GROUPS,
            multiset: FastMap::default(),
            closed_to: None,
        })
    }

    /// Make groups windowed; `on_close` holds each group back until its window closes.
    pub fn with_window(mut self, window: WindowClose, on_close: bool) -> Result<Aggregate> {
        let mut fields = vec![SortField::new(DataType::Int64)];
        fields.extend(self.group_types.iter().cloned().map(SortField::new));
        self.group_keys = RowConverter::new(fields)?;
        self.window = Some(window);
        self.on_close = on_close;
        Ok(self)
    }

    fn is_global(&self) -> bool {
        self.groups.is_empty()
    }

    /// Group keys of a batch's rows; windowed keys lead with the window's
    /// closing time, so that keys sort by it. `None` without GROUP BY.
    fn batch_keys(&self, group_columns: &[ArrayRef]) -> Result<Option<Rows>> {
        if self.is_global() {
            return Ok(None);
        }
        let Some(window) = self.window else {
            return Ok(Some(self.group_keys.convert_columns(group_columns)?));
        };
        let bounds = crate::catalog::micros(&group_columns[window.column])?;
        // A NULL bound never closes: such rows have no window.
        let closes: Int64Array = bounds
            .iter()
            .map(|b| Some(b.map_or(i64::MAX, |b| b.saturating_add(window.offset))))
            .collect();
        let mut columns: Vec<ArrayRef> = vec![Arc::new(closes)];
        columns.extend(group_columns.iter().cloned());
        Ok(Some(self.group_keys.convert_columns(&columns)?))
    }

    /// The smallest key of a group whose window closes after `watermark`.
    fn close_bound(watermark: i64) -> Result<Vec<u8>> {
        let converter = RowConverter::new(vec![SortField::new(DataType::Int64)])?;
        let bound: ArrayRef = Arc::new(Int64Array::from(vec![watermark.saturating_add(1)]));
        let rows = converter.convert_columns(&[bound])?;
        Ok(rows.row(0).data().to_vec())
    }

    fn group_key(cx: &Context<'_>, group: &[u8]) -> Vec<u8> {
        cx.key(&[b"g".as_slice(), group].concat())
    }

    fn multiset_prefix(cx: &Context<'_>, agg: usize, group: &[u8]) -> Vec<u8> {
        let mut suffix = vec![b'm', agg as u8];
        suffix.extend_from_slice(&(group.len() as u32).to_be_bytes());
        suffix.extend_from_slice(group);
        cx.key(&suffix)
    }

    /// Touch a group: its place in the cache, loaded from state if missing.
    fn slot(&mut self, group: &[u8], cx: &Context<'_>) -> Result<u32> {
        let hash = self.groups_cache.hash(group);
        if let Some(at) = self.groups_cache.touch(group, hash) {
            return Ok(at);
        }
        let stored = if self.surely_new(group, cx)? {
            None
        } else {
            cx.state.get(&Self::group_key(cx, group))?
        };
        let was_stored = stored.is_some();
        let (state, emitted) = match stored {
            Some(bytes) => GroupState::decode(&bytes, self.aggs.len())?,
            None => (GroupState::new(self.aggs.len()), None),
        };
        let group = Group {
            key: group.into(),
            state,
            emitted,
            dirty: true,
            stored: was_stored,
            close: self.close_of(group),
            hash,
            closing: false,
        };
        let windowed = self.window.is_some();
        Ok(self.groups_cache.insert(group, hash, windowed))
    }

    /// A windowed group's closing time, which its key leads with (in row
    /// format: a validity byte, then the value big-endian with its sign
    /// bit flipped); 0 for groups without windows.
    fn close_of(&self, key: &[u8]) -> i64 {
        match (self.window, key.get(1..9)) {
            (Some(_), Some(bytes)) => {
                let mut raw: [u8; 8] = bytes.try_into().expect("eight bytes");
                raw[0] ^= 0x80;
                i64::from_be_bytes(raw)
            }
            _ => 0,
        }
    }

    /// Whether a group missing from the cache is missing from state too.
    fn surely_new(&mut self, group: &[u8], cx: &Context<'_>) -> Result<bool> {
        Ok(self.horizon(cx)?.rules_out(group))
    }

    /// Which stored groups the cache holds; the first call finds it from
    /// the last stored group.
    fn horizon(&mut self, cx: &Context<'_>) -> Result<&Horizon> {
        if self.horizon == Horizon::Unknown {
            let lower = cx.key(b"g");
            self.horizon = match cx.state.first_in(&lower, &prefix_end(&lower), true)? {
                None => Horizon::All,
                Some((key, _)) => Horizon::Above(key[lower.len()..].to_vec()),
            };
        }
        Ok(&self.horizon)
    }

    fn evaluate_args(
        &self,
        batch: &ChangeBatch,
        errors: &mut RowErrors,
    ) -> Result<Vec<Option<ArrayRef>>> {
        self.aggs
            .iter()
            .map(|spec| {
                let Some(arg) = &spec.arg else {
                    return Ok(None);
                };
                Ok(Some(errors.evaluate(arg.as_ref(), batch.rows())?))
            })
            .collect()
    }
}

impl Operator for Aggregate {
    fn name(&self) -> &'static str {
        "HashAggregate"
    }

    fn describe(&self) -> String {
        let groups: Vec<String> = self.groups.iter().map(|g| g.to_string()).collect();
        let aggs: Vec<String> = self
            .aggs
            .iter()
            .map(|a| match (&a.accumulator, &a.arg) {
                (Some(aggregate), _) => format!("Accumulator({})", aggregate.name()),
                (None, Some(arg)) => format!("{:?}({arg})", a.kind),
                (None, None) => format!("{:?}", a.kind),
            })
            .collect();
        let window = match (self.window, self.on_close) {
            (Some(_), true) => " emit=on window close",
            (Some(_), false) => " windowed",
            (None, _) => "",
        };
        format!(
            "group=[{}] aggs=[{}]{window}",
            groups.join(", "),
            aggs.join(", ")
        )
    }

    fn on_changes(
        &mut self,
        _input: usize,
        batch: ChangeBatch,
        cx: &mut Context<'_>,
    ) -> Result<()> {
        let n = batch.len();
        let group_columns = evaluate_all(&self.groups, batch.rows(), &mut cx.state.errors)?;
        let keys = self.batch_keys(&group_columns)?;
        let args = self.evaluate_args(&batch, &mut cx.state.errors)?;
        let inputs = args
            .iter()
            .zip(&self.aggs)
            .zip(&self.values)
            .map(|((arg, spec), values)| Input::prepare(spec, arg.as_ref(), values.as_ref()))
            .collect::<Result<Vec<_>>>()?;
        let diffs = batch.diffs().values();
        let mut slots: Vec<u32> = Vec::with_capacity(n);
        // Runs of rows of one group are common (a hot key, a sorted input):
        // a row of the group before needs no lookup.
        let mut last: Option<(&[u8], u32)> = None;
        for row in 0..n {
            let key: &[u8] = keys.as_ref().map_or(&[], |rows| rows.row(row).data());
            let slot = match last {
                Some((before, slot)) if before == key => slot,
                _ => self.slot(key, cx)?,
            };
            last = Some((key, slot));
            self.groups_cache.get_mut(slot).state.rows += diffs[row];
            slots.push(slot);
        }
        // One aggregate at a time over the whole batch: the match on the
        // input's kind is decided once, not once a row.
        let mut values: FastMap<(usize, u32, &[u8]), i64> = FastMap::default();
        for (a, input) in inputs.iter().enumerate() {
            input.apply(a, &slots, diffs, &mut self.groups_cache);
            let Input::Values { valid, rows } = input else {
                continue;
            };
            let spec = &self.aggs[a];
            for (row, slot) in slots.iter().enumerate() {
                if !valid.is_valid(row) {
                    continue;
                }
                let value = rows.row(row).data();
                if spec.append_only && spec.kind != AggKind::CountDistinct {
                    let extreme = &mut self.groups_cache.get_mut(*slot).state.slots[a].extreme;
                    keep_extreme(extreme, value, spec.kind);
                } else {
                    if spec.kind != AggKind::CountDistinct {
                        let held = &mut self.groups_cache.get_mut(*slot).state.slots[a];
                        track_extreme(held, value, diffs[row], spec.kind);
                    }
                    *values.entry((a, *slot, value)).or_insert(0) += diffs[row];
                }
            }
        }
        let accumulating = self.aggs.iter().any(|a| a.accumulator.is_some());
        if accumulating {
            self.accumulate(&batch, &slots, &mut cx.state.errors)?;
        }
        for ((a, slot, value), delta) in values {
            let group = self.groups_cache.get(slot).key.to_vec();
            *self.multiset.entry((a, group, value.to_vec())).or_insert(0) += delta;
        }
        // An epoch that touches more groups than the cache holds writes
        // them back now, so memory stays bounded however many groups change.
        if self.groups_cache.len() > self.cache_limit {
            self.flush(cx, false)?;
        }
        self.close_late(cx)
    }

    fn on_barrier(
        &mut self,
        _barrier: crate::dataflow::change::Barrier,
        cx: &mut Context<'_>,
    ) -> Result<()> {
        if self.is_global() && !self.groups_cache.contains(&[]) {
            // The single group of a global aggregate exists from the start.
            self.slot(&[], cx)?;
        }
        self.flush(cx, true)
    }

    fn on_watermark(&mut self, wm: Watermark, cx: &mut Context<'_>) -> Result<Option<Watermark>> {
        if self.window.is_some() {
            self.close_windows(wm.micros, cx)?;
            self.closed_to = Some(wm.micros);
        }
        Ok(Some(wm))
    }
}

/// Rows an operator call retracts (row format) and inserts (columns).
#[derive(Default)]
struct Changes {
    retract: Vec<Vec<u8>>,
    insert: Vec<Vec<ArrayRef>>,
}

/// What settling a touched group leaves to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fate {
    /// It has no rows left: retracted and deleted.
    Gone,
    /// Written back, its row held until its window closes.
    Kept,
    /// Its new row is to be built and compared with the last one emitted.
    Emit,
}

impl Aggregate {
    /// Write every touched group back and emit how its row changed (held
    /// back until its window closes under `EMIT ON WINDOW CLOSE`). At the
    /// barrier the writes skip the ordered map reads go through: nothing
    /// reads them before the epoch commits.
    fn flush(&mut self, cx: &mut Context<'_>, at_barrier: bool) -> Result<()> {
        self.apply_multisets(cx)?;
        if !self.groups_cache.has_dirty() {
            return Ok(());
        }
        let mut groups = std::mem::take(&mut self.groups_cache);
        let flushed = self.flush_groups(&mut groups, at_barrier, cx);
        self.groups_cache = groups;
        flushed
    }

    fn flush_groups(
        &mut self,
        groups: &mut Groups,
        last: bool,
        cx: &mut Context<'_>,
    ) -> Result<()> {
        let mut out = Changes::default();
        let mut emitting = Vec::new();
        for at in groups.take_dirty() {
            // A place may be listed twice, or hold a group that closed.
            if !groups.find(at).is_some_and(|g| g.dirty) {
                continue;
            }
            match self.settle(groups.get_mut(at), false, last, &mut out, cx)? {
                Fate::Gone => drop(groups.remove(at)),
                Fate::Kept => {}
                Fate::Emit => emitting.push(at as usize),
            }
        }
        self.emit_rows(groups, &emitting, false, last, &mut out, cx)?;
        if groups.len() > self.cache_limit
            && let Some(key) = groups.evict(self.cache_limit / 2, self.window.is_some())
        {
            self.horizon.lower_to(&key);
        }
        let batch = self.changes(out)?;
        cx.emit(batch);
        Ok(())
    }

    /// A group lives while it has rows; the one group without GROUP BY always does.
    fn alive(&self, group: &Group) -> bool {
        group.state.rows > 0 || self.is_global()
    }

    /// Settle a touched group: a group with no rows left is retracted and
    /// deleted; one held back until its window closes is written back;
    /// any other needs its new row (see [`Aggregate::emit_rows`]).
    fn settle(
        &self,
        group: &mut Group,
        closed: bool,
        last: bool,
        out: &mut Changes,
        cx: &mut Context<'_>,
    ) -> Result<Fate> {
        group.dirty = false;
        if !self.alive(group) {
            out.retract.extend(group.emitted.take());
            write_group(cx, group, None, last);
            return Ok(Fate::Gone);
        }
        if self.on_close && !closed {
            let value = group.state.encode(None);
            write_group(cx, group, Some(&value), last);
            return Ok(Fate::Kept);
        }
        self.resolve_extremes(group, cx)?;
        Ok(Fate::Emit)
    }

    /// Build the rows of settled groups (`which` of `groups`) together,
    /// note the ones that changed, and write the groups back; a group whose window has
    /// `closed` has its state deleted instead.
    fn emit_rows(
        &self,
        groups: &mut impl Held,
        which: &[usize],
        closed: bool,
        last: bool,
        out: &mut Changes,
        cx: &mut Context<'_>,
    ) -> Result<()> {
        if which.is_empty() {
            return Ok(());
        }
        let held = &*groups;
        let settled = which.iter().map(|i| {
            let group = held.group(*i);
            (group.key.as_slice(), &group.state)
        });
        let columns = self.output_columns(settled)?;
        if closed && which.iter().all(|i| groups.group(*i).emitted.is_none()) {
            // Final rows of groups that never emitted one (on window close):
            // all are new, so none needs comparing in row format.
            for at in which {
                let group = groups.group_mut(*at);
                write_group(cx, group, None, last);
                self.forget_values(&group.key, cx)?;
            }
            out.insert.push(columns);
            return Ok(());
        }
        let rows = self.output.convert_columns(&columns)?;
        let mut changed: Vec<u32> = Vec::new();
        let mut value = Vec::new();
        for (i, at) in which.iter().enumerate() {
            let group = groups.group_mut(*at);
            let new_row = rows.row(i).data();
            if group.emitted.as_deref() != Some(new_row) {
                out.retract.extend(group.emitted.take());
                changed.push(i as u32);
            }
            if closed {
                write_group(cx, group, None, last);
                self.forget_values(&group.key, cx)?;
            } else {
                value.clear();
                group.state.encode_into(Some(new_row), &mut value);
                write_group(cx, group, Some(&value), last);
                group.emitted = Some(new_row.to_vec());
            }
        }
        if !changed.is_empty() {
            let columns = take_arrays(&columns, &UInt32Array::from(changed), None)?;
            out.insert.push(columns);
        }
        Ok(())
    }

    /// Close at once the groups whose window was already final when their
    /// rows came. Only the slices of a sliced HOP get such rows (a row late
    /// for its slice but not for every window over it); each goes on as a
    /// partial row of its own, which the windows still open add up.
    fn close_late(&mut self, cx: &mut Context<'_>) -> Result<()> {
        match self.closed_to {
            Some(watermark) if self.on_close && self.groups_cache.closes_by(watermark) => {
                self.close_windows(watermark, cx)
            }
            _ => Ok(()),
        }
    }

    /// Settle the groups whose window the watermark has reached: those in
    /// state alone, then the ones in memory.
    fn close_windows(&mut self, watermark: i64, cx: &mut Context<'_>) -> Result<()> {
        self.apply_multisets(cx)?;
        let mut out = Changes::default();
        self.close_stored(watermark, &mut out, cx)?;
        if self.groups_cache.closes_by(watermark) {
            let mut groups = std::mem::take(&mut self.groups_cache);
            let closed = self.close_groups(&mut groups, watermark, &mut out, cx);
            self.groups_cache = groups;
            closed?;
        }
        let batch = self.changes(out)?;
        cx.emit(batch);
        Ok(())
    }

    /// Settle the groups in memory that close by `watermark` where they
    /// lie, then drop them: moving each out of the slab first cost a copy
    /// of every closing group.
    fn close_groups(
        &self,
        groups: &mut Groups,
        watermark: i64,
        out: &mut Changes,
        cx: &mut Context<'_>,
    ) -> Result<()> {
        let positions = groups.closing(watermark);
        let mut closing = Closing {
            groups,
            positions: &positions,
        };
        let mut emitting = Vec::new();
        // Closed keys fall below the floor, which no later scan of state
        // goes under, so their deletes need not be readable.
        for i in 0..positions.len() {
            let group = closing.group_mut(i);
            if group.dirty || self.on_close {
                if self.settle(group, true, true, out, cx)? == Fate::Emit {
                    emitting.push(i);
                }
            } else {
                write_group(cx, group, None, true);
                self.forget_values(&group.key, cx)?;
            }
        }
        self.emit_rows(&mut closing, &emitting, true, true, out, cx)?;
        for at in positions {
            groups.discard(at);
        }
        Ok(())
    }

    /// Settle the groups that close by `watermark` and are in state but not
    /// in memory. Only groups the horizon leaves out of memory can be, and
    /// none below the floor, so most calls read nothing.
    fn close_stored(
        &mut self,
        watermark: i64,
        out: &mut Changes,
        cx: &mut Context<'_>,
    ) -> Result<()> {
        let bound = Self::close_bound(watermark)?;
        let upper = match self.horizon(cx)? {
            Horizon::Above(highest) if bound.as_slice() > highest.as_slice() => {
                [highest.as_slice(), &[0]].concat()
            }
            Horizon::Above(_) => bound.clone(),
            Horizon::All | Horizon::Unknown => Vec::new(),
        };
        let raised = bound.max(self.floor.clone());
        let from = std::mem::replace(&mut self.floor, raised);
        if upper <= from {
            return Ok(());
        }
        let prefix = cx.key(b"g");
        let lower = [prefix.as_slice(), &from].concat();
        let upper = [prefix.as_slice(), &upper].concat();
        let mut stored = Vec::new();
        for (key, value) in cx.state.scan(&lower, &upper)? {
            let group = key[prefix.len()..].to_vec();
            if self.groups_cache.contains(&group) {
                continue;
            }
            if !self.on_close {
                cx.state.delete(key);
                self.forget_values(&group, cx)?;
                continue;
            }
            let (state, _) = GroupState::decode(&value, self.aggs.len())?;
            let mut closing = Group {
                close: self.close_of(&group),
                key: group.into(),
                state,
                emitted: None,
                dirty: false,
                stored: true,
                hash: 0,
                closing: false,
            };
            self.resolve_extremes(&mut closing, cx)?;
            stored.push(closing);
        }
        let all: Vec<usize> = (0..stored.len()).collect();
        self.emit_rows(&mut stored, &all, true, false, out, cx)
    }

    /// Feed each group's rows of a batch to its accumulators, and keep
    /// their state.
    fn accumulate(
        &mut self,
        batch: &ChangeBatch,
        slots: &[u32],
        errors: &mut RowErrors,
    ) -> Result<()> {
        if batch.diffs().values().iter().any(|d| *d != 1) {
            return Err(Error::NotSupported(
                "an aggregate kept by its accumulator needs an append-only input, and this one retracted rows".into(),
            ));
        }
        let mut rows_of: FastMap<u32, Vec<u32>> = FastMap::default();
        for (row, slot) in slots.iter().enumerate() {
            rows_of.entry(*slot).or_default().push(row as u32);
        }
        for a in 0..self.aggs.len() {
            let Some(aggregate) = self.aggs[a].accumulator.clone() else {
                continue;
            };
            let args = evaluate_all(&aggregate.expressions(), batch.rows(), errors)?;
            for (slot, rows) in &rows_of {
                let taken = take_arrays(&args, &UInt32Array::from(rows.clone()), None)?;
                let held = self.groups_cache.get_mut(*slot).state.slots[a]
                    .extreme
                    .take();
                let mut accumulator = self.restore(a, &aggregate, held.as_deref())?;
                accumulator.update_batch(&taken)?;
                let state = self.save(a, accumulator.as_mut())?;
                self.groups_cache.get_mut(*slot).state.slots[a].extreme = Some(state);
            }
        }
        Ok(())
    }

    /// A fresh accumulator, with the state it had kept, if any.
    fn restore(
        &self,
        a: usize,
        aggregate: &AggregateFunctionExpr,
        held: Option<&[u8]>,
    ) -> Result<Box<dyn datafusion::logical_expr::Accumulator>> {
        let mut accumulator = aggregate.create_accumulator()?;
        if let (Some(bytes), Some(converter)) = (held, &self.states[a]) {
            let parser = converter.parser();
            let states = converter.convert_rows([parser.parse(bytes)])?;
            accumulator.merge_batch(&states)?;
        }
        Ok(accumulator)
    }

    fn save(
        &self,
        a: usize,
        accumulator: &mut dyn datafusion::logical_expr::Accumulator,
    ) -> Result<Vec<u8>> {
        let converter = self.states[a]
            .as_ref()
            .ok_or_else(|| Error::Internal("an accumulator without a state converter".into()))?;
        let columns = accumulator
            .state()?
            .iter()
            .map(|v| v.to_array())
            .collect::<datafusion::error::Result<Vec<_>>>()?;
        let rows = converter.convert_columns(&columns)?;
        Ok(rows.row(0).data().to_vec())
    }

    /// Delete a group's multisets.
    fn forget_values(&self, group: &[u8], cx: &mut Context<'_>) -> Result<()> {
        for (agg, spec) in self.aggs.iter().enumerate() {
            let kept = self.values[agg].is_some()
                && (!spec.append_only || spec.kind == AggKind::CountDistinct);
            if !kept {
                continue;
            }
            let prefix = Self::multiset_prefix(cx, agg, group);
            for (entry, _) in cx.state.scan(&prefix, &prefix_end(&prefix))? {
                cx.state.delete(entry);
            }
        }
        Ok(())
    }

    /// Fold this epoch's multiset changes into state; count(DISTINCT) counts
    /// values whose multiplicity crosses zero.
    fn apply_multisets(&mut self, cx: &mut Context<'_>) -> Result<()> {
        for ((agg, group, value), delta) in std::mem::take(&mut self.multiset) {
            if delta == 0 {
                continue;
            }
            let mut key = Self::multiset_prefix(cx, agg, &group);
            key.extend_from_slice(&value);
            let old = match cx.state.get(&key)? {
                Some(bytes) => i64::from_be_bytes(
                    bytes
                        .as_slice()
                        .try_into()
                        .map_err(|_| Error::Internal("bad multiplicity".into()))?,
                ),
                None => 0,
            };
            let new = old + delta;
            if new == 0 {
                cx.state.delete(key);
            } else {
                cx.state.put(key, new.to_be_bytes().to_vec());
            }
            if self.aggs[agg].kind == AggKind::CountDistinct {
                let change = i64::from(new > 0) - i64::from(old > 0);
                if change != 0 {
                    let slot = self.slot(&group, cx)?;
                    self.groups_cache.get_mut(slot).state.slots[agg].count += change;
                }
            }
        }
        Ok(())
    }

    /// Read the extreme of min and max whose extreme was retracted from
    /// their multiset: the first or last value held.
    fn resolve_extremes(&self, group: &mut Group, cx: &Context<'_>) -> Result<()> {
        for (a, spec) in self.aggs.iter().enumerate() {
            let retractable = matches!(spec.kind, AggKind::Min | AggKind::Max)
                && !spec.append_only
                && !native_extreme(spec);
            let slot = &group.state.slots[a];
            if !retractable || slot.count <= 0 || slot.extreme.is_some() {
                continue;
            }
            let prefix = Self::multiset_prefix(cx, a, &group.key);
            let last = spec.kind == AggKind::Max;
            let found = cx.state.first_in(&prefix, &prefix_end(&prefix), last)?;
            group.state.slots[a].extreme = found.map(|(key, _)| key[prefix.len()..].to_vec());
        }
        Ok(())
    }

    /// The output columns of groups, one row each, in the output's types.
    fn output_columns<'g>(
        &self,
        groups: impl ExactSizeIterator<Item = (&'g [u8], &'g GroupState)> + Clone,
    ) -> Result<Vec<ArrayRef>> {
        let mut columns: Vec<ArrayRef> = Vec::with_capacity(self.schema.fields().len());
        if !self.is_global() {
            let parser = self.group_keys.parser();
            let keys = self
                .group_keys
                .convert_rows(groups.clone().map(|(key, _)| parser.parse(key)))?;
            let skip = usize::from(self.window.is_some());
            columns.extend(keys.into_iter().skip(skip));
        }
        for (a, spec) in self.aggs.iter().enumerate() {
            let target = self.schema.field(columns.len()).data_type();
            if let Some(counts) = Self::counts(a, spec, target, groups.clone()) {
                columns.push(counts);
                continue;
            }
            if let Some(integers) = Self::integers(a, spec, target, groups.clone())? {
                columns.push(integers);
                continue;
            }
            let values = groups
                .clone()
                .map(|(_, state)| cast_scalar(self.aggregate_value(a, spec, state)?, target))
                .collect::<Result<Vec<_>>>()?;
            columns.push(ScalarValue::iter_to_array(values)?);
        }
        columns
            .into_iter()
            .zip(self.schema.fields())
            .map(
                |(column, field)| match column.data_type() == field.data_type() {
                    true => Ok(column),
                    false => Ok(cast(&column, field.data_type())?),
                },
            )
            .collect()
    }

    /// A count's values as an array built directly, without a scalar a
    /// group: counts are the commonest aggregate, and never NULL.
    fn counts<'g>(
        a: usize,
        spec: &AggSpec,
        target: &DataType,
        groups: impl Iterator<Item = (&'g [u8], &'g GroupState)>,
    ) -> Option<ArrayRef> {
        if *target != DataType::Int64 {
            return None;
        }
        let values: Int64Array = match spec.kind {
            AggKind::CountStar => groups.map(|(_, state)| state.rows).collect(),
            AggKind::Count | AggKind::CountDistinct => {
                groups.map(|(_, state)| state.slots[a].count).collect()
            }
            _ => return None,
        };
        Some(Arc::new(values))
    }

    /// An integer sum's, min's or max's values as an array built directly:
    /// a windowed view settles each of its groups once, and a scalar a
    /// group cost as much as the rest of settling it.
    fn integers<'g>(
        a: usize,
        spec: &AggSpec,
        target: &DataType,
        groups: impl Iterator<Item = (&'g [u8], &'g GroupState)>,
    ) -> Result<Option<ArrayRef>> {
        let summed = spec.kind == AggKind::Sum && spec.arg_type.is_integer();
        let native = native_extreme(spec) && spec.arg_type == DataType::Int64;
        if *target != DataType::Int64 || !(summed || native) {
            return Ok(None);
        }
        let values = groups
            .map(|(_, state)| {
                let slot = &state.slots[a];
                if slot.count == 0 {
                    return Ok(None);
                }
                i64::try_from(slot.int_sum)
                    .map(Some)
                    .map_err(|_| Error::OutOfRange("bigint out of range in sum".into()))
            })
            .collect::<Result<Int64Array>>()?;
        Ok(Some(Arc::new(values)))
    }

    fn aggregate_value(&self, a: usize, spec: &AggSpec, state: &GroupState) -> Result<ScalarValue> {
        let n = state.slots[a].count;
        Ok(match spec.kind {
            AggKind::CountStar => ScalarValue::Int64(Some(state.rows)),
            AggKind::Count | AggKind::CountDistinct => ScalarValue::Int64(Some(n)),
            AggKind::Sum if n == 0 => ScalarValue::Null,
            AggKind::Sum => sum_value(spec, state, a)?,
            AggKind::Avg if n == 0 => ScalarValue::Null,
            AggKind::Avg => {
                let total = if is_float(&spec.arg_type) {
                    state.slots[a].float_sum
                } else {
                    state.slots[a].int_sum as f64 / decimal_factor(&spec.arg_type)
                };
                ScalarValue::Float64(Some(total / n as f64))
            }
            AggKind::Accumulator => {
                let aggregate = spec.accumulator.as_ref().ok_or_else(|| {
                    Error::Internal("an accumulator aggregate without its function".into())
                })?;
                let mut accumulator =
                    self.restore(a, aggregate, state.slots[a].extreme.as_deref())?;
                accumulator.evaluate()?
            }
            AggKind::Min | AggKind::Max if native_extreme(spec) => {
                if state.slots[a].count == 0 {
                    ScalarValue::Null
                } else {
                    let value = i64::try_from(state.slots[a].int_sum)
                        .map_err(|_| Error::Internal("an integer extreme out of range".into()))?;
                    ScalarValue::Int64(Some(value))
                }
            }
            AggKind::Min | AggKind::Max => match (&state.slots[a].extreme, &self.values[a]) {
                (Some(value), Some(converter)) => {
                    let parser = converter.parser();
                    let column = converter.convert_rows([parser.parse(value)])?;
                    ScalarValue::try_from_array(&column[0], 0)?
                }
                _ => ScalarValue::Null,
            },
        })
    }

    fn changes(&self, out: Changes) -> Result<ChangeBatch> {
        let mut batches = Vec::new();
        let mut diffs: Vec<i64> = Vec::new();
        if !out.retract.is_empty() {
            let parser = self.output.parser();
            let columns = self
                .output
                .convert_rows(out.retract.iter().map(|r| parser.parse(r)))?;
            batches.push(self.batch(columns)?);
            diffs.extend(std::iter::repeat_n(-1, out.retract.len()));
        }
        for columns in out.insert {
            let batch = self.batch(columns)?;
            diffs.extend(std::iter::repeat_n(1, batch.num_rows()));
            batches.push(batch);
        }
        let rows = concat_batches(&self.nullable_schema, &batches)?;
        ChangeBatch::new(rows, Int64Array::from(diffs))
    }

    fn batch(&self, columns: Vec<ArrayRef>) -> Result<RecordBatch> {
        Ok(RecordBatch::try_new(self.nullable_schema.clone(), columns)?)
    }
}

/// An aggregate's argument for one batch, in the form its state needs.
enum Input {
    None,
    /// min or max of integers over append-only input, kept natively.
    Extremes {
        array: Int64Array,
        max: bool,
    },
    Valid(ArrayRef),
    Ints(Int64Array),
    Decimals(Decimal128Array),
    Floats(Float64Array),
    Values {
        valid: ArrayRef,
        rows: datafusion::arrow::row::Rows,
    },
}

impl Input {
    fn prepare(
        spec: &AggSpec,
        arg: Option<&ArrayRef>,
        values: Option<&RowConverter>,
    ) -> Result<Input> {
        let Some(arg) = arg else {
            return Ok(Input::None);
        };
        Ok(match spec.kind {
            AggKind::CountStar | AggKind::Accumulator => Input::None,
            AggKind::Count => Input::Valid(arg.clone()),
            AggKind::Sum | AggKind::Avg if is_float(&spec.arg_type) => Input::Floats(
                cast(arg, &DataType::Float64)?
                    .as_primitive::<Float64Type>()
                    .clone(),
            ),
            AggKind::Sum | AggKind::Avg => match &spec.arg_type {
                DataType::Decimal128(..) => {
                    Input::Decimals(arg.as_primitive::<Decimal128Type>().clone())
                }
                _ => Input::Ints(
                    cast(arg, &DataType::Int64)?
                        .as_primitive::<Int64Type>()
                        .clone(),
                ),
            },
            AggKind::Min | AggKind::Max if native_extreme(spec) => Input::Extremes {
                array: cast(arg, &DataType::Int64)?
                    .as_primitive::<Int64Type>()
                    .clone(),
                max: spec.kind == AggKind::Max,
            },
            AggKind::Min | AggKind::Max | AggKind::CountDistinct => {
                let converter =
                    values.ok_or_else(|| Error::Internal("multiset without a converter".into()))?;
                Input::Values {
                    valid: arg.clone(),
                    rows: converter.convert_columns(std::slice::from_ref(arg))?,
                }
            }
        })
    }

    /// Fold the batch into the groups' slots for aggregate `a`; `slots`
    /// gives each row's group.
    fn apply(&self, a: usize, slots: &[u32], diffs: &[i64], groups: &mut Groups) {
        let rows = slots.iter().zip(diffs).enumerate();
        match self {
            Input::None | Input::Values { .. } => {}
            Input::Valid(array) => {
                for (row, (slot, diff)) in rows {
                    if array.is_valid(row) {
                        groups.get_mut(*slot).state.slots[a].count += diff;
                    }
                }
            }
            Input::Extremes { array, max } => {
                for (row, (slot, diff)) in rows {
                    if array.is_valid(row) {
                        let slot = &mut groups.get_mut(*slot).state.slots[a];
                        let value = i128::from(array.value(row));
                        let better = slot.count == 0
                            || (*max && value > slot.int_sum)
                            || (!*max && value < slot.int_sum);
                        if better {
                            slot.int_sum = value;
                        }
                        slot.count += diff;
                    }
                }
            }
            Input::Ints(array) => {
                for (row, (slot, diff)) in rows {
                    if array.is_valid(row) {
                        let slot = &mut groups.get_mut(*slot).state.slots[a];
                        slot.count += diff;
                        slot.int_sum += i128::from(array.value(row)) * i128::from(*diff);
                    }
                }
            }
            Input::Decimals(array) => {
                for (row, (slot, diff)) in rows {
                    if array.is_valid(row) {
                        let slot = &mut groups.get_mut(*slot).state.slots[a];
                        slot.count += diff;
                        slot.int_sum += array.value(row) * i128::from(*diff);
                    }
                }
            }
            Input::Floats(array) => {
                for (row, (slot, diff)) in rows {
                    if array.is_valid(row) {
                        let slot = &mut groups.get_mut(*slot).state.slots[a];
                        slot.count += diff;
                        slot.float_sum += array.value(row) * *diff as f64;
                    }
                }
            }
        }
    }
}

/// Write a group back (`None` deletes it); `last` writes past the
/// ordered map, for writes nothing reads before the epoch commits. A group
/// that never reached state needs no delete.
fn write_group(cx: &mut Context<'_>, group: &mut Group, value: Option<&[u8]>, last: bool) {
    if value.is_none() && !group.stored {
        return;
    }
    if last {
        cx.state.write_last(&[cx.prefix, b"g", &group.key], value);
    } else {
        let key = [cx.prefix, b"g", &group.key].concat();
        match value {
            Some(value) => cx.state.put(key, value.to_vec()),
            None => cx.state.delete(key),
        }
    }
    group.stored = value.is_some();
}

/// Groups that rows are built for: those in memory by their place, or
/// closing ones taken out of it.
trait Held {
    fn group(&self, at: usize) -> &Group;
    fn group_mut(&mut self, at: usize) -> &mut Group;
}

impl Held for Groups {
    fn group(&self, at: usize) -> &Group {
        self.get(at as u32)
    }

    fn group_mut(&mut self, at: usize) -> &mut Group {
        self.get_mut(at as u32)
    }
}

/// Groups listed by their places in the slab.
struct Closing<'a> {
    groups: &'a mut Groups,
    positions: &'a [u32],
}

impl Held for Closing<'_> {
    fn group(&self, at: usize) -> &Group {
        self.groups.get(self.positions[at])
    }

    fn group_mut(&mut self, at: usize) -> &mut Group {
        self.groups.get_mut(self.positions[at])
    }
}

impl Held for Vec<Group> {
    fn group(&self, at: usize) -> &Group {
        &self[at]
    }

    fn group_mut(&mut self, at: usize) -> &mut Group {
        &mut self[at]
    }
}

/// min and max of integers and timestamps over append-only input keep the
/// extreme as a number, compared natively, instead of in row format.
fn native_extreme(spec: &AggSpec) -> bool {
    spec.append_only
        && matches!(spec.kind, AggKind::Min | AggKind::Max)
        && (matches!(
            spec.arg_type,
            DataType::Int8
                | DataType::Int16
                | DataType::Int32
                | DataType::Int64
                | DataType::UInt8
                | DataType::UInt16
                | DataType::UInt32
                | DataType::Timestamp(..)
        ))
}

fn is_float(data_type: &DataType) -> bool {
    matches!(
        data_type,
        DataType::Float16 | DataType::Float32 | DataType::Float64
    )
}

fn decimal_factor(data_type: &DataType) -> f64 {
    match data_type {
        DataType::Decimal128(_, scale) => 10f64.powi(i32::from(*scale)),
        _ => 1.0,
    }
}

fn sum_value(spec: &AggSpec, state: &GroupState, a: usize) -> Result<ScalarValue> {
    Ok(match &spec.arg_type {
        t if is_float(t) => ScalarValue::Float64(Some(state.slots[a].float_sum)),
        DataType::Decimal128(_, scale) => {
            ScalarValue::Decimal128(Some(state.slots[a].int_sum), 38, *scale)
        }
        _ => {
            let sum = i64::try_from(state.slots[a].int_sum)
                .map_err(|_| Error::OutOfRange("bigint out of range in sum".into()))?;
            ScalarValue::Int64(Some(sum))
        }
    })
}

fn cast_scalar(value: ScalarValue, target: &DataType) -> Result<ScalarValue> {
    if value.data_type() == *target {
        return Ok(value);
    }
    if value.is_null() {
        return Ok(ScalarValue::try_from(target)?);
    }
    Ok(value.cast_to(target)?)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use datafusion::arrow::datatypes::{DataType, Field, Schema};
    use datafusion::physical_expr::expressions::Column;

    use super::*;
    use crate::dataflow::change::{Barrier, pretty, render};
    use crate::dataflow::state::EpochState;
    use crate::state::Store;

    fn sum_min_by_group() -> Aggregate {
        let schema = Arc::new(Schema::new(vec![
            Field::new("g", DataType::Utf8, true),
            Field::new("n", DataType::Int64, true),
            Field::new("s", DataType::Int64, true),
            Field::new("lo", DataType::Int64, true),
        ]));
        let column = |i| Arc::new(Column::new("c", i)) as Arc<dyn PhysicalExpr>;
        let aggs = vec![
            AggSpec {
                append_only: false,
                kind: AggKind::CountStar,
                arg: None,
                arg_type: DataType::Null,
                accumulator: None,
            },
            AggSpec {
                append_only: false,
                kind: AggKind::Sum,
                arg: Some(column(1)),
                arg_type: DataType::Int64,
                accumulator: None,
            },
            AggSpec {
                append_only: false,
                kind: AggKind::Min,
                arg: Some(column(1)),
                arg_type: DataType::Int64,
                accumulator: None,
            },
        ];
        Aggregate::new(vec![column(0)], vec![DataType::Utf8], aggs, schema).expect("aggregate")
    }

    /// Feed one epoch and return what the operator emitted at its barrier.
    fn epoch(op: &mut Aggregate, store: &Store, input: ChangeBatch) -> Vec<String> {
        let mut state = EpochState::new(store.db().clone());
        let prefix = b"test".to_vec();
        let mut cx = Context::new(&mut state, &prefix);
        op.on_changes(0, input, &mut cx).expect("changes");
        op.on_barrier(Barrier { epoch: 1, now: 0 }, &mut cx)
            .expect("barrier");
        let out = render(&cx.take_output());
        let mut batch = rocksdb::WriteBatch::default();
        state.drain_into(&mut batch);
        store.db().write(batch).expect("commit");
        out
    }

    #[test]
    fn retractions_replace_the_minimum_and_empty_groups_vanish() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = Store::open(dir.path()).expect("store");
        let mut op = sum_min_by_group();
        let first = epoch(&mut op, &store, pretty("T I", "+ a 5\n+ a 3\n+ b 7"));
        assert_eq!(first, vec!["+1 a 2 8 3", "+1 b 1 7 7"]);
        let second = epoch(&mut op, &store, pretty("T I", "- a 3\n- b 7"));
        assert_eq!(second, vec!["+1 a 1 5 5", "-1 a 2 8 3", "-1 b 1 7 7"]);
        // A change that nets to nothing emits nothing.
        let third = epoch(&mut op, &store, pretty("T I", "+ a 9\n- a 9"));
        assert!(third.is_empty(), "{third:?}");
    }

    #[test]
    fn a_retracted_minimum_is_found_again_also_after_a_restart() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = Store::open(dir.path()).expect("store");
        let mut op = sum_min_by_group();
        let first = epoch(&mut op, &store, pretty("T I", "+ a 5\n+ a 3\n+ a 3\n+ a 8"));
        assert_eq!(first, vec!["+1 a 4 19 3"]);
        // One of two equal minimums goes: the minimum stays, read from the multiset.
        let second = epoch(&mut op, &store, pretty("T I", "- a 3"));
        assert_eq!(second, vec!["+1 a 3 16 3", "-1 a 4 19 3"]);
        // A new operator, as after a restart, retracts the last minimum.
        let mut op = sum_min_by_group();
        let third = epoch(&mut op, &store, pretty("T I", "- a 3\n+ a 6"));
        assert_eq!(third, vec!["+1 a 3 19 5", "-1 a 3 16 3"]);
        // Values above the minimum come and go without changing it.
        let fourth = epoch(&mut op, &store, pretty("T I", "- a 8\n+ a 7"));
        assert_eq!(fourth, vec!["+1 a 3 18 5", "-1 a 3 19 5"]);
    }

    #[test]
    fn append_only_extremes_survive_a_restart_without_a_multiset() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = Store::open(dir.path()).expect("store");
        let build = || {
            let mut op = sum_min_by_group();
            op.aggs[2].append_only = true;
            op
        };
        let mut op = build();
        assert_eq!(
            epoch(&mut op, &store, pretty("T I", "+ a 5\n+ a 3")),
            vec!["+1 a 2 8 3"]
        );
        // A new operator reads the group back from state, as after a restart.
        let mut op = build();
        assert_eq!(
            epoch(&mut op, &store, pretty("T I", "+ a 1\n+ a 4")),
            vec!["+1 a 4 13 1", "-1 a 2 8 3"]
        );
    }

    #[test]
    fn a_full_cache_drops_its_smallest_groups_without_changing_results() {
        let run = |limit: usize| {
            let dir = tempfile::tempdir().expect("tempdir");
            let store = Store::open(dir.path()).expect("store");
            let mut op = sum_min_by_group();
            op.cache_limit = limit;
            let mut out = Vec::new();
            for input in [
                "+ a 5\n+ b 3\n+ c 7\n+ d 1",
                "- a 5\n+ a 2\n+ e 9\n- d 1",
                "+ b 4\n+ c 1\n+ f 6\n+ a 8",
            ] {
                out.push(epoch(&mut op, &store, pretty("T I", input)));
            }
            out
        };
        assert_eq!(run(2), run(CACHE_GROUPS));
    }

    #[test]
    fn the_horizon_only_rules_out_keys_above_every_dropped_one() {
        let mut horizon = Horizon::All;
        assert!(horizon.rules_out(b"a"));
        horizon.lower_to(b"m");
        assert!(!horizon.rules_out(b"a") && !horizon.rules_out(b"m"));
        assert!(horizon.rules_out(b"n"));
        // Dropping smaller keys later never lowers what is known.
        horizon.lower_to(b"c");
        assert_eq!(horizon, Horizon::Above(b"m".to_vec()));
        // Until state has been looked at, nothing is ruled out.
        let mut unknown = Horizon::Unknown;
        unknown.lower_to(b"z");
        assert!(!unknown.rules_out(b"zz"));
    }

    #[test]
    fn nulls_are_ignored_by_sum_and_min() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = Store::open(dir.path()).expect("store");
        let mut op = sum_min_by_group();
        let out = epoch(&mut op, &store, pretty("T I", "+ a .\n+ a ."));
        assert_eq!(out, vec!["+1 a 2 . ."]);
    }

    fn state_entries(store: &Store) -> usize {
        store.state_entries(b"test")
    }

    /// max(v) per (k, window_end) over `(k, window_end, v)` input, and that
    /// input's schema.
    fn max_per_window(on_close: bool) -> (Aggregate, SchemaRef) {
        let time = crate::dataflow::window::timestamp_type();
        let input = Arc::new(Schema::new(vec![
            Field::new("k", DataType::Utf8, true),
            Field::new("window_end", time.clone(), true),
            Field::new("v", DataType::Int64, true),
        ]));
        let output = Arc::new(Schema::new(vec![
            Field::new("k", DataType::Utf8, true),
            Field::new("window_end", time.clone(), true),
            Field::new("hi", DataType::Int64, true),
        ]));
        let column = |i| Arc::new(Column::new("c", i)) as Arc<dyn PhysicalExpr>;
        let max = AggSpec {
            append_only: false,
            kind: AggKind::Max,
            arg: Some(column(2)),
            arg_type: DataType::Int64,
            accumulator: None,
        };
        let window = WindowClose {
            column: 1,
            offset: 0,
        };
        let op = Aggregate::new(
            vec![column(0), column(1)],
            vec![DataType::Utf8, time],
            vec![max],
            output,
        )
        .expect("aggregate")
        .with_window(window, on_close)
        .expect("window");
        (op, input)
    }

    /// `n` rows of window `window` (ending at `window * 10`), over 10 keys.
    fn window_rows(input: &SchemaRef, window: i64, n: i64) -> ChangeBatch {
        use datafusion::arrow::array::{StringArray, TimestampMicrosecondArray};
        let keys: Vec<String> = (0..n).map(|i| format!("k{}", i % 10)).collect();
        let rows = RecordBatch::try_new(
            input.clone(),
            vec![
                Arc::new(StringArray::from(keys)),
                Arc::new(TimestampMicrosecondArray::from(vec![
                    window * 10;
                    n as usize
                ])),
                Arc::new(Int64Array::from_iter_values(0..n)),
            ],
        )
        .expect("batch");
        ChangeBatch::inserts(rows)
    }

    /// One epoch: changes, then a watermark, then the barrier; returns what
    /// the operator emitted and whether the epoch wrote any state.
    fn window_epoch(
        op: &mut Aggregate,
        store: &Store,
        inputs: Vec<ChangeBatch>,
        watermark: i64,
    ) -> (Vec<String>, bool) {
        let mut state = EpochState::new(store.db().clone());
        let prefix = b"test".to_vec();
        let mut cx = Context::new(&mut state, &prefix);
        for input in inputs {
            op.on_changes(0, input, &mut cx).expect("changes");
        }
        op.on_watermark(Watermark { micros: watermark }, &mut cx)
            .expect("watermark");
        op.on_barrier(Barrier { epoch: 1, now: 0 }, &mut cx)
            .expect("barrier");
        let out = render(&cx.take_output());
        let wrote = !state.is_empty();
        let mut batch = rocksdb::WriteBatch::default();
        state.drain_into(&mut batch);
        store.db().write(batch).expect("commit");
        (out, wrote)
    }

    #[test]
    fn windowed_state_is_deleted_once_the_watermark_passes_the_window() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = Store::open(dir.path()).expect("store");
        let (mut op, input) = max_per_window(true);
        let mut most = 0;
        let mut emitted = 0;
        // An endless stream: 200 windows of 10 keys, 5 rows a key each.
        for window in 1..=200i64 {
            let rows = window_rows(&input, window, 50);
            let (out, _) = window_epoch(&mut op, &store, vec![rows], window * 10 - 10);
            emitted += out.len();
            most = most.max(state_entries(&store));
        }
        // One open window at a time: 10 groups and their 50 distinct values.
        assert!(most <= 60, "state grew to {most} entries");
        // Every window but the last, still open, was emitted once a key.
        assert_eq!(emitted, 199 * 10);
    }

    #[test]
    fn a_window_that_opens_and_closes_within_an_epoch_writes_no_state() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = Store::open(dir.path()).expect("store");
        let (mut op, input) = max_per_window(false);
        // Over append-only input max keeps no multiset either.
        op.aggs[0].append_only = true;
        let rows = window_rows(&input, 1, 20);
        let (out, wrote) = window_epoch(&mut op, &store, vec![rows.clone(), rows], 10);
        assert_eq!(out.len(), 10, "{out:?}");
        assert!(!wrote, "the epoch wrote state for groups it closed");
    }

    #[test]
    fn windows_close_alike_whether_their_groups_stayed_in_memory_or_not() {
        let run = |limit: usize| {
            let dir = tempfile::tempdir().expect("tempdir");
            let store = Store::open(dir.path()).expect("store");
            let (mut op, input) = max_per_window(true);
            op.cache_limit = limit;
            let mut out = Vec::new();
            // Three windows open at once; each epoch closes the oldest.
            for window in 1..=8i64 {
                let rows = (window..window + 3)
                    .map(|w| window_rows(&input, w, 20))
                    .collect();
                out.push(window_epoch(&mut op, &store, rows, window * 10).0);
            }
            out
        };
        assert_eq!(run(4), run(CACHE_GROUPS));
    }
}
