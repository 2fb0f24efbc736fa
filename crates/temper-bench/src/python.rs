//! The PyTorch sides of the benchmarks: Python scripts compiled into the binary, run with the
//! Python the user names, a JSON spec on stdin and JSON on stdout.

use std::io::Write as _;
use std::path::Path;
use std::process::{Command, Stdio};

use anyhow::{Context, bail};
use serde_json::Value;

/// A bundled script: its file name and its text.
#[derive(Debug, Clone, Copy)]
pub struct Script {
    /// The file name it is written under.
    pub name: &'static str,
    /// The Python source.
    pub source: &'static str,
    /// What the Python running it must have, for the error when it fails.
    pub needs: &'static str,
}

/// Generation with Hugging Face transformers (`temper inference bench`).
pub const TRANSFORMERS: Script = Script {
    name: "bench_transformers.py",
    source: include_str!("../python/bench_transformers.py"),
    needs: "torch, transformers and safetensors (scripts/bench-inference makes such an environment)",
};

/// Generation with llama.cpp through llama-cpp-python (`temper inference bench --llama-cpp`).
pub const LLAMA_CPP: Script = Script {
    name: "bench_llamacpp.py",
    source: include_str!("../python/bench_llamacpp.py"),
    needs: "llama-cpp-python and numpy (scripts/bench-inference makes such an environment)",
};

/// AdamW training steps in PyTorch (`temper trainer bench`).
pub const TRAIN: Script = Script {
    name: "bench_train.py",
    source: include_str!("../python/bench_train.py"),
    needs: "torch, transformers and safetensors (scripts/bench-train makes such an environment)",
};

/// Runs `script` with `python`, `spec` as JSON on its stdin, and parses the JSON it prints.
pub fn run_json(python: &Path, script: Script, spec: &Value) -> anyhow::Result<Value> {
    let dir = tempfile::tempdir().context("cannot make a temporary folder for the script")?;
    let path = dir.path().join(script.name);
    std::fs::write(&path, script.source)
        .with_context(|| format!("cannot write {}", path.display()))?;
    let mut child = Command::new(python)
        .arg(&path)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .with_context(|| format!("cannot run {}", python.display()))?;
    child.stdin.take().context("no stdin")?.write_all(spec.to_string().as_bytes())?;
    let out = child.wait_with_output()?;
    if !out.status.success() {
        bail!(
            "{} {} failed ({}); it needs a Python with {}",
            python.display(),
            script.name,
            out.status,
            script.needs
        );
    }
    serde_json::from_slice(&out.stdout)
        .with_context(|| format!("{} printed something other than JSON", script.name))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The embedded scripts run outside the source tree: a script that echoes its spec.
    #[test]
    fn a_bundled_script_runs_from_a_temporary_folder() {
        let echo = Script {
            name: "echo.py",
            source: "import json, sys\nprint(json.dumps({'got': json.load(sys.stdin)['x'] * 2}))\n",
            needs: "nothing",
        };
        let out = run_json(Path::new("python3"), echo, &serde_json::json!({"x": 21})).unwrap();
        assert_eq!(out["got"], 42);
        let fail = Script { name: "fail.py", source: "raise SystemExit(3)\n", needs: "a miracle" };
        let e = run_json(Path::new("python3"), fail, &Value::Null).unwrap_err().to_string();
        assert!(e.contains("fail.py failed") && e.contains("a miracle"), "{e}");
        assert!(TRAIN.source.contains("import") && TRANSFORMERS.source.contains("transformers"));
        assert!(LLAMA_CPP.source.contains("llama_decode"));
    }
}
