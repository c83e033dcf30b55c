//! Multisets: min, max and count(DISTINCT) over input that retracts keep
//! every value of a group with its multiplicity, so that a deleted minimum
//! is replaced by the next one instead of recomputing the group.

use super::groups::Group;
use super::input::native_extreme;
use super::{AggKind, Aggregate, FastMap};
use crate::dataflow::operator::Context;
use crate::error::{Error, Result};
use crate::state::keys::prefix_end;

/// An aggregate and a group's key.
type GroupOf = (usize, Vec<u8>);
/// Values of a multiset and their multiplicities (or changes to them).
type Values = FastMap<Vec<u8>, i64>;

/// A count(DISTINCT) value's multiplicity held until the barrier, and
/// whether the epoch changed it, so that state is written only then.
#[derive(Debug, Clone, Copy)]
pub(super) struct Held {
    count: i64,
    changed: bool,
}

/// A multiset value's multiplicity, kept as an `i64` big-endian.
fn multiplicity(bytes: &[u8]) -> Result<i64> {
    let raw: [u8; 8] = bytes
        .try_into()
        .map_err(|_| Error::Internal("bad multiplicity".into()))?;
    Ok(i64::from_be_bytes(raw))
}

impl Aggregate {
    /// Delete a group's multisets.
    pub(super) fn forget_values(&mut self, group: &[u8], cx: &mut Context<'_>) -> Result<()> {
        for (agg, spec) in self.aggs.iter().enumerate() {
            // Over append-only input min and max keep no multiset, and
            // count(DISTINCT) keeps its values by `presence`.
            if self.values[agg].is_none() || spec.append_only {
                continue;
            }
            self.distinct.remove(&(agg, group.to_vec()));
            let prefix = Self::multiset_prefix(cx, agg, group);
            for (entry, _) in cx.state.scan(&prefix, &prefix_end(&prefix))? {
                cx.state.delete(entry);
            }
        }
        self.forget_presence(group, cx)
    }

    /// Fold this epoch's multiset changes into state; count(DISTINCT) counts
    /// values whose multiplicity crosses zero.
    pub(super) fn apply_multisets(&mut self, cx: &mut Context<'_>) -> Result<()> {
        let mut distinct = Vec::new();
        for ((agg, group), values) in std::mem::take(&mut self.multiset) {
            if self.aggs[agg].kind == AggKind::CountDistinct {
                distinct.push(((agg, group), values));
                continue;
            }
            let prefix = Self::multiset_prefix(cx, agg, &group);
            for (value, delta) in values {
                if delta == 0 {
                    continue;
                }
                let key = [prefix.as_slice(), &value].concat();
                let old = match cx.state.get(&key)? {
                    Some(bytes) => multiplicity(&bytes)?,
                    None => 0,
                };
                match old + delta {
                    0 => cx.state.delete(key),
                    new => cx.state.put(key, new.to_be_bytes().to_vec()),
                }
            }
        }
        self.apply_distinct(distinct, cx)
    }

    /// count(DISTINCT)'s values: their multiplicities held in memory for
    /// the rest of the epoch and written as it ends, the stored ones read
    /// in one batch. Nothing reads a count(DISTINCT) multiset by range,
    /// so it need not go through the epoch's ordered writes.
    fn apply_distinct(
        &mut self,
        changes: Vec<(GroupOf, Values)>,
        cx: &mut Context<'_>,
    ) -> Result<()> {
        let mut keys: Vec<Vec<u8>> = Vec::new();
        let mut wanted: Vec<(usize, &[u8])> = Vec::new();
        for (c, (of, values)) in changes.iter().enumerate() {
            let prefix = Self::multiset_prefix(cx, of.0, &of.1);
            let held = self.distinct.get(of);
            for value in values.keys() {
                if held.is_none_or(|held| !held.contains_key(value)) {
                    keys.push([prefix.as_slice(), value].concat());
                    wanted.push((c, value));
                }
            }
        }
        let mut stored: Vec<FastMap<Vec<u8>, i64>> = vec![FastMap::default(); changes.len()];
        for ((c, value), bytes) in wanted.into_iter().zip(cx.state.get_many(&keys)?) {
            let count = bytes.as_deref().map_or(Ok(0), multiplicity)?;
            stored[c].insert(value.to_vec(), count);
        }
        for (((agg, group), values), mut stored) in changes.into_iter().zip(stored) {
            let held = self.distinct.entry((agg, group.clone())).or_default();
            let mut crossed = 0;
            for (value, delta) in values {
                let before = match held.get(&value) {
                    Some(before) => *before,
                    // Its memory was counted when the change was folded in.
                    None => {
                        let count = stored.remove(&value).unwrap_or(0);
                        Held {
                            count,
                            changed: false,
                        }
                    }
                };
                let old = before.count;
                let new = old + delta;
                let changed = before.changed || new != old;
                held.insert(
                    value,
                    Held {
                        count: new,
                        changed,
                    },
                );
                crossed += i64::from(new > 0) - i64::from(old > 0);
            }
            if crossed != 0 {
                let slot = self.slot(&group, cx)?;
                self.groups_cache.get_mut(slot).state.slots[agg].count += crossed;
            }
        }
        Ok(())
    }

    /// Write the epoch's count(DISTINCT) multiplicities, as it ends.
    pub(super) fn write_distinct(&mut self, cx: &mut Context<'_>) {
        for ((agg, group), values) in std::mem::take(&mut self.distinct) {
            let prefix = Self::multiset_prefix(cx, agg, &group);
            for (value, held) in values.into_iter().filter(|(_, held)| held.changed) {
                let bytes = held.count.to_be_bytes();
                let value_bytes = (held.count != 0).then_some(&bytes[..]);
                cx.state.write_last(&[&prefix, &value], value_bytes);
            }
        }
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
