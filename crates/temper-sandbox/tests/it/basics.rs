//! Ordinary programs: statuses, languages, limits.

use temper_protocol::{Language, Limits, RunRequest, RunStatus};

use crate::support::sandbox;

fn req(language: Language, code: &str, stdin: &str) -> RunRequest {
    RunRequest {
        language,
        code: code.to_owned(),
        stdin: stdin.to_owned(),
        limits: Limits::default(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_runs_and_reads_stdin() {
    let sb = sandbox().await;
    let r =
        sb.run(&req(Language::Python, "import sys\nprint(sys.stdin.read()[::-1])", "abc")).await;
    assert_eq!(r.status, RunStatus::Ok, "{r:?}");
    assert_eq!(r.stdout, "cba\n");
    sb.shutdown().await;
}
