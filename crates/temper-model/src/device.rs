//! Devices by name (`cpu`, `cuda`, `cuda:N`, as `--device` and `[launch]` write them) and
//! opening them once per process.
//!
//! candle gives every `Device::new_cuda` call its own context and stream, and tensors of two
//! such devices cannot meet in one op even when they are the same GPU; [`open`] keeps one
//! [`Device`] per GPU for the whole process, so an engine and a trainer in one process share it.

use std::collections::HashMap;
use std::fmt;
use std::str::FromStr;
use std::sync::{Mutex, OnceLock};

use candle_core::Device;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::ModelError;

/// Where a role computes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum DeviceSpec {
    /// The CPU (the default).
    #[default]
    Cpu,
    /// CUDA devices from this index on.
    Cuda(usize),
}

impl DeviceSpec {
    /// Whether this is a GPU.
    pub fn is_cuda(self) -> bool {
        matches!(self, DeviceSpec::Cuda(_))
    }

    /// The device of the `index`-th process of a role on one node (the CPU stays the CPU).
    pub fn nth(self, index: usize) -> DeviceSpec {
        match self {
            DeviceSpec::Cpu => DeviceSpec::Cpu,
            DeviceSpec::Cuda(first) => DeviceSpec::Cuda(first + index),
        }
    }

    /// The precision a role runs in when nothing names one: bf16 on a GPU (as engines there
    /// serve), f32 on the CPU.
    pub fn default_dtype(self) -> &'static str {
        if self.is_cuda() { "bf16" } else { "f32" }
    }
}

impl fmt::Display for DeviceSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DeviceSpec::Cpu => f.write_str("cpu"),
            DeviceSpec::Cuda(n) => write!(f, "cuda:{n}"),
        }
    }
}

impl FromStr for DeviceSpec {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let bad = || format!("`{s}` is not a device: expected cpu, cuda or cuda:N (N = 0, 1, …)");
        match s {
            "cpu" => Ok(DeviceSpec::Cpu),
            "cuda" => Ok(DeviceSpec::Cuda(0)),
            other => {
                let n = other.strip_prefix("cuda:").ok_or_else(bad)?;
                // Digits only: no sign, no spaces; and an index a machine can have.
                if n.is_empty() || n.len() > 4 || !n.bytes().all(|b| b.is_ascii_digit()) {
                    return Err(bad());
                }
                n.parse().map(DeviceSpec::Cuda).map_err(|_| bad())
            }
        }
    }
}

impl Serialize for DeviceSpec {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for DeviceSpec {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

/// Opens `spec` (once per GPU per process: later calls return the same device). Errors do not
/// repeat the device's name: the caller says where it came from.
pub fn open(spec: DeviceSpec) -> Result<Device, ModelError> {
    let DeviceSpec::Cuda(n) = spec else { return Ok(Device::Cpu) };
    static OPEN: OnceLock<Mutex<HashMap<usize, Device>>> = OnceLock::new();
    let mut open = OPEN.get_or_init(Default::default).lock().unwrap_or_else(|e| e.into_inner());
    if let Some(d) = open.get(&n) {
        return Ok(d.clone());
    }
    if !cfg!(feature = "cuda") {
        return Err(ModelError::Device(
            "this temper was built without CUDA; build it with `cargo build --release --features cuda` (needs the CUDA toolkit's nvcc), or use the CPU".into(),
        ));
    }
    let d = Device::new_cuda(n).map_err(|e| {
        ModelError::Device(format!(
            "cannot open the device (nvidia-smi lists the devices this machine has): {e}"
        ))
    })?;
    open.insert(n, d.clone());
    Ok(d)
}

/// The device the variable `var` names (`TEMPER_TEST_DEVICE` in the test suites, which
/// scripts/gpu-check sets to run them on a GPU), or the CPU when it is unset.
pub fn from_env(var: &str) -> Result<Device, ModelError> {
    match std::env::var(var) {
        Ok(v) if !v.is_empty() => {
            let spec = v.parse().map_err(|e: String| ModelError::Device(format!("{var}: {e}")))?;
            open(spec).map_err(|e| ModelError::Device(format!("{var}={v}: {e}")))
        }
        _ => Ok(Device::Cpu),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn devices_parse_as_the_serve_flag_takes_them() {
        assert_eq!("cpu".parse(), Ok(DeviceSpec::Cpu));
        assert_eq!("cuda".parse(), Ok(DeviceSpec::Cuda(0)));
        assert_eq!("cuda:3".parse(), Ok(DeviceSpec::Cuda(3)));
        for bad in
            ["gpu", "CUDA", "cuda:", "cuda:-1", "cuda:+1", "cuda: 1", "cuda:99999", "cuda:1.5", ""]
        {
            let e = bad.parse::<DeviceSpec>().unwrap_err();
            assert!(e.contains("expected cpu, cuda or cuda:N"), "{bad}: {e}");
        }
        assert_eq!(DeviceSpec::Cuda(1).to_string(), "cuda:1");
        assert_eq!(DeviceSpec::Cuda(1).nth(2), DeviceSpec::Cuda(3));
        assert_eq!(DeviceSpec::Cpu.nth(2), DeviceSpec::Cpu);
        assert_eq!(DeviceSpec::Cuda(0).default_dtype(), "bf16");
        assert_eq!(DeviceSpec::Cpu.default_dtype(), "f32");
    }

    #[test]
    fn the_cpu_opens_everywhere_and_cuda_only_in_a_cuda_build() {
        assert!(open(DeviceSpec::Cpu).unwrap().is_cpu());
        if !cfg!(feature = "cuda") {
            let e = open(DeviceSpec::Cuda(0)).unwrap_err().to_string();
            assert!(e.starts_with("this temper was built without CUDA"), "{e}");
        }
        assert!(from_env("TEMPER_TEST_NO_SUCH_VARIABLE").unwrap().is_cpu());
    }
}
