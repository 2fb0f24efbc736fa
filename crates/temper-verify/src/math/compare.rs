//! Equivalence of two parsed answers.
//!
//! Numbers compare exactly when both are exact rationals (`0.5 = 1/2`, `0.33 ≠ 1/3`) and to a
//! relative 1e-9 otherwise (`2√2 = √8`). Expressions with variables compare by evaluation at
//! several fixed, irregular points (rational, so polynomial identities are checked exactly;
//! negative as well as positive, so `√(x²)` and `x` differ); a point where either side is
//! undefined is skipped, and at least three points must agree. Collections compare by their
//! kind: sets and bare lists unordered, tuples and matrices in order, intervals with their end
//! types; an equation `x = 5` answers `5`; equations compare up to a non-zero factor.

use std::collections::BTreeSet;

use super::eval::{Bindings, EvalError, eval, symbols};
use super::expr::{Budget, Expr, Rel};
use super::value::{Rational, Value};

/// Most elements compared in one collection.
const MAX_ITEMS: usize = 64;
/// Points at which expressions with variables are compared.
const POINTS: &[(i128, i128)] = &[
    (3, 7),
    (-5, 4),
    (2, 1),
    (11, 3),
    (-2, 9),
    (7, 5),
    (-3, 1),
    (13, 6),
    (5, 11),
    (-8, 3),
    (1, 5),
    (17, 4),
    (-7, 2),
];
/// Agreeing points needed.
const NEEDED: usize = 3;

/// Rewrites forms that mean the same thing into one: `x ∈ S` into `S`, `a ± b` into the list of
/// both values, a pair with an infinite end (or inside a union) into an open interval, a
/// one-column or one-row matrix into a tuple, and a one-element list into its element.
pub fn canonical(e: Expr) -> Expr {
    if let Some(interval) = inequality_interval(&e) {
        return interval;
    }
    match e {
        Expr::Rel(Rel::In, lhs, rhs) if matches!(*lhs, Expr::Sym(_)) => canonical(*rhs),
        Expr::PlusMinus(a, b) => Expr::List(vec![
            Expr::Add(vec![(*a).clone(), (*b).clone()]),
            Expr::Add(vec![*a, Expr::Neg(b)]),
        ]),
        Expr::Tuple(items)
            if items.len() == 2 && items.iter().any(|x| x.infinity_sign().is_some()) =>
        {
            let mut it = items.into_iter();
            let (a, b) = (it.next().expect("two items"), it.next().expect("two items"));
            Expr::Interval(Box::new(a), Box::new(b), false, false)
        }
        Expr::Union(parts) => Expr::Union(
            parts
                .into_iter()
                .map(|p| match canonical(p) {
                    Expr::Tuple(items) if items.len() == 2 => {
                        let mut it = items.into_iter();
                        let (a, b) = (it.next().expect("two items"), it.next().expect("two items"));
                        Expr::Interval(Box::new(a), Box::new(b), false, false)
                    }
                    other => other,
                })
                .collect(),
        ),
        Expr::Matrix(rows) if rows.len() == 1 || rows.iter().all(|r| r.len() == 1) => {
            Expr::Tuple(rows.into_iter().flatten().map(canonical).collect())
        }
        Expr::List(items) if items.len() == 1 => {
            canonical(items.into_iter().next().expect("one item"))
        }
        Expr::List(items) => Expr::List(items.into_iter().map(canonical).collect()),
        Expr::Set(items) => Expr::Set(items.into_iter().map(canonical).collect()),
        Expr::Tuple(items) => Expr::Tuple(items.into_iter().map(canonical).collect()),
        Expr::Rel(r, a, b) => Expr::Rel(r, Box::new(canonical(*a)), Box::new(canonical(*b))),
        other => other,
    }
}

/// `x > 3` as `(3, ∞)`, `2 ≤ x ≤ 5` as `[2, 5]`: a variable bounded on one or both sides.
fn inequality_interval(e: &Expr) -> Option<Expr> {
    let inf = || Expr::Inf;
    let neg_inf = || Expr::Neg(Box::new(Expr::Inf));
    let interval = |a: Expr, b: Expr, lc: bool, rc: bool| {
        Some(Expr::Interval(Box::new(a), Box::new(b), lc, rc))
    };
    let Expr::Rel(op, lhs, rhs) = e else { return None };
    // A chain a op1 x op2 b.
    if let Expr::Rel(op1, a, x) = &**lhs
        && matches!(**x, Expr::Sym(_))
    {
        return match (op1, op) {
            (Rel::Lt | Rel::Le, Rel::Lt | Rel::Le) => {
                interval((**a).clone(), (**rhs).clone(), *op1 == Rel::Le, *op == Rel::Le)
            }
            (Rel::Gt | Rel::Ge, Rel::Gt | Rel::Ge) => {
                interval((**rhs).clone(), (**a).clone(), *op == Rel::Ge, *op1 == Rel::Ge)
            }
            _ => None,
        };
    }
    // x op c, or c op x (read as x op' c).
    let (op, bound) = match (&**lhs, &**rhs) {
        (Expr::Sym(_), c) if !matches!(c, Expr::Sym(_) | Expr::Rel(..)) => (*op, c.clone()),
        (c, Expr::Sym(_)) if !matches!(c, Expr::Rel(..)) => (op.flipped(), c.clone()),
        _ => return None,
    };
    match op {
        Rel::Gt => interval(bound, inf(), false, false),
        Rel::Ge => interval(bound, inf(), true, false),
        Rel::Lt => interval(neg_inf(), bound, false, false),
        Rel::Le => interval(neg_inf(), bound, false, true),
        _ => None,
    }
}

fn spend(budget: &mut Budget, n: u64) -> bool {
    budget.spend(n).is_ok()
}

/// Whether `answer` is equivalent to `gold` (both canonical).
pub fn equivalent(gold: &Expr, answer: &Expr, budget: &mut Budget) -> bool {
    if !spend(budget, 1) {
        return false;
    }
    if gold == answer {
        return true;
    }
    match (gold, answer) {
        // An assignment answers with its value: `x = 5` against `5`.
        (Expr::Rel(Rel::Eq, l, r), other) | (other, Expr::Rel(Rel::Eq, l, r))
            if !matches!(other, Expr::Rel(..)) =>
        {
            (is_label(l) && equivalent(r, other, budget))
                || (is_label(r) && equivalent(l, other, budget))
        }
        (Expr::Rel(op1, l1, r1), Expr::Rel(op2, l2, r2)) => {
            if *op1 == Rel::Eq && *op2 == Rel::Eq {
                if let (Expr::Sym(a), Expr::Sym(b)) = (&**l1, &**l2)
                    && a == b
                {
                    return equivalent(r1, r2, budget);
                }
                if let (Expr::Sym(a), Expr::Sym(b)) = (&**r1, &**r2)
                    && a == b
                {
                    return equivalent(l1, l2, budget);
                }
                let f1 = Expr::Add(vec![(**l1).clone(), Expr::Neg(r1.clone())]);
                let f2 = Expr::Add(vec![(**l2).clone(), Expr::Neg(r2.clone())]);
                return proportional(&f1, &f2, budget);
            }
            (op1 == op2 && equivalent(l1, l2, budget) && equivalent(r1, r2, budget))
                || (*op1 == op2.flipped()
                    && equivalent(l1, r2, budget)
                    && equivalent(r1, l2, budget))
        }
        (Expr::Set(a) | Expr::List(a), Expr::Set(b) | Expr::List(b)) => unordered(a, b, budget),
        (Expr::Union(a), Expr::Union(b)) => unordered(a, b, budget),
        (Expr::Tuple(a) | Expr::List(a), Expr::Tuple(b) | Expr::List(b)) => ordered(a, b, budget),
        // A one-element set answers with its element.
        (Expr::Set(a), other) | (other, Expr::Set(a)) if a.len() == 1 && other.is_scalar() => {
            equivalent(&a[0], other, budget)
        }
        (Expr::Interval(a1, b1, l1, r1), Expr::Interval(a2, b2, l2, r2)) => {
            let end_ok = |closed1: bool, closed2: bool, end: &Expr| {
                closed1 == closed2 || end.infinity_sign().is_some()
            };
            end_ok(*l1, *l2, a1)
                && end_ok(*r1, *r2, b1)
                && equivalent(a1, a2, budget)
                && equivalent(b1, b2, budget)
        }
        (Expr::Interval(a1, b1, false, false), Expr::Tuple(t))
        | (Expr::Tuple(t), Expr::Interval(a1, b1, false, false))
            if t.len() == 2 =>
        {
            equivalent(a1, &t[0], budget) && equivalent(b1, &t[1], budget)
        }
        (Expr::Matrix(a), Expr::Matrix(b)) => {
            a.len() == b.len()
                && a.iter().zip(b).all(|(ra, rb)| ra.len() == rb.len() && ordered(ra, rb, budget))
        }
        (Expr::Percent(p), other) | (other, Expr::Percent(p))
            if other.is_scalar() && !matches!(other, Expr::Percent(_)) =>
        {
            // 50% answers 0.5 and also 50.
            let as_fraction = Expr::Div(p.clone(), Box::new(Expr::Num(Rational::int(100))));
            scalar(&as_fraction, other, budget) || scalar(p, other, budget)
        }
        (g, a) if g.infinity_sign().is_some() || a.infinity_sign().is_some() => {
            g.infinity_sign() == a.infinity_sign()
        }
        (g, a) if g.is_scalar() && a.is_scalar() => scalar(g, a, budget),
        _ => false,
    }
}

/// What names a value in an assignment: a variable (`x`, `a_1`) or a function of one
/// (`f(x)`, parsed as the product `f·x`).
fn is_label(e: &Expr) -> bool {
    match e {
        Expr::Sym(_) => true,
        Expr::Mul(items) => {
            items.len() == 2
                && matches!(&items[0], Expr::Sym(f) if matches!(f.as_str(), "f" | "g" | "h" | "p" | "q" | "F" | "G" | "P"))
                && matches!(&items[1], Expr::Sym(_))
        }
        _ => false,
    }
}

fn ordered(a: &[Expr], b: &[Expr], budget: &mut Budget) -> bool {
    a.len() == b.len()
        && a.len() <= MAX_ITEMS
        && a.iter().zip(b).all(|(x, y)| equivalent(x, y, budget))
}

fn unordered(a: &[Expr], b: &[Expr], budget: &mut Budget) -> bool {
    if a.len() != b.len() || a.len() > MAX_ITEMS {
        return false;
    }
    let mut used = vec![false; b.len()];
    for x in a {
        let Some(j) = (0..b.len()).find(|&j| !used[j] && equivalent(x, &b[j], budget)) else {
            return false;
        };
        used[j] = true;
    }
    true
}

/// Bindings of `vars` for test point `t`: each variable gets a different point.
fn point(vars: &BTreeSet<String>, t: usize) -> Bindings {
    vars.iter()
        .enumerate()
        .map(|(k, name)| {
            let (n, d) = POINTS[(t + 5 * k) % POINTS.len()];
            (name.clone(), Value::Exact(Rational::new(n, d).expect("a valid point")))
        })
        .collect()
}

fn variables(a: &Expr, b: &Expr) -> BTreeSet<String> {
    let mut vars = BTreeSet::new();
    symbols(a, &mut vars);
    symbols(b, &mut vars);
    vars
}

/// Numeric or symbolic equality of two scalar expressions.
fn scalar(g: &Expr, a: &Expr, budget: &mut Budget) -> bool {
    let vars = variables(g, a);
    if vars.is_empty() {
        return match (eval(g, &Bindings::new(), budget), eval(a, &Bindings::new(), budget)) {
            (Ok(x), Ok(y)) => x.approx_eq(y),
            _ => false,
        };
    }
    let mut agree = 0;
    for t in 0..POINTS.len() {
        let at = point(&vars, t);
        match (eval(g, &at, budget), eval(a, &at, budget)) {
            (Ok(x), Ok(y)) => {
                if !x.approx_eq(y) {
                    return false;
                }
                agree += 1;
                if agree >= NEEDED + 2 {
                    return true;
                }
            }
            (Err(EvalError::Budget), _) | (_, Err(EvalError::Budget)) => return false,
            _ => {}
        }
    }
    agree >= NEEDED
}

/// Whether `f1 = k·f2` for a constant `k ≠ 0` (equations `f1 = 0` and `f2 = 0` agree).
fn proportional(f1: &Expr, f2: &Expr, budget: &mut Budget) -> bool {
    let vars = variables(f1, f2);
    let mut ratio: Option<Value> = None;
    let mut agree = 0;
    for t in 0..POINTS.len() {
        let at = point(&vars, t);
        let (Ok(x), Ok(y)) = (eval(f1, &at, budget), eval(f2, &at, budget)) else { continue };
        match (x.is_zero(), y.is_zero()) {
            (true, true) => continue,
            (false, false) => {}
            _ => return false,
        }
        let Ok(k) = eval(
            &Expr::Div(Box::new(value_expr(x)), Box::new(value_expr(y))),
            &Bindings::new(),
            budget,
        ) else {
            return false;
        };
        match ratio {
            None => ratio = Some(k),
            Some(r) if r.approx_eq(k) => {}
            Some(_) => return false,
        }
        agree += 1;
        if agree >= NEEDED + 2 {
            return true;
        }
    }
    agree >= NEEDED || (vars.is_empty() && ratio.is_some())
}

fn value_expr(v: Value) -> Expr {
    match v {
        Value::Exact(q) => Expr::Num(q),
        Value::Approx(c) if c.im == 0.0 => Expr::Float(c.re),
        Value::Approx(c) => {
            Expr::Add(vec![Expr::Float(c.re), Expr::Mul(vec![Expr::Float(c.im), Expr::I])])
        }
    }
}
