//! A client for the admin routes of `temper inference serve`: `/update_weights`, `/health`.
//!
//! The bodies are `temper_protocol::admin`'s, whose docs state the weight-sync contract. A
//! server elsewhere needs the run directory on a shared filesystem, and a vLLM server a route of
//! the same shape (its weight-reload endpoint behind a small proxy); the orchestrator only needs
//! the route to answer 2xx once the weights serve.

use std::path::Path;
use std::time::Duration;

use serde::Serialize;
use serde::de::DeserializeOwned;
use temper_protocol::ErrorBody;
use temper_protocol::admin::{Health, UpdateWeightsReply, UpdateWeightsRequest};

/// Why an admin call failed.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{url}: {message}")]
pub struct AdminError {
    /// The route.
    pub url: String,
    /// What went wrong.
    pub message: String,
}

/// Talks to one inference server's admin routes.
#[derive(Debug, Clone)]
pub struct InferenceAdmin {
    root: String,
    http: reqwest::Client,
}

impl InferenceAdmin {
    /// A client for the server whose OpenAI base URL is `base_url` (`http://host:port/v1`); the
    /// admin routes sit at the root (`http://host:port`).
    pub fn new(base_url: &str) -> Result<Self, AdminError> {
        let trimmed = base_url.trim_end_matches('/');
        let root = trimmed.strip_suffix("/v1").unwrap_or(trimmed).to_owned();
        reqwest::Url::parse(&root)
            .map_err(|e| AdminError { url: root.clone(), message: format!("invalid URL: {e}") })?;
        let http = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(5))
            .build()
            .map_err(|e| AdminError { url: root.clone(), message: e.to_string() })?;
        Ok(Self { root, http })
    }

    /// The server's root URL.
    pub fn root(&self) -> &str {
        &self.root
    }

    /// Loads the weights in `path` and reports them as `version` from now on; returns the version
    /// the server reports. Waits up to `timeout` (loading a large model takes a while).
    pub async fn update_weights(
        &self,
        path: &Path,
        version: u64,
        timeout: Duration,
    ) -> Result<u64, AdminError> {
        let url = format!("{}/update_weights", self.root);
        let body = UpdateWeightsRequest { path: path.to_owned(), version: Some(version) };
        let reply: UpdateWeightsReply = self.post_json(&url, &body, timeout).await?;
        Ok(reply.version)
    }

    /// The weight version the server reports from `/health`.
    pub async fn health(&self, timeout: Duration) -> Result<u64, AdminError> {
        let url = format!("{}/health", self.root);
        let err = |message: String| AdminError { url: url.clone(), message };
        let response =
            self.http.get(&url).timeout(timeout).send().await.map_err(|e| err(e.to_string()))?;
        let status = response.status();
        if !status.is_success() {
            return Err(err(format!("HTTP {}", status.as_u16())));
        }
        let reply: Health = response.json().await.map_err(|e| err(e.to_string()))?;
        Ok(reply.version)
    }

    async fn post_json<T: DeserializeOwned>(
        &self,
        url: &str,
        body: &impl Serialize,
        timeout: Duration,
    ) -> Result<T, AdminError> {
        let err = |message: String| AdminError { url: url.to_owned(), message };
        let response = self
            .http
            .post(url)
            .timeout(timeout)
            .json(body)
            .send()
            .await
            .map_err(|e| err(e.to_string()))?;
        let status = response.status();
        let bytes = response.bytes().await.map_err(|e| err(e.to_string()))?;
        if !status.is_success() {
            let text = ErrorBody::message_of(&bytes)
                .unwrap_or_else(|| String::from_utf8_lossy(&bytes).chars().take(300).collect());
            return Err(err(format!("HTTP {}: {text}", status.as_u16())));
        }
        serde_json::from_slice(&bytes).map_err(|e| err(format!("invalid reply: {e}")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn admin_routes_sit_at_the_root() {
        let a = InferenceAdmin::new("http://127.0.0.1:8000/v1/").expect("admin");
        assert_eq!(a.root(), "http://127.0.0.1:8000");
        let a = InferenceAdmin::new("http://h:1").expect("admin");
        assert_eq!(a.root(), "http://h:1");
        assert!(InferenceAdmin::new("no url").is_err());
    }
}
