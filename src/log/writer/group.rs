//! Group commit: the requests taken together are checked one after the
//! other, each seeing what the ones before it staged, and what passed is
//! written in one `WriteBatch` with one sync. A request that fails its
//! checks gets its own error and the others still commit.

use std::collections::HashMap;

use rocksdb::{DB, WriteBatch};
use tokio::sync::oneshot;

use super::offsets::Offsets;
use super::overlay::{Pending, Staged};
use super::producer::Sequences;
use super::request::{Target, WriteOp, WriteRequest};
use crate::error::{Error, Result};
use crate::log::embedded::Stamp;
use crate::state::commitlog::{self, CommitLog, Unapplied};
use crate::state::disk::is_disk_full;
use crate::state::{CF_LOG, CF_ROWS, CF_STATE, cf, keys};

/// A request's reply channel and what it is told.
pub(super) type Reply = (oneshot::Sender<Result<u64>>, Result<u64>);

/// What the one committing thread owns.
pub(super) struct Committer {
    pub(super) offsets: Offsets,
    /// Where groups become durable; `None` when writes are not synced.
    pub(super) log: Option<CommitLog>,
}

/// Apply and commit one group; returns each request's reply.
pub(super) fn commit_group(
    db: &DB,
    committer: &mut Committer,
    requests: Vec<WriteRequest>,
    stamp: Stamp,
    later: Option<&Unapplied>,
) -> Vec<Reply> {
    let mut group = Group {
        stamp,
        ..Group::default()
    };
    let count = requests.len();
    let mut replies = Vec::with_capacity(count);
    for (index, request) in requests.into_iter().enumerate() {
        // Only later requests of the group read the overlay.
        let visible = index + 1 < count;
        replies.push(group.add(db, &mut committer.offsets, request, visible));
    }
    match group.commit(db, committer.log.as_mut(), later) {
        Ok(()) => replies,
        Err(e) => {
            committer.offsets.forget();
            fail_all(replies, &e)
        }
    }
}

/// A group that could not be written: the requests that passed their
/// checks fail too.
fn fail_all(replies: Vec<Reply>, error: &Error) -> Vec<Reply> {
    tracing::error!(cause = %error, "group commit failed");
    let full = is_disk_full(error);
    let message = error.to_string();
    replies
        .into_iter()
        .map(|(reply, outcome)| {
            let failed = if full {
                Error::DiskFull(format!("could not write, the disk is full: {message}"))
            } else {
                Error::Internal(format!("commit failed: {message}"))
            };
            (reply, outcome.and(Err(failed)))
        })
        .collect()
}

/// Everything the requests of one group have staged so far.
#[derive(Default)]
pub(super) struct Group {
    ops: Vec<Op>,
    /// Row keys (with table prefix) written by earlier requests, to the op that wrote them last.
    pub(super) overlay: HashMap<Vec<u8>, usize>,
    /// The last sequence number each producer committed in this group.
    producers: Sequences,
    /// Stamped on every log chunk the group writes.
    pub(super) stamp: Stamp,
}

enum Op {
    PutRow(Vec<u8>, Vec<u8>),
    DeleteRow(Vec<u8>),
    PutLog(Vec<u8>, Vec<u8>),
}

impl Group {
    /// Check one request and stage what it changes if it passes.
    fn add(
        &mut self,
        db: &DB,
        offsets: &mut Offsets,
        request: WriteRequest,
        visible: bool,
    ) -> Reply {
        let WriteRequest {
            target,
            op,
            watermark,
            producers,
            reply,
        } = request;
        let outcome = match self.producers.all_committed(db, &producers) {
            // Already committed: a retry after a lost acknowledgement.
            Ok(true) => Ok(op.row_count()),
            Ok(false) => self
                .check(db, offsets, &target, op, watermark)
                .map(|(rows, staged)| {
                    self.absorb(staged, offsets, visible);
                    self.producers.extend(producers);
                    rows
                }),
            Err(e) => Err(e),
        };
        (reply, outcome)
    }

    /// What one request would change, checked against the store and the
    /// group so far, and how many rows it counts.
    fn check(
        &self,
        db: &DB,
        offsets: &mut Offsets,
        target: &Target,
        op: WriteOp,
        watermark: Option<i64>,
    ) -> Result<(u64, Staged)> {
        let mut pending = Pending::new(self, offsets);
        let rows = pending.apply(db, target, op, watermark)?;
        Ok((rows, pending.finish()))
    }

    fn absorb(&mut self, staged: Staged, offsets: &mut Offsets, visible: bool) {
        // A request writes one table: its highest new key is its bound.
        let highest = staged
            .rows
            .iter()
            .filter(|(_, value)| value.is_some())
            .map(|(key, _)| key)
            .max();
        if let Some(key) = highest {
            offsets.raise_end(key);
        }
        self.ops.reserve(staged.rows.len() + staged.log.len());
        for (key, value) in staged.rows {
            if visible {
                self.overlay.insert(key.clone(), self.ops.len());
            }
            self.ops.push(match value {
                Some(v) => Op::PutRow(key, v),
                None => Op::DeleteRow(key),
            });
        }
        for (key, chunk) in staged.log {
            self.ops.push(Op::PutLog(key, chunk));
        }
        offsets.next.extend(staged.offsets);
        if let Some((topic, watermark)) = staged.watermark {
            offsets.watermarks.insert(topic, Some(watermark));
        }
    }

    /// The value an earlier request of this group left under a row key, if any wrote it.
    pub(super) fn lookup(&self, key: &[u8]) -> Option<Option<Vec<u8>>> {
        let index = self.overlay.get(key)?;
        match &self.ops[*index] {
            Op::PutRow(_, value) => Some(Some(value.clone())),
            Op::DeleteRow(_) | Op::PutLog(..) => Some(None),
        }
    }

    /// About what the group's `WriteBatch` will hold: each record's key and
    /// value plus a few bytes of tag, family and lengths.
    fn batch_bytes(&self) -> usize {
        const RECORD: usize = 16;
        let ops: usize = self
            .ops
            .iter()
            .map(|op| match op {
                Op::PutRow(k, v) | Op::PutLog(k, v) => k.len() + v.len() + RECORD,
                Op::DeleteRow(k) => k.len() + RECORD,
            })
            .sum();
        ops + self.producers.batch_bytes() + 64
    }

    fn commit(
        self,
        db: &DB,
        ring: Option<&mut CommitLog>,
        later: Option<&Unapplied>,
    ) -> Result<()> {
        let rows = cf(db, CF_ROWS);
        let log = cf(db, CF_LOG);
        // Sized up front: a bulk load's batch would otherwise grow by
        // doubling, copying itself and faulting in fresh pages each time.
        let mut batch = WriteBatch::with_capacity_bytes(self.batch_bytes());
        batch.put_cf(
            cf(db, CF_STATE),
            keys::SEQUENCE_KEY,
            self.stamp.epoch.to_be_bytes(),
        );
        self.producers.put(db, &mut batch);
        for op in self.ops {
            match op {
                Op::PutRow(k, v) => batch.put_cf(rows, k, v),
                Op::DeleteRow(k) => batch.delete_cf(rows, k),
                Op::PutLog(k, v) => batch.put_cf(log, k, v),
            }
        }
        match ring {
            Some(ring) => ring.commit(db, self.stamp.epoch, batch, later),
            None => commitlog::write_unsynced(db, batch),
        }
    }
}
