//! Timestamps in the one shape exporters write (`COPY ... TO`, PostgreSQL,
//! Flink, DuckDB): `YYYY-MM-DD HH:MM:SS` with up to six fraction digits,
//! read without the general parser, which tries every shape it knows for
//! each value and was a tenth of a large COPY's CPU.

use std::sync::Arc;

use datafusion::arrow::array::{
    Array, ArrayRef, StringArray, TimestampMicrosecondArray, TimestampNanosecondArray,
};
use datafusion::arrow::datatypes::{DataType, TimeUnit};

/// The column as a timestamp column of type `to` (microseconds or
/// nanoseconds, no time zone), or `None` when `to` is another type or any
/// value has another shape or range: then the general cast reads the
/// column, and says what is wrong.
pub fn parse_column(strings: &StringArray, to: &DataType) -> Option<ArrayRef> {
    let per_micro = match to {
        DataType::Timestamp(TimeUnit::Microsecond, None) => 1,
        DataType::Timestamp(TimeUnit::Nanosecond, None) => 1_000,
        _ => return None,
    };
    let mut values = Vec::with_capacity(strings.len());
    for i in 0..strings.len() {
        values.push(if strings.is_valid(i) {
            parse(strings.value(i).as_bytes())?.checked_mul(per_micro)?
        } else {
            0
        });
    }
    let nulls = strings.nulls().cloned();
    Some(match per_micro {
        1 => Arc::new(TimestampMicrosecondArray::new(values.into(), nulls)),
        _ => Arc::new(TimestampNanosecondArray::new(values.into(), nulls)),
    })
}

/// Microseconds since 1970 of one canonical timestamp.
pub(super) fn parse(text: &[u8]) -> Option<i64> {
    if text.len() < 19 || text[4] != b'-' || text[7] != b'-' || text[10] != b' ' {
        return None;
    }
    if text[13] != b':' || text[16] != b':' {
        return None;
    }
    let year = digits(&text[0..4])?;
    let (month, day) = (digits(&text[5..7])?, digits(&text[8..10])?);
    let (hour, minute) = (digits(&text[11..13])?, digits(&text[14..16])?);
    let second = digits(&text[17..19])?;
    let valid_date = year >= 1 && (1..=12).contains(&month) && day >= 1;
    if !valid_date || day > days_in_month(year, month) || hour > 23 || minute > 59 || second > 59 {
        return None;
    }
    let micros = fraction(&text[19..])?;
    let days = days_from_civil(year, month, day);
    let seconds = days * 86_400 + hour * 3_600 + minute * 60 + second;
    Some(seconds * 1_000_000 + micros)
}

/// `.f` to `.ffffff` as microseconds; nothing is zero.
fn fraction(text: &[u8]) -> Option<i64> {
    match text {
        [] => Some(0),
        [b'.', rest @ ..] if (1..=6).contains(&rest.len()) => {
            let value = digits(rest)?;
            Some(value * 10i64.pow(6 - rest.len() as u32))
        }
        _ => None,
    }
}

fn digits(text: &[u8]) -> Option<i64> {
    text.iter().try_fold(0i64, |n, &b| {
        b.is_ascii_digit().then(|| n * 10 + i64::from(b - b'0'))
    })
}

fn days_in_month(year: i64, month: i64) -> i64 {
    match month {
        2 if year % 4 == 0 && (year % 100 != 0 || year % 400 == 0) => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Days from 1970-01-01 to a date of the proleptic Gregorian calendar
/// (the civil-from-days algorithm run backwards: eras of 400 years).
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let year = if month <= 2 { year - 1 } else { year };
    let era = year.div_euclid(400);
    let year_of_era = year - era * 400;
    let month_from_march = (month + 9) % 12;
    let day_of_year = (153 * month_from_march + 2) / 5 + day - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    era * 146_097 + day_of_era - 719_468
}

#[cfg(test)]
mod tests {
    use datafusion::arrow::compute::cast;

    use super::*;

    #[test]
    fn canonical_timestamps_read_as_the_general_cast_reads_them() {
        let texts = [
            Some("1970-01-01 00:00:00"),
            Some("2024-02-29 23:59:59.999999"),
            Some("2000-02-29 12:00:00.5"),
            Some("1900-03-01 00:00:00.05"),
            Some("1969-12-31 23:59:59.123"),
            None,
            Some("2262-04-11 23:47:16.854775"),
            Some("1677-09-21 00:12:44"),
        ];
        let strings = StringArray::from(texts.to_vec());
        for unit in [TimeUnit::Microsecond, TimeUnit::Nanosecond] {
            let to = DataType::Timestamp(unit, None);
            let ours = parse_column(&strings, &to).expect("all canonical");
            let general = cast(&(Arc::new(strings.clone()) as ArrayRef), &to).expect("cast");
            assert_eq!(ours.as_ref(), general.as_ref());
        }
        let far = StringArray::from(vec!["0001-01-01 00:00:00", "9999-12-31 23:59:59.9999"]);
        let micros = DataType::Timestamp(TimeUnit::Microsecond, None);
        let general = cast(&(Arc::new(far.clone()) as ArrayRef), &micros).expect("cast");
        let ours = parse_column(&far, &micros).expect("canonical");
        assert_eq!(ours.as_ref(), general.as_ref());
        // Beyond nanoseconds' range: the general cast reads it, and refuses it.
        let nanos = DataType::Timestamp(TimeUnit::Nanosecond, None);
        assert!(parse_column(&far, &nanos).is_none());
        assert!(parse_column(&far, &DataType::Date32).is_none());
    }

    #[test]
    fn other_shapes_go_to_the_general_cast() {
        for text in [
            "2024-01-01T00:00:00",
            "2024-01-01",
            "2024-02-30 00:00:00",
            "2023-02-29 00:00:00",
            "2024-13-01 00:00:00",
            "2024-01-01 24:00:00",
            "2024-01-01 00:00:60",
            "2024-01-01 00:00:00.1234567",
            "2024-01-01 00:00:00.",
            "2024-01-01 00:00:00+02",
            " 2024-01-01 00:00:00",
            "2024-1-01 00:00:00",
            "0000-01-01 00:00:00",
        ] {
            assert_eq!(parse(text.as_bytes()), None, "{text}");
        }
        let mixed = StringArray::from(vec!["2024-01-01 00:00:00", "x"]);
        let micros = DataType::Timestamp(TimeUnit::Microsecond, None);
        assert!(parse_column(&mixed, &micros).is_none());
    }
}
