//! `weir backup` and `weir restore` against real nodes: a backup taken
//! while a node runs and writes, and one of a stopped node, each restored
//! into a fresh data directory and compared relation by relation.

mod common;

use std::path::Path;
use std::process::Command;

use common::{TestServer, text_rows};

const RELATIONS: &[&str] = &["t", "events", "per_key", "per_minute", "joined", "recent"];

async fn setup(client: &tokio_postgres::Client) {
    client
        .batch_execute(
            "CREATE TABLE t (id BIGINT PRIMARY KEY, k VARCHAR, v BIGINT);
             CREATE TABLE events (k VARCHAR, at TIMESTAMP, WATERMARK FOR at AS at) APPEND ONLY;
             CREATE MATERIALIZED VIEW per_key AS SELECT k, count(*) AS n, sum(v) AS total FROM t GROUP BY k;
             CREATE MATERIALIZED VIEW per_minute AS
               SELECT window_start, k, count(*) AS n
               FROM TUMBLE(events, at, INTERVAL '1' MINUTE) GROUP BY window_start, k;
             CREATE MATERIALIZED VIEW joined AS
               SELECT t.id, t.k, p.n FROM t JOIN per_key p ON t.k = p.k;
             CREATE VIEW recent AS SELECT id, v FROM t WHERE v > 10;
             INSERT INTO t SELECT value, 'k' || (value % 5), value FROM generate_series(1, 500);
             UPDATE t SET v = v * 2 WHERE id % 7 = 0;
             DELETE FROM t WHERE id % 11 = 0;
             INSERT INTO events SELECT 'k' || (value % 3),
               TIMESTAMP '2024-01-01 00:00:00' + value * INTERVAL '1' SECOND
               FROM generate_series(1, 400);
             FLUSH;",
        )
        .await
        .expect("setup");
}

/// Every relation's rows, sorted, by relation.
async fn contents(client: &tokio_postgres::Client) -> Vec<(String, Vec<String>)> {
    let mut all = Vec::new();
    for relation in RELATIONS {
        let mut rows = text_rows(client, &format!("SELECT * FROM {relation}")).await;
        rows.sort();
        assert!(!rows.is_empty(), "{relation} is empty");
        all.push((relation.to_string(), rows));
    }
    all
}

/// Run `weir` with these arguments: whether it succeeded, and what it said.
fn weir(args: &[&str], envs: &[(&str, &str)]) -> (bool, String) {
    let output = Command::new(env!("CARGO_BIN_EXE_weir"))
        .args(args)
        .env_remove("WEIR_PASSWORD")
        .envs(envs.iter().copied())
        .output()
        .expect("run weir");
    let text = String::from_utf8_lossy(&output.stdout).into_owned()
        + &String::from_utf8_lossy(&output.stderr);
    (output.status.success(), text)
}

fn run_backup(data: &Path, to: &Path) -> (bool, String) {
    weir(&["backup", "--data-dir", path(data), "--to", path(to)], &[])
}

fn run_restore(from: &Path, data: &Path) -> (bool, String) {
    weir(
        &["restore", "--from", path(from), "--data-dir", path(data)],
        &[],
    )
}

fn path(p: &Path) -> &str {
    p.to_str().expect("a UTF-8 path")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backup_of_a_running_node_restores_every_relation() {
    let dirs = tempfile::tempdir().expect("temp dir");
    let (data, backup, restored) = (
        dirs.path().join("data"),
        dirs.path().join("backup"),
        dirs.path().join("restored"),
    );
    let source = TestServer::start_in(data.clone(), &[]);
    let client = source.connect().await;
    setup(&client).await;
    let before = contents(&client).await;

    let (ok, said) = run_backup(&data, &backup);
    assert!(ok && said.contains("backed up"), "{said}");
    // A second backup while another session writes: wherever its cut
    // falls, every view of the copy agrees with the copy's table.
    let writer = source.connect().await;
    let writing = tokio::spawn(async move {
        for id in 10_000..10_400 {
            writer
                .batch_execute(&format!("INSERT INTO t VALUES ({id}, 'w{}', {id})", id % 4))
                .await
                .expect("a write during the backup");
        }
    });
    let during = dirs.path().join("during");
    let (ok, said) = run_backup(&data, &during);
    assert!(ok, "{said}");
    writing.await.expect("the writer");
    // What the node does after the backup is not in it.
    client
        .batch_execute("INSERT INTO t VALUES (1000, 'k0', 1); FLUSH")
        .await
        .expect("a later write");

    let (ok, said) = run_restore(&backup, &restored);
    assert!(ok && said.contains("restored"), "{said}");
    let copy = TestServer::start_in(restored.clone(), &[]);
    let restored_client = copy.connect().await;
    assert_eq!(contents(&restored_client).await, before);

    // The restored views go on from where they were.
    restored_client
        .batch_execute("INSERT INTO t VALUES (2000, 'k9', 5); FLUSH")
        .await
        .expect("write to the copy");
    assert_eq!(
        text_rows(
            &restored_client,
            "SELECT n, total FROM per_key WHERE k = 'k9'"
        )
        .await,
        ["1|5"]
    );

    let copy_during = dirs.path().join("copy-during");
    let (ok, said) = run_restore(&during, &copy_during);
    assert!(ok, "{said}");
    let cut = TestServer::start_in(copy_during, &[]);
    let cut_client = cut.connect().await;
    cut_client.batch_execute("FLUSH").await.expect("flush");
    let recount = "SELECT k, count(*), sum(v) FROM t GROUP BY k ORDER BY k";
    assert_eq!(
        text_rows(&cut_client, "SELECT k, n, total FROM per_key ORDER BY k").await,
        text_rows(&cut_client, recount).await
    );

    // Nothing is overwritten: not a backup, not a data directory.
    let (ok, said) = run_backup(&data, &backup);
    assert!(!ok && said.contains("not empty"), "{said}");
    let (ok, said) = run_restore(&backup, &restored);
    assert!(!ok && said.contains("not empty"), "{said}");
    let (ok, said) = run_restore(&data, &dirs.path().join("x"));
    assert!(!ok && said.contains("is not a weir backup"), "{said}");
    let (ok, said) = run_backup(&dirs.path().join("none"), &dirs.path().join("y"));
    assert!(
        !ok && said.contains("holds no weir data directory"),
        "{said}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_node_is_backed_up_from_its_files() {
    let dirs = tempfile::tempdir().expect("temp dir");
    let (data, backup, restored) = (
        dirs.path().join("data"),
        dirs.path().join("backup"),
        dirs.path().join("restored"),
    );
    let mut source = TestServer::start_in(data.clone(), &[]);
    let client = source.connect().await;
    setup(&client).await;
    let before = contents(&client).await;
    drop(client);
    assert!(source.terminate(), "a clean stop");
    assert!(
        !data.join("weir.pid").exists(),
        "the node file goes with the node"
    );

    let (ok, said) = run_backup(&data, &backup);
    assert!(ok, "{said}");
    let (ok, said) = run_restore(&backup, &restored);
    assert!(ok, "{said}");
    let copy = TestServer::start_in(restored, &[]);
    assert_eq!(contents(&copy.connect().await).await, before);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn backup_to_is_for_superusers_and_absolute_paths() {
    let dirs = tempfile::tempdir().expect("temp dir");
    let server = TestServer::start_with_env(&[], &[("WEIR_PASSWORD", "admin-pw")]);
    let config = |user: &str, password: &str| {
        format!(
            "host=127.0.0.1 port={} user={user} password={password} dbname=weir",
            server.port
        )
    };
    let (admin, connection) =
        tokio_postgres::connect(&config("weir", "admin-pw"), tokio_postgres::NoTls)
            .await
            .expect("admin");
    tokio::spawn(connection);
    admin
        .batch_execute("CREATE USER ann PASSWORD 'ann-pw'")
        .await
        .expect("a role");
    let (ann, connection) =
        tokio_postgres::connect(&config("ann", "ann-pw"), tokio_postgres::NoTls)
            .await
            .expect("ann");
    tokio::spawn(connection);
    let target = dirs.path().join("b");
    let sql = format!("BACKUP TO '{}'", path(&target));
    let code = |e: tokio_postgres::Error| e.code().map(|c| c.code().to_string());
    assert_eq!(
        code(ann.batch_execute(&sql).await.expect_err("ann")).as_deref(),
        Some("42501")
    );
    assert_eq!(
        code(
            admin
                .batch_execute("BACKUP TO 'relative/dir'")
                .await
                .expect_err("relative")
        )
        .as_deref(),
        Some("22023")
    );
    assert_eq!(
        code(
            admin
                .batch_execute(&format!("BEGIN; {sql}"))
                .await
                .expect_err("in a transaction")
        )
        .as_deref(),
        Some("25001")
    );
    admin.batch_execute("ROLLBACK").await.expect("rollback");
    admin
        .batch_execute(&sql)
        .await
        .expect("the superuser backs up");
    assert!(target.join("weir-backup.json").is_file());
    assert_eq!(
        code(admin.batch_execute(&sql).await.expect_err("not empty")).as_deref(),
        Some("58P02")
    );
    // The command reaches a node with a password through WEIR_PASSWORD.
    let (ok, said) = weir(
        &[
            "backup",
            "--data-dir",
            path(server.data_dir()),
            "--to",
            path(&dirs.path().join("c")),
        ],
        &[("WEIR_PASSWORD", "admin-pw")],
    );
    assert!(ok, "{said}");
    let (ok, said) = weir(
        &[
            "backup",
            "--data-dir",
            path(server.data_dir()),
            "--to",
            path(&dirs.path().join("d")),
        ],
        &[("WEIR_PASSWORD", "wrong")],
    );
    assert!(
        !ok && said.contains("password authentication failed"),
        "{said}"
    );
}
