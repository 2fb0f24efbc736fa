//! SFT data: chat `messages` or `prompt`/`completion` records (JSONL files, or an environment's
//! generated examples), rendered with the chat template and tokenized with a loss mask on the
//! assistant's tokens only.

use std::io::BufRead;
use std::path::Path;

use serde_json::{Map, Value};
use temper_model::{ChatTemplate, Tokenizer};

/// One tokenized training sample.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sample {
    /// Token ids.
    pub ids: Vec<u32>,
    /// `mask[i]`: whether `ids[i]` is trained on (predicted from `ids[..i]`); the first token
    /// never is.
    pub mask: Vec<bool>,
}

impl Sample {
    /// Tokens.
    pub fn len(&self) -> usize {
        self.ids.len()
    }

    /// Whether the sample has no tokens.
    pub fn is_empty(&self) -> bool {
        self.ids.is_empty()
    }

    /// Tokens trained on.
    pub fn loss_tokens(&self) -> usize {
        self.mask.iter().skip(1).filter(|&&m| m).count()
    }
}

/// A record of an SFT file, before tokenization.
#[derive(Debug, Clone, PartialEq)]
pub enum Record {
    /// A conversation; the loss is on every assistant message.
    Messages(Vec<Value>),
    /// Plain text: the loss is on the completion.
    Text {
        /// Context.
        prompt: String,
        /// What the model learns to write.
        completion: String,
    },
}

impl Record {
    /// Reads one JSON object: `{"messages": [...]}`, or `{"prompt", "completion"}` where each is a
    /// string or a list of messages (then they are one conversation).
    pub fn from_json(v: &Value) -> Result<Self, String> {
        let obj = v.as_object().ok_or("a record must be a JSON object")?;
        if let Some(m) = obj.get("messages") {
            let list = m.as_array().ok_or("`messages` must be a list")?;
            check_messages(list)?;
            return Ok(Record::Messages(list.clone()));
        }
        let (Some(p), Some(c)) = (obj.get("prompt"), obj.get("completion")) else {
            return Err("a record needs `messages`, or `prompt` and `completion`".into());
        };
        match (p, c) {
            (Value::String(p), Value::String(c)) => {
                Ok(Record::Text { prompt: p.clone(), completion: c.clone() })
            }
            (Value::Array(p), Value::Array(c)) => {
                let all: Vec<Value> = p.iter().chain(c).cloned().collect();
                check_messages(&all)?;
                if c.iter().any(|m| m["role"] != "assistant") {
                    return Err("every `completion` message must have role `assistant`".into());
                }
                Ok(Record::Messages(all))
            }
            (Value::Array(p), Value::String(c)) => {
                let mut all = p.clone();
                let mut msg = Map::new();
                msg.insert("role".into(), "assistant".into());
                msg.insert("content".into(), c.clone().into());
                all.push(Value::Object(msg));
                check_messages(&all)?;
                Ok(Record::Messages(all))
            }
            _ => Err("`prompt` and `completion` must be strings or lists of messages".into()),
        }
    }
}

fn check_messages(list: &[Value]) -> Result<(), String> {
    if list.is_empty() {
        return Err("the conversation is empty".into());
    }
    for (i, m) in list.iter().enumerate() {
        let role =
            m.get("role").and_then(Value::as_str).ok_or(format!("message {i} has no `role`"))?;
        if !matches!(role, "system" | "user" | "assistant" | "tool") {
            return Err(format!("message {i} has unknown role `{role}`"));
        }
    }
    if !list.iter().any(|m| m["role"] == "assistant") {
        return Err("the conversation has no assistant message to train on".into());
    }
    Ok(())
}

/// Reads a JSONL file of records; errors name the file and line.
pub fn read_jsonl(path: &Path) -> Result<Vec<Record>, String> {
    let file = std::fs::File::open(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let mut out = Vec::new();
    for (i, line) in std::io::BufReader::new(file).lines().enumerate() {
        let line = line.map_err(|e| format!("{}: {e}", path.display()))?;
        if line.trim().is_empty() {
            continue;
        }
        let v: Value = serde_json::from_str(&line)
            .map_err(|e| format!("{}:{}: not JSON: {e}", path.display(), i + 1))?;
        out.push(Record::from_json(&v).map_err(|e| format!("{}:{}: {e}", path.display(), i + 1))?);
    }
    Ok(out)
}

/// Tokenizes a record. Conversations are rendered with `template`: the text is cut where each
/// assistant turn starts (after the generation prompt) and ends, each piece is tokenized on its
/// own (so an assistant turn's tokens are those the model would have sampled after that prompt),
/// and the assistant pieces get the loss.
pub fn tokenize(
    record: &Record,
    tokenizer: &Tokenizer,
    template: Option<&ChatTemplate>,
) -> Result<Sample, String> {
    match record {
        Record::Text { prompt, completion } => {
            let p = tokenizer.encode(prompt).map_err(|e| e.to_string())?;
            let c = tokenizer.encode(completion).map_err(|e| e.to_string())?;
            let mut mask = vec![false; p.len()];
            mask.extend(std::iter::repeat_n(true, c.len()));
            let mut ids = p;
            ids.extend(c);
            Ok(Sample { ids, mask })
        }
        Record::Messages(messages) => {
            let template =
                template.ok_or("conversations need a chat template and the model has none")?;
            let none = Map::new();
            let render = |msgs: &[Value], generation: bool| {
                template.render(msgs, None, generation, &none).map_err(|e| e.to_string())
            };
            let full = render(messages, false)?;
            // Piece boundaries: (start, end) of each assistant turn in `full`.
            let mut cuts: Vec<(usize, usize)> = Vec::new();
            for (k, m) in messages.iter().enumerate() {
                if m["role"] != "assistant" {
                    continue;
                }
                let before = render(&messages[..k], true)?;
                let through = render(&messages[..=k], false)?;
                if !full.starts_with(&before) || !full.starts_with(&through) {
                    return Err(format!(
                        "the chat template does not render assistant message {k} as a continuation of the earlier turns, so its tokens cannot be told apart"
                    ));
                }
                let start = before.len().max(cuts.last().map_or(0, |c| c.1));
                if through.len() > start {
                    cuts.push((start, through.len()));
                }
            }
            let mut ids = Vec::new();
            let mut mask = Vec::new();
            let mut at = 0;
            let mut piece = |text: &str, train: bool| -> Result<(), String> {
                let t = tokenizer.encode(text).map_err(|e| e.to_string())?;
                mask.extend(std::iter::repeat_n(train, t.len()));
                ids.extend(t);
                Ok(())
            };
            for (start, end) in cuts {
                piece(&full[at..start], false)?;
                piece(&full[start..end], true)?;
                at = end;
            }
            piece(&full[at..], false)?;
            Ok(Sample { ids, mask })
        }
    }
}
