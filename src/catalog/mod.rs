//! Names: every object weir knows, its definition, and who depends on whom.
//!
//! Definitions are persisted as JSON in the `catalog` column family, written
//! synchronously before a DDL statement returns, and loaded at startup.

mod acl;
mod comment;
mod connector;
mod function;
pub mod role;
mod table;

use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};

use rocksdb::{DB, WriteBatch, WriteOptions};
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::state::{CF_CATALOG, CF_ROWS, CF_STATE, Store, cf, keys};

pub use acl::{Acl, PUBLIC, Privilege};
pub use comment::CommentKey;
pub use connector::{
    CONNECTORS, ConnectorDef, ConnectorKind, Encoding, Format, Include, Metadata, REDACTED,
    SinkDef, is_secret, redacted,
};
pub use function::FunctionDef;
pub use role::{BOOTSTRAP_ROLE, RoleDef, Verifier};
pub use table::{
    ColumnDef, ConflictAction, ConflictDef, Storage, Table, TableDef, WatermarkDef, micros,
    nullable, watermark_expr,
};

/// The system table of late rows (see `dataflow::late`).
pub const LATE_EVENTS: &str = "late_events";

/// The system table of rows a view's expressions failed on (see `dataflow::errors`).
pub const VIEW_ERRORS: &str = "view_errors";

/// The system table of messages a source could not read (see `connector`).
pub const SOURCE_ERRORS: &str = "source_errors";

/// Tables weir keeps for itself: queryable, but left out of listings and
/// closed to writes and DROP.
pub fn is_system(name: &str) -> bool {
    name == LATE_EVENTS || name == SOURCE_ERRORS || name == VIEW_ERRORS || is_constant_table(name)
}

const CONSTANT_PREFIX: &str = "_weir_constant_";

/// The table that keeps a view's constant rows (see `sql::constants`), by its id.
pub fn constant_table_name(id: u64) -> String {
    format!("{CONSTANT_PREFIX}{id}")
}

/// Whether `name` is a table that keeps a view's constant rows; it goes
/// with its view.
pub fn is_constant_table(name: &str) -> bool {
    name.starts_with(CONSTANT_PREFIX)
}

/// A persisted catalog object.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum ObjectDef {
    Table(TableDef),
    MaterializedView(ViewDef),
    View(LogicalViewDef),
}

/// A view (`CREATE VIEW`): a named query, planned again wherever it is used.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct LogicalViewDef {
    /// Name and columns (as the query yields them); nothing is stored.
    pub table: TableDef,
    pub query: String,
    /// Ids of the tables and views the query reads.
    pub depends_on: Vec<u64>,
}

/// A materialized view: its query and the table-like contents it maintains.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ViewDef {
    /// Name, columns, key and storage of the view's contents.
    pub table: TableDef,
    /// The view's SELECT, planned again at every start.
    pub query: String,
    /// Ids of the tables and views the query reads.
    pub depends_on: Vec<u64>,
    /// When the view's results change.
    #[serde(default)]
    pub emit: Emit,
    /// How long its changes stay readable by change streams, in
    /// microseconds; older ones are compacted into one snapshot.
    #[serde(default = "default_retention")]
    pub retention: i64,
    /// It never retracts a row it emitted (so a plain sink can carry it).
    #[serde(default)]
    pub append_only: bool,
    /// What it does when an expression fails on a row.
    #[serde(default)]
    pub on_error: OnError,
    /// `CREATE INDEX`: the view is an index of the relation it reads.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub index: Option<IndexDef>,
    /// Its graph builds a subplan that occurs twice once
    /// ([`crate::sql::plan::Planner::sharing`]); false for views created
    /// before that, whose stored state is numbered by their older graph.
    #[serde(default)]
    pub shared_subplans: bool,
    /// The planner revision ([`crate::sql::plan::PLAN_REVISION`]) that
    /// built its graph: its stored state is laid out by that graph, so a
    /// view keeps the plans of the revision it was created with. 0 for
    /// views created before revisions were recorded.
    #[serde(default)]
    pub plan_revision: u32,
    /// `WITH (partitioned = true)`: in a cluster, each node keeps the
    /// groups of the partitions it owns ([`crate::sql::partition`]).
    #[serde(default)]
    pub partitioned: bool,
}

/// An index (`CREATE INDEX i ON t (a, b) [INCLUDE (c)]`): a view of `t`'s
/// rows kept by `(a, b, t's key)`, so that rows with given `a` are one
/// RocksDB range. Its columns are the key columns first, then the rest it
/// covers in `t`'s order, each named as in `t`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct IndexDef {
    /// The relation indexed.
    pub on: u64,
    /// How many of the index's first columns are its key.
    pub key_columns: usize,
    /// `INCLUDE (...)` was given: the index covers only the columns it names.
    pub partial_cover: bool,
}

/// What a view does when an expression fails on a row.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OnError {
    /// The expression yields NULL for that row; the error is recorded.
    #[default]
    Null,
    /// The view stops; reads of it return the error.
    Fail,
}

impl OnError {
    /// `WITH (on_error = '...')`.
    pub fn parse(text: &str) -> Result<OnError> {
        match text.to_ascii_lowercase().as_str() {
            "null" => Ok(OnError::Null),
            "fail" => Ok(OnError::Fail),
            other => Err(Error::InvalidParameter(format!(
                "invalid value for on_error: \"{other}\"; use 'null' (the failing expression \
                 yields NULL and the error goes to view_errors) or 'fail' (the view stops)"
            ))),
        }
    }
}

/// How long a log keeps changes as written unless told otherwise: one
/// hour, in microseconds.
pub const DEFAULT_RETENTION: i64 = 3_600_000_000;

fn default_retention() -> i64 {
    DEFAULT_RETENTION
}

/// A view's emit policy: when its results change.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "policy")]
pub enum Emit {
    /// Every epoch, updates as retraction and insertion.
    #[default]
    Changes,
    /// One final row per window, once the watermark passes its end.
    OnWindowClose,
    /// At most once per interval (microseconds), partial results included.
    Every { micros: i64 },
}

impl Emit {
    /// The clause as SHOW CREATE and DESCRIBE print it.
    pub fn clause(&self) -> String {
        match self {
            Emit::Changes => "EMIT CHANGES".into(),
            Emit::OnWindowClose => "EMIT ON WINDOW CLOSE".into(),
            Emit::Every { micros } if micros % 1_000_000 == 0 => {
                format!("EMIT EVERY INTERVAL '{}' SECOND", micros / 1_000_000)
            }
            Emit::Every { micros } => {
                format!("EMIT EVERY INTERVAL '{}' SECOND", *micros as f64 / 1e6)
            }
        }
    }
}

impl ObjectDef {
    pub fn id(&self) -> u64 {
        self.table_def().id
    }

    pub fn name(&self) -> &str {
        &self.table_def().name
    }

    pub fn table_def_mut(&mut self) -> &mut TableDef {
        match self {
            ObjectDef::Table(t) => t,
            ObjectDef::MaterializedView(v) => &mut v.table,
            ObjectDef::View(v) => &mut v.table,
        }
    }

    fn table_def(&self) -> &TableDef {
        match self {
            ObjectDef::Table(t) => t,
            ObjectDef::MaterializedView(v) => &v.table,
            ObjectDef::View(v) => &v.table,
        }
    }

    /// Ids of the objects this one reads from.
    pub fn depends_on(&self) -> Vec<u64> {
        match self {
            ObjectDef::Table(_) => Vec::new(),
            ObjectDef::MaterializedView(v) => v.depends_on.clone(),
            ObjectDef::View(v) => v.depends_on.clone(),
        }
    }
}

/// A named, persisted change stream of a table or view (RisingWave's
/// `CREATE SUBSCRIPTION`): subscription cursors read the relation's
/// changelog through it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SubscriptionDef {
    pub name: String,
    /// The table or view it reads.
    pub from: u64,
    /// How long the relation's changes stay readable, in microseconds.
    pub retention: i64,
}

/// The kinds a user names in DDL and SHOW.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ObjectKind {
    Table,
    Source,
    MaterializedView,
    View,
    Sink,
    Subscription,
    Index,
}

impl ObjectKind {
    pub fn noun(self) -> &'static str {
        match self {
            ObjectKind::Table => "table",
            ObjectKind::Source => "source",
            ObjectKind::MaterializedView => "materialized view",
            ObjectKind::View => "view",
            ObjectKind::Sink => "sink",
            ObjectKind::Subscription => "subscription",
            ObjectKind::Index => "index",
        }
    }

    /// The noun with its article: "a table", "an index".
    pub fn a(self) -> String {
        match self {
            ObjectKind::Index => "an index".into(),
            other => format!("a {}", other.noun()),
        }
    }
}

/// A live object: its definition plus what is built from it.
#[derive(Debug, Clone)]
pub enum Object {
    Table(Arc<Table>),
    MaterializedView(Arc<View>),
    /// A logical view: its table holds the columns, never rows.
    View(Arc<LogicalView>),
}

/// A logical view's definition and its columns as a table.
#[derive(Debug)]
pub struct LogicalView {
    pub def: LogicalViewDef,
    pub table: Arc<Table>,
}

/// A materialized view's definition and its contents as a table.
#[derive(Debug)]
pub struct View {
    pub def: ViewDef,
    pub table: Arc<Table>,
}

impl View {
    /// An index's key columns, then the other columns it holds, by name.
    pub fn index_columns(&self) -> Option<(Vec<&str>, Vec<&str>)> {
        let index = self.def.index.as_ref()?;
        let mut key = self.table.def.column_names();
        let rest = key.split_off(index.key_columns);
        Some((key, rest))
    }
}

impl Object {
    pub fn def(&self) -> ObjectDef {
        match self {
            Object::Table(t) => ObjectDef::Table(t.def.clone()),
            Object::MaterializedView(v) => ObjectDef::MaterializedView(v.def.clone()),
            Object::View(v) => ObjectDef::View(v.def.clone()),
        }
    }

    pub fn kind(&self) -> ObjectKind {
        match self {
            Object::Table(t) if t.def.is_source() => ObjectKind::Source,
            Object::Table(_) => ObjectKind::Table,
            Object::MaterializedView(v) if v.def.index.is_some() => ObjectKind::Index,
            Object::MaterializedView(_) => ObjectKind::MaterializedView,
            Object::View(_) => ObjectKind::View,
        }
    }

    pub fn id(&self) -> u64 {
        self.table().def.id
    }

    /// The stored rows: a table's, or a view's contents (a logical view's
    /// columns, with no rows).
    pub fn table(&self) -> &Arc<Table> {
        match self {
            Object::Table(t) => t,
            Object::MaterializedView(v) => &v.table,
            Object::View(v) => &v.table,
        }
    }
}

/// The catalog of one node.
pub struct Catalog {
    db: Arc<DB>,
    unapplied: Arc<crate::state::commitlog::Unapplied>,
    inner: RwLock<Inner>,
}

impl std::fmt::Debug for Catalog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Catalog")
            .field("objects", &self.read().by_name.len())
            .finish()
    }
}

#[derive(Default)]
struct Inner {
    by_name: BTreeMap<String, Object>,
    subscriptions: BTreeMap<String, SubscriptionDef>,
    comments: BTreeMap<CommentKey, String>,
    sinks: BTreeMap<String, SinkDef>,
    functions: BTreeMap<String, FunctionDef>,
    roles: BTreeMap<String, RoleDef>,
    /// Owners and grants, by relation id.
    acls: BTreeMap<u64, Acl>,
    /// Who may use and create in schema `public`.
    schema_acl: Acl,
    next_id: u64,
}

/// Schema `public` as PostgreSQL 15 makes it: every role may use it, only
/// its owner (the bootstrap superuser) and those granted CREATE create in it.
fn default_schema_acl() -> Acl {
    let mut acl = Acl::default();
    acl.grant(PUBLIC, &[Privilege::Usage]);
    acl
}

/// Where schema `public`'s privileges are kept, once granted or revoked.
const SCHEMA_ACL_KEY: &[u8] = b"schema\x00public";

fn acl_key(id: u64) -> Vec<u8> {
    [ACL_PREFIX, &id.to_be_bytes()].concat()
}

const ACL_PREFIX: &[u8] = b"acl\x00";

fn role_key(name: &str) -> Vec<u8> {
    [ROLE_PREFIX, name.as_bytes()].concat()
}

const ROLE_PREFIX: &[u8] = b"role\x00";

/// Where a subscription's definition is kept in the catalog family.
fn subscription_key(name: &str) -> Vec<u8> {
    [SUBSCRIPTION_PREFIX, name.as_bytes()].concat()
}

const SUBSCRIPTION_PREFIX: &[u8] = b"sub\x00";

/// Where a sink's definition is kept in the catalog family.
fn sink_key(name: &str) -> Vec<u8> {
    [SINK_PREFIX, name.as_bytes()].concat()
}

const SINK_PREFIX: &[u8] = b"sink\x00";

/// Where a SQL function's definition is kept in the catalog family.
fn function_key(name: &str) -> Vec<u8> {
    [FUNCTION_PREFIX, name.as_bytes()].concat()
}

const FUNCTION_PREFIX: &[u8] = b"function\x00";

impl Catalog {
    /// Load every persisted object.
    pub fn load(store: &Store) -> Result<Catalog> {
        let db = store.db().clone();
        let mut inner = Inner {
            next_id: 1,
            ..Inner::default()
        };
        if let Some(bytes) = db.get_cf(cf(&db, CF_CATALOG), keys::NEXT_ID_KEY)? {
            let raw: [u8; 8] = bytes
                .as_slice()
                .try_into()
                .map_err(|_| Error::Internal("malformed id sequence".into()))?;
            inner.next_id = u64::from_be_bytes(raw);
        }
        let mut defs = Vec::new();
        for entry in db.prefix_iterator_cf(cf(&db, CF_CATALOG), keys::OBJECT_PREFIX) {
            let (key, value) = entry?;
            if !key.starts_with(keys::OBJECT_PREFIX) || key.as_ref() == keys::NEXT_ID_KEY {
                continue;
            }
            let def: ObjectDef = serde_json::from_slice(&value)
                .map_err(|e| Error::Internal(format!("unreadable catalog entry: {e}")))?;
            defs.push(def);
        }
        defs.sort_by_key(ObjectDef::id);
        for def in defs {
            let object = build(def)?;
            if object.table().def.is_view() {
                crate::log::embedded::move_changelog(&db, object.id())?;
            }
            inner.by_name.insert(object_name(&object), object);
        }
        for entry in db.prefix_iterator_cf(cf(&db, CF_CATALOG), SUBSCRIPTION_PREFIX) {
            let (key, value) = entry?;
            if !key.starts_with(SUBSCRIPTION_PREFIX) {
                break;
            }
            let def: SubscriptionDef = serde_json::from_slice(&value)
                .map_err(|e| Error::Internal(format!("unreadable subscription entry: {e}")))?;
            inner.subscriptions.insert(def.name.clone(), def);
        }
        for entry in db.prefix_iterator_cf(cf(&db, CF_CATALOG), SINK_PREFIX) {
            let (key, value) = entry?;
            if !key.starts_with(SINK_PREFIX) {
                break;
            }
            let def: SinkDef = serde_json::from_slice(&value)
                .map_err(|e| Error::Internal(format!("unreadable sink entry: {e}")))?;
            inner.sinks.insert(def.name.clone(), def);
        }
        for entry in db.prefix_iterator_cf(cf(&db, CF_CATALOG), FUNCTION_PREFIX) {
            let (key, value) = entry?;
            if !key.starts_with(FUNCTION_PREFIX) {
                break;
            }
            let def: FunctionDef = serde_json::from_slice(&value)
                .map_err(|e| Error::Internal(format!("unreadable function entry: {e}")))?;
            inner.functions.insert(def.name.clone(), def);
        }
        for entry in db.prefix_iterator_cf(cf(&db, CF_CATALOG), ROLE_PREFIX) {
            let (key, value) = entry?;
            if !key.starts_with(ROLE_PREFIX) {
                break;
            }
            let def: RoleDef = serde_json::from_slice(&value)
                .map_err(|e| Error::Internal(format!("unreadable role entry: {e}")))?;
            inner.roles.insert(def.name.clone(), def);
        }
        for entry in db.prefix_iterator_cf(cf(&db, CF_CATALOG), ACL_PREFIX) {
            let (key, value) = entry?;
            let Some(id) = key.strip_prefix(ACL_PREFIX) else {
                break;
            };
            let id: [u8; 8] = id
                .try_into()
                .map_err(|_| Error::Internal("malformed privileges key".into()))?;
            let acl: Acl = serde_json::from_slice(&value)
                .map_err(|e| Error::Internal(format!("unreadable privileges entry: {e}")))?;
            inner.acls.insert(u64::from_be_bytes(id), acl);
        }
        inner.schema_acl = match db.get_cf(cf(&db, CF_CATALOG), SCHEMA_ACL_KEY)? {
            Some(value) => serde_json::from_slice(&value)
                .map_err(|e| Error::Internal(format!("unreadable schema privileges: {e}")))?,
            None => default_schema_acl(),
        };
        inner.comments = comment::load(&db)?;
        Ok(Catalog {
            db,
            unapplied: store.unapplied().clone(),
            inner: RwLock::new(inner),
        })
    }

    pub fn get(&self, name: &str) -> Option<Object> {
        self.read().by_name.get(name).cloned()
    }

    /// A table (not a view) by name.
    pub fn table(&self, name: &str) -> Option<Arc<Table>> {
        match self.get(name)? {
            Object::Table(t) => Some(t),
            Object::MaterializedView(_) | Object::View(_) => None,
        }
    }

    /// Anything stored that can be read like a table: tables and
    /// materialized views (not logical views, which store nothing).
    pub fn relation(&self, name: &str) -> Option<Arc<Table>> {
        match self.get(name)? {
            Object::View(_) => None,
            Object::MaterializedView(v) if v.def.index.is_some() => None,
            stored => Some(stored.table().clone()),
        }
    }

    /// The indexes of the relation with this id, in name order.
    pub fn indexes_on(&self, id: u64) -> Vec<Arc<View>> {
        self.read()
            .by_name
            .values()
            .filter_map(|o| match o {
                Object::MaterializedView(v) if v.def.index.as_ref().is_some_and(|i| i.on == id) => {
                    Some(v.clone())
                }
                _ => None,
            })
            .collect()
    }

    pub fn view(&self, name: &str) -> Option<Arc<View>> {
        match self.get(name)? {
            Object::MaterializedView(v) => Some(v),
            Object::Table(_) | Object::View(_) => None,
        }
    }

    /// A logical view (`CREATE VIEW`) by name.
    pub fn logical_view(&self, name: &str) -> Option<Arc<LogicalView>> {
        match self.get(name)? {
            Object::View(v) => Some(v),
            Object::Table(_) | Object::MaterializedView(_) => None,
        }
    }

    /// The object with this id.
    pub fn by_id(&self, id: u64) -> Option<Object> {
        self.read().by_name.values().find(|o| o.id() == id).cloned()
    }

    /// Every object, in name order.
    pub fn objects(&self) -> Vec<Object> {
        self.read().by_name.values().cloned().collect()
    }

    /// Reserve a fresh object id, persisted so that ids are never reused.
    pub fn allocate_id(&self) -> Result<u64> {
        let mut inner = self.write();
        let id = inner.next_id;
        inner.next_id += 1;
        self.db.put_cf_opt(
            cf(&self.db, CF_CATALOG),
            keys::NEXT_ID_KEY,
            inner.next_id.to_be_bytes(),
            &sync_write(),
        )?;
        Ok(id)
    }

    /// The table called `name`, created from `make` with a fresh id if missing.
    pub fn ensure_table(
        &self,
        name: &str,
        make: impl FnOnce(u64) -> TableDef,
    ) -> Result<Arc<Table>> {
        if let Some(table) = self.table(name) {
            return Ok(table);
        }
        match self.create(ObjectDef::Table(make(self.allocate_id()?)))? {
            Object::Table(table) => Ok(table),
            Object::MaterializedView(_) | Object::View(_) => {
                Err(Error::Internal("a created table is a view".into()))
            }
        }
    }

    /// Add an object; its name must be free.
    pub fn create(&self, def: ObjectDef) -> Result<Object> {
        let object = build(def.clone())?;
        let mut inner = self.write();
        if inner.by_name.contains_key(def.name()) {
            return Err(Error::DuplicateTable(def.name().to_string()));
        }
        self.put_entry(&keys::object_key(def.id()), &def, "catalog entry")?;
        inner.by_name.insert(def.name().to_string(), object.clone());
        Ok(object)
    }

    /// Put one catalog entry, synced.
    fn put_entry<T: Serialize>(&self, key: &[u8], value: &T, what: &str) -> Result<()> {
        let json = entry_json(value, what)?;
        self.db
            .put_cf_opt(cf(&self.db, CF_CATALOG), key, json, &sync_write())?;
        Ok(())
    }

    /// Store new definitions of existing objects, by id, in one write; an
    /// object whose name changed is found under its new name from then on.
    pub fn replace(&self, defs: Vec<ObjectDef>) -> Result<()> {
        let built: Vec<Object> = defs.iter().cloned().map(build).collect::<Result<_>>()?;
        let mut inner = self.write();
        for def in &defs {
            if let Some(holder) = inner.by_name.get(def.name())
                && holder.id() != def.id()
            {
                return Err(Error::DuplicateTable(def.name().to_string()));
            }
        }
        let mut batch = WriteBatch::default();
        for def in &defs {
            let json = entry_json(def, "catalog entry")?;
            batch.put_cf(cf(&self.db, CF_CATALOG), keys::object_key(def.id()), json);
        }
        self.db.write_opt(batch, &sync_write())?;
        for object in built {
            inner.by_name.retain(|_, o| o.id() != object.id());
            inner.by_name.insert(object_name(&object), object);
        }
        Ok(())
    }

    pub fn subscription(&self, name: &str) -> Option<SubscriptionDef> {
        self.read().subscriptions.get(name).cloned()
    }

    /// Every subscription, in name order.
    pub fn subscriptions(&self) -> Vec<SubscriptionDef> {
        self.read().subscriptions.values().cloned().collect()
    }

    /// Add a subscription; its name must be free among subscriptions.
    pub fn create_subscription(&self, def: SubscriptionDef) -> Result<()> {
        let mut inner = self.write();
        if inner.subscriptions.contains_key(&def.name) {
            return Err(Error::DuplicateObject(format!(
                "subscription \"{}\" already exists",
                def.name
            )));
        }
        self.put_entry(&subscription_key(&def.name), &def, "subscription")?;
        inner.subscriptions.insert(def.name.clone(), def);
        Ok(())
    }

    pub fn drop_subscription(&self, name: &str) -> Result<()> {
        let mut inner = self.write();
        self.db.delete_cf_opt(
            cf(&self.db, CF_CATALOG),
            subscription_key(name),
            &sync_write(),
        )?;
        inner.subscriptions.remove(name);
        Ok(())
    }

    pub fn role(&self, name: &str) -> Option<RoleDef> {
        self.read().roles.get(name).cloned()
    }

    pub fn roles(&self) -> Vec<RoleDef> {
        self.read().roles.values().cloned().collect()
    }

    /// The bootstrap superuser with the password the node started with:
    /// created at the first start with a password, and given the password
    /// again at a later start if it changed (by `ALTER ROLE` or in the
    /// configuration). The configuration is the way back into a node.
    pub fn bootstrap_superuser(&self, password: &str) -> Result<()> {
        let existing = self.role(BOOTSTRAP_ROLE);
        let current = existing.as_ref().is_some_and(|role| {
            role.superuser
                && role.login
                && role
                    .verifier
                    .as_deref()
                    .and_then(Verifier::parse)
                    .is_some_and(|v| v.matches(password))
        });
        if current {
            return Ok(());
        }
        let id = match existing {
            Some(role) => role.id,
            None => self.allocate_id()?,
        };
        self.replace_role(RoleDef {
            id,
            name: BOOTSTRAP_ROLE.to_string(),
            superuser: true,
            login: true,
            verifier: Some(Verifier::new(password)?.to_string()),
        })
    }

    /// A relation's owner and grants.
    pub fn acl(&self, id: u64) -> Acl {
        self.read().acls.get(&id).cloned().unwrap_or_default()
    }

    pub fn set_acl(&self, id: u64, acl: Acl) -> Result<()> {
        let mut inner = self.write();
        self.put_entry(&acl_key(id), &acl, "privileges")?;
        inner.acls.insert(id, acl);
        Ok(())
    }

    /// Who may use and create in schema `public`.
    pub fn schema_acl(&self) -> Acl {
        self.read().schema_acl.clone()
    }

    pub fn set_schema_acl(&self, acl: Acl) -> Result<()> {
        let mut inner = self.write();
        self.put_entry(SCHEMA_ACL_KEY, &acl, "privileges")?;
        inner.schema_acl = acl;
        Ok(())
    }

    /// Names of the relations `role` owns.
    pub fn owned_by(&self, role: &str) -> Vec<String> {
        let inner = self.read();
        inner
            .by_name
            .values()
            .filter(|o| inner.acls.get(&o.id()).and_then(|a| a.owner.as_deref()) == Some(role))
            .map(|o| o.table().def.name.clone())
            .collect()
    }

    /// Take back whatever `role` was granted, before the role goes.
    pub fn revoke_all_from(&self, role: &str) -> Result<()> {
        let granted: Vec<(u64, Acl)> = self
            .read()
            .acls
            .iter()
            .filter(|(_, acl)| acl.grants.contains_key(role))
            .map(|(id, acl)| (*id, acl.clone()))
            .collect();
        for (id, mut acl) in granted {
            acl.revoke(role, &Privilege::ALL);
            self.set_acl(id, acl)?;
        }
        let mut schema = self.schema_acl();
        if schema.grants.contains_key(role) {
            schema.revoke(role, &Privilege::ALL_ON_SCHEMA);
            self.set_schema_acl(schema)?;
        }
        Ok(())
    }

    /// Add a role; 42710 when one of that name exists.
    pub fn create_role(&self, def: RoleDef) -> Result<()> {
        let mut inner = self.write();
        if inner.roles.contains_key(&def.name) {
            return Err(Error::DuplicateObject(format!(
                "role \"{}\" already exists",
                def.name
            )));
        }
        self.put_role(&mut inner, def)
    }

    /// Replace a role's definition (ALTER ROLE, the bootstrap password).
    pub fn replace_role(&self, def: RoleDef) -> Result<()> {
        let mut inner = self.write();
        self.put_role(&mut inner, def)
    }

    fn put_role(&self, inner: &mut Inner, def: RoleDef) -> Result<()> {
        self.put_entry(&role_key(&def.name), &def, "role")?;
        inner.roles.insert(def.name.clone(), def);
        Ok(())
    }

    /// Remove a role; whether it existed.
    pub fn drop_role(&self, name: &str) -> Result<bool> {
        let mut inner = self.write();
        if !inner.roles.contains_key(name) {
            return Ok(false);
        }
        self.db
            .delete_cf_opt(cf(&self.db, CF_CATALOG), role_key(name), &sync_write())?;
        inner.roles.remove(name);
        Ok(true)
    }

    /// Names of the views, materialized or not, whose query `calls` says
    /// uses something.
    pub fn views_calling(&self, calls: impl Fn(&str) -> bool) -> Vec<String> {
        self.read()
            .by_name
            .values()
            .filter_map(|object| match object {
                Object::MaterializedView(v) if calls(&v.def.query) => Some(object_name(object)),
                Object::View(v) if calls(&v.def.query) => Some(object_name(object)),
                _ => None,
            })
            .collect()
    }

    pub fn function(&self, name: &str) -> Option<FunctionDef> {
        self.read().functions.get(name).cloned()
    }

    /// Every SQL function, in name order.
    pub fn functions(&self) -> Vec<FunctionDef> {
        self.read().functions.values().cloned().collect()
    }

    /// Add a SQL function; its name must be free among functions.
    pub fn create_function(&self, def: FunctionDef) -> Result<()> {
        let mut inner = self.write();
        if inner.functions.contains_key(&def.name) {
            return Err(Error::DuplicateFunction(format!(
                "function \"{}\" already exists",
                def.name
            )));
        }
        self.put_entry(&function_key(&def.name), &def, "function")?;
        inner.functions.insert(def.name.clone(), def);
        Ok(())
    }

    pub fn drop_function(&self, name: &str) -> Result<()> {
        let mut inner = self.write();
        self.db
            .delete_cf_opt(cf(&self.db, CF_CATALOG), function_key(name), &sync_write())?;
        inner.functions.remove(name);
        Ok(())
    }

    pub fn sink(&self, name: &str) -> Option<SinkDef> {
        self.read().sinks.get(name).cloned()
    }

    /// Every sink, in name order.
    pub fn sinks(&self) -> Vec<SinkDef> {
        self.read().sinks.values().cloned().collect()
    }

    /// Add a sink; its name must be free among sinks.
    pub fn create_sink(&self, def: SinkDef) -> Result<()> {
        let mut inner = self.write();
        if inner.sinks.contains_key(&def.name) {
            return Err(Error::DuplicateObject(format!(
                "sink \"{}\" already exists",
                def.name
            )));
        }
        self.put_entry(&sink_key(&def.name), &def, "sink")?;
        inner.sinks.insert(def.name.clone(), def);
        Ok(())
    }

    /// Remove a sink and its progress.
    /// Give a sink another name, and the definition that says it.
    pub fn rename_sink(&self, name: &str, to: &str, definition: String) -> Result<()> {
        let mut inner = self.write();
        if inner.sinks.contains_key(to) {
            return Err(Error::DuplicateObject(format!(
                "sink \"{to}\" already exists"
            )));
        }
        let Some(mut def) = inner.sinks.get(name).cloned() else {
            return Err(Error::UndefinedObject(format!(
                "sink \"{name}\" does not exist"
            )));
        };
        def.name = to.to_string();
        def.definition = definition;
        let json = entry_json(&def, "sink")?;
        let mut batch = WriteBatch::default();
        batch.delete_cf(cf(&self.db, CF_CATALOG), sink_key(name));
        batch.put_cf(cf(&self.db, CF_CATALOG), sink_key(to), json);
        self.db.write_opt(batch, &sync_write())?;
        inner.sinks.remove(name);
        inner.sinks.insert(to.to_string(), def);
        Ok(())
    }

    pub fn drop_sink(&self, name: &str) -> Result<()> {
        let mut inner = self.write();
        let mut batch = WriteBatch::default();
        batch.delete_cf(cf(&self.db, CF_CATALOG), sink_key(name));
        if let Some(sink) = inner.sinks.get(name) {
            let prefix = keys::table_prefix(sink.id);
            batch.delete_range_cf(cf(&self.db, CF_STATE), &prefix, &keys::prefix_end(&prefix));
        }
        self.db.write_opt(batch, &sync_write())?;
        inner.sinks.remove(name);
        Ok(())
    }

    /// Names of the sinks that read `id`.
    pub fn sinks_of(&self, id: u64) -> Vec<String> {
        self.read()
            .sinks
            .values()
            .filter(|s| s.from == id)
            .map(|s| s.name.clone())
            .collect()
    }

    /// Names of the subscriptions that read `id`.
    pub fn subscriptions_of(&self, id: u64) -> Vec<String> {
        self.read()
            .subscriptions
            .values()
            .filter(|s| s.from == id)
            .map(|s| s.name.clone())
            .collect()
    }

    /// Names of the objects that read from `id`.
    pub fn dependents(&self, id: u64) -> Vec<String> {
        self.read()
            .by_name
            .values()
            .filter(|o| o.def().depends_on().contains(&id))
            .map(object_name)
            .collect()
    }

    /// Remove a view's stored rows, changelog and state, keeping its
    /// definition, so that it can be built again from its inputs; `then`
    /// is written in the same write (the view's new marks).
    pub fn clear_data(&self, table: &Table, then: (&[u8], &[u8])) -> Result<()> {
        let mut batch = WriteBatch::default();
        self.delete_data(&mut batch, table);
        batch.put_cf(cf(&self.db, CF_STATE), then.0, then.1);
        self.db.write_opt(batch, &sync_write())?;
        Ok(())
    }

    /// Deletes a source's rows and log and the read positions its
    /// connector committed under producer ids starting with `positions`,
    /// in one write: its connector reads it again from the start.
    pub fn clear_source(&self, table: &Table, positions: &str, then: (&[u8], &[u8])) -> Result<()> {
        let mut batch = WriteBatch::default();
        self.delete_data(&mut batch, table);
        let from = keys::producer_key(positions);
        batch.delete_range_cf(cf(&self.db, CF_STATE), &from, &keys::prefix_end(&from));
        batch.put_cf(cf(&self.db, CF_STATE), then.0, then.1);
        self.db.write_opt(batch, &sync_write())?;
        Ok(())
    }

    /// Deletes what a table or view stores: its rows, its log, and (a
    /// view's) operator state and source offsets, which live under its id.
    fn delete_data(&self, batch: &mut WriteBatch, table: &Table) {
        let prefix = keys::table_prefix(table.def.id);
        let end = keys::prefix_end(&prefix);
        batch.delete_range_cf(cf(&self.db, CF_ROWS), &prefix, &end);
        let topic = table.def.log_topic();
        let log = keys::table_prefix(topic.id);
        batch.delete_range_cf(cf(&self.db, topic.family), &log, &keys::prefix_end(&log));
        batch.delete_range_cf(cf(&self.db, CF_STATE), &prefix, &end);
    }

    /// Remove objects and their stored data in one atomic write.
    pub fn drop_objects(&self, objects: &[Object]) -> Result<()> {
        let mut inner = self.write();
        // A write to a dropped table must not land after its data is gone.
        self.unapplied.settle(&self.db)?;
        let mut batch = WriteBatch::default();
        for object in objects {
            batch.delete_cf(cf(&self.db, CF_CATALOG), keys::object_key(object.id()));
            self.delete_data(&mut batch, object.table());
        }
        let ids: Vec<u64> = objects.iter().map(Object::id).collect();
        let orphans: Vec<String> = inner
            .subscriptions
            .values()
            .filter(|s| ids.contains(&s.from))
            .map(|s| s.name.clone())
            .collect();
        for name in &orphans {
            batch.delete_cf(cf(&self.db, CF_CATALOG), subscription_key(name));
        }
        let orphan_sinks: Vec<SinkDef> = inner
            .sinks
            .values()
            .filter(|s| ids.contains(&s.from))
            .cloned()
            .collect();
        for sink in &orphan_sinks {
            batch.delete_cf(cf(&self.db, CF_CATALOG), sink_key(&sink.name));
            let prefix = keys::table_prefix(sink.id);
            batch.delete_range_cf(cf(&self.db, CF_STATE), &prefix, &keys::prefix_end(&prefix));
        }
        let comments: Vec<CommentKey> = inner
            .comments
            .keys()
            .filter(|(id, _)| ids.contains(id))
            .copied()
            .collect();
        for on in &comments {
            batch.delete_cf(cf(&self.db, CF_CATALOG), comment::key(*on));
        }
        self.db.write_opt(batch, &sync_write())?;
        for object in objects {
            inner.by_name.remove(&object_name(object));
        }
        for on in comments {
            inner.comments.remove(&on);
        }
        for name in orphans {
            inner.subscriptions.remove(&name);
        }
        for sink in orphan_sinks {
            inner.sinks.remove(&sink.name);
        }
        Ok(())
    }

    /// Every comment, by what it is on.
    pub fn comments(&self) -> BTreeMap<CommentKey, String> {
        self.read().comments.clone()
    }

    /// Set (`Some`) or remove (`None`) a comment, durably.
    pub fn set_comment(&self, on: CommentKey, text: Option<String>) -> Result<()> {
        let mut inner = self.write();
        let family = cf(&self.db, CF_CATALOG);
        match text {
            Some(text) => {
                self.db
                    .put_cf_opt(family, comment::key(on), text.as_bytes(), &sync_write())?;
                inner.comments.insert(on, text);
            }
            None => {
                self.db
                    .delete_cf_opt(family, comment::key(on), &sync_write())?;
                inner.comments.remove(&on);
            }
        }
        Ok(())
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, Inner> {
        self.inner
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, Inner> {
        self.inner
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

fn object_name(object: &Object) -> String {
    object.table().def.name.clone()
}

fn build(def: ObjectDef) -> Result<Object> {
    match def {
        ObjectDef::Table(t) => Ok(Object::Table(Arc::new(Table::new(t)?))),
        ObjectDef::MaterializedView(v) => {
            let table = Arc::new(Table::new(v.table.clone())?);
            Ok(Object::MaterializedView(Arc::new(View { def: v, table })))
        }
        ObjectDef::View(v) => {
            let table = Arc::new(Table::new(v.table.clone())?);
            Ok(Object::View(Arc::new(LogicalView { def: v, table })))
        }
    }
}

/// A catalog entry as stored: JSON.
fn entry_json<T: Serialize>(value: &T, what: &str) -> Result<Vec<u8>> {
    serde_json::to_vec(value).map_err(|e| Error::Internal(format!("cannot serialise {what}: {e}")))
}

fn sync_write() -> WriteOptions {
    let mut options = WriteOptions::default();
    options.set_sync(true);
    options
}

#[cfg(test)]
mod tests {
    use datafusion::arrow::datatypes::DataType;

    use super::*;

    #[test]
    fn views_stored_before_planner_revisions_read_as_revision_zero() {
        let view = ViewDef {
            table: TableDef::system(7, "v", &[("a", DataType::Int64)]),
            query: "SELECT a FROM t".into(),
            depends_on: vec![3],
            emit: Emit::Changes,
            retention: DEFAULT_RETENTION,
            append_only: false,
            on_error: OnError::Null,
            index: None,
            shared_subplans: true,
            plan_revision: crate::sql::plan::PLAN_REVISION,
            partitioned: false,
        };
        let mut stored = serde_json::to_value(&view).expect("serializes");
        assert_eq!(stored["plan_revision"], crate::sql::plan::PLAN_REVISION);
        stored
            .as_object_mut()
            .expect("an object")
            .remove("plan_revision");
        let older: ViewDef = serde_json::from_value(stored).expect("deserializes");
        assert_eq!(older.plan_revision, 0);
    }
}
