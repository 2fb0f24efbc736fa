//! Times `x W^T` for the shapes of SmolLM2-135M's layers at 1, 8 and 32 rows: candle's gemm
//! (`x W^T` and `(W x^T)^T`) against temper's small-row kernel, and prints the largest difference;
//! then the packed kernel (`prepacked`) on the shapes of a layer at 8 to 512 rows, in GFLOP/s.
//! `cargo run --release -p temper-model --example matmul_probe [packed]` (`packed`: only the
//! packed kernel; set RAYON_NUM_THREADS: candle
//! reads /proc/cpuinfo before every product without it).
#![allow(clippy::print_stdout, reason = "a measuring program prints its table")]

use candle_core::{Device, Tensor};
use std::time::Instant;
fn main() -> candle_core::Result<()> {
    let d = Device::Cpu;
    let only_packed = std::env::args().nth(1).as_deref() == Some("packed");
    for (out, inp) in [(1536usize, 576usize), (576, 1536), (49152, 576)] {
        let w = Tensor::randn(0f32, 1.0, (out, inp), &d)?;
        for m in [1usize, 8, 32] {
            if only_packed {
                break;
            }
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
    // The packed kernel on a layer's products: query/key/value as one, gate/up as one, the
    // attention output and the MLP's down projection.
    for m in [1usize, 8, 16, 32, 128, 512] {
        let mut line = format!("packed m={m}:");
        for (out, inp) in [(960usize, 576usize), (3072, 576), (576, 576), (576, 1536)] {
            let w = Tensor::randn(0f32, 1.0, (out, inp), &d)?;
            let x = Tensor::randn(0f32, 1.0, (m, inp), &d)?;
            let packed =
                temper_model::prepacked::PackedWeight::pack(&[&w])?.expect("f32 on the CPU");
            temper_model::prepacked::matmul_packed(&x, &packed)?;
            // Calls for at least 300 ms, so that the median is of many.
            let mut times = Vec::new();
            let begun = Instant::now();
            while times.len() < 5 || begun.elapsed().as_secs_f64() < 0.3 {
                let t = Instant::now();
                temper_model::prepacked::matmul_packed(&x, &packed)?;
                times.push(t.elapsed().as_secs_f64());
            }
            times.sort_by(f64::total_cmp);
            let gflops = 2.0 * (m * out * inp) as f64 / times[times.len() / 2] / 1e9;
            line.push_str(&format!(" [{out},{inp}] {gflops:.0}"));
        }
        println!("{line} GFLOP/s (median)");
    }
    Ok(())
}
