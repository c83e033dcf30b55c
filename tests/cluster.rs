//! Several weir nodes as one cluster, on loopback, against the test broker:
//! membership and partitions in SHOW CLUSTER, DDL made on any node applied
//! on every node in one order, a node killed and restarted catching up,
//! and views over a Kafka source agreeing on every node.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use common::TestServer;
use common::kafka;
use common::text_rows as rows;
use common::try_text_rows;

const PARTITIONS: i32 = 12;

fn node(cluster: &str, bootstrap: &str, name: &str) -> TestServer {
    node_with(cluster, bootstrap, name, &[])
}

/// A node of `cluster` started with `more` flags besides.
fn node_with(cluster: &str, bootstrap: &str, name: &str, more: &[&str]) -> TestServer {
    let args = [
        "--cluster",
        cluster,
        "--kafka",
        bootstrap,
        "--node-name",
        name,
    ];
    let args: Vec<String> = args.iter().chain(more).map(|a| a.to_string()).collect();
    TestServer::start_with(&args)
}

/// Nodes n1, n2 and n3 of `cluster`, each with a client, once every node
/// lists all three.
async fn three_nodes(
    cluster: &str,
    bootstrap: &str,
) -> ([TestServer; 3], [tokio_postgres::Client; 3]) {
    three_nodes_with(cluster, bootstrap, &[]).await
}

/// [`three_nodes`], each started with `more` flags besides.
async fn three_nodes_with(
    cluster: &str,
    bootstrap: &str,
    more: &[&str],
) -> ([TestServer; 3], [tokio_postgres::Client; 3]) {
    let nodes = ["n1", "n2", "n3"].map(|name| node_with(cluster, bootstrap, name, more));
    let clients = [
        nodes[0].connect().await,
        nodes[1].connect().await,
        nodes[2].connect().await,
    ];
    for client in &clients {
        wait_until(client, "SHOW CLUSTER", "three nodes", |r| {
            split_among(r, &["n1", "n2", "n3"])
        })
        .await;
    }
    (nodes, clients)
}

/// Polls until `check` holds for a query's rows: membership follows
/// heartbeats and the source reads on its own, so tests wait for an outcome.
async fn wait_until(
    client: &tokio_postgres::Client,
    sql: &str,
    what: &str,
    check: impl Fn(&[String]) -> bool,
) -> Vec<String> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        // An object another node made may not have reached this one yet.
        let got = common::try_text_rows(client, sql).await.unwrap_or_default();
        if check(&got) {
            return got;
        }
        assert!(
            Instant::now() < deadline,
            "{sql}: waited for {what}, still {got:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// SHOW CLUSTER's rows as node → partitions.
fn listing(rows: &[String]) -> BTreeMap<String, Vec<i32>> {
    rows.iter()
        .map(|row| {
            let fields: Vec<&str> = row.split('|').collect();
            let partitions = fields[3]
                .split(',')
                .filter(|p| !p.is_empty())
                .map(|p| p.parse().expect("a partition"))
                .collect();
            (fields[0].to_string(), partitions)
        })
        .collect()
}

/// The nodes are exactly `names`, and their partitions split 0..12.
fn split_among(rows: &[String], names: &[&str]) -> bool {
    let nodes = listing(rows);
    let all: Vec<i32> = nodes.values().flatten().copied().collect();
    let distinct: BTreeSet<i32> = all.iter().copied().collect();
    nodes.keys().map(String::as_str).eq(names.iter().copied())
        && all.len() == PARTITIONS as usize
        && distinct == (0..PARTITIONS).collect()
}

/// Event `i`: key `i % keys`, value `i`, at `i` seconds past midnight.
fn event(i: i64, keys: i64) -> Vec<u8> {
    format!(
        r#"{{"k": {}, "v": {i}, "at": "2024-01-01 {:02}:{:02}:{:02}"}}"#,
        i % keys,
        i / 3600,
        i / 60 % 60,
        i % 60
    )
    .into_bytes()
}

/// Events `events`, keyed `i % keys`, over the topic's 6 partitions.
async fn produce(bootstrap: &str, topic: &str, events: std::ops::Range<i64>, keys: i64) {
    let payloads: Vec<Vec<u8>> = events.clone().map(|i| event(i, keys)).collect();
    let records: Vec<kafka::Outgoing> = payloads
        .iter()
        .zip(events)
        .map(|(p, i)| (None, Some(p.as_slice()), Some((i % 6) as i32)))
        .collect();
    kafka::produce(bootstrap, topic, &records).await;
}

/// What `totals` holds after events 0..n keyed `i % keys`: `k|count|sum` by k.
fn recount(n: i64, keys: i64) -> Vec<String> {
    let mut by_key: BTreeMap<i64, (i64, i64)> = BTreeMap::new();
    for i in 0..n {
        let entry = by_key.entry(i % keys).or_default();
        entry.0 += 1;
        entry.1 += i;
    }
    by_key
        .into_iter()
        .map(|(k, (count, sum))| format!("{k}|{count}|{sum}"))
        .collect()
}

async fn sqlstate(client: &tokio_postgres::Client, sql: &str) -> String {
    let e = client.batch_execute(sql).await.expect_err(sql);
    e.as_db_error()
        .map(|d| d.code().code().to_string())
        .unwrap_or_else(|| panic!("{sql}: not a database error: {e}"))
}

#[tokio::test(flavor = "multi_thread")]
async fn three_nodes_share_a_catalog_and_survive_a_kill() {
    let bootstrap = kafka::bootstrap();
    let cluster = kafka::unique_topic("c");
    let topic = kafka::unique_topic("events");
    let sink_topic = kafka::unique_topic("totals");
    kafka::create_topic(&bootstrap, &topic, 6).await;
    kafka::create_topic(&bootstrap, &sink_topic, 3).await;
    let ([_n1, n2, mut n3], [c1, c2, c3]) = three_nodes(&cluster, &bootstrap).await;
    let me: Vec<String> = rows(&c2, "SHOW CLUSTER")
        .await
        .into_iter()
        .filter(|r| r.ends_with("|true"))
        .collect();
    assert_eq!(me.len(), 1);
    assert!(
        me[0].starts_with(&format!("n2|127.0.0.1:{}|", n2.port)),
        "{me:?}"
    );

    c1.batch_execute(&format!(
        "CREATE SOURCE events (k BIGINT, v BIGINT, at TIMESTAMP, \
           WATERMARK FOR at AS at - INTERVAL '1' SECOND) \
         WITH (connector = 'kafka', topic = '{topic}', \
           properties.bootstrap.server = '{bootstrap}') FORMAT PLAIN ENCODE JSON;
         CREATE MATERIALIZED VIEW totals AS \
           SELECT k, count(*) AS n, sum(v) AS total FROM events GROUP BY k;
         CREATE MATERIALIZED VIEW per_minute AS \
           SELECT window_start, count(*) AS n FROM TUMBLE(events, at, INTERVAL '1' MINUTE) \
           GROUP BY window_start EMIT ON WINDOW CLOSE"
    ))
    .await
    .expect("DDL on n1");
    // n2 follows the log on its own: it learns of the views when it reads that far.
    wait_until(&c2, "SHOW MATERIALIZED VIEWS", "the views", |r| {
        r.len() == 2
    })
    .await;
    assert_eq!(
        sqlstate(&c2, "CREATE MATERIALIZED VIEW totals AS SELECT 1 AS one").await,
        "42P07"
    );

    // Two nodes create one name at once: the log orders them, one wins.
    let (a, b) = tokio::join!(
        c2.batch_execute("CREATE TABLE race (a INT)"),
        c3.batch_execute("CREATE TABLE race (b TEXT)")
    );
    assert!(
        a.is_ok() != b.is_ok(),
        "exactly one create wins: {a:?} {b:?}"
    );
    let won_on = if a.is_ok() { &c2 } else { &c3 };
    let loser = a.err().or(b.err()).expect("one failed");
    assert_eq!(loser.code().map(|c| c.code()), Some("42P07"));
    // Read where it won: that node applied it before answering, n1 in its
    // own time.
    let columns = "SELECT column_name FROM information_schema.columns WHERE table_name = 'race'";
    let winner = rows(won_on, columns).await;
    assert_eq!(winner.len(), 1, "the winner's one column");
    for client in [&c1, &c2, &c3] {
        wait_until(client, columns, "the winner's table", |r| r == winner).await;
    }

    produce(&bootstrap, &topic, 0..90, 5).await;
    for client in [&c1, &c2, &c3] {
        wait_until(
            client,
            "SELECT * FROM totals ORDER BY k",
            "the recount",
            |r| r == recount(90, 5),
        )
        .await;
    }

    n3.kill();
    wait_until(&c1, "SHOW CLUSTER", "n3 gone", |r| {
        split_among(r, &["n1", "n2"])
    })
    .await;
    // DDL while n3 is down, which it applies when it returns; the sink is
    // written by n1, where it was sent, and by no node that learns of it later.
    c2.batch_execute("CREATE MATERIALIZED VIEW busy AS SELECT k FROM totals WHERE n > 20")
        .await
        .expect("a view");
    c1.batch_execute(&format!(
        "CREATE SINK totals_out FROM totals WITH (connector = 'kafka', \
           topic = '{sink_topic}', properties.bootstrap.server = '{bootstrap}') \
           FORMAT UPSERT ENCODE JSON"
    ))
    .await
    .expect("a sink");
    produce(&bootstrap, &topic, 90..150, 5).await;

    n3.restart();
    let c3 = n3.connect().await;
    wait_until(&c3, "SHOW CLUSTER", "n3 back", |r| {
        split_among(r, &["n1", "n2", "n3"])
    })
    .await;
    assert_eq!(
        rows(&c3, "SHOW SINKS").await,
        ["totals_out|totals|kafka|runs on n1"]
    );
    for client in [&c1, &c2, &c3] {
        wait_until(
            client,
            "SELECT * FROM totals ORDER BY k",
            "the recount",
            |r| r == recount(150, 5),
        )
        .await;
        wait_until(
            client,
            "SELECT * FROM busy ORDER BY k",
            "the new view",
            |r| r == ["0", "1", "2", "3", "4"],
        )
        .await;
        client.batch_execute("FLUSH").await.expect("flush");
    }
    let minutes = rows(&c1, "SELECT * FROM per_minute ORDER BY 1").await;
    assert_eq!(
        minutes,
        ["2024-01-01 00:00:00|60", "2024-01-01 00:01:00|60"],
        "closed minutes"
    );
    for client in [&c2, &c3] {
        assert_eq!(
            rows(client, "SELECT * FROM per_minute ORDER BY 1").await,
            minutes
        );
    }
    assert_sink_written_once(&bootstrap, &sink_topic).await;
}

/// Only n1 writes the sink: per partition the (epoch, sequence) headers
/// run without repeats, and the last value per key is the recount.
async fn assert_sink_written_once(bootstrap: &str, topic: &str) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let records = kafka::consume_all(bootstrap, topic, false, Duration::from_secs(10)).await;
        let mut last: BTreeMap<i32, (u64, u64)> = BTreeMap::new();
        let mut values = BTreeMap::new();
        for r in &records {
            let header = |name: &str| -> u64 {
                let (_, v) = r.headers.iter().find(|(k, _)| k == name).expect(name);
                String::from_utf8_lossy(v).parse().expect(name)
            };
            let place = (header("weir.epoch"), header("weir.seq"));
            if let Some(before) = last.insert(r.partition, place) {
                assert!(
                    place > before,
                    "partition {}: {before:?} then {place:?}",
                    r.partition
                );
            }
            let key = String::from_utf8_lossy(r.key.as_deref().unwrap_or_default()).into_owned();
            let value: serde_json::Value =
                serde_json::from_slice(r.value.as_deref().unwrap_or(b"null")).expect("JSON");
            values.insert(key, value);
        }
        let got: Vec<String> = values
            .values()
            .map(|v| format!("{}|{}|{}", v["k"], v["n"], v["total"]))
            .collect();
        if got == recount(150, 5) {
            return;
        }
        assert!(Instant::now() < deadline, "sink holds {got:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_node_that_ran_alone_does_not_join_a_cluster() {
    let bootstrap = kafka::bootstrap();
    let mut alone = TestServer::start();
    alone
        .connect()
        .await
        .batch_execute("CREATE TABLE mine (a INT)")
        .await
        .expect("create");
    assert!(alone.terminate());
    let said = refused_start(alone.data_dir(), "elsewhere", &bootstrap);
    assert!(said.contains("ran on its own"), "{said}");
}

/// Starts a cluster node that must not start; returns what it said.
fn refused_start(data_dir: &std::path::Path, cluster: &str, kafka: &str) -> String {
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_weir"))
        .args(["serve", "--listen"])
        .arg(format!("127.0.0.1:{}", common::free_port()))
        .arg("--http-listen")
        .arg(format!("127.0.0.1:{}", common::free_port()))
        .arg("--data-dir")
        .arg(data_dir)
        .args(["--cluster", cluster, "--kafka", kafka])
        .env("WEIR_LOG", "error")
        .output()
        .expect("run weir");
    assert!(!output.status.success());
    String::from_utf8_lossy(&output.stderr).into_owned()
}

#[tokio::test(flavor = "multi_thread")]
async fn bad_cluster_settings_stop_the_node_and_a_lone_node_is_a_cluster_of_one() {
    for args in [&["--cluster", "c"][..], &["--kafka", "127.0.0.1:9092"][..]] {
        let output = std::process::Command::new(env!("CARGO_BIN_EXE_weir"))
            .arg("serve")
            .args(args)
            .output()
            .expect("run weir");
        assert!(!output.status.success());
        let said = String::from_utf8_lossy(&output.stderr);
        assert!(
            said.contains("--cluster") && said.contains("--kafka"),
            "{said}"
        );
    }
    // A Kafka nobody answers at: the node says so and stops.
    let dir = tempfile::tempdir().expect("tempdir");
    let unreachable = format!("127.0.0.1:{}", common::free_port());
    let said = refused_start(dir.path(), "c", &unreachable);
    assert!(said.contains("cannot reach the cluster's Kafka"), "{said}");

    let server = TestServer::start();
    let client = server.connect().await;
    let rows = rows(&client, "SHOW CLUSTER").await;
    let address = format!("127.0.0.1:{}", server.port);
    assert_eq!(
        rows,
        [format!(
            "{address}|{address}|127.0.0.1:{}|0,1,2,3,4,5,6,7,8,9,10,11|true",
            server.http_port
        )]
    );
}

/// Events of the partitioned views' test: keyed `i % 40`.
const KEYS: i64 = 40;

/// The partitioned views of `events` that [`wait_for_partitioned`] checks.
const PARTITIONED_VIEWS: &str = "\
    CREATE MATERIALIZED VIEW closed WITH (partitioned = true) AS \
      SELECT k, window_start, count(*) AS n \
      FROM TUMBLE(events, at, INTERVAL '1' MINUTE) GROUP BY k, window_start \
      EMIT ON WINDOW CLOSE;
    CREATE MATERIALIZED VIEW totals WITH (partitioned = true) AS \
      SELECT k, count(*) AS n, sum(v) AS total FROM events GROUP BY k;
    CREATE MATERIALIZED VIEW per_minute WITH (partitioned = true) AS \
      SELECT k, window_start, count(*) AS n \
      FROM TUMBLE(events, at, INTERVAL '1' MINUTE) GROUP BY k, window_start";

/// `k|count|sum` by k after events 0..n, and `k|minute|count`.
fn partitioned_recount(n: i64) -> (Vec<String>, Vec<String>) {
    let mut minutes: BTreeMap<(i64, i64), i64> = BTreeMap::new();
    for i in 0..n {
        *minutes.entry((i % KEYS, i / 60)).or_default() += 1;
    }
    (
        recount(n, KEYS),
        minutes
            .into_iter()
            .map(|((k, m), count)| format!("{k}|2024-01-01 {:02}:{:02}:00|{count}", m / 60, m % 60))
            .collect(),
    )
}

/// A view's operator state entries on a node, from its `/state` page.
async fn state_entries(server: &TestServer, view: &str) -> u64 {
    let sample = format!("weir_view_state_entries{{view=\"{view}\"}}");
    metric(server, "/state", &sample).await
}

/// The value of `sample` (a metric and its labels) on page `path` of a
/// node's HTTP port; 0 when the page does not list it.
async fn metric(server: &TestServer, path: &str, sample: &str) -> u64 {
    let page = server.http_get(path).await;
    page.lines()
        .find_map(|line| line.strip_prefix(sample)?.strip_prefix(' '))
        .map_or(0, |n| n.trim().parse().expect("a count"))
}

/// Rows of `per_minute` after events 0..n whose minute the watermark (the
/// last event's time less a second) closed.
fn closed_minutes(n: i64) -> Vec<String> {
    let open = format!("2024-01-01 00:{:02}:00", (n - 2) / 60);
    partitioned_recount(n)
        .1
        .into_iter()
        .filter(|row| row.split('|').nth(1).is_some_and(|at| at < open.as_str()))
        .collect()
}

async fn wait_for_partitioned(clients: &[&tokio_postgres::Client], n: i64) {
    let (totals, minutes) = partitioned_recount(n);
    for client in clients {
        wait_until(
            client,
            "SELECT * FROM totals ORDER BY k",
            "the recount",
            |r| r == totals,
        )
        .await;
        wait_until(
            client,
            "SELECT * FROM per_minute ORDER BY k, window_start",
            "the windowed recount",
            |r| r == minutes,
        )
        .await;
        let closed = closed_minutes(n);
        wait_until(
            client,
            "SELECT * FROM closed ORDER BY k, window_start",
            "the closed minutes",
            |r| r == closed,
        )
        .await;
    }
}

/// A read of one key of `totals` after events 0..n, on each client.
async fn point_reads(clients: &[&tokio_postgres::Client], n: i64) {
    let (totals, _) = partitioned_recount(n);
    for client in clients {
        for k in [0, 7, 13, 39] {
            let sql = format!("SELECT * FROM totals WHERE k = {k}");
            assert_eq!(
                rows(client, &sql).await,
                [totals[k as usize].clone()],
                "{sql}"
            );
        }
    }
}

/// Events 0..300 are in: `n3` dies mid-stream, the other two take its
/// partitions over and agree with the recount; restarted, it agrees too.
async fn kill_and_restart(
    n3: &mut TestServer,
    others: [&tokio_postgres::Client; 2],
    bootstrap: &str,
    topic: &str,
) {
    n3.kill();
    produce(bootstrap, topic, 300..450, KEYS).await;
    wait_until(others[0], "SHOW CLUSTER", "n3 gone", |r| {
        split_among(r, &["n1", "n2"])
    })
    .await;
    wait_for_partitioned(&others, 450).await;
    n3.restart();
    let c3 = n3.connect().await;
    produce(bootstrap, topic, 450..600, KEYS).await;
    wait_until(&c3, "SHOW CLUSTER", "n3 back", |r| {
        split_among(r, &["n1", "n2", "n3"])
    })
    .await;
    wait_for_partitioned(&[others[0], others[1], &c3], 600).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_partitioned_view_splits_its_groups_over_the_nodes_and_survives_a_kill() {
    let bootstrap = kafka::bootstrap();
    let cluster = kafka::unique_topic("p");
    let topic = kafka::unique_topic("keyed");
    kafka::create_topic(&bootstrap, &topic, 6).await;
    let ([n1, n2, mut n3], [c1, c2, c3]) = three_nodes(&cluster, &bootstrap).await;
    c2.batch_execute(&format!(
        "CREATE SOURCE events (k BIGINT, v BIGINT, at TIMESTAMP, \
           WATERMARK FOR at AS at - INTERVAL '1' SECOND) \
         WITH (connector = 'kafka', topic = '{topic}', \
           properties.bootstrap.server = '{bootstrap}') FORMAT PLAIN ENCODE JSON;
         {PARTITIONED_VIEWS};
         CREATE MATERIALIZED VIEW whole AS \
           SELECT k, count(*) AS n, sum(v) AS total FROM events GROUP BY k"
    ))
    .await
    .expect("DDL on n2");
    produce(&bootstrap, &topic, 0..300, KEYS).await;
    wait_for_partitioned(&[&c1, &c2, &c3], 300).await;
    // Each node keeps a share of the groups, the whole view all of them.
    for server in [&n1, &n2, &n3] {
        let part = state_entries(server, "totals").await;
        let whole = state_entries(server, "whole").await;
        assert!(
            part > 0 && part * 2 < whole,
            "node on {}: {part} entries of the partitioned view, {whole} of the whole one",
            server.port
        );
    }
    // A read of one key goes to the key's owner alone.
    point_reads(&[&c1, &c2, &c3], 300).await;

    // A node dies mid-stream: the others take its partitions over and
    // build them from their own logs.
    kill_and_restart(&mut n3, [&c1, &c2], &bootstrap, &topic).await;
}

/// Opens cursor `c` over `SUBSCRIBE view` on a connection of its own,
/// again while not every node has built its part of the view yet.
async fn subscribe(server: &TestServer, view: &str) -> tokio_postgres::Client {
    let client = server.connect().await;
    let deadline = Instant::now() + Duration::from_secs(60);
    let sql = format!("BEGIN; DECLARE c CURSOR FOR SUBSCRIBE {view}");
    while let Err(e) = client.batch_execute(&sql).await {
        assert!(Instant::now() < deadline, "SUBSCRIBE {view}: {e}");
        client.batch_execute("ROLLBACK").await.expect("rollback");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    client
}

/// Fetches changes from cursor `c` into `held` (each row with its summed
/// `_diff`) until they add up to exactly the rows `wanted`.
async fn follow_until(
    client: &tokio_postgres::Client,
    held: &mut BTreeMap<String, i64>,
    wanted: &[String],
) {
    let wanted: BTreeSet<String> = wanted.iter().cloned().collect();
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        for change in rows(client, "FETCH 10000 c WITH (timeout = '1s')").await {
            let mut fields = change.splitn(3, '|').skip(1);
            let diff: i64 = fields.next().and_then(|d| d.parse().ok()).expect("a _diff");
            *held
                .entry(fields.next().expect("a row").to_string())
                .or_default() += diff;
        }
        held.retain(|_, n| *n != 0);
        if held.values().all(|n| *n == 1) && held.keys().eq(wanted.iter()) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "the changes add up to {held:?}, not the recount {wanted:?}"
        );
    }
}

/// Reads COPY lines of changes until they add up to exactly the rows `wanted`.
async fn copy_until(
    copy: &mut std::pin::Pin<&mut tokio_postgres::CopyOutStream>,
    wanted: &[String],
) {
    use futures::StreamExt;
    let wanted: BTreeSet<String> = wanted.iter().cloned().collect();
    let mut held: BTreeMap<String, i64> = BTreeMap::new();
    while !(held.values().all(|n| *n == 1) && held.keys().eq(wanted.iter())) {
        let data = tokio::time::timeout(Duration::from_secs(60), copy.next())
            .await
            .unwrap_or_else(|_| panic!("the changes add up to {held:?}, not {wanted:?}"))
            .expect("the stream goes on")
            .expect("COPY data");
        for line in String::from_utf8_lossy(&data).lines() {
            let fields: Vec<&str> = line.split('\t').collect();
            let diff: i64 = fields[1].parse().expect("a _diff");
            *held.entry(fields[2..].join("|")).or_default() += diff;
        }
        held.retain(|_, n| *n != 0);
    }
}

/// The cursor `c`'s stream ends with 55000 once partitions moved.
async fn ended_for_a_move(client: &tokio_postgres::Client) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        match try_text_rows(client, "FETCH 10000 c WITH (timeout = '1s')").await {
            Ok(_) => assert!(Instant::now() < deadline, "the stream went on after a move"),
            Err(e) => {
                let code = e.as_db_error().map(|d| d.code().code().to_string());
                assert_eq!(code.as_deref(), Some("55000"), "{e}");
                return;
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_partitioned_views_changes_merge_from_every_node_until_partitions_move() {
    let bootstrap = kafka::bootstrap();
    let cluster = kafka::unique_topic("merge");
    let topic = kafka::unique_topic("merge-in");
    kafka::create_topic(&bootstrap, &topic, 6).await;
    let ([n1, n2, mut n3], [c1, c2, c3]) = three_nodes(&cluster, &bootstrap).await;
    c1.batch_execute(&format!(
        "CREATE SOURCE events (k BIGINT, v BIGINT, at TIMESTAMP, \
           WATERMARK FOR at AS at - INTERVAL '1' SECOND) \
         WITH (connector = 'kafka', topic = '{topic}', \
           properties.bootstrap.server = '{bootstrap}', partition_by = 'k') \
         FORMAT PLAIN ENCODE JSON;
         {PARTITIONED_VIEWS};
         CREATE MATERIALIZED VIEW ends WITH (partitioned = true) AS \
           SELECT k, window_start, window_end, count(*) AS n \
           FROM TUMBLE(events, at, INTERVAL '1' MINUTE) GROUP BY k, window_start, window_end"
    ))
    .await
    .expect("DDL on n1");
    for sql in [
        "SUBSCRIBE totals WITH (progress = true)",
        "SUBSCRIBE totals AS OF 1",
        "CREATE SUBSCRIPTION s FROM totals",
    ] {
        assert_eq!(sqlstate(&c2, sql).await, "0A000", "{sql}");
    }
    // Opened before any event: every change of every node's groups comes.
    let live = subscribe(&n1, "totals").await;
    let mut held = BTreeMap::new();
    produce(&bootstrap, &topic, 0..300, KEYS).await;
    let (totals, minutes) = partitioned_recount(300);
    follow_until(&live, &mut held, &totals).await;
    // Opened later: the snapshot holds every node's groups.
    let late = subscribe(&n2, "per_minute").await;
    follow_until(&late, &mut BTreeMap::new(), &minutes).await;
    wait_for_partitioned(&[&c1, &c2, &c3], 300).await;
    // At its own pace, run on each node, and as COPY text.
    assert_eq!(
        sqlstate(
            &c3,
            "COPY (SUBSCRIBE per_minute EMIT ON WINDOW CLOSE) TO STDOUT"
        )
        .await,
        "0A000",
        "no window_end to close rows by"
    );
    let closing = n3.connect().await;
    let copy = closing
        .copy_out("COPY (SUBSCRIBE ends EMIT ON WINDOW CLOSE) TO STDOUT")
        .await
        .expect("COPY (SUBSCRIBE ...)");
    futures::pin_mut!(copy);
    let with_ends: Vec<String> = closed_minutes(300)
        .iter()
        .map(|row| {
            let [k, start, n] = row.split('|').collect::<Vec<_>>()[..] else {
                panic!("{row}")
            };
            let minute: i64 = start[14..16].parse().expect("a minute");
            format!("{k}|{start}|2024-01-01 00:{:02}:00|{n}", minute + 1)
        })
        .collect();
    copy_until(&mut copy, &with_ends).await;

    // A node dies: the streams that read it end, and a new one reads the
    // two nodes left.
    n3.kill();
    produce(&bootstrap, &topic, 300..450, KEYS).await;
    wait_until(&c1, "SHOW CLUSTER", "n3 gone", |r| {
        split_among(r, &["n1", "n2"])
    })
    .await;
    ended_for_a_move(&live).await;
    ended_for_a_move(&late).await;
    let two = subscribe(&n1, "totals").await;
    follow_until(&two, &mut BTreeMap::new(), &partitioned_recount(450).0).await;

    // It returns and takes partitions back: no node went, but the parts
    // built again end the stream over them too.
    n3.restart();
    let c3 = n3.connect().await;
    produce(&bootstrap, &topic, 450..600, KEYS).await;
    wait_until(&c3, "SHOW CLUSTER", "n3 back", |r| {
        split_among(r, &["n1", "n2", "n3"])
    })
    .await;
    ended_for_a_move(&two).await;
    wait_for_partitioned(&[&c1, &c2, &c3], 600).await;
    let again = subscribe(&n3, "totals").await;
    follow_until(&again, &mut BTreeMap::new(), &partitioned_recount(600).0).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_partitioned_view_is_refused_where_a_cluster_could_not_split_it() {
    let bootstrap = kafka::bootstrap();
    let topic = kafka::unique_topic("alone");
    kafka::create_topic(&bootstrap, &topic, 2).await;
    let server = TestServer::start();
    let client = server.connect().await;
    client
        .batch_execute(&format!(
            "CREATE TABLE t (k INT, v INT);
             CREATE SOURCE s (k INT, v INT) WITH (connector = 'kafka', topic = '{topic}', \
               properties.bootstrap.server = '{bootstrap}') FORMAT PLAIN ENCODE JSON;
             CREATE MATERIALIZED VIEW p WITH (partitioned = true) AS \
               SELECT k, sum(v) AS total FROM s GROUP BY k"
        ))
        .await
        .expect("setup");
    for (sql, code) in [
        (
            "CREATE MATERIALIZED VIEW bad WITH (partitioned = true) AS \
             SELECT k, count(*) FROM t GROUP BY k",
            "0A000",
        ),
        (
            "CREATE MATERIALIZED VIEW bad WITH (partitioned = true) AS SELECT k, v FROM s",
            "0A000",
        ),
        (
            "CREATE MATERIALIZED VIEW bad WITH (partitioned = true) AS \
             SELECT count(*) AS n FROM s GROUP BY k",
            "0A000",
        ),
        (
            "CREATE MATERIALIZED VIEW bad WITH (partitioned = maybe) AS \
             SELECT k, count(*) FROM s GROUP BY k",
            "22023",
        ),
        ("CREATE MATERIALIZED VIEW bad AS SELECT * FROM p", "0A000"),
        ("CREATE INDEX ON p (total)", "0A000"),
    ] {
        assert_eq!(sqlstate(&client, sql).await, code, "{sql}");
    }
    // On a node of its own, the view is whole and reads as any other.
    client.batch_execute("FLUSH").await.expect("flush");
    assert!(rows(&client, "SELECT * FROM p").await.is_empty());
    assert_eq!(
        rows(
            &client,
            "SELECT reloptions FROM pg_class WHERE relname = 'p'"
        )
        .await,
        ["{emit=changes,partitioned=true}"]
    );
    client
        .batch_execute("DROP MATERIALIZED VIEW p")
        .await
        .expect("drop");
}

/// Rows a node wrote to source `events`' log, from its `/metrics` page.
async fn messages_logged(server: &TestServer) -> u64 {
    metric(
        server,
        "/metrics",
        "weir_source_messages_total{source=\"events\"}",
    )
    .await
}

#[tokio::test(flavor = "multi_thread")]
async fn a_split_source_spreads_its_reading_over_the_nodes_and_survives_a_kill() {
    let bootstrap = kafka::bootstrap();
    let cluster = kafka::unique_topic("split");
    let topic = kafka::unique_topic("split-in");
    kafka::create_topic(&bootstrap, &topic, 6).await;
    let ([n1, n2, mut n3], [c1, c2, c3]) = three_nodes(&cluster, &bootstrap).await;
    let source = format!(
        "CREATE SOURCE events (k BIGINT, v BIGINT, at TIMESTAMP, \
           WATERMARK FOR at AS at - INTERVAL '1' SECOND) \
         WITH (connector = 'kafka', topic = '{topic}', \
           properties.bootstrap.server = '{bootstrap}', partition_by = 'k') \
         FORMAT PLAIN ENCODE JSON"
    );
    assert_eq!(
        sqlstate(&c1, &source.replace("'k')", "'nope')")).await,
        "22023",
        "partition_by names a column the source lacks"
    );
    c1.batch_execute(&format!("{source}; {PARTITIONED_VIEWS}"))
        .await
        .expect("DDL on n1");
    for sql in [
        "SELECT count(*) FROM events",
        "CREATE MATERIALIZED VIEW whole AS SELECT k, count(*) FROM events GROUP BY k",
        "CREATE MATERIALIZED VIEW by_v WITH (partitioned = true) AS \
         SELECT v, count(*) FROM events GROUP BY v",
        "CREATE MATERIALIZED VIEW renamed WITH (partitioned = true) AS \
         SELECT k AS key, count(*) FROM events GROUP BY k",
        "SUBSCRIBE events",
    ] {
        assert_eq!(sqlstate(&c2, sql).await, "0A000", "{sql}");
    }
    produce(&bootstrap, &topic, 0..300, KEYS).await;
    wait_for_partitioned(&[&c1, &c2, &c3], 300).await;
    // Each node logged its share of the events, and together all of them once.
    let mut logged = Vec::new();
    for server in [&n1, &n2, &n3] {
        logged.push(messages_logged(server).await);
    }
    assert!(
        logged.iter().all(|n| *n > 0 && *n < 300) && logged.iter().sum::<u64>() == 300,
        "events logged by each node: {logged:?}"
    );
    point_reads(&[&c1, &c2, &c3], 300).await;

    kill_and_restart(&mut n3, [&c1, &c2], &bootstrap, &topic).await;

    // Dropped, it leaves no rows topic behind once every node stopped its feed.
    let rows_topics = format!("weir-{cluster}-rows-");
    assert_eq!(kafka::topics_named(&bootstrap, &rows_topics).await.len(), 1);
    c1.batch_execute("DROP SOURCE events CASCADE")
        .await
        .expect("drop");
    let deadline = Instant::now() + Duration::from_secs(60);
    while !kafka::topics_named(&bootstrap, &rows_topics)
        .await
        .is_empty()
    {
        assert!(
            Instant::now() < deadline,
            "the rows topic outlived its source"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Waits until `SHOW SOURCES` says source `name` failed at a message, and
/// returns its line.
async fn failed_source(client: &tokio_postgres::Client, name: &str, when: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let sources = rows(client, "SHOW SOURCES").await;
        let line = sources.iter().find(|s| s.starts_with(&format!("{name}|")));
        if let Some(line) = line.filter(|s| s.contains("failed: topic")) {
            return line.clone();
        }
        assert!(
            Instant::now() < deadline,
            "{name} never failed {when}: {sources:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_split_source_that_fails_fails_again_at_the_same_message_after_a_restart() {
    let bootstrap = kafka::bootstrap();
    let cluster = kafka::unique_topic("strict");
    let topic = kafka::unique_topic("strict-in");
    kafka::create_topic(&bootstrap, &topic, 1).await;
    // One key, so one rows partition: its key decodes, its value does not.
    let records: [kafka::Outgoing; 3] = [
        (None, Some(br#"{"k": 1, "v": 1}"#), None),
        (None, Some(br#"{"k": 1, "v": "one"}"#), None),
        (None, Some(br#"{"k": 1, "v": 3}"#), None),
    ];
    kafka::produce(&bootstrap, &topic, &records).await;
    let mut server = node(&cluster, &bootstrap, "solo");
    let client = server.connect().await;
    client
        .batch_execute(&format!(
            "CREATE SOURCE strict (k BIGINT, v BIGINT) \
             WITH (connector = 'kafka', topic = '{topic}', \
               properties.bootstrap.server = '{bootstrap}', partition_by = 'k', \
               on_error = 'fail') FORMAT PLAIN ENCODE JSON;
             CREATE MATERIALIZED VIEW seen WITH (partitioned = true) AS \
               SELECT k, sum(v) AS total FROM strict GROUP BY k"
        ))
        .await
        .expect("create");
    let status = failed_source(&client, "strict", "at first").await;
    assert!(status.contains("offset 1"), "{status}");
    wait_until(&client, "SELECT * FROM seen", "the row before", |r| {
        r == ["1|1"]
    })
    .await;
    // The message after the bad one came in the same round, unread: the
    // source must not count it, nor the bad one, as read.
    server.kill();
    server.restart();
    let client = server.connect().await;
    let status = failed_source(&client, "strict", "after a restart").await;
    assert!(status.contains("offset 1"), "{status}");
    wait_until(&client, "SELECT * FROM seen", "the row before", |r| {
        r == ["1|1"]
    })
    .await;
}

/// How many times `server` started building its part of `view`.
async fn builds(server: &TestServer, view: &str) -> u64 {
    let sample = format!("weir_view_builds_total{{view=\"{view}\"}}");
    metric(server, "/metrics", &sample).await
}

#[tokio::test(flavor = "multi_thread")]
async fn with_a_standby_the_nodes_left_serve_a_dead_nodes_partitions_without_building_them() {
    let bootstrap = kafka::bootstrap();
    let cluster = kafka::unique_topic("standby");
    let topic = kafka::unique_topic("standby-in");
    kafka::create_topic(&bootstrap, &topic, 6).await;
    let ([n1, n2, mut n3], [c1, c2, c3]) =
        three_nodes_with(&cluster, &bootstrap, &["--standbys", "1"]).await;
    c1.batch_execute(&format!(
        "CREATE SOURCE events (k BIGINT, v BIGINT, at TIMESTAMP, \
           WATERMARK FOR at AS at - INTERVAL '1' SECOND) \
         WITH (connector = 'kafka', topic = '{topic}', \
           properties.bootstrap.server = '{bootstrap}', partition_by = 'k') \
         FORMAT PLAIN ENCODE JSON; {PARTITIONED_VIEWS}"
    ))
    .await
    .expect("DDL on n1");
    produce(&bootstrap, &topic, 0..300, KEYS).await;
    wait_for_partitioned(&[&c1, &c2, &c3], 300).await;
    // n2, between the others, would take partitions of either: it keeps all.
    let whole = state_entries(&n2, "totals").await;
    assert!(
        state_entries(&n1, "totals").await < whole && state_entries(&n3, "totals").await < whole,
        "n2 keeps every partition of totals"
    );
    let before = [builds(&n1, "totals").await, builds(&n2, "totals").await];

    // The partitions of n3 go to nodes that kept them: no node builds.
    kill_and_restart(&mut n3, [&c1, &c2], &bootstrap, &topic).await;
    let after = [builds(&n1, "totals").await, builds(&n2, "totals").await];
    assert_eq!(before, after, "builds of totals on n1 and n2");
    assert_eq!(builds(&n3, "totals").await, 0, "n3 resumed what it kept");
}
