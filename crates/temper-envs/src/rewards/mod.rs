//! Built-in reward functions, one file each, registered in [`build`].
//!
//! In `environment.toml` a rubric entry names a function and its weight; other keys are the
//! function's parameters, checked strictly (an unknown key is an error):
//!
//! ```toml
//! [[rubric]]
//! reward = "regex"
//! weight = 0.5
//! pattern = "^\\d+$"
//! ```

use std::path::Path;
use std::sync::Arc;

use serde::Deserialize;
use serde::de::DeserializeOwned;

use crate::EnvError;
use crate::rubric::{RewardFn, RubricEntry};

mod code_tests;
mod exact_match;
mod format;
mod lcs_ratio;
mod length_penalty;
mod llm_judge;
mod logic;
mod math_equiv;
mod mcq_letter;
mod regex;
mod script;
mod session_command;

pub use code_tests::CodeTests;
pub use exact_match::ExactMatch;
pub use format::Format;
pub use lcs_ratio::LcsRatio;
pub use length_penalty::LengthPenalty;
pub use llm_judge::{EXAM_PROMPT, LlmJudge, verdict as judge_verdict};
pub use logic::{Logic, puzzle_of};
pub use math_equiv::MathEquiv;
pub use mcq_letter::McqLetter;
pub use regex::RegexMatch;
pub use script::Script;
pub use session_command::SessionCommand;

/// Names of the built-in reward functions.
pub const BUILTIN_REWARDS: &[&str] = &[
    "exact_match",
    "mcq_letter",
    "lcs_ratio",
    "regex",
    "format",
    "length_penalty",
    "code_tests",
    "llm_judge",
    "script",
    "math_equiv",
    "session_command",
    "logic",
];

/// One `[[rubric]]` entry of `environment.toml`.
#[derive(Debug, Clone, Deserialize)]
pub struct RewardSpec {
    /// Which function.
    pub reward: String,
    /// Its weight (default 1; 0 logs it as a metric only).
    #[serde(default = "one")]
    pub weight: f64,
    /// Name in `scores` (defaults to the function's name).
    #[serde(default)]
    pub name: Option<String>,
    /// The function's own parameters.
    #[serde(flatten)]
    pub params: toml::Table,
}

fn one() -> f64 {
    1.0
}

/// Where a rubric entry comes from, for error messages and relative paths.
#[derive(Debug, Clone, Copy)]
pub struct SpecSource<'a> {
    /// The file holding the entry.
    pub file: &'a Path,
    /// The package folder that relative paths are resolved against.
    pub dir: &'a Path,
    /// Index of the entry in the `rubric` array.
    pub index: usize,
}

impl SpecSource<'_> {
    /// A configuration error about `key` of this entry.
    pub fn error(&self, key: &str, message: impl Into<String>) -> EnvError {
        let field = if key.is_empty() {
            format!("rubric[{}]", self.index)
        } else {
            format!("rubric[{}].{key}", self.index)
        };
        EnvError::config(self.file, &field, message)
    }
}

/// Parses the function's parameters into `T`, naming the entry on error.
pub(crate) fn params<T: DeserializeOwned>(
    spec: &RewardSpec,
    source: SpecSource<'_>,
) -> Result<T, EnvError> {
    spec.params
        .clone()
        .try_into()
        .map_err(|e: toml::de::Error| source.error("", e.message().to_owned()))
}

/// Builds the rubric entry described by `spec`.
pub fn build(spec: &RewardSpec, source: SpecSource<'_>) -> Result<RubricEntry, EnvError> {
    if !spec.weight.is_finite() {
        return Err(source.error("weight", "must be a finite number"));
    }
    let func = match spec.reward.as_str() {
        "exact_match" => RewardFn::Each(Arc::new(params::<ExactMatch>(spec, source)?)),
        "mcq_letter" => RewardFn::Each(Arc::new(params::<McqLetter>(spec, source)?)),
        "lcs_ratio" => RewardFn::Each(Arc::new(params::<LcsRatio>(spec, source)?)),
        "regex" => RewardFn::Each(Arc::new(RegexMatch::from_spec(spec, source)?)),
        "format" => RewardFn::Each(Arc::new(params::<Format>(spec, source)?)),
        "length_penalty" => RewardFn::Group(Arc::new(params::<LengthPenalty>(spec, source)?)),
        "code_tests" => RewardFn::Each(Arc::new(CodeTests::from_spec(spec, source)?)),
        "llm_judge" => RewardFn::Each(Arc::new(LlmJudge::from_spec(spec, source)?)),
        "script" => RewardFn::Each(Arc::new(Script::from_spec(spec, source)?)),
        "math_equiv" => RewardFn::Each(Arc::new(params::<MathEquiv>(spec, source)?)),
        "session_command" => RewardFn::Each(Arc::new(SessionCommand::from_spec(spec, source)?)),
        "logic" => RewardFn::Each(Arc::new(params::<Logic>(spec, source)?)),
        other => {
            return Err(source.error(
                "reward",
                format!(
                    "unknown reward function `{other}`; built-in functions: {}",
                    BUILTIN_REWARDS.join(", ")
                ),
            ));
        }
    };
    Ok(RubricEntry {
        name: spec.name.clone().unwrap_or_else(|| spec.reward.clone()),
        weight: spec.weight,
        func,
    })
}
