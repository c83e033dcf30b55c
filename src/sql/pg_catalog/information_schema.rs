//! `information_schema` as PostgreSQL's: `tables`, `views`, `columns` and
//! `schemata` over weir's catalog, with PostgreSQL's type names. As in
//! PostgreSQL, materialized views appear in none of them (`pg_class` and
//! `pg_matviews` list them).

use std::sync::Arc;

use async_trait::async_trait;
use datafusion::arrow::array::{ArrayRef, Int32Array, RecordBatch, StringArray};
use datafusion::arrow::datatypes::{DataType, Field, Schema as ArrowSchema, SchemaRef};
use datafusion::catalog::{SchemaProvider, Session, TableProvider};
use datafusion::datasource::TableType;
use datafusion::datasource::memory::MemorySourceConfig;
use datafusion::error::Result as DfResult;
use datafusion::logical_expr::Expr;
use datafusion::physical_plan::ExecutionPlan;

use super::ROLE;
use crate::catalog::{Catalog, Object};

/// The views this schema has.
const VIEWS: &[&str] = &["columns", "schemata", "tables", "views"];

#[derive(Debug)]
pub struct Schema {
    catalog: Arc<Catalog>,
    /// The database name, `table_catalog` of every row.
    database: String,
}

impl Schema {
    pub fn new(catalog: Arc<Catalog>, database: &str) -> Self {
        Schema {
            catalog,
            database: database.to_string(),
        }
    }
}

#[async_trait]
impl SchemaProvider for Schema {
    fn table_names(&self) -> Vec<String> {
        VIEWS.iter().map(|v| v.to_string()).collect()
    }

    async fn table(&self, name: &str) -> DfResult<Option<Arc<dyn TableProvider>>> {
        let view = match name {
            "tables" => View::Tables,
            "views" => View::Views,
            "columns" => View::Columns,
            "schemata" => View::Schemata,
            _ => return Ok(None),
        };
        Ok(Some(Arc::new(Listing {
            view,
            schema: view.schema(),
            catalog: self.catalog.clone(),
            database: self.database.clone(),
        })))
    }

    fn table_exist(&self, name: &str) -> bool {
        VIEWS.contains(&name)
    }
}

#[derive(Debug, Clone, Copy)]
enum View {
    Tables,
    Views,
    Columns,
    Schemata,
}

fn text(names: &[&str]) -> Vec<Field> {
    names
        .iter()
        .map(|n| Field::new(*n, DataType::Utf8, true))
        .collect()
}

impl View {
    fn schema(self) -> SchemaRef {
        let fields = match self {
            View::Tables => text(&[
                "table_catalog",
                "table_schema",
                "table_name",
                "table_type",
                "self_referencing_column_name",
                "reference_generation",
                "user_defined_type_catalog",
                "user_defined_type_schema",
                "user_defined_type_name",
                "is_insertable_into",
                "is_typed",
                "commit_action",
            ]),
            View::Views => text(&[
                "table_catalog",
                "table_schema",
                "table_name",
                "view_definition",
                "check_option",
                "is_updatable",
                "is_insertable_into",
                "is_trigger_updatable",
                "is_trigger_deletable",
                "is_trigger_insertable_into",
            ]),
            View::Schemata => text(&[
                "catalog_name",
                "schema_name",
                "schema_owner",
                "default_character_set_catalog",
                "default_character_set_schema",
                "default_character_set_name",
                "sql_path",
            ]),
            View::Columns => {
                let mut fields =
                    text(&["table_catalog", "table_schema", "table_name", "column_name"]);
                fields.push(Field::new("ordinal_position", DataType::Int32, false));
                fields.extend(text(&["column_default", "is_nullable", "data_type"]));
                for name in [
                    "character_maximum_length",
                    "character_octet_length",
                    "numeric_precision",
                    "numeric_precision_radix",
                    "numeric_scale",
                    "datetime_precision",
                ] {
                    fields.push(Field::new(name, DataType::Int32, true));
                }
                fields.extend(text(&[
                    "interval_type",
                    "udt_catalog",
                    "udt_schema",
                    "udt_name",
                    "is_identity",
                    "is_generated",
                    "is_updatable",
                ]));
                fields
            }
        };
        Arc::new(ArrowSchema::new(fields))
    }
}

/// One of the views, listed from the catalog when a statement scans it.
#[derive(Debug)]
struct Listing {
    view: View,
    schema: SchemaRef,
    catalog: Arc<Catalog>,
    database: String,
}

#[async_trait]
impl TableProvider for Listing {
    fn schema(&self) -> SchemaRef {
        self.schema.clone()
    }

    fn table_type(&self) -> TableType {
        TableType::View
    }

    async fn scan(
        &self,
        _state: &dyn Session,
        projection: Option<&Vec<usize>>,
        _filters: &[Expr],
        _limit: Option<usize>,
    ) -> DfResult<Arc<dyn ExecutionPlan>> {
        let rows = match self.view {
            View::Tables => self.tables(),
            View::Views => self.views(),
            View::Columns => self.columns(),
            View::Schemata => schemata(&self.database),
        };
        let batch = to_batch(&self.schema, rows)?;
        let exec = MemorySourceConfig::try_new_exec(
            &[vec![batch]],
            self.schema.clone(),
            projection.cloned(),
        )?;
        Ok(exec)
    }
}

/// A cell: text, a number, or NULL.
enum Cell {
    Text(String),
    Int(i32),
    Null,
}

fn t(s: impl Into<String>) -> Cell {
    Cell::Text(s.into())
}

fn to_batch(schema: &SchemaRef, rows: Vec<Vec<Cell>>) -> DfResult<RecordBatch> {
    let columns: Vec<ArrayRef> = schema
        .fields()
        .iter()
        .enumerate()
        .map(|(i, field)| -> ArrayRef {
            let cells = rows.iter().map(|r| r.get(i));
            match field.data_type() {
                DataType::Int32 => Arc::new(Int32Array::from_iter(cells.map(|c| match c {
                    Some(Cell::Int(n)) => Some(*n),
                    _ => None,
                }))),
                _ => Arc::new(StringArray::from_iter(cells.map(|c| match c {
                    Some(Cell::Text(s)) => Some(s.clone()),
                    _ => None,
                }))),
            }
        })
        .collect();
    Ok(RecordBatch::try_new(schema.clone(), columns)?)
}

impl Listing {
    /// The tables and views of `public`, in name order, materialized views left out.
    fn relations(&self) -> Vec<Object> {
        let mut objects: Vec<Object> = self
            .catalog
            .objects()
            .into_iter()
            .filter(|o| !matches!(o, Object::MaterializedView(_)))
            .filter(|o| !crate::catalog::is_system(o.def().name()))
            .collect();
        objects.sort_by(|a, b| a.def().name().cmp(b.def().name()));
        objects
    }

    fn tables(&self) -> Vec<Vec<Cell>> {
        let mut rows: Vec<Vec<Cell>> = self
            .relations()
            .iter()
            .map(|object| {
                let (kind, insertable) = match object {
                    Object::View(_) => ("VIEW", "NO"),
                    Object::Table(t) if t.def.is_source() => ("BASE TABLE", "NO"),
                    _ => ("BASE TABLE", "YES"),
                };
                let mut row = vec![
                    t(&self.database),
                    t("public"),
                    t(object.def().name()),
                    t(kind),
                ];
                row.extend((0..5).map(|_| Cell::Null));
                row.extend([t(insertable), t("NO"), Cell::Null]);
                row
            })
            .collect();
        for view in VIEWS {
            let mut row = vec![
                t(&self.database),
                t("information_schema"),
                t(*view),
                t("VIEW"),
            ];
            row.extend((0..5).map(|_| Cell::Null));
            row.extend([t("NO"), t("NO"), Cell::Null]);
            rows.push(row);
        }
        rows
    }

    fn views(&self) -> Vec<Vec<Cell>> {
        self.relations()
            .iter()
            .filter_map(|object| match object {
                Object::View(view) => Some(vec![
                    t(&self.database),
                    t("public"),
                    t(&view.def.table.name),
                    t(format!(" {};", view.def.query.trim().trim_end_matches(';'))),
                    t("NONE"),
                    t("NO"),
                    t("NO"),
                    t("NO"),
                    t("NO"),
                    t("NO"),
                ]),
                _ => None,
            })
            .collect()
    }

    fn columns(&self) -> Vec<Vec<Cell>> {
        let mut rows = Vec::new();
        for object in self.relations() {
            let table = object.table();
            let updatable = match object {
                Object::Table(ref t) if !t.def.is_source() => "YES",
                _ => "NO",
            };
            for (i, field) in table.schema.fields().iter().enumerate() {
                let pg = PgType::of(field.data_type());
                let mut row = vec![
                    t(&self.database),
                    t("public"),
                    t(&table.def.name),
                    t(field.name()),
                    Cell::Int(i as i32 + 1),
                    Cell::Null,
                    t(if field.is_nullable() { "YES" } else { "NO" }),
                    t(pg.name),
                ];
                row.extend(pg.sizes);
                row.extend([
                    Cell::Null,
                    t(&self.database),
                    t("pg_catalog"),
                    t(pg.udt),
                    t("NO"),
                    t("NEVER"),
                    t(updatable),
                ]);
                rows.push(row);
            }
        }
        rows
    }
}

fn schemata(database: &str) -> Vec<Vec<Cell>> {
    ["information_schema", "pg_catalog", "public"]
        .iter()
        .map(|schema| {
            vec![
                t(database),
                t(*schema),
                t(ROLE),
                Cell::Null,
                Cell::Null,
                Cell::Null,
                Cell::Null,
            ]
        })
        .collect()
}

/// A column type as `information_schema.columns` describes it.
struct PgType {
    name: String,
    udt: &'static str,
    /// character_maximum_length, character_octet_length, numeric_precision,
    /// numeric_precision_radix, numeric_scale, datetime_precision.
    sizes: [Cell; 6],
}

impl PgType {
    fn of(data_type: &DataType) -> PgType {
        use Cell::{Int, Null};
        let number = |bits: i32, scale: Cell| [Null, Null, Int(bits), Int(2), scale, Null];
        let time = || [Null, Null, Null, Null, Null, Int(6)];
        let (udt, sizes) = match data_type {
            DataType::Boolean => ("bool", [Null, Null, Null, Null, Null, Null]),
            DataType::Int16 => ("int2", number(16, Int(0))),
            DataType::Int32 => ("int4", number(32, Int(0))),
            DataType::Int64 => ("int8", number(64, Int(0))),
            DataType::Float32 => ("float4", number(24, Null)),
            DataType::Float64 => ("float8", number(53, Null)),
            DataType::Decimal128(p, s) => (
                "numeric",
                [
                    Null,
                    Null,
                    Int(i32::from(*p)),
                    Int(10),
                    Int(i32::from(*s)),
                    Null,
                ],
            ),
            DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => (
                "varchar",
                [Null, Int(1_073_741_824), Null, Null, Null, Null],
            ),
            DataType::Date32 => ("date", [Null, Null, Null, Null, Null, Int(0)]),
            DataType::Time64(_) => ("time", time()),
            DataType::Timestamp(_, None) => ("timestamp", time()),
            DataType::Timestamp(_, Some(_)) => ("timestamptz", time()),
            DataType::Interval(_) => ("interval", time()),
            DataType::Binary | DataType::LargeBinary | DataType::BinaryView => {
                ("bytea", [Null, Null, Null, Null, Null, Null])
            }
            _ => ("text", [Null, Int(1_073_741_824), Null, Null, Null, Null]),
        };
        let name = super::pg_type_name(data_type)
            .map(|n| match n.starts_with("numeric") {
                true => "numeric".to_string(),
                false => n,
            })
            .unwrap_or_else(|| "text".to_string());
        PgType { name, udt, sizes }
    }
}
