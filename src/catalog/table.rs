//! Tables: the definition users write, and what weir derives from it.

use std::any::Any;
use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, AsArray, Int64Array, RecordBatch};
use datafusion::arrow::compute::{cast, max};
use datafusion::arrow::datatypes::{DataType, Field, Int64Type, Schema, SchemaRef, TimeUnit};
use datafusion::common::DFSchema;
use datafusion::logical_expr::Operator;
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_expr::expressions::{BinaryExpr, Column, Literal};
use datafusion::prelude::SessionContext;
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::log::writer::Target;
use crate::state::rows::RowCodec;

/// The PostgreSQL name and the CREATE spelling of a system table's column type.
fn system_type(data_type: &DataType) -> (&'static str, &'static str) {
    match data_type {
        DataType::Int32 => ("integer", "INTEGER"),
        DataType::Int64 => ("bigint", "BIGINT"),
        DataType::Timestamp(_, None) => ("timestamp without time zone", "TIMESTAMP"),
        _ => ("character varying", "VARCHAR"),
    }
}

/// A table as persisted in the catalog.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(from = "Stored", into = "Stored")]
pub struct TableDef {
    pub id: u64,
    pub name: String,
    pub columns: Vec<ColumnDef>,
    /// Indices of the primary key columns, in key order; empty when there is none.
    pub primary_key: Vec<usize>,
    pub storage: Storage,
    pub watermark: Option<WatermarkDef>,
    /// Partitions of the table's log topic.
    pub partitions: u32,
    /// The CREATE statement as the user wrote it, for SHOW CREATE.
    pub definition: String,
    /// A view whose changelog carries the watermark of what it reads. Apart
    /// from storage: it follows from what the view reads, not how it keeps rows.
    pub watermarked: bool,
    /// What feeds it from outside: a source, or a table with a connector.
    pub connector: Option<super::ConnectorDef>,
    /// How long the log keeps changes as written, in microseconds
    /// (`WITH (retention = ...)`): a table's older changes are folded into
    /// its live rows, an append-only table's are dropped.
    pub retention: Option<i64>,
    /// `ON CONFLICT ...`: an INSERT merges into a row of the same key
    /// instead of failing.
    pub conflict: Option<ConflictDef>,
    /// The primary key's name once the table was renamed: as in
    /// PostgreSQL, it keeps the name it was given, `<first name>_pkey`.
    pub key_name: Option<String>,
}

/// What a relation is, and so where its contents live and how they change.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Storage {
    /// Rows kept and changed in place: a table, and what stands for a
    /// logical view's columns.
    Rows,
    /// Rows can only be inserted (a stream), and the log topic holds them.
    AppendOnly,
    /// Rows can only be inserted, each under a primary key no other row
    /// has (`CREATE TABLE t (k int PRIMARY KEY, ...) APPEND ONLY`): kept by
    /// key as a table's rows are, so a repeated key is refused as a
    /// table refuses it, and views read it as a stream.
    KeyedAppendOnly,
    /// A materialized view's rows, one per value of its unique key; its
    /// topic is the view's changelog.
    KeyedView,
    /// A materialized view without a unique key: each row kept with its
    /// multiplicity.
    MultisetView,
    /// A materialized view that only ever adds rows: its changelog is its
    /// contents, and it keeps no rows of its own.
    LogView,
}

/// `TableDef` as the catalog stores it: storage as the booleans it has
/// always been written as, in their places, so stored definitions keep
/// their bytes.
#[derive(Serialize, Deserialize)]
struct Stored {
    id: u64,
    name: String,
    columns: Vec<ColumnDef>,
    primary_key: Vec<usize>,
    append_only: bool,
    watermark: Option<WatermarkDef>,
    partitions: u32,
    definition: String,
    #[serde(default)]
    is_view: bool,
    #[serde(default)]
    multiset: bool,
    #[serde(default)]
    watermarked: bool,
    #[serde(default)]
    connector: Option<super::ConnectorDef>,
    #[serde(default)]
    log_only: bool,
    #[serde(default)]
    retention: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    conflict: Option<ConflictDef>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    key_name: Option<String>,
}

impl Storage {
    fn from_flags(s: &Stored) -> Storage {
        match (s.is_view, s.log_only, s.multiset) {
            (true, true, _) => Storage::LogView,
            (true, false, true) => Storage::MultisetView,
            (true, false, false) => Storage::KeyedView,
            (false, _, _) if s.append_only && !s.primary_key.is_empty() => Storage::KeyedAppendOnly,
            (false, _, _) if s.append_only => Storage::AppendOnly,
            (false, _, _) => Storage::Rows,
        }
    }
}

impl From<Stored> for TableDef {
    fn from(s: Stored) -> TableDef {
        TableDef {
            storage: Storage::from_flags(&s),
            id: s.id,
            name: s.name,
            columns: s.columns,
            primary_key: s.primary_key,
            watermark: s.watermark,
            partitions: s.partitions,
            definition: s.definition,
            watermarked: s.watermarked,
            connector: s.connector,
            retention: s.retention,
            conflict: s.conflict,
            key_name: s.key_name,
        }
    }
}

impl From<TableDef> for Stored {
    fn from(def: TableDef) -> Stored {
        Stored {
            append_only: def.is_append_only(),
            is_view: def.is_view(),
            // A view that keeps no rows was written as a multiset when it had no key.
            multiset: def.storage == Storage::MultisetView
                || (def.storage == Storage::LogView && def.primary_key.is_empty()),
            log_only: def.storage == Storage::LogView,
            id: def.id,
            name: def.name,
            columns: def.columns,
            primary_key: def.primary_key,
            watermark: def.watermark,
            partitions: def.partitions,
            definition: def.definition,
            watermarked: def.watermarked,
            connector: def.connector,
            retention: def.retention,
            conflict: def.conflict,
            key_name: def.key_name,
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ColumnDef {
    pub name: String,
    /// Stored in Arrow's own notation (`Int64`, `Utf8`, ...), as
    /// definitions have always been written.
    #[serde(with = "arrow_notation")]
    pub data_type: DataType,
    /// The type as the user wrote it, for DESCRIBE.
    pub sql_type: String,
    pub nullable: bool,
}

/// A column's Arrow type as text, written by Arrow's `Display` and read by
/// its `FromStr`, so that stored definitions keep their exact bytes.
mod arrow_notation {
    use datafusion::arrow::datatypes::DataType;
    use serde::{Deserialize, Deserializer, Serializer, de::Error};

    pub fn serialize<S: Serializer>(
        data_type: &DataType,
        serializer: S,
    ) -> Result<S::Ok, S::Error> {
        serializer.collect_str(data_type)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<DataType, D::Error> {
        let text = String::deserialize(deserializer)?;
        text.parse()
            .map_err(|e| D::Error::custom(format!("stored type {text} unreadable: {e}")))
    }
}

/// What an INSERT does with a row whose key is taken (`ON CONFLICT ...`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum ConflictAction {
    DoNothing,
    /// `OVERWRITE` or `DO UPDATE FULL`.
    Overwrite,
    UpdateIfNotNull,
}

/// A table's `ON CONFLICT` clause.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ConflictDef {
    pub action: ConflictAction,
    /// `WITH VERSION COLUMN (...)`: compared in order; a lower one loses.
    pub version_columns: Vec<usize>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct WatermarkDef {
    pub column: String,
    /// The watermark expression as written, e.g. `date_time - INTERVAL '4' SECOND`.
    pub expr: String,
}

impl TableDef {
    /// The columns a Kafka source is split by over a cluster's nodes
    /// (`partition_by`, checked at CREATE); empty for a table or source
    /// every node reads whole.
    pub fn split_by(&self) -> Vec<String> {
        let Some(connector) = self.connector.as_ref() else {
            return Vec::new();
        };
        if connector.connector != super::ConnectorKind::Kafka {
            return Vec::new();
        }
        connector
            .option("partition_by")
            .map(|list| list.split(',').map(|n| n.trim().to_lowercase()).collect())
            .unwrap_or_default()
    }

    /// An append-only table with one partition and nothing else set: the
    /// system tables weir keeps, and tests.
    pub fn append_only(
        id: u64,
        name: &str,
        columns: Vec<ColumnDef>,
        definition: String,
    ) -> TableDef {
        TableDef {
            id,
            name: name.into(),
            columns,
            primary_key: Vec::new(),
            storage: Storage::AppendOnly,
            watermark: None,
            partitions: 1,
            definition,
            watermarked: false,
            connector: None,
            retention: None,
            conflict: None,
            key_name: None,
        }
    }

    /// A table weir keeps for itself (`late_events`, `view_errors`,
    /// `source_errors`): append-only, every column nullable, and a CREATE
    /// statement written from its columns.
    pub fn system(id: u64, name: &str, columns: &[(&str, DataType)]) -> TableDef {
        let spelled: Vec<(&str, &str, &str)> = columns
            .iter()
            .map(|(column, data_type)| {
                let (sql_type, written) = system_type(data_type);
                (*column, sql_type, written)
            })
            .collect();
        let defs = columns
            .iter()
            .zip(&spelled)
            .map(|((column, data_type), (_, sql_type, _))| ColumnDef {
                name: column.to_string(),
                data_type: data_type.clone(),
                sql_type: sql_type.to_string(),
                nullable: true,
            })
            .collect();
        let listed: Vec<String> = spelled
            .iter()
            .map(|(column, _, written)| format!("\"{column}\" {written}"))
            .collect();
        let definition = format!("CREATE TABLE {name} ({}) APPEND ONLY", listed.join(", "));
        TableDef::append_only(id, name, defs, definition)
    }

    /// The log topic every write to this table goes to. Topics share the id space of objects.
    pub fn topic(&self) -> u64 {
        self.id
    }

    /// The topic with where it is stored: a view's changelog apart from
    /// tables' logs.
    pub fn log_topic(&self) -> crate::log::Topic {
        if self.is_view() {
            crate::log::Topic::changelog(self.id)
        } else {
            crate::log::Topic::table(self.id)
        }
    }

    /// Whether event time advances in this relation's topic.
    pub fn has_watermark(&self) -> bool {
        self.watermark.is_some() || self.watermarked
    }

    /// Made by CREATE SOURCE: fed only by its connector.
    pub fn is_source(&self) -> bool {
        self.connector.as_ref().is_some_and(|c| c.source)
    }

    /// Whether reading the contents means reading the log topic from its
    /// start: append-only tables, and views that keep no rows.
    pub fn contents_in_log(&self) -> bool {
        matches!(self.storage, Storage::AppendOnly | Storage::LogView)
    }

    /// Rows can only be inserted: an append-only table or source.
    pub fn is_append_only(&self) -> bool {
        matches!(self.storage, Storage::AppendOnly | Storage::KeyedAppendOnly)
    }

    /// The contents of a materialized view; its topic is the view's changelog.
    pub fn is_view(&self) -> bool {
        matches!(
            self.storage,
            Storage::KeyedView | Storage::MultisetView | Storage::LogView
        )
    }

    /// Rows are stored with their multiplicity.
    pub fn is_multiset(&self) -> bool {
        self.storage == Storage::MultisetView
    }

    /// The primary key's name: its index's and its constraint's.
    pub fn key_constraint(&self) -> String {
        self.key_name
            .clone()
            .unwrap_or_else(|| format!("{}_pkey", self.name))
    }

    pub fn column_names(&self) -> Vec<&str> {
        self.columns.iter().map(|c| c.name.as_str()).collect()
    }

    pub fn is_keyed(&self) -> bool {
        !self.primary_key.is_empty()
    }

    pub fn arrow_schema(&self) -> Schema {
        Schema::new(
            self.columns
                .iter()
                .map(|c| Field::new(&c.name, c.data_type.clone(), c.nullable))
                .collect::<Vec<_>>(),
        )
    }
}

/// A schema with every column nullable.
pub fn nullable(schema: &Schema) -> SchemaRef {
    Arc::new(Schema::new(
        schema
            .fields()
            .iter()
            .map(|f| f.as_ref().clone().with_nullable(true))
            .collect::<Vec<_>>(),
    ))
}

/// A table ready for use: its schema and row codec built once.
pub struct Table {
    pub def: TableDef,
    pub schema: SchemaRef,
    /// The schema with every column nullable: rows as statements and views
    /// produce them, before NOT NULL is checked.
    pub nullable_schema: SchemaRef,
    pub codec: RowCodec,
    /// The compiled `WATERMARK FOR` expression, if the table has one.
    watermark: Option<Arc<dyn PhysicalExpr>>,
    /// The column the watermark rises with, if it is that column shifted.
    rising: Option<usize>,
}

/// Compile a watermark expression over a table's columns; it must yield a timestamp.
pub fn watermark_expr(schema: &SchemaRef, text: &str) -> Result<Arc<dyn PhysicalExpr>> {
    let ctx = SessionContext::new();
    let df_schema = DFSchema::try_from(schema.as_ref().clone())?;
    let expr = ctx.parse_sql_expr(text, &df_schema)?;
    let physical = ctx.create_physical_expr(expr, &df_schema)?;
    match physical.data_type(schema)? {
        DataType::Timestamp(..) | DataType::Date32 | DataType::Date64 => Ok(physical),
        other => Err(Error::DatatypeMismatch(format!(
            "a watermark expression must be a timestamp; {text} is {other}"
        ))),
    }
}

/// The column a watermark expression rises with, when it is the column
/// itself or the column plus or minus a constant.
fn rising_column(expr: &Arc<dyn PhysicalExpr>) -> Option<usize> {
    let any: &dyn Any = expr.as_ref();
    if let Some(column) = any.downcast_ref::<Column>() {
        return Some(column.index());
    }
    let binary = any.downcast_ref::<BinaryExpr>()?;
    let right: &dyn Any = binary.right().as_ref();
    let left: &dyn Any = binary.left().as_ref();
    let shifted = matches!(binary.op(), Operator::Minus | Operator::Plus) && right.is::<Literal>();
    let column = left.downcast_ref::<Column>()?;
    shifted.then(|| column.index())
}

/// The row holding the latest time of `times`; none when all are NULL.
fn latest_row(times: &ArrayRef) -> Result<Option<usize>> {
    let times = micros(times)?;
    Ok((0..times.len())
        .filter(|&i| !times.is_null(i))
        .max_by_key(|&i| times.value(i)))
}

/// Event times as microseconds since the Unix epoch.
pub fn micros(array: &ArrayRef) -> Result<Int64Array> {
    let timestamps = cast(array, &DataType::Timestamp(TimeUnit::Microsecond, None))?;
    let raw = cast(&timestamps, &DataType::Int64)?;
    Ok(raw.as_primitive::<Int64Type>().clone())
}

impl std::fmt::Debug for Table {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Table").field("def", &self.def).finish()
    }
}

impl Table {
    pub fn new(def: TableDef) -> Result<Table> {
        let schema = Arc::new(def.arrow_schema());
        let codec = RowCodec::new(schema.clone(), &def.primary_key)?;
        let nullable_schema = nullable(&schema);
        let watermark = match &def.watermark {
            Some(w) => Some(watermark_expr(&schema, &w.expr)?),
            None => None,
        };
        let rising = watermark.as_ref().and_then(rising_column);
        Ok(Table {
            def,
            schema,
            nullable_schema,
            codec,
            watermark,
            rising,
        })
    }

    /// The watermark of a source that will have no more rows: the last
    /// microsecond of 9999, the end of time as far as a timestamp shows it.
    pub const END_OF_TIME: i64 = 253_402_300_799_999_999;

    /// The watermark a write of `batches` implies: the largest value of the
    /// watermark expression over its rows.
    pub fn watermark_of(&self, batches: &[RecordBatch]) -> Result<Option<i64>> {
        let Some(expr) = &self.watermark else {
            return Ok(None);
        };
        let mut highest = None;
        for batch in batches {
            // `ts - INTERVAL 'd'` only grows with `ts`: its largest value is
            // at the row of the largest `ts`, so only that row is computed.
            let rows = match self.rising {
                Some(column) => match latest_row(batch.column(column))? {
                    Some(row) => batch.slice(row, 1),
                    None => continue,
                },
                None => batch.clone(),
            };
            let values = expr.evaluate(&rows)?.into_array(rows.num_rows())?;
            highest = highest.max(max(&micros(&values)?));
        }
        Ok(highest)
    }

    pub fn target(self: &Arc<Self>) -> Target {
        let table = Arc::clone(self);
        Target {
            table: self.def.id,
            name: self.def.name.clone(),
            topic: self.def.topic(),
            partitions: self.def.partitions,
            constraint: self.def.key_constraint(),
            describe_key: Arc::new(move |key| table.describe_key(key)),
        }
    }

    /// A key as PostgreSQL shows it in messages: `(a, b)=(1, x)`.
    pub fn describe_key(&self, key: &[u8]) -> String {
        let values = self
            .codec
            .decode_key(key)
            .map(|columns| {
                columns
                    .iter()
                    .map(|c| {
                        datafusion::arrow::util::display::array_value_to_string(c, 0)
                            .unwrap_or_else(|_| "?".into())
                    })
                    .collect::<Vec<_>>()
                    .join(", ")
            })
            .unwrap_or_else(|_| "?".into());
        format!("({})=({values})", self.key_names().join(", "))
    }

    pub fn key_names(&self) -> Vec<&str> {
        self.def
            .primary_key
            .iter()
            .map(|i| self.def.columns[*i].name.as_str())
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A table as the catalog stored it when column types were kept as text.
    const STORED: &str = concat!(
        r#"{"id":12,"name":"bids","columns":["#,
        r#"{"name":"auction","data_type":"Int64","sql_type":"bigint","nullable":false},"#,
        r#"{"name":"bidder","data_type":"Utf8","sql_type":"character varying","nullable":true},"#,
        r#"{"name":"price","data_type":"Decimal128(38, 10)","sql_type":"numeric","nullable":true},"#,
        r#"{"name":"day","data_type":"Date32","sql_type":"date","nullable":true},"#,
        r#"{"name":"at","data_type":"Timestamp(µs)","sql_type":"timestamp without time zone","nullable":true},"#,
        r#"{"name":"zoned","data_type":"Timestamp(µs, \"+00:00\")","sql_type":"timestamp with time zone","nullable":true}"#,
        r#"],"primary_key":[0],"append_only":false,"#,
        r#""watermark":{"column":"at","expr":"at - INTERVAL '5' SECOND"},"partitions":4,"#,
        r#""definition":"CREATE TABLE bids (...)","is_view":false,"multiset":false,"#,
        r#""watermarked":false,"connector":null,"log_only":false,"retention":null}"#
    );

    #[test]
    fn a_watermark_is_the_latest_time_less_its_delay() {
        use datafusion::arrow::array::TimestampMicrosecondArray;
        let def: TableDef = serde_json::from_str(STORED).expect("the stored shape");
        let table = Table::new(def).expect("table");
        let times = [Some(7_000_000), None, Some(9_000_000), Some(8_000_000)];
        let columns: Vec<ArrayRef> = table
            .schema
            .fields()
            .iter()
            .map(|f| match f.name().as_str() {
                "at" => Arc::new(TimestampMicrosecondArray::from(times.to_vec())) as ArrayRef,
                _ => datafusion::arrow::array::new_null_array(f.data_type(), times.len()),
            })
            .collect();
        let batch = RecordBatch::try_new(table.nullable_schema.clone(), columns).expect("batch");
        assert!(rising_column(table.watermark.as_ref().expect("watermark")).is_some());
        assert_eq!(
            table.watermark_of(&[batch]).expect("watermark"),
            Some(4_000_000)
        );
    }

    #[test]
    fn a_stored_definition_reads_as_types_and_writes_back_the_same_bytes() {
        let def: TableDef = serde_json::from_str(STORED).expect("the stored shape");
        let types: Vec<&DataType> = def.columns.iter().map(|c| &c.data_type).collect();
        assert_eq!(
            types,
            [
                &DataType::Int64,
                &DataType::Utf8,
                &DataType::Decimal128(38, 10),
                &DataType::Date32,
                &DataType::Timestamp(TimeUnit::Microsecond, None),
                &DataType::Timestamp(TimeUnit::Microsecond, Some("+00:00".into())),
            ]
        );
        assert_eq!(serde_json::to_string(&def).expect("serializes"), STORED);
    }

    #[test]
    fn stored_storage_flags_read_as_one_storage_and_write_back_the_same_bytes() {
        let flags = |append_only, is_view, multiset, log_only, key: &str| {
            STORED
                .replace(r#""primary_key":[0]"#, &format!(r#""primary_key":[{key}]"#))
                .replace(
                    r#""append_only":false"#,
                    &format!(r#""append_only":{append_only}"#),
                )
                .replace(r#""is_view":false"#, &format!(r#""is_view":{is_view}"#))
                .replace(r#""multiset":false"#, &format!(r#""multiset":{multiset}"#))
                .replace(r#""log_only":false"#, &format!(r#""log_only":{log_only}"#))
        };
        for (stored, storage) in [
            (flags(false, false, false, false, "0"), Storage::Rows),
            (flags(true, false, false, false, ""), Storage::AppendOnly),
            (
                flags(true, false, false, false, "0"),
                Storage::KeyedAppendOnly,
            ),
            (flags(false, true, false, false, "0"), Storage::KeyedView),
            (flags(false, true, true, false, ""), Storage::MultisetView),
            (flags(false, true, false, true, "0"), Storage::LogView),
            (flags(false, true, true, true, ""), Storage::LogView),
        ] {
            let def: TableDef = serde_json::from_str(&stored).expect(&stored);
            assert_eq!(def.storage, storage, "{stored}");
            assert_eq!(serde_json::to_string(&def).expect("serializes"), stored);
        }
    }

    #[test]
    fn flags_written_before_views_existed_read_as_a_table() {
        let old = STORED.replace(
            r#","is_view":false,"multiset":false,"watermarked":false,"connector":null,"log_only":false,"retention":null"#,
            "",
        );
        assert_ne!(old, STORED);
        let def: TableDef = serde_json::from_str(&old).expect("the oldest shape");
        assert_eq!(def.storage, Storage::Rows);
    }

    #[test]
    fn types_are_written_as_arrow_spells_them() {
        for data_type in [
            DataType::Boolean,
            DataType::Int32,
            DataType::Float64,
            DataType::Binary,
            DataType::Interval(datafusion::arrow::datatypes::IntervalUnit::MonthDayNano),
            DataType::new_list(DataType::Int64, true),
        ] {
            let old = format!(
                r#"{{"name":"c","data_type":{},"sql_type":"x","nullable":true}}"#,
                serde_json::to_string(&data_type.to_string()).expect("text")
            );
            let column: ColumnDef = serde_json::from_str(&old).expect(&old);
            assert_eq!(column.data_type, data_type);
            assert_eq!(serde_json::to_string(&column).expect("serializes"), old);
        }
    }

    #[test]
    fn an_unreadable_type_fails_to_load() {
        let stored = r#"{"name":"c","data_type":"NoSuchType","sql_type":"x","nullable":true}"#;
        let e = serde_json::from_str::<ColumnDef>(stored).expect_err("not a type");
        assert!(
            e.to_string().contains("stored type NoSuchType unreadable"),
            "{e}"
        );
    }
}
