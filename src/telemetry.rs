//! Logging through `tracing`; `RUST_LOG` (or `WEIR_LOG`) chooses the level,
//! `--log-format` text for people or JSON lines for log collectors.
//!
//! A source's and a sink's lines carry a span naming it (`source{source=bids}`,
//! or `"span":{"name":"source","source":"bids"}` in JSON), a view's lines a
//! `view` field.

use tracing_subscriber::EnvFilter;

/// How log lines are written to stderr.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// One line of text each.
    #[default]
    Text,
    /// One JSON object per line: timestamp, level, target, fields, spans.
    Json,
}

pub fn init(format: LogFormat) {
    let filter = std::env::var("WEIR_LOG")
        .ok()
        .and_then(|v| EnvFilter::try_new(v).ok())
        .or_else(|| EnvFilter::try_from_default_env().ok())
        .unwrap_or_else(|| EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    let _ = match format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder.json().try_init(),
    };
    log_panics();
}

/// Log every panic through `tracing`, with a backtrace. A panic while
/// serving a connection is caught and ends that connection only, so the
/// node keeps running and this log line is what says where it happened.
fn log_panics() {
    std::panic::set_hook(Box::new(|panic| {
        let backtrace = std::backtrace::Backtrace::force_capture();
        let thread = std::thread::current();
        tracing::error!(
            thread = thread.name().unwrap_or("unnamed"),
            panic = %panic,
            backtrace = %backtrace,
            "panicked"
        );
    }));
}
