//! Opening a model as users name it: a Hugging Face folder or a GGUF file.

use std::path::Path;

use candle_core::{DType, Device};

use crate::{ChatTemplate, ModelError, Tokenizer, Transformer, gguf, weights};

/// A model with what it takes to talk to it.
#[derive(Debug)]
pub struct Pretrained {
    /// The weights.
    pub model: Transformer,
    /// Text ⇄ ids.
    pub tokenizer: Tokenizer,
    /// The chat template, when the model has one.
    pub chat_template: Option<ChatTemplate>,
}

impl Pretrained {
    /// Opens `path`: a `.gguf` file, or a folder in the Hugging Face layout (`config.json`,
    /// safetensors, `tokenizer.json`, and `tokenizer_config.json` for the chat template).
    pub fn load(path: &Path, dtype: DType, device: &Device) -> Result<Self, ModelError> {
        if path.is_file() && path.extension().is_some_and(|e| e == "gguf") {
            let g = gguf::load_gguf(path, dtype, device)?;
            let chat_template = match &g.chat_template {
                Some(src) => Some(ChatTemplate::new(
                    src,
                    &g.bos_token,
                    &g.eos_token,
                    &path.display().to_string(),
                )?),
                None => None,
            };
            let model = Transformer::from_tensors(g.config, g.tensors, dtype, device)?;
            return Ok(Self { model, tokenizer: g.tokenizer, chat_template });
        }
        if !path.is_dir() {
            return Err(ModelError::Weights {
                path: path.display().to_string(),
                message: if path.exists() {
                    "not a .gguf file or a model folder".into()
                } else {
                    "no such file or folder".into()
                },
            });
        }
        let model = weights::load_model(path, dtype, device)?;
        let tokenizer = Tokenizer::from_file(&path.join("tokenizer.json"))?;
        let tc = path.join("tokenizer_config.json");
        let chat_template = if tc.is_file() {
            match ChatTemplate::from_tokenizer_config(&tc) {
                Ok(t) => Some(t),
                Err(ModelError::Config { message, .. }) if message == "no `chat_template`" => {
                    let jinja = path.join("chat_template.jinja");
                    if jinja.is_file() {
                        let src = std::fs::read_to_string(&jinja).map_err(|source| {
                            ModelError::Io { path: jinja.display().to_string(), source }
                        })?;
                        Some(ChatTemplate::new(&src, "", "", &jinja.display().to_string())?)
                    } else {
                        None
                    }
                }
                Err(e) => return Err(e),
            }
        } else {
            None
        };
        if tokenizer.vocab_size() > model.config().vocab_size {
            tracing::warn!(
                "the tokenizer has {} tokens, the model's embedding {} rows",
                tokenizer.vocab_size(),
                model.config().vocab_size
            );
        }
        Ok(Self { model, tokenizer, chat_template })
    }
}
