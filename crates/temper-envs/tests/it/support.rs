//! A scripted chat model and helpers.

use std::sync::Mutex;
use std::time::Duration;

use async_trait::async_trait;
use temper_envs::{ChatModel, ChatRequest, Environment, Example, ModelError, ModelReply, Services};
use temper_protocol::{
    FinishReason, FunctionCall, Message, Rollout, SamplingParams, ToolCall, Usage,
};

type Script = dyn Fn(&ChatRequest, usize) -> Reply + Send + Sync;

/// What the scripted model does on one call.
pub enum Reply {
    /// Answer with this text.
    Text(&'static str),
    /// Answer with this owned text.
    Owned(String),
    /// Call tools: (name, raw arguments).
    Tools(Vec<(&'static str, &'static str)>),
    /// A full reply.
    Full(ModelReply),
    /// Sleep, then answer with this text.
    Slow(Duration, &'static str),
    /// Fail.
    Fail,
}

/// A model whose replies come from a script; records every request.
pub struct Scripted {
    script: Box<Script>,
    pub requests: Mutex<Vec<ChatRequest>>,
}

impl std::fmt::Debug for Scripted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Scripted")
    }
}

impl Scripted {
    pub fn new(script: impl Fn(&ChatRequest, usize) -> Reply + Send + Sync + 'static) -> Self {
        Self { script: Box::new(script), requests: Mutex::new(Vec::new()) }
    }

    /// Replies with the given texts in order (the last one repeats).
    pub fn texts<S: AsRef<str>>(texts: &[S]) -> Self {
        let texts: Vec<String> = texts.iter().map(|t| t.as_ref().to_owned()).collect();
        Self::new(move |_, i| Reply::Owned(texts[i.min(texts.len() - 1)].clone()))
    }
}

pub fn reply(text: &str) -> ModelReply {
    ModelReply {
        message: Message::assistant(text),
        finish_reason: FinishReason::Stop,
        usage: Usage { prompt_tokens: 10, completion_tokens: 5 },
        tokens: None,
        policy_version: None,
    }
}

#[async_trait]
impl ChatModel for Scripted {
    async fn chat(&self, request: &ChatRequest) -> Result<ModelReply, ModelError> {
        let i = {
            let mut requests = self.requests.lock().expect("lock");
            requests.push(request.clone());
            requests.len() - 1
        };
        match (self.script)(request, i) {
            Reply::Text(t) => Ok(reply(t)),
            Reply::Owned(t) => Ok(reply(&t)),
            Reply::Full(r) => Ok(r),
            Reply::Tools(calls) => {
                let mut r = reply("");
                r.finish_reason = FinishReason::ToolCalls;
                r.message.tool_calls = calls
                    .into_iter()
                    .enumerate()
                    .map(|(k, (name, args))| ToolCall {
                        id: format!("call_{i}_{k}"),
                        kind: "function".into(),
                        function: FunctionCall { name: name.into(), arguments: args.into() },
                    })
                    .collect();
                Ok(r)
            }
            Reply::Slow(d, t) => {
                tokio::time::sleep(d).await;
                Ok(reply(t))
            }
            Reply::Fail => {
                Err(ModelError::Status { url: "mock".into(), status: 400, body: "bad".into() })
            }
        }
    }
}

/// Runs one scored group of `n` rollouts.
pub async fn group(
    env: &Environment,
    model: &Scripted,
    example: &Example,
    n: u32,
    services: &Services,
) -> Vec<Rollout> {
    env.run_group(model, example, n, &SamplingParams::default(), services).await
}

/// Runs one scored rollout.
pub async fn one(env: &Environment, model: &Scripted, example: &Example) -> Rollout {
    group(env, model, example, 1, &Services::default()).await.remove(0)
}

pub fn close(a: f64, b: f64) -> bool {
    (a - b).abs() < 1e-9
}

/// A reply that calls one tool; `k` numbers the call.
pub fn tool_call(name: &str, arguments: &serde_json::Value, k: usize) -> ModelReply {
    let mut r = reply("");
    r.finish_reason = FinishReason::ToolCalls;
    r.message.tool_calls = vec![ToolCall {
        id: format!("call_{k}"),
        kind: "function".into(),
        function: FunctionCall { name: name.into(), arguments: arguments.to_string() },
    }];
    r
}
