//! `temper rl CONFIG`: inference, orchestrator and trainer as three supervised processes, over
//! `temper_launch`. This command checks the config (hub environments installed and pinned
//! first), and shows a line per step and per evaluation under a progress bar.

use anyhow::Context;
use indicatif::ProgressBar;
use temper_launch::{LaunchOptions, RlPlan, RunHooks};
use temper_protocol::metrics::{EvalScores, OrchestratorStep, REWARD_MEAN, TrainerStep};

use crate::args::RlArgs;

/// `temper rl CONFIG --slurm`: writes the run's sbatch script next to its run directory and
/// submits it.
fn submit(args: &RlArgs, plan: &RlPlan, exe: &std::path::Path) -> anyhow::Result<()> {
    let cwd = std::env::current_dir().context("cannot read the current folder")?;
    let run = cwd.join(&plan.trainer.output.dir);
    let name = run.file_name().map_or("rl".into(), |n| n.to_string_lossy().into_owned());
    let parent = run.parent().unwrap_or(&cwd);
    std::fs::create_dir_all(parent)
        .with_context(|| format!("cannot create {}", parent.display()))?;
    let script_path = parent.join(format!("{name}.sbatch"));
    let output = parent.join(format!("{name}.slurm-%j.out"));
    let mut rl_args = vec![cwd.join(&args.config).to_string_lossy().into_owned()];
    for set in &args.run.set {
        rl_args.extend(["--set".to_owned(), set.clone()]);
    }
    if args.run.resume {
        rl_args.push("--resume".into());
    }
    if args.run.clean {
        rl_args.push("--clean".into());
    }
    let script =
        temper_launch::placement::sbatch_script(exe, &rl_args, &plan.launch, &output, &cwd);
    std::fs::write(&script_path, script)
        .with_context(|| format!("cannot write {}", script_path.display()))?;
    let out =
        std::process::Command::new("sbatch").arg("--parsable").arg(&script_path).output().context(
            "cannot run sbatch (is this a Slurm login node? Debian: apt install slurm-client)",
        )?;
    if !out.status.success() {
        anyhow::bail!(
            "sbatch {} failed: {}",
            script_path.display(),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    let stdout = String::from_utf8_lossy(&out.stdout);
    let job = stdout.trim().split(';').next().unwrap_or_default().to_owned();
    println!("submitted Slurm job {job} ({})", script_path.display());
    println!("  follow:  tail -f {}", output.display().to_string().replace("%j", &job));
    println!("  status:  squeue -j {job}     stop: scancel {job}     continue later: --resume");
    Ok(())
}

pub async fn run(args: RlArgs) -> anyhow::Result<()> {
    let plan = RlPlan::load(&args.config, &args.run.set)?;
    let file = args.config.display().to_string();
    let Some(model) = plan.trainer.model.path.clone() else {
        anyhow::bail!(
            "{file}: [model] path is required (a Hugging Face folder or .gguf; train one with `temper sft` or name it in [warmup])"
        );
    };
    plan.trainer.validate().with_context(|| format!("invalid config {file}"))?;
    plan.check_build(build())?;
    // The orchestrator's checks, with the address of the server the launcher would start.
    let mut check = plan.orchestrator.clone();
    if check.inference.base_urls.is_empty() {
        check.inference.base_urls = vec![format!("http://{}/v1", check.inference.addr)];
    }
    check.validate().with_context(|| format!("invalid config {file}"))?;
    // Hub environments are installed (and pinned in temper.lock) here, before anything starts;
    // the orchestrator then finds them in the store.
    super::env::resolve_config_envs(&mut check)
        .await
        .with_context(|| format!("invalid config {file}"))?;
    let envs = temper_orchestrator::run::load_envs(&check)
        .with_context(|| format!("invalid config {file}"))?;
    if !model.exists() {
        match &plan.warmup {
            Some(sft) => {
                super::sft::load_config(sft, &[])
                    .with_context(|| format!("{file}: [warmup] sft {}", sft.display()))?;
            }
            None => anyhow::bail!(
                "{file}: model.path {} does not exist (and no [warmup] sft config makes it)",
                model.display()
            ),
        }
    }
    if args.check {
        let names: Vec<String> =
            envs.iter().map(|e| format!("{}@{}", e.info.name, e.info.version)).collect();
        println!(
            "{file}: ok ({} steps, model {}{}, environments {}, inference on {} in {}, trainer on {} in {}, run directory {})",
            plan.trainer.trainer.steps,
            model.display(),
            if model.exists() { "" } else { " from the warmup" },
            names.join(", "),
            plan.launch.inference_device,
            plan.inference_dtype(),
            plan.launch.trainer_device,
            plan.trainer_dtype(),
            plan.trainer.output.dir.display()
        );
        return Ok(());
    }
    drop(envs);
    let exe = std::env::current_exe().context("cannot find the temper binary")?;
    if args.slurm {
        return submit(&args, &plan, &exe);
    }
    let (steps, dir) = (plan.trainer.trainer.steps, plan.trainer.output.dir.clone());
    let opts =
        LaunchOptions { exe, resume: args.run.resume, clean: args.run.clean, build: build() };
    let mut lines = StepLines::new(steps);
    let outcome = temper_launch::launch(plan, &opts, &mut lines).await;
    lines.bar.finish_and_clear();
    let outcome = outcome?;
    let mut summary = format!(
        "RL finished: {steps} steps in {:.0} s; run directory {}",
        outcome.seconds,
        dir.display()
    );
    if let (Some(a), Some(b)) = (outcome.first_eval, outcome.last_eval) {
        for (env, stat, v) in b.entries().filter(|e| e.1 == REWARD_MEAN) {
            summary.push_str(&format!(
                "\n  eval/{env}/{stat}: {:.3} (v{}) → {v:.3} (v{})",
                a.get(env, stat).unwrap_or(f64::NAN),
                a.step,
                b.step
            ));
        }
    }
    println!("{summary}");
    Ok(())
}

/// What this binary was built to run.
fn build() -> temper_launch::Build {
    temper_launch::Build::new(cfg!(feature = "mpi"), cfg!(feature = "cuda"))
}

/// A progress bar with a line per step and per evaluation above it.
struct StepLines {
    bar: ProgressBar,
    steps: u64,
}

impl StepLines {
    fn new(steps: u64) -> Self {
        let bar = super::progress_bar(steps, "steps");
        Self { bar, steps }
    }

    fn say(&self, line: &str) {
        super::say(&self.bar, line);
    }
}

impl RunHooks for StepLines {
    fn on_notice(&mut self, text: &str) {
        if text.starts_with("resuming after step ")
            && let Some(step) = text.rsplit(' ').next().and_then(|s| s.parse().ok())
        {
            self.bar.set_position(step);
        }
        self.say(&format!("== {text}"));
    }

    fn on_step(&mut self, t: &TrainerStep, o: &OrchestratorStep) {
        let u = &t.update;
        self.say(&format!(
            "step {:>5}/{} | reward {:.3} | mismatch_kl {:.1e} | entropy {:.3} | grad {:.3} | lr {:.1e} | off-policy ≤ {} | seq {:.0} | {:.1} s",
            u.step,
            self.steps,
            o.reward_mean,
            t.mismatch_kl,
            u.entropy,
            u.grad_norm,
            u.lr,
            o.off_policy_max,
            o.seq_len,
            u.step_s,
        ));
        self.bar.set_position(u.step);
        self.bar.set_message(format!("reward {:.3}", o.reward_mean));
    }

    fn on_eval(&mut self, e: &EvalScores) {
        let scores: Vec<String> = e
            .entries()
            .filter(|(_, stat, _)| *stat == REWARD_MEAN || stat.starts_with("pass@"))
            .map(|(env, stat, v)| format!("{env}/{stat} {v:.3}"))
            .collect();
        self.say(&format!("eval   v{:<5} | {}", e.step, scores.join(" | ")));
    }
}
