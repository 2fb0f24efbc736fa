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
        data: DataSource::Generated {
            generate: temper_envs::Generator::new(never),
            seed: 0,
            train_size: 0,
            eval_size: 0,
        },
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

#[tokio::test]
async fn llm_judge_reads_yes_and_no_and_fails_on_anything_else() {
    use temper_envs::rewards::LlmJudge;
    for (verdict, want) in
        [("Yes.", Some(1.0)), ("<think>hmm</think> no", Some(0.0)), ("maybe", None)]
    {
        let judge = Arc::new(Scripted::new(move |request, _| {
            let prompt = &request.messages[0].content;
            // The template is filled with the question, the reference and the parsed response.
            assert!(
                prompt.contains("Question:\nq")
                    && prompt.contains("abcd")
                    && prompt.contains("the response")
            );
            assert_eq!(request.sampling.temperature, Some(0.0));
            crate::support::Reply::Text(verdict)
        }));
        let services = Services { code_runner: None, judge: Some(judge.clone()) };
        let rubric = Rubric::new().with("llm_judge", 1.0, LlmJudge::default());
        let r = group(&env(rubric), &Scripted::texts(&["the response"]), &example(), 1, &services)
            .await
            .remove(0);
        assert_eq!(judge.requests.lock().expect("lock").len(), 1);
        match want {
            Some(v) => assert_eq!(
                (r.scores["llm_judge"], r.reward, r.error.is_none()),
                (v, v, true),
                "{verdict}"
            ),
            None => {
                let e = r.error.expect("an unreadable verdict is an error");
                assert!(e.message.contains("neither yes nor no"), "{}", e.message);
            }
        }
    }
    // No judge configured: an error, not a zero.
    let rubric = Rubric::new().with("llm_judge", 1.0, LlmJudge::default());
    let r = group(&env(rubric), &Scripted::texts(&["x"]), &example(), 1, &Services::default())
        .await
        .remove(0);
    assert!(r.error.expect("error").message.contains("no judge model"));
}

#[tokio::test]
async fn regex_and_mcq_rewards() {
    use temper_envs::rewards::{McqLetter, RegexMatch};
    let rubric = Rubric::new()
        .with("digits", 1.0, RegexMatch::new(r"^\d+$", false).expect("regex"))
        .with("polite", 1.0, RegexMatch::new(r"(?i)please", true).expect("regex"));
    for (text, digits, polite) in [("123", 1.0, 0.0), ("12a", 0.0, 0.0), ("Please: 7", 0.0, 1.0)] {
        let r = group(
            &env(rubric.clone()),
            &Scripted::texts(&[text]),
            &example(),
            1,
            &Services::default(),
        )
        .await
        .remove(0);
        assert_eq!((r.scores["digits"], r.scores["polite"]), (digits, polite), "{text}");
    }
    // Gold letter "C" among 4 options from info.options.
    let ex = example_from_json(
        json!({"question": "q", "answer": "c", "info": {"options": ["1", "2", "3", "4"]}}),
        0,
        "t",
    )
    .expect("example");
    let rubric = Rubric::new().with("mcq_letter", 1.0, McqLetter::default());
    for (text, want) in [("Answer: C", 1.0), ("Answer: D", 0.0), ("(E)", 0.0), ("**C**", 1.0)] {
        let r =
            group(&env(rubric.clone()), &Scripted::texts(&[text]), &ex, 1, &Services::default())
                .await
                .remove(0);
        assert_eq!(r.reward, want, "{text}");
    }
}

#[tokio::test]
async fn group_functions_see_only_rollouts_that_did_not_fail() {
    // Rollout 1 fails at the model. Among the other two (lengths 4 and 12) λ is 0.5 and −0.5;
    // were the failed one (length 0) counted, "abcd" would get 0.5 − 4/12 instead.
    // Lengths in characters: the mock reports no token usage.
    let text = |t: &str| {
        let mut r = crate::support::reply(t);
        r.usage.completion_tokens = 0;
        crate::support::Reply::Full(r)
    };
    let model = Scripted::new(move |_, i| match i {
        0 => text("abcd"),
        1 => crate::support::Reply::Fail,
        _ => text("wrong answer"),
    });
    let rubric = Rubric::new().with("exact_match", 1.0, ExactMatch::default()).with_group(
        "length_penalty",
        1.0,
        LengthPenalty::default(),
    );
    let rollouts = group(&env(rubric), &model, &example(), 3, &Services::default()).await;
    let failed: Vec<_> = rollouts.iter().filter(|r| r.error.is_some()).collect();
    assert_eq!(failed.len(), 1);
    assert!(failed[0].scores.is_empty());
    let penalty = |text: &str| {
        rollouts
            .iter()
            .find(|r| r.completion.first().is_some_and(|m| m.content == text))
            .map(|r| r.scores["length_penalty"])
    };
    assert_eq!(penalty("abcd"), Some(0.5));
    assert_eq!(penalty("wrong answer"), Some(-0.5));
}

#[derive(Debug)]
struct FailingRunner;

#[async_trait]
impl temper_verify::code::CodeRunner for FailingRunner {
    fn is_sandboxed(&self) -> bool {
        true
    }

    async fn run(
        &self,
        _: temper_protocol::RunRequest,
    ) -> Result<temper_protocol::RunResult, temper_verify::code::RunnerError> {
        Ok(temper_protocol::RunResult::internal_error("cannot create the cgroup"))
    }
}

#[tokio::test]
async fn a_failing_code_runner_is_an_error_not_a_failed_test() {
    use temper_envs::rewards::CodeTests;
    let ex = example_from_json(
        json!({"question": "q", "info": {"tests": [{"stdin": "", "expected_stdout": "1"}]}}),
        0,
        "t",
    )
    .expect("example");
    let services = Services { code_runner: Some(Arc::new(FailingRunner)), judge: None };
    let rubric = Rubric::new().with("code_tests", 1.0, CodeTests::default());
    let r = group(&env(rubric), &Scripted::texts(&["```python\nprint(1)\n```"]), &ex, 1, &services)
        .await
        .remove(0);
    let e = r.error.expect("an error");
    assert_eq!(e.source, "reward:code_tests");
    assert!(e.message.contains("cannot create the cgroup"), "{}", e.message);
}
