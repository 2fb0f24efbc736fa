//! Agentic rollouts. Multi-turn tool rollouts against the embedded engine, with the real Qwen3
//! tokenizer and chat template: every turn after the first continues from the sampled tokens
//! (`token_prefix`), so the assembled trace is what was sampled and the trainer's recomputation
//! of every sampled token's logprob matches the engine's. Rollouts that hold one sandbox session
//! from the first turn to their hidden tests.

use std::path::PathBuf;
use std::sync::Arc;

use async_trait::async_trait;
use candle_core::{Device, Tensor};
use serde_json::json;
use temper_client::OpenAiClient;
use temper_envs::{
    ChatModel, DataSource, EnvError, EnvInfo, Environment, Example, Interaction, Parser,
    RolloutState, Rubric, Services, Step, TurnLimits,
};
use temper_inference::LocalServer;
use temper_model::{Architecture, ChatTemplate, ModelConfig, Tokenizer, Transformer};
use temper_protocol::{Message, Rollout, SamplingParams, ToolSpec};
use temper_trainer::InProcess;
use temper_trainer::Trainer;
use temper_trainer::loss::LossConfig;
use temper_trainer::optim::{OptimConfig, ScheduleConfig};
use temper_trainer::policy::Policy;
use temper_trainer::step::RlSequence;

fn qwen3_asset(name: &str) -> PathBuf {
    let root = std::env::var_os("TEMPER_ASSETS")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../.assets"));
    let p = root.join("qwen3-tokenizer").join(name);
    assert!(p.exists(), "{} is missing: run scripts/fetch-assets first", p.display());
    p
}

/// A tiny Qwen3-shaped model over the real Qwen3 vocabulary, random but for one thing: it ends
/// its turn (`<|im_end|>`) often, so rollouts take several turns. One embedding dimension is
/// raised for every token, and only `<|im_end|>`'s output row reads it.
fn turn_ending_qwen3(tok: &Tokenizer, im_end: u32) -> Transformer {
    let mut cfg = ModelConfig::tiny(Architecture::Qwen3, tok.vocab_size().next_multiple_of(64));
    cfg.tie_word_embeddings = false;
    cfg.eos_token_ids = vec![im_end];
    cfg.max_position_embeddings = 4096;
    let model = Transformer::init_random(cfg.clone(), 7, &Device::Cpu).unwrap();
    let mut tensors = model.tensors();
    let embed = &tensors["model.embed_tokens.weight"];
    let (rows, width) = embed.dims2().unwrap();
    let mut lift = vec![0f32; width];
    lift[0] = 0.1;
    let lift = Tensor::from_vec(lift, (1, width), &Device::Cpu).unwrap();
    let embed = embed.broadcast_add(&lift).unwrap();
    let head = tensors["lm_head.weight"].to_vec2::<f32>().unwrap();
    let mut head: Vec<f32> = head.into_iter().flatten().collect();
    for r in 0..rows {
        head[r * width] = 0.0;
    }
    head[im_end as usize * width] = 2.5;
    let head = Tensor::from_vec(head, (rows, width), &Device::Cpu).unwrap();
    tensors.insert("model.embed_tokens.weight".into(), embed);
    tensors.insert("lm_head.weight".into(), head);
    Transformer::from_tensors(cfg, tensors, candle_core::DType::F32, &Device::Cpu).unwrap()
}

/// A tool environment that always answers: each model turn gets a `clock` tool result, for as
/// many turns as the limits allow.
#[derive(Debug)]
struct Ticker;

#[async_trait]
impl Interaction for Ticker {
    fn tools(&self) -> Vec<ToolSpec> {
        vec![ToolSpec::function(
            "clock",
            "The current time.",
            json!({"type": "object", "properties": {}}),
        )]
    }

    fn is_done(&self, _: &RolloutState<'_>) -> bool {
        false
    }

    async fn respond(&self, state: &mut RolloutState<'_>, _: &Services) -> Result<Step, EnvError> {
        let text = format!("It is {}:00.", 8 + state.turns);
        Ok(Step::Continue(vec![Message::tool("call_0", "clock", text)]))
    }
}

fn question(_: &mut rand_chacha::ChaCha8Rng, i: usize) -> Example {
    Example {
        example_id: i as u64,
        prompt: vec![Message::user("What time is it? Ask the clock, then answer.")],
        answer: String::new(),
        info: Default::default(),
        task: "clock".into(),
    }
}

fn ticker_env() -> Environment {
    Environment {
        info: EnvInfo::builtin("ticker", "0.1.0", "a clock tool that always answers"),
        system_prompt: Some("You are a careful assistant.".into()),
        parser: Parser::Raw,
        data: DataSource::Generated {
            generate: temper_envs::Generator::new(question),
            seed: 0,
            train_size: 2,
            eval_size: 0,
        },
        interaction: Arc::new(Ticker),
        rubric: Rubric::new(),
        limits: TurnLimits::turns(4),
    }
}

async fn rollouts(env: &Environment, model: &dyn ChatModel) -> Vec<Rollout> {
    let sampling = SamplingParams {
        temperature: Some(1.0),
        max_tokens: Some(24),
        seed: Some(11),
        ..Default::default()
    };
    let mut all = Vec::new();
    for example in env.examples(temper_envs::Split::Train).unwrap() {
        all.extend(env.run_group(model, &example, 4, &sampling, &Services::default()).await);
    }
    all
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn qwen3_tool_rollouts_keep_their_trace_and_match_the_trainer() {
    let tok = Tokenizer::from_file(&qwen3_asset("tokenizer.json")).unwrap();
    let template =
        ChatTemplate::from_tokenizer_config(&qwen3_asset("tokenizer_config.json")).unwrap();
    let im_end = tok.token_to_id("<|im_end|>").unwrap();
    let model = turn_ending_qwen3(&tok, im_end);
    let server = LocalServer::start(&model, &tok, Some(&template), 0).await.unwrap();
    let client = OpenAiClient::new(&server.url, "policy", None).unwrap().with_token_ids();
    let env = ticker_env();

    let got = rollouts(&env, &client).await;
    assert_eq!(got.len(), 8);
    let turns: Vec<f64> = got.iter().map(|r| r.metrics["turns"]).collect();
    assert!(
        turns.iter().filter(|&&t| t >= 3.0).count() >= 2,
        "the rollouts must be multi-turn: turns {turns:?}"
    );
    let mut sequences = Vec::new();
    let mut env_segments = 0;
    for r in &got {
        assert!(r.error.is_none(), "{:?}", r.error);
        assert!(!r.metrics.contains_key("token_trace_broken"), "trace dropped: {r:?}");
        let t = r.tokens.as_ref().expect("every rollout keeps its token trace");
        t.check().unwrap();
        // Each environment segment is the template's continuation: the tool result in Qwen3's
        // tags and the next assistant header, with the sampled end-of-turn token not repeated.
        let mut i = 0;
        while i < t.completion_ids.len() {
            if t.completion_mask[i] == 1 {
                i += 1;
                continue;
            }
            let start = i;
            while i < t.completion_ids.len() && t.completion_mask[i] == 0 {
                i += 1;
            }
            let text = tok.decode(&t.completion_ids[start..i], false).unwrap();
            assert!(text.contains("<tool_response>\nIt is "), "{text:?}");
            assert!(text.ends_with("<|im_start|>assistant\n"), "{text:?}");
            let after_end = t.completion_ids[start - 1] == im_end;
            assert_eq!(!text.starts_with("<|im_end|>"), after_end, "{text:?}");
            env_segments += 1;
        }
        let p = t.prompt_ids.len();
        let mut ids = t.prompt_ids.clone();
        ids.extend(&t.completion_ids);
        let mut mask = vec![false; p];
        mask.extend(t.completion_mask.iter().map(|&m| m == 1));
        let mut lps = vec![0f32; p];
        lps.extend(&t.completion_logprobs);
        sequences.push(RlSequence {
            ids,
            mask,
            sampling_logprobs: lps,
            advantage: 1.0,
            temperature: 1.0,
        });
    }
    assert!(env_segments >= 8, "only {env_segments} environment segments");

    // Token by token: the full forward over the assembled trace against the engine.
    let mut worst = 0f32;
    for s in &sequences {
        let n = s.ids.len();
        let logits = model.forward(&s.ids[..n - 1]).unwrap();
        let targets = Tensor::from_vec(s.ids[1..].to_vec(), n - 1, &Device::Cpu).unwrap();
        let lp = temper_model::ops::token_logprobs(&logits, &targets).unwrap();
        let lp: Vec<f32> = lp.to_vec1().unwrap();
        for i in 1..n {
            if s.mask[i] {
                worst = worst.max((lp[i - 1] - s.sampling_logprobs[i]).abs());
            }
        }
    }
    assert!(worst < 1e-4, "engine and recomputed logprobs differ by up to {worst}");

    // The trainer's own recomputation reports the mismatch KL over the same tokens.
    let policy = Policy { model, tokenizer: tok, template: Some(template) };
    let single = InProcess::group(1).pop().unwrap();
    let mut trainer =
        Trainer::new(policy, OptimConfig::default(), ScheduleConfig::default(), 1, &single, false)
            .unwrap();
    let batch: Vec<&RlSequence> = sequences.iter().collect();
    let tokens: f64 = sequences.iter().map(|s| s.mask.iter().filter(|&&m| m).count() as f64).sum();
    let report = trainer.rl_step(&[batch], &LossConfig::default(), tokens).unwrap();
    let kl = report.trainer_line(1, 0.0).mismatch_kl;
    assert!(kl.abs() <= 1e-6, "mismatch KL {kl}");

    server.shutdown().await;
}

/// A package whose rollouts work in a sandbox session: its own `note` tool, the session tools,
/// task files seeded per row and a hidden-test reward run in the same session after the last
/// turn.
fn fix_add_package(dir: &std::path::Path) -> PathBuf {
    let pkg = dir.join("fix-add");
    for sub in ["data", "tasks/t1", "hidden/t1", "tools"] {
        std::fs::create_dir_all(pkg.join(sub)).unwrap();
    }
    std::fs::write(
        pkg.join("environment.toml"),
        r#"
[environment]
name = "fix-add"
version = "0.1.0"
description = "Fix calc.add; hidden tests decide."
[dataset]
train = "data/train.jsonl"
eval = "data/train.jsonl"
[env]
kind = "tool"
tools = ["bash", "read_file", "write_file", "edit"]
session_files = "tasks/{task_id}"
max_turns = 8
[[tool]]
name = "note"
description = "Append a line to NOTES.md."
parameters = { type = "object", properties = { text = { type = "string" } }, required = ["text"] }
program = "tools/note.py"
[[rubric]]
reward = "session_command"
upload = "hidden/{task_id}"
upload_to = ".hidden"
command = "python3 .hidden/check.py"
score = "fraction"
"#,
    )
    .unwrap();
    std::fs::write(
        pkg.join("data/train.jsonl"),
        "{\"question\": \"calc.add is wrong; fix it.\", \"answer\": \"\", \"task_id\": \"t1\"}\n",
    )
    .unwrap();
    std::fs::write(pkg.join("tasks/t1/calc.py"), "def add(a, b):\n    return a - b\n").unwrap();
    std::fs::write(
        pkg.join("hidden/t1/check.py"),
        "import sys\nsys.path.insert(0, '.')\nimport calc\ncases = [(1, 2, 3), (0, 0, 0), (-1, 1, 0), (5, 5, 10)]\nprint(sum(calc.add(a, b) == c for a, b, c in cases) / len(cases))\n",
    )
    .unwrap();
    std::fs::write(
        pkg.join("tools/note.py"),
        "import json, sys\nargs = json.load(sys.stdin)\nopen('NOTES.md', 'a').write(args['text'] + '\\n')\nprint('noted')\n",
    )
    .unwrap();
    pkg
}

/// A scripted agent: notes, reads, (optionally) edits, checks with bash, answers.
#[derive(Debug)]
struct Agent {
    fix: bool,
    seen: std::sync::Mutex<Vec<String>>,
}

#[async_trait]
impl ChatModel for Agent {
    async fn chat(
        &self,
        request: &temper_envs::ChatRequest,
    ) -> Result<temper_envs::ModelReply, temper_envs::ModelError> {
        let results: Vec<&Message> =
            request.messages.iter().filter(|m| m.role == temper_protocol::Role::Tool).collect();
        if let Some(last) = results.last() {
            self.seen.lock().unwrap().push(last.content.clone());
        }
        let mut steps =
            vec![("note", json!({"text": "started"})), ("read_file", json!({"path": "calc.py"}))];
        if self.fix {
            steps.push((
                "edit",
                json!({"path": "calc.py", "old_string": "a - b", "new_string": "a + b"}),
            ));
        }
        steps.push((
            "bash",
            json!({"command": "cat NOTES.md; python3 -c 'import calc; print(calc.add(2, 3))'"}),
        ));
        Ok(match steps.get(results.len()) {
            Some((name, args)) => tool_reply(vec![call(name, args, results.len())], ""),
            None => tool_reply(Vec::new(), "Fixed."),
        })
    }
}

fn real_sandbox_config() -> temper_sandbox::SandboxConfig {
    temper_sandbox::SandboxConfig {
        helper: (
            PathBuf::from(env!("CARGO_BIN_EXE_temper")),
            vec![temper_sandbox::isolation::HELPER_ARG.into()],
        ),
        pool_size: 2,
        ..temper_sandbox::SandboxConfig::default()
    }
}

/// One session across every turn of a rollout: the package tool's note, the edit and the bash
/// command all see the same files, and the hidden tests run there after the last turn.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rollout_keeps_one_sandbox_session_from_first_turn_to_hidden_tests() {
    let tmp = tempfile::tempdir().unwrap();
    let pkg = fix_add_package(tmp.path());
    let env = temper_envs::package::load_dir(&pkg, &temper_envs::LoadOptions::default()).unwrap();
    let sandbox = temper_sandbox::Sandbox::new(real_sandbox_config())
        .await
        .expect("the sandbox starts on this machine (root, cgroups)");
    let services = Services { code_runner: Some(Arc::new(sandbox.clone())), judge: None };
    let example = env.examples(temper_envs::Split::Train).unwrap().remove(0);
    let sampling = SamplingParams::default();

    let agent = Agent { fix: true, seen: Default::default() };
    let got = env.run_group(&agent, &example, 1, &sampling, &services).await;
    let r = &got[0];
    assert!(r.error.is_none(), "{:?}", r.error);
    assert_eq!(r.metrics["turns"], 5.0);
    let seen = agent.seen.lock().unwrap().clone();
    assert_eq!(seen[0], "noted\n");
    assert_eq!(seen[1], "def add(a, b):\n    return a - b\n");
    assert_eq!(seen[2], "edited calc.py");
    // The note written by the package tool on turn 1 and the edit of turn 3 are both there.
    assert_eq!(seen[3], "started\n5\n");
    assert_eq!(r.reward, 1.0, "hidden tests in the same session: {:?}", r.scores);

    // Without the fix, the hidden tests see the original file.
    let lazy = Agent { fix: false, seen: Default::default() };
    let got = env.run_group(&lazy, &example, 1, &sampling, &services).await;
    assert_eq!(got[0].reward, 0.25, "{:?}", got[0].scores);
    assert_eq!(lazy.seen.lock().unwrap()[2], "started\n-1\n");
    sandbox.shutdown().await;
}

/// A package of hostile tools, and a model that calls them and never stops calling.
fn hostile_package(dir: &std::path::Path) -> PathBuf {
    let pkg = dir.join("hostile");
    std::fs::create_dir_all(pkg.join("data")).unwrap();
    std::fs::create_dir_all(pkg.join("tools")).unwrap();
    std::fs::write(
        pkg.join("environment.toml"),
        r#"
[environment]
name = "hostile"
version = "0.1.0"
[dataset]
train = "data/train.jsonl"
[env]
kind = "tool"
tools = ["bash"]
max_turns = 6
max_tool_output = 4096
tool_timeout_s = 2
[[tool]]
name = "flood"
program = "tools/flood.py"
[[tool]]
name = "hang"
program = "tools/hang.py"
timeout_s = 600
[[tool]]
name = "escape"
parameters = { type = "object", properties = { target = { type = "string" } }, required = ["target"] }
program = "tools/escape.py"
[[tool]]
name = "note"
parameters = { type = "object", properties = { text = { type = "string" } }, required = ["text"], additionalProperties = false }
program = "tools/flood.py"
[[rubric]]
reward = "session_command"
command = "test -f alive"
score = "exit_code"
"#,
    )
    .unwrap();
    std::fs::write(pkg.join("data/train.jsonl"), "{\"question\": \"go\", \"answer\": \"\"}\n")
        .unwrap();
    std::fs::write(pkg.join("tools/flood.py"), "print('x' * 100000)\n").unwrap();
    std::fs::write(pkg.join("tools/hang.py"), "import time\ntime.sleep(600)\n").unwrap();
    std::fs::write(
        pkg.join("tools/escape.py"),
        r#"import json, os, sys
target = json.load(sys.stdin)["target"]
out = []
for what, f in [
    ("write", lambda: open(target, "w").write("escaped")),
    ("shadow", lambda: open("/etc/shadow").read()),
    ("host root", lambda: os.listdir("/proc/1/root/root")),
    ("setuid", lambda: os.setuid(0)),
]:
    try:
        f()
        out.append(what + ": ALLOWED")
    except Exception as e:
        out.append(what + ": denied (" + type(e).__name__ + ")")
print("\n".join(out))
"#,
    )
    .unwrap();
    pkg
}

fn call(name: &str, args: &serde_json::Value, k: usize) -> temper_protocol::ToolCall {
    temper_protocol::ToolCall {
        id: format!("call_{k}"),
        kind: "function".into(),
        function: temper_protocol::FunctionCall { name: name.into(), arguments: args.to_string() },
    }
}

fn tool_reply(calls: Vec<temper_protocol::ToolCall>, text: &str) -> temper_envs::ModelReply {
    let mut message = Message::assistant(text);
    let finish = if calls.is_empty() {
        temper_protocol::FinishReason::Stop
    } else {
        temper_protocol::FinishReason::ToolCalls
    };
    message.tool_calls = calls;
    temper_envs::ModelReply {
        message,
        finish_reason: finish,
        usage: Default::default(),
        tokens: None,
        policy_version: None,
    }
}

/// Floods, hangs, breaks the schema, tries to escape, then calls `bash` forever.
#[derive(Debug)]
struct Hostile {
    target: PathBuf,
}

#[async_trait]
impl ChatModel for Hostile {
    async fn chat(
        &self,
        request: &temper_envs::ChatRequest,
    ) -> Result<temper_envs::ModelReply, temper_envs::ModelError> {
        let k = request.messages.iter().filter(|m| m.role == temper_protocol::Role::Tool).count();
        let c = match k {
            0 => call("flood", &json!({}), k),
            1 => call("hang", &json!({}), k),
            2 => call("note", &json!({"text": 5, "extra": true}), k),
            3 => call("escape", &json!({"target": self.target}), k),
            _ => call("bash", &json!({"command": "touch alive; echo alive"}), k),
        };
        Ok(tool_reply(vec![c], ""))
    }
}

/// One bash call, then an answer: the smallest session rollout.
#[derive(Debug)]
struct OneCommand;

#[async_trait]
impl ChatModel for OneCommand {
    async fn chat(
        &self,
        request: &temper_envs::ChatRequest,
    ) -> Result<temper_envs::ModelReply, temper_envs::ModelError> {
        if request.messages.iter().any(|m| m.role == temper_protocol::Role::Tool) {
            return Ok(tool_reply(Vec::new(), "done"));
        }
        Ok(tool_reply(vec![call("bash", &json!({"command": "echo hi > alive; cat alive"}), 0)], ""))
    }
}

/// The slot cgroups of the sandbox whose cgroups start with `prefix` (a session's slot keeps
/// one until it is destroyed with its processes), once each over the cgroup hierarchies.
fn slot_cgroups(prefix: &str) -> std::collections::BTreeSet<String> {
    ["/sys/fs/cgroup/temper", "/sys/fs/cgroup/memory/temper", "/sys/fs/cgroup/pids/temper"]
        .iter()
        .filter_map(|d| std::fs::read_dir(d).ok())
        .flatten()
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(prefix))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_tools_are_contained_and_session_rollouts_leave_nothing_behind() {
    let tmp = tempfile::tempdir().unwrap();
    let pkg = hostile_package(tmp.path());
    let env = temper_envs::package::load_dir(&pkg, &temper_envs::LoadOptions::default()).unwrap();
    let sandbox = temper_sandbox::Sandbox::new(real_sandbox_config())
        .await
        .expect("the sandbox starts on this machine (root, cgroups)");
    let services = Services { code_runner: Some(Arc::new(sandbox.clone())), judge: None };
    let example = env.examples(temper_envs::Split::Train).unwrap().remove(0);
    let sampling = SamplingParams::default();

    let target = tmp.path().join("ESCAPED");
    let start = std::time::Instant::now();
    let r = env
        .run_group(&Hostile { target: target.clone() }, &example, 1, &sampling, &services)
        .await
        .remove(0);
    assert!(start.elapsed() < std::time::Duration::from_secs(20), "{:?}", start.elapsed());
    assert_eq!(r.stop_reason, temper_protocol::StopReason::MaxTurns, "the model never stops");
    let results: Vec<&str> = r
        .completion
        .iter()
        .filter(|m| m.role == temper_protocol::Role::Tool)
        .map(|m| m.content.as_str())
        .collect();
    assert_eq!(results.len(), 5, "{results:?}");
    // Oversized output: cut at the limit, with a note.
    assert!(results[0].len() < 4096 + 100, "{}", results[0].len());
    assert!(
        results[0].ends_with("[output truncated: 4096 of 100001 bytes shown]"),
        "{}",
        &results[0][4000..]
    );
    // A hanging tool is stopped at tool_timeout_s (its own 600 s does not lift it).
    assert!(results[1].contains("[stopped: it ran past its time limit]"), "{}", results[1]);
    // Arguments that break the schema never reach the program.
    assert!(
        results[2].starts_with("error: the arguments do not match `note`'s schema"),
        "{}",
        results[2]
    );
    assert!(results[2].contains("text") && results[2].contains("extra"), "{}", results[2]);
    // The escape attempts fail inside the sandbox; nothing appears on the host.
    assert!(!results[3].contains("ALLOWED"), "{}", results[3]);
    assert_eq!(results[3].matches("denied").count(), 4, "{}", results[3]);
    assert!(!target.exists(), "a tool wrote {} on the host", target.display());
    // The session survived all of it, and the reward ran in it after the last turn.
    assert_eq!(results[4], "alive\n");
    assert_eq!(r.reward, 1.0, "{:?} {:?}", r.scores, r.error);

    // 200 session rollouts, 8 at a time: then no session slot (and so no process) is left,
    // beyond the warm pool.
    for _ in 0..25 {
        let got = env.run_group(&OneCommand, &example, 8, &sampling, &services).await;
        assert!(got.iter().all(|r| r.reward == 1.0), "{:?}", got[0].error);
    }
    let prefix = sandbox.cgroup_prefix();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(15);
    loop {
        let left = slot_cgroups(&prefix);
        if left.len() <= 2 {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "left behind: {left:?}");
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    sandbox.shutdown().await;

    // The unsandboxed runner's sessions are temporary folders: none is left either.
    let root = tmp.path().join("sessions");
    std::fs::create_dir_all(&root).unwrap();
    let plain = temper_sandbox::Unsandboxed::new().with_session_root(&root);
    let services = Services { code_runner: Some(Arc::new(plain)), judge: None };
    for _ in 0..25 {
        let got = env.run_group(&OneCommand, &example, 8, &sampling, &services).await;
        assert!(got.iter().all(|r| r.reward == 1.0), "{:?}", got[0].error);
    }
    let left: Vec<_> = std::fs::read_dir(&root).unwrap().collect();
    assert!(left.is_empty(), "session folders left: {left:?}");
}

/// The sandbox server's sessions through `SandboxClient`: files and commands persist across
/// calls, paths that leave the folder are refused, and `close` deletes the session.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn remote_sessions_keep_their_files_until_closed() {
    use temper_verify::code::CodeRunner;
    let sandbox = temper_sandbox::Sandbox::new(real_sandbox_config()).await.expect("sandbox");
    let state = temper_sandbox::server::state(sandbox.clone(), Default::default());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let app = temper_sandbox::server::router(state);
    tokio::spawn(async move { axum::serve(listener, app).await });
    let client = temper_client::sandbox::SandboxClient::new(&base).unwrap();

    let session = client.open_session().await.unwrap();
    session.write_file("src/a b.txt", b"hello").await.unwrap();
    let limits = temper_protocol::Limits::default();
    let r = session.exec("cat 'src/a b.txt' > copy; echo made", "", limits).await.unwrap();
    assert_eq!(r.stdout, "made\n");
    assert_eq!(session.read_file("copy", 1 << 20).await.unwrap(), b"hello");
    assert!(session.read_file("copy", 3).await.unwrap_err().to_string().contains("over 3"));
    let err = session.write_file("../escape", b"x").await.unwrap_err().to_string();
    assert!(err.contains("relative path"), "{err}");
    let health: serde_json::Value =
        reqwest::get(format!("{base}/health")).await.unwrap().json().await.unwrap();
    assert_eq!(health["sessions"], 1);
    session.close().await;
    let health: serde_json::Value =
        reqwest::get(format!("{base}/health")).await.unwrap().json().await.unwrap();
    assert_eq!(health["sessions"], 0, "close deletes the session");
    sandbox.shutdown().await;
}

/// A hostile engineer on swe-lite: deletes the tests, leaves forked processes, fills the disk
/// and sleeps past the tool limit, one call per turn.
#[derive(Debug)]
struct Vandal;

#[async_trait]
impl ChatModel for Vandal {
    async fn chat(
        &self,
        request: &temper_envs::ChatRequest,
    ) -> Result<temper_envs::ModelReply, temper_envs::ModelError> {
        let done =
            request.messages.iter().filter(|m| m.role == temper_protocol::Role::Tool).count();
        let steps = [
            "rm -rf tests && echo deleted",
            "for i in $(seq 1 40); do (setsid sleep 333 &) ; done; echo forked",
            "dd if=/dev/zero of=fill bs=1M count=100000 2>/dev/null; echo filled; df -k . | tail -1",
            "sleep 600",
        ];
        Ok(match steps.get(done) {
            Some(command) => tool_reply(vec![call("bash", &json!({"command": command}), done)], ""),
            None => tool_reply(Vec::new(), "All fixed."),
        })
    }
}

fn sleepers() -> usize {
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok())
        .filter_map(|e| std::fs::read(e.path().join("cmdline")).ok())
        .filter(|c| c.starts_with(b"sleep\x00333"))
        .count()
}

/// swe-lite in the real sandbox: the vandal's rollout scores 0 without a reward error, and once
/// it is scored no process, session slot or file of it is left.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hostile_swe_lite_agent_scores_zero_and_leaves_nothing() {
    let pkg =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../examples/environments/swe-lite");
    let env = temper_envs::package::load_dir(&pkg, &temper_envs::LoadOptions::default()).unwrap();
    let sandbox = temper_sandbox::Sandbox::new(real_sandbox_config())
        .await
        .expect("the sandbox starts on this machine (root, cgroups)");
    let services = Services { code_runner: Some(Arc::new(sandbox.clone())), judge: None };
    let example = env.examples(temper_envs::Split::Eval).unwrap().remove(0);
    let before = sleepers();
    let r =
        env.run_group(&Vandal, &example, 1, &SamplingParams::default(), &services).await.remove(0);
    let results: Vec<&str> = r
        .completion
        .iter()
        .filter(|m| m.role == temper_protocol::Role::Tool)
        .map(|m| m.content.as_str())
        .collect();
    assert!(results[0].contains("deleted") && results[1].contains("forked"), "{results:?}");
    assert!(results[2].contains("filled"), "{}", results[2]);
    assert!(results[3].contains("[stopped: it ran past its time limit]"), "{}", results[3]);
    assert!(r.error.is_none(), "{:?}", r.error);
    assert_eq!(r.reward, 0.0, "{:?}", r.scores);

    let prefix = sandbox.cgroup_prefix();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(15);
    while slot_cgroups(&prefix).len() > 2 || sleepers() > before {
        assert!(
            std::time::Instant::now() < deadline,
            "left behind: {:?}, {} sleepers",
            slot_cgroups(&prefix),
            sleepers()
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    sandbox.shutdown().await;
}
