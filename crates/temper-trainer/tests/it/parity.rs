//! temper's RL step against an RL trainer written apart from it in PyTorch
//! (`tests/python/rl_step_reference.py`): the same model, batches, loss and AdamW, three steps.
//!
//! Runs where `python3` (or `TEMPER_TEST_PYTHON`) imports torch, and is skipped with a message
//! elsewhere; `TEMPER_TEST_REQUIRE_TORCH=1` (set by CI) turns the skip into a failure.
#![allow(clippy::print_stderr, reason = "a skip, and the measured differences, belong in the log")]

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Stdio};

use candle_core::Tensor;
use serde_json::{Value, json};
use temper_model::{Architecture, ModelConfig, Tokenizer, Transformer};
use temper_trainer::loss::LossConfig;
use temper_trainer::optim::{OptimConfig, ScheduleConfig};
use temper_trainer::step::RlSequence;
use temper_trainer::{Policy, Single, StepReport, Trainer};

use crate::vals;

const REFERENCE: &str = include_str!("../python/rl_step_reference.py");

/// The Python with torch, or `None` (after saying why) when the test is to be skipped.
fn torch_python() -> Option<String> {
    let python = std::env::var("TEMPER_TEST_PYTHON").unwrap_or_else(|_| "python3".into());
    let ok = Command::new(&python)
        .args(["-c", "import torch"])
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if ok {
        return Some(python);
    }
    let why = format!("{python} cannot import torch (set TEMPER_TEST_PYTHON to one that can)");
    assert!(std::env::var("TEMPER_TEST_REQUIRE_TORCH").as_deref() != Ok("1"), "{why}");
    eprintln!("skipped: {why}");
    None
}

/// A small deterministic generator (the batches must not depend on a crate's RNG version).
struct Lcg(u64);

impl Lcg {
    fn next(&mut self) -> f64 {
        self.0 = self.0.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        (self.0 >> 11) as f64 / (1u64 << 53) as f64
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() * n as f64) as usize % n
    }
}

/// Log-probabilities of the next token after each position of `ids`, at `temperature`.
fn next_logprobs(model: &Transformer, ids: &[u32], temperature: f32) -> Vec<Vec<f64>> {
    let logits = model.forward(ids).unwrap();
    let scaled = (logits / f64::from(temperature)).unwrap();
    let lp = temper_model::ops::log_softmax_last_dim(&scaled).unwrap();
    let v = lp.dim(1).unwrap();
    vals(&lp).chunks(v).map(<[f64]>::to_vec).collect()
}

/// A rollout: random prompt bytes, then a completion the model picks greedily at `temperature`,
/// with sampling logprobs near the model's own (some far, so that both masks fire).
fn rollout(model: &Transformer, rng: &mut Lcg, temperature: f32, advantage: f32) -> RlSequence {
    let prompt_len = 3 + rng.below(4);
    let mut ids: Vec<u32> = (0..prompt_len).map(|_| 97 + rng.below(26) as u32).collect();
    for _ in 0..4 + rng.below(5) {
        let lp = next_logprobs(model, &ids, temperature);
        let last = lp.last().unwrap();
        let best = (0..last.len()).max_by(|&a, &b| last[a].total_cmp(&last[b])).unwrap();
        ids.push(best as u32);
    }
    let lp = next_logprobs(model, &ids[..ids.len() - 1], temperature);
    let mut mu = vec![0f32; ids.len()];
    for i in prompt_len..ids.len() {
        let l = lp[i - 1][ids[i] as usize];
        let p = l.exp();
        mu[i] = if advantage > 0.0 && p > 0.3 && rng.next() < 0.5 {
            (p - 0.25).ln() as f32 // the trainer's probability is 0.25 above: masked high
        } else if advantage <= 0.0 && rng.next() < 0.3 {
            0.6f64.ln() as f32 // the sampler's was far above: masked low
        } else {
            (l + 0.6 * (rng.next() - 0.5)) as f32
        };
    }
    let mask = (0..ids.len()).map(|i| i >= prompt_len).collect();
    RlSequence { ids, mask, sampling_logprobs: mu, advantage, temperature }
}

fn sequence_json(s: &RlSequence) -> Value {
    json!({
        "ids": s.ids,
        "mask": s.mask.iter().map(|&m| u8::from(m)).collect::<Vec<_>>(),
        "sampling_logprobs": s.sampling_logprobs,
        "advantage": s.advantage,
        "temperature": s.temperature,
    })
}

/// Relative differences: `max |a − b| / max |b|` of each weight, the largest.
fn weight_difference(ours: &BTreeMap<String, Tensor>, theirs: &BTreeMap<String, Tensor>) -> f64 {
    assert_eq!(ours.keys().collect::<Vec<_>>(), theirs.keys().collect::<Vec<_>>());
    let mut worst: f64 = 0.0;
    for (name, a) in ours {
        let (a, b) = (vals(a), vals(&theirs[name]));
        let scale = b.iter().fold(0f64, |m, x| m.max(x.abs())).max(1e-12);
        let diff = a.iter().zip(&b).fold(0f64, |m, (x, y)| m.max((x - y).abs()));
        worst = worst.max(diff / scale);
    }
    worst
}

struct Reference {
    losses: Vec<f64>,
    grad_norms: Vec<f64>,
    weights: BTreeMap<String, Tensor>,
}

fn run_reference(python: &str, spec: &Value, out: &Path) -> Reference {
    let mut child = Command::new(python)
        .args(["-c", REFERENCE])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut spec = spec.clone();
    spec["out"] = json!(out);
    let stdin = child.stdin.take().unwrap();
    serde_json::to_writer(stdin, &spec).unwrap();
    let output = child.wait_with_output().unwrap();
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let reply: Value = serde_json::from_slice(&output.stdout).unwrap();
    let floats = |k: &str| -> Vec<f64> {
        reply[k].as_array().unwrap().iter().map(|v| v.as_f64().unwrap()).collect()
    };
    let weights = candle_core::safetensors::load(out, &crate::dev()).unwrap();
    Reference {
        losses: floats("losses"),
        grad_norms: floats("grad_norms"),
        weights: weights.into_iter().collect(),
    }
}

fn relative(a: f64, b: f64) -> f64 {
    (a - b).abs() / b.abs().max(1e-12)
}

/// How far temper's steps are from the reference's: the largest relative difference of a loss,
/// a gradient norm, or a trained weight.
fn distance(ours: &[StepReport], weights: &BTreeMap<String, Tensor>, r: &Reference) -> [f64; 3] {
    let loss = ours.iter().zip(&r.losses).map(|(o, l)| relative(o.loss, *l)).fold(0.0, f64::max);
    let norm =
        ours.iter().zip(&r.grad_norms).map(|(o, g)| relative(o.grad_norm, *g)).fold(0.0, f64::max);
    [loss, norm, weight_difference(weights, &r.weights)]
}

#[test]
fn rl_step_matches_an_independent_pytorch_trainer() {
    let Some(python) = torch_python() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let tokenizer = Tokenizer::bytes(&["<|im_start|>", "<|im_end|>"]);
    let mut cfg = ModelConfig::tiny(Architecture::Qwen3, tokenizer.vocab_size());
    cfg.num_hidden_layers = 2;
    let model = Transformer::init_random(cfg, 7, &crate::dev()).unwrap();
    let model_dir = tmp.path().join("init");
    temper_model::weights::save_model(&model, &model_dir).unwrap();

    // Three steps of two micro-batches of unequal size; advantages of both signs; three
    // temperatures. The batches come from the initial model (one step of lag, as in RL).
    let mut rng = Lcg(42);
    let steps: Vec<Vec<Vec<RlSequence>>> = (0..3)
        .map(|_| {
            let mut seq = |t: f32, a: f32| rollout(&model, &mut rng, t, a);
            vec![vec![seq(1.0, 1.0), seq(0.7, -0.5)], vec![seq(0.1, 0.75)]]
        })
        .collect();
    // An RL learning rate: at 3e-3, Adam's division by √v turns the f32 rounding of gradients
    // near zero into differences of ~1e-4 of a weight, on both sides alike (with candle's
    // autograd as well as the written-out backward pass), while losses and gradient norms still
    // agree to 1e-7.
    let optim = OptimConfig {
        lr: 1e-4,
        beta1: 0.9,
        beta2: 0.99,
        eps: 1e-8,
        weight_decay: 0.01,
        max_grad_norm: 0.5,
    };
    let loss = LossConfig::default();

    let policy = Policy { model, tokenizer, template: None };
    let mut trainer =
        Trainer::new(policy, optim, ScheduleConfig::default(), 3, &Single, false).unwrap();
    let mut reports = Vec::new();
    let mut spec_steps = Vec::new();
    for mbs in &steps {
        let total: usize =
            mbs.iter().flatten().map(|s| s.mask.iter().skip(1).filter(|m| **m).count()).sum();
        let refs: Vec<Vec<&RlSequence>> = mbs.iter().map(|mb| mb.iter().collect()).collect();
        let report = trainer.rl_step(&refs, &loss, total as f64).unwrap();
        assert!(report.skipped.is_none(), "{:?}", report.skipped);
        spec_steps.push(json!({
            "lr": report.lr,
            "total_loss_tokens": total,
            "micro_batches": mbs.iter().map(|mb| mb.iter().map(sequence_json).collect::<Vec<_>>()).collect::<Vec<_>>(),
        }));
        reports.push(report);
    }
    // The batch exercises both masks and the clipping of the gradient norm.
    let stats = reports
        .iter()
        .fold((0.0, 0.0), |(h, l), r| (h + r.stats.masked_high, l + r.stats.masked_low));
    assert!(stats.0 > 0.0 && stats.1 > 0.0, "masked (high, low) = {stats:?}");
    assert!(reports.iter().any(|r| r.grad_norm > optim.max_grad_norm));
    let ours = trainer.trainable_tensors();

    let spec = json!({
        "model_dir": model_dir,
        "optim": {
            "beta1": optim.beta1, "beta2": optim.beta2, "eps": optim.eps,
            "weight_decay": optim.weight_decay, "max_grad_norm": optim.max_grad_norm,
        },
        "loss": {"mask_high": loss.mask_high, "mask_low": loss.mask_low, "kl_coef": loss.kl_coef},
        "steps": spec_steps,
        "break": null,
    });
    let reference = run_reference(&python, &spec, &tmp.path().join("reference.safetensors"));
    let [loss_d, norm_d, weight_d] = distance(&reports, &ours, &reference);
    eprintln!(
        "temper vs PyTorch: losses {:?} vs {:?}; relative differences: loss {loss_d:.1e}, grad norm {norm_d:.1e}, weights {weight_d:.1e}",
        reports.iter().map(|r| r.loss).collect::<Vec<_>>(),
        reference.losses
    );
    assert!(loss_d <= 1e-5 && norm_d <= 1e-5 && weight_d <= 1e-5, "{loss_d} {norm_d} {weight_d}");

    // The comparison has teeth: each deliberate error in the reference is far outside it.
    for broken in ["sign", "mask", "normaliser"] {
        let mut spec = spec.clone();
        spec["break"] = json!(broken);
        let out = tmp.path().join(format!("{broken}.safetensors"));
        let [l, n, w] = distance(&reports, &ours, &run_reference(&python, &spec, &out));
        assert!(l.max(n).max(w) > 1e-3, "breaking the {broken} went unnoticed: {l} {n} {w}");
    }
}
