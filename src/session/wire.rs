//! What the server asks of the statement layer, in one place: the server
//! knows bytes and the protocol's messages; parsing, describing, the text
//! of values and of parameters belong to the layers below it, reached
//! through here.

use std::sync::Arc;

use super::CopyIn;
use super::handlers::copy;
use super::{Engine, Output};
use crate::error::Result;

pub use crate::sql::datetime::{is_datetime, parse as parse_datetime, parse_zone};
pub use crate::sql::functions::SERVER_VERSION;
pub use crate::sql::parser::{Statement, parse, parse_texts};
pub use crate::sql::text::render;

/// Whether describing the statement needs the session's state (a FETCH
/// describes the rows of the session's cursor).
pub fn describes_from_session(statement: &Statement) -> bool {
    matches!(statement, Statement::Fetch(_))
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
