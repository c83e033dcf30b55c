//! End-to-end checks that need process control: restarts, kills, cancels.

mod common;

use common::TestServer;
use weir::log::embedded::CHUNK_ROWS;

async fn count(client: &tokio_postgres::Client, sql: &str) -> i64 {
    client.query_one(sql, &[]).await.expect("query").get(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn committed_rows_survive_sigkill_exactly_once() {
    let mut server = TestServer::start();
    let client = server.connect().await;
    client
        .batch_execute(
            "CREATE TABLE kv (k BIGINT PRIMARY KEY, v VARCHAR);
             CREATE STREAM events (id BIGINT, body VARCHAR);",
        )
        .await
        .expect("create");
    for i in 0..200i64 {
        client
            .execute("INSERT INTO kv VALUES ($1, $2)", &[&i, &format!("v{i}")])
            .await
            .expect("insert");
    }
    client
        .batch_execute("INSERT INTO events SELECT value, 'e' FROM generate_series(1, 5000)")
        .await
        .expect("bulk insert");
    client
        .execute("DELETE FROM kv WHERE k < 10", &[])
        .await
        .expect("delete");
    client
        .execute("UPDATE kv SET v = 'changed' WHERE k = 50", &[])
        .await
        .expect("update");
    let client = server.crash(client).await;
    assert_eq!(count(&client, "SELECT count(*) FROM kv").await, 190);
    assert_eq!(
        count(&client, "SELECT count(DISTINCT k) FROM kv").await,
        190
    );
    assert_eq!(count(&client, "SELECT count(*) FROM events").await, 5000);
    assert_eq!(
        count(&client, "SELECT count(DISTINCT id) FROM events").await,
        5000
    );
    let v: String = client
        .query_one("SELECT v FROM kv WHERE k = 50", &[])
        .await
        .expect("point read")
        .get(0);
    assert_eq!(v, "changed");

    // Writes after the restart continue the log where it ended.
    client
        .execute("INSERT INTO events VALUES (5001, 'after')", &[])
        .await
        .expect("insert after restart");
    assert_eq!(count(&client, "SELECT count(*) FROM events").await, 5001);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_shuts_down_cleanly_and_keeps_the_catalog() {
    let mut server = TestServer::start();
    let client = server.connect().await;
    client
        .batch_execute("CREATE TABLE t (a INT PRIMARY KEY); INSERT INTO t VALUES (1), (2), (3);")
        .await
        .expect("setup");
    drop(client);
    assert!(server.terminate(), "weir should exit 0 on SIGTERM");
    server.restart();
    let client = server.connect().await;
    assert_eq!(count(&client, "SELECT count(*) FROM t").await, 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_duplicate_keys_commit_exactly_one() {
    let server = TestServer::start();
    let setup = server.connect().await;
    setup
        .batch_execute("CREATE TABLE u (id BIGINT PRIMARY KEY, who INT)")
        .await
        .expect("create");
    let mut tasks = Vec::new();
    for who in 0..8i32 {
        let client = server.connect().await;
        tasks.push(tokio::spawn(async move {
            let mut won = 0;
            for id in 0..50i64 {
                if client
                    .execute("INSERT INTO u VALUES ($1, $2)", &[&id, &who])
                    .await
                    .is_ok()
                {
                    won += 1;
                }
            }
            won
        }));
    }
    let mut total = 0;
    for task in tasks {
        total += task.await.expect("task");
    }
    assert_eq!(total, 50, "each key is inserted by exactly one session");
    assert_eq!(count(&setup, "SELECT count(*) FROM u").await, 50);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_request_stops_a_running_query() {
    let server = TestServer::start();
    let client = server.connect().await;
    let token = client.cancel_token();
    let query = tokio::spawn(async move {
        client
            .simple_query(
                "SELECT count(*) FROM generate_series(1, 2000000000) a CROSS JOIN generate_series(1, 10) b",
            )
            .await
    });
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    token
        .cancel_query(tokio_postgres::NoTls)
        .await
        .expect("send cancel");
    let result = tokio::time::timeout(std::time::Duration::from_secs(20), query)
        .await
        .expect("the query should stop soon after the cancel")
        .expect("task");
    let error = result.expect_err("a cancelled query fails");
    assert_eq!(error.code().map(|c| c.code()), Some("57014"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_endpoint_answers() {
    let server = TestServer::start();
    let client = server.connect().await;
    client.simple_query("SELECT 1").await.expect("query");
    let body = metrics(&server).await;
    assert!(body.starts_with("HTTP/1.1 200"));
    assert!(body.contains("weir_statements_total"));
}

#[test]
fn help_lists_every_fixed_flag() {
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_weir"))
        .arg("--help")
        .output()
        .expect("run weir --help");
    let help = String::from_utf8_lossy(&output.stdout);
    for flag in ["--listen", "--http-listen", "--data-dir", "--config"] {
        assert!(help.contains(flag), "--help should mention {flag}");
    }
}

async fn copy_in(
    client: &tokio_postgres::Client,
    sql: &str,
    data: &str,
) -> Result<u64, tokio_postgres::Error> {
    use futures::SinkExt;
    let sink = client.copy_in(sql).await?;
    futures::pin_mut!(sink);
    sink.send(bytes::Bytes::from(data.to_string())).await?;
    sink.finish().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn copy_from_stdin_in_text_and_csv() {
    let server = TestServer::start();
    let client = server.connect().await;
    client
        .batch_execute("CREATE TABLE p (id BIGINT PRIMARY KEY, name VARCHAR, score DOUBLE)")
        .await
        .expect("create");
    let text = "1\tann\t1.5\n2\t\\N\t2\n3\twith\\ttab\t-1\n";
    assert_eq!(
        copy_in(&client, "COPY p FROM STDIN", text)
            .await
            .expect("text copy"),
        3
    );
    let csv = "id,name\n10,\"x, y\"\n11,z\n";
    assert_eq!(
        copy_in(
            &client,
            "COPY p (id, name) FROM STDIN WITH (FORMAT csv, HEADER true)",
            csv
        )
        .await
        .expect("csv copy"),
        2
    );
    let rows = client
        .query("SELECT id, name, score FROM p ORDER BY id", &[])
        .await
        .expect("select");
    let names: Vec<Option<String>> = rows.iter().map(|r| r.get(1)).collect();
    assert_eq!(
        names,
        vec![
            Some("ann".into()),
            None,
            Some("with\ttab".into()),
            Some("x, y".into()),
            Some("z".into())
        ]
    );
    // A bad value or a duplicate key rejects the whole COPY.
    let bad = copy_in(
        &client,
        "COPY p FROM STDIN",
        "20\tq\t1\n21\tr\tnotanumber\n",
    )
    .await;
    assert_eq!(
        bad.expect_err("bad value").code().map(|c| c.code()),
        Some("22P02")
    );
    let dup = copy_in(&client, "COPY p FROM STDIN", "30\tq\t1\n1\tr\t2\n").await;
    assert_eq!(
        dup.expect_err("duplicate").code().map(|c| c.code()),
        Some("23505")
    );
    assert_eq!(count(&client, "SELECT count(*) FROM p").await, 5);
    // The connection is usable after a failed COPY.
    assert_eq!(
        count(&client, "SELECT count(*) FROM p WHERE id >= 20").await,
        0
    );
}

/// Lines `id\tname_id` for ids in `range`, about 30 bytes each.
fn text_lines(range: std::ops::Range<i64>) -> String {
    range.map(|i| format!("{i}\tname_{i:020}\n")).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn large_copies_are_parsed_in_parts_and_read_as_a_whole() {
    let server = TestServer::start();
    let client = server.connect().await;
    client
        .batch_execute("CREATE TABLE big (id BIGINT PRIMARY KEY, name VARCHAR)")
        .await
        .expect("create");
    // Megabytes of data, so that it is cut into parts: a header only the
    // first part skips, and an end marker in the middle after which even
    // malformed lines are ignored.
    let data = format!(
        "id\tname\n{}\\.\nnot a row\n{}",
        text_lines(0..60_000),
        text_lines(60_000..70_000)
    );
    let sql = "COPY big FROM STDIN WITH (FORMAT text, HEADER true)";
    assert_eq!(copy_in(&client, sql, &data).await.expect("copy"), 60_000);

    // A malformed line in a late part is named by its line in the data.
    let bad = format!(
        "{}oops\n{}",
        text_lines(100_000..150_000),
        text_lines(150_000..160_000)
    );
    let err = copy_in(&client, "COPY big FROM STDIN", &bad)
        .await
        .expect_err("malformed line");
    let err = err.as_db_error().expect("a database error");
    assert_eq!(err.code().code(), "22P02");
    assert!(err.message().contains("line 50001"), "{}", err.message());

    // A key repeated across parts rejects the whole statement.
    let dup = format!(
        "{}{}",
        text_lines(200_000..260_000),
        text_lines(200_001..200_002)
    );
    let err = copy_in(&client, "COPY big FROM STDIN", &dup)
        .await
        .expect_err("duplicate");
    assert_eq!(err.code().map(|c| c.code()), Some("23505"));
    assert_eq!(count(&client, "SELECT count(*) FROM big").await, 60_000);

    // CSV fields may hold line breaks; the data is cut only between records.
    let csv: String = (300_000..350_000)
        .map(|i| format!("{i},\"line one\nline \"\"two\"\"\"\n"))
        .collect();
    let copied = copy_in(&client, "COPY big FROM STDIN WITH (FORMAT csv)", &csv)
        .await
        .expect("csv copy");
    assert_eq!(copied, 50_000);
    let names = client
        .query("SELECT DISTINCT name FROM big WHERE id >= 300000", &[])
        .await
        .expect("select");
    let names: Vec<String> = names.iter().map(|r| r.get(0)).collect();
    assert_eq!(names, ["line one\nline \"two\""]);
    assert_eq!(count(&client, "SELECT count(*) FROM big").await, 110_000);
}

async fn copy_out(
    client: &tokio_postgres::Client,
    sql: &str,
) -> Result<String, tokio_postgres::Error> {
    use futures::TryStreamExt;
    let stream = client.copy_out(sql).await?;
    let chunks: Vec<bytes::Bytes> = stream.try_collect().await?;
    Ok(chunks.iter().map(|c| String::from_utf8_lossy(c)).collect())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn copy_to_stdout_round_trips_through_copy_from() {
    let server = TestServer::start();
    let client = server.connect().await;
    client
        .batch_execute(
            "CREATE TABLE p (id BIGINT PRIMARY KEY, name VARCHAR, at TIMESTAMP); \
             CREATE TABLE q (id BIGINT PRIMARY KEY, name VARCHAR, at TIMESTAMP); \
             INSERT INTO p VALUES (1, 'a,b', '2020-01-01 10:00:00.5'), (2, NULL, NULL), \
             (3, '', '2020-01-01 00:00:00'), (4, 'tab\there \"q\"', NULL); \
             CREATE MATERIALIZED VIEW n AS SELECT count(*) AS rows FROM p",
        )
        .await
        .expect("setup");
    let text = copy_out(&client, "COPY p TO STDOUT").await.expect("text");
    assert_eq!(text.lines().count(), 4, "{text}");
    assert!(text.contains("2\t\\N\t\\N\n"), "{text}");
    let csv = copy_out(
        &client,
        "COPY (SELECT * FROM p ORDER BY id) TO STDOUT WITH (FORMAT csv, HEADER)",
    )
    .await
    .expect("csv");
    assert_eq!(
        csv,
        "id,name,at\n1,\"a,b\",2020-01-01 10:00:00.5\n2,,\n3,\"\",2020-01-01 00:00:00\n\
         4,\"tab\there \"\"q\"\"\",\n"
    );
    copy_in(&client, "COPY q FROM STDIN WITH (FORMAT csv, HEADER)", &csv)
        .await
        .expect("csv back in");
    let same = "SELECT count(*) FROM p JOIN q ON p.id = q.id \
                WHERE p.name IS NOT DISTINCT FROM q.name AND p.at IS NOT DISTINCT FROM q.at";
    assert_eq!(count(&client, same).await, 4);
    client.batch_execute("FLUSH").await.expect("flush");
    assert_eq!(
        copy_out(&client, "COPY n TO STDOUT").await.expect("view"),
        "4\n"
    );
    assert_eq!(
        copy_out(&client, "COPY p (name, id) TO STDOUT (DELIMITER '|') ")
            .await
            .expect("columns")
            .lines()
            .next(),
        Some("a,b|1")
    );
    // A large result goes out as it is computed, every line of it.
    let many = copy_out(
        &client,
        "COPY (SELECT n, repeat('x', 100) FROM generate_series(1, 300000) AS g(n)) TO STDOUT",
    )
    .await
    .expect("many rows");
    assert_eq!(many.lines().count(), 300_000);
    assert!(many.ends_with(&format!("300000\t{}\n", "x".repeat(100))));
    for (sql, code) in [
        (
            "COPY (SELECT 1 / (n - 5) FROM generate_series(1, 10) AS g(n)) TO STDOUT",
            "22012",
        ),
        ("COPY nope TO STDOUT", "42P01"),
        ("COPY p (nope) TO STDOUT", "42703"),
        ("COPY p TO '/tmp/p.txt'", "0A000"),
        ("COPY p TO STDOUT (FORMAT binary)", "0A000"),
        ("COPY (DELETE FROM p) TO STDOUT", "0A000"),
    ] {
        let err = copy_out(&client, sql).await.expect_err(sql);
        assert_eq!(err.code().map(|c| c.code()), Some(code), "{sql}: {err:?}");
    }
    let err = client
        .batch_execute("COPY n FROM STDIN")
        .await
        .expect_err("into a view");
    assert_eq!(err.code().map(|c| c.code()), Some("42809"));
    assert_eq!(count(&client, "SELECT count(*) FROM p").await, 4);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prepared_statements_take_parameters() {
    let server = TestServer::start();
    let client = server.connect().await;
    client
        .batch_execute("CREATE TABLE kv (k BIGINT PRIMARY KEY, v VARCHAR)")
        .await
        .expect("create");
    let insert = client
        .prepare("INSERT INTO kv VALUES ($1, $2)")
        .await
        .expect("prepare");
    for k in 0..10i64 {
        let n = client
            .execute(&insert, &[&k, &format!("v{k}")])
            .await
            .expect("insert");
        assert_eq!(n, 1);
    }
    let select = client
        .prepare("SELECT v FROM kv WHERE k = $1")
        .await
        .expect("prepare");
    let row = client.query_one(&select, &[&7i64]).await.expect("select");
    let v: String = row.get(0);
    assert_eq!(v, "v7");
    let n = client
        .execute("UPDATE kv SET v = $1 WHERE k < $2", &[&"low", &3i64])
        .await
        .expect("update");
    assert_eq!(n, 3);
    let n = client
        .execute("DELETE FROM kv WHERE k >= $1", &[&8i64])
        .await
        .expect("delete");
    assert_eq!(n, 2);
    assert_eq!(count(&client, "SELECT count(*) FROM kv").await, 8);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn vacuum_compacts_the_store_and_keeps_every_row() {
    use futures::StreamExt;
    use std::sync::Arc;
    let server = TestServer::start();
    let client = server.connect().await;
    client
        .batch_execute(
            "CREATE TABLE gone (id BIGINT PRIMARY KEY);
             INSERT INTO gone SELECT value FROM generate_series(1, 2000);
             CREATE TABLE kept (id BIGINT PRIMARY KEY);
             INSERT INTO kept SELECT value FROM generate_series(1, 3000);
             CREATE VIEW names AS SELECT id FROM kept;
             DROP TABLE gone;",
        )
        .await
        .expect("setup");
    client.batch_execute("VACUUM").await.expect("vacuum");
    // Compaction writes what the memtables held into table files.
    let tables = std::fs::read_dir(server.data_dir().join("db"))
        .expect("data directory")
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().ends_with(".sst"))
        .count();
    assert!(tables > 0, "no table files after VACUUM");
    let notices = Arc::new(std::sync::Mutex::new(Vec::new()));
    let (logged, connection) = {
        let notices = notices.clone();
        let (client, mut connection) =
            tokio_postgres::connect(&server.connection_string(), tokio_postgres::NoTls)
                .await
                .expect("connect");
        let stream = futures::stream::poll_fn(move |cx| connection.poll_message(cx));
        let forward = stream.for_each(move |message| {
            if let Ok(tokio_postgres::AsyncMessage::Notice(n)) = message {
                notices.lock().expect("lock").push(n.message().to_string());
            }
            futures::future::ready(())
        });
        (client, forward)
    };
    tokio::spawn(connection);
    logged
        .batch_execute("VACUUM (FULL, ANALYZE) kept, names")
        .await
        .expect("vacuum a table and a view");
    assert_eq!(
        *notices.lock().expect("lock"),
        ["skipping \"names\" --- cannot vacuum non-tables or special system tables"]
    );
    assert_eq!(count(&client, "SELECT count(*) FROM kept").await, 3000);
    for (sql, code) in [
        ("VACUUM nosuch", "42P01"),
        ("VACUUM (BOGUS) kept", "42601"),
        ("BEGIN; VACUUM", "25001"),
    ] {
        let e = client.batch_execute(sql).await.expect_err(sql);
        assert_eq!(e.code().map(|c| c.code()), Some(code), "{sql}: {e}");
    }
    client.batch_execute("ROLLBACK").await.expect("rollback");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_http_port_is_read_only() {
    let server = TestServer::start();
    for (method, path) in [
        ("POST", "/compact"),
        ("POST", "/metrics"),
        ("PUT", "/state"),
    ] {
        let answer = server.http(method, path).await;
        let expected = if path == "/compact" { "404" } else { "405" };
        assert!(
            answer.starts_with(&format!("HTTP/1.1 {expected}")),
            "{method} {path}: {answer}"
        );
    }
    let refused = server.http("DELETE", "/metrics").await;
    assert!(refused.contains("Allow: GET"), "{refused}");
}

async fn metrics(server: &TestServer) -> String {
    server.http_get("/metrics").await
}

async fn entries_read(server: &TestServer) -> u64 {
    server.metric("weir_state_entries_read_total").await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn key_filters_read_only_the_keys_they_name() {
    let server = TestServer::start();
    let client = server.connect().await;
    client
        .batch_execute(
            "CREATE TABLE big (id BIGINT PRIMARY KEY, v VARCHAR);
             INSERT INTO big SELECT value, 'v' FROM generate_series(1, 5000);",
        )
        .await
        .expect("setup");
    let cases = [
        ("SELECT v FROM big WHERE id = 4242", 1, 1),
        ("SELECT v FROM big WHERE id IN (1, 2, 3, 999999)", 3, 4),
        ("SELECT v FROM big WHERE id BETWEEN 100 AND 109", 10, 10),
        ("SELECT v FROM big WHERE id > 4990", 10, 10),
    ];
    for (sql, rows, max_read) in cases {
        let before = entries_read(&server).await;
        let got = client.query(sql, &[]).await.expect("query").len();
        let read = entries_read(&server).await - before;
        assert_eq!(got, rows, "{sql}");
        assert!(
            read <= max_read,
            "{sql} read {read} entries, expected at most {max_read}"
        );
    }
    let before = entries_read(&server).await;
    assert_eq!(
        count(&client, "SELECT count(*) FROM big WHERE v = 'v'").await,
        5000
    );
    assert!(
        entries_read(&server).await - before >= 5000,
        "a filter on a non-key column scans"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_vanishes_mid_copy_applies_nothing() {
    let server = TestServer::start();
    let client = server.connect().await;
    client
        .batch_execute("CREATE TABLE t (id BIGINT PRIMARY KEY)")
        .await
        .expect("create");
    {
        use futures::SinkExt;
        let other = server.connect().await;
        let sink = other.copy_in("COPY t FROM STDIN").await.expect("copy");
        futures::pin_mut!(sink);
        sink.send(bytes::Bytes::from("1\n2\n3\n"))
            .await
            .expect("send");
        // Dropping the client closes the socket before CopyDone.
    }
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    assert_eq!(count(&client, "SELECT count(*) FROM t").await, 0);
    client
        .execute("INSERT INTO t VALUES (1)", &[])
        .await
        .expect("server still up");
}

async fn rows(client: &tokio_postgres::Client, sql: &str) -> Vec<String> {
    let mut out = common::text_rows(client, sql).await;
    out.sort();
    out
}

const VIEW_QUERY: &str = "SELECT k % 7 AS bucket, count(*) AS n, sum(v) AS total, min(v) AS lo, max(v) AS hi FROM kv GROUP BY k % 7";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn views_resume_after_sigkill_and_equal_a_recomputation() {
    let mut server = TestServer::start();
    let client = server.connect().await;
    client
        .batch_execute(&format!(
            "CREATE TABLE kv (k BIGINT PRIMARY KEY, v BIGINT);
             INSERT INTO kv SELECT value, value * 3 FROM generate_series(1, 3000);
             CREATE MATERIALIZED VIEW agg AS {VIEW_QUERY};
             CREATE MATERIALIZED VIEW agg_total AS SELECT sum(n) AS rows_seen FROM agg;"
        ))
        .await
        .expect("setup");
    // Writes keep arriving while the server is killed; some are not in any view yet.
    for i in 0..50i64 {
        client
            .execute("UPDATE kv SET v = v + 1 WHERE k = $1", &[&(i * 13 + 1)])
            .await
            .expect("update");
    }
    client
        .batch_execute("DELETE FROM kv WHERE k > 2900; INSERT INTO kv SELECT value, 1 FROM generate_series(5001, 5500)")
        .await
        .expect("more writes");
    let client = server.crash(client).await;
    client.batch_execute("FLUSH").await.expect("flush");
    let view = rows(&client, "SELECT * FROM agg").await;
    let batch = rows(&client, VIEW_QUERY).await;
    assert_eq!(view, batch, "the view equals its query after recovery");
    assert_eq!(
        rows(&client, "SELECT rows_seen FROM agg_total").await,
        rows(&client, "SELECT count(*) FROM kv").await,
        "a view on a view recovers too"
    );

    // And it keeps maintaining after the restart.
    client
        .batch_execute("DELETE FROM kv WHERE k % 7 = 3; FLUSH")
        .await
        .expect("delete a bucket");
    assert_eq!(
        rows(&client, "SELECT * FROM agg").await,
        rows(&client, VIEW_QUERY).await
    );
}

/// Result columns carry PostgreSQL's names, over both protocols, and a
/// name may repeat, as in PostgreSQL.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn result_columns_are_named_as_postgres_names_them() {
    let server = TestServer::start();
    let client = server.connect().await;
    client
        .batch_execute(
            "CREATE TABLE kv (k BIGINT PRIMARY KEY, v BIGINT);
             INSERT INTO kv SELECT value, value FROM generate_series(1, 3);",
        )
        .await
        .expect("an INSERT may select one column twice");
    let sql = "SELECT count(*), sum(v), k, k, 1, v::text, '1'::int, k AS x, 2 AS x \
               FROM kv GROUP BY k, v ORDER BY k LIMIT 1";
    let expected = ["count", "sum", "k", "k", "?column?", "v", "int4", "x", "x"];
    let extended = client.query(sql, &[]).await.expect("extended");
    let names: Vec<&str> = extended[0].columns().iter().map(|c| c.name()).collect();
    assert_eq!(names, expected);
    let simple = client.simple_query(sql).await.expect("simple");
    let Some(row) = simple.iter().find_map(|m| match m {
        tokio_postgres::SimpleQueryMessage::Row(row) => Some(row),
        _ => None,
    }) else {
        panic!("no row");
    };
    let names: Vec<&str> = row.columns().iter().map(|c| c.name()).collect();
    assert_eq!(names, expected);
    assert_eq!(row.get(0), Some("1"));
    assert_eq!(row.get(3), Some("1"));

    let sorted = common::text_rows(
        &client,
        "SELECT DISTINCT upper(v::text) FROM kv ORDER BY upper(v::text) DESC",
    )
    .await;
    assert_eq!(sorted, ["3", "2", "1"]);
}

/// A view's backfill is written without the WAL. What the view does after
/// its CREATE returns goes through the WAL again, and touches a few of its
/// groups only: if the backfill were not durable by then, a crash would keep
/// the later epoch and lose the groups the backfill made.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_view_is_durable_once_its_create_returns() {
    const QUERY: &str = "SELECT k % 100 AS bucket, count(*) AS n FROM kv GROUP BY k % 100";
    let mut server = TestServer::start();
    let client = server.connect().await;
    client
        .batch_execute(&format!(
            "CREATE TABLE kv (k BIGINT PRIMARY KEY, v BIGINT);
             INSERT INTO kv SELECT value, value * 2 FROM generate_series(1, 2000);
             CREATE MATERIALIZED VIEW buckets AS {QUERY};
             INSERT INTO kv VALUES (5001, 1);
             FLUSH;"
        ))
        .await
        .expect("setup");
    let client = server.crash(client).await;
    client.batch_execute("FLUSH").await.expect("flush");
    assert_eq!(count(&client, "SELECT count(*) FROM buckets").await, 100);
    assert_eq!(
        rows(&client, "SELECT * FROM buckets").await,
        rows(&client, QUERY).await,
        "the view equals its query after recovery"
    );
}

/// A SQL function lives in the catalog: after a restart it is callable,
/// and the view that calls it plans again and keeps maintaining.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sql_functions_and_the_views_calling_them_survive_a_restart() {
    let mut server = TestServer::start();
    let client = server.connect().await;
    client
        .batch_execute(
            "CREATE FUNCTION count_char(s varchar, c varchar) RETURNS int LANGUAGE SQL
               AS $$SELECT LENGTH(s) - LENGTH(REPLACE(s, c, ''))$$;
             CREATE TABLE notes (id INT PRIMARY KEY, body VARCHAR);
             CREATE MATERIALIZED VIEW counted AS SELECT id, count_char(body, 'c') AS n FROM notes;
             INSERT INTO notes VALUES (1, 'cc');
             FLUSH;",
        )
        .await
        .expect("setup");
    let client = server.crash(client).await;
    client
        .batch_execute("INSERT INTO notes VALUES (2, 'ccc'); FLUSH;")
        .await
        .expect("insert after restart");
    assert_eq!(
        rows(&client, "SELECT id, n FROM counted ORDER BY id").await,
        vec!["1|2".to_string(), "2|3".to_string()]
    );
    assert_eq!(
        count(&client, "SELECT count_char('cxc', 'c')::bigint").await,
        2
    );
}

/// A keyless view of an append-only table stores its rows under changelog
/// offsets; duplicates must survive as duplicates, and a restart in the
/// middle of a backlog must neither lose nor repeat one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn append_only_keyless_views_resume_after_sigkill_with_their_duplicates() {
    const QUERY: &str = "SELECT a, b FROM t WHERE a % 2 = 0";
    let mut server = TestServer::start();
    let client = server.connect().await;
    client
        .batch_execute(&format!(
            "CREATE TABLE t (a BIGINT, b VARCHAR) APPEND ONLY;
             CREATE MATERIALIZED VIEW v AS {QUERY};
             INSERT INTO t SELECT value % 10, 'x' FROM generate_series(1, 1000);
             FLUSH;"
        ))
        .await
        .expect("setup");
    assert_eq!(count(&client, "SELECT count(*) FROM v").await, 500);
    // Rows the view has not read yet when the server dies.
    client
        .batch_execute("INSERT INTO t SELECT value % 10, 'y' FROM generate_series(1, 1000)")
        .await
        .expect("backlog");
    let client = server.crash(client).await;
    client
        .batch_execute("INSERT INTO t SELECT value % 10, 'z' FROM generate_series(1, 1000); FLUSH")
        .await
        .expect("after restart");
    assert_eq!(
        rows(&client, "SELECT * FROM v").await,
        rows(&client, QUERY).await,
        "the view equals its query, duplicates included"
    );
    assert_eq!(count(&client, "SELECT count(*) FROM v").await, 1500);
}

/// An append-only table of events five seconds out of order at most.
const EVENTS: &str = "CREATE TABLE ev (k BIGINT, v BIGINT, ts TIMESTAMP, note VARCHAR, \
     WATERMARK FOR ts AS ts - INTERVAL '5' SECOND) APPEND ONLY;";

const WINDOWED: &str = "SELECT k, window_start, window_end, count(*) AS n, max(v) AS hi \
     FROM TUMBLE(ev, ts, INTERVAL '10' SECOND) GROUP BY k, window_start, window_end";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn windowed_views_resume_after_sigkill_without_repeating_a_window() {
    let mut server = TestServer::start();
    let client = server.connect().await;
    client
        .batch_execute(&format!(
            "{EVENTS}
             CREATE MATERIALIZED VIEW closed AS {WINDOWED} EMIT ON WINDOW CLOSE;
             CREATE MATERIALIZED VIEW sessions AS SELECT k, window_start, window_end, count(*) AS n
               FROM SESSION(ev, ts, INTERVAL '3' SECOND) GROUP BY k, window_start, window_end;"
        ))
        .await
        .expect("setup");
    // Two minutes of events, a statement a second, slightly out of order.
    for second in 0..120i64 {
        let values: Vec<String> = (0..5)
            .map(|k| {
                let at = second * 1000 - (k * 300) % 900;
                format!("({k}, {second}, TIMESTAMP '2024-01-01 00:00:00' + INTERVAL '{at} milliseconds', 'on time')")
            })
            .collect();
        client
            .batch_execute(&format!("INSERT INTO ev VALUES {}", values.join(", ")))
            .await
            .expect("insert");
    }
    let client = server.crash(client).await;
    client.batch_execute("FLUSH").await.expect("flush");
    // The watermark is 00:01:54: windows up to 00:01:50 are final.
    let expected = rows(
        &client,
        &format!(
            "SELECT * FROM ({WINDOWED}) w WHERE window_end <= TIMESTAMP '2024-01-01 00:01:54'"
        ),
    )
    .await;
    // Eleven windows a key, and one before midnight for the three keys
    // whose first event came early.
    assert_eq!(expected.len(), 11 * 5 + 3);
    assert_eq!(rows(&client, "SELECT * FROM closed").await, expected);
    assert_eq!(
        count(&client, "SELECT sum(n) FROM sessions").await,
        count(&client, "SELECT count(*) FROM ev").await,
        "every event is in exactly one session"
    );

    // The watermark survived too: a row for a final window is late.
    client
        .batch_execute(
            "INSERT INTO ev VALUES (0, 999, TIMESTAMP '2024-01-01 00:00:01', 'late'); FLUSH",
        )
        .await
        .expect("late row");
    assert_eq!(rows(&client, "SELECT * FROM closed").await, expected);
    // Key 0's session is still open (an event every second, a 3-second
    // gap), so only the tumbling window counts the row as late.
    assert_eq!(
        rows(&client, "SELECT object FROM late_events").await,
        vec!["closed".to_string()]
    );
    // The view reads no string, yet the late row is recorded whole.
    let recorded = rows(&client, "SELECT row_json FROM late_events").await;
    assert!(recorded[0].contains("\"note\":\"late\""), "{recorded:?}");
    assert!(
        metrics(&server)
            .await
            .contains("weir_late_events_total 1\n")
    );
    assert_eq!(
        count(&client, "SELECT sum(n) FROM sessions").await,
        count(&client, "SELECT count(*) FROM ev").await
    );
    // Sessions kept across the crash are the ones a recount finds.
    assert_eq!(
        rows(&client, "SELECT * FROM sessions ORDER BY k, window_start").await,
        rows(
            &client,
            "SELECT k, window_start, window_end, count(*) FROM SESSION(ev, ts, INTERVAL '3' SECOND)
               GROUP BY k, window_start, window_end ORDER BY k, window_start"
        )
        .await
    );
}

const DISTINCTS: &str = "SELECT k, count(DISTINCT v) AS n, \
     count(DISTINCT v) FILTER (WHERE v % 3 = 0) AS thirds, \
     count(DISTINCT v) FILTER (WHERE v % 3 <> 0) AS others, count(DISTINCT note) AS notes \
     FROM ev GROUP BY k";

const WINDOWED_DISTINCTS: &str = "SELECT k, window_start, count(DISTINCT v) AS n, \
     count(DISTINCT v) FILTER (WHERE v > 50) AS high \
     FROM TUMBLE(ev, ts, INTERVAL '10' SECOND) GROUP BY k, window_start";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn filtered_distinct_counts_equal_a_recount_after_sigkill() {
    let mut server = TestServer::start();
    let client = server.connect().await;
    client
        .batch_execute(&format!(
            "{EVENTS}
             CREATE MATERIALIZED VIEW distincts AS {DISTINCTS};
             CREATE MATERIALIZED VIEW windowed AS {WINDOWED_DISTINCTS} EMIT ON WINDOW CLOSE;"
        ))
        .await
        .expect("setup");
    let insert = |from: i64, to: i64| {
        let values: Vec<String> = (from..to)
            .map(|i| {
                let (k, v) = (i % 4, (i * 7) % 90);
                format!(
                    "({k}, {v}, TIMESTAMP '2024-01-01 00:00:00' + INTERVAL '{i} seconds', 'n{}')",
                    i % 5
                )
            })
            .collect();
        format!("INSERT INTO ev VALUES {}", values.join(", "))
    };
    for start in (0..120).step_by(10) {
        client
            .batch_execute(&insert(start, start + 10))
            .await
            .expect("insert");
    }
    let client = server.crash(client).await;
    // Values seen before the crash come again, under other filters too.
    for start in (60..200).step_by(20) {
        client
            .batch_execute(&insert(start, start + 20))
            .await
            .expect("insert");
    }
    client.batch_execute("FLUSH").await.expect("flush");
    assert_eq!(
        rows(&client, "SELECT * FROM distincts ORDER BY k").await,
        rows(&client, &format!("{DISTINCTS} ORDER BY k")).await
    );
    // The watermark is 00:03:14: windows up to 00:03:10 are final. Rows
    // sent again after the crash are late for the windows closed by then,
    // and repeat values of the others: the counts do not change.
    let closed = format!(
        "SELECT * FROM ({WINDOWED_DISTINCTS}) w \
         WHERE window_start <= TIMESTAMP '2024-01-01 00:03:00'"
    );
    let expected = rows(&client, &closed).await;
    assert_eq!(expected.len(), 19 * 4);
    assert_eq!(rows(&client, "SELECT * FROM windowed").await, expected);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_late_row_read_first_after_a_restart_is_recorded_whole() {
    let mut server = TestServer::start();
    let client = server.connect().await;
    client
        .batch_execute(
            "CREATE TABLE ev (k BIGINT, ts TIMESTAMP, note VARCHAR,
               WATERMARK FOR ts AS ts - INTERVAL '5' SECOND) APPEND ONLY;
             CREATE MATERIALIZED VIEW w AS SELECT k, window_start, count(*) AS n
               FROM TUMBLE(ev, ts, INTERVAL '10' SECOND) GROUP BY k, window_start
               EMIT ON WINDOW CLOSE;
             INSERT INTO ev VALUES (1, '2024-01-01 00:01:00', 'on time');
             FLUSH",
        )
        .await
        .expect("setup");
    let client = server.crash(client).await;
    // The view reads no string, so its input is decoded in part. The late
    // row leads a write of two log chunks, and only the second carries the
    // watermark: what tells the row may be late is the restored watermark.
    let on_time = (0..CHUNK_ROWS).map(|_| "(1, '2024-01-01 00:01:01', 'on time')".to_string());
    let values: Vec<String> = std::iter::once("(2, '2024-01-01 00:00:01', 'late')".to_string())
        .chain(on_time)
        .collect();
    client
        .batch_execute(&format!(
            "INSERT INTO ev VALUES {}; FLUSH",
            values.join(", ")
        ))
        .await
        .expect("insert");
    let recorded = rows(&client, "SELECT object, row_json FROM late_events").await;
    assert_eq!(recorded.len(), 1, "{recorded:?}");
    assert!(recorded[0].contains("\"note\":\"late\""), "{recorded:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_producers_retries_are_dropped_also_after_a_restart() {
    let mut server = TestServer::start();
    let client = server.connect().await;
    client
        .batch_execute(
            "CREATE STREAM s (v BIGINT);
             SET weir.producer_id = 'p1';
             SET weir.producer_seq = 7;",
        )
        .await
        .expect("setup");
    let first = copy_in(&client, "COPY s FROM STDIN", "1\n2\n3\n").await;
    assert_eq!(first.expect("copy"), 3);
    // The retry of a write whose acknowledgement was lost: the same tag, no rows.
    let retry = copy_in(&client, "COPY s FROM STDIN", "1\n2\n3\n").await;
    assert_eq!(retry.expect("copy retry"), 3);
    assert_eq!(count(&client, "SELECT count(*) FROM s").await, 3);
    let client = server.crash(client).await;
    client
        .batch_execute("SET weir.producer_id = 'p1'; SET weir.producer_seq = 7;")
        .await
        .expect("set");
    let after = client
        .execute("INSERT INTO s VALUES (1), (2), (3)", &[])
        .await;
    assert_eq!(after.expect("retry after restart"), 3);
    assert_eq!(count(&client, "SELECT count(*) FROM s").await, 3);
    client
        .batch_execute("SET weir.producer_seq = 8; INSERT INTO s VALUES (4);")
        .await
        .expect("next write");
    assert_eq!(count(&client, "SELECT sum(v) FROM s").await, 10);
}

const TORTURE_SETUP: &str = "
CREATE TABLE batches (batch BIGINT, i BIGINT, ts TIMESTAMP,
  WATERMARK FOR ts AS ts - INTERVAL '1' SECOND) APPEND ONLY;
CREATE TABLE kinds (batch BIGINT PRIMARY KEY, kind VARCHAR);
CREATE MATERIALIZED VIEW per_bucket AS
  SELECT batch % 10 AS bucket, count(*) AS n, sum(i) AS total FROM batches GROUP BY batch % 10;
CREATE MATERIALIZED VIEW per_window AS
  SELECT window_start, count(*) AS n, max(i) AS hi
  FROM TUMBLE(batches, ts, INTERVAL '10' SECOND) GROUP BY window_start, window_end;
CREATE MATERIALIZED VIEW per_kind AS
  SELECT k.kind, count(*) AS n FROM batches AS b JOIN kinds AS k ON b.batch = k.batch
  GROUP BY k.kind;";

/// Each view, and the query it must equal when recomputed from the tables.
const TORTURE_CHECKS: [(&str, &str); 4] = [
    (
        "SELECT * FROM per_bucket",
        "SELECT batch % 10, count(*), sum(i) FROM batches GROUP BY batch % 10",
    ),
    (
        "SELECT * FROM per_window",
        "SELECT window_start, count(*), max(i) FROM TUMBLE(batches, ts, INTERVAL '10' SECOND) \
         GROUP BY window_start, window_end",
    ),
    (
        "SELECT * FROM per_kind",
        "SELECT k.kind, count(*) FROM batches AS b JOIN kinds AS k ON b.batch = k.batch GROUP BY k.kind",
    ),
    (
        "SELECT * FROM chained",
        "SELECT count(*), sum(i) FROM batches",
    ),
];

/// Writes numbered batches, each retried with its producer sequence until
/// acknowledged, reconnecting to wherever the server listens now.
async fn write_batches(
    address: std::sync::Arc<std::sync::Mutex<String>>,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
) -> i64 {
    use std::sync::atomic::Ordering;
    let mut batch = 0i64;
    let mut client: Option<tokio_postgres::Client> = None;
    // A batch that was sent but not acknowledged may have committed: it is
    // retried (and so counted) even after the test says stop.
    let mut unacknowledged = false;
    while unacknowledged || !stop.load(Ordering::SeqCst) {
        let Some(c) = &client else {
            let target = address.lock().expect("address").clone();
            match tokio_postgres::connect(&target, tokio_postgres::NoTls).await {
                Ok((c, connection)) => {
                    tokio::spawn(connection);
                    client = Some(c);
                }
                Err(_) => tokio::time::sleep(std::time::Duration::from_millis(20)).await,
            }
            continue;
        };
        let sql = format!(
            "SET weir.producer_id = 'torture';
             SET weir.producer_seq = {};
             INSERT INTO batches SELECT {batch}, value, to_timestamp(1704067200 + {batch} * 100 + value)
               FROM generate_series(1, 100);
             SET weir.producer_seq = {};
             INSERT INTO kinds VALUES ({batch}, 'k{}');",
            2 * batch,
            2 * batch + 1,
            batch % 3
        );
        unacknowledged = true;
        match c.batch_execute(&sql).await {
            Ok(()) => {
                batch += 1;
                unacknowledged = false;
            }
            Err(_) => client = None,
        }
    }
    batch
}

/// The SIGKILL torture test: a writer inserts numbered batches while the
/// server is killed at arbitrary moments (mid-insert, mid-epoch, and during a
/// view's backfill) and restarted. Every acknowledged batch must be there
/// exactly once and whole, and every view must equal its recomputation.
/// `WEIR_TORTURE_ROUNDS` sets how many kills (default 30).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_torture_loses_and_repeats_nothing() {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::{Arc, Mutex};
    let rounds: u64 = std::env::var("WEIR_TORTURE_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(30);
    let mut server = TestServer::start();
    server
        .connect()
        .await
        .batch_execute(TORTURE_SETUP)
        .await
        .expect("setup");
    let address = Arc::new(Mutex::new(server.connection_string()));
    let stop = Arc::new(AtomicBool::new(false));
    let writer = tokio::spawn(write_batches(address.clone(), stop.clone()));
    // A fixed sequence of pauses: the moments vary with the machine's pace,
    // the checks do not.
    let mut seed = 0x2545_f491_4f6c_dd1du64;
    for round in 0..rounds {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        tokio::time::sleep(std::time::Duration::from_millis(40 + seed % 260)).await;
        if round == rounds / 2 {
            // Kill during a backfill: the view is created over everything so far.
            let client = server.connect().await;
            let create = client.batch_execute(
                "CREATE MATERIALIZED VIEW chained AS SELECT sum(n) AS n, sum(total) AS total FROM per_bucket",
            );
            let _ = tokio::time::timeout(std::time::Duration::from_millis(5), create).await;
        }
        server.kill();
        server.restart();
        *address.lock().expect("address") = server.connection_string();
    }
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    stop.store(true, Ordering::SeqCst);
    let written = writer.await.expect("writer");
    assert!(written > 0, "the writer wrote nothing");
    eprintln!("torture: {rounds} kills, {written} batches acknowledged");

    let client = server.connect().await;
    // The backfilled view exists if its CREATE committed before the kill.
    client
        .batch_execute(
            "CREATE MATERIALIZED VIEW IF NOT EXISTS chained AS SELECT sum(n) AS n, sum(total) AS total FROM per_bucket; FLUSH",
        )
        .await
        .expect("flush");
    assert_eq!(
        count(&client, "SELECT count(*) FROM batches").await,
        written * 100
    );
    assert_eq!(
        count(&client, "SELECT count(DISTINCT batch) FROM batches").await,
        written
    );
    let broken = "SELECT count(*) FROM (SELECT batch FROM batches GROUP BY batch HAVING count(*) <> 100) AS b";
    assert_eq!(count(&client, broken).await, 0, "a batch is not whole");
    assert_eq!(count(&client, "SELECT count(*) FROM kinds").await, written);
    for (view, query) in TORTURE_CHECKS {
        assert_eq!(
            rows(&client, view).await,
            rows(&client, query).await,
            "{view}"
        );
    }
}

/// Unmounts a scratch file system when the test ends, however it ends.
struct Mounted(std::path::PathBuf);

impl Drop for Mounted {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount")
            .arg("-l")
            .arg(&self.0)
            .status();
    }
}

fn free_bytes(path: &std::path::Path) -> u64 {
    let stats = rustix::fs::statvfs(path).expect("statvfs");
    stats.f_bavail * stats.f_frsize
}

/// A full disk: writes fail with 53100 and apply nothing, reads and other
/// sessions go on, and writes succeed again once space is freed, with nothing
/// lost across a restart. The data directory lives on a small tmpfs, which
/// takes root to mount; where that is not allowed the test says so and ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_disk_fails_writes_with_53100_until_space_is_freed() {
    use std::io::Write;
    let root = tempfile::tempdir().expect("tempdir");
    let mounted = std::process::Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=192m", "tmpfs"])
        .arg(root.path())
        .status()
        .is_ok_and(|s| s.success());
    if !mounted {
        eprintln!("skipped: cannot mount a tmpfs here (needs root)");
        return;
    }
    let _unmount = Mounted(root.path().to_path_buf());
    let args = ["--min-free-disk-mb".to_string(), "16".to_string()];
    let mut server = TestServer::start_in(root.path().join("data"), &args);
    let client = server.connect().await;
    client
        .batch_execute("CREATE TABLE big (id BIGINT PRIMARY KEY, pad VARCHAR)")
        .await
        .expect("create");
    // Leave about 24 MiB free: 8 MiB above the reserve.
    let filler_path = root.path().join("filler");
    let mut filler = std::fs::File::create(&filler_path).expect("filler");
    let chunk = vec![0u8; 1 << 20];
    while free_bytes(root.path()) > 24 << 20 {
        filler.write_all(&chunk).expect("fill");
    }
    filler.sync_all().expect("sync filler");
    let mut written = 0i64;
    let mut refused = None;
    for batch in 0..64i64 {
        let sql = format!(
            "INSERT INTO big SELECT value + {}, repeat('x', 500) FROM generate_series(1, 2000)",
            batch * 2000
        );
        match client.execute(sql.as_str(), &[]).await {
            Ok(n) => written += n as i64,
            Err(e) => {
                refused = Some(e);
                break;
            }
        }
    }
    let error = refused.expect("writes must fail once the disk is nearly full");
    let db_error = error.as_db_error().expect("a server error");
    assert_eq!(db_error.code().code(), "53100", "{db_error}");
    assert!(db_error.message().contains("free space"), "{db_error}");
    // Reads, and other sessions, carry on.
    assert_eq!(count(&client, "SELECT count(*) FROM big").await, written);
    let other = server.connect().await;
    assert_eq!(count(&other, "SELECT count(*) FROM big").await, written);

    drop(filler);
    std::fs::remove_file(&filler_path).expect("free space");
    client
        .execute("INSERT INTO big VALUES (-1, 'after')", &[])
        .await
        .expect("writes succeed once space is freed");
    drop((client, other));
    server.kill();
    server.restart();
    let client = server.connect().await;
    assert_eq!(
        count(&client, "SELECT count(*) FROM big").await,
        written + 1
    );
}

/// A generator resumes from the positions committed with its rows: killed
/// mid-stream, it still writes each of its events exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_generator_source_writes_each_event_once_across_sigkill() {
    let mut server = TestServer::start();
    let client = server.connect().await;
    client
        .batch_execute(
            "CREATE SOURCE bid WITH (connector = 'nexmark', nexmark.table.type = 'Bid', \
             nexmark.event.num = '300000', nexmark.split.num = '2')",
        )
        .await
        .expect("create");
    // Kill it once it is under way, and again right after the restart.
    while count(&client, "SELECT count(*) FROM bid").await == 0 {
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    server.kill();
    server.restart();
    server.kill();
    server.restart();
    let client = server.connect().await;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    while rows(&client, "SHOW SOURCES").await != ["bid|nexmark|finished"] {
        assert!(
            std::time::Instant::now() < deadline,
            "the generator never finished"
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    // 92% of Nexmark events are bids.
    assert_eq!(count(&client, "SELECT count(*) FROM bid").await, 276_000);
    assert_eq!(
        count(&client, "SELECT count(*) FROM (SELECT DISTINCT * FROM bid)").await,
        276_000
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn explain_analyze_counts_each_operators_rows_and_state() {
    let server = TestServer::start();
    let client = server.connect().await;
    client
        .batch_execute(
            "CREATE TABLE t (id BIGINT PRIMARY KEY, k VARCHAR, v BIGINT);
             INSERT INTO t SELECT value, 'k' || (value % 5), value FROM generate_series(1, 1000);
             CREATE MATERIALIZED VIEW per_key AS
               SELECT k, count(*) AS n, sum(v) AS total FROM t WHERE v > 10 GROUP BY k;
             FLUSH;
             UPDATE t SET v = 0 WHERE id = 500;
             FLUSH;",
        )
        .await
        .expect("setup");
    let rows = client
        .simple_query("EXPLAIN (ANALYZE, FORMAT JSON) MATERIALIZED VIEW per_key")
        .await
        .expect("explain");
    let text = rows
        .iter()
        .find_map(|m| match m {
            tokio_postgres::SimpleQueryMessage::Row(row) => row.get(0).map(str::to_string),
            _ => None,
        })
        .expect("one row");
    let plan: serde_json::Value = serde_json::from_str(&text).expect("json");
    let operator = |name: &str| {
        plan["operators"]
            .as_array()
            .expect("operators")
            .iter()
            .find(|op| op["operator"] == name)
            .unwrap_or_else(|| panic!("no {name} in {plan}"))
            .clone()
    };
    // The update is a retraction and an insertion of the same row.
    let filter = operator("Filter");
    assert_eq!(
        (filter["rows_in"].as_u64(), filter["rows_out"].as_u64()),
        (Some(1002), Some(991)),
        "{filter}"
    );
    let aggregate = operator("HashAggregate");
    assert_eq!(aggregate["rows_in"].as_u64(), Some(991), "{aggregate}");
    assert_eq!(aggregate["state_entries"].as_u64(), Some(5), "{aggregate}");
    assert_eq!(plan["sources"][0]["rows"].as_u64(), Some(1002), "{plan}");
    assert!(
        aggregate["time_ms"].as_f64().is_some_and(|t| t > 0.0),
        "{aggregate}"
    );

    let text = lines_of(&client, "EXPLAIN ANALYZE MATERIALIZED VIEW per_key").await;
    assert!(
        text.contains("HashAggregate #2") && text.contains("state entries 5"),
        "{text}"
    );
    let dot = lines_of(
        &client,
        "EXPLAIN (ANALYZE, FORMAT DOT) MATERIALIZED VIEW per_key",
    )
    .await;
    assert!(
        dot.starts_with("digraph dataflow {") && dot.contains("rows in 991, out "),
        "{dot}"
    );
    for (sql, code) in [
        ("EXPLAIN ANALYZE MATERIALIZED VIEW t", "42809"),
        ("EXPLAIN ANALYZE MATERIALIZED VIEW nope", "42P01"),
        ("EXPLAIN (FORMAT YAML) MATERIALIZED VIEW per_key", "0A000"),
    ] {
        let e = client.batch_execute(sql).await.expect_err(sql);
        assert_eq!(e.code().map(|c| c.code()), Some(code), "{sql}: {e}");
    }
}

/// A statement's rows, a line each.
async fn lines_of(client: &tokio_postgres::Client, sql: &str) -> String {
    common::text_rows(client, sql).await.join("\n")
}

/// An index trails its table by the epoch it has not read yet; a read
/// through it applies the table's later changes, so it sees every write.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_through_a_trailing_index_see_every_write() {
    let server = TestServer::start_with(&["--barrier-interval-ms".into(), "3600000".into()]);
    let client = server.connect().await;
    client
        .batch_execute(
            "CREATE TABLE p (id INT PRIMARY KEY, city VARCHAR);
             INSERT INTO p VALUES (1, 'oslo'), (2, 'rome');
             CREATE INDEX p_city ON p (city);
             INSERT INTO p VALUES (3, 'oslo');
             UPDATE p SET city = 'lima' WHERE id = 1;",
        )
        .await
        .expect("setup");
    let plan = rows(&client, "EXPLAIN SELECT id FROM p WHERE city = 'oslo'")
        .await
        .join("\n");
    assert!(plan.contains("IndexScan: index=p_city on p"), "{plan}");
    let trailing = count(
        &client,
        "SELECT count(*) FROM p WHERE city IN ('lima', 'oslo')",
    )
    .await;
    assert_eq!(trailing, 2);
    assert_eq!(
        rows(&client, "SELECT id FROM p WHERE city = 'oslo'").await,
        vec!["3".to_string()]
    );
    assert_eq!(
        rows(&client, "SELECT id FROM p WHERE city = 'lima'").await,
        vec!["1".to_string()]
    );
    client.batch_execute("FLUSH").await.expect("flush");
    assert_eq!(
        rows(&client, "SELECT id FROM p WHERE city = 'oslo'").await,
        vec!["3".to_string()]
    );
}

/// A view whose query holds one subplan twice builds it once; the flag
/// that says so is kept, so a restart rebuilds the same graph and finds
/// the state its operators stored.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_view_that_shares_a_subplan_resumes_after_a_restart() {
    let mut server = TestServer::start();
    let client = server.connect().await;
    client
        .batch_execute(
            "CREATE TABLE t (id INT PRIMARY KEY, grp INT);
             CREATE MATERIALIZED VIEW twice AS
               SELECT grp, count(*) AS n FROM t GROUP BY grp
               UNION ALL SELECT grp, count(*) AS n FROM t GROUP BY grp;
             INSERT INTO t VALUES (1, 1), (2, 1);
             FLUSH;",
        )
        .await
        .expect("setup");
    let client = server.crash(client).await;
    client
        .batch_execute("INSERT INTO t VALUES (3, 1); DELETE FROM t WHERE id = 1; FLUSH;")
        .await
        .expect("writes after restart");
    // Both branches read the one aggregate's state, kept across the restart.
    assert_eq!(
        count(
            &client,
            "SELECT count(*) FROM twice WHERE grp = 1 AND n = 2"
        )
        .await,
        2
    );
}

/// A renamed table is read under its new name by the views that read it,
/// also once they are planned again at a restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn views_of_a_renamed_table_survive_a_restart() {
    let mut server = TestServer::start();
    let client = server.connect().await;
    client
        .batch_execute(
            "CREATE TABLE t (id INT PRIMARY KEY, v INT);
             CREATE MATERIALIZED VIEW s AS SELECT sum(t.v) AS total FROM t;
             CREATE INDEX t_v ON t (v);
             INSERT INTO t VALUES (1, 10);
             ALTER TABLE t RENAME TO items;
             ALTER MATERIALIZED VIEW s RENAME TO sums;
             FLUSH;",
        )
        .await
        .expect("setup");
    let client = server.crash(client).await;
    client
        .batch_execute("INSERT INTO items VALUES (2, 20); FLUSH;")
        .await
        .expect("insert after restart");
    assert_eq!(count(&client, "SELECT total FROM sums").await, 30);
    assert_eq!(
        count(&client, "SELECT id::bigint FROM items WHERE v = 20").await,
        2
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn window_function_numbers_are_bigint_on_the_wire_and_in_the_catalog() {
    let server = TestServer::start();
    let client = server.connect().await;
    let statement = client
        .prepare("SELECT row_number() OVER () AS rn, rank() OVER (ORDER BY 1) AS r")
        .await
        .expect("prepare");
    let types: Vec<_> = statement
        .columns()
        .iter()
        .map(|c| c.type_().clone())
        .collect();
    assert_eq!(types, vec![tokio_postgres::types::Type::INT8; 2]);
    let row = client.query_one(&statement, &[]).await.expect("query");
    assert_eq!((row.get::<_, i64>(0), row.get::<_, i64>(1)), (1, 1));
    client
        .batch_execute(
            "CREATE TABLE ranked_input (a INT, b INT) APPEND ONLY;
             CREATE MATERIALIZED VIEW ranked AS
               SELECT a, row_number() OVER (PARTITION BY a ORDER BY b) AS rn FROM ranked_input",
        )
        .await
        .expect("setup");
    let described = rows(
        &client,
        "SELECT format_type(atttypid, atttypmod) FROM pg_attribute
           WHERE attrelid = 'ranked'::regclass AND attnum = 2",
    )
    .await;
    assert_eq!(described, vec!["bigint".to_string()]);
}
