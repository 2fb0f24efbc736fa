//! Model configuration, read from (and written as) a Hugging Face `config.json`.

use serde_json::{Value, json};

use crate::ModelError;
use crate::ops::RopeScaling;

/// The architectures temper implements.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Architecture {
    /// Llama (grouped-query attention; SmolLM2 is one).
    Llama,
    /// Qwen3 dense: Llama plus an RMS norm on each query and key head.
    Qwen3,
    /// Qwen3 mixture of experts: Qwen3 attention, softmax routing over experts.
    Qwen3Moe,
    /// GLM-4.5 mixture of experts: sigmoid routing with a correction bias, shared experts, the
    /// first layers dense, partial rotary embeddings.
    Glm4Moe,
}

impl Architecture {
    /// The `model_type` of `config.json`.
    pub fn model_type(self) -> &'static str {
        match self {
            Self::Llama => "llama",
            Self::Qwen3 => "qwen3",
            Self::Qwen3Moe => "qwen3_moe",
            Self::Glm4Moe => "glm4_moe",
        }
    }

    /// The class name in `architectures`.
    fn class(self) -> &'static str {
        match self {
            Self::Llama => "LlamaForCausalLM",
            Self::Qwen3 => "Qwen3ForCausalLM",
            Self::Qwen3Moe => "Qwen3MoeForCausalLM",
            Self::Glm4Moe => "Glm4MoeForCausalLM",
        }
    }
}

/// How a mixture-of-experts layer scores its experts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Gating {
    /// Softmax over all experts (Qwen3-MoE).
    Softmax,
    /// Independent sigmoids, chosen by score plus a correction bias (GLM-4.5, DeepSeek-V3).
    Sigmoid,
}

/// The mixture-of-experts part of a configuration.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct MoeConfig {
    /// Routed experts per MoE layer.
    pub num_experts: usize,
    /// Experts each token is sent to.
    pub num_experts_per_tok: usize,
    /// Hidden width of each expert's MLP.
    pub moe_intermediate_size: usize,
    /// Rescale the chosen experts' weights to sum to 1.
    pub norm_topk_prob: bool,
    /// How experts are scored.
    pub gating: Gating,
    /// Factor on the routed experts' output (GLM-4.5: 2.5).
    pub routed_scaling_factor: f64,
    /// Experts every token goes through (their MLP is `n_shared_experts` experts wide).
    pub n_shared_experts: usize,
    /// Which layers are dense (a plain MLP of `intermediate_size`) rather than MoE.
    pub dense_layers: Vec<bool>,
}

/// Everything the model's shape and numerics depend on.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ModelConfig {
    /// Which family.
    pub architecture: Architecture,
    /// Tokens in the vocabulary (rows of the embedding).
    pub vocab_size: usize,
    /// Width of the residual stream.
    pub hidden_size: usize,
    /// Width of the MLP's hidden layer.
    pub intermediate_size: usize,
    /// Transformer blocks.
    pub num_hidden_layers: usize,
    /// Query heads.
    pub num_attention_heads: usize,
    /// Key/value heads (fewer than query heads: grouped-query attention).
    pub num_key_value_heads: usize,
    /// Width of each head.
    pub head_dim: usize,
    /// Epsilon of every RMS norm.
    pub rms_norm_eps: f64,
    /// Base of the rotary frequencies.
    pub rope_theta: f64,
    /// Long-context adjustment of the rotary frequencies.
    pub rope_scaling: Option<RopeScaling>,
    /// Fraction of each head's dimensions that is rotated.
    pub partial_rotary_factor: f64,
    /// Longest context the rotary tables cover.
    pub max_position_embeddings: usize,
    /// The output projection is the embedding matrix.
    pub tie_word_embeddings: bool,
    /// The q/k/v projections have biases.
    pub attention_bias: bool,
    /// Token ids that end a sequence (from `eos_token_id`).
    pub eos_token_ids: Vec<u32>,
    /// The beginning-of-sequence token, when the model has one.
    pub bos_token_id: Option<u32>,
    /// Each query and key head has its own RMS norm.
    pub use_qk_norm: bool,
    /// The mixture of experts, for the MoE families.
    pub moe: Option<MoeConfig>,
}

fn field<'a>(v: &'a Value, name: &str, file: &str) -> Result<&'a Value, ModelError> {
    v.get(name).filter(|x| !x.is_null()).ok_or_else(|| ModelError::Config {
        file: file.into(),
        message: format!("missing field `{name}`"),
    })
}

fn usize_field(v: &Value, name: &str, file: &str) -> Result<usize, ModelError> {
    let x = field(v, name, file)?;
    x.as_u64().and_then(|n| usize::try_from(n).ok()).filter(|n| *n > 0).ok_or_else(|| {
        ModelError::Config {
            file: file.into(),
            message: format!("`{name}` must be a positive integer, got {x}"),
        }
    })
}

fn f64_field(v: &Value, name: &str, default: f64, file: &str) -> Result<f64, ModelError> {
    match v.get(name) {
        None | Some(Value::Null) => Ok(default),
        Some(x) => x.as_f64().filter(|f| f.is_finite()).ok_or_else(|| ModelError::Config {
            file: file.into(),
            message: format!("`{name}` must be a number, got {x}"),
        }),
    }
}

fn ids(v: Option<&Value>) -> Vec<u32> {
    match v {
        Some(Value::Number(n)) => {
            n.as_u64().and_then(|n| u32::try_from(n).ok()).into_iter().collect()
        }
        Some(Value::Array(a)) => {
            a.iter().filter_map(|n| n.as_u64().and_then(|n| u32::try_from(n).ok())).collect()
        }
        _ => Vec::new(),
    }
}

impl ModelConfig {
    /// Reads a Hugging Face `config.json`; `file` names it in errors.
    pub fn from_hf_json(text: &str, file: &str) -> Result<Self, ModelError> {
        let bad = |message: String| ModelError::Config { file: file.into(), message };
        let v: Value = serde_json::from_str(text).map_err(|e| bad(format!("not JSON: {e}")))?;
        let model_type = field(&v, "model_type", file)?.as_str().unwrap_or_default();
        let architecture = match model_type {
            "llama" => Architecture::Llama,
            "qwen3" => Architecture::Qwen3,
            "qwen3_moe" => Architecture::Qwen3Moe,
            "glm4_moe" => Architecture::Glm4Moe,
            other => {
                return Err(bad(format!(
                    "model_type `{other}` is not supported (supported: llama, qwen3, qwen3_moe, glm4_moe)"
                )));
            }
        };
        let hidden_size = usize_field(&v, "hidden_size", file)?;
        let num_attention_heads = usize_field(&v, "num_attention_heads", file)?;
        let num_key_value_heads = match v.get("num_key_value_heads") {
            None | Some(Value::Null) => num_attention_heads,
            Some(_) => usize_field(&v, "num_key_value_heads", file)?,
        };
        if num_attention_heads % num_key_value_heads != 0 {
            return Err(bad(format!(
                "num_attention_heads ({num_attention_heads}) is not a multiple of num_key_value_heads ({num_key_value_heads})"
            )));
        }
        let head_dim = match v.get("head_dim") {
            None | Some(Value::Null) => {
                if hidden_size % num_attention_heads != 0 {
                    return Err(bad(format!(
                        "hidden_size ({hidden_size}) is not a multiple of num_attention_heads ({num_attention_heads}) and head_dim is not given"
                    )));
                }
                hidden_size / num_attention_heads
            }
            Some(_) => usize_field(&v, "head_dim", file)?,
        };
        let rope_scaling = match v.get("rope_scaling") {
            None | Some(Value::Null) => None,
            Some(s) => {
                let kind = s.get("rope_type").or_else(|| s.get("type")).and_then(Value::as_str);
                match kind {
                    Some("default") => None,
                    Some("llama3") => Some(RopeScaling::Llama3 {
                        factor: f64_field(s, "factor", 8.0, file)?,
                        high_freq_factor: f64_field(s, "high_freq_factor", 4.0, file)?,
                        low_freq_factor: f64_field(s, "low_freq_factor", 1.0, file)?,
                        original_max_position_embeddings: f64_field(
                            s,
                            "original_max_position_embeddings",
                            8192.0,
                            file,
                        )?,
                    }),
                    other => {
                        return Err(bad(format!(
                            "rope_scaling type {other:?} is not supported (supported: llama3)"
                        )));
                    }
                }
            }
        };
        let partial_rotary_factor = f64_field(&v, "partial_rotary_factor", 1.0, file)?;
        let rotary = head_dim as f64 * partial_rotary_factor;
        if !(partial_rotary_factor > 0.0 && partial_rotary_factor <= 1.0)
            || rotary.fract() != 0.0
            || !(rotary as usize).is_multiple_of(2)
        {
            return Err(bad(format!(
                "partial_rotary_factor {partial_rotary_factor} with head_dim {head_dim} does not give an even rotary width"
            )));
        }
        let num_hidden_layers = usize_field(&v, "num_hidden_layers", file)?;
        let moe = match architecture {
            Architecture::Llama | Architecture::Qwen3 => None,
            Architecture::Qwen3Moe => {
                let step = match v.get("decoder_sparse_step") {
                    None | Some(Value::Null) => 1,
                    Some(_) => usize_field(&v, "decoder_sparse_step", file)?,
                };
                let only_mlp = ids(v.get("mlp_only_layers"));
                let dense_layers = (0..num_hidden_layers)
                    .map(|i| only_mlp.contains(&(i as u32)) || (i + 1) % step != 0)
                    .collect();
                Some(MoeConfig {
                    num_experts: usize_field(&v, "num_experts", file)?,
                    num_experts_per_tok: usize_field(&v, "num_experts_per_tok", file)?,
                    moe_intermediate_size: usize_field(&v, "moe_intermediate_size", file)?,
                    norm_topk_prob: v
                        .get("norm_topk_prob")
                        .and_then(Value::as_bool)
                        .unwrap_or(false),
                    gating: Gating::Softmax,
                    routed_scaling_factor: 1.0,
                    n_shared_experts: 0,
                    dense_layers,
                })
            }
            Architecture::Glm4Moe => {
                for (name, want) in [("n_group", 1), ("topk_group", 1)] {
                    if let Some(x) = v.get(name).and_then(Value::as_u64).filter(|x| *x != want) {
                        return Err(bad(format!(
                            "`{name}` = {x} (grouped routing) is not supported; only {want}"
                        )));
                    }
                }
                let first_dense =
                    v.get("first_k_dense_replace").and_then(Value::as_u64).unwrap_or(0) as usize;
                Some(MoeConfig {
                    num_experts: usize_field(&v, "n_routed_experts", file)?,
                    num_experts_per_tok: usize_field(&v, "num_experts_per_tok", file)?,
                    moe_intermediate_size: usize_field(&v, "moe_intermediate_size", file)?,
                    norm_topk_prob: v
                        .get("norm_topk_prob")
                        .and_then(Value::as_bool)
                        .unwrap_or(true),
                    gating: Gating::Sigmoid,
                    routed_scaling_factor: f64_field(&v, "routed_scaling_factor", 1.0, file)?,
                    n_shared_experts: v.get("n_shared_experts").and_then(Value::as_u64).unwrap_or(0)
                        as usize,
                    dense_layers: (0..num_hidden_layers).map(|i| i < first_dense).collect(),
                })
            }
        };
        if let Some(m) = &moe
            && m.num_experts_per_tok > m.num_experts
        {
            return Err(bad(format!(
                "num_experts_per_tok ({}) is over the number of experts ({})",
                m.num_experts_per_tok, m.num_experts
            )));
        }
        let use_qk_norm = match architecture {
            Architecture::Qwen3 | Architecture::Qwen3Moe => true,
            Architecture::Llama => false,
            Architecture::Glm4Moe => v.get("use_qk_norm").and_then(Value::as_bool).unwrap_or(false),
        };
        let cfg = Self {
            architecture,
            vocab_size: usize_field(&v, "vocab_size", file)?,
            hidden_size,
            intermediate_size: usize_field(&v, "intermediate_size", file)?,
            num_hidden_layers,
            num_attention_heads,
            num_key_value_heads,
            head_dim,
            rms_norm_eps: f64_field(&v, "rms_norm_eps", 1e-6, file)?,
            rope_theta: f64_field(&v, "rope_theta", 10_000.0, file)?,
            rope_scaling,
            partial_rotary_factor,
            max_position_embeddings: match v.get("max_position_embeddings") {
                None | Some(Value::Null) => 4096,
                Some(_) => usize_field(&v, "max_position_embeddings", file)?,
            },
            tie_word_embeddings: v
                .get("tie_word_embeddings")
                .and_then(Value::as_bool)
                .unwrap_or(false),
            attention_bias: v.get("attention_bias").and_then(Value::as_bool).unwrap_or(false),
            eos_token_ids: ids(v.get("eos_token_id")),
            bos_token_id: ids(v.get("bos_token_id")).first().copied(),
            use_qk_norm,
            moe,
        };
        Ok(cfg)
    }

    /// The `config.json` that transformers and vLLM read for this model.
    pub fn to_hf_json(&self) -> Value {
        let mut v = json!({
            "architectures": [self.architecture.class()],
            "model_type": self.architecture.model_type(),
            "vocab_size": self.vocab_size,
            "hidden_size": self.hidden_size,
            "intermediate_size": self.intermediate_size,
            "num_hidden_layers": self.num_hidden_layers,
            "num_attention_heads": self.num_attention_heads,
            "num_key_value_heads": self.num_key_value_heads,
            "head_dim": self.head_dim,
            "hidden_act": "silu",
            "rms_norm_eps": self.rms_norm_eps,
            "rope_theta": self.rope_theta,
            "max_position_embeddings": self.max_position_embeddings,
            "tie_word_embeddings": self.tie_word_embeddings,
            "attention_bias": self.attention_bias,
            "torch_dtype": "float32",
        });
        if self.partial_rotary_factor != 1.0 {
            v["partial_rotary_factor"] = json!(self.partial_rotary_factor);
        }
        if let Some(RopeScaling::Llama3 {
            factor,
            high_freq_factor,
            low_freq_factor,
            original_max_position_embeddings,
        }) = self.rope_scaling
        {
            v["rope_scaling"] = json!({
                "rope_type": "llama3",
                "factor": factor,
                "high_freq_factor": high_freq_factor,
                "low_freq_factor": low_freq_factor,
                "original_max_position_embeddings": original_max_position_embeddings,
            });
        }
        match self.eos_token_ids.as_slice() {
            [] => {}
            [one] => v["eos_token_id"] = json!(one),
            many => v["eos_token_id"] = json!(many),
        }
        if let Some(bos) = self.bos_token_id {
            v["bos_token_id"] = json!(bos);
        }
        if self.architecture == Architecture::Glm4Moe {
            v["use_qk_norm"] = json!(self.use_qk_norm);
        }
        if let Some(m) = &self.moe {
            v["num_experts_per_tok"] = json!(m.num_experts_per_tok);
            v["moe_intermediate_size"] = json!(m.moe_intermediate_size);
            v["norm_topk_prob"] = json!(m.norm_topk_prob);
            match self.architecture {
                Architecture::Glm4Moe => {
                    v["n_routed_experts"] = json!(m.num_experts);
                    v["n_shared_experts"] = json!(m.n_shared_experts);
                    v["routed_scaling_factor"] = json!(m.routed_scaling_factor);
                    v["first_k_dense_replace"] =
                        json!(m.dense_layers.iter().take_while(|d| **d).count());
                    v["n_group"] = json!(1);
                    v["topk_group"] = json!(1);
                }
                _ => {
                    v["num_experts"] = json!(m.num_experts);
                    let only: Vec<usize> =
                        (0..m.dense_layers.len()).filter(|&i| m.dense_layers[i]).collect();
                    v["mlp_only_layers"] = json!(only);
                    v["decoder_sparse_step"] = json!(1);
                }
            }
        }
        v
    }

    /// Width of the rotated part of each head.
    pub fn rotary_dim(&self) -> usize {
        (self.head_dim as f64 * self.partial_rotary_factor) as usize
    }

    /// Whether each query and key head has its own RMS norm (Qwen3, Qwen3-MoE, some GLM-4.5).
    pub fn qk_norm(&self) -> bool {
        self.use_qk_norm
    }

    /// Whether layer `i` is a mixture of experts.
    pub fn is_moe_layer(&self, i: usize) -> bool {
        self.moe.as_ref().is_some_and(|m| !m.dense_layers.get(i).copied().unwrap_or(false))
    }

    /// A small configuration for tests and from-scratch toy models.
    pub fn tiny(architecture: Architecture, vocab_size: usize) -> Self {
        Self {
            architecture,
            vocab_size,
            hidden_size: 32,
            intermediate_size: 64,
            num_hidden_layers: 2,
            num_attention_heads: 4,
            num_key_value_heads: 2,
            head_dim: 8,
            rms_norm_eps: 1e-5,
            rope_theta: 10_000.0,
            rope_scaling: None,
            partial_rotary_factor: if architecture == Architecture::Glm4Moe { 0.5 } else { 1.0 },
            max_position_embeddings: 512,
            tie_word_embeddings: architecture == Architecture::Qwen3,
            attention_bias: architecture == Architecture::Glm4Moe,
            eos_token_ids: vec![0],
            bos_token_id: None,
            use_qk_norm: matches!(architecture, Architecture::Qwen3 | Architecture::Qwen3Moe),
            moe: match architecture {
                Architecture::Llama | Architecture::Qwen3 => None,
                Architecture::Qwen3Moe => Some(MoeConfig {
                    num_experts: 6,
                    num_experts_per_tok: 2,
                    moe_intermediate_size: 16,
                    norm_topk_prob: true,
                    gating: Gating::Softmax,
                    routed_scaling_factor: 1.0,
                    n_shared_experts: 0,
                    dense_layers: vec![false, false],
                }),
                Architecture::Glm4Moe => Some(MoeConfig {
                    num_experts: 6,
                    num_experts_per_tok: 2,
                    moe_intermediate_size: 16,
                    norm_topk_prob: true,
                    gating: Gating::Sigmoid,
                    routed_scaling_factor: 2.5,
                    n_shared_experts: 1,
                    dense_layers: vec![true, false],
                }),
            },
        }
    }
}
