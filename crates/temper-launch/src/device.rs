//! Where a role computes and in what precision (`[launch] inference_device`, `trainer_device`,
//! `inference_dtype`, `trainer_dtype`), and whether this build can do it.
//!
//! A device is written as `temper inference serve --device` takes it: `cpu`, `cuda` (the first
//! GPU) or `cuda:N`. It names the first GPU of a role on each node: with several inference
//! servers on one node, server `i` of the node gets `cuda:N+i`; several trainer ranks on a node
//! take `cuda:N + local rank` (the trainer adds its launcher's local rank).

/// The precisions a role can run in, as `--dtype` takes them.
pub const DTYPES: &[&str] = &["f32", "bf16", "f16"];

pub use temper_model::device::DeviceSpec;

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
    fn dtypes_are_checked() {
        assert!(check_dtype("launch.inference_dtype", "bf16").is_ok());
        let e = check_dtype("launch.inference_dtype", "fp16").unwrap_err();
        assert_eq!(
            e,
            "launch.inference_dtype = \"fp16\" is not a precision: expected one of f32, bf16, f16"
        );
    }
}
