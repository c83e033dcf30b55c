//! `a NATURAL JOIN b NATURAL JOIN c` (or `JOIN ... USING (id)` twice) and
//! then an unqualified `id`: PostgreSQL merges the joined columns into one
//! at each join, DataFusion keeps each join's pair apart and then finds
//! `id` ambiguous. So the joins before each later NATURAL or USING join are
//! nested in a derived table of their own, `(SELECT * FROM a NATURAL JOIN
//! b) AS ...`, whose `id` is already one column. Done only where nothing
//! outside names the nested tables (`a.x`), which would no longer resolve.

use std::collections::HashSet;
use std::ops::ControlFlow;

use sqlparser::ast::{
    Expr, Ident, JoinConstraint, JoinOperator, Query, Select, SetExpr, TableAlias, TableFactor,
    TableWithJoins, Visit, VisitMut, VisitorMut, visit_expressions,
};

/// The most joins of one chain nested in derived tables.
const MAX_NESTED: usize = 24;

/// The alias of each derived table this nesting makes.
const NESTED_PREFIX: &str = "__weir_joined_";

/// Nest every chain of NATURAL or USING joins in `node`.
pub fn nest<V: VisitMut>(node: &mut V) {
    let _ = node.visit(&mut Nesting);
}

struct Nesting;

impl VisitorMut for Nesting {
    type Break = ();

    fn pre_visit_query(&mut self, query: &mut Query) -> ControlFlow<()> {
        let outside = qualifiers(&query.order_by);
        nest_set(&mut query.body, &outside);
        ControlFlow::Continue(())
    }
}

fn nest_set(body: &mut SetExpr, outside: &HashSet<String>) {
    match body {
        SetExpr::Select(select) => nest_select(select, outside),
        SetExpr::SetOperation { left, right, .. } => {
            nest_set(left, outside);
            nest_set(right, outside);
        }
        _ => {}
    }
}

fn nest_select(select: &mut Select, outside: &HashSet<String>) {
    let mut named: HashSet<String> = outside.clone();
    named.extend(qualifiers(&select.projection));
    named.extend(qualifiers(&select.selection));
    named.extend(qualifiers(&select.group_by));
    named.extend(qualifiers(&select.having));
    for (n, from) in select.from.iter_mut().enumerate() {
        while let Some(at) = next_merging_join(from) {
            // Each nesting is a level of recursion for every later stage
            // (planning, display); past this many, the chain is left as
            // written and an unqualified column is refused as ambiguous.
            if nested_depth(&from.relation) >= MAX_NESTED {
                break;
            }
            let inner = &from.joins[..at];
            let mut tables: Vec<String> = vec![name_of(&from.relation)];
            tables.extend(inner.iter().map(|j| name_of(&j.relation)));
            let later = qualifiers(&from.joins[at..].to_vec());
            if tables
                .iter()
                .any(|t| t.is_empty() || named.contains(t) || later.contains(t))
            {
                break;
            }
            if !nest_joins(from, at, n) {
                break;
            }
        }
    }
}

/// How many of the derived tables this nesting makes `relation` sits in.
fn nested_depth(relation: &TableFactor) -> usize {
    let mut depth = 0;
    let mut current = relation;
    while let TableFactor::Derived {
        subquery,
        alias: Some(alias),
        ..
    } = current
        && alias.name.value.starts_with(NESTED_PREFIX)
        && let SetExpr::Select(select) = subquery.body.as_ref()
        && let [from] = select.from.as_slice()
    {
        depth += 1;
        current = &from.relation;
    }
    depth
}

/// The first join after the first that merges columns (NATURAL, USING).
fn next_merging_join(from: &TableWithJoins) -> Option<usize> {
    (1..from.joins.len()).find(|i| {
        matches!(
            constraint(&from.joins[*i].join_operator),
            Some(JoinConstraint::Natural | JoinConstraint::Using(_))
        )
    })
}

/// `from`'s relation and its first `at` joins, as one derived table.
fn nest_joins(from: &mut TableWithJoins, at: usize, n: usize) -> bool {
    // The joins go into a `SELECT *` as they are, not through their text:
    // a long chain nests deeper than the parser would read back.
    let Ok(mut subquery) = super::parse_query("SELECT * FROM nested") else {
        return false;
    };
    let SetExpr::Select(select) = subquery.body.as_mut() else {
        return false;
    };
    select.from = vec![TableWithJoins {
        relation: from.relation.clone(),
        joins: from.joins[..at].to_vec(),
    }];
    from.joins.drain(..at);
    from.relation = TableFactor::Derived {
        lateral: false,
        subquery,
        alias: Some(TableAlias {
            explicit: true,
            at: None,
            name: Ident::new(format!("{NESTED_PREFIX}{n}_{at}")),
            columns: Vec::new(),
        }),
        sample: None,
    };
    true
}

fn constraint(op: &JoinOperator) -> Option<&JoinConstraint> {
    match op {
        JoinOperator::Join(c)
        | JoinOperator::Inner(c)
        | JoinOperator::Left(c)
        | JoinOperator::LeftOuter(c)
        | JoinOperator::Right(c)
        | JoinOperator::RightOuter(c)
        | JoinOperator::FullOuter(c) => Some(c),
        _ => None,
    }
}

/// The name a relation is referred to by; empty if it has none.
fn name_of(relation: &TableFactor) -> String {
    match relation {
        TableFactor::Table {
            alias: Some(alias), ..
        }
        | TableFactor::Derived {
            alias: Some(alias), ..
        } => alias.name.value.to_lowercase(),
        TableFactor::Table { name, .. } => name
            .0
            .last()
            .and_then(|part| part.as_ident())
            .map_or(String::new(), |i| i.value.to_lowercase()),
        _ => String::new(),
    }
}

/// The qualifiers of every qualified column a node names (`a` of `a.x`).
fn qualifiers<V: Visit>(node: &V) -> HashSet<String> {
    let mut out = HashSet::new();
    let _ = visit_expressions(node, |expr| {
        match expr {
            Expr::CompoundIdentifier(parts) if parts.len() > 1 => {
                out.insert(parts[parts.len() - 2].value.to_lowercase());
            }
            Expr::QualifiedWildcard(name, _) => {
                if let Some(ident) = name.0.last().and_then(|p| p.as_ident()) {
                    out.insert(ident.value.to_lowercase());
                }
            }
            _ => {}
        }
        ControlFlow::<()>::Continue(())
    });
    out
}

#[cfg(test)]
mod tests {
    fn nested(sql: &str) -> String {
        let mut query = super::super::parse_query(sql).expect("query");
        super::nest(query.as_mut());
        query.to_string()
    }

    #[test]
    fn later_merging_joins_see_one_merged_column() {
        assert_eq!(
            nested("SELECT id FROM a NATURAL JOIN b NATURAL JOIN c"),
            "SELECT id FROM (SELECT * FROM a NATURAL JOIN b) AS __weir_joined_0_1 NATURAL JOIN c"
        );
        assert_eq!(
            nested("SELECT id FROM a JOIN b USING (id) JOIN c USING (id) JOIN d USING (id)"),
            "SELECT id FROM (SELECT * FROM (SELECT * FROM a JOIN b USING(id)) AS __weir_joined_0_1 \
             JOIN c USING(id)) AS __weir_joined_0_1 JOIN d USING(id)"
        );
    }

    #[test]
    fn chains_whose_tables_are_named_outside_stay() {
        for sql in [
            "SELECT a.x FROM a NATURAL JOIN b NATURAL JOIN c",
            "SELECT id FROM a NATURAL JOIN b NATURAL JOIN c ORDER BY b.y",
            "SELECT id FROM a JOIN b ON a.k = b.k JOIN c ON c.k = a.k",
            "SELECT id FROM a NATURAL JOIN b JOIN c ON c.k = b.k",
        ] {
            assert_eq!(nested(sql), sql, "{sql}");
        }
    }

    #[test]
    fn a_long_chain_is_nested_to_a_bounded_depth() {
        let mut sql = String::from("SELECT count(*) FROM t");
        for i in 1..=100 {
            sql.push_str(&format!(" FULL JOIN t t{i} USING (v)"));
        }
        let text = nested(&sql);
        assert_eq!(
            text.matches("AS __weir_joined_0_1").count(),
            super::MAX_NESTED
        );
    }
}
