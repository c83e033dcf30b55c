//! A real weir server process for tests: its own port and data directory.

#![allow(dead_code)]

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub struct TestServer {
    child: Option<Child>,
    pub port: u16,
    pub http_port: u16,
    dir: PathBuf,
    _temp: Option<tempfile::TempDir>,
    args: Vec<String>,
    envs: Vec<(String, String)>,
    /// Where weir's log goes, when a test reads it; else the test's stderr.
    log: Option<PathBuf>,
}

pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free loopback port")
}

impl TestServer {
    /// Start a server on a fresh data directory.
    pub fn start() -> TestServer {
        TestServer::start_with(&[])
    }

    /// Start a server with extra command-line arguments.
    pub fn start_with(args: &[String]) -> TestServer {
        TestServer::start_with_env(args, &[])
    }

    /// Start a server with extra arguments and environment variables.
    pub fn start_with_env(args: &[String], envs: &[(&str, &str)]) -> TestServer {
        let temp = tempfile::tempdir().expect("temp dir");
        let dir = temp.path().to_path_buf();
        let mut server = TestServer {
            child: None,
            port: 0,
            http_port: 0,
            dir,
            _temp: Some(temp),
            args: args.to_vec(),
            envs: envs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            log: None,
        };
        server.spawn();
        server
    }

    /// Start a server that logs at debug level into a file [`Self::log`] reads.
    pub fn start_logged(args: &[String]) -> TestServer {
        let temp = tempfile::tempdir().expect("temp dir");
        let mut server = TestServer {
            child: None,
            port: 0,
            http_port: 0,
            dir: temp.path().join("data"),
            log: Some(temp.path().join("weir.log")),
            _temp: Some(temp),
            args: args.to_vec(),
            envs: vec![("WEIR_LOG".into(), "debug".into())],
        };
        server.spawn();
        server
    }

    /// Everything weir logged so far (a server from [`Self::start_logged`]).
    pub fn log(&self) -> String {
        let path = self
            .log
            .as_ref()
            .expect("a server started with start_logged");
        std::fs::read_to_string(path).unwrap_or_default()
    }

    /// Start a server on a data directory the caller owns.
    pub fn start_in(dir: PathBuf, args: &[String]) -> TestServer {
        let mut server = TestServer {
            child: None,
            port: 0,
            http_port: 0,
            dir,
            _temp: None,
            args: args.to_vec(),
            envs: Vec::new(),
            log: None,
        };
        server.spawn();
        server
    }

    pub fn data_dir(&self) -> &Path {
        &self.dir
    }

    /// Start weir on fresh ports. Ports are picked free and then handed
    /// over, so another test can take one in between; weir then exits at
    /// bind, and this starts it again on new ports.
    fn spawn(&mut self) {
        for _ in 0..5 {
            self.port = free_port();
            self.http_port = free_port();
            let child = Command::new(env!("CARGO_BIN_EXE_weir"))
                .arg("serve")
                .arg("--listen")
                .arg(format!("127.0.0.1:{}", self.port))
                .arg("--http-listen")
                .arg(format!("127.0.0.1:{}", self.http_port))
                .arg("--data-dir")
                .arg(&self.dir)
                .args(&self.args)
                .env("WEIR_LOG", "warn")
                // A password in the caller's environment would lock tests out.
                .env_remove("WEIR_PASSWORD")
                .envs(self.envs.iter().map(|(k, v)| (k, v)))
                .stdin(Stdio::null())
                .stderr(self.log_output())
                .spawn()
                .expect("start weir");
            self.child = Some(child);
            if self.wait_ready() {
                return;
            }
        }
        panic!("weir exited at start five times");
    }

    fn log_output(&self) -> Stdio {
        match &self.log {
            Some(path) => std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(path)
                .map(Stdio::from)
                .expect("open the log file"),
            None => Stdio::inherit(),
        }
    }

    /// Whether weir accepts connections; false when it exited first.
    fn wait_ready(&mut self) -> bool {
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            if std::net::TcpStream::connect(("127.0.0.1", self.port)).is_ok() {
                // The listener may be another process's that holds the port
                // while ours fails to bind: ours must still be running.
                std::thread::sleep(Duration::from_millis(200));
                return !self.exited();
            }
            if self.exited() {
                return false;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        panic!("weir did not accept connections within 30 s");
    }

    fn exited(&mut self) -> bool {
        let Some(child) = self.child.as_mut() else {
            return true;
        };
        match child.try_wait() {
            Ok(Some(status)) => {
                eprintln!("weir exited at start ({status}); starting it again");
                self.child = None;
                true
            }
            _ => false,
        }
    }

    /// SIGKILL the server: nothing gets to flush or clean up.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// SIGTERM the server and wait for it to exit; returns whether it exited cleanly.
    pub fn terminate(&mut self) -> bool {
        let Some(mut child) = self.child.take() else {
            return true;
        };
        let _ = Command::new("kill")
            .arg("-TERM")
            .arg(child.id().to_string())
            .status();
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            if let Ok(Some(status)) = child.try_wait() {
                return status.success();
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = child.kill();
        false
    }

    /// Start again on the same data directory.
    pub fn restart(&mut self) {
        self.kill();
        self.spawn();
    }

    /// A crash and a restart as a client meets them: its connection gone,
    /// the server killed and started again on its data, a new connection.
    pub async fn crash(&mut self, client: tokio_postgres::Client) -> tokio_postgres::Client {
        drop(client);
        self.restart();
        self.connect().await
    }

    pub fn connection_string(&self) -> String {
        format!("host=127.0.0.1 port={} user=weir dbname=weir", self.port)
    }

    pub async fn connect(&self) -> tokio_postgres::Client {
        let (client, connection) =
            tokio_postgres::connect(&self.connection_string(), tokio_postgres::NoTls)
                .await
                .expect("connect to weir");
        tokio::spawn(connection);
        client
    }

    /// The body of a GET on the HTTP endpoint, headers included.
    pub async fn http_get(&self, path: &str) -> String {
        self.http("GET", path).await
    }

    /// The whole response, status line and headers included.
    pub async fn http(&self, method: &str, path: &str) -> String {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", self.http_port))
            .await
            .expect("http connect");
        stream
            .write_all(format!("{method} {path} HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes())
            .await
            .expect("send");
        let mut body = String::new();
        stream.read_to_string(&mut body).await.expect("read");
        body
    }

    /// A number from `/metrics`.
    pub async fn metric(&self, name: &str) -> u64 {
        let body = self.http_get("/metrics").await;
        body.lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(' '))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or_else(|| panic!("metric {name} present"))
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Every row of a query as text, columns joined by `|`, NULL as `NULL`.
pub async fn text_rows(client: &tokio_postgres::Client, sql: &str) -> Vec<String> {
    try_text_rows(client, sql)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"))
}

/// [`text_rows`], or the error the query met.
pub async fn try_text_rows(
    client: &tokio_postgres::Client,
    sql: &str,
) -> Result<Vec<String>, tokio_postgres::Error> {
    Ok(client
        .simple_query(sql)
        .await?
        .into_iter()
        .filter_map(|m| match m {
            tokio_postgres::SimpleQueryMessage::Row(row) => Some(
                (0..row.len())
                    .map(|i| row.get(i).unwrap_or("NULL").to_string())
                    .collect::<Vec<_>>()
                    .join("|"),
            ),
            _ => None,
        })
        .collect())
}

pub mod kafka;
