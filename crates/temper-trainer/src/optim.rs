//! AdamW with decoupled weight decay (none on norms and biases), global gradient-norm clipping,
//! and learning-rate schedules.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::ops::Range;

use candle_core::{CpuStorage, DType, Device, InplaceOp2, Layout, Storage, Tensor, Var};
use rayon::prelude::*;
use serde::{Deserialize, Serialize};

use crate::collective::Blocks;

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
///
/// f32 weights on the CPU are updated in place by one pass over weight, gradient and moments
/// (split across threads); elsewhere the update is a chain of tensor ops.
///
/// [`AdamW::sharded`] keeps the moments of one rank's block of the weights only (the weights
/// laid end to end in order, split by [`Blocks`]): the step then takes that block of the summed
/// gradients ([`AdamW::step_block`]) and returns the block's new weights, which the ranks
/// all-gather ([`AdamW::set_flat`]). Each rank holds 1/N of the moments.
#[derive(Debug)]
pub struct AdamW {
    cfg: OptimConfig,
    params: Vec<(String, Var, bool)>,
    moments: Vec<Moments>,
    shard: Option<Shard>,
    steps: u64,
}

/// One rank's block of a sharded optimizer.
#[derive(Debug)]
struct Shard {
    /// The block, in the flat vector of every weight.
    range: Range<usize>,
    /// Ranks sharing the state.
    world: usize,
    m: Vec<f32>,
    v: Vec<f32>,
}

/// Names of a sharded optimizer's moments in its checkpoint file.
const SHARD_M: &str = "shard.exp_avg";
const SHARD_V: &str = "shard.exp_avg_sq";

#[derive(Debug)]
enum Moments {
    /// Plain vectors, for weights updated in place on the CPU.
    Host {
        m: Vec<f32>,
        v: Vec<f32>,
    },
    Tensors {
        m: Tensor,
        v: Tensor,
    },
}

/// Whether a weight is updated by the in-place CPU kernel.
fn in_place(p: &Var) -> bool {
    p.device().is_cpu() && p.dtype() == DType::F32
}

impl AdamW {
    /// An optimizer for `params` (name and weight), moments at zero.
    pub fn new(params: &[(String, Var)], cfg: OptimConfig) -> candle_core::Result<Self> {
        let mut moments = Vec::with_capacity(params.len());
        for (_, p) in params {
            moments.push(if in_place(p) {
                Moments::Host { m: vec![0.0; p.elem_count()], v: vec![0.0; p.elem_count()] }
            } else {
                Moments::Tensors {
                    m: Tensor::zeros(p.shape(), DType::F32, p.device())?,
                    v: Tensor::zeros(p.shape(), DType::F32, p.device())?,
                }
            });
        }
        Ok(Self {
            cfg,
            params: params
                .iter()
                .map(|(n, p)| (n.clone(), p.clone(), decays(n, p.dims())))
                .collect(),
            moments,
            shard: None,
            steps: 0,
        })
    }

    /// An optimizer that keeps the moments of rank `rank`'s block of `params` only, of `world`
    /// ranks. The weights must be f32 on the CPU.
    pub fn sharded(
        params: &[(String, Var)],
        cfg: OptimConfig,
        rank: usize,
        world: usize,
    ) -> candle_core::Result<Self> {
        if let Some((name, p)) = params.iter().find(|(_, p)| !in_place(p)) {
            candle_core::bail!(
                "a sharded optimizer needs f32 weights on the CPU; `{name}` is {:?} on {:?}",
                p.dtype(),
                p.device()
            );
        }
        let len = params.iter().map(|(_, p)| p.elem_count()).sum();
        let range = Blocks::new(len, world).range(rank);
        let n = range.len();
        let params =
            params.iter().map(|(n, p)| (n.clone(), p.clone(), decays(n, p.dims()))).collect();
        let shard = Shard { range, world: world.max(1), m: vec![0.0; n], v: vec![0.0; n] };
        Ok(Self { cfg, params, moments: Vec::new(), shard: Some(shard), steps: 0 })
    }

    /// Ranks the moments are sharded over (1 when each rank keeps them all).
    pub fn shards(&self) -> usize {
        self.shard.as_ref().map_or(1, |s| s.world)
    }

    /// Bytes of optimizer state this rank holds.
    pub fn state_bytes(&self) -> usize {
        let elems: usize = match &self.shard {
            Some(s) => s.m.len() + s.v.len(),
            None => self
                .moments
                .iter()
                .map(|m| match m {
                    Moments::Host { m, v } => m.len() + v.len(),
                    Moments::Tensors { m, v } => m.elem_count() + v.elem_count(),
                })
                .sum(),
        };
        elems * size_of::<f32>()
    }

    /// Elements of every weight together (the length of the flat vector shards split).
    pub fn flat_len(&self) -> usize {
        self.params.iter().map(|(_, p, _)| p.elem_count()).sum()
    }

    /// A sharded optimizer's step: `grads` is this rank's block of the summed gradients, in the
    /// flat order of the weights; returns the block's updated weights (the ranks all-gather
    /// them and call [`AdamW::set_flat`]). The arithmetic is the unsharded step's, element for
    /// element.
    pub fn step_block(
        &mut self,
        grads: &[f32],
        lr: f64,
        grad_scale: f64,
    ) -> candle_core::Result<Vec<f32>> {
        let Some(shard) = &mut self.shard else {
            candle_core::bail!("step_block on an optimizer that is not sharded");
        };
        if grads.len() != shard.range.len() {
            candle_core::bail!("{} gradients for a block of {}", grads.len(), shard.range.len());
        }
        self.steps += 1;
        let (range, mut out, mut offset) = (shard.range.clone(), Vec::new(), 0);
        for (_, p, decay) in &self.params {
            let (start, n) = (offset, p.elem_count());
            offset += n;
            let (lo, hi) = (start.max(range.start), (start + n).min(range.end));
            if lo >= hi {
                continue;
            }
            let decay = if *decay { self.cfg.weight_decay } else { 0.0 };
            let c = AdamConsts::new(&self.cfg, self.steps, lr, decay, grad_scale);
            let mut theta =
                p.as_tensor().flatten_all()?.narrow(0, lo - start, hi - lo)?.to_vec1()?;
            let k = lo - range.start..hi - range.start;
            adam_update(
                &mut theta,
                &mut shard.m[k.clone()],
                &mut shard.v[k.clone()],
                &grads[k],
                &c,
            );
            out.extend(theta);
        }
        Ok(out)
    }

    /// Sets every weight from `flat` (all of them end to end, in order).
    pub fn set_flat(&self, flat: &[f32]) -> candle_core::Result<()> {
        if flat.len() != self.flat_len() {
            candle_core::bail!("{} values for {} weight elements", flat.len(), self.flat_len());
        }
        let mut offset = 0;
        for (_, p, _) in &self.params {
            let n = p.elem_count();
            p.set(&Tensor::from_slice(&flat[offset..offset + n], p.shape(), p.device())?)?;
            offset += n;
        }
        Ok(())
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
        self.step_scaled(grads, lr, 1.0)
    }

    /// One update from `grads` multiplied by `grad_scale` (the clipping factor of
    /// [`clip_scale`]), without a scaled copy of the gradients.
    pub fn step_scaled(
        &mut self,
        grads: &[Tensor],
        lr: f64,
        grad_scale: f64,
    ) -> candle_core::Result<()> {
        if self.shard.is_some() {
            candle_core::bail!("a sharded optimizer steps by blocks (step_block)");
        }
        if grads.len() != self.params.len() {
            candle_core::bail!("{} gradients for {} weights", grads.len(), self.params.len());
        }
        self.steps += 1;
        let t = self.steps as i32;
        let (b1, b2) = (self.cfg.beta1, self.cfg.beta2);
        let bc1 = 1.0 - b1.powi(t);
        let bc2 = 1.0 - b2.powi(t);
        for (i, (_, p, decay)) in self.params.iter().enumerate() {
            if grads[i].dims() != p.dims() {
                candle_core::bail!(
                    "gradient of shape {:?} for a weight of shape {:?}",
                    grads[i].dims(),
                    p.dims()
                );
            }
            let decay = if *decay { self.cfg.weight_decay } else { 0.0 };
            match &mut self.moments[i] {
                Moments::Host { m, v } => {
                    let g = grads[i].to_dtype(DType::F32)?.contiguous()?;
                    let kernel = AdamKernel {
                        m: RefCell::new(m),
                        v: RefCell::new(v),
                        c: AdamConsts::new(&self.cfg, self.steps, lr, decay, grad_scale),
                    };
                    p.as_tensor().inplace_op2(&g, &kernel)?;
                }
                Moments::Tensors { m, v } => {
                    let mut g = grads[i].to_dtype(DType::F32)?;
                    if grad_scale != 1.0 {
                        g = (g * grad_scale)?;
                    }
                    let new_m = ((&*m * b1)? + (&g * (1.0 - b1))?)?;
                    let new_v = ((&*v * b2)? + (g.sqr()? * (1.0 - b2))?)?;
                    let mut theta = p.as_tensor().to_dtype(DType::F32)?;
                    if decay > 0.0 {
                        theta = (theta * (1.0 - lr * decay))?;
                    }
                    let denom = ((&new_v / bc2)?.sqrt()? + self.cfg.eps)?;
                    let update = ((&new_m / bc1)? / denom)?;
                    let theta = (theta - (update * lr)?)?;
                    p.set(&theta.to_dtype(p.dtype())?)?;
                    *m = new_m;
                    *v = new_v;
                }
            }
        }
        Ok(())
    }

    /// The moments by weight name (`<name>.exp_avg`, `<name>.exp_avg_sq`), for checkpoints; a
    /// sharded optimizer's are its block's (`shard.exp_avg`, `shard.exp_avg_sq`, flat).
    pub fn state_tensors(&self) -> BTreeMap<String, Tensor> {
        let mut out = BTreeMap::new();
        if let Some(s) = &self.shard {
            for (key, x) in [(SHARD_M, &s.m), (SHARD_V, &s.v)] {
                if let Ok(t) = Tensor::from_slice(x, x.len(), &Device::Cpu) {
                    out.insert(key.to_owned(), t);
                }
            }
            return out;
        }
        for ((name, p, _), moments) in self.params.iter().zip(&self.moments) {
            let (m, v) = match moments {
                Moments::Host { m, v } => {
                    let host = |x: &[f32]| Tensor::from_slice(x, p.shape(), &Device::Cpu);
                    match (host(m), host(v)) {
                        (Ok(m), Ok(v)) => (m, v),
                        // The lengths are the weight's by construction.
                        _ => continue,
                    }
                }
                Moments::Tensors { m, v } => (m.clone(), v.clone()),
            };
            out.insert(format!("{name}.exp_avg"), m);
            out.insert(format!("{name}.exp_avg_sq"), v);
        }
        out
    }

    /// Per-name moments (as [`AdamW::state_tensors`] names them) from the flat moments of
    /// every weight end to end (the sharded checkpoint files of all ranks, concatenated).
    pub fn unflatten_state(
        &self,
        m: &[f32],
        v: &[f32],
    ) -> candle_core::Result<BTreeMap<String, Tensor>> {
        if m.len() != self.flat_len() || v.len() != self.flat_len() {
            candle_core::bail!(
                "optimizer moments of {} and {} elements for {} weight elements",
                m.len(),
                v.len(),
                self.flat_len()
            );
        }
        let (mut out, mut offset) = (BTreeMap::new(), 0);
        for (name, p, _) in &self.params {
            let n = p.elem_count();
            let at = offset..offset + n;
            out.insert(
                format!("{name}.exp_avg"),
                Tensor::from_slice(&m[at.clone()], p.shape(), &Device::Cpu)?,
            );
            out.insert(
                format!("{name}.exp_avg_sq"),
                Tensor::from_slice(&v[at], p.shape(), &Device::Cpu)?,
            );
            offset += n;
        }
        Ok(out)
    }

    /// Restores the moments saved by [`AdamW::state_tensors`] and the step count. A sharded
    /// optimizer takes its own block's file, or per-name moments (from which it keeps its block).
    pub fn load_state(
        &mut self,
        mut tensors: BTreeMap<String, Tensor>,
        steps: u64,
    ) -> Result<(), String> {
        if self.shard.is_some() {
            self.load_block(tensors)?;
            self.steps = steps;
            return Ok(());
        }
        for ((name, p, _), moments) in self.params.iter().zip(self.moments.iter_mut()) {
            let mut take = |suffix: &str| -> Result<Tensor, String> {
                let key = format!("{name}.{suffix}");
                let t = tensors.remove(&key).ok_or_else(|| format!("`{key}` is missing"))?;
                if t.dims() != p.dims() {
                    return Err(format!(
                        "`{key}` has shape {:?}, the weight {:?}",
                        t.dims(),
                        p.dims()
                    ));
                }
                t.to_dtype(DType::F32).map_err(|e| e.to_string())
            };
            let (m, v) = (take("exp_avg")?, take("exp_avg_sq")?);
            match moments {
                Moments::Host { m: hm, v: hv } => {
                    let host = |t: Tensor| -> Result<Vec<f32>, String> {
                        t.flatten_all().and_then(|t| t.to_vec1::<f32>()).map_err(|e| e.to_string())
                    };
                    *hm = host(m)?;
                    *hv = host(v)?;
                }
                Moments::Tensors { m: tm, v: tv } => {
                    *tm = m.to_device(p.device()).map_err(|e| e.to_string())?;
                    *tv = v.to_device(p.device()).map_err(|e| e.to_string())?;
                }
            }
        }
        self.steps = steps;
        Ok(())
    }
}

impl AdamW {
    fn load_block(&mut self, mut tensors: BTreeMap<String, Tensor>) -> Result<(), String> {
        let flat = |t: Tensor| -> Result<Vec<f32>, String> {
            t.flatten_all()
                .and_then(|t| t.to_dtype(DType::F32)?.to_vec1())
                .map_err(|e| e.to_string())
        };
        let (m, v) = match (tensors.remove(SHARD_M), tensors.remove(SHARD_V)) {
            (Some(m), Some(v)) => (flat(m)?, flat(v)?),
            _ => {
                // Per-name moments: lay them end to end and keep this rank's block.
                let (mut m, mut v) = (Vec::new(), Vec::new());
                for (name, p, _) in &self.params {
                    for (suffix, out) in [("exp_avg", &mut m), ("exp_avg_sq", &mut v)] {
                        let key = format!("{name}.{suffix}");
                        let t =
                            tensors.remove(&key).ok_or_else(|| format!("`{key}` is missing"))?;
                        if t.dims() != p.dims() {
                            return Err(format!(
                                "`{key}` has shape {:?}, the weight {:?}",
                                t.dims(),
                                p.dims()
                            ));
                        }
                        out.extend(flat(t)?);
                    }
                }
                let range = self.shard.as_ref().map(|s| s.range.clone()).unwrap_or_default();
                (m[range.clone()].to_vec(), v[range].to_vec())
            }
        };
        let Some(shard) = &mut self.shard else { return Err("not sharded".into()) };
        if m.len() != shard.range.len() || v.len() != shard.range.len() {
            return Err(format!(
                "optimizer block of {} and {} moments for a block of {} weights",
                m.len(),
                v.len(),
                shard.range.len()
            ));
        }
        (shard.m, shard.v) = (m, v);
        Ok(())
    }
}

/// Elements of a weight one thread updates at a time.
const CHUNK: usize = 1 << 15;

/// The constants of one weight's update, in the f32 the update runs in.
struct AdamConsts {
    /// `1 − lr·λ` (1 without decay).
    decay: f32,
    b1: f32,
    b2: f32,
    bc1: f32,
    bc2: f32,
    lr: f32,
    eps: f32,
    grad_scale: f32,
}

impl AdamConsts {
    /// For optimizer step `steps` (1-based) with learning rate `lr` and weight decay `decay`.
    fn new(cfg: &OptimConfig, steps: u64, lr: f64, decay: f64, grad_scale: f64) -> Self {
        let t = steps as i32;
        Self {
            decay: (1.0 - lr * decay) as f32,
            b1: cfg.beta1 as f32,
            b2: cfg.beta2 as f32,
            bc1: (1.0 - cfg.beta1.powi(t)) as f32,
            bc2: (1.0 - cfg.beta2.powi(t)) as f32,
            lr: lr as f32,
            eps: cfg.eps as f32,
            grad_scale: grad_scale as f32,
        }
    }
}

/// AdamW on slices of weights, moments and gradients of one weight (split across threads).
fn adam_update(theta: &mut [f32], m: &mut [f32], v: &mut [f32], g: &[f32], c: &AdamConsts) {
    let AdamConsts { decay, b1, b2, bc1, bc2, lr, eps, grad_scale: scale } = *c;
    theta
        .par_chunks_mut(CHUNK)
        .zip(m.par_chunks_mut(CHUNK))
        .zip(v.par_chunks_mut(CHUNK))
        .zip(g.par_chunks(CHUNK))
        .for_each(|(((theta, m), v), g)| {
            for (((theta, m), v), g) in theta.iter_mut().zip(m).zip(v).zip(g) {
                let g = g * scale;
                *m = b1 * *m + (1.0 - b1) * g;
                *v = b2 * *v + (1.0 - b2) * g * g;
                *theta = *theta * decay - lr * (*m / bc1) / ((*v / bc2).sqrt() + eps);
            }
        });
}

/// The in-place AdamW update of one f32 weight on the CPU, given its gradient.
struct AdamKernel<'a> {
    m: RefCell<&'a mut Vec<f32>>,
    v: RefCell<&'a mut Vec<f32>>,
    c: AdamConsts,
}

impl InplaceOp2 for AdamKernel<'_> {
    fn name(&self) -> &'static str {
        "adamw"
    }

    fn cpu_fwd(
        &self,
        s1: &mut CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
    ) -> candle_core::Result<()> {
        let (CpuStorage::F32(theta), CpuStorage::F32(g)) = (s1, s2) else {
            candle_core::bail!("adamw: the in-place update needs f32 weight and gradient");
        };
        let mut m = self.m.borrow_mut();
        let mut v = self.v.borrow_mut();
        let n = m.len();
        if !l1.is_contiguous() || !l2.is_contiguous() || l1.shape().elem_count() != n {
            candle_core::bail!("adamw: weight, gradient and moments must be contiguous and alike");
        }
        let theta = &mut theta[l1.start_offset()..l1.start_offset() + n];
        let g = &g[l2.start_offset()..l2.start_offset() + n];
        adam_update(theta, m.as_mut_slice(), v.as_mut_slice(), g, &self.c);
        Ok(())
    }
}

/// The global L2 norm of `grads` (sums of squares in f64; f32 gradients on the CPU are read in
/// place, in fixed chunks, so the result does not depend on the thread count).
pub fn grad_norm(grads: &[Tensor]) -> candle_core::Result<f64> {
    let mut total = 0f64;
    for g in grads {
        let g = g.contiguous()?;
        let (storage, layout) = g.storage_and_layout();
        total += match &*storage {
            Storage::Cpu(CpuStorage::F32(data)) => {
                let data = &data[layout.start_offset()..layout.start_offset() + g.elem_count()];
                let parts: Vec<f64> = data.par_chunks(CHUNK).map(sum_squares).collect();
                parts.iter().sum::<f64>()
            }
            _ => {
                drop(storage);
                g.to_dtype(DType::F64)?.sqr()?.sum_all()?.to_scalar::<f64>()?
            }
        };
    }
    Ok(total.sqrt())
}

/// `Σ x²` in f64, in eight independent lanes (one running sum waits on each addition before the
/// next).
fn sum_squares(c: &[f32]) -> f64 {
    let mut lanes = [0f64; 8];
    let chunks = c.chunks_exact(8);
    let tail: f64 = chunks.remainder().iter().map(|&x| f64::from(x) * f64::from(x)).sum();
    for c in chunks {
        for l in 0..8 {
            lanes[l] += f64::from(c[l]) * f64::from(c[l]);
        }
    }
    lanes.iter().sum::<f64>() + tail
}

/// The factor that brings gradients of global norm `norm` down to `max_norm` (1 when they are
/// within it or `max_norm` is 0).
pub fn clip_scale(norm: f64, max_norm: f64) -> f64 {
    if max_norm > 0.0 && norm > max_norm { max_norm / (norm + 1e-6) } else { 1.0 }
}

/// Scales `grads` so their global norm is at most `max_norm` (when `max_norm > 0`), given their
/// current `norm`.
pub fn clip_grads(grads: &mut [Tensor], norm: f64, max_norm: f64) -> candle_core::Result<()> {
    let scale = clip_scale(norm, max_norm);
    if scale != 1.0 {
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
