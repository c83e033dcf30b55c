//! Closing windows: once the watermark passes a window's end, its groups
//! emit their final rows (under `EMIT ON WINDOW CLOSE`, their only ones)
//! and their state is deleted, whether they were in memory or in state.

use std::sync::Arc;

use datafusion::arrow::array::{ArrayRef, Int64Array};
use datafusion::arrow::datatypes::DataType;
use datafusion::arrow::row::{RowConverter, SortField};

use super::Aggregate;
use super::codec::{GroupState, write_group};
use super::groups::{Group, Groups, Horizon};
use super::output::{Changes, Fate, Held};
use crate::dataflow::operator::Context;
use crate::error::Result;

impl Aggregate {
    /// The smallest key of a group whose window closes after `watermark`.
    fn close_bound(watermark: i64) -> Result<Vec<u8>> {
        let converter = RowConverter::new(vec![SortField::new(DataType::Int64)])?;
        let bound: ArrayRef = Arc::new(Int64Array::from(vec![watermark.saturating_add(1)]));
        let rows = converter.convert_columns(&[bound])?;
        Ok(rows.row(0).data().to_vec())
    }

    /// Close at once the groups whose window was already final when their
    /// rows came. Only the slices of a sliced HOP get such rows (a row late
    /// for its slice but not for every window over it); each goes on as a
    /// partial row of its own, which the windows still open add up.
    pub(super) fn close_late(&mut self, cx: &mut Context<'_>) -> Result<()> {
        match self.closed_to {
            Some(watermark) if self.on_close && self.groups_cache.closes_by(watermark) => {
                self.close_windows(watermark, cx)
            }
            _ => Ok(()),
        }
    }

    /// Settle the groups whose window the watermark has reached: those in
    /// state alone, then the ones in memory.
    pub(super) fn close_windows(&mut self, watermark: i64, cx: &mut Context<'_>) -> Result<()> {
        self.settle_presence(false, cx)?;
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
        &mut self,
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
