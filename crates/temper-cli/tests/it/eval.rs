//! `temper eval` end to end against the mock server.

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::mock::{Behaviour, Mock};

fn temper() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_temper"));
    cmd.env_remove("OPENAI_API_KEY").env("TEMPER_LOG", "error");
    cmd
}

fn eval(mock_url: &str, env: &str, out: &Path, extra: &[&str]) -> Output {
    temper()
        .args(["eval", env, "-m", mock_url, "-o"])
        .arg(out)
        .args(extra)
        .output()
        .expect("run temper")
}

fn ok(output: &Output) {
    assert!(
        output.status.success(),
        "temper failed: {}\nstdout: {}\nstderr: {}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

fn results(dir: &Path) -> Vec<Value> {
    std::fs::read_to_string(dir.join("results.jsonl"))
        .expect("results")
        .lines()
        .map(|l| serde_json::from_str(l).expect("json line"))
        .collect()
}

fn metadata(dir: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(dir.join("metadata.json")).expect("metadata"))
        .expect("json")
}

/// The reward the mock's `Reverse` behaviour earns on `text`: 1 for even lengths, otherwise the
/// reversal misses its last character, so LCS = L − 1 and the ratio is 2(L − 1) / (2L − 1).
fn expected_reverse_reward(text: &str) -> f64 {
    let l = text.chars().count() as f64;
    if text.chars().count().is_multiple_of(2) { 1.0 } else { 2.0 * (l - 1.0) / (2.0 * l - 1.0) }
}

#[test]
fn reverse_text_rewards_and_concurrency() {
    let mock = Mock::start(Behaviour::Reverse, Duration::from_millis(100));
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("run");
    let output = eval(&mock.url, "reverse-text", &out, &["-n", "8", "-r", "2", "-c", "4"]);
    ok(&output);
    let rows = results(&out);
    assert_eq!(rows.len(), 16);
    let mut sum = 0.0;
    let mut imperfect = 0;
    for row in &rows {
        let text = row["prompt"][1]["content"].as_str().expect("text");
        imperfect += usize::from(text.chars().count() % 2 == 1);
        let want = expected_reverse_reward(text);
        assert!((row["reward"].as_f64().expect("reward") - want).abs() < 1e-12, "{text}: {row}");
        assert!((row["scores"]["lcs_ratio"].as_f64().expect("score") - want).abs() < 1e-12);
        sum += want;
    }
    // Both kinds of answer occurred, so both formulas were checked.
    assert!(imperfect > 0 && imperfect < rows.len(), "{imperfect} of {} imperfect", rows.len());
    let meta = metadata(&out);
    assert_eq!(meta["status"], "complete");
    assert_eq!(meta["counts"]["rollouts"], 16);
    assert_eq!(meta["counts"]["examples"], 8);
    assert!((meta["reward"]["mean"].as_f64().expect("mean") - sum / 16.0).abs() < 1e-12);
    assert_eq!(meta["env"]["name"], "reverse-text");
    assert_eq!(meta["env"]["content_hash"].as_str().expect("hash").len(), 64);
    assert_eq!(meta["temper_version"], env!("CARGO_PKG_VERSION"));
    assert_eq!(meta["scores"]["format"], 1.0);
    // Every reward is at least 0.8 ≥ 0.5, so every group passes.
    assert_eq!(meta["pass_at_k"]["1"], 1.0);
    assert_eq!(meta["pass_at_k"]["2"], 1.0);
    // The limit is reached and never exceeded.
    assert_eq!(mock.state.max_in_flight.load(Ordering::SeqCst), 4);
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(stdout.contains("pass@2") && stdout.contains("lcs_ratio"), "{stdout}");

    let serial = Mock::start(Behaviour::Reverse, Duration::from_millis(30));
    ok(&eval(
        &serial.url,
        "reverse-text",
        &dir.path().join("serial"),
        &["-n", "3", "-r", "2", "-c", "1"],
    ));
    assert_eq!(serial.state.max_in_flight.load(Ordering::SeqCst), 1);
}

#[test]
fn pass_at_k_matches_the_unbiased_estimator() {
    // Exactly one of the four rollouts of each example is right: c = 1, n = 4.
    // pass@1 = 1/4; pass@2 = 1 − C(3,2)/C(4,2) = 1/2; pass@4 = 1.
    let mock = Mock::start(Behaviour::FirstCorrect, Duration::ZERO);
    let dir = tempfile::tempdir().expect("tempdir");
    ok(&eval(&mock.url, "reverse-text", dir.path(), &["-n", "5", "-r", "4", "-c", "8"]));
    let meta = metadata(dir.path());
    let pass = |k: &str| meta["pass_at_k"][k].as_f64().expect("pass@k");
    assert!((pass("1") - 0.25).abs() < 1e-12, "{meta}");
    assert!((pass("2") - 0.5).abs() < 1e-12);
    assert!((pass("4") - 1.0).abs() < 1e-12);
    assert!(meta["pass_at_k"].get("3").is_none());
    assert!((meta["reward"]["mean"].as_f64().expect("mean") - 0.25).abs() < 1e-12);
}

#[test]
fn tool_calls_round_trip_through_the_calculator() {
    let mock = Mock::start(Behaviour::Calculator, Duration::ZERO);
    let dir = tempfile::tempdir().expect("tempdir");
    ok(&eval(&mock.url, "calculator", dir.path(), &["-n", "3", "-r", "1"]));
    for row in results(dir.path()) {
        assert_eq!(row["reward"], 1.0, "{row}");
        assert_eq!(row["scores"]["tool_calls"], 2.0);
        let tools: Vec<&str> = row["completion"]
            .as_array()
            .expect("completion")
            .iter()
            .filter(|m| m["role"] == "tool")
            .map(|m| m["content"].as_str().expect("content"))
            .collect();
        assert!(tools[0].starts_with("error: arguments are not valid JSON"), "{tools:?}");
        assert_eq!(tools[1], row["answer"].as_str().expect("answer"));
    }
}

#[test]
fn retries_server_errors_rate_limits_and_timeouts() {
    let mock = Mock::start(Behaviour::Reverse, Duration::ZERO);
    mock.state.fail_500.store(2, Ordering::SeqCst);
    mock.state.fail_429.store(1, Ordering::SeqCst);
    mock.state.hang.store(1, Ordering::SeqCst);
    let dir = tempfile::tempdir().expect("tempdir");
    let start = Instant::now();
    ok(&eval(
        &mock.url,
        "reverse-text",
        dir.path(),
        &["-n", "2", "-r", "1", "-c", "1", "--timeout-s", "0.5"],
    ));
    assert!(start.elapsed() < Duration::from_secs(20));
    let meta = metadata(dir.path());
    assert_eq!(meta["counts"]["errors"], 0, "{meta}");
    // Two rollouts plus four failed attempts.
    assert_eq!(mock.state.requests.load(Ordering::SeqCst), 6);
}

#[test]
fn resume_reruns_groups_that_never_reached_the_model() {
    let mock = Mock::start(Behaviour::Reverse, Duration::ZERO);
    mock.state.fail_500.store(1_000, Ordering::SeqCst);
    let dir = tempfile::tempdir().expect("tempdir");
    let args = ["-n", "3", "-r", "2", "--max-retries", "0"];
    let down = eval(&mock.url, "reverse-text", dir.path(), &args);
    assert_eq!(down.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&down.stderr).contains("HTTP 500"));
    assert_eq!(metadata(dir.path())["counts"]["errors"], 6);

    mock.state.fail_500.store(0, Ordering::SeqCst);
    ok(&eval(&mock.url, "reverse-text", dir.path(), &[&args[..], &["--resume"]].concat()));
    let meta = metadata(dir.path());
    assert_eq!(
        (meta["counts"]["rollouts"].as_u64(), meta["counts"]["errors"].as_u64()),
        (Some(6), Some(0)),
        "{meta}"
    );
    assert_eq!(results(dir.path()).len(), 6);
}

#[test]
fn api_key_comes_from_the_named_variable() {
    let mock = Mock::start(Behaviour::Reverse, Duration::ZERO);
    let dir = tempfile::tempdir().expect("tempdir");
    let output = temper()
        .args([
            "eval",
            "reverse-text",
            "-n",
            "1",
            "-r",
            "1",
            "--api-key-var",
            "MY_TEMPER_KEY",
            "-m",
            &mock.url,
            "-o",
        ])
        .arg(dir.path())
        .env("MY_TEMPER_KEY", "sekret")
        .output()
        .expect("run");
    ok(&output);
    assert_eq!(*mock.state.auth.lock().expect("lock"), ["Bearer sekret"]);
}

#[test]
fn sigkill_then_resume_matches_an_uninterrupted_run() {
    let mock = Mock::start(Behaviour::Reverse, Duration::from_millis(150));
    let dir = tempfile::tempdir().expect("tempdir");
    let args = ["-n", "12", "-r", "2", "-c", "2"];

    let full = dir.path().join("full");
    ok(&eval(&mock.url, "reverse-text", &full, &args));

    let killed = dir.path().join("killed");
    let mut child = temper()
        .args(["eval", "reverse-text", "-m", &mock.url, "-o"])
        .arg(&killed)
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn");
    let deadline = Instant::now() + Duration::from_secs(30);
    while std::fs::read_to_string(killed.join("results.jsonl")).map_or(0, |s| s.lines().count()) < 4
    {
        assert!(Instant::now() < deadline, "no results appeared");
        std::thread::sleep(Duration::from_millis(20));
    }
    child.kill().expect("SIGKILL");
    child.wait().expect("wait");
    let partial = results(&killed).len();
    assert!(partial < 24, "the run was killed before it finished ({partial} lines)");
    assert_eq!(metadata(&killed)["status"], "running");
    // A kill in the middle of a write leaves a partial line; resume must drop it.
    let mut file =
        std::fs::OpenOptions::new().append(true).open(killed.join("results.jsonl")).expect("open");
    std::io::Write::write_all(&mut file, b"{\"schema_version\": 1, \"env\": \"rev").expect("write");
    drop(file);

    // A changed configuration is refused.
    let changed =
        eval(&mock.url, "reverse-text", &killed, &["-n", "13", "-r", "2", "-c", "2", "--resume"]);
    assert!(!changed.status.success());
    let stderr = String::from_utf8_lossy(&changed.stderr);
    assert!(
        stderr.contains("configuration changed") && stderr.contains("eval.num_examples: 12 → 13"),
        "{stderr}"
    );
    // Without --resume the folder is not overwritten.
    let again = eval(&mock.url, "reverse-text", &killed, &args);
    assert!(String::from_utf8_lossy(&again.stderr).contains("--resume"));

    // Concurrency is not part of the configuration: resuming with another is fine.
    let resumed =
        eval(&mock.url, "reverse-text", &killed, &["-n", "12", "-r", "2", "-c", "3", "--resume"]);
    ok(&resumed);
    let (a, b) = (metadata(&full), metadata(&killed));
    assert_eq!(a["counts"], b["counts"]);
    assert_eq!(a["reward"], b["reward"]);
    assert_eq!(a["pass_at_k"], b["pass_at_k"]);
    assert_eq!(a["scores"], b["scores"]);
    let rows = results(&killed);
    assert_eq!(rows.len(), 24);
    let mut keys: Vec<(u64, u64)> = rows
        .iter()
        .map(|r| {
            (r["example_id"].as_u64().expect("id"), r["rollout_index"].as_u64().expect("index"))
        })
        .collect();
    keys.sort_unstable();
    keys.dedup();
    assert_eq!(keys.len(), 24, "no rollout is duplicated");
}

fn package(dir: &Path, manifest: &str, data: &str) {
    std::fs::create_dir_all(dir.join("data")).expect("mkdir");
    std::fs::write(dir.join("data/train.jsonl"), data).expect("data");
    std::fs::write(dir.join("environment.toml"), manifest).expect("manifest");
}

#[test]
fn bad_input_gives_a_named_error_and_non_zero_exit() {
    let mock = Mock::start(Behaviour::Reverse, Duration::ZERO);
    let head = "[environment]\nname = \"pkg\"\nversion = \"0.1.0\"\n[dataset]\ntrain = \"data/train.jsonl\"\neval_fraction = 0.5\n";
    let rubric = "[[rubric]]\nreward = \"exact_match\"\n";
    let good =
        "{\"question\": \"q\", \"answer\": \"a\"}\n{\"question\": \"r\", \"answer\": \"b\"}\n";
    let cases: Vec<(String, &str, Vec<&str>)> = vec![
        (
            head.replace("data/train.jsonl", "data/gone.jsonl") + rubric,
            good,
            vec!["dataset.train", "gone.jsonl", "does not exist"],
        ),
        (
            format!("{head}{rubric}"),
            "{\"question\": \"q\"}\n{\"question\": oops}\n",
            vec!["train.jsonl:2", "not valid JSON"],
        ),
        (
            format!("{head}[[rubric]]\nreward = \"vibes\"\n"),
            good,
            vec!["rubric[0].reward", "unknown reward function `vibes`"],
        ),
        (
            format!("{head}[env]\nkind = \"single_turn\"\nmax_turns = \"two\"\n{rubric}"),
            good,
            vec!["environment.toml", "max_turns"],
        ),
    ];
    for (manifest, data, wants) in cases {
        let dir = tempfile::tempdir().expect("tempdir");
        let pkg = dir.path().join("pkg");
        package(&pkg, &manifest, data);
        let output = eval(
            &mock.url,
            pkg.to_str().expect("utf-8"),
            &dir.path().join("out"),
            &["-n", "1", "-r", "1"],
        );
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(1), "{stderr}");
        for want in wants {
            assert!(stderr.contains(want), "want {want:?} in {stderr}");
        }
        assert!(!stderr.contains("panicked"), "{stderr}");
    }

    let dir = tempfile::tempdir().expect("tempdir");
    let unreachable = eval(
        "http://127.0.0.1:1/v1",
        "reverse-text",
        dir.path(),
        &["-n", "1", "-r", "1", "--max-retries", "0"],
    );
    let stderr = String::from_utf8_lossy(&unreachable.stderr);
    assert_eq!(unreachable.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("http://127.0.0.1:1/v1/chat/completions")
            && stderr.contains("cannot connect"),
        "{stderr}"
    );

    let unknown = eval(&mock.url, "no-such-env", &dir.path().join("x"), &[]);
    let stderr = String::from_utf8_lossy(&unknown.stderr);
    assert_eq!(unknown.status.code(), Some(1));
    assert!(
        stderr.contains("unknown environment `no-such-env`") && stderr.contains("wordle"),
        "{stderr}"
    );

    let bad_flag = eval(&mock.url, "reverse-text", &dir.path().join("y"), &["--top-p", "1.5"]);
    assert!(String::from_utf8_lossy(&bad_flag.stderr).contains("--top-p must be in (0, 1]"));
    let bad_url = eval("localhost:8000", "reverse-text", &dir.path().join("z"), &[]);
    assert!(String::from_utf8_lossy(&bad_url.stderr).contains("expected the base URL"));
    assert_eq!(
        temper().args(["eval", "reverse-text", "-r", "0"]).output().expect("run").status.code(),
        Some(2)
    );
}

#[test]
fn code_environment_runs_in_the_sandbox() {
    let mock = Mock::start(Behaviour::CodeSum, Duration::ZERO);
    let dir = tempfile::tempdir().expect("tempdir");
    // Problem 0 of the code bank is "sum the integers": the mock's program passes all its tests.
    ok(&eval(&mock.url, "code", dir.path(), &["-n", "1", "-r", "2"]));
    let meta = metadata(dir.path());
    assert_eq!(meta["config"]["eval"]["code_runner"], "sandbox", "{meta}");
    assert_eq!(meta["reward"]["mean"], 1.0, "{meta}");
    assert_eq!(meta["counts"]["errors"], 0);
}

/// Consent to run model-written code without a sandbox is not consent to start a package's own
/// program: an external environment needs --allow-external-command, and that flag alone starts it.
#[test]
fn an_external_environment_needs_its_own_consent() {
    let dir = tempfile::tempdir().expect("tempdir");
    let env = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/environments/guess-number");
    // Nothing listens here: loading the environment comes before any request.
    let refused = eval("http://127.0.0.1:9", env, dir.path(), &["--allow-unsandboxed-code"]);
    assert!(!refused.status.success());
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(stderr.contains("--allow-external-command"), "{stderr}");
    let mock = Mock::start(Behaviour::AnswerSum, Duration::ZERO);
    let allowed = eval(
        &mock.url,
        env,
        &dir.path().join("ok"),
        &["--allow-external-command", "-n", "2", "-r", "1"],
    );
    ok(&allowed);
    assert_eq!(results(&dir.path().join("ok")).len(), 2);
}

#[test]
fn a_suite_runs_its_benchmarks_resumes_and_reports() {
    let mock = Mock::start(Behaviour::AnswerSum, Duration::ZERO);
    let dir = tempfile::tempdir().expect("tempdir");
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/benchmarks/fixtures");
    let suite = |out: &Path, extra: &[&str]| {
        temper()
            .args(["eval", "--suite", "intellect3", "--data"])
            .arg(&fixtures)
            .args(["--only", "aime2024,gpqa-diamond", "-r", "2", "-m", &mock.url, "-o"])
            .arg(out)
            .args(extra)
            .output()
            .expect("run temper")
    };
    let run = dir.path().join("run");
    let output = suite(&run, &[]);
    ok(&output);
    // 4 AIME 2024 and 6 GPQA problems, 2 samples each, in a folder per benchmark.
    assert_eq!(mock.state.requests.load(Ordering::SeqCst), 20);
    assert_eq!(results(&run.join("aime2024")).len(), 8);
    assert_eq!(results(&run.join("gpqa-diamond")).len(), 12);
    assert!(!run.join("hle").exists(), "--only leaves the others out");
    assert_eq!(metadata(&run.join("aime2024"))["config"]["eval"]["sampling"]["temperature"], 0.6);
    assert!(run.join("suite.toml").is_file());
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(stdout.contains("| aime2024 | default | 2 | 4 |"), "{stdout}");
    for file in ["report.md", "report.json", "avg_at_k.png"] {
        assert!(run.join("report").join(file).is_file(), "{file}");
    }
    // Resuming a finished suite asks the model nothing more; a second output folder without
    // --resume is refused.
    ok(&suite(&run, &["--resume"]));
    assert_eq!(mock.state.requests.load(Ordering::SeqCst), 20);
    assert!(!suite(&run, &[]).status.success());

    // Two runs side by side: the second is compared with the first.
    let other = dir.path().join("other");
    ok(&suite(&other, &["--model-name", "tuned"]));
    let out = dir.path().join("report");
    let report = temper()
        .args(["eval", "report"])
        .arg(&run)
        .arg(&other)
        .arg("-o")
        .arg(&out)
        .output()
        .expect("run temper");
    ok(&report);
    let json: Value =
        serde_json::from_slice(&std::fs::read(out.join("report.json")).expect("json"))
            .expect("json");
    let names: Vec<&str> = json["benchmarks"]
        .as_array()
        .expect("list")
        .iter()
        .filter_map(|b| b["name"].as_str())
        .collect();
    assert_eq!(names, ["aime2024", "gpqa-diamond"]);
    let diff = &json["benchmarks"][0]["differences"][0];
    assert_eq!((diff["run"].as_str(), diff["baseline"].as_str()), (Some("tuned"), Some("default")));
    // The same deterministic replies: no difference.
    assert_eq!(diff["avg_at_k"]["mean"], 0.0);
    assert_eq!(diff["avg_at_k"]["n"], 4);
    let png = std::fs::read(out.join("avg_at_k.png")).expect("png");
    assert!(png.starts_with(b"\x89PNG"));
}
