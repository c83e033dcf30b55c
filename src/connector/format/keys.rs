//! JSON keys matched to columns ignoring ASCII case, as SQL identifiers
//! are: arrow's reader matches names exactly, so payloads are renamed first,
//! and only those that need it.

use std::ops::Range;

use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::buffer::NullBuffer;
use datafusion::arrow::datatypes::Schema;

/// Renames the keys of a JSON object that match a column only when ASCII case
/// is ignored, since arrow's reader matches names exactly.
///
/// Only payloads that may need it are looked at (see
/// [`Decoder::read_all`](super::decode::Decoder::read_all)).
/// One without an ASCII capital letter cannot hold such a key (when the
/// columns are lower case); the keys of the others are located by a scan
/// that skips over values without parsing them, and only a payload that
/// needs a rename is copied. On a 200-byte message, looking for a capital
/// takes 20-40 ns and scanning the keys 170-350 ns (optimized build).
#[derive(Debug)]
pub(super) struct KeyFolder {
    /// Each column's name as it is written inside a JSON string.
    columns: Vec<Vec<u8>>,
    /// A column name with a capital: any payload may then need a rename.
    capitals: bool,
    /// Fold every payload as it is fed (see
    /// [`Decoder::read_all`](super::decode::Decoder::read_all)).
    pub(super) always: bool,
    /// The key ranges of the last payload scanned.
    keys: Vec<Range<usize>>,
}

impl KeyFolder {
    pub(super) fn new(schema: &Schema) -> KeyFolder {
        let columns: Vec<Vec<u8>> = schema
            .fields()
            .iter()
            .map(|f| json_string_body(f.name()))
            .collect();
        let capitals = columns.iter().any(|c| has_capital(c));
        KeyFolder {
            columns,
            capitals,
            always: false,
            keys: Vec::new(),
        }
    }

    /// Whether a row of `batch` that has a NULL came from a payload with a
    /// key to rename.
    pub(super) fn needed(&mut self, batch: &RecordBatch, payloads: &[&[u8]]) -> bool {
        let nulls = batch.columns().iter().fold(None, |nulls, column| {
            NullBuffer::union(nulls.as_ref(), column.logical_nulls().as_ref())
        });
        let Some(nulls) = nulls else {
            return false;
        };
        nulls
            .iter()
            .zip(payloads)
            .any(|(valid, payload)| !valid && !self.renames(payload).is_empty())
    }

    /// The payload, or a copy of it in `out` with keys renamed.
    pub(super) fn fold<'a>(&mut self, payload: &'a [u8], out: &'a mut Vec<u8>) -> &'a [u8] {
        let renames = self.renames(payload);
        if renames.is_empty() {
            return payload;
        }
        out.clear();
        let mut at = 0;
        for (key, column) in renames {
            out.extend_from_slice(&payload[at..key.start]);
            out.extend_from_slice(&self.columns[column]);
            at = key.end;
        }
        out.extend_from_slice(&payload[at..]);
        out
    }

    /// The keys that match a column only ignoring case, each with its column,
    /// unless that column also has a key of its exact name. Nothing for a
    /// payload that is not an object, which the reader reports.
    fn renames(&mut self, payload: &[u8]) -> Vec<(Range<usize>, usize)> {
        self.keys.clear();
        if !self.capitals && !has_capital(payload) {
            return Vec::new();
        }
        if top_level_keys(payload, &mut self.keys).is_none() {
            return Vec::new();
        }
        let keys: Vec<&[u8]> = self.keys.iter().map(|k| &payload[k.clone()]).collect();
        let exact = |column: &[u8]| keys.contains(&column);
        self.keys
            .iter()
            .zip(&keys)
            .filter(|(_, key)| !exact_column(&self.columns, key))
            .filter_map(|(range, key)| {
                let column = self
                    .columns
                    .iter()
                    .position(|c| c.eq_ignore_ascii_case(key))?;
                (!exact(&self.columns[column])).then(|| (range.clone(), column))
            })
            .collect()
    }
}

fn exact_column(columns: &[Vec<u8>], key: &[u8]) -> bool {
    columns.iter().any(|c| c.as_slice() == key)
}

fn has_capital(bytes: &[u8]) -> bool {
    // Chunked so the compiler can test many bytes at a time.
    bytes.chunks(32).any(|chunk| {
        chunk
            .iter()
            .fold(false, |any, b| any | b.is_ascii_uppercase())
    })
}

/// `name` as it is written between the quotes of a JSON string.
fn json_string_body(name: &str) -> Vec<u8> {
    let quoted = serde_json::to_vec(name).unwrap_or_default();
    quoted
        .get(1..quoted.len().saturating_sub(1))
        .unwrap_or_default()
        .to_vec()
}

/// The ranges of the top-level keys of a JSON object (between their quotes),
/// or None if `json` does not start as an object or ends inside one. Nothing
/// else is checked: the reader does that.
fn top_level_keys(json: &[u8], keys: &mut Vec<Range<usize>>) -> Option<()> {
    let mut depth = 0usize;
    let mut key_next = false;
    let mut at = 0;
    while at < json.len() {
        match json[at] {
            b' ' | b'\t' | b'\n' | b'\r' => {}
            b'{' if depth == 0 => {
                depth = 1;
                key_next = true;
            }
            _ if depth == 0 => return None,
            b'"' => {
                let end = string_end(json, at + 1)?;
                if depth == 1 && key_next {
                    keys.push(at + 1..end);
                    key_next = false;
                }
                at = end;
            }
            b'{' | b'[' => depth += 1,
            b'}' | b']' => {
                depth -= 1;
                if depth == 0 {
                    return Some(());
                }
            }
            b',' if depth == 1 => key_next = true,
            _ => {}
        }
        at += 1;
    }
    None
}

/// The index of the quote that closes the string whose text starts at `at`.
fn string_end(json: &[u8], mut at: usize) -> Option<usize> {
    while at < json.len() {
        match json[at] {
            b'"' => return Some(at),
            b'\\' => at += 2,
            _ => at += 1,
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn top_level_keys_skip_over_values() {
        let json = br#" { "a" : 1, "B\"c":{"x":"}"}, "d":[1,{"e":"]"}], "f":"\\", "g":null } "#;
        let mut keys = Vec::new();
        assert_eq!(top_level_keys(json, &mut keys), Some(()));
        let keys: Vec<&[u8]> = keys.into_iter().map(|k| &json[k]).collect();
        assert_eq!(keys, [&b"a"[..], br#"B\"c"#, b"d", b"f", b"g"]);
        let not_objects = [
            &b"[1]"[..],
            b"",
            b"x{}",
            b"\"x\"{}",
            b"{\"a\":1",
            b"{\"a\":\"1}",
        ];
        for not_an_object in not_objects {
            assert_eq!(top_level_keys(not_an_object, &mut Vec::new()), None);
        }
    }
}
