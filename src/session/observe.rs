//! What the node shows about its views, sources and sinks to the metrics
//! endpoint and the dashboard: plain numbers, read from the runtime's
//! profiles and the connectors' progress without stopping anything.

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
            ConnectorStatus {
                name: name.to_string(),
                sink,
                messages,
                errors,
                status: connector::status(self, id),
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
