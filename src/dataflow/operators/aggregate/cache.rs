//! Finding a row's group: its key, its place in the cache, and a read of
//! state only when the horizon cannot rule out that state holds it.

use std::sync::Arc;

use datafusion::arrow::array::{ArrayRef, Int64Array};
use datafusion::arrow::row::Rows;

use super::Aggregate;
use super::codec::GroupState;
use super::groups::{Group, Horizon};
use crate::dataflow::operator::Context;
use crate::error::Result;
use crate::state::keys::prefix_end;

impl Aggregate {
    /// Group keys of a batch's rows; windowed keys lead with the window's
    /// closing time, so that keys sort by it. `None` without GROUP BY.
    pub(super) fn batch_keys(&self, group_columns: &[ArrayRef]) -> Result<Option<Rows>> {
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

    /// Touch a group: its place in the cache, loaded from state if missing.
    pub(super) fn slot(&mut self, group: &[u8], cx: &Context<'_>) -> Result<u32> {
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
    pub(super) fn close_of(&self, key: &[u8]) -> i64 {
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
    pub(super) fn horizon(&mut self, cx: &Context<'_>) -> Result<&Horizon> {
        if self.horizon == Horizon::Unknown {
            let lower = cx.key(b"g");
            self.horizon = match cx.state.first_in(&lower, &prefix_end(&lower), true)? {
                None => Horizon::All,
                Some((key, _)) => Horizon::Above(key[lower.len()..].to_vec()),
            };
        }
        Ok(&self.horizon)
    }
}
