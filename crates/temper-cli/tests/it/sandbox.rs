//! `temper sandbox run`.

use std::process::Command;

use serde_json::Value;

fn sandbox_run(file: &std::path::Path, extra: &[&str]) -> (Option<i32>, Value) {
    let child = Command::new(env!("CARGO_BIN_EXE_temper"))
        .args(["sandbox", "run"])
        .arg(file)
        .args(extra)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run temper");
    let pid = child.id();
    let out = child.wait_with_output().expect("run temper");
    let json = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|_| panic!("{}", String::from_utf8_lossy(&out.stderr)));
    slot_groups_go(pid);
    (out.status.code(), json)
}

/// `temper sandbox run` answers before its slot is torn down and leaves that to its reaper: the
/// slot's cgroups (and so every process in them) must be gone soon after it exits.
fn slot_groups_go(pid: u32) {
    let prefix = format!("slot-{pid}-");
    let parents = ["temper", "memory/temper", "pids/temper", "cpu/temper", "unified/temper"];
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let left: Vec<String> = parents
            .iter()
            .filter_map(|p| std::fs::read_dir(format!("/sys/fs/cgroup/{p}")).ok())
            .flatten()
            .filter_map(Result::ok)
            .map(|e| e.path().display().to_string())
            .filter(|p| p.rsplit('/').next().is_some_and(|n| n.starts_with(&prefix)))
            .collect();
        if left.is_empty() {
            return;
        }
        assert!(std::time::Instant::now() < deadline, "left behind by temper {pid}: {left:?}");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

#[test]
fn prints_one_json_result() {
    let dir = tempfile::tempdir().expect("tempdir");
    let ok = dir.path().join("ok.py");
    std::fs::write(&ok, "import sys\nprint(sys.stdin.read().upper())").expect("write");
    let input = dir.path().join("in.txt");
    std::fs::write(&input, "hi").expect("write");
    let (code, r) = sandbox_run(&ok, &["--stdin", input.to_str().expect("utf-8")]);
    assert_eq!(code, Some(0));
    assert_eq!((r["status"].as_str(), r["stdout"].as_str()), (Some("ok"), Some("HI\n")), "{r}");
    for key in ["exit_code", "signal", "stderr", "wall_ms", "cpu_ms", "max_rss_kb"] {
        assert!(r.get(key).is_some(), "{key} missing from {r}");
    }

    let spin = dir.path().join("spin.c");
    std::fs::write(&spin, "int main(void) { for (;;) {} }").expect("write");
    let (code, r) = sandbox_run(&spin, &["--time-limit-ms", "300"]);
    assert_eq!(
        (code, r["status"].as_str()),
        (Some(0), Some("timeout")),
        "a program's failure is not the sandbox's: {r}"
    );

    let script = dir.path().join("fail.txt");
    std::fs::write(&script, "exit 3").expect("write");
    let (code, r) = sandbox_run(&script, &["--lang", "bash"]);
    assert_eq!(
        (code, r["status"].as_str(), r["exit_code"].as_i64()),
        (Some(0), Some("runtime_error"), Some(3))
    );
}
