//! Owners, GRANT and REVOKE, against a real server with a password.

mod common;

use common::TestServer;

const PASSWORD: &str = "admin-pw";

async fn login(port: u16, user: &str, password: &str) -> tokio_postgres::Client {
    let config =
        format!("host=127.0.0.1 port={port} user={user} password='{password}' dbname=weir");
    let (client, connection) = tokio_postgres::connect(&config, tokio_postgres::NoTls)
        .await
        .unwrap_or_else(|e| panic!("{user} logs in: {e}"));
    tokio::spawn(connection);
    client
}

/// The SQLSTATE and message a statement fails with.
async fn denied(client: &tokio_postgres::Client, sql: &str) -> (String, String) {
    let e = client
        .batch_execute(sql)
        .await
        .err()
        .unwrap_or_else(|| panic!("{sql} should fail"));
    let db = e.as_db_error().unwrap_or_else(|| panic!("{sql}: {e}"));
    (db.code().code().to_string(), db.message().to_string())
}

fn refusal(message: &str) -> (String, String) {
    ("42501".to_string(), message.to_string())
}

#[tokio::test]
async fn a_role_reads_and_writes_what_it_was_granted_and_no_more() {
    let server = TestServer::start_with_env(&[], &[("WEIR_PASSWORD", PASSWORD)]);
    let admin = login(server.port, "weir", PASSWORD).await;
    admin
        .batch_execute(
            "CREATE TABLE t (id BIGINT PRIMARY KEY, v BIGINT);
             INSERT INTO t VALUES (1, 10), (2, 20);
             CREATE MATERIALIZED VIEW mv AS SELECT count(*) AS n FROM t;
             CREATE VIEW lv AS SELECT id FROM t;
             CREATE USER alice PASSWORD 'alice-pw';
             FLUSH",
        )
        .await
        .expect("setup");
    let alice = login(server.port, "alice", "alice-pw").await;

    let table = refusal("permission denied for table t");
    assert_eq!(denied(&alice, "SELECT * FROM t").await, table);
    assert_eq!(denied(&alice, "INSERT INTO t VALUES (3, 30)").await, table);
    assert_eq!(denied(&alice, "UPDATE t SET v = 0").await, table);
    assert_eq!(denied(&alice, "DELETE FROM t").await, table);
    assert_eq!(denied(&alice, "COPY t FROM STDIN").await, table);
    assert_eq!(denied(&alice, "COPY t TO STDOUT").await, table);
    assert_eq!(
        denied(&alice, "SELECT * FROM lv").await,
        refusal("permission denied for view lv")
    );
    let mv = refusal("permission denied for materialized view mv");
    assert_eq!(denied(&alice, "COPY (SUBSCRIBE mv) TO STDOUT").await, mv);
    assert_eq!(
        denied(&alice, "BEGIN; DECLARE c CURSOR FOR SUBSCRIBE mv").await,
        mv
    );
    alice.batch_execute("ROLLBACK").await.expect("rollback");
    // As in PostgreSQL 15, creating needs CREATE on schema public.
    let schema = refusal("permission denied for schema public");
    assert_eq!(
        denied(&alice, "CREATE TABLE notes (n BIGINT)").await,
        schema
    );
    assert_eq!(
        denied(&alice, "CREATE VIEW mine AS SELECT 1 AS one").await,
        schema
    );
    assert_eq!(
        denied(&alice, "GRANT CREATE ON SCHEMA public TO alice").await,
        refusal("must be owner of schema public")
    );
    admin
        .batch_execute("GRANT CREATE ON SCHEMA public TO alice")
        .await
        .expect("grant create");

    // A view over what she cannot read is refused when she creates it.
    assert_eq!(
        denied(&alice, "CREATE VIEW mine AS SELECT * FROM t").await,
        table
    );

    // A view reads its inputs with its owner's rights.
    admin
        .batch_execute("GRANT SELECT ON lv TO alice")
        .await
        .expect("grant");
    assert_eq!(
        common::text_rows(&alice, "SELECT id FROM lv ORDER BY id").await,
        ["1", "2"]
    );
    assert_eq!(denied(&alice, "SELECT * FROM t").await, table);

    admin
        .batch_execute("GRANT SELECT, INSERT ON TABLE t, mv TO alice")
        .await
        .expect("grant");
    assert_eq!(
        common::text_rows(&alice, "SELECT count(*) FROM t").await,
        ["2"]
    );
    alice
        .batch_execute("INSERT INTO t VALUES (3, 30)")
        .await
        .expect("granted insert");
    assert_eq!(denied(&alice, "DELETE FROM t").await, table);
    alice
        .batch_execute("BEGIN; DECLARE c CURSOR FOR SUBSCRIBE mv")
        .await
        .expect("granted subscribe");
    let fetched = common::text_rows(&alice, "FETCH 1 c").await;
    assert_eq!(fetched.len(), 1, "{fetched:?}");
    alice.batch_execute("COMMIT").await.expect("commit");

    // psql's \dp reads relacl.
    let acl = common::text_rows(&admin, "SELECT relacl FROM pg_class WHERE relname = 't'").await;
    assert_eq!(acl, ["{weir=arwd/weir,alice=ar/weir}"]);

    assert_eq!(
        denied(&alice, "DROP TABLE t").await,
        refusal("must be owner of table t")
    );
    assert_eq!(
        denied(&alice, "GRANT SELECT ON t TO alice").await,
        refusal("must be owner of table t")
    );

    admin
        .batch_execute("REVOKE SELECT ON t FROM alice")
        .await
        .expect("revoke");
    assert_eq!(denied(&alice, "SELECT * FROM t").await, table);

    // What she creates is hers; a role that owns something stays.
    alice
        .batch_execute("CREATE TABLE notes (n BIGINT); INSERT INTO notes VALUES (1)")
        .await
        .expect("her own table");
    assert_eq!(
        common::text_rows(&alice, "SELECT n FROM notes").await,
        ["1"]
    );
    let (code, _) = denied(&admin, "DROP ROLE alice").await;
    assert_eq!(code, "2BP01");
    admin
        .batch_execute("DROP TABLE notes; DROP ROLE alice")
        .await
        .expect("then it goes");
}

#[tokio::test]
async fn public_reaches_every_role_and_the_schema_can_be_closed() {
    let mut server = TestServer::start_with_env(&[], &[("WEIR_PASSWORD", PASSWORD)]);
    let admin = login(server.port, "weir", PASSWORD).await;
    admin
        .batch_execute(
            "CREATE TABLE t (v BIGINT);
             INSERT INTO t VALUES (1);
             CREATE MATERIALIZED VIEW mv AS SELECT count(*) AS n FROM t;
             CREATE USER bob PASSWORD 'bob-pw';
             FLUSH",
        )
        .await
        .expect("setup");
    let bob = login(server.port, "bob", "bob-pw").await;
    assert_eq!(
        denied(&bob, "SELECT * FROM t").await,
        refusal("permission denied for table t")
    );

    admin
        .batch_execute("GRANT SELECT ON t TO PUBLIC")
        .await
        .expect("grant to PUBLIC");
    assert_eq!(common::text_rows(&bob, "SELECT v FROM t").await, ["1"]);
    assert_eq!(
        denied(&bob, "SELECT * FROM mv").await,
        refusal("permission denied for materialized view mv")
    );

    admin
        .batch_execute("GRANT SELECT ON ALL TABLES IN SCHEMA public TO bob")
        .await
        .expect("grant on every relation");
    assert_eq!(common::text_rows(&bob, "SELECT n FROM mv").await, ["1"]);

    // Without USAGE on the schema nothing in it can be read.
    admin
        .batch_execute("REVOKE USAGE ON SCHEMA public FROM PUBLIC")
        .await
        .expect("revoke usage");
    let schema = refusal("permission denied for schema public");
    assert_eq!(denied(&bob, "SELECT v FROM t").await, schema);
    assert_eq!(denied(&bob, "COPY (SUBSCRIBE mv) TO STDOUT").await, schema);
    admin
        .batch_execute("GRANT USAGE ON SCHEMA public TO bob")
        .await
        .expect("grant usage");
    assert_eq!(common::text_rows(&bob, "SELECT v FROM t").await, ["1"]);

    // The schema's grants outlive a restart.
    drop((admin, bob));
    server.restart();
    let bob = login(server.port, "bob", "bob-pw").await;
    assert_eq!(common::text_rows(&bob, "SELECT v FROM t").await, ["1"]);
    assert_eq!(denied(&bob, "CREATE TABLE mine (v BIGINT)").await, schema);
}

#[tokio::test]
async fn without_a_password_every_user_keeps_full_access() {
    let server = TestServer::start();
    let client = server.connect().await;
    client
        .batch_execute("CREATE TABLE t (v BIGINT); INSERT INTO t VALUES (1)")
        .await
        .expect("setup");
    let config = format!(
        "host=127.0.0.1 port={} user=someone dbname=weir",
        server.port
    );
    let (other, connection) = tokio_postgres::connect(&config, tokio_postgres::NoTls)
        .await
        .expect("any user");
    tokio::spawn(connection);
    assert_eq!(common::text_rows(&other, "SELECT v FROM t").await, ["1"]);
    other
        .batch_execute("DROP TABLE t")
        .await
        .expect("and drops it");
}
