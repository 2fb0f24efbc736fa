//! Trainer checkpoints: `checkpoints/step_N/` holds the model (Hugging Face layout), the
//! optimizer moments, and `state.json` (step, data position, counters). A checkpoint is written
//! into `step_N.tmp/` and renamed when complete, so a crash leaves either the whole checkpoint or
//! a `.tmp` folder that is ignored (and removed by the next save).
//!
//! The moments are `optimizer.safetensors`, or, when the optimizer state is sharded over `N`
//! ranks, `optimizer.rank_R.safetensors` for each rank (its block, written by that rank into the
//! same `.tmp` folder before rank 0 renames it); `state.json` records `optimizer_shards`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use candle_core::{Device, Tensor};
use serde::{Deserialize, Serialize};

use crate::TrainError;

/// What a checkpoint records besides tensors.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TrainerState {
    /// Optimizer steps finished (the checkpoint is taken after step `step`).
    pub step: u64,
    /// Samples consumed from the data stream (its position: epoch and offset follow from it and
    /// the dataset size; the order of each epoch from the data seed).
    pub samples_seen: u64,
    /// Steps whose update was skipped (non-finite loss or gradient).
    pub skipped_steps: u64,
    /// Seed of the data order (the only random state of SFT).
    pub data_seed: u64,
    /// Optimizer steps taken (bias correction).
    pub optimizer_steps: u64,
    /// Ranks the optimizer moments are sharded over (0 or 1: one `optimizer.safetensors`).
    #[serde(default)]
    pub optimizer_shards: usize,
}

const STATE: &str = "state.json";
const OPTIMIZER: &str = "optimizer.safetensors";

/// Folder of checkpoint `step` under `root`.
pub fn step_dir(root: &Path, step: u64) -> PathBuf {
    root.join(format!("step_{step}"))
}

/// Writes a checkpoint and keeps only the newest `keep` (0 keeps all).
pub fn save(
    root: &Path,
    state: &TrainerState,
    model: &BTreeMap<String, Tensor>,
    model_config: &serde_json::Value,
    optimizer: &BTreeMap<String, Tensor>,
    keep: usize,
) -> Result<PathBuf, TrainError> {
    let tmp = begin(root, state.step)?;
    write_optimizer(&tmp, OPTIMIZER, optimizer)?;
    commit(root, &tmp, state, model, model_config, keep)
}

/// Starts checkpoint `step`: an empty `step_N.tmp/` under `root` (a stale one is removed).
pub fn begin(root: &Path, step: u64) -> Result<PathBuf, TrainError> {
    std::fs::create_dir_all(root).map_err(TrainError::io(root))?;
    let tmp = root.join(format!("step_{step}.tmp"));
    if tmp.exists() {
        std::fs::remove_dir_all(&tmp).map_err(TrainError::io(&tmp))?;
    }
    std::fs::create_dir_all(&tmp).map_err(TrainError::io(&tmp))?;
    Ok(tmp)
}

/// The file of rank `rank`'s block of sharded optimizer moments.
pub fn optimizer_shard_file(rank: usize) -> String {
    format!("optimizer.rank_{rank}.safetensors")
}

/// Writes optimizer moments as `name` in the unfinished checkpoint folder `tmp`.
pub fn write_optimizer(
    tmp: &Path,
    name: &str,
    optimizer: &BTreeMap<String, Tensor>,
) -> Result<(), TrainError> {
    let path = tmp.join(name);
    let optimizer: std::collections::HashMap<String, Tensor> =
        optimizer.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
    candle_core::safetensors::save(&optimizer, &path)
        .map_err(|source| TrainError::Tensors { path: path.clone(), source })?;
    if let Ok(f) = std::fs::File::open(&path) {
        let _ = f.sync_all();
    }
    Ok(())
}

/// Finishes a checkpoint begun with [`begin`] (whose optimizer files are written): the model
/// and `state.json`, then the rename that makes it complete; keeps the newest `keep`.
pub fn commit(
    root: &Path,
    tmp: &Path,
    state: &TrainerState,
    model: &BTreeMap<String, Tensor>,
    model_config: &serde_json::Value,
    keep: usize,
) -> Result<PathBuf, TrainError> {
    let fin = step_dir(root, state.step);
    temper_model::weights::save_tensors(
        model,
        model_config,
        tmp,
        temper_model::weights::SHARD_BYTES,
    )?;
    let state_path = tmp.join(STATE);
    let text = serde_json::to_vec_pretty(state).map_err(TrainError::Json)?;
    write_synced(&state_path, &text)?;
    sync_dir(tmp);
    if fin.exists() {
        std::fs::remove_dir_all(&fin).map_err(TrainError::io(&fin))?;
    }
    std::fs::rename(tmp, &fin).map_err(TrainError::io(&fin))?;
    sync_dir(root);
    if keep > 0 {
        let mut steps = list(root)?;
        steps.sort_unstable();
        while steps.len() > keep {
            let old = step_dir(root, steps.remove(0));
            std::fs::remove_dir_all(&old).map_err(TrainError::io(&old))?;
        }
    }
    Ok(fin)
}

fn write_synced(path: &Path, bytes: &[u8]) -> Result<(), TrainError> {
    use std::io::Write;
    let mut f = std::fs::File::create(path).map_err(TrainError::io(path))?;
    f.write_all(bytes).map_err(TrainError::io(path))?;
    f.sync_all().map_err(TrainError::io(path))
}

fn sync_dir(dir: &Path) {
    if let Ok(f) = std::fs::File::open(dir) {
        let _ = f.sync_all();
    }
}

/// Steps of the complete checkpoints under `root` (those with a `state.json`, not `.tmp`).
pub fn list(root: &Path) -> Result<Vec<u64>, TrainError> {
    let mut out = Vec::new();
    let entries = match std::fs::read_dir(root) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(out),
        Err(e) => return Err(TrainError::io(root)(e)),
    };
    for entry in entries {
        let entry = entry.map_err(TrainError::io(root))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if let Some(n) = name.strip_prefix("step_").and_then(|n| n.parse::<u64>().ok())
            && entry.path().join(STATE).is_file()
        {
            out.push(n);
        }
    }
    out.sort_unstable();
    Ok(out)
}

/// The newest complete checkpoint under `root`, if any.
pub fn latest(root: &Path) -> Result<Option<u64>, TrainError> {
    Ok(list(root)?.last().copied())
}

/// A loaded checkpoint.
#[derive(Debug)]
pub struct Loaded {
    /// Counters and data position.
    pub state: TrainerState,
    /// Model weights by name.
    pub model: BTreeMap<String, Tensor>,
    /// Optimizer moments by name (empty when they are sharded: see [`load_optimizer`]).
    pub optimizer: BTreeMap<String, Tensor>,
}

/// Reads the optimizer file `name` of checkpoint `step` under `root`.
pub fn load_optimizer(
    root: &Path,
    step: u64,
    name: &str,
) -> Result<BTreeMap<String, Tensor>, TrainError> {
    let path = step_dir(root, step).join(name);
    Ok(candle_core::safetensors::load(&path, &Device::Cpu)
        .map_err(|source| TrainError::Tensors { path: path.clone(), source })?
        .into_iter()
        .collect())
}

/// Reads checkpoint `step` under `root`.
pub fn load(root: &Path, step: u64, device: &Device) -> Result<Loaded, TrainError> {
    let dir = step_dir(root, step);
    let state_path = dir.join(STATE);
    let text = std::fs::read(&state_path).map_err(TrainError::io(&state_path))?;
    let state: TrainerState = serde_json::from_slice(&text)
        .map_err(|source| TrainError::Parse { path: state_path.clone(), source })?;
    let files = temper_model::weights::safetensors_files(&dir)?;
    let model = temper_model::weights::load_safetensors(&files, device)?;
    let optimizer = if state.optimizer_shards > 1 {
        BTreeMap::new()
    } else {
        let opt_path = dir.join(OPTIMIZER);
        candle_core::safetensors::load(&opt_path, device)
            .map_err(|source| TrainError::Tensors { path: opt_path.clone(), source })?
            .into_iter()
            .collect()
    };
    Ok(Loaded { state, model, optimizer })
}
