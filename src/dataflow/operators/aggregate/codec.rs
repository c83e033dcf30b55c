//! How a group is kept in state: its running state encoded beside the row
//! it last emitted, under `g` ++ group key, and its multisets under `m`.

use super::Aggregate;
use super::groups::Group;
use crate::dataflow::operator::Context;
use crate::error::{Error, Result};

/// Running state of one group: its row count and one slot per aggregate,
/// in one allocation so that updating a group touches one place in memory.
/// The slot of a single aggregate is held inline: a windowed view opens a
/// group for every key in every window, and a second allocation for each
/// cost as much as finding the group. More inline slots would make every
/// group larger to move when its window closes.
#[derive(Debug, Clone, Default, PartialEq)]
pub(super) struct GroupState {
    pub rows: i64,
    pub slots: smallvec::SmallVec<[Slot; 1]>,
}

/// One aggregate's running state in one group.
#[derive(Debug, Clone, Default, PartialEq)]
pub(super) struct Slot {
    /// Non-null inputs (count, sum, avg, min, max) or distinct values.
    pub count: i64,
    /// Exact sum of integer or decimal inputs.
    pub int_sum: i128,
    /// Sum of floating-point inputs.
    pub float_sum: f64,
    /// Min or max over append-only input (row format), kept without a
    /// multiset since nothing is ever retracted; or an accumulator's state
    /// (row format).
    pub extreme: Option<Vec<u8>>,
}

impl GroupState {
    pub(super) fn new(aggs: usize) -> GroupState {
        GroupState {
            rows: 0,
            slots: smallvec::smallvec![Slot::default(); aggs],
        }
    }

    pub(super) fn encode(&self, emitted: Option<&[u8]>) -> Vec<u8> {
        let mut out = Vec::with_capacity(8 + self.slots.len() * 32);
        self.encode_into(emitted, &mut out);
        out
    }

    pub(super) fn encode_into(&self, emitted: Option<&[u8]>, out: &mut Vec<u8>) {
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
    pub(super) fn decode(bytes: &[u8], aggs: usize) -> Result<(GroupState, Option<Vec<u8>>)> {
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

impl Aggregate {
    pub(super) fn group_key(cx: &Context<'_>, group: &[u8]) -> Vec<u8> {
        cx.key(&[b"g".as_slice(), group].concat())
    }

    pub(super) fn multiset_prefix(cx: &Context<'_>, agg: usize, group: &[u8]) -> Vec<u8> {
        let mut suffix = vec![b'm', agg as u8];
        suffix.extend_from_slice(&(group.len() as u32).to_be_bytes());
        suffix.extend_from_slice(group);
        cx.key(&suffix)
    }
}

/// Write a group back (`None` deletes it); `last` writes past the
/// ordered map, for writes nothing reads before the epoch commits. A group
/// that never reached state needs no delete.
pub(super) fn write_group(
    cx: &mut Context<'_>,
    group: &mut Group,
    value: Option<&[u8]>,
    last: bool,
) {
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
