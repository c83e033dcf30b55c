//! The HTTP endpoint: `GET /metrics` in Prometheus' text format;
//! `GET /state`, which counts every view's operator state entries exactly
//! (it walks the state, so it is for inspection, not for scraping); and
//! `POST /compact`, which compacts the whole store and answers once it is
//! done (after dropping large objects, or before a benchmark run).
//!
//! One endpoint with fixed responses does not justify an HTTP framework's
//! build time; this reads the request line and answers.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use crate::session::Engine;

pub async fn run(engine: Arc<Engine>, listener: TcpListener) {
    loop {
        let Ok((socket, _)) = listener.accept().await else {
            continue;
        };
        let engine = engine.clone();
        tokio::spawn(async move {
            if let Err(e) = serve(&engine, socket).await {
                tracing::debug!(cause = %e, "http request failed");
            }
        });
    }
}

async fn serve(engine: &Arc<Engine>, mut socket: TcpStream) -> std::io::Result<()> {
    let mut buffer = vec![0u8; 4096];
    let n = socket.read(&mut buffer).await?;
    let request = String::from_utf8_lossy(&buffer[..n]);
    let mut line = request.split_whitespace();
    let method = line.next().unwrap_or("GET");
    let path = line.next().unwrap_or("/");
    let (status, content_type, body) = match (method, path) {
        ("GET", "/metrics") => ("200 OK", "text/plain; version=0.0.4", metrics(engine)),
        ("GET", "/state") => ("200 OK", "text/plain; version=0.0.4", state_entries(engine)),
        ("POST", "/compact") => compact(engine).await,
        ("GET", "/") => ("200 OK", "text/plain", "weir: see /metrics\n".to_string()),
        (_, "/metrics" | "/state" | "/compact" | "/") => (
            "405 Method Not Allowed",
            "text/plain",
            "use GET for /metrics and /state, POST for /compact\n".to_string(),
        ),
        _ => ("404 Not Found", "text/plain", "not found\n".to_string()),
    };
    let response = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    socket.write_all(response.as_bytes()).await?;
    socket.shutdown().await
}

/// Compact the store on a blocking thread; the status and how long it took.
async fn compact(engine: &Arc<Engine>) -> (&'static str, &'static str, String) {
    let engine = engine.clone();
    let started = std::time::Instant::now();
    match tokio::task::spawn_blocking(move || engine.compact()).await {
        Ok(()) => (
            "200 OK",
            "text/plain",
            format!("compacted in {:.3} s\n", started.elapsed().as_secs_f64()),
        ),
        Err(e) => (
            "500 Internal Server Error",
            "text/plain",
            format!("compaction failed: {e}\n"),
        ),
    }
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
