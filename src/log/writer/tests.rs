use super::group::{Committer, commit_group};
use super::*;
use crate::log::embedded::Stamp;
use crate::state::{CF_ROWS, keys};

fn target() -> Target {
    Target {
        table: 7,
        name: "t".into(),
        topic: 7,
        partitions: 2,
        constraint: "t_pkey".into(),
        describe_key: Arc::new(|k| format!("{k:?}")),
    }
}

fn row(key: &[u8], value: &[u8]) -> KeyedRow {
    KeyedRow {
        key: key.to_vec(),
        row: value.to_vec(),
    }
}

/// A store in `dir` with a syncing writer.
fn open(dir: &std::path::Path) -> (Store, Writer) {
    let store = Store::open(dir).expect("open");
    let writer = Writer::start(&store, None, true, wall_clock()).expect("writer");
    (store, writer)
}

fn insert_one(key: &[u8], value: &[u8]) -> WriteOp {
    WriteOp::Insert {
        rows: vec![row(key, value)],
    }
}

/// Every record of the test table's log, as a reader sees it.
fn total_log(store: &Store) -> u64 {
    let _ = store.read_view();
    let db = store.db();
    (0..2)
        .map(|p| log_end(db, crate::log::Topic::table(7), p).expect("log end"))
        .sum()
}

/// Records in the test table's log as stored, compacted runs included.
fn stored_records(store: &Store) -> u64 {
    let view = store.read_view();
    let mut records = 0;
    for partition in 0..2 {
        crate::log::embedded::read_raw(
            &view,
            crate::log::Topic::table(7),
            partition,
            0,
            |_, count, _, _| {
                records += count;
                Ok(true)
            },
        )
        .expect("read");
    }
    records
}

#[tokio::test]
async fn an_upserted_tables_compacted_log_holds_its_live_rows() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (store, writer) = open(dir.path());
    for round in 0..200u32 {
        let rows = (0..10u8)
            .map(|k| (vec![k], Some(round.to_be_bytes().to_vec())))
            .collect();
        writer
            .write(target(), WriteOp::Upsert { rows })
            .await
            .expect("upsert");
    }
    let deleted = (0..3u8).map(|k| (vec![k], None)).collect();
    writer
        .write(target(), WriteOp::Upsert { rows: deleted })
        .await
        .expect("delete");
    let written = stored_records(&store);
    let ends = total_log(&store);
    for partition in 0..2 {
        crate::log::embedded::compact(
            store.db(),
            crate::log::Topic::table(7),
            partition,
            i64::MAX,
            u64::MAX,
        )
        .expect("compact");
    }
    let kept = stored_records(&store);
    // Seven live rows, plus each partition's last write kept as written.
    assert!(written > 3_000, "{written} records written");
    assert!(kept <= 7 + 2 * 10, "{kept} records after compaction");
    assert_eq!(total_log(&store), ends, "offsets keep their meaning");
}

#[tokio::test]
async fn inserts_deletes_and_updates_keep_rows_and_log_in_step() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (store, writer) = open(dir.path());
    let insert = WriteOp::Insert {
        rows: vec![row(b"a", b"1"), row(b"b", b"2")],
    };
    assert_eq!(writer.write(target(), insert).await.expect("insert"), 2);

    let dup = WriteOp::Insert {
        rows: vec![row(b"c", b"3"), row(b"a", b"9")],
    };
    let err = writer.write(target(), dup).await.expect_err("duplicate");
    assert_eq!(err.sqlstate(), "23505");
    assert_eq!(
        total_log(&store),
        2,
        "a failed statement writes no log records"
    );

    let update = WriteOp::Update {
        changes: vec![Change {
            old_key: b"a".to_vec(),
            old_row: b"1".to_vec(),
            new: row(b"z", b"5"),
        }],
    };
    assert_eq!(writer.write(target(), update).await.expect("update"), 1);
    let stale = WriteOp::Update {
        changes: vec![Change {
            old_key: b"b".to_vec(),
            old_row: b"old".to_vec(),
            new: row(b"b", b"6"),
        }],
    };
    assert_eq!(
        writer
            .write(target(), stale)
            .await
            .expect_err("stale")
            .sqlstate(),
        "40001"
    );

    let delete = WriteOp::Delete {
        keys: vec![b"b".to_vec(), b"missing".to_vec()],
    };
    assert_eq!(writer.write(target(), delete).await.expect("delete"), 1);
    // +a +b, then -a +z, then -b.
    assert_eq!(total_log(&store), 5);
    let view = store.read_view();
    let found = view
        .multi_get(
            crate::state::CF_ROWS,
            &[keys::row_key(7, b"z"), keys::row_key(7, b"b")],
        )
        .expect("read");
    assert_eq!(found, vec![Some(b"5".to_vec()), None]);
}

#[tokio::test]
async fn keys_at_or_below_the_last_row_are_checked_after_ascending_inserts() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (_store, writer) = open(dir.path());
    for key in [b"b", b"d", b"f"] {
        let insert = insert_one(key, b"1");
        writer
            .write(target(), insert)
            .await
            .expect("ascending insert");
    }
    for key in [b"f", b"b"] {
        let again = insert_one(key, b"2");
        let err = writer.write(target(), again).await.expect_err("duplicate");
        assert_eq!(err.sqlstate(), "23505", "key {key:?}");
    }
    let delete = WriteOp::Delete {
        keys: vec![b"f".to_vec()],
    };
    writer.write(target(), delete).await.expect("delete");
    for key in [b"f", b"c", b"g"] {
        let insert = insert_one(key, b"3");
        writer.write(target(), insert).await.expect("free key");
    }
    let dup = insert_one(b"g", b"4");
    let err = writer.write(target(), dup).await.expect_err("duplicate");
    assert_eq!(err.sqlstate(), "23505");
}

#[tokio::test]
async fn an_acknowledged_inline_write_is_seen_by_every_read_before_it_is_applied() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (store, writer) = open(dir.path());
    let raw = |key: &[u8]| {
        let family = crate::state::cf(store.db(), CF_ROWS);
        store
            .db()
            .get_cf(family, keys::row_key(7, key))
            .expect("get")
    };
    writer
        .write(target(), insert_one(b"a", b"1"))
        .await
        .expect("insert");
    // This task has not yielded since the reply, so the group is parked.
    assert!(store.unapplied().is_waiting());
    assert_eq!(raw(b"a"), None, "not in RocksDB yet");
    let view = store.read_view();
    assert!(!store.unapplied().is_waiting());
    assert_eq!(
        view.get(CF_ROWS, &keys::row_key(7, b"a")).expect("read"),
        Some(b"1".to_vec())
    );

    writer
        .write(target(), insert_one(b"b", b"1"))
        .await
        .expect("insert");
    assert!(store.unapplied().is_waiting());
    let err = writer
        .write(target(), insert_one(b"b", b"2"))
        .await
        .expect_err("the parked row is checked");
    assert_eq!(err.sqlstate(), "23505");
    assert_eq!(total_log(&store), 2);

    writer
        .write(target(), insert_one(b"c", b"1"))
        .await
        .expect("insert");
    tokio::task::yield_now().await;
    assert!(
        !store.unapplied().is_waiting(),
        "applied once the task yields"
    );
    assert_eq!(raw(b"c"), Some(b"1".to_vec()));
}

#[tokio::test]
async fn a_store_that_lost_its_unsynced_writes_gets_them_back_from_the_commit_log() {
    let synced = tempfile::tempdir().expect("tempdir");
    let (store, writer) = open(synced.path());
    for key in [b"a", b"b", b"c"] {
        let insert = insert_one(key, b"1");
        writer.write(target(), insert).await.expect("insert");
    }
    let ring = std::fs::read(store.db().path().join("commit.ring")).expect("ring");

    // A store whose own log lost every write, beside the ring that kept them.
    let lost = tempfile::tempdir().expect("tempdir");
    let store = Store::open(lost.path()).expect("open");
    std::fs::write(store.db().path().join("commit.ring"), ring).expect("copy ring");
    let writer = Writer::start(&store, None, true, wall_clock()).expect("writer");
    assert_eq!(*writer.committed().borrow(), 3);
    assert_eq!(total_log(&store), 3);
    let again = insert_one(b"a", b"2");
    let err = writer.write(target(), again).await.expect_err("duplicate");
    assert_eq!(err.sqlstate(), "23505", "the replayed row is there");
}

#[tokio::test]
async fn concurrent_requests_in_one_group_see_each_other() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (_store, writer) = open(dir.path());
    let attempts = (0..20).map(|_| {
        let writer = writer.clone();
        tokio::spawn(async move {
            writer
                .write(target(), insert_one(b"same", b"x"))
                .await
                .is_ok()
        })
    });
    let mut wins = 0;
    for attempt in attempts {
        wins += usize::from(attempt.await.expect("task"));
    }
    assert_eq!(wins, 1);
}

#[test]
fn a_producers_repeated_sequence_in_one_group_applies_once() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = Store::open(dir.path()).expect("open");
    let request = |seq| {
        let (reply, rx) = oneshot::channel();
        let request = WriteRequest {
            target: target(),
            op: WriteOp::Append {
                rows: vec![b"x".to_vec()],
            },
            watermark: None,
            producers: vec![("p".into(), seq)],
            reply,
        };
        (request, rx)
    };
    let (first, _) = request(1);
    let (again, _) = request(1);
    let (next, _) = request(2);
    let mut committer = Committer {
        offsets: Offsets::default(),
        log: None,
    };
    let replies = commit_group(
        store.db(),
        &mut committer,
        vec![first, again, next],
        Stamp::default(),
        None,
    );
    let outcomes: Vec<u64> = replies
        .into_iter()
        .map(|(_, r)| r.expect("reply"))
        .collect();
    assert_eq!(
        outcomes,
        vec![1, 1, 1],
        "a dropped retry still answers its count"
    );
    assert_eq!(total_log(&store), 2);
}

#[tokio::test]
async fn a_staged_append_only_load_is_logged_in_whole_stamped_chunks() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (store, writer) = open(dir.path());
    let rows = |range: std::ops::Range<u32>| -> Vec<Vec<u8>> {
        range.map(|i| format!("row {i}").into_bytes()).collect()
    };
    let mut stage = writer.stage().expect("stage");
    let parts = [0..3000, 3000..9000, 9000..10_000];
    for (part, watermark) in parts.into_iter().zip([Some(5), Some(9), Some(7)]) {
        let op = WriteOp::Append { rows: rows(part) };
        stage.push(&target(), op, watermark).expect("stage a part");
    }
    let loaded = writer.commit_stage(target(), stage).await.expect("commit");
    assert_eq!(loaded, 10_000);
    let view = store.read_view();
    let mut chunks = Vec::new();
    let mut read = Vec::new();
    for partition in 0..2 {
        crate::log::embedded::read_partition(
            &view,
            crate::log::Topic::table(7),
            partition,
            0,
            |base, chunk| {
                chunks.push((
                    base,
                    chunk.entries.len(),
                    chunk.watermark,
                    chunk.stamp.is_some(),
                ));
                read.extend(chunk.entries.iter().map(|e| (e.diff, e.row.to_vec())));
                Ok(true)
            },
        )
        .expect("read");
    }
    assert_eq!(
        chunks,
        [
            (0, 4096, None, true),
            (4096, 4096, None, true),
            (8192, 1808, Some(9), true)
        ]
    );
    let expected: Vec<(i64, Vec<u8>)> = rows(0..10_000).into_iter().map(|r| (1, r)).collect();
    assert_eq!(read, expected);
}
