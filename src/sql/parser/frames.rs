//! Window frames that end before they start (`ROWS BETWEEN 1 PRECEDING
//! AND 10 PRECEDING`): PostgreSQL takes them when both bounds point the
//! same way, and each row's frame is empty; DataFusion refuses them. Over
//! an empty frame `count` is 0 and every other aggregate and
//! `first_value`, `last_value`, `nth_value` are NULL, so the call becomes
//! that value; ranking and offset functions (`row_number`, `lag`, ...)
//! ignore frames, so theirs is dropped. Bounds that point towards each
//! other the wrong way are PostgreSQL's 42P20 errors.

use std::ops::ControlFlow;

use crate::error::{Error, Result};
use sqlparser::ast::{
    CaseWhen, Expr, Function, Value, VisitMut, VisitorMut, WindowFrame, WindowFrameBound,
    WindowFrameUnits, WindowType,
};

/// Functions whose result does not depend on the frame.
const FRAMELESS: &[&str] = &[
    "row_number",
    "rank",
    "dense_rank",
    "percent_rank",
    "cume_dist",
    "ntile",
    "lag",
    "lead",
];

pub fn empty_frames<V: VisitMut>(node: &mut V) -> Result<()> {
    match node.visit(&mut EmptyFrames) {
        ControlFlow::Break(e) => Err(e),
        ControlFlow::Continue(()) => Ok(()),
    }
}

struct EmptyFrames;

impl VisitorMut for EmptyFrames {
    type Break = Error;

    fn post_visit_expr(&mut self, expr: &mut Expr) -> ControlFlow<Error> {
        let Expr::Function(function) = expr else {
            return ControlFlow::Continue(());
        };
        match frame_of(function).map(is_empty) {
            Some(Ok(true)) => {}
            Some(Err(e)) => return ControlFlow::Break(e),
            _ => return ControlFlow::Continue(()),
        }
        let name = function.name.to_string().to_lowercase();
        if FRAMELESS.contains(&name.as_str()) {
            set_frame(function, None);
        } else if name == "count" {
            *expr = Expr::value(Value::Number("0".into(), false));
        } else {
            // `CASE WHEN false THEN f(...) OVER (...) END`: NULL of f's type.
            set_frame(function, Some(current_row_only()));
            *expr = Expr::Case {
                case_token: sqlparser::ast::helpers::attached_token::AttachedToken::empty(),
                end_token: sqlparser::ast::helpers::attached_token::AttachedToken::empty(),
                operand: None,
                conditions: vec![CaseWhen {
                    condition: Expr::value(Value::Boolean(false)),
                    result: expr.clone(),
                }],
                else_result: None,
            };
        }
        ControlFlow::Continue(())
    }
}

fn frame_of(function: &Function) -> Option<&WindowFrame> {
    match &function.over {
        Some(WindowType::WindowSpec(spec)) => spec.window_frame.as_ref(),
        _ => None,
    }
}

fn set_frame(function: &mut Function, frame: Option<WindowFrame>) {
    if let Some(WindowType::WindowSpec(spec)) = &mut function.over {
        spec.window_frame = frame;
    }
}

fn current_row_only() -> WindowFrame {
    WindowFrame {
        units: WindowFrameUnits::Rows,
        start_bound: WindowFrameBound::CurrentRow,
        end_bound: Some(WindowFrameBound::CurrentRow),
    }
}

/// Whether every row's frame is empty: both bounds constants pointing the
/// same way, the start after the end, in ROWS or RANGE units. Bounds that
/// PostgreSQL refuses are its errors.
fn is_empty(frame: &WindowFrame) -> Result<bool> {
    use WindowFrameBound::{CurrentRow, Following, Preceding};
    let end = frame.end_bound.as_ref().unwrap_or(&CurrentRow);
    let refused = |what: &str| Err(Error::WindowingError(what.to_string()));
    match (&frame.start_bound, end) {
        (CurrentRow, Preceding(Some(_))) => {
            refused("frame starting from current row cannot have preceding rows")
        }
        (Following(Some(_)), CurrentRow | Preceding(Some(_))) => {
            refused("frame starting from following row cannot have preceding rows")
        }
        _ if frame.units == WindowFrameUnits::Groups => Ok(false),
        (Preceding(Some(start)), Preceding(Some(end))) => Ok(later(end, start)),
        (Following(Some(start)), Following(Some(end))) => Ok(later(start, end)),
        _ => Ok(false),
    }
}

/// Whether constant `a` is greater than constant `b`.
fn later(a: &Expr, b: &Expr) -> bool {
    matches!((number(a), number(b)), (Some(a), Some(b)) if a > b)
}

fn number(expr: &Expr) -> Option<f64> {
    match expr {
        Expr::Value(v) => match &v.value {
            Value::Number(text, _) => text.parse().ok(),
            _ => None,
        },
        _ => None,
    }
}
