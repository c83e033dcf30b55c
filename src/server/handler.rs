//! pgwire callbacks: turn protocol messages into session calls and outputs
//! into protocol messages. No SQL semantics live here.

use std::fmt::Debug;
use std::sync::Arc;

use arrow_pg::datatypes::{arrow_schema_to_pg_fields, encode_recordbatch, into_pg_type};
use async_trait::async_trait;
use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::datatypes::{DataType, SchemaRef};
use futures::{Sink, SinkExt, StreamExt, stream};
use pgwire::api::auth::noop::NoopStartupHandler;
use pgwire::api::auth::{
    self as auth, DefaultServerParameterProvider, ServerParameterProvider, StartupHandler,
};
use pgwire::api::cancel::DefaultCancelHandler;
use pgwire::api::copy::CopyHandler;
use pgwire::api::portal::{Format, Portal};
use pgwire::api::query::{ExtendedQueryHandler, SimpleQueryHandler};
use pgwire::api::results::{
    CopyResponse, DescribePortalResponse, DescribeResponse, DescribeStatementResponse, FieldInfo,
    QueryResponse, Response, Tag,
};
use pgwire::api::stmt::QueryParser;
use pgwire::api::store::{Entry, PortalStore};
use pgwire::api::{
    ClientInfo, ClientPortalStore, ConnectionGuard, ConnectionHandle, ConnectionManager,
    DEFAULT_NAME, METADATA_USER, PgWireConnectionState, PgWireServerHandlers,
    PidSecretKeyGenerator, RandomPidSecretKeyGenerator, Type,
};
use pgwire::error::{ErrorInfo, PgWireError, PgWireResult};
use pgwire::messages::copy::{CopyData, CopyDone, CopyFail, CopyOutResponse};
use pgwire::messages::extendedquery::{
    Bind, Describe, TARGET_TYPE_BYTE_PORTAL, TARGET_TYPE_BYTE_STATEMENT,
};
use pgwire::messages::response::NoticeResponse;
use pgwire::messages::response::{ReadyForQuery, TransactionStatus};
use pgwire::messages::startup::ParameterStatus;
use pgwire::messages::startup::{Authentication, BackendKeyData, PasswordMessageFamily};
use pgwire::messages::{PgWireBackendMessage, PgWireFrontendMessage};
use pgwire::types::format::FormatOptions;
use tokio::sync::Mutex;

use super::coalesce;
use super::copyout::{Cancel, Sockets};
use super::scram;
use super::text::TextStyle;
use crate::config::Auth;
use crate::error::Error;
use crate::session::handlers;
use crate::session::handlers::copy::CopyFormat;
use crate::session::merged::ChangeStream;
use crate::session::streams::Encode;
use crate::session::wire::{self, Statement};
use crate::session::{self, Engine, Metrics, Output, Session};

/// The handlers pgwire calls, shared by every connection.
pub struct Handlers {
    query: Arc<QueryHandler>,
    engine: Arc<Engine>,
    manager: Arc<ConnectionManager>,
    /// One for all connections: it numbers their process ids.
    keys: Arc<RandomPidSecretKeyGenerator>,
    cancel: Arc<Cancel>,
    /// Duplicates of the connections' sockets, for COPY streams.
    pub sockets: Arc<Sockets>,
}

impl Handlers {
    pub fn new(engine: Arc<Engine>) -> Handlers {
        let manager = Arc::new(ConnectionManager::new());
        let sockets = Arc::new(Sockets::default());
        Handlers {
            query: Arc::new(QueryHandler {
                engine: engine.clone(),
                parser: Arc::new(StatementParser {
                    engine: engine.clone(),
                }),
                sockets: sockets.clone(),
            }),
            engine,
            manager: manager.clone(),
            keys: Arc::new(RandomPidSecretKeyGenerator::default()),
            cancel: Arc::new(Cancel {
                inner: DefaultCancelHandler::new(manager),
                sockets: sockets.clone(),
            }),
            sockets,
        }
    }
}

impl PgWireServerHandlers for Handlers {
    fn simple_query_handler(&self) -> Arc<impl SimpleQueryHandler> {
        self.query.clone()
    }

    fn extended_query_handler(&self) -> Arc<impl ExtendedQueryHandler> {
        self.query.clone()
    }

    /// A new one per connection: it holds the state of its SCRAM exchange.
    fn startup_handler(&self) -> Arc<impl StartupHandler> {
        Arc::new(Startup {
            engine: self.engine.clone(),
            trusting: Trusting {
                manager: self.manager.clone(),
            },
            keys: self.keys.clone(),
            exchange: parking_lot::Mutex::new(None),
        })
    }

    fn copy_handler(&self) -> Arc<impl CopyHandler> {
        self.query.clone()
    }

    fn cancel_handler(&self) -> Arc<impl pgwire::api::cancel::CancelHandler> {
        self.cancel.clone()
    }
}

/// Accepts any user and database without a password.
struct Trusting {
    manager: Arc<ConnectionManager>,
}

#[async_trait]
impl NoopStartupHandler for Trusting {
    fn connection_manager(&self) -> Option<Arc<ConnectionManager>> {
        Some(self.manager.clone())
    }

    async fn post_startup<C>(
        &self,
        client: &mut C,
        _message: pgwire::messages::PgWireFrontendMessage,
    ) -> PgWireResult<()>
    where
        C: ClientInfo + Sink<PgWireBackendMessage> + Unpin + Send,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        send_parameters(client).await
    }
}

/// pgwire reports its own version and date style at startup; these
/// follow, and a client keeps the last value it is sent.
async fn send_parameters<C>(client: &mut C) -> PgWireResult<()>
where
    C: Sink<PgWireBackendMessage> + Unpin + Send,
    C::Error: Debug,
    PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
{
    let parameters = [
        ("server_version", wire::SERVER_VERSION),
        ("DateStyle", "ISO, MDY"),
    ];
    for (name, value) in parameters {
        let status = ParameterStatus::new(name.to_string(), value.to_string());
        client
            .feed(PgWireBackendMessage::ParameterStatus(status))
            .await?;
    }
    Ok(())
}

/// One connection's startup: at once without a password check, else after
/// a SCRAM-SHA-256 exchange with the startup packet's user.
pub struct Startup {
    engine: Arc<Engine>,
    trusting: Trusting,
    keys: Arc<RandomPidSecretKeyGenerator>,
    /// Between the server-first and the client-final message.
    exchange: parking_lot::Mutex<Option<scram::Pending>>,
}

#[async_trait]
impl StartupHandler for Startup {
    async fn on_startup<C>(
        &self,
        client: &mut C,
        message: PgWireFrontendMessage,
    ) -> PgWireResult<()>
    where
        C: ClientInfo + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        if !matches!(self.engine.config().auth, Auth::Password(_)) {
            return self.trusting.on_startup(client, message).await;
        }
        match message {
            PgWireFrontendMessage::Startup(startup) => {
                auth::protocol_negotiation(client, &startup).await?;
                auth::save_startup_parameters_to_metadata(client, &startup);
                client.set_state(PgWireConnectionState::AuthenticationInProgress);
                let methods = vec![SCRAM_SHA_256.to_string()];
                client
                    .send(PgWireBackendMessage::Authentication(Authentication::SASL(
                        methods,
                    )))
                    .await?;
                Ok(())
            }
            PgWireFrontendMessage::PasswordMessageFamily(message) => {
                let pending = self.exchange.lock().take();
                match pending {
                    None => self.client_first(client, message).await,
                    Some(pending) => self.client_final(client, message, pending).await,
                }
            }
            _ => Ok(()),
        }
    }
}

const SCRAM_SHA_256: &str = "SCRAM-SHA-256";

impl Startup {
    async fn client_first<C>(
        &self,
        client: &mut C,
        message: PasswordMessageFamily,
    ) -> PgWireResult<()>
    where
        C: ClientInfo + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let initial = message.into_sasl_initial_response()?;
        if initial.auth_method != SCRAM_SHA_256 {
            return Err(PgWireError::UnsupportedSASLAuthMethod(initial.auth_method));
        }
        let user = user_of(client);
        let verifier = self.engine.role(&user).and_then(|role| {
            role.verifier
                .as_deref()
                .and_then(crate::catalog::Verifier::parse)
        });
        let data = initial.data.unwrap_or_default();
        let (first, pending) =
            scram::server_first(&data, &user, verifier).map_err(|e| refusal(e, &user))?;
        *self.exchange.lock() = Some(pending);
        client
            .send(PgWireBackendMessage::Authentication(
                Authentication::SASLContinue(first.into()),
            ))
            .await?;
        Ok(())
    }

    async fn client_final<C>(
        &self,
        client: &mut C,
        message: PasswordMessageFamily,
        pending: scram::Pending,
    ) -> PgWireResult<()>
    where
        C: ClientInfo + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let response = message.into_sasl_response()?;
        let user = user_of(client);
        let last = pending
            .server_final(&response.data)
            .map_err(|e| refusal(e, &user))?;
        if !self.engine.role(&user).is_some_and(|r| r.login) {
            return Err(fatal(
                "28000",
                format!("role \"{user}\" is not permitted to log in"),
            ));
        }
        client
            .feed(PgWireBackendMessage::Authentication(
                Authentication::SASLFinal(last.into()),
            ))
            .await?;
        self.finish(client).await
    }

    /// What pgwire's startup handlers send once a client is in: the key
    /// for cancel requests, the server's parameters, ReadyForQuery.
    async fn finish<C>(&self, client: &mut C) -> PgWireResult<()>
    where
        C: ClientInfo + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let (pid, secret) = self.keys.generate(client);
        client.set_pid_and_secret_key(pid, secret.clone());
        let (handle, guard) = self.trusting.manager.register(pid, secret.clone());
        client
            .session_extensions()
            .insert::<Arc<ConnectionHandle>>(handle);
        client.session_extensions().insert::<ConnectionGuard>(guard);
        client
            .feed(PgWireBackendMessage::Authentication(Authentication::Ok))
            .await?;
        let defaults = DefaultServerParameterProvider::default();
        let mut parameters = defaults.server_parameters(client).unwrap_or_default();
        // pgwire says every user is a superuser; psql's prompt and clients
        // read it.
        let superuser = self
            .engine
            .role(&user_of(client))
            .is_some_and(|role| role.superuser);
        let superuser = if superuser { "on" } else { "off" };
        parameters.insert("is_superuser".to_string(), superuser.to_string());
        for (name, value) in parameters {
            client
                .feed(PgWireBackendMessage::ParameterStatus(ParameterStatus::new(
                    name, value,
                )))
                .await?;
        }
        send_parameters(client).await?;
        client
            .feed(PgWireBackendMessage::BackendKeyData(BackendKeyData::new(
                pid, secret,
            )))
            .await?;
        client
            .send(PgWireBackendMessage::ReadyForQuery(ReadyForQuery::new(
                TransactionStatus::Idle,
            )))
            .await?;
        client.set_state(PgWireConnectionState::ReadyForQuery);
        Ok(())
    }
}

/// The startup packet's user name.
fn user_of<C: ClientInfo>(client: &C) -> String {
    client
        .metadata()
        .get(METADATA_USER)
        .cloned()
        .unwrap_or_default()
}

/// A failed exchange as PostgreSQL reports it: one message for a wrong
/// password and an unknown user alike.
fn refusal(refusal: scram::Refusal, user: &str) -> PgWireError {
    match refusal {
        scram::Refusal::Failed => fatal(
            "28P01",
            format!("password authentication failed for user \"{user}\""),
        ),
        scram::Refusal::Malformed(what) => {
            fatal("08P01", format!("malformed SCRAM message: {what}"))
        }
    }
}

fn fatal(code: &str, message: String) -> PgWireError {
    PgWireError::UserError(Box::new(ErrorInfo::new(
        "FATAL".to_string(),
        code.to_string(),
        message,
    )))
}

pub struct QueryHandler {
    engine: Arc<Engine>,
    parser: Arc<StatementParser>,
    sockets: Arc<Sockets>,
}

type SharedSession = Mutex<Session>;

/// How long the connection may wait for its client's next message before
/// it is ended: set while its session idles in a transaction block.
pub fn idle_limit<C: ClientInfo>(client: &C) -> Option<std::time::Duration> {
    // Not created here: during startup the client's user is not known yet.
    let session = client.session_extensions().get::<SharedSession>()?;
    // A session busy in a statement is not idle.
    let session = session.try_lock().ok()?;
    session.idle_in_transaction_timeout()
}

fn session_of<C: ClientInfo>(client: &C) -> Arc<SharedSession> {
    client.session_extensions().get_or_insert_with(|| {
        Mutex::new(Session {
            user: user_of(client),
            ..Session::default()
        })
    })
}

fn to_pg_error(e: Error) -> PgWireError {
    PgWireError::UserError(Box::new(error_info(&e)))
}

fn error_info(e: &Error) -> ErrorInfo {
    let mut info = ErrorInfo::new("ERROR".to_string(), e.sqlstate().to_string(), e.message());
    info.detail = e.detail();
    info.hint = e.hint();
    info
}

async fn send_notices<C>(client: &mut C, session: &mut Session) -> PgWireResult<()>
where
    C: Sink<PgWireBackendMessage> + Unpin + Send,
    C::Error: Debug,
    PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
{
    for notice in session.notices.drain(..) {
        let info = ErrorInfo::new(
            notice.severity.to_string(),
            notice.code.to_string(),
            notice.message,
        );
        client
            .feed(PgWireBackendMessage::NoticeResponse(NoticeResponse::from(
                info,
            )))
            .await?;
    }
    Ok(())
}

impl QueryHandler {
    async fn run<C>(
        &self,
        client: &mut C,
        session: &mut Session,
        statement: Statement,
        text: &str,
        params: Option<&datafusion::common::ParamValues>,
        format: &Format,
    ) -> PgWireResult<Response>
    where
        C: ClientInfo + Sink<PgWireBackendMessage> + Unpin + Send,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        Metrics::add(&self.engine.metrics().statements, 1);
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        session.progress = Some(tx);
        let output = {
            let execute = session::execute(&self.engine, session, statement, text, params);
            tokio::pin!(execute);
            loop {
                tokio::select! {
                    output = &mut execute => break output,
                    Some(message) = rx.recv() => {
                        let info = ErrorInfo::new("NOTICE".to_string(), "00000".to_string(), message);
                        client.send(PgWireBackendMessage::NoticeResponse(NoticeResponse::from(info))).await?;
                    }
                }
            }
        };
        session.progress = None;
        match output {
            Ok(Output::CopyOut(subscription)) => {
                let stream = CopyStream {
                    engine: &self.engine,
                    sockets: &self.sockets,
                    subscription: *subscription,
                };
                let style = text_style(session, client.metadata());
                let options = format_options(client.metadata());
                stream_copy(client, stream, options, style).await
            }
            Ok(output) => {
                let style = text_style(session, client.metadata());
                to_response(output, format, client.metadata(), style)
            }
            Err(e) => {
                Metrics::add(&self.engine.metrics().statement_errors, 1);
                // Damage and bugs are the operator's to see, not only the client's.
                match e.sqlstate() {
                    "XX001" => tracing::error!(error = %e, "stored data is corrupted"),
                    "XX000" => tracing::error!(error = %e, "statement failed on an internal error"),
                    code => tracing::debug!(code, error = %e, "statement failed"),
                }
                Err(to_pg_error(e))
            }
        }
    }
}

/// A change stream and where it may write.
struct CopyStream<'a> {
    engine: &'a Arc<Engine>,
    sockets: &'a Arc<Sockets>,
    subscription: ChangeStream,
}

/// A change stream as COPY data until the client cancels (the statement is
/// dropped) or goes away (a send fails). The stream reads, encodes and
/// writes on the stream threads (`copyout`); when the connection has no
/// duplicate socket, it hands its pieces here to write.
async fn stream_copy<C>(
    client: &mut C,
    stream: CopyStream<'_>,
    options: Arc<FormatOptions>,
    style: TextStyle,
) -> PgWireResult<Response>
where
    C: ClientInfo + Sink<PgWireBackendMessage> + Unpin + Send,
    C::Error: Debug,
    PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
{
    let schema = stream.subscription.schema().clone();
    let fields = Arc::new(arrow_schema_to_pg_fields(
        &super::text::wire_schema(&schema),
        &Format::UnifiedText,
        Some(options.clone()),
    )?);
    let columns = fields.len();
    // `send` flushes: pgwire holds nothing unwritten once the stream starts.
    client
        .send(PgWireBackendMessage::CopyOutResponse(CopyOutResponse::new(
            0,
            columns as i16,
            vec![0; columns],
        )))
        .await?;
    let encode: Encode = Arc::new(move |batch: RecordBatch| {
        let batch = super::text::as_postgres(batch, &fields, &style);
        let mut data = bytes::BytesMut::new();
        for row in encode_recordbatch(fields.clone(), batch) {
            let row = row.map_err(|e| Error::Internal(format!("encoding a change: {e}")))?;
            super::text::copy_line(&row, &CopyFormat::default(), &mut data);
        }
        Ok(data.freeze())
    });
    let (pid, secret) = client.pid_and_secret_key();
    let (direct, _registered) = stream
        .sockets
        .direct(&client.socket_addr(), pid, secret)
        .unzip();
    let format = format!("{options:?}");
    let engine = stream.engine;
    let mut pieces =
        engine
            .streams()
            .spawn(engine.clone(), stream.subscription, format, encode, direct);
    loop {
        let batch = pieces
            .recv()
            .await
            .ok_or_else(|| to_pg_error(Error::ShuttingDown))?;
        for piece in batch
            .map_err(to_pg_error)?
            .into_iter()
            .filter(|p| !p.is_empty())
        {
            client
                .feed(PgWireBackendMessage::CopyData(CopyData::new(piece)))
                .await?;
        }
        client.flush().await?;
    }
}

/// Output formats for a client, for the types Arrow's encoder prints.
fn format_options(metadata: &std::collections::HashMap<String, String>) -> Arc<FormatOptions> {
    Arc::new(FormatOptions::from_client_metadata(metadata))
}

/// How the session prints what `text` renders: its `SET` variables, else
/// what the client asked for at startup.
fn text_style(
    session: &Session,
    metadata: &std::collections::HashMap<String, String>,
) -> TextStyle {
    TextStyle::from_settings(|name| {
        session.variables.get(name).map(String::as_str).or_else(|| {
            metadata
                .iter()
                .find(|(key, _)| key.eq_ignore_ascii_case(name))
                .map(|(_, value)| value.as_str())
        })
    })
}

/// The client's settings are read only for rows: a write's reply skips them.
fn to_response(
    output: Output,
    format: &Format,
    metadata: &std::collections::HashMap<String, String>,
    style: TextStyle,
) -> PgWireResult<Response> {
    Ok(match output {
        Output::Rows {
            schema,
            batches,
            tag,
        } => {
            let batches = stream::iter(batches.into_iter().map(Ok));
            rows_response(&schema, batches, tag, format, metadata, style)?
        }
        Output::Stream { schema, rows, tag } => {
            rows_response(&schema, rows.0, tag, format, metadata, style)?
        }
        Output::Command { tag, rows } => {
            let mut t = Tag::new(&tag);
            if tag == "INSERT" {
                t = t.with_oid(0);
            }
            if let Some(rows) = rows {
                t = t.with_rows(rows as usize);
            }
            Response::Execution(t)
        }
        Output::CopyIn { columns } => {
            Response::CopyIn(CopyResponse::new(0, columns, stream::empty()))
        }
        Output::Transaction { tag, begin: true } => Response::TransactionStart(Tag::new(tag)),
        Output::Transaction { tag, begin: false } => Response::TransactionEnd(Tag::new(tag)),
        Output::CopyOutRows {
            schema,
            rows,
            format,
        } => copy_out_rows(schema, rows.0, format, format_options(metadata), style)?,
        Output::CopyOut(_) => {
            return Err(to_pg_error(Error::Internal(
                "a change stream reached the row encoder".into(),
            )));
        }
    })
}

/// A batch's rows, ending at the first that fails to encode: the encoder
/// does not move past a failing row, so reading on would repeat its
/// error for ever (a decimal too wide for the numeric encoder did).
fn rows_until_error(
    fields: Arc<Vec<pgwire::api::results::FieldInfo>>,
    batch: RecordBatch,
) -> impl Iterator<Item = PgWireResult<pgwire::messages::data::DataRow>> {
    let mut failed = false;
    encode_recordbatch(fields, batch).map_while(move |row| {
        if failed {
            return None;
        }
        failed = row.is_err();
        Some(row)
    })
}

/// Rows in the client's formats, encoded a batch at a time as the client
/// takes them; an error after some rows ends the result, as in PostgreSQL.
fn rows_response(
    schema: &SchemaRef,
    batches: impl futures::Stream<Item = datafusion::error::Result<RecordBatch>> + Send + 'static,
    tag: &str,
    format: &Format,
    metadata: &std::collections::HashMap<String, String>,
    style: TextStyle,
) -> PgWireResult<Response> {
    let options = Some(format_options(metadata));
    let described = super::text::wire_schema(schema);
    let fields = Arc::new(arrow_schema_to_pg_fields(&described, format, options)?);
    let encoder = fields.clone();
    let data = batches.flat_map(move |batch| {
        let rows: Vec<PgWireResult<_>> = match batch {
            Ok(batch) => {
                let batch = super::text::as_postgres(batch, &encoder, &style);
                rows_until_error(encoder.clone(), batch).collect()
            }
            Err(e) => vec![Err(to_pg_error(Error::from(e)))],
        };
        stream::iter(rows)
    });
    let mut response = QueryResponse::new(fields, data);
    response.set_command_tag(tag);
    Ok(Response::Query(response))
}

/// Rows as COPY data: one message a line, as PostgreSQL sends them (the
/// header, when asked for, rides with the first so that the count is of
/// rows). Lines are encoded as the client reads them.
fn copy_out_rows(
    schema: SchemaRef,
    batches: impl futures::Stream<Item = datafusion::error::Result<RecordBatch>> + Send + 'static,
    format: CopyFormat,
    options: Arc<FormatOptions>,
    style: TextStyle,
) -> PgWireResult<Response> {
    let fields = Arc::new(arrow_schema_to_pg_fields(
        &super::text::wire_schema(&schema),
        &Format::UnifiedText,
        Some(options),
    )?);
    let columns = fields.len();
    let mut header = bytes::BytesMut::new();
    if format.header {
        let names: Vec<&str> = schema.fields().iter().map(|f| f.name().as_str()).collect();
        super::text::copy_header(&names, &format, &mut header);
    }
    let rows = batches.flat_map(move |batch| {
        let rows: Vec<PgWireResult<_>> = match batch {
            Ok(batch) => {
                let batch = super::text::as_postgres(batch, &fields, &style);
                rows_until_error(fields.clone(), batch).collect()
            }
            Err(e) => vec![Err(to_pg_error(Error::from(e)))],
        };
        stream::iter(rows)
    });
    let lines = rows.map(move |row| {
        let mut line = std::mem::take(&mut header);
        super::text::copy_line(&row?, &format, &mut line);
        Ok(CopyData::new(line.freeze()))
    });
    Ok(Response::CopyOut(CopyResponse::new(0, columns, lines)))
}

#[async_trait]
impl SimpleQueryHandler for QueryHandler {
    async fn do_query<C>(&self, client: &mut C, query: &str) -> PgWireResult<Vec<Response>>
    where
        C: ClientInfo + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let statements = match wire::parse_texts(query) {
            Ok(statements) => statements,
            Err(e) => return Err(to_pg_error(e)),
        };
        let shared = session_of(client);
        let mut session = shared.lock().await;
        let mut responses = Vec::with_capacity(statements.len());
        for (text, statement) in statements {
            let result = self
                .run(
                    client,
                    &mut session,
                    statement,
                    &text,
                    None,
                    &Format::UnifiedText,
                )
                .await;
            send_notices(client, &mut session).await?;
            match result {
                Ok(response) => responses.push(response),
                Err(PgWireError::UserError(info)) => {
                    responses.push(Response::Error(info));
                    break;
                }
                Err(other) => return Err(other),
            }
        }
        Ok(responses)
    }
}

/// A prepared statement: parsed once, with the parameter types and result
/// columns the extended protocol's Describe reports.
#[derive(Debug, Clone)]
pub struct Prepared {
    statement: Statement,
    /// The statement as the client wrote it.
    text: String,
    parameter_types: Vec<Option<DataType>>,
    schema: Option<SchemaRef>,
}

pub struct StatementParser {
    engine: Arc<Engine>,
}

#[async_trait]
impl QueryParser for StatementParser {
    type Statement = Prepared;

    async fn parse_sql<C>(
        &self,
        client: &C,
        sql: &str,
        _types: &[Option<Type>],
    ) -> PgWireResult<Option<Prepared>>
    where
        C: ClientInfo + Unpin + Send + Sync,
    {
        let mut statements = wire::parse(sql).map_err(to_pg_error)?;
        if statements.is_empty() {
            return Ok(None);
        }
        if statements.len() > 1 {
            return Err(to_pg_error(Error::Syntax(
                "cannot insert multiple commands into a prepared statement".into(),
            )));
        }
        let statement = statements.remove(0);
        let described = if wire::describes_from_session(&statement) {
            let shared = session_of(client);
            let session = shared.lock().await;
            handlers::describe(&self.engine, Some(&session), &statement).await
        } else {
            handlers::describe(&self.engine, None, &statement).await
        };
        let (parameter_types, schema) = described.map_err(to_pg_error)?;
        Ok(Some(Prepared {
            statement,
            text: sql.to_string(),
            parameter_types,
            schema,
        }))
    }

    fn get_parameter_types(&self, stmt: &Prepared) -> PgWireResult<Vec<Type>> {
        stmt.parameter_types
            .iter()
            .map(|t| match t {
                Some(t) => into_pg_type(t),
                None => Ok(Type::UNKNOWN),
            })
            .collect()
    }

    fn get_result_schema(
        &self,
        stmt: &Prepared,
        format: Option<&Format>,
    ) -> PgWireResult<Vec<FieldInfo>> {
        match &stmt.schema {
            Some(schema) => arrow_schema_to_pg_fields(
                &super::text::wire_schema(schema),
                format.unwrap_or(&Format::UnifiedText),
                None,
            ),
            None => Ok(Vec::new()),
        }
    }
}

#[async_trait]
impl ExtendedQueryHandler for QueryHandler {
    type Statement = Prepared;
    type QueryParser = StatementParser;

    fn query_parser(&self) -> Arc<StatementParser> {
        self.parser.clone()
    }

    async fn on_bind<C>(&self, client: &mut C, message: Bind) -> PgWireResult<()>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore<Statement = Prepared>,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        coalesce::bind(client, message).await
    }

    async fn on_describe<C>(&self, client: &mut C, message: Describe) -> PgWireResult<()>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore<Statement = Prepared>,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let name = message.name.as_deref().unwrap_or(DEFAULT_NAME);
        match message.target_type {
            TARGET_TYPE_BYTE_STATEMENT => match client.portal_store().get_statement(name) {
                Some(Entry::Value(statement)) => {
                    let response = self.do_describe_statement(client, &statement).await?;
                    coalesce::describe(client, &response).await
                }
                Some(Entry::Empty) => {
                    coalesce::describe(client, &DescribeStatementResponse::no_data()).await
                }
                None => Err(PgWireError::StatementNotFound(name.to_owned())),
            },
            TARGET_TYPE_BYTE_PORTAL => match client.portal_store().get_portal(name) {
                Some(Entry::Value(portal)) => {
                    let response = self.do_describe_portal(client, &portal).await?;
                    coalesce::describe(client, &response).await
                }
                Some(Entry::Empty) => {
                    coalesce::describe(client, &DescribePortalResponse::no_data()).await
                }
                None => Err(PgWireError::PortalNotFound(name.to_owned())),
            },
            other => Err(PgWireError::InvalidTargetType(other)),
        }
    }

    async fn do_query<C>(
        &self,
        client: &mut C,
        portal: &Portal<Prepared>,
        _max_rows: usize,
    ) -> PgWireResult<Response>
    where
        C: ClientInfo + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let prepared = &portal.statement.statement;
        let params = if prepared.parameter_types.is_empty() {
            None
        } else {
            let types: Vec<Option<&DataType>> = prepared
                .parameter_types
                .iter()
                .map(Option::as_ref)
                .collect();
            Some(parameters(portal, &types)?)
        };
        let shared = session_of(client);
        let mut session = shared.lock().await;
        let result = self
            .run(
                client,
                &mut session,
                prepared.statement.clone(),
                &prepared.text,
                params.as_ref(),
                &portal.result_column_format,
            )
            .await;
        send_notices(client, &mut session).await?;
        result
    }
}

/// The portal's parameters as values. Text-format dates, times and
/// timestamps are read as PostgreSQL reads them (`2024-01-01` for a
/// timestamp, offsets, month names), which the Arrow encoder's parser does
/// not; every other parameter is the encoder's.
fn parameters(
    portal: &Portal<Prepared>,
    types: &[Option<&DataType>],
) -> PgWireResult<datafusion::common::ParamValues> {
    let mut ours = Vec::new();
    // Portal is not Clone: a copy of what decoding reads.
    let mut rest = Portal::new_cursor(portal.name.clone(), portal.statement.clone());
    rest.parameter_format = portal.parameter_format.clone();
    rest.parameters = portal.parameters.clone();
    for (i, value) in portal.parameters.iter().enumerate() {
        let (Some(bytes), Some(Some(target))) = (value, types.get(i)) else {
            continue;
        };
        if portal.parameter_format.is_binary(i) || !wire::is_datetime(target) {
            continue;
        }
        let text = std::str::from_utf8(bytes).map_err(|_| {
            to_pg_error(Error::InvalidInput(format!(
                "parameter ${} is not valid UTF-8",
                i + 1
            )))
        })?;
        ours.push((i, wire::parse_datetime(text, target).map_err(to_pg_error)?));
        rest.parameters[i] = None;
    }
    let mut values = arrow_pg::datatypes::df::deserialize_parameters(&rest, types)?;
    if let datafusion::common::ParamValues::List(list) = &mut values {
        for (i, value) in ours {
            if let Some(slot) = list.get_mut(i) {
                *slot = value.into();
            }
        }
    }
    Ok(values)
}

#[async_trait]
impl CopyHandler for QueryHandler {
    async fn on_copy_data<C>(&self, client: &mut C, copy_data: CopyData) -> PgWireResult<()>
    where
        C: ClientInfo + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let shared = session_of(client);
        let mut session = shared.lock().await;
        let Some(copy) = session.copy.as_mut() else {
            return Ok(());
        };
        match handlers::copy::receive(&self.engine, copy, &copy_data.data).await {
            Ok(()) => Ok(()),
            // The COPY is over: its data is no longer wanted.
            Err(e) => {
                session.copy = None;
                Metrics::add(&self.engine.metrics().statement_errors, 1);
                Err(to_pg_error(e))
            }
        }
    }

    async fn on_copy_done<C>(&self, client: &mut C, _done: CopyDone) -> PgWireResult<()>
    where
        C: ClientInfo + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let shared = session_of(client);
        let (copy, flush, producer) = {
            let mut session = shared.lock().await;
            (
                session.copy.take(),
                session.implicit_flush(),
                session.producer(),
            )
        };
        let Some(copy) = copy else {
            return Err(to_pg_error(Error::Internal(
                "COPY data without a COPY statement".into(),
            )));
        };
        let mut outcome = match producer {
            Ok(producer) => wire::finish_copy(&self.engine, copy, producer).await,
            Err(e) => Err(e),
        };
        if flush && outcome.is_ok() {
            outcome = self.engine.flush().await.and(outcome);
        }
        match outcome {
            Ok(Output::Command { tag, rows }) => {
                let tag = Tag::new(&tag).with_rows(rows.unwrap_or(0) as usize);
                client
                    .send(PgWireBackendMessage::CommandComplete(tag.into()))
                    .await?;
                Ok(())
            }
            Ok(_) => Err(to_pg_error(Error::Internal(
                "COPY finished without a tag".into(),
            ))),
            Err(e) => {
                Metrics::add(&self.engine.metrics().statement_errors, 1);
                Err(to_pg_error(e))
            }
        }
    }

    async fn on_copy_fail<C>(&self, client: &mut C, fail: CopyFail) -> PgWireError
    where
        C: ClientInfo + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        session_of(client).lock().await.copy = None;
        let info = ErrorInfo::new(
            "ERROR".to_string(),
            "57014".to_string(),
            format!("COPY from stdin failed: {}", fail.message),
        );
        PgWireError::UserError(Box::new(info))
    }
}
