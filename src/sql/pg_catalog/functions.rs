//! The functions psql and catalog clients call that the crate leaves out.

use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, AsArray, StringArray};
use datafusion::arrow::datatypes::{DataType, Int64Type};
use datafusion::common::ScalarValue;
use datafusion::error::{DataFusionError, Result as DfResult};
use datafusion::logical_expr::{
    ColumnarValue, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, TypeSignature,
    Volatility,
};
use datafusion::prelude::{SessionContext, create_udf};

use super::ROLE;
use crate::catalog::{Catalog, Object};

/// Functions whose answer does not depend on their arguments in weir: one
/// schema, every object visible, no tablespaces, no sizes kept.
const CONSTANT: &[(&str, Constant)] = &[
    ("pg_function_is_visible", Constant::True),
    ("pg_type_is_visible", Constant::True),
    ("pg_operator_is_visible", Constant::True),
    ("pg_opclass_is_visible", Constant::True),
    ("pg_opfamily_is_visible", Constant::True),
    ("pg_collation_is_visible", Constant::True),
    ("pg_conversion_is_visible", Constant::True),
    ("pg_statistics_obj_is_visible", Constant::True),
    ("pg_ts_config_is_visible", Constant::True),
    ("pg_ts_dict_is_visible", Constant::True),
    ("pg_ts_parser_is_visible", Constant::True),
    ("pg_ts_template_is_visible", Constant::True),
    ("pg_table_size", Constant::Zero),
    ("pg_indexes_size", Constant::Zero),
    ("pg_database_size", Constant::Zero),
    ("pg_tablespace_size", Constant::Zero),
    ("pg_tablespace_location", Constant::Text("")),
    ("pg_char_to_encoding", Constant::Encoding),
    // weir has no functions of its own to describe (`\df` lists none).
    ("pg_get_function_result", Constant::Text("")),
    ("pg_get_function_arguments", Constant::Text("")),
    ("pg_get_function_identity_arguments", Constant::Text("")),
    // weir has no sequences: no column takes its default from one.
    ("pg_get_serial_sequence", Constant::NoText),
];

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Constant {
    True,
    Zero,
    Text(&'static str),
    /// NULL, as text.
    NoText,
    /// PostgreSQL's number of UTF8.
    Encoding,
}

impl Constant {
    fn value(self) -> ScalarValue {
        match self {
            Constant::True => ScalarValue::Boolean(Some(true)),
            Constant::Zero => ScalarValue::Int64(Some(0)),
            Constant::Text(text) => ScalarValue::Utf8(Some(text.to_string())),
            Constant::NoText => ScalarValue::Utf8(None),
            Constant::Encoding => ScalarValue::Int32(Some(6)),
        }
    }
}

pub fn register(ctx: &SessionContext, catalog: &Arc<Catalog>) {
    for (name, constant) in CONSTANT {
        ctx.register_udf(ScalarUDF::new_from_impl(Fixed::new(name, *constant, true)));
    }
    // Without arguments.
    for (name, constant) in [
        ("getdatabaseencoding", Constant::Text("UTF8")),
        ("session_user", Constant::Text(ROLE)),
    ] {
        ctx.register_udf(ScalarUDF::new_from_impl(Fixed::new(name, constant, false)));
    }
    ctx.register_udf(ScalarUDF::new_from_impl(SizePretty::new()));
    ctx.register_udf(create_udf(
        "pg_get_userbyid",
        vec![DataType::Int32],
        DataType::Utf8,
        Volatility::Stable,
        Arc::new(user_by_id),
    ));
    ctx.register_udf(ScalarUDF::new_from_impl(CurrentSetting::new()));
    ctx.register_udf(ScalarUDF::new_from_impl(Format::new()));
    ctx.register_udf(ScalarUDF::new_from_impl(JsonObject::new()));
    ctx.register_udf(ScalarUDF::new_from_impl(ViewDef::new(catalog.clone())));
    ctx.register_udf(ScalarUDF::new_from_impl(TypeOf::new()));
    for (name, define) in [
        ("pg_get_indexdef", super::keys::index_definition as Define),
        (
            "pg_get_constraintdef",
            super::keys::constraint_definition as Define,
        ),
    ] {
        ctx.register_udf(ScalarUDF::new_from_impl(ByOid {
            name,
            define,
            catalog: catalog.clone(),
            signature: Signature::variadic_any(Volatility::Stable),
        }));
    }
}

/// `pg_get_userbyid(oid)`: `pg_database_owner` (owner of `public`) or
/// `weir`, the one role.
fn user_by_id(args: &[ColumnarValue]) -> DfResult<ColumnarValue> {
    let arrays = ColumnarValue::values_to_arrays(args)?;
    let oids = arrays[0].as_primitive::<datafusion::arrow::datatypes::Int32Type>();
    let names: StringArray = oids
        .iter()
        .map(|oid| {
            oid.map(|oid| match oid == super::tables::DATABASE_OWNER_OID {
                true => "pg_database_owner",
                false => ROLE,
            })
        })
        .collect();
    Ok(ColumnarValue::Array(Arc::new(names)))
}

/// A function with one answer.
#[derive(Debug, PartialEq, Eq, Hash)]
struct Fixed {
    name: &'static str,
    value: Constant,
    signature: Signature,
}

impl Fixed {
    fn new(name: &'static str, value: Constant, arguments: bool) -> Fixed {
        let signature = match arguments {
            true => Signature::variadic_any(Volatility::Stable),
            false => Signature::nullary(Volatility::Stable),
        };
        Fixed {
            name,
            value,
            signature,
        }
    }
}

impl ScalarUDFImpl for Fixed {
    fn name(&self) -> &str {
        self.name
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _arg_types: &[DataType]) -> DfResult<DataType> {
        Ok(self.value.value().data_type())
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> DfResult<ColumnarValue> {
        let value = self.value.value();
        Ok(ColumnarValue::Array(
            value.to_array_of_size(args.number_rows)?,
        ))
    }
}

/// `pg_size_pretty(bigint)`: bytes as PostgreSQL prints them, `8192
/// bytes`, `16 kB`, `3 MB`: a unit is used once the number would reach
/// 10240 of the smaller one, rounding half up.
#[derive(Debug, PartialEq, Eq, Hash)]
struct SizePretty {
    signature: Signature,
}

impl SizePretty {
    fn new() -> Self {
        SizePretty {
            signature: Signature::exact(vec![DataType::Int64], Volatility::Immutable),
        }
    }
}

pub fn size_pretty(bytes: i64) -> String {
    const UNITS: [&str; 5] = ["kB", "MB", "GB", "TB", "PB"];
    if bytes.abs() < 10 * 1024 {
        return format!("{bytes} bytes");
    }
    let mut size = bytes;
    for (i, unit) in UNITS.iter().enumerate() {
        // Halve first, then round: PostgreSQL's half_rounded.
        let shifted = size / 512;
        let rounded = (shifted + shifted.signum()) / 2;
        if rounded.abs() < 10 * 1024 || i == UNITS.len() - 1 {
            return format!("{rounded} {unit}");
        }
        size /= 1024;
    }
    format!("{bytes} bytes")
}

impl ScalarUDFImpl for SizePretty {
    fn name(&self) -> &str {
        "pg_size_pretty"
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _arg_types: &[DataType]) -> DfResult<DataType> {
        Ok(DataType::Utf8)
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> DfResult<ColumnarValue> {
        let arrays = ColumnarValue::values_to_arrays(&args.args)?;
        let bytes = arrays[0].as_primitive::<Int64Type>();
        let out: StringArray = bytes.iter().map(|b| b.map(size_pretty)).collect();
        Ok(ColumnarValue::Array(Arc::new(out)))
    }
}

/// `current_setting(name)`: the server's defaults of the settings clients
/// ask about; a session's `SET` is answered by `SHOW`.
#[derive(Debug, PartialEq, Eq, Hash)]
struct CurrentSetting {
    signature: Signature,
}

impl CurrentSetting {
    fn new() -> Self {
        CurrentSetting {
            signature: Signature::one_of(
                vec![
                    TypeSignature::Exact(vec![DataType::Utf8]),
                    TypeSignature::Exact(vec![DataType::Utf8, DataType::Boolean]),
                ],
                Volatility::Stable,
            ),
        }
    }
}

fn default_setting(name: &str) -> Option<&'static str> {
    Some(match name.to_ascii_lowercase().as_str() {
        "search_path" => "\"$user\", public",
        "client_encoding" | "server_encoding" => "UTF8",
        "datestyle" => "ISO, MDY",
        "timezone" => "UTC",
        "standard_conforming_strings" => "on",
        "integer_datetimes" => "on",
        "intervalstyle" => "postgres",
        "transaction_isolation" | "default_transaction_isolation" => "read committed",
        "max_identifier_length" => "63",
        "default_table_access_method" => "heap",
        "lc_collate" | "lc_ctype" => "C.UTF-8",
        _ => return None,
    })
}

impl ScalarUDFImpl for CurrentSetting {
    fn name(&self) -> &str {
        "current_setting"
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _arg_types: &[DataType]) -> DfResult<DataType> {
        Ok(DataType::Utf8)
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> DfResult<ColumnarValue> {
        let arrays = ColumnarValue::values_to_arrays(&args.args)?;
        let missing_ok = arrays
            .get(1)
            .map(|a| a.as_boolean())
            .is_some_and(|a| a.is_valid(0) && a.value(0));
        let names = arrays[0].as_string::<i32>();
        let mut out = Vec::with_capacity(names.len());
        for name in names.iter() {
            let value = name.and_then(default_setting);
            if let (Some(name), None, false) = (name, value, missing_ok) {
                return Err(DataFusionError::External(Box::new(
                    crate::error::Error::UndefinedObject(format!(
                        "unrecognized configuration parameter \"{name}\""
                    )),
                )));
            }
            out.push(value);
        }
        Ok(ColumnarValue::Array(Arc::new(StringArray::from(out))))
    }
}

/// `format(text, ...)`: `%s` (NULL as empty), `%I` (an identifier, quoted
/// when needed), `%L` (a literal, NULL as `NULL`) and `%%`.
#[derive(Debug, PartialEq, Eq, Hash)]
struct Format {
    signature: Signature,
}

impl Format {
    fn new() -> Self {
        Format {
            signature: Signature::variadic_any(Volatility::Stable),
        }
    }
}

fn format_one(pattern: &str, args: &[Option<&str>]) -> DfResult<String> {
    let mut out = String::new();
    let mut next = args.iter();
    let mut chars = pattern.chars();
    while let Some(c) = chars.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        let spec = chars.next();
        if spec == Some('%') {
            out.push('%');
            continue;
        }
        let arg = next
            .next()
            .ok_or_else(|| DataFusionError::Execution("too few arguments for format()".into()))?;
        match (spec, arg) {
            (Some('s'), value) => out.push_str(value.unwrap_or("")),
            (Some('I'), Some(value)) => out.push_str(&quote_ident(value)),
            (Some('L'), Some(value)) => out.push_str(&format!("'{}'", value.replace('\'', "''"))),
            (Some('L'), None) => out.push_str("NULL"),
            (Some('I'), None) => {
                return Err(DataFusionError::Execution(
                    "null values cannot be formatted as an SQL identifier".into(),
                ));
            }
            (other, _) => {
                return Err(DataFusionError::Execution(format!(
                    "unrecognized format() type specifier \"{}\"",
                    other.unwrap_or(' ')
                )));
            }
        }
    }
    Ok(out)
}

fn quote_ident(name: &str) -> String {
    let plain = name
        .chars()
        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
        && !name.starts_with(|c: char| c.is_ascii_digit())
        && !name.is_empty();
    match plain {
        true => name.to_string(),
        false => format!("\"{}\"", name.replace('"', "\"\"")),
    }
}

impl ScalarUDFImpl for Format {
    fn name(&self) -> &str {
        "format"
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _arg_types: &[DataType]) -> DfResult<DataType> {
        Ok(DataType::Utf8)
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> DfResult<ColumnarValue> {
        let arrays = ColumnarValue::values_to_arrays(&args.args)?;
        let texts: Vec<ArrayRef> = arrays
            .iter()
            .map(|a| datafusion::arrow::compute::cast(a, &DataType::Utf8))
            .collect::<Result<_, _>>()?;
        let texts: Vec<&StringArray> = texts.iter().map(|a| a.as_string::<i32>()).collect();
        let mut out = Vec::with_capacity(args.number_rows);
        for row in 0..args.number_rows {
            fn value<'a>(a: &&'a StringArray, row: usize) -> Option<&'a str> {
                a.is_valid(row).then(|| a.value(row))
            }
            let Some((pattern, rest)) = texts.split_first() else {
                return Err(DataFusionError::Plan(
                    "format() needs a format string".into(),
                ));
            };
            let Some(pattern) = value(pattern, row) else {
                out.push(None);
                continue;
            };
            let rest: Vec<Option<&str>> = rest.iter().map(|a| value(a, row)).collect();
            out.push(Some(format_one(pattern, &rest)?));
        }
        Ok(ColumnarValue::Array(Arc::new(StringArray::from(out))))
    }
}

/// `json_build_object(key, value, ...)`: a JSON object as text, values
/// as JSON strings, numbers, booleans or null.
#[derive(Debug, PartialEq, Eq, Hash)]
struct JsonObject {
    signature: Signature,
}

impl JsonObject {
    fn new() -> Self {
        JsonObject {
            signature: Signature::variadic_any(Volatility::Stable),
        }
    }
}

impl ScalarUDFImpl for JsonObject {
    fn name(&self) -> &str {
        "json_build_object"
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _arg_types: &[DataType]) -> DfResult<DataType> {
        Ok(DataType::Utf8)
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> DfResult<ColumnarValue> {
        let arrays = ColumnarValue::values_to_arrays(&args.args)?;
        let mut out = Vec::with_capacity(args.number_rows);
        for row in 0..args.number_rows {
            let mut object = serde_json::Map::new();
            for pair in arrays.chunks(2) {
                let [key, value] = pair else {
                    return Err(DataFusionError::Execution(
                        "json_build_object needs an even number of arguments".into(),
                    ));
                };
                let key = ScalarValue::try_from_array(key, row)?.to_string();
                object.insert(key, json_value(&ScalarValue::try_from_array(value, row)?));
            }
            out.push(serde_json::Value::Object(object).to_string());
        }
        Ok(ColumnarValue::Array(Arc::new(StringArray::from(out))))
    }
}

fn json_value(value: &ScalarValue) -> serde_json::Value {
    use serde_json::Value;
    match value {
        v if v.is_null() => Value::Null,
        ScalarValue::Boolean(Some(b)) => Value::Bool(*b),
        ScalarValue::Int16(Some(n)) => Value::from(*n),
        ScalarValue::Int32(Some(n)) => Value::from(*n),
        ScalarValue::Int64(Some(n)) => Value::from(*n),
        ScalarValue::Float64(Some(n)) => Value::from(*n),
        other => Value::String(other.to_string()),
    }
}

type Define = fn(&Catalog, i32) -> Option<String>;

/// A definition found from an object's oid (`pg_get_indexdef`,
/// `pg_get_constraintdef`); NULL for oids weir did not give out.
#[derive(Debug)]
struct ByOid {
    name: &'static str,
    define: Define,
    catalog: Arc<Catalog>,
    signature: Signature,
}

impl PartialEq for ByOid {
    fn eq(&self, other: &Self) -> bool {
        self.name == other.name && Arc::ptr_eq(&self.catalog, &other.catalog)
    }
}

impl Eq for ByOid {}

impl std::hash::Hash for ByOid {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.name.hash(state);
    }
}

impl ScalarUDFImpl for ByOid {
    fn name(&self) -> &str {
        self.name
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _arg_types: &[DataType]) -> DfResult<DataType> {
        Ok(DataType::Utf8)
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> DfResult<ColumnarValue> {
        let arrays = ColumnarValue::values_to_arrays(&args.args)?;
        let first = arrays
            .first()
            .ok_or_else(|| DataFusionError::Plan(format!("{} needs an oid", self.name)))?;
        let oids = datafusion::arrow::compute::cast(first, &DataType::Int32)?;
        let oids = oids.as_primitive::<datafusion::arrow::datatypes::Int32Type>();
        let out: StringArray = oids
            .iter()
            .map(|oid| oid.and_then(|oid| (self.define)(&self.catalog, oid)))
            .collect();
        Ok(ColumnarValue::Array(Arc::new(out)))
    }
}

/// `pg_get_viewdef(name [, pretty])`: the query of a view or materialized
/// view, as PostgreSQL prints it (a leading space, a closing semicolon).
/// psql's oid form reaches it through [`super::rewrite`].
#[derive(Debug)]
struct ViewDef {
    signature: Signature,
    catalog: Arc<Catalog>,
}

impl PartialEq for ViewDef {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.catalog, &other.catalog)
    }
}

impl Eq for ViewDef {}

impl std::hash::Hash for ViewDef {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        "pg_get_viewdef".hash(state);
    }
}

impl ViewDef {
    fn new(catalog: Arc<Catalog>) -> Self {
        ViewDef {
            signature: Signature::one_of(
                vec![
                    TypeSignature::Exact(vec![DataType::Utf8]),
                    TypeSignature::Exact(vec![DataType::Utf8, DataType::Boolean]),
                    TypeSignature::Exact(vec![DataType::Utf8, DataType::Int32]),
                ],
                Volatility::Stable,
            ),
            catalog,
        }
    }

    fn definition(&self, name: &str) -> Option<String> {
        let query = match self.catalog.get(name)? {
            Object::MaterializedView(v) => v.def.query.clone(),
            Object::View(v) => v.def.query.clone(),
            Object::Table(_) => return None,
        };
        Some(format!(" {};", query.trim().trim_end_matches(';')))
    }
}

impl ScalarUDFImpl for ViewDef {
    fn name(&self) -> &str {
        "pg_get_viewdef"
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _arg_types: &[DataType]) -> DfResult<DataType> {
        Ok(DataType::Utf8)
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> DfResult<ColumnarValue> {
        let arrays: Vec<ArrayRef> = ColumnarValue::values_to_arrays(&args.args)?;
        let names = arrays[0].as_string::<i32>();
        let out: StringArray = names
            .iter()
            .map(|n| n.and_then(|n| self.definition(n)))
            .collect();
        Ok(ColumnarValue::Array(Arc::new(out)))
    }
}

#[cfg(test)]
mod tests {
    use super::size_pretty;

    #[test]
    fn sizes_print_as_postgres_prints_them() {
        assert_eq!(size_pretty(0), "0 bytes");
        assert_eq!(size_pretty(8192), "8192 bytes");
        assert_eq!(size_pretty(10240), "10 kB");
        assert_eq!(size_pretty(16384), "16 kB");
        assert_eq!(size_pretty(7_634_431), "7455 kB");
        assert_eq!(size_pretty(10_485_760), "10 MB");
    }

    #[test]
    fn format_fills_its_placeholders() {
        let filled = super::format_one("%s FROM %I, %L%%", &[Some("a"), Some("T"), None]);
        assert_eq!(filled.ok().as_deref(), Some("a FROM \"T\", NULL%"));
    }
}

/// `pg_typeof(any)`: the name of its argument's type, as PostgreSQL prints
/// it. Text is `text`: Arrow keeps no `varchar` apart from it.
#[derive(Debug, PartialEq, Eq, Hash)]
struct TypeOf {
    signature: Signature,
}

impl TypeOf {
    fn new() -> Self {
        TypeOf {
            signature: Signature::any(1, Volatility::Immutable),
        }
    }
}

fn type_of(data_type: &DataType) -> String {
    match data_type {
        DataType::Null => "unknown".into(),
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => "text".into(),
        DataType::Decimal128(..) | DataType::Decimal256(..) => "numeric".into(),
        DataType::List(item) | DataType::LargeList(item) => {
            format!("{}[]", type_of(item.data_type()))
        }
        DataType::Struct(_) => "record".into(),
        other => super::pg_type_name(other).unwrap_or_else(|| other.to_string()),
    }
}

impl ScalarUDFImpl for TypeOf {
    fn name(&self) -> &str {
        "pg_typeof"
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _arg_types: &[DataType]) -> DfResult<DataType> {
        Ok(DataType::Utf8)
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> DfResult<ColumnarValue> {
        let name = type_of(&args.args[0].data_type());
        Ok(ColumnarValue::Scalar(ScalarValue::Utf8(Some(name))))
    }
}
