//! Weights packed once for inference matrix products (`x W^T` with `x` of a few dozen to a few
//! thousand rows: decode at any batch, prefill of prompts up to 4096 tokens a step).
//!
//! candle's gemm re-packs the whole weight into its kernel's layout on every call; with few input
//! rows that packing costs as much as the arithmetic (a third of a batch-32 decode step). A
//! [`PackedWeight`] holds the weight in that layout from the start: panels of [`NR`] output
//! columns, each `k` steps of `NR` consecutive values, starting on a 64-byte boundary (a vector
//! load that straddles two cache lines cost a tenth of the kernel's speed). Several weights that
//! read the same input (query, key and value; gate and up) are packed as one, so they take one
//! pass.
//!
//! The input rows are packed on each call (they are a small fraction of the work): in blocks of
//! [`KC`] steps, and within a block in tiles of eight rows whose values for one step sit side by
//! side. The kernel multiplies one tile by one block of one panel, eight rows by 32 columns held
//! in registers (sixteen of AVX-512's 32 vector registers); the panel's block (32 KB) stays in
//! the L1 cache while every tile passes over it, and the tiles' block in L2. A panel's sums over
//! the blocks of steps collect in a small buffer and go to the output once. With few rows
//! (decode) threads split the panels; with many (prefill) they split the rows.
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
/// Input rows held in registers at a time. Side by side on an AVX-512 Xeon at 32 to 512 rows, 8
/// was 3–8% ahead of 6, 10 level with 8, and 12 (24 accumulators) 30% behind.
const MR: usize = 8;
/// Steps of `k` in one block: `KC × NR` weights (32 KB) stay in the L1 cache while every tile of
/// input rows passes over them (on the machine measured, 256 was ahead of 128, 192 and all of
/// `k` at once).
const KC: usize = 256;
/// Packed input values per block of rows (512 KB, held in the L2 cache while every panel passes
/// over them).
const ROW_BLOCK_VALUES: usize = 128 * 1024;
/// Panels whose sums go to the output together.
const GROUP: usize = 4;
/// From this many input rows on, threads split the rows rather than the panels.
const ROW_SPLIT: usize = 64;
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
    /// `ceil(out / NR)` panels of `k × NR` values from `data[start]` on; columns past `out` are
    /// zero.
    data: Arc<[f32]>,
    /// Where the panels start in `data`: the first value on a 64-byte boundary.
    start: usize,
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
        let len = out.div_ceil(NR) * k * NR;
        // 15 values to spare, so that the panels can start on a 64-byte boundary.
        let mut data: Arc<[f32]> = vec![0f32; len + 15].into();
        let start = (64 - data.as_ptr().addr() % 64) % 64 / size_of::<f32>();
        let panels = &mut Arc::get_mut(&mut data).expect("just made")[start..start + len];
        // Panels in parallel: a model's weights are repacked on every weight update.
        panels.par_chunks_mut(k * NR).enumerate().for_each(|(p, panel)| {
            for j in 0..NR.min(out - p * NR) {
                let row = &flat[(p * NR + j) * k..(p * NR + j + 1) * k];
                for (kk, &v) in row.iter().enumerate() {
                    panel[kk * NR + j] = v;
                }
            }
        });
        Ok(Some(Self { out, k, data, start }))
    }

    /// Output columns.
    pub fn out(&self) -> usize {
        self.out
    }

    /// Input columns.
    pub fn k(&self) -> usize {
        self.k
    }

    fn panels(&self) -> &[f32] {
        &self.data[self.start..self.start + self.out.div_ceil(NR) * self.k * NR]
    }
}

/// `x W^T` (`[m, out]`) for `x` `[m, k]` (f32 on the CPU) and a packed `W`.
pub fn matmul_packed(x: &Tensor, w: &PackedWeight) -> Result<Tensor> {
    let (m, k) = x.dims2()?;
    if k != w.k || m == 0 {
        candle_core::bail!("packed matmul: [{m}, {k}] by [{}, {}]^T", w.out, w.k);
    }
    // Read in place (a copy of the input cost a tenth of the product's time at k = 1536).
    let x = x.contiguous()?;
    let (storage, layout) = x.storage_and_layout();
    let xs: &[f32] = match (&*storage, layout.contiguous_offsets()) {
        (candle_core::Storage::Cpu(candle_core::CpuStorage::F32(v)), Some((a, b))) => &v[a..b],
        _ => candle_core::bail!("packed matmul: the input is not f32 on the CPU"),
    };
    let panels = w.panels();
    let mut y = vec![0f32; m * w.out];
    if m >= ROW_SPLIT {
        // Enough rows for each thread to take its own: one task per thread owns a run of output
        // rows and writes them in place, reading every panel once (each task streams the whole
        // weight from memory: with two tasks per thread, 128 rows ran 4-10% slower). The tiles
        // are dealt out evenly (130 rows, 17 tiles, to 2 threads: 64 and 66 rows), so that no
        // thread is left with a longer share.
        let tiles = m.div_ceil(MR);
        let tasks = rayon::current_num_threads().max(1).min(tiles);
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
        // Rows in blocks whose packed values stay in the L2 cache while the panels pass.
        let block = (ROW_BLOCK_VALUES / k / MR).max(1) * MR;
        parts.into_par_iter().for_each(|(first, dst)| {
            let rows = &xs[first * k..(first + dst.len() / w.out) * k];
            for (x, dst) in rows.chunks(block * k).zip(dst.chunks_mut(block * w.out)) {
                rows_times_panels(&pack_rows(x, k, KC), k, KC, panels, w.out, dst, w.out);
            }
        });
    } else {
        // Few rows: tasks own a few panels each and write their columns of every row to a
        // buffer of their own, copied into place after.
        // Up to three tiles pass over a panel in one go: too few to pay for blocking the steps.
        let kcb = if m.div_ceil(MR) <= 3 { k } else { KC };
        let a = pack_rows(xs, k, kcb);
        let per_task = (64 / m).clamp(1, 8);
        let parts: Vec<(usize, Vec<f32>)> = panels
            .par_chunks(per_task * k * NR)
            .enumerate()
            .map(|(task, panels)| {
                let col = task * per_task * NR;
                let width = (panels.len() / k).min(w.out - col);
                let mut dst = vec![0f32; m * width];
                rows_times_panels(&a, k, kcb, panels, width, &mut dst, width);
                (col, dst)
            })
            .collect();
        for (col, part) in parts {
            let width = part.len() / m;
            for (row, src) in y.chunks_exact_mut(w.out).zip(part.chunks_exact(width)) {
                row[col..col + width].copy_from_slice(src);
            }
        }
    }
    Tensor::from_vec(y, (m, w.out), x.device())
}

/// The rows of `x` (`[m, k]`) packed for [`rows_times_panels`]: block by block of `kcb` steps
/// ([`KC`], or all of `k`), and in each block tile by tile of [`MR`] rows (the last tile holds
/// the rows left), each step's values of a tile's rows side by side. The block from step `k0`
/// starts at `k0 * m`.
fn pack_rows(x: &[f32], k: usize, kcb: usize) -> Vec<f32> {
    let mut a = Vec::with_capacity(x.len());
    let rows: Vec<&[f32]> = x.chunks_exact(k).collect();
    for k0 in (0..k).step_by(kcb) {
        let kc = kcb.min(k - k0);
        for tile in rows.chunks(MR) {
            for kk in k0..k0 + kc {
                a.extend(tile.iter().map(|row| row[kk]));
            }
        }
    }
    a
}

/// One row's sums over one panel's columns, on a 64-byte boundary (two whole cache lines).
#[derive(Clone, Copy)]
#[repr(C, align(64))]
struct Lines([f32; NR]);

/// `y[i * stride + j] = Σ_kk x[i][kk] · W[j][kk]` for the rows packed in `a` ([`pack_rows`]) and
/// the first `width` columns of `panels`.
#[multiversion(targets("x86_64+avx512f+avx512vl+avx2+fma", "x86_64+avx2+fma", "aarch64+neon"))]
fn rows_times_panels(
    a: &[f32],
    k: usize,
    kcb: usize,
    panels: &[f32],
    width: usize,
    y: &mut [f32],
    stride: usize,
) {
    let m = a.len() / k;
    // A group of panels' sums for every row, over the blocks of steps so far: written to `y`
    // once per group, in runs of GROUP × NR columns.
    let mut sums = vec![Lines([0.0; NR]); m * GROUP];
    for (g, group) in panels.chunks(GROUP * k * NR).enumerate() {
        let n = group.len() / (k * NR);
        for (p, panel) in group.chunks_exact(k * NR).enumerate() {
            for k0 in (0..k).step_by(kcb) {
                let kc = kcb.min(k - k0);
                let b = &panel[k0 * NR..(k0 + kc) * NR];
                let block = &a[k0 * m..(k0 + kc) * m];
                for (t, tile) in block.chunks(MR * kc).enumerate() {
                    let mut put = |acc: &[[f32; NR]]| {
                        for (r, row) in acc.iter().enumerate() {
                            let sum = &mut sums[(t * MR + r) * n + p].0;
                            if k0 == 0 {
                                *sum = *row;
                            } else {
                                for (s, &v) in sum.iter_mut().zip(row) {
                                    *s += v;
                                }
                            }
                        }
                    };
                    match tile.len() / kc {
                        8 => put(&tile8(tile, b)),
                        7 => put(&tile7(tile, b)),
                        6 => put(&tile6(tile, b)),
                        5 => put(&tile5(tile, b)),
                        4 => put(&tile4(tile, b)),
                        3 => put(&tile3(tile, b)),
                        2 => put(&tile2(tile, b)),
                        _ => put(&tile1(tile, b)),
                    }
                }
            }
        }
        let col = g * GROUP * NR;
        let cols = (n * NR).min(width - col);
        for (row, sum) in y.chunks_mut(stride).zip(sums.chunks_exact(n)) {
            for (dst, s) in row[col..col + cols].chunks_mut(NR).zip(sum) {
                match <&mut [f32; NR]>::try_from(&mut *dst) {
                    // A whole panel's columns as one fixed-size copy (a slice copy is a call).
                    Ok(dst) => *dst = s.0,
                    Err(_) => dst.copy_from_slice(&s.0[..dst.len()]),
                }
            }
        }
    }
}

/// `$name(a, b)`: `N` packed input rows (`a`, `kc × N`) times `kc` steps of one panel (`b`,
/// `kc × NR`). Each row's accumulators are an array of their own, which the compiler keeps in
/// vector registers (a two-dimensional array of them it spilled to memory on every step).
macro_rules! tile {
    ($name:ident, $n:literal, $($acc:ident $r:literal),+) => {
        #[inline(always)]
        fn $name(a: &[f32], b: &[f32]) -> [[f32; NR]; $n] {
            $(let mut $acc = [0f32; NR];)+
            for (w, x) in b.chunks_exact(NR).zip(a.chunks_exact($n)) {
                let w: &[f32; NR] = w.try_into().expect("panels hold NR columns");
                let x: &[f32; $n] = x.try_into().expect("a tile's step holds its rows");
                for j in 0..NR {
                    $($acc[j] = x[$r].mul_add(w[j], $acc[j]);)+
                }
            }
            [$($acc),+]
        }
    };
}

tile!(tile8, 8, a0 0, a1 1, a2 2, a3 3, a4 4, a5 5, a6 6, a7 7);
tile!(tile7, 7, a0 0, a1 1, a2 2, a3 3, a4 4, a5 5, a6 6);
tile!(tile6, 6, a0 0, a1 1, a2 2, a3 3, a4 4, a5 5);
tile!(tile5, 5, a0 0, a1 1, a2 2, a3 3, a4 4);
tile!(tile4, 4, a0 0, a1 1, a2 2, a3 3);
tile!(tile3, 3, a0 0, a1 1, a2 2);
tile!(tile2, 2, a0 0, a1 1);
tile!(tile1, 1, a0 0);

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

    /// Every tile shape (6 to 1 rows), a partial last panel, blocks of steps and of rows, and
    /// weights packed together give what candle's matmul gives, in f64.
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
            // Blocks of steps (the last partial), rows in several blocks, and few rows with many
            // steps.
            (40, 600, vec![70]),
            (900, 600, vec![40, 8]),
            (5, 600, vec![33]),
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
            // f32 rounding over a sum of k products grows with k (an indexing slip is off by
            // tenths).
            let tolerance = 1e-5 * (k as f64 / 64.0).max(1.0);
            assert!(diff < tolerance, "m={m} k={k} outs={outs:?}: max diff {diff}");
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
