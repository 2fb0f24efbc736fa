//! The orchestrator's configuration: `[orchestrator]`, `[inference]`, `[[env]]` and `[output]`
//! of an RL config.

use serde::{Deserialize, Serialize};
use temper_protocol::SamplingParams;
use temper_protocol::config::{EvalConfig, OutputConfig};

use crate::OrchestratorError;

/// Everything `temper orchestrator` reads.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OrchestratorConfig {
    /// The loop.
    #[serde(default)]
    pub orchestrator: LoopConfig,
    /// Where the inference servers are.
    #[serde(default)]
    pub inference: InferenceConfig,
    /// The environments to train on (at least one).
    #[serde(default)]
    pub env: Vec<EnvConfig>,
    /// The run directory (default `outputs/rl`, shared with the trainer).
    #[serde(default = "OutputConfig::rl")]
    pub output: OutputConfig,
}

/// `[orchestrator]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LoopConfig {
    /// Trainer steps to feed (one batch each).
    pub steps: u64,
    /// Rollouts per step (a multiple of `group_size`).
    pub batch_size: usize,
    /// Rollouts per task.
    pub group_size: usize,
    /// Most rollouts in flight at once.
    pub max_concurrent: usize,
    /// How many steps the rollouts may run ahead of the trainer: the batch of step n is sampled
    /// once weights v(n−1−async_level) are loaded. 0 is fully on-policy.
    pub async_level: u64,
    /// Rollouts started by a policy more than this many versions older than the one a batch
    /// trains on are dropped (in flight: cancelled; queued: swept).
    pub max_off_policy_steps: u64,
    /// Length of a packed training row (a sample longer than this is dropped and counted).
    pub seq_len: usize,
    /// Packed rows per micro-batch (one forward and backward pass of the trainer).
    pub micro_batch_rows: usize,
    /// Data-parallel ranks of the trainer (one batch file each).
    pub world_size: u32,
    /// Seed of task sampling.
    pub seed: u64,
    /// Sampling of training rollouts.
    pub sampling: SamplingConfig,
    /// How advantages are computed and which groups are kept.
    pub advantage: AdvantageConfig,
    /// Held-out evaluation.
    pub eval: EvalConfig,
    /// Seconds to wait for a weight update on one server.
    pub update_timeout_s: f64,
    /// Serve Prometheus metrics on this address (`host:port`), if set.
    pub metrics_addr: Option<String>,
    /// A `temper sandbox serve` URL for code rewards and tools (default: a local sandbox when
    /// running as root).
    pub sandbox: Option<String>,
    /// Without a sandbox, run model-written code as plain processes of this user (trusted code
    /// only).
    pub allow_unsandboxed_code: bool,
    /// The model `llm_judge` rewards ask (none: such rewards fail, counted as errors).
    pub judge: Option<JudgeConfig>,
}

/// `[orchestrator.judge]`: an OpenAI-compatible server whose model grades rollouts for
/// `llm_judge` rewards, as `temper eval --judge-model` does.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct JudgeConfig {
    /// Base URL of the server (`http://host:port/v1`).
    pub base_url: String,
    /// The judge's model name there.
    pub model: String,
    /// Environment variable holding its API key (none: no key is sent).
    pub api_key_var: Option<String>,
    /// Most judge requests in flight at once.
    pub max_concurrent: usize,
    /// Seconds each request may take.
    pub timeout_s: f64,
    /// Retries of a failed request (HTTP 408, 429, 5xx, timeouts) before the reward fails.
    pub max_retries: u32,
}

impl Default for JudgeConfig {
    fn default() -> Self {
        Self {
            base_url: String::new(),
            model: String::new(),
            api_key_var: None,
            max_concurrent: 16,
            timeout_s: 120.0,
            max_retries: 3,
        }
    }
}

impl JudgeConfig {
    fn check(&self) -> Result<(), String> {
        if !(self.base_url.starts_with("http://") || self.base_url.starts_with("https://")) {
            return Err(format!(
                "orchestrator.judge.base_url is {:?}; expected an http:// or https:// URL such as http://127.0.0.1:8001/v1",
                self.base_url
            ));
        }
        if self.model.trim().is_empty() {
            return Err("orchestrator.judge.model is empty: name the judge's model".into());
        }
        if self.max_concurrent == 0 {
            return Err("orchestrator.judge.max_concurrent must be ≥ 1".into());
        }
        if !positive(self.timeout_s) {
            return Err("orchestrator.judge.timeout_s must be > 0".into());
        }
        Ok(())
    }

    /// The judge as a chat model: a client with its retries, timeout and concurrency limit. The
    /// key variable, when named, must be set.
    pub fn client(&self) -> Result<std::sync::Arc<dyn temper_envs::ChatModel>, OrchestratorError> {
        let key = match &self.api_key_var {
            None => None,
            Some(var) => match std::env::var(var) {
                Ok(k) if !k.is_empty() => Some(k),
                _ => {
                    return Err(OrchestratorError::Config(format!(
                        "orchestrator.judge.api_key_var names {var}, which is not set"
                    )));
                }
            },
        };
        let retry = temper_client::RetryPolicy {
            max_retries: self.max_retries,
            ..temper_client::RetryPolicy::default()
        };
        let client = temper_client::OpenAiClient::new(&self.base_url, &self.model, key)
            .map_err(|e| OrchestratorError::Config(format!("orchestrator.judge: {e}")))?
            .with_retry(retry)
            .with_timeout(std::time::Duration::from_secs_f64(self.timeout_s));
        Ok(std::sync::Arc::new(temper_client::Limited::new(client, self.max_concurrent)))
    }
}

impl Default for LoopConfig {
    fn default() -> Self {
        Self {
            steps: 100,
            batch_size: 64,
            group_size: 8,
            max_concurrent: 64,
            async_level: 1,
            max_off_policy_steps: 8,
            seq_len: 2048,
            micro_batch_rows: 8,
            world_size: 1,
            seed: 0,
            sampling: SamplingConfig::default(),
            advantage: AdvantageConfig::default(),
            eval: EvalConfig::default(),
            update_timeout_s: 300.0,
            metrics_addr: None,
            sandbox: None,
            allow_unsandboxed_code: false,
            judge: None,
        }
    }
}

/// `[orchestrator.sampling]`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SamplingConfig {
    /// Sampling temperature (the trainer divides its logits by the same value).
    pub temperature: f64,
    /// Most tokens per model turn.
    pub max_tokens: u32,
    /// Nucleus sampling (1 = off). Anything but 1 makes the sampler's distribution differ from
    /// the one the trainer computes; the mismatch shows in `mismatch_kl`.
    pub top_p: f64,
}

impl Default for SamplingConfig {
    fn default() -> Self {
        Self { temperature: 1.0, max_tokens: 512, top_p: 1.0 }
    }
}

impl SamplingConfig {
    /// The request options.
    pub fn params(&self, seed: Option<u64>) -> SamplingParams {
        SamplingParams {
            temperature: Some(self.temperature),
            top_p: (self.top_p < 1.0).then_some(self.top_p),
            max_tokens: Some(self.max_tokens),
            seed,
            ..SamplingParams::default()
        }
    }
}

/// Which advantage estimator.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AdvantageKind {
    /// A_i = r_i − mean(r) (optionally divided by the std).
    #[default]
    Grpo,
    /// A_i = r_i − mean of the other rewards.
    Rloo,
}

/// `[orchestrator.advantage]`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AdvantageConfig {
    /// The estimator.
    #[serde(rename = "type")]
    pub kind: AdvantageKind,
    /// Divide GRPO advantages by the group's reward std (original GRPO).
    pub std_normalize: bool,
    /// Do not train on groups whose rewards are all equal.
    pub filter_zero_advantage: bool,
    /// Replace filtered groups with new ones so each batch keeps its size.
    pub resample_zero_advantage: bool,
    /// Reward given to a rollout cut at `max_tokens` (overlong penalty); unset keeps its reward.
    pub truncated_reward: Option<f64>,
    /// Subtracted from the reward per completion token (length penalty); 0 is off.
    pub length_penalty: f64,
}

impl Default for AdvantageConfig {
    fn default() -> Self {
        Self {
            kind: AdvantageKind::Grpo,
            std_normalize: false,
            filter_zero_advantage: true,
            resample_zero_advantage: false,
            truncated_reward: None,
            length_penalty: 0.0,
        }
    }
}

/// `[inference]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct InferenceConfig {
    /// OpenAI-compatible base URLs (`http://host:port/v1`). Empty: `temper rl` starts one server
    /// and fills this in.
    pub base_urls: Vec<String>,
    /// The model name to send.
    pub model_name: String,
    /// Seconds allowed for one request.
    pub timeout_s: f64,
    /// Retries of a failed request (HTTP 408/429/5xx, timeouts, refused connections).
    pub max_retries: u32,
    /// Variable holding the API key, if the servers want one.
    pub api_key_var: Option<String>,
    /// Address `temper rl` starts its server on (port 0: a free one).
    pub addr: String,
    /// `temper rl`'s server: sequences decoding at once.
    pub max_running: usize,
}

impl Default for InferenceConfig {
    fn default() -> Self {
        Self {
            base_urls: Vec::new(),
            model_name: "policy".into(),
            timeout_s: 300.0,
            max_retries: 5,
            api_key_var: None,
            addr: "127.0.0.1:0".into(),
            max_running: 64,
        }
    }
}

/// One `[[env]]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EnvConfig {
    /// A built-in environment name or a folder holding `environment.toml`.
    pub id: String,
    /// Relative share of the tasks drawn.
    #[serde(default = "one")]
    pub weight: f64,
    /// Seed of generated datasets.
    #[serde(default)]
    pub seed: u64,
    /// Generated train examples (default: the environment's).
    #[serde(default)]
    pub train_size: Option<usize>,
    /// Generated held-out examples (default: the environment's).
    #[serde(default)]
    pub eval_size: Option<usize>,
    /// Replace the environment's system prompt (`""` drops it), as the SFT warmup did.
    #[serde(default)]
    pub system_prompt: Option<String>,
    /// Let an external environment start its process (it runs unsandboxed, as this user).
    #[serde(default)]
    pub allow_external: bool,
}

fn one() -> f64 {
    1.0
}

fn positive(x: f64) -> bool {
    x.is_finite() && x > 0.0
}

impl OrchestratorConfig {
    /// Checks every field, naming it.
    pub fn validate(&self) -> Result<(), OrchestratorError> {
        let o = &self.orchestrator;
        let bad = |m: String| Err(OrchestratorError::Config(m));
        if o.steps == 0 {
            return bad("orchestrator.steps must be > 0".into());
        }
        if o.group_size < 2 {
            return bad(format!(
                "orchestrator.group_size is {}; advantages need at least 2 rollouts per task",
                o.group_size
            ));
        }
        if o.batch_size == 0 || !o.batch_size.is_multiple_of(o.group_size) {
            return bad(format!(
                "orchestrator.batch_size ({}) must be a positive multiple of group_size ({})",
                o.batch_size, o.group_size
            ));
        }
        if o.max_concurrent < o.group_size {
            return bad(format!(
                "orchestrator.max_concurrent ({}) must be at least group_size ({})",
                o.max_concurrent, o.group_size
            ));
        }
        if o.seq_len < 2 {
            return bad("orchestrator.seq_len must be at least 2".into());
        }
        if o.micro_batch_rows == 0 {
            return bad("orchestrator.micro_batch_rows must be ≥ 1".into());
        }
        if o.world_size == 0 {
            return bad("orchestrator.world_size must be ≥ 1".into());
        }
        if o.async_level > o.max_off_policy_steps {
            return bad(format!(
                "orchestrator.async_level ({}) exceeds max_off_policy_steps ({}): every rollout would be dropped",
                o.async_level, o.max_off_policy_steps
            ));
        }
        let s = &o.sampling;
        if !(s.temperature.is_finite() && s.temperature > 0.0) {
            return bad(format!(
                "orchestrator.sampling.temperature is {}; training needs a positive temperature",
                s.temperature
            ));
        }
        if !(s.top_p > 0.0 && s.top_p <= 1.0) {
            return bad(format!("orchestrator.sampling.top_p is {}; expected (0, 1]", s.top_p));
        }
        if s.max_tokens == 0 {
            return bad("orchestrator.sampling.max_tokens must be > 0".into());
        }
        let a = &o.advantage;
        if a.truncated_reward.is_some_and(|r| !r.is_finite()) || !a.length_penalty.is_finite() {
            return bad("orchestrator.advantage: rewards and penalties must be finite".into());
        }
        o.eval.check("orchestrator.eval").map_err(OrchestratorError::Config)?;
        if let Some(judge) = &o.judge {
            judge.check().map_err(OrchestratorError::Config)?;
        }
        if !positive(o.update_timeout_s) {
            return bad("orchestrator.update_timeout_s must be > 0".into());
        }
        if !positive(self.inference.timeout_s) {
            return bad("inference.timeout_s must be > 0".into());
        }
        if self.inference.base_urls.is_empty() {
            return bad(
                "inference.base_urls is empty: name the OpenAI-compatible servers to use (temper rl fills it in when it starts its own)"
                    .into(),
            );
        }
        if self.env.is_empty() {
            return bad("no [[env]]: name at least one environment to train on".into());
        }
        for (i, env) in self.env.iter().enumerate() {
            if !positive(env.weight) {
                return bad(format!("env[{i}] ({}): weight must be > 0", env.id));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(extra: &str) -> OrchestratorConfig {
        toml::from_str(&format!(
            "[inference]\nbase_urls = [\"http://127.0.0.1:1/v1\"]\n[[env]]\nid = \"reverse-text\"\n{extra}"
        ))
        .expect("toml")
    }

    #[test]
    fn defaults_validate_and_mistakes_name_the_field() {
        let ok = parse("");
        assert_eq!(ok.validate().map_err(|e| e.to_string()), Ok(()));
        assert_eq!(ok.orchestrator.async_level, 1);
        assert_eq!(ok.env[0].weight, 1.0);
        let mut c = ok.clone();
        c.orchestrator.batch_size = 12;
        c.orchestrator.group_size = 8;
        assert!(c.validate().unwrap_err().to_string().contains("batch_size (12)"));
        let mut c = ok.clone();
        c.orchestrator.async_level = 9;
        assert!(c.validate().unwrap_err().to_string().contains("async_level"));
        let mut c = ok.clone();
        c.orchestrator.sampling.temperature = 0.0;
        assert!(c.validate().unwrap_err().to_string().contains("temperature"));
        let mut c = ok.clone();
        c.env.clear();
        assert!(c.validate().unwrap_err().to_string().contains("[[env]]"));
        let judge =
            parse("[orchestrator.judge]\nbase_url = \"http://127.0.0.1:9/v1\"\nmodel = \"j\"");
        assert_eq!(judge.validate().map_err(|e| e.to_string()), Ok(()));
        assert_eq!(judge.orchestrator.judge.as_ref().map(|j| j.max_concurrent), Some(16));
        for (extra, says) in [
            ("base_url = \"localhost:9\"\nmodel = \"j\"", "judge.base_url"),
            ("base_url = \"http://h/v1\"", "judge.model is empty"),
            ("base_url = \"http://h/v1\"\nmodel = \"j\"\nmax_concurrent = 0", "max_concurrent"),
            ("base_url = \"http://h/v1\"\nmodel = \"j\"\ntimeout_s = 0", "timeout_s"),
        ] {
            let err = parse(&format!("[orchestrator.judge]\n{extra}")).validate().unwrap_err();
            assert!(err.to_string().contains(says), "{extra}: {err}");
        }
        let mut unset = judge.orchestrator.judge.expect("judge");
        unset.api_key_var = Some("TEMPER_TEST_NO_SUCH_KEY_VAR".into());
        let err = unset.client().map(|_| ()).unwrap_err().to_string();
        assert!(err.contains("TEMPER_TEST_NO_SUCH_KEY_VAR, which is not set"), "{err}");
        let mut c = ok;
        c.inference.base_urls.clear();
        assert!(c.validate().unwrap_err().to_string().contains("base_urls"));
        let err = toml::from_str::<OrchestratorConfig>("[orchestrator]\ngroup_sise = 4\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("group_sise"), "{err}");
    }
}
