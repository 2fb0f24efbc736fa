//! `temper sft CONFIG`.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use anyhow::Context;
use indicatif::ProgressBar;
use temper_client::{Limited, OpenAiClient};
use temper_envs::eval::{self, EvalRun};
use temper_envs::{Environment, LoadOptions, Services, Split};
use temper_protocol::SamplingParams;
use temper_protocol::config::EvalConfig;
use temper_protocol::metrics::{EvalScores, REWARD_MEAN};
use temper_trainer::sft::{self, RunInfo, SftConfig, SftHooks};
use temper_trainer::{Policy, Single, StepReport};

use crate::args::SftArgs;
use temper_inference::LocalServer;

/// Reads `path` with `sets` applied and validates it; also the resolved TOML.
pub fn load_config(path: &Path, sets: &[String]) -> anyhow::Result<(SftConfig, String)> {
    let (cfg, resolved): (SftConfig, String) = temper_launch::settings::load(path, sets)?;
    cfg.validate().with_context(|| format!("invalid config {}", path.display()))?;
    Ok((cfg, resolved))
}

pub async fn run(args: SftArgs) -> anyhow::Result<()> {
    let (cfg, resolved) = load_config(&args.config, &args.run.set)?;
    let device = super::inference::device(&args.device, 0)?;
    let dir = cfg.output.dir.clone();
    // Everything that can fail on the config's account (an earlier run in the way, the data,
    // the model) fails before the run folder is touched, so a corrected config just reruns.
    sft::check_run_dir(&dir, args.run.resume, args.run.clean)?;
    // Records from the environment's examples, or from [data]'s files.
    let env = cfg.data.env.as_ref().map(|_| load_env(&cfg.data)).transpose()?;
    let records = match &env {
        Some(env) => env_records(env, &cfg.data)?,
        None => sft::read_records(&cfg.data)?,
    };
    let model = cfg.model.clone();
    let policy = tokio::task::spawn_blocking(move || model.build(&device)).await??;
    let fresh = !args.run.resume;
    sft::prepare_run_dir(&dir, args.run.resume, args.run.clean)?;
    std::fs::write(dir.join("config.toml"), &resolved)
        .with_context(|| format!("cannot write {}", dir.join("config.toml").display()))?;

    // The environment also scores evaluations, when there are any.
    let env = env.filter(|_| cfg.eval.num_examples > 0);
    let stop = super::stop_on_interrupt();
    let (cfg_early_stop, total_steps) = (cfg.early_stop.clone(), cfg.train.steps);
    let handle = tokio::runtime::Handle::current();
    let started = Instant::now();
    let run_dir = dir.clone();
    let summary = tokio::task::spawn_blocking(move || -> anyhow::Result<_> {
        let mut hooks = CliHooks::new(&cfg, env, dir, handle, stop);
        let out = sft::run(&cfg, policy, &records, &Single, &mut hooks, args.run.resume);
        hooks.bar.finish_and_clear();
        Ok((out?, hooks.stopped_at))
    })
    .await?;
    // A fresh run that failed before its first step (the data does not tokenize, say) leaves
    // nothing behind, so the corrected config reruns without --clean.
    if summary.is_err() && fresh && !temper_protocol::run_dir::metrics_file(&run_dir).exists() {
        let _ = std::fs::remove_dir_all(&run_dir);
    }
    let summary = summary?;
    let (summary, stopped) = summary;
    if let Some(step) = stopped {
        println!(
            "stopped after step {step} (checkpoint written); continue with: temper sft {} --resume",
            args.config.display()
        );
        return Ok(());
    }
    println!(
        "sft finished: {} steps in {:.0} s, final loss {:.4}",
        summary.steps,
        started.elapsed().as_secs_f64(),
        summary.final_loss
    );
    if let (Some(value), Some(e)) = (summary.stopped_early, &cfg_early_stop) {
        println!(
            "  stopped early: {} = {value:.4} reached early_stop.threshold = {} (train.steps = {})",
            e.monitor, e.threshold, total_steps
        );
    }
    for (k, v) in summary.final_eval.iter().flat_map(EvalScores::gauges) {
        println!("  {k} = {v:.4}");
    }
    println!("model: {}", summary.export_dir.display());
    Ok(())
}

/// The environment of `data.env`, loaded with the data options (seed, size, system prompt).
fn load_env(data: &sft::DataConfig) -> anyhow::Result<Environment> {
    let name = data.env.as_deref().context("data.env is not set")?;
    let options =
        LoadOptions { seed: data.env_seed, train_size: data.train_size, ..Default::default() };
    let mut env =
        temper_envs::load(name, &options).with_context(|| format!("data.env `{name}`"))?;
    if let Some(prompt) = &data.system_prompt {
        env.system_prompt = if prompt.is_empty() { None } else { Some(prompt.clone()) };
    }
    Ok(env)
}

/// SFT records made from an environment's examples: the environment's prompt (system prompt
/// included) and an assistant reply written from `data.completion_template`, where `{answer}`
/// stands for the example's reference answer; validation takes the first `validation_size`
/// held-out examples (all when 0).
fn env_records(env: &Environment, data: &sft::DataConfig) -> anyhow::Result<sft::Records> {
    let records =
        |split: Split, limit: usize| -> anyhow::Result<Vec<temper_trainer::data::Record>> {
            let mut examples = env.examples(split)?;
            if limit > 0 {
                examples.truncate(limit);
            }
            examples
                .iter()
                .map(|ex| {
                    let mut messages: Vec<serde_json::Value> = env
                        .prompt_for(ex)
                        .iter()
                        .map(serde_json::to_value)
                        .collect::<Result<_, _>>()?;
                    let reply = data.completion_template.replace("{answer}", &ex.answer);
                    messages.push(serde_json::json!({"role": "assistant", "content": reply}));
                    Ok(temper_trainer::data::Record::Messages(messages))
                })
                .collect()
        };
    Ok(sft::Records {
        train: records(Split::Train, 0)?,
        validation: records(Split::Eval, data.validation_size)?,
    })
}

/// Longest generated answer of an SFT evaluation when `[eval] max_tokens` is unset.
const SFT_EVAL_MAX_TOKENS: u32 = 256;

struct CliHooks {
    bar: ProgressBar,
    env: Option<Environment>,
    eval: EvalConfig,
    env_seed: u64,
    dir: PathBuf,
    handle: tokio::runtime::Handle,
    stop: Arc<AtomicBool>,
    stopped_at: Option<u64>,
    total: u64,
    last_step: u64,
    line_every: u64,
}

impl CliHooks {
    fn new(
        cfg: &SftConfig,
        env: Option<Environment>,
        dir: PathBuf,
        handle: tokio::runtime::Handle,
        stop: Arc<AtomicBool>,
    ) -> Self {
        let bar = super::progress_bar(cfg.train.steps, "steps");
        Self {
            bar,
            env,
            eval: cfg.eval,
            env_seed: cfg.data.env_seed,
            dir,
            handle,
            stop,
            stopped_at: None,
            total: cfg.train.steps,
            last_step: 0,
            line_every: (cfg.train.steps / 20).max(1),
        }
    }
}

impl CliHooks {
    /// A line above the progress bar, or on its own when there is no bar (output not a terminal).
    fn say(&self, line: &str) {
        super::say(&self.bar, line);
    }
}

impl SftHooks for CliHooks {
    fn on_start(&mut self, start_step: u64, total: u64, info: &RunInfo) {
        self.bar.set_position(start_step);
        self.say(&format!(
            "sft: {:.2}M parameters, {} train / {} validation samples{}, {} steps{}",
            info.parameters as f64 / 1e6,
            info.train_samples,
            info.validation_samples,
            if info.truncated > 0 {
                format!(" ({} cut to seq_len)", info.truncated)
            } else {
                String::new()
            },
            total,
            if start_step > 0 {
                format!(", resuming after step {start_step}")
            } else {
                String::new()
            },
        ));
    }

    fn on_step(&mut self, r: &StepReport) {
        self.last_step = r.step;
        self.bar.set_position(r.step);
        let tps = r.tokens / r.seconds.max(1e-9);
        self.bar.set_message(format!("loss {:.4} lr {:.2e} {:.0} tok/s", r.loss, r.lr, tps));
        if r.step.is_multiple_of(self.line_every) || r.step == self.total || r.skipped.is_some() {
            let mut line = format!(
                "step {:>5}/{} | loss {:.4} | grad {:.3} | lr {:.2e} | {:.0} tok/s",
                r.step, self.total, r.loss, r.grad_norm, r.lr, tps
            );
            if let Some(why) = &r.skipped {
                line.push_str(&format!(" | update skipped: {why}"));
            }
            self.say(&line);
        }
    }

    fn evaluate(&mut self, policy: &Policy, scores: &mut EvalScores) -> Result<(), String> {
        let Some(env) = &self.env else { return Ok(()) };
        let step = scores.step;
        let dir = self.dir.join("eval").join(format!("step_{step}"));
        let e = self.eval;
        let cfg = EvalRun {
            num_examples: e.num_examples,
            rollouts_per_example: e.rollouts_per_example as u32,
            split: Split::Eval,
            sampling: SamplingParams {
                temperature: Some(e.temperature),
                max_tokens: Some(e.max_tokens.unwrap_or(SFT_EVAL_MAX_TOKENS)),
                seed: Some(step),
                ..SamplingParams::default()
            },
            pass_threshold: e.pass_threshold,
            model_url: String::new(),
            model_name: "policy".into(),
            judge: None,
            code_runner: None,
            load: LoadOptions { seed: self.env_seed, ..Default::default() },
            concurrency: 64,
        };
        self.bar.set_message(format!("evaluating {} examples", e.num_examples));
        let report = self
            .handle
            .block_on(evaluate(policy, env, cfg, &dir, step))
            .map_err(|e| format!("{e:#}"))?;
        let name = &env.info.name;
        scores.set(name, REWARD_MEAN, report.summary.reward_mean);
        for (k, v) in &report.summary.scores {
            scores.set(name, &format!("{k}/mean"), *v);
        }
        Ok(())
    }

    fn on_eval(&mut self, scores: &EvalScores) {
        let parts: Vec<String> =
            scores.gauges().iter().map(|(k, v)| format!("{k} {v:.4}")).collect();
        if !parts.is_empty() {
            self.say(&format!("eval  {:>5} | {}", scores.step, parts.join(" | ")));
        }
    }

    fn should_stop(&mut self) -> bool {
        let stop = self.stop.load(Ordering::SeqCst);
        if stop {
            self.stopped_at = Some(self.last_step);
        }
        stop
    }
}

async fn evaluate(
    policy: &Policy,
    env: &Environment,
    mut cfg: EvalRun,
    dir: &Path,
    step: u64,
) -> anyhow::Result<eval::EvalReport> {
    // A resumed run evaluates this step again: start its folder over.
    if dir.exists() {
        std::fs::remove_dir_all(dir).with_context(|| format!("cannot clear {}", dir.display()))?;
    }
    let server =
        LocalServer::start(&policy.model, &policy.tokenizer, policy.template.as_ref(), step)
            .await?;
    cfg.model_url = server.url.clone();
    let client = OpenAiClient::new(&server.url, "policy", None)?;
    let model = Limited::new(client, cfg.concurrency);
    let report = eval::run(env, &model, &Services::default(), &cfg, dir, false, &|_| {}).await;
    server.shutdown().await;
    Ok(report?)
}
