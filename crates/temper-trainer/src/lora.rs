//! LoRA: low-rank adapters on chosen linear weights, `W' = W + (alpha / rank) · B · A`, with the
//! base weights frozen. `A` (`[rank, in]`) starts as a small Gaussian and `B` (`[out, rank]`) at
//! zero, so training starts from the base model exactly. Adapters are saved in the PEFT layout
//! (`adapter_config.json`, `adapter_model.safetensors` with `base_model.model.<module>.lora_A.weight`
//! and `lora_B.weight`), which PEFT loads onto the Hugging Face model; merged weights are written
//! for inference servers.
//!
//! This first version merges each adapted weight per step (memory of one more copy of the adapted
//! weights); the forward-time low-rank path that avoids it is a later optimisation.

use std::collections::BTreeMap;
use std::path::Path;

use candle_core::{DType, Tensor, Var};
use serde::{Deserialize, Serialize};
use serde_json::json;
use temper_model::Transformer;

use crate::TrainError;

/// `[lora]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LoraConfig {
    /// Rank of the update.
    pub rank: usize,
    /// Scale numerator: the update is multiplied by `alpha / rank`.
    pub alpha: f64,
    /// Module names whose weights get adapters (the last part of the weight's name before
    /// `.weight`, as PEFT's `target_modules`).
    pub target_modules: Vec<String>,
    /// Seed of `A`'s initialisation.
    pub seed: u64,
}

impl Default for LoraConfig {
    fn default() -> Self {
        Self {
            rank: 8,
            alpha: 16.0,
            target_modules: [
                "q_proj",
                "k_proj",
                "v_proj",
                "o_proj",
                "gate_proj",
                "up_proj",
                "down_proj",
            ]
            .iter()
            .map(|s| (*s).to_owned())
            .collect(),
            seed: 0,
        }
    }
}

/// One adapted weight.
#[derive(Debug)]
struct Adapter {
    /// The base weight's name (`model.layers.0.self_attn.q_proj.weight`).
    weight: String,
    a: Var,
    b: Var,
}

/// The adapters of a model.
#[derive(Debug)]
pub struct Lora {
    cfg: LoraConfig,
    adapters: Vec<Adapter>,
    /// `(PEFT name, Var)` of every adapter matrix, in a fixed order: what the optimizer trains.
    params: Vec<(String, Var)>,
}

fn module_of(weight: &str) -> Option<&str> {
    weight.strip_suffix(".weight").and_then(|m| m.rsplit('.').next())
}

impl Lora {
    /// Adapters for every 2-D weight of `model` whose module is in `cfg.target_modules`.
    pub fn new(model: &Transformer, cfg: LoraConfig) -> Result<Self, TrainError> {
        if cfg.rank == 0 || !(cfg.alpha.is_finite() && cfg.alpha > 0.0) {
            return Err(TrainError::Config("lora.rank and lora.alpha must be > 0".into()));
        }
        let mut adapters = Vec::new();
        let mut params = Vec::new();
        for (i, (name, w)) in model.params().iter().enumerate() {
            let Some(module) = module_of(name) else { continue };
            if w.rank() != 2 || !cfg.target_modules.iter().any(|t| t == module) {
                continue;
            }
            let (out, inp) = w.dims2()?;
            // PyTorch's default for A (kaiming-uniform with a = sqrt(5)) has std 1/sqrt(3·in);
            // a Gaussian of that std.
            let std = 1.0 / (3.0 * inp as f64).sqrt();
            let a = temper_model::init::normal(
                &[cfg.rank, inp],
                std,
                cfg.seed.wrapping_mul(1_000_003).wrapping_add(i as u64),
                w.device(),
            )?
            .to_dtype(w.dtype())?;
            let b = Tensor::zeros((out, cfg.rank), w.dtype(), w.device())?;
            let (a, b) = (Var::from_tensor(&a)?, Var::from_tensor(&b)?);
            let prefix = format!("base_model.model.{}", name.trim_end_matches(".weight"));
            params.push((format!("{prefix}.lora_A.weight"), a.clone()));
            params.push((format!("{prefix}.lora_B.weight"), b.clone()));
            adapters.push(Adapter { weight: name.clone(), a, b });
        }
        if adapters.is_empty() {
            return Err(TrainError::Config(format!(
                "lora.target_modules {:?} match no weight of the model",
                cfg.target_modules
            )));
        }
        Ok(Self { cfg, adapters, params })
    }

    /// The adapter matrices by PEFT name: what the optimizer trains.
    pub fn params(&self) -> &[(String, Var)] {
        &self.params
    }

    /// `alpha / rank`.
    pub fn scale(&self) -> f64 {
        self.cfg.alpha / self.cfg.rank as f64
    }

    fn merged(
        &self,
        base: &Transformer,
        detach: bool,
    ) -> Result<BTreeMap<String, Tensor>, TrainError> {
        let weights: BTreeMap<&str, &Var> =
            base.params().iter().map(|(n, v)| (n.as_str(), v)).collect();
        let mut out = BTreeMap::new();
        for ad in &self.adapters {
            let w = weights.get(ad.weight.as_str()).ok_or_else(|| {
                TrainError::Model(temper_model::ModelError::MissingTensor {
                    name: ad.weight.clone(),
                })
            })?;
            let delta = (ad.b.as_tensor().matmul(ad.a.as_tensor())? * self.scale())?;
            let merged = (w.as_tensor().detach() + delta)?;
            out.insert(ad.weight.clone(), if detach { merged.detach() } else { merged });
        }
        Ok(out)
    }

    /// The model to run this step: the base weights frozen, the adapted ones `W + s·B·A` with the
    /// gradient flowing to `A` and `B`.
    pub fn apply(&self, base: &Transformer) -> Result<Transformer, TrainError> {
        Ok(base.with_overrides(&self.merged(base, false)?)?)
    }

    /// Every weight of the model with the adapters merged in (for inference and export).
    pub fn merged_tensors(
        &self,
        base: &Transformer,
    ) -> Result<BTreeMap<String, Tensor>, TrainError> {
        let mut all = base.tensors();
        all.extend(self.merged(base, true)?);
        Ok(all)
    }

    /// Writes the adapter in the PEFT layout to `dir`.
    pub fn save(&self, dir: &Path, base_model: &str) -> Result<(), TrainError> {
        std::fs::create_dir_all(dir).map_err(TrainError::io(dir))?;
        let tensors: std::collections::HashMap<String, Tensor> = self
            .params
            .iter()
            .map(|(n, v)| Ok((n.clone(), v.as_tensor().to_dtype(DType::F32)?)))
            .collect::<candle_core::Result<_>>()?;
        let path = dir.join("adapter_model.safetensors");
        candle_core::safetensors::save(&tensors, &path)
            .map_err(|source| TrainError::Tensors { path: path.clone(), source })?;
        let config = json!({
            "peft_type": "LORA",
            "task_type": "CAUSAL_LM",
            "r": self.cfg.rank,
            "lora_alpha": self.cfg.alpha,
            "lora_dropout": 0.0,
            "bias": "none",
            "target_modules": self.cfg.target_modules,
            "fan_in_fan_out": false,
            "inference_mode": true,
            "base_model_name_or_path": base_model,
        });
        let path = dir.join("adapter_config.json");
        std::fs::write(&path, serde_json::to_vec_pretty(&config).map_err(TrainError::Json)?)
            .map_err(TrainError::io(&path))
    }

    /// Restores adapter matrices saved by [`Lora::save`] (or a checkpoint of them).
    pub fn load_tensors(&self, tensors: &BTreeMap<String, Tensor>) -> Result<(), TrainError> {
        for (name, var) in &self.params {
            let t = tensors
                .get(name)
                .ok_or_else(|| TrainError::Checkpoint(format!("adapter `{name}` is missing")))?;
            var.set(&t.to_dtype(var.dtype())?)?;
        }
        Ok(())
    }
}
