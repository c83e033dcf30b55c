//! Window functions over partitions (`row_number() OVER (PARTITION BY a
//! ORDER BY b)`, `lag`, `sum(x) OVER (...)`) and `ORDER BY ... LIMIT n`.
//!
//! A change to one row can move the answer for every row of its partition
//! (a new first row renumbers the rest), so the operator keeps each
//! partition's rows in state and, at a barrier, evaluates every partition
//! the epoch touched twice: as it was and as it is. What differs goes
//! downstream. DataFusion's window expressions do the evaluating, on the
//! partition's rows sorted as the expression orders them.
//!
//! The cost of an epoch is the size of the partitions it touched: small
//! partitions (a top-N per group) are cheap; a window over the whole input
//! (no `PARTITION BY`, or a global `ORDER BY ... LIMIT`) evaluates all of
//! it at each epoch that changes it.

use crate::dataflow::operators::FastMap;
use std::sync::Arc;

use datafusion::arrow::array::{
    ArrayRef, Int64Array, RecordBatch, RecordBatchOptions, UInt32Array,
};
use datafusion::arrow::compute::{SortColumn, lexsort_to_indices, take, take_record_batch};
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::row::{RowConverter, SortField};
use datafusion::physical_expr::{LexOrdering, PhysicalExpr, PhysicalSortExpr};
use datafusion::physical_plan::WindowExpr;

use crate::dataflow::change::ChangeBatch;
use crate::dataflow::operator::{Context, Operator};
use crate::dataflow::state::read_count;
use crate::error::Result;

mod recompute;

pub use recompute::{Recompute, Recomputed};

/// What a partition's rows become.
pub enum Evaluate {
    /// The input's columns, then one column per window expression.
    Window(Vec<Arc<dyn WindowExpr>>),
    /// The rows ranked `skip + 1` to `skip + fetch` in `order`.
    TopN {
        order: Vec<PhysicalSortExpr>,
        skip: usize,
        fetch: Option<usize>,
    },
    /// One row per partition (a group): its aggregates, computed again.
    Aggregate(Recompute),
    /// The partition's rows and those that fill the gaps between them.
    GapFill(crate::dataflow::gap_fill::GapFill),
}

/// Marks, in state, that a global aggregate has emitted its row: no
/// partition's length prefix is all ones.
const STARTED: [u8; 4] = [0xff; 4];

pub struct Over {
    partition: Vec<Arc<dyn PhysicalExpr>>,
    keys: RowConverter,
    rows: RowConverter,
    output_rows: RowConverter,
    input: SchemaRef,
    output: SchemaRef,
    evaluate: Evaluate,
    /// This epoch's changes, per partition key, per encoded row.
    pending: FastMap<Vec<u8>, FastMap<Vec<u8>, i64>>,
    /// Whether a global aggregate's first row is known to be out.
    started: bool,
}

impl Over {
    pub fn new(
        partition: Vec<Arc<dyn PhysicalExpr>>,
        input: SchemaRef,
        output: SchemaRef,
        evaluate: Evaluate,
    ) -> Result<Over> {
        let key_fields = partition
            .iter()
            .map(|e| Ok(SortField::new(e.data_type(&input)?)))
            .collect::<Result<Vec<_>>>()?;
        Ok(Over {
            keys: RowConverter::new(key_fields)?,
            rows: converter(&input)?,
            output_rows: converter(&output)?,
            partition,
            input,
            output,
            evaluate,
            pending: FastMap::default(),
            started: false,
        })
    }

    /// A partition's rows in state: its key, length-prefixed so that no
    /// partition's range holds another's.
    fn partition_prefix(&self, cx: &Context<'_>, key: &[u8]) -> Vec<u8> {
        let mut out = cx.key(&(key.len() as u32).to_be_bytes());
        out.extend_from_slice(key);
        out
    }

    /// Whether this is a global aggregate whose one row has yet to go out
    /// (it has one even before any input); notes that it will now.
    fn first_global_row(&mut self, cx: &mut Context<'_>) -> Result<bool> {
        if self.started {
            return Ok(false);
        }
        self.started = true;
        let Evaluate::Aggregate(recompute) = &self.evaluate else {
            return Ok(false);
        };
        let marker = cx.key(&STARTED);
        if !recompute.groups.is_empty() || cx.state.get(&marker)?.is_some() {
            return Ok(false);
        }
        cx.state.put(marker, Vec::new());
        Ok(true)
    }

    /// Apply a partition's changes and send how its output changed; a
    /// `fresh` partition has sent nothing yet.
    fn settle(
        &self,
        key: &[u8],
        changes: FastMap<Vec<u8>, i64>,
        fresh: bool,
        cx: &mut Context<'_>,
    ) -> Result<()> {
        let prefix = self.partition_prefix(cx, key);
        let upper = crate::state::keys::prefix_end(&prefix);
        let mut old: Vec<(Vec<u8>, i64)> = Vec::new();
        for (stored, value) in cx.state.scan(&prefix, &upper)? {
            old.push((stored[prefix.len()..].to_vec(), read_count(&value)?));
        }
        let mut new: FastMap<Vec<u8>, i64> = old.iter().cloned().collect();
        for (row, diff) in &changes {
            *new.entry(row.clone()).or_insert(0) += diff;
        }
        for row in changes.into_keys() {
            let count = new.get(&row).copied().unwrap_or(0);
            let mut state_key = prefix.clone();
            state_key.extend_from_slice(&row);
            match count > 0 {
                true => cx.state.put(state_key, count.to_le_bytes().to_vec()),
                false => cx.state.delete(state_key),
            }
        }
        let mut new: Vec<(Vec<u8>, i64)> = new.into_iter().filter(|(_, n)| *n > 0).collect();
        // In the order of the stored rows, as `old` is: an order-sensitive
        // result (array_agg, or row_number among ties) must come out the
        // same from the same rows, or its retraction would miss.
        new.sort_unstable();
        let mut out: FastMap<Vec<u8>, i64> = FastMap::default();
        for (rows, sign) in [(old, -1), (new, 1)] {
            if fresh && sign < 0 {
                continue;
            }
            let result = self.compute(&rows)?;
            for row in encode(&self.output_rows, &result)? {
                *out.entry(row).or_insert(0) += sign;
            }
        }
        out.retain(|_, diff| *diff != 0);
        self.emit(out, cx)
    }

    fn emit(&self, out: FastMap<Vec<u8>, i64>, cx: &mut Context<'_>) -> Result<()> {
        if out.is_empty() {
            return Ok(());
        }
        let (rows, diffs): (Vec<&[u8]>, Vec<i64>) = out
            .iter()
            .map(|(row, diff)| (row.as_slice(), *diff))
            .unzip();
        let batch = decode(&self.output_rows, &self.output, &rows)?;
        cx.emit(ChangeBatch::new(batch, Int64Array::from(diffs))?);
        Ok(())
    }

    /// A partition's output for its rows, each repeated as often as it occurs.
    fn compute(&self, rows: &[(Vec<u8>, i64)]) -> Result<RecordBatch> {
        // DataFusion's window expressions fail on no rows; no rows answer
        // nothing, but for a global aggregate.
        if rows.is_empty() && !matches!(self.evaluate, Evaluate::Aggregate(_)) {
            return Ok(RecordBatch::new_empty(self.output.clone()));
        }
        let mut repeated: Vec<&[u8]> = Vec::new();
        for (row, count) in rows {
            for _ in 0..*count {
                repeated.push(row);
            }
        }
        let batch = decode(&self.rows, &self.input, &repeated)?;
        match &self.evaluate {
            Evaluate::Window(exprs) => self.windows(exprs, batch),
            Evaluate::TopN { order, skip, fetch } => top_n(order, *skip, *fetch, batch),
            Evaluate::Aggregate(recompute) => recompute.evaluate(&batch, &self.output),
            Evaluate::GapFill(spec) => spec.fill(&batch),
        }
    }

    fn windows(&self, exprs: &[Arc<dyn WindowExpr>], batch: RecordBatch) -> Result<RecordBatch> {
        let mut columns: Vec<ArrayRef> = batch.columns().to_vec();
        for expr in exprs {
            let order: Vec<PhysicalSortExpr> = expr
                .partition_by()
                .iter()
                .map(|e| PhysicalSortExpr::new_default(e.clone()))
                .chain(expr.order_by().iter().cloned())
                .collect();
            let Some(indices) = sort_indices(&order, &batch)? else {
                columns.push(expr.evaluate(&batch)?);
                continue;
            };
            let sorted = take_record_batch(&batch, &indices)?;
            let values = expr.evaluate(&sorted)?;
            columns.push(take(&values, &inverse(&indices), None)?);
        }
        Ok(RecordBatch::try_new(self.output.clone(), columns)?)
    }
}

/// A batch's rows, encoded; a batch without columns (a `LIMIT` whose
/// columns all went unused) has empty rows, as many as it counts.
fn encode(converter: &RowConverter, batch: &RecordBatch) -> Result<Vec<Vec<u8>>> {
    if batch.num_columns() == 0 {
        return Ok(vec![Vec::new(); batch.num_rows()]);
    }
    let rows = converter.convert_columns(batch.columns())?;
    Ok(rows.iter().map(|r| r.as_ref().to_vec()).collect())
}

/// Encoded rows as a batch of `schema`; see [`encode`].
fn decode(converter: &RowConverter, schema: &SchemaRef, rows: &[&[u8]]) -> Result<RecordBatch> {
    if schema.fields().is_empty() {
        let options = RecordBatchOptions::new().with_row_count(Some(rows.len()));
        return Ok(RecordBatch::try_new_with_options(
            schema.clone(),
            Vec::new(),
            &options,
        )?);
    }
    let parser = converter.parser();
    let columns = converter.convert_rows(rows.iter().map(|r| parser.parse(r)))?;
    Ok(RecordBatch::try_new(schema.clone(), columns)?)
}

/// Rows of `schema` in Arrow's row format, every column in its default order.
pub(crate) fn converter(schema: &SchemaRef) -> Result<RowConverter> {
    let fields = schema
        .fields()
        .iter()
        .map(|f| SortField::new(f.data_type().clone()))
        .collect();
    Ok(RowConverter::new(fields)?)
}

/// The order that sorts `batch` by `order`; `None` when there is no order.
fn sort_indices(order: &[PhysicalSortExpr], batch: &RecordBatch) -> Result<Option<UInt32Array>> {
    if order.is_empty() {
        return Ok(None);
    }
    let mut columns = order
        .iter()
        .map(|e| e.evaluate_to_sort_column(batch))
        .collect::<datafusion::error::Result<Vec<SortColumn>>>()?;
    // Ties keep the rows' stored order, which is their key's order (as
    // RisingWave numbers ties by primary key): Arrow's sort is not stable,
    // and row_number among ties would otherwise change between epochs.
    columns.push(SortColumn {
        values: Arc::new(UInt32Array::from_iter_values(0..batch.num_rows() as u32)),
        options: None,
    });
    Ok(Some(lexsort_to_indices(&columns, None)?))
}

/// The permutation that undoes `indices`.
fn inverse(indices: &UInt32Array) -> UInt32Array {
    let mut out = vec![0u32; indices.len()];
    for (at, from) in indices.values().iter().enumerate() {
        out[*from as usize] = at as u32;
    }
    UInt32Array::from(out)
}

fn top_n(
    order: &[PhysicalSortExpr],
    skip: usize,
    fetch: Option<usize>,
    batch: RecordBatch,
) -> Result<RecordBatch> {
    let rows = batch.num_rows();
    let end = fetch.map_or(rows, |f| skip.saturating_add(f).min(rows));
    let start = skip.min(end);
    let all: UInt32Array = match sort_indices(order, &batch)? {
        Some(indices) => indices,
        None => UInt32Array::from_iter_values(0..rows as u32),
    };
    let kept = all.slice(start, end - start);
    if batch.num_columns() == 0 {
        let options = RecordBatchOptions::new().with_row_count(Some(kept.len()));
        return Ok(RecordBatch::try_new_with_options(
            batch.schema(),
            Vec::new(),
            &options,
        )?);
    }
    Ok(take_record_batch(&batch, &kept)?)
}

impl Operator for Over {
    fn name(&self) -> &'static str {
        match self.evaluate {
            Evaluate::Window(_) => "Over",
            Evaluate::TopN { .. } => "TopN",
            Evaluate::Aggregate(_) => "RecomputedAggregate",
            Evaluate::GapFill(_) => "GapFill",
        }
    }

    fn describe(&self) -> String {
        match &self.evaluate {
            Evaluate::Window(exprs) => exprs
                .iter()
                .map(|e| e.name().to_string())
                .collect::<Vec<_>>()
                .join(", "),
            Evaluate::TopN { order, skip, fetch } => {
                let order = LexOrdering::new(order.iter().cloned())
                    .map_or_else(String::new, |o| o.to_string());
                format!("order by {order}, skip {skip}, fetch {fetch:?}")
            }
            Evaluate::Aggregate(recompute) => recompute
                .aggregates
                .iter()
                .map(|a| a.function.name().to_string())
                .collect::<Vec<_>>()
                .join(", "),
            Evaluate::GapFill(spec) => format!(
                "by {}, every {} us",
                self.input.field(spec.time_column).name(),
                spec.step
            ),
        }
    }

    fn on_changes(
        &mut self,
        _input: usize,
        batch: ChangeBatch,
        _cx: &mut Context<'_>,
    ) -> Result<()> {
        let rows = batch.rows();
        let keys = self
            .partition
            .iter()
            .map(|e| Ok(e.evaluate(rows)?.into_array(rows.num_rows())?))
            .collect::<Result<Vec<ArrayRef>>>()?;
        // Without columns a row converter cannot tell how many rows it has.
        let keys = (!keys.is_empty())
            .then(|| self.keys.convert_columns(&keys))
            .transpose()?;
        let encoded = encode(&self.rows, rows)?;
        for (i, diff) in batch.diffs().values().iter().enumerate() {
            let key = keys
                .as_ref()
                .map_or(Vec::new(), |k| k.row(i).as_ref().to_vec());
            let partition = self.pending.entry(key).or_default();
            *partition.entry(encoded[i].clone()).or_insert(0) += diff;
        }
        Ok(())
    }

    fn on_barrier(
        &mut self,
        _barrier: crate::dataflow::change::Barrier,
        cx: &mut Context<'_>,
    ) -> Result<()> {
        let fresh = self.first_global_row(cx)?;
        if fresh {
            self.pending.entry(Vec::new()).or_default();
        }
        for (key, changes) in std::mem::take(&mut self.pending) {
            if changes.values().all(|d| *d == 0) && !fresh {
                continue;
            }
            self.settle(&key, changes, fresh, cx)?;
        }
        Ok(())
    }
}
