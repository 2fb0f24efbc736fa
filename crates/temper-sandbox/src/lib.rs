//! Running untrusted code. This is the only crate of temper that executes code written by a
//! model.
//!
//! Today it holds one runner, [`Unsandboxed`], which runs programs as ordinary child processes of
//! the current user. **It isolates nothing**: a program it runs can read and write the user's
//! files, use the network and signal other processes. It exists so that code environments and
//! `script` rewards can be tested, and used on code you trust, before the isolated runner
//! (namespaces, seccomp, cgroups, a warm pool) lands here. It reports `is_sandboxed() == false`,
//! and `temper` uses it only when asked with `--allow-unsandboxed-code`.
//!
//! What it does enforce: a wall-clock limit, CPU-time and address-space limits through the
//! shell's `ulimit`, a cap on each output stream, a fresh temporary working directory per run
//! that is removed afterwards, and the end of the program's process group when the run ends,
//! however it ends (a caller that drops the run kills the group too). A process that leaves the
//! group (`setsid`) escapes; the sandbox proper closes that gap with cgroups.

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
