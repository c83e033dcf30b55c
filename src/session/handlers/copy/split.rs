//! Where COPY data may be cut into parts that parse alone and together
//! read exactly as the whole does.

use std::ops::Range;

/// Data below this size stays whole: a thread per part costs more than
/// parsing it.
const MIN_BYTES: usize = 1 << 20;

/// Up to `count` parts of about equal size, in order, covering `data`.
pub fn parts(data: &[u8], csv: bool, count: usize) -> Vec<Range<usize>> {
    if data.len() < MIN_BYTES {
        return std::iter::once(0..data.len()).collect();
    }
    cut(data, csv, count)
}

fn cut(data: &[u8], csv: bool, count: usize) -> Vec<Range<usize>> {
    let mut starts = vec![0];
    let mut quotes = Quotes::default();
    for i in 1..count {
        let target = data.len() / count * i;
        let from = target.max(starts.last().copied().unwrap_or(0));
        let boundary = if csv {
            quotes.advance(data, from);
            quotes.boundary(data)
        } else {
            text_boundary(data, from)
        };
        match boundary {
            Some(start) => starts.push(start),
            None => break,
        }
    }
    let ends = starts.iter().skip(1).copied().chain([data.len()]);
    starts
        .iter()
        .copied()
        .zip(ends)
        .map(|(s, e)| s..e)
        .collect()
}

/// Where the data received so far may end a part: the start of its last
/// complete line (CSV: record) that the next part can begin with, by the
/// same rules as [`parts`]; `None` when there is none yet.
pub fn last_boundary(data: &[u8], csv: bool) -> Option<usize> {
    if csv {
        // Whether a line break is quoted depends on every quote before it.
        let mut quotes = Quotes::default();
        let mut last = None;
        while let Some(start) = quotes.boundary(data) {
            last = Some(start);
        }
        return last;
    }
    memchr::memrchr_iter(b'\n', data).find_map(|newline| text_line_after(data, newline))
}

/// The start of the line after the line break at `newline`, when both it
/// and the line the break ends are non-empty.
fn text_line_after(data: &[u8], newline: usize) -> Option<usize> {
    let start = newline + 1;
    let next = *data.get(start)?;
    let line_end = match newline.checked_sub(1) {
        Some(before) if data[before] == b'\r' => before,
        _ => newline,
    };
    let line_empty = line_end == 0 || data[line_end - 1] == b'\n';
    (!line_empty && next != b'\n' && next != b'\r').then_some(start)
}

/// The start of the first line at or after `from` that both it and the line
/// before it are non-empty. Text format ignores empty lines only at the
/// very end of the data, so a part must not end or begin with one.
fn text_boundary(data: &[u8], from: usize) -> Option<usize> {
    let mut at = from;
    loop {
        let newline = at + memchr::memchr(b'\n', data.get(at..)?)?;
        data.get(newline + 1)?;
        if let Some(start) = text_line_after(data, newline) {
            return Some(start);
        }
        at = newline + 1;
    }
}

/// Whether CSV data is inside quotes at a position. Quotes inside quoted
/// fields are doubled, so the count of quotes before a byte tells.
#[derive(Default)]
struct Quotes {
    at: usize,
    open: bool,
}

impl Quotes {
    fn advance(&mut self, data: &[u8], to: usize) {
        let seen = memchr::memchr_iter(b'"', &data[self.at..to]).count();
        self.open ^= seen % 2 == 1;
        self.at = to;
    }

    /// The start of the record after the next unquoted line break.
    fn boundary(&mut self, data: &[u8]) -> Option<usize> {
        for at in memchr::memchr2_iter(b'"', b'\n', &data[self.at..]) {
            let at = self.at + at;
            if data[at] == b'"' {
                self.open = !self.open;
            } else if !self.open && at + 1 < data.len() {
                self.at = at + 1;
                return Some(at + 1);
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pieces(data: &str, csv: bool, count: usize) -> Vec<&str> {
        let ranges = cut(data.as_bytes(), csv, count);
        ranges.into_iter().map(|r| &data[r]).collect()
    }

    #[test]
    fn text_is_cut_between_non_empty_lines() {
        assert_eq!(pieces("a\nb\nc\nd\n", false, 2), ["a\nb\nc\n", "d\n"]);
        // An empty line may be a row or trailing; cut where it stays inside.
        assert_eq!(pieces("a\n\n\nb\nc\n", false, 2), ["a\n\n\nb\n", "c\n"]);
        assert_eq!(pieces("a\r\nb\r\nc\r\n", false, 2), ["a\r\nb\r\n", "c\r\n"]);
        assert_eq!(pieces("abcdefgh\n", false, 2), ["abcdefgh\n"]);
    }

    #[test]
    fn csv_is_cut_at_unquoted_line_breaks_only() {
        let data = "1,\"x\ny\"\n2,\"\"\"\"\n3,\"p\nq\"\n4,z\n";
        let cut = pieces(data, true, 3);
        assert_eq!(cut.concat(), data);
        for piece in &cut {
            assert_eq!(piece.matches('"').count() % 2, 0, "{cut:?}");
            assert!(piece.ends_with('\n'), "{cut:?}");
        }
        assert!(cut.len() > 1, "{cut:?}");
    }

    #[test]
    fn the_last_boundary_leaves_a_line_that_has_begun() {
        assert_eq!(last_boundary(b"a\nb\nc", false), Some(4));
        assert_eq!(last_boundary(b"a\nb\n", false), Some(2));
        // Never next to an empty line, which may be trailing.
        assert_eq!(last_boundary(b"a\n\nb", false), None);
        assert_eq!(last_boundary(b"abc", false), None);
        let csv = b"1,\"x\ny\"\n2,\"p\nq";
        assert_eq!(last_boundary(csv, true), Some(8));
        assert_eq!(last_boundary(b"1,\"open\n2\n3", true), None);
    }

    #[test]
    fn small_data_stays_whole() {
        let whole = parts(b"1\n2\n", false, 4);
        assert_eq!((whole.len(), whole.first()), (1, Some(&(0..4))));
    }
}
