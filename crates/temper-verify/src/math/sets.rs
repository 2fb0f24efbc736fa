//! Sets of real numbers compared by membership: intervals, unions, differences, finite sets and
//! inequalities in one variable (`|x| > 1`, `1 ≤ |z| ≤ 3/2`, `x < -3` or `x > 2`).
//!
//! Two such sets are the same when every test point lies in both or in neither. The points are
//! the finite ends, elements and constants of both sides, each also nudged either way (by a
//! thousandth) and negated, the midpoints between them, a grid over [-10, 10] and far points: a boundary in
//! another place, an end of the other type or a missing piece shows at one of them. Values at a
//! boundary compare to 1e-12 absolute and 1e-9 relative, so `x² ≤ 2` holds at `x = √2` and
//! `x² < 2` does not.

use std::collections::BTreeSet;

use num_complex::Complex64;

use super::eval::{Bindings, EvalError, eval, symbols};
use super::expr::{Budget, Expr, Rel};
use super::value::Value;

/// Most distinct ends and elements looked at.
const MAX_ENDS: usize = 32;
/// Points tested besides those taken from the two sets.
const FIXED: &[f64] = &[0.137, -0.291, 3.71, -6.33, 14.2, -17.9, 1e3, -1e3, 1e6, -1e6];

/// Whether `gold` and `answer` are the same set of reals. `false` when either is not a set of
/// reals this module reads, or when they use different variables.
pub fn same_real_set(gold: &Expr, answer: &Expr, budget: &mut Budget) -> bool {
    if !is_real_set(gold) || !is_real_set(answer) {
        return false;
    }
    // A pair `(a, b)` stands for an open interval only against an inequality or a union.
    if matches!(gold, Expr::Tuple(_)) && matches!(answer, Expr::Tuple(_) | Expr::Set(_))
        || matches!(answer, Expr::Tuple(_)) && matches!(gold, Expr::Set(_))
    {
        return false;
    }
    let mut vars = BTreeSet::new();
    symbols(gold, &mut vars);
    symbols(answer, &mut vars);
    if vars.len() > 1 {
        return false;
    }
    let var = vars.into_iter().next();
    let mut ends = Vec::new();
    for side in [gold, answer] {
        if collect_ends(side, &mut ends, budget).is_none() {
            return false;
        }
    }
    ends.sort_by(f64::total_cmp);
    ends.dedup_by(|a, b| close(*a, *b));
    ends.truncate(MAX_ENDS);
    let mut points: Vec<f64> = FIXED.to_vec();
    points.extend((-20..=20).map(|k| f64::from(k) / 2.0));
    for &c in &ends {
        let nudge = 1e-3 * c.abs().max(1.0);
        points.extend([c, c - nudge, c + nudge, -c, -c - nudge, -c + nudge]);
    }
    points.extend(ends.windows(2).map(|w| (w[0] + w[1]) / 2.0));
    if let (Some(first), Some(last)) = (ends.first(), ends.last()) {
        points.extend([first - 1.0, last + 1.0]);
    }
    points.into_iter().all(|x| {
        matches!(
            (member(gold, x, var.as_deref(), budget), member(answer, x, var.as_deref(), budget)),
            (Some(a), Some(b)) if a == b
        )
    })
}

/// Whether `e` is a set of reals: an interval, union, difference or finite set with constant
/// ends, or inequalities (alone or as alternatives) in at most one variable.
fn is_real_set(e: &Expr) -> bool {
    match e {
        Expr::Interval(a, b, _, _) => is_bound(a) && is_bound(b),
        Expr::Tuple(items) => items.len() == 2 && items.iter().all(is_bound),
        Expr::Union(parts) => !parts.is_empty() && parts.iter().all(is_real_set),
        Expr::Minus(a, b) => is_real_set(a) && is_real_set(b),
        Expr::Set(items) => items.iter().all(is_bound),
        Expr::EmptySet => true,
        Expr::Rel(..) => is_inequality(e),
        Expr::List(items) => !items.is_empty() && items.iter().all(is_inequality),
        Expr::All(items) => !items.is_empty() && items.iter().all(is_real_set),
        _ => false,
    }
}

/// A constant scalar or an infinity.
fn is_bound(e: &Expr) -> bool {
    let mut vars = BTreeSet::new();
    symbols(e, &mut vars);
    e.is_scalar() && vars.is_empty()
}

/// `a < b`, `a ≤ f(x) < b`, `x ≠ 2`: a chain of order relations between scalars.
fn is_inequality(e: &Expr) -> bool {
    let mut ops = Vec::new();
    let mut operands = Vec::new();
    chain(e, &mut ops, &mut operands);
    !ops.is_empty()
        && ops.iter().all(|op| matches!(op, Rel::Lt | Rel::Le | Rel::Gt | Rel::Ge | Rel::Ne))
        && operands.iter().all(|x| x.is_scalar())
}

/// The operands and relations of a chain `a op b op c`, left to right.
fn chain<'e>(e: &'e Expr, ops: &mut Vec<Rel>, operands: &mut Vec<&'e Expr>) {
    match e {
        Expr::Rel(op, l, r) => {
            chain(l, ops, operands);
            ops.push(*op);
            operands.push(r);
        }
        other => operands.push(other),
    }
}

/// A constant's real value (±∞ for infinities); `None` when it has no real value.
fn number(e: &Expr, budget: &mut Budget) -> Option<f64> {
    if let Some(sign) = e.infinity_sign() {
        return Some(f64::from(sign) * f64::INFINITY);
    }
    real(eval(e, &Bindings::new(), budget).ok()?.complex())
}

fn real(c: Complex64) -> Option<f64> {
    (c.re.is_finite() && c.im.abs() <= 1e-9 * c.re.abs().max(1.0)).then_some(c.re)
}

/// Equal up to rounding: 1e-12 absolute and 1e-9 relative (infinities only equal themselves).
fn close(a: f64, b: f64) -> bool {
    a == b
        || (a.is_finite() && b.is_finite() && (a - b).abs() <= 1e-12 + 1e-9 * a.abs().max(b.abs()))
}

/// The finite numbers that bound or belong to `e`, added to `out`.
fn collect_ends(e: &Expr, out: &mut Vec<f64>, budget: &mut Budget) -> Option<()> {
    let push = |x: &Expr, out: &mut Vec<f64>, budget: &mut Budget| {
        if let Some(v) = number(x, budget).filter(|v| v.is_finite()) {
            out.push(v);
        }
    };
    match e {
        Expr::Interval(a, b, _, _) => {
            push(a, out, budget);
            push(b, out, budget);
        }
        Expr::Tuple(items) | Expr::Set(items) => items.iter().for_each(|x| push(x, out, budget)),
        Expr::Union(parts) | Expr::List(parts) | Expr::All(parts) => {
            for p in parts {
                collect_ends(p, out, budget)?;
            }
        }
        Expr::Minus(a, b) => {
            collect_ends(a, out, budget)?;
            collect_ends(b, out, budget)?;
        }
        Expr::Rel(..) => {
            let (mut ops, mut operands) = (Vec::new(), Vec::new());
            chain(e, &mut ops, &mut operands);
            for x in operands.into_iter().filter(|x| is_bound(x)) {
                push(x, out, budget);
            }
        }
        _ => {}
    }
    budget.spend(1).ok()
}

/// Whether `x` lies between `lo` and `hi`, each end included when closed.
fn within(x: f64, lo: f64, hi: f64, lo_closed: bool, hi_closed: bool) -> bool {
    let above = if close(x, lo) { lo_closed } else { x > lo };
    let below = if close(x, hi) { hi_closed } else { x < hi };
    above && below
}

/// Whether `x` is in the set `e`; `None` when that cannot be decided (the budget ran out).
fn member(e: &Expr, x: f64, var: Option<&str>, budget: &mut Budget) -> Option<bool> {
    budget.spend(1).ok()?;
    Some(match e {
        Expr::Interval(a, b, lc, rc) => within(x, number(a, budget)?, number(b, budget)?, *lc, *rc),
        Expr::Tuple(t) => within(x, number(&t[0], budget)?, number(&t[1], budget)?, false, false),
        Expr::Union(parts) | Expr::List(parts) => {
            let mut any = false;
            for p in parts {
                any |= member(p, x, var, budget)?;
            }
            any
        }
        Expr::Minus(a, b) => member(a, x, var, budget)? && !member(b, x, var, budget)?,
        Expr::All(parts) => {
            let mut all = true;
            for p in parts {
                all &= member(p, x, var, budget)?;
            }
            all
        }
        Expr::Set(items) => {
            let mut any = false;
            for item in items {
                any |= close(number(item, budget)?, x);
            }
            any
        }
        Expr::EmptySet => false,
        Expr::Rel(..) => holds(e, x, var, budget)?,
        _ => return None,
    })
}

/// Whether the chain of relations `e` holds with its variable set to `x`. Where a side is not a
/// real number (a square root of a negative, a division by zero) the point is outside the set.
fn holds(e: &Expr, x: f64, var: Option<&str>, budget: &mut Budget) -> Option<bool> {
    let (mut ops, mut operands) = (Vec::new(), Vec::new());
    chain(e, &mut ops, &mut operands);
    let at: Bindings =
        var.map(|v| (v.to_owned(), Value::Approx(Complex64::new(x, 0.0)))).into_iter().collect();
    let mut values = Vec::with_capacity(operands.len());
    for operand in operands {
        let value = match operand.infinity_sign() {
            Some(sign) => Some(f64::from(sign) * f64::INFINITY),
            None => match eval(operand, &at, budget) {
                Ok(v) => real(v.complex()),
                Err(EvalError::Budget) => return None,
                Err(_) => None,
            },
        };
        let Some(value) = value else { return Some(false) };
        values.push(value);
    }
    Some(ops.iter().zip(values.windows(2)).all(|(op, w)| {
        let (l, r) = (w[0], w[1]);
        let eq = close(l, r);
        match op {
            Rel::Lt => !eq && l < r,
            Rel::Le => eq || l < r,
            Rel::Gt => !eq && l > r,
            Rel::Ge => eq || l > r,
            Rel::Ne => !eq,
            Rel::Eq => eq,
            Rel::In => false,
        }
    }))
}
