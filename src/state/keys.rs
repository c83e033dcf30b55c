//! Key layouts. All integers are big-endian so that byte order is numeric order.
//!
//! In the `state` family, a view's dataflow keeps everything under the
//! view's id: each operator under its node's prefix, and the dataflow's own
//! marks under a tag starting with `\xff`, which no node prefix starts with.
//! Keys of the whole node start with `\xff` themselves.

/// `rows` family: the prefix of every row of one table.
pub fn table_prefix(table: u64) -> Vec<u8> {
    table.to_be_bytes().to_vec()
}

/// `rows` family: one row of a table under its encoded primary key.
pub fn row_key(table: u64, key: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(8 + key.len());
    out.extend_from_slice(&table.to_be_bytes());
    out.extend_from_slice(key);
    out
}

/// `rows` family: the keys of a table's rows from `lower` (inclusive) to
/// `upper` (exclusive), encoded keys without the table prefix; `None` is open.
pub fn row_range(table: u64, lower: Option<&[u8]>, upper: Option<&[u8]>) -> (Vec<u8>, Vec<u8>) {
    let lower = match lower {
        Some(k) => row_key(table, k),
        None => table_prefix(table),
    };
    let upper = match upper {
        Some(k) => row_key(table, k),
        None => prefix_end(&table_prefix(table)),
    };
    (lower, upper)
}

/// An `i64` as bytes that sort like the numbers (event times in keys).
pub fn ordered(value: i64) -> [u8; 8] {
    ((value as u64) ^ (1 << 63)).to_be_bytes()
}

/// The smallest key greater than every key starting with `prefix`.
pub fn prefix_end(prefix: &[u8]) -> Vec<u8> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < u8::MAX {
            end.push(last + 1);
            return end;
        }
    }
    // All 0xFF: no upper bound fits in the same length, so extend instead.
    let mut end = prefix.to_vec();
    end.push(0xFF);
    end
}

/// `log` family: the first key of a topic partition at or after `offset`.
pub fn log_key(topic: u64, partition: u32, offset: u64) -> Vec<u8> {
    let mut out = Vec::with_capacity(20);
    out.extend_from_slice(&topic.to_be_bytes());
    out.extend_from_slice(&partition.to_be_bytes());
    out.extend_from_slice(&offset.to_be_bytes());
    out
}

/// `log` family: every chunk of one topic partition.
pub fn log_partition_prefix(topic: u64, partition: u32) -> Vec<u8> {
    let mut out = Vec::with_capacity(12);
    out.extend_from_slice(&topic.to_be_bytes());
    out.extend_from_slice(&partition.to_be_bytes());
    out
}

/// The base offset stored in a `log` key.
pub fn log_key_offset(key: &[u8]) -> Option<u64> {
    let bytes: [u8; 8] = key.get(12..20)?.try_into().ok()?;
    Some(u64::from_be_bytes(bytes))
}

/// `catalog` family: one object definition.
pub fn object_key(id: u64) -> Vec<u8> {
    let mut out = b"o".to_vec();
    out.extend_from_slice(&id.to_be_bytes());
    out
}

pub const OBJECT_PREFIX: &[u8] = b"o";
pub const NEXT_ID_KEY: &[u8] = b"next_id";

/// `state` family: the sequence number of the last committed write group.
pub const SEQUENCE_KEY: &[u8] = b"\xffwseq";

/// `state` family: the last epoch the dataflows committed.
pub const EPOCH_KEY: &[u8] = b"\xffepoch";

/// `state` family: the last sequence number a producer committed.
pub fn producer_key(id: &str) -> Vec<u8> {
    [b"\xffproducer\x00".as_slice(), id.as_bytes()].concat()
}

/// `state` family: every bulk load that committed, while its files may
/// still need ingesting.
pub const LOAD_MARKER_PREFIX: &[u8] = b"\xffcopy\x00";

/// `state` family: the marker of one committed bulk load, by its stage's name.
pub fn load_marker_key(name: &str) -> Vec<u8> {
    [LOAD_MARKER_PREFIX, name.as_bytes()].concat()
}

/// `state` family: the prefix of one dataflow node's operator state.
pub fn node_prefix(view: u64, node: usize) -> Vec<u8> {
    let mut prefix = view.to_be_bytes().to_vec();
    prefix.extend_from_slice(&(node as u32).to_be_bytes());
    prefix
}

/// `state` family: the watermark a view's source last passed on.
pub fn source_watermark_key(view: u64, source: usize) -> Vec<u8> {
    dataflow_key(view, b"\xffws", source)
}

/// `state` family: the watermark a view's node last passed on.
pub fn node_watermark_key(view: u64, node: usize) -> Vec<u8> {
    dataflow_key(view, b"\xffwn", node)
}

/// `state` family: the offset a view's source has read to in one partition.
pub fn source_offset_key(view: u64, source: usize, partition: u32) -> Vec<u8> {
    let mut key = dataflow_key(view, b"\xffsrc", source);
    key.extend_from_slice(&partition.to_be_bytes());
    key
}

/// `state` family: the partitions a partitioned view's state was built for.
pub fn owned_partitions_key(view: u64) -> Vec<u8> {
    dataflow_key(view, b"\xffown", 0)
}

/// A dataflow-level key: the view, a tag starting with `\xff`, an index.
fn dataflow_key(view: u64, tag: &[u8], index: usize) -> Vec<u8> {
    let mut key = view.to_be_bytes().to_vec();
    key.extend_from_slice(tag);
    key.extend_from_slice(&(index as u32).to_be_bytes());
    key
}

/// Where a sink keeps the last epoch Kafka acknowledged in full
/// (`state` family): the sink's id, then `epoch`.
pub fn sink_epoch_key(sink: u64) -> Vec<u8> {
    [table_prefix(sink).as_slice(), b"epoch"].concat()
}

/// A key's hash, stable across runs and versions, for choosing a partition.
pub fn partition_of(key: &[u8], partitions: u32) -> u32 {
    // FNV-1a: tiny, and unlike std's hasher its output is fixed forever.
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in key {
        hash ^= u64::from(*byte);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    (hash % u64::from(partitions.max(1))) as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefix_end_bounds_the_prefix() {
        assert_eq!(prefix_end(&[1, 2]), vec![1, 3]);
        assert_eq!(prefix_end(&[1, 0xFF]), vec![2]);
        assert!(row_key(7, b"zzz") < prefix_end(&table_prefix(7)));
    }

    #[test]
    fn log_keys_sort_by_offset() {
        assert!(log_key(1, 0, 9) < log_key(1, 0, 10));
        assert_eq!(log_key_offset(&log_key(1, 2, 300)), Some(300));
    }

    #[test]
    fn dataflow_marks_sort_apart_from_node_state() {
        let node = node_prefix(3, 0);
        for mark in [
            source_watermark_key(3, 0),
            node_watermark_key(3, 0),
            source_offset_key(3, 0, 1),
        ] {
            assert!(mark.starts_with(&3u64.to_be_bytes()));
            assert!(!mark.starts_with(&node), "{mark:?}");
        }
        assert_eq!(
            source_offset_key(3, 1, 2),
            [
                &3u64.to_be_bytes()[..],
                b"\xffsrc",
                &[0, 0, 0, 1],
                &[0, 0, 0, 2]
            ]
            .concat()
        );
    }

    #[test]
    fn partition_choice_is_stable() {
        assert_eq!(partition_of(b"abc", 4), partition_of(b"abc", 4));
        assert_eq!(partition_of(b"abc", 1), 0);
    }
}
