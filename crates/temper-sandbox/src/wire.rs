//! Messages between the supervisor and a slot's helper processes, over a `SOCK_SEQPACKET`
//! socket (one JSON message per packet; file descriptors travel beside them as `SCM_RIGHTS`).
//!
//! Internal to this crate: both ends are built from the same source.

use serde::{Deserialize, Serialize};

/// How a slot is built, given to the helper on its command line as JSON.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SlotSpec {
    /// Host paths bound read-only at the same place inside (files or folders).
    pub ro_binds: Vec<String>,
    /// Symbolic links created in the new root: (link, target), e.g. ("/bin", "usr/bin").
    pub symlinks: Vec<(String, String)>,
    /// Size of the writable `/work` tmpfs in MiB.
    pub work_mb: u64,
    /// Size of the writable `/tmp` tmpfs in MiB.
    pub tmp_mb: u64,
    /// Inside uid/gid of the sandboxed programs.
    pub inner_uid: u32,
    /// The slot's cgroups, which the helper joins itself (see [`SlotCgroups`]).
    pub cgroups: SlotCgroups,
}

/// Where a slot's processes go, and how they get there.
///
/// The supervisor could move the helper by writing its pid to each group's `cgroup.procs`, but
/// such a write takes the kernel's global lock on every thread group, and taking it after a
/// quiet spell waits for an RCU grace period: 5–12 ms measured per one-shot run. The helper
/// instead writes `0` (itself) to each v1 group's `tasks` file while it is one thread, which
/// the kernel does without that lock, and starts init directly in the v2 group with
/// `clone3(CLONE_INTO_CGROUP)`, which needs only the lock's cheap read side.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SlotCgroups {
    /// Directories of the slot's groups in cgroup v1 hierarchies (hybrid layout), joined by the
    /// helper's first process before it leaves the host's user namespace.
    pub v1: Vec<String>,
    /// Directory of the slot's cgroup v2 group, where init starts (and everything it forks).
    pub v2: String,
    /// Start init with `clone3(CLONE_INTO_CGROUP)`. When false, or when the kernel refuses
    /// `clone3` (older than 5.7, or a container whose seccomp profile answers `ENOSYS`), the
    /// helper writes itself into the v2 group's `cgroup.procs` and forks.
    pub clone_into: bool,
}

/// From the supervisor to the helper.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "t", rename_all = "snake_case")]
pub enum ToSlot {
    /// The user-namespace maps are in place; go on.
    MapsDone,
    /// Run a program. Three descriptors travel with it: stdin, stdout, stderr.
    Exec(Exec),
    /// Start a long-lived program (the pre-imported Python) that outlives runs: it is spared by
    /// kills and resets. Three descriptors travel with it, as for `Exec`.
    Spawn(Exec),
    /// Kill every process of the slot except its init (and the long-lived program); no reply
    /// (it can come while an exec is running, whose reply then follows).
    Kill,
    /// Like `Kill`, between runs, answered with `Swept` once the processes are gone.
    Sweep,
    /// Make the slot fresh for another run: kill every process, replace `/work`, `/tmp` and
    /// `/dev/shm` with empty filesystems, and enter a new IPC namespace.
    Reset,
    /// Write a file under `/work`; one descriptor (a pipe to read `size` bytes from) travels.
    WriteFile {
        /// Path relative to `/work`.
        path: String,
        /// Bytes to read from the pipe.
        size: u64,
        /// Unix mode bits.
        mode: u32,
    },
    /// Read a file under `/work` into the pipe that travels with the message.
    ReadFile {
        /// Path relative to `/work`.
        path: String,
        /// Refuse files larger than this.
        max: u64,
    },
}

/// One program to run in a slot.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Exec {
    /// Program and arguments; the program is an absolute path or relative to `cwd`.
    pub argv: Vec<String>,
    /// Environment, as `KEY=value`.
    pub env: Vec<String>,
    /// Working directory inside the sandbox.
    pub cwd: String,
    /// CPU seconds (RLIMIT_CPU).
    pub cpu_s: u64,
    /// Open files (RLIMIT_NOFILE).
    pub nofile: u64,
    /// Largest file the program may write, in bytes (RLIMIT_FSIZE).
    pub fsize: u64,
    /// Also refuse System V IPC and POSIX message queues (for programs whose IPC namespace is
    /// shared across runs, such as the pre-imported Python's).
    #[serde(default)]
    pub deny_ipc: bool,
    /// Another exec is likely to follow in this slot without a reset (a session's next
    /// command, the run after a compile): prepare its process ahead of time.
    #[serde(default)]
    pub warm_next: bool,
}

/// From the helper to the supervisor.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "t", rename_all = "snake_case")]
pub enum FromSlot {
    /// The helper entered its user namespace; the supervisor writes the maps.
    NeedMaps {
        /// The helper's [`PROTOCOL`]; a helper from another build is refused (0 when it is
        /// too old to say).
        #[serde(default)]
        protocol: u32,
    },
    /// The slot's init process, by host pid.
    Init {
        /// Host pid of the init.
        pid: i32,
    },
    /// Isolation is set up; requests may come.
    Ready,
    /// Isolation could not be set up; nothing will run.
    SetupFailed {
        /// Why, naming the step.
        message: String,
    },
    /// An exec ended.
    Exited {
        /// Exit code, when it exited.
        code: Option<i32>,
        /// Signal, when one killed it.
        signal: Option<i32>,
        /// CPU time of the program and its children.
        cpu_ms: f64,
        /// Peak resident set of the largest process, in KiB.
        max_rss_kb: u64,
        /// The program could not be started (not found, ...).
        spawn_error: Option<String>,
    },
    /// A long-lived program started.
    Spawned {
        /// Its pid inside the slot, or why it could not start.
        result: Result<i32, String>,
    },
    /// A sweep ended.
    Swept {
        /// Whether every process but init and the long-lived program is gone.
        all_gone: bool,
    },
    /// A reset ended.
    ResetDone {
        /// What went wrong (the slot must then be destroyed).
        error: Option<String>,
    },
    /// A file request ended.
    FileDone {
        /// What went wrong, if anything.
        error: Option<String>,
        /// Bytes written or read.
        size: u64,
    },
}

/// The version of these messages, bumped whenever they change: the helper is a separate binary
/// (or a separate copy of `temper`), and one from another build must be refused, not
/// misunderstood.
pub const PROTOCOL: u32 = 3;

/// Largest message on the socket.
pub const MAX_MESSAGE: usize = 64 << 10;
