//! Weights in the Hugging Face layout: a folder with `config.json` and `model.safetensors`, or
//! shards listed in `model.safetensors.index.json`.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use candle_core::{DType, Device, Tensor};
use serde_json::{Value, json};

use crate::{ModelConfig, ModelError, Transformer};

/// Largest shard written, in bytes (Hugging Face's default is 5 GB).
pub const SHARD_BYTES: usize = 4 << 30;

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> ModelError + '_ {
    move |source| ModelError::Io { path: path.display().to_string(), source }
}

fn bad(path: &Path, message: impl Into<String>) -> ModelError {
    ModelError::Weights { path: path.display().to_string(), message: message.into() }
}

/// Reads `dir/config.json`.
pub fn load_config(dir: &Path) -> Result<ModelConfig, ModelError> {
    let path = dir.join("config.json");
    let text = std::fs::read_to_string(&path).map_err(io(&path))?;
    ModelConfig::from_hf_json(&text, &path.display().to_string())
}

/// The safetensors files of `dir`: the shards of `model.safetensors.index.json`, or
/// `model.safetensors`.
pub fn safetensors_files(dir: &Path) -> Result<Vec<PathBuf>, ModelError> {
    let index = dir.join("model.safetensors.index.json");
    if index.is_file() {
        let text = std::fs::read_to_string(&index).map_err(io(&index))?;
        let v: Value =
            serde_json::from_str(&text).map_err(|e| bad(&index, format!("not JSON: {e}")))?;
        let map = v
            .get("weight_map")
            .and_then(Value::as_object)
            .ok_or_else(|| bad(&index, "no `weight_map` object"))?;
        let mut files: Vec<String> =
            map.values().filter_map(Value::as_str).map(str::to_owned).collect();
        files.sort();
        files.dedup();
        return files
            .into_iter()
            .map(|f| {
                // Shard names come from the index: keep them inside the folder.
                if f.contains('/') || f.contains('\\') || f == ".." {
                    Err(bad(&index, format!("shard `{f}` is not a file name in this folder")))
                } else {
                    Ok(dir.join(f))
                }
            })
            .collect();
    }
    let single = dir.join("model.safetensors");
    if single.is_file() {
        return Ok(vec![single]);
    }
    Err(bad(dir, "no model.safetensors or model.safetensors.index.json"))
}

/// Every tensor of the safetensors `files`, by name.
pub fn load_safetensors(
    files: &[PathBuf],
    device: &Device,
) -> Result<BTreeMap<String, Tensor>, ModelError> {
    let mut out = BTreeMap::new();
    for file in files {
        let tensors = candle_core::safetensors::load(file, device)
            .map_err(|e| bad(file, format!("cannot read safetensors: {e}")))?;
        for (name, t) in tensors {
            if out.insert(name.clone(), t).is_some() {
                return Err(bad(file, format!("tensor `{name}` appears in two shards")));
            }
        }
    }
    Ok(out)
}

/// The model in `dir` (`config.json` and safetensors), its weights as `dtype` on `device`.
pub fn load_model(dir: &Path, dtype: DType, device: &Device) -> Result<Transformer, ModelError> {
    let cfg = load_config(dir)?;
    let tensors = load_safetensors(&safetensors_files(dir)?, device)?;
    Transformer::from_tensors(cfg, tensors, dtype, device)
}

/// Writes `model` to `dir` in the Hugging Face layout (`config.json`, `model.safetensors` or
/// shards with an index), so transformers and vLLM can load it. Files are written under temporary
/// names and renamed, so a reader never sees half a file.
pub fn save_model(model: &Transformer, dir: &Path) -> Result<(), ModelError> {
    save_tensors(&model.tensors(), &model.config().to_hf_json(), dir, SHARD_BYTES)
}

/// Writes `tensors` and `config` to `dir` as [`save_model`] does, starting a new shard before
/// one would pass `max_shard_bytes` (a tensor larger than that gets a shard of its own).
/// Safetensors files and an index left in `dir` by an earlier save are replaced.
pub fn save_tensors(
    tensors: &BTreeMap<String, Tensor>,
    config: &Value,
    dir: &Path,
    max_shard_bytes: usize,
) -> Result<(), ModelError> {
    std::fs::create_dir_all(dir).map_err(io(dir))?;
    let mut shards: Vec<Vec<(&String, &Tensor)>> = vec![Vec::new()];
    let mut size = 0;
    for (name, t) in tensors {
        let bytes = t.elem_count() * t.dtype().size_in_bytes();
        if size + bytes > max_shard_bytes && !shards.last().is_some_and(Vec::is_empty) {
            shards.push(Vec::new());
            size = 0;
        }
        size += bytes;
        if let Some(shard) = shards.last_mut() {
            shard.push((name, t));
        }
    }
    let names: Vec<String> = if shards.len() == 1 {
        vec!["model.safetensors".into()]
    } else {
        (1..=shards.len())
            .map(|i| format!("model-{i:05}-of-{:05}.safetensors", shards.len()))
            .collect()
    };
    let mut weight_map = serde_json::Map::new();
    let mut total = 0usize;
    for (shard, file) in shards.iter().zip(&names) {
        let map: HashMap<String, Tensor> = shard
            .iter()
            .map(|(n, t)| Ok(((*n).clone(), t.contiguous()?)))
            .collect::<Result<_, candle_core::Error>>()?;
        for (n, t) in &map {
            weight_map.insert(n.clone(), json!(file));
            total += t.elem_count() * t.dtype().size_in_bytes();
        }
        let path = dir.join(file);
        let tmp = temper_protocol::fsio::temp_path(&path);
        candle_core::safetensors::save(&map, &tmp).map_err(|e| bad(&tmp, e.to_string()))?;
        std::fs::rename(&tmp, &path).map_err(io(&path))?;
    }
    let index_path = dir.join("model.safetensors.index.json");
    if names.len() > 1 {
        let index = json!({"metadata": {"total_size": total}, "weight_map": weight_map});
        write_atomic(&index_path, &serde_json::to_vec_pretty(&index).unwrap_or_default())?;
    } else if index_path.exists() {
        std::fs::remove_file(&index_path).map_err(io(&index_path))?;
    }
    // Shards of an earlier save that this one did not overwrite would be read by nobody but
    // would confuse people and tools that glob for them.
    for entry in std::fs::read_dir(dir).map_err(io(dir))? {
        let name = entry.map_err(io(dir))?.file_name().to_string_lossy().into_owned();
        if name.ends_with(".safetensors") && name.starts_with("model") && !names.contains(&name) {
            let stale = dir.join(&name);
            std::fs::remove_file(&stale).map_err(io(&stale))?;
        }
    }
    write_atomic(&dir.join("config.json"), &serde_json::to_vec_pretty(config).unwrap_or_default())
}

fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), ModelError> {
    temper_protocol::fsio::write_atomic(path, bytes).map_err(io(path))
}
