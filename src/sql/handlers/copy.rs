//! COPY t [(columns)] FROM STDIN and COPY {t [(columns)] | (query)} TO
//! STDOUT, in PostgreSQL's text and CSV formats.
//!
//! The data is gathered while the client sends it and written as one
//! statement when it ends: all rows or none. Text is parsed to strings and
//! cast to the column types with Arrow's cast kernels, so COPY accepts what
//! a SQL cast from text accepts. Large data is cut at line boundaries into
//! one part a core, parsed and encoded side by side, and written as one.

mod split;

use std::borrow::Cow;
use std::ops::Range;
use std::sync::Arc;

use datafusion::arrow::array::{ArrayRef, RecordBatch, StringBuilder, new_null_array};
use datafusion::arrow::compute::{CastOptions, cast_with_options};
use datafusion::arrow::util::display::FormatOptions;
use sqlparser::ast;

use crate::catalog::{Object, Table};
use crate::error::{Error, Result};
use crate::session::{CopyIn, Engine, Output, Session};
use crate::sql::parser::{ident_name, object_name, parse_query};
use crate::sql::write::NewRows;

/// Rows per batch while parsing.
const BATCH_ROWS: usize = 8192;

#[derive(Debug, Clone)]
pub struct CopyFormat {
    pub csv: bool,
    pub delimiter: u8,
    pub header: bool,
    pub null: String,
}

impl Default for CopyFormat {
    fn default() -> Self {
        CopyFormat {
            csv: false,
            delimiter: b'\t',
            header: false,
            null: "\\N".into(),
        }
    }
}

/// Begin a COPY: check the table and options, then ask the client for data
/// (FROM STDIN) or run the query whose rows go to the client (TO STDOUT).
pub async fn start(
    engine: &Arc<Engine>,
    session: &mut Session,
    statement: &ast::Statement,
) -> Result<Output> {
    let ast::Statement::Copy {
        source,
        to,
        target,
        options,
        legacy_options,
        ..
    } = statement
    else {
        return Err(Error::Internal(
            "COPY handler called for another statement".into(),
        ));
    };
    if *to {
        return copy_to(engine, source, target, options, legacy_options).await;
    }
    if !matches!(target, ast::CopyTarget::Stdin) {
        return Err(Error::NotSupported(
            "COPY FROM reads only STDIN; the server does not open files".into(),
        ));
    }
    let ast::CopySource::Table {
        table_name,
        columns,
    } = source
    else {
        return Err(Error::Syntax("COPY FROM needs a table".into()));
    };
    let (table, columns) = resolve(engine, table_name, columns, false)?;
    let format = copy_format(options, legacy_options)?;
    let count = columns.len();
    session.copy = Some(CopyIn {
        table,
        columns,
        format,
        data: Vec::new(),
    });
    Ok(Output::CopyIn { columns: count })
}

/// The relation a COPY names and the indices of its listed columns (all of
/// them when none are listed). COPY FROM fills only tables; COPY TO also
/// reads views, which in a streaming database are what one exports.
fn resolve(
    engine: &Arc<Engine>,
    table_name: &ast::ObjectName,
    columns: &[ast::Ident],
    views: bool,
) -> Result<(Arc<Table>, Vec<usize>)> {
    let name = object_name(table_name)?;
    let table = match engine.catalog.get(&name) {
        Some(Object::Table(table)) => table,
        Some(object) if views => object.table().clone(),
        Some(_) => {
            return Err(Error::WrongObjectType(format!(
                "cannot copy to view \"{name}\"; COPY FROM fills tables"
            )));
        }
        None => return Err(Error::UndefinedTable(name)),
    };
    if columns.is_empty() {
        let all = (0..table.def.columns.len()).collect();
        return Ok((table, all));
    }
    let indices = columns
        .iter()
        .map(|c| {
            let name = ident_name(c);
            table
                .def
                .columns
                .iter()
                .position(|d| d.name == name)
                .ok_or_else(|| {
                    Error::UndefinedColumn(format!(
                        "column \"{name}\" of relation \"{}\" does not exist",
                        table.def.name
                    ))
                })
        })
        .collect::<Result<Vec<_>>>()?;
    Ok((table, indices))
}

/// `COPY ... TO STDOUT`: the rows are computed like a SELECT's, one
/// consistent snapshot, and the server encodes them as COPY lines.
async fn copy_to(
    engine: &Arc<Engine>,
    source: &ast::CopySource,
    target: &ast::CopyTarget,
    options: &[ast::CopyOption],
    legacy: &[ast::CopyLegacyOption],
) -> Result<Output> {
    if !matches!(target, ast::CopyTarget::Stdout) {
        return Err(Error::NotSupported(
            "COPY TO writes only to STDOUT; the server does not write files".into(),
        ));
    }
    let format = copy_format(options, legacy)?;
    let query = match source {
        ast::CopySource::Query(query) if reads_only(query) => query.clone(),
        ast::CopySource::Query(_) => {
            return Err(Error::NotSupported(
                "COPY (query) TO STDOUT takes a query that only reads, such as SELECT".into(),
            ));
        }
        ast::CopySource::Table {
            table_name,
            columns,
        } => {
            let (table, indices) = resolve(engine, table_name, columns, true)?;
            let list: Vec<String> = indices
                .iter()
                .map(|&i| ast::Ident::with_quote('"', &table.def.columns[i].name).to_string())
                .collect();
            let name = ast::Ident::with_quote('"', &table.def.name);
            parse_query(&format!("SELECT {} FROM {name}", list.join(", ")))?
        }
    };
    match super::query::run(engine, &ast::Statement::Query(query), None).await? {
        Output::Rows {
            schema, batches, ..
        } => Ok(Output::CopyOutRows {
            schema,
            batches,
            format,
        }),
        _ => Err(Error::Syntax(
            "COPY (query) TO STDOUT needs a query that returns rows".into(),
        )),
    }
}

fn reads_only(query: &ast::Query) -> bool {
    !matches!(
        *query.body,
        ast::SetExpr::Insert(_) | ast::SetExpr::Update(_) | ast::SetExpr::Delete(_)
    )
}

fn copy_format(
    options: &[ast::CopyOption],
    legacy: &[ast::CopyLegacyOption],
) -> Result<CopyFormat> {
    let mut format = CopyFormat::default();
    let mut delimiter = None;
    let mut null = None;
    for option in options {
        match option {
            ast::CopyOption::Format(f) => match f.value.to_lowercase().as_str() {
                "csv" => format.csv = true,
                "text" => format.csv = false,
                other => {
                    return Err(Error::NotSupported(format!(
                        "COPY format \"{other}\" is not supported"
                    )));
                }
            },
            ast::CopyOption::Header(h) => format.header = *h,
            ast::CopyOption::Delimiter(d) => delimiter = Some(*d),
            ast::CopyOption::Null(n) => null = Some(n.clone()),
            other => {
                return Err(Error::NotSupported(format!(
                    "COPY option {other} is not supported"
                )));
            }
        }
    }
    for option in legacy {
        match option {
            ast::CopyLegacyOption::Csv(_) => format.csv = true,
            ast::CopyLegacyOption::Delimiter(d) => delimiter = Some(*d),
            ast::CopyLegacyOption::Null(n) => null = Some(n.clone()),
            ast::CopyLegacyOption::Header => format.header = true,
            other => {
                return Err(Error::NotSupported(format!(
                    "COPY option {other} is not supported"
                )));
            }
        }
    }
    if format.csv {
        format.delimiter = b',';
        format.null = String::new();
    }
    if let Some(d) = delimiter {
        if !d.is_ascii() {
            return Err(Error::InvalidParameter(
                "COPY delimiter must be a single one-byte character".into(),
            ));
        }
        format.delimiter = d as u8;
    }
    if let Some(n) = null {
        format.null = n;
    }
    Ok(format)
}

/// The client sent all its data: parse it and write it as one statement.
pub async fn finish(engine: &Arc<Engine>, copy: CopyIn) -> Result<Output> {
    let rows = encode(&copy)?;
    let count = rows.write(&copy.table, &engine.writer).await?;
    Ok(Output::with_rows("COPY", count))
}

fn encode(copy: &CopyIn) -> Result<NewRows> {
    let parts = split::parts(&copy.data, copy.format.csv, cores());
    if parts.len() > 1
        && let Some(rows) = encode_parts(copy, &parts)
    {
        return Ok(rows);
    }
    // Serially, also when a part failed: then this names the first error
    // with its line, as PostgreSQL would.
    let parsed = parse(copy, &copy.data, true)?;
    NewRows::encode(&copy.table, &parsed.batches)
}

fn cores() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// The parts parsed and encoded on threads of their own, joined in order
/// up to the one that ends the data; `None` when any part failed.
fn encode_parts(copy: &CopyIn, parts: &[Range<usize>]) -> Option<NewRows> {
    let encode_part = |(index, range): (usize, &Range<usize>)| {
        let parsed = parse(copy, &copy.data[range.clone()], index == 0)?;
        let rows = NewRows::encode(&copy.table, &parsed.batches)?;
        Ok::<_, Error>((rows, parsed.ended))
    };
    let outcomes: Vec<Result<(NewRows, bool)>> = std::thread::scope(|scope| {
        let mut rest = parts.iter().enumerate();
        let first = rest.next()?;
        let handles: Vec<_> = rest
            .map(|part| scope.spawn(move || encode_part(part)))
            .collect();
        let mut outcomes = vec![encode_part(first)];
        for handle in handles {
            outcomes.push(handle.join().ok()?);
        }
        Some(outcomes)
    })?;
    let mut joined = Vec::with_capacity(outcomes.len());
    for outcome in outcomes {
        let (rows, ended) = outcome.ok()?;
        joined.push(rows);
        if ended {
            break;
        }
    }
    NewRows::join(joined).ok().flatten()
}

/// Rows parsed from some of the data, and whether a line `\.` ended the
/// data there.
struct Parsed {
    batches: Vec<RecordBatch>,
    ended: bool,
}

fn parse(copy: &CopyIn, data: &[u8], first: bool) -> Result<Parsed> {
    let (strings, ended) = if copy.format.csv {
        parse_csv(copy, data, first)?
    } else {
        parse_text(copy, data, first)?
    };
    let batches = strings
        .iter()
        .map(|columns| to_table_batch(copy, columns))
        .collect::<Result<_>>()?;
    Ok(Parsed { batches, ended })
}

/// Text format: one line per row, fields split on the delimiter, backslash
/// escapes. Only the `first` part of the data may start with a header.
fn parse_text(copy: &CopyIn, data: &[u8], first: bool) -> Result<(Vec<Vec<ArrayRef>>, bool)> {
    let text = std::str::from_utf8(data)
        .map_err(|e| Error::InvalidInput(format!("COPY data is not valid UTF-8: {e}")))?;
    let width = copy.columns.len();
    let delimiter = copy.format.delimiter as char;
    let mut columns = Columns::new(width);
    let mut fields: Vec<&str> = Vec::with_capacity(width);
    for (line_no, line) in text.split('\n').enumerate() {
        let line = line.strip_suffix('\r').unwrap_or(line);
        if line == "\\." {
            return Ok((columns.finish(), true));
        }
        if line.is_empty() && line_no > 0 && rows_remaining_empty(text, line_no) {
            break;
        }
        if line_no == 0 && first && copy.format.header {
            continue;
        }
        fields.clear();
        fields.extend(line.split(delimiter));
        if fields.len() != width {
            return Err(Error::InvalidInput(format!(
                "COPY line {}: expected {width} columns, found {}",
                line_no + 1,
                fields.len()
            )));
        }
        columns.push(
            fields
                .iter()
                .map(|f| (*f != copy.format.null).then(|| unescape(f))),
        );
    }
    Ok((columns.finish(), false))
}

/// Only a trailing newline produces an empty last line; anywhere else an empty line is a row.
fn rows_remaining_empty(text: &str, line_no: usize) -> bool {
    text.split('\n')
        .skip(line_no)
        .all(|l| l.trim_end_matches('\r').is_empty())
}

fn unescape(field: &str) -> Cow<'_, str> {
    if !field.contains('\\') {
        return Cow::Borrowed(field);
    }
    let mut out = String::with_capacity(field.len());
    let mut chars = field.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('t') => out.push('\t'),
            Some('n') => out.push('\n'),
            Some('r') => out.push('\r'),
            Some('b') => out.push('\u{8}'),
            Some('f') => out.push('\u{c}'),
            Some('v') => out.push('\u{b}'),
            Some(other) => out.push(other),
            None => out.push('\\'),
        }
    }
    Cow::Owned(out)
}

/// Parsed fields gathered into string columns, a batch every BATCH_ROWS.
struct Columns {
    builders: Vec<StringBuilder>,
    rows: usize,
    batches: Vec<Vec<ArrayRef>>,
}

impl Columns {
    fn new(width: usize) -> Columns {
        Columns {
            builders: (0..width).map(|_| StringBuilder::new()).collect(),
            rows: 0,
            batches: Vec::new(),
        }
    }

    fn push<S: AsRef<str>>(&mut self, fields: impl Iterator<Item = Option<S>>) {
        for (builder, field) in self.builders.iter_mut().zip(fields) {
            builder.append_option(field);
        }
        self.rows += 1;
        if self.rows.is_multiple_of(BATCH_ROWS) {
            self.cut();
        }
    }

    fn cut(&mut self) {
        let batch = self
            .builders
            .iter_mut()
            .map(|b| Arc::new(b.finish()) as ArrayRef)
            .collect();
        self.batches.push(batch);
    }

    fn finish(mut self) -> Vec<Vec<ArrayRef>> {
        if !self.rows.is_multiple_of(BATCH_ROWS) {
            self.cut();
        }
        self.batches
    }
}

/// CSV format: an unquoted field equal to the NULL string is NULL.
fn parse_csv(copy: &CopyIn, data: &[u8], first: bool) -> Result<(Vec<Vec<ArrayRef>>, bool)> {
    let width = copy.columns.len();
    let skip = usize::from(first && copy.format.header);
    let (records, ended) = super::csv::records(data, copy.format.delimiter)?;
    let mut columns = Columns::new(width);
    for (line, record) in records.into_iter().enumerate().skip(skip) {
        if record.len() != width {
            return Err(Error::InvalidInput(format!(
                "COPY record {}: expected {width} columns, found {}",
                line + 1,
                record.len()
            )));
        }
        columns.push(
            record
                .into_iter()
                .map(|f| (f.quoted || f.text != copy.format.null).then_some(f.text)),
        );
    }
    Ok((columns.finish(), ended))
}

/// Strings in data order into a batch in table order, cast to the column types.
fn to_table_batch(copy: &CopyIn, strings: &[ArrayRef]) -> Result<RecordBatch> {
    let table = &copy.table;
    let rows = strings.first().map_or(0, |a| a.len());
    let options = CastOptions {
        safe: false,
        format_options: FormatOptions::default(),
    };
    let mut columns: Vec<ArrayRef> = table
        .schema
        .fields()
        .iter()
        .map(|f| new_null_array(f.data_type(), rows))
        .collect();
    for (data_index, table_index) in copy.columns.iter().enumerate() {
        let field = table.schema.field(*table_index);
        columns[*table_index] =
            cast_with_options(&strings[data_index], field.data_type(), &options).map_err(|e| {
                Error::InvalidInput(format!(
                    "invalid input for column \"{}\" of type {}: {e}",
                    field.name(),
                    table.def.columns[*table_index].sql_type
                ))
            })?;
    }
    Ok(RecordBatch::try_new(
        table.nullable_schema.clone(),
        columns,
    )?)
}
