//! Numbers: exact rationals (arbitrary precision, up to a size cap) while they can be, complex
//! floating point otherwise.

use std::fmt;

use num_bigint::BigInt;
use num_complex::Complex64;

use num_rational::BigRational;
use num_traits::{One, Signed, ToPrimitive, Zero};

/// Largest numerator or denominator kept exactly, in bits (about 2,500 decimal digits).
pub const MAX_BITS: u64 = 8192;

/// An exact rational in lowest terms, with numerator and denominator under [`MAX_BITS`].
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Rational(BigRational);

impl Rational {
    fn checked(value: BigRational) -> Option<Self> {
        (value.numer().bits() <= MAX_BITS && value.denom().bits() <= MAX_BITS)
            .then_some(Self(value))
    }

    /// `num/den`, reduced; `None` when `den` is 0.
    pub fn new(num: i128, den: i128) -> Option<Self> {
        if den == 0 {
            return None;
        }
        Self::checked(BigRational::new(BigInt::from(num), BigInt::from(den)))
    }

    /// An integer.
    pub fn int(n: i128) -> Self {
        Self(BigRational::from_integer(BigInt::from(n)))
    }

    /// Whether the value is an integer.
    pub fn is_integer(&self) -> bool {
        self.0.is_integer()
    }

    /// Whether the value is zero.
    pub fn is_zero(&self) -> bool {
        self.0.is_zero()
    }

    /// Whether the denominator is at most `limit`.
    pub fn denom_at_most(&self, limit: u64) -> bool {
        self.0.denom().to_u64().is_some_and(|d| d <= limit)
    }

    /// Whether the value is below zero.
    pub fn is_negative(&self) -> bool {
        self.0.is_negative()
    }

    /// The value as an `i64`, when it is an integer that fits.
    pub fn to_i64(&self) -> Option<i64> {
        if self.is_integer() { self.0.numer().to_i64() } else { None }
    }

    /// The numerator, when it fits an `i64`.
    pub fn numer_i64(&self) -> Option<i64> {
        self.0.numer().to_i64()
    }

    /// The denominator, when it fits a `u32`.
    pub fn denom_u32(&self) -> Option<u32> {
        self.0.denom().to_u32()
    }

    /// Parses a decimal literal such as `12`, `0.25` or `.5`, optionally with an exponent
    /// (`1.5e3`); `None` when it is malformed or too large to hold exactly.
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
        if int_part.len() + frac_part.len() > 2_400 || exponent.unsigned_abs() > 2_400 {
            return None;
        }
        let num: BigInt = format!("{int_part}{frac_part}0").parse::<BigInt>().ok()? / 10;
        let scale = i32::try_from(frac_part.len()).ok()? - exponent;
        let ten = BigInt::from(10).pow(scale.unsigned_abs());
        let value = if scale >= 0 {
            BigRational::new(num, ten)
        } else {
            BigRational::from_integer(num * ten)
        };
        Self::checked(value)
    }

    /// Sum, when it stays under the size cap.
    pub fn checked_add(&self, o: &Self) -> Option<Self> {
        Self::checked(&self.0 + &o.0)
    }

    /// Product, when it stays under the size cap.
    pub fn checked_mul(&self, o: &Self) -> Option<Self> {
        if self.0.numer().bits() + o.0.numer().bits() > MAX_BITS + 64 {
            return None;
        }
        Self::checked(&self.0 * &o.0)
    }

    /// Negation.
    pub fn checked_neg(&self) -> Option<Self> {
        Some(Self(-&self.0))
    }

    /// Quotient; `None` for division by zero or a result over the cap.
    pub fn checked_div(&self, o: &Self) -> Option<Self> {
        if o.0.is_zero() {
            return None;
        }
        Self::checked(&self.0 / &o.0)
    }

    /// Integer power, exact or `None` (too large, or 0 to a negative power).
    pub fn powi(&self, e: i64) -> Option<Self> {
        if self.0.is_zero() {
            return if e > 0 { Some(self.clone()) } else { None };
        }
        let bits = self.0.numer().bits().max(self.0.denom().bits()).max(1);
        if e.unsigned_abs().saturating_mul(bits) > MAX_BITS + 64 {
            return None;
        }
        let base = if e < 0 { BigRational::one() / &self.0 } else { self.0.clone() };
        Self::checked(num_traits::pow(base, usize::try_from(e.unsigned_abs()).ok()?))
    }

    /// The exact `k`-th root, when the value is a perfect `k`-th power (non-negative for even
    /// `k`).
    pub fn root(&self, k: u32) -> Option<Self> {
        if k == 0 || k > 64 || (k.is_multiple_of(2) && self.0.is_negative()) {
            return None;
        }
        let r = |n: &BigInt| {
            let c = n.nth_root(k);
            (num_traits::pow(c.clone(), k as usize) == *n).then_some(c)
        };
        Self::checked(BigRational::new(r(self.0.numer())?, r(self.0.denom())?))
    }

    /// Closest `f64` (infinite when out of range).
    pub fn to_f64(&self) -> f64 {
        self.0
            .to_f64()
            .unwrap_or_else(|| if self.0.is_negative() { f64::NEG_INFINITY } else { f64::INFINITY })
    }
}

impl fmt::Display for Rational {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.is_integer() {
            write!(f, "{}", self.0.numer())
        } else {
            write!(f, "{}/{}", self.0.numer(), self.0.denom())
        }
    }
}

/// Relative tolerance for values that are not both exact.
pub const REL_TOL: f64 = 1e-11;
/// Absolute tolerance near zero.
pub const ABS_TOL: f64 = 1e-15;

/// A value: exact when it can be, complex floating point when it cannot.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    /// An exact rational.
    Exact(Rational),
    /// An approximation.
    Approx(Complex64),
}

impl Value {
    /// As a complex number.
    pub fn complex(&self) -> Complex64 {
        match self {
            Self::Exact(q) => Complex64::new(q.to_f64(), 0.0),
            Self::Approx(c) => *c,
        }
    }

    /// Whether every component is finite.
    pub fn is_finite(&self) -> bool {
        let c = self.complex();
        c.re.is_finite() && c.im.is_finite()
    }

    /// Whether the value is (approximately) zero.
    pub fn is_zero(&self) -> bool {
        match self {
            Self::Exact(q) => q.is_zero(),
            Self::Approx(c) => c.norm() < ABS_TOL,
        }
    }

    /// Equal exactly when both are exact; otherwise within a relative [`REL_TOL`] (with an
    /// absolute floor of [`ABS_TOL`] near zero), loose enough for the rounding of
    /// `e^{iπ} = -1`. (Whether a decimal may stand for an irrational value is decided by the
    /// caller; see `compare`.)
    pub fn approx_eq(&self, other: &Self) -> bool {
        match (self, other) {
            (Self::Exact(a), Self::Exact(b)) => a == b,
            _ => {
                if !(self.is_finite() && other.is_finite()) {
                    return false;
                }
                let (a, b) = (self.complex(), other.complex());
                let scale = a.norm().max(b.norm());
                (a - b).norm() <= REL_TOL * scale + ABS_TOL
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
        assert_eq!(q(1, 3).checked_add(&q(1, 6)), Some(q(1, 2)));
        assert_eq!(q(2, 3).checked_mul(&q(9, 4)), Some(q(3, 2)));
        assert_eq!(q(1, 2).checked_div(&Rational::int(0)), None);
        assert_eq!(Rational::parse_decimal("0.25"), Some(q(1, 4)));
        assert_eq!(Rational::parse_decimal(".5"), Some(q(1, 2)));
        assert_eq!(Rational::parse_decimal("1.5e3"), Some(Rational::int(1500)));
        assert_eq!(Rational::parse_decimal("25E-2"), Some(q(1, 4)));
        assert_eq!(Rational::parse_decimal("1.2.3"), None);
        assert_eq!(Rational::int(2).powi(10), Some(Rational::int(1024)));
        assert_eq!(Rational::int(2).powi(-2), Some(q(1, 4)));
        assert_eq!(q(8, 27).root(3), Some(q(2, 3)));
        assert_eq!(Rational::int(-8).root(3), Some(Rational::int(-2)));
        assert_eq!(Rational::int(8).root(2), None);
        assert_eq!(Rational::int(-4).root(2), None);
        assert!(q(1, 3) < q(1, 2));
    }

    #[test]
    fn big_integers_stay_exact() {
        let a = Rational::parse_decimal("1234567890123456789012345678901234567890").expect("big");
        let b = Rational::parse_decimal("1234567890123456789012345678901234567891").expect("big");
        assert_ne!(a, b);
        let three = Rational::int(3).powi(100).expect("3^100");
        assert_eq!(three.to_string(), "515377520732011331036461129765621272702107522001");
        assert_eq!(Rational::int(10).powi(5000), None, "over the size cap");
    }

    #[test]
    fn approximate_equality() {
        let third = Value::Exact(q(1, 3));
        assert!(!third.approx_eq(&Value::Exact(q(33, 100))));
        assert!(third.approx_eq(&Value::Approx(Complex64::new(1.0 / 3.0, 0.0))));
        let pi = Value::Approx(Complex64::new(std::f64::consts::PI, 0.0));
        assert!(
            !pi.approx_eq(&Value::Exact(Rational::parse_decimal("3.141592654").expect("decimal")))
        );
        let inf = Value::Approx(Complex64::new(f64::INFINITY, 0.0));
        assert!(!inf.approx_eq(&inf.clone()));
    }
}
