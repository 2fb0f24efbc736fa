//! Stop conditions of the rollout loop, each checked after a model turn.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use serde_json::json;
use temper_envs::dataset::example_from_json;
use temper_envs::rewards::LcsRatio;
use temper_envs::{
    DataSource, EnvError, EnvInfo, Environment, Example, Interaction, Parser, RolloutState, Rubric,
    Services, Step, TurnLimits,
};
use temper_protocol::{FinishReason, Message, StopReason, TokenTrace};

use crate::support::{Reply, Scripted, one, reply};

/// Says "go on" after every turn; done when the model says "done".
#[derive(Debug)]
struct GoOn;

#[async_trait]
impl Interaction for GoOn {
    fn is_done(&self, state: &RolloutState<'_>) -> bool {
        state.last_reply().is_some_and(|m| m.content.contains("done"))
    }

    async fn respond(&self, state: &mut RolloutState<'_>, _: &Services) -> Result<Step, EnvError> {
        if state.last_reply().is_some_and(|m| m.content.contains("explode")) {
            return Err(EnvError::Interaction("the game broke".into()));
        }
        Ok(Step::Continue(vec![Message::user("go on")]))
    }
}

fn env(limits: TurnLimits) -> Environment {
    fn never(_: &mut rand_chacha::ChaCha8Rng, _: usize) -> Example {
        unreachable!("examples are built by the tests")
    }
    Environment {
        info: EnvInfo::builtin("go-on", "0.1.0", "test"),
        system_prompt: None,
        parser: Parser::Raw,
        data: DataSource::Generated {
            generate: temper_envs::Generator::new(never),
            seed: 0,
            train_size: 0,
            eval_size: 0,
        },
        interaction: Arc::new(GoOn),
        rubric: Rubric::new().with("lcs_ratio", 1.0, LcsRatio {}),
        limits,
    }
}

fn example() -> Example {
    example_from_json(json!({"question": "start", "answer": "done"}), 0, "t").expect("example")
}

#[tokio::test]
async fn custom_condition_ends_the_rollout() {
    let r =
        one(&env(TurnLimits::turns(10)), &Scripted::texts(&["a", "b", "done"]), &example()).await;
    assert_eq!((r.stop_reason, r.metrics["turns"]), (StopReason::Completed, 3.0));
    assert_eq!(r.completion.len(), 5, "three model turns, two environment turns");
    assert_eq!(r.reward, 1.0);
}

#[tokio::test]
async fn max_turns() {
    let r = one(&env(TurnLimits::turns(3)), &Scripted::texts(&["a"]), &example()).await;
    assert_eq!((r.stop_reason, r.metrics["turns"]), (StopReason::MaxTurns, 3.0));
    assert_eq!(
        r.completion.last().map(|m| m.content.as_str()),
        Some("a"),
        "no environment turn after the last"
    );
}

/// A model that writes 5 tokens per turn, or fewer when `max_tokens` says so (then the turn is
/// cut: `finish_reason = length`), as a real server does.
fn five_token_model() -> Scripted {
    Scripted::new(|request, _| {
        let cap = request.sampling.max_tokens.unwrap_or(u32::MAX);
        let mut r = reply("a");
        r.usage.completion_tokens = u64::from(cap.min(5));
        if cap < 5 {
            r.finish_reason = FinishReason::Length;
        }
        Reply::Full(r)
    })
}

#[tokio::test]
async fn token_budget_caps_max_tokens_and_stops() {
    // Budget 12: turns of 5 and 5, then the third is capped at 2 and cut there.
    let limits = TurnLimits { max_turns: 10, max_completion_tokens: Some(12), timeout: None };
    let model = five_token_model();
    let r = one(&env(limits), &model, &example()).await;
    assert_eq!((r.stop_reason, r.metrics["turns"]), (StopReason::TokenBudget, 3.0));
    assert_eq!(r.metrics["completion_tokens"], 12.0);
    let caps: Vec<Option<u32>> =
        model.requests.lock().expect("lock").iter().map(|q| q.sampling.max_tokens).collect();
    assert_eq!(caps, [Some(12), Some(7), Some(2)]);
    // A budget spent exactly at a turn's natural end also stops the rollout.
    let limits = TurnLimits { max_turns: 10, max_completion_tokens: Some(10), timeout: None };
    let r = one(&env(limits), &five_token_model(), &example()).await;
    assert_eq!((r.stop_reason, r.metrics["turns"]), (StopReason::TokenBudget, 2.0));
}

#[tokio::test]
async fn wall_clock_timeout_abandons_a_slow_model() {
    let limits = TurnLimits {
        max_turns: 10,
        max_completion_tokens: None,
        timeout: Some(Duration::from_millis(300)),
    };
    let model = Scripted::new(|_, i| {
        if i == 0 { Reply::Text("a") } else { Reply::Slow(Duration::from_secs(30), "late") }
    });
    let start = std::time::Instant::now();
    let r = one(&env(limits), &model, &example()).await;
    assert!(start.elapsed() < Duration::from_secs(5));
    assert_eq!((r.stop_reason, r.metrics["turns"]), (StopReason::Timeout, 1.0));
    assert!(r.error.is_none());
}

#[tokio::test]
async fn truncated_turn_stops_with_length() {
    let model = Scripted::new(|_, _| {
        let mut r = reply("cut sho");
        r.finish_reason = FinishReason::Length;
        Reply::Full(r)
    });
    let r = one(&env(TurnLimits::turns(10)), &model, &example()).await;
    assert_eq!((r.stop_reason, r.metrics["turns"]), (StopReason::Length, 1.0));
}

#[tokio::test]
async fn model_and_environment_failures_are_recorded() {
    let r = one(&env(TurnLimits::turns(10)), &Scripted::new(|_, _| Reply::Fail), &example()).await;
    assert_eq!(r.stop_reason, StopReason::Error);
    let e = r.error.expect("error");
    assert_eq!(e.source, "model");
    assert!(e.message.contains("HTTP 400"));
    assert!(r.scores.is_empty(), "a failed rollout is not scored");

    let r = one(&env(TurnLimits::turns(10)), &Scripted::texts(&["explode"]), &example()).await;
    assert_eq!(r.stop_reason, StopReason::Error);
    assert_eq!(r.error.expect("error").message, "environment error: the game broke");
}

#[tokio::test]
async fn token_trace_spans_turns() {
    // Turn k's prompt ids extend everything before; the environment's tokens get mask 0.
    let model = Scripted::new(|_, i| {
        let mut r = reply(if i == 1 { "done" } else { "a" });
        r.tokens = Some(if i == 0 {
            temper_envs::TurnTokens {
                prompt_ids: vec![1, 2],
                completion_ids: vec![3],
                logprobs: vec![-0.1],
            }
        } else {
            temper_envs::TurnTokens {
                prompt_ids: vec![1, 2, 3, 8, 9],
                completion_ids: vec![4, 5],
                logprobs: vec![-0.2, -0.3],
            }
        });
        r.policy_version = Some(7);
        Reply::Full(r)
    });
    let r = one(&env(TurnLimits::turns(10)), &model, &example()).await;
    let t: TokenTrace = r.tokens.expect("trace");
    assert_eq!(t.completion_ids, [3, 8, 9, 4, 5]);
    assert_eq!(t.completion_mask, [1, 0, 0, 1, 1]);
    assert_eq!(t.completion_logprobs, [-0.1, 0.0, 0.0, -0.2, -0.3]);
    assert_eq!(r.policy_version, Some(7));
    // The second turn was offered the first turn's tokens, covering the prompt and its reply.
    let requests = model.requests.lock().expect("lock");
    assert_eq!(requests[0].prefix, None);
    let prefix = requests[1].prefix.clone().expect("prefix on turn 2");
    assert_eq!(prefix.token_ids, [1, 2, 3]);
    assert_eq!(prefix.messages, r.prompt.len() + 1);
    assert_eq!(requests[1].messages[prefix.messages - 1].role, temper_protocol::Role::Assistant);
}

#[tokio::test]
async fn a_trace_the_server_rewrote_is_dropped_and_marked() {
    // Turn 2's prompt does not extend turn 1's tokens (the server re-rendered and re-tokenized):
    // the rollout keeps no trace, says why, and stops offering a prefix.
    let model = Scripted::new(|_, i| {
        let mut r = reply(if i == 2 { "done" } else { "a" });
        let (prompt_ids, completion_ids) = match i {
            0 => (vec![1, 2], vec![3]),
            1 => (vec![1, 2, 30, 8], vec![4]),
            _ => (vec![1, 2, 30, 8, 4, 9], vec![5]),
        };
        let logprobs = vec![-0.1; completion_ids.len()];
        r.tokens = Some(temper_envs::TurnTokens { prompt_ids, completion_ids, logprobs });
        Reply::Full(r)
    });
    let r = one(&env(TurnLimits::turns(10)), &model, &example()).await;
    assert_eq!(r.metrics["turns"], 3.0);
    assert_eq!(r.tokens, None);
    assert_eq!(r.metrics.get("token_trace_broken"), Some(&1.0));
    let requests = model.requests.lock().expect("lock");
    assert!(requests[1].prefix.is_some());
    assert_eq!(requests[2].prefix, None, "no prefix once the trace is broken");
}
