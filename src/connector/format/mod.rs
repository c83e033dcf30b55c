//! Kafka message payloads to and from Arrow.
//!
//! Sources decode messages (`ENCODE JSON` or `CSV`) into batches of a table's
//! columns; sinks encode a view's changes into messages (`FORMAT PLAIN`,
//! `UPSERT` or `DEBEZIUM`). Arrow's own JSON and CSV readers and its JSON
//! encoder do the parsing and printing. What a stream of messages needs on top
//! of them lives here:
//!
//! - One message is one row, never more: each payload is checked to hold
//!   exactly one record before the next is fed, so a bad message cannot run
//!   into its neighbour and shift rows.
//! - A bad message is skipped and reported by its index; the others are kept.
//! - JSON keys match columns ignoring ASCII case, as SQL identifiers do.
//! - Timestamps are read from text or from epoch milliseconds.
//! - A view's changelog is folded per key into upserts or Debezium envelopes.

mod convert;
mod decode;
mod encode;
mod keys;

pub use decode::{CsvOptions, Decoded, Decoder, Encode};
pub use encode::{Encoder, Message, SinkFormat};

/// The schemas the decoder's and the encoder's tests build.
#[cfg(test)]
mod test_schema {
    use std::sync::Arc;

    use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef, TimeUnit};

    /// The Arrow type `CREATE TABLE` gives a TIMESTAMP column.
    pub const TIMESTAMP: DataType = DataType::Timestamp(TimeUnit::Nanosecond, None);

    pub fn schema(columns: &[(&str, DataType)]) -> SchemaRef {
        let fields: Vec<Field> = columns
            .iter()
            .map(|(name, data_type)| Field::new(*name, data_type.clone(), true))
            .collect();
        Arc::new(Schema::new(fields))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_serialize_in_lower_case() {
        let names = serde_json::to_string(&(Encode::Json, Encode::Csv, SinkFormat::Debezium))
            .expect("serializable");
        assert_eq!(names, r#"["json","csv","debezium"]"#);
        let back: SinkFormat = serde_json::from_str(r#""upsert""#).expect("a format");
        assert_eq!(back, SinkFormat::Upsert);
    }
}
