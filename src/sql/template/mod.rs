//! PostgreSQL's date/time templates (`to_char`, `to_timestamp`, `to_date`):
//! `YYYY-MM-DD HH24:MI:SS`, `FMMonth DDth`, `"quoted text"`. DataFusion
//! registers functions of the same names that take chrono's `%Y-%m-%d`
//! instead, which would print a PostgreSQL template back as literal text;
//! these take their place.

mod format;
mod parse;
pub mod udf;

pub use format::format;
pub use parse::parse;

/// One piece of a template.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Node {
    Literal(String),
    Field(Field),
}

/// A template pattern with its modifiers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Field {
    pub pattern: Pattern,
    /// How a name prints: `MONTH`, `Month` or `month`.
    pub case: Case,
    /// `FM`: no padding with zeroes or blanks.
    pub fill: bool,
    /// `TH` or `th`: an ordinal suffix.
    pub ordinal: Option<Case>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Case {
    Upper,
    Capitalized,
    Lower,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pattern {
    Hour12,
    Hour24,
    Minute,
    Second,
    Millisecond,
    Microsecond,
    /// `FF1` to `FF6`: that many digits of the fraction.
    Fraction(u8),
    SecondsOfDay,
    Meridiem {
        dots: bool,
    },
    YearComma,
    Year(u8),
    IsoYear(u8),
    Era {
        dots: bool,
    },
    MonthName,
    MonthAbbrev,
    Month,
    DayName,
    DayAbbrev,
    DayOfYear,
    IsoDayOfYear,
    DayOfMonth,
    DayOfWeek,
    IsoDayOfWeek,
    WeekOfMonth,
    WeekOfYear,
    IsoWeek,
    Century,
    Julian,
    Quarter,
    RomanMonth,
    TimeZone,
    TimeZoneHours,
    TimeZoneMinutes,
    Offset,
}

/// Keywords, longest first where one is a prefix of another, as PostgreSQL
/// matches them: case-insensitively, the case of a name's letters choosing
/// how it prints.
const KEYWORDS: &[(&str, Pattern)] = &[
    ("A.D.", Pattern::Era { dots: true }),
    ("A.M.", Pattern::Meridiem { dots: true }),
    ("AD", Pattern::Era { dots: false }),
    ("AM", Pattern::Meridiem { dots: false }),
    ("B.C.", Pattern::Era { dots: true }),
    ("BC", Pattern::Era { dots: false }),
    ("CC", Pattern::Century),
    ("DAY", Pattern::DayName),
    ("DDD", Pattern::DayOfYear),
    ("DD", Pattern::DayOfMonth),
    ("DY", Pattern::DayAbbrev),
    ("D", Pattern::DayOfWeek),
    ("FF1", Pattern::Fraction(1)),
    ("FF2", Pattern::Fraction(2)),
    ("FF3", Pattern::Fraction(3)),
    ("FF4", Pattern::Fraction(4)),
    ("FF5", Pattern::Fraction(5)),
    ("FF6", Pattern::Fraction(6)),
    ("HH24", Pattern::Hour24),
    ("HH12", Pattern::Hour12),
    ("HH", Pattern::Hour12),
    ("IDDD", Pattern::IsoDayOfYear),
    ("ID", Pattern::IsoDayOfWeek),
    ("IW", Pattern::IsoWeek),
    ("IYYY", Pattern::IsoYear(4)),
    ("IYY", Pattern::IsoYear(3)),
    ("IY", Pattern::IsoYear(2)),
    ("I", Pattern::IsoYear(1)),
    ("J", Pattern::Julian),
    ("MI", Pattern::Minute),
    ("MM", Pattern::Month),
    ("MONTH", Pattern::MonthName),
    ("MON", Pattern::MonthAbbrev),
    ("MS", Pattern::Millisecond),
    ("OF", Pattern::Offset),
    ("P.M.", Pattern::Meridiem { dots: true }),
    ("PM", Pattern::Meridiem { dots: false }),
    ("Q", Pattern::Quarter),
    ("RM", Pattern::RomanMonth),
    ("SSSSS", Pattern::SecondsOfDay),
    ("SSSS", Pattern::SecondsOfDay),
    ("SS", Pattern::Second),
    ("TZH", Pattern::TimeZoneHours),
    ("TZM", Pattern::TimeZoneMinutes),
    ("TZ", Pattern::TimeZone),
    ("US", Pattern::Microsecond),
    ("WW", Pattern::WeekOfYear),
    ("W", Pattern::WeekOfMonth),
    ("Y,YYY", Pattern::YearComma),
    ("YYYY", Pattern::Year(4)),
    ("YYY", Pattern::Year(3)),
    ("YY", Pattern::Year(2)),
    ("Y", Pattern::Year(1)),
];

/// Split a template into literal text and fields.
pub fn compile(template: &str) -> Vec<Node> {
    let mut nodes = Vec::new();
    let mut literal = String::new();
    let mut rest = template;
    while let Some(c) = rest.chars().next() {
        if c == '"' {
            rest = quoted(&rest[1..], &mut literal);
            continue;
        }
        // Outside quotes a backslash only escapes a double quote.
        if let Some(after) = rest.strip_prefix("\\\"") {
            literal.push('"');
            rest = after;
            continue;
        }
        match field(rest) {
            Some((field, used)) => {
                if !literal.is_empty() {
                    nodes.push(Node::Literal(std::mem::take(&mut literal)));
                }
                nodes.push(Node::Field(field));
                rest = &rest[used..];
            }
            None => {
                literal.push(c);
                rest = &rest[c.len_utf8()..];
            }
        }
    }
    if !literal.is_empty() {
        nodes.push(Node::Literal(literal));
    }
    nodes
}

/// Text up to the closing quote, which is consumed; what follows it.
fn quoted<'a>(text: &'a str, literal: &mut String) -> &'a str {
    let mut chars = text.char_indices();
    while let Some((at, c)) = chars.next() {
        match c {
            '"' => return &text[at + 1..],
            '\\' => {
                if let Some((_, next)) = chars.next() {
                    literal.push(next);
                }
            }
            c => literal.push(c),
        }
    }
    ""
}

/// A field at the start of `text`, with its `FM`/`FX`/`TM` prefixes and
/// `TH` suffix, and the bytes it used.
fn field(text: &str) -> Option<(Field, usize)> {
    let mut at = 0;
    let mut fill = false;
    loop {
        let prefix = text.get(at..at + 2).map(str::to_ascii_uppercase);
        match prefix.as_deref() {
            Some("FM") => fill = true,
            // Fixed format and translation mode change nothing weir does.
            Some("FX") | Some("TM") => {}
            _ => break,
        }
        at += 2;
    }
    let (keyword, pattern) = KEYWORDS.iter().find(|(keyword, _)| {
        text.get(at..at + keyword.len())
            .is_some_and(|candidate| candidate.eq_ignore_ascii_case(keyword))
    })?;
    let written = &text[at..at + keyword.len()];
    at += keyword.len();
    let ordinal = match text.get(at..at + 2) {
        Some("TH") => Some(Case::Upper),
        Some("th") => Some(Case::Lower),
        _ => None,
    };
    if ordinal.is_some() {
        at += 2;
    }
    let field = Field {
        pattern: *pattern,
        case: case_of(written),
        fill,
        ordinal,
    };
    Some((field, at))
}

fn case_of(written: &str) -> Case {
    let mut letters = written.chars().filter(char::is_ascii_alphabetic);
    let first_upper = letters.next().is_some_and(|c| c.is_ascii_uppercase());
    let rest: Vec<char> = letters.collect();
    match (first_upper, rest.iter().all(char::is_ascii_uppercase)) {
        (true, true) => Case::Upper,
        (true, false) => Case::Capitalized,
        (false, _) => Case::Lower,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn templates_split_into_fields_and_text() {
        let nodes = compile("YYYY-MM-DD \"at\" HH24:MI");
        assert_eq!(nodes.len(), 9);
        assert_eq!(nodes[1], Node::Literal("-".into()));
        assert_eq!(nodes[5], Node::Literal(" at ".into()));
        let Node::Field(month) = compile("FMMonth")[0] else {
            panic!("not a field")
        };
        assert!(month.fill);
        assert_eq!(month.case, Case::Capitalized);
        assert_eq!(month.pattern, Pattern::MonthName);
        let Node::Field(day) = compile("DDth")[0] else {
            panic!("not a field")
        };
        assert_eq!(day.ordinal, Some(Case::Lower));
    }
}
