//! The isolation itself: the only module of temper with `unsafe` code, because it must call the
//! operating system directly (namespaces, mounts, `fork`, credentials, seccomp).
//!
//! [`helper_main`] is the entry point of the slot helper process, run as
//! `<program> __sandbox-slot <socket fd> <spec json>`; [`spawn_helper`] starts it with that
//! socket as descriptor 0.

mod helper;
mod seccomp;

pub use helper::helper_main;

use std::os::unix::process::CommandExt;

/// The first argument that turns a binary into the slot helper.
pub const HELPER_ARG: &str = "__sandbox-slot";

/// The argument after [`HELPER_ARG`] that makes the helper the supervisor's reaper instead: it
/// waits until the supervisor is gone, however it ended (`SIGKILL` included), and removes the
/// slot cgroups it left.
pub const REAPER_ARG: &str = "reap";

/// The reaper of this process's slot cgroups, once asked for (see [`spawn_reaper`]).
#[derive(Debug)]
pub struct Reaper {
    /// The write end of the reaper's standard input: closed when this process ends.
    _pipe: std::os::fd::OwnedFd,
    /// Set once the start is over: whether the reaper runs.
    up: std::sync::Arc<std::sync::OnceLock<bool>>,
}

impl Reaper {
    /// Whether the reaper has started (false while it is still starting, or if it could not).
    pub fn is_up(&self) -> bool {
        self.up.get() == Some(&true)
    }
}

/// Starts the reaper of this process's slot cgroups (see [`REAPER_ARG`]): `program args... reap
/// <pid>`, with the write end of a pipe kept open here, so that the reaper reads end-of-file
/// when this process ends. It runs in a process group of its own, so a terminal's Ctrl-C that
/// stops the supervisor does not stop it too. The reaper is started by a thread of its own: a
/// start waits for the child's exec (about a millisecond), which the first slot need not wait
/// for. Should this process be killed before the reaper is up, the next sandbox's start sweeps
/// the groups it left.
pub fn spawn_reaper(program: &std::path::Path, args: &[String]) -> std::io::Result<Reaper> {
    let (read, write) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)?;
    let mut command = std::process::Command::new(program);
    command
        .args(args)
        .arg(REAPER_ARG)
        .arg(std::process::id().to_string())
        .stdin(std::process::Stdio::from(read))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .process_group(0);
    let program = program.to_owned();
    let up = std::sync::Arc::new(std::sync::OnceLock::new());
    let set = std::sync::Arc::clone(&up);
    // The thread also waits for the reaper, so that it never lingers as a zombie of this process.
    std::thread::Builder::new().name("sandbox-reaper".into()).spawn(move || {
        match command.spawn() {
            Ok(mut child) => {
                let _ = set.set(true);
                let _ = child.wait();
            }
            Err(e) => {
                let _ = set.set(false);
                tracing::warn!(
                    "no reaper for slot cgroups (a killed process leaves them until the next \
                     sandbox starts): cannot start {}: {e}",
                    program.display()
                );
            }
        }
    })?;
    Ok(Reaper { _pipe: write, up })
}

/// Starts the helper `program args... 0 <spec>` with `socket` as its standard input (descriptor
/// 0). Handing the socket over as stdin needs no code between fork and exec, so the standard
/// library can start the helper with `posix_spawn` (a vfork, without copying this process's page
/// tables), and no other child can inherit the socket.
pub fn spawn_helper(
    program: &std::path::Path,
    args: &[String],
    socket: std::os::fd::OwnedFd,
    spec: &str,
) -> std::io::Result<tokio::process::Child> {
    tokio::process::Command::new(program)
        .args(args)
        .arg("0")
        .arg(spec)
        .stdin(std::process::Stdio::from(socket))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
}

/// Registers an owned socket with the async runtime.
#[expect(
    unsafe_code,
    reason = "AsyncFd::register requires the caller to promise the descriptor stays valid"
)]
pub fn register(
    fd: std::os::fd::OwnedFd,
) -> std::io::Result<tokio::io::unix::AsyncFd<std::os::fd::OwnedFd>> {
    // SAFETY: an OwnedFd stays open, and always returns the same descriptor, until it is dropped,
    // which happens only with the AsyncFd that owns it.
    unsafe { tokio::io::unix::AsyncFd::register(fd) }.map_err(|e| e.into_parts().1)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Whether the reaper's start is over, waiting up to five seconds for it.
    fn settled(reaper: &Reaper) -> Option<bool> {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while std::time::Instant::now() < deadline {
            if let Some(up) = reaper.up.get() {
                return Some(*up);
            }
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        None
    }

    #[test]
    fn a_reaper_counts_as_up_only_once_it_has_started() {
        let started = spawn_reaper(std::path::Path::new("/bin/true"), &[]).unwrap();
        assert_eq!(settled(&started), Some(true));
        assert!(started.is_up());
        let missing = spawn_reaper(std::path::Path::new("/nonexistent/reaper"), &[]).unwrap();
        assert_eq!(settled(&missing), Some(false));
        assert!(!missing.is_up());
    }
}
