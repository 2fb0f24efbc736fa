//! Mixture of experts (Qwen3-MoE, GLM-4.5): the layer against a naive per-token reference, the
//! gradient through the router, the cache, and the configurations.

use std::collections::BTreeMap;

use candle_core::{DType, Tensor};
use temper_model::{Architecture, Gating, Logits, ModelConfig, Transformer, ops};

use crate::{max_abs_diff, sample};

fn model(
    arch: Architecture,
    seed: u64,
    dtype: DType,
) -> (ModelConfig, BTreeMap<String, Tensor>, Transformer) {
    let cfg = ModelConfig::tiny(arch, 50);
    let init = Transformer::init_random(cfg.clone(), seed, &crate::dev()).unwrap();
    // Larger weights than the init so routing is decisive, and a non-zero correction bias.
    let tensors: BTreeMap<String, Tensor> = init
        .tensors()
        .into_iter()
        .map(|(n, t)| {
            let t = if n.ends_with("e_score_correction_bias") {
                sample(t.dims(), 77).to_dtype(DType::F32).unwrap()
            } else if n.ends_with("norm.weight") {
                t
            } else {
                (t * 20.0).unwrap()
            };
            (n, t)
        })
        .collect();
    let m = Transformer::from_tensors(cfg.clone(), tensors.clone(), dtype, &crate::dev()).unwrap();
    (cfg, tensors, m)
}

fn rows(t: &Tensor) -> Vec<Vec<f64>> {
    t.to_dtype(DType::F64).unwrap().to_vec2().unwrap()
}

fn matvec(w: &[Vec<f64>], x: &[f64]) -> Vec<f64> {
    w.iter().map(|r| r.iter().zip(x).map(|(a, b)| a * b).sum()).collect()
}

fn ffn(t: &BTreeMap<String, Tensor>, prefix: &str, x: &[f64]) -> Vec<f64> {
    let g = matvec(&rows(&t[&format!("{prefix}.gate_proj.weight")]), x);
    let u = matvec(&rows(&t[&format!("{prefix}.up_proj.weight")]), x);
    let h: Vec<f64> = g.iter().zip(&u).map(|(g, u)| g / (1.0 + (-g).exp()) * u).collect();
    matvec(&rows(&t[&format!("{prefix}.down_proj.weight")]), &h)
}

/// One token through a MoE layer, written out as the model cards describe it.
fn naive_moe(cfg: &ModelConfig, t: &BTreeMap<String, Tensor>, layer: usize, x: &[f64]) -> Vec<f64> {
    let m = cfg.moe.as_ref().unwrap();
    let p = |s: &str| format!("model.layers.{layer}.{s}");
    let logits = matvec(&rows(&t[&p("mlp.gate.weight")]), x);
    let probs: Vec<f64> = match m.gating {
        Gating::Softmax => {
            let mx = logits.iter().cloned().fold(f64::MIN, f64::max);
            let z: f64 = logits.iter().map(|l| (l - mx).exp()).sum();
            logits.iter().map(|l| (l - mx).exp() / z).collect()
        }
        Gating::Sigmoid => logits.iter().map(|l| 1.0 / (1.0 + (-l).exp())).collect(),
    };
    let bias: Vec<f64> = match t.get(&p("mlp.gate.e_score_correction_bias")) {
        Some(b) => b.to_dtype(DType::F64).unwrap().to_vec1().unwrap(),
        None => vec![0.0; probs.len()],
    };
    let mut order: Vec<usize> = (0..probs.len()).collect();
    order.sort_by(|&a, &b| (probs[b] + bias[b]).total_cmp(&(probs[a] + bias[a])));
    let top = &order[..m.num_experts_per_tok];
    let mut w: Vec<f64> = top.iter().map(|&e| probs[e]).collect();
    if m.norm_topk_prob {
        let s: f64 = w.iter().sum();
        w.iter_mut().for_each(|v| *v /= s);
    }
    let mut out = vec![0.0; x.len()];
    for (&e, &we) in top.iter().zip(&w) {
        let y = ffn(t, &p(&format!("mlp.experts.{e}")), x);
        for (o, v) in out.iter_mut().zip(y) {
            *o += we * m.routed_scaling_factor * v;
        }
    }
    if m.n_shared_experts > 0 {
        for (o, v) in out.iter_mut().zip(ffn(t, &p("mlp.shared_experts"), x)) {
            *o += v;
        }
    }
    out
}

#[test]
fn moe_layer_matches_a_naive_per_token_reference() {
    for arch in [Architecture::Qwen3Moe, Architecture::Glm4Moe] {
        let (cfg, tensors, m) = model(arch, 1, DType::F64);
        let layer = cfg.num_hidden_layers - 1;
        assert!(cfg.is_moe_layer(layer));
        let x = (sample(&[12, cfg.hidden_size], 5) * 2.0).unwrap();
        let got = rows(&m.layer_mlp(layer, &x).unwrap());
        for (i, xr) in rows(&x).iter().enumerate() {
            let want = naive_moe(&cfg, &tensors, layer, xr);
            let d = want.iter().zip(&got[i]).map(|(a, b)| (a - b).abs()).fold(0.0, f64::max);
            assert!(d < 1e-9, "{arch:?} token {i}: {d}");
        }
        // The first GLM layer is dense, as first_k_dense_replace says.
        if arch == Architecture::Glm4Moe {
            assert!(!cfg.is_moe_layer(0));
            let y = rows(&m.layer_mlp(0, &x).unwrap());
            let want = ffn(&tensors, "model.layers.0.mlp", &rows(&x)[0]);
            assert!(want.iter().zip(&y[0]).all(|(a, b)| (a - b).abs() < 1e-9));
        }
    }
}

#[test]
fn moe_gradients_match_finite_differences_and_reach_the_router() {
    for arch in [Architecture::Qwen3Moe, Architecture::Glm4Moe] {
        let (cfg, tensors, m) = model(arch, 2, DType::F64);
        let toks: Vec<u32> = (0..10).map(|i| (i * 7 + 3) % 50).collect();
        let loss = |m: &Transformer| {
            let logits = m.forward(&toks[..9]).unwrap();
            let targets = Tensor::new(&toks[1..], &crate::dev()).unwrap();
            ops::token_logprobs(&logits, &targets).unwrap().mean_all().unwrap()
        };
        let grads = loss(&m).backward().unwrap();
        let layer = cfg.num_hidden_layers - 1;
        // The router, and the experts some token was sent to (the others rightly get nothing).
        let m_cfg = cfg.moe.as_ref().unwrap();
        let used: Vec<usize> = (0..m_cfg.num_experts)
            .filter(|e| {
                let name = format!("model.layers.{layer}.mlp.experts.{e}.up_proj.weight");
                let var = &m.params().iter().find(|(n, _)| *n == name).unwrap().1;
                grads.get(var.as_tensor()).is_some()
            })
            .collect();
        assert!(used.len() >= m_cfg.num_experts_per_tok, "{arch:?}: experts used {used:?}");
        let mut names = vec![format!("model.layers.{layer}.mlp.gate.weight")];
        names.push(format!("model.layers.{layer}.mlp.experts.{}.up_proj.weight", used[0]));
        names.push(format!("model.layers.{layer}.mlp.experts.{}.down_proj.weight", used[1]));
        if m_cfg.n_shared_experts > 0 {
            names.push(format!("model.layers.{layer}.mlp.shared_experts.gate_proj.weight"));
        }
        for name in &names {
            let var = &m.params().iter().find(|(n, _)| n == name).unwrap().1;
            let g = ops::to_f64_vec(grads.get(var.as_tensor()).unwrap()).unwrap();
            assert!(g.iter().any(|v| *v != 0.0), "{arch:?}: no gradient for {name}");
            let base =
                ops::to_f64_vec(&tensors[name.as_str()].to_dtype(DType::F64).unwrap()).unwrap();
            let mut idx: Vec<usize> = (0..base.len()).collect();
            idx.sort_by(|&a, &b| g[b].abs().total_cmp(&g[a].abs()));
            for &i in idx.iter().take(4) {
                let at = |delta: f64| {
                    let mut v = base.clone();
                    v[i] += delta;
                    let mut ts = tensors.clone();
                    ts.insert(
                        name.clone(),
                        Tensor::from_vec(v, tensors[name.as_str()].dims(), &crate::dev()).unwrap(),
                    );
                    let m = Transformer::from_tensors(cfg.clone(), ts, DType::F64, &crate::dev())
                        .unwrap();
                    loss(&m).to_scalar::<f64>().unwrap()
                };
                let numeric = (at(1e-6) - at(-1e-6)) / 2e-6;
                assert!(
                    (numeric - g[i]).abs() / (1e-3 + numeric.abs()) < 1e-4,
                    "{arch:?} {name}[{i}]: {} vs {numeric}",
                    g[i]
                );
            }
        }
        // The correction bias only chooses experts: it gets no gradient.
        if arch == Architecture::Glm4Moe {
            let name = format!("model.layers.{layer}.mlp.gate.e_score_correction_bias");
            let var = &m.params().iter().find(|(n, _)| *n == name).unwrap().1;
            let g = grads.get(var.as_tensor()).map(|g| ops::to_f64_vec(g).unwrap());
            assert!(g.is_none_or(|g| g.iter().all(|v| *v == 0.0)));
        }
    }
}

#[test]
fn moe_cached_decode_equals_full_forward() {
    for arch in [Architecture::Qwen3Moe, Architecture::Glm4Moe] {
        let (_, _, m) = model(arch, 3, DType::F32);
        let toks: Vec<u32> = (0..20).map(|i| (i * 13 + 1) % 50).collect();
        let full = m.forward(&toks).unwrap();
        // The same weights in f64: both f32 paths are held to it, since each rounds its own way
        // (the cached step attends in one fused pass, the full forward in batched products) and
        // logits up to ~9 carry ~1e-6 of rounding per operation.
        let truth =
            model(arch, 3, DType::F64).2.forward(&toks).unwrap().to_dtype(DType::F32).unwrap();
        let mut cache = m.new_cache();
        m.step(&[&toks[..5]], &mut [&mut cache], Logits::All).unwrap();
        for p in 5..toks.len() {
            let out = m.step(&[&toks[p..p + 1]], &mut [&mut cache], Logits::Last).unwrap();
            let exact = truth.get(p).unwrap();
            let step = max_abs_diff(&out[0], &exact);
            let whole = max_abs_diff(&full.get(p).unwrap(), &exact);
            assert!(step < 1.5e-5 && whole < 1.5e-5, "{arch:?} position {p}: {step}, {whole}");
            let d = max_abs_diff(&out[0], &full.get(p).unwrap());
            assert!(d < 2e-5, "{arch:?} position {p}: {d}");
        }
    }
}

#[test]
fn moe_configs_read_and_write() {
    let qwen = r#"{"model_type": "qwen3_moe", "vocab_size": 151936, "hidden_size": 2048, "intermediate_size": 6144,
        "num_hidden_layers": 48, "num_attention_heads": 32, "num_key_value_heads": 4, "head_dim": 128,
        "num_experts": 128, "num_experts_per_tok": 8, "moe_intermediate_size": 768, "norm_topk_prob": true,
        "decoder_sparse_step": 1, "mlp_only_layers": [], "rope_theta": 1000000, "rms_norm_eps": 1e-6}"#;
    let c = ModelConfig::from_hf_json(qwen, "config.json").unwrap();
    let m = c.moe.as_ref().unwrap();
    assert_eq!((m.num_experts, m.num_experts_per_tok, m.gating), (128, 8, Gating::Softmax));
    assert!(c.qk_norm() && (0..48).all(|i| c.is_moe_layer(i)));
    // GLM-4.5-Air's shape.
    let glm = r#"{"model_type": "glm4_moe", "vocab_size": 151552, "hidden_size": 4096, "intermediate_size": 10944,
        "num_hidden_layers": 46, "num_attention_heads": 96, "num_key_value_heads": 8, "head_dim": 128,
        "partial_rotary_factor": 0.5, "attention_bias": true, "use_qk_norm": false, "n_routed_experts": 128,
        "n_shared_experts": 1, "num_experts_per_tok": 8, "moe_intermediate_size": 1408, "first_k_dense_replace": 1,
        "norm_topk_prob": true, "routed_scaling_factor": 1.0, "n_group": 1, "topk_group": 1, "rope_theta": 1000000,
        "rms_norm_eps": 1e-5, "tie_word_embeddings": false}"#;
    let g = ModelConfig::from_hf_json(glm, "config.json").unwrap();
    let m = g.moe.as_ref().unwrap();
    assert_eq!((m.gating, m.n_shared_experts, g.rotary_dim()), (Gating::Sigmoid, 1, 64));
    assert!(!g.is_moe_layer(0) && g.is_moe_layer(1) && !g.qk_norm());
    for c in [c, g] {
        assert_eq!(ModelConfig::from_hf_json(&c.to_hf_json().to_string(), "x").unwrap(), c);
    }
    let bad = glm.replace(r#""n_group": 1"#, r#""n_group": 8"#);
    assert!(ModelConfig::from_hf_json(&bad, "c.json").unwrap_err().to_string().contains("n_group"));
}
