//! Built-in generator sources: `nexmark` (the Nexmark benchmark's events,
//! through the `nexmark` crate) and `datagen` (rows for demos). Not built
//! yet: creating one fails with 0A000.

use std::sync::Arc;

use super::{Failure, Handle};
use crate::catalog::{ConnectorDef, Table, TableDef};
use crate::error::{Error, Result};
use crate::session::Engine;

fn not_built(connector: &ConnectorDef) -> Error {
    Error::NotSupported(format!(
        "connector '{}' is not supported yet",
        connector.connector
    ))
}

/// The columns a generator defines when `CREATE SOURCE` gives none.
pub fn columns(connector: &ConnectorDef) -> Result<Option<String>> {
    Err(not_built(connector))
}

/// Check a generator source's options against its columns, at CREATE.
pub fn check(connector: &ConnectorDef, _table: &TableDef) -> Result<()> {
    Err(not_built(connector))
}

/// Generate rows into `table`.
pub async fn source(
    _engine: &Arc<Engine>,
    _table: &Arc<Table>,
    _handle: Handle,
) -> std::result::Result<(), Failure> {
    Err(Failure::Fatal("generators are not supported yet".into()))
}
