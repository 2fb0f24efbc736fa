//! The HTTP server: OpenAI-compatible `/v1/chat/completions` and `/v1/completions` (with SSE
//! streaming and logprobs), the token-in `/v1/generate`, and the admin routes `/update_weights`,
//! `/pause`, `/resume`, `/health`, `/metrics`.
//!
//! Every body it reads or writes is a type of `temper_protocol::openai` or
//! `temper_protocol::admin`, the same types `temper-client` uses; errors are
//! `temper_protocol::ErrorBody` (with OpenAI's `type`), for a bad body or unknown route too.

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::Router;
use axum::extract::rejection::JsonRejection;
use axum::extract::{DefaultBodyLimit, Json, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use candle_core::{DType, Device};
use futures::Stream;
use serde::Serialize;
use serde_json::Value;
use temper_model::{ChatTemplate, Transformer, weights};
use temper_protocol::admin::{Health, PauseReply, UpdateWeightsReply, UpdateWeightsRequest};
use temper_protocol::error::{code_for_status, json_errors};
use temper_protocol::openai::{
    AssistantMessage, ChatChoice, ChatChunk, ChatCompletion, ChatCompletionRequest, ChatLogprobs,
    ChunkChoice, CompletionRequest, CompletionUsage, Delta, GenerateChoice, GenerateReply,
    GenerateRequest, ModelCard, ModelList, PromptInput, SamplingFields, TextChoice, TextCompletion,
    TextLogprobs, TokenLogprob, TokenPrefix, ToolCallDelta, TopLogprob, TopMap,
};
use temper_protocol::{ErrorBody, FinishReason, Role, ToolSpec};
use tokio::sync::mpsc::UnboundedReceiver;

use crate::engine::{Engine, Event, Finish, Request, SubmitError};
use crate::sampling::SamplingOptions;
use crate::toolcall;

/// Largest request body accepted.
const MAX_BODY: usize = 16 << 20;

/// What the server needs besides the engine.
#[derive(Debug)]
pub struct ServerState {
    /// The engine.
    pub engine: Engine,
    /// The chat template, when the model has one (`/v1/chat/completions` needs it).
    pub template: Option<ChatTemplate>,
    /// The name reported as `model`.
    pub model_name: String,
    /// The dtype and device new weights are loaded as.
    pub dtype: DType,
    /// See `dtype`.
    pub device: Device,
    /// Serialises weight updates.
    updating: tokio::sync::Mutex<()>,
    /// Generated tokens per second over the last ten seconds (updated by a background task).
    tokens_per_s: std::sync::Mutex<f64>,
    /// How the model writes tool calls, from its chat template.
    tool_format: toolcall::Format,
}

impl ServerState {
    /// The state of a server of `engine` that reports `model_name` and loads new weights as
    /// `dtype` on `device`.
    pub fn new(
        engine: Engine,
        template: Option<ChatTemplate>,
        model_name: String,
        dtype: DType,
        device: Device,
    ) -> Arc<Self> {
        let tool_format = template
            .as_ref()
            .map(|t| toolcall::Format::of_template(t.source()))
            .unwrap_or_default();
        Arc::new(Self {
            tool_format,
            engine,
            template,
            model_name,
            dtype,
            device,
            updating: tokio::sync::Mutex::new(()),
            tokens_per_s: std::sync::Mutex::new(0.0),
        })
    }
}

/// The routes over `state`.
pub fn router(state: Arc<ServerState>) -> Router {
    tokio::spawn(measure_rate(Arc::downgrade(&state)));
    Router::new()
        .route("/v1/chat/completions", post(chat_completions))
        .route("/v1/completions", post(completions))
        .route("/v1/generate", post(generate))
        .route("/v1/models", get(models))
        .route("/update_weights", post(update_weights))
        .route("/pause", post(pause))
        .route("/resume", post(resume))
        .route("/health", get(health))
        .route("/metrics", get(metrics))
        .fallback(|| async { ApiError::new(StatusCode::NOT_FOUND, "no such route") })
        .method_not_allowed_fallback(|| async {
            ApiError::new(StatusCode::METHOD_NOT_ALLOWED, "this route does not take that method")
        })
        .layer(axum::middleware::map_response(json_errors))
        .layer(axum::middleware::from_fn(access_log))
        .layer(DefaultBodyLimit::max(MAX_BODY))
        .with_state(state)
}

/// Where [`access_log`] writes: `temper inference serve` shows it by default.
pub const ACCESS_LOG: &str = "temper_inference::access";

/// One `info` line per request (method, path, status, milliseconds), as vLLM's server logs
/// them; the probes (`/health`, `/metrics`) are left out.
async fn access_log(request: axum::extract::Request, next: axum::middleware::Next) -> Response {
    let (method, path) = (request.method().clone(), request.uri().path().to_owned());
    let started = std::time::Instant::now();
    let response = next.run(request).await;
    if path != "/health" && path != "/metrics" {
        tracing::info!(
            target: ACCESS_LOG,
            "{method} {path} {} {:.0} ms",
            response.status().as_u16(),
            started.elapsed().as_secs_f64() * 1e3
        );
    }
    response
}

async fn measure_rate(state: std::sync::Weak<ServerState>) {
    let mut window: std::collections::VecDeque<(std::time::Instant, u64)> = Default::default();
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    loop {
        tick.tick().await;
        let Some(state) = state.upgrade() else { return };
        let now = std::time::Instant::now();
        window.push_back((now, state.engine.stats().generated_tokens.load(Ordering::Relaxed)));
        while window.len() > 11 {
            window.pop_front();
        }
        if let (Some(first), Some(last)) = (window.front(), window.back()) {
            let dt = last.0.duration_since(first.0).as_secs_f64();
            if dt > 0.0
                && let Ok(mut r) = state.tokens_per_s.lock()
            {
                *r = (last.1 - first.1) as f64 / dt;
            }
        }
    }
}

/// An error answered as [`ErrorBody`] with OpenAI's `type`.
#[derive(Debug)]
pub struct ApiError {
    status: StatusCode,
    message: String,
}

impl ApiError {
    fn new(status: StatusCode, message: impl Into<String>) -> Self {
        Self { status, message: message.into() }
    }

    fn bad(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, message)
    }

    fn internal(message: impl Into<String>) -> Self {
        Self::new(StatusCode::INTERNAL_SERVER_ERROR, message)
    }

    fn body(&self) -> ErrorBody {
        let kind = match self.status.as_u16() {
            429 => "rate_limit_error",
            400..=499 => "invalid_request_error",
            _ => "server_error",
        };
        ErrorBody::new(code_for_status(self.status.as_u16()), &self.message).with_kind(kind)
    }
}

impl From<SubmitError> for ApiError {
    fn from(e: SubmitError) -> Self {
        let status = match e {
            SubmitError::Invalid(_) => StatusCode::BAD_REQUEST,
            SubmitError::Overloaded(_) => StatusCode::TOO_MANY_REQUESTS,
            SubmitError::Stopped => StatusCode::SERVICE_UNAVAILABLE,
        };
        Self::new(status, e.to_string())
    }
}

impl From<JsonRejection> for ApiError {
    fn from(e: JsonRejection) -> Self {
        Self::new(e.status(), e.body_text())
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut resp = (self.status, Json(self.body())).into_response();
        if self.status == StatusCode::TOO_MANY_REQUESTS {
            resp.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
        }
        resp
    }
}

/// The engine's options for `fields` (OpenAI's names, plus vLLM's `top_k`, `min_p`,
/// `stop_token_ids`, `ignore_eos`), and the number of continuations.
fn sampling_options(
    fields: &SamplingFields,
    engine: &Engine,
    prompt_len: usize,
    top_logprobs: usize,
) -> Result<(SamplingOptions, usize), ApiError> {
    for (name, v) in [
        ("frequency_penalty", fields.frequency_penalty),
        ("presence_penalty", fields.presence_penalty),
    ] {
        if v.is_some_and(|v| v != 0.0) {
            return Err(ApiError::bad(format!("{name} is not supported (only 0)")));
        }
    }
    let room = engine.config().max_position_embeddings.saturating_sub(prompt_len);
    let max_tokens = match fields.max_completion_tokens.or(fields.max_tokens) {
        Some(0) => return Err(ApiError::bad("max_tokens must be at least 1")),
        Some(m) => usize::try_from(m).unwrap_or(usize::MAX).min(room.max(1)),
        None => room.max(1),
    };
    let top_k = match fields.top_k {
        None | Some(-1) | Some(0) => 0,
        Some(k) if k > 0 => k as usize,
        Some(k) => {
            return Err(ApiError::bad(format!("top_k must be -1 (off) or positive, got {k}")));
        }
    };
    let opts = SamplingOptions {
        temperature: fields.temperature.unwrap_or(1.0),
        top_p: fields.top_p.unwrap_or(1.0),
        top_k,
        min_p: fields.min_p.unwrap_or(0.0),
        max_tokens,
        stop_token_ids: fields.stop_token_ids.clone().unwrap_or_default(),
        stop: fields.stop.as_ref().map(|s| s.to_vec()).unwrap_or_default(),
        ignore_eos: fields.ignore_eos.unwrap_or(false),
        seed: fields.seed,
        top_logprobs,
    };
    Ok((opts, fields.n.unwrap_or(1)))
}

/// One finished continuation.
#[derive(Debug, Default)]
struct Choice {
    ids: Vec<u32>,
    logprobs: Vec<f32>,
    tops: Vec<Vec<(u32, f32)>>,
    text: String,
    finish: Option<Finish>,
    first_version: Option<u64>,
    last_version: u64,
}

/// Collects every event of a request.
async fn collect(mut rx: UnboundedReceiver<Event>, n: usize) -> Result<Vec<Choice>, ApiError> {
    let mut choices: Vec<Choice> = (0..n).map(|_| Choice::default()).collect();
    let mut open = n;
    while open > 0 {
        let Some(ev) = rx.recv().await else {
            return Err(ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "the engine stopped"));
        };
        match ev {
            Event::Token { index, id, logprob, top, text, version } => {
                let c = &mut choices[index];
                c.ids.push(id);
                c.logprobs.push(logprob);
                c.tops.push(top);
                c.text.push_str(&text);
                c.first_version.get_or_insert(version);
                c.last_version = version;
            }
            Event::Finished { index, reason, text } => {
                choices[index].text.push_str(&text);
                choices[index].finish = Some(reason);
                open -= 1;
            }
        }
    }
    for c in &choices {
        if let Some(Finish::Error(e)) = &c.finish {
            return Err(ApiError::internal(e.clone()));
        }
    }
    Ok(choices)
}

fn finish_reason(f: Option<&Finish>) -> FinishReason {
    match f {
        Some(Finish::Length) => FinishReason::Length,
        _ => FinishReason::Stop,
    }
}

fn now_secs() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0)
}

fn request_id(prefix: &str) -> String {
    format!("{prefix}-{:016x}", rand::random::<u64>())
}

fn token_text(engine: &Engine, id: u32) -> String {
    engine.tokenizer().decode(&[id], false).unwrap_or_default()
}

/// OpenAI chat `logprobs` for the tokens `ids`.
fn chat_logprobs(
    engine: &Engine,
    ids: &[u32],
    lps: &[f32],
    tops: &[Vec<(u32, f32)>],
) -> ChatLogprobs {
    let top = |id: u32, logprob: f32| {
        let token = token_text(engine, id);
        TopLogprob { bytes: Some(token.as_bytes().to_vec()), token, logprob }
    };
    let content = ids
        .iter()
        .zip(lps)
        .zip(tops)
        .map(|((&id, &lp), alternatives)| {
            let TopLogprob { token, logprob, bytes } = top(id, lp);
            let top_logprobs = alternatives.iter().map(|&(i, l)| top(i, l)).collect();
            TokenLogprob { token, logprob, bytes, top_logprobs }
        })
        .collect();
    ChatLogprobs { content: Some(content) }
}

// ---------------------------------------------------------------------------------------------
// /v1/chat/completions

/// Messages as Hugging Face templates expect them: text content, tool-call arguments as objects.
fn template_messages(messages: &[Value]) -> Result<Vec<Value>, ApiError> {
    messages
        .iter()
        .enumerate()
        .map(|(i, m)| {
            let mut m = m
                .as_object()
                .cloned()
                .ok_or_else(|| ApiError::bad(format!("messages[{i}] is not an object")))?;
            if !m.get("role").is_some_and(Value::is_string) {
                return Err(ApiError::bad(format!("messages[{i}].role is missing")));
            }
            if let Some(Value::Array(parts)) = m.get("content") {
                let mut text = String::new();
                for (j, p) in parts.iter().enumerate() {
                    match (
                        p.get("type").and_then(Value::as_str),
                        p.get("text").and_then(Value::as_str),
                    ) {
                        (Some("text"), Some(t)) => text.push_str(t),
                        _ => {
                            return Err(ApiError::bad(format!(
                                "messages[{i}].content[{j}]: only text parts are supported"
                            )));
                        }
                    }
                }
                m.insert("content".into(), Value::String(text));
            }
            if m.get("content").is_none_or(Value::is_null) {
                m.insert("content".into(), Value::String(String::new()));
            }
            if let Some(Value::Array(calls)) = m.get_mut("tool_calls") {
                for call in calls {
                    if let Some(f) = call.get_mut("function")
                        && let Some(Value::String(args)) = f.get("arguments")
                        && let Ok(parsed) = serde_json::from_str::<Value>(args)
                    {
                        f["arguments"] = parsed;
                    }
                }
            }
            Ok(Value::Object(m))
        })
        .collect()
}

/// Runs `f` on tokio's blocking threads: rendering and tokenizing take time in proportion to the
/// body (up to [`MAX_BODY`], more where a template repeats text), and on an async thread they
/// would hold up every other request on it.
///
/// There is no cheaper check of the prompt's length before tokenizing: no sound bound relates
/// bytes to tokens for every tokenizer (one token can cover hundreds of bytes, a normalizer can
/// drop text, a template can repeat or leave out messages), so a byte limit below the body limit
/// could refuse a prompt that fits the context.
async fn off_runtime<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, ApiError> + Send + 'static,
) -> Result<T, ApiError> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| ApiError::internal(format!("preparing the prompt failed: {e}")))?
}

/// The tokens of `text`, refused (and freed, on the calling thread) when they leave no room in
/// the context.
fn tokenize(engine: &Engine, text: &str) -> Result<Vec<u32>, ApiError> {
    let ids = engine.tokenizer().encode(text).map_err(|e| ApiError::bad(e.to_string()))?;
    engine.check_prompt_len(ids.len())?;
    Ok(ids)
}

/// The prompt tokens of a chat request, rendered by the model's template off the runtime: the
/// whole conversation, or with a token prefix, those tokens and the template's continuation of
/// the messages after them.
async fn chat_prompt(
    st: &Arc<ServerState>,
    messages: Vec<Value>,
    tools: Option<Vec<Value>>,
    extra: serde_json::Map<String, Value>,
    prefix: Option<TokenPrefix>,
) -> Result<Vec<u32>, ApiError> {
    let st = st.clone();
    off_runtime(move || {
        let template = st.template.as_ref().ok_or_else(|| ApiError::bad("no chat template"))?;
        let messages = template_messages(&messages)?;
        let Some(prefix) = prefix else {
            let text = template
                .render(&messages, tools.as_deref(), true, &extra)
                .map_err(|e| ApiError::bad(e.to_string()))?;
            return tokenize(&st.engine, &text);
        };
        let k = prefix.messages;
        if k == 0 || k >= messages.len() {
            return Err(ApiError::bad(format!(
                "token_prefix.messages is {k}; it must be at least 1 and less than the {} messages (the prefix covers the earlier ones, the rest are rendered after it)",
                messages.len()
            )));
        }
        if messages[k - 1]["role"] != "assistant" {
            return Err(ApiError::bad(format!(
                "token_prefix.messages is {k}, but messages[{}] is not the assistant turn the tokens end with",
                k - 1
            )));
        }
        let vocab = st.engine.config().vocab_size;
        let Some(&last) = prefix.token_ids.last() else {
            return Err(ApiError::bad("token_prefix.token_ids is empty"));
        };
        if let Some(bad) = prefix.token_ids.iter().find(|&&t| t as usize >= vocab) {
            return Err(ApiError::bad(format!(
                "token_prefix.token_ids: id {bad} is outside the vocabulary of {vocab}"
            )));
        }
        // The special token the turn stopped on (its end-of-turn token) is already sampled; the
        // template's own copy of it is left out.
        let tokenizer = st.engine.tokenizer();
        let special = tokenizer.decode(&[last], true).map(|t| t.is_empty()).unwrap_or(false);
        let closing = if special { token_text(&st.engine, last) } else { String::new() };
        let tail = template
            .continuation_after(&messages[..k], &messages[k..], tools.as_deref(), &extra, &closing)
            .map_err(|e| ApiError::bad(e.to_string()))?;
        let mut ids = prefix.token_ids;
        ids.extend(tokenizer.encode(&tail).map_err(|e| ApiError::bad(e.to_string()))?);
        st.engine.check_prompt_len(ids.len())?;
        Ok(ids)
    })
    .await
}

async fn chat_completions(
    State(st): State<Arc<ServerState>>,
    parsed: Result<Json<ChatCompletionRequest<Value>>, JsonRejection>,
) -> Result<Response, ApiError> {
    let Json(mut body) = parsed?;
    if st.template.is_none() {
        return Err(ApiError::bad("this model has no chat template; use /v1/completions"));
    }
    if body.messages.is_empty() {
        return Err(ApiError::bad("messages is empty"));
    }
    let use_tools =
        !body.tools.is_empty() && body.tool_choice.as_ref().and_then(Value::as_str) != Some("none");
    let tools = if use_tools {
        let tools = body.tools.iter().map(serde_json::to_value).collect::<Result<_, _>>();
        Some(tools.map_err(|e| ApiError::bad(format!("tools: {e}")))?)
    } else {
        None
    };
    let messages = std::mem::take(&mut body.messages);
    let extra = body.chat_template_kwargs.take().unwrap_or_default();
    let prompt = chat_prompt(&st, messages, tools, extra, body.token_prefix.take()).await?;
    let top = if body.logprobs { body.top_logprobs.unwrap_or(0) } else { 0 };
    let (options, n) = sampling_options(&body.sampling, &st.engine, prompt.len(), top)?;
    let rx = st.engine.submit(Request { prompt: prompt.clone(), options, n })?;
    let id = request_id("chatcmpl");
    if body.stream {
        let stream = ChatStream {
            st: st.clone(),
            n,
            id,
            prompt_len: prompt.len(),
            logprobs: body.logprobs,
            use_tools,
            tools: std::mem::take(&mut body.tools),
            include_usage: body.stream_options.is_some_and(|o| o.include_usage),
        };
        return Ok(stream.run(rx).into_response());
    }
    let choices = collect(rx, n).await?;
    let completion_tokens: usize = choices.iter().map(|c| c.ids.len()).sum();
    let version = choices.iter().filter_map(|c| c.first_version).min().unwrap_or(0);
    let choices =
        choices.iter().enumerate().map(|(i, c)| chat_choice(&st, i, c, &body, use_tools)).collect();
    let reply = ChatCompletion {
        id,
        object: "chat.completion".into(),
        created: now_secs(),
        model: st.model_name.clone(),
        choices,
        usage: Some(CompletionUsage::new(prompt.len(), completion_tokens)),
        prompt_token_ids: body.return_token_ids.then_some(prompt),
        policy_version: Some(version),
    };
    Ok(Json(reply).into_response())
}

/// The reply's choice for the finished continuation `c`.
fn chat_choice(
    st: &ServerState,
    index: usize,
    c: &Choice,
    body: &ChatCompletionRequest<Value>,
    use_tools: bool,
) -> ChatChoice {
    let mut finish = finish_reason(c.finish.as_ref());
    let mut message = AssistantMessage {
        role: Role::Assistant,
        content: Some(c.text.clone()),
        reasoning_content: None,
        tool_calls: Vec::new(),
    };
    if use_tools && let Some(parsed) = toolcall::parse(&c.text, st.tool_format, &body.tools) {
        message.content = (!parsed.content.is_empty()).then_some(parsed.content);
        message.tool_calls = parsed.calls;
        if finish == FinishReason::Stop {
            finish = FinishReason::ToolCalls;
        }
    }
    ChatChoice {
        index,
        message,
        finish_reason: Some(finish),
        logprobs: body.logprobs.then(|| chat_logprobs(&st.engine, &c.ids, &c.logprobs, &c.tops)),
        token_ids: body.return_token_ids.then(|| c.ids.clone()),
        token_logprobs: body.return_token_ids.then(|| c.logprobs.clone()),
    }
}

/// The settings of one streamed chat completion.
struct ChatStream {
    st: Arc<ServerState>,
    n: usize,
    id: String,
    prompt_len: usize,
    logprobs: bool,
    use_tools: bool,
    /// The request's tools (they type GLM-4.5's argument values).
    tools: Vec<ToolSpec>,
    include_usage: bool,
}

/// What is known of one choice while it streams.
#[derive(Default, Clone)]
struct Streaming {
    /// Everything generated so far.
    text: String,
    /// With tools: bytes of `text` sent as content so far (the rest may begin a tool call).
    sent: usize,
    /// With tools: text from `<tool_call>` on, held until the end and sent as tool calls.
    held: Option<String>,
}

const TOOL_CALL_TAG: &str = "<tool_call>";

/// Where the text that cannot yet be shown begins: the longest suffix of `text` that is the
/// start of a `<tool_call>` tag (ASCII, so the index is a character boundary).
fn tag_safe_end(text: &str) -> usize {
    (1..TOOL_CALL_TAG.len())
        .rev()
        .find(|&k| text.ends_with(&TOOL_CALL_TAG[..k]))
        .map_or(text.len(), |k| text.len() - k)
}

impl ChatStream {
    fn chunk(&self, created: u64, choices: Vec<ChunkChoice>) -> ChatChunk {
        ChatChunk {
            id: self.id.clone(),
            object: "chat.completion.chunk".into(),
            created,
            model: self.st.model_name.clone(),
            choices,
            usage: None,
        }
    }

    fn run(
        self,
        mut rx: UnboundedReceiver<Event>,
    ) -> Sse<impl Stream<Item = Result<SseEvent, Infallible>>> {
        let created = now_secs();
        let stream = async_stream(move |tx| async move {
            for index in 0..self.n {
                let delta = Delta {
                    role: Some(Role::Assistant),
                    content: Some(String::new()),
                    ..Delta::default()
                };
                let first = ChunkChoice { index, delta, finish_reason: None, logprobs: None };
                tx.send(&self.chunk(created, vec![first]));
            }
            let mut state = vec![Streaming::default(); self.n];
            let mut open = self.n;
            let mut completion_tokens = 0;
            while open > 0 {
                let Some(ev) = rx.recv().await else { break };
                match ev {
                    Event::Token { index, id, logprob, top, text, .. } => {
                        completion_tokens += 1;
                        let lp = self
                            .logprobs
                            .then(|| chat_logprobs(&self.st.engine, &[id], &[logprob], &[top]));
                        if let Some(c) = self.token(&mut state[index], index, text, lp) {
                            tx.send(&self.chunk(created, vec![c]));
                        }
                    }
                    Event::Finished { index, reason, text } => {
                        open -= 1;
                        if let Finish::Error(e) = &reason {
                            tx.send(&ApiError::internal(e.clone()).body());
                            continue;
                        }
                        let last = self.last(&mut state[index], index, &reason, text);
                        tx.send(&self.chunk(created, vec![last]));
                    }
                }
            }
            if self.include_usage {
                let mut c = self.chunk(created, Vec::new());
                c.usage = Some(CompletionUsage::new(self.prompt_len, completion_tokens));
                tx.send(&c);
            }
        });
        Sse::new(stream).keep_alive(KeepAlive::default())
    }

    /// The chunk for one new token's `text`, if it shows anything.
    fn token(
        &self,
        s: &mut Streaming,
        index: usize,
        text: String,
        logprobs: Option<ChatLogprobs>,
    ) -> Option<ChunkChoice> {
        s.text.push_str(&text);
        let mut visible = text;
        if self.use_tools {
            // Text that may be the start of a call is held back until it is known not to be.
            if let Some(h) = &mut s.held {
                h.push_str(&visible);
                visible.clear();
            } else if let Some(at) = s.text[s.sent..].find(TOOL_CALL_TAG) {
                let at = s.sent + at;
                visible = s.text[s.sent..at].to_owned();
                s.held = Some(s.text[at..].to_owned());
                s.sent = s.text.len();
            } else {
                let end = tag_safe_end(&s.text).max(s.sent);
                visible = s.text[s.sent..end].to_owned();
                s.sent = end;
            }
        }
        if visible.is_empty() && logprobs.is_none() {
            return None;
        }
        let delta = Delta { content: Some(visible), ..Delta::default() };
        Some(ChunkChoice { index, delta, finish_reason: None, logprobs })
    }

    /// The last chunk of a choice: held text as tool calls (or as text, when it is not a
    /// well-formed call), and the finish reason.
    fn last(&self, s: &mut Streaming, index: usize, reason: &Finish, text: String) -> ChunkChoice {
        s.text.push_str(&text);
        let mut finish = finish_reason(Some(reason));
        let mut delta = Delta::default();
        let rest = match s.held.take() {
            Some(held) => match toolcall::parse(&s.text, self.st.tool_format, &self.tools) {
                Some(parsed) => {
                    delta.tool_calls = parsed
                        .calls
                        .into_iter()
                        .enumerate()
                        .map(|(index, call)| ToolCallDelta { index, call })
                        .collect();
                    if finish == FinishReason::Stop {
                        finish = FinishReason::ToolCalls;
                    }
                    // Text after the last call, as the non-streamed reply keeps it.
                    let after = s.text.rfind("</tool_call>").map_or("", |at| &s.text[at + 12..]);
                    after.trim().to_owned()
                }
                // Not a well-formed call: the held text is plain content after all.
                None => held + &text,
            },
            // Whatever was held back as the possible start of a tag.
            None if self.use_tools => s.text[s.sent.min(s.text.len())..].to_owned(),
            None => text,
        };
        if !rest.is_empty() {
            delta.content = Some(rest);
        }
        ChunkChoice { index, delta, finish_reason: Some(finish), logprobs: None }
    }
}

/// A stream of SSE events fed by `f` through a channel, ending with `data: [DONE]`.
///
/// When the stream is dropped (the client went away), `f` is dropped with it, and so is the
/// engine's event receiver it holds: the engine cancels the request at its next step.
fn async_stream<F, Fut>(f: F) -> impl Stream<Item = Result<SseEvent, Infallible>>
where
    F: FnOnce(Sink) -> Fut + Send + 'static,
    Fut: Future<Output = ()> + Send + 'static,
{
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel::<String>();
    let gone = tx.clone();
    let produce = f(Sink(tx));
    tokio::spawn(async move {
        tokio::select! {
            () = produce => {}
            () = gone.closed() => {}
        }
    });
    let events = futures::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|v| (Ok(SseEvent::default().data(v)), rx))
    });
    futures::StreamExt::chain(
        events,
        futures::stream::once(async { Ok(SseEvent::default().data("[DONE]")) }),
    )
}

/// Where a stream's producer sends its events.
struct Sink(tokio::sync::mpsc::UnboundedSender<String>);

impl Sink {
    fn send<T: Serialize>(&self, event: &T) {
        match serde_json::to_string(event) {
            Ok(text) => {
                let _ = self.0.send(text);
            }
            Err(e) => tracing::error!("an event could not be written: {e}"),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// /v1/completions

async fn completions(
    State(st): State<Arc<ServerState>>,
    parsed: Result<Json<CompletionRequest>, JsonRejection>,
) -> Result<Response, ApiError> {
    let Json(mut body) = parsed?;
    let prompt = match std::mem::replace(&mut body.prompt, PromptInput::Ids(Vec::new())) {
        PromptInput::Text(t) => {
            let engine = st.engine.clone();
            off_runtime(move || tokenize(&engine, &t)).await?
        }
        PromptInput::Ids(ids) => ids,
    };
    let top = body.logprobs.unwrap_or(0);
    let (options, n) = sampling_options(&body.sampling, &st.engine, prompt.len(), top)?;
    let rx = st.engine.submit(Request { prompt: prompt.clone(), options, n })?;
    let reply = TextCompletion {
        id: request_id("cmpl"),
        object: "text_completion".into(),
        created: now_secs(),
        model: st.model_name.clone(),
        choices: Vec::new(),
        usage: None,
    };
    if body.stream {
        let stream =
            async_stream(move |tx| stream_text(st, rx, n, body.logprobs.is_some(), reply, tx));
        return Ok(Sse::new(stream).keep_alive(KeepAlive::default()).into_response());
    }
    let choices = collect(rx, n).await?;
    let completion_tokens: usize = choices.iter().map(|c| c.ids.len()).sum();
    let choices = choices
        .iter()
        .enumerate()
        .map(|(index, c)| TextChoice {
            index,
            text: c.text.clone(),
            finish_reason: Some(finish_reason(c.finish.as_ref())),
            logprobs: body.logprobs.is_some().then(|| text_logprobs(&st.engine, c)),
            token_ids: body.return_token_ids.then(|| c.ids.clone()),
        })
        .collect();
    let usage = Some(CompletionUsage::new(prompt.len(), completion_tokens));
    Ok(Json(TextCompletion { choices, usage, ..reply }).into_response())
}

/// OpenAI's legacy `logprobs` of a finished continuation.
fn text_logprobs(engine: &Engine, c: &Choice) -> TextLogprobs {
    let tokens: Vec<String> = c.ids.iter().map(|&t| token_text(engine, t)).collect();
    let text_offset = tokens
        .iter()
        .scan(0, |offset, t| {
            let at = *offset;
            *offset += t.len();
            Some(at)
        })
        .collect();
    let top_logprobs = c
        .tops
        .iter()
        .map(|top| TopMap(top.iter().map(|&(t, l)| (token_text(engine, t), l)).collect()))
        .collect();
    TextLogprobs {
        tokens,
        token_logprobs: c.logprobs.clone(),
        top_logprobs: Some(top_logprobs),
        text_offset: Some(text_offset),
    }
}

/// The events of a streamed text completion: one per token, one per finished choice.
async fn stream_text(
    st: Arc<ServerState>,
    mut rx: UnboundedReceiver<Event>,
    n: usize,
    want_logprobs: bool,
    head: TextCompletion,
    tx: Sink,
) {
    let mut open = n;
    while open > 0 {
        let Some(ev) = rx.recv().await else { break };
        let choice = match ev {
            Event::Token { index, id, logprob, text, .. } => TextChoice {
                index,
                text,
                finish_reason: None,
                logprobs: want_logprobs.then(|| TextLogprobs {
                    tokens: vec![token_text(&st.engine, id)],
                    token_logprobs: vec![logprob],
                    ..TextLogprobs::default()
                }),
                token_ids: None,
            },
            Event::Finished { index, reason, text } => {
                open -= 1;
                TextChoice {
                    index,
                    text,
                    finish_reason: Some(finish_reason(Some(&reason))),
                    logprobs: None,
                    token_ids: None,
                }
            }
        };
        tx.send(&TextCompletion { choices: vec![choice], ..head.clone() });
    }
}

// ---------------------------------------------------------------------------------------------
// /v1/generate: token ids in, token ids and logprobs out.

async fn generate(
    State(st): State<Arc<ServerState>>,
    parsed: Result<Json<GenerateRequest>, JsonRejection>,
) -> Result<Json<GenerateReply>, ApiError> {
    let Json(body) = parsed?;
    let (options, n) =
        sampling_options(&body.sampling, &st.engine, body.prompt_token_ids.len(), 0)?;
    let rx = st.engine.submit(Request { prompt: body.prompt_token_ids, options, n })?;
    let choices = collect(rx, n).await?;
    let policy_version = choices.iter().filter_map(|c| c.first_version).min().unwrap_or(0);
    let choices = choices
        .into_iter()
        .map(|c| GenerateChoice {
            finish_reason: finish_reason(c.finish.as_ref()),
            token_ids: c.ids,
            logprobs: c.logprobs,
            text: c.text,
            policy_version: c.first_version,
            last_policy_version: c.last_version,
        })
        .collect();
    Ok(Json(GenerateReply { choices, policy_version }))
}

// ---------------------------------------------------------------------------------------------
// Admin.

async fn models(State(st): State<Arc<ServerState>>) -> Json<ModelList> {
    Json(ModelList {
        object: "list".into(),
        data: vec![ModelCard {
            id: st.model_name.clone(),
            object: "model".into(),
            owned_by: "temper".into(),
            max_model_len: Some(st.engine.config().max_position_embeddings),
        }],
    })
}

async fn update_weights(
    State(st): State<Arc<ServerState>>,
    parsed: Result<Json<UpdateWeightsRequest>, JsonRejection>,
) -> Result<Json<UpdateWeightsReply>, ApiError> {
    let Json(body) = parsed?;
    let _one_at_a_time = st.updating.lock().await;
    let cfg = st.engine.config().clone();
    let (dtype, device) = (st.dtype, st.device.clone());
    let path = body.path.clone();
    let started = std::time::Instant::now();
    let model =
        tokio::task::spawn_blocking(move || -> Result<Transformer, temper_model::ModelError> {
            let tensors = weights::load_safetensors(&weights::safetensors_files(&path)?, &device)?;
            Transformer::from_tensors(cfg, tensors, dtype, &device)
        })
        .await
        .map_err(|e| ApiError::internal(e.to_string()))?
        .map_err(|e| ApiError::bad(format!("cannot load weights: {e}")))?;
    let version =
        body.version.unwrap_or_else(|| st.engine.stats().version.load(Ordering::Relaxed) + 1);
    let version = st.engine.update_weights(model, version).await?;
    let load_s = started.elapsed().as_secs_f64();
    tracing::info!(
        "weights from {} in use as version {version} ({load_s:.2} s)",
        body.path.display()
    );
    Ok(Json(UpdateWeightsReply { version, load_s }))
}

async fn pause(State(st): State<Arc<ServerState>>) -> Result<Json<PauseReply>, ApiError> {
    st.engine.set_paused(true)?;
    Ok(Json(PauseReply { paused: true }))
}

async fn resume(State(st): State<Arc<ServerState>>) -> Result<Json<PauseReply>, ApiError> {
    st.engine.set_paused(false)?;
    Ok(Json(PauseReply { paused: false }))
}

async fn health(State(st): State<Arc<ServerState>>) -> Json<Health> {
    let s = st.engine.stats();
    Json(Health {
        status: "ok".into(),
        model: st.model_name.clone(),
        version: s.version.load(Ordering::Relaxed),
        paused: s.paused.load(Ordering::Relaxed),
    })
}

async fn metrics(State(st): State<Arc<ServerState>>) -> impl IntoResponse {
    use temper_protocol::exposition::{CONTENT_TYPE, Identity, Scrape};
    let s = st.engine.stats();
    let rate = st.tokens_per_s.lock().map(|r| *r).unwrap_or(0.0);
    let load = |a: &std::sync::atomic::AtomicU64| a.load(Ordering::Relaxed) as f64;
    let mut m = Scrape::new("temper_inference", &Identity::of_process("inference"));
    m.counter("prompt_tokens", "Prompt tokens prefilled.", load(&s.prompt_tokens));
    m.counter(
        "prefix_cache_hit_tokens",
        "Prompt tokens whose keys and values came from kept prefixes, not a prefill.",
        load(&s.prefix_hit_tokens),
    );
    m.counter("generated_tokens", "Tokens generated.", load(&s.generated_tokens));
    m.counter("requests", "Requests finished.", load(&s.requests));
    m.counter("steps", "Engine steps run.", load(&s.steps));
    m.counter(
        "sampling_readback_bytes",
        "Bytes copied from the model's device to the host to draw tokens.",
        load(&s.readback_bytes),
    );
    m.gauge(
        "generation_tokens_per_second",
        "Tokens generated per second over the last 10 s.",
        rate,
    );
    let size = |a: &std::sync::atomic::AtomicUsize| a.load(Ordering::Relaxed) as f64;
    m.gauge("queue_depth", "Requests waiting to start.", size(&s.waiting));
    m.gauge("running_sequences", "Sequences decoding.", size(&s.running));
    m.gauge("kv_cache_tokens", "Positions held in key/value caches.", size(&s.kv_tokens));
    m.gauge(
        "prefix_cache_tokens",
        "Prompt positions kept for later prompts that begin with them.",
        size(&s.prefix_cache_tokens),
    );
    m.gauge("weight_version", "Weight version being served.", load(&s.version));
    m.gauge(
        "paused",
        "1 while scheduling is paused.",
        f64::from(u8::from(s.paused.load(Ordering::Relaxed))),
    );
    ([(header::CONTENT_TYPE, CONTENT_TYPE)], m.encode())
}

#[cfg(test)]
mod tests {
    use serde_json::json;
    use temper_model::{Architecture, ModelConfig, Tokenizer};
    use tokio::sync::mpsc::unbounded_channel;

    use super::*;

    const HERMES: &str = "{% for m in messages %}{{ m.content }}{% endfor %}<tool_call>";
    const GLM: &str = "{% for m in messages %}{{ m.content }}{% endfor %}<arg_key>";

    fn state(template: &str) -> Arc<ServerState> {
        let model =
            Transformer::init_random(ModelConfig::tiny(Architecture::Llama, 260), 0, &Device::Cpu)
                .unwrap();
        let engine =
            Engine::start(model, Tokenizer::bytes(&["<|end|>"]), crate::EngineConfig::default(), 0);
        let template = ChatTemplate::new(template, "", "", "t").unwrap();
        ServerState::new(engine, Some(template), "m".into(), DType::F32, Device::Cpu)
    }

    /// The engine's events for a reply written in `pieces`.
    fn events(pieces: &[&str]) -> UnboundedReceiver<Event> {
        let (tx, rx) = unbounded_channel();
        for (i, p) in pieces.iter().enumerate() {
            let text = (*p).to_owned();
            let token = Event::Token {
                index: 0,
                id: i as u32,
                logprob: -0.5,
                top: vec![],
                text,
                version: 0,
            };
            tx.send(token).unwrap();
        }
        tx.send(Event::Finished { index: 0, reason: Finish::Stop, text: String::new() }).unwrap();
        rx
    }

    fn request() -> ChatCompletionRequest<Value> {
        serde_json::from_value(json!({
            "messages": [{"role": "user", "content": "Weather in Paris?"}],
            "tools": [{"type": "function", "function": {"name": "get_weather", "parameters":
                {"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}}}}}]
        }))
        .unwrap()
    }

    /// Streams `pieces` and returns the content shown, the tool calls and the finish reason.
    async fn streamed(st: &Arc<ServerState>, pieces: &[&str]) -> (String, Vec<Value>, Value) {
        let stream = ChatStream {
            st: st.clone(),
            n: 1,
            id: "s".into(),
            prompt_len: 3,
            logprobs: false,
            use_tools: true,
            tools: request().tools,
            include_usage: false,
        };
        let response = stream.run(events(pieces)).into_response();
        let bytes = axum::body::to_bytes(response.into_body(), 1 << 20).await.unwrap();
        let (mut content, mut calls, mut finish) = (String::new(), Vec::new(), Value::Null);
        for line in String::from_utf8(bytes.to_vec()).unwrap().lines() {
            let Some(data) = line.strip_prefix("data: ") else { continue };
            if data == "[DONE]" {
                break;
            }
            let chunk: Value = serde_json::from_str(data).unwrap();
            let choice = &chunk["choices"][0];
            content.push_str(choice["delta"]["content"].as_str().unwrap_or(""));
            calls.extend(choice["delta"]["tool_calls"].as_array().cloned().unwrap_or_default());
            if !choice["finish_reason"].is_null() {
                finish = choice["finish_reason"].clone();
            }
        }
        (content, calls, finish)
    }

    /// The server's tool-call wiring, plain and streamed, in both formats: the same calls come
    /// back either way; a tag split across tokens never leaks into the streamed content.
    #[tokio::test]
    async fn tool_calls_come_back_plain_and_streamed_in_the_template_format() {
        let hermes: &[&str] = &[
            "Let me check.\n",
            "<tool",
            "_call>\n{\"name\": \"get_weather\", ",
            "\"arguments\": {\"city\": \"Paris\", \"days\": 3}}\n</tool_call>",
        ];
        let glm: &[&str] = &[
            "Let me check.",
            "<tool_",
            "call>get_weather\n<arg_key>city</arg_key>",
            "\n<arg_value>Paris</arg_value>\n<arg_key>days</arg_key>\n<arg_value>3</arg_value>\n</tool_call>",
        ];
        for (template, pieces) in [(HERMES, hermes), (GLM, glm)] {
            let st = state(template);
            let body = request();
            let choices = collect(events(pieces), 1).await.unwrap();
            let reply =
                serde_json::to_value(chat_choice(&st, 0, &choices[0], &body, true)).unwrap();
            assert_eq!(reply["finish_reason"], "tool_calls", "{template}: {reply}");
            assert_eq!(reply["message"]["content"], "Let me check.");
            let call = &reply["message"]["tool_calls"][0]["function"];
            assert_eq!(call["name"], "get_weather");
            let args: Value = serde_json::from_str(call["arguments"].as_str().unwrap()).unwrap();
            assert_eq!(args, json!({"city": "Paris", "days": 3}), "{template}");

            let (content, calls, finish) = streamed(&st, pieces).await;
            assert_eq!(content.trim(), "Let me check.", "{template}");
            assert_eq!(finish, "tool_calls");
            assert_eq!(calls.len(), 1);
            assert_eq!(calls[0]["function"]["name"], "get_weather");
            let args: Value =
                serde_json::from_str(calls[0]["function"]["arguments"].as_str().unwrap()).unwrap();
            assert_eq!(args, json!({"city": "Paris", "days": 3}), "{template}");
        }
        // Text that only looks like the start of a tag, and a malformed call, stay content.
        let st = state(HERMES);
        let (content, calls, finish) = streamed(&st, &["a <tool", "box> b"]).await;
        assert_eq!((content.as_str(), calls.len(), finish), ("a <toolbox> b", 0, json!("stop")));
        let (content, calls, _) = streamed(&st, &["x", "<tool_call>{oops"]).await;
        assert_eq!((content.as_str(), calls.len()), ("x<tool_call>{oops", 0));
    }
}
