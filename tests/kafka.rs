//! Kafka end to end against a real broker on loopback (see
//! `tests/common/kafka.rs`): JSON and CSV sources into windowed views, bad
//! messages under each `on_error` policy, upsert tables, sinks read back,
//! exactly-once across SIGKILL on both sides, and secrets never shown.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use common::TestServer;
use common::kafka::{self, Record};

use common::text_rows as rows;

/// Poll until a query returns `expected`: the broker and the source run on
/// their own, so the test waits for an outcome rather than for a time.
async fn wait_for(client: &tokio_postgres::Client, sql: &str, expected: &[&str]) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let got = rows(client, sql).await;
        if got == expected {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{sql}: waited for {expected:?}, still {got:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn sqlstate(client: &tokio_postgres::Client, sql: &str) -> String {
    let e = client.batch_execute(sql).await.expect_err(sql);
    e.as_db_error()
        .map(|d| d.code().code().to_string())
        .unwrap_or_else(|| panic!("{sql}: not a database error: {e}"))
}

fn with(topic: &str, bootstrap: &str, extra: &str) -> String {
    format!(
        "WITH (connector = 'kafka', topic = '{topic}', \
         properties.bootstrap.server = '{bootstrap}'{extra})"
    )
}

fn bid(auction: i64, price: i64, second: i64) -> Vec<u8> {
    format!(
        r#"{{"auction": {auction}, "price": {price}, "date_time": "2024-01-01 00:00:{second:02}"}}"#
    )
    .into_bytes()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_json_source_feeds_a_windowed_view_and_skips_bad_messages() {
    let bootstrap = kafka::bootstrap();
    let topic = kafka::unique_topic("bids");
    kafka::create_topic(&bootstrap, &topic, 3).await;
    let mut payloads: Vec<(Vec<u8>, i32)> = (0..30)
        .map(|i| (bid(i % 4, i, i), (i % 3) as i32))
        .collect();
    payloads.insert(7, (b"not json".to_vec(), 1));
    payloads.insert(12, (br#"{"auction": "x", "price": 1}"#.to_vec(), 2));
    let records: Vec<kafka::Outgoing> = payloads
        .iter()
        .map(|(p, partition)| (None, Some(p.as_slice()), Some(*partition)))
        .collect();
    kafka::produce(&bootstrap, &topic, &records).await;

    let server = TestServer::start();
    let client = server.connect().await;
    client
        .batch_execute(&format!(
            "CREATE SOURCE bids (auction BIGINT, price BIGINT, date_time TIMESTAMP, \
               WATERMARK FOR date_time AS date_time - INTERVAL '1' SECOND) \
             INCLUDE partition AS p, offset AS o {} FORMAT PLAIN ENCODE JSON;
             CREATE MATERIALIZED VIEW per_window AS SELECT window_start, count(*) AS n, \
               sum(price) AS total FROM TUMBLE(bids, date_time, INTERVAL '10' SECOND) \
               GROUP BY window_start",
            with(&topic, &bootstrap, "")
        ))
        .await
        .expect("create");
    wait_for(&client, "SELECT count(*) FROM bids", &["30"]).await;
    client.batch_execute("FLUSH").await.expect("flush");
    assert_eq!(
        rows(
            &client,
            "SELECT window_start, n, total FROM per_window ORDER BY 1"
        )
        .await,
        [
            "2024-01-01 00:00:00|10|45",
            "2024-01-01 00:00:10|10|145",
            "2024-01-01 00:00:20|10|245"
        ]
    );
    assert_eq!(
        rows(
            &client,
            "SELECT p, count(*), count(DISTINCT o) FROM bids GROUP BY p ORDER BY p"
        )
        .await,
        ["0|10|10", "1|10|10", "2|10|10"]
    );
    let errors = rows(
        &client,
        "SELECT source, partition, \"offset\", payload FROM source_errors ORDER BY partition",
    )
    .await;
    assert_eq!(errors.len(), 2, "{errors:?}");
    assert!(errors[0].starts_with("bids|1|") && errors[0].ends_with("|not json"));
    assert!(errors[1].starts_with("bids|2|"));
    assert_eq!(rows(&client, "SHOW SOURCES").await, ["bids|kafka|running"]);
    let state = sqlstate(
        &client,
        "INSERT INTO bids VALUES (1, 1, '2024-01-01', 0, 0)",
    )
    .await;
    assert_eq!(state, "42809");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_csv_source_reads_fields_in_column_order() {
    let bootstrap = kafka::bootstrap();
    let topic = kafka::unique_topic("csv");
    kafka::create_topic(&bootstrap, &topic, 1).await;
    let lines: [&[u8]; 4] = [
        b"1,apple,2.5",
        b"2,,3",
        b"x,pear,1",
        b"3,\"fig, dried\",4\n",
    ];
    let records: Vec<kafka::Outgoing> = lines.iter().map(|l| (None, Some(*l), None)).collect();
    kafka::produce(&bootstrap, &topic, &records).await;
    let server = TestServer::start();
    let client = server.connect().await;
    client
        .batch_execute(&format!(
            "CREATE SOURCE fruit (id INT, name VARCHAR, weight DOUBLE) {} FORMAT PLAIN ENCODE CSV",
            with(&topic, &bootstrap, "")
        ))
        .await
        .expect("create");
    wait_for(
        &client,
        "SELECT id, name, weight FROM fruit ORDER BY id",
        &["1|apple|2.5", "2|NULL|3", "3|fig, dried|4"],
    )
    .await;
    wait_for(&client, "SELECT count(*) FROM source_errors", &["1"]).await;
    // The source has read its one partition to the end: no lag, once it
    // has asked the broker where the partition ends.
    let lag = "weir_source_lag_messages{source=\"fruit\",partition=\"0\"} 0";
    let deadline = Instant::now() + Duration::from_secs(30);
    while !server.http_get("/metrics").await.contains(lag) {
        assert!(Instant::now() < deadline, "no {lag}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let overview = server.http_get("/api/overview").await;
    let body = overview.split("\r\n\r\n").nth(1).expect("a body");
    let overview: serde_json::Value = serde_json::from_str(body).expect("json");
    let fruit = &overview["connectors"][0];
    assert_eq!(fruit["name"], "fruit", "{overview}");
    assert_eq!(
        fruit["partitions"],
        serde_json::json!([{"partition": 0, "next": 4, "high": 4, "lag": 0}]),
        "{overview}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn on_error_fail_stops_the_source_and_dead_letter_copies_the_message() {
    let bootstrap = kafka::bootstrap();
    let topic = kafka::unique_topic("strict");
    let dead = kafka::unique_topic("dead");
    kafka::create_topic(&bootstrap, &topic, 1).await;
    kafka::create_topic(&bootstrap, &dead, 1).await;
    let records: [kafka::Outgoing; 3] = [
        (None, Some(br#"{"a": 1}"#), None),
        (Some(b"k"), Some(b"{broken"), None),
        (None, Some(br#"{"a": 3}"#), None),
    ];
    kafka::produce(&bootstrap, &topic, &records).await;
    let server = TestServer::start();
    let client = server.connect().await;
    client
        .batch_execute(&format!(
            "CREATE SOURCE strict (a INT) {} FORMAT PLAIN ENCODE JSON;
             CREATE SOURCE lenient (a INT) {} FORMAT PLAIN ENCODE JSON",
            with(&topic, &bootstrap, ", on_error = 'fail'"),
            with(
                &topic,
                &bootstrap,
                &format!(", on_error = 'dead_letter', dead_letter.topic = '{dead}'")
            ),
        ))
        .await
        .expect("create");
    wait_for(&client, "SELECT a FROM lenient ORDER BY a", &["1", "3"]).await;
    let deadline = Instant::now() + Duration::from_secs(60);
    let status = loop {
        let shown = rows(&client, "SELECT 1").await;
        assert_eq!(shown, ["1"]);
        let sources = rows(&client, "SHOW SOURCES").await;
        let strict = sources.iter().find(|s| s.starts_with("strict|")).cloned();
        if let Some(s) = strict.filter(|s| s.contains("failed")) {
            break s;
        }
        assert!(
            Instant::now() < deadline,
            "strict never failed: {sources:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(status.contains("offset 1"), "{status}");
    assert_eq!(rows(&client, "SELECT a FROM strict").await, ["1"]);
    let copied = kafka::consume_all(&bootstrap, &dead, false, Duration::from_secs(10)).await;
    assert_eq!(copied.len(), 1);
    assert_eq!(copied[0].key.as_deref(), Some(b"k".as_slice()));
    assert_eq!(copied[0].value.as_deref(), Some(b"{broken".as_slice()));
    assert!(copied[0].headers.iter().any(|(k, _)| k == "weir.error"));
}

#[tokio::test(flavor = "multi_thread")]
async fn an_upsert_table_keeps_the_last_value_per_key_and_deletes_on_null() {
    let bootstrap = kafka::bootstrap();
    let topic = kafka::unique_topic("users");
    kafka::create_topic(&bootstrap, &topic, 2).await;
    let records: [kafka::Outgoing; 5] = [
        (
            Some(br#"{"id": 1}"#),
            Some(br#"{"id": 1, "name": "ann"}"#),
            Some(0),
        ),
        (
            Some(br#"{"id": 2}"#),
            Some(br#"{"id": 2, "name": "bob"}"#),
            Some(1),
        ),
        (
            Some(br#"{"id": 1}"#),
            Some(br#"{"id": 1, "name": "cat"}"#),
            Some(0),
        ),
        (
            Some(br#"{"id": 3}"#),
            Some(br#"{"id": 3, "name": "dan"}"#),
            Some(1),
        ),
        (Some(br#"{"id": 2}"#), None, Some(1)),
    ];
    kafka::produce(&bootstrap, &topic, &records).await;
    let server = TestServer::start();
    let client = server.connect().await;
    client
        .batch_execute(&format!(
            "CREATE TABLE users (id BIGINT PRIMARY KEY, name VARCHAR) {} \
             FORMAT UPSERT ENCODE JSON;
             CREATE MATERIALIZED VIEW names AS SELECT count(*) AS n FROM users",
            with(&topic, &bootstrap, "")
        ))
        .await
        .expect("create");
    wait_for(
        &client,
        "SELECT id, name FROM users ORDER BY id",
        &["1|cat", "3|dan"],
    )
    .await;
    client.batch_execute("FLUSH").await.expect("flush");
    assert_eq!(rows(&client, "SELECT n FROM names").await, ["2"]);
    assert_eq!(rows(&client, "SHOW TABLES").await, ["users"]);
}

/// Fold an upsert topic into its final contents: key → value, tombstones delete.
fn fold(records: &[kafka::Record]) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for r in records {
        let key = String::from_utf8_lossy(r.key.as_deref().unwrap_or_default()).into_owned();
        match &r.value {
            Some(v) => {
                let value: serde_json::Value = serde_json::from_slice(v).expect("JSON value");
                out.insert(key, value.to_string());
            }
            None => {
                out.remove(&key);
            }
        }
    }
    out
}

/// The view's rows as the sink writes them: key JSON → row JSON.
async fn expected_upserts(client: &tokio_postgres::Client) -> BTreeMap<String, String> {
    rows(client, "SELECT g, total, n FROM totals")
        .await
        .into_iter()
        .map(|row| {
            let parts: Vec<&str> = row.split('|').collect();
            let key = serde_json::json!({ "g": parts[0] }).to_string();
            let value = serde_json::json!({
                "g": parts[0],
                "total": parts[1].parse::<i64>().expect("total"),
                "n": parts[2].parse::<i64>().expect("n"),
            });
            (key, value.to_string())
        })
        .collect()
}

/// Every message carries its epoch and place; per partition they must run
/// without a gap or a repeat, or something was written twice or lost.
fn assert_once(records: &[kafka::Record]) {
    let mut last: BTreeMap<i32, (u64, u64)> = BTreeMap::new();
    for r in records {
        let header = |name: &str| -> u64 {
            let (_, v) = r.headers.iter().find(|(k, _)| k == name).expect(name);
            String::from_utf8_lossy(v).parse().expect(name)
        };
        let (epoch, seq) = (header("weir.epoch"), header("weir.seq"));
        match last.get(&r.partition) {
            Some((e, s)) if *e == epoch => assert_eq!(seq, s + 1, "partition {}", r.partition),
            Some((e, _)) => {
                assert!(epoch > *e, "partition {} went back", r.partition);
                assert_eq!(seq, 0);
            }
            None => assert_eq!(seq, 0),
        }
        last.insert(r.partition, (epoch, seq));
    }
}

async fn wait_for_topic(
    bootstrap: &str,
    topic: &str,
    client: &tokio_postgres::Client,
) -> Vec<kafka::Record> {
    let expected = expected_upserts(client).await;
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let records = kafka::consume_all(bootstrap, topic, true, Duration::from_secs(10)).await;
        if fold(&records) == expected {
            return records;
        }
        assert!(Instant::now() < deadline, "the sink never caught up");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn an_upsert_sink_writes_each_change_once_across_a_crash() {
    let bootstrap = kafka::bootstrap();
    let topic = kafka::unique_topic("totals");
    kafka::create_topic(&bootstrap, &topic, 3).await;
    let mut server = TestServer::start();
    let client = server.connect().await;
    client
        .batch_execute(
            "CREATE TABLE t (id BIGINT PRIMARY KEY, g VARCHAR, v BIGINT);
             INSERT INTO t SELECT value AS id, 'g' || (value % 7) AS g, value AS v \
               FROM generate_series(1, 200);
             CREATE MATERIALIZED VIEW totals AS SELECT g, sum(v) AS total, count(*) AS n \
               FROM t GROUP BY g",
        )
        .await
        .expect("setup");
    let plain = format!(
        "CREATE SINK p FROM totals {} FORMAT PLAIN ENCODE JSON",
        with(&topic, &bootstrap, "")
    );
    assert_eq!(sqlstate(&client, &plain).await, "22023");
    client
        .batch_execute(&format!(
            "CREATE SINK s FROM totals {} FORMAT UPSERT ENCODE JSON",
            with(&topic, &bootstrap, "")
        ))
        .await
        .expect("sink");
    client
        .batch_execute(
            "UPDATE t SET v = v + 1 WHERE id % 3 = 0; DELETE FROM t WHERE g = 'g0'; FLUSH",
        )
        .await
        .expect("changes");
    wait_for_topic(&bootstrap, &topic, &client).await;

    // Changes, then a crash somewhere while the sink writes them.
    for round in 0..5 {
        client
            .batch_execute(&format!(
                "UPDATE t SET v = v + {round} WHERE id % 5 = {round}"
            ))
            .await
            .expect("update");
    }
    server.kill();
    server.restart();
    let client = server.connect().await;
    client
        .batch_execute("INSERT INTO t VALUES (1000, 'g0', 5); FLUSH")
        .await
        .expect("after restart");
    let records = wait_for_topic(&bootstrap, &topic, &client).await;
    assert_once(&records);
    assert_eq!(
        rows(&client, "SHOW SINKS").await,
        ["s|totals|kafka|running"]
    );
}

/// Kill points spread over a run, seeded from the clock (the seed is printed
/// so that a failing run can be repeated).
struct KillPoints(u64);

impl KillPoints {
    fn new() -> KillPoints {
        let seed = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .expect("after 1970")
            .subsec_nanos() as u64;
        eprintln!("kill points seed: {seed}");
        KillPoints(seed)
    }

    /// A delay of up to `max_ms` before the next kill.
    fn next(&mut self, max_ms: u64) -> Duration {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        Duration::from_millis((self.0 >> 33) % max_ms)
    }
}

async fn produce_events(bootstrap: &str, topic: &str, range: std::ops::Range<i64>) {
    let payloads: Vec<(Vec<u8>, i32)> = range
        .map(|i| {
            let json = format!(r#"{{"id": {i}, "g": "g{}", "v": {}}}"#, i % 11, i % 97);
            (json.into_bytes(), (i % 3) as i32)
        })
        .collect();
    let records: Vec<kafka::Outgoing> = payloads
        .iter()
        .map(|(p, partition)| (None, Some(p.as_slice()), Some(*partition)))
        .collect();
    kafka::produce(bootstrap, topic, &records).await;
}

/// Source, view and sink together, with weir killed at random points while
/// events arrive: the view counts every event once, and the sink's topic,
/// read committed, holds every change once and folds to the view.
#[tokio::test(flavor = "multi_thread")]
async fn a_kafka_pipeline_is_exactly_once_under_repeated_sigkill() {
    let bootstrap = kafka::bootstrap();
    let input = kafka::unique_topic("torture-in");
    let output = kafka::unique_topic("torture-out");
    kafka::create_topic(&bootstrap, &input, 3).await;
    kafka::create_topic(&bootstrap, &output, 2).await;
    let mut server = TestServer::start();
    let client = server.connect().await;
    client
        .batch_execute(&format!(
            "CREATE SOURCE ev (id BIGINT, g VARCHAR, v BIGINT) {} FORMAT PLAIN ENCODE JSON;
             CREATE MATERIALIZED VIEW totals AS SELECT g, sum(v) AS total, count(*) AS n \
               FROM ev GROUP BY g;
             CREATE SINK s FROM totals {} FORMAT UPSERT ENCODE JSON",
            with(&input, &bootstrap, ""),
            with(&output, &bootstrap, "")
        ))
        .await
        .expect("pipeline");
    let mut kills = KillPoints::new();
    let rounds = 4;
    let per_round = 1500;
    for round in 0..rounds {
        produce_events(
            &bootstrap,
            &input,
            round * per_round..(round + 1) * per_round,
        )
        .await;
        tokio::time::sleep(kills.next(400)).await;
        server.kill();
        server.restart();
    }
    let client = server.connect().await;
    let total = (rounds * per_round).to_string();
    wait_for(&client, "SELECT count(*) FROM ev", &[total.as_str()]).await;
    client.batch_execute("FLUSH").await.expect("flush");
    let counted = rows(&client, "SELECT sum(n), count(DISTINCT g) FROM totals").await;
    assert_eq!(counted, [format!("{total}|11")]);
    let records = wait_for_topic(&bootstrap, &output, &client).await;
    assert_once(&records);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_source_reads_every_message_once_across_a_crash() {
    let bootstrap = kafka::bootstrap();
    let topic = kafka::unique_topic("events");
    kafka::create_topic(&bootstrap, &topic, 2).await;
    let payload = |i: i64| format!(r#"{{"id": {i}}}"#).into_bytes();
    let produce = |range: std::ops::Range<i64>| {
        let bootstrap = bootstrap.clone();
        let topic = topic.clone();
        async move {
            let payloads: Vec<(Vec<u8>, i32)> =
                range.map(|i| (payload(i), (i % 2) as i32)).collect();
            let records: Vec<kafka::Outgoing> = payloads
                .iter()
                .map(|(p, partition)| (None, Some(p.as_slice()), Some(*partition)))
                .collect();
            kafka::produce(&bootstrap, &topic, &records).await;
        }
    };
    produce(0..2000).await;
    let mut server = TestServer::start();
    let client = server.connect().await;
    client
        .batch_execute(&format!(
            "CREATE SOURCE events (id BIGINT) {} FORMAT PLAIN ENCODE JSON;
             CREATE MATERIALIZED VIEW seen AS SELECT count(*) AS n, count(DISTINCT id) AS d \
               FROM events",
            with(&topic, &bootstrap, "")
        ))
        .await
        .expect("create");
    produce(2000..4000).await;
    server.kill();
    produce(4000..5000).await;
    server.restart();
    let client = server.connect().await;
    wait_for(&client, "SELECT count(*) FROM events", &["5000"]).await;
    client.batch_execute("FLUSH").await.expect("flush");
    assert_eq!(rows(&client, "SELECT n, d FROM seen").await, ["5000|5000"]);
}

fn now_millis() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("after 1970")
        .as_millis() as i64
}

#[tokio::test(flavor = "multi_thread")]
async fn startup_modes_choose_where_a_new_source_begins() {
    let bootstrap = kafka::bootstrap();
    let topic = kafka::unique_topic("modes");
    kafka::create_topic(&bootstrap, &topic, 1).await;
    let old: [kafka::Outgoing; 2] = [
        (None, Some(br#"{"a": 1}"#), None),
        (None, Some(br#"{"a": 2}"#), None),
    ];
    kafka::produce(&bootstrap, &topic, &old).await;
    // Later than every message so far: the broker stamps them when produced.
    let since = now_millis() + 1;
    let server = TestServer::start();
    let client = server.connect().await;
    client
        .batch_execute(&format!(
            "CREATE SOURCE late (a INT) {} FORMAT PLAIN ENCODE JSON;
             CREATE SOURCE early (a INT) {} FORMAT PLAIN ENCODE JSON;
             CREATE SOURCE since (a INT) {} FORMAT PLAIN ENCODE JSON",
            with(&topic, &bootstrap, ", scan.startup.mode = 'latest'"),
            with(&topic, &bootstrap, ", scan.startup.mode = 'earliest'"),
            with(
                &topic,
                &bootstrap,
                &format!(
                    ", scan.startup.mode = 'timestamp', scan.startup.timestamp.millis = '{since}'"
                )
            ),
        ))
        .await
        .expect("create");
    wait_for(&client, "SELECT count(*) FROM early", &["2"]).await;
    wait_for(
        &client,
        "SHOW SOURCES",
        &[
            "early|kafka|running",
            "late|kafka|running",
            "since|kafka|running",
        ],
    )
    .await;
    while now_millis() <= since {
        std::hint::spin_loop();
    }
    let new: [kafka::Outgoing; 1] = [(None, Some(br#"{"a": 3}"#), None)];
    kafka::produce(&bootstrap, &topic, &new).await;
    wait_for(&client, "SELECT a FROM late", &["3"]).await;
    wait_for(&client, "SELECT a FROM since", &["3"]).await;
    wait_for(&client, "SELECT count(*) FROM early", &["3"]).await;
}

/// `transactional = 'true'` writes each epoch in a Kafka transaction. On a
/// broker with transactions (Apache Kafka) a read_committed consumer sees
/// every change once; on one without (the test suite's nisshi refuses
/// InitProducerId) the sink says so in SHOW SINKS and retries, and weir
/// carries on.
#[tokio::test(flavor = "multi_thread")]
async fn a_transactional_sink_commits_epochs_or_says_why_it_cannot() {
    let bootstrap = kafka::bootstrap();
    let topic = kafka::unique_topic("txn");
    kafka::create_topic(&bootstrap, &topic, 2).await;
    let server = TestServer::start();
    let client = server.connect().await;
    client
        .batch_execute(&format!(
            "CREATE TABLE t (id BIGINT PRIMARY KEY, g VARCHAR, v BIGINT);
             INSERT INTO t SELECT value AS id, 'g' || (value % 5) AS g, value AS v \
               FROM generate_series(1, 50);
             CREATE MATERIALIZED VIEW totals AS SELECT g, sum(v) AS total, count(*) AS n \
               FROM t GROUP BY g;
             CREATE SINK s FROM totals {} FORMAT UPSERT ENCODE JSON",
            with(&topic, &bootstrap, ", transactional = 'true'")
        ))
        .await
        .expect("sink");
    client
        .batch_execute("UPDATE t SET v = v * 2 WHERE id % 2 = 0; FLUSH")
        .await
        .expect("update");
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let status = rows(&client, "SELECT 1").await;
        assert_eq!(status, ["1"], "weir answers while the sink retries");
        let sinks = rows(&client, "SHOW SINKS").await;
        if sinks[0].contains("retrying") {
            assert!(sinks[0].to_lowercase().contains("transaction"), "{sinks:?}");
            return;
        }
        let records = kafka::consume_all(&bootstrap, &topic, true, Duration::from_secs(10)).await;
        if fold(&records) == expected_upserts(&client).await {
            assert_once(&records);
            return;
        }
        assert!(
            Instant::now() < deadline,
            "neither committed nor refused: {sinks:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_debezium_sink_says_what_each_change_was() {
    let bootstrap = kafka::bootstrap();
    let topic = kafka::unique_topic("cdc");
    kafka::create_topic(&bootstrap, &topic, 1).await;
    let server = TestServer::start();
    let client = server.connect().await;
    client
        .batch_execute(&format!(
            "CREATE TABLE t (id BIGINT PRIMARY KEY, v VARCHAR);
             INSERT INTO t VALUES (1, 'a'), (2, 'b');
             CREATE SINK d FROM t {} FORMAT DEBEZIUM ENCODE JSON;",
            with(&topic, &bootstrap, "")
        ))
        .await
        .expect("setup");
    client
        .batch_execute("UPDATE t SET v = 'c' WHERE id = 1")
        .await
        .expect("update");
    client
        .batch_execute("DELETE FROM t WHERE id = 2")
        .await
        .expect("delete");
    let deadline = Instant::now() + Duration::from_secs(60);
    let ops = loop {
        let records = kafka::consume_all(&bootstrap, &topic, true, Duration::from_secs(10)).await;
        let ops: BTreeSet<String> = records
            .iter()
            .filter_map(|r| r.value.as_deref())
            .map(|v| {
                serde_json::from_slice::<serde_json::Value>(v).expect("json")["op"].to_string()
            })
            .collect();
        if ops.len() == 3 {
            break ops;
        }
        assert!(
            Instant::now() < deadline,
            "saw only {ops:?}; {:?}",
            rows(&client, "SHOW SINKS").await
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert_eq!(
        ops,
        BTreeSet::from(["\"c\"".into(), "\"d\"".into(), "\"u\"".into()])
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn creating_against_a_missing_broker_or_topic_fails_clearly() {
    let bootstrap = kafka::bootstrap();
    let server = TestServer::start();
    let client = server.connect().await;
    let missing = kafka::unique_topic("missing");
    let state = sqlstate(
        &client,
        &format!(
            "CREATE SOURCE s (a INT) {} FORMAT PLAIN ENCODE JSON",
            with(&missing, &bootstrap, "")
        ),
    )
    .await;
    assert_eq!(state, "42704");
    let state = sqlstate(
        &client,
        &format!(
            "CREATE SOURCE s (a INT) {} FORMAT PLAIN ENCODE JSON",
            with("t", "127.0.0.1:1", "")
        ),
    )
    .await;
    assert_eq!(state, "08001");
    assert_eq!(rows(&client, "SHOW SOURCES").await, Vec::<String>::new());
}

const READ_TIMEOUT: Duration = Duration::from_secs(30);

/// The broker keeps what the tests rely on: keys, values, headers, explicit
/// partitions and offsets, and high watermarks that count every record.
#[tokio::test]
async fn broker_round_trip() {
    let bootstrap = kafka::bootstrap();
    let topic = kafka::unique_topic("round-trip");
    kafka::create_topic(&bootstrap, &topic, 3).await;

    let trace: &[(&str, &[u8])] = &[("trace", b"t-1"), ("empty", b"")];
    let sent: &[kafka::OutgoingWithHeaders<'_>] = &[
        (Some(b"a".as_slice()), Some(b"1".as_slice()), Some(0), trace),
        (Some(b"b".as_slice()), Some(b"2".as_slice()), Some(2), &[]),
        (Some(b"a".as_slice()), None, Some(0), &[]),
        (None, Some(b"3".as_slice()), Some(2), trace),
        (Some(b"c".as_slice()), Some(b"".as_slice()), Some(2), &[]),
    ];
    kafka::produce_with_headers(&bootstrap, &topic, sent).await;

    let expected = vec![
        record(0, 0, Some("a"), Some("1"), trace),
        record(0, 1, Some("a"), None, &[]),
        record(2, 0, Some("b"), Some("2"), &[]),
        record(2, 1, None, Some("3"), trace),
        record(2, 2, Some("c"), Some(""), &[]),
    ];
    let read = kafka::consume_all(&bootstrap, &topic, false, READ_TIMEOUT).await;
    assert_eq!(read, expected);

    assert_eq!(
        kafka::high_watermarks(&bootstrap, &topic).await,
        vec![2, 0, 3]
    );
    let again = kafka::consume_all(&bootstrap, &topic, true, READ_TIMEOUT).await;
    assert_eq!(
        again, expected,
        "a read_committed consumer reads plain records too"
    );
}

fn record(
    partition: i32,
    offset: i64,
    key: Option<&str>,
    value: Option<&str>,
    headers: &[(&str, &[u8])],
) -> Record {
    Record {
        partition,
        offset,
        key: key.map(|k| k.as_bytes().to_vec()),
        value: value.map(|v| v.as_bytes().to_vec()),
        headers: headers
            .iter()
            .map(|&(name, value)| (name.to_owned(), value.to_vec()))
            .collect(),
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_connector_secret_is_never_shown() {
    let bootstrap = kafka::bootstrap();
    let topic = kafka::unique_topic("secret");
    kafka::create_topic(&bootstrap, &topic, 1).await;
    let server = TestServer::start();
    let client = server.connect().await;
    // librdkafka refuses a SASL mechanism it does not know, and its message
    // quotes the value it refused.
    let refused = client
        .batch_execute(&format!(
            "CREATE SOURCE s (a INT) {} FORMAT PLAIN ENCODE JSON",
            with(
                &topic,
                &bootstrap,
                ", properties.security.protocol = 'SASL_PLAINTEXT', \
                 properties.sasl.mechanism = 'hunter3'"
            )
        ))
        .await
        .expect_err("an unknown mechanism is refused");
    let message = refused.as_db_error().map(|e| e.message().to_string());
    let message = message.unwrap_or_else(|| refused.to_string());
    assert!(!message.contains("hunter"), "{message}");
    assert!(message.contains("[REDACTED]"), "{message}");
    client
        .batch_execute("DROP SOURCE IF EXISTS s")
        .await
        .expect("drop");
    // A secret the plaintext listener never uses, so the source still connects.
    let secrets = ", properties.sasl.password = 'hunter2'";
    client
        .batch_execute(&format!(
            "CREATE SOURCE s (a INT) {} FORMAT PLAIN ENCODE JSON",
            with(&topic, &bootstrap, secrets)
        ))
        .await
        .expect("create source");
    let shown = rows(&client, "SHOW CREATE SOURCE s").await.join("\n");
    assert!(!shown.contains("hunter"), "{shown}");
    assert!(
        shown.contains("properties.sasl.password = '[REDACTED]'"),
        "{shown}"
    );
    assert!(shown.contains(&topic), "the rest is kept: {shown}");
    let options = rows(
        &client,
        "SELECT reloptions FROM pg_class WHERE relname = 's'",
    )
    .await;
    let options = options.join("\n");
    assert!(!options.contains("hunter"), "{options}");
    assert!(
        options.contains("properties.sasl.password=[REDACTED]"),
        "{options}"
    );
    let elsewhere = format!(
        "{:?}{:?}{}",
        rows(&client, "SHOW SOURCES").await,
        rows(&client, "SELECT * FROM information_schema.tables").await,
        server.http_get("/metrics").await,
    );
    assert!(!elsewhere.contains("hunter"), "{elsewhere}");
}

/// The properties of a secure broker as a connector's options.
fn secure_options(broker: &kafka::SecureBroker, password: &str) -> String {
    broker
        .properties
        .iter()
        .map(|(key, value)| {
            let value = if key == "sasl.password" {
                password
            } else {
                value
            };
            format!(", properties.{key} = '{value}'")
        })
        .collect()
}

/// Over TLS with a SCRAM-SHA-256 login, a source reads and a sink writes;
/// a wrong password or a plaintext client is refused at CREATE, and the
/// password is shown nowhere.
#[tokio::test(flavor = "multi_thread")]
async fn sources_and_sinks_log_in_over_tls() {
    let broker = kafka::SecureBroker::start();
    let bootstrap = broker.address.clone();
    let (input, output) = (
        kafka::unique_topic("tls-in"),
        kafka::unique_topic("tls-out"),
    );
    kafka::create_topic(&bootstrap, &input, 1).await;
    kafka::create_topic(&bootstrap, &output, 1).await;
    let bids: Vec<Vec<u8>> = (1..=3).map(|i| bid(i, 10 * i, 0)).collect();
    let records: Vec<kafka::Outgoing> = bids.iter().map(|b| (None, Some(&b[..]), None)).collect();
    kafka::produce(&bootstrap, &input, &records).await;

    let server = TestServer::start_logged(&[]);
    let client = server.connect().await;
    let create = |options: String| {
        format!(
            "CREATE SOURCE bids (auction BIGINT, price BIGINT, date_time TIMESTAMP) {} \
             FORMAT PLAIN ENCODE JSON",
            with(&input, &bootstrap, &options)
        )
    };
    let wrong = client
        .batch_execute(&create(secure_options(&broker, "not-the-password")))
        .await
        .expect_err("a wrong password is refused");
    let db = wrong.as_db_error().expect("a database error");
    assert_eq!(db.code().code(), "08001", "{db:?}");
    assert!(!db.message().contains("not-the-password"), "{db:?}");
    let plain = sqlstate(&client, &create(String::new())).await;
    assert_eq!(plain, "08001");

    client
        .batch_execute(&create(secure_options(&broker, kafka::SASL_PASSWORD)))
        .await
        .expect("the right password logs in");
    client
        .batch_execute(&format!(
            "CREATE MATERIALIZED VIEW total AS SELECT count(*) AS n, sum(price) AS s FROM bids;
             CREATE SINK out FROM bids {} FORMAT PLAIN ENCODE JSON",
            with(
                &output,
                &bootstrap,
                &secure_options(&broker, kafka::SASL_PASSWORD)
            )
        ))
        .await
        .expect("a sink over TLS");
    wait_for(&client, "SELECT n, s FROM total", &["3|60"]).await;
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let records = kafka::consume_all(&bootstrap, &output, true, Duration::from_secs(5)).await;
        let values: Vec<String> = records
            .iter()
            .filter_map(|r| r.value.as_deref())
            .map(|v| String::from_utf8_lossy(v).into_owned())
            .collect();
        if values.len() == 3 {
            assert!(
                values.iter().any(|v| v.contains("\"price\":30")),
                "{values:?}"
            );
            break;
        }
        assert!(Instant::now() < deadline, "the sink wrote {values:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let shown = rows(&client, "SHOW CREATE SOURCE bids").await.join("\n")
        + &rows(&client, "SHOW CREATE SINK out").await.join("\n");
    assert!(!shown.contains(kafka::SASL_PASSWORD), "{shown}");
    assert!(
        shown.contains("properties.sasl.password = '[REDACTED]'"),
        "{shown}"
    );
    let metrics = server.http_get("/metrics").await;
    let log = server.log();
    assert!(log.contains("DEBUG"), "a debug log: {log}");
    for (place, text) in [("the log", &log), ("/metrics", &metrics)] {
        for secret in [kafka::SASL_PASSWORD, "not-the-password"] {
            assert!(!text.contains(secret), "{secret} in {place}: {text}");
        }
    }
}

/// With `--log-format json` every line is a JSON object, and a source's
/// lines name the source.
#[tokio::test(flavor = "multi_thread")]
async fn json_log_lines_name_their_source() {
    let bootstrap = kafka::bootstrap();
    let topic = kafka::unique_topic("json-log");
    kafka::create_topic(&bootstrap, &topic, 1).await;
    kafka::produce(&bootstrap, &topic, &[(None, Some(&b"not json"[..]), None)]).await;
    let server = TestServer::start_logged(&["--log-format".into(), "json".into()]);
    let client = server.connect().await;
    client
        .batch_execute(&format!(
            "CREATE SOURCE noisy (a INT) {} FORMAT PLAIN ENCODE JSON",
            with(&topic, &bootstrap, "")
        ))
        .await
        .expect("create");
    wait_for(&client, "SELECT count(*) FROM source_errors", &["1"]).await;
    let log = server.log();
    let lines: Vec<serde_json::Value> = log
        .lines()
        .map(|line| serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}")))
        .collect();
    assert!(
        lines
            .iter()
            .all(|l| l["level"].is_string() && l["timestamp"].is_string())
    );
    let skipped = lines
        .iter()
        .find(|l| l["fields"]["message"] == "skipped a message that does not parse")
        .unwrap_or_else(|| panic!("no line about the bad message: {log}"));
    assert_eq!(skipped["span"]["name"], "source", "{skipped}");
    assert_eq!(skipped["span"]["source"], "noisy", "{skipped}");
}
