//! Times `x W^T` for the shapes of SmolLM2-135M's layers at 1, 8 and 32 rows: candle's gemm
//! (`x W^T` and `(W x^T)^T`) against temper's small-row kernel, and prints the largest difference.
//! `cargo run --release -p temper-model --example matmul_probe` (set RAYON_NUM_THREADS: candle
//! reads /proc/cpuinfo before every product without it).
#![allow(clippy::print_stdout, reason = "a measuring program prints its table")]

use candle_core::{Device, Tensor};
use std::time::Instant;
fn main() -> candle_core::Result<()> {
    let d = Device::Cpu;
    for (out, inp) in [(1536usize, 576usize), (576, 1536), (49152, 576)] {
        let w = Tensor::randn(0f32, 1.0, (out, inp), &d)?;
        for m in [1usize, 8, 32] {
            let x = Tensor::randn(0f32, 1.0, (m, inp), &d)?;
            let reps = if out > 10000 { 20 } else { 200 };
            let time = |f: &dyn Fn() -> candle_core::Result<Tensor>| {
                f()?;
                let t = Instant::now();
                for _ in 0..reps {
                    f()?;
                }
                Ok::<_, candle_core::Error>(t.elapsed().as_secs_f64() * 1e6 / reps as f64)
            };
            let a = time(&|| x.matmul(&w.t()?))?;
            let b = time(&|| w.matmul(&x.t()?)?.t()?.contiguous())?;
            let c = time(&|| temper_model::kernels::matmul_wt(&x, &w))?;
            let diff = (x.matmul(&w.t()?)? - temper_model::kernels::matmul_wt(&x, &w)?)?;
            let d = diff.abs()?.max_all()?.to_scalar::<f32>()?;
            println!(
                "W[{out},{inp}] m={m}: x@W.t {a:.0} us | (W@x.t).t {b:.0} us | kernel {c:.0} us (max diff {d:.1e})"
            );
        }
    }
    Ok(())
}
