//! Chat templates: the Jinja template of a model's `tokenizer_config.json` (or GGUF metadata),
//! rendered with `minijinja` the way Hugging Face transformers renders it with Python's `jinja2`
//! (`trim_blocks`, `lstrip_blocks`, loop controls, Python string methods, `raise_exception`, and
//! a `tojson` that writes what Python's `json.dumps` writes).

use std::path::Path;

use minijinja::value::{Kwargs, Serde, Value as JValue};
use minijinja::{Environment, Error, ErrorKind};
use serde_json::{Map, Value};

use crate::ModelError;

/// Work a single rendering may do (minijinja fuel: roughly instructions executed). Real templates
/// need a few thousand per message; a template that loops forever stops here.
const FUEL: u64 = 50_000_000;

/// A compiled chat template with the special-token strings it may refer to.
#[derive(Debug, Clone)]
pub struct ChatTemplate {
    env: Environment<'static>,
    source: String,
    bos_token: String,
    eos_token: String,
}

fn cfg_err(source: &str, message: impl Into<String>) -> ModelError {
    ModelError::Config { file: source.to_owned(), message: message.into() }
}

/// A token string of `tokenizer_config.json`: `"<s>"` or `{"content": "<s>", …}`.
fn token_string(v: Option<&Value>) -> String {
    match v {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Object(o)) => {
            o.get("content").and_then(Value::as_str).unwrap_or_default().to_owned()
        }
        _ => String::new(),
    }
}

impl ChatTemplate {
    /// Compiles `source`; `name` identifies it in errors.
    pub fn new(
        source: &str,
        bos_token: &str,
        eos_token: &str,
        name: &str,
    ) -> Result<Self, ModelError> {
        let mut env = Environment::new();
        env.set_syntax(
            minijinja::syntax::SyntaxConfig::builder()
                .trim_blocks(true)
                .lstrip_blocks(true)
                .build()
                .map_err(|e| cfg_err(name, e.to_string()))?,
        );
        env.set_fuel(Some(FUEL));
        env.set_recursion_limit(100);
        minijinja_contrib::add_to_environment(&mut env);
        env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
        env.add_filter("tojson", tojson);
        env.add_function("raise_exception", |message: String| -> Result<JValue, Error> {
            Err(Error::new(ErrorKind::InvalidOperation, message))
        });
        env.add_template_owned("chat_template", source.to_owned())
            .map_err(|e| cfg_err(name, format!("chat template does not compile: {e:#}")))?;
        Ok(Self {
            env,
            source: source.to_owned(),
            bos_token: bos_token.to_owned(),
            eos_token: eos_token.to_owned(),
        })
    }

    /// The Jinja source.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// The `bos_token` string the template may refer to.
    pub fn bos_token(&self) -> &str {
        &self.bos_token
    }

    /// The `eos_token` string (the end-of-turn token of chat models).
    pub fn eos_token(&self) -> &str {
        &self.eos_token
    }

    /// Writes a `tokenizer_config.json` holding this template and its special-token strings, as
    /// Hugging Face tools read it.
    pub fn save_tokenizer_config(&self, path: &Path) -> Result<(), ModelError> {
        let v = serde_json::json!({
            "chat_template": self.source,
            "bos_token": if self.bos_token.is_empty() { Value::Null } else { Value::String(self.bos_token.clone()) },
            "eos_token": self.eos_token,
        });
        let text = serde_json::to_string_pretty(&v)
            .map_err(|e| cfg_err(&path.display().to_string(), e.to_string()))?;
        std::fs::write(path, text)
            .map_err(|source| ModelError::Io { path: path.display().to_string(), source })
    }

    /// The template of a `tokenizer_config.json` (`chat_template` as a string, or the one named
    /// `default` in a list of `{name, template}`), with its `bos_token` and `eos_token`.
    pub fn from_tokenizer_config(path: &Path) -> Result<Self, ModelError> {
        let name = path.display().to_string();
        let text = std::fs::read_to_string(path)
            .map_err(|source| ModelError::Io { path: name.clone(), source })?;
        let v: Value =
            serde_json::from_str(&text).map_err(|e| cfg_err(&name, format!("not JSON: {e}")))?;
        let source = match v.get("chat_template") {
            Some(Value::String(s)) => s.clone(),
            Some(Value::Array(list)) => list
                .iter()
                .find(|t| t.get("name").and_then(Value::as_str) == Some("default"))
                .and_then(|t| t.get("template").and_then(Value::as_str))
                .ok_or_else(|| {
                    cfg_err(&name, "`chat_template` is a list without a `default` entry")
                })?
                .to_owned(),
            _ => return Err(cfg_err(&name, "no `chat_template`")),
        };
        Self::new(
            &source,
            &token_string(v.get("bos_token")),
            &token_string(v.get("eos_token")),
            &name,
        )
    }

    /// Renders `messages` (OpenAI-style objects: `role`, `content`, and `tool_calls` with
    /// `function.arguments` as an object, as Hugging Face templates expect), the `tools` (JSON
    /// schemas) when given, and the assistant header when `add_generation_prompt` is set. `extra`
    /// adds template variables (such as `enable_thinking`).
    pub fn render(
        &self,
        messages: &[Value],
        tools: Option<&[Value]>,
        add_generation_prompt: bool,
        extra: &Map<String, Value>,
    ) -> Result<String, ModelError> {
        let mut ctx = extra.clone();
        ctx.insert("messages".into(), Value::Array(messages.to_vec()));
        if let Some(tools) = tools {
            ctx.insert("tools".into(), Value::Array(tools.to_vec()));
        }
        ctx.insert("add_generation_prompt".into(), Value::Bool(add_generation_prompt));
        ctx.insert("bos_token".into(), Value::String(self.bos_token.clone()));
        ctx.insert("eos_token".into(), Value::String(self.eos_token.clone()));
        let template = self
            .env
            .get_template("chat_template")
            .map_err(|e| cfg_err("chat template", e.to_string()))?;
        template
            .render(JValue::from(Serde(&ctx)))
            .map_err(|e| cfg_err("chat template", format!("rendering failed: {e:#}")))
    }

    /// The text that continues a conversation already rendered and tokenized up to the end of
    /// its last assistant turn, so that `new` messages (tool results, the next user turn) and the
    /// next assistant header are appended as tokens and nothing before them is re-tokenized.
    ///
    /// `history` must end with the assistant message whose tokens were sampled, ending with the
    /// end-of-turn token (`eos_token`). The conversation is rendered with that message's content
    /// replaced by a marker (and its tool calls left out: the sampled tokens hold them), and the
    /// text after the marker is returned, less the end-of-turn token when the template writes one
    /// there. Templates that render the last assistant turn differently once another turn follows
    /// (Qwen3 drops its reasoning) are handled: only what follows the marker is used.
    pub fn continuation(
        &self,
        history: &[Value],
        new: &[Value],
        tools: Option<&[Value]>,
        extra: &Map<String, Value>,
    ) -> Result<String, ModelError> {
        self.continuation_after(history, new, tools, extra, &self.eos_token)
    }

    /// [`ChatTemplate::continuation`] for a turn that ended with the token whose text is
    /// `closing` (the end-of-turn or end-of-sequence token the model stopped on, or `""` when it
    /// stopped otherwise): `closing` is left out of the start of the returned text when the
    /// template writes it there, since the sampled tokens already hold it. A turn cut short keeps
    /// the template's end-of-turn text, so the conversation reads as the template writes it.
    pub fn continuation_after(
        &self,
        history: &[Value],
        new: &[Value],
        tools: Option<&[Value]>,
        extra: &Map<String, Value>,
        closing: &str,
    ) -> Result<String, ModelError> {
        const MARKER: &str = "\u{E000}temper-end-of-sampled-turn\u{E000}";
        let Some((last, earlier)) = history.split_last().filter(|(m, _)| m["role"] == "assistant")
        else {
            return Err(cfg_err(
                "chat template",
                "continuation: the history must end with an assistant message",
            ));
        };
        let mut all: Vec<Value> = earlier.to_vec();
        let mut stand_in = Map::new();
        stand_in.insert("role".into(), Value::String("assistant".into()));
        stand_in.insert("content".into(), Value::String(MARKER.into()));
        if let Some(name) = last.get("name") {
            stand_in.insert("name".into(), name.clone());
        }
        all.push(Value::Object(stand_in));
        all.extend(new.iter().cloned());
        let text = self.render(&all, tools, true, extra)?;
        let at = text.rfind(MARKER).ok_or_else(|| {
            cfg_err(
                "chat template",
                "continuation: the template does not show the last assistant message's content",
            )
        })?;
        let tail = &text[at + MARKER.len()..];
        let tail =
            if closing.is_empty() { tail } else { tail.strip_prefix(closing).unwrap_or(tail) };
        Ok(tail.to_owned())
    }
}

/// Python's `json.dumps(value, ensure_ascii=False, indent=indent, separators=separators,
/// sort_keys=sort_keys)`, as transformers' `tojson` filter writes it.
#[expect(
    clippy::needless_pass_by_value,
    reason = "minijinja hands filters their keyword arguments by value"
)]
fn tojson(value: &JValue, kwargs: Kwargs) -> Result<JValue, Error> {
    let indent: Option<JValue> = kwargs.get("indent")?;
    let separators: Option<Vec<String>> = kwargs.get("separators")?;
    let sort_keys: Option<bool> = kwargs.get("sort_keys")?;
    kwargs.assert_all_used()?;
    let indent = match indent {
        None => None,
        Some(v) if v.is_none() => None,
        Some(v) => match v.as_i64() {
            Some(n) => Some(" ".repeat(n.clamp(0, 64) as usize)),
            None => Some(v.as_str().unwrap_or_default().to_owned()),
        },
    };
    let (item_sep, key_sep) = match separators.as_deref() {
        Some([a, b]) => (a.clone(), b.clone()),
        Some(_) => {
            return Err(Error::new(
                ErrorKind::InvalidOperation,
                "tojson: separators must be two strings",
            ));
        }
        None if indent.is_some() => (",".to_owned(), ": ".to_owned()),
        None => (", ".to_owned(), ": ".to_owned()),
    };
    let json = serde_json::to_value(value)
        .map_err(|e| Error::new(ErrorKind::InvalidOperation, format!("tojson: {e}")))?;
    let mut out = String::new();
    let style = PyJson { indent, item_sep, key_sep, sort_keys: sort_keys.unwrap_or(false) };
    style.write(&json, 0, &mut out);
    Ok(JValue::from_safe_string(out))
}

struct PyJson {
    indent: Option<String>,
    item_sep: String,
    key_sep: String,
    sort_keys: bool,
}

impl PyJson {
    fn newline(&self, depth: usize, out: &mut String) {
        if let Some(unit) = &self.indent {
            out.push('\n');
            for _ in 0..depth {
                out.push_str(unit);
            }
        }
    }

    fn write(&self, v: &Value, depth: usize, out: &mut String) {
        match v {
            Value::Null => out.push_str("null"),
            Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
            Value::Number(n) => match (n.as_i64(), n.as_u64(), n.as_f64()) {
                (Some(i), _, _) => out.push_str(&i.to_string()),
                (_, Some(u), _) => out.push_str(&u.to_string()),
                (_, _, Some(f)) => out.push_str(&py_float(f)),
                _ => out.push_str(&n.to_string()),
            },
            Value::String(s) => out.push_str(&serde_json::to_string(s).unwrap_or_default()),
            Value::Array(items) => {
                if items.is_empty() {
                    out.push_str("[]");
                    return;
                }
                out.push('[');
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        out.push_str(&self.item_sep);
                    }
                    self.newline(depth + 1, out);
                    self.write(item, depth + 1, out);
                }
                self.newline(depth, out);
                out.push(']');
            }
            Value::Object(map) => {
                if map.is_empty() {
                    out.push_str("{}");
                    return;
                }
                let mut entries: Vec<(&String, &Value)> = map.iter().collect();
                if self.sort_keys {
                    entries.sort_by(|a, b| a.0.cmp(b.0));
                }
                out.push('{');
                for (i, (k, item)) in entries.into_iter().enumerate() {
                    if i > 0 {
                        out.push_str(&self.item_sep);
                    }
                    self.newline(depth + 1, out);
                    out.push_str(&serde_json::to_string(k).unwrap_or_default());
                    out.push_str(&self.key_sep);
                    self.write(item, depth + 1, out);
                }
                self.newline(depth, out);
                out.push('}');
            }
        }
    }
}

/// A float as Python's `repr` writes it: shortest round-trip digits, `1.0` not `1`, exponents
/// from 1e16 up and below 1e-4 as `1e-05`.
fn py_float(f: f64) -> String {
    if f.is_nan() {
        return "NaN".into();
    }
    if f.is_infinite() {
        return if f > 0.0 { "Infinity".into() } else { "-Infinity".into() };
    }
    let abs = f.abs();
    if abs != 0.0 && !(1e-4..1e16).contains(&abs) {
        // Rust writes `1e-5`; Python writes `1e-05`.
        let s = format!("{f:e}");
        let (mantissa, exp) = s.split_once('e').unwrap_or((&s, "0"));
        let (sign, digits) = exp.strip_prefix('-').map_or(("+", exp), |d| ("-", d));
        return format!("{mantissa}e{sign}{digits:0>2}");
    }
    let s = format!("{f}");
    if s.contains('.') { s } else { format!("{s}.0") }
}

#[cfg(test)]
mod tests {
    use super::py_float;

    #[test]
    fn floats_as_python_writes_them() {
        for (f, want) in [
            (1.0, "1.0"),
            (0.5, "0.5"),
            (1e-5, "1e-05"),
            (1.5e20, "1.5e+20"),
            (-2.0, "-2.0"),
            (0.0001, "0.0001"),
            (1e16, "1e+16"),
        ] {
            assert_eq!(py_float(f), want);
        }
    }
}
