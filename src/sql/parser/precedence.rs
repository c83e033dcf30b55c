//! `a IS DISTINCT FROM b AND c` means `(a IS DISTINCT FROM b) AND c` in
//! PostgreSQL, where IS binds tighter than AND and OR. sqlparser reads the
//! right side of IS [NOT] DISTINCT FROM as a whole expression and so takes
//! `b AND c` as the operand; this puts the AND or OR back on top.

use std::ops::ControlFlow;

use sqlparser::ast::{BinaryOperator, Expr, VisitMut, visit_expressions_mut};

/// Re-associate every misread IS [NOT] DISTINCT FROM in a parsed node.
pub fn fix_distinct_from<V: VisitMut>(node: &mut V) {
    let _ = visit_expressions_mut(node, |expr| {
        reassociate(expr);
        ControlFlow::<()>::Continue(())
    });
}

fn reassociate(expr: &mut Expr) {
    let (Expr::IsDistinctFrom(_, right) | Expr::IsNotDistinctFrom(_, right)) = &*expr else {
        return;
    };
    if !is_and_or(right) {
        return;
    }
    let negated = matches!(expr, Expr::IsNotDistinctFrom(..));
    let taken = std::mem::replace(expr, Expr::value(sqlparser::ast::Value::Null));
    let (Expr::IsDistinctFrom(left, right) | Expr::IsNotDistinctFrom(left, right)) = taken else {
        unreachable!("matched above");
    };
    let Expr::BinaryOp {
        left: operand,
        op,
        right: rest,
    } = *right
    else {
        unreachable!("matched above");
    };
    let mut inner = if negated {
        Expr::IsNotDistinctFrom(left, operand)
    } else {
        Expr::IsDistinctFrom(left, operand)
    };
    reassociate(&mut inner);
    *expr = Expr::BinaryOp {
        left: Box::new(inner),
        op,
        right: rest,
    };
}

fn is_and_or(expr: &Expr) -> bool {
    matches!(
        expr,
        Expr::BinaryOp {
            op: BinaryOperator::And | BinaryOperator::Or,
            ..
        }
    )
}

#[cfg(test)]
mod tests {
    use sqlparser::dialect::PostgreSqlDialect;
    use sqlparser::parser::Parser;

    use sqlparser::ast::Expr;

    use super::fix_distinct_from;

    /// The expression with every operation parenthesised.
    fn fixed(sql: &str) -> String {
        let mut expr = Parser::new(&PostgreSqlDialect {})
            .try_with_sql(sql)
            .and_then(|mut p| p.parse_expr())
            .expect("parse");
        fix_distinct_from(&mut expr);
        shape(&expr)
    }

    fn shape(expr: &Expr) -> String {
        match expr {
            Expr::Nested(inner) => shape(inner),
            Expr::BinaryOp { left, op, right } => {
                format!("({} {op} {})", shape(left), shape(right))
            }
            Expr::IsDistinctFrom(a, b) => format!("({} IDF {})", shape(a), shape(b)),
            Expr::IsNotDistinctFrom(a, b) => format!("({} INDF {})", shape(a), shape(b)),
            other => other.to_string(),
        }
    }

    #[test]
    fn and_and_or_bind_looser_than_distinct_from() {
        assert_eq!(fixed("a IS DISTINCT FROM b AND c"), "((a IDF b) AND c)");
        assert_eq!(
            fixed("a IS NOT DISTINCT FROM b AND c AND d OR e"),
            "((((a INDF b) AND c) AND d) OR e)"
        );
        assert_eq!(
            fixed("a IS DISTINCT FROM b AND c IS NOT DISTINCT FROM d"),
            "((a IDF b) AND (c INDF d))"
        );
    }

    #[test]
    fn parentheses_and_comparisons_stay_as_written() {
        assert_eq!(fixed("a IS DISTINCT FROM (b AND c)"), "(a IDF (b AND c))");
        assert_eq!(fixed("a IS DISTINCT FROM b = c"), "(a IDF (b = c))");
    }
}
