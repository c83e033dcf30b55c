//! What the aggregate emits: at a barrier, or when a window closes, each
//! settled group's new row against the one it last emitted, built as
//! columns for all groups together, and the group written back.

use std::sync::Arc;

use datafusion::arrow::array::{ArrayRef, Int64Array, RecordBatch, UInt32Array};
use datafusion::arrow::compute::{cast, concat_batches, take_arrays};
use datafusion::arrow::datatypes::{DataType, SchemaRef};
use datafusion::arrow::row::RowConverter;
use datafusion::common::ScalarValue;

use super::codec::{GroupState, write_group};
use super::groups::{Group, Groups};
use super::input::{is_float, native_extreme};
use super::{AggKind, AggSpec, Aggregate};
use crate::dataflow::change::ChangeBatch;
use crate::dataflow::operator::Context;
use crate::error::{Error, Result};

/// Rows an operator call retracts (row format) and inserts (columns).
#[derive(Default)]
pub(super) struct Changes {
    pub retract: Vec<Vec<u8>>,
    pub insert: Vec<Vec<ArrayRef>>,
}

/// What settling a touched group leaves to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Fate {
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
    pub(super) fn flush(&mut self, cx: &mut Context<'_>, at_barrier: bool) -> Result<()> {
        self.settle_presence(at_barrier, cx)?;
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
    pub(super) fn settle(
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
    pub(super) fn emit_rows(
        &mut self,
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

    /// The output columns of groups, one row each, in the output's types.
    pub(super) fn output_columns<'g>(
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

    pub(super) fn changes(&self, out: Changes) -> Result<ChangeBatch> {
        changes_of(&self.output, &self.nullable_schema, out)
    }
}

/// One batch of changes: the retracted rows (row format of `output`) and
/// the inserted ones, in `schema`.
pub(super) fn changes_of(
    output: &RowConverter,
    schema: &SchemaRef,
    out: Changes,
) -> Result<ChangeBatch> {
    let batch = |columns| RecordBatch::try_new(schema.clone(), columns);
    let mut batches = Vec::new();
    let mut diffs: Vec<i64> = Vec::new();
    if !out.retract.is_empty() {
        let parser = output.parser();
        let columns = output.convert_rows(out.retract.iter().map(|r| parser.parse(r)))?;
        batches.push(batch(columns)?);
        diffs.extend(std::iter::repeat_n(-1, out.retract.len()));
    }
    for columns in out.insert {
        let batch = batch(columns)?;
        diffs.extend(std::iter::repeat_n(1, batch.num_rows()));
        batches.push(batch);
    }
    let rows = concat_batches(schema, &batches)?;
    ChangeBatch::new(rows, Int64Array::from(diffs))
}

/// Groups that rows are built for: those in memory by their place, or
/// closing ones taken out of it.
pub(super) trait Held {
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

impl Held for Vec<Group> {
    fn group(&self, at: usize) -> &Group {
        &self[at]
    }

    fn group_mut(&mut self, at: usize) -> &mut Group {
        &mut self[at]
    }
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
