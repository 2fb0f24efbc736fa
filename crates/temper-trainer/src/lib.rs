//! The temper trainer: SFT and RL losses, AdamW with schedules and clipping, sequence packing,
//! gradient checkpointing, checkpoints that resume bit for bit, and data parallelism through a
//! [`Collective`].
//!
//! - [`loss`]: the policy-gradient losses (masked importance weighting, PPO-clip, GSPO,
//!   CISPO) and the SFT loss.
//! - [`optim`]: AdamW, gradient-norm clipping, learning-rate schedules.
//! - [`grad`]: forward and backward over a packed micro-batch (the written-out backward pass of
//!   `temper_model::train` on f32 CPU weights, else candle's autograd), optionally recomputing
//!   blocks.
//! - [`step`]: one optimizer step over micro-batches and ranks ([`Trainer`]).
//! - [`sft`]: the `temper sft` loop; [`data`] and [`pack`] prepare its batches. It trains on
//!   records it is given ([`sft::Records`]: from `[data]`'s files, or made by the caller from an
//!   environment's examples; the trainer does not load environments).
//! - [`rl`]: the RL trainer role (`temper trainer`), fed batches through the run directory.
//! - [`checkpoint`]: saving and resuming.
//! - [`collective`]: summing across data-parallel ranks (all-reduce, and the reduce-scatter and
//!   all-gather of a sharded optimizer step); `mpi` (feature `mpi`) runs ranks as MPI processes,
//!   [`nccl`] sums tensors on CUDA devices (the library is loaded at run time; the collective is
//!   feature `nccl`).

pub mod checkpoint;
pub mod collective;
pub mod data;
pub mod grad;
pub mod lora;
pub mod loss;
#[cfg(feature = "mpi")]
pub mod mpi;
pub mod nccl;
pub mod optim;
pub mod pack;
pub mod policy;
pub mod rl;
pub mod sft;
pub mod step;

pub use collective::{Collective, InProcess, Single};
pub use policy::{ModelSpec, Policy};
pub use step::{StepReport, Trainer};

/// What can stop training.
#[derive(Debug, thiserror::Error)]
pub enum TrainError {
    /// The configuration is invalid (the message names the field).
    #[error("config: {0}")]
    Config(String),
    /// The data could not be read or tokenized.
    #[error("data: {0}")]
    Data(String),
    /// A file could not be read or written.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file or folder.
        path: std::path::PathBuf,
        /// What the system said.
        source: std::io::Error,
    },
    /// A JSON file of temper's (a checkpoint's state, a batch) does not parse.
    #[error("{}: {source}", path.display())]
    Parse {
        /// The file.
        path: std::path::PathBuf,
        /// Where and why it does not parse.
        source: serde_json::Error,
    },
    /// A tensor file (safetensors) could not be read or written.
    #[error("{}: {source}", path.display())]
    Tensors {
        /// The file.
        path: std::path::PathBuf,
        /// What candle said.
        source: candle_core::Error,
    },
    /// A record could not be written as JSON.
    #[error("cannot write JSON: {0}")]
    Json(#[from] serde_json::Error),
    /// A checkpoint is unusable.
    #[error("checkpoint: {0}")]
    Checkpoint(String),
    /// Evaluation failed.
    #[error("evaluation: {0}")]
    Eval(String),
    /// The model could not be built or run.
    #[error("model: {0}")]
    Model(#[from] temper_model::ModelError),
    /// A pretrained model could not be loaded.
    #[error("model.path: cannot load the model: {source}")]
    Load {
        /// The folder or `.gguf` file.
        path: std::path::PathBuf,
        /// Why.
        source: temper_model::ModelError,
    },
    /// A tensor operation failed.
    #[error(transparent)]
    Tensor(#[from] candle_core::Error),
}

impl TrainError {
    /// The [`TrainError::Io`] of `path`, for `map_err`.
    pub fn io(path: &std::path::Path) -> impl FnOnce(std::io::Error) -> TrainError + '_ {
        move |source| TrainError::Io { path: path.to_owned(), source }
    }
}
