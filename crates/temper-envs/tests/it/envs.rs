//! Reward tests of the built-in environments, with hand-computed values.

use std::sync::Arc;

use serde_json::json;
use temper_envs::dataset::example_from_json;
use temper_envs::envs::{alphabet_sort, calculator, code, math, mcq, reverse_text, wordle};
use temper_envs::{Example, LoadOptions, Services, Split};
use temper_protocol::{Role, StopReason};

use crate::support::{Reply, Scripted, close, group, one};

fn example(question: &str, answer: &str) -> Example {
    example_from_json(json!({"question": question, "answer": answer}), 0, "t").expect("example")
}

#[tokio::test]
async fn reverse_text_rewards_lcs_ratio() {
    let env = reverse_text::environment(&LoadOptions::default());
    let ex = example("abcdef", "fedcba");
    // (completion, reward, format): LCS("fedcab", "fedcba") = 5, so 2·5/12.
    let cases: [(&'static str, f64, f64); 4] = [
        ("<reversed_text>fedcba</reversed_text>", 1.0, 1.0),
        ("<reversed_text>fedcab</reversed_text>", 10.0 / 12.0, 1.0),
        ("<think>hmm</think><reversed_text> fedcba </reversed_text>", 1.0, 1.0),
        ("fedcba", 0.0, 0.0),
    ];
    for (text, reward, format) in cases {
        let r = one(&env, &Scripted::texts(&[text]), &ex).await;
        assert!(close(r.reward, reward), "{text}: {}", r.reward);
        assert!(close(r.scores["lcs_ratio"], reward), "{text}");
        assert!(close(r.scores["format"], format), "{text}");
        assert_eq!(r.stop_reason, StopReason::Completed);
        assert!(r.error.is_none());
    }
    // The prompt is the system prompt, then exactly the text.
    let r = one(&env, &Scripted::texts(&["x"]), &ex).await;
    assert_eq!(r.prompt[0].content, reverse_text::SYSTEM_PROMPT);
    assert_eq!(r.prompt[1].content, "abcdef");
    // Generated examples: 3 to 12 letters, answer is the reverse.
    for e in env.examples(Split::Eval).expect("examples").iter().take(50) {
        let text = &e.prompt[0].content;
        assert!((3..=12).contains(&text.len()) && text.bytes().all(|b| b.is_ascii_lowercase()));
        assert_eq!(e.answer, text.chars().rev().collect::<String>());
    }
}

#[tokio::test]
async fn alphabet_sort_scores_each_turn() {
    let env = alphabet_sort::environment(&LoadOptions::default());
    let ex = alphabet_sort::example_with_batches(&[&["Zane", "Ada", "Mira"], &["Bruno", "Lars"]]);
    let tag = |s: &str| format!("<alphabetical_sorted>\n{s}\n</alphabetical_sorted>");
    // Perfect on both turns.
    let model = Scripted::new(move |_, i| {
        Reply::Owned(if i == 0 {
            tag("Ada\nMira\nZane")
        } else {
            tag("Ada\nBruno\nLars\nMira\nZane")
        })
    });
    let r = one(&env, &model, &ex).await;
    assert!(close(r.reward, 1.0), "{}", r.reward);
    assert_eq!((r.stop_reason, r.metrics["turns"]), (StopReason::Completed, 2.0));
    // The second user turn names the new batch.
    let second_user = &r.completion[1];
    assert_eq!(second_user.role, Role::User);
    assert!(second_user.content.contains("Bruno\nLars"));
    // Turn 2 misses "Lars": LCS = 19 of 24 characters, so (1 + 38/43) / 2.
    let model = Scripted::new(move |_, i| {
        Reply::Owned(if i == 0 { tag("Ada\nMira\nZane") } else { tag("Ada\nBruno\nMira\nZane") })
    });
    let r = one(&env, &model, &ex).await;
    assert!(close(r.reward, (1.0 + 38.0 / 43.0) / 2.0), "{}", r.reward);
    // No tags on turn 2 scores that turn 0.
    let model = Scripted::new(move |_, i| {
        Reply::Owned(if i == 0 { tag("Ada\nMira\nZane") } else { "no".into() })
    });
    assert!(close(one(&env, &model, &ex).await.reward, 0.5));
}

#[tokio::test]
async fn wordle_win_partial_and_invalid_guesses() {
    let env = wordle::environment(&LoadOptions::default());
    let ex = example("Guess the secret word.", "crane");
    // Win on guess 2: 1 − 0.1 = 0.9.
    let r =
        one(&env, &Scripted::texts(&["<guess>slate</guess>", "<guess>CRANE</guess>"]), &ex).await;
    assert!(close(r.scores["wordle_win"], 0.9) && close(r.scores["wordle_partial"], 0.0));
    assert!(close(r.reward, 0.9));
    assert_eq!((r.stop_reason, r.metrics["turns"]), (StopReason::Completed, 2.0));
    // slate vs crane: s X, l X, a G, t X, e G.
    assert_eq!(r.completion[1].content, "SLATE\nXXGXG\n5 guesses left.");
    // Six wrong guesses: best is "crank" with 4 greens: 0.4 · 4/5.
    let r = one(
        &env,
        &Scripted::texts(&[
            "<guess>slate</guess>",
            "<guess>bad</guess>",
            "<guess>crank</guess>",
            "<guess>pious</guess>",
        ]),
        &ex,
    )
    .await;
    assert!(close(r.scores["wordle_win"], 0.0));
    assert!(close(r.scores["wordle_partial"], 0.32), "{}", r.scores["wordle_partial"]);
    assert_eq!(r.metrics["turns"], 6.0);
    assert!(r.completion[3].content.starts_with("Invalid guess"));
    assert_eq!(r.completion.len(), 11, "six guesses and five answers");
}

#[tokio::test]
async fn math_compares_boxed_values() {
    let env = math::environment(&LoadOptions::default());
    let ex = example("What is 1/3 + 1/4?", "7/12");
    for (text, want) in [
        ("so \\boxed{\\frac{7}{12}}", 1.0),
        ("\\boxed{\\dfrac{14}{24}}", 1.0),
        ("\\boxed{0.58}", 0.0),
        ("It is \\boxed{3/12 + 4/12}", 1.0),
        ("The answer is 7/12.", 1.0),
        ("\\boxed{7/12} or maybe \\boxed{1/2}", 0.0),
    ] {
        let r = one(&env, &Scripted::texts(&[text]), &ex).await;
        assert!(close(r.reward, want), "{text}");
    }
    // Generated problems carry exact answers.
    let examples = env.examples(Split::Eval).expect("examples");
    assert!(examples.iter().all(|e| !e.answer.is_empty() && !e.prompt[0].content.is_empty()));
}

#[tokio::test]
async fn mcq_reads_the_letter_and_shuffles_by_seed() {
    let env = mcq::environment(&LoadOptions::default());
    let examples = env.examples(Split::Eval).expect("examples");
    assert_eq!(mcq::BANK.len(), 32, "the whole bank parses");
    assert_eq!(examples.len(), mcq::BANK.len());
    let ex = &examples[0];
    let gold = ex.answer.chars().next().expect("letter");
    let options = ex.info["options"].as_array().expect("options");
    assert_eq!(
        options[(gold as u8 - b'A') as usize],
        mcq::BANK[0].correct,
        "the answer letter points at the right option"
    );
    let wrong_letter = if gold == 'A' { 'B' } else { 'A' };
    let right = one(&env, &Scripted::texts(&[format!("It is clear.\nAnswer: {gold}")]), ex).await;
    let wrong = one(&env, &Scripted::texts(&[format!("Answer: ({wrong_letter})")]), ex).await;
    assert!(close(right.reward, 1.0) && close(wrong.reward, 0.0));
    // Same seed, same order; some other seed gives another order for some question.
    let again = mcq::environment(&LoadOptions::default()).examples(Split::Eval).expect("examples");
    assert_eq!(examples, again);
    let other = mcq::environment(&LoadOptions { seed: 1, ..LoadOptions::default() })
        .examples(Split::Eval)
        .expect("examples");
    assert!(examples.iter().zip(&other).any(|(a, b)| a.answer != b.answer));
}

#[tokio::test]
async fn code_passes_only_when_every_test_passes() {
    let env = code::environment(&LoadOptions::default());
    let ex = &env.examples(Split::Eval).expect("examples")[0]; // sum of integers
    let runner =
        Services { code_runner: Some(Arc::new(temper_sandbox::Unsandboxed::new())), judge: None };
    let cases: [(&'static str, f64); 4] = [
        ("```python\nprint(sum(map(int, input().split())))\n```", 1.0),
        ("```python\nprint(6)\n```", 0.0),
        ("```python\nimport sys\nsys.exit(0)\n```", 0.0),
        ("no code at all", 0.0),
    ];
    for (text, want) in cases {
        let r = group(&env, &Scripted::texts(&[text]), ex, 1, &runner).await.remove(0);
        assert!(close(r.reward, want), "{text}: {r:?}");
        assert!(r.error.is_none());
    }
    // Without a code runner the reward function fails loudly instead of scoring 0.
    let r = one(&env, &Scripted::texts(&["```python\nprint(1)\n```"]), ex).await;
    let error = r.error.expect("an error");
    assert_eq!(error.source, "reward:code_tests");
    assert!(error.message.contains("no code runner"));
    assert!(!r.scores.contains_key("code_tests"));
}

#[tokio::test]
async fn calculator_tool_round_trip() {
    let env = calculator::environment(&LoadOptions::default());
    let ex = example("What is 1234 × 5678 − 1000?", "7005652");
    let model = Scripted::new(|request, i| match i {
        0 => {
            assert_eq!(request.tools[0].function.name, "calculator");
            Reply::Tools(vec![
                ("calculator", r#"{"expression": "1234 * 5678 - 1000"}"#),
                ("calculator", r#"{"expression": "#),
                ("search", r#"{}"#),
            ])
        }
        _ => {
            // The tool results are in the conversation, in call order.
            let tools: Vec<&str> = request
                .messages
                .iter()
                .filter(|m| m.role == Role::Tool)
                .map(|m| m.content.as_str())
                .collect();
            assert_eq!(tools[0], "7005652");
            assert!(tools[1].starts_with("error: arguments are not valid JSON"), "{}", tools[1]);
            assert!(tools[2].starts_with("error: unknown tool `search`"), "{}", tools[2]);
            Reply::Text("The answer is \\boxed{7005652}.")
        }
    });
    let r = one(&env, &model, &ex).await;
    assert!(close(r.reward, 1.0), "{r:?}");
    assert_eq!(r.scores["tool_calls"], 3.0);
    assert_eq!(r.stop_reason, StopReason::Completed);
    assert_eq!(r.completion.iter().filter(|m| m.role == Role::Tool).count(), 3);
    assert_eq!(r.completion[1].tool_call_id.as_deref(), Some("call_0_0"));
}

#[tokio::test]
async fn call_based_code_tests_call_the_named_function() {
    // LiveCodeBench's functional layout: metadata names the function (as a JSON string), each
    // test's input holds the arguments one JSON value per line and its output the return value.
    let env = code::environment(&LoadOptions::default());
    let ex = example_from_json(
        json!({"question": "Return the indices of the two numbers adding up to target.", "info": {
        "metadata": "{\"func_name\": \"twoSum\"}",
        "tests": [
            {"input": "[2,7,11,15]\n9", "output": "[0, 1]", "testtype": "functional"},
            {"input": "[3,2,4]\n6", "output": "[1, 2]", "testtype": "functional"},
            {"input": "[1.5,2.25]\n3.75", "output": "[0, 1]", "testtype": "functional"}
        ]}}),
        0,
        "t",
    )
    .expect("example");
    let runner =
        Services { code_runner: Some(Arc::new(temper_sandbox::Unsandboxed::new())), judge: None };
    let right = "```python\nclass Solution:\n    def twoSum(self, nums: List[int], target: int) -> List[int]:\n        for i in range(len(nums)):\n            for j in range(i + 1, len(nums)):\n                if nums[i] + nums[j] == target:\n                    return [i, j]\n```";
    let reversed = right.replace("return [i, j]", "return [j, i]");
    let other_name = right.replace("def twoSum", "def two_sum");
    for (text, want) in [(right.to_owned(), 1.0), (reversed, 0.0), (other_name, 0.0)] {
        let r = group(&env, &Scripted::texts(&[text.as_str()]), &ex, 1, &runner).await.remove(0);
        assert!(r.error.is_none(), "{r:?}");
        assert!(close(r.reward, want), "{text}: {}", r.reward);
    }
}
