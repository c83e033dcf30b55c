//! A view's dataflow: operators in topological order, the sources that feed
//! them, and how changes travel between them. EXPLAIN prints this graph.

use std::sync::Arc;

use datafusion::arrow::array::Int64Array;

use crate::catalog::Table;
use crate::dataflow::change::{Barrier, ChangeBatch};
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
