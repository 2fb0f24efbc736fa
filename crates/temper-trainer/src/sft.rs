//! `temper sft`: supervised fine-tuning from a TOML config.
//!
//! Each optimizer step takes the next `batch_size` samples of the shuffled stream (epochs
//! reshuffle with the data seed), packs them first-fit-decreasing into rows of `seq_len` tokens
//! (samples keep their own positions and never attend to each other), splits the rows over the
//! data-parallel ranks, and runs them `micro_batch_rows` rows per forward, accumulating
//! gradients; the loss is normalised by the loss-token count of the whole step.

use std::path::{Path, PathBuf};

use rand::SeedableRng;
use rand::seq::SliceRandom;
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};
use temper_protocol::config::{EvalConfig, OutputConfig};
use temper_protocol::metrics::{self, EvalScores, MetricsLine, Writer};

use crate::collective::Collective;
use crate::data::{self, Record, Sample};
use crate::optim::{OptimConfig, ScheduleConfig};
use crate::pack::{balance, first_fit_decreasing};
use crate::policy::ModelSpec;
use crate::step::{StepReport, Trainer};
use crate::{Policy, TrainError};

/// The whole SFT configuration.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SftConfig {
    /// Which model.
    pub model: ModelSpec,
    /// Which data.
    pub data: DataConfig,
    /// Steps, batch and packing.
    #[serde(default)]
    pub train: TrainConfig,
    /// AdamW.
    #[serde(default)]
    pub optim: OptimConfig,
    /// Learning-rate schedule.
    #[serde(default)]
    pub schedule: ScheduleConfig,
    /// Evaluation.
    #[serde(default)]
    pub eval: EvalConfig,
    /// Checkpoints.
    #[serde(default)]
    pub checkpoint: CheckpointConfig,
    /// Where the run is written (default `outputs/sft`).
    #[serde(default = "OutputConfig::sft")]
    pub output: OutputConfig,
    /// Train LoRA adapters instead of every weight.
    #[serde(default)]
    pub lora: Option<crate::lora::LoraConfig>,
    /// Stop before `train.steps` once an evaluation's score crosses a threshold.
    #[serde(default)]
    pub early_stop: Option<EarlyStopConfig>,
}

/// `[early_stop]`: stop the run at the first evaluation whose `monitor` score reaches
/// `threshold` (as PyTorch Lightning's `EarlyStopping(stopping_threshold=...)` does). The model
/// of that step is checkpointed and exported as the run's `final`. Useful when a run should end
/// at a given quality rather than a given step, as a warmup that leaves RL something to do.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EarlyStopConfig {
    /// The score watched, by its name in `metrics.jsonl`: `eval/<env>/reward/mean`,
    /// `eval/loss`, ...
    pub monitor: String,
    /// Stop once the score is at least this (`mode = "max"`) or at most this (`"min"`).
    pub threshold: f64,
    /// `"max"` (default): higher is better; `"min"`: lower is better (a loss).
    #[serde(default)]
    pub mode: StopMode,
}

/// Which way [`EarlyStopConfig::threshold`] is crossed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum StopMode {
    /// Stop once the score is at least the threshold.
    #[default]
    Max,
    /// Stop once the score is at most the threshold.
    Min,
}

impl EarlyStopConfig {
    /// Whether `scores` reach the threshold; an error naming the scores there are when the
    /// monitored one is not among them.
    pub fn reached(&self, scores: &EvalScores) -> Result<Option<f64>, TrainError> {
        let gauges = scores.gauges();
        let Some(&(_, value)) = gauges.iter().find(|(k, _)| *k == self.monitor) else {
            let names: Vec<&str> = gauges.iter().map(|(k, _)| k.as_str()).collect();
            return Err(TrainError::Config(format!(
                "early_stop.monitor = {:?} is not a score this run's evaluation writes; it \
                 writes {}",
                self.monitor,
                if names.is_empty() { "none".to_owned() } else { names.join(", ") }
            )));
        };
        let hit = match self.mode {
            StopMode::Max => value >= self.threshold,
            StopMode::Min => value <= self.threshold,
        };
        Ok(hit.then_some(value))
    }
}

/// `[data]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DataConfig {
    /// A JSONL file of `messages` or `prompt`/`completion` records.
    pub train: Option<PathBuf>,
    /// A JSONL file of held-out records (validation loss).
    pub validation: Option<PathBuf>,
    /// An environment whose generated examples are the data (train split for training, eval
    /// split for validation and reward evaluation).
    pub env: Option<String>,
    /// With `env`: the assistant reply to learn, `{answer}` standing for the reference answer.
    pub completion_template: String,
    /// With `env`: seed of the generated dataset.
    pub env_seed: u64,
    /// With `env`: train examples to generate (the environment's default when unset).
    pub train_size: Option<usize>,
    /// With `env`: replaces the environment's system prompt (`""` drops it), in the training
    /// data and in evaluation alike.
    pub system_prompt: Option<String>,
    /// Validation samples at most (0: all).
    pub validation_size: usize,
    /// Seed of the training order.
    pub shuffle_seed: u64,
}

impl Default for DataConfig {
    fn default() -> Self {
        Self {
            train: None,
            validation: None,
            env: None,
            completion_template: "{answer}".into(),
            env_seed: 0,
            train_size: None,
            system_prompt: None,
            validation_size: 200,
            shuffle_seed: 0,
        }
    }
}

/// `[train]`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TrainConfig {
    /// Optimizer steps.
    pub steps: u64,
    /// Samples per optimizer step.
    pub batch_size: usize,
    /// Tokens per packed row (longer samples are cut to this).
    pub seq_len: usize,
    /// Rows per forward pass (gradients accumulate over the rest).
    pub micro_batch_rows: usize,
    /// Recompute each block in the backward pass instead of keeping its activations.
    pub gradient_checkpointing: bool,
}

impl Default for TrainConfig {
    fn default() -> Self {
        Self {
            steps: 100,
            batch_size: 32,
            seq_len: 2048,
            micro_batch_rows: 4,
            gradient_checkpointing: false,
        }
    }
}

/// `[checkpoint]`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct CheckpointConfig {
    /// Save every this many steps (0: only at the end).
    pub every: u64,
    /// Keep this many newest checkpoints (0: all).
    pub keep: usize,
}

impl Default for CheckpointConfig {
    fn default() -> Self {
        Self { every: 50, keep: 2 }
    }
}

impl SftConfig {
    /// Checks every section, naming the field.
    pub fn validate(&self) -> Result<(), TrainError> {
        let bad = |m: String| Err(TrainError::Config(m));
        self.model.validate()?;
        self.optim.validate().map_err(TrainError::Config)?;
        self.schedule.validate().map_err(TrainError::Config)?;
        self.eval.check("eval").map_err(TrainError::Config)?;
        if self.data.train.is_none() && self.data.env.is_none() {
            return bad("[data]: set `train` (a JSONL file) or `env` (an environment name)".into());
        }
        if self.data.train.is_some() && self.data.env.is_some() {
            return bad("[data]: set either `train` or `env`, not both".into());
        }
        let t = &self.train;
        if t.steps == 0 || t.batch_size == 0 || t.micro_batch_rows == 0 {
            return bad(
                "train.steps, train.batch_size and train.micro_batch_rows must be > 0".into()
            );
        }
        if t.seq_len < 2 {
            return bad(format!("train.seq_len must be at least 2, got {}", t.seq_len));
        }
        if let Some(e) = &self.early_stop {
            if !e.threshold.is_finite() {
                return bad(format!("early_stop.threshold must be finite, got {}", e.threshold));
            }
            if e.monitor.is_empty() {
                return bad("early_stop.monitor is empty; name a score such as `eval/loss`".into());
            }
            if self.eval.every == 0 {
                return bad(
                    "early_stop needs evaluations during the run: set eval.every > 0".into()
                );
            }
        }
        Ok(())
    }
}

/// What `temper sft` calls back into: progress, evaluation, checkpoints.
pub trait SftHooks {
    /// Training starts at `start_step` (0, or the resumed checkpoint's step) of `total`.
    fn on_start(&mut self, _start_step: u64, _total: u64, _info: &RunInfo) {}
    /// A step finished.
    fn on_step(&mut self, _report: &StepReport) {}
    /// Extra evaluation (such as generating answers and scoring them) of the current weights,
    /// recorded into `scores`.
    fn evaluate(&mut self, _policy: &Policy, _scores: &mut EvalScores) -> Result<(), String> {
        Ok(())
    }
    /// An evaluation finished with these scores.
    fn on_eval(&mut self, _scores: &EvalScores) {}
    /// A checkpoint was written.
    fn on_checkpoint(&mut self, _step: u64, _path: &Path) {}
    /// Asked after every step: stop now, as when the user interrupts. A checkpoint of the step
    /// is written first (no export); `--resume` continues from it.
    fn should_stop(&mut self) -> bool {
        false
    }
}

/// Hooks that do nothing.
#[derive(Debug, Default)]
pub struct NoHooks;
impl SftHooks for NoHooks {}

/// Facts about the run shown when it starts.
#[derive(Debug, Clone, Serialize)]
pub struct RunInfo {
    /// Training samples.
    pub train_samples: usize,
    /// Validation samples.
    pub validation_samples: usize,
    /// Samples cut to `seq_len`.
    pub truncated: usize,
    /// Model weights.
    pub parameters: usize,
}

/// The outcome of a run.
#[derive(Debug, Clone)]
pub struct SftSummary {
    /// Steps finished.
    pub steps: u64,
    /// The last step's loss.
    pub final_loss: f64,
    /// The last evaluation, if one ran.
    pub final_eval: Option<EvalScores>,
    /// The exported model (Hugging Face layout).
    pub export_dir: PathBuf,
    /// The monitored score when `[early_stop]` ended the run before `train.steps`.
    pub stopped_early: Option<f64>,
}

/// Refuses a `dir` that holds data unless `resume` (continue) or `clean` (delete it first) is
/// given; changes nothing.
pub fn check_run_dir(dir: &Path, resume: bool, clean: bool) -> Result<(), TrainError> {
    let has_data = std::fs::read_dir(dir).map(|mut d| d.next().is_some()).unwrap_or(false);
    if has_data && !resume && !clean {
        return Err(TrainError::Config(format!(
            "{} already holds a run; pass --resume to continue it or --clean to start over",
            dir.display()
        )));
    }
    Ok(())
}

/// Prepares `dir` for a run: refuses one that holds data unless `resume` (continue) or `clean`
/// (delete it first) is given.
pub fn prepare_run_dir(dir: &Path, resume: bool, clean: bool) -> Result<(), TrainError> {
    check_run_dir(dir, resume, clean)?;
    let has_data = std::fs::read_dir(dir).map(|mut d| d.next().is_some()).unwrap_or(false);
    if has_data && clean {
        std::fs::remove_dir_all(dir).map_err(TrainError::io(dir))?;
    }
    std::fs::create_dir_all(dir).map_err(TrainError::io(dir))
}

/// The records SFT trains and validates on, before tokenization. [`read_records`] makes them
/// from `[data]`'s files; a caller that knows environments makes them from `data.env` (the
/// trainer does not load environments).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Records {
    /// Trained on.
    pub train: Vec<Record>,
    /// Held out (validation loss).
    pub validation: Vec<Record>,
}

/// The records of `data.train` and `data.validation` (its first `validation_size`, when set).
/// A config that names `data.env` instead is refused: its records come from the caller.
pub fn read_records(data: &DataConfig) -> Result<Records, TrainError> {
    let Some(path) = &data.train else {
        return Err(TrainError::Config(match &data.env {
            Some(env) => format!("data.env `{env}`: environment records are made by the caller"),
            None => "[data] names no data".into(),
        }));
    };
    let train = data::read_jsonl(path).map_err(TrainError::Data)?;
    let mut validation = match &data.validation {
        Some(p) => data::read_jsonl(p).map_err(TrainError::Data)?,
        None => Vec::new(),
    };
    if data.validation_size > 0 {
        validation.truncate(data.validation_size);
    }
    Ok(Records { train, validation })
}

/// Tokenizes the train and validation records. Returns the samples with the count of training
/// samples cut to `seq_len`.
pub fn load_samples(
    cfg: &SftConfig,
    policy: &Policy,
    records: &Records,
) -> Result<(Vec<Sample>, Vec<Sample>, usize), TrainError> {
    let (train, validation) = (&records.train, &records.validation);
    let mut truncated = 0;
    let mut tokenize = |records: &[Record], what: &str| -> Result<Vec<Sample>, TrainError> {
        let mut out = Vec::with_capacity(records.len());
        for (i, r) in records.iter().enumerate() {
            let mut s = data::tokenize(r, &policy.tokenizer, policy.template.as_ref())
                .map_err(|e| TrainError::Data(format!("{what} record {}: {e}", i + 1)))?;
            if s.ids.len() > cfg.train.seq_len {
                s.ids.truncate(cfg.train.seq_len);
                s.mask.truncate(cfg.train.seq_len);
                truncated += 1;
            }
            if s.loss_tokens() > 0 {
                out.push(s);
            }
        }
        Ok(out)
    };
    let train = tokenize(train, "train")?;
    let validation = tokenize(validation, "validation")?;
    if train.is_empty() {
        return Err(TrainError::Data("no training sample has a token to learn".into()));
    }
    let max_pos = policy.model.config().max_position_embeddings;
    if cfg.train.seq_len > max_pos {
        return Err(TrainError::Config(format!(
            "train.seq_len {} is over the model's {max_pos} positions",
            cfg.train.seq_len
        )));
    }
    Ok((train, validation, truncated))
}

/// The order of epoch `epoch`: a permutation of `0..n` from the data seed.
fn epoch_order(n: usize, seed: u64, epoch: u64) -> Vec<usize> {
    let mut order: Vec<usize> = (0..n).collect();
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ epoch.wrapping_mul(0x9E37_79B9_7F4A_7C15));
    order.shuffle(&mut rng);
    order
}

/// Samples `position..position + count` of the endless shuffled stream.
fn take_batch(n: usize, seed: u64, position: u64, count: usize) -> Vec<usize> {
    let mut out = Vec::with_capacity(count);
    let mut epoch = position / n as u64;
    let mut offset = (position % n as u64) as usize;
    let mut order = epoch_order(n, seed, epoch);
    while out.len() < count {
        if offset == n {
            epoch += 1;
            offset = 0;
            order = epoch_order(n, seed, epoch);
        }
        out.push(order[offset]);
        offset += 1;
    }
    out
}

/// Packs `batch` into rows and splits them over ranks; returns this rank's micro-batches.
fn micro_batches<'a>(
    samples: &'a [Sample],
    batch: &[usize],
    train: &TrainConfig,
    rank: usize,
    world: usize,
) -> Vec<Vec<&'a Sample>> {
    let lengths: Vec<usize> = batch.iter().map(|&i| samples[i].len()).collect();
    let rows = first_fit_decreasing(&lengths, train.seq_len);
    let row_tokens: Vec<usize> = rows.iter().map(|r| r.iter().map(|&j| lengths[j]).sum()).collect();
    let mine = balance(&row_tokens, world).swap_remove(rank);
    mine.chunks(train.micro_batch_rows)
        .map(|rows_mb| {
            rows_mb.iter().flat_map(|&r| rows[r].iter().map(|&j| &samples[batch[j]])).collect()
        })
        .collect()
}

/// Mean validation loss per loss token.
pub fn validation_loss(
    policy: &Policy,
    samples: &[Sample],
    seq_len: usize,
) -> Result<f64, TrainError> {
    if samples.is_empty() {
        return Ok(f64::NAN);
    }
    let lengths: Vec<usize> = samples.iter().map(Sample::len).collect();
    let rows = first_fit_decreasing(&lengths, seq_len);
    let (mut total, mut count) = (0f64, 0f64);
    for row in rows {
        let mb: Vec<&Sample> = row.iter().map(|&i| &samples[i]).collect();
        let inputs: Vec<&[u32]> = mb.iter().map(|s| &s.ids[..s.ids.len() - 1]).collect();
        let targets: Vec<u32> = mb.iter().flat_map(|s| s.ids[1..].iter().copied()).collect();
        let mask: Vec<bool> = mb.iter().flat_map(|s| s.mask[1..].iter().copied()).collect();
        let logits = policy.model.forward_packed(&inputs)?.detach();
        let ids = candle_core::Tensor::from_vec(targets.clone(), targets.len(), logits.device())?;
        let lp = temper_model::ops::token_logprobs(&logits, &ids)?
            .to_dtype(candle_core::DType::F64)?
            .to_vec1::<f64>()?;
        for (l, m) in lp.iter().zip(&mask) {
            if *m {
                total -= l;
                count += 1.0;
            }
        }
    }
    Ok(total / count.max(1.0))
}

/// Appends `line` to `metrics.jsonl` at `path`.
pub(crate) fn append_metrics(path: &Path, line: &MetricsLine) -> Result<(), TrainError> {
    metrics::append(path, line).map_err(TrainError::io(path))
}

/// Continues from the newest complete checkpoint under `output.dir` (if any): the trainer's
/// weights and moments, and (on the lead rank) `metrics.jsonl` cut back to it. Returns the
/// samples already seen.
fn resume_run(
    cfg: &SftConfig,
    trainer: &mut Trainer<'_>,
    is_lead: bool,
) -> Result<u64, TrainError> {
    let metrics_path = cfg.output.dir.join("metrics.jsonl");
    let Some(state) = trainer.resume_from(&cfg.output.dir.join("checkpoints"))? else {
        return Ok(0);
    };
    if state.data_seed != cfg.data.shuffle_seed {
        return Err(TrainError::Checkpoint(format!(
            "checkpoint step {} was trained with data.shuffle_seed {}, the config says {}",
            state.step, state.data_seed, cfg.data.shuffle_seed
        )));
    }
    if is_lead {
        metrics::truncate_after(&metrics_path, state.step)
            .map_err(TrainError::io(&metrics_path))?;
    }
    tracing::info!("resumed from checkpoint step {}", state.step);
    Ok(state.samples_seen)
}

/// The lead's early-stop verdict (`check` runs on the lead only, where the environment's scores
/// are), the same on every rank: it is summed over the ranks, with whether the check failed, so
/// that all of them stop, or fail, at the same step instead of waiting on a lead that has gone.
fn lead_verdict(
    collective: &dyn Collective,
    is_lead: bool,
    check: impl FnOnce() -> Result<Option<f64>, TrainError>,
) -> Result<Option<f64>, TrainError> {
    let checked = if is_lead { check() } else { Ok(None) };
    // [reached, score, failed]
    let mut verdict = match &checked {
        Ok(Some(v)) => [1.0, *v, 0.0],
        Ok(None) => [0.0; 3],
        Err(_) => [0.0, 0.0, 1.0],
    };
    collective.all_reduce_f64(&mut verdict)?;
    checked?;
    if verdict[2] > 0.0 {
        return Err(TrainError::Config(
            "early_stop: the lead rank could not read the monitored score".into(),
        ));
    }
    Ok((verdict[0] > 0.0).then_some(verdict[1]))
}

/// The monitored score of the evaluation of `step` in `metrics`, when it reached the threshold.
fn reached_at(metrics: &Path, step: u64, e: &EarlyStopConfig) -> Option<f64> {
    let text = std::fs::read_to_string(metrics).ok()?;
    metrics::parse_all(&text).0.iter().rev().find_map(|line| match line {
        MetricsLine::Eval(s) if s.step == step => e.reached(s).ok().flatten(),
        _ => None,
    })
}

/// Evaluates the current policy (LoRA merged in): validation loss on every rank, the hooks'
/// environment scores and the metrics line on the lead.
fn evaluate(
    cfg: &SftConfig,
    trainer: &Trainer<'_>,
    validation: &[Sample],
    hooks: &mut dyn SftHooks,
    is_lead: bool,
) -> Result<EvalScores, TrainError> {
    let mut scores = EvalScores::new(trainer.step, Writer::Sft);
    let merged = trainer.merged_policy()?;
    let current = merged.as_ref().unwrap_or(&trainer.policy);
    if !validation.is_empty() {
        scores.loss = Some(validation_loss(current, validation, cfg.train.seq_len)?);
    }
    if is_lead {
        let metrics_path = cfg.output.dir.join("metrics.jsonl");
        hooks.evaluate(current, &mut scores).map_err(TrainError::Eval)?;
        append_metrics(&metrics_path, &MetricsLine::Eval(scores.clone()))?;
        hooks.on_eval(&scores);
    }
    Ok(scores)
}

/// Runs SFT on `records`. `policy` must be built from `cfg.model`; on `resume` the newest
/// complete checkpoint of the run directory is loaded into it first.
pub fn run(
    cfg: &SftConfig,
    policy: Policy,
    records: &Records,
    collective: &dyn Collective,
    hooks: &mut dyn SftHooks,
    resume: bool,
) -> Result<SftSummary, TrainError> {
    cfg.validate()?;
    let dir = &cfg.output.dir;
    let ckpt_root = dir.join("checkpoints");
    let metrics_path = dir.join("metrics.jsonl");
    let is_lead = collective.rank() == 0;
    let (train, validation, truncated) = load_samples(cfg, &policy, records)?;
    let info = RunInfo {
        train_samples: train.len(),
        validation_samples: validation.len(),
        truncated,
        parameters: policy.model.num_parameters(),
    };
    if truncated > 0 {
        tracing::warn!(
            "{truncated} training samples were cut to train.seq_len = {}",
            cfg.train.seq_len
        );
    }
    let mut trainer = Trainer::new(
        policy,
        cfg.optim,
        cfg.schedule,
        cfg.train.steps,
        collective,
        cfg.train.gradient_checkpointing,
    )?;
    if let Some(l) = &cfg.lora {
        let lora = crate::lora::Lora::new(&trainer.policy.model, l.clone())?;
        trainer = trainer.with_lora(lora)?;
    }
    let mut samples_seen = if resume { resume_run(cfg, &mut trainer, is_lead)? } else { 0 };
    hooks.on_start(trainer.step, cfg.train.steps, &info);

    let mut final_loss = f64::NAN;
    let mut final_eval = None;
    let mut stopped_early = None;
    if resume
        && let Some(e) = &cfg.early_stop
        && trainer.step > 0
    {
        // A run that stopped early resumes as stopped: the evaluation of its checkpoint's step
        // reached the threshold already.
        let step = trainer.step;
        stopped_early =
            lead_verdict(collective, is_lead, || Ok(reached_at(&metrics_path, step, e)))?;
    }
    let world = collective.world_size();
    while trainer.step < cfg.train.steps && stopped_early.is_none() {
        let batch =
            take_batch(train.len(), cfg.data.shuffle_seed, samples_seen, cfg.train.batch_size);
        samples_seen += batch.len() as u64;
        let total_loss_tokens: f64 = batch.iter().map(|&i| train[i].loss_tokens() as f64).sum();
        let mbs = micro_batches(&train, &batch, &cfg.train, collective.rank(), world);
        let report = trainer.sft_step(&mbs, total_loss_tokens)?;
        final_loss = report.loss;
        if is_lead {
            append_metrics(&metrics_path, &MetricsLine::Sft(report.update_line(report.step)))?;
        }
        hooks.on_step(&report);
        let step = trainer.step;
        let mut last = step == cfg.train.steps;
        if (cfg.eval.every > 0 && step.is_multiple_of(cfg.eval.every)) || last {
            let scores = evaluate(cfg, &trainer, &validation, hooks, is_lead)?;
            if let Some(e) = &cfg.early_stop {
                let reached = lead_verdict(collective, is_lead, || e.reached(&scores))?;
                if let Some(v) = reached
                    && !last
                {
                    tracing::info!(
                        "early stop at step {step}: {} = {v:.4} reached {}",
                        e.monitor,
                        e.threshold
                    );
                    stopped_early = Some(v);
                    last = true;
                }
            }
            final_eval = Some(scores);
        }
        // A stop asked for by the user checkpoints first, so nothing is lost.
        let stop = !last && hooks.should_stop();
        let due =
            (cfg.checkpoint.every > 0 && step.is_multiple_of(cfg.checkpoint.every)) || last || stop;
        if is_lead && due {
            let path = trainer.save_checkpoint(
                &ckpt_root,
                samples_seen,
                cfg.data.shuffle_seed,
                cfg.checkpoint.keep,
            )?;
            hooks.on_checkpoint(step, &path);
        }
        if stop {
            tracing::info!("stopped after step {step}");
            return Ok(SftSummary {
                steps: trainer.step,
                final_loss,
                final_eval,
                export_dir: dir.join("final"),
                stopped_early: None,
            });
        }
    }
    let export_dir = dir.join("final");
    if is_lead {
        trainer.export(&export_dir)?;
    }
    Ok(SftSummary { steps: trainer.step, final_loss, final_eval, export_dir, stopped_early })
}
