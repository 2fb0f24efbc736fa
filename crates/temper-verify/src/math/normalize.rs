//! Text-level clean-up of an answer before parsing: presentation LaTeX, units, degree signs,
//! thousands separators, punctuation.

/// Commands whose braced argument is text.
const TEXT_COMMANDS: &[&str] = &[
    "\\text",
    "\\textbf",
    "\\textit",
    "\\textnormal",
    "\\textsf",
    "\\texttt",
    "\\textup",
    "\\textrm",
    "\\mathrm",
    "\\mbox",
    "\\operatorname",
    "\\mathbf",
];

/// Words that end an answer but carry no value ("5 cm", "12 dollars").
fn is_unit_word(word: &str) -> bool {
    word.len() >= 2
        && word.chars().all(|c| c.is_ascii_alphabetic() || c == '.')
        && !matches!(
            word,
            "pi" | "or"
                | "and"
                | "sqrt"
                | "inf"
                | "infty"
                | "ln"
                | "log"
                | "sin"
                | "cos"
                | "tan"
                | "exp"
        )
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

/// "degrees" after a value is the degree sign.
fn is_degree_word(word: &str) -> bool {
    matches!(word.trim().to_ascii_lowercase().as_str(), "degree" | "degrees" | "deg")
}

/// Words that scale a number rather than name a unit.
fn scale(word: &str) -> Option<&'static str> {
    Some(match word.trim().to_ascii_lowercase().as_str() {
        "hundred" => "100",
        "thousand" => "1000",
        "million" => "1000000",
        "billion" => "1000000000",
        "trillion" => "1000000000000",
        "dozen" => "12",
        _ => return None,
    })
}

/// Unwraps `\text{...}`-style groups. A text group right after a value that closes the answer
/// is a unit: it is dropped and remembered in `units` (a scale word such as "thousand" becomes a
/// factor, "percent" a percent sign); elsewhere the group's content is kept.
fn unwrap_text(s: &str, units: &mut Vec<String>) -> String {
    let mut out = s.to_owned();
    let mut guard = 0;
    while let Some((start, cmd)) = TEXT_COMMANDS
        .iter()
        .filter_map(|c| out.find(&format!("{c}{{")).map(|i| (i, *c)))
        .min_by_key(|(i, _)| *i)
    {
        guard += 1;
        if guard > 64 {
            break;
        }
        let inner_start = start + cmd.len() + 1;
        let Some(len) = closing_brace(&out[inner_start..]) else { break };
        let inner = out[inner_start..inner_start + len].to_owned();
        let mut end = inner_start + len + 1;
        let before = out[..start].trim_end();
        let mut after = inner_start + len + 1;
        for exp in ["^2", "^3", "^{2}", "^{3}"] {
            if out[after..].starts_with(exp) {
                after += exp.len();
            }
        }
        let word = inner.trim();
        // A unit: words (a slash allowed) closing the answer, after a value.
        let spaced = inner.starts_with(' ') || out[..start].ends_with(['\u{1}', ' ']);
        let is_unit = cmd != "\\operatorname"
            && !word.is_empty()
            && word.chars().all(|c| c.is_ascii_alphabetic() || c == '/' || c == ' ')
            && (word.chars().count() > 1 || spaced)
            && out[after..].trim().is_empty()
            && !before.is_empty();
        let replacement = if is_unit {
            let unit = out[inner_start..after].replace(['{', '}'], "").trim().to_owned();
            end = after;
            if let Some(factor) = scale(word) {
                format!("\\cdot {factor}")
            } else if word.eq_ignore_ascii_case("percent") {
                "\\%".to_owned()
            } else if is_degree_word(word) {
                "°".to_owned()
            } else {
                units.push(unit);
                String::new()
            }
        } else if cmd == "\\operatorname" {
            format!("\\{}", inner.trim())
        } else {
            inner
        };
        out.replace_range(start..end, &replacement);
    }
    out
}

/// `0.\overline{3}`, `0.1\bar{6}` and `0.333\ldots` as exact fractions; `None` if `s` is not a
/// repeating decimal.
fn repeating_decimal(s: &str) -> Option<String> {
    let (body, repeat) = if let Some(i) = s.find("\\overline{").or_else(|| s.find("\\bar{")) {
        let open = s[i..].find('{')? + i + 1;
        let close = closing_brace(&s[open..])? + open;
        if !s[close + 1..].trim().is_empty() {
            return None;
        }
        (s[..i].to_owned(), s[open..close].trim().to_owned())
    } else {
        let stripped = ["\\ldots", "\\dots", "\\cdots", "..."]
            .iter()
            .find_map(|e| s.trim().strip_suffix(e))?;
        let digits = stripped.trim_end();
        let last = digits.chars().last()?;
        // A digit written at least twice before the dots is the repeating part.
        let run = digits.chars().rev().take_while(|c| *c == last).count();
        if !last.is_ascii_digit() || run < 2 {
            return None;
        }
        (digits[..digits.len() - 1].to_owned(), last.to_string())
    };
    let (sign, body) = match body.trim().strip_prefix('-') {
        Some(rest) => ("-", rest.trim().to_owned()),
        None => ("", body.trim().to_owned()),
    };
    let (int_part, frac_part) = body.split_once('.')?;
    let all_digits = |t: &str| t.bytes().all(|b| b.is_ascii_digit());
    if repeat.is_empty() || repeat.len() > 12 || frac_part.len() > 12 || int_part.len() > 12 {
        return None;
    }
    if !all_digits(int_part) || !all_digits(frac_part) || !all_digits(&repeat) {
        return None;
    }
    // x = I.F(R): x = (IFR − IF) / (10^{|F|}·(10^{|R|} − 1)).
    let whole: u128 = format!("{int_part}{frac_part}{repeat}").parse().ok()?;
    let head: u128 = format!("0{int_part}{frac_part}").parse().ok()?;
    let den = 10u128.pow(frac_part.len() as u32) * (10u128.pow(repeat.len() as u32) - 1);
    Some(format!("{sign}\\frac{{{}}}{{{den}}}", whole - head))
}

/// `{a \over b}` as `\frac{a}{b}`.
fn rewrite_over(s: &str) -> String {
    let mut out = s.to_owned();
    for _ in 0..16 {
        let Some(i) = out
            .match_indices("\\over")
            .map(|(i, _)| i)
            .find(|&i| !out[i + 5..].starts_with(|c: char| c.is_ascii_alphabetic()))
        else {
            break;
        };
        // The innermost group around it.
        let mut depth = 0i32;
        let Some(open) = out[..i].char_indices().rev().find_map(|(j, c)| {
            match c {
                '}' => depth += 1,
                '{' if depth == 0 => return Some(j),
                '{' => depth -= 1,
                _ => {}
            }
            None
        }) else {
            break;
        };
        let Some(close) = closing_brace(&out[i..]).map(|c| c + i) else { break };
        let (num, den) = (out[open + 1..i].to_owned(), out[i + 5..close].to_owned());
        out.replace_range(open..=close, &format!("\\frac{{{num}}}{{{den}}}"));
    }
    out
}

fn is_thousands_grouped(s: &str) -> bool {
    let digits = s.strip_prefix('-').unwrap_or(s);
    let int_part = digits.split('.').next().unwrap_or("");
    let groups: Vec<&str> = int_part.split(',').collect();
    groups.len() > 1
        && (1..=3).contains(&groups[0].len())
        && groups[1..].iter().all(|g| g.len() == 3)
        && groups.iter().all(|g| !g.is_empty() && g.bytes().all(|b| b.is_ascii_digit()))
        && digits.split('.').nth(1).is_none_or(|f| f.bytes().all(|b| b.is_ascii_digit()))
}

/// Resolves the thin spaces marked `\u{1}`: a comma between a digit and three digits, else a
/// plain space.
fn thin_spaces(s: &str) -> String {
    let chars: Vec<char> = s.chars().collect();
    let mut out = String::with_capacity(s.len());
    for (i, &c) in chars.iter().enumerate() {
        if c != '\u{1}' {
            out.push(c);
            continue;
        }
        let before = i > 0 && chars[i - 1].is_ascii_digit();
        let after = chars.len() >= i + 4
            && chars[i + 1..i + 4].iter().all(char::is_ascii_digit)
            && chars.get(i + 4).is_none_or(|c| !c.is_ascii_digit());
        out.push(if before && after { ',' } else { ' ' });
    }
    out
}

/// An answer's text, normalised for parsing, and the units that were dropped from it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Normalized {
    /// The value's text.
    pub text: String,
    /// Units written after the value ("cm", "m^2", "dollars"), in order.
    pub units: Vec<String>,
}

/// Normalises an answer's text for parsing.
pub fn normalize(answer: &str) -> String {
    normalize_with_units(answer).text
}

/// Normalises an answer's text for parsing, keeping the units it drops.
pub fn normalize_with_units(answer: &str) -> Normalized {
    let mut units = Vec::new();
    let mut s = answer.trim().to_owned();
    for (from, to) in [
        ("\\left.", ""),
        ("\\right.", ""),
        ("\\$", ""),
        ("$", ""),
        ("\\(", ""),
        ("\\)", ""),
        ("\\[", ""),
        ("\\]", ""),
        ("{,}", ","),
        ("\\,", "\u{1}"),
        ("\\!", ""),
        ("^\\circ", "°"),
        ("^{\\circ}", "°"),
        ("^{\\circ }", "°"),
        ("\\circ", "°"),
        ("\\degree", "°"),
        ("\\displaystyle", ""),
        ("\\dfrac", "\\frac"),
        ("\\tfrac", "\\frac"),
    ] {
        if s.contains(from) {
            s = s.replace(from, to);
        }
    }
    // "1 or 2", "x=1 and x=2": alternatives are a list; "or" is kept apart (`\lor`) because
    // inequalities joined by "or" are a union and joined by "and" (or commas) must all hold.
    for (word, sep) in [
        ("\\quad\\text{or}\\quad", " \\lor "),
        ("\\text{ or }", " \\lor "),
        ("\\text{or}", " \\lor "),
        (" or ", " \\lor "),
        ("\\text{ and }", ","),
        (" and ", ","),
    ] {
        if s.contains(word) {
            s = s.replace(word, sep);
        }
    }
    s = unwrap_text(&s, &mut units);
    if let Some(i) = s.find("\\pmod") {
        s.truncate(i);
    }
    if let Some(n) = number_word(&s) {
        s = n;
    }
    s = thin_spaces(&s);
    if s.contains("\\over") {
        s = rewrite_over(&s);
    }
    if let Some(rest) = s.strip_suffix(" percent") {
        s = format!("{rest}\\%");
    }
    // Trailing unit words after a value: "5 cm", "12 dollars"; scale words multiply.
    let words: Vec<&str> = s.split_whitespace().collect();
    if words.len() > 1 {
        let keep = words.iter().rposition(|w| !is_unit_word(w)).map_or(0, |i| i + 1);
        if keep > 0 && keep < words.len() {
            let head = words[..keep].join(" ");
            if head.chars().last().is_some_and(|c| c.is_ascii_digit() || c == ')' || c == '}') {
                let mut text = head;
                for w in &words[keep..] {
                    match scale(w) {
                        Some(factor) => text.push_str(&format!("\\cdot {factor}")),
                        None if is_degree_word(w) => text.push('°'),
                        None => units.push((*w).to_owned()),
                    }
                }
                s = text;
            }
        }
    }
    if let Some(fraction) = repeating_decimal(&s) {
        s = fraction;
    }
    let mut s = s.trim().trim_end_matches(['.', ',', ';']).trim().to_owned();
    let compact: String = s.chars().filter(|c| !c.is_whitespace()).collect();
    if is_thousands_grouped(&compact) {
        s = compact.replace(',', "");
    } else if is_space_grouped(&s) {
        s = compact;
    }
    Normalized { text: s, units }
}

/// A number written in words ("three", "one half", "two thirds"), as digits.
pub(crate) fn number_word(s: &str) -> Option<String> {
    const FRACTIONS: &[(&str, &str)] = &[
        ("half", "\\frac{1}{2}"),
        ("a half", "\\frac{1}{2}"),
        ("one half", "\\frac{1}{2}"),
        ("a third", "\\frac{1}{3}"),
        ("one third", "\\frac{1}{3}"),
        ("two thirds", "\\frac{2}{3}"),
        ("a quarter", "\\frac{1}{4}"),
        ("one quarter", "\\frac{1}{4}"),
        ("a fourth", "\\frac{1}{4}"),
        ("one fourth", "\\frac{1}{4}"),
        ("three quarters", "\\frac{3}{4}"),
        ("three fourths", "\\frac{3}{4}"),
        ("a fifth", "\\frac{1}{5}"),
        ("one fifth", "\\frac{1}{5}"),
    ];
    let w = s.trim().to_ascii_lowercase();
    if let Some((_, f)) = FRACTIONS.iter().find(|(name, _)| *name == w) {
        return Some((*f).to_owned());
    }
    whole_number_word(&w).map(|n| n.to_string())
}

/// A whole number from zero to twenty written as a word.
pub(crate) fn whole_number_word(w: &str) -> Option<u32> {
    const WORDS: &[&str] = &[
        "zero",
        "one",
        "two",
        "three",
        "four",
        "five",
        "six",
        "seven",
        "eight",
        "nine",
        "ten",
        "eleven",
        "twelve",
        "thirteen",
        "fourteen",
        "fifteen",
        "sixteen",
        "seventeen",
        "eighteen",
        "nineteen",
        "twenty",
    ];
    WORDS.iter().position(|x| x.eq_ignore_ascii_case(w.trim())).map(|i| i as u32)
}

/// `1 000 000`: digit groups of three after a first group of one to three.
fn is_space_grouped(s: &str) -> bool {
    let groups: Vec<&str> = s.trim().split(' ').collect();
    groups.len() > 1
        && (1..=3).contains(&groups[0].len())
        && groups[1..].iter().all(|g| g.len() == 3)
        && groups.iter().all(|g| !g.is_empty() && g.bytes().all(|b| b.is_ascii_digit()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalisation_table() {
        let cases = [
            ("$\\dfrac{1}{2}$", "\\frac{1}{2}"),
            ("5\\text{ cm}", "5"),
            ("10\\text{ cm}^2", "10"),
            ("\\text{Monday}", "Monday"),
            ("\\text{(C)}", "(C)"),
            ("90^\\circ", "90°"),
            ("1,000,000", "1000000"),
            ("1, 000", "1000"),
            ("1\\,000", "1000"),
            ("5\\,\\text{cm}", "5"),
            ("5\\,\\text{m}", "5"),
            ("1,2", "1,2"),
            ("12 dollars", "12"),
            ("x = 3.", "x = 3"),
            ("3 or 4", "3 \\lor 4"),
            ("x = -2 \\text{ or } x = 3", "x = -2  \\lor  x = 3"),
            ("x > 0 and x < 1", "x > 0,x < 1"),
            ("4 \\pi \\text{ cm}^2", "4 \\pi"),
            ("9 \\text{ m}^2", "9"),
            ("\\mathrm{e}^2", "e^2"),
            ("50 percent", "50\\%"),
            ("\\$4.50", "4.50"),
            ("x y", "x y"),
            ("0.\\overline{3}", "\\frac{3}{9}"),
            ("0.1\\bar{6}", "\\frac{15}{90}"),
            ("0.666...", "\\frac{600}{900}"),
            ("0.12...", "0.12"),
            ("0.33...", "\\frac{30}{90}"),
            ("\\text{three}", "3"),
            ("3 \\pmod{7}", "3"),
            ("{3\\over4}", "\\frac{3}{4}"),
            ("3\\text{ thousand}", "3\\cdot 1000"),
            ("25\\text{ percent}", "25\\%"),
            ("1 000 000", "1000000"),
            ("90 degrees", "90°"),
            ("one half", "\\frac{1}{2}"),
            ("Two thirds", "\\frac{2}{3}"),
            ("45\\text{ degrees}", "45°"),
        ];
        for (input, want) in cases {
            assert_eq!(normalize(input), want, "{input}");
        }
    }
}
