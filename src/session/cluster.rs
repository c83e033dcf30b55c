//! DDL in a cluster: every node applies the same statements in the same
//! order, the catalog log's.
//!
//! A node does not run a DDL statement where the client sent it. It appends
//! the statement to the catalog log and waits until its own follower reaches
//! it there; the follower applies every statement of the log, from every
//! node, one after another, and hands each proposer its statement's
//! result. So two nodes that create the same name at once agree on which
//! came first (the other gets 42P07), and object ids, allocated in that
//! order, are the same on every node.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use serde::{Deserialize, Serialize};
use tokio::sync::oneshot;

use super::{Engine, Notice, Output, Session, handlers};
use crate::cluster::{Cluster, Entry, Follower, NodeInfo};
use crate::error::{Error, Result};
use crate::sql::parser::Statement;

/// Where the offset after the last applied statement is kept.
const APPLIED_KEY: &[u8] = b"\xffcluster\x00applied";
/// The cluster a data directory belongs to, once it joined one.
const CLUSTER_KEY: &[u8] = b"\xffcluster\x00name";

/// A statement of the catalog log.
#[derive(Debug, Serialize, Deserialize)]
struct Proposal {
    node: String,
    user: String,
    sql: String,
}

/// What applying a statement gave, for the session that proposed it.
struct Applied {
    result: Result<Output>,
    notices: Vec<Notice>,
}

pub struct Replication {
    pub cluster: Cluster,
    /// Proposals of this node's sessions not applied yet, by key.
    /// `None` once this node has stopped following the log.
    waiting: Mutex<Option<HashMap<String, oneshot::Sender<Applied>>>>,
    /// Keys are unique across restarts: node, start time, sequence.
    started: u128,
    next: AtomicU64,
}

/// Whether a statement changes the catalog, and so goes through the log.
pub fn replicated(statement: &Statement) -> bool {
    matches!(
        statement,
        Statement::CreateTable(_)
            | Statement::Drop(_)
            | Statement::CreateFunction { .. }
            | Statement::DropFunction { .. }
            | Statement::CreateSink(_)
            | Statement::CreateView(_)
            | Statement::CreateLogicalView(_)
            | Statement::CreateSubscription { .. }
            | Statement::Comment(_)
            | Statement::Grant(_)
            | Statement::CreateRole(_)
            | Statement::AlterRole(_)
            | Statement::DropRole { .. }
            | Statement::CreateIndex(_)
            | Statement::Rename(_)
    )
}

/// Joins the configured cluster, applies the statements other nodes made
/// while this one was away, and follows the log from then on. Returns
/// once this node's catalog is as current as the log: only then may it
/// serve clients.
pub async fn join(engine: &Arc<Engine>) -> Result<()> {
    let Some(settings) = engine.config.cluster.clone() else {
        return Ok(());
    };
    check_data_dir(engine, &settings.name)?;
    let me = NodeInfo {
        node: engine.config.node_name.clone(),
        address: engine.config.advertise.clone(),
        http_address: http_address(engine),
        token: token()?,
    };
    let cluster = Cluster::join(
        &settings.name,
        &settings.kafka,
        me,
        engine.config.cluster_partitions,
        settings.standbys,
    )
    .await?;
    // Claimed once joined: a node that could not reach Kafka may still
    // start elsewhere.
    write_key(engine, CLUSTER_KEY, settings.name.as_bytes())?;
    let applied = applied_offset(engine)?;
    let end = cluster.catalog_end().await?;
    let mut follower = cluster.follow(applied)?;
    let replication = Arc::new(Replication {
        cluster,
        waiting: Mutex::new(Some(HashMap::new())),
        started: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()),
        next: AtomicU64::new(0),
    });
    // Set before catching up: what a statement does can depend on being in
    // a cluster (a sink is written only by the node it was sent to).
    if engine.cluster.set(replication.clone()).is_err() {
        return Err(Error::Internal("joined a cluster twice".into()));
    }
    let mut next = applied;
    while next < end {
        let entry = follower
            .next()
            .await
            .ok_or_else(|| Error::ConnectionFailure("the catalog log stopped".into()))?;
        next = entry.offset + 1;
        apply(engine, &replication, entry).await?;
    }
    tracing::info!(
        cluster = %settings.name,
        statements = end - applied,
        "caught up with the cluster's catalog"
    );
    let _ = engine
        .peers
        .set(Arc::new(super::partitioned::ClusterPeers::new(engine)));
    engine
        .share
        .send_replace(Some(Arc::new(crate::dataflow::node::Share::new(
            &settings.name,
            &settings.kafka,
            replication.cluster.partitions,
            replication.cluster.owned(),
            Box::new({
                let replication = replication.clone();
                move |owned: &[u32]| replication.cluster.kept(owned)
            }),
        ))));
    tokio::spawn(super::partitioned::follow_ownership(engine.clone()));
    let engine = engine.clone();
    tokio::spawn(async move { keep_following(engine, replication, follower).await });
    Ok(())
}

/// Where the others reach this node's HTTP port: its listen address, or,
/// when that is every interface, the advertised host.
fn http_address(engine: &Engine) -> String {
    let listen = engine.config.http_listen;
    if !listen.ip().is_unspecified() {
        return listen.to_string();
    }
    let advertised = &engine.config.advertise;
    let host = advertised
        .rsplit_once(':')
        .map_or(advertised.as_str(), |(host, _)| host);
    format!("{host}:{}", listen.port())
}

/// A new secret for each start: peers read it in the address book.
fn token() -> Result<String> {
    let mut bytes = [0u8; 16];
    ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut bytes)
        .map_err(|_| Error::Internal("no random numbers for the cluster token".into()))?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

/// A data directory serves one cluster: ids and the log's offsets mean
/// nothing in another, nor in a node that ran on its own.
fn check_data_dir(engine: &Engine, cluster: &str) -> Result<()> {
    match read_key(engine, CLUSTER_KEY)? {
        Some(name) if name == cluster.as_bytes() => Ok(()),
        Some(name) => Err(Error::Config(format!(
            "data directory {} belongs to cluster \"{}\"; start this node with an empty one \
             to join \"{cluster}\"",
            engine.config.data_dir.display(),
            String::from_utf8_lossy(&name)
        ))),
        None if has_user_objects(engine) => Err(Error::Config(format!(
            "data directory {} holds the objects of a node that ran on its own; \
             a node joins a cluster with an empty data directory",
            engine.config.data_dir.display()
        ))),
        None => Ok(()),
    }
}

fn has_user_objects(engine: &Engine) -> bool {
    engine
        .catalog
        .objects()
        .iter()
        .any(|o| !crate::catalog::is_system(o.def().name()))
}

fn read_key(engine: &Engine, key: &[u8]) -> Result<Option<Vec<u8>>> {
    let db = engine.store.db();
    Ok(db.get_cf(crate::state::cf(db, crate::state::CF_CATALOG), key)?)
}

fn write_key(engine: &Engine, key: &[u8], value: &[u8]) -> Result<()> {
    let db = engine.store.db();
    let mut options = rocksdb::WriteOptions::default();
    options.set_sync(true);
    db.put_cf_opt(
        crate::state::cf(db, crate::state::CF_CATALOG),
        key,
        value,
        &options,
    )?;
    Ok(())
}

fn applied_offset(engine: &Engine) -> Result<i64> {
    Ok(read_key(engine, APPLIED_KEY)?
        .and_then(|bytes| bytes.try_into().ok())
        .map_or(0, i64::from_be_bytes))
}

async fn keep_following(
    engine: Arc<Engine>,
    replication: Arc<Replication>,
    mut follower: Follower,
) {
    while let Some(entry) = follower.next().await {
        if let Err(e) = apply(&engine, &replication, entry).await {
            tracing::error!(cause = %e, "cannot keep the cluster's catalog; this node stops following it");
            break;
        }
    }
    // Sessions still waiting for their statements learn that they will
    // not be answered here.
    *replication.waiting.lock().expect("waiting proposals lock") = None;
}

/// Applies one statement of the log as the user who sent it, records that
/// it was applied, and answers its proposer when that is a session here.
/// A statement that fails fails on every node alike, so a failure is the
/// statement's result, not the log's.
async fn apply(engine: &Arc<Engine>, replication: &Replication, entry: Entry) -> Result<()> {
    let waiter = replication
        .waiting
        .lock()
        .expect("waiting proposals lock")
        .as_mut()
        .and_then(|waiting| waiting.remove(&entry.key));
    let applied = match serde_json::from_slice::<Proposal>(&entry.value) {
        Ok(proposal) => run(engine, proposal).await,
        Err(e) => Applied {
            result: Err(Error::Internal(format!(
                "unreadable catalog log entry: {e}"
            ))),
            notices: Vec::new(),
        },
    };
    write_key(engine, APPLIED_KEY, &(entry.offset + 1).to_be_bytes())?;
    match (waiter, &applied.result) {
        (Some(waiter), _) => {
            let _ = waiter.send(applied);
        }
        (None, Err(e)) => tracing::debug!(
            offset = entry.offset,
            cause = %e,
            "a statement of the cluster's catalog log failed here as it did where it was sent"
        ),
        (None, Ok(_)) => {}
    }
    Ok(())
}

async fn run(engine: &Arc<Engine>, proposal: Proposal) -> Applied {
    let mut session = Session {
        user: proposal.user,
        origin: Some(proposal.node),
        ..Session::default()
    };
    let result = run_statements(engine, &mut session, &proposal.sql).await;
    Applied {
        result,
        notices: std::mem::take(&mut session.notices),
    }
}

async fn run_statements(engine: &Arc<Engine>, session: &mut Session, sql: &str) -> Result<Output> {
    let mut output = Output::command("");
    for statement in crate::sql::parser::parse(sql)? {
        output = handlers::dispatch(engine, session, statement, None)
            .await?
            .collected()
            .await?;
    }
    Ok(output)
}

fn not_following() -> Error {
    Error::ConnectionFailure(
        "this node stopped following the cluster's catalog (its log says why); restart it \
         to catch up"
            .into(),
    )
}

impl Replication {
    /// Sends a statement through the log and returns its result once this
    /// node has applied it.
    pub async fn propose(&self, session: &mut Session, sql: &str) -> Result<Output> {
        let key = format!(
            "{}/{}/{}",
            self.cluster.me.node,
            self.started,
            self.next.fetch_add(1, Ordering::Relaxed)
        );
        let proposal = Proposal {
            node: self.cluster.me.node.clone(),
            user: session.user.clone(),
            sql: sql.to_string(),
        };
        let value = serde_json::to_vec(&proposal)
            .map_err(|e| Error::Internal(format!("cannot encode a statement: {e}")))?;
        let (sender, applied) = oneshot::channel();
        match self
            .waiting
            .lock()
            .expect("waiting proposals lock")
            .as_mut()
        {
            Some(waiting) => waiting.insert(key.clone(), sender),
            None => return Err(not_following()),
        };
        if let Err(e) = self.cluster.propose(&key, &value).await {
            if let Some(waiting) = self
                .waiting
                .lock()
                .expect("waiting proposals lock")
                .as_mut()
            {
                waiting.remove(&key);
            }
            return Err(e);
        }
        let applied = applied.await.map_err(|_| {
            Error::ConnectionFailure(
                "this node stopped following the cluster's catalog; the statement is in the \
                 log and takes effect on the nodes that follow it"
                    .into(),
            )
        })?;
        session.notices.extend(applied.notices);
        applied.result
    }
}
