//! Evaluation statistics: pass@k, summaries of a set of rollouts, and 95% intervals of a mean
//! over problems and of a paired difference between two runs.

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

/// A mean over problems with its 95% interval.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Estimate {
    /// The mean.
    pub mean: f64,
    /// Lower end of the 95% interval.
    pub low: f64,
    /// Upper end of the 95% interval.
    pub high: f64,
    /// Problems it is over.
    pub n: usize,
}

/// The two-sided 97.5% quantile of Student's t with `df` degrees of freedom (1.96 past 30).
fn t_975(df: usize) -> f64 {
    const TABLE: [f64; 30] = [
        12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160,
        2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056,
        2.052, 2.048, 2.045, 2.042,
    ];
    match df {
        0 => f64::INFINITY,
        1..=30 => TABLE[df - 1],
        31..=60 => 2.000 + (2.042 - 2.000) * (60 - df) as f64 / 30.0,
        61..=120 => 1.980 + (2.000 - 1.980) * (120 - df) as f64 / 60.0,
        _ => 1.960,
    }
}

/// The mean of per-problem values (each problem's avg@k, or its pass@k) with a 95% interval
/// from Student's t over problems: the problems are the sample, the samples per problem only
/// make each value less noisy. One problem gives an unbounded interval; none gives `None`.
pub fn mean_interval(values: &[f64]) -> Option<Estimate> {
    let n = values.len();
    if n == 0 {
        return None;
    }
    let mean = values.iter().sum::<f64>() / n as f64;
    if n == 1 {
        return Some(Estimate { mean, low: f64::NEG_INFINITY, high: f64::INFINITY, n });
    }
    let var = values.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / (n - 1) as f64;
    let half = t_975(n - 1) * (var / n as f64).sqrt();
    Some(Estimate { mean, low: mean - half, high: mean + half, n })
}

/// The difference `a − b` of two runs over the problems both have (matched by key), with a 95%
/// interval from the paired differences; `None` when they share no problem.
pub fn paired_difference<K: Ord>(a: &BTreeMap<K, f64>, b: &BTreeMap<K, f64>) -> Option<Estimate> {
    let diffs: Vec<f64> = a.iter().filter_map(|(k, x)| b.get(k).map(|y| x - y)).collect();
    mean_interval(&diffs)
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

    #[test]
    fn intervals_match_hand_computed_values() {
        // [0, 1, 1, 0, 1]: mean 0.6, s = sqrt(0.3) = 0.547723, se = 0.244949, t(4) = 2.776.
        let e = mean_interval(&[0.0, 1.0, 1.0, 0.0, 1.0]).expect("values");
        assert!((e.mean - 0.6).abs() < 1e-12);
        assert!((e.high - (0.6 + 2.776 * 0.244_948_974)).abs() < 1e-6, "{e:?}");
        assert!((e.low - (0.6 - 2.776 * 0.244_948_974)).abs() < 1e-6, "{e:?}");
        // Identical values: no spread.
        let flat = mean_interval(&[0.5; 40]).expect("values");
        assert_eq!((flat.low, flat.high), (0.5, 0.5));
        assert!(mean_interval(&[]).is_none());
        assert!(mean_interval(&[1.0]).expect("one").high.is_infinite());
        // 200 problems: the normal quantile.
        let many: Vec<f64> = (0..200).map(|i| f64::from(i % 2)).collect();
        let e = mean_interval(&many).expect("values");
        let se = (0.25f64 * 200.0 / 199.0 / 200.0).sqrt();
        assert!((e.high - e.mean - 1.96 * se).abs() < 1e-9, "{e:?}");
    }

    #[test]
    fn paired_differences_use_shared_problems() {
        let a = BTreeMap::from([(1, 1.0), (2, 0.5), (3, 1.0), (9, 0.0)]);
        let b = BTreeMap::from([(1, 0.0), (2, 0.5), (3, 0.5), (4, 1.0)]);
        // Shared 1, 2, 3: differences 1, 0, 0.5: mean 0.5, s = 0.5, se = 0.288675, t(2) = 4.303.
        let d = paired_difference(&a, &b).expect("shared");
        assert_eq!(d.n, 3);
        assert!((d.mean - 0.5).abs() < 1e-12);
        assert!((d.high - (0.5 + 4.303 * 0.288_675_135)).abs() < 1e-6, "{d:?}");
        assert!(paired_difference(&a, &BTreeMap::from([(7, 1.0)])).is_none());
    }
}
