//! The layout of a run directory, shared by the processes of an RL run.
//!
//! Contract: the filesystem transport between orchestrator and trainer, and the trainer's weight
//! publication. A folder is complete once it holds a [`STABLE`] file, written last; readers
//! never look inside a folder without it. Files inside are written under a temporary name and
//! renamed. Only the names live here; each process does its own I/O.
//!
//! ```text
//! RUN/config.toml                  the resolved configuration
//! RUN/logs/{inference,orchestrator,trainer}.log
//! RUN/metrics.jsonl                one JSON object per line, with `step` and `role`
//! RUN/rollouts/step_N/rank_R.json  the TrainBatch of step N for rank R, then STABLE
//! RUN/weights/step_N/              safetensors (Hugging Face layout) after step N, then STABLE
//! RUN/checkpoints/{trainer,orchestrator}/step_N/   resumable state after step N
//! ```

use std::path::{Path, PathBuf};

/// Name of the marker that says a folder's files are complete.
pub const STABLE: &str = "STABLE";

/// Folder of the batches of step `step`.
pub fn batch_dir(run: &Path, step: u64) -> PathBuf {
    run.join("rollouts").join(format!("step_{step}"))
}

/// File of rank `rank`'s batch inside [`batch_dir`].
pub fn batch_file(run: &Path, step: u64, rank: u32) -> PathBuf {
    batch_dir(run, step).join(format!("rank_{rank}.json"))
}

/// Folder of the weights after step `step`.
pub fn weights_dir(run: &Path, step: u64) -> PathBuf {
    run.join("weights").join(format!("step_{step}"))
}

/// Folder of a role's checkpoints (`trainer`, `orchestrator`).
pub fn checkpoints_dir(run: &Path, role: &str) -> PathBuf {
    run.join("checkpoints").join(role)
}

/// The metrics file every role appends to.
pub fn metrics_file(run: &Path) -> PathBuf {
    run.join("metrics.jsonl")
}

/// Step number of a `step_N` folder name.
pub fn parse_step(name: &str) -> Option<u64> {
    name.strip_prefix("step_")?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_follow_the_layout() {
        let run = Path::new("/r");
        assert_eq!(batch_file(run, 3, 1), Path::new("/r/rollouts/step_3/rank_1.json"));
        assert_eq!(weights_dir(run, 12), Path::new("/r/weights/step_12"));
        assert_eq!(checkpoints_dir(run, "trainer"), Path::new("/r/checkpoints/trainer"));
        assert_eq!(parse_step("step_12"), Some(12));
        assert_eq!(parse_step("step_12.tmp"), None);
        assert_eq!(parse_step("x_1"), None);
    }
}
