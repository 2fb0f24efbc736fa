//! The transformer: gradients reach every weight and match finite differences; decoding with the
//! KV cache gives the logits of a full forward.

use std::collections::BTreeMap;

use candle_core::{DType, Tensor, Var};
use temper_model::{Architecture, KvCache, Logits, ModelConfig, Transformer, ops};

use crate::max_abs_diff;

/// Every variant the forward pass has: plain Llama; Qwen3 (QK-norm, tied embeddings) with
/// q/k/v biases, partial rotary and Llama 3 frequency scaling.
fn configs() -> Vec<ModelConfig> {
    let llama = ModelConfig::tiny(Architecture::Llama, 50);
    let mut qwen = ModelConfig::tiny(Architecture::Qwen3, 50);
    qwen.attention_bias = true;
    qwen.partial_rotary_factor = 0.5;
    qwen.rope_scaling = Some(ops::RopeScaling::Llama3 {
        factor: 8.0,
        high_freq_factor: 4.0,
        low_freq_factor: 1.0,
        original_max_position_embeddings: 16.0,
    });
    vec![llama, qwen]
}

fn tokens(n: usize, seed: u32, vocab: u32) -> Vec<u32> {
    (0..n as u32).map(|i| (i.wrapping_mul(7919).wrapping_add(seed * 31)) % vocab).collect()
}

/// Mean logprob of each next token: the quantity SFT and RL losses are built on.
fn mean_logprob(model: &Transformer, toks: &[u32]) -> Tensor {
    let logits = model.forward(&toks[..toks.len() - 1]).unwrap();
    let targets = Tensor::new(&toks[1..], model.device()).unwrap();
    ops::token_logprobs(&logits, &targets).unwrap().mean_all().unwrap()
}

#[test]
fn every_parameter_gets_a_nonzero_gradient() {
    for cfg in configs() {
        let arch = cfg.architecture;
        let model = Transformer::init_random(cfg, 1, &crate::dev()).unwrap();
        let grads = mean_logprob(&model, &tokens(12, 1, 50)).backward().unwrap();
        for (name, var) in model.params() {
            let g = grads
                .get(var.as_tensor())
                .unwrap_or_else(|| panic!("{arch:?}: no gradient for {name}"));
            let norm = g.sqr().unwrap().sum_all().unwrap().to_scalar::<f32>().unwrap();
            assert!(norm > 0.0 && norm.is_finite(), "{arch:?}: gradient of {name} has norm {norm}");
        }
    }
}

#[test]
fn model_gradient_matches_finite_differences() {
    for cfg in configs() {
        let arch = cfg.architecture;
        let f32_model = Transformer::init_random(cfg.clone(), 2, &crate::dev()).unwrap();
        let mut tensors: BTreeMap<String, Tensor> = f32_model.tensors();
        // Larger weights than the 0.02 init, so the function is far from linear.
        for (name, t) in tensors.iter_mut() {
            if !name.ends_with("norm.weight") {
                *t = (t.clone() * 10.0).unwrap();
            }
        }
        let toks = tokens(9, 3, 50);
        let model =
            Transformer::from_tensors(cfg.clone(), tensors.clone(), DType::F64, &crate::dev())
                .unwrap();
        let grads = mean_logprob(&model, &toks).backward().unwrap();
        // A few entries of one weight of each kind.
        let names = [
            "model.embed_tokens.weight",
            "model.layers.0.input_layernorm.weight",
            "model.layers.0.self_attn.q_proj.weight",
            "model.layers.0.self_attn.k_proj.weight",
            "model.layers.1.self_attn.v_proj.weight",
            "model.layers.1.self_attn.o_proj.weight",
            "model.layers.1.mlp.gate_proj.weight",
            "model.layers.0.mlp.down_proj.weight",
            "model.norm.weight",
        ];
        let extra: &[&str] = match arch {
            Architecture::Qwen3 => {
                &["model.layers.0.self_attn.q_norm.weight", "model.layers.1.self_attn.k_proj.bias"]
            }
            _ => &["lm_head.weight"],
        };
        for name in names.iter().chain(extra) {
            let var = &model.params().iter().find(|(n, _)| n == name).unwrap().1;
            let g = ops::to_f64_vec(grads.get(var.as_tensor()).unwrap()).unwrap();
            let base = ops::to_f64_vec(&tensors[*name].to_dtype(DType::F64).unwrap()).unwrap();
            let shape = tensors[*name].dims().to_vec();
            // The entries with the largest gradients, and a spread of others.
            let mut idx: Vec<usize> = (0..base.len()).collect();
            idx.sort_by(|&a, &b| g[b].abs().total_cmp(&g[a].abs()));
            let picks: Vec<usize> =
                idx.iter().take(3).chain(idx.iter().step_by(idx.len() / 3 + 1)).copied().collect();
            for i in picks {
                let at = |delta: f64| {
                    let mut v = base.clone();
                    v[i] += delta;
                    let mut ts = tensors.clone();
                    ts.insert(
                        name.to_string(),
                        Tensor::from_vec(v, shape.as_slice(), &crate::dev()).unwrap(),
                    );
                    let m = Transformer::from_tensors(cfg.clone(), ts, DType::F64, &crate::dev())
                        .unwrap();
                    mean_logprob(&m, &toks).to_scalar::<f64>().unwrap()
                };
                let eps = 1e-5;
                let numeric = (at(eps) - at(-eps)) / (2.0 * eps);
                let err = (numeric - g[i]).abs() / (1e-3 + numeric.abs());
                assert!(
                    err < 1e-4,
                    "{arch:?} {name}[{i}]: autograd {} vs finite difference {numeric}",
                    g[i]
                );
            }
        }
    }
}

/// A prefill, then one token at a time, gives the full forward's logits: in f32 on the CPU the
/// cache is blocked (150 positions cross two block boundaries, one inside the prefill), in f64 it
/// is one buffer that grows past its first 16 rows.
#[test]
fn cached_decode_equals_full_forward() {
    for cfg in configs() {
        let arch = cfg.architecture;
        let f32_model = Transformer::init_random(cfg.clone(), 3, &crate::dev()).unwrap();
        let f64_model =
            Transformer::from_tensors(cfg, f32_model.tensors(), DType::F64, &crate::dev()).unwrap();
        for (model, len, prefill) in [(&f32_model, 150, 70), (&f64_model, 40, 7)] {
            let toks = tokens(len, 5, 50);
            let full = model.forward(&toks).unwrap();
            let mut cache = model.new_cache();
            let blocked = model.dtype() == DType::F32 && crate::dev().is_cpu();
            assert_eq!(cache.is_blocked(), blocked);
            let pre = model.step(&[&toks[..prefill]], &mut [&mut cache], Logits::All).unwrap();
            let d = max_abs_diff(&pre[0], &full.narrow(0, 0, prefill).unwrap());
            assert!(d < 1e-5, "{arch:?}: prefill differs by {d}");
            for p in prefill..toks.len() {
                let out = model.step(&[&toks[p..p + 1]], &mut [&mut cache], Logits::Last).unwrap();
                let d = max_abs_diff(&out[0], &full.get(p).unwrap());
                assert!(d < 1e-5, "{arch:?} {:?}: position {p} differs by {d}", model.dtype());
            }
            assert_eq!(cache.len(), toks.len());
            if blocked {
                // Grown block by block: room for the positions held and less than a block more.
                let block = temper_model::cache::BLOCK;
                assert_eq!(cache.capacity(), len.div_ceil(block) * block);
            }
        }
    }
}

/// A frozen f32 model computes with weights packed for inference: its prefill (40 rows), ragged
/// decode steps (9 and 1 rows: every tile shape) and a step past the packed kernel's rows give
/// the trainable model's logits.
#[test]
fn packed_weights_give_the_logits_of_the_trainable_model() {
    for cfg in configs() {
        let arch = cfg.architecture;
        let trainable = Transformer::init_random(cfg.clone(), 6, &crate::dev()).unwrap();
        let frozen = Transformer::init_random(cfg, 6, &crate::dev()).unwrap().frozen().unwrap();
        assert!(frozen.uses_packed_weights() && !trainable.uses_packed_weights());
        let seqs: Vec<Vec<u32>> = (0..9).map(|i| tokens(42 + i, i as u32, 50)).collect();
        let run = |model: &Transformer| {
            let mut caches: Vec<KvCache> = seqs.iter().map(|_| model.new_cache()).collect();
            let mut out = Vec::new();
            for (s, c) in seqs.iter().zip(&mut caches) {
                out.extend(model.step(&[&s[..40]], &mut [c], Logits::All).unwrap());
            }
            let steps: Vec<&[u32]> = seqs.iter().map(|s| &s[40..41]).collect();
            let mut refs: Vec<&mut KvCache> = caches.iter_mut().collect();
            out.extend(model.step(&steps, &mut refs, Logits::Last).unwrap());
            out.extend(model.step(&[&seqs[8][41..42]], &mut refs[8..], Logits::Last).unwrap());
            let long = tokens(300, 9, 50);
            out.extend(model.step(&[&long], &mut [&mut model.new_cache()], Logits::All).unwrap());
            out
        };
        let (a, b) = (run(&trainable), run(&frozen));
        assert_eq!(a.len(), b.len());
        for (i, (x, y)) in a.iter().zip(&b).enumerate() {
            let d = max_abs_diff(x, y);
            assert!(d < 1e-5, "{arch:?}: output {i} differs by {d}");
        }
    }
}

#[test]
fn ragged_batch_matches_each_sequence_alone() {
    let model = Transformer::init_random(configs().remove(1), 4, &crate::dev()).unwrap();
    let (a, b, c) = (tokens(11, 1, 50), tokens(3, 2, 50), tokens(17, 3, 50));
    let (fa, fb, fc) =
        (model.forward(&a).unwrap(), model.forward(&b).unwrap(), model.forward(&c).unwrap());
    let (mut ca, mut cb, mut cc) = (model.new_cache(), model.new_cache(), model.new_cache());
    // Sequence a is already decoding, b and c arrive with their prompts (continuous batching).
    model.step(&[&a[..10]], &mut [&mut ca], Logits::Last).unwrap();
    let out = model
        .step(&[&a[10..], &b, &c[..16]], &mut [&mut ca, &mut cb, &mut cc], Logits::All)
        .unwrap();
    assert!(max_abs_diff(&out[0], &fa.narrow(0, 10, 1).unwrap()) < 1e-5);
    assert!(max_abs_diff(&out[1], &fb) < 1e-5);
    assert!(max_abs_diff(&out[2], &fc.narrow(0, 0, 16).unwrap()) < 1e-5);
    let last = model.step(&[&c[16..]], &mut [&mut cc], Logits::Last).unwrap();
    assert!(max_abs_diff(&last[0], &fc.get(16).unwrap()) < 1e-5);
}

/// Forks continue independently of the cache they came from, and of each other: in f32 on the
/// CPU they share the prompt's blocks (70 positions: one full block, one partly filled), and a
/// side that writes into a shared block copies it first.
#[test]
fn forked_caches_continue_independently() {
    let model = Transformer::init_random(configs().remove(0), 5, &crate::dev()).unwrap();
    let prompt = tokens(70, 9, 50);
    let mut base = model.new_cache();
    model.step(&[&prompt], &mut [&mut base], Logits::Last).unwrap();
    let mut fork = base.fork().unwrap();
    let blocked = base.is_blocked();
    if blocked {
        assert_eq!((base.shared_blocks(), fork.shared_blocks()), (2, 2));
    }
    let (x, y) = (vec![1u32, 2, 3], vec![40u32, 41, 42]);
    for i in 0..3 {
        model
            .step(&[&x[i..i + 1], &y[i..i + 1]], &mut [&mut base, &mut fork], Logits::Last)
            .unwrap();
    }
    if blocked {
        // The partly filled block was copied once written; the full one is still held once.
        assert_eq!((base.shared_blocks(), fork.shared_blocks()), (1, 1));
    }
    for (cache, cont) in [(&mut base, &x), (&mut fork, &y)] {
        let seq: Vec<u32> = prompt.iter().chain(cont.iter()).copied().chain([7]).collect();
        let full = model.forward(&seq).unwrap();
        let out = model.step(&[&[7]], &mut [cache], Logits::Last).unwrap();
        assert!(max_abs_diff(&out[0], &full.get(seq.len() - 1).unwrap()) < 1e-5);
    }
    // Truncating a fork back into the shared full block and continuing gives the prompt's
    // continuation from there, and leaves the cache it came from as it was.
    let mut t: KvCache = base.fork().unwrap();
    t.truncate(30);
    let seq: Vec<u32> = prompt[..30].iter().copied().chain([9]).collect();
    let out = model.step(&[&[9]], &mut [&mut t], Logits::Last).unwrap();
    assert!(max_abs_diff(&out[0], &model.forward(&seq).unwrap().get(30).unwrap()) < 1e-5);
    let seq: Vec<u32> = prompt.iter().chain(&x).copied().chain([7, 8]).collect();
    let out = model.step(&[&[8]], &mut [&mut base], Logits::Last).unwrap();
    let want = model.forward(&seq).unwrap().get(seq.len() - 1).unwrap();
    assert!(max_abs_diff(&out[0], &want) < 1e-5);
}

#[test]
fn bad_inputs_are_errors_not_panics() {
    let model = Transformer::init_random(configs().remove(0), 6, &crate::dev()).unwrap();
    let err = model.forward(&[1, 50]).unwrap_err().to_string();
    assert!(err.contains("token id 50") && err.contains("50"), "{err}");
    let long = vec![1u32; 513];
    let err = model.forward(&long).unwrap_err().to_string();
    assert!(err.contains("513") && err.contains("512"), "{err}");
    let mut cache = model.new_cache();
    assert!(model.step(&[&[]], &mut [&mut cache], Logits::Last).is_err());
    assert!(model.step(&[&[1], &[2]], &mut [&mut cache], Logits::Last).is_err());
}

#[test]
fn init_is_deterministic_per_seed() {
    let cfg = configs().remove(0);
    let a = Transformer::init_random(cfg.clone(), 7, &crate::dev()).unwrap();
    let b = Transformer::init_random(cfg.clone(), 7, &crate::dev()).unwrap();
    let c = Transformer::init_random(cfg, 8, &crate::dev()).unwrap();
    let name = "model.layers.1.mlp.up_proj.weight";
    let (ta, tb, tc) = (&a.tensors()[name], &b.tensors()[name], &c.tensors()[name]);
    assert_eq!(max_abs_diff(ta, tb), 0.0);
    assert!(max_abs_diff(ta, tc) > 0.01);
    // normal(0, 0.02): the sample standard deviation of 4096 values is within 5% of 0.02.
    let v = ops::to_f64_vec(ta).unwrap();
    let mean = v.iter().sum::<f64>() / v.len() as f64;
    let sd = (v.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / v.len() as f64).sqrt();
    assert!((sd - 0.02).abs() < 0.001 && mean.abs() < 0.002, "mean {mean}, sd {sd}");
}

#[test]
fn packed_forward_equals_separate_forwards() {
    let model =
        Transformer::init_random(ModelConfig::tiny(Architecture::Qwen3, 50), 3, &crate::dev())
            .unwrap();
    // Lengths that fall into several padding buckets, out of order.
    let seqs: Vec<Vec<u32>> = vec![
        vec![1, 5, 9, 2, 7],
        vec![3, 3, 8],
        vec![4],
        (0..23).map(|i| (i * 7 % 50) as u32).collect(),
        vec![2, 9],
        (0..12).map(|i| (i * 3 % 50) as u32).collect(),
    ];
    let refs: Vec<&[u32]> = seqs.iter().map(Vec::as_slice).collect();
    let packed = model.forward_packed(&refs).unwrap();
    assert_eq!(packed.dims(), [46, 50]);
    let sep = Tensor::cat(&seqs.iter().map(|s| model.forward(s).unwrap()).collect::<Vec<_>>(), 0)
        .unwrap();
    let diff = max_abs_diff(&packed, &sep);
    assert!(diff < 1e-5, "{diff}");
}

/// A loss with a different weight on every token's logprob, so that every logit row gets its own
/// gradient.
fn weighted_logprob_loss(logits: &Tensor, targets: &[u32]) -> Tensor {
    let ids = Tensor::new(targets, logits.device()).unwrap();
    let lp = ops::token_logprobs(logits, &ids).unwrap();
    let w: Vec<f32> = (0..targets.len()).map(|i| ((i * 37) % 11) as f32 / 5.0 - 1.0).collect();
    let w = Tensor::new(w.as_slice(), logits.device()).unwrap();
    (lp * w).unwrap().sum_all().unwrap()
}

#[test]
fn written_out_backward_equals_autograd() {
    let mut cfgs = configs();
    // Heads of 88: a 64-wide block, a 16-wide block and a tail of the attention kernels.
    let mut wide = ModelConfig::tiny(Architecture::Qwen3, 50);
    wide.head_dim = 88;
    cfgs.push(wide);
    cfgs.push(ModelConfig::tiny(Architecture::Qwen3Moe, 50));
    cfgs.push(ModelConfig::tiny(Architecture::Glm4Moe, 50));
    for cfg in cfgs {
        let arch = cfg.architecture;
        let mut tensors =
            Transformer::init_random(cfg.clone(), 4, &crate::dev()).unwrap().tensors();
        // Weights well away from the 0.02 init (and norms away from one), so every term of the
        // backward pass matters.
        for (name, t) in tensors.iter_mut() {
            *t = if name.ends_with("norm.weight") {
                (t.rand_like(0.5, 1.5).unwrap() * 1.0).unwrap()
            } else {
                (t.clone() * 20.0).unwrap()
            };
        }
        let model = Transformer::from_tensors(cfg, tensors, DType::F32, &crate::dev()).unwrap();
        for lens in [vec![13usize], vec![13, 6, 9, 2], vec![70, 20]] {
            let seqs: Vec<Vec<u32>> =
                lens.iter().enumerate().map(|(i, &n)| tokens(n + 1, i as u32 + 5, 50)).collect();
            let inputs: Vec<&[u32]> = seqs.iter().map(|s| &s[..s.len() - 1]).collect();
            let targets: Vec<u32> = seqs.iter().flat_map(|s| s[1..].to_vec()).collect();
            let logits = model.forward_packed(&inputs).unwrap();
            let store = weighted_logprob_loss(&logits, &targets).backward().unwrap();
            for checkpoint in [false, true] {
                let tape = model.train_forward(&inputs, checkpoint).unwrap();
                let d = max_abs_diff(tape.logits(), &logits);
                assert!(d < 1e-4, "{arch:?} {lens:?}: logits differ by {d}");
                let leaf = Var::from_tensor(tape.logits()).unwrap();
                let inner = weighted_logprob_loss(leaf.as_tensor(), &targets).backward().unwrap();
                let dlogits = inner.get(leaf.as_tensor()).unwrap().clone();
                let grads = tape.backward(&dlogits).unwrap();
                assert_eq!(grads.len(), model.params().len());
                for ((name, var), g) in model.params().iter().zip(&grads) {
                    // A weight autograd does not reach (an expert no token chose, the routing
                    // correction bias) must get zeros.
                    let Some(want) = store.get(var.as_tensor()) else {
                        let largest =
                            g.abs().unwrap().max_all().unwrap().to_scalar::<f32>().unwrap();
                        assert_eq!(largest, 0.0, "{arch:?}: {name}");
                        continue;
                    };
                    let scale = f64::from(
                        want.abs().unwrap().max_all().unwrap().to_scalar::<f32>().unwrap(),
                    );
                    let d = max_abs_diff(g, want);
                    assert!(
                        d <= 2e-4 * scale.max(1.0),
                        "{arch:?} {lens:?} checkpoint {checkpoint}: {name} differs by {d} (largest {scale})"
                    );
                }
            }
        }
    }
}

/// The row kernels of the output head against the composed ops: log-probabilities and entropy
/// under per-row temperatures, and the gradient of a weighted sum of the log-probabilities.
#[test]
fn logprob_rows_equal_the_composed_log_softmax_and_its_gradient() {
    let (n, vocab) = (7, 1003);
    let data: Vec<f32> =
        (0..n * vocab).map(|i| ((i * 7919) % 2003) as f32 / 100.0 - 10.0).collect();
    let logits = Tensor::from_vec(data, (n, vocab), &crate::dev()).unwrap();
    let targets: Vec<u32> = (0..n as u32).map(|i| (i * 389) % vocab as u32).collect();
    let temps = [1.0f32, 0.7, 1.3, 1.0, 0.25, 2.0, 1.0];
    let w: Vec<f32> = (0..n).map(|i| i as f32 - 2.5).collect();
    let rows = temper_model::train::logprob_rows(&logits, &targets, &temps).unwrap();
    // The reference, from differentiable primitives.
    let leaf = Var::from_tensor(&logits).unwrap();
    let t = Tensor::from_vec(temps.to_vec(), (n, 1), &crate::dev()).unwrap();
    let logp = ops::log_softmax_composed(&leaf.as_tensor().broadcast_div(&t).unwrap()).unwrap();
    let ids = Tensor::from_vec(targets.clone(), (n, 1), &crate::dev()).unwrap();
    let lp = logp.gather(&ids, 1).unwrap().squeeze(1).unwrap();
    let entropy = (logp.exp().unwrap() * &logp).unwrap().sum(1).unwrap().neg().unwrap();
    for (what, got, want) in
        [("logprobs", &rows.logprobs, &lp), ("entropy", &rows.entropy, &entropy)]
    {
        let got = Tensor::new(got.as_slice(), &crate::dev()).unwrap();
        let d = max_abs_diff(&got, want);
        assert!(d < 1e-4, "{what} differ by {d}");
    }
    let wt = Tensor::new(w.as_slice(), &crate::dev()).unwrap();
    let want = (lp * wt).unwrap().sum_all().unwrap().backward().unwrap();
    let want = want.get(leaf.as_tensor()).unwrap();
    let got =
        temper_model::train::logprob_rows_backward(&logits, &targets, &temps, &rows, &w).unwrap();
    let d = max_abs_diff(&got, want);
    assert!(d < 1e-5, "gradients differ by {d}");
    // A row the loss does not use (zero gradient) has a zero gradient, unless its logits are not
    // finite: then NaN, so that the trainer skips the step as it does under autograd.
    let mut bad = logits.to_vec2::<f32>().unwrap();
    bad[2][5] = f32::INFINITY;
    let bad = Tensor::new(bad, &crate::dev()).unwrap();
    let rows = temper_model::train::logprob_rows(&bad, &targets, &temps).unwrap();
    let mut w0 = w;
    (w0[2], w0[3]) = (0.0, 0.0);
    let g = temper_model::train::logprob_rows_backward(&bad, &targets, &temps, &rows, &w0)
        .unwrap()
        .to_vec2::<f32>()
        .unwrap();
    assert!(g[2].iter().all(|v| v.is_nan()), "a non-finite unused row must poison the gradient");
    assert!(g[3].iter().all(|&v| v == 0.0), "an unused finite row has no gradient");
    assert!(g[1].iter().all(|v| v.is_finite()));
    // Bad input is refused, naming what is wrong.
    let err = temper_model::train::logprob_rows(&logits, &targets, &[1.0; 6]).unwrap_err();
    assert!(err.to_string().contains("6 temperatures"), "{err}");
    let mut bad = targets;
    bad[3] = vocab as u32;
    let err = temper_model::train::logprob_rows(&logits, &bad, &temps).unwrap_err();
    assert!(err.to_string().contains("outside the vocabulary"), "{err}");
}

/// The polynomial `exp` of the training kernels against f64's, over the range where e^x is a
/// normal f32, and at the edges.
#[test]
fn approximate_exp_is_within_a_few_ulps() {
    let mut worst = 0f64;
    for i in 0..=400_000 {
        let x = -87.0 + 175.0 * f64::from(i) / 400_000.0;
        let got = f64::from(temper_model::train::exp_approx(x as f32));
        let want = f64::from(x as f32).exp();
        worst = worst.max((got - want).abs() / want);
    }
    assert!(worst < 5e-7, "relative error {worst}");
    assert!(temper_model::train::exp_approx(f32::NAN).is_nan());
    assert!(temper_model::train::exp_approx(f32::NEG_INFINITY) < 1e-37);
    assert_eq!(temper_model::train::exp_approx(0.0), 1.0);
    assert!(temper_model::train::exp_approx(88.0) > 1e38);
}

/// The logits' gradient written over the logits gives the same weight gradients, bit for bit,
/// as the one written to a new matrix.
#[test]
fn logit_gradient_in_place_equals_the_copy() {
    let model =
        Transformer::init_random(ModelConfig::tiny(Architecture::Qwen3, 50), 6, &crate::dev())
            .unwrap();
    let seqs = [tokens(12, 1, 50), tokens(7, 2, 50)];
    let inputs: Vec<&[u32]> = seqs.iter().map(|s| &s[..s.len() - 1]).collect();
    let targets: Vec<u32> = seqs.iter().flat_map(|s| s[1..].to_vec()).collect();
    let temps: Vec<f32> = (0..targets.len()).map(|i| [1.0, 0.5, 2.0][i % 3]).collect();
    // Some rows without gradient (masked positions).
    let dlp: Vec<f32> =
        (0..targets.len()).map(|i| if i % 4 == 0 { 0.0 } else { 0.1 * i as f32 - 0.7 }).collect();
    let grads = |in_place: bool| {
        let tape = model.train_forward(&inputs, false).unwrap();
        let rows = temper_model::train::logprob_rows(tape.logits(), &targets, &temps).unwrap();
        if in_place {
            tape.backward_from_logprobs(&targets, &temps, &rows, &dlp).unwrap()
        } else {
            let d = temper_model::train::logprob_rows_backward(
                tape.logits(),
                &targets,
                &temps,
                &rows,
                &dlp,
            )
            .unwrap();
            tape.backward(&d).unwrap()
        }
    };
    for ((name, _), (a, b)) in model.params().iter().zip(grads(true).iter().zip(&grads(false))) {
        assert_eq!(max_abs_diff(a, b), 0.0, "{name}");
        assert!(a.abs().unwrap().max_all().unwrap().to_scalar::<f32>().unwrap() > 0.0, "{name}");
    }
}
