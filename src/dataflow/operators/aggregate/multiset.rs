//! Multisets: min, max and count(DISTINCT) over input that retracts keep
//! every value of a group with its multiplicity, so that a deleted minimum
//! is replaced by the next one instead of recomputing the group.

use super::groups::Group;
use super::input::native_extreme;
use super::{AggKind, Aggregate};
use crate::dataflow::operator::Context;
use crate::error::{Error, Result};
use crate::state::keys::prefix_end;

impl Aggregate {
    /// Delete a group's multisets.
    pub(super) fn forget_values(&self, group: &[u8], cx: &mut Context<'_>) -> Result<()> {
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
    pub(super) fn apply_multisets(&mut self, cx: &mut Context<'_>) -> Result<()> {
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
    pub(super) fn resolve_extremes(&self, group: &mut Group, cx: &Context<'_>) -> Result<()> {
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
}
