//! The HTTP API, and the client that implements `CodeRunner` over it.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use temper_protocol::{Language, Limits, RunRequest, RunStatus, TestCase, TestsRequest};
use temper_sandbox::server::{self, ServerOptions};
use temper_verify::code::CodeRunner;

use crate::support::{assert_clean, sandbox};

async fn start(options: ServerOptions) -> (String, temper_sandbox::Sandbox) {
    let sb = sandbox().await;
    let state = server::state(sb.clone(), options);
    tokio::spawn(server::expire_idle(Arc::downgrade(&state)));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let url = format!("http://{}", listener.local_addr().expect("addr"));
    tokio::spawn(async move { axum::serve(listener, server::router(state)).await });
    (url, sb)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runs_tests_sessions_and_errors() {
    let (url, sb) = start(ServerOptions::default()).await;
    let http = reqwest::Client::new();
    let post = |path: &str, body: Value| http.post(format!("{url}{path}")).json(&body).send();

    let r: Value = post("/v1/run", json!({"language": "python", "code": "print(open('data.txt').read())", "files": {"data.txt": "hello"}}))
        .await.expect("run").json().await.expect("json");
    assert_eq!((r["status"].as_str(), r["stdout"].as_str()), (Some("ok"), Some("hello\n")), "{r}");

    let r: Value = post("/v1/run_tests", json!({"language": "python", "code": "print(sum(map(int, input().split())))",
        "tests": [{"stdin": "1 2", "expected_stdout": "3"}, {"stdin": "2 2", "expected_stdout": "5"}]}))
        .await.expect("tests").json().await.expect("json");
    assert_eq!((r["passed"].as_u64(), r["total"].as_u64()), (Some(1), Some(2)), "{r}");
    assert_eq!(r["results"][1]["passed"], false);

    // A session keeps its files and its work between commands.
    let created = post("/v1/sandboxes", json!({})).await.expect("open");
    assert_eq!(created.status(), 201);
    let id = created.json::<Value>().await.expect("json")["id"].as_str().expect("id").to_owned();
    let put = http
        .put(format!("{url}/v1/sandboxes/{id}/files/src/a.txt"))
        .body("abc")
        .send()
        .await
        .expect("put");
    assert_eq!(put.status(), 200);
    let r: Value = post(
        &format!("/v1/sandboxes/{id}/exec"),
        json!({"command": "cat src/a.txt; echo def > b.txt"}),
    )
    .await
    .expect("exec")
    .json()
    .await
    .expect("json");
    assert_eq!(r["stdout"], "abc", "{r}");
    let got = http.get(format!("{url}/v1/sandboxes/{id}/files/b.txt")).send().await.expect("get");
    assert_eq!(got.text().await.expect("text"), "def\n");

    // Hostile paths and bodies are refused with the common error shape.
    for path in ["../etc/passwd", "a/../../x", "/etc/passwd"] {
        let r = http
            .put(format!("{url}/v1/sandboxes/{id}/files/{path}"))
            .body("x")
            .send()
            .await
            .expect("put");
        assert!(r.status().is_client_error(), "{path}: {}", r.status());
    }
    let bad = post("/v1/run", json!({"language": "cobol", "code": ""})).await.expect("bad");
    assert_eq!(bad.status(), 422);
    let err: Value = bad.json().await.expect("json");
    assert_eq!(err["error"]["code"], "bad_request", "{err}");
    let unknown =
        post("/v1/sandboxes/nope/exec", json!({"command": "true"})).await.expect("unknown");
    assert_eq!(unknown.status(), 404);

    let deleted = http.delete(format!("{url}/v1/sandboxes/{id}")).send().await.expect("delete");
    assert_eq!(deleted.status(), 204);
    assert_eq!(
        post(&format!("/v1/sandboxes/{id}/exec"), json!({"command": "true"}))
            .await
            .expect("gone")
            .status(),
        404
    );

    let health: Value =
        http.get(format!("{url}/health")).send().await.expect("health").json().await.expect("json");
    assert_eq!(health["status"], "ok");
    let metrics = http
        .get(format!("{url}/metrics"))
        .send()
        .await
        .expect("metrics")
        .text()
        .await
        .expect("text");
    let ok = temper_protocol::exposition::sample(
        &metrics,
        "temper_sandbox_runs_total",
        &[("status", "ok"), ("role", "sandbox")],
    );
    assert!(ok.is_some_and(|n| n >= 1.0), "{metrics}");
    assert_clean(&sb).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn backpressure_and_idle_expiry() {
    let options = ServerOptions {
        max_concurrent: 1,
        max_queue: 0,
        max_sessions: 1,
        idle_timeout: Duration::from_secs(1),
        ..ServerOptions::default()
    };
    let (url, sb) = start(options).await;
    let http = reqwest::Client::new();
    let slow = json!({"language": "python", "code": "import time; time.sleep(1)"});
    let responses = futures::future::join_all(
        (0..3).map(|_| http.post(format!("{url}/v1/run")).json(&slow).send()),
    )
    .await;
    let statuses: Vec<u16> =
        responses.iter().map(|r| r.as_ref().expect("response").status().as_u16()).collect();
    assert!(statuses.contains(&200) && statuses.contains(&429), "{statuses:?}");
    let busy = responses
        .into_iter()
        .map(|r| r.expect("response"))
        .find(|r| r.status() == 429)
        .expect("a 429");
    assert_eq!(busy.headers().get("retry-after").and_then(|v| v.to_str().ok()), Some("1"));

    let first = http.post(format!("{url}/v1/sandboxes")).send().await.expect("open");
    assert_eq!(first.status(), 201);
    let id = first.json::<Value>().await.expect("json")["id"].as_str().expect("id").to_owned();
    assert_eq!(
        http.post(format!("{url}/v1/sandboxes")).send().await.expect("second").status(),
        429,
        "one session at most"
    );
    tokio::time::sleep(Duration::from_millis(2_500)).await;
    let gone = http
        .post(format!("{url}/v1/sandboxes/{id}/exec"))
        .json(&json!({"command": "true"}))
        .send()
        .await
        .expect("exec");
    assert_eq!(gone.status(), 404, "the idle session expired");
    assert_eq!(http.post(format!("{url}/v1/sandboxes")).send().await.expect("again").status(), 201);
    assert_clean(&sb).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_client_is_a_code_runner() {
    let (url, sb) = start(ServerOptions::default()).await;
    let client = temper_client::sandbox::SandboxClient::new(&url).expect("client");
    assert!(client.is_sandboxed());
    let r = CodeRunner::run(
        &client,
        RunRequest {
            language: Language::Bash,
            code: "echo $((2+3))".into(),
            stdin: String::new(),
            limits: Limits::default(),
        },
    )
    .await
    .expect("run");
    assert_eq!((r.status, r.stdout.as_str()), (RunStatus::Ok, "5\n"));
    let tests = vec![TestCase::lines("4", "16")];
    let request = TestsRequest {
        language: Language::Python,
        code: "n = int(input())\nprint(n * n)".into(),
        tests,
        limits: Limits::default(),
        stop_on_failure: true,
    };
    let outcomes = client.run_tests(&request).await.expect("tests");
    assert!(outcomes[0].passed, "{outcomes:?}");
    assert!(
        temper_client::sandbox::SandboxClient::new("http://127.0.0.1:1")
            .expect("client")
            .run(RunRequest {
                language: Language::Bash,
                code: "true".into(),
                stdin: String::new(),
                limits: Limits::default()
            })
            .await
            .is_err()
    );
    assert_clean(&sb).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_sessions_are_held_and_each_works() {
    let sb = sandbox().await;
    let mut set = tokio::task::JoinSet::new();
    let mut slots = Vec::new();
    for _ in 0..1000 {
        let sb = sb.clone();
        set.spawn(async move { sb.fresh_slot().await });
        while set.len() >= 16 {
            slots.push(set.join_next().await.expect("task").expect("join").expect("slot"));
        }
    }
    while let Some(r) = set.join_next().await {
        slots.push(r.expect("join").expect("slot"));
    }
    assert_eq!(slots.len(), 1000);
    let slots = Arc::new(slots);
    let mut checks = tokio::task::JoinSet::new();
    let mut correct = 0;
    for i in 0..1000 {
        let (sb, slots) = (sb.clone(), Arc::clone(&slots));
        checks.spawn(async move {
            let exec =
                sb.exec_request(vec!["/bin/sh".into(), "-c".into(), format!("echo {i}")], 5_000);
            slots[i]
                .exec(exec, Vec::new(), Duration::from_secs(30), 1024)
                .await
                .is_ok_and(|o| o.stdout == format!("{i}\n").into_bytes())
        });
        while checks.len() >= 32 {
            correct += usize::from(checks.join_next().await.is_some_and(|r| r.unwrap_or(false)));
        }
    }
    while let Some(r) = checks.join_next().await {
        correct += usize::from(r.unwrap_or(false));
    }
    assert_eq!(correct, 1000);
    for slot in Arc::try_unwrap(slots).expect("unshared") {
        sb.retire(slot);
    }
    assert_clean(&sb).await;
}
