//! Pulling the answer out of a completion: think blocks, `\boxed{...}`, XML fields and
//! answer markers. All functions run in time linear in the input.

/// Removes reasoning: every `<think>...</think>` block; text before a `</think>` that has no
/// opening tag (chat templates often put `<think>` in the prompt); and everything after a
/// `<think>` that is never closed (the completion has no answer yet).
pub fn strip_think(text: &str) -> std::borrow::Cow<'_, str> {
    if !text.contains("think>") {
        return std::borrow::Cow::Borrowed(text);
    }
    let mut rest = text;
    let first_open = rest.find("<think>");
    if let Some(close) = rest.find("</think>")
        && first_open.is_none_or(|o| o > close)
    {
        rest = &rest[close + "</think>".len()..];
    }
    let mut out = String::with_capacity(rest.len());
    while let Some(open) = rest.find("<think>") {
        out.push_str(&rest[..open]);
        match rest[open..].find("</think>") {
            Some(close) => rest = &rest[open + close + "</think>".len()..],
            None => {
                rest = "";
                break;
            }
        }
    }
    out.push_str(rest);
    std::borrow::Cow::Owned(out.trim().to_owned())
}

/// Content of the last `\boxed{...}` or `\fbox{...}`, with nested braces balanced.
///
/// `\boxed 5` (a single token without braces) is accepted too. Returns `None` when there is no
/// box or the last one is never closed.
pub fn last_boxed(text: &str) -> Option<&str> {
    let start = ["\\boxed", "\\fbox"]
        .iter()
        .filter_map(|cmd| text.rfind(cmd).map(|i| (i, cmd.len())))
        .max_by_key(|(i, _)| *i)?;
    let rest = &text[start.0 + start.1..];
    if let Some(inner) = rest.strip_prefix('{') {
        let mut depth = 1usize;
        for (i, c) in inner.char_indices() {
            match c {
                '{' => depth += 1,
                '}' => {
                    depth -= 1;
                    if depth == 0 {
                        return Some(inner[..i].trim());
                    }
                }
                _ => {}
            }
        }
        return None;
    }
    let token = rest.strip_prefix(' ')?;
    let end = token.find(|c: char| c.is_whitespace() || c == '$').unwrap_or(token.len());
    (end > 0).then(|| &token[..end])
}

/// Content of the last `<field>...</field>` element, trimmed. An opened element that is never
/// closed yields its content to the end of the text, as models often stop right after it.
pub fn xml_field<'a>(text: &'a str, field: &str) -> Option<&'a str> {
    let open = format!("<{field}>");
    let close = format!("</{field}>");
    let start = text.rfind(&open)? + open.len();
    let rest = &text[start..];
    Some(rest.find(&close).map_or(rest, |end| &rest[..end]).trim())
}

/// The text after the last occurrence of `marker` (for example `"Answer:"` or `"####"`), up to
/// the end of that line, trimmed; matching ignores ASCII case.
pub fn after_marker<'a>(text: &'a str, marker: &str) -> Option<&'a str> {
    if marker.is_empty() {
        return None;
    }
    let lower = text.to_ascii_lowercase();
    let start = lower.rfind(&marker.to_ascii_lowercase())? + marker.len();
    let rest = &text[start..];
    let line = rest.lines().next().unwrap_or("").trim();
    (!line.is_empty()).then_some(line)
}

/// The text inside the last fenced code block (```` ```lang ... ``` ````), or `None`. A block
/// opened and never closed runs to the end of the text.
pub fn last_code_block(text: &str) -> Option<&str> {
    let fences: Vec<usize> = text.match_indices("```").map(|(i, _)| i).collect();
    let (open, close) = match fences.len() {
        0 => return None,
        n if n % 2 == 1 => (fences[n - 1], text.len()),
        n => (fences[n - 2], fences[n - 1]),
    };
    let block = &text[open + 3..close];
    // The first line of the block names the language.
    Some(block.find('\n').map_or("", |nl| &block[nl + 1..]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn think_blocks() {
        let cases = [
            ("<think>hmm</think>\n42", "42"),
            ("<think>a</think>x<think>b</think> y", "x y"),
            ("no reasoning", "no reasoning"),
            ("<think>still thinking", ""),
            ("\\boxed{5} <think>\\boxed{6}</think>", "\\boxed{5}"),
            ("reasoning</think>answer", "answer"),
        ];
        for (input, want) in cases {
            assert_eq!(strip_think(input).as_ref(), want, "{input:?}");
        }
    }

    #[test]
    fn boxed_nested_and_last() {
        let cases = [
            ("so \\boxed{\\frac{1}{2}}.", Some("\\frac{1}{2}")),
            ("\\boxed{1} then \\boxed{{a}{b}}", Some("{a}{b}")),
            ("\\fbox{7}", Some("7")),
            ("\\boxed 5 done", Some("5")),
            ("\\boxed{unclosed {x}", None),
            ("nothing", None),
            ("\\boxed{ 3 }", Some("3")),
        ];
        for (input, want) in cases {
            assert_eq!(last_boxed(input), want, "{input:?}");
        }
    }

    #[test]
    fn xml_and_markers() {
        assert_eq!(xml_field("<a>1</a><a> 2 </a>", "a"), Some("2"));
        assert_eq!(xml_field("<r>open to end", "r"), Some("open to end"));
        assert_eq!(xml_field("none", "r"), None);
        assert_eq!(after_marker("work\nThe answer is: 12\nbye", "answer is:"), Some("12"));
        assert_eq!(after_marker("#### 7", "####"), Some("7"));
        assert_eq!(after_marker("Answer:", "answer:"), None);
        assert_eq!(last_code_block("x\n```python\nprint(1)\n```\n"), Some("print(1)\n"));
        assert_eq!(last_code_block("no code"), None);
        assert_eq!(last_code_block("```a\n1\n```\n```py\n2"), Some("2"));
    }
}
