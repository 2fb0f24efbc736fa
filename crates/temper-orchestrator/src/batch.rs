//! From scored rollouts to the trainer's batches: one [`TrainSample`] per rollout, packed
//! first-fit-decreasing into `seq_len` rows, rows balanced over the data-parallel ranks and
//! grouped into micro-batches.

use temper_protocol::pack::{balance, first_fit_decreasing};
use temper_protocol::{Rollout, SCHEMA_VERSION, TrainBatch, TrainSample};

/// Why a rollout cannot be trained on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unusable {
    /// The server did not report token ids, or a later turn re-tokenised an earlier one.
    NoTokens,
    /// Prompt and completion do not fit in one row.
    TooLong,
    /// Nothing the model sampled (an empty completion).
    NoLossTokens,
}

/// The training sample of one rollout.
pub fn sample_of(
    rollout: &Rollout,
    advantage: f64,
    temperature: f64,
    version: u64,
    seq_len: usize,
) -> Result<TrainSample, Unusable> {
    let trace = rollout.tokens.as_ref().ok_or(Unusable::NoTokens)?;
    if trace.check().is_err() || trace.prompt_ids.is_empty() {
        return Err(Unusable::NoTokens);
    }
    let n = trace.prompt_ids.len() + trace.completion_ids.len();
    if n > seq_len {
        return Err(Unusable::TooLong);
    }
    if !trace.completion_mask.contains(&1) {
        return Err(Unusable::NoLossTokens);
    }
    let p = trace.prompt_ids.len();
    let mut token_ids = Vec::with_capacity(n);
    token_ids.extend_from_slice(&trace.prompt_ids);
    token_ids.extend_from_slice(&trace.completion_ids);
    let mut loss_mask = vec![0u8; p];
    loss_mask.extend_from_slice(&trace.completion_mask);
    let mut sampling_logprobs = vec![0f32; p];
    sampling_logprobs.extend_from_slice(&trace.completion_logprobs);
    Ok(TrainSample {
        token_ids,
        loss_mask,
        sampling_logprobs,
        advantage: advantage as f32,
        temperature: temperature as f32,
        policy_version: version,
    })
}

/// The batches of one step, one per rank. Every rank gets rows (a rank left without any gets an
/// empty batch: it still joins the step's collectives); `total_loss_tokens` counts all ranks.
pub fn build_batches(
    step: u64,
    samples: Vec<TrainSample>,
    seq_len: usize,
    micro_batch_rows: usize,
    world_size: u32,
) -> Vec<TrainBatch> {
    let total: u64 = samples
        .iter()
        .map(|s| s.loss_mask.iter().skip(1).filter(|&&m| m == 1).count() as u64)
        .sum();
    let lengths: Vec<usize> = samples.iter().map(|s| s.token_ids.len()).collect();
    let rows = first_fit_decreasing(&lengths, seq_len);
    let row_tokens: Vec<usize> = rows.iter().map(|r| r.iter().map(|&i| lengths[i]).sum()).collect();
    let shares = balance(&row_tokens, world_size as usize);
    let mut slots: Vec<Option<TrainSample>> = samples.into_iter().map(Some).collect();
    shares
        .into_iter()
        .enumerate()
        .map(|(rank, share)| {
            let micro_batches = share
                .chunks(micro_batch_rows.max(1))
                .map(|chunk| {
                    chunk
                        .iter()
                        .flat_map(|&row| rows[row].iter())
                        .map(|&i| slots[i].take().expect("each sample sits in one row"))
                        .collect()
                })
                .collect();
            TrainBatch {
                schema_version: SCHEMA_VERSION,
                step,
                rank: rank as u32,
                world_size,
                total_loss_tokens: total,
                micro_batches,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use temper_protocol::TokenTrace;

    fn rollout(prompt: usize, completion: usize) -> Rollout {
        let mut r: Rollout = serde_json::from_value(serde_json::json!({
            "schema_version": 1, "env": "e", "task": "e", "example_id": 0, "rollout_index": 0,
            "prompt": [], "completion": [], "reward": 1.0, "stop_reason": "completed",
            "timings": {"generation_ms": 0.0, "env_ms": 0.0, "scoring_ms": 0.0, "total_ms": 0.0}
        }))
        .expect("rollout");
        r.tokens = Some(TokenTrace {
            prompt_ids: (0..prompt as u32).collect(),
            completion_ids: (100..100 + completion as u32).collect(),
            completion_mask: vec![1; completion],
            completion_logprobs: vec![-0.5; completion],
        });
        r
    }

    #[test]
    fn sample_masks_the_prompt_and_keeps_the_logprobs() {
        let s = sample_of(&rollout(3, 2), -0.25, 0.7, 4, 16).expect("sample");
        assert_eq!(s.token_ids, [0, 1, 2, 100, 101]);
        assert_eq!(s.loss_mask, [0, 0, 0, 1, 1]);
        assert_eq!(s.sampling_logprobs, [0.0, 0.0, 0.0, -0.5, -0.5]);
        assert_eq!((s.advantage, s.temperature, s.policy_version), (-0.25, 0.7, 4));
        assert_eq!(sample_of(&rollout(10, 7), 0.0, 1.0, 0, 16), Err(Unusable::TooLong));
        assert_eq!(sample_of(&rollout(3, 0), 0.0, 1.0, 0, 16), Err(Unusable::NoLossTokens));
        let mut r = rollout(3, 2);
        r.tokens = None;
        assert_eq!(sample_of(&r, 0.0, 1.0, 0, 16), Err(Unusable::NoTokens));
    }

    #[test]
    fn batches_pack_balance_and_count_every_rank() {
        let samples: Vec<TrainSample> = [(2, 6), (2, 3), (1, 2), (3, 4), (2, 1)]
            .iter()
            .map(|&(p, c)| sample_of(&rollout(p, c), 1.0, 1.0, 0, 10).expect("sample"))
            .collect();
        // lengths 8, 5, 3, 7, 3 → rows (cap 10): [8], [7, 3], [5, 3]
        let batches = build_batches(7, samples.clone(), 10, 1, 2);
        assert_eq!(batches.len(), 2);
        let total: u64 = samples
            .iter()
            .map(|s| s.loss_mask.iter().skip(1).filter(|&&m| m == 1).count() as u64)
            .sum();
        assert_eq!(total, 16);
        let mut seen = 0;
        for b in &batches {
            assert_eq!(b.check(), Ok(()));
            assert_eq!((b.step, b.world_size, b.total_loss_tokens), (7, 2, 16));
            for mb in &b.micro_batches {
                assert!(mb.iter().map(|s| s.token_ids.len()).sum::<usize>() <= 10);
                seen += mb.len();
            }
        }
        assert_eq!(seen, 5);
        let rows: Vec<usize> = batches.iter().map(|b| b.micro_batches.len()).collect();
        assert_eq!(rows.iter().sum::<usize>(), 3);
        assert!(rows.iter().all(|&r| r >= 1));
        // One rank, two rows per micro-batch: 3 rows → 2 micro-batches.
        let one = build_batches(7, samples, 10, 2, 1);
        assert_eq!(one[0].micro_batches.len(), 2);
        assert_eq!(one[0].micro_batches.iter().map(Vec::len).sum::<usize>(), 5);
    }
}
