//! Every op's gradient against central finite differences, in f64.

use candle_core::{Result, Tensor, Var};
use temper_model::ops::{self, Rope, RopeScaling};

use crate::sample;

/// Checks d(sum(f(inputs) * w))/d(input[which]) from `backward()` against central differences
/// for every element, where `w` is a fixed random weighting (so every output element matters
/// differently). Fails when the autograd gradient is missing, zero where it should not be, or off.
fn check(name: &str, inputs: &[Tensor], which: usize, f: impl Fn(&[Tensor]) -> Result<Tensor>) {
    let vars: Vec<Var> = inputs.iter().map(|t| Var::from_tensor(t).unwrap()).collect();
    let tensors: Vec<Tensor> = vars.iter().map(|v| v.as_tensor().clone()).collect();
    let out = f(&tensors).unwrap();
    let w = sample(out.dims(), 99);
    let loss = (out * &w).unwrap().sum_all().unwrap();
    let grads = loss.backward().unwrap();
    let analytic = grads
        .get(vars[which].as_tensor())
        .unwrap_or_else(|| panic!("{name}: no gradient reaches input {which}"));
    let analytic = ops::to_f64_vec(analytic).unwrap();

    let base = ops::to_f64_vec(&inputs[which]).unwrap();
    let shape = inputs[which].dims().to_vec();
    let eps = 1e-6;
    let eval = |values: Vec<f64>| -> f64 {
        let mut xs = inputs.to_vec();
        xs[which] = Tensor::from_vec(values, shape.as_slice(), &crate::dev()).unwrap();
        let out = f(&xs).unwrap();
        (out * &w).unwrap().sum_all().unwrap().to_scalar::<f64>().unwrap()
    };
    let mut worst = 0.0f64;
    let mut norm = 0.0f64;
    for i in 0..base.len() {
        let mut plus = base.clone();
        plus[i] += eps;
        let mut minus = base.clone();
        minus[i] -= eps;
        let numeric = (eval(plus) - eval(minus)) / (2.0 * eps);
        let err = (numeric - analytic[i]).abs() / (1.0 + numeric.abs());
        worst = worst.max(err);
        norm += numeric.abs();
    }
    assert!(norm > 1e-3, "{name}: the function does not depend on input {which} (test is vacuous)");
    assert!(worst < 1e-6, "{name}: input {which}: worst relative error {worst:e}");
}

#[test]
fn softmax_and_log_softmax() {
    let x = sample(&[3, 7], 1);
    check("softmax", std::slice::from_ref(&x), 0, |t| ops::softmax_last_dim(&t[0]));
    check("log_softmax", &[x], 0, |t| ops::log_softmax_last_dim(&t[0]));
}

#[test]
fn softmax_matches_definition_and_survives_large_inputs() {
    let x = Tensor::new(&[[1000.0f64, 1001.0, 999.0], [0.0, 0.0, 0.0]], &crate::dev()).unwrap();
    let p = ops::to_f64_vec(&ops::softmax_last_dim(&x).unwrap()).unwrap();
    let e = [1.0f64.exp(), 2.0f64.exp(), 1.0];
    let s: f64 = e.iter().sum();
    for (got, want) in p.iter().zip([e[0] / s, e[1] / s, e[2] / s, 1.0 / 3.0, 1.0 / 3.0, 1.0 / 3.0])
    {
        assert!((got - want).abs() < 1e-12, "{got} vs {want}");
    }
    let lp = ops::to_f64_vec(&ops::log_softmax_last_dim(&x).unwrap()).unwrap();
    assert!((lp[1] - (e[1] / s).ln()).abs() < 1e-12);
}

#[test]
fn rms_norm_input_and_weight() {
    let inputs = [sample(&[4, 6], 2), (sample(&[6], 3) + 1.5).unwrap()];
    check("rms_norm/x", &inputs, 0, |t| ops::rms_norm(&t[0], &t[1], 1e-5));
    check("rms_norm/w", &inputs, 1, |t| ops::rms_norm(&t[0], &t[1], 1e-5));
}

#[test]
fn linear_input_weight_and_bias() {
    let inputs = [sample(&[3, 5], 4), sample(&[4, 5], 5), sample(&[4], 6)];
    for which in 0..3 {
        check("linear", &inputs, which, |t| ops::linear(&t[0], &t[1], Some(&t[2])));
    }
}

#[test]
fn silu() {
    let x = (sample(&[10], 7) * 4.0).unwrap();
    check("silu", &[x], 0, |t| ops::silu(&t[0]));
}

#[test]
fn token_logprobs() {
    let logits = (sample(&[4, 9], 8) * 3.0).unwrap();
    let targets = Tensor::new(&[0u32, 8, 3, 3], &crate::dev()).unwrap();
    check("token_logprobs", std::slice::from_ref(&logits), 0, |t| {
        ops::token_logprobs(&t[0], &targets)
    });
    // Against the definition: logit - logsumexp(row).
    let got = ops::to_f64_vec(&ops::token_logprobs(&logits, &targets).unwrap()).unwrap();
    let rows = logits.to_vec2::<f64>().unwrap();
    for (i, (row, &t)) in rows.iter().zip(&[0usize, 8, 3, 3]).enumerate() {
        let lse = row.iter().map(|x| x.exp()).sum::<f64>().ln();
        assert!((got[i] - (row[t] - lse)).abs() < 1e-12);
    }
}

#[test]
fn rope_full_partial_and_scaled() {
    let positions = Tensor::new(&[0u32, 5, 2, 17], &crate::dev()).unwrap();
    let x = sample(&[4, 3, 8], 9);
    let full = Rope::new(8, 10_000.0, None, 32, &crate::dev()).unwrap();
    check("rope/full", std::slice::from_ref(&x), 0, |t| full.apply(&t[0], &positions));
    let partial = Rope::new(4, 10_000.0, None, 32, &crate::dev()).unwrap();
    check("rope/partial", std::slice::from_ref(&x), 0, |t| partial.apply(&t[0], &positions));
    let scaling = RopeScaling::Llama3 {
        factor: 8.0,
        high_freq_factor: 4.0,
        low_freq_factor: 1.0,
        original_max_position_embeddings: 16.0,
    };
    let scaled = Rope::new(8, 10_000.0, Some(scaling), 32, &crate::dev()).unwrap();
    check("rope/llama3", &[x], 0, |t| scaled.apply(&t[0], &positions));
}

#[test]
fn rope_rotates_pairs_by_position_angle() {
    // One head of width 4 at position 3: pairs (0, 2) and (1, 3) rotate by 3·θ^0 and 3·θ^(-1/2).
    let rope = Rope::new(4, 100.0, None, 8, &crate::dev()).unwrap();
    let x = Tensor::new(&[[[1.0f64, 2.0, 3.0, 4.0]]], &crate::dev()).unwrap();
    let y =
        ops::to_f64_vec(&rope.apply(&x, &Tensor::new(&[3u32], &crate::dev()).unwrap()).unwrap())
            .unwrap();
    let (a0, a1) = (3.0f64, 3.0f64 / 10.0);
    let want = [
        1.0 * a0.cos() - 3.0 * a0.sin(),
        2.0 * a1.cos() - 4.0 * a1.sin(),
        3.0 * a0.cos() + 1.0 * a0.sin(),
        4.0 * a1.cos() + 2.0 * a1.sin(),
    ];
    for (g, w) in y.iter().zip(want) {
        // The tables are f32.
        assert!((g - w).abs() < 1e-5, "{y:?} vs {want:?}");
    }
    // Partial: the last half passes through untouched.
    let half = Rope::new(2, 100.0, None, 8, &crate::dev()).unwrap();
    let y =
        ops::to_f64_vec(&half.apply(&x, &Tensor::new(&[3u32], &crate::dev()).unwrap()).unwrap())
            .unwrap();
    assert_eq!(&y[2..], &[3.0, 4.0]);
}

#[test]
fn causal_attention_q_k_v_with_groups_and_cache_offset() {
    // 4 query heads over 2 kv heads; 3 new queries over 5 keys (2 already cached).
    let inputs = [sample(&[3, 4, 4], 10), sample(&[2, 5, 4], 11), sample(&[2, 5, 4], 12)];
    for which in 0..3 {
        check("attention", &inputs, which, |t| ops::causal_attention(&t[0], &t[1], &t[2]));
    }
}

#[test]
fn causal_attention_matches_naive_loop() {
    let (q, k, v) = (sample(&[3, 4, 4], 13), sample(&[2, 5, 4], 14), sample(&[2, 5, 4], 15));
    let got = ops::causal_attention(&q, &k, &v).unwrap().to_vec2::<f64>().unwrap();
    let q3 = q.to_vec3::<f64>().unwrap();
    let (k3, v3) = (k.to_vec3::<f64>().unwrap(), v.to_vec3::<f64>().unwrap());
    for i in 0..3 {
        let pos = 2 + i;
        for h in 0..4 {
            let kvh = h / 2;
            let scores: Vec<f64> = (0..=pos)
                .map(|j| (0..4).map(|d| q3[i][h][d] * k3[kvh][j][d]).sum::<f64>() / 2.0)
                .collect();
            let m = scores.iter().cloned().fold(f64::MIN, f64::max);
            let e: Vec<f64> = scores.iter().map(|s| (s - m).exp()).collect();
            let z: f64 = e.iter().sum();
            for d in 0..4 {
                let want: f64 = (0..=pos).map(|j| e[j] / z * v3[kvh][j][d]).sum();
                assert!((got[i][h * 4 + d] - want).abs() < 1e-12, "query {i} head {h} dim {d}");
            }
        }
    }
}

/// The fused f32 log-softmax kernel (forward and hand-written backward) against the composed
/// version, whose gradient the finite-difference test above checks in f64.
#[test]
fn fused_log_softmax_equals_the_composed_one() {
    let x64 = (sample(&[5, 300], 7) * 8.0).unwrap();
    let x = x64.to_dtype(candle_core::DType::F32).unwrap();
    let w = sample(&[5, 300], 8).to_dtype(candle_core::DType::F32).unwrap();
    let run = |f: &dyn Fn(&Tensor) -> Result<Tensor>| {
        let v = Var::from_tensor(&x).unwrap();
        let y = f(v.as_tensor()).unwrap();
        let g = (&y * &w).unwrap().sum_all().unwrap().backward().unwrap();
        (ops::to_f64_vec(&y).unwrap(), ops::to_f64_vec(g.get(v.as_tensor()).unwrap()).unwrap())
    };
    let (y_fused, g_fused) = run(&|t| ops::log_softmax_last_dim(t));
    let (y_ref, g_ref) = run(&|t| ops::log_softmax_composed(t));
    let worst = |a: &[f64], b: &[f64]| a.iter().zip(b).fold(0f64, |m, (p, q)| m.max((p - q).abs()));
    assert!(worst(&y_fused, &y_ref) < 1e-5, "forward {}", worst(&y_fused, &y_ref));
    assert!(worst(&g_fused, &g_ref) < 1e-5, "backward {}", worst(&g_fused, &g_ref));
    assert!(g_fused.iter().any(|g| g.abs() > 1e-3));
}
