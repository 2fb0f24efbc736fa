//! The RL trainer role (`temper trainer CONFIG`): for each step, waits for the orchestrator's
//! batch (`rollouts/step_N/rank_R.json` under a `STABLE` folder), takes one optimizer step with
//! the configured policy-gradient loss, writes `metrics.jsonl`, then the new weights
//! (`weights/step_N/`, safetensors in the Hugging Face layout) followed by their `STABLE` marker,
//! which the orchestrator watches to update the inference servers.

use std::path::Path;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use temper_protocol::TrainBatch;
use temper_protocol::metrics::{MetricsLine, TrainerStep};

use crate::collective::Collective;
use crate::loss::LossConfig;
use crate::optim::{OptimConfig, ScheduleConfig};
use crate::policy::ModelSpec;
use crate::step::{RlSequence, StepReport, Trainer};
use crate::{Policy, TrainError};
use temper_protocol::config::OutputConfig;

pub use temper_protocol::run_dir::{STABLE, batch_dir, weights_dir};

/// The RL trainer's configuration.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RlTrainerConfig {
    /// Which model (the same one the inference servers start from).
    pub model: ModelSpec,
    /// AdamW (RL default learning rate 1e-6).
    #[serde(default = "rl_optim")]
    pub optim: OptimConfig,
    /// Learning-rate schedule.
    #[serde(default)]
    pub schedule: ScheduleConfig,
    /// The policy-gradient loss.
    #[serde(default)]
    pub loss: LossConfig,
    /// Steps and I/O.
    #[serde(default)]
    pub trainer: RoleConfig,
    /// The run directory (default `outputs/rl`, shared with the orchestrator).
    #[serde(default = "OutputConfig::rl")]
    pub output: OutputConfig,
    /// Train LoRA adapters instead of every weight (merged weights are published).
    #[serde(default)]
    pub lora: Option<crate::lora::LoraConfig>,
}

fn rl_optim() -> OptimConfig {
    OptimConfig { lr: 1e-6, ..OptimConfig::default() }
}

/// `[trainer]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RoleConfig {
    /// Optimizer steps (one per batch).
    pub steps: u64,
    /// Recompute each block in the backward pass instead of keeping its activations.
    pub gradient_checkpointing: bool,
    /// Save a full checkpoint (with optimizer state) every this many steps (0: only at the end).
    pub checkpoint_every: u64,
    /// Weight folders to keep (older ones are deleted; the inference servers have loaded them).
    pub keep_weights: usize,
    /// Give up waiting for a batch after this many seconds (0: wait forever).
    pub batch_timeout_s: f64,
    /// With several ranks, shard the optimizer moments across them (each keeps 1/N; a step
    /// reduce-scatters the gradients and all-gathers the weights). Needs f32 weights on the CPU.
    pub shard_optimizer: bool,
    /// Serve Prometheus metrics on this address (`host:port`; rank R adds R to a non-zero
    /// port), announced in `RUN/prometheus/trainer-R.json`. `temper rl` sets it when unset.
    pub metrics_addr: Option<String>,
}

impl Default for RoleConfig {
    fn default() -> Self {
        Self {
            steps: 100,
            gradient_checkpointing: false,
            checkpoint_every: 10,
            keep_weights: 3,
            batch_timeout_s: 0.0,
            shard_optimizer: false,
            metrics_addr: None,
        }
    }
}

impl RlTrainerConfig {
    /// Checks every section, naming the field.
    pub fn validate(&self) -> Result<(), TrainError> {
        self.model.validate()?;
        self.optim.validate().map_err(TrainError::Config)?;
        self.schedule.validate().map_err(TrainError::Config)?;
        self.loss.validate().map_err(TrainError::Config)?;
        if self.trainer.steps == 0 {
            return Err(TrainError::Config("trainer.steps must be > 0".into()));
        }
        if !(self.trainer.batch_timeout_s.is_finite() && self.trainer.batch_timeout_s >= 0.0) {
            return Err(TrainError::Config("trainer.batch_timeout_s must be ≥ 0".into()));
        }
        Ok(())
    }
}

/// Marks a folder complete.
pub fn mark_stable(dir: &Path) -> Result<(), TrainError> {
    std::fs::write(dir.join(STABLE), b"").map_err(TrainError::io(dir))
}

/// What `temper trainer` calls back into.
pub trait RlHooks {
    /// Training starts after step `start_step`.
    fn on_start(&mut self, _start_step: u64, _total: u64) {}
    /// Waiting for the batch of `step`.
    fn on_wait(&mut self, _step: u64) {}
    /// A step finished (`line` is its metrics line, which rank 0 writes) and its weights are
    /// written.
    fn on_step(&mut self, _report: &StepReport, _line: &TrainerStep, _weights: &Path) {}
    /// Stop now (a checkpoint is written first).
    fn should_stop(&mut self) -> bool {
        false
    }
}

/// Hooks that do nothing.
#[derive(Debug, Default)]
pub struct NoRlHooks;
impl RlHooks for NoRlHooks {}

/// This rank's batch of `step`, checked against the contract, the step, the rank and the
/// number of ranks.
fn read_batch(
    dir: &Path,
    collective: &dyn Collective,
    step: u64,
) -> Result<TrainBatch, TrainError> {
    let (rank, world) = (collective.rank(), collective.world_size());
    let path = dir.join(format!("rank_{rank}.json"));
    let bytes = std::fs::read(&path).map_err(TrainError::io(&path))?;
    let batch: TrainBatch = serde_json::from_slice(&bytes)
        .map_err(|source| TrainError::Parse { path: path.clone(), source })?;
    batch.check().map_err(|e| TrainError::Data(format!("{}: {e}", path.display())))?;
    if batch.step != step || batch.rank as usize != rank {
        return Err(TrainError::Data(format!(
            "{}: holds step {} rank {}, expected step {step} rank {rank}",
            path.display(),
            batch.step,
            batch.rank
        )));
    }
    if batch.world_size as usize != world {
        return Err(TrainError::Data(format!(
            "{}: the batch of step {step} is for {} ranks; this trainer has {world}",
            path.display(),
            batch.world_size
        )));
    }
    Ok(batch)
}

fn to_sequences(batch: &TrainBatch) -> Vec<Vec<RlSequence>> {
    batch
        .micro_batches
        .iter()
        .map(|mb| {
            mb.iter()
                .map(|s| RlSequence {
                    ids: s.token_ids.clone(),
                    mask: s.loss_mask.iter().map(|&m| m == 1).collect(),
                    sampling_logprobs: s.sampling_logprobs.clone(),
                    advantage: s.advantage,
                    temperature: s.temperature,
                })
                .collect()
        })
        .collect()
}

/// The outcome of a run.
#[derive(Debug, Clone)]
pub struct RlSummary {
    /// Steps finished.
    pub steps: u64,
    /// Whether the run stopped early (asked to).
    pub stopped: bool,
    /// Bytes of optimizer state this rank held.
    pub optimizer_state_bytes: usize,
    /// Ranks the optimizer state was sharded over (1: not sharded).
    pub optimizer_shards: usize,
}

/// Runs the RL trainer. On `resume`, continues after the newest complete checkpoint.
pub fn run(
    cfg: &RlTrainerConfig,
    policy: Policy,
    collective: &dyn Collective,
    hooks: &mut dyn RlHooks,
    resume: bool,
) -> Result<RlSummary, TrainError> {
    cfg.validate()?;
    let run = cfg.output.dir.clone();
    let ckpt_root = temper_protocol::run_dir::checkpoints_dir(&run, "trainer");
    let metrics_path = temper_protocol::run_dir::metrics_file(&run);
    let is_lead = collective.rank() == 0;
    let mut trainer = build_trainer(cfg, policy, collective)?;
    let summary = |trainer: &Trainer<'_>, stopped: bool| RlSummary {
        steps: trainer.step,
        stopped,
        optimizer_state_bytes: trainer.optimizer().state_bytes(),
        optimizer_shards: trainer.optimizer().shards(),
    };
    if resume && let Some(state) = trainer.resume_from(&ckpt_root)? {
        tracing::info!("trainer resumed from checkpoint step {}", state.step);
        // The servers restart from the base model: publish the resumed weights again if they
        // were pruned, so the orchestrator can load them.
        let weights = weights_dir(&run, state.step);
        if is_lead && !weights.join(STABLE).is_file() {
            publish_weights(&trainer, &weights)?;
        }
    }
    hooks.on_start(trainer.step, cfg.trainer.steps);
    let save_checkpoint =
        |trainer: &Trainer<'_>| trainer.save_checkpoint(&ckpt_root, 0, 0, 2).map(drop);
    while trainer.step < cfg.trainer.steps {
        let step = trainer.step + 1;
        let dir = batch_dir(&run, step);
        hooks.on_wait(step);
        let waited = Instant::now();
        match wait_for_batch(&dir, cfg.trainer.batch_timeout_s, collective, hooks)? {
            Wait::Ready => {}
            Wait::Stop => {
                save_checkpoint(&trainer)?;
                return Ok(summary(&trainer, true));
            }
            Wait::TimedOut => {
                return Err(TrainError::Data(format!(
                    "no batch for step {step} in {} after {} s",
                    dir.display(),
                    cfg.trainer.batch_timeout_s
                )));
            }
        }
        let wait_s = waited.elapsed().as_secs_f64();
        let batch = read_batch(&dir, collective, step)?;
        let seqs = to_sequences(&batch);
        let mbs: Vec<Vec<&RlSequence>> = seqs.iter().map(|mb| mb.iter().collect()).collect();
        let report = trainer.rl_step(&mbs, &cfg.loss, batch.total_loss_tokens as f64)?;
        let line = report.trainer_line(step, wait_s);
        let weights = weights_dir(&run, step);
        if is_lead {
            crate::sft::append_metrics(&metrics_path, &MetricsLine::Trainer(line.clone()))?;
            publish_weights(&trainer, &weights)?;
            prune_weights(&run, step, cfg.trainer.keep_weights)?;
        }
        let last = step == cfg.trainer.steps;
        let every = cfg.trainer.checkpoint_every;
        if last || (every > 0 && step.is_multiple_of(every)) {
            save_checkpoint(&trainer)?;
        }
        hooks.on_step(&report, &line, &weights);
    }
    Ok(summary(&trainer, false))
}

/// The trainer of `cfg`: LoRA adapters when configured, optimizer state sharded over the
/// collective's ranks when asked for and there are several.
fn build_trainer<'c>(
    cfg: &RlTrainerConfig,
    policy: Policy,
    collective: &'c dyn Collective,
) -> Result<Trainer<'c>, TrainError> {
    let mut trainer = Trainer::new(
        policy,
        cfg.optim,
        cfg.schedule,
        cfg.trainer.steps,
        collective,
        cfg.trainer.gradient_checkpointing,
    )?;
    if let Some(l) = &cfg.lora {
        let lora = crate::lora::Lora::new(&trainer.policy.model, l.clone())?;
        trainer = trainer.with_lora(lora)?;
    }
    if cfg.trainer.shard_optimizer && collective.world_size() > 1 {
        trainer = trainer.with_sharded_optimizer()?;
    }
    Ok(trainer)
}

enum Wait {
    Ready,
    Stop,
    TimedOut,
}

/// Polls for a batch folder's `STABLE` marker. The ranks decide together each poll (one small
/// all-reduce): they go on when every rank sees the batch, and stop or give up when any rank is
/// asked to stop or has waited past `limit_s` seconds (0: no limit), so no rank is left waiting
/// in a collective for the others.
fn wait_for_batch(
    dir: &Path,
    limit_s: f64,
    collective: &dyn Collective,
    hooks: &mut dyn RlHooks,
) -> Result<Wait, TrainError> {
    let started = Instant::now();
    loop {
        let ready = dir.join(STABLE).is_file();
        let stop = hooks.should_stop();
        let late = limit_s > 0.0 && started.elapsed().as_secs_f64() > limit_s;
        let mut votes =
            [f64::from(u8::from(ready)), f64::from(u8::from(stop)), f64::from(u8::from(late))];
        collective.all_reduce_f64(&mut votes)?;
        if votes[1] > 0.0 {
            return Ok(Wait::Stop);
        }
        if votes[0] >= collective.world_size() as f64 {
            return Ok(Wait::Ready);
        }
        if votes[2] > 0.0 {
            return Ok(Wait::TimedOut);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Writes the weights servers load (merged LoRA included) and then the `STABLE` marker.
fn publish_weights(trainer: &Trainer<'_>, dir: &Path) -> Result<(), TrainError> {
    let _ = std::fs::remove_dir_all(dir);
    temper_model::weights::save_tensors(
        &trainer.inference_tensors()?,
        &trainer.policy.model.config().to_hf_json(),
        dir,
        temper_model::weights::SHARD_BYTES,
    )?;
    mark_stable(dir)
}

fn prune_weights(run: &Path, newest: u64, keep: usize) -> Result<(), TrainError> {
    if keep == 0 {
        return Ok(());
    }
    let root = run.join("weights");
    let Ok(entries) = std::fs::read_dir(&root) else { return Ok(()) };
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if let Some(n) = temper_protocol::run_dir::parse_step(&name)
            && n + keep as u64 <= newest
        {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
    Ok(())
}
