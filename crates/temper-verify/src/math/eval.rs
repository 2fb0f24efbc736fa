//! Evaluating an expression at given values of its variables.

use std::collections::BTreeMap;

use num_complex::Complex64;

use super::expr::{Budget, Expr, Func};
use super::value::{Rational, Value};

/// Why an expression has no value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EvalError {
    /// Division by zero, a pole, or a value that is not finite.
    Undefined,
    /// Not a number (a set, a relation, an unbound variable, ∞).
    NotNumeric,
    /// The work budget ran out.
    Budget,
}

/// Values of variables.
pub type Bindings = BTreeMap<String, Value>;

fn approx(c: Complex64) -> Result<Value, EvalError> {
    if c.re.is_finite() && c.im.is_finite() {
        Ok(Value::Approx(c))
    } else {
        Err(EvalError::Undefined)
    }
}

fn exact(q: Rational) -> Value {
    Value::Exact(q)
}

fn add(a: &Value, b: &Value) -> Result<Value, EvalError> {
    if let (Value::Exact(x), Value::Exact(y)) = (a, b)
        && let Some(q) = x.checked_add(y)
    {
        return Ok(exact(q));
    }
    approx(a.complex() + b.complex())
}

fn mul(a: &Value, b: &Value) -> Result<Value, EvalError> {
    if let (Value::Exact(x), Value::Exact(y)) = (a, b)
        && let Some(q) = x.checked_mul(y)
    {
        return Ok(exact(q));
    }
    approx(a.complex() * b.complex())
}

fn div(a: &Value, b: &Value) -> Result<Value, EvalError> {
    if b.is_zero() {
        return Err(EvalError::Undefined);
    }
    if let (Value::Exact(x), Value::Exact(y)) = (a, b)
        && let Some(q) = x.checked_div(y)
    {
        return Ok(exact(q));
    }
    approx(a.complex() / b.complex())
}

fn neg(a: &Value) -> Result<Value, EvalError> {
    match a {
        Value::Exact(q) => q.checked_neg().map(exact).ok_or(EvalError::Undefined),
        Value::Approx(c) => Ok(Value::Approx(-c)),
    }
}

fn pow(base: &Value, exponent: &Value) -> Result<Value, EvalError> {
    if let (Value::Exact(b), Value::Exact(e)) = (base, exponent) {
        if b.is_zero() && (e.is_zero() || e.is_negative()) {
            return Err(EvalError::Undefined);
        }
        if let Some(n) = e.to_i64() {
            if let Some(q) = b.powi(n) {
                return Ok(exact(q));
            }
        } else if let (Some(k), Some(n)) = (e.denom_u32(), e.numer_i64())
            && let Some(root) = b.root(k)
            && let Some(q) = root.powi(n)
        {
            return Ok(exact(q));
        }
    }
    let (b, e) = (base.complex(), exponent.complex());
    if b.norm() == 0.0 {
        return if e.re > 0.0 { Ok(exact(Rational::int(0))) } else { Err(EvalError::Undefined) };
    }
    // A real power of a positive real stays real.
    if b.im == 0.0 && b.re > 0.0 && e.im == 0.0 {
        return approx(Complex64::new(b.re.powf(e.re), 0.0));
    }
    approx((e * b.ln()).exp())
}

/// Γ(x) for real x by the Lanczos approximation (g = 7), with reflection below 1/2.
fn gamma(x: f64) -> f64 {
    const G: f64 = 7.0;
    const C: [f64; 9] = [
        0.999_999_999_999_809_9,
        676.520_368_121_885_1,
        -1_259.139_216_722_402_8,
        771.323_428_777_653_1,
        -176.615_029_162_140_6,
        12.507_343_278_686_905,
        -0.138_571_095_265_720_12,
        9.984_369_578_019_572e-6,
        1.505_632_735_149_311_6e-7,
    ];
    if x < 0.5 {
        return std::f64::consts::PI / ((std::f64::consts::PI * x).sin() * gamma(1.0 - x));
    }
    let x = x - 1.0;
    let t = x + G + 0.5;
    let sum: f64 =
        C[0] + C[1..].iter().enumerate().map(|(i, c)| c / (x + i as f64 + 1.0)).sum::<f64>();
    (2.0 * std::f64::consts::PI).sqrt() * t.powf(x + 0.5) * (-t).exp() * sum
}

fn factorial(n: &Value) -> Result<Value, EvalError> {
    if let Value::Exact(q) = n
        && let Some(k) = q.to_i64()
    {
        if k < 0 {
            return Err(EvalError::Undefined);
        }
        if k <= 1000 {
            let mut acc = Rational::int(1);
            for i in 2..=k {
                match acc.checked_mul(&Rational::int(i128::from(i))) {
                    Some(next) => acc = next,
                    None => return Err(EvalError::Undefined),
                }
            }
            return Ok(exact(acc));
        }
        return Err(EvalError::Undefined);
    }
    // A non-integer (a variable's test point): Γ(x + 1).
    let z = n.complex();
    if z.im != 0.0 {
        return Err(EvalError::NotNumeric);
    }
    approx(Complex64::new(gamma(z.re + 1.0), 0.0))
}

/// C(n, k) for a non-negative integer k: n(n−1)…(n−k+1)/k!, for any n.
fn binom(n: &Value, k: &Value) -> Result<Value, EvalError> {
    let Value::Exact(k) = k else { return Err(EvalError::NotNumeric) };
    let Some(k) = k.to_i64().filter(|k| (0..=1000).contains(k)) else {
        return Err(EvalError::Undefined);
    };
    if let Value::Exact(nq) = n
        && let Some(nn) = nq.to_i64()
        && nn >= 0
        && k > nn
    {
        return Ok(exact(Rational::int(0)));
    }
    let mut acc = exact(Rational::int(1));
    for j in 0..k {
        let factor = add(n, &exact(Rational::int(-i128::from(j))))?;
        acc = mul(&acc, &factor)?;
        acc = div(&acc, &exact(Rational::int(i128::from(j + 1))))?;
    }
    Ok(acc)
}

fn apply(f: Func, x: &Value) -> Result<Value, EvalError> {
    match (f, x) {
        (Func::Abs, Value::Exact(q)) => {
            return Ok(exact(if q.is_negative() {
                q.checked_neg().ok_or(EvalError::Undefined)?
            } else {
                q.clone()
            }));
        }
        (Func::Floor | Func::Ceil, Value::Exact(q)) => {
            let v = q.to_f64();
            let r = if f == Func::Floor { v.floor() } else { v.ceil() };
            if r.abs() < 1e15 {
                return Ok(exact(Rational::int(r as i128)));
            }
        }
        (Func::Sqrt, _) => return pow(x, &exact(Rational::new(1, 2).ok_or(EvalError::Undefined)?)),
        _ => {}
    }
    let z = x.complex();
    let one = Complex64::new(1.0, 0.0);
    let v = match f {
        Func::Sin => z.sin(),
        Func::Cos => z.cos(),
        Func::Tan => z.tan(),
        Func::Cot => one / z.tan(),
        Func::Sec => one / z.cos(),
        Func::Csc => one / z.sin(),
        Func::Asin => z.asin(),
        Func::Acos => z.acos(),
        Func::Atan => z.atan(),
        Func::Sinh => z.sinh(),
        Func::Cosh => z.cosh(),
        Func::Tanh => z.tanh(),
        Func::Ln => {
            if z.norm() == 0.0 {
                return Err(EvalError::Undefined);
            }
            z.ln()
        }
        Func::Exp => z.exp(),
        Func::Abs => Complex64::new(z.norm(), 0.0),
        Func::Floor | Func::Ceil => {
            if z.im != 0.0 {
                return Err(EvalError::NotNumeric);
            }
            Complex64::new(if f == Func::Floor { z.re.floor() } else { z.re.ceil() }, 0.0)
        }
        Func::Sqrt => unreachable!("handled above"),
    };
    approx(v)
}

/// The value of `e` with `vars` bound; constants `π`, `e` and `i` are built in.
pub fn eval(e: &Expr, vars: &Bindings, budget: &mut Budget) -> Result<Value, EvalError> {
    budget.spend(1).map_err(|_| EvalError::Budget)?;
    let mut ev = |x: &Expr| eval(x, vars, budget);
    match e {
        Expr::Num(q) => Ok(exact(q.clone())),
        Expr::Float(x) => approx(Complex64::new(*x, 0.0)),
        Expr::Sym(name) => vars.get(name).cloned().ok_or(EvalError::NotNumeric),
        Expr::Pi => Ok(Value::Approx(Complex64::new(std::f64::consts::PI, 0.0))),
        Expr::E => Ok(Value::Approx(Complex64::new(std::f64::consts::E, 0.0))),
        Expr::I => Ok(Value::Approx(Complex64::new(0.0, 1.0))),
        Expr::Add(items) => {
            let mut acc = exact(Rational::int(0));
            for item in items {
                acc = add(&acc, &ev(item)?)?;
            }
            Ok(acc)
        }
        Expr::Mul(items) => {
            let mut acc = exact(Rational::int(1));
            for item in items {
                acc = mul(&acc, &ev(item)?)?;
            }
            Ok(acc)
        }
        Expr::Neg(x) => neg(&ev(x)?),
        Expr::Div(a, b) => {
            let a = ev(a)?;
            div(&a, &ev(b)?)
        }
        Expr::Pow(a, b) => {
            let a = ev(a)?;
            pow(&a, &ev(b)?)
        }
        Expr::Apply(f, x) => apply(*f, &ev(x)?),
        Expr::Log(base, x) => {
            let b = ev(base)?;
            let x = ev(x)?;
            let q = div(&apply(Func::Ln, &x)?, &apply(Func::Ln, &b)?)?;
            // Exact when x is an exact integer power of an exact base: log_2 8 = 3.
            if let (Value::Exact(bq), Value::Exact(xq), Value::Approx(c)) = (&b, &x, &q) {
                let r = c.re.round();
                if (c.re - r).abs() < 1e-9
                    && c.im.abs() < 1e-12
                    && bq.powi(r as i64).as_ref() == Some(xq)
                {
                    return Ok(exact(Rational::int(r as i128)));
                }
            }
            Ok(q)
        }
        Expr::Root(n, x) => {
            let n = ev(n)?;
            let x = ev(x)?;
            let inverse = div(&exact(Rational::int(1)), &n)?;
            // An odd root of a negative real is real: \sqrt[3]{-8} = -2.
            if let Value::Exact(k) = &n
                && k.to_i64().is_some_and(|k| k % 2 != 0)
                && x.complex().im == 0.0
                && x.complex().re < 0.0
            {
                return neg(&pow(&neg(&x)?, &inverse)?);
            }
            pow(&x, &inverse)
        }
        Expr::Factorial(x) => factorial(&ev(x)?),
        Expr::Binom(n, k) => {
            let n = ev(n)?;
            binom(&n, &ev(k)?)
        }
        Expr::Percent(x) => div(&ev(x)?, &exact(Rational::int(100))),
        Expr::Inf
        | Expr::PlusMinus(..)
        | Expr::Rel(..)
        | Expr::Tuple(_)
        | Expr::List(_)
        | Expr::Set(_)
        | Expr::Interval(..)
        | Expr::Union(_)
        | Expr::Minus(..)
        | Expr::All(_)
        | Expr::Matrix(_)
        | Expr::EmptySet => Err(EvalError::NotNumeric),
    }
}

/// Names of the variables in `e`.
pub fn symbols(e: &Expr, out: &mut std::collections::BTreeSet<String>) {
    match e {
        Expr::Sym(s) => {
            out.insert(s.clone());
        }
        Expr::Num(_)
        | Expr::Float(_)
        | Expr::Pi
        | Expr::E
        | Expr::I
        | Expr::Inf
        | Expr::EmptySet => {}
        Expr::Add(v)
        | Expr::Mul(v)
        | Expr::Tuple(v)
        | Expr::List(v)
        | Expr::Set(v)
        | Expr::All(v)
        | Expr::Union(v) => {
            v.iter().for_each(|x| symbols(x, out));
        }
        Expr::Neg(x) | Expr::Apply(_, x) | Expr::Factorial(x) | Expr::Percent(x) => symbols(x, out),
        Expr::Div(a, b)
        | Expr::Pow(a, b)
        | Expr::Log(a, b)
        | Expr::Root(a, b)
        | Expr::Binom(a, b)
        | Expr::PlusMinus(a, b)
        | Expr::Rel(_, a, b)
        | Expr::Minus(a, b)
        | Expr::Interval(a, b, _, _) => {
            symbols(a, out);
            symbols(b, out);
        }
        Expr::Matrix(rows) => rows.iter().flatten().for_each(|x| symbols(x, out)),
    }
}
