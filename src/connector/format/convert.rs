//! Columns arrow's readers leave as text, converted here: timestamps from
//! text or epoch milliseconds, and decimals, with a bad value failing its
//! row alone.

use std::collections::BTreeMap;
use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, AsArray, Int64Array, PrimitiveArray, StringArray};
use datafusion::arrow::compute::cast;
use datafusion::arrow::compute::kernels::cast_utils::parse_decimal;
use datafusion::arrow::datatypes::{
    DataType, Decimal32Type, Decimal64Type, Decimal128Type, Decimal256Type, DecimalType, Field,
    Int64Type, TimeUnit,
};

use crate::error::Result;

/// A column of the table from the reader's column, which is text when the
/// reader left the conversion to us. A value that does not convert, or a NULL
/// in a non-nullable column, marks its row bad with the first such problem.
pub(super) fn convert_column(
    field: &Field,
    column: &ArrayRef,
    bad: &mut BTreeMap<usize, String>,
) -> Result<ArrayRef> {
    let converted = match (column.as_string_opt::<i32>(), field.data_type()) {
        (_, to) if to == column.data_type() => column.clone(),
        (Some(text), DataType::Timestamp(unit, _)) => timestamps(text, field.data_type(), *unit)?,
        (Some(text), DataType::Decimal32(p, s)) => decimals::<Decimal32Type>(text, *p, *s)?,
        (Some(text), DataType::Decimal64(p, s)) => decimals::<Decimal64Type>(text, *p, *s)?,
        (Some(text), DataType::Decimal128(p, s)) => decimals::<Decimal128Type>(text, *p, *s)?,
        (Some(text), DataType::Decimal256(p, s)) => decimals::<Decimal256Type>(text, *p, *s)?,
        // The cast kernel turns a value it cannot read into NULL.
        (_, to) => cast(column, to)?,
    };
    if converted.null_count() > column.null_count() {
        for row in (0..column.len()).filter(|r| column.is_valid(*r) && converted.is_null(*r)) {
            let text = column
                .as_string_opt::<i32>()
                .map_or(String::new(), |t| format!(" \"{}\"", t.value(row)));
            bad.entry(row).or_insert_with(|| {
                format!(
                    "field \"{}\": cannot parse{text} as {}",
                    field.name(),
                    type_name(field.data_type())
                )
            });
        }
    }
    if !field.is_nullable() && converted.null_count() > 0 {
        for row in (0..converted.len()).filter(|r| converted.is_null(*r)) {
            bad.entry(row).or_insert_with(|| {
                format!("field \"{}\": null in a NOT NULL column", field.name())
            });
        }
    }
    Ok(converted)
}

fn type_name(data_type: &DataType) -> String {
    match data_type {
        DataType::Timestamp(..) => "timestamp".into(),
        other => other.to_string(),
    }
}

/// Timestamps from text: an integer is epoch milliseconds; anything else goes
/// to arrow's timestamp parser. An unreadable value becomes NULL.
fn timestamps(text: &StringArray, to: &DataType, unit: TimeUnit) -> Result<ArrayRef> {
    let parsed = cast(&cast(text, to)?, &DataType::Int64)?;
    let parsed = parsed.as_primitive::<Int64Type>();
    let values: Int64Array = text
        .iter()
        .zip(parsed.iter())
        .map(|(text, parsed)| match text?.parse::<i64>() {
            Ok(millis) => from_millis(millis, unit),
            Err(_) => parsed,
        })
        .collect();
    Ok(cast(&values, to)?)
}

fn from_millis(millis: i64, unit: TimeUnit) -> Option<i64> {
    match unit {
        TimeUnit::Second => Some(millis.div_euclid(1_000)),
        TimeUnit::Millisecond => Some(millis),
        TimeUnit::Microsecond => millis.checked_mul(1_000),
        TimeUnit::Nanosecond => millis.checked_mul(1_000_000),
    }
}

/// Decimals through arrow's own decimal parser (the one its readers use,
/// which takes exponents: `1.5e2`); an unreadable value becomes NULL.
fn decimals<T: DecimalType>(text: &StringArray, precision: u8, scale: i8) -> Result<ArrayRef> {
    let values: PrimitiveArray<T> = text
        .iter()
        .map(|text| parse_decimal::<T>(text?, precision, scale).ok())
        .collect();
    Ok(Arc::new(values.with_precision_and_scale(precision, scale)?))
}
