//! `math_equiv`: 1 when the parsed answer states the same value as the reference, by
//! `temper_verify::math::equivalent`, else 0. No parsable answer scores 0.

use async_trait::async_trait;
use serde::Deserialize;

use crate::rubric::{RewardError, RewardFunction, RewardInput, Services};

/// No parameters.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MathEquiv {}

#[async_trait]
impl RewardFunction for MathEquiv {
    async fn score(&self, input: &RewardInput<'_>, _: &Services) -> Result<f64, RewardError> {
        let Some(answer) = input.parsed_answer() else { return Ok(0.0) };
        Ok(f64::from(u8::from(temper_verify::math::equivalent(&input.example.answer, &answer))))
    }
}
