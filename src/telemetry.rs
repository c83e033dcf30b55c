//! Logging through `tracing`; `RUST_LOG` (or `WEIR_LOG`) chooses the level.

use tracing_subscriber::EnvFilter;

pub fn init() {
    let filter = std::env::var("WEIR_LOG")
        .ok()
        .and_then(|v| EnvFilter::try_new(v).ok())
        .or_else(|| EnvFilter::try_from_default_env().ok())
        .unwrap_or_else(|| EnvFilter::new("info"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .try_init();
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
