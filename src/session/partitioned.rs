//! Partitioned views in a cluster: what each node builds, how it follows
//! the partitions the group gives it, and how a read gathers every
//! partition from the nodes that own them.
//!
//! Each node reads the whole of the view's Kafka sources (as every node
//! does) and keeps only the groups of its own partitions
//! ([`crate::sql::partition`]). When the group gives it other partitions,
//! the node builds its part of the view again from the sources' start:
//! the rows of a partition it gains are all in its own log, so nothing is
//! lost or counted twice, whoever owned the partition before.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::ipc::reader::StreamReader;
use datafusion::arrow::ipc::writer::StreamWriter;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::Engine;
use crate::catalog::{ConnectorKind, Object, Table, View};
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
const PEER_TIMEOUT: Duration = Duration::from_secs(30);

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
    Ok(())
}

/// Refuses to read a partitioned view other than by SELECT: each node
/// holds its own partitions' changes only.
pub fn refuse_follower(engine: &Engine, ids: &[u64], what: &str) -> Result<()> {
    for id in ids {
        if let Some(Object::MaterializedView(view)) = engine.catalog.by_id(*id)
            && view.def.partitioned
        {
            return Err(Error::NotSupported(format!(
                "{what} cannot read partitioned view \"{}\" yet: each node holds its own \
                 partitions' changes; read it with SELECT, or create it without \
                 partitioned = true",
                view.def.table.name
            )));
        }
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
    let db = engine.store.db();
    let key = keys::owned_partitions_key(view.def.table.id);
    if let Some(stored) = db.get_cf(cf(db, CF_STATE), &key)?
        && let Some(owned) = Owned::decode(&stored)
    {
        return Ok(Some(owned));
    }
    let owned = owned_now(engine);
    db.put_cf(cf(db, CF_STATE), &key, owned.encode())?;
    Ok(Some(owned))
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

fn sorted(partitions: &[i32]) -> Vec<u32> {
    let mut out: Vec<u32> = partitions.iter().map(|p| *p as u32).collect();
    out.sort_unstable();
    out
}

/// Rebuilds this node's partitioned views whenever the group gives it
/// other partitions, for as long as the node runs.
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
    for object in engine.catalog.objects() {
        let Object::MaterializedView(view) = object else {
            continue;
        };
        if !view.def.partitioned || owned_for_build(engine, &view)?.as_ref() == Some(now) {
            continue;
        }
        tracing::info!(view = %view.def.table.name, partitions = ?now.partitions,
            "building this node's part of a partitioned view again");
        engine.runtime.drop_view(view.def.table.id).await?;
        let key = keys::owned_partitions_key(view.def.table.id);
        engine
            .catalog
            .clear_data(&view.table, (&key, &now.encode()))?;
        super::handlers::create_mv::start(engine, &view, false).await?;
    }
    Ok(())
}

/// This node's partitions of view `id`'s rows as an Arrow stream, for the
/// peer whose request's query is `token=T&p=0,1,2`.
pub fn rows_for_peer(engine: &Engine, id: &str, query: &str) -> Result<Vec<u8>> {
    let mut token = "";
    let mut wanted = Vec::new();
    for (name, value) in query.split('&').filter_map(|p| p.split_once('=')) {
        match name {
            "token" => token = value,
            "p" => {
                wanted = value
                    .split(',')
                    .filter(|p| !p.is_empty())
                    .map(|p| p.parse::<u32>())
                    .collect::<std::result::Result<_, _>>()
                    .map_err(|e| Error::InvalidParameter(format!("partitions: {e}")))?
            }
            _ => {}
        }
    }
    let replication = engine
        .cluster()
        .ok_or_else(|| Error::InvalidParameter("this node is not in a cluster".into()))?;
    if token.is_empty() || token != replication.cluster.me.token {
        return Err(Error::InsufficientPrivilege(
            "not a node of this cluster".into(),
        ));
    }
    let table = partitioned_table(engine, id)?;
    let owned = Owned {
        count: replication.cluster.partitions,
        partitions: wanted,
    };
    let rows = all_rows(&table, &engine.store.read_view())?;
    let mut out = Vec::new();
    let mut writer = StreamWriter::try_new(&mut out, &table.schema)?;
    for batch in &rows {
        writer.write(&partition::keep_owned(
            batch,
            &table.def.primary_key,
            &owned,
        )?)?;
    }
    writer.finish()?;
    drop(writer);
    Ok(out)
}

fn partitioned_table(engine: &Engine, id: &str) -> Result<Arc<Table>> {
    let id: u64 = id
        .parse()
        .map_err(|_| Error::InvalidParameter(format!("not a view id: {id}")))?;
    match engine.catalog.by_id(id) {
        Some(Object::MaterializedView(view)) if view.def.partitioned => Ok(view.table.clone()),
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
    fn mine(&self) -> Option<Owned> {
        let engine = self.engine.upgrade()?;
        let replication = engine.cluster()?;
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
        Some(Owned {
            count: replication.cluster.partitions,
            partitions,
        })
    }

    async fn rows_elsewhere(&self, table: &Table, only: Option<u32>) -> Result<Vec<RecordBatch>> {
        let engine = self.engine.upgrade().ok_or(Error::ShuttingDown)?;
        let Some(replication) = engine.cluster() else {
            return Ok(Vec::new());
        };
        let me = replication.cluster.me.node.clone();
        let mut rows = Vec::new();
        for member in replication.cluster.members() {
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
            let body = tokio::time::timeout(PEER_TIMEOUT, get(&member.info.http_address, &target))
                .await
                .map_err(|_| peer_error(&member.info.node, "no answer in time"))?
                .map_err(|e| peer_error(&member.info.node, e))?;
            let reader = StreamReader::try_new(std::io::Cursor::new(body), None)?;
            for batch in reader {
                rows.push(batch?);
            }
        }
        Ok(rows)
    }
}

fn peer_error(node: &str, why: impl std::fmt::Display) -> Error {
    Error::ConnectionFailure(format!(
        "cannot read the partitions node \"{node}\" owns: {why}"
    ))
}

/// One plain HTTP GET; the body of a 200 answer.
async fn get(address: &str, target: &str) -> std::result::Result<Vec<u8>, String> {
    let mut socket = tokio::net::TcpStream::connect(address)
        .await
        .map_err(|e| e.to_string())?;
    let request = format!("GET {target} HTTP/1.1\r\nHost: {address}\r\nConnection: close\r\n\r\n");
    socket
        .write_all(request.as_bytes())
        .await
        .map_err(|e| e.to_string())?;
    let mut answer = Vec::new();
    socket
        .read_to_end(&mut answer)
        .await
        .map_err(|e| e.to_string())?;
    let split = memchr::memmem::find(&answer, b"\r\n\r\n").ok_or("a truncated answer")?;
    let (head, body) = (&answer[..split], &answer[split + 4..]);
    let status = String::from_utf8_lossy(head.split(|b| *b == b'\r').next().unwrap_or_default())
        .into_owned();
    if !status.contains(" 200 ") {
        return Err(format!(
            "{status}: {}",
            String::from_utf8_lossy(body).trim()
        ));
    }
    Ok(body.to_vec())
}
