//! Whole training steps on tiny models: checkpointed gradients, data parallelism, RL direction,
//! SFT data, and resuming.

use std::path::Path;

use candle_core::{DType, Tensor};
use serde_json::json;
use temper_model::{Architecture, ModelConfig, Tokenizer, Transformer};
use temper_trainer::data::{Record, Sample, tokenize};
use temper_trainer::grad::loss_and_grads;
use temper_trainer::loss::{LossConfig, sft_loss};
use temper_trainer::optim::{OptimConfig, ScheduleConfig};
use temper_trainer::pack::{balance, first_fit_decreasing};
use temper_trainer::policy::CHATML;
use temper_trainer::sft::{self, NoHooks, SftConfig};
use temper_trainer::step::RlSequence;
use temper_trainer::{InProcess, Policy, Single, Trainer};

use crate::vals;

fn tiny_policy(arch: Architecture, seed: u64) -> Policy {
    let tokenizer = Tokenizer::bytes(&["<|im_start|>", "<|im_end|>"]);
    let mut cfg = ModelConfig::tiny(arch, tokenizer.vocab_size());
    cfg.max_position_embeddings = 256;
    let model = Transformer::init_random(cfg, seed, &crate::dev()).unwrap();
    let template = temper_model::ChatTemplate::new(CHATML, "", "<|im_end|>", "chatml").unwrap();
    Policy { model, tokenizer, template: Some(template) }
}

fn seqs() -> Vec<Vec<u32>> {
    vec![
        b"hello world".iter().map(|&b| u32::from(b)).collect(),
        b"abc".iter().map(|&b| u32::from(b)).collect(),
        b"the quick brown fox".iter().map(|&b| u32::from(b)).collect(),
        b"zz top".iter().map(|&b| u32::from(b)).collect(),
    ]
}

fn nll(logits: &Tensor, targets: &[u32]) -> candle_core::Result<(Tensor, ())> {
    let ids = Tensor::from_vec(targets.to_vec(), targets.len(), logits.device())?;
    let lp = temper_model::ops::token_logprobs(logits, &ids)?;
    Ok((sft_loss(&lp, &vec![true; targets.len()], targets.len() as f64)?, ()))
}

#[test]
fn checkpointed_gradients_equal_plain_ones_and_reach_every_weight() {
    for arch in [Architecture::Llama, Architecture::Qwen3, Architecture::Glm4Moe] {
        let policy = tiny_policy(arch, 1);
        let data = seqs();
        let inputs: Vec<&[u32]> = data.iter().map(|s| &s[..s.len() - 1]).collect();
        let targets: Vec<u32> = data.iter().flat_map(|s| s[1..].iter().copied()).collect();
        let (plain, ()) =
            loss_and_grads(&policy.model, &inputs, false, |l| nll(l, &targets)).unwrap();
        let (ckpt, ()) =
            loss_and_grads(&policy.model, &inputs, true, |l| nll(l, &targets)).unwrap();
        for ((name, _), (a, b)) in policy.model.params().iter().zip(plain.iter().zip(&ckpt)) {
            let (a, b) = (vals(a), vals(b));
            let scale = a.iter().fold(0f64, |m, x| m.max(x.abs()));
            let diff = a.iter().zip(&b).fold(0f64, |m, (x, y)| m.max((x - y).abs()));
            assert!(diff <= 1e-5 * scale.max(1e-3), "{arch:?} {name}: diff {diff} (scale {scale})");
            // The GLM-4.5 correction bias only chooses experts: it has no gradient by design.
            if !name.ends_with("e_score_correction_bias") {
                assert!(scale > 0.0, "{arch:?} {name}: zero gradient");
            }
        }
    }
}

/// The trainer's two ways to a gradient agree: the written-out backward pass with the logits
/// read by row kernels (taken for the model's own weights), and candle's autograd through the
/// composed log-softmax (taken here by passing a copy of the weight list), on an RL loss with
/// per-token temperatures and masked positions.
#[test]
fn written_backward_and_autograd_agree_on_a_policy_loss() {
    use temper_trainer::grad::{Targets, logprob_loss_and_grads};
    use temper_trainer::loss::{RlTokens, policy_loss};
    for arch in [Architecture::Llama, Architecture::Qwen3, Architecture::Qwen3Moe] {
        let policy = tiny_policy(arch, 3);
        let data = seqs();
        let inputs: Vec<&[u32]> = data.iter().map(|s| &s[..s.len() - 1]).collect();
        let ids: Vec<u32> = data.iter().flat_map(|s| s[1..].iter().copied()).collect();
        let n = ids.len();
        let temps: Vec<f32> = (0..n).map(|i| [1.0, 0.6, 1.4][i % 3]).collect();
        let mask: Vec<bool> = (0..n).map(|i| i % 4 != 1).collect();
        let mu: Vec<f32> = (0..n).map(|i| -3.0 - (i % 5) as f32 * 0.3).collect();
        let adv: Vec<f32> = (0..n).map(|i| if i % 2 == 0 { 1.0 } else { -0.5 }).collect();
        let seq: Vec<u32> = (0..n as u32).map(|i| i % 4).collect();
        let tokens =
            RlTokens { sampling_logprobs: &mu, advantages: &adv, loss_mask: &mask, sequence: &seq };
        let cfg = LossConfig::default();
        let run = |params: &[(String, candle_core::Var)]| {
            logprob_loss_and_grads(
                &policy.model,
                params,
                &inputs,
                false,
                Targets { ids: &ids, temperatures: &temps, mask: &mask },
                |lp| {
                    let (l, _) = policy_loss(lp, &tokens, &cfg, n as f64)?;
                    let v = l.to_scalar::<f32>()?;
                    Ok((l, v))
                },
            )
            .unwrap()
        };
        let (written, h1, l1) = run(policy.model.params());
        let copy = policy.model.params().to_vec();
        let (autograd, h2, l2) = run(&copy);
        assert!((l1 - l2).abs() < 1e-5, "{arch:?}: loss {l1} vs {l2}");
        assert!((h1 - h2).abs() < 1e-3 * h2.abs(), "{arch:?}: entropy {h1} vs {h2}");
        assert!(h1 > 0.0);
        for ((name, _), (a, b)) in policy.model.params().iter().zip(written.iter().zip(&autograd)) {
            let (a, b) = (vals(a), vals(b));
            let scale = b.iter().fold(0f64, |m, x| m.max(x.abs()));
            let diff = a.iter().zip(&b).fold(0f64, |m, (x, y)| m.max((x - y).abs()));
            assert!(diff <= 1e-4 * scale.max(1e-3), "{arch:?} {name}: diff {diff} (scale {scale})");
        }
    }
}

fn sample(ids: &[u32], loss_from: usize) -> Sample {
    Sample { ids: ids.to_vec(), mask: (0..ids.len()).map(|i| i >= loss_from).collect() }
}

#[test]
fn two_in_process_ranks_update_as_one_rank_with_the_whole_batch() {
    let data: Vec<Sample> = seqs().iter().map(|s| sample(s, 1)).collect();
    let total: f64 = data.iter().map(|s| s.loss_tokens() as f64).sum();
    let optim = OptimConfig { lr: 1e-2, ..OptimConfig::default() };
    // One rank, both halves as two micro-batches.
    let single = Single;
    let mut one = Trainer::new(
        tiny_policy(Architecture::Qwen3, 2),
        optim,
        ScheduleConfig::default(),
        10,
        &single,
        false,
    )
    .unwrap();
    let mbs: Vec<Vec<&Sample>> = vec![data[..2].iter().collect(), data[2..].iter().collect()];
    let r1 = one.sft_step(&mbs, total).unwrap();
    // Two ranks, one half each.
    let group = InProcess::group(2);
    let results: Vec<(Vec<Vec<f64>>, f64)> = std::thread::scope(|s| {
        let handles: Vec<_> = group
            .iter()
            .enumerate()
            .map(|(rank, coll)| {
                let data = &data;
                s.spawn(move || {
                    let mut t = Trainer::new(
                        tiny_policy(Architecture::Qwen3, 2),
                        optim,
                        ScheduleConfig::default(),
                        10,
                        coll,
                        false,
                    )
                    .unwrap();
                    let mine: Vec<Vec<&Sample>> =
                        vec![data[rank * 2..rank * 2 + 2].iter().collect()];
                    let r = t.sft_step(&mine, total).unwrap();
                    let w =
                        t.policy.model.params().iter().map(|(_, v)| vals(v.as_tensor())).collect();
                    (w, r.loss)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let reference: Vec<Vec<f64>> =
        one.policy.model.params().iter().map(|(_, v)| vals(v.as_tensor())).collect();
    let mut worst: f64 = 0.0;
    for (w, loss) in &results {
        assert!((loss - r1.loss).abs() < 1e-6, "loss {loss} vs {}", r1.loss);
        for (a, b) in w.iter().zip(&reference) {
            for (x, y) in a.iter().zip(b) {
                worst = worst.max((x - y).abs());
            }
        }
    }
    // The update itself is lr-sized (1e-2): the ranks must agree far below that.
    assert!(worst <= 1e-6, "max |Δ| between 2 ranks and 1 rank: {worst}");
}

/// What a group of in-process ranks ends with.
struct Ranks {
    /// Rank 0's weights.
    weights: Vec<Vec<f64>>,
    /// Each rank's optimizer-state bytes.
    state_bytes: Vec<usize>,
}

/// `steps` SFT steps (lr 1e-2) on `world` in-process ranks, each taking its share of the four
/// samples, optionally with sharded optimizer state; resumes from `resume` first, and checkpoints
/// into `save` at the end.
fn train_ranks(
    world: usize,
    sharded: bool,
    steps: u64,
    resume: Option<&Path>,
    save: Option<&Path>,
) -> Ranks {
    let data: Vec<Sample> = seqs().iter().map(|s| sample(s, 1)).collect();
    let total: f64 = data.iter().map(|s| s.loss_tokens() as f64).sum();
    let optim = OptimConfig { lr: 1e-2, ..OptimConfig::default() };
    let group = InProcess::group(world);
    let results: Vec<(Vec<Vec<f64>>, usize)> = std::thread::scope(|s| {
        let handles: Vec<_> = group
            .iter()
            .map(|coll| {
                let data = &data;
                s.spawn(move || {
                    let policy = tiny_policy(Architecture::Qwen3, 2);
                    let schedule = ScheduleConfig::default();
                    let mut t = Trainer::new(policy, optim, schedule, 10, coll, false).unwrap();
                    if sharded {
                        t = t.with_sharded_optimizer().unwrap();
                    }
                    if let Some(root) = resume {
                        t.resume_from(root).unwrap().unwrap();
                    }
                    let per = 4 / world;
                    let rank = temper_trainer::Collective::rank(coll);
                    let mine: Vec<Vec<&Sample>> = data[rank * per..(rank + 1) * per]
                        .chunks(2)
                        .map(|c| c.iter().collect())
                        .collect();
                    for _ in 0..steps {
                        t.sft_step(&mine, total).unwrap();
                    }
                    if let Some(root) = save {
                        t.save_checkpoint(root, 0, 0, 0).unwrap();
                    }
                    let w = t.policy.model.params().iter().map(|(_, v)| vals(v.as_tensor()));
                    (w.collect(), t.optimizer().state_bytes())
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let state_bytes = results.iter().map(|r| r.1).collect();
    Ranks { weights: results.into_iter().next().unwrap().0, state_bytes }
}

fn max_abs_difference(a: &[Vec<f64>], b: &[Vec<f64>]) -> f64 {
    let pairs = a.iter().zip(b).flat_map(|(x, y)| x.iter().zip(y));
    pairs.fold(0f64, |m, (x, y)| m.max((x - y).abs()))
}

#[test]
fn sharded_optimizer_state_trains_as_a_full_copy_and_resumes_across_layouts() {
    let full = train_ranks(2, false, 3, None, None);
    let sharded = train_ranks(2, true, 3, None, None);
    // Updates are lr-sized (1e-2); the two ways agree far below that.
    let diff = max_abs_difference(&full.weights, &sharded.weights);
    assert!(diff <= 1e-6, "sharded and full optimizer state differ by {diff}");
    let moved = max_abs_difference(&full.weights, &train_ranks(1, false, 0, None, None).weights);
    assert!(moved > 1e-3, "three steps barely moved the weights: {moved}");
    // Each rank keeps half the moments (the halves differ by at most one element).
    let (whole, halves) = (full.state_bytes[0], &sharded.state_bytes);
    assert_eq!(full.state_bytes, [whole, whole]);
    assert_eq!(halves[0] + halves[1], whole);
    assert!(halves[0].abs_diff(halves[1]) <= 8, "{halves:?} of {whole}");

    // Two sharded steps, a checkpoint, then the third step after resuming: sharded on two
    // ranks (each reads its file), and as one process with a full copy (the files joined).
    let dir = tempfile::tempdir().unwrap();
    train_ranks(2, true, 2, None, Some(dir.path()));
    let ckpt = dir.path().join("step_2");
    for file in ["optimizer.rank_0.safetensors", "optimizer.rank_1.safetensors", "state.json"] {
        assert!(ckpt.join(file).is_file(), "{file} missing");
    }
    assert!(!ckpt.join("optimizer.safetensors").exists());
    let state: serde_json::Value =
        serde_json::from_slice(&std::fs::read(ckpt.join("state.json")).unwrap()).unwrap();
    assert_eq!(state["optimizer_shards"], 2);
    let resumed = train_ranks(2, true, 1, Some(dir.path()), None);
    let diff = max_abs_difference(&sharded.weights, &resumed.weights);
    assert!(diff <= 1e-6, "resumed sharded run differs by {diff}");
    let alone = train_ranks(1, false, 1, Some(dir.path()), None);
    let diff = max_abs_difference(&sharded.weights, &alone.weights);
    assert!(diff <= 1e-6, "one process resumed from sharded state differs by {diff}");
    // And a full copy's checkpoint resumes into sharded state.
    let dir = tempfile::tempdir().unwrap();
    train_ranks(1, false, 2, None, Some(dir.path()));
    let reshard = train_ranks(2, true, 1, Some(dir.path()), None);
    let diff = max_abs_difference(&sharded.weights, &reshard.weights);
    assert!(diff <= 1e-6, "sharded run resumed from a full copy differs by {diff}");
}

fn completion_logprob(model: &Transformer, s: &RlSequence) -> f64 {
    let logits = model.forward(&s.ids[..s.ids.len() - 1]).unwrap();
    let ids = Tensor::from_vec(s.ids[1..].to_vec(), s.ids.len() - 1, &crate::dev()).unwrap();
    let lp = vals(&temper_model::ops::token_logprobs(&logits, &ids).unwrap());
    lp.iter().zip(&s.mask[1..]).filter(|(_, m)| **m).map(|(l, _)| l).sum()
}

#[test]
fn rl_steps_raise_positive_and_lower_negative_advantage_tokens() {
    let policy = tiny_policy(Architecture::Llama, 3);
    // Prompt tokens are not trained on; the completions differ.
    let make = |prompt: &[u8], completion: &[u8], adv: f32| -> RlSequence {
        let ids: Vec<u32> = prompt.iter().chain(completion).map(|&b| u32::from(b)).collect();
        let n = ids.len();
        let logits = policy.model.forward(&ids[..n - 1]).unwrap();
        let t = Tensor::from_vec(ids[1..].to_vec(), n - 1, &crate::dev()).unwrap();
        let mut mu = vec![0f32];
        mu.extend(
            vals(&temper_model::ops::token_logprobs(&logits, &t).unwrap())
                .iter()
                .map(|&x| x as f32),
        );
        RlSequence {
            mask: (0..n).map(|i| i >= prompt.len()).collect(),
            ids,
            sampling_logprobs: mu,
            advantage: adv,
            temperature: 1.0,
        }
    };
    let batch = [
        make(b"Q: 2+2 A: ", b"4.", 1.0),
        make(b"Q: 2+2 A: ", b"5!", -1.0),
        make(b"Q: 3+3 A: ", b"6?", 0.5),
    ];
    let before: Vec<f64> = batch.iter().map(|s| completion_logprob(&policy.model, s)).collect();
    let single = Single;
    let optim = OptimConfig { lr: 3e-3, weight_decay: 0.0, ..OptimConfig::default() };
    let mut t =
        Trainer::new(policy, optim, ScheduleConfig::default(), 100, &single, false).unwrap();
    let total: f64 = batch.iter().map(|s| s.mask[1..].iter().filter(|&&m| m).count() as f64).sum();
    let mb: Vec<Vec<&RlSequence>> = vec![batch.iter().collect()];
    let mut first_kl = None;
    for _ in 0..5 {
        let r = t.rl_step(&mb, &LossConfig::default(), total).unwrap();
        assert!(r.skipped.is_none());
        first_kl.get_or_insert(r.stats.mismatch_kl / r.stats.tokens);
    }
    // On the first step the trainer recomputes exactly what the "sampler" reported.
    assert!(first_kl.unwrap().abs() < 1e-6, "first-step mismatch KL {first_kl:?}");
    let after: Vec<f64> = batch.iter().map(|s| completion_logprob(&t.policy.model, s)).collect();
    assert!(after[0] > before[0] + 0.05, "positive advantage: {} -> {}", before[0], after[0]);
    assert!(after[1] < before[1] - 0.05, "negative advantage: {} -> {}", before[1], after[1]);
    assert!(after[2] > before[2] + 0.05, "positive advantage: {} -> {}", before[2], after[2]);
}

#[test]
fn a_non_finite_step_is_skipped_and_leaves_the_weights_alone() {
    let single = Single;
    let policy = tiny_policy(Architecture::Llama, 4);
    let before: Vec<Vec<f64>> =
        policy.model.params().iter().map(|(_, v)| vals(v.as_tensor())).collect();
    let mut t =
        Trainer::new(policy, OptimConfig::default(), ScheduleConfig::default(), 10, &single, false)
            .unwrap();
    let ids: Vec<u32> = b"abcdef".iter().map(|&b| u32::from(b)).collect();
    let mut mu = vec![-1.0f32; ids.len()];
    mu[3] = f32::NAN;
    let s = RlSequence {
        mask: vec![true; ids.len()],
        ids,
        sampling_logprobs: mu,
        advantage: 1.0,
        temperature: 1.0,
    };
    let r = t.rl_step(&[vec![&s]], &LossConfig::default(), 5.0).unwrap();
    assert!(r.skipped.as_deref().is_some_and(|m| m.contains("not finite")), "{:?}", r.skipped);
    assert_eq!(t.skipped_steps, 1);
    let after: Vec<Vec<f64>> =
        t.policy.model.params().iter().map(|(_, v)| vals(v.as_tensor())).collect();
    assert_eq!(before, after);
}

#[test]
fn chat_samples_train_only_on_assistant_turns() {
    let p = tiny_policy(Architecture::Llama, 0);
    let rec = Record::from_json(&json!({"messages": [
        {"role": "system", "content": "sys"},
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "yo"},
        {"role": "user", "content": "more"},
        {"role": "assistant", "content": "ok"},
    ]}))
    .unwrap();
    let s = tokenize(&rec, &p.tokenizer, p.template.as_ref()).unwrap();
    let trained: String = s
        .ids
        .iter()
        .zip(&s.mask)
        .filter(|(_, m)| **m)
        .map(|(&i, _)| p.tokenizer.decode(&[i], false).unwrap())
        .collect();
    assert_eq!(trained, "yo<|im_end|>\nok<|im_end|>\n");
    assert_eq!(
        p.tokenizer.decode(&s.ids, false).unwrap(),
        "<|im_start|>system\nsys<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\nyo<|im_end|>\n<|im_start|>user\nmore<|im_end|>\n<|im_start|>assistant\nok<|im_end|>\n"
    );
    let text = Record::from_json(&json!({"prompt": "2+2=", "completion": "4"})).unwrap();
    let s = tokenize(&text, &p.tokenizer, None).unwrap();
    assert_eq!(s.mask, [false, false, false, false, true]);
    for bad in [
        json!({"messages": []}),
        json!({"prompt": "x"}),
        json!({"messages": [{"role": "user", "content": "x"}]}),
        json!({"messages": [{"role": "robot", "content": "x"}]}),
    ] {
        assert!(Record::from_json(&bad).is_err(), "{bad}");
    }
}

#[test]
fn packing_is_first_fit_decreasing_and_balanced() {
    let rows = first_fit_decreasing(&[5, 9, 3, 7, 2, 4], 10);
    assert_eq!(rows, vec![vec![1], vec![3, 2], vec![0, 5], vec![4]]);
    // An over-long sample gets its own row.
    assert_eq!(first_fit_decreasing(&[12, 1], 10), vec![vec![0], vec![1]]);
    let shares = balance(&[9, 10, 9, 2], 2);
    assert_eq!(shares, vec![vec![1, 3], vec![0, 2]]);
}

/// Stops the run after a given step.
struct StopAfter(u64);

impl sft::SftHooks for StopAfter {
    fn on_step(&mut self, r: &temper_trainer::StepReport) {
        self.0 = if r.step >= self.0 { 0 } else { self.0 };
    }
    fn should_stop(&mut self) -> bool {
        self.0 == 0
    }
}

fn write_jsonl(path: &Path, n: usize) {
    let mut text = String::new();
    for i in 0..n {
        let word: String =
            (0..3 + i % 5).map(|k| char::from(b'a' + ((i * 7 + k * 3) % 26) as u8)).collect();
        let rev: String = word.chars().rev().collect();
        text.push_str(&json!({"messages": [{"role": "user", "content": word}, {"role": "assistant", "content": rev}]}).to_string());
        text.push('\n');
    }
    std::fs::write(path, text).unwrap();
}

fn config(dir: &Path, steps: u64) -> SftConfig {
    let text = format!(
        r#"
        [model.scratch]
        hidden_size = 32
        num_layers = 2
        num_heads = 4
        num_kv_heads = 2
        intermediate_size = 64
        max_positions = 128
        [data]
        train = "{0}/train.jsonl"
        validation = "{0}/train.jsonl"
        validation_size = 8
        [train]
        steps = {steps}
        batch_size = 6
        seq_len = 64
        micro_batch_rows = 1
        [optim]
        lr = 3e-3
        [schedule]
        type = "cosine"
        warmup_steps = 2
        [checkpoint]
        every = 3
        keep = 2
        [eval]
        every = 3
        [output]
        dir = "{0}/run"
        "#,
        dir.display()
    );
    toml::from_str(&text).unwrap()
}

fn losses(dir: &Path) -> Vec<(u64, f64)> {
    std::fs::read_to_string(dir.join("run/metrics.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .filter_map(|v| Some((v["step"].as_u64()?, v.get("loss/mean")?.as_f64()?)))
        .collect()
}

#[test]
fn sft_resumed_from_a_checkpoint_continues_bit_for_bit() {
    let a = tempfile::tempdir().unwrap();
    let b = tempfile::tempdir().unwrap();
    for d in [a.path(), b.path()] {
        write_jsonl(&d.join("train.jsonl"), 20);
    }
    let device = crate::dev();
    let build = |cfg: &SftConfig| cfg.model.build(&device).unwrap();
    // Uninterrupted: 8 steps.
    let ca = config(a.path(), 8);
    sft::prepare_run_dir(&ca.output.dir, false, false).unwrap();
    let sa = sft::run(
        &ca,
        build(&ca),
        &sft::read_records(&ca.data).unwrap(),
        &Single,
        &mut NoHooks,
        false,
    )
    .unwrap();
    // Stopped after step 5 (which checkpoints it); then, as if it had crashed instead, that
    // checkpoint is deleted and a partial metrics line added: the run resumes from step 3 and
    // forgets the metrics of steps 4 and 5.
    let cb = config(b.path(), 8);
    sft::prepare_run_dir(&cb.output.dir, false, false).unwrap();
    sft::run(
        &cb,
        build(&cb),
        &sft::read_records(&cb.data).unwrap(),
        &Single,
        &mut StopAfter(5),
        false,
    )
    .unwrap();
    let ckpts = b.path().join("run/checkpoints");
    assert_eq!(temper_trainer::checkpoint::list(&ckpts).unwrap(), [3, 5]);
    std::fs::remove_dir_all(ckpts.join("step_5")).unwrap();
    std::fs::create_dir_all(ckpts.join("step_6.tmp")).unwrap();
    let metrics = b.path().join("run/metrics.jsonl");
    let mut text = std::fs::read_to_string(&metrics).unwrap();
    text.push_str("{\"step\": 6, \"ro");
    std::fs::write(&metrics, text).unwrap();
    assert_eq!(
        temper_trainer::checkpoint::latest(&b.path().join("run/checkpoints")).unwrap(),
        Some(3)
    );
    assert!(
        sft::prepare_run_dir(&cb.output.dir, false, false).is_err(),
        "a used run dir needs --resume"
    );
    sft::prepare_run_dir(&cb.output.dir, true, false).unwrap();
    let sb = sft::run(
        &cb,
        build(&cb),
        &sft::read_records(&cb.data).unwrap(),
        &Single,
        &mut NoHooks,
        true,
    )
    .unwrap();
    let (la, lb) = (losses(a.path()), losses(b.path()));
    assert_eq!(la.len(), 8);
    assert_eq!(la, lb, "loss curves differ");
    assert_eq!(sa.final_loss.to_bits(), sb.final_loss.to_bits());
    assert!(la[7].1 < la[0].1, "the loss did not fall: {la:?}");
    // The exported model loads as a Hugging Face folder and gives the trained model's logits.
    let p = temper_model::Pretrained::load(&sa.export_dir, DType::F32, &device).unwrap();
    assert!(p.chat_template.is_some());
    let ids = p.tokenizer.encode("<|im_start|>user\nabc<|im_end|>\n").unwrap();
    let from_a = p.model.forward(&ids).unwrap();
    let pb = temper_model::Pretrained::load(&sb.export_dir, DType::F32, &device).unwrap();
    let from_b = pb.model.forward(&ids).unwrap();
    assert_eq!(vals(&from_a), vals(&from_b));
    // Only the newest two checkpoints are kept.
    let kept = temper_trainer::checkpoint::list(&b.path().join("run/checkpoints")).unwrap();
    assert_eq!(kept, [6, 8]);
}

/// Scores every evaluation `toy` reward `step / 10`, as an environment whose model gets better.
struct RisingScore;

impl sft::SftHooks for RisingScore {
    fn evaluate(
        &mut self,
        _policy: &Policy,
        scores: &mut temper_protocol::metrics::EvalScores,
    ) -> Result<(), String> {
        scores.set("toy", "reward/mean", scores.step as f64 / 10.0);
        Ok(())
    }
}

#[test]
fn sft_early_stop_ends_the_run_at_the_first_evaluation_past_the_threshold() {
    let d = tempfile::tempdir().unwrap();
    write_jsonl(&d.path().join("train.jsonl"), 20);
    let device = crate::dev();
    let with_stop = |monitor: &str, threshold: f64, mode: &str| {
        let mut cfg = config(d.path(), 20);
        cfg.early_stop = Some(
            toml::from_str(&format!(
                "monitor = \"{monitor}\"\nthreshold = {threshold}\nmode = \"{mode}\""
            ))
            .unwrap(),
        );
        cfg
    };
    // One run on `coll`, resumed or from a clean run directory.
    let run = |cfg: &SftConfig, coll: &dyn temper_trainer::Collective, resume: bool| {
        let policy = cfg.model.build(&device).unwrap();
        let records = sft::read_records(&cfg.data).unwrap();
        sft::run(cfg, policy, &records, coll, &mut RisingScore, resume)
            .map(|s| (s.steps, s.stopped_early))
            .map_err(|e| e.to_string())
    };
    let fresh = |cfg: &SftConfig| {
        sft::prepare_run_dir(&cfg.output.dir, false, true).unwrap();
        run(cfg, &Single, false)
    };
    let two_ranks = |cfg: &SftConfig| {
        sft::prepare_run_dir(&cfg.output.dir, false, true).unwrap();
        let group = InProcess::group(2);
        std::thread::scope(|sc| {
            let handles: Vec<_> =
                group.iter().map(|coll| sc.spawn(|| run(cfg, coll, false))).collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect::<Vec<_>>()
        })
    };
    // Evaluations at steps 3 (0.3), 6 (0.6): the run ends at step 6 of 20, checkpointed and
    // exported, its last metrics line that evaluation.
    let cfg = with_stop("eval/toy/reward/mean", 0.55, "max");
    assert_eq!(fresh(&cfg), Ok((6, Some(0.6))));
    assert_eq!(losses(d.path()).len(), 6);
    let ckpts = d.path().join("run/checkpoints");
    assert_eq!(temper_trainer::checkpoint::list(&ckpts).unwrap(), [3, 6]);
    assert!(d.path().join("run/final/model.safetensors").exists());
    // Resumed, it stays stopped: no more steps, the same verdict.
    assert_eq!(run(&cfg, &Single, true), Ok((6, Some(0.6))));
    assert_eq!(losses(d.path()).len(), 6);
    // Two ranks: only the lead evaluates the environment, yet both stop at step 6.
    assert_eq!(two_ranks(&cfg), [Ok((6, Some(0.6))), Ok((6, Some(0.6)))]);
    // "min": a validation loss under 100 ends the run at the first evaluation.
    let (steps, loss) = fresh(&with_stop("eval/loss", 100.0, "min")).unwrap();
    assert_eq!(steps, 3);
    assert!(loss.is_some_and(|l| l > 0.0 && l < 100.0), "{loss:?}");
    // Never reached: the run goes to train.steps.
    assert_eq!(fresh(&with_stop("eval/toy/reward/mean", 5.0, "max")), Ok((20, None)));
    // A score the evaluation does not write is an error naming those it does; with two ranks
    // both fail at that evaluation (the other rank does not wait for the lead).
    let cfg = with_stop("eval/toy/reward/mena", 0.5, "max");
    let e = fresh(&cfg).unwrap_err();
    assert!(
        e.contains("eval/toy/reward/mena") && e.contains("eval/toy/reward/mean, eval/loss"),
        "{e}"
    );
    let errors = two_ranks(&cfg);
    assert!(errors[0].as_ref().is_err_and(|e| e.contains("eval/toy/reward/mena")), "{errors:?}");
    assert!(errors[1].as_ref().is_err_and(|e| e.contains("lead rank")), "{errors:?}");
    // Early stop without evaluations during the run, or with a NaN threshold, is refused.
    let mut cfg = with_stop("eval/loss", 1.0, "min");
    cfg.eval.every = 0;
    assert!(cfg.validate().unwrap_err().to_string().contains("eval.every"));
    let mut cfg = with_stop("eval/loss", 1.0, "min");
    cfg.early_stop.as_mut().unwrap().threshold = f64::NAN;
    assert!(cfg.validate().unwrap_err().to_string().contains("early_stop.threshold"));
    let bad_mode = "monitor = \"eval/loss\"\nthreshold = 1\nmode = \"down\"";
    assert!(toml::from_str::<sft::EarlyStopConfig>(bad_mode).is_err());
}

#[test]
fn placement_comes_from_torchrun_mpirun_or_slurm_variables() {
    use std::collections::HashMap;
    use temper_trainer::collective::{Launcher, Placement};
    let read = |pairs: &[(&str, &str)]| {
        let m: HashMap<String, String> =
            pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect();
        Placement::from_vars(move |k| m.get(k).cloned())
    };
    assert_eq!(
        read(&[]).unwrap(),
        Placement {
            rank: 0,
            world_size: 1,
            local_rank: 0,
            master: None,
            launcher: Launcher::Alone
        }
    );
    let p = read(&[
        ("RANK", "3"),
        ("WORLD_SIZE", "4"),
        ("MASTER_ADDR", "n0"),
        ("MASTER_PORT", "29500"),
    ])
    .unwrap();
    assert_eq!((p.rank, p.world_size, p.master), (3, 4, Some(("n0".into(), 29500))));
    let p = read(&[
        ("SLURM_PROCID", "1"),
        ("SLURM_NTASKS", "2"),
        ("MASTER_ADDR", "n0"),
        ("MASTER_PORT", "1"),
    ])
    .unwrap();
    assert_eq!((p.rank, p.world_size, p.launcher), (1, 2, Launcher::Slurm));
    // MPI and Slurm need no rendezvous address: MPI finds its peers itself.
    let p = read(&[("OMPI_COMM_WORLD_RANK", "1"), ("OMPI_COMM_WORLD_SIZE", "2")]).unwrap();
    assert_eq!((p.rank, p.world_size, p.launcher, p.master), (1, 2, Launcher::Mpi, None));
    let p = read(&[("SLURM_PROCID", "3"), ("SLURM_NTASKS", "4")]).unwrap();
    assert_eq!((p.rank, p.world_size, p.launcher, p.local_rank), (3, 4, Launcher::Slurm, 0));
    // The rank among a node's ranks (which GPU it takes) comes with the launcher's pair.
    let p = read(&[("SLURM_PROCID", "3"), ("SLURM_NTASKS", "4"), ("SLURM_LOCALID", "1")]).unwrap();
    assert_eq!(p.local_rank, 1);
    let p = read(&[
        ("OMPI_COMM_WORLD_RANK", "5"),
        ("OMPI_COMM_WORLD_SIZE", "8"),
        ("OMPI_COMM_WORLD_LOCAL_RANK", "1"),
        ("SLURM_LOCALID", "0"),
    ])
    .unwrap();
    assert_eq!((p.rank, p.local_rank), (5, 1));
    // mpirun's variables win over those of the Slurm allocation it runs in.
    let p = read(&[
        ("OMPI_COMM_WORLD_RANK", "0"),
        ("OMPI_COMM_WORLD_SIZE", "2"),
        ("SLURM_PROCID", "0"),
        ("SLURM_NTASKS", "1"),
    ])
    .unwrap();
    assert_eq!((p.world_size, p.launcher), (2, Launcher::Mpi));
    // torchrun's variables win over Slurm's.
    let p =
        read(&[("RANK", "0"), ("WORLD_SIZE", "1"), ("SLURM_PROCID", "5"), ("SLURM_NTASKS", "8")])
            .unwrap();
    assert_eq!((p.rank, p.world_size), (0, 1));
    for bad in [
        vec![("RANK", "4"), ("WORLD_SIZE", "4"), ("MASTER_ADDR", "n0"), ("MASTER_PORT", "1")],
        vec![("RANK", "1")],
        vec![("RANK", "x"), ("WORLD_SIZE", "2")],
        vec![("RANK", "1"), ("WORLD_SIZE", "2")],
        vec![("RANK", "0"), ("WORLD_SIZE", "2"), ("MASTER_ADDR", "n0"), ("MASTER_PORT", "99999")],
        vec![("OMPI_COMM_WORLD_RANK", "2"), ("OMPI_COMM_WORLD_SIZE", "2")],
        vec![("SLURM_PROCID", "0"), ("SLURM_NTASKS", "x")],
        vec![("SLURM_PROCID", "0"), ("SLURM_NTASKS", "2"), ("SLURM_LOCALID", "1")],
        vec![("SLURM_PROCID", "1"), ("SLURM_NTASKS", "2"), ("SLURM_LOCALID", "-1")],
    ] {
        assert!(read(&bad).is_err(), "{bad:?}");
    }
}
