//! Bytes: the pgwire listener and the HTTP endpoint. Knows no SQL.

mod coalesce;
mod copyout;
pub mod frames;
mod handler;
pub mod http;
mod scram;
mod text;
mod threads;
mod tls;

use std::future::Future;
use std::io;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use futures::{FutureExt, SinkExt, StreamExt};
use pgwire::api::auth::StartupHandler;
use pgwire::api::cancel::CancelHandler;
use pgwire::api::copy::CopyHandler;
use pgwire::api::query::{ExtendedQueryHandler, SimpleQueryHandler};
use pgwire::api::{
    ClientInfo, DefaultClient, ErrorHandler, PgWireConnectionState, PgWireServerHandlers,
};
use pgwire::error::{ErrorInfo, PgWireError};
use pgwire::messages::response::{GssEncResponse, SslResponse};
use pgwire::messages::{PgWireBackendMessage, PgWireFrontendMessage, SslNegotiationMetaMessage};
use pgwire::tokio::server::{PgWireMessageServerCodec, process_error, process_message};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinSet;
use tokio::time::Sleep;
use tokio_rustls::TlsAcceptor;
use tokio_util::codec::Framed;

use frames::{FrameGuard, Malformed};
use tls::Transport;

use crate::error::Result;
use crate::session::{Engine, Metrics};

pub use handler::Handlers;

/// The HTTP port's TLS: the pgwire port's certificate, when one is set.
pub fn http_tls(config: &crate::config::Config) -> Result<Option<http::HttpTls>> {
    config
        .tls
        .as_ref()
        .map(|t| {
            Ok(http::HttpTls {
                acceptor: tls::acceptor(&t.cert, &t.key)?,
                required: t.required,
            })
        })
        .transpose()
}

/// Serve pgwire on `listener` until `shutdown` resolves, then stop accepting
/// and give open connections a moment to finish their statements.
pub async fn run(
    engine: Arc<Engine>,
    listener: TcpListener,
    shutdown: impl Future<Output = ()>,
) -> Result<()> {
    let handlers = Arc::new(Handlers::new(engine.clone()));
    let tls = match &engine.config().tls {
        Some(tls) => Some(tls::acceptor(&tls.cert, &tls.key)?),
        None => None,
    };
    let tls_required = engine.config().tls.as_ref().is_some_and(|t| t.required);
    let threads = threads::ConnectionThreads::start()?;
    let mut connections = JoinSet::new();
    let open = Arc::new(AtomicUsize::new(0));
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
                // COPY streams write to a duplicate of the socket, which
                // would bypass TLS: with TLS they go through the connection.
                if tls.is_none() {
                    handlers.sockets.accept(&socket, peer);
                }
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
                Metrics::add(&engine.metrics().connections, 1);
                let slot = Slot::take(&open, engine.config().max_connections);
                let handlers = handlers.clone();
                let admission = Admission {
                    full: slot.is_none(),
                    tls: tls.clone(),
                    tls_required,
                };
                let watched = socket.try_clone().ok().map(std::os::fd::OwnedFd::from);
                threads.spawn(&mut connections, watched, async move {
                    let sockets = handlers.sockets.clone();
                    // The loop catches panics while it serves messages; this
                    // catches the rest, so the socket is always unregistered.
                    match AssertUnwindSafe(serve(socket, handlers, admission)).catch_unwind().await {
                        Ok(Ok(())) => {}
                        Ok(Err(e)) => {
                            tracing::debug!(peer = %peer, cause = %e, "connection ended with an error");
                        }
                        Err(_) => tracing::error!(peer = %peer, "connection task panicked"),
                    }
                    sockets.closed(&peer);
                    drop(slot);
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
        .streams()
        .stopped(std::time::Duration::from_secs(2))
        .await;
    Ok(())
}

/// One of the `max_connections` a node serves at once, given back when
/// its connection ends, however it ends.
struct Slot(Arc<AtomicUsize>);

impl Slot {
    /// A slot, or `None` when all are taken. Connections are accepted on
    /// one task, so the count cannot move between the check and the add.
    fn take(open: &Arc<AtomicUsize>, max: usize) -> Option<Slot> {
        if open.load(Ordering::Relaxed) >= max {
            return None;
        }
        open.fetch_add(1, Ordering::Relaxed);
        Some(Slot(open.clone()))
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// How long a client has to finish its startup (pgwire's value).
const STARTUP_TIMEOUT: Duration = Duration::from_secs(60);

/// How long a last ErrorResponse may take to reach a client that is not
/// reading before its connection is dropped without it.
const FAREWELL_TIMEOUT: Duration = Duration::from_secs(5);

/// A connection: pgwire's codec over the frame guard over the socket.
type Connection<S> = Framed<FrameGuard<Transport>, PgWireMessageServerCodec<S>>;

/// What decides whether a connection may log in.
#[derive(Clone, Default)]
struct Admission {
    /// Beyond `max_connections`.
    full: bool,
    tls: Option<TlsAcceptor>,
    tls_required: bool,
}

impl Admission {
    /// Why a client that sends its startup packet is turned away: its
    /// SQLSTATE and message.
    fn refusal(&self, secure: bool) -> Option<(&'static str, &'static str)> {
        if self.full {
            Some(("53300", "sorry, too many clients already"))
        } else if self.tls_required && !secure {
            Some(("28000", "TLS is required: connect with sslmode=require"))
        } else {
            None
        }
    }
}

/// Serve one connection on the runtime polling this future, whose reactor
/// then watches the socket. pgwire's `process_socket`, with the frame guard
/// under its codec and panics caught per message. A connection beyond
/// `max_connections`, or without TLS where it is required, is told so after
/// its startup packet.
async fn serve<H: PgWireServerHandlers>(
    socket: std::net::TcpStream,
    handlers: H,
    admission: Admission,
) -> io::Result<()> {
    let socket = TcpStream::from_std(socket)?;
    let startup = tokio::time::sleep(STARTUP_TIMEOUT);
    tokio::pin!(startup);
    let negotiated = tokio::select! {
        _ = &mut startup => return Ok(()),
        negotiated = negotiate(socket, admission.tls.as_ref()) => negotiated?,
    };
    let Some(mut connection) = negotiated else {
        return Ok(());
    };
    let callbacks = Callbacks {
        startup: handlers.startup_handler(),
        query: handlers.simple_query_handler(),
        extended: handlers.extended_query_handler(),
        copy: handlers.copy_handler(),
        cancel: handlers.cancel_handler(),
        error: handlers.error_handler(),
        refusal: admission.refusal(connection.codec().client_info.is_secure()),
    };
    callbacks.serve_messages(&mut connection, startup).await
}

/// Answer the client's SSLRequest and GSSENCRequest: TLS when it is
/// configured, else 'N', so the client goes on in plain text; 'N' to GSS
/// encryption. `None` when the connection ended during it.
async fn negotiate<S>(
    socket: TcpStream,
    tls: Option<&TlsAcceptor>,
) -> io::Result<Option<Connection<S>>> {
    let peer = socket.peer_addr()?;
    let mut connection = framed(Transport::Plain(socket), peer, false);
    loop {
        let refusal = match connection.next().await {
            Some(Ok(PgWireFrontendMessage::SslNegotiation(request))) => match request {
                SslNegotiationMetaMessage::PostgresSsl(_) => match tls {
                    Some(acceptor) if !connection.codec().client_info.is_secure() => {
                        match secure(connection, acceptor).await? {
                            Some(secured) => connection = secured,
                            None => return Ok(None),
                        }
                        continue;
                    }
                    _ => PgWireBackendMessage::SslResponse(SslResponse::Refuse),
                },
                SslNegotiationMetaMessage::PostgresGss(_) => {
                    PgWireBackendMessage::GssEncResponse(GssEncResponse::Refuse)
                }
                // A startup packet or a cancel request follows.
                SslNegotiationMetaMessage::None => break,
            },
            Some(Ok(_)) => break,
            Some(Err(e)) => {
                refuse(&mut connection, e).await;
                return Ok(None);
            }
            None => return Ok(None),
        };
        connection.send(refusal).await?;
    }
    connection.set_state(PgWireConnectionState::AwaitingStartup);
    Ok(Some(connection))
}

fn framed<S>(transport: Transport, peer: std::net::SocketAddr, secure: bool) -> Connection<S> {
    let client = DefaultClient::new(peer, secure);
    Framed::new(
        FrameGuard::new(transport),
        PgWireMessageServerCodec::new(client),
    )
}

/// Accept TLS on the socket taken back out of the guard. Bytes the client
/// sent after its request would be read as if they came encrypted
/// (CVE-2021-23214): the connection ends instead.
async fn secure<S>(
    mut connection: Connection<S>,
    acceptor: &TlsAcceptor,
) -> io::Result<Option<Connection<S>>> {
    connection
        .send(PgWireBackendMessage::SslResponse(SslResponse::Accept))
        .await?;
    let parts = connection.into_parts();
    let peer = parts.codec.client_info.socket_addr;
    if !parts.read_buf.is_empty() {
        return Ok(None);
    }
    let Some(Transport::Plain(socket)) = parts.io.into_drained() else {
        return Ok(None);
    };
    let stream = acceptor.accept(socket).await?;
    Ok(Some(framed(Transport::Tls(Box::new(stream)), peer, true)))
}

/// What the connection does after a message.
enum Step {
    Continue,
    End,
}

/// The handlers pgwire's `process_message` takes, by their types: the
/// connection's codec is typed by the extended query handler's statement.
struct Callbacks<A, Q, EQ, C, CR, E> {
    startup: Arc<A>,
    query: Arc<Q>,
    extended: Arc<EQ>,
    copy: Arc<C>,
    cancel: Arc<CR>,
    error: Arc<E>,
    /// Why the startup packet is refused, if it is: SQLSTATE and message.
    refusal: Option<(&'static str, &'static str)>,
}

impl<A, Q, EQ, C, CR, E> Callbacks<A, Q, EQ, C, CR, E>
where
    A: StartupHandler,
    Q: SimpleQueryHandler,
    EQ: ExtendedQueryHandler,
    C: CopyHandler,
    CR: CancelHandler,
    E: ErrorHandler,
{
    /// The message loop of pgwire's `process_socket`, each message's
    /// decoding and processing under `catch_unwind`: a panic ends this
    /// connection only, with a FATAL XX000 when the client can still be told.
    async fn serve_messages(
        &self,
        connection: &mut Connection<EQ::Statement>,
        mut startup: Pin<&mut Sleep>,
    ) -> io::Result<()> {
        let peer = connection.codec().client_info.socket_addr;
        loop {
            let step = AssertUnwindSafe(self.serve_message(connection, startup.as_mut()))
                .catch_unwind()
                .await;
            match step {
                Ok(Ok(Step::Continue)) => {}
                Ok(Ok(Step::End)) => return Ok(()),
                Ok(Err(e)) => return Err(e),
                Err(panic) => {
                    let what = crate::error::panic_message(panic.as_ref());
                    tracing::error!(peer = %peer, panic = what, "connection panicked; closing it");
                    let message = format!("internal error: {what}; this is a bug");
                    let info = ErrorInfo::new("FATAL".to_string(), "XX000".to_string(), message);
                    farewell(connection, info).await;
                    return Ok(());
                }
            }
        }
    }

    /// Read one message and process it, as pgwire's `process_socket_messages!`.
    async fn serve_message(
        &self,
        connection: &mut Connection<EQ::Statement>,
        startup: Pin<&mut Sleep>,
    ) -> io::Result<Step> {
        let starting = matches!(
            connection.state(),
            PgWireConnectionState::AwaitingStartup
                | PgWireConnectionState::AuthenticationInProgress
        );
        let idle = handler::idle_limit(connection);
        let message = if starting {
            tokio::select! {
                _ = startup => None,
                message = connection.next() => message,
            }
        } else if let Some(limit) = idle {
            match tokio::time::timeout(limit, connection.next()).await {
                Ok(message) => message,
                Err(_) => {
                    let info = ErrorInfo::new(
                        "FATAL".to_string(),
                        "25P03".to_string(),
                        "terminating connection due to idle-in-transaction timeout".to_string(),
                    );
                    farewell(connection, info).await;
                    return Ok(Step::End);
                }
            }
        } else {
            connection.next().await
        };
        let message = match message {
            None => return Ok(Step::End),
            Some(Err(e)) => {
                refuse(connection, e).await;
                return Ok(Step::End);
            }
            // The client is leaving and may wait for the socket to close.
            Some(Ok(PgWireFrontendMessage::Terminate(_))) => return Ok(Step::End),
            Some(Ok(PgWireFrontendMessage::Startup(_))) if self.refusal.is_some() => {
                if let Some((code, message)) = self.refusal {
                    let info =
                        ErrorInfo::new("FATAL".into(), code.to_string(), message.to_string());
                    farewell(connection, info).await;
                }
                return Ok(Step::End);
            }
            Some(Ok(message)) => message,
        };
        let is_extended_query = match connection.state() {
            PgWireConnectionState::CopyInProgress(extended) => extended,
            _ => message.is_extended_query(),
        };
        let processed = process_message(
            message,
            connection,
            self.startup.clone(),
            self.query.clone(),
            self.extended.clone(),
            self.copy.clone(),
            self.cancel.clone(),
        )
        .await;
        if let Err(mut e) = processed {
            self.error.on_error(connection, &mut e);
            // A FATAL error (a failed login) ends the connection without
            // the ReadyForQuery pgwire would send after it.
            let info = ErrorInfo::from(e);
            if info.is_fatal() {
                farewell(connection, info).await;
                return Ok(Step::End);
            }
            let e = PgWireError::UserError(Box::new(info));
            process_error(connection, e, is_extended_query).await?;
        }
        Ok(Step::Continue)
    }
}

/// A message could not be read: tell the client why, when it was the
/// client's bytes rather than the socket that failed.
async fn refuse<S>(connection: &mut Connection<S>, error: PgWireError) {
    let info = match error {
        PgWireError::IoError(e) => {
            let Some(malformed) = e.get_ref().and_then(|e| e.downcast_ref::<Malformed>()) else {
                return;
            };
            let peer = connection.codec().client_info.socket_addr;
            tracing::info!(peer = %peer, cause = %malformed, detail = malformed.detail(), "refused a malformed frame");
            let mut info = ErrorInfo::new(
                "FATAL".to_string(),
                malformed.sqlstate().to_string(),
                malformed.to_string(),
            );
            info.detail = Some(malformed.detail());
            info
        }
        // pgwire's decoder refused a frame the guard let through (a
        // FunctionCall, or a startup packet of a protocol it lacks): the
        // stream is unusable after a decoding error.
        other => {
            let mut info = ErrorInfo::from(other);
            info.severity = "FATAL".to_string();
            info
        }
    };
    farewell(connection, info).await;
}

/// Send a last ErrorResponse and close, giving up on a client that does
/// not read.
async fn farewell<S>(connection: &mut Connection<S>, info: ErrorInfo) {
    let goodbye = async {
        connection
            .send(PgWireBackendMessage::ErrorResponse(info.into()))
            .await?;
        connection.close().await
    };
    let _ = tokio::time::timeout(FAREWELL_TIMEOUT, goodbye).await;
}

#[cfg(test)]
mod tests {
    use std::fmt::Debug;

    use async_trait::async_trait;
    use futures::Sink;
    use pgwire::api::results::{Response, Tag};
    use pgwire::error::PgWireResult;

    use super::*;

    /// Panics on the query `panic`, answers any other.
    struct Panicking;

    #[async_trait]
    impl SimpleQueryHandler for Panicking {
        async fn do_query<C>(&self, _: &mut C, query: &str) -> PgWireResult<Vec<Response>>
        where
            C: ClientInfo + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
            C::Error: Debug,
            PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
        {
            assert_ne!(query, "panic", "the test asked for it");
            Ok(vec![Response::Execution(Tag::new("OK"))])
        }
    }

    struct Handlers;

    impl PgWireServerHandlers for Handlers {
        fn simple_query_handler(&self) -> Arc<impl SimpleQueryHandler> {
            Arc::new(Panicking)
        }
    }

    async fn client(port: u16) -> tokio_postgres::Client {
        let config = format!("host=127.0.0.1 port={port} user=u dbname=d");
        let (client, connection) = tokio_postgres::connect(&config, tokio_postgres::NoTls)
            .await
            .expect("connect");
        tokio::spawn(connection);
        client
    }

    #[tokio::test]
    async fn a_panic_ends_its_connection_only_with_a_fatal_internal_error() {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let port = listener.local_addr().expect("address").port();
        tokio::spawn(async move {
            while let Ok((socket, _)) = listener.accept().await {
                let socket = socket.into_std().expect("std socket");
                tokio::spawn(serve(socket, Handlers, Admission::default()));
            }
        });
        let bystander = client(port).await;
        let victim = client(port).await;
        let error = victim.simple_query("panic").await.expect_err("panicked");
        let error = error.as_db_error().expect("an ErrorResponse");
        assert_eq!(error.code().code(), "XX000");
        assert_eq!(error.severity(), "FATAL");
        assert!(error.message().contains("this is a bug"), "{error:?}");
        assert!(victim.simple_query("again").await.is_err());
        bystander.simple_query("fine").await.expect("unaffected");
        client(port).await.simple_query("fine").await.expect("new");
    }
}
