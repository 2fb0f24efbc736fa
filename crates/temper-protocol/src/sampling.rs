//! Sampling options and what a model reports about a finished turn.
//!
//! Contract: produced by `temper eval` and the orchestrator from configuration; consumed by chat
//! clients and inference engines. An absent option means "the server's default".

use serde::{Deserialize, Serialize};

/// Sampling options for one model turn.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SamplingParams {
    /// Softmax temperature; 0 means greedy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub temperature: Option<f64>,
    /// Nucleus sampling mass in (0, 1].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub top_p: Option<f64>,
    /// Keep only the `top_k` most likely tokens.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub top_k: Option<u32>,
    /// Drop tokens whose probability is below `min_p` times the most likely one's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_p: Option<f64>,
    /// Most tokens the model may write in one turn.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u32>,
    /// Seed for the sampler, where the server supports one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seed: Option<u64>,
    /// Strings that end the turn when generated.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub stop: Vec<String>,
}

/// Why a model turn ended, as the server reported it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FinishReason {
    /// The model ended its turn, or a stop string or token was generated.
    Stop,
    /// `max_tokens` or the context length was reached: the turn is truncated.
    Length,
    /// The model asked for tool calls (OpenAI's older `function_call` reads as this).
    #[serde(alias = "function_call")]
    ToolCalls,
    /// Anything else the server reported (`content_filter`, ...).
    #[serde(other)]
    Other,
}

/// Token counts of one turn, as reported by the server.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Usage {
    /// Tokens in the prompt of this turn.
    pub prompt_tokens: u64,
    /// Tokens the model generated in this turn.
    pub completion_tokens: u64,
}
