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
}
