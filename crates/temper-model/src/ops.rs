//! The model's operations, written with candle-core's differentiable primitives only.
//!
//! candle-nn's fused `softmax_last_dim`, `rms_norm`, `layer_norm` and `rope` are custom ops with
//! no backward pass: a loss that flows through them trains nothing behind them, without any
//! error. Nothing here uses them (a test scans this crate's sources for them), and every function
//! below has a finite-difference gradient check in the tests. The one custom kernel
//! ([`crate::kernels`]) has its backward written out and checked the same way.

use candle_core::{D, DType, Device, Result, Tensor};

/// `softmax` over the last dimension, shifted by the row maximum for stability (the shift does
/// not change the value or the gradient, so it is detached).
pub fn softmax_last_dim(x: &Tensor) -> Result<Tensor> {
    let max = x.max_keepdim(D::Minus1)?.detach();
    let e = x.broadcast_sub(&max)?.exp()?;
    let sum = e.sum_keepdim(D::Minus1)?;
    e.broadcast_div(&sum)
}

/// `log softmax` over the last dimension: `x - max - log(sum(exp(x - max)))`. A 2-D f32 tensor
/// on the CPU (logits) goes through the fused kernel of [`crate::kernels`], whose backward is
/// written out; everything else is composed from differentiable primitives.
pub fn log_softmax_last_dim(x: &Tensor) -> Result<Tensor> {
    if let Some(y) = crate::kernels::log_softmax_rows(x)? {
        return Ok(y);
    }
    log_softmax_composed(x)
}

/// [`log_softmax_last_dim`] from primitives only (the reference the fused kernel is tested
/// against).
pub fn log_softmax_composed(x: &Tensor) -> Result<Tensor> {
    let max = x.max_keepdim(D::Minus1)?.detach();
    let shifted = x.broadcast_sub(&max)?;
    let log_sum = shifted.exp()?.sum_keepdim(D::Minus1)?.log()?;
    shifted.broadcast_sub(&log_sum)
}

/// RMS normalisation over the last dimension: `x / sqrt(mean(x²) + eps) * weight`.
pub fn rms_norm(x: &Tensor, weight: &Tensor, eps: f64) -> Result<Tensor> {
    let mean_sq = x.sqr()?.mean_keepdim(D::Minus1)?;
    let scale = (mean_sq + eps)?.sqrt()?.recip()?;
    x.broadcast_mul(&scale)?.broadcast_mul(weight)
}

/// `x W^T + b` for `x` of shape `[n, in]` and `W` of shape `[out, in]` (the Hugging Face layout).
///
/// A few rows in f32 on the CPU (a decode step) go through [`crate::kernels::matmul_wt`], a
/// kernel with its own backward; everything else through candle's matmul.
pub fn linear(x: &Tensor, weight: &Tensor, bias: Option<&Tensor>) -> Result<Tensor> {
    let y = crate::kernels::matmul_wt(x, weight)?;
    match bias {
        Some(b) => y.broadcast_add(b),
        None => Ok(y),
    }
}

/// The logistic function `1 / (1 + exp(-x))`, from differentiable primitives.
pub fn sigmoid(x: &Tensor) -> Result<Tensor> {
    (x.neg()?.exp()? + 1.0)?.recip()
}

/// SiLU, `x · sigmoid(x)` (candle-core's unary op, which has a backward pass).
pub fn silu(x: &Tensor) -> Result<Tensor> {
    x.silu()
}

/// The log-probability of `targets[i]` in row `i` of `logits` (`[n, vocab]`, `targets` `[n]`
/// of `u32`), as a `[n]` tensor.
pub fn token_logprobs(logits: &Tensor, targets: &Tensor) -> Result<Tensor> {
    let logp = log_softmax_last_dim(logits)?;
    logp.gather(&targets.unsqueeze(1)?, 1)?.squeeze(1)
}

/// Rotary position embeddings in the Hugging Face ("rotate half") layout: of each head's
/// `head_dim` values, the first `rotary_dim` are rotated (pairs `i` and `i + rotary_dim / 2`),
/// the rest pass through (partial rotary, as in GLM-4.5).
#[derive(Debug, Clone)]
pub struct Rope {
    /// `[positions, rotary_dim / 2]`
    cos: Tensor,
    sin: Tensor,
    rotary_dim: usize,
}

/// How rotary frequencies are adjusted for long contexts (`rope_scaling` in `config.json`).
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub enum RopeScaling {
    /// Llama 3's: long wavelengths slowed by `factor`, short ones kept, a smooth ramp between.
    Llama3 {
        /// Slow-down of the long wavelengths.
        factor: f64,
        /// Wavelengths below `original_max_position_embeddings / high_freq_factor` are kept.
        high_freq_factor: f64,
        /// Wavelengths above `original_max_position_embeddings / low_freq_factor` are slowed.
        low_freq_factor: f64,
        /// The context length the model was first trained on.
        original_max_position_embeddings: f64,
    },
}

impl Rope {
    /// Tables for positions `0..max_positions`.
    pub fn new(
        rotary_dim: usize,
        theta: f64,
        scaling: Option<RopeScaling>,
        max_positions: usize,
        device: &Device,
    ) -> Result<Self> {
        if rotary_dim == 0 || !rotary_dim.is_multiple_of(2) {
            candle_core::bail!("rotary dimension {rotary_dim} must be even and positive");
        }
        let half = rotary_dim / 2;
        let inv_freq: Vec<f64> = (0..half)
            .map(|i| {
                let f = theta.powf(-(2.0 * i as f64) / rotary_dim as f64);
                match scaling {
                    None => f,
                    Some(RopeScaling::Llama3 {
                        factor,
                        high_freq_factor,
                        low_freq_factor,
                        original_max_position_embeddings: original,
                    }) => {
                        let wavelength = 2.0 * std::f64::consts::PI / f;
                        let (low_wl, high_wl) =
                            (original / low_freq_factor, original / high_freq_factor);
                        if wavelength < high_wl {
                            f
                        } else if wavelength > low_wl {
                            f / factor
                        } else {
                            let smooth = (original / wavelength - low_freq_factor)
                                / (high_freq_factor - low_freq_factor);
                            (1.0 - smooth) * f / factor + smooth * f
                        }
                    }
                }
            })
            .collect();
        let mut cos = Vec::with_capacity(max_positions * half);
        let mut sin = Vec::with_capacity(max_positions * half);
        for p in 0..max_positions {
            for f in &inv_freq {
                let angle = p as f64 * f;
                cos.push(angle.cos() as f32);
                sin.push(angle.sin() as f32);
            }
        }
        Ok(Self {
            cos: Tensor::from_vec(cos, (max_positions, half), device)?,
            sin: Tensor::from_vec(sin, (max_positions, half), device)?,
            rotary_dim,
        })
    }

    /// Most positions the tables cover.
    pub fn max_positions(&self) -> usize {
        self.cos.dim(0).unwrap_or(0)
    }

    /// Rotates `x` of shape `[n, heads, head_dim]`, row `i` being at position `positions[i]`
    /// (`[n]` of `u32`).
    pub fn apply(&self, x: &Tensor, positions: &Tensor) -> Result<Tensor> {
        self.at(positions, x.dtype())?.rotate(x)
    }

    /// The tables for `positions` (`[n]` of `u32`) in `dtype`, to rotate several tensors at
    /// those positions (every layer's queries and keys of one step) without gathering again.
    pub fn at(&self, positions: &Tensor, dtype: DType) -> Result<RopeAt> {
        Ok(RopeAt {
            cos: self.cos.index_select(positions, 0)?.unsqueeze(1)?.to_dtype(dtype)?,
            sin: self.sin.index_select(positions, 0)?.unsqueeze(1)?.to_dtype(dtype)?,
            rotary_dim: self.rotary_dim,
        })
    }
}

/// Rotary tables gathered for one set of positions (see [`Rope::at`]).
#[derive(Debug, Clone)]
pub struct RopeAt {
    /// `[n, 1, rotary_dim / 2]`
    pub(crate) cos: Tensor,
    pub(crate) sin: Tensor,
    pub(crate) rotary_dim: usize,
}

impl RopeAt {
    /// Rotates `x` of shape `[n, heads, head_dim]`, row `i` at the `i`-th position.
    pub fn rotate(&self, x: &Tensor) -> Result<Tensor> {
        let (_, _, head_dim) = x.dims3()?;
        if self.rotary_dim > head_dim {
            candle_core::bail!("rotary dimension {} is over head_dim {head_dim}", self.rotary_dim);
        }
        let half = self.rotary_dim / 2;
        let (cos, sin) = (&self.cos, &self.sin);
        let x1 = x.narrow(D::Minus1, 0, half)?;
        let x2 = x.narrow(D::Minus1, half, half)?;
        let out1 = (x1.broadcast_mul(cos)? - x2.broadcast_mul(sin)?)?;
        let out2 = (x2.broadcast_mul(cos)? + x1.broadcast_mul(sin)?)?;
        if self.rotary_dim == head_dim {
            Tensor::cat(&[out1, out2], D::Minus1)
        } else {
            let rest = x.narrow(D::Minus1, self.rotary_dim, head_dim - self.rotary_dim)?;
            Tensor::cat(&[out1, out2, rest], D::Minus1)
        }
    }
}

/// Attention of `q` (`[n, heads, head_dim]`, the newest `n` positions) over `k` and `v`
/// (`[kv_heads, len, head_dim]`, all `len` positions so far, the last `n` being those of `q`),
/// causal; query heads share key/value heads in consecutive groups (grouped-query attention).
/// Returns `[n, heads * head_dim]`.
pub fn causal_attention(q: &Tensor, k: &Tensor, v: &Tensor) -> Result<Tensor> {
    let (n, heads, head_dim) = q.dims3()?;
    let (kv_heads, len, _) = k.dims3()?;
    if heads % kv_heads != 0 || len < n {
        candle_core::bail!(
            "attention: {heads} heads over {kv_heads} kv heads, {n} queries over {len} keys"
        );
    }
    let group = heads / kv_heads;
    // [n, heads, d] -> [heads, n, d] -> [kv_heads, group * n, d]; one query is already in order.
    let q = if n == 1 {
        q.reshape((kv_heads, group, head_dim))?
    } else {
        q.transpose(0, 1)?.contiguous()?.reshape((kv_heads, group * n, head_dim))?
    };
    let scale = 1.0 / (head_dim as f64).sqrt();
    let scores = (q.matmul(&k.t()?)? * scale)?;
    // One query at the last position sees every key: no mask (the decode step).
    let scores = if n == 1 {
        scores
    } else {
        scores.broadcast_add(&causal_mask(n, len, group, q.device())?.to_dtype(scores.dtype())?)?
    };
    let probs = softmax_last_dim(&scores)?;
    let out = probs.matmul(v)?; // [kv_heads, group * n, d]
    if n == 1 {
        return out.reshape((1, heads * head_dim));
    }
    out.reshape((heads, n, head_dim))?.transpose(0, 1)?.contiguous()?.reshape((n, heads * head_dim))
}

/// Causal attention of several independent sequences at once (no cache): `q` is `[n, heads,
/// head_dim]`, `k` and `v` `[n, kv_heads, head_dim]`, the sequences lying back to back as
/// `spans` (offset, length). Sequences of similar length are padded to a common length and
/// computed as one batched product (a padded key is never seen by a real query, since keys are
/// limited to positions at or before the query); the rows come back in input order.
/// Returns `[n, heads * head_dim]`, equal to [`causal_attention`] on each sequence.
pub fn packed_causal_attention(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    spans: &[(usize, usize)],
) -> Result<Tensor> {
    let (n, heads, head_dim) = q.dims3()?;
    let (_, kv_heads, _) = k.dims3()?;
    if heads % kv_heads != 0 {
        candle_core::bail!("attention: {heads} heads over {kv_heads} kv heads");
    }
    let group = heads / kv_heads;
    let device = q.device();
    // Buckets of spans whose lengths are within a factor of two, longest first, so padding at
    // most doubles the work of a bucket.
    let mut order: Vec<usize> = (0..spans.len()).collect();
    order.sort_by(|&a, &b| spans[b].1.cmp(&spans[a].1).then(a.cmp(&b)));
    let mut buckets: Vec<Vec<usize>> = Vec::new();
    for i in order {
        match buckets.last_mut() {
            Some(b) if spans[i].1 * 2 > spans[b[0]].1 => b.push(i),
            _ => buckets.push(vec![i]),
        }
    }
    let scale = 1.0 / (head_dim as f64).sqrt();
    let mut outs = Vec::with_capacity(buckets.len());
    // For each output row (in bucket order), the input row it belongs to.
    let mut rows_in_order: Vec<u32> = Vec::with_capacity(n);
    for bucket in &buckets {
        let s = bucket.len();
        let lmax = spans[bucket[0]].1;
        let mut gather = Vec::with_capacity(s * lmax);
        let mut keep = Vec::with_capacity(n);
        for (b, &i) in bucket.iter().enumerate() {
            let (offset, len) = spans[i];
            for t in 0..lmax {
                gather.push((offset + t.min(len - 1)) as u32);
            }
            for t in 0..len {
                keep.push((b * lmax + t) as u32);
                rows_in_order.push((offset + t) as u32);
            }
        }
        let gather = Tensor::from_vec(gather, s * lmax, device)?;
        let keep_len = keep.len();
        let keep = Tensor::from_vec(keep, keep_len, device)?;
        // [s·lmax, h, d] → [s, lmax, h, d] → [s, h, lmax, d]
        let pad = |x: &Tensor, h: usize| -> Result<Tensor> {
            x.index_select(&gather, 0)?
                .reshape((s, lmax, h, head_dim))?
                .transpose(1, 2)?
                .contiguous()
        };
        let qp = pad(q, heads)?.reshape((s, kv_heads, group * lmax, head_dim))?;
        let kp = pad(k, kv_heads)?;
        let vp = pad(v, kv_heads)?;
        let scores = (qp.matmul(&kp.t()?)? * scale)?; // [s, kv_heads, group·lmax, lmax]
        let mask = causal_mask(lmax, lmax, group, device)?.to_dtype(scores.dtype())?;
        let probs = softmax_last_dim(&scores.broadcast_add(&mask)?)?;
        let out = probs.matmul(&vp)?; // [s, kv_heads, group·lmax, d]
        let out = out
            .reshape((s, heads, lmax, head_dim))?
            .transpose(1, 2)?
            .contiguous()?
            .reshape((s * lmax, heads * head_dim))?;
        outs.push(out.index_select(&keep, 0)?);
    }
    let out = if outs.len() == 1 { outs.remove(0) } else { Tensor::cat(&outs, 0)? };
    // Back to input order: output row j holds input row rows_in_order[j].
    let mut inverse = vec![0u32; n];
    for (j, &r) in rows_in_order.iter().enumerate() {
        inverse[r as usize] = j as u32;
    }
    if inverse.iter().enumerate().all(|(i, &j)| i as u32 == j) {
        return Ok(out);
    }
    out.index_select(&Tensor::from_vec(inverse, n, device)?, 0)
}

/// `[group * n, len]` of 0 where query `i` (at position `len - n + i`) may see key `j`, and
/// `-inf` elsewhere; the same for each of the `group` heads.
fn causal_mask(n: usize, len: usize, group: usize, device: &Device) -> Result<Tensor> {
    let offset = len - n;
    let row: Vec<f32> = (0..n)
        .flat_map(|i| (0..len).map(move |j| if j <= offset + i { 0.0 } else { f32::NEG_INFINITY }))
        .collect();
    let mask = Tensor::from_vec(row, (n, len), device)?;
    if group == 1 { Ok(mask) } else { Tensor::cat(&vec![mask; group], 0) }
}

/// Floats of `t` as `f64`, for tests and reports.
pub fn to_f64_vec(t: &Tensor) -> Result<Vec<f64>> {
    t.to_dtype(DType::F64)?.flatten_all()?.to_vec1::<f64>()
}
