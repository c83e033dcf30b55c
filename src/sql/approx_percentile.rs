//! `approx_percentile(q [, relative_error]) WITHIN GROUP (ORDER BY x)`, as
//! RisingWave spells it: a quantile of `x` within a relative error (0.01
//! unless given), from a sketch whose size grows with the logarithm of
//! the range of values, not with the rows.
//!
//! The sketch is DDSketch's (Masson, Rim and Lee, VLDB 2019): with
//! γ = (1 + e) / (1 − e), a value v ≠ 0 falls in bucket ⌈log_γ |v|⌉ of its
//! sign, and bucket k stands for ±2γ^k / (γ + 1), within e of every value
//! in it. Zeros are counted apart. The answer is the bucket of the value at
//! position ⌊q · (n − 1)⌋ (from 0) in the ordering. Rows leave the sketch
//! as they came, so a view keeps it under deletes.

use std::collections::BTreeMap;
use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, BinaryArray, Float64Array};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::{DataType, Field, FieldRef};
use datafusion::common::{Result as DfResult, ScalarValue, exec_err, plan_err};
use datafusion::logical_expr::function::{AccumulatorArgs, StateFieldsArgs};
use datafusion::logical_expr::{
    Accumulator, AggregateUDF, AggregateUDFImpl, ColumnarValue, Signature, TypeSignature,
    Volatility,
};

use super::percentile::{empty_batch, out_of_range};

const DEFAULT_RELATIVE_ERROR: f64 = 0.01;

/// `approx_percentile`, to register on a context.
pub fn approx_percentile() -> AggregateUDF {
    AggregateUDF::new_from_impl(ApproxPercentile {
        signature: Signature::one_of(
            vec![TypeSignature::Any(2), TypeSignature::Any(3)],
            Volatility::Immutable,
        ),
    })
}

#[derive(Debug, PartialEq, Eq, Hash)]
struct ApproxPercentile {
    signature: Signature,
}

impl AggregateUDFImpl for ApproxPercentile {
    fn name(&self) -> &str {
        "approx_percentile"
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _arg_types: &[DataType]) -> DfResult<DataType> {
        Ok(DataType::Float64)
    }

    fn state_fields(&self, args: StateFieldsArgs) -> DfResult<Vec<FieldRef>> {
        Ok(vec![Arc::new(Field::new(
            format!("{}[sketch]", args.name),
            DataType::Binary,
            true,
        ))])
    }

    fn accumulator(&self, args: AccumulatorArgs) -> DfResult<Box<dyn Accumulator>> {
        if args.order_bys.is_empty() {
            return plan_err!(
                "approx_percentile needs WITHIN GROUP (ORDER BY x), like approx_percentile(0.5) WITHIN GROUP (ORDER BY x)"
            );
        }
        let quantile = constant(&args, 1, "quantile")?;
        if !(0.0..=1.0).contains(&quantile) {
            return Err(out_of_range(format!(
                "approx_percentile: quantile {quantile} is not between 0 and 1"
            )));
        }
        let error = match args.exprs.get(2) {
            Some(_) => constant(&args, 2, "relative_error")?,
            None => DEFAULT_RELATIVE_ERROR,
        };
        if !(error > 0.0 && error < 1.0) {
            return Err(out_of_range(format!(
                "approx_percentile: relative_error {error} is not between 0 and 1 (both excluded)"
            )));
        }
        let descending = args.order_bys[0].options.descending;
        Ok(Box::new(Sketch::new(quantile, error, descending)))
    }

    fn supports_within_group_clause(&self) -> bool {
        true
    }
}

/// The argument at `at` as a constant number.
fn constant(args: &AccumulatorArgs, at: usize, what: &str) -> DfResult<f64> {
    let value = match args.exprs.get(at).map(|e| e.evaluate(&empty_batch())) {
        Some(Ok(ColumnarValue::Scalar(value))) => value.cast_to(&DataType::Float64)?,
        _ => return plan_err!("approx_percentile takes a constant {what}"),
    };
    match value {
        ScalarValue::Float64(Some(v)) => Ok(v),
        _ => plan_err!("approx_percentile needs a {what}, not NULL"),
    }
}

/// Counts per bucket; counts may fall as rows are retracted.
#[derive(Debug)]
struct Sketch {
    gamma: f64,
    quantile: f64,
    descending: bool,
    negative: BTreeMap<i32, i64>,
    zeros: i64,
    positive: BTreeMap<i32, i64>,
}

impl Sketch {
    fn new(quantile: f64, error: f64, descending: bool) -> Sketch {
        Sketch {
            gamma: (1.0 + error) / (1.0 - error),
            quantile,
            descending,
            negative: BTreeMap::new(),
            zeros: 0,
            positive: BTreeMap::new(),
        }
    }

    fn add(&mut self, value: f64, weight: i64) {
        if value == 0.0 {
            self.zeros += weight;
            return;
        }
        let bucket = value.abs().log(self.gamma).ceil() as i32;
        let buckets = if value > 0.0 {
            &mut self.positive
        } else {
            &mut self.negative
        };
        let count = buckets.entry(bucket).or_insert(0);
        *count += weight;
        if *count == 0 {
            buckets.remove(&bucket);
        }
    }

    fn add_array(&mut self, array: &ArrayRef, weight: i64) -> DfResult<()> {
        let values = cast(array, &DataType::Float64)?;
        let Some(values) = values.as_any().downcast_ref::<Float64Array>() else {
            return exec_err!("approx_percentile: values are not numbers");
        };
        for value in values.iter().flatten() {
            if value.is_finite() {
                self.add(value, weight);
            }
        }
        Ok(())
    }

    /// Buckets in ascending order of the values they stand for, each with
    /// its representative and count.
    fn ascending(&self) -> impl Iterator<Item = (f64, i64)> + '_ {
        // In this order of operations, so that the last digit agrees with
        // RisingWave's.
        let value = move |k: i32| 2.0 * self.gamma.powi(k) / (self.gamma + 1.0);
        let negative = self
            .negative
            .iter()
            .rev()
            .map(move |(k, c)| (-value(*k), *c));
        let positive = self.positive.iter().map(move |(k, c)| (value(*k), *c));
        negative
            .chain(std::iter::once((0.0, self.zeros)))
            .chain(positive)
    }

    fn answer(&self) -> Option<f64> {
        let n: i64 = self.ascending().map(|(_, c)| c).sum();
        if n <= 0 {
            return None;
        }
        let rank = ((n - 1) as f64 * self.quantile).floor() as i64;
        let position = if self.descending { n - 1 - rank } else { rank };
        let mut seen = 0;
        self.ascending().find_map(|(value, count)| {
            seen += count;
            (seen > position).then_some(value)
        })
    }

    /// zeros, then (sign, bucket, count) triples: 1 + 4 + 8 bytes each.
    fn encode(&self) -> Vec<u8> {
        let mut out = self.zeros.to_le_bytes().to_vec();
        for (sign, buckets) in [(0u8, &self.negative), (1u8, &self.positive)] {
            for (bucket, count) in buckets {
                out.push(sign);
                out.extend_from_slice(&bucket.to_le_bytes());
                out.extend_from_slice(&count.to_le_bytes());
            }
        }
        out
    }

    fn merge(&mut self, encoded: &[u8]) -> DfResult<()> {
        let Some((zeros, mut rest)) = encoded.split_first_chunk::<8>() else {
            return exec_err!("approx_percentile: a sketch state is cut short");
        };
        self.zeros += i64::from_le_bytes(*zeros);
        while let Some((entry, tail)) = rest.split_first_chunk::<13>() {
            let bucket = i32::from_le_bytes(entry[1..5].try_into().expect("4 bytes"));
            let count = i64::from_le_bytes(entry[5..13].try_into().expect("8 bytes"));
            let buckets = if entry[0] == 1 {
                &mut self.positive
            } else {
                &mut self.negative
            };
            *buckets.entry(bucket).or_insert(0) += count;
            rest = tail;
        }
        if !rest.is_empty() {
            return exec_err!("approx_percentile: a sketch state is cut short");
        }
        Ok(())
    }
}

impl Accumulator for Sketch {
    fn update_batch(&mut self, values: &[ArrayRef]) -> DfResult<()> {
        self.add_array(&values[0], 1)
    }

    fn retract_batch(&mut self, values: &[ArrayRef]) -> DfResult<()> {
        self.add_array(&values[0], -1)
    }

    fn supports_retract_batch(&self) -> bool {
        true
    }

    fn merge_batch(&mut self, states: &[ArrayRef]) -> DfResult<()> {
        let Some(sketches) = states[0].as_any().downcast_ref::<BinaryArray>() else {
            return exec_err!("approx_percentile: a sketch state is not binary");
        };
        for sketch in sketches.iter().flatten() {
            self.merge(sketch)?;
        }
        Ok(())
    }

    fn state(&mut self) -> DfResult<Vec<ScalarValue>> {
        Ok(vec![ScalarValue::Binary(Some(self.encode()))])
    }

    fn evaluate(&mut self) -> DfResult<ScalarValue> {
        Ok(ScalarValue::Float64(self.answer()))
    }

    fn size(&self) -> usize {
        std::mem::size_of_val(self) + (self.negative.len() + self.positive.len()) * 32
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sketch(values: impl IntoIterator<Item = i32>, quantile: f64) -> Sketch {
        let mut sketch = Sketch::new(quantile, 0.01, false);
        for v in values {
            sketch.add(v as f64, 1);
        }
        sketch
    }

    #[test]
    fn the_answer_is_within_the_relative_error() {
        let sketch = sketch(0..=1000, 0.5);
        let answer = sketch.answer().expect("rows");
        assert!((answer - 500.0).abs() <= 500.0 * 0.01, "{answer}");
        let sketch = self::sketch(-1000..=-1, 0.0);
        let answer = sketch.answer().expect("rows");
        assert!((answer + 1000.0).abs() <= 1000.0 * 0.01, "{answer}");
    }

    #[test]
    fn zeros_empty_sketches_and_retractions() {
        assert_eq!(sketch([0, 0, 5], 0.4).answer(), Some(0.0));
        assert_eq!(sketch([], 0.5).answer(), None);
        let mut s = sketch([1, 100], 1.0);
        s.add(100.0, -1);
        let answer = s.answer().expect("one row");
        assert!((answer - 1.0).abs() <= 0.01, "{answer}");
    }

    #[test]
    fn a_state_merges_into_another() {
        let mut whole = sketch(-50..50, 0.25);
        let mut left = sketch(-50..0, 0.25);
        let right = sketch(0..50, 0.25);
        left.merge(&right.encode()).expect("merges");
        assert_eq!(left.answer(), whole.answer());
        assert_eq!(
            left.encode(),
            whole.state().map(|_| whole.encode()).expect("state")
        );
    }
}
