//! `temper inference bench`: prefill and decode throughput next to Hugging Face transformers.

use std::path::Path;

use std::sync::atomic::Ordering;
use std::time::Instant;

use anyhow::{Context, bail};
use candle_core::quantized::GgmlDType;
use candle_core::{DType, Device};
use rand::{Rng, SeedableRng};
use serde_json::{Value, json};
use temper_inference::{Engine, EngineConfig, Event, Request, SamplingOptions};
use temper_model::{Pretrained, Transformer, weights};

use crate::InferenceBenchArgs;
use crate::report::median;

/// Runs the benchmark: the model loaded and exported for each side, the rounds (each side in
/// turn), then the medians printed as tables and written as JSON.
pub async fn run(args: InferenceBenchArgs) -> anyhow::Result<()> {
    anyhow::ensure!(
        args.new_tokens >= 2 && args.prompt_len >= 1 && args.rounds >= 1,
        "nothing to measure"
    );
    let groups: Vec<usize> = args.groups.iter().copied().filter(|&g| g > 0).collect();
    if let Some(&g) = groups.iter().find(|&&g| g > 128) {
        bail!("--groups: a group of {g} samples is more than a request may ask (128)");
    }
    let setup = Setup::new(&args, &groups).await?;
    let mut rounds = Vec::new();
    for round in 0..args.rounds {
        eprintln!("round {} of {}", round + 1, args.rounds);
        rounds.push(setup.round(&args, &groups).await?);
    }
    let medians = medians(&rounds, &args.batches, &groups);
    let readback = median(
        &rounds
            .iter()
            .filter_map(|r| r.temper["readback_bytes_per_token"].as_f64())
            .collect::<Vec<_>>(),
    );
    // The same function on each side: log-probabilities at the first prompt's last position.
    let ours_lp =
        log_softmax(&setup.check_logits.iter().map(|&x| f64::from(x)).collect::<Vec<_>>());
    let first_logprobs = |name: &str| {
        rounds.first().and_then(|r| r.side(name)).and_then(|t| t["check_logits"].as_array()).map(
            |l| log_softmax(&l.iter().map(|x| x.as_f64().unwrap_or(f64::NAN)).collect::<Vec<_>>()),
        )
    };
    let theirs_lp = first_logprobs("transformers");
    let llama_lp = first_logprobs("llama_cpp");
    let check = theirs_lp.as_ref().map(|t| compare(t, &ours_lp));
    let llama_check = llama_lp.as_ref().map(|t| compare(t, &ours_lp));
    print_tables(&args, &groups, &medians);
    println!(
        "\n{} rounds, medians; temper read back {readback:.0} bytes per generated token",
        args.rounds
    );
    for (name, c) in [("transformers", &check), ("llama.cpp", &llama_check)] {
        if let Some(c) = c {
            println!(
                "last-position log-probabilities, temper vs {name} on the same weights: max |difference| {:.2e}, KL({name} ‖ temper) {:.2e}",
                c.max_abs_diff, c.kl
            );
        }
    }
    let mut ours = serde_json::Map::new();
    for (b, v) in medians["temper"]["batches"].as_object().into_iter().flatten() {
        let mut v = v.clone();
        v["readback_bytes_per_token"] = json!(readback);
        ours.insert(b.clone(), v);
    }
    let report = json!({
        "model": args.model.display().to_string(),
        "dtype": args.dtype,
        "sample_on": args.sample_on,
        "device": setup.torch_device,
        "threads": setup.threads,
        "prompt_len": args.prompt_len,
        "new_tokens": args.new_tokens,
        "rounds": args.rounds,
        "statistic": "median over rounds",
        "temper": ours,
        "group_tokens": args.group_tokens,
        "temper_groups": medians["temper"]["groups"],
        "transformers": rounds.first().and_then(|r| r.transformers.as_ref()).map(|t| json!({
            "batches": medians["transformers"]["batches"], "groups": medians["transformers"]["groups"],
            "torch": t["torch"], "threads": t["threads"],
        })),
        "llama_cpp": rounds.first().and_then(|r| r.llama.as_ref()).map(|t| json!({
            "batches": medians["llama_cpp"]["batches"], "groups": medians["llama_cpp"]["groups"],
            "llama_cpp_python": t["version"], "threads": t["threads"],
            "gguf_type": setup.gguf.as_ref().map(|(t, _)| t.clone()), "kv_cache": args.dtype,
        })),
        "per_round": rounds.iter().map(|r| json!({
            "temper": r.temper,
            "transformers": r.transformers.as_ref().map(|t| json!({"batches": t["batches"], "groups": t["groups"]})),
            "llama_cpp": r.llama.as_ref().map(|t| json!({"batches": t["batches"], "groups": t["groups"]})),
        })).collect::<Vec<_>>(),
        "check": {
            "what": "log-probabilities over the vocabulary at the first prompt's last position",
            "prompt": setup.prompts[0],
            "temper_logprobs": ours_lp,
            "transformers_logprobs": theirs_lp,
            "max_abs_diff": check.as_ref().map(|c| c.max_abs_diff),
            "kl_transformers_temper": check.as_ref().map(|c| c.kl),
            "llama_cpp_max_abs_diff": llama_check.as_ref().map(|c| c.max_abs_diff),
            "kl_llama_cpp_temper": llama_check.as_ref().map(|c| c.kl),
        },
    });
    crate::report::write(&args.output, &report)?;
    Ok(())
}

/// What every round uses: the prompts, the engine, and the weights as each reference side reads
/// them (held in temporary folders for the whole run).
struct Setup {
    prompts: Vec<Vec<u32>>,
    engine: Engine,
    /// temper's logits at the first prompt's last position, for the cross-check.
    check_logits: Vec<f32>,
    /// The weights as Hugging Face safetensors, for transformers.
    export: tempfile::TempDir,
    /// The weights as a GGUF for llama.cpp (its type name and path), when it runs.
    gguf: Option<(String, std::path::PathBuf)>,
    _gguf_dir: tempfile::TempDir,
    torch_device: String,
    torch_dtype: &'static str,
    threads: usize,
}

impl Setup {
    async fn new(args: &InferenceBenchArgs, groups: &[usize]) -> anyhow::Result<Self> {
        let max_batch = args.batches.iter().copied().max().unwrap_or(1);
        let (device, torch_device) = crate::bench_device(&args.device)?;
        let (dtype, torch_dtype) = crate::bench_dtype(&args.dtype)?;
        let path = args.model.clone();
        // Loaded in f32 on the CPU: the weights transformers gets are these, exported.
        let p =
            tokio::task::spawn_blocking(move || Pretrained::load(&path, DType::F32, &Device::Cpu))
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
            "model {} ({:.1}M parameters, {} on {}), prompts of {} tokens, {} new tokens, {} threads",
            args.model.display(),
            p.model.num_parameters() as f64 / 1e6,
            args.dtype,
            torch_device,
            args.prompt_len,
            args.new_tokens,
            threads
        );

        // The same weights for transformers, and our logits for the cross-check.
        let export = tempfile::tempdir()?;
        weights::save_model(&p.model, export.path())?;
        let model = if dtype == DType::F32 && device.is_cpu() {
            p.model
        } else {
            Transformer::from_tensors(p.model.config().clone(), p.model.tensors(), dtype, &device)?
        };
        // The engine's model: frozen (f32 CPU weights packed for inference), so the check below
        // covers the kernels the engine runs.
        let model = model.frozen()?;
        let check_logits: Vec<f32> = model
            .forward(&prompts[0])?
            .get(args.prompt_len - 1)?
            .to_dtype(DType::F32)?
            .to_vec1()?;

        let engine = Engine::start(
            model,
            p.tokenizer,
            EngineConfig {
                max_running: groups.iter().copied().fold(max_batch, usize::max),
                max_step_tokens: max_batch * args.prompt_len,
                sample_on: args.sample_on.parse().map_err(anyhow::Error::msg)?,
                // Every round sends the same prompts: kept prefixes would skip the prefills
                // measured (the reference sides keep nothing between requests either).
                prefix_cache_tokens: 0,
                ..Default::default()
            },
            0,
        );
        // llama.cpp gets the same numbers temper runs, at full precision.
        let gguf_dir = tempfile::tempdir()?;
        let gguf = match &args.llama_cpp {
            Some(_) => Some(llama_cpp_weights(args, device.is_cpu(), dtype, gguf_dir.path())?),
            None => None,
        };
        Ok(Self {
            prompts,
            engine,
            check_logits,
            export,
            gguf,
            _gguf_dir: gguf_dir,
            torch_device,
            torch_dtype,
            threads,
        })
    }

    /// One round: temper's batches and groups, then each reference side in a process of its own.
    async fn round(&self, args: &InferenceBenchArgs, groups: &[usize]) -> anyhow::Result<Round> {
        let stats = self.engine.stats();
        let bytes_before = stats.readback_bytes.load(Ordering::Relaxed);
        let tokens_before = stats.generated_tokens.load(Ordering::Relaxed);
        // Outside the clock, as each reference side computes its check logits before timing:
        // one request through the engine, whose threads and memory sat idle while the
        // references ran.
        measure(&self.engine, &self.prompts[..1], 2).await?;
        let mut ours = serde_json::Map::new();
        for &b in &args.batches {
            let (pf, dc) = measure(&self.engine, &self.prompts[..b], args.new_tokens).await?;
            eprintln!("temper batch {b}: prefill {pf:.0} tokens/s, decode {dc:.1} tokens/s");
            ours.insert(
                b.to_string(),
                json!({"prefill_tokens_per_s": pf, "decode_tokens_per_s": dc}),
            );
        }
        let mut our_groups = serde_json::Map::new();
        for &g in groups {
            let rate = measure_group(&self.engine, &self.prompts[0], g, args.group_tokens).await?;
            eprintln!("temper group of {g}: {rate:.1} tokens/s");
            our_groups.insert(g.to_string(), json!({"tokens_per_s": rate}));
        }
        let readback = (stats.readback_bytes.load(Ordering::Relaxed) - bytes_before) as f64
            / (stats.generated_tokens.load(Ordering::Relaxed) - tokens_before).max(1) as f64;
        let spec = json!({
            "batches": args.batches, "prompt_len": args.prompt_len, "new_tokens": args.new_tokens,
            "repeats": 1, "prompts": self.prompts, "groups": groups,
            "group_tokens": args.group_tokens,
        });
        let transformers = match &args.python {
            Some(python) => {
                let mut spec = spec.clone();
                spec["model_dir"] = json!(self.export.path());
                spec["device"] = json!(self.torch_device);
                spec["dtype"] = json!(self.torch_dtype);
                eprintln!("running transformers with {}", python.display());
                Some(crate::python::run_json(python, crate::python::TRANSFORMERS, &spec)?)
            }
            None => None,
        };
        let llama = match (&args.llama_cpp, &self.gguf) {
            (Some(python), Some((_, path))) => {
                let mut spec = spec;
                spec["gguf"] = json!(path);
                spec["threads"] = json!(self.threads);
                spec["kv_type"] = json!(args.dtype);
                eprintln!("running llama.cpp with {}", python.display());
                Some(crate::python::run_json(python, crate::python::LLAMA_CPP, &spec)?)
            }
            _ => None,
        };
        Ok(Round {
            temper: json!({"batches": ours, "groups": our_groups, "readback_bytes_per_token": readback}),
            transformers,
            llama,
        })
    }
}

/// Medians over the rounds, per side, workload and quantity: `{side: {"batches": {b: {...}},
/// "groups": {n: {...}}}}`.
fn medians(
    rounds: &[Round],
    batches: &[usize],
    groups: &[usize],
) -> serde_json::Map<String, Value> {
    let side = |name: &str, path: [&str; 3]| -> Option<f64> {
        let xs: Vec<f64> = rounds
            .iter()
            .filter_map(|r| r.side(name).and_then(|v| v[path[0]][path[1]][path[2]].as_f64()))
            .collect();
        (!xs.is_empty()).then(|| median(&xs))
    };
    let mut medians = serde_json::Map::new();
    for name in SIDES {
        let mut bs = serde_json::Map::new();
        for &b in batches {
            let key = b.to_string();
            let pf = side(name, ["batches", &key, "prefill_tokens_per_s"]);
            let dc = side(name, ["batches", &key, "decode_tokens_per_s"]);
            if pf.is_some() || dc.is_some() {
                bs.insert(key, json!({"prefill_tokens_per_s": pf, "decode_tokens_per_s": dc}));
            }
        }
        let mut gs = serde_json::Map::new();
        for &g in groups {
            let key = g.to_string();
            if let Some(rate) = side(name, ["groups", &key, "tokens_per_s"]) {
                gs.insert(key, json!({"tokens_per_s": rate}));
            }
        }
        medians.insert(name.into(), json!({"batches": bs, "groups": gs}));
    }
    medians
}

/// The batch table and, when groups ran, the group table, with each side's ratio to temper.
fn print_tables(
    args: &InferenceBenchArgs,
    groups: &[usize],
    medians: &serde_json::Map<String, Value>,
) {
    let cell = |name: &str, key: &str, quantity: &str| -> Option<f64> {
        medians[name]["batches"][key][quantity].as_f64()
    };
    let fmt = |x: Option<f64>, digits: usize| x.map_or("–".into(), |x| format!("{x:.digits$}"));
    let ratio = |a: Option<f64>, b: Option<f64>| match (a, b) {
        (Some(a), Some(b)) => format!("{:.2}×", a / b),
        _ => "–".into(),
    };
    println!();
    println!(
        "| batch | temper prefill tok/s | transformers | ratio | llama.cpp | ratio | temper decode tok/s | transformers | ratio | llama.cpp | ratio |"
    );
    println!("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for &b in &args.batches {
        let k = b.to_string();
        let row = |q: &str, digits: usize| {
            let mine = cell("temper", &k, q);
            let (t, l) = (cell("transformers", &k, q), cell("llama_cpp", &k, q));
            format!(
                "{} | {} | {} | {} | {}",
                fmt(mine, digits),
                fmt(t, digits),
                ratio(mine, t),
                fmt(l, digits),
                ratio(mine, l)
            )
        };
        println!(
            "| {b} | {} | {} |",
            row("prefill_tokens_per_s", 0),
            row("decode_tokens_per_s", 1)
        );
    }
    if !groups.is_empty() {
        println!(
            "\n| group (one prompt, n samples of {} tokens) | temper tok/s | transformers generate | ratio | llama.cpp | ratio |",
            args.group_tokens
        );
        println!("|---:|---:|---:|---:|---:|---:|");
        for &g in groups {
            let get = |name: &str| medians[name]["groups"][g.to_string()]["tokens_per_s"].as_f64();
            let (mine, t, l) = (get("temper"), get("transformers"), get("llama_cpp"));
            println!(
                "| n = {g} | {} | {} | {} | {} | {} |",
                fmt(mine, 1),
                fmt(t, 1),
                ratio(mine, t),
                fmt(l, 1),
                ratio(mine, l)
            );
        }
    }
}

/// Log-softmax of `logits`, in f64.
pub fn log_softmax(logits: &[f64]) -> Vec<f64> {
    let max = logits.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let lse = max + logits.iter().map(|x| (x - max).exp()).sum::<f64>().ln();
    logits.iter().map(|x| x - lse).collect()
}

/// How far two log-probability vectors over the same vocabulary are apart.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Compared {
    /// Largest |p − q| over the vocabulary, in log-probability.
    pub max_abs_diff: f64,
    /// KL(p ‖ q) = Σ exp(p) (p − q).
    pub kl: f64,
}

/// Compares `p` (the reference) with `q`.
pub fn compare(p: &[f64], q: &[f64]) -> Compared {
    let max_abs_diff = p.iter().zip(q).map(|(a, b)| (a - b).abs()).fold(0.0, f64::max);
    let kl = p.iter().zip(q).map(|(a, b)| a.exp() * (a - b)).sum::<f64>().max(0.0);
    Compared { max_abs_diff, kl }
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

/// Tokens per second of one request for `n` samples of `prompt`, `new_tokens` each (prefill
/// included: the wall time from submitting to the last sample's end).
async fn measure_group(
    engine: &Engine,
    prompt: &[u32],
    n: usize,
    new_tokens: usize,
) -> anyhow::Result<f64> {
    let options = SamplingOptions {
        temperature: 1.0,
        max_tokens: new_tokens,
        ignore_eos: true,
        seed: Some(0),
        ..Default::default()
    };
    let started = Instant::now();
    let mut rx = engine.submit(Request { prompt: prompt.to_vec(), options, n })?;
    let (mut tokens, mut open) = (0, n);
    while open > 0 {
        match rx.recv().await.context("the engine stopped")? {
            Event::Token { .. } => tokens += 1,
            Event::Finished { .. } => open -= 1,
        }
    }
    let elapsed = started.elapsed().as_secs_f64();
    if tokens != n * new_tokens {
        bail!("a group of {n} produced {tokens} tokens, expected {}", n * new_tokens);
    }
    Ok(tokens as f64 / elapsed)
}

/// One round's results: temper's, and each reference's JSON as its script printed it.
struct Round {
    temper: Value,
    transformers: Option<Value>,
    llama: Option<Value>,
}

/// The sides, by the names the report gives them.
const SIDES: [&str; 3] = ["temper", "transformers", "llama_cpp"];

impl Round {
    fn side(&self, name: &str) -> Option<&Value> {
        match name {
            "temper" => Some(&self.temper),
            "transformers" => self.transformers.as_ref(),
            _ => self.llama.as_ref(),
        }
    }
}

/// Writes the model's weights as a GGUF for llama.cpp (see [`crate::llama_cpp`]): its type name
/// and path, inside `dir`.
fn llama_cpp_weights(
    args: &InferenceBenchArgs,
    on_cpu: bool,
    dtype: DType,
    dir: &Path,
) -> anyhow::Result<(String, std::path::PathBuf)> {
    if !on_cpu {
        bail!(
            "--llama-cpp measures llama.cpp on the CPU; leave it out with --device {}",
            args.device
        );
    }
    if args.model.extension().is_none_or(|e| !e.eq_ignore_ascii_case("gguf")) {
        bail!(
            "--llama-cpp needs a .gguf --model (its metadata and tensor names are what llama.cpp reads), not {}",
            args.model.display()
        );
    }
    let (name, ggml) = match dtype {
        DType::F32 => ("F32", GgmlDType::F32),
        DType::F16 => ("F16", GgmlDType::F16),
        other => bail!("--llama-cpp runs f32 or f16 weights, not {other:?} (--dtype)"),
    };
    let path = dir.join(format!("model-{name}.gguf"));
    crate::llama_cpp::write_gguf(&args.model, &path, ggml)?;
    Ok((name.to_string(), path))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_probabilities_and_their_distance_by_hand() {
        let lp = log_softmax(&[0.0, 0.0, (2f64).ln()]);
        // Probabilities 1/4, 1/4, 1/2.
        for (got, want) in lp.iter().zip([0.25f64, 0.25, 0.5]) {
            assert!((got - want.ln()).abs() < 1e-12, "{lp:?}");
        }
        assert_eq!(compare(&lp, &lp), Compared { max_abs_diff: 0.0, kl: 0.0 });
        let q = log_softmax(&[0.0, 0.0, 0.0]);
        let c = compare(&lp, &q);
        // KL = 1/4 ln(3/4) + 1/4 ln(3/4) + 1/2 ln(3/2).
        let want = 0.5 * (0.75f64).ln() + 0.5 * (1.5f64).ln();
        assert!((c.kl - want).abs() < 1e-12, "{c:?}");
        assert!((c.max_abs_diff - (1.5f64).ln()).abs() < 1e-12, "{c:?}");
    }
}
