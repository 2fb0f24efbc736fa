//! A simple math-answer checker: exact rational comparison of numbers, string comparison of
//! everything else, after light LaTeX normalisation.
//!
//! This is deliberately small: it accepts `0.5` for `\frac{1}{2}` and `1,000` for `1000`, but it
//! does not know algebra, sets or intervals (`x+1` and `1+x` differ). The full verifier replaces
//! it behind the same function.

/// Inputs longer than this are never equal to anything.
pub const MAX_ANSWER_CHARS: usize = 50_000;
const MAX_DIGITS: usize = 30;

/// Whether `answer` states the same value as `gold`.
pub fn math_equal(answer: &str, gold: &str) -> bool {
    if answer.len() > MAX_ANSWER_CHARS || gold.len() > MAX_ANSWER_CHARS {
        return false;
    }
    let (a, g) = (normalize(answer), normalize(gold));
    if a.is_empty() || g.is_empty() {
        return false;
    }
    match (parse_rational(&a), parse_rational(&g)) {
        (Some(x), Some(y)) => x == y,
        _ => a.eq_ignore_ascii_case(&g),
    }
}

/// Removes presentation-only LaTeX and punctuation: `$`, spacing commands, `\left`/`\right`,
/// `\text{}`-style wrappers, degree signs, whitespace, a trailing period and thousands commas;
/// `\dfrac`/`\tfrac` become `\frac`.
pub fn normalize(answer: &str) -> String {
    let mut s = answer.trim().to_owned();
    for wrapper in ["\\text{", "\\textbf{", "\\mathrm{", "\\mbox{"] {
        while let Some(start) = s.find(wrapper) {
            let inner_start = start + wrapper.len();
            let Some(len) = closing_brace(&s[inner_start..]) else { break };
            let inner = s[inner_start..inner_start + len].to_owned();
            s.replace_range(start..inner_start + len + 1, &inner);
        }
    }
    for (from, to) in [
        ("\\dfrac", "\\frac"),
        ("\\tfrac", "\\frac"),
        ("\\left", ""),
        ("\\right", ""),
        ("^\\circ", ""),
        ("^{\\circ}", ""),
        ("°", ""),
        ("\\!", ""),
        ("\\,", ""),
        ("\\;", ""),
        ("\\ ", ""),
        ("$", ""),
        ("~", ""),
    ] {
        s = s.replace(from, to);
    }
    s.retain(|c| !c.is_whitespace());
    while s.ends_with('.') {
        s.pop();
    }
    if is_thousands_grouped(&s) {
        s.retain(|c| c != ',');
    }
    s
}

fn closing_brace(s: &str) -> Option<usize> {
    let mut depth = 1usize;
    for (i, c) in s.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => {
                depth -= 1;
                if depth == 0 {
                    return Some(i);
                }
            }
            _ => {}
        }
    }
    None
}

fn is_thousands_grouped(s: &str) -> bool {
    let digits = s.strip_prefix('-').unwrap_or(s);
    let int_part = digits.split('.').next().unwrap_or("");
    let groups: Vec<&str> = int_part.split(',').collect();
    groups.len() > 1
        && (1..=3).contains(&groups[0].len())
        && groups[1..].iter().all(|g| g.len() == 3)
        && groups.iter().all(|g| g.bytes().all(|b| b.is_ascii_digit()))
}

/// An exact rational `num/den` in lowest terms with `den > 0`.
type Rational = (i128, i128);

fn parse_rational(s: &str) -> Option<Rational> {
    let (negative, body) = match s.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, s.strip_prefix('+').unwrap_or(s)),
    };
    let (num, den) = if let Some(frac) = body.strip_prefix("\\frac") {
        let (a, rest) = latex_arg(frac)?;
        let (b, rest) = latex_arg(rest)?;
        if !rest.is_empty() {
            return None;
        }
        divide(parse_decimal(a)?, parse_decimal(b)?)?
    } else if let Some((a, b)) = body.split_once('/') {
        divide(parse_decimal(a)?, parse_decimal(b)?)?
    } else {
        parse_decimal(body)?
    };
    Some(if negative { (-num, den) } else { (num, den) })
}

/// One argument of a LaTeX command: `{...}` or a single character.
fn latex_arg(s: &str) -> Option<(&str, &str)> {
    if let Some(inner) = s.strip_prefix('{') {
        let end = closing_brace(inner)?;
        return Some((&inner[..end], &inner[end + 1..]));
    }
    let c = s.chars().next()?;
    Some(s.split_at(c.len_utf8()))
}

fn parse_decimal(s: &str) -> Option<Rational> {
    let (int_part, frac_part) = s.split_once('.').unwrap_or((s, ""));
    let all_digits = |p: &str| p.bytes().all(|b| b.is_ascii_digit());
    if (int_part.is_empty() && frac_part.is_empty())
        || !all_digits(int_part)
        || !all_digits(frac_part)
        || int_part.len() + frac_part.len() > MAX_DIGITS
    {
        return None;
    }
    let digits = format!("{int_part}{frac_part}");
    let num: i128 = digits.parse().ok()?;
    let den = 10i128.checked_pow(u32::try_from(frac_part.len()).ok()?)?;
    Some(reduce(num, den))
}

fn divide(a: Rational, b: Rational) -> Option<Rational> {
    if b.0 == 0 {
        return None;
    }
    let num = a.0.checked_mul(b.1)?;
    let den = a.1.checked_mul(b.0)?;
    let (num, den) = if den < 0 { (-num, -den) } else { (num, den) };
    Some(reduce(num, den))
}

fn reduce(num: i128, den: i128) -> Rational {
    let (mut a, mut b) = (num.unsigned_abs(), den.unsigned_abs());
    while b != 0 {
        (a, b) = (b, a % b);
    }
    let g = a.max(1) as i128;
    (num / g, den / g)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn equal_table() {
        let cases = [
            ("0.5", "\\frac{1}{2}", true),
            ("\\dfrac12", "1/2", true),
            ("$1,000$", "1000", true),
            ("1,000.50", "1000.5", true),
            ("-\\frac{3}{6}", "-0.5", true),
            ("0.33", "\\frac13", false),
            ("\\text{Paris}", "paris", true),
            ("90^\\circ", "90", true),
            ("42.", "42", true),
            ("\\left(1,2\\right)", "(1,2)", true),
            ("7", "8", false),
            ("", "", false),
            ("1/0", "1/0", true),
            ("12,34", "1234", false),
        ];
        for (a, g, want) in cases {
            assert_eq!(math_equal(a, g), want, "{a:?} vs {g:?}");
        }
    }

    #[test]
    fn oversized_inputs_are_not_equal() {
        let huge = "1".repeat(MAX_ANSWER_CHARS + 1);
        assert!(!math_equal(&huge, &huge));
        // Too many digits to be exact: falls back to string comparison.
        let long = "9".repeat(40);
        assert!(math_equal(&long, &long));
        assert!(!math_equal(&long, "1"));
    }
}
