//! Multiple-choice letters: which option a completion chose.

use crate::extract::strip_think;

/// The option letter a completion chose among `n_options` (`A`, `B`, ...), or `None`.
///
/// Only an uppercase letter standing alone (not part of a word) counts. In order of preference:
/// the first such letter after the last "answer" (any case: "Answer: C", "the answer is (C)");
/// a completion that is nothing but the letter ("C", "(C)", "**C.**"); a last line that restates
/// one option ("C) photon", "**(C) photon**", unless the line before it is an option too: a
/// list of options is not a choice); the last letter written as "(C)" or "**C**". Reasoning in think blocks is ignored. Anything else is `None`, so prose
/// such as "A good start" is never read as a choice.
pub fn extract_letter(completion: &str, n_options: usize) -> Option<char> {
    let text = strip_think(completion);
    let text = text.as_ref();
    let last = char::from(b'A' + n_options.clamp(1, 26) as u8 - 1);
    let valid = |c: char| c.is_ascii_uppercase() && c <= last;
    let bytes = text.as_bytes();
    let standalone: Vec<(usize, char)> = text
        .char_indices()
        .filter(|&(i, c)| {
            valid(c)
                && (i == 0 || !bytes[i - 1].is_ascii_alphanumeric())
                && bytes.get(i + 1).is_none_or(|b| !b.is_ascii_alphanumeric())
        })
        .collect();

    // "I" and "A" are also words: "Answer: I think B" chooses B.
    let is_word = |i: usize, c: char| {
        matches!(c, 'A' | 'I')
            && bytes.get(i + 1) == Some(&b' ')
            && bytes.get(i + 2).is_some_and(u8::is_ascii_lowercase)
    };
    if let Some(marker) = text.to_ascii_lowercase().rfind("answer") {
        let after: Vec<&(usize, char)> = standalone.iter().filter(|(i, _)| *i > marker).collect();
        if let Some(&&(_, c)) = after.iter().find(|(i, c)| !is_word(*i, *c)).or(after.first()) {
            return Some(c);
        }
    }
    let bare = text.trim().trim_matches(|c: char| "*()[].:_ `".contains(c));
    let mut chars = bare.chars();
    if let (Some(c), None) = (chars.next(), chars.next())
        && valid(c)
    {
        return Some(c);
    }
    if let Some(c) = restated_option(text, valid) {
        return Some(c);
    }
    standalone
        .iter()
        .rev()
        .find(|&&(i, _)| {
            let before = &text[..i];
            let after = &text[i + 1..];
            (before.ends_with('(') && after.starts_with(')'))
                || (before.ends_with("**") && after.starts_with("**"))
        })
        .map(|&(_, c)| c)
}

/// The letter of a last line that restates an option ("C) photon", "(C) photon", "C. photon"),
/// unless the line before it is an option line too.
fn restated_option(text: &str, valid: impl Fn(char) -> bool) -> Option<char> {
    let option = |line: &str| -> Option<char> {
        let line = line.trim().trim_matches(|c: char| c == '*' || c == '_' || c == '`').trim();
        let rest = line.strip_prefix('(').unwrap_or(line);
        let mut chars = rest.chars();
        let (c, mark) = (chars.next()?, chars.next()?);
        let text = chars.as_str();
        (valid(c) && matches!(mark, ')' | '.') && text.starts_with(' ') && !text.trim().is_empty())
            .then_some(c)
    };
    let mut lines = text.lines().rev().filter(|l| !l.trim().is_empty());
    let chosen = option(lines.next()?)?;
    match lines.next() {
        Some(before) if option(before).is_some() => None,
        _ => Some(chosen),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn letters_table() {
        let cases = [
            ("Answer: C", Some('C')),
            ("the answer is (B).", Some('B')),
            ("B", Some('B')),
            ("**D.**", Some('D')),
            ("I think (A) is wrong, so (C)", Some('C')),
            ("A good start, but unsure", None),
            ("Answer: Z", None),
            ("<think>maybe (A)</think>Answer: B", Some('B')),
            ("E", None),
            ("The final ANSWER: **b** or D", Some('D')),
            ("Answer: I think it is H", Some('H')),
            ("Answer: A because it is larger", Some('A')),
            ("It carries no charge, so:\n\nA) photon", Some('A')),
            ("Energy is quantised.\n**(C) Planck's law**", Some('C')),
            ("The options are\nA) one\nB) two", None),
            ("So it is C.", None),
        ];
        for (input, want) in cases {
            assert_eq!(
                extract_letter(input, if input.contains('H') { 10 } else { 4 }),
                want,
                "{input:?}"
            );
        }
    }
}
