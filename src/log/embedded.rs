//! The embedded log, stored in the node's RocksDB: tables' logs in the
//! `log` column family, views' changelogs in `changelog` ([`Topic`]).
//! Records are laid out in chunks ([`super::chunk`]), one RocksDB entry each,
//! keyed by topic, partition and the chunk's first offset.

use super::Topic;
pub use super::chunk::{
    CHUNK_ROWS, Chunk, ChunkBody, ChunkEntry, Stamp, TRAILER_BYTES, chunk_head, chunk_len,
    decode_chunk, encode_chunk, push_trailer,
};
use super::chunk::{corrupt, head};
use crate::error::Result;
use crate::state::{ReadView, keys};

/// The chunks of a partition that start at or after `from`, undecoded:
/// base offset, record count, stamp and the stored bytes.
pub fn read_raw(
    view: &ReadView,
    topic: Topic,
    partition: u32,
    from: u64,
    mut visit: impl FnMut(u64, u64, Option<Stamp>, &[u8]) -> Result<bool>,
) -> Result<()> {
    let prefix = keys::log_partition_prefix(topic.id, partition);
    let upper = keys::prefix_end(&prefix);
    view.scan(
        topic.family,
        keys::log_key(topic.id, partition, from),
        upper,
        |key, value| {
            let base = keys::log_key_offset(key).ok_or_else(corrupt)?;
            let (count, stamp) = chunk_head(value)?;
            visit(base, count, stamp, value)
        },
    )
}

/// Read a topic partition from `from` on, chunk by chunk, as of a snapshot.
///
/// `visit` receives each chunk's base offset and its records; it returns
/// false to stop early.
pub fn read_partition(
    view: &ReadView,
    topic: Topic,
    partition: u32,
    from: u64,
    mut visit: impl FnMut(u64, Chunk<'_>) -> Result<bool>,
) -> Result<()> {
    let prefix = keys::log_partition_prefix(topic.id, partition);
    let upper = keys::prefix_end(&prefix);
    // A chunk that starts before `from` may still hold it: start one chunk early.
    let lower = keys::log_key(
        topic.id,
        partition,
        from.saturating_sub(CHUNK_ROWS as u64 - 1),
    );
    view.scan(topic.family, lower, upper, |key, value| {
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
                stamp: chunk.stamp,
            },
        )
    })
}

/// Where a partition ends in a snapshot, and the watermark it carries there.
#[derive(Debug, Clone, Copy, Default)]
pub struct Tail {
    pub end: u64,
    pub watermark: Option<i64>,
}

pub fn tail(view: &ReadView, topic: Topic, partition: u32) -> Result<Tail> {
    let prefix = keys::log_partition_prefix(topic.id, partition);
    let Some((key, value)) =
        view.at_or_before(topic.family, &prefix, &keys::prefix_end(&prefix))?
    else {
        return Ok(Tail::default());
    };
    let base = keys::log_key_offset(&key).ok_or_else(corrupt)?;
    let (count, watermark, _) = head(&value)?;
    Ok(Tail {
        end: base + count,
        watermark,
    })
}

/// The chunk holding `offset` (or the last one before it): base and stamp.
fn chunk_at(
    view: &ReadView,
    topic: Topic,
    partition: u32,
    offset: u64,
) -> Result<Option<(u64, u64, Option<Stamp>)>> {
    let prefix = keys::log_partition_prefix(topic.id, partition);
    let key = keys::log_key(topic.id, partition, offset);
    let Some((key, value)) = view.at_or_before(topic.family, &prefix, &key)? else {
        return Ok(None);
    };
    let base = keys::log_key_offset(&key).ok_or_else(corrupt)?;
    let (count, stamp) = chunk_head(&value)?;
    Ok(Some((base, base + count, stamp)))
}

/// The first offset of a partition written after `epoch` (stamps never go
/// back along a partition, so a binary search over chunks finds it), or,
/// when the partition's compacted prefix already folded `epoch` in, the
/// oldest epoch it can resume after.
pub fn after_epoch(
    view: &ReadView,
    topic: Topic,
    partition: u32,
    epoch: u64,
) -> Result<std::result::Result<u64, u64>> {
    let prefix = keys::log_partition_prefix(topic.id, partition);
    let mut lower = 0;
    let mut first_chunk = None;
    view.scan(
        topic.family,
        prefix.clone(),
        keys::prefix_end(&prefix),
        |key, value| {
            lower = keys::log_key_offset(key).ok_or_else(corrupt)?;
            first_chunk = Some(chunk_head(value)?.1);
            Ok(false)
        },
    )?;
    if let Some(Some(stamp)) = first_chunk
        && stamp.compacted
        && epoch < stamp.epoch
    {
        return Ok(Err(stamp.epoch));
    }
    let mut upper = tail(view, topic, partition)?.end;
    // Invariant: every chunk ending at or before `lower` is at or before
    // `epoch`; every chunk starting at or after `upper` is after it.
    while lower < upper {
        let middle = lower + (upper - lower) / 2;
        let Some((base, end, stamp)) = chunk_at(view, topic, partition, middle)? else {
            break;
        };
        if stamp.is_none_or(|s| s.epoch <= epoch) {
            lower = end.max(middle + 1);
        } else {
            upper = base;
        }
    }
    Ok(Ok(lower))
}

/// Fold the start of a partition into one consolidated run: every chunk
/// written before `before` (processing time), and every chunk a previous
/// compaction made, as long as it ends at or before `limit`. The run ends
/// where the folded chunks ended, so later offsets keep their meaning, and
/// is stamped compacted with the newest epoch it holds. Returns that epoch,
/// or `None` when there was nothing new to fold.
///
/// The caller must be the partition's only writer while this runs.
pub fn compact(
    db: &rocksdb::DB,
    topic: Topic,
    partition: u32,
    before: i64,
    limit: u64,
) -> Result<Option<u64>> {
    rewrite_start(db, topic, partition, before, limit, true)
}

/// Drop the start of an append-only partition: the chunks [`compact`]
/// would fold, without their records. The empty chunk stamped compacted
/// that takes their place tells a change stream asked to resume inside
/// them that they are gone. Returns the newest dropped epoch, or `None`
/// when nothing went.
pub fn expire(
    db: &rocksdb::DB,
    topic: Topic,
    partition: u32,
    before: i64,
    limit: u64,
) -> Result<Option<u64>> {
    rewrite_start(db, topic, partition, before, limit, false)
}

/// Replace the partition's old chunks by one compacted run, holding their
/// records consolidated when `keep` and none otherwise. The last chunk
/// stays as written: it is where the partition's end and watermark are
/// read from.
fn rewrite_start(
    db: &rocksdb::DB,
    topic: Topic,
    partition: u32,
    before: i64,
    limit: u64,
    keep: bool,
) -> Result<Option<u64>> {
    let prefix = keys::log_partition_prefix(topic.id, partition);
    let Some(last) = last_base(db, topic.family, &prefix)? else {
        return Ok(None);
    };
    let mut fold = Fold::default();
    let mut iter = db.raw_iterator_cf(crate::state::cf(db, topic.family));
    iter.seek(&prefix);
    while let (Some(key), Some(value)) = (iter.key(), iter.value()) {
        if !key.starts_with(&prefix) {
            break;
        }
        let base = keys::log_key_offset(key).ok_or_else(corrupt)?;
        let (count, watermark, stamp) = head(value)?;
        let end = base + count;
        let Some(stamp) = stamp else { break };
        // A watermark-only chunk sits at the end, where the next records go.
        let pending_mark = count == 0 && !stamp.compacted;
        let too_new = !stamp.compacted && stamp.time >= before;
        if base == last || pending_mark || end > limit || too_new {
            break;
        }
        if keep {
            fold.add_records(&decode_chunk(value)?);
        }
        fold.note(stamp, watermark, end);
        iter.next();
    }
    iter.status()?;
    if !fold.fresh || fold.end == 0 {
        return Ok(None);
    }
    let mut batch = rocksdb::WriteBatch::default();
    let family = crate::state::cf(db, topic.family);
    batch.delete_range_cf(
        family,
        &prefix,
        &keys::log_key(topic.id, partition, fold.end),
    );
    let epoch = fold.stamp.epoch;
    for (key, chunk) in fold.chunks(topic.id, partition) {
        batch.put_cf(family, key, chunk);
    }
    db.write(batch)?;
    Ok(Some(epoch))
}

/// The base offset of a partition's last chunk.
fn last_base(db: &rocksdb::DB, family: &str, prefix: &[u8]) -> Result<Option<u64>> {
    let mut iter = db.raw_iterator_cf(crate::state::cf(db, family));
    iter.seek_for_prev(keys::prefix_end(prefix));
    iter.status()?;
    match iter.key() {
        Some(key) if key.starts_with(prefix) => {
            Ok(Some(keys::log_key_offset(key).ok_or_else(corrupt)?))
        }
        _ => Ok(None),
    }
}

/// Move a view's changelog out of the `log` family, where versions before
/// the `changelog` family kept it. Returns whether there was one. The
/// copies are written before the delete, in that order in RocksDB's log,
/// so a crash midway leaves every chunk in the old family at least, and
/// the next start moves them again.
pub fn move_changelog(db: &rocksdb::DB, view: u64) -> Result<bool> {
    const BATCH_BYTES: usize = 32 << 20;
    let prefix = keys::table_prefix(view);
    let end = keys::prefix_end(&prefix);
    let old = crate::state::cf(db, crate::state::CF_LOG);
    let new = crate::state::cf(db, crate::state::CF_CHANGELOG);
    let mut iter = db.raw_iterator_cf(old);
    iter.seek(&prefix);
    let mut batch = rocksdb::WriteBatch::default();
    let mut moved = false;
    while let (Some(key), Some(value)) = (iter.key(), iter.value()) {
        if !key.starts_with(&prefix) {
            break;
        }
        batch.put_cf(new, key, value);
        moved = true;
        if batch.size_in_bytes() >= BATCH_BYTES {
            db.write(std::mem::take(&mut batch))?;
        }
        iter.next();
    }
    iter.status()?;
    if moved {
        batch.delete_range_cf(old, &prefix, &end);
        db.write(batch)?;
    }
    Ok(moved)
}

/// Records being folded by [`compact`]: net weight per row, in first-seen order.
#[derive(Default)]
struct Fold {
    order: Vec<Vec<u8>>,
    sums: std::collections::HashMap<Vec<u8>, i64>,
    stamp: Stamp,
    watermark: Option<i64>,
    end: u64,
    /// Some folded chunk was not compacted before.
    fresh: bool,
}

impl Fold {
    fn add_records(&mut self, chunk: &Chunk<'_>) {
        for entry in &chunk.entries {
            match self.sums.get_mut(entry.row) {
                Some(sum) => *sum += entry.diff,
                None => {
                    self.order.push(entry.row.to_vec());
                    self.sums.insert(entry.row.to_vec(), entry.diff);
                }
            }
        }
    }

    /// A folded chunk's stamp, watermark and end.
    fn note(&mut self, stamp: Stamp, watermark: Option<i64>, end: u64) {
        self.stamp.epoch = self.stamp.epoch.max(stamp.epoch);
        self.stamp.time = self.stamp.time.max(stamp.time);
        self.watermark = self.watermark.max(watermark);
        self.end = end;
        self.fresh |= !stamp.compacted;
    }

    /// The folded run as chunks ending at `end`; an empty chunk just
    /// before `end` when everything cancelled, to keep the stamp.
    fn chunks(self, topic: u64, partition: u32) -> Vec<(Vec<u8>, Vec<u8>)> {
        let records: Vec<(i64, Vec<u8>)> = self
            .order
            .into_iter()
            .filter_map(|row| {
                let sum = self.sums.get(&row).copied().unwrap_or(0);
                (sum != 0).then_some((sum, row))
            })
            .collect();
        let stamp = Some(Stamp {
            compacted: true,
            ..self.stamp
        });
        if records.is_empty() {
            let key = keys::log_key(topic, partition, self.end.saturating_sub(1));
            return vec![(key, encode_chunk(std::iter::empty(), self.watermark, stamp))];
        }
        let mut at = self.end - records.len() as u64;
        let pieces = records.len().div_ceil(CHUNK_ROWS);
        let mut out = Vec::with_capacity(pieces);
        for (i, piece) in records.chunks(CHUNK_ROWS).enumerate() {
            let mark = if i + 1 == pieces {
                self.watermark
            } else {
                None
            };
            let entries = piece.iter().map(|(d, r)| (*d, r.as_slice()));
            out.push((
                keys::log_key(topic, partition, at),
                encode_chunk(entries, mark, stamp),
            ));
            at += piece.len() as u64;
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_round_trip() {
        let rows: Vec<&[u8]> = vec![b"one", b"", b"three"];
        let encoded = encode_chunk(
            rows.iter().zip([1, -1, 1]).map(|(r, d)| (d, *r)),
            None,
            None,
        );
        let chunk = decode_chunk(&encoded).expect("decode");
        assert_eq!(chunk.entries.len(), 3);
        assert_eq!(chunk.watermark, None);
        let marked = encode_chunk([(1, &b"x"[..])], Some(-7), None);
        assert_eq!(decode_chunk(&marked).expect("decode").watermark, Some(-7));
        let stamp = Stamp {
            epoch: 9,
            time: 12,
            compacted: true,
        };
        let encoded = encode_chunk([(1, &b"x"[..]), (-1, &b"yz"[..])], Some(3), Some(stamp));
        assert_eq!(decode_chunk(&encoded).expect("decode").stamp, Some(stamp));
        assert_eq!(chunk_head(&encoded).expect("head"), (2, Some(stamp)));
        let unmarked = encode_chunk(std::iter::empty(), None, Some(stamp));
        assert_eq!(decode_chunk(&unmarked).expect("decode").stamp, Some(stamp));
        assert_eq!(chunk.entries[1], ChunkEntry { diff: -1, row: b"" });
        assert_eq!(chunk.entries[2].row, b"three");
    }

    #[test]
    fn a_changelog_left_in_the_log_family_moves_to_its_own() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = crate::state::Store::open(dir.path()).expect("open");
        let db = store.db();
        let log = crate::state::cf(db, crate::state::CF_LOG);
        let chunk = |row: &[u8]| encode_chunk([(1, row)], None, None);
        // The view (5) between a table (4) and another view (6), as older
        // versions stored them.
        for (topic, offset, row) in [(4, 0, &b"t"[..]), (5, 0, b"a"), (5, 1, b"b"), (6, 0, b"c")] {
            db.put_cf(log, keys::log_key(topic, 0, offset), chunk(row))
                .expect("put");
        }
        assert!(move_changelog(db, 5).expect("move"));
        assert!(!move_changelog(db, 5).expect("move again"));
        let rows = |topic: Topic| {
            let mut rows = Vec::new();
            read_partition(&store.read_view(), topic, 0, 0, |_, chunk| {
                rows.extend(chunk.entries.iter().map(|e| e.row.to_vec()));
                Ok(true)
            })
            .expect("read");
            rows
        };
        assert_eq!(rows(Topic::changelog(5)), [b"a".to_vec(), b"b".to_vec()]);
        assert!(rows(Topic::table(5)).is_empty());
        assert_eq!(rows(Topic::table(4)), [b"t".to_vec()]);
        assert_eq!(rows(Topic::table(6)), [b"c".to_vec()]);
        assert!(rows(Topic::changelog(6)).is_empty());
    }

    #[test]
    fn truncated_chunks_are_errors_not_panics() {
        let encoded = encode_chunk([(1, &b"abc"[..])], None, None);
        assert!(decode_chunk(&encoded[..encoded.len() - 1]).is_err());
        assert!(decode_chunk(&[1]).is_err());
    }
}
