//! `t FOR SYSTEM_TIME AS OF PROCTIME()`: a table read as it is when each row
//! is processed. The parser turns the clause into the table function call
//! `lookup('t')`. A SELECT reads the table's current rows; a materialized
//! view's planner recognises [`LookupTable`] on one side of a join and
//! builds a lookup join, which keeps no state.

use std::sync::Arc;

use async_trait::async_trait;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::catalog::{Session, TableFunctionArgs, TableFunctionImpl, TableProvider};
use datafusion::datasource::{TableType, source_as_provider};
use datafusion::logical_expr::{Expr, TableScan};
use datafusion::physical_plan::ExecutionPlan;

use crate::catalog::{Catalog, Table};
use crate::error::Error;
use crate::log::writer::Writer;
use crate::sql::provider::TableSource;
use crate::sql::window::name_argument;
use crate::state::Store;

type DfResult<T> = datafusion::error::Result<T>;

pub const FUNCTION: &str = "lookup";

#[derive(Debug)]
pub struct LookupFunction {
    catalog: Arc<Catalog>,
    store: Arc<Store>,
    writer: Writer,
}

impl LookupFunction {
    pub fn new(catalog: Arc<Catalog>, store: Arc<Store>, writer: Writer) -> Self {
        LookupFunction {
            catalog,
            store,
            writer,
        }
    }

    fn build(&self, args: &[Expr]) -> crate::Result<LookupTable> {
        let [relation] = args else {
            return Err(Error::InvalidParameter(
                "use FOR SYSTEM_TIME AS OF PROCTIME() after a table name".into(),
            ));
        };
        let name = name_argument(relation, "table")?;
        let table = self
            .catalog
            .relation(&name)
            .ok_or_else(|| Error::UndefinedTable(name.clone()))?;
        // A keyed append-only table keeps its rows, as do views; a plain
        // append-only table has only its log.
        if table.def.storage == crate::catalog::Storage::AppendOnly {
            return Err(Error::NotSupported(format!(
                "FOR SYSTEM_TIME AS OF PROCTIME() looks rows up in a table with a primary key or a materialized view; \"{name}\" is append-only"
            )));
        }
        Ok(LookupTable {
            source: Arc::new(TableSource::new(
                table.clone(),
                self.store.clone(),
                self.writer.clone(),
            )),
            relation: table,
        })
    }
}

impl TableFunctionImpl for LookupFunction {
    fn call_with_args(&self, args: TableFunctionArgs) -> DfResult<Arc<dyn TableProvider>> {
        Ok(Arc::new(self.build(args.exprs())?))
    }
}

/// A relation read as of processing time.
#[derive(Debug, Clone)]
pub struct LookupTable {
    pub relation: Arc<Table>,
    source: Arc<TableSource>,
}

#[async_trait]
impl TableProvider for LookupTable {
    fn schema(&self) -> SchemaRef {
        self.relation.schema.clone()
    }

    fn table_type(&self) -> TableType {
        TableType::Temporary
    }

    async fn scan(
        &self,
        state: &dyn Session,
        projection: Option<&Vec<usize>>,
        filters: &[Expr],
        limit: Option<usize>,
    ) -> DfResult<Arc<dyn ExecutionPlan>> {
        self.source.scan(state, projection, filters, limit).await
    }
}

/// The lookup table a scan reads, if it reads one.
pub fn lookup_of(scan: &TableScan) -> Option<LookupTable> {
    let provider = source_as_provider(&scan.source).ok()?;
    provider.downcast_ref::<LookupTable>().cloned()
}
