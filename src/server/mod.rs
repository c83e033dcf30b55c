//! Bytes: the pgwire listener and the HTTP endpoint. Knows no SQL.

mod coalesce;
mod copyout;
pub mod frames;
mod handler;
pub mod http;
mod text;
mod threads;

use std::future::Future;
use std::sync::Arc;

use tokio::net::TcpListener;
use tokio::task::JoinSet;

use crate::error::Result;
use crate::session::{Engine, Metrics};

pub use handler::Handlers;

/// Serve pgwire on `listener` until `shutdown` resolves, then stop accepting
/// and give open connections a moment to finish their statements.
pub async fn run(
    engine: Arc<Engine>,
    listener: TcpListener,
    shutdown: impl Future<Output = ()>,
) -> Result<()> {
    let handlers = Arc::new(Handlers::new(engine.clone()));
    let threads = threads::ConnectionThreads::start()?;
    let mut connections = JoinSet::new();
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let (socket, peer) = match accepted {
                    Ok(pair) => pair,
                    Err(e) => {
                        tracing::warn!(cause = %e, "failed to accept");
                        continue;
                    }
                };
                let _ = socket.set_nodelay(true);
                handlers.sockets.accept(&socket, peer);
                // Out of this runtime's reactor, so that the connection's
                // thread is woken by its own poll rather than through this one.
                let socket = match socket.into_std() {
                    Ok(socket) => socket,
                    Err(e) => {
                        tracing::warn!(peer = %peer, cause = %e, "failed to detach a socket");
                        handlers.sockets.closed(&peer);
                        continue;
                    }
                };
                Metrics::add(&engine.metrics.connections, 1);
                let handlers = handlers.clone();
                let watched = socket.try_clone().ok().map(std::os::fd::OwnedFd::from);
                threads.spawn(&mut connections, watched, async move {
                    let sockets = handlers.sockets.clone();
                    if let Err(e) = serve(socket, handlers).await {
                        tracing::debug!(peer = %peer, cause = %e, "connection ended with an error");
                    }
                    sockets.closed(&peer);
                });
            }
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
            _ = &mut shutdown => break,
        }
    }
    tracing::info!(open = connections.len(), "shutting down");
    let drain = async { while connections.join_next().await.is_some() {} };
    if tokio::time::timeout(std::time::Duration::from_secs(5), drain)
        .await
        .is_err()
    {
        connections.abort_all();
    }
    engine
        .streams
        .stopped(std::time::Duration::from_secs(2))
        .await;
    Ok(())
}

/// Serve one connection on the runtime polling this future, whose reactor
/// then watches the socket.
async fn serve(socket: std::net::TcpStream, handlers: Arc<Handlers>) -> std::io::Result<()> {
    let socket = tokio::net::TcpStream::from_std(socket)?;
    pgwire::tokio::process_socket(socket, None, handlers).await
}
