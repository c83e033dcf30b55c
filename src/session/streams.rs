//! Where COPY change streams do their work: threads of the lowest CPU
//! priority, apart from the dataflow's.
//!
//! A subscriber reads its changes from the log, so it can always catch up
//! later; the dataflow cannot. On a busy node the streams therefore get
//! only the CPU the dataflow leaves, and a hundred of them slow a view down
//! no more than one does. What stays with the connection is handing the
//! encoded pieces to its socket.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use tokio::sync::{mpsc, watch};

use super::subscribe::{Encoder, LineCache, Subscription};
use crate::error::{Error, Result};
use crate::session::Engine;

/// The nice value of stream threads: the lowest priority there is, so that
/// under load they take about 1.5% of a CPU the dataflow wants.
const STREAM_NICE: i32 = 19;

/// Batches of pieces a stream encodes ahead of its client: a slow client
/// holds back only its own stream, and only this much of it.
const AHEAD: usize = 2;

/// Turns change rows into a client's wire text.
pub type Encode = Arc<dyn Fn(datafusion::arrow::array::RecordBatch) -> Result<Bytes> + Send + Sync>;

pub struct Streams {
    /// Changelog chunks encoded for COPY streams, shared between subscribers.
    pub cache: LineCache,
    runtime: Option<tokio::runtime::Runtime>,
    /// Every running stream holds a receiver; all gone means all stopped.
    running: watch::Sender<()>,
}

impl std::fmt::Debug for Streams {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Streams")
    }
}

impl Streams {
    pub fn start() -> Result<Streams> {
        let threads = std::thread::available_parallelism().map_or(2, |n| n.get());
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(threads)
            .thread_name("weir-stream")
            .on_thread_start(lower_priority)
            .enable_all()
            .build()?;
        Ok(Streams {
            cache: LineCache::default(),
            runtime: Some(runtime),
            running: watch::channel(()).0,
        })
    }

    /// Runs `subscription` on the stream threads; its pieces come out of the
    /// receiver until an error, which ends it. Dropping the receiver stops it.
    pub fn spawn(
        &self,
        engine: Arc<Engine>,
        mut subscription: Subscription,
        format: String,
        encode: Encode,
    ) -> mpsc::Receiver<Result<Vec<Bytes>>> {
        let (tx, rx) = mpsc::channel(AHEAD);
        let running = self.running.subscribe();
        let Some(runtime) = &self.runtime else {
            return rx;
        };
        runtime.spawn(async move {
            // Declared first, dropped last: the engine is let go before the
            // stream counts as stopped.
            let _running = running;
            let engine = engine;
            // A stream far behind may have many chunks to encode in one
            // read; once its client is gone it stops at the next one.
            let encode_for_client = |batch| match tx.is_closed() {
                true => Err(Error::ShuttingDown),
                false => encode(batch),
            };
            let encoder = Encoder {
                format,
                encode: &encode_for_client,
            };
            loop {
                let pieces = tokio::select! {
                    _ = tx.closed() => return,
                    pieces = subscription.fetch_encoded(&engine, &engine.streams.cache, &encoder) => pieces,
                };
                let failed = pieces.is_err();
                if tx.send(pieces).await.is_err() || failed {
                    return;
                }
            }
        });
        rx
    }

    /// COPY change streams running now.
    pub fn running(&self) -> usize {
        self.running.receiver_count()
    }

    /// Waits, at most `limit`, for every stream to stop: they hold the store,
    /// which must close before the process exits.
    pub async fn stopped(&self, limit: Duration) {
        let _ = tokio::time::timeout(limit, self.running.closed()).await;
    }
}

impl Drop for Streams {
    fn drop(&mut self) {
        // The engine may be dropped on any thread, even one of these.
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}

fn lower_priority() {
    if let Err(e) = rustix::process::setpriority_process(None, STREAM_NICE) {
        tracing::debug!(cause = %e, "cannot lower the priority of a stream thread");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stream_threads_run_at_the_lowest_priority() {
        let streams = Streams::start().expect("streams");
        let runtime = streams.runtime.as_ref().expect("runtime");
        let nice = runtime
            .block_on(async {
                tokio::spawn(async { rustix::process::getpriority_process(None) }).await
            })
            .expect("task")
            .expect("getpriority");
        assert_eq!(nice, STREAM_NICE);
        let here = rustix::process::getpriority_process(None).expect("getpriority");
        assert!(here < STREAM_NICE, "other threads keep their priority");
    }
}
