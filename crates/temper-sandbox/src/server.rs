//! The sandbox over HTTP (`temper sandbox serve`).
//!
//! | route | what it does |
//! |---|---|
//! | `POST /v1/run` | `{language, code, files?, stdin?, limits?}` → one result |
//! | `POST /v1/run_tests` | `{language, code, tests, limits?, stop_on_failure?}` (each test `{stdin, expected_stdout, compare?}`, `compare` `lines` or `values`) → a result per test, one compile |
//! | `POST /v1/sandboxes` | opens a session → `{"id"}` |
//! | `POST /v1/sandboxes/{id}/exec` | `{command, stdin?, timeout_ms?, memory_mb?}` → a result (`bash -c command`) |
//! | `PUT /v1/sandboxes/{id}/files/{path}` | the body becomes the file under `/work` |
//! | `GET /v1/sandboxes/{id}/files/{path}` | the file's bytes |
//! | `DELETE /v1/sandboxes/{id}` | ends the session |
//! | `GET /health`, `GET /metrics` | liveness; Prometheus counters |
//!
//! Errors share one shape, `{"error": {"code", "message"}}`. When every run slot is taken and the
//! queue is full, or the session limit is reached, the answer is 429 with `Retry-After`. Idle
//! sessions end after the idle timeout.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::extract::rejection::JsonRejection;
use axum::extract::{DefaultBodyLimit, Path, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::Deserialize;
use serde_json::json;
use temper_protocol::error::{code_for_status, json_errors};
use temper_protocol::{
    ErrorBody, Limits, RunResult, RunStatus, SandboxRunRequest, TestResult, TestsReply,
    TestsRequest,
};

use crate::runner::Sandbox;
use crate::slot::Slot;

/// Server limits.
#[derive(Debug, Clone)]
pub struct ServerOptions {
    /// Runs (and session execs) at once.
    pub max_concurrent: usize,
    /// Requests waiting for a run slot before 429.
    pub max_queue: usize,
    /// Open sessions at most.
    pub max_sessions: usize,
    /// An idle session ends after this.
    pub idle_timeout: Duration,
    /// Largest request body.
    pub max_body_bytes: usize,
    /// Largest file read back from a session.
    pub max_file_bytes: u64,
}

impl Default for ServerOptions {
    fn default() -> Self {
        Self {
            max_concurrent: 16,
            max_queue: 256,
            max_sessions: 1024,
            idle_timeout: Duration::from_secs(300),
            max_body_bytes: 16 << 20,
            max_file_bytes: 16 << 20,
        }
    }
}

struct Session {
    slot: Slot,
    last_used: Mutex<Instant>,
}

/// Shared state of the server.
pub struct AppState {
    sandbox: Sandbox,
    options: ServerOptions,
    permits: tokio::sync::Semaphore,
    queued: AtomicU64,
    sessions: Mutex<HashMap<String, Arc<Session>>>,
    runs_by_status: Mutex<BTreeMap<String, u64>>,
    rejected: AtomicU64,
}

impl std::fmt::Debug for AppState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AppState").finish_non_exhaustive()
    }
}

/// The error shape of every route.
struct ApiError {
    status: StatusCode,
    code: &'static str,
    message: String,
    retry_after: Option<u64>,
}

impl ApiError {
    fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        Self { status, code, message: message.into(), retry_after: None }
    }

    fn busy(message: &str) -> Self {
        Self { retry_after: Some(1), ..Self::new(StatusCode::TOO_MANY_REQUESTS, "busy", message) }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut response =
            (self.status, Json(ErrorBody::new(self.code, self.message))).into_response();
        if let Some(s) = self.retry_after {
            response.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from(s));
        }
        response
    }
}

type ApiResult<T> = Result<T, ApiError>;

/// A JSON body whose errors take the API's error shape.
fn body<T>(parsed: Result<Json<T>, JsonRejection>) -> ApiResult<T> {
    parsed.map(|Json(v)| v).map_err(|e| ApiError::new(e.status(), "bad_request", e.body_text()))
}

/// An error whose code is the status's usual one.
fn status_error(status: StatusCode, message: &str) -> ApiError {
    ApiError::new(status, code_for_status(status.as_u16()), message)
}

/// The router, for serving or for tests.
pub fn router(state: Arc<AppState>) -> Router {
    let body_limit = state.options.max_body_bytes;
    Router::new()
        .route("/v1/run", post(run))
        .route("/v1/run_tests", post(run_tests))
        .route("/v1/sandboxes", post(open_session))
        .route("/v1/sandboxes/{id}", axum::routing::delete(close_session))
        .route("/v1/sandboxes/{id}/exec", post(exec))
        .route("/v1/sandboxes/{id}/files/{*path}", get(read_file).put(write_file))
        .route("/health", get(health))
        .route("/metrics", get(metrics))
        .fallback(|| async { status_error(StatusCode::NOT_FOUND, "no such route") })
        .method_not_allowed_fallback(|| async {
            status_error(StatusCode::METHOD_NOT_ALLOWED, "this route does not take that method")
        })
        .layer(axum::middleware::map_response(json_errors))
        .layer(DefaultBodyLimit::max(body_limit))
        .with_state(state)
}

/// The server's state around a sandbox.
pub fn state(sandbox: Sandbox, options: ServerOptions) -> Arc<AppState> {
    Arc::new(AppState {
        permits: tokio::sync::Semaphore::new(options.max_concurrent.max(1)),
        sandbox,
        options,
        queued: AtomicU64::new(0),
        sessions: Mutex::new(HashMap::new()),
        runs_by_status: Mutex::new(BTreeMap::new()),
        rejected: AtomicU64::new(0),
    })
}

/// Serves until the process ends, expiring idle sessions in the background.
pub async fn serve(
    listener: tokio::net::TcpListener,
    sandbox: Sandbox,
    options: ServerOptions,
) -> std::io::Result<()> {
    let state = state(sandbox, options);
    tokio::spawn(expire_idle(Arc::downgrade(&state)));
    axum::serve(listener, router(state)).await
}

/// Ends sessions idle for longer than the timeout.
pub async fn expire_idle(state: std::sync::Weak<AppState>) {
    loop {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let Some(state) = state.upgrade() else { return };
        let expired: Vec<Arc<Session>> = {
            let mut sessions = state.sessions.lock().unwrap_or_else(|p| p.into_inner());
            let old: Vec<String> = sessions
                .iter()
                .filter(|(_, s)| {
                    s.last_used.lock().unwrap_or_else(|p| p.into_inner()).elapsed()
                        > state.options.idle_timeout
                })
                .map(|(id, _)| id.clone())
                .collect();
            old.iter().filter_map(|id| sessions.remove(id)).collect()
        };
        for session in expired {
            retire_session(&state.sandbox, session);
        }
    }
}

fn retire_session(sandbox: &Sandbox, session: Arc<Session>) {
    // When a request still holds the session, its slot is destroyed (by `Slot`'s drop) when the
    // last holder lets go.
    if let Ok(session) = Arc::try_unwrap(session) {
        sandbox.retire(session.slot);
    }
}

/// Waits for a run slot, or refuses when the line is too long.
async fn permit(state: &AppState) -> ApiResult<tokio::sync::SemaphorePermit<'_>> {
    if let Ok(p) = state.permits.try_acquire() {
        return Ok(p);
    }
    if state.queued.fetch_add(1, Ordering::SeqCst) >= state.options.max_queue as u64 {
        state.queued.fetch_sub(1, Ordering::SeqCst);
        state.rejected.fetch_add(1, Ordering::Relaxed);
        return Err(ApiError::busy("every sandbox is busy and the queue is full"));
    }
    let p = state.permits.acquire().await;
    state.queued.fetch_sub(1, Ordering::SeqCst);
    p.map_err(|_| {
        ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "closed", "the server is shutting down")
    })
}

fn count(state: &AppState, status: RunStatus) {
    let name = serde_json::to_value(status)
        .ok()
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_default();
    *state.runs_by_status.lock().unwrap_or_else(|p| p.into_inner()).entry(name).or_insert(0) += 1;
}

fn bad_request(message: impl Into<String>) -> ApiError {
    ApiError::new(StatusCode::BAD_REQUEST, "bad_request", message)
}

/// Checks a path under `/work` given by a client.
fn checked_path(path: &str) -> ApiResult<&str> {
    if temper_verify::code::session_path_ok(path) {
        Ok(path)
    } else {
        Err(bad_request(format!("`{path}` must be a relative path without `.` or `..` parts")))
    }
}

async fn run(
    State(state): State<Arc<AppState>>,
    parsed: Result<Json<SandboxRunRequest>, JsonRejection>,
) -> ApiResult<Json<RunResult>> {
    let (request, files) = body(parsed)?.into_parts();
    for path in files.keys() {
        checked_path(path)?;
    }
    let _permit = permit(&state).await?;
    let result = if files.is_empty() {
        state.sandbox.run(&request).await
    } else {
        state.sandbox.run_with_files(&request, &files).await
    };
    count(&state, result.status);
    Ok(Json(result))
}

async fn run_tests(
    State(state): State<Arc<AppState>>,
    parsed: Result<Json<TestsRequest>, JsonRejection>,
) -> ApiResult<Json<TestsReply>> {
    let body = body(parsed)?;
    if body.tests.len() > 1000 {
        return Err(bad_request("at most 1000 tests per request"));
    }
    let _permit = permit(&state).await?;
    let outcomes = state
        .sandbox
        .run_tests(body.language, &body.code, &body.tests, body.limits, body.stop_on_failure)
        .await
        .map_err(|e| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "sandbox", e.to_string()))?;
    let results: Vec<TestResult> = outcomes
        .into_iter()
        .map(|o| {
            count(&state, o.result.status);
            TestResult { passed: o.passed, result: o.result }
        })
        .collect();
    let passed = results.iter().filter(|r| r.passed).count();
    Ok(Json(TestsReply { passed, total: body.tests.len(), results }))
}

fn new_id() -> String {
    format!("{:032x}", rand::random::<u128>())
}

fn session(state: &AppState, id: &str) -> ApiResult<Arc<Session>> {
    let sessions = state.sessions.lock().unwrap_or_else(|p| p.into_inner());
    let s = sessions.get(id).cloned().ok_or_else(|| {
        ApiError::new(StatusCode::NOT_FOUND, "not_found", format!("no session `{id}`"))
    })?;
    *s.last_used.lock().unwrap_or_else(|p| p.into_inner()) = Instant::now();
    Ok(s)
}

async fn open_session(
    State(state): State<Arc<AppState>>,
) -> ApiResult<(StatusCode, Json<serde_json::Value>)> {
    if state.sessions.lock().unwrap_or_else(|p| p.into_inner()).len() >= state.options.max_sessions
    {
        state.rejected.fetch_add(1, Ordering::Relaxed);
        return Err(ApiError::busy("the session limit is reached"));
    }
    let slot =
        state.sandbox.session_slot().await.map_err(|e| {
            ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "sandbox", e.to_string())
        })?;
    let id = new_id();
    let session = Arc::new(Session { slot, last_used: Mutex::new(Instant::now()) });
    state.sessions.lock().unwrap_or_else(|p| p.into_inner()).insert(id.clone(), session);
    Ok((StatusCode::CREATED, Json(json!({"id": id}))))
}

async fn close_session(
    State(state): State<Arc<AppState>>,
    Path(id): Path<String>,
) -> ApiResult<StatusCode> {
    let removed = state.sessions.lock().unwrap_or_else(|p| p.into_inner()).remove(&id);
    let session = removed.ok_or_else(|| {
        ApiError::new(StatusCode::NOT_FOUND, "not_found", format!("no session `{id}`"))
    })?;
    retire_session(&state.sandbox, session);
    Ok(StatusCode::NO_CONTENT)
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ExecBody {
    command: String,
    #[serde(default)]
    stdin: String,
    #[serde(default)]
    timeout_ms: Option<u64>,
    #[serde(default)]
    memory_mb: Option<u64>,
    #[serde(default)]
    output_bytes: Option<u64>,
}

async fn exec(
    State(state): State<Arc<AppState>>,
    Path(id): Path<String>,
    parsed: Result<Json<ExecBody>, JsonRejection>,
) -> ApiResult<Json<RunResult>> {
    let body = body(parsed)?;
    let session = session(&state, &id)?;
    let _permit = permit(&state).await?;
    let limits = Limits {
        time_limit_ms: body.timeout_ms,
        memory_mb: body.memory_mb,
        output_bytes: body.output_bytes,
    };
    let result =
        state.sandbox.exec_command(&session.slot, &body.command, &body.stdin, limits).await;
    count(&state, result.status);
    Ok(Json(result))
}

async fn write_file(
    State(state): State<Arc<AppState>>,
    Path((id, path)): Path<(String, String)>,
    body: Bytes,
) -> ApiResult<Json<serde_json::Value>> {
    let path = checked_path(&path)?.to_owned();
    let session = session(&state, &id)?;
    let size = session
        .slot
        .write_file(&path, body.to_vec(), 0o644)
        .await
        .map_err(|e| ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, "file", e.to_string()))?;
    Ok(Json(json!({"path": path, "size": size})))
}

async fn read_file(
    State(state): State<Arc<AppState>>,
    Path((id, path)): Path<(String, String)>,
) -> ApiResult<Vec<u8>> {
    let path = checked_path(&path)?.to_owned();
    let session = session(&state, &id)?;
    session
        .slot
        .read_file(&path, state.options.max_file_bytes)
        .await
        .map_err(|e| ApiError::new(StatusCode::NOT_FOUND, "file", e.to_string()))
}

async fn health(State(state): State<Arc<AppState>>) -> Json<serde_json::Value> {
    let sessions = state.sessions.lock().unwrap_or_else(|p| p.into_inner()).len();
    Json(json!({"status": "ok", "ready_slots": state.sandbox.ready(), "sessions": sessions}))
}

async fn metrics(State(state): State<Arc<AppState>>) -> impl IntoResponse {
    use temper_protocol::exposition::{CONTENT_TYPE, Identity, Scrape};
    let (warm, cold) = state.sandbox.starts();
    let mut m = Scrape::new("temper_sandbox", &Identity::of_process("sandbox"));
    let runs: Vec<(String, f64)> = state
        .runs_by_status
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .iter()
        .map(|(status, n)| (status.to_string(), *n as f64))
        .collect();
    m.counters("runs", "Runs and session execs by result status.", "status", runs);
    let starts = [("warm".to_owned(), warm as f64), ("cold".to_owned(), cold as f64)];
    m.counters(
        "slot_starts",
        "Slots taken from the warm pool, or built on the request path.",
        "kind",
        starts,
    );
    let sessions = state.sessions.lock().unwrap_or_else(|p| p.into_inner()).len();
    m.gauge("sessions", "Open sessions.", sessions as f64);
    m.gauge("ready_slots", "Warm slots ready.", state.sandbox.ready() as f64);
    m.gauge(
        "queued",
        "Requests waiting for a run slot.",
        state.queued.load(Ordering::Relaxed) as f64,
    );
    m.counter(
        "rejected",
        "Requests refused with 429.",
        state.rejected.load(Ordering::Relaxed) as f64,
    );
    ([(header::CONTENT_TYPE, CONTENT_TYPE)], m.encode())
}
