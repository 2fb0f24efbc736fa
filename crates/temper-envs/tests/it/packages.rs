//! Packages: loading environment.toml, its errors, content hashes, script rewards and turn
//! scripts.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde_json::json;
use temper_envs::dataset::example_from_json;
use temper_envs::package::content_hash;
use temper_envs::{LoadOptions, Services, Split};
use temper_protocol::StopReason;

use crate::support::{Scripted, group, one};

fn capitals() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/environments/capitals")
}

fn load(dir: &Path) -> Result<temper_envs::Environment, temper_envs::EnvError> {
    temper_envs::load(dir.to_str().expect("utf-8"), &LoadOptions::default())
}

fn runner() -> Services {
    Services { code_runner: Some(Arc::new(temper_sandbox::Unsandboxed::new())), judge: None }
}

#[tokio::test]
async fn the_capitals_example_loads_and_scores() {
    let env = load(&capitals()).expect("load");
    assert_eq!((env.info.name.as_str(), env.info.version.as_str()), ("capitals", "0.1.0"));
    let eval = env.examples(Split::Eval).expect("eval");
    assert_eq!(eval.len(), 5);
    assert_eq!(eval[0].answer, "Rome");
    let r = one(&env, &Scripted::texts(&["<answer>rome</answer>"]), &eval[0]).await;
    assert_eq!((r.reward, r.scores["format"]), (1.0, 1.0));
    assert_eq!(
        r.prompt[0].content,
        "Answer with the name of the city only, inside <answer></answer> tags."
    );
    // Loading the manifest file itself works too.
    temper_envs::load(
        capitals().join("environment.toml").to_str().expect("utf-8"),
        &LoadOptions::default(),
    )
    .expect("load by file");
}

fn write_package(dir: &Path, manifest: &str) {
    std::fs::create_dir_all(dir.join("data")).expect("mkdir");
    std::fs::write(dir.join("data/train.jsonl"), "{\"question\": \"q\", \"answer\": \"abc\"}\n")
        .expect("data");
    std::fs::write(dir.join("environment.toml"), manifest).expect("manifest");
}

const HEAD: &str =
    "[environment]\nname = \"pkg\"\nversion = \"0.1.0\"\n[dataset]\ntrain = \"data/train.jsonl\"\n";

#[test]
fn invalid_manifests_name_the_field() {
    let rubric = "[[rubric]]\nreward = \"exact_match\"\n";
    let cases: Vec<(String, &str)> = vec![
        (
            format!("{HEAD}[[rubric]]\nreward = \"nope\"\n"),
            "field `rubric[0].reward`: unknown reward function `nope`",
        ),
        (HEAD.replace("\"pkg\"", "\"Bad_Name\"") + rubric, "field `environment.name`"),
        (HEAD.replace("0.1.0", "1.0") + rubric, "field `environment.version`"),
        (
            HEAD.replace("data/train.jsonl", "data/missing.jsonl") + rubric,
            "field `dataset.train`: dataset file",
        ),
        (
            HEAD.replace("data/train.jsonl", "../escape.jsonl") + rubric,
            "must be a relative path inside the package",
        ),
        (
            format!("{HEAD}[env]\nkind = \"dance\"\n{rubric}"),
            "field `env.kind`: unknown kind `dance`",
        ),
        (format!("{HEAD}[env]\nfoo = 1\n{rubric}"), "unknown field `foo`"),
        (format!("{HEAD}[env]\nparser = \"json\"\n{rubric}"), "field `env.parser`"),
        (format!("{HEAD}[env]\nmax_turns = 3\n{rubric}"), "field `env.max_turns`"),
        (
            format!("{HEAD}[env]\ntools = [\"calculator\"]\n{rubric}"),
            "field `env.tools`: does not apply",
        ),
        (
            format!("{HEAD}[env]\nkind = \"tool\"\ntools = [\"laser\"]\n{rubric}"),
            "unknown tool `laser`",
        ),
        (
            format!("{HEAD}[[rubric]]\nreward = \"regex\"\npattern = \"(\"\n"),
            "field `rubric[0].pattern`",
        ),
        (
            format!("{HEAD}[[rubric]]\nreward = \"regex\"\npatern = \"a\"\n"),
            "field `rubric[0]`: unknown field `patern`",
        ),
        (
            format!("{HEAD}[[rubric]]\nreward = \"script\"\npath = \"rewards/none.py\"\n"),
            "field `rubric[0].path`: ",
        ),
        (
            format!("{HEAD}[[rubric]]\nreward = \"exact_match\"\nweight = nan\n"),
            "field `rubric[0].weight`",
        ),
        (HEAD.to_owned(), "field `rubric`: the environment has no [[rubric]] entries"),
        (
            HEAD.replace("data/train.jsonl", ".venv/train.jsonl") + rubric,
            "inside an ignored folder (.venv)",
        ),
        ("[environment\nname = 1".to_owned(), "line 1"),
        (
            format!(
                "{HEAD}[[rubric]]\nreward = \"session_command\"\ncommand = \"true\"\nscore = \"exit_code\"\nupload = [{{ from = \"a\", to = \"x; rm -rf /\" }}]\n"
            ),
            "field `rubric[0].upload`: `x; rm -rf /` must be a relative path of letters",
        ),
        (
            format!(
                "{HEAD}[[rubric]]\nreward = \"session_command\"\ncommand = \"true\"\nscore = \"exit_code\"\nupload = [{{ from = \"a\", to = \"../up\" }}]\n"
            ),
            "field `rubric[0].upload`",
        ),
        (
            format!(
                "{HEAD}[[rubric]]\nreward = \"session_command\"\ncommand = \"true\"\nscore = \"exit_code\"\nupload = [{{ from = \"a\", to = \"b\" }}]\nupload_to = \"c\"\n"
            ),
            "field `rubric[0].upload_to`: a list of uploads names each `to` itself",
        ),
        (
            format!("{HEAD}[dataset.options]\nkinds = []\n{rubric}").replacen(
                "[dataset]\n",
                "[dataset]\n",
                1,
            ),
            "field `dataset.options`: options belong to a `generator` or a `layout`",
        ),
    ];
    for (manifest, want) in cases {
        let dir = tempfile::tempdir().expect("tempdir");
        write_package(dir.path(), &manifest);
        let err = load(dir.path()).expect_err(want).to_string();
        assert!(err.contains(want), "want {want:?} in: {err}");
        assert!(err.contains("environment.toml"), "the error names the file: {err}");
    }
    let err = load(Path::new("/nonexistent/env")).expect_err("unknown").to_string();
    assert!(
        err.contains("unknown environment `/nonexistent/env`") && err.contains("reverse-text"),
        "{err}"
    );
}

#[test]
fn dataset_paths_may_not_go_through_symbolic_links() {
    let dir = tempfile::tempdir().expect("tempdir");
    let outside = tempfile::tempdir().expect("tempdir");
    std::fs::write(outside.path().join("secret.jsonl"), "{\"question\": \"q\"}\n").expect("write");
    write_package(
        dir.path(),
        &(HEAD.replace("data/train.jsonl", "data/link.jsonl")
            + "[[rubric]]\nreward = \"exact_match\"\n"),
    );
    std::os::unix::fs::symlink(
        outside.path().join("secret.jsonl"),
        dir.path().join("data/link.jsonl"),
    )
    .expect("symlink");
    let err = load(dir.path()).expect_err("symlink").to_string();
    assert!(err.contains("field `dataset.train`") && err.contains("symbolic link"), "{err}");
}

#[test]
fn content_hash_is_stable_and_sensitive() {
    let dir = tempfile::tempdir().expect("tempdir");
    write_package(dir.path(), &format!("{HEAD}[[rubric]]\nreward = \"exact_match\"\n"));
    let a = content_hash(dir.path()).expect("hash");
    assert_eq!(a, content_hash(dir.path()).expect("hash"));
    assert_eq!(a.len(), 64);
    std::fs::create_dir_all(dir.path().join("__pycache__")).expect("mkdir");
    std::fs::write(dir.path().join("__pycache__/x.pyc"), "junk").expect("write");
    assert_eq!(a, content_hash(dir.path()).expect("hash"), "ignored folders do not count");
    std::fs::write(
        dir.path().join("data/train.jsonl"),
        "{\"question\": \"q\", \"answer\": \"abd\"}\n",
    )
    .expect("write");
    assert_ne!(a, content_hash(dir.path()).expect("hash"));
    // Renaming a file changes the hash even with the same bytes.
    let b = content_hash(dir.path()).expect("hash");
    std::fs::rename(dir.path().join("data/train.jsonl"), dir.path().join("data/train2.jsonl"))
        .expect("rename");
    assert_ne!(b, content_hash(dir.path()).expect("hash"));
    std::os::unix::fs::symlink("/etc/passwd", dir.path().join("link")).expect("symlink");
    let err = content_hash(dir.path()).expect_err("symlink").to_string();
    assert!(err.contains("link") && err.contains("symbolic links"), "{err}");
}

#[tokio::test]
async fn script_rewards_run_through_the_code_runner() {
    let dir = tempfile::tempdir().expect("tempdir");
    write_package(
        dir.path(),
        &format!(
            "{HEAD}[[rubric]]\nreward = \"script\"\npath = \"rewards/len.py\"\n[[rubric]]\nreward = \"script\"\nname = \"crash\"\npath = \"rewards/crash.py\"\nweight = 0\n"
        ),
    );
    std::fs::create_dir_all(dir.path().join("rewards")).expect("mkdir");
    std::fs::write(
        dir.path().join("rewards/len.py"),
        "import json, sys\nd = json.load(sys.stdin)\nprint('debug line')\nprint(len(d['parsed_answer']) / 10 + (d['answer'] == 'abc'))\n",
    )
    .expect("script");
    std::fs::write(dir.path().join("rewards/crash.py"), "raise SystemExit('boom')\n")
        .expect("script");
    let env = load(dir.path()).expect("load");
    let ex = example_from_json(json!({"question": "q", "answer": "abc"}), 0, "t").expect("example");
    let r = group(&env, &Scripted::texts(&["four"]), &ex, 1, &runner()).await.remove(0);
    assert_eq!(r.scores["script"], 1.4);
    let e = r.error.expect("the crash is recorded");
    assert_eq!(e.source, "reward:crash");
    assert!(e.message.contains("RuntimeError") && e.message.contains("boom"), "{}", e.message);
}

#[tokio::test]
async fn multi_turn_packages_answer_with_a_sandboxed_script() {
    let dir = tempfile::tempdir().expect("tempdir");
    write_package(
        dir.path(),
        &format!(
            "{HEAD}[env]\nkind = \"multi_turn\"\nrespond = \"respond.py\"\nmax_turns = 5\n[[rubric]]\nreward = \"exact_match\"\n"
        ),
    );
    std::fs::write(
        dir.path().join("respond.py"),
        "import json, sys\nd = json.load(sys.stdin)\nif d['turn'] >= 2:\n    print(json.dumps({'done': True}))\nelse:\n    print(json.dumps({'message': 'again, turn %d' % d['turn']}))\n",
    )
    .expect("script");
    let env = load(dir.path()).expect("load");
    let ex = example_from_json(json!({"question": "q", "answer": "abc"}), 0, "t").expect("example");
    let r = group(&env, &Scripted::texts(&["x", "abc"]), &ex, 1, &runner()).await.remove(0);
    assert_eq!((r.stop_reason, r.metrics["turns"], r.reward), (StopReason::Completed, 2.0, 1.0));
    assert_eq!(r.completion[1].content, "again, turn 1");
    // Without a code runner the environment cannot respond: an error, not a silent end.
    let r = one(&env, &Scripted::texts(&["x"]), &ex).await;
    assert_eq!(r.stop_reason, StopReason::Error);
    assert!(r.error.expect("error").message.contains("no code runner"));
}
