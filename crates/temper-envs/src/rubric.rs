//! Rubrics: a weighted sum of reward functions.
//!
//! Each function produces a score per rollout; the rollout's reward is `Σ weight · score` over the
//! functions. A function with weight 0 is a logged metric: it appears in `scores` and does not
//! move the reward. Per-rollout functions run first, in order; group functions then see the whole
//! group together with each rollout's per-rollout reward (for example to reward the shortest
//! correct answer). A function that fails is recorded on the rollout as an error naming it: the
//! rollout keeps the scores that succeeded, its reward counts only those, and its `error` marks it
//! as not to be trained on. A failure is never turned into a silent 0.

use std::fmt;
use std::sync::Arc;
use std::time::Instant;

use async_trait::async_trait;
use temper_protocol::{Message, Rollout, RolloutError, StopReason};
use temper_verify::code::{CodeRunner, CodeSession};

use crate::{ChatModel, Example, Parser};

/// What a reward function sees of one rollout.
#[derive(Debug, Clone, Copy)]
pub struct RewardInput<'a> {
    /// The example the rollout answered.
    pub example: &'a Example,
    /// Messages the model saw first.
    pub prompt: &'a [Message],
    /// Everything after the prompt.
    pub completion: &'a [Message],
    /// The environment's parser.
    pub parser: &'a Parser,
    /// Why the rollout ended.
    pub stop_reason: StopReason,
    /// Tokens the model generated over all turns (0 when the server did not say).
    pub completion_tokens: u64,
    /// The sandbox session the rollout held, still open (hidden tests run in it).
    pub session: Option<&'a dyn CodeSession>,
}

impl RewardInput<'_> {
    /// The parsed answer of the last assistant message.
    pub fn parsed_answer(&self) -> Option<String> {
        self.parser.parse_answer(self.completion)
    }

    /// Length of the completion: tokens when known, otherwise characters of the model's turns.
    pub fn completion_length(&self) -> f64 {
        if self.completion_tokens > 0 {
            return self.completion_tokens as f64;
        }
        self.completion
            .iter()
            .filter(|m| m.role == temper_protocol::Role::Assistant)
            .map(|m| m.content.chars().count())
            .sum::<usize>() as f64
    }
}

/// Outside help that environments and reward functions may need.
#[derive(Debug, Clone, Default)]
pub struct Services {
    /// Runs code (the sandbox); required by `code_tests`, `script` and the `python` tool.
    pub code_runner: Option<Arc<dyn CodeRunner>>,
    /// A model used as a judge by `llm_judge`.
    pub judge: Option<Arc<dyn ChatModel>>,
}

/// Why a reward function could not score a rollout.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{0}")]
pub struct RewardError(pub String);

/// A reward function over one rollout.
#[async_trait]
pub trait RewardFunction: Send + Sync + fmt::Debug {
    /// The score of one rollout.
    async fn score(&self, input: &RewardInput<'_>, services: &Services)
    -> Result<f64, RewardError>;
}

/// A reward function over a whole group of rollouts of the same example. It sees only the
/// rollouts that did not fail before scoring.
#[async_trait]
pub trait GroupRewardFunction: Send + Sync + fmt::Debug {
    /// One score per rollout; `partial[i]` is rollout `i`'s reward from the per-rollout
    /// functions.
    async fn score_group(
        &self,
        inputs: &[RewardInput<'_>],
        partial: &[f64],
        services: &Services,
    ) -> Result<Vec<f64>, RewardError>;
}

/// The function of a rubric entry.
#[derive(Debug, Clone)]
pub enum RewardFn {
    /// Scores each rollout alone.
    Each(Arc<dyn RewardFunction>),
    /// Scores the group together.
    Group(Arc<dyn GroupRewardFunction>),
}

/// One weighted function of a rubric.
#[derive(Debug, Clone)]
pub struct RubricEntry {
    /// Name in `scores` (unique within the rubric).
    pub name: String,
    /// Weight in the reward; 0 logs it as a metric only.
    pub weight: f64,
    /// The function.
    pub func: RewardFn,
}

/// A weighted sum of reward functions.
#[derive(Debug, Clone, Default)]
pub struct Rubric {
    entries: Vec<RubricEntry>,
}

impl Rubric {
    /// An empty rubric (every reward is 0).
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a per-rollout function.
    pub fn with(mut self, name: &str, weight: f64, func: impl RewardFunction + 'static) -> Self {
        self.push(RubricEntry {
            name: name.to_owned(),
            weight,
            func: RewardFn::Each(Arc::new(func)),
        });
        self
    }

    /// Adds a group function.
    pub fn with_group(
        mut self,
        name: &str,
        weight: f64,
        func: impl GroupRewardFunction + 'static,
    ) -> Self {
        self.push(RubricEntry {
            name: name.to_owned(),
            weight,
            func: RewardFn::Group(Arc::new(func)),
        });
        self
    }

    /// Adds an entry; a later entry with the same name gets a `_2`, `_3`, ... suffix.
    pub fn push(&mut self, mut entry: RubricEntry) {
        let base = entry.name.clone();
        let mut n = 1;
        while self.entries.iter().any(|e| e.name == entry.name) {
            n += 1;
            entry.name = format!("{base}_{n}");
        }
        self.entries.push(entry);
    }

    /// The entries, in order.
    pub fn entries(&self) -> &[RubricEntry] {
        &self.entries
    }

    /// Scores a group of rollouts of `example` in place: fills `scores`, `reward`, the scoring
    /// time, and `error` for each failed function. Rollouts that already failed (a model or
    /// environment error) are not scored.
    pub async fn score_group(
        &self,
        example: &Example,
        parser: &Parser,
        rollouts: &mut [Rollout],
        sessions: &[Option<Arc<dyn CodeSession>>],
        services: &Services,
    ) {
        let start = Instant::now();
        let scorable: Vec<bool> = rollouts.iter().map(|r| r.error.is_none()).collect();
        let inputs: Vec<RewardInput<'_>> = rollouts
            .iter()
            .enumerate()
            .map(|(i, r)| RewardInput {
                session: sessions.get(i).and_then(Option::as_deref),
                example,
                prompt: &r.prompt,
                completion: &r.completion,
                parser,
                stop_reason: r.stop_reason,
                completion_tokens: r.metrics.get("completion_tokens").copied().unwrap_or(0.0)
                    as u64,
            })
            .collect();
        let n = inputs.len();
        let mut scores: Vec<Vec<(String, f64)>> = vec![Vec::new(); n];
        let mut errors: Vec<Vec<(String, String)>> = vec![Vec::new(); n];
        let mut partial = vec![0.0; n];

        // Per-rollout functions: every rollout concurrently, functions in order within each.
        let each: Vec<&RubricEntry> =
            self.entries.iter().filter(|e| matches!(e.func, RewardFn::Each(_))).collect();
        let per_rollout =
            futures::future::join_all(inputs.iter().zip(&scorable).map(|(input, ok)| {
                let each = &each;
                async move {
                    let mut out = Vec::new();
                    if *ok {
                        for entry in each {
                            if let RewardFn::Each(f) = &entry.func {
                                out.push((entry, f.score(input, services).await));
                            }
                        }
                    }
                    out
                }
            }))
            .await;
        for (i, results) in per_rollout.into_iter().enumerate() {
            for (entry, result) in results {
                match result {
                    Ok(v) if v.is_finite() => {
                        partial[i] += entry.weight * v;
                        scores[i].push((entry.name.clone(), v));
                    }
                    Ok(v) => errors[i].push((entry.name.clone(), format!("returned {v}"))),
                    Err(e) => errors[i].push((entry.name.clone(), e.0)),
                }
            }
        }

        // Group functions see only the rollouts that can be scored.
        let ok: Vec<usize> = (0..n).filter(|&i| scorable[i]).collect();
        let group_inputs: Vec<RewardInput<'_>> = ok.iter().map(|&i| inputs[i]).collect();
        let group_partial: Vec<f64> = ok.iter().map(|&i| partial[i]).collect();
        for entry in &self.entries {
            let RewardFn::Group(f) = &entry.func else { continue };
            if ok.is_empty() {
                break;
            }
            match f.score_group(&group_inputs, &group_partial, services).await {
                Ok(values) if values.len() == ok.len() => {
                    for (&i, v) in ok.iter().zip(values) {
                        if v.is_finite() {
                            scores[i].push((entry.name.clone(), v));
                        } else {
                            errors[i].push((entry.name.clone(), format!("returned {v}")));
                        }
                    }
                }
                result => {
                    let message = match result {
                        Err(e) => e.0,
                        Ok(values) => {
                            format!("returned {} scores for a group of {}", values.len(), ok.len())
                        }
                    };
                    for &i in &ok {
                        errors[i].push((entry.name.clone(), message.clone()));
                    }
                }
            }
        }
        drop(group_inputs);
        drop(inputs);

        let elapsed = start.elapsed().as_secs_f64() * 1e3;
        for (i, rollout) in rollouts.iter_mut().enumerate() {
            rollout.timings.scoring_ms = elapsed;
            rollout.timings.total_ms += elapsed;
            if !scorable[i] {
                continue;
            }
            rollout.reward = scores[i].iter().map(|(name, v)| self.weight_of(name) * v).sum();
            rollout.scores.extend(scores[i].drain(..));
            if let Some((name, message)) = errors[i].first() {
                let more = errors[i].len() - 1;
                let message = if more > 0 {
                    format!("{message} (and {more} more failed functions)")
                } else {
                    message.clone()
                };
                rollout.error = Some(RolloutError { source: format!("reward:{name}"), message });
            }
        }
    }

    fn weight_of(&self, name: &str) -> f64 {
        self.entries.iter().find(|e| e.name == name).map_or(0.0, |e| e.weight)
    }
}
