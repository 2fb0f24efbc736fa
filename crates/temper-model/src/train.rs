//! A training forward and backward pass with the backward written out, for models in f32 on the
//! CPU: what `temper sft` and `temper trainer` run there.
//!
//! candle's autograd records every op of the forward pass and, in the backward pass, allocates a
//! zero tensor and adds into it for every operand of every op; RMS norm and the gated MLP are
//! five to seven element-wise passes each, forward and backward. Here every part of a dense block
//! has its backward written out: weight gradients come straight from one matrix product each; RMS
//! norms (QK-norm included), the SiLU gate, the rotary embedding and the causal softmax run as
//! single row kernels both ways; causal attention runs per sequence and key/value head (packed
//! sequences, no padding), four query rows at a time so that each key and value row loaded serves
//! four, keeping only each row's log-sum-exp and recomputing the probabilities in the backward
//! pass.
//! Mixture-of-experts MLPs still run under candle's autograd, on a small graph of their own per
//! block seeded with the gradient arriving from above.
//!
//! The result equals autograd's gradient up to float rounding: the tests compare the two on every
//! architecture, with and without gradient checkpointing, and autograd's is checked against
//! finite differences.

use std::collections::HashMap;
use std::ops::Deref;

use candle_core::backprop::GradStore;
use candle_core::{
    CpuStorage, DType, Device, InplaceOp2, Layout, Storage, StorageRef, Tensor, Var,
};
use multiversion::multiversion;
use rayon::prelude::*;

use crate::ModelError;
use crate::ops::linear;
use crate::transformer::{Mlp, Packed, Transformer};

/// Rows a row kernel hands to one task; fixed, so that reductions over rows add in the same order
/// whatever the thread count (results are the same bits on every run).
const ROWS_PER_TASK: usize = 32;

/// What the forward pass kept for the backward pass of one block.
#[derive(Debug)]
struct BlockTape {
    /// The block's input (the residual stream).
    x: Tensor,
    /// `1 / rms` of each row of `x`.
    rstd: Tensor,
    /// `x` normalised: the input of the query, key and value projections.
    h: Tensor,
    /// Query and key projections (`[n · heads, head_dim]`) and the `1 / rms` of each head's row,
    /// when the model norms them (QK-norm).
    qk_norm: Option<[(Tensor, Tensor); 2]>,
    attn: AttnTape,
    /// Attention output, `[n, heads · head_dim]`.
    attn_out: Tensor,
    /// The residual stream after attention.
    x2: Tensor,
    rstd2: Tensor,
    h2: Tensor,
    mlp: MlpTape,
}

#[derive(Debug)]
enum MlpTape {
    /// Gate and up projections and `silu(gate) · up`.
    Dense { a: Tensor, b: Tensor, m: Tensor },
    /// A mixture of experts run under autograd from the leaf `h2`.
    Graph { input: Var, out: Tensor },
}

#[derive(Debug)]
enum Saved {
    Tape(Box<BlockTape>),
    /// Only the block's input (gradient checkpointing): the tape is recomputed in the backward
    /// pass.
    Input(Tensor),
}

/// A forward pass kept for [`TrainTape::backward`] ([`Transformer::train_forward`]).
#[derive(Debug)]
pub struct TrainTape<'m> {
    model: &'m Transformer,
    packed: Packed,
    blocks: Vec<Saved>,
    last: Tensor,
    last_rstd: Tensor,
    head_in: Tensor,
    logits: Tensor,
}

impl Transformer {
    /// Whether [`Transformer::train_forward`] can run this model: f32 weights on the CPU that
    /// train (not [`Transformer::frozen`], no overridden weights).
    pub fn has_written_backward(&self) -> bool {
        self.trainable && self.device.is_cpu() && self.dtype() == DType::F32
    }

    /// The forward pass over independent sequences `chunks` (packed, as
    /// [`Transformer::forward_packed`]), keeping what [`TrainTape::backward`] needs; with
    /// `checkpoint`, only each block's input (the rest is recomputed one block at a time during
    /// the backward pass).
    pub fn train_forward(
        &self,
        chunks: &[&[u32]],
        checkpoint: bool,
    ) -> Result<TrainTape<'_>, ModelError> {
        if !self.has_written_backward() {
            return Err(candle_core::Error::Msg(
                "the written-out backward pass needs a trainable f32 model on the CPU".into(),
            )
            .into());
        }
        let packed = self.pack(chunks)?;
        let mut x = self.embed.detach().embedding(&packed.ids)?;
        let mut blocks = Vec::with_capacity(self.layers.len());
        for l in 0..self.layers.len() {
            let (tape, next) = self.block_tape(l, &x, &packed)?;
            blocks.push(if checkpoint { Saved::Input(x) } else { Saved::Tape(Box::new(tape)) });
            x = next;
        }
        let (head_in, last_rstd) = rms_norm_rows(&x, &self.norm, self.cfg.rms_norm_eps)?;
        let logits = linear(&head_in, &self.lm_head.detach(), None)?;
        Ok(TrainTape { model: self, packed, blocks, last: x, last_rstd, head_in, logits })
    }

    /// Block `l` on `x`: its output and what its backward pass needs.
    fn block_tape(
        &self,
        l: usize,
        x: &Tensor,
        packed: &Packed,
    ) -> candle_core::Result<(BlockTape, Tensor)> {
        let cfg = &self.cfg;
        let layer = &self.layers[l];
        let n = x.dim(0)?;
        let (heads, kv_heads, hd) =
            (cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim);
        let (h, rstd) = rms_norm_rows(x, &layer.input_norm, cfg.rms_norm_eps)?;
        let detached = |b: &Option<Tensor>| b.as_ref().map(Tensor::detach);
        let q = linear(&h, &layer.q.detach(), detached(&layer.q_bias).as_ref())?;
        let k = linear(&h, &layer.k.detach(), detached(&layer.k_bias).as_ref())?;
        let v = linear(&h, &layer.v.detach(), detached(&layer.v_bias).as_ref())?;
        let (q, k, qk_norm) = match (&layer.q_norm, &layer.k_norm) {
            (Some(qn), Some(kn)) => {
                let q_raw = q.reshape((n * heads, hd))?;
                let k_raw = k.reshape((n * kv_heads, hd))?;
                let (q, q_rstd) = rms_norm_rows(&q_raw, qn, cfg.rms_norm_eps)?;
                let (k, k_rstd) = rms_norm_rows(&k_raw, kn, cfg.rms_norm_eps)?;
                (q, k, Some([(q_raw, q_rstd), (k_raw, k_rstd)]))
            }
            _ => (q, k, None),
        };
        let q = rope_rows(&q.reshape((n, heads, hd))?, &packed.rope, false)?;
        let k = rope_rows(&k.reshape((n, kv_heads, hd))?, &packed.rope, false)?;
        let v = v.reshape((n, kv_heads, hd))?;
        let (attn_out, attn) = attention_forward(&q, &k, &v, &packed.spans)?;
        drop((q, k, v));
        let x2 = (x + linear(&attn_out, &layer.o.detach(), None)?)?;
        let (h2, rstd2) = rms_norm_rows(&x2, &layer.post_norm, cfg.rms_norm_eps)?;
        let (mlp, y) = match &layer.mlp {
            Mlp::Dense(ffn) => {
                let a = linear(&h2, &ffn.gate.detach(), None)?;
                let b = linear(&h2, &ffn.up.detach(), None)?;
                let m = silu_mul(&a, &b)?;
                let y = linear(&m, &ffn.down.detach(), None)?;
                (MlpTape::Dense { a, b, m }, y)
            }
            Mlp::Moe(moe) => {
                let input = Var::from_tensor(&h2)?;
                let out = moe.forward(input.as_tensor())?;
                let y = out.detach();
                (MlpTape::Graph { input, out }, y)
            }
        };
        let out = (&x2 + y)?;
        Ok((BlockTape { x: x.clone(), rstd, h, qk_norm, attn, attn_out, x2, rstd2, h2, mlp }, out))
    }
}

impl TrainTape<'_> {
    /// The logits (`[Σ len, vocab]`, the sequences one after another), outside any autograd
    /// graph: differentiate a loss with respect to them (through [`logprob_rows`], or from a
    /// [`Var`] made of them) and hand that gradient to [`TrainTape::backward`].
    pub fn logits(&self) -> &Tensor {
        &self.logits
    }

    /// The gradient of every weight ([`Transformer::params`] order) from `dlogits`, the gradient
    /// of the loss with respect to [`TrainTape::logits`].
    pub fn backward(self, dlogits: &Tensor) -> Result<Vec<Tensor>, ModelError> {
        self.backward_from(dlogits.contiguous()?)
    }

    /// [`TrainTape::backward`] for a loss on the log-probabilities [`logprob_rows`] computed
    /// (`rows`, with the same `targets` and `temperatures`), given its gradient `dlogprobs`
    /// with respect to them. The logits' gradient is written over the logits (no second matrix
    /// of `n · vocab`): [`TrainTape::logits`], and any clone of it, hold gradients afterwards.
    pub fn backward_from_logprobs(
        self,
        targets: &[u32],
        temperatures: &[f32],
        rows: &RowLogprobs,
        dlogprobs: &[f32],
    ) -> Result<Vec<Tensor>, ModelError> {
        check_grad_rows(&self.logits, targets, temperatures, rows, dlogprobs)?;
        let op = LogitGrads { targets, temperatures, lse: &rows.log_sum_exp, dlogprobs };
        self.logits.inplace_op1(&op)?;
        let dlogits = self.logits.clone();
        self.backward_from(dlogits)
    }

    /// The backward pass from the logits' gradient (which may share the logits' storage).
    fn backward_from(mut self, dlogits: Tensor) -> Result<Vec<Tensor>, ModelError> {
        // The logits are done with: free them now unless `dlogits` was written over them.
        drop(self.logits);
        let model = self.model;
        let cfg = &model.cfg;
        let mut grads = Grads::new(&model.params);
        let lm_head = model.lm_head.detach();
        let dhead_in = dlogits.matmul(&lm_head)?;
        let head_name =
            if cfg.tie_word_embeddings { "model.embed_tokens.weight" } else { "lm_head.weight" };
        grads.add(head_name, dlogits.t()?.matmul(&self.head_in)?)?;
        drop(dlogits);
        let (mut dx, dnorm) =
            rms_norm_rows_backward(&dhead_in, &self.last, &model.norm, &self.last_rstd)?;
        grads.add("model.norm.weight", dnorm)?;
        for l in (0..model.layers.len()).rev() {
            let tape = match self.blocks.pop() {
                Some(Saved::Tape(t)) => *t,
                Some(Saved::Input(x)) => model.block_tape(l, &x, &self.packed)?.0,
                None => {
                    return Err(candle_core::Error::Msg(format!("no tape for block {l}")).into());
                }
            };
            dx = model.block_backward(l, tape, &self.packed, &dx, &mut grads)?;
        }
        let embed = "model.embed_tokens.weight";
        let base = match grads.take(embed)? {
            Some(g) => g,
            None => model.embed.zeros_like()?,
        };
        // The embedding's gradient is the rows of `dx` added at their tokens' rows: added in place
        // (the tensor is this pass's own), not into a copy of the whole table.
        let ids = self.packed.ids.to_vec1::<u32>()?;
        base.inplace_op2(&dx.contiguous()?, &AddRows { ids })?;
        grads.add(embed, base)?;
        Ok(grads.finish(&model.params)?)
    }
}

impl Transformer {
    /// The backward pass of block `l` from the gradient `dy` of its output; adds the weights'
    /// gradients to `grads` and returns the gradient of the block's input.
    fn block_backward(
        &self,
        l: usize,
        t: BlockTape,
        packed: &Packed,
        dy: &Tensor,
        grads: &mut Grads,
    ) -> candle_core::Result<Tensor> {
        let layer = &self.layers[l];
        let p = |name: &str| format!("model.layers.{l}.{name}");
        let n = t.x.dim(0)?;
        let dh2 = match (&layer.mlp, t.mlp) {
            (Mlp::Dense(ffn), MlpTape::Dense { a, b, m }) => {
                let dm = dy.matmul(&ffn.down.detach())?;
                grads.add(&p("mlp.down_proj.weight"), dy.t()?.matmul(&m)?)?;
                drop(m);
                let (da, db) = silu_mul_backward(&dm, &a, &b)?;
                drop((dm, a, b));
                grads.add(&p("mlp.gate_proj.weight"), da.t()?.matmul(&t.h2)?)?;
                grads.add(&p("mlp.up_proj.weight"), db.t()?.matmul(&t.h2)?)?;
                (da.matmul(&ffn.gate.detach())? + db.matmul(&ffn.up.detach())?)?
            }
            (_, MlpTape::Graph { input, out }) => {
                let store = (out * dy)?.sum_all()?.backward()?;
                grads.add_from(&store, &self.params, &p("mlp."))?;
                grad_or_zeros(&store, input.as_tensor())?
            }
            (_, MlpTape::Dense { .. }) => {
                candle_core::bail!("block {l}: the tape is not its MLP's")
            }
        };
        let (dx2_norm, dpost) = rms_norm_rows_backward(&dh2, &t.x2, &layer.post_norm, &t.rstd2)?;
        drop(dh2);
        grads.add(&p("post_attention_layernorm.weight"), dpost)?;
        let dx2 = (dy + dx2_norm)?;
        let dattn = dx2.matmul(&layer.o.detach())?;
        grads.add(&p("self_attn.o_proj.weight"), dx2.t()?.matmul(&t.attn_out)?)?;
        let (dq, dk, dv) = attention_backward(&t.attn, &t.attn_out, &dattn)?;
        drop((t.attn, t.attn_out, dattn));
        let dq = rope_rows(&dq, &packed.rope, true)?;
        let dk = rope_rows(&dk, &packed.rope, true)?;
        let (dq, dk) = match (t.qk_norm, &layer.q_norm, &layer.k_norm) {
            (Some([(q_raw, q_rstd), (k_raw, k_rstd)]), Some(qn), Some(kn)) => {
                let (dq, dqn) =
                    rms_norm_rows_backward(&dq.reshape(q_raw.dims())?, &q_raw, qn, &q_rstd)?;
                let (dk, dkn) =
                    rms_norm_rows_backward(&dk.reshape(k_raw.dims())?, &k_raw, kn, &k_rstd)?;
                grads.add(&p("self_attn.q_norm.weight"), dqn)?;
                grads.add(&p("self_attn.k_norm.weight"), dkn)?;
                (dq, dk)
            }
            _ => (dq, dk),
        };
        let dq = dq.reshape((n, ()))?;
        let dk = dk.reshape((n, ()))?;
        let dv = dv.reshape((n, ()))?;
        let mut dh = None;
        for (name, d, w, bias) in [
            ("q_proj", &dq, &layer.q, &layer.q_bias),
            ("k_proj", &dk, &layer.k, &layer.k_bias),
            ("v_proj", &dv, &layer.v, &layer.v_bias),
        ] {
            grads.add(&p(&format!("self_attn.{name}.weight")), d.t()?.matmul(&t.h)?)?;
            if bias.is_some() {
                grads.add(&p(&format!("self_attn.{name}.bias")), d.sum(0)?)?;
            }
            let part = d.matmul(&w.detach())?;
            dh = Some(match dh {
                Some(acc) => (acc + part)?,
                None => part,
            });
        }
        let dh = dh.ok_or_else(|| candle_core::Error::Msg("no projections".into()))?;
        let (dx_norm, dinput) = rms_norm_rows_backward(&dh, &t.x, &layer.input_norm, &t.rstd)?;
        grads.add(&p("input_layernorm.weight"), dinput)?;
        dx2 + dx_norm
    }
}

/// Gradients being summed, one slot per weight.
struct Grads {
    index: HashMap<String, usize>,
    slots: Vec<Option<Tensor>>,
}

impl Grads {
    fn new(params: &[(String, Var)]) -> Self {
        Self {
            index: params.iter().enumerate().map(|(i, (n, _))| (n.clone(), i)).collect(),
            slots: vec![None; params.len()],
        }
    }

    fn slot(&self, name: &str) -> candle_core::Result<usize> {
        self.index
            .get(name)
            .copied()
            .ok_or_else(|| candle_core::Error::Msg(format!("the model has no weight `{name}`")))
    }

    fn add(&mut self, name: &str, g: Tensor) -> candle_core::Result<()> {
        let i = self.slot(name)?;
        self.slots[i] = Some(match self.slots[i].take() {
            Some(acc) => (acc + g)?,
            None => g,
        });
        Ok(())
    }

    fn take(&mut self, name: &str) -> candle_core::Result<Option<Tensor>> {
        let i = self.slot(name)?;
        Ok(self.slots[i].take())
    }

    /// Adds the gradients `store` holds for the weights whose name starts with `prefix`.
    fn add_from(
        &mut self,
        store: &GradStore,
        params: &[(String, Var)],
        prefix: &str,
    ) -> candle_core::Result<()> {
        for (name, var) in params.iter().filter(|(n, _)| n.starts_with(prefix)) {
            if let Some(g) = store.get(var.as_tensor()) {
                self.add(name, g.clone())?;
            }
        }
        Ok(())
    }

    /// Every weight's gradient, zeros for a weight nothing reached.
    fn finish(self, params: &[(String, Var)]) -> candle_core::Result<Vec<Tensor>> {
        self.slots
            .into_iter()
            .zip(params)
            .map(|(g, (_, p))| match g {
                Some(g) => Ok(g),
                None => p.as_tensor().zeros_like(),
            })
            .collect()
    }
}

fn grad_or_zeros(store: &GradStore, t: &Tensor) -> candle_core::Result<Tensor> {
    match store.get(t) {
        Some(g) => Ok(g.clone()),
        None => t.zeros_like(),
    }
}

/// The f32 values of a contiguous CPU tensor, borrowed.
struct F32s<'a> {
    guard: StorageRef<'a>,
    start: usize,
    len: usize,
}

impl Deref for F32s<'_> {
    type Target = [f32];
    fn deref(&self) -> &[f32] {
        match &*self.guard {
            Storage::Cpu(CpuStorage::F32(v)) => &v[self.start..self.start + self.len],
            // `f32s` admits nothing else.
            _ => &[],
        }
    }
}

fn f32s(t: &Tensor) -> candle_core::Result<F32s<'_>> {
    if !t.is_contiguous() {
        candle_core::bail!("a row kernel got a non-contiguous tensor of shape {:?}", t.dims());
    }
    let (guard, layout) = t.storage_and_layout();
    if !matches!(&*guard, Storage::Cpu(CpuStorage::F32(_))) {
        candle_core::bail!("a row kernel needs f32 on the CPU, got {:?}", t.dtype());
    }
    Ok(F32s { start: layout.start_offset(), len: t.elem_count(), guard })
}

/// `e^x` in f32 from a polynomial on `[-ln 2 / 2, ln 2 / 2]` and a power of two built from bits,
/// within 5e-7 relative of f64's `exp` over `[-87, 88]` (tested); branch-free, so loops over it
/// vectorise where `f32::exp` is a library call per element. Below −87.3 it gives about 1e-38
/// instead of a subnormal or zero, above 88.3 (+∞ included) about 2.2e38 instead of +∞; NaN
/// stays NaN. The kernels only take it of values shifted by a row maximum (≤ 0), or of `-x` in
/// the SiLU, where both limits round away.
#[inline(always)]
pub fn exp_approx(x: f32) -> f32 {
    const LOG2E: f32 = std::f32::consts::LOG2_E;
    // ln 2 split in two, so that `x − n·ln 2` loses nothing.
    const LN2_HI: f32 = 0.693_359_4;
    const LN2_LO: f32 = -2.121_944_4e-4;
    // Adding and subtracting 1.5·2²³ rounds to the nearest integer.
    const ROUND: f32 = 12_582_912.0;
    let x = x.clamp(-87.3, 88.3);
    let n = (x * LOG2E + ROUND) - ROUND;
    let r = x - n * LN2_HI - n * LN2_LO;
    let mut p = 1.987_569_1e-4f32;
    p = p * r + 1.398_2e-3;
    p = p * r + 8.333_452e-3;
    p = p * r + 4.166_579_6e-2;
    p = p * r + 0.166_666_65;
    p = p * r + 0.5;
    let e = p * r * r + r + 1.0;
    e * f32::from_bits(((n as i32 + 127) as u32) << 23)
}

/// Sum of `a[i] · b[i]` in sixteen lanes (so that it vectorises).
#[inline(always)]
fn dot(a: &[f32], b: &[f32]) -> f32 {
    let mut lanes = [0f32; 16];
    let (ca, cb) = (a.chunks_exact(16), b.chunks_exact(16));
    let tail: f32 = ca.remainder().iter().zip(cb.remainder()).map(|(x, y)| x * y).sum();
    for (x, y) in ca.zip(cb) {
        for i in 0..16 {
            lanes[i] += x[i] * y[i];
        }
    }
    lanes.iter().sum::<f32>() + tail
}

/// RMS norm of each row of `x` (`[n, d]`) times `w` (`[d]`): the normalised rows and
/// `1 / sqrt(mean(x²) + eps)` of each row (`[n]`).
fn rms_norm_rows(x: &Tensor, w: &Tensor, eps: f64) -> candle_core::Result<(Tensor, Tensor)> {
    let x = x.contiguous()?;
    let (n, d) = x.dims2()?;
    let (xs, ws) = (f32s(&x)?, f32s(w)?);
    let (xs, ws): (&[f32], &[f32]) = (&xs, &ws);
    let mut y = vec![0f32; n * d];
    let mut r = vec![0f32; n];
    y.par_chunks_mut(ROWS_PER_TASK * d).zip(r.par_chunks_mut(ROWS_PER_TASK)).enumerate().for_each(
        |(task, (y, r))| {
            let x = &xs[task * ROWS_PER_TASK * d..];
            for ((y, r), x) in y.chunks_mut(d).zip(r.iter_mut()).zip(x.chunks(d)) {
                *r = 1.0 / (dot(x, x) / d as f32 + eps as f32).sqrt();
                for ((y, x), w) in y.iter_mut().zip(x).zip(ws) {
                    *y = x * *r * w;
                }
            }
        },
    );
    Ok((Tensor::from_vec(y, (n, d), &Device::Cpu)?, Tensor::from_vec(r, n, &Device::Cpu)?))
}

/// The backward pass of [`rms_norm_rows`]: from the gradient `dy` of the output, the gradients
/// of `x` and of `w` (summed over rows in a fixed order).
fn rms_norm_rows_backward(
    dy: &Tensor,
    x: &Tensor,
    w: &Tensor,
    rstd: &Tensor,
) -> candle_core::Result<(Tensor, Tensor)> {
    let dy = dy.contiguous()?;
    let (n, d) = x.dims2()?;
    if dy.dims() != x.dims() {
        candle_core::bail!("rms norm backward: gradient {:?} for input {:?}", dy.dims(), x.dims());
    }
    let (dys, xs, ws, rs) = (f32s(&dy)?, f32s(x)?, f32s(w)?, f32s(rstd)?);
    let (dys, xs, ws, rs): (&[f32], &[f32], &[f32], &[f32]) = (&dys, &xs, &ws, &rs);
    let mut dx = vec![0f32; n * d];
    let partials: Vec<Vec<f32>> = dx
        .par_chunks_mut(ROWS_PER_TASK * d)
        .enumerate()
        .map(|(task, dx)| {
            let first = task * ROWS_PER_TASK;
            let mut dw = vec![0f32; d];
            let mut g = vec![0f32; d];
            for (i, dx) in dx.chunks_mut(d).enumerate() {
                let row = first + i;
                let (dy, x, r) =
                    (&dys[row * d..(row + 1) * d], &xs[row * d..(row + 1) * d], rs[row]);
                for (((g, dy), w), (dw, x)) in
                    g.iter_mut().zip(dy).zip(ws).zip(dw.iter_mut().zip(x))
                {
                    *g = dy * w;
                    *dw += dy * x * r;
                }
                let c = dot(&g, x) * r * r * r / d as f32;
                for ((dx, g), x) in dx.iter_mut().zip(&g).zip(x) {
                    *dx = r * g - x * c;
                }
            }
            dw
        })
        .collect();
    let mut dw = vec![0f32; d];
    for part in partials {
        for (a, b) in dw.iter_mut().zip(part) {
            *a += b;
        }
    }
    Ok((Tensor::from_vec(dx, (n, d), &Device::Cpu)?, Tensor::from_vec(dw, d, &Device::Cpu)?))
}

/// Elements an element-wise kernel hands to one task.
const ELEMENTS_PER_TASK: usize = 1 << 14;

/// `silu(a) · b`, with `silu(a) = a / (1 + exp(-a))`.
fn silu_mul(a: &Tensor, b: &Tensor) -> candle_core::Result<Tensor> {
    if a.dims() != b.dims() {
        candle_core::bail!("silu · up: shapes {:?} and {:?}", a.dims(), b.dims());
    }
    let (a_s, b_s) = (f32s(a)?, f32s(b)?);
    let (a_s, b_s): (&[f32], &[f32]) = (&a_s, &b_s);
    let mut m = vec![0f32; a_s.len()];
    m.par_chunks_mut(ELEMENTS_PER_TASK).enumerate().for_each(|(task, m)| {
        let start = task * ELEMENTS_PER_TASK;
        silu_mul_slice(m, &a_s[start..], &b_s[start..]);
    });
    Tensor::from_vec(m, a.shape(), &Device::Cpu)
}

/// The backward pass of [`silu_mul`]: the gradients of `a` and `b` from that of the product.
fn silu_mul_backward(dm: &Tensor, a: &Tensor, b: &Tensor) -> candle_core::Result<(Tensor, Tensor)> {
    let dm = dm.contiguous()?;
    if dm.dims() != a.dims() || a.dims() != b.dims() {
        candle_core::bail!(
            "silu · up backward: shapes {:?}, {:?}, {:?}",
            dm.dims(),
            a.dims(),
            b.dims()
        );
    }
    let (dms, a_s, b_s) = (f32s(&dm)?, f32s(a)?, f32s(b)?);
    let (dms, a_s, b_s): (&[f32], &[f32], &[f32]) = (&dms, &a_s, &b_s);
    let mut da = vec![0f32; a_s.len()];
    let mut db = vec![0f32; a_s.len()];
    da.par_chunks_mut(ELEMENTS_PER_TASK)
        .zip(db.par_chunks_mut(ELEMENTS_PER_TASK))
        .enumerate()
        .for_each(|(task, (da, db))| {
            let start = task * ELEMENTS_PER_TASK;
            silu_mul_backward_slice(da, db, &dms[start..], &a_s[start..], &b_s[start..]);
        });
    Ok((
        Tensor::from_vec(da, a.shape(), &Device::Cpu)?,
        Tensor::from_vec(db, a.shape(), &Device::Cpu)?,
    ))
}

/// What [`logprob_rows`] computes for each row of the logits.
#[derive(Debug, Clone)]
pub struct RowLogprobs {
    /// `log p(target)` under `softmax(logits / temperature)`.
    pub logprobs: Vec<f32>,
    /// Entropy of that distribution.
    pub entropy: Vec<f32>,
    /// `log Σ exp(logits / temperature)`, for the backward pass.
    log_sum_exp: Vec<f32>,
}

fn check_rows(
    logits: &Tensor,
    targets: &[u32],
    temperatures: &[f32],
) -> candle_core::Result<(usize, usize)> {
    let (n, vocab) = logits.dims2()?;
    if targets.len() != n || temperatures.len() != n {
        candle_core::bail!(
            "{n} logit rows for {} targets and {} temperatures",
            targets.len(),
            temperatures.len()
        );
    }
    if let Some(t) = targets.iter().find(|&&t| t as usize >= vocab) {
        candle_core::bail!("target {t} is outside the vocabulary of {vocab}");
    }
    if let Some(t) = temperatures.iter().find(|t| !(t.is_finite() && **t > 0.0)) {
        candle_core::bail!("sampling temperature {t} is not a positive number");
    }
    Ok((n, vocab))
}

/// For each row `i` of `logits` (`[n, vocab]`, f32 on the CPU) under temperature
/// `temperatures[i]`: the log-probability of `targets[i]`, the entropy, and what the backward
/// pass needs. Two passes over each row while it is in cache, rows split across threads; the
/// logits are not copied (a log-softmax of the whole matrix would write `n · vocab` values).
pub fn logprob_rows(
    logits: &Tensor,
    targets: &[u32],
    temperatures: &[f32],
) -> Result<RowLogprobs, ModelError> {
    let (n, vocab) = check_rows(logits, targets, temperatures)?;
    let data = f32s(logits)?;
    let data: &[f32] = &data;
    let rows: Vec<(f32, f32, f32)> = (0..n)
        .into_par_iter()
        .map(|i| {
            let z = &data[i * vocab..(i + 1) * vocab];
            let inv_t = 1.0 / temperatures[i];
            let max = row_max(z) * inv_t;
            let (s, sz) = exp_sums(z, inv_t, max);
            let log_s = s.ln();
            let lse = max + log_s;
            (z[targets[i] as usize] * inv_t - lse, log_s - sz / s, lse)
        })
        .collect();
    Ok(RowLogprobs {
        logprobs: rows.iter().map(|r| r.0).collect(),
        entropy: rows.iter().map(|r| r.1).collect(),
        log_sum_exp: rows.iter().map(|r| r.2).collect(),
    })
}

/// Turns logits into their gradient in place (see [`TrainTape::backward_from_logprobs`]).
struct LogitGrads<'a> {
    targets: &'a [u32],
    temperatures: &'a [f32],
    lse: &'a [f32],
    dlogprobs: &'a [f32],
}

impl candle_core::InplaceOp1 for LogitGrads<'_> {
    fn name(&self) -> &'static str {
        "logit-grads"
    }

    fn cpu_fwd(&self, storage: &mut CpuStorage, layout: &Layout) -> candle_core::Result<()> {
        let CpuStorage::F32(data) = storage else {
            candle_core::bail!("logit-grads needs f32 logits");
        };
        let (n, vocab) = layout.shape().dims2()?;
        if !layout.is_contiguous() || n != self.targets.len() {
            candle_core::bail!("logit-grads: {n} rows for {} targets", self.targets.len());
        }
        let data = &mut data[layout.start_offset()..layout.start_offset() + n * vocab];
        data.par_chunks_mut(vocab).enumerate().for_each(|(i, z)| {
            let (g, inv_t) = (self.dlogprobs[i], 1.0 / self.temperatures[i]);
            if g == 0.0 {
                // A row the loss does not use has no gradient, unless its logits are not finite:
                // then NaN, as autograd's `0 · NaN` gives, so that the step is skipped.
                z.fill(if self.lse[i].is_finite() { 0.0 } else { f32::NAN });
                return;
            }
            scaled_probs_in_place(z, inv_t, self.lse[i], -g * inv_t);
            z[self.targets[i] as usize] += g * inv_t;
        });
        Ok(())
    }
}

/// The gradient of a loss with respect to `logits` given its gradient `dlogprobs` with respect
/// to the log-probabilities [`logprob_rows`] returned: `dlogits[i, j] = dlogprobs[i] ·
/// (1[j = target] − p[i, j]) / temperature[i]`, in a new matrix (the trainer writes it over the
/// logits instead, [`TrainTape::backward_from_logprobs`]).
pub fn logprob_rows_backward(
    logits: &Tensor,
    targets: &[u32],
    temperatures: &[f32],
    rows: &RowLogprobs,
    dlogprobs: &[f32],
) -> Result<Tensor, ModelError> {
    check_grad_rows(logits, targets, temperatures, rows, dlogprobs)?;
    let out = logits.copy()?;
    out.inplace_op1(&LogitGrads { targets, temperatures, lse: &rows.log_sum_exp, dlogprobs })?;
    Ok(out)
}

/// [`check_rows`], and one gradient and one saved row per logit row.
fn check_grad_rows(
    logits: &Tensor,
    targets: &[u32],
    temperatures: &[f32],
    rows: &RowLogprobs,
    dlogprobs: &[f32],
) -> candle_core::Result<()> {
    let (n, _) = check_rows(logits, targets, temperatures)?;
    if dlogprobs.len() != n || rows.log_sum_exp.len() != n {
        candle_core::bail!(
            "{n} logit rows for {} gradients and {} saved rows",
            dlogprobs.len(),
            rows.log_sum_exp.len()
        );
    }
    Ok(())
}

/// Rotates `x` (`[n, heads, head_dim]`, row `i` at the `i`-th position of `rope`) by the rotary
/// angles, or by their negatives with `inverse` (the backward pass: a rotation's transpose is its
/// inverse). The part of each head past the rotary width passes through.
fn rope_rows(x: &Tensor, rope: &crate::ops::RopeAt, inverse: bool) -> candle_core::Result<Tensor> {
    let x = x.contiguous()?;
    let (n, heads, hd) = x.dims3()?;
    let half = rope.rotary_dim / 2;
    if rope.rotary_dim > hd || rope.cos.dims() != [n, 1, half] {
        candle_core::bail!(
            "rotary tables {:?} for {n} rows of {heads} heads of {hd}",
            rope.cos.dims()
        );
    }
    let (cos, sin) = (rope.cos.to_dtype(DType::F32)?, rope.sin.to_dtype(DType::F32)?);
    let (xs, cs, ss) = (f32s(&x)?, f32s(&cos)?, f32s(&sin)?);
    let (xs, cs, ss): (&[f32], &[f32], &[f32]) = (&xs, &cs, &ss);
    let sign = if inverse { -1.0f32 } else { 1.0 };
    let width = heads * hd;
    let mut out = xs.to_vec();
    out.par_chunks_mut(width).enumerate().with_min_len(16).for_each(|(i, row)| {
        let (c, s) = (&cs[i * half..(i + 1) * half], &ss[i * half..(i + 1) * half]);
        let x = &xs[i * width..(i + 1) * width];
        for (o, x) in row.chunks_mut(hd).zip(x.chunks(hd)) {
            for j in 0..half {
                let (x1, x2, s) = (x[j], x[j + half], sign * s[j]);
                o[j] = x1 * c[j] - x2 * s;
                o[j + half] = x2 * c[j] + x1 * s;
            }
        }
    });
    Tensor::from_vec(out, (n, heads, hd), &Device::Cpu)
}

/// What the attention forward pass keeps: the rotated queries and keys, the values, and the
/// log-sum-exp of each query row's scores (the probabilities are recomputed from them in the
/// backward pass, so memory does not grow with the square of the sequence length).
#[derive(Debug)]
struct AttnTape {
    /// `[n, heads, head_dim]`
    q: Tensor,
    /// `[n, kv_heads, head_dim]`
    k: Tensor,
    v: Tensor,
    /// `[n, heads]`
    lse: Vec<f32>,
    spans: Vec<(usize, usize)>,
}

/// Shapes of one attention call.
#[derive(Debug, Clone, Copy)]
struct Dims {
    heads: usize,
    kv_heads: usize,
    hd: usize,
    scale: f32,
}

impl Dims {
    fn group(&self) -> usize {
        self.heads / self.kv_heads
    }
}

/// Causal attention of the independent sequences `spans` of `q` (`[n, heads, head_dim]`), `k`
/// and `v` (`[n, kv_heads, head_dim]`); query heads share key/value heads in consecutive groups.
/// Returns the output (`[n, heads · head_dim]`) and what [`attention_backward`] needs.
///
/// Work is split by (sequence, key/value head): each task reads that head's keys and values
/// (transposed once into a local buffer, so scores are sums of contiguous multiply-adds) for all
/// the query heads of its group, and only sees positions at or before each query: no padding,
/// no masked products.
fn attention_forward(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    spans: &[(usize, usize)],
) -> candle_core::Result<(Tensor, AttnTape)> {
    let (q, k, v) = (q.contiguous()?, k.contiguous()?, v.contiguous()?);
    let (n, heads, hd) = q.dims3()?;
    let (kn, kv_heads, khd) = k.dims3()?;
    if kv_heads == 0 || heads % kv_heads != 0 || kn != n || khd != hd || v.dims() != k.dims() {
        candle_core::bail!(
            "attention: queries {:?}, keys {:?}, values {:?}",
            q.dims(),
            k.dims(),
            v.dims()
        );
    }
    let covered: usize = spans.iter().map(|s| s.1).sum();
    if covered != n {
        candle_core::bail!("attention: spans cover {covered} of {n} rows");
    }
    let dims = Dims { heads, kv_heads, hd, scale: 1.0 / (hd as f32).sqrt() };
    let (out, lse) = attention_rows(&q, &k, &v, spans, dims, n)?;
    let out = Tensor::from_vec(out, (n, heads * hd), &Device::Cpu)?;
    Ok((out, AttnTape { q, k, v, lse, spans: spans.to_vec() }))
}

/// The work of [`attention_forward`] on borrowed data: outputs and log-sum-exps by row.
fn attention_rows(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    spans: &[(usize, usize)],
    dims: Dims,
    n: usize,
) -> candle_core::Result<(Vec<f32>, Vec<f32>)> {
    let Dims { heads, kv_heads, hd, .. } = dims;
    let (qs, ks, vs) = (f32s(q)?, f32s(k)?, f32s(v)?);
    let (qs, ks, vs): (&[f32], &[f32], &[f32]) = (&qs, &ks, &vs);
    let tasks: Vec<(usize, usize, usize)> = spans
        .iter()
        .flat_map(|&(offset, len)| (0..kv_heads).map(move |g| (offset, len, g)))
        .collect();
    let results: Vec<(Vec<f32>, Vec<f32>)> = tasks
        .par_iter()
        .map(|&(offset, len, g)| attend(qs, ks, vs, dims, offset, len, g))
        .collect();
    let group = dims.group();
    let mut out = vec![0f32; n * heads * hd];
    let mut lse = vec![0f32; n * heads];
    for (&(offset, len, g), (o, l)) in tasks.iter().zip(&results) {
        for i in 0..len {
            let row = offset + i;
            let dst =
                &mut out[(row * heads + g * group) * hd..(row * heads + (g + 1) * group) * hd];
            dst.copy_from_slice(&o[i * group * hd..(i + 1) * group * hd]);
            lse[row * heads + g * group..row * heads + (g + 1) * group]
                .copy_from_slice(&l[i * group..(i + 1) * group]);
        }
    }
    Ok((out, lse))
}

/// Columns of [`transposed`] buffers: the sequence length rounded up to a whole number of
/// 64-key blocks (the padding is zero).
fn padded(len: usize) -> usize {
    len.div_ceil(64) * 64
}

/// `t[d · padded(len) + j] = x[(offset + j) · stride + head · hd + d]`: one head's rows of a
/// sequence, transposed.
fn transposed(
    x: &[f32],
    offset: usize,
    len: usize,
    stride: usize,
    head: usize,
    hd: usize,
) -> Vec<f32> {
    let cols = padded(len);
    let mut t = vec![0f32; hd * cols];
    for j in 0..len {
        let start = (offset + j) * stride + head * hd;
        for (d, &value) in x[start..start + hd].iter().enumerate() {
            t[d * cols + j] = value;
        }
    }
    t
}

/// Query rows an attention task takes at a time: each key (and value) row read is used for this
/// many query rows while it sits in registers, rather than for one.
const ROWS: usize = 4;

/// The query rows of one (sequence, key/value head) task: row `r` is head `r % group` of the
/// group at position `r / group` of the sequence, `hd` values at `((offset + r / group) · heads +
/// g · group + r % group) · hd` of a `[n, heads, hd]` buffer.
#[derive(Clone, Copy)]
struct TaskRows {
    offset: usize,
    heads: usize,
    group: usize,
    g: usize,
    hd: usize,
}

impl TaskRows {
    #[inline(always)]
    fn row(self, x: &[f32], r: usize) -> &[f32] {
        let at =
            ((self.offset + r / self.group) * self.heads + self.g * self.group + r % self.group)
                * self.hd;
        &x[at..at + self.hd]
    }

    #[inline(always)]
    fn rows<const R: usize>(self, x: &[f32], r0: usize) -> [&[f32]; R] {
        std::array::from_fn(|r| self.row(x, r0 + r))
    }
}

/// One (sequence, key/value head) of [`attention_forward`]: the outputs (`[len, group, hd]`)
/// and log-sum-exps (`[len, group]`) of the group's query heads, [`ROWS`] query rows at a time.
#[multiversion(targets("x86_64+avx512f+avx512vl+avx2+fma", "x86_64+avx2+fma", "aarch64+neon"))]
fn attend(
    q: &[f32],
    k: &[f32],
    v: &[f32],
    dims: Dims,
    offset: usize,
    len: usize,
    g: usize,
) -> (Vec<f32>, Vec<f32>) {
    let Dims { heads, kv_heads, hd, scale } = dims;
    let group = dims.group();
    let at = TaskRows { offset, heads, group, g, hd };
    let kt = transposed(k, offset, len, kv_heads * hd, g, hd);
    let vrows = Rows { data: &v[(offset * kv_heads + g) * hd..], stride: kv_heads * hd };
    let rows = len * group;
    let mut out = vec![0f32; rows * hd];
    let mut lse = vec![0f32; rows];
    let mut scores = vec![0f32; ROWS * len];
    let mut r0 = 0;
    while r0 < rows {
        let nr = ROWS.min(rows - r0);
        // Keys up to the last row's position; each row then keeps those at or before its own.
        let width = (r0 + nr - 1) / group + 1;
        let s = &mut scores[..nr * len];
        if nr == ROWS {
            causal_scores::<ROWS>(s, len, at.rows(q, r0), &kt, padded(len), width, scale);
        } else {
            for r in 0..nr {
                let s = &mut s[r * len..(r + 1) * len];
                causal_scores::<1>(s, len, at.rows(q, r0 + r), &kt, padded(len), width, scale);
            }
        }
        for r in 0..nr {
            let row = &mut s[r * len..r * len + width];
            let (seen, unseen) = row.split_at_mut((r0 + r) / group + 1);
            unseen.fill(0.0);
            let max = lane_max(seen);
            let sum = exp_in_place(seen, max);
            let inv = 1.0 / sum;
            for p in seen.iter_mut() {
                *p *= inv;
            }
            lse[r0 + r] = max + sum.ln();
        }
        weighted_rows(&mut out[r0 * hd..(r0 + nr) * hd], hd, s, len, vrows, width);
        r0 += nr;
    }
    (out, lse)
}

/// The gradients of the queries, keys and values (`[n, heads, head_dim]`, `[n, kv_heads,
/// head_dim]` twice) from the attention output `out` and its gradient `dout` (both `[n, heads ·
/// head_dim]`).
fn attention_backward(
    tape: &AttnTape,
    out: &Tensor,
    dout: &Tensor,
) -> candle_core::Result<(Tensor, Tensor, Tensor)> {
    let (n, heads, hd) = tape.q.dims3()?;
    let (_, kv_heads, _) = tape.k.dims3()?;
    let dout = dout.contiguous()?;
    if dout.dims() != [n, heads * hd] || out.dims() != dout.dims() {
        candle_core::bail!("attention backward: gradient {:?} for {n} rows", dout.dims());
    }
    let dims = Dims { heads, kv_heads, hd, scale: 1.0 / (hd as f32).sqrt() };
    let (qs, ks, vs) = (f32s(&tape.q)?, f32s(&tape.k)?, f32s(&tape.v)?);
    let (os, dos) = (f32s(out)?, f32s(&dout)?);
    let (qs, ks, vs): (&[f32], &[f32], &[f32]) = (&qs, &ks, &vs);
    let (os, dos): (&[f32], &[f32]) = (&os, &dos);
    let tasks: Vec<(usize, usize, usize)> = tape
        .spans
        .iter()
        .flat_map(|&(offset, len)| (0..kv_heads).map(move |g| (offset, len, g)))
        .collect();
    let lse = &tape.lse;
    let results: Vec<[Vec<f32>; 3]> = tasks
        .par_iter()
        .map(|&(offset, len, g)| attend_backward(qs, ks, vs, os, dos, lse, dims, offset, len, g))
        .collect();
    let group = dims.group();
    let mut dq = vec![0f32; n * heads * hd];
    let mut dk = vec![0f32; n * kv_heads * hd];
    let mut dv = vec![0f32; n * kv_heads * hd];
    for (&(offset, len, g), [q, k, v]) in tasks.iter().zip(&results) {
        for i in 0..len {
            let row = offset + i;
            dq[(row * heads + g * group) * hd..(row * heads + (g + 1) * group) * hd]
                .copy_from_slice(&q[i * group * hd..(i + 1) * group * hd]);
            let kv = (row * kv_heads + g) * hd..(row * kv_heads + g + 1) * hd;
            dk[kv.clone()].copy_from_slice(&k[i * hd..(i + 1) * hd]);
            dv[kv].copy_from_slice(&v[i * hd..(i + 1) * hd]);
        }
    }
    Ok((
        Tensor::from_vec(dq, (n, heads, hd), &Device::Cpu)?,
        Tensor::from_vec(dk, (n, kv_heads, hd), &Device::Cpu)?,
        Tensor::from_vec(dv, (n, kv_heads, hd), &Device::Cpu)?,
    ))
}

/// One (sequence, key/value head) of [`attention_backward`]: the gradients of the group's query
/// heads (`[len, group, hd]`) and of the head's keys and values (`[len, hd]` each), [`ROWS`]
/// query rows at a time.
#[allow(clippy::too_many_arguments, reason = "the slices and shapes of one attention task")]
#[multiversion(targets("x86_64+avx512f+avx512vl+avx2+fma", "x86_64+avx2+fma", "aarch64+neon"))]
fn attend_backward(
    q: &[f32],
    k: &[f32],
    v: &[f32],
    out: &[f32],
    dout: &[f32],
    lse: &[f32],
    dims: Dims,
    offset: usize,
    len: usize,
    g: usize,
) -> [Vec<f32>; 3] {
    let Dims { heads, kv_heads, hd, scale } = dims;
    let group = dims.group();
    let at = TaskRows { offset, heads, group, g, hd };
    let kt = transposed(k, offset, len, kv_heads * hd, g, hd);
    let vt = transposed(v, offset, len, kv_heads * hd, g, hd);
    let krows = Rows { data: &k[(offset * kv_heads + g) * hd..], stride: kv_heads * hd };
    let rows = len * group;
    let mut dq = vec![0f32; rows * hd];
    let mut dk = vec![0f32; len * hd];
    let mut dv = vec![0f32; len * hd];
    let (mut p, mut ds) = (vec![0f32; ROWS * len], vec![0f32; ROWS * len]);
    let mut r0 = 0;
    while r0 < rows {
        let nr = ROWS.min(rows - r0);
        let width = (r0 + nr - 1) / group + 1;
        let (p, ds) = (&mut p[..nr * len], &mut ds[..nr * len]);
        if nr == ROWS {
            causal_scores::<ROWS>(p, len, at.rows(q, r0), &kt, padded(len), width, scale);
            causal_scores::<ROWS>(ds, len, at.rows(dout, r0), &vt, padded(len), width, 1.0);
        } else {
            for r in 0..nr {
                let (pr, dsr) = (&mut p[r * len..(r + 1) * len], &mut ds[r * len..(r + 1) * len]);
                causal_scores::<1>(pr, len, at.rows(q, r0 + r), &kt, padded(len), width, scale);
                causal_scores::<1>(dsr, len, at.rows(dout, r0 + r), &vt, padded(len), width, 1.0);
            }
        }
        for r in 0..nr {
            let row = r0 + r;
            let seen = row / group + 1;
            let pr = &mut p[r * len..r * len + width];
            exp_in_place(
                &mut pr[..seen],
                lse[(offset + row / group) * heads + g * group + row % group],
            );
            pr[seen..].fill(0.0);
            // dS = P ⊙ (dP − rowsum(P ⊙ dP)), and rowsum(P ⊙ dP) = dO · O.
            let d = dot(at.row(dout, row), at.row(out, row));
            let dsr = &mut ds[r * len..r * len + width];
            for (ds, &p) in dsr[..seen].iter_mut().zip(pr.iter()) {
                *ds = p * (*ds - d) * scale;
            }
            dsr[seen..].fill(0.0);
        }
        weighted_rows(&mut dq[r0 * hd..(r0 + nr) * hd], hd, ds, len, krows, width);
        if nr == ROWS {
            outer_add::<ROWS>(&mut dk, ds, len, at.rows(q, r0), width);
            outer_add::<ROWS>(&mut dv, p, len, at.rows(dout, r0), width);
        } else {
            for r in 0..nr {
                outer_add::<1>(&mut dk, &ds[r * len..], len, at.rows(q, r0 + r), width);
                outer_add::<1>(&mut dv, &p[r * len..], len, at.rows(dout, r0 + r), width);
            }
        }
        r0 += nr;
    }
    [dq, dk, dv]
}

/// Rows of a matrix, `stride` apart in a flat buffer.
#[derive(Clone, Copy)]
struct Rows<'a> {
    data: &'a [f32],
    stride: usize,
}

/// `s[r · ld + t] = scale · Σ_d x[r][d] · kt[d · cols + t]` for `t < width`: `R` query rows
/// against the keys over their transpose (`kt`, `cols` ≥ `width` rounded up to 64 columns), 64
/// keys at a time: each block of keys is loaded once for all `R` rows, whose `R · 64` sums stay
/// in registers.
#[inline(always)]
fn causal_scores<const R: usize>(
    s: &mut [f32],
    ld: usize,
    x: [&[f32]; R],
    kt: &[f32],
    cols: usize,
    width: usize,
    scale: f32,
) {
    let hd = x[0].len();
    let x = x.map(|x| &x[..hd]);
    for block in (0..width).step_by(64) {
        let mut acc = [[0f32; 64]; R];
        for d in 0..hd {
            let col = &kt[d * cols + block..d * cols + block + 64];
            for r in 0..R {
                let xd = x[r][d];
                for l in 0..64 {
                    acc[r][l] = xd.mul_add(col[l], acc[r][l]);
                }
            }
        }
        // Constant indices only, so that the sums stay in registers (an iterator over `acc`
        // would keep it in memory and store it on every step of the loop above).
        let n = width.min(block + 64) - block;
        for r in 0..R {
            let mut row = [0f32; 64];
            for l in 0..64 {
                row[l] = acc[r][l] * scale;
            }
            s[r * ld + block..r * ld + block + n].copy_from_slice(&row[..n]);
        }
    }
}

/// `out[r] += Σ_{t < width} w[r · ld + t] · rows[t]` for each `hd`-long row `r` of `out`
/// ([`ROWS`] of them, or fewer).
#[inline(always)]
fn weighted_rows(out: &mut [f32], hd: usize, w: &[f32], ld: usize, rows: Rows, width: usize) {
    if out.len() == ROWS * hd {
        weighted_rows_n::<ROWS>(out, hd, w, ld, rows, width);
    } else {
        for (r, out) in out.chunks_exact_mut(hd).enumerate() {
            weighted_rows_n::<1>(out, hd, &w[r * ld..], ld, rows, width);
        }
    }
}

/// [`weighted_rows`] for `R` rows: 64 columns at a time held in registers for all of them (then
/// 16, then one by one), so each row of `rows` is loaded once for `R` outputs.
#[inline(always)]
fn weighted_rows_n<const R: usize>(
    out: &mut [f32],
    hd: usize,
    w: &[f32],
    ld: usize,
    rows: Rows,
    width: usize,
) {
    let (wide, c) = column_blocks(hd);
    for b in (0..wide).step_by(64) {
        weighted_block::<R, 64>(out, hd, w, ld, rows, width, b);
    }
    for b in (wide..c).step_by(16) {
        weighted_block::<R, 16>(out, hd, w, ld, rows, width, b);
    }
    for r in 0..R {
        for t in 0..width {
            let wt = w[r * ld + t];
            for d in c..hd {
                out[r * hd + d] += wt * rows.data[t * rows.stride + d];
            }
        }
    }
}

/// How [`weighted_rows_n`] and [`outer_add`] split `hd` columns: whole blocks of 64 up to the
/// first returned column, whole blocks of 16 up to the second, the rest one by one.
///
/// The callers loop over the blocks themselves rather than pass a closure: a closure is compiled
/// as its own function, without the SIMD features of the multiversioned kernel that calls it, and
/// was not inlined (its `mul_add`s became calls to `fmaf`, making a training step 2-3x slower).
#[inline(always)]
fn column_blocks(hd: usize) -> (usize, usize) {
    let wide = hd / 64 * 64;
    (wide, wide + (hd - wide) / 16 * 16)
}

/// Columns `c..c + W` of [`weighted_rows_n`].
#[inline(always)]
fn weighted_block<const R: usize, const W: usize>(
    out: &mut [f32],
    hd: usize,
    w: &[f32],
    ld: usize,
    rows: Rows,
    width: usize,
    c: usize,
) {
    let mut acc = [[0f32; W]; R];
    for t in 0..width {
        let row = &rows.data[t * rows.stride + c..t * rows.stride + c + W];
        for r in 0..R {
            let wt = w[r * ld + t];
            for l in 0..W {
                acc[r][l] = wt.mul_add(row[l], acc[r][l]);
            }
        }
    }
    for r in 0..R {
        let out = &mut out[r * hd + c..r * hd + c + W];
        for l in 0..W {
            out[l] += acc[r][l];
        }
    }
}

/// `dst[t] += Σ_r w[r · ld + t] · x[r]` for `t < width` (`dst`'s rows as long as each `x[r]`):
/// the sum of `R` outer products, 64 columns at a time with the `R` rows of `x` held in registers
/// (then 16, then one by one), so each row of `dst` is read and written once for all of them.
#[inline(always)]
fn outer_add<const R: usize>(dst: &mut [f32], w: &[f32], ld: usize, x: [&[f32]; R], width: usize) {
    let hd = x[0].len();
    let (wide, c) = column_blocks(hd);
    for b in (0..wide).step_by(64) {
        outer_block::<R, 64>(dst, hd, w, ld, x, width, b);
    }
    for b in (wide..c).step_by(16) {
        outer_block::<R, 16>(dst, hd, w, ld, x, width, b);
    }
    for t in 0..width {
        for r in 0..R {
            let wt = w[r * ld + t];
            for d in c..hd {
                dst[t * hd + d] += wt * x[r][d];
            }
        }
    }
}

/// Columns `c..c + W` of [`outer_add`].
#[inline(always)]
fn outer_block<const R: usize, const W: usize>(
    dst: &mut [f32],
    hd: usize,
    w: &[f32],
    ld: usize,
    x: [&[f32]; R],
    width: usize,
    c: usize,
) {
    let xb: [[f32; W]; R] = std::array::from_fn(|r| std::array::from_fn(|l| x[r][c + l]));
    for t in 0..width {
        let d = &mut dst[t * hd + c..t * hd + c + W];
        let mut acc: [f32; W] = std::array::from_fn(|l| d[l]);
        for r in 0..R {
            let wt = w[r * ld + t];
            for l in 0..W {
                acc[l] = wt.mul_add(xb[r][l], acc[l]);
            }
        }
        // Element by element rather than `copy_from_slice(&acc)`, which takes `acc`'s address.
        #[allow(clippy::manual_memcpy, reason = "keeps the sums in registers")]
        for l in 0..W {
            d[l] = acc[l];
        }
    }
}

/// `s[t] = exp(s[t] − shift)`; returns their sum (in sixteen lanes, so that it vectorises).
#[inline(always)]
fn exp_in_place(s: &mut [f32], shift: f32) -> f32 {
    let mut lanes = [0f32; 16];
    let mut chunks = s.chunks_exact_mut(16);
    for c in &mut chunks {
        for l in 0..16 {
            c[l] = exp_approx(c[l] - shift);
            lanes[l] += c[l];
        }
    }
    let mut sum = 0f32;
    for s in chunks.into_remainder() {
        *s = exp_approx(*s - shift);
        sum += *s;
    }
    lanes.iter().sum::<f32>() + sum
}

/// The largest of `s` (NaNs passed over), in sixteen lanes.
#[inline(always)]
fn lane_max(s: &[f32]) -> f32 {
    let mut lanes = [f32::NEG_INFINITY; 16];
    let chunks = s.chunks_exact(16);
    let tail = chunks.remainder();
    for c in chunks {
        for l in 0..16 {
            lanes[l] = if c[l] > lanes[l] { c[l] } else { lanes[l] };
        }
    }
    lanes.iter().chain(tail).fold(f32::NEG_INFINITY, |m, &x| if x > m { x } else { m })
}

#[multiversion(targets("x86_64+avx512f+avx512vl+avx2+fma", "x86_64+avx2+fma", "aarch64+neon"))]
fn exp_sums(z: &[f32], inv_t: f32, max: f32) -> (f32, f32) {
    let (mut s, mut sz) = ([0f32; 16], [0f32; 16]);
    let chunks = z.chunks_exact(16);
    let tail = chunks.remainder();
    for c in chunks {
        for k in 0..16 {
            let d = c[k] * inv_t - max;
            let e = exp_approx(d);
            s[k] += e;
            sz[k] += e * d;
        }
    }
    let (mut s, mut sz) = (s.iter().sum::<f32>(), sz.iter().sum::<f32>());
    for &v in tail {
        let d = v * inv_t - max;
        let e = exp_approx(d);
        s += e;
        sz += e * d;
    }
    (s, sz)
}

/// `z[j] = scale · exp(z[j] / T − lse)`, in place.
#[multiversion(targets("x86_64+avx512f+avx512vl+avx2+fma", "x86_64+avx2+fma", "aarch64+neon"))]
fn scaled_probs_in_place(z: &mut [f32], inv_t: f32, lse: f32, scale: f32) {
    for v in z.iter_mut() {
        *v = scale * exp_approx(*v * inv_t - lse);
    }
}

/// The largest value of a row (NaN if the row holds one, so that it reaches the loss), in
/// sixteen lanes.
#[multiversion(targets("x86_64+avx512f+avx512vl+avx2+fma", "x86_64+avx2+fma", "aarch64+neon"))]
fn row_max(z: &[f32]) -> f32 {
    let mut m = [f32::NEG_INFINITY; 16];
    let mut nan = false;
    let chunks = z.chunks_exact(16);
    let tail = chunks.remainder();
    for c in chunks {
        for k in 0..16 {
            m[k] = if c[k] > m[k] { c[k] } else { m[k] };
            nan |= c[k].is_nan();
        }
    }
    let mut max = m.iter().fold(f32::NEG_INFINITY, |a, &b| a.max(b));
    for &v in tail {
        max = max.max(v);
        nan |= v.is_nan();
    }
    if nan { f32::NAN } else { max }
}

#[multiversion(targets("x86_64+avx512f+avx512vl+avx2+fma", "x86_64+avx2+fma", "aarch64+neon"))]
fn silu_mul_slice(m: &mut [f32], a: &[f32], b: &[f32]) {
    for ((m, a), b) in m.iter_mut().zip(a).zip(b) {
        *m = a / (1.0 + exp_approx(-a)) * b;
    }
}

#[multiversion(targets("x86_64+avx512f+avx512vl+avx2+fma", "x86_64+avx2+fma", "aarch64+neon"))]
fn silu_mul_backward_slice(da: &mut [f32], db: &mut [f32], dm: &[f32], a: &[f32], b: &[f32]) {
    for ((da, db), ((dm, a), b)) in da.iter_mut().zip(db.iter_mut()).zip(dm.iter().zip(a).zip(b)) {
        let s = 1.0 / (1.0 + exp_approx(-a));
        *da = dm * b * s * (1.0 + a * (1.0 - s));
        *db = dm * a * s;
    }
}

/// Adds row `i` of the source to row `ids[i]` of the destination, in place.
struct AddRows {
    ids: Vec<u32>,
}

impl InplaceOp2 for AddRows {
    fn name(&self) -> &'static str {
        "add-rows"
    }

    fn cpu_fwd(
        &self,
        dst: &mut CpuStorage,
        dst_l: &Layout,
        src: &CpuStorage,
        src_l: &Layout,
    ) -> candle_core::Result<()> {
        let (CpuStorage::F32(dst), CpuStorage::F32(src)) = (dst, src) else {
            candle_core::bail!("add-rows needs f32 tensors");
        };
        let (rows, width) = dst_l.shape().dims2()?;
        let (n, w) = src_l.shape().dims2()?;
        if !dst_l.is_contiguous() || !src_l.is_contiguous() || w != width || n != self.ids.len() {
            candle_core::bail!("add-rows: {n} rows of {w} into {rows} rows of {width}");
        }
        let dst = &mut dst[dst_l.start_offset()..dst_l.start_offset() + rows * width];
        let src = &src[src_l.start_offset()..src_l.start_offset() + n * width];
        for (&id, row) in self.ids.iter().zip(src.chunks_exact(width)) {
            let id = id as usize;
            if id >= rows {
                candle_core::bail!("add-rows: row {id} of {rows}");
            }
            for (d, s) in dst[id * width..(id + 1) * width].iter_mut().zip(row) {
                *d += s;
            }
        }
        Ok(())
    }
}
