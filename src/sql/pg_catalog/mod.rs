//! The PostgreSQL system catalogs clients read: psql's meta-commands, ORMs'
//! reflection, GUI completion.
//!
//! `datafusion-pg-catalog` provides `pg_catalog` as DataFusion sees the
//! tables; weir lays its own knowledge over it:
//! - [`tables`]: `pg_class` with materialized views as `relkind 'm'`, ACLs
//!   and options (a source's connector, watermark, a view's emit policy),
//!   `pg_description` with the comments of `COMMENT ON`, the `weir` role,
//!   and the columns psql 15 reads that the crate leaves out;
//! - [`functions`]: the functions psql calls (`pg_size_pretty`,
//!   `pg_get_viewdef`, `pg_*_is_visible`, ...);
//! - [`rewrite`]: SQL DataFusion cannot plan, rewritten into SQL it can
//!   (`ARRAY(subquery)`, `obj_description`, `tableoid`);
//! - [`information_schema`]: PostgreSQL's `tables`, `views` and `columns`,
//!   with PostgreSQL's type names and no materialized views.

mod functions;
pub mod information_schema;
mod keys;
mod rewrite;
mod tables;

use std::sync::Arc;

use datafusion::catalog::SchemaProvider;
use datafusion::prelude::SessionContext;
use datafusion_pg_catalog::pg_catalog::setup_pg_catalog;

use crate::catalog::Catalog;
use crate::error::{Error, Result};

pub use rewrite::{qualify_catalog_tables, rewrite};

/// Grafana's PostgreSQL data source lists the tables of the schemas on the
/// search path with this subquery, which the crate replaces by `''` (no
/// schema, no tables); weir runs it as a query DataFusion can plan.
const GRAFANA_SEARCH_PATH: &str = r#"SELECT CASE WHEN trim(s[i]) = '"$user"' THEN user ELSE trim(s[i]) END FROM generate_series( array_lower(string_to_array(current_setting('search_path'),','),1), array_upper(string_to_array(current_setting('search_path'),','),1) ) as i, string_to_array(current_setting('search_path'),',') s"#;

const SEARCH_PATH: &str = r#"SELECT CASE WHEN p = '"$user"' THEN current_user ELSE p END FROM (SELECT trim(unnest(string_to_array(current_setting('search_path'), ','))) AS p) AS search_path"#;

/// A client's whole query replaced before parsing, when it holds SQL
/// weir answers better than the crate's stand-in.
pub fn replace_client_sql(text: &str) -> Option<String> {
    let spaced = |s: &str| s.split_whitespace().collect::<Vec<_>>().join(" ");
    let text = spaced(text);
    let pattern = spaced(GRAFANA_SEARCH_PATH);
    text.contains(&pattern)
        .then(|| text.replace(&pattern, SEARCH_PATH))
}

/// The one role weir has: the bootstrap superuser.
pub const ROLE: &str = "weir";

/// Its oid, PostgreSQL's bootstrap superuser's.
pub const ROLE_OID: i32 = 10;

/// `pg_class`'s own oid: `classoid` of every relation and column comment.
pub const PG_CLASS_OID: i32 = 1259;

/// Set up `pg_catalog` and `information_schema` in the context's catalog
/// `database`, and the functions clients call.
pub fn setup(ctx: &SessionContext, database: &str, catalog: &Arc<Catalog>) -> Result<()> {
    setup_pg_catalog(ctx, database, tables::Roles).map_err(|e| Error::from(*e))?;
    let databases = ctx
        .catalog(database)
        .ok_or_else(|| Error::Internal(format!("catalog {database} is not registered")))?;
    let crate_schema = databases
        .schema("pg_catalog")
        .ok_or_else(|| Error::Internal("pg_catalog was not set up".into()))?;
    let overlay = tables::Overlay::new(crate_schema, catalog.clone());
    databases
        .register_schema("pg_catalog", Arc::new(overlay) as Arc<dyn SchemaProvider>)
        .map_err(Error::from)?;
    let information = information_schema::Schema::new(catalog.clone(), database);
    databases
        .register_schema("information_schema", Arc::new(information))
        .map_err(Error::from)?;
    functions::register(ctx, catalog);
    Ok(())
}

/// The name PostgreSQL shows for a type (psql `\d`, `format_type`).
pub fn pg_type_name(data_type: &datafusion::arrow::datatypes::DataType) -> Option<String> {
    use datafusion::arrow::datatypes::DataType as D;
    Some(match data_type {
        D::Boolean => "boolean".into(),
        D::Int16 => "smallint".into(),
        D::Int32 => "integer".into(),
        // PostgreSQL has no unsigned types; the wire sends these as bigint.
        D::Int64 | D::UInt64 => "bigint".into(),
        D::Float32 => "real".into(),
        D::Float64 => "double precision".into(),
        D::Utf8 | D::LargeUtf8 | D::Utf8View => "character varying".into(),
        D::Binary | D::LargeBinary | D::BinaryView => "bytea".into(),
        D::Date32 => "date".into(),
        D::Time64(_) => "time without time zone".into(),
        D::Timestamp(_, None) => "timestamp without time zone".into(),
        D::Timestamp(_, Some(_)) => "timestamp with time zone".into(),
        D::Interval(_) => "interval".into(),
        D::Decimal128(p, s) => format!("numeric({p},{s})"),
        _ => return None,
    })
}
