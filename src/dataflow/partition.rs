//! Which of a cluster's partitions a row belongs to, by the values of
//! its key: what a partitioned view keeps, a split source relays, and a
//! read asks each node for.

use datafusion::arrow::array::{ArrayRef, RecordBatch};
use datafusion::arrow::compute::{cast, filter_record_batch};
use datafusion::arrow::datatypes::{DataType, TimeUnit};
use datafusion::arrow::row::{RowConverter, SortField};

use crate::error::Result;
use crate::state::keys;

/// The partitions a node computes a view for, out of `count`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Owned {
    pub count: u32,
    pub partitions: Vec<u32>,
}

impl Owned {
    /// As stored beside the view's state: the count, then each partition.
    pub fn encode(&self) -> Vec<u8> {
        std::iter::once(self.count)
            .chain(self.partitions.iter().copied())
            .flat_map(u32::to_be_bytes)
            .collect()
    }

    pub fn decode(bytes: &[u8]) -> Option<Owned> {
        let mut words = bytes
            .chunks_exact(4)
            .map(|w| u32::from_be_bytes(w.try_into().expect("four bytes")));
        let count = words.next()?;
        Some(Owned {
            count,
            partitions: words.collect(),
        })
    }
}

/// Each row's partition, out of `count`, by the values of `columns`.
/// Equal values hash alike whatever their integer width or string layout,
/// since a view's key columns may be typed apart from the group
/// expressions that made them.
pub fn partitions_of(columns: &[ArrayRef], count: u32) -> Result<Vec<u32>> {
    let columns: Vec<ArrayRef> = columns.iter().map(canonical).collect::<Result<Vec<_>>>()?;
    let fields = columns
        .iter()
        .map(|c| SortField::new(c.data_type().clone()))
        .collect();
    let converter = RowConverter::new(fields)?;
    let rows = converter.convert_columns(&columns)?;
    Ok(rows
        .iter()
        .map(|row| keys::partition_of(row.as_ref(), count))
        .collect())
}

fn canonical(column: &ArrayRef) -> Result<ArrayRef> {
    let to = match column.data_type() {
        DataType::Int8 | DataType::Int16 | DataType::Int32 => DataType::Int64,
        DataType::UInt8 | DataType::UInt16 | DataType::UInt32 => DataType::Int64,
        DataType::Utf8View | DataType::LargeUtf8 => DataType::Utf8,
        DataType::BinaryView | DataType::LargeBinary => DataType::Binary,
        DataType::Dictionary(_, value) => value.as_ref().clone(),
        DataType::Timestamp(unit, _) => DataType::Timestamp(*unit, None),
        DataType::Time32(TimeUnit::Second | TimeUnit::Millisecond) => {
            DataType::Time64(TimeUnit::Microsecond)
        }
        _ => return Ok(column.clone()),
    };
    Ok(cast(column, &to)?)
}

/// The one partition every row of `columns` falls in, if there is one.
pub fn single_partition(columns: &[ArrayRef], count: u32) -> Option<u32> {
    let partitions = partitions_of(columns, count).ok()?;
    let first = *partitions.first()?;
    partitions.iter().all(|p| *p == first).then_some(first)
}

/// The rows of `batch` whose `key` columns fall in `owned`'s partitions.
pub fn keep_owned(batch: &RecordBatch, key: &[usize], owned: &Owned) -> Result<RecordBatch> {
    let columns: Vec<ArrayRef> = key.iter().map(|k| batch.column(*k).clone()).collect();
    let partitions = partitions_of(&columns, owned.count)?;
    let keep: datafusion::arrow::array::BooleanArray = partitions
        .iter()
        .map(|p| Some(owned.partitions.contains(p)))
        .collect();
    Ok(filter_record_batch(batch, &keep)?)
}
