//! The GPU path where there is no GPU: scripts/gpu-check's dry run checks the loads that
//! scripts/gpu-build makes and prints its plan, and names what is missing.

use std::path::Path;
use std::process::Command;

fn gpu_check(from: &Path) -> (i32, String, String) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let out = Command::new("bash")
        .arg(root.join("scripts/gpu-check"))
        .args(["--dry-run", "--from"])
        .arg(from)
        .output()
        .expect("run scripts/gpu-check");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn gpu_check_dry_run_checks_the_loads_and_prints_the_plan() {
    let tmp = tempfile::tempdir().unwrap();
    let (one, two) = (tmp.path().join("load-1"), tmp.path().join("load-2"));
    std::fs::create_dir_all(&one).unwrap();
    std::fs::create_dir_all(&two).unwrap();
    // Files spread over two loads, as gpu-build packs them; the model's parts in both.
    for (dir, name) in [
        (&one, "temper.zst"),
        (&one, "temper-model-it.zst"),
        (&two, "temper-inference-it.zst"),
        (&two, "temper-trainer-it.zst"),
        (&one, "SmolLM2-135M-Instruct.Q4_1.gguf.part-00"),
        (&two, "SmolLM2-135M-Instruct.Q4_1.gguf.part-01"),
        (&two, "SmolLM2-135M-Instruct.Q4_1.gguf.part-02"),
    ] {
        std::fs::write(dir.join(name), b"x").unwrap();
    }
    std::fs::write(two.join("BUILT-FROM"), "0123abcd\n").unwrap();
    std::fs::write(two.join("BUILT-IN"), "/somewhere/temper\n").unwrap();

    let (code, stdout, stderr) = gpu_check(tmp.path());
    assert_eq!(code, 0, "{stdout}{stderr}");
    assert!(stdout.contains("SmolLM2-135M-Instruct.Q4_1.gguf (3 parts)"), "{stdout}");
    for step in [
        "1. test suites on cuda:0",
        "--device cuda:0 --dtype bf16 --python python3 --batches 1,8,32",
        "5. temper rl examples/math/rl.toml on cuda:0",
        "6. temper trainer bench --device cuda:0",
        "7. gpu-check.json and gpu-check.md",
    ] {
        assert!(stdout.contains(step), "{step}: {stdout}");
    }
    // Built from another commit: said, not refused.
    assert!(stdout.contains("note: the loads were built from 0123abcd"), "{stdout}");
    assert!(stdout.ends_with("dry run: inputs ok (built from 0123abcd)\n"), "{stdout}");

    std::fs::remove_file(two.join("temper-trainer-it.zst")).unwrap();
    std::fs::remove_file(one.join("SmolLM2-135M-Instruct.Q4_1.gguf.part-00")).unwrap();
    let (code, stdout, stderr) = gpu_check(tmp.path());
    assert_eq!(code, 2, "{stdout}{stderr}");
    assert!(stderr.contains("missing: temper-trainer-it.zst (in "), "{stderr}");
    // A part missing from the middle of the model is not a model.
    assert!(stderr.contains("missing: SmolLM2-135M-Instruct.Q4_1.gguf.part-00"), "{stderr}");

    let (code, _, stderr) = gpu_check(&tmp.path().join("nothing-here"));
    assert_eq!(code, 2);
    assert!(stderr.contains("no loads (run scripts/gpu-build here first)"), "{stderr}");
}
