//! `temper doctor`: preflight checks of a machine (or of every node of an allocation) before a
//! run, each saying pass, fail or skip, why, and what to do.
//!
//! - **run directory**: it can be created and written, a file renamed over another atomically,
//!   and its filesystem has room for the run's checkpoints and published weights; its type says
//!   whether other nodes can see it (a local filesystem in a multi-node allocation fails).
//! - **ports**: a port can be bound on all interfaces and reached through the node's name, as
//!   the roles reach each other.
//! - **MPI**: two ranks started by `mpirun` (or `srun --mpi`) sum their ranks with an all-reduce.
//! - **GPUs**: through NVML's `nvidia-smi`: each GPU's memory in use, uncorrected ECC errors and
//!   SM clock against its maximum; NCCL opens (`TEMPER_NCCL_LIB` or the loader) and says its
//!   version, as the trainer opens it.
//! - **cgroups**: the sandbox can make its groups (cgroup v2 with the memory, pids and cpu
//!   controllers delegated, or v1 with a v2 `unified` hierarchy).
//! - **cgroup joins**: whether the kernel (5.7 or later) can start a process inside a cgroup
//!   (`clone3` with `CLONE_INTO_CGROUP`), which is how a sandbox slot's processes enter their
//!   cgroups. An older kernel makes the slot's helper write itself into its v2 group instead,
//!   which the kernel serialises behind its global migration lock: after a quiet spell that
//!   waits for an RCU grace period, 5–12 ms measured on a 2-core VM, paid by every one-shot
//!   `temper sandbox run` and every slot built after a quiet spell. A warning, not a failure.
//!
//! Each check takes its inputs from [`Inputs`], so that tests can break each one on purpose.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream, ToSocketAddrs};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

/// How a check ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// It holds.
    Pass,
    /// It does not: the run would fail or misbehave.
    Fail,
    /// It does not apply here (no GPU, MPI not built).
    Skip,
    /// It does not stop a run, but costs time; the fix says how to avoid it.
    Warn,
}

/// One check's outcome.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Check {
    /// What was checked.
    pub name: &'static str,
    /// How it ended.
    pub verdict: Verdict,
    /// What was found.
    pub detail: String,
    /// What to do about a failure (empty when it passed).
    pub fix: String,
}

impl Check {
    fn pass(name: &'static str, detail: impl Into<String>) -> Self {
        Self { name, verdict: Verdict::Pass, detail: detail.into(), fix: String::new() }
    }
    fn fail(name: &'static str, detail: impl Into<String>, fix: impl Into<String>) -> Self {
        Self { name, verdict: Verdict::Fail, detail: detail.into(), fix: fix.into() }
    }
    fn warn(name: &'static str, detail: impl Into<String>, fix: impl Into<String>) -> Self {
        Self { name, verdict: Verdict::Warn, detail: detail.into(), fix: fix.into() }
    }
    fn skip(name: &'static str, detail: impl Into<String>) -> Self {
        Self { name, verdict: Verdict::Skip, detail: detail.into(), fix: String::new() }
    }
}

/// What the checks look at.
#[derive(Debug, Clone)]
pub struct Inputs {
    /// The run directory (created if missing; a probe file is written and removed).
    pub run_dir: PathBuf,
    /// Bytes the run's checkpoints and weights need on it.
    pub need_bytes: u64,
    /// Nodes of the allocation (one: this machine).
    pub nodes: usize,
    /// Address to bind the port probe on.
    pub bind: String,
    /// The node's name, through which the probe port is reached.
    pub node: String,
    /// The command that starts two MPI ranks of `temper doctor mpi-probe`, or `None` when this
    /// build has no MPI.
    pub mpi: Option<Vec<String>>,
    /// The `nvidia-smi` to ask about GPUs.
    pub nvidia_smi: String,
    /// The cgroup filesystem's root.
    pub cgroup_root: PathBuf,
    /// The kernel's release, as `uname -r` prints it.
    pub kernel: String,
    /// The NCCL library the trainer would open (`TEMPER_NCCL_LIB`), or `None` for the dynamic
    /// loader's search.
    pub nccl_lib: Option<PathBuf>,
}

/// Bytes a run of `cfg` keeps on disk at most, estimated from its model: `keep_weights`
/// published weight folders and two checkpoints (weights and two f32 AdamW moments each), plus a
/// tenth. The parameter count is read from the model's safetensors headers, estimated as two
/// per byte of a `.gguf` (about 4.5 bits a weight), or taken from a `[model.scratch]` spec.
pub fn need_bytes(cfg: &temper_trainer::rl::RlTrainerConfig) -> u64 {
    let params = match (&cfg.model.path, &cfg.model.scratch) {
        (Some(path), _) => param_count(path),
        (None, Some(s)) => {
            let (h, i, l) = (s.hidden_size as u64, s.intermediate_size as u64, s.num_layers as u64);
            l * (4 * h * h + 3 * h * i) + 2 * 512 * h
        }
        (None, None) => 0,
    };
    let dtype_bytes = match cfg.model.dtype.as_deref() {
        Some("bf16" | "f16") => 2,
        _ => 4,
    };
    let weights = params * dtype_bytes;
    let checkpoint = weights + 8 * params;
    let total = cfg.trainer.keep_weights.max(1) as u64 * weights + 2 * checkpoint;
    total + total / 10
}

/// Parameters of the model at `path` (0 when it cannot be read: the model may not exist yet).
fn param_count(path: &Path) -> u64 {
    if path.extension().is_some_and(|e| e == "gguf") {
        return std::fs::metadata(path).map_or(0, |m| m.len() * 2);
    }
    let Ok(entries) = std::fs::read_dir(path) else { return 0 };
    entries
        .flatten()
        .filter(|e| e.path().extension().is_some_and(|x| x == "safetensors"))
        .map(|e| safetensors_elements(&e.path()).unwrap_or(0))
        .sum()
}

/// Elements of every tensor in a safetensors file, from its header.
fn safetensors_elements(path: &Path) -> Option<u64> {
    let mut f = std::fs::File::open(path).ok()?;
    let mut len = [0u8; 8];
    f.read_exact(&mut len).ok()?;
    let len = u64::from_le_bytes(len);
    if len > 100 << 20 {
        return None;
    }
    let mut header = vec![0u8; len as usize];
    f.read_exact(&mut header).ok()?;
    let header: serde_json::Value = serde_json::from_slice(&header).ok()?;
    Some(
        header
            .as_object()?
            .iter()
            .filter(|(k, _)| *k != "__metadata__")
            .filter_map(|(_, t)| t["shape"].as_array())
            .map(|shape| shape.iter().filter_map(serde_json::Value::as_u64).product::<u64>())
            .sum(),
    )
}

/// Runs every check.
pub fn run(inputs: &Inputs) -> Vec<Check> {
    vec![
        run_dir(inputs),
        ports(inputs),
        mpi(inputs),
        gpus(inputs),
        nccl(inputs),
        cgroups(&inputs.cgroup_root),
        cgroup_joins(&inputs.kernel),
    ]
}

/// Filesystem types other nodes can share (network and parallel filesystems).
const SHARED_FS: &[&str] = &[
    "nfs",
    "nfs4",
    "lustre",
    "gpfs",
    "beegfs",
    "cephfs",
    "ceph",
    "glusterfs",
    "fuse.glusterfs",
    "wekafs",
    "fuse.weka",
    "panfs",
    "9p",
    "virtiofs",
    "smb3",
    "cifs",
    "fuse.juicefs",
    "xfs_nfs",
];

/// The filesystem type of the mount holding `path` (the longest matching mount point).
fn fs_type(path: &Path) -> Option<String> {
    let path = std::fs::canonicalize(path).ok()?;
    let mounts = std::fs::read_to_string("/proc/self/mounts").ok()?;
    mounts
        .lines()
        .filter_map(|l| {
            let mut f = l.split_whitespace();
            let (_, point, kind) = (f.next()?, f.next()?, f.next()?);
            let point = point.replace("\\040", " ");
            path.starts_with(&point).then(|| (point.len(), kind.to_owned()))
        })
        .max_by_key(|(len, _)| *len)
        .map(|(_, kind)| kind)
}

fn gib(bytes: u64) -> String {
    if bytes >= 1 << 30 {
        format!("{:.1} GiB", bytes as f64 / (1u64 << 30) as f64)
    } else {
        format!("{:.1} MiB", bytes as f64 / (1u64 << 20) as f64)
    }
}

fn run_dir(inputs: &Inputs) -> Check {
    const NAME: &str = "run directory";
    let dir = &inputs.run_dir;
    if let Err(e) = std::fs::create_dir_all(dir) {
        return Check::fail(
            NAME,
            format!("cannot create {}: {e}", dir.display()),
            "choose an output.dir the run's user may write, on a filesystem every node mounts",
        );
    }
    let probe = dir.join(format!(".temper-doctor-{}", std::process::id()));
    let target = dir.join(format!(".temper-doctor-{}.final", std::process::id()));
    let written = std::fs::write(&probe, b"probe")
        .and_then(|()| std::fs::write(&target, b"old"))
        .and_then(|()| std::fs::rename(&probe, &target))
        .and_then(|()| std::fs::read(&target));
    let _ = std::fs::remove_file(&probe);
    let _ = std::fs::remove_file(&target);
    match written {
        Ok(bytes) if bytes == b"probe" => {}
        Ok(_) => {
            return Check::fail(
                NAME,
                format!("a rename over a file in {} left the old content", dir.display()),
                "use a filesystem with atomic rename (POSIX); weights and checkpoints rely on it",
            );
        }
        Err(e) => {
            return Check::fail(
                NAME,
                format!("cannot write and rename a file in {}: {e}", dir.display()),
                "give the run's user write access to output.dir",
            );
        }
    }
    let free = match nix::sys::statvfs::statvfs(dir) {
        Ok(s) => s.blocks_available() * s.fragment_size(),
        Err(e) => {
            return Check::fail(NAME, format!("statvfs {}: {e}", dir.display()), "check the mount");
        }
    };
    if free < inputs.need_bytes {
        return Check::fail(
            NAME,
            format!(
                "{} free on {}, the run's checkpoints and weights need {}",
                gib(free),
                dir.display(),
                gib(inputs.need_bytes)
            ),
            "free space, move output.dir, or keep fewer (trainer.keep_weights, fewer checkpoints)",
        );
    }
    let kind = fs_type(dir).unwrap_or_else(|| "unknown".into());
    let shared = SHARED_FS.contains(&kind.as_str());
    if inputs.nodes > 1 && !shared {
        return Check::fail(
            NAME,
            format!(
                "{} is on a local {kind} filesystem and the allocation has {} nodes",
                dir.display(),
                inputs.nodes
            ),
            "put output.dir on a filesystem every node mounts (NFS, Lustre, GPFS, …): roles exchange batches and weights through it",
        );
    }
    Check::pass(
        NAME,
        format!(
            "{}: writable, atomic rename, {} free of {} needed, {kind}{}",
            dir.display(),
            gib(free),
            gib(inputs.need_bytes),
            if shared { " (shared)" } else { " (local: one node only)" }
        ),
    )
}

fn ports(inputs: &Inputs) -> Check {
    const NAME: &str = "ports";
    let listener = match TcpListener::bind(&inputs.bind) {
        Ok(l) => l,
        Err(e) => {
            return Check::fail(
                NAME,
                format!("cannot listen on {}: {e}", inputs.bind),
                "the inference servers and metrics listen on free ports: allow binding them",
            );
        }
    };
    let port = match listener.local_addr() {
        Ok(a) => a.port(),
        Err(e) => {
            return Check::fail(NAME, format!("no local address: {e}"), "check the network setup");
        }
    };
    let target = format!("{}:{port}", inputs.node);
    let addrs: Vec<_> = match target.to_socket_addrs() {
        Ok(a) => a.collect(),
        Err(e) => {
            return Check::fail(
                NAME,
                format!("the node name {} does not resolve: {e}", inputs.node),
                "roles reach each other by node name: add it to DNS or /etc/hosts",
            );
        }
    };
    let accept = std::thread::spawn(move || {
        let (mut s, _) = listener.accept()?;
        let mut buf = [0u8; 4];
        s.read_exact(&mut buf)?;
        Ok::<_, std::io::Error>(buf)
    });
    let sent = addrs.iter().find_map(|a| {
        let mut s = TcpStream::connect_timeout(a, Duration::from_secs(3)).ok()?;
        s.write_all(b"ping").ok()
    });
    if sent.is_none() {
        return Check::fail(
            NAME,
            format!("port {port} listens on {} but {target} cannot be reached", inputs.bind),
            "open the firewall between the nodes for the roles' ports",
        );
    }
    match accept.join() {
        Ok(Ok(b)) if &b == b"ping" => {
            Check::pass(NAME, format!("listened on {} and reached it as {target}", inputs.bind))
        }
        _ => Check::fail(
            NAME,
            format!("{target} accepted but the bytes did not arrive"),
            "check the network setup",
        ),
    }
}

/// Runs a probe and collects its output. A program written a moment ago can be "busy" (ETXTBSY)
/// while another thread's freshly forked child still holds the writer's descriptor until it execs;
/// that clears within milliseconds, so the start is tried again a few times before it counts.
fn output(command: &mut Command) -> std::io::Result<std::process::Output> {
    let mut tries = 0;
    loop {
        match command.output() {
            Err(e) if e.kind() == std::io::ErrorKind::ExecutableFileBusy && tries < 20 => {
                tries += 1;
                std::thread::sleep(Duration::from_millis(5 * tries));
            }
            out => return out,
        }
    }
}

fn mpi(inputs: &Inputs) -> Check {
    const NAME: &str = "MPI";
    let Some(cmd) = &inputs.mpi else {
        return Check::skip(
            NAME,
            "this temper was built without the `mpi` feature (one trainer process only)",
        );
    };
    let Some((program, args)) = cmd.split_first() else {
        return Check::skip(NAME, "no MPI launcher");
    };
    let mut command = Command::new(program);
    command.args(args);
    // The probe's ranks get their places from the launcher, not from this process's.
    for var in crate::placement::PLACEMENT_VARS {
        command.env_remove(var);
    }
    let out = output(&mut command);
    let shown = cmd.join(" ");
    match out {
        Err(e) => Check::fail(
            NAME,
            format!("cannot run {program}: {e}"),
            "install Open MPI (Debian: openmpi-bin libopenmpi-dev) or put mpirun on PATH",
        ),
        Ok(o) => {
            let text = String::from_utf8_lossy(&o.stdout);
            if o.status.success()
                && text.lines().filter(|l| l.starts_with("mpi-probe ok world=2 sum=1")).count() == 2
            {
                Check::pass(NAME, format!("{shown}: two ranks summed their ranks"))
            } else {
                let err = String::from_utf8_lossy(&o.stderr);
                let tail: Vec<&str> = err.lines().rev().take(3).collect();
                Check::fail(
                    NAME,
                    format!(
                        "{shown} ({}): {}",
                        o.status,
                        tail.into_iter().rev().collect::<Vec<_>>().join(" | ")
                    ),
                    "check that mpirun starts processes here (or srun --mpi=pmix inside an allocation)",
                )
            }
        }
    }
}

fn gpus(inputs: &Inputs) -> Check {
    const NAME: &str = "GPUs";
    let out = output(Command::new(&inputs.nvidia_smi).args([
            "--query-gpu=index,name,memory.used,memory.total,ecc.errors.uncorrected.volatile.total,clocks.sm,clocks.max.sm",
            "--format=csv,noheader,nounits",
    ]));
    let out = match out {
        Err(_) => {
            return Check::skip(
                NAME,
                format!("no {} (no NVIDIA driver): CPU only", inputs.nvidia_smi),
            );
        }
        Ok(o) if !o.status.success() => {
            return Check::fail(
                NAME,
                format!(
                    "{} failed: {}",
                    inputs.nvidia_smi,
                    String::from_utf8_lossy(&o.stderr).trim()
                ),
                "the NVIDIA driver does not answer: check the driver and the devices",
            );
        }
        Ok(o) => String::from_utf8_lossy(&o.stdout).into_owned(),
    };
    let mut seen = Vec::new();
    for line in out.lines().filter(|l| !l.trim().is_empty()) {
        let f: Vec<&str> = line.split(',').map(str::trim).collect();
        if f.len() < 7 {
            return Check::fail(
                NAME,
                format!("unexpected nvidia-smi line {line:?}"),
                "check the driver version",
            );
        }
        let num = |s: &str| s.parse::<f64>().ok();
        if let Some(ecc) = num(f[4]).filter(|e| *e > 0.0) {
            return Check::fail(
                NAME,
                format!("GPU {} ({}) has {ecc} uncorrected ECC errors", f[0], f[1]),
                "drain the node and reset or replace the GPU",
            );
        }
        if let (Some(used), Some(total)) = (num(f[2]), num(f[3]))
            && used > 0.1 * total
        {
            return Check::fail(
                NAME,
                format!("GPU {} ({}) has {used} of {total} MiB in use before the run", f[0], f[1]),
                "another process holds the GPU: find it with nvidia-smi and stop it",
            );
        }
        seen.push(format!("{} {} ({} MiB, SM {}/{} MHz)", f[0], f[1], f[3], f[5], f[6]));
    }
    if seen.is_empty() {
        return Check::fail(NAME, "nvidia-smi lists no GPU", "check the driver and the devices");
    }
    Check::pass(NAME, seen.join("; "))
}

fn nccl(inputs: &Inputs) -> Check {
    const NAME: &str = "NCCL";
    if output(Command::new(&inputs.nvidia_smi).arg("-L")).is_err() {
        return Check::skip(NAME, "no GPU");
    }
    // Opened as the trainer's ranks on GPUs open it, and asked its version.
    let lib = temper_trainer::nccl::Library::load_from(inputs.nccl_lib.as_deref());
    match lib.and_then(|l| Ok((l.version()?, l.path().to_owned()))) {
        Ok(((major, minor, patch), path)) => {
            Check::pass(NAME, format!("NCCL {major}.{minor}.{patch} ({path})"))
        }
        Err(e) => Check::fail(
            NAME,
            e.to_string(),
            "install NCCL (Debian: libnccl2; PyPI: nvidia-nccl-cu13) and set TEMPER_NCCL_LIB to its libnccl.so.2, or add its folder to LD_LIBRARY_PATH",
        ),
    }
}

fn cgroups(root: &Path) -> Check {
    const NAME: &str = "cgroups";
    let controllers = std::fs::read_to_string(root.join("cgroup.controllers")).unwrap_or_default();
    let has = |c: &str| controllers.split_whitespace().any(|x| x == c);
    let probe_name = format!("temper-doctor-{}", std::process::id());
    // Whether a group can be made under `parent`, where `found` describes the layout.
    let try_group = |parent: &Path, found: String, fix: &str| {
        let probe = parent.join(&probe_name);
        match std::fs::create_dir(&probe) {
            Ok(()) => {
                let _ = std::fs::remove_dir(&probe);
                Check::pass(NAME, format!("{found}; groups can be made"))
            }
            Err(e) => Check::fail(NAME, format!("{found} but a group cannot be made: {e}"), fix),
        }
    };
    if ["memory", "pids", "cpu"].iter().all(|c| has(c)) {
        return try_group(
            root,
            format!("cgroup v2 at {} with memory, pids and cpu", root.display()),
            "delegate a cgroup subtree to the run's user (systemd: Delegate=yes), or run the sandbox as root",
        );
    }
    let hybrid = ["memory", "pids", "cpu", "unified"].iter().all(|d| root.join(d).is_dir());
    if hybrid {
        return try_group(
            &root.join("memory"),
            format!("v1 memory, pids and cpu with v2 at {}/unified", root.display()),
            "run the sandbox as root, or delegate the memory, pids and cpu hierarchies",
        );
    }
    Check::fail(
        NAME,
        format!(
            "no usable cgroups under {}: {}",
            root.display(),
            if controllers.is_empty() {
                "no cgroup v2 controllers"
            } else {
                "the memory, pids or cpu controller is missing"
            }
        ),
        "mount cgroup v2 with the memory, pids and cpu controllers enabled (or v1 with a v2 `unified` hierarchy); the sandbox limits and kills model-written code through them",
    )
}

/// Whether the kernel of release `kernel` can start a process inside a cgroup
/// (`CLONE_INTO_CGROUP`, Linux 5.7), so that sandbox slots join their cgroups without the
/// kernel's global migration lock.
fn cgroup_joins(kernel: &str) -> Check {
    const NAME: &str = "cgroup joins";
    let mut parts = kernel.split(|c: char| !c.is_ascii_digit());
    let version = match (parts.next().map(str::parse::<u32>), parts.next().map(str::parse::<u32>)) {
        (Some(Ok(major)), Some(Ok(minor))) => (major, minor),
        _ => {
            return Check::skip(
                NAME,
                format!("cannot read a version from kernel release `{kernel}`"),
            );
        }
    };
    if version >= (5, 7) {
        return Check::pass(
            NAME,
            format!(
                "Linux {}.{} starts sandbox processes inside their cgroups (clone3 with CLONE_INTO_CGROUP)",
                version.0, version.1
            ),
        );
    }
    Check::warn(
        NAME,
        format!(
            "Linux {}.{} cannot start a process inside a cgroup: each sandbox slot joins its group \
             through the kernel's global migration lock, which after a quiet spell waits an RCU grace \
             period (5-12 ms measured on a 2-core VM)",
            version.0, version.1
        ),
        "run on Linux 5.7 or later (in a container, a seccomp profile must also allow clone3)",
    )
}

/// The table `temper doctor` prints.
pub fn table(checks: &[Check]) -> String {
    let mut out = String::new();
    for c in checks {
        let mark = match c.verdict {
            Verdict::Pass => "pass",
            Verdict::Fail => "FAIL",
            Verdict::Skip => "skip",
            Verdict::Warn => "warn",
        };
        out.push_str(&format!("{mark}  {:<14} {}\n", c.name, c.detail));
        if !c.fix.is_empty() {
            out.push_str(&format!("      {:<14} → {}\n", "", c.fix));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn inputs(dir: &Path) -> Inputs {
        Inputs {
            run_dir: dir.join("run"),
            need_bytes: 1 << 20,
            nodes: 1,
            bind: "127.0.0.1:0".into(),
            node: "localhost".into(),
            mpi: None,
            nvidia_smi: dir.join("no-nvidia-smi").to_string_lossy().into_owned(),
            cgroup_root: dir.join("cgroup"),
            kernel: String::new(),
            nccl_lib: None,
        }
    }

    fn script(dir: &Path, name: &str, body: &str) -> String {
        let path = dir.join(name);
        std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        path.to_string_lossy().into_owned()
    }

    fn failed(check: &Check, words: &str) {
        assert_eq!(check.verdict, Verdict::Fail, "{check:?}");
        assert!(check.detail.contains(words), "{check:?}");
        assert!(!check.fix.is_empty(), "{check:?}");
    }

    #[test]
    fn the_run_directory_check_names_each_broken_condition() {
        let tmp = tempfile::tempdir().unwrap();
        let ok = inputs(tmp.path());
        assert_eq!(run_dir(&ok).verdict, Verdict::Pass, "{:?}", run_dir(&ok));
        std::fs::write(tmp.path().join("file"), b"").unwrap();
        let under_a_file = Inputs { run_dir: tmp.path().join("file/run"), ..ok.clone() };
        failed(&run_dir(&under_a_file), "cannot create");
        let too_big = Inputs { need_bytes: u64::MAX / 2, ..ok.clone() };
        failed(&run_dir(&too_big), "need");
        // A temporary folder is local: fine for one node, not for two.
        let two_nodes = Inputs { nodes: 2, ..ok };
        failed(&run_dir(&two_nodes), "local");
    }

    #[test]
    fn the_port_check_fails_to_bind_or_to_resolve() {
        let tmp = tempfile::tempdir().unwrap();
        let ok = inputs(tmp.path());
        assert_eq!(ports(&ok).verdict, Verdict::Pass, "{:?}", ports(&ok));
        // TEST-NET-1 is on no interface of this machine.
        failed(&ports(&Inputs { bind: "192.0.2.1:0".into(), ..ok.clone() }), "cannot listen");
        failed(&ports(&Inputs { node: "no-such-node.invalid".into(), ..ok }), "does not resolve");
    }

    #[test]
    fn the_mpi_check_needs_both_ranks_to_report() {
        let tmp = tempfile::tempdir().unwrap();
        let ok = inputs(tmp.path());
        assert_eq!(mpi(&ok).verdict, Verdict::Skip);
        let both = script(
            tmp.path(),
            "two",
            "echo 'mpi-probe ok world=2 sum=1'; echo 'mpi-probe ok world=2 sum=1'",
        );
        assert_eq!(mpi(&Inputs { mpi: Some(vec![both]), ..ok.clone() }).verdict, Verdict::Pass);
        let one = script(
            tmp.path(),
            "one",
            "echo 'mpi-probe ok world=2 sum=1'; echo 'rank 1 died' >&2; exit 1",
        );
        failed(&mpi(&Inputs { mpi: Some(vec![one]), ..ok.clone() }), "rank 1 died");
        failed(&mpi(&Inputs { mpi: Some(vec!["/nonexistent/mpirun".into()]), ..ok }), "cannot run");
    }

    #[test]
    fn the_gpu_check_reads_memory_ecc_and_clocks() {
        let tmp = tempfile::tempdir().unwrap();
        let ok = inputs(tmp.path());
        assert_eq!(gpus(&ok).verdict, Verdict::Skip);
        assert_eq!(nccl(&ok).verdict, Verdict::Skip);
        let smi = |name: &str, line: &str| script(tmp.path(), name, &format!("echo '{line}'"));
        let healthy = smi("healthy", "0, NVIDIA H200, 5, 143771, 0, 1980, 1980");
        let c = gpus(&Inputs { nvidia_smi: healthy.clone(), ..ok.clone() });
        assert_eq!(c.verdict, Verdict::Pass, "{c:?}");
        assert!(c.detail.contains("H200") && c.detail.contains("143771"), "{c:?}");
        let ecc = smi("ecc", "0, NVIDIA H200, 5, 143771, 3, 1980, 1980");
        failed(&gpus(&Inputs { nvidia_smi: ecc, ..ok.clone() }), "3 uncorrected ECC errors");
        let busy = smi("busy", "1, NVIDIA H200, 90000, 143771, 0, 1980, 1980");
        failed(&gpus(&Inputs { nvidia_smi: busy, ..ok.clone() }), "in use before the run");
        let broken = script(tmp.path(), "broken", "echo 'NVIDIA-SMI has failed' >&2; exit 9");
        failed(&gpus(&Inputs { nvidia_smi: broken, ..ok.clone() }), "NVIDIA-SMI has failed");
        // With a GPU, NCCL must open and say its version: a file that is not NCCL fails, and
        // PyPI's NCCL (scripts/fetch-assets; TEMPER_TEST_NCCL_LIB) passes.
        let not_nccl = tmp.path().join("libnccl.so.2");
        std::fs::write(&not_nccl, b"not a library").unwrap();
        let with = |lib: &Path| Inputs {
            nvidia_smi: healthy.clone(),
            nccl_lib: Some(lib.to_owned()),
            ..ok.clone()
        };
        let c = nccl(&with(&not_nccl));
        failed(&c, "cannot load NCCL");
        assert!(c.fix.contains("TEMPER_NCCL_LIB"), "{c:?}");
        // A folder holding something else named libnccl.so.2 is tried as that file.
        failed(&nccl(&with(tmp.path())), &not_nccl.display().to_string());
        if let Some(lib) = std::env::var_os("TEMPER_TEST_NCCL_LIB") {
            let c = nccl(&with(Path::new(&lib)));
            assert_eq!(c.verdict, Verdict::Pass, "{c:?}");
            assert!(c.detail.starts_with("NCCL 2."), "{c:?}");
        }
    }

    #[test]
    fn the_cgroup_check_wants_controllers_and_a_group_it_can_make() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("cgroup");
        std::fs::create_dir_all(&root).unwrap();
        failed(&cgroups(&root), "no usable cgroups");
        std::fs::write(root.join("cgroup.controllers"), "cpuset cpu io memory").unwrap();
        failed(&cgroups(&root), "controller is missing");
        std::fs::write(root.join("cgroup.controllers"), "cpuset cpu io memory pids").unwrap();
        assert_eq!(cgroups(&root).verdict, Verdict::Pass, "{:?}", cgroups(&root));
        let v1 = tmp.path().join("v1");
        for d in ["memory", "pids", "cpu", "unified"] {
            std::fs::create_dir_all(v1.join(d)).unwrap();
        }
        assert_eq!(cgroups(&v1).verdict, Verdict::Pass, "{:?}", cgroups(&v1));
    }

    #[test]
    fn cgroup_joins_need_linux_5_7() {
        let c = cgroup_joins("6.18.44-fc-v1300");
        assert_eq!(c.verdict, Verdict::Pass, "{c:?}");
        assert!(c.detail.starts_with("Linux 6.18 starts"), "{c:?}");
        assert_eq!(cgroup_joins("5.7.0").verdict, Verdict::Pass);
        // 5.10 is later than 5.7, though "5.10" < "5.7" as text.
        assert_eq!(cgroup_joins("5.10.0-28-amd64").verdict, Verdict::Pass);
        let c = cgroup_joins("5.4.0-150-generic");
        assert_eq!(c.verdict, Verdict::Warn, "{c:?}");
        assert!(c.detail.starts_with("Linux 5.4 cannot"), "{c:?}");
        assert!(c.fix.contains("5.7 or later"), "{c:?}");
        assert_eq!(cgroup_joins("4.19.0").verdict, Verdict::Warn);
        assert_eq!(cgroup_joins("").verdict, Verdict::Skip);
        assert_eq!(cgroup_joins("linux").verdict, Verdict::Skip);
        let t = table(&[cgroup_joins("5.4.0")]);
        assert!(t.starts_with("warn  cgroup joins"), "{t}");
    }

    #[test]
    fn the_space_needed_follows_the_model_and_what_is_kept() {
        let tmp = tempfile::tempdir().unwrap();
        // A safetensors file of one 1000 × 1000 tensor: a million parameters.
        let header = br#"{"w":{"dtype":"F32","shape":[1000,1000],"data_offsets":[0,0]}}"#;
        let mut bytes = (header.len() as u64).to_le_bytes().to_vec();
        bytes.extend_from_slice(header);
        std::fs::write(tmp.path().join("model.safetensors"), bytes).unwrap();
        let text = format!("[model]\npath = {:?}\n[trainer]\nkeep_weights = 3\n", tmp.path());
        let cfg: temper_trainer::rl::RlTrainerConfig = toml::from_str(&text).unwrap();
        // 3 weight folders of 4 MB, 2 checkpoints of 4 MB + 8 MB, and a tenth more.
        let exact = 3 * 4_000_000 + 2 * 12_000_000;
        assert_eq!(need_bytes(&cfg), exact + exact / 10);
    }
}
