//! The orchestrator against a fake inference server (which fails some requests with HTTP 500 and
//! stalls one past the client's timeout) and a fake trainer (which reads each batch and publishes
//! weights), on reverse-text with a reward function that fails for some completions.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use axum::Json;
use axum::extract::State;
use axum::routing::{get, post};
use serde_json::{Value, json};
use temper_envs::rubric::RewardError;
use temper_envs::{LoadOptions, RewardFunction, RewardInput, Services};
use temper_orchestrator::{NoHooks, OrchestratorConfig, Start};
use temper_protocol::TrainBatch;
use temper_protocol::run_dir::{self, STABLE};

#[derive(Default)]
struct Fake {
    version: AtomicU64,
    requests: AtomicU64,
    failures: AtomicU64,
    stalls: AtomicU64,
    /// Requests (training or evaluation) without a `max_tokens` of at most 32.
    unbounded: AtomicU64,
    updates: std::sync::Mutex<Vec<u64>>,
}

/// Every 5th request answers 500; the 7th stalls 3 s (past the 1 s client timeout). Completions
/// cycle through a right answer, a wrong one and one the flaky reward refuses.
async fn chat(State(f): State<Arc<Fake>>, Json(body): Json<Value>) -> axum::response::Response {
    use axum::response::IntoResponse;
    let n = f.requests.fetch_add(1, Ordering::SeqCst) + 1;
    if n.is_multiple_of(5) {
        f.failures.fetch_add(1, Ordering::SeqCst);
        return (axum::http::StatusCode::INTERNAL_SERVER_ERROR, "overloaded").into_response();
    }
    if n == 7 {
        f.stalls.fetch_add(1, Ordering::SeqCst);
        tokio::time::sleep(Duration::from_secs(3)).await;
    }
    assert_eq!(body["return_token_ids"], json!(true), "the orchestrator asks for token ids");
    if body["max_tokens"].as_u64().is_none_or(|m| m > 32) {
        f.unbounded.fetch_add(1, Ordering::SeqCst);
    }
    let user = body["messages"]
        .as_array()
        .and_then(|m| m.iter().rev().find(|m| m["role"] == "user"))
        .and_then(|m| m["content"].as_str())
        .unwrap_or_default()
        .to_owned();
    let reversed: String = user.chars().rev().collect();
    let text = match n % 3 {
        0 => format!("<reversed_text>{reversed}</reversed_text>"),
        1 => "<reversed_text>qq</reversed_text>".to_owned(),
        _ => "<reversed_text>zzz</reversed_text>".to_owned(),
    };
    let ids: Vec<u32> = text.bytes().map(u32::from).collect();
    let prompt: Vec<u32> = user.bytes().map(u32::from).chain([300]).collect();
    Json(json!({
        "choices": [{"index": 0, "message": {"role": "assistant", "content": text},
                     "finish_reason": "stop", "token_ids": ids,
                     "token_logprobs": vec![-0.5f32; ids.len()]}],
        "usage": {"prompt_tokens": prompt.len(), "completion_tokens": ids.len()},
        "prompt_token_ids": prompt,
        "policy_version": f.version.load(Ordering::SeqCst),
    }))
    .into_response()
}

async fn update(State(f): State<Arc<Fake>>, Json(body): Json<Value>) -> Json<Value> {
    let v = body["version"].as_u64().expect("version");
    let path = PathBuf::from(body["path"].as_str().expect("path"));
    assert!(path.join(STABLE).is_file(), "only complete weights are loaded: {}", path.display());
    f.version.store(v, Ordering::SeqCst);
    f.updates.lock().expect("lock").push(v);
    Json(json!({"version": v}))
}

async fn health(State(f): State<Arc<Fake>>) -> Json<Value> {
    Json(json!({"status": "ok", "version": f.version.load(Ordering::SeqCst)}))
}

async fn serve(fake: Arc<Fake>) -> String {
    let app = axum::Router::new()
        .route("/v1/chat/completions", post(chat))
        .route("/update_weights", post(update))
        .route("/health", get(health))
        .with_state(fake);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move { axum::serve(listener, app).await.expect("serve") });
    format!("http://{addr}/v1")
}

/// Fails on `zzz`, the way a reward calling a broken service would.
#[derive(Debug)]
struct Flaky;

#[async_trait]
impl RewardFunction for Flaky {
    async fn score(&self, input: &RewardInput<'_>, _: &Services) -> Result<f64, RewardError> {
        match input.parsed_answer() {
            Some(a) if a == "zzz" => Err(RewardError("the judge is down".into())),
            _ => Ok(0.0),
        }
    }
}

/// Reads each batch, checks it, and publishes "weights" (a folder with STABLE), slowly.
async fn fake_trainer(run: PathBuf, steps: u64, max_off: u64) -> Vec<TrainBatch> {
    let mut seen = Vec::new();
    for step in 1..=steps {
        let dir = run_dir::batch_dir(&run, step);
        while !dir.join(STABLE).is_file() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let bytes = std::fs::read(run_dir::batch_file(&run, step, 0)).expect("batch");
        let batch: TrainBatch = serde_json::from_slice(&bytes).expect("json");
        assert_eq!(batch.check(), Ok(()));
        for s in batch.micro_batches.iter().flatten() {
            assert!(
                s.policy_version + max_off >= step - 1,
                "step {step} trains on a rollout of v{}",
                s.policy_version
            );
        }
        seen.push(batch);
        tokio::time::sleep(Duration::from_millis(100)).await;
        let w = run_dir::weights_dir(&run, step);
        std::fs::create_dir_all(&w).expect("weights");
        std::fs::write(w.join(STABLE), b"").expect("stable");
    }
    seen
}

fn config(run: &Path, url: &str) -> OrchestratorConfig {
    toml::from_str(&format!(
        r#"
        [orchestrator]
        steps = 5
        batch_size = 8
        group_size = 4
        max_concurrent = 8
        async_level = 1
        max_off_policy_steps = 1
        seq_len = 256
        [orchestrator.sampling]
        max_tokens = 32
        [orchestrator.eval]
        every = 2
        num_examples = 3
        [inference]
        base_urls = ["{url}"]
        timeout_s = 1.0
        max_retries = 8
        [[env]]
        id = "reverse-text"
        system_prompt = ""
        [output]
        dir = "{}"
        "#,
        run.display()
    ))
    .expect("config")
}

fn lines(run: &Path) -> Vec<Value> {
    std::fs::read_to_string(run_dir::metrics_file(run))
        .expect("metrics")
        .lines()
        .map(|l| serde_json::from_str(l).expect("json line"))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runs_through_server_errors_stalls_and_failing_rewards() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_env("TEMPER_LOG"))
        .with_test_writer()
        .try_init();
    let fake = Arc::new(Fake::default());
    let url = serve(fake.clone()).await;
    let tmp = tempfile::tempdir().expect("tmp");
    let run = tmp.path().join("run");
    let cfg = config(&run, &url);
    let mut env = temper_envs::load("reverse-text", &LoadOptions::default()).expect("env");
    env.system_prompt = None;
    env.rubric = env.rubric.clone().with("flaky", 0.0, Flaky);
    let mut trainer = tokio::spawn(fake_trainer(run.clone(), 5, 1));
    let mut hooks = NoHooks;
    let orchestrator = temper_orchestrator::run_with_envs(
        &cfg,
        vec![Arc::new(env)],
        Services::default(),
        &mut hooks,
        Start::Fresh,
    );
    // A failed check in the fake trainer must fail the test, not leave the orchestrator waiting.
    let orchestrator = tokio::time::timeout(Duration::from_secs(60), orchestrator);
    tokio::pin!(orchestrator);
    let (summary, batches) = tokio::select! {
        s = &mut orchestrator => (s.expect("finishes within 60 s").expect("run"), trainer.await.expect("trainer")),
        t = &mut trainer => {
            let batches = t.expect("the fake trainer's checks pass");
            (orchestrator.await.expect("finishes within 60 s").expect("run"), batches)
        }
    };
    assert_eq!((summary.steps, summary.stopped), (5, false));
    assert_eq!(batches.len(), 5);
    assert!(fake.failures.load(Ordering::SeqCst) >= 2, "500s were served");
    assert_eq!(fake.stalls.load(Ordering::SeqCst), 1);
    // Training and evaluation requests both carry the completion budget.
    assert_eq!(fake.unbounded.load(Ordering::SeqCst), 0);
    // The servers followed every published version, in order, ending at the last.
    let updates = fake.updates.lock().expect("lock").clone();
    assert!(updates.windows(2).all(|w| w[0] < w[1]), "{updates:?}");
    assert_eq!(updates.last(), Some(&5));

    let all = lines(&run);
    let steps: Vec<&Value> = all.iter().filter(|l| l.get("reward/mean").is_some()).collect();
    assert_eq!(steps.len(), 5);
    let errors: u64 = steps.iter().map(|l| l["errors/count"].as_u64().expect("errors")).sum();
    assert!(errors > 0, "failed rewards are counted");
    for l in &steps {
        assert!(l["off_policy/max"].as_u64().expect("off") <= 1, "{l}");
        let r = l["reward/mean"].as_f64().expect("reward");
        assert!((0.0..=1.0).contains(&r), "{l}");
    }
    // Failed rollouts are never trained on: every sample is one of the two scored answers.
    for b in &batches {
        for s in b.micro_batches.iter().flatten() {
            let text: String = s
                .token_ids
                .iter()
                .zip(&s.loss_mask)
                .filter(|(_, m)| **m == 1)
                .map(|(t, _)| char::from(*t as u8))
                .collect();
            assert!(!text.contains("zzz"), "{text}");
            assert!(
                s.sampling_logprobs.iter().zip(&s.loss_mask).all(|(l, m)| *m == 0 || *l == -0.5)
            );
        }
        assert_eq!(
            b.total_loss_tokens,
            b.micro_batches
                .iter()
                .flatten()
                .map(|s| s.loss_mask.iter().filter(|m| **m == 1).count() as u64)
                .sum::<u64>()
        );
    }
    // Evaluations of v0, v2, v4 and the last, v5.
    let evals: Vec<u64> = all
        .iter()
        .filter(|l| l.get("eval/reverse-text/reward/mean").is_some())
        .map(|l| l["step"].as_u64().expect("step"))
        .collect();
    assert_eq!(evals, [0, 2, 4, 5]);
    assert_eq!(summary.last_eval.as_ref().map(|e| e.step), Some(5));
    // Each step was checkpointed; the batches the trainer consumed long ago were pruned.
    assert!(run.join("checkpoints/orchestrator/step_5/state.json").is_file());
    assert!(!run_dir::batch_dir(&run, 1).exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refuses_a_used_run_directory_and_checkpoints_the_task_position() {
    let fake = Arc::new(Fake::default());
    let url = serve(fake.clone()).await;
    let tmp = tempfile::tempdir().expect("tmp");
    let run = tmp.path().join("run");
    let mut cfg = config(&run, &url);
    cfg.orchestrator.eval.every = 0;
    cfg.orchestrator.steps = 3;
    let trainer = tokio::spawn(fake_trainer(run.clone(), 3, 1));
    temper_orchestrator::run(&cfg, Services::default(), &mut NoHooks, Start::Fresh)
        .await
        .expect("first run");
    trainer.await.expect("trainer");
    let err = temper_orchestrator::run(&cfg, Services::default(), &mut NoHooks, Start::Fresh)
        .await
        .expect_err("a used directory");
    assert!(err.to_string().contains("already holds batches"), "{err}");
    // The state after step 2 names the position after 2 × 2 groups.
    let state: Value = serde_json::from_slice(
        &std::fs::read(run.join("checkpoints/orchestrator/step_2/state.json")).expect("state"),
    )
    .expect("json");
    assert_eq!(state["tasks"]["draws"].as_u64().map(|d| d >= 4), Some(true), "{state}");
}
