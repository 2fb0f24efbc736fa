//! Rubric semantics: weights, metrics, group functions and failures.

use std::sync::Arc;

use async_trait::async_trait;
use serde_json::json;
use temper_envs::dataset::example_from_json;
use temper_envs::rewards::{ExactMatch, LcsRatio, LengthPenalty};
use temper_envs::rollout::SingleTurn;
use temper_envs::rubric::RewardError;
use temper_envs::{
    DataSource, EnvInfo, Environment, Example, Parser, RewardFunction, RewardInput, Rubric,
    Services, TurnLimits,
};

use crate::support::{Scripted, close, group};

#[derive(Debug)]
struct Broken;

#[async_trait]
impl RewardFunction for Broken {
    async fn score(&self, _: &RewardInput<'_>, _: &Services) -> Result<f64, RewardError> {
        Err(RewardError("the checker crashed".into()))
    }
}

#[derive(Debug)]
struct NotANumber;

#[async_trait]
impl RewardFunction for NotANumber {
    async fn score(&self, _: &RewardInput<'_>, _: &Services) -> Result<f64, RewardError> {
        Ok(f64::NAN)
    }
}

fn env(rubric: Rubric) -> Environment {
    fn never(_: &mut rand_chacha::ChaCha8Rng, _: usize) -> Example {
        unreachable!()
    }
    Environment {
        info: EnvInfo::builtin("t", "0.1.0", "test"),
        system_prompt: None,
        parser: Parser::Raw,
        data: DataSource::Generated { generate: never, seed: 0, train_size: 0, eval_size: 0 },
        interaction: Arc::new(SingleTurn),
        rubric,
        limits: TurnLimits::single_turn(),
    }
}

fn example() -> Example {
    example_from_json(json!({"question": "q", "answer": "abcd"}), 0, "t").expect("example")
}

#[tokio::test]
async fn weights_and_zero_weight_metrics() {
    // "abcx" vs "abcd": LCS 3 → 6/8; exact match 0.
    let rubric = Rubric::new().with("lcs_ratio", 2.0, LcsRatio {}).with(
        "exact_match",
        0.0,
        ExactMatch::default(),
    );
    let r = group(&env(rubric), &Scripted::texts(&["abcx"]), &example(), 1, &Services::default())
        .await
        .remove(0);
    assert!(close(r.scores["lcs_ratio"], 0.75));
    assert_eq!(r.scores["exact_match"], 0.0);
    assert!(close(r.reward, 1.5));
    // A weight-0 function never moves the reward.
    let rubric = Rubric::new().with("exact_match", 0.0, ExactMatch::default());
    let r = group(&env(rubric), &Scripted::texts(&["abcd"]), &example(), 1, &Services::default())
        .await
        .remove(0);
    assert_eq!((r.scores["exact_match"], r.reward), (1.0, 0.0));
}

#[tokio::test]
async fn a_failing_function_is_an_error_not_a_zero() {
    let rubric = Rubric::new()
        .with("lcs_ratio", 1.0, LcsRatio {})
        .with("broken", 1.0, Broken)
        .with("nan", 1.0, NotANumber);
    let r = group(&env(rubric), &Scripted::texts(&["abcd"]), &example(), 1, &Services::default())
        .await
        .remove(0);
    let e = r.error.expect("error");
    assert_eq!(e.source, "reward:broken");
    assert_eq!(e.message, "the checker crashed (and 1 more failed functions)");
    assert!(!r.scores.contains_key("broken") && !r.scores.contains_key("nan"));
    assert_eq!(r.reward, 1.0, "only the functions that succeeded count");
}

#[tokio::test]
async fn group_length_penalty_sees_the_whole_group() {
    // Lengths (characters, the mock reports no usage here) 4, 8, 12; min 4, max 12.
    // λ = 0.5, 0, −0.5. Correct (exact match) rollouts keep λ; incorrect ones keep min(0, λ).
    let model = Scripted::new(|_, i| {
        let mut r = crate::support::reply(["abcd", "abcd    ", "wrong answer"][i]);
        r.usage.completion_tokens = 0;
        crate::support::Reply::Full(r)
    });
    // Rollouts run concurrently; a single-permit wrapper would reorder nothing here because the
    // scripted model answers in call order and join_all polls in index order.
    let rubric = Rubric::new().with("exact_match", 1.0, ExactMatch::default()).with_group(
        "length_penalty",
        1.0,
        LengthPenalty::default(),
    );
    let rollouts = group(&env(rubric), &model, &example(), 3, &Services::default()).await;
    let mut by_len: Vec<(usize, f64, f64)> = rollouts
        .iter()
        .map(|r| (r.completion[0].content.len(), r.scores["length_penalty"], r.reward))
        .collect();
    by_len.sort_by_key(|x| x.0);
    assert_eq!(by_len[0], (4, 0.5, 1.5));
    assert_eq!(by_len[1], (8, 0.0, 1.0));
    assert_eq!(by_len[2], (12, -0.5, -0.5));
}
