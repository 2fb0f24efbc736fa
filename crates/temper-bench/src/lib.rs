//! temper's benchmarks: `temper inference bench`, `temper trainer bench`, `temper sandbox bench`
//! and `temper hub bench`. Each measures temper beside a reference where one exists
//! (transformers and PyTorch, bubblewrap), prints a table and writes a JSON report.
//!
//! One home for what they share: [`report`] (medians, percentiles, the JSON report) and
//! [`python`] (the PyTorch sides, whose scripts are compiled into the binary, so an installed
//! `temper` runs them anywhere given a Python with torch and transformers).
//!
//! These are programs, not a library for others: like the binary, they return `anyhow` errors
//! with context. Nothing else in temper depends on this crate.

#![allow(
    clippy::print_stdout,
    clippy::print_stderr,
    reason = "a benchmark prints its table and progress for the person running it"
)]

pub mod hub;
pub mod inference;
pub mod llama_cpp;
pub mod publish;
pub mod python;
pub mod report;
pub mod sandbox;
pub mod trainer;

use std::path::PathBuf;

use clap::Args;

/// `temper hub bench`.
#[derive(Debug, Args)]
pub struct HubBenchArgs {
    /// Concurrent clients.
    #[arg(long, default_value_t = 50)]
    pub clients: usize,
    /// Versions each client publishes.
    #[arg(long, default_value_t = 4)]
    pub publishes: usize,
    /// Installs each client makes.
    #[arg(long, default_value_t = 20)]
    pub installs: usize,
    /// Bytes of data in each package (random, so it does not compress away).
    #[arg(long, default_value_t = 64 << 10)]
    pub package_bytes: usize,
    /// Metadata database (default: SQLite in the fresh data folder).
    #[arg(long, value_name = "URL")]
    pub database: Option<String>,
    /// Where to write the JSON report.
    #[arg(long, default_value = "target/bench/hub.json")]
    pub output: PathBuf,
}

/// `temper trainer bench-publish`.
#[derive(Debug, Args)]
pub struct PublishBenchArgs {
    /// Sizes of the published weights, in MiB (f32 tensors of 16 MiB each).
    #[arg(long, value_delimiter = ',', default_values_t = [64usize, 256, 1024])]
    pub sizes_mib: Vec<usize>,
    /// Repetitions per size; the median is reported.
    #[arg(long, default_value_t = 3)]
    pub reps: usize,
    /// Folder to publish into (the run directory's filesystem is what is measured).
    #[arg(long, default_value = "target/bench/publish")]
    pub dir: PathBuf,
    /// Where to write the JSON report.
    #[arg(long, default_value = "target/bench/publish.json")]
    pub output: PathBuf,
}

/// `temper trainer bench`.
#[derive(Debug, Args)]
pub struct TrainerBenchArgs {
    /// SmolLM2-135M (a .gguf file or Hugging Face folder) to include.
    #[arg(long)]
    pub smollm2: Option<PathBuf>,
    /// Python with torch and transformers (`scripts/bench-train` makes one); without it only
    /// temper is measured.
    #[arg(long)]
    pub python: Option<PathBuf>,
    /// Sequences per step.
    #[arg(long, default_value_t = 4)]
    pub batch: usize,
    /// Tokens per sequence.
    #[arg(long, default_value_t = 256)]
    pub seq_len: usize,
    /// Measured steps (after one warmup step) per round; the median step time over all rounds
    /// is reported.
    #[arg(long, default_value_t = 5)]
    pub steps: usize,
    /// Rounds per model, temper and PyTorch taking turns (so that a busy spell of a shared
    /// machine slows both rather than one side).
    #[arg(long, default_value_t = 3)]
    pub rounds: usize,
    /// Where both sides train: `cpu`, `cuda` or `cuda:N` (temper needs a `cuda` build); f32
    /// weights either way.
    #[arg(long, default_value = "cpu")]
    pub device: String,
    /// Where to write the JSON report.
    #[arg(long, default_value = "target/bench/train.json")]
    pub output: PathBuf,
    /// Internal: measure one model in this process and print JSON.
    #[arg(long, hide = true)]
    pub worker: Option<PathBuf>,
    /// Internal: with --worker, recompute blocks in the backward pass.
    #[arg(long, hide = true)]
    pub checkpointing: bool,
}

/// `temper inference bench`.
#[derive(Debug, Args)]
pub struct InferenceBenchArgs {
    /// The model (a Hugging Face folder or a .gguf file).
    #[arg(long)]
    pub model: PathBuf,
    /// Python with torch and transformers, for the reference side (omit to measure temper only).
    #[arg(long)]
    pub python: Option<PathBuf>,
    /// Python with llama-cpp-python (which builds llama.cpp from source), to measure llama.cpp
    /// on the same weights: temper writes them as an F32 (or, with `--dtype f16`, F16) GGUF from
    /// the tensors it runs. Needs a .gguf `--model` and the CPU. `scripts/bench-inference`
    /// passes the pinned environment's Python here too.
    #[arg(long, value_name = "PYTHON")]
    pub llama_cpp: Option<PathBuf>,
    /// Batch sizes measured.
    #[arg(long, value_delimiter = ',', default_value = "1,8,32")]
    pub batches: Vec<usize>,
    /// Tokens per prompt.
    #[arg(long, default_value_t = 128)]
    pub prompt_len: usize,
    /// Tokens generated per sequence.
    #[arg(long, default_value_t = 64)]
    pub new_tokens: usize,
    /// Rounds: each measures every side once in turn (temper, then transformers, then
    /// llama.cpp, each reference in a process of its own), so that a busy spell of a shared
    /// machine slows all sides rather than one; medians over the rounds are reported.
    #[arg(long, alias = "repeats", default_value_t = 3)]
    pub rounds: usize,
    /// The group workload, what RL sends: `n` samples of one prompt (temperature 1, no
    /// filters), for each `n` listed; transformers runs `generate(num_return_sequences=n)`.
    /// 0 skips it.
    #[arg(long, value_delimiter = ',', default_value = "8,16")]
    pub groups: Vec<usize>,
    /// Tokens generated per sample of the group workload.
    #[arg(long, default_value_t = 256)]
    pub group_tokens: usize,
    /// Where both sides compute: `cpu`, `cuda` or `cuda:N` (temper needs a `cuda` build).
    #[arg(long, default_value = "cpu")]
    pub device: String,
    /// Precision of both sides' weights and activations: f32, bf16 or f16.
    #[arg(long, default_value = "f32", value_parser = ["f32", "bf16", "f16"])]
    pub dtype: String,
    /// Where temper draws tokens: `auto` (the host for a CPU model, the device otherwise),
    /// `host` (each row of logits copied over) or `device` (only ids and logprobs copied). The
    /// report gives the bytes copied back per generated token.
    #[arg(long, default_value = "auto", value_parser = ["auto", "host", "device"])]
    pub sample_on: String,
    /// Where to write the JSON report.
    #[arg(long, default_value = "target/bench/inference.json")]
    pub output: PathBuf,
}

/// `temper sandbox bench`.
#[derive(Debug, Args)]
pub struct SandboxBenchArgs {
    /// Runs per measured workload.
    #[arg(long, default_value_t = 200)]
    pub runs: usize,
    /// Idle sessions to hold at once.
    #[arg(long, default_value_t = 1000)]
    pub sessions: usize,
    /// Agentic rollouts run at once, each holding its own session.
    #[arg(long, default_value_t = 64)]
    pub rollouts: usize,
    /// Where to write the JSON report.
    #[arg(long, default_value = "target/bench/sandbox.json")]
    pub output: PathBuf,
}

/// The device a benchmark's `--device` names, opened, and its name as PyTorch writes it
/// (`cpu`, `cuda:N`).
pub fn bench_device(name: &str) -> anyhow::Result<(candle_core::Device, String)> {
    let spec: temper_model::device::DeviceSpec =
        name.parse().map_err(|e| anyhow::anyhow!("--device {e}"))?;
    let device =
        temper_model::device::open(spec).map_err(|e| anyhow::anyhow!("--device {spec}: {e}"))?;
    Ok((device, spec.to_string()))
}

/// The candle dtype and the PyTorch name of a `--dtype` value.
pub fn bench_dtype(name: &str) -> anyhow::Result<(candle_core::DType, &'static str)> {
    Ok(match name {
        "f32" => (candle_core::DType::F32, "float32"),
        "bf16" => (candle_core::DType::BF16, "bfloat16"),
        "f16" => (candle_core::DType::F16, "float16"),
        other => anyhow::bail!("--dtype {other}: expected f32, bf16 or f16"),
    })
}
