//! Chat messages in the OpenAI chat-completions shape.
//!
//! Contract: produced by datasets (prompts), by models (assistant turns) and by environments
//! (user and tool turns); consumed by chat endpoints, reward functions and the trainer's chat
//! template. Serialised exactly as the OpenAI API expects, so a `Vec<Message>` can be sent as the
//! `messages` field of a chat-completions request unchanged.

use serde::{Deserialize, Deserializer, Serialize};

/// Who wrote a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// Instructions that frame the conversation.
    System,
    /// The user, or an environment speaking as the user.
    User,
    /// The model.
    Assistant,
    /// The result of a tool call; `tool_call_id` names the call it answers.
    Tool,
}

/// One chat message.
///
/// What must hold: `tool_calls` is non-empty only for [`Role::Assistant`]; `tool_call_id` is set
/// exactly for [`Role::Tool`]. `content` is plain text: on input, `null` reads as the empty string
/// and an array of `{"type": "text", "text": ...}` parts is joined.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Message {
    /// Who wrote it.
    pub role: Role,
    /// The text of the message.
    #[serde(default, deserialize_with = "content_text")]
    pub content: String,
    /// Tool calls the assistant made in this turn, in order.
    #[serde(default, skip_serializing_if = "Vec::is_empty", deserialize_with = "null_as_empty")]
    pub tool_calls: Vec<ToolCall>,
    /// For a tool message: the id of the call it answers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
    /// For a tool message: the tool's name (optional in the OpenAI API).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

impl Message {
    fn new(role: Role, content: impl Into<String>) -> Self {
        Self {
            role,
            content: content.into(),
            tool_calls: Vec::new(),
            tool_call_id: None,
            name: None,
        }
    }

    /// A system message.
    pub fn system(content: impl Into<String>) -> Self {
        Self::new(Role::System, content)
    }

    /// A user message.
    pub fn user(content: impl Into<String>) -> Self {
        Self::new(Role::User, content)
    }

    /// An assistant message without tool calls.
    pub fn assistant(content: impl Into<String>) -> Self {
        Self::new(Role::Assistant, content)
    }

    /// A tool result answering the call `tool_call_id`.
    pub fn tool(tool_call_id: impl Into<String>, name: &str, content: impl Into<String>) -> Self {
        Self {
            tool_call_id: Some(tool_call_id.into()),
            name: Some(name.to_owned()),
            ..Self::new(Role::Tool, content)
        }
    }
}

/// A function call requested by the assistant.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolCall {
    /// Identifier chosen by the model server; a tool message answers it.
    pub id: String,
    /// Always `"function"`.
    #[serde(rename = "type", default = "function_kind")]
    pub kind: String,
    /// Which function, with what arguments.
    pub function: FunctionCall,
}

/// The function part of a [`ToolCall`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FunctionCall {
    /// Name of the tool.
    pub name: String,
    /// Arguments as a JSON text, exactly as the model wrote them; it may not be valid JSON.
    #[serde(default)]
    pub arguments: String,
}

/// A tool offered to the model, in the OpenAI `tools` shape:
/// `{"type": "function", "function": {"name", "description", "parameters"}}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolSpec {
    /// Always `"function"`.
    #[serde(rename = "type", default = "function_kind")]
    pub kind: String,
    /// The function's name, description and JSON-schema parameters.
    pub function: FunctionSpec,
}

/// The function part of a [`ToolSpec`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FunctionSpec {
    /// Name the model uses to call it.
    pub name: String,
    /// What it does, for the model.
    #[serde(default)]
    pub description: String,
    /// JSON schema of the arguments object.
    #[serde(default)]
    pub parameters: serde_json::Value,
}

impl ToolSpec {
    /// A function tool.
    pub fn function(name: &str, description: &str, parameters: serde_json::Value) -> Self {
        Self {
            kind: function_kind(),
            function: FunctionSpec {
                name: name.to_owned(),
                description: description.to_owned(),
                parameters,
            },
        }
    }
}

fn function_kind() -> String {
    "function".to_owned()
}

/// A list where `null` reads as empty (servers send either).
pub(crate) fn null_as_empty<'de, D: Deserializer<'de>, T: Deserialize<'de>>(
    d: D,
) -> Result<Vec<T>, D::Error> {
    Ok(Option::<Vec<T>>::deserialize(d)?.unwrap_or_default())
}

fn content_text<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Content {
        Text(String),
        Parts(Vec<Part>),
        Null(()),
    }
    #[derive(Deserialize)]
    struct Part {
        #[serde(default)]
        text: Option<String>,
    }
    Ok(match Content::deserialize(d)? {
        Content::Text(text) => text,
        Content::Parts(parts) => parts.into_iter().filter_map(|p| p.text).collect(),
        Content::Null(()) => String::new(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn content_accepts_null_string_and_parts() {
        let m: Message = serde_json::from_value(json!({"role": "assistant", "content": null}))
            .expect("null content");
        assert_eq!(m.content, "");
        let m: Message = serde_json::from_value(json!({"role": "user", "content": [
            {"type": "text", "text": "ab"}, {"type": "text", "text": "cd"}]}))
        .expect("parts");
        assert_eq!(m.content, "abcd");
    }

    #[test]
    fn tool_call_round_trip_matches_openai_shape() {
        let v = json!({"role": "assistant", "content": "", "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "add", "arguments": "{\"a\":1}"}}]});
        let m: Message = serde_json::from_value(v.clone()).expect("parse");
        assert_eq!(m.tool_calls[0].function.name, "add");
        assert_eq!(serde_json::to_value(&m).expect("ser"), v);
        let t = Message::tool("c1", "add", "2");
        assert_eq!(
            serde_json::to_value(&t).expect("ser"),
            json!({"role": "tool", "content": "2", "tool_call_id": "c1", "name": "add"})
        );
    }
}
