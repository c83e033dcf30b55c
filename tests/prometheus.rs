//! Prometheus for real: Debian's `prometheus` scrapes a node's `/metrics`,
//! and its HTTP API answers queries over what it scraped.

mod common;

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::TestServer;

/// A Prometheus server scraping one target every second; killed on drop.
struct Prometheus {
    child: Child,
    port: u16,
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Prometheus {
    fn start(dir: &Path, target: u16) -> Prometheus {
        let config = dir.join("prometheus.yml");
        std::fs::write(
            &config,
            format!(
                "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n\
                 scrape_configs:\n  - job_name: weir\n    static_configs:\n      - targets: ['127.0.0.1:{target}']\n"
            ),
        )
        .expect("write the config");
        let port = common::free_port();
        let child = Command::new("prometheus")
            .arg(format!("--config.file={}", config.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.join("tsdb").display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("run Debian's prometheus (scripts/install-deps.sh installs it)");
        Prometheus { child, port }
    }

    /// The value of an instant query's first sample, once there is one.
    fn value(&self, query: &str) -> Option<f64> {
        let output = Command::new("curl")
            .args(["-s", "--max-time", "5", "-G"])
            .arg(format!("http://127.0.0.1:{}/api/v1/query", self.port))
            .arg("--data-urlencode")
            .arg(format!("query={query}"))
            .output()
            .ok()?;
        let answer: serde_json::Value = serde_json::from_slice(&output.stdout).ok()?;
        answer["data"]["result"][0]["value"][1]
            .as_str()?
            .parse()
            .ok()
    }

    /// Poll until `query` gives `wanted`.
    fn wait_for(&self, query: &str, wanted: impl Fn(f64) -> bool) -> f64 {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let value = self.value(query);
            if let Some(v) = value.filter(|v| wanted(*v)) {
                return v;
            }
            assert!(Instant::now() < deadline, "{query} is {value:?}");
            std::thread::sleep(Duration::from_millis(250));
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prometheus_scrapes_the_node_and_answers_queries() {
    let server = TestServer::start();
    let client = server.connect().await;
    client
        .batch_execute(
            "CREATE TABLE t (id BIGINT PRIMARY KEY, k VARCHAR);
             INSERT INTO t SELECT value, 'k' || (value % 5) FROM generate_series(1, 1000);
             CREATE MATERIALIZED VIEW per_key AS SELECT k, count(*) AS n FROM t GROUP BY k;
             FLUSH;",
        )
        .await
        .expect("setup");
    // Prometheus' own linter passes what the node exposes.
    let exposed = server.http_get("/metrics").await;
    let body = exposed.split("\r\n\r\n").nth(1).expect("a body");
    let mut lint = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run promtool");
    std::io::Write::write_all(&mut lint.stdin.take().expect("stdin"), body.as_bytes())
        .expect("write the metrics");
    let linted = lint.wait_with_output().expect("promtool ends");
    assert!(linted.status.success(), "{linted:?}");
    assert!(
        linted.stdout.is_empty() && linted.stderr.is_empty(),
        "{linted:?}"
    );

    let dir = tempfile::tempdir().expect("temp dir");
    let prometheus = Prometheus::start(dir.path(), server.http_port);
    prometheus.wait_for("up{job=\"weir\"}", |v| v == 1.0);
    prometheus.wait_for("weir_view_changes_read_total{view=\"per_key\"}", |v| {
        v == 1000.0
    });
    prometheus.wait_for("weir_view_behind_records{view=\"per_key\"}", |v| v == 0.0);
    prometheus.wait_for("weir_view_progress_ratio{view=\"per_key\"}", |v| v == 1.0);
    let statements = prometheus.wait_for("weir_statements_total", |v| v >= 4.0);
    // A counter Prometheus keeps scraping moves with the node.
    client
        .batch_execute("SELECT 1; SELECT 2; SELECT 3")
        .await
        .expect("more statements");
    prometheus.wait_for("weir_statements_total", |v| v >= statements + 3.0);
    prometheus.wait_for("process_resident_memory_bytes", |v| v > 1e6);
}
