//! The expression tree that answers are parsed into, and the work budget every step spends.

use std::fmt;

use super::value::Rational;

/// Work units a verification may spend (parsing, evaluation and comparison together).
pub const DEFAULT_BUDGET: u64 = 200_000;

/// A counter of work left; every parser token, tree node evaluated and comparison spends some.
#[derive(Debug, Clone, Copy)]
pub struct Budget {
    left: u64,
}

/// The work budget ran out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Exhausted;

impl Budget {
    /// A budget of `units`.
    pub fn new(units: u64) -> Self {
        Self { left: units }
    }

    /// Spends `n` units.
    pub fn spend(&mut self, n: u64) -> Result<(), Exhausted> {
        self.left = self.left.checked_sub(n).ok_or(Exhausted)?;
        Ok(())
    }

    /// Units left.
    pub fn left(&self) -> u64 {
        self.left
    }
}

/// A relation between two expressions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rel {
    /// `=`
    Eq,
    /// `≠`
    Ne,
    /// `<`
    Lt,
    /// `≤`
    Le,
    /// `>`
    Gt,
    /// `≥`
    Ge,
    /// `∈`
    In,
}

impl Rel {
    /// The same relation with its sides swapped (`a < b` is `b > a`).
    pub fn flipped(self) -> Self {
        match self {
            Self::Lt => Self::Gt,
            Self::Le => Self::Ge,
            Self::Gt => Self::Lt,
            Self::Ge => Self::Le,
            other => other,
        }
    }
}

/// Functions of one argument.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Func {
    Sin,
    Cos,
    Tan,
    Cot,
    Sec,
    Csc,
    Asin,
    Acos,
    Atan,
    Sinh,
    Cosh,
    Tanh,
    Ln,
    Exp,
    Abs,
    Sqrt,
    Floor,
    Ceil,
}

/// A parsed answer.
#[derive(Debug, Clone, PartialEq)]
pub enum Expr {
    /// An exact number literal.
    Num(Rational),
    /// A number literal too large to hold exactly.
    Float(f64),
    /// A variable.
    Sym(String),
    /// π.
    Pi,
    /// Euler's number (`e`, `\mathrm{e}`).
    E,
    /// The imaginary unit (`i`).
    I,
    /// ∞ (negated for −∞).
    Inf,
    /// A sum.
    Add(Vec<Expr>),
    /// A product.
    Mul(Vec<Expr>),
    /// Negation.
    Neg(Box<Expr>),
    /// A quotient.
    Div(Box<Expr>, Box<Expr>),
    /// A power.
    Pow(Box<Expr>, Box<Expr>),
    /// A function applied to an argument.
    Apply(Func, Box<Expr>),
    /// `log_base(x)`.
    Log(Box<Expr>, Box<Expr>),
    /// The `n`-th root of `x`.
    Root(Box<Expr>, Box<Expr>),
    /// `n!`.
    Factorial(Box<Expr>),
    /// `C(n, k)`.
    Binom(Box<Expr>, Box<Expr>),
    /// `x%`.
    Percent(Box<Expr>),
    /// `a ± b`: both values.
    PlusMinus(Box<Expr>, Box<Expr>),
    /// A relation.
    Rel(Rel, Box<Expr>, Box<Expr>),
    /// An ordered tuple `(a, b, ...)`.
    Tuple(Vec<Expr>),
    /// A bare comma-separated list `a, b` (compared as unordered).
    List(Vec<Expr>),
    /// A set `\{a, b\}`.
    Set(Vec<Expr>),
    /// An interval with its end points and whether each end is closed.
    Interval(Box<Expr>, Box<Expr>, bool, bool),
    /// A union of intervals or sets.
    Union(Vec<Expr>),
    /// A set difference `A \setminus B`.
    Minus(Box<Expr>, Box<Expr>),
    /// Conditions that all hold: inequalities joined by commas or "and" (`x > 0, x \neq 1`).
    All(Vec<Expr>),
    /// A matrix, by rows.
    Matrix(Vec<Vec<Expr>>),
    /// ∅.
    EmptySet,
}

impl Expr {
    /// Whether this is a negated or plain infinity.
    pub fn infinity_sign(&self) -> Option<i8> {
        match self {
            Self::Inf => Some(1),
            Self::Neg(inner) => inner.infinity_sign().map(|s| -s),
            _ => None,
        }
    }

    /// Whether the expression is a plain scalar (no collections or relations).
    pub fn is_scalar(&self) -> bool {
        !matches!(
            self,
            Self::Rel(..)
                | Self::Tuple(_)
                | Self::List(_)
                | Self::Set(_)
                | Self::Interval(..)
                | Self::Union(_)
                | Self::Minus(..)
                | Self::All(_)
                | Self::Matrix(_)
                | Self::EmptySet
                | Self::PlusMinus(..)
        )
    }
}

fn join(f: &mut fmt::Formatter<'_>, items: &[Expr], sep: &str) -> fmt::Result {
    for (i, item) in items.iter().enumerate() {
        if i > 0 {
            f.write_str(sep)?;
        }
        write!(f, "{item}")?;
    }
    Ok(())
}

impl fmt::Display for Expr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Num(q) => write!(f, "{q}"),
            Self::Float(x) => write!(f, "{x:e}"),
            Self::Sym(s) => f.write_str(s),
            Self::Pi => f.write_str("π"),
            Self::E => f.write_str("e"),
            Self::I => f.write_str("i"),
            Self::Inf => f.write_str("∞"),
            Self::Add(items) => {
                f.write_str("(")?;
                join(f, items, " + ")?;
                f.write_str(")")
            }
            Self::Mul(items) => {
                f.write_str("(")?;
                join(f, items, "·")?;
                f.write_str(")")
            }
            Self::Neg(x) => write!(f, "-{x}"),
            Self::Div(a, b) => write!(f, "({a})/({b})"),
            Self::Pow(a, b) => write!(f, "({a})^({b})"),
            Self::Apply(func, x) => write!(f, "{func:?}({x})"),
            Self::Log(b, x) => write!(f, "log_{b}({x})"),
            Self::Root(n, x) => write!(f, "root_{n}({x})"),
            Self::Factorial(x) => write!(f, "({x})!"),
            Self::Binom(n, k) => write!(f, "C({n}, {k})"),
            Self::Percent(x) => write!(f, "{x}%"),
            Self::PlusMinus(a, b) => write!(f, "{a} ± {b}"),
            Self::Rel(r, a, b) => write!(f, "{a} {r:?} {b}"),
            Self::Tuple(items) => {
                f.write_str("tuple(")?;
                join(f, items, ", ")?;
                f.write_str(")")
            }
            Self::List(items) => {
                f.write_str("list(")?;
                join(f, items, ", ")?;
                f.write_str(")")
            }
            Self::Set(items) => {
                f.write_str("{")?;
                join(f, items, ", ")?;
                f.write_str("}")
            }
            Self::Interval(a, b, lc, rc) => {
                write!(f, "{}{a}, {b}{}", if *lc { '[' } else { '(' }, if *rc { ']' } else { ')' })
            }
            Self::Union(items) => join(f, items, " ∪ "),
            Self::Minus(a, b) => write!(f, "{a} \\ {b}"),
            Self::All(items) => {
                f.write_str("all(")?;
                join(f, items, ", ")?;
                f.write_str(")")
            }
            Self::Matrix(rows) => {
                f.write_str("matrix[")?;
                for (i, row) in rows.iter().enumerate() {
                    if i > 0 {
                        f.write_str("; ")?;
                    }
                    join(f, row, ", ")?;
                }
                f.write_str("]")
            }
            Self::EmptySet => f.write_str("∅"),
        }
    }
}
