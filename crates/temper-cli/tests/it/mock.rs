//! A scripted OpenAI-compatible chat server on loopback (axum), with counters.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde_json::{Value, json};

/// How the mock answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Behaviour {
    /// reverse-text: a perfect reversal for texts of even length; for odd length, the reversal
    /// without its last character.
    Reverse,
    /// reverse-text: the first request for each text gets a perfect answer, later ones garbage.
    FirstCorrect,
    /// calculator: a malformed tool call, then a correct one, then the boxed tool result.
    Calculator,
    /// code: a Python program that sums the integers on its input.
    CodeSum,
    /// `temper env init`'s scaffold: the sum of the integers in the question, in `<answer>`.
    AnswerSum,
    /// A judge for `llm_judge`'s default prompt: "yes" when the graded response has an even
    /// number of characters, "no" otherwise.
    Judge,
    /// Every request is refused with HTTP 400.
    Refuse,
}

#[derive(Debug)]
pub struct MockState {
    pub behaviour: Behaviour,
    pub delay: Duration,
    pub in_flight: AtomicUsize,
    pub max_in_flight: AtomicUsize,
    pub requests: AtomicUsize,
    /// The next this-many requests get HTTP 500.
    pub fail_500: AtomicUsize,
    /// Then this-many get HTTP 429 with `Retry-After: 0`.
    pub fail_429: AtomicUsize,
    /// Then this-many hang for 30 s (the client must time out and retry).
    pub hang: AtomicUsize,
    seen: Mutex<HashMap<String, usize>>,
    pub auth: Mutex<Vec<String>>,
    /// What `GET /v1/models` lists; none answers 404 (as a server without the route).
    pub models: Mutex<Vec<String>>,
    /// The `model` field of every chat request.
    pub model_names: Mutex<Vec<String>>,
}

pub struct Mock {
    pub url: String,
    pub state: Arc<MockState>,
    _runtime: tokio::runtime::Runtime,
}

impl Mock {
    pub fn start(behaviour: Behaviour, delay: Duration) -> Self {
        let state = Arc::new(MockState {
            behaviour,
            delay,
            in_flight: AtomicUsize::new(0),
            max_in_flight: AtomicUsize::new(0),
            requests: AtomicUsize::new(0),
            fail_500: AtomicUsize::new(0),
            fail_429: AtomicUsize::new(0),
            hang: AtomicUsize::new(0),
            seen: Mutex::new(HashMap::new()),
            auth: Mutex::new(Vec::new()),
            models: Mutex::new(Vec::new()),
            model_names: Mutex::new(Vec::new()),
        });
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("runtime");
        let app = Router::new()
            .route("/v1/chat/completions", post(chat))
            .route("/v1/models", get(models))
            .with_state(Arc::clone(&state));
        let listener =
            runtime.block_on(tokio::net::TcpListener::bind("127.0.0.1:0")).expect("bind");
        let addr: SocketAddr = listener.local_addr().expect("addr");
        runtime.spawn(async move { axum::serve(listener, app).await.expect("serve") });
        Self { url: format!("http://{addr}/v1"), state, _runtime: runtime }
    }
}

struct InFlight(Arc<MockState>);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::SeqCst);
    }
}

fn take(counter: &AtomicUsize) -> bool {
    counter.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1)).is_ok()
}

fn completion(message: &Value, finish: &str) -> Response {
    Json(json!({
        "id": "mock", "object": "chat.completion", "model": "mock",
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        "usage": {"prompt_tokens": 20, "completion_tokens": 8, "total_tokens": 28}
    }))
    .into_response()
}

async fn models(State(s): State<Arc<MockState>>) -> Response {
    let models = s.models.lock().expect("lock").clone();
    if models.is_empty() {
        return StatusCode::NOT_FOUND.into_response();
    }
    let data: Vec<Value> = models.iter().map(|id| json!({"id": id, "object": "model"})).collect();
    Json(json!({"object": "list", "data": data})).into_response()
}

async fn chat(
    State(s): State<Arc<MockState>>,
    headers: HeaderMap,
    Json(body): Json<Value>,
) -> Response {
    let now = s.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
    s.max_in_flight.fetch_max(now, Ordering::SeqCst);
    let _guard = InFlight(Arc::clone(&s));
    s.requests.fetch_add(1, Ordering::SeqCst);
    if let Some(name) = body.get("model").and_then(Value::as_str) {
        s.model_names.lock().expect("lock").push(name.to_owned());
    }
    if let Some(auth) = headers.get("authorization").and_then(|v| v.to_str().ok()) {
        s.auth.lock().expect("lock").push(auth.to_owned());
    }
    if take(&s.fail_500) {
        return (StatusCode::INTERNAL_SERVER_ERROR, "overloaded").into_response();
    }
    if take(&s.fail_429) {
        return (StatusCode::TOO_MANY_REQUESTS, [("retry-after", "0")], "slow down")
            .into_response();
    }
    if take(&s.hang) {
        tokio::time::sleep(Duration::from_secs(30)).await;
    }
    tokio::time::sleep(s.delay).await;
    // As vLLM: when it lists models, a request for another one is a 404.
    let listed = s.models.lock().expect("lock").clone();
    let asked = body["model"].as_str().unwrap_or("");
    if !listed.is_empty() && !listed.iter().any(|m| m == asked) {
        let message = format!("The model `{asked}` does not exist.");
        return (
            StatusCode::NOT_FOUND,
            Json(json!({"object": "error", "message": message, "type": "NotFoundError", "code": 404})),
        )
            .into_response();
    }
    let messages = body["messages"].as_array().cloned().unwrap_or_default();
    let last_user = messages
        .iter()
        .rev()
        .find(|m| m["role"] == "user")
        .and_then(|m| m["content"].as_str())
        .unwrap_or("");
    match s.behaviour {
        Behaviour::Reverse => {
            let mut reversed: String = last_user.chars().rev().collect();
            if last_user.chars().count() % 2 == 1 {
                reversed.pop();
            }
            completion(
                &json!({"role": "assistant", "content": format!("<reversed_text>{reversed}</reversed_text>")}),
                "stop",
            )
        }
        Behaviour::FirstCorrect => {
            let k = {
                let mut seen = s.seen.lock().expect("lock");
                let k = seen.entry(last_user.to_owned()).or_insert(0);
                *k += 1;
                *k
            };
            let text = if k == 1 { last_user.chars().rev().collect() } else { "0".repeat(20) };
            completion(
                &json!({"role": "assistant", "content": format!("<reversed_text>{text}</reversed_text>")}),
                "stop",
            )
        }
        Behaviour::AnswerSum => {
            let sum: i64 = last_user
                .split(|c: char| !c.is_ascii_digit())
                .filter_map(|n| n.parse::<i64>().ok())
                .sum();
            completion(
                &json!({"role": "assistant", "content": format!("The sum is {sum}.\n<answer>{sum}</answer>")}),
                "stop",
            )
        }
        Behaviour::Judge => {
            let response = last_user
                .split_once("Response:\n")
                .and_then(|(_, rest)| rest.rsplit_once("\n\nDoes the response"))
                .map(|(r, _)| r);
            let Some(response) = response else {
                return (StatusCode::BAD_REQUEST, "not a judge prompt").into_response();
            };
            let verdict = if response.chars().count() % 2 == 0 { "yes" } else { "no" };
            completion(&json!({"role": "assistant", "content": verdict}), "stop")
        }
        Behaviour::Refuse => (StatusCode::BAD_REQUEST, "the judge is refusing").into_response(),
        Behaviour::CodeSum => completion(
            &json!({"role": "assistant", "content": "```python\nprint(sum(map(int, input().split())))\n```"}),
            "stop",
        ),
        Behaviour::Calculator => {
            let tool_results: Vec<&Value> =
                messages.iter().filter(|m| m["role"] == "tool").collect();
            let call = |id: &str, args: String| {
                json!({"role": "assistant", "content": null, "tool_calls": [
                    {"id": id, "type": "function", "function": {"name": "calculator", "arguments": args}}]})
            };
            match tool_results.len() {
                0 => completion(&call("c1", "{\"expression\": ".into()), "tool_calls"),
                1 => {
                    let question = last_user.trim_start_matches("What is ").trim_end_matches('?');
                    let expression = question.replace('×', "*").replace('−', "-").replace('÷', "/");
                    completion(
                        &call("c2", json!({"expression": expression}).to_string()),
                        "tool_calls",
                    )
                }
                _ => {
                    let result =
                        tool_results.last().and_then(|m| m["content"].as_str()).unwrap_or("");
                    completion(
                        &json!({"role": "assistant", "content": format!("So it is \\boxed{{{result}}}.")}),
                        "stop",
                    )
                }
            }
        }
    }
}
