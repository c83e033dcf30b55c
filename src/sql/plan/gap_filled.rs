//! `GAP_FILL(...)` in a materialized view: the relation's rows, kept per
//! partition by the `Over` operator and filled again whenever a partition
//! changes. Under `EMIT ON WINDOW CLOSE` rows are first held until the
//! watermark passes them, so the view fills only final rows and what it
//! shows never changes.

use datafusion::logical_expr::TableScan;

use super::{Planner, column_exprs};
use crate::catalog::{Emit, nullable};
use crate::dataflow::graph::Source;
use crate::dataflow::operators::over::{Evaluate, Over};
use crate::dataflow::operators::{Hold, Project};
use crate::error::{Error, Result};
use crate::sql::gap_fill::GapFillTable;
use crate::state::rows::projected::Projection;

impl Planner<'_> {
    pub(super) fn gap_fill_scan(
        &mut self,
        scan: &TableScan,
        filled: GapFillTable,
    ) -> Result<usize> {
        let table = filled.relation.clone();
        let schema = table.nullable_schema.clone();
        let width = schema.fields().len();
        let read = Project::new(column_exprs(&schema, 0..width), schema.clone());
        let mut node = self.push(Box::new(read), Vec::new());
        self.sources.push(Source {
            projection: Projection::new(table.codec.schema(), &(0..width).collect::<Vec<_>>())?,
            table: table.clone(),
            node,
            whole_rows: None,
        });
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
        let columns: Vec<usize> = match &scan.projection {
            Some(p) => p.clone(),
            None => (0..width).collect(),
        };
        let project = Project::new(
            column_exprs(&schema, columns),
            nullable(scan.projected_schema.as_arrow()),
        );
        Ok(self.push(Box::new(project), vec![node]))
    }
}
