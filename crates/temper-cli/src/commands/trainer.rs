//! `temper trainer CONFIG`: the RL trainer role.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use anyhow::{Context, bail};
use temper_trainer::collective::Placement;
use temper_trainer::rl::{self, RlHooks, RlTrainerConfig};
use temper_trainer::{Single, StepReport};

use crate::args::{TrainerArgs, TrainerCommand};

pub async fn run(args: TrainerArgs) -> anyhow::Result<()> {
    if let Some(TrainerCommand::Bench(bench)) = args.command {
        return temper_bench::trainer::run(bench).await;
    }
    let Some(config) = args.config.clone() else { bail!("a config file is required") };
    let (cfg, resolved): (RlTrainerConfig, String) =
        temper_launch::settings::load(&config, &args.set)?;
    cfg.validate().with_context(|| format!("invalid config {}", config.display()))?;
    let placement = Placement::from_vars(|k| std::env::var(k).ok())
        .map_err(|e| anyhow::anyhow!("data-parallel placement: {e}"))?;
    if placement.world_size > 1 {
        bail!(
            "{} processes asked for (rank {}): multi-process data parallelism needs NCCL, which this build does not include; run one trainer process",
            placement.world_size,
            placement.rank
        );
    }
    let device = super::inference::device(&args.device)?;
    let dir = cfg.output.dir.clone();
    std::fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
    std::fs::write(dir.join("trainer.toml"), &resolved)
        .with_context(|| format!("cannot write {}", dir.join("trainer.toml").display()))?;
    let stop = super::stop_on_ctrl_c();
    let resume = args.resume;
    let summary = tokio::task::spawn_blocking(move || -> anyhow::Result<_> {
        let policy = cfg.model.build(&device)?;
        let mut hooks = Lines { total: cfg.trainer.steps, stop };
        Ok(rl::run(&cfg, policy, &Single, &mut hooks, resume)?)
    })
    .await??;
    if summary.stopped {
        println!("trainer stopped after step {} (checkpoint written)", summary.steps);
    } else {
        println!("trainer finished {} steps", summary.steps);
    }
    Ok(())
}

struct Lines {
    total: u64,
    stop: Arc<AtomicBool>,
}

impl RlHooks for Lines {
    fn on_start(&mut self, start: u64, total: u64) {
        eprintln!("trainer: steps {} to {total}", start + 1);
    }
    fn on_step(&mut self, r: &StepReport, weights: &Path) {
        let n = r.stats.tokens.max(1.0);
        let mut line = format!(
            "trainer step {:>5}/{} | loss {:+.5} | mismatch_kl {:.2e} | masked {:.3}/{:.3} | entropy {:.3} | grad {:.3} | lr {:.2e} | {:.0} tok/s | weights {}",
            r.step,
            self.total,
            r.loss,
            r.stats.mismatch_kl / n,
            r.stats.masked_high / n,
            r.stats.masked_low / n,
            r.entropy,
            r.grad_norm,
            r.lr,
            r.tokens / r.seconds.max(1e-9),
            weights.display()
        );
        if let Some(why) = &r.skipped {
            line.push_str(&format!(" | update skipped: {why}"));
        }
        eprintln!("{line}");
    }
    fn should_stop(&mut self) -> bool {
        self.stop.load(Ordering::SeqCst)
    }
}
