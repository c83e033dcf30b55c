//! The threads that serve connections: each runs a single-threaded runtime
//! of its own, and a connection stays on the thread it was given.
//!
//! A statement on a lone connection then runs where its socket's wake-up
//! arrives. On a shared multi-threaded runtime, the worker waiting on the
//! socket handed the connection to the other worker, and each hand-off cost
//! context switches on the statement's path; measured in `docs/benchmarks.md`.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use tokio::runtime::Handle;
use tokio::sync::oneshot;
use tokio::task::JoinSet;

use crate::error::Result;

/// One connection thread: its runtime and how many connections it serves.
struct Thread {
    handle: Handle,
    open: Arc<AtomicUsize>,
    /// Dropping it stops the thread.
    _stop: oneshot::Sender<()>,
    joined: std::thread::JoinHandle<()>,
}

pub struct ConnectionThreads {
    threads: Vec<Thread>,
}

impl ConnectionThreads {
    /// One thread per core.
    pub fn start() -> Result<ConnectionThreads> {
        let count = std::thread::available_parallelism().map_or(2, |n| n.get());
        let threads = (0..count).map(start_thread).collect::<Result<_>>()?;
        Ok(ConnectionThreads { threads })
    }

    /// Run `connection` on the thread serving the fewest connections.
    pub fn spawn<F>(&self, set: &mut JoinSet<()>, connection: F)
    where
        F: Future<Output = ()> + Send + 'static,
    {
        let thread = self
            .threads
            .iter()
            .min_by_key(|t| t.open.load(Ordering::Relaxed))
            .expect("at least one connection thread");
        let open = thread.open.clone();
        open.fetch_add(1, Ordering::Relaxed);
        let counted = async move {
            let _closed = Closed(open);
            connection.await;
        };
        set.spawn_on(counted, &thread.handle);
    }
}

/// Counts a connection out when its task ends, also when it is aborted.
struct Closed(Arc<AtomicUsize>);

impl Drop for Closed {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

impl Drop for ConnectionThreads {
    fn drop(&mut self) {
        // Every thread is told to stop (its sender dropped) before any is waited for.
        let joins: Vec<_> = std::mem::take(&mut self.threads)
            .into_iter()
            .map(|thread| thread.joined)
            .collect();
        for joined in joins {
            let _ = joined.join();
        }
    }
}

fn start_thread(index: usize) -> Result<Thread> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let handle = runtime.handle().clone();
    let (stop, stopped) = oneshot::channel::<()>();
    let joined = std::thread::Builder::new()
        .name(format!("weir-conn-{index}"))
        .spawn(move || {
            let _ = runtime.block_on(stopped);
            runtime.shutdown_timeout(std::time::Duration::from_secs(1));
        })?;
    Ok(Thread {
        handle,
        open: Arc::new(AtomicUsize::new(0)),
        _stop: stop,
        joined,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn thread_name() -> String {
        std::thread::current()
            .name()
            .unwrap_or_default()
            .to_string()
    }

    #[tokio::test]
    async fn connections_spread_over_the_threads_and_are_counted_out() {
        let threads = ConnectionThreads::start().expect("threads");
        let mut set = JoinSet::new();
        let (release, released) = tokio::sync::watch::channel(false);
        let (names, mut named) = tokio::sync::mpsc::unbounded_channel();
        for _ in 0..threads.threads.len() {
            let mut released = released.clone();
            let names = names.clone();
            threads.spawn(&mut set, async move {
                names.send(thread_name()).expect("test waits");
                let _ = released.wait_for(|r| *r).await;
            });
        }
        let mut seen = std::collections::BTreeSet::new();
        for _ in 0..threads.threads.len() {
            seen.insert(named.recv().await.expect("a name"));
        }
        assert_eq!(seen.len(), threads.threads.len(), "{seen:?}");
        assert!(seen.iter().all(|n| n.starts_with("weir-conn-")), "{seen:?}");
        release.send(true).expect("connections wait");
        while set.join_next().await.is_some() {}
        let open: usize = threads
            .threads
            .iter()
            .map(|t| t.open.load(Ordering::Relaxed))
            .sum();
        assert_eq!(open, 0);
    }
}
