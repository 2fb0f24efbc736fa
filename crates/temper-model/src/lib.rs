//! Transformer models for temper, on `candle-core`: the same code computes the logprobs the
//! inference engine samples with and the ones the trainer differentiates.
//!
//! `temper-model` owns the differentiable operations ([`ops`]), the model definitions
//! ([`Transformer`] for Llama and Qwen3 dense), model configuration read from a Hugging Face
//! `config.json` ([`ModelConfig`]), weight I/O in the Hugging Face layout ([`weights`]), and the
//! per-sequence key/value cache ([`KvCache`]), GGUF files ([`gguf`]), tokenizers ([`Tokenizer`])
//! and chat templates ([`ChatTemplate`]); [`Pretrained::load`] opens a model as users name it. It knows nothing about sampling, HTTP, training
//! loops, environments or rollouts, and depends on no other temper crate.
//!
//! One forward pass serves inference and autograd training: [`Transformer::step`] takes a ragged
//! batch of token chunks, each continuing its own sequence (a whole prompt, or one new token of a
//! decode), so a prefill, a decode step of many sequences and a training forward under autograd
//! run the same operations. For f32 weights on the CPU, [`train`] is a second, faster training
//! pass with its backward written out; its logits equal that forward's up to float rounding and
//! its gradients autograd's (both tested), so the trainer's logprobs match the engine's.

pub mod chat;
pub mod config;
pub mod device;
pub mod gguf;
pub mod kernels;
pub mod ops;
pub mod prepacked;
pub mod tokenizer;
pub mod train;
pub mod weights;

pub mod cache;
pub mod init;
mod pretrained;
mod transformer;

pub use cache::KvCache;
pub use chat::ChatTemplate;
pub use config::{Architecture, Gating, ModelConfig, MoeConfig};
pub use pretrained::Pretrained;
pub use tokenizer::{StreamDecoder, Tokenizer};
pub use train::TrainTape;
pub use transformer::{Logits, Packed, Transformer, param_shapes};

/// What can go wrong building or running a model.
#[derive(Debug, thiserror::Error)]
pub enum ModelError {
    /// A configuration file is malformed or asks for something unsupported.
    #[error("{file}: {message}")]
    Config {
        /// The file (or source) read.
        file: String,
        /// What is wrong, naming the field.
        message: String,
    },
    /// A weight the architecture needs is absent.
    #[error("weight `{name}` is missing")]
    MissingTensor {
        /// Hugging Face name of the tensor.
        name: String,
    },
    /// A weight has the wrong shape.
    #[error("weight `{name}` has shape {got:?}, the configuration needs {expected:?}")]
    Shape {
        /// Hugging Face name of the tensor.
        name: String,
        /// What the configuration implies.
        expected: Vec<usize>,
        /// What the file holds.
        got: Vec<usize>,
    },
    /// A file could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// The cause.
        source: std::io::Error,
    },
    /// A weight file is malformed.
    #[error("{path}: {message}")]
    Weights {
        /// The file.
        path: String,
        /// What is wrong.
        message: String,
    },
    /// A device cannot be named or opened (the message names it and what to do).
    #[error("{0}")]
    Device(String),
    /// A tensor operation failed (a bug, or an input out of range such as a token id).
    #[error(transparent)]
    Tensor(#[from] candle_core::Error),
}
