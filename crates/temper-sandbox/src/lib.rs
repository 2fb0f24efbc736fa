//! Running untrusted code. This is the only crate of temper that executes code written by a
//! model, and its `isolation` module is the only place in temper with `unsafe` code.
//!
//! # Threat model
//!
//! Enforced, for every program run by [`Sandbox`]:
//! - no access to host files except the read-only runtime (`/usr` and a few `/etc` files,
//!   [`SandboxConfig::ro_binds`]); `/work`, `/tmp` and `/dev/shm` are fresh size-capped tmpfs
//!   mounts for each run (a reused slot is reset between runs);
//! - its own user, PID, mount, network (empty: no interface is up), IPC, UTS and cgroup
//!   namespaces; inside, the program runs as an unprivileged uid mapped to an unprivileged host
//!   uid, with every capability dropped, an empty bounding set and no new privileges;
//! - a seccomp filter refusing mount, namespace, tracing, keyring, io_uring, BPF, perf,
//!   userfaultfd, module, time and host-changing syscalls, `clone` with namespace flags and the
//!   x32 ABI (all `EPERM`), 32-bit calls (the process is killed), and `clone3` (`ENOSYS`, so
//!   `clone`'s flags can be checked); sockets of any family but `AF_UNIX`, `AF_INET` and
//!   `AF_INET6` (`EAFNOSUPPORT`: a network namespace does not cover vsock), and raw or packet
//!   sockets (`EPERM`);
//! - limits: wall-clock (the supervisor kills), CPU time and open files and file size (rlimits),
//!   memory (no swap), processes and CPU share (cgroups), bytes of each output stream; what a
//!   request or an environment package asks for is clamped to the configuration's ceilings
//!   ([`SandboxConfig::max_time_limit_ms`], `max_memory_mb`, `max_output_bytes`), and no core
//!   dump is written (`RLIMIT_CORE` of 1 stops pipe handlers too);
//! - when a run ends every process it started is killed, double-forked daemons and `setsid`
//!   children included (its PID namespace's init kills them all, and the cgroup is killed when a
//!   slot is destroyed); a slot whose supervisor dies dies with it (parent-death signals), and a
//!   small reaper process removes the dead supervisor's slot cgroups, even after `SIGKILL`;
//! - the supervisor never follows a path the program could have changed: file transfers are
//!   resolved beneath `/work` with symbolic links refused (`openat2`).
//!
//! Not enforced: side channels (timing, cache), kernel vulnerabilities, and fairness between
//! concurrent runs beyond their configured limits.
//!
//! Isolation fails closed: when a slot cannot be built, the result is `internal_error` with the
//! reason, never an unsandboxed run. The sandbox needs root on the host (to map user namespaces
//! and manage cgroups); both cgroup v2 and the hybrid v1 layout with a v2 `unified` hierarchy are
//! supported.
//!
//! # Shape
//!
//! A *slot* ([`Slot`]) is one isolated sandbox: a small helper process that built the
//! namespaces and its init (PID 1 inside), with its cgroups. [`Sandbox`] keeps a pool of warm
//! slots, lends one per run ([`Sandbox::slot`]; the pool counts it as coming back and does not
//! build a replacement), and afterwards resets it (fresh filesystems, a new IPC namespace, no
//! process left) for reuse, up to [`SandboxConfig::max_runs_per_slot`] runs; a session keeps its
//! slot ([`Sandbox::session_slot`]) and the pool replaces it. Inside a slot, init forks the next
//! exec's process ahead of time, already under the seccomp filter, so a run costs little more
//! than an `execve`. It implements
//! `CodeRunner` (compiling C and C++ once per `run_tests`). [`server`] serves it over HTTP with
//! sessions (`temper sandbox serve`).
//!
//! [`Unsandboxed`] runs programs as plain child processes and **isolates nothing**: a program it
//! runs can read and write the user's files, use the network and signal other processes. It is
//! for tests and for trusted code on hosts where the sandbox cannot run (`temper eval
//! --allow-unsandboxed-code`), and reports `is_sandboxed() == false`.

mod cgroup;
mod chan;
pub mod config;
pub mod isolation;
mod runner;
pub mod server;
mod slot;
mod unsandboxed;
pub mod wire;

pub use config::SandboxConfig;
pub use runner::{Sandbox, SandboxError};
pub use slot::{Slot, SlotError};
pub use unsandboxed::Unsandboxed;
pub use wire::Exec;

#[cfg(test)]
mod tests;
