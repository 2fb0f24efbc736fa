//! Tool calls in model output, in the Hermes / Qwen3 format the chat templates teach:
//! `<tool_call>\n{"name": "f", "arguments": {...}}\n</tool_call>`.

use serde_json::Value;
use temper_protocol::{FunctionCall, ToolCall};

/// Tool calls found in a reply, and the text around them.
#[derive(Debug, PartialEq)]
pub struct Parsed {
    /// The text outside the tool-call blocks, trimmed.
    pub content: String,
    /// OpenAI `tool_calls` entries (`arguments` as a JSON string).
    pub calls: Vec<ToolCall>,
}

/// The tool calls of `text`; `None` when it has none, or when a block is not a well-formed call
/// (then the text is returned to the caller as plain content).
pub fn parse(text: &str) -> Option<Parsed> {
    let mut content = String::new();
    let mut calls = Vec::new();
    let mut rest = text;
    while let Some(start) = rest.find("<tool_call>") {
        content.push_str(&rest[..start]);
        let after = &rest[start + "<tool_call>".len()..];
        // An unclosed block at the end (the model stopped at </tool_call> as a stop string, or
        // ran out of tokens) is taken up to the end.
        let (body, next) = match after.find("</tool_call>") {
            Some(end) => (&after[..end], &after[end + "</tool_call>".len()..]),
            None => (after, ""),
        };
        let v: Value = serde_json::from_str(body.trim()).ok()?;
        let name = v.get("name")?.as_str()?.to_owned();
        let arguments = match v.get("arguments").or_else(|| v.get("parameters")) {
            None | Some(Value::Null) => "{}".to_owned(),
            Some(Value::String(s)) => s.clone(),
            Some(other) => other.to_string(),
        };
        calls.push(ToolCall {
            id: format!("call_{:016x}", rand::random::<u64>()),
            kind: "function".to_owned(),
            function: FunctionCall { name, arguments },
        });
        rest = next;
    }
    if calls.is_empty() {
        return None;
    }
    content.push_str(rest);
    Some(Parsed { content: content.trim().to_owned(), calls })
}

#[cfg(test)]
mod tests {
    use super::parse;

    #[test]
    fn finds_calls_and_keeps_the_text_around_them() {
        let text = "Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>\n<tool_call>\n{\"name\": \"now\", \"arguments\": {}}\n</tool_call>";
        let p = parse(text).unwrap();
        assert_eq!(p.content, "Let me check.");
        assert_eq!(p.calls.len(), 2);
        assert_eq!(p.calls[0].function.name, "get_weather");
        assert_eq!(p.calls[0].function.arguments, "{\"city\":\"Paris\"}");
        assert_eq!(p.calls[1].function.arguments, "{}");
        assert!(p.calls[0].id.starts_with("call_"));
    }

    #[test]
    fn plain_or_malformed_text_has_no_calls() {
        assert_eq!(parse("no tools here"), None);
        assert_eq!(parse("<tool_call>\n{not json}\n</tool_call>"), None);
        assert_eq!(parse("<tool_call>{\"arguments\": {}}</tool_call>"), None); // no name
        // Unclosed at the end of the reply: taken to the end.
        let p = parse("<tool_call>\n{\"name\": \"f\", \"arguments\": {\"x\": 1}}").unwrap();
        assert_eq!(p.calls[0].function.arguments, "{\"x\":1}");
    }
}
