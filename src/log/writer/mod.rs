//! The writer: applies every table write, one group at a time, and
//! group-commits. Writes end in a table's log (and, for keyed tables, its
//! rows), so the writer sits with the log, above storage.
//!
//! A statement hands the writer a [`WriteRequest`] ([`request`]). Requests
//! are committed inline or taken by the writer thread as a group
//! ([`schedule`]). Each is checked against the committed state plus the
//! requests before it in the same group ([`overlay`]), and the group is
//! committed in one RocksDB `WriteBatch` with one fsync ([`group`]). A
//! request that fails its checks (a duplicate key, a concurrent update)
//! contributes nothing and gets its own error; the others commit. So a
//! statement is atomic, and many concurrent writers share one sync.
//!
//! Log offsets are assigned under the commit lock, which makes each
//! partition's offsets dense and ordered by commit ([`offsets`]). Writes
//! tagged by an idempotent producer commit once ([`producer`]).
//!
//! A bulk load too large for one `WriteBatch` is staged on disk and
//! committed apart from the groups, under the same lock: see [`bulk`].

mod bulk;
mod group;
mod offsets;
mod overlay;
mod producer;
mod request;
mod schedule;

use std::sync::Arc;
use std::sync::atomic::Ordering;

use rocksdb::DB;
use tokio::sync::{mpsc, oneshot, watch};

use crate::error::{Error, Result};
use crate::state::commitlog::CommitLog;
use crate::state::disk::DiskGuard;
use crate::state::{Store, keys};
use group::Committer;
use offsets::Offsets;
use schedule::Shared;

pub use bulk::Stage;
pub use offsets::{log_end, log_watermark};
pub use producer::{PRODUCER, Producer, current_producer, producer_seq};
pub use request::{
    Change, KeyRenderer, KeyedRow, Merge, MergeFn, Target, UpsertRow, WriteOp, WriteRequest,
};

/// A handle to the writer.
#[derive(Clone, Debug)]
pub struct Writer {
    tx: mpsc::Sender<WriteRequest>,
    /// The sequence number of the last committed group.
    committed: watch::Receiver<u64>,
    shared: Arc<Shared>,
}

impl Writer {
    /// Start the writer thread. It stops when every handle is dropped.
    ///
    /// The thread holds the database only while it commits, so that whoever
    /// owns the store decides when RocksDB closes (it must close before exit).
    ///
    /// `sync` false acknowledges writes before they reach the disk: for
    /// measuring what fsync costs, never for data a power cut must not lose.
    /// Log chunks are stamped with `now`'s time: what retention and
    /// compaction measure age by.
    pub fn start(store: &Store, disk: Option<DiskGuard>, sync: bool, now: Now) -> Result<Writer> {
        let db = store.db();
        let (tx, rx) = mpsc::channel(1024);
        // Opened even when writes are not synced: what a power cut took from
        // an earlier run that synced must come back either way.
        let log = recover(store)?;
        let log = sync.then_some(log);
        let (sequence, committed) = watch::channel(read_sequence(db)?);
        let committer = Committer {
            offsets: Offsets::default(),
            log,
        };
        let shared = Arc::new(Shared::new(store, disk, committer, sequence, now));
        schedule::spawn(shared.clone(), rx)?;
        Ok(Writer {
            tx,
            committed,
            shared,
        })
    }

    /// Watches the sequence number of the last committed group: every table
    /// log chunk is stamped with the sequence of the group that wrote it.
    pub fn committed(&self) -> watch::Receiver<u64> {
        self.committed.clone()
    }

    /// Apply one statement's writes; returns the rows affected once durable.
    pub async fn write(&self, target: Target, op: WriteOp) -> Result<u64> {
        self.write_marked(target, op, None).await
    }

    /// Like [`Writer::write`], for a table with a watermark: the table's
    /// watermark becomes `max(current, watermark)` once the write commits,
    /// and the write's last log chunks carry it.
    pub async fn write_marked(
        &self,
        target: Target,
        op: WriteOp,
        watermark: Option<i64>,
    ) -> Result<u64> {
        let producers = current_producer().into_iter().collect();
        self.write_from(target, op, watermark, producers).await
    }

    /// Like [`Writer::write_marked`], for a connector: the write commits
    /// together with its producer's position, and a position already
    /// committed is not written again.
    pub async fn write_from(
        &self,
        target: Target,
        op: WriteOp,
        watermark: Option<i64>,
        producers: Vec<Producer>,
    ) -> Result<u64> {
        let (reply, rx) = oneshot::channel();
        let request = WriteRequest {
            target,
            op,
            watermark,
            producers,
            reply,
        };
        if let Some(request) = self.shared.commit_inline(request) {
            self.shared.queued.fetch_add(1, Ordering::AcqRel);
            self.tx
                .send(request)
                .await
                .map_err(|_| Error::ShuttingDown)?;
        }
        rx.await.map_err(|_| Error::ShuttingDown)?
    }

    /// A new, empty stage for a bulk load into this store.
    /// Forgets what the writer remembers of a table whose log and rows
    /// were deleted while nothing wrote to it: the next write starts them
    /// again from offset 0, with no watermark.
    pub fn forget_table(&self, table: u64, topic: u64) {
        self.shared.forget_table(table, topic);
    }

    pub fn stage(&self) -> Result<Stage> {
        Stage::create(self.shared.db()?.path())
    }

    /// Commit a staged load as one statement, atomically; returns its rows.
    /// Other writes wait while its files are written and ingested.
    pub async fn commit_stage(&self, target: Target, stage: Stage) -> Result<u64> {
        let producers: Vec<Producer> = current_producer().into_iter().collect();
        let shared = self.shared.clone();
        let commit = move || shared.commit_stage(&target, stage, &producers);
        tokio::task::spawn_blocking(commit)
            .await
            .map_err(|e| Error::Internal(format!("a bulk load's commit failed: {e}")))?
    }
}

/// Processing time in microseconds since the Unix epoch: the node's clock,
/// which tests may drive by hand.
pub type Now = Arc<dyn Fn() -> i64 + Send + Sync>;

/// The wall clock, as a [`Now`].
pub fn wall_clock() -> Now {
    Arc::new(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_micros() as i64)
    })
}

/// Bring the store up to every write acknowledged before the last stop:
/// what the commit ring holds beyond RocksDB, and bulk loads that had
/// committed. The ring, ready for new records.
pub fn recover(store: &Store) -> Result<CommitLog> {
    let db = store.db();
    let log = CommitLog::open(db, read_sequence(db)?)?;
    // After the ring: a load's commit marker may be among what it replayed.
    bulk::recover(db)?;
    Ok(log)
}

fn read_sequence(db: &DB) -> Result<u64> {
    Ok(crate::state::read_u64(db, keys::SEQUENCE_KEY)?.unwrap_or(0))
}

#[cfg(test)]
mod tests;
