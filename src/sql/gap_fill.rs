//! `GAP_FILL(t, ts, step [, LOCF(c) | INTERPOLATE(c) | KEEPNULL(c) ...]
//! [, PARTITION_BY(p, ...)])` in FROM, as RisingWave has it: the rows of
//! `t`, and between two rows of a partition that are more than `step`
//! apart, one made-up row at every `step` after the first. A made-up row
//! carries its partition's values, NULL in the columns named nowhere or in
//! KEEPNULL, the value of the row before in LOCF columns, and in
//! INTERPOLATE columns the value on the straight line between the rows
//! around it. Rows without a time pass through and fill nothing.
//!
//! A SELECT reads it through [`GapFillTable`]'s scan; a materialized view
//! keeps each partition's rows and fills them again whenever they change
//! (the `Over` operator with [`GapFill`]), so a row that lands in a gap
//! takes the made-up rows there back.

use std::sync::Arc;

use async_trait::async_trait;
use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::compute::concat_batches;
use datafusion::arrow::datatypes::{DataType, SchemaRef};
use datafusion::catalog::{Session, TableFunctionArgs, TableFunctionImpl, TableProvider};
use datafusion::datasource::{TableType, source_as_provider};
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::logical_expr::{
    ColumnarValue, Expr, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, TableScan,
    Volatility,
};
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::streaming::PartitionStream;
use datafusion::physical_plan::{ExecutionPlan, execute_stream};
use futures::TryStreamExt;

use crate::catalog::{Catalog, Table};
use crate::dataflow::gap_fill::{Fill, GapFill};
use crate::dataflow::window::interval_micros;
use crate::error::{Error, Result};
use crate::log::writer::Writer;
use crate::sql::provider::TableSource;
use crate::sql::window::name_argument;
use crate::state::Store;

type DfResult<T> = datafusion::error::Result<T>;

pub const FUNCTION: &str = "gap_fill";

/// The calls that name a fill strategy or the partition inside GAP_FILL.
const ARGUMENTS: [&str; 4] = ["locf", "interpolate", "keepnull", "partition_by"];

/// The table function, for registration.
#[derive(Debug)]
pub struct GapFillFunction {
    catalog: Arc<Catalog>,
    store: Arc<Store>,
    writer: Writer,
}

impl GapFillFunction {
    pub fn new(catalog: Arc<Catalog>, store: Arc<Store>, writer: Writer) -> GapFillFunction {
        GapFillFunction {
            catalog,
            store,
            writer,
        }
    }

    fn build(&self, args: &[Expr]) -> Result<GapFillTable> {
        const USAGE: &str = "GAP_FILL(table, time_column, step [, LOCF(column) | INTERPOLATE(column) | KEEPNULL(column) ...] [, PARTITION_BY(column, ...)])";
        let [relation, time, step, rest @ ..] = args else {
            return Err(Error::InvalidParameter(format!(
                "missing arguments; use {USAGE}"
            )));
        };
        let relation = name_argument(relation, "table")?;
        let table = self
            .catalog
            .relation(&relation)
            .ok_or_else(|| Error::UndefinedTable(relation.clone()))?;
        let time_column = column_of(&table, &name_argument(time, "time column")?)?;
        if !matches!(
            table.schema.field(time_column).data_type(),
            DataType::Timestamp(..) | DataType::Date32
        ) {
            return Err(Error::DatatypeMismatch(format!(
                "the time column of GAP_FILL must be a timestamp; \"{}\" is {}",
                table.schema.field(time_column).name(),
                table.schema.field(time_column).data_type()
            )));
        }
        let step = match step {
            Expr::Literal(value, _) => interval_micros("step", value)?,
            other => {
                return Err(Error::InvalidParameter(format!(
                    "the step of GAP_FILL must be a constant interval, not {other}"
                )));
            }
        };
        let mut spec = GapFill {
            time_column,
            step,
            fills: vec![Fill::Null; table.schema.fields().len()],
            partition: Vec::new(),
        };
        for arg in rest {
            strategy(&table, &mut spec, arg, USAGE)?;
        }
        Ok(GapFillTable {
            source: Arc::new(TableSource::new(
                table.clone(),
                self.store.clone(),
                self.writer.clone(),
            )),
            relation: table,
            spec,
        })
    }
}

/// Apply one `LOCF(c)`, `INTERPOLATE(c)`, `KEEPNULL(c)` or `PARTITION_BY(...)` argument.
fn strategy(table: &Table, spec: &mut GapFill, arg: &Expr, usage: &str) -> Result<()> {
    let Expr::ScalarFunction(call) = arg else {
        return Err(Error::InvalidParameter(format!(
            "unexpected GAP_FILL argument {arg}; use {usage}"
        )));
    };
    let name = call.func.name();
    let columns = call
        .args
        .iter()
        .map(|a| column_of(table, &name_argument(a, "column")?))
        .collect::<Result<Vec<_>>>()?;
    if name == "partition_by" {
        spec.partition.extend(columns);
        return Ok(());
    }
    let fill = match name {
        "locf" => Fill::Locf,
        "interpolate" => Fill::Interpolate,
        "keepnull" => Fill::Null,
        _ => {
            return Err(Error::InvalidParameter(format!(
                "unexpected GAP_FILL argument {name}(); use {usage}"
            )));
        }
    };
    let [column] = columns[..] else {
        return Err(Error::InvalidParameter(format!(
            "{}() takes one column",
            name.to_uppercase()
        )));
    };
    if column == spec.time_column {
        return Err(Error::InvalidParameter(
            "the time column of GAP_FILL is filled with the step; name it in no fill strategy"
                .into(),
        ));
    }
    let data_type = table.schema.field(column).data_type();
    if fill == Fill::Interpolate && !data_type.is_numeric() {
        return Err(Error::DatatypeMismatch(format!(
            "INTERPOLATE needs a numeric column; \"{}\" is {data_type}",
            table.schema.field(column).name()
        )));
    }
    spec.fills[column] = fill;
    Ok(())
}

fn column_of(table: &Table, name: &str) -> Result<usize> {
    table.schema.index_of(name).map_err(|_| {
        Error::UndefinedColumn(format!(
            "column \"{name}\" does not exist in \"{}\"",
            table.def.name
        ))
    })
}

impl TableFunctionImpl for GapFillFunction {
    fn call_with_args(&self, args: TableFunctionArgs) -> DfResult<Arc<dyn TableProvider>> {
        Ok(Arc::new(self.build(args.exprs())?))
    }
}

/// A relation with its gaps filled.
#[derive(Debug, Clone)]
pub struct GapFillTable {
    pub relation: Arc<Table>,
    pub spec: GapFill,
    source: Arc<TableSource>,
}

#[async_trait]
impl TableProvider for GapFillTable {
    fn schema(&self) -> SchemaRef {
        self.relation.nullable_schema.clone()
    }

    fn table_type(&self) -> TableType {
        TableType::Temporary
    }

    async fn scan(
        &self,
        state: &dyn Session,
        projection: Option<&Vec<usize>>,
        _filters: &[Expr],
        limit: Option<usize>,
    ) -> DfResult<Arc<dyn ExecutionPlan>> {
        let input = self.source.scan(state, None, &[], None).await?;
        let scan = GapFillScan {
            input,
            schema: self.schema(),
            table: self.clone(),
        };
        crate::sql::provider::streams_exec(self.schema(), vec![Arc::new(scan)], projection, limit)
    }
}

#[derive(Debug)]
struct GapFillScan {
    input: Arc<dyn ExecutionPlan>,
    /// The relation's, every column nullable.
    schema: SchemaRef,
    table: GapFillTable,
}

impl PartitionStream for GapFillScan {
    fn schema(&self) -> &SchemaRef {
        &self.schema
    }

    fn execute(&self, ctx: Arc<TaskContext>) -> SendableRecordBatchStream {
        let table = self.table.clone();
        let schema = self.schema.clone();
        let input = execute_stream(self.input.clone(), ctx);
        let all = async move {
            let batches: Vec<RecordBatch> = input?.try_collect().await?;
            let rows = concat_batches(&schema, &batches)?;
            Ok(table.spec.fill(&rows)?)
        };
        let stream = futures::stream::once(all);
        Box::pin(RecordBatchStreamAdapter::new(self.schema.clone(), stream))
    }
}

/// The gap-filled relation a scan reads, if it reads one.
pub fn gap_fill_of(scan: &TableScan) -> Option<GapFillTable> {
    let provider = source_as_provider(&scan.source).ok()?;
    provider.downcast_ref::<GapFillTable>().cloned()
}

/// `LOCF(c)` and the like, which mean something only as arguments of
/// GAP_FILL: the planner must know them to read the call.
pub fn argument_functions() -> Vec<ScalarUDF> {
    ARGUMENTS
        .iter()
        .map(|name| ScalarUDF::new_from_impl(Argument::new(name)))
        .collect()
}

#[derive(Debug, PartialEq, Eq, Hash)]
struct Argument {
    name: &'static str,
    signature: Signature,
}

impl Argument {
    fn new(name: &'static str) -> Argument {
        Argument {
            name,
            signature: Signature::variadic_any(Volatility::Immutable),
        }
    }
}

impl ScalarUDFImpl for Argument {
    fn name(&self) -> &str {
        self.name
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, args: &[DataType]) -> DfResult<DataType> {
        Ok(args.first().cloned().unwrap_or(DataType::Null))
    }

    fn invoke_with_args(&self, _args: ScalarFunctionArgs) -> DfResult<ColumnarValue> {
        // "Invalid function" is DataFusion's wording for 42883.
        Err(datafusion::error::DataFusionError::Plan(format!(
            "Invalid function '{}': {}() is only an argument of GAP_FILL(...) in FROM",
            self.name,
            self.name.to_uppercase()
        )))
    }
}
