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

/// The process as Prometheus' client libraries report it (`process_*`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ProcessStats {
    /// User and system CPU time.
    pub cpu_seconds: f64,
    pub resident_bytes: u64,
    /// When the process started, in seconds since 1970.
    pub start_time_seconds: f64,
    pub open_fds: u64,
}

/// Read from `/proc`; `None` where there is none.
pub fn process_stats() -> Option<ProcessStats> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // Fields after the command, which is in parentheses and may hold spaces.
    let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    let ticks = rustix::param::clock_ticks_per_second() as f64;
    let field = |n: usize| fields.get(n - 3)?.parse::<f64>().ok();
    let cpu_seconds = (field(14)? + field(15)?) / ticks;
    let boot = std::fs::read_to_string("/proc/stat")
        .ok()?
        .lines()
        .find_map(|l| l.strip_prefix("btime ")?.trim().parse::<f64>().ok())?;
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    let pages: u64 = statm.split_whitespace().nth(1)?.parse().ok()?;
    let open_fds = std::fs::read_dir("/proc/self/fd").ok()?.count() as u64;
    Some(ProcessStats {
        cpu_seconds,
        resident_bytes: pages * rustix::param::page_size() as u64,
        start_time_seconds: boot + field(22)? / ticks,
        open_fds,
    })
}
