//! Code tests, through the [`CodeRunner`] trait.
//!
//! This module never runs code itself: it asks a `CodeRunner` to, and compares what came back.
//! The sandbox crate provides the real runner; tests use fakes or the unsandboxed local runner.
//!
//! Tests are stdin/stdout programs compared line by line ([`outputs_match`]) or as values
//! ([`values_match`], numbers within [`FLOAT_TOLERANCE`]). Call-based tests (LeetCode-style
//! `func_name` problems) are stdin/stdout tests of a program [`call_harness`] writes around the
//! solution: the arguments go in as JSON lines and the return value comes out as JSON.

use async_trait::async_trait;
use serde_json::Value;
use temper_protocol::{
    Compare, Language, RunRequest, RunResult, RunStatus, TestCase, TestsRequest,
};

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
    /// Passed means status `ok` and the output matches: [`outputs_match`] or, for
    /// [`Compare::Values`], [`values_match`].
    pub fn judge(test: &TestCase, result: RunResult) -> Self {
        let matches = match test.compare {
            Compare::Lines => outputs_match(&test.expected_stdout, &result.stdout),
            Compare::Values => values_match(&test.expected_stdout, &result.stdout),
        };
        let passed = result.status == RunStatus::Ok && matches;
        Self { passed, result }
    }
}

/// Relative (or, near zero, absolute) tolerance of [`values_match`].
pub const FLOAT_TOLERANCE: f64 = 1e-6;

/// Compares output as values: two JSON documents structurally (`[0, 1]` is `[0,1]`, `2` is
/// `2.0`, object keys in any order), anything else token by token; numbers are equal within
/// [`FLOAT_TOLERANCE`].
pub fn values_match(expected: &str, actual: &str) -> bool {
    if let (Ok(e), Ok(a)) = (
        serde_json::from_str::<Value>(expected.trim()),
        serde_json::from_str::<Value>(actual.trim()),
    ) {
        return json_equal(&e, &a, 0);
    }
    let (e, a): (Vec<&str>, Vec<&str>) =
        (expected.split_whitespace().collect(), actual.split_whitespace().collect());
    e.len() == a.len() && e.iter().zip(&a).all(|(x, y)| {
        x == y
            || matches!((x.parse::<f64>(), y.parse::<f64>()), (Ok(p), Ok(q)) if numbers_close(p, q))
    })
}

fn numbers_close(a: f64, b: f64) -> bool {
    a == b
        || (a.is_finite()
            && b.is_finite()
            && (a - b).abs() <= FLOAT_TOLERANCE * a.abs().max(b.abs()).max(1.0))
}

/// Structural equality with tolerant numbers, bounded in depth (serde_json already stops at 128).
fn json_equal(e: &Value, a: &Value, depth: usize) -> bool {
    if depth > 256 {
        return false;
    }
    match (e, a) {
        (Value::Number(x), Value::Number(y)) => match (x.as_f64(), y.as_f64()) {
            (Some(p), Some(q)) if x.is_f64() || y.is_f64() => numbers_close(p, q),
            _ => x == y,
        },
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(p, q)| json_equal(p, q, depth + 1))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len()
                && x.iter().all(|(k, v)| y.get(k).is_some_and(|w| json_equal(v, w, depth + 1)))
        }
        _ => e == a,
    }
}

/// Modules a call-based solution may use without importing them, as in the LeetCode-style
/// judges these problems come from (`List[int]` in a signature, `heapq`, `Counter`, `inf`).
const CALL_PRELUDE: &str = "from typing import *\nfrom collections import *\nfrom heapq import *\n\
from bisect import *\nfrom itertools import *\nfrom functools import *\nfrom math import *\n\
from builtins import *\nimport collections, heapq, bisect, itertools, functools, math, string, re, sys\n";

/// A Python program that runs `code` and then calls its function `func_name` (a method of a
/// `Solution` class, as in LeetCode-style problems, or a top-level function) with the arguments
/// on standard input, one JSON value per line, and prints the JSON of what it returns (tuples
/// and sets as lists). Prints inside the solution go to standard error, so they cannot forge a
/// result; the solution runs as a module (its `__main__` block does not run) with an empty
/// standard input. Judge its output with [`Compare::Values`].
pub fn call_harness(code: &str, func_name: &str) -> Result<String, RunnerError> {
    let valid = !func_name.is_empty()
        && func_name.len() <= 128
        && func_name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        && !func_name.starts_with(|c: char| c.is_ascii_digit());
    if !valid {
        return Err(RunnerError::Backend(format!("`{func_name}` is not a function name")));
    }
    Ok(format!(
        r#"import io as _io, json as _json, sys as _sys
_args = [_json.loads(_l) for _l in _sys.stdin.read().split("\n") if _l.strip()]
_sys.stdin = _io.StringIO("")
_ns = {{"__name__": "solution"}}
exec({prelude:?}, _ns)
_real_stdout = _sys.stdout
_sys.stdout = _sys.stderr
exec(compile(bytes.fromhex("{code}").decode("utf-8"), "solution.py", "exec"), _ns)
_cls = _ns.get("Solution")
if _cls is not None and hasattr(_cls, "{name}"):
    _f = getattr(_cls(), "{name}")
elif callable(_ns.get("{name}")):
    _f = _ns["{name}"]
else:
    _sys.stderr.write("the program defines no function {name}\n")
    _sys.exit(3)
_result = _f(*_args)
_sys.stdout = _real_stdout
def _plain(v):
    if isinstance(v, (list, tuple, set, frozenset)):
        return [_plain(x) for x in v]
    if isinstance(v, dict):
        return {{str(k): _plain(x) for k, x in v.items()}}
    return v
print(_json.dumps(_plain(_result)))
"#,
        prelude = CALL_PRELUDE,
        code = hex::encode(code.as_bytes()),
        name = func_name,
    ))
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

    #[test]
    fn value_comparison() {
        let cases = [
            ("[0, 1]", "[0,1]\n", true),
            ("[0, 1]", "[1, 0]", false),
            ("0.3", "0.30000000000000004", true),
            ("0.3", "0.3001", false),
            ("2", "2.0", true),
            ("1000000", "1000000.5", true),
            ("1000000", "1000002", false),
            ("true", "true", true),
            ("true", "1", false),
            ("\"ab\"", "\"ab\"", true),
            ("\"ab\"", "\"ba\"", false),
            ("{\"a\": [1.5]}", "{\"a\":[1.5000000001]}", true),
            ("{\"a\": 1}", "{\"a\": 1, \"b\": 2}", false),
            ("1.5 2\n3", "1.5000000001 2 3", true),
            ("1.5 2 3", "1.5 2", false),
            ("yes", "no", false),
            ("null", "null", true),
            ("[[1, 2], [3]]", "[[1, 2], [3, 4]]", false),
        ];
        for (expected, actual, want) in cases {
            assert_eq!(values_match(expected, actual), want, "{expected:?} vs {actual:?}");
        }
    }

    #[test]
    fn call_harness_names_are_checked() {
        assert!(call_harness("", "twoSum").is_ok());
        for bad in ["", "1abc", "a b", "f()", "x\nimport os"] {
            assert!(call_harness("", bad).is_err(), "{bad:?}");
        }
    }

    #[tokio::test]
    async fn default_run_tests_stops_on_failure() {
        let tests =
            vec![TestCase::lines("a", "a"), TestCase::lines("b", "c"), TestCase::lines("d", "d")];
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
