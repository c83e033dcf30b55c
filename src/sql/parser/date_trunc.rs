//! `date_trunc('decade' | 'century' | 'millennium', t)`, which PostgreSQL
//! has and DataFusion refuses, written with the units DataFusion has: the
//! start of `t`'s year less the years since the unit began. PostgreSQL's
//! centuries and millennia begin with a year ending in 1 (2001-01-01), its
//! decades with one ending in 0 (2020-01-01). Years before 1 AD are not
//! handled as PostgreSQL does.

use std::ops::ControlFlow;

use sqlparser::ast::{
    Expr, Function, FunctionArg, FunctionArgExpr, FunctionArguments, Value, ValueWithSpan,
    VisitMut, visit_expressions_mut,
};
use sqlparser::dialect::PostgreSqlDialect;
use sqlparser::parser::Parser;

/// Rewrite every such call in `node`.
pub fn long_units<V: VisitMut>(node: &mut V) {
    let _ = visit_expressions_mut(node, |expr| {
        if let Some(rewritten) = rewrite(expr) {
            *expr = rewritten;
        }
        ControlFlow::<()>::Continue(())
    });
}

fn rewrite(expr: &Expr) -> Option<Expr> {
    let Expr::Function(Function { name, args, .. }) = expr else {
        return None;
    };
    if !name.to_string().eq_ignore_ascii_case("date_trunc") {
        return None;
    }
    let FunctionArguments::List(list) = args else {
        return None;
    };
    let [unit, FunctionArg::Unnamed(FunctionArgExpr::Expr(time))] = list.args.as_slice() else {
        return None;
    };
    let FunctionArg::Unnamed(FunctionArgExpr::Expr(Expr::Value(ValueWithSpan {
        value: Value::SingleQuotedString(unit),
        ..
    }))) = unit
    else {
        return None;
    };
    let years_in = match unit.to_ascii_lowercase().as_str() {
        "decade" | "decades" => "year % 10",
        "century" | "centuries" => "(year - 1) % 100",
        "millennium" | "millennia" | "millenniums" => "(year - 1) % 1000",
        _ => return None,
    };
    let sql = format!(
        "date_trunc('year', ({time})) - ({}) * INTERVAL '1 year'",
        years_in.replace(
            "year",
            &format!("CAST(date_part('year', ({time})) AS BIGINT)")
        )
    );
    Parser::new(&PostgreSqlDialect {})
        .try_with_sql(&sql)
        .and_then(|mut p| p.parse_expr())
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rewritten(sql: &str) -> String {
        let mut expr = Parser::new(&PostgreSqlDialect {})
            .try_with_sql(sql)
            .and_then(|mut p| p.parse_expr())
            .expect("parses");
        long_units(&mut expr);
        expr.to_string()
    }

    #[test]
    fn long_units_become_years() {
        assert_eq!(
            rewritten("date_trunc('Century', t)"),
            "date_trunc('year', (t)) - ((CAST(date_part('year', (t)) AS BIGINT) - 1) % 100) * INTERVAL '1 year'"
        );
        assert_eq!(rewritten("date_trunc('day', t)"), "date_trunc('day', t)");
    }
}
