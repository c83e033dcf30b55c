//! Sources: message payloads (`ENCODE JSON` or `CSV`) into rows of a
//! table's columns, one row per message, a bad message skipped and reported.

use std::collections::BTreeMap;
use std::sync::Arc;

use datafusion::arrow::array::{BooleanArray, RecordBatch};
use datafusion::arrow::compute::{can_cast_types, concat_batches, filter};
use datafusion::arrow::datatypes::{DataType, Field, FieldRef, Schema, SchemaRef};
use datafusion::arrow::error::ArrowError;
use datafusion::arrow::{csv, json};
use serde::{Deserialize, Serialize};

use super::convert::convert_column;
use super::keys::KeyFolder;
use crate::error::{Error, Result};

/// How a source's message payloads are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Encode {
    Json,
    Csv,
}

impl Encode {
    fn name(self) -> &'static str {
        match self {
            Encode::Json => "ENCODE JSON",
            Encode::Csv => "ENCODE CSV",
        }
    }
}

/// Options of ENCODE CSV (from the source's WITH options).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct CsvOptions {
    /// The field separator; `,` by default.
    pub delimiter: u8,
    /// Whether the first line of each message is a header to skip; false by default.
    pub header: bool,
}

impl Default for CsvOptions {
    fn default() -> Self {
        CsvOptions {
            delimiter: b',',
            header: false,
        }
    }
}

/// Turns message payloads into rows of a table's columns.
///
/// JSON: one object per message; keys match columns by name ignoring ASCII
/// case (an exact match wins over a folded one); a missing key is NULL and an
/// extra key is ignored. A number or boolean given for a text column is kept as
/// its JSON text; a string of digits given for a number column is read as that
/// number, as arrow's reader does.
///
/// CSV: one record per message, fields in column order, an empty field NULL.
///
/// Timestamps, in either encoding, are text that arrow's timestamp parser
/// reads (`2024-01-01 10:00:00`, `2024-01-01T10:00:00.123`,
/// `2024-01-01T10:00:00Z`, other offsets converted to UTC) or an integer,
/// which is milliseconds since the Unix epoch: the unit Kafka's own record
/// timestamps and most producers use.
#[derive(Debug)]
pub struct Decoder {
    schema: SchemaRef,
    /// What arrow's reader is asked for: `schema` with every field nullable,
    /// and as text each column that [`convert_column`] reads itself.
    wire: SchemaRef,
    encode: Encode,
    csv: CsvOptions,
    keys: KeyFolder,
    /// A payload with its keys renamed, reused from message to message.
    scratch: Vec<u8>,
}

/// The rows decoded from a run of messages, and the messages that failed.
#[derive(Debug)]
pub struct Decoded {
    /// One row per message that decoded, in the order of the messages.
    pub batch: RecordBatch,
    /// Each message that failed: its index in the payloads, and what is wrong.
    pub failed: Vec<(usize, String)>,
    /// The index in the payloads of each row of `batch`.
    pub rows: Vec<usize>,
}

impl Decoder {
    /// `schema`: the payload columns, names and Arrow types as the table
    /// declares them. A NULL in a non-nullable column fails its message.
    pub fn new(schema: SchemaRef, encode: Encode, csv: CsvOptions) -> Result<Decoder> {
        if encode == Encode::Csv && matches!(csv.delimiter, b'"' | b'\n' | b'\r') {
            return Err(Error::InvalidParameter(format!(
                "CSV delimiter cannot be {:?}",
                char::from(csv.delimiter)
            )));
        }
        let wire = wire_schema(&schema, encode);
        for (field, wire) in schema.fields().iter().zip(wire.fields()) {
            check_readable(field, wire, encode)?;
        }
        Ok(Decoder {
            keys: KeyFolder::new(&schema),
            schema,
            wire,
            encode,
            csv,
            scratch: Vec::new(),
        })
    }

    /// Decode one message payload per element into one batch of the schema,
    /// skipping the messages that do not parse.
    pub fn decode(&mut self, payloads: &[&[u8]]) -> Result<Decoded> {
        if payloads.is_empty() {
            return Ok(Decoded {
                batch: RecordBatch::new_empty(self.schema.clone()),
                failed: Vec::new(),
                rows: Vec::new(),
            });
        }
        // Bad messages are rare: read them all at once, and only when that
        // fails read them one by one to learn which ones are bad.
        let read = match self.read_all(payloads) {
            Some(batch) => Decoded {
                batch,
                failed: Vec::new(),
                rows: (0..payloads.len()).collect(),
            },
            None => self.read_each(payloads)?,
        };
        self.convert(read)
    }

    /// Every payload through one reader, giving up at the first bad one.
    ///
    /// Keys are folded only when they must be: a row whose columns are all
    /// set had an exact key for each, so only a row with a NULL can gain by a
    /// rename. When one does, the messages are read again with folding, and
    /// from then on folded as they are fed, as a producer that spells one key
    /// its own way usually spells them all so.
    fn read_all(&mut self, payloads: &[&[u8]]) -> Option<RecordBatch> {
        let batch = self.read_together(payloads)?;
        if self.encode == Encode::Csv || self.keys.always || !self.keys.needed(&batch, payloads) {
            return Some(batch);
        }
        self.keys.always = true;
        self.read_together(payloads)
    }

    fn read_together(&mut self, payloads: &[&[u8]]) -> Option<RecordBatch> {
        match self.encode {
            Encode::Json => {
                let mut reader = self.json_reader(payloads.len()).ok()?;
                for payload in payloads {
                    let payload = match self.keys.always {
                        true => self.keys.fold(payload, &mut self.scratch),
                        false => payload,
                    };
                    feed_json(&mut reader, payload).ok()?;
                }
                reader.flush().ok()?
            }
            Encode::Csv => {
                let mut reader = self.csv_reader(payloads.len());
                for payload in payloads {
                    feed_csv(&mut reader, payload, self.csv.header).ok()?;
                }
                reader.flush().ok()?
            }
        }
    }

    /// Each payload through a reader of its own: the rows of those that
    /// read, with their indices, and what is wrong with the others.
    fn read_each(&mut self, payloads: &[&[u8]]) -> Result<Decoded> {
        let mut batches = Vec::new();
        let mut rows = Vec::new();
        let mut failed = Vec::new();
        for (index, payload) in payloads.iter().enumerate() {
            match self.read_one(payload) {
                Ok(batch) => {
                    batches.push(batch);
                    rows.push(index);
                }
                Err(message) => failed.push((index, message)),
            }
        }
        Ok(Decoded {
            batch: concat_batches(&self.wire, &batches)?,
            failed,
            rows,
        })
    }

    fn read_one(&mut self, payload: &[u8]) -> std::result::Result<RecordBatch, String> {
        let batch = match self.encode {
            Encode::Json => {
                let mut reader = self.json_reader(1).map_err(arrow_text)?;
                // Alone, a payload is cheap enough to fold without asking.
                let payload = self.keys.fold(payload, &mut self.scratch);
                feed_json(&mut reader, payload)?;
                reader.flush().map_err(field_message)?
            }
            Encode::Csv => {
                let mut reader = self.csv_reader(1);
                feed_csv(&mut reader, payload, self.csv.header)?;
                reader.flush().map_err(arrow_text)?
            }
        };
        batch.ok_or_else(|| "empty message".to_string())
    }

    fn json_reader(&self, rows: usize) -> std::result::Result<json::reader::Decoder, ArrowError> {
        // Coercing primitives keeps a number's own text in a text column,
        // which is how timestamps and decimals reach `convert_column`.
        json::ReaderBuilder::new(self.wire.clone())
            .with_batch_size(rows)
            .with_coerce_primitive(true)
            .build_decoder()
    }

    fn csv_reader(&self, rows: usize) -> csv::reader::Decoder {
        csv::ReaderBuilder::new(self.wire.clone())
            .with_delimiter(self.csv.delimiter)
            .with_batch_size(rows)
            .build_decoder()
    }

    /// The batch of the table's columns from what the reader produced (a
    /// batch of the wire schema), dropping the rows whose values do not
    /// convert and reporting them with the messages the reader refused.
    fn convert(&self, read: Decoded) -> Result<Decoded> {
        let Decoded {
            batch: wire,
            mut failed,
            mut rows,
        } = read;
        let mut bad = BTreeMap::new();
        let mut columns = Vec::with_capacity(wire.num_columns());
        for (field, column) in self.schema.fields().iter().zip(wire.columns()) {
            columns.push(convert_column(field, column, &mut bad)?);
        }
        if !bad.is_empty() {
            let keep: BooleanArray = (0..wire.num_rows())
                .map(|row| Some(!bad.contains_key(&row)))
                .collect();
            columns = columns
                .iter()
                .map(|column| filter(column, &keep))
                .collect::<std::result::Result<_, _>>()?;
            failed.extend(
                bad.iter()
                    .map(|(row, message)| (rows[*row], message.clone())),
            );
            failed.sort_unstable_by_key(|(index, _)| *index);
            rows = rows
                .into_iter()
                .enumerate()
                .filter(|(row, _)| !bad.contains_key(row))
                .map(|(_, index)| index)
                .collect();
        }
        let batch = RecordBatch::try_new(self.schema.clone(), columns)?;
        Ok(Decoded {
            batch,
            failed,
            rows,
        })
    }
}

/// The schema arrow's reader fills: JSON reads timestamps and decimals as
/// text (to take epoch milliseconds, and to name the field of a bad decimal);
/// CSV reads every field as text, so a bad value fails its row, not the batch.
fn wire_schema(schema: &Schema, encode: Encode) -> SchemaRef {
    let fields: Vec<Field> = schema
        .fields()
        .iter()
        .map(|field| {
            let as_text = match encode {
                Encode::Json => matches!(
                    field.data_type(),
                    DataType::Timestamp(..)
                        | DataType::Decimal32(..)
                        | DataType::Decimal64(..)
                        | DataType::Decimal128(..)
                        | DataType::Decimal256(..)
                ),
                Encode::Csv => true,
            };
            let data_type = match as_text {
                true => DataType::Utf8,
                false => field.data_type().clone(),
            };
            Field::new(field.name(), data_type, true)
        })
        .collect();
    Arc::new(Schema::new(fields))
}

fn check_readable(field: &Field, wire: &FieldRef, encode: Encode) -> Result<()> {
    let reader_can = match encode {
        Encode::Json => json::ReaderBuilder::new(Arc::new(Schema::new(vec![wire.clone()])))
            .build_decoder()
            .is_ok(),
        Encode::Csv => true,
    };
    if reader_can && can_cast_types(wire.data_type(), field.data_type()) {
        return Ok(());
    }
    Err(Error::NotSupported(format!(
        "{} cannot read column \"{}\" of type {}",
        encode.name(),
        field.name(),
        field.data_type()
    )))
}

/// Feeds one message to the reader, checking that it holds exactly one JSON
/// object, whole.
fn feed_json(
    reader: &mut json::reader::Decoder,
    payload: &[u8],
) -> std::result::Result<(), String> {
    match payload.iter().find(|b| !b.is_ascii_whitespace()) {
        None => return Err("empty message".into()),
        Some(b'{') => {}
        Some(_) => return Err("not a JSON object".into()),
    }
    let before = reader.len();
    let read = reader
        .decode(payload)
        .map_err(|e| format!("invalid JSON: {}", arrow_text(e)))?;
    // The reader stops at its batch size with the rest of the payload unread.
    if read < payload.len() || reader.len() > before + 1 {
        return Err("more than one JSON value in the message".into());
    }
    if reader.has_partial_record() {
        return Err("truncated JSON object".into());
    }
    Ok(())
}

/// Feeds one message to the reader, checking that it holds exactly one CSV
/// record.
fn feed_csv(
    reader: &mut csv::reader::Decoder,
    payload: &[u8],
    header: bool,
) -> std::result::Result<(), String> {
    let record = match header {
        true => after_first_line(payload),
        false => payload,
    };
    if record.iter().all(|b| matches!(b, b'\r' | b'\n')) {
        return Err("empty message".into());
    }
    let before = reader.capacity();
    let read = reader
        .decode(record)
        .map_err(|e| format!("invalid CSV: {}", arrow_text(e)))?;
    if !record.ends_with(b"\n") && !record.ends_with(b"\r") {
        // Ends the record here, or the next message would continue it.
        reader
            .decode(b"\n")
            .map_err(|e| format!("invalid CSV: {}", arrow_text(e)))?;
    }
    let unread = &record[read..];
    match before - reader.capacity() {
        0 => Err("unterminated quoted field".into()),
        1 if unread.iter().all(|b| matches!(b, b'\r' | b'\n')) => Ok(()),
        _ => Err("more than one CSV record in the message".into()),
    }
}

fn after_first_line(payload: &[u8]) -> &[u8] {
    match payload.iter().position(|b| *b == b'\n') {
        Some(end) => &payload[end + 1..],
        None => &[],
    }
}

/// The message inside an arrow error, without its category prefix.
fn arrow_text(e: ArrowError) -> String {
    match e {
        ArrowError::JsonError(m)
        | ArrowError::CsvError(m)
        | ArrowError::ParseError(m)
        | ArrowError::CastError(m)
        | ArrowError::InvalidArgumentError(m) => m,
        other => other.to_string(),
    }
}

/// Arrow's "whilst decoding field 'price': failed to parse "abc" as Int64" in
/// our words: `field "price": cannot parse "abc" as Int64`.
fn field_message(e: ArrowError) -> String {
    let text = arrow_text(e);
    let Some((name, detail)) = text
        .strip_prefix("whilst decoding field '")
        .and_then(|rest| rest.split_once("': "))
    else {
        return text;
    };
    let detail = detail.replacen("failed to parse", "cannot parse", 1);
    format!("field \"{name}\": {detail}")
}

#[cfg(test)]
mod tests {
    use datafusion::arrow::datatypes::{Fields, TimeUnit};
    use datafusion::arrow::util::display::{ArrayFormatter, FormatOptions};

    use super::*;

    use crate::connector::format::test_schema::{TIMESTAMP, schema};

    fn decode(schema: &SchemaRef, encode: Encode, csv: CsvOptions, payloads: &[&str]) -> Decoded {
        let mut decoder = Decoder::new(schema.clone(), encode, csv).expect("a readable schema");
        let payloads: Vec<&[u8]> = payloads.iter().map(|p| p.as_bytes()).collect();
        decoder
            .decode(&payloads)
            .expect("decoding never fails as a whole")
    }

    fn json(schema: &SchemaRef, payloads: &[&str]) -> Decoded {
        decode(schema, Encode::Json, CsvOptions::default(), payloads)
    }

    fn csv(schema: &SchemaRef, payloads: &[&str]) -> Decoded {
        decode(schema, Encode::Csv, CsvOptions::default(), payloads)
    }

    /// Each row as its values joined by ", ".
    fn rows(decoded: &Decoded) -> Vec<String> {
        let batch = &decoded.batch;
        let options = FormatOptions::default().with_null("NULL");
        let columns: Vec<ArrayFormatter> = batch
            .columns()
            .iter()
            .map(|c| ArrayFormatter::try_new(c.as_ref(), &options).expect("displayable"))
            .collect();
        (0..batch.num_rows())
            .map(|row| {
                let values: Vec<String> =
                    columns.iter().map(|c| c.value(row).to_string()).collect();
                values.join(", ")
            })
            .collect()
    }

    fn failed(decoded: &Decoded) -> Vec<(usize, &str)> {
        decoded
            .failed
            .iter()
            .map(|(index, message)| (*index, message.as_str()))
            .collect()
    }

    #[test]
    fn json_fields_match_columns_by_name() {
        let table = schema(&[
            ("id", DataType::Int64),
            ("name", DataType::Utf8),
            ("price", DataType::Float64),
            ("ok", DataType::Boolean),
        ]);
        let decoded = json(
            &table,
            &[
                r#"{"id":1,"name":"a","price":1.5,"ok":true}"#,
                r#"{"price":2,"id":2,"extra":{"x":[1,"}"]},"ok":false}"#,
                " {\"id\":3}\n",
            ],
        );
        assert_eq!(
            rows(&decoded),
            [
                "1, a, 1.5, true",
                "2, NULL, 2.0, false",
                "3, NULL, NULL, NULL"
            ]
        );
        assert!(decoded.failed.is_empty());
        assert_eq!(decoded.rows, [0, 1, 2]);
    }

    #[test]
    fn json_keys_match_columns_ignoring_case() {
        let table = schema(&[
            ("date_time", TIMESTAMP),
            ("price", DataType::Int64),
            ("name", DataType::Utf8),
        ]);
        let decoded = json(
            &table,
            &[
                r#"{"Price":1,"NAME":"Ann"}"#,
                r#"{"dateTime":"2024-01-01 10:00:00","price":2}"#,
                r#"{"price":3,"PRICE":4}"#,
                r#"{"PRICE":4,"price":3}"#,
                r#"{"name":"Say \"Hi\", {Price}","inner":{"Price":9},"Price":5}"#,
                r#"{"Date_Time":"2024-01-01T10:00:00Z"}"#,
            ],
        );
        assert_eq!(
            rows(&decoded),
            [
                "NULL, 1, Ann",
                "NULL, 2, NULL",
                "NULL, 3, NULL",
                "NULL, 3, NULL",
                "NULL, 5, Say \"Hi\", {Price}",
                "2024-01-01T10:00:00, NULL, NULL",
            ]
        );
    }

    #[test]
    fn keys_are_folded_only_once_a_payload_needs_it() {
        let table = schema(&[("id", DataType::Int64), ("name", DataType::Utf8)]);
        let mut decoder =
            Decoder::new(table, Encode::Json, CsvOptions::default()).expect("a decoder");
        let decode = |decoder: &mut Decoder, payloads: &[&str]| {
            let payloads: Vec<&[u8]> = payloads.iter().map(|p| p.as_bytes()).collect();
            decoder.decode(&payloads).expect("decoded")
        };
        let exact = decode(
            &mut decoder,
            &[r#"{"id":1,"name":"Ann"}"#, r#"{"id":2,"No":"X"}"#],
        );
        assert_eq!(rows(&exact), ["1, Ann", "2, NULL"]);
        let folded = decode(
            &mut decoder,
            &[r#"{"id":3,"Name":"Bo"}"#, "bad", r#"{"ID":4}"#],
        );
        assert_eq!(rows(&folded), ["3, Bo", "4, NULL"]);
        assert_eq!(failed(&folded), [(1, "not a JSON object")]);
        assert!(
            !decoder.keys.always,
            "a bad message has each payload read alone"
        );
        let folded = decode(&mut decoder, &[r#"{"id":5,"Name":"Cy"}"#]);
        assert_eq!(rows(&folded), ["5, Cy"]);
        assert!(decoder.keys.always);
        let folded = decode(&mut decoder, &[r#"{"Id":6,"name":"Di"}"#, r#"{"id":7}"#]);
        assert_eq!(rows(&folded), ["6, Di", "7, NULL"]);
    }

    #[test]
    fn bad_json_messages_are_skipped_and_reported() {
        let table = schema(&[("id", DataType::Int64), ("price", DataType::Int64)]);
        let decoded = json(
            &table,
            &[
                r#"{"id":1,"price":10}"#,
                "[1,2]",
                "42",
                "not json",
                "",
                r#"{"id":2,"price":20}"#,
                r#"{"id":3}{"id":4}"#,
                "{\"id\":5}\n{\"id\":6}",
                r#"{"id":7,"price":"abc"}"#,
                r#"{"id":8,"#,
                r#""id":9}"#,
                r#"{"id":}"#,
                r#"{"id":11,"price":true}"#,
                r#"{"id":12,"price":12}"#,
            ],
        );
        assert_eq!(rows(&decoded), ["1, 10", "2, 20", "12, 12"]);
        assert_eq!(decoded.rows, [0, 5, 13]);
        assert_eq!(
            failed(&decoded),
            [
                (1, "not a JSON object"),
                (2, "not a JSON object"),
                (3, "not a JSON object"),
                (4, "empty message"),
                (6, "more than one JSON value in the message"),
                (7, "more than one JSON value in the message"),
                (8, r#"field "price": cannot parse "abc" as Int64"#),
                (9, "truncated JSON object"),
                (10, "not a JSON object"),
                (
                    11,
                    "invalid JSON: Encountered unexpected '}' whilst parsing value"
                ),
                (12, "field \"price\": expected primitive got true"),
            ]
        );
    }

    #[test]
    fn a_broken_json_message_does_not_reach_into_the_next() {
        let table = schema(&[("id", DataType::Int64), ("price", DataType::Int64)]);
        let decoded = json(
            &table,
            &[r#"{"id":1,"price":"#, "2}", "42", r#"{"id":3,"price":3}"#],
        );
        assert_eq!(rows(&decoded), ["3, 3"]);
        assert_eq!(decoded.rows, [3]);
        assert_eq!(
            failed(&decoded),
            [
                (0, "truncated JSON object"),
                (1, "not a JSON object"),
                (2, "not a JSON object"),
            ]
        );
    }

    #[test]
    fn no_messages_or_no_good_ones_give_an_empty_batch() {
        let table = schema(&[("id", DataType::Int64)]);
        let decoded = json(&table, &[]);
        assert_eq!(decoded.batch.num_rows(), 0);
        assert_eq!(decoded.batch.schema(), table);
        let decoded = json(&table, &["x", "[]"]);
        assert_eq!(decoded.batch.num_rows(), 0);
        assert_eq!(decoded.batch.schema(), table);
        assert_eq!(decoded.failed.len(), 2);
    }

    #[test]
    fn json_values_into_each_column_type() {
        let table = schema(&[
            ("b", DataType::Int64),
            ("i", DataType::Int32),
            ("d", DataType::Float64),
            ("n", DataType::Decimal128(10, 2)),
            ("s", DataType::Utf8),
            ("f", DataType::Boolean),
        ]);
        let decoded = json(
            &table,
            &[
                r#"{"b":9007199254740993,"i":-5,"d":1e3,"n":12.5,"s":"x","f":true}"#,
                r#"{"b":"42","n":"1.5e2","s":42.50,"f":false}"#,
                r#"{"i":3000000000}"#,
                r#"{"n":123456789.1}"#,
                r#"{"s":{"a":1}}"#,
                r#"{"n":true}"#,
                r#"{"s":true}"#,
            ],
        );
        assert_eq!(
            rows(&decoded),
            [
                "9007199254740993, -5, 1000.0, 12.50, x, true",
                "42, NULL, NULL, 150.00, 42.50, false",
                "NULL, NULL, NULL, NULL, true, NULL",
            ]
        );
        assert_eq!(
            failed(&decoded),
            [
                (2, "field \"i\": cannot parse 3000000000 as Int32"),
                (
                    3,
                    r#"field "n": cannot parse "123456789.1" as Decimal128(10, 2)"#
                ),
                (4, r#"field "s": expected string got {"a": 1}"#),
                (5, r#"field "n": cannot parse "true" as Decimal128(10, 2)"#),
            ]
        );
    }

    #[test]
    fn json_timestamps_in_each_accepted_form() {
        let micros = DataType::Timestamp(TimeUnit::Microsecond, None);
        let table = schema(&[("at", TIMESTAMP), ("at_us", micros)]);
        let decoded = json(
            &table,
            &[
                r#"{"at":"2024-01-01 10:00:00","at_us":"2024-01-01 10:00:00"}"#,
                r#"{"at":"2024-01-01T10:00:00Z","at_us":"2024-01-01T10:00:00Z"}"#,
                r#"{"at":"2024-01-01T10:00:00.123","at_us":"2024-01-01T10:00:00.123"}"#,
                r#"{"at":1704103200000,"at_us":1704103200000}"#,
                r#"{"at":"1704103200123","at_us":-1000}"#,
                r#"{"at":"2024-01-01T12:00:00+02:00","at_us":null}"#,
                r#"{"at":"yesterday"}"#,
                r#"{"at":true}"#,
                r#"{"at":1.5}"#,
                r#"{"at":9999999999999999}"#,
            ],
        );
        assert_eq!(
            rows(&decoded),
            [
                "2024-01-01T10:00:00, 2024-01-01T10:00:00",
                "2024-01-01T10:00:00, 2024-01-01T10:00:00",
                "2024-01-01T10:00:00.123, 2024-01-01T10:00:00.123",
                "2024-01-01T10:00:00, 2024-01-01T10:00:00",
                "2024-01-01T10:00:00.123, 1969-12-31T23:59:59",
                "2024-01-01T10:00:00, NULL",
            ]
        );
        assert_eq!(
            failed(&decoded),
            [
                (6, r#"field "at": cannot parse "yesterday" as timestamp"#),
                (7, r#"field "at": cannot parse "true" as timestamp"#),
                (8, r#"field "at": cannot parse "1.5" as timestamp"#),
                (
                    9,
                    r#"field "at": cannot parse "9999999999999999" as timestamp"#
                ),
            ]
        );
    }

    #[test]
    fn a_null_in_a_not_null_column_fails_its_message() {
        let table = Arc::new(Schema::new(vec![
            Field::new("id", DataType::Int64, false),
            Field::new("name", DataType::Utf8, true),
        ]));
        let decoded = json(&table, &[r#"{"id":1}"#, r#"{"name":"a"}"#]);
        assert_eq!(rows(&decoded), ["1, NULL"]);
        assert_eq!(
            failed(&decoded),
            [(1, r#"field "id": null in a NOT NULL column"#)]
        );
    }

    #[test]
    fn csv_records_in_column_order() {
        let table = schema(&[
            ("id", DataType::Int64),
            ("name", DataType::Utf8),
            ("price", DataType::Decimal128(10, 2)),
            ("at", TIMESTAMP),
            ("ok", DataType::Boolean),
        ]);
        let decoded = csv(
            &table,
            &[
                "1,Ann,1.50,2024-01-01 10:00:00,true",
                "2,\"Smith, J\",2,1704103200000,false\n",
                "3,,,,\r\n",
                "4,\"say \"\"hi\"\"\",3.25,2024-01-01T10:00:00.5Z,f",
                "5,x,,,\r",
            ],
        );
        assert_eq!(
            rows(&decoded),
            [
                "1, Ann, 1.50, 2024-01-01T10:00:00, true",
                "2, Smith, J, 2.00, 2024-01-01T10:00:00, false",
                "3, NULL, NULL, NULL, NULL",
                "4, say \"hi\", 3.25, 2024-01-01T10:00:00.500, false",
                "5, x, NULL, NULL, NULL",
            ]
        );
        assert!(decoded.failed.is_empty());
    }

    #[test]
    fn csv_delimiter_and_header_options() {
        let table = schema(&[("id", DataType::Int64), ("name", DataType::Utf8)]);
        let options = CsvOptions {
            delimiter: b';',
            header: true,
        };
        let decoded = decode(
            &table,
            Encode::Csv,
            options,
            &["id;name\n1;a,b", "id;name\r\n2;c\n", "id;name", "3;d"],
        );
        assert_eq!(rows(&decoded), ["1, a,b", "2, c"]);
        assert_eq!(
            failed(&decoded),
            [(2, "empty message"), (3, "empty message")]
        );
    }

    #[test]
    fn bad_csv_messages_are_skipped_and_reported() {
        let table = schema(&[("id", DataType::Int64), ("name", DataType::Utf8)]);
        let decoded = csv(
            &table,
            &[
                "1,a",
                "1",
                "1,a,x",
                "abc,a",
                "5,\"unterminated",
                "6,b",
                "7,c\n8,d",
                "",
                "9,e\n\n",
            ],
        );
        assert_eq!(rows(&decoded), ["1, a", "6, b", "9, e"]);
        assert_eq!(decoded.rows, [0, 5, 8]);
        assert_eq!(
            failed(&decoded),
            [
                (
                    1,
                    "invalid CSV: incorrect number of fields for line 1, expected 2 got 1"
                ),
                (
                    2,
                    "invalid CSV: incorrect number of fields for line 1, expected 2 got more than 2"
                ),
                (3, r#"field "id": cannot parse "abc" as Int64"#),
                (4, "unterminated quoted field"),
                (6, "more than one CSV record in the message"),
                (7, "empty message"),
            ]
        );
    }

    #[test]
    fn a_bad_value_fails_its_row_without_failing_the_rest() {
        let table = schema(&[("id", DataType::Int64), ("at", TIMESTAMP)]);
        let decoded = csv(&table, &["1,2024-01-01 10:00:00", "x,", "3,soon", "4,"]);
        assert_eq!(rows(&decoded), ["1, 2024-01-01T10:00:00", "4, NULL"]);
        assert_eq!(decoded.rows, [0, 3]);
        assert_eq!(
            failed(&decoded),
            [
                (1, r#"field "id": cannot parse "x" as Int64"#),
                (2, r#"field "at": cannot parse "soon" as timestamp"#),
            ]
        );
    }

    #[test]
    fn unreadable_schemas_and_options_are_refused() {
        let interval = schema(&[(
            "gap",
            DataType::Interval(datafusion::arrow::datatypes::IntervalUnit::MonthDayNano),
        )]);
        let e = Decoder::new(interval, Encode::Json, CsvOptions::default())
            .expect_err("arrow's JSON reader has no intervals");
        assert_eq!(e.sqlstate(), "0A000");
        let nested = schema(&[("s", DataType::Struct(Fields::empty()))]);
        let e = Decoder::new(nested, Encode::Csv, CsvOptions::default())
            .expect_err("CSV has no structs");
        assert_eq!(e.sqlstate(), "0A000");
        let quote = CsvOptions {
            delimiter: b'"',
            header: false,
        };
        let e = Decoder::new(schema(&[("a", DataType::Utf8)]), Encode::Csv, quote)
            .expect_err("a quote cannot separate fields");
        assert_eq!(e.sqlstate(), "22023");
    }
}
