//! candle-nn's fused `softmax_last_dim`, `rms_norm`, `layer_norm` and `rope` have no backward
//! pass: gradients through them are silently dropped. The training path must not use them.

use std::path::Path;

fn rust_files(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// Uses of candle-nn, or of candle's fused kernels by the names they are known under.
pub fn forbidden_uses(crate_dir: &Path) -> Vec<String> {
    let mut found = Vec::new();
    let manifest = std::fs::read_to_string(crate_dir.join("Cargo.toml")).unwrap();
    if manifest.lines().any(|l| l.trim_start().starts_with("candle-nn")) {
        found.push(format!("{}: depends on candle-nn", crate_dir.display()));
    }
    let mut files = Vec::new();
    rust_files(&crate_dir.join("src"), &mut files);
    assert!(!files.is_empty(), "no sources under {}", crate_dir.display());
    let patterns = ["candle_nn", "candle-nn::", "rotary_emb::", "ops::layer_norm", "fused"];
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap();
        for (i, line) in text.lines().enumerate() {
            let code = line.split("//").next().unwrap_or("");
            if patterns.iter().any(|p| code.contains(p)) {
                found.push(format!("{}:{}: {}", file.display(), i + 1, line.trim()));
            }
        }
    }
    found
}

#[test]
fn training_path_has_no_gradient_less_fused_ops() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let found = forbidden_uses(dir);
    assert!(found.is_empty(), "gradient-less ops on the training path:\n{}", found.join("\n"));
}

#[test]
fn the_guard_sees_a_forbidden_use() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("src")).unwrap();
    std::fs::write(dir.path().join("Cargo.toml"), "[dependencies]\n").unwrap();
    std::fs::write(
        dir.path().join("src/lib.rs"),
        "// candle_nn in a comment is fine\nfn f(x: &Tensor) { candle_nn::ops::softmax_last_dim(x); }\n",
    )
    .unwrap();
    let found = forbidden_uses(dir.path());
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(found[0].contains("lib.rs:2"));
}
