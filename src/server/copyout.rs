//! COPY change streams written to the client's socket by the stream
//! threads themselves, so that copying the changes into the socket, most of
//! what a hundred subscribers cost, also runs at their low priority.
//!
//! pgwire owns a connection's socket; at accept we keep a duplicate of its
//! descriptor. Once the CopyOutResponse is flushed, pgwire writes nothing on
//! that connection until the statement ends, so the stream may write
//! CopyData frames itself. A statement ends in one of three ways:
//! - the stream fails: it stops writing, then reports the error for pgwire
//!   to send;
//! - the client goes: a write fails;
//! - a cancel request: pgwire drops the statement and writes an error at
//!   once. So the cancel handler first has the stream stop at a frame
//!   boundary, and that error never lands inside a frame.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::os::fd::AsFd;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use parking_lot::Mutex;
use pgwire::api::cancel::{CancelHandler, DefaultCancelHandler};
use pgwire::messages::cancel::CancelRequest;
use pgwire::messages::startup::SecretKey;

use crate::session::streams::{Control, Direct};

/// How long a cancel waits for a stream to finish the frame it is writing.
/// A client that cancels keeps reading until the error comes, so this is
/// only reached by one that stopped reading.
const QUIET_WAIT: Duration = Duration::from_secs(5);

/// The duplicated sockets of open connections, and the streams writing to them.
#[derive(Default)]
pub struct Sockets {
    peers: Mutex<HashMap<SocketAddr, std::net::TcpStream>>,
    streams: Mutex<HashMap<i32, (SecretKey, Arc<Control>)>>,
}

/// Unregisters a stream when its statement ends.
pub struct Registered {
    sockets: Arc<Sockets>,
    pid: i32,
}

impl Sockets {
    /// Keeps a duplicate of an accepted socket's descriptor. Without one,
    /// the connection writes its COPY streams itself.
    pub fn accept(&self, socket: &tokio::net::TcpStream, peer: SocketAddr) {
        match socket.as_fd().try_clone_to_owned() {
            Ok(duplicate) => {
                self.peers.lock().insert(peer, duplicate.into());
            }
            Err(e) => tracing::debug!(peer = %peer, cause = %e, "cannot duplicate a socket"),
        }
    }

    pub fn closed(&self, peer: &SocketAddr) {
        self.peers.lock().remove(peer);
    }

    /// A stream's way to its client, registered for cancels until the
    /// returned guard drops; `None` when the connection has no duplicate.
    pub fn direct(
        self: &Arc<Self>,
        peer: &SocketAddr,
        pid: i32,
        secret: SecretKey,
    ) -> Option<(Direct, Registered)> {
        let socket = self.peers.lock().get(peer)?.try_clone().ok()?;
        let control = Arc::new(Control::default());
        self.streams.lock().insert(pid, (secret, control.clone()));
        let registered = Registered {
            sockets: self.clone(),
            pid,
        };
        Some((Direct { socket, control }, registered))
    }

    /// Has the stream of connection `pid` stop at a frame boundary, and
    /// waits until it has.
    async fn quiet(&self, pid: i32, secret: &SecretKey) {
        let control = match self.streams.lock().get(&pid) {
            Some((key, control)) if key == secret => control.clone(),
            _ => return,
        };
        if !control.stop_and_wait(QUIET_WAIT).await {
            tracing::warn!(pid, "a cancelled stream did not finish its frame in time");
        }
    }
}

impl Drop for Registered {
    fn drop(&mut self) {
        self.sockets.streams.lock().remove(&self.pid);
    }
}

/// pgwire's cancel, after the connection's stream (if any) has gone quiet.
pub struct Cancel {
    pub inner: DefaultCancelHandler,
    pub sockets: Arc<Sockets>,
}

#[async_trait]
impl CancelHandler for Cancel {
    async fn on_cancel_request(&self, request: CancelRequest) {
        self.sockets.quiet(request.pid, &request.secret_key).await;
        self.inner.on_cancel_request(request).await;
    }
}
