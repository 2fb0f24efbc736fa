//! Longest-common-subsequence similarity between two strings.
//!
//! `lcs_ratio(a, b) = 2·LCS(a, b) / (|a| + |b|)` over Unicode scalar values, where LCS is the
//! length of the longest common subsequence (not necessarily contiguous). Two empty strings have
//! ratio 1. This is the reward of the `reverse-text` environment; unlike Python's
//! `difflib.SequenceMatcher.ratio`, which counts matching blocks found greedily, it is the exact
//! LCS, so values can be checked by hand.
//!
//! Work is bounded: the bit-parallel algorithm of Allison–Dix/Hyyrö costs
//! `|b| · ⌈|a| / 64⌉` word operations, and each input is cut to [`MAX_CHARS`] characters first.

use std::collections::HashMap;

/// Characters of each input that are considered; the rest is ignored.
pub const MAX_CHARS: usize = 100_000;

/// Length of the longest common subsequence of `a` and `b` (in characters, after the cut to
/// [`MAX_CHARS`]).
pub fn lcs_len(a: &str, b: &str) -> usize {
    let a: Vec<char> = a.chars().take(MAX_CHARS).collect();
    let b: Vec<char> = b.chars().take(MAX_CHARS).collect();
    // The shorter string is the bit pattern: fewer words per step.
    let (pattern, text) = if a.len() <= b.len() { (&a, &b) } else { (&b, &a) };
    if pattern.is_empty() {
        return 0;
    }
    let words = pattern.len().div_ceil(64);
    let mut masks: HashMap<char, Vec<u64>> = HashMap::new();
    for (i, &c) in pattern.iter().enumerate() {
        masks.entry(c).or_insert_with(|| vec![0; words])[i / 64] |= 1 << (i % 64);
    }
    // V has a zero bit for every pattern position matched so far.
    let mut v = vec![u64::MAX; words];
    for c in text {
        let Some(m) = masks.get(c) else { continue };
        let mut carry = 0u64;
        for (vw, &mw) in v.iter_mut().zip(m) {
            let u = *vw & mw;
            let (sum, c1) = vw.overflowing_add(u);
            let (sum, c2) = sum.overflowing_add(carry);
            carry = u64::from(c1 || c2);
            *vw = sum | (*vw & !mw);
        }
    }
    let tail_bits = pattern.len() % 64;
    let zeros: usize = v
        .iter()
        .enumerate()
        .map(|(i, &w)| {
            let valid =
                if i == words - 1 && tail_bits != 0 { (1u64 << tail_bits) - 1 } else { u64::MAX };
            (!w & valid).count_ones() as usize
        })
        .sum();
    zeros
}

/// `2·LCS(a, b) / (|a| + |b|)`, in `[0, 1]`; 1 for two empty strings.
pub fn lcs_ratio(a: &str, b: &str) -> f64 {
    let total = a.chars().take(MAX_CHARS).count() + b.chars().take(MAX_CHARS).count();
    if total == 0 {
        return 1.0;
    }
    2.0 * lcs_len(a, b) as f64 / total as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lcs_dp(a: &str, b: &str) -> usize {
        let a: Vec<char> = a.chars().collect();
        let b: Vec<char> = b.chars().collect();
        let mut prev = vec![0usize; b.len() + 1];
        for &ca in &a {
            let mut row = vec![0usize; b.len() + 1];
            for (j, &cb) in b.iter().enumerate() {
                row[j + 1] = if ca == cb { prev[j] + 1 } else { row[j].max(prev[j + 1]) };
            }
            prev = row;
        }
        prev[b.len()]
    }

    #[test]
    fn hand_computed_values() {
        // LCS("abcde", "ace") = 3 -> 2*3/8.
        assert_eq!(lcs_len("abcde", "ace"), 3);
        assert!((lcs_ratio("abcde", "ace") - 0.75).abs() < 1e-12);
        // "olleh" vs "hello": LCS = 2 ("lo"? "ll") -> 4/10.
        assert_eq!(lcs_len("olleh", "hello"), 2);
        assert!((lcs_ratio("olleh", "hello") - 0.4).abs() < 1e-12);
        assert_eq!(lcs_ratio("", ""), 1.0);
        assert_eq!(lcs_ratio("abc", ""), 0.0);
        assert_eq!(lcs_ratio("same", "same"), 1.0);
        assert_eq!(lcs_len("héllo wörld", "wörld"), 5);
    }

    #[test]
    fn bit_parallel_matches_dynamic_programming() {
        // A small LCG keeps this test free of dependencies and deterministic.
        let mut state = 0x2545_f491_4f6c_dd1du64;
        let mut next = move |n: u64| {
            state = state
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            (state >> 33) % n
        };
        for _ in 0..300 {
            let la = next(150) as usize;
            let lb = next(150) as usize;
            let a: String = (0..la).map(|_| char::from(b'a' + next(4) as u8)).collect();
            let b: String = (0..lb).map(|_| char::from(b'a' + next(4) as u8)).collect();
            assert_eq!(lcs_len(&a, &b), lcs_dp(&a, &b), "{a:?} {b:?}");
        }
    }
}
