//! `temper sandbox run`.

use std::process::Command;

use serde_json::Value;

fn sandbox_run(file: &std::path::Path, extra: &[&str]) -> (Option<i32>, Value) {
    let out = Command::new(env!("CARGO_BIN_EXE_temper"))
        .args(["sandbox", "run"])
        .arg(file)
        .args(extra)
        .output()
        .expect("run temper");
    let json = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|_| panic!("{}", String::from_utf8_lossy(&out.stderr)));
    (out.status.code(), json)
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
