//! The model being trained, as a config names it: a pretrained model (Hugging Face folder or
//! GGUF file) or a small one built from scratch with a byte-level tokenizer.

use std::path::PathBuf;

use candle_core::{DType, Device};
use serde::{Deserialize, Serialize};
use temper_model::{Architecture, ChatTemplate, ModelConfig, Pretrained, Tokenizer, Transformer};

use crate::TrainError;

/// ChatML, the template of from-scratch models: `<|im_start|>role\ncontent<|im_end|>\n`.
pub const CHATML: &str = "{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}";

/// Special tokens of from-scratch models (ids 256, 257, 258 after the bytes).
pub const SCRATCH_SPECIALS: [&str; 3] = ["<|im_start|>", "<|im_end|>", "<|endoftext|>"];

/// `[model]`: which model to train.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(default, deny_unknown_fields)]
pub struct ModelSpec {
    /// A Hugging Face folder or a `.gguf` file.
    pub path: Option<PathBuf>,
    /// A model built from scratch (when `path` is not set).
    pub scratch: Option<ScratchSpec>,
    /// Weight dtype: `f32` (default), `bf16` or `f16`.
    pub dtype: Option<String>,
}

/// `[model.scratch]`: a Llama-style model with a byte-level tokenizer and ChatML.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ScratchSpec {
    /// Width of the residual stream.
    pub hidden_size: usize,
    /// Transformer blocks.
    pub num_layers: usize,
    /// Attention heads.
    pub num_heads: usize,
    /// Key/value heads.
    pub num_kv_heads: usize,
    /// Width of the MLP.
    pub intermediate_size: usize,
    /// Longest sequence.
    pub max_positions: usize,
    /// Seed of the initial weights.
    pub seed: u64,
}

impl Default for ScratchSpec {
    fn default() -> Self {
        Self {
            hidden_size: 128,
            num_layers: 2,
            num_heads: 4,
            num_kv_heads: 4,
            intermediate_size: 512,
            max_positions: 512,
            seed: 0,
        }
    }
}

/// A model with its tokenizer and chat template.
#[derive(Debug)]
pub struct Policy {
    /// The weights.
    pub model: Transformer,
    /// Text ⇄ ids.
    pub tokenizer: Tokenizer,
    /// The chat template.
    pub template: Option<ChatTemplate>,
}

/// Parses a dtype name.
pub fn parse_dtype(name: &str) -> Result<DType, TrainError> {
    match name {
        "f32" => Ok(DType::F32),
        "bf16" => Ok(DType::BF16),
        "f16" => Ok(DType::F16),
        "f64" => Ok(DType::F64),
        other => Err(TrainError::Config(format!(
            "model.dtype: `{other}` is not one of f32, bf16, f16, f64"
        ))),
    }
}

impl ModelSpec {
    /// Checks that exactly one of `path` and `scratch` is set and the shape is sound.
    pub fn validate(&self) -> Result<(), TrainError> {
        match (&self.path, &self.scratch) {
            (Some(_), Some(_)) => {
                return Err(TrainError::Config(
                    "[model]: set either `path` or `[model.scratch]`, not both".into(),
                ));
            }
            (None, None) => {
                return Err(TrainError::Config(
                    "[model]: set `path` (a Hugging Face folder or .gguf file) or `[model.scratch]`"
                        .into(),
                ));
            }
            _ => {}
        }
        if let Some(s) = &self.scratch {
            for (name, v) in [
                ("hidden_size", s.hidden_size),
                ("num_layers", s.num_layers),
                ("num_heads", s.num_heads),
                ("num_kv_heads", s.num_kv_heads),
                ("intermediate_size", s.intermediate_size),
                ("max_positions", s.max_positions),
            ] {
                if v == 0 {
                    return Err(TrainError::Config(format!("model.scratch.{name} must be > 0")));
                }
            }
            if s.hidden_size % s.num_heads != 0 || s.num_heads % s.num_kv_heads != 0 {
                return Err(TrainError::Config(format!(
                    "model.scratch: hidden_size {} must divide into num_heads {}, and num_heads into num_kv_heads {}",
                    s.hidden_size, s.num_heads, s.num_kv_heads
                )));
            }
            if (s.hidden_size / s.num_heads) % 2 != 0 {
                return Err(TrainError::Config(
                    "model.scratch: the head width (hidden_size / num_heads) must be even".into(),
                ));
            }
        }
        if let Some(d) = &self.dtype {
            parse_dtype(d)?;
        }
        Ok(())
    }

    /// Loads or builds the model on `device`.
    pub fn build(&self, device: &Device) -> Result<Policy, TrainError> {
        self.validate()?;
        let dtype = parse_dtype(self.dtype.as_deref().unwrap_or("f32"))?;
        if let Some(path) = &self.path {
            let p = Pretrained::load(path, dtype, device)
                .map_err(|source| TrainError::Load { path: path.clone(), source })?;
            return Ok(Policy {
                model: p.model,
                tokenizer: p.tokenizer,
                template: p.chat_template,
            });
        }
        let s = self.scratch.clone().unwrap_or_default();
        let tokenizer = Tokenizer::bytes(&SCRATCH_SPECIALS);
        let mut cfg = ModelConfig::tiny(Architecture::Llama, tokenizer.vocab_size());
        cfg.hidden_size = s.hidden_size;
        cfg.intermediate_size = s.intermediate_size;
        cfg.num_hidden_layers = s.num_layers;
        cfg.num_attention_heads = s.num_heads;
        cfg.num_key_value_heads = s.num_kv_heads;
        cfg.head_dim = s.hidden_size / s.num_heads;
        cfg.max_position_embeddings = s.max_positions;
        cfg.tie_word_embeddings = true;
        cfg.eos_token_ids = vec![257, 258];
        cfg.bos_token_id = None;
        let model = Transformer::init_random(cfg, s.seed, device)?;
        let model = if dtype == DType::F32 {
            model
        } else {
            Transformer::from_tensors(model.config().clone(), model.tensors(), dtype, device)?
        };
        let template = ChatTemplate::new(CHATML, "", "<|im_end|>", "chatml")?;
        Ok(Policy { model, tokenizer, template: Some(template) })
    }
}

/// The small Qwen3-shaped model of the training benchmark: 4 layers of width 512, 8 query and 4
/// key/value heads of 64, MLP 1536, a 32k vocabulary, tied embeddings (≈29M weights).
pub fn bench_qwen3() -> ModelConfig {
    let mut c = ModelConfig::tiny(Architecture::Qwen3, 32_000);
    c.hidden_size = 512;
    c.num_hidden_layers = 4;
    c.num_attention_heads = 8;
    c.num_key_value_heads = 4;
    c.head_dim = 64;
    c.intermediate_size = 1536;
    c.max_position_embeddings = 4096;
    c
}
