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
    Ok(range(table, &table.def.primary_key, &found).unwrap_or(FULL))
}

/// Every key the filters pin, when they pin every key column: a column
/// of values per key column, in the columns' types.
pub fn key_points(table: &Table, filters: &[Expr]) -> Option<Vec<ArrayRef>> {
    if !table.def.is_keyed() {
        return None;
    }
    let found: Vec<(String, Bound)> = filters.iter().filter_map(constraint).collect();
    point_columns(table, &found)
}

/// The columns an index's stored key starts with: its key columns, or for
/// an index kept as a multiset, which is keyed by whole rows, every column.
fn index_key(index: &Table) -> Vec<usize> {
    if index.def.is_keyed() {
        index.def.primary_key.clone()
    } else {
        (0..index.def.columns.len()).collect()
    }
}

/// Whether a filter narrows a read through `index`: it bounds its first column.
pub fn usable_on_index(index: &Table, filter: &Expr) -> bool {
    let first = &index.def.columns[0].name;
    constraint(filter).is_some_and(|(column, _)| column == *first)
}

/// The range of `index`'s keys the filters leave, or `None` when they leave
/// all of it.
pub fn plan_index(index: &Table, filters: &[Expr]) -> Option<KeyAccess> {
    let found: Vec<(String, Bound)> = filters.iter().filter_map(constraint).collect();
    match range(index, &index_key(index), &found)? {
        KeyAccess::Range {
            lower: None,
            upper: None,
        } => None,
        narrowed => Some(narrowed),
    }
}

/// Whether an access path reads the whole table.
pub fn is_full(access: &KeyAccess) -> bool {
    matches!(
        access,
        KeyAccess::Range {
            lower: None,
            upper: None
        }
    )
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
    let columns = point_columns(table, found)?;
    let rows = table.codec.encode_key_columns(&columns).ok()?;
    Some(rows.iter().map(|r| r.data().to_vec()).collect())
}

/// The keys `found` pins, every combination of them, a column per key
/// column; `None` unless every key column is pinned, or past
/// [`MAX_POINTS`] keys.
fn point_columns(table: &Table, found: &[(String, Bound)]) -> Option<Vec<ArrayRef>> {
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
    (0..per_column.len())
        .map(|c| ScalarValue::iter_to_array(combos.iter().map(|combo| combo[c].clone())))
        .collect::<Result<_, _>>()
        .ok()
}

/// A range over the key columns `key`: equalities on its leading columns
/// make a prefix, and bounds on the column after them narrow it further.
fn range(table: &Table, key: &[usize], found: &[(String, Bound)]) -> Option<KeyAccess> {
    let name = |i: usize| table.def.columns[i].name.as_str();
    let data_type = |i: usize| table.schema.field(i).data_type().clone();
    let mut pinned: Vec<ScalarValue> = Vec::new();
    for column in key {
        let value = found.iter().find_map(|(c, bound)| match bound {
            Bound::Eq(values) if c == name(*column) && values.len() == 1 => Some(&values[0]),
            _ => None,
        });
        let Some(value) = value else { break };
        pinned.push(value.cast_to(&data_type(*column)).ok()?);
    }
    let prefix = encode(&pinned)?;
    let mut lower = (!prefix.is_empty()).then(|| prefix.clone());
    let mut upper = (!prefix.is_empty()).then(|| keys::prefix_end(&prefix));
    let Some(next) = key.get(pinned.len()) else {
        return Some(KeyAccess::Range { lower, upper });
    };
    let next_type = data_type(*next);
    let at = |value: &ScalarValue| -> Option<Vec<u8>> {
        let cast = value.cast_to(&next_type).ok()?;
        Some([prefix.as_slice(), &encode(&[cast])?].concat())
    };
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
    for (_, bound) in found.iter().filter(|(c, _)| c == name(*next)) {
        match bound {
            Bound::Eq(values) if values.len() == 1 => {
                let key = at(&values[0])?;
                tighten_upper(&mut upper, keys::prefix_end(&key));
                tighten_lower(&mut lower, key);
            }
            Bound::Eq(_) => {}
            Bound::Lower { value, inclusive } => {
                let key = at(value)?;
                let key = if *inclusive {
                    key
                } else {
                    keys::prefix_end(&key)
                };
                tighten_lower(&mut lower, key);
            }
            Bound::Upper { value, inclusive } => {
                let key = at(value)?;
                let key = if *inclusive {
                    keys::prefix_end(&key)
                } else {
                    key
                };
                tighten_upper(&mut upper, key);
            }
            Bound::Between(lo, hi) => {
                tighten_lower(&mut lower, at(lo)?);
                tighten_upper(&mut upper, keys::prefix_end(&at(hi)?));
            }
        }
    }
    Some(KeyAccess::Range { lower, upper })
}

/// Values in Arrow's row format, one column each: the bytes a key made of
/// those columns starts with.
fn encode(values: &[ScalarValue]) -> Option<Vec<u8>> {
    if values.is_empty() {
        return Some(Vec::new());
    }
    let fields = values
        .iter()
        .map(|v| datafusion::arrow::row::SortField::new(v.data_type()))
        .collect();
    let converter = datafusion::arrow::row::RowConverter::new(fields).ok()?;
    let arrays: Vec<ArrayRef> = values
        .iter()
        .map(|v| v.to_array().ok())
        .collect::<Option<_>>()?;
    let rows = converter.convert_columns(&arrays).ok()?;
    Some(rows.row(0).data().to_vec())
}
