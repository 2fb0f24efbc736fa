//! `temper inference serve` as a user starts it: on SmolLM2 (from `scripts/fetch-assets`).

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Command, Stdio};

fn smollm2() -> PathBuf {
    let root = std::env::var_os("TEMPER_ASSETS")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../.assets"));
    let p = root.join("smollm2/SmolLM2-135M-Instruct.Q4_1.gguf");
    assert!(p.exists(), "{} is missing: run scripts/fetch-assets first", p.display());
    p
}

/// Kills the server when the test ends, however it ends.
struct Server(std::process::Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[tokio::test]
async fn serve_answers_health_models_and_completions() {
    // As `vllm serve MODEL --port N`: the model positional, the port a flag (0: a free one).
    let child = Command::new(env!("CARGO_BIN_EXE_temper"))
        .args(["inference", "serve"])
        .arg(smollm2())
        .args(["--port", "0", "--served-model-name", "smol"])
        .env_remove("TEMPER_LOG")
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut server = Server(child);
    let stderr = server.0.stderr.take().unwrap();
    let (lines_tx, lines) = std::sync::mpsc::channel::<String>();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            let _ = lines_tx.send(line);
        }
    });
    let wait_for = |needle: &str| -> String {
        loop {
            let line = lines
                .recv_timeout(std::time::Duration::from_secs(120))
                .unwrap_or_else(|_| panic!("the server never said {needle:?}"));
            if line.contains(needle) {
                return line;
            }
        }
    };
    // "temper inference: serving on http://127.0.0.1:PORT/v1"
    let line = wait_for("serving on ");
    let url = line.split("serving on ").nth(1).unwrap().trim_end_matches("/v1").to_owned();
    let health: serde_json::Value =
        reqwest::get(format!("{url}/health")).await.unwrap().json().await.unwrap();
    assert_eq!((health["status"].as_str(), health["model"].as_str()), (Some("ok"), Some("smol")));
    let models: serde_json::Value =
        reqwest::get(format!("{url}/v1/models")).await.unwrap().json().await.unwrap();
    assert_eq!(models["data"][0]["max_model_len"], 8192);
    let body = serde_json::json!({"prompt": "The capital of France is", "max_tokens": 3, "temperature": 0});
    let r: serde_json::Value = reqwest::Client::new()
        .post(format!("{url}/v1/completions"))
        .json(&body)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert!(r["choices"][0]["text"].as_str().unwrap().contains("Paris"), "{r}");
    assert_eq!(r["usage"]["completion_tokens"], 3);
    // A line per request (not for the health probe), without colour codes on a pipe.
    let logged = wait_for("/v1/");
    assert!(logged.contains("GET /v1/models 200"), "{logged}");
    let logged = wait_for("/v1/completions");
    assert!(logged.contains("POST /v1/completions 200") && !logged.contains('\u{1b}'), "{logged}");
}

#[test]
fn a_busy_port_fails_before_the_model_loads() {
    let busy = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = busy.local_addr().unwrap().port().to_string();
    let started = std::time::Instant::now();
    let out = Command::new(env!("CARGO_BIN_EXE_temper"))
        .args(["inference", "serve"])
        .arg(smollm2())
        .args(["--port", &port])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.starts_with(&format!("error: cannot listen on 127.0.0.1:{port}: ")), "{err}");
    assert!(!err.contains("loaded in"), "the model was loaded first: {err}");
    assert!(started.elapsed() < std::time::Duration::from_secs(10));
}

#[test]
fn serve_refuses_what_cannot_run_before_listening() {
    // This build has no CUDA: refused with the reason, before loading anything.
    let out = Command::new(env!("CARGO_BIN_EXE_temper"))
        .args(["inference", "serve", "--addr", "127.0.0.1:0", "--device", "cuda", "--model"])
        .arg(smollm2())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    if cfg!(feature = "cuda") {
        assert!(err.contains("--device cuda:0: cannot open the device"), "{err}");
    } else {
        assert!(
            err.starts_with("error: --device cuda:0: this temper was built without CUDA; build it with `cargo build --release --features cuda`"),
            "{err}"
        );
    }
    let out = Command::new(env!("CARGO_BIN_EXE_temper"))
        .args(["inference", "serve", "--device", "tpu", "--model"])
        .arg(smollm2())
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&out.stderr).contains("expected cpu, cuda or cuda:N"));
    let out = Command::new(env!("CARGO_BIN_EXE_temper"))
        .args(["inference", "serve", "--addr", "127.0.0.1:0", "--model", "/nonexistent/model.gguf"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("/nonexistent/model.gguf"));
}
