//! The processes of a run: each role in its own process group, its output teed to
//! `logs/<role>.log`, stopped in escalating steps, and watching its launcher.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use tokio::io::AsyncBufReadExt;
use tokio::process::{Child, Command};

use crate::LaunchError;

/// Set by the launcher on the processes it starts on its own machine: its pid. A process that
/// finds the launcher gone exits, so nothing is left running ([`watch_parent`]).
pub const SUPERVISOR_PID: &str = "TEMPER_SUPERVISOR_PID";
/// temper's log filter (`tracing` syntax); the launcher sets `info` for its children unless it
/// is set already.
pub const LOG: &str = "TEMPER_LOG";

/// A child process of the run.
#[derive(Debug)]
pub struct Proc {
    /// Its role (`inference`, `inference-1`, …, `trainer`, `orchestrator`).
    pub role: String,
    /// Whether it serves until stopped (an inference server): its exit ends the run.
    pub serves: bool,
    child: Child,
    /// How it ended, once it has.
    pub status: Option<ExitStatus>,
    /// Its log file.
    pub log: PathBuf,
}

impl Proc {
    /// Starts `cmd` as `role` in a process group of its own, appending its output to
    /// `DIR/logs/<role>.log`; lines with `WARN` or `ERROR` also reach this process's stderr.
    /// `serves`: it runs until stopped.
    pub fn spawn(
        role: String,
        serves: bool,
        mut cmd: Command,
        dir: &Path,
    ) -> Result<Self, LaunchError> {
        let log = dir.join("logs").join(format!("{role}.log"));
        let mut file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log)
            .map_err(|e| LaunchError::io(&log, e))?;
        cmd.process_group(0)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        if std::env::var_os(LOG).is_none() {
            cmd.env(LOG, "info");
        }
        let program = cmd.as_std().get_program().to_string_lossy().into_owned();
        let mut child = cmd
            .spawn()
            .map_err(|source| LaunchError::Spawn { role: format!("{role} ({program})"), source })?;
        let (Some(out), Some(err)) = (child.stdout.take(), child.stderr.take()) else {
            unreachable!("both streams are piped above");
        };
        let _ = writeln!(file, "== temper rl started the {role} (pid {:?})", child.id());
        let file = std::sync::Arc::new(std::sync::Mutex::new(file));
        for stream in [Box::new(out) as Box<dyn tokio::io::AsyncRead + Unpin + Send>, Box::new(err)]
        {
            let (file, role) = (file.clone(), role.clone());
            tokio::spawn(async move {
                let mut lines = tokio::io::BufReader::new(stream).lines();
                while let Ok(Some(line)) = lines.next_line().await {
                    if let Ok(mut f) = file.lock() {
                        let _ = writeln!(f, "{line}");
                    }
                    // Problems reach the terminal; the rest stays in the log.
                    if line.contains("WARN") || line.contains("ERROR") || line.starts_with("error")
                    {
                        let _ = writeln!(std::io::stderr(), "[{role}] {line}");
                    }
                }
            });
        }
        Ok(Self { role, serves, child, status: None, log })
    }

    /// Records the exit status if it has ended.
    pub fn poll(&mut self) -> Option<ExitStatus> {
        if self.status.is_none()
            && let Ok(Some(status)) = self.child.try_wait()
        {
            self.status = Some(status);
        }
        self.status
    }

    fn signal(&self, signal: Signal) {
        if self.status.is_none()
            && let Some(pid) = self.child.id()
        {
            let _ = killpg(Pid::from_raw(pid as i32), signal);
        }
    }

    /// The error of its having ended with `status` while the run needed it.
    pub fn failure(&self, status: ExitStatus) -> LaunchError {
        LaunchError::RoleFailed {
            role: self.role.clone(),
            status,
            log: self.log.clone(),
            tail: self.log_tail(20),
        }
    }

    /// The last `lines` lines of its log.
    pub fn log_tail(&self, lines: usize) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let all: Vec<&str> = text.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }
}

/// Stops every child still running: SIGINT (the trainer and orchestrator stop cleanly), then
/// SIGTERM, then SIGKILL, each after a grace period; reaps them all.
pub async fn stop_all(procs: &mut [Proc]) {
    for (signal, grace) in [
        (Signal::SIGINT, Duration::from_secs(20)),
        (Signal::SIGTERM, Duration::from_secs(5)),
        (Signal::SIGKILL, Duration::from_secs(5)),
    ] {
        if procs.iter().all(|p| p.status.is_some()) {
            return;
        }
        for p in procs.iter() {
            p.signal(signal);
        }
        let deadline = Instant::now() + grace;
        for p in procs.iter_mut().filter(|p| p.status.is_none()) {
            let left = deadline.saturating_duration_since(Instant::now());
            if let Ok(Ok(status)) = tokio::time::timeout(left, p.child.wait()).await {
                p.status = Some(status);
            }
        }
    }
}

/// In a process a launcher started ([`SUPERVISOR_PID`] set): exits as soon as the launcher is
/// gone, so a killed launcher leaves nothing running. A direct child watches its parent change
/// (immune to pid reuse); one started through `mpirun` watches the launcher's pid. Otherwise
/// does nothing.
pub fn watch_parent() {
    let Some(pid) = std::env::var(SUPERVISOR_PID).ok().and_then(|p| p.parse::<u32>().ok()) else {
        return;
    };
    let direct = std::os::unix::process::parent_id() == pid;
    let gone = move || {
        if direct {
            std::os::unix::process::parent_id() != pid
        } else {
            let target = Pid::from_raw(i32::try_from(pid).unwrap_or(i32::MAX));
            matches!(nix::sys::signal::kill(target, None), Err(nix::errno::Errno::ESRCH))
        }
    };
    std::thread::spawn(move || {
        loop {
            if gone() {
                // stderr may be a pipe nobody reads any more: a failed write must not stop the
                // exit (eprintln! would panic this thread and leave the process running).
                let _ = writeln!(
                    std::io::stderr(),
                    "error: the supervising `temper rl` (pid {pid}) is gone; exiting"
                );
                std::process::exit(1);
            }
            std::thread::sleep(Duration::from_millis(250));
        }
    });
}
