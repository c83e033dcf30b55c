//! COPY t [(columns)] FROM STDIN, in PostgreSQL's text and CSV formats.
//!
//! The data is gathered while the client sends it and written as one
//! statement when it ends: all rows or none. Text is parsed to strings and
//! cast to the column types with Arrow's cast kernels, so COPY accepts what
//! a SQL cast from text accepts.

use std::io::Cursor;
use std::sync::Arc;

use datafusion::arrow::array::{ArrayRef, RecordBatch, StringBuilder, new_null_array};
use datafusion::arrow::compute::{CastOptions, cast_with_options};
use datafusion::arrow::datatypes::{DataType, Field, Schema};
use datafusion::arrow::util::display::FormatOptions;
use sqlparser::ast;

use crate::error::{Error, Result};
use crate::session::{CopyIn, Engine, Output, Session};
use crate::sql::parser::{ident_name, object_name};
use crate::sql::write;

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

/// Begin a COPY: check the table and options, then ask the client for data.
pub fn start(
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
        return Err(Error::NotSupported(
            "COPY ... TO is not supported yet; use SELECT".into(),
        ));
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
    let name = object_name(table_name)?;
    let table = engine
        .catalog
        .table(&name)
        .ok_or_else(|| Error::UndefinedTable(name.clone()))?;
    let columns = if columns.is_empty() {
        (0..table.def.columns.len()).collect()
    } else {
        columns
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
            .collect::<Result<Vec<_>>>()?
    };
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
    let batches = parse(&copy)?;
    let count = write::insert_batches(&copy.table, &engine.writer, &batches).await?;
    Ok(Output::with_rows("COPY", count))
}

fn parse(copy: &CopyIn) -> Result<Vec<RecordBatch>> {
    let strings = if copy.format.csv {
        parse_csv(copy)?
    } else {
        parse_text(copy)?
    };
    strings
        .iter()
        .map(|columns| to_table_batch(copy, columns))
        .collect()
}

/// Text format: one line per row, fields split on the delimiter, backslash escapes.
fn parse_text(copy: &CopyIn) -> Result<Vec<Vec<ArrayRef>>> {
    let text = std::str::from_utf8(&copy.data)
        .map_err(|e| Error::InvalidInput(format!("COPY data is not valid UTF-8: {e}")))?;
    let width = copy.columns.len();
    let delimiter = copy.format.delimiter as char;
    let mut batches = Vec::new();
    let mut builders = new_builders(width);
    let mut rows = 0;
    for (line_no, line) in text.split('\n').enumerate() {
        let line = line.strip_suffix('\r').unwrap_or(line);
        if line == "\\." || (line.is_empty() && line_no > 0 && rows_remaining_empty(text, line_no))
        {
            break;
        }
        if line_no == 0 && copy.format.header {
            continue;
        }
        let fields: Vec<&str> = line.split(delimiter).collect();
        if fields.len() != width {
            return Err(Error::InvalidInput(format!(
                "COPY line {}: expected {width} columns, found {}",
                line_no + 1,
                fields.len()
            )));
        }
        for (builder, field) in builders.iter_mut().zip(fields) {
            if field == copy.format.null {
                builder.append_null();
            } else {
                builder.append_value(unescape(field));
            }
        }
        rows += 1;
        if rows % BATCH_ROWS == 0 {
            batches.push(finish_builders(&mut builders));
        }
    }
    if rows % BATCH_ROWS != 0 {
        batches.push(finish_builders(&mut builders));
    }
    Ok(batches)
}

/// Only a trailing newline produces an empty last line; anywhere else an empty line is a row.
fn rows_remaining_empty(text: &str, line_no: usize) -> bool {
    text.split('\n')
        .skip(line_no)
        .all(|l| l.trim_end_matches('\r').is_empty())
}

fn unescape(field: &str) -> String {
    if !field.contains('\\') {
        return field.to_string();
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
    out
}

fn new_builders(width: usize) -> Vec<StringBuilder> {
    (0..width).map(|_| StringBuilder::new()).collect()
}

fn finish_builders(builders: &mut [StringBuilder]) -> Vec<ArrayRef> {
    builders
        .iter_mut()
        .map(|b| Arc::new(b.finish()) as ArrayRef)
        .collect()
}

/// CSV format through Arrow's CSV reader, every field read as a string.
fn parse_csv(copy: &CopyIn) -> Result<Vec<Vec<ArrayRef>>> {
    let fields: Vec<Field> = copy
        .columns
        .iter()
        .map(|i| Field::new(format!("c{i}"), DataType::Utf8, true))
        .collect();
    let null = regex_literal(&copy.format.null);
    let reader = datafusion::arrow::csv::ReaderBuilder::new(Arc::new(Schema::new(fields)))
        .with_header(copy.format.header)
        .with_delimiter(copy.format.delimiter)
        .with_batch_size(BATCH_ROWS)
        .with_null_regex(null)
        .build(Cursor::new(csv_body(&copy.data)))
        .map_err(|e| Error::InvalidInput(format!("COPY data: {e}")))?;
    reader
        .map(|batch| {
            batch
                .map(|b| b.columns().to_vec())
                .map_err(|e| Error::InvalidInput(format!("COPY data: {e}")))
        })
        .collect()
}

/// The data up to an end-of-data marker line, if the client sent one.
fn csv_body(data: &[u8]) -> Vec<u8> {
    let text = String::from_utf8_lossy(data);
    match text.find("\n\\.") {
        Some(end) => text[..=end].as_bytes().to_vec(),
        None if text.starts_with("\\.") => Vec::new(),
        None => data.to_vec(),
    }
}

fn regex_literal(null: &str) -> regex::Regex {
    regex::Regex::new(&format!("^{}$", regex::escape(null)))
        .expect("an escaped literal is a valid regex")
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
