//! Choosing how a scan of a keyed table reads RocksDB: point reads for
//! equality on the whole primary key, a range for bounds on its first column,
//! otherwise the whole table. The filters are still applied by DataFusion
//! afterwards, so an access path only has to return a superset.

use datafusion::arrow::array::ArrayRef;
use datafusion::common::ScalarValue;
use datafusion::logical_expr::expr::InList;
use datafusion::logical_expr::{Between, BinaryExpr, Expr, Operator};

use crate::catalog::Table;
use crate::state::keys;

/// Most point reads one scan turns into before reading a range instead.
const MAX_POINTS: usize = 10_000;

#[derive(Debug, Clone)]
pub enum KeyAccess {
    /// Encoded primary keys, without the table prefix.
    Points(Vec<Vec<u8>>),
    /// Encoded key bounds: lower inclusive, upper exclusive; `None` is open.
    Range {
        lower: Option<Vec<u8>>,
        upper: Option<Vec<u8>>,
    },
}

const FULL: KeyAccess = KeyAccess::Range {
    lower: None,
    upper: None,
};

/// Whether a filter can narrow the access path.
pub fn usable(table: &Table, filter: &Expr) -> bool {
    let key = &table.def.primary_key;
    match constraint(filter) {
        Some((column, Bound::Eq(_))) => key.iter().any(|i| table.def.columns[*i].name == column),
        Some((column, _)) => key
            .first()
            .is_some_and(|i| table.def.columns[*i].name == column),
        None => false,
    }
}

pub fn plan(table: &Table, filters: &[Expr]) -> datafusion::error::Result<KeyAccess> {
    if !table.def.is_keyed() {
        return Ok(FULL);
    }
    let found: Vec<(String, Bound)> = filters.iter().filter_map(constraint).collect();
    if let Some(points) = points(table, &found) {
        return Ok(KeyAccess::Points(points));
    }
    Ok(range(table, &found).unwrap_or(FULL))
}

#[derive(Debug, Clone)]
enum Bound {
    Eq(Vec<ScalarValue>),
    Lower { value: ScalarValue, inclusive: bool },
    Upper { value: ScalarValue, inclusive: bool },
    Between(ScalarValue, ScalarValue),
}

/// A filter of the form `column <op> literal(s)`.
fn constraint(filter: &Expr) -> Option<(String, Bound)> {
    match filter {
        Expr::BinaryExpr(BinaryExpr { left, op, right }) => {
            let (column, value, op) = match (left.as_ref(), right.as_ref()) {
                (Expr::Column(c), Expr::Literal(v, _)) => (c.name.clone(), v.clone(), *op),
                (Expr::Literal(v, _), Expr::Column(c)) => (c.name.clone(), v.clone(), op.swap()?),
                _ => return None,
            };
            if value.is_null() {
                return None;
            }
            let bound = match op {
                Operator::Eq => Bound::Eq(vec![value]),
                Operator::Gt => Bound::Lower {
                    value,
                    inclusive: false,
                },
                Operator::GtEq => Bound::Lower {
                    value,
                    inclusive: true,
                },
                Operator::Lt => Bound::Upper {
                    value,
                    inclusive: false,
                },
                Operator::LtEq => Bound::Upper {
                    value,
                    inclusive: true,
                },
                _ => return None,
            };
            Some((column, bound))
        }
        Expr::InList(InList {
            expr,
            list,
            negated: false,
        }) => {
            let Expr::Column(c) = expr.as_ref() else {
                return None;
            };
            let values = list
                .iter()
                .map(|e| match e {
                    Expr::Literal(v, _) if !v.is_null() => Some(v.clone()),
                    _ => None,
                })
                .collect::<Option<Vec<_>>>()?;
            Some((c.name.clone(), Bound::Eq(values)))
        }
        Expr::Between(Between {
            expr,
            negated: false,
            low,
            high,
        }) => match (expr.as_ref(), low.as_ref(), high.as_ref()) {
            (Expr::Column(c), Expr::Literal(lo, _), Expr::Literal(hi, _))
                if !lo.is_null() && !hi.is_null() =>
            {
                Some((c.name.clone(), Bound::Between(lo.clone(), hi.clone())))
            }
            _ => None,
        },
        _ => None,
    }
}

/// Point keys when every key column is pinned to a few values.
fn points(table: &Table, found: &[(String, Bound)]) -> Option<Vec<Vec<u8>>> {
    let mut per_column: Vec<Vec<ScalarValue>> = Vec::new();
    for index in &table.def.primary_key {
        let column = &table.def.columns[*index];
        let data_type = table.schema.field(*index).data_type();
        let values = found.iter().find_map(|(name, bound)| match bound {
            Bound::Eq(values) if *name == column.name => Some(values),
            _ => None,
        })?;
        let cast = values
            .iter()
            .map(|v| v.cast_to(data_type).ok())
            .collect::<Option<Vec<_>>>()?;
        per_column.push(cast);
    }
    let total = per_column.iter().map(Vec::len).product::<usize>();
    if total == 0 || total > MAX_POINTS {
        return None;
    }
    // The cartesian product of the pinned values, column by column.
    let mut combos: Vec<Vec<ScalarValue>> = vec![Vec::new()];
    for values in &per_column {
        combos = combos
            .into_iter()
            .flat_map(|prefix| {
                values.iter().map(move |v| {
                    let mut next = prefix.clone();
                    next.push(v.clone());
                    next
                })
            })
            .collect();
    }
    let columns: Vec<ArrayRef> = (0..per_column.len())
        .map(|c| ScalarValue::iter_to_array(combos.iter().map(|combo| combo[c].clone())))
        .collect::<Result<_, _>>()
        .ok()?;
    let rows = table.codec.encode_key_columns(&columns).ok()?;
    Some(rows.iter().map(|r| r.data().to_vec()).collect())
}

/// A range over the first key column.
fn range(table: &Table, found: &[(String, Bound)]) -> Option<KeyAccess> {
    let first = *table.def.primary_key.first()?;
    let name = &table.def.columns[first].name;
    let data_type = table.schema.field(first).data_type().clone();
    let encode = |value: &ScalarValue| -> Option<Vec<u8>> {
        let array = value.cast_to(&data_type).ok()?.to_array().ok()?;
        let converter = datafusion::arrow::row::RowConverter::new(vec![
            datafusion::arrow::row::SortField::new(data_type.clone()),
        ])
        .ok()?;
        let rows = converter.convert_columns(&[array]).ok()?;
        Some(rows.row(0).data().to_vec())
    };
    let mut lower: Option<Vec<u8>> = None;
    let mut upper: Option<Vec<u8>> = None;
    let tighten_lower = |lower: &mut Option<Vec<u8>>, candidate: Vec<u8>| {
        if lower.as_ref().is_none_or(|l| candidate > *l) {
            *lower = Some(candidate);
        }
    };
    let tighten_upper = |upper: &mut Option<Vec<u8>>, candidate: Vec<u8>| {
        if upper.as_ref().is_none_or(|u| candidate < *u) {
            *upper = Some(candidate);
        }
    };
    for (_, bound) in found.iter().filter(|(c, _)| c == name) {
        match bound {
            Bound::Eq(values) if values.len() == 1 => {
                let key = encode(&values[0])?;
                tighten_upper(&mut upper, keys::prefix_end(&key));
                tighten_lower(&mut lower, key);
            }
            Bound::Eq(_) => {}
            Bound::Lower { value, inclusive } => {
                let key = encode(value)?;
                tighten_lower(
                    &mut lower,
                    if *inclusive {
                        key
                    } else {
                        keys::prefix_end(&key)
                    },
                );
            }
            Bound::Upper { value, inclusive } => {
                let key = encode(value)?;
                tighten_upper(
                    &mut upper,
                    if *inclusive {
                        keys::prefix_end(&key)
                    } else {
                        key
                    },
                );
            }
            Bound::Between(lo, hi) => {
                tighten_lower(&mut lower, encode(lo)?);
                tighten_upper(&mut upper, keys::prefix_end(&encode(hi)?));
            }
        }
    }
    Some(KeyAccess::Range { lower, upper })
}
