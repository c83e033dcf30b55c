//! weir's layer over the crate's `pg_catalog`: the tables it rewrites or
//! adds. Each computed table reads the crate's table in the same statement
//! and corrects what weir knows better, so oids stay the crate's.

use std::collections::HashMap;
use std::sync::Arc;

use async_trait::async_trait;
use datafusion::arrow::array::{
    Array, ArrayRef, AsArray, BooleanArray, Int32Array, ListArray, RecordBatch, StringArray,
    new_null_array,
};
use datafusion::arrow::compute::concat_batches;
use datafusion::arrow::datatypes::{DataType, Field, Int32Type, Schema, SchemaRef, TimeUnit};
use datafusion::catalog::{SchemaProvider, Session, TableProvider};
use datafusion::datasource::TableType;
use datafusion::datasource::memory::{MemTable, MemorySourceConfig};
use datafusion::error::{DataFusionError, Result as DfResult};
use datafusion::logical_expr::Expr;
use datafusion::physical_plan::ExecutionPlan;
use datafusion_pg_catalog::pg_catalog::context::{PgCatalogContextProvider, Role};

use super::{PG_CLASS_OID, ROLE, ROLE_OID, keys};
use crate::catalog::{Catalog, Emit, Object, Privilege, is_secret};

/// The roles the crate's own tables see: `weir`, a superuser.
#[derive(Debug, Clone)]
pub struct Roles;

#[async_trait]
impl PgCatalogContextProvider for Roles {
    async fn roles(&self) -> Vec<String> {
        vec![ROLE.to_string()]
    }

    async fn role(&self, name: &str) -> Option<Role> {
        (name == ROLE).then(|| Role {
            name: ROLE.to_string(),
            is_superuser: true,
            can_login: true,
            can_create_db: true,
            can_create_role: true,
            can_create_user: true,
            can_replication: true,
            grants: Vec::new(),
            inherited_roles: Vec::new(),
        })
    }
}

/// `pg_catalog` as clients see it: the crate's schema, with some tables
/// replaced and some added.
#[derive(Debug)]
pub struct Overlay {
    inner: Arc<dyn SchemaProvider>,
    catalog: Arc<Catalog>,
}

/// Tables this layer adds to the crate's.
const ADDED: &[&str] = &["pg_user", "pg_user_mappings"];

impl Overlay {
    pub fn new(inner: Arc<dyn SchemaProvider>, catalog: Arc<Catalog>) -> Self {
        Overlay { inner, catalog }
    }

    fn computed(&self, table: Kind, schema: SchemaRef) -> Arc<dyn TableProvider> {
        Arc::new(Computed {
            kind: table,
            schema,
            inner: self.inner.clone(),
            catalog: self.catalog.clone(),
        })
    }
}

#[async_trait]
impl SchemaProvider for Overlay {
    fn table_names(&self) -> Vec<String> {
        let mut names = self.inner.table_names();
        names.extend(ADDED.iter().map(|n| n.to_string()));
        names
    }

    async fn table(&self, name: &str) -> DfResult<Option<Arc<dyn TableProvider>>> {
        let crate_schema = |name| async move {
            let table = self.inner.table(name).await?;
            table
                .map(|t| t.schema())
                .ok_or_else(|| DataFusionError::Internal(format!("pg_catalog has no {name}")))
        };
        Ok(Some(match name {
            "pg_class" => {
                let schema = with_fields(
                    &crate_schema("pg_class").await?,
                    &[text_array("relacl"), text_array("reloptions")],
                );
                self.computed(Kind::Class, schema)
            }
            "pg_attribute" => {
                let schema =
                    replace_field(&crate_schema("pg_attribute").await?, text_array("attacl"));
                self.computed(Kind::Attribute, schema)
            }
            "pg_description" => self.computed(Kind::Description, crate_schema(name).await?),
            "pg_index" => {
                let mut schema = crate_schema(name).await?;
                for column in keys::VECTORS {
                    let data_type = match column {
                        "indclass" | "indcollation" => keys::oid_list_type(),
                        _ => keys::int2_list_type(),
                    };
                    schema = replace_field(&schema, Field::new(column, data_type, false));
                }
                self.computed(Kind::Index, schema)
            }
            "pg_constraint" => {
                let mut schema = crate_schema(name).await?;
                for column in ["conkey", "confkey"] {
                    schema =
                        replace_field(&schema, Field::new(column, keys::int2_list_type(), true));
                }
                self.computed(Kind::Constraint, schema)
            }
            "pg_settings" => {
                let schema = with_fields(
                    &crate_schema(name).await?,
                    &[Field::new("boot_val", DataType::Utf8, true)],
                );
                self.computed(Kind::Settings, schema)
            }
            "pg_collation" => {
                let schema = with_fields(
                    &crate_schema(name).await?,
                    &[Field::new("colliculocale", DataType::Utf8, true)],
                );
                self.computed(Kind::Collation, schema)
            }
            _ if retyped(name).is_some() => {
                let mut schema = crate_schema(name).await?;
                for (column, data_type) in retyped(name).unwrap_or_default() {
                    schema = replace_field(&schema, Field::new(*column, data_type(), true));
                }
                self.computed(Kind::Retyped(name.to_string()), schema)
            }
            "pg_roles" => memory(roles(&self.catalog)?)?,
            "pg_user" => memory(user(&self.catalog)?)?,
            "pg_auth_members" => memory(empty(auth_members()))?,
            "pg_user_mappings" => memory(empty(user_mappings()))?,
            "pg_db_role_setting" => memory(empty(db_role_setting()))?,
            "pg_default_acl" => memory(empty(default_acl()))?,
            _ => return self.inner.table(name).await,
        }))
    }

    fn table_exist(&self, name: &str) -> bool {
        ADDED.contains(&name) || self.inner.table_exist(name)
    }
}

fn text_array(name: &str) -> Field {
    Field::new(
        name,
        DataType::List(Arc::new(Field::new("item", DataType::Utf8, true))),
        true,
    )
}

fn with_fields(schema: &SchemaRef, extra: &[Field]) -> SchemaRef {
    let mut fields: Vec<Field> = schema.fields().iter().map(|f| f.as_ref().clone()).collect();
    fields.extend(extra.iter().cloned());
    Arc::new(Schema::new(fields))
}

fn replace_field(schema: &SchemaRef, field: Field) -> SchemaRef {
    let fields: Vec<Field> = schema
        .fields()
        .iter()
        .map(|f| match f.name() == field.name() {
            true => field.clone(),
            false => f.as_ref().clone(),
        })
        .collect();
    Arc::new(Schema::new(fields))
}

fn memory(batch: RecordBatch) -> DfResult<Arc<dyn TableProvider>> {
    Ok(Arc::new(MemTable::try_new(
        batch.schema(),
        vec![vec![batch]],
    )?))
}

fn empty(schema: SchemaRef) -> RecordBatch {
    RecordBatch::new_empty(schema)
}

/// Which table a [`Computed`] is.
#[derive(Debug, Clone)]
enum Kind {
    Class,
    Index,
    Constraint,
    Attribute,
    Description,
    Settings,
    Collation,
    /// A crate table with array columns it types as text (ACLs, event
    /// trigger tags, policy roles, function argument types).
    Retyped(String),
}

type TypeFn = fn() -> DataType;

fn text_list() -> DataType {
    DataType::List(Arc::new(Field::new("item", DataType::Utf8, true)))
}

fn oid_list() -> DataType {
    DataType::List(Arc::new(Field::new("item", DataType::Int32, true)))
}

/// The columns of crate tables that PostgreSQL types as arrays.
fn retyped(table: &str) -> Option<&'static [(&'static str, TypeFn)]> {
    Some(match table {
        "pg_namespace" => &[("nspacl", text_list as TypeFn)],
        "pg_event_trigger" => &[("evttags", text_list as TypeFn)],
        "pg_policy" => &[("polroles", oid_list as TypeFn)],
        "pg_statistic_ext" => &[("stxkind", text_list as TypeFn)],
        "pg_proc" => &[
            ("proargtypes", oid_list as TypeFn),
            ("proallargtypes", oid_list as TypeFn),
            ("proargmodes", text_list as TypeFn),
            ("proargnames", text_list as TypeFn),
        ],
        _ => return None,
    })
}

/// A table computed at scan time from the crate's table of the same name.
#[derive(Debug)]
struct Computed {
    kind: Kind,
    schema: SchemaRef,
    inner: Arc<dyn SchemaProvider>,
    catalog: Arc<Catalog>,
}

#[async_trait]
impl TableProvider for Computed {
    fn schema(&self) -> SchemaRef {
        self.schema.clone()
    }

    fn table_type(&self) -> TableType {
        // System catalogs are tables (relkind 'r'); pg_settings is a view.
        match self.kind {
            Kind::Settings => TableType::View,
            _ => TableType::Base,
        }
    }

    async fn scan(
        &self,
        state: &dyn Session,
        projection: Option<&Vec<usize>>,
        _filters: &[Expr],
        _limit: Option<usize>,
    ) -> DfResult<Arc<dyn ExecutionPlan>> {
        let batch = match &self.kind {
            Kind::Class => self.class(state).await?,
            Kind::Index => self.index(state).await?,
            Kind::Constraint => self.constraint(state).await?,
            Kind::Attribute => self.attribute(state).await?,
            Kind::Description => self.description(state).await?,
            Kind::Settings => self.settings(state).await?,
            Kind::Collation => self.collation(state).await?,
            Kind::Retyped(table) => self.retyped(state, table).await?,
        };
        let exec = MemorySourceConfig::try_new_exec(
            &[vec![batch]],
            self.schema.clone(),
            projection.cloned(),
        )?;
        Ok(exec)
    }
}

impl Computed {
    /// The crate's rows of one of its tables.
    async fn crate_rows(&self, state: &dyn Session, name: &str) -> DfResult<RecordBatch> {
        let table = self
            .inner
            .table(name)
            .await?
            .ok_or_else(|| DataFusionError::Internal(format!("pg_catalog has no {name}")))?;
        let plan = table.scan(state, None, &[], None).await?;
        let batches = datafusion::physical_plan::collect(plan, state.task_ctx()).await?;
        Ok(concat_batches(&table.schema(), &batches)?)
    }

    /// weir's relations by the oid the crate gave them, from its `pg_class`.
    async fn relations(
        &self,
        state: &dyn Session,
        class: &RecordBatch,
    ) -> DfResult<HashMap<i32, Object>> {
        let namespaces = self.crate_rows(state, "pg_namespace").await?;
        let public = namespace_oid(&namespaces, "public")?;
        let names = strings(class, "relname")?;
        let spaces = ints(class, "relnamespace")?;
        let oids = ints(class, "oid")?;
        let mut found = HashMap::new();
        for i in 0..class.num_rows() {
            if spaces.is_valid(i)
                && Some(spaces.value(i)) == public
                && let Some(object) = self.catalog.get(names.value(i))
            {
                found.insert(oids.value(i), object);
            }
        }
        Ok(found)
    }

    /// Materialized views are `relkind 'm'`; every relation is weir's; a
    /// source's connector and watermark and a view's emit policy are its
    /// options, which `\d+` prints.
    async fn class(&self, state: &dyn Session) -> DfResult<RecordBatch> {
        let class = self.crate_rows(state, "pg_class").await?;
        let relations = self.relations(state, &class).await?;
        let oids = ints(&class, "oid")?;
        let kinds = strings(&class, "relkind")?;
        let mut relkind = Vec::with_capacity(class.num_rows());
        let mut options = Vec::with_capacity(class.num_rows());
        for i in 0..class.num_rows() {
            let object = relations.get(&oids.value(i));
            relkind.push(match object {
                Some(Object::MaterializedView(_)) => "m".to_string(),
                _ => kinds.value(i).to_string(),
            });
            options.push(object.map(reloptions).filter(|o| !o.is_empty()));
        }
        // Tables and materialized views keep rows: PostgreSQL's heap.
        let relam: Int32Array = (0..class.num_rows())
            .map(|i| match relations.get(&oids.value(i)) {
                Some(Object::Table(_) | Object::MaterializedView(_)) => Some(HEAP_AM_OID),
                _ => Some(0),
            })
            .collect();
        let mut columns = class.columns().to_vec();
        let at = |name: &str| class.schema().index_of(name);
        columns[at("relkind")?] = Arc::new(StringArray::from(relkind));
        columns[at("relowner")?] = Arc::new(Int32Array::from(vec![ROLE_OID; class.num_rows()]));
        columns[at("relam")?] = Arc::new(relam);
        let acls = (0..class.num_rows())
            .map(|i| {
                let object = relations.get(&oids.value(i))?;
                self.catalog.acl(object.id()).items(ROLE)
            })
            .collect();
        columns.push(Arc::new(text_lists(acls)));
        columns.push(Arc::new(text_lists(options)));
        columns[at("oid")?] = Arc::new(self.fixed_oids(state, &class).await?);
        let batch = RecordBatch::try_new(self.schema.clone(), columns)?;
        let batch = self.with_key_indexes(batch, &relations)?;
        self.without_information_schema(state, batch).await
    }

    /// The crate's oids, with PostgreSQL's fixed ones for the system
    /// catalogs (`pg_class` is 1259), which `pg_description`, `pg_depend`
    /// and `'pg_class'::regclass` use.
    async fn fixed_oids(&self, state: &dyn Session, class: &RecordBatch) -> DfResult<Int32Array> {
        let namespaces = self.crate_rows(state, "pg_namespace").await?;
        let system = namespace_oid(&namespaces, "pg_catalog")?;
        let names = strings(class, "relname")?;
        let spaces = ints(class, "relnamespace")?;
        let oids = ints(class, "oid")?;
        Ok((0..class.num_rows())
            .map(|i| {
                let fixed = (spaces.is_valid(i) && Some(spaces.value(i)) == system)
                    .then(|| super::rewrite::catalog_oid(names.value(i)))
                    .flatten();
                fixed.or_else(|| oids.is_valid(i).then(|| oids.value(i)))
            })
            .collect())
    }

    /// Keyed tables have an index (`relhasindex`, which psql checks before
    /// it looks for one), listed as a relation of its own.
    fn with_key_indexes(
        &self,
        class: RecordBatch,
        relations: &HashMap<i32, Object>,
    ) -> DfResult<RecordBatch> {
        let oids = ints(&class, "oid")?;
        let mut rows = Vec::new();
        let mut keyed = Vec::new();
        for i in 0..class.num_rows() {
            let Some(object) = relations.get(&oids.value(i)) else {
                continue;
            };
            let indexes = keys::keyed(object, oids.value(i))
                .into_iter()
                .chain(keys::made(&self.catalog, object, oids.value(i)));
            for k in indexes {
                rows.push(i as u32);
                keyed.push(k);
            }
        }
        let has_index: BooleanArray = (0..class.num_rows())
            .map(|i| Some(rows.contains(&(i as u32))))
            .collect();
        let mut columns = class.columns().to_vec();
        columns[class.schema().index_of("relhasindex")?] = Arc::new(has_index);
        let class = RecordBatch::try_new(class.schema(), columns)?;
        let indexes = keys::class_rows(&class, &rows, &keyed)?;
        Ok(concat_batches(&class.schema(), &[class, indexes])?)
    }

    /// The keyed tables, by the oids the crate gave them.
    async fn keyed(&self, state: &dyn Session) -> DfResult<Vec<keys::Keyed>> {
        let class = self.crate_rows(state, "pg_class").await?;
        let mut keyed: Vec<keys::Keyed> = self
            .relations(state, &class)
            .await?
            .iter()
            .flat_map(|(oid, object)| {
                keys::keyed(object, *oid)
                    .into_iter()
                    .chain(keys::made(&self.catalog, object, *oid))
            })
            .collect();
        keyed.sort_by_key(|k| k.id);
        Ok(keyed)
    }

    async fn index(&self, state: &dyn Session) -> DfResult<RecordBatch> {
        let rows = self.crate_rows(state, "pg_index").await?;
        keys::index(&rows, &self.schema, &self.keyed(state).await?)
    }

    async fn constraint(&self, state: &dyn Session) -> DfResult<RecordBatch> {
        let rows = self.crate_rows(state, "pg_constraint").await?;
        let namespaces = self.crate_rows(state, "pg_namespace").await?;
        let public = namespace_oid(&namespaces, "public")?.unwrap_or(0);
        keys::constraint(&rows, &self.schema, &self.keyed(state).await?, public)
    }

    /// `information_schema`'s views are not on the search path, so psql
    /// lists none of them; leaving them out of `pg_class` keeps them out of
    /// every listing that trusts `pg_table_is_visible`.
    async fn without_information_schema(
        &self,
        state: &dyn Session,
        class: RecordBatch,
    ) -> DfResult<RecordBatch> {
        let namespaces = self.crate_rows(state, "pg_namespace").await?;
        let hidden = namespace_oid(&namespaces, "information_schema")?;
        let spaces = ints(&class, "relnamespace")?;
        let keep: BooleanArray = spaces.iter().map(|s| Some(s != hidden)).collect();
        Ok(datafusion::arrow::compute::filter_record_batch(
            &class, &keep,
        )?)
    }

    /// Column types as the user wrote them where Arrow has one type for
    /// several of PostgreSQL's (`varchar` and `text` are both Utf8).
    async fn attribute(&self, state: &dyn Session) -> DfResult<RecordBatch> {
        let attribute = self.crate_rows(state, "pg_attribute").await?;
        let class = self.crate_rows(state, "pg_class").await?;
        let relations = self.relations(state, &class).await?;
        let relids = ints(&attribute, "attrelid")?;
        let numbers = attribute
            .column_by_name("attnum")
            .and_then(|c| c.as_primitive_opt::<datafusion::arrow::datatypes::Int16Type>())
            .ok_or_else(|| DataFusionError::Internal("pg_attribute.attnum is not int2".into()))?;
        let types = ints(&attribute, "atttypid")?;
        let corrected: Int32Array = (0..attribute.num_rows())
            .map(|i| {
                let number = usize::try_from(numbers.value(i))
                    .ok()
                    .and_then(|n| n.checked_sub(1));
                let table = relations.get(&relids.value(i)).map(|o| o.table());
                let column = table.zip(number).and_then(|(t, n)| t.def.columns.get(n));
                // A window function's row number is `bigint`, as on the wire.
                let unsigned = table
                    .zip(number)
                    .and_then(|(t, n)| t.schema.fields().get(n))
                    .is_some_and(|f| f.data_type() == &DataType::UInt64);
                match column.and_then(|c| type_oid(&c.sql_type)) {
                    _ if unsigned => Some(INT8_OID),
                    Some(oid) if types.value(i) == TEXT_OID => Some(oid),
                    _ => types.is_valid(i).then(|| types.value(i)),
                }
            })
            .collect();
        // A view's columns are nullable in PostgreSQL, whatever the query.
        let not_null = attribute
            .column_by_name("attnotnull")
            .map(|c| c.as_boolean().clone())
            .ok_or_else(|| DataFusionError::Internal("pg_attribute has no attnotnull".into()))?;
        let not_null: BooleanArray = (0..attribute.num_rows())
            .map(|i| match relations.get(&relids.value(i)) {
                Some(Object::View(_) | Object::MaterializedView(_)) => Some(false),
                _ => not_null.is_valid(i).then(|| not_null.value(i)),
            })
            .collect();
        let mut columns = attribute.columns().to_vec();
        let at = |name: &str| attribute.schema().index_of(name);
        columns[at("atttypid")?] = Arc::new(corrected);
        let fixed = self.fixed_oids(state, &class).await?;
        let crate_oids = ints(&class, "oid")?;
        let remap: HashMap<i32, i32> = crate_oids
            .iter()
            .zip(fixed.iter())
            .filter_map(|(from, to)| Some((from?, to?)))
            .filter(|(from, to)| from != to)
            .collect();
        let relids: Int32Array = relids
            .iter()
            .map(|r| r.map(|r| remap.get(&r).copied().unwrap_or(r)))
            .collect();
        columns[at("attrelid")?] = Arc::new(relids);
        columns[at("attnotnull")?] = Arc::new(not_null);
        let acl = at("attacl")?;
        columns[acl] = new_null_array(self.schema.field(acl).data_type(), attribute.num_rows());
        Ok(RecordBatch::try_new(self.schema.clone(), columns)?)
    }

    /// The crate's descriptions of built-in objects, and weir's comments.
    async fn description(&self, state: &dyn Session) -> DfResult<RecordBatch> {
        let builtin = self.crate_rows(state, "pg_description").await?;
        let class = self.crate_rows(state, "pg_class").await?;
        let by_id: HashMap<u64, i32> = self
            .relations(state, &class)
            .await?
            .into_iter()
            .map(|(oid, object)| (object.id(), oid))
            .collect();
        let (mut objoid, mut subid, mut text) = (Vec::new(), Vec::new(), Vec::new());
        for ((id, sub), comment) in self.catalog.comments() {
            if let Some(oid) = by_id.get(&id) {
                objoid.push(*oid);
                subid.push(sub);
                text.push(comment);
            }
        }
        let schema = builtin.schema();
        let mut columns: Vec<ArrayRef> = Vec::new();
        for field in schema.fields() {
            columns.push(match field.name().as_str() {
                "objoid" => Arc::new(Int32Array::from(objoid.clone())),
                "classoid" => Arc::new(Int32Array::from(vec![PG_CLASS_OID; objoid.len()])),
                "objsubid" => Arc::new(Int32Array::from(subid.clone())),
                "description" => Arc::new(StringArray::from(text.clone())),
                other => {
                    return Err(DataFusionError::Internal(format!(
                        "pg_description has an unexpected column {other}"
                    )));
                }
            });
        }
        let columns: Vec<ArrayRef> = columns
            .into_iter()
            .zip(schema.fields())
            .map(|(c, f)| datafusion::arrow::compute::cast(&c, f.data_type()))
            .collect::<Result<_, _>>()?;
        let ours = RecordBatch::try_new(schema.clone(), columns)?;
        Ok(concat_batches(&schema, &[builtin, ours])?)
    }

    /// PostgreSQL 15's name of the ICU locale column, which psql 15 reads.
    async fn collation(&self, state: &dyn Session) -> DfResult<RecordBatch> {
        let collation = self.crate_rows(state, "pg_collation").await?;
        let mut columns = collation.columns().to_vec();
        let locale = collation.schema().index_of("colllocale")?;
        columns.push(collation.column(locale).clone());
        Ok(RecordBatch::try_new(self.schema.clone(), columns)?)
    }

    async fn retyped(&self, state: &dyn Session, table: &str) -> DfResult<RecordBatch> {
        let mut rows = self.crate_rows(state, table).await?;
        if table == "pg_namespace" {
            rows = owned_namespaces(rows)?;
        }
        let columns: Vec<ArrayRef> = self
            .schema
            .fields()
            .iter()
            .zip(rows.columns())
            .map(|(field, column)| {
                if field.data_type() == column.data_type() {
                    return Ok(column.clone());
                }
                match column.as_string_opt::<i32>() {
                    Some(text) => parse_lists(text, field.data_type()),
                    None => Ok(new_null_array(field.data_type(), rows.num_rows())),
                }
            })
            .collect::<DfResult<Vec<ArrayRef>>>()?;
        let mut columns = columns;
        if table == "pg_namespace" {
            let acl = self.schema.index_of("nspacl")?;
            columns[acl] = self.namespace_acls(&rows, &columns[acl])?;
        }
        Ok(RecordBatch::try_new(self.schema.clone(), columns)?)
    }

    /// Schema `public`'s grants, as `\dn+` shows them; other schemas as
    /// the crate has them.
    fn namespace_acls(&self, namespaces: &RecordBatch, acls: &ArrayRef) -> DfResult<ArrayRef> {
        let items = self
            .catalog
            .schema_acl()
            .items_with("pg_database_owner", &Privilege::ALL_ON_SCHEMA);
        let lists = acls.as_list_opt::<i32>();
        let rows = strings(namespaces, "nspname")?
            .iter()
            .enumerate()
            .map(|(row, name)| match (name, lists) {
                (Some("public"), _) => Some(items.clone()),
                (_, Some(lists)) if lists.is_valid(row) => Some(
                    lists
                        .value(row)
                        .as_string::<i32>()
                        .iter()
                        .map(|item| item.unwrap_or_default().to_string())
                        .collect(),
                ),
                _ => None,
            })
            .collect();
        Ok(Arc::new(text_lists(rows)))
    }

    /// `boot_val`, which psql's `\dconfig` compares with the setting.
    async fn settings(&self, state: &dyn Session) -> DfResult<RecordBatch> {
        let settings = self.crate_rows(state, "pg_settings").await?;
        let mut columns = settings.columns().to_vec();
        columns.push(
            settings
                .column(settings.schema().index_of("setting")?)
                .clone(),
        );
        Ok(RecordBatch::try_new(self.schema.clone(), columns)?)
    }
}

/// The crate's text spelling of an array (`[2276]`, `2276 25`, `['v']`,
/// `{a,b}`) as a list of the column's element type.
fn parse_lists(text: &StringArray, data_type: &DataType) -> DfResult<ArrayRef> {
    let lists: Vec<Option<Vec<String>>> = text
        .iter()
        .map(|value| {
            value.map(|v| {
                v.trim_matches(|c| matches!(c, '[' | ']' | '{' | '}'))
                    .split([',', ' '])
                    .map(|item| item.trim().trim_matches(|c| c == '\'' || c == '"'))
                    .filter(|item| !item.is_empty())
                    .map(str::to_string)
                    .collect()
            })
        })
        .collect();
    let as_text: ArrayRef = Arc::new(text_lists(lists));
    Ok(datafusion::arrow::compute::cast(&as_text, data_type)?)
}

/// `public` belongs to `pg_database_owner`, the others to `weir`.
fn owned_namespaces(namespaces: RecordBatch) -> DfResult<RecordBatch> {
    let owners: Int32Array = strings(&namespaces, "nspname")?
        .iter()
        .map(|n| match n == Some("public") {
            true => Some(DATABASE_OWNER_OID),
            false => Some(ROLE_OID),
        })
        .collect();
    let mut columns = namespaces.columns().to_vec();
    let owner = namespaces.schema().index_of("nspowner")?;
    columns[owner] = datafusion::arrow::compute::cast(&owners, columns[owner].data_type())?;
    Ok(RecordBatch::try_new(namespaces.schema(), columns)?)
}

/// Heap, the access method of tables and materialized views.
const HEAP_AM_OID: i32 = 2;

/// `pg_database_owner`, the owner of `public` in PostgreSQL 15.
pub const DATABASE_OWNER_OID: i32 = 6171;

fn namespace_oid(namespaces: &RecordBatch, name: &str) -> DfResult<Option<i32>> {
    Ok(strings(namespaces, "nspname")?
        .iter()
        .zip(ints(namespaces, "oid")?.iter())
        .find_map(|(n, oid)| (n == Some(name)).then_some(oid).flatten()))
}

fn strings<'a>(batch: &'a RecordBatch, name: &str) -> DfResult<&'a StringArray> {
    batch
        .column_by_name(name)
        .and_then(|c| c.as_string_opt::<i32>())
        .ok_or_else(|| DataFusionError::Internal(format!("catalog column {name} is not text")))
}

fn ints<'a>(batch: &'a RecordBatch, name: &str) -> DfResult<&'a Int32Array> {
    batch
        .column_by_name(name)
        .and_then(|c| c.as_primitive_opt::<Int32Type>())
        .ok_or_else(|| DataFusionError::Internal(format!("catalog column {name} is not int4")))
}

fn text_lists(rows: Vec<Option<Vec<String>>>) -> ListArray {
    use datafusion::arrow::array::{ListBuilder, StringBuilder};
    let mut builder = ListBuilder::new(StringBuilder::new());
    for row in rows {
        if let Some(items) = &row {
            for item in items {
                builder.values().append_value(item);
            }
        }
        builder.append(row.is_some());
    }
    builder.finish()
}

const TEXT_OID: i32 = 25;
const INT8_OID: i32 = 20;

/// The oid of a string type PostgreSQL tells apart from `text`.
fn type_oid(sql_type: &str) -> Option<i32> {
    let lower = sql_type.to_ascii_lowercase();
    if lower.starts_with("varchar") || lower.starts_with("character varying") {
        Some(1043)
    } else if lower.starts_with("char") || lower.starts_with("bpchar") {
        Some(1042)
    } else {
        None
    }
}

/// A relation's options as `key=value`: a connector's `WITH` options
/// (secrets as `[REDACTED]`), its format, the watermark, a view's emit policy.
fn reloptions(object: &Object) -> Vec<String> {
    let mut options = Vec::new();
    let def = &object.table().def;
    if let Some(connector) = &def.connector {
        options.push(format!("connector={}", connector.connector));
        for (key, value) in &connector.options {
            if is_secret(key) {
                options.push(format!("{key}={}", crate::catalog::REDACTED));
            } else {
                options.push(format!("{key}={value}"));
            }
        }
        if let Some(format) = &connector.format {
            options.push(format!("format={format}"));
        }
        if let Some(encode) = &connector.encode {
            options.push(format!("encode={encode}"));
        }
    }
    if def.is_append_only() {
        options.push("append_only=true".into());
    }
    if let Some(watermark) = &def.watermark {
        options.push(format!(
            "watermark={} AS {}",
            watermark.column, watermark.expr
        ));
    }
    if let Object::MaterializedView(view) = object {
        let emit = match view.def.emit {
            Emit::Changes => "changes".to_string(),
            Emit::OnWindowClose => "on window close".to_string(),
            every @ Emit::Every { .. } => every.clause().trim_start_matches("EMIT ").to_lowercase(),
        };
        options.push(format!("emit={emit}"));
        if view.def.partitioned {
            options.push("partitioned=true".into());
        }
    }
    options
}

/// A role as the catalog views list it.
struct Listed {
    name: String,
    oid: i32,
    superuser: bool,
    login: bool,
}

/// `weir` first, PostgreSQL's bootstrap superuser (oid 10) whether or not
/// it was ever stored, then every other role.
fn listed(catalog: &Catalog) -> Vec<Listed> {
    let stored = catalog.roles();
    let bootstrap = stored.iter().find(|r| r.name == ROLE);
    let mut out = vec![Listed {
        name: ROLE.to_string(),
        oid: ROLE_OID,
        superuser: true,
        login: bootstrap.is_none_or(|r| r.login),
    }];
    out.extend(stored.iter().filter(|r| r.name != ROLE).map(|r| Listed {
        name: r.name.clone(),
        oid: ROLE_OID_BASE.saturating_add(i32::try_from(r.id).unwrap_or(i32::MAX - ROLE_OID_BASE)),
        superuser: r.superuser,
        login: r.login,
    }));
    out
}

/// Where the oids of created roles start: PostgreSQL's first normal oid.
const ROLE_OID_BASE: i32 = 16384;

/// A password is never shown, only that there is one, as PostgreSQL does.
const HIDDEN_PASSWORD: &str = "********";

/// `pg_roles`: every role. A superuser holds every attribute.
fn roles(catalog: &Catalog) -> DfResult<RecordBatch> {
    let roles = listed(catalog);
    let n = roles.len();
    let timestamp = DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into()));
    let superusers = || {
        Arc::new(BooleanArray::from_iter(
            roles.iter().map(|r| Some(r.superuser)),
        )) as ArrayRef
    };
    let schema = Arc::new(Schema::new(vec![
        Field::new("rolname", DataType::Utf8, false),
        Field::new("rolsuper", DataType::Boolean, false),
        Field::new("rolinherit", DataType::Boolean, false),
        Field::new("rolcreaterole", DataType::Boolean, false),
        Field::new("rolcreatedb", DataType::Boolean, false),
        Field::new("rolcanlogin", DataType::Boolean, false),
        Field::new("rolreplication", DataType::Boolean, false),
        Field::new("rolconnlimit", DataType::Int32, false),
        Field::new("rolpassword", DataType::Utf8, true),
        Field::new("rolvaliduntil", timestamp.clone(), true),
        Field::new("rolbypassrls", DataType::Boolean, false),
        text_array("rolconfig"),
        Field::new("oid", DataType::Int32, false),
    ]));
    let columns: Vec<ArrayRef> = vec![
        Arc::new(StringArray::from_iter_values(
            roles.iter().map(|r| r.name.as_str()),
        )),
        superusers(),
        Arc::new(BooleanArray::from(vec![true; n])),
        superusers(),
        superusers(),
        Arc::new(BooleanArray::from_iter(roles.iter().map(|r| Some(r.login)))),
        superusers(),
        Arc::new(Int32Array::from(vec![-1; n])),
        Arc::new(StringArray::from(vec![HIDDEN_PASSWORD; n])),
        new_null_array(&timestamp, n),
        superusers(),
        new_null_array(schema.field(11).data_type(), n),
        Arc::new(Int32Array::from_iter_values(roles.iter().map(|r| r.oid))),
    ];
    Ok(RecordBatch::try_new(schema, columns)?)
}

/// `pg_user`: the roles that may log in, as the older view names them.
fn user(catalog: &Catalog) -> DfResult<RecordBatch> {
    let roles: Vec<Listed> = listed(catalog).into_iter().filter(|r| r.login).collect();
    let n = roles.len();
    let timestamp = DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into()));
    let superusers = || {
        Arc::new(BooleanArray::from_iter(
            roles.iter().map(|r| Some(r.superuser)),
        )) as ArrayRef
    };
    let schema = Arc::new(Schema::new(vec![
        Field::new("usename", DataType::Utf8, false),
        Field::new("usesysid", DataType::Int32, false),
        Field::new("usecreatedb", DataType::Boolean, false),
        Field::new("usesuper", DataType::Boolean, false),
        Field::new("userepl", DataType::Boolean, false),
        Field::new("usebypassrls", DataType::Boolean, false),
        Field::new("passwd", DataType::Utf8, true),
        Field::new("valuntil", timestamp.clone(), true),
        text_array("useconfig"),
    ]));
    let columns: Vec<ArrayRef> = vec![
        Arc::new(StringArray::from_iter_values(
            roles.iter().map(|r| r.name.as_str()),
        )),
        Arc::new(Int32Array::from_iter_values(roles.iter().map(|r| r.oid))),
        superusers(),
        superusers(),
        superusers(),
        superusers(),
        Arc::new(StringArray::from(vec![HIDDEN_PASSWORD; n])),
        new_null_array(&timestamp, n),
        new_null_array(schema.field(8).data_type(), n),
    ];
    Ok(RecordBatch::try_new(schema, columns)?)
}

fn auth_members() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("oid", DataType::Int32, false),
        Field::new("roleid", DataType::Int32, false),
        Field::new("member", DataType::Int32, false),
        Field::new("grantor", DataType::Int32, false),
        Field::new("admin_option", DataType::Boolean, false),
    ]))
}

fn user_mappings() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("umid", DataType::Int32, false),
        Field::new("srvid", DataType::Int32, false),
        Field::new("srvname", DataType::Utf8, false),
        Field::new("umuser", DataType::Int32, false),
        Field::new("usename", DataType::Utf8, false),
        text_array("umoptions"),
    ]))
}

fn db_role_setting() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("setdatabase", DataType::Int32, false),
        Field::new("setrole", DataType::Int32, false),
        text_array("setconfig"),
    ]))
}

fn default_acl() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("oid", DataType::Int32, false),
        Field::new("defaclrole", DataType::Int32, false),
        Field::new("defaclnamespace", DataType::Int32, false),
        Field::new("defaclobjtype", DataType::Utf8, false),
        text_array("defaclacl"),
    ]))
}
