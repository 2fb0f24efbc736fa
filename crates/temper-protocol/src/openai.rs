//! The OpenAI-compatible generation API, with the token-level extensions RL depends on.
//!
//! Contract: `temper inference serve` produces every reply here and reads every request;
//! `temper-client` writes the requests and reads the replies, from temper's server or from
//! OpenAI, vLLM or SGLang. The names are OpenAI's (plus vLLM's `top_k`, `min_p`,
//! `stop_token_ids`, `ignore_eos`, `return_token_ids`, `chat_template_kwargs`), so either side can
//! be swapped for the public one.
//!
//! What must hold for training (the sampling-logprob contract): when a chat request asks for
//! `"logprobs": true, "return_token_ids": true`, the reply carries `prompt_token_ids` (the exact
//! tokens the model was conditioned on), and each choice carries `token_ids` (the sampled tokens)
//! with one logprob per token, either as temper's plain `token_logprobs` list or as OpenAI's
//! `logprobs.content[i].logprob`. Each logprob is that of the sampled token under the sampling
//! distribution actually used (after temperature, before top-k/top-p truncation), by the weights
//! whose version is `policy_version` (the oldest version that produced any of the tokens).

use serde::de::{Deserializer, MapAccess, Visitor};
use serde::ser::{SerializeMap, Serializer};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::chat::null_as_empty;
use crate::{FinishReason, Message, Role, SamplingParams, ToolCall, ToolSpec, Usage};

// ---------------------------------------------------------------------------------------------
// Requests.

/// `"x"` or `["x", "y"]`, as OpenAI's `stop` accepts.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum StopStrings {
    /// One stop string.
    One(String),
    /// Several.
    Many(Vec<String>),
}

impl StopStrings {
    /// The stop strings as a list.
    pub fn to_vec(&self) -> Vec<String> {
        match self {
            Self::One(s) => vec![s.clone()],
            Self::Many(v) => v.clone(),
        }
    }
}

/// Sampling fields shared by every generation request. Absent means the server's default.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct SamplingFields {
    /// Softmax temperature (default 1); 0 is greedy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub temperature: Option<f64>,
    /// Nucleus mass in (0, 1].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub top_p: Option<f64>,
    /// Keep the `top_k` most likely tokens; -1 or 0 is off.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub top_k: Option<i64>,
    /// Drop tokens below `min_p` times the most likely one's probability.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_p: Option<f64>,
    /// Most tokens to generate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u64>,
    /// OpenAI's newer name for `max_tokens`; wins when both are given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_completion_tokens: Option<u64>,
    /// Continuations to generate from the one prompt.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub n: Option<usize>,
    /// Strings that end a continuation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop: Option<StopStrings>,
    /// Token ids that end a continuation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop_token_ids: Option<Vec<u32>>,
    /// Sampler seed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seed: Option<u64>,
    /// Keep generating past the end-of-sequence token.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ignore_eos: Option<bool>,
    /// Accepted for compatibility; temper's server refuses any value but 0.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub frequency_penalty: Option<f64>,
    /// See `frequency_penalty`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub presence_penalty: Option<f64>,
}

impl From<&SamplingParams> for SamplingFields {
    fn from(s: &SamplingParams) -> Self {
        Self {
            temperature: s.temperature,
            top_p: s.top_p,
            top_k: s.top_k.map(i64::from),
            min_p: s.min_p,
            max_tokens: s.max_tokens.map(u64::from),
            seed: s.seed,
            stop: (!s.stop.is_empty()).then(|| StopStrings::Many(s.stop.clone())),
            ..Self::default()
        }
    }
}

/// `stream_options` of a streamed request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct StreamOptions {
    /// Send a last chunk with the token counts.
    #[serde(default)]
    pub include_usage: bool,
}

/// The body of `POST /v1/chat/completions`.
///
/// `M` is the message type: clients send [`Message`]s; the server reads JSON values, since chat
/// templates may use fields a `Message` does not name.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChatCompletionRequest<M = Message> {
    /// The model name (servers of one model ignore it).
    #[serde(default)]
    pub model: String,
    /// The conversation so far.
    pub messages: Vec<M>,
    /// Tools the model may call.
    #[serde(default, skip_serializing_if = "Vec::is_empty", deserialize_with = "null_as_empty")]
    pub tools: Vec<ToolSpec>,
    /// `"none"`, `"auto"`, `"required"` or a named function.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_choice: Option<Value>,
    /// Answer as server-sent events.
    #[serde(default, skip_serializing_if = "is_false")]
    pub stream: bool,
    /// Options of a streamed answer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stream_options: Option<StreamOptions>,
    /// Return the sampled tokens' logprobs.
    #[serde(default, skip_serializing_if = "is_false")]
    pub logprobs: bool,
    /// With `logprobs`, also the most likely alternatives at each position.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub top_logprobs: Option<usize>,
    /// Extra variables for the chat template (`enable_thinking`, ...).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chat_template_kwargs: Option<Map<String, Value>>,
    /// Return `prompt_token_ids`, and each choice's `token_ids` and `token_logprobs`.
    #[serde(default, skip_serializing_if = "is_false")]
    pub return_token_ids: bool,
    /// temper's extension for multi-turn rollouts: the first messages as tokens (see
    /// [`TokenPrefix`]). Servers that do not know it ignore it and render every message.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token_prefix: Option<TokenPrefix>,
    /// Sampling.
    #[serde(flatten)]
    pub sampling: SamplingFields,
}

/// The first `messages` messages of a chat request as the tokens the model saw and wrote: the
/// prompt of an earlier turn followed by what was sampled for it, exactly. The server (`temper
/// inference serve`) appends the template's continuation for the remaining messages (and the
/// next assistant header) as new tokens, so nothing sampled is re-rendered or re-tokenized and
/// the turn's `prompt_token_ids` extend `token_ids`.
///
/// `messages[messages - 1]` must be the assistant turn the last tokens were sampled for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TokenPrefix {
    /// The tokens of the first `messages` messages.
    pub token_ids: Vec<u32>,
    /// How many messages they cover.
    pub messages: usize,
}

/// A prompt as text or as token ids.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum PromptInput {
    /// Text, tokenized by the server.
    Text(String),
    /// Token ids, used as they are.
    Ids(Vec<u32>),
}

/// The body of `POST /v1/completions`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CompletionRequest {
    /// The model name (servers of one model ignore it).
    #[serde(default)]
    pub model: String,
    /// What to continue.
    pub prompt: PromptInput,
    /// Answer as server-sent events.
    #[serde(default, skip_serializing_if = "is_false")]
    pub stream: bool,
    /// Return logprobs with this many alternatives per position.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub logprobs: Option<usize>,
    /// Return each choice's `token_ids`.
    #[serde(default, skip_serializing_if = "is_false")]
    pub return_token_ids: bool,
    /// Sampling.
    #[serde(flatten)]
    pub sampling: SamplingFields,
}

/// The body of `POST /v1/generate` (temper's token-in, token-out route).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GenerateRequest {
    /// The prompt's tokens.
    pub prompt_token_ids: Vec<u32>,
    /// Sampling.
    #[serde(flatten)]
    pub sampling: SamplingFields,
}

// ---------------------------------------------------------------------------------------------
// Replies.

/// Token counts of a reply.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct CompletionUsage {
    /// Tokens in the prompt.
    #[serde(default)]
    pub prompt_tokens: u64,
    /// Tokens generated, over every choice.
    #[serde(default)]
    pub completion_tokens: u64,
    /// The sum of the two.
    #[serde(default)]
    pub total_tokens: u64,
}

impl CompletionUsage {
    /// Counts with their total.
    pub fn new(prompt_tokens: usize, completion_tokens: usize) -> Self {
        let (p, c) = (prompt_tokens as u64, completion_tokens as u64);
        Self { prompt_tokens: p, completion_tokens: c, total_tokens: p + c }
    }
}

impl From<CompletionUsage> for Usage {
    fn from(u: CompletionUsage) -> Self {
        Self { prompt_tokens: u.prompt_tokens, completion_tokens: u.completion_tokens }
    }
}

/// The reply of a non-streamed chat completion.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChatCompletion {
    /// Request id.
    #[serde(default)]
    pub id: String,
    /// `"chat.completion"`.
    #[serde(default)]
    pub object: String,
    /// Unix time of the reply, in seconds.
    #[serde(default)]
    pub created: u64,
    /// The model name.
    #[serde(default)]
    pub model: String,
    /// One per continuation.
    pub choices: Vec<ChatChoice>,
    /// Token counts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<CompletionUsage>,
    /// The prompt's tokens, when the request set `return_token_ids`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt_token_ids: Option<Vec<u32>>,
    /// The oldest weight version that produced any token of the reply (temper's server).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub policy_version: Option<u64>,
}

/// One continuation of a chat completion.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChatChoice {
    /// Position among the request's `n`.
    #[serde(default)]
    pub index: usize,
    /// What the model wrote.
    pub message: AssistantMessage,
    /// Why it ended.
    #[serde(default)]
    pub finish_reason: Option<FinishReason>,
    /// The sampled tokens' logprobs, when asked for.
    #[serde(default)]
    pub logprobs: Option<ChatLogprobs>,
    /// The sampled tokens, when the request set `return_token_ids`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token_ids: Option<Vec<u32>>,
    /// One logprob per entry of `token_ids` (temper's server).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token_logprobs: Option<Vec<f32>>,
}

impl ChatChoice {
    /// The sampled tokens' logprobs, from `token_logprobs` or else OpenAI's `logprobs.content`.
    pub fn sampled_logprobs(&self) -> Option<Vec<f32>> {
        self.token_logprobs.clone().or_else(|| {
            let content = self.logprobs.as_ref()?.content.as_ref()?;
            Some(content.iter().map(|t| t.logprob).collect())
        })
    }
}

/// The assistant's message in a reply.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AssistantMessage {
    /// Always the assistant.
    #[serde(default = "assistant")]
    pub role: Role,
    /// The text; `null` when the model only called tools.
    #[serde(default)]
    pub content: Option<String>,
    /// Reasoning returned apart from the content (vLLM's reasoning parsers).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning_content: Option<String>,
    /// Tool calls, in order.
    #[serde(default, skip_serializing_if = "Vec::is_empty", deserialize_with = "null_as_empty")]
    pub tool_calls: Vec<ToolCall>,
}

/// OpenAI's chat `logprobs` object.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct ChatLogprobs {
    /// One entry per generated token.
    #[serde(default)]
    pub content: Option<Vec<TokenLogprob>>,
}

/// The logprob of one generated token, with the most likely alternatives.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TokenLogprob {
    /// The token's text.
    #[serde(default)]
    pub token: String,
    /// Its logprob.
    pub logprob: f32,
    /// The token's UTF-8 bytes.
    #[serde(default)]
    pub bytes: Option<Vec<u8>>,
    /// The most likely tokens at this position.
    #[serde(default)]
    pub top_logprobs: Vec<TopLogprob>,
}

/// An alternative token at one position.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TopLogprob {
    /// The token's text.
    #[serde(default)]
    pub token: String,
    /// Its logprob.
    pub logprob: f32,
    /// The token's UTF-8 bytes.
    #[serde(default)]
    pub bytes: Option<Vec<u8>>,
}

/// One server-sent event of a streamed chat completion.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChatChunk {
    /// Request id, the same in every chunk.
    pub id: String,
    /// `"chat.completion.chunk"`.
    pub object: String,
    /// Unix time of the request, in seconds.
    pub created: u64,
    /// The model name.
    pub model: String,
    /// The choices this chunk advances (none in the last, usage-only chunk).
    pub choices: Vec<ChunkChoice>,
    /// Token counts, in the last chunk when `stream_options.include_usage` was set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<CompletionUsage>,
}

/// What one chunk adds to one choice.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChunkChoice {
    /// Which choice.
    pub index: usize,
    /// The new part.
    pub delta: Delta,
    /// Set in the choice's last chunk.
    #[serde(default)]
    pub finish_reason: Option<FinishReason>,
    /// Logprobs of this chunk's tokens, when asked for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub logprobs: Option<ChatLogprobs>,
}

/// The new part of a streamed message.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct Delta {
    /// Set in the first chunk.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub role: Option<Role>,
    /// New text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content: Option<String>,
    /// Tool calls, sent whole in the choice's last chunk.
    #[serde(default, skip_serializing_if = "Vec::is_empty", deserialize_with = "null_as_empty")]
    pub tool_calls: Vec<ToolCallDelta>,
}

/// A tool call in a stream, with its position among the message's calls.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolCallDelta {
    /// Position among the message's tool calls.
    pub index: usize,
    /// The call.
    #[serde(flatten)]
    pub call: ToolCall,
}

/// The reply of `/v1/completions`, and each event of its stream (with one choice, no usage).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TextCompletion {
    /// Request id.
    pub id: String,
    /// `"text_completion"`.
    pub object: String,
    /// Unix time of the request, in seconds.
    pub created: u64,
    /// The model name.
    pub model: String,
    /// Continuations.
    pub choices: Vec<TextChoice>,
    /// Token counts (not in stream events).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<CompletionUsage>,
}

/// One continuation of a text completion.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TextChoice {
    /// Position among the request's `n`.
    pub index: usize,
    /// The text.
    pub text: String,
    /// Why it ended (`null` in stream events before the last).
    #[serde(default)]
    pub finish_reason: Option<FinishReason>,
    /// Logprobs, when asked for.
    #[serde(default)]
    pub logprobs: Option<TextLogprobs>,
    /// The sampled tokens, when the request set `return_token_ids`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token_ids: Option<Vec<u32>>,
}

/// OpenAI's legacy completion `logprobs` object.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct TextLogprobs {
    /// Each token's text.
    pub tokens: Vec<String>,
    /// Each token's logprob.
    pub token_logprobs: Vec<f32>,
    /// The most likely alternatives at each position, most likely first.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub top_logprobs: Option<Vec<TopMap>>,
    /// Byte offset of each token in the text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text_offset: Option<Vec<usize>>,
}

/// A `{token: logprob}` object that keeps its order (most likely first).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct TopMap(pub Vec<(String, f32)>);

impl Serialize for TopMap {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut map = s.serialize_map(Some(self.0.len()))?;
        for (token, logprob) in &self.0 {
            map.serialize_entry(token, logprob)?;
        }
        map.end()
    }
}

impl<'de> Deserialize<'de> for TopMap {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Entries;
        impl<'de> Visitor<'de> for Entries {
            type Value = TopMap;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("an object of token logprobs")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<TopMap, A::Error> {
                let mut out = Vec::new();
                while let Some(entry) = map.next_entry::<String, f32>()? {
                    out.push(entry);
                }
                Ok(TopMap(out))
            }
        }
        d.deserialize_map(Entries)
    }
}

/// The reply of `/v1/generate`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GenerateReply {
    /// One per continuation.
    pub choices: Vec<GenerateChoice>,
    /// The oldest weight version that produced any token.
    pub policy_version: u64,
}

/// One continuation of `/v1/generate`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GenerateChoice {
    /// The sampled tokens.
    pub token_ids: Vec<u32>,
    /// One logprob per sampled token (see the module's contract).
    pub logprobs: Vec<f32>,
    /// Why it ended.
    pub finish_reason: FinishReason,
    /// The tokens' text.
    pub text: String,
    /// The weight version of the first token (`null` when none was generated).
    pub policy_version: Option<u64>,
    /// The weight version of the last token.
    pub last_policy_version: u64,
}

/// The reply of `GET /v1/models`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModelList {
    /// `"list"`.
    pub object: String,
    /// The models served.
    pub data: Vec<ModelCard>,
}

/// One served model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModelCard {
    /// The name requests use.
    pub id: String,
    /// `"model"`.
    pub object: String,
    /// Who serves it.
    pub owned_by: String,
    /// Its context length in tokens (vLLM's field).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_model_len: Option<usize>,
}

fn is_false(b: &bool) -> bool {
    !*b
}

fn assistant() -> Role {
    Role::Assistant
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn chat_request_names_match_openai_and_vllm() {
        let sampling = SamplingParams {
            temperature: Some(0.5),
            max_tokens: Some(7),
            stop: vec!["x".into()],
            ..SamplingParams::default()
        };
        let req = ChatCompletionRequest {
            model: "m".into(),
            messages: vec![Message::user("hi")],
            tools: Vec::new(),
            tool_choice: None,
            stream: false,
            stream_options: None,
            logprobs: true,
            top_logprobs: None,
            chat_template_kwargs: None,
            return_token_ids: true,
            token_prefix: None,
            sampling: SamplingFields::from(&sampling),
        };
        assert_eq!(
            serde_json::to_value(&req).expect("ser"),
            json!({"model": "m", "messages": [{"role": "user", "content": "hi"}],
                   "logprobs": true, "return_token_ids": true,
                   "temperature": 0.5, "max_tokens": 7, "stop": ["x"]})
        );
        let read: ChatCompletionRequest<Value> = serde_json::from_value(json!({
            "messages": [{"role": "user", "content": "hi"}], "stop": "a", "top_k": -1,
            "stream_options": {"include_usage": true}, "user": "ignored"}))
        .expect("parse");
        assert_eq!(read.sampling.stop.expect("stop").to_vec(), vec!["a".to_owned()]);
        assert_eq!(read.sampling.top_k, Some(-1));
        assert!(read.stream_options.expect("options").include_usage);
    }

    #[test]
    fn reply_logprobs_read_from_either_shape() {
        let temper: ChatCompletion = serde_json::from_value(json!({"choices": [{
            "message": {"role": "assistant", "content": "ab"}, "finish_reason": "stop",
            "token_ids": [5, 6], "token_logprobs": [-0.5, -0.25]}]}))
        .expect("temper");
        assert_eq!(temper.choices[0].sampled_logprobs(), Some(vec![-0.5, -0.25]));
        let vllm: ChatCompletion = serde_json::from_value(json!({"choices": [{
            "message": {"content": null, "tool_calls": null}, "finish_reason": "function_call",
            "logprobs": {"content": [{"token": "a", "logprob": -1.0, "top_logprobs": []}]}}]}))
        .expect("vllm");
        let choice = &vllm.choices[0];
        assert_eq!(choice.sampled_logprobs(), Some(vec![-1.0]));
        assert_eq!(choice.finish_reason, Some(FinishReason::ToolCalls));
        assert_eq!(choice.message.content, None);
        let odd: ChatChoice = serde_json::from_value(json!({
            "message": {"content": "x"}, "finish_reason": "content_filter"}))
        .expect("odd");
        assert_eq!(odd.finish_reason, Some(FinishReason::Other));
    }

    #[test]
    fn chunk_and_top_map_shapes() {
        let chunk = ChatChunk {
            id: "c".into(),
            object: "chat.completion.chunk".into(),
            created: 1,
            model: "m".into(),
            choices: vec![ChunkChoice {
                index: 0,
                delta: Delta {
                    role: Some(Role::Assistant),
                    content: Some(String::new()),
                    ..Delta::default()
                },
                finish_reason: None,
                logprobs: None,
            }],
            usage: None,
        };
        assert_eq!(
            serde_json::to_value(&chunk).expect("ser"),
            json!({"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "m",
                   "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""},
                                "finish_reason": null}]})
        );
        let top = TopMap(vec![("z".into(), -0.5), ("a".into(), -1.5)]);
        let text = serde_json::to_string(&top).expect("ser");
        assert_eq!(text, r#"{"z":-0.5,"a":-1.5}"#);
        assert_eq!(serde_json::from_str::<TopMap>(&text).expect("parse"), top);
    }
}
