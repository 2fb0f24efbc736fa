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
}

impl Architecture {
    /// The `model_type` of `config.json`.
    pub fn model_type(self) -> &'static str {
        match self {
            Self::Llama => "llama",
            Self::Qwen3 => "qwen3",
        }
    }

    /// The class name in `architectures`.
    fn class(self) -> &'static str {
        match self {
            Self::Llama => "LlamaForCausalLM",
            Self::Qwen3 => "Qwen3ForCausalLM",
        }
    }
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
            other => {
                return Err(bad(format!(
                    "model_type `{other}` is not supported (supported: llama, qwen3)"
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
        let cfg = Self {
            architecture,
            vocab_size: usize_field(&v, "vocab_size", file)?,
            hidden_size,
            intermediate_size: usize_field(&v, "intermediate_size", file)?,
            num_hidden_layers: usize_field(&v, "num_hidden_layers", file)?,
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
        v
    }

    /// Width of the rotated part of each head.
    pub fn rotary_dim(&self) -> usize {
        (self.head_dim as f64 * self.partial_rotary_factor) as usize
    }

    /// Whether each query and key head has its own RMS norm (Qwen3).
    pub fn qk_norm(&self) -> bool {
        self.architecture == Architecture::Qwen3
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
            partial_rotary_factor: 1.0,
            max_position_embeddings: 512,
            tie_word_embeddings: architecture == Architecture::Qwen3,
            attention_bias: false,
            eos_token_ids: vec![0],
            bos_token_id: None,
        }
    }
}
