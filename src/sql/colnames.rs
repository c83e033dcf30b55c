//! Result column names as PostgreSQL gives them.
//!
//! DataFusion names an unaliased select-list expression after its whole
//! text (`count(*)`, `sum(t.v)`, `Int64(1)`) and refuses two result columns
//! of one name. PostgreSQL names such a column after its function, column
//! or cast type (`count`, `sum`, `int4`), `?column?` when there is none, and
//! allows repeats (`SELECT a, a`). Before planning, the outermost SELECT's
//! unnamed expressions and repeated names get unique aliases; the result
//! then carries the names PostgreSQL would give in their place. Subqueries
//! are left alone: their names are what outer queries refer to.

use std::collections::{HashMap, HashSet};
use std::ops::ControlFlow;
use std::sync::Arc;

use datafusion::arrow::datatypes::{Field, Schema, SchemaRef};
use sqlparser::ast::{
    self, Expr, Ident, Query, SelectItem, SetExpr, Statement, TableFactor, VisitMut, VisitorMut,
};

const ALIAS: &str = "__weir_column_";

/// The names to put in place of the aliases a rewrite gave.
#[derive(Debug, Default, Clone)]
pub struct Names {
    renamed: Vec<(String, String)>,
}

impl Names {
    /// `schema` with every alias of the rewrite replaced by its name.
    pub fn apply(&self, schema: SchemaRef) -> SchemaRef {
        if self.renamed.is_empty() {
            return schema;
        }
        let fields: Vec<Field> = schema
            .fields()
            .iter()
            .map(
                |field| match self.renamed.iter().find(|(a, _)| a == field.name()) {
                    Some((_, name)) => field.as_ref().clone().with_name(name),
                    None => field.as_ref().clone(),
                },
            )
            .collect();
        Arc::new(Schema::new_with_metadata(fields, schema.metadata().clone()))
    }
}

/// Alias the outermost SELECT's unnamed expressions and repeated names of
/// a query, or of an INSERT's source query.
pub fn rewrite(statement: &mut Statement) -> Names {
    let query = match statement {
        Statement::Query(query) => query,
        Statement::Insert(insert) => match insert.source.as_mut() {
            Some(query) => query,
            None => return Names::default(),
        },
        _ => return Names::default(),
    };
    let SetExpr::Select(select) = query.body.as_mut() else {
        return Names::default();
    };
    let (names, moved) = alias_items(&mut select.projection);
    // ORDER BY an aliased expression sorts by its alias, as it would by the
    // expression, which SELECT DISTINCT requires.
    if let Some(ast::OrderBy {
        kind: ast::OrderByKind::Expressions(keys),
        ..
    }) = query.order_by.as_mut()
    {
        for key in keys.iter_mut() {
            let text = key.expr.to_string();
            if let Some((_, alias)) = moved.iter().find(|(expr, _)| *expr == text) {
                key.expr = Expr::Identifier(Ident::new(alias));
            }
        }
    }
    names
}

/// Name the unnamed expressions of derived tables and CTEs as PostgreSQL
/// does, which is how outer queries refer to them:
/// `SELECT count FROM (SELECT count(*) FROM t) AS s`. DataFusion would name
/// that column `count(*)`. Expressions without a name of their own
/// (`?column?`), and names the select list repeats, are left as they are.
pub fn name_derived_columns(statement: &mut Statement) {
    struct Naming;
    impl VisitorMut for Naming {
        type Break = ();

        fn pre_visit_table_factor(&mut self, factor: &mut TableFactor) -> ControlFlow<()> {
            if let TableFactor::Derived { subquery, .. } = factor {
                name_outputs(subquery);
            }
            ControlFlow::Continue(())
        }

        fn pre_visit_query(&mut self, query: &mut Query) -> ControlFlow<()> {
            if let Some(with) = query.with.as_mut() {
                for cte in with.cte_tables.iter_mut() {
                    name_outputs(&mut cte.query);
                }
            }
            ControlFlow::Continue(())
        }
    }
    let _ = statement.visit(&mut Naming);
}

fn name_outputs(query: &mut Query) {
    let SetExpr::Select(select) = query.body.as_mut() else {
        return;
    };
    let mut uses: HashMap<String, usize> = HashMap::new();
    for item in &select.projection {
        let name = match item {
            SelectItem::UnnamedExpr(expr) => figure(expr).0,
            SelectItem::ExprWithAlias { alias, .. } => folded(alias),
            _ => continue,
        };
        *uses.entry(name).or_default() += 1;
    }
    for item in select.projection.iter_mut() {
        let SelectItem::UnnamedExpr(expr) = item else {
            continue;
        };
        if matches!(expr, Expr::Identifier(_) | Expr::CompoundIdentifier(_)) {
            continue;
        }
        let (name, strength) = figure(expr);
        if strength > 0 && uses.get(&name) == Some(&1) {
            *item = aliased(expr.clone(), &name);
        }
    }
}

/// Alias a select list's unnamed expressions and repeated names; the names
/// they stand for, and each aliased unnamed expression's text.
fn alias_items(projection: &mut [SelectItem]) -> (Names, Vec<(String, String)>) {
    let mut seen = HashSet::new();
    let mut names = Names::default();
    let mut moved = Vec::new();
    for (i, item) in projection.iter_mut().enumerate() {
        let alias = format!("{ALIAS}{i}");
        match item {
            SelectItem::UnnamedExpr(expr @ (Expr::Identifier(_) | Expr::CompoundIdentifier(_))) => {
                let name = figure(expr).0;
                if !seen.insert(name.clone()) {
                    names.renamed.push((alias.clone(), name));
                    *item = aliased(expr.clone(), &alias);
                }
            }
            SelectItem::UnnamedExpr(expr) => {
                names.renamed.push((alias.clone(), figure(expr).0));
                moved.push((expr.to_string(), alias.clone()));
                *item = aliased(expr.clone(), &alias);
            }
            SelectItem::ExprWithAlias { alias: given, .. } => {
                let name = folded(given);
                if !seen.insert(name.clone()) {
                    names.renamed.push((alias.clone(), name));
                    *given = Ident::new(alias);
                }
            }
            SelectItem::ExprWithAliases { .. }
            | SelectItem::Wildcard(_)
            | SelectItem::QualifiedWildcard(..) => {}
        }
    }
    (names, moved)
}

fn aliased(expr: Expr, alias: &str) -> SelectItem {
    SelectItem::ExprWithAlias {
        expr,
        alias: Ident::new(alias),
    }
}

/// An identifier as the catalog knows it: folded to lower case unless quoted.
pub(crate) fn folded(ident: &Ident) -> String {
    match ident.quote_style {
        Some(_) => ident.value.clone(),
        None => ident.value.to_lowercase(),
    }
}

/// PostgreSQL's name for an expression and how strongly it holds: a cast
/// keeps the name of a column or function under it, and takes its type's
/// name over a weaker one (`FigureColname` in PostgreSQL's parser).
pub(crate) fn figure(expr: &Expr) -> (String, u8) {
    match expr {
        Expr::Identifier(ident) => (folded(ident), 2),
        Expr::CompoundIdentifier(parts) => match parts.last() {
            Some(last) => (folded(last), 2),
            None => unnamed(),
        },
        Expr::Function(function) => match function.name.0.last() {
            Some(ast::ObjectNamePart::Identifier(ident)) => (folded(ident), 2),
            _ => unnamed(),
        },
        Expr::Nested(inner) => figure(inner),
        Expr::Cast {
            expr, data_type, ..
        } => match figure(expr) {
            (name, strength) if strength > 1 => (name, strength),
            _ => (type_name(data_type), 1),
        },
        Expr::TypedString(typed) => (type_name(&typed.data_type), 1),
        Expr::Case { .. } => ("case".into(), 1),
        Expr::Array(_) => ("array".into(), 2),
        Expr::Exists { .. } => ("exists".into(), 2),
        Expr::Extract { .. } => ("extract".into(), 2),
        Expr::Substring { .. } => ("substring".into(), 2),
        Expr::Position { .. } => ("position".into(), 2),
        Expr::Trim { .. } => ("btrim".into(), 2),
        Expr::Ceil { .. } => ("ceil".into(), 2),
        Expr::Floor { .. } => ("floor".into(), 2),
        _ => unnamed(),
    }
}

fn unnamed() -> (String, u8) {
    ("?column?".into(), 0)
}

/// A type's name in `pg_type`, which is what PostgreSQL calls a cast's column.
fn type_name(data_type: &ast::DataType) -> String {
    use ast::DataType as T;
    match data_type {
        T::SmallInt(_) | T::Int2(_) => "int2".into(),
        T::Int(_) | T::Integer(_) | T::Int4(_) => "int4".into(),
        T::BigInt(_) | T::Int8(_) => "int8".into(),
        T::Real | T::Float4 => "float4".into(),
        T::Double(_) | T::DoublePrecision | T::Float8 => "float8".into(),
        T::Boolean | T::Bool => "bool".into(),
        T::Varchar(_) | T::CharacterVarying(_) => "varchar".into(),
        T::Char(_) | T::Character(_) => "bpchar".into(),
        T::Numeric(_) | T::Decimal(_) => "numeric".into(),
        T::Timestamp(_, ast::TimezoneInfo::Tz | ast::TimezoneInfo::WithTimeZone) => {
            "timestamptz".into()
        }
        T::Timestamp(..) => "timestamp".into(),
        other => other.to_string().to_lowercase(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(sql: &str) -> (String, Vec<(String, String)>) {
        let dialect = sqlparser::dialect::PostgreSqlDialect {};
        let mut statement = sqlparser::parser::Parser::parse_sql(&dialect, sql)
            .expect("parses")
            .remove(0);
        let names = rewrite(&mut statement);
        (statement.to_string(), names.renamed)
    }

    fn renamed(pairs: &[(usize, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(i, name)| (format!("{ALIAS}{i}"), name.to_string()))
            .collect()
    }

    #[test]
    fn unnamed_expressions_take_the_names_postgres_gives_them() {
        let (_, renamed_to) = names(
            "SELECT count(*), sum(t.v), 1, v::text, '1'::int, CAST(k + 1 AS BIGINT), \
             CASE WHEN k > 0 THEN 1 END, (k), DATE '2020-01-01', Upper(v) FROM t",
        );
        assert_eq!(
            renamed_to,
            renamed(&[
                (0, "count"),
                (1, "sum"),
                (2, "?column?"),
                (3, "v"),
                (4, "int4"),
                (5, "int8"),
                (6, "case"),
                (7, "k"),
                (8, "date"),
                (9, "upper"),
            ])
        );
    }

    #[test]
    fn repeated_names_are_aliased_and_the_first_keeps_its_own() {
        let (sql, renamed_to) = names("SELECT k, t.k, v AS x, 2 AS X, \"X\" FROM t");
        assert_eq!(renamed_to, renamed(&[(1, "k"), (3, "x")]));
        assert!(sql.starts_with("SELECT k, t.k AS __weir_column_1, v AS x, 2 AS __weir_column_3"));
    }

    #[test]
    fn subqueries_set_operations_and_other_statements_are_left_alone() {
        for sql in [
            "SELECT x FROM (SELECT count(*) AS x FROM t) AS s",
            "SELECT 1 UNION SELECT 2",
            "DELETE FROM t WHERE k = 1",
        ] {
            let (rewritten, renamed_to) = names(sql);
            assert!(renamed_to.is_empty(), "{sql}");
            assert_eq!(rewritten, sql);
        }
    }

    #[test]
    fn derived_tables_and_ctes_name_their_expressions_as_postgres_does() {
        let dialect = sqlparser::dialect::PostgreSqlDialect {};
        let sql = "WITH c AS (SELECT max(v), k FROM t GROUP BY k) \
                   SELECT count FROM (SELECT count(*), 1, sum(v), sum(w) FROM t) AS s, c";
        let mut statement = sqlparser::parser::Parser::parse_sql(&dialect, sql)
            .expect("parses")
            .remove(0);
        name_derived_columns(&mut statement);
        assert_eq!(
            statement.to_string(),
            "WITH c AS (SELECT max(v) AS max, k FROM t GROUP BY k) \
             SELECT count FROM (SELECT count(*) AS count, 1, sum(v), sum(w) FROM t) AS s, c"
        );
    }

    #[test]
    fn order_by_an_aliased_expression_sorts_by_its_alias() {
        let (sql, _) = names("SELECT DISTINCT upper(v) FROM t ORDER BY upper(v) DESC, k");
        assert_eq!(
            sql,
            "SELECT DISTINCT upper(v) AS __weir_column_0 FROM t ORDER BY __weir_column_0 DESC, k"
        );
    }

    #[test]
    fn an_insert_source_may_repeat_a_column() {
        let (sql, _) = names("INSERT INTO t SELECT value, value FROM generate_series(1, 3)");
        assert_eq!(
            sql,
            "INSERT INTO t SELECT value, value AS __weir_column_1 FROM generate_series(1, 3)"
        );
    }
}
