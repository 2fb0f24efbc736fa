//! External environments: an environment written in any language, run as a child process that
//! speaks JSON lines on stdin/stdout.
//!
//! # Protocol
//!
//! temper writes one request per line to the process's stdin and reads one response per line
//! from its stdout; stderr is passed to temper's log. Requests carry an integer `id`; each
//! response repeats it, so a process may answer out of order (a simple one answers in order).
//!
//! ```text
//! → {"id": 1, "method": "reset", "params": {"rollout_id": "3-0-17", "example": {...}}}
//! ← {"id": 1, "result": {"prompt": null}}
//! → {"id": 2, "method": "step", "params": {"rollout_id": "3-0-17", "completion": [...]}}
//! ← {"id": 2, "result": {"messages": [{"role": "user", "content": "..."}], "done": false}}
//! → {"id": 3, "method": "score", "params": {"prompt": [...], "completion": [...], "answer": "...", "info": {...}, "example_id": 3}}
//! ← {"id": 3, "result": {"reward": 0.75}}
//! → {"id": 4, "method": "close", "params": {"rollout_id": "3-0-17"}}
//! ← {"id": 4, "result": {}}
//! → {"id": 5, "method": "tool", "params": {"rollout_id": "3-0-17", "name": "lookup", "arguments": {"word": "x"}}}
//! ← {"id": 5, "result": {"output": "..."}}
//! ```
//!
//! - `reset` starts a rollout of `example` (an [`Example`](crate::Example) as JSON). The result
//!   may replace the prompt with a list of messages; `null` keeps the dataset's prompt.
//! - `step` gets the completion so far (its last message is the model's turn) and returns the
//!   messages to show the model next, and whether the rollout is done (messages returned with
//!   `done: true` are not shown).
//! - `score` returns the rollout's reward (used by the `external` rubric entry, which is the
//!   default rubric of an external environment).
//! - `close` ends a rollout; the process may forget its state.
//! - `tool` answers a call of a tool the package declares with `[[tool]]` and `method = "..."`
//!   (`name` is the method): temper offers those tools to the model, checks each call's
//!   arguments against the tool's schema, applies the tool limits, and shows `output` (or the
//!   error) to the model as the tool's result; a turn with tool calls is answered this way
//!   instead of by `step`.
//! - An error is `{"id": N, "error": "message"}`; it fails that rollout, not the run.
//!
//! The process is started on first use, in the package folder, and killed when the environment
//! is dropped. A response line longer than 16 MiB, a line that is not a JSON object, or a process
//! that exits ends the process and fails every request in flight with a message naming the
//! command. Each call must be answered within the call timeout (300 s).

use std::collections::HashMap;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use serde_json::{Value, json};
use temper_protocol::Message;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::process::Child;
use tokio::sync::{OnceCell, mpsc, oneshot};

use crate::EnvError;
use crate::rollout::{Interaction, RolloutState, Step};
use crate::rubric::{RewardError, RewardFunction, RewardInput, Services};

/// Longest response line accepted from the process.
pub const MAX_LINE_BYTES: u64 = 16 << 20;

type Pending = Arc<std::sync::Mutex<Option<HashMap<u64, oneshot::Sender<Result<Value, String>>>>>>;

/// Longest stderr line passed to the log.
const MAX_LOG_LINE: u64 = 64 << 10;

/// A running (or not yet started) external environment process.
#[derive(Debug)]
pub struct ExternalProcess {
    command: Vec<String>,
    dir: PathBuf,
    call_timeout: Duration,
    conn: OnceCell<Connection>,
    next_id: AtomicU64,
}

/// The pipes of a started process. The process itself is owned by the task reading its
/// responses, which kills it when the protocol breaks or when this connection is dropped.
#[derive(Debug)]
struct Connection {
    /// Whole request lines, written by one task so a cancelled call never leaves half a line.
    writer: mpsc::Sender<Vec<u8>>,
    pending: Pending,
    _shutdown: oneshot::Sender<()>,
}

/// Forgets a request when its call ends, however it ends.
struct Forget<'a> {
    pending: &'a Pending,
    id: u64,
}

impl Drop for Forget<'_> {
    fn drop(&mut self) {
        if let Some(map) = self.pending.lock().unwrap_or_else(|p| p.into_inner()).as_mut() {
            map.remove(&self.id);
        }
    }
}

impl ExternalProcess {
    /// A process to start from `command` (program and arguments) in `dir` on first use; each
    /// call (writing the request and reading its answer) must finish within `call_timeout`.
    pub fn new(command: Vec<String>, dir: PathBuf, call_timeout: Duration) -> Self {
        Self { command, dir, call_timeout, conn: OnceCell::new(), next_id: AtomicU64::new(1) }
    }

    fn error(&self, message: impl Into<String>) -> EnvError {
        EnvError::External { command: self.command.join(" "), message: message.into() }
    }

    async fn connection(&self) -> Result<&Connection, EnvError> {
        self.conn.get_or_try_init(|| async { self.spawn() }).await
    }

    fn spawn(&self) -> Result<Connection, EnvError> {
        let (program, args) =
            self.command.split_first().ok_or_else(|| self.error("the command is empty"))?;
        let mut child = tokio::process::Command::new(program)
            .args(args)
            .current_dir(&self.dir)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| self.error(format!("cannot start: {e}")))?;
        let (Some(mut stdin), Some(stdout), Some(stderr)) =
            (child.stdin.take(), child.stdout.take(), child.stderr.take())
        else {
            return Err(self.error("cannot open the process's pipes"));
        };
        let pending: Pending = Arc::new(std::sync::Mutex::new(Some(HashMap::new())));
        let command = self.command.join(" ");
        let (writer, mut lines) = mpsc::channel::<Vec<u8>>(1024);
        tokio::spawn(async move {
            while let Some(line) = lines.recv().await {
                if stdin.write_all(&line).await.is_err() || stdin.flush().await.is_err() {
                    break;
                }
            }
        });
        let (shutdown, stop) = oneshot::channel();
        tokio::spawn(read_responses(stdout, Arc::clone(&pending), command.clone(), child, stop));
        tokio::spawn(async move {
            let mut reader = BufReader::new(stderr);
            loop {
                let mut line = Vec::new();
                match (&mut reader).take(MAX_LOG_LINE).read_until(b'\n', &mut line).await {
                    Ok(0) | Err(_) => break,
                    Ok(_) => {
                        let text = String::from_utf8_lossy(&line);
                        tracing::info!(target: "temper_envs::external", command = %command, "{}", text.trim_end());
                    }
                }
            }
        });
        Ok(Connection { writer, pending, _shutdown: shutdown })
    }

    /// Sends one request and waits for its response.
    pub async fn call(&self, method: &str, params: Value) -> Result<Value, EnvError> {
        let conn = self.connection().await?;
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        {
            let mut pending = conn.pending.lock().unwrap_or_else(|p| p.into_inner());
            let Some(map) = pending.as_mut() else {
                return Err(self.error("the process has exited"));
            };
            map.insert(id, tx);
        }
        let _forget = Forget { pending: &conn.pending, id };
        let mut line = serde_json::to_vec(&json!({"id": id, "method": method, "params": params}))
            .map_err(|e| self.error(format!("cannot encode the request: {e}")))?;
        line.push(b'\n');
        let exchange = async {
            conn.writer.send(line).await.map_err(|_| "the process has exited".to_owned())?;
            rx.await.map_err(|_| "the process has exited".to_owned())?
        };
        match tokio::time::timeout(self.call_timeout, exchange).await {
            Err(_) => Err(self.error(format!(
                "no answer to `{method}` within {} s",
                self.call_timeout.as_secs_f64()
            ))),
            Ok(Err(message)) if message == "the process has exited" => Err(self.error(message)),
            Ok(Err(message)) => Err(self.error(format!("`{method}` failed: {message}"))),
            Ok(Ok(value)) => Ok(value),
        }
    }
}

/// Reads responses and hands each to its caller. Ends (killing the process) when the process
/// exits, breaks the protocol, or the connection is dropped; every request still waiting then
/// fails with the reason.
async fn read_responses(
    stdout: tokio::process::ChildStdout,
    pending: Pending,
    command: String,
    child: Child,
    mut stop: oneshot::Receiver<()>,
) {
    let mut reader = BufReader::new(stdout);
    let reason = loop {
        let mut buf = Vec::new();
        let mut limited = (&mut reader).take(MAX_LINE_BYTES + 1);
        let read = tokio::select! {
            read = limited.read_until(b'\n', &mut buf) => read,
            _ = &mut stop => break "the environment was dropped".to_owned(),
        };
        match read {
            Ok(0) => break "the process exited".to_owned(),
            Err(e) => break format!("cannot read from the process: {e}"),
            Ok(_) if buf.len() as u64 > MAX_LINE_BYTES => {
                break format!("a response line is longer than {MAX_LINE_BYTES} bytes");
            }
            Ok(_) => {}
        }
        if buf.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        let parsed: Result<Value, _> = serde_json::from_slice(&buf);
        let Ok(Value::Object(mut response)) = parsed else {
            break format!(
                "the process wrote a line that is not a JSON object: {}",
                String::from_utf8_lossy(&buf[..buf.len().min(200)]).trim()
            );
        };
        let Some(id) = response.get("id").and_then(Value::as_u64) else {
            break "a response has no integer `id`".to_owned();
        };
        let outcome = match response.remove("error") {
            Some(error) if !error.is_null() => {
                Err(error.as_str().map_or_else(|| error.to_string(), str::to_owned))
            }
            _ => Ok(response.remove("result").unwrap_or(Value::Null)),
        };
        let sender =
            pending.lock().unwrap_or_else(|p| p.into_inner()).as_mut().and_then(|m| m.remove(&id));
        if let Some(sender) = sender {
            let _ = sender.send(outcome);
        }
    };
    tracing::warn!(target: "temper_envs::external", command = %command, "{reason}");
    // Dropping the child kills it (kill_on_drop).
    drop(child);
    if let Some(map) = pending.lock().unwrap_or_else(|p| p.into_inner()).take() {
        for (_, sender) in map {
            let _ = sender.send(Err(reason.clone()));
        }
    }
}

/// The interaction of an external environment.
#[derive(Debug, Clone)]
pub struct External {
    process: Arc<ExternalProcess>,
    tools: Option<crate::tools::ToolUse>,
}

impl External {
    /// Talks to `process`.
    pub fn new(process: Arc<ExternalProcess>) -> Self {
        Self { process, tools: None }
    }

    /// Offers `tools` (the process's [`MethodTool`]s) to the model; turns that call them are
    /// answered through them.
    pub fn with_tools(mut self, tools: crate::tools::ToolUse) -> Self {
        self.tools = Some(tools);
        self
    }
}

/// A tool answered by the external process's `tool` method.
#[derive(Debug, Clone)]
pub struct MethodTool {
    /// Name (the method's), description and parameters.
    pub spec: temper_protocol::ToolSpec,
    /// The process.
    pub process: Arc<ExternalProcess>,
}

#[async_trait]
impl crate::tools::Tool for MethodTool {
    fn spec(&self) -> temper_protocol::ToolSpec {
        self.spec.clone()
    }

    async fn call(
        &self,
        arguments: &serde_json::Map<String, Value>,
        ctx: &crate::tools::ToolContext<'_>,
    ) -> Result<String, String> {
        let params = json!({"rollout_id": ctx.rollout_id, "name": self.spec.function.name, "arguments": arguments});
        let result = self.process.call("tool", params).await.map_err(|e| e.to_string())?;
        match result.get("output") {
            Some(Value::String(s)) => Ok(s.clone()),
            Some(other) => Ok(other.to_string()),
            None => Err("the environment's `tool` reply has no `output`".into()),
        }
    }
}

#[async_trait]
impl Interaction for External {
    async fn setup(&self, state: &mut RolloutState<'_>, _: &Services) -> Result<(), EnvError> {
        let result = self
            .process
            .call("reset", json!({"rollout_id": state.id, "example": state.example}))
            .await?;
        if let Some(prompt) = result.get("prompt").filter(|p| !p.is_null()) {
            state.prompt = serde_json::from_value(prompt.clone()).map_err(|e| {
                self.process.error(format!("`reset` returned an invalid prompt: {e}"))
            })?;
        }
        Ok(())
    }

    fn tools(&self) -> Vec<temper_protocol::ToolSpec> {
        self.tools.as_ref().map(Interaction::tools).unwrap_or_default()
    }

    fn is_done(&self, _: &RolloutState<'_>) -> bool {
        false
    }

    async fn respond(
        &self,
        state: &mut RolloutState<'_>,
        services: &Services,
    ) -> Result<Step, EnvError> {
        if let Some(tools) = &self.tools
            && state.last_reply().is_some_and(|m| !m.tool_calls.is_empty())
        {
            return tools.respond(state, services).await;
        }
        let result = self
            .process
            .call("step", json!({"rollout_id": state.id, "completion": state.completion}))
            .await?;
        if result.get("done").and_then(Value::as_bool).unwrap_or(false) {
            return Ok(Step::Done);
        }
        let messages: Vec<Message> = serde_json::from_value(
            result.get("messages").cloned().unwrap_or(json!([])),
        )
        .map_err(|e| self.process.error(format!("`step` returned invalid messages: {e}")))?;
        Ok(Step::Continue(messages))
    }

    async fn cleanup(&self, state: &RolloutState<'_>) {
        if let Err(e) = self.process.call("close", json!({"rollout_id": state.id})).await {
            tracing::debug!("close failed: {e}");
        }
    }
}

/// The reward computed by the external process's `score` method.
#[derive(Debug, Clone)]
pub struct ExternalScore {
    process: Arc<ExternalProcess>,
}

impl ExternalScore {
    /// Asks `process` for scores.
    pub fn new(process: Arc<ExternalProcess>) -> Self {
        Self { process }
    }
}

#[async_trait]
impl RewardFunction for ExternalScore {
    async fn score(&self, input: &RewardInput<'_>, _: &Services) -> Result<f64, RewardError> {
        let params = json!({
            "prompt": input.prompt,
            "completion": input.completion,
            "answer": input.example.answer,
            "info": input.example.info,
            "example_id": input.example.example_id,
        });
        let result =
            self.process.call("score", params).await.map_err(|e| RewardError(e.to_string()))?;
        let reward = result.get("reward").unwrap_or(&result);
        reward.as_f64().ok_or_else(|| RewardError(format!("`score` returned no number: {result}")))
    }
}
