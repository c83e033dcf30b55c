//! Arbitrary Kafka message payloads through a source's JSON and CSV
//! decoders (`src/connector/format/`).
//!
//! A payload may fail (it is skipped and counted), but decoding must never
//! panic, and every row must come from a payload that did not fail.

#![no_main]

#[path = "../shim.rs"]
mod error;

#[allow(dead_code, unused_imports)]
#[path = "../../src/connector/format/mod.rs"]
mod format;

use std::sync::Arc;

use datafusion::arrow::datatypes::{DataType, Field, Schema, TimeUnit};
use format::{CsvOptions, Decoder, Encode};
use libfuzzer_sys::fuzz_target;

fn schema() -> Arc<Schema> {
    Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int64, false),
        Field::new("name", DataType::Utf8, true),
        Field::new("price", DataType::Float64, true),
        Field::new("amount", DataType::Decimal128(12, 2), true),
        Field::new("ok", DataType::Boolean, true),
        Field::new("at", DataType::Timestamp(TimeUnit::Microsecond, None), true),
        Field::new("day", DataType::Date32, true),
    ]))
}

fuzz_target!(|data: &[u8]| {
    let Some((&knobs, data)) = data.split_first() else {
        return;
    };
    // Messages are separated by a 0xff byte, which no text payload needs.
    let payloads: Vec<&[u8]> = data.split(|b| *b == 0xff).collect();
    let encode = if knobs & 1 == 0 { Encode::Json } else { Encode::Csv };
    let csv = CsvOptions {
        delimiter: if knobs & 2 == 0 { b',' } else { b';' },
        header: knobs & 4 != 0,
    };
    let mut decoder = Decoder::new(schema(), encode, csv).expect("a readable schema");
    let Ok(decoded) = decoder.decode(&payloads) else {
        return;
    };
    assert_eq!(decoded.batch.num_rows(), decoded.rows.len());
    for row in &decoded.rows {
        assert!(*row < payloads.len());
        assert!(decoded.failed.iter().all(|(failed, _)| failed != row));
    }
});
