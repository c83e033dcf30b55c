//! Partitioned views: a view's groups split over the cluster's partitions
//! by a hash of the group key, so that each node keeps and updates only
//! the groups of the partitions it owns.
//!
//! A node builds its part of the view from the view's plan with one
//! filter added right below the view's aggregate: rows whose group key
//! falls in a partition the node does not own are dropped before they
//! reach any state. Reads hash the view's key columns the same way, so
//! that a node answers for exactly the partitions it owns.

use std::sync::Arc;

use datafusion::arrow::array::{ArrayRef, UInt32Array};
use datafusion::arrow::datatypes::DataType;
use datafusion::common::{DataFusionError, Result as DfResult, ScalarValue};
use datafusion::logical_expr::{
    ColumnarValue, Expr, Filter, LogicalPlan, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl,
    Signature, Volatility, lit,
};

pub use crate::dataflow::partition::{Owned, keep_owned, partitions_of, single_partition};
use crate::error::{Error, Result};

/// `plan` with its aggregate's input restricted to `owned`'s partitions
/// of the group key, or of the group columns named `by` (a split
/// source's, in its order): the aggregate the view's key comes from,
/// found through the projections, filters and aliases above it.
pub fn restrict(plan: &LogicalPlan, owned: &Owned, by: &[String]) -> Result<LogicalPlan> {
    let inputs = match plan {
        LogicalPlan::Aggregate(a) => {
            let key = match by.is_empty() {
                true => a.group_expr.clone(),
                false => groups_named(&a.group_expr, by)?,
            };
            let filter = Filter::try_new(owned_predicate(&key, owned), a.input.clone())?;
            vec![LogicalPlan::Filter(filter)]
        }
        LogicalPlan::Projection(_) | LogicalPlan::Filter(_) | LogicalPlan::SubqueryAlias(_) => {
            let input = plan.inputs()[0];
            vec![restrict(input, owned, by)?]
        }
        _ => {
            return Err(Error::Internal(
                "a partitioned view's plan has no aggregate at its top".into(),
            ));
        }
    };
    Ok(plan.with_new_exprs(plan.expressions(), inputs)?)
}

/// The group expressions that are the columns named `by`, in its order.
fn groups_named(groups: &[Expr], by: &[String]) -> Result<Vec<Expr>> {
    by.iter()
        .map(|name| {
            groups
                .iter()
                .find(|g| matches!(g, Expr::Column(c) if &c.name == name))
                .cloned()
                .ok_or_else(|| {
                    Error::NotSupported(format!(
                        "a view over a source split by ({}) must GROUP BY each of those \
                         columns as it is; \"{name}\" is not among its groups",
                        by.join(", ")
                    ))
                })
        })
        .collect()
}

/// Whether the aggregate at `plan`'s top groups by each column of `by`
/// as it is.
pub fn groups_by(plan: &LogicalPlan, by: &[String]) -> Result<()> {
    match plan {
        LogicalPlan::Aggregate(a) => groups_named(&a.group_expr, by).map(|_| ()),
        LogicalPlan::Projection(_) | LogicalPlan::Filter(_) | LogicalPlan::SubqueryAlias(_) => {
            groups_by(plan.inputs()[0], by)
        }
        _ => Err(Error::Internal(
            "a partitioned view's plan has no aggregate at its top".into(),
        )),
    }
}

/// Whether `plan` ends in an aggregate with a group key, under
/// projections, filters and aliases: what a partitioned view needs.
pub fn ends_in_groups(plan: &LogicalPlan) -> bool {
    match plan {
        LogicalPlan::Aggregate(a) => {
            !a.group_expr.is_empty()
                && !a
                    .group_expr
                    .iter()
                    .any(|e| matches!(e, Expr::GroupingSet(_)))
        }
        LogicalPlan::Projection(_) | LogicalPlan::Filter(_) | LogicalPlan::SubqueryAlias(_) => {
            ends_in_groups(plan.inputs()[0])
        }
        _ => false,
    }
}

fn owned_predicate(groups: &[Expr], owned: &Owned) -> Expr {
    if owned.partitions.is_empty() {
        return lit(false);
    }
    let udf = Arc::new(ScalarUDF::new_from_impl(PartitionOf::new(owned.count)));
    let partition = udf.call(groups.to_vec());
    let list = owned.partitions.iter().map(|p| lit(*p)).collect();
    partition.in_list(list, false)
}

/// `weir_partition(a, b, ...)`: the row's partition of the view's key.
#[derive(Debug, PartialEq, Eq, Hash)]
struct PartitionOf {
    signature: Signature,
    count: u32,
}

impl PartitionOf {
    fn new(count: u32) -> PartitionOf {
        PartitionOf {
            signature: Signature::variadic_any(Volatility::Immutable),
            count,
        }
    }
}

impl ScalarUDFImpl for PartitionOf {
    fn name(&self) -> &str {
        "weir_partition"
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _args: &[DataType]) -> DfResult<DataType> {
        Ok(DataType::UInt32)
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> DfResult<ColumnarValue> {
        let scalar = args
            .args
            .iter()
            .all(|a| matches!(a, ColumnarValue::Scalar(_)));
        let arrays = ColumnarValue::values_to_arrays(&args.args)?;
        let partitions = partitions_of(&arrays, self.count)
            .map_err(|e| DataFusionError::External(Box::new(e)))?;
        let result: ArrayRef = Arc::new(UInt32Array::from(partitions));
        if scalar {
            return Ok(ColumnarValue::Scalar(ScalarValue::try_from_array(
                &result, 0,
            )?));
        }
        Ok(ColumnarValue::Array(result))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::array::{Int32Array, Int64Array, StringArray, StringViewArray};

    #[test]
    fn equal_values_fall_in_one_partition_whatever_their_type() {
        let narrow: ArrayRef = Arc::new(Int32Array::from(vec![1, 2, 300]));
        let wide: ArrayRef = Arc::new(Int64Array::from(vec![1, 2, 300]));
        let text: ArrayRef = Arc::new(StringArray::from(vec!["a", "b", "c"]));
        let view: ArrayRef = Arc::new(StringViewArray::from(vec!["a", "b", "c"]));
        assert_eq!(
            partitions_of(&[narrow, text], 12).expect("partitions"),
            partitions_of(&[wide, view], 12).expect("partitions")
        );
    }

    #[test]
    fn keys_spread_over_the_partitions() {
        let keys: ArrayRef = Arc::new(Int64Array::from_iter_values(0..1000));
        let partitions = partitions_of(&[keys], 12).expect("partitions");
        for p in 0..12 {
            let n = partitions.iter().filter(|x| **x == p).count();
            assert!(n > 40, "partition {p} has {n} of 1000 keys");
        }
    }

    #[test]
    fn the_owned_set_reads_back() {
        let owned = Owned {
            count: 12,
            partitions: vec![0, 5, 11],
        };
        assert_eq!(Owned::decode(&owned.encode()), Some(owned));
        assert_eq!(Owned::decode(b""), None);
    }
}
