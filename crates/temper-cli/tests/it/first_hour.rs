//! What a new user meets in the first hour: config errors at their own line, a failed start
//! that leaves nothing behind, flags spelt as in the tools they know, output that survives a
//! closed or full stdout, and progress that shows when stderr is not a terminal. Each case
//! asserts the exact message and exit code.

use std::io::Read;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use crate::mock::{Behaviour, Mock};

fn temper(dir: &Path) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_temper"));
    cmd.current_dir(dir).env_remove("OPENAI_API_KEY").env("TEMPER_LOG", "error");
    cmd
}

fn run(dir: &Path, args: &[&str]) -> Output {
    temper(dir).args(args).output().expect("run temper")
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// A small SFT config; line 11 is `steps = 2` (the tests below count on it).
const SFT: &str = "# a comment
# another

[model.scratch]
hidden_size = 16
num_layers = 1
num_heads = 2
num_kv_heads = 2

[train]
steps = 2
batch_size = 2
seq_len = 256

[data]
env = \"reverse-text\"
train_size = 8
system_prompt = \"\"
completion_template = \"<reversed_text>{answer}</reversed_text>\"

[eval]
num_examples = 0

[output]
dir = \"out\"
";

#[test]
fn config_errors_point_at_the_users_line_and_name_the_fix() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path();
    let write = |name: &str, text: String| std::fs::write(dir.join(name), text).expect("write");
    write("typo.toml", SFT.replace("batch_size = 2", "batch_sise = 2"));
    write("quoted.toml", SFT.replace("steps = 2", "steps = \"2\""));
    write("ok.toml", SFT.into());

    let out = run(dir, &["sft", "typo.toml"]);
    assert_eq!(out.status.code(), Some(1));
    let err = stderr(&out);
    assert!(
        err.starts_with("error: typo.toml:12:1: unknown field `batch_sise`, expected one of ")
            && err.trim_end().ends_with("; did you mean `batch_size`?"),
        "{err}"
    );
    assert!(!err.contains("--set"), "no overrides were given: {err}");

    let out = run(dir, &["sft", "quoted.toml"]);
    assert_eq!(
        stderr(&out),
        "error: quoted.toml:11:1: train.steps: invalid type: string \"2\", expected u64 \
         (write it without quotes: 2)\n"
    );

    let out = run(dir, &["sft", "ok.toml", "--set", "train.steps=many"]);
    assert_eq!(
        stderr(&out),
        "error: --set train.steps=many: train.steps: invalid type: string \"many\", expected u64\n"
    );
    // A file error stays at its line though other keys were set.
    let out = run(dir, &["sft", "typo.toml", "--set", "train.steps=3"]);
    assert!(stderr(&out).starts_with("error: typo.toml:12:1: unknown field `batch_sise`"));

    // prime-rl spells overrides as flags; temper points at --set (exit 2, as clap's errors).
    let out = run(dir, &["rl", "ok.toml", "--trainer.steps", "20"]);
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        stderr(&out),
        "error: unexpected argument '--trainer.steps'\n\n  \
         tip: temper rl sets config keys with --set: --set trainer.steps=20\n\n\
         For more information, try '--help'.\n"
    );
    // Nothing of these failed starts was written.
    assert!(!dir.join("out").exists());
}

#[test]
fn a_failed_start_leaves_nothing_so_the_rerun_runs() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path();
    let missing = SFT.replace(
        "[model.scratch]\nhidden_size = 16\nnum_layers = 1\nnum_heads = 2\nnum_kv_heads = 2\n",
        "[model]\npath = \"nope/model\"\n",
    );
    std::fs::write(dir.join("sft.toml"), &missing).expect("write");
    for _ in 0..2 {
        let out = run(dir, &["sft", "sft.toml"]);
        assert_eq!(out.status.code(), Some(1));
        // The same error both times (not "already holds a run"), saying the path once.
        assert_eq!(
            stderr(&out),
            "error: model.path: cannot load the model: nope/model: no such file or folder\n"
        );
        assert!(!dir.join("out").exists(), "the failed start left output.dir behind");
    }
    // A failure inside the run, before its first step (nothing fits in 8 tokens), also leaves
    // nothing.
    std::fs::write(dir.join("sft.toml"), SFT.replace("seq_len = 256", "seq_len = 8"))
        .expect("write");
    let out = run(dir, &["sft", "sft.toml"]);
    assert_eq!(stderr(&out), "error: data: no training sample has a token to learn\n");
    assert!(!dir.join("out").exists(), "the failed run left output.dir behind");
    // Corrected, the same command runs.
    std::fs::write(dir.join("sft.toml"), SFT).expect("write");
    let out = run(dir, &["sft", "sft.toml", "--set", "train.steps=4"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(dir.join("out/config.toml").is_file());

    // The SFT run plots: its loss, its throughput, and a page with them and its config.
    let out = run(dir, &["plot", "out", "--html"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let said = String::from_utf8_lossy(&out.stdout);
    for file in ["loss.png", "throughput.png", "report.html"] {
        assert!(said.contains(&format!("out/plots/{file}")), "{said}");
        assert!(dir.join("out/plots").join(file).is_file(), "{file}");
    }
    let page = std::fs::read_to_string(dir.join("out/plots/report.html")).expect("report");
    assert!(page.contains("<title>temper run out</title>"), "{page}");
    assert_eq!(page.matches("src=\"data:image/png;base64,").count(), 2, "two charts inline");
    assert!(page.contains("steps = 4"), "the resolved config is on the page");
    screenshot(&dir.join("out/plots/report.html"), "plot-report-sft.png");
}

/// Headless Chromium (Debian's `chromium`), if installed; CI sets TEMPER_TEST_REQUIRE_CHROMIUM
/// (and installs it), so there a missing browser fails instead of skipping.
fn chromium() -> Option<std::path::PathBuf> {
    let found = ["chromium", "chromium-browser", "google-chrome"].iter().find_map(|name| {
        std::env::var_os("PATH").and_then(|paths| {
            std::env::split_paths(&paths).map(|p| p.join(name)).find(|p| p.is_file())
        })
    });
    assert!(
        found.is_some() || std::env::var_os("TEMPER_TEST_REQUIRE_CHROMIUM").is_none(),
        "TEMPER_TEST_REQUIRE_CHROMIUM is set but no chromium is on PATH"
    );
    found
}

/// Renders a local page in headless Chromium and keeps the screenshot for a person to look at,
/// in `target/tmp/screenshots/NAME`; checks it is an image of the page (not blank).
fn screenshot(page: &Path, name: &str) {
    let Some(browser) = chromium() else { return };
    let shots = Path::new(env!("CARGO_TARGET_TMPDIR")).join("screenshots");
    std::fs::create_dir_all(&shots).expect("screenshots folder");
    let shot = shots.join(name);
    let profile = tempfile::tempdir().expect("profile");
    let out = Command::new(browser)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--no-first-run",
            "--hide-scrollbars",
            "--window-size=1200,1600",
        ])
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .arg(format!("--screenshot={}", shot.display()))
        .arg(format!("file://{}", page.canonicalize().expect("page").display()))
        .output()
        .expect("chromium");
    assert!(out.status.success(), "chromium: {}", stderr(&out));
    let png = std::fs::read(&shot).expect("screenshot");
    assert!(png.starts_with(b"\x89PNG") && png.len() > 20_000, "{} bytes", png.len());
}

#[test]
fn a_closed_or_full_stdout_is_not_a_crash() {
    let tmp = tempfile::tempdir().expect("tempdir");
    // Full: an error naming the cause, exit 1 (not a panic's 101).
    let full = std::fs::OpenOptions::new().write(true).open("/dev/full").expect("/dev/full");
    let out = temper(tmp.path()).arg("envs").stdout(full).output().expect("run");
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        stderr(&out),
        "error: cannot write to standard output: No space left on device (os error 28)\n"
    );
    // Closed before the first write (`| head -0`): quiet, exit 0.
    let mut child = temper(tmp.path())
        .arg("envs")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    drop(child.stdout.take());
    let mut err = String::new();
    child.stderr.take().expect("stderr").read_to_string(&mut err).expect("read");
    let status = child.wait().expect("wait");
    assert_eq!((status.code(), err.as_str()), (Some(0), ""));
    // The same through a buffered writer (`temper verify math --jsonl big | head -1`).
    let lines = "{\"gold\": \"1\", \"answer\": \"1\"}\n".repeat(20_000);
    std::fs::write(tmp.path().join("big.jsonl"), lines).expect("write");
    let mut child = temper(tmp.path())
        .args(["verify", "math", "--jsonl", "big.jsonl"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    let mut first = [0u8; 16];
    child.stdout.as_mut().expect("stdout").read_exact(&mut first).expect("read");
    drop(child.stdout.take());
    let mut err = String::new();
    child.stderr.take().expect("stderr").read_to_string(&mut err).expect("read");
    let status = child.wait().expect("wait");
    assert_eq!((status.code(), err.as_str()), (Some(0), ""));
}

#[test]
fn eval_flags_mean_what_they_mean_in_vf_eval() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let mock = Mock::start(Behaviour::Reverse, Duration::ZERO);
    let eval = |extra: &[&str]| {
        let mut args = vec!["eval", "reverse-text", "-m", &mock.url, "-n", "1", "-r", "1"];
        args.extend_from_slice(extra);
        run(tmp.path(), &args)
    };
    // -t is the token budget, -T the temperature.
    assert_eq!(stderr(&eval(&["-t", "0"])), "error: --max-tokens must be at least 1\n");
    assert_eq!(stderr(&eval(&["-T", "-1"])), "error: --temperature must be at least 0, not -1\n");

    // No --model-name: the one model the server lists is asked for; several are an error.
    mock.state.models.lock().expect("lock").push("org/served-model".into());
    let out = eval(&["-t", "16", "-o", "named"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(*mock.state.model_names.lock().expect("lock"), ["org/served-model"]);
    // A name the server does not serve: its 404, with where to look.
    let out =
        eval(&["-t", "16", "-o", "wrong", "--model-name", "Qwen/Qwen3-0.6B", "--max-retries", "0"]);
    assert_eq!(out.status.code(), Some(1));
    let err = stderr(&out);
    assert!(err.contains("The model `Qwen/Qwen3-0.6B` does not exist."), "{err}");
    let hint = format!(
        "(is `Qwen/Qwen3-0.6B` a model this server serves? it lists them at {}/models)",
        mock.url
    );
    assert!(err.contains(&hint), "{err}");
    mock.state.models.lock().expect("lock").push("other".into());
    let out = eval(&["-o", "two"]);
    assert_eq!(
        stderr(&out),
        format!(
            "error: the server at {} serves 2 models (org/served-model, other); choose one with \
             --model-name\n",
            mock.url
        )
    );
}

#[test]
fn eval_shows_progress_without_a_terminal_and_names_folders_by_time() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let mock = Mock::start(Behaviour::Reverse, Duration::ZERO);
    let args = ["eval", "reverse-text", "-m", &mock.url, "-n", "2", "-r", "1"];
    let out = run(tmp.path(), &args);
    assert!(out.status.success(), "{}", stderr(&out));
    let parent = tmp.path().join("outputs/evals/reverse-text--default");
    let latest = std::fs::read_link(parent.join("latest")).expect("a latest link");
    let name = latest.to_str().expect("utf-8");
    // 2026-12-04T16-30-05Z: readable, sortable, no colons.
    assert_eq!(name.len(), 20, "{name}");
    assert!(name.as_bytes()[10] == b'T' && name.ends_with('Z') && !name.contains(':'), "{name}");
    assert!(parent.join(name).join("metadata.json").is_file());
    // stderr is a pipe here: a start line with the folder, and the last count.
    let err = stderr(&out);
    assert!(
        err.starts_with(&format!(
            "evaluating reverse-text on default at {}: 1 rollouts per example, results in \
             outputs/evals/reverse-text--default/{name}\n",
            mock.url
        )),
        "{err}"
    );
    assert!(err.contains("2/2 groups"), "{err}");
    // A later run that failed before writing anything does not hide this one from --resume.
    std::fs::create_dir(parent.join("9999-failed-start")).expect("mkdir");
    std::fs::remove_file(parent.join("latest")).expect("unlink");
    std::os::unix::fs::symlink("9999-failed-start", parent.join("latest")).expect("link");
    // --resume finds the run, and has nothing left to ask.
    let before = mock.state.requests.load(std::sync::atomic::Ordering::SeqCst);
    let mut resume = args.to_vec();
    resume.push("--resume");
    let out = run(tmp.path(), &resume);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(String::from_utf8_lossy(&out.stdout).contains("2 resumed groups"));
    assert_eq!(mock.state.requests.load(std::sync::atomic::Ordering::SeqCst), before);
}

#[test]
fn verify_output_lines_answer_input_lines() {
    // The whole behaviour is in verify.rs; here only that a blank line keeps its place when the
    // input comes from a file.
    let tmp = tempfile::tempdir().expect("tempdir");
    std::fs::write(
        tmp.path().join("in.jsonl"),
        "{\"gold\": \"1\", \"answer\": \"1\"}\n\n{\"gold\": \"2\", \"answer\": \"2\"}\n",
    )
    .expect("write");
    let out = run(tmp.path(), &["verify", "math", "--jsonl", "in.jsonl"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = String::from_utf8(out.stdout).expect("utf-8");
    assert_eq!(text.lines().map(|l| l.contains("true")).collect::<Vec<_>>(), [true, false, true]);
}
