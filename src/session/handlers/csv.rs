//! PostgreSQL's CSV format for COPY FROM. It differs from the CSV most
//! readers know in one way that matters: an unquoted field equal to the
//! NULL string is NULL, while the same text in quotes is a value (so `,,`
//! is NULL and `,"",` the empty string). Readers that drop the quoting
//! cannot tell the two apart.

use crate::error::{Error, Result};

/// One field of a record: its text, and whether any of it was quoted.
pub struct Field {
    pub text: String,
    pub quoted: bool,
}

/// Records of `data`, split at unquoted line breaks, and whether a line
/// `\.` alone ended the data before its end.
pub fn records(data: &[u8], delimiter: u8) -> Result<(Vec<Vec<Field>>, bool)> {
    let text = std::str::from_utf8(data)
        .map_err(|e| Error::InvalidInput(format!("COPY data is not valid UTF-8: {e}")))?;
    let mut records = Vec::new();
    let mut reader = Reader {
        bytes: text.as_bytes(),
        at: 0,
        delimiter,
    };
    while let Some(record) = reader.record(records.len() + 1)? {
        records.push(record);
    }
    Ok((records, reader.at < reader.bytes.len()))
}

struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
    delimiter: u8,
}

impl Reader<'_> {
    fn record(&mut self, line: usize) -> Result<Option<Vec<Field>>> {
        let rest = &self.bytes[self.at..];
        if rest.is_empty() || rest.starts_with(b"\\.\n") || rest == b"\\." || rest == b"\\.\r\n" {
            return Ok(None);
        }
        let mut fields = Vec::new();
        loop {
            let (field, end) = self.field(line)?;
            fields.push(field);
            match end {
                End::Delimiter => continue,
                End::Line => return Ok(Some(fields)),
            }
        }
    }

    fn field(&mut self, line: usize) -> Result<(Field, End)> {
        let mut text = Vec::new();
        let mut quoted = false;
        let mut in_quotes = false;
        while let Some(&byte) = self.bytes.get(self.at) {
            self.at += 1;
            match byte {
                b'"' if in_quotes && self.bytes.get(self.at) == Some(&b'"') => {
                    self.at += 1;
                    text.push(b'"');
                }
                b'"' => {
                    in_quotes = !in_quotes;
                    quoted = true;
                }
                _ if in_quotes => text.push(byte),
                b if b == self.delimiter => return Ok((field(text, quoted), End::Delimiter)),
                b'\n' => return Ok((field(text, quoted), End::Line)),
                b'\r' if self.bytes.get(self.at) == Some(&b'\n') => {}
                _ => text.push(byte),
            }
        }
        if in_quotes {
            return Err(Error::InvalidInput(format!(
                "COPY record {line}: unterminated CSV quoted field"
            )));
        }
        Ok((field(text, quoted), End::Line))
    }
}

enum End {
    Delimiter,
    Line,
}

fn field(text: Vec<u8>, quoted: bool) -> Field {
    Field {
        // The input was valid UTF-8 and splits fell on ASCII bytes.
        text: String::from_utf8(text).unwrap_or_default(),
        quoted,
    }
}

#[cfg(test)]
mod tests {
    use super::records;

    fn read(data: &str) -> Vec<Vec<(String, bool)>> {
        records(data.as_bytes(), b',')
            .expect("valid")
            .0
            .into_iter()
            .map(|r| r.into_iter().map(|f| (f.text, f.quoted)).collect())
            .collect()
    }

    #[test]
    fn quotes_mark_values_and_keep_delimiters_and_line_breaks() {
        let rows =
            read("1,,\"\"\n2,\"a,b\",\"say \"\"hi\"\"\"\r\n3,\"two\nlines\",x\n\\.\nignored\n");
        assert_eq!(rows.len(), 3);
        assert_eq!(rows[0][1], (String::new(), false));
        assert_eq!(rows[0][2], (String::new(), true));
        assert_eq!(rows[1][1].0, "a,b");
        assert_eq!(rows[1][2].0, "say \"hi\"");
        assert_eq!(rows[2][1].0, "two\nlines");
    }

    #[test]
    fn an_open_quote_at_the_end_is_an_error() {
        assert!(records(b"1,\"open\n", b',').is_err());
    }
}
