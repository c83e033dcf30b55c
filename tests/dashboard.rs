//! The dashboard in a real browser: headless Chromium (Debian's
//! `chromium`) driven by `playwright-core` (tests/dashboard/check.js)
//! opens the page of a live node, finds the view and its dataflow graph,
//! and sees the counters move when rows arrive; it saves a screenshot.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};

use common::TestServer;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dashboard_draws_a_view_and_its_counters_move() {
    let server = TestServer::start();
    let client = server.connect().await;
    client
        .batch_execute(
            "CREATE TABLE orders (id BIGINT PRIMARY KEY, region VARCHAR, amount BIGINT);
             INSERT INTO orders SELECT value, 'r' || (value % 4), value FROM generate_series(1, 100);
             CREATE MATERIALIZED VIEW by_region AS
               SELECT region, count(*) AS n, sum(amount) AS total FROM orders WHERE amount > 5 GROUP BY region;
             FLUSH;",
        )
        .await
        .expect("setup");
    let dir = env!("CARGO_MANIFEST_DIR");
    let screenshot = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("dashboard.png");
    let _ = std::fs::remove_file(&screenshot);
    let mut browser = Command::new("node")
        .arg(format!("{dir}/tests/dashboard/check.js"))
        .arg(format!("http://127.0.0.1:{}/", server.http_port))
        .arg("by_region")
        .arg(&screenshot)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("run node (scripts/install-deps.sh installs the test's packages)");
    let mut said = BufReader::new(browser.stdout.take().expect("stdout")).lines();
    let first = said.next().and_then(|l| l.ok()).unwrap_or_default();
    let rows: u64 = first
        .strip_prefix("rows ")
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("the page did not show the graph: {first:?}"));
    assert_eq!(
        rows, 100,
        "the source's 100 rows went through the first operator"
    );

    client
        .batch_execute(
            "INSERT INTO orders SELECT value, 'r' || (value % 4), value FROM generate_series(101, 200);
             FLUSH;",
        )
        .await
        .expect("more rows");
    let mut stdin = browser.stdin.take().expect("stdin");
    writeln!(stdin, "go").expect("tell the browser");
    let done = said.next().and_then(|l| l.ok()).unwrap_or_default();
    let status = browser.wait().expect("node ends");
    assert!(status.success() && done == "ok", "{done:?} {status}");
    let png = std::fs::read(&screenshot).expect("a screenshot");
    assert!(
        png.starts_with(b"\x89PNG") && png.len() > 10_000,
        "{} bytes",
        png.len()
    );
}
