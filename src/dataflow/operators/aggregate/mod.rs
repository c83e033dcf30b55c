//! GROUP BY with count, count(DISTINCT), sum, avg, min and max, exact under
//! deletes.
//!
//! # Algorithm
//! Each input row adds its weight to its group: the group's row count, and
//! each aggregate's running state. Groups are kept in memory (up to
//! [`CACHE_GROUPS`] of them, beyond which the half with the smallest keys
//! is written back and dropped) and marked when touched; at the barrier the
//! operator emits, per touched group, a retraction of the row it last
//! emitted and the group's new row (nothing when they are equal), and
//! writes the group back to state, which is the truth after a restart.
//! The new rows of all touched groups are built as columns together, not
//! one row at a time. A group whose row count
//! drops to zero disappears (except the single group of an aggregate without
//! GROUP BY, which always has a row, as in SQL).
//!
//! min, max and count(DISTINCT) keep a multiset of values per group, so a
//! deleted minimum is replaced by the next one instead of recomputing.
//!
//! # Windows
//! When the group key holds a window bound (`window_start` or `window_end`
//! of a window function), every group has a closing time: the window's end.
//! Group keys then start with that time, so the groups whose window the
//! watermark has passed form one key range; they are emitted (`EMIT ON
//! WINDOW CLOSE`: one final row each, and nothing before) and their state is
//! deleted, which keeps state bounded on an endless stream. Rows for a window
//! that is already final never arrive: the window operator drops them.
//!
//! The cache files windowed groups by closing time, so a watermark visits
//! the closing groups alone. A group that opens and closes within one epoch
//! never reaches state: nothing is written for it, and nothing deleted.
//! State is read at a close only for groups the horizon (below) leaves out
//! of memory, and never below the floor, the bound of the last close: state
//! holds nothing under it.
//!
//! # Reads the cache saves
//! A group missing from the cache is read from state, unless the operator
//! knows state cannot hold it: every stored group with a key above a
//! horizon is also in the cache, and only the smallest keys ever leave it.
//! A fresh operator's horizon is below every key; windowed keys lead with
//! the closing time, so a new window's groups fall above the horizon and
//! cost no read.
//!
//! # State layout (under the operator's prefix)
//! - `g` ++ group key -> [`GroupState`](codec::GroupState) ++ the last
//!   emitted row (row format); for windowed groups the group key starts with
//!   the closing time (8 bytes, order-preserving)
//! - `m` ++ aggregate index (u8) ++ group key length (u32 BE) ++ group key ++
//!   value (row format, so keys sort by value) -> multiplicity (i64 BE)

mod cache;
mod codec;
mod groups;
mod input;
mod multiset;
mod output;
mod presence;
mod session;
mod window;

use std::sync::Arc;

use datafusion::arrow::datatypes::{DataType, SchemaRef};
use datafusion::arrow::row::{RowConverter, SortField};
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_expr::aggregate::AggregateFunctionExpr;

use crate::dataflow::change::{ChangeBatch, Watermark};
use crate::dataflow::operator::{Context, Operator};
use crate::dataflow::operators::FastMap;
use crate::error::Result;
use groups::{Groups, Horizon};
pub use session::{SessionAggregate, SessionColumn};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AggKind {
    CountStar,
    Count,
    CountDistinct,
    Sum,
    Avg,
    Min,
    Max,
    /// Any DataFusion aggregate, through its accumulator (append-only input).
    Accumulator,
}

#[derive(Clone)]
pub struct AggSpec {
    pub kind: AggKind,
    /// The input never retracts, so min and max need no multiset.
    pub append_only: bool,
    /// The argument; `None` for count(*).
    pub arg: Option<Arc<dyn PhysicalExpr>>,
    pub arg_type: DataType,
    /// For [`AggKind::Accumulator`]: the aggregate, with its arguments.
    pub accumulator: Option<Arc<AggregateFunctionExpr>>,
    /// count(DISTINCT) over append-only input, planned from revision 3 on:
    /// its argument without FILTER. Those with equal ones share one record
    /// of the values seen (see `presence`).
    pub presence: Option<Arc<dyn PhysicalExpr>>,
}

/// Groups kept in memory between barriers; beyond this the half with the
/// smallest keys is dropped.
pub const CACHE_GROUPS: usize = 100_000;

/// Where a windowed group's closing time comes from: a group column holding
/// a window bound, plus what lies between that bound and the window's end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WindowClose {
    /// Index of the group expression.
    pub column: usize,
    /// Microseconds from the column's value to the window's end.
    pub offset: i64,
}

pub struct Aggregate {
    groups: Vec<Arc<dyn PhysicalExpr>>,
    group_types: Vec<DataType>,
    /// Set when groups belong to windows.
    window: Option<WindowClose>,
    /// Emit a group once, when its window closes, instead of at every change.
    on_close: bool,
    /// Group keys in row format; windowed keys lead with the closing time.
    group_keys: RowConverter,
    aggs: Vec<AggSpec>,
    /// Per aggregate with a multiset: the converter for its values.
    values: Vec<Option<RowConverter>>,
    /// Per accumulator aggregate: the converter for its state.
    states: Vec<Option<RowConverter>>,
    schema: SchemaRef,
    /// `schema` with every column nullable, for the batches it emits.
    nullable_schema: SchemaRef,
    output: RowConverter,
    /// Groups in memory.
    groups_cache: Groups,
    /// Which stored groups are known to be in the cache.
    horizon: Horizon,
    /// State holds no group with a key below this one: every window
    /// before it has closed and been deleted.
    floor: Vec<u8>,
    /// Most groups kept in memory.
    cache_limit: usize,
    /// Pending multiset changes: (aggregate, group key) -> value -> weight.
    multiset: FastMap<(usize, Vec<u8>), FastMap<Vec<u8>, i64>>,
    /// count(DISTINCT) multiplicities this epoch set, per (aggregate,
    /// group), written as the epoch ends.
    distinct: FastMap<(usize, Vec<u8>), FastMap<Vec<u8>, multiset::Held>>,
    /// count(DISTINCT) over append-only input: the values groups have seen.
    presence: presence::Presence,
    /// The last watermark: windows closing by it are final.
    closed_to: Option<i64>,
}

impl Aggregate {
    pub fn new(
        groups: Vec<Arc<dyn PhysicalExpr>>,
        group_types: Vec<DataType>,
        aggs: Vec<AggSpec>,
        schema: SchemaRef,
    ) -> Result<Aggregate> {
        let group_keys =
            RowConverter::new(group_types.iter().cloned().map(SortField::new).collect())?;
        let values = aggs
            .iter()
            .map(|a| match a.kind {
                AggKind::Min | AggKind::Max | AggKind::CountDistinct => {
                    RowConverter::new(vec![SortField::new(a.arg_type.clone())]).map(Some)
                }
                _ => Ok(None),
            })
            .collect::<Result<_, _>>()?;
        let states = aggs
            .iter()
            .map(|a| match &a.accumulator {
                Some(aggregate) => {
                    let fields = aggregate
                        .state_fields()?
                        .iter()
                        .map(|f| SortField::new(f.data_type().clone()))
                        .collect();
                    Ok(Some(RowConverter::new(fields)?))
                }
                None => Ok(None),
            })
            .collect::<Result<_>>()?;
        let output = RowConverter::new(
            schema
                .fields()
                .iter()
                .map(|f| SortField::new(f.data_type().clone()))
                .collect(),
        )?;
        let presence = presence::Presence::new(&aggs)?;
        Ok(Aggregate {
            groups,
            states,
            group_types,
            window: None,
            on_close: false,
            group_keys,
            aggs,
            values,
            nullable_schema: crate::catalog::nullable(&schema),
            schema,
            output,
            groups_cache: Groups::default(),
            horizon: Horizon::Unknown,
            floor: Vec::new(),
            cache_limit: CACHE_GROUPS,
            multiset: FastMap::default(),
            distinct: FastMap::default(),
            presence,
            closed_to: None,
        })
    }

    /// Make groups windowed; `on_close` holds each group back until its window closes.
    pub fn with_window(mut self, window: WindowClose, on_close: bool) -> Result<Aggregate> {
        let mut fields = vec![SortField::new(DataType::Int64)];
        fields.extend(self.group_types.iter().cloned().map(SortField::new));
        self.group_keys = RowConverter::new(fields)?;
        self.window = Some(window);
        self.on_close = on_close;
        Ok(self)
    }

    fn is_global(&self) -> bool {
        self.groups.is_empty()
    }
}

impl Operator for Aggregate {
    fn name(&self) -> &'static str {
        "HashAggregate"
    }

    fn describe(&self) -> String {
        let groups: Vec<String> = self.groups.iter().map(|g| g.to_string()).collect();
        let aggs: Vec<String> = self
            .aggs
            .iter()
            .map(|a| match (&a.accumulator, &a.arg) {
                (Some(aggregate), _) => format!("Accumulator({})", aggregate.name()),
                (None, Some(arg)) => format!("{:?}({arg})", a.kind),
                (None, None) => format!("{:?}", a.kind),
            })
            .collect();
        let window = match (self.window, self.on_close) {
            (Some(_), true) => " emit=on window close",
            (Some(_), false) => " windowed",
            (None, _) => "",
        };
        format!(
            "group=[{}] aggs=[{}]{}{window}",
            groups.join(", "),
            aggs.join(", "),
            self.presence
        )
    }

    fn on_changes(
        &mut self,
        _input: usize,
        batch: ChangeBatch,
        cx: &mut Context<'_>,
    ) -> Result<()> {
        self.add_batch(batch, cx)
    }

    fn on_barrier(
        &mut self,
        _barrier: crate::dataflow::change::Barrier,
        cx: &mut Context<'_>,
    ) -> Result<()> {
        if self.is_global() && !self.groups_cache.contains(&[]) {
            // The single group of a global aggregate exists from the start.
            self.slot(&[], cx)?;
        }
        self.flush(cx, true)?;
        self.write_distinct(cx);
        Ok(())
    }

    fn on_watermark(&mut self, wm: Watermark, cx: &mut Context<'_>) -> Result<Option<Watermark>> {
        if self.window.is_some() {
            self.close_windows(wm.micros, cx)?;
            self.closed_to = Some(wm.micros);
        }
        Ok(Some(wm))
    }
}

#[cfg(test)]
mod tests;
