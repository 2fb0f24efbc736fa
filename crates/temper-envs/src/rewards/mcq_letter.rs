//! `mcq_letter`: 1 when the option letter the model chose equals the reference letter, else 0.
//!
//! The number of options is the length of `info.options` when present (else `options`, default
//! 10, as in MMLU-Pro). Letter extraction follows `temper_verify::mcq::extract_letter`, applied to
//! the parsed answer, or to the whole last turn when nothing parses.

use async_trait::async_trait;
use serde::Deserialize;

use crate::parser::last_assistant;
use crate::rubric::{RewardError, RewardFunction, RewardInput, Services};

/// Parameters: `options` (default 10), used when the example has no `info.options`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct McqLetter {
    /// Number of options when the example does not list them.
    #[serde(default = "ten")]
    pub options: usize,
}

fn ten() -> usize {
    10
}

impl Default for McqLetter {
    fn default() -> Self {
        Self { options: ten() }
    }
}

#[async_trait]
impl RewardFunction for McqLetter {
    async fn score(&self, input: &RewardInput<'_>, _: &Services) -> Result<f64, RewardError> {
        let gold = input.example.answer.trim().to_ascii_uppercase();
        let n = input
            .example
            .info
            .get("options")
            .and_then(|o| o.as_array())
            .map_or(self.options, Vec::len);
        let text = input
            .parsed_answer()
            .or_else(|| last_assistant(input.completion).map(|m| m.content.clone()))
            .unwrap_or_default();
        let chosen = temper_verify::mcq::extract_letter(&text, n);
        Ok(f64::from(u8::from(chosen.is_some_and(|c| gold == c.to_string()))))
    }
}
