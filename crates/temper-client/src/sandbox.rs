//! A client for `temper sandbox serve`, implementing `CodeRunner`, so code rewards can run in a
//! sandbox on another machine (or a shared one on this machine).

use std::time::Duration;

use async_trait::async_trait;
use serde::Serialize;
use temper_protocol::{
    ErrorBody, RunRequest, RunResult, SandboxRunRequest, TestsReply, TestsRequest,
};
use temper_verify::code::{CodeRunner, RunnerError, TestOutcome};

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

    async fn run_tests(&self, request: &TestsRequest) -> Result<Vec<TestOutcome>, RunnerError> {
        let reply: TestsReply = self.post("/v1/run_tests", request).await?;
        Ok(reply
            .results
            .into_iter()
            .map(|r| TestOutcome { passed: r.passed, result: r.result })
            .collect())
    }
}
