//! `temper orchestrator CONFIG`: the RL orchestrator role.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use anyhow::Context;
use temper_envs::Services;
use temper_orchestrator::{OrchestratorConfig, OrchestratorHooks, Start};
use temper_protocol::metrics::{EvalScores, OrchestratorStepLine};

use crate::args::OrchestratorArgs;

pub async fn run(args: OrchestratorArgs) -> anyhow::Result<()> {
    let (mut cfg, resolved): (OrchestratorConfig, String) =
        temper_launch::settings::load(&args.config, &args.set)?;
    super::env::resolve_config_envs(&mut cfg).await?;
    cfg.validate().with_context(|| format!("invalid config {}", args.config.display()))?;
    let dir = cfg.output.dir.clone();
    std::fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
    std::fs::write(dir.join("orchestrator.toml"), &resolved)
        .with_context(|| format!("cannot write {}", dir.join("orchestrator.toml").display()))?;
    let o = &cfg.orchestrator;
    let (code_runner, _, local_sandbox) =
        super::eval::code_runner_for(o.sandbox.as_deref(), o.allow_unsandboxed_code).await?;
    let judge = o.judge.as_ref().map(|j| j.client()).transpose()?;
    let services = Services { code_runner, judge };
    let stop = super::stop_on_interrupt();
    let start = match (args.resume, args.resume_step) {
        (_, Some(step)) => Start::At(step),
        (true, None) => Start::Latest,
        (false, None) => Start::Fresh,
    };
    let mut hooks = Lines { total: o.steps, stop };
    let result = temper_orchestrator::run(&cfg, services, &mut hooks, start).await;
    if let Some(sandbox) = local_sandbox {
        sandbox.shutdown().await;
    }
    let summary = result?;
    if summary.stopped {
        println!("orchestrator stopped after step {}", summary.steps);
    } else {
        println!("orchestrator finished {} steps", summary.steps);
    }
    Ok(())
}

struct Lines {
    total: u64,
    stop: Arc<AtomicBool>,
}

impl OrchestratorHooks for Lines {
    fn on_start(&mut self, start: u64, total: u64) {
        eprintln!("orchestrator: steps {} to {total}", start + 1);
    }
    fn on_step(&mut self, line: &OrchestratorStepLine) {
        let l = &line.metrics;
        eprintln!(
            "orchestrator step {:>5}/{} | reward {:.3} ± {:.3} | len {:.0} | truncated {:.2} | off-policy ≤ {} | filtered {} | errors {} | {:.0} tok/s | v{}",
            l.step,
            self.total,
            l.reward_mean,
            l.reward_std,
            l.seq_len,
            l.truncated,
            l.off_policy_max,
            l.groups_filtered,
            l.errors,
            l.tokens_per_s,
            l.policy_version,
        );
    }
    fn on_weights(&mut self, version: u64) {
        tracing::info!("inference serves weights v{version}");
    }
    fn on_eval(&mut self, e: &EvalScores) {
        let scores: Vec<String> =
            e.entries().map(|(env, stat, v)| format!("{env}/{stat} {v:.3}")).collect();
        eprintln!("orchestrator eval v{} | {}", e.step, scores.join(" | "));
    }
    fn should_stop(&mut self) -> bool {
        self.stop.load(Ordering::SeqCst)
    }
}
