//! `WITH c AS changelog FROM t`: the changes of a table or materialized
//! view as rows, each with `changelog_op` (see
//! `dataflow::operators::changelog`). The parser turns the clause into
//! `c AS (SELECT * FROM changelog_of('t'))`; a materialized view's planner
//! recognises the provider and reads `t`'s log through the changelog
//! operator. A plain SELECT has no changes to read, and is refused.

use std::sync::Arc;

use async_trait::async_trait;
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::catalog::{Session, TableFunctionArgs, TableFunctionImpl, TableProvider};
use datafusion::datasource::{TableType, source_as_provider};
use datafusion::logical_expr::{Expr, TableScan};
use datafusion::physical_plan::ExecutionPlan;

use crate::catalog::{Catalog, Table};
use crate::error::Error;
use crate::sql::window::name_argument;

type DfResult<T> = datafusion::error::Result<T>;

pub const FUNCTION: &str = "changelog_of";

/// The column each change's kind is in.
pub const OP_COLUMN: &str = "changelog_op";

#[derive(Debug)]
pub struct ChangelogFunction {
    catalog: Arc<Catalog>,
}

impl ChangelogFunction {
    pub fn new(catalog: Arc<Catalog>) -> ChangelogFunction {
        ChangelogFunction { catalog }
    }
}

impl TableFunctionImpl for ChangelogFunction {
    fn call_with_args(&self, args: TableFunctionArgs) -> DfResult<Arc<dyn TableProvider>> {
        let [relation] = args.exprs() else {
            return Err(Error::InvalidParameter("changelog FROM takes one relation".into()).into());
        };
        let name = name_argument(relation, "relation")?;
        let relation = self
            .catalog
            .relation(&name)
            .ok_or_else(|| Error::UndefinedTable(name.clone()))?;
        if relation.schema.index_of(OP_COLUMN).is_ok() {
            return Err(Error::DuplicateColumn(format!(
                "\"{name}\" has a column \"{OP_COLUMN}\" already; rename it in a view first"
            ))
            .into());
        }
        Ok(Arc::new(ChangelogTable::new(relation)))
    }
}

/// A relation's changes, as rows.
#[derive(Debug, Clone)]
pub struct ChangelogTable {
    pub relation: Arc<Table>,
    schema: SchemaRef,
}

impl ChangelogTable {
    fn new(relation: Arc<Table>) -> ChangelogTable {
        let mut fields: Vec<Field> = relation
            .nullable_schema
            .fields()
            .iter()
            .map(|f| f.as_ref().clone())
            .collect();
        fields.push(Field::new(OP_COLUMN, DataType::Int16, false));
        ChangelogTable {
            relation,
            schema: Arc::new(Schema::new(fields)),
        }
    }

    pub fn schema(&self) -> SchemaRef {
        self.schema.clone()
    }
}

#[async_trait]
impl TableProvider for ChangelogTable {
    fn schema(&self) -> SchemaRef {
        self.schema.clone()
    }

    fn table_type(&self) -> TableType {
        TableType::Temporary
    }

    async fn scan(
        &self,
        _state: &dyn Session,
        _projection: Option<&Vec<usize>>,
        _filters: &[Expr],
        _limit: Option<usize>,
    ) -> DfResult<Arc<dyn ExecutionPlan>> {
        Err(Error::NotSupported(format!(
            "the changelog of \"{}\" is read only by a materialized view: CREATE MATERIALIZED VIEW ... AS WITH c AS changelog FROM {} SELECT ...",
            self.relation.def.name, self.relation.def.name
        ))
        .into())
    }
}

/// The changelog a scan reads, if it reads one.
pub fn changelog_of(scan: &TableScan) -> Option<ChangelogTable> {
    let provider = source_as_provider(&scan.source).ok()?;
    provider.downcast_ref::<ChangelogTable>().cloned()
}
