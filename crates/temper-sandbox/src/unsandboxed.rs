use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use temper_protocol::{Language, Limits, RunRequest, RunResult, RunStatus};
use temper_verify::code::{CodeRunner, RunnerError};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::process::Command;

use crate::config::{DEFAULT_MAX_MEMORY_MB, DEFAULT_MAX_OUTPUT_BYTES, DEFAULT_MAX_TIME_LIMIT_MS};

/// Defaults of `temper sandbox run`: 5 s wall, 256 MiB, 1 MiB per output stream.
const DEFAULT_TIME_MS: u64 = 5_000;
const DEFAULT_MEMORY_MB: u64 = 256;
const DEFAULT_OUTPUT_BYTES: u64 = 1 << 20;
const COMPILE_TIME_MS: u64 = 20_000;

/// Runs programs as plain child processes, without isolation (see the crate docs).
#[derive(Debug, Clone, Default)]
pub struct Unsandboxed {
    session_root: Option<std::path::PathBuf>,
}

impl Unsandboxed {
    /// A runner. Isolates nothing.
    pub fn new() -> Self {
        Self::default()
    }

    /// Makes session folders under `root` instead of the system's temporary folder.
    pub fn with_session_root(mut self, root: impl Into<std::path::PathBuf>) -> Self {
        self.session_root = Some(root.into());
        self
    }
}

struct Outcome {
    status: Option<std::process::ExitStatus>,
    timed_out: bool,
    stdout: Vec<u8>,
    stderr: Vec<u8>,
    output_over: bool,
    wall: Duration,
}

/// Exit code and stderr marker of the shell wrapper when it cannot apply the limits.
const LIMITS_FAILED_CODE: i32 = 125;
const LIMITS_FAILED: &str = "temper: cannot apply resource limits";

/// Runs `program args...` in `dir` under `ulimit`s, feeding `stdin`, within `limits`.
///
/// The program runs in its own process group. When it exits (or the wall-clock limit passes, or
/// an output stream goes over its cap) the whole group is killed, so background children end with
/// it and release the output pipes.
async fn execute(
    dir: &Path,
    argv: &[&str],
    stdin: &[u8],
    limits: Limits,
) -> std::io::Result<Outcome> {
    // The sandbox's default ceilings apply here too: a request or package cannot lift them.
    let time_ms = limits.time_limit_ms.unwrap_or(DEFAULT_TIME_MS).min(DEFAULT_MAX_TIME_LIMIT_MS);
    let memory_kb = limits.memory_mb.unwrap_or(DEFAULT_MEMORY_MB).min(DEFAULT_MAX_MEMORY_MB) * 1024;
    let output_cap =
        limits.output_bytes.unwrap_or(DEFAULT_OUTPUT_BYTES).min(DEFAULT_MAX_OUTPUT_BYTES);
    let cpu_s = time_ms.div_ceil(1000).max(1);
    // The shell applies the limits to itself, one per call (as POSIX sh requires), then becomes
    // the program; if any limit cannot be set, nothing runs.
    let script = format!(
        "ulimit -t {cpu_s} && ulimit -v {memory_kb} && ulimit -f 65536 || \
         {{ echo '{LIMITS_FAILED}' >&2; exit {LIMITS_FAILED_CODE}; }}; exec \"$@\""
    );
    let start = Instant::now();
    let mut child = Command::new("sh")
        .arg("-c")
        .arg(script)
        .arg("sh")
        .args(argv)
        .current_dir(dir)
        .env_clear()
        .env("PATH", "/usr/local/bin:/usr/bin:/bin")
        .env("HOME", dir)
        .env("LANG", "C.UTF-8")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .kill_on_drop(true)
        .spawn()?;
    let pgid = child.id().map(|id| Pid::from_raw(id as i32));
    // If this future is dropped (a caller's timeout), the whole group still dies.
    let _guard = KillGroup(pgid);
    let input = child.stdin.take();
    let stdin = stdin.to_vec();
    let feed = tokio::spawn(async move {
        if let Some(mut pipe) = input {
            // A program that exits without reading its input is not an error.
            let _ = pipe.write_all(&stdin).await;
        }
    });
    let out = tokio::spawn(read_capped(child.stdout.take(), output_cap, pgid));
    let err = tokio::spawn(read_capped(child.stderr.take(), output_cap, pgid));
    let waited = tokio::time::timeout(Duration::from_millis(time_ms), child.wait()).await;
    let wall = start.elapsed();
    // Whatever happened, nothing of the run may survive it.
    if let Some(pgid) = pgid {
        let _ = killpg(pgid, Signal::SIGKILL);
    }
    feed.abort();
    let (status, timed_out) = match waited {
        Ok(status) => (Some(status?), false),
        Err(_) => {
            let _ = child.wait().await;
            (None, true)
        }
    };
    // The pipes close once the group is dead; a process that left the group could hold them, so
    // the wait for the last bytes is bounded.
    let drained =
        tokio::time::timeout(Duration::from_secs(2), async { (out.await, err.await) }).await;
    let ((stdout, over_out), (stderr, over_err)) = match drained {
        Ok((Ok(o), Ok(e))) => (o, e),
        _ => {
            ((Vec::new(), false), (b"temper: output pipes held open after the run".to_vec(), false))
        }
    };
    Ok(Outcome { status, timed_out, stdout, stderr, output_over: over_out || over_err, wall })
}

/// Kills a process group when dropped.
struct KillGroup(Option<Pid>);

impl Drop for KillGroup {
    fn drop(&mut self) {
        if let Some(pgid) = self.0 {
            let _ = killpg(pgid, Signal::SIGKILL);
        }
    }
}

/// Whether the shell could not find the program it was asked to become.
fn not_found(outcome: &Outcome) -> bool {
    outcome.status.and_then(|s| s.code()) == Some(127)
        && String::from_utf8_lossy(&outcome.stderr).contains("exec:")
}

/// Reads a stream to its end, keeping at most `cap` bytes; the flag says whether there was more,
/// in which case the process group is killed at once.
async fn read_capped(
    stream: Option<impl AsyncRead + Unpin>,
    cap: u64,
    pgid: Option<Pid>,
) -> (Vec<u8>, bool) {
    let Some(stream) = stream else { return (Vec::new(), false) };
    let mut kept = Vec::new();
    let _ = stream.take(cap + 1).read_to_end(&mut kept).await;
    let over = kept.len() as u64 > cap;
    if over {
        kept.truncate(cap as usize);
        if let Some(pgid) = pgid {
            let _ = killpg(pgid, Signal::SIGKILL);
        }
    }
    (kept, over)
}

fn lossy(bytes: Vec<u8>) -> String {
    String::from_utf8(bytes).unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned())
}

fn result_of(outcome: Outcome) -> RunResult {
    use std::os::unix::process::ExitStatusExt;
    let mut result = RunResult::internal_error("");
    result.stdout = lossy(outcome.stdout);
    result.stderr = lossy(outcome.stderr);
    result.wall_ms = outcome.wall.as_secs_f64() * 1e3;
    result.exit_code = outcome.status.and_then(|s| s.code());
    result.signal = outcome.status.and_then(|s| s.signal());
    result.status = if result.exit_code == Some(LIMITS_FAILED_CODE)
        && result.stderr.starts_with(LIMITS_FAILED)
    {
        RunStatus::InternalError
    } else if outcome.timed_out {
        RunStatus::Timeout
    } else if outcome.output_over {
        RunStatus::OutputLimit
    } else if result.signal == Some(libc::SIGXCPU) {
        RunStatus::Timeout
    } else if result.exit_code == Some(0) {
        RunStatus::Ok
    } else {
        RunStatus::RuntimeError
    };
    result
}

#[async_trait]
impl CodeRunner for Unsandboxed {
    fn is_sandboxed(&self) -> bool {
        false
    }

    async fn run(&self, request: RunRequest) -> Result<RunResult, RunnerError> {
        let dir = tempfile::tempdir()
            .map_err(|e| RunnerError::Backend(format!("cannot create a work dir: {e}")))?;
        let path = dir.path();
        let write = |name: &str| {
            std::fs::write(path.join(name), &request.code)
                .map_err(|e| RunnerError::Backend(format!("cannot write {name}: {e}")))
        };
        let compile = |compiler: &'static str, source: &'static str, std: &'static str| async move {
            let limits = Limits {
                time_limit_ms: Some(COMPILE_TIME_MS),
                memory_mb: Some(1024),
                output_bytes: Some(DEFAULT_OUTPUT_BYTES),
            };
            let argv = [compiler, std, "-O2", "-o", "prog", source, "-lm"];
            let outcome = execute(path, &argv, b"", limits)
                .await
                .map_err(|e| RunnerError::Backend(format!("cannot start {compiler}: {e}")))?;
            if not_found(&outcome) {
                return Err(RunnerError::UnsupportedLanguage(request.language));
            }
            let ok = outcome.status.is_some_and(|s| s.success());
            Ok::<_, RunnerError>((!ok).then(|| {
                let mut r = result_of(outcome);
                r.status = RunStatus::CompileError;
                r
            }))
        };
        let argv: Vec<&str> = match request.language {
            Language::Python => {
                write("main.py")?;
                vec!["python3", "main.py"]
            }
            Language::Bash => {
                write("main.sh")?;
                vec!["bash", "main.sh"]
            }
            Language::C => {
                write("main.c")?;
                if let Some(failed) = compile("gcc", "main.c", "-std=c17").await? {
                    return Ok(failed);
                }
                vec!["./prog"]
            }
            Language::Cpp => {
                write("main.cpp")?;
                if let Some(failed) = compile("g++", "main.cpp", "-std=c++17").await? {
                    return Ok(failed);
                }
                vec!["./prog"]
            }
        };
        let outcome = execute(path, &argv, request.stdin.as_bytes(), request.limits)
            .await
            .map_err(|e| RunnerError::Backend(format!("cannot start {}: {e}", argv[0])))?;
        if not_found(&outcome) {
            return Err(RunnerError::UnsupportedLanguage(request.language));
        }
        Ok(result_of(outcome))
    }

    async fn open_session(&self) -> Result<Box<dyn temper_verify::code::CodeSession>, RunnerError> {
        let dir = match &self.session_root {
            Some(root) => tempfile::tempdir_in(root),
            None => tempfile::tempdir(),
        }
        .map_err(|e| RunnerError::Backend(format!("cannot create a session folder: {e}")))?;
        Ok(Box::new(FolderSession { dir: std::sync::Mutex::new(Some(dir)) }))
    }
}

/// A session of plain processes in a temporary folder, removed when the session ends. Isolates
/// nothing, as [`Unsandboxed`] does not.
#[derive(Debug)]
struct FolderSession {
    dir: std::sync::Mutex<Option<tempfile::TempDir>>,
}

impl FolderSession {
    fn path(&self) -> Result<std::path::PathBuf, RunnerError> {
        let dir = self.dir.lock().unwrap_or_else(|p| p.into_inner());
        dir.as_ref()
            .map(|d| d.path().to_owned())
            .ok_or_else(|| RunnerError::Backend("the session is closed".into()))
    }

    fn file(&self, path: &str) -> Result<std::path::PathBuf, RunnerError> {
        temper_verify::code::check_session_path(path)?;
        let full = self.path()?.join(path);
        // No part of the way may be a symbolic link: the folder's own programs could have made
        // one pointing anywhere.
        let mut so_far = self.path()?;
        for part in path.split('/') {
            so_far.push(part);
            if so_far.symlink_metadata().is_ok_and(|m| m.file_type().is_symlink()) {
                return Err(RunnerError::Backend(format!("`{path}` goes through a symbolic link")));
            }
        }
        Ok(full)
    }
}

#[async_trait]
impl temper_verify::code::CodeSession for FolderSession {
    async fn exec(
        &self,
        command: &str,
        stdin: &str,
        limits: Limits,
    ) -> Result<RunResult, RunnerError> {
        let dir = self.path()?;
        let outcome = execute(&dir, &["bash", "-c", command], stdin.as_bytes(), limits)
            .await
            .map_err(|e| RunnerError::Backend(format!("cannot start bash: {e}")))?;
        Ok(result_of(outcome))
    }

    async fn write_file(&self, path: &str, bytes: &[u8]) -> Result<(), RunnerError> {
        let full = self.file(path)?;
        if let Some(parent) = full.parent() {
            std::fs::create_dir_all(parent)
                .map_err(|e| RunnerError::Backend(format!("{path}: {e}")))?;
        }
        std::fs::write(&full, bytes).map_err(|e| RunnerError::Backend(format!("{path}: {e}")))
    }

    async fn read_file(&self, path: &str, max: u64) -> Result<Vec<u8>, RunnerError> {
        let full = self.file(path)?;
        let size = std::fs::metadata(&full)
            .map_err(|e| RunnerError::Backend(format!("{path}: {e}")))?
            .len();
        if size > max {
            return Err(RunnerError::Backend(format!("{path}: {size} bytes, over {max}")));
        }
        std::fs::read(&full).map_err(|e| RunnerError::Backend(format!("{path}: {e}")))
    }

    async fn close(&self) {
        drop(self.dir.lock().unwrap_or_else(|p| p.into_inner()).take());
    }
}
