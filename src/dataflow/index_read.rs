//! Reading a relation's rows through one of its indexes.
//!
//! An index is a view of its relation, kept by its own dataflow, so it
//! may trail the relation by the changes of an epoch or so. A read is
//! still exact as of its snapshot: the same snapshot holds the offsets the
//! index has read its relation's changelog to, and the changes after them,
//! which are applied over what the index returns. When more changes than
//! [`MAX_TAIL`] trail, as while an index is built, the relation is read
//! directly instead.

use std::collections::HashMap;
use std::sync::Arc;

use datafusion::arrow::array::{ArrayRef, RecordBatch, new_null_array};
use datafusion::common::ScalarValue;

use crate::catalog::{Catalog, Table, View};
use crate::dataflow::operators::materialize::expand_row;
use crate::error::{Error, Result};
use crate::log::embedded;
use crate::state::{CF_ROWS, CF_STATE, ReadView, keys};

/// Most trailing changes a read applies over an index.
pub const MAX_TAIL: u64 = 20_000;

/// Rows decoded per batch.
const BATCH_ROWS: usize = 8192;

/// A relation and one of its indexes.
#[derive(Debug, Clone)]
pub struct IndexRead {
    pub base: Arc<Table>,
    pub index: Arc<Table>,
    /// For each of the relation's columns, the index column holding it.
    columns: Vec<Option<usize>>,
}

/// Where an index trails its relation in a snapshot: per partition of the
/// relation's changelog, the offset from which the index has yet to read.
#[derive(Debug, Clone)]
pub struct Trailing(Vec<(u32, u64)>);

/// Encoded index keys, lower inclusive and upper exclusive; `None` is open.
pub type KeyRange = (Option<Vec<u8>>, Option<Vec<u8>>);

impl IndexRead {
    /// Every index of `base`, to read it through.
    pub fn all_of(catalog: &Catalog, base: &Arc<Table>) -> Vec<IndexRead> {
        catalog
            .indexes_on(base.def.id)
            .iter()
            .map(|index| IndexRead::new(base.clone(), index))
            .collect()
    }

    pub fn new(base: Arc<Table>, index: &View) -> IndexRead {
        let columns = base
            .def
            .columns
            .iter()
            .map(|c| {
                index
                    .table
                    .def
                    .columns
                    .iter()
                    .position(|i| i.name == c.name)
            })
            .collect();
        IndexRead {
            base,
            index: index.table.clone(),
            columns,
        }
    }

    /// Whether the index holds every column of the relation.
    pub fn covers_all(&self) -> bool {
        self.columns.iter().all(Option::is_some)
    }

    /// Whether the index holds each of these columns of the relation.
    pub fn covers(&self, wanted: &[usize]) -> bool {
        wanted
            .iter()
            .all(|c| self.columns.get(*c).is_some_and(Option::is_some))
    }

    /// The relation's column held by each of the index's leading columns.
    pub fn key_sources(&self) -> Vec<usize> {
        let width = if self.index.def.is_keyed() {
            self.index.def.primary_key.len()
        } else {
            self.index.def.columns.len()
        };
        (0..width)
            .map_while(|i| self.columns.iter().position(|c| *c == Some(i)))
            .collect()
    }

    /// What a read through the index must apply over it in this snapshot,
    /// or `None` when that read could not be exact: too many changes
    /// trail, some are no longer in the log, or the index lacks columns
    /// the trailing rows would need.
    pub fn catch_up(&self, view: &ReadView) -> Result<Option<Trailing>> {
        let topic = self.base.def.log_topic();
        let mut trailing = Vec::new();
        let mut count = 0u64;
        for partition in 0..self.base.def.partitions.max(1) {
            let key = keys::source_offset_key(self.index.def.id, 0, partition);
            let read = match view.get(CF_STATE, &key)? {
                Some(bytes) => u64::from_be_bytes(
                    bytes
                        .as_slice()
                        .try_into()
                        .map_err(|_| Error::Internal("malformed index offset".into()))?,
                ),
                None => 0,
            };
            let end = embedded::tail(view, topic, partition)?.end;
            if read >= end {
                continue;
            }
            if read < self.log_start(view, partition)? {
                return Ok(None);
            }
            count += end - read;
            trailing.push((partition, read));
        }
        let exact = count == 0 || (count <= MAX_TAIL && self.covers_all());
        Ok(exact.then_some(Trailing(trailing)))
    }

    /// The first offset a partition of the relation's changelog still holds.
    fn log_start(&self, view: &ReadView, partition: u32) -> Result<u64> {
        let mut start = u64::MAX;
        embedded::read_raw(
            view,
            self.base.def.log_topic(),
            partition,
            0,
            |base, _, _, _| {
                start = base;
                Ok(false)
            },
        )?;
        Ok(start)
    }

    /// The relation's rows under `ranges` of index keys (and perhaps some
    /// more), in the relation's schema, as of `view`, where the index
    /// trails as [`Self::catch_up`] found. Columns the index does not hold
    /// come back NULL, or zero where NULL is not allowed.
    pub fn read(
        &self,
        view: &ReadView,
        trailing: &Trailing,
        ranges: &[KeyRange],
        emit: &mut dyn FnMut(RecordBatch) -> bool,
    ) -> Result<()> {
        if trailing.0.is_empty() {
            return self.scan(view, ranges, emit);
        }
        let mut held = Vec::new();
        self.scan(view, ranges, &mut |batch| {
            held.push(batch);
            true
        })?;
        let mut counts: HashMap<Vec<u8>, i64> = HashMap::new();
        for batch in &held {
            for row in self.base.codec.encode_rows(batch)?.iter() {
                *counts.entry(row.data().to_vec()).or_default() += 1;
            }
        }
        let topic = self.base.def.log_topic();
        for (partition, read) in &trailing.0 {
            embedded::read_partition(view, topic, *partition, *read, |_, chunk| {
                for entry in chunk.entries {
                    *counts.entry(entry.row.to_vec()).or_default() += entry.diff;
                }
                Ok(true)
            })?;
        }
        let rows: Vec<&[u8]> = counts
            .iter()
            .flat_map(|(row, n)| std::iter::repeat_n(row.as_slice(), (*n).max(0) as usize))
            .collect();
        for part in rows.chunks(BATCH_ROWS) {
            if !emit(self.base.codec.decode(part.iter().copied())?) {
                break;
            }
        }
        Ok(())
    }

    /// The index's rows under `ranges`, as the relation's rows.
    fn scan(
        &self,
        view: &ReadView,
        ranges: &[KeyRange],
        emit: &mut dyn FnMut(RecordBatch) -> bool,
    ) -> Result<()> {
        let id = self.index.def.id;
        let mut pending: Vec<Vec<u8>> = Vec::with_capacity(BATCH_ROWS);
        let mut open = true;
        for (lower, upper) in ranges {
            if !open {
                break;
            }
            let (lower, upper) = keys::row_range(id, lower.as_deref(), upper.as_deref());
            view.scan(CF_ROWS, lower, upper, |_, value| {
                expand_row(&self.index, value, &mut pending)?;
                if pending.len() >= BATCH_ROWS {
                    open = emit(self.as_base(&pending)?);
                    pending.clear();
                }
                Ok(open)
            })?;
        }
        if open && !pending.is_empty() {
            emit(self.as_base(&pending)?);
        }
        Ok(())
    }

    /// Index rows as a batch of the relation's rows.
    fn as_base(&self, rows: &[Vec<u8>]) -> Result<RecordBatch> {
        let held = self.index.codec.decode(rows.iter().map(Vec::as_slice))?;
        let n = held.num_rows();
        let columns = self
            .columns
            .iter()
            .zip(self.base.schema.fields())
            .map(|(at, field)| match at {
                Some(i) => Ok(held.column(*i).clone()),
                None if field.is_nullable() => Ok(new_null_array(field.data_type(), n)),
                None => Ok(ScalarValue::new_default(field.data_type())?.to_array_of_size(n)?),
            })
            .collect::<Result<Vec<ArrayRef>>>()?;
        Ok(RecordBatch::try_new(self.base.schema.clone(), columns)?)
    }
}
