//! `config.json` parsing: real-world shapes read right, bad ones named.

use temper_model::{Architecture, ModelConfig};

/// SmolLM2-135M-Instruct's `config.json` (the fields that matter).
const SMOLLM2: &str = r#"{
  "architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": 49152,
  "hidden_size": 576, "intermediate_size": 1536, "num_hidden_layers": 30,
  "num_attention_heads": 9, "num_key_value_heads": 3, "rms_norm_eps": 1e-05,
  "rope_theta": 100000, "rope_scaling": null, "max_position_embeddings": 8192,
  "tie_word_embeddings": true, "bos_token_id": 1, "eos_token_id": 2, "hidden_act": "silu"
}"#;

/// Qwen3-0.6B's.
const QWEN3: &str = r#"{
  "architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "vocab_size": 151936,
  "hidden_size": 1024, "intermediate_size": 3072, "num_hidden_layers": 28,
  "num_attention_heads": 16, "num_key_value_heads": 8, "head_dim": 128, "rms_norm_eps": 1e-06,
  "rope_theta": 1000000, "max_position_embeddings": 40960, "tie_word_embeddings": true,
  "attention_bias": false, "bos_token_id": 151643, "eos_token_id": 151645
}"#;

#[test]
fn reads_smollm2_and_qwen3() {
    let s = ModelConfig::from_hf_json(SMOLLM2, "config.json").unwrap();
    assert_eq!(s.architecture, Architecture::Llama);
    assert_eq!((s.head_dim, s.num_key_value_heads, s.rotary_dim()), (64, 3, 64));
    assert!(s.tie_word_embeddings && !s.qk_norm());
    assert_eq!((s.eos_token_ids.as_slice(), s.bos_token_id), (&[2u32][..], Some(1)));
    let q = ModelConfig::from_hf_json(QWEN3, "config.json").unwrap();
    assert_eq!(q.architecture, Architecture::Qwen3);
    assert_eq!((q.head_dim, q.hidden_size), (128, 1024)); // head_dim is not hidden / heads
    assert!(q.qk_norm());
    // What we write reads back the same.
    for c in [s, q] {
        let again = ModelConfig::from_hf_json(&c.to_hf_json().to_string(), "x").unwrap();
        assert_eq!(again, c);
    }
}

#[test]
fn errors_name_the_file_and_field() {
    let cases = [
        (SMOLLM2.replace(r#""hidden_size": 576,"#, ""), "missing field `hidden_size`"),
        (SMOLLM2.replace(r#""llama""#, r#""mamba""#), "model_type `mamba` is not supported"),
        (
            SMOLLM2.replace(r#""num_key_value_heads": 3"#, r#""num_key_value_heads": 4"#),
            "not a multiple",
        ),
        (
            SMOLLM2.replace(r#""vocab_size": 49152"#, r#""vocab_size": -3"#),
            "`vocab_size` must be a positive integer",
        ),
        (
            SMOLLM2.replace(r#""rope_scaling": null"#, r#""rope_scaling": {"type": "yarn"}"#),
            "rope_scaling type",
        ),
        (
            SMOLLM2.replace(r#""rms_norm_eps": 1e-05"#, r#""rms_norm_eps": "small""#),
            "`rms_norm_eps` must be a number",
        ),
        ("{".to_owned(), "not JSON"),
    ];
    for (text, want) in cases {
        let err = ModelConfig::from_hf_json(&text, "models/x/config.json").unwrap_err().to_string();
        assert!(err.starts_with("models/x/config.json: ") && err.contains(want), "{err}");
    }
}
