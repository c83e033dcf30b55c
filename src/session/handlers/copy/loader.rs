//! The loader of a large COPY: its parts parsed and encoded on a few
//! threads side by side, and staged in data order by one more.
//!
//! Part `i` goes to worker `i mod n`, and each worker answers on a channel
//! of its own, so the stager takes the answers in data order by visiting
//! the workers in turn. Every channel holds one part at most: memory stays
//! a few parts whatever the size of the data, and a part that is slow to
//! parse holds the next ones back instead of letting them pile up.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc as sync;

use tokio::sync::{mpsc, oneshot};

use super::{Layout, parse};
use crate::error::{Error, Result};
use crate::log::writer::Stage;
use crate::session::Engine;
use crate::sql::write::{EncodedPart, encode_part};

/// Workers at most: each holds a few parts in memory.
const MAX_WORKERS: usize = 4;

/// Threads that parse, encode and stage the parts of one COPY.
pub struct Loader {
    workers: Vec<mpsc::Sender<Vec<u8>>>,
    /// Parts handed on so far; the stager checks that it staged them all.
    sent: Arc<AtomicUsize>,
    done: oneshot::Receiver<Result<Stage>>,
    /// Set when the COPY ends without `CopyDone`: the workers stop at
    /// their next part instead of parsing what is queued.
    abandoned: Arc<AtomicBool>,
}

impl Drop for Loader {
    fn drop(&mut self) {
        self.abandoned.store(true, Ordering::Release);
    }
}

impl std::fmt::Debug for Loader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Loader").finish_non_exhaustive()
    }
}

/// A part parsed and encoded, or why not.
type Outcome = std::result::Result<Encoded, Failed>;

struct Encoded {
    rows: EncodedPart,
    /// Lines (CSV: records) the part holds, for the next parts' errors.
    lines: usize,
    /// A line `\.` ended the data in this part.
    ended: bool,
}

struct Failed {
    error: Error,
    /// The part, when parsing failed: its error names a line of the part,
    /// which the stager, knowing the lines before it, parses again to
    /// name the line of the whole data.
    part: Option<Vec<u8>>,
}

impl Loader {
    pub(super) fn start(engine: &Arc<Engine>, layout: Layout) -> Result<Loader> {
        let stage = engine.writer.stage()?;
        let abandoned = Arc::new(AtomicBool::new(false));
        let sent = Arc::new(AtomicUsize::new(0));
        let layout = Arc::new(layout);
        let count = std::thread::available_parallelism()
            .map_or(1, |n| n.get())
            .min(MAX_WORKERS);
        let mut workers = Vec::with_capacity(count);
        let mut answers = Vec::with_capacity(count);
        for index in 0..count {
            let (parts, receiver) = mpsc::channel(1);
            let (answer, answered) = sync::sync_channel(1);
            let (layout, stop) = (layout.clone(), abandoned.clone());
            std::thread::Builder::new()
                .name("weir-copy-parse".into())
                .spawn(move || work(&layout, index, count, receiver, answer, &stop))?;
            workers.push(parts);
            answers.push(answered);
        }
        let (reply, done) = oneshot::channel();
        let (stop, staged) = (abandoned.clone(), sent.clone());
        std::thread::Builder::new()
            .name("weir-copy".into())
            .spawn(move || {
                let outcome = stage_in_order(&layout, stage, &answers, &staged, &stop);
                let _ = reply.send(outcome);
            })?;
        Ok(Loader {
            workers,
            sent,
            done,
            abandoned,
        })
    }

    /// Hand on a part. A loader that stopped (a bad row, or `\.`) takes
    /// no more; what it stopped for is the statement's outcome.
    pub(super) async fn send(&mut self, part: Vec<u8>) {
        let index = self.sent.load(Ordering::Acquire);
        let Some(worker) = self.workers.get(index % self.workers.len().max(1)) else {
            return;
        };
        self.sent.store(index + 1, Ordering::Release);
        if worker.send(part).await.is_err() {
            self.workers.clear();
        }
    }

    pub(super) async fn finish(mut self) -> Result<Stage> {
        self.workers.clear();
        (&mut self.done)
            .await
            .map_err(|_| Error::Internal("the COPY loader thread stopped".into()))?
    }
}

/// A worker: parts `first`, `first + step`, ... parsed and encoded in turn.
fn work(
    layout: &Layout,
    first: usize,
    step: usize,
    mut parts: mpsc::Receiver<Vec<u8>>,
    answers: sync::SyncSender<Outcome>,
    abandoned: &AtomicBool,
) {
    let mut index = first;
    while let Some(part) = parts.blocking_recv() {
        if abandoned.load(Ordering::Acquire) {
            return;
        }
        if answers.send(encode(layout, index == 0, part)).is_err() {
            return;
        }
        index += step;
    }
}

fn encode(layout: &Layout, first: bool, part: Vec<u8>) -> Outcome {
    let parsed = match parse(layout, &part, first, 0) {
        Ok(parsed) => parsed,
        Err(error) => {
            let part = Some(part);
            return Err(Failed { error, part });
        }
    };
    drop(part);
    match encode_part(&layout.table, &parsed.batches) {
        Ok(rows) => Ok(Encoded {
            rows,
            lines: parsed.lines,
            ended: parsed.ended,
        }),
        Err(error) => Err(Failed { error, part: None }),
    }
}

/// The stager: each worker's answers taken in turn and staged. On an error
/// the stage is dropped, which removes it from disk.
fn stage_in_order(
    layout: &Layout,
    mut stage: Stage,
    answers: &[sync::Receiver<Outcome>],
    sent: &AtomicUsize,
    abandoned: &AtomicBool,
) -> Result<Stage> {
    let mut lines = 0;
    let mut index = 0;
    // A worker's channel closes once its parts have run out.
    while let Ok(outcome) = answers[index % answers.len()].recv() {
        let part = outcome.map_err(|failed| renumbered(layout, failed, index == 0, lines))?;
        part.rows.stage(&layout.table, &mut stage)?;
        if part.ended {
            return Ok(stage);
        }
        lines += part.lines;
        index += 1;
    }
    if abandoned.load(Ordering::Acquire) {
        return Err(Error::Canceled);
    }
    if index != sent.load(Ordering::Acquire) {
        return Err(Error::Internal(format!(
            "the COPY loader staged {index} of {} parts",
            sent.load(Ordering::Acquire)
        )));
    }
    Ok(stage)
}

/// A part's error with the line numbered in the whole data.
fn renumbered(layout: &Layout, failed: Failed, first: bool, lines: usize) -> Error {
    match failed.part {
        Some(part) => parse(layout, &part, first, lines)
            .err()
            .unwrap_or(failed.error),
        None => failed.error,
    }
}
