//! `session_command`: runs a command in the rollout's sandbox session after its last turn (hidden
//! tests, a build, a checker), optionally after copying files from the package into it that the
//! model never saw.
//!
//! ```toml
//! [[rubric]]
//! reward = "session_command"
//! upload = "tasks/{task_id}/hidden"  # optional: a folder (or .tar/.tar.gz) copied in first
//! upload_to = ".hidden"              # where in the session (default: the working folder)
//! command = "python3 -m unittest discover -s .hidden 2>&1 | python3 .hidden/score.py"
//! score = "fraction"                 # or "exit_code" (1 on exit 0, else 0)
//! timeout_s = 120
//! ```
//!
//! With `score = "fraction"` the last non-empty line of stdout must be a number in [0, 1]. A
//! command that cannot run, or prints no such number, fails the reward (an error on the rollout,
//! never a silent 0); a rollout without a session fails it too.

use async_trait::async_trait;
use serde::Deserialize;
use temper_protocol::{Limits, RunStatus};

use super::{RewardSpec, SpecSource, params};
use crate::EnvError;
use crate::rubric::{RewardError, RewardFunction, RewardInput, Services};
use crate::tools::SessionSeed;

/// How the command's outcome becomes a reward.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Scoring {
    /// 1 when the command exits 0, else 0.
    ExitCode,
    /// The last non-empty line of stdout, a number in [0, 1].
    Fraction,
}

/// The configured function.
#[derive(Debug, Clone)]
pub struct SessionCommand {
    command: String,
    upload: Option<(SessionSeed, Option<String>)>,
    scoring: Scoring,
    limits: Limits,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Params {
    command: String,
    #[serde(default)]
    upload: Option<String>,
    #[serde(default)]
    upload_to: Option<String>,
    score: Scoring,
    #[serde(default)]
    timeout_s: Option<f64>,
}

impl SessionCommand {
    pub(crate) fn from_spec(spec: &RewardSpec, source: SpecSource<'_>) -> Result<Self, EnvError> {
        let p: Params = params(spec, source)?;
        if p.command.trim().is_empty() {
            return Err(source.error("command", "is empty"));
        }
        let time_ms = match p.timeout_s {
            None => 120_000,
            Some(t) if t.is_finite() && t > 0.0 => (t * 1e3) as u64,
            Some(t) => return Err(source.error("timeout_s", format!("{t} is not positive"))),
        };
        if let Some(to) = &p.upload_to
            && !temper_verify::code::session_path_ok(to)
        {
            return Err(source.error("upload_to", format!("`{to}` must be a relative path")));
        }
        if p.upload_to.is_some() && p.upload.is_none() {
            return Err(source.error("upload_to", "needs `upload`"));
        }
        let upload = p.upload.map(|template| {
            (SessionSeed { root: source.dir.to_owned(), template }, p.upload_to.clone())
        });
        Ok(Self {
            command: p.command,
            upload,
            scoring: p.score,
            limits: Limits {
                time_limit_ms: Some(time_ms),
                memory_mb: Some(2048),
                output_bytes: Some(1 << 20),
            },
        })
    }
}

#[async_trait]
impl RewardFunction for SessionCommand {
    async fn score(&self, input: &RewardInput<'_>, _: &Services) -> Result<f64, RewardError> {
        let session = input.session.ok_or_else(|| {
            RewardError("session_command needs a rollout that holds a sandbox session".into())
        })?;
        if let Some((seed, to)) = &self.upload {
            crate::tools::upload(seed, input.example, session, to.as_deref())
                .await
                .map_err(|e| RewardError(e.to_string()))?;
        }
        let result = session
            .exec(&self.command, "", self.limits)
            .await
            .map_err(|e| RewardError(format!("session_command: {e}")))?;
        match self.scoring {
            Scoring::ExitCode => match result.status {
                RunStatus::Ok => Ok(1.0),
                RunStatus::RuntimeError => Ok(0.0),
                other => Err(RewardError(format!(
                    "session_command ended with {other:?}: {}",
                    result.stderr.chars().take(500).collect::<String>()
                ))),
            },
            Scoring::Fraction => {
                let last = result.stdout.lines().rev().find(|l| !l.trim().is_empty());
                match last.and_then(|l| l.trim().parse::<f64>().ok()) {
                    Some(v) if (0.0..=1.0).contains(&v) => Ok(v),
                    _ => Err(RewardError(format!(
                        "session_command printed no fraction in [0, 1] as its last line ({:?}; stdout ends {:?}, stderr {:?})",
                        result.status,
                        last_chars(&result.stdout, 200),
                        result.stderr.chars().take(300).collect::<String>()
                    ))),
                }
            }
        }
    }
}

/// The last `n` characters of `text`.
fn last_chars(text: &str, n: usize) -> &str {
    text.char_indices().rev().nth(n.saturating_sub(1)).map_or(text, |(at, _)| &text[at..])
}
