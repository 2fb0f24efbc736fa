//! `temper sft`: SIGKILL and resume continue the loss curve bit for bit; config errors are clear.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn config(dir: &Path, out: &str) -> String {
    format!(
        r#"
[model.scratch]
hidden_size = 32
num_layers = 2
num_heads = 4
num_kv_heads = 2
intermediate_size = 64
max_positions = 256

[data]
env = "reverse-text"
train_size = 200
completion_template = "<reversed_text>{{answer}}</reversed_text>"
validation_size = 8

[train]
steps = 24
batch_size = 4
seq_len = 256
micro_batch_rows = 1

[optim]
lr = 3e-3

[schedule]
type = "cosine"
warmup_steps = 3

[eval]
num_examples = 0

[checkpoint]
every = 4
keep = 3

[output]
dir = "{}"
"#,
        dir.join(out).display()
    )
}

fn temper(args: &[&str]) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_temper"));
    c.args(args).stdout(Stdio::piped()).stderr(Stdio::piped());
    c
}

fn losses(run: &Path) -> Vec<(u64, u64)> {
    std::fs::read_to_string(run.join("metrics.jsonl"))
        .unwrap()
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter_map(|v| Some((v["step"].as_u64()?, v.get("loss/mean")?.as_f64()?.to_bits())))
        .collect()
}

#[test]
fn sigkill_then_resume_continues_the_loss_curve_bit_for_bit() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = tmp.path().join("sft.toml");
    std::fs::write(&cfg, config(tmp.path(), "a")).unwrap();
    let cfg_s = cfg.to_str().unwrap();
    let out = temper(&["sft", cfg_s]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let whole = losses(&tmp.path().join("a"));
    assert_eq!(whole.len(), 24);

    // Same config into b; kill it once a checkpoint past step 8 exists.
    let b = tmp.path().join("b");
    let set = format!("output.dir={}", b.display());
    let mut child = temper(&["sft", cfg_s, "--set", &set]).spawn().unwrap();
    let started = Instant::now();
    loop {
        let done = std::fs::read_dir(b.join("checkpoints")).ok().is_some_and(|d| {
            d.filter_map(Result::ok).any(|e| {
                let name = e.file_name().to_string_lossy().into_owned();
                name.strip_prefix("step_")
                    .and_then(|n| n.parse::<u64>().ok())
                    .is_some_and(|n| n >= 8)
            })
        });
        if done {
            break;
        }
        assert!(child.try_wait().unwrap().is_none(), "the run ended before it could be killed");
        assert!(started.elapsed() < Duration::from_secs(120), "no checkpoint after 120 s");
        std::thread::sleep(Duration::from_millis(20));
    }
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    let before = losses(&b);
    assert!(before.len() < 24, "the run finished before the kill");

    // Without --resume the used folder is refused, naming the way out.
    let out = temper(&["sft", cfg_s, "--set", &set]).output().unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--resume"));

    let out = temper(&["sft", cfg_s, "--set", &set, "--resume"]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(losses(&b), whole, "the resumed loss curve differs");
    assert!(b.join("final/model.safetensors").is_file());
    assert!(b.join("final/tokenizer.json").is_file());
}

#[test]
fn config_errors_name_the_field() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = tmp.path().join("sft.toml");
    std::fs::write(&cfg, config(tmp.path(), "c")).unwrap();
    let cfg_s = cfg.to_str().unwrap();
    for (set, expect) in [
        ("train.stepz=3", "stepz"),
        ("optim.lr=-1", "optim.lr"),
        ("train.steps=\"many\"", "steps"),
        ("model.path=/nowhere", "either `path` or `[model.scratch]`"),
        ("data.env=no-such-env", "no-such-env"),
    ] {
        let out = temper(&["sft", cfg_s, "--set", set, "--clean"]).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{set}: accepted");
        assert!(err.contains(expect), "{set}: {err}");
    }
}
