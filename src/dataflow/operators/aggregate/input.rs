//! A batch's rows into their groups: each aggregate's argument is brought
//! once per batch into the form its kind keeps (a count, a sum, a native
//! extreme, row-format values for a multiset, an accumulator's state), then
//! folded into the groups' slots.

use datafusion::arrow::array::{
    Array, ArrayRef, AsArray, Decimal128Array, Float64Array, Int64Array, UInt32Array,
};
use datafusion::arrow::compute::{cast, take_arrays};
use datafusion::arrow::datatypes::{DataType, Decimal128Type, Float64Type, Int64Type};
use datafusion::arrow::row::{RowConverter, Rows};
use datafusion::physical_expr::aggregate::AggregateFunctionExpr;

use super::codec::{GroupState, Slot};
use super::groups::Groups;
use super::{AggKind, AggSpec, Aggregate, FastMap};
use crate::dataflow::change::{ChangeBatch, evaluate_all};
use crate::dataflow::errors::RowErrors;
use crate::dataflow::operator::Context;
use crate::error::{Error, Result};

impl Aggregate {
    /// Add a batch's rows to their groups, and each aggregate's argument to
    /// its running state in the group.
    pub(super) fn add_batch(&mut self, batch: ChangeBatch, cx: &mut Context<'_>) -> Result<()> {
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
        let slots = self.count_rows(keys.as_ref(), diffs, cx)?;
        let seen = self
            .presence
            .gather(batch.rows(), &args, &slots, &mut cx.state.errors)?;
        let held = self.fold_inputs(&inputs, &slots, diffs) + seen;
        // Held until the barrier: counted as pending writes, so that a bulk
        // load ends its epoch before the held changes outgrow its budget.
        cx.state.account(held);
        let accumulating = self.aggs.iter().any(|a| a.accumulator.is_some());
        if accumulating {
            self.accumulate(&batch, &slots, &mut cx.state.errors)?;
        }
        // An epoch that touches more groups than the cache holds writes
        // them back now, so memory stays bounded however many groups change.
        if self.groups_cache.len() > self.cache_limit {
            self.flush(cx, false)?;
        }
        self.close_late(cx)
    }

    /// Each row's group, touched, with the row's weight added to its count.
    fn count_rows(
        &mut self,
        keys: Option<&Rows>,
        diffs: &[i64],
        cx: &Context<'_>,
    ) -> Result<Vec<u32>> {
        let mut slots: Vec<u32> = Vec::with_capacity(diffs.len());
        // Runs of rows of one group are common (a hot key, a sorted input):
        // a row of the group before needs no lookup.
        let mut last: Option<(&[u8], u32)> = None;
        for (row, diff) in diffs.iter().enumerate() {
            let key: &[u8] = keys.map_or(&[], |rows| rows.row(row).data());
            let slot = match last {
                Some((before, slot)) if before == key => slot,
                _ => self.slot(key, cx)?,
            };
            last = Some((key, slot));
            self.groups_cache.get_mut(slot).state.rows += diff;
            slots.push(slot);
        }
        Ok(slots)
    }

    /// Fold each aggregate's input into the groups' slots; a multiset's
    /// values are summed per group and value, for the barrier to store.
    /// Returns the bytes the new multiset changes hold.
    fn fold_inputs(&mut self, inputs: &[Input], slots: &[u32], diffs: &[i64]) -> usize {
        // One aggregate at a time over the whole batch: the match on the
        // input's kind is decided once, not once a row.
        let mut values: FastMap<(usize, u32), FastMap<&[u8], i64>> = FastMap::default();
        for (a, input) in inputs.iter().enumerate() {
            input.apply(a, slots, diffs, &mut self.groups_cache);
            let Input::Values { valid, rows } = input else {
                continue;
            };
            let spec = &self.aggs[a];
            for (row, slot) in slots.iter().enumerate() {
                if !valid.is_valid(row) {
                    continue;
                }
                let value = rows.row(row).data();
                if spec.kind != AggKind::CountDistinct {
                    let held = &mut self.groups_cache.get_mut(*slot).state.slots[a];
                    track_extreme(held, value, diffs[row], spec.kind);
                }
                let held = values.entry((a, *slot)).or_default();
                *held.entry(value).or_insert(0) += diffs[row];
            }
        }
        // The group's key is copied once a group, not once a value.
        let mut bytes = 0;
        for ((a, slot), changes) in values {
            let group = self.groups_cache.get(slot).key.to_vec();
            let group_bytes = group.len() + HELD_OVERHEAD;
            let held = self.multiset.entry((a, group)).or_default();
            bytes += group_bytes * usize::from(held.is_empty());
            for (value, delta) in changes {
                let entry = held.entry(value.to_vec());
                if matches!(entry, std::collections::hash_map::Entry::Vacant(_)) {
                    bytes += value.len() + HELD_OVERHEAD;
                }
                *entry.or_insert(0) += delta;
            }
        }
        bytes
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
                Ok(Some(errors.evaluate(arg, batch.rows())?))
            })
            .collect()
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
    pub(super) fn restore(
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
}

/// Bytes a held multiset change costs beyond its value: the map's entry,
/// the value's allocation and its count.
const HELD_OVERHEAD: usize = 48;

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
pub(super) fn keep_extreme(current: &mut Option<Vec<u8>>, value: &[u8], kind: AggKind) {
    let better = match current {
        None => true,
        Some(held) if kind == AggKind::Min => value < held.as_slice(),
        Some(held) => value > held.as_slice(),
    };
    if better {
        *current = Some(value.to_vec());
    }
}

/// An aggregate's argument for one batch, in the form its state needs.
pub(super) enum Input {
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
    /// min or max over append-only input, kept as its extreme alone (row
    /// format): nothing is ever retracted, so no multiset is needed.
    Kept {
        valid: ArrayRef,
        rows: datafusion::arrow::row::Rows,
        kind: AggKind,
    },
}

impl Input {
    pub(super) fn prepare(
        spec: &AggSpec,
        arg: Option<&ArrayRef>,
        values: Option<&RowConverter>,
    ) -> Result<Input> {
        let Some(arg) = arg else {
            return Ok(Input::None);
        };
        Ok(match spec.kind {
            // Kept by `presence`.
            AggKind::CountDistinct if spec.append_only => Input::None,
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
                let valid = arg.clone();
                let rows = converter.convert_columns(std::slice::from_ref(arg))?;
                match spec.append_only && spec.kind != AggKind::CountDistinct {
                    true => Input::Kept {
                        valid,
                        rows,
                        kind: spec.kind,
                    },
                    false => Input::Values { valid, rows },
                }
            }
        })
    }

    /// Fold the batch into the groups' slots for aggregate `a`; `slots`
    /// gives each row's group.
    pub(super) fn apply(&self, a: usize, slots: &[u32], diffs: &[i64], groups: &mut impl States) {
        let rows = slots.iter().zip(diffs).enumerate();
        match self {
            Input::None | Input::Values { .. } => {}
            Input::Kept { valid, rows, kind } => {
                for (row, slot) in slots.iter().enumerate() {
                    if valid.is_valid(row) {
                        let extreme = &mut groups.state_mut(*slot).slots[a].extreme;
                        keep_extreme(extreme, rows.row(row).data(), *kind);
                    }
                }
            }
            Input::Valid(array) => {
                for (row, (slot, diff)) in rows {
                    if array.is_valid(row) {
                        groups.state_mut(*slot).slots[a].count += diff;
                    }
                }
            }
            Input::Extremes { array, max } => {
                for (row, (slot, diff)) in rows {
                    if array.is_valid(row) {
                        let slot = &mut groups.state_mut(*slot).slots[a];
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
                        let slot = &mut groups.state_mut(*slot).slots[a];
                        slot.count += diff;
                        slot.int_sum += i128::from(array.value(row)) * i128::from(*diff);
                    }
                }
            }
            Input::Decimals(array) => {
                for (row, (slot, diff)) in rows {
                    if array.is_valid(row) {
                        let slot = &mut groups.state_mut(*slot).slots[a];
                        slot.count += diff;
                        slot.int_sum += array.value(row) * i128::from(*diff);
                    }
                }
            }
            Input::Floats(array) => {
                for (row, (slot, diff)) in rows {
                    if array.is_valid(row) {
                        let slot = &mut groups.state_mut(*slot).slots[a];
                        slot.count += diff;
                        slot.float_sum += array.value(row) * *diff as f64;
                    }
                }
            }
        }
    }
}

/// min and max of integers and timestamps over append-only input keep the
/// extreme as a number, compared natively, instead of in row format.
pub(super) fn native_extreme(spec: &AggSpec) -> bool {
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

pub(super) fn is_float(data_type: &DataType) -> bool {
    matches!(
        data_type,
        DataType::Float16 | DataType::Float32 | DataType::Float64
    )
}

/// Running states found by position: the aggregate's groups, or a
/// session aggregate's sessions.
pub(super) trait States {
    fn state_mut(&mut self, at: u32) -> &mut GroupState;
}

impl States for Groups {
    fn state_mut(&mut self, at: u32) -> &mut GroupState {
        &mut self.get_mut(at).state
    }
}
