//! Integration tests of temper-model: gradients against finite differences, the KV cache
//! against full forwards, weight I/O round trips, configuration errors, and a guard against
//! candle-nn's gradient-less fused ops.

mod chat;
mod config;
mod gguf;
mod grad;
mod guard;
mod model;
mod moe;
mod pretrained;
mod weights;

use candle_core::{DType, Tensor};

/// A deterministic `shape` tensor of values in about [-1, 1] (f64).
pub fn sample(shape: &[usize], seed: u64) -> Tensor {
    let n: usize = shape.iter().product();
    let mut state = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
    let data: Vec<f64> = (0..n)
        .map(|_| {
            state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            ((state >> 11) as f64 / (1u64 << 53) as f64) * 2.0 - 1.0
        })
        .collect();
    Tensor::from_vec(data, shape, &dev()).unwrap().to_dtype(DType::F64).unwrap()
}

/// Largest absolute difference between two tensors of the same shape.
pub fn max_abs_diff(a: &Tensor, b: &Tensor) -> f64 {
    assert_eq!(a.dims(), b.dims(), "shapes differ");
    let a = temper_model::ops::to_f64_vec(a).unwrap();
    let b = temper_model::ops::to_f64_vec(b).unwrap();
    a.iter().zip(&b).map(|(x, y)| (x - y).abs()).fold(0.0, f64::max)
}

/// The device the tests compute on: `TEMPER_TEST_DEVICE` (`cpu`, `cuda`, `cuda:N`; set by
/// scripts/gpu-check to run this suite on a GPU), else the CPU. Opened once per process.
pub fn dev() -> candle_core::Device {
    temper_model::device::from_env("TEMPER_TEST_DEVICE").expect("TEMPER_TEST_DEVICE")
}
