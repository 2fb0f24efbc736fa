//! `temper inference bench`: prefill and decode throughput next to Hugging Face transformers.

use std::path::Path;

use std::time::Instant;

use anyhow::{Context, bail};
use candle_core::{DType, Device};
use rand::{Rng, SeedableRng};
use serde_json::{Value, json};
use temper_inference::{Engine, EngineConfig, Event, Request, SamplingOptions};
use temper_model::{Pretrained, weights};

use crate::InferenceBenchArgs;
use crate::report::median;

/// Runs the benchmark.
pub async fn run(args: InferenceBenchArgs) -> anyhow::Result<()> {
    anyhow::ensure!(
        args.new_tokens >= 2 && args.prompt_len >= 1 && args.repeats >= 1,
        "nothing to measure"
    );
    let max_batch = args.batches.iter().copied().max().unwrap_or(1);
    let path = args.model.clone();
    let p = tokio::task::spawn_blocking(move || Pretrained::load(&path, DType::F32, &Device::Cpu))
        .await?
        .with_context(|| format!("cannot load {}", args.model.display()))?;
    let vocab = p.model.config().vocab_size as u32;
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(0);
    let prompts: Vec<Vec<u32>> = (0..max_batch)
        .map(|_| {
            (0..args.prompt_len)
                .map(|_| rng.random_range(100..vocab.saturating_sub(100).max(101)))
                .collect()
        })
        .collect();
    let threads = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
    eprintln!(
        "model {} ({:.1}M parameters, f32), prompts of {} tokens, {} new tokens, {} threads",
        args.model.display(),
        p.model.num_parameters() as f64 / 1e6,
        args.prompt_len,
        args.new_tokens,
        threads
    );

    // The same weights for transformers, and our logits for the cross-check.
    let export = tempfile::tempdir()?;
    weights::save_model(&p.model, export.path())?;
    let ours_check: Vec<f32> = p.model.forward(&prompts[0])?.get(args.prompt_len - 1)?.to_vec1()?;

    let engine = Engine::start(
        p.model,
        p.tokenizer,
        EngineConfig {
            max_running: max_batch,
            max_step_tokens: max_batch * args.prompt_len,
            ..Default::default()
        },
        0,
    );
    let mut ours = serde_json::Map::new();
    for &b in &args.batches {
        let (mut prefill, mut decode) = (Vec::new(), Vec::new());
        for _ in 0..args.repeats {
            let (pf, dc) = measure(&engine, &prompts[..b], args.new_tokens).await?;
            prefill.push(pf);
            decode.push(dc);
        }
        let (pf, dc) = (median(&prefill), median(&decode));
        eprintln!("temper batch {b}: prefill {pf:.0} tokens/s, decode {dc:.1} tokens/s");
        ours.insert(b.to_string(), json!({"prefill_tokens_per_s": pf, "decode_tokens_per_s": dc}));
    }
    drop(engine);

    let theirs = match &args.python {
        Some(python) => Some(run_transformers(python, export.path(), &prompts, &args)?),
        None => None,
    };
    let check = theirs.as_ref().and_then(|t| t["check_logits"].as_array()).map(|l| {
        l.iter()
            .zip(&ours_check)
            .map(|(a, b)| (a.as_f64().unwrap_or(f64::NAN) - f64::from(*b)).abs())
            .fold(0.0, f64::max)
    });

    println!();
    println!(
        "| batch | temper prefill tok/s | transformers | ratio | temper decode tok/s | transformers | ratio |"
    );
    println!(
        "|------:|---------------------:|-------------:|------:|--------------------:|-------------:|------:|"
    );
    for &b in &args.batches {
        let o = &ours[&b.to_string()];
        let t = theirs.as_ref().map(|t| &t["batches"][b.to_string()]);
        let cell = |key: &str| -> (String, String) {
            let mine = o[key].as_f64().unwrap_or(f64::NAN);
            match t.and_then(|t| t[key].as_f64()) {
                Some(x) => (format!("{x:.1}"), format!("{:.2}×", mine / x)),
                None => ("–".into(), "–".into()),
            }
        };
        let (pt, pr) = cell("prefill_tokens_per_s");
        let (dt, dr) = cell("decode_tokens_per_s");
        println!(
            "| {b} | {:.1} | {pt} | {pr} | {:.1} | {dt} | {dr} |",
            o["prefill_tokens_per_s"].as_f64().unwrap_or(f64::NAN),
            o["decode_tokens_per_s"].as_f64().unwrap_or(f64::NAN)
        );
    }
    if let Some(d) = check {
        println!(
            "\nlast-position logits, temper vs transformers on the same weights: max |difference| = {d:.2e}"
        );
    }
    let report = json!({
        "model": args.model.display().to_string(),
        "dtype": "f32",
        "threads": threads,
        "prompt_len": args.prompt_len,
        "new_tokens": args.new_tokens,
        "repeats": args.repeats,
        "statistic": "median",
        "temper": ours,
        "transformers": theirs.as_ref().map(|t| json!({"batches": t["batches"], "torch": t["torch"], "threads": t["threads"]})),
        "logits_max_abs_diff": check,
    });
    crate::report::write(&args.output, &report)?;
    Ok(())
}

/// One batch through the engine: prefill tokens/s (until every first token) and decode tokens/s
/// (the rest).
async fn measure(
    engine: &Engine,
    prompts: &[Vec<u32>],
    new_tokens: usize,
) -> anyhow::Result<(f64, f64)> {
    let options = SamplingOptions {
        temperature: 0.0,
        max_tokens: new_tokens,
        ignore_eos: true,
        ..Default::default()
    };
    let started = Instant::now();
    let mut rxs = Vec::new();
    for p in prompts {
        rxs.push(engine.submit(Request { prompt: p.clone(), options: options.clone(), n: 1 })?);
    }
    let mut first_done = None;
    let mut firsts = 0;
    let mut tasks = Vec::new();
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    for mut r in rxs {
        let tx = tx.clone();
        tasks.push(tokio::spawn(async move {
            let mut n = 0;
            while let Some(ev) = r.recv().await {
                match ev {
                    Event::Token { .. } => {
                        n += 1;
                        if n == 1 {
                            let _ = tx.send(Instant::now());
                        }
                    }
                    Event::Finished { .. } => break,
                }
            }
            n
        }));
    }
    drop(tx);
    while let Some(t) = rx.recv().await {
        firsts += 1;
        if firsts == prompts.len() {
            first_done = Some(t);
        }
    }
    for t in tasks {
        let n = t.await?;
        if n != new_tokens {
            bail!("a sequence produced {n} tokens, expected {new_tokens}");
        }
    }
    let end = Instant::now();
    let first = first_done.context("no first tokens")?;
    let b = prompts.len() as f64;
    let prompt_len = prompts[0].len() as f64;
    Ok((
        b * prompt_len / first.duration_since(started).as_secs_f64(),
        b * (new_tokens - 1) as f64 / end.duration_since(first).as_secs_f64(),
    ))
}

fn run_transformers(
    python: &Path,
    model_dir: &Path,
    prompts: &[Vec<u32>],
    args: &InferenceBenchArgs,
) -> anyhow::Result<Value> {
    let spec = json!({
        "model_dir": model_dir, "batches": args.batches, "prompt_len": args.prompt_len,
        "new_tokens": args.new_tokens, "repeats": args.repeats, "prompts": prompts,
    });
    eprintln!("running transformers with {}", python.display());
    crate::python::run_json(python, crate::python::TRANSFORMERS, &spec)
}
