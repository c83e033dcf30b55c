//! The chunk: how the records of a log topic are laid out in one stored
//! entry. Pure functions over bytes, so that damaged bytes can be fuzzed.
//!
//! Chunk layout: `u32 count`, then per record `i64 diff`, `u32 len`, `len` bytes
//! of an encoded row (see [`crate::state::rows`]), then optionally the byte
//! `1` and an `i64` watermark (microseconds): the event-time watermark of the
//! topic once every record up to the chunk's end has been read; then
//! optionally the byte `2`, a `u64` epoch, an `i64` commit time
//! (microseconds) and a `u8` flag: the commit that wrote the chunk (a view's
//! dataflow epoch, or the writer's commit sequence for a table), and whether
//! the chunk is part of a compacted prefix. All integers little-endian.
//!
//! A chunk may hold no records and only a watermark; it sits at the offset
//! the next records will take, and a later chunk at that offset (which always
//! carries a watermark at least as high) replaces it.

use crate::error::{Error, Result};

/// Records per chunk: large enough to amortise a RocksDB entry, small enough to decode lazily.
pub const CHUNK_ROWS: usize = 4096;

/// One record: a row and its weight (+1 insert, -1 delete).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChunkEntry<'a> {
    pub diff: i64,
    pub row: &'a [u8],
}

/// A decoded chunk, borrowing the stored bytes.
#[derive(Debug)]
pub struct Chunk<'a> {
    pub entries: Vec<ChunkEntry<'a>>,
    /// The watermark once this chunk has been read, if the topic has one.
    pub watermark: Option<i64>,
    /// The commit that wrote the chunk, if it was stamped.
    pub stamp: Option<Stamp>,
}

impl<'a> Chunk<'a> {
    /// The rows the chunk adds, each as many times as it is added: a
    /// compacted run counts equal rows together. Retractions are skipped,
    /// for topics whose contents only grow.
    pub fn added_rows(&self) -> impl Iterator<Item = &'a [u8]> + '_ {
        self.entries
            .iter()
            .flat_map(|e| std::iter::repeat_n(e.row, e.diff.max(0) as usize))
    }
}

/// The commit a chunk belongs to: change streams order and resume by it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Stamp {
    /// A view's dataflow epoch, or the writer's commit sequence for a table.
    pub epoch: u64,
    /// Processing time of the commit, microseconds since the Unix epoch.
    pub time: i64,
    /// The chunk belongs to a compacted prefix: its records are the
    /// consolidated changes of every epoch up to `epoch`.
    pub compacted: bool,
}

/// Bytes of a record before its row: its diff and its length.
const RECORD_HEAD: usize = 12;

const WATERMARK_TAG: u8 = 1;
const STAMP_TAG: u8 = 2;

pub fn encode_chunk<'a, I>(entries: I, watermark: Option<i64>, stamp: Option<Stamp>) -> Vec<u8>
where
    I: IntoIterator<Item = (i64, &'a [u8])>,
    I::IntoIter: Clone,
{
    let entries = entries.into_iter();
    // Sized in a first pass: a chunk of thousands of rows would otherwise
    // grow by doubling, copying itself each time.
    let body: usize = entries
        .clone()
        .map(|(_, row)| RECORD_HEAD + row.len())
        .sum();
    let mut out = ChunkBody::with_capacity(body + TRAILER_BYTES);
    for (diff, row) in entries {
        out.push(diff, row);
    }
    let mut out = out.finish();
    push_trailer(&mut out, watermark, stamp);
    out
}

/// The most bytes [`push_trailer`] adds.
pub const TRAILER_BYTES: usize = 1 + 8 + 1 + 17;

/// A chunk's count and records, built a record at a time: what
/// [`encode_chunk`] writes before the trailer, for writers that keep no
/// list of their rows.
#[derive(Debug)]
pub struct ChunkBody {
    bytes: Vec<u8>,
    count: u32,
}

impl ChunkBody {
    /// An empty body with room for `bytes` of records.
    pub fn with_capacity(bytes: usize) -> ChunkBody {
        let mut body = Vec::with_capacity(4 + bytes);
        body.extend_from_slice(&[0u8; 4]);
        ChunkBody {
            bytes: body,
            count: 0,
        }
    }

    /// An empty body with room for `records` rows of about `row_bytes`
    /// each, and for the trailer after them.
    pub fn for_rows(records: usize, row_bytes: usize) -> ChunkBody {
        ChunkBody::with_capacity(records * (RECORD_HEAD + row_bytes) + TRAILER_BYTES)
    }

    pub fn push(&mut self, diff: i64, row: &[u8]) {
        self.bytes.extend_from_slice(&diff.to_le_bytes());
        self.bytes
            .extend_from_slice(&(row.len() as u32).to_le_bytes());
        self.bytes.extend_from_slice(row);
        self.count += 1;
    }

    /// Records so far.
    pub fn count(&self) -> u32 {
        self.count
    }

    /// The body's bytes, its count filled in.
    pub fn finish(mut self) -> Vec<u8> {
        self.bytes[..4].copy_from_slice(&self.count.to_le_bytes());
        self.bytes
    }
}

/// Ends a chunk body with its watermark and stamp, either of them optional.
pub fn push_trailer(out: &mut Vec<u8>, watermark: Option<i64>, stamp: Option<Stamp>) {
    if let Some(watermark) = watermark {
        out.push(WATERMARK_TAG);
        out.extend_from_slice(&watermark.to_le_bytes());
    }
    if let Some(stamp) = stamp {
        out.push(STAMP_TAG);
        out.extend_from_slice(&stamp.epoch.to_le_bytes());
        out.extend_from_slice(&stamp.time.to_le_bytes());
        out.push(u8::from(stamp.compacted));
    }
}

/// The number of records in an encoded chunk.
pub fn chunk_len(bytes: &[u8]) -> Result<u64> {
    let head: [u8; 4] = bytes
        .get(..4)
        .and_then(|b| b.try_into().ok())
        .ok_or_else(corrupt)?;
    Ok(u64::from(u32::from_le_bytes(head)))
}

pub fn decode_chunk(bytes: &[u8]) -> Result<Chunk<'_>> {
    let count = chunk_len(bytes)? as usize;
    // The count is stored, so it may be damaged: trust it only as far as
    // the bytes can hold that many records, or one bad byte asks for
    // gigabytes.
    if count > (bytes.len() - 4) / RECORD_HEAD {
        return Err(corrupt());
    }
    let mut entries = Vec::with_capacity(count);
    let mut at = 4;
    for _ in 0..count {
        let diff = i64::from_le_bytes(take::<8>(bytes, at)?);
        let len = u32::from_le_bytes(take::<4>(bytes, at + 8)?) as usize;
        let start = at + RECORD_HEAD;
        let row = bytes.get(start..start + len).ok_or_else(corrupt)?;
        entries.push(ChunkEntry { diff, row });
        at = start + len;
    }
    let (watermark, stamp) = trailer(bytes, at)?;
    Ok(Chunk {
        entries,
        watermark,
        stamp,
    })
}

/// A chunk's record count and stamp, found without decoding its records.
pub fn chunk_head(bytes: &[u8]) -> Result<(u64, Option<Stamp>)> {
    let (count, _, stamp) = head(bytes)?;
    Ok((count, stamp))
}

/// A chunk's record count, watermark and stamp: its records are skipped
/// by their lengths, never decoded.
pub(crate) fn head(bytes: &[u8]) -> Result<(u64, Option<i64>, Option<Stamp>)> {
    let count = chunk_len(bytes)?;
    let mut at = 4;
    for _ in 0..count {
        at += RECORD_HEAD + u32::from_le_bytes(take::<4>(bytes, at + 8)?) as usize;
    }
    let (watermark, stamp) = trailer(bytes, at)?;
    Ok((count, watermark, stamp))
}

/// The watermark and stamp that follow a chunk's records at `at`.
fn trailer(bytes: &[u8], mut at: usize) -> Result<(Option<i64>, Option<Stamp>)> {
    let watermark = match bytes.get(at) {
        Some(&WATERMARK_TAG) => {
            at += 9;
            Some(i64::from_le_bytes(take::<8>(bytes, at - 8)?))
        }
        _ => None,
    };
    let stamp = match bytes.get(at) {
        Some(&STAMP_TAG) => Some(Stamp {
            epoch: u64::from_le_bytes(take::<8>(bytes, at + 1)?),
            time: i64::from_le_bytes(take::<8>(bytes, at + 9)?),
            compacted: match take::<1>(bytes, at + 17)?[0] {
                0 => false,
                1 => true,
                _ => return Err(corrupt()),
            },
        }),
        _ => None,
    };
    Ok((watermark, stamp))
}

fn take<const N: usize>(bytes: &[u8], at: usize) -> Result<[u8; N]> {
    bytes
        .get(at..at + N)
        .and_then(|b| b.try_into().ok())
        .ok_or_else(corrupt)
}

pub(crate) fn corrupt() -> Error {
    Error::Corrupted("a log chunk is truncated or damaged".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_damaged_count_is_refused_not_allocated() {
        // Found by the chunks fuzz target: a count of three billion records.
        let mut bytes = encode_chunk([(1, &b"abc"[..])], None, None);
        bytes[3] = 0xba;
        assert!(matches!(decode_chunk(&bytes), Err(Error::Corrupted(_))));
        assert!(chunk_head(&bytes).is_err());
    }

    #[test]
    fn a_damaged_compaction_flag_is_refused() {
        let stamp = Stamp {
            epoch: 7,
            time: 1,
            compacted: true,
        };
        let mut bytes = encode_chunk([(1, &b"abc"[..])], Some(5), Some(stamp));
        let decoded = decode_chunk(&bytes).expect("intact");
        assert_eq!(decoded.stamp, Some(stamp));
        *bytes.last_mut().expect("the flag") = 2;
        assert!(decode_chunk(&bytes).is_err());
    }
}
