//! The rollout record: one conversation between a model and an environment, and its score.
//!
//! Contract: produced by `temper-envs` (the rollout loop and the rubric); consumed by `temper
//! eval` (one JSON line per rollout in `results.jsonl`), the orchestrator (advantages and packing)
//! and the trainer (through packed batches). What must hold:
//!
//! - `prompt` is what the model saw before its first turn; `completion` is everything after it,
//!   model turns and environment turns interleaved.
//! - When `tokens` is present, its four vectors obey [`TokenTrace::check`].
//! - `reward` is the rubric's weighted sum over the functions that succeeded; `scores` holds every
//!   function's value, including weight-0 metrics. When any reward function failed, `error` is set
//!   and names it: such a rollout must not be trained on and counts as failed in pass@k.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::{Message, SCHEMA_VERSION};

/// One rollout and its score.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Rollout {
    /// [`SCHEMA_VERSION`] of the producer.
    pub schema_version: u32,
    /// Name of the environment that produced it.
    pub env: String,
    /// The task label of the example (defaults to the environment name).
    pub task: String,
    /// Identifier of the dataset example; the rollouts of one group share it.
    pub example_id: u64,
    /// Index of this rollout within its group, `0..group_size`.
    pub rollout_index: u32,
    /// Messages shown to the model before its first turn.
    pub prompt: Vec<Message>,
    /// Messages after the prompt: model turns and environment responses.
    pub completion: Vec<Message>,
    /// The reference answer of the example (may be empty).
    #[serde(default)]
    pub answer: String,
    /// Token ids, loss mask and sampling logprobs, when the model server reported them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tokens: Option<TokenTrace>,
    /// Policy version that generated the first token, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub policy_version: Option<u64>,
    /// Weighted sum of the rubric's reward functions.
    pub reward: f64,
    /// Value of every reward function by name, weight-0 metrics included.
    #[serde(default)]
    pub scores: BTreeMap<String, f64>,
    /// Other numbers the environment recorded (turns, tokens, ...).
    #[serde(default)]
    pub metrics: BTreeMap<String, f64>,
    /// Why the rollout ended.
    pub stop_reason: StopReason,
    /// What went wrong, if anything did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<RolloutError>,
    /// Where the time went.
    pub timings: Timings,
}

impl Rollout {
    /// Whether this record can be read by this build.
    pub fn is_supported_version(&self) -> bool {
        self.schema_version <= SCHEMA_VERSION
    }
}

/// Why a rollout ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StopReason {
    /// The environment's own completion condition held (single-turn answer given, game over).
    Completed,
    /// The model's last turn was cut at `max_tokens` or the context length.
    Length,
    /// The environment's turn limit was reached.
    MaxTurns,
    /// The rollout's completion-token budget was spent.
    TokenBudget,
    /// The rollout's wall-clock limit passed.
    Timeout,
    /// The rollout could not continue; `error` says why.
    Error,
}

/// A failure recorded on a rollout instead of aborting the run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RolloutError {
    /// What failed: `model`, `env`, or `reward:<function name>`.
    pub source: String,
    /// Human-readable cause.
    pub message: String,
}

/// Wall-clock time of the phases of a rollout, in milliseconds.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
pub struct Timings {
    /// Time spent waiting for the model.
    pub generation_ms: f64,
    /// Time spent in environment responses (tools, game logic).
    pub env_ms: f64,
    /// Time spent in reward functions.
    pub scoring_ms: f64,
    /// From the start of the rollout to the end of scoring.
    pub total_ms: f64,
}

/// Token-level trace of a rollout, for training.
///
/// `completion_ids` concatenates every token after the prompt: model-generated tokens
/// (`completion_mask` 1) and environment tokens such as tool results (mask 0).
/// `completion_logprobs[i]` is the logprob the sampler gave `completion_ids[i]` (0 where the mask
/// is 0).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct TokenTrace {
    /// Token ids of the prompt.
    pub prompt_ids: Vec<u32>,
    /// Token ids after the prompt.
    pub completion_ids: Vec<u32>,
    /// 1 for tokens the model generated (trained on), 0 for environment tokens.
    pub completion_mask: Vec<u8>,
    /// Sampling logprob of each completion token.
    pub completion_logprobs: Vec<f32>,
}

impl TokenTrace {
    /// Checks the contract: the three completion vectors have one entry per completion token,
    /// masks are 0 or 1, and logprobs are finite and not positive.
    pub fn check(&self) -> Result<(), String> {
        let n = self.completion_ids.len();
        if self.completion_mask.len() != n || self.completion_logprobs.len() != n {
            return Err(format!(
                "token trace lengths differ: {n} ids, {} mask entries, {} logprobs",
                self.completion_mask.len(),
                self.completion_logprobs.len()
            ));
        }
        if let Some(m) = self.completion_mask.iter().find(|&&m| m > 1) {
            return Err(format!("completion_mask holds {m}; only 0 and 1 are allowed"));
        }
        if let Some(lp) = self.completion_logprobs.iter().find(|lp| !lp.is_finite() || **lp > 0.0) {
            return Err(format!("completion_logprobs holds {lp}; logprobs are finite and <= 0"));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_trace_check_catches_each_violation() {
        let ok = TokenTrace {
            prompt_ids: vec![1, 2],
            completion_ids: vec![3, 4],
            completion_mask: vec![1, 0],
            completion_logprobs: vec![-0.5, 0.0],
        };
        assert_eq!(ok.check(), Ok(()));
        let short = TokenTrace { completion_mask: vec![1], ..ok.clone() };
        assert!(short.check().expect_err("short").contains("lengths differ"));
        let bad_mask = TokenTrace { completion_mask: vec![1, 2], ..ok.clone() };
        assert!(bad_mask.check().expect_err("mask").contains("holds 2"));
        let bad_lp = TokenTrace { completion_logprobs: vec![0.1, 0.0], ..ok };
        assert!(bad_lp.check().expect_err("lp").contains("0.1"));
    }

    #[test]
    fn stop_reason_serialises_snake_case() {
        assert_eq!(serde_json::to_string(&StopReason::MaxTurns).expect("ser"), "\"max_turns\"");
        assert_eq!(
            serde_json::to_string(&StopReason::TokenBudget).expect("ser"),
            "\"token_budget\""
        );
    }
}
