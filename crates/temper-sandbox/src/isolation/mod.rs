//! The isolation itself: the only module of temper with `unsafe` code, because it must call the
//! operating system directly (namespaces, mounts, `fork`, credentials, seccomp).
//!
//! [`helper_main`] is the entry point of the slot helper process, run as
//! `<program> __sandbox-slot <socket fd> <spec json>`; [`clear_cloexec`] lets the supervisor
//! hand that socket to it.

mod helper;
mod seccomp;

pub use helper::helper_main;

/// The first argument that turns a binary into the slot helper.
pub const HELPER_ARG: &str = "__sandbox-slot";

/// Makes `fd` survive `execve` in the child about to be spawned: call from `pre_exec` only.
#[expect(unsafe_code, reason = "fcntl on a descriptor the caller owns, between fork and exec")]
pub fn clear_cloexec(fd: std::os::fd::RawFd) -> std::io::Result<()> {
    // SAFETY: fcntl is async-signal-safe; `fd` is open in this process.
    let r = unsafe { libc::fcntl(fd, libc::F_SETFD, 0) };
    if r < 0 { Err(std::io::Error::last_os_error()) } else { Ok(()) }
}
