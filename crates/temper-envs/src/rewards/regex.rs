//! `regex`: 1 when `pattern` matches the parsed answer (`target = "answer"`, the default) or the
//! last assistant message (`target = "completion"`), else 0. The pattern is compiled once, with
//! the `regex` crate's linear-time guarantee and a 1 MiB program size limit.

use async_trait::async_trait;
use serde::Deserialize;

use super::{RewardSpec, SpecSource, params};
use crate::EnvError;
use crate::parser::last_assistant;
use crate::rubric::{RewardError, RewardFunction, RewardInput, Services};

/// The compiled function.
#[derive(Debug, Clone)]
pub struct RegexMatch {
    regex: regex::Regex,
    whole_completion: bool,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Params {
    pattern: String,
    #[serde(default)]
    target: Option<String>,
}

impl RegexMatch {
    /// Compiles `pattern`; `whole_completion` matches against the last assistant message.
    pub fn new(pattern: &str, whole_completion: bool) -> Result<Self, String> {
        let regex = regex::RegexBuilder::new(pattern)
            .size_limit(1 << 20)
            .build()
            .map_err(|e| e.to_string())?;
        Ok(Self { regex, whole_completion })
    }

    pub(crate) fn from_spec(spec: &RewardSpec, source: SpecSource<'_>) -> Result<Self, EnvError> {
        let p: Params = params(spec, source)?;
        let whole = match p.target.as_deref() {
            None | Some("answer") => false,
            Some("completion") => true,
            Some(other) => {
                return Err(
                    source.error("target", format!("`{other}` is not `answer` or `completion`"))
                );
            }
        };
        Self::new(&p.pattern, whole).map_err(|e| source.error("pattern", e))
    }
}

#[async_trait]
impl RewardFunction for RegexMatch {
    async fn score(&self, input: &RewardInput<'_>, _: &Services) -> Result<f64, RewardError> {
        let text = if self.whole_completion {
            last_assistant(input.completion).map(|m| m.content.clone())
        } else {
            input.parsed_answer()
        };
        Ok(f64::from(u8::from(text.is_some_and(|t| self.regex.is_match(&t)))))
    }
}
