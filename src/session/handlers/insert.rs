//! The fast path for `INSERT INTO t [(columns)] VALUES (...), ...` whose values
//! are literals or parameters: the rows are built directly, without planning
//! a query. Values are converted with DataFusion's `ScalarValue` casts, the
//! same casts the planned path would insert. Anything else (expressions,
//! `INSERT ... SELECT`, `RETURNING`, ...) goes through DataFusion.

use std::sync::Arc;

use datafusion::arrow::array::{ArrayRef, RecordBatch, new_empty_array, new_null_array};
use datafusion::arrow::datatypes::DataType;
use datafusion::common::{ParamValues, ScalarValue};
use sqlparser::ast;

use crate::catalog::Table;
use crate::error::{Error, Result};
use crate::session::{Engine, Output};
use crate::sql::parser::object_name;
use crate::sql::write;

/// A VALUES insert the fast path can take.
pub struct ValuesInsert<'a> {
    pub table: Arc<Table>,
    /// Table column index of each value position.
    columns: Vec<usize>,
    rows: Vec<&'a [ast::Expr]>,
}

/// Recognise a simple VALUES insert; `None` sends the statement to DataFusion.
pub fn recognise<'a>(engine: &Engine, statement: &'a ast::Statement) -> Option<ValuesInsert<'a>> {
    let ast::Statement::Insert(insert) = statement else {
        return None;
    };
    if insert.returning.is_some()
        || insert.on.is_some()
        || insert.overwrite
        || !insert.assignments.is_empty()
    {
        return None;
    }
    let ast::TableObject::TableName(name) = &insert.table else {
        return None;
    };
    let table = engine.catalog.table(&object_name(name).ok()?)?;
    let source = insert.source.as_ref()?;
    if source.with.is_some() || source.order_by.is_some() || source.limit_clause.is_some() {
        return None;
    }
    let ast::SetExpr::Values(values) = source.body.as_ref() else {
        return None;
    };
    let columns = if insert.columns.is_empty() {
        (0..table.def.columns.len()).collect()
    } else {
        insert
            .columns
            .iter()
            .map(|c| {
                let name = object_name(c).ok()?;
                table.def.columns.iter().position(|d| d.name == name)
            })
            .collect::<Option<Vec<_>>>()?
    };
    // A column named twice is the planner's error to report.
    if (1..columns.len()).any(|i| columns[..i].contains(&columns[i])) {
        return None;
    }
    let rows: Vec<&[ast::Expr]> = values.rows.iter().map(|r| r.content.as_slice()).collect();
    if rows
        .iter()
        .any(|r| r.len() != columns.len() || !r.iter().all(is_simple))
    {
        return None;
    }
    Some(ValuesInsert {
        table,
        columns,
        rows,
    })
}

fn is_simple(expr: &ast::Expr) -> bool {
    match expr {
        ast::Expr::Value(v) => matches!(
            v.value,
            ast::Value::Number(..)
                | ast::Value::SingleQuotedString(_)
                | ast::Value::Boolean(_)
                | ast::Value::Null
                | ast::Value::Placeholder(_)
        ),
        ast::Expr::UnaryOp {
            op: ast::UnaryOperator::Minus,
            expr,
        } => {
            matches!(expr.as_ref(), ast::Expr::Value(v) if matches!(v.value, ast::Value::Number(..)))
        }
        _ => false,
    }
}

impl ValuesInsert<'_> {
    /// The parameter types, `$1` first: each parameter takes its column's type.
    pub fn parameter_types(&self) -> Vec<Option<DataType>> {
        let mut types: Vec<(usize, DataType)> = Vec::new();
        for row in &self.rows {
            for (expr, column) in row.iter().zip(&self.columns) {
                if let Some(n) = placeholder(expr) {
                    types.push((n, self.table.schema.field(*column).data_type().clone()));
                }
            }
        }
        types.sort_by_key(|(n, _)| *n);
        types.dedup_by_key(|(n, _)| *n);
        let width = types.last().map_or(0, |(n, _)| *n);
        (1..=width)
            .map(|n| types.iter().find(|(m, _)| *m == n).map(|(_, t)| t.clone()))
            .collect()
    }

    pub async fn run(&self, engine: &Engine, params: Option<&ParamValues>) -> Result<Output> {
        let batch = self.batch(params)?;
        let count = write::insert_batches(&self.table, &engine.writer, &[batch]).await?;
        Ok(Output::with_rows("INSERT", count))
    }

    fn batch(&self, params: Option<&ParamValues>) -> Result<RecordBatch> {
        let schema = &self.table.schema;
        let rows = self.rows.len();
        let columns: Vec<ArrayRef> = schema
            .fields()
            .iter()
            .enumerate()
            .map(|(column, field)| match self.position_of(column) {
                Some(at) => self.column(at, column, field.data_type(), params),
                None => Ok(new_null_array(field.data_type(), rows)),
            })
            .collect::<Result<_>>()?;
        Ok(RecordBatch::try_new(
            self.table.nullable_schema.clone(),
            columns,
        )?)
    }

    /// Where the statement gives values for table column `column`.
    fn position_of(&self, column: usize) -> Option<usize> {
        self.columns.iter().position(|c| *c == column)
    }

    /// The values at position `at` of every row, cast to the column's type.
    fn column(
        &self,
        at: usize,
        column: usize,
        target: &DataType,
        params: Option<&ParamValues>,
    ) -> Result<ArrayRef> {
        let sql_type = &self.table.def.columns[column].sql_type;
        let value = |row: &[ast::Expr]| cast(literal(&row[at], params)?, target, sql_type);
        // A single row, the common case, skips the general conversion.
        if let [row] = self.rows.as_slice() {
            return Ok(value(row)?.to_array_of_size(1)?);
        }
        let values = self
            .rows
            .iter()
            .map(|row| value(row))
            .collect::<Result<Vec<_>>>()?;
        if values.is_empty() {
            return Ok(new_empty_array(target));
        }
        Ok(ScalarValue::iter_to_array(values)?)
    }
}

fn placeholder(expr: &ast::Expr) -> Option<usize> {
    match expr {
        ast::Expr::Value(v) => match &v.value {
            ast::Value::Placeholder(p) => p.strip_prefix('$')?.parse().ok(),
            _ => None,
        },
        _ => None,
    }
}

fn literal(expr: &ast::Expr, params: Option<&ParamValues>) -> Result<ScalarValue> {
    match expr {
        ast::Expr::UnaryOp { expr, .. } => match literal(expr, params)? {
            ScalarValue::Int64(Some(v)) => Ok(ScalarValue::Int64(Some(-v))),
            ScalarValue::Float64(Some(v)) => Ok(ScalarValue::Float64(Some(-v))),
            ScalarValue::Utf8(Some(v)) => Ok(ScalarValue::Utf8(Some(format!("-{v}")))),
            other => Err(Error::InvalidInput(format!("cannot negate {other}"))),
        },
        ast::Expr::Value(v) => match &v.value {
            ast::Value::Number(n, _) => Ok(number(n)),
            ast::Value::SingleQuotedString(s) => Ok(ScalarValue::Utf8(Some(s.clone()))),
            ast::Value::Boolean(b) => Ok(ScalarValue::Boolean(Some(*b))),
            ast::Value::Null => Ok(ScalarValue::Null),
            ast::Value::Placeholder(p) => {
                let params = params.ok_or_else(|| {
                    Error::InvalidParameter(format!("no value for parameter {p}"))
                })?;
                Ok(params.get_placeholders_with_values(p)?.value().clone())
            }
            other => Err(Error::Internal(format!("unexpected literal {other}"))),
        },
        other => Err(Error::Internal(format!("unexpected expression {other}"))),
    }
}

/// Integers stay exact; anything else parses as a float, as in the planned path.
fn number(text: &str) -> ScalarValue {
    match text.parse::<i64>() {
        Ok(i) => ScalarValue::Int64(Some(i)),
        Err(_) => match text.parse::<f64>() {
            Ok(f) => ScalarValue::Float64(Some(f)),
            Err(_) => ScalarValue::Utf8(Some(text.to_string())),
        },
    }
}

fn cast(value: ScalarValue, target: &DataType, sql_type: &str) -> Result<ScalarValue> {
    if value.is_null() {
        return Ok(ScalarValue::try_from(target)?);
    }
    if value.data_type() == *target {
        return Ok(value);
    }
    if let (ScalarValue::Utf8(Some(text)), true) =
        (&value, crate::sql::datetime::is_datetime(target))
    {
        return crate::sql::datetime::parse(text, target);
    }
    let shown = value.to_string();
    let numeric = value.data_type().is_numeric();
    let array = value.to_array()?;
    let options = datafusion::arrow::compute::CastOptions {
        safe: false,
        format_options: Default::default(),
    };
    let cast =
        datafusion::arrow::compute::cast_with_options(&array, target, &options).map_err(|e| {
            if numeric && target.is_numeric() {
                Error::OutOfRange(format!("value {shown} is out of range for type {sql_type}"))
            } else {
                Error::InvalidInput(format!(
                    "invalid input syntax for type {sql_type}: \"{shown}\" ({e})"
                ))
            }
        })?;
    Ok(ScalarValue::try_from_array(&cast, 0)?)
}
