//! GROUP BY with count, count(DISTINCT), sum, avg, min and max, exact under
//! deletes.
//!
//! # Algorithm
//! Each input row adds its weight to its group: the group's row count, and
//! each aggregate's running state. Groups touched during an epoch are kept in
//! memory until the barrier; there the operator emits, per touched group, a
//! retraction of the row it last emitted and the group's new row (nothing
//! when they are equal), and writes the group back. A group whose row count
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
//! # State layout (under the operator's prefix)
//! - `g` ++ group key -> [`GroupState`] ++ the last emitted row (row format);
//!   for windowed groups the group key starts with the closing time (8 bytes,
//!   order-preserving)
//! - `m` ++ aggregate index (u8) ++ group key length (u32 BE) ++ group key ++
//!   value (row format, so keys sort by value) -> multiplicity (i64 BE)

use std::collections::HashMap;
use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, AsArray, Int64Array, RecordBatch};
use datafusion::arrow::compute::{cast, concat_batches};
use datafusion::arrow::datatypes::{DataType, Float64Type, Int64Type, SchemaRef};
use datafusion::arrow::row::{RowConverter, SortField};
use datafusion::common::ScalarValue;
use datafusion::physical_expr::PhysicalExpr;

use crate::dataflow::change::{ChangeBatch, Watermark};
use crate::dataflow::operator::{Context, Operator};
use crate::error::{Error, Result};
use crate::state::keys::prefix_end;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AggKind {
    CountStar,
    Count,
    CountDistinct,
    Sum,
    Avg,
    Min,
    Max,
}

pub struct AggSpec {
    pub kind: AggKind,
    /// The input never retracts, so min and max need no multiset.
    pub append_only: bool,
    /// The argument; `None` for count(*).
    pub arg: Option<Arc<dyn PhysicalExpr>>,
    pub arg_type: DataType,
}

/// Running state of one group.
#[derive(Debug, Clone, Default, PartialEq)]
struct GroupState {
    rows: i64,
    /// Per aggregate: non-null inputs (count, sum, avg, min, max) or distinct values.
    counts: Vec<i64>,
    /// Per aggregate: exact sum of integer or decimal inputs.
    int_sums: Vec<i128>,
    /// Per aggregate: sum of floating-point inputs.
    float_sums: Vec<f64>,
    /// Per aggregate: min or max over append-only input (row format), kept
    /// without a multiset since nothing is ever retracted.
    extremes: Vec<Option<Vec<u8>>>,
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
    /// Add a batch's partial state for the same group.
    fn absorb(&mut self, delta: &GroupState, kinds: &[AggKind]) {
        self.rows += delta.rows;
        for (i, kind) in kinds.iter().enumerate() {
            self.counts[i] += delta.counts[i];
            self.int_sums[i] += delta.int_sums[i];
            self.float_sums[i] += delta.float_sums[i];
            if let Some(value) = &delta.extremes[i] {
                keep_extreme(&mut self.extremes[i], value, *kind);
            }
        }
    }

    fn new(aggs: usize) -> GroupState {
        GroupState {
            rows: 0,
            counts: vec![0; aggs],
            int_sums: vec![0; aggs],
            float_sums: vec![0.0; aggs],
            extremes: vec![None; aggs],
        }
    }

    fn encode(&self, emitted: Option<&[u8]>) -> Vec<u8> {
        let mut out = Vec::with_capacity(8 + self.counts.len() * 32);
        out.extend_from_slice(&self.rows.to_le_bytes());
        for i in 0..self.counts.len() {
            out.extend_from_slice(&self.counts[i].to_le_bytes());
            out.extend_from_slice(&self.int_sums[i].to_le_bytes());
            out.extend_from_slice(&self.float_sums[i].to_le_bytes());
        }
        for extreme in &self.extremes {
            match extreme {
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
        out
    }

    /// The state and the last emitted row, if any.
    fn decode(bytes: &[u8], aggs: usize) -> Result<(GroupState, Option<Vec<u8>>)> {
        let bad = || Error::Internal("aggregate state is truncated".into());
        let field = |at: usize, len: usize| bytes.get(at..at + len).ok_or_else(bad);
        let mut state = GroupState::new(aggs);
        state.rows = i64::from_le_bytes(field(0, 8)?.try_into().map_err(|_| bad())?);
        for i in 0..aggs {
            let at = 8 + i * 32;
            state.counts[i] = i64::from_le_bytes(field(at, 8)?.try_into().map_err(|_| bad())?);
            state.int_sums[i] =
                i128::from_le_bytes(field(at + 8, 16)?.try_into().map_err(|_| bad())?);
            state.float_sums[i] =
                f64::from_le_bytes(field(at + 24, 8)?.try_into().map_err(|_| bad())?);
        }
        let mut end = 8 + aggs * 32;
        for i in 0..aggs {
            let len = u32::from_le_bytes(field(end, 4)?.try_into().map_err(|_| bad())?);
            end += 4;
            if len != u32::MAX {
                state.extremes[i] = Some(field(end, len as usize)?.to_vec());
                end += len as usize;
            }
        }
        let emitted = (bytes.len() > end).then(|| bytes[end..].to_vec());
        Ok((state, emitted))
    }
}

struct Touched {
    state: GroupState,
    emitted: Option<Vec<u8>>,
}

/// Where a windowed group's closing time comes from: a group column holding
/// a window bound, plus what lies between that bound and the window's end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WindowClose {
    /// Index of the group expression.
    pub column: usize,
    /// Microseconds from the column's value to the window's end.
    pub offset: i64,
}

/// Closing times as keys that sort like the times.
fn close_prefix(close: i64) -> [u8; 8] {
    ((close as u64) ^ (1 << 63)).to_be_bytes()
}

pub struct Aggregate {
    groups: Vec<Arc<dyn PhysicalExpr>>,
    /// Set when groups belong to windows.
    window: Option<WindowClose>,
    /// Emit a group once, when its window closes, instead of at every change.
    on_close: bool,
    group_keys: RowConverter,
    aggs: Vec<AggSpec>,
    /// Per aggregate with a multiset: the converter for its values.
    values: Vec<Option<RowConverter>>,
    schema: SchemaRef,
    /// `schema` with every column nullable, for the batches it emits.
    nullable_schema: SchemaRef,
    /// The kind of each aggregate, in order.
    kinds: Vec<AggKind>,
    output: RowConverter,
    touched: HashMap<Vec<u8>, Touched>,
    /// Pending multiset changes: (aggregate, group key, value) -> weight.
    multiset: HashMap<(usize, Vec<u8>, Vec<u8>), i64>,
}

impl Aggregate {
    pub fn new(
        groups: Vec<Arc<dyn PhysicalExpr>>,
        group_types: Vec<DataType>,
        aggs: Vec<AggSpec>,
        schema: SchemaRef,
    ) -> Result<Aggregate> {
        let group_keys = RowConverter::new(group_types.into_iter().map(SortField::new).collect())?;
        let values = aggs
            .iter()
            .map(|a| match a.kind {
                AggKind::Min | AggKind::Max | AggKind::CountDistinct => {
                    RowConverter::new(vec![SortField::new(a.arg_type.clone())]).map(Some)
                }
                _ => Ok(None),
            })
            .collect::<Result<_, _>>()?;
        let output = RowConverter::new(
            schema
                .fields()
                .iter()
                .map(|f| SortField::new(f.data_type().clone()))
                .collect(),
        )?;
        Ok(Aggregate {
            groups,
            window: None,
            on_close: false,
            group_keys,
            kinds: aggs.iter().map(|a| a.kind).collect(),
            aggs,
            values,
            nullable_schema: crate::catalog::nullable(&schema),
            schema,
            output,
            touched: HashMap::new(),
            multiset: HashMap::new(),
        })
    }

    /// Make groups windowed; `on_close` holds each group back until its window closes.
    pub fn with_window(mut self, window: WindowClose, on_close: bool) -> Aggregate {
        self.window = Some(window);
        self.on_close = on_close;
        self
    }

    fn is_global(&self) -> bool {
        self.groups.is_empty()
    }

    /// The group key without its closing-time prefix.
    fn group_values<'g>(&self, group: &'g [u8]) -> &'g [u8] {
        if self.window.is_some() {
            &group[8.min(group.len())..]
        } else {
            group
        }
    }

    /// Group keys of a batch's rows, each prefixed by its window's closing
    /// time; `None` when the groups are not windowed.
    fn windowed_keys(
        &self,
        group_columns: &[ArrayRef],
        group_rows: Option<&datafusion::arrow::row::Rows>,
    ) -> Result<Option<Vec<Vec<u8>>>> {
        let (Some(window), Some(rows)) = (self.window, group_rows) else {
            return Ok(None);
        };
        let bounds = crate::catalog::micros(&group_columns[window.column])?;
        Ok(Some(
            (0..rows.num_rows())
                .map(|i| {
                    // A NULL bound never closes: such rows have no window.
                    let close = if bounds.is_null(i) {
                        i64::MAX
                    } else {
                        bounds.value(i).saturating_add(window.offset)
                    };
                    [close_prefix(close).as_slice(), rows.row(i).data()].concat()
                })
                .collect(),
        ))
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

    fn touch<'s>(&'s mut self, group: &[u8], cx: &Context<'_>) -> Result<&'s mut Touched> {
        if !self.touched.contains_key(group) {
            let aggs = self.aggs.len();
            let loaded = match cx.state.get(&Self::group_key(cx, group))? {
                Some(bytes) => {
                    let (state, emitted) = GroupState::decode(&bytes, aggs)?;
                    Touched { state, emitted }
                }
                None => Touched {
                    state: GroupState::new(aggs),
                    emitted: None,
                },
            };
            self.touched.insert(group.to_vec(), loaded);
        }
        self.touched
            .get_mut(group)
            .ok_or_else(|| Error::Internal("a touched group vanished".into()))
    }

    fn evaluate_args(&self, batch: &ChangeBatch) -> Result<Vec<Option<ArrayRef>>> {
        self.aggs
            .iter()
            .map(|spec| {
                let Some(arg) = &spec.arg else {
                    return Ok(None);
                };
                let array = arg.evaluate(batch.rows())?.into_array(batch.len())?;
                Ok(Some(array))
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
            .map(|a| match &a.arg {
                Some(arg) => format!("{:?}({arg})", a.kind),
                None => format!("{:?}", a.kind),
            })
            .collect();
        format!("group=[{}] aggs=[{}]", groups.join(", "), aggs.join(", "))
    }

    fn on_changes(
        &mut self,
        _input: usize,
        batch: ChangeBatch,
        cx: &mut Context<'_>,
    ) -> Result<()> {
        let n = batch.len();
        let group_columns = self
            .groups
            .iter()
            .map(|g| g.evaluate(batch.rows())?.into_array(n))
            .collect::<datafusion::error::Result<Vec<_>>>()?;
        let group_rows = if self.is_global() {
            None
        } else {
            Some(self.group_keys.convert_columns(&group_columns)?)
        };
        let windowed = self.windowed_keys(&group_columns, group_rows.as_ref())?;
        let args = self.evaluate_args(&batch)?;
        let inputs = args
            .iter()
            .zip(&self.aggs)
            .zip(&self.values)
            .map(|((arg, spec), values)| Input::prepare(spec, arg.as_ref(), values.as_ref()))
            .collect::<Result<Vec<_>>>()?;
        let diffs = batch.diffs();
        // Fold the batch per group first, so each group is looked up once a batch.
        let mut local: HashMap<&[u8], usize> = HashMap::new();
        let mut keys: Vec<&[u8]> = Vec::new();
        let mut partial: Vec<GroupState> = Vec::new();
        let mut values: HashMap<(usize, usize, &[u8]), i64> = HashMap::new();
        for row in 0..n {
            let diff = diffs.value(row);
            let key: &[u8] = match (&windowed, &group_rows) {
                (Some(keys), _) => &keys[row],
                (None, Some(rows)) => rows.row(row).data(),
                (None, None) => &[],
            };
            let index = *local.entry(key).or_insert_with(|| {
                keys.push(key);
                partial.push(GroupState::new(self.aggs.len()));
                keys.len() - 1
            });
            let state = &mut partial[index];
            state.rows += diff;
            for (a, input) in inputs.iter().enumerate() {
                input.apply(a, row, diff, state);
                if let Some(value) = input.multiset_value(row) {
                    if self.aggs[a].append_only && self.aggs[a].kind != AggKind::CountDistinct {
                        keep_extreme(&mut state.extremes[a], value, self.aggs[a].kind);
                    } else {
                        *values.entry((a, index, value)).or_insert(0) += diff;
                    }
                }
            }
        }
        let kinds = self.kinds.clone();
        for (index, delta) in partial.into_iter().enumerate() {
            self.touch(keys[index], cx)?.state.absorb(&delta, &kinds);
        }
        for ((a, index, value), delta) in values {
            *self
                .multiset
                .entry((a, keys[index].to_vec(), value.to_vec()))
                .or_insert(0) += delta;
        }
        Ok(())
    }

    fn on_barrier(
        &mut self,
        _barrier: crate::dataflow::change::Barrier,
        cx: &mut Context<'_>,
    ) -> Result<()> {
        self.flush(cx)
    }

    fn on_watermark(&mut self, wm: Watermark, cx: &mut Context<'_>) -> Result<Option<Watermark>> {
        if self.window.is_some() {
            self.flush(cx)?;
            self.close_windows(wm.micros, cx)?;
        }
        Ok(Some(wm))
    }
}

impl Aggregate {
    /// Write every touched group back and emit how its row changed (held
    /// back until the window closes under `EMIT ON WINDOW CLOSE`).
    fn flush(&mut self, cx: &mut Context<'_>) -> Result<()> {
        if self.is_global() {
            // The single group of a global aggregate exists from the start.
            self.touch(&[], cx)?;
        }
        self.apply_multisets(cx)?;
        let touched = std::mem::take(&mut self.touched);
        let mut retract: Vec<Vec<u8>> = Vec::new();
        let mut insert: Vec<Vec<ScalarValue>> = Vec::new();
        for (group, t) in touched {
            let alive = t.state.rows > 0 || self.is_global();
            if !alive {
                retract.extend(t.emitted.clone());
                cx.state.delete(Self::group_key(cx, &group));
                continue;
            }
            if self.on_close {
                cx.state
                    .put(Self::group_key(cx, &group), t.state.encode(None));
                continue;
            }
            let new_row = self.output_row(&group, &t.state, cx)?;
            let new_bytes = self.encode_output(&new_row)?;
            if Some(&new_bytes) != t.emitted.as_ref() {
                retract.extend(t.emitted.clone());
                insert.push(new_row);
            }
            cx.state.put(
                Self::group_key(cx, &group),
                t.state.encode(Some(&new_bytes)),
            );
        }
        let batch = self.changes(retract, insert)?;
        cx.emit(batch);
        Ok(())
    }

    /// Forget every group whose window the watermark has reached, emitting
    /// its final row first under `EMIT ON WINDOW CLOSE`.
    fn close_windows(&mut self, watermark: i64, cx: &mut Context<'_>) -> Result<()> {
        let lower = cx.key(b"g");
        let upper = cx.key(&[b"g".as_slice(), &close_prefix(watermark.saturating_add(1))].concat());
        let mut insert = Vec::new();
        for (key, value) in cx.state.scan(&lower, &upper)? {
            let group = key[lower.len()..].to_vec();
            if self.on_close {
                let (state, _) = GroupState::decode(&value, self.aggs.len())?;
                insert.push(self.output_row(&group, &state, cx)?);
            }
            cx.state.delete(key);
            for (agg, values) in self.values.iter().enumerate() {
                if values.is_none()
                    || (self.aggs[agg].append_only && self.aggs[agg].kind != AggKind::CountDistinct)
                {
                    continue;
                }
                let prefix = Self::multiset_prefix(cx, agg, &group);
                for (entry, _) in cx.state.scan(&prefix, &prefix_end(&prefix))? {
                    cx.state.delete(entry);
                }
            }
        }
        let batch = self.changes(Vec::new(), insert)?;
        cx.emit(batch);
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
                    self.touch(&group, cx)?.state.counts[agg] += change;
                }
            }
        }
        Ok(())
    }

    fn output_row(
        &self,
        group: &[u8],
        state: &GroupState,
        cx: &Context<'_>,
    ) -> Result<Vec<ScalarValue>> {
        let mut values: Vec<ScalarValue> = Vec::with_capacity(self.schema.fields().len());
        if !self.is_global() {
            let parser = self.group_keys.parser();
            let columns = self
                .group_keys
                .convert_rows([parser.parse(self.group_values(group))])?;
            for column in &columns {
                values.push(ScalarValue::try_from_array(column, 0)?);
            }
        }
        for (a, spec) in self.aggs.iter().enumerate() {
            let target = self.schema.field(values.len()).data_type().clone();
            let value = self.aggregate_value(a, spec, group, state, cx)?;
            values.push(cast_scalar(value, &target)?);
        }
        Ok(values)
    }

    fn aggregate_value(
        &self,
        a: usize,
        spec: &AggSpec,
        group: &[u8],
        state: &GroupState,
        cx: &Context<'_>,
    ) -> Result<ScalarValue> {
        let n = state.counts[a];
        Ok(match spec.kind {
            AggKind::CountStar => ScalarValue::Int64(Some(state.rows)),
            AggKind::Count | AggKind::CountDistinct => ScalarValue::Int64(Some(n)),
            AggKind::Sum if n == 0 => ScalarValue::Null,
            AggKind::Sum => sum_value(spec, state, a)?,
            AggKind::Avg if n == 0 => ScalarValue::Null,
            AggKind::Avg => {
                let total = if is_float(&spec.arg_type) {
                    state.float_sums[a]
                } else {
                    state.int_sums[a] as f64 / decimal_factor(&spec.arg_type)
                };
                ScalarValue::Float64(Some(total / n as f64))
            }
            AggKind::Min | AggKind::Max if spec.append_only => {
                match (&state.extremes[a], &self.values[a]) {
                    (Some(value), Some(converter)) => {
                        let parser = converter.parser();
                        let column = converter.convert_rows([parser.parse(value)])?;
                        ScalarValue::try_from_array(&column[0], 0)?
                    }
                    _ => ScalarValue::Null,
                }
            }
            AggKind::Min | AggKind::Max => {
                let prefix = Self::multiset_prefix(cx, a, group);
                let found =
                    cx.state
                        .first_in(&prefix, &prefix_end(&prefix), spec.kind == AggKind::Max)?;
                match (found, &self.values[a]) {
                    (Some((key, _)), Some(converter)) => {
                        let parser = converter.parser();
                        let column =
                            converter.convert_rows([parser.parse(&key[prefix.len()..])])?;
                        ScalarValue::try_from_array(&column[0], 0)?
                    }
                    _ => ScalarValue::Null,
                }
            }
        })
    }

    fn encode_output(&self, values: &[ScalarValue]) -> Result<Vec<u8>> {
        let columns = values
            .iter()
            .map(|v| v.to_array())
            .collect::<datafusion::error::Result<Vec<_>>>()?;
        let rows = self.output.convert_columns(&columns)?;
        Ok(rows.row(0).data().to_vec())
    }

    fn changes(&self, retract: Vec<Vec<u8>>, insert: Vec<Vec<ScalarValue>>) -> Result<ChangeBatch> {
        let mut batches = Vec::new();
        let mut diffs: Vec<i64> = Vec::new();
        if !retract.is_empty() {
            let parser = self.output.parser();
            let columns = self
                .output
                .convert_rows(retract.iter().map(|r| parser.parse(r)))?;
            batches.push(self.batch(columns)?);
            diffs.extend(std::iter::repeat_n(-1, retract.len()));
        }
        if !insert.is_empty() {
            let columns = (0..self.schema.fields().len())
                .map(|c| {
                    let array =
                        ScalarValue::iter_to_array(insert.iter().map(|row| row[c].clone()))?;
                    Ok(cast(&array, self.schema.field(c).data_type())?)
                })
                .collect::<Result<Vec<_>>>()?;
            batches.push(self.batch(columns)?);
            diffs.extend(std::iter::repeat_n(1, insert.len()));
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
    Valid(ArrayRef),
    Ints(ArrayRef),
    Floats(ArrayRef),
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
            AggKind::CountStar => Input::None,
            AggKind::Count => Input::Valid(arg.clone()),
            AggKind::Sum | AggKind::Avg if is_float(&spec.arg_type) => {
                Input::Floats(cast(arg, &DataType::Float64)?)
            }
            AggKind::Sum | AggKind::Avg => match &spec.arg_type {
                DataType::Decimal128(..) => Input::Ints(arg.clone()),
                _ => Input::Ints(cast(arg, &DataType::Int64)?),
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

    fn apply(&self, a: usize, row: usize, diff: i64, state: &mut GroupState) {
        match self {
            Input::None => {}
            Input::Valid(array) if array.is_valid(row) => state.counts[a] += diff,
            Input::Ints(array) if array.is_valid(row) => {
                state.counts[a] += diff;
                let value = match array.data_type() {
                    DataType::Decimal128(..) => array
                        .as_primitive::<datafusion::arrow::datatypes::Decimal128Type>()
                        .value(row),
                    _ => i128::from(array.as_primitive::<Int64Type>().value(row)),
                };
                state.int_sums[a] += value * i128::from(diff);
            }
            Input::Floats(array) if array.is_valid(row) => {
                state.counts[a] += diff;
                state.float_sums[a] += array.as_primitive::<Float64Type>().value(row) * diff as f64;
            }
            // min, max and count(DISTINCT) live in the multiset.
            _ => {}
        }
    }

    fn multiset_value(&self, row: usize) -> Option<&[u8]> {
        match self {
            Input::Values { valid, rows } if valid.is_valid(row) => Some(rows.row(row).data()),
            _ => None,
        }
    }
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
        t if is_float(t) => ScalarValue::Float64(Some(state.float_sums[a])),
        DataType::Decimal128(_, scale) => {
            ScalarValue::Decimal128(Some(state.int_sums[a]), 38, *scale)
        }
        _ => {
            let sum = i64::try_from(state.int_sums[a])
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
            },
            AggSpec {
                append_only: false,
                kind: AggKind::Sum,
                arg: Some(column(1)),
                arg_type: DataType::Int64,
            },
            AggSpec {
                append_only: false,
                kind: AggKind::Min,
                arg: Some(column(1)),
                arg_type: DataType::Int64,
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
        op.on_barrier(Barrier { epoch: 1 }, &mut cx)
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
    fn nulls_are_ignored_by_sum_and_min() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = Store::open(dir.path()).expect("store");
        let mut op = sum_min_by_group();
        let out = epoch(&mut op, &store, pretty("T I", "+ a .\n+ a ."));
        assert_eq!(out, vec!["+1 a 2 . ."]);
    }

    /// Count the state entries under the test prefix.
    fn state_entries(store: &Store) -> usize {
        let db = store.db();
        db.prefix_iterator_cf(crate::state::cf(db, crate::state::CF_STATE), b"test")
            .filter_map(|entry| entry.ok())
            .take_while(|(key, _)| key.starts_with(b"test"))
            .count()
    }

    #[test]
    fn windowed_state_is_deleted_once_the_watermark_passes_the_window() {
        use datafusion::arrow::array::{StringArray, TimestampMicrosecondArray};
        let dir = tempfile::tempdir().expect("tempdir");
        let store = Store::open(dir.path()).expect("store");
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
        };
        let mut op = Aggregate::new(
            vec![column(0), column(1)],
            vec![DataType::Utf8, time],
            vec![max],
            output,
        )
        .expect("aggregate")
        .with_window(
            WindowClose {
                column: 1,
                offset: 0,
            },
            true,
        );
        let mut most = 0;
        let mut emitted = 0;
        // An endless stream: 200 windows of 10 keys, 5 rows a key each.
        for window in 1..=200i64 {
            let keys: Vec<String> = (0..50).map(|i| format!("k{}", i % 10)).collect();
            let rows = RecordBatch::try_new(
                input.clone(),
                vec![
                    Arc::new(StringArray::from(keys)),
                    Arc::new(TimestampMicrosecondArray::from(vec![window * 10; 50])),
                    Arc::new(Int64Array::from_iter_values(0..50)),
                ],
            )
            .expect("batch");
            let mut state = EpochState::new(store.db().clone());
            let prefix = b"test".to_vec();
            let mut cx = Context::new(&mut state, &prefix);
            op.on_changes(0, ChangeBatch::inserts(rows), &mut cx)
                .expect("changes");
            op.on_watermark(
                Watermark {
                    micros: window * 10 - 10,
                },
                &mut cx,
            )
            .expect("watermark");
            op.on_barrier(Barrier { epoch: 1 }, &mut cx)
                .expect("barrier");
            emitted += cx.take_output().iter().map(ChangeBatch::len).sum::<usize>();
            let mut batch = rocksdb::WriteBatch::default();
            state.drain_into(&mut batch);
            store.db().write(batch).expect("commit");
            most = most.max(state_entries(&store));
        }
        // One open window at a time: 10 groups and their 50 distinct values.
        assert!(most <= 60, "state grew to {most} entries");
        // Every window but the last, still open, was emitted once a key.
        assert_eq!(emitted, 199 * 10);
    }
}
