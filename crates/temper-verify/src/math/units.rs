//! Units an answer may be written in, and the factor between two of the same kind: `50 mm` is
//! `5 cm`, `2 hours` is `120 minutes`, `10 cm²` is `1000 mm²`. Factors are exact rationals (an
//! inch is 2.54 cm exactly, a pound 0.45359237 kg), so converted values still compare exactly.
//! Angles are not here: degrees and radians are handled where answers are compared.

/// Powers of length, mass and time.
type Dim = [i8; 3];

/// An exact factor `num/den` to the base unit of its kind (metre, gram, second).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Factor {
    pub num: i128,
    pub den: i128,
}

impl Factor {
    fn mul(self, o: Self) -> Option<Self> {
        Some(Self { num: self.num.checked_mul(o.num)?, den: self.den.checked_mul(o.den)? })
    }

    fn inv(self) -> Self {
        Self { num: self.den, den: self.num }
    }

    fn pow(self, n: u32) -> Option<Self> {
        Some(Self { num: self.num.checked_pow(n)?, den: self.den.checked_pow(n)? })
    }
}

fn base(name: &str) -> Option<(Dim, i128, i128)> {
    const L: Dim = [1, 0, 0];
    const M: Dim = [0, 1, 0];
    const T: Dim = [0, 0, 1];
    const V: Dim = [3, 0, 0];
    Some(match name {
        "mm" | "millimeter" | "millimeters" | "millimetre" | "millimetres" => (L, 1, 1000),
        "cm" | "centimeter" | "centimeters" | "centimetre" | "centimetres" => (L, 1, 100),
        "dm" | "decimeter" | "decimeters" => (L, 1, 10),
        "m" | "meter" | "meters" | "metre" | "metres" => (L, 1, 1),
        "km" | "kilometer" | "kilometers" | "kilometre" | "kilometres" => (L, 1000, 1),
        "in" | "inch" | "inches" => (L, 254, 10_000),
        "ft" | "foot" | "feet" => (L, 3048, 10_000),
        "yd" | "yard" | "yards" => (L, 9144, 10_000),
        "mi" | "mile" | "miles" => (L, 1_609_344, 1000),
        "mg" | "milligram" | "milligrams" => (M, 1, 1000),
        "g" | "gram" | "grams" => (M, 1, 1),
        "kg" | "kilogram" | "kilograms" => (M, 1000, 1),
        "t" | "tonne" | "tonnes" => (M, 1_000_000, 1),
        "lb" | "lbs" | "pound" | "pounds" => (M, 45_359_237, 100_000),
        "oz" | "ounce" | "ounces" => (M, 45_359_237, 1_600_000),
        "ms" | "millisecond" | "milliseconds" => (T, 1, 1000),
        "s" | "sec" | "secs" | "second" | "seconds" => (T, 1, 1),
        "min" | "mins" | "minute" | "minutes" => (T, 60, 1),
        "h" | "hr" | "hrs" | "hour" | "hours" => (T, 3600, 1),
        "day" | "days" => (T, 86_400, 1),
        "week" | "weeks" => (T, 604_800, 1),
        "ml" | "milliliter" | "milliliters" | "millilitre" | "millilitres" => (V, 1, 1_000_000),
        "l" | "liter" | "liters" | "litre" | "litres" => (V, 1, 1000),
        "mph" => ([1, 0, -1], 1_609_344, 3_600_000),
        "kph" | "kmh" => ([1, 0, -1], 1000, 3600),
        _ => return None,
    })
}

/// One unit with an optional power: `cm^2`, `square feet`, `cubic meters`, `m^3`.
fn power_unit(text: &str) -> Option<(Dim, Factor)> {
    let t = text.trim();
    let (t, mut n) = if let Some(rest) = t.strip_prefix("square ").or(t.strip_prefix("sq ")) {
        (rest, 2)
    } else if let Some(rest) = t.strip_prefix("cubic ") {
        (rest, 3)
    } else {
        (t, 1)
    };
    let t = match t.strip_suffix("^2").or(t.strip_suffix("²")) {
        Some(rest) => {
            n *= 2;
            rest
        }
        None => match t.strip_suffix("^3").or(t.strip_suffix("³")) {
            Some(rest) => {
                n *= 3;
                rest
            }
            None => t,
        },
    };
    let (dim, num, den) = base(&t.trim().to_ascii_lowercase())?;
    let factor = Factor { num, den }.pow(n)?;
    Some((dim.map(|d| d * n as i8), factor))
}

/// A unit, possibly a quotient (`km/h`, `meters per second`), as its kind and factor.
pub fn parse(text: &str) -> Option<(Dim, Factor)> {
    let t = text.trim();
    let (top, bottom) = match t.split_once('/').or_else(|| t.split_once(" per ")) {
        Some((a, b)) => (a, Some(b)),
        None => (t, None),
    };
    let (mut dim, mut factor) = power_unit(top)?;
    if let Some(bottom) = bottom {
        let (d, f) = power_unit(bottom)?;
        for (x, y) in dim.iter_mut().zip(d) {
            *x -= y;
        }
        factor = factor.mul(f.inv())?;
    }
    Some((dim, factor))
}

/// The factors that bring two units to one base: `(fa, fb)` with `a·fa` and `b·fb` in the same
/// unit; `None` when either is unknown or they measure different things.
pub fn conversion(a: &str, b: &str) -> Option<(Factor, Factor)> {
    let (da, fa) = parse(a)?;
    let (db, fb) = parse(b)?;
    (da == db).then_some((fa, fb))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn conversions() {
        let ratio = |a: &str, b: &str| {
            conversion(a, b).map(|(x, y)| (x.num * y.den) as f64 / (x.den * y.num) as f64)
        };
        assert_eq!(ratio("cm", "mm"), Some(10.0));
        assert_eq!(ratio("hours", "minutes"), Some(60.0));
        assert_eq!(ratio("cm^2", "mm^2"), Some(100.0));
        assert_eq!(ratio("square feet", "square inches"), Some(144.0));
        assert_eq!(ratio("km/h", "m/s"), Some(1.0 / 3.6));
        assert_eq!(ratio("L", "mL"), Some(1000.0));
        assert_eq!(ratio("cm^3", "mL"), Some(1.0));
        assert_eq!(ratio("ft", "in"), Some(12.0));
        assert_eq!(ratio("cm", "g"), None);
        assert_eq!(ratio("cm", "cm^2"), None);
        assert_eq!(ratio("apples", "cm"), None);
    }
}
