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

use crate::dataflow::change::{ChangeBatch, Watermark};
use crate::dataflow::late::rows_as_json;
use crate::dataflow::operator::{Context, Operator};
use crate::dataflow::state::LateEvent;
use crate::dataflow::window::{Assigned, WindowSpec};
use crate::error::Result;

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
        }
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
        format!("{:?} on {}", self.spec.kind, self.time_name)
    }

    fn on_changes(
        &mut self,
        _input: usize,
        batch: ChangeBatch,
        cx: &mut Context<'_>,
    ) -> Result<()> {
        let times = self.spec.times(batch.rows())?;
        let assigned = self.spec.assign(&times);
        let (kept, late) = split_late(assigned, self.watermark);
        if let Some(watermark) = self.watermark
            && !late.is_empty()
        {
            record_late(&self.view, batch.rows(), &times, &late, watermark, cx)?;
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

/// Pairs whose window is still open, and the rows of those that are final.
pub fn split_late(assigned: Assigned, watermark: Option<i64>) -> (Assigned, Vec<u32>) {
    let Some(watermark) = watermark else {
        return (assigned, Vec::new());
    };
    let mut kept = Assigned::default();
    let mut late: Vec<u32> = Vec::new();
    for i in 0..assigned.rows.len() {
        if assigned.ends[i] <= watermark {
            if late.last() != Some(&assigned.rows[i]) {
                late.push(assigned.rows[i]);
            }
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
    let json = rows_as_json(&late_rows)?;
    for (i, row) in late.iter().enumerate() {
        cx.state.late.push(LateEvent {
            object: view.to_string(),
            event_time: times.value(*row as usize),
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
}
