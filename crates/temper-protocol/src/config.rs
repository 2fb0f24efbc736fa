//! Config sections that several roles read in the same shape: `[output]` (the run directory)
//! and the held-out evaluation (`[eval]` of `temper sft`, `[orchestrator.eval]` of RL).
//!
//! Contract: a role reads the section with the default its job documents (an RL role's run
//! directory is `outputs/rl`, an SFT run's `outputs/sft`), and checks it with the same rules.

use std::path::PathBuf;

/// `[output]` of every config that writes a run directory (`temper sft`, `temper trainer`,
/// `temper orchestrator`, `temper rl`): one shape, whose default depends on the job.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OutputConfig {
    /// The run directory.
    pub dir: PathBuf,
}

impl OutputConfig {
    /// The default of an RL run's roles: `outputs/rl`.
    pub fn rl() -> Self {
        Self { dir: PathBuf::from("outputs/rl") }
    }

    /// The default of an SFT run: `outputs/sft`.
    pub fn sft() -> Self {
        Self { dir: PathBuf::from("outputs/sft") }
    }
}

/// Held-out evaluation during training: `[eval]` of `temper sft`, `[orchestrator.eval]` of RL.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct EvalConfig {
    /// Evaluate the weights of every this many steps (and the first and last); 0: only the
    /// last (SFT) or never (RL).
    pub every: u64,
    /// Held-out examples per environment (0: all in RL; none in SFT).
    pub num_examples: usize,
    /// Samples per example (avg@k, pass@k).
    pub rollouts_per_example: usize,
    /// Sampling temperature of evaluation.
    pub temperature: f64,
    /// Completion-token budget of evaluation (unset: the RL sampling budget; 256 in SFT).
    pub max_tokens: Option<u32>,
    /// A rollout passes when its reward is at least this.
    pub pass_threshold: f64,
}

impl Default for EvalConfig {
    fn default() -> Self {
        Self {
            every: 0,
            num_examples: 50,
            rollouts_per_example: 1,
            temperature: 0.0,
            max_tokens: None,
            pass_threshold: 0.5,
        }
    }
}

impl EvalConfig {
    /// Checks the values; `section` names the section in the message (`orchestrator.eval`).
    pub fn check(&self, section: &str) -> Result<(), String> {
        if self.rollouts_per_example == 0 {
            return Err(format!("{section}.rollouts_per_example must be > 0"));
        }
        if self.max_tokens == Some(0) {
            return Err(format!("{section}.max_tokens must be > 0"));
        }
        if !(self.temperature.is_finite() && self.temperature >= 0.0) {
            return Err(format!("{section}.temperature must be ≥ 0, got {}", self.temperature));
        }
        if !self.pass_threshold.is_finite() {
            return Err(format!("{section}.pass_threshold must be finite"));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_shape_with_named_errors() {
        let e: EvalConfig = serde_json::from_str(r#"{"every": 5, "max_tokens": 48}"#).unwrap();
        assert_eq!(
            (e.every, e.num_examples, e.max_tokens, e.rollouts_per_example),
            (5, 50, Some(48), 1)
        );
        assert_eq!(e.check("eval"), Ok(()));
        let bad = EvalConfig { rollouts_per_example: 0, ..e };
        assert_eq!(bad.check("eval").unwrap_err(), "eval.rollouts_per_example must be > 0");
        let bad = EvalConfig { temperature: -1.0, ..e };
        assert!(
            bad.check("orchestrator.eval")
                .unwrap_err()
                .starts_with("orchestrator.eval.temperature")
        );
        assert!(serde_json::from_str::<EvalConfig>(r#"{"evry": 5}"#).is_err());
        assert!(serde_json::from_str::<OutputConfig>(r#"{}"#).is_err());
    }
}
