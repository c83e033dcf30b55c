//! Sliced HOP windows.
//!
//! A row of a hopping window of `size` that starts every `slide` falls into
//! `size / slide` windows, so a plain aggregate over HOP updates that many
//! groups per row. When the size is a multiple of the slide, the input is
//! append-only and every aggregate can be combined from parts (count, sum of
//! integers or decimals, min, max), an aggregate that emits on window close
//! is planned in two stages instead, as Flink's slicing window operator does:
//!
//! 1. TUMBLE by the slide, and the aggregate per group and slice, emitted
//!    when the slice closes: each row updates one group.
//! 2. HOP over the slices' rows, and the aggregate that combines a window's
//!    slices (counts and sums summed, extremes of extremes), emitted when
//!    the window closes.
//!
//! Lateness stays that of the plain plan, where a row is dropped from the
//! windows already final when it comes and counts in the others. A slice
//! is the tail of the earliest window over it, so it is final with that
//! window while the later ones are still open. The first stage's window
//! operator therefore keeps taking a slice's rows until the last window
//! over it closes, `size - slide` after the slice's end, and records a row
//! as late when it would have been dropped from any window. Its aggregate
//! closes such a late group at once, as a partial row of its own; the
//! second stage's window operator drops that row's pairs with final
//! windows (recording nothing again) and adds it to the open ones.
//!
//! The second stage needs the slice's start to find the windows over it,
//! so the aggregate must group by `window_start`; one that groups by
//! `window_end` alone is planned plainly.

use std::sync::Arc;

use datafusion::arrow::datatypes::{DataType, Field, Schema};
use datafusion::logical_expr::{Aggregate as AggregatePlan, Expr, LogicalPlan, TableScan};
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_expr::expressions::Column as PhysicalColumn;

use super::{Planner, arrow_schema, window_scan_under};
use crate::dataflow::operators::aggregate::{AggKind, AggSpec, WindowClose};
use crate::dataflow::operators::{Aggregate, WindowAssign};
use crate::dataflow::window::{WINDOW_END, WINDOW_START, WindowKind, WindowSpec};
use crate::error::Result;
use crate::sql::window::{WindowTable, bound_of};

/// Where a group column of the aggregate comes from.
#[derive(Clone, Copy, PartialEq, Eq)]
enum GroupColumn {
    /// A column of the windowed relation, at this index of the scan's output.
    Plain(usize),
    Start(usize),
    End(usize),
}

/// An aggregate over HOP found fit to be sliced.
struct Slicing<'p> {
    scan: &'p TableScan,
    window: WindowTable,
    slide: i64,
    size: i64,
    groups: Vec<GroupColumn>,
    /// Where `window_start` is in the scan's output.
    start: usize,
    aggs: Vec<AggSpec>,
}

impl Planner<'_> {
    /// Plan an aggregate over HOP that emits on window close in slices, if
    /// it can be (see the module documentation); `None` leaves it to the
    /// plain plan.
    pub(super) fn sliced(
        &mut self,
        a: &AggregatePlan,
        plan: &LogicalPlan,
        close: WindowClose,
    ) -> Result<Option<usize>> {
        let Some(slicing) = self.slicing(a)? else {
            return Ok(None);
        };
        let (first, parts) = self.slice_stage(&slicing, plan)?;
        Ok(Some(self.window_stage(
            slicing,
            (first, &parts),
            plan,
            close,
        )?))
    }

    fn slicing<'p>(&self, a: &'p AggregatePlan) -> Result<Option<Slicing<'p>>> {
        let Some((scan, window)) = window_scan_under(a) else {
            return Ok(None);
        };
        let WindowKind::Hop { slide, size } = window.spec.kind else {
            return Ok(None);
        };
        let whole_slices = slide > 0 && size > slide && size % slide == 0;
        if !whole_slices || !scan.filters.is_empty() || !self.is_append_only(&a.input) {
            return Ok(None);
        }
        let Some(groups) = group_columns(a, scan, &window) else {
            return Ok(None);
        };
        let Some(start) = groups.iter().find_map(|g| match g {
            GroupColumn::Start(at) => Some(*at),
            _ => None,
        }) else {
            return Ok(None);
        };
        if a.aggr_expr.iter().any(|e| reads_a_bound(e, scan, &window)) {
            return Ok(None);
        }
        let schema = a.input.schema();
        let aggs = a
            .aggr_expr
            .iter()
            .map(|e| self.aggregate(e, schema, true))
            .collect::<Result<Vec<_>>>()?;
        if !aggs.iter().all(combinable) {
            return Ok(None);
        }
        Ok(Some(Slicing {
            scan,
            window,
            slide,
            size,
            groups,
            start,
            aggs,
        }))
    }

    /// TUMBLE by the slide and the per-slice aggregate, whose rows are the
    /// plain group columns, the slice's start and one part per aggregate.
    fn slice_stage(&mut self, s: &Slicing<'_>, plan: &LogicalPlan) -> Result<(usize, Schema)> {
        let mut slices = s.window.clone();
        slices.spec.kind = WindowKind::Tumble {
            size: s.slide,
            offset: 0,
        };
        let input = self.window_scan_graced(s.scan, slices, s.size - s.slide)?;
        let scanned = s.scan.projected_schema.as_arrow();
        let columns: Vec<usize> = plain(&s.groups).chain([s.start]).collect();
        let groups = columns
            .iter()
            .map(|at| column(scanned.field(*at).name(), *at))
            .collect::<Vec<_>>();
        let types: Vec<DataType> = columns
            .iter()
            .map(|at| scanned.field(*at).data_type().clone())
            .collect();
        let mut fields: Vec<Field> = columns
            .iter()
            .map(|at| scanned.field(*at).clone().with_nullable(true))
            .collect();
        fields.extend(parts(plan, s.groups.len(), s.aggs.len()));
        let close = WindowClose {
            column: columns.len() - 1,
            offset: s.slide,
        };
        let aggs = s.aggs.clone();
        let schema = Schema::new(fields);
        let op = Aggregate::new(groups, types, aggs, Arc::new(schema.clone()))?
            .with_window(close, true)?;
        Ok((self.push(Box::new(op), vec![input]), schema))
    }

    /// HOP over the slices' rows, and the aggregate that combines them into
    /// the view's windows, with the plain plan's output.
    fn window_stage(
        &mut self,
        s: Slicing<'_>,
        (slices, slice_schema): (usize, &Schema),
        plan: &LogicalPlan,
        close: WindowClose,
    ) -> Result<usize> {
        let keys = plain(&s.groups).count();
        let width = keys + 1 + s.aggs.len();
        let spec = WindowSpec {
            kind: WindowKind::Hop {
                slide: s.slide,
                size: s.size,
            },
            time_column: keys,
        };
        let keep: Vec<usize> = (0..keys).chain(keys + 1..width).collect();
        let assign = WindowAssign::new(
            spec.clone(),
            spec.schema(slice_schema),
            self.view_name.clone(),
        )
        .keeping(keep)
        .quiet();
        let assigned = self.push(Box::new(assign), vec![slices]);
        let (starts, ends) = (width - 1, width);
        let mut next_plain = 0..keys;
        let groups = s
            .groups
            .iter()
            .map(|g| match g {
                GroupColumn::Plain(_) => {
                    let at = next_plain.next().expect("as many plain columns as counted");
                    column(slice_schema.field(at).name(), at)
                }
                GroupColumn::Start(_) => column(WINDOW_START, starts),
                GroupColumn::End(_) => column(WINDOW_END, ends),
            })
            .collect();
        let output = arrow_schema(plan);
        let types = (0..s.groups.len())
            .map(|i| output.field(i).data_type().clone())
            .collect();
        let aggs = s
            .aggs
            .iter()
            .enumerate()
            .map(|(i, spec)| {
                let part = slice_schema.field(keys + 1 + i).name();
                combine_spec(spec, part, keys + i, output.field(s.groups.len() + i))
            })
            .collect();
        let op = Aggregate::new(groups, types, aggs, output)?.with_window(close, true)?;
        Ok(self.push(Box::new(op), vec![assigned]))
    }
}

/// Each group expression as a column of the scan, if all are plain columns.
fn group_columns(
    a: &AggregatePlan,
    scan: &TableScan,
    window: &WindowTable,
) -> Option<Vec<GroupColumn>> {
    let schema = a.input.schema();
    a.group_expr
        .iter()
        .map(|expr| {
            let Expr::Column(c) = expr else {
                return None;
            };
            let at = schema.index_of_column(c).ok()?;
            let in_window = scan.projection.as_ref().map_or(at, |p| p[at]);
            Some(match bound_of(window, in_window) {
                Some(WINDOW_START) => GroupColumn::Start(at),
                Some(_) => GroupColumn::End(at),
                None => GroupColumn::Plain(at),
            })
        })
        .collect()
}

/// Whether an aggregate reads `window_start` or `window_end`, which differ
/// between a slice and its windows.
fn reads_a_bound(expr: &Expr, scan: &TableScan, window: &WindowTable) -> bool {
    let schema = scan.projected_schema.as_ref();
    expr.column_refs().into_iter().any(|c| {
        // By name: an alias over the window (`HOP(bids, ...)` keeps the
        // name `bids`) qualifies the columns otherwise than the scan.
        let Some(at) = schema.fields().iter().position(|f| f.name() == &c.name) else {
            return true;
        };
        let in_window = scan.projection.as_ref().map_or(at, |p| p[at]);
        bound_of(window, in_window).is_some()
    })
}

/// Aggregates whose value over a window follows from their values over its
/// slices, exactly. Floating-point sums are left out: adding in another
/// order could change their last digits.
fn combinable(spec: &AggSpec) -> bool {
    match spec.kind {
        AggKind::CountStar | AggKind::Count | AggKind::Min | AggKind::Max => {
            spec.accumulator.is_none()
        }
        AggKind::Sum => spec.arg_type.is_integer() || spec.arg_type.is_decimal(),
        AggKind::CountDistinct | AggKind::Avg | AggKind::Accumulator => false,
    }
}

fn plain(groups: &[GroupColumn]) -> impl Iterator<Item = usize> + '_ {
    groups.iter().filter_map(|g| match g {
        GroupColumn::Plain(at) => Some(*at),
        _ => None,
    })
}

fn column(name: &str, at: usize) -> Arc<dyn PhysicalExpr> {
    Arc::new(PhysicalColumn::new(name, at))
}

/// The slices' part of each aggregate, typed like the aggregate's result.
fn parts(plan: &LogicalPlan, groups: usize, aggs: usize) -> impl Iterator<Item = Field> + '_ {
    let output = plan.schema().as_arrow();
    (0..aggs).map(move |i| {
        let result = output.field(groups + i).data_type().clone();
        Field::new(format!("part{i}"), result, true)
    })
}

/// The aggregate that combines slices' parts, read from column `at`.
fn combine_spec(spec: &AggSpec, part: &str, at: usize, result: &Field) -> AggSpec {
    let kind = match spec.kind {
        AggKind::Min => AggKind::Min,
        AggKind::Max => AggKind::Max,
        _ => AggKind::Sum,
    };
    AggSpec {
        kind,
        append_only: true,
        arg: Some(column(part, at)),
        arg_type: result.data_type().clone(),
        accumulator: None,
        presence: None,
    }
}
