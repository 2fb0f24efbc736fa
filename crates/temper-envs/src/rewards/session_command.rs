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
//! Several sources go to several places with a list, each destination emptied first so nothing
//! the model left there survives:
//!
//! ```toml
//! upload = [
//!     { from = "grader", to = ".grader" },
//!     { from = "tasks/{task_id}/hidden", to = ".grader/hidden" },
//! ]
//! ```
//!
//! With `score = "fraction"` the last non-empty line of stdout must be a number in [0, 1]. A
//! command that cannot run, or prints no such number, fails the reward (an error on the rollout,
//! never a silent 0); a rollout without a session fails it too. When the upload itself fails but
//! the session still runs commands (the model filled its disk, or put a read-only file where an
//! upload goes), the work cannot be graded and scores 0.

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
    uploads: Vec<(SessionSeed, Option<String>)>,
    scoring: Scoring,
    limits: Limits,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Params {
    command: String,
    #[serde(default)]
    upload: Option<Upload>,
    #[serde(default)]
    upload_to: Option<String>,
    score: Scoring,
    #[serde(default)]
    timeout_s: Option<f64>,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum Upload {
    One(String),
    Many(Vec<UploadItem>),
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct UploadItem {
    from: String,
    to: String,
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
        let seed = |template: String| SessionSeed { root: source.dir.to_owned(), template };
        let uploads: Vec<(SessionSeed, Option<String>)> = match p.upload {
            None if p.upload_to.is_some() => {
                return Err(source.error("upload_to", "needs `upload`"));
            }
            None => Vec::new(),
            Some(Upload::One(template)) => vec![(seed(template), p.upload_to.clone())],
            Some(Upload::Many(_)) if p.upload_to.is_some() => {
                return Err(source.error("upload_to", "a list of uploads names each `to` itself"));
            }
            Some(Upload::Many(items)) => {
                items.into_iter().map(|i| (seed(i.from), Some(i.to))).collect()
            }
        };
        for to in uploads.iter().filter_map(|(_, to)| to.as_deref()) {
            // The destination is emptied with `rm -rf` first, so it must be a plain relative path.
            let plain = to.chars().all(|c| c.is_ascii_alphanumeric() || "._-/".contains(c));
            if !temper_verify::code::session_path_ok(to)
                || !plain
                || to.trim_matches('/').is_empty()
            {
                return Err(source.error(
                    "upload",
                    format!("`{to}` must be a relative path of letters, digits and ._-/"),
                ));
            }
        }
        Ok(Self {
            command: p.command,
            uploads,
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
        for (seed, to) in &self.uploads {
            let cleared = match to {
                Some(to) => {
                    session.exec(&format!("rm -rf -- '{to}'"), "", self.limits).await.map(|_| ())
                }
                None => Ok(()),
            };
            let uploaded = match cleared {
                Ok(()) => crate::tools::upload(seed, input.example, session, to.as_deref())
                    .await
                    .map_err(|e| e.to_string()),
                Err(e) => Err(e.to_string()),
            };
            if let Err(e) = uploaded {
                // A session that still runs commands was left ungradable by the model.
                let alive = session.exec("true", "", self.limits).await;
                return match alive {
                    Ok(r) if r.status == RunStatus::Ok => {
                        tracing::debug!(
                            "session_command: upload failed in a live session ({e}); scoring 0"
                        );
                        Ok(0.0)
                    }
                    _ => Err(RewardError(format!("session_command: upload failed: {e}"))),
                };
            }
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
