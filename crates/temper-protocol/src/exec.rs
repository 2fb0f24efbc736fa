//! Running code: the request a reward function makes and the result a code runner returns.
//!
//! Contract: produced by reward functions and the `code` environment (through the `CodeRunner`
//! trait of `temper-verify`); consumed by code runners (the sandbox, or the unsandboxed local
//! runner in tests). [`RunResult`] is also the JSON that `temper sandbox run` prints and that the
//! sandbox's HTTP API returns. What must hold: `status` is `ok` exactly when the program exited
//! with code 0 inside every limit; `internal_error` means the runner failed, not the program.

use serde::{Deserialize, Serialize};

/// A language a code runner can run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Language {
    /// Python 3 (`python3`).
    Python,
    /// Bash.
    Bash,
    /// C, compiled with `gcc`.
    C,
    /// C++, compiled with `g++`.
    Cpp,
}

impl Language {
    /// Parses a language name as written in configs and on the command line.
    pub fn from_name(name: &str) -> Option<Self> {
        Some(match name.to_ascii_lowercase().as_str() {
            "python" | "python3" | "py" => Self::Python,
            "bash" | "sh" | "shell" => Self::Bash,
            "c" => Self::C,
            "cpp" | "c++" | "cxx" => Self::Cpp,
            _ => return None,
        })
    }
}

/// Resource limits of one run. Absent fields take the runner's defaults.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Limits {
    /// Wall-clock limit in milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time_limit_ms: Option<u64>,
    /// Memory limit in MiB.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_mb: Option<u64>,
    /// Most bytes kept of each output stream; more gives `output_limit`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_bytes: Option<u64>,
}

/// One program to run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunRequest {
    /// Language of `code`.
    pub language: Language,
    /// Source text of the program.
    pub code: String,
    /// Bytes given on standard input.
    #[serde(default)]
    pub stdin: String,
    /// Limits for this run.
    #[serde(default)]
    pub limits: Limits,
}

/// One stdin/stdout test case.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TestCase {
    /// Standard input given to the program.
    #[serde(default)]
    pub stdin: String,
    /// What the program must print (compared as [`TestCase::compare`] says).
    pub expected_stdout: String,
    /// How the output is compared with `expected_stdout`.
    #[serde(default, skip_serializing_if = "Compare::is_lines")]
    pub compare: Compare,
}

impl TestCase {
    /// A test compared line by line.
    pub fn lines(stdin: impl Into<String>, expected_stdout: impl Into<String>) -> Self {
        Self {
            stdin: stdin.into(),
            expected_stdout: expected_stdout.into(),
            compare: Compare::Lines,
        }
    }
}

/// How a test's output is compared with what it expects.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Compare {
    /// Line by line, ignoring trailing whitespace on each line and trailing empty lines.
    #[default]
    Lines,
    /// As values: two JSON documents compare structurally, anything else token by token
    /// (split at whitespace); numbers are equal within 1e-6, absolute or relative (`0.1 + 0.2`
    /// prints `0.30000000000000004`, which answers `0.3`; `2` answers `2.0`).
    Values,
}

impl Compare {
    /// Whether this is the default, line-by-line comparison.
    pub fn is_lines(&self) -> bool {
        *self == Self::Lines
    }
}

/// How a run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RunStatus {
    /// Exit code 0 within every limit.
    Ok,
    /// Non-zero exit code, or killed by a signal.
    RuntimeError,
    /// The wall-clock or CPU-time limit was reached.
    Timeout,
    /// The memory limit was reached.
    MemoryLimit,
    /// An output stream went over its byte limit.
    OutputLimit,
    /// Compilation failed; `stderr` holds the compiler's output.
    CompileError,
    /// The runner itself failed; the program's behaviour is unknown.
    InternalError,
}

/// The result of one run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunResult {
    /// How it ended.
    pub status: RunStatus,
    /// Exit code, when the program exited.
    pub exit_code: Option<i32>,
    /// Signal number, when the program was killed by one.
    pub signal: Option<i32>,
    /// Standard output, cut at the output limit.
    pub stdout: String,
    /// Standard error, cut at the output limit (or the compiler's output, or the runner's reason).
    pub stderr: String,
    /// Wall-clock time of the run in milliseconds.
    pub wall_ms: f64,
    /// CPU time of the run in milliseconds, when known.
    pub cpu_ms: f64,
    /// Peak resident memory in KiB, when known.
    pub max_rss_kb: u64,
}

impl RunResult {
    /// A result that says the runner failed, with its reason in `stderr`.
    pub fn internal_error(reason: impl Into<String>) -> Self {
        Self {
            status: RunStatus::InternalError,
            exit_code: None,
            signal: None,
            stdout: String::new(),
            stderr: reason.into(),
            wall_ms: 0.0,
            cpu_ms: 0.0,
            max_rss_kb: 0,
        }
    }
}

/// The body of the sandbox's `POST /v1/run`: a [`RunRequest`] with extra files.
///
/// Contract: written by `temper-client`'s `SandboxClient`, read by `temper sandbox serve`. What
/// must hold: every key of `files` is a relative path without `.` or `..` parts (the server
/// refuses others), written into the program's working folder before it starts.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SandboxRunRequest {
    /// Language of `code`.
    pub language: Language,
    /// Source text of the program.
    pub code: String,
    /// Extra files by relative path.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub files: std::collections::BTreeMap<String, String>,
    /// Bytes given on standard input.
    #[serde(default)]
    pub stdin: String,
    /// Limits for this run.
    #[serde(default)]
    pub limits: Limits,
}

impl From<RunRequest> for SandboxRunRequest {
    fn from(r: RunRequest) -> Self {
        Self {
            language: r.language,
            code: r.code,
            files: Default::default(),
            stdin: r.stdin,
            limits: r.limits,
        }
    }
}

impl SandboxRunRequest {
    /// The run and its extra files.
    pub fn into_parts(self) -> (RunRequest, std::collections::BTreeMap<String, String>) {
        let run = RunRequest {
            language: self.language,
            code: self.code,
            stdin: self.stdin,
            limits: self.limits,
        };
        (run, self.files)
    }
}

/// The body of the sandbox's `POST /v1/run_tests`: one program against stdin/stdout tests.
///
/// Contract: written by `SandboxClient::run_tests`, read by `temper sandbox serve`, which
/// answers [`TestsReply`]. What must hold: at most the server's test limit (1000) per request;
/// with `stop_on_failure`, the results end at the first failing test.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TestsRequest {
    /// Language of `code`.
    pub language: Language,
    /// Source text of the program.
    pub code: String,
    /// The tests, run in order.
    pub tests: Vec<TestCase>,
    /// Limits of each test's run.
    #[serde(default)]
    pub limits: Limits,
    /// Stop at the first failing test.
    #[serde(default)]
    pub stop_on_failure: bool,
}

/// The reply of `POST /v1/run_tests`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TestsReply {
    /// Tests passed.
    pub passed: usize,
    /// Tests in the request.
    pub total: usize,
    /// One per test run, in order.
    pub results: Vec<TestResult>,
}

/// One test's run and whether its output matched.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TestResult {
    /// The run ended `ok` and printed the expected output.
    pub passed: bool,
    /// The run.
    #[serde(flatten)]
    pub result: RunResult,
}
