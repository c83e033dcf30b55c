//! Input that used to take the node down: statements too deep for a
//! thread's stack, and views whose expressions fail on a row. After each,
//! the node answers and other sessions see no change.

mod common;

use common::TestServer;

fn code(e: &tokio_postgres::Error) -> String {
    e.code().map(|c| c.code().to_string()).unwrap_or_default()
}

async fn one(client: &tokio_postgres::Client) -> i64 {
    client
        .query_one("SELECT 1", &[])
        .await
        .expect("the session still answers")
        .get(0)
}

fn chain(operator: &str, terms: usize) -> String {
    vec!["1"; terms].join(operator)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn statements_too_deep_are_refused_with_54001() {
    let server = TestServer::start();
    let bystander = server.connect().await;
    bystander
        .batch_execute("CREATE TABLE kept (a INT); INSERT INTO kept VALUES (1)")
        .await
        .expect("setup");
    let client = server.connect().await;
    let deep = [
        format!("SELECT {}", chain(" + ", 20_000)),
        format!("SELECT {}", chain(" + ", 1_001)),
        format!("SELECT 1 WHERE {}", chain(" = 1 OR ", 50_000)),
        format!("SELECT {}1{}", "(".repeat(5_000), ")".repeat(5_000)),
        format!("SELECT 1{}", " IS DISTINCT FROM 1".repeat(20_000)),
    ];
    for sql in &deep {
        let e = client.simple_query(sql).await.expect_err("too deep");
        assert_eq!(code(&e), "54001", "{e}");
        let e = client.prepare(sql).await.expect_err("too deep, prepared");
        assert_eq!(code(&e), "54001", "{e}");
        assert_eq!(one(&client).await, 1);
    }
    // As deep as weir allows, also inside a view, whose expressions run
    // on the dataflow's threads.
    let longest = format!("SELECT {} AS n", chain(" + ", 998));
    let row = client
        .query_one(&longest, &[])
        .await
        .expect("the longest chain");
    assert_eq!(row.get::<_, i64>(0), 998);
    let terms: Vec<String> = (0..498).map(|i| format!("a = {i}")).collect();
    let or = format!("SELECT a FROM kept WHERE {}", terms.join(" OR "));
    let row = client.query_one(&or, &[]).await.expect("a long OR");
    assert_eq!(row.get::<_, i32>(0), 1);
    client
        .batch_execute(&format!("CREATE MATERIALIZED VIEW deep AS {or}; FLUSH"))
        .await
        .expect("a view with a long OR");
    let e = client
        .simple_query(&format!(
            "CREATE MATERIALIZED VIEW deeper AS {or} OR a = 500 OR a = 501"
        ))
        .await
        .expect_err("one term too many");
    assert_eq!(code(&e), "54001", "{e}");
    let kept: i64 = bystander
        .query_one("SELECT count(*) FROM kept", &[])
        .await
        .expect("the other session")
        .get(0);
    assert_eq!(kept, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_view_holds_back_no_other_session() {
    let server = TestServer::start();
    let owner = server.connect().await;
    owner
        .batch_execute(
            "CREATE TABLE t (a BIGINT, b BIGINT);
             CREATE MATERIALIZED VIEW strict WITH (on_error = 'fail') AS SELECT a / b AS q FROM t;
             CREATE MATERIALIZED VIEW lenient AS SELECT a / b AS q FROM t;",
        )
        .await
        .expect("setup");
    let other = server.connect().await;
    other
        .batch_execute(
            "CREATE TABLE u (x INT); CREATE MATERIALIZED VIEW n AS SELECT count(*) AS c FROM u",
        )
        .await
        .expect("other setup");
    owner
        .batch_execute("INSERT INTO t VALUES (1, 0), (4, 2); FLUSH")
        .await
        .expect("a failing row, then FLUSH");
    other
        .batch_execute("INSERT INTO u VALUES (1), (2); FLUSH")
        .await
        .expect("the other session's FLUSH");
    let c: i64 = other
        .query_one("SELECT c FROM n", &[])
        .await
        .expect("the other view")
        .get(0);
    assert_eq!(c, 2);
    let e = owner
        .query("SELECT * FROM strict", &[])
        .await
        .expect_err("the failed view answers with its error");
    assert_eq!(code(&e), "22012", "{e}");
    let rows = owner
        .query("SELECT q FROM lenient ORDER BY q NULLS FIRST", &[])
        .await
        .expect("the lenient view");
    let values: Vec<Option<i64>> = rows.iter().map(|r| r.get(0)).collect();
    assert_eq!(values, vec![None, Some(2)]);
    assert_eq!(server.metric("weir_view_errors_total").await, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn statement_timeout_and_cancel_stop_a_running_statement() {
    let server = TestServer::start();
    let client = server.connect().await;
    client
        .batch_execute("CREATE TABLE t (a BIGINT); SET statement_timeout = '300ms'")
        .await
        .expect("setup");
    // Each runs for minutes unless stopped.
    let long = "SELECT count(*) FROM generate_series(1, 100000000000)";
    let long_insert = "INSERT INTO t SELECT value FROM generate_series(1, 100000000000)";
    for sql in [long, long_insert] {
        let e = client.simple_query(sql).await.expect_err("times out");
        assert_eq!(code(&e), "57014", "{e}");
        let message = e.as_db_error().map(|d| d.message().to_string());
        assert!(
            message.is_some_and(|m| m.contains("statement timeout")),
            "{e:?}"
        );
        assert_eq!(one(&client).await, 1);
    }
    let rows: i64 = client
        .query_one("SELECT count(*) FROM t", &[])
        .await
        .expect("count")
        .get(0);
    assert_eq!(rows, 0, "a stopped INSERT writes nothing");
    let e = client
        .batch_execute("SET statement_timeout = 'soon'")
        .await
        .expect_err("not a duration");
    assert_eq!(code(&e), "22023", "{e}");
    client
        .batch_execute("SET statement_timeout = 0")
        .await
        .expect("off again");
    let token = client.cancel_token();
    let cancel = tokio::spawn(async move {
        tokio::time::sleep(std::time::Duration::from_millis(300)).await;
        token.cancel_query(tokio_postgres::NoTls).await
    });
    let e = client.simple_query(long).await.expect_err("cancelled");
    assert_eq!(code(&e), "57014", "{e}");
    cancel.await.expect("task").expect("cancel request");
    assert_eq!(one(&client).await, 1);
}

/// Flip bytes in the data blocks of every large table file, where rows (a
/// keyed table's column family) and log chunks (a stream's) live.
fn damage_large_table_files(db: &std::path::Path) -> usize {
    let mut damaged = 0;
    for file in std::fs::read_dir(db).expect("data directory").flatten() {
        let path = file.path();
        let size = std::fs::metadata(&path).map_or(0, |m| m.len());
        if path.extension().is_none_or(|e| e != "sst") || size < 1 << 20 {
            continue;
        }
        let mut bytes = std::fs::read(&path).expect("read");
        // A third in and three quarters in: the log family holds both
        // relations' chunks, one after the other.
        for at in [bytes.len() / 3, bytes.len() * 3 / 4] {
            for byte in &mut bytes[at..at + 64] {
                *byte ^= 0x5a;
            }
        }
        std::fs::write(&path, bytes).expect("write");
        damaged += 1;
    }
    damaged
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_damaged_table_file_is_refused_with_xx001() {
    let mut server = TestServer::start();
    let client = server.connect().await;
    client
        .batch_execute(
            "CREATE TABLE t (id BIGINT PRIMARY KEY, pad VARCHAR);
             CREATE STREAM s (id BIGINT, pad VARCHAR);
             INSERT INTO t SELECT value, repeat('x', 200) || value FROM generate_series(1, 20000);
             INSERT INTO s SELECT value, repeat('y', 200) || value FROM generate_series(1, 20000);",
        )
        .await
        .expect("setup");
    client.batch_execute("VACUUM").await.expect("vacuum");
    drop(client);
    assert!(server.terminate(), "clean stop");
    assert!(damage_large_table_files(&server.data_dir().join("db")) >= 2);
    server.restart();
    let client = server.connect().await;
    for relation in ["t", "s"] {
        let e = client
            .query(&format!("SELECT count(*), max(pad) FROM {relation}"), &[])
            .await
            .expect_err(&format!("{relation}: no wrong rows served silently"));
        assert_eq!(code(&e), "XX001", "{relation}: {e:?}");
    }
    assert_eq!(one(&client).await, 1);
    client
        .batch_execute("CREATE TABLE fresh (a INT); INSERT INTO fresh VALUES (1)")
        .await
        .expect("the node goes on");
    let n: i64 = client
        .query_one("SELECT count(*) FROM fresh", &[])
        .await
        .expect("fresh table")
        .get(0);
    assert_eq!(n, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_idle_in_a_transaction_is_ended() {
    let server = TestServer::start();
    let idle = server.connect().await;
    let outside = server.connect().await;
    for client in [&idle, &outside] {
        client
            .batch_execute("SET idle_in_transaction_session_timeout = '200ms'")
            .await
            .expect("set");
    }
    idle.batch_execute("BEGIN").await.expect("begin");
    // Wall time is the point: the limit is on the client's silence.
    tokio::time::sleep(std::time::Duration::from_millis(800)).await;
    assert!(idle.simple_query("SELECT 1").await.is_err());
    assert!(idle.is_closed(), "the idle session was ended");
    assert_eq!(
        one(&outside).await,
        1,
        "outside a transaction the limit does not apply"
    );
    let e = outside
        .batch_execute("SET idle_in_transaction_session_timeout = 'later'")
        .await
        .expect_err("not a duration");
    assert_eq!(code(&e), "22023", "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_view_whose_create_times_out_leaves_nothing() {
    let server = TestServer::start();
    let client = server.connect().await;
    client
        .batch_execute(
            "CREATE TABLE t (k BIGINT, v BIGINT);
             INSERT INTO t SELECT value % 1000, value FROM generate_series(1, 300000);
             SET statement_timeout = '20ms'",
        )
        .await
        .expect("setup");
    let create =
        "CREATE MATERIALIZED VIEW v AS SELECT k, count(*) AS n, sum(v) AS s FROM t GROUP BY k";
    let e = client.batch_execute(create).await.expect_err("times out");
    assert_eq!(code(&e), "57014", "{e}");
    client
        .batch_execute("SET statement_timeout = 0")
        .await
        .expect("reset");
    // The unfinished view is removed in the background once its statement is dropped.
    let mut gone = false;
    for _ in 0..250 {
        let listed = common::text_rows(&client, "SHOW MATERIALIZED VIEWS").await;
        if listed.is_empty() {
            gone = true;
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    assert!(gone, "the view was removed");
    client
        .batch_execute(create)
        .await
        .expect("the name is free again");
    let n: i64 = client
        .query_one("SELECT sum(n) FROM v", &[])
        .await
        .expect("the view")
        .get(0);
    assert_eq!(n, 300_000);
}
