//! Sinks: a view's changes over an epoch into Kafka messages, `FORMAT
//! PLAIN`, `UPSERT` or `DEBEZIUM`, consolidated per key first.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use datafusion::arrow::array::{RecordBatch, StructArray};
use datafusion::arrow::datatypes::{Field, FieldRef, SchemaRef};
use datafusion::arrow::json::writer::{EncoderOptions, make_encoder};
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

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
    use datafusion::arrow::array::{
        Decimal128Array, Float64Array, Int64Array, StringArray, TimestampNanosecondArray,
    };
    use datafusion::arrow::datatypes::DataType;

    use super::*;

    use crate::connector::format::test_schema::{TIMESTAMP, schema};

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
