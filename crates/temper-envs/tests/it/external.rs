//! External environments over JSON lines, with the Python example and hostile processes.

use std::path::{Path, PathBuf};

use serde_json::json;
use temper_envs::dataset::example_from_json;
use temper_envs::{LoadOptions, Split};
use temper_protocol::StopReason;

use crate::support::{Scripted, one};

fn allowed() -> LoadOptions {
    LoadOptions { allow_external: true, ..LoadOptions::default() }
}

fn example_dir(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/environments").join(name)
}

#[tokio::test]
async fn python_guess_number_plays_and_scores() {
    let dir = example_dir("guess-number");
    let refused = temper_envs::load(dir.to_str().expect("utf-8"), &LoadOptions::default())
        .expect_err("refused");
    assert!(refused.to_string().contains("without a sandbox"), "{refused}");
    let env =
        temper_envs::load(dir.to_str().expect("utf-8"), &allowed()).expect("load guess-number");
    assert_eq!(env.info.name, "guess-number");
    assert_eq!(env.examples(Split::Eval).expect("eval").len(), 10);
    let ex =
        example_from_json(json!({"question": "Guess.", "answer": "37"}), 0, "t").expect("example");
    let model = Scripted::texts(&["50", "I guess 25", "37"]);
    let r = one(&env, &model, &ex).await;
    assert_eq!(r.error, None);
    assert_eq!((r.stop_reason, r.metrics["turns"]), (StopReason::Completed, 3.0));
    assert_eq!(r.completion[1].content, "50 is wrong: go lower.");
    assert_eq!(r.completion[3].content, "25 is wrong: go higher.");
    // Found on guess 3: 1 − 0.1·2.
    assert!((r.reward - 0.8).abs() < 1e-9, "{}", r.reward);
    // Never found within max_turns: reward 0, stopped by the turn limit.
    let r = one(&env, &Scripted::texts(&["1"]), &ex).await;
    assert_eq!((r.stop_reason, r.metrics["turns"], r.reward), (StopReason::MaxTurns, 8.0, 0.0));
    // Several rollouts share the process concurrently.
    let rollouts =
        crate::support::group(&env, &Scripted::texts(&["37"]), &ex, 6, &Default::default()).await;
    assert!(rollouts.iter().all(|r| r.reward == 1.0 && r.error.is_none()), "{rollouts:?}");
}

fn package(dir: &Path, command: &str, script: &str) {
    std::fs::create_dir_all(dir.join("data")).expect("mkdir");
    std::fs::write(dir.join("data/train.jsonl"), "{\"question\": \"q\", \"answer\": \"a\"}\n")
        .expect("data");
    std::fs::write(dir.join("env.py"), script).expect("script");
    std::fs::write(
        dir.join("environment.toml"),
        format!(
            "[environment]\nname = \"hostile\"\nversion = \"0.1.0\"\n[dataset]\ntrain = \"data/train.jsonl\"\n\
             [env]\nkind = \"external\"\ncommand = {command}\nmax_turns = 3\n"
        ),
    )
    .expect("manifest");
}

#[tokio::test]
async fn broken_processes_fail_the_rollout_not_the_run() {
    let ex = example_from_json(json!({"question": "q", "answer": "a"}), 0, "t").expect("example");
    let cases = [
        // Prints something that is not JSON.
        (
            r#"["python3", "env.py"]"#,
            "import sys\nfor line in sys.stdin:\n    print('hello')\n    sys.stdout.flush()\n",
            "not a JSON object",
        ),
        // Exits at once.
        (r#"["python3", "env.py"]"#, "pass\n", "exited"),
        // Answers with an error.
        (
            r#"["python3", "env.py"]"#,
            "import sys, json\nfor line in sys.stdin:\n    r = json.loads(line)\n    print(json.dumps({'id': r['id'], 'error': 'no dice'}))\n    sys.stdout.flush()\n",
            "no dice",
        ),
        // Cannot start.
        (r#"["/nonexistent/program"]"#, "", "cannot start"),
    ];
    for (command, script, want) in cases {
        let dir = tempfile::tempdir().expect("tempdir");
        package(dir.path(), command, script);
        let env = temper_envs::load(dir.path().to_str().expect("utf-8"), &allowed()).expect("load");
        let r = one(&env, &Scripted::texts(&["x"]), &ex).await;
        let error = r.error.unwrap_or_else(|| panic!("{want}: no error"));
        assert_eq!(r.stop_reason, StopReason::Error, "{want}");
        assert!(error.message.contains(want), "{want}: {}", error.message);
        assert!(error.message.contains("external environment"), "{}", error.message);
    }
}

/// `[[tool]]` with `method`: the model is offered the tool, calls with arguments that break its
/// schema never reach the process, and valid calls are answered by the process's `tool` method
/// with the rollout's id; a turn without calls goes to `step` as before.
#[tokio::test]
async fn declared_tools_are_answered_by_the_process() {
    let tmp = tempfile::tempdir().expect("tmp");
    let dir = tmp.path();
    let script = r#"import json, sys
for line in sys.stdin:
    req = json.loads(line)
    m, p = req["method"], req.get("params", {})
    if m == "reset":
        out = {"prompt": None}
    elif m == "tool":
        out = {"output": "%s for %s: %s" % (p["name"], p["rollout_id"].split("-")[0], p["arguments"]["word"].upper())}
    elif m == "step":
        out = {"messages": [], "done": True}
    elif m == "score":
        out = {"reward": 1.0}
    else:
        out = {}
    print(json.dumps({"id": req["id"], "result": out}), flush=True)
"#;
    package(dir, "[\"python3\", \"env.py\"]", script);
    let toml = dir.join("environment.toml");
    let mut text =
        std::fs::read_to_string(&toml).expect("toml").replace("max_turns = 3", "max_turns = 5");
    text.push_str(
        "[[tool]]\nname = \"shout\"\nmethod = \"shout\"\ndescription = \"Upper-case a word.\"\n\
         parameters = { type = \"object\", properties = { word = { type = \"string\" } }, required = [\"word\"] }\n",
    );
    std::fs::write(&toml, text).expect("toml");
    let env = temper_envs::load(dir.to_str().expect("utf-8"), &allowed()).expect("load");
    assert_eq!(env.interaction.tools()[0].function.name, "shout");
    let model = Scripted::new(|_, i| match i {
        0 => crate::support::Reply::Tools(vec![("shout", r#"{"word": 3}"#)]),
        1 => crate::support::Reply::Tools(vec![("shout", r#"{"word": "hi"}"#)]),
        _ => crate::support::Reply::Text("done"),
    });
    let ex = example_from_json(json!({"question": "q", "answer": "a"}), 0, "t").expect("ex");
    let r = one(&env, &model, &ex).await;
    assert_eq!(r.error, None);
    assert_eq!(r.metrics["turns"], 3.0);
    assert!(
        r.completion[1].content.starts_with("error: the arguments do not match"),
        "{:?}",
        r.completion[1]
    );
    assert_eq!(r.completion[3].content, "shout for 0: HI");
    assert_eq!(r.stop_reason, StopReason::Completed);

    // A method tool in a non-external package, or a program in an external one, is refused.
    let bad = std::fs::read_to_string(&toml)
        .expect("toml")
        .replace("method = \"shout\"", "program = \"env.py\"");
    std::fs::write(&toml, bad).expect("toml");
    let err = temper_envs::load(dir.to_str().expect("utf-8"), &allowed()).expect_err("refused");
    assert!(err.to_string().contains("tool[0].program"), "{err}");
}
