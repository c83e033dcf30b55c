//! The threads that serve connections: each runs a single-threaded runtime
//! of its own, and a connection stays on the thread it was given.
//!
//! A statement on a lone connection then runs where its socket's wake-up
//! arrives. On a shared multi-threaded runtime, the worker waiting on the
//! socket handed the connection to the other worker, and each hand-off cost
//! context switches on the statement's path; measured in `docs/benchmarks/log.md`.
//!
//! While the node has one connection and its client answers quickly, the
//! connection's thread polls the socket briefly before sleeping
//! ([`poll_before_park`]): waking a sleeping core for the client's next
//! statement costs more than the poll.

use std::cell::{Cell, RefCell};
use std::future::Future;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use rustix::event::{PollFd, PollFlags};
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
    /// Connections open on all the threads.
    open: Arc<AtomicUsize>,
}

impl ConnectionThreads {
    /// One thread per core.
    pub fn start() -> Result<ConnectionThreads> {
        let count = std::thread::available_parallelism().map_or(2, |n| n.get());
        let open = Arc::new(AtomicUsize::new(0));
        let threads = (0..count)
            .map(|index| start_thread(index, open.clone()))
            .collect::<Result<_>>()?;
        Ok(ConnectionThreads { threads, open })
    }

    /// Run `connection` on the thread serving the fewest connections;
    /// `socket`, a handle on its socket, is what the thread polls.
    pub fn spawn<F>(&self, set: &mut JoinSet<()>, socket: Option<OwnedFd>, connection: F)
    where
        F: Future<Output = ()> + Send + 'static,
    {
        let thread = self
            .threads
            .iter()
            .min_by_key(|t| t.open.load(Ordering::Relaxed))
            .expect("at least one connection thread");
        let counts = [thread.open.clone(), self.open.clone()];
        for count in &counts {
            count.fetch_add(1, Ordering::Relaxed);
        }
        let counted = async move {
            let _closed = Closed(counts);
            let _watched = socket.map(Watched::new);
            connection.await;
        };
        set.spawn_on(counted, &thread.handle);
    }
}

/// Counts a connection out, of its thread and of all, when its task ends,
/// also when it is aborted.
struct Closed([Arc<AtomicUsize>; 2]);

impl Drop for Closed {
    fn drop(&mut self) {
        for count in &self.0 {
            count.fetch_sub(1, Ordering::Relaxed);
        }
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

/// A connection thread; `open` counts the connections of all of them.
fn start_thread(index: usize, open: Arc<AtomicUsize>) -> Result<Thread> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .on_thread_park(move || poll_before_park(&open))
        .on_thread_unpark(unparked)
        .build()?;
    let handle = runtime.handle().clone();
    let (stop, stopped) = oneshot::channel::<()>();
    let joined = std::thread::Builder::new()
        .name(format!("weir-conn-{index}"))
        .stack_size(crate::config::STATEMENT_STACK_BYTES)
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

/// How long a thread polls its one socket before sleeping. A client that
/// sends its next statement as soon as it has the reply does so well within
/// this; one that answers later than [`QUICK`] costs the thread this much
/// once.
const POLL_FOR: Duration = Duration::from_micros(100);

/// A sleep longer than this means the client is not answering at once:
/// the next park sleeps without polling first.
const QUICK: Duration = Duration::from_micros(500);

thread_local! {
    /// The sockets of the connections this thread serves.
    static SOCKETS: RefCell<Vec<OwnedFd>> = const { RefCell::new(Vec::new()) };
    /// When the thread last began to park.
    static PARKED_AT: Cell<Option<Instant>> = const { Cell::new(None) };
    /// Whether the last park ended within [`QUICK`].
    static QUICK_LAST: Cell<bool> = const { Cell::new(true) };
}

/// A connection's socket, watched by its thread while the connection lives.
struct Watched(RawFd);

impl Watched {
    fn new(socket: OwnedFd) -> Watched {
        let fd = socket.as_raw_fd();
        SOCKETS.with_borrow_mut(|sockets| sockets.push(socket));
        Watched(fd)
    }
}

impl Drop for Watched {
    fn drop(&mut self) {
        // The thread's storage may be gone when its runtime drops the task last.
        let _ =
            SOCKETS.try_with(|sockets| sockets.borrow_mut().retain(|s| s.as_raw_fd() != self.0));
    }
}

/// Before the thread sleeps: when the node has one connection, served
/// here, whose client answered quickly last time, poll its socket for up
/// to [`POLL_FOR`], so that the next statement finds the thread awake
/// instead of having to wake a sleeping core. With more connections the
/// cores are the clients' and the other threads': a thread polling for
/// one of two connections halved their rate on two cores.
fn poll_before_park(open: &AtomicUsize) {
    PARKED_AT.set(Some(Instant::now()));
    if !QUICK_LAST.get() || open.load(Ordering::Relaxed) != 1 {
        return;
    }
    SOCKETS.with_borrow(|sockets| {
        if let [socket] = sockets.as_slice() {
            readable_within(socket, POLL_FOR);
        }
    });
}

fn unparked() {
    if let Some(at) = PARKED_AT.take() {
        QUICK_LAST.set(at.elapsed() < QUICK);
    }
}

/// Whether `socket` has something to read (or was closed) within `limit`,
/// polling without sleeping.
fn readable_within(socket: &OwnedFd, limit: Duration) -> bool {
    let started = Instant::now();
    let now = rustix::event::Timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    loop {
        let mut fds = [PollFd::new(socket, PollFlags::IN)];
        if rustix::event::poll(&mut fds, Some(&now)).is_ok_and(|ready| ready > 0) {
            return true;
        }
        if started.elapsed() >= limit {
            return false;
        }
        std::hint::spin_loop();
    }
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
            threads.spawn(&mut set, None, async move {
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
        assert_eq!(threads.open.load(Ordering::Relaxed), 0);
    }

    #[test]
    fn a_socket_is_readable_once_its_peer_writes_or_closes() {
        use std::io::Write;
        let (mut peer, socket) = std::os::unix::net::UnixStream::pair().expect("pair");
        let socket = OwnedFd::from(socket);
        assert!(!readable_within(&socket, Duration::ZERO));
        peer.write_all(b"Q").expect("write");
        assert!(readable_within(&socket, Duration::ZERO));
        let (peer, socket) = std::os::unix::net::UnixStream::pair().expect("pair");
        drop(peer);
        assert!(readable_within(&OwnedFd::from(socket), Duration::ZERO));
    }

    #[test]
    fn a_thread_watches_a_socket_while_its_connection_lives() {
        let (_peer, socket) = std::os::unix::net::UnixStream::pair().expect("pair");
        let watched = Watched::new(OwnedFd::from(socket));
        assert_eq!(SOCKETS.with_borrow(Vec::len), 1);
        drop(watched);
        assert_eq!(SOCKETS.with_borrow(Vec::len), 0);
    }
}
