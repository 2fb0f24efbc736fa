//! A matrix product for a few rows against a large weight (`x W^T` with `x` of 1–16 rows: a
//! decode step of a model that is not packed for inference, see [`crate::prepacked`]), where
//! candle's general gemm runs far below memory bandwidth.
//!
//! Each weight row is read once and dotted with every input row while it is in cache; rows of the
//! weight are split across threads. The loops are written so the compiler vectorises them, and
//! compiled for AVX-512, AVX2+FMA and plain x86-64, chosen at run time (`multiversion`). It is a
//! candle custom op with its backward written out (`dx = g W`, `dW = g^T x`), checked against
//! finite differences like every other op.
//!
//! Two inference-only kernels without a backward sit beside it: [`cached_attention`] (an engine
//! step's attention over every sequence's cache, prompts and decode steps in one pass) and
//! [`silu_mul_halves`] (the MLP's `silu(gate) · up` over the packed gate/up product).

use candle_core::{CpuStorage, CustomOp2, DType, Layout, Result, Shape, Tensor};
use multiversion::multiversion;
use rayon::prelude::*;

use crate::cache::KvView;

/// Largest number of input rows the kernel takes (more go to gemm, which is efficient there).
pub const MAX_ROWS: usize = 16;

/// Output rows per parallel task.
const ROWS_PER_TASK: usize = 32;

struct SmallRowsMatmul;

/// The `f32` elements of a contiguous tensor (the kernels here take no other).
fn f32_slice<'a>(op: &str, s: &'a CpuStorage, l: &Layout) -> Result<&'a [f32]> {
    let CpuStorage::F32(x) = s else { candle_core::bail!("{op} takes f32") };
    let Some((start, end)) = l.contiguous_offsets() else {
        candle_core::bail!("{op} takes contiguous tensors");
    };
    Ok(&x[start..end])
}

impl CustomOp2 for SmallRowsMatmul {
    fn name(&self) -> &'static str {
        "small-rows-matmul"
    }

    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
    ) -> Result<(CpuStorage, Shape)> {
        let (x, w) = (f32_slice(self.name(), s1, l1)?, f32_slice(self.name(), s2, l2)?);
        let (m, k) = l1.shape().dims2()?;
        let (out, k2) = l2.shape().dims2()?;
        if k != k2 || m == 0 || m > MAX_ROWS {
            candle_core::bail!("small-rows-matmul: [{m}, {k}] by [{out}, {k2}]^T");
        }
        // Computed as [out, m] (each task owns whole rows), then turned to [m, out].
        let mut t = vec![0f32; out * m];
        t.par_chunks_mut(ROWS_PER_TASK * m).enumerate().for_each(|(task, dst)| {
            let first = task * ROWS_PER_TASK;
            let rows = dst.len() / m;
            rows_times_weight(x, m, k, &w[first * k..(first + rows) * k], dst);
        });
        let mut y = vec![0f32; m * out];
        for (o, col) in t.chunks_exact(m).enumerate() {
            for (i, v) in col.iter().enumerate() {
                y[i * out + o] = *v;
            }
        }
        Ok((CpuStorage::F32(y), Shape::from((m, out))))
    }

    fn bwd(
        &self,
        x: &Tensor,
        w: &Tensor,
        _res: &Tensor,
        grad: &Tensor,
    ) -> Result<(Option<Tensor>, Option<Tensor>)> {
        // y = x W^T: dy/dx = g W, dy/dW = g^T x.
        Ok((Some(grad.matmul(w)?), Some(grad.t()?.matmul(x)?)))
    }
}

/// `dst[o * m + i] = dot(w[o], x[i])` for the weight rows `w` (`[rows, k]`) and input rows `x`
/// (`[m, k]`).
#[multiversion(targets("x86_64+avx512f+avx512vl+avx2+fma", "x86_64+avx2+fma", "aarch64+neon"))]
fn rows_times_weight(x: &[f32], m: usize, k: usize, w: &[f32], dst: &mut [f32]) {
    let rows: Vec<&[f32]> = x.chunks_exact(k).collect();
    for (o, wrow) in w.chunks_exact(k).enumerate() {
        let out = &mut dst[o * m..(o + 1) * m];
        let mut i = 0;
        // Four input rows share each load of the weight row; the rest one at a time.
        while i + 4 <= m {
            let d = dot4(wrow, rows[i], rows[i + 1], rows[i + 2], rows[i + 3]);
            out[i..i + 4].copy_from_slice(&d);
            i += 4;
        }
        while i < m {
            out[i] = dot1(wrow, rows[i]);
            i += 1;
        }
    }
}

const L: usize = 16;

/// The sum of the lanes, pairwise (halves, then quarters, …), which compiles to a few vector
/// shuffles and adds where a left-to-right sum is fifteen dependent scalar adds.
#[inline(always)]
fn hsum(a: [f32; L]) -> f32 {
    let b: [f32; 8] = std::array::from_fn(|i| a[i] + a[i + 8]);
    let c: [f32; 4] = std::array::from_fn(|i| b[i] + b[i + 4]);
    (c[0] + c[2]) + (c[1] + c[3])
}

#[inline(always)]
fn dot4(w: &[f32], x0: &[f32], x1: &[f32], x2: &[f32], x3: &[f32]) -> [f32; 4] {
    let (mut a0, mut a1, mut a2, mut a3) = ([0f32; L], [0f32; L], [0f32; L], [0f32; L]);
    let chunks = w
        .chunks_exact(L)
        .zip(x0.chunks_exact(L))
        .zip(x1.chunks_exact(L))
        .zip(x2.chunks_exact(L))
        .zip(x3.chunks_exact(L));
    for ((((wc, c0), c1), c2), c3) in chunks {
        for l in 0..L {
            a0[l] = wc[l].mul_add(c0[l], a0[l]);
            a1[l] = wc[l].mul_add(c1[l], a1[l]);
            a2[l] = wc[l].mul_add(c2[l], a2[l]);
            a3[l] = wc[l].mul_add(c3[l], a3[l]);
        }
    }
    let tail = w.len() / L * L;
    let mut out = [hsum(a0), hsum(a1), hsum(a2), hsum(a3)];
    for c in tail..w.len() {
        out[0] = w[c].mul_add(x0[c], out[0]);
        out[1] = w[c].mul_add(x1[c], out[1]);
        out[2] = w[c].mul_add(x2[c], out[2]);
        out[3] = w[c].mul_add(x3[c], out[3]);
    }
    out
}

#[inline(always)]
fn dot1(w: &[f32], x: &[f32]) -> f32 {
    let mut a = [0f32; L];
    for (wc, xc) in w.chunks_exact(L).zip(x.chunks_exact(L)) {
        for l in 0..L {
            a[l] = wc[l].mul_add(xc[l], a[l]);
        }
    }
    let tail = w.len() / L * L;
    let mut s = hsum(a);
    for c in tail..w.len() {
        s = w[c].mul_add(x[c], s);
    }
    s
}

/// `x W^T` for `x` `[m, k]` and `W` `[out, k]`: the kernel for f32 on the CPU with at most
/// [`MAX_ROWS`] rows, candle's matmul otherwise.
pub fn matmul_wt(x: &Tensor, w: &Tensor) -> Result<Tensor> {
    let rows = x.dim(0)?;
    if x.device().is_cpu()
        && x.dtype() == DType::F32
        && w.dtype() == DType::F32
        && x.rank() == 2
        && rows <= MAX_ROWS
    {
        x.contiguous()?.apply_op2(&w.contiguous()?, SmallRowsMatmul)
    } else {
        x.matmul(&w.t()?)
    }
}

/// The f32 elements behind a CPU tensor's storage, or `None` for any other.
fn cpu_f32(storage: &candle_core::Storage) -> Option<&[f32]> {
    match storage {
        candle_core::Storage::Cpu(CpuStorage::F32(x)) => Some(x),
        _ => None,
    }
}

/// One block of a sequence's keys or values: head `h`, position `j` of the block, element `d` at
/// `data[offset + h * head_stride + j * row_stride + d]`.
struct Span<'a> {
    data: &'a [f32],
    offset: usize,
    head_stride: usize,
    row_stride: usize,
}

impl<'a> Span<'a> {
    /// Reads the layout of a `[kv_heads, positions, head_dim]` view whose last dimension is
    /// contiguous.
    fn of(data: &'a [f32], l: &Layout, head_dim: usize) -> Option<Self> {
        let (stride, dims) = (l.stride(), l.dims());
        if dims.len() != 3 || dims[2] != head_dim || (head_dim > 1 && stride[2] != 1) {
            return None;
        }
        // The largest element touched must lie inside the storage.
        let last = l.start_offset()
            + (dims[0].max(1) - 1) * stride[0]
            + (dims[1].max(1) - 1) * stride[1]
            + head_dim;
        (last <= data.len()).then_some(Self {
            data,
            offset: l.start_offset(),
            head_stride: stride[0],
            row_stride: stride[1],
        })
    }
}

/// One sequence's keys or values as the decode kernel reads them: blocks of `1 << shift`
/// positions (or a single block of any size, `shift` then past every position).
struct Rows<'a> {
    blocks: Vec<Span<'a>>,
    shift: u32,
    mask: usize,
}

impl<'a> Rows<'a> {
    /// `len` positions held in `blocks` of `block` positions each (all but the last full).
    fn of(blocks: Vec<Span<'a>>, block: usize, len: usize) -> Option<Self> {
        if blocks.len() == 1 {
            return Some(Self { blocks, shift: usize::BITS - 1, mask: usize::MAX });
        }
        (block.is_power_of_two() && blocks.len() * block >= len).then(|| Self {
            blocks,
            shift: block.trailing_zeros(),
            mask: block - 1,
        })
    }

    fn row(&self, h: usize, j: usize, head_dim: usize) -> &'a [f32] {
        let b = &self.blocks[j >> self.shift];
        let at = b.offset + h * b.head_stride + (j & self.mask) * b.row_stride;
        &b.data[at..at + head_dim]
    }
}

/// Causal attention of new positions over each sequence's keys and values (a prompt, a decode
/// step, or a mix of both in one engine step), every sequence, position and key/value head in one
/// parallel pass: what [`crate::ops::causal_attention`] computes for each sequence, without a
/// dozen tensor ops per sequence per layer and without a full score matrix.
///
/// `q` is `[n, heads, head_dim]`: the new positions of every sequence one after another,
/// sequence `i` taking `lens[i]` of them. `kv[i]` are sequence `i`'s keys and values including
/// those new positions (typically its cache's blocks, read in place), so new position `r` of
/// sequence `i` sees its first `len_i − lens[i] + r + 1` keys. Query heads share key/value heads
/// in consecutive groups. Returns `[n, heads * head_dim]`, or `None` when the tensors are not f32
/// on the CPU with a contiguous last dimension (the caller then composes the attention from tensor
/// ops). Inference only: it has no backward.
pub fn cached_attention(q: &Tensor, kv: &[KvView], lens: &[usize]) -> Result<Option<Tensor>> {
    let (n, heads, head_dim) = q.dims3()?;
    if lens.len() != kv.len() || lens.iter().sum::<usize>() != n {
        candle_core::bail!("attention: {n} query positions for sequences of {lens:?} new ones");
    }
    if n == 0 || !q.device().is_cpu() || q.dtype() != DType::F32 {
        return Ok(None);
    }
    let Some((first_k, _)) = kv[0].blocks.first() else {
        candle_core::bail!("attention: a sequence with no keys");
    };
    let kv_heads = first_k.dim(0)?;
    if kv_heads == 0 || heads % kv_heads != 0 {
        candle_core::bail!("attention: {heads} heads over {kv_heads} kv heads");
    }
    let group = heads / kv_heads;
    let q = q.contiguous()?;
    let (q_storage, q_layout) = q.storage_and_layout();
    let Some(qs) = cpu_f32(&q_storage) else { return Ok(None) };
    let Some((q_start, q_end)) = q_layout.contiguous_offsets() else { return Ok(None) };
    let qs = &qs[q_start..q_end];
    // Read locks on every sequence's blocks for the whole pass (appends take write locks, and
    // come before this call).
    let guards: Vec<Vec<_>> = kv
        .iter()
        .map(|view| {
            view.blocks
                .iter()
                .map(|(k, v)| (k.storage_and_layout(), v.storage_and_layout()))
                .collect()
        })
        .collect();
    let mut seqs = Vec::with_capacity(kv.len());
    // For each query position: its sequence and how many keys it sees.
    let mut rows = Vec::with_capacity(n);
    for (i, ((blocks, view), &new)) in guards.iter().zip(kv).zip(lens).enumerate() {
        let len = view.len;
        let (mut ks, mut vs) = (Vec::with_capacity(blocks.len()), Vec::with_capacity(blocks.len()));
        for (((kst, kl), (vst, vl)), (k, _)) in blocks.iter().zip(&view.blocks) {
            let (kv_h, held, _) = k.dims3()?;
            let short = if view.blocks.len() == 1 { held < len } else { held < view.block };
            if kv_h != kv_heads || vl.dims() != kl.dims() || short {
                candle_core::bail!(
                    "attention: keys {:?} and values {:?} for {len} positions",
                    kl.dims(),
                    vl.dims()
                );
            }
            let (Some(kd), Some(vd)) = (cpu_f32(kst), cpu_f32(vst)) else { return Ok(None) };
            let (Some(kr), Some(vr)) = (Span::of(kd, kl, head_dim), Span::of(vd, vl, head_dim))
            else {
                return Ok(None);
            };
            ks.push(kr);
            vs.push(vr);
        }
        if len < new || new == 0 {
            candle_core::bail!("attention: {len} keys for {new} new positions");
        }
        let (Some(kr), Some(vr)) = (Rows::of(ks, view.block, len), Rows::of(vs, view.block, len))
        else {
            candle_core::bail!(
                "attention: {len} positions in {} blocks of {}",
                view.blocks.len(),
                view.block
            );
        };
        seqs.push((kr, vr));
        rows.extend((len - new + 1..=len).map(|seen| (i, seen)));
    }
    let scale = 1.0 / (head_dim as f32).sqrt();
    let mut out = vec![0f32; n * heads * head_dim];
    // One task per (position, key/value head): its `group` query heads read each key once.
    out.par_chunks_mut(group * head_dim).enumerate().for_each(|(task, dst)| {
        let (row, h) = (task / kv_heads, task % kv_heads);
        let (i, seen) = rows[row];
        let (k, v) = &seqs[i];
        let first = (row * heads + h * group) * head_dim;
        attend(&qs[first..first + group * head_dim], k, v, h, seen, head_dim, scale, dst);
    });
    drop(guards);
    Ok(Some(Tensor::from_vec(out, (n, heads * head_dim), q.device())?))
}

/// `silu(g) · u` for `gu` `[m, 2w]` holding the gate `g` and up `u` projections side by side
/// (`[m, w]`): one pass instead of a SiLU, two narrowed copies and a product, with the exponential
/// vectorised ([`crate::train::exp_approx`]). `None` when `gu` is not f32 on the CPU (the caller
/// composes it). Inference only: it has no backward.
pub fn silu_mul_halves(gu: &Tensor) -> Result<Option<Tensor>> {
    let (m, two_w) = gu.dims2()?;
    if two_w % 2 != 0 {
        candle_core::bail!("silu · up of {two_w} columns, not two halves");
    }
    if !gu.device().is_cpu() || gu.dtype() != DType::F32 || m == 0 {
        return Ok(None);
    }
    let w = two_w / 2;
    let gu = gu.contiguous()?;
    let (storage, layout) = gu.storage_and_layout();
    let Some(data) = cpu_f32(&storage) else { return Ok(None) };
    let Some((start, end)) = layout.contiguous_offsets() else { return Ok(None) };
    let data = &data[start..end];
    let mut out = vec![0f32; m * w];
    let rows_per_task = (ELEMENTS_PER_TASK / w).max(1);
    out.par_chunks_mut(rows_per_task * w).enumerate().for_each(|(task, dst)| {
        let first = task * rows_per_task;
        for (r, row) in dst.chunks_exact_mut(w).enumerate() {
            let src = &data[(first + r) * two_w..(first + r + 1) * two_w];
            silu_mul_row(row, &src[..w], &src[w..]);
        }
    });
    drop(storage);
    Ok(Some(Tensor::from_vec(out, (m, w), gu.device())?))
}

/// Elements an element-wise kernel hands to one task.
const ELEMENTS_PER_TASK: usize = 1 << 14;

#[multiversion(targets("x86_64+avx512f+avx512vl+avx2+fma", "x86_64+avx2+fma", "aarch64+neon"))]
fn silu_mul_row(out: &mut [f32], g: &[f32], u: &[f32]) {
    for ((o, &g), &u) in out.iter_mut().zip(g).zip(u) {
        *o = g / (1.0 + crate::train::exp_approx(-g)) * u;
    }
}

/// `exp(x - max)` of every element, in place, and their sum.
#[inline(always)]
fn exp_shifted(row: &mut [f32], max: f32) -> f32 {
    let mut lanes = [0f32; L];
    let mut chunks = row.chunks_exact_mut(L);
    for c in &mut chunks {
        for l in 0..L {
            c[l] = crate::train::exp_approx(c[l] - max);
            lanes[l] += c[l];
        }
    }
    let mut sum: f32 = lanes.iter().sum();
    for x in chunks.into_remainder() {
        *x = crate::train::exp_approx(*x - max);
        sum += *x;
    }
    sum
}

/// `dst` (`[group, head_dim]`) = softmax(`q` · Kᵀ · `scale`) · V for the `group` queries of
/// `q` over head `h` of `k` and `v` (`len` positions).
#[allow(clippy::too_many_arguments, reason = "one inner loop's operands")]
#[multiversion(targets("x86_64+avx512f+avx512vl+avx2+fma", "x86_64+avx2+fma", "aarch64+neon"))]
fn attend(
    q: &[f32],
    k: &Rows<'_>,
    v: &Rows<'_>,
    h: usize,
    len: usize,
    head_dim: usize,
    scale: f32,
    dst: &mut [f32],
) {
    let group = q.len() / head_dim;
    let mut scores = vec![0f32; group * len];
    // Four keys at a time: four independent sums in flight per query head.
    let whole = len / 4 * 4;
    for j in (0..whole).step_by(4) {
        let keys: [&[f32]; 4] = std::array::from_fn(|i| k.row(h, j + i, head_dim));
        for g in 0..group {
            let qg = &q[g * head_dim..(g + 1) * head_dim];
            let d = dot4(qg, keys[0], keys[1], keys[2], keys[3]);
            for i in 0..4 {
                scores[g * len + j + i] = d[i] * scale;
            }
        }
    }
    for j in whole..len {
        let key = k.row(h, j, head_dim);
        for g in 0..group {
            scores[g * len + j] = dot1(key, &q[g * head_dim..(g + 1) * head_dim]) * scale;
        }
    }
    for g in 0..group {
        let row = &mut scores[g * len..(g + 1) * len];
        let max = row.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        let sum = exp_shifted(row, max);
        // Probabilities normalised before the weighted sum, as the composed softmax · V rounds.
        let inv = 1.0 / sum;
        for p in row.iter_mut() {
            *p *= inv;
        }
        let out = &mut dst[g * head_dim..(g + 1) * head_dim];
        // Sixty-four output columns at a time, four independent sums held in registers across
        // the positions (one sum alone waits out each multiply-add's latency); each column still
        // sums its positions in order.
        let wide = head_dim / (4 * L) * (4 * L);
        for c in (0..wide).step_by(4 * L) {
            let (mut a0, mut a1, mut a2, mut a3) = ([0f32; L], [0f32; L], [0f32; L], [0f32; L]);
            for (j, &p) in row.iter().enumerate() {
                let x: &[f32; 4 * L] =
                    v.row(h, j, head_dim)[c..c + 4 * L].try_into().expect("4 L values");
                for l in 0..L {
                    a0[l] = p.mul_add(x[l], a0[l]);
                    a1[l] = p.mul_add(x[L + l], a1[l]);
                    a2[l] = p.mul_add(x[2 * L + l], a2[l]);
                    a3[l] = p.mul_add(x[3 * L + l], a3[l]);
                }
            }
            for (i, a) in [a0, a1, a2, a3].iter().enumerate() {
                out[c + i * L..c + (i + 1) * L].copy_from_slice(a);
            }
        }
        // Then sixteen at a time.
        let whole = head_dim / L * L;
        for c in (wide..whole).step_by(L) {
            let mut acc = [0f32; L];
            for (j, &p) in row.iter().enumerate() {
                let x: &[f32; L] = v.row(h, j, head_dim)[c..c + L].try_into().expect("L values");
                for l in 0..L {
                    acc[l] = p.mul_add(x[l], acc[l]);
                }
            }
            out[c..c + L].copy_from_slice(&acc);
        }
        for (c, o) in out.iter_mut().enumerate().skip(whole) {
            *o = row
                .iter()
                .enumerate()
                .fold(0.0, |a, (j, &p)| p.mul_add(v.row(h, j, head_dim)[c], a));
        }
    }
}

/// Log-softmax over the last dimension of a `[n, v]` f32 tensor in one pass per row (vocabulary-
/// sized rows: the composed version allocates four `[n, v]` tensors forward and as many backward).
/// Backward: `dx = g − exp(y) · Σ g` per row, itself one fused pass.
struct LogSoftmax;

/// Rows per parallel task.
const SOFTMAX_ROWS_PER_TASK: usize = 4;

impl candle_core::CustomOp1 for LogSoftmax {
    fn name(&self) -> &'static str {
        "log-softmax-rows"
    }

    fn cpu_fwd(&self, s: &CpuStorage, l: &Layout) -> Result<(CpuStorage, Shape)> {
        let x = f32_slice(self.name(), s, l)?;
        let (n, v) = l.shape().dims2()?;
        let mut y = vec![0f32; n * v];
        y.par_chunks_mut(SOFTMAX_ROWS_PER_TASK * v).enumerate().for_each(|(task, dst)| {
            let first = task * SOFTMAX_ROWS_PER_TASK;
            for (r, out) in dst.chunks_exact_mut(v).enumerate() {
                let row = &x[(first + r) * v..(first + r + 1) * v];
                let max = row.iter().copied().fold(f32::NEG_INFINITY, f32::max);
                let sum: f32 = row.iter().map(|&a| (a - max).exp()).sum();
                let shift = max + sum.ln();
                for (o, &a) in out.iter_mut().zip(row) {
                    *o = a - shift;
                }
            }
        });
        Ok((CpuStorage::F32(y), l.shape().clone()))
    }

    fn bwd(&self, _arg: &Tensor, res: &Tensor, grad: &Tensor) -> Result<Option<Tensor>> {
        Ok(Some(res.contiguous()?.apply_op2(&grad.contiguous()?, LogSoftmaxBackward)?))
    }
}

/// `(y, g) ↦ g − exp(y) · Σ_row g`: the gradient of [`LogSoftmax`].
struct LogSoftmaxBackward;

impl CustomOp2 for LogSoftmaxBackward {
    fn name(&self) -> &'static str {
        "log-softmax-rows-backward"
    }

    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
    ) -> Result<(CpuStorage, Shape)> {
        let (y, g) = (f32_slice(self.name(), s1, l1)?, f32_slice(self.name(), s2, l2)?);
        let (n, v) = l1.shape().dims2()?;
        if l2.shape().dims2()? != (n, v) {
            candle_core::bail!("log-softmax-rows-backward: shapes differ");
        }
        let mut dx = vec![0f32; n * v];
        dx.par_chunks_mut(SOFTMAX_ROWS_PER_TASK * v).enumerate().for_each(|(task, dst)| {
            let first = task * SOFTMAX_ROWS_PER_TASK;
            for (r, out) in dst.chunks_exact_mut(v).enumerate() {
                let at = (first + r) * v;
                let (yr, gr) = (&y[at..at + v], &g[at..at + v]);
                let total: f32 = gr.iter().sum();
                for ((o, &a), &b) in out.iter_mut().zip(yr).zip(gr) {
                    *o = b - a.exp() * total;
                }
            }
        });
        Ok((CpuStorage::F32(dx), l1.shape().clone()))
    }
}

/// Log-softmax over the last dimension of a 2-D f32 CPU tensor with the fused kernel; `None`
/// for anything else (the caller composes it from primitives).
pub fn log_softmax_rows(x: &Tensor) -> Result<Option<Tensor>> {
    if x.device().is_cpu() && x.dtype() == DType::F32 && x.rank() == 2 {
        Ok(Some(x.contiguous()?.apply_op1(LogSoftmax)?))
    } else {
        Ok(None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::Device;

    fn filled(shape: (usize, usize, usize), seed: usize) -> Tensor {
        let n = shape.0 * shape.1 * shape.2;
        let v: Vec<f32> =
            (0..n).map(|i| (((i * 7919 + seed * 104_729) % 2003) as f32 / 1001.5) - 1.0).collect();
        Tensor::from_vec(v, shape, &Device::Cpu).unwrap()
    }

    /// The batched kernel gives what the composed attention gives for each sequence, on views
    /// into larger buffers (as the cache hands them out) of different lengths, with grouped heads,
    /// for decode steps (one new position), whole prompts and prompts continuing a cache.
    #[test]
    fn cached_attention_matches_the_composed_attention_per_sequence() {
        // 20: columns sixteen at a time and one at a time; 84: sixty-four at a time too.
        for d in [20, 84] {
            attention_matches_with_head_dim(d);
        }
    }

    fn attention_matches_with_head_dim(d: usize) {
        let (heads, kv_heads) = (6, 2);
        // (positions held, of which new)
        let seqs = [(1usize, 1usize), (5, 1), (37, 1), (16, 16), (23, 7), (40, 3)];
        let lens: Vec<usize> = seqs.iter().map(|s| s.1).collect();
        let n: usize = lens.iter().sum();
        let q = (filled((n, heads, d), 1) * 3.0).unwrap();
        let whole: Vec<(Tensor, Tensor)> = seqs
            .iter()
            .enumerate()
            .map(|(i, &(len, _))| {
                // Buffers of capacity 40, narrowed to the positions held.
                let k = filled((kv_heads, 40, d), 10 + i).narrow(1, 0, len).unwrap();
                let v = filled((kv_heads, 40, d), 20 + i).narrow(1, 0, len).unwrap();
                (k, v)
            })
            .collect();
        // Every other sequence as blocks of 8 positions (views into the same buffers; the last
        // block's unused positions hold values the kernel must not read).
        let kv: Vec<KvView> = seqs
            .iter()
            .enumerate()
            .map(|(i, &(len, _))| {
                if i % 2 == 0 {
                    let (k, v) = &whole[i];
                    return KvView::whole(k.clone(), v.clone()).unwrap();
                }
                let k = filled((kv_heads, 40, d), 10 + i);
                let v = filled((kv_heads, 40, d), 20 + i);
                let blocks = (0..len.div_ceil(8))
                    .map(|b| (k.narrow(1, b * 8, 8).unwrap(), v.narrow(1, b * 8, 8).unwrap()))
                    .collect();
                KvView { blocks, block: 8, len }
            })
            .collect();
        let got = cached_attention(&q, &kv, &lens).unwrap().expect("f32 on the CPU");
        assert_eq!(got.dims(), [n, heads * d]);
        let mut at = 0;
        for (i, (k, v)) in whole.iter().enumerate() {
            let new = lens[i];
            let want = crate::ops::causal_attention(&q.narrow(0, at, new).unwrap(), k, v).unwrap();
            let want = want.flatten_all().unwrap().to_vec1::<f32>().unwrap();
            let rows = got.narrow(0, at, new).unwrap().flatten_all().unwrap();
            let rows = rows.to_vec1::<f32>().unwrap();
            let worst = rows.iter().zip(&want).map(|(a, b)| (a - b).abs()).fold(0f32, f32::max);
            assert!(worst < 1e-5, "sequence {i} {:?}: off by {worst}", seqs[i]);
            at += new;
        }
        // Not applicable: the caller composes it.
        let q64 = q.to_dtype(DType::F64).unwrap();
        let kv64: Vec<_> = whole
            .iter()
            .map(|(k, v)| {
                KvView::whole(k.to_dtype(DType::F64).unwrap(), v.to_dtype(DType::F64).unwrap())
                    .unwrap()
            })
            .collect();
        assert!(cached_attention(&q64, &kv64, &lens).unwrap().is_none());
        // Heads that do not divide, more new positions than keys, blocks that do not hold the
        // positions or are not a power of two long: errors, not wrong answers.
        let view = |k: Tensor, v: Tensor| [KvView::whole(k, v).unwrap()];
        let bad = view(filled((4, 3, d), 5), filled((4, 3, d), 6));
        assert!(cached_attention(&filled((1, 6, d), 7), &bad, &[1]).is_err());
        let short = view(filled((2, 3, d), 5), filled((2, 3, d), 6));
        assert!(cached_attention(&filled((4, 6, d), 7), &short, &[4]).is_err());
        assert!(cached_attention(&filled((2, 6, d), 7), &short, &[1]).is_err());
        let block = (filled((2, 8, d), 5), filled((2, 8, d), 6));
        let few = [KvView { blocks: vec![block.clone(), block.clone()], block: 8, len: 17 }];
        assert!(cached_attention(&filled((1, 6, d), 7), &few, &[1]).is_err());
        let odd = [KvView { blocks: vec![block.clone(), block], block: 6, len: 12 }];
        assert!(cached_attention(&filled((1, 6, d), 7), &odd, &[1]).is_err());
    }

    /// `silu(g) · u` of the two halves equals candle's SiLU times the second half.
    #[test]
    fn silu_mul_halves_matches_the_composed_ops() {
        for (m, w) in [(1usize, 5usize), (3, 1536), (40, 700)] {
            let gu = (filled((1, m, 2 * w), 3).squeeze(0).unwrap() * 12.0).unwrap();
            let got = silu_mul_halves(&gu).unwrap().expect("f32 on the CPU");
            let g = gu.narrow(1, 0, w).unwrap().to_dtype(DType::F64).unwrap();
            let u = gu.narrow(1, w, w).unwrap().to_dtype(DType::F64).unwrap();
            let want = (g.silu().unwrap() * u).unwrap();
            // Relative to the size of the value (up to 144 here).
            let scale = (want.abs().unwrap() + 1.0).unwrap();
            let diff = ((got.to_dtype(DType::F64).unwrap() - want).unwrap().abs().unwrap() / scale)
                .unwrap();
            let worst = diff.max_all().unwrap().to_scalar::<f64>().unwrap();
            assert!(worst < 2e-6, "[{m}, {w}]: off by {worst} relative");
        }
        assert!(silu_mul_halves(&filled((1, 2, 3), 1).squeeze(0).unwrap()).is_err());
    }
}
