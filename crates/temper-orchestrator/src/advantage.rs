//! Group advantages: rewards shaped by the overlong and length penalties, then
//! `grpo` (r − mean, optionally over the std) or `rloo` (r − mean of the others).

use temper_protocol::{Rollout, StopReason};

use crate::config::{AdvantageConfig, AdvantageKind};

/// The reward a rollout trains with: its rubric reward, replaced by `truncated_reward` when it
/// was cut at the token limit, minus `length_penalty` per completion token.
pub fn shaped_reward(rollout: &Rollout, cfg: &AdvantageConfig) -> f64 {
    let truncated = matches!(rollout.stop_reason, StopReason::Length | StopReason::TokenBudget);
    let base = match cfg.truncated_reward {
        Some(r) if truncated => r,
        _ => rollout.reward,
    };
    let tokens = rollout.metrics.get("completion_tokens").copied().unwrap_or(0.0);
    base - cfg.length_penalty * tokens
}

/// Advantages of one group's rewards.
pub fn advantages(rewards: &[f64], cfg: &AdvantageConfig) -> Vec<f64> {
    let n = rewards.len();
    if n == 0 {
        return Vec::new();
    }
    let sum: f64 = rewards.iter().sum();
    let mean = sum / n as f64;
    match cfg.kind {
        AdvantageKind::Grpo => {
            let centred = rewards.iter().map(|r| r - mean);
            if cfg.std_normalize {
                let var = rewards.iter().map(|r| (r - mean).powi(2)).sum::<f64>() / n as f64;
                let std = var.sqrt();
                // Zero variance: every advantage is 0 whatever the divisor.
                centred.map(|a| if std > 0.0 { a / (std + 1e-6) } else { 0.0 }).collect()
            } else {
                centred.collect()
            }
        }
        AdvantageKind::Rloo if n < 2 => vec![0.0; n],
        AdvantageKind::Rloo => rewards.iter().map(|r| r - (sum - r) / (n - 1) as f64).collect(),
    }
}

/// Whether a group's rewards carry no signal (all equal).
pub fn is_zero_advantage(rewards: &[f64]) -> bool {
    rewards.windows(2).all(|w| (w[0] - w[1]).abs() <= 1e-12)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(kind: AdvantageKind, std_normalize: bool) -> AdvantageConfig {
        AdvantageConfig { kind, std_normalize, ..AdvantageConfig::default() }
    }

    fn close(a: &[f64], b: &[f64]) {
        assert_eq!(a.len(), b.len());
        for (x, y) in a.iter().zip(b) {
            assert!((x - y).abs() < 1e-9, "{a:?} vs {b:?}");
        }
    }

    #[test]
    fn grpo_rloo_and_std_by_hand() {
        let r = [1.0, 0.0, 0.5, 0.5];
        // mean 0.5
        close(&advantages(&r, &cfg(AdvantageKind::Grpo, false)), &[0.5, -0.5, 0.0, 0.0]);
        // std = sqrt((0.25+0.25)/4) = 0.353553...
        let s = (0.125f64).sqrt() + 1e-6;
        close(&advantages(&r, &cfg(AdvantageKind::Grpo, true)), &[0.5 / s, -0.5 / s, 0.0, 0.0]);
        // rloo: 1 − (1/3), 0 − (2/3), 0.5 − 0.5, 0.5 − 0.5
        close(
            &advantages(&r, &cfg(AdvantageKind::Rloo, false)),
            &[2.0 / 3.0, -2.0 / 3.0, 0.0, 0.0],
        );
        // RLOO = G/(G−1) × GRPO.
        let g = advantages(&r, &cfg(AdvantageKind::Grpo, false));
        let l = advantages(&r, &cfg(AdvantageKind::Rloo, false));
        close(&l, &g.iter().map(|a| a * 4.0 / 3.0).collect::<Vec<_>>());
        close(&advantages(&[0.3, 0.3], &cfg(AdvantageKind::Grpo, true)), &[0.0, 0.0]);
        assert!(is_zero_advantage(&[0.3, 0.3, 0.3]));
        assert!(!is_zero_advantage(&[0.3, 0.3, 0.4]));
    }

    #[test]
    fn penalties_shape_the_reward() {
        let mut r: Rollout = serde_json::from_value(serde_json::json!({
            "schema_version": 1, "env": "e", "task": "e", "example_id": 0, "rollout_index": 0,
            "prompt": [], "completion": [], "reward": 0.75, "stop_reason": "length",
            "metrics": {"completion_tokens": 10.0}, "timings": {"generation_ms": 0.0, "env_ms": 0.0, "scoring_ms": 0.0, "total_ms": 0.0}
        }))
        .expect("rollout");
        let mut c = AdvantageConfig::default();
        assert_eq!(shaped_reward(&r, &c), 0.75);
        c.truncated_reward = Some(0.0);
        c.length_penalty = 0.01;
        assert!((shaped_reward(&r, &c) - -0.1).abs() < 1e-12);
        r.stop_reason = StopReason::Completed;
        assert!((shaped_reward(&r, &c) - 0.65).abs() < 1e-12);
    }
}
