//! `temper rl` with two trainer ranks and two inference servers: on this machine (mpirun), and
//! as a Slurm job (`--slurm`) on the single-node cluster `scripts/slurm-local start` runs, where
//! `scancel` leaves no process behind and `--resume` finishes the job. The Slurm test runs when
//! `sinfo` reaches a cluster (`SLURM_CONF` set), and is required with
//! `TEMPER_TEST_REQUIRE_SLURM=1` (CI).
#![allow(clippy::print_stderr, reason = "a skipped test says so in the log")]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use crate::rl::{
    alive, metrics, rl_config, say_e_environment, spawn_rl, trainer_steps, wait, wait_for,
};

/// A `say-e` run of `steps` steps with `[launch]` as given: the reward goes from about 0 to
/// about 1 in 40 steps.
pub(crate) fn two_by_two(dir: &Path, steps: u64, launch: &str) -> PathBuf {
    let env = say_e_environment(dir);
    let base = std::fs::read_to_string(rl_config(dir, steps)).unwrap();
    let text = base
        .replace("id = \"reverse-text\"", &format!("id = {env:?}"))
        .replace("group_size = 4", "group_size = 8")
        .replace("max_tokens = 12", "max_tokens = 8")
        .replace("lr = 1e-3", "lr = 1e-2")
        + &format!("[launch]\ntrainer_ranks = 2\ninference_servers = 2\n{launch}\n");
    let config = dir.join("say-e.toml");
    std::fs::write(&config, text).unwrap();
    config
}

/// The run learned: the reward of the first five steps is low, of the last five much higher.
fn assert_learned(run: &Path, steps: usize) {
    let rewards: Vec<f64> = metrics(run)
        .iter()
        .filter(|l| l["role"] == "orchestrator")
        .filter_map(|l| l["reward/mean"].as_f64())
        .collect();
    assert_eq!(rewards.len(), steps, "{rewards:?}");
    let mean = |xs: &[f64]| xs.iter().sum::<f64>() / xs.len() as f64;
    let (first, last) = (mean(&rewards[..5]), mean(&rewards[steps - 5..]));
    assert!(first < 0.2 && last > first + 0.5, "reward {first:.3} -> {last:.3}: {rewards:?}");
}

fn base_urls(run: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(run.join("orchestrator.toml")).unwrap();
    let value: toml::Value = toml::from_str(&text).unwrap();
    value["inference"]["base_urls"]
        .as_array()
        .unwrap()
        .iter()
        .map(|u| u.as_str().unwrap().to_owned())
        .collect()
}

#[test]
fn two_trainer_ranks_and_two_servers_learn_on_this_machine() {
    let tmp = tempfile::tempdir().unwrap();
    let config = two_by_two(tmp.path(), 40, "placement = \"local\"");
    let run = tmp.path().join("run");
    let (status, err) = wait(&mut spawn_rl(&config, &[]), Duration::from_secs(240));
    assert!(status.success(), "{err}");
    assert_learned(&run, 40);
    assert_eq!(base_urls(&run).len(), 2);
    let trainer = std::fs::read_to_string(run.join("logs/trainer.log")).unwrap();
    assert!(trainer.contains("rank 1 of 2"), "{trainer}");
    for log in ["inference.log", "inference-1.log", "orchestrator.log"] {
        assert!(run.join("logs").join(log).is_file(), "{log}");
    }
    // Both ranks ran every step: rank 1's failure would have stopped the run.
    assert_eq!(trainer_steps(&run).len(), 40);
}

/// Whether a Slurm cluster answers; panics when one is required and does not.
fn cluster() -> bool {
    let ok = Command::new("sinfo").arg("-h").output().is_ok_and(|o| o.status.success());
    if !ok {
        assert!(
            std::env::var("TEMPER_TEST_REQUIRE_SLURM").is_err(),
            "TEMPER_TEST_REQUIRE_SLURM is set but sinfo reaches no cluster (scripts/slurm-local start, then export SLURM_CONF)"
        );
        eprintln!("skipped: no Slurm cluster (scripts/slurm-local start; export SLURM_CONF=…)");
    }
    ok
}

/// Submits `temper rl CONFIG --slurm ARGS` and returns the job id.
fn submit(config: &Path, args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_temper"))
        .arg("rl")
        .arg(config)
        .arg("--slurm")
        .args(args)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}{}", String::from_utf8_lossy(&out.stderr));
    stdout
        .split_whitespace()
        .skip_while(|w| *w != "job")
        .nth(1)
        .unwrap_or_else(|| panic!("no job id in {stdout}"))
        .to_owned()
}

/// Whether job `job` is pending, running or completing. `scontrol` names the state; a job
/// Slurm has forgotten has ended, and a controller too busy to answer is asked again.
fn in_queue(job: &str) -> bool {
    for _ in 0..20 {
        let out = Command::new("scontrol").args(["show", "job", job, "-o"]).output().unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        if let Some(state) = text.split_whitespace().find_map(|f| f.strip_prefix("JobState=")) {
            return matches!(
                state,
                "PENDING" | "RUNNING" | "CONFIGURING" | "COMPLETING" | "SUSPENDED"
            );
        }
        if String::from_utf8_lossy(&out.stderr).contains("Invalid job id") {
            return false;
        }
        std::thread::sleep(Duration::from_millis(250));
    }
    panic!("scontrol show job {job} gives no state");
}

/// The job's output file (what `temper rl` printed in it).
fn job_output(dir: &Path, job: &str) -> String {
    std::fs::read_to_string(dir.join(format!("run.slurm-{job}.out"))).unwrap_or_default()
}

/// Pids of live processes whose command line mentions `path`.
fn processes_under(path: &Path) -> Vec<i32> {
    let needle = path.to_string_lossy().into_owned();
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_string_lossy().parse::<i32>().ok())
        .filter(|&pid| {
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            String::from_utf8_lossy(&cmdline).contains(&needle) && alive(pid)
        })
        .collect()
}

#[test]
fn a_slurm_job_places_every_role_and_scancel_leaves_nothing_running() {
    if !cluster() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let config = two_by_two(tmp.path(), 40, "nodes = 1");
    let run = tmp.path().join("run");
    let job = submit(&config, &[]);
    wait_for("the job to end", Duration::from_secs(300), || !in_queue(&job));
    let out = job_output(tmp.path(), &job);
    assert!(out.contains(&format!("Slurm job {job}:")) && out.contains("RL finished"), "{out}");
    assert_learned(&run, 40);
    let urls = base_urls(&run);
    assert_eq!(urls.len(), 2);
    let node =
        String::from_utf8(Command::new("hostname").arg("-s").output().unwrap().stdout).unwrap();
    assert!(urls.iter().all(|u| u.starts_with(&format!("http://{}:", node.trim()))), "{urls:?}");
    let trainer = std::fs::read_to_string(run.join("logs/trainer.log")).unwrap();
    assert!(trainer.contains("rank 1 of 2"), "{trainer}");

    // A longer job, cancelled mid-run: every role's process is gone, then --resume finishes it.
    let tmp = tempfile::tempdir().unwrap();
    let config = two_by_two(tmp.path(), 150, "nodes = 1");
    let run = tmp.path().join("run");
    let job = submit(&config, &[]);
    wait_for("three trainer steps", Duration::from_secs(240), || trainer_steps(&run).len() >= 3);
    assert!(!processes_under(&run).is_empty(), "the roles' command lines name the run directory");
    let status = Command::new("scancel").arg(&job).status().unwrap();
    assert!(status.success());
    wait_for("the job to leave the queue", Duration::from_secs(60), || !in_queue(&job));
    wait_for("every process of the run to end", Duration::from_secs(30), || {
        processes_under(&run).is_empty() && processes_under(&config).is_empty()
    });
    let before = trainer_steps(&run).len();
    assert!(before < 150, "the job finished before it was cancelled");
    let job = submit(&config, &["--resume"]);
    wait_for("the resumed job to end", Duration::from_secs(300), || !in_queue(&job));
    let steps = trainer_steps(&run);
    assert_eq!(steps.last(), Some(&150), "{steps:?}\n{}", job_output(tmp.path(), &job));
    assert!(run.join("weights/step_150/STABLE").is_file());
}
