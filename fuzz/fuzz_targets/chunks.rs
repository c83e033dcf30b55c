//! Arbitrary bytes as a stored log chunk.
//!
//! Decoding must never panic; a chunk that decodes must encode back to the
//! bytes it was read from, and its head (read without decoding records)
//! must agree with the full decode.

#![no_main]

#[path = "../shim.rs"]
mod error;

#[allow(dead_code)]
#[path = "../../src/log/chunk.rs"]
mod chunk;

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let head = chunk::chunk_head(data);
    let Ok(decoded) = chunk::decode_chunk(data) else {
        return;
    };
    let (count, stamp) = head.expect("a chunk that decodes has a head");
    assert_eq!(count, decoded.entries.len() as u64);
    assert_eq!(stamp, decoded.stamp);
    let entries: Vec<(i64, &[u8])> = decoded.entries.iter().map(|e| (e.diff, e.row)).collect();
    let encoded = chunk::encode_chunk(entries, decoded.watermark, decoded.stamp);
    assert!(data.starts_with(&encoded), "re-encoding changed the chunk");
});
