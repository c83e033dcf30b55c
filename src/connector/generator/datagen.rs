//! The `datagen` generator: rows for demos, a deterministic function of seed and position.

use super::*;

/// Options of `connector = 'datagen'`: a rate, an optional total, and per
/// column `fields.<column>.kind` = 'random' (the default) or 'sequence'.
///
/// Row n of every column is a function of n alone (random values hash the
/// column's seed, its position and n), so a resumed source makes the rows
/// it would have made. A sequence column counts `start`, `start + 1`, ...
/// and the source ends after its `end`, or after `datagen.rows.total` rows,
/// whichever comes first. A TIMESTAMP sequence starts at `start` (default
/// 2024-01-01 00:00:00) and steps by the time between rows at the rate, so
/// event time advances like the clock.
pub(super) struct DatagenOptions {
    /// Rows a second.
    pub(super) rate: u64,
    /// Rows to generate; `None` for no end.
    pub(super) total: Option<u64>,
    pub(super) columns: Vec<Column>,
}

/// How one column is generated.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Column {
    pub(super) ty: Type,
    pub(super) values: Values,
    /// The column's position: random columns with the same seed differ.
    pub(super) at: u64,
}

#[derive(Debug, Clone, PartialEq)]
pub(super) enum Values {
    /// `start + n * step`; step is 1 except for timestamps.
    Sequence {
        start: i64,
        step: i64,
    },
    /// Whole numbers in `min..=max` (timestamps in microseconds).
    Whole {
        min: i64,
        max: i64,
        seed: u64,
    },
    Fraction {
        min: f64,
        max: f64,
        seed: u64,
    },
    Text {
        length: usize,
        seed: u64,
    },
    Flag {
        seed: u64,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Kind {
    Sequence,
    Random,
}

impl DatagenOptions {
    pub(super) fn parse(connector: &ConnectorDef, table: &TableDef) -> Result<DatagenOptions> {
        refuse_unknown(
            connector,
            DATAGEN_OPTIONS,
            Some(("fields.", "fields.<column>.<property>")),
        )?;
        refuse_unknown_fields(connector, table)?;
        let rate = number(connector, "datagen.rows.per.second")?.unwrap_or(10);
        if rate == 0 {
            return Err(Error::InvalidParameter(
                "datagen.rows.per.second must be at least 1".into(),
            ));
        }
        let schema = table.arrow_schema();
        let mut total = number(connector, "datagen.rows.total")?;
        let mut columns = Vec::with_capacity(schema.fields().len());
        for (at, (field, column)) in schema.fields().iter().zip(&table.columns).enumerate() {
            let field = FieldOptions::new(connector, field, &column.sql_type, at as u64, rate)?;
            let (column, rows) = field.parse()?;
            total = match (total, rows) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
            columns.push(column);
        }
        Ok(DatagenOptions {
            rate,
            total,
            columns,
        })
    }

    pub(super) fn split(&self, committed: Option<u64>) -> DatagenSplit {
        DatagenSplit {
            columns: self.columns.clone(),
            next: committed.unwrap_or(0),
            end: self.total,
        }
    }
}

/// Every `fields.<column>.<property>` must name a column and a property.
pub(super) fn refuse_unknown_fields(connector: &ConnectorDef, table: &TableDef) -> Result<()> {
    for key in connector.options.keys() {
        let Some(rest) = key.strip_prefix("fields.") else {
            continue;
        };
        let Some((column, _)) = rest.rsplit_once('.') else {
            return Err(Error::InvalidParameter(format!(
                "option {key} should be fields.<column>.<property>"
            )));
        };
        if !table
            .columns
            .iter()
            .any(|c| c.name.to_lowercase() == column)
        {
            return Err(Error::InvalidParameter(format!(
                "option {key} names no column of the source"
            )));
        }
    }
    Ok(())
}

/// The `fields.<column>.*` options of one column.
pub(super) struct FieldOptions<'a> {
    pub(super) connector: &'a ConnectorDef,
    pub(super) prefix: String,
    pub(super) name: &'a str,
    pub(super) ty: Type,
    pub(super) at: u64,
    /// Microseconds between rows at the source's rate.
    pub(super) interval: i64,
}

impl<'a> FieldOptions<'a> {
    pub(super) fn new(
        connector: &'a ConnectorDef,
        field: &'a Field,
        sql_type: &str,
        at: u64,
        rate: u64,
    ) -> Result<Self> {
        let name = field.name();
        let ty = Type::of(field.data_type()).ok_or_else(|| {
            Error::NotSupported(format!(
                "connector 'datagen' cannot generate column \"{name}\" of type {sql_type}; \
                 use INT, BIGINT, DOUBLE, VARCHAR, BOOLEAN or TIMESTAMP"
            ))
        })?;
        let interval = i64::try_from(1_000_000 / rate).unwrap_or(i64::MAX).max(1);
        Ok(FieldOptions {
            connector,
            prefix: format!("fields.{}.", name.to_lowercase()),
            name,
            ty,
            at,
            interval,
        })
    }

    pub(super) fn key(&self, property: &str) -> String {
        format!("{}{property}", self.prefix)
    }

    pub(super) fn get(&self, property: &str) -> Option<(String, &'a str)> {
        let key = self.key(property);
        self.connector.option(&key).map(|v| (key, v))
    }

    /// How the column is generated, and the rows a sequence's end allows.
    pub(super) fn parse(&self) -> Result<(Column, Option<u64>)> {
        let kind = self.kind()?;
        self.refuse_misplaced(kind)?;
        let (values, rows) = match kind {
            Kind::Sequence => self.sequence()?,
            Kind::Random => (self.random()?, None),
        };
        let column = Column {
            ty: self.ty,
            values,
            at: self.at,
        };
        Ok((column, rows))
    }

    pub(super) fn kind(&self) -> Result<Kind> {
        let kind = match self.get("kind") {
            None => Kind::Random,
            Some((_, v)) if v.eq_ignore_ascii_case("random") => Kind::Random,
            Some((_, v)) if v.eq_ignore_ascii_case("sequence") => Kind::Sequence,
            Some((key, v)) => {
                return Err(Error::InvalidParameter(format!(
                    "{key} must be 'sequence' or 'random', not '{v}'"
                )));
            }
        };
        if kind == Kind::Sequence && self.ty == Type::Boolean {
            return Err(Error::InvalidParameter(format!(
                "column \"{}\" is BOOLEAN, which cannot be a sequence; use {} = 'random'",
                self.name,
                self.key("kind")
            )));
        }
        Ok(kind)
    }

    /// A property the column's kind and type do not read is refused, so
    /// that `min` on a sequence does not pass for a working bound.
    pub(super) fn refuse_misplaced(&self, kind: Kind) -> Result<()> {
        let allowed: &[&str] = match (kind, self.ty) {
            (Kind::Sequence, Type::Timestamp) => &["kind", "start"],
            (Kind::Sequence, _) => &["kind", "start", "end"],
            (Kind::Random, Type::Varchar) => &["kind", "length", "seed"],
            (Kind::Random, Type::Boolean) => &["kind", "seed"],
            (Kind::Random, _) => &["kind", "min", "max", "seed"],
        };
        let misplaced = self.connector.options.keys().find(|key| {
            key.strip_prefix(&self.prefix)
                .is_some_and(|property| !allowed.contains(&property))
        });
        let Some(key) = misplaced else {
            return Ok(());
        };
        let kind = match kind {
            Kind::Sequence => "sequence",
            Kind::Random => "random",
        };
        let list: Vec<String> = allowed.iter().map(|p| self.key(p)).collect();
        Err(Error::InvalidParameter(format!(
            "option {key} does not apply to a {kind} {} column; use {}",
            self.ty.sql(),
            list.join(", ")
        )))
    }

    pub(super) fn sequence(&self) -> Result<(Values, Option<u64>)> {
        if self.ty == Type::Timestamp {
            let start = self.timestamp("start", DATAGEN_EPOCH)?;
            let step = self.interval;
            return Ok((Values::Sequence { start, step }, None));
        }
        let (low, high) = self.bounds();
        let start = self.whole("start", 0)?;
        let end = self.whole("end", high)?;
        if start < low || end > high || end < start {
            return Err(Error::InvalidParameter(format!(
                "{} and {} must satisfy {low} <= start <= end <= {high}",
                self.key("start"),
                self.key("end")
            )));
        }
        let rows = (end as i128 - start as i128 + 1).try_into().ok();
        let rows = if end == high { None } else { rows };
        Ok((Values::Sequence { start, step: 1 }, rows))
    }

    pub(super) fn random(&self) -> Result<Values> {
        let seed = self.get("seed").map_or(Ok(0), |(key, v)| {
            v.trim().parse().map_err(|_| {
                Error::InvalidParameter(format!("{key} must be a whole number, not '{v}'"))
            })
        })?;
        Ok(match self.ty {
            Type::Varchar => Values::Text {
                length: self.length()?,
                seed,
            },
            Type::Boolean => Values::Flag { seed },
            Type::Double => {
                let (min, max) = self.fractions()?;
                Values::Fraction { min, max, seed }
            }
            Type::Timestamp => {
                let min = self.timestamp("min", DATAGEN_EPOCH)?;
                let max = self.timestamp("max", "2024-12-31 23:59:59")?;
                self.ordered(min, max)?;
                Values::Whole { min, max, seed }
            }
            Type::Int | Type::Bigint => {
                let (low, high) = self.bounds();
                let min = self.whole("min", 0)?;
                let max = self.whole("max", 1000)?;
                self.ordered(min, max)?;
                if min < low || max > high {
                    return Err(Error::InvalidParameter(format!(
                        "{} and {} must lie within {low} and {high}",
                        self.key("min"),
                        self.key("max")
                    )));
                }
                Values::Whole { min, max, seed }
            }
        })
    }

    /// The values the column's type holds.
    pub(super) fn bounds(&self) -> (i64, i64) {
        match self.ty {
            Type::Int => (i32::MIN.into(), i32::MAX.into()),
            _ => (i64::MIN, i64::MAX),
        }
    }

    pub(super) fn ordered<T: PartialOrd>(&self, min: T, max: T) -> Result<()> {
        match min <= max {
            true => Ok(()),
            false => Err(Error::InvalidParameter(format!(
                "{} must not exceed {}",
                self.key("min"),
                self.key("max")
            ))),
        }
    }

    pub(super) fn whole(&self, property: &str, default: i64) -> Result<i64> {
        let Some((key, text)) = self.get(property) else {
            return Ok(default);
        };
        text.trim().parse().map_err(|_| {
            Error::InvalidParameter(format!("{key} must be a whole number, not '{text}'"))
        })
    }

    pub(super) fn fractions(&self) -> Result<(f64, f64)> {
        let read = |property: &str, default: f64| -> Result<f64> {
            let Some((key, text)) = self.get(property) else {
                return Ok(default);
            };
            match text.trim().parse::<f64>() {
                Ok(v) if v.is_finite() => Ok(v),
                _ => Err(Error::InvalidParameter(format!(
                    "{key} must be a number, not '{text}'"
                ))),
            }
        };
        let (min, max) = (read("min", 0.0)?, read("max", 1000.0)?);
        self.ordered(min, max)?;
        Ok((min, max))
    }

    pub(super) fn length(&self) -> Result<usize> {
        let Some((key, text)) = self.get("length") else {
            return Ok(10);
        };
        match text.trim().parse::<usize>() {
            Ok(n) if n <= 65_535 => Ok(n),
            _ => Err(Error::InvalidParameter(format!(
                "{key} must be a whole number up to 65535, not '{text}'"
            ))),
        }
    }

    /// A timestamp option in microseconds since the Unix epoch.
    pub(super) fn timestamp(&self, property: &str, default: &str) -> Result<i64> {
        let (key, text) = self
            .get(property)
            .unwrap_or_else(|| (self.key(property), default));
        parse_timestamp(text).ok_or_else(|| {
            Error::InvalidParameter(format!(
                "{key} must be a timestamp like '{DATAGEN_EPOCH}', not '{text}'"
            ))
        })
    }
}

pub(super) fn parse_timestamp(text: &str) -> Option<i64> {
    use chrono::{NaiveDate, NaiveDateTime};
    let text = text.trim();
    let formats = [
        "%Y-%m-%d %H:%M:%S",
        "%Y-%m-%d %H:%M:%S%.f",
        "%Y-%m-%dT%H:%M:%S",
        "%Y-%m-%dT%H:%M:%S%.f",
    ];
    let time = formats
        .iter()
        .find_map(|f| NaiveDateTime::parse_from_str(text, f).ok())
        .or_else(|| {
            NaiveDate::parse_from_str(text, "%Y-%m-%d")
                .ok()
                .and_then(|d| d.and_hms_opt(0, 0, 0))
        })?;
    Some(time.and_utc().timestamp_micros())
}

/// Datagen's one split: the next row and where the rows end.
pub(super) struct DatagenSplit {
    pub(super) columns: Vec<Column>,
    pub(super) next: u64,
    pub(super) end: Option<u64>,
}

impl DatagenSplit {
    pub(super) fn next_batch(&mut self, max: usize, schema: &SchemaRef) -> Result<RecordBatch> {
        let mut to = self.next.saturating_add(max as u64);
        if let Some(end) = self.end {
            to = to.min(end).max(self.next);
        }
        let rows = self.next..to;
        let mut arrays = Vec::with_capacity(self.columns.len());
        for (column, field) in self.columns.iter().zip(schema.fields()) {
            arrays.push(fit(column.generate(rows.clone()), field)?);
        }
        self.next = to;
        Ok(RecordBatch::try_new(schema.clone(), arrays)?)
    }
}

impl Column {
    pub(super) fn generate(&self, rows: Range<u64>) -> ArrayRef {
        match &self.values {
            Values::Sequence { start, step } => self.wholes(rows.map(|n| {
                let n = i64::try_from(n).unwrap_or(i64::MAX);
                start.saturating_add(step.saturating_mul(n))
            })),
            Values::Whole { min, max, seed } => {
                let width = (*max as i128 - *min as i128 + 1) as u128;
                self.wholes(rows.map(|n| {
                    let offset = u128::from(self.noise(*seed, n)) % width;
                    (*min as i128 + offset as i128) as i64
                }))
            }
            Values::Fraction { min, max, seed } => Arc::new(Float64Array::from_iter_values(
                rows.map(|n| min + unit(self.noise(*seed, n)) * (max - min)),
            )),
            Values::Text { length, seed } => Arc::new(StringArray::from_iter_values(
                rows.map(|n| letters(self.noise(*seed, n), *length)),
            )),
            Values::Flag { seed } => Arc::new(BooleanArray::from_iter(
                rows.map(|n| Some(self.noise(*seed, n) & 1 == 1)),
            )),
        }
    }

    /// Whole numbers as the column's type shows them.
    pub(super) fn wholes(&self, values: impl Iterator<Item = i64>) -> ArrayRef {
        match self.ty {
            Type::Int => Arc::new(Int32Array::from_iter_values(
                values.map(|v| v.clamp(i32::MIN.into(), i32::MAX.into()) as i32),
            )),
            Type::Bigint => Arc::new(Int64Array::from_iter_values(values)),
            Type::Double => Arc::new(Float64Array::from_iter_values(values.map(|v| v as f64))),
            Type::Varchar => Arc::new(StringArray::from_iter_values(values.map(|v| v.to_string()))),
            Type::Boolean => Arc::new(BooleanArray::from_iter(values.map(|v| Some(v & 1 == 1)))),
            Type::Timestamp => Arc::new(TimestampMicrosecondArray::from_iter_values(values)),
        }
    }

    pub(super) fn noise(&self, seed: u64, row: u64) -> u64 {
        splitmix(splitmix(seed ^ splitmix(self.at)) ^ row)
    }
}

/// SplitMix64's finaliser: a cheap hash whose outputs look independent,
/// so that a row's random values need no generator state to reproduce.
pub(super) fn splitmix(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// A number in `[0, 1)` from the top 53 bits of `bits`.
pub(super) fn unit(bits: u64) -> f64 {
    (bits >> 11) as f64 / (1u64 << 53) as f64
}

/// `length` lowercase letters drawn from `bits`.
pub(super) fn letters(bits: u64, length: usize) -> String {
    let mut state = bits;
    (0..length)
        .map(|_| {
            state = splitmix(state);
            char::from(b'a' + (state % 26) as u8)
        })
        .collect()
}
