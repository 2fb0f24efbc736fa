//! Environments: what temper trains and evaluates on.
//!
//! An [`Environment`] bundles a dataset of [`Example`]s, a way to talk to the model (an
//! [`Interaction`]: single-turn, multi-turn with environment responses, tool use, or an external
//! process), a [`Parser`] that finds the answer in a completion, and a [`Rubric`] that turns a
//! rollout into a reward. [`Environment::run_group`] drives `G` rollouts of one example against a
//! [`ChatModel`] and scores them together.
//!
//! Environments are built in (one file each under `envs/`, registered in [`registry`]) or loaded
//! from a folder holding an `environment.toml` ([`package`]).
//!
//! What this crate knows nothing about: HTTP and model servers (it sees a model only through the
//! [`ChatModel`] trait; `temper-client` implements it), tokenizers, training, and sandboxes. It
//! never runs model-written code itself: code goes through the `CodeRunner` in [`Services`]. The
//! one process it starts is an external environment's own server, named by the environment's
//! author in `environment.toml` ([`external`]).

pub mod corpus;
pub mod dataset;
mod environment;
pub mod envs;
mod error;
pub mod eval;
pub mod external;
pub mod layout;
pub mod model;
pub mod package;
pub mod parser;
pub mod registry;
pub mod report;
pub mod rewards;
pub mod rollout;
pub mod rubric;
pub mod stats;
pub mod suite;
pub mod tools;

pub use dataset::{DataSource, Example, Generator, Split};
pub use environment::{EnvInfo, Environment};
pub use error::EnvError;
pub use model::{ChatModel, ChatRequest, ModelError, ModelReply, TurnTokens};
pub use parser::Parser;
pub use registry::{LoadOptions, builtin_names, load};
pub use rollout::{Interaction, RolloutState, Step, TurnLimits};
pub use rubric::{GroupRewardFunction, RewardFunction, RewardInput, Rubric, Services};
