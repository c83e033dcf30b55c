//! What the node shows about its views, sources and sinks to the metrics
//! endpoint and the dashboard: plain numbers, read from the runtime's
//! profiles and the connectors' progress without stopping anything.

use serde_json::{Value, json};

use std::sync::atomic::Ordering;

use crate::catalog::{Object, is_system};
use crate::session::Engine;
use crate::session::handlers::connector;

/// A materialized view, as of now.
#[derive(Debug, Clone, PartialEq)]
pub struct ViewStatus {
    pub name: String,
    /// Changes read from its inputs since it started in this node.
    pub changes_read: u64,
    pub epochs: u64,
    /// Time its operators spent in their own code.
    pub operator_seconds: f64,
    /// How far it has read its inputs, 0 to 1.
    pub progress: f64,
    /// Records in its inputs it has not read yet.
    pub behind: u64,
    /// Its operators' state in the store's files, estimated.
    pub state_bytes: u64,
    pub failed: Option<String>,
}

/// A source or a sink, as of now.
#[derive(Debug, Clone, PartialEq)]
pub struct ConnectorStatus {
    pub name: String,
    pub sink: bool,
    /// Messages read (a source) or written (a sink).
    pub messages: u64,
    /// Messages a source could not read.
    pub errors: u64,
    pub status: String,
    /// A Kafka source's position and end in each partition.
    pub partitions: Vec<(i32, crate::connector::Position)>,
}

impl Engine {
    /// Every materialized view the runtime runs, in name order.
    pub fn view_statuses(&self) -> Vec<ViewStatus> {
        let mut views: Vec<ViewStatus> = self
            .runtime
            .profiles()
            .iter()
            .map(|profile| {
                let busy: u64 = profile
                    .operators
                    .iter()
                    .map(|c| c.busy_nanos.load(Ordering::Relaxed))
                    .sum();
                ViewStatus {
                    name: profile.name.to_string(),
                    changes_read: profile
                        .source_rows
                        .iter()
                        .map(|r| r.load(Ordering::Relaxed))
                        .sum(),
                    epochs: profile.epochs.load(Ordering::Relaxed),
                    operator_seconds: busy as f64 / 1e9,
                    progress: self.runtime.progress(profile.view).unwrap_or(0.0),
                    behind: profile.behind.load(Ordering::Relaxed),
                    state_bytes: self.store.state_bytes(&profile.view.to_be_bytes()),
                    failed: self.runtime.failure(profile.view).map(|f| f.message),
                }
            })
            .collect();
        views.sort_by(|a, b| a.name.cmp(&b.name));
        views
    }

    /// Every source with a connector, then every sink, in name order.
    pub fn connector_statuses(&self) -> Vec<ConnectorStatus> {
        let status = |name: &str, id: u64, sink: bool| {
            let (messages, errors) = connector::counts(self, id);
            let partitions = self
                .connectors
                .progress(id)
                .map(|p| p.positions().into_iter().collect())
                .unwrap_or_default();
            ConnectorStatus {
                name: name.to_string(),
                sink,
                messages,
                errors,
                status: connector::status(self, id),
                partitions,
            }
        };
        let sources = self
            .catalog
            .objects()
            .into_iter()
            .filter_map(|object| match object {
                Object::Table(table)
                    if table.def.connector.is_some() && !is_system(&table.def.name) =>
                {
                    Some(status(&table.def.name, table.def.id, false))
                }
                _ => None,
            });
        let sinks = self
            .catalog
            .sinks()
            .into_iter()
            .map(|sink| status(&sink.name, sink.id, true));
        sources.chain(sinks).collect()
    }

    /// Bytes of the store's table files and of its memtables.
    pub fn store_bytes(&self) -> (u64, u64) {
        self.store.size()
    }

    /// The last epoch the views committed.
    pub fn epoch(&self) -> u64 {
        *self.runtime.committed().borrow()
    }
}

/// Most state entries the dashboard counts for one operator: a count walks
/// the state, and the page asks again every few seconds.
const STATE_COUNT_LIMIT: usize = 1_000_000;

impl Engine {
    /// The dashboard's page of everything: the node, then every relation.
    pub fn overview(&self) -> Value {
        let process = crate::telemetry::process_stats();
        let (files, memory) = self.store_bytes();
        let node = json!({
            "version": env!("CARGO_PKG_VERSION"),
            "uptime_seconds": process.map(|p| now_seconds() - p.start_time_seconds),
            "cpu_seconds": process.map(|p| p.cpu_seconds),
            "resident_bytes": process.map(|p| p.resident_bytes),
            "store_file_bytes": files,
            "store_memtable_bytes": memory,
            "epoch": self.epoch(),
            "connections": self.metrics.connections.load(Ordering::Relaxed),
            "statements": self.metrics.statements.load(Ordering::Relaxed),
        });
        let views: Vec<Value> = self
            .view_statuses()
            .into_iter()
            .map(|v| {
                let watermark = self.view_watermark(&v.name);
                json!({
                    "name": v.name,
                    "changes_read": v.changes_read,
                    "epochs": v.epochs,
                    "operator_seconds": v.operator_seconds,
                    "progress": v.progress,
                    "behind": v.behind,
                    "state_bytes": v.state_bytes,
                    "watermark": watermark,
                    "status": v.failed.map_or("running".to_string(), |f| format!("failed: {f}")),
                })
            })
            .collect();
        let connectors: Vec<Value> = self
            .connector_statuses()
            .into_iter()
            .map(|c| {
                let partitions: Vec<Value> = c
                    .partitions
                    .iter()
                    .map(|(partition, p)| {
                        json!({"partition": partition, "next": p.next, "high": p.high, "lag": p.lag()})
                    })
                    .collect();
                json!({
                    "name": c.name,
                    "kind": if c.sink { "sink" } else { "source" },
                    "messages": c.messages,
                    "errors": c.errors,
                    "status": c.status,
                    "partitions": partitions,
                })
            })
            .collect();
        json!({
            "node": node,
            "tables": self.table_overview(),
            "views": views,
            "connectors": connectors,
            "subscriptions": self.subscription_overview(),
        })
    }

    /// Tables, streams and sources with the records their logs hold.
    fn table_overview(&self) -> Vec<Value> {
        self.catalog
            .objects()
            .into_iter()
            .filter_map(|object| match object {
                Object::Table(table) if !is_system(&table.def.name) => Some(table),
                _ => None,
            })
            .map(|table| {
                let records = self.log_records(&table);
                let kind = if table.def.is_source() {
                    "source"
                } else {
                    "table"
                };
                json!({"name": table.def.name, "kind": kind, "records": records})
            })
            .collect()
    }

    fn subscription_overview(&self) -> Vec<Value> {
        self.catalog
            .subscriptions()
            .into_iter()
            .map(|s| {
                let from = self
                    .catalog
                    .by_id(s.from)
                    .map(|o| o.table().def.name.clone());
                json!({"name": s.name, "from": from, "retention_seconds": s.retention / 1_000_000})
            })
            .collect()
    }

    /// The event-time watermark a view's output has passed, as text.
    fn view_watermark(&self, name: &str) -> Option<String> {
        let view = self.catalog.view(name)?;
        let profile = self.runtime.profile(view.def.table.id)?;
        let last = profile.nodes.len().checked_sub(1)?;
        let key = crate::state::keys::node_watermark_key(view.def.table.id, last);
        let bytes = self
            .store
            .db()
            .get_cf(
                crate::state::cf(self.store.db(), crate::state::CF_STATE),
                key,
            )
            .ok()??;
        let micros = crate::dataflow::task::decode_mark(&bytes)?;
        chrono::DateTime::from_timestamp_micros(micros).map(|t| t.naive_utc().to_string())
    }

    /// A running view's graph with its counters; state entries are
    /// counted up to a limit (`"state_entries_at_least"` past it).
    pub fn view_graph(&self, name: &str) -> Option<Value> {
        let view = self.catalog.view(name)?;
        let id = view.def.table.id;
        let profile = self.runtime.profile(id)?;
        let measured = profile.measure(|node| {
            let prefix = crate::state::keys::node_prefix(id, node);
            self.store.state_entries_up_to(&prefix, STATE_COUNT_LIMIT)
        });
        let mut graph = profile.json(Some(&measured));
        graph["state_count_limit"] = STATE_COUNT_LIMIT.into();
        Some(graph)
    }
}

fn now_seconds() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or_default()
}
