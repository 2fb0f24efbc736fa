//! `temper inference serve`.

use anyhow::Context;
use candle_core::{DType, Device};
use temper_inference::{Engine, EngineConfig, ServerState};
use temper_model::{ChatTemplate, Pretrained};

use crate::args::{InferenceCommand, InferenceServeArgs, Precision};

/// Runs `temper inference ...`.
pub async fn run(command: InferenceCommand) -> anyhow::Result<()> {
    match command {
        InferenceCommand::Serve(args) => serve(args).await,
        InferenceCommand::Bench(args) => temper_bench::inference::run(args).await,
    }
}

/// The candle dtype of a precision flag.
pub fn dtype(p: Precision) -> DType {
    match p {
        Precision::F32 => DType::F32,
        Precision::Bf16 => DType::BF16,
        Precision::F16 => DType::F16,
    }
}

/// The device a `--device` value names (`cpu`, `cuda`, `cuda:N`), opened; `index` is added
/// to a CUDA device's number (a process's place among its role's processes on its node).
pub fn device(name: &str, index: usize) -> anyhow::Result<Device> {
    let spec: temper_model::device::DeviceSpec =
        name.parse().map_err(|e| anyhow::anyhow!("--device {e}"))?;
    let spec = spec.nth(index);
    temper_model::device::open(spec).map_err(|e| anyhow::anyhow!("--device {spec}: {e}"))
}

async fn serve(args: InferenceServeArgs) -> anyhow::Result<()> {
    let dtype = dtype(args.dtype);
    let device = device(&args.device, 0)?;
    let state_device = device.clone();
    let model_path = args.model_path.clone().or(args.model.clone()).context("name the model")?;
    anyhow::ensure!(model_path.exists(), "{}: no such file or folder", model_path.display());
    // Listen first: a busy port fails now, not after the model has loaded; requests that come
    // while it loads wait in the listen queue.
    let addr = match (&args.host, args.port) {
        (None, None) => args.addr.clone(),
        (host, port) => {
            let host = host.as_deref().unwrap_or("127.0.0.1");
            let port = port.unwrap_or(8000);
            // An IPv6 address is bracketed in HOST:PORT.
            if host.contains(':') && !host.starts_with('[') {
                format!("[{host}]:{port}")
            } else {
                format!("{host}:{port}")
            }
        }
    };
    let listener = tokio::net::TcpListener::bind(&addr)
        .await
        .with_context(|| format!("cannot listen on {addr}"))?;
    let started = std::time::Instant::now();
    let path = model_path.clone();
    let mut p = tokio::task::spawn_blocking(move || Pretrained::load(&path, dtype, &device))
        .await?
        .with_context(|| format!("cannot load the model {}", model_path.display()))?;
    // Fail now, not at the first request, when the dtype/device pair cannot run.
    p.model.forward(&[0]).with_context(|| {
        format!("the model cannot run in {:?} on {} (f32 always can)", args.dtype, args.device)
    })?;
    if let Some(file) = &args.chat_template {
        let src = std::fs::read_to_string(file)
            .with_context(|| format!("cannot read {}", file.display()))?;
        p.chat_template = Some(ChatTemplate::new(&src, "", "", &file.display().to_string())?);
    }
    if let Some(len) = args.max_model_len {
        anyhow::ensure!(len > 1, "--max-model-len must be at least 2");
        p.model.set_max_positions(len)?;
    }
    let name = args.served_model_name.clone().unwrap_or_else(|| {
        model_path
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_else(|| "model".into())
    });
    let cfg = p.model.config();
    eprintln!(
        "temper inference: {} ({:?}, {} layers, {:.1}M parameters, context {}) loaded in {:.1} s",
        model_path.display(),
        cfg.architecture,
        cfg.num_hidden_layers,
        p.model.num_parameters() as f64 / 1e6,
        cfg.max_position_embeddings,
        started.elapsed().as_secs_f64()
    );
    if p.chat_template.is_none() {
        eprintln!(
            "temper inference: the model has no chat template; /v1/chat/completions will refuse requests"
        );
    }
    let engine = Engine::start(
        p.model,
        p.tokenizer,
        EngineConfig {
            max_running: args.max_running,
            max_step_tokens: args.max_step_tokens,
            max_waiting: args.max_waiting,
            seed: args.seed,
            threads: 0,
            max_kv_tokens: args.max_kv_tokens,
            sample_on: temper_inference::SampleOn::Auto,
            prefix_cache_tokens: args.prefix_cache_tokens,
        },
        0,
    );
    let state = ServerState::new(engine, p.chat_template, name, dtype, state_device);
    let local = listener.local_addr()?;
    eprintln!("temper inference: serving on http://{local}/v1");
    if let Some(file) = &args.address_file {
        let reach = if local.ip().is_unspecified() {
            let node = temper_protocol::exposition::Identity::of_process("inference").node;
            format!("{node}:{}", local.port())
        } else {
            local.to_string()
        };
        temper_protocol::fsio::write_atomic(file, reach.as_bytes())
            .with_context(|| format!("cannot write {}", file.display()))?;
    }
    axum::serve(listener, temper_inference::router(state))
        .with_graceful_shutdown(async {
            let _ = tokio::signal::ctrl_c().await;
        })
        .await
        .context("the server failed")
}
