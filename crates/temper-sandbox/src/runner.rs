//! [`Sandbox`]: runs programs in isolated slots, from a warm pool, and implements `CodeRunner`.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use async_trait::async_trait;
use temper_protocol::{Language, Limits, RunRequest, RunResult, RunStatus, TestCase, TestsRequest};
use temper_verify::code::{CodeRunner, CodeSession, RunnerError, TestOutcome, check_session_path};

use crate::cgroup::{self, GroupLimits, Layout};
use crate::config::{Effective, SandboxConfig};
use crate::slot::{ExecOutcome, Slot, SlotError};
use crate::wire::Exec;

/// Why the sandbox could not start.
#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    /// The host lacks what isolation needs (root, cgroups, namespaces).
    #[error("the sandbox cannot run on this host: {0}")]
    Unavailable(String),
    /// Building a slot failed.
    #[error(transparent)]
    Slot(#[from] SlotError),
    /// The configuration sets a value past its ceiling.
    #[error(transparent)]
    Config(#[from] crate::config::ConfigError),
}

/// Limits of a compile step.
const COMPILE: Limits =
    Limits { time_limit_ms: Some(20_000), memory_mb: Some(1024), output_bytes: Some(64 << 10) };

/// How a language is written to disk, compiled and run.
struct Recipe {
    file: &'static str,
    compile: Option<Vec<String>>,
    run: Vec<String>,
}

fn recipe(cfg: &SandboxConfig, language: Language) -> Recipe {
    let v = |items: &[&str]| items.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
    match language {
        Language::Python => {
            Recipe { file: "main.py", compile: None, run: v(&[&cfg.python, "-I", "main.py"]) }
        }
        Language::Bash => {
            Recipe { file: "main.sh", compile: None, run: v(&[&cfg.bash, "main.sh"]) }
        }
        Language::C => Recipe {
            file: "main.c",
            compile: Some(v(&[&cfg.cc, "-O2", "-std=c17", "-o", "prog", "main.c", "-lm"])),
            run: v(&["./prog"]),
        },
        Language::Cpp => Recipe {
            file: "main.cpp",
            compile: Some(v(&[&cfg.cxx, "-O2", "-std=c++17", "-o", "prog", "main.cpp"])),
            run: v(&["./prog"]),
        },
    }
}

#[derive(Debug)]
struct Inner {
    cfg: SandboxConfig,
    layout: Layout,
    /// Names this sandbox's slot cgroups apart from other sandboxes in the process.
    instance: u64,
    /// Set by `shutdown`: the pool stops refilling.
    closed: std::sync::atomic::AtomicBool,
    pool: Mutex<VecDeque<Slot>>,
    refill: tokio::sync::Notify,
    cold_starts: AtomicU64,
    warm_starts: AtomicU64,
    /// Slots being destroyed in the background; `shutdown` waits for them.
    retiring: Mutex<tokio::task::JoinSet<()>>,
    /// Slots being reset to come back to the pool: the pool counts them as present, so it does
    /// not build new slots that the returning ones would then find no room for.
    returning: std::sync::atomic::AtomicUsize,
    /// Slots lent out for a run and expected back (each holds a [`Lease`]): counted as present
    /// too, for the same reason.
    lent: std::sync::atomic::AtomicUsize,
}

/// A pooled slot's promise to come back: while it lives, the pool counts the slot as present and
/// does not build a replacement. Dropped (with the slot, or when it is recycled) it releases that
/// place and wakes the refill.
#[derive(Debug)]
pub(crate) struct Lease {
    inner: Weak<Inner>,
}

impl Drop for Lease {
    fn drop(&mut self) {
        if let Some(inner) = self.inner.upgrade() {
            inner.lent.fetch_sub(1, Ordering::SeqCst);
            inner.refill.notify_one();
        }
    }
}

/// The sandbox: isolated execution of untrusted programs (see the crate documentation).
#[derive(Debug, Clone)]
pub struct Sandbox {
    inner: Arc<Inner>,
}

/// The longest a slot's reset may take before the slot is destroyed instead (the slot's own
/// wait for killed processes is 5 s).
const RESET_TIMEOUT: Duration = Duration::from_secs(15);

/// The source of the pre-imported Python.
const ZYGOTE: &str = include_str!("zygote.py");

/// Starts the pre-imported Python in `slot` when the configuration asks for one and the slot has
/// none; on failure the slot still runs Python the ordinary way.
async fn prepare_zygote(cfg: &SandboxConfig, slot: &Slot) {
    if !cfg.python_preimport || slot.has_zygote() {
        return;
    }
    let exec = Exec {
        argv: vec![cfg.python.clone(), "-I".into(), "-c".into(), ZYGOTE.into()],
        env: vec![
            "PATH=/usr/local/bin:/usr/bin:/bin".into(),
            "HOME=/work".into(),
            "TMPDIR=/tmp".into(),
            "LANG=C.UTF-8".into(),
        ],
        cwd: "/".into(),
        cpu_s: 1 << 20,
        nofile: cfg.nofile,
        fsize: cfg.fsize,
        deny_ipc: true,
        warm_next: false,
    };
    if let Err(e) = slot.start_zygote(exec).await {
        tracing::warn!("{e}");
    }
}

/// This process's reaper (`None` when its start failed at once).
static REAPER: std::sync::OnceLock<Option<crate::isolation::Reaper>> = std::sync::OnceLock::new();

/// Starts, once per process, the reaper that removes this process's slot cgroups when it ends
/// in a way that runs no code of ours (`SIGKILL`, a crash); the write end of its pipe lives as
/// long as the process.
fn start_reaper(cfg: &SandboxConfig) {
    REAPER.get_or_init(|| {
        let (program, args) = &cfg.helper;
        crate::isolation::spawn_reaper(program, args)
            .inspect_err(|e| {
                tracing::warn!("no reaper for slot cgroups (a killed process leaves them): {e}")
            })
            .ok()
    });
}

/// Slot ids are unique in the process (they name cgroups), across every sandbox in it.
fn next_slot_id() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

impl Sandbox {
    /// Checks that isolation works on this host by building one slot, then starts the warm
    /// pool. Fails (closed) with the reason when isolation is not available.
    pub async fn new(cfg: SandboxConfig) -> Result<Self, SandboxError> {
        cfg.validate()?;
        if !rustix::process::geteuid().is_root() {
            return Err(SandboxError::Unavailable(
                "it must run as root (to map user namespaces and manage cgroups)".into(),
            ));
        }
        let layout = cgroup::detect().map_err(SandboxError::Unavailable)?;
        start_reaper(&cfg);
        // Each slot holds descriptors in this process; allow as many as the hard limit permits.
        if let Ok(limit) =
            rustix::process::getrlimit(rustix::process::Resource::Nofile).maximum.ok_or(())
        {
            let _ = rustix::process::setrlimit(
                rustix::process::Resource::Nofile,
                rustix::process::Rlimit { current: Some(limit), maximum: Some(limit) },
            );
        }
        let inner = Arc::new(Inner {
            cfg,
            layout,
            instance: next_slot_id(),
            closed: std::sync::atomic::AtomicBool::new(false),
            pool: Mutex::new(VecDeque::new()),
            refill: tokio::sync::Notify::new(),
            cold_starts: AtomicU64::new(0),
            warm_starts: AtomicU64::new(0),
            retiring: Mutex::new(tokio::task::JoinSet::new()),
            returning: std::sync::atomic::AtomicUsize::new(0),
            lent: std::sync::atomic::AtomicUsize::new(0),
        });
        let probe = Self::build(&inner).await?;
        inner.pool.lock().unwrap_or_else(|p| p.into_inner()).push_back(probe);
        if inner.cfg.pool_size > 0 {
            tokio::spawn(refill(Arc::downgrade(&inner)));
        }
        Ok(Self { inner })
    }

    async fn build(inner: &Inner) -> Result<Slot, SlotError> {
        let id = next_slot_id();
        let slot = Slot::create(&inner.cfg, &inner.layout, inner.instance, id).await?;
        prepare_zygote(&inner.cfg, &slot).await;
        Ok(slot)
    }

    /// Whether this process's reaper (see [`crate::isolation::REAPER_ARG`]) is running: it kills
    /// and removes every slot of the process once the process has ended. A one-shot caller that
    /// has its result may then end without [`Sandbox::shutdown`] and leave the teardown (about a
    /// millisecond and a half) to the reaper; while the reaper is still starting, or could not
    /// start, this is false and the caller shuts down itself.
    pub fn reaper_cleans_up(&self) -> bool {
        REAPER.get().and_then(Option::as_ref).is_some_and(crate::isolation::Reaper::is_up)
    }

    /// The configuration.
    pub fn config(&self) -> &SandboxConfig {
        &self.inner.cfg
    }

    /// (warm, cold) slot starts so far.
    pub fn starts(&self) -> (u64, u64) {
        (
            self.inner.warm_starts.load(Ordering::Relaxed),
            self.inner.cold_starts.load(Ordering::Relaxed),
        )
    }

    /// Warm slots ready now.
    pub fn ready(&self) -> usize {
        self.inner.pool.lock().unwrap_or_else(|p| p.into_inner()).len()
    }

    /// A slot built now, bypassing the pool (a cold start).
    pub async fn fresh_slot(&self) -> Result<Slot, SlotError> {
        self.inner.cold_starts.fetch_add(1, Ordering::Relaxed);
        Self::build(&self.inner).await
    }

    /// A fresh slot for a short job, to be given back with [`Sandbox::recycle`]: a warm one when
    /// the pool has one, else built now. While it is out, the pool does not build a replacement.
    pub async fn slot(&self) -> Result<Slot, SlotError> {
        self.take(true).await
    }

    /// A fresh slot to keep for long (a session): the pool builds a replacement at once.
    pub async fn session_slot(&self) -> Result<Slot, SlotError> {
        self.take(false).await
    }

    fn lend(&self, slot: &mut Slot) {
        self.inner.lent.fetch_add(1, Ordering::SeqCst);
        slot.lease = Some(Lease { inner: Arc::downgrade(&self.inner) });
    }

    async fn take(&self, lend: bool) -> Result<Slot, SlotError> {
        loop {
            let pooled = self.inner.pool.lock().unwrap_or_else(|p| p.into_inner()).pop_front();
            match pooled {
                Some(mut slot) => {
                    if slot.is_usable() {
                        self.inner.warm_starts.fetch_add(1, Ordering::Relaxed);
                        if lend && slot.runs() + 1 < self.inner.cfg.max_runs_per_slot {
                            self.lend(&mut slot);
                        }
                        self.inner.refill.notify_one();
                        return Ok(slot);
                    }
                    self.inner.refill.notify_one();
                    self.retire(slot);
                }
                None => {
                    self.inner.refill.notify_one();
                    self.inner.cold_starts.fetch_add(1, Ordering::Relaxed);
                    let mut slot = Self::build(&self.inner).await?;
                    // Counted as coming back only where the pool has room for it.
                    let counted = self.inner.pool.lock().unwrap_or_else(|p| p.into_inner()).len()
                        + self.inner.returning.load(Ordering::SeqCst)
                        + self.inner.lent.load(Ordering::SeqCst);
                    if lend
                        && slot.runs() + 1 < self.inner.cfg.max_runs_per_slot
                        && counted < self.inner.cfg.pool_size
                    {
                        self.lend(&mut slot);
                    }
                    return Ok(slot);
                }
            }
        }
    }

    /// The name prefix of this sandbox's slot cgroups (for tests and operators).
    pub fn cgroup_prefix(&self) -> String {
        cgroup::SlotGroups::prefix(self.inner.instance)
    }

    /// Destroys `slot` in the background (off the request path); `shutdown` waits for it.
    pub fn retire(&self, mut slot: Slot) {
        slot.lease = None;
        let mut retiring = self.inner.retiring.lock().unwrap_or_else(|p| p.into_inner());
        // Forget the ones already finished so the set does not grow.
        while retiring.try_join_next().is_some() {}
        retiring.spawn(slot.destroy());
    }

    /// Returns a slot after a run: reset in the background and put back in the pool while it has
    /// served fewer than `max_runs_per_slot` runs and the pool has room; destroyed otherwise.
    pub fn recycle(&self, mut slot: Slot) {
        let inner = Arc::clone(&self.inner);
        let room = |inner: &Inner| {
            inner.pool.lock().unwrap_or_else(|p| p.into_inner()).len()
                + inner.returning.load(Ordering::SeqCst)
                < inner.cfg.pool_size
        };
        let worth_it = !inner.closed.load(Ordering::Relaxed)
            && slot.runs() < inner.cfg.max_runs_per_slot
            && room(&inner);
        if worth_it {
            inner.returning.fetch_add(1, Ordering::SeqCst);
        }
        // Counted as returning now (or gone): release its place as a lent slot.
        slot.lease = None;
        let mut retiring = self.inner.retiring.lock().unwrap_or_else(|p| p.into_inner());
        while retiring.try_join_next().is_some() {}
        retiring.spawn(async move {
            let mut slot = slot;
            if !worth_it {
                slot.destroy().await;
                return;
            }
            // A reset that hangs must not hold its place in the pool for ever.
            let fresh = slot.is_usable()
                && tokio::time::timeout(RESET_TIMEOUT, slot.reset()).await.is_ok_and(|r| r.is_ok());
            if fresh {
                prepare_zygote(&inner.cfg, &slot).await;
            }
            let leftover = {
                let mut pool = inner.pool.lock().unwrap_or_else(|p| p.into_inner());
                if fresh
                    && !inner.closed.load(Ordering::Relaxed)
                    && pool.len() < inner.cfg.pool_size
                {
                    pool.push_back(slot);
                    None
                } else {
                    Some(slot)
                }
            };
            inner.returning.fetch_sub(1, Ordering::SeqCst);
            inner.refill.notify_one();
            if let Some(slot) = leftover {
                slot.destroy().await;
            }
        });
    }

    /// Waits (up to `limit`) until no slot is being reset or destroyed and the pool is full: a
    /// quiet machine, for measurements.
    pub async fn settle(&self, limit: Duration) {
        let deadline = std::time::Instant::now() + limit;
        loop {
            let busy = {
                let mut retiring = self.inner.retiring.lock().unwrap_or_else(|p| p.into_inner());
                while retiring.try_join_next().is_some() {}
                !retiring.is_empty()
            };
            if (!busy && self.ready() >= self.inner.cfg.pool_size)
                || std::time::Instant::now() > deadline
            {
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Stops the pool, destroys the warm slots and waits for every slot being destroyed. Runs
    /// already started finish normally.
    pub async fn shutdown(&self) {
        self.inner.closed.store(true, Ordering::Relaxed);
        let slots: Vec<Slot> =
            self.inner.pool.lock().unwrap_or_else(|p| p.into_inner()).drain(..).collect();
        for slot in slots {
            slot.destroy().await;
        }
        let mut retiring =
            std::mem::take(&mut *self.inner.retiring.lock().unwrap_or_else(|p| p.into_inner()));
        while retiring.join_next().await.is_some() {}
    }

    fn group_limits(&self, limits: Effective) -> GroupLimits {
        GroupLimits {
            memory_bytes: limits.memory_bytes(),
            pids: self.inner.cfg.pids,
            cpu_percent: self.inner.cfg.cpu_percent,
        }
    }

    /// An exec request with this sandbox's environment and limits, for raw use of a [`Slot`].
    pub fn exec_request(&self, argv: Vec<String>, time_ms: u64) -> Exec {
        self.exec(argv, time_ms)
    }

    fn exec(&self, argv: Vec<String>, time_ms: u64) -> Exec {
        let cfg = &self.inner.cfg;
        Exec {
            argv,
            env: vec![
                "PATH=/usr/local/bin:/usr/bin:/bin".into(),
                "HOME=/work".into(),
                "TMPDIR=/tmp".into(),
                "LANG=C.UTF-8".into(),
            ],
            cwd: "/work".into(),
            cpu_s: time_ms.div_ceil(1000),
            nofile: cfg.nofile,
            fsize: cfg.fsize,
            deny_ipc: false,
            warm_next: false,
        }
    }

    /// Writes the program and compiles it; `Ok(Some(result))` is a compile error to report.
    async fn prepare(
        &self,
        slot: &Slot,
        language: Language,
        code: &str,
    ) -> Result<Option<RunResult>, SlotError> {
        let recipe = recipe(&self.inner.cfg, language);
        slot.write_file(recipe.file, code.as_bytes().to_vec(), 0o644).await?;
        let Some(compile) = recipe.compile else { return Ok(None) };
        let e = self.inner.cfg.effective(COMPILE);
        let (time_ms, output) = (e.time_ms, e.output_bytes);
        slot.set_limits(self.group_limits(e))?;
        // The run follows the compile in the same slot.
        let exec = Exec { warm_next: true, ..self.exec(compile, time_ms) };
        let out = slot.exec(exec, Vec::new(), Duration::from_millis(time_ms), output).await?;
        if out.spawn_error.is_none() && out.code == Some(0) && !out.timed_out {
            return Ok(None);
        }
        let mut result = to_result(out, time_ms, 0);
        if result.status != RunStatus::InternalError {
            result.status = RunStatus::CompileError;
            if result.stderr.is_empty() {
                result.stderr = "compilation failed".into();
            }
        }
        Ok(Some(result))
    }

    /// Runs the compiled (or interpreted) program once in `slot`; `more` when another run follows
    /// in the same slot.
    async fn run_in(
        &self,
        slot: &Slot,
        language: Language,
        stdin: &str,
        limits: Limits,
        more: bool,
    ) -> Result<RunResult, SlotError> {
        let e = self.inner.cfg.effective(limits);
        let (time_ms, output) = (e.time_ms, e.output_bytes);
        slot.set_limits(self.group_limits(e))?;
        slot.reset_peak();
        let wall = Duration::from_millis(time_ms);
        let out = if language == Language::Python && slot.has_zygote() {
            slot.zygote_run(time_ms.div_ceil(1000), stdin.as_bytes().to_vec(), wall, output).await?
        } else {
            let argv = recipe(&self.inner.cfg, language).run;
            let exec = Exec { warm_next: more, ..self.exec(argv, time_ms) };
            slot.exec(exec, stdin.as_bytes().to_vec(), wall, output).await?
        };
        Ok(to_result(out, time_ms, slot.peak_kb()))
    }

    /// Runs one program to its end. Never fails: a sandbox failure is `internal_error`.
    pub async fn run(&self, request: &RunRequest) -> RunResult {
        self.run_with_files(request, &std::collections::BTreeMap::new()).await
    }

    /// Like [`Sandbox::run`], with extra files written under `/work` first.
    pub async fn run_with_files(
        &self,
        request: &RunRequest,
        files: &std::collections::BTreeMap<String, String>,
    ) -> RunResult {
        let slot = match self.slot().await {
            Ok(slot) => slot,
            Err(e) => return RunResult::internal_error(e.to_string()),
        };
        let result = async {
            for (path, content) in files {
                slot.write_file(path, content.as_bytes().to_vec(), 0o644).await?;
            }
            if let Some(compile_error) =
                self.prepare(&slot, request.language, &request.code).await?
            {
                return Ok(compile_error);
            }
            self.run_in(&slot, request.language, &request.stdin, request.limits, false).await
        }
        .await
        .unwrap_or_else(|e: SlotError| RunResult::internal_error(e.to_string()));
        self.recycle(slot);
        result
    }

    /// Runs a shell command in a session's slot (`bash -c command` in `/work`).
    pub async fn exec_command(
        &self,
        slot: &Slot,
        command: &str,
        stdin: &str,
        limits: Limits,
    ) -> RunResult {
        let e = self.inner.cfg.effective(limits);
        let (time_ms, output) = (e.time_ms, e.output_bytes);
        let run = async {
            slot.set_limits(self.group_limits(e))?;
            slot.reset_peak();
            let argv = vec![self.inner.cfg.bash.clone(), "-c".into(), command.to_owned()];
            // A session's next command comes in the same slot.
            let out = slot
                .exec(
                    Exec { warm_next: true, ..self.exec(argv, time_ms) },
                    stdin.as_bytes().to_vec(),
                    Duration::from_millis(time_ms),
                    output,
                )
                .await?;
            Ok::<_, SlotError>(to_result(out, time_ms, slot.peak_kb()))
        };
        run.await.unwrap_or_else(|e| RunResult::internal_error(e.to_string()))
    }

    /// Compiles once and runs every test in one slot (each run a fresh process).
    pub async fn run_tests(
        &self,
        language: Language,
        code: &str,
        tests: &[TestCase],
        limits: Limits,
        stop_on_failure: bool,
    ) -> Result<Vec<TestOutcome>, SlotError> {
        let slot = self.slot().await?;
        let outcome = async {
            // Each run keeps up to max_output_bytes a stream; what the results hold together is
            // bounded by the same two streams' worth, whatever the number of tests. Outcomes are
            // judged on the whole output; only what is returned is cut.
            let mut budget = self.inner.cfg.max_output_bytes.saturating_mul(2);
            let mut cut = |outcome: &mut TestOutcome| {
                budget = cut_to_budget(&mut outcome.result.stdout, budget);
                budget = cut_to_budget(&mut outcome.result.stderr, budget);
            };
            if let Some(compile_error) = self.prepare(&slot, language, code).await? {
                let mut outcomes: Vec<TestOutcome> =
                    tests.iter().map(|t| TestOutcome::judge(t, compile_error.clone())).collect();
                outcomes.iter_mut().for_each(&mut cut);
                return Ok(outcomes);
            }
            let mut outcomes = Vec::with_capacity(tests.len());
            for (i, test) in tests.iter().enumerate() {
                let more = i + 1 < tests.len();
                let result = self.run_in(&slot, language, &test.stdin, limits, more).await?;
                let mut outcome = TestOutcome::judge(test, result);
                cut(&mut outcome);
                let failed = !outcome.passed;
                outcomes.push(outcome);
                if failed && stop_on_failure {
                    break;
                }
            }
            Ok(outcomes)
        }
        .await;
        self.recycle(slot);
        outcome
    }
}

/// Cuts `text` to at most `budget` bytes (at a character boundary) and returns what is left of
/// the budget.
fn cut_to_budget(text: &mut String, budget: u64) -> u64 {
    let len = text.len() as u64;
    if len <= budget {
        return budget - len;
    }
    let mut at = usize::try_from(budget).unwrap_or(usize::MAX).min(text.len());
    while !text.is_char_boundary(at) {
        at -= 1;
    }
    text.truncate(at);
    0
}

/// Output bytes as text: moved when they are UTF-8 (no copy), else made valid.
fn text(bytes: Vec<u8>) -> String {
    String::from_utf8(bytes).unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned())
}

/// Maps what happened to a status.
fn to_result(out: ExecOutcome, time_ms: u64, peak_kb: u64) -> RunResult {
    let mut result = RunResult::internal_error("");
    result.stdout = text(out.stdout);
    result.stderr = text(out.stderr);
    result.exit_code = out.code;
    result.signal = out.signal;
    result.wall_ms = out.wall.as_secs_f64() * 1e3;
    result.cpu_ms = out.cpu_ms;
    result.max_rss_kb = if peak_kb > 0 { peak_kb } else { out.max_rss_kb };
    let cpu_out = out.signal == Some(libc::SIGXCPU)
        || (out.signal == Some(libc::SIGKILL) && out.cpu_ms >= time_ms as f64);
    result.status = if let Some(e) = out.spawn_error {
        result.stderr = e;
        RunStatus::InternalError
    } else if out.timed_out || cpu_out {
        RunStatus::Timeout
    } else if out.output_over {
        RunStatus::OutputLimit
    } else if out.memory_limit {
        RunStatus::MemoryLimit
    } else if out.code == Some(0) {
        RunStatus::Ok
    } else {
        RunStatus::RuntimeError
    };
    result
}

/// Keeps the pool full, building up to `pool_builders` slots at once, until the sandbox is gone.
async fn refill(inner: Weak<Inner>) {
    loop {
        let Some(strong) = inner.upgrade() else { return };
        if strong.closed.load(Ordering::Relaxed) {
            return;
        }
        // Slots out for a run or being reset after one come back on their own: count them as
        // present, or every run would build a new slot that its returning predecessor then finds
        // no room beside.
        let present = strong.pool.lock().unwrap_or_else(|p| p.into_inner()).len()
            + strong.returning.load(Ordering::SeqCst)
            + strong.lent.load(Ordering::SeqCst);
        let missing = strong.cfg.pool_size.saturating_sub(present);
        if missing == 0 {
            // Wake on demand, or now and then to notice the sandbox is gone.
            let _ =
                tokio::time::timeout(Duration::from_millis(500), strong.refill.notified()).await;
            continue;
        }
        let batch = missing.min(strong.cfg.pool_builders.max(1));
        let built = futures_lite_join(batch, &strong).await;
        if strong.closed.load(Ordering::Relaxed) {
            for slot in built {
                slot.destroy().await;
            }
            return;
        }
        strong.pool.lock().unwrap_or_else(|p| p.into_inner()).extend(built);
    }
}

async fn futures_lite_join(n: usize, inner: &Inner) -> Vec<Slot> {
    let mut set = tokio::task::JoinSet::new();
    let mut out = Vec::new();
    for _ in 0..n {
        let id = next_slot_id();
        let cfg = inner.cfg.clone();
        let layout = inner.layout.clone();
        let instance = inner.instance;
        set.spawn(async move {
            let slot = Slot::create(&cfg, &layout, instance, id).await?;
            prepare_zygote(&cfg, &slot).await;
            Ok::<_, SlotError>(slot)
        });
    }
    while let Some(r) = set.join_next().await {
        match r {
            Ok(Ok(slot)) => out.push(slot),
            Ok(Err(e)) => {
                tracing::warn!("building a warm slot failed: {e}");
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Err(e) => tracing::warn!("slot builder panicked: {e}"),
        }
    }
    out
}

#[async_trait]
impl CodeRunner for Sandbox {
    fn is_sandboxed(&self) -> bool {
        true
    }

    async fn run(&self, request: RunRequest) -> Result<RunResult, RunnerError> {
        Ok(Sandbox::run(self, &request).await)
    }

    async fn run_tests(&self, request: &TestsRequest) -> Result<Vec<TestOutcome>, RunnerError> {
        let r = request;
        Sandbox::run_tests(self, r.language, &r.code, &r.tests, r.limits, r.stop_on_failure)
            .await
            .map_err(|e| RunnerError::Backend(e.to_string()))
    }

    async fn open_session(&self) -> Result<Box<dyn CodeSession>, RunnerError> {
        let slot = self
            .session_slot()
            .await
            .map_err(|e| RunnerError::Backend(format!("cannot open a session: {e}")))?;
        Ok(Box::new(SlotSession {
            sandbox: self.clone(),
            slot: tokio::sync::RwLock::new(Some(slot)),
        }))
    }
}

/// A session of this process's sandbox: one slot kept until closed (or dropped), then
/// destroyed with everything it ran.
#[derive(Debug)]
struct SlotSession {
    sandbox: Sandbox,
    slot: tokio::sync::RwLock<Option<Slot>>,
}

fn closed() -> RunnerError {
    RunnerError::Backend("the session is closed".into())
}

#[async_trait]
impl CodeSession for SlotSession {
    async fn exec(
        &self,
        command: &str,
        stdin: &str,
        limits: Limits,
    ) -> Result<RunResult, RunnerError> {
        let slot = self.slot.read().await;
        let slot = slot.as_ref().ok_or_else(closed)?;
        Ok(self.sandbox.exec_command(slot, command, stdin, limits).await)
    }

    async fn write_file(&self, path: &str, bytes: &[u8]) -> Result<(), RunnerError> {
        check_session_path(path)?;
        let slot = self.slot.read().await;
        let slot = slot.as_ref().ok_or_else(closed)?;
        slot.write_file(path, bytes.to_vec(), 0o644)
            .await
            .map(|_| ())
            .map_err(|e| RunnerError::Backend(format!("{path}: {e}")))
    }

    async fn read_file(&self, path: &str, max: u64) -> Result<Vec<u8>, RunnerError> {
        check_session_path(path)?;
        let slot = self.slot.read().await;
        let slot = slot.as_ref().ok_or_else(closed)?;
        slot.read_file(path, max).await.map_err(|e| RunnerError::Backend(format!("{path}: {e}")))
    }

    async fn close(&self) {
        if let Some(slot) = self.slot.write().await.take() {
            self.sandbox.retire(slot);
        }
    }
}

impl Drop for SlotSession {
    fn drop(&mut self) {
        if let Some(slot) = self.slot.get_mut().take() {
            // Off a runtime the slot's own drop destroys it.
            if tokio::runtime::Handle::try_current().is_ok() {
                self.sandbox.retire(slot);
            }
        }
    }
}
