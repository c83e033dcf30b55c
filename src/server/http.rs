//! The HTTP endpoint, read-only: `GET /metrics` in Prometheus' text
//! format, and `GET /state`, which counts every view's operator state
//! entries exactly (it walks the state, so it is for inspection, not for
//! scraping). What changes the node goes through pgwire, where roles are
//! checked (`VACUUM` compacts the store).
//!
//! With `--tls-cert` the port speaks HTTPS with the pgwire port's
//! certificate, and plain HTTP too unless `--tls-required`: a request that
//! starts with a TLS handshake record gets TLS.
//!
//! One endpoint with fixed responses does not justify an HTTP framework's
//! build time; this reads the request line and answers.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::TlsAcceptor;

use crate::session::Engine;

/// The first byte of a TLS handshake record.
const TLS_HANDSHAKE: u8 = 0x16;

/// How long a client has to send its request, so that idle connections
/// do not pile up.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// How TLS is offered on the port.
#[derive(Clone)]
pub struct HttpTls {
    pub acceptor: TlsAcceptor,
    pub required: bool,
}

pub async fn run(engine: Arc<Engine>, listener: TcpListener, tls: Option<HttpTls>) {
    loop {
        let Ok((socket, _)) = listener.accept().await else {
            continue;
        };
        let engine = engine.clone();
        let tls = tls.clone();
        tokio::spawn(async move {
            match tokio::time::timeout(REQUEST_TIMEOUT, accept(&engine, socket, tls)).await {
                Ok(Err(e)) => tracing::debug!(cause = %e, "http request failed"),
                Err(_) => tracing::debug!("http request timed out"),
                Ok(Ok(())) => {}
            }
        });
    }
}

async fn accept(engine: &Engine, socket: TcpStream, tls: Option<HttpTls>) -> std::io::Result<()> {
    let Some(tls) = tls else {
        return serve(engine, socket).await;
    };
    let mut first = [0u8; 1];
    if socket.peek(&mut first).await? == 1 && first[0] == TLS_HANDSHAKE {
        let stream = tls.acceptor.accept(socket).await?;
        return serve(engine, stream).await;
    }
    if tls.required {
        return respond(
            socket,
            "403 Forbidden",
            "TLS is required: use https\n".to_string(),
        )
        .await;
    }
    serve(engine, socket).await
}

async fn serve<S>(engine: &Engine, mut socket: S) -> std::io::Result<()>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let mut buffer = vec![0u8; 4096];
    let n = socket.read(&mut buffer).await?;
    let request = String::from_utf8_lossy(&buffer[..n]);
    let mut line = request.split_whitespace();
    let method = line.next().unwrap_or("GET");
    let path = line.next().unwrap_or("/");
    let (status, body) = match (method, path) {
        ("GET", "/metrics") => ("200 OK", metrics(engine)),
        ("GET", "/state") => ("200 OK", state_entries(engine)),
        ("GET", "/") => ("200 OK", "weir: see /metrics\n".to_string()),
        (_, "/metrics" | "/state" | "/") => (
            "405 Method Not Allowed",
            "the HTTP endpoint is read-only: use GET\n".to_string(),
        ),
        _ => ("404 Not Found", "not found\n".to_string()),
    };
    respond(socket, status, body).await
}

async fn respond<S>(mut socket: S, status: &str, body: String) -> std::io::Result<()>
where
    S: AsyncWrite + Unpin,
{
    // Prometheus' text format is plain text with a version parameter.
    let content_type = "text/plain; version=0.0.4";
    let allow = if status.starts_with("405") {
        "Allow: GET\r\n"
    } else {
        ""
    };
    let response = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\n{allow}Connection: close\r\n\r\n{body}",
        body.len()
    );
    socket.write_all(response.as_bytes()).await?;
    socket.shutdown().await
}

/// Operator state entries per view, counted by walking the state family.
fn state_entries(engine: &Engine) -> String {
    let mut out = String::from(
        "# HELP weir_view_state_entries Operator state entries of a view (exact).\n# TYPE weir_view_state_entries gauge\n",
    );
    for (name, entries) in engine.view_state_entries() {
        out.push_str(&format!(
            "weir_view_state_entries{{view=\"{name}\"}} {entries}\n"
        ));
    }
    out
}

fn metrics(engine: &Engine) -> String {
    let m = engine.metrics();
    let counters = [
        (
            "weir_statements_total",
            "Statements executed.",
            &m.statements,
        ),
        (
            "weir_statement_errors_total",
            "Statements that returned an error.",
            &m.statement_errors,
        ),
        (
            "weir_connections_total",
            "Client connections accepted.",
            &m.connections,
        ),
    ];
    let mut out = String::new();
    for (name, help, value) in counters {
        out.push_str(&format!(
            "# HELP {name} {help}\n# TYPE {name} counter\n{name} {}\n",
            value.load(Ordering::Relaxed)
        ));
    }
    let read = engine.entries_read();
    out.push_str(&format!(
        "# HELP weir_state_entries_read_total RocksDB entries read by queries.\n# TYPE weir_state_entries_read_total counter\nweir_state_entries_read_total {read}\n"
    ));
    // Every late row, and every row a view's expression failed on, is a
    // record in its system table's log.
    let records = |table: &str| engine.records_in(table);
    let late = records(crate::catalog::LATE_EVENTS);
    out.push_str(&format!(
        "# HELP weir_late_events_total Rows dropped for arriving after their window was final (see the late_events table).\n# TYPE weir_late_events_total counter\nweir_late_events_total {late}\n"
    ));
    let errors = records(crate::catalog::VIEW_ERRORS);
    out.push_str(&format!(
        "# HELP weir_view_errors_total Rows a view's expression failed on (see the view_errors table).\n# TYPE weir_view_errors_total counter\nweir_view_errors_total {errors}\n"
    ));
    let streams = engine.streams().running();
    out.push_str(&format!(
        "# HELP weir_change_streams COPY change streams running.\n# TYPE weir_change_streams gauge\nweir_change_streams {streams}\n"
    ));
    let tables = engine.object_count();
    out.push_str(&format!(
        "# HELP weir_catalog_objects Objects in the catalog.\n# TYPE weir_catalog_objects gauge\nweir_catalog_objects {tables}\n"
    ));
    out
}
