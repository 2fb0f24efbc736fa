//! The rollout loop shared by every kind of environment.
//!
//! A rollout alternates model turns and environment responses. After every model turn the stop
//! conditions are checked in this order, and the first that holds ends the rollout:
//!
//! 1. the turn was truncated (`finish_reason = length`) → [`StopReason::Length`], or
//!    `TokenBudget` when the budget is spent (the turn was cut at what was left of it);
//! 2. the interaction's own condition ([`Interaction::is_done`]) → `Completed`;
//! 3. the turn limit → `MaxTurns`;
//! 4. the completion-token budget → `TokenBudget` (each turn's `max_tokens` is also capped by what
//!    is left of the budget);
//! 5. the wall-clock limit → `Timeout` (a model call or environment response still running when
//!    the limit passes is abandoned).
//!
//! Otherwise the interaction responds ([`Interaction::respond`]), possibly ending the rollout.
//! A model or environment failure ends the rollout with `StopReason::Error` and the failure
//! recorded; it never aborts the caller.

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use serde_json::Value;
use temper_protocol::openai::TokenPrefix;
use temper_protocol::{
    FinishReason, Message, Role, Rollout, RolloutError, SCHEMA_VERSION, SamplingParams, StopReason,
    Timings, TokenTrace, ToolSpec,
};

use temper_verify::code::CodeSession;

use crate::{ChatModel, ChatRequest, EnvError, Example, Services, TurnTokens};

/// Limits checked after every model turn.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TurnLimits {
    /// Most model turns.
    pub max_turns: u32,
    /// Most completion tokens over all turns.
    pub max_completion_tokens: Option<u64>,
    /// Wall-clock limit of the whole rollout.
    pub timeout: Option<Duration>,
}

impl TurnLimits {
    /// One turn, no budget, no timeout.
    pub fn single_turn() -> Self {
        Self { max_turns: 1, max_completion_tokens: None, timeout: None }
    }

    /// `max_turns` turns, no budget, no timeout.
    pub fn turns(max_turns: u32) -> Self {
        Self { max_turns, ..Self::single_turn() }
    }
}

/// The state of one rollout in progress.
#[derive(Debug, Clone)]
pub struct RolloutState<'a> {
    /// Unique id of this rollout (for external environments).
    pub id: String,
    /// The example being answered.
    pub example: &'a Example,
    /// Messages shown before the first model turn.
    pub prompt: Vec<Message>,
    /// Everything after the prompt so far.
    pub completion: Vec<Message>,
    /// Model turns taken.
    pub turns: u32,
    /// Completion tokens generated so far (as reported by the server).
    pub completion_tokens: u64,
    /// State owned by the interaction.
    pub data: Value,
    /// The sandbox session the rollout holds, when its interaction opened one (in `setup`): the
    /// tools work in it, reward functions run in it after the last turn, and it is closed once
    /// the rollout is scored.
    pub session: Option<Arc<dyn CodeSession>>,
}

impl RolloutState<'_> {
    /// The model's last turn.
    pub fn last_reply(&self) -> Option<&Message> {
        self.completion.iter().rev().find(|m| m.role == Role::Assistant)
    }
}

/// What the environment does after a model turn.
#[derive(Debug, Clone, PartialEq)]
pub enum Step {
    /// Append these messages and let the model take another turn.
    Continue(Vec<Message>),
    /// The rollout is complete.
    Done,
}

/// How an environment talks to the model: the environment's side of the conversation.
#[async_trait]
pub trait Interaction: Send + Sync + fmt::Debug {
    /// Tools offered to the model on every turn.
    fn tools(&self) -> Vec<ToolSpec> {
        Vec::new()
    }

    /// Prepares the rollout before the first model turn (may change the prompt).
    async fn setup(
        &self,
        _state: &mut RolloutState<'_>,
        _services: &Services,
    ) -> Result<(), EnvError> {
        Ok(())
    }

    /// The environment's own completion condition, checked after every model turn.
    fn is_done(&self, state: &RolloutState<'_>) -> bool;

    /// The environment's response to the model's last turn.
    async fn respond(
        &self,
        state: &mut RolloutState<'_>,
        services: &Services,
    ) -> Result<Step, EnvError>;

    /// Releases whatever `setup` acquired; called once when the rollout ends, however it ended.
    async fn cleanup(&self, _state: &RolloutState<'_>) {}
}

/// One-turn question and answer: done after the first model turn.
#[derive(Debug, Clone, Copy, Default)]
pub struct SingleTurn;

#[async_trait]
impl Interaction for SingleTurn {
    fn is_done(&self, _: &RolloutState<'_>) -> bool {
        true
    }

    async fn respond(&self, _: &mut RolloutState<'_>, _: &Services) -> Result<Step, EnvError> {
        Ok(Step::Done)
    }
}

/// Everything one rollout needs besides the model.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RolloutPlan<'a> {
    pub env: &'a str,
    pub interaction: &'a dyn Interaction,
    pub limits: TurnLimits,
    pub example: &'a Example,
    pub prompt: &'a [Message],
    pub sampling: &'a SamplingParams,
    pub services: &'a Services,
    pub rollout_index: u32,
}

/// Runs one rollout to its end. The result is unscored (`reward` 0, empty `scores`); the
/// session it holds, if any, comes back with it for scoring (dropping it ends it).
pub(crate) async fn run_rollout(
    plan: RolloutPlan<'_>,
    model: &dyn ChatModel,
) -> (Rollout, Option<Arc<dyn CodeSession>>) {
    let start = Instant::now();
    let example = plan.example;
    let mut state = RolloutState {
        id: format!("{}-{}-{}", example.example_id, plan.rollout_index, unique_suffix()),
        example,
        prompt: plan.prompt.to_vec(),
        completion: Vec::new(),
        turns: 0,
        completion_tokens: 0,
        data: Value::Null,
        session: None,
    };
    let mut timings = Timings::default();
    let mut trace = TraceBuilder::default();
    let mut policy_version = None;
    let mut error = None;
    let tools = plan.interaction.tools();
    let limits = plan.limits;
    let remaining = |start: Instant| limits.timeout.map(|t| t.saturating_sub(start.elapsed()));
    let env_error = |e: EnvError| RolloutError { source: "env".into(), message: e.to_string() };

    let stop = 'rollout: {
        let t = Instant::now();
        match within(remaining(start), plan.interaction.setup(&mut state, plan.services)).await {
            None => break 'rollout StopReason::Timeout,
            Some(Err(e)) => {
                error = Some(env_error(e));
                break 'rollout StopReason::Error;
            }
            Some(Ok(())) => timings.env_ms += ms_since(t),
        }
        loop {
            let mut sampling = plan.sampling.clone();
            if let Some(budget) = limits.max_completion_tokens {
                let left = budget.saturating_sub(state.completion_tokens);
                let left = u32::try_from(left).unwrap_or(u32::MAX);
                sampling.max_tokens = Some(sampling.max_tokens.map_or(left, |m| m.min(left)));
            }
            let request = ChatRequest {
                messages: state.prompt.iter().chain(&state.completion).cloned().collect(),
                tools: tools.clone(),
                sampling,
                prefix: trace.prefix(),
            };
            let t = Instant::now();
            let reply = within(remaining(start), model.chat(&request)).await;
            timings.generation_ms += ms_since(t);
            let reply = match reply {
                None => break 'rollout StopReason::Timeout,
                Some(Err(e)) => {
                    error = Some(RolloutError { source: "model".into(), message: e.to_string() });
                    break 'rollout StopReason::Error;
                }
                Some(Ok(reply)) => reply,
            };
            state.turns += 1;
            state.completion_tokens += reply.usage.completion_tokens;
            policy_version = policy_version.or(reply.policy_version);
            trace.add_turn(reply.tokens.as_ref());
            let mut message = reply.message;
            message.role = Role::Assistant;
            state.completion.push(message);
            trace.covered = state.prompt.len() + state.completion.len();

            let budget_spent =
                limits.max_completion_tokens.is_some_and(|b| state.completion_tokens >= b);
            if reply.finish_reason == FinishReason::Length {
                // A turn cut at the rest of the budget ran out of budget, not of context.
                break 'rollout if budget_spent {
                    StopReason::TokenBudget
                } else {
                    StopReason::Length
                };
            }
            if plan.interaction.is_done(&state) {
                break 'rollout StopReason::Completed;
            }
            if state.turns >= limits.max_turns {
                break 'rollout StopReason::MaxTurns;
            }
            if budget_spent {
                break 'rollout StopReason::TokenBudget;
            }
            if remaining(start).is_some_and(|d| d.is_zero()) {
                break 'rollout StopReason::Timeout;
            }
            let t = Instant::now();
            let step =
                within(remaining(start), plan.interaction.respond(&mut state, plan.services)).await;
            timings.env_ms += ms_since(t);
            match step {
                None => break 'rollout StopReason::Timeout,
                Some(Err(e)) => {
                    error = Some(env_error(e));
                    break 'rollout StopReason::Error;
                }
                Some(Ok(Step::Done)) => break 'rollout StopReason::Completed,
                Some(Ok(Step::Continue(messages))) => state.completion.extend(messages),
            }
        }
    };
    plan.interaction.cleanup(&state).await;
    timings.total_ms = ms_since(start);

    let mut metrics = std::collections::BTreeMap::new();
    metrics.insert("turns".to_owned(), f64::from(state.turns));
    metrics.insert("completion_tokens".to_owned(), state.completion_tokens as f64);
    let tokens = trace.finish();
    if trace.broken {
        metrics.insert("token_trace_broken".to_owned(), 1.0);
        warn_broken_trace_once(plan.env);
    }
    let rollout = Rollout {
        schema_version: SCHEMA_VERSION,
        env: plan.env.to_owned(),
        task: example.task.clone(),
        example_id: example.example_id,
        rollout_index: plan.rollout_index,
        prompt: state.prompt,
        completion: state.completion,
        answer: example.answer.clone(),
        tokens,
        policy_version,
        reward: 0.0,
        scores: Default::default(),
        metrics,
        stop_reason: stop,
        error,
        timings,
    };
    (rollout, state.session)
}

/// Awaits `fut`, giving up after `limit` (`None` when it passed).
async fn within<T>(limit: Option<Duration>, fut: impl Future<Output = T>) -> Option<T> {
    match limit {
        None => Some(fut.await),
        Some(d) if d.is_zero() => None,
        Some(d) => tokio::time::timeout(d, fut).await.ok(),
    }
}

fn ms_since(t: Instant) -> f64 {
    t.elapsed().as_secs_f64() * 1e3
}

fn unique_suffix() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

/// Says once per process that rollouts lose their token trace, and why that usually happens.
fn warn_broken_trace_once(env: &str) {
    use std::sync::atomic::{AtomicBool, Ordering};
    static WARNED: AtomicBool = AtomicBool::new(false);
    if !WARNED.swap(true, Ordering::Relaxed) {
        tracing::warn!(
            "{env}: a multi-turn rollout's token trace could not be kept (the server re-rendered \
             the conversation and the new prompt does not extend the tokens sampled before, as \
             with templates that rewrite earlier turns); such rollouts are not trained on and are \
             counted as rollouts/dropped_trace. `temper inference serve` continues from the \
             sampled tokens (`token_prefix`) and never drops them. Warned once."
        );
    }
}

/// Assembles the token trace of a multi-turn rollout from each turn's tokens.
///
/// Turn `k`'s prompt must extend the prompt and completion tokens seen so far; the new tokens in
/// between are the environment's (mask 0). Each request after the first offers the tokens so far
/// as a [`TokenPrefix`] so a server that takes token input extends them exactly; one that
/// re-renders the conversation may not. If a turn has no tokens, or re-tokenisation changed an
/// earlier turn, there is no trustworthy trace and the result is `None`.
#[derive(Debug, Default)]
struct TraceBuilder {
    trace: Option<TokenTrace>,
    seen: usize,
    missing: bool,
    broken: bool,
    /// Messages (prompt and completion) the tokens so far cover: up to the last model turn.
    covered: usize,
}

impl TraceBuilder {
    /// The tokens so far and the messages they cover, while the trace is intact.
    fn prefix(&self) -> Option<TokenPrefix> {
        let trace = self.trace.as_ref().filter(|_| !self.missing && !self.broken)?;
        if self.seen == 0 || self.covered == 0 {
            return None;
        }
        let token_ids = trace.prompt_ids.iter().chain(&trace.completion_ids).copied().collect();
        Some(TokenPrefix { token_ids, messages: self.covered })
    }

    fn add_turn(&mut self, tokens: Option<&TurnTokens>) {
        let Some(tokens) = tokens else {
            self.missing = true;
            return;
        };
        if self.missing || self.broken {
            return;
        }
        if tokens.logprobs.len() != tokens.completion_ids.len() {
            self.broken = true;
            return;
        }
        let trace = self.trace.get_or_insert_with(|| TokenTrace {
            prompt_ids: tokens.prompt_ids.clone(),
            ..TokenTrace::default()
        });
        let so_far: Vec<u32> =
            trace.prompt_ids.iter().chain(&trace.completion_ids).copied().collect();
        if self.seen > 0 {
            if !tokens.prompt_ids.starts_with(&so_far) {
                self.broken = true;
                return;
            }
            let env_tokens = &tokens.prompt_ids[so_far.len()..];
            trace.completion_ids.extend_from_slice(env_tokens);
            trace.completion_mask.extend(std::iter::repeat_n(0, env_tokens.len()));
            trace.completion_logprobs.extend(std::iter::repeat_n(0.0, env_tokens.len()));
        }
        trace.completion_ids.extend_from_slice(&tokens.completion_ids);
        trace.completion_mask.extend(std::iter::repeat_n(1, tokens.completion_ids.len()));
        trace.completion_logprobs.extend_from_slice(&tokens.logprobs);
        self.seen += 1;
    }

    fn finish(&self) -> Option<TokenTrace> {
        if self.missing || self.broken { None } else { self.trace.clone() }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn turn(prompt: &[u32], completion: &[u32]) -> TurnTokens {
        TurnTokens {
            prompt_ids: prompt.to_vec(),
            completion_ids: completion.to_vec(),
            logprobs: vec![-0.5; completion.len()],
        }
    }

    #[test]
    fn trace_masks_environment_tokens() {
        let mut b = TraceBuilder::default();
        b.add_turn(Some(&turn(&[1, 2], &[3, 4])));
        b.add_turn(Some(&turn(&[1, 2, 3, 4, 9, 9], &[5])));
        let t = b.finish().expect("trace");
        assert_eq!(t.prompt_ids, [1, 2]);
        assert_eq!(t.completion_ids, [3, 4, 9, 9, 5]);
        assert_eq!(t.completion_mask, [1, 1, 0, 0, 1]);
        assert_eq!(t.completion_logprobs, [-0.5, -0.5, 0.0, 0.0, -0.5]);
        assert_eq!(t.check(), Ok(()));
    }

    #[test]
    fn prefix_offers_the_tokens_so_far_while_the_trace_holds() {
        let mut b = TraceBuilder::default();
        assert_eq!(b.prefix(), None);
        b.add_turn(Some(&turn(&[1, 2], &[3, 4])));
        b.covered = 2;
        assert_eq!(b.prefix(), Some(TokenPrefix { token_ids: vec![1, 2, 3, 4], messages: 2 }));
        b.add_turn(Some(&turn(&[1, 2, 3, 4, 9], &[5])));
        b.covered = 4;
        assert_eq!(
            b.prefix(),
            Some(TokenPrefix { token_ids: vec![1, 2, 3, 4, 9, 5], messages: 4 })
        );
        b.add_turn(Some(&turn(&[1, 2, 3, 3], &[5])));
        assert_eq!(b.prefix(), None, "a broken trace offers nothing");
    }

    #[test]
    fn trace_is_dropped_when_retokenised_or_missing() {
        let mut b = TraceBuilder::default();
        b.add_turn(Some(&turn(&[1, 2], &[3, 4])));
        b.add_turn(Some(&turn(&[1, 2, 7, 4, 9], &[5])));
        assert!(b.finish().is_none());
        assert!(b.broken);
        let mut b = TraceBuilder::default();
        b.add_turn(Some(&turn(&[1], &[3])));
        b.add_turn(None);
        assert!(b.finish().is_none());
    }
}
