//! COPY FROM STDIN of data many parts long, against a real server: it
//! lands once, atomically, and a COPY that fails, is cancelled, loses its
//! client or its server leaves nothing behind.

mod common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use bytes::Bytes;
use common::TestServer;
use futures::SinkExt;

/// Rows in the large COPYs: about 25 MB of text, several parts' worth.
const ROWS: i64 = 300_000;

async fn count(client: &tokio_postgres::Client, sql: &str) -> i64 {
    client
        .query_one(sql, &[])
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"))
        .get(0)
}

/// Text lines `id\tname` for ids in `range`, about 85 bytes each.
fn lines(range: std::ops::Range<i64>) -> String {
    range
        .map(|i| format!("{i}\tname_{i:020}_{:0>50}\n", i % 97))
        .collect()
}

/// Send `data` as COPY data messages of 64 KiB.
async fn send_all(
    sink: &mut std::pin::Pin<&mut tokio_postgres::CopyInSink<Bytes>>,
    data: &str,
) -> Result<(), tokio_postgres::Error> {
    for piece in data.as_bytes().chunks(64 << 10) {
        sink.send(Bytes::copy_from_slice(piece)).await?;
    }
    Ok(())
}

async fn copy_in(
    client: &tokio_postgres::Client,
    sql: &str,
    data: &str,
) -> Result<u64, tokio_postgres::Error> {
    let sink = client.copy_in(sql).await?;
    futures::pin_mut!(sink);
    send_all(&mut sink, data).await?;
    sink.finish().await
}

/// Staging directories a COPY left in the data directory.
fn staged(dir: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(dir) = pending.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            if !path.is_dir() {
                continue;
            }
            if path.file_name().is_some_and(|n| n == "copy") {
                found.extend(
                    std::fs::read_dir(&path)
                        .into_iter()
                        .flatten()
                        .flatten()
                        .map(|e| e.path()),
                );
            } else {
                pending.push(path);
            }
        }
    }
    found
}

/// Whether every stage is gone within a few seconds: an abandoned COPY's
/// loader stops at its next part.
async fn no_stage_left(dir: &Path) -> bool {
    for _ in 0..100 {
        if staged(dir).is_empty() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    false
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_copy_of_many_parts_lands_once_and_a_view_sees_all_of_it() {
    let server = TestServer::start();
    let client = server.connect().await;
    for (table, kind) in [
        ("keyed", "(id BIGINT PRIMARY KEY, name VARCHAR)"),
        ("unkeyed", "(id BIGINT, name VARCHAR)"),
        ("appended", "(id BIGINT, name VARCHAR) APPEND ONLY"),
    ] {
        client
            .batch_execute(&format!(
                "CREATE TABLE {table} {kind};
                 CREATE MATERIALIZED VIEW {table}_total AS
                   SELECT count(*) AS n, sum(id) AS s, count(DISTINCT id) AS d FROM {table};"
            ))
            .await
            .expect("create");
        let copied = copy_in(
            &client,
            &format!("COPY {table} FROM STDIN"),
            &lines(0..ROWS),
        )
        .await
        .expect("copy");
        assert_eq!(copied, ROWS as u64, "{table}");
        client.batch_execute("FLUSH").await.expect("flush");
        let sum = ROWS * (ROWS - 1) / 2;
        let row = client
            .query_one(
                &format!("SELECT count(*), sum(id), count(DISTINCT id) FROM {table}"),
                &[],
            )
            .await
            .expect("select");
        let seen: (i64, i64, i64) = (row.get(0), row.get::<_, i64>(1), row.get(2));
        assert_eq!(seen, (ROWS, sum, ROWS), "{table}");
        let row = client
            .query_one(&format!("SELECT n, s, d FROM {table}_total"), &[])
            .await
            .expect("view");
        let viewed: (i64, i64, i64) = (row.get(0), row.get::<_, i64>(1), row.get(2));
        assert_eq!(viewed, (ROWS, sum, ROWS), "the view over {table}");
    }
    // Later writes take offsets after the load's.
    client
        .batch_execute(
            "INSERT INTO keyed VALUES (-1, 'x'); INSERT INTO appended VALUES (-1, 'x'); FLUSH",
        )
        .await
        .expect("insert after");
    assert_eq!(count(&client, "SELECT n FROM keyed_total").await, ROWS + 1);
    assert_eq!(
        count(&client, "SELECT n FROM appended_total").await,
        ROWS + 1
    );
    assert!(staged(server.data_dir()).is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_row_far_into_the_data_fails_the_copy_and_leaves_the_table_unchanged() {
    let server = TestServer::start();
    let client = server.connect().await;
    client
        .batch_execute("CREATE TABLE t (id BIGINT PRIMARY KEY, name VARCHAR); INSERT INTO t VALUES (-1, 'kept')")
        .await
        .expect("create");
    let bad = format!(
        "{}notanumber\tx\n{}",
        lines(0..250_000),
        lines(250_000..ROWS)
    );
    let err = copy_in(&client, "COPY t FROM STDIN", &bad)
        .await
        .expect_err("bad value");
    let err = err.as_db_error().expect("a database error");
    assert_eq!(err.code().code(), "22P02");
    assert!(err.message().contains("line 250001"), "{}", err.message());
    assert_eq!(count(&client, "SELECT count(*) FROM t").await, 1);

    // A key repeated in a later part rejects the whole COPY too.
    let dup = format!("{}{}", lines(0..ROWS), lines(7..8));
    let err = copy_in(&client, "COPY t FROM STDIN", &dup)
        .await
        .expect_err("duplicate");
    assert_eq!(err.code().map(|c| c.code()), Some("23505"));
    // And so does one the table holds already.
    let dup = format!("{}{}", lines(0..ROWS), lines(-1..0));
    let err = copy_in(&client, "COPY t FROM STDIN", &dup)
        .await
        .expect_err("duplicate of a stored row");
    assert_eq!(err.code().map(|c| c.code()), Some("23505"));

    // The session is usable, and nothing was left behind.
    assert_eq!(count(&client, "SELECT count(*) FROM t").await, 1);
    client
        .execute("INSERT INTO t VALUES (1, 'one')", &[])
        .await
        .expect("insert after");
    assert_eq!(count(&client, "SELECT count(*) FROM t").await, 2);
    assert!(staged(server.data_dir()).is_empty());
}

/// The parts of a large COPY are parsed side by side and staged in data
/// order: the header is skipped once, a line `\.` several parts in ends
/// the data, and an error names its line in the whole data.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_csv_copy_of_many_parts_keeps_its_header_end_and_line_numbers() {
    let server = TestServer::start();
    let client = server.connect().await;
    client
        .batch_execute("CREATE TABLE t (id BIGINT, name VARCHAR) APPEND ONLY")
        .await
        .expect("create");
    let csv = |range| lines(range).replace('\t', ",");
    let sql = "COPY t FROM STDIN (FORMAT csv, HEADER)";
    let ended = format!("id,name\n{}\\.\n{}", csv(0..200_000), csv(200_000..ROWS));
    assert_eq!(copy_in(&client, sql, &ended).await.expect("copy"), 200_000);
    assert_eq!(count(&client, "SELECT max(id) FROM t").await, 199_999);

    let bad = format!("id,name\n{}x,y\n{}", csv(0..250_000), csv(250_000..ROWS));
    let err = copy_in(&client, sql, &bad).await.expect_err("bad value");
    let err = err.as_db_error().expect("a database error");
    assert_eq!(err.code().code(), "22P02");
    assert!(err.message().contains("line 250002"), "{}", err.message());
    assert_eq!(count(&client, "SELECT count(*) FROM t").await, 200_000);
    assert!(staged(server.data_dir()).is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_copy_fail_leaves_nothing() {
    let server = TestServer::start();
    let client = server.connect().await;
    client
        .batch_execute("CREATE TABLE t (id BIGINT PRIMARY KEY, name VARCHAR)")
        .await
        .expect("create");
    {
        let sink = client
            .copy_in::<_, Bytes>("COPY t FROM STDIN")
            .await
            .expect("copy");
        futures::pin_mut!(sink);
        send_all(&mut sink, &lines(0..ROWS)).await.expect("send");
        // Dropped without finishing: the client sends CopyFail.
    }
    assert_eq!(count(&client, "SELECT count(*) FROM t").await, 0);
    client
        .execute("INSERT INTO t VALUES (1, 'one')", &[])
        .await
        .expect("insert after");
    assert!(no_stage_left(server.data_dir()).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_vanishes_mid_copy_leaves_nothing() {
    let server = TestServer::start();
    let client = server.connect().await;
    client
        .batch_execute("CREATE TABLE t (id BIGINT PRIMARY KEY, name VARCHAR)")
        .await
        .expect("create");
    let (other, connection) =
        tokio_postgres::connect(&server.connection_string(), tokio_postgres::NoTls)
            .await
            .expect("connect");
    let connection = tokio::spawn(connection);
    {
        let sink = other
            .copy_in::<_, Bytes>("COPY t FROM STDIN")
            .await
            .expect("copy");
        futures::pin_mut!(sink);
        send_all(&mut sink, &lines(0..ROWS)).await.expect("send");
        // The socket closes with no CopyDone or CopyFail.
        connection.abort();
        let _ = connection.await;
    }
    drop(other);
    // Nothing was committed, whenever the server notices the client left.
    assert_eq!(count(&client, "SELECT count(*) FROM t").await, 0);
    client
        .execute("INSERT INTO t VALUES (1, 'one')", &[])
        .await
        .expect("server still up");
    assert!(no_stage_left(server.data_dir()).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_killed_mid_copy_restarts_without_any_of_it() {
    let mut server = TestServer::start();
    let client = server.connect().await;
    client
        .batch_execute(
            "CREATE TABLE t (id BIGINT PRIMARY KEY, name VARCHAR);
             INSERT INTO t VALUES (-1, 'kept')",
        )
        .await
        .expect("create");
    {
        let sink = client
            .copy_in::<_, Bytes>("COPY t FROM STDIN")
            .await
            .expect("copy");
        futures::pin_mut!(sink);
        send_all(&mut sink, &lines(0..ROWS)).await.expect("send");
        // Let the parts be staged on disk before the kill.
        tokio::time::sleep(Duration::from_millis(1000)).await;
        assert!(!staged(server.data_dir()).is_empty(), "a stage on disk");
        server.kill();
    }
    drop(client);
    server.restart();
    let client = server.connect().await;
    assert_eq!(count(&client, "SELECT count(*) FROM t").await, 1);
    assert!(
        staged(server.data_dir()).is_empty(),
        "the stage was removed"
    );
    let copied = copy_in(&client, "COPY t FROM STDIN", &lines(0..ROWS))
        .await
        .expect("copy after restart");
    assert_eq!(copied, ROWS as u64);
    client
        .execute("INSERT INTO t VALUES (-2, 'after')", &[])
        .await
        .expect("insert after restart");
    assert_eq!(count(&client, "SELECT count(*) FROM t").await, ROWS + 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_concurrent_reader_sees_none_or_all_of_a_copy() {
    let server = TestServer::start();
    let client = server.connect().await;
    client
        .batch_execute("CREATE TABLE t (id BIGINT PRIMARY KEY, name VARCHAR)")
        .await
        .expect("create");
    let reader = server.connect().await;
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let watching = {
        let done = done.clone();
        tokio::spawn(async move {
            let mut seen = std::collections::BTreeSet::new();
            while !done.load(std::sync::atomic::Ordering::Acquire) {
                seen.insert(count(&reader, "SELECT count(*) FROM t").await);
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            seen.insert(count(&reader, "SELECT count(*) FROM t").await);
            seen
        })
    };
    let copied = copy_in(&client, "COPY t FROM STDIN", &lines(0..ROWS))
        .await
        .expect("copy");
    assert_eq!(copied, ROWS as u64);
    done.store(true, std::sync::atomic::Ordering::Release);
    let seen = watching.await.expect("reader");
    assert!(seen.iter().all(|n| *n == 0 || *n == ROWS), "{seen:?}");
    assert!(seen.contains(&ROWS), "{seen:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_large_insert_select_is_staged_and_lands_whole() {
    let server = TestServer::start();
    let client = server.connect().await;
    client
        .batch_execute(
            "CREATE TABLE t (id BIGINT PRIMARY KEY, name VARCHAR);
             CREATE MATERIALIZED VIEW n AS SELECT count(*) AS c FROM t;
             INSERT INTO t VALUES (-1, 'kept')",
        )
        .await
        .expect("setup");
    // About 30 MB of rows: several staged parts.
    let insert = format!(
        "INSERT INTO t SELECT value, repeat('x', 80) || value FROM generate_series(1, {ROWS})"
    );
    client.batch_execute(&insert).await.expect("insert");
    client.batch_execute("FLUSH").await.expect("flush");
    assert_eq!(count(&client, "SELECT count(*) FROM t").await, ROWS + 1);
    assert_eq!(count(&client, "SELECT c FROM n").await, ROWS + 1);
    // A key the last part repeats fails the whole statement.
    let again = format!(
        "INSERT INTO t SELECT value + {ROWS}, repeat('y', 80) FROM generate_series(1, {ROWS}) \
         UNION ALL SELECT 5, 'dup'"
    );
    let e = client
        .batch_execute(&again)
        .await
        .expect_err("duplicate key");
    assert_eq!(e.code().map(|c| c.code()), Some("23505"), "{e}");
    assert_eq!(count(&client, "SELECT count(*) FROM t").await, ROWS + 1);
    assert!(staged(server.data_dir()).is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn statement_timeout_covers_a_copys_data() {
    let server = TestServer::start();
    let client = server.connect().await;
    client
        .batch_execute(
            "CREATE TABLE t (id BIGINT PRIMARY KEY, name VARCHAR); SET statement_timeout = '300ms'",
        )
        .await
        .expect("setup");
    let sink = client
        .copy_in::<_, Bytes>("COPY t FROM STDIN")
        .await
        .expect("copy");
    futures::pin_mut!(sink);
    send_all(&mut sink, &lines(0..1000)).await.expect("send");
    // Wall time is the point: a client that takes longer than the timeout.
    tokio::time::sleep(Duration::from_millis(600)).await;
    let sent = send_all(&mut sink, &lines(1000..2000)).await;
    let e = match sent {
        Err(e) => e,
        Ok(()) => sink.finish().await.expect_err("timed out"),
    };
    assert_eq!(e.code().map(|c| c.code()), Some("57014"), "{e}");
    assert_eq!(count(&client, "SELECT count(*) FROM t").await, 0);
}

/// A timestamp as COPY may meet it: in the canonical shape, with fractions
/// of one to six digits, and in one batch's worth of rows also in another
/// shape the general parser reads (the rest take the fast path).
fn timestamp_text(i: i64) -> String {
    let (h, m, s) = (i / 3600 % 24, i / 60 % 60, i % 60);
    match i % 5 {
        _ if (100_000..100_005).contains(&i) => format!("2024-03-01T{h:02}:{m:02}:{s:02}"),
        0 => format!("2024-03-01 {h:02}:{m:02}:{s:02}"),
        1 => format!("2024-02-29 {h:02}:{m:02}:{s:02}.{}", i % 10),
        2 => format!("1999-12-31 {h:02}:{m:02}:{s:02}.{:03}", i % 1000),
        _ => format!("2262-04-11 {h:02}:{m:02}:{s:02}.{:06}", i % 1_000_000),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn timestamps_of_every_shape_load_as_casts_read_them() {
    let server = TestServer::start();
    let client = server.connect().await;
    client
        .batch_execute(
            "CREATE TABLE ts (id BIGINT, at TIMESTAMP, \
               WATERMARK FOR at AS at - INTERVAL '1' SECOND) APPEND ONLY;
             CREATE TABLE texts (id BIGINT PRIMARY KEY, txt VARCHAR)",
        )
        .await
        .expect("create");
    // Early in 2262 only: later hours are past what TIMESTAMP holds.
    let data: String = (0..ROWS)
        .map(|i| format!("{i}\t{}\n", timestamp_text(i).replace("23:", "22:")))
        .collect();
    for table in ["ts", "texts"] {
        let copied = copy_in(&client, &format!("COPY {table} FROM STDIN"), &data)
            .await
            .expect("copy");
        assert_eq!(copied, ROWS as u64);
    }
    let differ = "SELECT count(*) FROM ts JOIN texts USING (id) \
                  WHERE ts.at IS DISTINCT FROM CAST(texts.txt AS TIMESTAMP)";
    assert_eq!(count(&client, differ).await, 0);
    assert_eq!(count(&client, "SELECT count(*) FROM ts").await, ROWS);

    let bad = format!("{}{}\t2024-02-30 00:00:00\n", &data, ROWS);
    let err = copy_in(&client, "COPY ts FROM STDIN", &bad)
        .await
        .expect_err("no 30th of February");
    let message = err
        .as_db_error()
        .expect("a database error")
        .message()
        .to_string();
    assert!(message.contains(&format!("line {}", ROWS + 1)), "{message}");
    assert_eq!(count(&client, "SELECT count(*) FROM ts").await, ROWS);
}
