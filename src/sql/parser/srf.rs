//! `SELECT generate_series(1, 3)` gives three rows in PostgreSQL, a set-
//! returning function in the select list; DataFusion's scalar
//! `generate_series` gives one row holding a list. So such a call at the
//! top of a select item is unnested, and named as PostgreSQL names it.

use std::ops::ControlFlow;

use sqlparser::ast::{
    Expr, Function, FunctionArg, FunctionArgExpr, FunctionArgumentList, FunctionArguments, Ident,
    ObjectName, Query, SelectItem, SetExpr, VisitMut, VisitorMut,
};

const SET_RETURNING: [&str; 1] = ["generate_series"];

/// Unnest every set-returning call at the top of a select item in `node`.
pub fn unnest<V: VisitMut>(node: &mut V) {
    let _ = node.visit(&mut Unnesting);
}

struct Unnesting;

impl VisitorMut for Unnesting {
    type Break = ();

    fn pre_visit_query(&mut self, query: &mut Query) -> ControlFlow<()> {
        unnest_set(&mut query.body);
        ControlFlow::Continue(())
    }
}

fn unnest_set(body: &mut SetExpr) {
    match body {
        SetExpr::Select(select) => {
            for item in &mut select.projection {
                unnest_item(item);
            }
        }
        SetExpr::SetOperation { left, right, .. } => {
            unnest_set(left);
            unnest_set(right);
        }
        _ => {}
    }
}

fn unnest_item(item: &mut SelectItem) {
    match item {
        SelectItem::UnnamedExpr(expr) => {
            if let Some(name) = set_returning(expr) {
                let call = std::mem::replace(expr, Expr::value(sqlparser::ast::Value::Null));
                *item = SelectItem::ExprWithAlias {
                    expr: unnested(call),
                    alias: Ident::new(name),
                };
            }
        }
        SelectItem::ExprWithAlias { expr, .. } if set_returning(expr).is_some() => {
            let call = std::mem::replace(expr, Expr::value(sqlparser::ast::Value::Null));
            *expr = unnested(call);
        }
        _ => {}
    }
}

/// The function's name, if `expr` is a call of a set-returning function.
fn set_returning(expr: &Expr) -> Option<String> {
    let Expr::Function(Function { name, .. }) = expr else {
        return None;
    };
    let [part] = name.0.as_slice() else {
        return None;
    };
    let name = part.as_ident()?.value.to_lowercase();
    SET_RETURNING.contains(&name.as_str()).then_some(name)
}

fn unnested(call: Expr) -> Expr {
    Expr::Function(Function {
        name: ObjectName::from(vec![Ident::new("unnest")]),
        uses_odbc_syntax: false,
        parameters: FunctionArguments::None,
        args: FunctionArguments::List(FunctionArgumentList {
            duplicate_treatment: None,
            args: vec![FunctionArg::Unnamed(FunctionArgExpr::Expr(call))],
            clauses: Vec::new(),
        }),
        filter: None,
        null_treatment: None,
        over: None,
        within_group: Vec::new(),
    })
}

#[cfg(test)]
mod tests {
    fn unnested(sql: &str) -> String {
        let mut query = super::super::parse_query(sql).expect("query");
        super::unnest(query.as_mut());
        query.to_string()
    }

    #[test]
    fn set_returning_calls_in_the_select_list_give_rows() {
        assert_eq!(
            unnested("SELECT generate_series(1, 3)"),
            "SELECT unnest(generate_series(1, 3)) AS generate_series"
        );
        assert_eq!(
            unnested("SELECT GENERATE_SERIES(1, 3) AS g, 1"),
            "SELECT unnest(GENERATE_SERIES(1, 3)) AS g, 1"
        );
        assert_eq!(
            unnested("SELECT * FROM generate_series(1, 3)"),
            "SELECT * FROM generate_series(1, 3)"
        );
    }
}
