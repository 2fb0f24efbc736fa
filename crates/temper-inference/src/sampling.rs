//! Drawing the next token from logits, and the logprob reported for it.
//!
//! The reported logprob is `log_softmax(logits / temperature)[token]` (plain `log_softmax` when
//! greedy), before top-k, top-p and min-p: the quantity the trainer recomputes from the same
//! logits, so the importance ratio is exactly 1 when the weights are the same. The filters only
//! decide which tokens may be drawn.

use rand::Rng;
use rand_chacha::ChaCha8Rng;

/// Most `stop_token_ids` a request may give (vLLM has no limit; a thousand ids covers any real
/// use and bounds what every sequence of the request keeps).
pub const MAX_STOP_TOKEN_IDS: usize = 1024;

/// Most `stop` strings a request may give (OpenAI allows 4, vLLM has no limit).
pub const MAX_STOP_STRINGS: usize = 16;

/// Longest `stop` string, in bytes. Holding back text that may begin a stop string costs up to
/// its length squared per token, so this bounds the per-token work too.
pub const MAX_STOP_BYTES: usize = 256;

/// How to choose tokens for one sequence.
#[derive(Debug, Clone, PartialEq)]
pub struct SamplingOptions {
    /// Softmax temperature; 0 is greedy (the most likely token, ties to the lowest id).
    pub temperature: f64,
    /// Keep the smallest set of most likely tokens whose mass reaches `top_p` (1 keeps all).
    pub top_p: f64,
    /// Keep only the `top_k` most likely tokens (0 keeps all).
    pub top_k: usize,
    /// Drop tokens less likely than `min_p` times the most likely one (0 keeps all).
    pub min_p: f64,
    /// Most tokens to generate.
    pub max_tokens: usize,
    /// Token ids that end the sequence (the model's end-of-sequence ids are added unless
    /// `ignore_eos`).
    pub stop_token_ids: Vec<u32>,
    /// Strings that end the sequence; the text returned stops before them.
    pub stop: Vec<String>,
    /// Keep generating through the model's end-of-sequence tokens.
    pub ignore_eos: bool,
    /// Seed of this request's sampler (sample `i` of `n` uses `seed + i`); random when absent.
    pub seed: Option<u64>,
    /// How many most likely alternatives to report with each token (0: none).
    pub top_logprobs: usize,
}

impl Default for SamplingOptions {
    fn default() -> Self {
        Self {
            temperature: 1.0,
            top_p: 1.0,
            top_k: 0,
            min_p: 0.0,
            max_tokens: 256,
            stop_token_ids: Vec::new(),
            stop: Vec::new(),
            ignore_eos: false,
            seed: None,
            top_logprobs: 0,
        }
    }
}

impl SamplingOptions {
    /// Checks the ranges; the message names the field.
    pub fn validate(&self) -> Result<(), String> {
        if !(self.temperature.is_finite() && self.temperature >= 0.0) {
            return Err(format!(
                "temperature must be a finite number >= 0, got {}",
                self.temperature
            ));
        }
        if !(self.top_p > 0.0 && self.top_p <= 1.0) {
            return Err(format!("top_p must be in (0, 1], got {}", self.top_p));
        }
        if !(0.0..=1.0).contains(&self.min_p) {
            return Err(format!("min_p must be in [0, 1], got {}", self.min_p));
        }
        if self.max_tokens == 0 {
            return Err("max_tokens must be at least 1".into());
        }
        if self.top_logprobs > 20 {
            return Err(format!("top_logprobs must be at most 20, got {}", self.top_logprobs));
        }
        if self.stop.len() > MAX_STOP_STRINGS
            || self.stop.iter().any(|s| s.is_empty() || s.len() > MAX_STOP_BYTES)
        {
            return Err(format!(
                "stop: at most {MAX_STOP_STRINGS} strings, each of 1 to {MAX_STOP_BYTES} bytes"
            ));
        }
        if self.stop_token_ids.len() > MAX_STOP_TOKEN_IDS {
            return Err(format!(
                "stop_token_ids: at most {MAX_STOP_TOKEN_IDS} ids, got {}",
                self.stop_token_ids.len()
            ));
        }
        Ok(())
    }
}

/// A drawn token.
#[derive(Debug, Clone, PartialEq)]
pub struct Draw {
    /// The token.
    pub id: u32,
    /// Its logprob (see the module documentation).
    pub logprob: f32,
    /// The most likely tokens with their logprobs, most likely first, when asked for.
    pub top: Vec<(u32, f32)>,
}

/// Draws a token from `logits` (one row, `vocab` long).
pub fn draw(logits: &[f32], opts: &SamplingOptions, rng: &mut ChaCha8Rng) -> Draw {
    let greedy = opts.temperature == 0.0;
    let inv_t = if greedy { 1.0 } else { (1.0 / opts.temperature) as f32 };
    // logprobs = logits·(1/T) − logsumexp(logits·(1/T)), in f64 for the sum.
    let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max) * inv_t;
    let sum: f64 = logits.iter().map(|&x| f64::from(x * inv_t - max).exp()).sum();
    let lse = max + sum.ln() as f32;
    let logprob = |id: usize| logits[id] * inv_t - lse;

    let id = if greedy {
        argmax(logits)
    } else {
        let mut keep = candidates(logits, opts, inv_t, max);
        // Draw from the kept tokens in proportion to exp(scaled logit).
        let weights: Vec<f64> =
            keep.iter().map(|&i| f64::from(logits[i] * inv_t - max).exp()).collect();
        let total: f64 = weights.iter().sum();
        let mut u = rng.random::<f64>() * total;
        let mut chosen = *keep.last().unwrap_or(&argmax(logits));
        for (i, w) in keep.iter().zip(&weights) {
            if u < *w {
                chosen = *i;
                break;
            }
            u -= w;
        }
        keep.clear();
        chosen
    };
    let top = if opts.top_logprobs > 0 {
        top_n(logits, opts.top_logprobs).into_iter().map(|i| (i as u32, logprob(i))).collect()
    } else {
        Vec::new()
    };
    Draw { id: id as u32, logprob: logprob(id), top }
}

fn argmax(logits: &[f32]) -> usize {
    let mut best = 0;
    for (i, &x) in logits.iter().enumerate() {
        if x > logits[best] {
            best = i;
        }
    }
    best
}

/// Indices of the `n` largest logits, largest first (ties to the lower id).
fn top_n(logits: &[f32], n: usize) -> Vec<usize> {
    let n = n.min(logits.len());
    let mut idx: Vec<usize> = (0..logits.len()).collect();
    let cmp = |a: &usize, b: &usize| logits[*b].total_cmp(&logits[*a]).then(a.cmp(b));
    if n < idx.len() {
        idx.select_nth_unstable_by(n, cmp);
        idx.truncate(n);
    }
    idx.sort_by(cmp);
    idx
}

/// The tokens top-k, top-p and min-p allow, most likely first when any filter is on.
fn candidates(logits: &[f32], opts: &SamplingOptions, inv_t: f32, max_scaled: f32) -> Vec<usize> {
    let filtered = opts.top_k > 0 || opts.top_p < 1.0 || opts.min_p > 0.0;
    if !filtered {
        return (0..logits.len()).collect();
    }
    let mut keep =
        if opts.top_k > 0 { top_n(logits, opts.top_k) } else { top_n(logits, logits.len()) };
    if opts.min_p > 0.0 {
        // p_i / p_max = exp(scaled_i − scaled_max).
        let floor = opts.min_p.ln() as f32;
        keep.retain(|&i| logits[i] * inv_t - max_scaled >= floor);
    }
    if opts.top_p < 1.0 {
        let probs: Vec<f64> =
            keep.iter().map(|&i| f64::from(logits[i] * inv_t - max_scaled).exp()).collect();
        let total: f64 = probs.iter().sum();
        let mut mass = 0.0;
        let mut cut = keep.len();
        for (j, p) in probs.iter().enumerate() {
            mass += p / total;
            if mass >= opts.top_p {
                cut = j + 1;
                break;
            }
        }
        keep.truncate(cut.max(1));
    }
    keep
}

#[cfg(test)]
mod tests {
    use rand::SeedableRng;

    use super::*;

    fn opts(t: f64) -> SamplingOptions {
        SamplingOptions { temperature: t, ..Default::default() }
    }

    #[test]
    fn logprob_is_log_softmax_of_tempered_logits() {
        let logits = [1.0f32, 2.0, 0.5, -1.0];
        let mut rng = ChaCha8Rng::seed_from_u64(0);
        for t in [0.0, 0.5, 1.0, 2.0] {
            for _ in 0..20 {
                let d = draw(&logits, &opts(t), &mut rng);
                let s = if t == 0.0 { 1.0 } else { 1.0 / t };
                let z: f64 = logits.iter().map(|&x| (f64::from(x) * s).exp()).sum();
                let want = f64::from(logits[d.id as usize]) * s - z.ln();
                assert!(
                    (f64::from(d.logprob) - want).abs() < 1e-6,
                    "t={t}: {} vs {want}",
                    d.logprob
                );
            }
        }
        assert_eq!(draw(&logits, &opts(0.0), &mut rng).id, 1);
    }

    #[test]
    fn frequencies_follow_the_distribution() {
        // p = softmax([0, ln 2, ln 3]) = 1/6, 2/6, 3/6.
        let logits = [0.0f32, 2f32.ln(), 3f32.ln()];
        let mut rng = ChaCha8Rng::seed_from_u64(7);
        let mut counts = [0usize; 3];
        let n = 60_000;
        for _ in 0..n {
            counts[draw(&logits, &opts(1.0), &mut rng).id as usize] += 1;
        }
        for (c, p) in counts.iter().zip([1.0 / 6.0, 2.0 / 6.0, 3.0 / 6.0]) {
            let f = *c as f64 / n as f64;
            assert!((f - p).abs() < 0.01, "{counts:?}");
        }
    }

    #[test]
    fn filters_limit_what_can_be_drawn() {
        // p ≈ 0.64, 0.24, 0.09, 0.03 (logits 3, 2, 1, 0).
        let logits = [3.0f32, 2.0, 1.0, 0.0];
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        let seen = |o: SamplingOptions, rng: &mut ChaCha8Rng| {
            let mut s = [false; 4];
            for _ in 0..2000 {
                s[draw(&logits, &o, rng).id as usize] = true;
            }
            s
        };
        assert_eq!(
            seen(SamplingOptions { top_k: 2, ..opts(1.0) }, &mut rng),
            [true, true, false, false]
        );
        // 0.64 < 0.8 <= 0.64 + 0.24: two tokens.
        assert_eq!(
            seen(SamplingOptions { top_p: 0.8, ..opts(1.0) }, &mut rng),
            [true, true, false, false]
        );
        assert_eq!(
            seen(SamplingOptions { top_p: 0.5, ..opts(1.0) }, &mut rng),
            [true, false, false, false]
        );
        // p/p_max: 1, 0.37, 0.14, 0.05.
        assert_eq!(
            seen(SamplingOptions { min_p: 0.1, ..opts(1.0) }, &mut rng),
            [true, true, true, false]
        );
        assert_eq!(seen(opts(1.0), &mut rng), [true, true, true, true]);
        // The reported logprob ignores the filters.
        let d = draw(&logits, &SamplingOptions { top_k: 1, ..opts(1.0) }, &mut rng);
        let z: f64 = logits.iter().map(|&x| f64::from(x).exp()).sum();
        assert!((f64::from(d.logprob) - (3.0 - z.ln())).abs() < 1e-6);
    }

    #[test]
    fn seeded_draws_repeat_and_top_logprobs_are_sorted() {
        let logits: Vec<f32> = (0..100).map(|i| ((i * 37) % 11) as f32 * 0.3).collect();
        let o = SamplingOptions { top_logprobs: 3, ..opts(0.8) };
        let run = |seed| {
            let mut rng = ChaCha8Rng::seed_from_u64(seed);
            (0..10).map(|_| draw(&logits, &o, &mut rng).id).collect::<Vec<_>>()
        };
        assert_eq!(run(5), run(5));
        assert_ne!(run(5), run(6));
        let d = draw(&logits, &o, &mut ChaCha8Rng::seed_from_u64(0));
        assert_eq!(d.top.len(), 3);
        assert!(d.top[0].1 >= d.top[1].1 && d.top[1].1 >= d.top[2].1);
        assert_eq!(d.top[0].0, 8); // (8 · 37) mod 11 = 10, the first of the largest
    }
}
