//! SUBSCRIBE, cursors (DECLARE, FETCH, CLOSE) and RisingWave-style
//! subscriptions (CREATE SUBSCRIPTION, DECLARE ... SUBSCRIPTION CURSOR).

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use datafusion::arrow::array::{
    Array, ArrayRef, AsArray, Int64Array, RecordBatch, StringArray, UInt32Array,
};
use datafusion::arrow::compute::{concat_batches, take};
use datafusion::arrow::datatypes::{DataType, Field, Int32Type, Int64Type, Schema, SchemaRef};

use crate::catalog::Object;
use crate::catalog::{SubscriptionDef, Table};
use crate::error::{Error, Result};
use crate::session::merged::{ChangeStream, Merged};
use crate::session::subscribe::{Options, Pace, Subscription};
use crate::session::{Engine, Output, Session};
use crate::sql::parser::{CursorSource, EmitClause, Fetch, Since, Subscribe};

/// How long a view's changes stay readable unless it says otherwise.
pub const DEFAULT_RETENTION: &str = "1 hour";

/// An open cursor.
pub enum Cursor {
    /// `DECLARE c CURSOR FOR SUBSCRIBE ...`: `(_epoch, _diff, columns)`.
    Subscribe(Box<ChangeStream>),
    /// `DECLARE c SUBSCRIPTION CURSOR FOR s`: RisingWave's
    /// `(columns, op, rw_timestamp)`, one row per inserted or deleted row.
    Subscription(Box<Subscription>, SchemaRef),
    /// `DECLARE c CURSOR FOR SELECT ...`: the query's rows, read on DECLARE.
    Rows {
        schema: SchemaRef,
        rows: VecDeque<RecordBatch>,
    },
}

impl std::fmt::Debug for Cursor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Cursor::Subscribe(_) => "Cursor::Subscribe",
            Cursor::Subscription(..) => "Cursor::Subscription",
            Cursor::Rows { .. } => "Cursor::Rows",
        })
    }
}

impl Cursor {
    pub fn schema(&self) -> SchemaRef {
        match self {
            Cursor::Subscribe(s) => s.schema().clone(),
            Cursor::Subscription(_, schema) | Cursor::Rows { schema, .. } => schema.clone(),
        }
    }
}

/// A change stream for `SUBSCRIBE ...` as written.
pub async fn open(engine: &Arc<Engine>, subscribe: &Subscribe) -> Result<ChangeStream> {
    let table = relation(engine, &subscribe.name)?;
    crate::session::partitioned::refuse_split(engine, &[table.def.id], "SUBSCRIBE")?;
    let mut options = Options {
        as_of: subscribe.as_of,
        ..Options::default()
    };
    for (key, value) in &subscribe.options {
        match key.as_str() {
            "snapshot" => options.snapshot = boolean(key, value)?,
            "progress" => options.progress = boolean(key, value)?,
            other => {
                return Err(Error::InvalidParameter(format!(
                    "unrecognized SUBSCRIBE option \"{other}\"; SUBSCRIBE takes WITH (snapshot = true|false, progress = true|false)"
                )));
            }
        }
    }
    options.pace = match &subscribe.emit {
        None | Some(EmitClause::Changes) => Pace::Changes,
        Some(EmitClause::OnWindowClose) => Pace::OnWindowClose,
        Some(EmitClause::Every(interval)) => Pace::Every(
            super::create_mv::every_micros(
                engine,
                interval,
                "SUBSCRIBE v EMIT EVERY INTERVAL '5' SECOND",
            )
            .await?,
        ),
    };
    match engine.catalog.by_id(table.def.id) {
        Some(Object::MaterializedView(view))
            if view.def.partitioned && engine.cluster().is_some() =>
        {
            Ok(ChangeStream::Merged(
                Merged::open(engine, view, options).await?,
            ))
        }
        _ => Ok(ChangeStream::Local(Subscription::open(
            &engine.node,
            table,
            options,
        )?)),
    }
}

fn relation(engine: &Engine, name: &str) -> Result<Arc<Table>> {
    engine
        .catalog
        .relation(name)
        .ok_or_else(|| Error::UndefinedTable(name.to_string()))
}

/// A boolean option's value, spelled as PostgreSQL spells booleans.
pub(super) fn boolean(key: &str, value: &str) -> Result<bool> {
    match value.to_lowercase().as_str() {
        "true" | "on" | "1" | "yes" | "t" => Ok(true),
        "false" | "off" | "0" | "no" | "f" => Ok(false),
        _ => Err(Error::InvalidParameter(format!(
            "option \"{key}\" takes true or false, not \"{value}\""
        ))),
    }
}

pub async fn declare(
    engine: &Arc<Engine>,
    session: &mut Session,
    name: String,
    source: CursorSource,
) -> Result<Output> {
    if session.cursors.contains_key(&name) {
        return Err(Error::DuplicateCursor(name));
    }
    let cursor = match source {
        CursorSource::Subscribe(subscribe) => {
            in_transaction(session)?;
            Cursor::Subscribe(Box::new(open(engine, &subscribe).await?))
        }
        CursorSource::Query(query) => {
            in_transaction(session)?;
            match super::query::run(engine, &query, None)
                .await?
                .collected()
                .await?
            {
                Output::Rows {
                    schema, batches, ..
                } => Cursor::Rows {
                    schema,
                    rows: batches.into(),
                },
                _ => {
                    return Err(Error::Syntax(
                        "DECLARE CURSOR needs a query that returns rows".into(),
                    ));
                }
            }
        }
        CursorSource::Subscription { name, since } => subscription_cursor(engine, &name, since)?,
    };
    session.cursors.insert(name, cursor);
    Ok(Output::command("DECLARE CURSOR"))
}

fn in_transaction(session: &Session) -> Result<()> {
    if session.in_transaction {
        return Ok(());
    }
    Err(Error::NoActiveTransaction(
        "DECLARE CURSOR can only be used in transaction blocks; run BEGIN first".into(),
    ))
}

fn subscription_cursor(engine: &Arc<Engine>, name: &str, since: Since) -> Result<Cursor> {
    let def = engine
        .catalog
        .subscription(name)
        .ok_or_else(|| Error::UndefinedObject(format!("subscription \"{name}\" does not exist")))?;
    let table = engine
        .catalog
        .by_id(def.from)
        .map(|o| o.table().clone())
        .ok_or_else(|| {
            Error::Internal(format!("subscription \"{name}\" reads a dropped relation"))
        })?;
    let options = Options {
        snapshot: since == Since::Full,
        as_of: match since {
            Since::Epoch(epoch) => Some(epoch),
            Since::Now | Since::Full => None,
        },
        ..Options::default()
    };
    let schema = risingwave_schema(&table);
    let subscription = Subscription::open(&engine.node, table, options)?;
    Ok(Cursor::Subscription(Box::new(subscription), schema))
}

/// The relation's columns, then `op` and `rw_timestamp`, as RisingWave returns them.
fn risingwave_schema(table: &Table) -> SchemaRef {
    let mut fields: Vec<Field> = table
        .nullable_schema
        .fields()
        .iter()
        .map(|f| f.as_ref().clone())
        .collect();
    fields.push(Field::new("op", DataType::Utf8, true));
    fields.push(Field::new("rw_timestamp", DataType::Int64, true));
    Arc::new(Schema::new(fields))
}

pub async fn fetch(engine: &Arc<Engine>, session: &mut Session, fetch: Fetch) -> Result<Output> {
    let timeout = fetch.timeout.as_deref().map(parse_duration).transpose()?;
    let max = fetch.count.map_or(usize::MAX, |n| n as usize);
    let cursor = session
        .cursors
        .get_mut(&fetch.cursor)
        .ok_or_else(|| Error::UndefinedCursor(fetch.cursor.clone()))?;
    if max == 0 {
        return Ok(rows(cursor.schema(), Vec::new()));
    }
    let batch = match cursor {
        Cursor::Subscribe(subscription) => subscription.fetch(&engine.node, max, timeout).await?,
        Cursor::Subscription(subscription, schema) => {
            // RisingWave's FETCH does not wait unless told to.
            let wait = timeout.or(Some(Duration::ZERO));
            let changes = subscription.fetch(&engine.node, max, wait).await?;
            as_risingwave(&changes, schema)?
        }
        Cursor::Rows { schema, rows } => take_rows(schema, rows, max)?,
    };
    Ok(rows(batch.schema(), vec![batch]))
}

fn rows(schema: SchemaRef, batches: Vec<RecordBatch>) -> Output {
    Output::Rows {
        schema,
        batches,
        tag: "FETCH",
    }
}

/// Up to `max` rows off the front of `queue`, as one batch.
pub(crate) fn take_rows(
    schema: &SchemaRef,
    queue: &mut VecDeque<RecordBatch>,
    max: usize,
) -> Result<RecordBatch> {
    let mut out = Vec::new();
    let mut left = max;
    while left > 0 {
        let Some(batch) = queue.pop_front() else {
            break;
        };
        if batch.num_rows() > left {
            queue.push_front(batch.slice(left, batch.num_rows() - left));
            out.push(batch.slice(0, left));
            break;
        }
        left -= batch.num_rows();
        out.push(batch);
    }
    Ok(concat_batches(schema, &out)?)
}

/// Change rows as RisingWave's subscription cursors return them: one row
/// per inserted or deleted row; progress rows are dropped.
fn as_risingwave(changes: &RecordBatch, schema: &SchemaRef) -> Result<RecordBatch> {
    let epochs = changes.column(0).as_primitive::<Int64Type>();
    let diffs = changes.column(1).as_primitive::<Int32Type>();
    let mut indices = Vec::new();
    let mut ops = Vec::new();
    let mut stamps = Vec::new();
    for i in 0..changes.num_rows() {
        if diffs.is_null(i) {
            continue;
        }
        let diff = diffs.value(i);
        let op = if diff > 0 { "Insert" } else { "Delete" };
        for _ in 0..diff.unsigned_abs() {
            indices.push(i as u32);
            ops.push(op);
            stamps.push(epochs.value(i));
        }
    }
    let indices = UInt32Array::from(indices);
    let mut columns: Vec<ArrayRef> = changes.columns()[2..]
        .iter()
        .map(|c| take(c.as_ref(), &indices, None))
        .collect::<std::result::Result<_, _>>()?;
    columns.push(Arc::new(StringArray::from(ops)));
    columns.push(Arc::new(Int64Array::from(stamps)));
    Ok(RecordBatch::try_new(schema.clone(), columns)?)
}

pub fn close(session: &mut Session, name: Option<String>) -> Result<Output> {
    match name {
        None => session.cursors.clear(),
        Some(name) => {
            session
                .cursors
                .remove(&name)
                .ok_or(Error::UndefinedCursor(name))?;
        }
    }
    Ok(Output::command("CLOSE CURSOR"))
}

pub fn create_subscription(
    engine: &Arc<Engine>,
    session: &mut Session,
    name: String,
    from: String,
    retention: Option<String>,
    if_not_exists: bool,
) -> Result<Output> {
    if engine.catalog.subscription(&name).is_some() && if_not_exists {
        session.notice(format!("subscription \"{name}\" already exists, skipping"));
        return Ok(Output::command("CREATE SUBSCRIPTION"));
    }
    let table = relation(engine, &from)?;
    crate::session::partitioned::refuse_follower(engine, &[table.def.id], "a subscription")?;
    let retention = parse_duration(retention.as_deref().unwrap_or("1 day"))
        .map_err(|e| Error::InvalidParameter(format!("retention: {e}")))?;
    let retention = retention.as_micros() as i64;
    engine.catalog.create_subscription(SubscriptionDef {
        name,
        from: table.def.id,
        retention,
    })?;
    if table.def.is_view() {
        let partitions = table.def.partitions.max(1);
        let fold = crate::dataflow::runtime::Retention::fold(retention, partitions);
        engine.runtime.retain(table.def.log_topic(), fold)?;
    } else {
        super::ddl::retain_log(engine, &table.def, retention)?;
    }
    Ok(Output::command("CREATE SUBSCRIPTION"))
}

pub fn drop_subscriptions(
    engine: &Arc<Engine>,
    session: &mut Session,
    names: &[String],
    if_exists: bool,
) -> Result<Output> {
    for name in names {
        if engine.catalog.subscription(name).is_none() {
            super::ddl::skip_missing(
                session,
                crate::catalog::ObjectKind::Subscription,
                name,
                if_exists,
            )?;
            continue;
        }
        engine.catalog.drop_subscription(name)?;
    }
    Ok(Output::command("DROP SUBSCRIPTION"))
}

/// A duration as written in options: `'1s'`, `'500ms'`, `'1 hour'`,
/// `'1D'`, `'2 minutes 30 seconds'`; a bare number counts seconds.
pub fn parse_duration(text: &str) -> Result<Duration> {
    let invalid = || {
        Error::InvalidParameter(format!(
            "invalid duration \"{text}\"; write a number and a unit, like '1s', '500ms', '5 minutes' or '1 day'"
        ))
    };
    let lower = text.trim().to_lowercase();
    let mut micros: u128 = 0;
    let mut rest = lower.as_str();
    if rest.is_empty() {
        return Err(invalid());
    }
    while !rest.is_empty() {
        let digits = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let number: f64 = rest[..digits].parse().map_err(|_| invalid())?;
        rest = rest[digits..].trim_start();
        let unit_len = rest
            .find(|c: char| !c.is_ascii_alphabetic())
            .unwrap_or(rest.len());
        let unit = match &rest[..unit_len] {
            "" | "s" | "sec" | "secs" | "second" | "seconds" => 1e6,
            "us" | "microsecond" | "microseconds" => 1.0,
            "ms" | "millisecond" | "milliseconds" => 1e3,
            "m" | "min" | "mins" | "minute" | "minutes" => 60e6,
            "h" | "hr" | "hrs" | "hour" | "hours" => 3600e6,
            "d" | "day" | "days" => 86_400e6,
            "w" | "week" | "weeks" => 604_800e6,
            _ => return Err(invalid()),
        };
        micros += (number * unit) as u128;
        rest = rest[unit_len..].trim_start();
    }
    Ok(Duration::from_micros(micros as u64))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_as_people_write_them() {
        assert_eq!(parse_duration("1s").ok(), Some(Duration::from_secs(1)));
        assert_eq!(parse_duration("0").ok(), Some(Duration::ZERO));
        assert_eq!(
            parse_duration("500ms").ok(),
            Some(Duration::from_millis(500))
        );
        assert_eq!(
            parse_duration("1 hour").ok(),
            Some(Duration::from_secs(3600))
        );
        assert_eq!(parse_duration("1D").ok(), Some(Duration::from_secs(86_400)));
        assert_eq!(
            parse_duration("2 minutes 30 seconds").ok(),
            Some(Duration::from_secs(150))
        );
        assert!(parse_duration("soon").is_err());
        assert!(parse_duration("").is_err());
    }
}
