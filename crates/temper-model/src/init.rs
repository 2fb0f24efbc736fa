//! Seeded random initialisation, for models trained from scratch and for tests.

use candle_core::{Device, Result, Tensor};
use rand::{Rng, SeedableRng};

/// A `shape` tensor of normal samples with standard deviation `std`, the same for the same
/// `seed` on every machine (ChaCha8 and Box–Muller, no platform-dependent sampler).
pub fn normal(shape: &[usize], std: f64, seed: u64, device: &Device) -> Result<Tensor> {
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    let n: usize = shape.iter().product();
    let mut out = Vec::with_capacity(n + 1);
    while out.len() < n {
        // Box–Muller: two uniforms in (0, 1] give two independent standard normals.
        let u1: f64 = 1.0 - rng.random::<f64>();
        let u2: f64 = rng.random::<f64>();
        let r = (-2.0 * u1.ln()).sqrt();
        let t = 2.0 * std::f64::consts::PI * u2;
        out.push((r * t.cos() * std) as f32);
        out.push((r * t.sin() * std) as f32);
    }
    out.truncate(n);
    Tensor::from_vec(out, shape, device)
}
