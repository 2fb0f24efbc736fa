//! Tool use: the model calls functions, the environment runs them and answers with their output.
//!
//! A tool call that names an unknown tool, whose arguments are not a JSON object or break the
//! tool's JSON schema, is answered with an error message to the model (a tool message starting
//! with `error:`); the rollout goes on. So is a call that runs past its time limit (it is
//! stopped). Output longer than the limit is cut, with a note saying how much was left out. The
//! rollout is done when the model answers without calling a tool, or at `max_turns`.
//!
//! Built-in tools: `calculator`, `python` (a one-off program in the sandbox), and the session
//! tools `bash`, `read_file`, `write_file` and `edit`, which work in a sandbox session the
//! rollout holds for its whole life (seeded with the task's files, closed once it is scored).
//! Packages add their own (`[[tool]]` in `environment.toml`: see [`ProgramTool`]).

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use serde_json::{Value, json};
use temper_protocol::{Language, Limits, Message, RunRequest, RunStatus, ToolSpec};
use temper_verify::code::CodeSession;

use crate::rollout::{Interaction, RolloutState, Step};
use crate::{EnvError, Example, Services};

/// What a tool call may use besides its arguments.
#[derive(Debug, Clone, Copy)]
pub struct ToolContext<'a> {
    /// The code runner and judge.
    pub services: &'a Services,
    /// The rollout's sandbox session, when it holds one.
    pub session: Option<&'a dyn CodeSession>,
    /// The example being answered.
    pub example: &'a Example,
    /// The rollout's id (external environments key their state by it).
    pub rollout_id: &'a str,
    /// How long the call may run: tools that run programs give them at most this much, so the
    /// sandbox stops them (a call still running a little after it is abandoned).
    pub time_limit: Duration,
}

impl ToolContext<'_> {
    /// `limits` with its time limit cut to the call's.
    pub fn clamp(&self, mut limits: Limits) -> Limits {
        let ms = u64::try_from(self.time_limit.as_millis()).unwrap_or(u64::MAX).max(1);
        limits.time_limit_ms = Some(limits.time_limit_ms.map_or(ms, |t| t.min(ms)));
        limits
    }
}

/// Time a call may run past its limit before it is abandoned (its program is stopped by the
/// sandbox at the limit; this covers the sandbox's own overhead).
const CALL_GRACE: Duration = Duration::from_secs(5);

/// A function the model may call.
#[async_trait]
pub trait Tool: Send + Sync + fmt::Debug {
    /// Name, description and JSON schema of the arguments.
    fn spec(&self) -> ToolSpec;

    /// Whether it works in the rollout's sandbox session (the rollout then holds one).
    fn needs_session(&self) -> bool {
        false
    }

    /// Runs the tool on arguments that satisfy its schema. `Err` is shown to the model as
    /// `error: <message>`.
    async fn call(
        &self,
        arguments: &serde_json::Map<String, Value>,
        ctx: &ToolContext<'_>,
    ) -> Result<String, String>;
}

/// Limits of tool calls.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ToolLimits {
    /// Longest output shown to the model, in bytes; the rest is cut with a note.
    pub max_output_bytes: usize,
    /// Longest a call may run; it is then stopped and the model told so.
    pub call_timeout: Duration,
}

impl Default for ToolLimits {
    fn default() -> Self {
        Self { max_output_bytes: 16 << 10, call_timeout: Duration::from_secs(60) }
    }
}

/// Where a rollout's session gets its first files: a folder or a `.tar`/`.tar.gz` archive inside
/// the package, named by a template over the example (`tasks/{task_id}`: `{name}` is the
/// example's `info` field `name`, or `{task}` / `{example_id}`).
#[derive(Debug, Clone, PartialEq)]
pub struct SessionSeed {
    /// The package folder.
    pub root: PathBuf,
    /// The path template, relative to `root`.
    pub template: String,
}

/// Most bytes and files a session is seeded with.
pub const MAX_SEED_BYTES: u64 = 64 << 20;
/// See [`MAX_SEED_BYTES`].
pub const MAX_SEED_FILES: usize = 10_000;

/// A tool and the compiled schema its arguments are checked against.
#[derive(Clone)]
struct Checked {
    tool: Arc<dyn Tool>,
    name: String,
    schema: Arc<jsonschema::Validator>,
}

impl fmt::Debug for Checked {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Checked").field("tool", &self.tool).finish()
    }
}

/// The interaction of tool environments.
#[derive(Debug, Clone)]
pub struct ToolUse {
    tools: Vec<Checked>,
    limits: ToolLimits,
    session: bool,
    seed: Option<SessionSeed>,
}

impl ToolUse {
    /// Offers `tools` to the model with the default limits; fails when a tool's parameters are
    /// not a valid JSON schema, or two tools share a name.
    pub fn new(tools: Vec<Arc<dyn Tool>>) -> Result<Self, String> {
        let mut checked: Vec<Checked> = Vec::with_capacity(tools.len());
        for tool in tools {
            let spec = tool.spec();
            let name = spec.function.name.clone();
            if checked.iter().any(|c| c.name == name) {
                return Err(format!("two tools are called `{name}`"));
            }
            let schema = match &spec.function.parameters {
                Value::Null => json!({"type": "object"}),
                p => p.clone(),
            };
            let schema = jsonschema::options().build(&schema).map_err(|e| {
                format!("tool `{name}`: its parameters are not a valid JSON schema: {e}")
            })?;
            checked.push(Checked { tool, name, schema: Arc::new(schema) });
        }
        let session = checked.iter().any(|c| c.tool.needs_session());
        Ok(Self { tools: checked, limits: ToolLimits::default(), session, seed: None })
    }

    /// Sets the limits of each call.
    pub fn with_limits(mut self, limits: ToolLimits) -> Self {
        self.limits = limits;
        self
    }

    /// Gives every rollout a sandbox session (also implied by a tool that needs one), seeded
    /// with `seed`'s files when given.
    pub fn with_session(mut self, seed: Option<SessionSeed>) -> Self {
        self.session = true;
        self.seed = seed;
        self
    }

    /// Whether rollouts hold a session.
    pub fn holds_session(&self) -> bool {
        self.session
    }

    /// Answers one tool call.
    async fn answer(&self, call: &temper_protocol::ToolCall, ctx: &ToolContext<'_>) -> String {
        let name = &call.function.name;
        let Some(checked) = self.tools.iter().find(|t| t.name == *name) else {
            let known: Vec<&str> = self.tools.iter().map(|t| t.name.as_str()).collect();
            return format!("error: unknown tool `{name}`; available tools: {}", known.join(", "));
        };
        let raw =
            if call.function.arguments.trim().is_empty() { "{}" } else { &call.function.arguments };
        let arguments = match serde_json::from_str::<Value>(raw) {
            Ok(Value::Object(map)) => map,
            Ok(other) => return format!("error: arguments must be a JSON object, not {other}"),
            Err(e) => return format!("error: arguments are not valid JSON: {e}"),
        };
        let value = Value::Object(arguments);
        let problems: Vec<String> = checked
            .schema
            .iter_errors(&value)
            .take(5)
            .map(|e| {
                let at = e.instance_path().to_string();
                if at.is_empty() { e.to_string() } else { format!("{at}: {e}") }
            })
            .collect();
        if !problems.is_empty() {
            return format!(
                "error: the arguments do not match `{name}`'s schema: {}",
                problems.join("; ")
            );
        }
        let Value::Object(arguments) = value else { unreachable!("checked above") };
        let timeout = self.limits.call_timeout;
        let ctx = ToolContext { time_limit: timeout, ..*ctx };
        let call = checked.tool.call(&arguments, &ctx);
        let output = match tokio::time::timeout(timeout + CALL_GRACE, call).await {
            Err(_) => {
                return format!(
                    "error: `{name}` ran longer than {} s and was stopped",
                    timeout.as_secs_f64()
                );
            }
            Ok(Ok(output)) => output,
            Ok(Err(message)) => format!("error: {message}"),
        };
        cap_output(output, self.limits.max_output_bytes)
    }
}

/// `text` cut to at most `max` bytes (at a character boundary), with a note of what was cut.
pub fn cap_output(mut text: String, max: usize) -> String {
    if text.len() <= max {
        return text;
    }
    let total = text.len();
    let mut cut = max;
    while !text.is_char_boundary(cut) {
        cut -= 1;
    }
    text.truncate(cut);
    text.push_str(&format!("\n[output truncated: {cut} of {total} bytes shown]"));
    text
}

#[async_trait]
impl Interaction for ToolUse {
    fn tools(&self) -> Vec<ToolSpec> {
        self.tools.iter().map(|t| t.tool.spec()).collect()
    }

    async fn setup(
        &self,
        state: &mut RolloutState<'_>,
        services: &Services,
    ) -> Result<(), EnvError> {
        if !self.session {
            return Ok(());
        }
        let runner = services.code_runner.as_ref().ok_or_else(|| {
            EnvError::Interaction(
                "this environment's tools need a sandbox; none is configured".into(),
            )
        })?;
        let session: Arc<dyn CodeSession> =
            Arc::from(runner.open_session().await.map_err(|e| {
                EnvError::Interaction(format!("cannot open a sandbox session: {e}"))
            })?);
        // Held by the rollout from here on, so it is closed however the rollout ends.
        state.session = Some(Arc::clone(&session));
        if let Some(seed) = &self.seed {
            upload(seed, state.example, session.as_ref(), None).await?;
        }
        Ok(())
    }

    fn is_done(&self, state: &RolloutState<'_>) -> bool {
        state.last_reply().is_none_or(|m| m.tool_calls.is_empty())
    }

    async fn respond(
        &self,
        state: &mut RolloutState<'_>,
        services: &Services,
    ) -> Result<Step, EnvError> {
        let calls = state.last_reply().map(|m| m.tool_calls.clone()).unwrap_or_default();
        let ctx = ToolContext {
            services,
            session: state.session.as_deref(),
            example: state.example,
            rollout_id: &state.id,
            time_limit: self.limits.call_timeout,
        };
        let mut messages = Vec::with_capacity(calls.len());
        for call in &calls {
            let output = self.answer(call, &ctx).await;
            messages.push(Message::tool(&call.id, &call.function.name, output));
        }
        Ok(Step::Continue(messages))
    }
}

/// The package path `template` names for `example`.
fn seed_path(template: &str, example: &Example) -> Result<String, String> {
    let mut out = String::new();
    let mut rest = template;
    while let Some(open) = rest.find('{') {
        out.push_str(&rest[..open]);
        let close = rest[open..].find('}').ok_or_else(|| format!("`{template}`: unclosed `{{`"))?;
        let key = &rest[open + 1..open + close];
        let value = match key {
            "task" => example.task.clone(),
            "example_id" => example.example_id.to_string(),
            _ => match example.info.get(key) {
                Some(Value::String(s)) => s.clone(),
                Some(Value::Number(n)) => n.to_string(),
                _ => {
                    return Err(format!(
                        "the example has no string field `{key}` for `{template}`"
                    ));
                }
            },
        };
        if value.is_empty() || value.contains('/') || value.contains("..") || value.contains('\0') {
            return Err(format!("`{key}` = {value:?} cannot name a path part"));
        }
        out.push_str(&value);
        rest = &rest[open + close + 1..];
    }
    out.push_str(rest);
    Ok(out)
}

/// Copies the seed's files (a folder or an archive inside the package) into `session`, under
/// `to` when given.
pub(crate) async fn upload(
    seed: &SessionSeed,
    example: &Example,
    session: &dyn CodeSession,
    to: Option<&str>,
) -> Result<(), EnvError> {
    let fail = |m: String| EnvError::Interaction(format!("seeding the session: {m}"));
    let rel = seed_path(&seed.template, example).map_err(fail)?;
    let path = crate::package::resolve_path(&seed.root, &rel).map_err(fail)?;
    let files = if path.is_dir() {
        folder_files(&path).map_err(fail)?
    } else if rel.ends_with(".tar") || rel.ends_with(".tar.gz") || rel.ends_with(".tgz") {
        archive_files(&path).map_err(fail)?
    } else {
        return Err(fail(format!("`{rel}` is neither a folder nor a .tar/.tar.gz archive")));
    };
    for (name, bytes) in files {
        let name = match to {
            Some(to) => format!("{to}/{name}"),
            None => name,
        };
        session.write_file(&name, &bytes).await.map_err(|e| fail(e.to_string()))?;
    }
    Ok(())
}

/// The regular files under `dir` (relative `/` paths), within the seed limits.
fn folder_files(dir: &Path) -> Result<Vec<(String, Vec<u8>)>, String> {
    let listed = crate::package::package_files(dir).map_err(|e| e.to_string())?;
    if listed.len() > MAX_SEED_FILES {
        return Err(format!("{} holds more than {MAX_SEED_FILES} files", dir.display()));
    }
    let mut total = 0u64;
    let mut out = Vec::with_capacity(listed.len());
    for (rel, full) in listed {
        let bytes = std::fs::read(&full).map_err(|e| format!("{}: {e}", full.display()))?;
        total += bytes.len() as u64;
        if total > MAX_SEED_BYTES {
            return Err(format!("{} holds more than {MAX_SEED_BYTES} bytes", dir.display()));
        }
        out.push((rel, bytes));
    }
    Ok(out)
}

/// The regular files of a `.tar` or `.tar.gz` archive; links, devices and paths that leave the
/// folder are refused, and the sizes bounded as for folders.
fn archive_files(path: &Path) -> Result<Vec<(String, Vec<u8>)>, String> {
    use std::io::Read;
    let file = std::fs::File::open(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let reader: Box<dyn Read> = if path.extension().is_some_and(|e| e == "tar") {
        Box::new(file)
    } else {
        Box::new(flate2::read::GzDecoder::new(file))
    };
    let mut archive = tar::Archive::new(reader);
    let mut out = Vec::new();
    let mut total = 0u64;
    let entries = archive.entries().map_err(|e| format!("{}: {e}", path.display()))?;
    for entry in entries {
        let mut entry = entry.map_err(|e| format!("{}: {e}", path.display()))?;
        let kind = entry.header().entry_type();
        if kind.is_dir() {
            continue;
        }
        let name = entry.path().map_err(|e| e.to_string())?.to_string_lossy().into_owned();
        let name = name.trim_start_matches("./").to_owned();
        if !kind.is_file() {
            return Err(format!("{}: `{name}` is not a regular file", path.display()));
        }
        if !temper_verify::code::session_path_ok(&name) {
            return Err(format!(
                "{}: `{name}` is not a relative path inside the folder",
                path.display()
            ));
        }
        total += entry.size();
        if total > MAX_SEED_BYTES || out.len() >= MAX_SEED_FILES {
            return Err(format!(
                "{}: more than {MAX_SEED_BYTES} bytes or {MAX_SEED_FILES} files",
                path.display()
            ));
        }
        let mut bytes = Vec::with_capacity(entry.size() as usize);
        entry.read_to_end(&mut bytes).map_err(|e| format!("{}: {e}", path.display()))?;
        out.push((name, bytes));
    }
    Ok(out)
}

/// Builds a built-in tool by name.
pub fn builtin_tool(name: &str) -> Option<Arc<dyn Tool>> {
    match name {
        "calculator" => Some(Arc::new(Calculator)),
        "python" => Some(Arc::new(Python)),
        "bash" => Some(Arc::new(SessionTool::Bash)),
        "read_file" => Some(Arc::new(SessionTool::ReadFile)),
        "write_file" => Some(Arc::new(SessionTool::WriteFile)),
        "edit" => Some(Arc::new(SessionTool::Edit)),
        _ => None,
    }
}

/// Names of the built-in tools.
pub const BUILTIN_TOOLS: &[&str] =
    &["calculator", "python", "bash", "read_file", "write_file", "edit"];

/// Evaluates an arithmetic expression: `+ - * / ^`, parentheses, decimals.
#[derive(Debug, Clone, Copy)]
pub struct Calculator;

#[async_trait]
impl Tool for Calculator {
    fn spec(&self) -> ToolSpec {
        ToolSpec::function(
            "calculator",
            "Evaluate an arithmetic expression with + - * / ^ and parentheses, e.g. (3 + 4) * 2.",
            json!({"type": "object",
                   "properties": {"expression": {"type": "string", "description": "the expression"}},
                   "required": ["expression"]}),
        )
    }

    async fn call(
        &self,
        arguments: &serde_json::Map<String, Value>,
        _: &ToolContext<'_>,
    ) -> Result<String, String> {
        let expression = arguments
            .get("expression")
            .and_then(Value::as_str)
            .ok_or("missing string argument `expression`")?;
        let value = calc::evaluate(expression)?;
        Ok(calc::format(value))
    }
}

/// What a finished command printed, for the model: stdout, then stderr, then how it ended when
/// not with success.
fn shown(result: temper_protocol::RunResult) -> String {
    let mut out = result.stdout;
    if !result.stderr.is_empty() {
        out.push_str(&result.stderr);
    }
    match result.status {
        RunStatus::Ok => {}
        RunStatus::RuntimeError => {
            out.push_str(&format!("\n[exit code {}]", result.exit_code.unwrap_or(-1)));
        }
        RunStatus::Timeout => out.push_str("\n[stopped: it ran past its time limit]"),
        RunStatus::MemoryLimit => out.push_str("\n[stopped: it went over its memory limit]"),
        RunStatus::OutputLimit => out.push_str("\n[stopped: it wrote more output than allowed]"),
        other => out.push_str(&format!("\n[{other:?}]")),
    }
    out
}

/// Runs a Python program through the code runner and returns its output.
#[derive(Debug, Clone, Copy)]
pub struct Python;

#[async_trait]
impl Tool for Python {
    fn spec(&self) -> ToolSpec {
        ToolSpec::function(
            "python",
            "Run a Python 3 program and return what it prints (stdout, then stderr).",
            json!({"type": "object",
                   "properties": {"code": {"type": "string", "description": "the program"}},
                   "required": ["code"]}),
        )
    }

    async fn call(
        &self,
        arguments: &serde_json::Map<String, Value>,
        ctx: &ToolContext<'_>,
    ) -> Result<String, String> {
        let code = arguments
            .get("code")
            .and_then(Value::as_str)
            .ok_or("missing string argument `code`")?;
        let runner = ctx.services.code_runner.as_ref().ok_or("no code runner is configured")?;
        let request = RunRequest {
            language: Language::Python,
            code: code.to_owned(),
            stdin: String::new(),
            limits: ctx.clamp(Limits {
                time_limit_ms: Some(10_000),
                memory_mb: Some(512),
                output_bytes: Some(16_384),
            }),
        };
        let result = runner.run(request).await.map_err(|e| e.to_string())?;
        Ok(shown(result))
    }
}

/// Largest file the session tools read or edit.
const MAX_TOOL_FILE: u64 = 4 << 20;

/// Limits of one `bash` command: 30 s, 1 GiB, 64 KiB of output per stream.
const BASH_LIMITS: Limits =
    Limits { time_limit_ms: Some(30_000), memory_mb: Some(1024), output_bytes: Some(65_536) };

/// The tools that work in the rollout's sandbox session (its files persist between calls).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SessionTool {
    /// `bash`: a shell command in the working folder; its output.
    Bash,
    /// `read_file`: a file of the working folder, as text.
    ReadFile,
    /// `write_file`: creates or replaces a file.
    WriteFile,
    /// `edit`: replaces a string that occurs exactly once in a file.
    Edit,
}

#[async_trait]
impl Tool for SessionTool {
    fn spec(&self) -> ToolSpec {
        let (name, description, parameters) = match self {
            SessionTool::Bash => (
                "bash",
                "Run a bash command in the working folder (files persist between calls) and return its output.",
                json!({"type": "object",
                       "properties": {"command": {"type": "string", "description": "the command"}},
                       "required": ["command"]}),
            ),
            SessionTool::ReadFile => (
                "read_file",
                "Read a file of the working folder.",
                json!({"type": "object",
                       "properties": {"path": {"type": "string", "description": "path relative to the working folder"}},
                       "required": ["path"]}),
            ),
            SessionTool::WriteFile => (
                "write_file",
                "Create or replace a file of the working folder with the given content.",
                json!({"type": "object",
                       "properties": {"path": {"type": "string"}, "content": {"type": "string"}},
                       "required": ["path", "content"]}),
            ),
            SessionTool::Edit => (
                "edit",
                "Replace old_string, which must occur exactly once in the file, with new_string.",
                json!({"type": "object",
                       "properties": {"path": {"type": "string"}, "old_string": {"type": "string", "minLength": 1},
                                      "new_string": {"type": "string"}},
                       "required": ["path", "old_string", "new_string"]}),
            ),
        };
        ToolSpec::function(name, description, parameters)
    }

    fn needs_session(&self) -> bool {
        true
    }

    async fn call(
        &self,
        arguments: &serde_json::Map<String, Value>,
        ctx: &ToolContext<'_>,
    ) -> Result<String, String> {
        let session = ctx.session.ok_or("this rollout holds no sandbox session")?;
        let arg = |name: &str| {
            arguments
                .get(name)
                .and_then(Value::as_str)
                .ok_or_else(|| format!("missing string argument `{name}`"))
        };
        let err = |e: temper_verify::code::RunnerError| e.to_string();
        match self {
            SessionTool::Bash => {
                let limits = ctx.clamp(BASH_LIMITS);
                Ok(shown(session.exec(arg("command")?, "", limits).await.map_err(err)?))
            }
            SessionTool::ReadFile => {
                let bytes = session.read_file(arg("path")?, MAX_TOOL_FILE).await.map_err(err)?;
                Ok(String::from_utf8_lossy(&bytes).into_owned())
            }
            SessionTool::WriteFile => {
                let (path, content) = (arg("path")?, arg("content")?);
                if content.len() as u64 > MAX_TOOL_FILE {
                    return Err(format!("the content is over {MAX_TOOL_FILE} bytes"));
                }
                session.write_file(path, content.as_bytes()).await.map_err(err)?;
                Ok(format!("wrote {} bytes to {path}", content.len()))
            }
            SessionTool::Edit => {
                let (path, old, new) = (arg("path")?, arg("old_string")?, arg("new_string")?);
                let bytes = session.read_file(path, MAX_TOOL_FILE).await.map_err(err)?;
                let text =
                    String::from_utf8(bytes).map_err(|_| format!("{path} is not UTF-8 text"))?;
                match text.matches(old).count() {
                    0 => return Err(format!("old_string does not occur in {path}")),
                    1 => {}
                    n => {
                        return Err(format!(
                            "old_string occurs {n} times in {path}; include more context to make it unique"
                        ));
                    }
                }
                session
                    .write_file(path, text.replacen(old, new, 1).as_bytes())
                    .await
                    .map_err(err)?;
                Ok(format!("edited {path}"))
            }
        }
    }
}

/// A tool a package declares (`[[tool]]`): a program run in the sandbox with the arguments as
/// JSON on stdin; what it prints is the result, and a failing exit shows its stderr and code.
/// In a rollout holding a session it runs there (it sees and may change the session's files);
/// otherwise it runs alone through the code runner.
#[derive(Debug, Clone)]
pub struct ProgramTool {
    /// Name, description and parameters.
    pub spec: ToolSpec,
    /// The program's language (Python or Bash).
    pub language: Language,
    /// The program's text.
    pub code: String,
    /// Limits of one run.
    pub limits: Limits,
}

/// Largest package tool program (it is passed on a command line in sessions).
pub const MAX_TOOL_PROGRAM: usize = 100 << 10;

impl ProgramTool {
    /// The shell command that runs the program in a session.
    fn command(&self) -> String {
        let quoted = format!("'{}'", self.code.replace('\'', "'\\''"));
        match self.language {
            Language::Bash => format!("bash -c {quoted} tool"),
            _ => format!("python3 -c {quoted}"),
        }
    }
}

#[async_trait]
impl Tool for ProgramTool {
    fn spec(&self) -> ToolSpec {
        self.spec.clone()
    }

    async fn call(
        &self,
        arguments: &serde_json::Map<String, Value>,
        ctx: &ToolContext<'_>,
    ) -> Result<String, String> {
        let stdin = Value::Object(arguments.clone()).to_string();
        let limits = ctx.clamp(self.limits);
        let result = match ctx.session {
            Some(session) => {
                session.exec(&self.command(), &stdin, limits).await.map_err(|e| e.to_string())?
            }
            None => {
                let runner =
                    ctx.services.code_runner.as_ref().ok_or("no code runner is configured")?;
                let request =
                    RunRequest { language: self.language, code: self.code.clone(), stdin, limits };
                runner.run(request).await.map_err(|e| e.to_string())?
            }
        };
        if result.status == RunStatus::Ok { Ok(result.stdout) } else { Err(shown(result)) }
    }
}

/// A bounded arithmetic evaluator for the calculator tool.
pub mod calc {
    /// Longest expression accepted.
    pub const MAX_LEN: usize = 1_000;
    const MAX_DEPTH: usize = 64;

    /// Evaluates `expr`; the error says what is wrong and where.
    ///
    /// Grammar: `sum := product (('+'|'-') product)*`, `product := unary (('*'|'/') unary)*`,
    /// `unary := ('-'|'+') unary | power`, `power := atom ('^' unary)?`, so `-2^2 = -4` and
    /// `2^3^2 = 2^9`.
    pub fn evaluate(expr: &str) -> Result<f64, String> {
        if expr.len() > MAX_LEN {
            return Err(format!("expression longer than {MAX_LEN} characters"));
        }
        let mut p = Calc { chars: expr.chars().collect(), pos: 0, depth: 0 };
        let value = p.sum()?;
        if let Some(c) = p.peek() {
            return Err(format!("unexpected `{c}` at position {}", p.pos + 1));
        }
        if !value.is_finite() {
            return Err("result is not a finite number".into());
        }
        Ok(value)
    }

    /// Formats a result: integers without a decimal point, others with up to 12 decimals.
    pub fn format(value: f64) -> String {
        if value.fract() == 0.0 && value.abs() < 1e15 {
            format!("{}", value as i64)
        } else {
            let s = format!("{value:.12}");
            s.trim_end_matches('0').trim_end_matches('.').to_owned()
        }
    }

    struct Calc {
        chars: Vec<char>,
        pos: usize,
        depth: usize,
    }

    impl Calc {
        /// The next non-space character, without consuming it.
        fn peek(&mut self) -> Option<char> {
            while self.chars.get(self.pos).is_some_and(|c| c.is_whitespace()) {
                self.pos += 1;
            }
            self.chars.get(self.pos).copied()
        }

        fn nested<T>(
            &mut self,
            f: impl FnOnce(&mut Self) -> Result<T, String>,
        ) -> Result<T, String> {
            self.depth += 1;
            if self.depth > MAX_DEPTH {
                return Err(format!("expression nested deeper than {MAX_DEPTH}"));
            }
            let v = f(self);
            self.depth -= 1;
            v
        }

        fn sum(&mut self) -> Result<f64, String> {
            let mut value = self.product()?;
            while let Some(op @ ('+' | '-')) = self.peek() {
                self.pos += 1;
                let rhs = self.product()?;
                value = if op == '+' { value + rhs } else { value - rhs };
            }
            Ok(value)
        }

        fn product(&mut self) -> Result<f64, String> {
            let mut value = self.unary()?;
            while let Some(op @ ('*' | '/' | '×' | '÷')) = self.peek() {
                self.pos += 1;
                let rhs = self.unary()?;
                if matches!(op, '/' | '÷') {
                    if rhs == 0.0 {
                        return Err("division by zero".into());
                    }
                    value /= rhs;
                } else {
                    value *= rhs;
                }
            }
            Ok(value)
        }

        fn unary(&mut self) -> Result<f64, String> {
            match self.peek() {
                Some('-') => {
                    self.pos += 1;
                    self.nested(|p| p.unary().map(|v| -v))
                }
                Some('+') => {
                    self.pos += 1;
                    self.nested(Self::unary)
                }
                _ => self.power(),
            }
        }

        fn power(&mut self) -> Result<f64, String> {
            let base = self.atom()?;
            if self.peek() == Some('^') {
                self.pos += 1;
                let exponent = self.nested(Self::unary)?;
                return Ok(base.powf(exponent));
            }
            Ok(base)
        }

        fn atom(&mut self) -> Result<f64, String> {
            match self.peek() {
                Some('(') => {
                    self.pos += 1;
                    let v = self.nested(Self::sum)?;
                    if self.peek() != Some(')') {
                        return Err(format!("missing `)` at position {}", self.pos + 1));
                    }
                    self.pos += 1;
                    Ok(v)
                }
                Some(c) if c.is_ascii_digit() || c == '.' => {
                    let start = self.pos;
                    while self
                        .chars
                        .get(self.pos)
                        .is_some_and(|c| c.is_ascii_digit() || *c == '.' || *c == ',')
                    {
                        self.pos += 1;
                    }
                    let text: String =
                        self.chars[start..self.pos].iter().filter(|&&c| c != ',').collect();
                    text.parse().map_err(|_| format!("bad number `{text}`"))
                }
                Some(c) => Err(format!("unexpected `{c}` at position {}", self.pos + 1)),
                None => Err("expression ends too early".into()),
            }
        }
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        #[test]
        fn arithmetic_table() {
            let cases = [
                ("1 + 2 * 3", Ok(7.0)),
                ("(1 + 2) * 3", Ok(9.0)),
                ("2^3^2", Ok(512.0)),
                ("-2^2", Ok(-4.0)),
                ("2^-1", Ok(0.5)),
                ("10 / 4", Ok(2.5)),
                ("1,234 * 2", Ok(2468.0)),
                ("1 / 0", Err("division by zero")),
                ("2 +", Err("ends too early")),
                ("(1", Err("missing `)`")),
                ("1 2", Err("unexpected `2`")),
                ("x", Err("unexpected `x`")),
                ("10^400", Err("not a finite")),
            ];
            for (input, want) in cases {
                match (evaluate(input), want) {
                    (Ok(v), Ok(w)) => assert_eq!(v, w, "{input}"),
                    (Err(e), Err(w)) => assert!(e.contains(w), "{input}: {e}"),
                    (got, _) => panic!("{input}: {got:?}"),
                }
            }
            let deep = format!("{}1{}", "(".repeat(300), ")".repeat(300));
            assert!(evaluate(&"-".repeat(900)).is_err());
            assert!(evaluate(&deep).expect_err("deep").contains("deeper"));
            assert_eq!(format(2.5), "2.5");
            assert_eq!(format(7.0), "7");
            assert_eq!(format(1.0 / 3.0), "0.333333333333");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn output_is_cut_at_a_character_boundary_with_a_note() {
        assert_eq!(cap_output("short".into(), 10), "short");
        let cut = cap_output("ééééé".into(), 5); // 10 bytes; byte 5 is inside the third é
        assert_eq!(cut, "éé\n[output truncated: 4 of 10 bytes shown]");
    }

    #[test]
    fn seed_paths_come_from_the_row_and_cannot_climb_out() {
        let mut example = Example {
            example_id: 7,
            prompt: Vec::new(),
            answer: String::new(),
            info: serde_json::Map::new(),
            task: "swe".into(),
        };
        example.info.insert("repo".into(), json!("calc"));
        assert_eq!(seed_path("tasks/{repo}", &example).unwrap(), "tasks/calc");
        assert_eq!(seed_path("{task}/{example_id}.tar.gz", &example).unwrap(), "swe/7.tar.gz");
        assert!(seed_path("tasks/{missing}", &example).unwrap_err().contains("`missing`"));
        for bad in ["..", "../x", "a/b", ""] {
            example.info.insert("repo".into(), json!(bad));
            assert!(seed_path("tasks/{repo}", &example).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn archives_with_links_or_escaping_paths_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let write = |name: &str, build: &dyn Fn(&mut tar::Builder<std::fs::File>)| {
            let path = dir.path().join(name);
            let mut b = tar::Builder::new(std::fs::File::create(&path).unwrap());
            build(&mut b);
            b.finish().unwrap();
            path
        };
        let file = |b: &mut tar::Builder<std::fs::File>, name: &str, data: &[u8]| {
            let mut h = tar::Header::new_gnu();
            h.set_size(data.len() as u64);
            h.set_mode(0o644);
            h.set_entry_type(tar::EntryType::Regular);
            // Bypass set_path's own checks to write a hostile name.
            h.as_old_mut().name[..name.len()].copy_from_slice(name.as_bytes());
            h.set_cksum();
            b.append(&h, data).unwrap();
        };
        let ok = write("ok.tar", &|b| file(b, "src/a.py", b"x = 1\n"));
        assert_eq!(archive_files(&ok).unwrap(), vec![("src/a.py".to_owned(), b"x = 1\n".to_vec())]);
        let climb = write("climb.tar", &|b| file(b, "../evil", b"x"));
        assert!(archive_files(&climb).unwrap_err().contains("not a relative path"));
        let link = write("link.tar", &|b| {
            let mut h = tar::Header::new_gnu();
            h.set_entry_type(tar::EntryType::Symlink);
            h.set_size(0);
            b.append_link(&mut h, "l", "/etc/passwd").unwrap();
        });
        assert!(archive_files(&link).unwrap_err().contains("not a regular file"));
    }
}
