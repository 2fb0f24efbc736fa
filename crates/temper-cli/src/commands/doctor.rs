//! `temper doctor [CONFIG]`: preflight checks (`temper_launch::doctor`).

use std::path::PathBuf;

use anyhow::Context;
use temper_launch::doctor::{self, Inputs, Verdict};
use temper_launch::{Placer, RlPlan};
use temper_protocol::exposition::Identity;

use crate::args::DoctorArgs;

pub fn run(args: DoctorArgs) -> anyhow::Result<()> {
    if args.mpi_probe {
        return mpi_probe();
    }
    let plan = match args.config {
        Some(c) => Some(RlPlan::load(&c, &args.set)?),
        None => None,
    };
    let run_dir = args
        .run_dir
        .or_else(|| plan.as_ref().map(|p| p.trainer.output.dir.clone()))
        .unwrap_or_else(|| PathBuf::from("outputs/rl"));
    let need_bytes = plan.as_ref().map_or(0, |p| doctor::need_bytes(&p.trainer));
    let placement = plan.as_ref().map(|p| p.launch.placement).unwrap_or_default();
    let placer = Placer::from_env(placement).map_err(|e| anyhow::anyhow!(e))?;
    let nodes = match &placer {
        Placer::Local => 1,
        Placer::Slurm { nodes, .. } => nodes.len(),
    };
    let exe = std::env::current_exe().context("cannot find the temper binary")?;
    let node = Identity::of_process("doctor").node;
    // Two ranks placed as a run's trainer would be: mpirun here, a job step in an allocation.
    let mpi = cfg!(feature = "mpi").then(|| {
        let args = ["doctor".to_owned(), "--mpi-probe".to_owned()];
        let cmd = placer.command("doctor", &exe, &args, std::slice::from_ref(&node), 2, "pmix");
        let cmd = cmd.as_std();
        std::iter::once(cmd.get_program())
            .chain(cmd.get_args())
            .map(|a| a.to_string_lossy().into_owned())
            .collect::<Vec<String>>()
    });
    let inputs = Inputs {
        run_dir,
        need_bytes,
        nodes,
        bind: "0.0.0.0:0".into(),
        node,
        mpi,
        nvidia_smi: "nvidia-smi".into(),
        cgroup_root: PathBuf::from("/sys/fs/cgroup"),
        kernel: std::fs::read_to_string("/proc/sys/kernel/osrelease")
            .map(|r| r.trim().to_owned())
            .unwrap_or_default(),
        nccl_lib: std::env::var_os(temper_trainer::nccl::LIB_VAR)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from),
    };
    let checks = doctor::run(&inputs);
    print!("{}", doctor::table(&checks));
    let failed = checks.iter().filter(|c| c.verdict == Verdict::Fail).count();
    if failed > 0 {
        anyhow::bail!("{failed} check(s) failed on {}", inputs.node);
    }
    println!("all checks passed on {}", inputs.node);
    Ok(())
}

#[cfg(feature = "mpi")]
fn mpi_probe() -> anyhow::Result<()> {
    use temper_trainer::Collective;
    use temper_trainer::mpi::Mpi;
    let (_session, mpi) = Mpi::init().map_err(|e| anyhow::anyhow!("MPI: {e}"))?;
    let mut v = [mpi.rank() as f64];
    mpi.all_reduce_f64(&mut v)?;
    println!("mpi-probe ok world={} sum={}", mpi.world_size(), v[0]);
    Ok(())
}

#[cfg(not(feature = "mpi"))]
fn mpi_probe() -> anyhow::Result<()> {
    anyhow::bail!("this temper was built without the `mpi` feature")
}
