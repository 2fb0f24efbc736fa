//! The HTTP server: OpenAI routes, the token-in route, admin routes; SmolLM2 through it.

use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use candle_core::DType;
use serde_json::{Value, json};
use temper_inference::{Engine, EngineConfig, ServerState};
use temper_model::{ChatTemplate, Pretrained, weights};

use crate::{bytes_tokenizer, forward_logprobs, greedy_reference, sharp};

/// Serves `engine` on a free loopback port; returns the base URL.
async fn serve(engine: Engine, template: Option<ChatTemplate>) -> String {
    let state = ServerState::new(engine, template, "test-model".into(), DType::F32, crate::dev());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, temper_inference::router(state)).await });
    url
}

async fn post(url: &str, body: Value) -> (u16, Value) {
    let r = reqwest::Client::new().post(url).json(&body).send().await.unwrap();
    let status = r.status().as_u16();
    (status, r.json().await.unwrap_or(Value::Null))
}

fn smollm2() -> PathBuf {
    let root = std::env::var_os("TEMPER_ASSETS")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../.assets"));
    let p = root.join("smollm2/SmolLM2-135M-Instruct.Q4_1.gguf");
    assert!(p.exists(), "{} is missing: run scripts/fetch-assets first", p.display());
    p
}

const SIMPLE_TEMPLATE: &str = "{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}{% if add_generation_prompt %}<assistant>{% endif %}";

#[tokio::test]
async fn smollm2_answers_paris_through_chat_completions() {
    let p = Pretrained::load(&smollm2(), DType::F32, &crate::dev()).unwrap();
    let engine = Engine::start(p.model, p.tokenizer, EngineConfig::default(), 0);
    let url = serve(engine, p.chat_template).await;
    let (status, body) = post(
        &format!("{url}/v1/chat/completions"),
        json!({"model": "x", "messages": [{"role": "user", "content": "What is the capital of France?"}],
               "temperature": 0, "max_tokens": 40}),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let content = body["choices"][0]["message"]["content"].as_str().unwrap();
    assert!(content.contains("Paris"), "{content:?}");
    assert_eq!(body["choices"][0]["finish_reason"], "stop");
    assert!(body["usage"]["prompt_tokens"].as_u64().unwrap() > 10);

    // The same request streamed gives the same text, chunk by chunk.
    let resp = reqwest::Client::new()
        .post(format!("{url}/v1/chat/completions"))
        .json(&json!({"messages": [{"role": "user", "content": "What is the capital of France?"}],
                      "temperature": 0, "max_tokens": 40, "stream": true, "stream_options": {"include_usage": true}}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.headers()["content-type"], "text/event-stream");
    let text = resp.text().await.unwrap();
    let mut streamed = String::new();
    let mut finish = None;
    let mut usage = None;
    let lines: Vec<&str> = text.lines().filter_map(|l| l.strip_prefix("data: ")).collect();
    assert_eq!(lines.last(), Some(&"[DONE]"));
    for l in &lines[..lines.len() - 1] {
        let v: Value = serde_json::from_str(l).unwrap();
        if let Some(c) = v["choices"].get(0) {
            streamed.push_str(c["delta"]["content"].as_str().unwrap_or(""));
            if !c["finish_reason"].is_null() {
                finish = Some(c["finish_reason"].clone());
            }
        }
        if !v["usage"].is_null() {
            usage = Some(v["usage"].clone());
        }
    }
    assert_eq!(streamed, content);
    assert_eq!(finish, Some(json!("stop")));
    assert_eq!(usage.unwrap()["prompt_tokens"], body["usage"]["prompt_tokens"]);
}

#[tokio::test]
async fn generate_route_follows_the_contract() {
    let url = serve(crate::engine(sharp(20)), None).await;
    let reference = sharp(20);
    let (status, body) = post(
        &format!("{url}/v1/generate"),
        json!({"prompt_token_ids": [3, 4, 5], "max_tokens": 12, "temperature": 0.9, "top_k": -1, "n": 3, "seed": 1,
               "ignore_eos": true}),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["policy_version"], 0);
    let choices = body["choices"].as_array().unwrap();
    assert_eq!(choices.len(), 3);
    for c in choices {
        let ids: Vec<u32> = serde_json::from_value(c["token_ids"].clone()).unwrap();
        let lps: Vec<f32> = serde_json::from_value(c["logprobs"].clone()).unwrap();
        assert_eq!((ids.len(), c["finish_reason"].as_str()), (12, Some("length")));
        let want = forward_logprobs(&reference, &[3, 4, 5], &ids, 0.9);
        for (g, w) in lps.iter().zip(&want) {
            assert!((g - w).abs() <= 1e-4);
        }
    }
    // Errors are OpenAI-shaped and name the field.
    for (body, want) in [
        (json!({"prompt_token_ids": [3], "temperature": -1}), "temperature"),
        (json!({"prompt_token_ids": [3000]}), "token id 3000"),
        (json!({"prompt_token_ids": [3], "max_tokens": 0}), "max_tokens"),
        (json!({"prompt_token_ids": [3], "frequency_penalty": 0.5}), "frequency_penalty"),
        (json!({"prompt_token_ids": [3], "top_k": -7}), "top_k"),
    ] {
        let (status, v) = post(&format!("{url}/v1/generate"), body).await;
        assert_eq!(status, 400);
        assert!(v["error"]["message"].as_str().unwrap().contains(want), "{v}");
        assert_eq!(v["error"]["type"], "invalid_request_error");
    }
    let r = reqwest::Client::new()
        .post(format!("{url}/v1/generate"))
        .body("{not json")
        .header("content-type", "application/json")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 400);
    let v: Value = r.json().await.unwrap();
    assert_eq!(
        (v["error"]["code"].as_str(), v["error"]["type"].as_str()),
        (Some("bad_request"), Some("invalid_request_error")),
        "{v}"
    );
    let huge = vec![0u8; 17 << 20];
    let r = reqwest::Client::new()
        .post(format!("{url}/v1/generate"))
        .body(huge)
        .header("content-type", "application/json")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 413);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["error"]["code"], "too_large", "{v}");
    // What no handler sees answers in the same shape: an unknown route, a wrong method.
    let r = reqwest::Client::new().get(format!("{url}/v1/nope")).send().await.unwrap();
    assert_eq!(r.status().as_u16(), 404);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["error"]["code"], "not_found", "{v}");
    let r = reqwest::Client::new().get(format!("{url}/v1/generate")).send().await.unwrap();
    assert_eq!(r.status().as_u16(), 405);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["error"]["code"], "method_not_allowed", "{v}");
}

#[tokio::test]
async fn completions_and_chat_with_a_simple_template() {
    let template = ChatTemplate::new(SIMPLE_TEMPLATE, "", "", "t").unwrap();
    let url = serve(crate::engine(sharp(21)), Some(template)).await;
    let reference = sharp(21);
    let (status, body) = post(
        &format!("{url}/v1/completions"),
        json!({"prompt": "Hello", "max_tokens": 8, "temperature": 0, "logprobs": 2, "ignore_eos": true}),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let prompt: Vec<u32> = b"Hello".iter().map(|&b| u32::from(b)).collect();
    let want = greedy_reference(&reference, &prompt, 8);
    let c = &body["choices"][0];
    assert_eq!(c["text"], bytes_tokenizer().decode(&want, true).unwrap());
    assert_eq!(c["logprobs"]["token_logprobs"].as_array().unwrap().len(), 8);
    assert_eq!(c["logprobs"]["top_logprobs"][0].as_object().unwrap().len(), 2);
    // Chat: the template is applied, and token ids come back on request.
    let (status, body) = post(
        &format!("{url}/v1/chat/completions"),
        json!({"messages": [{"role": "user", "content": [{"type": "text", "text": "Hi"}]}], "max_tokens": 5,
               "temperature": 0, "return_token_ids": true, "ignore_eos": true, "logprobs": true}),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let prompt_ids: Vec<u32> = serde_json::from_value(body["prompt_token_ids"].clone()).unwrap();
    assert_eq!(bytes_tokenizer().decode(&prompt_ids, false).unwrap(), "<user>Hi<assistant>");
    let ids: Vec<u32> = serde_json::from_value(body["choices"][0]["token_ids"].clone()).unwrap();
    assert_eq!(ids, greedy_reference(&reference, &prompt_ids, 5));
    assert_eq!(body["choices"][0]["logprobs"]["content"].as_array().unwrap().len(), 5);
    let (status, v) =
        post(&format!("{url}/v1/chat/completions"), json!({"messages": [{"content": "x"}]})).await;
    assert_eq!(status, 400);
    assert!(v["error"]["message"].as_str().unwrap().contains("messages[0].role"), "{v}");
}

/// `token_prefix`: the earlier turns are taken as the tokens given, and only the template's
/// continuation of the later messages is rendered and appended; the end-of-turn token the model
/// stopped on is not written twice.
#[tokio::test]
async fn chat_continues_from_a_token_prefix() {
    let source = "{% for m in messages %}<{{ m.role }}>{{ m.content }}<|end|>{% endfor %}{% if add_generation_prompt %}<assistant>{% endif %}";
    let template = ChatTemplate::new(source, "", "<|end|>", "t").unwrap();
    let url = serve(crate::engine(sharp(21)), Some(template)).await;
    let tok = bytes_tokenizer();
    let end = tok.token_to_id("<|end|>").unwrap();
    let first = tok.encode("<user>Hi<|end|><assistant>").unwrap();
    // "xy" as sampled, then the end token it stopped on.
    let mut sampled: Vec<u32> =
        first.iter().copied().chain([u32::from(b'x'), u32::from(b'y')]).collect();
    sampled.push(end);
    let messages = json!([{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "xy"},
                          {"role": "user", "content": "more"}]);
    let ask = |prefix: Value| {
        json!({"messages": messages, "token_prefix": prefix, "max_tokens": 1, "temperature": 0,
               "return_token_ids": true, "ignore_eos": true})
    };
    let chat = format!("{url}/v1/chat/completions");
    let (status, body) = post(&chat, ask(json!({"token_ids": sampled, "messages": 2}))).await;
    assert_eq!(status, 200, "{body}");
    let prompt: Vec<u32> = serde_json::from_value(body["prompt_token_ids"].clone()).unwrap();
    let mut want = sampled.clone();
    want.extend(tok.encode("<user>more<|end|><assistant>").unwrap());
    assert_eq!(prompt, want);
    // A turn cut short (no end token sampled) is closed by the template's end token.
    let cut = &sampled[..sampled.len() - 1];
    let (status, body) = post(&chat, ask(json!({"token_ids": cut, "messages": 2}))).await;
    assert_eq!(status, 200, "{body}");
    let prompt: Vec<u32> = serde_json::from_value(body["prompt_token_ids"].clone()).unwrap();
    let mut want = cut.to_vec();
    want.extend(tok.encode("<|end|><user>more<|end|><assistant>").unwrap());
    assert_eq!(prompt, want);

    for (prefix, code, says) in [
        (json!({"token_ids": sampled, "messages": 0}), 400, "at least 1"),
        (json!({"token_ids": sampled, "messages": 3}), 400, "less than the 3 messages"),
        (json!({"token_ids": sampled, "messages": 1}), 400, "messages[0] is not the assistant"),
        (json!({"token_ids": [], "messages": 2}), 400, "token_ids is empty"),
        (json!({"token_ids": [1, 99999], "messages": 2}), 400, "id 99999 is outside the vocab"),
        (json!({"token_ids": [1], "messages": 2, "extra": 1}), 422, "unknown field `extra`"),
    ] {
        let (status, body) = post(&chat, ask(prefix.clone())).await;
        assert_eq!(status, code, "{prefix}: {body}");
        let message = body["error"]["message"].as_str().unwrap();
        assert!(message.contains(says), "{prefix}: {message}");
    }
}

/// /update_weights during decoding: responses in flight stay consistent, later ones use the new
/// weights; /pause holds decoding; /health and /metrics report the version.
#[tokio::test]
async fn update_weights_pause_resume_health_metrics() {
    let (a, b) = (sharp(30), sharp(31));
    let dir = tempfile::tempdir().unwrap();
    weights::save_model(&b, dir.path()).unwrap();
    let url = serve(crate::engine(sharp(30)), None).await;
    let prompt = [9u32, 8, 7];
    let long = json!({"prompt_token_ids": prompt, "max_tokens": 150, "temperature": 0, "ignore_eos": true, "n": 2});
    let inflight = tokio::spawn({
        let url = url.clone();
        let long = long.clone();
        async move { post(&format!("{url}/v1/generate"), long).await }
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    let (status, v) = post(&format!("{url}/update_weights"), json!({"path": dir.path()})).await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["version"], 1);
    let (_, body) = inflight.await.unwrap();
    for c in body["choices"].as_array().unwrap() {
        let ids: Vec<u32> = serde_json::from_value(c["token_ids"].clone()).unwrap();
        assert_eq!(ids.len(), 150);
        assert_eq!(c["policy_version"], 0);
        // Whatever the switch point, the tokens are a greedy path of A then of B, never garbage.
        let under_a = greedy_reference(&a, &prompt, ids.len());
        let switch = ids.iter().zip(&under_a).take_while(|(x, y)| x == y).count();
        let ctx: Vec<u32> = prompt.iter().chain(&ids[..switch]).copied().collect();
        assert_eq!(
            ids[switch..],
            greedy_reference(&b, &ctx, ids.len() - switch)[..],
            "switch at {switch}"
        );
    }
    let (_, after) = post(
        &format!("{url}/v1/generate"),
        json!({"prompt_token_ids": prompt, "max_tokens": 20, "temperature": 0, "ignore_eos": true}),
    )
    .await;
    let ids: Vec<u32> = serde_json::from_value(after["choices"][0]["token_ids"].clone()).unwrap();
    assert_eq!(ids, greedy_reference(&b, &prompt, 20));
    assert_eq!(after["policy_version"], 1);

    // Weights that do not fit the model are refused, and the old ones stay.
    let other = tempfile::tempdir().unwrap();
    let mut cfg = b.config().clone();
    cfg.intermediate_size = 48;
    weights::save_model(
        &temper_model::Transformer::init_random(cfg, 1, &crate::dev()).unwrap(),
        other.path(),
    )
    .unwrap();
    let (status, v) = post(&format!("{url}/update_weights"), json!({"path": other.path()})).await;
    assert_eq!(status, 400);
    assert!(v["error"]["message"].as_str().unwrap().contains("gate_proj"), "{v}");

    // Paused: requests wait; resumed: they finish.
    let (status, _) = post(&format!("{url}/pause"), json!({})).await;
    assert_eq!(status, 200);
    let waiting = tokio::spawn({
        let url = url.clone();
        async move {
            post(&format!("{url}/v1/generate"), json!({"prompt_token_ids": [1], "max_tokens": 3}))
                .await
        }
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!waiting.is_finished());
    let health: Value = reqwest::get(format!("{url}/health")).await.unwrap().json().await.unwrap();
    assert_eq!((health["paused"].clone(), health["version"].clone()), (json!(true), json!(1)));
    let metrics = reqwest::get(format!("{url}/metrics")).await.unwrap().text().await.unwrap();
    let sample =
        |name| temper_protocol::exposition::sample(&metrics, name, &[("role", "inference")]);
    assert_eq!(sample("temper_inference_queue_depth"), Some(1.0), "{metrics}");
    assert_eq!(sample("temper_inference_weight_version"), Some(1.0), "{metrics}");
    assert_eq!(sample("temper_inference_generated_tokens_total"), Some(320.0), "{metrics}");
    post(&format!("{url}/resume"), json!({})).await;
    let (status, _) = waiting.await.unwrap();
    assert_eq!(status, 200);
}

/// A client that goes away mid-request (a dropped SSE stream, or a non-streaming request it gave
/// up on) frees its sequence at once instead of decoding on to `max_tokens`.
#[tokio::test]
async fn requests_whose_client_is_gone_are_cancelled() {
    let template = ChatTemplate::new(SIMPLE_TEMPLATE, "", "", "t").unwrap();
    let e = crate::engine(crate::long_context(40));
    let url = serve(e.clone(), Some(template)).await;
    let running = || e.stats().running.load(Ordering::Relaxed);
    let generated = || e.stats().generated_tokens.load(Ordering::Relaxed);
    let max_tokens = 4000;
    let streamed = [
        (
            "/v1/completions",
            json!({"prompt": "Hello", "max_tokens": max_tokens, "ignore_eos": true, "stream": true}),
        ),
        (
            "/v1/chat/completions",
            json!({"messages": [{"role": "user", "content": "Hi"}], "max_tokens": max_tokens,
                   "ignore_eos": true, "stream": true}),
        ),
    ];
    for (route, body) in streamed {
        let before = generated();
        let mut resp =
            reqwest::Client::new().post(format!("{url}{route}")).json(&body).send().await.unwrap();
        assert_eq!(resp.status(), 200);
        let first = resp.chunk().await.unwrap().unwrap();
        assert!(first.starts_with(b"data: {"), "{first:?}");
        assert!(crate::wait_until(10, || running() == 1).await, "{route}: never ran");
        drop(resp);
        assert!(crate::wait_until(10, || running() == 0).await, "{route}: still running");
        let spent = generated() - before;
        assert!(spent < max_tokens / 2, "{route}: {spent} tokens generated for a dropped stream");
        let settled = generated();
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert_eq!(generated(), settled, "{route}: decoding went on");
    }
    // A non-streaming client that times out.
    let before = generated();
    let err = reqwest::Client::new()
        .post(format!("{url}/v1/generate"))
        .timeout(Duration::from_millis(300))
        .json(&json!({"prompt_token_ids": [1, 2, 3], "max_tokens": max_tokens, "ignore_eos": true}))
        .send()
        .await
        .unwrap_err();
    assert!(err.is_timeout(), "{err}");
    assert!(crate::wait_until(10, || running() == 0).await, "/v1/generate: still running");
    let spent = generated() - before;
    assert!(spent < max_tokens / 2, "/v1/generate: {spent} tokens generated for a gone client");
}

/// Requests too large for the engine are refused up front with a 400 naming the field.
#[tokio::test]
async fn oversized_requests_are_refused() {
    let cfg = EngineConfig { max_running: 4, ..Default::default() };
    let url = serve(Engine::start(sharp(22), bytes_tokenizer(), cfg, 0), None).await;
    let many: Vec<u32> = (0..2000).map(|i| i % 250).collect();
    for (body, want) in [
        (
            json!({"prompt_token_ids": [3], "stop_token_ids": many}),
            "stop_token_ids: at most 1024 ids, got 2000",
        ),
        (
            json!({"prompt_token_ids": [3], "stop_token_ids": [1, 70000]}),
            "stop_token_ids: id 70000 is outside the vocabulary of 257",
        ),
        (
            json!({"prompt_token_ids": [3], "stop": vec!["a"; 17]}),
            "stop: at most 16 strings, each of 1 to 256 bytes",
        ),
        (
            json!({"prompt_token_ids": [3], "n": 5}),
            "n is 5; this engine runs at most 4 sequences at once (max_running)",
        ),
    ] {
        let (status, v) = post(&format!("{url}/v1/generate"), body).await;
        assert_eq!(status, 400, "{v}");
        assert_eq!(v["error"]["message"], want, "{v}");
        assert_eq!(v["error"]["type"], "invalid_request_error");
    }
    let (status, v) = post(
        &format!("{url}/v1/generate"),
        json!({"prompt_token_ids": [3], "n": 4, "max_tokens": 3, "stop_token_ids": &many[..1024]}),
    )
    .await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["choices"].as_array().unwrap().len(), 4);
}

/// Rendering and tokenizing a huge prompt happens off the async threads: the server (here on a
/// single-threaded runtime) keeps answering while it runs, then refuses the prompt.
#[tokio::test]
async fn huge_prompts_are_refused_without_stalling_the_server() {
    // The template writes each message 16 times: 4 MiB in, 64 MiB to tokenize.
    let template = ChatTemplate::new(
        "{% for m in messages %}{% for i in range(16) %}{{ m.content }}{% endfor %}{% endfor %}",
        "",
        "",
        "t",
    )
    .unwrap();
    let url = serve(crate::engine(sharp(23)), Some(template)).await;
    let started = Instant::now();
    let big = tokio::spawn({
        let url = url.clone();
        async move {
            let content = "a".repeat(4 << 20);
            post(
                &format!("{url}/v1/chat/completions"),
                json!({"messages": [{"role": "user", "content": content}]}),
            )
            .await
        }
    });
    // /health between the polls: the longest gap is how long the server stalled.
    let client = reqwest::Client::new();
    let (mut polls, mut worst, mut last) = (0, Duration::ZERO, Instant::now());
    while !big.is_finished() {
        let r = client.get(format!("{url}/health")).send().await.unwrap();
        assert_eq!(r.status(), 200);
        polls += 1;
        worst = worst.max(last.elapsed());
        last = Instant::now();
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let took = started.elapsed();
    let (status, v) = big.await.unwrap();
    assert_eq!(status, 400, "{v}");
    let msg = v["error"]["message"].as_str().unwrap();
    assert!(msg.contains("tokens; the model's context is 256"), "{msg}");
    // Stalled, the gap is the whole render and tokenize (most of `took`); not stalled, it is
    // scheduling noise (the tests share two cores), well under a third of it.
    assert!(
        worst * 3 < took && polls > 5,
        "the server stalled {worst:?} ({polls} polls over {took:?})"
    );
}
