//! Multi-turn tool rollouts against the embedded engine, with the real Qwen3 tokenizer and chat
//! template: every turn after the first continues from the sampled tokens (`token_prefix`), so
//! the assembled trace is what was sampled and the trainer's recomputation of every sampled
//! token's logprob matches the engine's.

use std::path::PathBuf;
use std::sync::Arc;

use async_trait::async_trait;
use candle_core::{Device, IndexOp, Tensor};
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
        data: DataSource::Generated { generate: question, seed: 0, train_size: 2, eval_size: 0 },
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
        let lp: Vec<f32> = lp.i(..).unwrap().to_vec1().unwrap();
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
