//! The crate's error type and its SQLSTATE mapping.
//!
//! Every error a client can see maps to a SQLSTATE through an exhaustive
//! `match` (no wildcard arm), so adding a variant forces a decision about the
//! code a client receives. Message, detail and hint stay apart.

use datafusion::arrow::error::ArrowError;
use datafusion::common::SchemaError;
use datafusion::error::DataFusionError;

pub type Result<T, E = Error> = std::result::Result<T, E>;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{0}")]
    Syntax(String),
    #[error("relation \"{0}\" does not exist")]
    UndefinedTable(String),
    #[error("{0}")]
    UndefinedColumn(String),
    #[error("{0}")]
    UndefinedObject(String),
    #[error("relation \"{0}\" already exists")]
    DuplicateTable(String),
    #[error("column \"{0}\" specified more than once")]
    DuplicateColumn(String),
    #[error("{0}")]
    InvalidInput(String),
    #[error("{0}")]
    OutOfRange(String),
    /// Text that is no date, time or timestamp.
    #[error("{0}")]
    InvalidDatetime(String),
    /// A date or time with a field out of range (`2024-02-30`).
    #[error("{0}")]
    DatetimeOutOfRange(String),
    #[error("duplicate key value violates unique constraint \"{constraint}\"")]
    UniqueViolation { constraint: String, key: String },
    #[error(
        "null value in column \"{column}\" of relation \"{table}\" violates not-null constraint"
    )]
    NotNullViolation { table: String, column: String },
    #[error("cannot drop {kind} {name} because other objects depend on it")]
    DependentObjects {
        kind: &'static str,
        name: String,
        dependents: Vec<String>,
    },
    #[error("{0}")]
    NotSupported(String),
    #[error("{0}")]
    WrongObjectType(String),
    #[error("{0}")]
    DatatypeMismatch(String),
    #[error("{0}")]
    InsufficientPrivilege(String),
    /// A privilege the object cannot have (`GRANT CREATE ON TABLE t`).
    #[error("{0}")]
    InvalidGrantOperation(String),
    #[error("schema \"{0}\" does not exist")]
    UndefinedSchema(String),
    /// A file or directory that is there already (a backup's target).
    #[error("{0}")]
    DuplicateFile(String),
    /// A window frame PostgreSQL refuses.
    #[error("{0}")]
    WindowingError(String),
    /// A statement that cannot run inside `BEGIN ... COMMIT`.
    #[error("{0}")]
    ActiveTransaction(String),
    /// A name kept for the system (`CREATE ROLE public`).
    #[error("{0}")]
    ReservedName(String),
    #[error("{0}")]
    DiskFull(String),
    #[error("{0}")]
    InvalidParameter(String),
    #[error("{0}")]
    PrerequisiteState(String),
    #[error("{0}")]
    DuplicateObject(String),
    #[error("cursor \"{0}\" does not exist")]
    UndefinedCursor(String),
    #[error("cursor \"{0}\" already exists")]
    DuplicateCursor(String),
    #[error("{0}")]
    NoActiveTransaction(String),
    /// An outside system (a Kafka broker) could not be reached.
    #[error("{0}")]
    ConnectionFailure(String),
    #[error("could not serialize access due to concurrent update")]
    SerializationFailure,
    #[error("canceling statement due to user request")]
    Canceled,
    #[error("canceling statement due to statement timeout")]
    StatementTimeout,
    /// Deeper than the stack statements run on holds (PostgreSQL's
    /// `max_stack_depth`).
    #[error("{0}")]
    TooComplex(String),
    /// More than weir makes in one go (PostgreSQL's program_limit_exceeded).
    #[error("{0}")]
    ProgramLimitExceeded(String),
    /// A function of that name exists (PostgreSQL's duplicate_function).
    #[error("{0}")]
    DuplicateFunction(String),
    /// No function of that name (PostgreSQL's undefined_function).
    #[error("{0}")]
    UndefinedFunction(String),
    /// A materialized view stopped on an error (`on_error = 'fail'`); its
    /// readers get the error's own SQLSTATE.
    #[error("{message}")]
    ViewFailed {
        sqlstate: &'static str,
        message: String,
    },
    #[error("the server is shutting down")]
    ShuttingDown,
    #[error("configuration error: {0}")]
    Config(String),
    #[error("storage error: {0}")]
    Storage(#[from] rocksdb::Error),
    /// Stored bytes failed their check: a block checksum, or a log chunk
    /// that does not parse.
    #[error("data corrupted: {0}")]
    Corrupted(String),
    #[error("I/O error: {0}")]
    Io(#[from] std::io::Error),
    #[error("{0}")]
    DataFusion(Box<DataFusionError>),
    #[error("internal error: {0}; this is a bug")]
    Internal(String),
}

/// The text a caught panic carried, for the client and the log.
pub fn panic_message(panic: &(dyn std::any::Any + Send)) -> &str {
    if let Some(s) = panic.downcast_ref::<&'static str>() {
        s
    } else if let Some(s) = panic.downcast_ref::<String>() {
        s
    } else {
        "panic"
    }
}

impl From<DataFusionError> for Error {
    fn from(e: DataFusionError) -> Self {
        // Our own errors travel through DataFusion (table sinks, scans) wrapped as External.
        match e {
            DataFusionError::External(inner) => match inner.downcast::<Error>() {
                Ok(ours) => *ours,
                Err(other) => Error::DataFusion(Box::new(DataFusionError::External(other))),
            },
            DataFusionError::Context(_, inner) | DataFusionError::Diagnostic(_, inner) => {
                Error::from(*inner)
            }
            DataFusionError::Shared(shared) => match std::sync::Arc::try_unwrap(shared) {
                Ok(inner) => Error::from(inner),
                Err(shared) => Error::DataFusion(Box::new(DataFusionError::Shared(shared))),
            },
            other => Error::DataFusion(Box::new(other)),
        }
    }
}

impl From<ArrowError> for Error {
    fn from(e: ArrowError) -> Self {
        Error::DataFusion(Box::new(DataFusionError::ArrowError(Box::new(e), None)))
    }
}

impl From<Error> for DataFusionError {
    fn from(e: Error) -> Self {
        DataFusionError::External(Box::new(e))
    }
}

impl From<sqlparser::parser::ParserError> for Error {
    fn from(e: sqlparser::parser::ParserError) -> Self {
        match e {
            sqlparser::parser::ParserError::RecursionLimitExceeded => {
                Error::TooComplex(parser_message(&e))
            }
            other => Error::Syntax(parser_message(&other)),
        }
    }
}

fn parser_message(e: &sqlparser::parser::ParserError) -> String {
    use sqlparser::parser::ParserError as P;
    match e {
        P::TokenizerError(m) | P::ParserError(m) => format!("syntax error: {m}"),
        P::RecursionLimitExceeded => {
            "statement too complex: its expressions are nested too deeply".to_string()
        }
    }
}

impl Error {
    /// The SQLSTATE a client receives.
    pub fn sqlstate(&self) -> &'static str {
        match self {
            Error::Syntax(_) => "42601",
            Error::UndefinedTable(_) => "42P01",
            Error::UndefinedColumn(_) => "42703",
            Error::UndefinedObject(_) => "42704",
            Error::DuplicateTable(_) => "42P07",
            Error::DuplicateColumn(_) => "42701",
            Error::InvalidInput(_) => "22P02",
            Error::OutOfRange(_) => "22003",
            Error::InvalidDatetime(_) => "22007",
            Error::DatetimeOutOfRange(_) => "22008",
            Error::UniqueViolation { .. } => "23505",
            Error::NotNullViolation { .. } => "23502",
            Error::DependentObjects { .. } => "2BP01",
            Error::NotSupported(_) => "0A000",
            Error::WrongObjectType(_) => "42809",
            Error::DatatypeMismatch(_) => "42804",
            Error::InsufficientPrivilege(_) => "42501",
            Error::InvalidGrantOperation(_) => "0LP01",
            Error::UndefinedSchema(_) => "3F000",
            Error::ActiveTransaction(_) => "25001",
            Error::WindowingError(_) => "42P20",
            Error::DuplicateFile(_) => "58P02",
            Error::ReservedName(_) => "42939",
            Error::DiskFull(_) => "53100",
            Error::InvalidParameter(_) => "22023",
            Error::PrerequisiteState(_) => "55000",
            Error::DuplicateObject(_) => "42710",
            Error::UndefinedCursor(_) => "34000",
            Error::DuplicateCursor(_) => "42P03",
            Error::NoActiveTransaction(_) => "25P01",
            Error::ConnectionFailure(_) => "08001",
            Error::SerializationFailure => "40001",
            Error::Canceled | Error::StatementTimeout => "57014",
            Error::TooComplex(_) => "54001",
            Error::ProgramLimitExceeded(_) => "54000",
            Error::DuplicateFunction(_) => "42723",
            Error::UndefinedFunction(_) => "42883",
            Error::ViewFailed { sqlstate, .. } => sqlstate,
            Error::ShuttingDown => "57P01",
            Error::Config(_) => "F0000",
            Error::Storage(e) if e.kind() == rocksdb::ErrorKind::Corruption => "XX001",
            Error::Storage(_) | Error::Io(_) => "58030",
            Error::Corrupted(_) => "XX001",
            Error::DataFusion(e) => datafusion_sqlstate(e),
            Error::Internal(_) => "XX000",
        }
    }

    /// The client-facing message, without DataFusion's category prefixes.
    pub fn message(&self) -> String {
        match self {
            Error::DataFusion(e) => datafusion_message(e),
            other => other.to_string(),
        }
    }

    pub fn detail(&self) -> Option<String> {
        match self {
            Error::UniqueViolation { key, .. } => Some(format!("Key {key} already exists.")),
            Error::DependentObjects { dependents, .. } => Some(
                dependents
                    .iter()
                    .map(|d| format!("{d} depends on it"))
                    .collect::<Vec<_>>()
                    .join("\n"),
            ),
            _ => None,
        }
    }

    pub fn hint(&self) -> Option<String> {
        match self {
            Error::DependentObjects { .. } => {
                Some("Use DROP ... CASCADE to drop the dependent objects too.".to_string())
            }
            Error::SerializationFailure => Some("Retry the statement.".to_string()),
            _ => None,
        }
    }
}

fn datafusion_sqlstate(e: &DataFusionError) -> &'static str {
    match e.find_root() {
        DataFusionError::SQL(inner, _)
            if matches!(
                **inner,
                sqlparser::parser::ParserError::RecursionLimitExceeded
            ) =>
        {
            "54001"
        }
        DataFusionError::SQL(..) => "42601",
        DataFusionError::NotImplemented(_) => "0A000",
        DataFusionError::SchemaError(inner, _) => match inner.as_ref() {
            SchemaError::FieldNotFound { .. } => "42703",
            SchemaError::AmbiguousReference { .. } => "42702",
            SchemaError::DuplicateQualifiedField { .. }
            | SchemaError::DuplicateUnqualifiedField { .. } => "42701",
        },
        DataFusionError::ArrowError(inner, _) => arrow_sqlstate(inner),
        DataFusionError::Plan(m) => plan_sqlstate(m),
        DataFusionError::Execution(m) => execution_sqlstate(m),
        DataFusionError::ResourcesExhausted(_) => "53200",
        // Ours, shared by several of DataFusion's tasks, so not taken back out.
        DataFusionError::External(inner) => inner
            .downcast_ref::<Error>()
            .map_or("XX000", Error::sqlstate),
        DataFusionError::IoError(_) => "58030",
        DataFusionError::Configuration(_) => "22023",
        _ => "XX000",
    }
}

fn arrow_sqlstate(e: &ArrowError) -> &'static str {
    match e {
        ArrowError::CastError(_) | ArrowError::ParseError(_) => "22P02",
        ArrowError::DivideByZero => "22012",
        ArrowError::ArithmeticOverflow(_) => "22003",
        ArrowError::InvalidArgumentError(m) if m.contains("non-nullable") => "23502",
        ArrowError::InvalidArgumentError(_) => "22023",
        _ => "XX000",
    }
}

fn plan_sqlstate(message: &str) -> &'static str {
    if message.contains("not found") && message.contains("table") {
        "42P01"
    } else if message.starts_with("Invalid function")
        || message.contains("No function matches")
        || message.starts_with("Cannot coerce arithmetic expression")
    {
        // The last is PostgreSQL's "operator does not exist: interval * text".
        "42883"
    } else if message.contains("to grouping function is not in grouping columns") {
        "42803"
    } else if message.contains("require unique expression names") {
        // Two output columns of one name where a relation needs them
        // apart, PostgreSQL's "column specified more than once".
        "42701"
    } else if message.contains("Cannot") && message.contains("cast") {
        "42846"
    } else {
        "42804"
    }
}

fn execution_sqlstate(message: &str) -> &'static str {
    if message.contains("cast") || message.contains("parse") || message.contains("Cast") {
        "22P02"
    } else if message.contains("Divide by zero") {
        "22012"
    } else if message.starts_with("Unsupported date_trunc granularity") {
        // PostgreSQL: unit "..." not recognized.
        "22023"
    } else {
        "XX000"
    }
}

/// Arrow's words, but PostgreSQL's where a client may compare them.
fn arrow_message(e: &ArrowError) -> String {
    match e {
        ArrowError::DivideByZero => "division by zero".to_string(),
        other => other.to_string(),
    }
}

fn datafusion_message(e: &DataFusionError) -> String {
    let root = e.find_root();
    let text = match root {
        DataFusionError::ArrowError(inner, _) => arrow_message(inner),
        DataFusionError::SchemaError(inner, _) => inner.to_string(),
        DataFusionError::External(inner) => match inner.downcast_ref::<Error>() {
            Some(ours) => ours.message(),
            None => inner.to_string(),
        },
        DataFusionError::SQL(inner, _) => parser_message(inner),
        DataFusionError::Plan(m)
        | DataFusionError::Execution(m)
        | DataFusionError::NotImplemented(m) => m.clone(),
        other => other.strip_backtrace(),
    };
    text.trim().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn our_errors_survive_a_trip_through_datafusion() {
        let df: DataFusionError = Error::UndefinedTable("t".into()).into();
        let back = Error::from(DataFusionError::Context("scan".into(), Box::new(df)));
        assert_eq!(back.sqlstate(), "42P01");
    }

    #[test]
    fn our_errors_keep_their_sqlstate_when_shared() {
        let ours: DataFusionError = Error::Corrupted("a block".into()).into();
        let shared = std::sync::Arc::new(ours);
        let held = shared.clone();
        let e = Error::from(DataFusionError::Shared(shared));
        assert_eq!(e.sqlstate(), "XX001");
        assert_eq!(e.message(), "data corrupted: a block");
        drop(held);
    }

    #[test]
    fn cast_failures_are_invalid_input() {
        let e = Error::from(DataFusionError::ArrowError(
            Box::new(ArrowError::CastError(
                "Cannot cast string 'x' to Int64".into(),
            )),
            None,
        ));
        assert_eq!(e.sqlstate(), "22P02");
    }
}
