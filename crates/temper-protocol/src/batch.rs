//! Training batches: what the orchestrator hands the RL trainer for one step.
//!
//! Contract: produced by the orchestrator (packing scored rollouts), consumed by `temper trainer`.
//! With the filesystem transport, the batch of step `N` for data-parallel rank `R` is
//! `rollouts/step_N/rank_R.json`, written under a temporary name and renamed, and the folder gets
//! a `STABLE` file once every rank's batch is in place. What must hold (see [`TrainBatch::check`]):
//!
//! - each sample's four vectors have one entry per token; masks are 0 or 1; the first token is
//!   never trained on (nothing predicts it);
//! - sampling logprobs are finite and not positive where the mask is 1; advantages finite;
//!   temperatures positive;
//! - `total_loss_tokens` is the count of mask-1 tokens after the first over *all* ranks' batches
//!   of the step (every rank normalises by it, so gradients summed over ranks are those of one
//!   big batch).

use serde::{Deserialize, Serialize};

/// One rank's share of one trainer step.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TrainBatch {
    /// [`crate::SCHEMA_VERSION`] of the producer.
    pub schema_version: u32,
    /// The trainer step this batch is for (1-based: step 1 turns v0 into v1).
    pub step: u64,
    /// This batch's rank and the number of ranks.
    pub rank: u32,
    /// See `rank`.
    pub world_size: u32,
    /// Loss tokens of the whole step, all ranks together.
    pub total_loss_tokens: u64,
    /// Forward passes: each is a list of samples packed into one row (or a few).
    pub micro_batches: Vec<Vec<TrainSample>>,
}

/// One rollout, as the trainer sees it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TrainSample {
    /// Prompt and completion token ids.
    pub token_ids: Vec<u32>,
    /// 1 where the token is trained on (model-sampled completion tokens), 0 elsewhere.
    pub loss_mask: Vec<u8>,
    /// The logprob each token was sampled with (0 where the mask is 0).
    pub sampling_logprobs: Vec<f32>,
    /// The rollout's advantage.
    pub advantage: f32,
    /// The temperature it was sampled at (the trainer divides its logits by it).
    pub temperature: f32,
    /// Policy version that generated the rollout (for staleness accounting).
    #[serde(default)]
    pub policy_version: u64,
}

impl TrainBatch {
    /// Checks the contract; the error names the micro-batch, sample and field.
    pub fn check(&self) -> Result<(), String> {
        if self.schema_version > crate::SCHEMA_VERSION {
            return Err(format!(
                "schema version {} is newer than this build's {}",
                self.schema_version,
                crate::SCHEMA_VERSION
            ));
        }
        if self.world_size == 0 || self.rank >= self.world_size {
            return Err(format!("rank {} of world size {}", self.rank, self.world_size));
        }
        for (m, mb) in self.micro_batches.iter().enumerate() {
            for (i, s) in mb.iter().enumerate() {
                let at = |what: String| format!("micro_batches[{m}][{i}]: {what}");
                let n = s.token_ids.len();
                if n < 2 {
                    return Err(at(format!("{n} tokens; a sample needs at least 2")));
                }
                if s.loss_mask.len() != n || s.sampling_logprobs.len() != n {
                    return Err(at(format!(
                        "{n} token ids, {} mask entries, {} logprobs",
                        s.loss_mask.len(),
                        s.sampling_logprobs.len()
                    )));
                }
                if s.loss_mask[0] != 0 {
                    return Err(at("the first token cannot be trained on".into()));
                }
                if let Some(j) = s.loss_mask.iter().position(|&x| x > 1) {
                    return Err(at(format!("loss_mask[{j}] is {}", s.loss_mask[j])));
                }
                for (j, (&lp, &mk)) in s.sampling_logprobs.iter().zip(&s.loss_mask).enumerate() {
                    if mk == 1 && !(lp.is_finite() && lp <= 0.0) {
                        return Err(at(format!("sampling_logprobs[{j}] = {lp} is not a logprob")));
                    }
                }
                if !s.advantage.is_finite() {
                    return Err(at(format!("advantage {} is not finite", s.advantage)));
                }
                if !(s.temperature.is_finite() && s.temperature > 0.0) {
                    return Err(at(format!("temperature {} is not positive", s.temperature)));
                }
            }
        }
        Ok(())
    }

    /// Loss tokens in this batch (this rank's share of `total_loss_tokens`).
    pub fn loss_tokens(&self) -> u64 {
        self.micro_batches
            .iter()
            .flatten()
            .map(|s| s.loss_mask.iter().skip(1).filter(|&&m| m == 1).count() as u64)
            .sum()
    }
}
