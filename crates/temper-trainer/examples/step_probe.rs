//! Times the phases of one training step on a small Qwen3-shaped model (forward, loss, backward,
//! gradient norm, AdamW), to see where a step's time goes (`TEMPER_AUTOGRAD=1`: with candle's
//! autograd instead of the written-out backward pass). `cargo run --release --example
//! step_probe -p temper-trainer`.
#![allow(clippy::print_stdout, reason = "a probe prints its measurements")]

use std::time::Instant;

use candle_core::{Device, Tensor};
use temper_model::Transformer;
use temper_trainer::optim::{AdamW, OptimConfig, grad_norm};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // `STEP_PROBE_MODEL=smollm2`: SmolLM2-135M's shape (random weights) instead.
    let cfg = if std::env::var("STEP_PROBE_MODEL").is_ok_and(|m| m == "smollm2") {
        let mut c = temper_model::ModelConfig::tiny(temper_model::Architecture::Llama, 49_152);
        (c.hidden_size, c.intermediate_size, c.num_hidden_layers) = (576, 1536, 30);
        (c.num_attention_heads, c.num_key_value_heads, c.head_dim) = (9, 3, 64);
        c.tie_word_embeddings = true;
        c.max_position_embeddings = 2048;
        c
    } else {
        temper_trainer::policy::bench_qwen3()
    };
    let vocab = cfg.vocab_size;
    let model = Transformer::init_random(cfg, 0, &Device::Cpu)?;
    let seqs: Vec<Vec<u32>> =
        (0..4).map(|s| (0..256).map(|i| ((i * 7919 + s * 13) % vocab) as u32).collect()).collect();
    let inputs: Vec<&[u32]> = seqs.iter().map(|s| &s[..255]).collect();
    let targets: Vec<u32> = seqs.iter().flat_map(|s| s[1..].iter().copied()).collect();
    let mut opt = AdamW::new(model.params(), OptimConfig::default())?;
    // `TEMPER_AUTOGRAD=1`: candle's autograd instead of the written-out backward pass.
    let autograd = std::env::var("TEMPER_AUTOGRAD").is_ok_and(|v| v == "1");
    for round in 0..3 {
        let loss_of = |logits: &Tensor| -> candle_core::Result<Tensor> {
            let ids = Tensor::from_vec(targets.clone(), targets.len(), &Device::Cpu)?;
            let lp = temper_model::ops::token_logprobs(logits, &ids)?;
            lp.sum_all()?.neg()? / targets.len() as f64
        };
        let t0 = Instant::now();
        let (t1, t2, t3, g) = if autograd {
            let logits = model.forward_packed(&inputs)?;
            let t1 = Instant::now();
            let loss = loss_of(&logits)?;
            let t2 = Instant::now();
            let grads = loss.backward()?;
            let t3 = Instant::now();
            let g: Vec<Tensor> = model
                .params()
                .iter()
                .map(|(_, p)| grads.get(p.as_tensor()).cloned().ok_or("missing grad"))
                .collect::<Result<_, _>>()?;
            (t1, t2, t3, g)
        } else {
            let tape = model.train_forward(&inputs, false)?;
            let t1 = Instant::now();
            let temps = vec![1.0; targets.len()];
            let rows = temper_model::train::logprob_rows(tape.logits(), &targets, &temps)?;
            let t2 = Instant::now();
            let dlp = vec![-1.0 / targets.len() as f32; targets.len()];
            let dlogits = temper_model::train::logprob_rows_backward(
                tape.logits(),
                &targets,
                &temps,
                &rows,
                &dlp,
            )?;
            let g = tape.backward(&dlogits)?;
            (t1, t2, Instant::now(), g)
        };
        let norm = grad_norm(&g)?;
        let t4 = Instant::now();
        opt.step(&g, 1e-5)?;
        let t5 = Instant::now();
        let ms = |a: Instant, b: Instant| (b - a).as_secs_f64() * 1e3;
        println!(
            "round {round}: forward {:.0} ms, loss {:.0} ms, backward {:.0} ms, grad norm {:.0} ms ({norm:.3}), adamw {:.0} ms",
            ms(t0, t1),
            ms(t1, t2),
            ms(t2, t3),
            ms(t3, t4),
            ms(t4, t5)
        );
    }
    Ok(())
}
