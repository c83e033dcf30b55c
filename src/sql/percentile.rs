//! PostgreSQL's ordered-set aggregates DataFusion lacks, on any ordered type
//! (numbers, text, times):
//! - `percentile_disc(f) WITHIN GROUP (ORDER BY x)`: the first value in the
//!   ordering whose position reaches the fraction `f` of the rows
//!   (DataFusion has only the continuous one);
//! - `mode() WITHIN GROUP (ORDER BY x)`: the most frequent value, the first
//!   in the ordering among equally frequent ones;
//! - `percentile_cont(f) WITHIN GROUP (ORDER BY x)` on numbers, in double
//!   precision, interpolated as PostgreSQL does. DataFusion's own keeps six
//!   decimals of the fraction (9.009999 where PostgreSQL answers 9.01).

use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, ListArray, RecordBatch};
use datafusion::arrow::datatypes::{DataType, Field, FieldRef, Schema};
use datafusion::common::{DataFusionError, Result as DfResult, ScalarValue, exec_err, plan_err};
use datafusion::logical_expr::function::{AccumulatorArgs, StateFieldsArgs};
use datafusion::logical_expr::{
    Accumulator, AggregateUDF, AggregateUDFImpl, ColumnarValue, Signature, Volatility,
};

/// `percentile_disc`, to register on a context.
pub fn percentile_disc() -> AggregateUDF {
    AggregateUDF::new_from_impl(OrderedSet {
        name: "percentile_disc",
        signature: Signature::any(2, Volatility::Immutable),
    })
}

/// `percentile_cont`, to register on a context in place of DataFusion's.
pub fn percentile_cont() -> AggregateUDF {
    AggregateUDF::new_from_impl(OrderedSet {
        name: "percentile_cont",
        signature: Signature::any(2, Volatility::Immutable),
    })
}

/// `mode`, to register on a context.
pub fn mode() -> AggregateUDF {
    AggregateUDF::new_from_impl(OrderedSet {
        name: "mode",
        signature: Signature::any(1, Volatility::Immutable),
    })
}

#[derive(Debug, PartialEq, Eq, Hash)]
struct OrderedSet {
    name: &'static str,
    signature: Signature,
}

/// Which value of the ordered group the aggregate answers.
#[derive(Debug, Clone, Copy)]
enum Pick {
    Percentile(f64),
    Continuous(f64),
    Mode,
}

impl AggregateUDFImpl for OrderedSet {
    fn name(&self) -> &str {
        self.name
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, arg_types: &[DataType]) -> DfResult<DataType> {
        if self.name != "percentile_cont" {
            return Ok(arg_types[0].clone());
        }
        if !arg_types[0].is_numeric() {
            return plan_err!(
                "percentile_cont orders numbers, not {}; percentile_disc takes any ordered type",
                arg_types[0]
            );
        }
        Ok(DataType::Float64)
    }

    fn state_fields(&self, args: StateFieldsArgs) -> DfResult<Vec<FieldRef>> {
        let item = Field::new_list_field(args.input_fields[0].data_type().clone(), true);
        Ok(vec![Arc::new(Field::new(
            format!("{}[values]", args.name),
            DataType::List(Arc::new(item)),
            true,
        ))])
    }

    fn accumulator(&self, args: AccumulatorArgs) -> DfResult<Box<dyn Accumulator>> {
        let pick = if self.name == "mode" {
            Pick::Mode
        } else {
            let fraction = match args.exprs.get(1).map(|e| e.evaluate(&empty_batch())) {
                Some(Ok(ColumnarValue::Scalar(value))) => fraction_of(&value, self.name)?,
                _ => {
                    return plan_err!(
                        "{} takes a constant fraction, like {}(0.5)",
                        self.name,
                        self.name
                    );
                }
            };
            match self.name {
                "percentile_cont" => Pick::Continuous(fraction),
                _ => Pick::Percentile(fraction),
            }
        };
        let descending = args.order_bys.first().is_some_and(|s| s.options.descending);
        Ok(Box::new(Values {
            data_type: args.return_field.data_type().clone(),
            input_type: args.exprs[0].data_type(args.schema)?,
            pick,
            descending,
            values: Vec::new(),
        }))
    }

    fn supports_within_group_clause(&self) -> bool {
        true
    }
}

/// The batch a constant argument is evaluated against.
pub(super) fn empty_batch() -> RecordBatch {
    RecordBatch::new_empty(Arc::new(Schema::empty()))
}

/// An argument out of range, 22003 as in PostgreSQL.
pub(super) fn out_of_range(message: String) -> DataFusionError {
    DataFusionError::External(Box::new(crate::error::Error::OutOfRange(message)))
}

/// The fraction as a number in [0, 1], as PostgreSQL checks it.
fn fraction_of(value: &ScalarValue, name: &str) -> DfResult<f64> {
    let fraction = match value.cast_to(&DataType::Float64)? {
        ScalarValue::Float64(Some(f)) => f,
        _ => return plan_err!("{name} needs a fraction, not NULL"),
    };
    if !(0.0..=1.0).contains(&fraction) {
        return Err(out_of_range(format!(
            "percentile value {fraction} is not between 0 and 1"
        )));
    }
    Ok(fraction)
}

/// Every non-null value of the group, ordered when the result is asked for.
#[derive(Debug)]
struct Values {
    /// The result's type: the input's, or double precision for
    /// `percentile_cont`.
    data_type: DataType,
    input_type: DataType,
    pick: Pick,
    descending: bool,
    values: Vec<ScalarValue>,
}

impl Values {
    fn add(&mut self, array: &ArrayRef) -> DfResult<()> {
        for row in 0..array.len() {
            if array.is_valid(row) {
                self.values.push(ScalarValue::try_from_array(array, row)?);
            }
        }
        Ok(())
    }
}

impl Accumulator for Values {
    fn update_batch(&mut self, values: &[ArrayRef]) -> DfResult<()> {
        self.add(&values[0])
    }

    fn merge_batch(&mut self, states: &[ArrayRef]) -> DfResult<()> {
        let Some(lists) = states[0].as_any().downcast_ref::<ListArray>() else {
            return exec_err!("percentile_disc state is not a list");
        };
        for list in lists.iter().flatten() {
            self.add(&list)?;
        }
        Ok(())
    }

    fn state(&mut self) -> DfResult<Vec<ScalarValue>> {
        let list = ScalarValue::new_list_nullable(&self.values, &self.input_type);
        Ok(vec![ScalarValue::List(list)])
    }

    fn evaluate(&mut self) -> DfResult<ScalarValue> {
        if self.values.is_empty() {
            return ScalarValue::try_from(&self.data_type);
        }
        self.values
            .sort_by(|a, b| a.partial_cmp(b).unwrap_or(std::cmp::Ordering::Equal));
        if self.descending {
            self.values.reverse();
        }
        match self.pick {
            Pick::Percentile(fraction) => Ok(percentile(&self.values, fraction)),
            Pick::Continuous(fraction) => interpolated(&self.values, fraction),
            Pick::Mode => Ok(most_frequent(&self.values)),
        }
    }

    fn size(&self) -> usize {
        std::mem::size_of_val(self) + self.values.iter().map(ScalarValue::size).sum::<usize>()
    }
}

/// The first value whose cumulative share of the sorted, non-empty rows
/// reaches the fraction: position ceil(f * n), counted from 1.
fn percentile(sorted: &[ScalarValue], fraction: f64) -> ScalarValue {
    let n = sorted.len();
    let position = (fraction * n as f64).ceil() as usize;
    sorted[position.clamp(1, n) - 1].clone()
}

/// Between the values at positions ⌊f · (n − 1)⌋ and ⌈f · (n − 1)⌉ (from
/// 0) of the sorted, non-empty rows, in proportion, computed as PostgreSQL
/// computes it so that the last digit agrees.
fn interpolated(sorted: &[ScalarValue], fraction: f64) -> DfResult<ScalarValue> {
    let number = |at: usize| match sorted[at].cast_to(&DataType::Float64)? {
        ScalarValue::Float64(Some(v)) => Ok(v),
        other => exec_err!("percentile_cont: {other} is not a number"),
    };
    let position = fraction * (sorted.len() - 1) as f64;
    let (first, second) = (position.floor(), position.ceil());
    let low = number(first as usize)?;
    let value = if first == second {
        low
    } else {
        low + (position - first) * (number(second as usize)? - low)
    };
    Ok(ScalarValue::Float64(Some(value)))
}

/// The value of the longest run of equal ones in the sorted, non-empty
/// rows; the first such run wins a tie.
fn most_frequent(sorted: &[ScalarValue]) -> ScalarValue {
    let mut best = (0, 0);
    let mut start = 0;
    for i in 1..=sorted.len() {
        if i == sorted.len() || sorted[i] != sorted[start] {
            if i - start > best.1 {
                best = (start, i - start);
            }
            start = i;
        }
    }
    sorted[best.0].clone()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ints(values: &[i32]) -> Vec<ScalarValue> {
        values
            .iter()
            .map(|v| ScalarValue::Int32(Some(*v)))
            .collect()
    }

    #[test]
    fn percentile_takes_the_first_value_reaching_the_fraction() {
        let sorted = ints(&[10, 20, 30, 40]);
        assert_eq!(percentile(&sorted, 0.5), ScalarValue::Int32(Some(20)));
        assert_eq!(percentile(&sorted, 0.51), ScalarValue::Int32(Some(30)));
        assert_eq!(percentile(&sorted, 0.0), ScalarValue::Int32(Some(10)));
        assert_eq!(percentile(&sorted, 1.0), ScalarValue::Int32(Some(40)));
    }

    #[test]
    fn percentile_cont_interpolates_as_postgres_does() {
        let sorted: Vec<ScalarValue> = (0..=1000)
            .chain([0])
            .map(|v| ScalarValue::Int32(Some(v)))
            .collect::<Vec<_>>();
        let mut sorted = sorted;
        sorted.sort_by(|a, b| a.partial_cmp(b).expect("ints"));
        let answer = interpolated(&sorted, 0.01).expect("numbers");
        assert_eq!(answer, ScalarValue::Float64(Some(9.01)));
        let two = ints(&[10, 20]);
        assert_eq!(
            interpolated(&two, 0.5).expect("numbers"),
            ScalarValue::Float64(Some(15.0))
        );
    }

    #[test]
    fn mode_takes_the_longest_run_and_the_first_on_a_tie() {
        assert_eq!(
            most_frequent(&ints(&[1, 2, 2, 3, 3])),
            ScalarValue::Int32(Some(2))
        );
        assert_eq!(
            most_frequent(&ints(&[1, 3, 3, 3])),
            ScalarValue::Int32(Some(3))
        );
        assert_eq!(most_frequent(&ints(&[7])), ScalarValue::Int32(Some(7)));
    }
}
