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

fn fixtures_dir() -> PathBuf {
    fixture("")
}

#[test]
fn intellect3_suite_reads_every_benchmark_over_the_fixtures() {
    use temper_envs::Split;
    use temper_envs::suite::Suite;
    let suite = Suite::resolve("intellect3").expect("built in");
    let got: Vec<(String, u32, usize)> = suite
        .benchmark
        .iter()
        .map(|b| {
            let env = b.environment(&suite, &fixtures_dir()).expect(&b.name);
            (b.name.clone(), b.samples, env.examples(Split::Eval).expect("rows").len())
        })
        .collect();
    let want = [
        ("aime2024", 32, 4),
        ("aime2025", 32, 6),
        ("livecodebench", 2, 4), // v6's window leaves one problem out
        ("gpqa-diamond", 4, 6),
        ("hle", 1, 4), // the text subset
        ("mmlu-pro", 1, 6),
    ];
    let want: Vec<(String, u32, usize)> =
        want.iter().map(|(n, s, c)| (n.to_string(), *s, *c)).collect();
    assert_eq!(got, want);
    let aime = suite.get("aime2024").expect("aime2024");
    assert_eq!(aime.sampling(&suite).temperature, Some(0.6));
    assert_eq!(aime.sampling(&suite).max_tokens, Some(65536));

    // The content hash follows the data: an edited file makes a different benchmark.
    let tmp = tempfile::tempdir().expect("tempdir");
    let copy = tmp.path().join("aime_2024.jsonl");
    std::fs::copy(fixture("aime_2024.jsonl"), &copy).expect("copy");
    let before = aime.environment(&suite, tmp.path()).expect("env").info.content_hash;
    assert_eq!(before, aime.environment(&suite, &fixtures_dir()).expect("env").info.content_hash);
    let mut text = std::fs::read_to_string(&copy).expect("read");
    text = text.replace("\"Answer\": 400", "\"Answer\": 401");
    std::fs::write(&copy, text).expect("write");
    assert_ne!(before, aime.environment(&suite, tmp.path()).expect("env").info.content_hash);
    // A missing file names where it was looked for.
    let missing = suite.get("mmlu-pro").expect("mmlu").environment(&suite, tmp.path()).unwrap_err();
    let message = missing.to_string();
    assert!(
        message.contains("mmlu_pro.jsonl") && message.contains("mmlu_pro.parquet"),
        "{message}"
    );
}

#[test]
fn suite_files_are_checked_field_by_field() {
    use temper_envs::suite::Suite;
    let base = "[suite]\nname = \"mine\"\n\n[[benchmark]]\nname = \"aa\"\ndata = \"a\"\nrubric = [{ reward = \"exact_match\" }]\n";
    assert!(Suite::parse(base, std::path::Path::new("s.toml")).is_ok());
    for (bad, needle) in [
        (base.replace("data = \"a\"", "data = \"../a\""), "benchmark[0].data"),
        (base.replace("data = \"a\"", "data = \"a\"\nsamples = 0"), "benchmark[0].samples"),
        (base.replace("data = \"a\"", "data = \"a\"\nsampels = 2"), "unknown field `sampels`"),
        (base.replace("data = \"a\"", "data = \"a\"\nparser = \"nope\""), "benchmark[0].parser"),
        (
            base.replace("data = \"a\"", "data = \"a\"\noptions = { from = \"2024-01-01\" }"),
            "benchmark[0].options",
        ),
        (
            format!(
                "{base}\n[[benchmark]]\nname = \"aa\"\ndata = \"b\"\nrubric = [{{ reward = \"exact_match\" }}]\n"
            ),
            "names two benchmarks",
        ),
        (base.replace("rubric = [{ reward = \"exact_match\" }]\n", ""), "benchmark[0].rubric"),
        (format!("{base}\n[sampling]\ntop_p = 1.5\n"), "top_p"),
    ] {
        let e = Suite::parse(&bad, std::path::Path::new("s.toml")).unwrap_err().to_string();
        assert!(e.contains(needle) && e.contains("s.toml"), "{needle}: {e}");
    }
    assert!(Suite::resolve("no-such-suite").unwrap_err().to_string().contains("intellect3"));
}

/// Writes an evaluation folder holding `problems` (id → rewards of its samples).
fn fake_run(
    dir: &std::path::Path,
    model: &str,
    k: usize,
    problems: &[(u64, &[f64])],
    complete: bool,
) {
    std::fs::create_dir_all(dir).expect("dir");
    let meta = json!({
        "status": if complete { "complete" } else { "running" },
        "config": {"env": {"name": "bench"}, "eval": {"rollouts_per_example": k, "pass_threshold": 0.5, "model_name": model}},
    });
    std::fs::write(dir.join("metadata.json"), meta.to_string()).expect("meta");
    let mut lines = String::new();
    for (id, rewards) in problems {
        for (i, r) in rewards.iter().enumerate() {
            let row = json!({"schema_version": 1, "env": "bench", "task": "bench", "example_id": id,
                "rollout_index": i, "prompt": [], "completion": [], "reward": r, "stop_reason": "completed",
                "timings": {"generation_ms": 0.0, "env_ms": 0.0, "scoring_ms": 0.0, "total_ms": 0.0}});
            lines.push_str(&format!("{row}\n"));
        }
    }
    lines.push_str("{\"schema_version\": 1, \"env\""); // a partial last line, as a killed run leaves
    std::fs::write(dir.join("results.jsonl"), lines).expect("results");
}

#[test]
fn reports_match_hand_computed_values() {
    use temper_envs::report::{Run, report};
    let tmp = tempfile::tempdir().expect("tempdir");
    let (a, b) = (tmp.path().join("a"), tmp.path().join("b"));
    // Problem 4 of run a has one sample of two: unfinished, left out.
    fake_run(
        &a,
        "base",
        2,
        &[(1, &[1.0, 0.0]), (2, &[1.0, 1.0]), (3, &[0.0, 0.0]), (4, &[1.0])],
        true,
    );
    fake_run(&b, "tuned", 2, &[(1, &[1.0, 1.0]), (2, &[1.0, 1.0]), (3, &[1.0, 0.0])], false);
    let runs = [Run::read(&a, None).expect("a"), Run::read(&b, None).expect("b")];
    assert_eq!(runs[0].label, "base");
    let r = report(&runs);
    let bench = &r.benchmarks[0];
    let sa = &bench.runs[0];
    // Per-problem avg@2 of a: 0.5, 1, 0: mean 0.5, s = 0.5, se = 0.288675, t(2) = 4.303: the
    // interval runs past [0, 1] and is cut there.
    let avg = sa.avg_at_k.expect("avg");
    assert_eq!(sa.problems, 3);
    assert!((avg.mean - 0.5).abs() < 1e-12);
    assert_eq!((avg.low, avg.high), (0.0, 1.0));
    // pass@2 per problem: 1, 1, 0; pass@1 = avg@2 here.
    assert!((sa.pass_at_k[&2].mean - 2.0 / 3.0).abs() < 1e-12);
    assert!((sa.pass_at_k[&1].mean - 0.5).abs() < 1e-12);
    // b − a per problem: 0.5, 0, 0.5: mean 1/3, s = 0.288675, se = 0.166667, half 0.717167.
    let d = &bench.differences[0];
    assert_eq!((d.run.as_str(), d.baseline.as_str(), d.avg_at_k.n), ("tuned", "base", 3));
    assert!((d.avg_at_k.mean - 1.0 / 3.0).abs() < 1e-12);
    assert!((d.avg_at_k.high - (1.0 / 3.0 + 4.303 * 0.166_666_667)).abs() < 1e-6, "{d:?}");
    let md = r.markdown();
    assert!(md.contains("| bench | base | 2 | 3 | 50.0 | 0.0 – 100.0 | 66.7 (k=2) | 0 |"), "{md}");
    assert!(md.contains("| bench | tuned | 2 | 3 (incomplete) | 83.3 |"), "{md}");
    assert!(md.contains("| bench | tuned − base | +33.3 | -38.4 – 105.0 | 3 |"), "{md}");
    // A folder without an evaluation is named.
    let e = Run::read(tmp.path().join("a").parent().expect("tmp").join("none").as_path(), None);
    assert!(e.is_err());
}
