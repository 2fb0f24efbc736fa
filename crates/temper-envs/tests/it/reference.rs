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
