//! Weights packed once for inference matrix products (`x W^T` with `x` of a few dozen to a few
//! thousand rows: decode at any batch, prefill of prompts up to 4096 tokens a step).
//!
//! candle's gemm re-packs the whole weight into its kernel's layout on every call; with few input
//! rows that packing costs as much as the arithmetic (a third of a batch-32 decode step). A
//! [`PackedWeight`] holds the weight in that layout from the start: panels of [`NR`] output
//! columns, each `k` steps of `NR` consecutive values, so the kernel reads a panel front to back
//! while six input rows stay in registers. Several weights that read the same input (query,
//! key and value; gate and up) are packed as one, so they take one pass. With few rows (decode)
//! threads split the panels; with many (prefill) they split the rows, in blocks that every panel
//! passes over while they stay in cache.
//!
//! Frozen f32 models on the CPU pack their matrices when assembled ([`crate::Transformer::frozen`]);
//! the original weights stay (saving, the small-row kernel, training), so such a model holds its
//! matrices twice. Inference only: there is no backward.

use std::sync::Arc;

use candle_core::{DType, Result, Tensor};
use multiversion::multiversion;
use rayon::prelude::*;

/// Output columns per panel (two 16-lane AVX-512 vectors).
pub const NR: usize = 32;
/// Input rows held in registers at a time.
const MR: usize = 6;
/// From this many input rows on, threads split the rows rather than the panels.
const ROW_SPLIT: usize = 64;
/// Input rows that every panel passes over in turn (their inputs stay in cache).
const ROW_BLOCK: usize = 48;
/// Most input rows the model sends to [`matmul_packed`]; larger steps go to candle's gemm, whose
/// packing is paid back by then. Measured on SmolLM2-135M prompts with rows dealt out evenly: at
/// 8 × 128 rows the packed kernel is ahead of gemm, at 32 × 128 level with it.
pub const MAX_ROWS: usize = 4096;

/// One or more `[out_i, k]` f32 weights with the same `k`, packed side by side for
/// [`matmul_packed`] (the output columns of the first, then of the second, …).
#[derive(Debug, Clone)]
pub struct PackedWeight {
    out: usize,
    k: usize,
    /// `ceil(out / NR)` panels of `k × NR` values; columns past `out` are zero.
    data: Arc<[f32]>,
}

impl PackedWeight {
    /// Packs `weights` (each `[out_i, k]`), or `None` when any is not f32 on the CPU.
    pub fn pack(weights: &[&Tensor]) -> Result<Option<Self>> {
        let Some(first) = weights.first() else { candle_core::bail!("nothing to pack") };
        let k = first.dim(1)?;
        if k == 0 {
            candle_core::bail!("packing weights of no columns");
        }
        let mut flat: Vec<f32> = Vec::new();
        for w in weights {
            if !w.device().is_cpu() || w.dtype() != DType::F32 {
                return Ok(None);
            }
            let (_, wk) = w.dims2()?;
            if wk != k {
                candle_core::bail!("packing weights of {wk} and {k} columns together");
            }
            flat.extend(w.flatten_all()?.to_vec1::<f32>()?);
        }
        let out = flat.len() / k;
        let panels = out.div_ceil(NR);
        let mut data = vec![0f32; panels * k * NR];
        // Panels in parallel: a model's weights are repacked on every weight update.
        data.par_chunks_mut(k * NR).enumerate().for_each(|(p, panel)| {
            for j in 0..NR.min(out - p * NR) {
                let row = &flat[(p * NR + j) * k..(p * NR + j + 1) * k];
                for (kk, &v) in row.iter().enumerate() {
                    panel[kk * NR + j] = v;
                }
            }
        });
        Ok(Some(Self { out, k, data: data.into() }))
    }

    /// Output columns.
    pub fn out(&self) -> usize {
        self.out
    }

    /// Input columns.
    pub fn k(&self) -> usize {
        self.k
    }
}

/// `x W^T` (`[m, out]`) for `x` `[m, k]` (f32 on the CPU) and a packed `W`.
pub fn matmul_packed(x: &Tensor, w: &PackedWeight) -> Result<Tensor> {
    let (m, k) = x.dims2()?;
    if k != w.k || m == 0 {
        candle_core::bail!("packed matmul: [{m}, {k}] by [{}, {}]^T", w.out, w.k);
    }
    let xs = x.contiguous()?.flatten_all()?.to_vec1::<f32>()?;
    let panels = w.out.div_ceil(NR);
    if m >= ROW_SPLIT {
        // Enough rows for each thread to take its own: tasks own blocks of output rows and
        // write them in place, reading every panel. The 6-row tiles are dealt out evenly (128
        // rows to 4 tasks: 30, 36, 30, 32), so that no thread is left with a longer share.
        let mut y = vec![0f32; m * w.out];
        let tiles = m.div_ceil(MR);
        let tasks = (rayon::current_num_threads().max(1) * 2).min(tiles);
        let mut parts = Vec::with_capacity(tasks);
        let mut rest: &mut [f32] = &mut y;
        let mut first = 0;
        for t in 0..tasks {
            let end = ((t + 1) * tiles / tasks * MR).min(m);
            let (part, tail) = rest.split_at_mut((end - first) * w.out);
            parts.push((first, part));
            rest = tail;
            first = end;
        }
        parts.into_par_iter().for_each(|(first, dst)| {
            let n = dst.len() / w.out;
            rows_times_panels(&xs[first * k..(first + n) * k], n, k, &w.data, w.out, dst);
        });
        return Tensor::from_vec(y, (m, w.out), x.device());
    }
    // Few rows: tasks own a few panels each, computed as [panel columns, m] so each task owns one
    // slice; turned to [m, out] after.
    let per_task = (64 / m).clamp(1, 8);
    let mut t = vec![0f32; panels * NR * m];
    t.par_chunks_mut(per_task * NR * m).enumerate().for_each(|(task, dst)| {
        let first = task * per_task;
        let n = dst.len() / (NR * m);
        panels_times_rows(&xs, m, k, &w.data[first * k * NR..(first + n) * k * NR], dst);
    });
    let mut y = vec![0f32; m * w.out];
    for (o, col) in t.chunks_exact(m).take(w.out).enumerate() {
        for (i, &v) in col.iter().enumerate() {
            y[i * w.out + o] = v;
        }
    }
    Tensor::from_vec(y, (m, w.out), x.device())
}

/// `y[i * out + p * NR + j] = Σ_kk x[i][kk] · panels[p][kk][j]` for the `m` rows of `x` and
/// every panel (columns past `out` are not written).
#[multiversion(targets("x86_64+avx512f+avx512vl+avx2+fma", "x86_64+avx2+fma", "aarch64+neon"))]
fn rows_times_panels(x: &[f32], m: usize, k: usize, panels: &[f32], out: usize, y: &mut [f32]) {
    let rows: Vec<&[f32]> = x.chunks_exact(k).collect();
    // Blocks of rows small enough to stay in cache while every panel passes over them.
    for start in (0..m).step_by(ROW_BLOCK) {
        let end = (start + ROW_BLOCK).min(m);
        for (p, panel) in panels.chunks_exact(k * NR).enumerate() {
            block_times_panel(&rows, start, end, panel, p * NR, NR.min(out - p * NR), out, y);
        }
    }
}

/// Rows `start..end` times one panel, into columns `col..col + width` of `y` (`[m, out]`).
#[allow(clippy::too_many_arguments, reason = "one inner loop's operands")]
#[inline(always)]
fn block_times_panel(
    rows: &[&[f32]],
    start: usize,
    end: usize,
    panel: &[f32],
    col: usize,
    width: usize,
    out: usize,
    y: &mut [f32],
) {
    tiles(rows, start, end, panel, |i, acc| {
        for (r, a) in acc.iter().enumerate() {
            let at = (i + r) * out + col;
            y[at..at + width].copy_from_slice(&a[..width]);
        }
    });
}

/// `dst[(p * NR + j) * m + i] = Σ_kk x[i][kk] · panels[p][kk][j]`.
#[multiversion(targets("x86_64+avx512f+avx512vl+avx2+fma", "x86_64+avx2+fma", "aarch64+neon"))]
fn panels_times_rows(x: &[f32], m: usize, k: usize, panels: &[f32], dst: &mut [f32]) {
    let rows: Vec<&[f32]> = x.chunks_exact(k).collect();
    for (panel, out) in panels.chunks_exact(k * NR).zip(dst.chunks_exact_mut(NR * m)) {
        tiles(&rows, 0, m, panel, |i, acc| {
            for (r, a) in acc.iter().enumerate() {
                for (j, &v) in a.iter().enumerate() {
                    out[j * m + i + r] = v;
                }
            }
        });
    }
}

/// Rows `start..end` times one panel in tiles of 6 rows (then 4, 2 and 1 for the rest), each
/// tile's `[rows, NR]` results handed to `put` with its first row.
#[inline(always)]
fn tiles(
    rows: &[&[f32]],
    start: usize,
    end: usize,
    panel: &[f32],
    mut put: impl FnMut(usize, &[[f32; NR]]),
) {
    let mut i = start;
    while i + MR <= end {
        put(i, &tile6(panel, std::array::from_fn(|r| rows[i + r])));
        i += MR;
    }
    if i + 4 <= end {
        put(i, &tile4(panel, std::array::from_fn(|r| rows[i + r])));
        i += 4;
    }
    if i + 2 <= end {
        put(i, &tile2(panel, std::array::from_fn(|r| rows[i + r])));
        i += 2;
    }
    if i < end {
        put(i, &tile1(panel, [rows[i]]));
    }
}

/// `$name(panel, rows)`: that many input rows times one panel. Each row's accumulators are an
/// array of their own, which the compiler keeps in vector registers (a two-dimensional array of
/// them it spilled to memory on every step).
macro_rules! tile {
    ($name:ident, $n:literal, $($acc:ident $b:ident $r:literal),+) => {
        #[inline(always)]
        fn $name(panel: &[f32], x: [&[f32]; $n]) -> [[f32; NR]; $n] {
            let k = panel.len() / NR;
            $(let $b = &x[$r][..k];)+
            $(let mut $acc = [0f32; NR];)+
            for kk in 0..k {
                let w: &[f32; NR] =
                    panel[kk * NR..(kk + 1) * NR].try_into().expect("panels hold NR columns");
                $(let $b = $b[kk];)+
                for j in 0..NR {
                    $($acc[j] = $b.mul_add(w[j], $acc[j]);)+
                }
            }
            [$($acc),+]
        }
    };
}

tile!(tile6, 6, a0 x0 0, a1 x1 1, a2 x2 2, a3 x3 3, a4 x4 4, a5 x5 5);
tile!(tile4, 4, a0 x0 0, a1 x1 1, a2 x2 2, a3 x3 3);
tile!(tile2, 2, a0 x0 0, a1 x1 1);
tile!(tile1, 1, a0 x0 0);

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::Device;

    fn filled(rows: usize, cols: usize, seed: usize) -> Tensor {
        let v: Vec<f32> = (0..rows * cols)
            .map(|i| (((i * 7919 + seed * 104_729) % 2003) as f32 / 1001.5 - 1.0) * 0.5)
            .collect();
        Tensor::from_vec(v, (rows, cols), &Device::Cpu).unwrap()
    }

    /// Every tile shape (6, 4, 2 and 1 rows), a partial last panel, and weights packed together
    /// give what candle's matmul gives, in f64.
    #[test]
    fn packed_matmul_equals_the_plain_product() {
        for (m, k, outs) in [
            (1, 5, vec![3]),
            (7, 33, vec![40, 24]),
            (17, 64, vec![96]),
            (64, 70, vec![31, 1, 65]),
            (13, 8, vec![32]),
            (131, 16, vec![33, 40]),
            (300, 24, vec![64]),
        ] {
            let x = filled(m, k, 1);
            let ws: Vec<Tensor> =
                outs.iter().enumerate().map(|(i, &o)| filled(o, k, i + 2)).collect();
            let refs: Vec<&Tensor> = ws.iter().collect();
            let packed = PackedWeight::pack(&refs).unwrap().unwrap();
            assert_eq!(packed.out(), outs.iter().sum::<usize>());
            let got = matmul_packed(&x, &packed).unwrap();
            let w = Tensor::cat(&refs, 0).unwrap().to_dtype(DType::F64).unwrap();
            let want = x.to_dtype(DType::F64).unwrap().matmul(&w.t().unwrap()).unwrap();
            let diff = (got.to_dtype(DType::F64).unwrap() - want)
                .unwrap()
                .abs()
                .unwrap()
                .max_all()
                .unwrap()
                .to_scalar::<f64>()
                .unwrap();
            assert!(diff < 1e-5, "m={m} k={k} outs={outs:?}: max diff {diff}");
        }
    }

    #[test]
    fn weights_of_different_widths_or_dtypes_are_not_packed() {
        let (a, b) = (filled(4, 8, 1), filled(4, 9, 2));
        assert!(PackedWeight::pack(&[&a, &b]).is_err());
        let f64w = filled(4, 8, 3).to_dtype(DType::F64).unwrap();
        assert!(PackedWeight::pack(&[&f64w]).unwrap().is_none());
    }
}
