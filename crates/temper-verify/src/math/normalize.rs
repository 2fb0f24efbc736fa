//! Text-level clean-up of an answer before parsing: presentation LaTeX, units, degree signs,
//! thousands separators, punctuation.

/// Commands whose braced argument is text.
const TEXT_COMMANDS: &[&str] = &[
    "\\text",
    "\\textbf",
    "\\textit",
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

/// Unwraps `\text{...}`-style groups. A text group right after a number or a closing bracket is
/// a unit and is dropped (with a following `^2`/`^3`); elsewhere its content is kept.
fn unwrap_text(s: &str) -> String {
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
        let is_unit = cmd != "\\operatorname"
            && !word.is_empty()
            && word.chars().all(|c| c.is_ascii_alphabetic() || c == '/' || c == ' ')
            && (word.chars().count() > 1 || inner.starts_with(' '))
            && out[after..].trim().is_empty()
            && !before.is_empty();
        let replacement = if is_unit {
            end = after;
            String::new()
        } else if cmd == "\\operatorname" {
            format!("\\{}", inner.trim())
        } else {
            inner
        };
        out.replace_range(start..end, &replacement);
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

/// Normalises an answer's text for parsing.
pub fn normalize(answer: &str) -> String {
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
        ("^\\circ", ""),
        ("^{\\circ}", ""),
        ("^{\\circ }", ""),
        ("\\circ", ""),
        ("°", ""),
        ("\\degree", ""),
        ("\\displaystyle", ""),
        ("\\dfrac", "\\frac"),
        ("\\tfrac", "\\frac"),
        ("\\le ", "\\le "),
    ] {
        if s.contains(from) {
            s = s.replace(from, to);
        }
    }
    // "1 or 2", "x=1 and x=2": alternatives are a list.
    for word in
        ["\\quad\\text{or}\\quad", "\\text{ or }", "\\text{or}", "\\text{ and }", " or ", " and "]
    {
        if s.contains(word) {
            s = s.replace(word, ",");
        }
    }
    s = unwrap_text(&s);
    // A thin space between digit groups separates thousands (1\,000); elsewhere it is a space.
    s = thin_spaces(&s);
    if let Some(rest) = s.strip_suffix(" percent") {
        s = format!("{rest}\\%");
    }
    // Trailing unit words after a value: "5 cm", "12 dollars".
    let words: Vec<&str> = s.split_whitespace().collect();
    if words.len() > 1 {
        let keep = words.iter().rposition(|w| !is_unit_word(w)).map_or(0, |i| i + 1);
        if keep > 0 && keep < words.len() {
            let head = words[..keep].join(" ");
            if head.chars().last().is_some_and(|c| c.is_ascii_digit() || c == ')' || c == '}') {
                s = head;
            }
        }
    }
    let mut s = s.trim().trim_end_matches(['.', ',', ';']).trim().to_owned();
    let compact: String = s.chars().filter(|c| !c.is_whitespace()).collect();
    if is_thousands_grouped(&compact) {
        s = compact.replace(',', "");
    }
    s
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
            ("90^\\circ", "90"),
            ("1,000,000", "1000000"),
            ("1, 000", "1000"),
            ("1\\,000", "1000"),
            ("5\\,\\text{cm}", "5"),
            ("1,2", "1,2"),
            ("12 dollars", "12"),
            ("x = 3.", "x = 3"),
            ("3 or 4", "3,4"),
            ("x = -2 \\text{ or } x = 3", "x = -2 , x = 3"),
            ("4 \\pi \\text{ cm}^2", "4 \\pi"),
            ("9 \\text{ m}^2", "9"),
            ("\\mathrm{e}^2", "e^2"),
            ("50 percent", "50\\%"),
            ("\\$4.50", "4.50"),
            ("x y", "x y"),
        ];
        for (input, want) in cases {
            assert_eq!(normalize(input), want, "{input}");
        }
    }
}
