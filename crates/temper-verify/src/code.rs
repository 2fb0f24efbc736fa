//! Code tests, through the [`CodeRunner`] trait.
//!
//! This module never runs code itself: it asks a `CodeRunner` to, and compares what came back.
//! The sandbox crate provides the real runner; tests use fakes or the unsandboxed local runner.

use async_trait::async_trait;
use temper_protocol::{Language, RunRequest, RunResult, RunStatus, TestCase, TestsRequest};

/// Why a runner could not run a program at all (as opposed to the program failing).
#[derive(Debug, thiserror::Error)]
pub enum RunnerError {
    /// The runner does not support this language on this machine.
    #[error("language {0:?} is not available to this code runner")]
    UnsupportedLanguage(Language),
    /// The runner's backend failed (sandbox daemon unreachable, pool exhausted, ...).
    #[error("code runner failed: {0}")]
    Backend(String),
}

/// Something that runs untrusted code and reports how it went.
///
/// Implementations must enforce the request's limits and must report a program's own failures
/// in [`RunResult::status`], keeping `Err` for failures of the runner itself.
#[async_trait]
pub trait CodeRunner: Send + Sync + std::fmt::Debug {
    /// Whether programs are isolated from the host. Only a sandbox may return `true`.
    fn is_sandboxed(&self) -> bool;

    /// Runs one program.
    async fn run(&self, request: RunRequest) -> Result<RunResult, RunnerError>;

    /// Runs one program against each test case, stopping at the first failure when
    /// `stop_on_failure` is set. Runners that can compile once should override this.
    async fn run_tests(&self, request: &TestsRequest) -> Result<Vec<TestOutcome>, RunnerError> {
        let mut outcomes = Vec::with_capacity(request.tests.len());
        for test in &request.tests {
            let run = RunRequest {
                language: request.language,
                code: request.code.clone(),
                stdin: test.stdin.clone(),
                limits: request.limits,
            };
            let result = self.run(run).await?;
            let outcome = TestOutcome::judge(test, result);
            let failed = !outcome.passed;
            outcomes.push(outcome);
            if failed && request.stop_on_failure {
                break;
            }
        }
        Ok(outcomes)
    }

    /// Opens a session: a shell and a working folder that persist across commands, for a
    /// rollout that works on files over several turns. Runners without sessions refuse.
    async fn open_session(&self) -> Result<Box<dyn CodeSession>, RunnerError> {
        Err(RunnerError::Backend("this code runner has no sessions".into()))
    }
}

/// A shell and a working folder that persist across commands (a sandbox slot kept for one
/// rollout). Paths are relative to the working folder and may not leave it.
///
/// A session holds processes and files until it is closed; dropping it without [`close`]
/// (a cancelled rollout) still ends it, in the background.
///
/// [`close`]: CodeSession::close
#[async_trait]
pub trait CodeSession: Send + Sync + std::fmt::Debug {
    /// Runs `bash -c command` in the working folder, feeding `stdin`, within `limits`.
    async fn exec(
        &self,
        command: &str,
        stdin: &str,
        limits: temper_protocol::Limits,
    ) -> Result<RunResult, RunnerError>;

    /// Writes `bytes` to `path`, making its folders.
    async fn write_file(&self, path: &str, bytes: &[u8]) -> Result<(), RunnerError>;

    /// Reads `path`; a file larger than `max` bytes is an error.
    async fn read_file(&self, path: &str, max: u64) -> Result<Vec<u8>, RunnerError>;

    /// Ends the session: its processes are killed and its files removed.
    async fn close(&self);
}

/// `Err` naming `path` unless [`session_path_ok`] holds.
pub fn check_session_path(path: &str) -> Result<(), RunnerError> {
    if session_path_ok(path) {
        Ok(())
    } else {
        Err(RunnerError::Backend(format!(
            "`{path}` must be a relative path without `.` or `..` parts"
        )))
    }
}

/// Whether `path` is a relative path inside a session's working folder: not empty, not
/// absolute, no `.`, `..` or empty parts, no NUL, at most 4096 bytes.
pub fn session_path_ok(path: &str) -> bool {
    !path.is_empty()
        && path.len() <= 4096
        && !path.starts_with('/')
        && path
            .split('/')
            .all(|part| !part.is_empty() && part != "." && part != ".." && !part.contains('\0'))
}

/// One test case's verdict.
#[derive(Debug, Clone, PartialEq)]
pub struct TestOutcome {
    /// Exit 0 and the expected output.
    pub passed: bool,
    /// What the runner reported.
    pub result: RunResult,
}

impl TestOutcome {
    /// Passed means status `ok` and [`outputs_match`].
    pub fn judge(test: &TestCase, result: RunResult) -> Self {
        let passed =
            result.status == RunStatus::Ok && outputs_match(&test.expected_stdout, &result.stdout);
        Self { passed, result }
    }
}

/// Compares program output line by line, ignoring trailing whitespace on each line and trailing
/// empty lines; `\r\n` equals `\n`.
pub fn outputs_match(expected: &str, actual: &str) -> bool {
    fn lines(s: &str) -> Vec<&str> {
        let mut v: Vec<&str> = s.lines().map(str::trim_end).collect();
        while v.last().is_some_and(|l| l.is_empty()) {
            v.pop();
        }
        v
    }
    lines(expected) == lines(actual)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug)]
    struct Echo;

    #[async_trait]
    impl CodeRunner for Echo {
        fn is_sandboxed(&self) -> bool {
            false
        }
        async fn run(&self, request: RunRequest) -> Result<RunResult, RunnerError> {
            // "Runs" a program that prints its stdin back, or fails when the code says so.
            let mut result = RunResult::internal_error("");
            result.status =
                if request.code == "fail" { RunStatus::RuntimeError } else { RunStatus::Ok };
            result.stdout = request.stdin;
            Ok(result)
        }
    }

    #[test]
    fn output_comparison() {
        assert!(outputs_match("1\n2\n", "1  \r\n2\n\n"));
        assert!(!outputs_match("1\n2", "1\n3"));
        assert!(!outputs_match(" 1", "1"));
    }

    #[tokio::test]
    async fn default_run_tests_stops_on_failure() {
        let tests = vec![
            TestCase { stdin: "a".into(), expected_stdout: "a".into() },
            TestCase { stdin: "b".into(), expected_stdout: "c".into() },
            TestCase { stdin: "d".into(), expected_stdout: "d".into() },
        ];
        let request = |code: &str, stop_on_failure| TestsRequest {
            language: Language::Python,
            code: code.into(),
            tests: tests.clone(),
            limits: Default::default(),
            stop_on_failure,
        };
        let all = Echo.run_tests(&request("x", false)).await;
        let passed: Vec<bool> = all.expect("run").iter().map(|o| o.passed).collect();
        assert_eq!(passed, [true, false, true]);
        let early = Echo.run_tests(&request("x", true)).await;
        assert_eq!(early.expect("run").len(), 2);
        let failing = Echo.run_tests(&request("fail", true)).await;
        assert!(!failing.expect("run")[0].passed);
    }
}
