//! `temper trainer` as two MPI ranks (`mpirun -np 2`): over the same RL batches it publishes the
//! weights one process does, and a rank that fails ends the whole job instead of leaving the
//! other waiting. Built with the `mpi` feature; needs Open MPI's `mpirun`.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use candle_core::Device;
use serde_json::{Value, json};

const STEPS: u64 = 3;
/// Micro-batches of two samples each, per step, over all ranks.
const MICRO_BATCHES: usize = 4;

fn trainer_config(dir: &Path, run: &str, extra: &str) -> PathBuf {
    let text = format!(
        r#"
[model.scratch]
hidden_size = 32
num_layers = 2
num_heads = 4
num_kv_heads = 2
intermediate_size = 64
max_positions = 64
seed = 11
[optim]
lr = 1e-3
[trainer]
steps = {STEPS}
checkpoint_every = 0
keep_weights = 0
batch_timeout_s = 120
{extra}
[output]
dir = {:?}
"#,
        dir.join(run)
    );
    let path = dir.join(format!("{run}.toml"));
    std::fs::write(&path, text).unwrap();
    path
}

/// A deterministic sample: `seed` picks its tokens, length, sampling logprobs and advantage.
fn sample(seed: u64) -> Value {
    let mut x = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
    let mut next = move || {
        x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        x >> 33
    };
    let len = 10 + (next() % 12) as usize;
    let prompt = 4;
    let ids: Vec<u64> = (0..len).map(|_| 32 + next() % 90).collect();
    let mask: Vec<u8> = (0..len).map(|i| u8::from(i >= prompt)).collect();
    let logprobs: Vec<f32> = (0..len)
        .map(|i| if i >= prompt { -0.5 - (next() % 300) as f32 / 100.0 } else { 0.0 })
        .collect();
    let advantage = (next() % 200) as f32 / 100.0 - 1.0;
    json!({
        "token_ids": ids, "loss_mask": mask, "sampling_logprobs": logprobs,
        "advantage": advantage, "temperature": 1.0, "policy_version": 0
    })
}

/// Writes every step's batch for `world` ranks: rank r gets micro-batches
/// `[r·k, (r+1)·k)` of the same `MICRO_BATCHES`, so any world size trains on the same samples.
fn write_batches(run: &Path, world: usize) {
    for step in 1..=STEPS {
        let mbs: Vec<Vec<Value>> = (0..MICRO_BATCHES)
            .map(|m| (0..2).map(|i| sample(step * 100 + (m * 2 + i) as u64)).collect())
            .collect();
        let total: u64 = mbs
            .iter()
            .flatten()
            .map(|s| {
                s["loss_mask"].as_array().unwrap().iter().filter(|m| m == &&json!(1)).count() as u64
            })
            .sum();
        let dir = run.join("rollouts").join(format!("step_{step}"));
        std::fs::create_dir_all(&dir).unwrap();
        let per = MICRO_BATCHES / world;
        for rank in 0..world {
            let batch = json!({
                "schema_version": 1, "step": step, "rank": rank, "world_size": world,
                "total_loss_tokens": total, "micro_batches": mbs[rank * per..(rank + 1) * per],
            });
            std::fs::write(dir.join(format!("rank_{rank}.json")), batch.to_string()).unwrap();
        }
        std::fs::write(dir.join("STABLE"), b"").unwrap();
    }
}

fn mpirun(np: usize, config: &Path, extra: &[&str]) -> Command {
    let mut cmd = Command::new("mpirun");
    cmd.args(["--allow-run-as-root", "--oversubscribe", "-np", &np.to_string()])
        .arg(env!("CARGO_BIN_EXE_temper"))
        .arg("trainer")
        .arg(config)
        .args(extra);
    cmd
}

/// The optimizer-state bytes each rank reported, by rank.
fn state_bytes(stderr: &str) -> Vec<u64> {
    let mut out: Vec<(u64, u64)> = stderr
        .lines()
        .filter_map(|l| {
            let rest = l.strip_prefix("trainer rank ")?;
            let (rank, rest) = rest.split_once(": optimizer state ")?;
            Some((rank.parse().ok()?, rest.split(' ').next()?.parse().ok()?))
        })
        .collect();
    out.sort_unstable();
    out.into_iter().map(|(_, b)| b).collect()
}

/// Runs `cmd` to the end, failing the test past `limit`.
fn finish(mut cmd: Command, limit: Duration) -> Output {
    let mut child = cmd.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap_or_else(|e| {
        panic!("cannot start {cmd:?} ({e}): the mpi tests need Open MPI's mpirun (apt install openmpi-bin)")
    });
    let start = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if start.elapsed() > limit {
            let _ = child.kill();
            panic!("{cmd:?} did not finish within {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    child.wait_with_output().unwrap()
}

fn weights(run: &Path, step: u64) -> Vec<(String, Vec<f32>)> {
    let dir = run.join("weights").join(format!("step_{step}"));
    let files = temper_model::weights::safetensors_files(&dir).unwrap();
    temper_model::weights::load_safetensors(&files, &Device::Cpu)
        .unwrap()
        .into_iter()
        .map(|(name, t)| (name, t.flatten_all().unwrap().to_vec1::<f32>().unwrap()))
        .collect()
}

/// The largest relative L2 difference between two runs' tensors.
fn max_relative_difference(a: &[(String, Vec<f32>)], b: &[(String, Vec<f32>)]) -> f64 {
    assert_eq!(a.len(), b.len());
    let mut worst = 0f64;
    for ((na, x), (nb, y)) in a.iter().zip(b) {
        assert_eq!(na, nb);
        let diff: f64 = x.iter().zip(y).map(|(p, q)| f64::from(p - q).powi(2)).sum::<f64>().sqrt();
        let norm: f64 = x.iter().map(|p| f64::from(*p).powi(2)).sum::<f64>().sqrt();
        worst = worst.max(diff / norm.max(1e-30));
    }
    worst
}

fn losses(run: &Path) -> Vec<f64> {
    std::fs::read_to_string(run.join("metrics.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|l| l["role"] == "trainer")
        .map(|l| l["loss/mean"].as_f64().unwrap())
        .collect()
}

#[test]
fn two_mpi_ranks_publish_the_weights_one_process_does() {
    let dir = tempfile::tempdir().unwrap();
    let single = trainer_config(dir.path(), "single", "");
    write_batches(&dir.path().join("single"), 1);
    let mut one = Command::new(env!("CARGO_BIN_EXE_temper"));
    one.arg("trainer").arg(&single);
    let out = finish(one, Duration::from_secs(120));
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let reference = weights(&dir.path().join("single"), STEPS);
    // The steps did move the weights (a run that ignored its batches would also agree).
    let moved = max_relative_difference(&reference, &weights(&dir.path().join("single"), 1));
    assert!(moved > 1e-4, "the weights barely moved between steps 1 and {STEPS}: {moved:e}");
    let single_losses = losses(&dir.path().join("single"));
    assert_eq!(single_losses.len(), STEPS as usize);

    let mut bytes = Vec::new();
    for (run, extra) in [("full", ""), ("sharded", "shard_optimizer = true")] {
        let config = trainer_config(dir.path(), run, extra);
        write_batches(&dir.path().join(run), 2);
        let out = finish(mpirun(2, &config, &[]), Duration::from_secs(120));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{run}: {err}");
        assert!(err.contains("rank 1 of 2"), "{err}");
        let diff = max_relative_difference(&reference, &weights(&dir.path().join(run), STEPS));
        assert!(diff <= 1e-6, "{run}: weights differ from one process's by {diff:e} relative");
        let run_losses = losses(&dir.path().join(run));
        assert_eq!(run_losses.len(), STEPS as usize, "{run}: only rank 0 writes metrics");
        for (x, y) in single_losses.iter().zip(&run_losses) {
            assert!((x - y).abs() <= 1e-6 * x.abs().max(1e-6), "{single_losses:?} {run_losses:?}");
        }
        bytes.push(state_bytes(&err));
    }
    // With sharded state each rank holds half the moments (to one element).
    let (full, sharded) = (&bytes[0], &bytes[1]);
    assert_eq!(full.len(), 2, "{bytes:?}");
    assert_eq!(full[0], full[1]);
    assert_eq!(sharded.len(), 2, "{bytes:?}");
    assert_eq!(sharded[0] + sharded[1], full[0]);
    assert!(sharded[0].abs_diff(sharded[1]) <= 8, "{bytes:?}");

    // Stopped after step 2 and resumed by both ranks from the same (sharded) checkpoint, the
    // run ends where the uninterrupted one did.
    let config = trainer_config(dir.path(), "resumed", "shard_optimizer = true");
    write_batches(&dir.path().join("resumed"), 2);
    let out = finish(mpirun(2, &config, &["--set", "trainer.steps=2"]), Duration::from_secs(120));
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let ckpt = dir.path().join("resumed/checkpoints/trainer/step_2");
    assert!(ckpt.join("optimizer.rank_1.safetensors").is_file(), "{}", ckpt.display());
    let out = finish(mpirun(2, &config, &["--resume"]), Duration::from_secs(120));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(err.contains("steps 3 to 3"), "{err}");
    let diff = max_relative_difference(&reference, &weights(&dir.path().join("resumed"), STEPS));
    assert!(diff <= 1e-6, "resumed: weights differ from one process's by {diff:e} relative");
}

#[test]
fn a_failing_rank_ends_the_mpi_job() {
    let dir = tempfile::tempdir().unwrap();
    let config = trainer_config(dir.path(), "run", "");
    let run = dir.path().join("run");
    write_batches(&run, 2);
    // Step 2's batch for rank 1 is cut short: rank 1 fails there while rank 0 could go on.
    std::fs::write(run.join("rollouts/step_2/rank_1.json"), b"{\"schema_version\": 1,").unwrap();
    let started = Instant::now();
    let out = finish(mpirun(2, &config, &[]), Duration::from_secs(90));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(err.contains("trainer rank 1") && err.contains("rank_1.json"), "{err}");
    assert!(started.elapsed() < Duration::from_secs(60), "took {:?}", started.elapsed());
    // Neither rank is left running.
    let config = config.to_string_lossy().into_owned();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let cmdline = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
        let cmdline = String::from_utf8_lossy(&cmdline);
        assert!(!cmdline.contains(&config), "still running: {cmdline}");
    }
    // Step 1 finished and was published before the failure.
    assert!(run.join("weights/step_1/STABLE").is_file());
}

/// Pids of live processes whose command line mentions `needle` (and, when given, whose
/// environment holds `var`).
fn pids_with(needle: &str, var: Option<&str>) -> Vec<i32> {
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_string_lossy().parse::<i32>().ok())
        .filter(|pid| {
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            let environ = std::fs::read(format!("/proc/{pid}/environ")).unwrap_or_default();
            let state = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
            let zombie = state.rsplit(')').next().is_some_and(|r| r.trim_start().starts_with('Z'));
            String::from_utf8_lossy(&cmdline).contains(needle)
                && !zombie
                && var.is_none_or(|v| environ.split(|&b| b == 0).any(|kv| kv == v.as_bytes()))
        })
        .collect()
}

#[test]
fn a_killed_rank_ends_the_mpi_job_well_before_the_batch_timeout() {
    let dir = tempfile::tempdir().unwrap();
    let config = trainer_config(dir.path(), "run", "");
    let run = dir.path().join("run");
    write_batches(&run, 2);
    // Only step 1's batch: both ranks then wait (batch_timeout_s = 120) for step 2.
    for step in 2..=STEPS {
        std::fs::remove_dir_all(run.join(format!("rollouts/step_{step}"))).unwrap();
    }
    let mut child =
        mpirun(2, &config, &[]).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    let started = Instant::now();
    while !run.join("weights/step_1/STABLE").is_file() {
        assert!(started.elapsed() < Duration::from_secs(60), "step 1 never finished");
        std::thread::sleep(Duration::from_millis(50));
    }
    let needle = config.to_string_lossy().into_owned();
    let rank1 = pids_with(&needle, Some("OMPI_COMM_WORLD_RANK=1"));
    assert_eq!(rank1.len(), 1, "{rank1:?}");
    Command::new("kill").args(["-9", &rank1[0].to_string()]).status().unwrap();
    let killed = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        assert!(killed.elapsed() < Duration::from_secs(30), "the job outlived its killed rank");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(!status.success());
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(pids_with(&needle, None), Vec::<i32>::new(), "a rank is left running");
}
