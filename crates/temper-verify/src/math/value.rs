//! Numbers: exact rationals while they fit, complex floating point otherwise.

use std::cmp::Ordering;
use std::fmt;

use num_complex::Complex64;

/// An exact rational `num/den` in lowest terms with `den > 0`, in 128-bit integers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Rational {
    num: i128,
    den: i128,
}

fn gcd(mut a: u128, mut b: u128) -> u128 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

impl Rational {
    /// `num/den`, reduced; `None` when `den` is 0 or the value does not fit.
    pub fn new(num: i128, den: i128) -> Option<Self> {
        if den == 0 {
            return None;
        }
        let g = gcd(num.unsigned_abs(), den.unsigned_abs()).max(1);
        let g = i128::try_from(g).ok()?;
        let (mut num, mut den) = (num / g, den / g);
        if den < 0 {
            num = num.checked_neg()?;
            den = den.checked_neg()?;
        }
        Some(Self { num, den })
    }

    /// An integer.
    pub fn int(n: i128) -> Self {
        Self { num: n, den: 1 }
    }

    /// Numerator.
    pub fn num(self) -> i128 {
        self.num
    }

    /// Denominator (positive).
    pub fn den(self) -> i128 {
        self.den
    }

    /// Whether the value is an integer.
    pub fn is_integer(self) -> bool {
        self.den == 1
    }

    /// Whether the value is zero.
    pub fn is_zero(self) -> bool {
        self.num == 0
    }

    /// Parses a decimal literal such as `12`, `0.25` or `.5`, optionally with an exponent
    /// (`1.5e3`); `None` when it does not fit exactly.
    pub fn parse_decimal(text: &str) -> Option<Self> {
        let (mantissa, exponent) = match text.find(['e', 'E']) {
            Some(i) => (&text[..i], text[i + 1..].parse::<i32>().ok()?),
            None => (text, 0),
        };
        let (int_part, frac_part) = mantissa.split_once('.').unwrap_or((mantissa, ""));
        let digits = |p: &str| p.bytes().all(|b| b.is_ascii_digit());
        if (int_part.is_empty() && frac_part.is_empty()) || !digits(int_part) || !digits(frac_part)
        {
            return None;
        }
        let all = format!("{int_part}{frac_part}");
        let all = all.trim_start_matches('0');
        if all.len() > 36 {
            return None;
        }
        let num: i128 = if all.is_empty() { 0 } else { all.parse().ok()? };
        let scale = i32::try_from(frac_part.len()).ok()? - exponent;
        let ten = Self::int(10);
        let value = Self::int(num);
        if scale >= 0 {
            value.checked_div(ten.powi(scale)?)
        } else {
            value.checked_mul(ten.powi(-scale)?)
        }
    }

    /// Sum.
    pub fn checked_add(self, o: Self) -> Option<Self> {
        let num = self.num.checked_mul(o.den)?.checked_add(o.num.checked_mul(self.den)?)?;
        Self::new(num, self.den.checked_mul(o.den)?)
    }

    /// Product.
    pub fn checked_mul(self, o: Self) -> Option<Self> {
        let g1 = gcd(self.num.unsigned_abs(), o.den.unsigned_abs()).max(1) as i128;
        let g2 = gcd(o.num.unsigned_abs(), self.den.unsigned_abs()).max(1) as i128;
        Self::new(
            (self.num / g1).checked_mul(o.num / g2)?,
            (self.den / g2).checked_mul(o.den / g1)?,
        )
    }

    /// Negation.
    pub fn checked_neg(self) -> Option<Self> {
        Some(Self { num: self.num.checked_neg()?, den: self.den })
    }

    /// Quotient; `None` for division by zero or overflow.
    pub fn checked_div(self, o: Self) -> Option<Self> {
        if o.num == 0 {
            return None;
        }
        self.checked_mul(Self::new(o.den, o.num)?)
    }

    /// Integer power (`|e|` at most 4096), exact or `None`.
    pub fn powi(self, e: i32) -> Option<Self> {
        if e.unsigned_abs() > 4096 {
            return None;
        }
        let mut base = if e < 0 { Self::int(1).checked_div(self)? } else { self };
        let mut e = e.unsigned_abs();
        let mut acc = Self::int(1);
        while e > 0 {
            if e & 1 == 1 {
                acc = acc.checked_mul(base)?;
            }
            e >>= 1;
            if e > 0 {
                base = base.checked_mul(base)?;
            }
        }
        Some(acc)
    }

    /// The exact `k`-th root, when the value is a perfect `k`-th power (non-negative for even
    /// `k`).
    pub fn root(self, k: u32) -> Option<Self> {
        if k == 0 || k > 64 || (k.is_multiple_of(2) && self.num < 0) {
            return None;
        }
        let r = |n: i128| -> Option<i128> {
            let sign = n.signum();
            let a = n.unsigned_abs();
            let guess = (a as f64).powf(1.0 / f64::from(k)).round() as u128;
            (guess.saturating_sub(1)..=guess + 1)
                .find(|&c| c.checked_pow(k) == Some(a))
                .and_then(|c| i128::try_from(c).ok())
                .map(|c| c * sign)
        };
        Self::new(r(self.num)?, r(self.den)?)
    }

    /// Closest `f64`.
    pub fn to_f64(self) -> f64 {
        self.num as f64 / self.den as f64
    }
}

impl PartialOrd for Rational {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Rational {
    fn cmp(&self, other: &Self) -> Ordering {
        match (self.num.checked_mul(other.den), other.num.checked_mul(self.den)) {
            (Some(a), Some(b)) => a.cmp(&b),
            _ => self.to_f64().total_cmp(&other.to_f64()),
        }
    }
}

impl fmt::Display for Rational {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.den == 1 {
            write!(f, "{}", self.num)
        } else {
            write!(f, "{}/{}", self.num, self.den)
        }
    }
}

/// A value: exact when it can be, complex floating point when it cannot.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Value {
    /// An exact rational.
    Exact(Rational),
    /// An approximation.
    Approx(Complex64),
}

impl Value {
    /// As a complex number.
    pub fn complex(self) -> Complex64 {
        match self {
            Self::Exact(q) => Complex64::new(q.to_f64(), 0.0),
            Self::Approx(c) => c,
        }
    }

    /// Whether every component is finite.
    pub fn is_finite(self) -> bool {
        match self {
            Self::Exact(_) => true,
            Self::Approx(c) => c.re.is_finite() && c.im.is_finite(),
        }
    }

    /// Whether the value is (approximately) zero.
    pub fn is_zero(self) -> bool {
        match self {
            Self::Exact(q) => q.is_zero(),
            Self::Approx(c) => c.norm() < 1e-12,
        }
    }

    /// Equal exactly when both are exact; otherwise within a relative tolerance of 1e-9 (with an
    /// absolute floor of 1e-12 near zero).
    pub fn approx_eq(self, other: Self) -> bool {
        match (self, other) {
            (Self::Exact(a), Self::Exact(b)) => a == b,
            _ => {
                let (a, b) = (self.complex(), other.complex());
                if !(self.is_finite() && other.is_finite()) {
                    return false;
                }
                let scale = a.norm().max(b.norm());
                (a - b).norm() <= 1e-9 * scale + 1e-12
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(n: i128, d: i128) -> Rational {
        Rational::new(n, d).expect("rational")
    }

    #[test]
    fn arithmetic_and_parsing() {
        assert_eq!(q(2, 4), q(1, 2));
        assert_eq!(q(1, -2), q(-1, 2));
        assert_eq!(q(1, 3).checked_add(q(1, 6)), Some(q(1, 2)));
        assert_eq!(q(2, 3).checked_mul(q(9, 4)), Some(q(3, 2)));
        assert_eq!(q(1, 2).checked_div(Rational::int(0)), None);
        assert_eq!(Rational::parse_decimal("0.25"), Some(q(1, 4)));
        assert_eq!(Rational::parse_decimal(".5"), Some(q(1, 2)));
        assert_eq!(Rational::parse_decimal("1.5e3"), Some(Rational::int(1500)));
        assert_eq!(Rational::parse_decimal("25E-2"), Some(q(1, 4)));
        assert_eq!(Rational::parse_decimal("1.2.3"), None);
        assert_eq!(Rational::int(2).powi(10), Some(Rational::int(1024)));
        assert_eq!(Rational::int(2).powi(-2), Some(q(1, 4)));
        assert_eq!(Rational::int(10).powi(40), None, "overflow is reported, not wrapped");
        assert_eq!(q(8, 27).root(3), Some(q(2, 3)));
        assert_eq!(Rational::int(-8).root(3), Some(Rational::int(-2)));
        assert_eq!(Rational::int(8).root(2), None);
        assert_eq!(Rational::int(-4).root(2), None);
        assert!(q(1, 3) < q(1, 2));
    }

    #[test]
    fn approximate_equality() {
        let third = Value::Exact(q(1, 3));
        assert!(!third.approx_eq(Value::Exact(q(33, 100))));
        assert!(third.approx_eq(Value::Approx(Complex64::new(1.0 / 3.0, 0.0))));
        assert!(
            !Value::Approx(Complex64::new(f64::INFINITY, 0.0))
                .approx_eq(Value::Approx(Complex64::new(f64::INFINITY, 0.0)))
        );
    }
}
