//! `GROUP BY GROUPING SETS (...)`, `ROLLUP (...)` and `CUBE (...)` in a
//! view. DataFusion plans them as one aggregate that groups each row once
//! per set; the dataflow's aggregate groups by one list of columns. So the
//! aggregate becomes a UNION ALL of one plain aggregate per set, each with
//! the columns outside its set NULL and the `__grouping_id` DataFusion would
//! have given it, which `GROUPING(...)` above reads.

use std::sync::Arc;

use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::common::{Column, Result as DfResult, ScalarValue, plan_err};
use datafusion::logical_expr::{Aggregate, Expr, GroupingSet, LogicalPlan, Projection, Union};

use crate::error::Result;

/// Every grouping-set aggregate in `plan`, as a union of plain ones.
pub fn expand(plan: LogicalPlan) -> Result<LogicalPlan> {
    Ok(plan
        .transform_up(|node| match node {
            LogicalPlan::Aggregate(aggregate) if is_grouping_set(&aggregate) => {
                Ok(Transformed::yes(union_of_sets(aggregate)?))
            }
            other => Ok(Transformed::no(other)),
        })?
        .data)
}

fn is_grouping_set(aggregate: &Aggregate) -> bool {
    matches!(aggregate.group_expr.as_slice(), [Expr::GroupingSet(_)])
}

fn union_of_sets(aggregate: Aggregate) -> DfResult<LogicalPlan> {
    let [Expr::GroupingSet(grouping)] = aggregate.group_expr.as_slice() else {
        return plan_err!("not a grouping set aggregate");
    };
    let columns: Vec<Expr> = grouping.distinct_expr().into_iter().cloned().collect();
    let sets = sets(grouping);
    let mut seen_masks: Vec<u64> = Vec::new();
    let mut inputs = Vec::with_capacity(sets.len());
    for set in &sets {
        let mask = null_mask(&columns, set);
        let ordinal = seen_masks.iter().filter(|m| **m == mask).count() as u64;
        seen_masks.push(mask);
        let id = mask | (ordinal << columns.len());
        inputs.push(Arc::new(one_set(&aggregate, &columns, set, id)?));
    }
    Ok(LogicalPlan::Union(Union {
        inputs,
        schema: aggregate.schema.clone(),
    }))
}

/// The sets a grouping lists, each a list of the grouping's columns.
fn sets(grouping: &GroupingSet) -> Vec<Vec<Expr>> {
    match grouping {
        GroupingSet::GroupingSets(sets) => sets.clone(),
        GroupingSet::Rollup(columns) => (0..=columns.len())
            .rev()
            .map(|n| columns[..n].to_vec())
            .collect(),
        GroupingSet::Cube(columns) => (0..1u64 << columns.len())
            .map(|bits| {
                columns
                    .iter()
                    .enumerate()
                    .filter(|(i, _)| bits & (1 << i) != 0)
                    .map(|(_, c)| c.clone())
                    .collect()
            })
            .collect(),
    }
}

/// DataFusion's bits for a set: one per column, the first column highest,
/// set where the column is outside the set (and so NULL).
fn null_mask(columns: &[Expr], set: &[Expr]) -> u64 {
    columns.iter().fold(0, |mask, column| {
        (mask << 1) | u64::from(!set.contains(column))
    })
}

/// The aggregate over one set, shaped as the grouping-set aggregate's output.
fn one_set(
    aggregate: &Aggregate,
    columns: &[Expr],
    set: &[Expr],
    id: u64,
) -> DfResult<LogicalPlan> {
    let plain = Aggregate::try_new(
        aggregate.input.clone(),
        set.to_vec(),
        aggregate.aggr_expr.clone(),
    )?;
    let output = aggregate.schema.clone();
    let field = |i: usize| output.qualified_field(i);
    let plain_column = |i: usize| Expr::Column(Column::from(plain.schema.qualified_field(i)));
    let mut exprs = Vec::with_capacity(output.fields().len());
    for (i, column) in columns.iter().enumerate() {
        let value = match set.iter().position(|c| c == column) {
            Some(at) => plain_column(at),
            None => Expr::Literal(ScalarValue::try_from(field(i).1.data_type())?, None),
        };
        let (qualifier, f) = field(i);
        exprs.push(value.alias_qualified(qualifier.cloned(), f.name()));
    }
    let (_, id_field) = field(columns.len());
    let id = ScalarValue::UInt64(Some(id)).cast_to(id_field.data_type())?;
    exprs.push(Expr::Literal(id, None).alias(id_field.name()));
    for k in 0..aggregate.aggr_expr.len() {
        let (qualifier, f) = field(columns.len() + 1 + k);
        exprs.push(plain_column(set.len() + k).alias_qualified(qualifier.cloned(), f.name()));
    }
    Ok(LogicalPlan::Projection(Projection::try_new(
        exprs,
        Arc::new(LogicalPlan::Aggregate(plain)),
    )?))
}
