//! `to_timestamp(text, template)` and `to_date(text, template)`: text read
//! through a template, as PostgreSQL reads it outside its `FX` mode:
//! blanks around fields are skipped, a separator in the template matches
//! any one separator in the input, numbers end at a non-digit.

use chrono::{NaiveDate, NaiveDateTime, NaiveTime};

use super::{Field, Node, Pattern};
use crate::error::{Error, Result};

/// What the input said, field by field.
#[derive(Debug, Default)]
struct Parts {
    year: Option<i64>,
    month: Option<u32>,
    day: Option<u32>,
    day_of_year: Option<u32>,
    hour: Option<u32>,
    twelve_hour: bool,
    afternoon: Option<bool>,
    minute: u32,
    second: u32,
    micros: u32,
    offset_seconds: i32,
    before_christ: bool,
}

/// The local date and time `input` gives, and the offset from UTC it
/// named (0 when none).
pub fn parse(input: &str, nodes: &[Node]) -> Result<(NaiveDateTime, i32)> {
    let mut parts = Parts::default();
    let mut rest = input;
    for node in nodes {
        rest = match node {
            Node::Literal(text) => skip_literal(rest, text),
            Node::Field(field) => read_field(rest, field, &mut parts)?,
        };
    }
    // What follows the template's last field is ignored, as PostgreSQL does.
    let time = parts.to_time().map_err(|e| match e {
        Error::DatetimeOutOfRange(m) => Error::DatetimeOutOfRange(format!("{m}: \"{input}\"")),
        other => other,
    })?;
    Ok((time, parts.offset_seconds))
}

/// Template text matches the input character for character where it can;
/// a separator matches any one separator, or none.
fn skip_literal<'a>(input: &'a str, text: &str) -> &'a str {
    let mut rest = input;
    for expected in text.chars() {
        let Some(got) = rest.chars().next() else {
            return rest;
        };
        let separator = !expected.is_alphanumeric();
        if got == expected || (separator && !got.is_alphanumeric()) {
            rest = &rest[got.len_utf8()..];
        } else if !separator && !got.is_ascii_digit() {
            // Ordinary template text consumes one input character.
            rest = &rest[got.len_utf8()..];
        }
    }
    rest
}

fn read_field<'a>(input: &'a str, field: &Field, parts: &mut Parts) -> Result<&'a str> {
    let input = input.trim_start();
    match field.pattern {
        Pattern::MonthName | Pattern::MonthAbbrev | Pattern::RomanMonth => {
            let (month, rest) = month_name(input, field)?;
            parts.month = Some(month);
            return Ok(rest);
        }
        Pattern::DayName | Pattern::DayAbbrev => return day_name(input),
        Pattern::Meridiem { .. } => {
            let (afternoon, rest) = meridiem(input)?;
            parts.afternoon = Some(afternoon);
            return Ok(rest);
        }
        Pattern::Era { .. } => {
            let (before_christ, rest) = era(input)?;
            parts.before_christ = before_christ;
            return Ok(rest);
        }
        Pattern::TimeZoneHours => return offset(input, parts),
        Pattern::Offset | Pattern::TimeZone => {
            return Err(Error::NotSupported(format!(
                "formatting field \"{}\" is only supported in to_char",
                if field.pattern == Pattern::Offset {
                    "OF"
                } else {
                    "TZ"
                }
            )));
        }
        _ => {}
    }
    let width = width(field.pattern)?;
    let (value, rest) = digits(input, width, field)?;
    store(parts, field.pattern, value)?;
    Ok(rest)
}

/// How many digits a numeric field reads at most.
fn width(pattern: Pattern) -> Result<usize> {
    Ok(match pattern {
        Pattern::Year(4) | Pattern::YearComma => 4,
        Pattern::Year(d) => usize::from(d),
        Pattern::Month
        | Pattern::DayOfMonth
        | Pattern::Hour12
        | Pattern::Hour24
        | Pattern::Minute
        | Pattern::Second
        | Pattern::TimeZoneMinutes => 2,
        Pattern::DayOfYear | Pattern::Millisecond => 3,
        Pattern::Microsecond => 6,
        Pattern::Fraction(d) => usize::from(d),
        Pattern::Quarter | Pattern::DayOfWeek | Pattern::IsoDayOfWeek => 1,
        other => {
            return Err(Error::NotSupported(format!(
                "the template pattern {other:?} is not supported when reading text; \
                 use YYYY, MM, DD, HH24, MI, SS and the like"
            )));
        }
    })
}

fn store(parts: &mut Parts, pattern: Pattern, value: i64) -> Result<()> {
    let small = |v: i64| u32::try_from(v).map_err(|_| out_of_range());
    match pattern {
        Pattern::Year(4) | Pattern::YearComma => parts.year = Some(value),
        Pattern::Year(digits) => parts.year = Some(near_2020(value, digits)),
        Pattern::Month => parts.month = Some(small(value)?),
        Pattern::DayOfMonth => parts.day = Some(small(value)?),
        Pattern::DayOfYear => parts.day_of_year = Some(small(value)?),
        Pattern::Hour12 => {
            parts.hour = Some(small(value)?);
            parts.twelve_hour = true;
        }
        Pattern::Hour24 => parts.hour = Some(small(value)?),
        Pattern::Minute => parts.minute = small(value)?,
        Pattern::Second => parts.second = small(value)?,
        Pattern::Millisecond => parts.micros = small(value)? * 1_000,
        Pattern::Microsecond => parts.micros = small(value)?,
        Pattern::Fraction(d) => parts.micros = small(value)? * 10u32.pow(6 - u32::from(d)),
        Pattern::TimeZoneMinutes => {
            let sign = if parts.offset_seconds < 0 { -1 } else { 1 };
            parts.offset_seconds += sign * 60 * small(value)? as i32;
        }
        // Read and ignored, as PostgreSQL does.
        _ => {}
    }
    Ok(())
}

/// A year written with fewer digits, placed nearest 2020 as PostgreSQL does.
fn near_2020(value: i64, digits: u8) -> i64 {
    match digits {
        1 => 2000 + value,
        2 if value < 70 => 2000 + value,
        2 => 1900 + value,
        3 if value < 520 => 2000 + value,
        3 => 1000 + value,
        _ => value,
    }
}

/// Up to `width` digits (more for a fill-mode year), with an optional sign.
fn digits<'a>(input: &'a str, width: usize, field: &Field) -> Result<(i64, &'a str)> {
    let negative = input.starts_with('-');
    let body = input.strip_prefix(['-', '+']).unwrap_or(input);
    let limit = match field.pattern {
        Pattern::Year(4) => usize::MAX,
        _ => width,
    };
    let count = body
        .bytes()
        .take(limit)
        .take_while(u8::is_ascii_digit)
        .count();
    // A four-digit year followed straight by more digits keeps four.
    let count = match field.pattern {
        Pattern::Year(4) if count > 4 && !field.fill => 4,
        _ => count,
    };
    if count == 0 {
        let seen: String = body.chars().take(width.max(1)).collect();
        return Err(invalid(format!(
            "invalid value \"{seen}\" for \"{}\"",
            name(field.pattern)
        )));
    }
    let value: i64 = body[..count].parse().map_err(|_| out_of_range())?;
    Ok((if negative { -value } else { value }, &body[count..]))
}

fn month_name<'a>(input: &'a str, field: &Field) -> Result<(u32, &'a str)> {
    const ROMAN: [&str; 12] = [
        "XII", "XI", "X", "IX", "VIII", "VII", "VI", "V", "IV", "III", "II", "I",
    ];
    if field.pattern == Pattern::RomanMonth {
        let found = ROMAN
            .iter()
            .position(|r| starts_with_ignoring_case(input, r));
        return match found {
            Some(i) => Ok((12 - i as u32, &input[ROMAN[i].len()..])),
            None => Err(invalid(format!("invalid value \"{input}\" for \"RM\""))),
        };
    }
    for (i, month) in super::format::month_names().iter().enumerate() {
        if starts_with_ignoring_case(input, month) {
            return Ok((i as u32 + 1, &input[month.len()..]));
        }
        if starts_with_ignoring_case(input, &month[..3]) {
            return Ok((i as u32 + 1, &input[3..]));
        }
    }
    let seen: String = input.chars().take(3).collect();
    Err(invalid(format!("invalid value \"{seen}\" for \"Mon\"")))
}

fn day_name(input: &str) -> Result<&str> {
    for day in super::format::day_names() {
        if starts_with_ignoring_case(input, day) {
            return Ok(&input[day.len()..]);
        }
        if starts_with_ignoring_case(input, &day[..3]) {
            return Ok(&input[3..]);
        }
    }
    let seen: String = input.chars().take(3).collect();
    Err(invalid(format!("invalid value \"{seen}\" for \"Dy\"")))
}

fn meridiem(input: &str) -> Result<(bool, &str)> {
    for (text, afternoon) in [("A.M.", false), ("P.M.", true), ("AM", false), ("PM", true)] {
        if starts_with_ignoring_case(input, text) {
            return Ok((afternoon, &input[text.len()..]));
        }
    }
    let seen: String = input.chars().take(2).collect();
    Err(invalid(format!("invalid value \"{seen}\" for \"AM\"")))
}

fn era(input: &str) -> Result<(bool, &str)> {
    for (text, before) in [("A.D.", false), ("B.C.", true), ("AD", false), ("BC", true)] {
        if starts_with_ignoring_case(input, text) {
            return Ok((before, &input[text.len()..]));
        }
    }
    let seen: String = input.chars().take(2).collect();
    Err(invalid(format!("invalid value \"{seen}\" for \"AD\"")))
}

/// `TZH`: `+05`, `-3`; a following `TZM` adds minutes in the same direction.
fn offset<'a>(input: &'a str, parts: &mut Parts) -> Result<&'a str> {
    let sign = if input.starts_with('-') { -1 } else { 1 };
    let body = input.strip_prefix(['-', '+']).unwrap_or(input);
    let len = body.bytes().take(2).take_while(u8::is_ascii_digit).count();
    let hours: i32 = body[..len]
        .parse()
        .map_err(|_| invalid(format!("invalid value \"{input}\" for \"TZH\"")))?;
    parts.offset_seconds = sign * hours * 3600;
    Ok(&body[len..])
}

fn starts_with_ignoring_case(input: &str, word: &str) -> bool {
    input
        .get(..word.len())
        .is_some_and(|head| head.eq_ignore_ascii_case(word))
}

impl Parts {
    fn to_time(&self) -> Result<NaiveDateTime> {
        // No year read is year 0, 1 BC, as in PostgreSQL.
        let mut year = self.year.unwrap_or(0);
        if self.before_christ {
            year = 1 - year;
        }
        let year = i32::try_from(year).map_err(|_| out_of_range())?;
        let date = match (self.day_of_year, self.month, self.day) {
            (Some(ordinal), None, None) => NaiveDate::from_yo_opt(year, ordinal),
            _ => NaiveDate::from_ymd_opt(year, self.month.unwrap_or(1), self.day.unwrap_or(1)),
        }
        .ok_or_else(out_of_range)?;
        let time =
            NaiveTime::from_hms_micro_opt(self.hour()?, self.minute, self.second, self.micros)
                .ok_or_else(out_of_range)?;
        Ok(date.and_time(time))
    }

    fn hour(&self) -> Result<u32> {
        let hour = self.hour.unwrap_or(0);
        if !self.twelve_hour && self.afternoon.is_none() {
            return Ok(hour);
        }
        if !(1..=12).contains(&hour) && self.hour.is_some() {
            return Err(invalid(format!(
                "hour \"{hour}\" is invalid for the 12-hour clock; use the 24-hour clock, or give an hour between 1 and 12"
            )));
        }
        Ok(match self.afternoon {
            Some(true) => hour % 12 + 12,
            _ => hour % 12,
        })
    }
}

/// The pattern as PostgreSQL names it in messages.
fn name(pattern: Pattern) -> &'static str {
    match pattern {
        Pattern::Year(4) => "YYYY",
        Pattern::Year(3) => "YYY",
        Pattern::Year(2) => "YY",
        Pattern::Year(_) => "Y",
        Pattern::YearComma => "Y,YYY",
        Pattern::Month => "MM",
        Pattern::DayOfMonth => "DD",
        Pattern::DayOfYear => "DDD",
        Pattern::Hour12 => "HH12",
        Pattern::Hour24 => "HH24",
        Pattern::Minute => "MI",
        Pattern::Second => "SS",
        Pattern::Millisecond => "MS",
        Pattern::Microsecond => "US",
        Pattern::TimeZoneMinutes => "TZM",
        _ => "field",
    }
}

fn invalid(message: String) -> Error {
    Error::InvalidDatetime(message)
}

fn out_of_range() -> Error {
    Error::DatetimeOutOfRange("date/time field value out of range".into())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sql::template::compile;

    fn read(input: &str, template: &str) -> String {
        let (time, offset) = parse(input, &compile(template)).expect(input);
        format!("{time} {offset}")
    }

    #[test]
    fn reads_as_postgresql_does() {
        assert_eq!(read("05 Dec 2000", "DD Mon YYYY"), "2000-12-05 00:00:00 0");
        assert_eq!(
            read("2024-01-02 03:04:05", "YYYY-MM-DD HH24:MI:SS"),
            "2024-01-02 03:04:05 0"
        );
        assert_eq!(read("20240102", "YYYYMMDD"), "2024-01-02 00:00:00 0");
        assert_eq!(
            read("2024/1/2 3:04 PM", "YYYY-MM-DD HH:MI AM"),
            "2024-01-02 15:04:00 0"
        );
        assert_eq!(read("95-03-01", "YY-MM-DD"), "1995-03-01 00:00:00 0");
        assert_eq!(
            read("2024-01-02 10:00 +05", "YYYY-MM-DD HH24:MI TZH"),
            "2024-01-02 10:00:00 18000"
        );
        assert_eq!(read("12.345", "SS.MS"), "0000-01-01 00:00:12.345 0");
        assert_eq!(
            read("2024-01-01 junk", "YYYY-MM-DD"),
            "2024-01-01 00:00:00 0"
        );
        assert_eq!(
            read("Tuesday, March 05 2024", "Day, Month DD YYYY"),
            "2024-03-05 00:00:00 0"
        );
    }

    #[test]
    fn bad_text_is_an_error_with_postgresqls_words() {
        let err = parse("2024-xx-01", &compile("YYYY-MM-DD")).expect_err("bad month");
        assert_eq!(err.sqlstate(), "22007");
        assert!(
            err.to_string().contains("invalid value \"xx\" for \"MM\""),
            "{err}"
        );
        let err = parse("2024-13-01", &compile("YYYY-MM-DD")).expect_err("month 13");
        assert_eq!(err.sqlstate(), "22008");
        assert!(err.to_string().ends_with(": \"2024-13-01\""), "{err}");
        let err = parse("+05:30", &compile("OF")).expect_err("OF");
        assert_eq!(err.sqlstate(), "0A000");
    }
}
