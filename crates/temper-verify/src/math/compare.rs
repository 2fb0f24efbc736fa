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

use num_complex::Complex64;

use super::eval::{Bindings, EvalError, eval, symbols};
use super::expr::{Budget, Expr, Rel};
use super::sets::same_real_set;
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
    if !matches!(e, Expr::Matrix(_))
        && let Some(rows) = scaled_matrix(&e)
    {
        return canonical(Expr::Matrix(rows));
    }
    if e.is_scalar()
        && !matches!(e, Expr::PlusMinus(..))
        && let Some(values) = expand_plus_minus(&e)
    {
        return Expr::List(values);
    }
    match e {
        Expr::Rel(Rel::In, lhs, rhs) if matches!(*lhs, Expr::Sym(_)) => canonical(*rhs),
        // `x = 5 + 6 = 11`: a chain of equalities states its first and last terms.
        Expr::Rel(Rel::Eq, lhs, rhs) if matches!(*lhs, Expr::Rel(Rel::Eq, ..)) => {
            let mut first = *lhs;
            while let Expr::Rel(Rel::Eq, l, _) = first {
                first = *l;
            }
            canonical(Expr::Rel(Rel::Eq, Box::new(first), rhs))
        }
        // `\{1, 2\} \cup \{3\}` is the set `\{1, 2, 3\}`.
        Expr::Union(parts) if parts.iter().all(|p| matches!(p, Expr::Set(_))) => Expr::Set(
            parts
                .into_iter()
                .flat_map(|p| match p {
                    Expr::Set(items) => items,
                    _ => Vec::new(),
                })
                .map(canonical)
                .collect(),
        ),
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
        Expr::List(items) => {
            let items: Vec<Expr> = items.into_iter().map(canonical).collect();
            // "x < -1 or x > 1" is a union of intervals.
            if items.iter().all(|i| matches!(i, Expr::Interval(..))) {
                Expr::Union(items)
            } else {
                Expr::List(items)
            }
        }
        Expr::Set(items) => Expr::Set(items.into_iter().map(canonical).collect()),
        Expr::All(items) => Expr::All(items.into_iter().map(canonical).collect()),
        Expr::Tuple(items) => Expr::Tuple(items.into_iter().map(canonical).collect()),
        Expr::Rel(r, a, b) => Expr::Rel(r, Box::new(canonical(*a)), Box::new(canonical(*b))),
        other => other,
    }
}

/// The entries of a matrix times (or over) scalars, or negated: `2\begin{pmatrix}1\\2\end{pmatrix}`
/// is the matrix of 2 and 4.
fn scaled_matrix(e: &Expr) -> Option<Vec<Vec<Expr>>> {
    let map = |rows: Vec<Vec<Expr>>, f: &dyn Fn(Expr) -> Expr| -> Vec<Vec<Expr>> {
        rows.into_iter().map(|r| r.into_iter().map(f).collect()).collect()
    };
    match e {
        Expr::Matrix(rows) => Some(rows.clone()),
        Expr::Neg(x) => Some(map(scaled_matrix(x)?, &|v| Expr::Neg(Box::new(v)))),
        Expr::Div(m, k) if k.is_scalar() => {
            Some(map(scaled_matrix(m)?, &|v| Expr::Div(Box::new(v), k.clone())))
        }
        Expr::Mul(items) if items.len() > 1 => {
            let mut matrix = None;
            let mut scalars = Vec::new();
            for item in items {
                if item.is_scalar() {
                    scalars.push(item.clone());
                } else if matrix.is_none() {
                    matrix = Some(scaled_matrix(item)?);
                } else {
                    return None;
                }
            }
            let rows = matrix?;
            Some(map(rows, &|v| Expr::Mul(scalars.iter().cloned().chain([v]).collect())))
        }
        _ => None,
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
    // x ≠ c is everything but c.
    if *op == Rel::Ne
        && let (Expr::Sym(_), c) | (c, Expr::Sym(_)) = (&**lhs, &**rhs)
        && !matches!(c, Expr::Sym(_) | Expr::Rel(..))
    {
        return Some(Expr::Union(vec![
            Expr::Interval(Box::new(neg_inf()), Box::new(c.clone()), false, false),
            Expr::Interval(Box::new(c.clone()), Box::new(inf()), false, false),
        ]));
    }
    if !matches!(op, Rel::Lt | Rel::Le | Rel::Gt | Rel::Ge) {
        return None;
    }
    // a·x + b op c·x + d, linear in one variable: solve for x (flipping for a negative slope).
    let mut vars = BTreeSet::new();
    symbols(lhs, &mut vars);
    symbols(rhs, &mut vars);
    if vars.len() != 1 {
        return None;
    }
    let var = vars.into_iter().next()?;
    let f = Expr::Add(vec![(**lhs).clone(), Expr::Neg(rhs.clone())]);
    let mut budget = Budget::new(10_000);
    let at = |v: i128, budget: &mut Budget| match eval(
        &f,
        &Bindings::from([(var.clone(), Value::Exact(Rational::int(v)))]),
        budget,
    ) {
        Ok(Value::Exact(q)) => Some(q),
        _ => None,
    };
    let (f0, f1) = (at(0, &mut budget)?, at(1, &mut budget)?);
    let slope = f1.checked_add(&f0.checked_neg()?)?;
    if slope.is_zero() {
        return None;
    }
    // Linear: the same slope on both sides of zero and far out (|x| is not).
    for x in [-3i128, -1, 2, 7] {
        let expected = f0.checked_add(&slope.checked_mul(&Rational::int(x))?)?;
        if at(x, &mut budget)? != expected {
            return None;
        }
    }
    let root = Expr::Num(f0.checked_neg()?.checked_div(&slope)?);
    let op = if slope.is_negative() { op.flipped() } else { *op };
    match op {
        Rel::Gt => interval(root, inf(), false, false),
        Rel::Ge => interval(root, inf(), true, false),
        Rel::Lt => interval(neg_inf(), root, false, false),
        Rel::Le => interval(neg_inf(), root, false, true),
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
            let answered = matches!(answer, Expr::Rel(..));
            (is_label(l) && equivalent(r, other, budget))
                || (is_label(r) && equivalent(l, other, budget))
                // A worked computation ends in its result: `3 × 4 = 12` answers 12.
                || (is_constant(l) && is_constant(r) && equivalent(r, other, budget))
                // An answer that says what it gives, against a gold value: `m + n = 3`,
                // `AB = 4`, `S:T = 7:32`, `f(3) = 12` answer 3, 4, 7:32 and 12.
                || (answered
                    && is_constant(other)
                    && is_constant(r)
                    && names_quantity(l)
                    && equivalent(other, r, budget))
        }
        // (3, -1) against "y = -1, x = 3": assignments in the order of their variables.
        (Expr::Tuple(t), Expr::List(assignments)) | (Expr::List(assignments), Expr::Tuple(t))
            if assignments.len() == t.len()
                && assignments.iter().all(|a| assigned_var(a).is_some()) =>
        {
            let mut sorted: Vec<&Expr> = assignments.iter().collect();
            sorted.sort_by_key(|a| assigned_var(a).unwrap_or_default());
            t.iter().zip(sorted).all(|(x, a)| equivalent(x, a, budget))
        }
        (Expr::Set(a), Expr::Set(b)) => {
            let (a, b) = (dedupe(a, budget), dedupe(b, budget));
            unordered(&a, &b, budget)
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
        (Expr::Union(a), Expr::Union(b)) => {
            unordered(a, b, budget) || same_real_set(gold, answer, budget)
        }
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
        // `|x| > 1` against `(-∞, -1) ∪ (1, ∞)`, `[0, 1] ∪ [1, 2]` against `[0, 2]`.
        _ => same_real_set(gold, answer, budget),
    }
}

/// Whether `e` has no variables.
fn is_constant(e: &Expr) -> bool {
    let mut vars = BTreeSet::new();
    symbols(e, &mut vars);
    vars.is_empty()
}

/// Whether `e` names a quantity rather than computing one: a variable or a product of them
/// (`AB`, `a_1 a_2`), a sum or ratio of such names (`m + n`, `S:T`), a tuple of names, or a
/// function at a constant or an event (`f(3)`, `P(X=3)`). `2x` and `x^2` compute, so `2x = 10`
/// does not answer 10.
fn names_quantity(e: &Expr) -> bool {
    let symbol = |x: &Expr| matches!(x, Expr::Sym(_));
    match e {
        Expr::Sym(_) => true,
        Expr::Mul(items) => {
            items.iter().all(symbol)
                || (items.len() == 2
                    && symbol(&items[0])
                    && (is_constant(&items[1]) || matches!(items[1], Expr::Rel(..))))
        }
        Expr::Add(items) | Expr::Tuple(items) => items.iter().all(names_quantity),
        // `|z| = \sqrt2`, `|AB| = 5`
        Expr::Apply(super::expr::Func::Abs, x) => names_quantity(x),
        Expr::Div(a, b) => names_quantity(a) && names_quantity(b),
        _ => false,
    }
}

/// The variable of an assignment `x = value`.
fn assigned_var(e: &Expr) -> Option<String> {
    match e {
        Expr::Rel(Rel::Eq, l, _) => match &**l {
            Expr::Sym(name) => Some(name.clone()),
            _ => None,
        },
        _ => None,
    }
}

/// The elements of a set with repeats removed ({1, 2, 2} is {1, 2}).
fn dedupe(items: &[Expr], budget: &mut Budget) -> Vec<Expr> {
    let mut out: Vec<(Expr, Option<Complex64>)> = Vec::new();
    for item in items.iter().take(MAX_ITEMS) {
        let print = fingerprint(item, budget);
        if !out.iter().any(|(o, p)| may_match(*p, print) && equivalent(o, item, budget)) {
            out.push((item.clone(), print));
        }
    }
    out.into_iter().map(|(e, _)| e).collect()
}

/// A scalar's value with every variable set to a fixed irregular number, in floating point: a
/// cheap screen before the full comparison of collection elements.
fn fingerprint(e: &Expr, budget: &mut Budget) -> Option<Complex64> {
    if !e.is_scalar() {
        return None;
    }
    let mut vars = BTreeSet::new();
    symbols(e, &mut vars);
    let at: Bindings = vars
        .into_iter()
        .enumerate()
        .map(|(k, v)| (v, Value::Approx(Complex64::new(1.618_034 + 0.271_828 * k as f64, 0.0))))
        .collect();
    let c = eval(e, &at, budget).ok()?.complex();
    (c.re.is_finite() && c.im.is_finite()).then_some(c)
}

/// Whether two fingerprints leave room for the values to be equal.
fn may_match(a: Option<Complex64>, b: Option<Complex64>) -> bool {
    match (a, b) {
        (Some(a), Some(b)) => (a - b).norm() <= 1e-6 * a.norm().max(b.norm()) + 1e-12,
        _ => true,
    }
}

/// What names a value in an assignment: a variable (`x`, `a_1`) or a function of one
/// (`f(x)`, parsed as the product `f·x`).
fn is_label(e: &Expr) -> bool {
    match e {
        Expr::Sym(_) => true,
        // `(a, b) = (2, 5)`
        Expr::Tuple(items) => items.iter().all(|x| matches!(x, Expr::Sym(_))),
        Expr::Mul(items) => {
            items.len() == 2
                && match &items[0] {
                    Expr::Sym(f) => {
                        matches!(f.as_str(), "f" | "g" | "h" | "p" | "q" | "F" | "G" | "P")
                    }
                    // f^{-1}(x)
                    Expr::Pow(f, _) => {
                        matches!(&**f, Expr::Sym(f) if matches!(f.as_str(), "f" | "g" | "h"))
                    }
                    _ => false,
                }
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
    let prints_b: Vec<Option<Complex64>> = b.iter().map(|y| fingerprint(y, budget)).collect();
    let mut used = vec![false; b.len()];
    for x in a {
        let px = fingerprint(x, budget);
        let Some(j) = (0..b.len())
            .find(|&j| !used[j] && may_match(px, prints_b[j]) && equivalent(x, &b[j], budget))
        else {
            return false;
        };
        used[j] = true;
    }
    true
}

/// Bindings of `vars` for test point `t`. Each variable takes a different value, and the signs
/// run through every combination (variable `k` is negative when bit `k` of `t` is set), so that
/// `|xy|` and `xy` or `\sqrt{x^2y^2}` and `xy` differ at some point.
fn point(vars: &BTreeSet<String>, t: usize) -> Bindings {
    vars.iter()
        .enumerate()
        .map(|(k, name)| {
            let (n, d) = POINTS[(t * 7 + 3 * k) % POINTS.len()];
            let n = if (t >> (k % 4)) & 1 == 1 { -n.abs() } else { n.abs() };
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
            (Ok(x), Ok(y)) => numbers_equal(&x, &y),
            _ => false,
        };
    }
    let mut agree = 0;
    for t in 0..POINTS.len() {
        let at = point(&vars, t);
        // A quick floating-point look first: clearly different values end it without exact
        // arithmetic on large rationals.
        let rough: Bindings =
            at.iter().map(|(k, v)| (k.clone(), Value::Approx(v.complex()))).collect();
        if let (Ok(x), Ok(y)) = (eval(g, &rough, budget), eval(a, &rough, budget)) {
            let (x, y) = (x.complex(), y.complex());
            let scale = x.norm().max(y.norm());
            if x.re.is_finite()
                && x.im.is_finite()
                && y.re.is_finite()
                && y.im.is_finite()
                && (x - y).norm() > 1e-6 * scale + 1e-9
            {
                return false;
            }
        }
        match (eval(g, &at, budget), eval(a, &at, budget)) {
            (Ok(x), Ok(y)) => {
                if !x.approx_eq(&y) {
                    return false;
                }
                agree += 1;
            }
            (Err(EvalError::Budget), _) | (_, Err(EvalError::Budget)) => return false,
            _ => {}
        }
    }
    agree >= NEEDED
}

/// Two numbers, one of which may be exact: an exact rational with a denominator over 1000
/// (a long decimal such as 3.14159265358979, a close fraction such as 355/113) is never taken for
/// a value that could only be computed approximately (π, √2); simple ones are (sin(π/6) = 1/2,
/// e^{iπ} = −1).
fn numbers_equal(x: &Value, y: &Value) -> bool {
    match (x, y) {
        (Value::Exact(q), Value::Approx(_)) | (Value::Approx(_), Value::Exact(q))
            if !q.denom_at_most(1000) =>
        {
            false
        }
        _ => x.approx_eq(y),
    }
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
        match &ratio {
            None => ratio = Some(k),
            Some(r) if r.approx_eq(&k) => {}
            Some(_) => return false,
        }
        agree += 1;
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

/// Every sign choice of the `±` in `e` (at most 16), or `None` when there is none.
fn expand_plus_minus(e: &Expr) -> Option<Vec<Expr>> {
    let mut out = Vec::new();
    let mut budget = 15;
    expand_into(e, &mut out, &mut budget);
    (out.len() > 1).then_some(out)
}

fn expand_into(e: &Expr, out: &mut Vec<Expr>, budget: &mut usize) {
    if *budget == 0 {
        out.push(e.clone());
        return;
    }
    match first_plus_minus(e) {
        None => out.push(e.clone()),
        Some((a, b)) => {
            *budget -= 1;
            expand_into(&a, out, budget);
            expand_into(&b, out, budget);
        }
    }
}

/// The two expressions obtained by choosing `+` and then `-` for the first `±` in `e`.
fn first_plus_minus(e: &Expr) -> Option<(Expr, Expr)> {
    let in_list = |items: &Vec<Expr>, ctor: fn(Vec<Expr>) -> Expr| {
        items.iter().enumerate().find_map(|(i, item)| {
            first_plus_minus(item).map(|(a, b)| {
                let (mut xs, mut ys) = (items.clone(), items.clone());
                xs[i] = a;
                ys[i] = b;
                (ctor(xs), ctor(ys))
            })
        })
    };
    let in_pair = |x: &Expr, y: &Expr, ctor: fn(Box<Expr>, Box<Expr>) -> Expr| {
        first_plus_minus(x)
            .map(|(a, b)| {
                (ctor(Box::new(a), Box::new(y.clone())), ctor(Box::new(b), Box::new(y.clone())))
            })
            .or_else(|| {
                first_plus_minus(y).map(|(a, b)| {
                    (ctor(Box::new(x.clone()), Box::new(a)), ctor(Box::new(x.clone()), Box::new(b)))
                })
            })
    };
    match e {
        Expr::PlusMinus(a, b) => Some((
            Expr::Add(vec![(**a).clone(), (**b).clone()]),
            Expr::Add(vec![(**a).clone(), Expr::Neg(b.clone())]),
        )),
        Expr::Add(items) => in_list(items, Expr::Add),
        Expr::Mul(items) => in_list(items, Expr::Mul),
        Expr::Neg(x) => {
            first_plus_minus(x).map(|(a, b)| (Expr::Neg(Box::new(a)), Expr::Neg(Box::new(b))))
        }
        Expr::Div(x, y) => in_pair(x, y, Expr::Div),
        Expr::Pow(x, y) => in_pair(x, y, Expr::Pow),
        Expr::Apply(f, x) => first_plus_minus(x)
            .map(|(a, b)| (Expr::Apply(*f, Box::new(a)), Expr::Apply(*f, Box::new(b)))),
        _ => None,
    }
}
