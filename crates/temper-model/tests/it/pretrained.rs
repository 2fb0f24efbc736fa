//! Real models from the package registries (`scripts/fetch-assets` puts them in `.assets/`).

use std::path::PathBuf;

use candle_core::DType;
use serde_json::json;
use temper_model::{Logits, Pretrained, Tokenizer};

/// A file under the assets folder; fails with the command to run when it is missing.
pub fn asset(rel: &str) -> PathBuf {
    let root = std::env::var_os("TEMPER_ASSETS")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../.assets"));
    let path = root.join(rel);
    assert!(path.exists(), "{} is missing: run scripts/fetch-assets first", path.display());
    path
}

pub fn smollm2() -> PathBuf {
    asset("smollm2/SmolLM2-135M-Instruct.Q4_1.gguf")
}

/// Greedy decoding with the cache, stopping at an end token: the model's own answer.
fn greedy(p: &Pretrained, prompt: &[u32], max: usize) -> Vec<u32> {
    let eos = &p.model.config().eos_token_ids;
    let mut cache = p.model.new_cache();
    let mut out = Vec::new();
    let mut logits = p.model.step(&[prompt], &mut [&mut cache], Logits::Last).unwrap().remove(0);
    for _ in 0..max {
        let next = logits.argmax(0).unwrap().to_scalar::<u32>().unwrap();
        if eos.contains(&next) {
            break;
        }
        out.push(next);
        logits = p.model.step(&[&[next]], &mut [&mut cache], Logits::Last).unwrap().remove(0);
    }
    out
}

#[test]
fn smollm2_gguf_knows_the_capital_of_france() {
    let p = Pretrained::load(&smollm2(), DType::F32, &crate::dev()).unwrap();
    let cfg = p.model.config();
    assert_eq!((cfg.num_hidden_layers, cfg.hidden_size, cfg.num_key_value_heads), (30, 576, 3));
    assert!(cfg.tie_word_embeddings);
    let template = p.chat_template.as_ref().expect("the GGUF carries a chat template");
    let text = template
        .render(
            &[json!({"role": "user", "content": "What is the capital of France?"})],
            None,
            true,
            &Default::default(),
        )
        .unwrap();
    assert!(text.ends_with("<|im_start|>assistant\n"), "{text:?}");
    let prompt = p.tokenizer.encode(&text).unwrap();
    // The role markers are single special tokens, not spelled out.
    let im_start = p.tokenizer.token_to_id("<|im_start|>").unwrap();
    assert_eq!(prompt.iter().filter(|&&t| t == im_start).count(), 3, "{prompt:?}");
    let answer = p.tokenizer.decode(&greedy(&p, &prompt, 24), true).unwrap();
    assert!(answer.contains("Paris"), "answer: {answer:?}");
}

#[test]
fn smollm2_tokenizer_round_trips() {
    let p = Pretrained::load(&smollm2(), DType::F32, &crate::dev()).unwrap();
    round_trips(&p.tokenizer);
    // Digits are split one by one (SmolLM2's pre-tokenizer).
    let ids = p.tokenizer.encode("12345").unwrap();
    assert_eq!(ids.len(), 5, "{ids:?}");
}

pub fn round_trips(tok: &Tokenizer) {
    for text in [
        "Hello, world!",
        "  leading spaces and\ttabs\n\nnewlines  ",
        "unicode: héllo wörld — 日本語のテキスト 🙂🚀",
        "code: fn main() { println!(\"{}\", 1 + 2); }",
        "<|im_start|>user\nhi<|im_end|>\n",
        "",
    ] {
        let ids = tok.encode(text).unwrap();
        assert_eq!(tok.decode(&ids, false).unwrap(), text, "{ids:?}");
    }
}
