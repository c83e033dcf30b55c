//! A view's dataflow: operators in topological order, the sources that feed
//! them, and how changes travel between them. EXPLAIN prints this graph.

use std::sync::Arc;

use datafusion::arrow::array::Int64Array;

use crate::catalog::Table;
use crate::dataflow::change::{Barrier, ChangeBatch, Watermark};
use crate::dataflow::operator::{Context, Operator};
use crate::dataflow::state::EpochState;
use crate::error::Result;
use crate::log::embedded::Chunk;

pub struct Node {
    pub operator: Box<dyn Operator>,
    /// Upstream nodes, by index; always lower than this node's own index.
    pub inputs: Vec<usize>,
}

/// Where a dataflow reads: a table's log topic or a view's changelog.
pub struct Source {
    pub table: Arc<Table>,
    /// The node that receives this source's changes, on its input 0.
    pub node: usize,
}

impl Source {
    pub fn topic(&self) -> u64 {
        self.table.def.topic()
    }

    /// Partitions of the topic: views keep their changelog in one.
    pub fn partitions(&self) -> u32 {
        if self.table.def.is_view {
            1
        } else {
            self.table.def.partitions
        }
    }

    /// Decode a log chunk into changes in the table's schema.
    pub fn decode(&self, chunk: &Chunk<'_>) -> Result<ChangeBatch> {
        let rows = self
            .table
            .codec
            .decode(chunk.entries.iter().map(|e| e.row))?;
        let diffs = Int64Array::from_iter_values(chunk.entries.iter().map(|e| e.diff));
        ChangeBatch::new(rows, diffs)
    }
}

pub struct Dataflow {
    /// The view this dataflow maintains.
    pub view: u64,
    pub nodes: Vec<Node>,
    pub sources: Vec<Source>,
    pub marks: Marks,
}

/// Event-time progress through a dataflow. An operator's watermark is the
/// minimum of its inputs', leaving out inputs whose sources are idle (unless
/// all are); a source's is the highest its topic has announced.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Marks {
    /// Per source: the watermark read from its topic.
    pub sources: Vec<Option<i64>>,
    /// Per source: no records for longer than the idle timeout.
    pub idle: Vec<bool>,
    /// Per node: the watermark it has forwarded.
    pub nodes: Vec<Option<i64>>,
}

impl Marks {
    pub fn new(sources: usize, nodes: usize) -> Marks {
        Marks {
            sources: vec![None; sources],
            idle: vec![false; sources],
            nodes: vec![None; nodes],
        }
    }

    /// Sources' and nodes' watermarks as bytes, for the epoch's state.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::new();
        for mark in self.sources.iter().chain(&self.nodes) {
            out.extend_from_slice(&mark.unwrap_or(i64::MIN).to_le_bytes());
        }
        out
    }

    /// Restore what [`Marks::encode`] wrote; a different shape leaves all unset.
    pub fn decode(&mut self, bytes: &[u8]) {
        let values: Vec<Option<i64>> = bytes
            .chunks_exact(8)
            .map(|c| i64::from_le_bytes(c.try_into().expect("chunks of eight")))
            .map(|v| (v != i64::MIN).then_some(v))
            .collect();
        if values.len() == self.sources.len() + self.nodes.len() {
            let (sources, nodes) = values.split_at(self.sources.len());
            self.sources = sources.to_vec();
            self.nodes = nodes.to_vec();
        }
    }
}

impl Dataflow {
    /// The state-family prefix of one node.
    pub fn node_prefix(&self, node: usize) -> Vec<u8> {
        let mut prefix = self.view.to_be_bytes().to_vec();
        prefix.extend_from_slice(&(node as u32).to_be_bytes());
        prefix
    }

    /// Push changes into `node` on `input`, and on through everything downstream.
    pub fn deliver(
        &mut self,
        node: usize,
        input: usize,
        batch: ChangeBatch,
        state: &mut EpochState,
    ) -> Result<()> {
        let prefix = self.node_prefix(node);
        let mut cx = Context::new(state, &prefix);
        self.nodes[node]
            .operator
            .on_changes(input, batch, &mut cx)?;
        let output = cx.take_output();
        self.forward(node, output, state)
    }

    fn forward(
        &mut self,
        from: usize,
        output: Vec<ChangeBatch>,
        state: &mut EpochState,
    ) -> Result<()> {
        for batch in output {
            let downstream: Vec<(usize, usize)> = self
                .nodes
                .iter()
                .enumerate()
                .flat_map(|(i, n)| {
                    n.inputs
                        .iter()
                        .enumerate()
                        .filter(move |(_, from_node)| **from_node == from)
                        .map(move |(input, _)| (i, input))
                })
                .collect();
            for (node, input) in downstream {
                self.deliver(node, input, batch.clone(), state)?;
            }
        }
        Ok(())
    }

    /// Tell every operator the watermark it had reached before a restart
    /// (operators keep their watermark in memory).
    pub fn replay_watermarks(&mut self, state: &mut EpochState) -> Result<()> {
        for node in 0..self.nodes.len() {
            let Some(micros) = self.marks.nodes[node] else {
                continue;
            };
            let prefix = self.node_prefix(node);
            let mut cx = Context::new(state, &prefix);
            self.nodes[node]
                .operator
                .on_watermark(Watermark { micros }, &mut cx)?;
            let output = cx.take_output();
            self.forward(node, output, state)?;
        }
        Ok(())
    }

    /// Raise source `index`'s watermark and pass the change downstream.
    pub fn source_watermark(
        &mut self,
        index: usize,
        watermark: i64,
        state: &mut EpochState,
    ) -> Result<()> {
        let current = &mut self.marks.sources[index];
        if *current >= Some(watermark) {
            return Ok(());
        }
        *current = Some(watermark);
        self.advance_watermarks(state)
    }

    /// Recompute every operator's input watermark, upstream first, and tell
    /// the operators whose watermark rose.
    pub fn advance_watermarks(&mut self, state: &mut EpochState) -> Result<()> {
        let mut idle = vec![false; self.nodes.len()];
        for node in 0..self.nodes.len() {
            let inputs: Vec<(Option<i64>, bool)> = if self.nodes[node].inputs.is_empty() {
                self.sources
                    .iter()
                    .enumerate()
                    .filter(|(_, s)| s.node == node)
                    .map(|(i, _)| (self.marks.sources[i], self.marks.idle[i]))
                    .collect()
            } else {
                self.nodes[node]
                    .inputs
                    .iter()
                    .map(|i| (self.marks.nodes[*i], idle[*i]))
                    .collect()
            };
            idle[node] = !inputs.is_empty() && inputs.iter().all(|(_, idle)| *idle);
            let active: Vec<Option<i64>> = inputs
                .iter()
                .filter(|(_, i)| !*i || idle[node])
                .map(|(mark, _)| *mark)
                .collect();
            // A missing watermark on any active input holds the minimum back.
            let Some(Some(low)) = active.iter().copied().min() else {
                continue;
            };
            if self.marks.nodes[node] >= Some(low) {
                continue;
            }
            let prefix = self.node_prefix(node);
            let mut cx = Context::new(state, &prefix);
            let forwarded = self.nodes[node]
                .operator
                .on_watermark(Watermark { micros: low }, &mut cx)?;
            let output = cx.take_output();
            self.forward(node, output, state)?;
            if let Some(w) = forwarded {
                self.marks.nodes[node] = self.marks.nodes[node].max(Some(w.micros));
            }
        }
        Ok(())
    }

    /// End the epoch: every operator, upstream first, sees the barrier.
    pub fn barrier(&mut self, barrier: Barrier, state: &mut EpochState) -> Result<()> {
        for node in 0..self.nodes.len() {
            let prefix = self.node_prefix(node);
            let mut cx = Context::new(state, &prefix);
            self.nodes[node].operator.on_barrier(barrier, &mut cx)?;
            let output = cx.take_output();
            self.forward(node, output, state)?;
        }
        Ok(())
    }

    /// The graph as text, sink first, for EXPLAIN.
    pub fn explain(&self) -> String {
        let mut out = String::new();
        if let Some(last) = self.nodes.len().checked_sub(1) {
            self.explain_node(last, 0, &mut out);
        }
        out
    }

    fn explain_node(&self, node: usize, depth: usize, out: &mut String) {
        let op = &self.nodes[node].operator;
        let detail = op.describe();
        let indent = "  ".repeat(depth);
        if detail.is_empty() {
            out.push_str(&format!("{indent}{} #{node}\n", op.name()));
        } else {
            out.push_str(&format!("{indent}{} #{node}: {detail}\n", op.name()));
        }
        for source in self.sources.iter().filter(|s| s.node == node) {
            let kind = if source.table.def.is_view {
                "changelog of view"
            } else {
                "log of table"
            };
            out.push_str(&format!(
                "{indent}  Source: {kind} {}\n",
                source.table.def.name
            ));
        }
        for input in &self.nodes[node].inputs {
            self.explain_node(*input, depth + 1, out);
        }
    }

    /// The graph in Graphviz's DOT language.
    pub fn explain_dot(&self) -> String {
        let mut out = String::from("digraph dataflow {\n  rankdir=BT;\n");
        for (i, node) in self.nodes.iter().enumerate() {
            let label = format!(
                "{}\\n{}",
                node.operator.name(),
                node.operator.describe().replace('"', "\\\"")
            );
            out.push_str(&format!("  n{i} [shape=box, label=\"{label}\"];\n"));
            for input in &node.inputs {
                out.push_str(&format!("  n{input} -> n{i};\n"));
            }
        }
        for (s, source) in self.sources.iter().enumerate() {
            out.push_str(&format!(
                "  s{s} [shape=cylinder, label=\"{}\"];\n  s{s} -> n{};\n",
                source.table.def.name, source.node
            ));
        }
        out.push_str("}\n");
        out
    }
}
