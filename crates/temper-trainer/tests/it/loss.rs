//! Losses against hand-computed values and finite differences.

use candle_core::{DType, Tensor, Var};
use temper_trainer::loss::{
    LossConfig, LossType, RlTokens, logprobs_and_entropy, policy_loss, sft_loss,
};

use crate::{close, scalar, vals};

fn ln(x: f64) -> f64 {
    x.ln()
}

/// Loss value and d loss / d ℓ for trainer logprobs `lp`.
fn run(
    lp: &[f64],
    mu: &[f64],
    adv: &[f64],
    mask: &[bool],
    seq: &[u32],
    cfg: &LossConfig,
    total: f64,
) -> (f64, Vec<f64>, temper_trainer::loss::LossStats) {
    let n = lp.len();
    let v = Var::from_tensor(&Tensor::from_vec(lp.to_vec(), n, &crate::dev()).unwrap()).unwrap();
    let mu32: Vec<f32> = mu.iter().map(|&x| x as f32).collect();
    let adv32: Vec<f32> = adv.iter().map(|&x| x as f32).collect();
    let tokens =
        RlTokens { sampling_logprobs: &mu32, advantages: &adv32, loss_mask: mask, sequence: seq };
    let (loss, stats) = policy_loss(v.as_tensor(), &tokens, cfg, total).unwrap();
    let value = scalar(&loss);
    let grad = if value.is_finite() {
        match loss.backward().unwrap().get(v.as_tensor()) {
            Some(g) => vals(g),
            None => vec![0.0; n],
        }
    } else {
        vec![f64::NAN; n]
    };
    (value, grad, stats)
}

fn cfg(kind: LossType, kl: f64) -> LossConfig {
    LossConfig { kind, kl_coef: kl, ..LossConfig::default() }
}

/// μ is rounded to f32 on its way in; use values exact enough for 1e-6 checks.
fn mu_of(p: f64) -> f64 {
    f64::from(p.ln() as f32)
}

#[test]
fn default_loss_masks_and_weights_by_hand() {
    // t0: ρ = 1, A = 1 → −1. t1: p 0.6 → 0.9 with A > 0: masked high. t2: 0.5 → 0.2 with A ≤ 0:
    // masked low. t3: 0.25 → 0.3, A = −2: +2·1.2. t4: not a loss token. t5: 0.5 → 0.8 with A = −1:
    // a rise is not masked when A ≤ 0: +1.6.
    let lp = [ln(0.5), ln(0.9), ln(0.2), ln(0.3), ln(0.7), ln(0.8)];
    let mu = [mu_of(0.5), mu_of(0.6), mu_of(0.5), mu_of(0.25), mu_of(0.1), mu_of(0.5)];
    let adv = [1.0, 1.0, -1.0, -2.0, 5.0, -1.0];
    let mask = [true, true, true, true, false, true];
    let seq = [0; 6];
    let (value, grad, stats) = run(&lp, &mu, &adv, &mask, &seq, &cfg(LossType::Default, 1e-3), 5.0);
    let kl_sq =
        1.5f64.ln().powi(2) + 0.4f64.ln().powi(2) + 1.2f64.ln().powi(2) + 1.6f64.ln().powi(2);
    close(value, (-1.0 + 2.4 + 1.6 + 1e-3 * kl_sq) / 5.0, 1e-6, "default loss");
    assert_eq!((stats.tokens, stats.masked_high, stats.masked_low), (5.0, 1.0, 1.0));
    let k3 = |r: f64| r - r.ln() - 1.0;
    close(stats.mismatch_kl, k3(1.0) + k3(1.5) + k3(0.4) + k3(1.2) + k3(1.6), 1e-5, "mismatch kl");
    // dL/dℓ = (−(1−masked)·A·ρ + 2·kl·log ρ) / N; token 4 has no gradient.
    let expect = [
        -1.0 / 5.0,
        2e-3 * 1.5f64.ln() / 5.0,
        2e-3 * 0.4f64.ln() / 5.0,
        (2.4 + 2e-3 * 1.2f64.ln()) / 5.0,
        0.0,
        (1.6 + 2e-3 * 1.6f64.ln()) / 5.0,
    ];
    for (i, (g, e)) in grad.iter().zip(expect).enumerate() {
        close(*g, e, 1e-6, &format!("default grad {i}"));
    }
}

#[test]
fn ppo_clip_takes_the_pessimistic_branch() {
    // ρ = 1.5, A = 1: clipped to 1.28 (no gradient). ρ = 0.5, A = 1: unclipped 0.5.
    // ρ = 0.5, A = −1: clipped −0.8. ρ = 1.5, A = −1: unclipped −1.5.
    let lp = [ln(0.6), ln(0.2), ln(0.2), ln(0.6)];
    let mu = [mu_of(0.4), mu_of(0.4), mu_of(0.4), mu_of(0.4)];
    let adv = [1.0, 1.0, -1.0, -1.0];
    let (value, grad, stats) =
        run(&lp, &mu, &adv, &[true; 4], &[0; 4], &cfg(LossType::PpoClip, 0.0), 4.0);
    close(value, (-1.28 - 0.5 + 0.8 + 1.5) / 4.0, 1e-6, "ppo loss");
    assert_eq!(stats.clipped, 2.0);
    let expect = [0.0, -0.5 / 4.0, 0.0, 1.5 / 4.0];
    for (i, (g, e)) in grad.iter().zip(expect).enumerate() {
        close(*g, e, 1e-6, &format!("ppo grad {i}"));
    }
}

#[test]
fn gspo_uses_one_ratio_per_sequence() {
    // Sequence 0: log ρ = 0.1, −0.3 → s = e^−0.1, A = 1, inside the clip range from below:
    // unclipped, each token −s. Sequence 1: log ρ = 0.2 → s = e^0.2, A = 2: clipped to
    // 2·(1 + 4e-4). Token 2 is not a loss token.
    let mu = [-1.0, -2.0, -0.5, -1.5];
    let mu: Vec<f64> = mu.iter().map(|&m: &f64| f64::from(m as f32)).collect();
    let lp = [mu[0] + 0.1, mu[1] - 0.3, mu[2] + 3.0, mu[3] + 0.2];
    let adv = [1.0, 1.0, 1.0, 2.0];
    let mask = [true, true, false, true];
    let seq = [0, 0, 0, 1];
    let (value, grad, stats) = run(&lp, &mu, &adv, &mask, &seq, &cfg(LossType::Gspo, 0.0), 3.0);
    let s0 = (-0.1f64).exp();
    close(value, (-2.0 * s0 - 2.0 * 1.0004) / 3.0, 1e-6, "gspo loss");
    assert_eq!(stats.clipped, 1.0);
    // d/dℓ_t (−A·len·s)/N with s = exp(mean log ρ): −A·s/N for each token of sequence 0.
    let expect = [-s0 / 3.0, -s0 / 3.0, 0.0, 0.0];
    for (i, (g, e)) in grad.iter().zip(expect).enumerate() {
        close(*g, e, 1e-6, &format!("gspo grad {i}"));
    }
}

#[test]
fn cispo_weights_logprobs_by_a_clipped_detached_ratio() {
    // ρ = 2 (< 5): −2·1·ℓ. ρ = 8 clipped to 5: −5·(−1)·ℓ.
    let lp = [ln(0.5), ln(0.8)];
    let mu = [mu_of(0.25), mu_of(0.1)];
    let adv = [1.0, -1.0];
    let (value, grad, stats) =
        run(&lp, &mu, &adv, &[true; 2], &[0, 1], &cfg(LossType::Cispo, 0.0), 2.0);
    close(value, (-2.0 * 0.5f64.ln() + 5.0 * 0.8f64.ln()) / 2.0, 1e-5, "cispo loss");
    assert_eq!(stats.clipped, 1.0);
    close(grad[0], -2.0 / 2.0, 1e-5, "cispo grad 0");
    close(grad[1], 5.0 / 2.0, 1e-6, "cispo grad 1");
}

#[test]
fn non_finite_inputs_poison_the_loss_only_on_loss_tokens() {
    for kind in [LossType::Default, LossType::PpoClip, LossType::Gspo, LossType::Cispo] {
        let lp = [-1.0, -2.0];
        // A NaN sampling logprob on a token that is not trained on is ignored...
        let (v, _, s) = run(
            &lp,
            &[f64::NAN, -2.0],
            &[1.0, 1.0],
            &[false, true],
            &[0, 0],
            &cfg(kind, 1e-3),
            1.0,
        );
        assert!(v.is_finite() && s.nonfinite == 0.0, "{kind:?}: {v}");
        // ...on a loss token (or an infinite advantage) it makes the loss NaN and is counted.
        let (v, _, s) =
            run(&lp, &[f64::NAN, -2.0], &[1.0, 1.0], &[true, true], &[0, 0], &cfg(kind, 1e-3), 2.0);
        assert!(v.is_nan() && s.nonfinite == 1.0, "{kind:?}: {v}");
        let (v, _, s) = run(
            &lp,
            &[-1.0, -2.0],
            &[f64::INFINITY, 1.0],
            &[true, true],
            &[0, 0],
            &cfg(kind, 1e-3),
            2.0,
        );
        assert!(v.is_nan() && s.nonfinite == 1.0, "{kind:?}: {v}");
    }
}

#[test]
fn nothing_to_train_on_gives_zero_loss_and_gradient() {
    for kind in [LossType::Default, LossType::PpoClip, LossType::Gspo, LossType::Cispo] {
        let (v, g, s) = run(
            &[-1.0, -2.0],
            &[-1.5, -2.5],
            &[1.0, -1.0],
            &[false, false],
            &[0, 1],
            &cfg(kind, 1e-3),
            0.0,
        );
        assert_eq!((v, s.tokens), (0.0, 0.0), "{kind:?}");
        assert!(g.iter().all(|&x| x == 0.0), "{kind:?}: {g:?}");
    }
}

#[test]
fn sft_loss_is_mean_nll_over_loss_tokens() {
    let lp = Tensor::new(&[ln(0.5), ln(0.25), ln(0.125)], &crate::dev()).unwrap();
    let v = scalar(&sft_loss(&lp, &[true, false, true], 2.0).unwrap());
    close(v, (0.5f64.ln().abs() + 0.125f64.ln().abs()) / 2.0, 1e-12, "sft");
}

/// Loss as a function of logits (through temperature and log-softmax), for finite differences.
fn loss_of_logits(logits: &Tensor, kind: LossType) -> Tensor {
    let targets = [1u32, 3, 0, 2, 4, 1];
    let temps = [0.7f32, 0.7, 1.0, 1.3, 1.0, 0.7];
    let mask = [true, true, false, true, true, true];
    let (lp, _) = logprobs_and_entropy(logits, &targets, &temps, &mask).unwrap();
    let mu: Vec<f32> = vec![-1.2, -2.0, -1.0, -1.9, -1.4, -1.7];
    let adv: Vec<f32> = vec![0.8, 0.8, 0.8, -0.5, -0.5, 1.5];
    let seq = [0u32, 0, 0, 1, 1, 2];
    let tokens =
        RlTokens { sampling_logprobs: &mu, advantages: &adv, loss_mask: &mask, sequence: &seq };
    let c = LossConfig {
        kind,
        kl_coef: 0.05,
        // Wide enough that no branch switches under the perturbation.
        gspo_clip_low: 0.9,
        gspo_clip_high: 5.0,
        ..LossConfig::default()
    };
    policy_loss(&lp, &tokens, &c, 5.0).unwrap().0
}

fn cispo_inputs() -> (Vec<f64>, Vec<f64>, Vec<bool>) {
    let mu = [-1.2f32, -2.0, -1.0, -1.9, -1.4, -1.7].iter().map(|&x| f64::from(x)).collect();
    let adv = [0.8f32, 0.8, 0.8, -0.5, -0.5, 1.5].iter().map(|&x| f64::from(x)).collect();
    (mu, adv, vec![true, true, false, true, true, true])
}

fn cispo_logprobs(logits: &Tensor) -> Vec<f64> {
    let targets = [1u32, 3, 0, 2, 4, 1];
    let temps = [0.7f32, 0.7, 1.0, 1.3, 1.0, 0.7];
    vals(&logprobs_and_entropy(logits, &targets, &temps, &[true; 6]).unwrap().0)
}

#[test]
fn every_loss_gradient_matches_finite_differences_through_temperature() {
    let dev = crate::dev();
    let base: Vec<f64> = (0..30).map(|i| ((i * 7919 % 97) as f64 / 97.0 - 0.5) * 2.0).collect();
    for kind in [LossType::Default, LossType::PpoClip, LossType::Gspo, LossType::Cispo] {
        let v = Var::from_tensor(&Tensor::from_vec(base.clone(), (6, 5), &dev).unwrap()).unwrap();
        let loss = loss_of_logits(v.as_tensor(), kind);
        let grad = vals(loss.backward().unwrap().get(v.as_tensor()).unwrap());
        let eps = 1e-6;
        let mut worst: f64 = 0.0;
        // CISPO's weight is detached by design: its gradient is that of Σ c_t·ℓ_t + the KL term
        // with c_t = −w_t·A_t/N frozen at the base point.
        let cispo_coef: Vec<f64> =
            if kind == LossType::Cispo {
                let lp = cispo_logprobs(&Tensor::from_vec(base.clone(), (6, 5), &dev).unwrap());
                let (mu, adv, mask) = cispo_inputs();
                (0..6)
                    .map(|t| {
                        if mask[t] { -((lp[t] - mu[t]).exp().min(5.0)) * adv[t] / 5.0 } else { 0.0 }
                    })
                    .collect()
            } else {
                Vec::new()
            };
        for i in 0..base.len() {
            let mut plus = base.clone();
            plus[i] += eps;
            let mut minus = base.clone();
            minus[i] -= eps;
            let f = |x: Vec<f64>| {
                let t = Tensor::from_vec(x, (6, 5), &dev).unwrap();
                if kind == LossType::Cispo {
                    let lp = cispo_logprobs(&t);
                    let (mu, _, mask) = cispo_inputs();
                    (0..6)
                        .filter(|&t| mask[t])
                        .map(|t| cispo_coef[t] * lp[t] + 0.05 * (lp[t] - mu[t]).powi(2) / 5.0)
                        .sum()
                } else {
                    scalar(&loss_of_logits(&t, kind))
                }
            };
            let fd = (f(plus) - f(minus)) / (2.0 * eps);
            worst = worst.max((fd - grad[i]).abs());
        }
        assert!(worst < 1e-7, "{kind:?}: worst |fd − grad| {worst}");
        assert!(grad.iter().any(|&g| g.abs() > 1e-3), "{kind:?}: gradient is all zero");
    }
}

#[test]
fn entropy_and_temperature_by_hand() {
    // Two equal logits and one −inf-like: entropy ln 2; temperature 2 halves the logits.
    let logits = Tensor::new(&[[0.0f64, 0.0, -1e4], [2.0, 0.0, 0.0]], &crate::dev()).unwrap();
    let (lp, h) = logprobs_and_entropy(&logits, &[0, 0], &[1.0, 2.0], &[true, false]).unwrap();
    let lp = vals(&lp);
    close(lp[0], 0.5f64.ln(), 1e-9, "logprob row 0");
    let e = 1f64.exp();
    close(lp[1], (e / (e + 2.0)).ln(), 1e-9, "logprob row 1 at T = 2");
    close(h, 2f64.ln(), 1e-9, "entropy over the masked row only");
    let _ = DType::F64;
}
