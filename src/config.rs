//! One typed configuration, passed explicitly to everything that needs it.
//!
//! Precedence: command-line flags, then `WEIR_*` environment variables, then
//! the TOML file named by `--config`, then the defaults documented here.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

use crate::error::{Error, Result};

/// Everything a node needs to start.
#[derive(Debug, Clone)]
pub struct Config {
    /// Where pgwire listens. Default `127.0.0.1:6544`.
    pub listen: SocketAddr,
    /// Where the HTTP endpoint (`/metrics`) listens. Default `127.0.0.1:6545`.
    pub http_listen: SocketAddr,
    /// The data directory: RocksDB lives in `<data_dir>/db`. Default `./weir-data`.
    pub data_dir: PathBuf,
    /// Partitions of each new table's log topic. Default 1.
    pub default_partitions: u32,
    /// How often sources inject a barrier. Default 100 ms.
    pub barrier_interval: Duration,
    /// Take processing time from `ADVANCE CLOCK` instead of the wall clock. Default off.
    pub manual_clock: bool,
    /// Processing time after which a source without new records stops
    /// holding back the watermark of operators that also read other sources.
    /// Default 10 s.
    pub idle_timeout: Duration,
    /// Bytes that must stay free on the data directory's disk; writes fail
    /// with 53100 below it. Default 64 MiB.
    pub min_free_disk: u64,
    /// Sync every commit to disk before acknowledging it. Default on; off
    /// only to measure what it costs.
    pub fsync: bool,
    /// Who may connect. Default: a password check when the bootstrap
    /// superuser has a password, else anyone, on a loopback address only.
    pub auth: Auth,
    /// Connections served at once; more are refused with 53300. Default 1000.
    pub max_connections: usize,
    /// TLS for pgwire: a PEM certificate chain and its private key. Default none.
    pub tls: Option<Tls>,
    /// This node's name in `SHOW CLUSTER` and in the cluster's topics.
    /// Default: its advertised address.
    pub node_name: String,
    /// The pgwire address other nodes and clients reach this node at.
    /// Default: the listen address, with the host's name for an unspecified IP.
    pub advertise: String,
    /// The partitions a cluster's work is split into: fixed when the
    /// cluster's first node creates its topics. Default 12.
    pub cluster_partitions: u32,
    /// `--cluster NAME --kafka HOST:PORT`: the cluster this node joins. Default none.
    pub cluster: Option<Cluster>,
}

/// The cluster a node joins, and the Kafka that coordinates it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cluster {
    pub name: String,
    pub kafka: String,
    /// `--standbys N`: how many failures of other nodes each node keeps
    /// warm copies of partitioned views for. Default 0.
    pub standbys: u32,
}

/// More standbys than this would have each node keep nearly everything
/// in any cluster small enough to run, and make the guess of what a
/// failure brings (every set of nodes that may fail) costly.
pub const MAX_STANDBYS: u32 = 3;

/// `--tls-cert`, `--tls-key` and `--tls-required`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tls {
    pub cert: PathBuf,
    pub key: PathBuf,
    /// Refuse clients that do not ask for TLS.
    pub required: bool,
}

/// How clients are let in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Auth {
    /// Any user and database, without a password; only on a loopback
    /// address, where every client is a local one.
    LoopbackTrust,
    /// Any user and database, without a password, on any address
    /// (`--auth trust`).
    Trust,
    /// SCRAM-SHA-256 against the roles' verifiers; the bootstrap superuser
    /// `weir` has this password.
    Password(Secret),
}

/// A value kept out of logs and debug output.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    pub fn new(value: String) -> Secret {
        Secret(value)
    }

    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("[REDACTED]")
    }
}

/// `--auth`: how clients are let in when it is said explicitly.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AuthMethod {
    /// Anyone, on any address.
    Trust,
    /// A password; one must be given.
    Password,
}

impl std::str::FromStr for AuthMethod {
    type Err = String;

    fn from_str(text: &str) -> std::result::Result<AuthMethod, String> {
        match text {
            "trust" => Ok(AuthMethod::Trust),
            "password" | "scram-sha-256" => Ok(AuthMethod::Password),
            other => Err(format!(
                "unknown auth method \"{other}\"; use trust or password"
            )),
        }
    }
}

pub const DEFAULT_MAX_CONNECTIONS: usize = 1000;

pub const DEFAULT_LISTEN: &str = "127.0.0.1:6544";
pub const DEFAULT_HTTP_LISTEN: &str = "127.0.0.1:6545";
pub const DEFAULT_DATA_DIR: &str = "./weir-data";
/// Divisible by 1, 2, 3, 4 and 6, so that small clusters share it evenly.
pub const DEFAULT_CLUSTER_PARTITIONS: u32 = 12;

/// Stack of every thread that parses, plans or evaluates statements and
/// views. Syntax trees are walked recursively, and a statement as deep as
/// [`crate::sql::parser::MAX_DEPTH`] allows needs more than the 2 MiB a
/// thread gets by default; untouched stack costs address space, not memory.
pub const STATEMENT_STACK_BYTES: usize = 32 << 20;

impl Default for Config {
    fn default() -> Self {
        Config {
            listen: DEFAULT_LISTEN.parse().expect("constant address parses"),
            http_listen: DEFAULT_HTTP_LISTEN
                .parse()
                .expect("constant address parses"),
            data_dir: PathBuf::from(DEFAULT_DATA_DIR),
            default_partitions: 1,
            barrier_interval: Duration::from_millis(100),
            manual_clock: false,
            idle_timeout: Duration::from_secs(10),
            min_free_disk: 64 << 20,
            fsync: true,
            auth: Auth::LoopbackTrust,
            max_connections: DEFAULT_MAX_CONNECTIONS,
            tls: None,
            node_name: DEFAULT_LISTEN.into(),
            advertise: DEFAULT_LISTEN.into(),
            cluster_partitions: DEFAULT_CLUSTER_PARTITIONS,
            cluster: None,
        }
    }
}

/// Values given on the command line or in the environment; `None` means unset.
#[derive(Debug, Default, Clone)]
pub struct Overrides {
    pub listen: Option<SocketAddr>,
    pub http_listen: Option<SocketAddr>,
    pub data_dir: Option<PathBuf>,
    pub default_partitions: Option<u32>,
    pub barrier_interval_ms: Option<u64>,
    pub manual_clock: Option<bool>,
    pub idle_timeout_ms: Option<u64>,
    pub min_free_disk_mb: Option<u64>,
    pub fsync: Option<bool>,
    pub auth: Option<AuthMethod>,
    /// `WEIR_PASSWORD`: the bootstrap superuser's password itself.
    pub password: Option<Secret>,
    /// `--password-file`: a file whose first line is that password.
    pub password_file: Option<PathBuf>,
    pub max_connections: Option<usize>,
    pub tls_cert: Option<PathBuf>,
    pub tls_key: Option<PathBuf>,
    pub tls_required: Option<bool>,
    pub cluster: Option<String>,
    pub kafka: Option<String>,
    pub node_name: Option<String>,
    pub advertise_address: Option<String>,
    pub cluster_partitions: Option<u32>,
    pub standbys: Option<u32>,
}

/// The TOML file's shape: the same names as the flags, with underscores.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileConfig {
    listen: Option<SocketAddr>,
    http_listen: Option<SocketAddr>,
    data_dir: Option<PathBuf>,
    default_partitions: Option<u32>,
    barrier_interval_ms: Option<u64>,
    manual_clock: Option<bool>,
    idle_timeout_ms: Option<u64>,
    min_free_disk_mb: Option<u64>,
    fsync: Option<bool>,
    auth: Option<AuthMethod>,
    password_file: Option<PathBuf>,
    max_connections: Option<usize>,
    tls_cert: Option<PathBuf>,
    tls_key: Option<PathBuf>,
    tls_required: Option<bool>,
    cluster: Option<String>,
    kafka: Option<String>,
    node_name: Option<String>,
    advertise_address: Option<String>,
    cluster_partitions: Option<u32>,
    standbys: Option<u32>,
}

impl Config {
    /// Resolve flags and environment (already merged by the CLI) over an optional file.
    pub fn resolve(overrides: Overrides, file: Option<&Path>) -> Result<Config> {
        let file = match file {
            Some(path) => read_file(path)?,
            None => FileConfig::default(),
        };
        let defaults = Config::default();
        let barrier_ms = overrides.barrier_interval_ms.or(file.barrier_interval_ms);
        let auth = auth(&overrides, &file)?;
        let tls = tls(&overrides, &file)?;
        let cluster = cluster(&overrides, &file)?;
        let listen = overrides.listen.or(file.listen).unwrap_or(defaults.listen);
        let advertise = overrides
            .advertise_address
            .clone()
            .or(file.advertise_address.clone())
            .unwrap_or_else(|| advertised(listen));
        let node_name = overrides
            .node_name
            .clone()
            .or(file.node_name.clone())
            .unwrap_or_else(|| advertise.clone());
        let config = Config {
            listen,
            http_listen: overrides
                .http_listen
                .or(file.http_listen)
                .unwrap_or(defaults.http_listen),
            data_dir: overrides
                .data_dir
                .or(file.data_dir)
                .unwrap_or(defaults.data_dir),
            default_partitions: overrides
                .default_partitions
                .or(file.default_partitions)
                .unwrap_or(defaults.default_partitions),
            barrier_interval: barrier_ms
                .map(Duration::from_millis)
                .unwrap_or(defaults.barrier_interval),
            manual_clock: overrides
                .manual_clock
                .or(file.manual_clock)
                .unwrap_or(defaults.manual_clock),
            idle_timeout: overrides
                .idle_timeout_ms
                .or(file.idle_timeout_ms)
                .map(Duration::from_millis)
                .unwrap_or(defaults.idle_timeout),
            min_free_disk: overrides
                .min_free_disk_mb
                .or(file.min_free_disk_mb)
                .map(|mb| mb << 20)
                .unwrap_or(defaults.min_free_disk),
            fsync: overrides.fsync.or(file.fsync).unwrap_or(defaults.fsync),
            max_connections: overrides
                .max_connections
                .or(file.max_connections)
                .unwrap_or(defaults.max_connections),
            auth,
            tls,
            node_name,
            advertise,
            cluster_partitions: overrides
                .cluster_partitions
                .or(file.cluster_partitions)
                .unwrap_or(defaults.cluster_partitions),
            cluster,
        };
        if config.auth == Auth::LoopbackTrust && !config.listen.ip().is_loopback() {
            return Err(Error::Config(format!(
                "refusing to listen on {} without a password: set WEIR_PASSWORD or \
                 --password-file FILE, or pass --auth trust to let anyone in without one",
                config.listen
            )));
        }
        if config.max_connections == 0 {
            return Err(Error::Config("max_connections must be at least 1".into()));
        }
        if config.default_partitions == 0 {
            return Err(Error::Config(
                "default_partitions must be at least 1".into(),
            ));
        }
        check_cluster_names(&config)?;
        Ok(config)
    }

    /// Where RocksDB keeps its files.
    pub fn db_path(&self) -> PathBuf {
        self.data_dir.join("db")
    }
}

/// The bootstrap password and `--auth`, checked against each other. A
/// password file given as a flag beats `WEIR_PASSWORD`, which beats the
/// config file's `password_file`.
fn auth(overrides: &Overrides, file: &FileConfig) -> Result<Auth> {
    let password = match (&overrides.password_file, &overrides.password) {
        (Some(path), _) => Some(read_password(path)?),
        (None, Some(password)) => Some(password.clone()),
        (None, None) => file
            .password_file
            .as_deref()
            .map(read_password)
            .transpose()?,
    };
    if password.as_ref().is_some_and(|p| p.expose().is_empty()) {
        return Err(Error::Config("the password is empty".into()));
    }
    match (overrides.auth.or(file.auth), password) {
        (Some(AuthMethod::Trust), Some(_)) => Err(Error::Config(
            "--auth trust and a password exclude each other: unset WEIR_PASSWORD and \
             --password-file, or drop --auth trust"
                .into(),
        )),
        (Some(AuthMethod::Trust), None) => Ok(Auth::Trust),
        (Some(AuthMethod::Password), None) => Err(Error::Config(
            "--auth password needs a password: set WEIR_PASSWORD or --password-file FILE".into(),
        )),
        (_, Some(password)) => Ok(Auth::Password(password)),
        (None, None) => Ok(Auth::LoopbackTrust),
    }
}

/// The certificate and key, both or neither; `--tls-required` needs them.
fn tls(overrides: &Overrides, file: &FileConfig) -> Result<Option<Tls>> {
    let cert = overrides.tls_cert.clone().or(file.tls_cert.clone());
    let key = overrides.tls_key.clone().or(file.tls_key.clone());
    let required = overrides
        .tls_required
        .or(file.tls_required)
        .unwrap_or(false);
    match (cert, key) {
        (Some(cert), Some(key)) => Ok(Some(Tls {
            cert,
            key,
            required,
        })),
        (None, None) if !required => Ok(None),
        (None, None) => Err(Error::Config(
            "--tls-required needs --tls-cert FILE and --tls-key FILE".into(),
        )),
        _ => Err(Error::Config(
            "TLS needs both --tls-cert FILE and --tls-key FILE".into(),
        )),
    }
}

/// `--cluster` and `--kafka`, both or neither.
fn cluster(overrides: &Overrides, file: &FileConfig) -> Result<Option<Cluster>> {
    let name = overrides.cluster.clone().or(file.cluster.clone());
    let kafka = overrides.kafka.clone().or(file.kafka.clone());
    let standbys = overrides.standbys.or(file.standbys);
    if standbys.is_some_and(|n| n > MAX_STANDBYS) {
        return Err(Error::Config(format!(
            "--standbys must be between 0 and {MAX_STANDBYS}"
        )));
    }
    match (name, kafka) {
        (Some(name), Some(kafka)) => Ok(Some(Cluster {
            name,
            kafka,
            standbys: standbys.unwrap_or(0),
        })),
        (None, None) if standbys.is_some_and(|n| n > 0) => Err(Error::Config(
            "--standbys keeps copies of partitioned views for other nodes of a cluster: \
             add --cluster NAME --kafka HOST:PORT"
                .into(),
        )),
        (None, None) => Ok(None),
        (Some(_), None) => Err(Error::Config(
            "--cluster needs --kafka HOST:PORT, the Kafka that coordinates the cluster".into(),
        )),
        (None, Some(_)) => Err(Error::Config(
            "--kafka names the Kafka of a cluster: add --cluster NAME".into(),
        )),
    }
}

/// The cluster's name becomes part of Kafka topic names, and the node's
/// name a Kafka client id, so both keep to the characters those allow.
fn check_cluster_names(config: &Config) -> Result<()> {
    let topic_safe = |c: char| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-');
    if let Some(cluster) = &config.cluster
        && (cluster.name.is_empty()
            || cluster.name.len() > 100
            || !cluster.name.chars().all(topic_safe))
    {
        return Err(Error::Config(format!(
            "invalid cluster name \"{}\": use 1 to 100 letters, digits, '.', '_' or '-'",
            cluster.name
        )));
    }
    let name_safe = |c: char| topic_safe(c) || c == ':';
    if config.node_name.is_empty() || !config.node_name.chars().all(name_safe) {
        return Err(Error::Config(format!(
            "invalid node name \"{}\": use letters, digits, '.', '_', '-' or ':'",
            config.node_name
        )));
    }
    if config.cluster_partitions == 0 || config.cluster_partitions > 1024 {
        return Err(Error::Config(
            "cluster_partitions must be between 1 and 1024".into(),
        ));
    }
    Ok(())
}

/// The address to give others for a listen address: an unspecified IP
/// (`0.0.0.0`) says nothing to a client, so the host's name stands in.
fn advertised(listen: SocketAddr) -> String {
    if !listen.ip().is_unspecified() {
        return listen.to_string();
    }
    let host = rustix::system::uname()
        .nodename()
        .to_string_lossy()
        .into_owned();
    format!("{host}:{}", listen.port())
}

/// The first line of a password file, without its line ending.
pub fn read_password(path: &Path) -> Result<Secret> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| Error::Config(format!("cannot read password file {}: {e}", path.display())))?;
    let line = text.lines().next().unwrap_or_default();
    Ok(Secret::new(line.to_string()))
}

fn read_file(path: &Path) -> Result<FileConfig> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| Error::Config(format!("cannot read {}: {e}", path.display())))?;
    toml::from_str(&text).map_err(|e| Error::Config(format!("{}: {e}", path.display())))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_beat_file_and_file_beats_defaults() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("weir.toml");
        std::fs::write(
            &path,
            "listen = \"127.0.0.1:7000\"\ndata_dir = \"/tmp/x\"\n",
        )
        .expect("write");
        let overrides = Overrides {
            data_dir: Some(PathBuf::from("/tmp/y")),
            ..Overrides::default()
        };
        let config = Config::resolve(overrides, Some(&path)).expect("resolve");
        assert_eq!(config.listen.port(), 7000);
        assert_eq!(config.data_dir, PathBuf::from("/tmp/y"));
        assert_eq!(config.http_listen.port(), 6545);
    }

    #[test]
    fn a_public_address_needs_a_password_or_trust() {
        let public = Overrides {
            listen: Some("0.0.0.0:6544".parse().expect("address")),
            ..Overrides::default()
        };
        let refused = Config::resolve(public.clone(), None).expect_err("refused");
        assert!(refused.to_string().contains("WEIR_PASSWORD"), "{refused}");
        let trusted = Overrides {
            auth: Some(AuthMethod::Trust),
            ..public.clone()
        };
        assert_eq!(
            Config::resolve(trusted, None).expect("trust").auth,
            Auth::Trust
        );
        let password = Overrides {
            password: Some(Secret::new("pencil".into())),
            ..public
        };
        let config = Config::resolve(password, None).expect("password");
        assert_eq!(config.auth, Auth::Password(Secret::new("pencil".into())));
        assert!(!format!("{config:?}").contains("pencil"));
    }

    #[test]
    fn a_password_file_beats_the_environment() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("password");
        std::fs::write(&path, "from-file\n").expect("write");
        let overrides = Overrides {
            password: Some(Secret::new("from-env".into())),
            password_file: Some(path),
            ..Overrides::default()
        };
        let config = Config::resolve(overrides, None).expect("resolve");
        assert_eq!(config.auth, Auth::Password(Secret::new("from-file".into())));
    }

    #[test]
    fn tls_needs_a_certificate_and_its_key() {
        let half = Overrides {
            tls_cert: Some(PathBuf::from("cert.pem")),
            ..Overrides::default()
        };
        assert!(Config::resolve(half, None).is_err());
        let required = Overrides {
            tls_required: Some(true),
            ..Overrides::default()
        };
        assert!(Config::resolve(required, None).is_err());
        let both = Overrides {
            tls_cert: Some(PathBuf::from("cert.pem")),
            tls_key: Some(PathBuf::from("key.pem")),
            ..Overrides::default()
        };
        let tls = Config::resolve(both, None).expect("resolve").tls;
        assert_eq!(tls.map(|t| t.required), Some(false));
    }

    #[test]
    fn a_cluster_needs_its_kafka_and_names_fit_topics() {
        let cluster = |name: &str, kafka: Option<&str>| Overrides {
            cluster: Some(name.into()),
            kafka: kafka.map(String::from),
            ..Overrides::default()
        };
        let alone = Config::resolve(cluster("c", None), None).expect_err("refused");
        assert!(alone.to_string().contains("--kafka"), "{alone}");
        let bad = Config::resolve(cluster("a/b", Some("k:9092")), None).expect_err("refused");
        assert!(bad.to_string().contains("invalid cluster name"), "{bad}");
        let config = Config::resolve(cluster("c-1", Some("k:9092")), None).expect("resolve");
        assert_eq!(config.node_name, "127.0.0.1:6544");
        assert_eq!(config.cluster_partitions, 12);
        let unspecified = Overrides {
            listen: Some("0.0.0.0:7000".parse().expect("address")),
            auth: Some(AuthMethod::Trust),
            ..Overrides::default()
        };
        let advertised = Config::resolve(unspecified, None)
            .expect("resolve")
            .advertise;
        assert!(advertised.ends_with(":7000") && !advertised.starts_with("0.0.0.0"));
    }

    #[test]
    fn standbys_need_a_cluster_and_a_small_count() {
        let standbys = |cluster: Option<&str>, n: u32| Overrides {
            cluster: cluster.map(String::from),
            kafka: cluster.map(|_| "k:9092".into()),
            standbys: Some(n),
            ..Overrides::default()
        };
        let alone = Config::resolve(standbys(None, 1), None).expect_err("refused");
        assert!(alone.to_string().contains("--cluster"), "{alone}");
        assert!(Config::resolve(standbys(None, 0), None).is_ok());
        let many = Config::resolve(standbys(Some("c"), MAX_STANDBYS + 1), None);
        assert!(
            many.expect_err("refused")
                .to_string()
                .contains("--standbys")
        );
        let config = Config::resolve(standbys(Some("c"), 1), None).expect("resolve");
        assert_eq!(config.cluster.map(|c| c.standbys), Some(1));
    }

    #[test]
    fn unknown_file_keys_are_refused() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("weir.toml");
        std::fs::write(&path, "lisen = \"127.0.0.1:7000\"\n").expect("write");
        assert!(Config::resolve(Overrides::default(), Some(&path)).is_err());
    }
}
