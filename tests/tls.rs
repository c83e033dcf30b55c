//! TLS on the pgwire port, checked with psql: a certificate made by the
//! openssl command, `sslmode=require`, `verify-full` and `disable`; and on
//! the HTTP port, checked with curl.

mod common;

use std::path::Path;
use std::process::Command;

use common::TestServer;

/// A self-signed certificate and its key in `dir`.
fn certificate(dir: &Path) -> (String, String) {
    let cert = dir.join("cert.pem");
    let key = dir.join("key.pem");
    let status = Command::new("openssl")
        .args([
            "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
        ])
        .args([
            "-subj",
            "/CN=localhost",
            "-addext",
            "subjectAltName=DNS:localhost",
        ])
        .arg("-keyout")
        .arg(&key)
        .arg("-out")
        .arg(&cert)
        .output()
        .expect("run openssl");
    assert!(status.status.success(), "{status:?}");
    (cert.display().to_string(), key.display().to_string())
}

/// psql's output and whether it succeeded, for one command.
fn psql(port: u16, sslmode: &str, sql: &str) -> (bool, String) {
    psql_with_password(port, sslmode, sql, "")
}

fn psql_with_password(port: u16, sslmode: &str, sql: &str, password: &str) -> (bool, String) {
    let conninfo = format!("host=127.0.0.1 port={port} user=weir dbname=weir sslmode={sslmode}");
    psql_conninfo(&conninfo, sql, password)
}

fn psql_conninfo(conninfo: &str, sql: &str, password: &str) -> (bool, String) {
    let output = Command::new("psql")
        .arg(conninfo)
        .args(["-X", "-A", "-t", "-c", sql])
        .env("PGCONNECT_TIMEOUT", "10")
        .env("PGPASSWORD", password)
        .output()
        .expect("run psql");
    let text = String::from_utf8_lossy(&output.stdout).into_owned()
        + &String::from_utf8_lossy(&output.stderr);
    (output.status.success(), text)
}

/// Run `COPY (SUBSCRIBE t) TO STDOUT` in psql over TLS until every one of
/// `wanted` has arrived, then cancel it as Ctrl-C does; what psql printed.
fn follow_until(port: u16, wanted: &[&str]) -> String {
    use std::io::BufRead;
    // Line-buffered: psql's stdout is a pipe here, and the stream does
    // not end by itself to flush it.
    let mut child = Command::new("stdbuf")
        .args(["-oL", "psql"])
        .arg(format!(
            "host=127.0.0.1 port={port} user=weir dbname=weir sslmode=require"
        ))
        .args(["-X", "-A", "-t", "-c", "COPY (SUBSCRIBE t) TO STDOUT"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run psql");
    let pid = child.id().to_string();
    // A stream that never delivers would block the read below for ever.
    let watchdog_pid = pid.clone();
    let (done, finished) = std::sync::mpsc::channel::<()>();
    std::thread::spawn(move || {
        if finished
            .recv_timeout(std::time::Duration::from_secs(60))
            .is_err()
        {
            let _ = Command::new("kill").args(["-KILL", &watchdog_pid]).status();
        }
    });
    let mut out = String::new();
    let mut lines = std::io::BufReader::new(child.stdout.take().expect("stdout")).lines();
    while !wanted.iter().all(|w| out.contains(w)) {
        match lines.next() {
            Some(Ok(line)) => out.push_str(&(line + "\n")),
            _ => break,
        }
    }
    let _ = Command::new("kill").args(["-INT", &pid]).status();
    let output = child.wait_with_output().expect("psql ends");
    let _ = done.send(());
    out + &String::from_utf8_lossy(&output.stderr)
}

#[test]
fn a_client_that_asks_for_tls_gets_it() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (cert, key) = certificate(dir.path());
    let server = TestServer::start_with(&["--tls-cert".into(), cert, "--tls-key".into(), key]);
    let (ok, out) = psql(server.port, "require", "SELECT 1");
    assert!(ok && out.trim() == "1", "{out}");
    // \conninfo says how the connection is protected.
    let (ok, out) = psql(server.port, "require", "\\conninfo");
    assert!(ok && out.contains("SSL connection"), "{out}");
    // A change stream's rows go through TLS too: they must not be written
    // to the raw socket beside it. psql's cancel (SIGINT) ends the stream.
    let setup = "CREATE TABLE t (v INT); INSERT INTO t VALUES (41), (42); FLUSH";
    let (ok, out) = psql(server.port, "require", setup);
    assert!(ok, "{out}");
    let rows = follow_until(server.port, &["41", "42"]);
    assert!(rows.contains("41") && rows.contains("42"), "{rows}");
    // Without --tls-required a plain client is still served.
    let (ok, out) = psql(server.port, "disable", "SELECT 2");
    assert!(ok && out.trim() == "2", "{out}");
}

#[test]
fn tls_required_turns_plain_clients_away() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (cert, key) = certificate(dir.path());
    let args = [
        "--tls-cert".to_string(),
        cert,
        "--tls-key".to_string(),
        key,
        "--tls-required".to_string(),
    ];
    let server = TestServer::start_with(&args);
    let (ok, out) = psql(server.port, "disable", "SELECT 1");
    assert!(!ok && out.contains("TLS is required"), "{out}");
    let (ok, out) = psql(server.port, "require", "SELECT 1");
    assert!(ok && out.trim() == "1", "{out}");
}

#[test]
fn a_password_login_works_over_tls() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (cert, key) = certificate(dir.path());
    let args = ["--tls-cert".to_string(), cert, "--tls-key".to_string(), key];
    let server = TestServer::start_with_env(&args, &[("WEIR_PASSWORD", "over tls")]);
    // libpq offers channel binding over TLS; weir does not take it up.
    let (ok, out) = psql_with_password(server.port, "require", "SELECT 1", "over tls");
    assert!(ok && out.trim() == "1", "{out}");
    let (ok, out) = psql_with_password(server.port, "require", "SELECT 1", "wrong");
    assert!(
        !ok && out.contains("password authentication failed"),
        "{out}"
    );
}

#[test]
fn a_missing_certificate_stops_the_start() {
    let dir = tempfile::tempdir().expect("temp dir");
    let missing = dir.path().join("missing.pem");
    let output = Command::new(env!("CARGO_BIN_EXE_weir"))
        .arg("--tls-cert")
        .arg(&missing)
        .arg("--tls-key")
        .arg(&missing)
        .arg("--listen")
        .arg("127.0.0.1:0")
        .arg("--http-listen")
        .arg("127.0.0.1:0")
        .arg("--data-dir")
        .arg(dir.path().join("data"))
        .env_remove("WEIR_PASSWORD")
        .output()
        .expect("run weir");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "{stderr}");
    assert!(stderr.contains("cannot read certificates"), "{stderr}");
}

#[test]
fn verify_full_checks_the_certificate_and_the_host_name() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (cert, key) = certificate(dir.path());
    let other = tempfile::tempdir().expect("temp dir");
    let (stranger, _) = certificate(other.path());
    let args = [
        "--tls-cert".to_string(),
        cert.clone(),
        "--tls-key".to_string(),
        key,
    ];
    let server = TestServer::start_with(&args);
    let verified = |host: &str, root: &str| {
        let conninfo = format!(
            "host={host} port={} user=weir dbname=weir sslmode=verify-full sslrootcert={root}",
            server.port
        );
        psql_conninfo(&conninfo, "SELECT 1", "")
    };
    let (ok, out) = verified("localhost", &cert);
    assert!(ok && out.trim() == "1", "{out}");
    // The certificate names localhost, not the address.
    let (ok, out) = verified("127.0.0.1", &cert);
    assert!(!ok && out.contains("does not match host name"), "{out}");
    // Another authority's certificate is not trusted.
    let (ok, out) = verified("localhost", &stranger);
    assert!(!ok && out.contains("certificate verify failed"), "{out}");
}

/// curl's status line and body for a GET on the HTTP port.
fn curl(url: &str, cert: &str) -> String {
    let output = Command::new("curl")
        .args(["-s", "-i", "--max-time", "10", "--cacert", cert, url])
        .output()
        .expect("run curl");
    String::from_utf8_lossy(&output.stdout).into_owned()
}

#[test]
fn the_http_port_takes_the_same_certificate() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (cert, key) = certificate(dir.path());
    let args = [
        "--tls-cert".to_string(),
        cert.clone(),
        "--tls-key".to_string(),
        key.clone(),
    ];
    let server = TestServer::start_with(&args);
    let https = curl(
        &format!("https://localhost:{}/metrics", server.http_port),
        &cert,
    );
    assert!(
        https.starts_with("HTTP/1.1 200") && https.contains("weir_statements_total"),
        "{https}"
    );
    // Without --tls-required plain HTTP is still served, as plain pgwire is.
    let plain = curl(
        &format!("http://127.0.0.1:{}/metrics", server.http_port),
        &cert,
    );
    assert!(plain.starts_with("HTTP/1.1 200"), "{plain}");

    let required = TestServer::start_with(&[
        "--tls-cert".to_string(),
        cert.clone(),
        "--tls-key".to_string(),
        key,
        "--tls-required".to_string(),
    ]);
    let plain = curl(
        &format!("http://127.0.0.1:{}/metrics", required.http_port),
        &cert,
    );
    assert!(
        plain.starts_with("HTTP/1.1 403") && plain.contains("TLS is required"),
        "{plain}"
    );
    let https = curl(
        &format!("https://localhost:{}/metrics", required.http_port),
        &cert,
    );
    assert!(https.starts_with("HTTP/1.1 200"), "{https}");
}
