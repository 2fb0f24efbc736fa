//! `script`: custom reward logic in any language the code runner has, run in the sandbox.
//!
//! The script reads one JSON object on stdin — `{"prompt", "completion", "answer", "info",
//! "parsed_answer", "example_id"}` — and prints its score as the last non-empty line of stdout.
//! A script that fails, times out or prints no number makes the reward function fail (recorded as
//! an error on the rollout), never a silent 0.

use std::path::Path;

use async_trait::async_trait;
use serde::Deserialize;
use serde_json::json;
use temper_protocol::{Language, Limits, RunRequest, RunStatus};

use super::{RewardSpec, SpecSource, params};
use crate::EnvError;
use crate::rubric::{RewardError, RewardFunction, RewardInput, Services};

/// A loaded script.
#[derive(Debug, Clone)]
pub struct Script {
    /// Path as written in the config (for messages).
    pub path: String,
    /// Source text.
    pub code: String,
    /// Language to run it as.
    pub language: Language,
    /// Limits of each run.
    pub limits: Limits,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Params {
    path: String,
    #[serde(default)]
    language: Option<String>,
    #[serde(default)]
    time_limit_ms: Option<u64>,
}

/// Largest script accepted.
const MAX_SCRIPT_BYTES: u64 = 1 << 20;

impl Script {
    pub(crate) fn from_spec(spec: &RewardSpec, source: SpecSource<'_>) -> Result<Self, EnvError> {
        let p: Params = params(spec, source)?;
        let full = crate::package::resolve_file(source.dir, &p.path)
            .map_err(|m| source.error("path", m))?;
        let size = std::fs::metadata(&full)
            .map_err(|e| source.error("path", format!("cannot read {}: {e}", full.display())))?
            .len();
        if size > MAX_SCRIPT_BYTES {
            return Err(source.error(
                "path",
                format!("{} is larger than {MAX_SCRIPT_BYTES} bytes", full.display()),
            ));
        }
        let code = std::fs::read_to_string(&full)
            .map_err(|e| source.error("path", format!("cannot read {}: {e}", full.display())))?;
        let rel = Path::new(&p.path);
        let language = match p.language {
            Some(name) => Language::from_name(&name)
                .ok_or_else(|| source.error("language", format!("unknown language `{name}`")))?,
            None => match rel.extension().and_then(|e| e.to_str()) {
                Some("py") => Language::Python,
                Some("sh") => Language::Bash,
                _ => {
                    return Err(source.error(
                        "language",
                        "cannot tell the language from the extension; set `language`",
                    ));
                }
            },
        };
        let limits = Limits {
            time_limit_ms: Some(p.time_limit_ms.unwrap_or(10_000)),
            memory_mb: Some(512),
            output_bytes: Some(65_536),
        };
        Ok(Self { path: p.path, code, language, limits })
    }
}

#[async_trait]
impl RewardFunction for Script {
    async fn score(
        &self,
        input: &RewardInput<'_>,
        services: &Services,
    ) -> Result<f64, RewardError> {
        let runner = services
            .code_runner
            .as_ref()
            .ok_or_else(|| RewardError("no code runner is configured".into()))?;
        let stdin = json!({
            "prompt": input.prompt,
            "completion": input.completion,
            "answer": input.example.answer,
            "info": input.example.info,
            "parsed_answer": input.parsed_answer(),
            "example_id": input.example.example_id,
        });
        let request = RunRequest {
            language: self.language,
            code: self.code.clone(),
            stdin: stdin.to_string(),
            limits: self.limits,
        };
        let result = runner.run(request).await.map_err(|e| RewardError(e.to_string()))?;
        if result.status != RunStatus::Ok {
            let stderr: String = result.stderr.chars().take(300).collect();
            return Err(RewardError(format!(
                "{} ended with {:?}: {stderr}",
                self.path, result.status
            )));
        }
        let last = result.stdout.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or("");
        last.trim().parse::<f64>().ok().filter(|v| v.is_finite()).ok_or_else(|| {
            RewardError(format!("{} printed no score (last line {last:?})", self.path))
        })
    }
}
