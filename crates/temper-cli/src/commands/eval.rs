//! `temper eval`: evaluate a model on an environment.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use anyhow::{Context, bail, ensure};
use indicatif::ProgressBar;
use temper_client::{Limited, OpenAiClient, RetryPolicy};
use temper_envs::eval::{self, EvalReport, EvalRun, Progress};
use temper_envs::report;
use temper_envs::suite::{Benchmark, Sampling, Suite};
use temper_envs::{ChatModel, Environment, LoadOptions, Services, Split};
use temper_protocol::SamplingParams;
use temper_verify::code::CodeRunner;

use crate::args::{EvalArgs, EvalCommand, SplitArg};

pub async fn run(args: EvalArgs) -> anyhow::Result<()> {
    if let Some(EvalCommand::Report(report)) = args.command {
        return super::eval_report::run(&report);
    }
    if let Some(suite) = args.suite.clone() {
        return run_suite(&args, &suite).await;
    }
    let name = args.env.clone().context("name an environment, or a suite with --suite")?;
    let common = Common::new(&args).await?;
    let load = LoadOptions {
        seed: args.data_seed,
        allow_external: args.allow_external_command,
        ..LoadOptions::default()
    };
    let spec = super::env::resolve_spec(&name).await?;
    let env = temper_envs::load(&spec, &load)
        .with_context(|| format!("cannot load environment `{name}`"))?;

    let dir = output_dir(&args, &env.info.name, &common.model_name)?;
    let config = EvalRun {
        num_examples: args.num_examples.unwrap_or(5),
        rollouts_per_example: args.rollouts.unwrap_or(3),
        split: if args.split == SplitArg::Eval { Split::Eval } else { Split::Train },
        sampling: common.sampling.params(),
        pass_threshold: args.pass_threshold.unwrap_or(0.5),
        load,
        ..common.run_template(&args)
    };

    let display = Display::new(config.num_examples);
    display.line(&format!(
        "evaluating {} on {} at {}: {} rollouts per example, results in {}",
        env.info.name,
        common.model_name,
        args.model,
        config.rollouts_per_example,
        dir.display()
    ));
    let on_progress = |p: Progress| {
        display.update(
            p.groups_done,
            p.groups_total,
            format!("reward {:.3} errors {}", p.reward_mean, p.errors),
        );
    };
    let report = eval::run(
        &env,
        common.model.as_ref(),
        &common.services,
        &config,
        &dir,
        args.resume,
        &on_progress,
    )
    .await
    .with_context(|| format!("evaluation of `{}` failed", env.info.name))?;
    display.finish();
    common.shutdown().await;
    print!("{}", summary_table(&env, &config, &report, &dir));
    if let Some(first) = &report.all_failed {
        bail!("every rollout failed to get a reply from the model: {first}");
    }
    Ok(())
}

/// What every evaluation of one command shares: the model, the judge and code runner, and the
/// sampling flags.
struct Common {
    model: Arc<Limited<OpenAiClient>>,
    services: Services,
    runner_name: Option<String>,
    local_sandbox: Option<temper_sandbox::Sandbox>,
    /// The sampling flags given on the command line.
    sampling: Sampling,
    /// The model's name in requests (`--model-name`, else the server's one model).
    model_name: String,
}

impl Common {
    async fn new(args: &EvalArgs) -> anyhow::Result<Common> {
        let sampling = sampling(args)?;
        ensure!(
            args.timeout_s.is_finite() && args.timeout_s > 0.0,
            "--timeout-s must be a positive number of seconds"
        );
        if let Some(t) = args.pass_threshold {
            ensure!(t.is_finite(), "--pass-threshold must be a finite number");
        }
        if !args.model.starts_with("http://") && !args.model.starts_with("https://") {
            bail!(
                "--model {}: expected the base URL of an OpenAI-compatible server (http:// or https://); \
                 serve a local model with an inference server and pass its URL",
                args.model
            );
        }
        let api_key = std::env::var(&args.api_key_var).ok().filter(|k| !k.is_empty());
        let model_name = match &args.model_name {
            Some(name) => name.clone(),
            None => served_model(&args.model, api_key.as_deref()).await?,
        };
        let retry = RetryPolicy { max_retries: args.max_retries, ..RetryPolicy::default() };
        let timeout = Duration::from_secs_f64(args.timeout_s);
        let client = OpenAiClient::new(&args.model, &model_name, api_key)?
            .with_retry(retry)
            .with_timeout(timeout);
        let model = Arc::new(Limited::new(client, args.concurrency as usize));
        let judge: Arc<dyn ChatModel> = match &args.judge_model {
            Some(url) => {
                let name = args.judge_model_name.as_deref().unwrap_or(&model_name);
                let key = args
                    .judge_api_key_var
                    .as_deref()
                    .and_then(|var| std::env::var(var).ok())
                    .filter(|k| !k.is_empty());
                Arc::new(OpenAiClient::new(url, name, key)?.with_retry(retry).with_timeout(timeout))
            }
            // The same server: share the concurrency limit.
            None => model.clone(),
        };
        let (code_runner, runner_name, local_sandbox) = code_runner(args).await?;
        Ok(Common {
            model,
            services: Services { code_runner, judge: Some(judge) },
            runner_name,
            local_sandbox,
            sampling,
            model_name,
        })
    }

    /// The parts of an [`EvalRun`] that come from the command line and not the environment.
    fn run_template(&self, args: &EvalArgs) -> EvalRun {
        EvalRun {
            num_examples: 0,
            rollouts_per_example: 1,
            split: Split::Eval,
            sampling: SamplingParams::default(),
            pass_threshold: 0.5,
            model_url: args.model.clone(),
            model_name: self.model_name.clone(),
            judge: args.judge_model.clone().map(|url| {
                (url, args.judge_model_name.clone().unwrap_or_else(|| self.model_name.clone()))
            }),
            code_runner: self.runner_name.clone(),
            load: LoadOptions::default(),
            concurrency: args.concurrency as usize,
        }
    }

    async fn shutdown(self) {
        if let Some(sandbox) = self.local_sandbox {
            sandbox.shutdown().await;
        }
    }
}

/// Progress on stderr: a bar at a terminal; elsewhere (a log file, CI, a pipe) plain lines,
/// when the run starts, at most every [`PLAIN_EVERY`] while it runs, and at its end.
struct Display {
    bar: ProgressBar,
    plain: bool,
    last_line: std::sync::Mutex<Option<Instant>>,
}

/// How often a plain progress line is written.
const PLAIN_EVERY: Duration = Duration::from_secs(10);

impl Display {
    fn new(total: usize) -> Display {
        let bar = super::progress_bar(total as u64, "groups");
        let plain = bar.is_hidden();
        Display { bar, plain, last_line: std::sync::Mutex::new(None) }
    }

    /// A line above the bar (or on its own).
    fn line(&self, text: &str) {
        super::say(&self.bar, text);
    }

    fn update(&self, done: usize, total: usize, message: String) {
        self.bar.set_length(total as u64);
        self.bar.set_position(done as u64);
        if !self.plain {
            self.bar.set_message(message);
            return;
        }
        let mut last = self.last_line.lock().unwrap_or_else(|e| e.into_inner());
        if done == total || last.is_none_or(|t| t.elapsed() >= PLAIN_EVERY) {
            *last = Some(Instant::now());
            let elapsed = self.bar.elapsed().as_secs();
            eprintln!("{done}/{total} groups  {}:{:02}  {message}", elapsed / 60, elapsed % 60);
        }
    }

    fn finish(&self) {
        self.bar.finish_and_clear();
    }
}

/// `temper eval --suite`: every (chosen) benchmark in turn, each in its own folder of the
/// suite's output folder, under one progress bar; then the report.
async fn run_suite(args: &EvalArgs, name: &str) -> anyhow::Result<()> {
    let suite = Suite::resolve(name)?;
    if args.print_suite {
        print!("{}", suite.text);
        return Ok(());
    }
    let planned = plan_suite(args, &suite)?;
    let common = Common::new(args).await?;
    let dir = output_dir(args, &format!("suite-{}", suite.suite.name), &common.model_name)?;
    prepare_suite_dir(args, &suite, &dir)?;
    run_benchmarks(args, &suite, &planned, &common, &dir).await?;
    let label = common.model_name.clone();
    common.shutdown().await;

    let run = report::Run::read(&dir, Some(label))?;
    let out = dir.join("report");
    let written = super::eval_report::write(&report::report(&[run]), &out)?;
    print!("{}", written.markdown);
    println!("\nresults   {}\nreport    {}", dir.display(), out.display());
    Ok(())
}

/// A chosen benchmark, its environment, and how many problems its data holds.
struct Planned<'a> {
    benchmark: &'a Benchmark,
    env: Environment,
    problems: usize,
}

/// The chosen benchmarks (`--only`), each with its data read and validated, before any model
/// time is spent; every problem in the data is reported at once.
fn plan_suite<'a>(args: &EvalArgs, suite: &'a Suite) -> anyhow::Result<Vec<Planned<'a>>> {
    let name = &suite.suite.name;
    let data = args.data.as_deref().with_context(|| {
        format!(
            "--suite {name} needs --data DIR: the folder holding its benchmarks' files ({})",
            suite.benchmark.iter().map(|b| b.data.as_str()).collect::<Vec<_>>().join(", ")
        )
    })?;
    ensure!(data.is_dir(), "--data {}: not a folder", data.display());
    for only in &args.only {
        ensure!(
            suite.get(only).is_some(),
            "--only {only}: suite {name} has no such benchmark ({})",
            suite.benchmark.iter().map(|b| b.name.as_str()).collect::<Vec<_>>().join(", ")
        );
    }
    let mut planned = Vec::new();
    let mut problems = Vec::new();
    for benchmark in
        suite.benchmark.iter().filter(|b| args.only.is_empty() || args.only.contains(&b.name))
    {
        match benchmark.environment(suite, data).and_then(|env| {
            let n = env.examples(Split::Eval)?.len();
            Ok((env, n))
        }) {
            Ok((env, n)) => planned.push(Planned { benchmark, env, problems: n }),
            Err(e) => problems.push(format!("  {}: {e}", benchmark.name)),
        }
    }
    if !problems.is_empty() {
        bail!("the suite's data is not ready:\n{}", problems.join("\n"));
    }
    Ok(planned)
}

/// Creates the suite's output folder (refusing one that holds another run unless `--resume`)
/// and keeps the suite file in it, so the report reads the benchmarks in the suite's order.
fn prepare_suite_dir(args: &EvalArgs, suite: &Suite, dir: &Path) -> anyhow::Result<()> {
    if !args.resume
        && dir.exists()
        && dir.read_dir().map(|mut d| d.next().is_some()).unwrap_or(true)
    {
        bail!(
            "{} already holds a run; pass --resume to continue it or choose another --output",
            dir.display()
        );
    }
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let kept = dir.join(report::SUITE_FILE);
    if !kept.exists() {
        temper_protocol::fsio::write_atomic(&kept, suite.text.as_bytes())
            .with_context(|| format!("cannot write {}", kept.display()))?;
    }
    Ok(())
}

/// Runs the planned benchmarks in turn under one progress bar, each in `dir/NAME`, the
/// command line's flags over each benchmark's protocol; a line per finished benchmark.
async fn run_benchmarks(
    args: &EvalArgs,
    suite: &Suite,
    planned: &[Planned<'_>],
    common: &Common,
    dir: &Path,
) -> anyhow::Result<()> {
    let configs: Vec<EvalRun> = planned
        .iter()
        .map(|p| EvalRun {
            num_examples: args.num_examples.unwrap_or(p.benchmark.num_examples),
            rollouts_per_example: args.rollouts.unwrap_or(p.benchmark.samples),
            split: Split::Eval,
            sampling: p.benchmark.sampling(suite).with(&common.sampling).params(),
            pass_threshold: args.pass_threshold.unwrap_or(p.benchmark.pass_threshold),
            load: LoadOptions { seed: p.benchmark.seed, ..LoadOptions::default() },
            ..common.run_template(args)
        })
        .collect();
    let groups: Vec<usize> = planned
        .iter()
        .zip(&configs)
        .map(|(p, c)| if c.num_examples > 0 { c.num_examples.min(p.problems) } else { p.problems })
        .collect();
    let total: usize = groups.iter().sum();
    let display = Display::new(total);
    display.line(&format!(
        "running suite {} ({} benchmarks, {total} problems) on {} at {}; results in {}",
        suite.suite.name,
        planned.len(),
        common.model_name,
        args.model,
        dir.display()
    ));
    let mut before = 0usize;
    for (i, (p, config)) in planned.iter().zip(&configs).enumerate() {
        let b = p.benchmark;
        let sub = dir.join(&b.name);
        let resume = args.resume && sub.join(eval::METADATA).exists();
        let label = format!("{} ({}/{})", b.name, i + 1, planned.len());
        let on_progress = |p: Progress| {
            display.update(
                before + p.groups_done,
                total,
                format!("{label} reward {:.3} errors {}", p.reward_mean, p.errors),
            );
        };
        let outcome = eval::run(
            &p.env,
            common.model.as_ref(),
            &common.services,
            config,
            &sub,
            resume,
            &on_progress,
        )
        .await
        .with_context(|| format!("benchmark `{}` failed", b.name))?;
        if let Some(first) = &outcome.all_failed {
            display.bar.abandon();
            bail!(
                "benchmark `{}`: every sample failed to get a reply from the model: {first} \
                 (the finished benchmarks are kept; --resume continues)",
                b.name
            );
        }
        before += groups[i];
        display.line(&format!(
            "{:<16} {} problems × {}  mean reward {:.4}  errors {}",
            b.name,
            outcome.summary.examples,
            config.rollouts_per_example,
            outcome.summary.reward_mean,
            outcome.summary.errors
        ));
    }
    display.finish();
    Ok(())
}

/// The model to ask when `--model-name` is not given: the one the server lists at
/// `URL/models` (vLLM, SGLang and `temper inference serve` list what they serve), `default`
/// when it lists none or cannot say; several is an error that names them.
async fn served_model(url: &str, api_key: Option<&str>) -> anyhow::Result<String> {
    match temper_client::served_models(url, api_key, Duration::from_secs(10)).await {
        Ok(models) if models.len() > 1 => bail!(
            "the server at {url} serves {} models ({}); choose one with --model-name",
            models.len(),
            models.join(", ")
        ),
        Ok(models) => Ok(models.into_iter().next().unwrap_or_else(|| "default".into())),
        Err(e) => {
            tracing::debug!("no model list at {url}/models ({e}); asking for `default`");
            Ok("default".into())
        }
    }
}

/// Where model-written code runs: a sandbox server, else the local sandbox, else (only when
/// asked) plain processes; without any, code rewards record errors.
async fn code_runner(
    args: &EvalArgs,
) -> anyhow::Result<(Option<Arc<dyn CodeRunner>>, Option<String>, Option<temper_sandbox::Sandbox>)>
{
    code_runner_for(args.sandbox.as_deref(), args.allow_unsandboxed_code).await
}

/// The code runner of a command: a sandbox server at `sandbox`, else a local sandbox, else (with
/// `allow_unsandboxed`) plain processes, else none (code rewards record errors). Returns it, its
/// name, and the local sandbox to shut down at the end.
pub(crate) async fn code_runner_for(
    sandbox: Option<&str>,
    allow_unsandboxed: bool,
) -> anyhow::Result<(Option<Arc<dyn CodeRunner>>, Option<String>, Option<temper_sandbox::Sandbox>)>
{
    if let Some(url) = sandbox {
        let client = temper_client::sandbox::SandboxClient::new(url)?;
        return Ok((Some(Arc::new(client)), Some(format!("sandbox server {url}")), None));
    }
    let cfg =
        temper_sandbox::SandboxConfig { pool_size: 4, ..temper_sandbox::SandboxConfig::default() };
    match temper_sandbox::Sandbox::new(cfg).await {
        Ok(sandbox) => Ok((Some(Arc::new(sandbox.clone())), Some("sandbox".into()), Some(sandbox))),
        Err(e) if allow_unsandboxed => {
            eprintln!(
                "warning: {e}; --allow-unsandboxed-code: model-written code runs as this user with no isolation"
            );
            Ok((
                Some(Arc::new(temper_sandbox::Unsandboxed::new())),
                Some("unsandboxed".into()),
                None,
            ))
        }
        Err(e) => {
            tracing::warn!(
                "{e}; code rewards will record errors (see --sandbox and --allow-unsandboxed-code)"
            );
            Ok((None, None, None))
        }
    }
}

/// The sampling flags of the command line (unset ones stay unset).
fn sampling(args: &EvalArgs) -> anyhow::Result<Sampling> {
    let sampling = Sampling {
        temperature: args.temperature,
        top_p: args.top_p,
        top_k: args.top_k,
        min_p: args.min_p,
        max_tokens: args.max_tokens,
        seed: args.seed,
    };
    if let Err(e) = sampling.check() {
        bail!("--{} {}", e.key.replace('_', "-"), e.rule);
    }
    Ok(sampling)
}

/// `--output`, or `outputs/evals/NAME--MODEL/TIME` (UTC, `2026-12-04T16-30-05Z`), with
/// `outputs/evals/NAME--MODEL/latest` pointing at it; with `--resume`, the folder `latest`
/// points at (else the newest).
fn output_dir(args: &EvalArgs, name: &str, model_name: &str) -> anyhow::Result<PathBuf> {
    if let Some(dir) = &args.output {
        return Ok(dir.clone());
    }
    let model: String = model_name
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() || "-_.".contains(c) { c } else { '_' })
        .collect();
    let parent = Path::new("outputs").join("evals").join(format!("{name}--{model}"));
    let latest = parent.join(LATEST);
    if args.resume {
        // The linked run, when it got as far as its metadata; else the newest that did (a run
        // that failed before writing any is no run to resume).
        let started = |dir: &Path| dir.join(eval::METADATA).is_file();
        if let Ok(target) = std::fs::read_link(&latest)
            && started(&parent.join(&target))
        {
            return Ok(parent.join(target));
        }
        let newest = std::fs::read_dir(&parent)
            .with_context(|| format!("--resume: no earlier run in {}", parent.display()))?
            .filter_map(|e| e.ok())
            .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()) && started(&e.path()))
            .filter_map(|e| e.file_name().to_str().map(str::to_owned))
            .max()
            .with_context(|| format!("--resume: no earlier run in {}", parent.display()))?;
        return Ok(parent.join(newest));
    }
    std::fs::create_dir_all(&parent)
        .with_context(|| format!("cannot create {}", parent.display()))?;
    let stamp = humantime::format_rfc3339_seconds(SystemTime::now()).to_string().replace(':', "-");
    // Claimed with create_dir, which fails when the folder exists: two runs started in the same
    // second get folders of their own.
    let mut folder = stamp.clone();
    for n in 2.. {
        match std::fs::create_dir(parent.join(&folder)) {
            Ok(()) => break,
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && n < 1000 => {
                folder = format!("{stamp}-{n}");
            }
            Err(e) => {
                return Err(e)
                    .with_context(|| format!("cannot create {}", parent.join(&folder).display()));
            }
        }
    }
    // The link is a convenience: a failure to make it does not stop the run.
    let _ = std::fs::remove_file(&latest);
    if let Err(e) = std::os::unix::fs::symlink(&folder, &latest) {
        tracing::warn!("cannot link {} to {folder}: {e}", latest.display());
    }
    Ok(parent.join(folder))
}

/// The link to the newest run of an environment and model.
const LATEST: &str = "latest";

/// The table printed at the end of a run.
fn summary_table(env: &Environment, config: &EvalRun, report: &EvalReport, dir: &Path) -> String {
    let s = &report.summary;
    let mut out = String::new();
    let mut row = |k: &str, v: String| {
        let _ = writeln!(out, "{k:<22} {v}");
    };
    row(
        "environment",
        format!("{} {} (sha256 {})", env.info.name, env.info.version, &env.info.content_hash[..12]),
    );
    row("model", format!("{} at {}", config.model_name, config.model_url));
    row(
        "rollouts",
        format!(
            "{} ({} examples × {}), {} resumed groups",
            s.rollouts, s.examples, config.rollouts_per_example, report.resumed_groups
        ),
    );
    row("errors", format!("{} ({:.1}%)", s.errors, 100.0 * s.error_rate));
    row(
        "reward",
        format!(
            "mean {:.4}  std {:.4}  (without errors {:.4})",
            s.reward_mean, s.reward_std, s.reward_mean_without_errors
        ),
    );
    for (name, mean) in &s.scores {
        row(&format!("  {name}"), format!("{mean:.4}"));
    }
    for (k, v) in &s.pass_at_k {
        row(&format!("pass@{k}"), format!("{v:.4}"));
    }
    let reasons: Vec<String> = s.stop_reasons.iter().map(|(k, v)| format!("{k} {v}")).collect();
    row("stop reasons", reasons.join(", "));
    row("generation (mean)", format!("{:.0} ms per rollout", s.generation_ms_mean));
    row("results", dir.join(eval::RESULTS).display().to_string());
    out
}
