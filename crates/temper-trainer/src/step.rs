//! One optimizer step: gradients over this rank's micro-batches, summed over ranks, checked,
//! clipped, applied.

use std::time::Instant;

use candle_core::{DType, Tensor, Var};
use serde::Serialize;

use crate::collective::Collective;
use crate::data::Sample;
use crate::grad::{Targets, add_into, logprob_loss_and_grads};
use crate::lora::Lora;
use crate::loss::{self, LossConfig, LossStats, RlTokens};
use crate::optim::{AdamW, OptimConfig, ScheduleConfig, clip_scale, grad_norm};
use crate::{Policy, TrainError};

/// What one step did.
#[derive(Debug, Clone, Serialize)]
pub struct StepReport {
    /// The step number (1-based: the first step is 1).
    pub step: u64,
    /// Mean loss per loss token (over all ranks).
    pub loss: f64,
    /// Global gradient norm before clipping.
    pub grad_norm: f64,
    /// Learning rate used.
    pub lr: f64,
    /// Loss tokens (all ranks).
    pub loss_tokens: f64,
    /// Tokens processed (all ranks), loss tokens or not.
    pub tokens: f64,
    /// Mean entropy of the trained-on distributions.
    pub entropy: f64,
    /// Policy-gradient statistics (RL steps).
    pub stats: LossStats,
    /// Why the update was skipped, if it was.
    pub skipped: Option<String>,
    /// Seconds the step took.
    pub seconds: f64,
}

impl StepReport {
    /// The metrics line of this update, as step `step` of the run.
    pub fn update_line(&self, step: u64) -> temper_protocol::metrics::UpdateStep {
        temper_protocol::metrics::UpdateStep {
            step,
            loss: self.loss,
            entropy: self.entropy,
            grad_norm: self.grad_norm,
            lr: self.lr,
            tokens_per_s: self.tokens / self.seconds.max(1e-9),
            step_s: self.seconds,
            skipped: self.skipped.is_some(),
        }
    }
}

impl StepReport {
    /// The RL trainer's metrics line of this step, as step `step` of the run, after waiting
    /// `wait_batch_s` seconds for its batch (the loss statistics per loss token).
    pub fn trainer_line(
        &self,
        step: u64,
        wait_batch_s: f64,
    ) -> temper_protocol::metrics::TrainerStep {
        let (st, n) = (&self.stats, self.stats.tokens.max(1.0));
        temper_protocol::metrics::TrainerStep {
            update: self.update_line(step),
            mismatch_kl: st.mismatch_kl / n,
            masked_high: st.masked_high / n,
            masked_low: st.masked_low / n,
            clipped: st.clipped / n,
            wait_batch_s,
        }
    }
}

/// What a micro-batch's gradients are taken through.
struct Pass<'a> {
    model: &'a temper_model::Transformer,
    params: &'a [(String, Var)],
    checkpoint: bool,
}

impl Pass<'_> {
    fn grads<T>(
        &self,
        inputs: &[&[u32]],
        targets: Targets<'_>,
        loss_fn: impl FnOnce(&Tensor) -> candle_core::Result<(Tensor, T)>,
    ) -> Result<(Vec<Tensor>, f64, T), TrainError> {
        let (model, params) = (self.model, self.params);
        Ok(logprob_loss_and_grads(model, params, inputs, self.checkpoint, targets, loss_fn)?)
    }
}

/// One micro-batch's share of a step.
struct Micro {
    grads: Vec<Tensor>,
    entropy: f64,
    /// The loss value (already divided by the step's loss tokens).
    loss: f64,
    targets: usize,
    stats: LossStats,
}

/// A model, its optimizer and schedule, and the ranks it trains with.
#[derive(Debug)]
pub struct Trainer<'c> {
    /// The model being trained.
    pub policy: Policy,
    optimizer: AdamW,
    schedule: ScheduleConfig,
    total_steps: u64,
    collective: &'c dyn Collective,
    checkpointing: bool,
    /// Steps finished.
    pub step: u64,
    /// Steps whose update was skipped.
    pub skipped_steps: u64,
    lora: Option<Lora>,
}

/// One RL sequence: prompt and completion tokens with what the sampler reported.
#[derive(Debug, Clone, PartialEq)]
pub struct RlSequence {
    /// All token ids (prompt then completion).
    pub ids: Vec<u32>,
    /// Whether `ids[i]` is trained on.
    pub mask: Vec<bool>,
    /// Sampling logprob of `ids[i]` (ignored where `mask` is false).
    pub sampling_logprobs: Vec<f32>,
    /// The rollout's advantage.
    pub advantage: f32,
    /// Sampling temperature of the completion.
    pub temperature: f32,
}

impl<'c> Trainer<'c> {
    /// A trainer starting at step 0 with fresh optimizer moments.
    pub fn new(
        policy: Policy,
        optim: OptimConfig,
        schedule: ScheduleConfig,
        total_steps: u64,
        collective: &'c dyn Collective,
        checkpointing: bool,
    ) -> Result<Self, TrainError> {
        let optimizer = AdamW::new(policy.model.params(), optim)?;
        Ok(Self {
            policy,
            optimizer,
            schedule,
            total_steps,
            collective,
            checkpointing,
            step: 0,
            skipped_steps: 0,
            lora: None,
        })
    }

    /// Trains LoRA adapters instead of the model's weights (which stay frozen); the optimizer
    /// starts over on the adapters.
    pub fn with_lora(mut self, lora: Lora) -> Result<Self, TrainError> {
        self.optimizer = AdamW::new(lora.params(), *self.optimizer.config())?;
        self.lora = Some(lora);
        Ok(self)
    }

    /// Shards the optimizer state over the collective's ranks: each keeps the moments of 1/N
    /// of the trained weights, and a step reduce-scatters the gradients, updates its block and
    /// all-gathers the weights. The weights must be f32 on the CPU; the moments start over.
    pub fn with_sharded_optimizer(mut self) -> Result<Self, TrainError> {
        let (rank, world) = (self.collective.rank(), self.collective.world_size());
        self.optimizer = AdamW::sharded(self.trainable(), *self.optimizer.config(), rank, world)?;
        Ok(self)
    }

    /// The LoRA adapters, when training them.
    pub fn lora(&self) -> Option<&Lora> {
        self.lora.as_ref()
    }

    /// The weights the optimizer trains: the model's, or the LoRA adapters'.
    pub fn trainable(&self) -> &[(String, Var)] {
        match &self.lora {
            Some(l) => l.params(),
            None => self.policy.model.params(),
        }
    }

    /// The trained weights by name (for checkpoints).
    pub fn trainable_tensors(&self) -> std::collections::BTreeMap<String, Tensor> {
        self.trainable().iter().map(|(n, v)| (n.clone(), v.as_tensor().clone())).collect()
    }

    /// Restores trained weights saved by [`Trainer::trainable_tensors`].
    pub fn load_trainable(
        &self,
        tensors: &std::collections::BTreeMap<String, Tensor>,
    ) -> Result<(), TrainError> {
        for (name, var) in self.trainable() {
            let t = tensors.get(name).ok_or_else(|| {
                TrainError::Checkpoint(format!("the checkpoint lacks weight `{name}`"))
            })?;
            var.set(&t.to_dtype(var.dtype())?)?;
        }
        Ok(())
    }

    /// Every weight of the model as inference should see it (adapters merged in).
    pub fn inference_tensors(
        &self,
    ) -> Result<std::collections::BTreeMap<String, Tensor>, TrainError> {
        match &self.lora {
            Some(l) => l.merged_tensors(&self.policy.model),
            None => Ok(self.policy.model.tensors()),
        }
    }

    /// Writes the model for inference to `dir` in the Hugging Face layout (adapters merged in),
    /// with the tokenizer and chat template; with LoRA, the adapter in the PEFT layout under
    /// `dir/adapter`.
    pub fn export(&self, dir: &std::path::Path) -> Result<(), TrainError> {
        temper_model::weights::save_tensors(
            &self.inference_tensors()?,
            &self.policy.model.config().to_hf_json(),
            dir,
            temper_model::weights::SHARD_BYTES,
        )?;
        self.policy.tokenizer.save(&dir.join("tokenizer.json"))?;
        if let Some(t) = &self.policy.template {
            t.save_tokenizer_config(&dir.join("tokenizer_config.json"))?;
        }
        if let Some(l) = &self.lora {
            l.save(&dir.join("adapter"), "..")?;
        }
        Ok(())
    }

    /// With LoRA, a copy of the policy with the adapters merged into its weights (what
    /// evaluation should run); without, `None` (the policy itself is current).
    pub fn merged_policy(&self) -> Result<Option<Policy>, TrainError> {
        let Some(_) = &self.lora else { return Ok(None) };
        let m = &self.policy.model;
        let model = temper_model::Transformer::from_tensors(
            m.config().clone(),
            self.inference_tensors()?,
            m.dtype(),
            m.device(),
        )?;
        let template = self.policy.template.clone();
        Ok(Some(Policy { model, tokenizer: self.policy.tokenizer.clone(), template }))
    }

    /// With LoRA, the base with the adapters applied (what a step runs instead of the base).
    fn adapted(&self) -> Result<Option<temper_model::Transformer>, TrainError> {
        self.lora.as_ref().map(|l| l.apply(&self.policy.model)).transpose()
    }

    /// The optimizer (for checkpoints).
    pub fn optimizer(&self) -> &AdamW {
        &self.optimizer
    }

    /// Loads the newest complete checkpoint under `root` (trained weights, optimizer moments,
    /// counters) and returns its state, or `None` when there is none. Every rank reads the same
    /// checkpoint; sharded moments are read as this rank's file when the checkpoint was sharded
    /// the same way, and otherwise laid end to end from every rank's file and re-split.
    pub fn resume_from(
        &mut self,
        root: &std::path::Path,
    ) -> Result<Option<crate::checkpoint::TrainerState>, TrainError> {
        use crate::checkpoint::{load_optimizer, optimizer_shard_file};
        let Some(step) = crate::checkpoint::latest(root)? else { return Ok(None) };
        let device = self.policy.model.device().clone();
        let loaded = crate::checkpoint::load(root, step, &device)?;
        self.load_trainable(&loaded.model)?;
        let saved = loaded.state.optimizer_shards;
        let moments = if saved <= 1 {
            loaded.optimizer
        } else if saved == self.optimizer.shards() {
            load_optimizer(root, step, &optimizer_shard_file(self.collective.rank()))?
        } else {
            let (mut m, mut v) = (Vec::new(), Vec::new());
            for rank in 0..saved {
                let mut file = load_optimizer(root, step, &optimizer_shard_file(rank))?;
                for (key, out) in [("shard.exp_avg", &mut m), ("shard.exp_avg_sq", &mut v)] {
                    let t = file.remove(key).ok_or_else(|| {
                        TrainError::Checkpoint(format!(
                            "{} lacks `{key}`",
                            optimizer_shard_file(rank)
                        ))
                    })?;
                    out.extend(t.flatten_all()?.to_vec1::<f32>()?);
                }
            }
            self.optimizer.unflatten_state(&m, &v)?
        };
        self.optimizer
            .load_state(moments, loaded.state.optimizer_steps)
            .map_err(TrainError::Checkpoint)?;
        self.step = loaded.state.step;
        self.skipped_steps = loaded.state.skipped_steps;
        Ok(Some(loaded.state))
    }

    /// Writes a checkpoint of the current step under `root` (keeping the newest `keep`), with
    /// the data position `samples_seen` and `data_seed`. Every rank calls it: rank 0 writes the
    /// checkpoint and, with a sharded optimizer, every rank its block of the moments.
    pub fn save_checkpoint(
        &self,
        root: &std::path::Path,
        samples_seen: u64,
        data_seed: u64,
        keep: usize,
    ) -> Result<std::path::PathBuf, TrainError> {
        use crate::checkpoint::{begin, commit, optimizer_shard_file, step_dir, write_optimizer};
        let lead = self.collective.rank() == 0;
        let shards = self.optimizer.shards();
        let state = crate::checkpoint::TrainerState {
            step: self.step,
            samples_seen,
            skipped_steps: self.skipped_steps,
            data_seed,
            optimizer_steps: self.optimizer.steps(),
            optimizer_shards: shards,
        };
        if shards <= 1 {
            if !lead {
                return Ok(step_dir(root, self.step));
            }
            return crate::checkpoint::save(
                root,
                &state,
                &self.trainable_tensors(),
                &self.policy.model.config().to_hf_json(),
                &self.optimizer.state_tensors(),
                keep,
            );
        }
        let barrier = || self.collective.all_reduce_f64(&mut [0.0]);
        let tmp = if lead {
            begin(root, self.step)?
        } else {
            root.join(format!("step_{}.tmp", self.step))
        };
        barrier()?;
        let mine = optimizer_shard_file(self.collective.rank());
        write_optimizer(&tmp, &mine, &self.optimizer.state_tensors())?;
        barrier()?;
        if !lead {
            return Ok(step_dir(root, self.step));
        }
        let model = self.trainable_tensors();
        commit(root, &tmp, &state, &model, &self.policy.model.config().to_hf_json(), keep)
    }

    /// The learning rate of the next step.
    pub fn next_lr(&self) -> f64 {
        self.schedule.lr_at(self.optimizer.config().lr, self.step, self.total_steps)
    }

    /// One SFT step over this rank's micro-batches (each a list of samples packed into one
    /// forward); `total_loss_tokens` counts the loss tokens of the whole step on every rank.
    pub fn sft_step(
        &mut self,
        micro_batches: &[Vec<&Sample>],
        total_loss_tokens: f64,
    ) -> Result<StepReport, TrainError> {
        self.step_over(micro_batches, total_loss_tokens, |pass, mb| {
            let inputs: Vec<&[u32]> = mb.iter().map(|s| &s.ids[..s.ids.len() - 1]).collect();
            let targets: Vec<u32> = mb.iter().flat_map(|s| s.ids[1..].iter().copied()).collect();
            let mask: Vec<bool> = mb.iter().flat_map(|s| s.mask[1..].iter().copied()).collect();
            let temps = vec![1f32; targets.len()];
            let to = Targets { ids: &targets, temperatures: &temps, mask: &mask };
            let (grads, entropy, loss) = pass.grads(&inputs, to, |lp| {
                let l = loss::sft_loss(lp, &mask, total_loss_tokens)?;
                let v = l.to_dtype(DType::F64)?.to_scalar::<f64>()?;
                Ok((l, v))
            })?;
            let (targets, stats) = (targets.len(), LossStats::default());
            Ok(Micro { grads, entropy, loss, targets, stats })
        })
    }

    /// One RL step over this rank's micro-batches with the loss `cfg`; `total_loss_tokens`
    /// counts the loss tokens of the whole step on every rank.
    pub fn rl_step(
        &mut self,
        micro_batches: &[Vec<&RlSequence>],
        cfg: &LossConfig,
        total_loss_tokens: f64,
    ) -> Result<StepReport, TrainError> {
        self.step_over(micro_batches, total_loss_tokens, |pass, mb| {
            let inputs: Vec<&[u32]> = mb.iter().map(|s| &s.ids[..s.ids.len() - 1]).collect();
            let mut targets = Vec::new();
            let mut mask = Vec::new();
            let mut mu = Vec::new();
            let mut adv = Vec::new();
            let mut seq = Vec::new();
            let mut temps = Vec::new();
            for (k, s) in mb.iter().enumerate() {
                targets.extend_from_slice(&s.ids[1..]);
                mask.extend_from_slice(&s.mask[1..]);
                mu.extend_from_slice(&s.sampling_logprobs[1..]);
                adv.extend(std::iter::repeat_n(s.advantage, s.ids.len() - 1));
                seq.extend(std::iter::repeat_n(k as u32, s.ids.len() - 1));
                temps.extend(std::iter::repeat_n(s.temperature, s.ids.len() - 1));
            }
            let tokens = RlTokens {
                sampling_logprobs: &mu,
                advantages: &adv,
                loss_mask: &mask,
                sequence: &seq,
            };
            let to = Targets { ids: &targets, temperatures: &temps, mask: &mask };
            let (grads, entropy, (loss, stats)) = pass.grads(&inputs, to, |lp| {
                let (l, st) = loss::policy_loss(lp, &tokens, cfg, total_loss_tokens)?;
                let v = l.to_dtype(DType::F64)?.to_scalar::<f64>()?;
                Ok((l, (v, st)))
            })?;
            Ok(Micro { grads, entropy, loss, targets: targets.len(), stats })
        })
    }

    /// A step: `micro` computes each non-empty micro-batch's gradients with the policy (LoRA
    /// merged in, when there is one), which are summed, reduced over ranks and applied.
    fn step_over<S>(
        &mut self,
        micro_batches: &[Vec<&S>],
        total_loss_tokens: f64,
        mut micro: impl FnMut(&Pass<'_>, &[&S]) -> Result<Micro, TrainError>,
    ) -> Result<StepReport, TrainError> {
        let started = Instant::now();
        let adapted = self.adapted()?;
        let pass = Pass {
            model: adapted.as_ref().unwrap_or(&self.policy.model),
            params: self.trainable(),
            checkpoint: self.checkpointing,
        };
        let (mut grads, mut sums, mut stats) = (None, [0f64; 3], LossStats::default());
        for mb in micro_batches.iter().filter(|mb| !mb.is_empty()) {
            let m = micro(&pass, mb)?;
            add_into(&mut grads, m.grads)?;
            sums[0] += m.loss * total_loss_tokens.max(1.0); // loss·N, tokens, entropy
            sums[1] += m.targets as f64;
            sums[2] += m.entropy;
            stats.add(&m.stats);
        }
        drop(adapted);
        self.finish(grads, sums, total_loss_tokens, stats, started)
    }

    fn finish(
        &mut self,
        grads: Option<Vec<Tensor>>,
        sums: [f64; 3],
        total_loss_tokens: f64,
        stats: LossStats,
        started: Instant,
    ) -> Result<StepReport, TrainError> {
        let mut grads = match grads {
            Some(g) => g,
            None => self
                .trainable()
                .iter()
                .map(|(_, p)| p.as_tensor().zeros_like())
                .collect::<candle_core::Result<Vec<_>>>()?,
        };
        let sharded = self.optimizer.shards() > 1;
        let block = if sharded {
            let flat = crate::collective::flatten_f32(&grads)?;
            Some(self.collective.reduce_scatter_f32(&flat)?)
        } else {
            self.collective.all_reduce_sum(&mut grads)?;
            None
        };
        let mut scalars = vec![sums[0], sums[1], sums[2]];
        scalars.extend(stats.to_vec());
        if let Some(b) = &block {
            // The block's share of the squared gradient norm, summed with the others'.
            scalars.push(b.iter().map(|&x| f64::from(x) * f64::from(x)).sum());
        }
        self.collective.all_reduce_f64(&mut scalars)?;
        let norm = match block {
            Some(_) => scalars.pop().unwrap_or(0.0).sqrt(),
            None => grad_norm(&grads)?,
        };
        let stats = LossStats::from_slice(&scalars[3..]);
        let n = total_loss_tokens.max(1.0);
        let loss = scalars[0] / n;
        let lr = self.next_lr();
        self.step += 1;
        let skipped = if !loss.is_finite() {
            Some(format!("the loss is not finite ({loss})"))
        } else if !norm.is_finite() {
            Some(format!("the gradient norm is not finite ({norm})"))
        } else {
            None
        };
        if let Some(why) = &skipped {
            self.skipped_steps += 1;
            tracing::warn!("step {}: update skipped: {why}", self.step);
        } else {
            let scale = clip_scale(norm, self.optimizer.config().max_grad_norm);
            match &block {
                Some(b) => {
                    let mine = self.optimizer.step_block(b, lr, scale)?;
                    let all = self.collective.all_gather_f32(&mine, self.optimizer.flat_len())?;
                    self.optimizer.set_flat(&all)?;
                }
                None => self.optimizer.step_scaled(&grads, lr, scale)?,
            }
        }
        Ok(StepReport {
            step: self.step,
            loss,
            grad_norm: norm,
            lr,
            loss_tokens: total_loss_tokens,
            tokens: scalars[1],
            entropy: if stats.tokens > 0.0 || total_loss_tokens > 0.0 {
                scalars[2] / n
            } else {
                0.0
            },
            stats,
            skipped,
            seconds: started.elapsed().as_secs_f64(),
        })
    }
}
