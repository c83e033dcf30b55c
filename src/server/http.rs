//! The HTTP endpoint, read-only: the dashboard at `/` and the JSON it
//! reads (`/api/overview`, `/api/views/NAME`), `GET /metrics` in
//! Prometheus' text format, and `GET /state`, which counts every view's
//! operator state entries exactly (it walks the state, so it is for
//! inspection, not for scraping). In a cluster, the node's partitions of
//! a partitioned view's rows go to the other nodes as an Arrow stream
//! (`/internal/partitions/ID`), and its partitions' changes as frames for
//! as long as the peer reads them (`/internal/changes/ID`), for those that
//! show the node's token.
//! What changes the node goes through pgwire, where roles are checked
//! (`VACUUM` compacts the store).
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
use crate::session::merged::{Frame, PARTITION_CHANGES, encode_frame};
use crate::session::partitioned::PARTITION_ROWS;

/// The first byte of a TLS handshake record.
const TLS_HANDSHAKE: u8 = 0x16;

/// How long a client has to send its request and read the answer, so that
/// idle connections do not pile up; a change stream lasts as long as its
/// peer reads it.
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
            if let Err(e) = accept(&engine, socket, tls).await {
                tracing::debug!(cause = %e, "http request failed");
            }
        });
    }
}

async fn accept(
    engine: &Arc<Engine>,
    socket: TcpStream,
    tls: Option<HttpTls>,
) -> std::io::Result<()> {
    let Some(tls) = tls else {
        return serve(engine, socket).await;
    };
    let mut first = [0u8; 1];
    if in_time(socket.peek(&mut first)).await? == 1 && first[0] == TLS_HANDSHAKE {
        let stream = in_time(tls.acceptor.accept(socket)).await?;
        return serve(engine, stream).await;
    }
    if tls.required {
        return in_time(respond(
            socket,
            "403 Forbidden",
            TEXT,
            "TLS is required: use https\n".to_string(),
        ))
        .await;
    }
    serve(engine, socket).await
}

/// The dashboard: one page, compiled in, that reads `/api/...`.
const DASHBOARD: &str = include_str!("dashboard/index.html");

const TEXT: &str = "text/plain; charset=utf-8";
/// Prometheus' text format is plain text with a version parameter.
const PROMETHEUS: &str = "text/plain; version=0.0.4";
const JSON: &str = "application/json";
const ARROW_STREAM: &str = "application/vnd.apache.arrow.stream";

/// `step` within [`REQUEST_TIMEOUT`], or an error.
async fn in_time<T>(step: impl Future<Output = std::io::Result<T>>) -> std::io::Result<T> {
    tokio::time::timeout(REQUEST_TIMEOUT, step)
        .await
        .map_err(|_| std::io::Error::new(std::io::ErrorKind::TimedOut, "request timed out"))?
}

async fn serve<S>(engine: &Arc<Engine>, mut socket: S) -> std::io::Result<()>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let mut buffer = vec![0u8; 4096];
    let n = in_time(socket.read(&mut buffer)).await?;
    let request = String::from_utf8_lossy(&buffer[..n]);
    let mut line = request.split_whitespace();
    let method = line.next().unwrap_or("GET").to_string();
    let target = line.next().unwrap_or("/").to_string();
    if let ("GET", Some(view)) = (method.as_str(), target.strip_prefix(PARTITION_CHANGES)) {
        let (view, query) = view.split_once('?').unwrap_or((view, ""));
        return match engine.changes_for_peer(view, query) {
            Ok(frames) => stream_changes(socket, frames).await,
            Err(e) => in_time(refuse(socket, e)).await,
        };
    }
    in_time(answer(engine, socket, &method, &target)).await
}

/// A peer's request refused, as 503 when it may retry.
async fn refuse<S>(socket: S, e: crate::error::Error) -> std::io::Result<()>
where
    S: AsyncWrite + Unpin,
{
    match e {
        crate::error::Error::PrerequisiteState(_) => {
            respond(socket, "503 Service Unavailable", TEXT, format!("{e}\n")).await
        }
        e => respond(socket, "400 Bad Request", TEXT, format!("{e}\n")).await,
    }
}

/// A leg's frames as they come, until the leg ends or the peer goes. The
/// answer has no length: it ends when the connection does.
async fn stream_changes<S>(
    mut socket: S,
    mut frames: tokio::sync::mpsc::Receiver<(usize, Frame)>,
) -> std::io::Result<()>
where
    S: AsyncWrite + Unpin,
{
    let head = "HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\nCache-Control: no-store\r\nConnection: close\r\n\r\n";
    in_time(socket.write_all(head.as_bytes())).await?;
    while let Some((_, frame)) = frames.recv().await {
        let bytes = encode_frame(&frame).map_err(std::io::Error::other)?;
        // A peer that stops reading is gone: its leg stops with it.
        in_time(socket.write_all(&bytes)).await?;
        in_time(socket.flush()).await?;
    }
    socket.shutdown().await
}

async fn answer<S>(
    engine: &Arc<Engine>,
    socket: S,
    method: &str,
    target: &str,
) -> std::io::Result<()>
where
    S: AsyncWrite + Unpin,
{
    let path = target.split('?').next().unwrap_or(target);
    if let ("GET", Some(view)) = (method, path.strip_prefix(PARTITION_ROWS)) {
        let query = target.split_once('?').map_or("", |(_, q)| q).to_string();
        let (engine, view) = (engine.clone(), view.to_string());
        // Reading a view's rows blocks: not on the task that serves.
        let rows = tokio::task::spawn_blocking(move || engine.rows_for_peer(&view, &query))
            .await
            .map_err(std::io::Error::other)?;
        return match rows {
            Ok(rows) => respond(socket, "200 OK", ARROW_STREAM, rows).await,
            Err(e) => refuse(socket, e).await,
        };
    }
    let (status, content_type, body) = match (method, path) {
        ("GET", "/metrics") => ("200 OK", PROMETHEUS, metrics(engine)),
        ("GET", "/state") => ("200 OK", PROMETHEUS, state_entries(engine)),
        ("GET", "/") => ("200 OK", "text/html; charset=utf-8", DASHBOARD.to_string()),
        ("GET", "/api/overview") => ("200 OK", JSON, engine.overview().to_string()),
        ("GET", _) if path.starts_with("/api/views/") => {
            view_graph(engine, &path["/api/views/".len()..])
        }
        (_, "/metrics" | "/state" | "/" | "/api/overview") => (
            "405 Method Not Allowed",
            TEXT,
            "the HTTP endpoint is read-only: use GET\n".to_string(),
        ),
        _ => ("404 Not Found", TEXT, "not found\n".to_string()),
    };
    respond(socket, status, content_type, body).await
}

/// A running view's graph and counters, by its URL-encoded name.
fn view_graph(engine: &Engine, encoded: &str) -> (&'static str, &'static str, String) {
    let name = percent_decode(encoded);
    match engine.view_graph(&name) {
        Some(graph) => ("200 OK", JSON, graph.to_string()),
        None => (
            "404 Not Found",
            TEXT,
            format!("no running materialized view is named \"{name}\"\n"),
        ),
    }
}

/// `%XX` escapes decoded; anything malformed is kept as it is.
fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = bytes
            .get(i + 1..i + 3)
            .and_then(|h| std::str::from_utf8(h).ok())
            .and_then(|h| u8::from_str_radix(h, 16).ok());
        match (bytes[i], hex) {
            (b'%', Some(byte)) => {
                out.push(byte);
                i += 3;
            }
            (byte, _) => {
                out.push(byte);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

async fn respond<S>(
    mut socket: S,
    status: &str,
    content_type: &str,
    body: impl AsRef<[u8]>,
) -> std::io::Result<()>
where
    S: AsyncWrite + Unpin,
{
    let body = body.as_ref();
    let allow = if status.starts_with("405") {
        "Allow: GET\r\n"
    } else {
        ""
    };
    let head = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\n{allow}Cache-Control: no-store\r\nConnection: close\r\n\r\n",
        body.len()
    );
    socket.write_all(head.as_bytes()).await?;
    socket.write_all(body).await?;
    socket.shutdown().await
}

/// Operator state entries per view, counted by walking the state family.
fn state_entries(engine: &Engine) -> String {
    let mut out = Exposition::default();
    let entries = engine.view_state_entries();
    out.each(
        "weir_view_state_entries",
        "gauge",
        "Operator state entries of a view (exact).",
        "view",
        entries.iter().map(|(name, n)| (name.as_str(), *n as f64)),
    );
    out.0
}

/// Prometheus' text exposition format, a metric family at a time.
#[derive(Default)]
struct Exposition(String);

impl Exposition {
    fn family(&mut self, name: &str, kind: &str, help: &str) -> &mut Self {
        self.0
            .push_str(&format!("# HELP {name} {help}\n# TYPE {name} {kind}\n"));
        self
    }

    fn sample(
        &mut self,
        name: &str,
        labels: &[(&str, &str)],
        value: impl std::fmt::Display,
    ) -> &mut Self {
        let labels: Vec<String> = labels
            .iter()
            .map(|(k, v)| format!("{k}=\"{}\"", escape(v)))
            .collect();
        match labels.is_empty() {
            true => self.0.push_str(&format!("{name} {value}\n")),
            false => self
                .0
                .push_str(&format!("{name}{{{}}} {value}\n", labels.join(","))),
        }
        self
    }

    /// A family with one sample per object, labelled `label` with its name.
    fn each<'a>(
        &mut self,
        name: &str,
        kind: &str,
        help: &str,
        label: &str,
        samples: impl IntoIterator<Item = (&'a str, f64)>,
    ) {
        self.family(name, kind, help);
        for (object, value) in samples {
            self.sample(name, &[(label, object)], value);
        }
    }

    /// A family of one unlabelled sample.
    fn single(&mut self, name: &str, kind: &str, help: &str, value: impl std::fmt::Display) {
        self.family(name, kind, help).sample(name, &[], value);
    }
}

/// A label value with backslash, quote and newline escaped.
fn escape(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

fn metrics(engine: &Engine) -> String {
    let mut out = Exposition::default();
    let m = engine.metrics();
    let load = |c: &std::sync::atomic::AtomicU64| c.load(Ordering::Relaxed);
    out.single(
        "weir_statements_total",
        "counter",
        "Statements executed.",
        load(&m.statements),
    );
    out.single(
        "weir_statement_errors_total",
        "counter",
        "Statements that returned an error.",
        load(&m.statement_errors),
    );
    out.single(
        "weir_connections_total",
        "counter",
        "Client connections accepted.",
        load(&m.connections),
    );
    out.single(
        "weir_state_entries_read_total",
        "counter",
        "RocksDB entries read by queries.",
        engine.entries_read(),
    );
    // Every late row, and every row a view's expression failed on, is a
    // record in its system table's log.
    out.single(
        "weir_late_events_total",
        "counter",
        "Rows dropped for arriving after their window was final (see the late_events table).",
        engine.records_in(crate::catalog::LATE_EVENTS),
    );
    out.single(
        "weir_view_errors_total",
        "counter",
        "Rows a view's expression failed on (see the view_errors table).",
        engine.records_in(crate::catalog::VIEW_ERRORS),
    );
    out.single(
        "weir_change_streams",
        "gauge",
        "COPY change streams running.",
        engine.streams().running(),
    );
    out.single(
        "weir_catalog_objects",
        "gauge",
        "Objects in the catalog.",
        engine.object_count(),
    );
    out.single(
        "weir_epochs_total",
        "counter",
        "Number of the last epoch that changed a view (barriers are numbered from the first start).",
        engine.epoch(),
    );
    views(&mut out, engine);
    connectors(&mut out, engine);
    let (files, memory) = engine.store_bytes();
    out.single(
        "weir_store_file_bytes",
        "gauge",
        "Bytes of the store's table files.",
        files,
    );
    out.single(
        "weir_store_memtable_bytes",
        "gauge",
        "Bytes of the store's memtables.",
        memory,
    );
    process(&mut out);
    out.0
}

/// A per-view metric: name, type, help, and its value for a view.
type ViewFamily = (
    &'static str,
    &'static str,
    &'static str,
    fn(&crate::session::ViewStatus) -> f64,
);

fn views(out: &mut Exposition, engine: &Engine) {
    let views = engine.view_statuses();
    let families: [ViewFamily; 7] = [
        (
            "weir_view_changes_read_total",
            "counter",
            "Changes a view read from its inputs since it started.",
            |v| v.changes_read as f64,
        ),
        (
            "weir_view_epochs_total",
            "counter",
            "Epochs a view committed since it started.",
            |v| v.epochs as f64,
        ),
        (
            "weir_view_operator_seconds_total",
            "counter",
            "Time a view's operators spent in their own code.",
            |v| v.operator_seconds,
        ),
        (
            "weir_view_progress_ratio",
            "gauge",
            "How far a view has read its inputs, 0 to 1.",
            |v| v.progress,
        ),
        (
            "weir_view_failed",
            "gauge",
            "1 when a view stopped on an error.",
            |v| f64::from(u8::from(v.failed.is_some())),
        ),
        (
            "weir_view_behind_records",
            "gauge",
            "Records in a view's inputs it has not read yet.",
            |v| v.behind as f64,
        ),
        (
            "weir_view_state_bytes",
            "gauge",
            "Bytes of a view's operator state in the store's files (RocksDB's estimate).",
            |v| v.state_bytes as f64,
        ),
    ];
    for (name, kind, help, value) in families {
        let samples = views.iter().map(|v| (v.name.as_str(), value(v)));
        out.each(name, kind, help, "view", samples);
    }
    let builds = engine.view_builds();
    out.each(
        "weir_view_builds_total",
        "counter",
        "Times this node started building its part of a partitioned view since it started: \
         at creation, and for each new set of partitions the cluster gave it.",
        "view",
        builds.iter().map(|(name, n)| (name.as_str(), *n as f64)),
    );
}

fn connectors(out: &mut Exposition, engine: &Engine) {
    let all = engine.connector_statuses();
    let (sinks, sources): (Vec<_>, Vec<_>) = all.iter().partition(|c| c.sink);
    let running = |c: &crate::session::ConnectorStatus| u8::from(c.status == "running");
    out.each(
        "weir_source_messages_total",
        "counter",
        "Messages a source read since the node started.",
        "source",
        sources.iter().map(|c| (c.name.as_str(), c.messages as f64)),
    );
    out.each(
        "weir_source_errors_total",
        "counter",
        "Messages a source could not read (see source_errors).",
        "source",
        sources.iter().map(|c| (c.name.as_str(), c.errors as f64)),
    );
    out.family(
        "weir_source_lag_messages",
        "gauge",
        "Messages in a Kafka partition a source has not read yet (checked every 5 s while it reads).",
    );
    for c in &sources {
        for (partition, position) in &c.partitions {
            let partition = partition.to_string();
            out.sample(
                "weir_source_lag_messages",
                &[("source", &c.name), ("partition", &partition)],
                position.lag(),
            );
        }
    }
    out.each(
        "weir_sink_messages_total",
        "counter",
        "Messages a sink wrote since the node started.",
        "sink",
        sinks.iter().map(|c| (c.name.as_str(), c.messages as f64)),
    );
    out.family(
        "weir_connector_running",
        "gauge",
        "1 while a source or sink runs, 0 while it retries or has failed.",
    );
    for c in &all {
        let kind = if c.sink { "sink" } else { "source" };
        out.sample(
            "weir_connector_running",
            &[("name", &c.name), ("kind", kind)],
            running(c),
        );
    }
}

fn process(out: &mut Exposition) {
    let Some(p) = crate::telemetry::process_stats() else {
        return;
    };
    out.single(
        "process_cpu_seconds_total",
        "counter",
        "User and system CPU time spent.",
        p.cpu_seconds,
    );
    out.single(
        "process_resident_memory_bytes",
        "gauge",
        "Resident memory size.",
        p.resident_bytes,
    );
    out.single(
        "process_start_time_seconds",
        "gauge",
        "Start time of the process since 1970.",
        p.start_time_seconds,
    );
    out.single(
        "process_open_fds",
        "gauge",
        "Open file descriptors.",
        p.open_fds,
    );
}
