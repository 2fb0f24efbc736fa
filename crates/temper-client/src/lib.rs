//! A client for OpenAI-compatible chat-completions endpoints (OpenAI, vLLM, SGLang, `temper
//! inference serve`), implementing `temper_envs::ChatModel`.
//!
//! The client retries what is worth retrying — HTTP 408, 429 and 5xx, timeouts and refused
//! connections — with exponential backoff, honouring `Retry-After`; any other error is returned
//! at once. [`Limited`] caps the number of requests in flight across every clone that shares it.
//!
//! [`sandbox::SandboxClient`] is the `CodeRunner` of a remote `temper sandbox serve`;
//! [`admin::InferenceAdmin`] calls an inference server's weight-update and health routes.
//!
//! This crate knows HTTP and the OpenAI JSON shapes; it knows nothing about environments beyond
//! the `ChatModel` trait, nor about tokenizers or training.

pub mod admin;
pub mod sandbox;

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use temper_envs::{ChatModel, ChatRequest, ModelError, ModelReply, TurnTokens};
use temper_protocol::openai::{ChatCompletion, ChatCompletionRequest, SamplingFields};
use temper_protocol::{FinishReason, Message, Role, Usage};
use tokio::sync::Semaphore;

/// Largest response body accepted from a server.
pub const MAX_BODY_BYTES: usize = 64 << 20;

/// When and how often to retry.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RetryPolicy {
    /// Retries after the first attempt.
    pub max_retries: u32,
    /// Wait before the first retry; doubled each time.
    pub initial_backoff: Duration,
    /// Longest wait between attempts (also caps `Retry-After`).
    pub max_backoff: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self {
            max_retries: 5,
            initial_backoff: Duration::from_millis(500),
            max_backoff: Duration::from_secs(16),
        }
    }
}

impl RetryPolicy {
    fn backoff(&self, attempt: u32) -> Duration {
        self.initial_backoff.saturating_mul(1u32 << attempt.min(16)).min(self.max_backoff)
    }
}

/// A chat-completions client for one model on one server.
#[derive(Debug, Clone)]
pub struct OpenAiClient {
    url: String,
    model: String,
    api_key: Option<String>,
    http: reqwest::Client,
    retry: RetryPolicy,
    timeout: Duration,
    token_ids: bool,
}

/// The ids of the models an OpenAI-compatible server lists at `{base_url}/models`.
pub async fn served_models(
    base_url: &str,
    api_key: Option<&str>,
    timeout: Duration,
) -> Result<Vec<String>, ModelError> {
    let url = format!("{}/models", base_url.trim_end_matches('/'));
    let fail = |message: String| ModelError::Connect { url: url.clone(), message };
    let http = reqwest::Client::builder()
        .connect_timeout(timeout)
        .timeout(timeout)
        .build()
        .map_err(|e| fail(e.to_string()))?;
    let mut request = http.get(&url);
    if let Some(key) = api_key {
        request = request.bearer_auth(key);
    }
    let response = request.send().await.map_err(|e| fail(e.to_string()))?;
    if !response.status().is_success() {
        return Err(ModelError::Status {
            url: url.clone(),
            status: response.status().as_u16(),
            body: String::new(),
        });
    }
    let bytes = response.bytes().await.map_err(|e| fail(e.to_string()))?;
    if bytes.len() > MAX_BODY_BYTES {
        return Err(fail(format!("the reply is larger than {MAX_BODY_BYTES} bytes")));
    }
    #[derive(serde::Deserialize)]
    struct List {
        data: Vec<Entry>,
    }
    #[derive(serde::Deserialize)]
    struct Entry {
        id: String,
    }
    let list: List = serde_json::from_slice(&bytes)
        .map_err(|e| ModelError::InvalidReply { url: url.clone(), message: e.to_string() })?;
    Ok(list.data.into_iter().map(|e| e.id).collect())
}

impl OpenAiClient {
    /// A client for `base_url` (for example `http://localhost:8000/v1`; requests go to
    /// `{base_url}/chat/completions`) and the model called `model` there.
    pub fn new(base_url: &str, model: &str, api_key: Option<String>) -> Result<Self, ModelError> {
        let url = format!("{}/chat/completions", base_url.trim_end_matches('/'));
        let parsed = reqwest::Url::parse(&url).map_err(|e| ModelError::Connect {
            url: url.clone(),
            message: format!("invalid URL: {e}"),
        })?;
        if !matches!(parsed.scheme(), "http" | "https") {
            return Err(ModelError::Connect {
                url,
                message: "the URL must start with http:// or https://".into(),
            });
        }
        let http = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(10))
            .build()
            .map_err(|e| ModelError::Connect { url: url.clone(), message: e.to_string() })?;
        Ok(Self {
            url,
            model: model.to_owned(),
            api_key,
            http,
            retry: RetryPolicy::default(),
            timeout: Duration::from_secs(600),
            token_ids: false,
        })
    }

    /// Asks for token ids and sampling logprobs with every reply (`"logprobs": true,
    /// "return_token_ids": true`, which `temper inference serve` and vLLM ≥ 0.10.2 understand),
    /// so replies carry [`ModelReply::tokens`] for training. A reply without them is an error
    /// then, not a silent untrainable rollout.
    pub fn with_token_ids(mut self) -> Self {
        self.token_ids = true;
        self
    }

    /// Sets the retry policy.
    pub fn with_retry(mut self, retry: RetryPolicy) -> Self {
        self.retry = retry;
        self
    }

    /// Sets the time limit of each attempt.
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// The endpoint requests go to.
    pub fn url(&self) -> &str {
        &self.url
    }

    fn body(&self, request: &ChatRequest) -> ChatCompletionRequest {
        ChatCompletionRequest {
            model: self.model.clone(),
            messages: request.messages.clone(),
            tools: request.tools.clone(),
            tool_choice: None,
            stream: false,
            stream_options: None,
            logprobs: self.token_ids,
            top_logprobs: None,
            chat_template_kwargs: None,
            return_token_ids: self.token_ids,
            // Only a client that reads token ids back can keep a token trace to continue from.
            token_prefix: if self.token_ids { request.prefix.clone() } else { None },
            sampling: SamplingFields::from(&request.sampling),
        }
    }

    /// A failure below HTTP: timeouts and connection or transfer errors are worth a retry; a
    /// request that could not even be built is not.
    fn transport_error(&self, e: &reqwest::Error) -> (ModelError, bool, Option<Duration>) {
        let url = self.url.clone();
        let error = if e.is_timeout() {
            ModelError::Timeout { url, seconds: self.timeout.as_secs_f64() }
        } else {
            ModelError::Connect { url, message: error_chain(e) }
        };
        (error, !e.is_builder(), None)
    }

    /// One attempt: `Ok` or an error with whether to retry and how long the server asked to wait.
    async fn attempt(
        &self,
        body: &ChatCompletionRequest,
    ) -> Result<ModelReply, (ModelError, bool, Option<Duration>)> {
        let mut builder = self.http.post(&self.url).timeout(self.timeout).json(body);
        if let Some(key) = &self.api_key {
            builder = builder.bearer_auth(key);
        }
        let response = builder.send().await.map_err(|e| self.transport_error(&e))?;
        let status = response.status();
        let retry_after = response
            .headers()
            .get(reqwest::header::RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<f64>().ok())
            .filter(|s| s.is_finite() && *s >= 0.0)
            .map(Duration::from_secs_f64);
        let mut response = response;
        let mut bytes = Vec::new();
        while let Some(chunk) = response.chunk().await.map_err(|e| self.transport_error(&e))? {
            if bytes.len() + chunk.len() > MAX_BODY_BYTES {
                let message = format!("the reply is larger than {MAX_BODY_BYTES} bytes");
                return Err((
                    ModelError::InvalidReply { url: self.url.clone(), message },
                    false,
                    None,
                ));
            }
            bytes.extend_from_slice(&chunk);
        }
        if !status.is_success() {
            let code = status.as_u16();
            let retry = code == 408 || code == 429 || status.is_server_error();
            let mut body: String = String::from_utf8_lossy(&bytes).chars().take(500).collect();
            if code == 404 {
                // vLLM and OpenAI answer an unknown model name with 404.
                let base = self.url.trim_end_matches("/chat/completions");
                body.push_str(&format!(
                    " (is `{}` a model this server serves? it lists them at {base}/models)",
                    self.model
                ));
            }
            return Err((
                ModelError::Status { url: self.url.clone(), status: code, body },
                retry,
                retry_after,
            ));
        }
        let parsed =
            if self.token_ids { parse_reply_with_tokens(&bytes) } else { parse_reply(&bytes) };
        parsed.map_err(|message| {
            (ModelError::InvalidReply { url: self.url.clone(), message }, false, None)
        })
    }
}

fn error_chain(e: &dyn std::error::Error) -> String {
    let mut message = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        message.push_str(": ");
        message.push_str(&s.to_string());
        source = s.source();
    }
    message
}

/// Parses a chat-completions response body. Reasoning returned separately (`reasoning_content`,
/// as vLLM's reasoning parsers do) is put back in front of the content inside `<think>` tags, so
/// parsers see what the model wrote.
pub fn parse_reply(bytes: &[u8]) -> Result<ModelReply, String> {
    parse_completion(bytes).map(|(reply, _)| reply)
}

/// [`parse_reply`] for a request that asked for token ids: the reply must carry the prompt's
/// token ids, the generated ids and one logprob per generated token.
pub fn parse_reply_with_tokens(bytes: &[u8]) -> Result<ModelReply, String> {
    let (mut reply, tokens) = parse_completion(bytes)?;
    let (prompt_ids, completion_ids, logprobs) = tokens;
    let prompt_ids = prompt_ids.ok_or("the reply has no prompt_token_ids")?;
    let completion_ids = completion_ids.ok_or("the reply's choice has no token_ids")?;
    let logprobs = logprobs.ok_or("the reply's choice has no logprobs")?;
    if logprobs.len() != completion_ids.len() {
        return Err(format!(
            "the reply has {} token ids but {} logprobs",
            completion_ids.len(),
            logprobs.len()
        ));
    }
    reply.tokens = Some(TurnTokens { prompt_ids, completion_ids, logprobs });
    Ok(reply)
}

type ReplyTokens = (Option<Vec<u32>>, Option<Vec<u32>>, Option<Vec<f32>>);

fn parse_completion(bytes: &[u8]) -> Result<(ModelReply, ReplyTokens), String> {
    let completion: ChatCompletion =
        serde_json::from_slice(bytes).map_err(|e| format!("not a chat completion: {e}"))?;
    let policy_version = completion.policy_version;
    let prompt_ids = completion.prompt_token_ids;
    let choice = completion.choices.into_iter().next().ok_or("the reply has no choices")?;
    let tokens = (prompt_ids, choice.token_ids.clone(), choice.sampled_logprobs());
    let mut content = choice.message.content.unwrap_or_default();
    if let Some(reasoning) = choice.message.reasoning_content.filter(|r| !r.is_empty()) {
        content = format!("<think>{reasoning}</think>{content}");
    }
    let message = Message {
        role: Role::Assistant,
        content,
        tool_calls: choice.message.tool_calls,
        tool_call_id: None,
        name: None,
    };
    let reply = ModelReply {
        message,
        finish_reason: choice.finish_reason.unwrap_or(FinishReason::Stop),
        usage: completion.usage.map(Usage::from).unwrap_or_default(),
        tokens: None,
        policy_version,
    };
    Ok((reply, tokens))
}

#[async_trait]
impl ChatModel for OpenAiClient {
    async fn chat(&self, request: &ChatRequest) -> Result<ModelReply, ModelError> {
        let body = self.body(request);
        let mut attempt = 0;
        loop {
            match self.attempt(&body).await {
                Ok(reply) => return Ok(reply),
                Err((error, retry, retry_after)) => {
                    if !retry || attempt >= self.retry.max_retries {
                        return Err(error);
                    }
                    let wait = retry_after.map_or_else(
                        || self.retry.backoff(attempt),
                        |d| d.min(self.retry.max_backoff),
                    );
                    tracing::debug!(attempt, ?wait, "retrying after: {error}");
                    tokio::time::sleep(wait).await;
                    attempt += 1;
                }
            }
        }
    }
}

/// A model with at most `n` requests in flight, shared by every clone.
#[derive(Debug, Clone)]
pub struct Limited<M> {
    inner: M,
    permits: Arc<Semaphore>,
}

impl<M> Limited<M> {
    /// Wraps `inner` with a limit of `n` (at least 1) concurrent requests.
    pub fn new(inner: M, n: usize) -> Self {
        Self { inner, permits: Arc::new(Semaphore::new(n.max(1))) }
    }
}

#[async_trait]
impl<M: ChatModel> ChatModel for Limited<M> {
    async fn chat(&self, request: &ChatRequest) -> Result<ModelReply, ModelError> {
        let _permit = self.permits.acquire().await.expect("the semaphore is never closed");
        self.inner.chat(request).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_content_tool_calls_and_reasoning() {
        let body = r#"{"choices": [{"message": {"role": "assistant", "content": null,
            "reasoning_content": "hmm",
            "tool_calls": [{"id": "a", "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
            "finish_reason": "tool_calls"}], "usage": {"prompt_tokens": 5, "completion_tokens": 7}}"#;
        let reply = parse_reply(body.as_bytes()).expect("parse");
        assert_eq!(reply.message.content, "<think>hmm</think>");
        assert_eq!(reply.message.tool_calls[0].function.name, "f");
        assert_eq!(reply.finish_reason, FinishReason::ToolCalls);
        assert_eq!(reply.usage, Usage { prompt_tokens: 5, completion_tokens: 7 });
        assert!(parse_reply(b"{\"choices\": []}").expect_err("empty").contains("no choices"));
        assert!(parse_reply(b"<html>").expect_err("html").contains("not a chat completion"));
    }

    #[test]
    fn parses_token_ids_in_temper_and_vllm_shapes() {
        let temper = r#"{"choices": [{"message": {"content": "ab"}, "finish_reason": "stop",
            "token_ids": [5, 6], "token_logprobs": [-0.5, -0.25]}],
            "prompt_token_ids": [1, 2, 3], "policy_version": 4}"#;
        let reply = parse_reply_with_tokens(temper.as_bytes()).expect("temper");
        let t = reply.tokens.expect("tokens");
        assert_eq!(
            (t.prompt_ids, t.completion_ids, t.logprobs),
            (vec![1, 2, 3], vec![5, 6], vec![-0.5, -0.25])
        );
        assert_eq!(reply.policy_version, Some(4));
        let vllm = r#"{"choices": [{"message": {"content": "ab"}, "finish_reason": "length",
            "token_ids": [5, 6], "logprobs": {"content": [{"token": "a", "logprob": -1.5}, {"token": "b", "logprob": -0.0}]}}],
            "prompt_token_ids": [1]}"#;
        let reply = parse_reply_with_tokens(vllm.as_bytes()).expect("vllm");
        assert_eq!(reply.tokens.expect("tokens").logprobs, [-1.5, 0.0]);
        assert_eq!(reply.policy_version, None);
        let short = r#"{"choices": [{"message": {"content": "ab"}, "token_ids": [5, 6], "token_logprobs": [-0.5]}],
            "prompt_token_ids": [1]}"#;
        let err = parse_reply_with_tokens(short.as_bytes()).expect_err("short");
        assert!(err.contains("2 token ids but 1 logprobs"), "{err}");
        let none = r#"{"choices": [{"message": {"content": "ab"}}]}"#;
        let err = parse_reply_with_tokens(none.as_bytes()).expect_err("none");
        assert!(err.contains("prompt_token_ids"), "{err}");
        assert!(parse_reply(none.as_bytes()).expect("plain").tokens.is_none());
    }

    #[test]
    fn request_asks_for_tokens_only_when_told() {
        let c = OpenAiClient::new("http://127.0.0.1:9/v1", "m", None).expect("client");
        let request = ChatRequest {
            messages: vec![Message::user("hi")],
            tools: Vec::new(),
            sampling: temper_protocol::SamplingParams {
                temperature: Some(1.0),
                ..Default::default()
            },
            prefix: None,
        };
        let plain = serde_json::to_string(&c.body(&request)).expect("ser");
        assert_eq!(
            plain,
            r#"{"model":"m","messages":[{"role":"user","content":"hi"}],"temperature":1.0}"#
        );
        let tokens = serde_json::to_string(&c.with_token_ids().body(&request)).expect("ser");
        assert!(
            tokens.contains(r#""logprobs":true"#) && tokens.contains(r#""return_token_ids":true"#)
        );
    }

    #[test]
    fn backoff_doubles_and_caps() {
        let p = RetryPolicy {
            max_retries: 9,
            initial_backoff: Duration::from_millis(100),
            max_backoff: Duration::from_millis(450),
        };
        let waits: Vec<u128> = (0..4).map(|a| p.backoff(a).as_millis()).collect();
        assert_eq!(waits, [100, 200, 400, 450]);
    }

    #[test]
    fn rejects_non_http_urls() {
        assert!(OpenAiClient::new("ftp://x", "m", None).is_err());
        assert!(OpenAiClient::new("not a url", "m", None).is_err());
        let c = OpenAiClient::new("http://127.0.0.1:9/v1/", "m", None).expect("client");
        assert_eq!(c.url(), "http://127.0.0.1:9/v1/chat/completions");
    }
}
