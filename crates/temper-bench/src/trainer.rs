//! `temper trainer bench`: training throughput and peak memory next to PyTorch.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{Context, bail};
use candle_core::{DType, Device};
use rand::{Rng, SeedableRng};
use serde_json::{Value, json};
use temper_model::{Pretrained, Tokenizer, Transformer, weights};
use temper_trainer::data::Sample;
use temper_trainer::optim::{OptimConfig, ScheduleConfig};
use temper_trainer::{Policy, Single, Trainer};

use crate::TrainerBenchArgs;
use crate::report::median;

const LR: f64 = 1e-5;
const WEIGHT_DECAY: f64 = 0.01;
const MAX_GRAD_NORM: f64 = 1.0;

pub async fn run(args: TrainerBenchArgs) -> anyhow::Result<()> {
    if let Some(spec) = &args.worker {
        let out = worker(spec, args.checkpointing)?;
        println!("{out}");
        return Ok(());
    }
    anyhow::ensure!(
        args.batch > 0 && args.seq_len > 1 && args.steps > 0 && args.rounds > 0,
        "nothing to measure"
    );
    // Checked here, before any model is written; each worker opens it again.
    let (_, device) = crate::bench_device(&args.device)?;
    let tmp = tempfile::tempdir()?;
    let mut models: Vec<(String, PathBuf)> = Vec::new();
    let dir = tmp.path().join("qwen3-small");
    weights::save_model(
        &Transformer::init_random(temper_trainer::policy::bench_qwen3(), 0, &Device::Cpu)?,
        &dir,
    )?;
    models.push(("qwen3-small (29M)".into(), dir));
    if let Some(path) = &args.smollm2 {
        let p = Pretrained::load(path, DType::F32, &Device::Cpu)
            .with_context(|| format!("cannot load {}", path.display()))?;
        let dir = tmp.path().join("smollm2");
        weights::save_model(&p.model, &dir)?;
        models.push(("SmolLM2-135M".into(), dir));
    }
    let exe = std::env::current_exe()?;
    let mut rows = Vec::new();
    for (name, dir) in &models {
        let vocab = weights::load_config(dir)?.vocab_size as u32;
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(0);
        let tokens: Vec<Vec<u32>> = (0..args.batch)
            .map(|_| (0..args.seq_len).map(|_| rng.random_range(0..vocab)).collect())
            .collect();
        let spec = json!({
            "model_dir": dir, "tokens": tokens, "steps": args.steps, "warmup": 1,
            "lr": LR, "weight_decay": WEIGHT_DECAY, "max_grad_norm": MAX_GRAD_NORM,
            "device": device,
        });
        let spec_path = dir.join("bench-spec.json");
        std::fs::write(&spec_path, spec.to_string())?;
        // Temper and PyTorch take turns, round after round; each side's step times of every
        // round are pooled and their median reported, with each round's ratio alongside.
        let (mut ours, mut theirs, mut ratios): (Vec<Value>, Vec<Value>, Vec<f64>) =
            (Vec::new(), Vec::new(), Vec::new());
        for round in 1..=args.rounds {
            eprintln!("{name}: temper (round {round}/{})", args.rounds);
            let o = run_worker(&exe, &spec_path, false)?;
            if let Some(py) = &args.python {
                eprintln!("{name}: PyTorch (round {round}/{})", args.rounds);
                let t = run_torch(py, &spec)?;
                ratios.push(median(&step_times(&t)) / median(&step_times(&o)));
                theirs.push(t);
            }
            ours.push(o);
        }
        eprintln!("{name}: temper with gradient checkpointing");
        let ours_ckpt = run_worker(&exe, &spec_path, true)?;
        let ours = pooled(&ours);
        let theirs = (!theirs.is_empty()).then(|| pooled(&theirs));
        rows.push(json!({
            "model": name, "batch": args.batch, "seq_len": args.seq_len,
            "temper": summarize(&ours, &args),
            "temper_checkpointing": summarize(&ours_ckpt, &args),
            "pytorch": theirs.as_ref().map(|t| summarize(t, &args)),
            "pytorch_version": theirs.as_ref().map(|t| t["torch"].clone()),
            "pytorch_peak_gpu_mb": theirs.as_ref().map(|t| t["peak_gpu_mb"].clone()),
            "first_loss": {"temper": ours["losses"][0], "pytorch": theirs.as_ref().map(|t| t["losses"][0].clone())},
            "round_ratios": ratios,
        }));
    }
    println!();
    println!(
        "| model | temper tok/s | PyTorch tok/s | ratio | each round | temper peak MB | + checkpointing | PyTorch peak MB | first loss temper / PyTorch |"
    );
    println!("|---|---:|---:|---:|---|---:|---:|---:|---|");
    for r in &rows {
        let f = |v: &Value| v.as_f64().unwrap_or(f64::NAN);
        let ours = f(&r["temper"]["tokens_per_s"]);
        let theirs = f(&r["pytorch"]["tokens_per_s"]);
        println!(
            "| {} | {:.0} | {:.0} | {:.2}× | {} | {:.0} | {:.0} | {:.0} | {:.4} / {:.4} |",
            r["model"].as_str().unwrap_or(""),
            ours,
            theirs,
            ours / theirs,
            r["round_ratios"]
                .as_array()
                .map(|a| {
                    a.iter()
                        .filter_map(Value::as_f64)
                        .map(|x| format!("{x:.2}"))
                        .collect::<Vec<_>>()
                        .join(", ")
                })
                .unwrap_or_default(),
            f(&r["temper"]["peak_rss_mb"]),
            f(&r["temper_checkpointing"]["peak_rss_mb"]),
            f(&r["pytorch"]["peak_rss_mb"]),
            f(&r["first_loss"]["temper"]),
            f(&r["first_loss"]["pytorch"]),
        );
    }
    let report = json!({
        "dtype": "f32", "device": device,
        "statistic": "median step time over all rounds", "steps": args.steps,
        "rounds": args.rounds,
        "threads": std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1),
        "optimizer": {"type": "adamw", "lr": LR, "weight_decay": WEIGHT_DECAY, "max_grad_norm": MAX_GRAD_NORM},
        "models": rows,
    });
    crate::report::write(&args.output, &report)?;
    Ok(())
}

fn step_times(run: &Value) -> Vec<f64> {
    run["step_seconds"]
        .as_array()
        .map(|a| a.iter().filter_map(Value::as_f64).collect())
        .unwrap_or_default()
}

/// Several runs of one side as one: step times pooled, the first run's losses, the largest peak
/// memory.
fn pooled(runs: &[Value]) -> Value {
    let times: Vec<f64> = runs.iter().flat_map(step_times).collect();
    let peak = runs.iter().filter_map(|r| r["peak_rss_mb"].as_f64()).fold(f64::NAN, f64::max);
    let mut first = runs.first().cloned().unwrap_or(Value::Null);
    first["step_seconds"] = json!(times);
    first["peak_rss_mb"] = json!(peak);
    first
}

fn summarize(run: &Value, args: &TrainerBenchArgs) -> Value {
    let step = median(&step_times(run));
    json!({
        "median_step_s": step,
        "tokens_per_s": (args.batch * (args.seq_len - 1)) as f64 / step,
        "peak_rss_mb": run["peak_rss_mb"],
    })
}

fn run_worker(exe: &Path, spec: &Path, checkpointing: bool) -> anyhow::Result<Value> {
    let mut cmd = Command::new(exe);
    cmd.args(["trainer", "bench", "--worker"]).arg(spec);
    if checkpointing {
        cmd.arg("--checkpointing");
    }
    let out = cmd.stderr(Stdio::inherit()).output().context("cannot start the benchmark worker")?;
    if !out.status.success() {
        bail!("the benchmark worker failed ({})", out.status);
    }
    serde_json::from_slice(&out.stdout).context("the worker printed something other than JSON")
}

fn run_torch(python: &Path, spec: &Value) -> anyhow::Result<Value> {
    crate::python::run_json(python, crate::python::TRAIN, spec)
}

/// Peak resident memory of this process in MB (`VmHWM`).
fn peak_rss_mb() -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|kb| kb.parse::<f64>().ok())
        })
        .map_or(f64::NAN, |kb| kb / 1024.0)
}

fn worker(spec_path: &Path, checkpointing: bool) -> anyhow::Result<Value> {
    let spec: Value = serde_json::from_slice(&std::fs::read(spec_path)?)?;
    let dir = PathBuf::from(spec["model_dir"].as_str().context("model_dir")?);
    let (device, _) = crate::bench_device(spec["device"].as_str().unwrap_or("cpu"))?;
    let model = weights::load_model(&dir, DType::F32, &device)?;
    let tokens: Vec<Vec<u32>> = serde_json::from_value(spec["tokens"].clone())?;
    let steps = spec["steps"].as_u64().context("steps")? as usize;
    let warmup = spec["warmup"].as_u64().context("warmup")? as usize;
    let policy = Policy { model, tokenizer: Tokenizer::bytes(&[]), template: None };
    let optim = OptimConfig {
        lr: LR,
        weight_decay: WEIGHT_DECAY,
        max_grad_norm: MAX_GRAD_NORM,
        ..OptimConfig::default()
    };
    let single = Single;
    let total = (warmup + steps) as u64;
    let mut trainer =
        Trainer::new(policy, optim, ScheduleConfig::default(), total, &single, checkpointing)?;
    let samples: Vec<Sample> = tokens
        .iter()
        .map(|t| Sample { ids: t.clone(), mask: (0..t.len()).map(|i| i > 0).collect() })
        .collect();
    let loss_tokens: f64 = samples.iter().map(|s| s.loss_tokens() as f64).sum();
    let mb = vec![samples.iter().collect::<Vec<_>>()];
    let (mut times, mut losses) = (Vec::new(), Vec::new());
    for i in 0..warmup + steps {
        let t0 = std::time::Instant::now();
        let r = trainer.sft_step(&mb, loss_tokens)?;
        let dt = t0.elapsed().as_secs_f64();
        losses.push(r.loss);
        if i >= warmup {
            times.push(dt);
        }
    }
    Ok(json!({"step_seconds": times, "losses": losses, "peak_rss_mb": peak_rss_mb()}))
}
