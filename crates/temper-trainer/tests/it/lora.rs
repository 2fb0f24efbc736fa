//! LoRA adapters: start at the base model, gradients against finite differences, only adapters
//! train, PEFT-layout files.

use std::collections::BTreeMap;

use candle_core::{DType, Tensor};
use temper_model::{Architecture, ModelConfig, Tokenizer, Transformer};
use temper_trainer::data::Sample;
use temper_trainer::grad::loss_and_grads_for;
use temper_trainer::lora::{Lora, LoraConfig};
use temper_trainer::loss::sft_loss;
use temper_trainer::optim::{OptimConfig, ScheduleConfig};
use temper_trainer::{Policy, Single, Trainer};

use crate::{scalar, vals};

fn model(dtype: DType) -> Transformer {
    let m = Transformer::init_random(ModelConfig::tiny(Architecture::Qwen3, 40), 5, &crate::dev())
        .unwrap();
    Transformer::from_tensors(m.config().clone(), m.tensors(), dtype, &crate::dev()).unwrap()
}

fn cfg() -> LoraConfig {
    LoraConfig {
        rank: 2,
        alpha: 4.0,
        target_modules: vec!["q_proj".into(), "down_proj".into()],
        seed: 1,
    }
}

const SEQ: [u32; 7] = [3, 9, 1, 22, 7, 7, 30];

fn loss_of(m: &Transformer) -> candle_core::Result<Tensor> {
    let logits =
        m.forward_packed(&[&SEQ[..6]]).map_err(|e| candle_core::Error::Msg(e.to_string()))?;
    let ids = Tensor::from_vec(SEQ[1..].to_vec(), 6, &crate::dev())?;
    let lp = temper_model::ops::token_logprobs(&logits, &ids)?;
    sft_loss(&lp, &[true; 6], 6.0)
}

#[test]
fn adapters_start_at_the_base_model_and_target_only_named_modules() {
    let base = model(DType::F32);
    let lora = Lora::new(&base, cfg()).unwrap();
    // Two layers × (q_proj, down_proj) × (A, B).
    assert_eq!(lora.params().len(), 8);
    assert_eq!(
        lora.params()[0].0,
        "base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight"
    );
    let a = &lora.params()[0].1;
    assert_eq!(a.dims(), [2, 32]);
    let same = (base.forward(&SEQ).unwrap() - lora.apply(&base).unwrap().forward(&SEQ).unwrap())
        .unwrap()
        .abs()
        .unwrap()
        .max_all()
        .unwrap()
        .to_scalar::<f32>()
        .unwrap();
    assert_eq!(same, 0.0);
    let none = LoraConfig { target_modules: vec!["nope".into()], ..cfg() };
    assert!(Lora::new(&base, none).unwrap_err().to_string().contains("nope"));
}

#[test]
fn adapter_gradients_match_finite_differences() {
    let base = model(DType::F64);
    let lora = Lora::new(&base, cfg()).unwrap();
    // B starts at zero (so A's gradient is zero); give it values first.
    for (i, (name, v)) in lora.params().iter().enumerate() {
        if name.ends_with("lora_B.weight") {
            let t =
                temper_model::init::normal(v.dims(), 0.3, 100 + i as u64, &crate::dev()).unwrap();
            v.set(&t.to_dtype(DType::F64).unwrap()).unwrap();
        }
    }
    let adapted = lora.apply(&base).unwrap();
    let (grads, ()) = loss_and_grads_for(&adapted, lora.params(), &[&SEQ[..6]], false, |logits| {
        let ids = Tensor::from_vec(SEQ[1..].to_vec(), 6, &crate::dev())?;
        let lp = temper_model::ops::token_logprobs(logits, &ids)?;
        Ok((sft_loss(&lp, &[true; 6], 6.0)?, ()))
    })
    .unwrap();
    let eps = 1e-6;
    for (k, ((name, var), g)) in lora.params().iter().zip(&grads).enumerate() {
        let g = vals(g);
        assert!(g.iter().any(|x| x.abs() > 1e-8), "{name}: zero gradient");
        let flat = vals(var.as_tensor());
        for idx in [0, flat.len() / 2, flat.len() - 1] {
            let at = |delta: f64| {
                let mut v = flat.clone();
                v[idx] += delta;
                var.set(&Tensor::from_vec(v, var.shape(), &crate::dev()).unwrap()).unwrap();
                let l = scalar(&loss_of(&lora.apply(&base).unwrap()).unwrap());
                var.set(&Tensor::from_vec(flat.clone(), var.shape(), &crate::dev()).unwrap())
                    .unwrap();
                l
            };
            let fd = (at(eps) - at(-eps)) / (2.0 * eps);
            assert!((fd - g[idx]).abs() < 1e-6, "param {k} {name}[{idx}]: fd {fd} vs {}", g[idx]);
        }
    }
}

#[test]
fn only_adapters_train_and_they_save_in_peft_layout() {
    let base = model(DType::F32);
    let before: BTreeMap<String, Vec<f64>> =
        base.params().iter().map(|(n, v)| (n.clone(), vals(v.as_tensor()))).collect();
    let policy = Policy { model: base, tokenizer: Tokenizer::bytes(&[]), template: None };
    let single = Single;
    let optim = OptimConfig { lr: 1e-2, ..OptimConfig::default() };
    let trainer =
        Trainer::new(policy, optim, ScheduleConfig::default(), 20, &single, false).unwrap();
    let lora = Lora::new(&trainer.policy.model, cfg()).unwrap();
    let mut trainer = trainer.with_lora(lora).unwrap();
    let sample = Sample { ids: SEQ.to_vec(), mask: (0..7).map(|i| i > 0).collect() };
    let mb = vec![vec![&sample]];
    let first = trainer.sft_step(&mb, 6.0).unwrap().loss;
    let mut last = first;
    for _ in 0..15 {
        last = trainer.sft_step(&mb, 6.0).unwrap().loss;
    }
    assert!(last < first - 0.1, "LoRA training did not lower the loss: {first} -> {last}");
    for (n, v) in trainer.policy.model.params() {
        assert_eq!(vals(v.as_tensor()), before[n], "base weight {n} changed");
    }
    // Export: merged model + PEFT adapter; the merged q_proj is W + (alpha/r)·B·A of the saved files.
    let dir = tempfile::tempdir().unwrap();
    trainer.export(dir.path()).unwrap();
    let config: serde_json::Value = serde_json::from_slice(
        &std::fs::read(dir.path().join("adapter/adapter_config.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(
        (config["peft_type"].as_str(), config["r"].as_u64(), config["lora_alpha"].as_f64()),
        (Some("LORA"), Some(2), Some(4.0))
    );
    let adapter = candle_core::safetensors::load(
        dir.path().join("adapter/adapter_model.safetensors"),
        &crate::dev(),
    )
    .unwrap();
    assert_eq!(adapter.len(), 8);
    let key = "base_model.model.model.layers.1.self_attn.q_proj";
    let a = &adapter[&format!("{key}.lora_A.weight")];
    let b = &adapter[&format!("{key}.lora_B.weight")];
    let w = trainer.policy.model.tensors()["model.layers.1.self_attn.q_proj.weight"].clone();
    let expect = (w + (b.matmul(a).unwrap() * 2.0).unwrap()).unwrap();
    let merged = temper_model::weights::load_model(dir.path(), DType::F32, &crate::dev()).unwrap();
    let got = merged.tensors()["model.layers.1.self_attn.q_proj.weight"].clone();
    let diff = vals(&(got - &expect).unwrap()).iter().fold(0f64, |m, x| m.max(x.abs()));
    assert!(diff < 1e-6, "merged weight differs by {diff}");
    assert!(vals(b).iter().any(|x| x.abs() > 1e-4), "B did not move");
}
