//! SQL-language functions, as PostgreSQL's `CREATE FUNCTION ... LANGUAGE
//! SQL AS $$SELECT expr$$` (or `RETURN expr`) whose body is one expression
//! over the parameters. A call is replaced by the body, the arguments put
//! in for the parameters (DataFusion's `simplify`), so queries and views
//! plan it like any expression; the function itself is never evaluated.

use datafusion::arrow::datatypes::{DataType, Field, Schema};
use datafusion::common::DFSchema;
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::execution::SessionState;
use datafusion::logical_expr::simplify::{ExprSimplifyResult, SimplifyContext};
use datafusion::logical_expr::{
    ColumnarValue, Expr, ExprSchemable, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature,
    Volatility,
};
use datafusion::optimizer::analyzer::type_coercion::TypeCoercionRewriter;
use sqlparser::ast::{self, CreateFunctionBody, FunctionReturnType, SelectItem, SetExpr};

use crate::catalog::FunctionDef;
use crate::error::{Error, Result};

type DfResult<T> = datafusion::error::Result<T>;

/// The catalog's definition of a `CREATE FUNCTION` statement.
pub fn definition(create: &ast::CreateFunction, text: &str, owner: &str) -> Result<FunctionDef> {
    if create.or_replace || create.or_alter || create.temporary {
        return Err(Error::NotSupported(
            "CREATE OR REPLACE and TEMPORARY functions are not supported; DROP FUNCTION and create it again".into(),
        ));
    }
    let language = create.language.as_ref().map(|l| l.value.to_lowercase());
    if language.as_deref() != Some("sql") {
        return Err(Error::NotSupported(format!(
            "functions in LANGUAGE {} are not supported; write LANGUAGE SQL with one expression",
            language.unwrap_or_else(|| "(none)".into())
        )));
    }
    let returns = match &create.return_type {
        Some(FunctionReturnType::DataType(t)) => t.to_string(),
        Some(FunctionReturnType::SetOf(_)) => {
            return Err(Error::NotSupported(
                "functions that return a set are not supported".into(),
            ));
        }
        None => return Err(Error::Syntax("CREATE FUNCTION needs RETURNS type".into())),
    };
    let mut params = Vec::new();
    for arg in create.args.iter().flatten() {
        if arg.default_expr.is_some() || matches!(&arg.mode, Some(m) if *m != ast::ArgMode::In) {
            return Err(Error::NotSupported(
                "function parameters with defaults or OUT/INOUT modes are not supported".into(),
            ));
        }
        let name = arg.name.as_ref().map(|n| n.value.to_lowercase());
        params.push((name, arg.data_type.to_string()));
    }
    Ok(FunctionDef {
        name: super::parser::object_name(&create.name)?,
        params,
        returns,
        body: body_expression(create.function_body.as_ref())?,
        definition: text.to_string(),
        owner: owner.to_string(),
    })
}

/// The body's one expression: `RETURN expr`, or a string `SELECT expr`.
fn body_expression(body: Option<&CreateFunctionBody>) -> Result<String> {
    let refuse = || {
        Error::NotSupported(
            "a SQL function's body must be one expression: AS 'SELECT expr' or RETURN expr".into(),
        )
    };
    let text = match body {
        Some(CreateFunctionBody::Return(e) | CreateFunctionBody::AsReturnExpr(e)) => {
            return Ok(e.to_string());
        }
        Some(
            CreateFunctionBody::AsBeforeOptions { body: e, .. }
            | CreateFunctionBody::AsAfterOptions(e),
        ) => match e {
            ast::Expr::Value(v) => match &v.value {
                ast::Value::SingleQuotedString(s) => s.clone(),
                ast::Value::DollarQuotedString(d) => d.value.clone(),
                _ => return Err(refuse()),
            },
            _ => return Err(refuse()),
        },
        _ => return Err(refuse()),
    };
    let dialect = sqlparser::dialect::PostgreSqlDialect {};
    let statement =
        sqlparser::parser::Parser::parse_sql(&dialect, text.trim().trim_end_matches(';'))?
            .pop()
            .ok_or_else(refuse)?;
    let ast::Statement::Query(query) = statement else {
        return Err(refuse());
    };
    let SetExpr::Select(select) = query.body.as_ref() else {
        return Err(refuse());
    };
    match (select.from.is_empty(), select.projection.as_slice()) {
        (true, [SelectItem::UnnamedExpr(e) | SelectItem::ExprWithAlias { expr: e, .. }]) => {
            Ok(e.to_string())
        }
        _ => Err(refuse()),
    }
}

/// The function as DataFusion calls it.
pub fn udf(state: &SessionState, def: &FunctionDef) -> Result<ScalarUDF> {
    let types = def
        .params
        .iter()
        .map(|(_, t)| sql_type(state, t))
        .collect::<Result<Vec<_>>>()?;
    // Each parameter is a column of its type, by name and as `$n`, so that
    // the body is typed, and coerced, as it would be over such columns.
    let mut fields = Vec::new();
    for (i, ((name, _), t)) in def.params.iter().zip(&types).enumerate() {
        fields.push(Field::new(format!("${}", i + 1), t.clone(), true));
        if let Some(name) = name {
            fields.push(Field::new(name, t.clone(), true));
        }
    }
    let schema = DFSchema::try_from(Schema::new(fields))?;
    let positional = regex::Regex::new(r"\$(\d+)").map_err(|e| Error::Internal(e.to_string()))?;
    let text = positional.replace_all(&def.body, "\"$$$1\"");
    let body = state
        .create_logical_expr(&text, &schema)?
        .rewrite(&mut TypeCoercionRewriter::new(&schema))?
        .data;
    let returns = sql_type(state, &def.returns)?;
    body.get_type(&schema)?;
    Ok(ScalarUDF::new_from_impl(SqlFunction {
        name: def.name.clone(),
        signature: Signature::any(types.len(), Volatility::Immutable),
        params: def.params.iter().map(|(n, _)| n.clone()).collect(),
        types,
        returns,
        body,
    }))
}

/// A SQL type's Arrow type, as DataFusion's planner maps it.
fn sql_type(state: &SessionState, sql: &str) -> Result<DataType> {
    let empty = DFSchema::empty();
    let expr = state.create_logical_expr(&format!("CAST(NULL AS {sql})"), &empty)?;
    Ok(expr.get_type(&empty)?)
}

#[derive(Debug, PartialEq, Eq, Hash)]
struct SqlFunction {
    name: String,
    signature: Signature,
    params: Vec<Option<String>>,
    types: Vec<DataType>,
    returns: DataType,
    body: Expr,
}

impl SqlFunction {
    /// The argument standing for a parameter named `name`, or `$n`.
    fn argument<'a>(&self, args: &'a [Expr], expr: &Expr) -> Option<&'a Expr> {
        let Expr::Column(c) = expr else {
            return None;
        };
        if c.relation.is_some() {
            return None;
        }
        let at = match c
            .name
            .strip_prefix('$')
            .and_then(|n| n.parse::<usize>().ok())
        {
            Some(n) => n.checked_sub(1)?,
            None => self
                .params
                .iter()
                .position(|p| p.as_deref() == Some(c.name.as_str()))?,
        };
        args.get(at)
    }
}

impl ScalarUDFImpl for SqlFunction {
    fn name(&self) -> &str {
        &self.name
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _args: &[DataType]) -> DfResult<DataType> {
        Ok(self.returns.clone())
    }

    fn simplify(&self, args: Vec<Expr>, _info: &SimplifyContext) -> DfResult<ExprSimplifyResult> {
        let args: Vec<Expr> = args
            .into_iter()
            .zip(&self.types)
            .map(|(a, t)| Expr::Cast(datafusion::logical_expr::Cast::new(Box::new(a), t.clone())))
            .collect();
        let inlined = self
            .body
            .clone()
            .transform(|e| {
                Ok(match self.argument(&args, &e) {
                    Some(arg) => Transformed::yes(arg.clone()),
                    None => Transformed::no(e),
                })
            })?
            .data;
        let returned = Expr::Cast(datafusion::logical_expr::Cast::new(
            Box::new(inlined),
            self.returns.clone(),
        ));
        Ok(ExprSimplifyResult::Simplified(returned))
    }

    fn invoke_with_args(&self, _args: ScalarFunctionArgs) -> DfResult<ColumnarValue> {
        Err(datafusion::error::DataFusionError::Internal(format!(
            "SQL function {} was not inlined",
            self.name
        )))
    }
}

/// Whether `sql` calls a function named `name` (a word followed by `(`).
pub fn calls(sql: &str, name: &str) -> bool {
    let lower = sql.to_lowercase();
    let mut from = 0;
    while let Some(at) = lower[from..].find(name) {
        let start = from + at;
        let end = start + name.len();
        let before = lower[..start].chars().next_back();
        let word_start = before.is_none_or(|c| !(c.is_alphanumeric() || c == '_'));
        let call = lower[end..].trim_start().starts_with('(');
        if word_start && call {
            return true;
        }
        from = end;
    }
    false
}
