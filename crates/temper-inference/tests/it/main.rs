//! Integration tests of temper-inference: the engine against the model's own forward pass, and
//! the HTTP server.

mod engine;
mod server;

use candle_core::Tensor;
use temper_inference::{Engine, EngineConfig, Event, Finish, Request};
use temper_model::{Architecture, ModelConfig, Tokenizer, Transformer, ops};

/// A tiny model over the byte tokenizer (ids 0–255, then `<|end|>` = 256).
pub fn tiny(seed: u64) -> Transformer {
    let mut cfg = ModelConfig::tiny(Architecture::Qwen3, 257);
    cfg.eos_token_ids = vec![256];
    cfg.max_position_embeddings = 256;
    Transformer::init_random(cfg, seed, &dev()).unwrap()
}

/// Weights with larger values, so sampling is far from uniform and greedy paths are stable.
pub fn sharp(seed: u64) -> Transformer {
    let m = tiny(seed);
    let t = m
        .tensors()
        .into_iter()
        .map(|(n, t)| if n.ends_with("norm.weight") { (n, t) } else { (n, (t * 8.0).unwrap()) })
        .collect();
    Transformer::from_tensors(m.config().clone(), t, candle_core::DType::F32, &dev()).unwrap()
}

/// [`tiny`] serving 4096 positions, for requests that would run long unless stopped.
pub fn long_context(seed: u64) -> Transformer {
    let mut m = tiny(seed);
    m.set_max_positions(4096).unwrap();
    m
}

/// Polls `cond` every 5 ms for up to `secs` seconds; whether it came true.
pub async fn wait_until(secs: u64, mut cond: impl FnMut() -> bool) -> bool {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(secs);
    while !cond() {
        if std::time::Instant::now() > deadline {
            return false;
        }
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    true
}

pub fn bytes_tokenizer() -> Tokenizer {
    Tokenizer::bytes(&["<|end|>"])
}

pub fn engine(model: Transformer) -> Engine {
    Engine::start(model, bytes_tokenizer(), EngineConfig::default(), 0)
}

/// One finished continuation as the engine reported it.
#[derive(Debug, Default, Clone)]
pub struct Out {
    pub ids: Vec<u32>,
    pub logprobs: Vec<f32>,
    pub versions: Vec<u64>,
    pub text: String,
    pub finish: Option<Finish>,
}

pub async fn collect(mut rx: tokio::sync::mpsc::UnboundedReceiver<Event>, n: usize) -> Vec<Out> {
    let mut outs = vec![Out::default(); n];
    let mut open = n;
    while open > 0 {
        match rx.recv().await.expect("engine stopped") {
            Event::Token { index, id, logprob, text, version, .. } => {
                outs[index].ids.push(id);
                outs[index].logprobs.push(logprob);
                outs[index].versions.push(version);
                outs[index].text.push_str(&text);
            }
            Event::Finished { index, reason, text } => {
                outs[index].text.push_str(&text);
                outs[index].finish = Some(reason);
                open -= 1;
            }
        }
    }
    outs
}

pub async fn run(engine: &Engine, req: Request) -> Vec<Out> {
    let n = req.n;
    collect(engine.submit(req).unwrap(), n).await
}

/// log_softmax(logits / t) of each completion token, from one full forward of prompt + completion.
pub fn forward_logprobs(
    model: &Transformer,
    prompt: &[u32],
    completion: &[u32],
    t: f64,
) -> Vec<f32> {
    let all: Vec<u32> = prompt.iter().chain(completion).copied().collect();
    let logits = model.forward(&all[..all.len() - 1]).unwrap();
    let logits = (logits.narrow(0, prompt.len() - 1, completion.len()).unwrap() / t).unwrap();
    let targets = Tensor::new(completion, &dev()).unwrap();
    ops::token_logprobs(&logits, &targets).unwrap().to_vec1().unwrap()
}

/// Greedy continuation of `prompt` by full forwards (no cache), `n` tokens (through end tokens).
pub fn greedy_reference(model: &Transformer, prompt: &[u32], n: usize) -> Vec<u32> {
    let mut toks = prompt.to_vec();
    for _ in 0..n {
        let logits = model.forward(&toks).unwrap();
        let next =
            logits.get(toks.len() - 1).unwrap().argmax(0).unwrap().to_scalar::<u32>().unwrap();
        toks.push(next);
    }
    toks[prompt.len()..].to_vec()
}

/// The device the tests compute on: `TEMPER_TEST_DEVICE` (`cpu`, `cuda`, `cuda:N`; set by
/// scripts/gpu-check to run this suite on a GPU), else the CPU. Opened once per process.
pub fn dev() -> candle_core::Device {
    temper_model::device::from_env("TEMPER_TEST_DEVICE").expect("TEMPER_TEST_DEVICE")
}
