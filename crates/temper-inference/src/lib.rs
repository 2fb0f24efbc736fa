//! The temper inference engine and its server.
//!
//! [`Engine`] owns a [`temper_model::Transformer`] on one thread and runs it in steps over a
//! changing batch of sequences (continuous batching); [`sampling`] draws tokens and reports their
//! logprobs; [`server`] is the OpenAI-compatible HTTP API with the token-in `/v1/generate` route
//! and the admin routes RL needs (`/update_weights`, `/pause`, `/resume`, `/health`, `/metrics`).
//! [`LocalServer`] serves a copy of weights in training on a loopback port (how `temper sft`
//! evaluates through the same API as `temper eval`). It knows token ids, not environments.

pub mod engine;
pub mod local;
mod prefix;
pub mod sampling;
pub mod server;
pub mod toolcall;

pub use engine::{Engine, EngineConfig, Event, Finish, Request, SampleOn, SubmitError};
pub use local::LocalServer;
pub use sampling::SamplingOptions;
pub use server::{ACCESS_LOG, ServerState, router};
