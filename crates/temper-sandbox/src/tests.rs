//! Behaviour of the unsandboxed runner: statuses, limits and cleanup.

use std::time::{Duration, Instant};

use temper_protocol::{Language, Limits, RunRequest, RunStatus};
use temper_verify::code::CodeRunner;

use crate::Unsandboxed;

fn request(language: Language, code: &str, stdin: &str, limits: Limits) -> RunRequest {
    RunRequest { language, code: code.to_owned(), stdin: stdin.to_owned(), limits }
}

async fn run(
    language: Language,
    code: &str,
    stdin: &str,
    limits: Limits,
) -> temper_protocol::RunResult {
    Unsandboxed::new().run(request(language, code, stdin, limits)).await.expect("runner")
}

#[tokio::test]
async fn statuses_of_ordinary_programs() {
    let r = run(Language::Python, "print(input()[::-1])", "abc\n", Limits::default()).await;
    assert_eq!((r.status, r.exit_code, r.stdout.as_str()), (RunStatus::Ok, Some(0), "cba\n"));
    let r = run(
        Language::Python,
        "import sys\nsys.stderr.write('bad')\nsys.exit(3)",
        "",
        Limits::default(),
    )
    .await;
    assert_eq!(
        (r.status, r.exit_code, r.stderr.as_str()),
        (RunStatus::RuntimeError, Some(3), "bad")
    );
    let r = run(Language::Bash, "kill -SEGV $$", "", Limits::default()).await;
    assert_eq!((r.status, r.signal), (RunStatus::RuntimeError, Some(11)));
    let r = run(Language::Bash, "read x; echo $((x * 2))", "21\n", Limits::default()).await;
    assert_eq!(r.stdout, "42\n");
}

#[tokio::test]
async fn c_and_cpp_compile_or_report_the_compiler() {
    let r = run(
        Language::C,
        "#include <stdio.h>\nint main(){int a,b;scanf(\"%d %d\",&a,&b);printf(\"%d\\n\",a+b);}",
        "2 3",
        Limits::default(),
    )
    .await;
    assert_eq!((r.status, r.stdout.as_str()), (RunStatus::Ok, "5\n"));
    let r = run(
        Language::Cpp,
        "#include <iostream>\nint main(){std::cout<<\"hi\"<<std::endl;}",
        "",
        Limits::default(),
    )
    .await;
    assert_eq!((r.status, r.stdout.as_str()), (RunStatus::Ok, "hi\n"));
    let r = run(Language::C, "int main( { return 0; }", "", Limits::default()).await;
    assert_eq!(r.status, RunStatus::CompileError);
    assert!(r.stderr.contains("error"), "{}", r.stderr);
}

#[tokio::test]
async fn limits_end_runaway_programs() {
    let start = Instant::now();
    let limits = Limits { time_limit_ms: Some(300), ..Limits::default() };
    let r = run(Language::Python, "while True: pass", "", limits).await;
    assert_eq!(r.status, RunStatus::Timeout);
    assert!(start.elapsed() < Duration::from_secs(5));

    let limits = Limits { output_bytes: Some(1000), ..Limits::default() };
    let r = run(Language::Python, "while True: print('x' * 100)", "", limits).await;
    assert_eq!(r.status, RunStatus::OutputLimit);
    assert_eq!(r.stdout.len(), 1000);

    let limits = Limits { memory_mb: Some(64), ..Limits::default() };
    let r =
        run(Language::Python, "x = bytearray(512 * 1024 * 1024)\nprint('allocated')", "", limits)
            .await;
    assert_eq!(r.status, RunStatus::RuntimeError);
    assert!(r.stderr.contains("MemoryError"), "{}", r.stderr);
}

#[tokio::test]
async fn background_processes_do_not_outlive_the_run() {
    let r = run(Language::Bash, "sleep 1000 &\necho $!", "", Limits::default()).await;
    assert_eq!(r.status, RunStatus::Ok);
    let pid: i32 = r.stdout.trim().parse().expect("pid");
    let deadline = Instant::now() + Duration::from_secs(3);
    loop {
        let alive = std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .is_ok_and(|s| s.split_whitespace().nth(2).is_none_or(|state| state != "Z"));
        if !alive {
            break;
        }
        assert!(Instant::now() < deadline, "the background sleep {pid} survived the run");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn a_cancelled_run_leaves_no_process_behind() {
    let dir = tempfile::tempdir().expect("tempdir");
    let marker = dir.path().join("pid");
    let code = format!("sleep 1000 &\necho $! > {}\nwait", marker.display());
    let runner = Unsandboxed::new();
    let run = runner.run(request(Language::Bash, &code, "", Limits::default()));
    // The caller gives up long before the program's own limit.
    assert!(tokio::time::timeout(Duration::from_millis(500), run).await.is_err());
    let pid: i32 = std::fs::read_to_string(&marker).expect("pid file").trim().parse().expect("pid");
    let deadline = Instant::now() + Duration::from_secs(3);
    while std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .is_ok_and(|s| s.split_whitespace().nth(2) != Some("Z"))
    {
        assert!(Instant::now() < deadline, "the sleep {pid} survived a cancelled run");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
