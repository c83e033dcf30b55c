//! Relations in FROM that a materialized view reads through an operator
//! of their own: `changelog FROM t`, and `GAP_FILL(...)`.
//!
//! `GAP_FILL(...)` in a materialized view: the relation's rows, kept per
//! partition by the `Over` operator and filled again whenever a partition
//! changes. Under `EMIT ON WINDOW CLOSE` rows are first held until the
//! watermark passes them, so the view fills only final rows and what it
//! shows never changes.

use std::sync::Arc;

use datafusion::arrow::datatypes::SchemaRef;
use datafusion::logical_expr::TableScan;

use super::{Planner, column_exprs};
use crate::catalog::{Emit, Table, nullable};
use crate::dataflow::graph::Source;
use crate::dataflow::operators::changelog::Changelog;
use crate::dataflow::operators::over::{Evaluate, Over};
use crate::dataflow::operators::{Hold, Project};
use crate::error::{Error, Result};
use crate::sql::changelog::ChangelogTable;
use crate::sql::gap_fill::GapFillTable;
use crate::state::rows::projected::Projection;

impl Planner<'_> {
    /// A node with every column of `table`'s changes, read from its log.
    pub(super) fn whole_source(&mut self, table: &Arc<Table>) -> Result<usize> {
        let schema = table.nullable_schema.clone();
        let width = schema.fields().len();
        let read = Project::new(column_exprs(&schema, 0..width), schema);
        let node = self.push(Box::new(read), Vec::new());
        self.sources.push(Source {
            projection: Projection::new(table.codec.schema(), &(0..width).collect::<Vec<_>>())?,
            table: table.clone(),
            node,
            whole_rows: None,
        });
        Ok(node)
    }

    /// `changelog FROM t`: `t`'s changes as rows of their own.
    pub(super) fn changelog_scan(
        &mut self,
        scan: &TableScan,
        changes: ChangelogTable,
    ) -> Result<usize> {
        let node = self.whole_source(&changes.relation)?;
        let key = changes.relation.def.primary_key.clone();
        let schema = changes.schema();
        let node = self.push(Box::new(Changelog::new(key, schema.clone())), vec![node]);
        self.scan_projection(scan, &schema, node)
    }

    /// The columns of `node` (of `schema`) that `scan` reads.
    fn scan_projection(
        &mut self,
        scan: &TableScan,
        schema: &SchemaRef,
        node: usize,
    ) -> Result<usize> {
        let columns: Vec<usize> = match &scan.projection {
            Some(p) => p.clone(),
            None => (0..schema.fields().len()).collect(),
        };
        let project = Project::new(
            column_exprs(schema, columns),
            nullable(scan.projected_schema.as_arrow()),
        );
        Ok(self.push(Box::new(project), vec![node]))
    }

    pub(super) fn gap_fill_scan(
        &mut self,
        scan: &TableScan,
        filled: GapFillTable,
    ) -> Result<usize> {
        let table = filled.relation.clone();
        let schema = table.nullable_schema.clone();
        let mut node = self.whole_source(&table)?;
        if self.emit == Emit::OnWindowClose && !self.on_close_taken {
            self.on_close_taken = true;
            if !table.def.is_append_only() || !table.def.has_watermark() {
                return Err(Error::NotSupported(format!(
                    "EMIT ON WINDOW CLOSE over GAP_FILL needs an append-only input with a watermark; \"{}\" is not",
                    table.def.name
                )));
            }
            let hold =
                Hold::new(filled.spec.time_column, schema.clone())?.dropping_late(&self.view_name);
            node = self.push(Box::new(hold), vec![node]);
        }
        let partition = column_exprs(&schema, filled.spec.partition.iter().copied());
        let over = Over::new(
            partition,
            schema.clone(),
            schema.clone(),
            Evaluate::GapFill(filled.spec),
        )?;
        node = self.push(Box::new(over), vec![node]);
        self.scan_projection(scan, &schema, node)
    }
}
