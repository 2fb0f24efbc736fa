//! `temper trainer CONFIG`: the RL trainer role.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use anyhow::{Context, bail};
use temper_protocol::MetricsLine;
use temper_protocol::exposition::Gauges;
use temper_protocol::metrics::TrainerStep;
use temper_trainer::collective::Placement;
use temper_trainer::rl::{self, RlHooks, RlSummary, RlTrainerConfig};
use temper_trainer::{Collective, Single, StepReport};

use crate::args::{TrainerArgs, TrainerCommand};

pub async fn run(args: TrainerArgs) -> anyhow::Result<()> {
    match args.command {
        Some(TrainerCommand::Bench(bench)) => return temper_bench::trainer::run(bench).await,
        Some(TrainerCommand::BenchPublish(bench)) => {
            return temper_bench::publish::run(bench).await;
        }
        None => {}
    }
    let Some(config) = args.config.clone() else { bail!("a config file is required") };
    let (cfg, resolved): (RlTrainerConfig, String) =
        temper_launch::settings::load(&config, &args.set)?;
    cfg.validate().with_context(|| format!("invalid config {}", config.display()))?;
    let placement = Placement::from_vars(|k| std::env::var(k).ok())
        .map_err(|e| anyhow::anyhow!("data-parallel placement: {e}"))?;
    // Rank r of a node takes the r-th device from the one named (one GPU per rank).
    let device = super::inference::device(&args.device, placement.local_rank)?;
    let dir = cfg.output.dir.clone();
    if placement.rank == 0 {
        std::fs::create_dir_all(&dir)
            .with_context(|| format!("cannot create {}", dir.display()))?;
        // Atomically: under `temper rl` this is the file every rank reads its config from.
        let path = dir.join("trainer.toml");
        if std::fs::read_to_string(&path).ok().as_deref() != Some(resolved.as_str()) {
            temper_protocol::fsio::write_atomic(&path, resolved.as_bytes())
                .with_context(|| format!("cannot write {}", path.display()))?;
        }
    }
    let stop = super::stop_on_interrupt();
    let resume = args.resume;
    let gauges = Gauges::default();
    let _metrics = match &cfg.trainer.metrics_addr {
        Some(addr) => Some(serve_metrics(addr, placement.rank, &dir, gauges.clone()).await?),
        None => None,
    };
    let on_gpu = device.is_cuda();
    #[cfg(feature = "nccl")]
    let gpu = device.clone();
    let train = move |collective: &dyn Collective| -> anyhow::Result<RlSummary> {
        let policy = cfg.model.build(&device)?;
        let rank = collective.rank();
        let mut hooks = Lines { total: cfg.trainer.steps, stop, rank, gauges };
        Ok(rl::run(&cfg, policy, collective, &mut hooks, resume)?)
    };
    let summary = if placement.world_size > 1 && on_gpu {
        // Ranks on GPUs sum there, through NCCL.
        #[cfg(feature = "nccl")]
        {
            nccl_ranks(&placement, gpu, train).await?
        }
        #[cfg(not(feature = "nccl"))]
        {
            ranks(&placement, train).await?
        }
    } else if placement.world_size > 1 {
        ranks(&placement, train).await?
    } else {
        tokio::task::spawn_blocking(move || train(&Single)).await??
    };
    if placement.world_size > 1 {
        say(format!(
            "trainer rank {}: optimizer state {} bytes ({}), peak memory {}",
            placement.rank,
            summary.optimizer_state_bytes,
            if summary.optimizer_shards > 1 {
                format!("sharded over {} ranks", summary.optimizer_shards)
            } else {
                "a full copy".to_owned()
            },
            peak_memory().map_or("unknown".to_owned(), |kib| format!("{} MiB", kib / 1024))
        ));
    }
    if placement.rank == 0 {
        if summary.stopped {
            println!("trainer stopped after step {} (checkpoint written)", summary.steps);
        } else {
            println!("trainer finished {} steps", summary.steps);
        }
    }
    Ok(())
}

/// Runs `train` as one rank of a multi-process job over MPI. A rank that fails prints why and
/// ends the whole job (`MPI_Abort`), so no other rank waits for it.
#[cfg(feature = "mpi")]
async fn ranks(
    placement: &Placement,
    train: impl FnOnce(&dyn Collective) -> anyhow::Result<RlSummary> + Send + 'static,
) -> anyhow::Result<RlSummary> {
    use temper_trainer::mpi::Mpi;
    // The session finalises MPI when dropped, after the training thread is done with it.
    let (_session, mpi) = Mpi::init().map_err(|e| anyhow::anyhow!("MPI: {e}"))?;
    if mpi.world_size() != placement.world_size || mpi.rank() != placement.rank {
        bail!(
            "the launcher's variables ({:?}) say rank {} of {}, MPI says rank {} of {}: start the trainer with mpirun or srun (with --mpi=pmix), or unset the variables",
            placement.launcher,
            placement.rank,
            placement.world_size,
            mpi.rank(),
            mpi.world_size()
        );
    }
    say(format!("trainer: rank {} of {} on {}", mpi.rank(), mpi.world_size(), Mpi::node_name()));
    match tokio::task::spawn_blocking(move || train(&mpi)).await {
        Ok(Ok(summary)) => Ok(summary),
        Ok(Err(e)) => {
            say(format!("error: trainer rank {}: {e:#}", mpi.rank()));
            mpi.abort(1)
        }
        Err(e) => {
            say(format!("error: trainer rank {} panicked: {e}", mpi.rank()));
            mpi.abort(1)
        }
    }
}

/// Runs `train` as one rank of a multi-process job whose ranks sum on their GPUs through NCCL
/// (loaded now; rank 0 hands out NCCL's id at MASTER_ADDR:MASTER_PORT).
#[cfg(feature = "nccl")]
async fn nccl_ranks(
    placement: &Placement,
    device: candle_core::Device,
    train: impl FnOnce(&dyn Collective) -> anyhow::Result<RlSummary> + Send + 'static,
) -> anyhow::Result<RlSummary> {
    use temper_trainer::nccl::{Library, Nccl};
    let lib = Arc::new(Library::load()?);
    let (major, minor, patch) = lib.version()?;
    say(format!(
        "trainer: rank {} of {} on {device:?}, NCCL {major}.{minor}.{patch} ({})",
        placement.rank,
        placement.world_size,
        lib.path()
    ));
    let placement = placement.clone();
    tokio::task::spawn_blocking(move || {
        // The communicator is made on the thread that trains: it binds the device there.
        let nccl = Nccl::init(lib, &placement, &device, std::time::Duration::from_secs(600))?;
        train(&nccl)
    })
    .await?
}

#[cfg(not(feature = "mpi"))]
async fn ranks(
    placement: &Placement,
    _train: impl FnOnce(&dyn Collective) -> anyhow::Result<RlSummary> + Send + 'static,
) -> anyhow::Result<RlSummary> {
    bail!(
        "{} trainer processes asked for ({:?} variables, rank {}): this build has no multi-process collective; build temper with `--features mpi` (needs Open MPI) and start the ranks with mpirun or srun, or run one trainer process",
        placement.world_size,
        placement.launcher,
        placement.rank
    )
}

/// Writes `line` to stderr in one write, so that ranks sharing a terminal or log do not
/// interleave within a line.
fn say(mut line: String) {
    use std::io::Write;
    line.push('\n');
    let _ = std::io::stderr().write_all(line.as_bytes());
}

/// This process's peak resident memory in KiB (Linux's `VmHWM`).
fn peak_memory() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// Serves this rank's `/metrics` on `addr` (a non-zero port plus the rank) and announces it
/// under the run directory.
async fn serve_metrics(
    addr: &str,
    rank: usize,
    run: &Path,
    gauges: Gauges,
) -> anyhow::Result<temper_protocol::exposition::AbortOnDrop> {
    use temper_protocol::exposition::{self, Identity};
    let addr = match addr.rsplit_once(':') {
        Some((host, port)) => match port.parse::<u16>() {
            Ok(0) | Err(_) => addr.to_owned(),
            Ok(p) => format!("{host}:{}", usize::from(p) + rank),
        },
        None => addr.to_owned(),
    };
    let who = Identity::of_process("trainer").with_rank(rank);
    let render = {
        let who = who.clone();
        move || gauges.render("temper_trainer", &who)
    };
    let (local, guard) = exposition::serve(&addr, render)
        .await
        .with_context(|| format!("trainer.metrics_addr {addr}: cannot listen"))?;
    exposition::write_target(run, &who, &local.to_string())
        .with_context(|| format!("cannot announce the metrics address under {}", run.display()))?;
    Ok(guard)
}

struct Lines {
    total: u64,
    stop: Arc<AtomicBool>,
    rank: usize,
    gauges: Gauges,
}

impl RlHooks for Lines {
    fn on_start(&mut self, start: u64, total: u64) {
        if self.rank == 0 {
            say(format!("trainer: steps {} to {total}", start + 1));
        }
    }
    fn on_step(&mut self, r: &StepReport, line: &TrainerStep, weights: &Path) {
        self.gauges.set_all(&MetricsLine::Trainer(line.clone()));
        let mut values = vec![("rank".to_owned(), self.rank as f64)];
        if let Some(kib) = peak_memory() {
            values.push(("peak_memory_bytes".into(), (kib * 1024) as f64));
        }
        self.gauges.set(values);
        if self.rank != 0 {
            return;
        }
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
        say(line);
    }
    fn should_stop(&mut self) -> bool {
        self.stop.load(Ordering::SeqCst)
    }
}
