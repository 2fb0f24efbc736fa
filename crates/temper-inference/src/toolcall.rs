//! Tool calls in model output, in the format the model's chat template teaches:
//!
//! - Hermes / Qwen3: `<tool_call>\n{"name": "f", "arguments": {...}}\n</tool_call>`;
//! - GLM-4.5: `<tool_call>f\n<arg_key>k</arg_key>\n<arg_value>v</arg_value>\n…</tool_call>`, where
//!   a value is written raw when it is a string and as JSON otherwise (read back using the tool's
//!   schema where it gives the parameter's type, else as JSON when it parses, else as text).

use serde_json::{Map, Value};
use temper_protocol::{FunctionCall, ToolCall, ToolSpec};

/// How a model writes its tool calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Format {
    /// A JSON object with `name` and `arguments` inside `<tool_call>` tags (Hermes, Qwen2.5,
    /// Qwen3, and the default).
    #[default]
    Hermes,
    /// GLM-4.5's name line followed by `<arg_key>`/`<arg_value>` pairs.
    Glm45,
}

impl Format {
    /// The format a chat template teaches: GLM-4.5's when it writes `<arg_key>` tags, else
    /// Hermes.
    pub fn of_template(source: &str) -> Self {
        if source.contains("<arg_key>") { Format::Glm45 } else { Format::Hermes }
    }
}

/// Tool calls found in a reply, and the text around them.
#[derive(Debug, PartialEq)]
pub struct Parsed {
    /// The text outside the tool-call blocks, trimmed.
    pub content: String,
    /// OpenAI `tool_calls` entries (`arguments` as a JSON string).
    pub calls: Vec<ToolCall>,
}

/// The tool calls of `text` in `format`; `tools` (the request's) type GLM-4.5 argument values.
/// `None` when there are none, or when a block is not a well-formed call (then the text is
/// returned to the caller as plain content).
pub fn parse(text: &str, format: Format, tools: &[ToolSpec]) -> Option<Parsed> {
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
        let (name, arguments) = match format {
            Format::Hermes => hermes(body)?,
            Format::Glm45 => glm45(body, tools)?,
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

/// `{"name": ..., "arguments": {...}}` (or `"parameters"`).
fn hermes(body: &str) -> Option<(String, String)> {
    let v: Value = serde_json::from_str(body.trim()).ok()?;
    let name = v.get("name")?.as_str()?.to_owned();
    let arguments = match v.get("arguments").or_else(|| v.get("parameters")) {
        None | Some(Value::Null) => "{}".to_owned(),
        Some(Value::String(s)) => s.clone(),
        Some(other) => other.to_string(),
    };
    Some((name, arguments))
}

/// `name` then `<arg_key>k</arg_key><arg_value>v</arg_value>` pairs, whitespace between.
fn glm45(body: &str, tools: &[ToolSpec]) -> Option<(String, String)> {
    let (name, mut rest) = match body.find("<arg_key>") {
        Some(at) => (body[..at].trim(), &body[at..]),
        None => (body.trim(), ""),
    };
    // Function names as OpenAI allows them (letters, digits, `_`, `-`), and `.` and `:`.
    let allowed = |c: char| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.' | ':');
    if name.is_empty() || name.len() > 128 || !name.chars().all(allowed) {
        return None;
    }
    let schema = tools
        .iter()
        .find(|t| t.function.name == name)
        .and_then(|t| t.function.parameters.get("properties"));
    let mut arguments = Map::new();
    loop {
        rest = rest.trim_start();
        if rest.is_empty() {
            break;
        }
        let key = between(&mut rest, "<arg_key>", "</arg_key>")?;
        rest = rest.trim_start();
        let raw = between(&mut rest, "<arg_value>", "</arg_value>")?;
        let declared = schema.and_then(|p| p.get(key)).and_then(|p| p.get("type"));
        let value = match declared.and_then(Value::as_str) {
            Some("string") => Value::String(raw.to_owned()),
            _ => serde_json::from_str(raw).unwrap_or_else(|_| Value::String(raw.to_owned())),
        };
        arguments.insert(key.trim().to_owned(), value);
    }
    Some((name.to_owned(), Value::Object(arguments).to_string()))
}

/// The text between `open` at the start of `rest` and the next `close`; advances `rest` past it.
fn between<'a>(rest: &mut &'a str, open: &str, close: &str) -> Option<&'a str> {
    let after = rest.strip_prefix(open)?;
    let end = after.find(close)?;
    *rest = &after[end + close.len()..];
    Some(&after[..end])
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn hermes_parse(text: &str) -> Option<Parsed> {
        parse(text, Format::Hermes, &[])
    }

    #[test]
    fn finds_calls_and_keeps_the_text_around_them() {
        let text = "Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>\n<tool_call>\n{\"name\": \"now\", \"arguments\": {}}\n</tool_call>";
        let p = hermes_parse(text).unwrap();
        assert_eq!(p.content, "Let me check.");
        assert_eq!(p.calls.len(), 2);
        assert_eq!(p.calls[0].function.name, "get_weather");
        assert_eq!(p.calls[0].function.arguments, "{\"city\":\"Paris\"}");
        assert_eq!(p.calls[1].function.arguments, "{}");
        assert!(p.calls[0].id.starts_with("call_"));
    }

    #[test]
    fn plain_or_malformed_text_has_no_calls() {
        assert_eq!(hermes_parse("no tools here"), None);
        assert_eq!(hermes_parse("<tool_call>\n{not json}\n</tool_call>"), None);
        assert_eq!(hermes_parse("<tool_call>{\"arguments\": {}}</tool_call>"), None); // no name
        // Unclosed at the end of the reply: taken to the end.
        let p = hermes_parse("<tool_call>\n{\"name\": \"f\", \"arguments\": {\"x\": 1}}").unwrap();
        assert_eq!(p.calls[0].function.arguments, "{\"x\":1}");
    }

    #[test]
    fn glm45_calls_read_their_arguments_by_the_schema() {
        let tools = [ToolSpec::function(
            "search",
            "",
            json!({"type": "object", "properties": {"query": {"type": "string"}, "k": {"type": "integer"},
                   "code": {"type": "string"}}}),
        )];
        let text = "I will look.<tool_call>search\n<arg_key>query</arg_key>\n<arg_value>rust 2024</arg_value>\n<arg_key>k</arg_key>\n<arg_value>5</arg_value>\n<arg_key>code</arg_key>\n<arg_value>12</arg_value>\n</tool_call><tool_call>now\n</tool_call>";
        let p = parse(text, Format::Glm45, &tools).unwrap();
        assert_eq!(p.content, "I will look.");
        assert_eq!(p.calls[0].function.name, "search");
        let args: Value = serde_json::from_str(&p.calls[0].function.arguments).unwrap();
        // `code` is declared a string: "12" stays text; `k` is JSON.
        assert_eq!(args, json!({"query": "rust 2024", "k": 5, "code": "12"}));
        assert_eq!(p.calls[1].function.name, "now");
        assert_eq!(p.calls[1].function.arguments, "{}");
        // Without a schema, values that parse as JSON are JSON, the rest text.
        let p = parse(
            "<tool_call>f<arg_key>a</arg_key><arg_value>[1, 2]</arg_value><arg_key>b</arg_key><arg_value>hi there</arg_value></tool_call>",
            Format::Glm45,
            &[],
        )
        .unwrap();
        let args: Value = serde_json::from_str(&p.calls[0].function.arguments).unwrap();
        assert_eq!(args, json!({"a": [1, 2], "b": "hi there"}));
        // Malformed: no name, an unclosed tag, a value without its key.
        for bad in [
            "<tool_call>\n<arg_key>a</arg_key><arg_value>1</arg_value></tool_call>",
            "<tool_call>f\n<arg_key>a</arg_key><arg_value>1</tool_call>",
            "<tool_call>f\n<arg_value>1</arg_value></tool_call>",
            "<tool_call>{\"name\": \"f\"}</tool_call>",
        ] {
            assert_eq!(parse(bad, Format::Glm45, &[]), None, "{bad}");
        }
    }

    #[test]
    fn the_format_follows_the_template() {
        assert_eq!(Format::of_template("{{ '<tool_call>' + tc.name }}<arg_key>"), Format::Glm45);
        assert_eq!(Format::of_template("<tool_call>\n{\"name\": ...}"), Format::Hermes);
    }
}
