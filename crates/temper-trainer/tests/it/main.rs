//! Integration tests of temper-trainer.

mod lora;
mod loss;
mod nccl;
mod optim;
mod parity;
mod rl;
mod train;

use candle_core::{DType, Tensor};

/// Values of a tensor as f64.
pub fn vals(t: &Tensor) -> Vec<f64> {
    t.to_dtype(DType::F64).unwrap().flatten_all().unwrap().to_vec1::<f64>().unwrap()
}

/// A scalar tensor as f64.
pub fn scalar(t: &Tensor) -> f64 {
    t.to_dtype(DType::F64).unwrap().to_scalar::<f64>().unwrap()
}

/// Asserts `a` and `b` agree to `tol` (absolute), with a message.
#[track_caller]
pub fn close(a: f64, b: f64, tol: f64, what: &str) {
    assert!((a - b).abs() <= tol, "{what}: {a} vs {b} (diff {})", (a - b).abs());
}

/// The device the tests compute on: `TEMPER_TEST_DEVICE` (`cpu`, `cuda`, `cuda:N`; set by
/// scripts/gpu-check to run this suite on a GPU), else the CPU. Opened once per process.
pub fn dev() -> candle_core::Device {
    temper_model::device::from_env("TEMPER_TEST_DEVICE").expect("TEMPER_TEST_DEVICE")
}
