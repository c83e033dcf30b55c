//! The embedded log, stored in the `log` column family of the node's RocksDB.
//!
//! Chunk layout: `u32 count`, then per record `i64 diff`, `u32 len`, `len` bytes
//! of an encoded row (see [`crate::state::rows`]), then optionally the byte
//! `1` and an `i64` watermark (microseconds): the event-time watermark of the
//! topic once every record up to the chunk's end has been read. All integers
//! little-endian.
//!
//! A chunk may hold no records and only a watermark; it sits at the offset
//! the next records will take, and a later chunk at that offset (which always
//! carries a watermark at least as high) replaces it.

use crate::error::{Error, Result};
use crate::state::{CF_LOG, ReadView, keys};

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
}

const WATERMARK_TAG: u8 = 1;

pub fn encode_chunk<'a>(
    entries: impl IntoIterator<Item = (i64, &'a [u8])>,
    watermark: Option<i64>,
) -> Vec<u8> {
    let mut out = vec![0u8; 4];
    let mut count: u32 = 0;
    for (diff, row) in entries {
        out.extend_from_slice(&diff.to_le_bytes());
        out.extend_from_slice(&(row.len() as u32).to_le_bytes());
        out.extend_from_slice(row);
        count += 1;
    }
    out[..4].copy_from_slice(&count.to_le_bytes());
    if let Some(watermark) = watermark {
        out.push(WATERMARK_TAG);
        out.extend_from_slice(&watermark.to_le_bytes());
    }
    out
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
    let mut entries = Vec::with_capacity(count);
    let mut at = 4;
    for _ in 0..count {
        let diff = i64::from_le_bytes(take::<8>(bytes, at)?);
        let len = u32::from_le_bytes(take::<4>(bytes, at + 8)?) as usize;
        let start = at + 12;
        let row = bytes.get(start..start + len).ok_or_else(corrupt)?;
        entries.push(ChunkEntry { diff, row });
        at = start + len;
    }
    let watermark = match bytes.get(at) {
        Some(&WATERMARK_TAG) => Some(i64::from_le_bytes(take::<8>(bytes, at + 1)?)),
        _ => None,
    };
    Ok(Chunk { entries, watermark })
}

fn take<const N: usize>(bytes: &[u8], at: usize) -> Result<[u8; N]> {
    bytes
        .get(at..at + N)
        .and_then(|b| b.try_into().ok())
        .ok_or_else(corrupt)
}

fn corrupt() -> Error {
    Error::Internal("a log chunk is truncated".into())
}

/// Read a topic partition from `from` on, chunk by chunk, as of a snapshot.
///
/// `visit` receives each chunk's base offset and its records; it returns
/// false to stop early.
pub fn read_partition(
    view: &ReadView,
    topic: u64,
    partition: u32,
    from: u64,
    mut visit: impl FnMut(u64, Chunk<'_>) -> Result<bool>,
) -> Result<()> {
    let prefix = keys::log_partition_prefix(topic, partition);
    let upper = keys::prefix_end(&prefix);
    // A chunk that starts before `from` may still hold it: start one chunk early.
    let lower = keys::log_key(topic, partition, from.saturating_sub(CHUNK_ROWS as u64 - 1));
    view.scan(CF_LOG, lower, upper, |key, value| {
        let base = keys::log_key_offset(key).ok_or_else(corrupt)?;
        let chunk = decode_chunk(value)?;
        let end = base + chunk.entries.len() as u64;
        // An empty chunk at `from` still carries a watermark worth reading.
        if end < from || (end == from && !(chunk.entries.is_empty() && base == from)) {
            return Ok(true);
        }
        let skip = from.saturating_sub(base) as usize;
        let mut entries = chunk.entries;
        entries.drain(..skip.min(entries.len()));
        visit(
            base + skip as u64,
            Chunk {
                entries,
                watermark: chunk.watermark,
            },
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_round_trip() {
        let rows: Vec<&[u8]> = vec![b"one", b"", b"three"];
        let encoded = encode_chunk(rows.iter().zip([1, -1, 1]).map(|(r, d)| (d, *r)), None);
        let chunk = decode_chunk(&encoded).expect("decode");
        assert_eq!(chunk.entries.len(), 3);
        assert_eq!(chunk.watermark, None);
        let marked = encode_chunk([(1, &b"x"[..])], Some(-7));
        assert_eq!(decode_chunk(&marked).expect("decode").watermark, Some(-7));
        assert_eq!(chunk.entries[1], ChunkEntry { diff: -1, row: b"" });
        assert_eq!(chunk.entries[2].row, b"three");
    }

    #[test]
    fn truncated_chunks_are_errors_not_panics() {
        let encoded = encode_chunk([(1, &b"abc"[..])], None);
        assert!(decode_chunk(&encoded[..encoded.len() - 1]).is_err());
        assert!(decode_chunk(&[1]).is_err());
    }
}
