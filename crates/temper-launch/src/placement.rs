//! Where the roles of a run go (`[launch]`): processes of this machine, or job steps of the
//! Slurm allocation `temper rl` runs in.
//!
//! Locally, each inference server is a process on a free loopback port, and several trainer
//! ranks are started by Open MPI's `mpirun`. Under Slurm, every role is a job step (`srun
//! --overlap`, so steps share the allocation's CPUs) pinned to nodes of the allocation:
//! inference servers on the first `inference_nodes` nodes (listening on all interfaces, reached
//! by node name), the trainer's ranks on the next `trainer_nodes` (one MPI world through Slurm's
//! PMIx), the orchestrator on the trainer's first node. An allocation with fewer nodes than
//! asked for is shared by the roles, in the same order.
//!
//! A role never inherits its launcher's own place in a job: the variables that say "you are
//! rank R of N" (`SLURM_PROCID`, `RANK`, `OMPI_COMM_WORLD_RANK`, …) are removed from every
//! child's environment ([`PLACEMENT_VARS`]), and `srun` or `mpirun` set the right ones.

use std::path::Path;

use serde::{Deserialize, Serialize};
use tokio::process::Command;

use crate::device::{DeviceSpec, check_dtype};

/// `[launch]`: how many of each role, and where they run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LaunchConfig {
    /// `local` (processes of this machine), `slurm` (job steps of the Slurm allocation this
    /// runs in), or `auto` (default: `slurm` inside an allocation, where `SLURM_JOB_ID` is set).
    pub placement: PlacementKind,
    /// Inference servers to start; the orchestrator spreads requests over them. Ignored when
    /// `[inference] base_urls` names servers that run already.
    pub inference_servers: usize,
    /// Nodes the inference servers spread over (Slurm).
    pub inference_nodes: usize,
    /// Trainer processes (data-parallel ranks); more than one needs temper built with the `mpi`
    /// feature, and Open MPI's `mpirun` when placed locally.
    pub trainer_ranks: usize,
    /// Nodes the trainer's ranks spread over (Slurm).
    pub trainer_nodes: usize,
    /// `srun --mpi` plugin that connects the trainer's ranks under Slurm.
    pub srun_mpi: String,
    /// Nodes `temper rl --slurm` asks sbatch for (0: `inference_nodes + trainer_nodes`).
    pub nodes: usize,
    /// More `sbatch` options for `temper rl --slurm`, e.g. `["--partition=gpu", "--time=4:00:00"]`.
    pub sbatch: Vec<String>,
    /// Where the inference servers compute: `cpu` (default), `cuda` or `cuda:N`; server `i` of a
    /// node takes `cuda:N+i`. CUDA needs temper built with the `cuda` feature.
    pub inference_device: DeviceSpec,
    /// Precision of the inference servers: `f32`, `bf16` or `f16` (default: `[model] dtype`,
    /// else bf16 on CUDA and f32 on the CPU).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub inference_dtype: Option<String>,
    /// Where the trainer computes: `cpu` (default), `cuda` or `cuda:N`; rank `r` of a node takes
    /// `cuda:N+r`.
    pub trainer_device: DeviceSpec,
    /// Precision of the trainer's weights (default: `[model] dtype`, else f32).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub trainer_dtype: Option<String>,
}

impl Default for LaunchConfig {
    fn default() -> Self {
        Self {
            placement: PlacementKind::Auto,
            inference_servers: 1,
            inference_nodes: 1,
            trainer_ranks: 1,
            trainer_nodes: 1,
            srun_mpi: "pmix".into(),
            nodes: 0,
            sbatch: Vec::new(),
            inference_device: DeviceSpec::Cpu,
            inference_dtype: None,
            trainer_device: DeviceSpec::Cpu,
            trainer_dtype: None,
        }
    }
}

/// `[launch] placement`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PlacementKind {
    /// Slurm inside an allocation, local otherwise.
    #[default]
    Auto,
    /// Processes of this machine.
    Local,
    /// Job steps of the current Slurm allocation.
    Slurm,
}

impl LaunchConfig {
    /// Checks the counts, naming the field.
    pub fn validate(&self) -> Result<(), String> {
        for (name, v) in [
            ("inference_servers", self.inference_servers),
            ("inference_nodes", self.inference_nodes),
            ("trainer_ranks", self.trainer_ranks),
            ("trainer_nodes", self.trainer_nodes),
        ] {
            if v == 0 {
                return Err(format!("launch.{name} must be ≥ 1"));
            }
        }
        if self.trainer_nodes > self.trainer_ranks {
            return Err(format!(
                "launch.trainer_nodes ({}) is more than launch.trainer_ranks ({}): a node would have no rank",
                self.trainer_nodes, self.trainer_ranks
            ));
        }
        if self.inference_nodes > self.inference_servers {
            return Err(format!(
                "launch.inference_nodes ({}) is more than launch.inference_servers ({})",
                self.inference_nodes, self.inference_servers
            ));
        }
        if self.srun_mpi.is_empty()
            || !self.srun_mpi.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        {
            return Err(format!(
                "launch.srun_mpi {:?} is not an srun --mpi plugin name",
                self.srun_mpi
            ));
        }
        if let Some(opt) =
            self.sbatch.iter().find(|o| !o.starts_with('-') || o.contains(['\n', '\r']))
        {
            return Err(format!(
                "launch.sbatch option {opt:?} must be one line starting with '-' (e.g. \"--partition=gpu\")"
            ));
        }
        for (field, dtype) in
            [("inference_dtype", &self.inference_dtype), ("trainer_dtype", &self.trainer_dtype)]
        {
            if let Some(d) = dtype {
                check_dtype(&format!("launch.{field}"), d)?;
            }
        }
        Ok(())
    }

    /// Nodes an sbatch job for this config asks for.
    pub fn job_nodes(&self) -> usize {
        if self.nodes > 0 { self.nodes } else { self.inference_nodes + self.trainer_nodes }
    }
}

/// Variables that say where a process sits in a job (its rank, the job step's size): a role
/// must not inherit its launcher's, so they are removed from every child's environment.
pub const PLACEMENT_VARS: &[&str] = &[
    "RANK",
    "WORLD_SIZE",
    "LOCAL_RANK",
    "LOCAL_WORLD_SIZE",
    "OMPI_COMM_WORLD_RANK",
    "OMPI_COMM_WORLD_SIZE",
    "OMPI_COMM_WORLD_LOCAL_RANK",
    "OMPI_COMM_WORLD_LOCAL_SIZE",
    "PMI_RANK",
    "PMI_SIZE",
    "PMIX_RANK",
    "SLURM_PROCID",
    "SLURM_LOCALID",
    "SLURM_NODEID",
    "SLURM_NTASKS",
    "SLURM_NPROCS",
    "SLURM_NTASKS_PER_NODE",
    "SLURM_TASKS_PER_NODE",
    "SLURM_TASK_PID",
    "SLURM_STEP_ID",
    "SLURM_STEPID",
    "SLURM_STEP_NUM_TASKS",
    "SLURM_STEP_NUM_NODES",
    "SLURM_STEP_NODELIST",
    "SLURM_STEP_TASKS_PER_NODE",
    temper_protocol::exposition::RANK_VAR,
];

/// The nodes each role runs on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Assignment {
    /// Node of each inference server, in order.
    pub inference: Vec<String>,
    /// Nodes of the trainer's ranks.
    pub trainer: Vec<String>,
    /// Node of the orchestrator.
    pub orchestrator: String,
    /// Whether roles share nodes because the allocation has fewer than asked for.
    pub shared: bool,
}

/// Where a run's roles go, resolved against the environment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Placer {
    /// Processes of this machine.
    Local,
    /// Job steps of Slurm job `job`, on its `nodes`.
    Slurm {
        /// The allocation's job id.
        job: String,
        /// The allocation's nodes, in Slurm's order.
        nodes: Vec<String>,
    },
}

impl Placer {
    /// Resolves `kind` with the environment read through `var`; `hostnames` expands a Slurm
    /// node list (`scontrol show hostnames` in [`Placer::from_env`]).
    pub fn resolve(
        kind: PlacementKind,
        var: impl Fn(&str) -> Option<String>,
        hostnames: impl FnOnce(&str) -> Result<Vec<String>, String>,
    ) -> Result<Self, String> {
        let job = var("SLURM_JOB_ID").filter(|j| !j.is_empty());
        match (kind, job) {
            (PlacementKind::Local, _) | (PlacementKind::Auto, None) => Ok(Placer::Local),
            (PlacementKind::Slurm, None) => Err(
                "launch.placement = \"slurm\" needs a Slurm allocation (SLURM_JOB_ID is not set): run inside sbatch or salloc, or submit with `temper rl CONFIG --slurm`".into(),
            ),
            (_, Some(job)) => {
                let list = var("SLURM_JOB_NODELIST")
                    .or_else(|| var("SLURM_NODELIST"))
                    .ok_or("SLURM_JOB_ID is set but SLURM_JOB_NODELIST is not")?;
                let nodes = hostnames(&list)?;
                if nodes.is_empty() {
                    return Err(format!("the allocation's node list {list:?} names no node"));
                }
                Ok(Placer::Slurm { job, nodes })
            }
        }
    }

    /// [`Placer::resolve`] with this process's environment and `scontrol`.
    pub fn from_env(kind: PlacementKind) -> Result<Self, String> {
        Self::resolve(
            kind,
            |k| std::env::var(k).ok(),
            |list| {
                let out = std::process::Command::new("scontrol")
                    .args(["show", "hostnames", list])
                    .output()
                    .map_err(|e| {
                        format!("cannot run scontrol to expand the node list {list:?}: {e}")
                    })?;
                if !out.status.success() {
                    return Err(format!(
                        "scontrol show hostnames {list:?} failed: {}",
                        String::from_utf8_lossy(&out.stderr).trim()
                    ));
                }
                Ok(String::from_utf8_lossy(&out.stdout)
                    .split_whitespace()
                    .map(str::to_owned)
                    .collect())
            },
        )
    }

    /// `host:port` for a role to listen on: loopback locally, every interface under Slurm (the
    /// roles reach it from other nodes).
    pub fn any_addr(&self, port: usize) -> String {
        match self {
            Placer::Local => format!("127.0.0.1:{port}"),
            Placer::Slurm { .. } => format!("0.0.0.0:{port}"),
        }
    }

    /// What a person should read about where the roles went (under Slurm).
    pub fn describe(&self, nodes: &Assignment, trainer_ranks: usize) -> Option<String> {
        let Placer::Slurm { job, .. } = self else { return None };
        Some(format!(
            "Slurm job {job}: inference on {}, trainer ({trainer_ranks} ranks) on {}, orchestrator on {}{}",
            nodes.inference.join(","),
            nodes.trainer.join(","),
            nodes.orchestrator,
            if nodes.shared {
                " (the allocation has fewer nodes than asked for: roles share them)"
            } else {
                ""
            }
        ))
    }

    /// The nodes of each role.
    pub fn assign(&self, cfg: &LaunchConfig) -> Assignment {
        let nodes = match self {
            Placer::Local => vec!["localhost".to_owned()],
            Placer::Slurm { nodes, .. } => nodes.clone(),
        };
        let at = |i: usize| nodes[i % nodes.len()].clone();
        let inference_nodes: Vec<String> = (0..cfg.inference_nodes).map(at).collect();
        let trainer: Vec<String> =
            (cfg.inference_nodes..cfg.inference_nodes + cfg.trainer_nodes).map(at).collect();
        let inference = (0..cfg.inference_servers)
            .map(|i| inference_nodes[i % inference_nodes.len()].clone())
            .collect();
        Assignment {
            inference,
            orchestrator: trainer[0].clone(),
            trainer,
            shared: matches!(self, Placer::Slurm { .. })
                && cfg.inference_nodes + cfg.trainer_nodes > nodes.len(),
        }
    }

    /// The command that runs `exe` with `args` as `tasks` tasks on `nodes`. Locally one task is
    /// a plain process and several are an `mpirun` world; under Slurm it is a job step, with
    /// `mpi` naming the plugin that joins several tasks into one MPI world.
    pub fn command(
        &self,
        role: &str,
        exe: &Path,
        args: &[String],
        nodes: &[String],
        tasks: usize,
        mpi: &str,
    ) -> Command {
        let mut cmd = match self {
            Placer::Local if tasks <= 1 => Command::new(exe),
            Placer::Local => {
                let mut c = Command::new("mpirun");
                c.args(["--oversubscribe", "-np", &tasks.to_string()]);
                if nix::unistd::geteuid().is_root() {
                    // Open MPI refuses root unless told; a root launcher has said so already.
                    c.arg("--allow-run-as-root");
                }
                c.arg(exe);
                c
            }
            Placer::Slurm { .. } => {
                let mut unique = nodes.to_vec();
                unique.dedup();
                let mut c = Command::new("srun");
                // Roles share the allocation's CPUs: a step may have more tasks than it has CPUs.
                c.arg("--overlap")
                    .arg("--overcommit")
                    .arg("--quit-on-interrupt")
                    .arg("--kill-on-bad-exit=1")
                    .arg(format!("--job-name=temper-{role}"))
                    .arg(format!("--nodes={}", unique.len()))
                    .arg(format!("--ntasks={}", tasks.max(1)))
                    .arg(format!("--nodelist={}", unique.join(",")));
                if tasks > 1 {
                    c.arg(format!("--mpi={mpi}"));
                }
                c.arg(exe);
                c
            }
        };
        cmd.args(args);
        for var in PLACEMENT_VARS {
            cmd.env_remove(var);
        }
        match self {
            // Processes of this machine exit when the launcher is gone.
            Placer::Local => {
                cmd.env(crate::process::SUPERVISOR_PID, std::process::id().to_string());
            }
            // A job step's tasks may run on other machines, where the pid means nothing; Slurm
            // ends the steps with the job.
            Placer::Slurm { .. } => {
                cmd.env_remove(crate::process::SUPERVISOR_PID);
            }
        }
        cmd
    }
}

/// The sbatch script that runs `temper rl` with `rl_args` (the config and its flags) as a
/// Slurm job: `nodes` nodes (whole ones: the roles share them as job steps), output to
/// `output`, the extra `#SBATCH` options of `[launch] sbatch`, from the folder `cwd`.
pub fn sbatch_script(
    exe: &Path,
    rl_args: &[String],
    cfg: &LaunchConfig,
    output: &Path,
    cwd: &Path,
) -> String {
    let quote = |s: &str| format!("'{}'", s.replace('\'', "'\\''"));
    let mut text =
        String::from("#!/bin/bash\n# Written by `temper rl --slurm`: the run as one Slurm job.\n");
    text.push_str("#SBATCH --job-name=temper-rl\n");
    text.push_str(&format!("#SBATCH --nodes={}\n", cfg.job_nodes()));
    text.push_str("#SBATCH --exclusive\n");
    text.push_str(&format!("#SBATCH --output={}\n", output.display()));
    for opt in &cfg.sbatch {
        text.push_str(&format!("#SBATCH {opt}\n"));
    }
    text.push_str("set -euo pipefail\n");
    text.push_str(&format!("cd {}\n", quote(&cwd.to_string_lossy())));
    let args: Vec<String> = rl_args.iter().map(|a| quote(a)).collect();
    text.push_str(&format!("exec {} rl {}\n", quote(&exe.to_string_lossy()), args.join(" ")));
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let map: std::collections::HashMap<String, String> =
            pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect();
        move |k| map.get(k).cloned()
    }

    fn expand(list: &str) -> Result<Vec<String>, String> {
        // What `scontrol show hostnames` makes of the lists used here.
        match list {
            "n[1-3]" => Ok(vec!["n1".into(), "n2".into(), "n3".into()]),
            "n1" => Ok(vec!["n1".into()]),
            other => Err(format!("unexpected list {other}")),
        }
    }

    #[test]
    fn placement_follows_the_allocation() {
        let alloc = vars(&[("SLURM_JOB_ID", "42"), ("SLURM_JOB_NODELIST", "n[1-3]")]);
        let slurm = Placer::resolve(PlacementKind::Auto, &alloc, expand).unwrap();
        assert_eq!(
            slurm,
            Placer::Slurm { job: "42".into(), nodes: vec!["n1".into(), "n2".into(), "n3".into()] }
        );
        assert_eq!(Placer::resolve(PlacementKind::Local, &alloc, expand).unwrap(), Placer::Local);
        assert_eq!(Placer::resolve(PlacementKind::Auto, vars(&[]), expand).unwrap(), Placer::Local);
        let e = Placer::resolve(PlacementKind::Slurm, vars(&[]), expand).unwrap_err();
        assert!(e.contains("needs a Slurm allocation") && e.contains("--slurm"), "{e}");
        let e = Placer::resolve(PlacementKind::Slurm, vars(&[("SLURM_JOB_ID", "1")]), expand)
            .unwrap_err();
        assert!(e.contains("SLURM_JOB_NODELIST"), "{e}");
    }

    #[test]
    fn roles_get_their_own_nodes_or_share_a_small_allocation() {
        let cfg = LaunchConfig {
            inference_servers: 3,
            inference_nodes: 2,
            trainer_ranks: 4,
            trainer_nodes: 1,
            ..LaunchConfig::default()
        };
        let three =
            Placer::Slurm { job: "1".into(), nodes: vec!["a".into(), "b".into(), "c".into()] };
        let a = three.assign(&cfg);
        assert_eq!(a.inference, ["a", "b", "a"]);
        assert_eq!(a.trainer, ["c"]);
        assert_eq!(a.orchestrator, "c");
        assert!(!a.shared);
        let one = Placer::Slurm { job: "1".into(), nodes: vec!["a".into()] };
        let a = one.assign(&cfg);
        assert_eq!(
            (a.inference.len(), a.trainer.as_slice(), a.shared),
            (3, &["a".to_owned()][..], true)
        );
    }

    fn args_of(cmd: &Command) -> (String, Vec<String>) {
        let std = cmd.as_std();
        let args = std.get_args().map(|a| a.to_string_lossy().into_owned()).collect();
        (std.get_program().to_string_lossy().into_owned(), args)
    }

    fn removed(cmd: &Command, var: &str) -> bool {
        cmd.as_std().get_envs().any(|(k, v)| k == var && v.is_none())
    }

    #[test]
    fn roles_become_processes_mpirun_worlds_or_job_steps() {
        let exe = Path::new("/bin/temper");
        let args = vec!["trainer".to_owned(), "t.toml".to_owned()];
        let nodes = vec!["a".to_owned(), "b".to_owned()];
        let (program, list) =
            args_of(&Placer::Local.command("trainer", exe, &args, &nodes, 1, "pmix"));
        assert_eq!((program.as_str(), list), ("/bin/temper", args.clone()));
        let (program, list) =
            args_of(&Placer::Local.command("trainer", exe, &args, &nodes, 2, "pmix"));
        assert_eq!(program, "mpirun");
        assert!(list.windows(2).any(|w| w == ["-np", "2"]), "{list:?}");
        assert!(list.ends_with(&["/bin/temper".into(), "trainer".into(), "t.toml".into()]));

        let slurm = Placer::Slurm { job: "7".into(), nodes: nodes.clone() };
        let cmd = slurm.command("trainer", exe, &args, &nodes, 4, "pmix");
        let (program, list) = args_of(&cmd);
        assert_eq!(program, "srun");
        for flag in [
            "--overlap",
            "--nodes=2",
            "--ntasks=4",
            "--nodelist=a,b",
            "--mpi=pmix",
            "--kill-on-bad-exit=1",
        ] {
            assert!(list.contains(&flag.to_owned()), "{flag} missing from {list:?}");
        }
        // The launcher's own rank variables never reach a role, and job steps do not watch a
        // pid of another machine.
        for var in ["SLURM_PROCID", "SLURM_NTASKS", "RANK", "OMPI_COMM_WORLD_SIZE"] {
            assert!(removed(&cmd, var), "{var} is inherited");
        }
        assert!(removed(&cmd, crate::process::SUPERVISOR_PID));
        let one = slurm.command("orchestrator", exe, &args, &nodes[..1], 1, "pmix");
        let (_, list) = args_of(&one);
        assert!(!list.iter().any(|a| a.starts_with("--mpi")), "{list:?}");
        let local = Placer::Local.command("orchestrator", exe, &args, &nodes[..1], 1, "pmix");
        assert!(
            local
                .as_std()
                .get_envs()
                .any(|(k, v)| k == crate::process::SUPERVISOR_PID && v.is_some())
        );
    }

    #[test]
    fn launch_sections_are_checked_and_the_script_is_quoted() {
        let bad = |f: fn(&mut LaunchConfig)| {
            let mut c = LaunchConfig::default();
            f(&mut c);
            c.validate().unwrap_err()
        };
        assert!(bad(|c| c.trainer_ranks = 0).contains("launch.trainer_ranks must be ≥ 1"));
        assert!(bad(|c| c.trainer_nodes = 2).contains("launch.trainer_nodes (2)"));
        assert!(bad(|c| c.srun_mpi = "pmix; rm".into()).contains("launch.srun_mpi"));
        assert!(bad(|c| c.sbatch = vec!["--time=1\n#SBATCH --x".into()]).contains("one line"));
        let cfg =
            LaunchConfig { sbatch: vec!["--partition=gpu".into()], ..LaunchConfig::default() };
        let script = sbatch_script(
            Path::new("/opt/temper"),
            &["it's.toml".to_owned(), "--set".to_owned(), "optim.lr=1e-3".to_owned()],
            &cfg,
            Path::new("/runs/x.slurm-%j.out"),
            Path::new("/home/me"),
        );
        assert!(script.contains("#SBATCH --nodes=2\n"), "{script}");
        assert!(script.contains("#SBATCH --partition=gpu\n"), "{script}");
        assert!(script.contains("#SBATCH --output=/runs/x.slurm-%j.out\n"), "{script}");
        assert!(
            script.ends_with("exec '/opt/temper' rl 'it'\\''s.toml' '--set' 'optim.lr=1e-3'\n"),
            "{script}"
        );
    }
}
