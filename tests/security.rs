//! Passwords, roles and connection limits, against real server processes.

mod common;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::TestServer;

const PASSWORD: &str = "correct horse";

fn with_password() -> TestServer {
    TestServer::start_with_env(&[], &[("WEIR_PASSWORD", PASSWORD)])
}

async fn login(
    port: u16,
    user: &str,
    password: &str,
) -> Result<tokio_postgres::Client, tokio_postgres::Error> {
    let config =
        format!("host=127.0.0.1 port={port} user='{user}' password='{password}' dbname=weir");
    let (client, connection) = tokio_postgres::connect(&config, tokio_postgres::NoTls).await?;
    tokio::spawn(connection);
    Ok(client)
}

/// SQLSTATE and message of a failed connection or statement.
fn refusal(e: &tokio_postgres::Error) -> (String, String) {
    let db = e
        .as_db_error()
        .unwrap_or_else(|| panic!("a server error: {e}"));
    (db.code().code().to_string(), db.message().to_string())
}

fn code(e: &tokio_postgres::Error) -> String {
    refusal(e).0
}

#[tokio::test]
async fn a_wrong_password_and_an_unknown_user_fail_alike() {
    let server = with_password();
    let client = login(server.port, "weir", PASSWORD)
        .await
        .expect("right password");
    let rows = common::text_rows(&client, "SELECT 1").await;
    assert_eq!(rows, ["1"]);

    let wrong = login(server.port, "weir", "wrong")
        .await
        .expect_err("wrong password");
    let (state, message) = refusal(&wrong);
    assert_eq!(state, "28P01");
    assert_eq!(message, "password authentication failed for user \"weir\"");

    let ghost = login(server.port, "ghost", PASSWORD)
        .await
        .expect_err("unknown user");
    let (state, message) = refusal(&ghost);
    assert_eq!(state, "28P01");
    assert_eq!(message, "password authentication failed for user \"ghost\"");

    // A client that offers no password at all is refused too.
    let config = format!("host=127.0.0.1 port={} user=weir dbname=weir", server.port);
    assert!(
        tokio_postgres::connect(&config, tokio_postgres::NoTls)
            .await
            .is_err()
    );
    // The failures cost nobody else their connection.
    assert_eq!(common::text_rows(&client, "SELECT 2").await, ["2"]);
}

#[tokio::test]
async fn a_password_file_sets_the_password() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("password");
    std::fs::write(&path, "from a file\n").expect("write");
    let args = ["--password-file".to_string(), path.display().to_string()];
    let server = TestServer::start_with(&args);
    login(server.port, "weir", "from a file")
        .await
        .expect("the file's password");
    let e = login(server.port, "weir", "from a file\n")
        .await
        .expect_err("no line end");
    assert_eq!(code(&e), "28P01");
}

/// Start weir with these arguments and wait until it exits: its status and stderr.
fn run_to_exit(args: &[&str]) -> (std::process::ExitStatus, String) {
    let dir = tempfile::tempdir().expect("temp dir");
    let output = Command::new(env!("CARGO_BIN_EXE_weir"))
        .args(args)
        .arg("--data-dir")
        .arg(dir.path())
        .env_remove("WEIR_PASSWORD")
        .stdin(Stdio::null())
        .output()
        .expect("run weir");
    (
        output.status,
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

#[test]
fn a_public_address_without_a_password_is_refused_at_start() {
    let listen = format!("0.0.0.0:{}", free_port());
    let http = format!("127.0.0.1:{}", free_port());
    let (status, stderr) = run_to_exit(&["--listen", &listen, "--http-listen", &http]);
    assert!(!status.success(), "weir started: {stderr}");
    assert!(stderr.contains("refusing to listen on"), "{stderr}");
    assert!(stderr.contains("WEIR_PASSWORD"), "{stderr}");
    assert!(stderr.contains("--auth trust"), "{stderr}");
}

#[tokio::test]
async fn auth_trust_allows_a_public_address() {
    let dir = tempfile::tempdir().expect("temp dir");
    let port = free_port();
    let mut child = Command::new(env!("CARGO_BIN_EXE_weir"))
        .args(["--auth", "trust", "--listen"])
        .arg(format!("0.0.0.0:{port}"))
        .arg("--http-listen")
        .arg(format!("127.0.0.1:{}", free_port()))
        .arg("--data-dir")
        .arg(dir.path())
        .env_remove("WEIR_PASSWORD")
        .env("WEIR_LOG", "warn")
        .stdin(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start weir");
    let config = format!("host=127.0.0.1 port={port} user=anyone dbname=weir");
    let deadline = Instant::now() + Duration::from_secs(30);
    let client = loop {
        match tokio_postgres::connect(&config, tokio_postgres::NoTls).await {
            Ok((client, connection)) => {
                tokio::spawn(connection);
                break client;
            }
            Err(_) if Instant::now() < deadline => {
                assert!(child.try_wait().expect("status").is_none(), "weir exited");
                tokio::task::yield_now().await;
            }
            Err(e) => panic!("weir did not accept: {e}"),
        }
    };
    assert_eq!(common::text_rows(&client, "SELECT 1").await, ["1"]);
    let _ = child.kill();
    let output = child.wait_with_output().expect("stderr");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("--auth trust"), "a warning: {stderr}");
}

#[tokio::test]
async fn connections_beyond_the_limit_are_refused_and_the_others_unaffected() {
    let server = TestServer::start_with(&["--max-connections".into(), "2".into()]);
    let config = server.connection_string();
    // The start's readiness probe holds a slot until the server has seen
    // it close.
    let first = connect_when_free(&config).await;
    let second = connect_when_free(&config).await;
    let e = tokio_postgres::connect(&config, tokio_postgres::NoTls)
        .await
        .err()
        .expect("a third is refused");
    assert_eq!(
        refusal(&e),
        (
            "53300".to_string(),
            "sorry, too many clients already".to_string()
        )
    );
    assert_eq!(common::text_rows(&first, "SELECT 1").await, ["1"]);
    assert_eq!(common::text_rows(&second, "SELECT 2").await, ["2"]);
    // A slot comes back once its connection has closed on the server.
    drop(second);
    let third = connect_when_free(&config).await;
    assert_eq!(common::text_rows(&third, "SELECT 3").await, ["3"]);
}

/// A connection, once a slot is free: refusals meanwhile must be 53300.
async fn connect_when_free(config: &str) -> tokio_postgres::Client {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match tokio_postgres::connect(config, tokio_postgres::NoTls).await {
            Ok((client, connection)) => {
                tokio::spawn(connection);
                return client;
            }
            Err(e) if Instant::now() < deadline => assert_eq!(code(&e), "53300"),
            Err(e) => panic!("no slot came free: {e}"),
        }
    }
}

#[tokio::test]
async fn roles_log_in_with_their_passwords_and_survive_a_restart() {
    let mut server = with_password();
    let admin = login(server.port, "weir", PASSWORD)
        .await
        .expect("superuser");
    admin
        .batch_execute(
            "CREATE ROLE alice WITH LOGIN PASSWORD 'alice-pw'; CREATE ROLE bob PASSWORD 'bob-pw'",
        )
        .await
        .expect("create roles");
    let e = admin
        .batch_execute("CREATE USER alice")
        .await
        .expect_err("duplicate");
    assert_eq!(code(&e), "42710");

    let alice = login(server.port, "alice", "alice-pw")
        .await
        .expect("alice logs in");
    // bob has a password but no LOGIN.
    let e = login(server.port, "bob", "bob-pw")
        .await
        .expect_err("NOLOGIN");
    assert_eq!(code(&e), "28000");
    let e = alice
        .batch_execute("CREATE ROLE carol")
        .await
        .expect_err("not a superuser");
    assert_eq!(code(&e), "42501");
    let e = alice
        .batch_execute("ALTER ROLE bob LOGIN")
        .await
        .expect_err("not hers");
    assert_eq!(code(&e), "42501");
    let e = alice
        .batch_execute("DROP ROLE bob")
        .await
        .expect_err("not a superuser");
    assert_eq!(code(&e), "42501");
    alice
        .batch_execute("ALTER ROLE alice PASSWORD 'new-pw'")
        .await
        .expect("her own password");
    let e = login(server.port, "alice", "alice-pw")
        .await
        .expect_err("old password");
    assert_eq!(code(&e), "28P01");

    // The verifier is stored, never the password; neither is shown.
    let shown = common::text_rows(
        &admin,
        "SELECT rolname, rolpassword FROM pg_roles ORDER BY rolname",
    )
    .await;
    assert_eq!(shown, ["alice|********", "bob|********", "weir|********"]);
    drop((admin, alice));

    server.restart();
    login(server.port, "alice", "new-pw")
        .await
        .expect("roles survive a restart");
    let admin = login(server.port, "weir", PASSWORD)
        .await
        .expect("superuser");
    let e = admin
        .batch_execute("DROP ROLE weir")
        .await
        .expect_err("oneself");
    assert_eq!(code(&e), "55000");
    admin
        .batch_execute("CREATE ROLE chief SUPERUSER LOGIN PASSWORD 'chief-pw'")
        .await
        .expect("another superuser");
    let chief = login(server.port, "chief", "chief-pw")
        .await
        .expect("chief");
    let e = chief
        .batch_execute("DROP ROLE weir")
        .await
        .expect_err("bootstrap");
    assert_eq!(code(&e), "42501");
    let e = chief
        .batch_execute("ALTER ROLE weir NOSUPERUSER")
        .await
        .expect_err("bootstrap");
    assert_eq!(code(&e), "42501");
    admin.batch_execute("DROP ROLE alice").await.expect("drop");
    let e = login(server.port, "alice", "new-pw")
        .await
        .expect_err("dropped");
    assert_eq!(code(&e), "28P01");
    let e = admin
        .batch_execute("DROP ROLE alice")
        .await
        .expect_err("gone");
    assert_eq!(code(&e), "42704");
}

#[tokio::test]
async fn passwords_never_reach_the_data_directory_in_plain_text() {
    let mut server = with_password();
    let admin = login(server.port, "weir", PASSWORD)
        .await
        .expect("superuser");
    admin
        .batch_execute("CREATE USER dora PASSWORD 'plain-text-pw'")
        .await
        .expect("create");
    drop(admin);
    assert!(server.terminate(), "clean stop");
    let mut found = Vec::new();
    let mut stack = vec![server.data_dir().to_path_buf()];
    while let Some(path) = stack.pop() {
        if path.is_dir() {
            stack.extend(
                std::fs::read_dir(&path)
                    .expect("dir")
                    .flatten()
                    .map(|e| e.path()),
            );
            continue;
        }
        let bytes = std::fs::read(&path).expect("file");
        for needle in ["plain-text-pw", PASSWORD] {
            if bytes.windows(needle.len()).any(|w| w == needle.as_bytes()) {
                found.push(format!("{needle} in {}", path.display()));
            }
        }
    }
    assert!(found.is_empty(), "{found:?}");
}
