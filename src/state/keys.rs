//! Key layouts. All integers are big-endian so that byte order is numeric order.

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
    fn partition_choice_is_stable() {
        assert_eq!(partition_of(b"abc", 4), partition_of(b"abc", 4));
        assert_eq!(partition_of(b"abc", 1), 0);
    }
}
