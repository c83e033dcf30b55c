//! GROUP BY over SESSION windows of an append-only input, kept per session.
//!
//! # Algorithm
//! Each key's open sessions are held with their running aggregate state
//! (the [`GroupState`] the aggregate operator keeps per group). An event
//! joins the session it falls within the gap of; an event within the gap of
//! two sessions merges them, their states added together. So a session
//! that grows costs one state update an event, where assigning every event
//! its window first would retract and re-send all of the session's events
//! each time it grew. At a barrier every touched session's row is emitted
//! against the one it last emitted (nothing under `EMIT ON WINDOW CLOSE`),
//! a session merged away is retracted, and the sessions are written back.
//!
//! When the watermark reaches a session's end (its last event plus the
//! gap) the session is final: under `EMIT ON WINDOW CLOSE` its row is
//! emitted then, and its state is deleted. Lateness is judged as
//! [`SessionAssign`](crate::dataflow::operators::SessionAssign) judges it:
//! an event that would open a session already final, or join one, is late,
//! dropped and recorded. Only count, sum, avg, min and max are kept here:
//! they merge by adding counts and sums and keeping the extreme.
//!
//! Open sessions are held in memory, up to [`CACHE_SESSIONS`]; beyond that
//! the whole cache is dropped after a barrier and keys are read back from
//! state as their events arrive.
//!
//! # State layout (under the operator's prefix)
//! - `s` ++ key length (u32 BE) ++ key ++ session start (8 bytes, ordered)
//!   -> last event time (i64 LE) ++ [`GroupState`] ++ the row last emitted
//! - `x` ++ session end (ordered) ++ key length ++ key ++ start (ordered) ->
//!   empty: which sessions end when
//! - `c` ++ key length ++ key -> end of the key's last final session (i64 LE)
//! - `y` ++ that end plus the gap (ordered) ++ key length ++ key -> empty:
//!   when to forget it

use std::collections::BTreeMap;
use std::sync::Arc;

use datafusion::arrow::array::{
    Array, ArrayRef, BooleanArray, Int64Array, TimestampMicrosecondArray, UInt32Array,
};
use datafusion::arrow::compute::{cast, filter, filter_record_batch, take_arrays};
use datafusion::arrow::datatypes::{Schema, SchemaRef};
use datafusion::arrow::row::{RowConverter, Rows, SortField};

use super::codec::GroupState;
use super::groups::GroupKey;
use super::input::{Input, States, keep_extreme, native_extreme};
use super::output::{Changes, changes_of};
use super::{AggKind, AggSpec, Aggregate, FastMap};
use crate::catalog::micros;
use crate::dataflow::change::{ChangeBatch, Watermark};
use crate::dataflow::operator::{Context, Operator};
use crate::dataflow::operators::session::{
    final_end, forget_final_ends, from_ordered, key_prefix, record_final_end,
};
use crate::dataflow::operators::window::record_late;
use crate::dataflow::state::read_count;
use crate::error::{Error, Result};
use crate::state::keys::{ordered, prefix_end};

/// Open sessions kept in memory; beyond this the cache is dropped.
pub const CACHE_SESSIONS: usize = 200_000;

/// What one output column of the group holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SessionColumn {
    /// The n-th key column.
    Key(usize),
    Start,
    End,
}

pub struct SessionAggregate {
    time_column: usize,
    gap: i64,
    /// Input columns whose values partition the sessions.
    keys: Vec<usize>,
    key_rows: RowConverter,
    /// The output's group columns, in order; the aggregates follow.
    layout: Vec<SessionColumn>,
    /// A global aggregate over the same aggregates: it builds their columns.
    totals: Aggregate,
    schema: SchemaRef,
    nullable_schema: SchemaRef,
    output: RowConverter,
    on_close: bool,
    view: String,
    watermark: Option<i64>,
    cache_limit: usize,
    sessions: Sessions,
    by_key: FastMap<GroupKey, KeySessions>,
    /// Session positions by the end they had when filed; a session that
    /// grew since is filed again when its old end comes up.
    by_close: BTreeMap<i64, Vec<u32>>,
    dirty: Vec<u32>,
    known: Known,
}

/// Which stored sessions memory holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Known {
    /// Not looked at yet.
    Unknown,
    /// All of them: a key missing from memory has none.
    All,
    /// Those of the keys in memory.
    Some,
}

struct Session {
    key: GroupKey,
    start: i64,
    last: i64,
    state: GroupState,
    emitted: Option<Vec<u8>>,
    /// The start and end state holds it under, once written.
    stored: Option<(i64, i64)>,
    dirty: bool,
    /// Where it is filed in `by_close`.
    filed: i64,
    /// Merged into that session: its rows count there, and its own row
    /// is retracted at the barrier.
    merged_into: Option<u32>,
}

#[derive(Default)]
struct KeySessions {
    /// Positions of the key's open sessions.
    open: smallvec::SmallVec<[u32; 2]>,
    /// End of the key's last final session, while an event could reach it.
    closed: Option<i64>,
}

#[derive(Default)]
struct Sessions {
    slab: Vec<Option<Session>>,
    free: Vec<u32>,
}

impl Session {
    /// The session's end: its last event plus the gap.
    fn end(&self, gap: i64) -> i64 {
        self.last.saturating_add(gap)
    }
}

impl Sessions {
    fn get(&self, at: u32) -> &Session {
        self.slab[at as usize].as_ref().expect("live session")
    }

    fn get_mut(&mut self, at: u32) -> &mut Session {
        self.slab[at as usize].as_mut().expect("live session")
    }

    fn find(&self, at: u32) -> Option<&Session> {
        self.slab.get(at as usize).and_then(Option::as_ref)
    }

    fn insert(&mut self, session: Session) -> u32 {
        match self.free.pop() {
            Some(at) => {
                self.slab[at as usize] = Some(session);
                at
            }
            None => {
                self.slab.push(Some(session));
                (self.slab.len() - 1) as u32
            }
        }
    }

    fn remove(&mut self, at: u32) -> Option<Session> {
        let session = self.slab[at as usize].take();
        if session.is_some() {
            self.free.push(at);
        }
        session
    }

    fn len(&self) -> usize {
        self.slab.len() - self.free.len()
    }

    /// The session a row placed in `at` counts in, after merges.
    fn resolve(&self, mut at: u32) -> u32 {
        while let Some(next) = self.get(at).merged_into {
            at = next;
        }
        at
    }
}

impl States for Sessions {
    fn state_mut(&mut self, at: u32) -> &mut GroupState {
        &mut self.get_mut(at).state
    }
}

/// Where an event goes.
enum Place {
    In(u32),
    /// Nothing open takes it and a session of its own would be final; the
    /// batch's other events may yet open one it joins.
    Wait,
    Late,
}

/// Add one session's state to another's.
fn merge(into: &mut GroupState, from: &GroupState, aggs: &[AggSpec]) {
    into.rows += from.rows;
    for (a, spec) in aggs.iter().enumerate() {
        let (to, from) = (&mut into.slots[a], &from.slots[a]);
        match spec.kind {
            AggKind::Min | AggKind::Max if native_extreme(spec) => {
                let max = spec.kind == AggKind::Max;
                let better = to.count == 0
                    || (max && from.int_sum > to.int_sum)
                    || (!max && from.int_sum < to.int_sum);
                if from.count > 0 && better {
                    to.int_sum = from.int_sum;
                }
                to.count += from.count;
            }
            AggKind::Min | AggKind::Max => {
                if let Some(value) = &from.extreme {
                    keep_extreme(&mut to.extreme, value, spec.kind);
                }
                to.count += from.count;
            }
            _ => {
                to.count += from.count;
                to.int_sum += from.int_sum;
                to.float_sum += from.float_sum;
            }
        }
    }
}

fn key_part(key: &[u8]) -> [u8; 4] {
    (key.len() as u32).to_be_bytes()
}

impl SessionAggregate {
    /// `keys` and `time_column` index the input; `layout` says what each
    /// group column of `schema` holds; `aggs` read the input's rows.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        input: &SchemaRef,
        time_column: usize,
        gap: i64,
        keys: Vec<usize>,
        layout: Vec<SessionColumn>,
        aggs: Vec<AggSpec>,
        schema: SchemaRef,
        view: String,
    ) -> Result<SessionAggregate> {
        let field = |i: usize| SortField::new(input.field(i).data_type().clone());
        let aggregates = Schema::new(schema.fields()[layout.len()..].to_vec());
        Ok(SessionAggregate {
            key_rows: RowConverter::new(keys.iter().map(|k| field(*k)).collect())?,
            totals: Aggregate::new(Vec::new(), Vec::new(), aggs, Arc::new(aggregates))?,
            output: crate::dataflow::operators::over::converter(&schema)?,
            nullable_schema: crate::catalog::nullable(&schema),
            schema,
            time_column,
            gap,
            keys,
            layout,
            on_close: false,
            view,
            watermark: None,
            cache_limit: CACHE_SESSIONS,
            sessions: Sessions::default(),
            by_key: FastMap::default(),
            by_close: BTreeMap::new(),
            dirty: Vec::new(),
            known: Known::Unknown,
        })
    }

    /// Hold each session's row back until the watermark passes its end.
    pub fn emitting_on_close(mut self) -> SessionAggregate {
        self.on_close = true;
        self
    }

    #[cfg(test)]
    fn with_cache_limit(mut self, limit: usize) -> SessionAggregate {
        self.cache_limit = limit;
        self
    }

    fn aggs(&self) -> &[AggSpec] {
        &self.totals.aggs
    }

    fn session_key(cx: &Context<'_>, key: &[u8], start: i64) -> Vec<u8> {
        cx.key(&[b"s", &key_part(key)[..], key, &ordered(start)].concat())
    }

    fn end_key(cx: &Context<'_>, end: i64, key: &[u8], start: i64) -> Vec<u8> {
        cx.key(
            &[
                b"x",
                &ordered(end)[..],
                &key_part(key),
                key,
                &ordered(start),
            ]
            .concat(),
        )
    }

    /// Place a batch's rows in sessions: each row's session, or `u32::MAX`
    /// for a row that is late or has no time; and the late rows.
    fn place_rows(
        &mut self,
        times: &Int64Array,
        keys: Option<&Rows>,
        cx: &mut Context<'_>,
    ) -> Result<(Vec<u32>, Vec<u32>)> {
        let mut slots = vec![u32::MAX; times.len()];
        let mut waiting = Vec::new();
        let mut late = Vec::new();
        for (row, slot) in slots.iter_mut().enumerate() {
            if times.is_null(row) {
                continue;
            }
            let key = keys.map_or(&[][..], |k| k.row(row).data());
            match self.place(key, times.value(row), false, cx)? {
                Place::In(at) => *slot = at,
                Place::Wait => waiting.push(row),
                Place::Late => late.push(row as u32),
            }
        }
        for row in waiting {
            let key = keys.map_or(&[][..], |k| k.row(row).data());
            match self.place(key, times.value(row), true, cx)? {
                Place::In(at) => slots[row] = at,
                _ => late.push(row as u32),
            }
        }
        late.sort_unstable();
        Ok((slots, late))
    }

    /// The session an event at `time` of `key` joins, opening or merging
    /// sessions as needed; `last_try` opens none that would be final.
    fn place(&mut self, key: &[u8], time: i64, last_try: bool, cx: &Context<'_>) -> Result<Place> {
        if !self.by_key.contains_key(key) {
            self.load(key, cx)?;
        }
        let gap = self.gap;
        let entry = self.by_key.get_mut(key).expect("loaded above");
        if entry.closed.is_some_and(|end| time < end) {
            return Ok(Place::Late);
        }
        let sessions = &mut self.sessions;
        let touching: smallvec::SmallVec<[u32; 2]> = entry
            .open
            .iter()
            .copied()
            .filter(|at| {
                let s = sessions.get(*at);
                time.saturating_add(gap) > s.start && time < s.end(gap)
            })
            .collect();
        let Some((&first, others)) = touching.split_first() else {
            if self
                .watermark
                .is_some_and(|wm| time.saturating_add(gap) <= wm)
            {
                return Ok(if last_try { Place::Late } else { Place::Wait });
            }
            let at = sessions.insert(Session {
                key: GroupKey::from_slice(key),
                start: time,
                last: time,
                state: GroupState::new(self.totals.aggs.len()),
                emitted: None,
                stored: None,
                dirty: false,
                filed: time.saturating_add(gap),
                merged_into: None,
            });
            entry.open.push(at);
            self.by_close
                .entry(time.saturating_add(gap))
                .or_default()
                .push(at);
            mark(sessions, &mut self.dirty, at);
            return Ok(Place::In(at));
        };
        for other in others {
            let gone = std::mem::take(&mut sessions.get_mut(*other).state);
            let (start, last) = (sessions.get(*other).start, sessions.get(*other).last);
            let into = sessions.get_mut(first);
            merge(&mut into.state, &gone, &self.totals.aggs);
            into.start = into.start.min(start);
            into.last = into.last.max(last);
            sessions.get_mut(*other).merged_into = Some(first);
            mark(sessions, &mut self.dirty, *other);
        }
        entry.open.retain(|at| !others.contains(at));
        let session = sessions.get_mut(first);
        session.start = session.start.min(time);
        session.last = session.last.max(time);
        mark(sessions, &mut self.dirty, first);
        Ok(Place::In(first))
    }

    /// Bring a key's stored sessions into memory.
    fn load(&mut self, key: &[u8], cx: &Context<'_>) -> Result<()> {
        if self.known == Known::Unknown {
            let all = cx.key(b"");
            let stored = cx.state.first_in(&all, &prefix_end(&all), false)?;
            self.known = if stored.is_some() {
                Known::Some
            } else {
                Known::All
            };
        }
        let mut entry = KeySessions::default();
        if self.known == Known::Some {
            let prefix = key_prefix(cx, b"s", key);
            for (stored, value) in cx.state.scan(&prefix, &prefix_end(&prefix))? {
                let start = from_ordered(&stored[prefix.len()..])?;
                let last = read_count(value.get(..8).unwrap_or_default())?;
                let (state, emitted) = GroupState::decode(&value[8..], self.aggs().len())?;
                let end = last.saturating_add(self.gap);
                let at = self.sessions.insert(Session {
                    key: GroupKey::from_slice(key),
                    start,
                    last,
                    state,
                    emitted,
                    stored: Some((start, end)),
                    dirty: false,
                    filed: end,
                    merged_into: None,
                });
                self.by_close.entry(end).or_default().push(at);
                entry.open.push(at);
            }
            entry.closed = final_end(cx, key)?;
        }
        self.by_key.insert(GroupKey::from_slice(key), entry);
        Ok(())
    }

    /// Fold the placed rows of a batch into their sessions.
    fn fold(&mut self, batch: &ChangeBatch, slots: &[u32], cx: &mut Context<'_>) -> Result<()> {
        let slots: Vec<u32> = slots.iter().map(|at| self.sessions.resolve(*at)).collect();
        let diffs = batch.diffs().values();
        for (at, diff) in slots.iter().zip(diffs) {
            self.sessions.get_mut(*at).state.rows += diff;
        }
        for (a, spec) in self.totals.aggs.iter().enumerate() {
            let Some(arg) = &spec.arg else { continue };
            let arg = cx.state.errors.evaluate(arg, batch.rows())?;
            let input = Input::prepare(spec, Some(&arg), self.totals.values[a].as_ref())?;
            input.apply(a, &slots, diffs, &mut self.sessions);
        }
        Ok(())
    }

    /// The output rows of sessions, as columns.
    fn columns(&self, which: &[u32]) -> Result<Vec<ArrayRef>> {
        let sessions: Vec<&Session> = which.iter().map(|at| self.sessions.get(*at)).collect();
        let keys = if self.keys.is_empty() {
            Vec::new()
        } else {
            let parser = self.key_rows.parser();
            self.key_rows
                .convert_rows(sessions.iter().map(|s| parser.parse(&s.key)))?
        };
        let bound = |end: bool| -> ArrayRef {
            let values: TimestampMicrosecondArray = sessions
                .iter()
                .map(|s| Some(if end { s.end(self.gap) } else { s.start }))
                .collect();
            Arc::new(values)
        };
        let mut columns = Vec::with_capacity(self.schema.fields().len());
        for (i, column) in self.layout.iter().enumerate() {
            let values = match column {
                SessionColumn::Key(k) => keys[*k].clone(),
                SessionColumn::Start => bound(false),
                SessionColumn::End => bound(true),
            };
            let target = self.schema.field(i).data_type();
            columns.push(match values.data_type() == target {
                true => values,
                false => cast(&values, target)?,
            });
        }
        let states = sessions.iter().map(|s| (&[][..], &s.state));
        columns.extend(self.totals.output_columns(states)?);
        Ok(columns)
    }

    /// Emit the rows of settled sessions against those they last emitted,
    /// and write them back (unless `closing`: their state goes).
    fn emit_rows(
        &mut self,
        which: &[u32],
        closing: bool,
        out: &mut Changes,
        cx: &mut Context<'_>,
    ) -> Result<()> {
        if which.is_empty() {
            return Ok(());
        }
        let columns = self.columns(which)?;
        let rows = self.output.convert_columns(&columns)?;
        let mut changed = Vec::new();
        for (i, at) in which.iter().enumerate() {
            let session = self.sessions.get_mut(*at);
            let row = rows.row(i).data();
            if session.emitted.as_deref() != Some(row) {
                out.retract.extend(session.emitted.take());
                session.emitted = Some(row.to_vec());
                changed.push(i as u32);
            }
            if !closing {
                self.write(*at, cx);
            }
        }
        if !changed.is_empty() {
            let changed = UInt32Array::from(changed);
            out.insert.push(take_arrays(&columns, &changed, None)?);
        }
        Ok(())
    }

    /// Write a session back as it is now, as the epoch ends.
    fn write(&mut self, at: u32, cx: &mut Context<'_>) {
        let gap = self.gap;
        let session = self.sessions.get_mut(at);
        let end = session.end(gap);
        let key = &session.key;
        let moved = session
            .stored
            .filter(|stored| *stored != (session.start, end));
        if let Some(stored) = moved {
            // The new start's entry overwrites the old one if it stays.
            Self::unstore(cx, key, stored, stored.0 != session.start);
        }
        if moved.is_some() || session.stored.is_none() {
            let index = Self::end_key(cx, end, key, session.start);
            cx.state.write_last(&[&index], Some(&[]));
        }
        let mut value = session.last.to_le_bytes().to_vec();
        session
            .state
            .encode_into(session.emitted.as_deref(), &mut value);
        let stored = Self::session_key(cx, key, session.start);
        cx.state.write_last(&[&stored], Some(&value));
        session.stored = Some((session.start, end));
    }

    /// Delete a session stored under `(start, end)` as the epoch ends: its
    /// index entry, and its entry too unless `entry` is false.
    fn unstore(cx: &mut Context<'_>, key: &[u8], (start, end): (i64, i64), entry: bool) {
        if entry {
            cx.state
                .write_last(&[&Self::session_key(cx, key, start)], None);
        }
        cx.state
            .write_last(&[&Self::end_key(cx, end, key, start)], None);
    }

    /// Delete a session's state now (a barrier may not come before a
    /// watermark reads the index again).
    fn erase(session: &Session, cx: &mut Context<'_>) {
        if let Some((start, end)) = session.stored {
            cx.state.delete(Self::session_key(cx, &session.key, start));
            cx.state.delete(Self::end_key(cx, end, &session.key, start));
        }
    }

    /// Emit every touched session's row and write it back; retract the
    /// sessions merged away.
    fn flush(&mut self, cx: &mut Context<'_>) -> Result<()> {
        let mut out = Changes::default();
        let mut settled = Vec::new();
        for at in std::mem::take(&mut self.dirty) {
            let Some(session) = self.sessions.slab[at as usize].as_mut() else {
                continue;
            };
            if !session.dirty {
                continue;
            }
            session.dirty = false;
            if session.merged_into.is_some() {
                let gone = self.sessions.remove(at).expect("live session");
                if let Some(stored) = gone.stored {
                    Self::unstore(cx, &gone.key, stored, true);
                }
                out.retract.extend(gone.emitted);
            } else if self.on_close {
                self.write(at, cx);
            } else {
                settled.push(at);
            }
        }
        self.emit_rows(&settled, false, &mut out, cx)?;
        if !out.retract.is_empty() || !out.insert.is_empty() {
            cx.emit(changes_of(&self.output, &self.nullable_schema, out)?);
        }
        if self.sessions.len() > self.cache_limit {
            self.sessions = Sessions::default();
            self.by_key.clear();
            self.by_close.clear();
            self.known = Known::Some;
        }
        Ok(())
    }

    /// Close the sessions the watermark has passed the end of.
    fn close(&mut self, watermark: i64, cx: &mut Context<'_>) -> Result<()> {
        if self.known != Known::All {
            self.load_closing(watermark, cx)?;
        }
        let mut closing = Vec::new();
        let mut refile = Vec::new();
        while let Some(entry) = self.by_close.first_entry() {
            if *entry.key() > watermark {
                break;
            }
            let (filed, held) = entry.remove_entry();
            for at in held {
                let Some(session) = self.sessions.find(at) else {
                    continue;
                };
                if session.filed != filed || session.merged_into.is_some() {
                    continue;
                }
                let end = session.end(self.gap);
                if end <= watermark {
                    closing.push(at);
                } else {
                    refile.push((end, at));
                }
            }
        }
        for (end, at) in refile {
            self.sessions.get_mut(at).filed = end;
            self.by_close.entry(end).or_default().push(at);
        }
        let mut out = Changes::default();
        let emitting: Vec<u32> = closing
            .iter()
            .copied()
            .filter(|at| self.on_close || self.sessions.get(*at).dirty)
            .collect();
        self.emit_rows(&emitting, true, &mut out, cx)?;
        for at in closing {
            let session = self.sessions.remove(at).expect("live session");
            Self::erase(&session, cx);
            let entry = self.by_key.get_mut(session.key.as_slice());
            if let Some(entry) = entry {
                entry.open.retain(|open| *open != at);
            }
            self.remember_closed(&session.key, session.end(self.gap), cx);
        }
        if !out.retract.is_empty() || !out.insert.is_empty() {
            cx.emit(changes_of(&self.output, &self.nullable_schema, out)?);
        }
        self.forget(watermark, cx)
    }

    /// Bring into memory the stored sessions of keys not in memory that
    /// end by the watermark.
    fn load_closing(&mut self, watermark: i64, cx: &mut Context<'_>) -> Result<()> {
        let lower = cx.key(b"x");
        let upper = cx.key(&[b"x".as_slice(), &ordered(watermark.saturating_add(1))].concat());
        for (index, _) in cx.state.scan(&lower, &upper)? {
            let rest = &index[lower.len() + 8..];
            let len = u32::from_be_bytes(rest[..4].try_into().unwrap_or_default()) as usize;
            let key = rest
                .get(4..4 + len)
                .ok_or_else(|| Error::Internal("a session index key is malformed".into()))?;
            if !self.by_key.contains_key(key) {
                self.load(key, cx)?;
            }
        }
        Ok(())
    }

    /// Note where a key's final sessions end, so that an event that would
    /// join them is late, until no event could.
    fn remember_closed(&mut self, key: &[u8], end: i64, cx: &mut Context<'_>) {
        let entry = self.by_key.entry(GroupKey::from_slice(key)).or_default();
        let previous = entry.closed;
        if previous < Some(end) {
            entry.closed = Some(end);
            record_final_end(cx, key, previous, end, self.gap);
        }
    }

    /// Forget the final sessions no event can reach any more.
    fn forget(&mut self, watermark: i64, cx: &mut Context<'_>) -> Result<()> {
        for key in forget_final_ends(cx, watermark)? {
            if let Some(entry) = self.by_key.get_mut(key.as_slice()) {
                entry.closed = None;
                if entry.open.is_empty() {
                    self.by_key.remove(key.as_slice());
                }
            }
        }
        Ok(())
    }
}

fn mark(sessions: &mut Sessions, dirty: &mut Vec<u32>, at: u32) {
    let session = sessions.get_mut(at);
    if !session.dirty {
        session.dirty = true;
        dirty.push(at);
    }
}

impl Operator for SessionAggregate {
    fn name(&self) -> &'static str {
        "SessionAggregate"
    }

    fn describe(&self) -> String {
        let group: Vec<&str> = (0..self.layout.len())
            .map(|i| self.schema.field(i).name().as_str())
            .collect();
        let aggs: Vec<String> = self
            .aggs()
            .iter()
            .map(|a| match &a.arg {
                Some(arg) => format!("{:?}({arg})", a.kind),
                None => format!("{:?}", a.kind),
            })
            .collect();
        let emit = if self.on_close {
            " emit=on window close"
        } else {
            ""
        };
        format!(
            "gap={}us group=[{}] aggs=[{}]{emit}",
            self.gap,
            group.join(", "),
            aggs.join(", ")
        )
    }

    fn on_changes(
        &mut self,
        _input: usize,
        batch: ChangeBatch,
        cx: &mut Context<'_>,
    ) -> Result<()> {
        if batch.diffs().values().iter().any(|d| *d <= 0) {
            return Err(Error::Internal(
                "a SESSION window's input retracted rows".into(),
            ));
        }
        let rows = batch.rows();
        let times = micros(rows.column(self.time_column))?;
        let key_columns: Vec<ArrayRef> =
            self.keys.iter().map(|k| rows.column(*k).clone()).collect();
        let keys = match self.keys.is_empty() {
            true => None,
            false => Some(self.key_rows.convert_columns(&key_columns)?),
        };
        let (slots, late) = self.place_rows(&times, keys.as_ref(), cx)?;
        if let Some(watermark) = self.watermark
            && !late.is_empty()
        {
            record_late(&self.view, rows, &times, &late, watermark, cx)?;
        }
        if slots.iter().all(|at| *at != u32::MAX) {
            return self.fold(&batch, &slots, cx);
        }
        let placed: BooleanArray = slots.iter().map(|at| Some(*at != u32::MAX)).collect();
        let kept = filter_record_batch(rows, &placed)?;
        let diffs = filter(batch.diffs(), &placed)?;
        let diffs = diffs
            .as_any()
            .downcast_ref::<Int64Array>()
            .cloned()
            .ok_or_else(|| Error::Internal("weights are not integers".into()))?;
        let slots: Vec<u32> = slots.into_iter().filter(|at| *at != u32::MAX).collect();
        self.fold(&ChangeBatch::new(kept, diffs)?, &slots, cx)
    }

    fn on_barrier(
        &mut self,
        _barrier: crate::dataflow::change::Barrier,
        cx: &mut Context<'_>,
    ) -> Result<()> {
        self.flush(cx)
    }

    fn on_watermark(&mut self, wm: Watermark, cx: &mut Context<'_>) -> Result<Option<Watermark>> {
        self.watermark = self.watermark.max(Some(wm.micros));
        self.close(wm.micros, cx)?;
        Ok(Some(wm))
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use datafusion::arrow::array::{Int64Array, RecordBatch, StringArray};
    use datafusion::arrow::datatypes::{DataType, Field};
    use datafusion::arrow::util::display::array_value_to_string;
    use datafusion::physical_expr::expressions::Column;

    use super::*;
    use crate::dataflow::change::Barrier;
    use crate::dataflow::state::EpochState;
    use crate::state::Store;

    const GAP: i64 = 10;

    fn input() -> SchemaRef {
        let time = crate::dataflow::window::timestamp_type();
        Arc::new(Schema::new(vec![
            Field::new("k", DataType::Utf8, true),
            Field::new("ts", time, true),
            Field::new("v", DataType::Int64, true),
        ]))
    }

    /// `k, window_start, window_end, count(*), max(v), min(k)`.
    fn operator() -> SessionAggregate {
        let time = crate::dataflow::window::timestamp_type();
        let output = Arc::new(Schema::new(vec![
            Field::new("k", DataType::Utf8, true),
            Field::new("window_start", time.clone(), true),
            Field::new("window_end", time, true),
            Field::new("n", DataType::Int64, true),
            Field::new("top", DataType::Int64, true),
            Field::new("least", DataType::Utf8, true),
        ]));
        let spec = |kind, arg: Option<(&str, usize)>, arg_type| AggSpec {
            kind,
            append_only: true,
            arg: arg.map(|(name, at)| Arc::new(Column::new(name, at)) as _),
            arg_type,
            accumulator: None,
            presence: None,
        };
        let aggs = vec![
            spec(AggKind::CountStar, None, DataType::Null),
            spec(AggKind::Max, Some(("v", 2)), DataType::Int64),
            spec(AggKind::Min, Some(("k", 0)), DataType::Utf8),
        ];
        let layout = vec![
            SessionColumn::Key(0),
            SessionColumn::Start,
            SessionColumn::End,
        ];
        SessionAggregate::new(&input(), 1, GAP, vec![0], layout, aggs, output, "v".into())
            .expect("operator")
    }

    fn events(rows: &[(&str, i64, i64)]) -> ChangeBatch {
        let batch = RecordBatch::try_new(
            input(),
            vec![
                Arc::new(StringArray::from_iter_values(rows.iter().map(|r| r.0))),
                Arc::new(TimestampMicrosecondArray::from_iter_values(
                    rows.iter().map(|r| r.1),
                )),
                Arc::new(Int64Array::from_iter_values(rows.iter().map(|r| r.2))),
            ],
        )
        .expect("batch");
        ChangeBatch::inserts(batch)
    }

    /// Run one epoch: the events, then a barrier and a commit; adds what
    /// the operator emitted to `net`, and tells how many events were late.
    fn epoch(
        op: &mut SessionAggregate,
        store: &Store,
        rows: &[(&str, i64, i64)],
        watermark: Option<i64>,
        net: &mut HashMap<String, i64>,
    ) -> usize {
        let mut state = EpochState::new(store.db().clone());
        let prefix = b"test".to_vec();
        let mut cx = Context::new(&mut state, &prefix);
        op.on_changes(0, events(rows), &mut cx).expect("changes");
        if let Some(micros) = watermark {
            op.on_watermark(Watermark { micros }, &mut cx)
                .expect("watermark");
        }
        op.on_barrier(Barrier { epoch: 1, now: 0 }, &mut cx)
            .expect("barrier");
        for batch in cx.take_output() {
            let rows = batch.rows();
            for row in 0..rows.num_rows() {
                let text: Vec<String> = rows
                    .columns()
                    .iter()
                    .map(|c| array_value_to_string(c, row).expect("text"))
                    .collect();
                *net.entry(text.join("|")).or_insert(0) += batch.diffs().value(row);
            }
        }
        net.retain(|_, n| *n != 0);
        let late = state.late.len();
        let mut batch = rocksdb::WriteBatch::default();
        state.drain_into(&mut batch);
        store.db().write(batch).expect("commit");
        late
    }

    /// Events out of order over a few keys, so that sessions open, grow
    /// and merge across epochs.
    fn shuffled() -> Vec<Vec<(&'static str, i64, i64)>> {
        let mut seed = 7u64;
        let mut next = move || {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            seed >> 33
        };
        let keys = ["a", "b", "c"];
        (0..30)
            .map(|_| {
                (0..7)
                    .map(|_| {
                        let key = keys[(next() % 3) as usize];
                        (key, (next() % 400) as i64, (next() % 1000) as i64)
                    })
                    .collect()
            })
            .collect()
    }

    /// The final rows, computed from all events at once.
    fn recount(epochs: &[Vec<(&str, i64, i64)>]) -> HashMap<String, i64> {
        let mut by_key: BTreeMap<&str, Vec<(i64, i64)>> = BTreeMap::new();
        for (key, time, value) in epochs.iter().flatten() {
            by_key.entry(key).or_default().push((*time, *value));
        }
        let mut rows = HashMap::new();
        for (key, mut events) in by_key {
            events.sort();
            let mut sessions: Vec<Vec<(i64, i64)>> = Vec::new();
            for event in events {
                match sessions.last_mut() {
                    Some(open) if event.0 < open.last().expect("nonempty").0 + GAP => {
                        open.push(event)
                    }
                    _ => sessions.push(vec![event]),
                }
            }
            for s in sessions {
                let stamp = |t: i64| {
                    let array = TimestampMicrosecondArray::from(vec![t]);
                    array_value_to_string(&array, 0).expect("text")
                };
                let top = s.iter().map(|e| e.1).max().expect("nonempty");
                let row = format!(
                    "{key}|{}|{}|{}|{top}|{key}",
                    stamp(s[0].0),
                    stamp(s.last().expect("nonempty").0 + GAP),
                    s.len()
                );
                rows.insert(row, 1);
            }
        }
        rows
    }

    #[test]
    fn sessions_merge_alike_in_memory_after_eviction_and_after_restart() {
        let epochs = shuffled();
        let expected = recount(&epochs);
        assert!(expected.len() > 10, "the input makes several sessions");
        for how in ["memory", "evicted", "restarted"] {
            let dir = tempfile::tempdir().expect("tempdir");
            let store = Store::open(dir.path()).expect("store");
            let fresh = || match how {
                "evicted" => operator().with_cache_limit(0),
                _ => operator(),
            };
            let mut op = fresh();
            let mut net = HashMap::new();
            for rows in &epochs {
                if how == "restarted" {
                    op = fresh();
                }
                epoch(&mut op, &store, rows, None, &mut net);
            }
            assert_eq!(net, expected, "sessions kept in {how}");
        }
    }

    #[test]
    fn late_events_are_dropped_and_final_sessions_leave_state() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = Store::open(dir.path()).expect("store");
        let mut op = operator();
        let mut net = HashMap::new();
        let (mut most, mut late) = (0, 0);
        for step in 1..=100i64 {
            // Two events a key 3 apart, and one that would join the
            // session of two steps before, which the last watermark closed.
            let base = step * 100;
            let mut rows: Vec<(&str, i64, i64)> = ["a", "b", "c"]
                .iter()
                .flat_map(|k| [(*k, base, 1), (*k, base + 3, 2)])
                .collect();
            rows.push(("a", base - 195, 9));
            late += epoch(&mut op, &store, &rows, Some(base - 50), &mut net);
            most = most.max(store.state_entries(b"test"));
        }
        // The first step's stray event opened a session of its own.
        assert_eq!(late, 99);
        assert_eq!(net.len(), 301, "one row a key and step");
        assert_eq!(net.keys().filter(|row| row.contains("|9|")).count(), 1);
        // The open sessions, their index and the keys' final ends.
        assert!(most <= 20, "state grew to {most} entries");
    }
}
