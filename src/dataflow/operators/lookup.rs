//! Lookup joins: `stream JOIN t FOR SYSTEM_TIME AS OF PROCTIME() AS d ON ...`.
//!
//! # Algorithm
//! Each batch of stream changes is joined with the table's rows as they are
//! when the batch is processed: the operator reads the table's committed
//! rows, runs the lookup side's projections and filters over them, and
//! matches by key. Later changes to the table never rewrite earlier
//! results. Over an append-only stream it keeps no state at all; over a
//! stream that retracts rows it keeps what each row was joined with, so
//! that a retraction takes back exactly that, whatever the table holds by
//! then. A LEFT lookup join pads stream rows without a match with NULLs.

use crate::dataflow::operators::FastMap;
use std::sync::Arc;

use datafusion::arrow::array::{ArrayRef, Int64Array, RecordBatch, UInt32Array, new_null_array};
use datafusion::arrow::compute::{cast, take_arrays};
use datafusion::arrow::datatypes::{DataType, SchemaRef};
use datafusion::arrow::row::{RowConverter, SortField};
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_expr::expressions::Column;

use crate::catalog::Table;
use crate::dataflow::change::{ChangeBatch, evaluate_all};
use crate::dataflow::index_read::{IndexRead, KeyRange};
use crate::dataflow::operator::{Context, Operator};
use crate::dataflow::operators::join::Side;
use crate::dataflow::operators::materialize::expand_row;
use crate::dataflow::state::read_count;
use crate::error::Result;
use crate::log::embedded;
use crate::state::{CF_ROWS, ReadView, cf, keys};

/// One step from the table's rows to the lookup side's rows.
pub enum Step {
    /// Keep these columns.
    Columns(Vec<usize>, SchemaRef),
    Filter(Arc<dyn PhysicalExpr>),
    Project(Vec<Arc<dyn PhysicalExpr>>, SchemaRef),
}

pub struct LookupJoin {
    table: Arc<Table>,
    /// From the table's rows to the lookup side, bottom up.
    steps: Vec<Step>,
    stream_keys: Vec<Arc<dyn PhysicalExpr>>,
    lookup_keys: Vec<Arc<dyn PhysicalExpr>>,
    key_rows: RowConverter,
    residual: Option<Arc<dyn PhysicalExpr>>,
    /// Stream columns then lookup columns, all nullable.
    schema: SchemaRef,
    /// LEFT: stream rows without a match go out padded with NULLs.
    pad: bool,
    /// The primary key's types, when the ON clause names the whole primary
    /// key of a keyed table: each batch then reads only its keys' rows.
    point: Option<Vec<DataType>>,
    /// For a stream that retracts: what each of its rows was joined with.
    memory: Option<Memory>,
    /// An index whose leading columns the ON clause pins, when the primary
    /// key is not pinned: each batch then reads only its keys' ranges.
    index: Option<IndexLookup>,
}

/// Reading the table through an index: the index, and for each of its
/// leading columns that the ON clause pins, which lookup key pins it.
struct IndexLookup {
    read: IndexRead,
    keys: Vec<usize>,
    types: Vec<DataType>,
}

/// The lookup side of a join, as the planner describes it.
pub struct Lookup {
    pub table: Arc<Table>,
    pub steps: Vec<Step>,
    pub keys: Vec<Arc<dyn PhysicalExpr>>,
    /// The table's indexes when the join was planned.
    pub indexes: Vec<IndexRead>,
}

impl LookupJoin {
    /// `stream` is the other side of the join: its keys and schema.
    pub fn new(
        stream: Side,
        lookup: Lookup,
        residual: Option<Arc<dyn PhysicalExpr>>,
        schema: SchemaRef,
        pad: bool,
    ) -> Result<LookupJoin> {
        let key_types = stream
            .keys
            .iter()
            .map(|k| Ok(SortField::new(k.data_type(&stream.schema)?)))
            .collect::<Result<Vec<_>>>()?;
        let point = point_lookup(&lookup);
        let index = match point {
            Some(_) => None,
            None => index_lookup(&lookup),
        };
        Ok(LookupJoin {
            point,
            index,
            table: lookup.table,
            steps: lookup.steps,
            stream_keys: stream.keys,
            lookup_keys: lookup.keys,
            key_rows: RowConverter::new(key_types)?,
            residual,
            schema: crate::catalog::nullable(&schema),
            pad,
            memory: None,
        })
    }

    /// The lookup side's rows now: the table's committed rows (only those
    /// under `keys` when they are primary keys), stepped.
    fn current(&self, cx: &mut Context<'_>, keys: &[ArrayRef]) -> Result<RecordBatch> {
        let indexed = match &self.index {
            Some(index) => index.rows_under(cx, keys)?,
            None => None,
        };
        let mut batch = match indexed {
            Some(batch) => batch,
            None => {
                let rows = match &self.point {
                    Some(types) => self.rows_under(cx, keys, types)?,
                    None => self.all_rows(cx)?,
                };
                self.table.codec.decode(rows.iter().map(Vec::as_slice))?
            }
        };
        for step in &self.steps {
            batch = match step {
                Step::Columns(columns, schema) => {
                    let arrays = columns.iter().map(|c| batch.column(*c).clone()).collect();
                    RecordBatch::try_new(schema.clone(), arrays)?
                }
                Step::Filter(predicate) => ChangeBatch::inserts(batch)
                    .filter(predicate, &mut cx.state.errors)?
                    .rows()
                    .clone(),
                Step::Project(exprs, schema) => {
                    let columns = evaluate_all(exprs, &batch, &mut cx.state.errors)?;
                    RecordBatch::try_new(schema.clone(), columns)?
                }
            };
        }
        Ok(batch)
    }

    /// The stored rows under the batch's keys, each key read once.
    fn rows_under(
        &self,
        cx: &Context<'_>,
        keys: &[ArrayRef],
        types: &[DataType],
    ) -> Result<Vec<Vec<u8>>> {
        let columns = keys
            .iter()
            .zip(types)
            .map(|(k, t)| cast(k, t))
            .collect::<std::result::Result<Vec<_>, _>>()?;
        let encoded = self.table.codec.encode_key_columns(&columns)?;
        let mut wanted: Vec<Vec<u8>> = (0..encoded.num_rows())
            .filter(|i| columns.iter().all(|c| c.is_valid(*i)))
            .map(|i| keys::row_key(self.table.def.id, encoded.row(i).data()))
            .collect();
        wanted.sort();
        wanted.dedup();
        let db = cx.state.db();
        let family = cf(db, CF_ROWS);
        let mut rows = Vec::new();
        for found in db.multi_get_cf(wanted.iter().map(|k| (family, k))) {
            if let Some(value) = found? {
                rows.push(value);
            }
        }
        Ok(rows)
    }

    fn all_rows(&self, cx: &Context<'_>) -> Result<Vec<Vec<u8>>> {
        if self.table.def.contents_in_log() {
            return self.logged_rows(cx);
        }
        let db = cx.state.db();
        let prefix = keys::table_prefix(self.table.def.id);
        let mut options = rocksdb::ReadOptions::default();
        options.set_iterate_range(prefix.clone()..keys::prefix_end(&prefix));
        let mut iter = db.raw_iterator_cf_opt(cf(db, CF_ROWS), options);
        iter.seek(&prefix);
        let mut rows = Vec::new();
        while let Some(value) = iter.value() {
            expand_row(&self.table, value, &mut rows)?;
            iter.next();
        }
        iter.status()?;
        Ok(rows)
    }

    /// Every row of a view kept as its changelog alone.
    fn logged_rows(&self, cx: &Context<'_>) -> Result<Vec<Vec<u8>>> {
        let view = ReadView::new(cx.state.db().clone(), |db| db.snapshot());
        let mut rows = Vec::new();
        for partition in 0..self.table.def.partitions.max(1) {
            embedded::read_partition(
                &view,
                self.table.def.log_topic(),
                partition,
                0,
                |_, chunk| {
                    rows.extend(chunk.added_rows().map(<[u8]>::to_vec));
                    Ok(true)
                },
            )?;
        }
        Ok(rows)
    }
}

impl Operator for LookupJoin {
    fn name(&self) -> &'static str {
        "LookupJoin"
    }

    fn describe(&self) -> String {
        let keys = |exprs: &[Arc<dyn PhysicalExpr>]| {
            exprs
                .iter()
                .map(|k| k.to_string())
                .collect::<Vec<_>>()
                .join(", ")
        };
        let kind = if self.pad { "left" } else { "inner" };
        let through;
        let read = match (&self.point, &self.index) {
            (Some(_), _) => "primary-key reads",
            (None, Some(index)) => {
                through = format!("reads through index {}", index.read.index.def.name);
                &through
            }
            (None, None) => "a scan a batch",
        };
        format!(
            "{kind} on [{}] = {}[{}] as of processing time, {read}",
            keys(&self.stream_keys),
            self.table.def.name,
            keys(&self.lookup_keys)
        )
    }

    fn on_changes(
        &mut self,
        _input: usize,
        batch: ChangeBatch,
        cx: &mut Context<'_>,
    ) -> Result<()> {
        let Some(memory) = &self.memory else {
            for (joined, _) in self.join_now(&batch, cx)? {
                cx.emit(joined);
            }
            return Ok(());
        };
        let diffs = batch.diffs().values();
        let taken = |positive: bool| {
            let at: Vec<u32> = (0..diffs.len() as u32)
                .filter(|i| (diffs[*i as usize] > 0) == positive)
                .collect();
            batch.take(&UInt32Array::from(at))
        };
        let (added, removed) = (taken(true)?, taken(false)?);
        if removed.rows().num_rows() > 0 {
            let retracted = memory.retract(&removed, cx)?;
            cx.emit(retracted);
        }
        if added.rows().num_rows() > 0 {
            for (joined, from) in self.join_now(&added, cx)? {
                memory.remember(&added, &joined, &from, cx)?;
                cx.emit(joined);
            }
        }
        Ok(())
    }
}

impl LookupJoin {
    /// A stream that retracts rows: each row's output is kept, so that its
    /// retraction takes back what it was joined with, whatever the table
    /// holds by then.
    pub fn remembering(mut self, stream: &SchemaRef) -> Result<LookupJoin> {
        self.memory = Some(Memory::new(stream, &self.schema)?);
        Ok(self)
    }

    /// `batch` joined with the table as it is now, and for each output
    /// row, the stream row it came from.
    fn join_now(
        &self,
        batch: &ChangeBatch,
        cx: &mut Context<'_>,
    ) -> Result<Vec<(ChangeBatch, Vec<u32>)>> {
        let stream_keys = evaluate_all(&self.stream_keys, batch.rows(), &mut cx.state.errors)?;
        let table = self.current(cx, &stream_keys)?;
        let table_keys = evaluate_all(&self.lookup_keys, &table, &mut cx.state.errors)?;
        let table_rows = self.key_rows.convert_columns(&table_keys)?;
        let mut index: FastMap<&[u8], Vec<u32>> = FastMap::default();
        for i in 0..table.num_rows() {
            if table_keys.iter().all(|c| c.is_valid(i)) {
                index
                    .entry(table_rows.row(i).data())
                    .or_default()
                    .push(i as u32);
            }
        }
        let rows = batch.rows();
        let stream_rows = self.key_rows.convert_columns(&stream_keys)?;
        let (mut mine, mut theirs) = (Vec::new(), Vec::new());
        for i in 0..rows.num_rows() {
            let valid = stream_keys.iter().all(|c| c.is_valid(i));
            let found = valid
                .then(|| index.get(stream_rows.row(i).data()))
                .flatten();
            for j in found.into_iter().flatten() {
                mine.push(i as u32);
                theirs.push(*j);
            }
        }
        let mut columns = take_arrays(rows.columns(), &UInt32Array::from(mine.clone()), None)?;
        columns.extend(take_arrays(
            table.columns(),
            &UInt32Array::from(theirs),
            None,
        )?);
        let weights = mine.iter().map(|i| batch.diffs().value(*i as usize));
        let mut pairs = ChangeBatch::new(
            RecordBatch::try_new(self.schema.clone(), columns)?,
            Int64Array::from_iter_values(weights),
        )?;
        // The ON clause's other conditions pick among the key's matches, so
        // that a LEFT join pads the stream rows none of them kept.
        if let Some(predicate) = &self.residual {
            let kept = pairs.mask(predicate, &mut cx.state.errors)?;
            pairs = pairs.filter_by(&kept)?;
            mine = mine
                .into_iter()
                .zip(kept.values().iter())
                .filter_map(|(i, keep)| keep.then_some(i))
                .collect();
        }
        let padded = match self.pad {
            true => self.pad_unmatched(batch, &table, &mine)?,
            false => None,
        };
        Ok(std::iter::once((pairs, mine)).chain(padded).collect())
    }

    /// The stream rows of `batch` not among `matched`, with NULLs for the
    /// table's columns, and where each came from.
    fn pad_unmatched(
        &self,
        batch: &ChangeBatch,
        table: &RecordBatch,
        matched: &[u32],
    ) -> Result<Option<(ChangeBatch, Vec<u32>)>> {
        let matched: std::collections::HashSet<u32> = matched.iter().copied().collect();
        let unmatched: Vec<u32> = (0..batch.rows().num_rows() as u32)
            .filter(|i| !matched.contains(i))
            .collect();
        if unmatched.is_empty() {
            return Ok(None);
        }
        let weights = unmatched.iter().map(|i| batch.diffs().value(*i as usize));
        let weights = Int64Array::from_iter_values(weights);
        let mut columns = take_arrays(
            batch.rows().columns(),
            &UInt32Array::from(unmatched.clone()),
            None,
        )?;
        let n = weights.len();
        columns.extend(
            table
                .schema()
                .fields()
                .iter()
                .map(|f| new_null_array(f.data_type(), n)),
        );
        let padded = RecordBatch::try_new(self.schema.clone(), columns)?;
        Ok(Some((ChangeBatch::new(padded, weights)?, unmatched)))
    }
}

/// What a retracting stream's rows were joined with.
///
/// # State layout (under the operator's prefix)
/// - `u32` length ++ stream row -> how many times the row is in (i64 LE)
/// - `u32` length ++ stream row ++ output row -> its count (i64 LE)
struct Memory {
    stream_rows: RowConverter,
    output_rows: RowConverter,
    output: SchemaRef,
}

impl Memory {
    fn new(stream: &SchemaRef, output: &SchemaRef) -> Result<Memory> {
        let fields = |schema: &SchemaRef| {
            schema
                .fields()
                .iter()
                .map(|f| SortField::new(f.data_type().clone()))
                .collect::<Vec<_>>()
        };
        Ok(Memory {
            stream_rows: RowConverter::new(fields(stream))?,
            output_rows: RowConverter::new(fields(output))?,
            output: output.clone(),
        })
    }

    fn row_key(&self, cx: &Context<'_>, row: &[u8]) -> Vec<u8> {
        cx.key(&[(row.len() as u32).to_be_bytes().as_slice(), row].concat())
    }

    /// Note that `added`'s rows came in and were joined into `joined`, whose
    /// row `j` came from stream row `from[j]`.
    fn remember(
        &self,
        added: &ChangeBatch,
        joined: &ChangeBatch,
        from: &[u32],
        cx: &mut Context<'_>,
    ) -> Result<()> {
        let stream = self.stream_rows.convert_columns(added.rows().columns())?;
        let out = self.output_rows.convert_columns(joined.rows().columns())?;
        for (j, i) in from.iter().enumerate() {
            let mut key = self.row_key(cx, stream.row(*i as usize).as_ref());
            key.extend_from_slice(out.row(j).as_ref());
            cx.state.add_count(key, joined.diffs().value(j))?;
        }
        Ok(())
    }

    /// The output to take back for `removed`'s rows, and the instances noted
    /// for them forgotten. A row in several times gives back its share.
    fn retract(&self, removed: &ChangeBatch, cx: &mut Context<'_>) -> Result<ChangeBatch> {
        let stream = self.stream_rows.convert_columns(removed.rows().columns())?;
        let (mut rows, mut diffs) = (Vec::new(), Vec::new());
        for i in 0..removed.rows().num_rows() {
            let gone = -removed.diffs().value(i);
            let key = self.row_key(cx, stream.row(i).as_ref());
            let upper = crate::state::keys::prefix_end(&key);
            let mut instances = 0;
            let mut outputs = Vec::new();
            for (stored, value) in cx.state.scan(&key, &upper)? {
                let count = read_count(&value)?;
                match stored.len() == key.len() {
                    true => instances = count,
                    false => outputs.push((stored, count)),
                }
            }
            for (stored, count) in outputs {
                let share = match instances > gone {
                    true => count * gone / instances.max(1),
                    false => count,
                };
                cx.state.add_count(stored.clone(), -share)?;
                rows.push(stored[key.len()..].to_vec());
                diffs.push(-share);
            }
            cx.state.add_count(key, -gone.min(instances))?;
        }
        let parser = self.output_rows.parser();
        let columns = self
            .output_rows
            .convert_rows(rows.iter().map(|r| parser.parse(r)))?;
        let batch = match columns.is_empty() {
            true => RecordBatch::new_empty(self.output.clone()),
            false => RecordBatch::try_new(self.output.clone(), columns)?,
        };
        ChangeBatch::new(batch, Int64Array::from(diffs))
    }
}

/// The primary key's types, when the lookup keys are exactly the table's
/// primary key columns, in key order, reached through plain column picks and
/// filters (which then run on the fetched rows).
fn point_lookup(lookup: &Lookup) -> Option<Vec<DataType>> {
    let table = &lookup.table;
    if !table.def.is_keyed() || table.def.is_multiset() || table.def.contents_in_log() {
        return None;
    }
    let [Step::Columns(columns, _), rest @ ..] = lookup.steps.as_slice() else {
        return None;
    };
    if rest.iter().any(|s| !matches!(s, Step::Filter(_))) {
        return None;
    }
    let key = &table.def.primary_key;
    if lookup.keys.len() != key.len() {
        return None;
    }
    for (expr, pk) in lookup.keys.iter().zip(key) {
        let any: &dyn std::any::Any = expr.as_ref();
        let column = any.downcast_ref::<Column>()?;
        if columns.get(column.index()) != Some(pk) {
            return None;
        }
    }
    Some(
        key.iter()
            .map(|i| table.schema.field(*i).data_type().clone())
            .collect(),
    )
}

/// An index whose first columns the lookup keys pin, reached through
/// plain column picks and filters, as for primary-key reads.
fn index_lookup(lookup: &Lookup) -> Option<IndexLookup> {
    let [Step::Columns(columns, _), rest @ ..] = lookup.steps.as_slice() else {
        return None;
    };
    if rest.iter().any(|s| !matches!(s, Step::Filter(_))) {
        return None;
    }
    let pinned: Vec<usize> = lookup
        .keys
        .iter()
        .map(|expr| {
            let any: &dyn std::any::Any = expr.as_ref();
            any.downcast_ref::<Column>()
                .and_then(|c| columns.get(c.index()).copied())
        })
        .collect::<Option<_>>()?;
    lookup.indexes.iter().find_map(|read| {
        if !read.covers_all() {
            return None;
        }
        let sources = read.key_sources();
        let keys: Vec<usize> = sources
            .iter()
            .map_while(|source| pinned.iter().position(|p| p == source))
            .collect();
        let types = sources
            .iter()
            .take(keys.len())
            .map(|c| read.base.schema.field(*c).data_type().clone())
            .collect();
        (!keys.is_empty()).then(|| IndexLookup {
            read: read.clone(),
            keys,
            types,
        })
    })
}

impl IndexLookup {
    /// The table's rows under the batch's keys, read through the index as of
    /// now; `None` when the index cannot answer exactly.
    fn rows_under(
        &self,
        cx: &Context<'_>,
        stream_keys: &[ArrayRef],
    ) -> Result<Option<RecordBatch>> {
        let view = ReadView::new(cx.state.db().clone(), |db| db.snapshot());
        let Some(trailing) = self.read.catch_up(&view)? else {
            return Ok(None);
        };
        let columns = self
            .keys
            .iter()
            .zip(&self.types)
            .map(|(k, t)| cast(&stream_keys[*k], t))
            .collect::<std::result::Result<Vec<_>, _>>()?;
        let fields = self
            .types
            .iter()
            .map(|t| SortField::new(t.clone()))
            .collect();
        let encoded = RowConverter::new(fields)?.convert_columns(&columns)?;
        let mut prefixes: Vec<Vec<u8>> = (0..encoded.num_rows())
            .filter(|i| columns.iter().all(|c| c.is_valid(*i)))
            .map(|i| encoded.row(i).data().to_vec())
            .collect();
        prefixes.sort();
        prefixes.dedup();
        let ranges: Vec<KeyRange> = prefixes
            .into_iter()
            .map(|p| {
                let end = keys::prefix_end(&p);
                (Some(p), Some(end))
            })
            .collect();
        let mut batches = Vec::new();
        self.read.read(&view, &trailing, &ranges, &mut |batch| {
            batches.push(batch);
            true
        })?;
        let schema = self.read.base.schema.clone();
        Ok(Some(datafusion::arrow::compute::concat_batches(
            &schema, &batches,
        )?))
    }
}
