//! AdamW, clipping and schedules against hand-computed values.

use candle_core::{DType, Tensor, Var};
use temper_trainer::optim::{
    AdamW, OptimConfig, ScheduleConfig, ScheduleKind, clip_grads, clip_scale, decays, grad_norm,
};

use crate::{close, vals};

#[test]
fn adamw_matches_the_formula_and_skips_decay_on_norms() {
    let dev = crate::dev();
    let w = Var::from_tensor(&Tensor::new(&[[1.0f32, -2.0], [0.5, 0.0]], &dev).unwrap()).unwrap();
    let n = Var::from_tensor(&Tensor::new(&[1.0f32, 1.0], &dev).unwrap()).unwrap();
    let params = vec![
        ("layers.0.q.weight".to_owned(), w.clone()),
        ("layers.0.input_layernorm.weight".to_owned(), n.clone()),
    ];
    let cfg = OptimConfig {
        lr: 0.1,
        beta1: 0.9,
        beta2: 0.99,
        eps: 1e-8,
        weight_decay: 0.5,
        max_grad_norm: 0.0,
    };
    let mut opt = AdamW::new(&params, cfg).unwrap();
    let g1 = [0.5f64, -1.0, 2.0, 0.0];
    let g2 = [0.1f64, 0.3, -0.2, 1.0];
    let gn1 = [0.2f64, -0.4];
    let gn2 = [0.0f64, 0.1];
    // Reference, written out: decoupled decay then the bias-corrected Adam step.
    let mut theta = vec![1.0f64, -2.0, 0.5, 0.0];
    let mut theta_n = vec![1.0f64, 1.0];
    let (mut m, mut v) = (vec![0.0; 4], vec![0.0; 4]);
    let (mut mn, mut vn) = (vec![0.0; 2], vec![0.0; 2]);
    for (t, (g, gn)) in [(&g1[..], &gn1[..]), (&g2[..], &gn2[..])].into_iter().enumerate() {
        let t = t as i32 + 1;
        let step = |theta: &mut [f64], m: &mut [f64], v: &mut [f64], g: &[f64], decay: f64| {
            for i in 0..theta.len() {
                theta[i] *= 1.0 - 0.1 * decay;
                m[i] = 0.9 * m[i] + 0.1 * g[i];
                v[i] = 0.99 * v[i] + 0.01 * g[i] * g[i];
                let mh = m[i] / (1.0 - 0.9f64.powi(t));
                let vh = v[i] / (1.0 - 0.99f64.powi(t));
                theta[i] -= 0.1 * mh / (vh.sqrt() + 1e-8);
            }
        };
        step(&mut theta, &mut m, &mut v, g, 0.5);
        step(&mut theta_n, &mut mn, &mut vn, gn, 0.0);
        let gw = Tensor::from_vec(g.iter().map(|&x| x as f32).collect::<Vec<_>>(), (2, 2), &dev)
            .unwrap();
        let gnt =
            Tensor::from_vec(gn.iter().map(|&x| x as f32).collect::<Vec<_>>(), 2, &dev).unwrap();
        opt.step(&[gw, gnt], 0.1).unwrap();
    }
    for (a, b) in vals(w.as_tensor()).iter().zip(&theta) {
        close(*a, *b, 1e-6, "matrix after two steps");
    }
    for (a, b) in vals(n.as_tensor()).iter().zip(&theta_n) {
        close(*a, *b, 1e-6, "norm after two steps (no decay)");
    }
    assert!(decays("model.layers.0.mlp.up_proj.weight", &[4, 4]));
    assert!(decays("model.embed_tokens.weight", &[10, 4]));
    assert!(!decays("model.norm.weight", &[4]));
    assert!(!decays("model.layers.0.self_attn.q_proj.bias", &[4]));
    assert_eq!(opt.steps(), 2);
}

#[test]
fn clipping_scales_to_the_global_norm() {
    let dev = crate::dev();
    let mut g = vec![
        Tensor::new(&[3.0f32, 0.0], &dev).unwrap(),
        Tensor::new(&[[0.0f32, 4.0]], &dev).unwrap(),
    ];
    let norm = grad_norm(&g).unwrap();
    close(norm, 5.0, 1e-12, "norm");
    clip_grads(&mut g, norm, 1.0).unwrap();
    close(grad_norm(&g).unwrap(), 1.0, 1e-6, "clipped norm");
    close(vals(&g[0])[0], 0.6, 1e-6, "scaled entry");
    // Under the limit, or with clipping off: unchanged.
    clip_grads(&mut g, 1.0, 2.0).unwrap();
    clip_grads(&mut g, 1.0, 0.0).unwrap();
    close(vals(&g[1])[1], 0.8, 1e-6, "unchanged");
}

/// The in-place CPU update (f32 weights) and the tensor-op one (taken here by f64 weights, as it
/// is for weights on a GPU) agree, with clipping folded into the step as with it applied first.
#[test]
fn in_place_and_tensor_updates_agree_with_clipping_folded_in() {
    let dev = crate::dev();
    let init: Vec<f32> = (0..70_000).map(|i| ((i * 7919) % 1000) as f32 / 500.0 - 1.0).collect();
    let grads: Vec<Vec<f32>> = (0..3)
        .map(|s| (0..70_000).map(|i| ((i * 31 + s * 17) % 997) as f32 / 300.0 - 1.6).collect())
        .collect();
    let cfg = OptimConfig { lr: 0.01, weight_decay: 0.1, ..OptimConfig::default() };
    let run = |dtype: DType, folded: bool| -> Vec<f64> {
        let w = Tensor::from_vec(init.clone(), (700, 100), &dev).unwrap().to_dtype(dtype).unwrap();
        let w = Var::from_tensor(&w).unwrap();
        let mut opt =
            AdamW::new(&[("model.layers.0.mlp.up_proj.weight".into(), w.clone())], cfg).unwrap();
        for g in &grads {
            let g = Tensor::from_vec(g.clone(), (700, 100), &dev).unwrap().to_dtype(dtype).unwrap();
            let mut g = vec![g];
            let norm = grad_norm(&g).unwrap();
            if folded {
                opt.step_scaled(&g, 0.01, clip_scale(norm, 50.0)).unwrap();
            } else {
                clip_grads(&mut g, norm, 50.0).unwrap();
                opt.step(&g, 0.01).unwrap();
            }
        }
        vals(w.as_tensor())
    };
    let in_place = run(DType::F32, true);
    for (what, other) in
        [("tensor ops", run(DType::F64, true)), ("clipped first", run(DType::F32, false))]
    {
        let worst = in_place.iter().zip(&other).map(|(a, b)| (a - b).abs()).fold(0.0, f64::max);
        assert!(worst < 1e-5, "in place vs {what}: {worst}");
    }
    // The weights moved (Adam's steps are about lr each).
    let moved = in_place.iter().zip(&init).map(|(a, b)| (a - f64::from(*b)).abs()).sum::<f64>()
        / init.len() as f64;
    assert!(moved > 5e-3, "mean move {moved}");
}

#[test]
fn schedules_by_hand() {
    let peak = 1.0;
    let constant =
        ScheduleConfig { kind: ScheduleKind::Constant, warmup_steps: 4, ..Default::default() };
    let got: Vec<f64> = (0..6).map(|s| constant.lr_at(peak, s, 10)).collect();
    assert_eq!(got, [0.25, 0.5, 0.75, 1.0, 1.0, 1.0]);

    let cosine = ScheduleConfig {
        kind: ScheduleKind::Cosine,
        warmup_steps: 2,
        min_lr_ratio: 0.1,
        ..Default::default()
    };
    close(cosine.lr_at(peak, 1, 10), 1.0, 1e-12, "end of warmup");
    close(cosine.lr_at(peak, 2, 10), 1.0, 1e-12, "cosine start");
    // Half way through the 8 decay steps: the midpoint of peak and floor.
    close(cosine.lr_at(peak, 6, 10), 0.55, 1e-12, "cosine middle");
    close(cosine.lr_at(peak, 10, 10), 0.1, 1e-12, "cosine end");

    let wsd = ScheduleConfig {
        kind: ScheduleKind::Wsd,
        warmup_steps: 1,
        min_lr_ratio: 0.0,
        decay_fraction: 0.4,
    };
    let got: Vec<f64> = (0..10).map(|s| wsd.lr_at(peak, s, 10)).collect();
    assert_eq!(got, [1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 0.75, 0.5, 0.25, 0.0]);
}
