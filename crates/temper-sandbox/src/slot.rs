//! The supervisor's side of a slot: starting its helper, writing its user-namespace maps and
//! cgroups, and running execs and file transfers in it.

use std::fs;
use std::future::Future;
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use rustix::net::{AddressFamily, SocketFlags, SocketType};
use tokio::io::unix::AsyncFd;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::unix::pipe;

use crate::cgroup::{GroupLimits, Layout, SlotGroups};
use crate::chan;
use crate::config::SandboxConfig;
use crate::wire::{Exec, FromSlot, SlotSpec, ToSlot};

/// How long building a slot may take before it counts as failed.
const SETUP_TIMEOUT: Duration = Duration::from_secs(10);
/// How long init has to answer after a kill.
const KILL_GRACE: Duration = Duration::from_secs(2);

/// Why a slot could not do what was asked. Every one of these ends as `internal_error`.
#[derive(Debug, thiserror::Error)]
pub enum SlotError {
    /// Isolation could not be set up.
    #[error("sandbox setup failed: {0}")]
    Setup(String),
    /// The slot stopped answering or broke the protocol.
    #[error("sandbox slot failed: {0}")]
    Broken(String),
    /// A file request was refused.
    #[error("{0}")]
    File(String),
}

fn broken(e: impl std::fmt::Display) -> SlotError {
    SlotError::Broken(e.to_string())
}

/// What an exec did.
#[derive(Debug, Clone, Default)]
pub struct ExecOutcome {
    /// Exit code, when it exited.
    pub code: Option<i32>,
    /// Signal, when one ended it.
    pub signal: Option<i32>,
    /// CPU time in ms.
    pub cpu_ms: f64,
    /// Peak resident memory in KiB.
    pub max_rss_kb: u64,
    /// The program could not be started.
    pub spawn_error: Option<String>,
    /// Standard output, up to the cap.
    pub stdout: Vec<u8>,
    /// Standard error, up to the cap.
    pub stderr: Vec<u8>,
    /// An output stream went over the cap (the run was killed).
    pub output_over: bool,
    /// The wall-clock limit passed (the run was killed).
    pub timed_out: bool,
    /// The memory limit was hit.
    pub memory_limit: bool,
    /// Wall-clock time.
    pub wall: Duration,
}

/// One isolated sandbox: its helper processes, socket and cgroups.
#[derive(Debug)]
pub struct Slot {
    helper: tokio::process::Child,
    sock: AsyncFd<OwnedFd>,
    /// Taken by `destroy`; a slot dropped without it is cleaned up by `Drop`.
    groups: Option<SlotGroups>,
    busy: tokio::sync::Mutex<()>,
    broken: AtomicBool,
    created: Instant,
    /// Runs since the slot was built.
    runs: std::sync::atomic::AtomicU32,
    /// OOM kills counted by the cgroup before the current exec.
    oom_seen: AtomicU64,
    /// The limits last written to the cgroups, to skip rewriting them.
    limits: std::sync::Mutex<Option<GroupLimits>>,
    /// The socket of the pre-imported Python, when the slot has one.
    zygote: std::sync::Mutex<Option<Arc<AsyncFd<OwnedFd>>>>,
    /// Set while the slot is lent out for a run and expected back in the pool.
    pub(crate) lease: Option<crate::runner::Lease>,
    /// Replies the slot's init still owes. A request abandoned half-way (its future dropped)
    /// leaves one owed, which the next request would take for its own: the slot is then out of
    /// step and is treated as broken.
    owed: std::sync::atomic::AtomicU32,
    /// Set while a pre-imported run's reply is owed, for the same reason.
    zygote_owed: AtomicBool,
}

impl Slot {
    /// Builds a slot; fails closed with the reason when isolation cannot be set up.
    pub async fn create(
        cfg: &SandboxConfig,
        layout: &Layout,
        instance: u64,
        id: u64,
    ) -> Result<Self, SlotError> {
        let setup = |e: io::Error, step: &str| SlotError::Setup(format!("{step}: {e}"));
        let (ours, theirs) = rustix::net::socketpair(
            AddressFamily::UNIX,
            SocketType::SEQPACKET,
            SocketFlags::CLOEXEC | SocketFlags::NONBLOCK,
            None,
        )
        .map_err(|e| setup(e.into(), "socketpair"))?;
        rustix::io::ioctl_fionbio(&theirs, false).map_err(|e| setup(e.into(), "socket mode"))?;
        let groups = SlotGroups::create(layout, instance, id)
            .map_err(|e| setup(e, "create the slot's cgroups"))?;
        let spec = SlotSpec {
            ro_binds: cfg.ro_binds.clone(),
            symlinks: cfg.symlinks.clone(),
            work_mb: cfg.work_mb,
            tmp_mb: cfg.tmp_mb,
            inner_uid: cfg.inner_uid,
            cgroups: groups.for_helper(cfg.clone_into_cgroup),
        };
        let spec = match serde_json::to_string(&spec) {
            Ok(spec) => spec,
            Err(e) => {
                let _ = groups.remove();
                return Err(SlotError::Setup(e.to_string()));
            }
        };
        let limits = GroupLimits {
            memory_bytes: cfg.effective(temper_protocol::Limits::default()).memory_bytes(),
            pids: cfg.pids,
            cpu_percent: cfg.cpu_percent,
        };
        if let Err(e) = groups.set_limits(limits) {
            let _ = groups.remove();
            return Err(setup(e, "set cgroup limits"));
        }
        let helper =
            match crate::isolation::spawn_helper(&cfg.helper.0, &cfg.helper.1, theirs, &spec) {
                Ok(child) => child,
                Err(e) => {
                    let _ = groups.remove();
                    return Err(setup(e, &format!("start the helper {}", cfg.helper.0.display())));
                }
            };
        let sock = crate::isolation::register(ours).map_err(|e| setup(e, "register the socket"))?;
        let mut slot = Self {
            helper,
            sock,
            groups: Some(groups),
            busy: tokio::sync::Mutex::new(()),
            broken: AtomicBool::new(false),
            created: Instant::now(),
            runs: std::sync::atomic::AtomicU32::new(0),
            oom_seen: AtomicU64::new(0),
            limits: std::sync::Mutex::new(Some(limits)),
            zygote: std::sync::Mutex::new(None),
            lease: None,
            owed: std::sync::atomic::AtomicU32::new(0),
            zygote_owed: AtomicBool::new(false),
        };
        match tokio::time::timeout(SETUP_TIMEOUT, slot.handshake(cfg)).await {
            Ok(Ok(())) => {
                // The helper writes to stderr only when setup fails; holding the pipe for the
                // slot's life would cost a descriptor per idle session.
                drop(slot.helper.stderr.take());
                Ok(slot)
            }
            Ok(Err(e)) => Err(slot.fail(e).await),
            Err(_) => Err(slot
                .fail(SlotError::Setup("the helper did not finish within 10 s".into()))
                .await),
        }
    }

    async fn handshake(&mut self, cfg: &SandboxConfig) -> Result<(), SlotError> {
        let pid =
            self.helper.id().ok_or_else(|| SlotError::Setup("the helper exited at once".into()))?;
        match self.recv().await? {
            FromSlot::NeedMaps { protocol } if protocol == crate::wire::PROTOCOL => {}
            FromSlot::NeedMaps { protocol } => {
                return Err(SlotError::Setup(format!(
                    "the sandbox helper {} speaks protocol {protocol}, this build {}: it is from \
                     another build of temper (rebuild both, e.g. `cargo build --release`)",
                    cfg.helper.0.display(),
                    crate::wire::PROTOCOL
                )));
            }
            FromSlot::SetupFailed { message } => return Err(SlotError::Setup(message)),
            other => return Err(SlotError::Setup(format!("unexpected {other:?}"))),
        }
        let write = |name: &str, text: String| {
            fs::write(format!("/proc/{pid}/{name}"), text).map_err(|e| {
                SlotError::Setup(format!("write /proc/{pid}/{name}: {e} (the sandbox needs root)"))
            })
        };
        write("setgroups", "deny".into())?;
        write(
            "uid_map",
            format!("0 {} 1\n{} {} 1\n", cfg.host_root_uid, cfg.inner_uid, cfg.host_user_uid),
        )?;
        write(
            "gid_map",
            format!("0 {} 1\n{} {} 1\n", cfg.host_root_uid, cfg.inner_uid, cfg.host_user_uid),
        )?;
        self.send(&ToSlot::MapsDone, &[]).await?;
        // S announces init and init announces readiness; two processes, so either may come
        // first. Both must arrive before the slot takes requests.
        let (mut init, mut ready) = (false, false);
        while !(init && ready) {
            match self.recv().await? {
                FromSlot::Init { .. } => init = true,
                FromSlot::Ready => ready = true,
                FromSlot::SetupFailed { message } => return Err(SlotError::Setup(message)),
                other => return Err(SlotError::Setup(format!("unexpected {other:?}"))),
            }
        }
        Ok(())
    }

    /// Ends a slot that failed during setup, adding the helper's own words to the error.
    async fn fail(mut self, error: SlotError) -> SlotError {
        let _ = self.groups().kill();
        let _ = self.helper.start_kill();
        let mut stderr = String::new();
        if let Some(mut pipe) = self.helper.stderr.take() {
            let _ = tokio::time::timeout(Duration::from_secs(1), pipe.read_to_string(&mut stderr))
                .await;
        }
        let _ = tokio::time::timeout(Duration::from_secs(2), self.helper.wait()).await;
        if let Some(groups) = self.groups.take() {
            let _ = groups.remove();
        }
        match (error, stderr.trim()) {
            (e, "") => e,
            (SlotError::Setup(m), extra) => SlotError::Setup(format!("{m} ({extra})")),
            (e, _) => e,
        }
    }

    fn groups(&self) -> &SlotGroups {
        self.groups.as_ref().expect("a live slot has its cgroups")
    }

    async fn send(
        &self,
        msg: &ToSlot,
        fds: &[std::os::fd::BorrowedFd<'_>],
    ) -> Result<(), SlotError> {
        let wants_reply = !matches!(msg, ToSlot::Kill | ToSlot::MapsDone);
        if wants_reply && self.owed.load(Ordering::SeqCst) > 0 {
            self.broken.store(true, Ordering::Relaxed);
            return Err(SlotError::Broken(
                "an earlier request was abandoned before its reply".into(),
            ));
        }
        loop {
            let mut guard = self.sock.writable().await.map_err(broken)?;
            match guard.try_io(|fd| chan::send(fd.get_ref().as_fd(), msg, fds)) {
                Ok(result) => {
                    result.map_err(broken)?;
                    if wants_reply {
                        self.owed.fetch_add(1, Ordering::SeqCst);
                    }
                    return Ok(());
                }
                Err(_would_block) => continue,
            }
        }
    }

    async fn recv(&self) -> Result<FromSlot, SlotError> {
        loop {
            let mut guard = self.sock.readable().await.map_err(broken)?;
            match guard.try_io(|fd| chan::recv::<FromSlot>(fd.get_ref().as_fd())) {
                Ok(Ok(Some((msg, _fds)))) => {
                    // Set-up messages come unasked; replies settle what is owed.
                    let _ = self
                        .owed
                        .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1));
                    return Ok(msg);
                }
                Ok(Ok(None)) => return Err(SlotError::Broken("the slot closed its socket".into())),
                Ok(Err(e)) => return Err(broken(e)),
                Err(_would_block) => continue,
            }
        }
    }

    /// Whether the slot can still take requests.
    pub fn is_usable(&mut self) -> bool {
        !self.broken.load(Ordering::Relaxed) && matches!(self.helper.try_wait(), Ok(None))
    }

    /// How long ago the slot was built.
    pub fn age(&self) -> Duration {
        self.created.elapsed()
    }

    /// Sets the memory and process limits for the next execs (only writing what changed).
    pub fn set_limits(&self, limits: GroupLimits) -> Result<(), SlotError> {
        let mut current = self.limits.lock().unwrap_or_else(|p| p.into_inner());
        if *current == Some(limits) {
            return Ok(());
        }
        *current = None;
        self.groups()
            .set_limits(limits)
            .map_err(|e| SlotError::Broken(format!("cgroup limits: {e}")))?;
        *current = Some(limits);
        Ok(())
    }

    /// Runs since the slot was built.
    pub fn runs(&self) -> u32 {
        self.runs.load(Ordering::Relaxed)
    }

    /// Makes the slot fresh for another run (see `ToSlot::Reset`); on failure the slot is
    /// broken and must be destroyed.
    pub async fn reset(&self) -> Result<(), SlotError> {
        let _busy = self.busy.lock().await;
        self.send(&ToSlot::Reset, &[]).await?;
        match self.recv().await {
            Ok(FromSlot::ResetDone { error: None }) => {
                self.groups().reset_peak();
                Ok(())
            }
            other => {
                self.broken.store(true, Ordering::Relaxed);
                Err(SlotError::Broken(format!("reset failed: {other:?}")))
            }
        }
    }

    /// Starts peak-memory accounting afresh (where the kernel allows it).
    pub fn reset_peak(&self) {
        self.groups().reset_peak();
    }

    /// Peak memory of the slot so far, in KiB.
    pub fn peak_kb(&self) -> u64 {
        self.groups().peak_kb()
    }

    /// Runs one program with `stdin`, within `wall`, keeping at most `output_cap` bytes of each
    /// output stream.
    pub async fn exec(
        &self,
        exec: Exec,
        stdin: Vec<u8>,
        wall: Duration,
        output_cap: u64,
    ) -> Result<ExecOutcome, SlotError> {
        let _busy = self.busy.lock().await;
        if self.broken.load(Ordering::Relaxed) {
            return Err(SlotError::Broken("the slot is broken".into()));
        }
        self.runs.fetch_add(1, Ordering::Relaxed);
        let (io, fds) = io_pipes(stdin, output_cap)?;
        let start = Instant::now();
        self.send(&ToSlot::Exec(exec), &[fds[0].as_fd(), fds[1].as_fd(), fds[2].as_fd()]).await?;
        drop(fds);
        let (reply, ending) = self.await_end(wall, &io.over, || self.recv()).await;
        let reply = reply?;
        let wall_time = start.elapsed();
        let FromSlot::Exited { code, signal, cpu_ms, max_rss_kb, spawn_error } = reply else {
            self.broken.store(true, Ordering::Relaxed);
            return Err(SlotError::Broken(format!("unexpected reply {reply:?}")));
        };
        let finished = self.outcome(io, ending, wall_time).await;
        Ok(ExecOutcome { code, signal, cpu_ms, max_rss_kb, spawn_error, ..finished })
    }

    /// Waits for the reply that ends a run; past `wall`, or when an output stream goes over its
    /// cap, asks init to kill the run and waits a little longer. A slot that does not stop then
    /// is broken and its cgroup killed.
    async fn await_end<T, F: Future<Output = Result<T, SlotError>>>(
        &self,
        wall: Duration,
        over: &tokio::sync::Notify,
        mut reply: impl FnMut() -> F,
    ) -> (Result<T, SlotError>, Ending) {
        let mut ending = Ending { timed_out: false, output_over: false };
        let deadline = tokio::time::sleep(wall);
        tokio::pin!(deadline);
        let first = tokio::select! {
            r = reply() => Some(r),
            () = &mut deadline => { ending.timed_out = true; None }
            () = over.notified() => { ending.output_over = true; None }
        };
        if let Some(r) = first {
            return (r, ending);
        }
        if let Err(e) = self.send(&ToSlot::Kill, &[]).await {
            return (Err(e), ending);
        }
        let r = match tokio::time::timeout(KILL_GRACE, reply()).await {
            Ok(r) => r,
            Err(_) => {
                self.broken.store(true, Ordering::Relaxed);
                let _ = self.groups().kill();
                Err(SlotError::Broken("the run did not stop after a kill".into()))
            }
        };
        (r, ending)
    }

    /// The outcome of a finished run: its output (read to the end) and whether it hit a limit;
    /// the caller fills in what the slot reported (exit code, signal, CPU time, memory).
    async fn outcome(&self, io: RunIo, ending: Ending, wall: Duration) -> ExecOutcome {
        io.feed.abort();
        let (stdout, out_over) = collect(io.stdout).await;
        let (stderr, err_over) = collect(io.stderr).await;
        let now = self.groups().oom_kills();
        ExecOutcome {
            code: None,
            signal: None,
            cpu_ms: 0.0,
            max_rss_kb: 0,
            spawn_error: None,
            stdout,
            stderr,
            output_over: ending.output_over || out_over || err_over,
            timed_out: ending.timed_out,
            memory_limit: now > self.oom_seen.swap(now, Ordering::Relaxed),
            wall,
        }
    }

    /// Whether the slot has a live pre-imported Python.
    pub fn has_zygote(&self) -> bool {
        self.zygote.lock().unwrap_or_else(|p| p.into_inner()).is_some()
    }

    /// Starts the pre-imported Python with `exec` (its program and arguments); it then serves
    /// [`Slot::zygote_run`]s until it dies or the slot ends.
    pub async fn start_zygote(&self, exec: Exec) -> Result<(), SlotError> {
        let _busy = self.busy.lock().await;
        let (ours, theirs) = rustix::net::socketpair(
            AddressFamily::UNIX,
            SocketType::SEQPACKET,
            SocketFlags::CLOEXEC | SocketFlags::NONBLOCK,
            None,
        )
        .map_err(|e| broken(io::Error::from(e)))?;
        rustix::io::ioctl_fionbio(&theirs, false).map_err(|e| broken(io::Error::from(e)))?;
        let null = fs::File::options().write(true).open("/dev/null").map_err(broken)?;
        self.send(&ToSlot::Spawn(exec), &[theirs.as_fd(), null.as_fd(), null.as_fd()]).await?;
        drop(theirs);
        match self.recv().await? {
            FromSlot::Spawned { result: Ok(_) } => {
                let sock = crate::isolation::register(ours).map_err(broken)?;
                *self.zygote.lock().unwrap_or_else(|p| p.into_inner()) = Some(Arc::new(sock));
                Ok(())
            }
            FromSlot::Spawned { result: Err(e) } => {
                Err(SlotError::Setup(format!("pre-imported Python: {e}")))
            }
            other => Err(SlotError::Broken(format!("unexpected reply {other:?}"))),
        }
    }

    /// Runs `/work/main.py` in a fork of the pre-imported Python, as [`Slot::exec`] runs a
    /// program.
    pub async fn zygote_run(
        &self,
        cpu_s: u64,
        stdin: Vec<u8>,
        wall: Duration,
        output_cap: u64,
    ) -> Result<ExecOutcome, SlotError> {
        let _busy = self.busy.lock().await;
        if self.zygote_owed.load(Ordering::SeqCst) {
            *self.zygote.lock().unwrap_or_else(|p| p.into_inner()) = None;
            self.broken.store(true, Ordering::Relaxed);
            return Err(SlotError::Broken(
                "an earlier pre-imported run was abandoned before its reply".into(),
            ));
        }
        let zygote = self.zygote.lock().unwrap_or_else(|p| p.into_inner()).clone();
        let Some(zygote) = zygote else {
            return Err(SlotError::Broken("no pre-imported Python".into()));
        };
        self.runs.fetch_add(1, Ordering::Relaxed);
        let request = serde_json::json!({"cpu_s": cpu_s});
        let start = Instant::now();
        let (io, fds) = io_pipes(stdin, output_cap)?;
        send_on(&zygote, &request, &[fds[0].as_fd(), fds[1].as_fd(), fds[2].as_fd()])
            .await
            .inspect_err(|_| {
                *self.zygote.lock().unwrap_or_else(|p| p.into_inner()) = None;
            })?;
        drop(fds);
        self.zygote_owed.store(true, Ordering::SeqCst);
        let (reply, ending) = self.await_end(wall, &io.over, || recv_json(&zygote)).await;
        let reply = match reply {
            Ok(v) => {
                self.zygote_owed.store(false, Ordering::SeqCst);
                v
            }
            Err(e) => {
                // The pre-imported Python died (a run may kill it): the slot is not reused.
                *self.zygote.lock().unwrap_or_else(|p| p.into_inner()) = None;
                self.broken.store(true, Ordering::Relaxed);
                return Err(e);
            }
        };
        let wall_time = start.elapsed();
        let num = |k: &str| reply.get(k).and_then(serde_json::Value::as_i64).map(|v| v as i32);
        let cpu_ms = reply.get("cpu_ms").and_then(serde_json::Value::as_f64).unwrap_or(0.0);
        let max_rss_kb = reply.get("max_rss_kb").and_then(serde_json::Value::as_u64).unwrap_or(0);
        let (code, signal) = (num("code"), num("signal"));
        // What the run left running (a daemon it forked) dies now, as after any exec.
        self.send(&ToSlot::Sweep, &[]).await?;
        match self.recv().await? {
            FromSlot::Swept { all_gone: true } => {}
            other => {
                self.broken.store(true, Ordering::Relaxed);
                return Err(SlotError::Broken(format!("sweep after the run failed: {other:?}")));
            }
        }
        let finished = self.outcome(io, ending, wall_time).await;
        Ok(ExecOutcome { code, signal, cpu_ms, max_rss_kb, ..finished })
    }

    /// Writes `data` to `path` under `/work`.
    pub async fn write_file(&self, path: &str, data: Vec<u8>, mode: u32) -> Result<u64, SlotError> {
        let _busy = self.busy.lock().await;
        let (r, w) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)
            .map_err(|e| broken(io::Error::from(e)))?;
        let size = data.len() as u64;
        self.send(&ToSlot::WriteFile { path: path.to_owned(), size, mode }, &[r.as_fd()]).await?;
        drop(r);
        let mut writer = pipe::Sender::from_owned_fd(w).map_err(broken)?;
        let feed = async move {
            let _ = writer.write_all(&data).await;
        };
        let (reply, ()) = tokio::join!(self.recv(), feed);
        match reply? {
            FromSlot::FileDone { error: None, size } => Ok(size),
            FromSlot::FileDone { error: Some(e), .. } => Err(SlotError::File(e)),
            other => Err(SlotError::Broken(format!("unexpected reply {other:?}"))),
        }
    }

    /// Reads `path` under `/work`, refusing files over `max` bytes.
    pub async fn read_file(&self, path: &str, max: u64) -> Result<Vec<u8>, SlotError> {
        let _busy = self.busy.lock().await;
        let (r, w) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)
            .map_err(|e| broken(io::Error::from(e)))?;
        self.send(&ToSlot::ReadFile { path: path.to_owned(), max }, &[w.as_fd()]).await?;
        drop(w);
        let mut reader = pipe::Receiver::from_owned_fd(r).map_err(broken)?;
        let mut data = Vec::new();
        let read = async {
            let _ = (&mut reader).take(max + 1).read_to_end(&mut data).await;
        };
        let (reply, ()) = tokio::join!(self.recv(), read);
        match reply? {
            FromSlot::FileDone { error: None, .. } => Ok(data),
            FromSlot::FileDone { error: Some(e), .. } => Err(SlotError::File(e)),
            other => Err(SlotError::Broken(format!("unexpected reply {other:?}"))),
        }
    }

    /// Ends the slot: every process in it is killed and its cgroups removed.
    pub async fn destroy(mut self) {
        let Some(groups) = self.groups.take() else { return };
        let _ = groups.kill();
        let _ = self.helper.start_kill();
        let _ = tokio::time::timeout(Duration::from_secs(5), self.helper.wait()).await;
        if let Err(e) =
            tokio::task::spawn_blocking(move || clean_up(&groups)).await.unwrap_or(Ok(()))
        {
            tracing::warn!("cannot remove a slot's cgroups: {e}");
        }
    }
}

/// The supervisor's ends of a run's standard streams.
/// What ended a run early, if anything.
struct Ending {
    timed_out: bool,
    output_over: bool,
}

struct RunIo {
    stdout: tokio::task::JoinHandle<io::Result<(Vec<u8>, bool)>>,
    stderr: tokio::task::JoinHandle<io::Result<(Vec<u8>, bool)>>,
    /// Notified when an output stream goes over the cap.
    over: Arc<tokio::sync::Notify>,
    feed: tokio::task::JoinHandle<()>,
}

/// Three pipes for a run: the program's ends (stdin to read, stdout and stderr to write), and
/// ours, already feeding `stdin` and reading output up to `cap` bytes a stream.
fn io_pipes(stdin: Vec<u8>, cap: u64) -> Result<(RunIo, [OwnedFd; 3]), SlotError> {
    let pipe = || {
        rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)
            .map_err(|e| broken(io::Error::from(e)))
    };
    let (in_r, in_w) = pipe()?;
    let (out_r, out_w) = pipe()?;
    let (err_r, err_w) = pipe()?;
    let mut writer = pipe::Sender::from_owned_fd(in_w).map_err(broken)?;
    let feed = tokio::spawn(async move {
        // A program that exits without reading its input is not an error.
        let _ = writer.write_all(&stdin).await;
    });
    let over = Arc::new(tokio::sync::Notify::new());
    let read = |fd: OwnedFd| {
        let over = Arc::clone(&over);
        async move {
            let mut reader = pipe::Receiver::from_owned_fd(fd)?;
            let mut kept = Vec::new();
            let mut buf = vec![0u8; 64 << 10];
            let mut exceeded = false;
            loop {
                let n = reader.read(&mut buf).await?;
                if n == 0 {
                    break;
                }
                let room = (cap as usize).saturating_sub(kept.len());
                kept.extend_from_slice(&buf[..n.min(room)]);
                if n > room && !exceeded {
                    exceeded = true;
                    over.notify_one();
                }
            }
            io::Result::Ok((kept, exceeded))
        }
    };
    let stdout = tokio::spawn(read(out_r));
    let stderr = tokio::spawn(read(err_r));
    Ok((RunIo { stdout, stderr, over, feed }, [in_r, out_w, err_w]))
}

/// Sends one JSON message with descriptors on a registered socket.
async fn send_on(
    sock: &AsyncFd<OwnedFd>,
    msg: &serde_json::Value,
    fds: &[std::os::fd::BorrowedFd<'_>],
) -> Result<(), SlotError> {
    loop {
        let mut guard = sock.writable().await.map_err(broken)?;
        match guard.try_io(|fd| chan::send(fd.get_ref().as_fd(), msg, fds)) {
            Ok(result) => return result.map_err(broken),
            Err(_would_block) => continue,
        }
    }
}

/// Receives one JSON message on a registered socket.
async fn recv_json(sock: &AsyncFd<OwnedFd>) -> Result<serde_json::Value, SlotError> {
    loop {
        let mut guard = sock.readable().await.map_err(broken)?;
        match guard.try_io(|fd| chan::recv::<serde_json::Value>(fd.get_ref().as_fd())) {
            Ok(Ok(Some((msg, _)))) => return Ok(msg),
            Ok(Ok(None)) => return Err(SlotError::Broken("the pre-imported Python exited".into())),
            Ok(Err(e)) => return Err(broken(e)),
            Err(_would_block) => continue,
        }
    }
}

/// Waits (briefly) for an output reader to finish.
async fn collect(h: tokio::task::JoinHandle<io::Result<(Vec<u8>, bool)>>) -> (Vec<u8>, bool) {
    match tokio::time::timeout(KILL_GRACE, h).await {
        Ok(Ok(Ok(v))) => v,
        _ => (Vec::new(), false),
    }
}

/// Kills what is left in the groups until they are empty, then removes them.
fn clean_up(groups: &SlotGroups) -> io::Result<()> {
    for _ in 0..2_500 {
        if groups.is_empty() {
            break;
        }
        let _ = groups.kill();
        std::thread::sleep(Duration::from_millis(2));
    }
    groups.remove()
}

impl Drop for Slot {
    fn drop(&mut self) {
        // Dropped without `destroy` (a panic, a cancelled request): nothing may survive it.
        if let Some(groups) = self.groups.take() {
            let _ = groups.kill();
            let _ = self.helper.start_kill();
            std::thread::spawn(move || {
                if let Err(e) = clean_up(&groups) {
                    tracing::warn!("cannot remove a slot's cgroups: {e}");
                }
            });
        }
    }
}
