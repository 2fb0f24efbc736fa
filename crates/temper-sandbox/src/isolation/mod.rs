//! The isolation itself: the only module of temper with `unsafe` code, because it must call the
//! operating system directly (namespaces, mounts, `fork`, credentials, seccomp).
//!
//! [`helper_main`] is the entry point of the slot helper process, run as
//! `<program> __sandbox-slot <socket fd> <spec json>`; [`spawn_helper`] starts it with that
//! socket.

mod helper;
mod seccomp;

pub use helper::helper_main;

/// The first argument that turns a binary into the slot helper.
pub const HELPER_ARG: &str = "__sandbox-slot";

/// Starts the helper `program args... <fd> <spec>`, handing it `fd` (which stays close-on-exec
/// in this process, so no other child inherits it).
#[expect(unsafe_code, reason = "pre_exec runs fcntl between fork and exec")]
pub fn spawn_helper(
    program: &std::path::Path,
    args: &[String],
    fd: std::os::fd::RawFd,
    spec: &str,
) -> std::io::Result<tokio::process::Child> {
    let mut command = tokio::process::Command::new(program);
    command
        .args(args)
        .arg(fd.to_string())
        .arg(spec)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true);
    // SAFETY: the closure calls only fcntl, which is async-signal-safe, on a descriptor that is
    // open in the parent and so in the forked child.
    unsafe {
        command.pre_exec(move || {
            if libc::fcntl(fd, libc::F_SETFD, 0) < 0 {
                Err(std::io::Error::last_os_error())
            } else {
                Ok(())
            }
        });
    }
    command.spawn()
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
