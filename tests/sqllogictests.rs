//! Runs every `.slt` file under `sql-tests/` against a real weir process,
//! once over the simple query protocol and once over the extended one, each
//! run with a fresh server and data directory.
//!
//! `cargo test --test sqllogictests -- [FILTER]` runs the files whose path contains FILTER.
//! A file that needs server flags names them on a line `# weir-args: --flag ...`.

mod common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use async_trait::async_trait;
use sqllogictest::{AsyncDB, DBOutput, DefaultColumnType};
use tokio_postgres::types::Type;
use tokio_postgres::{Client, SimpleQueryMessage};
use weir::sql::text;

use common::TestServer;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Protocol {
    Simple,
    Extended,
}

struct WeirDb {
    client: Client,
    protocol: Protocol,
    /// Also run every query as a materialized view and compare (STYLE §6).
    check_views: bool,
    views_created: usize,
}

#[derive(Debug)]
struct DbError(tokio_postgres::Error);

impl std::fmt::Display for DbError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0.as_db_error() {
            Some(db) => write!(
                f,
                "{}: {} (SQLSTATE {})",
                db.severity(),
                db.message(),
                db.code().code()
            ),
            None => write!(f, "{}", self.0),
        }
    }
}

impl std::error::Error for DbError {}

#[async_trait]
impl AsyncDB for WeirDb {
    type Error = DbError;
    type ColumnType = DefaultColumnType;

    async fn run(&mut self, sql: &str) -> Result<DBOutput<DefaultColumnType>, DbError> {
        let output = self.run_plain(sql).await?;
        if self.check_views
            && let DBOutput::Rows { rows, .. } = &output
            && is_query(sql)
        {
            self.compare_with_view(sql, rows).await?;
        }
        Ok(output)
    }

    async fn shutdown(&mut self) {}

    fn engine_name(&self) -> &str {
        match self.protocol {
            Protocol::Simple => "weir-simple",
            Protocol::Extended => "weir-extended",
        }
    }

    async fn sleep(dur: Duration) {
        tokio::time::sleep(dur).await
    }

    fn error_sql_state(err: &DbError) -> Option<String> {
        err.0.code().map(|c| c.code().to_string())
    }
}

impl WeirDb {
    async fn run_plain(&self, sql: &str) -> Result<DBOutput<DefaultColumnType>, DbError> {
        match self.protocol {
            Protocol::Simple => run_simple(&self.client, sql).await,
            Protocol::Extended => run_extended(&self.client, sql).await,
        }
        .map_err(DbError)
    }

    /// The batch engine checks the incremental one: the same query as a
    /// materialized view must hold the same rows. Queries a view cannot
    /// express (0A000, e.g. ORDER BY or catalog tables) are skipped.
    async fn compare_with_view(&mut self, sql: &str, batch: &[Vec<String>]) -> Result<(), DbError> {
        self.views_created += 1;
        let name = format!("slt_check_{}", self.views_created);
        let create = format!(
            "CREATE MATERIALIZED VIEW {name} AS {}",
            without_order_by(sql)
        );
        match self.client.simple_query(&create).await {
            Ok(_) => {}
            Err(e)
                if e.code()
                    .is_some_and(|c| matches!(c.code(), "0A000" | "42701")) =>
            {
                return Ok(());
            }
            Err(e) => return Err(DbError(e)),
        }
        let viewed = self.run_plain(&format!("SELECT * FROM {name}")).await;
        self.client
            .simple_query(&format!("DROP MATERIALIZED VIEW {name}"))
            .await
            .map_err(DbError)?;
        let DBOutput::Rows {
            rows: mut incremental,
            ..
        } = viewed?
        else {
            return Ok(());
        };
        let mut expected = batch.to_vec();
        expected.sort();
        incremental.sort();
        // An input still growing (a generator source) moves on between the
        // query and the view; only a query that answers the same twice is
        // a fair check.
        if expected != incremental
            && let Ok(DBOutput::Rows {
                rows: mut again, ..
            }) = self.run_plain(sql).await
        {
            again.sort();
            if again != expected {
                return Ok(());
            }
        }
        VIEWS_CHECKED.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        if expected != incremental {
            panic!(
                "materialized view differs from the query\nquery: {sql}\nbatch: {expected:?}\nview:  {incremental:?}"
            );
        }
        Ok(())
    }
}

/// A view's rows have no order: drop a top-level ORDER BY, unless a LIMIT
/// or FETCH FIRST keeps the first rows in that order.
fn without_order_by(sql: &str) -> String {
    use sqlparser::ast::Statement;
    let dialect = sqlparser::dialect::PostgreSqlDialect {};
    match sqlparser::parser::Parser::parse_sql(&dialect, sql).as_deref() {
        Ok([Statement::Query(query)]) if query.limit_clause.is_none() && query.fetch.is_none() => {
            let mut query = query.clone();
            query.order_by = None;
            query.to_string()
        }
        _ => sql.trim().trim_end_matches(';').to_string(),
    }
}

/// Queries compared with their materialized view, for the summary.
static VIEWS_CHECKED: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

fn is_query(sql: &str) -> bool {
    let head = sql.trim_start().to_uppercase();
    head.starts_with("SELECT") || head.starts_with("WITH")
}

async fn run_simple(
    client: &Client,
    sql: &str,
) -> Result<DBOutput<DefaultColumnType>, tokio_postgres::Error> {
    let messages = client.simple_query(sql).await?;
    let mut rows = Vec::new();
    let mut width = None;
    let mut count = 0;
    for message in messages {
        match message {
            SimpleQueryMessage::Row(row) => {
                rows.push((0..row.len()).map(|i| text(row.get(i))).collect::<Vec<_>>());
            }
            SimpleQueryMessage::RowDescription(columns) => width = Some(columns.len()),
            SimpleQueryMessage::CommandComplete(n) => count = n,
            _ => {}
        }
    }
    Ok(match width {
        Some(width) => DBOutput::Rows {
            types: vec![DefaultColumnType::Any; width],
            rows,
        },
        None => DBOutput::StatementComplete(count),
    })
}

fn text(value: Option<&str>) -> String {
    match value {
        None => "NULL".to_string(),
        Some("") => "(empty)".to_string(),
        Some(v) => v.to_string(),
    }
}

async fn run_extended(
    client: &Client,
    sql: &str,
) -> Result<DBOutput<DefaultColumnType>, tokio_postgres::Error> {
    let statement = client.prepare(sql).await?;
    if statement.columns().is_empty() {
        let count = client.execute(&statement, &[]).await?;
        return Ok(DBOutput::StatementComplete(count));
    }
    let rows = client.query(&statement, &[]).await?;
    let formatted = rows
        .iter()
        .map(|row| {
            (0..row.len())
                .map(|i| format_binary(row, i, row.columns()[i].type_()))
                .collect::<Vec<_>>()
        })
        .collect();
    Ok(DBOutput::Rows {
        types: vec![DefaultColumnType::Any; statement.columns().len()],
        rows: formatted,
    })
}

/// Binary values formatted the way PostgreSQL prints them as text.
fn format_binary(row: &tokio_postgres::Row, i: usize, ty: &Type) -> String {
    fn show<T: ToString>(v: Option<T>) -> String {
        v.map_or_else(|| "NULL".to_string(), |v| v.to_string())
    }
    match *ty {
        Type::BOOL => row.get::<_, Option<bool>>(i).map_or_else(
            || "NULL".into(),
            |b| if b { "t".into() } else { "f".into() },
        ),
        Type::CHAR => show(row.get::<_, Option<i8>>(i)),
        Type::INT2 => show(row.get::<_, Option<i16>>(i)),
        Type::INT4 => show(row.get::<_, Option<i32>>(i)),
        Type::INT8 => show(row.get::<_, Option<i64>>(i)),
        Type::OID => show(row.get::<_, Option<u32>>(i)),
        Type::FLOAT4 => show(row.get::<_, Option<f32>>(i).map(|v| text::format_f32(v, 1))),
        Type::FLOAT8 => show(row.get::<_, Option<f64>>(i).map(|v| text::format_f64(v, 1))),
        Type::TIME => show(row.get::<_, Option<chrono::NaiveTime>>(i).map(|t| {
            text::format_time((t - chrono::NaiveTime::MIN).num_microseconds().unwrap_or(0))
        })),
        Type::INTERVAL => show(row.get::<_, Option<Interval>>(i).map(|v| v.0)),
        Type::NUMERIC => show(row.get::<_, Option<rust_decimal::Decimal>>(i)),
        Type::DATE => show(row.get::<_, Option<chrono::NaiveDate>>(i)),
        Type::TIMESTAMP => row.get::<_, Option<chrono::NaiveDateTime>>(i).map_or_else(
            || "NULL".into(),
            |t| trim_fraction(t.format("%Y-%m-%d %H:%M:%S%.6f").to_string()),
        ),
        Type::TIMESTAMPTZ => row
            .get::<_, Option<chrono::DateTime<chrono::Utc>>>(i)
            .map_or_else(
                || "NULL".into(),
                |t| trim_fraction(t.format("%Y-%m-%d %H:%M:%S%.6f").to_string()) + "+00",
            ),
        _ => row
            .try_get::<_, Option<String>>(i)
            .map(|v| text(v.as_deref()))
            .unwrap_or_else(|e| format!("<unsupported type {ty}: {e}>")),
    }
}

/// An interval read from its binary form (microseconds, days, months) and
/// printed as PostgreSQL prints it.
struct Interval(String);

impl<'a> tokio_postgres::types::FromSql<'a> for Interval {
    fn from_sql(_: &Type, raw: &'a [u8]) -> Result<Self, Box<dyn std::error::Error + Sync + Send>> {
        let field = |at: usize, len: usize| raw.get(at..at + len).ok_or("short interval");
        let micros = i64::from_be_bytes(field(0, 8)?.try_into()?);
        let days = i32::from_be_bytes(field(8, 4)?.try_into()?);
        let months = i32::from_be_bytes(field(12, 4)?.try_into()?);
        Ok(Interval(text::format_interval(months, days, micros)))
    }

    fn accepts(ty: &Type) -> bool {
        *ty == Type::INTERVAL
    }
}

fn trim_fraction(s: String) -> String {
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        s
    }
}

fn slt_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            slt_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "slt") {
            out.push(path);
        }
    }
}

/// Whether to check every query against a materialized view (on in CI).
fn check_views() -> bool {
    std::env::var("WEIR_SLT_CHECK_VIEWS").is_ok_and(|v| v != "0")
}

/// Server flags a file asks for on a line `# weir-args: --flag ...`.
fn server_args(path: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    text.lines()
        .find_map(|l| l.strip_prefix("# weir-args:"))
        .map(|args| args.split_whitespace().map(str::to_string).collect())
        .unwrap_or_default()
}

async fn run_file(path: &Path, protocol: Protocol) -> Result<(), String> {
    let server = TestServer::start_with(&server_args(path));
    let connection = server.connection_string();
    let mut runner = sqllogictest::Runner::new(move || {
        let connection = connection.clone();
        async move {
            let (client, conn) = tokio_postgres::connect(&connection, tokio_postgres::NoTls)
                .await
                .map_err(DbError)?;
            tokio::spawn(conn);
            Ok(WeirDb {
                client,
                protocol,
                check_views: protocol == Protocol::Simple && check_views(),
                views_created: 0,
            })
        }
    });
    runner.add_label("weir");
    let result = runner
        .run_file_async(path)
        .await
        .map_err(|e| e.display(true).to_string());
    drop(server);
    result
}

#[tokio::main]
async fn main() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("sql-tests");
    let filter = std::env::args().skip(1).find(|a| !a.starts_with('-'));
    let mut files = Vec::new();
    slt_files(&root, &mut files);
    files.sort();
    files.retain(|f| {
        filter
            .as_ref()
            .is_none_or(|p| f.to_string_lossy().contains(p.as_str()))
    });
    let (mut passed, mut failed) = (0, 0);
    for file in &files {
        let name = file
            .strip_prefix(&root)
            .unwrap_or(file)
            .display()
            .to_string();
        for protocol in [Protocol::Simple, Protocol::Extended] {
            match run_file(file, protocol).await {
                Ok(()) => {
                    passed += 1;
                    println!("ok      {name} ({protocol:?})");
                }
                Err(e) => {
                    failed += 1;
                    println!("FAILED  {name} ({protocol:?})\n{e}");
                }
            }
        }
    }
    let checked = VIEWS_CHECKED.load(std::sync::atomic::Ordering::Relaxed);
    println!("\n{checked} queries were also checked as materialized views");
    println!("sqllogictest: {passed} passed, {failed} failed");
    if failed > 0 || files.is_empty() {
        std::process::exit(1);
    }
}
