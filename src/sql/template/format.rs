//! `to_char`: a date/time printed through a template.

use chrono::{Datelike, NaiveDateTime, Timelike};

use super::{Case, Field, Node, Pattern};

const MONTHS: [&str; 12] = [
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
];
const DAYS: [&str; 7] = [
    "Sunday",
    "Monday",
    "Tuesday",
    "Wednesday",
    "Thursday",
    "Friday",
    "Saturday",
];
const ROMAN: [&str; 12] = [
    "I", "II", "III", "IV", "V", "VI", "VII", "VIII", "IX", "X", "XI", "XII",
];

pub fn month_names() -> &'static [&'static str; 12] {
    &MONTHS
}

pub fn day_names() -> &'static [&'static str; 7] {
    &DAYS
}

/// The zone a `timestamptz` is shown in; `None` for a `timestamp`, whose
/// `TZ` prints nothing.
#[derive(Debug, Clone, Copy)]
pub struct Zone<'a> {
    pub name: &'a str,
    pub offset_seconds: i32,
}

/// `time` (already in `zone`, if any) printed through `nodes`.
pub fn format(time: &NaiveDateTime, zone: Option<Zone<'_>>, nodes: &[Node]) -> String {
    let mut out = String::new();
    for node in nodes {
        match node {
            Node::Literal(text) => out.push_str(text),
            Node::Field(field) => field_text(time, zone, field, &mut out),
        }
    }
    out
}

fn field_text(time: &NaiveDateTime, zone: Option<Zone<'_>>, field: &Field, out: &mut String) {
    match number(time, zone, field.pattern) {
        Some((value, width)) => {
            let digits = match field.fill {
                true => value.to_string(),
                false => padded(value, width),
            };
            out.push_str(&digits);
            if let Some(case) = field.ordinal {
                out.push_str(&ordinal(value, case));
            }
        }
        None => out.push_str(&text(time, zone, field)),
    }
}

/// Zero-padded to `width`, the sign ahead of the zeroes.
fn padded(value: i64, width: usize) -> String {
    match value < 0 {
        true => format!("-{:0width$}", -value),
        false => format!("{value:0width$}"),
    }
}

/// A numeric field's value and its padded width.
fn number(time: &NaiveDateTime, zone: Option<Zone<'_>>, pattern: Pattern) -> Option<(i64, usize)> {
    let date = time.date();
    let micros = i64::from(time.nanosecond() / 1_000);
    let year = i64::from(date.year());
    let iso = date.iso_week();
    Some(match pattern {
        Pattern::Hour12 => (i64::from((time.hour() + 11) % 12 + 1), 2),
        Pattern::Hour24 => (i64::from(time.hour()), 2),
        Pattern::Minute => (i64::from(time.minute()), 2),
        Pattern::Second => (i64::from(time.second()), 2),
        Pattern::Millisecond => (micros / 1_000, 3),
        Pattern::Microsecond => (micros, 6),
        Pattern::Fraction(digits) => {
            let digits = u32::from(digits);
            (micros / 10i64.pow(6 - digits), digits as usize)
        }
        Pattern::SecondsOfDay => (i64::from(time.num_seconds_from_midnight()), 0),
        Pattern::Year(digits) => last_digits(year, digits),
        Pattern::IsoYear(digits) => last_digits(i64::from(iso.year()), digits),
        Pattern::Month => (i64::from(date.month()), 2),
        Pattern::DayOfYear => (i64::from(date.ordinal()), 3),
        Pattern::IsoDayOfYear => {
            let week = i64::from(iso.week()) - 1;
            (week * 7 + i64::from(date.weekday().number_from_monday()), 3)
        }
        Pattern::DayOfMonth => (i64::from(date.day()), 2),
        Pattern::DayOfWeek => (i64::from(date.weekday().number_from_sunday()), 1),
        Pattern::IsoDayOfWeek => (i64::from(date.weekday().number_from_monday()), 1),
        Pattern::WeekOfMonth => (i64::from((date.day() - 1) / 7 + 1), 1),
        Pattern::WeekOfYear => (i64::from((date.ordinal() - 1) / 7 + 1), 2),
        Pattern::IsoWeek => (i64::from(iso.week()), 2),
        Pattern::Century => (century(year), 2),
        Pattern::Julian => (i64::from(date.num_days_from_ce()) + 1_721_425, 0),
        Pattern::Quarter => (i64::from((date.month() - 1) / 3 + 1), 1),
        Pattern::TimeZoneMinutes => {
            let offset = zone.map_or(0, |z| z.offset_seconds);
            (i64::from((offset.abs() / 60) % 60), 2)
        }
        _ => return None,
    })
}

/// `YYY`, `YY`, `Y`: the last digits; `YYYY` the whole year, at least four.
fn last_digits(year: i64, digits: u8) -> (i64, usize) {
    match digits {
        4 => (year, 4),
        d => (year.rem_euclid(10i64.pow(u32::from(d))), usize::from(d)),
    }
}

fn century(year: i64) -> i64 {
    match year > 0 {
        true => (year + 99) / 100,
        false => -((99 - year) / 100),
    }
}

/// A name field's text.
fn text(time: &NaiveDateTime, zone: Option<Zone<'_>>, field: &Field) -> String {
    let date = time.date();
    let month = MONTHS[date.month0() as usize];
    let day = DAYS[date.weekday().num_days_from_sunday() as usize];
    let afternoon = time.hour() >= 12;
    let text = match field.pattern {
        Pattern::MonthName => pad(month, 9, field.fill),
        Pattern::MonthAbbrev => month[..3].to_string(),
        Pattern::DayName => pad(day, 9, field.fill),
        Pattern::DayAbbrev => day[..3].to_string(),
        Pattern::Meridiem { dots } => meridiem(afternoon, dots).to_string(),
        Pattern::Era { dots } => era(date.year() > 0, dots).to_string(),
        Pattern::RomanMonth => pad(ROMAN[date.month0() as usize], 4, field.fill),
        Pattern::YearComma => {
            let year = date.year();
            format!("{},{:03}", year / 1000, (year % 1000).abs())
        }
        Pattern::TimeZone => zone.map_or(String::new(), |z| z.name.to_string()),
        Pattern::TimeZoneHours => {
            let seconds = zone.map_or(0, |z| z.offset_seconds);
            let sign = if seconds < 0 { '-' } else { '+' };
            format!("{sign}{:02}", seconds.abs() / 3600)
        }
        Pattern::Offset => zone.map_or("+00".to_string(), |z| offset(z.offset_seconds)),
        _ => String::new(),
    };
    cased(&text, field.case)
}

fn meridiem(afternoon: bool, dots: bool) -> &'static str {
    match (afternoon, dots) {
        (false, false) => "AM",
        (false, true) => "A.M.",
        (true, false) => "PM",
        (true, true) => "P.M.",
    }
}

fn era(common: bool, dots: bool) -> &'static str {
    match (common, dots) {
        (true, false) => "AD",
        (true, true) => "A.D.",
        (false, false) => "BC",
        (false, true) => "B.C.",
    }
}

/// `OF`: `+05`, `-03:30`.
fn offset(seconds: i32) -> String {
    let sign = if seconds < 0 { '-' } else { '+' };
    let (hours, minutes) = (seconds.abs() / 3600, (seconds.abs() / 60) % 60);
    match minutes {
        0 => format!("{sign}{hours:02}"),
        m => format!("{sign}{hours:02}:{m:02}"),
    }
}

/// Blank-padded on the right to `width`, unless in fill mode.
fn pad(text: &str, width: usize, fill: bool) -> String {
    match fill {
        true => text.to_string(),
        false => format!("{text:<width$}"),
    }
}

fn cased(text: &str, case: Case) -> String {
    match case {
        Case::Upper => text.to_uppercase(),
        Case::Lower => text.to_lowercase(),
        Case::Capitalized => text.to_string(),
    }
}

/// `st`, `nd`, `rd` or `th`, as English writes ordinals.
fn ordinal(value: i64, case: Case) -> String {
    let suffix = match (value % 100, value % 10) {
        (11..=13, _) => "th",
        (_, 1) => "st",
        (_, 2) => "nd",
        (_, 3) => "rd",
        _ => "th",
    };
    cased(suffix, case)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sql::template::compile;

    fn at(text: &str) -> NaiveDateTime {
        NaiveDateTime::parse_from_str(text, "%Y-%m-%d %H:%M:%S%.f").expect("time")
    }

    fn show(time: &str, template: &str) -> String {
        format(&at(time), None, &compile(template))
    }

    #[test]
    fn prints_as_postgresql_does() {
        let t = "2015-07-15 00:00:25.5";
        assert_eq!(show(t, "YYYY-MM-DD HH:MI"), "2015-07-15 12:00");
        assert_eq!(
            show(t, "YYYY-MM-DD HH24:MI:SS.MS"),
            "2015-07-15 00:00:25.500"
        );
        assert_eq!(
            show(t, "Day, DDth Month YYYY"),
            "Wednesday, 15th July      2015"
        );
        assert_eq!(show(t, "FMDay, FMDDth FMMonth"), "Wednesday, 15th July");
        assert_eq!(show(t, "DY dy Mon MON"), "WED wed Jul JUL");
        assert_eq!(
            show(t, "HH12 AM a.m. Q WW IW D ID DDD CC"),
            "12 AM a.m. 3 28 29 4 3 196 21"
        );
        assert_eq!(show(t, "\"Year\" YYYY \\Q \\\""), "Year 2015 \\3 \"");
        assert_eq!(show(t, "Y,YYY YYY YY Y J"), "2,015 015 15 5 2457219");
        assert_eq!(
            show("2021-01-01 13:05:00", "IYYY-IW RM SSSS"),
            "2020-53 I    47100"
        );
        assert_eq!(show("2021-03-02 13:05:00", "FMMM/FMDD FMHH12PM"), "3/2 1PM");
    }

    #[test]
    fn zones_print_for_timestamptz_only() {
        let zone = Zone {
            name: "UTC",
            offset_seconds: 0,
        };
        let time = at("2024-01-01 10:00:00");
        let nodes = compile("HH24 TZ OF");
        assert_eq!(format(&time, Some(zone), &nodes), "10 UTC +00");
        assert_eq!(format(&time, None, &nodes), "10  +00");
    }
}
