//! Real client drivers against a real weir process each: psycopg 3,
//! psycopg2, asyncpg, SQLAlchemy 2 and node-postgres connect, bind
//! parameters, prepare statements, read text and binary results, run
//! transactions, get PostgreSQL's error codes, and round-trip timestamps,
//! intervals and floats. The scripts live in `tests/drivers/`;
//! `scripts/install-deps.sh` installs the packages they use.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::TestServer;

fn drivers_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/drivers")
}

/// Run a driver script against a fresh server; it exits non-zero on a mismatch.
fn check(program: &str, script: &Path, args: &[&str]) {
    let server = TestServer::start();
    let output = Command::new(program)
        .arg(script)
        .arg(server.port.to_string())
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("{program} runs (scripts/install-deps.sh): {e}"));
    assert!(
        output.status.success(),
        "{} failed:\n{}{}",
        script.display(),
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

#[test]
fn psycopg3_parameters_binary_results_and_types() {
    check("python3", &drivers_dir().join("psycopg_types.py"), &[]);
}

#[test]
fn psycopg2_parameters_transactions_and_types() {
    check("python3", &drivers_dir().join("psycopg2_types.py"), &[]);
}

#[test]
fn asyncpg_prepared_statements_and_types() {
    check("python3", &drivers_dir().join("asyncpg_types.py"), &[]);
}

#[test]
fn sqlalchemy_connects_and_queries_through_core_and_orm() {
    check(
        "python3",
        &drivers_dir().join("sqlalchemy_orm.py"),
        &["psycopg2"],
    );
}

#[test]
fn sqlalchemy_through_psycopg3() {
    check(
        "python3",
        &drivers_dir().join("sqlalchemy_orm.py"),
        &["psycopg"],
    );
}

#[test]
fn node_postgres_text_parameters_and_types() {
    let dir = drivers_dir().join("node");
    // The test command installs the package (scripts/install-deps.sh); a
    // bare `cargo test` installs it here from the lockfile.
    if !dir.join("node_modules/pg").exists() {
        let status = Command::new("npm")
            .args(["ci", "--no-audit", "--no-fund", "--silent"])
            .current_dir(&dir)
            .status()
            .expect("npm runs");
        assert!(status.success(), "npm ci in tests/drivers/node failed");
    }
    check("node", &dir.join("pg_types.js"), &[]);
}
