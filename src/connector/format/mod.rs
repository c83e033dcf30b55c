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

use std::collections::{BTreeMap, HashMap};
use std::ops::Range;
use std::sync::Arc;

use datafusion::arrow::array::{
    Array, ArrayRef, AsArray, BooleanArray, Int64Array, PrimitiveArray, RecordBatch, StringArray,
    StructArray,
};
use datafusion::arrow::buffer::NullBuffer;
use datafusion::arrow::compute::kernels::cast_utils::parse_decimal;
use datafusion::arrow::compute::{can_cast_types, cast, concat_batches, filter};
use datafusion::arrow::datatypes::{
    DataType, Decimal32Type, Decimal64Type, Decimal128Type, Decimal256Type, DecimalType, Field,
    FieldRef, Int64Type, Schema, SchemaRef, TimeUnit,
};
use datafusion::arrow::error::ArrowError;
use datafusion::arrow::json::writer::{EncoderOptions, make_encoder};
use datafusion::arrow::{csv, json};
use serde::{Deserialize, Serialize};

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

/// A column of the table from the reader's column, which is text when the
/// reader left the conversion to us. A value that does not convert, or a NULL
/// in a non-nullable column, marks its row bad with the first such problem.
fn convert_column(
    field: &Field,
    column: &ArrayRef,
    bad: &mut BTreeMap<usize, String>,
) -> Result<ArrayRef> {
    let converted = match (column.as_string_opt::<i32>(), field.data_type()) {
        (_, to) if to == column.data_type() => column.clone(),
        (Some(text), DataType::Timestamp(unit, _)) => timestamps(text, field.data_type(), *unit)?,
        (Some(text), DataType::Decimal32(p, s)) => decimals::<Decimal32Type>(text, *p, *s)?,
        (Some(text), DataType::Decimal64(p, s)) => decimals::<Decimal64Type>(text, *p, *s)?,
        (Some(text), DataType::Decimal128(p, s)) => decimals::<Decimal128Type>(text, *p, *s)?,
        (Some(text), DataType::Decimal256(p, s)) => decimals::<Decimal256Type>(text, *p, *s)?,
        // The cast kernel turns a value it cannot read into NULL.
        (_, to) => cast(column, to)?,
    };
    if converted.null_count() > column.null_count() {
        for row in (0..column.len()).filter(|r| column.is_valid(*r) && converted.is_null(*r)) {
            let text = column
                .as_string_opt::<i32>()
                .map_or(String::new(), |t| format!(" \"{}\"", t.value(row)));
            bad.entry(row).or_insert_with(|| {
                format!(
                    "field \"{}\": cannot parse{text} as {}",
                    field.name(),
                    type_name(field.data_type())
                )
            });
        }
    }
    if !field.is_nullable() && converted.null_count() > 0 {
        for row in (0..converted.len()).filter(|r| converted.is_null(*r)) {
            bad.entry(row).or_insert_with(|| {
                format!("field \"{}\": null in a NOT NULL column", field.name())
            });
        }
    }
    Ok(converted)
}

fn type_name(data_type: &DataType) -> String {
    match data_type {
        DataType::Timestamp(..) => "timestamp".into(),
        other => other.to_string(),
    }
}

/// Timestamps from text: an integer is epoch milliseconds; anything else goes
/// to arrow's timestamp parser. An unreadable value becomes NULL.
fn timestamps(text: &StringArray, to: &DataType, unit: TimeUnit) -> Result<ArrayRef> {
    let parsed = cast(&cast(text, to)?, &DataType::Int64)?;
    let parsed = parsed.as_primitive::<Int64Type>();
    let values: Int64Array = text
        .iter()
        .zip(parsed.iter())
        .map(|(text, parsed)| match text?.parse::<i64>() {
            Ok(millis) => from_millis(millis, unit),
            Err(_) => parsed,
        })
        .collect();
    Ok(cast(&values, to)?)
}

fn from_millis(millis: i64, unit: TimeUnit) -> Option<i64> {
    match unit {
        TimeUnit::Second => Some(millis.div_euclid(1_000)),
        TimeUnit::Millisecond => Some(millis),
        TimeUnit::Microsecond => millis.checked_mul(1_000),
        TimeUnit::Nanosecond => millis.checked_mul(1_000_000),
    }
}

/// Decimals through arrow's own decimal parser (the one its readers use,
/// which takes exponents: `1.5e2`); an unreadable value becomes NULL.
fn decimals<T: DecimalType>(text: &StringArray, precision: u8, scale: i8) -> Result<ArrayRef> {
    let values: PrimitiveArray<T> = text
        .iter()
        .map(|text| parse_decimal::<T>(text?, precision, scale).ok())
        .collect();
    Ok(Arc::new(values.with_precision_and_scale(precision, scale)?))
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

/// Renames the keys of a JSON object that match a column only when ASCII case
/// is ignored, since arrow's reader matches names exactly.
///
/// Only payloads that may need it are looked at (see [`Decoder::read_all`]).
/// One without an ASCII capital letter cannot hold such a key (when the
/// columns are lower case); the keys of the others are located by a scan
/// that skips over values without parsing them, and only a payload that
/// needs a rename is copied. On a 200-byte message, looking for a capital
/// takes 20-40 ns and scanning the keys 170-350 ns (optimized build).
#[derive(Debug)]
struct KeyFolder {
    /// Each column's name as it is written inside a JSON string.
    columns: Vec<Vec<u8>>,
    /// A column name with a capital: any payload may then need a rename.
    capitals: bool,
    /// Fold every payload as it is fed (see [`Decoder::read_all`]).
    always: bool,
    /// The key ranges of the last payload scanned.
    keys: Vec<Range<usize>>,
}

impl KeyFolder {
    fn new(schema: &Schema) -> KeyFolder {
        let columns: Vec<Vec<u8>> = schema
            .fields()
            .iter()
            .map(|f| json_string_body(f.name()))
            .collect();
        let capitals = columns.iter().any(|c| has_capital(c));
        KeyFolder {
            columns,
            capitals,
            always: false,
            keys: Vec::new(),
        }
    }

    /// Whether a row of `batch` that has a NULL came from a payload with a
    /// key to rename.
    fn needed(&mut self, batch: &RecordBatch, payloads: &[&[u8]]) -> bool {
        let nulls = batch.columns().iter().fold(None, |nulls, column| {
            NullBuffer::union(nulls.as_ref(), column.logical_nulls().as_ref())
        });
        let Some(nulls) = nulls else {
            return false;
        };
        nulls
            .iter()
            .zip(payloads)
            .any(|(valid, payload)| !valid && !self.renames(payload).is_empty())
    }

    /// The payload, or a copy of it in `out` with keys renamed.
    fn fold<'a>(&mut self, payload: &'a [u8], out: &'a mut Vec<u8>) -> &'a [u8] {
        let renames = self.renames(payload);
        if renames.is_empty() {
            return payload;
        }
        out.clear();
        let mut at = 0;
        for (key, column) in renames {
            out.extend_from_slice(&payload[at..key.start]);
            out.extend_from_slice(&self.columns[column]);
            at = key.end;
        }
        out.extend_from_slice(&payload[at..]);
        out
    }

    /// The keys that match a column only ignoring case, each with its column,
    /// unless that column also has a key of its exact name. Nothing for a
    /// payload that is not an object, which the reader reports.
    fn renames(&mut self, payload: &[u8]) -> Vec<(Range<usize>, usize)> {
        self.keys.clear();
        if !self.capitals && !has_capital(payload) {
            return Vec::new();
        }
        if top_level_keys(payload, &mut self.keys).is_none() {
            return Vec::new();
        }
        let keys: Vec<&[u8]> = self.keys.iter().map(|k| &payload[k.clone()]).collect();
        let exact = |column: &[u8]| keys.contains(&column);
        self.keys
            .iter()
            .zip(&keys)
            .filter(|(_, key)| !exact_column(&self.columns, key))
            .filter_map(|(range, key)| {
                let column = self
                    .columns
                    .iter()
                    .position(|c| c.eq_ignore_ascii_case(key))?;
                (!exact(&self.columns[column])).then(|| (range.clone(), column))
            })
            .collect()
    }
}

fn exact_column(columns: &[Vec<u8>], key: &[u8]) -> bool {
    columns.iter().any(|c| c.as_slice() == key)
}

fn has_capital(bytes: &[u8]) -> bool {
    // Chunked so the compiler can test many bytes at a time.
    bytes.chunks(32).any(|chunk| {
        chunk
            .iter()
            .fold(false, |any, b| any | b.is_ascii_uppercase())
    })
}

/// `name` as it is written between the quotes of a JSON string.
fn json_string_body(name: &str) -> Vec<u8> {
    let quoted = serde_json::to_vec(name).unwrap_or_default();
    quoted
        .get(1..quoted.len().saturating_sub(1))
        .unwrap_or_default()
        .to_vec()
}

/// The ranges of the top-level keys of a JSON object (between their quotes),
/// or None if `json` does not start as an object or ends inside one. Nothing
/// else is checked: the reader does that.
fn top_level_keys(json: &[u8], keys: &mut Vec<Range<usize>>) -> Option<()> {
    let mut depth = 0usize;
    let mut key_next = false;
    let mut at = 0;
    while at < json.len() {
        match json[at] {
            b' ' | b'\t' | b'\n' | b'\r' => {}
            b'{' if depth == 0 => {
                depth = 1;
                key_next = true;
            }
            _ if depth == 0 => return None,
            b'"' => {
                let end = string_end(json, at + 1)?;
                if depth == 1 && key_next {
                    keys.push(at + 1..end);
                    key_next = false;
                }
                at = end;
            }
            b'{' | b'[' => depth += 1,
            b'}' | b']' => {
                depth -= 1;
                if depth == 0 {
                    return Some(());
                }
            }
            b',' if depth == 1 => key_next = true,
            _ => {}
        }
        at += 1;
    }
    None
}

/// The index of the quote that closes the string whose text starts at `at`.
fn string_end(json: &[u8], mut at: usize) -> Option<usize> {
    while at < json.len() {
        match json[at] {
            b'"' => return Some(at),
            b'\\' => at += 2,
            _ => at += 1,
        }
    }
    None
}

/// How a sink writes a view's changes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SinkFormat {
    /// Each inserted row as a JSON object; no key.
    Plain,
    /// Keyed by the view's unique key: the row as it now is, or a tombstone.
    Upsert,
    /// Keyed as Upsert; Debezium's before/after envelope.
    Debezium,
}

impl SinkFormat {
    fn name(self) -> &'static str {
        match self {
            SinkFormat::Plain => "FORMAT PLAIN",
            SinkFormat::Upsert => "FORMAT UPSERT",
            SinkFormat::Debezium => "FORMAT DEBEZIUM",
        }
    }
}

/// One Kafka message; a `None` value is a tombstone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Message {
    pub key: Option<Vec<u8>>,
    pub value: Option<Vec<u8>>,
}

/// Turns a view's changes into sink messages.
///
/// Rows are JSON objects written by arrow's JSON encoder: NULL as `null`,
/// timestamps as `"2024-01-01 10:00:00"` with a fraction of 3, 6 or 9 digits
/// when it is not zero (`"2024-01-01 10:00:00.120"`), decimals as JSON numbers
/// with their scale, NaN and infinities as `null`.
///
/// The changes of an epoch are consolidated first, so a row inserted and
/// deleted within one epoch writes nothing in any format.
#[derive(Debug)]
pub struct Encoder {
    schema: SchemaRef,
    format: SinkFormat,
    key: Vec<usize>,
    force_append_only: bool,
    options: EncoderOptions,
}

/// One key's net change over an epoch: the row it had before and the row it
/// has after, as JSON.
struct KeyChange {
    key: Vec<u8>,
    before: Option<Vec<u8>>,
    after: Option<Vec<u8>>,
}

impl Encoder {
    /// `key`: indices of the key columns (the view's unique key; may be empty
    /// for Plain). `force_append_only`: Plain drops deletes instead of failing.
    pub fn new(
        schema: SchemaRef,
        format: SinkFormat,
        key: Vec<usize>,
        force_append_only: bool,
    ) -> Result<Encoder> {
        if let Some(column) = key.iter().find(|c| **c >= schema.fields().len()) {
            return Err(Error::Internal(format!(
                "sink key column {column} is not among the view's {} columns",
                schema.fields().len()
            )));
        }
        if format != SinkFormat::Plain && key.is_empty() {
            return Err(Error::NotSupported(format!(
                "{} needs a view with a unique key (a primary key, or the GROUP BY \
                 columns of an aggregate); use FORMAT PLAIN for an append-only view",
                format.name()
            )));
        }
        let options = EncoderOptions::default()
            .with_explicit_nulls(true)
            .with_timestamp_format("%Y-%m-%d %H:%M:%S%.f".into())
            .with_timestamp_tz_format("%Y-%m-%d %H:%M:%S%.f%:z".into());
        let encoder = Encoder {
            schema,
            format,
            key,
            force_append_only,
            options,
        };
        // Arrow's encoder refuses some types; say so now, not at the first row.
        encoder
            .rows_json(&RecordBatch::new_empty(encoder.schema.clone()))
            .map_err(|e| {
                Error::NotSupported(format!(
                    "{} cannot write this view: {}",
                    format.name(),
                    e.message()
                ))
            })?;
        Ok(encoder)
    }

    /// The messages for one epoch's changes: `diffs[i]` copies of row `i`
    /// inserted (+) or deleted (-). Same input, same messages in the same
    /// order: Plain keeps the order of the rows, Upsert and Debezium order by
    /// the key's JSON bytes.
    pub fn encode(
        &self,
        batch: &RecordBatch,
        diffs: &[i64],
        epoch_time_ms: i64,
    ) -> Result<Vec<Message>> {
        if diffs.len() != batch.num_rows() {
            return Err(Error::Internal(format!(
                "a sink got {} rows but {} diffs",
                batch.num_rows(),
                diffs.len()
            )));
        }
        match self.format {
            SinkFormat::Plain => self.plain(batch, diffs),
            SinkFormat::Upsert => Ok(self
                .key_changes(batch, diffs)?
                .into_iter()
                .map(|change| Message {
                    key: Some(change.key),
                    value: change.after,
                })
                .collect()),
            SinkFormat::Debezium => Ok(self
                .key_changes(batch, diffs)?
                .into_iter()
                .flat_map(|change| debezium(change, epoch_time_ms))
                .collect()),
        }
    }

    fn plain(&self, batch: &RecordBatch, diffs: &[i64]) -> Result<Vec<Message>> {
        let values = self.rows_json(batch)?;
        let net = match diffs.iter().all(|d| *d >= 0) {
            true => values.into_iter().zip(diffs.iter().copied()).collect(),
            false => consolidate(values, diffs),
        };
        let mut messages = Vec::new();
        for (value, diff) in net {
            if diff < 0 && !self.force_append_only {
                return Err(Error::NotSupported(
                    "the view retracts rows, which FORMAT PLAIN cannot express; use \
                     FORMAT UPSERT or FORMAT DEBEZIUM, or set force_append_only = 'true' \
                     to drop the retractions"
                        .into(),
                ));
            }
            for _ in 0..diff.max(0) {
                messages.push(Message {
                    key: None,
                    value: Some(value.clone()),
                });
            }
        }
        Ok(messages)
    }

    /// The net change of each key over the epoch, in the order of the keys'
    /// bytes; keys whose changes cancel out are left out.
    fn key_changes(&self, batch: &RecordBatch, diffs: &[i64]) -> Result<Vec<KeyChange>> {
        let keys = self.rows_json(&batch.project(&self.key)?)?;
        let values = self.rows_json(batch)?;
        let mut by_key: BTreeMap<Vec<u8>, Vec<(Vec<u8>, i64)>> = BTreeMap::new();
        for ((key, value), diff) in keys.into_iter().zip(values).zip(diffs) {
            let rows = by_key.entry(key).or_default();
            match rows.iter_mut().find(|(v, _)| *v == value) {
                Some((_, total)) => *total += diff,
                None => rows.push((value, *diff)),
            }
        }
        let mut changes = Vec::with_capacity(by_key.len());
        for (key, rows) in by_key {
            if let Some(change) = net_change(key, rows)? {
                changes.push(change);
            }
        }
        Ok(changes)
    }

    /// Each row of `batch` as a JSON object.
    fn rows_json(&self, batch: &RecordBatch) -> Result<Vec<Vec<u8>>> {
        let array = StructArray::from(batch.clone());
        let field: FieldRef = Arc::new(Field::new_struct(
            "",
            batch.schema().fields().clone(),
            false,
        ));
        let mut encoder = make_encoder(&field, &array, &self.options)?;
        Ok((0..batch.num_rows())
            .map(|row| {
                let mut out = Vec::new();
                encoder.encode(row, &mut out);
                out
            })
            .collect())
    }
}

/// Equal rows summed, in the order each first appears.
fn consolidate(values: Vec<Vec<u8>>, diffs: &[i64]) -> Vec<(Vec<u8>, i64)> {
    let mut net: Vec<(Vec<u8>, i64)> = Vec::new();
    let mut seen: HashMap<Vec<u8>, usize> = HashMap::new();
    for (value, diff) in values.into_iter().zip(diffs) {
        match seen.get(&value) {
            Some(at) => net[*at].1 += diff,
            None => {
                seen.insert(value.clone(), net.len());
                net.push((value, *diff));
            }
        }
    }
    net.retain(|(_, diff)| *diff != 0);
    net
}

/// With a unique key, a key's rows over an epoch net to at most one delete
/// (the row it had) and one insert (the row it has).
fn net_change(key: Vec<u8>, rows: Vec<(Vec<u8>, i64)>) -> Result<Option<KeyChange>> {
    let mut before = None;
    let mut after = None;
    for (value, diff) in rows {
        match diff {
            0 => {}
            -1 if before.is_none() => before = Some(value),
            1 if after.is_none() => after = Some(value),
            _ => {
                return Err(Error::Internal(format!(
                    "the sink key {} is not unique in the view's changes",
                    String::from_utf8_lossy(&key)
                )));
            }
        }
    }
    Ok((before.is_some() || after.is_some()).then_some(KeyChange { key, before, after }))
}

/// A key's change as a Debezium envelope, and after a delete the tombstone
/// that lets Kafka compaction forget the key.
fn debezium(change: KeyChange, epoch_time_ms: i64) -> Vec<Message> {
    let op = match (&change.before, &change.after) {
        (None, _) => "c",
        (Some(_), Some(_)) => "u",
        (Some(_), None) => "d",
    };
    let mut value = Vec::new();
    value.extend_from_slice(b"{\"before\":");
    value.extend_from_slice(change.before.as_deref().unwrap_or(b"null"));
    value.extend_from_slice(b",\"after\":");
    value.extend_from_slice(change.after.as_deref().unwrap_or(b"null"));
    value.extend_from_slice(
        format!(
            ",\"op\":\"{op}\",\"ts_ms\":{epoch_time_ms},\"source\":{{\"connector\":\"weir\"}}}}"
        )
        .as_bytes(),
    );
    let mut messages = vec![Message {
        key: Some(change.key.clone()),
        value: Some(value),
    }];
    if op == "d" {
        messages.push(Message {
            key: Some(change.key),
            value: None,
        });
    }
    messages
}

#[cfg(test)]
mod tests {
    use datafusion::arrow::array::{Decimal128Array, Float64Array, TimestampNanosecondArray};
    use datafusion::arrow::datatypes::Fields;
    use datafusion::arrow::util::display::{ArrayFormatter, FormatOptions};

    use super::*;

    /// The Arrow type `CREATE TABLE` gives a TIMESTAMP column.
    const TIMESTAMP: DataType = DataType::Timestamp(TimeUnit::Nanosecond, None);

    fn schema(columns: &[(&str, DataType)]) -> SchemaRef {
        let fields: Vec<Field> = columns
            .iter()
            .map(|(name, data_type)| Field::new(*name, data_type.clone(), true))
            .collect();
        Arc::new(Schema::new(fields))
    }

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

    #[test]
    fn top_level_keys_skip_over_values() {
        let json = br#" { "a" : 1, "B\"c":{"x":"}"}, "d":[1,{"e":"]"}], "f":"\\", "g":null } "#;
        let mut keys = Vec::new();
        assert_eq!(top_level_keys(json, &mut keys), Some(()));
        let keys: Vec<&[u8]> = keys.into_iter().map(|k| &json[k]).collect();
        assert_eq!(keys, [&b"a"[..], br#"B\"c"#, b"d", b"f", b"g"]);
        let not_objects = [
            &b"[1]"[..],
            b"",
            b"x{}",
            b"\"x\"{}",
            b"{\"a\":1",
            b"{\"a\":\"1}",
        ];
        for not_an_object in not_objects {
            assert_eq!(top_level_keys(not_an_object, &mut Vec::new()), None);
        }
    }

    #[test]
    fn formats_serialize_in_lower_case() {
        let names = serde_json::to_string(&(Encode::Json, Encode::Csv, SinkFormat::Debezium))
            .expect("serializable");
        assert_eq!(names, r#"["json","csv","debezium"]"#);
        let back: SinkFormat = serde_json::from_str(r#""upsert""#).expect("a format");
        assert_eq!(back, SinkFormat::Upsert);
    }

    fn view() -> SchemaRef {
        schema(&[("id", DataType::Int64), ("name", DataType::Utf8)])
    }

    fn changes(rows: &[(i64, Option<&str>)]) -> RecordBatch {
        let ids = Int64Array::from_iter_values(rows.iter().map(|(id, _)| *id));
        let names: StringArray = rows.iter().map(|(_, name)| *name).collect();
        RecordBatch::try_new(view(), vec![Arc::new(ids), Arc::new(names)]).expect("a batch")
    }

    fn encoder(format: SinkFormat, key: Vec<usize>, force_append_only: bool) -> Encoder {
        Encoder::new(view(), format, key, force_append_only).expect("an encoder")
    }

    /// Each message as `key => value`, `-` for no key, `tombstone` for no value.
    fn show(messages: &[Message]) -> Vec<String> {
        let text = |bytes: &Option<Vec<u8>>, none: &str| match bytes {
            Some(b) => String::from_utf8_lossy(b).into_owned(),
            None => none.to_string(),
        };
        messages
            .iter()
            .map(|m| format!("{} => {}", text(&m.key, "-"), text(&m.value, "tombstone")))
            .collect()
    }

    #[test]
    fn plain_writes_one_message_per_inserted_copy() {
        let plain = encoder(SinkFormat::Plain, vec![], false);
        let batch = changes(&[(2, Some("b")), (1, None)]);
        let messages = plain.encode(&batch, &[1, 2], 0).expect("inserts");
        assert_eq!(
            show(&messages),
            [
                r#"- => {"id":2,"name":"b"}"#,
                r#"- => {"id":1,"name":null}"#,
                r#"- => {"id":1,"name":null}"#,
            ]
        );
    }

    #[test]
    fn plain_writes_each_type_as_json() {
        let table = schema(&[
            ("at", TIMESTAMP),
            ("price", DataType::Decimal128(10, 2)),
            ("score", DataType::Float64),
        ]);
        let at = TimestampNanosecondArray::from(vec![
            Some(1_704_103_200_000_000_000),
            Some(1_704_103_200_120_000_000),
            None,
        ]);
        let price = Decimal128Array::from(vec![Some(1250), Some(-5), None])
            .with_precision_and_scale(10, 2)
            .expect("a decimal");
        let score = Float64Array::from(vec![Some(1.5), Some(f64::NAN), Some(2.0)]);
        let batch = RecordBatch::try_new(
            table.clone(),
            vec![Arc::new(at), Arc::new(price), Arc::new(score)],
        )
        .expect("a batch");
        let plain = Encoder::new(table, SinkFormat::Plain, vec![], false).expect("an encoder");
        let messages = plain.encode(&batch, &[1, 1, 1], 0).expect("inserts");
        assert_eq!(
            show(&messages),
            [
                r#"- => {"at":"2024-01-01 10:00:00","price":12.50,"score":1.5}"#,
                r#"- => {"at":"2024-01-01 10:00:00.120","price":-0.05,"score":null}"#,
                r#"- => {"at":null,"price":null,"score":2.0}"#,
            ]
        );
    }

    #[test]
    fn plain_refuses_retractions_unless_forced_to_append_only() {
        let batch = changes(&[(1, Some("a")), (2, Some("b"))]);
        let e = encoder(SinkFormat::Plain, vec![], false)
            .encode(&batch, &[1, -1], 0)
            .expect_err("a delete");
        assert_eq!(e.sqlstate(), "0A000");
        assert!(e.to_string().contains("FORMAT UPSERT or FORMAT DEBEZIUM"));
        let forced = encoder(SinkFormat::Plain, vec![], true);
        let messages = forced.encode(&batch, &[1, -1], 0).expect("deletes dropped");
        assert_eq!(show(&messages), [r#"- => {"id":1,"name":"a"}"#]);
    }

    #[test]
    fn plain_writes_nothing_for_a_row_inserted_and_deleted_in_one_epoch() {
        let batch = changes(&[(1, Some("a")), (2, Some("b")), (1, Some("a"))]);
        let plain = encoder(SinkFormat::Plain, vec![], false);
        let messages = plain
            .encode(&batch, &[1, 1, -1], 0)
            .expect("nets to inserts");
        assert_eq!(show(&messages), [r#"- => {"id":2,"name":"b"}"#]);
    }

    /// An update of 1, an insert of 2 and 10, a delete of 3, and 4 in and out.
    fn epoch() -> Vec<((i64, Option<&'static str>), i64)> {
        vec![
            ((2, Some("x")), 1),
            ((1, Some("old")), -1),
            ((4, Some("blip")), 1),
            ((3, Some("gone")), -1),
            ((1, Some("new")), 1),
            ((10, Some("ten")), 1),
            ((4, Some("blip")), -1),
        ]
    }

    fn encode_epoch(
        encoder: &Encoder,
        epoch: &[((i64, Option<&str>), i64)],
    ) -> Result<Vec<Message>> {
        let rows: Vec<(i64, Option<&str>)> = epoch.iter().map(|(row, _)| *row).collect();
        let diffs: Vec<i64> = epoch.iter().map(|(_, diff)| *diff).collect();
        encoder.encode(&changes(&rows), &diffs, 1_700)
    }

    #[test]
    fn upsert_writes_each_key_as_it_ends_the_epoch() {
        let upsert = encoder(SinkFormat::Upsert, vec![0], false);
        let messages = encode_epoch(&upsert, &epoch()).expect("changes");
        assert_eq!(
            show(&messages),
            [
                r#"{"id":10} => {"id":10,"name":"ten"}"#,
                r#"{"id":1} => {"id":1,"name":"new"}"#,
                r#"{"id":2} => {"id":2,"name":"x"}"#,
                r#"{"id":3} => tombstone"#,
            ]
        );
    }

    #[test]
    fn the_same_changes_in_any_order_give_the_same_messages() {
        for format in [SinkFormat::Upsert, SinkFormat::Debezium] {
            let encoder = encoder(format, vec![0], false);
            let forward = encode_epoch(&encoder, &epoch()).expect("changes");
            let mut reversed = epoch();
            reversed.reverse();
            assert_eq!(encode_epoch(&encoder, &reversed).expect("changes"), forward);
        }
    }

    #[test]
    fn debezium_writes_envelopes_and_a_tombstone_after_a_delete() {
        let debezium = encoder(SinkFormat::Debezium, vec![0], false);
        let messages = encode_epoch(&debezium, &epoch()).expect("changes");
        let source = r#""source":{"connector":"weir"}"#;
        assert_eq!(
            show(&messages),
            [
                format!(
                    r#"{{"id":10}} => {{"before":null,"after":{{"id":10,"name":"ten"}},"op":"c","ts_ms":1700,{source}}}"#
                ),
                format!(
                    r#"{{"id":1}} => {{"before":{{"id":1,"name":"old"}},"after":{{"id":1,"name":"new"}},"op":"u","ts_ms":1700,{source}}}"#
                ),
                format!(
                    r#"{{"id":2}} => {{"before":null,"after":{{"id":2,"name":"x"}},"op":"c","ts_ms":1700,{source}}}"#
                ),
                format!(
                    r#"{{"id":3}} => {{"before":{{"id":3,"name":"gone"}},"after":null,"op":"d","ts_ms":1700,{source}}}"#
                ),
                r#"{"id":3} => tombstone"#.to_string(),
            ]
        );
    }

    #[test]
    fn keyed_formats_need_a_unique_key() {
        for format in [SinkFormat::Upsert, SinkFormat::Debezium] {
            let e = Encoder::new(view(), format, vec![], false).expect_err("no key");
            assert_eq!(e.sqlstate(), "0A000");
            assert!(e.to_string().contains("needs a view with a unique key"));
        }
        let e = Encoder::new(view(), SinkFormat::Upsert, vec![2], false).expect_err("no column 2");
        assert_eq!(e.sqlstate(), "XX000");
        let upsert = encoder(SinkFormat::Upsert, vec![0], false);
        let two_rows = [((1, Some("a")), 1), ((1, Some("b")), 1)];
        let e = encode_epoch(&upsert, &two_rows).expect_err("the key is not unique");
        assert_eq!(e.sqlstate(), "XX000");
        let e = upsert
            .encode(&changes(&[(1, None)]), &[], 0)
            .expect_err("a diff per row");
        assert_eq!(e.sqlstate(), "XX000");
    }
}
