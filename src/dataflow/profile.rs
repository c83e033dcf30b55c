//! A view's dataflow as EXPLAIN shows it: the operator graph, and for a
//! running view the counters its tasks keep (`EXPLAIN ANALYZE`, metrics).
//!
//! Counters are atomics the tasks add to as they work and readers load at
//! any time; they count from when the view started in this process.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::dataflow::graph::Dataflow;

/// One operator of the graph.
#[derive(Debug, Clone)]
pub struct NodeInfo {
    pub name: &'static str,
    pub detail: String,
    /// Upstream operators, by index.
    pub inputs: Vec<usize>,
}

/// One relation the dataflow reads.
#[derive(Debug, Clone)]
pub struct SourceInfo {
    pub relation: String,
    pub is_view: bool,
    /// The operator that receives its changes.
    pub node: usize,
}

/// An operator's counters.
#[derive(Debug, Default)]
pub struct Counters {
    pub rows_in: AtomicU64,
    pub rows_out: AtomicU64,
    /// Time spent in the operator's own code.
    pub busy_nanos: AtomicU64,
}

impl Counters {
    pub fn record(&self, rows_in: usize, rows_out: usize, busy: Duration) {
        self.rows_in.fetch_add(rows_in as u64, Ordering::Relaxed);
        self.rows_out.fetch_add(rows_out as u64, Ordering::Relaxed);
        self.busy_nanos
            .fetch_add(busy.as_nanos() as u64, Ordering::Relaxed);
    }
}

/// A dataflow's shape and counters.
#[derive(Debug)]
pub struct Profile {
    pub view: u64,
    pub name: Arc<str>,
    pub started: Instant,
    pub nodes: Vec<NodeInfo>,
    pub sources: Vec<SourceInfo>,
    /// Per node.
    pub operators: Vec<Counters>,
    /// Changes read, per source.
    pub source_rows: Vec<AtomicU64>,
    /// Epochs the view has committed.
    pub epochs: AtomicU64,
    /// Records its inputs' logs hold that it had not read, as of the last
    /// epoch that changed something.
    pub behind: AtomicU64,
}

/// A snapshot of one operator's counters and state, for printing.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Measured {
    pub rows_in: u64,
    pub rows_out: u64,
    pub busy_nanos: u64,
    pub state_entries: usize,
}

impl Measured {
    /// One line: `rows in 1000, out 990, time 0.179 ms, state entries 0`.
    fn summary(&self) -> String {
        format!(
            "rows in {}, out {}, time {:.3} ms, state entries {}",
            self.rows_in,
            self.rows_out,
            self.busy_nanos as f64 / 1e6,
            self.state_entries
        )
    }
}

impl Profile {
    pub fn of(dataflow: &Dataflow) -> Profile {
        let nodes: Vec<NodeInfo> = dataflow
            .nodes
            .iter()
            .map(|node| NodeInfo {
                name: node.operator.name(),
                detail: node.operator.describe(),
                inputs: node.inputs.clone(),
            })
            .collect();
        let sources: Vec<SourceInfo> = dataflow
            .sources
            .iter()
            .map(|source| SourceInfo {
                relation: source.table.def.name.clone(),
                is_view: source.table.def.is_view(),
                node: source.node,
            })
            .collect();
        Profile {
            view: dataflow.view,
            name: dataflow.name.clone(),
            started: Instant::now(),
            operators: nodes.iter().map(|_| Counters::default()).collect(),
            source_rows: sources.iter().map(|_| AtomicU64::new(0)).collect(),
            nodes,
            sources,
            epochs: AtomicU64::new(0),
            behind: AtomicU64::new(0),
        }
    }

    /// Every operator's counters now, with its state entries from `state`.
    pub fn measure(&self, state: impl Fn(usize) -> usize) -> Vec<Measured> {
        self.operators
            .iter()
            .enumerate()
            .map(|(node, c)| Measured {
                rows_in: c.rows_in.load(Ordering::Relaxed),
                rows_out: c.rows_out.load(Ordering::Relaxed),
                busy_nanos: c.busy_nanos.load(Ordering::Relaxed),
                state_entries: state(node),
            })
            .collect()
    }

    /// The graph as text, sink first; with counters when `measured`.
    pub fn text(&self, measured: Option<&[Measured]>) -> String {
        let mut out = String::new();
        if let Some(last) = self.nodes.len().checked_sub(1) {
            self.text_node(last, 0, measured, &mut out);
        }
        out
    }

    fn text_node(
        &self,
        node: usize,
        depth: usize,
        measured: Option<&[Measured]>,
        out: &mut String,
    ) {
        let info = &self.nodes[node];
        let indent = "  ".repeat(depth);
        out.push_str(&format!("{indent}{} #{node}", info.name));
        if !info.detail.is_empty() {
            out.push_str(&format!(": {}", info.detail));
        }
        if let Some(m) = measured.and_then(|m| m.get(node)) {
            out.push_str(&format!(" ({})", m.summary()));
        }
        out.push('\n');
        for (index, source) in self.sources.iter().enumerate() {
            if source.node != node {
                continue;
            }
            out.push_str(&format!("{indent}  Source: {}", source_label(source)));
            if measured.is_some() {
                let rows = self.source_rows[index].load(Ordering::Relaxed);
                out.push_str(&format!(" (rows {rows})"));
            }
            out.push('\n');
        }
        for input in &info.inputs {
            self.text_node(*input, depth + 1, measured, out);
        }
    }

    /// The graph in Graphviz's DOT language; counters in the labels when
    /// `measured`.
    pub fn dot(&self, measured: Option<&[Measured]>) -> String {
        let mut out = String::from("digraph dataflow {\n  rankdir=BT;\n");
        for (i, node) in self.nodes.iter().enumerate() {
            let mut label = format!("{}\\n{}", node.name, node.detail.replace('"', "\\\""));
            if let Some(m) = measured.and_then(|m| m.get(i)) {
                label.push_str(&format!("\\n{}", m.summary()));
            }
            out.push_str(&format!("  n{i} [shape=box, label=\"{label}\"];\n"));
            for input in &node.inputs {
                out.push_str(&format!("  n{input} -> n{i};\n"));
            }
        }
        for (s, source) in self.sources.iter().enumerate() {
            out.push_str(&format!(
                "  s{s} [shape=cylinder, label=\"{}\"];\n  s{s} -> n{};\n",
                source.relation.replace('"', "\\\""),
                source.node
            ));
        }
        out.push_str("}\n");
        out
    }

    /// The graph and counters as one JSON document.
    pub fn json(&self, measured: Option<&[Measured]>) -> serde_json::Value {
        let operators: Vec<serde_json::Value> = self
            .nodes
            .iter()
            .enumerate()
            .map(|(i, node)| {
                let mut op = serde_json::json!({
                    "id": i,
                    "operator": node.name,
                    "detail": node.detail,
                    "inputs": node.inputs,
                });
                if let Some(m) = measured.and_then(|m| m.get(i)) {
                    op["rows_in"] = m.rows_in.into();
                    op["rows_out"] = m.rows_out.into();
                    op["time_ms"] = (m.busy_nanos as f64 / 1e6).into();
                    op["state_entries"] = m.state_entries.into();
                }
                op
            })
            .collect();
        let sources: Vec<serde_json::Value> = self
            .sources
            .iter()
            .enumerate()
            .map(|(i, source)| {
                let mut s = serde_json::json!({
                    "relation": source.relation,
                    "kind": if source.is_view { "view" } else { "table" },
                    "operator": source.node,
                });
                if measured.is_some() {
                    s["rows"] = self.source_rows[i].load(Ordering::Relaxed).into();
                }
                s
            })
            .collect();
        let mut doc = serde_json::json!({
            "view": &*self.name,
            "operators": operators,
            "sources": sources,
        });
        if measured.is_some() {
            doc["running_seconds"] = self.started.elapsed().as_secs_f64().into();
            doc["epochs"] = self.epochs.load(Ordering::Relaxed).into();
        }
        doc
    }
}

fn source_label(source: &SourceInfo) -> String {
    let kind = if source.is_view {
        "changelog of view"
    } else {
        "log of table"
    };
    format!("{kind} {}", source.relation)
}

/// Every running view's profile, by view id.
#[derive(Debug, Clone, Default)]
pub struct Profiles(Arc<parking_lot::Mutex<BTreeMap<u64, Arc<Profile>>>>);

impl Profiles {
    pub fn insert(&self, profile: Arc<Profile>) {
        self.0.lock().insert(profile.view, profile);
    }

    pub fn remove(&self, view: u64) {
        self.0.lock().remove(&view);
    }

    pub fn get(&self, view: u64) -> Option<Arc<Profile>> {
        self.0.lock().get(&view).cloned()
    }

    pub fn all(&self) -> Vec<Arc<Profile>> {
        self.0.lock().values().cloned().collect()
    }
}
