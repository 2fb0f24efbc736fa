//! Sandbox configuration, with defaults that work on a Debian-like host.
//!
//! Every limit has a ceiling: what a run asks for (a request, an environment package's reward
//! settings) is clamped to `max_*`, and [`SandboxConfig::validate`] refuses a configuration whose
//! own values pass the fixed [`HARD_LIMITS`] or would overflow when turned into bytes.

use std::path::{Path, PathBuf};

/// The default ceiling of a run's wall-clock limit (`SandboxConfig::max_time_limit_ms`; the
/// unsandboxed runner's fixed one).
pub const DEFAULT_MAX_TIME_LIMIT_MS: u64 = 60_000;
/// The default ceiling of a run's memory, in MiB.
pub const DEFAULT_MAX_MEMORY_MB: u64 = 4096;
/// The default ceiling of the output kept per stream.
pub const DEFAULT_MAX_OUTPUT_BYTES: u64 = 8 << 20;

/// How the sandbox is built and what it allows by default.
#[derive(Debug, Clone)]
pub struct SandboxConfig {
    /// The program that becomes the slot helper, and the arguments before the socket and spec
    /// (by default this executable with `__sandbox-slot`).
    pub helper: (PathBuf, Vec<String>),
    /// Host paths bound read-only inside, at the same place.
    pub ro_binds: Vec<String>,
    /// Symbolic links made inside (merged-/usr hosts: `/bin` → `usr/bin`, ...).
    pub symlinks: Vec<(String, String)>,
    /// Host uid (and gid) that root inside a sandbox maps to.
    pub host_root_uid: u32,
    /// Host uid (and gid) that sandboxed programs map to.
    pub host_user_uid: u32,
    /// Uid (and gid) of sandboxed programs inside.
    pub inner_uid: u32,
    /// Size of `/work` in MiB.
    pub work_mb: u64,
    /// Size of `/tmp` in MiB.
    pub tmp_mb: u64,
    /// Wall-clock limit when a request sets none, in ms.
    pub time_limit_ms: u64,
    /// Memory limit when a request sets none, in MiB.
    pub memory_mb: u64,
    /// Output cap per stream when a request sets none, in bytes.
    pub output_bytes: u64,
    /// Most processes and threads in one sandbox.
    pub pids: u64,
    /// CPU share of one sandbox, in hundredths of a CPU.
    pub cpu_percent: u64,
    /// Most open files per process.
    pub nofile: u64,
    /// Largest file a program may write, in bytes.
    pub fsize: u64,
    /// The longest wall-clock limit any run gets, in ms: a request or package that asks for more
    /// gets this.
    pub max_time_limit_ms: u64,
    /// The most memory any run gets, in MiB (clamped like `max_time_limit_ms`).
    pub max_memory_mb: u64,
    /// The most output kept per stream of any run, in bytes (clamped likewise). A result holds
    /// two streams, so this also bounds a response: `/v1/run_tests` shares one such budget across
    /// its tests (see [`crate::server`]).
    pub max_output_bytes: u64,
    /// Warm slots kept ready.
    pub pool_size: usize,
    /// Slots built at once by the pool.
    pub pool_builders: usize,
    /// Runs a slot serves (reset to a fresh state between them) before it is rebuilt.
    pub max_runs_per_slot: u32,
    /// Keep a pre-imported Python in every slot and run Python programs in a fork of it (no
    /// interpreter start per run). Its runs share an IPC namespace, so they may not use System V
    /// IPC or POSIX message queues.
    pub python_preimport: bool,
    /// Start each slot's init inside its cgroup v2 group with `clone3(CLONE_INTO_CGROUP)`
    /// (default). False makes the helper write itself into the group instead, which the
    /// kernel serialises behind a lock that costs 5–12 ms after a quiet spell; the helper falls
    /// back to that on its own when the kernel refuses `clone3`.
    pub clone_into_cgroup: bool,
    /// Interpreters and compilers.
    pub python: String,
    /// Bash.
    pub bash: String,
    /// The C compiler.
    pub cc: String,
    /// The C++ compiler.
    pub cxx: String,
}

impl Default for SandboxConfig {
    fn default() -> Self {
        // The small helper binary next to this executable starts faster than a large one that
        // contains the helper too (the `temper` binary); either works.
        let exe = std::env::current_exe().unwrap_or_else(|_| PathBuf::from("/proc/self/exe"));
        let sibling = exe.with_file_name("temper-sandbox-slot");
        let helper = if sibling.is_file() { sibling } else { exe };
        let mut ro_binds = vec!["/usr".to_owned()];
        let mut symlinks = Vec::new();
        for dir in ["/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"] {
            let path = Path::new(dir);
            match std::fs::read_link(path) {
                Ok(target) => {
                    symlinks.push((dir.to_owned(), target.to_string_lossy().into_owned()))
                }
                Err(_) if path.is_dir() => ro_binds.push(dir.to_owned()),
                Err(_) => {}
            }
        }
        for file in ["/etc/ld.so.cache", "/etc/alternatives", "/etc/localtime"] {
            if Path::new(file).exists() {
                ro_binds.push(file.to_owned());
            }
        }
        Self {
            helper: (helper, vec![crate::isolation::HELPER_ARG.to_owned()]),
            ro_binds,
            symlinks,
            host_root_uid: 1_000_000,
            host_user_uid: 1_000_001,
            inner_uid: 1000,
            work_mb: 64,
            tmp_mb: 64,
            time_limit_ms: 5_000,
            memory_mb: 256,
            output_bytes: 1 << 20,
            max_time_limit_ms: DEFAULT_MAX_TIME_LIMIT_MS,
            max_memory_mb: DEFAULT_MAX_MEMORY_MB,
            max_output_bytes: DEFAULT_MAX_OUTPUT_BYTES,
            pids: 64,
            cpu_percent: 100,
            nofile: 256,
            fsize: 64 << 20,
            pool_size: 8,
            pool_builders: 2,
            max_runs_per_slot: 64,
            python_preimport: false,
            clone_into_cgroup: true,
            python: "/usr/bin/python3".into(),
            bash: "/bin/bash".into(),
            cc: "/usr/bin/gcc".into(),
            cxx: "/usr/bin/g++".into(),
        }
    }
}

/// The largest values any configuration may set, whatever its deployer asks: beyond them a
/// number is a typo, or would overflow the byte and page arithmetic below it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HardLimits {
    /// Wall-clock limit of one run, in ms (one hour).
    pub time_limit_ms: u64,
    /// Memory of one run, in MiB (1 TiB).
    pub memory_mb: u64,
    /// Output kept per stream, in bytes (256 MiB).
    pub output_bytes: u64,
    /// Processes and threads in one sandbox.
    pub pids: u64,
    /// Open files per process.
    pub nofile: u64,
    /// Largest file a program may write, in bytes (16 GiB).
    pub fsize: u64,
    /// Size of `/work` and of `/tmp`, in MiB (64 GiB).
    pub disk_mb: u64,
}

/// See [`HardLimits`].
pub const HARD_LIMITS: HardLimits = HardLimits {
    time_limit_ms: 3_600_000,
    memory_mb: 1 << 20,
    output_bytes: 256 << 20,
    pids: 32_768,
    nofile: 65_536,
    fsize: 16 << 30,
    disk_mb: 64 << 10,
};

/// A configuration value past its ceiling.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("sandbox configuration: {field} = {value} is more than its limit of {limit}")]
pub struct ConfigError {
    /// The field.
    pub field: &'static str,
    /// Its value.
    pub value: u64,
    /// The most it may be.
    pub limit: u64,
}

impl SandboxConfig {
    /// Checks every numeric field against its ceiling: the defaults against the `max_*` fields,
    /// and those (and the per-sandbox limits) against [`HARD_LIMITS`].
    pub fn validate(&self) -> Result<(), ConfigError> {
        let h = HARD_LIMITS;
        let checks = [
            ("max_time_limit_ms", self.max_time_limit_ms, h.time_limit_ms),
            ("max_memory_mb", self.max_memory_mb, h.memory_mb),
            ("max_output_bytes", self.max_output_bytes, h.output_bytes),
            ("time_limit_ms", self.time_limit_ms, self.max_time_limit_ms),
            ("memory_mb", self.memory_mb, self.max_memory_mb),
            ("output_bytes", self.output_bytes, self.max_output_bytes),
            ("pids", self.pids, h.pids),
            ("nofile", self.nofile, h.nofile),
            ("fsize", self.fsize, h.fsize),
            ("work_mb", self.work_mb, h.disk_mb),
            ("tmp_mb", self.tmp_mb, h.disk_mb),
            ("cpu_percent", self.cpu_percent, 100 * 1024),
        ];
        for (field, value, limit) in checks {
            if value > limit {
                return Err(ConfigError { field, value, limit });
            }
        }
        Ok(())
    }

    /// The limits a run gets: the request's where it sets them, else this configuration's, each
    /// clamped to its `max_*` ceiling (and at least 1 ms and 1 MiB).
    pub fn effective(&self, limits: temper_protocol::Limits) -> Effective {
        Effective {
            time_ms: limits
                .time_limit_ms
                .unwrap_or(self.time_limit_ms)
                .clamp(1, self.max_time_limit_ms.max(1)),
            memory_mb: limits
                .memory_mb
                .unwrap_or(self.memory_mb)
                .clamp(1, self.max_memory_mb.max(1)),
            output_bytes: limits
                .output_bytes
                .unwrap_or(self.output_bytes)
                .min(self.max_output_bytes),
        }
    }
}

/// The limits one run actually gets (see [`SandboxConfig::effective`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Effective {
    /// Wall-clock limit in ms.
    pub time_ms: u64,
    /// Memory limit in MiB.
    pub memory_mb: u64,
    /// Output kept per stream.
    pub output_bytes: u64,
}

impl Effective {
    /// The memory limit in bytes; cannot overflow, since `memory_mb` is clamped to a ceiling
    /// that [`SandboxConfig::validate`] keeps within [`HARD_LIMITS`].
    pub fn memory_bytes(&self) -> u64 {
        self.memory_mb.saturating_mul(1 << 20)
    }
}

#[cfg(test)]
mod tests {
    use temper_protocol::Limits;

    use super::*;

    #[test]
    fn requests_are_clamped_to_the_ceilings() {
        let cfg = SandboxConfig::default();
        cfg.validate().unwrap();
        let asked = Limits {
            time_limit_ms: Some(u64::MAX),
            memory_mb: Some((1 << 44) + 1),
            output_bytes: Some(1_600_000_000),
        };
        let e = cfg.effective(asked);
        assert_eq!((e.time_ms, e.memory_mb, e.output_bytes), (60_000, 4096, 8 << 20));
        assert_eq!(e.memory_bytes(), 4096 << 20);
        // Unset fields take the defaults; zero is raised to the smallest limit.
        let e = cfg.effective(Limits::default());
        assert_eq!((e.time_ms, e.memory_mb, e.output_bytes), (5_000, 256, 1 << 20));
        let zero = Limits { time_limit_ms: Some(0), memory_mb: Some(0), output_bytes: Some(0) };
        let e = cfg.effective(zero);
        assert_eq!((e.time_ms, e.memory_mb, e.output_bytes), (1, 1, 0));
    }

    #[test]
    fn a_configuration_past_its_ceilings_is_refused() {
        let cases = [
            (SandboxConfig { memory_mb: 5000, ..SandboxConfig::default() }, "memory_mb"),
            (
                SandboxConfig { max_memory_mb: u64::MAX >> 10, ..SandboxConfig::default() },
                "max_memory_mb",
            ),
            (SandboxConfig { time_limit_ms: 61_000, ..SandboxConfig::default() }, "time_limit_ms"),
            (
                SandboxConfig { max_output_bytes: 1 << 40, ..SandboxConfig::default() },
                "max_output_bytes",
            ),
            (SandboxConfig { pids: 1 << 20, ..SandboxConfig::default() }, "pids"),
            (SandboxConfig { nofile: u64::MAX, ..SandboxConfig::default() }, "nofile"),
        ];
        for (cfg, field) in cases {
            let err = cfg.validate().unwrap_err();
            assert_eq!(err.field, field, "{err}");
            assert!(err.to_string().contains(field), "{err}");
        }
    }
}
