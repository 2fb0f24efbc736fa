//! `code_tests`: runs the model's program against the example's stdin/stdout tests through the
//! code runner (the sandbox). With `mode = "all"` (default) the score is 1 only if every test
//! passes, as in the APPS/CodeContests style of code RL; with `mode = "fraction"` it is the
//! fraction of tests passed.
//!
//! The program is the parsed answer when the parser is `code`, otherwise the last fenced code
//! block of the last turn; no program scores 0. Tests come from `info.tests`: a list of
//! `{"stdin", "expected_stdout"}` objects (`input`/`output` are accepted too, as LiveCodeBench
//! writes them). Output is compared line by line, or as values with `compare = "values"`
//! (numbers within 1e-6).
//!
//! Call-based tests (LeetCode-style problems, LiveCodeBench's `"testtype": "functional"`): when
//! the example names a function (`info.func_name`, `info.fn_name`, or `func_name` inside
//! `info.metadata`), each test's input is the call's arguments, one JSON value per line, and its
//! output the JSON of the return value; the Python solution's `Solution().func_name` (or
//! top-level `func_name`) is called and its result compared as values.
//!
//! A missing test list or code runner, or a runner that fails (`internal_error`, a missing
//! compiler), is an error, not a 0.

use async_trait::async_trait;
use serde::Deserialize;
use serde_json::Value;
use temper_protocol::{Compare, Language, Limits, RunStatus, TestCase, TestsRequest};

use super::{RewardSpec, SpecSource, params};
use crate::rubric::{RewardError, RewardFunction, RewardInput, Services};
use crate::{EnvError, Parser};

/// The configured function.
#[derive(Debug, Clone)]
pub struct CodeTests {
    /// Language of the program.
    pub language: Language,
    /// Limits of each test run.
    pub limits: Limits,
    /// Score the fraction of tests passed instead of all-or-nothing.
    pub fraction: bool,
    /// How stdin/stdout tests' output is compared (call-based tests always compare values).
    pub compare: Compare,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Params {
    #[serde(default)]
    language: Option<String>,
    #[serde(default)]
    time_limit_ms: Option<u64>,
    #[serde(default)]
    memory_mb: Option<u64>,
    #[serde(default)]
    mode: Option<String>,
    #[serde(default)]
    compare: Option<String>,
}

impl Default for CodeTests {
    fn default() -> Self {
        Self {
            language: Language::Python,
            limits: Limits {
                time_limit_ms: Some(5_000),
                memory_mb: Some(256),
                output_bytes: Some(1 << 20),
            },
            fraction: false,
            compare: Compare::Lines,
        }
    }
}

impl CodeTests {
    pub(crate) fn from_spec(spec: &RewardSpec, source: SpecSource<'_>) -> Result<Self, EnvError> {
        let p: Params = params(spec, source)?;
        let mut f = Self::default();
        if let Some(name) = p.language {
            f.language = Language::from_name(&name).ok_or_else(|| {
                source
                    .error("language", format!("unknown language `{name}`: python, bash, c or cpp"))
            })?;
        }
        f.limits.time_limit_ms = p.time_limit_ms.or(f.limits.time_limit_ms);
        f.limits.memory_mb = p.memory_mb.or(f.limits.memory_mb);
        f.fraction = match p.mode.as_deref() {
            None | Some("all") => false,
            Some("fraction") => true,
            Some(other) => {
                return Err(source.error("mode", format!("`{other}` is not `all` or `fraction`")));
            }
        };
        f.compare = match p.compare.as_deref() {
            None | Some("lines") => Compare::Lines,
            Some("values") => Compare::Values,
            Some(other) => {
                return Err(
                    source.error("compare", format!("`{other}` is not `lines` or `values`"))
                );
            }
        };
        Ok(f)
    }
}

/// The tests of an example, from `info.tests` (a list, or a string holding its JSON).
pub fn tests_of(info: &serde_json::Map<String, Value>) -> Result<Vec<TestCase>, String> {
    let tests = info.get("tests").ok_or("the example has no `info.tests`")?;
    let tests = match tests {
        Value::String(s) => {
            serde_json::from_str(s).map_err(|e| format!("`info.tests` is not valid JSON: {e}"))?
        }
        other => other.clone(),
    };
    let Value::Array(items) = tests else { return Err("`info.tests` must be a list".into()) };
    items
        .into_iter()
        .enumerate()
        .map(|(i, item)| {
            let field = |names: [&str; 2]| {
                names.iter().find_map(|n| item.get(n)).and_then(Value::as_str).map(str::to_owned)
            };
            let expected = field(["expected_stdout", "output"])
                .ok_or_else(|| format!("`info.tests[{i}]` has no string `expected_stdout`"))?;
            Ok(TestCase::lines(field(["stdin", "input"]).unwrap_or_default(), expected))
        })
        .collect()
}

/// The function a call-based example's tests call: `info.func_name`, `info.fn_name`, or
/// `func_name` in `info.metadata` (an object or a string holding its JSON, as LiveCodeBench
/// stores it). `None` for stdin/stdout examples.
pub fn func_name_of(info: &serde_json::Map<String, Value>) -> Option<String> {
    let direct = ["func_name", "fn_name"].iter().find_map(|k| info.get(*k)?.as_str());
    if let Some(name) = direct.filter(|n| !n.is_empty()) {
        return Some(name.to_owned());
    }
    let metadata = match info.get("metadata")? {
        Value::String(s) => serde_json::from_str::<Value>(s).ok()?,
        other => other.clone(),
    };
    ["func_name", "fn_name"]
        .iter()
        .find_map(|k| metadata.get(*k)?.as_str().map(str::to_owned))
        .filter(|n| !n.is_empty())
}

#[async_trait]
impl RewardFunction for CodeTests {
    async fn score(
        &self,
        input: &RewardInput<'_>,
        services: &Services,
    ) -> Result<f64, RewardError> {
        let tests = tests_of(&input.example.info).map_err(RewardError)?;
        if tests.is_empty() {
            return Err(RewardError("`info.tests` is empty".into()));
        }
        let runner = services
            .code_runner
            .as_ref()
            .ok_or_else(|| RewardError("no code runner is configured".into()))?;
        let code = match input.parser {
            Parser::Code => input.parsed_answer(),
            _ => Parser::Code.parse_answer(input.completion),
        };
        let Some(code) = code.filter(|c| !c.trim().is_empty()) else { return Ok(0.0) };
        let (code, compare) = match func_name_of(&input.example.info) {
            Some(name) => {
                if self.language != Language::Python {
                    return Err(RewardError(format!(
                        "call-based tests (`{name}`) need language = \"python\""
                    )));
                }
                let harness = temper_verify::code::call_harness(&code, &name)
                    .map_err(|e| RewardError(e.to_string()))?;
                (harness, Compare::Values)
            }
            None => (code, self.compare),
        };
        let tests = tests.into_iter().map(|t| TestCase { compare, ..t }).collect();
        let request = TestsRequest {
            language: self.language,
            code,
            tests,
            limits: self.limits,
            stop_on_failure: !self.fraction,
        };
        let outcomes = runner.run_tests(&request).await.map_err(|e| RewardError(e.to_string()))?;
        if let Some(failed) = outcomes.iter().find(|o| o.result.status == RunStatus::InternalError)
        {
            return Err(RewardError(format!("the code runner failed: {}", failed.result.stderr)));
        }
        let passed = outcomes.iter().filter(|o| o.passed).count();
        Ok(if self.fraction {
            passed as f64 / request.tests.len() as f64
        } else {
            f64::from(u8::from(passed == request.tests.len()))
        })
    }
}
