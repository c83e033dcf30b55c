//! `to_char`, and the two-argument `to_timestamp` and `to_date`, under
//! PostgreSQL's names and with its templates. The one-argument forms keep
//! DataFusion's implementation.

use std::sync::Arc;

use chrono::{DateTime, NaiveDateTime};
use datafusion::arrow::array::{
    Array, ArrayRef, AsArray, Date32Builder, StringBuilder, TimestampMicrosecondBuilder,
};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::{DataType, TimeUnit, TimestampMicrosecondType};
use datafusion::common::{DataFusionError, plan_err};
use datafusion::config::ConfigOptions;
use datafusion::logical_expr::{
    ColumnarValue, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, Volatility,
};

use super::format::Zone;
use super::{Node, compile, format, parse};

/// The functions to register, replacing DataFusion's of the same names.
pub fn functions(config: &ConfigOptions) -> Vec<ScalarUDF> {
    vec![
        ScalarUDF::new_from_impl(ToChar::new()),
        ScalarUDF::new_from_impl(Read::new(
            "to_timestamp",
            datafusion::functions::datetime::to_timestamp(config),
        )),
        ScalarUDF::new_from_impl(Read::new(
            "to_date",
            datafusion::functions::datetime::to_date(),
        )),
    ]
}

const UTC: &str = "+00:00";

fn error(e: crate::error::Error) -> DataFusionError {
    DataFusionError::External(Box::new(e))
}

/// `to_char(date | timestamp | timestamptz, template)`.
#[derive(Debug, PartialEq, Eq, Hash)]
struct ToChar {
    signature: Signature,
}

impl ToChar {
    fn new() -> ToChar {
        ToChar {
            signature: Signature::user_defined(Volatility::Immutable),
        }
    }
}

impl ScalarUDFImpl for ToChar {
    fn name(&self) -> &str {
        "to_char"
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn coerce_types(&self, args: &[DataType]) -> datafusion::error::Result<Vec<DataType>> {
        let [value, _] = args else {
            return plan_err!("to_char takes a value and a template: to_char(ts, 'YYYY-MM-DD')");
        };
        let value = match value {
            DataType::Date32 | DataType::Date64 => DataType::Timestamp(TimeUnit::Microsecond, None),
            DataType::Timestamp(_, zone) => {
                DataType::Timestamp(TimeUnit::Microsecond, zone.as_ref().map(|_| UTC.into()))
            }
            DataType::Null => DataType::Timestamp(TimeUnit::Microsecond, None),
            // Refused when called, with a message, rather than as a bare
            // missing signature.
            number if number.is_numeric() => DataType::Float64,
            other => {
                return Err(error(crate::error::Error::NotSupported(format!(
                    "to_char of {other} is not supported; it formats dates and timestamps"
                ))));
            }
        };
        Ok(vec![value, DataType::Utf8])
    }

    fn return_type(&self, _args: &[DataType]) -> datafusion::error::Result<DataType> {
        Ok(DataType::Utf8)
    }

    fn invoke_with_args(
        &self,
        args: ScalarFunctionArgs,
    ) -> datafusion::error::Result<ColumnarValue> {
        let rows = args.number_rows;
        if args.args[0].data_type().is_numeric() {
            return Err(error(crate::error::Error::NotSupported(
                "to_char of a number is not supported yet; cast it to text, or use round() and ||"
                    .into(),
            )));
        }
        let zoned = matches!(args.args[0].data_type(), DataType::Timestamp(_, Some(_)));
        let arrays = ColumnarValue::values_to_arrays(&args.args)?;
        let values = cast(
            &arrays[0],
            &DataType::Timestamp(TimeUnit::Microsecond, None),
        )?;
        let values = values.as_primitive::<TimestampMicrosecondType>();
        let templates = arrays[1].as_string::<i32>();
        let zone = zoned.then_some(Zone {
            name: "UTC",
            offset_seconds: 0,
        });
        let mut compiled = Templates::default();
        let mut out = StringBuilder::with_capacity(rows, rows * 16);
        for row in 0..rows {
            if values.is_null(row) || templates.is_null(row) {
                out.append_null();
                continue;
            }
            let time = local_time(values.value(row))?;
            out.append_value(format(&time, zone, compiled.get(templates.value(row))));
        }
        scalar_if_all(&args.args, Arc::new(out.finish()))
    }
}

/// A template compiled once while the rows share it.
#[derive(Default)]
struct Templates {
    text: String,
    nodes: Vec<Node>,
}

impl Templates {
    fn get(&mut self, template: &str) -> &[Node] {
        if self.nodes.is_empty() || self.text != template {
            self.text = template.to_string();
            self.nodes = compile(template);
        }
        &self.nodes
    }
}

fn local_time(micros: i64) -> datafusion::error::Result<NaiveDateTime> {
    DateTime::from_timestamp_micros(micros)
        .map(|t| t.naive_utc())
        .ok_or_else(|| {
            error(crate::error::Error::DatetimeOutOfRange(
                "timestamp out of range".into(),
            ))
        })
}

/// A scalar answer when every argument was one.
fn scalar_if_all(
    args: &[ColumnarValue],
    array: ArrayRef,
) -> datafusion::error::Result<ColumnarValue> {
    if args.iter().all(|a| matches!(a, ColumnarValue::Scalar(_))) {
        let scalar = datafusion::common::ScalarValue::try_from_array(&array, 0)?;
        return Ok(ColumnarValue::Scalar(scalar));
    }
    Ok(ColumnarValue::Array(array))
}

/// `to_timestamp(text, template)` (a `timestamptz`, as PostgreSQL's) or
/// `to_date(text, template)`; other arities go to DataFusion's function.
#[derive(Debug, PartialEq, Eq, Hash)]
struct Read {
    name: &'static str,
    inner: Arc<ScalarUDF>,
    signature: Signature,
}

impl Read {
    fn new(name: &'static str, inner: Arc<ScalarUDF>) -> Read {
        Read {
            name,
            inner,
            signature: Signature::user_defined(Volatility::Immutable),
        }
    }

    fn is_date(&self) -> bool {
        self.name == "to_date"
    }
}

impl ScalarUDFImpl for Read {
    fn name(&self) -> &str {
        self.name
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn coerce_types(&self, args: &[DataType]) -> datafusion::error::Result<Vec<DataType>> {
        match args.len() {
            2 => Ok(vec![DataType::Utf8, DataType::Utf8]),
            _ => Ok(args.to_vec()),
        }
    }

    fn return_type(&self, args: &[DataType]) -> datafusion::error::Result<DataType> {
        match (args.len(), self.is_date()) {
            (2, true) => Ok(DataType::Date32),
            (2, false) => Ok(DataType::Timestamp(TimeUnit::Microsecond, Some(UTC.into()))),
            _ => self.inner.return_type(args),
        }
    }

    fn invoke_with_args(
        &self,
        args: ScalarFunctionArgs,
    ) -> datafusion::error::Result<ColumnarValue> {
        if args.args.len() != 2 {
            return self.inner.invoke_with_args(args);
        }
        let rows = args.number_rows;
        let arrays = ColumnarValue::values_to_arrays(&args.args)?;
        let (texts, templates) = (arrays[0].as_string::<i32>(), arrays[1].as_string::<i32>());
        let mut compiled = Templates::default();
        let mut read = |row: usize| -> datafusion::error::Result<Option<(NaiveDateTime, i32)>> {
            if texts.is_null(row) || templates.is_null(row) {
                return Ok(None);
            }
            let nodes = compiled.get(templates.value(row));
            parse(texts.value(row), nodes).map(Some).map_err(error)
        };
        let array: ArrayRef = match self.is_date() {
            true => {
                let mut out = Date32Builder::with_capacity(rows);
                for row in 0..rows {
                    out.append_option(read(row)?.map(|(t, _)| days(&t)));
                }
                Arc::new(out.finish())
            }
            false => {
                let mut out = TimestampMicrosecondBuilder::with_capacity(rows);
                for row in 0..rows {
                    let micros = read(row)?.map(|(t, offset)| {
                        t.and_utc().timestamp_micros() - i64::from(offset) * 1_000_000
                    });
                    out.append_option(micros);
                }
                Arc::new(out.finish().with_timezone(UTC))
            }
        };
        scalar_if_all(&args.args, array)
    }
}

fn days(time: &NaiveDateTime) -> i32 {
    (time.and_utc().timestamp().div_euclid(86_400)) as i32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_function_has_its_postgresql_name() {
        let names: Vec<String> = functions(&ConfigOptions::default())
            .iter()
            .map(|f| f.name().to_string())
            .collect();
        assert_eq!(names, ["to_char", "to_timestamp", "to_date"]);
    }
}
