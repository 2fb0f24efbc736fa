//! The asynchronous RL orchestrator (`temper orchestrator`): samples tasks from environments,
//! drives rollouts against the inference servers, scores them, computes group advantages, drops
//! stale and signal-free groups, packs the rest into the trainer's batches (shipped through the
//! run directory) and keeps the servers on the trainer's newest weights.
//!
//! - [`config`]: `[orchestrator]`, `[inference]`, `[[env]]`, `[output]`.
//! - [`advantage`]: shaped rewards, `grpo` and `rloo` advantages.
//! - [`batch`]: rollouts → `TrainSample`s → per-rank `TrainBatch`es.
//! - [`tasks`]: weighted environment draws and per-epoch shuffles, resumable.
//! - [`servers`]: the inference servers: least-loaded routing with one server per group,
//!   weight updates to all.
//! - [`run`]: the loop (gate, sweep, collect, ship) and the weight watcher with evaluation;
//!   the collect phase's decisions are a pure state machine (`collect::Collector`) with table
//!   tests.
//! - [`metrics`]: the Prometheus gauges of the `metrics.jsonl` records it writes.
//!
//! It knows environments and HTTP, never tensors: token ids and logprobs come from the servers
//! and go to the trainer untouched.

pub mod advantage;
pub mod batch;
mod collect;
pub mod config;
pub mod metrics;
pub mod run;
pub mod servers;
pub mod tasks;

pub use config::OrchestratorConfig;
pub use run::{NoHooks, OrchestratorHooks, Start, Summary, run, run_with_envs};

/// Why the orchestrator stopped.
#[derive(Debug, thiserror::Error)]
pub enum OrchestratorError {
    /// A setting is invalid; the message names it.
    #[error("config: {0}")]
    Config(String),
    /// A file of the run directory could not be read or written.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file or folder.
        path: std::path::PathBuf,
        /// What the system said.
        source: std::io::Error,
    },
    /// A file of the run directory does not hold what it should.
    #[error("{}: {message}", path.display())]
    BadFile {
        /// The file.
        path: std::path::PathBuf,
        /// What is wrong (a parse error, another schema or step).
        message: String,
    },
    /// A record could not be written as JSON.
    #[error("cannot write JSON: {0}")]
    Json(#[from] serde_json::Error),
    /// An inference server's admin route failed.
    #[error("weight sync: {0}")]
    Admin(#[from] temper_client::admin::AdminError),
    /// The inference servers did not load new weights as asked.
    #[error("weight sync: {0}")]
    WeightSync(String),
    /// Rollouts cannot go on.
    #[error("rollouts: {0}")]
    Rollouts(String),
}
