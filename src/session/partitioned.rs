//! Partitioned views in a cluster: what each node builds, how it follows
//! the partitions the group gives it, and how a read gathers every
//! partition from the nodes that own them.
//!
//! Each node reads the whole of the view's Kafka sources (as every node
//! does) and keeps only the groups of its own partitions
//! ([`crate::sql::partition`]). When the group gives it other partitions,
//! the node builds its part of the view again from the sources' start:
//! the rows of a partition it gains are all in its own log, so nothing is
//! lost or counted twice, whoever owned the partition before. With
//! `--standbys` a node builds more partitions than it owns, those the
//! failure of others would bring it ([`crate::cluster`]), and serves them
//! at once when that happens; reads and change streams keep only the
//! partitions the node owns.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::ipc::reader::StreamReader;
use datafusion::arrow::ipc::writer::StreamWriter;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::Engine;
use crate::catalog::{ConnectorKind, Object, Table, View};
use crate::cluster::Member;
use crate::error::{Error, Result};
use crate::sql::partition::{self, Owned};
use crate::sql::provider::{Peers, all_rows};
use crate::state::{CF_STATE, cf, keys};

/// Where a node serves its partitions' rows of a partitioned view (HTTP).
pub const PARTITION_ROWS: &str = "/internal/partitions/";

/// How long an assignment must hold before views are rebuilt for it: a
/// rebalance revokes and assigns in quick steps.
const SETTLE: Duration = Duration::from_millis(500);

/// How long a peer has to answer a read.
pub(super) const PEER_TIMEOUT: Duration = Duration::from_secs(30);

/// `WITH (partitioned = true)` is for views a cluster can split: a GROUP
/// BY at the top whose columns the view shows, over Kafka sources, which
/// every node reads whole.
pub fn check(
    engine: &Engine,
    plan: &datafusion::logical_expr::LogicalPlan,
    key: bool,
    depends_on: &[u64],
) -> Result<()> {
    if !partition::ends_in_groups(plan) || !key {
        return Err(Error::NotSupported(
            "a partitioned view needs a GROUP BY at the top of its query, with every group \
             column in its output"
                .into(),
        ));
    }
    for id in depends_on {
        let Some(input) = engine.catalog.by_id(*id) else {
            continue;
        };
        let table = input.table();
        let kafka = table
            .def
            .connector
            .as_ref()
            .is_some_and(|c| c.connector == ConnectorKind::Kafka);
        if !kafka {
            return Err(Error::NotSupported(format!(
                "a partitioned view reads Kafka sources only, which every node of a cluster \
                 reads whole; \"{}\" is not one",
                table.def.name
            )));
        }
    }
    match split_sources(engine, depends_on).as_slice() {
        [] => Ok(()),
        [(_, by)] => shows_split_columns(plan, by),
        _ => Err(Error::NotSupported(
            "a partitioned view reads at most one source with partition_by: two split \
             sources do not keep a group's rows on one node"
                .into(),
        )),
    }
}

/// A view over a split source groups by the source's `partition_by`
/// columns and shows them under their own names: rows are split by them,
/// and reads find a row's partition by them.
fn shows_split_columns(plan: &datafusion::logical_expr::LogicalPlan, by: &[String]) -> Result<()> {
    partition::groups_by(plan, by)?;
    let missing = by
        .iter()
        .find(|name| !plan.schema().fields().iter().any(|f| f.name() == *name));
    match missing {
        Some(name) => Err(Error::NotSupported(format!(
            "a view over a source split by ({}) shows each of those columns under its own \
             name; \"{name}\" is not among its columns",
            by.join(", ")
        ))),
        None => Ok(()),
    }
}

/// The sources among `ids` that this node's cluster splits over its
/// nodes (`partition_by`), each with its columns. None outside a cluster,
/// where every node reads every source whole.
pub fn split_sources(engine: &Engine, ids: &[u64]) -> Vec<(Arc<Table>, Vec<String>)> {
    if engine.config.cluster.is_none() {
        return Vec::new();
    }
    ids.iter()
        .filter_map(|id| {
            let Object::Table(table) = engine.catalog.by_id(*id)? else {
                return None;
            };
            let by = table.def.split_by();
            (!by.is_empty()).then_some((table, by))
        })
        .collect()
}

/// The columns whose values pick a row's partition of `view`: its split
/// source's, else its key.
pub(super) fn partition_key(engine: &Engine, view: &View) -> Vec<usize> {
    let split = split_sources(engine, &view.def.depends_on);
    let Some((_, by)) = split.first() else {
        return view.table.def.primary_key.clone();
    };
    let columns = &view.table.def.columns;
    by.iter()
        .filter_map(|name| columns.iter().position(|c| &c.name == name))
        .collect()
}

/// The `partition_by` columns of the split source `view` reads; empty when
/// it reads none.
pub fn split_columns(engine: &Engine, view: &View) -> Vec<String> {
    split_sources(engine, &view.def.depends_on)
        .into_iter()
        .next()
        .map(|(_, by)| by)
        .unwrap_or_default()
}

/// Refuses to read a partitioned view other than by SELECT, and a split
/// source other than by a partitioned view: each node holds its own
/// partitions' rows and changes only.
pub fn refuse_follower(engine: &Engine, ids: &[u64], what: &str) -> Result<()> {
    refuse_split(engine, ids, what)?;
    for id in ids {
        if let Some(Object::MaterializedView(view)) = engine.catalog.by_id(*id)
            && view.def.partitioned
        {
            return Err(Error::NotSupported(format!(
                "{what} cannot read partitioned view \"{}\" yet: each node holds its own \
                 partitions' changes; read it with SELECT or SUBSCRIBE, or create it \
                 without partitioned = true",
                view.def.table.name
            )));
        }
    }
    Ok(())
}

/// Refuses to read a split source other than by a partitioned view.
pub fn refuse_split(engine: &Engine, ids: &[u64], what: &str) -> Result<()> {
    if let Some((table, by)) = split_sources(engine, ids).first() {
        return Err(Error::NotSupported(format!(
            "{what} cannot read source \"{}\": it is split over the cluster's nodes by ({}); \
             read it through a materialized view WITH (partitioned = true) that groups by \
             those columns",
            table.def.name,
            by.join(", ")
        )));
    }
    Ok(())
}

/// The partitions `view` is built for on this node: what its state was
/// built for, else (a new view) what the node owns now. `None` on a node
/// outside a cluster, where a partitioned view is whole.
pub fn owned_for_build(engine: &Engine, view: &View) -> Result<Option<Owned>> {
    if !view.def.partitioned || engine.config.cluster.is_none() {
        return Ok(None);
    }
    if let Some(owned) = built_for(engine, view.def.table.id)? {
        return Ok(Some(owned));
    }
    let owned = source_kept(engine, view)?.unwrap_or_else(|| to_keep(engine, &owned_now(engine)));
    let db = engine.store.db();
    let key = keys::owned_partitions_key(view.def.table.id);
    db.put_cf(cf(db, CF_STATE), &key, owned.encode())?;
    Ok(Some(owned))
}

/// The partitions the log of the split source `view` reads keeps, which
/// are the ones the view holds; `None` for a view over no split source.
fn source_kept(engine: &Engine, view: &View) -> Result<Option<Owned>> {
    match split_sources(engine, &view.def.depends_on).first() {
        Some((source, _)) => built_for(engine, source.def.id),
        None => Ok(None),
    }
}

/// The partitions a view's state, or a split source's log, was built
/// for, as stored beside it.
pub(super) fn built_for(engine: &Engine, id: u64) -> Result<Option<Owned>> {
    let db = engine.store.db();
    let stored = db.get_cf(cf(db, CF_STATE), keys::owned_partitions_key(id))?;
    Ok(stored.and_then(|bytes| Owned::decode(&bytes)))
}

/// What this node owns now; nothing before it joined.
fn owned_now(engine: &Engine) -> Owned {
    match engine.cluster() {
        Some(replication) => Owned {
            count: replication.cluster.partitions,
            partitions: sorted(&replication.cluster.owned().borrow()),
        },
        None => Owned {
            count: engine.config.cluster_partitions,
            partitions: Vec::new(),
        },
    }
}

/// The partitions this node keeps built when it owns `owned`: those, and
/// with `--standbys` what the failure of others would bring it.
fn to_keep(engine: &Engine, owned: &Owned) -> Owned {
    match engine.cluster() {
        Some(replication) => Owned {
            count: owned.count,
            partitions: replication.cluster.kept(&owned.partitions),
        },
        None => owned.clone(),
    }
}

/// Whether a part built for `built` still serves a node that owns `owned`
/// and would keep `keep`. It must hold every owned partition. Partitions
/// it holds beyond `keep` go only when the node keeps fewer than it holds
/// (nodes joined); after a failure the node keeps more, and building again
/// would stop it serving at once, which is what standbys are for.
fn still_serves(built: &Owned, owned: &Owned, keep: &Owned) -> bool {
    let owns_all = owned
        .partitions
        .iter()
        .all(|p| built.partitions.contains(p));
    let beyond = built
        .partitions
        .iter()
        .any(|p| !keep.partitions.contains(p));
    built.count == owned.count
        && owns_all
        && !(beyond && keep.partitions.len() < built.partitions.len())
}

pub(super) fn sorted(partitions: &[i32]) -> Vec<u32> {
    let mut out: Vec<u32> = partitions.iter().map(|p| *p as u32).collect();
    out.sort_unstable();
    out
}

/// Rebuilds this node's partitioned views whenever the group gives it
/// partitions they do not hold (or, nodes having joined, far fewer), for
/// as long as the node runs.
pub async fn follow_ownership(engine: Arc<Engine>) {
    let Some(replication) = engine.cluster().cloned() else {
        return;
    };
    let mut owned = replication.cluster.owned();
    loop {
        // Settled: no further change for a moment.
        while let Ok(Ok(())) = tokio::time::timeout(SETTLE, owned.changed()).await {}
        let now = owned_now(&engine);
        // Between a revocation and its assignment the node owns nothing;
        // views keep what they have until the assignment comes.
        if !now.partitions.is_empty()
            && let Err(e) = rebuild_all(&engine, &now).await
        {
            tracing::error!(cause = %e, "cannot rebuild partitioned views for this node's partitions");
        }
        if owned.changed().await.is_err() {
            return;
        }
    }
}

async fn rebuild_all(engine: &Arc<Engine>, now: &Owned) -> Result<()> {
    let _ddl = engine.partitioning.lock().await;
    let keep = to_keep(engine, now);
    let objects = engine.catalog.objects();
    let ids: Vec<u64> = objects.iter().map(Object::id).collect();
    let mut moved = Vec::new();
    for (table, _) in split_sources(engine, &ids) {
        if built_for(engine, table.def.id)?.is_some_and(|kept| !still_serves(&kept, now, &keep)) {
            moved.push(table);
        }
    }
    let mut stale = Vec::new();
    for object in objects {
        if let Object::MaterializedView(view) = object
            && view.def.partitioned
            && (owned_for_build(engine, &view)?.is_none_or(|b| !still_serves(&b, now, &keep))
                || moved
                    .iter()
                    .any(|t| view.def.depends_on.contains(&t.def.id)))
        {
            stale.push(view);
        }
    }
    // Stopped before their sources' logs go, so that no view reads the
    // logs being read again.
    let mut built = Vec::new();
    for view in &stale {
        built.push(Building::start(engine, view.def.table.id));
        engine.runtime.drop_view(view.def.table.id).await?;
    }
    for table in &moved {
        read_again(engine, table, &keep).await?;
    }
    if !stale.is_empty() || !moved.is_empty() {
        sources_ready(engine).await;
    }
    for (view, built) in stale.into_iter().zip(built) {
        let target = source_kept(engine, &view)?.unwrap_or_else(|| keep.clone());
        tracing::info!(view = %view.def.table.name, partitions = ?target.partitions,
            "building this node's part of a partitioned view again");
        let id = view.def.table.id;
        let key = keys::owned_partitions_key(id);
        engine
            .catalog
            .clear_data(&view.table, (&key, &target.encode()))?;
        super::handlers::create_mv::start(engine, &view, false).await?;
        let engine = engine.clone();
        tokio::spawn(async move {
            if let Err(e) = engine.runtime.catch_up(id).await {
                tracing::warn!(view = id, cause = %e, "a rebuilt partitioned view did not catch up");
            }
            drop(built);
        });
    }
    Ok(())
}

/// Starts split source `table` again from nothing, for the partitions this
/// node owns now: its log holds the rows of the partitions it owned
/// before, in their order, and a windowed view must see each partition's
/// rows in event time's order again.
async fn read_again(engine: &Engine, table: &Arc<Table>, now: &Owned) -> Result<()> {
    tracing::info!(source = %table.def.name, partitions = ?now.partitions,
        "reading a split source's partitions again");
    let id = table.def.id;
    engine.connectors.stop(id).await;
    engine.catalog.clear_source(
        table,
        &crate::connector::kafka::positions_prefix(id),
        (&keys::owned_partitions_key(id), &now.encode()),
    )?;
    engine.writer.forget_table(id, table.def.topic());
    engine
        .connectors
        .start_source(&engine.node, table.clone(), true);
    Ok(())
}

/// How long a rebuild waits for split sources to read partitions they gained.
const SOURCES_READY: Duration = Duration::from_secs(300);

/// Waits until every split source's log holds the rows of the partitions
/// it keeps, read up to where their rows topic ended when the source took
/// them: a view built before would answer for partitions it has not seen
/// whole.
async fn sources_ready(engine: &Engine) {
    let Some(share) = engine.share.borrow().clone() else {
        return;
    };
    let ids: Vec<u64> = engine.catalog.objects().iter().map(Object::id).collect();
    let split = split_sources(engine, &ids);
    let deadline = tokio::time::Instant::now() + SOURCES_READY;
    for (table, _) in split {
        let Ok(Some(kept)) = built_for(engine, table.def.id) else {
            continue;
        };
        while !share.ready_for(table.def.id, &kept.partitions) {
            if tokio::time::Instant::now() > deadline {
                tracing::warn!(source = %table.def.name, "a split source has not read the \
                    partitions this node gained; building its views anyway");
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

/// Holds off rebuilds while `needed`: a partitioned view is being
/// created or dropped.
pub async fn hold_rebuilds(
    engine: &Engine,
    needed: bool,
) -> Option<tokio::sync::MutexGuard<'_, ()>> {
    match needed {
        true => Some(engine.partitioning.lock().await),
        false => None,
    }
}

fn building(engine: &Engine) -> std::sync::MutexGuard<'_, std::collections::HashSet<u64>> {
    engine.building.lock().unwrap_or_else(|p| p.into_inner())
}

/// A partitioned view being built on this node: it answers for no
/// partition until the guard goes.
pub struct Building {
    engine: Arc<Engine>,
    view: u64,
}

impl Building {
    pub fn start(engine: &Arc<Engine>, view: u64) -> Building {
        // Counted and shown as building under one lock: a stream that
        // sees the new count sees the build too.
        let mut builds = engine.builds.lock().unwrap_or_else(|p| p.into_inner());
        *builds.entry(view).or_default() += 1;
        building(engine).insert(view);
        Building {
            engine: engine.clone(),
            view,
        }
    }
}

impl Drop for Building {
    fn drop(&mut self) {
        building(&self.engine).remove(&self.view);
    }
}

/// Fails unless this node's part of `view` holds every group of the
/// `wanted` partitions: built for them, and done building. A read then
/// gets every row or a reason to try again, never a silent gap.
fn answers_for(engine: &Engine, view: &View, wanted: &[u32]) -> Result<()> {
    let name = &view.def.table.name;
    let node = &engine.config.node_name;
    if building(engine).contains(&view.def.table.id) {
        return Err(Error::PrerequisiteState(format!(
            "node \"{node}\" is building its partitions of view \"{name}\" again after a \
             rebalance; retry in a moment"
        )));
    }
    let built = built_for(engine, view.def.table.id)?.map(|o| o.partitions);
    let missing: Vec<String> = wanted
        .iter()
        .filter(|p| built.as_ref().is_some_and(|b| !b.contains(p)))
        .map(u32::to_string)
        .collect();
    if !missing.is_empty() {
        return Err(Error::PrerequisiteState(format!(
            "partitions {} of view \"{name}\" moved to node \"{node}\", which has not built \
             them yet; retry in a moment",
            missing.join(",")
        )));
    }
    Ok(())
}

/// This node's partitions of view `id`'s rows as an Arrow stream, for the
/// peer whose request's query is `token=T&p=0,1,2`.
pub fn rows_for_peer(engine: &Engine, id: &str, query: &str) -> Result<Vec<u8>> {
    let (view, owned) = peer_request(engine, id, query)?;
    let table = &view.table;
    let rows = all_rows(table, &engine.store.read_view())?;
    let mut out = Vec::new();
    let mut writer = StreamWriter::try_new(&mut out, &table.schema)?;
    for batch in &rows {
        writer.write(&partition::keep_owned(
            batch,
            &partition_key(engine, &view),
            &owned,
        )?)?;
    }
    writer.finish()?;
    drop(writer);
    Ok(out)
}

/// The value of `name` in a request's query (`token=T&p=0,1,2`).
pub(super) fn param<'a>(query: &'a str, name: &str) -> Option<&'a str> {
    query
        .split('&')
        .filter_map(|p| p.split_once('='))
        .find_map(|(key, value)| (key == name).then_some(value))
}

/// A peer's request (`token=T&p=0,1,2`) for partitions of view `id`: the
/// view and the partitions, once the peer's token shows it is of this
/// cluster and this node's part of the view answers for them.
pub(super) fn peer_request(engine: &Engine, id: &str, query: &str) -> Result<(Arc<View>, Owned)> {
    let token = param(query, "token").unwrap_or_default();
    let partitions = param(query, "p")
        .unwrap_or_default()
        .split(',')
        .filter(|p| !p.is_empty())
        .map(|p| p.parse::<u32>())
        .collect::<std::result::Result<_, _>>()
        .map_err(|e| Error::InvalidParameter(format!("partitions: {e}")))?;
    let replication = engine
        .cluster()
        .ok_or_else(|| Error::InvalidParameter("this node is not in a cluster".into()))?;
    if token.is_empty() || token != replication.cluster.me.token {
        return Err(Error::InsufficientPrivilege(
            "not a node of this cluster".into(),
        ));
    }
    let id = id
        .parse()
        .map_err(|_| Error::InvalidParameter(format!("not a view id: {id}")))?;
    let owned = Owned {
        count: replication.cluster.partitions,
        partitions,
    };
    let view = partitioned_view(engine, id)?;
    answers_for(engine, &view, &owned.partitions)?;
    Ok((view, owned))
}

/// How many times this node has started building view `id`: a change
/// stream over its part is good only while this stays the same.
pub(super) fn builds(engine: &Engine, id: u64) -> u64 {
    let builds = engine.builds.lock().unwrap_or_else(|p| p.into_inner());
    builds.get(&id).copied().unwrap_or(0)
}

/// Fails once this node's part of `view` stops answering for `wanted`, or
/// has been built again since it counted `built` builds: its changelog
/// then starts over, and a stream following it would repeat or miss rows.
pub(super) fn still_built(engine: &Engine, view: &View, wanted: &[u32], built: u64) -> Result<()> {
    answers_for(engine, view, wanted)?;
    if builds(engine, view.def.table.id) == built {
        return Ok(());
    }
    Err(Error::PrerequisiteState(format!(
        "node \"{}\" built its partitions of view \"{}\" again after a rebalance, so \
         this change stream cannot go on; subscribe again",
        engine.config.node_name, view.def.table.name
    )))
}

fn partitioned_view(engine: &Engine, id: u64) -> Result<Arc<View>> {
    match engine.catalog.by_id(id) {
        Some(Object::MaterializedView(view)) if view.def.partitioned => Ok(view),
        _ => Err(Error::UndefinedTable(format!(
            "no partitioned view has id {id}"
        ))),
    }
}

/// The cluster's other nodes, as a partitioned view's reads see them.
#[derive(Debug)]
pub struct ClusterPeers {
    engine: std::sync::Weak<Engine>,
}

impl ClusterPeers {
    pub fn new(engine: &Arc<Engine>) -> ClusterPeers {
        ClusterPeers {
            engine: Arc::downgrade(engine),
        }
    }
}

#[async_trait]
impl Peers for ClusterPeers {
    fn mine(&self, table: &Table) -> Result<Option<Owned>> {
        let Some(engine) = self.engine.upgrade() else {
            return Ok(None);
        };
        let Some(replication) = engine.cluster() else {
            return Ok(None);
        };
        let me = &replication.cluster.me.node;
        // As the address book has it, so that every reader splits the
        // partitions alike.
        let partitions = replication
            .cluster
            .members()
            .into_iter()
            .find(|m| &m.info.node == me)
            .map(|m| sorted(&m.partitions))
            .unwrap_or_default();
        let view = partitioned_view(&engine, table.def.id)?;
        answers_for(&engine, &view, &partitions)?;
        Ok(Some(Owned {
            count: replication.cluster.partitions,
            partitions,
        }))
    }

    fn key_of(&self, table: &Table) -> Vec<usize> {
        let view = self
            .engine
            .upgrade()
            .and_then(|engine| Some((partitioned_view(&engine, table.def.id).ok()?, engine)));
        match view {
            Some((view, engine)) => partition_key(&engine, &view),
            None => table.def.primary_key.clone(),
        }
    }

    async fn rows_elsewhere(&self, table: &Table, only: Option<u32>) -> Result<Vec<RecordBatch>> {
        let engine = self.engine.upgrade().ok_or(Error::ShuttingDown)?;
        let Some(replication) = engine.cluster() else {
            return Ok(Vec::new());
        };
        let me = replication.cluster.me.node.clone();
        let members = replication.cluster.members();
        covered(
            &members,
            replication.cluster.partitions,
            only,
            &table.def.name,
        )?;
        let mut rows = Vec::new();
        for member in members {
            let partitions: Vec<String> = member
                .partitions
                .iter()
                .filter(|p| only.is_none_or(|only| **p as u32 == only))
                .map(i32::to_string)
                .collect();
            if member.info.node == me || partitions.is_empty() {
                continue;
            }
            let target = format!(
                "{PARTITION_ROWS}{}?token={}&p={}",
                table.def.id,
                member.info.token,
                partitions.join(",")
            );
            let node = &member.info.node;
            let body =
                tokio::time::timeout(PEER_TIMEOUT, get(&member.info.http_address, &target, node))
                    .await
                    .map_err(|_| peer_error(node, "no answer in time"))??;
            let reader = StreamReader::try_new(std::io::Cursor::new(body), None)?;
            for batch in reader {
                rows.push(batch?);
            }
        }
        Ok(rows)
    }
}

/// Fails when a partition has no live owner in the address book: a node
/// died and the group has not given its partitions to others yet.
pub(super) fn covered(members: &[Member], count: u32, only: Option<u32>, view: &str) -> Result<()> {
    let owned: std::collections::BTreeSet<u32> = members
        .iter()
        .flat_map(|m| m.partitions.iter().map(|p| *p as u32))
        .collect();
    let missing: Vec<String> = (0..count)
        .filter(|p| only.is_none_or(|only| only == *p) && !owned.contains(p))
        .map(|p| p.to_string())
        .collect();
    match missing.is_empty() {
        true => Ok(()),
        false => Err(Error::PrerequisiteState(format!(
            "partitions {} of view \"{view}\" have no live node yet (a node left and the \
             cluster is moving its partitions); retry in a moment",
            missing.join(",")
        ))),
    }
}

pub(super) fn peer_error(node: &str, why: impl std::fmt::Display) -> Error {
    Error::ConnectionFailure(format!(
        "cannot read the partitions node \"{node}\" owns: {why}"
    ))
}

/// One plain HTTP GET to `node`; the body of a 200 answer. A peer that
/// cannot answer yet (503) passes its reason on, as 55000.
async fn get(address: &str, target: &str, node: &str) -> Result<Vec<u8>> {
    let failed = |e: std::io::Error| peer_error(node, e);
    let mut socket = tokio::net::TcpStream::connect(address)
        .await
        .map_err(failed)?;
    let request = format!("GET {target} HTTP/1.1\r\nHost: {address}\r\nConnection: close\r\n\r\n");
    socket.write_all(request.as_bytes()).await.map_err(failed)?;
    let mut answer = Vec::new();
    socket.read_to_end(&mut answer).await.map_err(failed)?;
    let split = memchr::memmem::find(&answer, b"\r\n\r\n")
        .ok_or_else(|| peer_error(node, "a truncated answer"))?;
    let (head, body) = (&answer[..split], &answer[split + 4..]);
    let status = String::from_utf8_lossy(head.split(|b| *b == b'\r').next().unwrap_or_default())
        .into_owned();
    let said = String::from_utf8_lossy(body).trim().to_string();
    match status.split_whitespace().nth(1) {
        Some("200") => Ok(body.to_vec()),
        Some("503") => Err(Error::PrerequisiteState(said)),
        _ => Err(peer_error(node, format!("{status}: {said}"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(partitions: impl IntoIterator<Item = u32>) -> Owned {
        Owned {
            count: 12,
            partitions: partitions.into_iter().collect(),
        }
    }

    #[test]
    fn a_part_serves_while_it_holds_what_is_owned_and_nodes_did_not_join() {
        // Without standbys a part serves exactly what is owned.
        assert!(still_serves(&set(0..4), &set(0..4), &set(0..4)));
        assert!(!still_serves(&set(0..4), &set(0..6), &set(0..6)));
        assert!(!still_serves(&set(0..6), &set(0..4), &set(0..4)));
        // A standby copy serves at once after a failure, even where the
        // node would now keep other partitions beside it.
        assert!(still_serves(&set(0..6), &set(0..6), &set(0..12)));
        assert!(still_serves(&set(0..12), &set(6..12), &set(0..12)));
        // Nodes joined: it keeps fewer than it holds, so it sheds them.
        assert!(!still_serves(&set(0..12), &set(0..4), &set(0..6)));
        assert!(!still_serves(
            &Owned {
                count: 6,
                partitions: (0..6).collect()
            },
            &set(0..4),
            &set(0..6)
        ));
    }
}
