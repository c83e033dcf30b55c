//! The `weir` command: flags -> Config -> telemetry -> serve.

use std::net::SocketAddr;
use std::path::PathBuf;

use anyhow::Context;
use clap::{Parser, Subcommand};
use weir::config::{Auth, Config, Overrides, Secret};
use weir::session::Engine;

// Operators allocate small keys and states at a high rate; mimalloc serves
// them faster than the system allocator.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// mimalloc's `mi_option_purge_delay` (its header numbers the options; the
/// bindings name only some of them).
const PURGE_DELAY_OPTION: libmimalloc_sys::mi_option_t = 15;

/// How long freed memory stays mapped before it goes back to the system.
/// Operators free and reallocate batch-sized buffers every few
/// milliseconds; returning them at the default 10 ms made every batch fault
/// its pages in again and zero them, a tenth of a windowed view's CPU.
const PURGE_DELAY_MS: std::ffi::c_long = 1000;

/// Stands in for the C library's `posix_fadvise` in this binary, for
/// RocksDB's calls to it. RocksDB's SST file writer drops every file it
/// writes from the page cache (`POSIX_FADV_DONTNEED`) and its C API cannot
/// turn that off; but the log of a bulk load is read back at once by every
/// view over the table, and a read of dropped pages costs about 2 CPU-s per
/// GB on virtual disks. So that advice is ignored and the kernel's own
/// policy keeps or evicts the pages; every other advice is passed on.
/// rustix makes the system call itself, so this does not call itself.
#[allow(unsafe_code)]
#[unsafe(no_mangle)]
pub extern "C" fn posix_fadvise(
    fd: std::ffi::c_int,
    offset: i64,
    len: i64,
    advice: std::ffi::c_int,
) -> std::ffi::c_int {
    use rustix::fs::Advice;
    let advice = match advice {
        0 => Advice::Normal,
        1 => Advice::Random,
        2 => Advice::Sequential,
        3 => Advice::WillNeed,
        4 => return 0,
        5 => Advice::NoReuse,
        _ => return rustix::io::Errno::INVAL.raw_os_error(),
    };
    let (Ok(offset), Ok(len)) = (u64::try_from(offset), u64::try_from(len)) else {
        return rustix::io::Errno::INVAL.raw_os_error();
    };
    if fd < 0 {
        return rustix::io::Errno::BADF.raw_os_error();
    }
    // SAFETY: the caller passes a descriptor it holds open for this call.
    let fd = unsafe { rustix::fd::BorrowedFd::borrow_raw(fd) };
    match rustix::fs::fadvise(fd, offset, std::num::NonZeroU64::new(len), advice) {
        Ok(()) => 0,
        Err(e) => e.raw_os_error(),
    }
}

/// weir: a streaming SQL database server that speaks the Postgres wire protocol.
#[derive(Debug, Parser)]
#[command(name = "weir", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    #[command(flatten)]
    serve: ServeArgs,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Start a node (the default when no command is given).
    Serve(Box<ServeArgs>),
    /// Copy a node's whole store, consistently, while it runs or not.
    Backup(BackupArgs),
    /// Make a new data directory from a backup.
    Restore(RestoreArgs),
}

#[derive(Debug, Clone, clap::Args)]
struct BackupArgs {
    /// The node's data directory
    #[arg(long, env = "WEIR_DATA_DIR", value_name = "DIR")]
    data_dir: PathBuf,
    /// Where the backup goes: a new or empty directory
    #[arg(long, value_name = "DIR")]
    to: PathBuf,
    /// File whose first line is the superuser weir's password, when the
    /// running node has one (or set WEIR_PASSWORD)
    #[arg(long, env = "WEIR_PASSWORD_FILE", value_name = "FILE")]
    password_file: Option<PathBuf>,
}

#[derive(Debug, Clone, clap::Args)]
struct RestoreArgs {
    /// A directory `weir backup` made
    #[arg(long, value_name = "DIR")]
    from: PathBuf,
    /// The new node's data directory: new or empty
    #[arg(long, env = "WEIR_DATA_DIR", value_name = "DIR")]
    data_dir: PathBuf,
}

#[derive(Debug, Clone, clap::Args)]
struct ServeArgs {
    /// Address for the Postgres wire protocol [default: 127.0.0.1:6544]
    #[arg(long, env = "WEIR_LISTEN", value_name = "ADDR:PORT")]
    listen: Option<SocketAddr>,
    /// Address for the HTTP endpoint serving /metrics [default: 127.0.0.1:6545]
    #[arg(long, env = "WEIR_HTTP_LISTEN", value_name = "ADDR:PORT")]
    http_listen: Option<SocketAddr>,
    /// Directory for all data (RocksDB, the embedded log) [default: ./weir-data]
    #[arg(long, env = "WEIR_DATA_DIR", value_name = "DIR")]
    data_dir: Option<PathBuf>,
    /// TOML file with the same settings; flags and WEIR_* variables override it
    #[arg(long, env = "WEIR_CONFIG", value_name = "FILE")]
    config: Option<PathBuf>,
    /// Partitions of each new table's log topic [default: 1]
    #[arg(long, env = "WEIR_DEFAULT_PARTITIONS", value_name = "N")]
    default_partitions: Option<u32>,
    /// Milliseconds between barriers (epoch boundaries) [default: 100]
    #[arg(long, env = "WEIR_BARRIER_INTERVAL_MS", value_name = "MS")]
    barrier_interval_ms: Option<u64>,
    /// Take processing time from ADVANCE CLOCK instead of the wall clock (for tests)
    #[arg(long, env = "WEIR_MANUAL_CLOCK")]
    manual_clock: bool,
    /// Milliseconds of processing time after which a source without new
    /// records stops holding back watermarks of operators with other inputs [default: 10000]
    #[arg(long, env = "WEIR_IDLE_TIMEOUT_MS", value_name = "MS")]
    idle_timeout_ms: Option<u64>,
    /// MiB that must stay free on the data directory's disk; writes fail
    /// with SQLSTATE 53100 below it and succeed again once space is freed [default: 64]
    #[arg(long, env = "WEIR_MIN_FREE_DISK_MB", value_name = "MB")]
    min_free_disk_mb: Option<u64>,
    /// Acknowledge writes without syncing them to disk: only to measure what
    /// fsync costs; a power cut loses acknowledged writes
    #[arg(long, env = "WEIR_NO_FSYNC")]
    no_fsync: bool,
    /// File whose first line is the password of the superuser weir; with
    /// a password (this or WEIR_PASSWORD) clients log in with SCRAM-SHA-256
    #[arg(long, env = "WEIR_PASSWORD_FILE", value_name = "FILE")]
    password_file: Option<PathBuf>,
    /// How clients log in: `password` (needs a password) or `trust` (anyone,
    /// without one, on any address) [default: password when one is set,
    /// else trust on a loopback address only]
    #[arg(long, env = "WEIR_AUTH", value_name = "METHOD")]
    auth: Option<weir::config::AuthMethod>,
    /// Connections served at once; more get SQLSTATE 53300 [default: 1000]
    #[arg(long, env = "WEIR_MAX_CONNECTIONS", value_name = "N")]
    max_connections: Option<usize>,
    /// PEM certificate chain for TLS on the pgwire port (with --tls-key)
    #[arg(long, env = "WEIR_TLS_CERT", value_name = "FILE")]
    tls_cert: Option<PathBuf>,
    /// PEM private key of the TLS certificate
    #[arg(long, env = "WEIR_TLS_KEY", value_name = "FILE")]
    tls_key: Option<PathBuf>,
    /// Refuse clients that do not use TLS (SQLSTATE 28000)
    #[arg(long, env = "WEIR_TLS_REQUIRED")]
    tls_required: bool,
    /// Join the cluster of this name (needs --kafka): nodes share their
    /// catalog through Kafka and list each other in SHOW CLUSTER
    #[arg(long, env = "WEIR_CLUSTER", value_name = "NAME")]
    cluster: Option<String>,
    /// The Kafka that coordinates the cluster (with --cluster)
    #[arg(long, env = "WEIR_KAFKA", value_name = "HOST:PORT")]
    kafka: Option<String>,
    /// This node's name in its cluster [default: its advertised address]
    #[arg(long, env = "WEIR_NODE_NAME", value_name = "NAME")]
    node_name: Option<String>,
    /// The pgwire address other nodes and clients reach this node at
    /// [default: the listen address]
    #[arg(long, env = "WEIR_ADVERTISE_ADDRESS", value_name = "HOST:PORT")]
    advertise_address: Option<String>,
    /// Partitions the cluster's work is split into, fixed by its first node [default: 12]
    #[arg(long, env = "WEIR_CLUSTER_PARTITIONS", value_name = "N")]
    cluster_partitions: Option<u32>,
    /// Keep partitioned views warm for the partitions this node would get
    /// were up to N other nodes to fail, so that it serves them at once
    /// [default: 0]
    #[arg(long, env = "WEIR_STANDBYS", value_name = "N")]
    standbys: Option<u32>,
    /// How log lines are written to stderr: text or json (one object per line)
    #[arg(
        long,
        env = "WEIR_LOG_FORMAT",
        value_name = "FORMAT",
        default_value = "text"
    )]
    log_format: weir::telemetry::LogFormat,
}

fn main() -> anyhow::Result<()> {
    // SAFETY: sets a plain integer option; mimalloc reads it on each purge.
    #[allow(unsafe_code)]
    unsafe {
        libmimalloc_sys::mi_option_set(PURGE_DELAY_OPTION, PURGE_DELAY_MS)
    };
    let cli = Cli::parse();
    let args = match cli.command {
        Some(Command::Serve(args)) => *args,
        Some(Command::Backup(args)) => return backup(args),
        Some(Command::Restore(args)) => return restore(args),
        None => cli.serve,
    };
    weir::telemetry::init(args.log_format);
    raise_open_file_limit();
    let overrides = Overrides {
        listen: args.listen,
        http_listen: args.http_listen,
        data_dir: args.data_dir,
        default_partitions: args.default_partitions,
        barrier_interval_ms: args.barrier_interval_ms,
        manual_clock: args.manual_clock.then_some(true),
        idle_timeout_ms: args.idle_timeout_ms,
        min_free_disk_mb: args.min_free_disk_mb,
        fsync: args.no_fsync.then_some(false),
        auth: args.auth,
        // Read here rather than as a flag, so that it never shows in `ps`;
        // empty is unset, as a compose file passes an unset variable on.
        password: std::env::var("WEIR_PASSWORD")
            .ok()
            .filter(|p| !p.is_empty())
            .map(Secret::new),
        password_file: args.password_file,
        max_connections: args.max_connections,
        tls_cert: args.tls_cert,
        tls_key: args.tls_key,
        tls_required: args.tls_required.then_some(true),
        cluster: args.cluster,
        kafka: args.kafka,
        node_name: args.node_name,
        advertise_address: args.advertise_address,
        cluster_partitions: args.cluster_partitions,
        standbys: args.standbys,
    };
    let config = Config::resolve(overrides, args.config.as_deref())?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("weir-server")
        .thread_stack_size(weir::config::STATEMENT_STACK_BYTES)
        .build()
        .context("cannot start the async runtime")?;
    let result = runtime.block_on(serve(config));
    // Readers still running hold the store; RocksDB must close before the process exits.
    runtime.shutdown_timeout(std::time::Duration::from_secs(5));
    result
}

fn backup(args: BackupArgs) -> anyhow::Result<()> {
    let password = match (&args.password_file, std::env::var("WEIR_PASSWORD")) {
        (Some(file), _) => Some(weir::config::read_password(file)?.expose().to_string()),
        (None, Ok(password)) if !password.is_empty() => Some(password),
        _ => None,
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    let started = std::time::Instant::now();
    let manifest = runtime.block_on(weir::admin::backup(
        &args.data_dir,
        &args.to,
        password.as_deref(),
    ))?;
    println!(
        "backed up {} ({} files, {:.1} MiB) into {} in {:.1} s",
        args.data_dir.display(),
        manifest.files,
        manifest.bytes as f64 / (1024.0 * 1024.0),
        args.to.display(),
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

fn restore(args: RestoreArgs) -> anyhow::Result<()> {
    let started = std::time::Instant::now();
    let manifest = weir::admin::restore(&args.from, &args.data_dir)?;
    println!(
        "restored {} ({} files, {:.1} MiB, made by weir {}) as {} in {:.1} s",
        args.from.display(),
        manifest.files,
        manifest.bytes as f64 / (1024.0 * 1024.0),
        manifest.version,
        args.data_dir.display(),
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

/// Raise the soft limit on open files to the hard one. Each connection
/// holds two descriptors (its socket and the handle its thread polls) and
/// RocksDB keeps its files open, so the common soft default of 1,024 would
/// turn a few hundred clients away long before the machine is busy.
fn raise_open_file_limit() {
    use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};
    let limit = getrlimit(Resource::Nofile);
    let (Some(current), Some(maximum)) = (limit.current, limit.maximum) else {
        return;
    };
    if current >= maximum {
        return;
    }
    let raised = Rlimit {
        current: Some(maximum),
        maximum: Some(maximum),
    };
    if let Err(e) = setrlimit(Resource::Nofile, raised) {
        tracing::warn!(cause = %e, "cannot raise the open file limit");
    }
}

async fn serve(config: Config) -> anyhow::Result<()> {
    let listener = tokio::net::TcpListener::bind(config.listen)
        .await
        .with_context(|| format!("cannot listen on {}", config.listen))?;
    let http = tokio::net::TcpListener::bind(config.http_listen)
        .await
        .with_context(|| format!("cannot listen on {}", config.http_listen))?;
    let engine = Engine::open(config.clone())
        .with_context(|| format!("cannot open data directory {}", config.data_dir.display()))?;
    engine
        .start_views()
        .await
        .context("cannot start materialized views")?;
    if let Some(cluster) = &config.cluster {
        engine.join_cluster().await.with_context(|| {
            format!(
                "cannot join cluster {} through the Kafka at {}",
                cluster.name, cluster.kafka
            )
        })?;
    }
    if config.auth == Auth::Trust && !config.listen.ip().is_loopback() {
        tracing::warn!(
            listen = %config.listen,
            "--auth trust: anyone who reaches this address connects as any user, without a password"
        );
    }
    tracing::info!(
        listen = %config.listen,
        http_listen = %config.http_listen,
        data_dir = %config.data_dir.display(),
        "weir is ready"
    );
    let listening = listener.local_addr().unwrap_or(config.listen);
    weir::admin::write_node_file(&config.data_dir, listening)
        .context("cannot write the node file into the data directory")?;
    let http_tls = weir::server::http_tls(&config).context("cannot set up TLS")?;
    let http = tokio::spawn(weir::server::http::run(engine.clone(), http, http_tls));
    weir::server::run(engine.clone(), listener, shutdown_signal()).await?;
    engine.leave_cluster();
    http.abort();
    let _ = http.await;
    weir::admin::remove_node_file(&config.data_dir);
    tracing::info!("stopped");
    Ok(())
}

/// SIGTERM or Ctrl-C.
async fn shutdown_signal() {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .expect("installing a SIGTERM handler cannot fail on unix");
    tokio::select! {
        _ = term.recv() => {}
        _ = tokio::signal::ctrl_c() => {}
    }
}

#[cfg(test)]
mod tests {
    use std::os::fd::AsRawFd;

    use super::posix_fadvise;

    #[test]
    fn fadvise_ignores_dont_need_and_passes_the_rest_on() {
        let file = tempfile::tempfile().expect("tempfile");
        let fd = file.as_raw_fd();
        assert_eq!(posix_fadvise(fd, 0, 0, 4), 0, "DONTNEED");
        assert_eq!(posix_fadvise(fd, 0, 4096, 3), 0, "WILLNEED");
        assert_eq!(
            posix_fadvise(fd, 0, 0, 99),
            rustix::io::Errno::INVAL.raw_os_error()
        );
        assert_eq!(
            posix_fadvise(-1, 0, 0, 2),
            rustix::io::Errno::BADF.raw_os_error()
        );
    }
}
