//! The reference packages under `examples/environments/` (logic, science-mcq, swe-lite,
//! research-lite): they load, their data is what their README says, and right answers score 1
//! while wrong ones score 0.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use temper_envs::{LoadOptions, Split};
use temper_verify::logic::{Puzzle, solve};

use crate::support::{Scripted, one};

fn example_dir(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/environments").join(name)
}

fn load(name: &str) -> temper_envs::Environment {
    temper_envs::load(example_dir(name).to_str().expect("utf-8"), &LoadOptions::default())
        .unwrap_or_else(|e| panic!("{name}: {e}"))
}

#[tokio::test]
async fn logic_scores_any_valid_solution_and_nothing_else() {
    let env = load("logic");
    let eval = env.examples(Split::Eval).expect("eval");
    assert_eq!(eval.len(), 100);
    let mut per_kind: BTreeMap<&str, usize> = BTreeMap::new();
    for ex in &eval {
        *per_kind.entry(ex.task.as_str()).or_default() += 1;
    }
    // Kinds take turns; the few eval draws that repeat a train puzzle are skipped.
    assert_eq!(
        per_kind.keys().copied().collect::<Vec<_>>(),
        ["coloring", "countdown", "knights", "sudoku", "zebra"]
    );
    assert!(per_kind.values().all(|&n| (17..=23).contains(&n)), "{per_kind:?}");
    // The train split draws from its own stream.
    let train = env.examples(Split::Train).expect("train");
    assert_eq!(train.len(), 5000);
    let repeated: Vec<(&str, u64)> = eval
        .iter()
        .filter(|e| train.iter().any(|t| t.prompt == e.prompt))
        .map(|e| (e.task.as_str(), e.info["difficulty"].as_u64().unwrap_or(0)))
        .collect();
    assert!(repeated.is_empty(), "{repeated:?}");

    for ex in eval.iter().step_by(3) {
        let puzzle: Puzzle = serde_json::from_value(ex.info["puzzle"].clone()).expect("puzzle");
        let difficulty = ex.info["difficulty"].as_u64().expect("difficulty");
        assert!((1..=3).contains(&difficulty), "{difficulty}");
        assert!(ex.prompt[0].content.contains("The answer"), "{}", ex.prompt[0].content);
        // The generator's answer, the solver's, and a wrong one.
        let solved = solve(&puzzle).expect("solvable");
        for (reply, want) in [
            (format!("Let me think.\n<answer>\n{}\n</answer>", ex.answer), 1.0),
            (format!("<answer>{solved}</answer>"), 1.0),
            ("<answer>I give up</answer>".to_owned(), 0.0),
            (ex.answer.clone(), 0.0), // right, but outside the tags
        ] {
            let r = one(&env, &Scripted::texts(&[reply.as_str()]), ex).await;
            assert!(r.error.is_none(), "{:?}", r.error);
            assert_eq!(r.reward, want, "{} {reply}", ex.task);
        }
    }
    // A row whose puzzle is broken is an error on the rollout, not a silent 0.
    let mut broken = eval[0].clone();
    broken.info.insert("puzzle".into(), serde_json::json!({"kind": "sudoku", "size": 3}));
    let r = one(&env, &Scripted::texts(&["<answer>1</answer>"]), &broken).await;
    assert!(format!("{:?}", r.error).contains("info.puzzle"), "{:?}", r.error);
}

#[test]
fn logic_options_are_checked_by_name() {
    let dir = tempfile::tempdir().expect("tempdir");
    for (options, expect) in [
        ("{ kinds = [\"chess\"] }", "unknown kind `chess`"),
        ("{ difficulty = 9 }", "difficulty: 9..9"),
        ("{ difficulty = [4, 2] }", "difficulty: 4..2"),
        ("{ kinds = [] }", "at least one kind"),
        ("{ colour = 1 }", "unknown field `colour`"),
    ] {
        let manifest = format!(
            "[environment]\nname = \"logic-x\"\nversion = \"0.1.0\"\n[dataset]\ngenerator = \"logic\"\noptions = {options}\n[[rubric]]\nreward = \"logic\"\n"
        );
        std::fs::write(dir.path().join("environment.toml"), manifest).expect("write");
        let e = temper_envs::load(dir.path().to_str().expect("utf-8"), &LoadOptions::default())
            .expect_err(options)
            .to_string();
        assert!(e.contains("dataset.options") && e.contains(expect), "{options}: {e}");
    }
    let manifest = "[environment]\nname = \"logic-x\"\nversion = \"0.1.0\"\n[dataset]\ngenerator = \"math\"\noptions = { difficulty = 1 }\n[[rubric]]\nreward = \"logic\"\n";
    std::fs::write(dir.path().join("environment.toml"), manifest).expect("write");
    let e = temper_envs::load(dir.path().to_str().expect("utf-8"), &LoadOptions::default())
        .expect_err("math takes no options")
        .to_string();
    assert!(e.contains("takes no options"), "{e}");
}

/// A scripted engineer: makes its tool calls one per turn, then stops.
#[derive(Debug)]
struct Engineer {
    steps: Vec<(&'static str, serde_json::Value)>,
}

#[async_trait::async_trait]
impl temper_envs::ChatModel for Engineer {
    async fn chat(
        &self,
        request: &temper_envs::ChatRequest,
    ) -> Result<temper_envs::ModelReply, temper_envs::ModelError> {
        let done =
            request.messages.iter().filter(|m| m.role == temper_protocol::Role::Tool).count();
        Ok(match self.steps.get(done) {
            Some((name, args)) => crate::support::tool_call(name, args, done),
            None => crate::support::reply("Done."),
        })
    }
}

/// `write_file` calls that put a task's reference solution in place.
fn solution_steps(task: &Path) -> Vec<(&'static str, serde_json::Value)> {
    let root = task.join("solution");
    let mut out = Vec::new();
    let mut stack = vec![root.clone()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).expect("read solution") {
            let path = entry.expect("entry").path();
            if path.is_dir() {
                stack.push(path);
            } else {
                let rel =
                    path.strip_prefix(&root).expect("under root").to_string_lossy().into_owned();
                let content = std::fs::read_to_string(&path).expect("utf-8 solution");
                out.push(("write_file", serde_json::json!({"path": rel, "content": content})));
            }
        }
    }
    assert!(!out.is_empty(), "{} has no solution files", task.display());
    out
}

/// Every task is solvable: its reference solution, written through the tools, passes every
/// hidden test (reward 1), while the repository as given does not (reward < 1). Touching the
/// tests scores 0 even with the fix in place.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn swe_lite_reference_solutions_score_one_and_the_bugs_do_not() {
    let env = load("swe-lite");
    let services = temper_envs::Services {
        code_runner: Some(std::sync::Arc::new(temper_sandbox::Unsandboxed::new())),
        judge: None,
    };
    let sampling = temper_protocol::SamplingParams::default();
    let mut examples = env.examples(Split::Train).expect("train");
    let eval = env.examples(Split::Eval).expect("eval");
    assert_eq!((examples.len(), eval.len()), (18, 6));
    examples.extend(eval);
    let mut tasks = std::collections::BTreeSet::new();
    for (n, ex) in examples.iter().enumerate() {
        let id = ex.info["task_id"].as_str().expect("task_id").to_owned();
        assert!(tasks.insert(id.clone()), "{id} twice");
        let dir = example_dir("swe-lite").join("tasks").join(&id);
        let fixed = Engineer { steps: solution_steps(&dir) };
        let r = env.run_group(&fixed, ex, 1, &sampling, &services).await.remove(0);
        assert!(r.error.is_none(), "{id}: {:?}", r.error);
        assert_eq!(r.reward, 1.0, "{id}: the reference solution must pass every hidden test");
        let idle = Engineer { steps: Vec::new() };
        let r = env.run_group(&idle, ex, 1, &sampling, &services).await.remove(0);
        assert!(r.error.is_none(), "{id}: {:?}", r.error);
        assert!(r.reward < 1.0, "{id}: the planted bug must fail a hidden test ({})", r.reward);
        if n % 6 == 0 {
            // The fix plus an edited (or deleted) test file is worth nothing.
            let test_file = std::fs::read_dir(dir.join("repo/tests"))
                .expect("tests")
                .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
                .find(|n| n.starts_with("test"))
                .expect("a visible test file");
            for cheat in [
                (
                    "bash",
                    serde_json::json!({"command": format!("echo '# ok' >> tests/{test_file}")}),
                ),
                ("bash", serde_json::json!({"command": "rm -rf tests"})),
                ("bash", serde_json::json!({"command": "echo 'import os' > tests/conftest.py"})),
            ] {
                let mut steps = solution_steps(&dir);
                steps.push(cheat.clone());
                let r =
                    env.run_group(&Engineer { steps }, ex, 1, &sampling, &services).await.remove(0);
                assert!(r.error.is_none(), "{id}: {:?}", r.error);
                assert_eq!(r.reward, 0.0, "{id}: {cheat:?}");
            }
            // Code that exits before the tests run, or prints a fake result, passes nothing.
            let mut steps = solution_steps(&dir);
            steps.push((
                "bash",
                serde_json::json!({"command": "for f in $(ls */__init__.py | grep -v tests); do printf 'import os\\nprint(\"1.0\")\\nos._exit(0)\\n' >> $f; done"}),
            ));
            let r = env.run_group(&Engineer { steps }, ex, 1, &sampling, &services).await.remove(0);
            assert_eq!(r.reward, 0.0, "{id}: an early exit passed: {:?}", r.error);
        }
    }
    assert_eq!(tasks.len(), 24);
}

/// GPQA's columns become four shuffled choices; the right letter scores 1, another 0.
#[tokio::test]
async fn science_mcq_reads_gpqa_columns_and_scores_the_letter() {
    let env = load("science-mcq");
    let train = env.examples(Split::Train).expect("train");
    let eval = env.examples(Split::Eval).expect("eval");
    assert_eq!((train.len(), eval.len()), (24, 12));
    let mut letters = std::collections::BTreeSet::new();
    for ex in train.iter().chain(&eval) {
        let options: Vec<String> =
            serde_json::from_value(ex.info["options"].clone()).expect("options");
        assert_eq!(options.len(), 4);
        let at = usize::from(ex.answer.as_bytes()[0] - b'A');
        assert_eq!(options[at], ex.info["correct_answer"].as_str().expect("correct"));
        assert!(ex.info["Subdomain"].is_string() && ex.info["Record ID"].is_string());
        let text = &ex.prompt.last().expect("prompt").content;
        assert!(text.contains(&format!("\n{}) {}", ex.answer, options[at])), "{text}");
        letters.insert(ex.answer.clone());
    }
    assert_eq!(letters.len(), 4, "the correct choice lands on every letter");
    let ex = &eval[0];
    let wrong = if ex.answer == "A" { "B" } else { "A" };
    for (reply, want) in [
        (format!("<answer>{}</answer>", ex.answer), 1.0),
        (format!("<answer>{wrong}</answer>"), 0.0),
    ] {
        let r = one(&env, &Scripted::texts(&[reply.as_str()]), ex).await;
        assert_eq!(r.reward, want, "{reply}");
    }
}

/// A scripted researcher that follows a question's gold hops: for each hop it searches the
/// gold query and opens the gold document, but only if the search showed it; then it answers
/// with the answer as the last opened document writes it.
#[derive(Debug)]
struct Researcher {
    gold: Vec<(String, String)>,
    answer: String,
}

#[async_trait::async_trait]
impl temper_envs::ChatModel for Researcher {
    async fn chat(
        &self,
        request: &temper_envs::ChatRequest,
    ) -> Result<temper_envs::ModelReply, temper_envs::ModelError> {
        let results: Vec<&str> = request
            .messages
            .iter()
            .filter(|m| m.role == temper_protocol::Role::Tool)
            .map(|m| m.content.as_str())
            .collect();
        let step = results.len();
        let call =
            |name: &str, args: serde_json::Value| Ok(crate::support::tool_call(name, &args, step));
        let hop = step / 2;
        if let Some((query, doc)) = self.gold.get(hop) {
            if step.is_multiple_of(2) {
                return call("search", serde_json::json!({"query": query}));
            }
            // Open the gold document only if the search listed it.
            let listed = results[step - 1].contains(&format!("[{doc}]"));
            let id = if listed { doc.as_str() } else { "not-found" };
            return call("open", serde_json::json!({"id": id}));
        }
        let last = results.last().copied().unwrap_or_default();
        let text = if last.to_lowercase().contains(&self.answer.to_lowercase()) {
            self.answer.as_str()
        } else {
            "unknown"
        };
        Ok(crate::support::reply(&format!("<answer>{text}</answer>")))
    }
}

/// Every question, train and eval: the scripted researcher that follows the gold hops (1, 2
/// or 3 searches) scores 1, so each gold document is found by its query and holds the answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn research_lite_gold_hops_find_every_answer() {
    let env = load("research-lite");
    let sampling = temper_protocol::SamplingParams::default();
    let services = temper_envs::Services::default();
    let mut examples = env.examples(Split::Train).expect("train");
    examples.extend(env.examples(Split::Eval).expect("eval"));
    assert!(examples.len() >= 300, "{}", examples.len());
    let mut hops = BTreeMap::new();
    for ex in &examples {
        let gold: Vec<(String, String)> = ex.info["gold"]
            .as_array()
            .expect("gold")
            .iter()
            .map(|g| {
                (
                    g["query"].as_str().expect("q").to_owned(),
                    g["doc"].as_str().expect("d").to_owned(),
                )
            })
            .collect();
        *hops.entry(gold.len()).or_insert(0) += 1;
        let agent = Researcher { gold, answer: ex.answer.clone() };
        let r = env.run_group(&agent, ex, 1, &sampling, &services).await.remove(0);
        assert!(r.error.is_none(), "{:?}", r.error);
        assert_eq!(
            r.reward,
            1.0,
            "{}: {:?}",
            ex.prompt.last().map(|m| m.content.as_str()).unwrap_or_default(),
            r.completion
        );
    }
    assert_eq!(hops.keys().copied().collect::<Vec<_>>(), [1, 2, 3]);
    assert!(hops.values().all(|&n| n >= 100), "{hops:?}");
    // A wrong answer scores 0; a right one in other case scores 1.
    let ex = &examples[0];
    for (reply, want) in [
        (format!("<answer>{}</answer>", ex.answer.to_uppercase()), 1.0),
        ("<answer>Nobody</answer>".into(), 0.0),
    ] {
        let r = one(&env, &Scripted::texts(&[reply.as_str()]), ex).await;
        assert_eq!(r.reward, want, "{reply}");
    }
}

/// The corpus tools' errors name the field, and a corpus the manifest points at must exist.
#[test]
fn corpus_tools_need_a_corpus() {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::create_dir_all(dir.path().join("data")).expect("mkdir");
    std::fs::write(
        dir.path().join("data/train.jsonl"),
        "{\"question\": \"q\", \"answer\": \"a\"}\n",
    )
    .expect("data");
    std::fs::write(
        dir.path().join("data/corpus.jsonl"),
        "{\"id\": \"a\", \"text\": \"x\"}\n{\"id\": \"a\", \"text\": \"y\"}\n",
    )
    .expect("corpus");
    let head = "[environment]\nname = \"rl-x\"\nversion = \"0.1.0\"\n[dataset]\ntrain = \"data/train.jsonl\"\n[[rubric]]\nreward = \"exact_match\"\n[env]\nkind = \"tool\"\ntools = [\"search\"]\n";
    for (extra, want) in [
        ("", "field `env.tools`: tool `search` reads a corpus: set `env.corpus`"),
        ("corpus = \"data/none.jsonl\"\n", "field `env.corpus`: corpus file"),
        ("corpus = \"data/corpus.jsonl\"\n", "document id `a` appears twice"),
    ] {
        std::fs::write(dir.path().join("environment.toml"), format!("{head}{extra}"))
            .expect("write");
        let e = temper_envs::load(dir.path().to_str().expect("utf-8"), &LoadOptions::default())
            .expect_err(want)
            .to_string();
        assert!(e.contains(want), "{e}");
    }
}

/// The research world is what its seeded program makes: rerunning it gives the committed files
/// byte for byte (the program also checks the world's consistency and BM25 reachability).
#[test]
fn research_lite_world_is_rebuilt_byte_for_byte() {
    let out = tempfile::tempdir().expect("tempdir");
    let dir = example_dir("research-lite");
    let status = std::process::Command::new("python3")
        .arg(dir.join("scripts/make_world.py"))
        .args(["--seed", "0", "--out"])
        .arg(out.path())
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .stdout(std::process::Stdio::null())
        .status()
        .expect("python3 runs");
    assert!(status.success());
    for name in ["corpus.jsonl", "train.jsonl", "eval.jsonl"] {
        let made = std::fs::read(out.path().join(name)).expect("made");
        let committed = std::fs::read(dir.join("data").join(name)).expect("committed");
        assert!(made == committed, "{name} differs from what scripts/make_world.py makes");
    }
}
