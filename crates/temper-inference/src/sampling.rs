//! Drawing the next token from logits, and the logprob reported for it.
//!
//! The reported logprob is `log_softmax(logits / temperature)[token]` (plain `log_softmax` when
//! greedy), before top-k, top-p and min-p: the quantity the trainer recomputes from the same
//! logits, so the importance ratio is exactly 1 when the weights are the same. The filters only
//! decide which tokens may be drawn.
//!
//! Two paths compute the same draws. [`draw`] works on one row of logits in host memory.
//! [`draw_on_device`] works on a batch of rows where the logits are (a GPU's memory), for the
//! requests it can serve (greedy or plain temperature sampling, without filters or alternatives:
//! what RL rollouts ask for): it returns only the ids and their logprobs, 8 bytes a row, instead
//! of copying every row of `vocab` logits to the host. Given the same uniform number, both invert
//! the same cumulative distribution, in f64, so a seeded request draws the same tokens on either
//! path (up to a tie within rounding of two partial sums).

use candle_core::{DType, Tensor};
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

/// Draws a token from `logits` (one row, `vocab` long). A sampled (not greedy) draw takes one
/// uniform number from `rng`.
pub fn draw(logits: &[f32], opts: &SamplingOptions, rng: &mut ChaCha8Rng) -> Draw {
    let u = if opts.temperature == 0.0 { 0.0 } else { rng.random::<f64>() };
    draw_at(logits, opts, u)
}

/// [`draw`] with the uniform number `u` in `[0, 1)` given (ignored when greedy).
pub fn draw_at(logits: &[f32], opts: &SamplingOptions, u: f64) -> Draw {
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
        let mut u = u * total;
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

/// Whether [`draw_on_device`] can serve `opts`: no top-k, top-p or min-p filter and no
/// alternatives asked for (those need the whole row sorted, which is done on the host).
pub fn device_drawable(opts: &SamplingOptions) -> bool {
    opts.top_k == 0 && opts.top_p >= 1.0 && opts.min_p <= 0.0 && opts.top_logprobs == 0
}

/// One draw for [`draw_on_device`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DevicePick {
    /// The row of the logits matrix drawn from.
    pub row: usize,
    /// Softmax temperature; 0 is greedy.
    pub temperature: f64,
    /// Where in `[0, 1)` the cumulative distribution is inverted (ignored when greedy); what
    /// [`draw`] takes from the sequence's generator.
    pub u: f64,
}

/// Width of the blocks of the two-level cumulative sum in [`draw_on_device`]: a cumulative sum
/// over `n` entries is a product with an `n × n` triangle, so the vocabulary is summed per
/// block (`vocab / BLOCK` wide) and then within the chosen block (`BLOCK` wide).
const BLOCK: usize = 256;

/// Draws `picks` from the rows of `logits` (`[rows, vocab]`, any float dtype) where they lie, as
/// [`draw_at`] would for options that [`device_drawable`] accepts; only the ids and logprobs are
/// copied to the host.
pub fn draw_on_device(logits: &Tensor, picks: &[DevicePick]) -> candle_core::Result<Vec<Draw>> {
    if picks.is_empty() {
        return Ok(Vec::new());
    }
    let dev = logits.device();
    let (_, vocab) = logits.dims2()?;
    let b = picks.len();
    let rows: Vec<u32> = picks.iter().map(|p| p.row as u32).collect();
    let x = logits.index_select(&Tensor::new(rows.as_slice(), dev)?, 0)?.to_dtype(DType::F32)?;
    let inv_t: Vec<f32> = picks
        .iter()
        .map(|p| if p.temperature == 0.0 { 1.0 } else { (1.0 / p.temperature) as f32 })
        .collect();
    // As `draw_at`: scaled logits in f32, their exponentials (shifted by the maximum) in f64.
    let scaled = x.broadcast_mul(&Tensor::from_vec(inv_t, (b, 1), dev)?)?;
    let max = scaled.max_keepdim(1)?;
    let w = scaled.broadcast_sub(&max)?.to_dtype(DType::F64)?.exp()?;
    let total = w.sum_keepdim(1)?;
    let lse = (max + total.log()?.to_dtype(DType::F32)?)?;

    // Inverse of the cumulative distribution at u · total: first the block, then the entry.
    let us: Vec<f64> = picks.iter().map(|p| p.u).collect();
    let target = total.mul(&Tensor::from_vec(us, (b, 1), dev)?)?;
    let nb = vocab.div_ceil(BLOCK);
    let w = if nb * BLOCK > vocab { w.pad_with_zeros(1, 0, nb * BLOCK - vocab)? } else { w };
    let blocks = w.reshape((b, nb, BLOCK))?;
    let block_sums = blocks.sum(2)?;
    // Entries of a cumulative sum at or below the target, counted: the index of the first above.
    let first_above = |cum: &Tensor, target: &Tensor, last: usize| -> candle_core::Result<Tensor> {
        cum.broadcast_le(target)?.to_dtype(DType::F64)?.sum_keepdim(1)?.minimum(last as f64)
    };
    let k = first_above(&block_sums.cumsum(1)?, &target, nb - 1)?;
    let positions = Tensor::arange(0u32, nb as u32, dev)?.to_dtype(DType::F64)?.unsqueeze(0)?;
    let before =
        block_sums.mul(&positions.broadcast_lt(&k)?.to_dtype(DType::F64)?)?.sum_keepdim(1)?;
    let which = k.to_dtype(DType::U32)?.reshape((b, 1, 1))?.broadcast_as((b, 1, BLOCK))?;
    let block = blocks.gather(&which.contiguous()?, 1)?.reshape((b, BLOCK))?;
    let j = first_above(&block.cumsum(1)?, &(target - before)?, BLOCK - 1)?;
    let sampled = ((k * BLOCK as f64)? + j)?.minimum((vocab - 1) as f64)?.to_dtype(DType::U32)?;

    let greedy: Vec<u8> = picks.iter().map(|p| u8::from(p.temperature == 0.0)).collect();
    let greedy = Tensor::from_vec(greedy, (b, 1), dev)?;
    let id = greedy.where_cond(&x.argmax_keepdim(1)?, &sampled)?;
    let logprob = scaled.gather(&id, 1)?.broadcast_sub(&lse)?;
    let ids = id.flatten_all()?.to_vec1::<u32>()?;
    let logprobs = logprob.flatten_all()?.to_vec1::<f32>()?;
    Ok(ids
        .into_iter()
        .zip(logprobs)
        .map(|(id, logprob)| Draw { id, logprob, top: Vec::new() })
        .collect())
}

/// Bytes [`draw_on_device`] copies to the host per draw: an id and a logprob.
pub const DEVICE_DRAW_BYTES: u64 = 8;

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
    fn device_draws_are_the_host_draws() {
        use candle_core::Device;
        let mut rng = ChaCha8Rng::seed_from_u64(3);
        // 1000 is not a multiple of the block width: the last block is padded.
        let (rows, vocab) = (6, 1000);
        let logits: Vec<f32> = (0..rows * vocab).map(|_| rng.random_range(-8.0f32..8.0)).collect();
        let t = Tensor::from_vec(logits.clone(), (rows, vocab), &Device::Cpu).unwrap();
        let mut picks = Vec::new();
        let mut want = Vec::new();
        for i in 0..400 {
            let row = i % rows;
            let temperature = [0.0, 0.3, 1.0, 1.7][i % 4];
            let u = match i {
                0..4 => 0.0,
                4..8 => 1.0 - 1e-12,
                _ => rng.random::<f64>(),
            };
            picks.push(DevicePick { row, temperature, u });
            want.push(draw_at(&logits[row * vocab..(row + 1) * vocab], &opts(temperature), u));
        }
        let got = draw_on_device(&t, &picks).unwrap();
        assert_eq!(got.len(), want.len());
        let mut distinct = std::collections::BTreeSet::new();
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            assert_eq!(g.id, w.id, "draw {i}: {:?}", picks[i]);
            assert!((g.logprob - w.logprob).abs() < 1e-5, "draw {i}: {g:?} vs {w:?}");
            distinct.insert(g.id);
        }
        assert!(distinct.len() > 100, "{} distinct ids", distinct.len());
        // In bf16 the logits are widened first: the same draws as the host's on the widened row.
        let half = t.to_dtype(DType::BF16).unwrap();
        let wide: Vec<f32> =
            half.to_dtype(DType::F32).unwrap().flatten_all().unwrap().to_vec1().unwrap();
        let got = draw_on_device(&half, &picks[..40]).unwrap();
        for (g, p) in got.iter().zip(&picks) {
            let w = draw_at(&wide[p.row * vocab..(p.row + 1) * vocab], &opts(p.temperature), p.u);
            assert_eq!((g.id, g.logprob), (w.id, w.logprob));
        }
    }

    #[test]
    fn device_draws_cross_block_boundaries_where_the_host_does() {
        use candle_core::Device;
        // Half the mass on id 255 (the last of the first block), half on 256 (the first of the next).
        // The rest weigh exactly 0 (exp(-1000) underflows), so u = 0 draws id 255 too.
        let mut logits = vec![-1000.0f32; 600];
        logits[255] = 0.0;
        logits[256] = 0.0;
        let t = Tensor::from_vec(logits.clone(), (1, 600), &Device::Cpu).unwrap();
        for (u, id) in [(0.0, 255), (0.49, 255), (0.51, 256), (0.999, 256)] {
            let got = draw_on_device(&t, &[DevicePick { row: 0, temperature: 1.0, u }]).unwrap();
            assert_eq!(got[0].id, id, "u = {u}");
            assert_eq!(draw_at(&logits, &opts(1.0), u).id, id, "u = {u}");
            assert!((got[0].logprob - 0.5f32.ln()).abs() < 1e-6);
        }
        assert!(draw_on_device(&t, &[]).unwrap().is_empty());
        assert!(device_drawable(&opts(0.7)));
        assert!(!device_drawable(&SamplingOptions { top_k: 5, ..opts(0.7) }));
        assert!(!device_drawable(&SamplingOptions { top_logprobs: 1, ..opts(0.0) }));
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
