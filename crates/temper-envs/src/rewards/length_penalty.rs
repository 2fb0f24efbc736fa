//! `length_penalty` (group): prefers shorter correct answers within a group, after the length
//! reward of Kimi k1.5 (Kimi Team, 2025, §2.3.3).
//!
//! With `len_i` the completion length (tokens when known, else characters) and `min`, `max` over
//! the group: `λ_i = 0.5 − (len_i − min) / (max − min)`; a correct rollout scores `λ_i`, an
//! incorrect one `min(0, λ_i)`; when every length is equal all score 0. A rollout is correct when
//! its reward from the per-rollout functions is at least `correct_threshold` (default 0.5).

use async_trait::async_trait;
use serde::Deserialize;

use crate::rubric::{GroupRewardFunction, RewardError, RewardInput, Services};

/// Parameters: `correct_threshold` (default 0.5).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LengthPenalty {
    /// Per-rollout reward at or above which a rollout counts as correct.
    #[serde(default = "half")]
    pub correct_threshold: f64,
}

fn half() -> f64 {
    0.5
}

impl Default for LengthPenalty {
    fn default() -> Self {
        Self { correct_threshold: half() }
    }
}

#[async_trait]
impl GroupRewardFunction for LengthPenalty {
    async fn score_group(
        &self,
        inputs: &[RewardInput<'_>],
        partial: &[f64],
        _: &Services,
    ) -> Result<Vec<f64>, RewardError> {
        let lengths: Vec<f64> = inputs.iter().map(RewardInput::completion_length).collect();
        let min = lengths.iter().copied().fold(f64::INFINITY, f64::min);
        let max = lengths.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        if max <= min {
            return Ok(vec![0.0; inputs.len()]);
        }
        Ok(lengths
            .iter()
            .zip(partial)
            .map(|(len, reward)| {
                let lambda = 0.5 - (len - min) / (max - min);
                if *reward >= self.correct_threshold { lambda } else { lambda.min(0.0) }
            })
            .collect())
    }
}
