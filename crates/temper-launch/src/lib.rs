//! Places and supervises the processes of a temper run.
//!
//! `temper rl` is a thin command over [`launch`]: it reads one config ([`config::RlPlan`]:
//! split into the trainer's and the orchestrator's configs by their types), prepares the run
//! directory (refusing an earlier run unless told to resume or clean, [`rewind`]ing a resume to
//! the trainer's newest checkpoint), runs the SFT warmup when the model does not exist yet,
//! starts the inference servers (unless the config names servers), the trainer's ranks and the
//! orchestrator as processes of the same binary, placed as `[launch]` says ([`placement`]: on
//! this machine, or as job steps of a Slurm allocation), each supervised ([`process`]: own
//! process groups, logs teed to `logs/<role>.log`, local children that exit when the launcher
//! dies), reports progress from `metrics.jsonl` ([`supervise`]) and stops everything when one
//! fails, on Ctrl-C, or at the end.
//!
//! This crate knows the roles' configs and the run directory; it never loads a model, talks to
//! a server or sees an environment: the processes it starts do that.

pub mod config;
pub mod device;
pub mod doctor;
pub mod placement;
pub mod process;
pub mod settings;
pub mod supervise;

use std::path::{Path, PathBuf};
use std::process::ExitStatus;

use temper_protocol::exposition::{self, Identity};
use temper_protocol::run_dir;
use tokio::process::Command;

pub use config::RlPlan;
pub use device::{Build, DeviceSpec};
pub use placement::{LaunchConfig, Placer};
pub use process::Proc;
pub use supervise::{Outcome, Quiet, RunHooks};

/// Why a run could not be launched or did not finish.
#[derive(Debug, thiserror::Error)]
pub enum LaunchError {
    /// A file could not be read or written.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file or folder.
        path: PathBuf,
        /// What the system said.
        source: std::io::Error,
    },
    /// A config file is not valid TOML.
    #[error("{}: {error}", path.display())]
    Toml {
        /// The config file.
        path: PathBuf,
        /// The parser's error, with the line.
        error: toml::de::Error,
    },
    /// A config's field does not fit its type.
    #[error("{at}: {message}")]
    Field {
        /// `FILE:LINE:COLUMN` of the field, or the `--set` that gave it.
        at: String,
        /// What is wrong, naming the field.
        message: String,
    },
    /// A `--set` override is malformed.
    #[error("--set {set}: {why}")]
    Set {
        /// The override as given.
        set: String,
        /// What is wrong with it.
        why: String,
    },
    /// A config is wrong in a way its type cannot say.
    #[error("{}: {message}", path.display())]
    Config {
        /// The config file.
        path: PathBuf,
        /// What is wrong, naming the section or field.
        message: String,
    },
    /// The orchestrator's sections fail its checks.
    #[error(transparent)]
    Orchestrator(#[from] temper_orchestrator::OrchestratorError),
    /// The trainer's checkpoints could not be read.
    #[error(transparent)]
    Trainer(#[from] temper_trainer::TrainError),
    /// The roles cannot be placed as `[launch]` asks.
    #[error("{}: {message}", path.display())]
    Placement {
        /// The config file.
        path: PathBuf,
        /// Why, naming the field or the missing program.
        message: String,
    },
    /// A role's config could not be written as TOML.
    #[error("cannot write the {role}'s config: {source}")]
    WriteConfig {
        /// The role.
        role: &'static str,
        /// The serializer's error.
        source: toml::ser::Error,
    },
    /// The run directory holds an earlier run and neither resume nor clean was asked for.
    #[error("{} already holds a run; pass --resume to continue it or --clean to start over", dir.display())]
    ExistingRun {
        /// The run directory.
        dir: PathBuf,
    },
    /// The inference address cannot be listened on.
    #[error("inference.addr {addr}: cannot listen there: {source}")]
    Listen {
        /// The address.
        addr: String,
        /// What the system said.
        source: std::io::Error,
    },
    /// An inference server did not say where it listens in time.
    #[error(
        "inference server {index} on {node} did not start listening within {seconds} s; see logs/"
    )]
    ServerStart {
        /// Its index.
        index: usize,
        /// Its node.
        node: String,
        /// The limit.
        seconds: u64,
    },
    /// A process could not be started.
    #[error("cannot start the {role}: {source}")]
    Spawn {
        /// The role.
        role: String,
        /// What the system said.
        source: std::io::Error,
    },
    /// The SFT warmup failed, or did not make the model.
    #[error("the SFT warmup {0}")]
    Warmup(String),
    /// A role stopped before the run was done.
    #[error("the {role} stopped ({status}); the run is stopped. Last lines of {}:\n{tail}", log.display())]
    RoleFailed {
        /// The role.
        role: String,
        /// How it ended.
        status: ExitStatus,
        /// Its log file.
        log: PathBuf,
        /// The log's last lines.
        tail: String,
    },
    /// The user pressed Ctrl-C.
    #[error("interrupted; the processes are stopped (continue with --resume)")]
    Interrupted,
}

impl LaunchError {
    pub(crate) fn io(path: &Path, source: std::io::Error) -> Self {
        LaunchError::Io { path: path.to_owned(), source }
    }
}

/// How to launch.
#[derive(Debug, Clone)]
pub struct LaunchOptions {
    /// The `temper` binary the roles run as (`temper inference serve`, `temper trainer`,
    /// `temper orchestrator`, `temper sft`).
    pub exe: PathBuf,
    /// Continue the run in the run directory from the trainer's newest complete checkpoint.
    pub resume: bool,
    /// Delete the run directory first if it holds an earlier run.
    pub clean: bool,
    /// What the binary can run (several trainer ranks, CUDA devices).
    pub build: Build,
}

/// Runs `plan` to the end (see the crate's documentation).
pub async fn launch(
    plan: RlPlan,
    opts: &LaunchOptions,
    hooks: &mut dyn RunHooks,
) -> Result<Outcome, LaunchError> {
    plan.check_build(opts.build)?;
    let RlPlan { path, mut trainer, mut orchestrator, warmup, launch: place, resolved, .. } = plan;
    let bad = |message: String| LaunchError::Config { path: path.clone(), message };
    let Some(model) = trainer.model.path.clone() else {
        return Err(bad("[model] path is required".into()));
    };
    let (placer, nodes) = place_roles(&path, &place, &mut trainer, &mut orchestrator)?;
    let dir = trainer.output.dir.clone();
    prepare_dir(&dir, opts.resume, opts.clean)?;
    // Scrape targets of an earlier launch name ports that are gone; the roles announce anew.
    let targets = dir.join("prometheus");
    if targets.exists() {
        std::fs::remove_dir_all(&targets).map_err(|e| LaunchError::io(&targets, e))?;
    }
    if !model.exists() {
        let Some(sft) = &warmup else {
            return Err(bad(format!(
                "model.path {} does not exist (and no [warmup] sft config makes it)",
                model.display()
            )));
        };
        hooks.on_notice(&format!("SFT warmup: {} (makes {})", sft.display(), model.display()));
        run_warmup(&opts.exe, sft, &model).await?;
    }
    let resume_step = if opts.resume {
        let step = temper_trainer::checkpoint::latest(&run_dir::checkpoints_dir(&dir, "trainer"))?
            .unwrap_or(0);
        rewind(&dir, step)?;
        hooks.on_notice(&format!("resuming after step {step}"));
        step
    } else {
        0
    };
    if let Some(notice) = placer.describe(&nodes, place.trainer_ranks) {
        hooks.on_notice(&notice);
    }
    let mut roles =
        Roles { placer: &placer, nodes: &nodes, dir: &dir, exe: &opts.exe, procs: Vec::new() };
    let result = async {
        if orchestrator.inference.base_urls.is_empty() {
            orchestrator.inference.base_urls = roles.servers(&orchestrator, &place, &model).await?;
        }
        orchestrator.validate()?;
        write_config(&dir.join("config.toml"), Ok(resolved), "launcher")?;
        write_config(&dir.join("trainer.toml"), toml::to_string_pretty(&trainer), "trainer")?;
        write_config(
            &dir.join("orchestrator.toml"),
            toml::to_string_pretty(&orchestrator),
            "orchestrator",
        )?;
        let mut args = vec!["trainer".to_owned(), path_arg(&dir.join("trainer.toml"))];
        args.extend(["--device".into(), place.trainer_device.to_string()]);
        if resume_step > 0 {
            args.push("--resume".into());
        }
        // Ranks on GPUs sum through NCCL, whose ranks meet at rank 0's node (torchrun's
        // variables); on the CPU, MPI finds its peers itself.
        let mut env = Vec::new();
        if place.trainer_ranks > 1 && place.trainer_device.is_cuda() {
            let host = match &placer {
                Placer::Local => "127.0.0.1".to_owned(),
                Placer::Slurm { .. } => nodes.trainer[0].clone(),
            };
            env.push(("MASTER_ADDR", host));
            env.push(("MASTER_PORT", rendezvous_port(&placer)?.to_string()));
        }
        roles.spawn_with(
            "trainer",
            &args,
            &nodes.trainer,
            place.trainer_ranks,
            &place.srun_mpi,
            &env,
        )?;
        let mut args = vec!["orchestrator".to_owned(), path_arg(&dir.join("orchestrator.toml"))];
        if opts.resume {
            args.extend(["--resume-step".into(), resume_step.to_string()]);
        }
        roles.spawn("orchestrator", &args, std::slice::from_ref(&nodes.orchestrator), 1, "")?;
        supervise::supervise(&mut roles.procs, &dir, hooks).await
    }
    .await;
    process::stop_all(&mut roles.procs).await;
    result
}

/// Checks `[launch]` against the orchestrator's `world_size` (which it sets),
/// resolves where the roles go, and gives the trainer and orchestrator a metrics address when
/// they have none.
fn place_roles(
    path: &Path,
    place: &LaunchConfig,
    trainer: &mut temper_trainer::rl::RlTrainerConfig,
    orchestrator: &mut temper_orchestrator::OrchestratorConfig,
) -> Result<(Placer, placement::Assignment), LaunchError> {
    let error = |message: String| LaunchError::Placement { path: path.to_owned(), message };
    place.validate().map_err(error)?;
    let world = &mut orchestrator.orchestrator.world_size;
    if *world != 1 && *world as usize != place.trainer_ranks {
        return Err(error(format!(
            "orchestrator.world_size ({world}) differs from launch.trainer_ranks ({}); set launch.trainer_ranks only",
            place.trainer_ranks
        )));
    }
    *world = place.trainer_ranks as u32;
    let placer = Placer::from_env(place.placement).map_err(error)?;
    let nodes = placer.assign(place);
    // Every role serves Prometheus metrics and announces them in RUN/prometheus/.
    let any_port = placer.any_addr(0);
    trainer.trainer.metrics_addr.get_or_insert_with(|| any_port.clone());
    orchestrator.orchestrator.metrics_addr.get_or_insert(any_port);
    Ok((placer, nodes))
}

/// The port NCCL's ranks meet at: a free one of this machine; under Slurm, where rank 0's node
/// cannot be asked, 29500 (torchrun's default) plus the job's id modulo 1000, so that two jobs
/// sharing a node do not meet at the same port.
fn rendezvous_port(placer: &Placer) -> Result<u16, LaunchError> {
    match placer {
        Placer::Local => std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .map_err(|source| LaunchError::Listen { addr: "127.0.0.1:0".into(), source }),
        Placer::Slurm { job, .. } => {
            let job: u32 = job.parse().unwrap_or(0);
            Ok(29500 + (job % 1000) as u16)
        }
    }
}

fn path_arg(path: &Path) -> String {
    path.to_string_lossy().into_owned()
}

/// The roles of a run being started: where they go, and the processes started so far.
struct Roles<'a> {
    placer: &'a Placer,
    nodes: &'a placement::Assignment,
    dir: &'a Path,
    exe: &'a Path,
    procs: Vec<Proc>,
}

impl Roles<'_> {
    /// Starts `role` (`temper ARGS`) as `tasks` tasks on `nodes`.
    fn spawn(
        &mut self,
        role: &str,
        args: &[String],
        nodes: &[String],
        tasks: usize,
        mpi: &str,
    ) -> Result<(), LaunchError> {
        self.spawn_with(role, args, nodes, tasks, mpi, &[])
    }

    /// As [`Roles::spawn`], with variables set in the role's environment.
    fn spawn_with(
        &mut self,
        role: &str,
        args: &[String],
        nodes: &[String],
        tasks: usize,
        mpi: &str,
        env: &[(&str, String)],
    ) -> Result<(), LaunchError> {
        let mut cmd = self.placer.command(role, self.exe, args, nodes, tasks, mpi);
        for (k, v) in env {
            cmd.env(k, v);
        }
        self.procs.push(Proc::spawn(role.to_owned(), false, cmd, self.dir)?);
        Ok(())
    }

    /// Starts the inference servers (each on a free port, or the configured port plus its
    /// index), waits until each has written the address it listens on, announces them to
    /// Prometheus, and returns their URLs.
    async fn servers(
        &mut self,
        orchestrator: &temper_orchestrator::OrchestratorConfig,
        place: &LaunchConfig,
        model: &Path,
    ) -> Result<Vec<String>, LaunchError> {
        let inference = &orchestrator.inference;
        let port = inference.addr.rsplit_once(':').and_then(|(_, p)| p.parse::<u16>().ok());
        let Some(port) = port else {
            return Err(LaunchError::Listen {
                addr: inference.addr.clone(),
                source: std::io::Error::other("not host:port"),
            });
        };
        let servers = self.dir.join("servers");
        std::fs::create_dir_all(&servers).map_err(|e| LaunchError::io(&servers, e))?;
        let mut started = Vec::new();
        for (i, node) in self.nodes.inference.iter().enumerate() {
            let file = servers.join(format!("inference-{i}.addr"));
            let _ = std::fs::remove_file(&file);
            let port = if port == 0 { 0 } else { usize::from(port) + i };
            let addr = match self.placer {
                Placer::Local => inference
                    .addr
                    .rsplit_once(':')
                    .map_or(String::new(), |(h, _)| format!("{h}:{port}")),
                Placer::Slurm { .. } => self.placer.any_addr(port),
            };
            let mut args: Vec<String> = vec!["inference".into(), "serve".into()];
            args.extend(["--addr".into(), addr]);
            args.extend(["--address-file".into(), path_arg(&file)]);
            args.extend(["--served-model-name".into(), inference.model_name.clone()]);
            args.extend(["--model".into(), path_arg(model)]);
            args.extend(["--max-running".into(), inference.max_running.to_string()]);
            // Resolved when the config was read: [launch], else [model], else the device's.
            let dtype = place.inference_dtype.as_deref().unwrap_or("f32");
            args.extend(["--dtype".into(), dtype.to_owned()]);
            // Server i of a node takes the node's i-th device from the first one named.
            let on_node = self.nodes.inference[..i].iter().filter(|n| *n == node).count();
            args.extend(["--device".into(), place.inference_device.nth(on_node).to_string()]);
            let role = if i == 0 { "inference".to_owned() } else { format!("inference-{i}") };
            let mut cmd =
                self.placer.command(&role, self.exe, &args, std::slice::from_ref(node), 1, "");
            cmd.env(exposition::RANK_VAR, i.to_string());
            self.procs.push(Proc::spawn(role, true, cmd, self.dir)?);
            started.push((i, node.clone(), file, self.procs.len() - 1));
        }
        let limit = std::time::Duration::from_secs_f64(inference.timeout_s.max(600.0));
        let since = std::time::Instant::now();
        let mut urls = Vec::new();
        for (i, node, file, at) in started {
            let addr = loop {
                if let Ok(text) = std::fs::read_to_string(&file) {
                    break text.trim().to_owned();
                }
                let p = &mut self.procs[at];
                if let Some(status) = p.poll() {
                    return Err(p.failure(status));
                }
                if since.elapsed() > limit {
                    return Err(LaunchError::ServerStart {
                        index: i,
                        node,
                        seconds: limit.as_secs(),
                    });
                }
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            };
            let node = match self.placer {
                Placer::Local => Identity::of_process("inference").node,
                Placer::Slurm { .. } => node,
            };
            let who = Identity { role: "inference".into(), node, rank: i };
            exposition::write_target(self.dir, &who, &addr)
                .map_err(|e| LaunchError::io(self.dir, e))?;
            urls.push(format!("http://{addr}/v1"));
        }
        Ok(urls)
    }
}

/// Refuses a run directory that holds an earlier run unless `resume` (keep it) or `clean`
/// (delete it first); creates it with its `logs/` folder.
pub fn prepare_dir(dir: &Path, resume: bool, clean: bool) -> Result<(), LaunchError> {
    let has_data = std::fs::read_dir(dir).map(|mut d| d.next().is_some()).unwrap_or(false);
    if has_data && clean {
        std::fs::remove_dir_all(dir).map_err(|e| LaunchError::io(dir, e))?;
    } else if has_data && !resume {
        return Err(LaunchError::ExistingRun { dir: dir.to_owned() });
    }
    let logs = dir.join("logs");
    std::fs::create_dir_all(&logs).map_err(|e| LaunchError::io(&logs, e))
}

/// Runs `temper sft SFT --resume`, which must make `model`.
async fn run_warmup(exe: &Path, sft: &Path, model: &Path) -> Result<(), LaunchError> {
    let status = Command::new(exe)
        .arg("sft")
        .arg(sft)
        .arg("--resume")
        .status()
        .await
        .map_err(|source| LaunchError::Spawn { role: "SFT warmup".into(), source })?;
    if !status.success() {
        return Err(LaunchError::Warmup(format!("failed ({status})")));
    }
    if !model.exists() {
        return Err(LaunchError::Warmup(format!(
            "finished but {} does not exist: its output.dir must end in the model path's folder (…/final)",
            model.display()
        )));
    }
    Ok(())
}

fn write_config(
    path: &Path,
    text: Result<String, toml::ser::Error>,
    role: &'static str,
) -> Result<(), LaunchError> {
    let text = text.map_err(|source| LaunchError::WriteConfig { role, source })?;
    temper_protocol::fsio::write_atomic(path, text.as_bytes()).map_err(|e| LaunchError::io(path, e))
}

/// Forgets everything after step `step`: newer batches and weights (the orchestrator and the
/// trainer make them again from their checkpoints), and newer metric lines.
pub fn rewind(dir: &Path, step: u64) -> Result<(), LaunchError> {
    for sub in ["rollouts", "weights"] {
        let Ok(entries) = std::fs::read_dir(dir.join(sub)) else { continue };
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if run_dir::parse_step(&name).is_some_and(|s| s > step) {
                std::fs::remove_dir_all(e.path()).map_err(|err| LaunchError::io(&e.path(), err))?;
            }
        }
    }
    let metrics = run_dir::metrics_file(dir);
    temper_protocol::metrics::truncate_after(&metrics, step)
        .map_err(|e| LaunchError::io(&metrics, e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rewind_keeps_what_the_checkpoint_covers() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        for step in 1..=4 {
            std::fs::create_dir_all(run_dir::batch_dir(dir, step)).unwrap();
            std::fs::create_dir_all(run_dir::weights_dir(dir, step)).unwrap();
            let update = temper_protocol::metrics::UpdateStep { step, ..Default::default() };
            let line = temper_protocol::metrics::TrainerStep { update, ..Default::default() };
            temper_protocol::metrics::append(
                &run_dir::metrics_file(dir),
                &temper_protocol::MetricsLine::Trainer(line),
            )
            .unwrap();
        }
        rewind(dir, 2).unwrap();
        for step in 1..=4 {
            assert_eq!(run_dir::batch_dir(dir, step).exists(), step <= 2, "batch {step}");
            assert_eq!(run_dir::weights_dir(dir, step).exists(), step <= 2, "weights {step}");
        }
        let text = std::fs::read_to_string(run_dir::metrics_file(dir)).unwrap();
        assert_eq!(text.lines().count(), 2);
    }

    #[test]
    fn an_earlier_run_is_kept_unless_asked() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("run");
        prepare_dir(&dir, false, false).unwrap();
        std::fs::write(dir.join("metrics.jsonl"), "{}\n").unwrap();
        let e = prepare_dir(&dir, false, false).unwrap_err();
        assert!(matches!(e, LaunchError::ExistingRun { .. }), "{e}");
        prepare_dir(&dir, true, false).unwrap();
        assert!(dir.join("metrics.jsonl").exists());
        prepare_dir(&dir, false, true).unwrap();
        assert!(!dir.join("metrics.jsonl").exists() && dir.join("logs").is_dir());
    }
}
