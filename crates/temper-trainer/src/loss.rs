//! The token-level losses of RL and SFT: the masked importance-weighted policy gradient
//! (default), `ppo_clip`, `gspo`, `cispo`, and the SFT negative log-likelihood.
//!
//! Every loss is a *sum* over the loss tokens of one micro-batch divided by `total_tokens`, the
//! count of loss tokens in the whole optimizer step (all micro-batches, all data-parallel ranks),
//! so gradients accumulated over micro-batches and summed over ranks are those of one big batch.
//! Decisions that do not carry gradients (masks, clip branches, the CISPO weight) are taken on
//! the host from the current values; the terms that do are tensor expressions of the trainer's
//! logprobs, so candle's autograd differentiates them.

use candle_core::{D, DType, Tensor};
use serde::{Deserialize, Serialize};

/// Which policy-gradient loss.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LossType {
    /// Importance-weighted policy gradient with probability-difference masking and a log-ratio²
    /// term (no clip).
    #[default]
    Default,
    /// PPO's clipped surrogate, ratio clipped to `[1 − clip_low, 1 + clip_high]`.
    PpoClip,
    /// GSPO: one ratio per sequence (the geometric mean of its token ratios), clipped.
    Gspo,
    /// CISPO: the importance weight, clipped from above and detached, times the logprob.
    Cispo,
}

/// Loss options (`[trainer.loss]`).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LossConfig {
    /// Which loss.
    #[serde(rename = "type")]
    pub kind: LossType,
    /// Default loss: mask a token with A > 0 whose probability rose by more than this.
    pub mask_high: f64,
    /// Default loss: mask a token with A ≤ 0 whose probability fell by more than this.
    pub mask_low: f64,
    /// Weight of the (log ρ)² term (every loss type).
    pub kl_coef: f64,
    /// `ppo_clip`: ratio lower clip ε_low (DAPO: 0.2).
    pub clip_low: f64,
    /// `ppo_clip`: ratio upper clip ε_high (DAPO: 0.28).
    pub clip_high: f64,
    /// `gspo`: sequence-ratio lower clip (the GSPO paper: 3e-4).
    pub gspo_clip_low: f64,
    /// `gspo`: sequence-ratio upper clip (the GSPO paper: 4e-4).
    pub gspo_clip_high: f64,
    /// `cispo`: the importance weight is at most `1 + cispo_clip_high`.
    pub cispo_clip_high: f64,
}

impl Default for LossConfig {
    fn default() -> Self {
        Self {
            kind: LossType::Default,
            mask_high: 0.2,
            mask_low: 0.2,
            kl_coef: 1e-3,
            clip_low: 0.2,
            clip_high: 0.28,
            gspo_clip_low: 3e-4,
            gspo_clip_high: 4e-4,
            cispo_clip_high: 4.0,
        }
    }
}

impl LossConfig {
    /// Checks the options: every number finite and not negative.
    pub fn validate(&self) -> Result<(), String> {
        for (name, v) in [
            ("mask_high", self.mask_high),
            ("mask_low", self.mask_low),
            ("kl_coef", self.kl_coef),
            ("clip_low", self.clip_low),
            ("clip_high", self.clip_high),
            ("gspo_clip_low", self.gspo_clip_low),
            ("gspo_clip_high", self.gspo_clip_high),
            ("cispo_clip_high", self.cispo_clip_high),
        ] {
            if !v.is_finite() || v < 0.0 {
                return Err(format!("loss.{name} must be a finite number ≥ 0, got {v}"));
            }
        }
        if self.clip_low >= 1.0 || self.gspo_clip_low >= 1.0 {
            return Err("loss.clip_low and loss.gspo_clip_low must be below 1".into());
        }
        Ok(())
    }
}

/// What the sampler reported for the tokens of one micro-batch, aligned with the trainer's
/// logprobs (one entry per predicted token).
#[derive(Debug, Clone, Copy)]
pub struct RlTokens<'a> {
    /// μ: the logprob each token was sampled with.
    pub sampling_logprobs: &'a [f32],
    /// A: the advantage of the rollout each token belongs to.
    pub advantages: &'a [f32],
    /// Whether the token is trained on (sampled by the model, not prompt or environment text).
    pub loss_mask: &'a [bool],
    /// Which sequence (rollout) each token belongs to: `gspo` averages over it.
    pub sequence: &'a [u32],
}

/// Sums over the loss tokens of one micro-batch (sums, so that they add over micro-batches and
/// ranks; divide by `tokens` for means).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct LossStats {
    /// Loss tokens.
    pub tokens: f64,
    /// Σ (ρ − log ρ − 1): the k3 estimate of KL(μ ‖ π) between sampler and trainer.
    pub mismatch_kl: f64,
    /// Tokens masked because their probability rose too much (A > 0).
    pub masked_high: f64,
    /// Tokens masked because their probability fell too much (A ≤ 0).
    pub masked_low: f64,
    /// Tokens (or, for `gspo`, tokens of sequences) on the clipped branch.
    pub clipped: f64,
    /// Tokens whose inputs (logprob, sampling logprob or advantage) are not finite.
    pub nonfinite: f64,
}

impl LossStats {
    /// Adds `other`'s sums to these.
    pub fn add(&mut self, other: &LossStats) {
        self.tokens += other.tokens;
        self.mismatch_kl += other.mismatch_kl;
        self.masked_high += other.masked_high;
        self.masked_low += other.masked_low;
        self.clipped += other.clipped;
        self.nonfinite += other.nonfinite;
    }

    /// The sums as a vector, for an all-reduce.
    pub fn to_vec(&self) -> Vec<f64> {
        vec![
            self.tokens,
            self.mismatch_kl,
            self.masked_high,
            self.masked_low,
            self.clipped,
            self.nonfinite,
        ]
    }

    /// The inverse of [`LossStats::to_vec`].
    pub fn from_slice(v: &[f64]) -> Self {
        let g = |i: usize| v.get(i).copied().unwrap_or(0.0);
        Self {
            tokens: g(0),
            mismatch_kl: g(1),
            masked_high: g(2),
            masked_low: g(3),
            clipped: g(4),
            nonfinite: g(5),
        }
    }
}

/// log ρ is clamped to this range before `exp`.
const LOG_RATIO_CLAMP: f64 = 20.0;

fn check_lengths(n: usize, t: &RlTokens<'_>) -> candle_core::Result<()> {
    if t.sampling_logprobs.len() != n
        || t.advantages.len() != n
        || t.loss_mask.len() != n
        || t.sequence.len() != n
    {
        candle_core::bail!(
            "loss inputs differ in length: {n} logprobs, {} sampling logprobs, {} advantages, {} mask entries, {} sequence ids",
            t.sampling_logprobs.len(),
            t.advantages.len(),
            t.loss_mask.len(),
            t.sequence.len()
        );
    }
    Ok(())
}

/// The policy-gradient loss of one micro-batch: Σ_t L_t / `total_tokens` as a scalar tensor
/// (differentiable through `logprobs`, the trainer's `[n]` logprobs of the sampled tokens with
/// the sampling temperature applied), and its statistics.
///
/// A token whose inputs are not finite makes the loss NaN and is counted in
/// [`LossStats::nonfinite`]: the caller must skip the optimizer step.
pub fn policy_loss(
    logprobs: &Tensor,
    tokens: &RlTokens<'_>,
    cfg: &LossConfig,
    total_tokens: f64,
) -> candle_core::Result<(Tensor, LossStats)> {
    let n = logprobs.dim(0)?;
    check_lengths(n, tokens)?;
    let device = logprobs.device();
    let dtype = logprobs.dtype();
    let lp_host: Vec<f64> = logprobs.detach().to_dtype(DType::F64)?.to_vec1()?;
    let mut stats = LossStats::default();

    // log ρ = ℓ − μ, clamped; computed in the logprobs' dtype so it stays differentiable. Tokens
    // that are not trained on get μ = 0, so whatever they hold cannot reach the sums.
    let mu: Vec<f32> = tokens
        .sampling_logprobs
        .iter()
        .zip(tokens.loss_mask)
        .map(|(&m, &keep)| if keep { m } else { 0.0 })
        .collect();
    let mu_t = Tensor::from_vec(mu, n, device)?.to_dtype(dtype)?;
    let log_ratio = (logprobs - &mu_t)?.clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)?;
    let ratio = log_ratio.exp()?;

    // Per-token coefficients decided on the host.
    let mut ratio_coef = vec![0f64; n]; // multiplies ρ_t
    let mut lp_coef = vec![0f64; n]; // multiplies ℓ_t (cispo)
    let mut constant = 0f64; // value-only terms (clipped branches)
    let mut kl_mask = vec![0f64; n];
    let mut nonfinite = false;
    let mut host_ratio = vec![0f64; n];
    for i in 0..n {
        if !tokens.loss_mask[i] {
            continue;
        }
        let (l, m, a) =
            (lp_host[i], f64::from(tokens.sampling_logprobs[i]), f64::from(tokens.advantages[i]));
        stats.tokens += 1.0;
        if !(l.is_finite() && m.is_finite() && a.is_finite()) {
            stats.nonfinite += 1.0;
            nonfinite = true;
            continue;
        }
        let lr = (l - m).clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP);
        let r = lr.exp();
        host_ratio[i] = r;
        stats.mismatch_kl += r - lr - 1.0;
        kl_mask[i] = 1.0;
        match cfg.kind {
            LossType::Default => {
                let dp = l.exp() - m.exp();
                let high = a > 0.0 && dp > cfg.mask_high;
                let low = a <= 0.0 && dp < -cfg.mask_low;
                stats.masked_high += f64::from(u8::from(high));
                stats.masked_low += f64::from(u8::from(low));
                if !(high || low) {
                    ratio_coef[i] = -a;
                }
            }
            LossType::PpoClip => {
                let clipped = r.clamp(1.0 - cfg.clip_low, 1.0 + cfg.clip_high);
                // min(ρA, clip(ρ)A): the unclipped branch carries the gradient when it is the
                // smaller (ties go to it: the gradient is the same where they meet).
                if r * a <= clipped * a {
                    ratio_coef[i] = -a;
                } else {
                    constant -= clipped * a;
                    stats.clipped += 1.0;
                }
            }
            LossType::Cispo => {
                let w = r.min(1.0 + cfg.cispo_clip_high);
                if w < r {
                    stats.clipped += 1.0;
                }
                lp_coef[i] = -w * a;
            }
            LossType::Gspo => {} // per sequence, below
        }
    }

    let mut loss = Tensor::zeros((), dtype, device)?;
    if cfg.kind == LossType::Gspo && !nonfinite {
        loss = (loss + gspo_terms(&log_ratio, tokens, &lp_host, cfg, &mut stats)?)?;
    }
    let coef = |v: Vec<f64>| Tensor::from_vec(v, n, device)?.to_dtype(dtype);
    if ratio_coef.iter().any(|&c| c != 0.0) {
        loss = (loss + (&ratio * coef(ratio_coef)?)?.sum_all()?)?;
    }
    if lp_coef.iter().any(|&c| c != 0.0) {
        loss = (loss + (logprobs * coef(lp_coef)?)?.sum_all()?)?;
    }
    if cfg.kl_coef > 0.0 {
        let sq = (log_ratio.sqr()? * coef(kl_mask)?)?.sum_all()?;
        loss = (loss + (sq * cfg.kl_coef)?)?;
    }
    loss = (loss + constant)?;
    if nonfinite {
        loss = (loss + f64::NAN)?;
    }
    let loss = (loss / total_tokens.max(1.0))?;
    Ok((loss, stats))
}

/// GSPO's terms: each sequence's ratio s = exp(mean of its tokens' log ρ); each of its loss
/// tokens contributes −min(s·A, clip(s)·A) (so a sequence weighs by its length under the
/// token-count normalisation).
fn gspo_terms(
    log_ratio: &Tensor,
    tokens: &RlTokens<'_>,
    lp_host: &[f64],
    cfg: &LossConfig,
    stats: &mut LossStats,
) -> candle_core::Result<Tensor> {
    let n = log_ratio.dim(0)?;
    let device = log_ratio.device();
    let dtype = log_ratio.dtype();
    // Sequences in order of first appearance.
    let mut order: Vec<u32> = Vec::new();
    for i in 0..n {
        if tokens.loss_mask[i] && !order.contains(&tokens.sequence[i]) {
            order.push(tokens.sequence[i]);
        }
    }
    if order.is_empty() {
        return Tensor::zeros((), dtype, device);
    }
    let s_count = order.len();
    let mut counts = vec![0f64; s_count];
    let mut sum_lr = vec![0f64; s_count];
    let mut adv = vec![0f64; s_count];
    let mut idx_of = vec![usize::MAX; n];
    for i in 0..n {
        if !tokens.loss_mask[i] {
            continue;
        }
        let s = order.iter().position(|&q| q == tokens.sequence[i]).unwrap_or(0);
        idx_of[i] = s;
        counts[s] += 1.0;
        sum_lr[s] += (lp_host[i] - f64::from(tokens.sampling_logprobs[i]))
            .clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP);
        adv[s] = f64::from(tokens.advantages[i]);
    }
    // averaging matrix [sequences, n]: row s holds 1/len(s) on the loss tokens of s.
    let mut avg = vec![0f64; s_count * n];
    for i in 0..n {
        if idx_of[i] != usize::MAX {
            avg[idx_of[i] * n + i] = 1.0 / counts[idx_of[i]];
        }
    }
    let avg = Tensor::from_vec(avg, (s_count, n), device)?.to_dtype(dtype)?;
    let seq_lr = avg.matmul(&log_ratio.unsqueeze(1)?)?.squeeze(1)?; // [sequences]
    let seq_ratio = seq_lr.exp()?;
    let mut coef = vec![0f64; s_count];
    let mut constant = 0f64;
    for s in 0..s_count {
        let r = (sum_lr[s] / counts[s]).exp();
        let a = adv[s];
        let clipped = r.clamp(1.0 - cfg.gspo_clip_low, 1.0 + cfg.gspo_clip_high);
        if r * a <= clipped * a {
            coef[s] = -a * counts[s];
        } else {
            constant -= clipped * a * counts[s];
            stats.clipped += counts[s];
        }
    }
    let coef = Tensor::from_vec(coef, s_count, device)?.to_dtype(dtype)?;
    (seq_ratio * coef)?.sum_all()? + constant
}

/// The SFT loss of one micro-batch: −Σ ℓ_t over the loss tokens / `total_tokens`.
pub fn sft_loss(
    logprobs: &Tensor,
    loss_mask: &[bool],
    total_tokens: f64,
) -> candle_core::Result<Tensor> {
    let n = logprobs.dim(0)?;
    if loss_mask.len() != n {
        candle_core::bail!("{n} logprobs for {} mask entries", loss_mask.len());
    }
    let mask: Vec<f32> = loss_mask.iter().map(|&m| if m { 1.0 } else { 0.0 }).collect();
    let mask = Tensor::from_vec(mask, n, logprobs.device())?.to_dtype(logprobs.dtype())?;
    (logprobs * mask)?.sum_all()?.neg()? / total_tokens.max(1.0)
}

/// The trainer's logprobs of `targets` under `logits / temperature` (`logits` `[n, vocab]`,
/// `temperatures` one per row), and the summed entropy of those distributions over the rows
/// where `mask` is set (detached: a diagnostic).
pub fn logprobs_and_entropy(
    logits: &Tensor,
    targets: &[u32],
    temperatures: &[f32],
    mask: &[bool],
) -> candle_core::Result<(Tensor, f64)> {
    let (n, _) = logits.dims2()?;
    if targets.len() != n || temperatures.len() != n || mask.len() != n {
        candle_core::bail!(
            "{n} logit rows for {} targets, {} temperatures, {} mask entries",
            targets.len(),
            temperatures.len(),
            mask.len()
        );
    }
    if let Some(t) = temperatures.iter().find(|t| !(t.is_finite() && **t > 0.0)) {
        candle_core::bail!("sampling temperature {t} is not a positive number");
    }
    let device = logits.device();
    let scaled = if temperatures.iter().all(|&t| t == 1.0) {
        logits.clone()
    } else {
        let t =
            Tensor::from_vec(temperatures.to_vec(), (n, 1), device)?.to_dtype(logits.dtype())?;
        logits.broadcast_div(&t)?
    };
    let logp = temper_model::ops::log_softmax_last_dim(&scaled)?;
    let ids = Tensor::from_vec(targets.to_vec(), (n, 1), device)?;
    let lp = logp.gather(&ids, 1)?.squeeze(1)?;
    // Entropy on the detached distribution, only over the masked rows.
    let rows: Vec<u32> = (0..n as u32).filter(|&i| mask[i as usize]).collect();
    let entropy = if rows.is_empty() {
        0.0
    } else {
        let k = rows.len();
        let sel = logp.detach().index_select(&Tensor::from_vec(rows, k, device)?, 0)?;
        let h = (sel.exp()? * &sel)?.sum(D::Minus1)?.neg()?;
        h.to_dtype(DType::F64)?.sum_all()?.to_scalar::<f64>()?
    };
    Ok((lp, entropy))
}
