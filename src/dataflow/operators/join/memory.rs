//! A join side's rows held in memory, and how they reach state.
//!
//! A side of a regular join starts [`Appended`]: its rows packed in one
//! buffer, as an append-only input never takes one back. At its first
//! retraction it becomes [`Counted`], each distinct row with its
//! multiplicity. Either logs its changes as a chunk per barrier
//! ([`Chunks`]). A side of an interval or window join is `Counted` and
//! writes each row back as an entry of its own, for its expiry index.

use hashbrown::HashTable;

use crate::dataflow::state::EpochState;
use crate::error::{Error, Result};

pub(super) use crate::dataflow::operators::FastMap;

/// A side's rows in memory.
pub(super) enum InMemory {
    Appended(Appended),
    Counted(Counted),
}

impl InMemory {
    /// An empty side that logs its changes in chunks.
    pub(super) fn logged() -> InMemory {
        InMemory::Appended(Appended {
            chunks: Some(Chunks::default()),
            ..Appended::default()
        })
    }

    /// An empty side that writes its rows back one entry each.
    pub(super) fn entries() -> InMemory {
        InMemory::Counted(Counted::default())
    }

    /// Rows logged in chunks, read back: `stored` holds the chunks' keys,
    /// ending in their sequence numbers, and values.
    pub(super) fn from_chunks(stored: Vec<(Vec<u8>, Vec<u8>)>) -> Result<InMemory> {
        let mut memory = InMemory::logged();
        let mut chunks = Chunks::default();
        for (key, value) in stored {
            let seq = key
                .len()
                .checked_sub(8)
                .and_then(|at| key[at..].try_into().ok())
                .map(u64::from_be_bytes)
                .ok_or_else(|| Error::Internal("a join chunk key is malformed".into()))?;
            chunks.stored.push(seq);
            chunks.next = chunks.next.max(seq + 1);
            let (records, retracts) = survey(&value)?;
            chunks.records += records;
            match memory.counted_if(if retracts { -1 } else { 1 }) {
                InMemory::Appended(rows) => rows.load(&value),
                InMemory::Counted(rows) => rows.apply_records(&value),
            }
        }
        *memory.chunks_mut() = Some(chunks);
        Ok(memory)
    }

    /// Add `diff` to a row's multiplicity, logging the change.
    pub(super) fn add(&mut self, key: &[u8], row: &[u8], diff: i64) {
        match self.counted_if(diff) {
            InMemory::Appended(rows) => rows.add(key, row, diff),
            InMemory::Counted(rows) => rows.add(key, row, diff),
        }
    }

    /// Call `f` with each row held under `key` and its multiplicity.
    pub(super) fn each(&self, key: &[u8], mut f: impl FnMut(&[u8], i64)) {
        match self {
            InMemory::Appended(rows) => rows.each(key, f),
            InMemory::Counted(rows) => {
                if let Some(held) = rows.keys.get(key) {
                    for (row, count) in held.rows.iter().filter(|(_, c)| **c != 0) {
                        f(row, *count);
                    }
                }
            }
        }
    }

    /// Whether the side is within what the join may keep in memory; a
    /// packed side is measured in bytes when its input never retracts, and
    /// otherwise in rows, since its first retraction would count them.
    pub(super) fn fits(&self, budget: super::Budget, append_only: bool) -> bool {
        match self {
            InMemory::Appended(rows) if append_only => rows.bytes() <= budget.packed_bytes,
            _ => self.rows() <= budget.counted_rows,
        }
    }

    /// Rows held, counting a row held twice over as one row or two.
    pub(super) fn rows(&self) -> usize {
        match self {
            InMemory::Appended(rows) => rows.entries.len(),
            InMemory::Counted(rows) => rows.rows,
        }
    }

    /// Drop a row by its entry's suffix (rows written back one entry each).
    pub(super) fn forget(&mut self, suffix: &[u8]) {
        if let InMemory::Counted(rows) = self {
            rows.forget(suffix);
        }
    }

    /// At a barrier: write the changes since the last one to state.
    pub(super) fn write(&mut self, state: &mut EpochState, prefix: &[u8], tag: &[u8]) {
        match self {
            InMemory::Appended(rows) => rows.write(state, prefix, tag),
            InMemory::Counted(rows) => {
                rows.write_back(state, prefix, tag);
                rows.write_chunk(state, prefix, tag);
            }
        }
    }

    /// Write every row one entry each, as the state of a side not in
    /// memory, and delete the chunks.
    pub(super) fn spill(self, state: &mut EpochState, prefix: &[u8], tag: &[u8]) {
        match self {
            InMemory::Appended(mut rows) => rows.spill(state, prefix, tag),
            InMemory::Counted(mut rows) => rows.spill(state, prefix, tag),
        }
    }

    /// The side, made `Counted` first when `diff` would retract from an
    /// `Appended` one.
    fn counted_if(&mut self, diff: i64) -> &mut InMemory {
        if let InMemory::Appended(rows) = self
            && diff <= 0
        {
            *self = InMemory::Counted(std::mem::take(rows).counted());
        }
        self
    }

    fn chunks_mut(&mut self) -> &mut Option<Chunks> {
        match self {
            InMemory::Appended(rows) => &mut rows.chunks,
            InMemory::Counted(rows) => &mut rows.chunks,
        }
    }

    /// Records in the stored chunks.
    #[cfg(test)]
    pub(super) fn logged_records(&mut self) -> usize {
        self.chunks_mut().as_ref().map_or(0, |c| c.records)
    }
}

/// An append-only side's rows, packed: their records in one buffer in the
/// layout of a chunk, so that holding a row allocates nothing of its own,
/// nothing is searched, and the records since the last barrier are the
/// next chunk as they stand. Each key's rows are a list threaded through
/// `entries`; `keys` finds a key's list by hash, the key's bytes being
/// those of its first record.
#[derive(Default)]
pub(super) struct Appended {
    keys: HashTable<List>,
    entries: Vec<Entry>,
    records: Vec<u8>,
    /// Length of `records` already logged in chunks.
    logged: usize,
    hasher: ahash::RandomState,
    chunks: Option<Chunks>,
}

/// A record in `Appended::records`, and the next entry under its key.
#[derive(Clone, Copy)]
struct Entry {
    at: usize,
    next: u32,
}

/// A key's first and last entry, the key's hash, and a short key itself:
/// finding a short key's list then reads no record, which on a side of
/// millions of rows is a cache miss or two saved on every row.
struct List {
    first: u32,
    last: u32,
    hash: u64,
    short: ShortKey,
}

/// Bytes of a key a list holds inline: an integer or a short string in row
/// format fits, and a list stays 40 bytes.
const SHORT_KEY: usize = 22;

/// A key of up to [`SHORT_KEY`] bytes; a longer one is read from its list's
/// first record.
#[derive(Clone, Copy)]
struct ShortKey {
    len: u8,
    bytes: [u8; SHORT_KEY],
}

impl ShortKey {
    fn new(key: &[u8]) -> ShortKey {
        let mut bytes = [0; SHORT_KEY];
        match bytes.get_mut(..key.len()) {
            Some(head) => {
                head.copy_from_slice(key);
                ShortKey {
                    len: key.len() as u8,
                    bytes,
                }
            }
            None => ShortKey {
                len: u8::MAX,
                bytes,
            },
        }
    }

    /// Whether `key` is this one; `None` when the key is too long to be held.
    fn matches(&self, key: &[u8]) -> Option<bool> {
        (self.len != u8::MAX).then(|| &self.bytes[..usize::from(self.len)] == key)
    }
}

impl List {
    fn holds(&self, hash: u64, key: &[u8], records: &[u8], entries: &[Entry]) -> bool {
        self.hash == hash
            && self
                .short
                .matches(key)
                .unwrap_or_else(|| record_key(records, entries[self.first as usize].at) == key)
    }
}

/// The `next` of a key's last entry.
const LAST: u32 = u32::MAX;

impl Appended {
    /// Memory held, buffers counted by what they reserved.
    fn bytes(&self) -> usize {
        self.records.capacity()
            + self.entries.capacity() * std::mem::size_of::<Entry>()
            + self.keys.capacity() * std::mem::size_of::<List>()
    }

    fn add(&mut self, key: &[u8], row: &[u8], diff: i64) {
        if let Some(chunks) = &mut self.chunks {
            chunks.pending_records += 1;
        }
        self.push(key, row, diff);
    }

    fn push(&mut self, key: &[u8], row: &[u8], diff: i64) {
        let at = self.records.len();
        append_record(&mut self.records, key, row, diff);
        self.index(key, at);
    }

    /// Thread the record at `at`, under `key`, onto its key's list.
    fn index(&mut self, key: &[u8], at: usize) {
        let id = self.entries.len() as u32;
        self.entries.push(Entry { at, next: LAST });
        let Appended {
            keys,
            entries,
            records,
            hasher,
            ..
        } = self;
        let hash = hasher.hash_one(key);
        match keys.find_mut(hash, |list| list.holds(hash, key, records, entries)) {
            Some(list) => {
                entries[list.last as usize].next = id;
                list.last = id;
            }
            None => {
                let list = List {
                    first: id,
                    last: id,
                    hash,
                    short: ShortKey::new(key),
                };
                keys.insert_unique(hash, list, |list| list.hash);
            }
        }
    }

    fn each(&self, key: &[u8], f: impl FnMut(&[u8], i64)) {
        let hash = self.hasher.hash_one(key);
        let same = |list: &List| list.holds(hash, key, &self.records, &self.entries);
        if let Some(list) = self.keys.find(hash, same) {
            self.walk(list, f);
        }
    }

    /// Call `f` with each row on a key's list and its diff.
    fn walk(&self, list: &List, mut f: impl FnMut(&[u8], i64)) {
        let mut id = list.first;
        while id != LAST {
            let entry = self.entries[id as usize];
            let mut rest = &self.records[entry.at..];
            if let Some((_, row, diff)) = next_record(&mut rest) {
                f(row, diff);
            }
            id = entry.next;
        }
    }

    /// Take in a chunk read back from state, its records already logged.
    fn load(&mut self, chunk: &[u8]) {
        self.records.extend_from_slice(chunk);
        self.logged = self.records.len();
        let mut rest = chunk;
        let mut at = self.records.len() - chunk.len();
        while let Some((key, _, _)) = next_record(&mut rest) {
            self.index(key, at);
            at = self.records.len() - rest.len();
        }
    }

    /// Log the records since the last barrier as one chunk.
    fn write(&mut self, state: &mut EpochState, prefix: &[u8], tag: &[u8]) {
        let Some(chunks) = &mut self.chunks else {
            return;
        };
        if self.logged < self.records.len() {
            let chunk = self.records[self.logged..].to_vec();
            self.logged = self.records.len();
            chunks.store(state, prefix, tag, chunk);
        }
    }

    /// Write every row one entry each, as a counted side spills, and delete
    /// the chunks; a key at a time, so that no counted copy of the whole
    /// side is ever built.
    fn spill(&mut self, state: &mut EpochState, prefix: &[u8], tag: &[u8]) {
        if let Some(chunks) = &mut self.chunks {
            chunks.delete_stored(state, prefix, tag);
        }
        for list in self.keys.iter() {
            let mut rows = KeyRows::default();
            self.walk(list, |row, diff| match rows.get_mut(row) {
                Some(count) => *count += diff,
                None => rows.insert(row.to_vec(), diff),
            });
            let key = record_key(&self.records, self.entries[list.first as usize].at);
            let len = (key.len() as u32).to_be_bytes();
            for (row, count) in rows.iter().filter(|(_, c)| **c != 0) {
                let value = count.to_le_bytes();
                state.write_last(&[prefix, tag, &len, key, row], Some(&value));
            }
        }
    }

    /// The same rows, each distinct row once with its multiplicity; the
    /// records not yet logged become the counted side's pending chunk.
    fn counted(self) -> Counted {
        let mut counted = Counted::default();
        counted.apply_records(&self.records);
        counted.chunks = self.chunks.map(|mut chunks| {
            chunks
                .pending
                .extend_from_slice(&self.records[self.logged..]);
            chunks
        });
        counted
    }
}

/// How many records a chunk holds, and whether any retracts; an error
/// where it is malformed.
fn survey(chunk: &[u8]) -> Result<(usize, bool)> {
    let (mut records, mut retracts) = (0, false);
    let mut rest = chunk;
    while let Some((_, _, diff)) = next_record(&mut rest) {
        records += 1;
        retracts |= diff <= 0;
    }
    match rest.is_empty() {
        true => Ok((records, retracts)),
        false => Err(Error::Internal("a join chunk is malformed".into())),
    }
}

/// The key of the record at `at`.
fn record_key(records: &[u8], at: usize) -> &[u8] {
    let mut rest = &records[at..];
    next_record(&mut rest).map_or(&[][..], |(key, _, _)| key)
}

/// Rows (row format) with their multiplicities: a short list searched in
/// turn, as most join keys hold a row or two, or a map once it grows.
enum KeyRows {
    Few(Vec<(Vec<u8>, i64)>),
    Many(FastMap<Vec<u8>, i64>),
}

/// Rows a list holds before it becomes a map.
const FEW_ROWS: usize = 8;

impl Default for KeyRows {
    fn default() -> Self {
        KeyRows::Few(Vec::new())
    }
}

impl KeyRows {
    fn get_mut(&mut self, row: &[u8]) -> Option<&mut i64> {
        match self {
            KeyRows::Few(rows) => rows.iter_mut().find(|(r, _)| r == row).map(|(_, c)| c),
            KeyRows::Many(rows) => rows.get_mut(row),
        }
    }

    /// Add a row the list does not hold.
    fn insert(&mut self, row: Vec<u8>, count: i64) {
        match self {
            KeyRows::Few(rows) if rows.len() < FEW_ROWS => rows.push((row, count)),
            KeyRows::Few(rows) => {
                let mut map: FastMap<Vec<u8>, i64> = std::mem::take(rows).into_iter().collect();
                map.insert(row, count);
                *self = KeyRows::Many(map);
            }
            KeyRows::Many(rows) => {
                rows.insert(row, count);
            }
        }
    }

    fn remove(&mut self, row: &[u8]) -> bool {
        match self {
            KeyRows::Few(rows) => match rows.iter().position(|(r, _)| r == row) {
                Some(at) => {
                    rows.swap_remove(at);
                    true
                }
                None => false,
            },
            KeyRows::Many(rows) => rows.remove(row).is_some(),
        }
    }

    fn len(&self) -> usize {
        match self {
            KeyRows::Few(rows) => rows.len(),
            KeyRows::Many(rows) => rows.len(),
        }
    }

    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn iter(&self) -> impl Iterator<Item = (&Vec<u8>, &i64)> {
        let (few, many) = match self {
            KeyRows::Few(rows) => (Some(rows), None),
            KeyRows::Many(rows) => (None, Some(rows)),
        };
        let few = few.into_iter().flatten().map(|(r, c)| (r, c));
        few.chain(many.into_iter().flatten())
    }

    fn retain(&mut self, mut keep: impl FnMut(&Vec<u8>, &mut i64) -> bool) {
        match self {
            KeyRows::Few(rows) => rows.retain_mut(|(r, c)| keep(r, c)),
            KeyRows::Many(rows) => rows.retain(|r, c| keep(r, c)),
        }
    }
}

/// The rows one side holds under one join key.
#[derive(Default)]
struct Held {
    rows: KeyRows,
    /// Changed since the last barrier, so listed in `Counted::dirty`.
    dirty: bool,
}

/// One side's rows by join key (row format), and how they reach state.
#[derive(Default)]
pub(super) struct Counted {
    keys: FastMap<Vec<u8>, Held>,
    /// Keys changed since the last barrier, when rows are written back one
    /// entry each.
    dirty: Vec<Vec<u8>>,
    /// Rows held under all keys, zero multiplicities included.
    rows: usize,
    /// When set, changes are logged in chunks instead of written back per
    /// row.
    chunks: Option<Chunks>,
}

/// A side's changes, logged to state a chunk per barrier: records of key
/// length (u32 LE), key, row length (u32 LE), row, diff (i64 LE).
#[derive(Default)]
pub(super) struct Chunks {
    /// Records since the last barrier, and how many.
    pending: Vec<u8>,
    pending_records: usize,
    /// Sequence numbers of the chunks in state, and the next one's.
    stored: Vec<u64>,
    next: u64,
    /// Records in the stored chunks.
    records: usize,
}

impl Chunks {
    fn log(&mut self, key: &[u8], row: &[u8], diff: i64) {
        append_record(&mut self.pending, key, row, diff);
        self.pending_records += 1;
    }

    /// Write the records since the last barrier to state as one chunk.
    fn write(&mut self, state: &mut EpochState, prefix: &[u8], tag: &[u8]) {
        if self.pending.is_empty() {
            return;
        }
        // Moved, not copied; the next chunk is likely as large.
        let capacity = self.pending.len();
        let chunk = std::mem::replace(&mut self.pending, Vec::with_capacity(capacity));
        self.store(state, prefix, tag, chunk);
    }

    /// Write `chunk`, holding the pending records, to state.
    fn store(&mut self, state: &mut EpochState, prefix: &[u8], tag: &[u8], chunk: Vec<u8>) {
        self.records += std::mem::take(&mut self.pending_records);
        let seq = self.next;
        self.next += 1;
        self.stored.push(seq);
        state.put([prefix, b"c", tag, &seq.to_be_bytes()].concat(), chunk);
    }

    /// Delete the chunks in state; they land after this epoch's new one.
    fn delete_stored(&mut self, state: &mut EpochState, prefix: &[u8], tag: &[u8]) {
        for seq in std::mem::take(&mut self.stored) {
            state.write_last(&[prefix, b"c", tag, &seq.to_be_bytes()], None);
        }
    }
}

/// Chunks are rewritten from memory once they hold more than twice the
/// live rows and at least this many records (retractions pile up).
pub(super) const REWRITE_RECORDS: usize = 100_000;

fn append_record(out: &mut Vec<u8>, key: &[u8], row: &[u8], diff: i64) {
    out.extend_from_slice(&(key.len() as u32).to_le_bytes());
    out.extend_from_slice(key);
    out.extend_from_slice(&(row.len() as u32).to_le_bytes());
    out.extend_from_slice(row);
    out.extend_from_slice(&diff.to_le_bytes());
}

/// The records of a chunk, `None` past its end or where it is malformed.
fn next_record<'a>(chunk: &mut &'a [u8]) -> Option<(&'a [u8], &'a [u8], i64)> {
    fn take<'a>(bytes: &mut &'a [u8], n: usize) -> Option<&'a [u8]> {
        let (head, tail) = (bytes.get(..n)?, bytes.get(n..)?);
        *bytes = tail;
        Some(head)
    }
    let len = |b: &[u8]| u32::from_le_bytes(b.try_into().unwrap_or_default()) as usize;
    let key_len = len(take(chunk, 4)?);
    let key = take(chunk, key_len)?;
    let row_len = len(take(chunk, 4)?);
    let row = take(chunk, row_len)?;
    let diff = i64::from_le_bytes(take(chunk, 8)?.try_into().ok()?);
    Some((key, row, diff))
}

impl Counted {
    fn add(&mut self, key: &[u8], row: &[u8], diff: i64) {
        if let Some(chunks) = &mut self.chunks {
            chunks.log(key, row, diff);
            self.apply(key, row, diff);
            return;
        }
        // Rows at zero stay until the barrier deletes their entries.
        let (held, _) = self.bump(key, row, diff);
        if !std::mem::replace(&mut held.dirty, true) {
            self.dirty.push(key.to_vec());
        }
    }

    /// Apply each record of a chunk's layout, without logging them.
    fn apply_records(&mut self, records: &[u8]) {
        let mut rest = records;
        while let Some((key, row, diff)) = next_record(&mut rest) {
            self.apply(key, row, diff);
        }
    }

    /// Add to a row's multiplicity, dropping the row when it reaches zero.
    fn apply(&mut self, key: &[u8], row: &[u8], diff: i64) {
        let (held, count) = self.bump(key, row, diff);
        if count != 0 {
            return;
        }
        held.rows.remove(row);
        let emptied = held.rows.is_empty();
        self.rows -= 1;
        if emptied {
            self.keys.remove(key);
        }
    }

    /// Add `diff` to a row's multiplicity, adding the row (and its key) if
    /// new: the key's rows and the row's count after.
    fn bump(&mut self, key: &[u8], row: &[u8], diff: i64) -> (&mut Held, i64) {
        if !self.keys.contains_key(key) {
            self.keys.insert(key.to_vec(), Held::default());
        }
        let held = self.keys.get_mut(key).expect("the key was added above");
        let count = match held.rows.get_mut(row) {
            Some(count) => {
                *count += diff;
                *count
            }
            None => {
                held.rows.insert(row.to_vec(), diff);
                self.rows += 1;
                diff
            }
        };
        (held, count)
    }

    /// Log the changes since the last barrier as one chunk; first rewrite
    /// the chunks from memory when retractions have made them twice as
    /// large as the rows they add up to.
    fn write_chunk(&mut self, state: &mut EpochState, prefix: &[u8], tag: &[u8]) {
        let Some(chunks) = &mut self.chunks else {
            return;
        };
        if !chunks.pending.is_empty() && chunks.records > REWRITE_RECORDS.max(2 * self.rows) {
            chunks.delete_stored(state, prefix, tag);
            chunks.pending.clear();
            chunks.records = 0;
            chunks.pending_records = self.rows;
            for (key, held) in &self.keys {
                for (row, count) in held.rows.iter() {
                    append_record(&mut chunks.pending, key, row, *count);
                }
            }
        }
        chunks.write(state, prefix, tag);
    }

    /// Write every row one entry each, as the state of a side not in
    /// memory, and delete the chunks (a side already written back one
    /// entry each writes its changed rows).
    fn spill(&mut self, state: &mut EpochState, prefix: &[u8], tag: &[u8]) {
        if let Some(mut chunks) = self.chunks.take() {
            chunks.delete_stored(state, prefix, tag);
            for (key, held) in self.keys.iter_mut() {
                held.dirty = true;
                self.dirty.push(key.clone());
            }
        }
        self.write_back(state, prefix, tag);
    }

    /// Drop a row, by its state suffix: side tag, key length (u32 BE), key,
    /// row.
    fn forget(&mut self, suffix: &[u8]) {
        let Some(len) = suffix
            .get(1..5)
            .and_then(|b| b.try_into().ok())
            .map(u32::from_be_bytes)
        else {
            return;
        };
        let Some(key) = suffix.get(5..5 + len as usize) else {
            return;
        };
        let row = &suffix[5 + len as usize..];
        if let Some(held) = self.keys.get_mut(key) {
            if held.rows.remove(row) {
                self.rows -= 1;
            }
            if held.rows.is_empty() {
                self.keys.remove(key);
            }
        }
    }

    /// Write the rows of the keys changed since the last barrier to state,
    /// under `prefix` ++ `tag`, and forget those that went to zero.
    fn write_back(&mut self, state: &mut EpochState, prefix: &[u8], tag: &[u8]) {
        for key in std::mem::take(&mut self.dirty) {
            let Some(held) = self.keys.get_mut(&key) else {
                continue;
            };
            held.dirty = false;
            let len = (key.len() as u32).to_be_bytes();
            let before = held.rows.len();
            held.rows.retain(|row, count| {
                let parts = [prefix, tag, &len, &key, row];
                let value = count.to_le_bytes();
                state.write_last(&parts, (*count != 0).then_some(value.as_slice()));
                *count != 0
            });
            self.rows -= before - held.rows.len();
            if held.rows.is_empty() {
                self.keys.remove(&key);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_keys_rows_stay_counted_as_the_list_becomes_a_map() {
        let mut rows = KeyRows::default();
        for n in 0..20u8 {
            rows.insert(vec![n], 1);
            *rows.get_mut(&[n]).expect("just added") += 1;
        }
        assert!(matches!(rows, KeyRows::Many(_)));
        assert!(rows.remove(&[3]) && !rows.remove(&[3]));
        rows.retain(|row, _| row[0] % 2 == 0);
        let mut left: Vec<(u8, i64)> = rows.iter().map(|(r, c)| (r[0], *c)).collect();
        left.sort();
        let even: Vec<(u8, i64)> = (0..20).step_by(2).map(|n| (n, 2)).collect();
        assert_eq!(left, even);
        assert_eq!(rows.len(), 10);
    }

    #[test]
    fn short_and_long_keys_each_find_their_own_rows() {
        let mut side = Appended::default();
        let short = vec![7u8; SHORT_KEY];
        let longer = vec![7u8; SHORT_KEY + 1];
        let prefixed = [short.as_slice(), b"x"].concat();
        for (n, key) in [&short, &longer, &prefixed, &short, &vec![]]
            .iter()
            .enumerate()
        {
            side.add(key, &[n as u8], 1);
        }
        let rows = |key: &[u8]| {
            let mut held = Vec::new();
            side.each(key, |row, diff| held.push((row[0], diff)));
            held
        };
        assert_eq!(rows(&short), [(0, 1), (3, 1)]);
        assert_eq!(rows(&longer), [(1, 1)]);
        assert_eq!(rows(&prefixed), [(2, 1)]);
        assert_eq!(rows(&[]), [(4, 1)]);
        assert!(rows(&short[1..]).is_empty());
    }

    #[test]
    fn an_appended_side_counts_its_rows_from_its_first_retraction() {
        let mut side = InMemory::logged();
        for (key, row) in [(b"k", b"a"), (b"k", b"a"), (b"k", b"b"), (b"j", b"a")] {
            side.add(key, row, 1);
        }
        assert!(matches!(side, InMemory::Appended(_)));
        assert_eq!(side.rows(), 4);
        side.add(b"k", b"a", -1);
        let InMemory::Counted(counted) = &side else {
            panic!("a retraction leaves the side appended");
        };
        assert_eq!(counted.chunks.as_ref().map(|c| c.pending_records), Some(5));
        let mut held = Vec::new();
        side.each(b"k", |row, count| held.push((row.to_vec(), count)));
        held.sort();
        assert_eq!(held, [(b"a".to_vec(), 1), (b"b".to_vec(), 1)]);
        assert_eq!(side.rows(), 3);
    }
}
