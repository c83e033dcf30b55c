//! What the server asks of the statement layer, in one place: the server
//! knows bytes and the protocol's messages; parsing, describing, the text
//! of values and of parameters belong to the layers below it, reached
//! through here.

use std::sync::Arc;

use datafusion::arrow::datatypes::DataType;
use datafusion::common::ScalarValue;

use datafusion::arrow::array::timezone::Tz;

use super::CopyIn;
use super::handlers::copy;
use super::{Engine, Output};
use crate::error::Result;
use crate::sql::parser;

pub use crate::sql::functions::SERVER_VERSION;
pub use crate::sql::parser::Statement;
pub use crate::sql::text::render;

/// The statements of a query string.
pub fn parse(sql: &str) -> Result<Vec<Statement>> {
    parser::parse(sql)
}

/// Whether describing the statement needs the session's state (a FETCH
/// describes the rows of the session's cursor).
pub fn describes_from_session(statement: &Statement) -> bool {
    matches!(statement, Statement::Fetch(_))
}

/// Whether a parameter of this type is read as PostgreSQL reads datetimes.
pub fn reads_as_datetime(data_type: &DataType) -> bool {
    crate::sql::datetime::is_datetime(data_type)
}

/// A text parameter's value, read as PostgreSQL reads dates and times.
pub fn parse_datetime(text: &str, target: &DataType) -> Result<ScalarValue> {
    crate::sql::datetime::parse(text, target)
}

/// A `TimeZone` setting's zone.
pub fn parse_zone(text: &str) -> std::result::Result<Tz, String> {
    crate::sql::datetime::parse_zone(text)
}

/// Ends a COPY FROM STDIN: its rows are written as one statement, under
/// the session's idempotent producer when it has one.
pub async fn finish_copy(
    engine: &Arc<Engine>,
    copy: CopyIn,
    producer: Option<crate::log::writer::Producer>,
) -> Result<Output> {
    crate::log::writer::PRODUCER
        .scope(producer, copy::finish(engine, copy))
        .await
}
