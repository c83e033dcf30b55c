//! Extended-protocol replies that wait for the client's Sync or Flush.
//!
//! pgwire flushes `BindComplete` and the answer to `Describe` as soon as it
//! queues them, so a prepared INSERT (Bind, Describe, Execute, Sync in one
//! packet) cost three socket writes and woke the client three times.
//! PostgreSQL sends nothing before Sync or Flush; neither do these.

use std::fmt::Debug;
use std::sync::Arc;

use futures::{Sink, SinkExt};
use pgwire::api::portal::Portal;
use pgwire::api::results::DescribeResponse;
use pgwire::api::store::{Entry, PortalStore};
use pgwire::api::{ClientInfo, ClientPortalStore, DEFAULT_NAME};
use pgwire::error::{ErrorInfo, PgWireError, PgWireResult};
use pgwire::messages::PgWireBackendMessage;
use pgwire::messages::data::{NoData, ParameterDescription, RowDescription};
use pgwire::messages::extendedquery::{Bind, BindComplete};

/// Store the portal `bind` names and queue `BindComplete`.
pub async fn bind<C, S>(client: &mut C, message: Bind) -> PgWireResult<()>
where
    C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
    C::PortalStore: PortalStore<Statement = S>,
    C::Error: Debug,
    PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    S: Clone,
{
    let statement_name = message.statement_name.as_deref().unwrap_or(DEFAULT_NAME);
    let portal_name = message.portal_name.as_deref().unwrap_or(DEFAULT_NAME);
    match client.portal_store().get_statement(statement_name) {
        Some(Entry::Value(statement)) => {
            let portal = Portal::try_new(&message, statement)?;
            client.portal_store().put_portal(Arc::new(portal));
        }
        Some(Entry::Empty) => {
            if !message.parameters.is_empty() {
                return Err(PgWireError::UserError(Box::new(ErrorInfo::new(
                    "ERROR".to_owned(),
                    "08P01".to_owned(),
                    format!(
                        "bind message supplies {} parameters, but prepared statement {statement_name:?} requires 0",
                        message.parameters.len(),
                    ),
                ))));
            }
            client.portal_store().put_empty_portal(portal_name);
        }
        None => return Err(PgWireError::StatementNotFound(statement_name.to_owned())),
    }
    client
        .feed(PgWireBackendMessage::BindComplete(BindComplete::new()))
        .await?;
    Ok(())
}

/// Queue the answer to a Describe: parameter types if any, then the row
/// description or NoData.
pub async fn describe<C, D>(client: &mut C, response: &D) -> PgWireResult<()>
where
    C: Sink<PgWireBackendMessage> + Unpin,
    C::Error: Debug,
    PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    D: DescribeResponse,
{
    if let Some(types) = response.parameters() {
        let oids = types.iter().map(|t| t.oid()).collect();
        client
            .feed(PgWireBackendMessage::ParameterDescription(
                ParameterDescription::new(oids),
            ))
            .await?;
    }
    let message = if response.is_no_data() {
        PgWireBackendMessage::NoData(NoData::new())
    } else {
        let fields = response.fields().iter().map(Into::into).collect();
        PgWireBackendMessage::RowDescription(RowDescription::new(fields))
    };
    client.feed(message).await?;
    Ok(())
}
