//! Scalar functions of weir's dialect.

use std::sync::Arc;

use datafusion::arrow::datatypes::{DataType, TimeUnit};
use datafusion::common::ScalarValue;
use datafusion::logical_expr::{
    ColumnarValue, ScalarFunctionArgs, ScalarUDFImpl, Signature, Volatility,
};

/// `PROCTIME()`: processing time, the moment a row is processed. In a
/// SELECT that is when the statement runs; in a view, when the epoch that
/// carries the row runs. It follows the engine's clock, so a server started
/// with `--manual-clock` answers with the time `ADVANCE CLOCK` has set.
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct ProcTime {
    signature: Signature,
    now: ClockFn,
}

/// Microseconds since the Unix epoch, now.
#[derive(Clone)]
pub struct ClockFn(pub Arc<dyn Fn() -> i64 + Send + Sync>);

impl std::fmt::Debug for ClockFn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ClockFn")
    }
}

impl PartialEq for ClockFn {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl Eq for ClockFn {}

impl std::hash::Hash for ClockFn {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        (Arc::as_ptr(&self.0) as *const () as usize).hash(state);
    }
}

impl ProcTime {
    pub fn new(now: Arc<dyn Fn() -> i64 + Send + Sync>) -> ProcTime {
        ProcTime {
            // Volatile: never folded into a constant when a view is planned.
            signature: Signature::nullary(Volatility::Volatile),
            now: ClockFn(now),
        }
    }
}

impl ScalarUDFImpl for ProcTime {
    fn name(&self) -> &str {
        "proctime"
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _arg_types: &[DataType]) -> datafusion::error::Result<DataType> {
        Ok(DataType::Timestamp(
            TimeUnit::Microsecond,
            Some("+00:00".into()),
        ))
    }

    fn invoke_with_args(
        &self,
        _args: ScalarFunctionArgs,
    ) -> datafusion::error::Result<ColumnarValue> {
        Ok(ColumnarValue::Scalar(ScalarValue::TimestampMicrosecond(
            Some((self.now.0)()),
            Some("+00:00".into()),
        )))
    }
}

/// The version weir reports as `server_version`: PostgreSQL's release whose
/// behaviour weir follows, then weir's own, in the shape of a distribution's
/// build (`15.18 (Debian 15.18-0+deb12u1)`), which drivers already parse.
pub const SERVER_VERSION: &str = concat!("15.0 (weir ", env!("CARGO_PKG_VERSION"), ")");

/// `server_version_num`: the PostgreSQL release as one number.
pub const SERVER_VERSION_NUM: &str = "150000";

/// `version()` as PostgreSQL words it: ORMs and BI tools read the release
/// from its leading `PostgreSQL X.Y`.
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct Version {
    signature: Signature,
    /// `pg_catalog.version()`, as clients spell it, too.
    aliases: Vec<String>,
}

impl Default for Version {
    fn default() -> Version {
        Version {
            signature: Signature::nullary(Volatility::Immutable),
            aliases: vec!["pg_catalog.version".to_string()],
        }
    }
}

/// The text of `version()`.
pub fn version_text() -> String {
    format!(
        "PostgreSQL {SERVER_VERSION} on {}-{}, compiled by rustc, 64-bit",
        std::env::consts::ARCH,
        std::env::consts::OS
    )
}

impl ScalarUDFImpl for Version {
    fn name(&self) -> &str {
        "version"
    }

    fn aliases(&self) -> &[String] {
        &self.aliases
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _arg_types: &[DataType]) -> datafusion::error::Result<DataType> {
        Ok(DataType::Utf8)
    }

    fn invoke_with_args(
        &self,
        _args: ScalarFunctionArgs,
    ) -> datafusion::error::Result<ColumnarValue> {
        Ok(ColumnarValue::Scalar(ScalarValue::Utf8(Some(
            version_text(),
        ))))
    }
}
