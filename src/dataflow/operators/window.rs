//! TUMBLE, HOP and CUMULATE: each row goes out once per window it falls
//! into, with `window_start` and `window_end` appended.
//!
//! The operator is where lateness is judged: a (row, window) pair whose
//! window is already final (the watermark has reached its end) is dropped,
//! and the row is recorded as a late event. Downstream, an aggregate may then
//! forget a window as soon as the watermark passes its end.

use std::sync::Arc;

use datafusion::arrow::array::AsArray;
use datafusion::arrow::array::{Int64Array, RecordBatch, UInt32Array};
use datafusion::arrow::compute::{take, take_record_batch};
use datafusion::arrow::datatypes::Int64Type;
use datafusion::arrow::datatypes::{Schema, SchemaRef};

use crate::catalog::Table;
use crate::dataflow::change::{ChangeBatch, Watermark};
use crate::dataflow::late::rows_as_json;
use crate::dataflow::operator::{Context, Operator};
use crate::dataflow::state::LateEvent;
use crate::dataflow::window::{Assigned, WindowSpec};
use crate::error::{Error, Result};

pub struct WindowAssign {
    spec: WindowSpec,
    /// The input columns passed on: a row goes out once per window, so
    /// the columns no one reads are left behind rather than copied.
    keep: Vec<usize>,
    /// The kept columns with the two window columns.
    schema: SchemaRef,
    /// The event-time column's name, for EXPLAIN.
    time_name: String,
    /// The view being maintained, named in late events.
    view: String,
    watermark: Option<i64>,
    /// How long after its end a window still takes rows: 0, except for the
    /// slices of a sliced HOP, which stay open until the last hopping
    /// window over them closes (see `plan::sliced`).
    grace: i64,
    /// Record no late events: the rows were judged upstream already.
    quiet: bool,
    /// The table whose rows arrive projected, each also as stored in a
    /// last column: late rows are recorded whole from it.
    whole: Option<Arc<Table>>,
}

impl WindowAssign {
    /// `schema` is the input's with the two window columns; every input
    /// column is passed on until [`WindowAssign::keeping`] says otherwise.
    pub fn new(spec: WindowSpec, schema: SchemaRef, view: String) -> WindowAssign {
        WindowAssign {
            keep: (0..schema.fields().len() - 2).collect(),
            time_name: schema.field(spec.time_column).name().clone(),
            spec,
            schema,
            view,
            watermark: None,
            grace: 0,
            quiet: false,
            whole: None,
        }
    }

    /// Rows arrive with only the columns the view reads decoded, and each
    /// row as stored of `table` in a last column.
    pub fn with_whole_rows(mut self, table: Arc<Table>) -> WindowAssign {
        self.whole = Some(table);
        self
    }

    /// Keep taking a window's rows until `grace` after its end; a row
    /// that arrives after the end is still recorded as late.
    pub fn with_grace(mut self, grace: i64) -> WindowAssign {
        self.grace = grace;
        self
    }

    /// Drop rows for final windows without recording them.
    pub fn quiet(mut self) -> WindowAssign {
        self.quiet = true;
        self
    }

    /// Pass on only the input columns `keep`, in that order.
    pub fn keeping(mut self, keep: Vec<usize>) -> WindowAssign {
        let width = self.schema.fields().len();
        let fields = keep
            .iter()
            .chain(&[width - 2, width - 1])
            .map(|i| self.schema.field(*i).clone())
            .collect::<Vec<_>>();
        self.schema = Arc::new(Schema::new(fields));
        self.keep = keep;
        self
    }
}

impl Operator for WindowAssign {
    fn name(&self) -> &'static str {
        "WindowAssign"
    }

    fn describe(&self) -> String {
        let grace = if self.grace > 0 {
            format!(" grace={}us", self.grace)
        } else {
            String::new()
        };
        format!("{:?} on {}{grace}", self.spec.kind, self.time_name)
    }

    fn on_changes(
        &mut self,
        _input: usize,
        batch: ChangeBatch,
        cx: &mut Context<'_>,
    ) -> Result<()> {
        let times = self.spec.times(batch.rows())?;
        let assigned = self.spec.assign(&times);
        let (kept, late) = split_late(assigned, self.watermark, self.grace);
        if let Some(watermark) = self.watermark
            && !late.is_empty()
            && !self.quiet
        {
            self.record(batch.rows(), &times, &late, watermark, cx)?;
        }
        if kept.rows.is_empty() {
            return Ok(());
        }
        let rows = kept.apply(&batch.rows().project(&self.keep)?, &self.schema)?;
        let diffs = if kept.is_identity(batch.len()) {
            batch.diffs().clone()
        } else {
            take(batch.diffs(), &kept.indices(), None)?
                .as_primitive::<Int64Type>()
                .clone()
        };
        cx.emit(ChangeBatch::new(rows, diffs)?);
        Ok(())
    }

    fn on_watermark(&mut self, wm: Watermark, _cx: &mut Context<'_>) -> Result<Option<Watermark>> {
        self.watermark = self.watermark.max(Some(wm.micros));
        Ok(Some(wm))
    }
}

impl WindowAssign {
    /// Record the `late` rows of `rows`, whole.
    fn record(
        &self,
        rows: &RecordBatch,
        times: &Int64Array,
        late: &[u32],
        watermark: i64,
        cx: &mut Context<'_>,
    ) -> Result<()> {
        let Some(table) = &self.whole else {
            return record_late(&self.view, rows, times, late, watermark, cx);
        };
        let stored = rows
            .column(rows.num_columns() - 1)
            .as_binary_opt::<i32>()
            .ok_or_else(|| Error::Internal("a window's input lacks its stored rows".into()))?;
        if late
            .iter()
            .any(|row| stored.value(*row as usize).is_empty())
        {
            return Err(Error::Internal(
                "a late row reached a window without its stored bytes".into(),
            ));
        }
        let whole = table
            .codec
            .decode(late.iter().map(|row| stored.value(*row as usize)))?;
        let times = late.iter().map(|row| times.value(*row as usize));
        record_rows(&self.view, &whole, times, watermark, cx)
    }
}

/// Pairs whose window still takes rows (until `grace` after its end), and
/// the rows of the pairs whose window is final.
pub fn split_late(assigned: Assigned, watermark: Option<i64>, grace: i64) -> (Assigned, Vec<u32>) {
    let Some(watermark) = watermark else {
        return (assigned, Vec::new());
    };
    let mut kept = Assigned::default();
    let mut late: Vec<u32> = Vec::new();
    for i in 0..assigned.rows.len() {
        if assigned.ends[i] <= watermark && late.last() != Some(&assigned.rows[i]) {
            late.push(assigned.rows[i]);
        }
        if assigned.ends[i].saturating_add(grace) <= watermark {
            continue;
        }
        kept.rows.push(assigned.rows[i]);
        kept.starts.push(assigned.starts[i]);
        kept.ends.push(assigned.ends[i]);
    }
    late.dedup();
    (kept, late)
}

/// Note late rows in the epoch, for the `late_events` table.
pub fn record_late(
    view: &str,
    rows: &RecordBatch,
    times: &Int64Array,
    late: &[u32],
    watermark: i64,
    cx: &mut Context<'_>,
) -> Result<()> {
    let late_rows = take_record_batch(rows, &UInt32Array::from(late.to_vec()))?;
    let times = late.iter().map(|row| times.value(*row as usize));
    record_rows(view, &late_rows, times, watermark, cx)
}

/// Note late rows, with their event times, in the epoch.
fn record_rows(
    view: &str,
    rows: &RecordBatch,
    times: impl Iterator<Item = i64>,
    watermark: i64,
    cx: &mut Context<'_>,
) -> Result<()> {
    let json = rows_as_json(rows)?;
    for (i, event_time) in times.enumerate() {
        cx.state.late.push(LateEvent {
            object: view.to_string(),
            event_time,
            watermark,
            row: json.get(i).cloned().unwrap_or_default(),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dataflow::change::{pretty, render};
    use crate::dataflow::state::EpochState;
    use crate::dataflow::window::WindowKind;
    use crate::state::Store;

    #[test]
    fn rows_for_final_windows_are_dropped_and_recorded() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = Store::open(dir.path()).expect("store");
        let input = pretty("T I", "+ a 1\n+ b 12\n- c 25");
        // Times are microseconds: the second column read as a timestamp.
        let rows = input.rows();
        let ts = datafusion::arrow::compute::cast(
            rows.column(1),
            &crate::dataflow::window::timestamp_type(),
        )
        .expect("cast");
        let schema = std::sync::Arc::new(datafusion::arrow::datatypes::Schema::new(vec![
            rows.schema().field(0).clone(),
            datafusion::arrow::datatypes::Field::new("ts", ts.data_type().clone(), true),
        ]));
        let rows =
            RecordBatch::try_new(schema.clone(), vec![rows.column(0).clone(), ts]).expect("batch");
        let input = ChangeBatch::new(rows, input.diffs().clone()).expect("change");
        let spec = WindowSpec {
            kind: WindowKind::Tumble {
                size: 10,
                offset: 0,
            },
            time_column: 1,
        };
        let mut op = WindowAssign::new(spec.clone(), spec.schema(&schema), "v".into());
        let mut state = EpochState::new(store.db().clone());
        let prefix = b"w".to_vec();
        let mut cx = Context::new(&mut state, &prefix);
        op.on_watermark(Watermark { micros: 10 }, &mut cx)
            .expect("watermark");
        op.on_changes(0, input, &mut cx).expect("changes");
        let out: Vec<String> = render(&cx.take_output())
            .into_iter()
            .map(|line| {
                line.split_whitespace()
                    .take(2)
                    .collect::<Vec<_>>()
                    .join(" ")
            })
            .collect();
        assert_eq!(out, vec!["+1 b", "-1 c"]);
        assert_eq!(state.late.len(), 1);
        assert_eq!(state.late[0].event_time, 1);
        assert_eq!(state.late[0].watermark, 10);
        assert!(
            state.late[0].row.contains("\"c0\":\"a\""),
            "{}",
            state.late[0].row
        );
    }

    #[test]
    fn a_grace_keeps_rows_past_a_window_end_and_still_records_them() {
        // Slices of 10 with a grace of 20: the watermark is 35.
        let assigned = Assigned {
            rows: vec![0, 1, 2, 3],
            starts: vec![0, 10, 20, 30],
            ends: vec![10, 20, 30, 40],
        };
        let (kept, late) = split_late(assigned, Some(35), 20);
        assert_eq!(
            kept.rows,
            vec![1, 2, 3],
            "only the slice ending at 10 is done"
        );
        assert_eq!(late, vec![0, 1, 2], "rows past their slice's end are late");
        let plain = Assigned {
            rows: vec![0, 1],
            starts: vec![10, 20],
            ends: vec![20, 30],
        };
        let (kept, late) = split_late(plain, Some(25), 0);
        assert_eq!((kept.rows, late), (vec![1], vec![0]));
    }
}
