//! Change streams from real clients: `COPY (SUBSCRIBE ...) TO STDOUT` over
//! tokio-postgres (extended protocol) and psql (simple protocol), resuming
//! `AS OF` the last epoch across a server restart, and subscribers that
//! stop reading or die mid-stream.

mod common;

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::Duration;

use bytes::Bytes;
use common::TestServer;
use futures::StreamExt;

/// One line of a change stream: `_epoch`, `_diff` (empty for progress), the row.
#[derive(Debug)]
struct Change {
    epoch: u64,
    diff: Option<i64>,
    row: String,
}

fn parse_lines(data: &[u8], out: &mut Vec<Change>) {
    for line in String::from_utf8_lossy(data).lines() {
        let mut fields = line.splitn(3, '\t');
        let epoch = fields
            .next()
            .and_then(|e| e.parse().ok())
            .expect("an epoch");
        let diff = fields.next().and_then(|d| d.parse().ok());
        let row = fields.next().unwrap_or_default().to_string();
        out.push(Change { epoch, diff, row });
    }
}

/// Rows with their multiplicities after summing changes.
fn consolidate(changes: &[Change], into: &mut BTreeMap<String, i64>) {
    for change in changes {
        if let Some(diff) = change.diff {
            *into.entry(change.row.clone()).or_default() += diff;
        }
    }
    into.retain(|_, n| *n != 0);
}

async fn contents(client: &tokio_postgres::Client, sql: &str) -> BTreeMap<String, i64> {
    let mut out = BTreeMap::new();
    for message in client.simple_query(sql).await.expect("query") {
        if let tokio_postgres::SimpleQueryMessage::Row(row) = message {
            let fields: Vec<&str> = (0..row.len())
                .map(|i| row.get(i).unwrap_or("\\N"))
                .collect();
            *out.entry(fields.join("\t")).or_default() += 1;
        }
    }
    out
}

/// Read a COPY stream until its changes consolidate to `expected`.
async fn read_until<S>(
    stream: &mut S,
    seen: &mut BTreeMap<String, i64>,
    expected: &BTreeMap<String, i64>,
) -> u64
where
    S: futures::Stream<Item = Result<Bytes, tokio_postgres::Error>> + Unpin,
{
    let mut last = 0;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while seen != expected {
        let data = tokio::time::timeout_at(deadline, stream.next())
            .await
            .unwrap_or_else(|_| panic!("the stream did not reach {expected:?}; it holds {seen:?}"))
            .expect("the stream goes on")
            .expect("copy data");
        let mut changes = Vec::new();
        parse_lines(&data, &mut changes);
        consolidate(&changes, seen);
        last = changes
            .iter()
            .map(|c| c.epoch)
            .max()
            .unwrap_or(last)
            .max(last);
    }
    last
}

const VIEW: &str = "SELECT g, count(*) AS n, sum(v) AS total FROM t GROUP BY g";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_copy_subscriber_resumes_as_of_its_last_epoch_after_a_restart() {
    let mut server = TestServer::start();
    let writer = server.connect().await;
    writer
        .batch_execute(&format!(
            "CREATE TABLE t (id BIGINT PRIMARY KEY, g VARCHAR, v BIGINT);
             INSERT INTO t SELECT value AS id, 'g' || (value % 5) AS g, value AS v FROM generate_series(1, 100);
             CREATE MATERIALIZED VIEW v AS {VIEW};"
        ))
        .await
        .expect("setup");

    let reader = server.connect().await;
    let stream = reader
        .copy_out("COPY (SUBSCRIBE v) TO STDOUT")
        .await
        .expect("subscribe");
    futures::pin_mut!(stream);
    let mut seen = BTreeMap::new();
    read_until(
        &mut stream,
        &mut seen,
        &contents(&writer, "SELECT * FROM v").await,
    )
    .await;

    writer
        .batch_execute(
            "UPDATE t SET v = v + 1 WHERE id % 3 = 0; DELETE FROM t WHERE id > 90; FLUSH",
        )
        .await
        .expect("changes");
    let expected = contents(&writer, "SELECT * FROM v").await;
    let last = read_until(&mut stream, &mut seen, &expected).await;
    drop(reader);

    // Changes the subscriber never saw, then a crash.
    writer
        .batch_execute("INSERT INTO t SELECT value, 'g9', 1 FROM generate_series(200, 260); FLUSH")
        .await
        .expect("more changes");
    drop(writer);
    server.kill();
    server.restart();

    let client = server.connect().await;
    client.batch_execute("FLUSH").await.expect("flush");
    let stream = client
        .copy_out(&format!("COPY (SUBSCRIBE v AS OF {last}) TO STDOUT"))
        .await
        .expect("resume");
    futures::pin_mut!(stream);
    let writer = server.connect().await;
    writer
        .batch_execute("UPDATE t SET g = 'g0' WHERE id = 7; FLUSH")
        .await
        .expect("a change after the restart");
    let expected = contents(&writer, "SELECT * FROM v").await;
    let newest = read_until(&mut stream, &mut seen, &expected).await;
    assert!(newest > last, "resumed after epoch {last}, got {newest}");
    assert_eq!(
        seen,
        contents(&writer, VIEW).await,
        "the view equals its query"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn psql_prints_a_subscription_and_a_stalled_or_killed_one_holds_nothing_back() {
    let server = TestServer::start();
    let client = server.connect().await;
    client
        .batch_execute(
            "CREATE TABLE t (id BIGINT PRIMARY KEY, g VARCHAR, v BIGINT);
             CREATE MATERIALIZED VIEW wide AS SELECT id, repeat('x', 200) AS pad FROM t;
             CREATE MATERIALIZED VIEW v AS SELECT g, count(*) AS n, sum(v) AS total FROM t GROUP BY g;
             INSERT INTO t VALUES (1, 'a', 5);
             FLUSH",
        )
        .await
        .expect("setup");
    // psql buffers a pipe fully; a terminal would see each row at once.
    let psql = |sql: &str| {
        Command::new("stdbuf")
            .args(["-oL", "psql", "-X", "-q", "-h", "127.0.0.1"])
            .args(["-p", &server.port.to_string()])
            .args(["-U", "weir", "-d", "weir", "-c", sql])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("psql runs")
    };

    // psql prints rows as they arrive (the simple protocol).
    let mut printer = psql("COPY (SUBSCRIBE v) TO STDOUT");
    let mut lines = BufReader::new(printer.stdout.take().expect("stdout")).lines();
    let first = lines.next().expect("a line").expect("text");
    assert_eq!(first, "1\t1\ta\t1\t5", "the snapshot row");

    // A subscriber that stops reading: its output pipe fills, then its socket.
    let stalled = psql("COPY (SUBSCRIBE wide) TO STDOUT");
    for batch in 0..10i64 {
        let from = 1000 + batch * 10_000;
        client
            .batch_execute(&format!(
                "INSERT INTO t SELECT value AS id, 'b' AS g, 1 AS v FROM generate_series({from}, {})",
                from + 9999
            ))
            .await
            .expect("writes go on");
    }
    tokio::time::timeout(Duration::from_secs(60), client.batch_execute("FLUSH"))
        .await
        .expect("views keep up while a subscriber stalls")
        .expect("flush");
    let line = tokio::task::spawn_blocking(move || lines.next())
        .await
        .expect("reader")
        .expect("another line")
        .expect("text");
    assert!(
        line.contains("\tb\t"),
        "the other subscriber sees the change: {line}"
    );

    // A subscriber killed mid-stream leaves the server serving everyone
    // else. Its stream stops once a send to it fails; streams run at the
    // lowest priority, so that may take a moment on a busy machine.
    assert_eq!(server.metric("weir_change_streams").await, 2);
    let mut stalled = stalled;
    stalled.kill().expect("kill psql");
    stalled.wait().expect("reap");
    printer.kill().expect("kill psql");
    printer.wait().expect("reap");
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    for id in 10.. {
        if server.metric("weir_change_streams").await == 0 {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the killed subscribers' streams stop"
        );
        // Changes to send make the sends to the dead clients fail.
        client
            .batch_execute(&format!("INSERT INTO t VALUES ({id}, 'c', 1); FLUSH"))
            .await
            .expect("the server goes on");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    client
        .batch_execute("INSERT INTO t VALUES (2, 'a', 1); FLUSH")
        .await
        .expect("the server goes on");
    let rows = client
        .query_one("SELECT n FROM v WHERE g = 'a'", &[])
        .await
        .expect("query");
    assert_eq!(rows.get::<_, i64>(0), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reader_far_behind_catches_up_in_epoch_order() {
    let server = TestServer::start();
    let client = server.connect().await;
    client
        .batch_execute("CREATE TABLE t (id BIGINT PRIMARY KEY, v BIGINT)")
        .await
        .expect("setup");
    for batch in 0..6i64 {
        let from = batch * 25_000;
        client
            .batch_execute(&format!(
                "INSERT INTO t SELECT value AS id, {batch} AS v FROM generate_series({from}, {})",
                from + 24_999
            ))
            .await
            .expect("insert");
    }
    client
        .batch_execute("DELETE FROM t WHERE id % 10 = 0")
        .await
        .expect("delete");
    client
        .batch_execute("BEGIN; DECLARE c CURSOR FOR SUBSCRIBE t AS OF 0")
        .await
        .expect("declare");
    let mut rows: BTreeMap<String, i64> = BTreeMap::new();
    let mut last_epoch = 0;
    let mut fetches = 0;
    loop {
        let messages = client
            .simple_query("FETCH ALL c WITH (timeout = '0s')")
            .await
            .expect("fetch");
        let mut got = 0;
        for message in messages {
            if let tokio_postgres::SimpleQueryMessage::Row(row) = message {
                let epoch: u64 = row.get(0).and_then(|e| e.parse().ok()).expect("epoch");
                assert!(epoch >= last_epoch, "epochs never go back");
                last_epoch = epoch;
                let diff: i64 = row.get(1).and_then(|d| d.parse().ok()).expect("diff");
                let key = format!("{}\t{}", row.get(2).unwrap_or(""), row.get(3).unwrap_or(""));
                *rows.entry(key).or_default() += diff;
                got += 1;
            }
        }
        if got == 0 {
            break;
        }
        fetches += 1;
    }
    rows.retain(|_, n| *n != 0);
    assert_eq!(rows, contents(&client, "SELECT * FROM t").await);
    assert_eq!(last_epoch, 7, "six inserts and a delete");
    assert!(
        fetches > 2,
        "a reader far behind reads in bounded steps ({fetches})"
    );
}

#[test]
fn psycopg_reads_cursors_and_copy_streams() {
    let server = TestServer::start();
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/drivers/psycopg_subscribe.py"
    );
    let output = Command::new("python3")
        .arg(script)
        .arg(server.port.to_string())
        .output()
        .expect("python3 runs (scripts/install-deps.sh installs psycopg)");
    assert!(
        output.status.success(),
        "psycopg check failed:\n{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}
