//! Final answers stated in prose, without a box or an answer marker: "the largest $n$ is 34",
//! "Thus, $n = 7$.", "So she spent a total of \$250.", a last line that is only the value.
//!
//! The answer is looked for in the last line that holds a number or math, in its last sentence
//! that does, in the conclusion of that sentence ("..., so the area is 12"), before any reason
//! ("since ..."). There it is what follows the last "is", "are", "equals" or "was" outside math,
//! else the last math (several spans joined by "and" or "or" are a list), else the last number;
//! a unit named right after the value is kept ("$1000$ meters"). A sentence without words is
//! its own answer; a text that stops mid-sentence ("... which equals") states nothing.
//! Everything here is linear in the text.

/// Bytes at the end of a completion looked at for a stated answer.
const PROSE_WINDOW: usize = 4096;

/// Verbs that introduce a stated value.
const COPULAS: &[&str] = &[" is ", " are ", " equals ", " was ", " were ", " be ", " becomes "];
/// Where a stated value ends and a reason or a correction begins.
const STOPS: &[&str] = &[
    ", since",
    " since ",
    " because",
    ", not ",
    ", which",
    " which ",
    " (since",
    " (because",
    " (as ",
    " (which",
    " (i.e.",
    " (that ",
];
/// Where a sentence's conclusion begins: what comes after is the result.
const CONCLUSIONS: &[&str] =
    &[", so ", "; so ", ", hence ", ", thus ", ", therefore ", ", giving "];
/// Words after which the value is a bound or a denial, not the answer ("at least 5", "not 9").
const HEDGES: &[&str] =
    &["not", "never", "no", "least", "most", "less", "more", "greater", "fewer", "than"];

/// The answer a completion states in its closing prose, if any.
pub fn answer(text: &str) -> Option<String> {
    if cut_off(text) {
        return None;
    }
    // A closing statement is near the end: only the last few thousand bytes are read.
    let mut start = text.len().saturating_sub(PROSE_WINDOW);
    while !text.is_char_boundary(start) {
        start += 1;
    }
    let text = &text[start..];
    let line = text.lines().rev().map(strip_markdown).find(|l| has_value(l))?;
    let sentence = sentences(&line).into_iter().rev().find(|s| has_value(s))?;
    let mut sentence = sentence.trim().trim_end_matches(['.', '!', '?', ':']).trim();
    // "6 choices for the first seat, so in total there are 720 arrangements": the conclusion.
    if let Some(at) = last_outside(sentence, CONCLUSIONS).filter(|&i| has_value(&sentence[i..])) {
        sentence = sentence[at..].trim();
    }
    // "X is 42 (since 6 times 7 is 42)": the reason is not the answer, unless nothing is left.
    let before_reason = &sentence[..stop_at(sentence)];
    let sentence = if has_value(before_reason) { before_reason.trim_end() } else { sentence };
    if !super::has_words(sentence) {
        return Some(sentence.to_owned());
    }
    if let Some(start) = last_outside(sentence, COPULAS) {
        let rest = &sentence[start..];
        let end = stop_at(rest);
        let rest = lead_words_dropped(rest[..end].trim().trim_end_matches([',', ';']).trim())?;
        let spans = math_spans(rest);
        if spans.is_empty() || only_connectors(rest, &spans) {
            return (!rest.is_empty()).then(|| rest.to_owned());
        }
        // "$x$ with $x \neq 0$": a lone variable names what the next span describes.
        let &(s, e) =
            spans.iter().find(|&&(s, e)| !is_lone_letter(inner(&rest[s..e]))).or(spans.first())?;
        return Some(with_unit(inner(&rest[s..e]), &rest[e..]));
    }
    let spans = math_spans(sentence);
    if let Some(&(s, e)) = spans.last() {
        // "$a = 2$ and $b = -3$": spans joined only by "and", "or" or commas are one list.
        let mut first = spans.len() - 1;
        while first > 0 && connectors_only(&sentence[spans[first - 1].1..spans[first].0]) {
            first -= 1;
        }
        if first < spans.len() - 1 {
            let items: Vec<&str> =
                spans[first..].iter().map(|&(a, b)| inner(&sentence[a..b])).collect();
            return Some(items.join(", "));
        }
        return Some(with_unit(inner(&sentence[s..e]), &sentence[e..]));
    }
    let Some(number) = last_number(sentence) else {
        return last_number_word(sentence);
    };
    let end = number.as_ptr() as usize - sentence.as_ptr() as usize + number.len();
    Some(with_unit(number, &sentence[end..]))
}

/// Where the text after the last of `markers` outside math starts.
fn last_outside(s: &str, markers: &[&str]) -> Option<usize> {
    let spans = math_spans(s);
    markers
        .iter()
        .filter_map(|m| {
            s.match_indices(m).filter(|(i, _)| !inside(&spans, *i)).last().map(|(i, m)| i + m.len())
        })
        .max()
}

fn is_lone_letter(s: &str) -> bool {
    let mut chars = s.trim().chars();
    matches!((chars.next(), chars.next()), (Some(c), None) if c.is_ascii_alphabetic())
}

/// `value` followed by the unit named right after it in `after` ("meters", "mL", "square
/// feet"), when there is one.
fn with_unit(value: &str, after: &str) -> String {
    let words: Vec<&str> = after.split_whitespace().take(2).collect();
    let clean = |w: &str| w.trim_end_matches(['.', ',', ';', ')']).to_owned();
    for n in (1..=words.len()).rev() {
        let unit = words[..n].iter().map(|w| clean(w)).collect::<Vec<_>>().join(" ");
        let angle = matches!(unit.as_str(), "degree" | "degrees" | "radian" | "radians");
        if angle || super::units::parse(&unit).is_some() {
            return format!("{value} \\text{{ {unit}}}");
        }
    }
    value.to_owned()
}

/// Whether the text stops in the middle of a sentence ("... and then we"): it states nothing.
fn cut_off(text: &str) -> bool {
    const JOINING: &[&str] = &[
        "a", "an", "and", "the", "with", "to", "of", "we", "then", "so", "is", "are", "that",
        "for", "in", "by", "which", "as", "or", "but", "get", "have", "equals", "gives", "yields",
        "makes", "becomes", "be", "might", "would", "will", "could", "should", "must", "can",
    ];
    let last = text.trim_end().rsplit(|c: char| !c.is_ascii_alphabetic()).next().unwrap_or("");
    JOINING.contains(&last.to_ascii_lowercase().as_str())
}

/// Where the first reason or correction starts outside math (the length when there is none).
fn stop_at(s: &str) -> usize {
    let spans = math_spans(s);
    STOPS
        .iter()
        .filter_map(|stop| s.match_indices(stop).map(|(i, _)| i).find(|i| !inside(&spans, *i)))
        .min()
        .unwrap_or(s.len())
}

/// The stated value without the words that lead to it: "the point (2, -1)" is `(2, -1)`,
/// "equal to 5" is `5`; `None` when one of them makes it a bound or a denial ("not 9").
fn lead_words_dropped(mut s: &str) -> Option<&str> {
    loop {
        if super::normalize::number_word(s).is_some() {
            return Some(s);
        }
        let word_end = s.find(|c: char| !c.is_ascii_alphabetic()).unwrap_or(s.len());
        if word_end < 2 || !s[word_end..].starts_with(' ') {
            return Some(s);
        }
        if HEDGES.contains(&s[..word_end].to_ascii_lowercase().as_str()) {
            return None;
        }
        s = s[word_end..].trim_start();
    }
}

/// A line without Markdown emphasis, heading marks or a list bullet.
fn strip_markdown(line: &str) -> String {
    line.replace("**", "").trim().trim_start_matches(['#', '>', '-', '*']).trim().to_owned()
}

/// Whether the text holds a digit, math or a number in words ("three", "half").
fn has_value(s: &str) -> bool {
    s.bytes().any(|b| b.is_ascii_digit())
        || !math_spans(s).is_empty()
        || last_number_word(s).is_some()
}

/// The last number written in words, as digits: "three" (but not "one", which is as often a
/// pronoun), "half", "two thirds".
fn last_number_word(s: &str) -> Option<String> {
    const FRACTIONS: &[&str] =
        &["half", "third", "thirds", "quarter", "quarters", "fourth", "fourths", "fifth"];
    let words: Vec<&str> = s
        .split(|c: char| !c.is_ascii_alphabetic())
        .filter(|w| (3..=9).contains(&w.len()))
        .collect();
    (0..words.len()).rev().find_map(|i| {
        let w = words[i];
        if FRACTIONS.iter().any(|f| f.eq_ignore_ascii_case(w)) {
            let pair = i.checked_sub(1).map(|j| format!("{} {w}", words[j]));
            return pair
                .and_then(|p| super::normalize::number_word(&p))
                .or_else(|| super::normalize::number_word(w));
        }
        if w.eq_ignore_ascii_case("one") {
            return None;
        }
        super::normalize::whole_number_word(w).map(|n| n.to_string())
    })
}

/// The sentences of a line, split after `.`, `!` or `?` followed by a space, outside math.
fn sentences(line: &str) -> Vec<&str> {
    let spans = math_spans(line);
    let bytes = line.as_bytes();
    let mut out = Vec::new();
    let mut start = 0;
    for (i, &b) in bytes.iter().enumerate() {
        let ends = matches!(b, b'.' | b'!' | b'?')
            && bytes.get(i + 1) == Some(&b' ')
            && !inside(&spans, i);
        if ends {
            out.push(&line[start..=i]);
            start = i + 1;
        }
    }
    out.push(&line[start..]);
    out
}

/// Byte ranges of the math in `s`, delimiters included: `$...$`, `$$...$$`, `\(...\)`,
/// `\[...\]`. An escaped dollar (`\$`) is a currency sign, not math.
fn math_spans(s: &str) -> Vec<(usize, usize)> {
    let b = s.as_bytes();
    let mut spans = Vec::new();
    let mut i = 0;
    while i < b.len() {
        let (open, close): (&[u8], &[u8]) = match b[i] {
            b'$' if b.get(i + 1) == Some(&b'$') => (b"$$", b"$$"),
            b'$' => (b"$", b"$"),
            b'\\' if b.get(i + 1) == Some(&b'(') => (b"\\(", b"\\)"),
            b'\\' if b.get(i + 1) == Some(&b'[') => (b"\\[", b"\\]"),
            b'\\' => {
                i += 2;
                continue;
            }
            _ => {
                i += 1;
                continue;
            }
        };
        let from = i + open.len();
        if open == b"$" && b.get(from).is_some_and(u8::is_ascii_digit) {
            // "$7 per hour, so he earns $42": a dollar sign before a number is currency when
            // what it would enclose is prose.
            let close = b[from..].iter().position(|&c| c == b'$').map(|k| from + k);
            let prose = |t: &str| {
                t.split_whitespace().any(|w| {
                    let w = w.trim_end_matches([',', '.', ';', ':']);
                    w.len() >= 3 && w.bytes().all(|c| c.is_ascii_alphabetic())
                })
            };
            if close.is_none_or(|c| prose(&s[from..c])) {
                i += 1;
                continue;
            }
        }
        let mut j = from;
        let mut end = None;
        while j + close.len() <= b.len() {
            if b[j] == b'\\' && close[0] == b'$' {
                j += 2;
                continue;
            }
            if &b[j..j + close.len()] == close {
                end = Some(j + close.len());
                break;
            }
            j += 1;
        }
        match end {
            Some(e) => {
                spans.push((i, e));
                i = e;
            }
            None => break,
        }
    }
    spans
}

/// Whether byte `i` lies strictly inside one of `spans` (sorted, not overlapping).
fn inside(spans: &[(usize, usize)], i: usize) -> bool {
    let k = spans.partition_point(|&(start, _)| start < i);
    k > 0 && i < spans[k - 1].1
}

/// The math inside a span, without its delimiters.
fn inner(span: &str) -> &str {
    let t = span.trim_matches('$');
    t.strip_prefix("\\(")
        .and_then(|t| t.strip_suffix("\\)"))
        .or_else(|| t.strip_prefix("\\[").and_then(|t| t.strip_suffix("\\]")))
        .unwrap_or(t)
        .trim()
}

/// Whether the text between the math spans is only "or", "and" and punctuation: a list of
/// values (`$(1, 2)$ or $(3, 4)$`).
fn only_connectors(s: &str, spans: &[(usize, usize)]) -> bool {
    let mut prev = 0;
    let mut gaps = String::new();
    for &(a, b) in spans {
        gaps.push_str(&s[prev..a]);
        gaps.push(' ');
        prev = b;
    }
    gaps.push_str(&s[prev..]);
    spans.len() > 1 && connectors_only(&gaps)
}

/// Whether `gap` holds nothing but "or", "and", commas, semicolons and spaces.
fn connectors_only(gap: &str) -> bool {
    gap.split(|c: char| c.is_whitespace() || matches!(c, ',' | ';' | '.'))
        .all(|w| w.is_empty() || w == "or" || w == "and")
}

/// The last number in the text, with its sign, decimals, a fraction bar or a percent sign.
fn last_number(s: &str) -> Option<&str> {
    let b = s.as_bytes();
    let end = b.iter().rposition(u8::is_ascii_digit)? + 1;
    let mut start = end;
    while start > 0 {
        let c = b[start - 1];
        let digit_before = start >= 2 && b[start - 2].is_ascii_digit();
        if c.is_ascii_digit() || (matches!(c, b'.' | b',' | b'/') && digit_before) {
            start -= 1;
        } else {
            break;
        }
    }
    if start > 0 && b[start - 1] == b'-' {
        start -= 1;
    }
    let end = if b.get(end) == Some(&b'%') { end + 1 } else { end };
    Some(&s[start..end])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prose_answers() {
        let cases = [
            ("the largest $n$ is 34.", Some("34")),
            ("Thus, $n = 7$.", Some("n = 7")),
            ("So she spent a total of \\$250.", Some("250")),
            ("We count.\n\n**Final Answer**\n6", Some("6")),
            ("The sum is $9$, since $1+8 = 9$.", Some("9")),
            ("The area is $4^2 = 16$ square units.", Some("4^2 = 16")),
            ("They are $(1, 2)$ or $(3, 4)$.", Some("$(1, 2)$ or $(3, 4)$")),
            ("The value is $-1$.\n\nLet me know if you have questions!", Some("-1")),
            ("x = 3", Some("x = 3")),
            ("Hence a drop of -12.5% overall.", Some("-12.5%")),
            ("No numbers here.", None),
            ("So the intersection is the point (2, -1).", Some("(2, -1)")),
            ("The result is 42 (since 6 times 7 is 42).", Some("42")),
            ("The count is at least 5.", None),
            ("The sum is not 9.", None),
            ("The length is equal to 12 cm.", Some("12 cm")),
            ("so 3 + 5 = 8 and then we", None),
            ("We need $7^2$, which equals", None),
            ("Each day 100 pages, so over the week she read 700 pages.", Some("700")),
            ("Therefore $a = 2$ and $b = -3$.", Some("a = 2, b = -3")),
            ("The domain is all real $x$ with $x \\neq 0$.", Some("x \\neq 0")),
            ("The distance is $1000$ meters.", Some("1000 \\text{ meters}")),
            ("The tank holds 5000 mL.", Some("5000 \\text{ mL}")),
            ("He earns $7 per hour, so he earns $42 per week.", Some("42")),
            ("$24\\text{ inches}$", Some("24\\text{ inches}")),
            ("So Sarah has three more marbles than Tom.", Some("3")),
            ("So the probability is one half.", Some("one half")),
            ("So the share is two thirds.", Some("two thirds")),
            ("I think the answer might be", None),
        ];
        for (text, want) in cases {
            assert_eq!(answer(text).as_deref(), want, "{text:?}");
        }
    }
}
