//! Wire types that cross a process boundary in temper, each documented as a contract: who
//! produces it, who consumes it, and what must hold.
//!
//! This crate is the bottom of the dependency graph. It holds plain serde types and the pure
//! helpers that keep them consistent; it must not depend on any other temper crate or know about
//! models, environments or sandboxes beyond the shape of the data they exchange. Its only I/O is
//! the write discipline other processes rely on: whole-file replacement ([`fsio`]) and the
//! one-write appends of `metrics.jsonl` ([`metrics`]).
//! Its one optional dependency, axum (feature `axum`), serves [`error::json_errors`], the
//! middleware that makes every temper HTTP service answer errors in [`ErrorBody`]'s shape.
//!
//! Every top-level record that is written to disk or sent between processes carries
//! [`SCHEMA_VERSION`] so a reader can refuse data it does not understand.

pub mod admin;
pub mod batch;
pub mod chat;
pub mod config;
pub mod error;
pub mod exec;
pub mod exposition;
pub mod fsio;
pub mod metrics;
pub mod openai;
pub mod pack;
pub mod rollout;
pub mod run_dir;
pub mod sampling;

pub use batch::{TrainBatch, TrainSample};
pub use chat::{FunctionCall, Message, Role, ToolCall, ToolSpec};
pub use error::{ErrorBody, ErrorDetail};
pub use exec::{
    Compare, Language, Limits, RunRequest, RunResult, RunStatus, SandboxRunRequest, TestCase,
    TestResult, TestsReply, TestsRequest,
};
pub use metrics::MetricsLine;
pub use rollout::{Rollout, RolloutError, StopReason, Timings, TokenTrace};
pub use sampling::{FinishReason, SamplingParams, Usage};

/// Version of the wire schema of the records in this crate.
///
/// Producers write it; consumers refuse a record whose version is greater than the one they were
/// built with. Bump it when a field changes meaning or a required field is added.
pub const SCHEMA_VERSION: u32 = 1;
