//! Primary keys as PostgreSQL shows them: each keyed table has a unique
//! btree index `<table>_pkey` (a `pg_class` row of kind `i` and a
//! `pg_index` row) and a constraint of type `p` (`pg_constraint`), which
//! psql's `\d` prints as `Indexes:` and ORMs reflect as the primary key.
//!
//! Their oids are derived from the table's id, above the range the crate
//! hands out, so that `pg_get_indexdef` and `pg_get_constraintdef` find
//! the table again from the oid alone.

use std::sync::Arc;

use datafusion::arrow::array::{
    ArrayRef, AsArray, BooleanArray, Int16Array, Int32Array, ListArray, RecordBatch, StringArray,
    new_null_array,
};
use datafusion::arrow::compute::{cast, concat_batches, take};
use datafusion::arrow::datatypes::{DataType, Field, Int16Type, SchemaRef};
use datafusion::error::{DataFusionError, Result as DfResult};

use crate::catalog::{Catalog, Object};

/// Oid of the primary key index of the table with this id.
const INDEX_BASE: i64 = 1_500_000_000;
/// Oid of the primary key constraint of the table with this id.
const CONSTRAINT_BASE: i64 = 1_800_000_000;
/// btree, PostgreSQL's access method of primary keys.
const BTREE_AM_OID: i32 = 403;

fn oid(base: i64, id: u64) -> Option<i32> {
    i32::try_from(base + i64::try_from(id).ok()?).ok()
}

pub fn index_oid(id: u64) -> Option<i32> {
    oid(INDEX_BASE, id)
}

fn constraint_oid(id: u64) -> Option<i32> {
    oid(CONSTRAINT_BASE, id)
}

/// The table whose index or constraint has this oid.
fn keyed_table(catalog: &Catalog, oid: i32, base: i64) -> Option<(Object, String)> {
    let id = u64::try_from(i64::from(oid) - base).ok()?;
    let object = catalog.by_id(id)?;
    let table = object.table();
    let columns: Vec<&str> = table
        .def
        .primary_key
        .iter()
        .filter_map(|i| table.def.columns.get(*i).map(|c| c.name.as_str()))
        .collect();
    (matches!(object, Object::Table(_)) && !columns.is_empty())
        .then(|| (object.clone(), columns.join(", ")))
}

/// `pg_get_indexdef(oid, ...)` of a primary key index or a user's index.
pub fn index_definition(catalog: &Catalog, oid: i32) -> Option<String> {
    let id = u64::try_from(i64::from(oid) - INDEX_BASE).ok()?;
    if let Some(Object::MaterializedView(view)) = catalog.by_id(id)
        && let Some(index) = &view.def.index
        && let Some((key, rest)) = view.index_columns()
    {
        let base = catalog.by_id(index.on)?;
        let mut text = format!(
            "CREATE INDEX {} ON public.{} USING btree ({})",
            view.table.def.name,
            base.def().name(),
            key.join(", ")
        );
        if index.partial_cover {
            text.push_str(&format!(" INCLUDE ({})", rest.join(", ")));
        }
        return Some(text);
    }

    let (object, columns) = keyed_table(catalog, oid, INDEX_BASE)?;
    let def = &object.table().def;
    Some(format!(
        "CREATE UNIQUE INDEX {} ON public.{} USING btree ({columns})",
        def.key_constraint(),
        def.name
    ))
}

/// `pg_get_constraintdef(oid, ...)` of a primary key constraint.
pub fn constraint_definition(catalog: &Catalog, oid: i32) -> Option<String> {
    let (_, columns) = keyed_table(catalog, oid, CONSTRAINT_BASE)?;
    Some(format!("PRIMARY KEY ({columns})"))
}

/// An index of a relation: its primary key's, or one made by CREATE INDEX.
pub struct Keyed {
    /// The relation's oid.
    pub oid: i32,
    /// The id the index's oid derives from: the table's for its primary
    /// key, the index's own for the others.
    pub id: u64,
    /// The index's name.
    pub name: String,
    /// 1-based positions of the key columns in the relation.
    pub key: Vec<i16>,
    pub primary: bool,
}

pub fn keyed(object: &Object, oid: i32) -> Option<Keyed> {
    let Object::Table(table) = object else {
        return None;
    };
    let key: Vec<i16> = table
        .def
        .primary_key
        .iter()
        .filter_map(|i| i16::try_from(i + 1).ok())
        .collect();
    (!key.is_empty()).then(|| Keyed {
        oid,
        id: table.def.id,
        name: table.def.key_constraint(),
        key,
        primary: true,
    })
}

/// The indexes users made on a relation.
pub fn made(catalog: &Catalog, object: &Object, oid: i32) -> Vec<Keyed> {
    let columns = &object.table().def.columns;
    catalog
        .indexes_on(object.id())
        .iter()
        .filter_map(|view| {
            let key = view
                .index_columns()?
                .0
                .iter()
                .map(|name| {
                    let at = columns.iter().position(|b| b.name == *name)?;
                    i16::try_from(at + 1).ok()
                })
                .collect::<Option<Vec<i16>>>()?;
            Some(Keyed {
                oid,
                id: view.table.def.id,
                name: view.table.def.name.clone(),
                key,
                primary: false,
            })
        })
        .collect()
}

/// Replaces a column by another of the schema's type.
fn set(columns: &mut [ArrayRef], schema: &SchemaRef, name: &str, values: ArrayRef) -> DfResult<()> {
    let i = schema.index_of(name)?;
    columns[i] = cast(&values, schema.field(i).data_type())?;
    Ok(())
}

/// `pg_class` rows of the key indexes: copies of their tables' rows
/// (`rows` picks them), renamed and retyped.
pub fn class_rows(class: &RecordBatch, rows: &[u32], keyed: &[Keyed]) -> DfResult<RecordBatch> {
    let picked = datafusion::arrow::array::UInt32Array::from(rows.to_vec());
    let mut columns: Vec<ArrayRef> = class
        .columns()
        .iter()
        .map(|c| take(c, &picked, None))
        .collect::<Result<_, _>>()?;
    let schema = class.schema();
    let n = keyed.len();
    let oids: Int32Array = keyed.iter().map(|k| index_oid(k.id)).collect();
    set(&mut columns, &schema, "oid", Arc::new(oids.clone()))?;
    set(&mut columns, &schema, "relfilenode", Arc::new(oids))?;
    let names: StringArray = keyed.iter().map(|k| Some(k.name.clone())).collect();
    set(&mut columns, &schema, "relname", Arc::new(names))?;
    set(
        &mut columns,
        &schema,
        "relkind",
        Arc::new(StringArray::from(vec!["i"; n])),
    )?;
    set(
        &mut columns,
        &schema,
        "relam",
        Arc::new(Int32Array::from(vec![BTREE_AM_OID; n])),
    )?;
    let natts: Int16Array = keyed
        .iter()
        .map(|k| i16::try_from(k.key.len()).ok())
        .collect();
    set(&mut columns, &schema, "relnatts", Arc::new(natts))?;
    set(
        &mut columns,
        &schema,
        "relhasindex",
        Arc::new(BooleanArray::from(vec![false; n])),
    )?;
    let options = schema.index_of("reloptions")?;
    columns[options] = new_null_array(schema.field(options).data_type(), n);
    Ok(RecordBatch::try_new(schema, columns)?)
}

fn int2_lists(rows: impl Iterator<Item = Option<Vec<i16>>>) -> ListArray {
    ListArray::from_iter_primitive::<Int16Type, _, _>(
        rows.map(|r| r.map(|items| items.into_iter().map(Some).collect::<Vec<_>>())),
    )
}

/// `"1 2"` (int2vector) or `"[1, 2]"` (the crate's arrays) as numbers.
fn parse_int2s(text: &str) -> Vec<i16> {
    text.trim_matches(|c| c == '[' || c == ']' || c == '{' || c == '}')
        .split([' ', ','])
        .filter_map(|n| n.trim().parse().ok())
        .collect()
}

/// The crate's text column of numbers as `int2[]`.
fn int2_column(batch: &RecordBatch, name: &str) -> DfResult<ListArray> {
    let text = batch
        .column_by_name(name)
        .and_then(|c| c.as_string_opt::<i32>())
        .ok_or_else(|| DataFusionError::Internal(format!("{name} is not text")))?;
    Ok(int2_lists(text.iter().map(|t| t.map(parse_int2s))))
}

pub fn int2_list_type() -> DataType {
    DataType::List(Arc::new(Field::new_list_field(DataType::Int16, true)))
}

pub fn oid_list_type() -> DataType {
    DataType::List(Arc::new(Field::new_list_field(DataType::Int32, true)))
}

/// `pg_index`'s vectors, text in the crate: keys and options `int2vector`,
/// operator classes and collations `oidvector`.
pub const VECTORS: [&str; 4] = ["indkey", "indoption", "indclass", "indcollation"];

/// `pg_index`: the crate's rows with `indkey` as `int2[]`, and the key indexes.
pub fn index(
    crate_rows: &RecordBatch,
    schema: &SchemaRef,
    keyed: &[Keyed],
) -> DfResult<RecordBatch> {
    let mut columns = crate_rows.columns().to_vec();
    for name in VECTORS {
        let at = schema.index_of(name)?;
        columns[at] = cast(
            &int2_column(crate_rows, name)?,
            schema.field(at).data_type(),
        )?;
    }
    let builtin = RecordBatch::try_new(schema.clone(), columns)?;
    let n = keyed.len();
    let mut ours: Vec<ArrayRef> = Vec::new();
    for field in schema.fields() {
        let yes = |value: bool| Arc::new(BooleanArray::from(vec![value; n])) as ArrayRef;
        let column: ArrayRef = match field.name().as_str() {
            "indexrelid" => Arc::new(
                keyed
                    .iter()
                    .map(|k| index_oid(k.id))
                    .collect::<Int32Array>(),
            ),
            "indrelid" => Arc::new(keyed.iter().map(|k| Some(k.oid)).collect::<Int32Array>()),
            "indnatts" | "indnkeyatts" => Arc::new(
                keyed
                    .iter()
                    .map(|k| i16::try_from(k.key.len()).ok())
                    .collect::<Int16Array>(),
            ),
            "indisunique" | "indisprimary" => Arc::new(
                keyed
                    .iter()
                    .map(|k| Some(k.primary))
                    .collect::<BooleanArray>(),
            ),
            "indimmediate" | "indisvalid" | "indisready" | "indislive" => yes(true),
            "indkey" => Arc::new(int2_lists(keyed.iter().map(|k| Some(k.key.clone())))),
            // Default operator classes, collations and options.
            "indclass" | "indcollation" | "indoption" => {
                Arc::new(int2_lists(keyed.iter().map(|k| Some(vec![0; k.key.len()]))))
            }
            "indexprs" | "indpred" => new_null_array(field.data_type(), n),
            _ if field.data_type() == &DataType::Boolean => yes(false),
            _ => {
                let zeros: ArrayRef = Arc::new(StringArray::from(vec!["0"; n]));
                cast(&zeros, field.data_type())?
            }
        };
        ours.push(cast(&column, field.data_type())?);
    }
    let ours = RecordBatch::try_new(schema.clone(), ours)?;
    Ok(concat_batches(schema, &[builtin, ours])?)
}

/// `pg_constraint`: the crate's rows with `conkey` and `confkey` as
/// `int2[]`, and the primary keys.
pub fn constraint(
    crate_rows: &RecordBatch,
    schema: &SchemaRef,
    keyed: &[Keyed],
    public: i32,
) -> DfResult<RecordBatch> {
    let mut columns = crate_rows.columns().to_vec();
    for name in ["conkey", "confkey"] {
        columns[schema.index_of(name)?] = Arc::new(int2_column(crate_rows, name)?);
    }
    let builtin = RecordBatch::try_new(schema.clone(), columns)?;
    let keyed: Vec<&Keyed> = keyed.iter().filter(|k| k.primary).collect();
    let n = keyed.len();
    let mut ours: Vec<ArrayRef> = Vec::new();
    for field in schema.fields() {
        let column: ArrayRef = match field.name().as_str() {
            "oid" => Arc::new(
                keyed
                    .iter()
                    .map(|k| constraint_oid(k.id))
                    .collect::<Int32Array>(),
            ),
            "conname" => Arc::new(
                keyed
                    .iter()
                    .map(|k| Some(k.name.clone()))
                    .collect::<StringArray>(),
            ),
            "connamespace" => Arc::new(Int32Array::from(vec![public; n])),
            "contype" => Arc::new(StringArray::from(vec!["p"; n])),
            "conrelid" => Arc::new(keyed.iter().map(|k| Some(k.oid)).collect::<Int32Array>()),
            "conindid" => Arc::new(
                keyed
                    .iter()
                    .map(|k| index_oid(k.id))
                    .collect::<Int32Array>(),
            ),
            "conkey" => Arc::new(int2_lists(keyed.iter().map(|k| Some(k.key.clone())))),
            "convalidated" | "conislocal" | "connoinherit" => {
                Arc::new(BooleanArray::from(vec![field.name() != "connoinherit"; n]))
            }
            "confupdtype" | "confdeltype" | "confmatchtype" => {
                Arc::new(StringArray::from(vec![" "; n]))
            }
            _ if field.data_type() == &DataType::Boolean => {
                Arc::new(BooleanArray::from(vec![false; n]))
            }
            _ if field.is_nullable() => new_null_array(field.data_type(), n),
            _ => {
                let zeros: ArrayRef = Arc::new(StringArray::from(vec!["0"; n]));
                cast(&zeros, field.data_type())?
            }
        };
        ours.push(cast(&column, field.data_type())?);
    }
    let ours = RecordBatch::try_new(schema.clone(), ours)?;
    Ok(concat_batches(schema, &[builtin, ours])?)
}
