//! weir's tables as DataFusion sees them: a schema provider over the catalog,
//! a table provider whose scans read one RocksDB snapshot per statement, and a
//! sink that turns `INSERT` into a write request.

use std::sync::Arc;

use async_trait::async_trait;
use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::catalog::{SchemaProvider, Session, TableProvider};
use datafusion::common::{Constraint, Constraints, DataFusionError};
use datafusion::datasource::TableType;
use datafusion::datasource::memory::MemorySourceConfig;
use datafusion::datasource::sink::{DataSink, DataSinkExec};
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::logical_expr::dml::InsertOp;
use datafusion::logical_expr::{Expr, TableProviderFilterPushDown};
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::streaming::{PartitionStream, StreamingTableExec};
use datafusion::physical_plan::{DisplayAs, DisplayFormatType, ExecutionPlan};
use futures::StreamExt;

use crate::catalog::{Catalog, ObjectKind, Table};
use crate::dataflow::errors::Failures;
use crate::dataflow::index_read::{IndexRead, KeyRange, Trailing};
use crate::dataflow::operators::materialize::expand_row;
use crate::error::Error;
use crate::log::embedded;
use crate::sql::keyaccess::{self, KeyAccess};
use crate::sql::labelled::Labelled;
use crate::sql::partition::{self, Owned};
use crate::sql::write;
use crate::state::{CF_ROWS, ReadView, Store, keys};

type DfResult<T> = datafusion::error::Result<T>;

/// Rows decoded per batch.
const BATCH_ROWS: usize = 8192;

/// The `public` schema: every table in the catalog.
#[derive(Debug)]
pub struct WeirSchema {
    catalog: Arc<Catalog>,
    store: Arc<Store>,
    writer: crate::log::writer::Writer,
    failures: Failures,
    /// The session state logical views are planned with, set once the
    /// context that holds this schema exists.
    planner: std::sync::OnceLock<Planner>,
    /// The cluster's other nodes, once this node joined one: partitioned
    /// views are read from them too.
    peers: PeersSlot,
}

/// Where the cluster's other nodes are set, once this node joined them.
pub type PeersSlot = Arc<std::sync::OnceLock<Arc<dyn Peers>>>;

/// Where a partitioned view's other partitions are read: the cluster's
/// other nodes.
#[async_trait]
pub trait Peers: Send + Sync + std::fmt::Debug {
    /// The partitions this node answers for, in a cluster; fails when its
    /// part of `table` does not hold them all yet.
    fn mine(&self, table: &Table) -> crate::Result<Option<Owned>>;
    /// The columns whose values pick a row's partition of `table`.
    fn key_of(&self, table: &Table) -> Vec<usize>;
    /// The rows of `table`'s partitions that the other nodes own; of
    /// partition `only` alone, from its owner, when given.
    async fn rows_elsewhere(
        &self,
        table: &Table,
        only: Option<u32>,
    ) -> crate::Result<Vec<RecordBatch>>;
}

type Planner = std::sync::Weak<parking_lot::RwLock<datafusion::execution::SessionState>>;

impl WeirSchema {
    pub fn new(
        catalog: Arc<Catalog>,
        store: Arc<Store>,
        writer: crate::log::writer::Writer,
        failures: Failures,
    ) -> Self {
        WeirSchema {
            catalog,
            store,
            writer,
            failures,
            planner: std::sync::OnceLock::new(),
            peers: Arc::default(),
        }
    }

    /// Where partitioned views' other partitions are read, once known.
    pub fn peers(&self) -> PeersSlot {
        self.peers.clone()
    }

    /// Where logical views get planned: the context this schema serves.
    pub fn plan_views_with(&self, planner: Planner) {
        let _ = self.planner.set(planner);
    }

    /// A logical view as DataFusion inlines it: its query planned now,
    /// its columns named as the catalog names them.
    async fn view_table(
        &self,
        view: &crate::catalog::LogicalView,
    ) -> DfResult<Arc<dyn TableProvider>> {
        let state = self
            .planner
            .get()
            .and_then(std::sync::Weak::upgrade)
            .map(|state| state.read().clone())
            .ok_or_else(|| {
                DataFusionError::Internal("views are planned without a session".into())
            })?;
        let plan = state.create_logical_plan(&view.def.query).await?;
        let aliased: Vec<datafusion::prelude::Expr> = plan
            .schema()
            .columns()
            .into_iter()
            .zip(&view.def.table.columns)
            .map(|(column, def)| datafusion::prelude::Expr::Column(column).alias(&def.name))
            .collect();
        let plan = datafusion::logical_expr::LogicalPlanBuilder::from(plan)
            .project(aliased)?
            .build()?;
        let definition = Some(view.def.table.definition.clone());
        Ok(Arc::new(datafusion::catalog::view::ViewTable::new(
            plan, definition,
        )))
    }
}

#[async_trait]
impl SchemaProvider for WeirSchema {
    fn table_names(&self) -> Vec<String> {
        self.catalog
            .objects()
            .iter()
            .filter(|o| o.kind() != ObjectKind::Index)
            .map(|o| o.def().name().to_string())
            .filter(|name| !crate::catalog::is_system(name))
            .collect()
    }

    async fn table(&self, name: &str) -> DfResult<Option<Arc<dyn TableProvider>>> {
        if let Some(view) = self.catalog.logical_view(name) {
            return self.view_table(&view).await.map(Some);
        }
        if self.catalog.get(name).map(|o| o.kind()) == Some(ObjectKind::Index) {
            // As in PostgreSQL: an index is read through its table.
            return Err(Error::WrongObjectType(format!("\"{name}\" is an index")).into());
        }
        Ok(self.catalog.relation(name).map(|table| {
            let indexes = IndexRead::all_of(&self.catalog, &table);
            let by = table.def.split_by();
            let partitioned = matches!(
                self.catalog.by_id(table.def.id),
                Some(crate::catalog::Object::MaterializedView(v)) if v.def.partitioned
            );
            let mut source = TableSource::new(table, self.store.clone(), self.writer.clone())
                .with_failures(self.failures.clone())
                .with_indexes(indexes);
            let clustered = self.peers.get().is_some();
            if partitioned {
                source.peers = self.peers.get().cloned();
            }
            if clustered && !by.is_empty() {
                source.split_by = Some(by);
            }
            Arc::new(source) as Arc<dyn TableProvider>
        }))
    }

    fn table_exist(&self, name: &str) -> bool {
        self.catalog.get(name).is_some()
    }
}

/// One table, for one statement.
#[derive(Debug)]
pub struct TableSource {
    table: Arc<Table>,
    store: Arc<Store>,
    writer: crate::log::writer::Writer,
    constraints: Constraints,
    /// Views that stopped: reading one returns its error.
    failures: Option<Failures>,
    /// The table's indexes, which a scan reads when its filters bound one.
    indexes: Vec<IndexRead>,
    /// A partitioned view in a cluster: the nodes that hold the rest of it.
    peers: Option<Arc<dyn Peers>>,
    /// A source this node's cluster splits over its nodes, by these
    /// columns: this node's log holds only its share.
    split_by: Option<Vec<String>>,
}

impl TableSource {
    pub fn new(table: Arc<Table>, store: Arc<Store>, writer: crate::log::writer::Writer) -> Self {
        let constraints = if table.def.is_keyed() {
            Constraints::new_unverified(vec![Constraint::PrimaryKey(table.def.primary_key.clone())])
        } else {
            Constraints::default()
        };
        TableSource {
            table,
            store,
            writer,
            constraints,
            failures: None,
            indexes: Vec::new(),
            peers: None,
            split_by: None,
        }
    }

    pub fn with_indexes(mut self, indexes: Vec<IndexRead>) -> Self {
        self.indexes = indexes;
        self
    }

    /// An index whose key the filters bound and which holds the columns
    /// the scan wants, readable exactly in this snapshot, with its range.
    fn index_for(
        &self,
        view: &Arc<ReadView>,
        projection: Option<&Vec<usize>>,
        filters: &[Expr],
    ) -> crate::Result<Option<IndexScan>> {
        let all: Vec<usize> = (0..self.table.def.columns.len()).collect();
        let wanted = projection.unwrap_or(&all);
        for read in &self.indexes {
            let failed = self
                .failures
                .as_ref()
                .is_some_and(|f| f.get(read.index.def.id).is_some());
            if failed || !read.covers(wanted) {
                continue;
            }
            let Some(KeyAccess::Range { lower, upper }) =
                keyaccess::plan_index(&read.index, filters)
            else {
                continue;
            };
            if let Some(trailing) = read.catch_up(view)? {
                return Ok(Some(IndexScan {
                    read: read.clone(),
                    view: view.clone(),
                    trailing,
                    range: (lower, upper),
                }));
            }
        }
        Ok(None)
    }

    pub fn with_failures(mut self, failures: Failures) -> Self {
        self.failures = Some(failures);
        self
    }

    /// A view that stopped on an error has no contents to read, only the error.
    fn check_running(&self) -> DfResult<()> {
        let failure = self
            .failures
            .as_ref()
            .and_then(|f| f.get(self.table.def.id));
        match failure {
            Some(failure) => Err(DataFusionError::External(Box::new(failure.to_error()))),
            None => Ok(()),
        }
    }

    /// A partitioned view: this node's partitions from the snapshot, the
    /// others' from their nodes, each node answering for the partitions
    /// the address book gives it. A read of one key goes to its owner.
    async fn gather(
        &self,
        view: Arc<ReadView>,
        peers: &Arc<dyn Peers>,
        projection: Option<&Vec<usize>>,
        filters: &[Expr],
    ) -> DfResult<Arc<dyn ExecutionPlan>> {
        let mine = peers.mine(&self.table)?;
        let key = peers.key_of(&self.table);
        // Keys the columns cannot hold, or keys of several partitions,
        // read every partition; the filter keeps what matches.
        let point = match (&mine, keyaccess::key_points(&self.table, filters)) {
            (Some(mine), Some(keys)) => {
                let primary = &self.table.def.primary_key;
                let picked: Option<Vec<_>> = key
                    .iter()
                    .map(|c| Some(keys[primary.iter().position(|k| k == c)?].clone()))
                    .collect();
                picked.and_then(|columns| partition::single_partition(&columns, mine.count))
            }
            _ => None,
        };
        let here = match (&mine, point) {
            (Some(mine), Some(p)) => mine.partitions.contains(&p),
            _ => true,
        };
        let mut rows = Vec::new();
        if here {
            let table = self.table.clone();
            let access = keyaccess::plan(&self.table, filters)?;
            let local = tokio::task::spawn_blocking(move || local_rows(&table, &view, &access))
                .await
                .map_err(|e| DataFusionError::External(Box::new(e)))??;
            rows = match &mine {
                Some(mine) => local
                    .iter()
                    .map(|b| partition::keep_owned(b, &key, mine))
                    .collect::<crate::Result<Vec<_>>>()?,
                None => local,
            };
        }
        if point.is_none() || !here {
            rows.extend(peers.rows_elsewhere(&self.table, point).await?);
        }
        let exec = MemorySourceConfig::try_new_exec(
            &[rows],
            self.table.schema.clone(),
            projection.cloned(),
        )?;
        Ok(exec)
    }
}

/// The rows `table` holds in the snapshot, where `access` leads.
pub fn local_rows(
    table: &Table,
    view: &ReadView,
    access: &KeyAccess,
) -> crate::Result<Vec<RecordBatch>> {
    let mut out = Vec::new();
    let mut keep = |batch: RecordBatch| {
        out.push(batch);
        true
    };
    if table.def.contents_in_log() {
        for partition in 0..table.def.partitions {
            embedded::read_partition(view, table.def.log_topic(), partition, 0, |_, chunk| {
                Ok(keep(table.codec.decode(chunk.added_rows())?))
            })?;
        }
    } else {
        read_rows(table, view, access, &mut keep)?;
    }
    Ok(out)
}

/// Every row `table` holds in the snapshot.
pub fn all_rows(table: &Table, view: &ReadView) -> crate::Result<Vec<RecordBatch>> {
    let all = KeyAccess::Range {
        lower: None,
        upper: None,
    };
    local_rows(table, view, &all)
}

/// The snapshot a statement reads: set on the statement's session state, or a fresh one.
pub fn statement_view(state: &dyn Session, store: &Store) -> Arc<ReadView> {
    state
        .config()
        .get_extension::<ReadView>()
        .unwrap_or_else(|| store.read_view())
}

#[async_trait]
impl TableProvider for TableSource {
    fn schema(&self) -> SchemaRef {
        self.table.schema.clone()
    }

    fn constraints(&self) -> Option<&Constraints> {
        Some(&self.constraints)
    }

    fn table_type(&self) -> TableType {
        // pg_catalog then lists materialized views with psql's \dv, not \dt.
        if self.table.def.is_view() {
            TableType::View
        } else {
            TableType::Base
        }
    }

    fn get_table_definition(&self) -> Option<&str> {
        Some(&self.table.def.definition)
    }

    fn supports_filters_pushdown(
        &self,
        filters: &[&Expr],
    ) -> DfResult<Vec<TableProviderFilterPushDown>> {
        // Key filters choose the access path; DataFusion still applies them afterwards.
        Ok(filters
            .iter()
            .map(|f| {
                let on_index = self
                    .indexes
                    .iter()
                    .any(|i| keyaccess::usable_on_index(&i.index, f));
                if keyaccess::usable(&self.table, f) || on_index {
                    TableProviderFilterPushDown::Inexact
                } else {
                    TableProviderFilterPushDown::Unsupported
                }
            })
            .collect())
    }

    async fn scan(
        &self,
        state: &dyn Session,
        projection: Option<&Vec<usize>>,
        filters: &[Expr],
        limit: Option<usize>,
    ) -> DfResult<Arc<dyn ExecutionPlan>> {
        self.check_running()?;
        if let Some(by) = &self.split_by {
            return Err(DataFusionError::External(Box::new(Error::NotSupported(
                format!(
                    "source \"{}\" is split over the cluster's nodes by ({}), and each node holds \
                 only its share; read it through a materialized view WITH (partitioned = true) \
                 that groups by those columns",
                    self.table.def.name,
                    by.join(", ")
                ),
            ))));
        }
        let view = statement_view(state, &self.store);
        if let Some(peers) = &self.peers {
            return self.gather(view, peers, projection, filters).await;
        }
        let schema = self.table.schema.clone();
        // Read in the log, or kept by key, and then by which keys.
        let access = match self.table.def.contents_in_log() {
            true => None,
            false => Some(keyaccess::plan(&self.table, filters)?),
        };
        let by_key = access.as_ref().is_some_and(|a| !keyaccess::is_full(a));
        if !by_key && let Some(scan) = self.index_for(&view, projection, filters)? {
            let label = format!(
                "IndexScan: index={} on {}",
                scan.read.index.def.name, self.table.def.name
            );
            let exec = streams_exec(schema, vec![Arc::new(scan)], projection, limit)?;
            return Ok(Arc::new(Labelled::new(exec, label)));
        }
        let partitions: Vec<Arc<dyn PartitionStream>> = match access {
            None => (0..self.table.def.partitions)
                .map(|p| {
                    Arc::new(LogScan {
                        table: self.table.clone(),
                        view: view.clone(),
                        partition: p,
                    }) as Arc<dyn PartitionStream>
                })
                .collect(),
            Some(access) => vec![Arc::new(RowScan {
                table: self.table.clone(),
                view,
                access,
            })],
        };
        streams_exec(schema, partitions, projection, limit)
    }

    async fn insert_into(
        &self,
        _state: &dyn Session,
        input: Arc<dyn ExecutionPlan>,
        insert_op: InsertOp,
    ) -> DfResult<Arc<dyn ExecutionPlan>> {
        if self.table.def.is_view() {
            return Err(Error::WrongObjectType(format!(
                "cannot change materialized view \"{}\"; change the tables it reads",
                self.table.def.name
            ))
            .into());
        }
        if insert_op != InsertOp::Append {
            return Err(Error::NotSupported(format!("INSERT {insert_op} is not supported")).into());
        }
        let sink = TableSink {
            table: self.table.clone(),
            writer: self.writer.clone(),
            // The sink may run on another task than the statement.
            producer: crate::log::writer::current_producer(),
        };
        Ok(Arc::new(DataSinkExec::new(input, Arc::new(sink), None)))
    }
}

/// Reads the current rows of a keyed table.
#[derive(Debug)]
struct RowScan {
    table: Arc<Table>,
    view: Arc<ReadView>,
    access: KeyAccess,
}

impl PartitionStream for RowScan {
    fn schema(&self) -> &SchemaRef {
        &self.table.schema
    }

    fn execute(&self, _ctx: Arc<TaskContext>) -> SendableRecordBatchStream {
        let table = self.table.clone();
        let view = self.view.clone();
        let access = self.access.clone();
        spawn_reader(self.table.schema.clone(), move |emit| {
            read_rows(&table, &view, &access, emit)
        })
    }
}

fn read_rows(
    table: &Table,
    view: &ReadView,
    access: &KeyAccess,
    emit: &mut dyn FnMut(RecordBatch) -> bool,
) -> crate::Result<()> {
    let id = table.def.id;
    match access {
        KeyAccess::Points(points) => {
            let full: Vec<Vec<u8>> = points.iter().map(|k| keys::row_key(id, k)).collect();
            let mut found: Vec<Vec<u8>> = Vec::new();
            for value in view.multi_get(CF_ROWS, &full)?.into_iter().flatten() {
                expand_row(table, &value, &mut found)?;
            }
            if !found.is_empty() {
                emit(table.codec.decode(found.iter().map(Vec::as_slice))?);
            }
            Ok(())
        }
        KeyAccess::Range { lower, upper } => {
            let (lower, upper) = keys::row_range(id, lower.as_deref(), upper.as_deref());
            let mut pending: Vec<Vec<u8>> = Vec::with_capacity(BATCH_ROWS);
            let mut open = true;
            view.scan(CF_ROWS, lower, upper, |_, value| {
                expand_row(table, value, &mut pending)?;
                if pending.len() >= BATCH_ROWS {
                    open = emit(table.codec.decode(pending.iter().map(Vec::as_slice))?);
                    pending.clear();
                }
                Ok(open)
            })?;
            if open && !pending.is_empty() {
                emit(table.codec.decode(pending.iter().map(Vec::as_slice))?);
            }
            Ok(())
        }
    }
}

/// Reads a relation's rows through one of its indexes.
#[derive(Debug)]
struct IndexScan {
    read: IndexRead,
    view: Arc<ReadView>,
    trailing: Trailing,
    range: KeyRange,
}

impl PartitionStream for IndexScan {
    fn schema(&self) -> &SchemaRef {
        &self.read.base.schema
    }

    fn execute(&self, _ctx: Arc<TaskContext>) -> SendableRecordBatchStream {
        let read = self.read.clone();
        let view = self.view.clone();
        let trailing = self.trailing.clone();
        let range = self.range.clone();
        spawn_reader(self.read.base.schema.clone(), move |emit| {
            read.read(&view, &trailing, std::slice::from_ref(&range), emit)
        })
    }
}

/// Reads an append-only table, or a view kept as its changelog alone: its
/// log partition from offset 0.
#[derive(Debug)]
struct LogScan {
    table: Arc<Table>,
    view: Arc<ReadView>,
    partition: u32,
}

impl PartitionStream for LogScan {
    fn schema(&self) -> &SchemaRef {
        &self.table.schema
    }

    fn execute(&self, _ctx: Arc<TaskContext>) -> SendableRecordBatchStream {
        let table = self.table.clone();
        let view = self.view.clone();
        let partition = self.partition;
        spawn_reader(self.table.schema.clone(), move |emit| {
            let topic = table.def.log_topic();
            embedded::read_partition(&view, topic, partition, 0, |_, chunk| {
                Ok(emit(table.codec.decode(chunk.added_rows())?))
            })
        })
    }
}

/// Run a blocking reader on its own thread, streaming what it emits.
fn spawn_reader(
    schema: SchemaRef,
    read: impl FnOnce(&mut dyn FnMut(RecordBatch) -> bool) -> crate::Result<()> + Send + 'static,
) -> SendableRecordBatchStream {
    let (tx, rx) = tokio::sync::mpsc::channel::<DfResult<RecordBatch>>(4);
    tokio::task::spawn_blocking(move || {
        let mut emit =
            |batch: RecordBatch| batch.num_rows() == 0 || tx.blocking_send(Ok(batch)).is_ok();
        if let Err(e) = read(&mut emit) {
            let _ = tx.blocking_send(Err(DataFusionError::from(e)));
        }
    });
    let stream =
        futures::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|b| (b, rx)) });
    Box::pin(RecordBatchStreamAdapter::new(schema, stream.boxed()))
}

/// `INSERT` into a table: the statement's rows are written as one write, and
/// once they outgrow [`write::STAGE_AFTER_BYTES`] they are staged on disk
/// part by part and committed as one bulk load, so a large `INSERT …
/// SELECT` holds one part in memory, not its whole result.
#[derive(Debug)]
struct TableSink {
    table: Arc<Table>,
    writer: crate::log::writer::Writer,
    producer: Option<crate::log::writer::Producer>,
}

impl DisplayAs for TableSink {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "WeirTableSink: table={}", self.table.def.name)
    }
}

#[async_trait]
impl DataSink for TableSink {
    fn schema(&self) -> &SchemaRef {
        &self.table.schema
    }

    async fn write_all(
        &self,
        mut data: SendableRecordBatchStream,
        _context: &Arc<TaskContext>,
    ) -> DfResult<u64> {
        let mut pending = Vec::new();
        let mut pending_bytes = 0;
        let mut stage = None;
        while let Some(batch) = data.next().await {
            let batch = batch?;
            pending_bytes += batch.get_array_memory_size();
            pending.push(batch);
            if pending_bytes >= write::STAGE_AFTER_BYTES {
                let stage = match &mut stage {
                    Some(stage) => stage,
                    None => stage.insert(self.writer.stage()?),
                };
                write::stage_batches(&self.table, &std::mem::take(&mut pending), stage)?;
                pending_bytes = 0;
            }
        }
        let insert = async {
            let Some(mut stage) = stage else {
                return write::insert_batches(&self.table, &self.writer, &pending).await;
            };
            write::stage_batches(&self.table, &pending, &mut stage)?;
            self.writer.commit_stage(self.table.target(), stage).await
        };
        let producer = self.producer.clone();
        Ok(crate::log::writer::PRODUCER.scope(producer, insert).await?)
    }
}

/// A plan that reads `streams` (one partition each) in no particular
/// order, with the query's projection and limit pushed into it: how every
/// table and table function of ours is scanned.
pub fn streams_exec(
    schema: SchemaRef,
    streams: Vec<Arc<dyn PartitionStream>>,
    projection: Option<&Vec<usize>>,
    limit: Option<usize>,
) -> DfResult<Arc<dyn ExecutionPlan>> {
    let exec = StreamingTableExec::try_new(schema, streams, projection, vec![], false, limit)?;
    Ok(Arc::new(exec))
}
