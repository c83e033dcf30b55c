//! count(DISTINCT) over input that never retracts: a value, once seen by a
//! group, stays seen, so only whether each group has seen each value is
//! kept, never how often.
//!
//! The count(DISTINCT)s of one argument under different FILTERs (Nexmark's
//! q15 and q16 count bidders four ways) share one record: a group's value
//! maps to a mask with a bit for each aggregate that has counted it. A row
//! then costs one lookup per argument, not one per aggregate, and a value
//! new to a group one state read and one write.
//!
//! Within an epoch the values rows bring are gathered per argument under
//! (group slot, value) with the bits their aggregates' FILTERs let through;
//! when the operator settles its groups (the barrier, a full cache, a
//! closing window) the gathered values are checked against state in one
//! batched read, and each bit a value gains adds one to its aggregate's
//! count in the group.
//!
//! # State layout (under the operator's prefix)
//! - shared (planner revision 3 on): `p` ++ argument index (u8) ++ group key
//!   length (u32 BE) ++ group key ++ value (row format) -> mask (u64 BE)
//! - per aggregate (views of earlier revisions): the multiset key of
//!   [`Aggregate::multiset_prefix`] ++ value -> multiplicity (i64 BE), any
//!   multiplicity above zero meaning seen

use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef};
use datafusion::arrow::row::{RowConverter, SortField};
use datafusion::physical_expr::PhysicalExpr;

use super::{AggKind, AggSpec, Aggregate};
use crate::dataflow::errors::RowErrors;
use crate::dataflow::operator::Context;
use crate::error::{Error, Result};
use crate::state::keys::prefix_end;

type ValueMap = hashbrown::HashMap<Vec<u8>, u64, ahash::RandomState>;

/// Bytes a gathered value costs beyond its own: the map's entry, the key's
/// allocation and the slot before the value.
const ENTRY_OVERHEAD: usize = 48;

/// Most aggregates one mask can tell apart.
const MASK_BITS: usize = 64;

/// One argument's record of values seen.
struct Argument {
    /// The argument without its FILTER; `None` reads the single
    /// aggregate's own argument.
    value: Option<Arc<dyn PhysicalExpr>>,
    /// The aggregates sharing it, by bit.
    aggs: Vec<usize>,
    /// Stored under one key per value with a mask (true), or under each
    /// aggregate's multiset key (false).
    shared: bool,
    converter: RowConverter,
    /// This stretch's values: slot (u32 LE) ++ value -> bits seen.
    gathered: ValueMap,
}

impl Argument {
    /// Where a group's values of the argument at `at` are stored: its own
    /// prefix when shared, else its single aggregate's multiset.
    fn prefix(&self, cx: &Context<'_>, at: usize, group: &[u8]) -> Vec<u8> {
        match self.shared {
            true => presence_prefix(cx, at, group),
            false => Aggregate::multiset_prefix(cx, self.aggs[0], group),
        }
    }
}

/// The group slot a gathered key starts with.
fn slot_of(key: &[u8]) -> u32 {
    u32::from_le_bytes(key[..4].try_into().expect("a slot"))
}

/// The count(DISTINCT)s over append-only input of one aggregate operator.
#[derive(Default)]
pub(super) struct Presence {
    arguments: Vec<Argument>,
}

impl Presence {
    /// Gather the aggregates kept by presence: those the planner gave a
    /// shared argument by it, the rest (views of earlier revisions) one
    /// argument each.
    pub(super) fn new(aggs: &[AggSpec]) -> Result<Presence> {
        let mut arguments: Vec<Argument> = Vec::new();
        for (a, spec) in aggs.iter().enumerate() {
            if spec.kind != AggKind::CountDistinct || !spec.append_only {
                continue;
            }
            let joins = |arg: &Argument| {
                arg.shared
                    && arg.aggs.len() < MASK_BITS
                    && matches!((&arg.value, &spec.presence), (Some(x), Some(y)) if **x == **y)
            };
            if let Some(argument) = arguments.iter_mut().find(|arg| joins(arg)) {
                argument.aggs.push(a);
                continue;
            }
            arguments.push(Argument {
                value: spec.presence.clone(),
                aggs: vec![a],
                shared: spec.presence.is_some(),
                converter: RowConverter::new(vec![SortField::new(spec.arg_type.clone())])?,
                gathered: ValueMap::default(),
            });
        }
        if arguments.len() > usize::from(u8::MAX) {
            return Err(Error::NotSupported(
                "more than 255 count(DISTINCT) arguments in one aggregate".into(),
            ));
        }
        Ok(Presence { arguments })
    }

    /// Gather a batch's values: `args` holds each aggregate's evaluated
    /// argument (FILTER applied), `slots` each row's group. Returns the
    /// bytes the new entries hold.
    pub(super) fn gather(
        &mut self,
        batch: &datafusion::arrow::array::RecordBatch,
        args: &[Option<ArrayRef>],
        slots: &[u32],
        errors: &mut RowErrors,
    ) -> Result<usize> {
        let mut bytes = 0;
        let mut key = Vec::new();
        for argument in &mut self.arguments {
            let values = match &argument.value {
                Some(value) => errors.evaluate(value, batch)?,
                None => argument_of(args, argument.aggs[0])?.clone(),
            };
            let rows = argument.converter.convert_columns(&[values])?;
            let valid: Vec<&ArrayRef> = argument
                .aggs
                .iter()
                .map(|a| argument_of(args, *a))
                .collect::<Result<_>>()?;
            for (row, slot) in slots.iter().enumerate() {
                let mask = valid
                    .iter()
                    .enumerate()
                    .filter(|(_, array)| array.is_valid(row))
                    .fold(0u64, |mask, (bit, _)| mask | 1 << bit);
                if mask == 0 {
                    continue;
                }
                key.clear();
                key.extend_from_slice(&slot.to_le_bytes());
                key.extend_from_slice(rows.row(row).data());
                let seen = argument
                    .gathered
                    .entry_ref(key.as_slice())
                    .or_insert_with(|| {
                        bytes += key.len() + ENTRY_OVERHEAD;
                        0
                    });
                *seen |= mask;
            }
        }
        Ok(bytes)
    }
}

impl std::fmt::Display for Presence {
    /// The shared arguments, as EXPLAIN shows them.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let shared: Vec<String> = self
            .arguments
            .iter()
            .filter_map(|arg| arg.value.as_ref())
            .map(|value| value.to_string())
            .collect();
        match shared.is_empty() {
            true => Ok(()),
            false => write!(f, " distinct values seen=[{}]", shared.join(", ")),
        }
    }
}

fn argument_of(args: &[Option<ArrayRef>], a: usize) -> Result<&ArrayRef> {
    args[a]
        .as_ref()
        .ok_or_else(|| Error::Internal("count(DISTINCT) without an argument".into()))
}

impl Aggregate {
    /// Check the gathered values against state: each bit a value gains
    /// counts once for its aggregate in the group. `last` writes past the
    /// epoch's ordered map (the barrier: nothing reads them back before the
    /// epoch commits).
    pub(super) fn settle_presence(&mut self, last: bool, cx: &mut Context<'_>) -> Result<()> {
        for at in 0..self.presence.arguments.len() {
            let gathered = std::mem::take(&mut self.presence.arguments[at].gathered);
            if gathered.is_empty() {
                continue;
            }
            let entries: Vec<(Vec<u8>, u64)> = gathered.into_iter().collect();
            let argument = &self.presence.arguments[at];
            let keys = self.presence_keys(at, &entries, cx);
            let stored = cx.state.get_many(&keys)?;
            let shared = argument.shared;
            let aggs = argument.aggs.clone();
            for (((key, mask), state_key), stored) in entries.iter().zip(&keys).zip(stored) {
                let slot = slot_of(key);
                let had = seen(stored.as_deref(), shared)?;
                let gained = *mask & !had;
                if gained == 0 {
                    continue;
                }
                let state = &mut self.groups_cache.get_mut(slot).state;
                for (bit, a) in aggs.iter().enumerate() {
                    state.slots[*a].count += i64::from(gained >> bit & 1 == 1);
                }
                let value = match shared {
                    true => (had | gained).to_be_bytes(),
                    false => 1i64.to_be_bytes(),
                };
                match last {
                    true => cx.state.write_last(&[state_key], Some(&value)),
                    false => cx.state.put(state_key.clone(), value.to_vec()),
                }
            }
        }
        Ok(())
    }

    /// The state keys of an argument's gathered values: one per value when
    /// shared, else its single aggregate's multiset key.
    fn presence_keys(
        &self,
        at: usize,
        entries: &[(Vec<u8>, u64)],
        cx: &Context<'_>,
    ) -> Vec<Vec<u8>> {
        let argument = &self.presence.arguments[at];
        let mut keys = Vec::with_capacity(entries.len());
        let mut last: Option<(u32, Vec<u8>)> = None;
        for (key, _) in entries {
            let slot = slot_of(key);
            let prefix = match &last {
                Some((at_slot, prefix)) if *at_slot == slot => prefix,
                _ => {
                    let prefix = argument.prefix(cx, at, &self.groups_cache.get(slot).key);
                    &last.insert((slot, prefix)).1
                }
            };
            keys.push([prefix.as_slice(), &key[4..]].concat());
        }
        keys
    }

    /// Delete what a group that went away had seen.
    pub(super) fn forget_presence(&mut self, group: &[u8], cx: &mut Context<'_>) -> Result<()> {
        for (at, argument) in self.presence.arguments.iter().enumerate() {
            let prefix = argument.prefix(cx, at, group);
            for (entry, _) in cx.state.scan(&prefix, &prefix_end(&prefix))? {
                cx.state.delete(entry);
            }
        }
        Ok(())
    }
}

fn presence_prefix(cx: &Context<'_>, argument: usize, group: &[u8]) -> Vec<u8> {
    let mut suffix = vec![b'p', argument as u8];
    suffix.extend_from_slice(&(group.len() as u32).to_be_bytes());
    suffix.extend_from_slice(group);
    cx.key(&suffix)
}

/// The bits a stored entry says were seen.
fn seen(stored: Option<&[u8]>, shared: bool) -> Result<u64> {
    let Some(bytes) = stored else {
        return Ok(0);
    };
    let raw: [u8; 8] = bytes
        .try_into()
        .map_err(|_| Error::Internal("bad count(DISTINCT) entry".into()))?;
    Ok(match shared {
        true => u64::from_be_bytes(raw),
        false => u64::from(i64::from_be_bytes(raw) > 0),
    })
}
