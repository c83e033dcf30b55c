//! Clients that read the catalog, each against its own weir server:
//! SQLAlchemy's reflection, pgcli's completion queries and the SQL
//! Grafana's PostgreSQL data source sends (scripts in tests/drivers/;
//! scripts/install-deps.sh installs the Python packages).

mod common;

use std::process::Command;

use common::TestServer;

fn run(script: &str, args: &[&str]) {
    let server = TestServer::start();
    let path = format!("{}/tests/drivers/{script}", env!("CARGO_MANIFEST_DIR"));
    let output = Command::new("python3")
        .arg(&path)
        .arg(server.port.to_string())
        .args(args)
        .output()
        .expect("python3 runs (scripts/install-deps.sh installs the client packages)");
    assert!(
        output.status.success(),
        "{script} failed:\n{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

#[test]
fn sqlalchemy_reflects_tables_views_and_keys() {
    run("sqlalchemy_reflection.py", &["psycopg2"]);
}

#[test]
fn sqlalchemy_reflects_through_psycopg3() {
    run("sqlalchemy_reflection.py", &["psycopg"]);
}

#[test]
fn pgcli_completion_queries_answer() {
    run("pgcli_completion.py", &[]);
}

#[test]
fn grafana_lists_tables_and_plots_a_view() {
    run("grafana_queries.py", &[]);
}
