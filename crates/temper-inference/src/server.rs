//! The HTTP server: OpenAI-compatible `/v1/chat/completions` and `/v1/completions` (with SSE
//! streaming and logprobs), the token-in `/v1/generate`, and the admin routes `/update_weights`,
//! `/pause`, `/resume`, `/health`, `/metrics`.

use std::convert::Infallible;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::Router;
use axum::extract::{DefaultBodyLimit, Json, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use candle_core::{DType, Device};
use futures::Stream;
use serde::Deserialize;
use serde_json::{Map, Value, json};
use temper_model::{ChatTemplate, Transformer, weights};
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
    pub updating: tokio::sync::Mutex<()>,
    /// Generated tokens per second over the last ten seconds (updated by a background task).
    pub tokens_per_s: std::sync::Mutex<f64>,
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
        .layer(DefaultBodyLimit::max(MAX_BODY))
        .with_state(state)
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

/// An error answered as OpenAI does: `{"error": {"message", "type"}}`.
#[derive(Debug)]
pub struct ApiError {
    status: StatusCode,
    message: String,
}

impl ApiError {
    fn bad(message: impl Into<String>) -> Self {
        Self { status: StatusCode::BAD_REQUEST, message: message.into() }
    }
}

impl From<SubmitError> for ApiError {
    fn from(e: SubmitError) -> Self {
        let status = match e {
            SubmitError::Invalid(_) => StatusCode::BAD_REQUEST,
            SubmitError::Overloaded(_) => StatusCode::TOO_MANY_REQUESTS,
            SubmitError::Stopped => StatusCode::SERVICE_UNAVAILABLE,
        };
        Self { status, message: e.to_string() }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let kind = match self.status {
            StatusCode::BAD_REQUEST => "invalid_request_error",
            StatusCode::TOO_MANY_REQUESTS => "rate_limit_error",
            _ => "server_error",
        };
        let mut resp = (
            self.status,
            Json(json!({"error": {"message": self.message, "type": kind, "code": null}})),
        )
            .into_response();
        if self.status == StatusCode::TOO_MANY_REQUESTS {
            resp.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
        }
        resp
    }
}

/// `"x"` or `["x", "y"]`.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum OneOrMany {
    One(String),
    Many(Vec<String>),
}

/// Sampling fields shared by every generation route (OpenAI's names, plus vLLM's `top_k`,
/// `min_p`, `stop_token_ids`, `ignore_eos`).
#[derive(Debug, Deserialize, Default)]
struct SamplingFields {
    temperature: Option<f64>,
    top_p: Option<f64>,
    top_k: Option<i64>,
    min_p: Option<f64>,
    max_tokens: Option<u64>,
    max_completion_tokens: Option<u64>,
    n: Option<usize>,
    stop: Option<OneOrMany>,
    stop_token_ids: Option<Vec<u32>>,
    seed: Option<u64>,
    ignore_eos: Option<bool>,
    frequency_penalty: Option<f64>,
    presence_penalty: Option<f64>,
}

impl SamplingFields {
    fn options(
        &self,
        engine: &Engine,
        prompt_len: usize,
        top_logprobs: usize,
    ) -> Result<(SamplingOptions, usize), ApiError> {
        for (name, v) in [
            ("frequency_penalty", self.frequency_penalty),
            ("presence_penalty", self.presence_penalty),
        ] {
            if v.is_some_and(|v| v != 0.0) {
                return Err(ApiError::bad(format!("{name} is not supported (only 0)")));
            }
        }
        let room = engine.config().max_position_embeddings.saturating_sub(prompt_len);
        let max_tokens = match self.max_completion_tokens.or(self.max_tokens) {
            Some(0) => return Err(ApiError::bad("max_tokens must be at least 1")),
            Some(m) => usize::try_from(m).unwrap_or(usize::MAX).min(room.max(1)),
            None => room.max(1),
        };
        let top_k = match self.top_k {
            None | Some(-1) | Some(0) => 0,
            Some(k) if k > 0 => k as usize,
            Some(k) => {
                return Err(ApiError::bad(format!("top_k must be -1 (off) or positive, got {k}")));
            }
        };
        let opts = SamplingOptions {
            temperature: self.temperature.unwrap_or(1.0),
            top_p: self.top_p.unwrap_or(1.0),
            top_k,
            min_p: self.min_p.unwrap_or(0.0),
            max_tokens,
            stop_token_ids: self.stop_token_ids.clone().unwrap_or_default(),
            stop: match &self.stop {
                None => Vec::new(),
                Some(OneOrMany::One(s)) => vec![s.clone()],
                Some(OneOrMany::Many(v)) => v.clone(),
            },
            ignore_eos: self.ignore_eos.unwrap_or(false),
            seed: self.seed,
            top_logprobs,
        };
        Ok((opts, self.n.unwrap_or(1)))
    }
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
            return Err(ApiError {
                status: StatusCode::SERVICE_UNAVAILABLE,
                message: "the engine stopped".into(),
            });
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
            return Err(ApiError { status: StatusCode::INTERNAL_SERVER_ERROR, message: e.clone() });
        }
    }
    Ok(choices)
}

fn finish_name(f: Option<&Finish>) -> &'static str {
    match f {
        Some(Finish::Length) => "length",
        _ => "stop",
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

/// OpenAI chat `logprobs.content` entries.
fn chat_logprobs(
    engine: &Engine,
    ids: &[u32],
    lps: &[f32],
    tops: &[Vec<(u32, f32)>],
) -> Vec<Value> {
    let entry = |id: u32, lp: f32| {
        let t = token_text(engine, id);
        json!({"token": t, "logprob": lp, "bytes": t.as_bytes()})
    };
    ids.iter()
        .zip(lps)
        .zip(tops)
        .map(|((&id, &lp), top)| {
            let mut e = entry(id, lp);
            e["top_logprobs"] = Value::Array(top.iter().map(|&(i, l)| entry(i, l)).collect());
            e
        })
        .collect()
}

// ---------------------------------------------------------------------------------------------
// /v1/chat/completions

#[derive(Debug, Deserialize)]
struct ChatBody {
    messages: Vec<Value>,
    #[serde(default)]
    tools: Option<Vec<Value>>,
    #[serde(default)]
    tool_choice: Option<Value>,
    #[serde(default)]
    stream: bool,
    #[serde(default)]
    stream_options: Option<Value>,
    #[serde(default)]
    logprobs: bool,
    #[serde(default)]
    top_logprobs: Option<usize>,
    #[serde(default)]
    chat_template_kwargs: Option<Map<String, Value>>,
    #[serde(default)]
    return_token_ids: bool,
    #[serde(flatten)]
    sampling: SamplingFields,
}

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
    tokio::task::spawn_blocking(f).await.map_err(|e| ApiError {
        status: StatusCode::INTERNAL_SERVER_ERROR,
        message: format!("preparing the prompt failed: {e}"),
    })?
}

/// The tokens of `text`, refused (and freed, on the calling thread) when they leave no room in
/// the context.
fn tokenize(engine: &Engine, text: &str) -> Result<Vec<u32>, ApiError> {
    let ids = engine.tokenizer().encode(text).map_err(|e| ApiError::bad(e.to_string()))?;
    engine.check_prompt_len(ids.len())?;
    Ok(ids)
}

async fn chat_completions(
    State(st): State<Arc<ServerState>>,
    Json(mut body): Json<ChatBody>,
) -> Result<Response, ApiError> {
    if st.template.is_none() {
        return Err(ApiError::bad("this model has no chat template; use /v1/completions"));
    }
    if body.messages.is_empty() {
        return Err(ApiError::bad("messages is empty"));
    }
    let use_tools = body.tools.as_ref().is_some_and(|t| !t.is_empty())
        && body.tool_choice.as_ref().and_then(Value::as_str) != Some("none");
    let messages = std::mem::take(&mut body.messages);
    let tools = if use_tools { body.tools.take() } else { None };
    let extra = body.chat_template_kwargs.take().unwrap_or_default();
    let prompt = off_runtime({
        let st = st.clone();
        move || {
            let template = st.template.as_ref().ok_or_else(|| ApiError::bad("no chat template"))?;
            let messages = template_messages(&messages)?;
            let text = template
                .render(&messages, tools.as_deref(), true, &extra)
                .map_err(|e| ApiError::bad(e.to_string()))?;
            tokenize(&st.engine, &text)
        }
    })
    .await?;
    let top = if body.logprobs { body.top_logprobs.unwrap_or(0) } else { 0 };
    let (options, n) = body.sampling.options(&st.engine, prompt.len(), top)?;
    let rx = st.engine.submit(Request { prompt: prompt.clone(), options, n })?;
    let id = request_id("chatcmpl");
    if body.stream {
        let include_usage = body
            .stream_options
            .as_ref()
            .and_then(|o| o.get("include_usage"))
            .and_then(Value::as_bool)
            .unwrap_or(false);
        return Ok(stream_chat(
            st.clone(),
            rx,
            n,
            id,
            prompt.len(),
            body.logprobs,
            use_tools,
            include_usage,
        )
        .into_response());
    }
    let choices = collect(rx, n).await?;
    let completion_tokens: usize = choices.iter().map(|c| c.ids.len()).sum();
    let version = choices.iter().filter_map(|c| c.first_version).min().unwrap_or(0);
    let out: Vec<Value> = choices
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let mut finish = finish_name(c.finish.as_ref());
            let mut message = json!({"role": "assistant", "content": c.text});
            if use_tools && let Some(parsed) = toolcall::parse(&c.text) {
                message["content"] = if parsed.content.is_empty() {
                    Value::Null
                } else {
                    Value::String(parsed.content)
                };
                message["tool_calls"] = Value::Array(parsed.calls);
                if finish == "stop" {
                    finish = "tool_calls";
                }
            }
            let mut choice =
                json!({"index": i, "message": message, "finish_reason": finish, "logprobs": null});
            if body.logprobs {
                choice["logprobs"] =
                    json!({"content": chat_logprobs(&st.engine, &c.ids, &c.logprobs, &c.tops)});
            }
            if body.return_token_ids {
                choice["token_ids"] = json!(c.ids);
                choice["token_logprobs"] = json!(c.logprobs);
            }
            choice
        })
        .collect();
    let mut resp = json!({
        "id": id, "object": "chat.completion", "created": now_secs(), "model": st.model_name,
        "choices": out,
        "usage": {"prompt_tokens": prompt.len(), "completion_tokens": completion_tokens,
                  "total_tokens": prompt.len() + completion_tokens},
        "policy_version": version,
    });
    if body.return_token_ids {
        resp["prompt_token_ids"] = json!(prompt);
    }
    Ok(Json(resp).into_response())
}

#[expect(clippy::too_many_arguments, reason = "one stream's settings, used once")]
fn stream_chat(
    st: Arc<ServerState>,
    mut rx: UnboundedReceiver<Event>,
    n: usize,
    id: String,
    prompt_len: usize,
    logprobs: bool,
    use_tools: bool,
    include_usage: bool,
) -> Sse<impl Stream<Item = Result<SseEvent, Infallible>>> {
    let created = now_secs();
    let stream = async_stream(move |tx| async move {
        let chunk = |choices: Value| json!({"id": id, "object": "chat.completion.chunk", "created": created, "model": st.model_name, "choices": choices});
        for i in 0..n {
            tx.send(chunk(json!([{"index": i, "delta": {"role": "assistant", "content": ""}, "finish_reason": null}])));
        }
        // With tools, text from `<tool_call>` on is held until the end, then sent as tool calls.
        let mut held: Vec<Option<String>> = vec![None; n];
        let mut all_text: Vec<String> = vec![String::new(); n];
        let mut open = n;
        let mut completion_tokens = 0;
        while open > 0 {
            let Some(ev) = rx.recv().await else { break };
            match ev {
                Event::Token { index, id: tok, logprob, top, text, .. } => {
                    completion_tokens += 1;
                    all_text[index].push_str(&text);
                    let mut visible = text;
                    if use_tools {
                        if let Some(h) = &mut held[index] {
                            h.push_str(&visible);
                            visible.clear();
                        } else if let Some(at) = all_text[index].find("<tool_call>") {
                            let start_in_piece =
                                at.saturating_sub(all_text[index].len() - visible.len());
                            held[index] = Some(visible[start_in_piece..].to_owned());
                            visible.truncate(start_in_piece);
                        }
                    }
                    let mut c = json!({"index": index, "delta": {"content": visible}, "finish_reason": null});
                    if logprobs {
                        c["logprobs"] = json!({"content": chat_logprobs(&st.engine, &[tok], &[logprob], &[top])});
                    }
                    if !visible.is_empty() || logprobs {
                        tx.send(chunk(json!([c])));
                    }
                }
                Event::Finished { index, reason, text } => {
                    open -= 1;
                    all_text[index].push_str(&text);
                    let mut finish = match &reason {
                        Finish::Error(e) => {
                            tx.send(json!({"error": {"message": e, "type": "server_error"}}));
                            continue;
                        }
                        r => finish_name(Some(r)),
                    };
                    let mut delta = json!({});
                    let rest = match held[index].take() {
                        Some(mut h) => {
                            h.push_str(&text);
                            match toolcall::parse(&all_text[index]) {
                                Some(parsed) => {
                                    delta["tool_calls"] = Value::Array(
                                        parsed
                                            .calls
                                            .into_iter()
                                            .enumerate()
                                            .map(|(k, mut c)| {
                                                c["index"] = json!(k);
                                                c
                                            })
                                            .collect(),
                                    );
                                    if finish == "stop" {
                                        finish = "tool_calls";
                                    }
                                    String::new()
                                }
                                None => h,
                            }
                        }
                        None => text,
                    };
                    if !rest.is_empty() {
                        delta["content"] = Value::String(rest);
                    }
                    tx.send(chunk(
                        json!([{"index": index, "delta": delta, "finish_reason": finish}]),
                    ));
                }
            }
        }
        if include_usage {
            let mut c = chunk(json!([]));
            c["usage"] = json!({"prompt_tokens": prompt_len, "completion_tokens": completion_tokens,
                                "total_tokens": prompt_len + completion_tokens});
            tx.send(c);
        }
    });
    Sse::new(stream).keep_alive(KeepAlive::default())
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
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel::<Value>();
    let gone = tx.clone();
    let produce = f(Sink(tx));
    tokio::spawn(async move {
        tokio::select! {
            () = produce => {}
            () = gone.closed() => {}
        }
    });
    let events = futures::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|v| (Ok(SseEvent::default().data(v.to_string())), rx))
    });
    futures::StreamExt::chain(
        events,
        futures::stream::once(async { Ok(SseEvent::default().data("[DONE]")) }),
    )
}

struct Sink(tokio::sync::mpsc::UnboundedSender<Value>);

impl Sink {
    fn send(&self, v: Value) {
        let _ = self.0.send(v);
    }
}

// ---------------------------------------------------------------------------------------------
// /v1/completions

#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum Prompt {
    Text(String),
    Ids(Vec<u32>),
}

#[derive(Debug, Deserialize)]
struct CompletionBody {
    prompt: Prompt,
    #[serde(default)]
    stream: bool,
    #[serde(default)]
    logprobs: Option<usize>,
    #[serde(default)]
    return_token_ids: bool,
    #[serde(flatten)]
    sampling: SamplingFields,
}

async fn completions(
    State(st): State<Arc<ServerState>>,
    Json(mut body): Json<CompletionBody>,
) -> Result<Response, ApiError> {
    let prompt = match std::mem::replace(&mut body.prompt, Prompt::Ids(Vec::new())) {
        Prompt::Text(t) => {
            let engine = st.engine.clone();
            off_runtime(move || tokenize(&engine, &t)).await?
        }
        Prompt::Ids(ids) => ids,
    };
    let (options, n) =
        body.sampling.options(&st.engine, prompt.len(), body.logprobs.unwrap_or(0))?;
    let rx = st.engine.submit(Request { prompt: prompt.clone(), options, n })?;
    let id = request_id("cmpl");
    let created = now_secs();
    if body.stream {
        let st2 = st.clone();
        let want_lp = body.logprobs.is_some();
        let stream = async_stream(move |tx| async move {
            let mut rx = rx;
            let mut open = n;
            while open > 0 {
                let Some(ev) = rx.recv().await else { break };
                let c = match ev {
                    Event::Token { index, id: tok, logprob, text, .. } => {
                        let mut c = json!({"index": index, "text": text, "finish_reason": null, "logprobs": null});
                        if want_lp {
                            c["logprobs"] = json!({"tokens": [token_text(&st2.engine, tok)], "token_logprobs": [logprob]});
                        }
                        c
                    }
                    Event::Finished { index, reason, text } => {
                        open -= 1;
                        json!({"index": index, "text": text, "finish_reason": finish_name(Some(&reason))})
                    }
                };
                tx.send(json!({"id": id, "object": "text_completion", "created": created, "model": st2.model_name, "choices": [c]}));
            }
        });
        return Ok(Sse::new(stream).keep_alive(KeepAlive::default()).into_response());
    }
    let choices = collect(rx, n).await?;
    let completion_tokens: usize = choices.iter().map(|c| c.ids.len()).sum();
    let out: Vec<Value> = choices
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let mut choice = json!({"index": i, "text": c.text, "finish_reason": finish_name(c.finish.as_ref()), "logprobs": null});
            if body.logprobs.is_some() {
                let tokens: Vec<String> = c.ids.iter().map(|&t| token_text(&st.engine, t)).collect();
                let mut offset = 0;
                let offsets: Vec<usize> = tokens.iter().map(|t| { let o = offset; offset += t.len(); o }).collect();
                let tops: Vec<Value> = c
                    .tops
                    .iter()
                    .map(|top| Value::Object(top.iter().map(|&(t, l)| (token_text(&st.engine, t), json!(l))).collect()))
                    .collect();
                choice["logprobs"] = json!({"tokens": tokens, "token_logprobs": c.logprobs, "top_logprobs": tops, "text_offset": offsets});
            }
            if body.return_token_ids {
                choice["token_ids"] = json!(c.ids);
            }
            choice
        })
        .collect();
    Ok(Json(json!({
        "id": id, "object": "text_completion", "created": created, "model": st.model_name, "choices": out,
        "usage": {"prompt_tokens": prompt.len(), "completion_tokens": completion_tokens, "total_tokens": prompt.len() + completion_tokens},
    }))
    .into_response())
}

// ---------------------------------------------------------------------------------------------
// /v1/generate: token ids in, token ids and logprobs out.

#[derive(Debug, Deserialize)]
struct GenerateBody {
    prompt_token_ids: Vec<u32>,
    #[serde(flatten)]
    sampling: SamplingFields,
}

async fn generate(
    State(st): State<Arc<ServerState>>,
    Json(body): Json<GenerateBody>,
) -> Result<Response, ApiError> {
    let (options, n) = body.sampling.options(&st.engine, body.prompt_token_ids.len(), 0)?;
    let rx = st.engine.submit(Request { prompt: body.prompt_token_ids, options, n })?;
    let choices = collect(rx, n).await?;
    let version = choices.iter().filter_map(|c| c.first_version).min().unwrap_or(0);
    let out: Vec<Value> = choices
        .iter()
        .map(|c| {
            json!({"token_ids": c.ids, "logprobs": c.logprobs, "finish_reason": finish_name(c.finish.as_ref()),
                   "text": c.text, "policy_version": c.first_version, "last_policy_version": c.last_version})
        })
        .collect();
    Ok(Json(json!({"choices": out, "policy_version": version})).into_response())
}

// ---------------------------------------------------------------------------------------------
// Admin.

async fn models(State(st): State<Arc<ServerState>>) -> Json<Value> {
    Json(json!({"object": "list", "data": [{
        "id": st.model_name, "object": "model", "owned_by": "temper",
        "max_model_len": st.engine.config().max_position_embeddings,
    }]}))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct UpdateBody {
    /// A folder of safetensors (with or without `config.json`).
    path: PathBuf,
    /// The version to report from now on (default: the current one plus one).
    #[serde(default)]
    version: Option<u64>,
}

async fn update_weights(
    State(st): State<Arc<ServerState>>,
    Json(body): Json<UpdateBody>,
) -> Result<Json<Value>, ApiError> {
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
        .map_err(|e| ApiError {
            status: StatusCode::INTERNAL_SERVER_ERROR,
            message: e.to_string(),
        })?
        .map_err(|e| ApiError::bad(format!("cannot load weights: {e}")))?;
    let version =
        body.version.unwrap_or_else(|| st.engine.stats().version.load(Ordering::Relaxed) + 1);
    let version = st.engine.update_weights(model, version).await?;
    tracing::info!(
        "weights from {} in use as version {version} ({:.2} s)",
        body.path.display(),
        started.elapsed().as_secs_f64()
    );
    Ok(Json(json!({"version": version, "load_s": started.elapsed().as_secs_f64()})))
}

async fn pause(State(st): State<Arc<ServerState>>) -> Result<Json<Value>, ApiError> {
    st.engine.set_paused(true)?;
    Ok(Json(json!({"paused": true})))
}

async fn resume(State(st): State<Arc<ServerState>>) -> Result<Json<Value>, ApiError> {
    st.engine.set_paused(false)?;
    Ok(Json(json!({"paused": false})))
}

async fn health(State(st): State<Arc<ServerState>>) -> Json<Value> {
    let s = st.engine.stats();
    Json(
        json!({"status": "ok", "model": st.model_name, "version": s.version.load(Ordering::Relaxed),
                "paused": s.paused.load(Ordering::Relaxed)}),
    )
}

async fn metrics(State(st): State<Arc<ServerState>>) -> impl IntoResponse {
    let s = st.engine.stats();
    let rate = st.tokens_per_s.lock().map(|r| *r).unwrap_or(0.0);
    let mut out = String::new();
    let mut metric = |name: &str, kind: &str, help: &str, value: String| {
        out.push_str(&format!(
            "# HELP temper_inference_{name} {help}\n# TYPE temper_inference_{name} {kind}\n"
        ));
        out.push_str(&format!("temper_inference_{name} {value}\n"));
    };
    let load = |a: &std::sync::atomic::AtomicU64| a.load(Ordering::Relaxed).to_string();
    metric("prompt_tokens_total", "counter", "Prompt tokens prefilled.", load(&s.prompt_tokens));
    metric("generated_tokens_total", "counter", "Tokens generated.", load(&s.generated_tokens));
    metric("requests_total", "counter", "Requests finished.", load(&s.requests));
    metric("steps_total", "counter", "Engine steps run.", load(&s.steps));
    metric(
        "generation_tokens_per_second",
        "gauge",
        "Tokens generated per second over the last 10 s.",
        format!("{rate:.2}"),
    );
    metric(
        "queue_depth",
        "gauge",
        "Requests waiting to start.",
        s.waiting.load(Ordering::Relaxed).to_string(),
    );
    metric(
        "running_sequences",
        "gauge",
        "Sequences decoding.",
        s.running.load(Ordering::Relaxed).to_string(),
    );
    metric(
        "kv_cache_tokens",
        "gauge",
        "Positions held in key/value caches.",
        s.kv_tokens.load(Ordering::Relaxed).to_string(),
    );
    metric("weight_version", "gauge", "Weight version being served.", load(&s.version));
    metric(
        "paused",
        "gauge",
        "1 while scheduling is paused.",
        u8::from(s.paused.load(Ordering::Relaxed)).to_string(),
    );
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], out)
}
