//! PostgreSQL's CSV format for COPY FROM. It differs from the CSV most
//! readers know in one way that matters: an unquoted field equal to the
//! NULL string is NULL, while the same text in quotes is a value (so `,,`
//! is NULL and `,"",` the empty string). Readers that drop the quoting
//! cannot tell the two apart.

use std::borrow::Cow;

use crate::error::{Error, Result};

/// One field of a record: its text, and whether any of it was quoted.
pub struct Field<'a> {
    /// Borrowed from the data unless quotes had to be taken out.
    pub text: Cow<'a, str>,
    pub quoted: bool,
}

/// The records of COPY data, split at unquoted line breaks.
pub struct Records<'a> {
    text: &'a str,
    at: usize,
    delimiter: u8,
    read: usize,
    /// The delimiters, line breaks and quotes after `base`, found a block
    /// of the data at a time: most fields are short, and a search started
    /// for each of them would cost more than the field.
    stops: memchr::Memchr3<'a>,
    base: usize,
}

impl<'a> Records<'a> {
    pub fn new(data: &'a [u8], delimiter: u8) -> Result<Records<'a>> {
        let text = std::str::from_utf8(data)
            .map_err(|e| Error::InvalidInput(format!("COPY data is not valid UTF-8: {e}")))?;
        Ok(Records {
            text,
            at: 0,
            delimiter,
            read: 0,
            stops: memchr::memchr3_iter(delimiter, b'\n', b'"', data),
            base: 0,
        })
    }

    /// The next record's fields, in place of what `fields` held; false at
    /// the end of the data or at a line `\.` alone.
    pub fn next_into(&mut self, fields: &mut Vec<Field<'a>>) -> Result<bool> {
        fields.clear();
        let rest = &self.text.as_bytes()[self.at..];
        if rest.is_empty() || rest.starts_with(b"\\.\n") || rest == b"\\." || rest == b"\\.\r\n" {
            return Ok(false);
        }
        self.read += 1;
        loop {
            let (field, end) = self.field()?;
            fields.push(field);
            if let End::Line = end {
                return Ok(true);
            }
        }
    }

    /// Bytes of the data read so far: where the next record starts.
    pub fn position(&self) -> usize {
        self.at
    }

    /// Whether a line `\.` ended the data before its end.
    pub fn ended_early(&self) -> bool {
        self.at < self.text.len()
    }

    /// A field without quotes is a slice of the data; only a quoted one is
    /// copied, to take its quotes out.
    fn field(&mut self) -> Result<(Field<'a>, End)> {
        let bytes = self.text.as_bytes();
        let stop = self.stops.next().map(|i| self.base + i);
        let (len, next, end) = match stop {
            Some(i) if bytes[i] == b'"' => {
                let field = self.quoted_field();
                // The search goes on after the field's closing quote.
                self.base = self.at.min(bytes.len());
                self.stops = memchr::memchr3_iter(self.delimiter, b'\n', b'"', &bytes[self.base..]);
                return field;
            }
            Some(i) if bytes[i] == b'\n' => {
                let len = if i > self.at && bytes[i - 1] == b'\r' {
                    i - 1 - self.at
                } else {
                    i - self.at
                };
                (len, i + 1 - self.at, End::Line)
            }
            Some(i) => (i - self.at, i + 1 - self.at, End::Delimiter),
            None => (bytes.len() - self.at, bytes.len() - self.at, End::Line),
        };
        // The stops are ASCII, so the slice falls on character boundaries.
        let text = &self.text[self.at..self.at + len];
        self.at += next;
        let field = Field {
            text: Cow::Borrowed(text),
            quoted: false,
        };
        Ok((field, end))
    }

    fn quoted_field(&mut self) -> Result<(Field<'a>, End)> {
        let bytes = self.text.as_bytes();
        let mut text = Vec::new();
        let mut in_quotes = false;
        while let Some(&byte) = bytes.get(self.at) {
            self.at += 1;
            match byte {
                b'"' if in_quotes && bytes.get(self.at) == Some(&b'"') => {
                    self.at += 1;
                    text.push(b'"');
                }
                b'"' => in_quotes = !in_quotes,
                _ if in_quotes => text.push(byte),
                b if b == self.delimiter => return Ok((quoted(text), End::Delimiter)),
                b'\n' => return Ok((quoted(text), End::Line)),
                b'\r' if bytes.get(self.at) == Some(&b'\n') => {}
                _ => text.push(byte),
            }
        }
        if in_quotes {
            return Err(Error::InvalidInput(format!(
                "COPY record {}: unterminated CSV quoted field",
                self.read
            )));
        }
        Ok((quoted(text), End::Line))
    }
}

enum End {
    Delimiter,
    Line,
}

fn quoted(text: Vec<u8>) -> Field<'static> {
    Field {
        // The input was valid UTF-8 and splits fell on ASCII bytes.
        text: Cow::Owned(String::from_utf8(text).unwrap_or_default()),
        quoted: true,
    }
}

#[cfg(test)]
mod tests {
    use super::Records;

    fn read(data: &str) -> Vec<Vec<(String, bool)>> {
        let mut records = Records::new(data.as_bytes(), b',').expect("valid");
        let mut fields = Vec::new();
        let mut rows = Vec::new();
        while records.next_into(&mut fields).expect("valid") {
            rows.push(
                fields
                    .iter()
                    .map(|f| (f.text.to_string(), f.quoted))
                    .collect(),
            );
        }
        rows
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
        let mut records = Records::new(b"1,\"open\n", b',').expect("valid");
        assert!(records.next_into(&mut Vec::new()).is_err());
    }

    #[test]
    fn line_ends_and_the_last_line_without_one() {
        let rows = read("a,b\r\nc,\r\n,d");
        assert_eq!(rows.len(), 3);
        assert_eq!(rows[0][1].0, "b");
        assert_eq!(rows[1][1], (String::new(), false));
        assert_eq!(rows[2][0], (String::new(), false));
        assert_eq!(rows[2][1].0, "d");
    }
}
