//! Where COPY change streams do their work: threads of the lowest CPU
//! priority, apart from the dataflow's.
//!
//! A subscriber reads its changes from the log, so it can always catch up
//! later; the dataflow cannot. On a busy node the streams therefore get
//! only the CPU the dataflow leaves. They read, encode and, given a
//! duplicate of the connection's socket, write their frames to the client
//! too, so that copying the changes into sockets is theirs as well.

use std::io::IoSlice;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use tokio::io::AsyncWriteExt;
use tokio::sync::{mpsc, watch};

use super::merged::ChangeStream;
use super::subscribe::{Encoder, LineCache};
use crate::error::{Error, Result};
use crate::session::Engine;

/// The nice value of stream threads where the idle policy is refused: the
/// lowest there is, so that under load they take about 1.5% of a CPU.
const STREAM_NICE: i32 = 19;

/// Batches of pieces a stream encodes ahead of its client: a slow client
/// holds back only its own stream, and only this much of it.
const AHEAD: usize = 2;

/// Turns change rows into a client's wire text.
pub type Encode = Arc<dyn Fn(datafusion::arrow::array::RecordBatch) -> Result<Bytes> + Send + Sync>;

/// A stream's own way to its client: a duplicate of the connection's
/// socket, written once pgwire has flushed the CopyOutResponse.
#[derive(Debug)]
pub struct Direct {
    pub socket: std::net::TcpStream,
    pub control: Arc<Control>,
}

/// Between a stream writing to its client and a cancel of its statement,
/// which must not land inside a frame.
#[derive(Debug)]
pub struct Control {
    stop: watch::Sender<bool>,
    quiet: watch::Sender<bool>,
}

impl Default for Control {
    fn default() -> Self {
        Control {
            stop: watch::channel(false).0,
            quiet: watch::channel(false).0,
        }
    }
}

impl Control {
    /// Asks the stream to stop at its next frame boundary; true once it has,
    /// false if it did not within `limit`.
    pub async fn stop_and_wait(&self, limit: Duration) -> bool {
        self.stop.send_replace(true);
        let mut quiet = self.quiet.subscribe();
        tokio::time::timeout(limit, quiet.wait_for(|q| *q))
            .await
            .is_ok()
    }

    async fn stopped(&self) {
        let mut stop = self.stop.subscribe();
        let _ = stop.wait_for(|s| *s).await;
    }

    fn stopping(&self) -> bool {
        *self.stop.borrow()
    }
}

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

    /// Runs `subscription` on the stream threads. With `direct` it writes
    /// to the client itself and the receiver gets only its error, if any;
    /// without, its pieces come out of the receiver for the connection to
    /// write. An error ends it; dropping the receiver stops it.
    pub fn spawn(
        &self,
        engine: Arc<Engine>,
        mut subscription: ChangeStream,
        format: String,
        encode: Encode,
        direct: Option<Direct>,
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
            let mut stream = Stream {
                subscription: &mut subscription,
                engine: &engine,
                encoder: &encoder,
                tx: &tx,
            };
            match direct {
                Some(direct) => stream.write_out(direct).await,
                None => stream.hand_over().await,
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

/// One running stream, on a stream thread.
struct Stream<'a> {
    subscription: &'a mut ChangeStream,
    engine: &'a Engine,
    encoder: &'a Encoder<'a>,
    tx: &'a mpsc::Sender<Result<Vec<Bytes>>>,
}

impl Stream<'_> {
    /// The next pieces, or `None` once the connection is gone.
    async fn next(&mut self) -> Option<Result<Vec<Bytes>>> {
        let cache = &self.engine.streams.cache;
        tokio::select! {
            _ = self.tx.closed() => None,
            pieces = self.subscription.fetch_encoded(&self.engine.node, cache, self.encoder) => Some(pieces),
        }
    }

    /// Hands the pieces to the connection, which writes them.
    async fn hand_over(&mut self) {
        while let Some(pieces) = self.next().await {
            let failed = pieces.is_err();
            if self.tx.send(pieces).await.is_err() || failed {
                return;
            }
        }
    }

    /// Writes the pieces to the client; an error goes to the connection,
    /// for pgwire to send once this stream has stopped writing.
    async fn write_out(&mut self, direct: Direct) {
        let control = direct.control.clone();
        let written = self.write_frames(direct).await;
        control.quiet.send_replace(true);
        match written {
            Err(e) => {
                let _ = self.tx.send(Err(e)).await;
            }
            // Stopped for a cancel: pgwire ends the statement.
            Ok(()) => self.tx.closed().await,
        }
    }

    async fn write_frames(&mut self, direct: Direct) -> Result<()> {
        let mut socket = tokio::net::TcpStream::from_std(direct.socket)?;
        loop {
            let pieces = tokio::select! {
                _ = direct.control.stopped() => return Ok(()),
                pieces = self.next() => match pieces {
                    Some(pieces) => pieces?,
                    None => return Ok(()),
                },
            };
            for piece in pieces.iter().filter(|p| !p.is_empty()) {
                write_frame(&mut socket, piece).await?;
                if direct.control.stopping() {
                    return Ok(());
                }
            }
        }
    }
}

/// One CopyData message: its tag, its length (itself included), the piece.
async fn write_frame(socket: &mut tokio::net::TcpStream, piece: &[u8]) -> std::io::Result<()> {
    let length = i32::try_from(piece.len() + 4)
        .map_err(|_| std::io::Error::other("a piece of changes passes 2 GiB"))?;
    let mut head = [b'd'; 5];
    head[1..].copy_from_slice(&length.to_be_bytes());
    let mut slices = [IoSlice::new(&head), IoSlice::new(piece)];
    let mut left = &mut slices[..];
    while !left.is_empty() {
        let n = socket.write_vectored(left).await?;
        if n == 0 {
            return Err(std::io::ErrorKind::WriteZero.into());
        }
        IoSlice::advance_slices(&mut left, n);
    }
    Ok(())
}

/// `SCHED_IDLE` where the kernel allows it: a normal thread that wakes
/// takes the CPU from an idle-policy one at once, where a nice one would
/// first finish its slice. Nice 19 otherwise.
fn lower_priority() {
    use thread_priority::{
        NormalThreadSchedulePolicy, ThreadPriority, ThreadSchedulePolicy,
        set_thread_priority_and_policy, thread_native_id,
    };
    let idle = ThreadSchedulePolicy::Normal(NormalThreadSchedulePolicy::Idle);
    if set_thread_priority_and_policy(thread_native_id(), ThreadPriority::Min, idle).is_ok() {
        return;
    }
    if let Err(e) = rustix::process::setpriority_process(None, STREAM_NICE) {
        tracing::debug!(cause = %e, "cannot lower the priority of a stream thread");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stream_threads_run_at_the_lowest_priority() {
        use thread_priority::{NormalThreadSchedulePolicy, ThreadSchedulePolicy};
        let streams = Streams::start().expect("streams");
        let runtime = streams.runtime.as_ref().expect("runtime");
        let policy = runtime
            .block_on(async {
                tokio::spawn(async { thread_priority::thread_schedule_policy() }).await
            })
            .expect("task")
            .expect("policy");
        assert_eq!(
            policy,
            ThreadSchedulePolicy::Normal(NormalThreadSchedulePolicy::Idle)
        );
        let here = thread_priority::thread_schedule_policy().expect("policy");
        assert_ne!(here, policy, "other threads keep their policy");
    }
}
