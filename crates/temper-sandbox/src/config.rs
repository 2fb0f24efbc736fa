//! Sandbox configuration, with defaults that work on a Debian-like host.

use std::path::{Path, PathBuf};

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
            pids: 64,
            cpu_percent: 100,
            nofile: 256,
            fsize: 64 << 20,
            pool_size: 8,
            pool_builders: 2,
            max_runs_per_slot: 64,
            python_preimport: false,
            python: "/usr/bin/python3".into(),
            bash: "/bin/bash".into(),
            cc: "/usr/bin/gcc".into(),
            cxx: "/usr/bin/g++".into(),
        }
    }
}
