//! COPY t [(columns)] FROM STDIN and COPY {t [(columns)] | (query)} TO
//! STDOUT, in PostgreSQL's text and CSV formats.
//!
//! The data is written as one statement when it ends: all rows or none.
//! Text is parsed to strings and cast to the column types with Arrow's cast
//! kernels, so COPY accepts what a SQL cast from text accepts.
//!
//! Data that fits in one part ([`PART_BYTES`]) is gathered, cut at line
//! boundaries into one part a core, parsed and encoded side by side, and
//! written as one request. Larger data is cut into parts while it arrives;
//! a loader (`copy/loader.rs`) parses and encodes the parts on a thread a
//! core and appends them in order to a stage on disk, and the writer
//! commits the stage at the end (`log/writer/bulk.rs`). Memory then holds
//! a few parts, whatever the size of the data.

mod columns;
mod loader;
mod split;
mod timestamps;

pub use loader::Loader;

use self::columns::{Columns, Kind};
use super::csv::Records;

use std::borrow::Cow;
use std::ops::Range;
use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, RecordBatch, StringArray, new_null_array};
use datafusion::arrow::compute::{CastOptions, cast_with_options};
use datafusion::arrow::datatypes::DataType;
use datafusion::arrow::util::display::FormatOptions;
use sqlparser::ast;

use crate::catalog::{Object, Table};
use crate::error::{Error, Result};
use crate::session::{CopyIn, Engine, Output, Session};
use crate::sql::parser::{ident_name, object_name, parse_query};
use crate::sql::write::NewRows;

/// Rows per batch while parsing.
const BATCH_ROWS: usize = 8192;

/// Data gathered before a part is cut off and handed to the loader: a few
/// MiB bounds memory and amortises what each part costs.
pub const PART_BYTES: usize = 4 << 20;

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
        loader: None,
        next_cut: PART_BYTES,
        deadline: session
            .statement_timeout()
            .map(|limit| std::time::Instant::now() + limit),
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
    let output = super::query::run(engine, &ast::Statement::Query(query), None).await?;
    match output {
        Output::Stream { schema, rows, .. } => Ok(Output::CopyOutRows {
            schema,
            rows,
            format,
        }),
        Output::Rows {
            schema, batches, ..
        } => {
            let batches = futures::stream::iter(batches.into_iter().map(Ok));
            let rows = datafusion::physical_plan::stream::RecordBatchStreamAdapter::new(
                schema.clone(),
                batches,
            );
            Ok(Output::CopyOutRows {
                schema,
                rows: crate::session::RowStream(Box::pin(rows)),
                format,
            })
        }
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

/// What parsing needs of a COPY, shared with its loader thread.
#[derive(Debug, Clone)]
struct Layout {
    table: Arc<Table>,
    columns: Vec<usize>,
    format: CopyFormat,
}

impl Layout {
    fn of(copy: &CopyIn) -> Layout {
        Layout {
            table: copy.table.clone(),
            columns: copy.columns.clone(),
            format: copy.format.clone(),
        }
    }
}

/// Data from the client: once a part's worth has arrived, cut it off at
/// the last line boundary and hand it to the loader, started on the first.
pub async fn receive(engine: &Arc<Engine>, copy: &mut CopyIn, bytes: &[u8]) -> Result<()> {
    check_deadline(copy)?;
    copy.data.extend_from_slice(bytes);
    if copy.data.len() < copy.next_cut {
        return Ok(());
    }
    let Some(cut) = split::last_boundary(&copy.data, copy.format.csv) else {
        // One record longer than a part: look again once it may have ended.
        copy.next_cut = copy.data.len() * 2;
        return Ok(());
    };
    copy.next_cut = PART_BYTES;
    let mut rest = Vec::with_capacity(PART_BYTES + PART_BYTES / 4);
    rest.extend_from_slice(&copy.data[cut..]);
    copy.data.truncate(cut);
    let part = std::mem::replace(&mut copy.data, rest);
    let loader = match &mut copy.loader {
        Some(loader) => loader,
        None => copy.loader.insert(Loader::start(engine, Layout::of(copy))?),
    };
    loader.send(part).await;
    Ok(())
}

/// A COPY's statement timeout runs while the client sends its data.
fn check_deadline(copy: &CopyIn) -> Result<()> {
    match copy.deadline {
        Some(deadline) if std::time::Instant::now() >= deadline => Err(Error::StatementTimeout),
        _ => Ok(()),
    }
}

/// The client sent all its data: write it as one statement.
pub async fn finish(engine: &Arc<Engine>, mut copy: CopyIn) -> Result<Output> {
    check_deadline(&copy)?;
    let Some(mut loader) = copy.loader.take() else {
        let rows = encode(&Layout::of(&copy), &copy.data)?;
        let count = rows.write(&copy.table, &engine.writer).await?;
        return Ok(Output::with_rows("COPY", count));
    };
    if !copy.data.is_empty() {
        loader.send(std::mem::take(&mut copy.data)).await;
    }
    let stage = loader.finish().await?;
    let count = engine
        .writer
        .commit_stage(copy.table.target(), stage)
        .await?;
    Ok(Output::with_rows("COPY", count))
}

fn encode(copy: &Layout, data: &[u8]) -> Result<NewRows> {
    let parts = split::parts(data, copy.format.csv, cores());
    if parts.len() > 1
        && let Some(rows) = encode_parts(copy, data, &parts)
    {
        return Ok(rows);
    }
    // Serially, also when a part failed: then this names the first error
    // with its line, as PostgreSQL would.
    let parsed = parse(copy, data, true, 0)?;
    NewRows::encode(&copy.table, &parsed.batches)
}

fn cores() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// The parts parsed and encoded on threads of their own, joined in order
/// up to the one that ends the data; `None` when any part failed.
fn encode_parts(copy: &Layout, data: &[u8], parts: &[Range<usize>]) -> Option<NewRows> {
    let encode_part = |(index, range): (usize, &Range<usize>)| {
        let parsed = parse(copy, &data[range.clone()], index == 0, 0)?;
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

/// Rows parsed from some of the data, whether a line `\.` ended the data
/// there, and the lines (CSV: records) the data holds.
struct Parsed {
    batches: Vec<RecordBatch>,
    ended: bool,
    lines: usize,
}

/// Parse `data`, which follows `before` lines of the COPY's data: errors
/// name lines of the whole data.
fn parse(copy: &Layout, data: &[u8], first: bool, before: usize) -> Result<Parsed> {
    let (strings, ended, lines) = if copy.format.csv {
        parse_csv(copy, data, first, before)?
    } else {
        let (strings, ended) = parse_text(copy, data, first, before)?;
        (strings, ended, memchr::memchr_iter(b'\n', data).count())
    };
    // The line of each batch's first row: a header takes a line.
    let header = usize::from(first && copy.format.header);
    let batches = strings
        .iter()
        .enumerate()
        .map(|(i, columns)| {
            let line = before + header + i * BATCH_ROWS + 1;
            to_table_batch(copy, columns, line)
        })
        .collect::<Result<_>>()?;
    Ok(Parsed {
        batches,
        ended,
        lines,
    })
}

/// Text format: one line per row, fields split on the delimiter, backslash
/// escapes. Only the `first` part of the data may start with a header.
fn parse_text(
    copy: &Layout,
    data: &[u8],
    first: bool,
    before: usize,
) -> Result<(Vec<Vec<ArrayRef>>, bool)> {
    let text = std::str::from_utf8(data)
        .map_err(|e| Error::InvalidInput(format!("COPY data is not valid UTF-8: {e}")))?;
    let width = copy.columns.len();
    let delimiter = copy.format.delimiter as char;
    let mut columns = Columns::text(width);
    let mut batches = Vec::new();
    let mut fields: Vec<&str> = Vec::with_capacity(width);
    for (line_no, line) in text.split('\n').enumerate() {
        let line = line.strip_suffix('\r').unwrap_or(line);
        if line == "\\." {
            return Ok((columns.finish_text(batches), true));
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
                before + line_no + 1,
                fields.len()
            )));
        }
        columns.push(
            fields
                .iter()
                .map(|f| (*f != copy.format.null).then(|| unescape(f))),
        );
        if columns.rows() == BATCH_ROWS {
            batches.extend(columns.take());
        }
    }
    Ok((columns.finish_text(batches), false))
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

/// CSV format: an unquoted field equal to the NULL string is NULL.
fn parse_csv(
    copy: &Layout,
    data: &[u8],
    first: bool,
    before: usize,
) -> Result<(Vec<Vec<ArrayRef>>, bool, usize)> {
    let kinds = copy
        .columns
        .iter()
        .map(|i| Kind::of(copy.table.schema.field(*i).data_type()))
        .collect();
    let mut columns = Columns::new(kinds);
    let mut records = Records::new(data, copy.format.delimiter)?;
    let mut fields = Vec::with_capacity(copy.columns.len());
    let mut batches = Vec::new();
    let mut lines = 0;
    if first && copy.format.header && records.next_into(&mut fields)? {
        lines += 1;
    }
    loop {
        let start = records.position();
        let more = read_batch(
            copy,
            &mut records,
            &mut fields,
            &mut columns,
            &mut lines,
            before,
        )?;
        if columns.rows() > 0 {
            match columns.take() {
                Some(batch) => batches.push(batch),
                None => batches.push(read_as_text(copy, &data[start..records.position()])?),
            }
        }
        if !more {
            return Ok((batches, records.ended_early(), lines));
        }
    }
}

/// Records into `columns` until they hold a batch; false once the data
/// has ended. `lines` counts the records read, for errors.
fn read_batch<'a>(
    copy: &Layout,
    records: &mut Records<'a>,
    fields: &mut Vec<super::csv::Field<'a>>,
    columns: &mut Columns,
    lines: &mut usize,
    before: usize,
) -> Result<bool> {
    let width = copy.columns.len();
    while columns.rows() < BATCH_ROWS {
        if !records.next_into(fields)? {
            return Ok(false);
        }
        *lines += 1;
        if fields.len() != width {
            return Err(Error::InvalidInput(format!(
                "COPY record {}: expected {width} columns, found {}",
                before + *lines,
                fields.len()
            )));
        }
        columns.push(
            fields
                .drain(..)
                .map(|f| (f.quoted || f.text != copy.format.null).then_some(f.text)),
        );
    }
    Ok(true)
}

/// One batch's records read again with every column as text, for the
/// casts to read and, where a value is wrong, to name it.
fn read_as_text(copy: &Layout, data: &[u8]) -> Result<Vec<ArrayRef>> {
    let mut columns = Columns::text(copy.columns.len());
    let mut records = Records::new(data, copy.format.delimiter)?;
    let mut fields = Vec::with_capacity(copy.columns.len());
    read_batch(copy, &mut records, &mut fields, &mut columns, &mut 0, 0)?;
    Ok(columns.take().unwrap_or_default())
}

/// Strings in data order into a batch in table order, cast to the column
/// types; `line` is the line of the batch's first row, for errors.
fn to_table_batch(copy: &Layout, strings: &[ArrayRef], line: usize) -> Result<RecordBatch> {
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
        if let Some(parsed) = canonical_timestamps(&strings[data_index], field.data_type()) {
            columns[*table_index] = parsed;
            continue;
        }
        columns[*table_index] =
            cast_with_options(&strings[data_index], field.data_type(), &options).map_err(|e| {
                let row = first_uncast(&strings[data_index], field.data_type()).unwrap_or(0);
                Error::InvalidInput(format!(
                    "COPY line {}: invalid input for column \"{}\" of type {}: {e}",
                    line + row,
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

/// A TIMESTAMP column whose values all have the canonical shape, read by
/// the fast path; `None` sends it to the general cast.
fn canonical_timestamps(strings: &ArrayRef, to: &DataType) -> Option<ArrayRef> {
    let strings = strings.as_any().downcast_ref::<StringArray>()?;
    timestamps::parse_column(strings, to)
}

/// The first value of `strings` that does not cast to `to`: a lenient
/// cast leaves it NULL. Only run once a strict cast failed.
fn first_uncast(strings: &ArrayRef, to: &DataType) -> Option<usize> {
    let lenient = CastOptions {
        safe: true,
        format_options: FormatOptions::default(),
    };
    let cast = cast_with_options(strings, to, &lenient).ok()?;
    (0..strings.len()).find(|&i| strings.is_valid(i) && cast.is_null(i))
}
