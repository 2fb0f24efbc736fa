//! `temper trainer bench-publish`: how long publishing weights through the filesystem takes, as
//! the trainer does each step (safetensors written, renamed into place, then `STABLE`), and how
//! long a server takes to read them back, against the size of the weights.

use std::collections::BTreeMap;
use std::time::Instant;

use candle_core::{Device, Tensor};
use serde_json::json;
use temper_model::weights;

use crate::PublishBenchArgs;
use crate::report::median;

/// f32 elements per tensor (16 MiB).
const TENSOR_ELEMS: usize = 4 << 20;

pub async fn run(args: PublishBenchArgs) -> anyhow::Result<()> {
    anyhow::ensure!(args.reps > 0 && !args.sizes_mib.is_empty(), "nothing to measure");
    std::fs::create_dir_all(&args.dir)?;
    println!("| size | write + rename + STABLE (median) | GB/s | read back (median) | GB/s |");
    println!("|---:|---:|---:|---:|---:|");
    let mut rows = Vec::new();
    for &mib in &args.sizes_mib {
        let tensors: BTreeMap<String, Tensor> = (0..mib.div_ceil(16))
            .map(|i| {
                let t = Tensor::rand(-1f32, 1f32, TENSOR_ELEMS, &Device::Cpu)?;
                Ok((format!("model.layers.{i}.weight"), t))
            })
            .collect::<candle_core::Result<_>>()?;
        let bytes = (tensors.len() * TENSOR_ELEMS * 4) as f64;
        let (mut writes, mut reads) = (Vec::new(), Vec::new());
        for rep in 0..args.reps {
            let dir = args.dir.join(format!("step_{mib}_{rep}"));
            let _ = std::fs::remove_dir_all(&dir);
            let started = Instant::now();
            weights::save_tensors(&tensors, &json!({}), &dir, weights::SHARD_BYTES)?;
            std::fs::write(dir.join("STABLE"), b"")?;
            writes.push(started.elapsed().as_secs_f64());
            let started = Instant::now();
            let files = weights::safetensors_files(&dir)?;
            let back = weights::load_safetensors(&files, &Device::Cpu)?;
            anyhow::ensure!(back.len() == tensors.len(), "read back {} tensors", back.len());
            reads.push(started.elapsed().as_secs_f64());
            std::fs::remove_dir_all(&dir)?;
        }
        let (w, r) = (median(&writes), median(&reads));
        println!(
            "| {mib} MiB | {w:.3} s | {:.2} | {r:.3} s | {:.2} |",
            bytes / w / 1e9,
            bytes / r / 1e9
        );
        rows.push(json!({
            "mib": mib, "write_s": writes, "read_s": reads,
            "write_median_s": w, "read_median_s": r,
            "write_gb_per_s": bytes / w / 1e9, "read_gb_per_s": bytes / r / 1e9,
        }));
    }
    crate::report::write(&args.output, &json!({"dir": args.dir, "rows": rows}))
}
