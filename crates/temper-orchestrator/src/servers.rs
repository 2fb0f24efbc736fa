//! The inference servers: requests balanced over them (each group of rollouts sticks to one
//! server, so a multi-turn conversation keeps its cache and its turns see one weight version
//! sequence), and weight updates sent to all of them.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use temper_client::admin::InferenceAdmin;
use temper_client::{Limited, OpenAiClient, RetryPolicy};
use temper_envs::{ChatModel, ChatRequest, ModelError, ModelReply};

use crate::OrchestratorError;
use crate::config::InferenceConfig;

#[derive(Debug)]
struct Server {
    client: Limited<OpenAiClient>,
    admin: InferenceAdmin,
    /// Groups currently routed here.
    load: AtomicUsize,
}

/// Every inference server of the run.
#[derive(Debug, Clone)]
pub struct Servers {
    servers: Arc<Vec<Server>>,
    next: Arc<AtomicUsize>,
}

impl Servers {
    /// Clients for `cfg.base_urls`, each with at most `per_server` requests in flight.
    pub fn new(cfg: &InferenceConfig, per_server: usize) -> Result<Self, OrchestratorError> {
        let key = cfg.api_key_var.as_deref().and_then(|v| std::env::var(v).ok());
        let retry = RetryPolicy { max_retries: cfg.max_retries, ..RetryPolicy::default() };
        let servers = cfg
            .base_urls
            .iter()
            .map(|url| {
                let client = OpenAiClient::new(url, &cfg.model_name, key.clone())
                    .map_err(|e| OrchestratorError::Config(format!("inference.base_urls: {e}")))?
                    .with_token_ids()
                    .with_retry(retry)
                    .with_timeout(Duration::from_secs_f64(cfg.timeout_s));
                let admin = InferenceAdmin::new(url)
                    .map_err(|e| OrchestratorError::Config(format!("inference.base_urls: {e}")))?;
                Ok(Server {
                    client: Limited::new(client, per_server),
                    admin,
                    load: AtomicUsize::new(0),
                })
            })
            .collect::<Result<Vec<_>, OrchestratorError>>()?;
        Ok(Self { servers: Arc::new(servers), next: Arc::new(AtomicUsize::new(0)) })
    }

    /// How many servers.
    pub fn len(&self) -> usize {
        self.servers.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.servers.is_empty()
    }

    /// The least loaded server (ties taken in turn), held until the lease is dropped.
    pub fn lease(&self) -> Lease {
        let start = self.next.fetch_add(1, Ordering::Relaxed);
        let n = self.servers.len();
        let index = (0..n)
            .map(|k| (start + k) % n)
            .min_by_key(|&i| self.servers[i].load.load(Ordering::Relaxed))
            .unwrap_or(0);
        self.servers[index].load.fetch_add(1, Ordering::Relaxed);
        Lease { servers: self.servers.clone(), index }
    }

    /// Loads `path` as `version` on every server; the first failure is returned.
    pub async fn update_weights(
        &self,
        path: &Path,
        version: u64,
        timeout: Duration,
    ) -> Result<(), OrchestratorError> {
        let calls = self.servers.iter().map(|s| s.admin.update_weights(path, version, timeout));
        for result in futures::future::join_all(calls).await {
            let got = result?;
            if got != version {
                return Err(OrchestratorError::WeightSync(format!(
                    "a server reports version {got} after loading version {version}"
                )));
            }
        }
        Ok(())
    }

    /// Waits until every server answers `/health`, up to `timeout`.
    pub async fn wait_healthy(&self, timeout: Duration) -> Result<(), OrchestratorError> {
        let start = std::time::Instant::now();
        for s in self.servers.iter() {
            loop {
                match s.admin.health(Duration::from_secs(5)).await {
                    Ok(_) => break,
                    Err(e) if start.elapsed() >= timeout => {
                        return Err(OrchestratorError::WeightSync(format!(
                            "inference server not ready after {} s: {e}",
                            timeout.as_secs()
                        )));
                    }
                    Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
                }
            }
        }
        Ok(())
    }
}

/// One server, chosen for one group of rollouts.
#[derive(Debug)]
pub struct Lease {
    servers: Arc<Vec<Server>>,
    index: usize,
}

impl Lease {
    /// Which server (its position in `base_urls`).
    pub fn index(&self) -> usize {
        self.index
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        self.servers[self.index].load.fetch_sub(1, Ordering::Relaxed);
    }
}

#[async_trait]
impl ChatModel for Lease {
    async fn chat(&self, request: &ChatRequest) -> Result<ModelReply, ModelError> {
        self.servers[self.index].client.chat(request).await
    }
}
