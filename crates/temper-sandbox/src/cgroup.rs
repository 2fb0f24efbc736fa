//! Per-slot cgroups: memory, PIDs and CPU limits, peak memory, OOM kills, and killing a whole
//! slot at once.
//!
//! Two layouts are supported. Pure cgroup v2 (production hosts): one group per slot under
//! `/sys/fs/cgroup/temper`, with the memory, pids and cpu controllers enabled there. The hybrid
//! layout of this project's machine: v1 hierarchies hold the memory, pids and cpu controllers,
//! and the v2 hierarchy at `/sys/fs/cgroup/unified` (no controllers) provides `cgroup.kill`.
//!
//! The supervisor creates a slot's groups and sets their limits; the slot's helper joins them
//! itself (see [`SlotCgroups`] for why). Its first process, which only waits for init, is in the
//! v1 groups but not in the v2 group: a kill through `cgroup.kill` ends init and everything in
//! the slot, and that first process then exits by itself.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use crate::wire::SlotCgroups;

const ROOT: &str = "/sys/fs/cgroup";
const GROUP: &str = "temper";

/// The hierarchies of the hybrid layout, in the order a slot's groups are kept: the v1
/// controllers, then the v2 hierarchy last.
const HYBRID: [&str; 4] = ["memory", "pids", "cpu", "unified"];

/// Which layout the host has.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Layout {
    /// One v2 hierarchy with the controllers.
    V2,
    /// v1 controllers plus a v2 hierarchy at `unified` for kills.
    Hybrid,
}

/// Detects the layout and prepares the `temper` parent groups; the error says what is missing.
pub fn detect() -> Result<Layout, String> {
    let v2_controllers =
        fs::read_to_string(format!("{ROOT}/cgroup.controllers")).unwrap_or_default();
    if ["memory", "pids", "cpu"].iter().all(|c| v2_controllers.split_whitespace().any(|x| x == *c))
    {
        let parent = format!("{ROOT}/{GROUP}");
        mkdir(&parent).map_err(|e| format!("cannot create {parent}: {e}"))?;
        // Enable the controllers for the slots below, in the root and in our parent.
        for dir in [ROOT.to_owned(), parent.clone()] {
            let _ = fs::write(format!("{dir}/cgroup.subtree_control"), "+memory +pids +cpu");
        }
        sweep(&parent, None);
        return Ok(Layout::V2);
    }
    let hybrid = HYBRID.iter().all(|d| Path::new(&format!("{ROOT}/{d}")).is_dir());
    if hybrid {
        for d in HYBRID {
            let parent = format!("{ROOT}/{d}/{GROUP}");
            mkdir(&parent).map_err(|e| format!("cannot create {parent}: {e}"))?;
        }
        let unified = format!("{ROOT}/unified/{GROUP}");
        for d in ["unified", "memory", "pids", "cpu"] {
            sweep(&format!("{ROOT}/{d}/{GROUP}"), Some(&unified));
        }
        return Ok(Layout::Hybrid);
    }
    Err(format!(
        "no usable cgroups under {ROOT}: need cgroup v2 with memory, pids and cpu, or v1 with a v2 `unified` hierarchy"
    ))
}

/// Removes slot groups left by supervisors that died (their pid, in the group's name, is gone).
fn sweep(parent: &str, unified: Option<&str>) {
    let Ok(entries) = fs::read_dir(parent) else { return };
    for entry in entries.filter_map(|e| e.ok()) {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(pid) = name.strip_prefix("slot-").and_then(|r| r.split('-').next()) else {
            continue;
        };
        if Path::new(&format!("/proc/{pid}")).exists() {
            continue;
        }
        remove_group(&entry.path(), unified);
    }
}

/// Kills what is left in the slot group at `path` (through its `unified` twin on hybrid
/// layouts) and removes it, retrying briefly while the last processes exit.
fn remove_group(path: &Path, unified: Option<&str>) {
    let kill = match (unified, path.file_name()) {
        (Some(unified), Some(name)) => Path::new(unified).join(name).join("cgroup.kill"),
        _ => path.join("cgroup.kill"),
    };
    let _ = fs::write(kill, "1");
    for _ in 0..100 {
        match fs::remove_dir(path) {
            // Gone already counts: the reaper and a later supervisor's sweep may both get here.
            Err(e) if e.kind() != io::ErrorKind::NotFound => {
                std::thread::sleep(std::time::Duration::from_millis(5))
            }
            _ => break,
        }
    }
}

/// The reaper's work (`isolation::REAPER_ARG`): blocks until standard input, a pipe whose
/// write end only `supervisor` holds, reads end-of-file, then removes `supervisor`'s slot groups,
/// killing what is left in them, for up to ten seconds.
pub fn reap_after(supervisor: u32) {
    let mut sink = [0u8; 64];
    loop {
        match rustix::io::read(rustix::stdio::stdin(), &mut sink) {
            Ok(0) => break,
            Ok(_) => continue,
            Err(rustix::io::Errno::INTR) => continue,
            Err(_) => break,
        }
    }
    let prefix = format!("slot-{supervisor}-");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while std::time::Instant::now() < deadline {
        let parents = [
            format!("{ROOT}/{GROUP}"),
            format!("{ROOT}/memory/{GROUP}"),
            format!("{ROOT}/pids/{GROUP}"),
            format!("{ROOT}/cpu/{GROUP}"),
            format!("{ROOT}/unified/{GROUP}"),
        ];
        let unified = Path::new(&parents[4]).is_dir().then(|| parents[4].clone());
        let mut left = 0;
        for parent in &parents {
            let Ok(entries) = fs::read_dir(parent) else { continue };
            // End-of-file proved the supervisor gone, even while it is a zombie that still has
            // a /proc entry (the check `sweep` makes): remove its groups directly.
            for entry in entries.filter_map(|e| e.ok()) {
                if entry.file_name().to_string_lossy().starts_with(&prefix) {
                    remove_group(&entry.path(), unified.as_deref());
                    left += usize::from(entry.path().exists());
                }
            }
        }
        if left == 0 {
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

fn mkdir(path: &str) -> io::Result<()> {
    match fs::create_dir(path) {
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(()),
        other => other,
    }
}

/// The cgroups of one slot.
#[derive(Debug)]
pub struct SlotGroups {
    layout: Layout,
    dirs: Vec<PathBuf>,
}

/// Limits applied to a slot's cgroups.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GroupLimits {
    /// Memory in bytes (no swap).
    pub memory_bytes: u64,
    /// Most processes and threads.
    pub pids: u64,
    /// CPU bandwidth in hundredths of a CPU (100 = one CPU).
    pub cpu_percent: u64,
}

impl SlotGroups {
    /// The name prefix of every slot group of sandbox `instance` in this process.
    pub fn prefix(instance: u64) -> String {
        format!("slot-{}-{instance}-", std::process::id())
    }

    /// Creates the groups of slot `id` of sandbox `instance`.
    pub fn create(layout: &Layout, instance: u64, id: u64) -> io::Result<Self> {
        let name = format!("{}{id}", Self::prefix(instance));
        let dirs: Vec<PathBuf> = match layout {
            Layout::V2 => vec![PathBuf::from(format!("{ROOT}/{GROUP}/{name}"))],
            Layout::Hybrid => {
                HYBRID.iter().map(|d| PathBuf::from(format!("{ROOT}/{d}/{GROUP}/{name}"))).collect()
            }
        };
        for dir in &dirs {
            fs::create_dir(dir)?;
        }
        Ok(Self { layout: layout.clone(), dirs })
    }

    fn file(&self, controller: &str, name: &str) -> PathBuf {
        match self.layout {
            Layout::V2 => self.dirs[0].join(name),
            Layout::Hybrid => {
                let i = HYBRID.iter().position(|c| *c == controller).unwrap_or(3);
                self.dirs[i].join(name)
            }
        }
    }

    /// Sets the limits; the error names the file that refused its value.
    pub fn set_limits(&self, limits: GroupLimits) -> io::Result<()> {
        let put = |path: PathBuf, value: String| {
            fs::write(&path, &value)
                .map_err(|e| io::Error::new(e.kind(), format!("{} = {value}: {e}", path.display())))
        };
        let period = 100_000u64;
        let quota = period * limits.cpu_percent / 100;
        let memory = limits.memory_bytes.to_string();
        match self.layout {
            Layout::V2 => {
                put(self.file("memory", "memory.max"), memory)?;
                let _ = fs::write(self.file("memory", "memory.swap.max"), "0");
                put(self.file("pids", "pids.max"), limits.pids.to_string())?;
                put(self.file("cpu", "cpu.max"), format!("{quota} {period}"))?;
            }
            Layout::Hybrid => {
                // memory+swap may never be below memory: raise it first, or lower it last.
                let (mem, memsw) = (
                    self.file("memory", "memory.limit_in_bytes"),
                    self.file("memory", "memory.memsw.limit_in_bytes"),
                );
                if fs::write(&memsw, &memory).is_ok() {
                    put(mem, memory)?;
                } else {
                    put(mem, memory.clone())?;
                    let _ = fs::write(&memsw, &memory);
                }
                put(self.file("pids", "pids.max"), limits.pids.to_string())?;
                put(self.file("cpu", "cpu.cfs_period_us"), period.to_string())?;
                put(self.file("cpu", "cpu.cfs_quota_us"), quota.to_string())?;
            }
        }
        Ok(())
    }

    /// What the slot's helper needs to join these groups itself (see [`SlotCgroups`]).
    pub fn for_helper(&self, clone_into: bool) -> SlotCgroups {
        let path = |d: &PathBuf| d.to_string_lossy().into_owned();
        let (v1, v2) = match self.layout {
            Layout::V2 => (Vec::new(), path(&self.dirs[0])),
            // The v2 hierarchy is last in `HYBRID`.
            Layout::Hybrid => {
                let (v2, v1) = self.dirs.split_last().expect("one group per hierarchy");
                (v1.iter().map(path).collect(), path(v2))
            }
        };
        SlotCgroups { v1, v2, clone_into }
    }

    /// Resets the peak-memory counter (v1 always; v2 on kernels that accept a write to
    /// `memory.peak`).
    pub fn reset_peak(&self) {
        let name =
            if self.layout == Layout::V2 { "memory.peak" } else { "memory.max_usage_in_bytes" };
        let _ = fs::write(self.file("memory", name), "0");
    }

    /// Peak memory in KiB since the slot began (or the last reset).
    pub fn peak_kb(&self) -> u64 {
        let name =
            if self.layout == Layout::V2 { "memory.peak" } else { "memory.max_usage_in_bytes" };
        fs::read_to_string(self.file("memory", name))
            .ok()
            .and_then(|s| s.trim().parse::<u64>().ok())
            .unwrap_or(0)
            / 1024
    }

    /// How many times the OOM killer acted in this slot.
    pub fn oom_kills(&self) -> u64 {
        let (name, key) = if self.layout == Layout::V2 {
            ("memory.events", "oom_kill")
        } else {
            ("memory.oom_control", "oom_kill")
        };
        fs::read_to_string(self.file("memory", name))
            .unwrap_or_default()
            .lines()
            .find_map(|l| l.strip_prefix(key).and_then(|v| v.trim().parse().ok()))
            .unwrap_or(0)
    }

    /// Kills every process in the slot at once.
    pub fn kill(&self) -> io::Result<()> {
        fs::write(self.file("unified", "cgroup.kill"), "1")
    }

    /// Whether no process is left in the slot.
    pub fn is_empty(&self) -> bool {
        fs::read_to_string(self.file("unified", "cgroup.procs")).is_ok_and(|s| s.trim().is_empty())
    }

    /// Removes the groups (they must be empty); retries briefly while the kernel finishes the
    /// last exits.
    pub fn remove(&self) -> io::Result<()> {
        let mut last = Ok(());
        for dir in &self.dirs {
            for attempt in 0..200 {
                match fs::remove_dir(dir) {
                    Ok(()) => break,
                    Err(e) if e.kind() == io::ErrorKind::NotFound => break,
                    Err(e) => {
                        if attempt == 199 {
                            last = Err(e);
                        }
                        std::thread::sleep(std::time::Duration::from_millis(1));
                    }
                }
            }
        }
        last
    }
}
