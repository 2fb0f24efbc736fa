//! `lcs_ratio`: `2·LCS / (|answer| + |reference|)` between the parsed answer and the reference,
//! in `[0, 1]` (see `temper_verify::lcs`). No parsable answer scores 0. This is the reward of
//! the reverse-text task of Prime Intellect's `verifiers` examples, with the exact LCS.

use async_trait::async_trait;
use serde::Deserialize;

use crate::rubric::{RewardError, RewardFunction, RewardInput, Services};

/// No parameters.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LcsRatio {}

#[async_trait]
impl RewardFunction for LcsRatio {
    async fn score(&self, input: &RewardInput<'_>, _: &Services) -> Result<f64, RewardError> {
        Ok(input
            .parsed_answer()
            .map_or(0.0, |a| temper_verify::lcs::lcs_ratio(&a, &input.example.answer)))
    }
}
