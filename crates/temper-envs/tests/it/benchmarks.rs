//! The published benchmark layouts over the fixtures in `examples/benchmarks/fixtures`: parsing,
//! shuffling, filtering, and grading a correct and an incorrect answer of each answer type.

use std::path::PathBuf;
use std::sync::Arc;

use serde_json::json;
use temper_envs::Rubric;
use temper_envs::dataset::load_file_with;
use temper_envs::envs::code;
use temper_envs::layout::{Layout, LayoutOptions};
use temper_envs::rewards::{CodeTests, judge_verdict as verdict};
use temper_envs::{Example, LoadOptions, Services};
use temper_protocol::Compare;

use crate::support::{Scripted, close, group};

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../examples/benchmarks/fixtures").join(name)
}

fn load(name: &str, layout: Layout, seed: u64, options: &LayoutOptions) -> Vec<Example> {
    load_file_with(&fixture(name), "bench", layout, seed, options).expect("the fixture loads")
}

#[test]
fn aime_rows_keep_their_answers_as_text() {
    let rows = load("aime_2025.jsonl", Layout::Aime, 0, &LayoutOptions::default());
    assert_eq!(rows.len(), 6);
    assert!(rows[0].prompt[0].content.contains("divisors of $720$"));
    // An integer answer is read as its digits; a zero-padded one is kept as written.
    assert_eq!(rows[0].answer, "30");
    assert_eq!(rows[2].answer, "049");
    assert_eq!(rows[0].info["year"], 2025);
    let math = |gold: &str, reply: &str| temper_verify::math::verify(gold, reply);
    assert!(math(&rows[2].answer, "So there are \\boxed{49} pairs."));
    assert!(!math(&rows[2].answer, "So there are \\boxed{50} pairs."));
}

#[test]
fn gpqa_diamond_choices_shuffle_by_seed() {
    let a = load("gpqa_diamond.jsonl", Layout::Gpqa, 1, &LayoutOptions::default());
    let b = load("gpqa_diamond.jsonl", Layout::Gpqa, 1, &LayoutOptions::default());
    let c = load("gpqa_diamond.jsonl", Layout::Gpqa, 2, &LayoutOptions::default());
    assert_eq!(a, b, "the same seed gives the same order");
    assert_ne!(
        a.iter().map(|e| &e.answer).collect::<Vec<_>>(),
        c.iter().map(|e| &e.answer).collect::<Vec<_>>()
    );
    for ex in &a {
        let letter = ex.answer.as_bytes()[0];
        let correct = ex.info["correct_answer"].as_str().expect("text");
        assert!(ex.prompt[0].content.contains(&format!("{}) {correct}", char::from(letter))));
        assert!(temper_verify::mcq::extract_letter(&format!("Answer: {}", ex.answer), 4).is_some());
    }
}

#[test]
fn mmlu_pro_lists_up_to_ten_options() {
    let rows = load("mmlu_pro.jsonl", Layout::MmluPro, 0, &LayoutOptions::default());
    assert_eq!(rows.len(), 6);
    assert!(rows[0].prompt[0].content.contains("J) 0"), "ten options, A to J");
    assert!(
        rows[1].prompt[0].content.contains("C) Argon") && !rows[1].prompt[0].content.contains("E)")
    );
    assert_eq!(rows[1].answer, "C");
    assert_eq!(rows[1].info["category"], "chemistry");
    let letter = |reply: &str| temper_verify::mcq::extract_letter(reply, 10);
    assert_eq!(letter("The answer is (D)."), Some('D'));
    assert_eq!(
        letter("The answer is (D).").map(String::from).as_deref(),
        Some(rows[5].answer.as_str())
    );
    // A bad row names what is wrong.
    let bad = Layout::MmluPro
        .convert(json!({"question": "q", "options": ["a", "b"], "answer": "C"}), 0, 0)
        .unwrap_err();
    assert!(bad.contains("names no option"), "{bad}");
    let disagree = Layout::MmluPro
        .convert(
            json!({"question": "q", "options": ["a", "b"], "answer": "A", "answer_index": 1}),
            0,
            0,
        )
        .unwrap_err();
    assert!(disagree.contains("disagree"), "{disagree}");
}

#[test]
fn hle_keeps_the_text_subset() {
    let rows = load("hle.jsonl", Layout::Hle, 0, &LayoutOptions::default());
    assert_eq!(rows.len(), 4, "the question with an image is left out");
    assert!(rows.iter().all(|r| r.info["id"] != "h4"));
    assert_eq!(rows[1].answer, "C");
    assert_eq!(rows[1].info["answer_type"], "multipleChoice");
    let all = load(
        "hle.jsonl",
        Layout::Hle,
        0,
        &LayoutOptions { with_images: true, ..Default::default() },
    );
    assert_eq!(all.len(), 5);
    // The exam-style judge ends with a `correct:` line; the first word need not be yes or no.
    assert_eq!(verdict("final_answer: 101\nreasoning: same number.\ncorrect: yes"), Some(true));
    assert_eq!(verdict("final_answer: 103\nreasoning: differs.\n**correct:** no"), Some(false));
    assert_eq!(verdict("yes"), Some(true));
    assert_eq!(verdict("final_answer: 101\nreasoning: unsure"), None);
}

#[test]
fn livecodebench_reads_packed_private_tests_and_a_date_window() {
    let all = load("livecodebench.jsonl", Layout::Livecodebench, 0, &LayoutOptions::default());
    assert_eq!(all.len(), 5);
    // Public tests first, then the private ones unpacked from base64, zlib and pickle.
    let tests = all[0].info["tests"].as_array().expect("tests");
    assert_eq!(tests.len(), 3);
    assert_eq!(tests[1]["input"], "10 -4\n");
    assert_eq!(all[0].info["public_tests"], 1);
    assert!(all[0].prompt[0].content.contains("standard input"));
    assert_eq!(all[2].info["func_name"], "twoSum");
    assert!(all[2].prompt[0].content.contains("def twoSum(self, nums: List[int]"));
    // v6's window: problems from 2024-08-01 up to, not including, 2025-05-01.
    let window = LayoutOptions {
        from: Some("2024-08-01".into()),
        to: Some("2025-05-01".into()),
        ..Default::default()
    };
    let kept = load("livecodebench.jsonl", Layout::Livecodebench, 0, &window);
    assert_eq!(kept.len(), 4);
    assert!(kept.iter().all(|e| e.info["question_id"] != "fx005"));
    let narrow = LayoutOptions { from: Some("2025-01-01".into()), ..Default::default() };
    assert_eq!(load("livecodebench.jsonl", Layout::Livecodebench, 0, &narrow).len(), 2);
    assert!(
        LayoutOptions { from: Some("2025-1-1".into()), ..Default::default() }
            .check(Layout::Livecodebench)
            .is_err()
    );
    assert!(window.check(Layout::Aime).is_err(), "a date window belongs to livecodebench");
    // A test list that is neither JSON nor packed is named.
    let bad = Layout::Livecodebench
        .convert(
            json!({"question_content": "q", "public_test_cases": "not tests", "metadata": "{}"}),
            0,
            0,
        )
        .unwrap_err();
    assert!(bad.contains("public_test_cases"), "{bad}");
    // Base64 of zlib of a pickled list, not a string, is refused before it is unpickled.
    let mut z = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::default());
    std::io::Write::write_all(&mut z, b"\x80\x04\x95\x05\x00\x00\x00\x00\x00\x00\x00]\x94.")
        .expect("zlib");
    let packed = base64::Engine::encode(
        &base64::engine::general_purpose::STANDARD,
        z.finish().expect("zlib"),
    );
    let list = Layout::Livecodebench
        .convert(
            json!({"question_content": "q", "public_test_cases": "[]", "private_test_cases": packed, "metadata": "{}"}),
            0,
            0,
        )
        .unwrap_err();
    assert!(list.contains("pickled string"), "{list}");
}

#[tokio::test]
async fn livecodebench_problems_grade_stdin_and_call_based_solutions() {
    let rows = load("livecodebench.jsonl", Layout::Livecodebench, 0, &LayoutOptions::default());
    let env = code::environment(&LoadOptions::default());
    let mut by_value = code::environment(&LoadOptions::default());
    by_value.rubric = Rubric::new().with(
        "code_tests",
        1.0,
        CodeTests { compare: Compare::Values, ..CodeTests::default() },
    );
    let runner =
        Services { code_runner: Some(Arc::new(temper_sandbox::Unsandboxed::new())), judge: None };
    let fenced = |code: &str| format!("```python\n{code}\n```");
    let cases = [
        (0, "a, b = map(int, input().split())\nprint(a + b)", 1.0),
        (0, "a, b = map(int, input().split())\nprint(a - b)", 0.0),
        // Floats within 1e-6 of the expected output pass only when compared as values: this
        // stdin problem prints 2.3333333333333335 against 2.3333333333.
        (1, "n = int(input())\nxs = list(map(int, input().split()))\nprint(sum(xs) / n)", 0.0),
        (
            2,
            "class Solution:\n    def twoSum(self, nums, target):\n        for i in range(len(nums)):\n            for j in range(i + 1, len(nums)):\n                if nums[i] + nums[j] == target:\n                    return [i, j]",
            1.0,
        ),
        (2, "class Solution:\n    def twoSum(self, nums, target):\n        return [0, 1]", 0.0),
        (
            3,
            "class Solution:\n    def mean(self, nums):\n        return sum(nums) / len(nums)",
            1.0,
        ),
        (
            3,
            "class Solution:\n    def mean(self, nums):\n        return sum(nums) // len(nums)",
            0.0,
        ),
    ];
    for (row, code, want) in cases {
        let text = fenced(code);
        let r =
            group(&env, &Scripted::texts(&[text.as_str()]), &rows[row], 1, &runner).await.remove(0);
        assert!(r.error.is_none(), "{r:?}");
        assert!(close(r.reward, want), "row {row}: {code}: {}", r.reward);
    }
    let mean = fenced("n = int(input())\nxs = list(map(int, input().split()))\nprint(sum(xs) / n)");
    let r =
        group(&by_value, &Scripted::texts(&[mean.as_str()]), &rows[1], 1, &runner).await.remove(0);
    assert!(
        close(r.reward, 1.0),
        "compared as values, 2.3333333333333335 answers 2.3333333333: {r:?}"
    );
}
