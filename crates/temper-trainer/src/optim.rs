//! AdamW with decoupled weight decay (none on norms and biases), global gradient-norm clipping,
//! and learning-rate schedules.

use std::collections::BTreeMap;

use candle_core::{DType, Tensor, Var};
use serde::{Deserialize, Serialize};

/// Optimizer options (`[optim]`).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct OptimConfig {
    /// Peak learning rate.
    pub lr: f64,
    /// Adam's β₁.
    pub beta1: f64,
    /// Adam's β₂.
    pub beta2: f64,
    /// Adam's ε.
    pub eps: f64,
    /// Decoupled weight decay, on matrices only (not on norms and biases).
    pub weight_decay: f64,
    /// Clip the global gradient norm to this (0 turns clipping off).
    pub max_grad_norm: f64,
}

impl Default for OptimConfig {
    fn default() -> Self {
        Self {
            lr: 2e-5,
            beta1: 0.9,
            beta2: 0.999,
            eps: 1e-8,
            weight_decay: 0.01,
            max_grad_norm: 1.0,
        }
    }
}

impl OptimConfig {
    /// Checks the ranges, naming the field.
    pub fn validate(&self) -> Result<(), String> {
        let finite = |name: &str, v: f64| {
            if v.is_finite() && v >= 0.0 {
                Ok(())
            } else {
                Err(format!("optim.{name} must be a finite number ≥ 0, got {v}"))
            }
        };
        finite("lr", self.lr)?;
        finite("eps", self.eps)?;
        finite("weight_decay", self.weight_decay)?;
        finite("max_grad_norm", self.max_grad_norm)?;
        for (name, b) in [("beta1", self.beta1), ("beta2", self.beta2)] {
            if !(0.0..1.0).contains(&b) {
                return Err(format!("optim.{name} must be in [0, 1), got {b}"));
            }
        }
        Ok(())
    }
}

/// Whether a weight gets weight decay: matrices do; norms, biases and other vectors do not.
pub fn decays(name: &str, shape: &[usize]) -> bool {
    shape.len() >= 2 && !name.contains("norm") && !name.ends_with(".bias")
}

/// AdamW over a model's weights, PyTorch's update order: θ ← θ·(1 − lr·λ), then
/// θ ← θ − lr · m̂ / (√v̂ + ε). Moments are kept in f32.
#[derive(Debug)]
pub struct AdamW {
    cfg: OptimConfig,
    params: Vec<(String, Var, bool)>,
    m: Vec<Tensor>,
    v: Vec<Tensor>,
    steps: u64,
}

impl AdamW {
    /// An optimizer for `params` (name and weight), moments at zero.
    pub fn new(params: &[(String, Var)], cfg: OptimConfig) -> candle_core::Result<Self> {
        let mut m = Vec::with_capacity(params.len());
        let mut v = Vec::with_capacity(params.len());
        for (_, p) in params {
            m.push(Tensor::zeros(p.shape(), DType::F32, p.device())?);
            v.push(Tensor::zeros(p.shape(), DType::F32, p.device())?);
        }
        Ok(Self {
            cfg,
            params: params
                .iter()
                .map(|(n, p)| (n.clone(), p.clone(), decays(n, p.dims())))
                .collect(),
            m,
            v,
            steps: 0,
        })
    }

    /// Optimizer steps taken.
    pub fn steps(&self) -> u64 {
        self.steps
    }

    /// The options.
    pub fn config(&self) -> &OptimConfig {
        &self.cfg
    }

    /// One update with learning rate `lr` from `grads` (one per weight, in order).
    pub fn step(&mut self, grads: &[Tensor], lr: f64) -> candle_core::Result<()> {
        if grads.len() != self.params.len() {
            candle_core::bail!("{} gradients for {} weights", grads.len(), self.params.len());
        }
        self.steps += 1;
        let t = self.steps as i32;
        let (b1, b2) = (self.cfg.beta1, self.cfg.beta2);
        let bc1 = 1.0 - b1.powi(t);
        let bc2 = 1.0 - b2.powi(t);
        for (i, (_, p, decay)) in self.params.iter().enumerate() {
            let g = grads[i].to_dtype(DType::F32)?;
            let m = ((&self.m[i] * b1)? + (&g * (1.0 - b1))?)?;
            let v = ((&self.v[i] * b2)? + (g.sqr()? * (1.0 - b2))?)?;
            let mut theta = p.as_tensor().to_dtype(DType::F32)?;
            if *decay && self.cfg.weight_decay > 0.0 {
                theta = (theta * (1.0 - lr * self.cfg.weight_decay))?;
            }
            let denom = ((&v / bc2)?.sqrt()? + self.cfg.eps)?;
            let update = ((&m / bc1)? / denom)?;
            let theta = (theta - (update * lr)?)?;
            p.set(&theta.to_dtype(p.dtype())?)?;
            self.m[i] = m;
            self.v[i] = v;
        }
        Ok(())
    }

    /// The moments by weight name (`<name>.exp_avg`, `<name>.exp_avg_sq`), for checkpoints.
    pub fn state_tensors(&self) -> BTreeMap<String, Tensor> {
        let mut out = BTreeMap::new();
        for (i, (name, _, _)) in self.params.iter().enumerate() {
            out.insert(format!("{name}.exp_avg"), self.m[i].clone());
            out.insert(format!("{name}.exp_avg_sq"), self.v[i].clone());
        }
        out
    }

    /// Restores the moments saved by [`AdamW::state_tensors`] and the step count.
    pub fn load_state(
        &mut self,
        mut tensors: BTreeMap<String, Tensor>,
        steps: u64,
    ) -> Result<(), String> {
        for (i, (name, p, _)) in self.params.iter().enumerate() {
            for (suffix, slot) in [("exp_avg", &mut self.m[i]), ("exp_avg_sq", &mut self.v[i])] {
                let key = format!("{name}.{suffix}");
                let t = tensors.remove(&key).ok_or_else(|| format!("`{key}` is missing"))?;
                if t.dims() != p.dims() {
                    return Err(format!(
                        "`{key}` has shape {:?}, the weight {:?}",
                        t.dims(),
                        p.dims()
                    ));
                }
                *slot = t.to_dtype(DType::F32).map_err(|e| e.to_string())?;
            }
        }
        self.steps = steps;
        Ok(())
    }
}

/// The global L2 norm of `grads` (computed in f64 from per-tensor sums of squares).
pub fn grad_norm(grads: &[Tensor]) -> candle_core::Result<f64> {
    let mut total = 0f64;
    for g in grads {
        total += g.to_dtype(DType::F64)?.sqr()?.sum_all()?.to_scalar::<f64>()?;
    }
    Ok(total.sqrt())
}

/// Scales `grads` so their global norm is at most `max_norm` (when `max_norm > 0`), given their
/// current `norm`.
pub fn clip_grads(grads: &mut [Tensor], norm: f64, max_norm: f64) -> candle_core::Result<()> {
    if max_norm > 0.0 && norm > max_norm {
        let scale = max_norm / (norm + 1e-6);
        for g in grads.iter_mut() {
            *g = (&*g * scale)?;
        }
    }
    Ok(())
}

/// The shape of the learning-rate curve.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ScheduleKind {
    /// Warmup, then the peak rate.
    #[default]
    Constant,
    /// Linear warmup, then a cosine decay to `min_lr_ratio` of the peak at the last step.
    Cosine,
    /// Warmup-stable-decay: warmup, the peak until the last `decay_fraction` of the steps, then
    /// a linear decay to `min_lr_ratio` of the peak.
    Wsd,
}

/// Learning-rate schedule (`[schedule]`).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ScheduleConfig {
    /// Which curve.
    #[serde(rename = "type")]
    pub kind: ScheduleKind,
    /// Steps of linear warmup from 0 to the peak.
    pub warmup_steps: u64,
    /// Fraction of the peak reached at the end of a decay.
    pub min_lr_ratio: f64,
    /// `wsd`: fraction of all steps spent decaying.
    pub decay_fraction: f64,
}

impl Default for ScheduleConfig {
    fn default() -> Self {
        Self {
            kind: ScheduleKind::Constant,
            warmup_steps: 0,
            min_lr_ratio: 0.0,
            decay_fraction: 0.2,
        }
    }
}

impl ScheduleConfig {
    /// Checks the ranges, naming the field.
    pub fn validate(&self) -> Result<(), String> {
        if !(0.0..=1.0).contains(&self.min_lr_ratio) {
            return Err(format!(
                "schedule.min_lr_ratio must be in [0, 1], got {}",
                self.min_lr_ratio
            ));
        }
        if !(0.0..=1.0).contains(&self.decay_fraction) {
            return Err(format!(
                "schedule.decay_fraction must be in [0, 1], got {}",
                self.decay_fraction
            ));
        }
        Ok(())
    }

    /// The learning rate of optimizer step `step` (0-based) of `total` with peak `peak`.
    pub fn lr_at(&self, peak: f64, step: u64, total: u64) -> f64 {
        if step < self.warmup_steps {
            return peak * (step + 1) as f64 / self.warmup_steps as f64;
        }
        let floor = peak * self.min_lr_ratio;
        match self.kind {
            ScheduleKind::Constant => peak,
            ScheduleKind::Cosine => {
                let span = total.saturating_sub(self.warmup_steps).max(1);
                let done = ((step - self.warmup_steps) as f64 / span as f64).min(1.0);
                floor + (peak - floor) * 0.5 * (1.0 + (std::f64::consts::PI * done).cos())
            }
            ScheduleKind::Wsd => {
                let decay_steps = ((total as f64) * self.decay_fraction).round() as u64;
                let decay_start = total.saturating_sub(decay_steps).max(self.warmup_steps);
                if step < decay_start || decay_steps == 0 {
                    peak
                } else {
                    let done = ((step - decay_start + 1) as f64 / decay_steps as f64).min(1.0);
                    peak + (floor - peak) * done
                }
            }
        }
    }
}
