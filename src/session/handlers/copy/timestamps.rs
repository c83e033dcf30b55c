//! Timestamps in the one shape exporters write (`COPY ... TO`, PostgreSQL,
//! Flink, DuckDB): `YYYY-MM-DD HH:MM:SS` with up to six fraction digits,
//! read without the general parser, which tries every shape it knows for
//! each value and was a tenth of a large COPY's CPU.

use datafusion::arrow::array::{Array, StringArray, TimestampMicrosecondArray};

/// The column as microseconds, or `None` when any value has another
/// shape: then the general cast reads the column, and says what is wrong.
pub fn parse_column(strings: &StringArray) -> Option<TimestampMicrosecondArray> {
    let mut values = Vec::with_capacity(strings.len());
    for i in 0..strings.len() {
        values.push(if strings.is_valid(i) {
            parse(strings.value(i).as_bytes())?
        } else {
            0
        });
    }
    Some(TimestampMicrosecondArray::new(
        values.into(),
        strings.nulls().cloned(),
    ))
}

/// Microseconds since 1970 of one canonical timestamp.
fn parse(text: &[u8]) -> Option<i64> {
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
    use std::sync::Arc;

    use datafusion::arrow::array::ArrayRef;
    use datafusion::arrow::compute::cast;
    use datafusion::arrow::datatypes::{DataType, TimeUnit};

    use super::*;

    #[test]
    fn canonical_timestamps_read_as_the_general_cast_reads_them() {
        let texts = [
            Some("1970-01-01 00:00:00"),
            Some("2024-02-29 23:59:59.999999"),
            Some("2000-02-29 12:00:00.5"),
            Some("1900-03-01 00:00:00.05"),
            Some("1969-12-31 23:59:59.123"),
            Some("0001-01-01 00:00:00"),
            None,
            Some("2262-04-11 23:47:16.854775"),
            Some("9999-12-31 23:59:59.9999"),
        ];
        let strings = StringArray::from(texts.to_vec());
        let ours = parse_column(&strings).expect("all canonical");
        let general = cast(
            &(Arc::new(strings) as ArrayRef),
            &DataType::Timestamp(TimeUnit::Microsecond, None),
        )
        .expect("cast");
        assert_eq!(&ours as &dyn Array, general.as_ref());
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
        assert!(parse_column(&StringArray::from(vec!["2024-01-01 00:00:00", "x"])).is_none());
    }
}
