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
//! - an assignment `x = 5` matches `5`; equations match up to a non-zero factor;
//! - a single letter `A`–`J` (optionally in parentheses) is a multiple-choice answer;
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
pub fn extract_answer(completion: &str) -> Option<&str> {
    let text = extract::strip_think(completion);
    if let Some(boxed) = extract::last_boxed(text) {
        return Some(boxed);
    }
    for marker in ["final answer is", "answer is:", "answer is", "final answer:", "answer:"] {
        if let Some(found) = extract::after_marker(text, marker) {
            return Some(found.trim_end_matches('.').trim());
        }
    }
    let trimmed = text.trim();
    (!trimmed.is_empty() && trimmed.chars().count() <= SHORT_ANSWER_CHARS).then_some(trimmed)
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
        extract_answer(gold).unwrap_or(gold)
    } else {
        gold
    };
    let Some(answer) = extract_answer(completion) else {
        return verdict(false, "no answer found", gold.to_owned(), String::new());
    };
    compare_answers(gold, answer)
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

fn text_key(s: &str) -> String {
    s.chars().filter(|c| c.is_alphanumeric()).flat_map(char::to_lowercase).collect()
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
    let (g, a) = (normalize(gold), normalize(answer));
    let verdict =
        |equivalent, rule| Verdict { equivalent, rule, gold: g.clone(), answer: a.clone() };
    if g.is_empty() || a.is_empty() {
        return verdict(false, "empty answer");
    }
    if g == a {
        return verdict(true, "identical after normalisation");
    }
    if let Some(gl) = letter(&g) {
        let al = letter(&a).or_else(|| crate::mcq::extract_letter(answer, 10));
        return verdict(al == Some(gl), "multiple-choice letter");
    }
    if has_words(&g) || has_words(&a) {
        return verdict(text_key(&g) == text_key(&a), "text");
    }
    let mut budget = expr::Budget::new(expr::DEFAULT_BUDGET);
    let (Some(ge), Some(ae)) = (parse::parse(&g, &mut budget), parse::parse(&a, &mut budget))
    else {
        return verdict(
            text_key(&g) == text_key(&a) && !text_key(&g).is_empty(),
            "unparsed, compared as text",
        );
    };
    let (ge, ae) = (compare::canonical(ge), compare::canonical(ae));
    let equivalent = compare::equivalent(&ge, &ae, &mut budget);
    Verdict {
        equivalent,
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
            ("7", Some("7")),
            (&"word ".repeat(50), None),
        ];
        for (text, want) in cases {
            assert_eq!(extract_answer(text), want, "{text}");
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
