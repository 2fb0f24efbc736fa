//! The admin routes of `temper inference serve`: weight updates, pause and health.
//!
//! Weight-sync contract: the trainer writes `weights/step_N/` (safetensors in the Hugging Face
//! layout) and then its `STABLE` marker; the orchestrator (through `temper-client`'s
//! `InferenceAdmin`) posts an [`UpdateWeightsRequest`] naming that folder to every server's
//! `/update_weights`, which loads it from its own filesystem, swaps the weights between engine
//! steps and answers [`UpdateWeightsReply`] once the new weights serve. What must hold: the
//! folder is complete before the request is sent (the marker is written last), and every token
//! generated after the reply comes from the new weights, reported as `version`.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// The body of `POST /update_weights`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UpdateWeightsRequest {
    /// A folder of safetensors (with or without `config.json`), on the server's filesystem.
    pub path: PathBuf,
    /// The version to report from now on (default: the current one plus one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<u64>,
}

/// The reply of `POST /update_weights`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct UpdateWeightsReply {
    /// The version now served.
    pub version: u64,
    /// Seconds it took to load and swap the weights.
    #[serde(default)]
    pub load_s: f64,
}

/// The reply of `POST /pause` and `POST /resume`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct PauseReply {
    /// Whether scheduling is paused now.
    pub paused: bool,
}

/// The reply of `GET /health`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Health {
    /// `"ok"` while the server serves.
    #[serde(default)]
    pub status: String,
    /// The model name.
    #[serde(default)]
    pub model: String,
    /// The weight version served.
    #[serde(default)]
    pub version: u64,
    /// Whether scheduling is paused.
    #[serde(default)]
    pub paused: bool,
}
