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

fn add(a: Value, b: Value) -> Result<Value, EvalError> {
    if let (Value::Exact(x), Value::Exact(y)) = (a, b)
        && let Some(q) = x.checked_add(y)
    {
        return Ok(Value::Exact(q));
    }
    approx(a.complex() + b.complex())
}

fn mul(a: Value, b: Value) -> Result<Value, EvalError> {
    if let (Value::Exact(x), Value::Exact(y)) = (a, b)
        && let Some(q) = x.checked_mul(y)
    {
        return Ok(Value::Exact(q));
    }
    approx(a.complex() * b.complex())
}

fn div(a: Value, b: Value) -> Result<Value, EvalError> {
    if b.is_zero() {
        return Err(EvalError::Undefined);
    }
    if let (Value::Exact(x), Value::Exact(y)) = (a, b)
        && let Some(q) = x.checked_div(y)
    {
        return Ok(Value::Exact(q));
    }
    approx(a.complex() / b.complex())
}

fn neg(a: Value) -> Result<Value, EvalError> {
    match a {
        Value::Exact(q) => q.checked_neg().map(Value::Exact).ok_or(EvalError::Undefined),
        Value::Approx(c) => Ok(Value::Approx(-c)),
    }
}

fn pow(base: Value, exponent: Value) -> Result<Value, EvalError> {
    if let (Value::Exact(b), Value::Exact(e)) = (base, exponent) {
        if b.is_zero() && e.num() <= 0 {
            return Err(EvalError::Undefined);
        }
        if e.is_integer() {
            if let Some(q) = i32::try_from(e.num()).ok().and_then(|n| b.powi(n)) {
                return Ok(Value::Exact(q));
            }
        } else if let Ok(k) = u32::try_from(e.den())
            && let Some(root) = b.root(k)
            && let Some(q) = i32::try_from(e.num()).ok().and_then(|n| root.powi(n))
        {
            return Ok(Value::Exact(q));
        }
    }
    let (b, e) = (base.complex(), exponent.complex());
    if b.norm() == 0.0 {
        return if e.re > 0.0 {
            Ok(Value::Exact(Rational::int(0)))
        } else {
            Err(EvalError::Undefined)
        };
    }
    // A real power of a positive real stays real.
    if b.im == 0.0 && b.re > 0.0 && e.im == 0.0 {
        return approx(Complex64::new(b.re.powf(e.re), 0.0));
    }
    approx((e * b.ln()).exp())
}

fn factorial(n: Value) -> Result<Value, EvalError> {
    let Value::Exact(q) = n else { return Err(EvalError::NotNumeric) };
    if !q.is_integer() || q.num() < 0 {
        return Err(EvalError::Undefined);
    }
    if q.num() > 170 {
        return Err(EvalError::Undefined);
    }
    let mut exact = Some(Rational::int(1));
    let mut float = 1.0f64;
    for k in 2..=q.num() {
        exact = exact.and_then(|acc| acc.checked_mul(Rational::int(k)));
        float *= k as f64;
    }
    Ok(exact.map_or(Value::Approx(Complex64::new(float, 0.0)), Value::Exact))
}

fn binom(n: Value, k: Value) -> Result<Value, EvalError> {
    let (Value::Exact(n), Value::Exact(k)) = (n, k) else { return Err(EvalError::NotNumeric) };
    if !n.is_integer() || !k.is_integer() || k.num() < 0 || n.num() < 0 {
        return Err(EvalError::Undefined);
    }
    if k.num() > n.num() {
        return Ok(Value::Exact(Rational::int(0)));
    }
    let k = k.num().min(n.num() - k.num());
    if k > 200 {
        return Err(EvalError::Undefined);
    }
    let mut acc = Value::Exact(Rational::int(1));
    for j in 0..k {
        acc = mul(acc, Value::Exact(Rational::int(n.num() - j)))?;
        acc = div(acc, Value::Exact(Rational::int(j + 1)))?;
    }
    Ok(acc)
}

fn apply(f: Func, x: Value) -> Result<Value, EvalError> {
    if f == Func::Abs
        && let Value::Exact(q) = x
    {
        return Ok(Value::Exact(if q.num() < 0 {
            q.checked_neg().ok_or(EvalError::Undefined)?
        } else {
            q
        }));
    }
    if f == Func::Sqrt {
        return pow(x, Value::Exact(Rational::new(1, 2).ok_or(EvalError::Undefined)?));
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
        Func::Sqrt => unreachable!("handled above"),
    };
    approx(v)
}

/// The value of `e` with `vars` bound; constants `π`, `e` and `i` are built in.
pub fn eval(e: &Expr, vars: &Bindings, budget: &mut Budget) -> Result<Value, EvalError> {
    budget.spend(1).map_err(|_| EvalError::Budget)?;
    let mut ev = |x: &Expr| eval(x, vars, budget);
    match e {
        Expr::Num(q) => Ok(Value::Exact(*q)),
        Expr::Float(x) => approx(Complex64::new(*x, 0.0)),
        Expr::Sym(name) => vars.get(name).copied().ok_or(EvalError::NotNumeric),
        Expr::Pi => Ok(Value::Approx(Complex64::new(std::f64::consts::PI, 0.0))),
        Expr::E => Ok(Value::Approx(Complex64::new(std::f64::consts::E, 0.0))),
        Expr::I => Ok(Value::Approx(Complex64::new(0.0, 1.0))),
        Expr::Add(items) => {
            let mut acc = Value::Exact(Rational::int(0));
            for item in items {
                acc = add(acc, ev(item)?)?;
            }
            Ok(acc)
        }
        Expr::Mul(items) => {
            let mut acc = Value::Exact(Rational::int(1));
            for item in items {
                acc = mul(acc, ev(item)?)?;
            }
            Ok(acc)
        }
        Expr::Neg(x) => neg(ev(x)?),
        Expr::Div(a, b) => {
            let a = ev(a)?;
            div(a, ev(b)?)
        }
        Expr::Pow(a, b) => {
            let a = ev(a)?;
            pow(a, ev(b)?)
        }
        Expr::Apply(f, x) => apply(*f, ev(x)?),
        Expr::Log(base, x) => {
            let b = ev(base)?;
            let x = ev(x)?;
            let (lb, lx) = (apply(Func::Ln, b)?, apply(Func::Ln, x)?);
            // Exact when x is an exact power of an exact base: log_2 8 = 3.
            let q = div(lx, lb)?;
            if let (Value::Exact(bq), Value::Exact(_), Value::Approx(c)) = (b, x, q) {
                let r = c.re.round();
                if (c.re - r).abs() < 1e-9
                    && c.im.abs() < 1e-12
                    && let Some(p) = bq.powi(r as i32)
                    && Value::Exact(p) == x
                {
                    return Ok(Value::Exact(Rational::int(r as i128)));
                }
            }
            Ok(q)
        }
        Expr::Root(n, x) => {
            let n = ev(n)?;
            let x = ev(x)?;
            // An odd root of a negative real is real: \sqrt[3]{-8} = -2.
            if let (Value::Exact(k), false) = (n, x.complex().im != 0.0)
                && k.is_integer()
                && k.num() % 2 != 0
                && x.complex().re < 0.0
            {
                let r = pow(neg(x)?, div(Value::Exact(Rational::int(1)), n)?)?;
                return neg(r);
            }
            pow(x, div(Value::Exact(Rational::int(1)), n)?)
        }
        Expr::Factorial(x) => factorial(ev(x)?),
        Expr::Binom(n, k) => {
            let n = ev(n)?;
            binom(n, ev(k)?)
        }
        Expr::Percent(x) => div(ev(x)?, Value::Exact(Rational::int(100))),
        Expr::Inf
        | Expr::PlusMinus(..)
        | Expr::Rel(..)
        | Expr::Tuple(_)
        | Expr::List(_)
        | Expr::Set(_)
        | Expr::Interval(..)
        | Expr::Union(_)
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
        | Expr::Interval(a, b, _, _) => {
            symbols(a, out);
            symbols(b, out);
        }
        Expr::Matrix(rows) => rows.iter().flatten().for_each(|x| symbols(x, out)),
    }
}
