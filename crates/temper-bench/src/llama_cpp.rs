//! The llama.cpp side of `temper inference bench`: the same weights as temper runs, written as a
//! GGUF llama.cpp reads at full precision, and the run of the bundled llama-cpp-python script.
//!
//! temper loads a quantized GGUF (SmolLM2's is Q4_1) by dequantizing it to f32; giving llama.cpp
//! the quantized file would measure its quantized kernels against temper's f32 ones. So the
//! benchmark writes the dequantized tensors into a new GGUF (F32, or F16 for `--dtype f16`) with
//! the source's metadata (architecture, tokenizer) and tensor names: the same numbers, in the
//! layout llama.cpp expects, since the names and shapes are the source's.

use std::fs::File;
use std::io::{BufReader, BufWriter};
use std::path::Path;

use anyhow::{Context, bail};
use candle_core::Device;
use candle_core::quantized::gguf_file::{self, Value};
use candle_core::quantized::{GgmlDType, QTensor};

/// GGUF's `general.file_type` for a file whose tensors are all `dtype` (llama.cpp's
/// `LLAMA_FTYPE_ALL_F32` is 0, `LLAMA_FTYPE_MOSTLY_F16` 1).
fn file_type(dtype: GgmlDType) -> anyhow::Result<u32> {
    match dtype {
        GgmlDType::F32 => Ok(0),
        GgmlDType::F16 => Ok(1),
        other => bail!("llama.cpp's side is written in f32 or f16, not {other:?}"),
    }
}

/// Writes `src`'s tensors, dequantized and stored as `dtype` (F32 or F16), with its metadata, to
/// `dst`. Tensors are written in name order; `general.file_type` and `general.alignment` are set
/// to what the new file holds.
pub fn write_gguf(src: &Path, dst: &Path, dtype: GgmlDType) -> anyhow::Result<()> {
    let ftype = file_type(dtype)?;
    let mut reader =
        BufReader::new(File::open(src).with_context(|| format!("cannot open {}", src.display()))?);
    let content = gguf_file::Content::read(&mut reader)
        .with_context(|| format!("{} is not a GGUF file", src.display()))?;
    let mut names: Vec<&String> = content.tensor_infos.keys().collect();
    names.sort();
    let mut tensors = Vec::with_capacity(names.len());
    for name in names {
        let q = content
            .tensor(&mut reader, name, &Device::Cpu)
            .with_context(|| format!("{}: cannot read tensor {name}", src.display()))?;
        let full = q.dequantize(&Device::Cpu)?;
        tensors.push((name.as_str(), QTensor::quantize(&full, dtype)?));
    }
    let mut metadata: Vec<(String, Value)> = content
        .metadata
        .iter()
        .filter(|(k, _)| !matches!(k.as_str(), "general.file_type" | "general.alignment"))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    metadata.push(("general.file_type".into(), Value::U32(ftype)));
    metadata.push(("general.alignment".into(), Value::U32(32)));
    metadata.sort_by(|a, b| a.0.cmp(&b.0));
    let metadata: Vec<(&str, &Value)> = metadata.iter().map(|(k, v)| (k.as_str(), v)).collect();
    let tensors: Vec<(&str, &QTensor)> = tensors.iter().map(|(n, t)| (*n, t)).collect();
    let mut out = BufWriter::new(
        File::create(dst).with_context(|| format!("cannot write {}", dst.display()))?,
    );
    gguf_file::write(&mut out, &metadata, &tensors)
        .with_context(|| format!("cannot write {}", dst.display()))?;
    std::io::Write::flush(&mut out).with_context(|| format!("cannot write {}", dst.display()))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::Tensor;

    /// A quantized tensor comes out as exactly its dequantized values, the metadata survives, and
    /// the file type says what the file now holds.
    #[test]
    fn a_quantized_gguf_is_rewritten_at_full_precision() {
        let dir = tempfile::tempdir().unwrap();
        let src = dir.path().join("q.gguf");
        let values: Vec<f32> = (0..2 * 64).map(|i| ((i * 37 % 101) as f32 - 50.0) / 7.0).collect();
        let t = Tensor::from_vec(values, (2, 64), &Device::Cpu).unwrap();
        let q = QTensor::quantize(&t, GgmlDType::Q4_1).unwrap();
        let bias = QTensor::quantize(
            &Tensor::new(&[1.5f32, -2.25], &Device::Cpu).unwrap(),
            GgmlDType::F32,
        )
        .unwrap();
        let arch = Value::String("llama".into());
        let tokens = Value::Array(vec![Value::String("a".into()), Value::String("b".into())]);
        let old_type = Value::U32(3);
        {
            let mut f = File::create(&src).unwrap();
            gguf_file::write(
                &mut f,
                &[
                    ("general.architecture", &arch),
                    ("tokenizer.ggml.tokens", &tokens),
                    ("general.file_type", &old_type),
                ],
                &[("blk.0.w", &q), ("b", &bias)],
            )
            .unwrap();
        }
        let want = q.dequantize(&Device::Cpu).unwrap().to_vec2::<f32>().unwrap();
        for (dtype, ftype) in [(GgmlDType::F32, 0), (GgmlDType::F16, 1)] {
            let dst = dir.path().join(format!("{dtype:?}.gguf"));
            write_gguf(&src, &dst, dtype).unwrap();
            let mut r = BufReader::new(File::open(&dst).unwrap());
            let c = gguf_file::Content::read(&mut r).unwrap();
            assert_eq!(c.metadata["general.architecture"].to_string().unwrap(), "llama");
            assert_eq!(c.metadata["general.file_type"].to_u32().unwrap(), ftype);
            assert_eq!(c.metadata["tokenizer.ggml.tokens"].to_vec().unwrap().len(), 2);
            let w = c.tensor(&mut r, "blk.0.w", &Device::Cpu).unwrap();
            assert_eq!(w.dtype(), dtype);
            let got = w.dequantize(&Device::Cpu).unwrap().to_vec2::<f32>().unwrap();
            for (g, w) in got.iter().flatten().zip(want.iter().flatten()) {
                // f16 keeps 11 significant bits; the Q4_1 values here are below 8 in size.
                let tol = if dtype == GgmlDType::F32 { 0.0 } else { 8.0 / 2048.0 };
                assert!((g - w).abs() <= tol, "{dtype:?}: {g} vs {w}");
            }
            let b = c.tensor(&mut r, "b", &Device::Cpu).unwrap().dequantize(&Device::Cpu).unwrap();
            assert_eq!(b.to_vec1::<f32>().unwrap(), [1.5, -2.25]);
        }
        let e = write_gguf(&src, &dir.path().join("x.gguf"), GgmlDType::Q8_0).unwrap_err();
        assert!(e.to_string().contains("f32 or f16"), "{e}");
        let e = write_gguf(
            &dir.path().join("missing.gguf"),
            &dir.path().join("y.gguf"),
            GgmlDType::F32,
        )
        .unwrap_err();
        assert!(e.to_string().contains("cannot open"), "{e}");
    }
}
