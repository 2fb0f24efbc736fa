//! A training forward and backward pass with the backward written out, for models in f32 on the
//! CPU: what `temper sft` and `temper trainer` run there.
//!
//! candle's autograd records every op of the forward pass and, in the backward pass, allocates a
//! zero tensor and adds into it for every operand of every op; RMS norm and the gated MLP are
//! five to seven element-wise passes each, forward and backward. Here the linear layers, the RMS
//! norms, the gated MLP, the residual stream, the embedding and the output head have their
//! backward written out: weight gradients come straight from one matrix product each, the norm and
//! the SiLU gate run as single row kernels both ways. Attention (QK-norm, rotary embedding and the
//! packed causal product) and mixture-of-experts MLPs still run under candle's autograd, each on
//! a small graph of its own per block, seeded with the gradient arriving from above.
//!
//! The result equals autograd's gradient up to float rounding: the tests compare the two on every
//! architecture, with and without gradient checkpointing, and autograd's is checked against
//! finite differences.

use std::collections::HashMap;
use std::ops::Deref;

use candle_core::backprop::GradStore;
use candle_core::{CpuStorage, DType, Device, Storage, StorageRef, Tensor, Var};
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
    /// Query, key and value projections, leaves of the attention graph.
    q: Var,
    k: Var,
    v: Var,
    /// Attention output, `[n, heads · head_dim]`, carrying the attention graph.
    attn: Tensor,
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
    logits: Var,
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
        Ok(TrainTape {
            model: self,
            packed,
            blocks,
            last: x,
            last_rstd,
            head_in,
            logits: Var::from_tensor(&logits)?,
        })
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
        let q = Var::from_tensor(&q.reshape((n, heads, hd))?)?;
        let k = Var::from_tensor(&k.reshape((n, kv_heads, hd))?)?;
        let v = Var::from_tensor(&v.reshape((n, kv_heads, hd))?)?;
        // The attention graph: QK-norm (its weights are the model's, so their gradients come out
        // of this graph), rotary embedding, the causal product.
        let (mut qr, mut kr) = (q.as_tensor().clone(), k.as_tensor().clone());
        if let (Some(qn), Some(kn)) = (&layer.q_norm, &layer.k_norm) {
            qr = crate::ops::rms_norm(&qr, qn, cfg.rms_norm_eps)?;
            kr = crate::ops::rms_norm(&kr, kn, cfg.rms_norm_eps)?;
        }
        let qr = packed.rope.rotate(&qr)?;
        let kr = packed.rope.rotate(&kr)?;
        let attn = if packed.spans.len() > 1 {
            crate::ops::packed_causal_attention(&qr, &kr, v.as_tensor(), &packed.spans)?
        } else {
            self.attention_per_sequence(l, &qr, &kr, v.as_tensor(), &packed.spans, None)?
        };
        let x2 = (x + linear(&attn.detach(), &layer.o.detach(), None)?)?;
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
        Ok((BlockTape { x: x.clone(), rstd, h, q, k, v, attn, x2, rstd2, h2, mlp }, out))
    }
}

impl TrainTape<'_> {
    /// The logits (`[Σ len, vocab]`, the sequences one after another): a leaf variable. Take a
    /// loss of them, differentiate it, and hand their gradient to [`TrainTape::backward`].
    pub fn logits(&self) -> &Tensor {
        self.logits.as_tensor()
    }

    /// The gradient of every weight ([`Transformer::params`] order) from `dlogits`, the gradient
    /// of the loss with respect to [`TrainTape::logits`].
    pub fn backward(mut self, dlogits: &Tensor) -> Result<Vec<Tensor>, ModelError> {
        let model = self.model;
        let cfg = &model.cfg;
        let mut grads = Grads::new(&model.params);
        let dlogits = dlogits.contiguous()?;
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
            dx = model.block_backward(l, tape, &dx, &mut grads)?;
        }
        let embed = "model.embed_tokens.weight";
        let base = match grads.take(embed)? {
            Some(g) => g,
            None => model.embed.zeros_like()?,
        };
        grads.add(embed, base.index_add(&self.packed.ids, &dx, 0)?)?;
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
        grads.add(&p("self_attn.o_proj.weight"), dx2.t()?.matmul(&t.attn.detach())?)?;
        let store = (&t.attn * dattn)?.sum_all()?.backward()?;
        drop(t.attn);
        // QK-norm weights are the only weights inside the attention graph.
        grads.add_from(&store, &self.params, &p("self_attn."))?;
        let flat = |v: &Var| -> candle_core::Result<Tensor> {
            let g = grad_or_zeros(&store, v.as_tensor())?;
            let width = g.elem_count() / n;
            g.reshape((n, width))?.contiguous()
        };
        let (dq, dk, dv) = (flat(&t.q)?, flat(&t.k)?, flat(&t.v)?);
        drop(store);
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

/// Sum of `a[i] · b[i]` in sixteen lanes (so that it vectorises).
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
        for ((m, a), b) in m.iter_mut().zip(&a_s[start..]).zip(&b_s[start..]) {
            *m = a / (1.0 + (-a).exp()) * b;
        }
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
            let it = dms[start..].iter().zip(&a_s[start..]).zip(&b_s[start..]);
            for ((da, db), ((dm, a), b)) in da.iter_mut().zip(db.iter_mut()).zip(it) {
                let s = 1.0 / (1.0 + (-a).exp());
                *da = dm * b * s * (1.0 + a * (1.0 - s));
                *db = dm * a * s;
            }
        });
    Ok((
        Tensor::from_vec(da, a.shape(), &Device::Cpu)?,
        Tensor::from_vec(db, a.shape(), &Device::Cpu)?,
    ))
}
