//! Weights in the Hugging Face layout: save, load, shards, hostile indexes.

use candle_core::DType;
use temper_model::{Architecture, ModelConfig, Transformer, weights};

use crate::max_abs_diff;

#[test]
fn save_and_load_round_trip_exactly() {
    for arch in [Architecture::Llama, Architecture::Qwen3] {
        let model =
            Transformer::init_random(ModelConfig::tiny(arch, 40), 11, &crate::dev()).unwrap();
        let dir = tempfile::tempdir().unwrap();
        weights::save_model(&model, dir.path()).unwrap();
        assert!(dir.path().join("model.safetensors").is_file());
        let loaded = weights::load_model(dir.path(), DType::F32, &crate::dev()).unwrap();
        assert_eq!(loaded.config(), model.config());
        let (a, b) = (model.tensors(), loaded.tensors());
        assert_eq!(a.keys().collect::<Vec<_>>(), b.keys().collect::<Vec<_>>());
        for (name, t) in &a {
            assert_eq!(max_abs_diff(t, &b[name]), 0.0, "{name}");
        }
        let toks = [3u32, 1, 4, 1, 5, 9, 2, 6];
        assert_eq!(
            max_abs_diff(&model.forward(&toks).unwrap(), &loaded.forward(&toks).unwrap()),
            0.0
        );
        // Tied embeddings are stored once, as transformers does.
        assert_eq!(b.contains_key("lm_head.weight"), arch == Architecture::Llama);
    }
}

#[test]
fn sharded_save_writes_an_index_and_loads_back() {
    let model =
        Transformer::init_random(ModelConfig::tiny(Architecture::Llama, 40), 12, &crate::dev())
            .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let config = model.config().to_hf_json();
    weights::save_tensors(&model.tensors(), &config, dir.path(), 20_000).unwrap();
    let files = weights::safetensors_files(dir.path()).unwrap();
    assert!(files.len() > 2, "{files:?}");
    let index: serde_json::Value = serde_json::from_slice(
        &std::fs::read(dir.path().join("model.safetensors.index.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(index["weight_map"].as_object().unwrap().len(), model.tensors().len());
    let loaded = weights::load_model(dir.path(), DType::F32, &crate::dev()).unwrap();
    for (name, t) in model.tensors() {
        assert_eq!(max_abs_diff(&t, &loaded.tensors()[&name]), 0.0, "{name}");
    }
    // Saving unsharded over it removes the index and the old shards.
    weights::save_model(&model, dir.path()).unwrap();
    let names: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    let mut names = names;
    names.sort();
    assert_eq!(names, ["config.json", "model.safetensors"]);
    weights::load_model(dir.path(), DType::F32, &crate::dev()).unwrap();
}

#[test]
fn hostile_or_broken_folders_are_refused_with_the_file_named() {
    let dir = tempfile::tempdir().unwrap();
    let model =
        Transformer::init_random(ModelConfig::tiny(Architecture::Llama, 40), 13, &crate::dev())
            .unwrap();
    weights::save_model(&model, dir.path()).unwrap();

    // An index pointing outside the folder.
    let index = dir.path().join("model.safetensors.index.json");
    std::fs::write(&index, r#"{"weight_map": {"a": "../../etc/passwd"}}"#).unwrap();
    let err = weights::load_model(dir.path(), DType::F32, &crate::dev()).unwrap_err().to_string();
    assert!(
        err.contains("model.safetensors.index.json") && err.contains("../../etc/passwd"),
        "{err}"
    );
    std::fs::remove_file(&index).unwrap();

    // A truncated safetensors file.
    let st = dir.path().join("model.safetensors");
    let bytes = std::fs::read(&st).unwrap();
    std::fs::write(&st, &bytes[..bytes.len() / 2]).unwrap();
    let err = weights::load_model(dir.path(), DType::F32, &crate::dev()).unwrap_err().to_string();
    assert!(err.contains("model.safetensors"), "{err}");

    // A configuration that does not match the weights.
    std::fs::write(&st, &bytes).unwrap();
    let mut cfg = model.config().to_hf_json();
    cfg["intermediate_size"] = 65.into();
    std::fs::write(dir.path().join("config.json"), cfg.to_string()).unwrap();
    let err = weights::load_model(dir.path(), DType::F32, &crate::dev()).unwrap_err().to_string();
    assert!(err.contains("mlp.gate_proj.weight") && err.contains("65"), "{err}");

    // A missing weight.
    let mut tensors = model.tensors();
    tensors.remove("model.norm.weight");
    weights::save_tensors(&tensors, &model.config().to_hf_json(), dir.path(), weights::SHARD_BYTES)
        .unwrap();
    let err = weights::load_model(dir.path(), DType::F32, &crate::dev()).unwrap_err().to_string();
    assert!(err.contains("model.norm.weight") && err.contains("missing"), "{err}");
}
