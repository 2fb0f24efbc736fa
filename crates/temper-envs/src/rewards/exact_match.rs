//! `exact_match`: 1 when the parsed answer equals the reference answer after whitespace
//! normalisation (and case folding with `fold_case = true`), else 0. A completion with no
//! parsable answer scores 0.

use async_trait::async_trait;
use serde::Deserialize;

use crate::rubric::{RewardError, RewardFunction, RewardInput, Services};

/// Parameters: `fold_case` (default false).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExactMatch {
    /// Compare case-insensitively.
    #[serde(default)]
    pub fold_case: bool,
}

#[async_trait]
impl RewardFunction for ExactMatch {
    async fn score(&self, input: &RewardInput<'_>, _: &Services) -> Result<f64, RewardError> {
        let Some(answer) = input.parsed_answer() else { return Ok(0.0) };
        let equal =
            temper_verify::text::exact_match(&answer, &input.example.answer, self.fold_case);
        Ok(f64::from(u8::from(equal)))
    }
}
