//! The engine: everything a node runs, shared by all connections.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use datafusion::catalog::{CatalogProvider, MemoryCatalogProvider};
use datafusion::execution::SessionState;
use datafusion::prelude::{SessionConfig, SessionContext};

use super::Clock;
use crate::catalog::Catalog;
use crate::config::Config;
use crate::dataflow::errors::Failures;
use crate::dataflow::late;
use crate::dataflow::node::Node;
use crate::dataflow::runtime::{Runtime, Settings};
use crate::error::{Error, Result};
use crate::log::writer::Writer;
use crate::sql::functions::{ProcTime, Version};
use crate::sql::provider::WeirSchema;
use crate::state::Store;
use crate::state::disk::DiskGuard;
use datafusion::logical_expr::ScalarUDF;

/// The database name clients see (`current_database()`, `\l`).
pub const DATABASE: &str = "weir";

pub struct Engine {
    pub(super) config: Config,
    pub(super) store: Arc<Store>,
    pub(super) catalog: Arc<Catalog>,
    pub(super) writer: Writer,
    ctx: SessionContext,
    pub(super) clock: Arc<Clock>,
    pub(super) runtime: Runtime,
    pub(super) metrics: Metrics,
    /// Where COPY change streams run.
    pub(super) streams: super::streams::Streams,
    /// The tasks of sources and sinks.
    pub(super) connectors: crate::connector::Connectors,
    /// The parts sources, sinks and change streams use.
    pub(super) node: Node,
    /// The runtime the node started on: work that outlives a statement runs
    /// there, not on the thread of the connection that started it.
    pub(super) background: tokio::runtime::Handle,
    /// The cluster this node joined, once it has.
    pub(super) cluster: std::sync::OnceLock<Arc<super::cluster::Replication>>,
    /// Where reads of partitioned views find the other nodes' partitions.
    pub(super) peers: crate::sql::provider::PeersSlot,
    /// Where split sources learn this node's share of the cluster.
    pub(super) share: tokio::sync::watch::Sender<Option<Arc<crate::dataflow::node::Share>>>,
    /// Held while partitioned views are created or rebuilt for other
    /// partitions, so that the two do not meet halfway.
    pub(super) partitioning: tokio::sync::Mutex<()>,
    /// Partitioned views this node is building again for new partitions:
    /// until they have read their inputs, they do not answer for them.
    pub(super) building: std::sync::Mutex<std::collections::HashSet<u64>>,
    /// How many times each partitioned view began to be built on this node.
    pub(super) builds: std::sync::Mutex<std::collections::HashMap<u64, u64>>,
}

/// Counters exported on `/metrics`.
#[derive(Debug, Default)]
pub struct Metrics {
    pub statements: AtomicU64,
    pub statement_errors: AtomicU64,
    pub rows_written: AtomicU64,
    pub connections: AtomicU64,
}

impl Metrics {
    pub fn add(counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Ordering::Relaxed);
    }
}

impl Engine {
    /// The node's settings.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// The counters `/metrics` exports.
    pub fn metrics(&self) -> &Metrics {
        &self.metrics
    }

    /// A role's login and password verifier, for the server's handshake.
    pub fn role(&self, name: &str) -> Option<crate::catalog::RoleDef> {
        self.catalog.role(name)
    }

    /// Waits until every view has read every write made before the call.
    pub async fn flush(&self) -> Result<()> {
        self.runtime.flush().await
    }

    /// Compacts the whole store (`VACUUM` by a superuser).
    pub fn compact(&self) {
        self.store.compact()
    }

    /// A consistent copy of the whole store in `to` (`BACKUP TO`).
    pub fn backup(&self, to: &std::path::Path) -> Result<crate::state::backup::Manifest> {
        self.store.backup(to)
    }

    /// Compacts one relation's rows, state and changelog (`VACUUM name`).
    pub fn compact_relation(&self, table: &crate::catalog::Table) {
        let topic = table.def.log_topic();
        self.store
            .compact_relation(table.def.id, topic.family, topic.id)
    }

    /// The operator state entries of each materialized view, by name.
    pub fn view_state_entries(&self) -> Vec<(String, usize)> {
        self.catalog
            .objects()
            .into_iter()
            .filter_map(|object| match object {
                // A view's operator state lives under its id.
                crate::catalog::Object::MaterializedView(view) => Some((
                    view.def.table.name.clone(),
                    self.store.state_entries(&view.def.table.id.to_be_bytes()),
                )),
                _ => None,
            })
            .collect()
    }

    /// Per partitioned view, how many times this node started building
    /// its part since it started: at creation, and each time the cluster
    /// gave it partitions its part did not hold.
    pub fn view_builds(&self) -> Vec<(String, u64)> {
        let builds = self.builds.lock().unwrap_or_else(|p| p.into_inner());
        let mut out: Vec<(String, u64)> = builds
            .iter()
            .filter_map(|(id, n)| Some((self.catalog.by_id(*id)?.table().def.name.clone(), *n)))
            .collect();
        out.sort();
        out
    }

    /// Where COPY change streams run.
    pub fn streams(&self) -> &super::streams::Streams {
        &self.streams
    }

    /// The cluster this node is a member of, if any.
    pub fn cluster(&self) -> Option<&Arc<super::cluster::Replication>> {
        self.cluster.get()
    }

    /// Joins the configured cluster and catches up with its catalog.
    pub async fn join_cluster(self: &Arc<Self>) -> Result<()> {
        super::cluster::join(self).await
    }

    /// This node's partitions of a partitioned view, for another node.
    pub fn rows_for_peer(&self, view: &str, query: &str) -> Result<Vec<u8>> {
        super::partitioned::rows_for_peer(self, view, query)
    }

    /// Frames of this node's part of a partitioned view's changes, for a
    /// peer's merged change stream (`/internal/changes/ID`).
    pub fn changes_for_peer(
        self: &Arc<Self>,
        view: &str,
        query: &str,
    ) -> Result<tokio::sync::mpsc::Receiver<(usize, super::merged::Frame)>> {
        super::merged::changes_for_peer(self, view, query)
    }

    /// Leaves the cluster's group, so that the others take over at once.
    pub fn leave_cluster(&self) {
        if let Some(replication) = self.cluster() {
            replication.cluster.leave();
        }
    }

    /// Objects in the catalog.
    pub fn object_count(&self) -> usize {
        self.catalog.objects().len()
    }

    /// RocksDB entries read by queries since the node started.
    pub fn entries_read(&self) -> u64 {
        crate::state::ENTRIES_READ.load(Ordering::Relaxed)
    }

    /// The records in a table's log: for a system table of late rows or
    /// failed rows, how many there have been.
    pub fn records_in(&self, table: &str) -> u64 {
        self.catalog
            .table(table)
            .map_or(0, |t| self.log_records(&t))
    }

    /// The records a table's log holds, over all its partitions.
    pub(super) fn log_records(&self, table: &crate::catalog::Table) -> u64 {
        (0..table.def.partitions.max(1))
            .map(|p| {
                crate::log::writer::log_end(self.store.db(), table.def.log_topic(), p).unwrap_or(0)
            })
            .sum()
    }

    /// Opens the node's state; call it on the runtime that is to run
    /// background work.
    pub fn open(config: Config) -> Result<Arc<Engine>> {
        let store = Arc::new(Store::open(&config.db_path())?);
        let catalog = Arc::new(Catalog::load(&store)?);
        if let crate::config::Auth::Password(password) = &config.auth {
            catalog.bootstrap_superuser(password.expose())?;
        }
        let disk = DiskGuard::new(config.data_dir.clone(), config.min_free_disk);
        let clock = Arc::new(Clock::new(config.manual_clock));
        let now_clock = clock.clone();
        let now: crate::log::writer::Now = Arc::new(move || now_clock.now().timestamp_micros());
        let writer = Writer::start(&store, Some(disk.clone()), config.fsync, now.clone())?;
        let failures = Failures::default();
        let (ctx, peers) = session_context(&catalog, &store, &writer, &clock, &failures)?;
        let late_events = catalog.ensure_table(late::LATE_EVENTS, late::definition)?;
        let view_errors = catalog.ensure_table(
            crate::catalog::VIEW_ERRORS,
            crate::dataflow::errors::definition,
        )?;
        catalog.ensure_table(
            crate::catalog::SOURCE_ERRORS,
            crate::connector::errors::definition,
        )?;
        let settings = Settings {
            barrier_interval: config.barrier_interval,
            idle_timeout: config.idle_timeout,
            now,
            late_events: Some(late_events),
            view_errors: Some(view_errors),
            failures,
            disk: Some(disk),
            unapplied: store.unapplied().clone(),
        };
        let runtime = Runtime::start(store.db().clone(), settings)?;
        let streams = super::streams::Streams::start()?;
        let (share, shared) = tokio::sync::watch::channel(None);
        let node = Node {
            share: shared,
            store: store.clone(),
            catalog: catalog.clone(),
            writer: writer.clone(),
            clock: clock.clone(),
            epochs: runtime.committed(),
            idle_timeout: config.idle_timeout,
            background: tokio::runtime::Handle::current(),
        };
        Ok(Arc::new(Engine {
            node,
            clock,
            runtime,
            config,
            store,
            catalog,
            writer,
            ctx,
            metrics: Metrics::default(),
            streams,
            connectors: Default::default(),
            background: tokio::runtime::Handle::current(),
            cluster: std::sync::OnceLock::new(),
            peers,
            share,
            partitioning: tokio::sync::Mutex::new(()),
            building: Default::default(),
            builds: Default::default(),
        }))
    }

    /// Start the dataflows of every materialized view, in creation order,
    /// then every source and sink.
    pub async fn start_views(self: &Arc<Self>) -> Result<()> {
        let mut views: Vec<_> = self
            .catalog
            .objects()
            .into_iter()
            .filter_map(|o| match o {
                crate::catalog::Object::MaterializedView(v) => Some(v),
                crate::catalog::Object::Table(_) | crate::catalog::Object::View(_) => None,
            })
            .collect();
        views.sort_by_key(|v| v.table.def.id);
        self.retain_table_logs()?;
        for view in views {
            crate::session::handlers::create_mv::start(self, &view, false).await?;
        }
        self.start_connectors();
        Ok(())
    }

    fn retain_table_logs(&self) -> Result<()> {
        for object in self.catalog.objects() {
            if let crate::catalog::Object::Table(table) = object {
                let subscribed = self
                    .catalog
                    .subscriptions()
                    .into_iter()
                    .filter(|s| s.from == table.def.id)
                    .map(|s| s.retention)
                    .max()
                    .unwrap_or(0);
                crate::session::handlers::ddl::retain_log(self, &table.def, subscribed)?;
            }
        }
        Ok(())
    }

    fn start_connectors(self: &Arc<Self>) {
        for object in self.catalog.objects() {
            if let crate::catalog::Object::Table(table) = object
                && table.def.connector.is_some()
            {
                self.connectors
                    .start_source(&self.node, table, self.config.cluster.is_some());
            }
        }
        for sink in self.catalog.sinks() {
            if sink.runs_on(&self.config.node_name) {
                self.connectors.start_sink(&self.node, sink, None);
            }
        }
    }

    /// A DataFusion state for one statement; `now()` is the engine clock's time.
    /// Make a SQL function callable from now on.
    pub fn register_function(&self, udf: datafusion::logical_expr::ScalarUDF) {
        self.ctx.register_udf(udf);
    }

    pub fn deregister_function(&self, name: &str) {
        self.ctx.deregister_udf(name);
    }

    pub fn state(&self) -> SessionState {
        let mut state = self.ctx.state();
        if self.clock.is_manual() {
            state.execution_props_mut().query_execution_start_time = Some(self.clock.now());
        }
        state
    }
}

fn session_context(
    catalog: &Arc<Catalog>,
    store: &Arc<Store>,
    writer: &Writer,
    clock: &Arc<Clock>,
    failures: &Failures,
) -> Result<(SessionContext, crate::sql::provider::PeersSlot)> {
    let mut config = SessionConfig::new()
        .with_default_catalog_and_schema(DATABASE, "public")
        .with_create_default_catalog_and_schema(false)
        // weir's own information_schema is PostgreSQL's (sql::pg_catalog).
        .with_information_schema(false)
        .with_target_partitions(2);
    let options = config.options_mut();
    options.sql_parser.map_string_types_to_utf8view = false;
    options.sql_parser.dialect = datafusion::config::Dialect::PostgreSQL;
    // `0.908` is a numeric in PostgreSQL, not a double: `0.908 * price`
    // prints `1761.520`, exactly.
    options.sql_parser.parse_float_as_decimal = true;
    // TIMESTAMPTZ and now() carry a zone, so they print with their offset.
    options.execution.time_zone = Some("+00:00".into());
    let mut ctx = SessionContext::new_with_config(config);
    let databases = MemoryCatalogProvider::new();
    let schema = Arc::new(WeirSchema::new(
        catalog.clone(),
        store.clone(),
        writer.clone(),
        failures.clone(),
    ));
    schema.plan_views_with(ctx.state_weak_ref());
    let peers = schema.peers();
    databases
        .register_schema("public", schema)
        .map_err(Error::from)?;
    ctx.register_catalog(DATABASE, Arc::new(databases));
    let clock = clock.clone();
    let proctime = ProcTime::new(Arc::new(move || clock.now().timestamp_micros()));
    ctx.register_udf(ScalarUDF::new_from_impl(proctime));
    crate::sql::rules::register(&ctx);
    datafusion::execution::FunctionRegistry::register_expr_planner(
        &mut ctx,
        Arc::new(crate::sql::interval_arith::IntervalArithmetic),
    )?;
    for name in crate::sql::window::FUNCTIONS {
        let function = crate::sql::window::WindowFunction::new(
            name,
            catalog.clone(),
            store.clone(),
            writer.clone(),
        );
        ctx.register_udtf(name, Arc::new(function));
    }
    let lookup =
        crate::sql::lookup::LookupFunction::new(catalog.clone(), store.clone(), writer.clone());
    ctx.register_udtf(crate::sql::lookup::FUNCTION, Arc::new(lookup));
    let gap_fill =
        crate::sql::gap_fill::GapFillFunction::new(catalog.clone(), store.clone(), writer.clone());
    ctx.register_udtf(crate::sql::gap_fill::FUNCTION, Arc::new(gap_fill));
    let changelog = crate::sql::changelog::ChangelogFunction::new(catalog.clone());
    ctx.register_udtf(crate::sql::changelog::FUNCTION, Arc::new(changelog));
    for function in crate::sql::gap_fill::argument_functions() {
        ctx.register_udf(function);
    }
    crate::sql::pg_catalog::setup(&ctx, DATABASE, catalog)?;
    ctx.register_udf(ScalarUDF::new_from_impl(Version::default()));
    for function in crate::sql::make_time::functions() {
        ctx.register_udf(function);
    }
    // Before any view is planned again: their queries may call them.
    for def in catalog.functions() {
        ctx.register_udf(crate::sql::sql_function::udf(&ctx.state(), &def)?);
    }
    // DataFusion's functions of these names go with their aliases, which a
    // rebuilt state would otherwise register again over ours.
    let options = ctx.copied_config();
    for function in crate::sql::template::udf::functions(options.options()) {
        ctx.deregister_udf(function.name());
        ctx.register_udf(function);
    }
    ctx.deregister_udaf("percentile_cont");
    ctx.register_udaf(crate::sql::percentile::percentile_cont());
    Ok((ctx, peers))
}
