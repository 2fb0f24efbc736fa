//! A sandbox built with the helper binary of this crate, and checks that nothing is left behind.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use temper_protocol::{Language, Limits, RunRequest, RunResult};
use temper_sandbox::{Sandbox, SandboxConfig};

pub fn config() -> SandboxConfig {
    SandboxConfig {
        helper: (
            PathBuf::from(env!("CARGO_BIN_EXE_temper-sandbox-slot")),
            vec!["__sandbox-slot".into()],
        ),
        pool_size: 2,
        ..SandboxConfig::default()
    }
}

pub async fn sandbox() -> Sandbox {
    Sandbox::new(config()).await.expect("the sandbox starts on this machine (root, cgroups)")
}

pub fn req(language: Language, code: &str) -> RunRequest {
    RunRequest { language, code: code.to_owned(), stdin: String::new(), limits: Limits::default() }
}

pub async fn run(sb: &Sandbox, language: Language, code: &str) -> RunResult {
    sb.run(&req(language, code)).await
}

/// Host processes running as either of the sandbox's host uids.
pub fn sandbox_processes(cfg: &SandboxConfig) -> Vec<String> {
    let uids = [cfg.host_root_uid.to_string(), cfg.host_user_uid.to_string()];
    std::fs::read_dir("/proc")
        .expect("/proc")
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().bytes().all(|b| b.is_ascii_digit()))
        .filter_map(|e| {
            let status = std::fs::read_to_string(e.path().join("status")).ok()?;
            let uid_line = status.lines().find(|l| l.starts_with("Uid:"))?;
            let real = uid_line.split_whitespace().nth(1)?;
            uids.iter()
                .any(|u| u == real)
                .then(|| format!("{} {}", e.file_name().to_string_lossy(), uid_line))
        })
        .collect()
}

/// Slot cgroups of a sandbox that still exist.
pub fn slot_cgroups(prefix: &str) -> Vec<String> {
    [
        "/sys/fs/cgroup/temper",
        "/sys/fs/cgroup/memory/temper",
        "/sys/fs/cgroup/pids/temper",
        "/sys/fs/cgroup/unified/temper",
    ]
    .iter()
    .filter_map(|d| std::fs::read_dir(d).ok())
    .flatten()
    .filter_map(|e| e.ok())
    .map(|e| e.file_name().to_string_lossy().into_owned())
    .filter(|n| n.starts_with(prefix))
    .collect()
}

/// Shuts the sandbox down and waits until none of its slot cgroups remains (so none of its
/// processes: a cgroup can only be removed once empty).
pub async fn assert_clean(sb: &Sandbox) {
    sb.shutdown().await;
    let prefix = sb.cgroup_prefix();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let groups = slot_cgroups(&prefix);
        if groups.is_empty() {
            return;
        }
        assert!(Instant::now() < deadline, "left behind: cgroups {groups:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
