//! `temper rl` with a tiny model: the SFT warmup runs first, the run finishes with engine and
//! trainer agreeing on-policy, a killed trainer stops the whole run with nothing left running,
//! and a SIGKILLed launcher resumes to the last step.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

const SFT: &str = r#"
[model.scratch]
hidden_size = 32
num_layers = 2
num_heads = 4
num_kv_heads = 2
intermediate_size = 64
max_positions = 256
[data]
env = "reverse-text"
train_size = 64
completion_template = "<reversed_text>{answer}</reversed_text>"
system_prompt = ""
validation_size = 4
[train]
steps = 4
batch_size = 8
seq_len = 256
[optim]
lr = 3e-3
[eval]
num_examples = 0
[output]
dir = "warm"
"#;

pub(crate) fn rl_config(dir: &Path, steps: u64) -> PathBuf {
    std::fs::write(
        dir.join("sft.toml"),
        SFT.replace("\"warm\"", &format!("{:?}", dir.join("warm"))),
    )
    .unwrap();
    let text = format!(
        r#"
[warmup]
sft = "sft.toml"
[model]
path = {:?}
[orchestrator]
batch_size = 8
group_size = 4
max_concurrent = 8
seq_len = 256
[orchestrator.sampling]
max_tokens = 12
[[env]]
id = "reverse-text"
system_prompt = ""
[trainer]
steps = {steps}
checkpoint_every = 2
[optim]
lr = 1e-3
[output]
dir = {:?}
"#,
        dir.join("warm/final"),
        dir.join("run")
    );
    let path = dir.join("rl.toml");
    std::fs::write(&path, text).unwrap();
    path
}

pub(crate) fn spawn_rl(config: &Path, extra: &[&str]) -> Child {
    Command::new(env!("CARGO_BIN_EXE_temper"))
        .arg("rl")
        .arg(config)
        .args(extra)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

pub(crate) fn wait(child: &mut Child, limit: Duration) -> (std::process::ExitStatus, String) {
    let start = Instant::now();
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            let mut err = String::new();
            use std::io::Read;
            child.stderr.take().unwrap().read_to_string(&mut err).unwrap();
            return (status, err);
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            panic!("temper rl did not finish within {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

pub(crate) fn metrics(run: &Path) -> Vec<Value> {
    std::fs::read_to_string(run.join("metrics.jsonl"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

pub(crate) fn trainer_steps(run: &Path) -> Vec<u64> {
    metrics(run)
        .iter()
        .filter(|l| l["role"] == "trainer")
        .filter_map(|l| l["step"].as_u64())
        .collect()
}

/// The pid `temper rl` logged for a role.
fn pid_of(run: &Path, role: &str) -> Option<i32> {
    let log = std::fs::read_to_string(run.join("logs").join(format!("{role}.log"))).ok()?;
    let line = log.lines().rev().find(|l| l.contains("temper rl started"))?;
    line.split("Some(").nth(1)?.split(')').next()?.parse().ok()
}

/// Whether a process still runs (a zombie waiting for a reaper does not).
pub(crate) fn alive(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|s| s.rsplit(')').next().is_some_and(|rest| !rest.trim_start().starts_with('Z')))
        .unwrap_or(false)
}

pub(crate) fn wait_for(what: &str, limit: Duration, mut ok: impl FnMut() -> bool) {
    let start = Instant::now();
    while !ok() {
        assert!(start.elapsed() < limit, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn warmup_then_rl_finishes_on_policy_and_resumes_after_sigkill() {
    let tmp = tempfile::tempdir().unwrap();
    let config = rl_config(tmp.path(), 100);
    let run = tmp.path().join("run");

    // Start, wait for the second trainer step, SIGKILL the launcher.
    let mut child = spawn_rl(&config, &[]);
    wait_for("two trainer steps", Duration::from_secs(240), || trainer_steps(&run).len() >= 2);
    assert!(tmp.path().join("warm/final/config.json").is_file(), "the warmup made the model");
    let pids: Vec<i32> =
        ["inference", "orchestrator", "trainer"].iter().filter_map(|r| pid_of(&run, r)).collect();
    assert_eq!(pids.len(), 3);
    child.kill().unwrap();
    child.wait().unwrap();
    // Its children notice and exit.
    wait_for("the children to exit", Duration::from_secs(10), || pids.iter().all(|&p| !alive(p)));

    // A used directory is refused without --resume.
    let (status, err) = wait(&mut spawn_rl(&config, &[]), Duration::from_secs(30));
    assert!(!status.success());
    assert!(err.contains("--resume"), "{err}");

    let (status, err) = wait(&mut spawn_rl(&config, &["--resume"]), Duration::from_secs(240));
    assert!(status.success(), "{err}");
    let steps = trainer_steps(&run);
    assert_eq!(steps.last(), Some(&100), "{steps:?}");
    // After the rewind, each step appears once.
    let mut sorted = steps.clone();
    sorted.dedup();
    assert_eq!(sorted, steps);
    let lines = metrics(&run);
    // Step 1 trains on rollouts of the weights it starts from: engine and trainer agree.
    let first = lines.iter().find(|l| l["role"] == "trainer" && l["step"] == 1).unwrap();
    let kl = first["mismatch_kl/mean"].as_f64().unwrap();
    assert!(kl.abs() < 1e-4, "mismatch_kl at step 1: {kl}");
    for l in lines.iter().filter(|l| l.get("off_policy/max").is_some()) {
        assert!(l["off_policy/max"].as_u64().unwrap() <= 8, "{l}");
    }
    assert!(run.join("weights/step_100/STABLE").is_file());
}

#[test]
fn a_killed_trainer_stops_the_run_and_leaves_nothing_running() {
    let tmp = tempfile::tempdir().unwrap();
    let config = rl_config(tmp.path(), 50);
    let run = tmp.path().join("run");
    let mut child = spawn_rl(&config, &[]);
    wait_for("the first trainer step", Duration::from_secs(240), || {
        !trainer_steps(&run).is_empty()
    });
    let pids: Vec<i32> =
        ["inference", "orchestrator", "trainer"].iter().filter_map(|r| pid_of(&run, r)).collect();
    assert_eq!(pids.len(), 3);
    Command::new("kill").args(["-9", &pids[2].to_string()]).status().unwrap();
    let (status, err) = wait(&mut child, Duration::from_secs(60));
    assert!(!status.success());
    assert!(err.contains("the trainer stopped"), "{err}");
    wait_for("every process to exit", Duration::from_secs(10), || pids.iter().all(|&p| !alive(p)));
}

/// An environment a policy can learn in a few dozen steps from (almost) uniform: whatever the
/// prompt, the reward is the LCS ratio of the raw completion to `eeeeeeee`.
pub(crate) fn say_e_environment(dir: &Path) -> PathBuf {
    let env = dir.join("say-e");
    std::fs::create_dir_all(env.join("data")).unwrap();
    std::fs::write(
        env.join("environment.toml"),
        r#"
[environment]
name = "say-e"
version = "0.1.0"
description = "Write the letter e; reward is the LCS ratio to eeeeeeee."
[dataset]
train = "data/train.jsonl"
eval = "data/train.jsonl"
[env]
kind = "single_turn"
parser = "raw"
[[rubric]]
reward = "lcs_ratio"
weight = 1.0
"#,
    )
    .unwrap();
    let rows: String = (0..64)
        .map(|i| format!("{{\"question\": \"prompt {i}\", \"answer\": \"eeeeeeee\"}}\n"))
        .collect();
    std::fs::write(env.join("data/train.jsonl"), rows).unwrap();
    env
}

#[test]
fn rl_raises_the_reward_and_engine_and_trainer_agree() {
    let tmp = tempfile::tempdir().unwrap();
    let env = say_e_environment(tmp.path());
    let base = std::fs::read_to_string(rl_config(tmp.path(), 40)).unwrap();
    let config = tmp.path().join("say-e.toml");
    let text = base
        .replace("id = \"reverse-text\"", &format!("id = {env:?}"))
        .replace("group_size = 4", "group_size = 8")
        .replace(
            "max_tokens = 12",
            "max_tokens = 8\n[orchestrator.eval]\nevery = 20\nnum_examples = 8",
        )
        .replace("lr = 1e-3", "lr = 1e-2");
    std::fs::write(&config, text).unwrap();
    let run = tmp.path().join("run");
    let (status, err) = wait(&mut spawn_rl(&config, &[]), Duration::from_secs(170));
    assert!(status.success(), "{err}");

    let lines = metrics(&run);
    let of_role = |role: &str, key: &str| -> Vec<(u64, f64)> {
        lines
            .iter()
            .filter(|l| l["role"] == role)
            .filter_map(|l| Some((l["step"].as_u64()?, l[key].as_f64()?)))
            .collect()
    };
    let rewards: Vec<f64> = of_role("orchestrator", "reward/mean").iter().map(|r| r.1).collect();
    assert_eq!(rewards.len(), 40);
    let mean = |xs: &[f64]| xs.iter().sum::<f64>() / xs.len() as f64;
    let (first, last) = (mean(&rewards[..5]), mean(&rewards[35..]));
    assert!(first < 0.2 && last > first + 0.5, "reward {first:.3} -> {last:.3}: {rewards:?}");

    // Held-out (greedy) evaluations of v0, v20 and v40 show it too.
    let evals = of_role("orchestrator", "eval/say-e/reward/mean");
    assert_eq!(evals.iter().map(|e| e.0).collect::<Vec<_>>(), [0, 20, 40]);
    assert!(evals[2].1 > evals[0].1 + 0.4, "eval {evals:?}");

    // Engine and trainer compute the same logprobs: a batch sampled from the weights the trainer
    // holds shows no mismatch at all; one sampled a version behind, only one step's change.
    let off_policy: std::collections::HashMap<u64, f64> =
        of_role("orchestrator", "off_policy/max").into_iter().collect();
    let kl = of_role("trainer", "mismatch_kl/mean");
    assert_eq!(kl.len(), 40);
    let on_policy: Vec<f64> =
        kl.iter().filter(|(step, _)| off_policy.get(step) == Some(&0.0)).map(|k| k.1).collect();
    assert!(!on_policy.is_empty());
    assert!(on_policy.iter().all(|k| k.abs() < 1e-6), "on-policy mismatch_kl {on_policy:?}");
    let all: Vec<f64> = kl.iter().map(|k| k.1).collect();
    assert!(mean(&all) < 0.02, "mean mismatch_kl {}: {all:?}", mean(&all));

    // Role logs are plain text for people and grep: no colour codes (stderr is not a terminal).
    for role in ["inference", "trainer", "orchestrator"] {
        let log = run.join("logs").join(format!("{role}.log"));
        let text = std::fs::read_to_string(&log).expect("a role log");
        assert!(!text.is_empty() && !text.contains('\u{1b}'), "{}: {text}", log.display());
    }

    // `temper plot` draws the run: four charts with their lines on them.
    let out = Command::new(env!("CARGO_BIN_EXE_temper")).arg("plot").arg(&run).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    for chart in ["reward", "eval", "mismatch_kl", "throughput"] {
        let path = run.join("plots").join(format!("{chart}.png"));
        assert!(String::from_utf8_lossy(&out.stdout).contains(&*path.to_string_lossy()));
        let png = image::open(&path).unwrap().to_rgb8();
        assert_eq!(png.dimensions(), (1040, 540));
        // Palette99's first colours, the first series (lines that coincide hide each other).
        let series = [[230, 25, 75], [60, 180, 75], [255, 225, 25]];
        let line = png.pixels().filter(|p| series.contains(&p.0)).count();
        assert!(line > 150, "{chart}.png has {line} pixels of its series");
    }
}

/// `llm_judge` rewards during RL come from `[orchestrator.judge]`; a judge that fails makes the
/// rollouts it grades errors, and a run of them stops the run naming the judge.
#[test]
fn llm_judge_rewards_work_in_rl_and_a_failing_judge_is_an_error() {
    use crate::mock::{Behaviour, Mock};
    let tmp = tempfile::tempdir().unwrap();
    let env = say_e_environment(tmp.path());
    let toml = env.join("environment.toml");
    let package = std::fs::read_to_string(&toml).unwrap();
    std::fs::write(&toml, package.replace("reward = \"lcs_ratio\"", "reward = \"llm_judge\""))
        .unwrap();
    let base = std::fs::read_to_string(rl_config(tmp.path(), 3)).unwrap();
    let config = |judge: &Mock, run: &str| {
        let text = base.replace("id = \"reverse-text\"", &format!("id = {env:?}")).replace(
            "[output]",
            &format!(
                "[orchestrator.judge]\nbase_url = {:?}\nmodel = \"grader\"\nmax_concurrent = 4\n[output]",
                judge.url
            ),
        );
        let text = text.replace(
            &format!("{:?}", tmp.path().join("run")),
            &format!("{:?}", tmp.path().join(run)),
        );
        let path = tmp.path().join(format!("{run}.toml"));
        std::fs::write(&path, text).unwrap();
        path
    };

    let judge = Mock::start(Behaviour::Judge, Duration::ZERO);
    let (status, err) =
        wait(&mut spawn_rl(&config(&judge, "judged"), &[]), Duration::from_secs(170));
    assert!(status.success(), "{err}");
    let lines: Vec<Value> = metrics(&tmp.path().join("judged"))
        .into_iter()
        .filter(|l| l["role"] == "orchestrator")
        .collect();
    assert_eq!(lines.len(), 3);
    for l in &lines {
        assert_eq!(l["errors/count"], 0, "{l}");
        assert_eq!(l["rollouts/dropped_trace"], 0, "{l}");
    }
    let rewards: Vec<f64> = lines.iter().map(|l| l["reward/mean"].as_f64().unwrap()).collect();
    let mean = rewards.iter().sum::<f64>() / 3.0;
    assert!(mean > 0.0 && mean < 1.0, "the judge says yes and no: rewards {rewards:?}");
    let asked = judge.state.requests.load(std::sync::atomic::Ordering::SeqCst);
    assert!(asked >= 24, "the judge graded {asked} rollouts");

    let refusing = Mock::start(Behaviour::Refuse, Duration::ZERO);
    let (status, err) =
        wait(&mut spawn_rl(&config(&refusing, "refused"), &[]), Duration::from_secs(170));
    assert!(!status.success());
    assert!(err.contains("judge") && err.contains("HTTP 400"), "{err}");
}

#[test]
fn every_example_config_checks_and_a_bad_one_names_its_field() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let mut checked = 0;
    for entry in std::fs::read_dir(root.join("examples")).unwrap() {
        let config = entry.unwrap().path().join("rl.toml");
        if !config.is_file() {
            continue;
        }
        let out = Command::new(env!("CARGO_BIN_EXE_temper"))
            .current_dir(&root)
            .arg("rl")
            .arg(&config)
            .arg("--check")
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{}: {}",
            config.display(),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(stdout.contains(": ok ("), "{stdout}");
        checked += 1;
    }
    assert!(checked >= 4, "examples with an rl.toml: {checked}");

    let tmp = tempfile::tempdir().unwrap();
    let config = rl_config(tmp.path(), 10);
    let out = Command::new(env!("CARGO_BIN_EXE_temper"))
        .arg("rl")
        .arg(&config)
        .args(["--check", "--set", "orchestrator.batch_size=10"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("orchestrator.batch_size (10)"), "{err}");
    assert!(!tmp.path().join("run").exists(), "--check touches nothing");

    // Without [output] both roles share the default run directory.
    let text = std::fs::read_to_string(&config).unwrap();
    let (head, _) = text.split_once("[output]").unwrap();
    let bare = tmp.path().join("no-output.toml");
    std::fs::write(&bare, head).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_temper"))
        .current_dir(tmp.path())
        .arg("rl")
        .arg(&bare)
        .arg("--check")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(String::from_utf8_lossy(&out.stdout).contains("outputs/rl"), "{stderr}");

    // Devices per role: the check names them with their precisions, and a build without CUDA
    // refuses a CUDA device at the --set that asked for it.
    let check = |sets: &[&str]| {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_temper"));
        cmd.arg("rl").arg(&config).arg("--check");
        for s in sets {
            cmd.args(["--set", s]);
        }
        cmd.output().unwrap()
    };
    let out = check(&["launch.inference_dtype=bf16"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("inference on cpu in bf16, trainer on cpu in f32"), "{stdout}");
    let out = check(&["launch.inference_device=cuda:0", "launch.trainer_device=cuda:1"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    if cfg!(feature = "cuda") {
        assert!(
            stdout.contains("inference on cuda:0 in bf16, trainer on cuda:1 in f32"),
            "{stderr}"
        );
    } else {
        assert_eq!(out.status.code(), Some(1), "{stderr}");
        assert!(
            stderr.contains("--set launch.inference_device=cuda:0: launch.inference_device = \"cuda:0\": this temper was built without CUDA; build it with `cargo build --release --features cuda`"),
            "{stderr}"
        );
    }
    let out = check(&["launch.trainer_device=gpu0"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains(
            "launch.trainer_device: `gpu0` is not a device: expected cpu, cuda or cuda:N"
        ),
        "{stderr}"
    );
    assert!(!tmp.path().join("run").exists(), "--check touches nothing");
}

#[test]
fn doctor_passes_on_this_machine_and_names_a_broken_run_directory() {
    let tmp = tempfile::tempdir().unwrap();
    let config = rl_config(tmp.path(), 10);
    let out =
        Command::new(env!("CARGO_BIN_EXE_temper")).arg("doctor").arg(&config).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}{}", String::from_utf8_lossy(&out.stderr));
    for check in ["run directory", "ports", "MPI", "GPUs", "NCCL", "cgroups"] {
        assert!(stdout.lines().any(|l| l.contains(check)), "{check} missing: {stdout}");
    }
    assert!(!stdout.contains("FAIL"), "{stdout}");
    // The MPI check runs two ranks where temper is built with MPI.
    let mpi = stdout.lines().find(|l| l.contains("MPI")).unwrap();
    assert_eq!(mpi.starts_with("pass"), cfg!(feature = "mpi"), "{mpi}");

    std::fs::write(tmp.path().join("a-file"), b"").unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_temper"))
        .args(["doctor", "--run-dir"])
        .arg(tmp.path().join("a-file/run"))
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(!out.status.success());
    let line = stdout.lines().find(|l| l.contains("run directory")).unwrap();
    assert!(line.starts_with("FAIL") && line.contains("cannot create"), "{stdout}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("1 check(s) failed"));
}

#[test]
fn sigterm_stops_the_trainer_cleanly_with_a_checkpoint() {
    let tmp = tempfile::tempdir().unwrap();
    let config = tmp.path().join("trainer.toml");
    std::fs::write(
        &config,
        format!(
            "[model.scratch]\nhidden_size = 32\nnum_layers = 1\nnum_heads = 4\nnum_kv_heads = 2\nintermediate_size = 64\nmax_positions = 64\n[trainer]\nsteps = 5\n[output]\ndir = {:?}\n",
            tmp.path().join("run")
        ),
    )
    .unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_temper"))
        .arg("trainer")
        .arg(&config)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // It waits for step 1's batch, which never comes.
    let log = tmp.path().join("run/trainer.toml");
    wait_for("the trainer to start", Duration::from_secs(30), || log.is_file());
    std::thread::sleep(Duration::from_millis(500));
    Command::new("kill").args(["-TERM", &child.id().to_string()]).status().unwrap();
    let (status, _) = wait(&mut child, Duration::from_secs(30));
    assert!(status.success(), "{status}");
    let mut out = String::new();
    use std::io::Read;
    child.stdout.take().unwrap().read_to_string(&mut out).unwrap();
    assert!(out.contains("trainer stopped after step 0 (checkpoint written)"), "{out}");
    assert!(tmp.path().join("run/checkpoints/trainer/step_0/state.json").is_file());
}
