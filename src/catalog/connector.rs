//! Connectors as the catalog keeps them: what feeds a source or table from
//! outside, and where a sink writes a view's changes.
//!
//! Options are kept as the user wrote them (keys lower-cased) and checked
//! when the object is created, so that a definition that was accepted once
//! starts again after a restart.

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// The connectors weir knows.
pub const CONNECTORS: &[&str] = &["kafka", "nexmark", "datagen"];

/// Enums of the lower-cased words a connector clause takes, stored as those
/// words. A word weir does not know is kept rather than refused: which
/// message refuses it depends on the statement it is in (a source or a
/// sink, Kafka or a generator), and that is decided when the statement is
/// checked, after the checks that come before it.
macro_rules! words {
    ($(#[$doc:meta])* $name:ident { $($variant:ident = $word:literal),+ $(,)? }) => {
        $(#[$doc])*
        #[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
        #[serde(from = "String", into = "String")]
        pub enum $name {
            $($variant,)+
            Unknown(String),
        }

        impl $name {
            pub fn as_str(&self) -> &str {
                match self {
                    $($name::$variant => $word,)+
                    $name::Unknown(word) => word,
                }
            }
        }

        impl From<String> for $name {
            fn from(word: String) -> $name {
                match word.as_str() {
                    $($word => $name::$variant,)+
                    _ => $name::Unknown(word),
                }
            }
        }

        impl From<$name> for String {
            fn from(value: $name) -> String {
                match value {
                    $name::Unknown(word) => word,
                    known => known.as_str().to_string(),
                }
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.as_str())
            }
        }
    };
}

words! {
    /// `WITH (connector = ...)`.
    ConnectorKind { Kafka = "kafka", Nexmark = "nexmark", Datagen = "datagen" }
}

words! {
    /// `FORMAT PLAIN | UPSERT | DEBEZIUM`.
    Format { Plain = "plain", Upsert = "upsert", Debezium = "debezium" }
}

words! {
    /// `ENCODE JSON | CSV`.
    Encoding { Json = "json", Csv = "csv" }
}

/// What feeds a source, or a table created `WITH (connector = ...)`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConnectorDef {
    pub connector: ConnectorKind,
    /// The `WITH` options, keys lower-cased, `connector` left out.
    pub options: BTreeMap<String, String>,
    /// `None` when not written.
    pub format: Option<Format>,
    pub encode: Option<Encoding>,
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
        self.format == Some(Format::Upsert)
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
    /// In a cluster, the node that writes it: the one it was created on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
}

impl SinkDef {
    /// Whether the node of this name writes the sink.
    pub fn runs_on(&self, node: &str) -> bool {
        self.node.as_deref().is_none_or(|home| home == node)
    }
}

/// What stands in for a secret wherever a definition is shown.
pub const REDACTED: &str = "[REDACTED]";

/// Whether a connector option holds a secret: a password, a secret, a
/// token or credential, SASL settings, or an SSL key. `properties.` is
/// Kafka's prefix for librdkafka's own settings.
pub fn is_secret(key: &str) -> bool {
    let key = key.to_ascii_lowercase();
    let key = key.strip_prefix("properties.").unwrap_or(&key);
    ["password", "secret", "token", "credential"]
        .iter()
        .any(|word| key.contains(word))
        || key.starts_with("sasl.")
        || (key.starts_with("ssl.") && key.contains("key"))
}

/// A statement's text with the value of every secret option (`key =
/// 'value'`, the key bare, dotted or quoted) replaced by `'[REDACTED]'`,
/// everything else as written. Text that does not tokenize is shown as
/// nothing rather than risk a secret.
pub fn redacted(definition: &str) -> String {
    use sqlparser::dialect::PostgreSqlDialect;
    use sqlparser::tokenizer::{Token, Tokenizer};
    let Ok(mut tokens) = Tokenizer::new(&PostgreSqlDialect {}, definition).tokenize() else {
        return REDACTED.to_string();
    };
    let solid: Vec<usize> = (0..tokens.len())
        .filter(|&i| !matches!(tokens[i], Token::Whitespace(_)))
        .collect();
    for (n, &i) in solid.iter().enumerate() {
        if tokens[i] != Token::Eq {
            continue;
        }
        let key: String = solid[..n]
            .iter()
            .rev()
            .map(|&j| &tokens[j])
            .take_while(|t| {
                matches!(
                    t,
                    Token::Word(_) | Token::Period | Token::SingleQuotedString(_)
                )
            })
            .collect::<Vec<_>>()
            .into_iter()
            .rev()
            .map(|t| match t {
                Token::Word(w) => w.value.clone(),
                Token::SingleQuotedString(s) => s.clone(),
                other => other.to_string(),
            })
            .collect();
        if let Some(&value) = solid.get(n + 1)
            && is_secret(&key)
            && matches!(tokens[value], Token::SingleQuotedString(_))
        {
            tokens[value] = Token::SingleQuotedString(REDACTED.to_string());
        }
    }
    tokens.iter().map(Token::to_string).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stored_connector_reads_as_kinds_and_writes_back_the_same_bytes() {
        let stored = concat!(
            r#"{"connector":"kafka","options":{"topic":"t"},"format":"upsert","#,
            r#""encode":"csv","encode_options":{},"include":[],"source":false}"#
        );
        let def: ConnectorDef = serde_json::from_str(stored).expect("the stored shape");
        assert_eq!(def.connector, ConnectorKind::Kafka);
        assert_eq!(def.format, Some(Format::Upsert));
        assert_eq!(def.encode, Some(Encoding::Csv));
        assert_eq!(serde_json::to_string(&def).expect("serializes"), stored);
        let bare = concat!(
            r#"{"connector":"nexmark","options":{},"format":null,"#,
            r#""encode":null,"encode_options":{},"include":[],"source":true}"#
        );
        let def: ConnectorDef = serde_json::from_str(bare).expect("the stored shape");
        assert_eq!(
            (def.connector.clone(), def.format.clone()),
            (ConnectorKind::Nexmark, None)
        );
        assert_eq!(serde_json::to_string(&def).expect("serializes"), bare);
    }

    #[test]
    fn an_unknown_word_is_kept_as_written() {
        let kind = ConnectorKind::from("pulsar".to_string());
        assert_eq!(kind, ConnectorKind::Unknown("pulsar".into()));
        assert_eq!(kind.to_string(), "pulsar");
        assert_eq!(String::from(Format::from("avro".to_string())), "avro");
        for (word, format) in [
            ("plain", Format::Plain),
            ("upsert", Format::Upsert),
            ("debezium", Format::Debezium),
        ] {
            assert_eq!(Format::from(word.to_string()), format);
            assert_eq!(format.as_str(), word);
        }
    }

    #[test]
    fn secret_options_are_recognised() {
        for key in [
            "properties.sasl.password",
            "sasl.username",
            "properties.ssl.key.password",
            "properties.ssl.keystore.location",
            "aws.credentials.secret_access_key",
            "api_token",
        ] {
            assert!(is_secret(key), "{key}");
        }
        for key in [
            "topic",
            "properties.bootstrap.server",
            "properties.ssl.ca.location",
        ] {
            assert!(!is_secret(key), "{key}");
        }
    }

    #[test]
    fn secret_values_are_redacted_and_the_rest_kept() {
        let sql = "CREATE SOURCE s (a INT) WITH (connector = 'kafka', topic = 't',\n  \
                   properties.sasl.password = 'hunter2', 'properties.sasl.username' = 'me',\n  \
                   properties.bootstrap.server = 'h:9092') FORMAT PLAIN ENCODE JSON";
        let shown = redacted(sql);
        assert!(
            !shown.contains("hunter2") && !shown.contains("'me'"),
            "{shown}"
        );
        assert_eq!(
            shown,
            sql.replace("'hunter2'", "'[REDACTED]'")
                .replace("= 'me'", "= '[REDACTED]'")
        );
    }
}
