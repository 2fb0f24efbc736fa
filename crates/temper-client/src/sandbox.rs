//! A client for `temper sandbox serve`, implementing `CodeRunner`, so code rewards can run in a
//! sandbox on another machine (or a shared one on this machine).

use std::time::Duration;

use async_trait::async_trait;
use serde::Serialize;
use temper_protocol::{
    ErrorBody, Limits, RunRequest, RunResult, SandboxRunRequest, TestsReply, TestsRequest,
};
use temper_verify::code::{CodeRunner, CodeSession, RunnerError, TestOutcome, check_session_path};

/// Talks to a sandbox server at a base URL such as `http://127.0.0.1:8090`.
#[derive(Debug, Clone)]
pub struct SandboxClient {
    base: String,
    http: reqwest::Client,
    retries: u32,
}

impl SandboxClient {
    /// A client for the server at `base`; busy answers (429) are retried up to 20 times.
    pub fn new(base: &str) -> Result<Self, RunnerError> {
        let base = base.trim_end_matches('/').to_owned();
        reqwest::Url::parse(&base)
            .map_err(|e| RunnerError::Backend(format!("{base}: invalid URL: {e}")))?;
        let http = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(5))
            .build()
            .map_err(|e| RunnerError::Backend(e.to_string()))?;
        Ok(Self { base, http, retries: 20 })
    }

    async fn post<T: serde::de::DeserializeOwned>(
        &self,
        path: &str,
        body: &impl Serialize,
    ) -> Result<T, RunnerError> {
        let url = format!("{}{path}", self.base);
        let mut attempt = 0;
        loop {
            let response = self
                .http
                .post(&url)
                .json(body)
                .send()
                .await
                .map_err(|e| RunnerError::Backend(format!("{url}: {e}")))?;
            let status = response.status();
            if status.as_u16() == 429 && attempt < self.retries {
                let wait = response
                    .headers()
                    .get(reqwest::header::RETRY_AFTER)
                    .and_then(|v| v.to_str().ok()?.parse::<f64>().ok())
                    .unwrap_or(1.0)
                    .clamp(0.05, 10.0);
                tokio::time::sleep(Duration::from_secs_f64(wait)).await;
                attempt += 1;
                continue;
            }
            let bytes =
                response.bytes().await.map_err(|e| RunnerError::Backend(format!("{url}: {e}")))?;
            if !status.is_success() {
                let text = ErrorBody::message_of(&bytes)
                    .unwrap_or_else(|| String::from_utf8_lossy(&bytes).into_owned());
                return Err(RunnerError::Backend(format!("{url}: HTTP {status}: {text}")));
            }
            return serde_json::from_slice(&bytes)
                .map_err(|e| RunnerError::Backend(format!("{url}: invalid reply: {e}")));
        }
    }
}

#[async_trait]
impl CodeRunner for SandboxClient {
    fn is_sandboxed(&self) -> bool {
        true
    }

    async fn run(&self, request: RunRequest) -> Result<RunResult, RunnerError> {
        self.post("/v1/run", &SandboxRunRequest::from(request)).await
    }

    async fn open_session(&self) -> Result<Box<dyn CodeSession>, RunnerError> {
        let opened: serde_json::Value = self.post("/v1/sandboxes", &serde_json::json!({})).await?;
        let id = opened["id"].as_str().ok_or_else(|| {
            RunnerError::Backend(format!("{}: the session reply has no id", self.base))
        })?;
        Ok(Box::new(RemoteSession {
            client: self.clone(),
            path: format!("/v1/sandboxes/{id}"),
            url: format!("{}/v1/sandboxes/{id}", self.base),
            closed: std::sync::atomic::AtomicBool::new(false),
        }))
    }

    async fn run_tests(&self, request: &TestsRequest) -> Result<Vec<TestOutcome>, RunnerError> {
        let reply: TestsReply = self.post("/v1/run_tests", request).await?;
        Ok(reply
            .results
            .into_iter()
            .map(|r| TestOutcome { passed: r.passed, result: r.result })
            .collect())
    }
}

/// A session on a sandbox server: `/v1/sandboxes/{id}`. Dropped without `close`, it is deleted
/// in the background (and the server ends idle sessions anyway).
#[derive(Debug)]
struct RemoteSession {
    client: SandboxClient,
    /// `/v1/sandboxes/{id}`, and the same under the server's base URL.
    path: String,
    url: String,
    closed: std::sync::atomic::AtomicBool,
}

impl RemoteSession {
    fn file_url(&self, path: &str) -> Result<String, RunnerError> {
        check_session_path(path)?;
        let mut url = reqwest::Url::parse(&self.url)
            .map_err(|e| RunnerError::Backend(format!("{}: {e}", self.url)))?;
        url.path_segments_mut()
            .map_err(|()| RunnerError::Backend(format!("{}: not a base URL", self.url)))?
            .push("files")
            .extend(path.split('/'));
        Ok(url.to_string())
    }

    async fn send(&self, request: reqwest::RequestBuilder) -> Result<Vec<u8>, RunnerError> {
        let response =
            request.send().await.map_err(|e| RunnerError::Backend(format!("{}: {e}", self.url)))?;
        let status = response.status();
        let bytes = response
            .bytes()
            .await
            .map_err(|e| RunnerError::Backend(format!("{}: {e}", self.url)))?;
        if !status.is_success() {
            let text = ErrorBody::message_of(&bytes)
                .unwrap_or_else(|| String::from_utf8_lossy(&bytes).into_owned());
            return Err(RunnerError::Backend(format!("{}: HTTP {status}: {text}", self.url)));
        }
        Ok(bytes.to_vec())
    }
}

#[async_trait]
impl CodeSession for RemoteSession {
    async fn exec(
        &self,
        command: &str,
        stdin: &str,
        limits: Limits,
    ) -> Result<RunResult, RunnerError> {
        let body = serde_json::json!({
            "command": command, "stdin": stdin, "timeout_ms": limits.time_limit_ms,
            "memory_mb": limits.memory_mb, "output_bytes": limits.output_bytes,
        });
        let path = format!("{}/exec", self.path);
        self.client.post(&path, &body).await
    }

    async fn write_file(&self, path: &str, bytes: &[u8]) -> Result<(), RunnerError> {
        let url = self.file_url(path)?;
        self.send(self.client.http.put(url).body(bytes.to_vec())).await.map(|_| ())
    }

    async fn read_file(&self, path: &str, max: u64) -> Result<Vec<u8>, RunnerError> {
        let url = self.file_url(path)?;
        let bytes = self.send(self.client.http.get(url)).await?;
        if bytes.len() as u64 > max {
            return Err(RunnerError::Backend(format!("{path}: {} bytes, over {max}", bytes.len())));
        }
        Ok(bytes)
    }

    async fn close(&self) {
        if !self.closed.swap(true, std::sync::atomic::Ordering::SeqCst) {
            let _ = self.send(self.client.http.delete(&self.url)).await;
        }
    }
}

impl Drop for RemoteSession {
    fn drop(&mut self) {
        if self.closed.swap(true, std::sync::atomic::Ordering::SeqCst) {
            return;
        }
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            let (http, url) = (self.client.http.clone(), self.url.clone());
            runtime.spawn(async move {
                let _ = http.delete(url).send().await;
            });
        }
    }
}
