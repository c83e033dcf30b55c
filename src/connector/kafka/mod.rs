//! Kafka through rdkafka: a source task that reads a topic into a table's
//! log, and a sink task that writes a relation's changes to a topic.
//!
//! The source assigns itself every partition (no consumer-group
//! rebalancing), reads from the offsets committed with its last write, and
//! writes each partition's messages as one write whose producer position is
//! the next offset: the rows and the position commit together.
//!
//! The sink writes each epoch's changes in order, every message stamped
//! with its epoch and its place in that epoch's partition (headers
//! `weir.epoch`, `weir.seq`), and records the last epoch Kafka acknowledged
//! in full. Partitions are chosen deterministically, so after a crash the
//! sink replays from that epoch and skips, per partition, what the
//! partition's last message shows was already written: a consumer sees
//! every change once, without depending on broker transactions.

use std::sync::Arc;
use std::time::Duration;

use rdkafka::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};

use super::format::{CsvOptions, Encode, SinkFormat};
use super::{Failure, refuse_unknown};
use crate::catalog::{ConnectorDef, Encoding, Format, Table, TableDef};
use crate::error::{Error, Result};

mod shuffle;
mod sink;
mod source;

pub use shuffle::{forget as forget_split_source, positions_prefix, split_source};
pub use sink::{open as open_sink_stream, sink};
pub use source::source;

/// Messages written per partition in one write, at most.
pub(super) const MAX_BATCH: usize = 10_000;

/// How long a metadata or offset request may take.
pub(super) const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// Where a source starts reading when it has no committed position.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Startup {
    Earliest,
    Latest,
    /// The first message at or after this time (milliseconds since the epoch).
    Timestamp(i64),
}

/// What a source does with a message it cannot read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OnError {
    /// Drop it, count it and keep it in `source_errors`.
    Skip,
    /// Stop the source; SHOW SOURCES says why.
    Fail,
    /// Copy it to this topic, and count and keep it as for `Skip`.
    DeadLetter(String),
}

/// Options common to sources and sinks.
#[derive(Debug, Clone)]
struct Client {
    bootstrap: String,
    topic: String,
    /// `properties.*` options other than the bootstrap servers, passed to librdkafka.
    properties: Vec<(String, String)>,
}

impl Client {
    fn parse(connector: &ConnectorDef) -> Result<Client> {
        let bootstrap = connector
            .option("properties.bootstrap.server")
            .or_else(|| connector.option("properties.bootstrap.servers"))
            .ok_or_else(|| {
                Error::InvalidParameter(
                    "connector 'kafka' needs properties.bootstrap.server = 'host:port'".into(),
                )
            })?;
        let topic = connector.required("topic")?;
        let properties = connector
            .options
            .iter()
            .filter_map(|(k, v)| Some((k.strip_prefix("properties.")?.to_string(), v.clone())))
            .filter(|(k, _)| k != "bootstrap.server" && k != "bootstrap.servers")
            .collect();
        let client = Client {
            bootstrap: bootstrap.to_string(),
            topic: topic.to_string(),
            properties,
        };
        client.keep_secrets_out_of_errors();
        Ok(client)
    }

    /// librdkafka quotes setting values in its errors, at client creation
    /// and later (an unknown SASL mechanism, a failed login): every error
    /// text weir shows passes [`message`], which hides these values.
    fn keep_secrets_out_of_errors(&self) {
        let mut known = SECRETS.write();
        for (key, value) in &self.properties {
            if crate::catalog::is_secret(key) && !value.is_empty() {
                known.insert(value.clone());
            }
        }
    }

    fn config(&self) -> ClientConfig {
        let mut config = ClientConfig::new();
        config.set("bootstrap.servers", &self.bootstrap);
        config.set("log_level", "3");
        for (key, value) in &self.properties {
            config.set(key, value);
        }
        config
    }
}

/// Options under `properties.` go to librdkafka as they are.
const PASSED_ON: Option<(&str, &str)> = Some(("properties.", "properties.*"));

fn flag(value: Option<&str>, name: &str) -> Result<bool> {
    match value.map(str::to_lowercase).as_deref() {
        None | Some("false") => Ok(false),
        Some("true") => Ok(true),
        Some(other) => Err(Error::InvalidParameter(format!(
            "option {name} takes 'true' or 'false', not '{other}'"
        ))),
    }
}

/// A Kafka source's options, checked.
#[derive(Debug, Clone)]
pub struct SourceOptions {
    client: Client,
    pub startup: Startup,
    pub on_error: OnError,
    pub encode: Encode,
    pub csv: CsvOptions,
    /// How many of the table's columns come from the payload (the rest are INCLUDEd metadata).
    pub payload_columns: usize,
    /// The columns whose values pick a row's partition in a cluster.
    pub partition_by: Vec<usize>,
}

impl SourceOptions {
    pub fn parse(connector: &ConnectorDef, table: &TableDef) -> Result<SourceOptions> {
        refuse_unknown(
            connector,
            &[
                "topic",
                "scan.startup.mode",
                "scan.startup.timestamp.millis",
                "scan.startup.timestamp_millis",
                "on_error",
                "dead_letter.topic",
                "partition_by",
            ],
            PASSED_ON,
        )?;
        let client = Client::parse(connector)?;
        let partition_by = partition_by(connector, table)?;
        let startup = startup(connector)?;
        let on_error = on_error(connector)?;
        let encode = match &connector.encode {
            None | Some(Encoding::Json) => Encode::Json,
            Some(Encoding::Csv) => Encode::Csv,
            Some(Encoding::Unknown(other)) => {
                return Err(Error::NotSupported(format!(
                    "ENCODE {} is not supported; use ENCODE JSON or ENCODE CSV",
                    other.to_uppercase()
                )));
            }
        };
        check_format(connector, table, encode)?;
        let csv = csv_options(connector)?;
        Ok(SourceOptions {
            client,
            startup,
            on_error,
            encode,
            csv,
            payload_columns: table.columns.len() - connector.include.len(),
            partition_by,
        })
    }
}

/// The columns named by `partition_by`, in its order: payload columns
/// of an append-only source, each once.
fn partition_by(connector: &ConnectorDef, table: &TableDef) -> Result<Vec<usize>> {
    let Some(list) = connector.option("partition_by") else {
        return Ok(Vec::new());
    };
    if connector.is_upsert() || table.is_keyed() {
        return Err(Error::NotSupported(
            "partition_by splits append-only sources; an upsert table keeps each key's last \
             row on every node"
                .into(),
        ));
    }
    let payload = table.columns.len() - connector.include.len();
    let mut columns = Vec::new();
    for name in list.split(',').map(|n| n.trim().to_lowercase()) {
        let found = table.columns[..payload]
            .iter()
            .position(|c| c.name == name)
            .ok_or_else(|| {
                Error::InvalidParameter(format!(
                    "partition_by names \"{name}\", which is not a column of the message's \
                     value; name one or more of its columns, separated by commas"
                ))
            })?;
        if columns.contains(&found) {
            return Err(Error::InvalidParameter(format!(
                "partition_by names \"{name}\" twice"
            )));
        }
        columns.push(found);
    }
    Ok(columns)
}

fn startup(connector: &ConnectorDef) -> Result<Startup> {
    let millis = connector
        .option("scan.startup.timestamp.millis")
        .or_else(|| connector.option("scan.startup.timestamp_millis"));
    match connector.option("scan.startup.mode").map(str::to_lowercase) {
        None if millis.is_some() => timestamp(millis),
        None => Ok(Startup::Earliest),
        Some(mode) => match mode.as_str() {
            "earliest" => Ok(Startup::Earliest),
            "latest" => Ok(Startup::Latest),
            "timestamp" => timestamp(millis),
            other => Err(Error::InvalidParameter(format!(
                "scan.startup.mode is earliest, latest or timestamp, not '{other}'"
            ))),
        },
    }
}

fn timestamp(millis: Option<&str>) -> Result<Startup> {
    let Some(text) = millis else {
        return Err(Error::InvalidParameter(
            "scan.startup.mode = 'timestamp' needs scan.startup.timestamp.millis".into(),
        ));
    };
    text.parse::<i64>().map(Startup::Timestamp).map_err(|_| {
        Error::InvalidParameter(format!(
            "scan.startup.timestamp.millis is milliseconds since 1970, not '{text}'"
        ))
    })
}

fn on_error(connector: &ConnectorDef) -> Result<OnError> {
    let dead_letter = connector.option("dead_letter.topic");
    let policy = match connector
        .option("on_error")
        .map(str::to_lowercase)
        .as_deref()
    {
        None | Some("skip") => OnError::Skip,
        Some("fail") => OnError::Fail,
        Some("dead_letter") => match dead_letter {
            Some(topic) => OnError::DeadLetter(topic.to_string()),
            None => {
                return Err(Error::InvalidParameter(
                    "on_error = 'dead_letter' needs dead_letter.topic = '...'".into(),
                ));
            }
        },
        Some(other) => {
            return Err(Error::InvalidParameter(format!(
                "on_error is skip, fail or dead_letter, not '{other}'"
            )));
        }
    };
    if dead_letter.is_some() && !matches!(policy, OnError::DeadLetter(_)) {
        return Err(Error::InvalidParameter(
            "dead_letter.topic only applies with on_error = 'dead_letter'".into(),
        ));
    }
    Ok(policy)
}

fn check_format(connector: &ConnectorDef, table: &TableDef, encode: Encode) -> Result<()> {
    match &connector.format {
        None | Some(Format::Plain) => Ok(()),
        Some(Format::Upsert) if connector.source => Err(Error::NotSupported(
            "FORMAT UPSERT needs a primary key: use CREATE TABLE ... (..., PRIMARY KEY (...)) \
             WITH (connector = 'kafka', ...) FORMAT UPSERT ENCODE JSON"
                .into(),
        )),
        Some(Format::Upsert) if !table.is_keyed() => Err(Error::InvalidParameter(
            "FORMAT UPSERT needs a PRIMARY KEY: the message key is the row's key".into(),
        )),
        Some(Format::Upsert) if encode != Encode::Json => Err(Error::NotSupported(
            "FORMAT UPSERT reads ENCODE JSON only".into(),
        )),
        Some(Format::Upsert) => Ok(()),
        Some(other @ (Format::Debezium | Format::Unknown(_))) => Err(Error::NotSupported(format!(
            "FORMAT {} is not supported for Kafka sources; use FORMAT PLAIN or FORMAT UPSERT",
            other.as_str().to_uppercase()
        ))),
    }
}

fn csv_options(connector: &ConnectorDef) -> Result<CsvOptions> {
    let mut csv = CsvOptions::default();
    for (key, value) in &connector.encode_options {
        match key.as_str() {
            "delimiter" => {
                let bytes = value.as_bytes();
                if bytes.len() != 1 {
                    return Err(Error::InvalidParameter(format!(
                        "delimiter is one character, not '{value}'"
                    )));
                }
                csv.delimiter = bytes[0];
            }
            "without_header" => csv.header = !flag(Some(value), key)?,
            other => {
                return Err(Error::InvalidParameter(format!(
                    "ENCODE option {other} is not known; use delimiter or without_header"
                )));
            }
        }
    }
    Ok(csv)
}

/// The secret option values of every Kafka connector this process has
/// started, longest first when hidden so that no part of one stays.
static SECRETS: parking_lot::RwLock<std::collections::BTreeSet<String>> =
    parking_lot::RwLock::new(std::collections::BTreeSet::new());

/// A Kafka error as clients and logs see it, with every secret option
/// value replaced by `[REDACTED]`.
pub fn message(e: &rdkafka::error::KafkaError) -> String {
    redact(e.to_string())
}

fn redact(mut text: String) -> String {
    let known = SECRETS.read();
    let mut secrets: Vec<&String> = known.iter().collect();
    secrets.sort_by_key(|s| std::cmp::Reverse(s.len()));
    for secret in secrets {
        text = text.replace(secret.as_str(), crate::catalog::REDACTED);
    }
    text
}

/// Check at CREATE that the broker answers and the topic exists, so that a
/// typo is an error now rather than a retrying connector later.
pub async fn probe(connector: &ConnectorDef) -> Result<()> {
    let client = Client::parse(connector)?;
    let consumer: BaseConsumer = client
        .config()
        .create()
        .map_err(|e| Error::InvalidParameter(format!("Kafka client options: {}", message(&e))))?;
    let topic = client.topic.clone();
    let bootstrap = client.bootstrap.clone();
    let metadata = tokio::task::spawn_blocking(move || {
        consumer.fetch_metadata(Some(&topic), Duration::from_secs(5))
    })
    .await
    .map_err(|e| Error::Internal(e.to_string()))?
    .map_err(|e| {
        Error::ConnectionFailure(format!(
            "could not reach Kafka at {bootstrap}: {}",
            message(&e)
        ))
    })?;
    let found = metadata
        .topics()
        .iter()
        .find(|t| t.name() == client.topic)
        .filter(|t| t.error().is_none() && !t.partitions().is_empty());
    match found {
        Some(_) => Ok(()),
        None => Err(Error::UndefinedObject(format!(
            "topic \"{}\" does not exist on {}; create it first",
            client.topic, client.bootstrap
        ))),
    }
}

/// Partition ids of a topic; an error when the topic does not exist.
pub(super) async fn partitions<C: Consumer + Send + Sync + 'static>(
    consumer: &Arc<C>,
    topic: &str,
) -> std::result::Result<Vec<i32>, Failure> {
    let client = consumer.clone();
    let name = topic.to_string();
    let metadata =
        tokio::task::spawn_blocking(move || client.fetch_metadata(Some(&name), REQUEST_TIMEOUT))
            .await
            .map_err(|e| Failure::Transient(e.to_string()))??;
    let Some(found) = metadata.topics().iter().find(|t| t.name() == topic) else {
        return Err(Failure::Transient(format!("topic \"{topic}\" not found")));
    };
    if let Some(e) = found.error() {
        let code = e;
        return Err(Failure::Transient(format!("topic \"{topic}\": {code:?}")));
    }
    let ids: Vec<i32> = found.partitions().iter().map(|p| p.id()).collect();
    if ids.is_empty() {
        return Err(Failure::Transient(format!(
            "topic \"{topic}\" has no partitions yet"
        )));
    }
    Ok(ids)
}

/// A Kafka sink's options, checked.
#[derive(Debug, Clone)]
pub struct SinkOptions {
    client: Client,
    pub format: SinkFormat,
    pub key: Vec<usize>,
    pub force_append_only: bool,
    /// Write each epoch in a Kafka transaction (brokers that support them).
    pub transactional: bool,
}

impl SinkOptions {
    /// At CREATE: a relation that can retract rows cannot go out as plain
    /// inserts, unless told to drop the retractions.
    pub fn refuse_retractions(&self, from: &Table, append_only: bool) -> Result<()> {
        if self.format == SinkFormat::Plain && !append_only && !self.force_append_only {
            return Err(Error::InvalidParameter(format!(
                "\"{}\" can retract rows, which FORMAT PLAIN cannot carry; use FORMAT UPSERT or \
                 FORMAT DEBEZIUM, or force_append_only = 'true' to drop retractions",
                from.def.name
            )));
        }
        Ok(())
    }

    pub fn parse(connector: &ConnectorDef, from: &Table) -> Result<SinkOptions> {
        refuse_unknown(
            connector,
            &["topic", "force_append_only", "transactional"],
            PASSED_ON,
        )?;
        let transactional = flag(connector.option("transactional"), "transactional")?;
        let client = Client::parse(connector)?;
        let force_append_only = flag(
            connector.option("force_append_only").or_else(|| {
                connector
                    .encode_options
                    .get("force_append_only")
                    .map(String::as_str)
            }),
            "force_append_only",
        )?;
        match &connector.encode {
            None | Some(Encoding::Json) => {}
            Some(other @ (Encoding::Csv | Encoding::Unknown(_))) => {
                return Err(Error::NotSupported(format!(
                    "sinks write ENCODE JSON; ENCODE {} is not supported",
                    other.as_str().to_uppercase()
                )));
            }
        }
        let format = match &connector.format {
            None | Some(Format::Plain) => SinkFormat::Plain,
            Some(Format::Upsert) => SinkFormat::Upsert,
            Some(Format::Debezium) => SinkFormat::Debezium,
            Some(Format::Unknown(other)) => {
                return Err(Error::NotSupported(format!(
                    "FORMAT {} is not supported; use PLAIN, UPSERT or DEBEZIUM",
                    other.to_uppercase()
                )));
            }
        };
        let key = from.def.primary_key.clone();
        if format != SinkFormat::Plain && key.is_empty() {
            return Err(Error::InvalidParameter(format!(
                "FORMAT {} needs a unique key, and \"{}\" has none (a view gets one from its \
                 GROUP BY)",
                if format == SinkFormat::Upsert {
                    "UPSERT"
                } else {
                    "DEBEZIUM"
                },
                from.def.name
            )));
        }
        Ok(SinkOptions {
            client,
            format,
            key,
            force_append_only,
            transactional,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_are_checked_with_messages_that_say_what_to_fix() {
        let table = TableDef::append_only(1, "s", Vec::new(), String::new());
        let def = |pairs: &[(&str, &str)]| ConnectorDef {
            connector: crate::catalog::ConnectorKind::Kafka,
            options: pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            format: Some(Format::Plain),
            encode: Some(Encoding::Json),
            encode_options: std::collections::BTreeMap::new(),
            include: Vec::new(),
            source: true,
        };
        let base = [("topic", "t"), ("properties.bootstrap.server", "h:1")];
        assert!(SourceOptions::parse(&def(&base), &table).is_ok());
        for (extra, needle) in [
            (
                ("scan.startup.mode", "sometimes"),
                "earliest, latest or timestamp",
            ),
            (
                ("scan.startup.mode", "timestamp"),
                "scan.startup.timestamp.millis",
            ),
            (("on_error", "dead_letter"), "dead_letter.topic"),
            (("on_error", "ignore"), "skip, fail or dead_letter"),
            (("topics", "x"), "not known"),
        ] {
            let mut pairs = base.to_vec();
            pairs.push(extra);
            let e = SourceOptions::parse(&def(&pairs), &table).expect_err(extra.0);
            assert!(e.to_string().contains(needle), "{e}");
        }
        let e = SourceOptions::parse(&def(&[("topic", "t")]), &table).expect_err("no bootstrap");
        assert!(e.to_string().contains("bootstrap"), "{e}");
    }
}
