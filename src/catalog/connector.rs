//! Connectors as the catalog keeps them: what feeds a source or table from
//! outside, and where a sink writes a view's changes.
//!
//! Options are kept as the user wrote them (keys lower-cased) and checked
//! when the object is created, so that a definition that was accepted once
//! starts again after a restart.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// The connectors weir knows.
pub const CONNECTORS: &[&str] = &["kafka", "nexmark", "datagen"];

/// What feeds a source, or a table created `WITH (connector = ...)`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConnectorDef {
    /// `kafka`, `nexmark` or `datagen`.
    pub connector: String,
    /// The `WITH` options, keys lower-cased, `connector` left out.
    pub options: BTreeMap<String, String>,
    /// `FORMAT PLAIN | UPSERT | DEBEZIUM`, lower-cased; `None` when not written.
    pub format: Option<String>,
    /// `ENCODE JSON | CSV`, lower-cased.
    pub encode: Option<String>,
    /// Options after `ENCODE x (...)`, keys lower-cased.
    #[serde(default)]
    pub encode_options: BTreeMap<String, String>,
    /// Message metadata kept as columns (`INCLUDE key AS k`), after the declared columns.
    #[serde(default)]
    pub include: Vec<Include>,
    /// Made by `CREATE SOURCE` (listed by SHOW SOURCES, closed to writes),
    /// not by `CREATE TABLE ... WITH (connector = ...)`.
    #[serde(default)]
    pub source: bool,
}

/// A piece of message metadata kept as a column.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Include {
    pub what: Metadata,
    pub column: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Metadata {
    Key,
    Partition,
    Offset,
    Timestamp,
}

impl Metadata {
    pub fn parse(word: &str) -> Result<Metadata> {
        Ok(match word.to_lowercase().as_str() {
            "key" => Metadata::Key,
            "partition" => Metadata::Partition,
            "offset" => Metadata::Offset,
            "timestamp" => Metadata::Timestamp,
            other => {
                return Err(Error::Syntax(format!(
                    "INCLUDE {other} is not known; use key, partition, offset or timestamp"
                )));
            }
        })
    }

    /// The column name when `AS` is left out.
    pub fn default_column(self) -> &'static str {
        match self {
            Metadata::Key => "_kafka_key",
            Metadata::Partition => "_kafka_partition",
            Metadata::Offset => "_kafka_offset",
            Metadata::Timestamp => "_kafka_timestamp",
        }
    }

    /// The column's SQL type.
    pub fn sql_type(self) -> &'static str {
        match self {
            Metadata::Key => "BYTEA",
            Metadata::Partition => "INTEGER",
            Metadata::Offset => "BIGINT",
            Metadata::Timestamp => "TIMESTAMP",
        }
    }
}

impl ConnectorDef {
    pub fn option(&self, key: &str) -> Option<&str> {
        self.options.get(key).map(String::as_str)
    }

    /// A required option, with a message naming it.
    pub fn required(&self, key: &str) -> Result<&str> {
        self.option(key).ok_or_else(|| {
            Error::InvalidParameter(format!(
                "connector '{}' needs the option {key}",
                self.connector
            ))
        })
    }

    pub fn is_upsert(&self) -> bool {
        self.format.as_deref() == Some("upsert")
    }
}

/// A sink: where a view's (or table's) changes are written.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SinkDef {
    /// Its own id: its progress lives in the state family under it.
    pub id: u64,
    pub name: String,
    /// The table or view it reads.
    pub from: u64,
    pub connector: ConnectorDef,
    /// The statement as the user wrote it, for SHOW CREATE.
    pub definition: String,
}
