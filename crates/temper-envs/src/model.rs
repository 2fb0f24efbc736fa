//! The environment's view of a model: something that answers a conversation.

use std::fmt;

use async_trait::async_trait;
use temper_protocol::openai::TokenPrefix;
use temper_protocol::{FinishReason, Message, SamplingParams, ToolSpec, Usage};

/// One chat turn to generate.
#[derive(Debug, Clone, PartialEq)]
pub struct ChatRequest {
    /// The conversation so far.
    pub messages: Vec<Message>,
    /// Tools the model may call.
    pub tools: Vec<ToolSpec>,
    /// Sampling options.
    pub sampling: SamplingParams,
    /// The first messages as the tokens sampled for them, when the rollout has them: a model
    /// that takes token input continues from these tokens instead of re-rendering the messages
    /// they cover; others ignore it.
    pub prefix: Option<TokenPrefix>,
}

/// The model's turn.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelReply {
    /// The assistant message, with any tool calls.
    pub message: Message,
    /// Why generation stopped.
    pub finish_reason: FinishReason,
    /// Token counts, as the server reported them (zeros when it did not).
    pub usage: Usage,
    /// Token ids and logprobs, when the server returns them.
    pub tokens: Option<TurnTokens>,
    /// Policy version of the weights that generated the turn, when the server reports it.
    pub policy_version: Option<u64>,
}

/// Token ids of one turn: the full prompt the server saw and what it generated.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct TurnTokens {
    /// Token ids of the rendered prompt of this turn (all earlier turns included).
    pub prompt_ids: Vec<u32>,
    /// Generated token ids.
    pub completion_ids: Vec<u32>,
    /// Sampling logprob of each generated token.
    pub logprobs: Vec<f32>,
}

/// Why a model could not produce a turn (after whatever retries the implementation does).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ModelError {
    /// The server answered with an error status.
    #[error("{url}: HTTP {status}: {body}")]
    Status {
        /// The endpoint.
        url: String,
        /// HTTP status code.
        status: u16,
        /// The start of the response body.
        body: String,
    },
    /// The request did not complete in time.
    #[error("{url}: no reply within {seconds} s")]
    Timeout {
        /// The endpoint.
        url: String,
        /// The limit that passed.
        seconds: f64,
    },
    /// The server could not be reached.
    #[error("{url}: cannot connect: {message}")]
    Connect {
        /// The endpoint.
        url: String,
        /// The transport's message.
        message: String,
    },
    /// The server replied with something that is not a chat completion.
    #[error("{url}: invalid reply: {message}")]
    InvalidReply {
        /// The endpoint.
        url: String,
        /// What is wrong with it.
        message: String,
    },
}

/// A chat model: given a conversation, writes the next assistant turn.
///
/// Implementations: the OpenAI-compatible HTTP client in `temper-client`, the orchestrator's
/// token-level client, and scripted fakes in tests.
#[async_trait]
pub trait ChatModel: Send + Sync + fmt::Debug {
    /// Generates one assistant turn.
    async fn chat(&self, request: &ChatRequest) -> Result<ModelReply, ModelError>;
}
