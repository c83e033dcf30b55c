use std::collections::HashMap;
use std::sync::Arc;

use datafusion::arrow::datatypes::{DataType, Field, Schema};
use datafusion::physical_expr::expressions::Column;

use datafusion::arrow::array::{Int64Array, RecordBatch};

use super::*;
use crate::dataflow::change::{Barrier, pretty, render};
use crate::dataflow::state::EpochState;
use crate::state::Store;

fn sum_min_by_group() -> Aggregate {
    let schema = Arc::new(Schema::new(vec![
        Field::new("g", DataType::Utf8, true),
        Field::new("n", DataType::Int64, true),
        Field::new("s", DataType::Int64, true),
        Field::new("lo", DataType::Int64, true),
    ]));
    let column = |i| Arc::new(Column::new("c", i)) as Arc<dyn PhysicalExpr>;
    let aggs = vec![
        AggSpec {
            append_only: false,
            kind: AggKind::CountStar,
            arg: None,
            arg_type: DataType::Null,
            accumulator: None,
            presence: None,
        },
        AggSpec {
            append_only: false,
            kind: AggKind::Sum,
            arg: Some(column(1)),
            arg_type: DataType::Int64,
            accumulator: None,
            presence: None,
        },
        AggSpec {
            append_only: false,
            kind: AggKind::Min,
            arg: Some(column(1)),
            arg_type: DataType::Int64,
            accumulator: None,
            presence: None,
        },
    ];
    Aggregate::new(vec![column(0)], vec![DataType::Utf8], aggs, schema).expect("aggregate")
}

/// Feed one epoch and return what the operator emitted at its barrier.
fn epoch(op: &mut Aggregate, store: &Store, input: ChangeBatch) -> Vec<String> {
    let mut state = EpochState::new(store.db().clone());
    let prefix = b"test".to_vec();
    let mut cx = Context::new(&mut state, &prefix);
    op.on_changes(0, input, &mut cx).expect("changes");
    op.on_barrier(Barrier { epoch: 1, now: 0 }, &mut cx)
        .expect("barrier");
    let out = render(&cx.take_output());
    let mut batch = rocksdb::WriteBatch::default();
    state.drain_into(&mut batch);
    store.db().write(batch).expect("commit");
    out
}

#[test]
fn retractions_replace_the_minimum_and_empty_groups_vanish() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = Store::open(dir.path()).expect("store");
    let mut op = sum_min_by_group();
    let first = epoch(&mut op, &store, pretty("T I", "+ a 5\n+ a 3\n+ b 7"));
    assert_eq!(first, vec!["+1 a 2 8 3", "+1 b 1 7 7"]);
    let second = epoch(&mut op, &store, pretty("T I", "- a 3\n- b 7"));
    assert_eq!(second, vec!["+1 a 1 5 5", "-1 a 2 8 3", "-1 b 1 7 7"]);
    // A change that nets to nothing emits nothing.
    let third = epoch(&mut op, &store, pretty("T I", "+ a 9\n- a 9"));
    assert!(third.is_empty(), "{third:?}");
}

#[test]
fn a_retracted_minimum_is_found_again_also_after_a_restart() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = Store::open(dir.path()).expect("store");
    let mut op = sum_min_by_group();
    let first = epoch(&mut op, &store, pretty("T I", "+ a 5\n+ a 3\n+ a 3\n+ a 8"));
    assert_eq!(first, vec!["+1 a 4 19 3"]);
    // One of two equal minimums goes: the minimum stays, read from the multiset.
    let second = epoch(&mut op, &store, pretty("T I", "- a 3"));
    assert_eq!(second, vec!["+1 a 3 16 3", "-1 a 4 19 3"]);
    // A new operator, as after a restart, retracts the last minimum.
    let mut op = sum_min_by_group();
    let third = epoch(&mut op, &store, pretty("T I", "- a 3\n+ a 6"));
    assert_eq!(third, vec!["+1 a 3 19 5", "-1 a 3 16 3"]);
    // Values above the minimum come and go without changing it.
    let fourth = epoch(&mut op, &store, pretty("T I", "- a 8\n+ a 7"));
    assert_eq!(fourth, vec!["+1 a 3 18 5", "-1 a 3 19 5"]);
}

#[test]
fn append_only_extremes_survive_a_restart_without_a_multiset() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = Store::open(dir.path()).expect("store");
    let build = || {
        let mut op = sum_min_by_group();
        op.aggs[2].append_only = true;
        op
    };
    let mut op = build();
    assert_eq!(
        epoch(&mut op, &store, pretty("T I", "+ a 5\n+ a 3")),
        vec!["+1 a 2 8 3"]
    );
    // A new operator reads the group back from state, as after a restart.
    let mut op = build();
    assert_eq!(
        epoch(&mut op, &store, pretty("T I", "+ a 1\n+ a 4")),
        vec!["+1 a 4 13 1", "-1 a 2 8 3"]
    );
}

#[test]
fn a_full_cache_drops_its_smallest_groups_without_changing_results() {
    let run = |limit: usize| {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = Store::open(dir.path()).expect("store");
        let mut op = sum_min_by_group();
        op.cache_limit = limit;
        let mut out = Vec::new();
        for input in [
            "+ a 5\n+ b 3\n+ c 7\n+ d 1",
            "- a 5\n+ a 2\n+ e 9\n- d 1",
            "+ b 4\n+ c 1\n+ f 6\n+ a 8",
        ] {
            out.push(epoch(&mut op, &store, pretty("T I", input)));
        }
        out
    };
    assert_eq!(run(2), run(CACHE_GROUPS));
}

#[test]
fn nulls_are_ignored_by_sum_and_min() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = Store::open(dir.path()).expect("store");
    let mut op = sum_min_by_group();
    let out = epoch(&mut op, &store, pretty("T I", "+ a .\n+ a ."));
    assert_eq!(out, vec!["+1 a 2 . ."]);
}

fn state_entries(store: &Store) -> usize {
    store.state_entries(b"test")
}

/// max(v) per (k, window_end) over `(k, window_end, v)` input, and that
/// input's schema.
fn max_per_window(on_close: bool) -> (Aggregate, SchemaRef) {
    let time = crate::dataflow::window::timestamp_type();
    let input = Arc::new(Schema::new(vec![
        Field::new("k", DataType::Utf8, true),
        Field::new("window_end", time.clone(), true),
        Field::new("v", DataType::Int64, true),
    ]));
    let output = Arc::new(Schema::new(vec![
        Field::new("k", DataType::Utf8, true),
        Field::new("window_end", time.clone(), true),
        Field::new("hi", DataType::Int64, true),
    ]));
    let column = |i| Arc::new(Column::new("c", i)) as Arc<dyn PhysicalExpr>;
    let max = AggSpec {
        append_only: false,
        kind: AggKind::Max,
        arg: Some(column(2)),
        arg_type: DataType::Int64,
        accumulator: None,
        presence: None,
    };
    let window = WindowClose {
        column: 1,
        offset: 0,
    };
    let op = Aggregate::new(
        vec![column(0), column(1)],
        vec![DataType::Utf8, time],
        vec![max],
        output,
    )
    .expect("aggregate")
    .with_window(window, on_close)
    .expect("window");
    (op, input)
}

/// `n` rows of window `window` (ending at `window * 10`), over 10 keys.
fn window_rows(input: &SchemaRef, window: i64, n: i64) -> ChangeBatch {
    use datafusion::arrow::array::{StringArray, TimestampMicrosecondArray};
    let keys: Vec<String> = (0..n).map(|i| format!("k{}", i % 10)).collect();
    let rows = RecordBatch::try_new(
        input.clone(),
        vec![
            Arc::new(StringArray::from(keys)),
            Arc::new(TimestampMicrosecondArray::from(vec![
                window * 10;
                n as usize
            ])),
            Arc::new(Int64Array::from_iter_values(0..n)),
        ],
    )
    .expect("batch");
    ChangeBatch::inserts(rows)
}

/// One epoch: changes, then a watermark, then the barrier; returns what
/// the operator emitted and whether the epoch wrote any state.
fn window_epoch(
    op: &mut Aggregate,
    store: &Store,
    inputs: Vec<ChangeBatch>,
    watermark: i64,
) -> (Vec<String>, bool) {
    let mut state = EpochState::new(store.db().clone());
    let prefix = b"test".to_vec();
    let mut cx = Context::new(&mut state, &prefix);
    for input in inputs {
        op.on_changes(0, input, &mut cx).expect("changes");
    }
    op.on_watermark(Watermark { micros: watermark }, &mut cx)
        .expect("watermark");
    op.on_barrier(Barrier { epoch: 1, now: 0 }, &mut cx)
        .expect("barrier");
    let out = render(&cx.take_output());
    let wrote = !state.is_empty();
    let mut batch = rocksdb::WriteBatch::default();
    state.drain_into(&mut batch);
    store.db().write(batch).expect("commit");
    (out, wrote)
}

#[test]
fn windowed_state_is_deleted_once_the_watermark_passes_the_window() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = Store::open(dir.path()).expect("store");
    let (mut op, input) = max_per_window(true);
    let mut most = 0;
    let mut emitted = 0;
    // An endless stream: 200 windows of 10 keys, 5 rows a key each.
    for window in 1..=200i64 {
        let rows = window_rows(&input, window, 50);
        let (out, _) = window_epoch(&mut op, &store, vec![rows], window * 10 - 10);
        emitted += out.len();
        most = most.max(state_entries(&store));
    }
    // One open window at a time: 10 groups and their 50 distinct values.
    assert!(most <= 60, "state grew to {most} entries");
    // Every window but the last, still open, was emitted once a key.
    assert_eq!(emitted, 199 * 10);
}

#[test]
fn a_window_that_opens_and_closes_within_an_epoch_writes_no_state() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = Store::open(dir.path()).expect("store");
    let (mut op, input) = max_per_window(false);
    // Over append-only input max keeps no multiset either.
    op.aggs[0].append_only = true;
    let rows = window_rows(&input, 1, 20);
    let (out, wrote) = window_epoch(&mut op, &store, vec![rows.clone(), rows], 10);
    assert_eq!(out.len(), 10, "{out:?}");
    assert!(!wrote, "the epoch wrote state for groups it closed");
}

#[test]
fn windows_close_alike_whether_their_groups_stayed_in_memory_or_not() {
    let run = |limit: usize| {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = Store::open(dir.path()).expect("store");
        let (mut op, input) = max_per_window(true);
        op.cache_limit = limit;
        let mut out = Vec::new();
        // Three windows open at once; each epoch closes the oldest.
        for window in 1..=8i64 {
            let rows = (window..window + 3)
                .map(|w| window_rows(&input, w, 20))
                .collect();
            out.push(window_epoch(&mut op, &store, rows, window * 10).0);
        }
        out
    };
    assert_eq!(run(4), run(CACHE_GROUPS));
}

/// count(DISTINCT) of the second column per group of the first.
fn distinct_by_group(cache_limit: usize) -> Aggregate {
    distinct_over(cache_limit, false)
}

fn distinct_over(cache_limit: usize, append_only: bool) -> Aggregate {
    let schema = Arc::new(Schema::new(vec![
        Field::new("g", DataType::Utf8, true),
        Field::new("d", DataType::Int64, false),
    ]));
    let spec = AggSpec {
        append_only,
        kind: AggKind::CountDistinct,
        arg: Some(Arc::new(Column::new("v", 1))),
        arg_type: DataType::Int64,
        accumulator: None,
        presence: None,
    };
    let mut op = Aggregate::new(
        vec![Arc::new(Column::new("g", 0))],
        vec![DataType::Utf8],
        vec![spec],
        schema,
    )
    .expect("aggregate");
    op.cache_limit = cache_limit;
    op
}

#[test]
fn distinct_values_count_once_across_epochs_flushes_and_restarts() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = Store::open(dir.path()).expect("store");
    // A cache of one group flushes in the middle of every epoch.
    let mut op = distinct_by_group(1);
    let first = epoch(&mut op, &store, pretty("T I", "+ a 1\n+ b 1\n+ a 1\n+ a 2"));
    assert_eq!(first, vec!["+1 a 2", "+1 b 1"]);
    let mut restarted = distinct_by_group(1);
    let second = epoch(&mut restarted, &store, pretty("T I", "+ a 2\n+ b 3\n- a 1"));
    assert_eq!(second, vec!["+1 b 2", "-1 b 1"]);
    // The second 1 of a goes: a keeps only 2.
    let third = epoch(&mut restarted, &store, pretty("T I", "- a 1"));
    assert_eq!(third, vec!["+1 a 1", "-1 a 2"]);
    // A group that empties forgets its values; coming back, it counts anew.
    let fourth = epoch(&mut restarted, &store, pretty("T I", "- a 2\n- a 2"));
    assert_eq!(fourth, vec!["-1 a 1"]);
    let fifth = epoch(&mut restarted, &store, pretty("T I", "+ a 2"));
    assert_eq!(fifth, vec!["+1 a 1"]);
}

#[test]
fn distinct_values_over_append_only_input_are_written_once() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = Store::open(dir.path()).expect("store");
    let mut op = distinct_over(1, true);
    let first = epoch(&mut op, &store, pretty("T I", "+ a 1\n+ b 1\n+ a 1\n+ a 2"));
    assert_eq!(first, vec!["+1 a 2", "+1 b 1"]);
    let stored = store.state_entries(b"");
    // Seen before, in this epoch or an earlier one: nothing changes.
    let mut restarted = distinct_over(1, true);
    let second = epoch(&mut restarted, &store, pretty("T I", "+ a 2\n+ a 1\n+ b 1"));
    assert!(second.is_empty(), "{second:?}");
    assert_eq!(store.state_entries(b""), stored);
    let third = epoch(&mut restarted, &store, pretty("T I", "+ b 3\n+ b 3\n+ a 1"));
    assert_eq!(third, vec!["+1 b 2", "-1 b 1"]);
    assert_eq!(store.state_entries(b""), stored + 1);
}

/// Per group of `g`: count(DISTINCT v), and count(DISTINCT v) FILTER
/// (WHERE v > 2) and FILTER (WHERE v <= 2), sharing one record of values
/// when `shared` (as planned from revision 3 on).
fn filtered_distincts(cache_limit: usize, shared: bool) -> Aggregate {
    use datafusion::logical_expr::Operator as BinaryOp;
    use datafusion::physical_expr::expressions::{BinaryExpr, CaseExpr, Literal};
    use datafusion::scalar::ScalarValue;

    let v = || Arc::new(Column::new("v", 1)) as Arc<dyn PhysicalExpr>;
    let when = |op: BinaryOp| -> Arc<dyn PhysicalExpr> {
        let two = Arc::new(Literal::new(ScalarValue::Int64(Some(2))));
        let filter = Arc::new(BinaryExpr::new(v(), op, two));
        Arc::new(CaseExpr::try_new(None, vec![(filter, v())], None).expect("case"))
    };
    let spec = |arg: Arc<dyn PhysicalExpr>| AggSpec {
        append_only: true,
        kind: AggKind::CountDistinct,
        arg: Some(arg),
        arg_type: DataType::Int64,
        accumulator: None,
        presence: shared.then(v),
    };
    let aggs = vec![
        spec(v()),
        spec(when(BinaryOp::Gt)),
        spec(when(BinaryOp::LtEq)),
    ];
    let schema = Arc::new(Schema::new(vec![
        Field::new("g", DataType::Utf8, true),
        Field::new("all", DataType::Int64, false),
        Field::new("high", DataType::Int64, false),
        Field::new("low", DataType::Int64, false),
    ]));
    let mut op = Aggregate::new(
        vec![Arc::new(Column::new("g", 0))],
        vec![DataType::Utf8],
        aggs,
        schema,
    )
    .expect("aggregate");
    op.cache_limit = cache_limit;
    op
}

/// The rows a series of emitted changes leaves, sorted.
fn net_rows(changes: &[Vec<String>]) -> Vec<String> {
    let mut rows: HashMap<String, i64> = HashMap::new();
    for line in changes.iter().flatten() {
        let (weight, row) = line.split_once(' ').expect("a weight");
        *rows.entry(row.to_string()).or_default() += weight.parse::<i64>().expect("weight");
    }
    let mut left: Vec<String> = rows
        .into_iter()
        .filter(|(_, n)| *n != 0)
        .map(|(row, n)| format!("{n} {row}"))
        .collect();
    left.sort();
    left
}

#[test]
fn filtered_distincts_sharing_a_record_equal_a_recount() {
    let epochs: Vec<String> = (0..6)
        .map(|e| {
            (0..12)
                .map(|i| {
                    format!(
                        "+ {} {}",
                        ["a", "b", "c"][(i * 7 + e) % 3],
                        (i * 5 + e * 3) % 6
                    )
                })
                .collect::<Vec<_>>()
                .join("\n")
        })
        .collect();
    let mut expected: Vec<String> = Vec::new();
    for g in ["a", "b", "c"] {
        let mut seen = std::collections::BTreeSet::new();
        for line in epochs.iter().flat_map(|e| e.lines()) {
            let parts: Vec<&str> = line.split_whitespace().collect();
            if parts[1] == g {
                seen.insert(parts[2].parse::<i64>().expect("v"));
            }
        }
        let high = seen.iter().filter(|v| **v > 2).count();
        expected.push(format!("1 {g} {} {high} {}", seen.len(), seen.len() - high));
    }
    for (limit, shared) in [
        (1, true),
        (CACHE_GROUPS, true),
        (1, false),
        (CACHE_GROUPS, false),
    ] {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = Store::open(dir.path()).expect("store");
        let mut out = Vec::new();
        for input in &epochs {
            // A fresh operator every epoch, as after a restart: counts come
            // back from state alone.
            let mut op = filtered_distincts(limit, shared);
            out.push(epoch(&mut op, &store, pretty("T I", input)));
        }
        assert_eq!(net_rows(&out), expected, "cache {limit}, shared {shared}");
        // Shared: one entry per (group, value) seen, beside the groups;
        // apart: one per aggregate that counted it.
        let values: usize = expected
            .iter()
            .map(|row| {
                row.split_whitespace()
                    .nth(2)
                    .expect("all")
                    .parse::<usize>()
                    .expect("n")
            })
            .sum();
        let entries = if shared { values } else { 2 * values };
        assert_eq!(state_entries(&store), entries + 3, "shared {shared}");
    }
}
