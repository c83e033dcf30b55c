//! Commands run beside a node rather than in it: `weir backup` and
//! `weir restore`.
//!
//! A running node holds its store's lock, so `weir backup` asks it over
//! pgwire (`BACKUP TO`), at the address the node leaves in its data
//! directory ([`NODE_FILE`]); a stopped node's store it opens itself.

use std::path::{Path, PathBuf};

use crate::error::{Error, Result};
use crate::state::Store;
use crate::state::backup::{self, Manifest};

/// Where a running node says who it is: its process id and pgwire address,
/// one per line, as PostgreSQL's `postmaster.pid` does.
pub const NODE_FILE: &str = "weir.pid";

/// Written once the node holds its data directory; removed when it stops.
pub fn write_node_file(data_dir: &Path, listen: std::net::SocketAddr) -> Result<()> {
    let text = format!("{}\n{listen}\n", std::process::id());
    Ok(std::fs::write(data_dir.join(NODE_FILE), text)?)
}

pub fn remove_node_file(data_dir: &Path) {
    let _ = std::fs::remove_file(data_dir.join(NODE_FILE));
}

/// Back up the node whose data directory is `data_dir` into `to`, online
/// when it runs. `password` is the bootstrap superuser's, when set.
pub async fn backup(data_dir: &Path, to: &Path, password: Option<&str>) -> Result<Manifest> {
    let db = data_dir.join("db");
    if !db.join("CURRENT").is_file() {
        return Err(Error::Config(format!(
            "{} holds no weir data directory",
            data_dir.display()
        )));
    }
    let to = std::path::absolute(to)?;
    match Store::open(&db) {
        Ok(store) => {
            crate::log::writer::recover(&store)?;
            store.backup(&to)
        }
        Err(e) if held_by_a_node(&e) => backup_online(data_dir, &to, password).await,
        Err(e) => Err(e),
    }
}

/// RocksDB's refusal to open a store another process holds.
fn held_by_a_node(e: &Error) -> bool {
    matches!(e, Error::Storage(e) if e.to_string().contains("lock"))
}

async fn backup_online(data_dir: &Path, to: &Path, password: Option<&str>) -> Result<Manifest> {
    let address = node_address(data_dir)?;
    let mut config = tokio_postgres::Config::new();
    config
        .host(address.ip().to_string())
        .port(address.port())
        .user(crate::catalog::BOOTSTRAP_ROLE)
        .dbname("weir")
        .application_name("weir backup");
    if let Some(password) = password {
        config.password(password);
    }
    let (client, connection) = config.connect(tokio_postgres::NoTls).await.map_err(|e| {
        Error::ConnectionFailure(format!(
            "the node at {address} runs on {}, but cannot be reached: {}",
            data_dir.display(),
            reason(&e)
        ))
    })?;
    let connection = tokio::spawn(connection);
    let path = to.display().to_string().replace('\'', "''");
    let done = client.batch_execute(&format!("BACKUP TO '{path}'")).await;
    drop(client);
    let _ = connection.await;
    done.map_err(|e| Error::ConnectionFailure(format!("the backup failed: {}", reason(&e))))?;
    backup::read_manifest(to)
}

/// The server's own message, which tokio-postgres shows as "db error".
fn reason(e: &tokio_postgres::Error) -> String {
    match e.as_db_error() {
        Some(db) => db.message().to_string(),
        None => e.to_string(),
    }
}

/// The running node's pgwire address, from its node file; a node on every
/// address is reached on loopback.
fn node_address(data_dir: &Path) -> Result<std::net::SocketAddr> {
    let path = data_dir.join(NODE_FILE);
    let text = std::fs::read_to_string(&path).map_err(|e| {
        Error::Config(format!(
            "a node holds {} but left no {NODE_FILE} ({e})",
            data_dir.display()
        ))
    })?;
    let mut address: std::net::SocketAddr = text
        .lines()
        .nth(1)
        .and_then(|line| line.parse().ok())
        .ok_or_else(|| Error::Config(format!("{} is unreadable", path.display())))?;
    if address.ip().is_unspecified() {
        address.set_ip(match address {
            std::net::SocketAddr::V4(_) => std::net::Ipv4Addr::LOCALHOST.into(),
            std::net::SocketAddr::V6(_) => std::net::Ipv6Addr::LOCALHOST.into(),
        });
    }
    Ok(address)
}

/// Restore the backup in `from` as the data directory `data_dir`, which
/// must not hold a store yet.
pub fn restore(from: &Path, data_dir: &Path) -> Result<Manifest> {
    let db: PathBuf = data_dir.join("db");
    backup::restore(from, &db)
}
