//! Where a role computes and in what precision (`[launch] inference_device`, `trainer_device`,
//! `inference_dtype`, `trainer_dtype`), and whether this build can do it.
//!
//! A device is written as `temper inference serve --device` takes it: `cpu`, `cuda` (the first
//! GPU) or `cuda:N`. It names the first GPU of a role on each node: with several inference
//! servers on one node, server `i` of the node gets `cuda:N+i`; several trainer ranks on a node
//! take `cuda:N + local rank` (the trainer adds its launcher's local rank).

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// The precisions a role can run in, as `--dtype` takes them.
pub const DTYPES: &[&str] = &["f32", "bf16", "f16"];

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

/// What this build of temper can run, for the checks that refuse a config it cannot.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Build {
    /// Several trainer ranks (cargo feature `mpi`).
    pub mpi: bool,
    /// CUDA devices (cargo feature `cuda`).
    pub cuda: bool,
}

impl Build {
    /// The features of the running binary, as its crate was compiled (`cfg!(feature = …)`).
    pub fn new(mpi: bool, cuda: bool) -> Self {
        Self { mpi, cuda }
    }
}

/// Checks a dtype name, for the field `field`.
pub fn check_dtype(field: &str, name: &str) -> Result<(), String> {
    if DTYPES.contains(&name) {
        Ok(())
    } else {
        Err(format!("{field} = {name:?} is not a precision: expected one of {}", DTYPES.join(", ")))
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
    fn dtypes_are_checked() {
        assert!(check_dtype("launch.inference_dtype", "bf16").is_ok());
        let e = check_dtype("launch.inference_dtype", "fp16").unwrap_err();
        assert_eq!(
            e,
            "launch.inference_dtype = \"fp16\" is not a precision: expected one of f32, bf16, f16"
        );
    }
}
