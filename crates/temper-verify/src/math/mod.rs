//! The math answer verifier: is this completion's final answer the same as the reference?
//!
//! [`verify`] extracts the final answer from a completion ([`extract_answer`]: the last
//! `\boxed{}` or `\fbox{}` after think blocks are dropped, else a final "answer is ..." line,
//! else the whole text when it is short), normalises both answers (presentation LaTeX, `\text{}`
//! wrappers, units, degree signs, thousands separators, trailing punctuation), parses them into
//! expression trees and compares them ([`compare`]).
//!
//! Policies worth knowing:
//! - exact numbers compare exactly: `0.5 = \frac12`, but `0.33 ≠ \frac13`; irrational values
//!   compare to a relative 1e-9, so `2\sqrt2 = \sqrt8` and a decimal is never taken for `π`;
//! - a percentage `p\%` equals both `p/100` and `p` (answers often drop the sign);
//! - a bare list `1, 2` is unordered (several solutions); `(1, 2)` is an ordered tuple, which also
//!   matches the open interval `(1, 2)`; intervals compare their end types;
//! - an assignment `x = 5` matches `5`; equations match up to a non-zero factor; an answer that
//!   names what it gives matches a gold value (`(a,b) = (2,5)`, `AB = 4`, `S:T = 7:32`,
//!   `m + n = 3`), but one that computes it does not (`2x = 10` is not 10); a chain
//!   `x = 5+5+1 = 11` states its last value;
//! - relations in any spelling (`>=`, `\geq`, `\ge`, `!=`, `\neq`, `=<`) and the sets they
//!   describe compare by membership (module `sets`): `|x| > 1` is `(-\infty,-1)\cup(1,\infty)`,
//!   `[0,1]\cup[1,2]` is `[0,2]`, `\mathbb{R}\setminus\{0\}` and `\{x \mid x \ne 0\}` likewise;
//! - a scalar times a matrix is the matrix (`2\begin{pmatrix}1\\2\end{pmatrix}`); a union of
//!   finite sets is one set; `\tan^{-1}` is `\arctan`;
//! - a single letter `A`–`J` (optionally in parentheses) is a multiple-choice answer, which may be
//!   answered in lowercase;
//! - units: two answers that both name units must name the same ones or convertible ones (`50 mm`
//!   is `5 cm`, `2 hours` is `120 minutes`; see module `units`); `90°` equals `90` and `\frac{\pi}{2}`,
//!   and `\frac{\pi}{2}` radians, but not `90` radians;
//! - an answer with words of three or more letters is compared as text, case-insensitively.
//!
//! The work is bounded by construction, so no timeout is needed: inputs over
//! [`MAX_ANSWER_CHARS`] and extracted answers over [`MAX_EXTRACTED_CHARS`] are "not equivalent",
//! nesting is cut at [`parse::MAX_DEPTH`], and parsing,
//! evaluation and comparison share a budget of [`expr::DEFAULT_BUDGET`] units; when it runs out
//! the answer is "not equivalent".

mod compare;
mod eval;
pub mod expr;
mod normalize;
pub mod parse;
mod prose;
mod sets;
mod units;
pub mod value;

use crate::extract;
pub use normalize::normalize;

/// Inputs longer than this are never equivalent to anything.
pub const MAX_ANSWER_CHARS: usize = 50_000;
/// Longest extracted answer compared: a final answer is a value, not an essay, and this keeps
/// the slowest case well under a millisecond per thousand characters.
pub const MAX_EXTRACTED_CHARS: usize = 10_000;
/// Completions at most this long count as their own answer when nothing else is found.
pub const SHORT_ANSWER_CHARS: usize = 100;

/// The final answer of a completion.
///
/// In order: the last `\boxed{}`/`\fbox{}` outside think blocks (several boxes that end the
/// completion separated only by commas or "and" are one list: `\boxed{1}, \boxed{2}`); else
/// the text after the last "answer is", "Answer:" or GSM8K's `####`, cut at the end of its
/// sentence or at a reason ("because", "since", a parenthesis); else the value the closing prose
/// states ("the largest $n$ is 34", "Thus, $n = 7$."; see module `prose`); else the whole text when
/// short.
pub fn extract_answer(completion: &str) -> Option<String> {
    let text = extract::strip_think(completion);
    let text = text.as_ref();
    if let Some(boxes) = final_boxes(text) {
        // "\boxed{\text{The answer is } 5}": the marker inside the box still leads.
        return Some(after_markers(&boxes).unwrap_or(boxes));
    }
    if let Some(found) = after_markers(text) {
        return Some(found);
    }
    if let Some(found) = prose::answer(text) {
        return Some(found);
    }
    let trimmed = text.trim();
    (!trimmed.is_empty() && trimmed.chars().count() <= SHORT_ANSWER_CHARS)
        .then(|| trimmed.to_owned())
}

/// The text after the last answer marker, cut at the end of its sentence.
fn after_markers(text: &str) -> Option<String> {
    ["final answer is", "answer is:", "answer is", "final answer:", "answer:", "####"]
        .iter()
        .find_map(|marker| extract::after_marker(text, marker))
        .map(|found| cut_sentence(found.trim_start_matches(['}', ':', ' '])).to_owned())
        .filter(|s| !s.is_empty())
}

/// The last box, or the run of boxes that ends the text joined by commas.
fn final_boxes(text: &str) -> Option<String> {
    let mut rest = text;
    let mut boxes = Vec::new();
    loop {
        let last = extract::last_boxed(rest)?;
        boxes.push(last.to_owned());
        let start = ["\\boxed", "\\fbox"].iter().filter_map(|c| rest.rfind(c)).max()?;
        rest = &rest[..start];
        let gap = rest.trim_end().trim_end_matches('$').trim_end();
        let joined = gap
            .strip_suffix(',')
            .or_else(|| gap.strip_suffix("and"))
            .map(|g| g.trim_end().trim_end_matches('$'));
        match joined {
            Some(before) if before.trim_end().ends_with('}') && boxes.len() < 16 => rest = before,
            _ => break,
        }
    }
    boxes.reverse();
    Some(boxes.join(", "))
}

/// The answer part of "answer is X. I hope it is correct." or "X because ...".
fn cut_sentence(found: &str) -> &str {
    let mut end = found.len();
    for stop in [". ", " because", " since", " as ", " (", ", not ", "; ", " which "] {
        if let Some(i) = found.find(stop) {
            end = end.min(i);
        }
    }
    // Markdown emphasis, closing punctuation and a trailing comma are prose ("**Answer:** 16",
    // "is **2**.", "is 5!", "260 minutes, which ...").
    found[..end].trim_start_matches(['*', ' ']).trim_end_matches(['*', ' ', '.', '!', ',', ';'])
}

/// Whether `completion`'s final answer is equivalent to `gold` (which may itself be boxed).
pub fn verify(gold: &str, completion: &str) -> bool {
    explain(gold, completion).equivalent
}

/// The verdict and how it was reached.
#[derive(Debug, Clone, PartialEq)]
pub struct Verdict {
    /// Whether the answers are equivalent.
    pub equivalent: bool,
    /// Which rule decided.
    pub rule: &'static str,
    /// The gold answer as understood.
    pub gold: String,
    /// The extracted answer as understood.
    pub answer: String,
}

/// [`verify`] with its reasoning, for reports.
pub fn explain(gold: &str, completion: &str) -> Verdict {
    let verdict =
        |equivalent, rule, gold: String, answer: String| Verdict { equivalent, rule, gold, answer };
    if gold.len() > MAX_ANSWER_CHARS || completion.len() > MAX_ANSWER_CHARS {
        return verdict(false, "input too long", String::new(), String::new());
    }
    let gold = if gold.contains("\\boxed") || gold.contains("\\fbox") {
        extract_answer(gold).unwrap_or_else(|| gold.to_owned())
    } else {
        gold.to_owned()
    };
    let Some(answer) = extract_answer(completion) else {
        return verdict(false, "no answer found", gold, String::new());
    };
    compare_answers(&gold, &answer)
}

/// Whether two extracted answers are equivalent.
pub fn equivalent(gold: &str, answer: &str) -> bool {
    gold.len() <= MAX_ANSWER_CHARS
        && answer.len() <= MAX_ANSWER_CHARS
        && compare_answers(gold, answer).equivalent
}

fn letter(s: &str) -> Option<char> {
    let t = s.trim().trim_start_matches('(').trim_end_matches(')').trim();
    let mut chars = t.chars();
    match (chars.next(), chars.next()) {
        (Some(c), None) if ('A'..='J').contains(&c) => Some(c),
        _ => None,
    }
}

/// `(D) 17` or `(D)\ 17`: an option letter A–E in parentheses followed by its value.
fn lettered_value(s: &str) -> Option<(char, &str)> {
    let rest = s.trim().strip_prefix('(')?;
    let mut chars = rest.chars();
    let c = chars.next().filter(|c| ('A'..='E').contains(c))?;
    let value = chars.as_str().strip_prefix(')')?.trim_start_matches(['\\', ' ', '\u{1}']).trim();
    (!value.is_empty()).then_some((c, value))
}

/// A choice letter as answered: `C`, `(C)`, and also a lone lowercase `c` or `(c)`.
fn answered_letter(s: &str) -> Option<char> {
    letter(s).or_else(|| letter(&s.to_ascii_uppercase()).filter(|_| s.trim().len() <= 3))
}

/// Distinct option letters named in an answer as `(X)` or alone: more than one is a hedge.
fn letters_named(s: &str) -> std::collections::BTreeSet<char> {
    let b = s.as_bytes();
    s.char_indices()
        .filter(|&(i, c)| {
            ('A'..='J').contains(&c)
                && (i == 0 || !b[i - 1].is_ascii_alphanumeric())
                && b.get(i + 1).is_none_or(|n| !n.is_ascii_alphanumeric())
        })
        .map(|(_, c)| c)
        .collect()
}

/// Words of three or more letters that are not math (function names, constants).
fn has_words(s: &str) -> bool {
    const MATH: &[&str] = &[
        "sqrt",
        "frac",
        "dfrac",
        "tfrac",
        "pi",
        "infty",
        "inf",
        "infinity",
        "sin",
        "cos",
        "tan",
        "cot",
        "sec",
        "csc",
        "arcsin",
        "arccos",
        "arctan",
        "sinh",
        "cosh",
        "tanh",
        "log",
        "ln",
        "exp",
        "cdot",
        "times",
        "div",
        "pm",
        "mp",
        "left",
        "right",
        "begin",
        "end",
        "pmatrix",
        "bmatrix",
        "matrix",
        "leq",
        "geq",
        "neq",
        "cup",
        "emptyset",
        "varnothing",
        "binom",
        "dbinom",
        "circ",
        "alpha",
        "beta",
        "gamma",
        "delta",
        "theta",
        "lambda",
        "sigma",
        "omega",
        "phi",
        "epsilon",
        "mathbf",
        "mathrm",
        "operatorname",
        "abs",
        "lbrace",
        "rbrace",
        "vert",
        "quad",
        "displaystyle",
        "dots",
        "ldots",
        "cdots",
        "text",
        "approx",
        "mathbb",
        "lfloor",
        "rfloor",
        "lceil",
        "rceil",
        "langle",
        "rangle",
        "array",
        "overline",
    ];
    let mut word = String::new();
    let mut after_backslash = false;
    let check = |word: &str, cmd: bool| {
        word.len() >= 3 && !cmd && !MATH.contains(&word.to_ascii_lowercase().as_str())
    };
    for c in s.chars().chain(std::iter::once(' ')) {
        if c.is_ascii_alphabetic() {
            word.push(c);
            continue;
        }
        if check(&word, after_backslash) {
            return true;
        }
        after_backslash = c == '\\';
        word.clear();
    }
    false
}

/// Text for comparing answers as words: lowercase, without spaces or a final full stop, but with
/// every sign and operator kept (so `abc` never equals `a+b+c`).
fn text_key(s: &str) -> String {
    let key: String = s
        .trim()
        .trim_end_matches('.')
        .chars()
        .filter(|c| !c.is_whitespace())
        .flat_map(char::to_lowercase)
        .collect();
    // Phrases that mean the same answer.
    match key.as_str() {
        "dne" | "doesnotexist" | "undefined" | "doesn'texist" => "<does not exist>".to_owned(),
        "nosolution" | "nosolutions" | "norealsolution" | "norealsolutions" | "\\emptyset"
        | "\\varnothing" | "∅" | "\\{\\}" => "<empty set>".to_owned(),
        _ => key,
    }
}

/// Golds answered by a word or a letter before any math: a yes/no question answered in a
/// sentence ("No, such a function does not exist, ..."), and an option with its value, as AMC
/// answers are written (`(D) 17` is answered by D or by 17). `g` and `a` are normalised.
fn worded_or_lettered(g: &str, a: &str, answer: &str) -> Option<Verdict> {
    let verdict =
        |equivalent, rule| Verdict { equivalent, rule, gold: g.to_owned(), answer: a.to_owned() };
    let first_word = |s: &str| -> String {
        s.trim_start_matches(|c: char| !c.is_ascii_alphabetic())
            .split(|c: char| !c.is_ascii_alphabetic())
            .next()
            .unwrap_or("")
            .to_ascii_lowercase()
    };
    if matches!(text_key(g).as_str(), "yes" | "no" | "true" | "false") {
        return Some(verdict(first_word(g) == first_word(a), "yes or no"));
    }
    let (option, value) = lettered_value(g)?;
    if let Some(al) = answered_letter(a).or_else(|| crate::mcq::extract_letter(answer, 5)) {
        let single = letters_named(a).len() <= 1;
        return Some(verdict(single && al == option, "option letter of a lettered value"));
    }
    Some(Verdict { rule: "value of a lettered option", ..compare_answers(value, answer) })
}

fn compare_answers(gold: &str, answer: &str) -> Verdict {
    if gold.len() > MAX_EXTRACTED_CHARS || answer.len() > MAX_EXTRACTED_CHARS {
        return Verdict {
            equivalent: false,
            rule: "answer too long",
            gold: String::new(),
            answer: String::new(),
        };
    }
    let (gn, an) = (normalize::normalize_with_units(gold), normalize::normalize_with_units(answer));
    let (g, a) = (gn.text.clone(), an.text.clone());
    let verdict =
        |equivalent, rule| Verdict { equivalent, rule, gold: g.clone(), answer: a.clone() };
    if g.is_empty() || a.is_empty() {
        return verdict(false, "empty answer");
    }
    // Two answers that both name units must name the same ones: 5 m is not 5 cm.
    let unit_key = |u: &[String]| u.iter().map(|x| text_key(x)).collect::<Vec<_>>();
    if !gn.units.is_empty() && !an.units.is_empty() && unit_key(&gn.units) != unit_key(&an.units) {
        // 50 mm is 5 cm: bring both to one unit and compare the values.
        let Some((fg, fa)) = units::conversion(&gn.units.join(" "), &an.units.join(" ")) else {
            return verdict(false, "different units");
        };
        let scaled =
            |v: &str, f: units::Factor| format!("({v})\\cdot\\frac{{{}}}{{{}}}", f.num, f.den);
        let converted = compare_answers(&scaled(&g, fg), &scaled(&a, fa));
        return Verdict { rule: "converted units", ..converted };
    }
    // Degrees against radians: 90° is π/2, and never 90 radians.
    let radians = |u: &[String]| {
        u.iter().any(|u| matches!(text_key(u).as_str(), "rad" | "rads" | "radian" | "radians"))
    };
    let (g_deg, a_deg) = (g.ends_with('°'), a.ends_with('°'));
    let in_radians = |v: &str| format!("({})\\cdot\\frac{{\\pi}}{{180}}", v.trim_end_matches('°'));
    if (g_deg && radians(&an.units)) || (a_deg && radians(&gn.units)) {
        let (g2, a2) =
            if g_deg { (in_radians(&g), a.clone()) } else { (g.clone(), in_radians(&a)) };
        return Verdict { rule: "degrees as radians", ..compare_answers(&g2, &a2) };
    }
    if g == a {
        return verdict(true, "identical after normalisation");
    }
    if let Some(v) = worded_or_lettered(&g, &a, answer) {
        return v;
    }
    if let Some(gl) = letter(&g) {
        let named = letters_named(&a);
        if named.len() > 1 {
            return verdict(false, "several option letters");
        }
        let al = answered_letter(&a).or_else(|| crate::mcq::extract_letter(answer, 10));
        return verdict(al == Some(gl), "multiple-choice letter");
    }
    let wordy = has_words(&g) || has_words(&a);
    let mut budget = expr::Budget::new(expr::DEFAULT_BUDGET);
    let parsed = (parse::parse(&g, &mut budget), parse::parse(&a, &mut budget));
    if wordy && text_key(&g).starts_with('<') && text_key(&g) == text_key(&a) {
        return verdict(true, "text");
    }
    let (Some(ge), Some(ae)) = parsed else {
        let same = !text_key(&g).is_empty() && text_key(&g) == text_key(&a);
        return verdict(same, if wordy { "text" } else { "unparsed, compared as text" });
    };
    let (ge, ae) = (compare::canonical(ge), compare::canonical(ae));
    if compare::equivalent(&ge, &ae, &mut budget) {
        return Verdict {
            equivalent: true,
            rule: "math",
            gold: ge.to_string(),
            answer: ae.to_string(),
        };
    }
    // Words parse as products of letters (Monday = M·o·n·d·a·y); as text they may still agree.
    if wordy && text_key(&g) == text_key(&a) {
        return verdict(true, "text");
    }
    // An angle in degrees against a bare value in radians: 90° and π/2.
    let bare = |n: &normalize::Normalized| n.units.is_empty() && !n.text.contains('°');
    if (g_deg && bare(&an)) || (a_deg && bare(&gn)) {
        let (g2, a2) =
            if g_deg { (in_radians(&g), a.clone()) } else { (g.clone(), in_radians(&a)) };
        let converted = compare_answers(&g2, &a2);
        if converted.equivalent {
            return Verdict { rule: "degrees as radians", ..converted };
        }
    }
    Verdict {
        equivalent: false,
        rule: if budget.left() == 0 { "work budget exhausted" } else { "math" },
        gold: ge.to_string(),
        answer: ae.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn extraction() {
        let cases = [
            ("<think>\\boxed{1}</think> so \\boxed{\\frac{1}{2}}.", Some("\\frac{1}{2}")),
            ("Work.\nThe answer is 42.", Some("42")),
            ("Final answer: x = 3", Some("x = 3")),
            ("Final Answer: The final answer is 16. I hope it is correct.", Some("16")),
            ("The answer is 12 because 3 \\times 4 = 12.", Some("12")),
            ("so\n#### 72", Some("72")),
            ("The roots are $\\boxed{1}$, $\\boxed{2}$ and \\boxed{3}", Some("1, 2, 3")),
            ("First \\boxed{3}, then correcting: \\boxed{4}", Some("4")),
            ("7", Some("7")),
            (&"word ".repeat(50), None),
        ];
        for (text, want) in cases {
            assert_eq!(extract_answer(text).as_deref(), want, "{text}");
        }
    }

    #[test]
    fn quick_table() {
        let cases = [
            ("\\frac{1}{2}", "0.5", true),
            ("\\frac13", "0.33", false),
            ("2\\sqrt{2}", "\\sqrt{8}", true),
            ("(x+1)^2", "x^2+2x+1", true),
            ("x", "\\sqrt{x^2}", false),
            ("5", "x = 5", true),
            ("[1,2)", "[1,2]", false),
            ("\\{1,2\\}", "\\{2,1\\}", true),
            ("(1,2)", "(2,1)", false),
            ("50\\%", "0.5", true),
            ("C", "\\text{(C)}", true),
            ("\\text{Monday}", "monday", true),
            ("\\infty", "\\infty", true),
            ("-\\infty", "\\infty", false),
            ("1000", "1,000", true),
        ];
        for (gold, answer, want) in cases {
            let v = explain(gold, answer);
            assert_eq!(v.equivalent, want, "{gold} vs {answer}: {v:?}");
        }
    }
}
