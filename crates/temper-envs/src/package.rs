//! Environment packages: a folder with `environment.toml` at its root.
//!
//! ```toml
//! [environment]
//! name = "my-env"               # ^[a-z0-9][a-z0-9-]{1,63}$
//! version = "0.1.0"             # semver
//! description = "..."
//!
//! [dataset]
//! train = "data/train.jsonl"    # .jsonl or .parquet, relative to the folder
//! eval = "data/eval.jsonl"      # optional; else eval_fraction of train is held out
//! # generator = "reverse-text"  # or a built-in environment's generator instead of files
//! # options = { kinds = ["sudoku"], difficulty = 3 }  # the generator's options (`logic` has some)
//! # layout = "gpqa"             # the files' column layout: gpqa, aime, mmlu_pro, livecodebench,
//! #                             # hle (see `layout`; default: temper's own)
//! # options = { from = "2024-08-01", to = "2025-05-01" }  # a layout's options
//! # seed = 0, train_size, eval_size, eval_fraction = 0.1
//!
//! [env]
//! kind = "single_turn"          # single_turn | multi_turn | tool | external
//! system_prompt = "..."
//! parser = "xml:answer"         # raw | boxed | code | xml:<field> | marker:<text>
//! max_turns = 1                 # multi_turn, tool and external
//! max_completion_tokens = 4096  # optional budget over all turns
//! timeout_s = 600               # optional wall-clock limit per rollout
//! tools = ["calculator"]        # tool: built-in tools (calculator, python, bash, read_file,
//!                               # write_file, edit; the last four work in a session; search
//!                               # and open read `corpus`)
//! session = true                # tool: each rollout holds a sandbox session (implied by the
//!                               # session tools), closed once the rollout is scored
//! session_files = "tasks/{task_id}"  # tool: its first files, a folder or .tar/.tar.gz named
//!                               # from the row ({field} of `info`, {task}, {example_id})
//! max_tool_output = 16384       # tool: bytes of a tool's output shown (the rest cut, with a note)
//! tool_timeout_s = 60           # tool: a call running longer is stopped
//! corpus = "data/corpus.jsonl"  # tool: documents for the `search` and `open` tools (see `corpus`)
//! respond = "env/respond.py"    # multi_turn: the script that answers each turn, run in the sandbox
//! command = ["python3", "env.py"]  # external: the process speaking the JSON-lines protocol
//!
//! [[tool]]                      # tool: a tool of this package
//! name = "lookup"
//! description = "Look a word up."
//! parameters = { type = "object", properties = { word = { type = "string" } }, required = ["word"] }
//! program = "tools/lookup.py"   # run in the sandbox (in the rollout's session when it holds
//!                               # one): arguments as JSON on stdin, stdout is the result
//! # method = "lookup"           # kind external instead: the process's `tool` method answers
//! timeout_s = 10                # per run (default 30)
//!
//! [[rubric]]
//! reward = "exact_match"        # a built-in reward function (see `rewards`)
//! weight = 1.0
//! ```
//!
//! A tool's arguments are checked against its `parameters` (a JSON schema) before it runs; a
//! call that does not match is answered with the schema's complaints, and the rollout goes on.
//!
//! A `multi_turn` package's `respond` script reads `{"example", "completion", "turn"}` as JSON on
//! stdin and prints `{"messages": [...], "done": bool}` (or `{"message": "text", "done": bool}`);
//! it runs through the code runner, so untrusted environment logic stays in the sandbox. An
//! `external` package's rubric defaults to the process's own `score`; name it explicitly as
//! `reward = "external"` to combine it with others.
//!
//! The content hash ([`content_hash`]) is shared by every tool that hashes a package.

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use serde::Deserialize;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use temper_protocol::{Language, Limits, Message, RunRequest, RunStatus, ToolSpec};

use crate::corpus::{CORPUS_TOOLS, Corpus, corpus_tool};
use crate::external::{External, ExternalProcess, ExternalScore, MethodTool};
use crate::layout::{Layout, LayoutOptions};
use crate::rewards::{self, RewardSpec, SpecSource};
use crate::rollout::{Interaction, RolloutState, SingleTurn, Step};
use crate::rubric::{RewardFn, RubricEntry, Services};
use crate::tools::{
    BUILTIN_TOOLS, MAX_TOOL_PROGRAM, ProgramTool, SessionSeed, Tool, ToolLimits, ToolUse,
    builtin_tool,
};
use crate::{
    DataSource, EnvError, EnvInfo, Environment, LoadOptions, Parser, Rubric, TurnLimits, registry,
};

/// The manifest file's name.
pub const MANIFEST: &str = "environment.toml";
/// Folders and files that are never part of a package.
pub const IGNORED: &[&str] = &[".git", "__pycache__", ".temper", ".DS_Store", ".venv"];

/// `environment.toml`, as written.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Manifest {
    /// Identity.
    pub environment: ManifestEnvironment,
    /// Data.
    #[serde(default)]
    pub dataset: Option<ManifestDataset>,
    /// Interaction.
    #[serde(default)]
    pub env: ManifestEnv,
    /// Reward functions.
    #[serde(default)]
    pub rubric: Vec<RewardSpec>,
    /// The package's own tools (kind `tool`).
    #[serde(default)]
    pub tool: Vec<ManifestTool>,
}

/// `[[tool]]`: a tool the package declares.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ManifestTool {
    /// The name the model calls it by.
    pub name: String,
    /// What it does, for the model.
    #[serde(default)]
    pub description: String,
    /// JSON schema of its arguments (an object).
    #[serde(default)]
    pub parameters: Option<toml::Table>,
    /// The program that answers a call, inside the package (`.py` or `.sh`).
    #[serde(default)]
    pub program: Option<String>,
    /// Kind `external`: the process answers calls (`tool` requests) instead of a program.
    #[serde(default)]
    pub method: Option<String>,
    /// Seconds one run may take (default 30).
    #[serde(default)]
    pub timeout_s: Option<f64>,
    /// Memory of one run in MiB (default 512).
    #[serde(default)]
    pub memory_mb: Option<u64>,
}

/// `[environment]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ManifestEnvironment {
    /// Package name.
    pub name: String,
    /// Semantic version.
    pub version: String,
    /// One line on what it is.
    #[serde(default)]
    pub description: String,
    /// SPDX license.
    #[serde(default)]
    pub license: Option<String>,
    /// Search tags.
    #[serde(default)]
    pub tags: Vec<String>,
}

/// `[dataset]`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ManifestDataset {
    /// Train file.
    pub train: Option<String>,
    /// Eval file.
    pub eval: Option<String>,
    /// A built-in environment whose generator makes the data.
    pub generator: Option<String>,
    /// The generator's options (`logic`: kinds and difficulty), or the layout's
    /// (`livecodebench`: `from`, `to`; `hle`: `with_images`).
    #[serde(default)]
    pub options: Option<toml::Table>,
    /// Seed of the generator or of the held-out split.
    pub seed: Option<u64>,
    /// Generated train examples.
    pub train_size: Option<usize>,
    /// Generated eval examples.
    pub eval_size: Option<usize>,
    /// Fraction of the train file held out when there is no eval file.
    pub eval_fraction: Option<f64>,
    /// How the files' columns are laid out (`standard`, `gpqa`, `aime`, `mmlu_pro`,
    /// `livecodebench`, `hle`).
    #[serde(default)]
    pub layout: Option<Layout>,
}

/// `[env]`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ManifestEnv {
    /// `single_turn`, `multi_turn`, `tool` or `external`.
    pub kind: Option<String>,
    /// System prompt.
    pub system_prompt: Option<String>,
    /// Parser.
    pub parser: Option<String>,
    /// Turn limit.
    pub max_turns: Option<u32>,
    /// Completion-token budget.
    pub max_completion_tokens: Option<u64>,
    /// Wall-clock limit per rollout in seconds.
    pub timeout_s: Option<f64>,
    /// Built-in tools (kind `tool`).
    #[serde(default)]
    pub tools: Vec<String>,
    /// Each rollout holds a sandbox session (kind `tool`).
    #[serde(default)]
    pub session: bool,
    /// The session's first files: a path template inside the package (kind `tool`).
    pub session_files: Option<String>,
    /// Bytes of tool output shown to the model (kind `tool`).
    pub max_tool_output: Option<usize>,
    /// Seconds a tool call may run (kind `tool`).
    pub tool_timeout_s: Option<f64>,
    /// The documents the `search` and `open` tools read: a JSONL file in the package.
    pub corpus: Option<String>,
    /// Turn script (kind `multi_turn`).
    pub respond: Option<String>,
    /// Process command (kind `external`).
    #[serde(default)]
    pub command: Vec<String>,
}

/// Resolves a path written in `environment.toml` to a regular file inside the package: the path
/// must be relative, must not climb out (`..`), must not pass through an ignored folder (whose
/// files are not hashed) and must not pass through or end at a symbolic link.
pub fn resolve_file(dir: &Path, rel: &str) -> Result<PathBuf, String> {
    let full = resolve_path(dir, rel)?;
    if !full.is_file() {
        return Err(format!("{} is not a file", full.display()));
    }
    Ok(full)
}

/// [`resolve_file`] for a file or a folder.
pub fn resolve_path(dir: &Path, rel: &str) -> Result<PathBuf, String> {
    let path = Path::new(rel);
    let mut full = dir.to_owned();
    for component in path.components() {
        let std::path::Component::Normal(name) = component else {
            return Err(format!("`{rel}` must be a relative path inside the package"));
        };
        if IGNORED.iter().any(|i| name == *i) {
            return Err(format!(
                "`{rel}` is inside an ignored folder ({}), which is not part of the package",
                name.to_string_lossy()
            ));
        }
        full.push(name);
        match fs::symlink_metadata(&full) {
            Ok(meta) if meta.file_type().is_symlink() => {
                return Err(format!(
                    "`{rel}` goes through a symbolic link ({}), which packages may not hold",
                    full.display()
                ));
            }
            Ok(_) => {}
            Err(_) => return Err(format!("{} does not exist", full.display())),
        }
    }
    Ok(full)
}

/// Whether `name` is a valid package name.
pub fn valid_name(name: &str) -> bool {
    let b = name.as_bytes();
    (2..=64).contains(&b.len())
        && (b[0].is_ascii_lowercase() || b[0].is_ascii_digit())
        && b.iter().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
}

/// The files of a package, as (relative path with `/` separators, full path), sorted by relative
/// path. Refuses symbolic links and anything that is not a regular file or folder.
pub fn package_files(dir: &Path) -> Result<Vec<(String, PathBuf)>, EnvError> {
    fn walk(root: &Path, dir: &Path, out: &mut Vec<(String, PathBuf)>) -> Result<(), EnvError> {
        for entry in fs::read_dir(dir).map_err(|e| EnvError::io(dir, e))? {
            let entry = entry.map_err(|e| EnvError::io(dir, e))?;
            let path = entry.path();
            let name = entry.file_name();
            if IGNORED.iter().any(|i| name == *i) {
                continue;
            }
            let kind = entry.file_type().map_err(|e| EnvError::io(&path, e))?;
            if kind.is_dir() {
                walk(root, &path, out)?;
            } else if kind.is_file() {
                let rel = path.strip_prefix(root).unwrap_or(&path);
                let rel: Vec<String> = rel
                    .components()
                    .map(|c| c.as_os_str().to_string_lossy().into_owned())
                    .collect();
                out.push((rel.join("/"), path));
            } else {
                return Err(EnvError::Dataset {
                    path,
                    line: None,
                    message: "packages may hold only regular files and folders (no symbolic links or devices)".into(),
                });
            }
        }
        Ok(())
    }
    let mut files = Vec::new();
    walk(dir, dir, &mut files)?;
    files.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(files)
}

/// SHA-256 (hex) of a package: over its files sorted by relative path, each contributing its
/// path's UTF-8 bytes, a 0 byte, its length as 8 little-endian bytes, and its bytes.
pub fn content_hash(dir: &Path) -> Result<String, EnvError> {
    let mut h = ContentHasher::default();
    for (rel, full) in package_files(dir)? {
        let bytes = fs::read(&full).map_err(|e| EnvError::io(&full, e))?;
        h.add(&rel, &bytes);
    }
    Ok(h.finish())
}

/// The [`content_hash`] of files fed one by one, for code that reads them anyway (an archive
/// writer). Feed them sorted by relative path, as [`package_files`] lists them.
#[derive(Debug, Clone, Default)]
pub struct ContentHasher(Sha256);

impl ContentHasher {
    /// Adds the file `rel` (relative path with `/` separators) holding `bytes`.
    pub fn add(&mut self, rel: &str, bytes: &[u8]) {
        self.0.update(rel.as_bytes());
        self.0.update([0]);
        self.0.update((bytes.len() as u64).to_le_bytes());
        self.0.update(bytes);
    }

    /// The hex digest.
    pub fn finish(self) -> String {
        hex::encode(self.0.finalize())
    }
}

/// Reads and validates `dir/environment.toml`.
pub fn read_manifest(dir: &Path) -> Result<Manifest, EnvError> {
    let path = dir.join(MANIFEST);
    let text = fs::read_to_string(&path).map_err(|e| EnvError::io(&path, e))?;
    let manifest: Manifest = toml::from_str(&text)
        .map_err(|e| EnvError::Parse { path: path.clone(), message: e.to_string() })?;
    let env = &manifest.environment;
    if !valid_name(&env.name) {
        return Err(EnvError::config(
            &path,
            "environment.name",
            format!("`{}` must match ^[a-z0-9][a-z0-9-]{{1,63}}$", env.name),
        ));
    }
    if let Err(e) = semver::Version::parse(&env.version) {
        return Err(EnvError::config(
            &path,
            "environment.version",
            format!("`{}` is not a semantic version: {e}", env.version),
        ));
    }
    Ok(manifest)
}

/// The interaction of a `tool` package: its built-in and declared tools, limits and session.
fn tool_use(dir: &Path, file: &Path, manifest: &Manifest) -> Result<ToolUse, EnvError> {
    let err = |field: &str, message: String| EnvError::config(file, field, message);
    let env = &manifest.env;
    if env.tools.is_empty() && manifest.tool.is_empty() {
        return Err(err(
            "env.tools",
            "a tool environment needs at least one tool (built-in in env.tools, or [[tool]])"
                .into(),
        ));
    }
    let corpus = match &env.corpus {
        Some(rel) => {
            let path = resolve_file(dir, rel)
                .map_err(|m| err("env.corpus", format!("corpus file {m}")))?;
            Some(Arc::new(Corpus::load(&path).map_err(|m| err("env.corpus", m))?))
        }
        None => None,
    };
    let mut tools: Vec<Arc<dyn Tool>> = Vec::new();
    for name in &env.tools {
        if CORPUS_TOOLS.contains(&name.as_str()) {
            let corpus = corpus.as_ref().ok_or_else(|| {
                err("env.tools", format!("tool `{name}` reads a corpus: set `env.corpus`"))
            })?;
            tools.extend(corpus_tool(name, corpus));
            continue;
        }
        tools.push(builtin_tool(name).ok_or_else(|| {
            err(
                "env.tools",
                format!(
                    "unknown tool `{name}`; built-in tools: {}, {}",
                    BUILTIN_TOOLS.join(", "),
                    CORPUS_TOOLS.join(", ")
                ),
            )
        })?);
    }
    for (i, t) in manifest.tool.iter().enumerate() {
        let field = |k: &str| format!("tool[{i}].{k}");
        if t.method.is_some() {
            let why = "only an external environment answers by method; give a `program`";
            return Err(err(&field("method"), why.into()));
        }
        tools.push(Arc::new(program_tool(dir, t).map_err(|(k, m)| err(&field(k), m))?));
    }
    let mut limits = ToolLimits::default();
    if let Some(max) = env.max_tool_output {
        if max == 0 {
            return Err(err("env.max_tool_output", "must be at least 1 byte".into()));
        }
        limits.max_output_bytes = max;
    }
    if let Some(t) = env.tool_timeout_s {
        if !(t.is_finite() && t > 0.0) {
            return Err(err(
                "env.tool_timeout_s",
                format!("{t} is not a positive number of seconds"),
            ));
        }
        limits.call_timeout = Duration::from_secs_f64(t);
    }
    let mut interaction = ToolUse::new(tools).map_err(|m| err("tool", m))?.with_limits(limits);
    if env.session || env.session_files.is_some() {
        let seed = env
            .session_files
            .clone()
            .map(|template| SessionSeed { root: dir.to_owned(), template });
        interaction = interaction.with_session(seed);
    }
    Ok(interaction)
}

/// The name, description and parameters of a `[[tool]]` entry; the error names the key.
fn tool_spec(t: &ManifestTool) -> Result<ToolSpec, (&'static str, String)> {
    let name_ok = !t.name.is_empty()
        && t.name.len() <= 64
        && t.name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    if !name_ok {
        return Err(("name", format!("`{}` must match ^[a-zA-Z0-9_-]{{1,64}}$", t.name)));
    }
    if builtin_tool(&t.name).is_some() || CORPUS_TOOLS.contains(&t.name.as_str()) {
        return Err(("name", format!("`{}` is a built-in tool's name", t.name)));
    }
    let parameters = match &t.parameters {
        None => json!({"type": "object", "properties": {}}),
        Some(table) => serde_json::to_value(table).map_err(|e| ("parameters", e.to_string()))?,
    };
    if parameters.get("type").and_then(Value::as_str) != Some("object") {
        return Err(("parameters", "must be a JSON schema of type \"object\"".into()));
    }
    Ok(ToolSpec::function(&t.name, &t.description, parameters))
}

/// The `[[tool]]`s of an external package, answered by the process's `tool` method.
fn method_tools(
    file: &Path,
    manifest: &Manifest,
    process: &Arc<ExternalProcess>,
) -> Result<Option<ToolUse>, EnvError> {
    if manifest.tool.is_empty() {
        return Ok(None);
    }
    let mut tools: Vec<Arc<dyn Tool>> = Vec::new();
    for (i, t) in manifest.tool.iter().enumerate() {
        let field = |k: &str| format!("tool[{i}].{k}");
        let bad = |k: &str, m: String| EnvError::config(file, &field(k), m);
        if t.program.is_some() {
            return Err(bad(
                "program",
                "an external environment's tools are answered by its process: give `method`".into(),
            ));
        }
        let mut spec = tool_spec(t).map_err(|(k, m)| bad(k, m))?;
        match &t.method {
            Some(m) if m == &t.name => {}
            Some(m) => {
                return Err(bad("method", format!("`{m}` must be the tool's name, `{}`", t.name)));
            }
            None => return Err(bad("method", "is missing".into())),
        }
        spec.function.name.clone_from(&t.name);
        tools.push(Arc::new(MethodTool { spec, process: Arc::clone(process) }));
    }
    Ok(Some(ToolUse::new(tools).map_err(|m| EnvError::config(file, "tool", m))?))
}

/// A `[[tool]]` entry as a tool; the error names the key.
fn program_tool(dir: &Path, t: &ManifestTool) -> Result<ProgramTool, (&'static str, String)> {
    let spec = tool_spec(t)?;
    let program = t.program.as_deref().ok_or(("program", "is missing".to_owned()))?;
    let full = resolve_file(dir, program).map_err(|m| ("program", m))?;
    let language = match full.extension().and_then(|e| e.to_str()) {
        Some("py") => Language::Python,
        Some("sh") => Language::Bash,
        _ => return Err(("program", format!("`{program}` must be a .py or .sh file"))),
    };
    let code = fs::read_to_string(&full)
        .map_err(|e| ("program", format!("cannot read {}: {e}", full.display())))?;
    if code.len() > MAX_TOOL_PROGRAM {
        return Err((
            "program",
            format!("{} is larger than {MAX_TOOL_PROGRAM} bytes", full.display()),
        ));
    }
    let time_ms = match t.timeout_s {
        None => 30_000,
        Some(s) if s.is_finite() && s > 0.0 => (s * 1e3) as u64,
        Some(s) => return Err(("timeout_s", format!("{s} is not a positive number of seconds"))),
    };
    Ok(ProgramTool {
        spec,
        language,
        code,
        limits: Limits {
            time_limit_ms: Some(time_ms),
            memory_mb: Some(t.memory_mb.unwrap_or(512)),
            output_bytes: Some(1 << 20),
        },
    })
}

/// Loads the package in `dir`.
pub fn load_dir(dir: &Path, options: &LoadOptions) -> Result<Environment, EnvError> {
    let file = dir.join(MANIFEST);
    let manifest = read_manifest(dir)?;
    let err = |field: &str, message: String| EnvError::config(&file, field, message);
    let env = &manifest.env;
    let kind = env.kind.as_deref().unwrap_or("single_turn");
    let parser: Parser =
        env.parser.as_deref().unwrap_or("raw").parse().map_err(|e| err("env.parser", e))?;

    let max_turns = match (kind, env.max_turns) {
        (_, Some(0)) => return Err(err("env.max_turns", "must be at least 1".into())),
        ("single_turn", Some(n)) if n != 1 => {
            return Err(err(
                "env.max_turns",
                format!("is {n}, but a single_turn environment has exactly one turn"),
            ));
        }
        ("single_turn", _) => 1,
        (_, Some(n)) => n,
        (_, None) => 10,
    };
    let timeout = match env.timeout_s {
        Some(t) if !(t.is_finite() && t > 0.0) => {
            return Err(err("env.timeout_s", format!("{t} is not a positive number of seconds")));
        }
        t => t.map(Duration::from_secs_f64),
    };
    let limits =
        TurnLimits { max_turns, max_completion_tokens: env.max_completion_tokens, timeout };
    for (field, set, allowed) in [
        ("env.tools", !env.tools.is_empty(), kind == "tool"),
        ("env.session", env.session, kind == "tool"),
        ("env.session_files", env.session_files.is_some(), kind == "tool"),
        ("env.max_tool_output", env.max_tool_output.is_some(), kind == "tool"),
        ("env.tool_timeout_s", env.tool_timeout_s.is_some(), kind == "tool"),
        ("env.corpus", env.corpus.is_some(), kind == "tool"),
        ("tool", !manifest.tool.is_empty(), kind == "tool" || kind == "external"),
        ("env.respond", env.respond.is_some(), kind == "multi_turn"),
        ("env.command", !env.command.is_empty(), kind == "external"),
    ] {
        if set && !allowed {
            return Err(err(field, format!("does not apply to kind `{kind}`")));
        }
    }

    let mut external_process = None;
    let interaction: Arc<dyn Interaction> = match kind {
        "single_turn" => Arc::new(SingleTurn),
        "tool" => Arc::new(tool_use(dir, &file, &manifest)?),
        "multi_turn" => {
            let script = env.respond.as_deref().ok_or_else(|| {
                err("env.respond", "a multi_turn environment needs a `respond` script".into())
            })?;
            Arc::new(ScriptTurns::load(dir, script).map_err(|m| err("env.respond", m))?)
        }
        "external" => {
            if env.command.is_empty() {
                return Err(err("env.command", "an external environment needs a command".into()));
            }
            if !options.allow_external {
                return Err(err(
                    "env.command",
                    format!(
                        "an external environment runs `{}` on this machine without a sandbox; allow it explicitly \
                         (temper eval --allow-external-command, or allow_external = true in the run's [[env]] table)",
                        env.command.join(" ")
                    ),
                ));
            }
            let process = Arc::new(ExternalProcess::new(
                env.command.clone(),
                dir.to_owned(),
                Duration::from_secs(300),
            ));
            external_process = Some(Arc::clone(&process));
            let mut external = External::new(Arc::clone(&process));
            if let Some(tools) = method_tools(&file, &manifest, &process)? {
                external = external.with_tools(tools);
            }
            Arc::new(external)
        }
        other => {
            return Err(err(
                "env.kind",
                format!("unknown kind `{other}`: single_turn, multi_turn, tool or external"),
            ));
        }
    };

    let mut rubric = Rubric::new();
    for (index, spec) in manifest.rubric.iter().enumerate() {
        let source = SpecSource { file: &file, dir, index };
        if spec.reward == "external" {
            let process = external_process
                .as_ref()
                .ok_or_else(|| source.error("reward", "`external` needs kind = \"external\""))?;
            rubric.push(RubricEntry {
                name: spec.name.clone().unwrap_or_else(|| "external".into()),
                weight: spec.weight,
                func: RewardFn::Each(Arc::new(ExternalScore::new(Arc::clone(process)))),
            });
        } else {
            rubric.push(rewards::build(spec, source)?);
        }
    }
    if rubric.entries().is_empty() {
        match &external_process {
            Some(process) => {
                rubric = rubric.with("external", 1.0, ExternalScore::new(Arc::clone(process)))
            }
            None => return Err(err("rubric", "the environment has no [[rubric]] entries".into())),
        }
    }

    let data = data_source(dir, &file, manifest.dataset.as_ref(), options)?;
    let info = EnvInfo {
        name: manifest.environment.name.clone(),
        version: manifest.environment.version.clone(),
        description: manifest.environment.description.clone(),
        content_hash: content_hash(dir)?,
    };
    Ok(Environment {
        info,
        system_prompt: env.system_prompt.clone(),
        parser,
        data,
        interaction,
        rubric,
        limits,
    })
}

fn data_source(
    dir: &Path,
    file: &Path,
    dataset: Option<&ManifestDataset>,
    options: &LoadOptions,
) -> Result<DataSource, EnvError> {
    let err = |field: &str, message: String| EnvError::config(file, field, message);
    let d = dataset.ok_or_else(|| err("dataset", "the [dataset] table is missing".into()))?;
    let seed = d.seed.unwrap_or(options.seed);
    let resolve = |field: &str, rel: &str| -> Result<PathBuf, EnvError> {
        resolve_file(dir, rel).map_err(|m| err(field, format!("dataset file {m}")))
    };
    match (&d.generator, &d.train) {
        (Some(_), Some(_)) => {
            Err(err("dataset", "give either `generator` or `train`, not both".into()))
        }
        (None, None) => Err(err("dataset", "give a `train` file or a built-in `generator`".into())),
        (Some(_), None) if d.layout.is_some() => {
            Err(err("dataset.layout", "a layout describes files; a generator has none".into()))
        }
        (Some(name), None) => {
            let generator_options = d.options.clone().unwrap_or_default();
            let generate = registry::builtin_generator_with(name, &generator_options)
                .map_err(|m| err("dataset.options", m))?
                .ok_or_else(|| {
                    err(
                        "dataset.generator",
                        format!(
                            "unknown generator `{name}`; built-ins: {}",
                            registry::builtin_names().join(", ")
                        ),
                    )
                })?;
            Ok(DataSource::Generated {
                generate,
                seed,
                train_size: options.train_size.or(d.train_size).unwrap_or(10_000),
                eval_size: options.eval_size.or(d.eval_size).unwrap_or(200),
            })
        }
        (None, Some(train)) => {
            let layout = d.layout.unwrap_or_default();
            let layout_options: LayoutOptions = match &d.options {
                None => LayoutOptions::default(),
                Some(_) if layout == Layout::Standard => {
                    return Err(err(
                        "dataset.options",
                        "options belong to a `generator` or a `layout`".into(),
                    ));
                }
                Some(table) => {
                    table.clone().try_into().map_err(|e| err("dataset.options", format!("{e}")))?
                }
            };
            layout_options.check(layout).map_err(|m| err("dataset.options", m))?;
            let fraction = d.eval_fraction.unwrap_or(0.1);
            if !(0.0..1.0).contains(&fraction) {
                return Err(err("dataset.eval_fraction", format!("{fraction} is not in [0, 1)")));
            }
            Ok(DataSource::Files {
                train: resolve("dataset.train", train)?,
                eval: d.eval.as_deref().map(|e| resolve("dataset.eval", e)).transpose()?,
                eval_fraction: fraction,
                seed,
                layout,
                layout_options,
            })
        }
    }
}

/// The interaction of a `multi_turn` package: a script, run in the sandbox after each model
/// turn, that returns the environment's messages.
#[derive(Debug, Clone)]
pub struct ScriptTurns {
    path: String,
    code: String,
    language: Language,
}

impl ScriptTurns {
    fn load(dir: &Path, rel: &str) -> Result<Self, String> {
        let language = match Path::new(rel).extension().and_then(|e| e.to_str()) {
            Some("py") => Language::Python,
            Some("sh") => Language::Bash,
            _ => return Err(format!("`{rel}` must be a .py or .sh script")),
        };
        let full = resolve_file(dir, rel)?;
        let code = fs::read_to_string(&full)
            .map_err(|e| format!("cannot read {}: {e}", full.display()))?;
        Ok(Self { path: rel.to_owned(), code, language })
    }
}

#[async_trait]
impl Interaction for ScriptTurns {
    fn is_done(&self, _: &RolloutState<'_>) -> bool {
        false
    }

    async fn respond(
        &self,
        state: &mut RolloutState<'_>,
        services: &Services,
    ) -> Result<Step, EnvError> {
        let fail = |m: String| EnvError::Interaction(format!("{}: {m}", self.path));
        let runner = services
            .code_runner
            .as_ref()
            .ok_or_else(|| fail("no code runner is configured".into()))?;
        let stdin =
            json!({"example": state.example, "completion": state.completion, "turn": state.turns});
        let request = RunRequest {
            language: self.language,
            code: self.code.clone(),
            stdin: stdin.to_string(),
            limits: Limits {
                time_limit_ms: Some(10_000),
                memory_mb: Some(512),
                output_bytes: Some(1 << 20),
            },
        };
        let result = runner.run(request).await.map_err(|e| fail(e.to_string()))?;
        if result.status != RunStatus::Ok {
            return Err(fail(format!(
                "ended with {:?}: {}",
                result.status,
                result.stderr.chars().take(300).collect::<String>()
            )));
        }
        let out: Value = serde_json::from_str(result.stdout.trim())
            .map_err(|e| fail(format!("printed invalid JSON: {e}")))?;
        if out.get("done").and_then(Value::as_bool).unwrap_or(false) {
            return Ok(Step::Done);
        }
        let messages: Vec<Message> = match (out.get("messages"), out.get("message")) {
            (Some(m), _) => serde_json::from_value(m.clone())
                .map_err(|e| fail(format!("invalid `messages`: {e}")))?,
            (None, Some(Value::String(text))) => vec![Message::user(text.clone())],
            _ => return Err(fail("printed neither `messages` nor `message`".into())),
        };
        Ok(Step::Continue(messages))
    }
}
