//! GGUF files (llama.cpp's format): the configuration from the metadata, the weights dequantized
//! and renamed to the Hugging Face layout, and the embedded tokenizer and chat template.
//!
//! Weights are dequantized once at load (F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0 and the
//! K-quants all read through candle's GGUF reader), so the model computes in the dtype asked
//! for, and trains and saves like any other. llama.cpp stores Llama's query and key projections
//! with the rows of each head interleaved for its rotary layout; they are put back in the Hugging
//! Face order here.

use std::collections::{BTreeMap, HashMap};
use std::fs::File;
use std::io::BufReader;
use std::path::Path;

use candle_core::quantized::gguf_file::{Content, Value};
use candle_core::{DType, Device, Tensor};

use crate::{Architecture, ModelConfig, ModelError, Tokenizer};

/// What a GGUF file holds besides the weights.
#[derive(Debug)]
pub struct GgufModel {
    /// The configuration read from the metadata.
    pub config: ModelConfig,
    /// Weights by Hugging Face name, dequantized.
    pub tensors: BTreeMap<String, Tensor>,
    /// The embedded tokenizer.
    pub tokenizer: Tokenizer,
    /// `tokenizer.chat_template`, when present.
    pub chat_template: Option<String>,
    /// The text of the beginning- and end-of-sequence tokens (for chat templates).
    pub bos_token: String,
    /// See `bos_token`.
    pub eos_token: String,
}

fn bad(path: &Path, message: impl Into<String>) -> ModelError {
    ModelError::Weights { path: path.display().to_string(), message: message.into() }
}

struct Meta<'a> {
    md: &'a HashMap<String, Value>,
    path: &'a Path,
}

impl Meta<'_> {
    fn get(&self, key: &str) -> Result<&Value, ModelError> {
        self.md.get(key).ok_or_else(|| bad(self.path, format!("metadata `{key}` is missing")))
    }
    fn usize(&self, key: &str) -> Result<usize, ModelError> {
        let v = self.get(key)?;
        v.to_u64()
            .ok()
            .or_else(|| v.to_u32().ok().map(u64::from))
            .or_else(|| v.to_i32().ok().and_then(|x| u64::try_from(x).ok()))
            .and_then(|x| usize::try_from(x).ok())
            .filter(|x| *x > 0)
            .ok_or_else(|| bad(self.path, format!("metadata `{key}` must be a positive integer")))
    }
    fn opt_usize(&self, key: &str) -> Result<Option<usize>, ModelError> {
        if self.md.contains_key(key) { self.usize(key).map(Some) } else { Ok(None) }
    }
    fn f64(&self, key: &str, default: f64) -> Result<f64, ModelError> {
        match self.md.get(key) {
            None => Ok(default),
            Some(v) => v
                .to_f32()
                .map(f64::from)
                .or_else(|_| v.to_f64())
                .map_err(|_| bad(self.path, format!("metadata `{key}` must be a number"))),
        }
    }
    fn str(&self, key: &str) -> Option<&str> {
        self.md.get(key).and_then(|v| v.to_string().ok()).map(String::as_str)
    }
    fn strings(&self, key: &str) -> Result<Vec<String>, ModelError> {
        self.get(key)?
            .to_vec()
            .map_err(|_| bad(self.path, format!("metadata `{key}` must be an array")))?
            .iter()
            .map(|v| {
                v.to_string()
                    .cloned()
                    .map_err(|_| bad(self.path, format!("metadata `{key}` must hold strings")))
            })
            .collect()
    }
    fn token_id(&self, key: &str) -> Option<u32> {
        self.md.get(key).and_then(|v| {
            v.to_u32().ok().or_else(|| v.to_i32().ok().and_then(|x| u32::try_from(x).ok()))
        })
    }
}

/// Reads the GGUF file at `path`, weights dequantized to `dtype` on `device`.
pub fn load_gguf(path: &Path, dtype: DType, device: &Device) -> Result<GgufModel, ModelError> {
    let file = File::open(path)
        .map_err(|source| ModelError::Io { path: path.display().to_string(), source })?;
    let mut reader = BufReader::new(file);
    let content = Content::read(&mut reader)
        .map_err(|e| bad(path, format!("not a readable GGUF file: {e}")))?;
    let meta = Meta { md: &content.metadata, path };
    let arch_name = meta
        .str("general.architecture")
        .ok_or_else(|| bad(path, "metadata `general.architecture` is missing"))?;
    let architecture = match arch_name {
        "llama" => Architecture::Llama,
        "qwen3" => Architecture::Qwen3,
        other => {
            return Err(bad(
                path,
                format!("architecture `{other}` is not supported (supported: llama, qwen3)"),
            ));
        }
    };
    let a = |key: &str| format!("{arch_name}.{key}");
    let hidden_size = meta.usize(&a("embedding_length"))?;
    let heads = meta.usize(&a("attention.head_count"))?;
    let kv_heads = meta.opt_usize(&a("attention.head_count_kv"))?.unwrap_or(heads);
    if heads % kv_heads != 0 {
        return Err(bad(
            path,
            format!("{heads} attention heads are not a multiple of {kv_heads} key/value heads"),
        ));
    }
    let head_dim = match meta.opt_usize(&a("attention.key_length"))? {
        Some(d) => d,
        None if hidden_size % heads == 0 => hidden_size / heads,
        None => {
            return Err(bad(
                path,
                "head width is neither given nor a divisor of the embedding length",
            ));
        }
    };
    let tokens = meta.strings("tokenizer.ggml.tokens")?;
    if content.tensor_infos.contains_key("rope_freqs.weight") {
        return Err(bad(
            path,
            "rotary frequency scaling (`rope_freqs.weight`) is not supported in GGUF; use the safetensors model",
        ));
    }
    let rotary = meta.opt_usize(&a("rope.dimension_count"))?.unwrap_or(head_dim);
    let embed_rows = content
        .tensor_infos
        .get("token_embd.weight")
        .map(|t| t.shape.dims()[0])
        .ok_or_else(|| bad(path, "tensor `token_embd.weight` is missing"))?;
    let config = ModelConfig {
        architecture,
        vocab_size: embed_rows,
        hidden_size,
        intermediate_size: meta.usize(&a("feed_forward_length"))?,
        num_hidden_layers: meta.usize(&a("block_count"))?,
        num_attention_heads: heads,
        num_key_value_heads: kv_heads,
        head_dim,
        rms_norm_eps: meta.f64(&a("attention.layer_norm_rms_epsilon"), 1e-6)?,
        rope_theta: meta.f64(&a("rope.freq_base"), 10_000.0)?,
        rope_scaling: None,
        partial_rotary_factor: rotary as f64 / head_dim as f64,
        max_position_embeddings: meta.opt_usize(&a("context_length"))?.unwrap_or(4096),
        tie_word_embeddings: !content.tensor_infos.contains_key("output.weight"),
        attention_bias: content.tensor_infos.contains_key("blk.0.attn_q.bias"),
        eos_token_ids: meta.token_id("tokenizer.ggml.eos_token_id").into_iter().collect(),
        bos_token_id: meta.token_id("tokenizer.ggml.bos_token_id"),
        use_qk_norm: content.tensor_infos.contains_key("blk.0.attn_q_norm.weight"),
        moe: None,
    };

    let mut tensors = BTreeMap::new();
    for name in content.tensor_infos.keys() {
        let Some(hf) = hf_name(name) else {
            tracing::debug!("ignoring GGUF tensor `{name}`");
            continue;
        };
        let q = content
            .tensor(&mut reader, name, device)
            .map_err(|e| bad(path, format!("tensor `{name}`: {e}")))?;
        let mut t = q.dequantize(device).map_err(|e| bad(path, format!("tensor `{name}`: {e}")))?;
        if architecture == Architecture::Llama {
            if hf.ends_with("q_proj.weight") {
                t = unpermute_rows(&t, heads)?;
            } else if hf.ends_with("k_proj.weight") {
                t = unpermute_rows(&t, kv_heads)?;
            }
        }
        tensors.insert(hf, t.to_dtype(dtype)?);
    }

    let model = meta.str("tokenizer.ggml.model").unwrap_or_default();
    if model != "gpt2" {
        return Err(bad(
            path,
            format!(
                "tokenizer type `{model}` (tokenizer.ggml.model) is not supported (supported: gpt2 byte-level BPE); give a tokenizer.json"
            ),
        ));
    }
    let merges = meta.strings("tokenizer.ggml.merges")?;
    let types: Vec<i32> = match content.metadata.get("tokenizer.ggml.token_type") {
        Some(v) => v
            .to_vec()
            .map_err(|_| bad(path, "metadata `tokenizer.ggml.token_type` must be an array"))?
            .iter()
            .map(|t| t.to_i32().unwrap_or(1))
            .collect(),
        None => vec![1; tokens.len()],
    };
    let pre = meta.str("tokenizer.ggml.pre").unwrap_or("default");
    let tokenizer =
        Tokenizer::from_gguf_bpe(&tokens, &merges, &types, pre, &path.display().to_string())?;
    let token_text = |key: &str| {
        meta.token_id(key).and_then(|id| tokens.get(id as usize)).cloned().unwrap_or_default()
    };
    Ok(GgufModel {
        bos_token: token_text("tokenizer.ggml.bos_token_id"),
        eos_token: token_text("tokenizer.ggml.eos_token_id"),
        chat_template: meta.str("tokenizer.chat_template").map(str::to_owned),
        config,
        tensors,
        tokenizer,
    })
}

/// The Hugging Face name of a llama.cpp tensor name.
fn hf_name(name: &str) -> Option<String> {
    match name {
        "token_embd.weight" => return Some("model.embed_tokens.weight".into()),
        "output_norm.weight" => return Some("model.norm.weight".into()),
        "output.weight" => return Some("lm_head.weight".into()),
        _ => {}
    }
    let rest = name.strip_prefix("blk.")?;
    let (layer, rest) = rest.split_once('.')?;
    let layer: usize = layer.parse().ok()?;
    let (part, kind) = rest.rsplit_once('.')?;
    let hf = match part {
        "attn_norm" => "input_layernorm",
        "attn_q" => "self_attn.q_proj",
        "attn_k" => "self_attn.k_proj",
        "attn_v" => "self_attn.v_proj",
        "attn_output" => "self_attn.o_proj",
        "attn_q_norm" => "self_attn.q_norm",
        "attn_k_norm" => "self_attn.k_norm",
        "ffn_norm" => "post_attention_layernorm",
        "ffn_gate" => "mlp.gate_proj",
        "ffn_up" => "mlp.up_proj",
        "ffn_down" => "mlp.down_proj",
        _ => return None,
    };
    Some(format!("model.layers.{layer}.{hf}.{kind}"))
}

/// Undoes llama.cpp's reordering of a Llama query/key projection (`[heads * head_dim, in]`):
/// within each head it stores rows `0, d/2, 1, d/2 + 1, …`; Hugging Face stores `0, 1, …`.
fn unpermute_rows(w: &Tensor, heads: usize) -> Result<Tensor, ModelError> {
    let (out, input) = w.dims2()?;
    let hd = out / heads;
    Ok(w.reshape((heads, hd / 2, 2, input))?
        .transpose(1, 2)?
        .contiguous()?
        .reshape((out, input))?)
}
