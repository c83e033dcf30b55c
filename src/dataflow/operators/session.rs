//! SESSION windows: per key, events closer than the gap share a window
//! `[first event, last event + gap)`.
//!
//! # Algorithm
//! The operator keeps every event of the sessions that are still open. A
//! batch's events are merged into their key's events and the key's sessions
//! recomputed; an event whose window changed (its session grew or merged
//! with another) is retracted with the old window and inserted with the
//! new, so the aggregate downstream only ever sees consistent windows. An
//! event whose session would already be final (its end at or below the
//! watermark), or that would have joined a session already final, is late:
//! dropped and recorded. When the watermark passes a session's end, its
//! events are deleted, and the key remembers where its final sessions end
//! until no event could reach them any more (the watermark passes that end
//! plus the gap). The input must be append-only.
//!
//! # State layout (under the operator's prefix)
//! - `e` ++ key length (u32 BE) ++ key ++ event time (8 bytes, ordered) ++
//!   row -> multiplicity (i64 LE)
//! - `x` ++ session end (8 bytes, ordered) ++ key length ++ key -> empty:
//!   which keys have a session ending when
//! - `c` ++ key length ++ key -> end of the key's last final session (i64 LE)
//! - `y` ++ that end plus the gap (8 bytes, ordered) ++ key length ++ key ->
//!   empty: when to forget it

use std::collections::BTreeMap;

use crate::dataflow::operators::FastMap;

use datafusion::arrow::array::{
    Array, ArrayRef, Int64Array, RecordBatch, TimestampMicrosecondArray,
};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::row::{RowConverter, SortField};

use crate::catalog::micros;
use crate::dataflow::change::{ChangeBatch, Watermark};
use crate::dataflow::operator::{Context, Operator};
use crate::dataflow::operators::window::record_late;
use crate::dataflow::state::read_count;
use crate::error::{Error, Result};
use crate::state::keys::{ordered, prefix_end};

pub struct SessionAssign {
    time_column: usize,
    gap: i64,
    /// Input columns whose values partition the sessions.
    keys: Vec<usize>,
    key_rows: RowConverter,
    rows: RowConverter,
    /// The input's schema with the two window columns.
    schema: SchemaRef,
    view: String,
    watermark: Option<i64>,
}

/// An event of one key: its time and row, and how often it occurred.
type Events = BTreeMap<(i64, Vec<u8>), i64>;

/// A time stored by [`ordered`] in a session key.
pub(crate) fn from_ordered(bytes: &[u8]) -> Result<i64> {
    let raw: [u8; 8] = bytes
        .get(..8)
        .and_then(|b| b.try_into().ok())
        .ok_or_else(|| Error::Internal("a session key is malformed".into()))?;
    Ok((u64::from_be_bytes(raw) ^ (1 << 63)) as i64)
}

/// `tag` ++ key length ++ key, under the operator's prefix.
pub(crate) fn key_prefix(cx: &Context<'_>, tag: &[u8], key: &[u8]) -> Vec<u8> {
    cx.key(&[tag, &(key.len() as u32).to_be_bytes()[..], key].concat())
}

/// Where a key's final sessions end (`c`), if it has had any lately.
pub(crate) fn final_end(cx: &Context<'_>, key: &[u8]) -> Result<Option<i64>> {
    cx.state
        .get(&key_prefix(cx, b"c", key))?
        .map(|bytes| read_count(&bytes))
        .transpose()
}

/// Record that a key's final sessions now end at `end` (they ended at
/// `previous`), to be forgotten once the watermark passes `end + gap`
/// (`y`): no event can reach them after that.
pub(crate) fn record_final_end(
    cx: &mut Context<'_>,
    key: &[u8],
    previous: Option<i64>,
    end: i64,
    gap: i64,
) {
    let forget_at = |cx: &Context<'_>, end: i64| {
        let at = ordered(end.saturating_add(gap));
        cx.key(&[b"y", &at[..], &(key.len() as u32).to_be_bytes(), key].concat())
    };
    if let Some(previous) = previous {
        cx.state.delete(forget_at(cx, previous));
    }
    cx.state.put(forget_at(cx, end), Vec::new());
    cx.state
        .put(key_prefix(cx, b"c", key), end.to_le_bytes().to_vec());
}

/// Forget the final ends no event can reach by `watermark`; the keys
/// whose ends were forgotten.
pub(crate) fn forget_final_ends(cx: &mut Context<'_>, watermark: i64) -> Result<Vec<Vec<u8>>> {
    let lower = cx.key(b"y");
    let upper = cx.key(&[b"y".as_slice(), &ordered(watermark.saturating_add(1))].concat());
    let mut keys = Vec::new();
    for (index, _) in cx.state.scan(&lower, &upper)? {
        cx.state.delete(index.clone());
        let key = index[lower.len() + 12..].to_vec();
        cx.state.delete(key_prefix(cx, b"c", &key));
        keys.push(key);
    }
    Ok(keys)
}

/// The session window of each of `times` (sorted), for a gap.
fn bounds(times: &[i64], gap: i64) -> Vec<(i64, i64)> {
    let mut out = vec![(0, 0); times.len()];
    let mut first = 0;
    for i in 0..=times.len() {
        let ends_run = i == times.len() || (i > 0 && times[i] >= times[i - 1] + gap);
        if ends_run && i > first {
            let window = (times[first], times[i - 1] + gap);
            out[first..i].fill(window);
            first = i;
        }
    }
    out
}

impl SessionAssign {
    pub fn new(
        input: &SchemaRef,
        time_column: usize,
        gap: i64,
        keys: Vec<usize>,
        schema: SchemaRef,
        view: String,
    ) -> Result<SessionAssign> {
        let field = |i: usize| SortField::new(input.field(i).data_type().clone());
        Ok(SessionAssign {
            key_rows: RowConverter::new(keys.iter().map(|k| field(*k)).collect())?,
            rows: RowConverter::new((0..input.fields().len()).map(field).collect())?,
            time_column,
            gap,
            keys,
            schema,
            view,
            watermark: None,
        })
    }

    fn close(&self, cx: &mut Context<'_>, key: &[u8], end: i64) -> Result<()> {
        let previous = final_end(cx, key)?;
        if previous < Some(end) {
            record_final_end(cx, key, previous, end, self.gap);
        }
        Ok(())
    }

    fn index_key(cx: &Context<'_>, end: i64, key: &[u8]) -> Vec<u8> {
        let mut suffix = b"x".to_vec();
        suffix.extend_from_slice(&ordered(end));
        suffix.extend_from_slice(&(key.len() as u32).to_be_bytes());
        suffix.extend_from_slice(key);
        cx.key(&suffix)
    }

    fn load(&self, cx: &Context<'_>, key: &[u8]) -> Result<Events> {
        let prefix = key_prefix(cx, b"e", key);
        let mut events = Events::new();
        for (k, v) in cx.state.scan(&prefix, &prefix_end(&prefix))? {
            let rest = &k[prefix.len()..];
            let time = from_ordered(rest)?;
            events.insert((time, rest[8..].to_vec()), read_count(&v)?);
        }
        Ok(events)
    }

    /// Each event's window, in the events' order.
    fn windows(&self, events: &Events) -> Vec<(i64, i64)> {
        let times: Vec<i64> = events.keys().map(|(t, _)| *t).collect();
        bounds(&times, self.gap)
    }

    /// Write a key's events and session index as they are now, given the
    /// events' windows before and after.
    fn store(
        &self,
        cx: &mut Context<'_>,
        key: &[u8],
        (before, before_windows): (&Events, &[(i64, i64)]),
        (after, after_windows): (&Events, &[(i64, i64)]),
    ) {
        let prefix = key_prefix(cx, b"e", key);
        let event_key =
            |(time, row): &(i64, Vec<u8>)| [prefix.as_slice(), &ordered(*time), row].concat();
        for event in before.keys().filter(|e| !after.contains_key(*e)) {
            cx.state.delete(event_key(event));
        }
        for (event, count) in after {
            if before.get(event) != Some(count) {
                cx.state.put(event_key(event), count.to_le_bytes().to_vec());
            }
        }
        let ends = |windows: &[(i64, i64)]| -> Vec<i64> {
            let mut ends: Vec<i64> = windows.iter().map(|w| w.1).collect();
            ends.dedup();
            ends
        };
        let (old, new) = (ends(before_windows), ends(after_windows));
        for end in old.iter().filter(|e| !new.contains(e)) {
            cx.state.delete(Self::index_key(cx, *end, key));
        }
        for end in new.iter().filter(|e| !old.contains(e)) {
            cx.state.put(Self::index_key(cx, *end, key), Vec::new());
        }
    }

    fn output(&self, out: Vec<(Vec<u8>, (i64, i64), i64)>) -> Result<ChangeBatch> {
        let parser = self.rows.parser();
        let mut columns: Vec<ArrayRef> = self
            .rows
            .convert_rows(out.iter().map(|(row, _, _)| parser.parse(row)))?;
        let time_type = self.schema.field(self.time_column).data_type();
        for pick in [|w: (i64, i64)| w.0, |w: (i64, i64)| w.1] {
            let values: TimestampMicrosecondArray =
                out.iter().map(|(_, w, _)| Some(pick(*w))).collect();
            columns.push(cast(&values, time_type)?);
        }
        let rows = RecordBatch::try_new(self.schema.clone(), columns)?;
        let diffs = Int64Array::from_iter_values(out.iter().map(|(_, _, d)| *d));
        ChangeBatch::new(rows, diffs)
    }
}

impl Operator for SessionAssign {
    fn name(&self) -> &'static str {
        "SessionAssign"
    }

    fn describe(&self) -> String {
        let keys: Vec<&str> = self
            .keys
            .iter()
            .map(|k| self.schema.field(*k).name().as_str())
            .collect();
        format!(
            "gap={}us on {} by [{}]",
            self.gap,
            self.schema.field(self.time_column).name(),
            keys.join(", ")
        )
    }

    fn on_changes(
        &mut self,
        _input: usize,
        batch: ChangeBatch,
        cx: &mut Context<'_>,
    ) -> Result<()> {
        let rows = batch.rows();
        let times = micros(rows.column(self.time_column))?;
        let key_columns: Vec<ArrayRef> =
            self.keys.iter().map(|k| rows.column(*k).clone()).collect();
        let keys = self.key_rows.convert_columns(&key_columns)?;
        let encoded = self.rows.convert_columns(rows.columns())?;
        let mut by_key: FastMap<&[u8], Vec<usize>> = FastMap::default();
        for i in 0..batch.len() {
            if !times.is_null(i) {
                // Without key columns every row shares the one (empty) key.
                let key = if self.keys.is_empty() {
                    &[][..]
                } else {
                    keys.row(i).data()
                };
                by_key.entry(key).or_default().push(i);
            }
        }
        let mut out = Vec::new();
        let mut late = Vec::new();
        for (key, members) in by_key {
            let before = self.load(cx, key)?;
            let mut after = before.clone();
            for i in &members {
                let event = (times.value(*i), encoded.row(*i).data().to_vec());
                *after.entry(event).or_insert(0) += batch.diffs().value(*i);
            }
            if let Some(watermark) = self.watermark {
                let closed = final_end(cx, key)?;
                let windows: FastMap<(i64, Vec<u8>), (i64, i64)> =
                    after.keys().cloned().zip(self.windows(&after)).collect();
                for i in &members {
                    let event = (times.value(*i), encoded.row(*i).data().to_vec());
                    let too_late = closed.is_some_and(|end| event.0 < end)
                        || windows.get(&event).is_some_and(|w| w.1 <= watermark);
                    if too_late {
                        late.push(*i as u32);
                        if let Some(count) = after.get_mut(&event) {
                            *count -= batch.diffs().value(*i);
                        }
                    }
                }
            }
            after.retain(|_, count| *count != 0);
            let before_windows = self.windows(&before);
            let after_windows = self.windows(&after);
            let old: FastMap<&(i64, Vec<u8>), (i64, i64)> =
                before.keys().zip(before_windows.iter().copied()).collect();
            for (event, window) in after.keys().zip(after_windows.iter().copied()) {
                let count = after[event];
                let had = before.get(event).copied().unwrap_or(0);
                match old.get(event) {
                    Some(previous) if *previous != window => {
                        out.push((event.1.clone(), *previous, -had));
                        out.push((event.1.clone(), window, count));
                    }
                    _ if count != had => out.push((event.1.clone(), window, count - had)),
                    _ => {}
                }
            }
            self.store(
                cx,
                key,
                (&before, &before_windows),
                (&after, &after_windows),
            );
        }
        if let Some(watermark) = self.watermark
            && !late.is_empty()
        {
            late.sort_unstable();
            record_late(&self.view, rows, &times, &late, watermark, cx)?;
        }
        if !out.is_empty() {
            cx.emit(self.output(out)?);
        }
        Ok(())
    }

    fn on_watermark(&mut self, wm: Watermark, cx: &mut Context<'_>) -> Result<Option<Watermark>> {
        self.watermark = self.watermark.max(Some(wm.micros));
        let lower = cx.key(b"x");
        let upper = cx.key(&[b"x".as_slice(), &ordered(wm.micros.saturating_add(1))].concat());
        for (index, _) in cx.state.scan(&lower, &upper)? {
            cx.state.delete(index.clone());
            let key = index[lower.len() + 12..].to_vec();
            let before = self.load(cx, &key)?;
            let mut after = before.clone();
            let mut last_end = None;
            let before_windows = self.windows(&before);
            let mut after_windows = Vec::new();
            for (event, window) in before.keys().zip(before_windows.iter().copied()) {
                if window.1 <= wm.micros {
                    after.remove(event);
                    last_end = last_end.max(Some(window.1));
                } else {
                    after_windows.push(window);
                }
            }
            self.store(
                cx,
                &key,
                (&before, &before_windows),
                (&after, &after_windows),
            );
            if let Some(end) = last_end {
                self.close(cx, &key, end)?;
            }
        }
        // Final sessions no event can reach any more are forgotten.
        forget_final_ends(cx, wm.micros)?;
        Ok(Some(wm))
    }
}

#[cfg(test)]
mod tests {
    use super::bounds;

    #[test]
    fn events_closer_than_the_gap_share_a_session() {
        assert_eq!(
            bounds(&[1, 3, 10, 20, 24], 5),
            vec![(1, 8), (1, 8), (10, 15), (20, 29), (20, 29)]
        );
        assert!(bounds(&[], 5).is_empty());
    }

    #[test]
    fn session_state_stays_bounded_on_an_endless_stream() {
        use std::sync::Arc;

        use datafusion::arrow::array::{RecordBatch, StringArray, TimestampMicrosecondArray};
        use datafusion::arrow::datatypes::{DataType, Field, Schema};

        use super::*;
        use crate::dataflow::change::Barrier;
        use crate::dataflow::state::EpochState;
        use crate::state::Store;

        let dir = tempfile::tempdir().expect("tempdir");
        let store = Store::open(dir.path()).expect("store");
        let time = crate::dataflow::window::timestamp_type();
        let input = Arc::new(Schema::new(vec![
            Field::new("k", DataType::Utf8, true),
            Field::new("ts", time.clone(), true),
        ]));
        let output = Arc::new(Schema::new(vec![
            Field::new("k", DataType::Utf8, true),
            Field::new("ts", time.clone(), true),
            Field::new("window_start", time.clone(), true),
            Field::new("window_end", time, true),
        ]));
        let mut op =
            SessionAssign::new(&input, 1, 10, vec![0], output, "v".into()).expect("operator");
        let mut most = 0;
        let mut inserted = 0i64;
        for step in 1..=200i64 {
            // Two events a key, 3 apart: one session a key and step.
            let keys: Vec<String> = (0..20).map(|i| format!("k{}", i % 10)).collect();
            let times: Vec<i64> = (0..20).map(|i| step * 100 + (i / 10) * 3).collect();
            let rows = RecordBatch::try_new(
                input.clone(),
                vec![
                    Arc::new(StringArray::from(keys)),
                    Arc::new(TimestampMicrosecondArray::from(times)),
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
                    micros: step * 100 - 50,
                },
                &mut cx,
            )
            .expect("watermark");
            op.on_barrier(Barrier { epoch: 1, now: 0 }, &mut cx)
                .expect("barrier");
            for batch in cx.take_output() {
                inserted += batch.diffs().values().iter().sum::<i64>();
            }
            let mut batch = rocksdb::WriteBatch::default();
            state.drain_into(&mut batch);
            store.db().write(batch).expect("commit");
            most = most.max(store.state_entries(b"test"));
        }
        assert_eq!(inserted, 200 * 20);
        // The open sessions' events and index, plus the ends just closed.
        assert!(most <= 60, "state grew to {most} entries");
    }
}
