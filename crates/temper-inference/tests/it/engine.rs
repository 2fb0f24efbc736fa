//! The engine: logprobs equal the model's forward pass; batching, sharing and stopping.

use std::time::Duration;

use temper_inference::{Engine, EngineConfig, Finish, Request, SamplingOptions, SubmitError};

use crate::{
    bytes_tokenizer, collect, engine, forward_logprobs, greedy_reference, run, sharp, tiny,
};

fn opts(t: f64, max_tokens: usize) -> SamplingOptions {
    SamplingOptions { temperature: t, max_tokens, ignore_eos: true, ..Default::default() }
}

#[tokio::test]
async fn engine_logprobs_equal_forward_logprobs() {
    let model = tiny(1);
    let reference = tiny(1);
    let e = engine(model);
    let prompt: Vec<u32> = b"The quick brown fox".iter().map(|&b| u32::from(b)).collect();
    for (t, top_k) in [(1.0, 0), (0.7, 0), (1.3, 5)] {
        let outs = run(
            &e,
            Request {
                prompt: prompt.clone(),
                options: SamplingOptions { top_k, seed: Some(4), ..opts(t, 40) },
                n: 3,
            },
        )
        .await;
        for o in &outs {
            assert_eq!(o.ids.len(), 40);
            let want = forward_logprobs(&reference, &prompt, &o.ids, t);
            let worst =
                o.logprobs.iter().zip(&want).map(|(a, b)| (a - b).abs()).fold(0.0, f32::max);
            assert!(worst <= 1e-4, "t={t}: engine and forward logprobs differ by {worst}");
        }
        // The n samples share a prefill but are drawn independently.
        assert_ne!(outs[0].ids, outs[1].ids);
    }
}

#[tokio::test]
async fn seeded_requests_repeat_and_greedy_matches_the_reference() {
    let e = engine(sharp(2));
    let reference = sharp(2);
    let prompt = vec![10u32, 20, 30];
    let seeded = || Request {
        prompt: prompt.clone(),
        options: SamplingOptions { seed: Some(9), ..opts(1.0, 20) },
        n: 2,
    };
    let a = run(&e, seeded()).await;
    let b = run(&e, seeded()).await;
    assert_eq!(a[0].ids, b[0].ids);
    assert_eq!(a[1].ids, b[1].ids);
    let g = run(&e, Request { prompt: prompt.clone(), options: opts(0.0, 30), n: 1 }).await;
    assert_eq!(g[0].ids, greedy_reference(&reference, &prompt, 30));
}

#[tokio::test]
async fn requests_join_while_others_decode() {
    let reference = sharp(3);
    let e = engine(sharp(3));
    let prompts: Vec<Vec<u32>> =
        (0..6u32).map(|i| (0..(3 + i * 5)).map(|j| (i * 31 + j * 7) % 250).collect()).collect();
    // Submitted at different times, so prefills land in steps where others are decoding.
    let mut handles = Vec::new();
    for (i, p) in prompts.iter().enumerate() {
        let e = e.clone();
        let p = p.clone();
        handles.push(tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(15 * i as u64)).await;
            run(&e, Request { prompt: p, options: opts(0.0, 48), n: 1 }).await
        }));
    }
    for (h, p) in handles.into_iter().zip(&prompts) {
        let out = h.await.unwrap();
        assert_eq!(out[0].ids, greedy_reference(&reference, p, 48), "prompt of {} tokens", p.len());
    }
    let steps = e.stats().steps.load(std::sync::atomic::Ordering::Relaxed);
    // Batched: far fewer steps than the 6 × 48 tokens generated one request at a time.
    assert!(steps < 6 * 48, "{steps} steps");
}

/// A prompt longer than a step is prefilled in chunks: beside the decodes of a running request
/// rather than after it, and to the same tokens and logprobs as a whole prefill.
#[tokio::test]
async fn long_prompts_prefill_in_chunks_beside_running_decodes() {
    let reference = sharp(5);
    let e = Engine::start(
        sharp(5),
        bytes_tokenizer(),
        EngineConfig { max_step_tokens: 8, ..Default::default() },
        0,
    );
    let steps = || e.stats().steps.load(std::sync::atomic::Ordering::Relaxed);
    let short: Vec<u32> = vec![3, 1, 4, 1];
    let long: Vec<u32> = (0..60u32).map(|j| (j * 37 + 11) % 250).collect();
    // Both queued before the first step.
    e.set_paused(true).unwrap();
    let a = e.submit(Request { prompt: short.clone(), options: opts(0.0, 40), n: 1 }).unwrap();
    let b = e.submit(Request { prompt: long.clone(), options: opts(0.0, 10), n: 1 }).unwrap();
    e.set_paused(false).unwrap();
    let (a, b) = tokio::join!(collect(a, 1), collect(b, 1));
    assert_eq!(a[0].ids, greedy_reference(&reference, &short, 40));
    assert_eq!(b[0].ids, greedy_reference(&reference, &long, 10));
    let want = forward_logprobs(&reference, &long, &b[0].ids, 1.0);
    let worst = b[0].logprobs.iter().zip(&want).map(|(x, y)| (x - y).abs()).fold(0.0, f32::max);
    assert!(worst <= 1e-4, "chunked prefill's logprobs differ from a forward by {worst}");
    // Step 1 feeds the short prompt and 4 of the long one; steps 2-9 the short request's token
    // and 7 more of the long prompt each (its first token comes at step 9, its last at 18); the
    // short request's 40th token ends step 40. Prefilling the long prompt only once the engine
    // was idle would take 40 + 10 steps.
    assert_eq!(steps(), 40);

    // Alone on an idle engine too: 60 tokens in 8 steps of 8 (the last gives the first of 5
    // tokens), then 4 decode steps.
    let before = steps();
    let c = run(&e, Request { prompt: long.clone(), options: opts(0.0, 5), n: 2 }).await;
    assert_eq!(c[0].ids, greedy_reference(&reference, &long, 5));
    assert_eq!(c[1].ids, c[0].ids);
    assert_eq!(steps() - before, 12);
}

#[tokio::test]
async fn stop_tokens_strings_and_lengths() {
    let e = engine(sharp(4));
    let prompt = vec![65u32, 66, 67];
    let free =
        run(&e, Request { prompt: prompt.clone(), options: opts(0.0, 30), n: 1 }).await.remove(0);
    assert_eq!(free.finish, Some(Finish::Length));
    assert_eq!(free.ids.len(), 30);
    // A stop token: the sequence ends with it (it is part of what was sampled).
    let stop_id = free.ids[5];
    let first = free.ids.iter().position(|&t| t == stop_id).unwrap();
    let o = SamplingOptions { stop_token_ids: vec![stop_id], ..opts(0.0, 30) };
    let s = run(&e, Request { prompt: prompt.clone(), options: o, n: 1 }).await.remove(0);
    assert_eq!(s.ids, free.ids[..=first]);
    assert_eq!(s.finish, Some(Finish::Stop));
    // A stop string: the text ends before it; the tokens include the one that completed it. (The
    // random model writes bytes that are not all UTF-8; the needle is two ASCII characters.)
    let chars: Vec<(usize, char)> = free.text.char_indices().collect();
    let (cut, needle) = chars
        .windows(2)
        .skip(2)
        .find(|w| w[0].1.is_ascii() && w[1].1.is_ascii())
        .map(|w| (w[0].0, format!("{}{}", w[0].1, w[1].1)))
        .expect("an ASCII pair in the output");
    let cut = free.text.find(&needle).unwrap().min(cut);
    let o = SamplingOptions { stop: vec![needle.clone()], ..opts(0.0, 30) };
    let s = run(&e, Request { prompt: prompt.clone(), options: o, n: 1 }).await.remove(0);
    assert_eq!(s.text, free.text[..cut], "stop string {needle:?}");
    assert_eq!(s.finish, Some(Finish::Stop));
    assert_eq!(s.ids, free.ids[..s.ids.len()]);
    assert!(bytes_tokenizer().decode(&s.ids, true).unwrap().ends_with(&needle));
    // The model's end token stops it unless ignore_eos.
    let o = SamplingOptions { ignore_eos: false, stop_token_ids: vec![], ..opts(0.0, 30) };
    let s = run(&e, Request { prompt, options: o, n: 1 }).await.remove(0);
    match free.ids.iter().position(|&t| t == 256) {
        Some(p) => assert_eq!(s.ids, free.ids[..=p]),
        None => assert_eq!(s.ids, free.ids),
    }
}

#[tokio::test]
async fn context_limit_ends_with_length() {
    let e = engine(tiny(5));
    let prompt = vec![1u32; 250];
    let o = run(&e, Request { prompt, options: opts(1.0, 100), n: 1 }).await.remove(0);
    assert_eq!(o.ids.len(), 6); // 256 positions
    assert_eq!(o.finish, Some(Finish::Length));
}

#[tokio::test]
async fn bad_requests_are_refused_with_the_field_named() {
    let e = engine(tiny(6));
    let cases = [
        (Request { prompt: vec![], options: opts(1.0, 5), n: 1 }, "prompt is empty"),
        (Request { prompt: vec![1, 999], options: opts(1.0, 5), n: 1 }, "token id 999"),
        (Request { prompt: vec![1; 300], options: opts(1.0, 5), n: 1 }, "context is 256"),
        (Request { prompt: vec![1], options: opts(-1.0, 5), n: 1 }, "temperature"),
        (
            Request {
                prompt: vec![1],
                options: SamplingOptions { top_p: 0.0, ..opts(1.0, 5) },
                n: 1,
            },
            "top_p",
        ),
        (Request { prompt: vec![1], options: opts(1.0, 5), n: 0 }, "n must be"),
        (
            Request {
                prompt: vec![1],
                options: SamplingOptions { stop_token_ids: vec![3, 257], ..opts(1.0, 5) },
                n: 1,
            },
            "stop_token_ids: id 257 is outside the vocabulary of 257",
        ),
        (
            Request {
                prompt: vec![1],
                options: SamplingOptions { stop_token_ids: vec![3; 1025], ..opts(1.0, 5) },
                n: 1,
            },
            "stop_token_ids: at most 1024 ids, got 1025",
        ),
        (
            Request {
                prompt: vec![1],
                options: SamplingOptions { stop: vec!["x".into(); 17], ..opts(1.0, 5) },
                n: 1,
            },
            "stop: at most 16 strings",
        ),
        (
            Request {
                prompt: vec![1],
                options: SamplingOptions { stop: vec!["x".repeat(257)], ..opts(1.0, 5) },
                n: 1,
            },
            "each of 1 to 256 bytes",
        ),
    ];
    for (req, want) in cases {
        let err = e.submit(req).unwrap_err();
        assert!(matches!(err, SubmitError::Invalid(_)) && err.to_string().contains(want), "{err}");
    }
}

#[tokio::test]
async fn a_full_queue_is_refused_and_cancelled_requests_free_their_place() {
    let cfg = EngineConfig { max_running: 1, max_waiting: 2, ..Default::default() };
    let e = Engine::start(tiny(7), bytes_tokenizer(), cfg, 0);
    e.set_paused(true).unwrap();
    tokio::time::sleep(Duration::from_millis(50)).await;
    let req = || Request { prompt: vec![1, 2], options: opts(1.0, 5), n: 1 };
    let a = e.submit(req()).unwrap();
    let b = e.submit(req()).unwrap();
    assert!(matches!(e.submit(req()), Err(SubmitError::Overloaded(2))));
    drop(a);
    e.set_paused(false).unwrap();
    // The cancelled request is swept and never runs; the other one finishes.
    let out = collect(b, 1).await;
    assert_eq!(out[0].ids.len(), 5);
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(e.stats().waiting.load(std::sync::atomic::Ordering::Relaxed), 0);
    assert_eq!(e.stats().requests.load(std::sync::atomic::Ordering::Relaxed), 1);
}

/// A request may not ask for more samples than the engine runs at once, even when it is idle.
#[tokio::test]
async fn n_above_max_running_is_refused() {
    let cfg = EngineConfig { max_running: 2, ..Default::default() };
    let e = Engine::start(tiny(8), bytes_tokenizer(), cfg, 0);
    let err = e.submit(Request { prompt: vec![1, 2], options: opts(1.0, 5), n: 3 }).unwrap_err();
    assert_eq!(
        err,
        SubmitError::Invalid(
            "n is 3; this engine runs at most 2 sequences at once (max_running)".into()
        )
    );
    // At the limit it runs.
    let outs = run(&e, Request { prompt: vec![1, 2], options: opts(1.0, 5), n: 2 }).await;
    assert_eq!(outs.iter().map(|o| o.ids.len()).collect::<Vec<_>>(), [5, 5]);
}

/// `max_kv_tokens` bounds the cache one request may reserve (`n × (prompt + max_tokens)`, at
/// most the context per sequence), and requests that would take the running total over it wait.
#[tokio::test]
async fn the_key_value_budget_refuses_large_requests_and_queues_the_rest() {
    let cfg = EngineConfig { max_running: 4, ..Default::default() };
    let unbounded = Engine::start(tiny(12), bytes_tokenizer(), cfg.clone(), 0);
    assert_eq!(unbounded.max_kv_tokens(), 4 * 256); // max_running full contexts
    let cfg = EngineConfig { max_kv_tokens: 100, ..cfg };
    let e = Engine::start(tiny(12), bytes_tokenizer(), cfg, 0);
    assert_eq!(e.max_kv_tokens(), 100);
    let req = |n, max_tokens| Request { prompt: vec![7; 10], options: opts(1.0, max_tokens), n };
    assert_eq!(
        e.submit(req(2, 50)).unwrap_err(),
        SubmitError::Invalid(
            "n × min(prompt + max_tokens, context) is 2 × 60 = 120 key/value cache positions; \
             this engine allows 100 per request (max_kv_tokens)"
                .into()
        )
    );
    // max_tokens past the context counts as the context.
    let err = e.submit(req(1, 10_000)).unwrap_err();
    assert!(err.to_string().contains("1 × 256 = 256"), "{err}");
    // Two that fit alone but not together run one after the other: 50 steps each.
    let (a, b) = (e.submit(req(1, 50)).unwrap(), e.submit(req(1, 50)).unwrap());
    let (a, b) = (collect(a, 1).await, collect(b, 1).await);
    assert_eq!((a[0].ids.len(), b[0].ids.len()), (50, 50));
    assert_eq!(e.stats().steps.load(std::sync::atomic::Ordering::Relaxed), 100);
    // With the default budget the two share steps.
    let e = unbounded;
    let (a, b) = (e.submit(req(2, 50)).unwrap(), e.submit(req(1, 50)).unwrap());
    let (a, b) = (collect(a, 2).await, collect(b, 1).await);
    assert_eq!((a[1].ids.len(), b[0].ids.len()), (50, 50));
    assert!(e.stats().steps.load(std::sync::atomic::Ordering::Relaxed) < 100);
}

/// A long stop-token list still stops at the first token in it.
#[tokio::test]
async fn a_full_stop_token_list_stops_at_the_first_match() {
    let e = engine(sharp(9));
    let prompt = vec![65u32, 66, 67];
    let free =
        run(&e, Request { prompt: prompt.clone(), options: opts(0.0, 30), n: 1 }).await.remove(0);
    let stop_id = free.ids[7];
    let first = free.ids.iter().position(|&t| t == stop_id).unwrap();
    // 1023 ids that never appear, then the one that does.
    let absent: Vec<u32> = (0..257).filter(|t| !free.ids.contains(t)).collect();
    let mut ids: Vec<u32> = absent.iter().copied().cycle().take(1023).collect();
    ids.push(stop_id);
    let o = SamplingOptions { stop_token_ids: ids, ..opts(0.0, 30) };
    let s = run(&e, Request { prompt, options: o, n: 1 }).await.remove(0);
    assert_eq!(s.ids, free.ids[..=first]);
    assert_eq!(s.finish, Some(Finish::Stop));
}

/// New weights arrive while sequences decode: each token reports the version that drew it, every
/// logprob is exactly that version's forward logprob on the tokens before it, and requests after
/// the update use the new weights only.
#[tokio::test]
async fn weight_updates_mid_decode_never_mix_within_a_token() {
    let (a, b) = (sharp(10), sharp(11));
    let e = engine(sharp(10));
    let prompt = vec![5u32, 6, 7, 8];
    let rx = e.submit(Request { prompt: prompt.clone(), options: opts(0.0, 120), n: 2 }).unwrap();
    // Wait until some tokens were drawn, then swap.
    while e.stats().generated_tokens.load(std::sync::atomic::Ordering::Relaxed) < 10 {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    assert_eq!(e.update_weights(sharp(11), 1).await.unwrap(), 1);
    let outs = collect(rx, 2).await;
    for o in &outs {
        let switch = o.versions.iter().position(|&v| v == 1).expect("tokens after the update");
        assert!(switch >= 5 && o.versions[switch..].iter().all(|&v| v == 1), "{:?}", o.versions);
        // Before: greedy under A. After: greedy under B given everything before.
        assert_eq!(o.ids[..switch], greedy_reference(&a, &prompt, switch)[..]);
        let ctx: Vec<u32> = prompt.iter().chain(&o.ids[..switch]).copied().collect();
        assert_eq!(o.ids[switch..], greedy_reference(&b, &ctx, o.ids.len() - switch)[..]);
        let want_a = forward_logprobs(&a, &prompt, &o.ids[..switch], 1.0);
        let want_b = forward_logprobs(&b, &ctx, &o.ids[switch..], 1.0);
        for (got, want) in o.logprobs.iter().zip(want_a.iter().chain(&want_b)) {
            assert!((got - want).abs() <= 1e-4, "{got} vs {want}");
        }
    }
    let after =
        run(&e, Request { prompt: prompt.clone(), options: opts(0.0, 30), n: 1 }).await.remove(0);
    assert!(after.versions.iter().all(|&v| v == 1));
    assert_eq!(after.ids, greedy_reference(&b, &prompt, 30));
    assert_ne!(after.ids, greedy_reference(&a, &prompt, 30));
}

#[tokio::test]
async fn drawing_on_the_device_matches_the_host_and_copies_back_only_the_draws() {
    use std::sync::atomic::Ordering;
    use temper_inference::{Engine, SampleOn};
    let start = |sample_on| {
        let cfg = EngineConfig { sample_on, ..Default::default() };
        Engine::start(sharp(3), bytes_tokenizer(), cfg, 0)
    };
    let (host, device) = (start(SampleOn::Host), start(SampleOn::Device));
    let prompt = vec![7u32, 70, 170];
    let requests = [
        SamplingOptions { seed: Some(5), ..opts(1.0, 24) },
        SamplingOptions { seed: Some(6), ..opts(0.6, 24) },
        opts(0.0, 24),
        // Filters and alternatives are drawn on the host on either engine.
        SamplingOptions { seed: Some(7), top_k: 4, ..opts(1.2, 24) },
        SamplingOptions { seed: Some(8), top_logprobs: 2, ..opts(1.0, 24) },
    ];
    for options in requests {
        let req = || Request { prompt: prompt.clone(), options: options.clone(), n: 3 };
        let (a, b) = (run(&host, req()).await, run(&device, req()).await);
        for (x, y) in a.iter().zip(&b) {
            assert_eq!(x.ids, y.ids, "{options:?}");
            let worst =
                x.logprobs.iter().zip(&y.logprobs).map(|(p, q)| (p - q).abs()).fold(0.0, f32::max);
            assert!(worst <= 1e-5, "{options:?}: logprobs differ by {worst}");
        }
        if options.temperature > 0.0 && options.top_k == 0 {
            assert_ne!(a[0].ids, a[1].ids, "the n samples are drawn independently");
        }
    }
    // What crosses to the host for one plain request of 24 tokens: 24 rows of 257 f32 logits
    // when drawn on the host, an id and a logprob per token when drawn on the device.
    let bytes = |e: &Engine| e.stats().readback_bytes.load(Ordering::Relaxed);
    let (h0, d0) = (bytes(&host), bytes(&device));
    let plain = || Request { prompt: prompt.clone(), options: opts(1.0, 24), n: 1 };
    run(&host, plain()).await;
    run(&device, plain()).await;
    assert_eq!(bytes(&host) - h0, 24 * 257 * 4);
    assert_eq!(bytes(&device) - d0, 24 * 8);
}

/// A prompt that begins with a kept prefix (whole blocks of 64 positions) prefills only the rest,
/// to the same tokens and logprobs as a whole prefill; a prompt that is all kept still prefills
/// its last block (its logits start the completion); a weight update forgets every prefix; with
/// none kept, every prompt is prefilled whole.
#[tokio::test]
async fn prompts_that_share_a_prefix_prefill_only_the_rest() {
    use std::sync::atomic::Ordering::Relaxed;
    let reference = sharp(6);
    let system: Vec<u32> = (0..130u32).map(|j| (j * 13 + 5) % 250).collect();
    let ask = |tail: &[u32]| system.iter().chain(tail).copied().collect::<Vec<u32>>();
    let (a, b, c) = (ask(&[7, 8, 9]), ask(&[40, 41]), system[..128].to_vec());
    for keep in [4096, 0] {
        let cfg = EngineConfig { prefix_cache_tokens: keep, ..Default::default() };
        let e = Engine::start(sharp(6), bytes_tokenizer(), cfg, 0);
        let counts = || {
            let s = e.stats();
            (s.prompt_tokens.load(Relaxed), s.prefix_hit_tokens.load(Relaxed))
        };
        let first = run(&e, Request { prompt: a.clone(), options: opts(0.0, 6), n: 1 }).await;
        assert_eq!(first[0].ids, greedy_reference(&reference, &a, 6));
        assert_eq!(counts(), (133, 0));
        // 128 of b's 132 tokens are a's first two blocks.
        let sampled = SamplingOptions { seed: Some(3), ..opts(1.0, 8) };
        let second = run(&e, Request { prompt: b.clone(), options: sampled, n: 2 }).await;
        for out in &second {
            let want = forward_logprobs(&reference, &b, &out.ids, 1.0);
            let worst =
                out.logprobs.iter().zip(&want).map(|(x, y)| (x - y).abs()).fold(0.0, f32::max);
            assert!(worst <= 1e-4, "keep {keep}: logprobs differ from a forward by {worst}");
        }
        let greedy = run(&e, Request { prompt: b.clone(), options: opts(0.0, 6), n: 1 }).await;
        assert_eq!(greedy[0].ids, greedy_reference(&reference, &b, 6));
        let all = run(&e, Request { prompt: c.clone(), options: opts(0.0, 4), n: 1 }).await;
        assert_eq!(all[0].ids, greedy_reference(&reference, &c, 4));
        if keep == 0 {
            assert_eq!(counts(), (133 + 132 + 132 + 128, 0));
            assert_eq!(e.stats().prefix_cache_tokens.load(Relaxed), 0);
            continue;
        }
        assert_eq!(counts(), (133 + 4 + 4 + 64, 128 + 128 + 64));
        assert_eq!(e.stats().prefix_cache_tokens.load(Relaxed), 128);
        // New weights (the same values): the kept keys and values are forgotten.
        assert_eq!(e.update_weights(sharp(6), 1).await.unwrap(), 1);
        let again = run(&e, Request { prompt: b.clone(), options: opts(0.0, 6), n: 1 }).await;
        assert_eq!(again[0].ids, greedy[0].ids);
        assert_eq!(counts(), (133 + 4 + 4 + 64 + 132, 128 + 128 + 64));
    }
}

/// Kept prefixes stay within `prefix_cache_tokens`: a new prompt's blocks push out the least
/// recently used prefix, whose prompts are then prefilled whole; one longer than the limit is not
/// kept at all.
#[tokio::test]
async fn kept_prefixes_stay_within_their_limit() {
    use std::sync::atomic::Ordering::Relaxed;
    let cfg = EngineConfig { prefix_cache_tokens: 128, ..Default::default() };
    let e = Engine::start(sharp(7), bytes_tokenizer(), cfg, 0);
    let prompt =
        |seed: u32, len: u32| -> Vec<u32> { (0..len).map(|j| (j * 7 + seed) % 250).collect() };
    let (a, b, long) = (prompt(1, 130), prompt(2, 130), prompt(3, 200));
    let hits = || e.stats().prefix_hit_tokens.load(Relaxed);
    let kept = || e.stats().prefix_cache_tokens.load(Relaxed);
    let go = |p: &Vec<u32>| Request { prompt: p.clone(), options: opts(0.0, 2), n: 1 };
    run(&e, go(&a)).await;
    run(&e, go(&a)).await;
    assert_eq!((hits(), kept()), (128, 128));
    // b's two blocks take the place of a's.
    run(&e, go(&b)).await;
    run(&e, go(&a)).await;
    assert_eq!(hits(), 128);
    // a is back and b went; 192 positions of `long` are more than may be kept.
    run(&e, go(&long)).await;
    run(&e, go(&long)).await;
    run(&e, go(&a)).await;
    assert_eq!((hits(), kept()), (256, 128));
}
