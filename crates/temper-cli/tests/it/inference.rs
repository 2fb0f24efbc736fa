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
    let child = Command::new(env!("CARGO_BIN_EXE_temper"))
        .args([
            "inference",
            "serve",
            "--addr",
            "127.0.0.1:0",
            "--served-model-name",
            "smol",
            "--model",
        ])
        .arg(smollm2())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut server = Server(child);
    let stderr = server.0.stderr.take().unwrap();
    // "temper inference: serving on http://127.0.0.1:PORT/v1"
    let url = BufReader::new(stderr)
        .lines()
        .map_while(Result::ok)
        .find_map(|l| l.split("serving on ").nth(1).map(|u| u.trim_end_matches("/v1").to_owned()))
        .expect("the server said where it listens");
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
    assert!(err.contains("cannot open CUDA device 0"), "{err}");
    let out = Command::new(env!("CARGO_BIN_EXE_temper"))
        .args(["inference", "serve", "--device", "tpu", "--model"])
        .arg(smollm2())
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&out.stderr).contains("expected cpu, cuda or cuda:N"));
    let out = Command::new(env!("CARGO_BIN_EXE_temper"))
        .args(["inference", "serve", "--model", "/nonexistent/model.gguf"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("/nonexistent/model.gguf"));
}
