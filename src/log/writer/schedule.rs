//! Who commits, and when. A statement that finds the writer idle commits
//! its own write on its own thread, as a PostgreSQL backend flushes its own
//! WAL: a single client then pays for no hand-off to another thread and
//! back. Once statements write at the same time, they queue for the writer
//! thread, which takes every request waiting as one group, so that many
//! writers share one sync.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use rocksdb::DB;
use tokio::sync::{mpsc, watch};

use super::Now;
use super::bulk::{self, Stage};
use super::group::{Committer, Reply, commit_group};
use super::producer::{Producer, Sequences};
use super::request::{Target, WriteRequest};
use crate::error::{Error, Result};
use crate::log::embedded::Stamp;
use crate::state::Store;
use crate::state::commitlog::Unapplied;
use crate::state::disk::DiskGuard;

/// Requests committed together at most; bounds a group's memory.
const MAX_GROUP: usize = 256;

/// How long statements stop committing inline after two wrote at once.
/// Under concurrency an inline commit would block one of the few threads
/// that serve connections for a whole sync, and commit a group of one.
const CONTENDED: Duration = Duration::from_millis(100);

/// What every committer shares: the writer thread and inline callers.
pub(super) struct Shared {
    db: Weak<DB>,
    disk: Option<DiskGuard>,
    /// Held while a group commits, so that one group commits at a time.
    committer: parking_lot::Mutex<Committer>,
    /// An inline commit's group, synced and acknowledged, not yet applied.
    unapplied: Arc<Unapplied>,
    sequence: watch::Sender<u64>,
    /// Requests sent to the writer thread that it has not taken yet; while
    /// there are any, nobody commits inline ahead of them.
    pub(super) queued: AtomicUsize,
    /// Until when (microseconds since `started`) statements leave commits
    /// to the writer thread, because several were writing at once lately.
    contended_until: AtomicU64,
    started: Instant,
    now: Now,
}

impl Shared {
    pub(super) fn new(
        store: &Store,
        disk: Option<DiskGuard>,
        committer: Committer,
        sequence: watch::Sender<u64>,
        now: Now,
    ) -> Shared {
        Shared {
            db: Arc::downgrade(store.db()),
            disk,
            committer: parking_lot::Mutex::new(committer),
            unapplied: store.unapplied().clone(),
            sequence,
            queued: AtomicUsize::new(0),
            contended_until: AtomicU64::new(0),
            started: Instant::now(),
            now,
        }
    }

    /// The store, unless it has closed.
    pub(super) fn db(&self) -> Result<Arc<DB>> {
        self.db.upgrade().ok_or(Error::ShuttingDown)
    }

    fn now(&self) -> u64 {
        self.started.elapsed().as_micros() as u64
    }

    fn contended(&self) -> bool {
        self.now() < self.contended_until.load(Ordering::Relaxed)
    }

    fn mark_contended(&self) {
        let until = self.now() + CONTENDED.as_micros() as u64;
        self.contended_until.fetch_max(until, Ordering::Relaxed);
    }

    /// Apply an inline group once its statement has replied. On a
    /// connection thread the task runs when the connection turns to wait
    /// for its client, so the reply does not wait for RocksDB.
    fn apply_after_reply(self: &Arc<Self>) {
        if !self.unapplied.is_waiting() {
            return;
        }
        let shared = self.clone();
        let apply = move || {
            if let Some(db) = shared.db.upgrade() {
                shared.unapplied.settle_for_read(&db);
            }
        };
        match tokio::runtime::Handle::try_current() {
            Ok(handle) => drop(handle.spawn(async move { apply() })),
            Err(_) => apply(),
        }
    }

    /// Commit `request` on this thread when the writer is idle and nobody
    /// else wrote lately; hands it back otherwise.
    ///
    /// This blocks the calling thread for one sync. At most one thread does
    /// so at a time, and only while statements write one at a time.
    pub(super) fn commit_inline(self: &Arc<Self>, request: WriteRequest) -> Option<WriteRequest> {
        if self.queued.load(Ordering::Acquire) != 0 || self.contended() {
            return Some(request);
        }
        let Some(mut committer) = self.committer.try_lock() else {
            self.mark_contended();
            return Some(request);
        };
        self.commit(&mut committer, vec![request], true);
        drop(committer);
        self.apply_after_reply();
        if self.queued.load(Ordering::Acquire) != 0 {
            self.mark_contended();
        }
        None
    }

    /// The stamp of the next group's log chunks.
    fn next_stamp(&self) -> Stamp {
        Stamp {
            epoch: *self.sequence.borrow() + 1,
            time: (self.now)(),
            compacted: false,
        }
    }

    /// Commit one group and answer each request; false once the store is
    /// gone. An `inline` group is applied to RocksDB after its reply.
    fn commit(&self, committer: &mut Committer, requests: Vec<WriteRequest>, inline: bool) -> bool {
        let Some(db) = self.db.upgrade() else {
            for request in requests {
                let _ = request.reply.send(Err(Error::ShuttingDown));
            }
            return false;
        };
        let stamp = self.next_stamp();
        let later = inline.then_some(self.unapplied.as_ref());
        let replies = match self.disk.as_ref().map(DiskGuard::check) {
            Some(Err(full)) => refuse(requests, &full),
            // Checks read the store: the group before must be in it.
            _ => match self.unapplied.settle(&db) {
                Err(e) => refuse(requests, &e),
                Ok(()) => commit_group(&db, committer, requests, stamp, later),
            },
        };
        if replies.iter().any(|(_, outcome)| outcome.is_ok()) {
            self.sequence.send_replace(stamp.epoch);
        }
        // Let go of the database before anyone hears back: whoever owns the
        // store must be the one that closes it.
        drop(db);
        for (reply, outcome) in replies {
            // A client that went away does not undo a committed write.
            let _ = reply.send(outcome);
        }
        true
    }

    /// Commit a staged bulk load under the commit lock, between groups.
    pub(super) fn commit_stage(
        &self,
        target: &Target,
        mut stage: Stage,
        producers: &[Producer],
    ) -> Result<u64> {
        let db = self.db()?;
        if let Some(disk) = &self.disk {
            disk.check()?;
        }
        let mut committer = self.committer.lock();
        // Checks read the store: the group before must be in it.
        self.unapplied.settle(&db)?;
        if stage.rows() == 0 || Sequences::default().all_committed(&db, producers)? {
            return Ok(stage.rows());
        }
        let stamp = self.next_stamp();
        match bulk::commit(&db, &mut committer, target, &mut stage, stamp, producers) {
            Ok(rows) => {
                self.sequence.send_replace(stamp.epoch);
                Ok(rows)
            }
            Err(e) => {
                committer.offsets.forget();
                Err(e)
            }
        }
    }
}

impl Shared {
    /// Forgets what the commits remember of a table whose stored data
    /// was deleted: its next offsets, watermark and row bound.
    pub(super) fn forget_table(&self, table: u64, topic: u64) {
        self.committer.lock().offsets.forget_table(table, topic);
    }
}

impl std::fmt::Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shared").finish_non_exhaustive()
    }
}

/// Start the writer thread. It stops when every sender is dropped.
pub(super) fn spawn(shared: Arc<Shared>, rx: mpsc::Receiver<WriteRequest>) -> Result<()> {
    std::thread::Builder::new()
        .name("weir-writer".into())
        .spawn(move || run(&shared, rx))?;
    Ok(())
}

fn run(shared: &Shared, mut rx: mpsc::Receiver<WriteRequest>) {
    while let Some(first) = rx.blocking_recv() {
        let mut requests = vec![first];
        while requests.len() < MAX_GROUP {
            match rx.try_recv() {
                Ok(next) => requests.push(next),
                Err(_) => break,
            }
        }
        shared.queued.fetch_sub(requests.len(), Ordering::AcqRel);
        if requests.len() > 1 {
            shared.mark_contended();
        }
        let mut committer = shared.committer.lock();
        if !shared.commit(&mut committer, requests, false) {
            break;
        }
    }
}

/// Every request of a group refused: the disk is nearly full, or the
/// group before could not be applied.
fn refuse(requests: Vec<WriteRequest>, error: &Error) -> Vec<Reply> {
    let message = error.to_string();
    requests
        .into_iter()
        .map(|r| {
            let failed = match error {
                Error::DiskFull(_) => Error::DiskFull(message.clone()),
                _ => Error::Io(std::io::Error::other(message.clone())),
            };
            (r.reply, Err(failed))
        })
        .collect()
}
