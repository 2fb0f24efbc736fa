//! Evaluation statistics: pass@k, and summaries of a set of rollouts.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use temper_protocol::Rollout;

/// Unbiased pass@k estimator (Chen et al., 2021): `1 − C(n−c, k) / C(n, k)` for `n` samples of
/// which `c` pass, computed as a product so it never overflows. `k` must be at most `n`.
pub fn pass_at_k(n: usize, c: usize, k: usize) -> f64 {
    assert!(
        k >= 1 && k <= n && c <= n,
        "pass_at_k needs 1 <= k <= n and c <= n (n={n}, c={c}, k={k})"
    );
    if n - c < k {
        return 1.0;
    }
    let fail: f64 = ((n - c + 1)..=n).map(|i| 1.0 - k as f64 / i as f64).product();
    1.0 - fail
}

/// The k of pass@k to report for groups of `r` rollouts: 1, 2, 4, ... up to `r`.
pub fn pass_ks(r: usize) -> Vec<usize> {
    std::iter::successors(Some(1usize), |k| k.checked_mul(2)).take_while(|&k| k <= r).collect()
}

/// Whether a rollout counts as passing: no error and reward at least `threshold`.
pub fn passes(rollout: &Rollout, threshold: f64) -> bool {
    rollout.error.is_none() && rollout.reward >= threshold
}

/// Aggregates over a set of rollouts.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    /// Distinct examples.
    pub examples: usize,
    /// Rollouts.
    pub rollouts: usize,
    /// Rollouts with an error.
    pub errors: usize,
    /// `errors / rollouts`.
    pub error_rate: f64,
    /// Mean reward over all rollouts (a failed rollout counts with the reward it has).
    pub reward_mean: f64,
    /// Population standard deviation of the reward.
    pub reward_std: f64,
    /// Mean reward over the rollouts without an error (0 when there are none).
    pub reward_mean_without_errors: f64,
    /// Mean of each reward function over the rollouts that have its score.
    pub scores: BTreeMap<String, f64>,
    /// pass@k over complete groups, keyed by k.
    pub pass_at_k: BTreeMap<String, f64>,
    /// How many rollouts ended for each reason.
    pub stop_reasons: BTreeMap<String, usize>,
    /// Mean of each numeric rollout metric.
    pub metrics: BTreeMap<String, f64>,
    /// Mean generation time per rollout in ms.
    pub generation_ms_mean: f64,
    /// Mean scoring time per rollout in ms.
    pub scoring_ms_mean: f64,
}

/// Summarises rollouts whose groups should have `group_size` members; pass@k uses only groups
/// that are complete, with a rollout passing at `pass_threshold` (see [`passes`]).
pub fn summarize(rollouts: &[Rollout], group_size: usize, pass_threshold: f64) -> Summary {
    let n = rollouts.len();
    let mean = |values: &mut dyn Iterator<Item = f64>| {
        let (sum, count) = values.fold((0.0, 0usize), |(s, c), v| (s + v, c + 1));
        if count == 0 { 0.0 } else { sum / count as f64 }
    };
    let reward_mean = mean(&mut rollouts.iter().map(|r| r.reward));
    let reward_std = mean(&mut rollouts.iter().map(|r| (r.reward - reward_mean).powi(2))).sqrt();
    let reward_mean_without_errors =
        mean(&mut rollouts.iter().filter(|r| r.error.is_none()).map(|r| r.reward));

    let mut per_score: BTreeMap<String, (f64, usize)> = BTreeMap::new();
    let mut per_metric: BTreeMap<String, (f64, usize)> = BTreeMap::new();
    let mut stop_reasons = BTreeMap::new();
    let mut groups: BTreeMap<(&str, u64), (usize, usize)> = BTreeMap::new();
    for r in rollouts {
        for (name, v) in &r.scores {
            let e = per_score.entry(name.clone()).or_default();
            *e = (e.0 + v, e.1 + 1);
        }
        for (name, v) in &r.metrics {
            let e = per_metric.entry(name.clone()).or_default();
            *e = (e.0 + v, e.1 + 1);
        }
        let reason =
            serde_json::to_value(r.stop_reason).ok().and_then(|v| v.as_str().map(str::to_owned));
        *stop_reasons.entry(reason.unwrap_or_default()).or_insert(0) += 1;
        let g = groups.entry((r.task.as_str(), r.example_id)).or_default();
        *g = (g.0 + 1, g.1 + usize::from(passes(r, pass_threshold)));
    }
    let complete: Vec<(usize, usize)> =
        groups.values().copied().filter(|(size, _)| *size == group_size).collect();
    let pass_at_k = if complete.is_empty() {
        BTreeMap::new()
    } else {
        pass_ks(group_size)
            .into_iter()
            .map(|k| {
                let total: f64 = complete.iter().map(|&(size, c)| pass_at_k(size, c, k)).sum();
                (k.to_string(), total / complete.len() as f64)
            })
            .collect()
    };
    let means = |m: BTreeMap<String, (f64, usize)>| {
        m.into_iter().map(|(k, (s, c))| (k, s / c as f64)).collect()
    };
    let errors = rollouts.iter().filter(|r| r.error.is_some()).count();
    Summary {
        examples: groups.len(),
        rollouts: n,
        errors,
        error_rate: if n == 0 { 0.0 } else { errors as f64 / n as f64 },
        reward_mean,
        reward_std,
        reward_mean_without_errors,
        scores: means(per_score),
        pass_at_k,
        stop_reasons,
        metrics: means(per_metric),
        generation_ms_mean: mean(&mut rollouts.iter().map(|r| r.timings.generation_ms)),
        scoring_ms_mean: mean(&mut rollouts.iter().map(|r| r.timings.scoring_ms)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `1 − C(n−c, k)/C(n, k)` with exact binomials, for checking the product form.
    fn reference(n: u64, c: u64, k: u64) -> f64 {
        fn choose(n: u64, k: u64) -> f64 {
            if k > n {
                return 0.0;
            }
            (0..k).fold(1.0, |acc, i| acc * (n - i) as f64 / (i + 1) as f64)
        }
        1.0 - choose(n - c, k) / choose(n, k)
    }

    #[test]
    fn pass_at_k_hand_values() {
        // n=4, c=1: pass@1 = 1/4; pass@2 = 1 − C(3,2)/C(4,2) = 1 − 3/6 = 1/2; pass@4 = 1.
        assert!((pass_at_k(4, 1, 1) - 0.25).abs() < 1e-12);
        assert!((pass_at_k(4, 1, 2) - 0.5).abs() < 1e-12);
        assert_eq!(pass_at_k(4, 1, 4), 1.0);
        assert_eq!(pass_at_k(4, 0, 2), 0.0);
        // n=5, c=2, k=2: 1 − C(3,2)/C(5,2) = 1 − 3/10.
        assert!((pass_at_k(5, 2, 2) - 0.7).abs() < 1e-12);
        for n in 1..12u64 {
            for c in 0..=n {
                for k in 1..=n {
                    let got = pass_at_k(n as usize, c as usize, k as usize);
                    assert!((got - reference(n, c, k)).abs() < 1e-12, "n={n} c={c} k={k}");
                }
            }
        }
        assert_eq!(pass_ks(3), [1, 2]);
        assert_eq!(pass_ks(8), [1, 2, 4, 8]);
    }
}
