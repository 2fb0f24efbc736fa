//! A sandbox built with the helper binary of this crate.

use std::path::PathBuf;

use temper_sandbox::{Sandbox, SandboxConfig};

pub fn config() -> SandboxConfig {
    SandboxConfig {
        helper: (
            PathBuf::from(env!("CARGO_BIN_EXE_temper-sandbox-slot")),
            vec!["__sandbox-slot".into()],
        ),
        pool_size: 2,
        ..SandboxConfig::default()
    }
}

pub async fn sandbox() -> Sandbox {
    Sandbox::new(config()).await.expect("the sandbox starts on this machine (root, cgroups)")
}
