//! Catalog SQL that DataFusion cannot plan, rewritten into SQL it can.
//!
//! Runs after the crate's compatibility rewrites, on the syntax tree:
//! - `ARRAY(SELECT x FROM ... ORDER BY y)` becomes
//!   `coalesce((SELECT array_agg(x ORDER BY y) FROM ...), make_array())`,
//!   which DataFusion decorrelates like any aggregate subquery;
//! - `obj_description`, `col_description` and `shobj_description` become
//!   the lookups in `pg_description` PostgreSQL defines them as;
//! - `pg_get_viewdef(oid)` looks the name up in `pg_class` first;
//! - `alias.tableoid`, a system column DataFusion's tables lack, becomes
//!   the oid of the catalog table the alias names;
//! - `pg_tables`, `pg_views` and `pg_matviews` become PostgreSQL's
//!   definitions of them over `pg_class`, which knows weir's relations.

use std::collections::HashMap;
use std::ops::ControlFlow;

use sqlparser::ast::{
    Expr, FunctionArg, FunctionArgExpr, FunctionArguments, Ident, ObjectNamePart, OrderByKind,
    Query, SelectItem, SetExpr, TableAlias, TableFactor, Value, VisitMut, VisitorMut,
    visit_expressions,
};
use sqlparser::dialect::PostgreSqlDialect;
use sqlparser::parser::Parser;

use super::PG_CLASS_OID;

/// Rewrite a statement or query in place.
pub fn rewrite<T: VisitMut>(node: &mut T) {
    let _ = node.visit(&mut CatalogViews);
    let _ = node.visit(&mut TableOids);
    let _ = node.visit(&mut Functions);
}

/// Catalog tables named without their schema (`pg_class`) named with it
/// (`pg_catalog.pg_class`), as PostgreSQL's search path finds them first:
/// for statements that do not go through the compatibility parser, such
/// as a view's query, which then fails as a view over the catalog (0A000)
/// rather than as a missing table.
pub fn qualify_catalog_tables<T: VisitMut>(node: &mut T) {
    let _ = sqlparser::ast::visit_relations_mut(node, |name| {
        let catalog = match name.0.as_slice() {
            [part] => part.as_ident().is_some_and(|i| {
                let table = i.value.to_lowercase();
                catalog_oid(&table).is_some()
                    || matches!(
                        table.as_str(),
                        "pg_user"
                            | "pg_views"
                            | "pg_matviews"
                            | "pg_tables"
                            | "pg_settings"
                            | "pg_description"
                            | "pg_attribute"
                            | "pg_index"
                            | "pg_attrdef"
                            | "pg_stat_activity"
                            | "pg_sequence"
                            | "pg_inherits"
                            | "pg_depend"
                    )
            }),
            _ => false,
        };
        if catalog {
            name.0
                .insert(0, ObjectNamePart::Identifier(Ident::new("pg_catalog")));
        }
        ControlFlow::<()>::Continue(())
    });
}

/// The catalog views PostgreSQL defines over `pg_class`, as it does.
fn catalog_view(name: &str) -> Option<&'static str> {
    Some(match name {
        "pg_tables" => {
            "SELECT n.nspname AS schemaname, c.relname AS tablename, \
             pg_get_userbyid(c.relowner) AS tableowner, \
             CAST(NULL AS TEXT) AS tablespace, c.relhasindex AS hasindex, \
             c.relhasrules AS hasrules, c.relhastriggers AS hastriggers, \
             c.relrowsecurity AS rowsecurity \
             FROM pg_catalog.pg_class c \
             LEFT JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace \
             WHERE c.relkind IN ('r', 'p')"
        }
        "pg_views" => {
            "SELECT n.nspname AS schemaname, c.relname AS viewname, \
             pg_get_userbyid(c.relowner) AS viewowner, \
             pg_get_viewdef(c.oid) AS definition \
             FROM pg_catalog.pg_class c \
             LEFT JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace \
             WHERE c.relkind = 'v'"
        }
        "pg_matviews" => {
            "SELECT n.nspname AS schemaname, c.relname AS matviewname, \
             pg_get_userbyid(c.relowner) AS matviewowner, \
             CAST(NULL AS TEXT) AS tablespace, c.relhasindex AS hasindexes, \
             true AS ispopulated, pg_get_viewdef(c.oid) AS definition \
             FROM pg_catalog.pg_class c \
             LEFT JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace \
             WHERE c.relkind = 'm'"
        }
        _ => return None,
    })
}

/// Replaces a reference to a catalog view by its definition, under the
/// name the query gave it.
struct CatalogViews;

impl VisitorMut for CatalogViews {
    type Break = ();

    fn pre_visit_table_factor(&mut self, factor: &mut TableFactor) -> ControlFlow<()> {
        let TableFactor::Table { name, alias, .. } = factor else {
            return ControlFlow::Continue(());
        };
        let parts: Vec<String> = name
            .0
            .iter()
            .filter_map(|p| p.as_ident().map(|i| i.value.to_lowercase()))
            .collect();
        let view = match parts.as_slice() {
            [table] => table,
            [schema, table] if schema == "pg_catalog" => table,
            _ => return ControlFlow::Continue(()),
        };
        let Some(subquery) = catalog_view(view).and_then(parse_query) else {
            return ControlFlow::Continue(());
        };
        let alias = alias.take().unwrap_or_else(|| TableAlias {
            explicit: true,
            at: None,
            name: Ident::new(view.as_str()),
            columns: vec![],
        });
        *factor = TableFactor::Derived {
            lateral: false,
            subquery,
            alias: Some(alias),
            sample: None,
        };
        ControlFlow::Continue(())
    }
}

fn parse_query(sql: &str) -> Option<Box<Query>> {
    Parser::new(&PostgreSqlDialect {})
        .try_with_sql(sql)
        .and_then(|mut p| p.parse_query())
        .ok()
}

/// The oids of the catalog tables whose rows carry comments.
pub fn catalog_oid(table: &str) -> Option<i32> {
    Some(match table {
        "pg_class" => PG_CLASS_OID,
        "pg_proc" => 1255,
        "pg_type" => 1247,
        "pg_namespace" => 2615,
        "pg_am" => 2601,
        "pg_constraint" => 2606,
        "pg_conversion" => 2607,
        "pg_database" => 1262,
        "pg_tablespace" => 1213,
        "pg_authid" | "pg_roles" => 1260,
        "pg_language" => 2612,
        "pg_operator" => 2617,
        "pg_opclass" => 2616,
        "pg_opfamily" => 2753,
        "pg_rewrite" => 2618,
        "pg_trigger" => 2620,
        "pg_cast" => 2605,
        "pg_collation" => 3456,
        "pg_extension" => 3079,
        "pg_event_trigger" => 3466,
        "pg_foreign_data_wrapper" => 2328,
        "pg_foreign_server" => 1417,
        "pg_statistic_ext" => 3381,
        "pg_ts_config" => 3602,
        "pg_ts_dict" => 3600,
        "pg_ts_parser" => 3601,
        "pg_ts_template" => 3764,
        "pg_publication" => 6104,
        "pg_subscription" => 6100,
        "pg_largeobject_metadata" => 2995,
        _ => return None,
    })
}

fn parse_expr(sql: &str) -> Option<Expr> {
    Parser::new(&PostgreSqlDialect {})
        .try_with_sql(sql)
        .and_then(|mut p| p.parse_expr())
        .ok()
}

/// Replaces `alias.tableoid` in each SELECT by the oid of the table the
/// alias names in that SELECT's FROM.
struct TableOids;

impl VisitorMut for TableOids {
    type Break = ();

    fn pre_visit_query(&mut self, query: &mut Query) -> ControlFlow<()> {
        tableoids_in(query.body.as_mut());
        ControlFlow::Continue(())
    }
}

fn tableoids_in(body: &mut SetExpr) {
    match body {
        SetExpr::Select(select) => {
            let mut tables = HashMap::new();
            for from in &select.from {
                let factors =
                    std::iter::once(&from.relation).chain(from.joins.iter().map(|j| &j.relation));
                for factor in factors {
                    if let TableFactor::Table { name, alias, .. } = factor
                        && let Some(table) = name.0.last().and_then(ObjectNamePart::as_ident)
                        && let Some(oid) = catalog_oid(&table.value)
                    {
                        let key = alias.as_ref().map_or(&table.value, |a| &a.name.value);
                        tables.insert(key.clone(), oid);
                    }
                }
            }
            if !tables.is_empty() {
                let mut replace = ReplaceTableOid(&tables);
                let _ = select.projection.visit(&mut replace);
                let _ = select.selection.visit(&mut replace);
                for from in &mut select.from {
                    let _ = from.joins.visit(&mut replace);
                }
            }
        }
        SetExpr::SetOperation { left, right, .. } => {
            tableoids_in(left);
            tableoids_in(right);
        }
        _ => {}
    }
}

struct ReplaceTableOid<'a>(&'a HashMap<String, i32>);

impl VisitorMut for ReplaceTableOid<'_> {
    type Break = ();

    fn post_visit_expr(&mut self, expr: &mut Expr) -> ControlFlow<()> {
        if let Expr::CompoundIdentifier(parts) = expr
            && let [alias, column] = parts.as_slice()
            && column.value.eq_ignore_ascii_case("tableoid")
            && let Some(oid) = self.0.get(&alias.value)
        {
            *expr = Expr::value(Value::Number(oid.to_string(), false));
        }
        ControlFlow::Continue(())
    }
}

/// The function rewrites; bottom-up, so a rewritten call is not visited again.
struct Functions;

impl VisitorMut for Functions {
    type Break = ();

    fn post_visit_expr(&mut self, expr: &mut Expr) -> ControlFlow<()> {
        if let Some(rewritten) = rewrite_call(expr) {
            *expr = rewritten;
        }
        ControlFlow::Continue(())
    }
}

fn rewrite_call(expr: &Expr) -> Option<Expr> {
    if let Expr::Subquery(query) = expr {
        if let Some(oid) = catalog_regclass(query) {
            return Some(Expr::value(Value::Number(oid.to_string(), false)));
        }
        if reads_only_empty(query) {
            return parse_expr("NULL");
        }
        return aggregated(query).map(Expr::Subquery);
    }
    if let Some(named) = type_name(expr) {
        return Some(named);
    }
    if let Some(guarded) = guarded_subquery(expr) {
        return Some(guarded);
    }
    if let Expr::BinaryOp { left, op, right } = expr {
        return oid_array_literal(right)
            .map(|array| Expr::BinaryOp {
                left: left.clone(),
                op: op.clone(),
                right: Box::new(array),
            })
            .filter(|_| is_oid_array_column(left));
    }
    let Expr::Function(function) = expr else {
        return None;
    };
    let name = function
        .name
        .0
        .last()?
        .as_ident()?
        .value
        .to_ascii_lowercase();
    if let FunctionArguments::Subquery(query) = &function.args {
        return (name == "array").then(|| array_of(query)).flatten();
    }
    let args = plain_args(&function.args)?;
    let description = |table: &str, filter: String| {
        parse_expr(&format!(
            "(SELECT max(__weir_d.description) FROM pg_catalog.{table} __weir_d WHERE {filter})"
        ))
    };
    match (name.as_str(), args.as_slice()) {
        // The subscripts of an array, as a list DataFusion unnests beside
        // the array itself (SQLAlchemy's key reflection).
        ("generate_subscripts", [array, _dimension]) => parse_expr(&format!(
            "unnest(generate_series(1, CAST(coalesce(cardinality({array}), 0) AS BIGINT)))"
        )),
        ("obj_description", [object, catalog]) => description(
            "pg_description",
            format!(
                "__weir_d.objoid = ({object}) AND __weir_d.classoid = {} AND __weir_d.objsubid = 0",
                oid_of_catalog(catalog)
            ),
        ),
        ("obj_description", [object]) => description(
            "pg_description",
            format!("__weir_d.objoid = ({object}) AND __weir_d.objsubid = 0"),
        ),
        ("col_description", [table, column]) => description(
            "pg_description",
            format!(
                "__weir_d.objoid = ({table}) AND __weir_d.classoid = {PG_CLASS_OID} \
                 AND __weir_d.objsubid = ({column})"
            ),
        ),
        ("shobj_description", [object, catalog]) => description(
            "pg_shdescription",
            format!(
                "__weir_d.objoid = ({object}) AND __weir_d.classoid = {}",
                oid_of_catalog(catalog)
            ),
        ),
        ("pg_get_viewdef", [view, rest @ ..]) if !is_string(view) => {
            let pretty: String = rest.iter().map(|r| format!(", {r}")).collect();
            parse_expr(&format!(
                "(SELECT max(pg_get_viewdef(__weir_c.relname{pretty})) \
                 FROM pg_catalog.pg_class __weir_c WHERE __weir_c.oid = ({view}))"
            ))
        }
        // NULL for a type that does not exist, where a cast to regtype
        // fails; a type is found by its catalog name, qualified or not,
        // or by its SQL spelling (`integer`). psycopg 3 looks types up so.
        ("to_regtype", [name]) => parse_expr(&format!(
            "(SELECT min(__weir_t.oid) FROM pg_catalog.pg_type __weir_t \
             WHERE ({name}) IN (__weir_t.typname, 'pg_catalog.' || __weir_t.typname, \
             format_type(__weir_t.oid, NULL)))"
        )),
        _ => None,
    }
}

/// `CASE WHEN c THEN (SELECT ... FROM pg_...) END`: DataFusion does not
/// decorrelate a subquery under CASE, so the subquery becomes an argument,
/// which it does: `array_element(make_array(S), CAST(coalesce(c, false)
/// AS INT))`, element 0 being NULL (no CASE: `c` may hold a subquery too). SQLAlchemy's column reflection sends these.
fn guarded_subquery(expr: &Expr) -> Option<Expr> {
    let Expr::Case {
        operand: None,
        conditions,
        else_result,
        ..
    } = expr
    else {
        return None;
    };
    let [when] = conditions.as_slice() else {
        return None;
    };
    let Expr::Subquery(query) = &when.result else {
        return None;
    };
    let null_else = match else_result.as_deref() {
        None => true,
        Some(Expr::Value(v)) => matches!(v.value, Value::Null),
        _ => false,
    };
    let SetExpr::Select(select) = query.body.as_ref() else {
        return None;
    };
    let catalog = select.from.iter().all(|from| {
        std::iter::once(&from.relation)
            .chain(from.joins.iter().map(|j| &j.relation))
            .all(is_catalog_table)
    });
    if !null_else || !catalog || select.from.is_empty() {
        return None;
    }
    parse_expr(&format!(
        "array_element(make_array({}), CAST(coalesce({}, false) AS INT))",
        when.result, when.condition
    ))
}

/// `'pg_catalog.pg_class'::regclass`, which the crate turns into a lookup
/// of `parse_ident('pg_catalog.pg_class')` in `pg_class`: a system catalog
/// is PostgreSQL's fixed oid, the `classoid` of `pg_description` rows.
fn catalog_regclass(query: &Query) -> Option<i32> {
    let text = query.to_string();
    let start = text.find("parse_ident('")? + "parse_ident('".len();
    let name = &text[start..start + text[start..].find('\'')?];
    let table = name.strip_prefix("pg_catalog.").unwrap_or(name);
    catalog_oid(table)
}

/// `t::regtype::text`, a type's name (pgcli's function return types), as
/// `format_type(t, NULL)`: the crate keeps the cast a number on the wire.
fn type_name(expr: &Expr) -> Option<Expr> {
    let Expr::Cast {
        expr: inner,
        data_type,
        ..
    } = expr
    else {
        return None;
    };
    let is = |t: &sqlparser::ast::DataType, name: &str| {
        t.to_string()
            .to_ascii_lowercase()
            .trim_start_matches("pg_catalog.")
            == name
    };
    let Expr::Cast {
        expr: typed,
        data_type: regtype,
        ..
    } = inner.as_ref()
    else {
        return None;
    };
    (is(data_type, "text") && is(regtype, "regtype"))
        .then(|| parse_expr(&format!("format_type({typed}, NULL)")))
        .flatten()
}

/// `pg_policy.polroles`, an `oid[]` psql compares with `'{0}'` (public).
fn is_oid_array_column(expr: &Expr) -> bool {
    let name = match expr {
        Expr::Identifier(i) => i,
        Expr::CompoundIdentifier(parts) => match parts.last() {
            Some(i) => i,
            None => return false,
        },
        _ => return false,
    };
    name.value == "polroles"
}

/// `'{0,1}'` as `make_array(0, 1)`.
fn oid_array_literal(expr: &Expr) -> Option<Expr> {
    let Expr::Value(v) = expr else {
        return None;
    };
    let Value::SingleQuotedString(text) = &v.value else {
        return None;
    };
    let items = text.strip_prefix('{')?.strip_suffix('}')?;
    if !items.chars().all(|c| c.is_ascii_digit() || c == ',') {
        return None;
    }
    parse_expr(&format!("make_array({items})"))
}

/// A call's arguments, when they are plain expressions.
fn plain_args(args: &FunctionArguments) -> Option<Vec<&Expr>> {
    let FunctionArguments::List(list) = args else {
        return None;
    };
    if !list.clauses.is_empty() {
        return None;
    }
    list.args
        .iter()
        .map(|arg| match arg {
            FunctionArg::Unnamed(FunctionArgExpr::Expr(e)) => Some(e),
            _ => None,
        })
        .collect()
}

fn is_string(expr: &Expr) -> bool {
    matches!(expr, Expr::Value(v) if matches!(v.value, Value::SingleQuotedString(_)))
}

/// `'pg_class'` in `obj_description(oid, 'pg_class')`; an unknown catalog
/// matches nothing, as in PostgreSQL.
fn oid_of_catalog(catalog: &Expr) -> i32 {
    match catalog {
        Expr::Value(v) => match &v.value {
            Value::SingleQuotedString(name) => catalog_oid(name).unwrap_or(-1),
            _ => -1,
        },
        _ => -1,
    }
}

/// A scalar subquery over catalog tables that yields one column of at
/// most one row per outer row, aggregated so that DataFusion can
/// decorrelate it (psql's `(SELECT c.relkind = 'c' FROM pg_class c WHERE
/// c.oid = t.typrelid)`). User tables are left alone: there a second row
/// must stay an error.
fn aggregated(query: &Query) -> Option<Box<Query>> {
    if query.order_by.is_some() || query.limit_clause.is_some() || query.fetch.is_some() {
        return None;
    }
    let SetExpr::Select(select) = query.body.as_ref() else {
        return None;
    };
    let [SelectItem::UnnamedExpr(element) | SelectItem::ExprWithAlias { expr: element, .. }] =
        select.projection.as_slice()
    else {
        return None;
    };
    let grouped =
        !matches!(&select.group_by, sqlparser::ast::GroupByExpr::Expressions(e, _) if e.is_empty());
    let catalog_only = !select.from.is_empty()
        && select.from.iter().all(|from| {
            std::iter::once(&from.relation)
                .chain(from.joins.iter().map(|j| &j.relation))
                .all(is_catalog_table)
        });
    if grouped || !catalog_only || is_aggregate(element) {
        return None;
    }
    let aggregate = parse_expr(&format!("max({element})"))?;
    let mut query = Box::new(query.clone());
    if let SetExpr::Select(select) = query.body.as_mut() {
        select.projection = vec![SelectItem::UnnamedExpr(aggregate)];
    }
    Some(query)
}

fn is_catalog_table(factor: &TableFactor) -> bool {
    match factor {
        TableFactor::Table {
            name, args: None, ..
        } => name
            .0
            .last()
            .and_then(ObjectNamePart::as_ident)
            .is_some_and(|t| t.value.starts_with("pg_")),
        _ => false,
    }
}

fn is_aggregate(expr: &Expr) -> bool {
    const AGGREGATES: &[&str] = &[
        "max",
        "min",
        "count",
        "sum",
        "avg",
        "array_agg",
        "string_agg",
        "bool_or",
        "bool_and",
    ];
    match expr {
        Expr::Function(f) => f
            .name
            .0
            .last()
            .and_then(ObjectNamePart::as_ident)
            .is_some_and(|n| AGGREGATES.contains(&n.value.to_ascii_lowercase().as_str())),
        _ => false,
    }
}

/// Catalogs weir keeps empty: it has no row security policies, column
/// defaults or sequences. psql's `\dp` nests a correlated subquery inside
/// its array of policies, SQLAlchemy reads defaults and identities through
/// correlated subqueries DataFusion cannot plan; over an empty table an
/// array is empty and a scalar subquery NULL anyway.
fn reads_only_empty(query: &Query) -> bool {
    const EMPTY: &[&str] = &["pg_policy", "pg_attrdef", "pg_sequence"];
    let SetExpr::Select(select) = query.body.as_ref() else {
        return false;
    };
    // A count over an empty table is 0, not NULL.
    let counts = visit_expressions(&select.projection, |expr| match expr {
        Expr::Function(f) if f.name.to_string().eq_ignore_ascii_case("count") => {
            ControlFlow::Break(())
        }
        _ => ControlFlow::Continue(()),
    })
    .is_break();
    !counts
        && matches!(select.from.as_slice(), [from] if from.joins.is_empty()
        && matches!(&from.relation, TableFactor::Table { name, .. }
            if name.0.last().and_then(ObjectNamePart::as_ident)
                .is_some_and(|t| EMPTY.contains(&t.value.as_str()))))
}

/// `ARRAY(SELECT f(x) FROM unnest(a) x)`: DataFusion cannot unnest a
/// column of the outer query in a subquery, so the array is computed from
/// `a` directly, for the two forms psql sends: `x` itself, and a prefix
/// `'toast.' || x`.
fn array_of_unnest(query: &Query, element: &Expr) -> Option<Option<Expr>> {
    let SetExpr::Select(select) = query.body.as_ref() else {
        return None;
    };
    let [from] = select.from.as_slice() else {
        return None;
    };
    if !from.joins.is_empty() || select.selection.is_some() {
        return None;
    }
    let (array, alias) = match &from.relation {
        TableFactor::Table {
            name,
            args: Some(args),
            alias,
            ..
        } if name
            .0
            .last()?
            .as_ident()?
            .value
            .eq_ignore_ascii_case("unnest") =>
        {
            let [FunctionArg::Unnamed(FunctionArgExpr::Expr(array))] = args.args.as_slice() else {
                return Some(None);
            };
            (array.clone(), alias.clone()?)
        }
        TableFactor::UNNEST {
            array_exprs, alias, ..
        } => {
            let [array] = array_exprs.as_slice() else {
                return Some(None);
            };
            (array.clone(), alias.clone()?)
        }
        _ => return None,
    };
    let variable = alias
        .columns
        .first()
        .map_or(alias.name.value.clone(), |c| c.name.value.clone());
    let is_variable = |e: &Expr| matches!(e, Expr::Identifier(i) if i.value == variable);
    let rewritten = match element {
        e if is_variable(e) => parse_expr(&format!("coalesce({array}, make_array())")),
        Expr::BinaryOp {
            left,
            op: sqlparser::ast::BinaryOperator::StringConcat,
            right,
        } if is_variable(right) && is_string(left) => parse_expr(&format!(
            "CASE WHEN coalesce(cardinality({array}), 0) = 0 THEN make_array() \
             ELSE string_to_array({left} || array_to_string({array}, chr(1) || {left}), chr(1)) END"
        )),
        _ => None,
    };
    Some(rewritten)
}

/// `ARRAY(SELECT x ... ORDER BY y)` as an aggregate subquery; an empty
/// result is an empty array, as in PostgreSQL.
fn array_of(query: &Query) -> Option<Expr> {
    if reads_only_empty(query) {
        return parse_expr("make_array()");
    }
    if let SetExpr::Select(select) = query.body.as_ref()
        && let [SelectItem::UnnamedExpr(element) | SelectItem::ExprWithAlias { expr: element, .. }] =
            select.projection.as_slice()
        && let Some(unnested) = array_of_unnest(query, element)
    {
        return unnested;
    }
    let mut query = query.clone();
    let SetExpr::Select(select) = query.body.as_mut() else {
        return None;
    };
    let [item] = select.projection.as_slice() else {
        return None;
    };
    let element = match item {
        SelectItem::UnnamedExpr(e) | SelectItem::ExprWithAlias { expr: e, .. } => e.clone(),
        _ => return None,
    };

    let order = match query.order_by.take().map(|o| o.kind) {
        Some(OrderByKind::Expressions(items)) => items
            .iter()
            .map(|item| {
                // `ORDER BY 1` names the one output column.
                let by = match &item.expr {
                    Expr::Value(v) if matches!(v.value, Value::Number(..)) => element.to_string(),
                    other => other.to_string(),
                };
                format!("{by}{}", item.options)
            })
            .collect::<Vec<_>>()
            .join(", "),
        _ => String::new(),
    };
    let order = if order.is_empty() {
        order
    } else {
        format!(" ORDER BY {order}")
    };
    let aggregate = parse_expr(&format!("array_agg({element}{order})"))?;
    select.projection = vec![SelectItem::ExprWithAlias {
        expr: aggregate,
        alias: Ident::new("array"),
    }];
    parse_expr(&format!("coalesce(({query}), make_array())"))
}
