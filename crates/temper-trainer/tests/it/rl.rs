//! The RL trainer role fed through the run directory.

use candle_core::{DType, Tensor};
use temper_protocol::{SCHEMA_VERSION, TrainBatch, TrainSample};
use temper_trainer::rl::{self, NoRlHooks, RlTrainerConfig};
use temper_trainer::{Policy, Single};

use crate::vals;

/// What the orchestrator does: the batch file, then the folder's STABLE marker.
fn write_batch(run: &std::path::Path, batch: &TrainBatch) {
    let path = temper_protocol::run_dir::batch_file(run, batch.step, batch.rank);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(&path, serde_json::to_vec(batch).unwrap()).unwrap();
}

fn config(dir: &std::path::Path) -> RlTrainerConfig {
    toml::from_str(&format!(
        r#"
        [model.scratch]
        hidden_size = 32
        num_layers = 2
        num_heads = 4
        num_kv_heads = 2
        intermediate_size = 64
        max_positions = 128
        [optim]
        lr = 3e-3
        weight_decay = 0.0
        [trainer]
        steps = 3
        keep_weights = 2
        checkpoint_every = 2
        batch_timeout_s = 60
        [output]
        dir = "{}"
        "#,
        dir.display()
    ))
    .unwrap()
}

/// A sample whose sampling logprobs are `policy`'s own (on-policy), the completion trained on.
fn sample(policy: &Policy, prompt: &str, completion: &str, advantage: f32) -> TrainSample {
    let p = policy.tokenizer.encode(prompt).unwrap();
    let c = policy.tokenizer.encode(completion).unwrap();
    let ids: Vec<u32> = p.iter().chain(&c).copied().collect();
    let n = ids.len();
    let logits = policy.model.forward(&ids[..n - 1]).unwrap();
    let t = Tensor::from_vec(ids[1..].to_vec(), n - 1, &crate::dev()).unwrap();
    let lp = vals(&temper_model::ops::token_logprobs(&logits, &t).unwrap());
    let mask: Vec<u8> = (0..n).map(|i| u8::from(i >= p.len())).collect();
    let logprobs: Vec<f32> =
        (0..n).map(|i| if mask[i] == 1 { lp[i - 1] as f32 } else { 0.0 }).collect();
    TrainSample {
        token_ids: ids,
        loss_mask: mask,
        sampling_logprobs: logprobs,
        advantage,
        temperature: 1.0,
        policy_version: 0,
    }
}

fn completion_logprob(model: &temper_model::Transformer, s: &TrainSample) -> f64 {
    let n = s.token_ids.len();
    let logits = model.forward(&s.token_ids[..n - 1]).unwrap();
    let t = Tensor::from_vec(s.token_ids[1..].to_vec(), n - 1, &crate::dev()).unwrap();
    let lp = vals(&temper_model::ops::token_logprobs(&logits, &t).unwrap());
    (1..n).filter(|&i| s.loss_mask[i] == 1).map(|i| lp[i - 1]).sum()
}

#[test]
fn trainer_role_consumes_batches_and_publishes_weights_in_order() {
    let tmp = tempfile::tempdir().unwrap();
    let run_dir = tmp.path().join("run");
    let cfg = config(&run_dir);
    let policy = cfg.model.build(&crate::dev()).unwrap();
    let good = sample(&policy, "<|im_start|>user\nhi<|im_end|>\n", "hello!", 1.0);
    let bad = sample(&policy, "<|im_start|>user\nhi<|im_end|>\n", "go away", -1.0);
    let before =
        (completion_logprob(&policy.model, &good), completion_logprob(&policy.model, &bad));
    for step in 1..=3 {
        let batch = TrainBatch {
            schema_version: SCHEMA_VERSION,
            step,
            rank: 0,
            world_size: 1,
            total_loss_tokens: 0,
            micro_batches: vec![vec![good.clone(), bad.clone()]],
        };
        let total = batch.loss_tokens();
        let batch = TrainBatch { total_loss_tokens: total, ..batch };
        write_batch(&run_dir, &batch);
        rl::mark_stable(&rl::batch_dir(&run_dir, step)).unwrap();
    }
    let summary = rl::run(&cfg, policy, &Single, &mut NoRlHooks, false).unwrap();
    assert_eq!(summary.steps, 3);
    // The newest two weight folders are kept, each complete.
    assert!(!rl::weights_dir(&run_dir, 1).exists());
    for step in [2, 3] {
        assert!(rl::weights_dir(&run_dir, step).join(rl::STABLE).is_file());
    }
    let lines: Vec<serde_json::Value> = std::fs::read_to_string(run_dir.join("metrics.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 3);
    // Step 1 trains on its own samples: the trainer recomputes the sampler's logprobs.
    let kl = lines[0]["mismatch_kl/mean"].as_f64().unwrap();
    assert!(kl.abs() < 1e-6, "on-policy mismatch KL {kl}");
    assert!(lines[2]["mismatch_kl/mean"].as_f64().unwrap() > kl, "later steps are off-policy");
    // The published weights moved probability toward the positive advantage and away from the
    // negative one.
    let after =
        temper_model::weights::load_model(&rl::weights_dir(&run_dir, 3), DType::F32, &crate::dev())
            .unwrap();
    let (g, b) = (completion_logprob(&after, &good), completion_logprob(&after, &bad));
    assert!(g > before.0 && b < before.1, "good {} -> {g}, bad {} -> {b}", before.0, before.1);
    assert_eq!(
        temper_trainer::checkpoint::list(&run_dir.join("checkpoints/trainer")).unwrap(),
        [2, 3]
    );
}

#[test]
fn a_malformed_batch_is_refused_naming_the_field() {
    let tmp = tempfile::tempdir().unwrap();
    let run_dir = tmp.path().join("run");
    let cfg = config(&run_dir);
    let policy = cfg.model.build(&crate::dev()).unwrap();
    let mut s = sample(&policy, "ab", "cd", 1.0);
    s.sampling_logprobs.pop();
    let batch = TrainBatch {
        schema_version: SCHEMA_VERSION,
        step: 1,
        rank: 0,
        world_size: 1,
        total_loss_tokens: 2,
        micro_batches: vec![vec![s]],
    };
    write_batch(&run_dir, &batch);
    rl::mark_stable(&rl::batch_dir(&run_dir, 1)).unwrap();
    let err = rl::run(&cfg, policy, &Single, &mut NoRlHooks, false).unwrap_err().to_string();
    assert!(err.contains("micro_batches[0][0]") && err.contains("logprobs"), "{err}");
}
