//! GGUF files written by hand in the test (the format's definitions, not candle's writer):
//! dequantization of F32, F16, Q8_0, Q4_0 and Q4_1 against the block formats, llama.cpp's
//! query/key row order undone, names mapped, and hostile files refused.

use std::collections::BTreeMap;

use candle_core::{DType, Tensor};
use half::f16;
use temper_model::{Architecture, ModelConfig, Transformer, gguf};

use crate::max_abs_diff;

#[derive(Clone, Copy, Debug)]
enum Kind {
    F32,
    F16,
    Q8_0,
    Q4_0,
    Q4_1,
}

impl Kind {
    fn ggml_type(self) -> u32 {
        match self {
            Kind::F32 => 0,
            Kind::F16 => 1,
            Kind::Q4_0 => 2,
            Kind::Q4_1 => 3,
            Kind::Q8_0 => 8,
        }
    }
}

/// Encodes `row` (a multiple of 32 values for the block formats) and returns the bytes and the
/// values a reader must decode from them, per the GGML definitions:
/// Q8_0 = f16 d + 32 i8 (x = q·d); Q4_0 = f16 d + 16 bytes (x = (nibble − 8)·d, low nibbles are
/// elements 0–15, high nibbles 16–31); Q4_1 = f16 d + f16 m + 16 bytes (x = nibble·d + m).
fn encode(kind: Kind, row: &[f32]) -> (Vec<u8>, Vec<f32>) {
    let mut bytes = Vec::new();
    let mut values = Vec::new();
    match kind {
        Kind::F32 => {
            for x in row {
                bytes.extend(x.to_le_bytes());
                values.push(*x);
            }
        }
        Kind::F16 => {
            for x in row {
                let h = f16::from_f32(*x);
                bytes.extend(h.to_bits().to_le_bytes());
                values.push(h.to_f32());
            }
        }
        Kind::Q8_0 => {
            for block in row.chunks(32) {
                let amax = block.iter().fold(0f32, |m, x| m.max(x.abs()));
                let d = f16::from_f32(amax / 127.0);
                bytes.extend(d.to_bits().to_le_bytes());
                for x in block {
                    let q = if d.to_f32() == 0.0 {
                        0
                    } else {
                        (x / d.to_f32()).round().clamp(-127.0, 127.0) as i8
                    };
                    bytes.push(q as u8);
                    values.push(q as f32 * d.to_f32());
                }
            }
        }
        Kind::Q4_0 => {
            for block in row.chunks(32) {
                let max =
                    block.iter().copied().fold(0f32, |m, x| if x.abs() > m.abs() { x } else { m });
                let d = f16::from_f32(max / -8.0);
                let df = d.to_f32();
                bytes.extend(d.to_bits().to_le_bytes());
                let q: Vec<u8> = block
                    .iter()
                    .map(|x| if df == 0.0 { 8 } else { ((x / df) + 8.5).clamp(0.0, 15.0) as u8 })
                    .collect();
                for j in 0..16 {
                    bytes.push(q[j] | (q[j + 16] << 4));
                }
                values.extend(q.iter().map(|&n| (n as f32 - 8.0) * df));
            }
        }
        Kind::Q4_1 => {
            for block in row.chunks(32) {
                let min = block.iter().copied().fold(f32::MAX, f32::min);
                let max = block.iter().copied().fold(f32::MIN, f32::max);
                let d = f16::from_f32((max - min) / 15.0);
                let m = f16::from_f32(min);
                let (df, mf) = (d.to_f32(), m.to_f32());
                bytes.extend(d.to_bits().to_le_bytes());
                bytes.extend(m.to_bits().to_le_bytes());
                let q: Vec<u8> =
                    block
                        .iter()
                        .map(|x| {
                            if df == 0.0 {
                                0
                            } else {
                                (((x - mf) / df) + 0.5).clamp(0.0, 15.0) as u8
                            }
                        })
                        .collect();
                for j in 0..16 {
                    bytes.push(q[j] | (q[j + 16] << 4));
                }
                values.extend(q.iter().map(|&n| n as f32 * df + mf));
            }
        }
    }
    (bytes, values)
}

enum Meta {
    U32(u32),
    F32(f32),
    Str(String),
    Strs(Vec<String>),
    I32s(Vec<i32>),
}

fn put_str(out: &mut Vec<u8>, s: &str) {
    out.extend((s.len() as u64).to_le_bytes());
    out.extend(s.as_bytes());
}

/// A GGUF v3 file: metadata, then tensors (`[rows, cols]` in Hugging Face order) as raw bytes.
fn write_gguf(meta: &[(&str, Meta)], tensors: &[(String, Vec<usize>, Kind, Vec<u8>)]) -> Vec<u8> {
    let mut out = Vec::new();
    out.extend(0x4655_4747u32.to_le_bytes());
    out.extend(3u32.to_le_bytes());
    out.extend((tensors.len() as u64).to_le_bytes());
    out.extend((meta.len() as u64).to_le_bytes());
    for (key, value) in meta {
        put_str(&mut out, key);
        match value {
            Meta::U32(v) => {
                out.extend(4u32.to_le_bytes());
                out.extend(v.to_le_bytes());
            }
            Meta::F32(v) => {
                out.extend(6u32.to_le_bytes());
                out.extend(v.to_le_bytes());
            }
            Meta::Str(s) => {
                out.extend(8u32.to_le_bytes());
                put_str(&mut out, s);
            }
            Meta::Strs(list) => {
                out.extend(9u32.to_le_bytes());
                out.extend(8u32.to_le_bytes());
                out.extend((list.len() as u64).to_le_bytes());
                for s in list {
                    put_str(&mut out, s);
                }
            }
            Meta::I32s(list) => {
                out.extend(9u32.to_le_bytes());
                out.extend(5u32.to_le_bytes());
                out.extend((list.len() as u64).to_le_bytes());
                for v in list {
                    out.extend(v.to_le_bytes());
                }
            }
        }
    }
    let mut offset = 0u64;
    let mut offsets = Vec::new();
    for (_, _, _, data) in tensors {
        offsets.push(offset);
        offset += (data.len() as u64).div_ceil(32) * 32;
    }
    for ((name, shape, kind, _), off) in tensors.iter().zip(&offsets) {
        put_str(&mut out, name);
        out.extend((shape.len() as u32).to_le_bytes());
        for d in shape.iter().rev() {
            out.extend((*d as u64).to_le_bytes()); // GGUF lists the innermost dimension first
        }
        out.extend(kind.ggml_type().to_le_bytes());
        out.extend(off.to_le_bytes());
    }
    while out.len() % 32 != 0 {
        out.push(0);
    }
    for (_, _, _, data) in tensors {
        out.extend(data);
        while out.len() % 32 != 0 {
            out.push(0);
        }
    }
    out
}

/// llama.cpp's conversion of a Hugging Face query/key projection: within each head, rows
/// `0..d/2` and `d/2..d` are interleaved.
fn permute_rows(rows: &[Vec<f32>], heads: usize) -> Vec<Vec<f32>> {
    let hd = rows.len() / heads;
    let mut out = Vec::with_capacity(rows.len());
    for h in 0..heads {
        for i in 0..hd / 2 {
            for half in 0..2 {
                out.push(rows[h * hd + half * hd / 2 + i].clone());
            }
        }
    }
    out
}

fn gguf_name(hf: &str) -> String {
    let map = [
        ("model.embed_tokens.weight", "token_embd.weight"),
        ("model.norm.weight", "output_norm.weight"),
        ("lm_head.weight", "output.weight"),
    ];
    if let Some((_, g)) = map.iter().find(|(h, _)| *h == hf) {
        return (*g).to_owned();
    }
    let rest = hf.strip_prefix("model.layers.").unwrap();
    let (layer, rest) = rest.split_once('.').unwrap();
    let part = [
        ("input_layernorm.weight", "attn_norm.weight"),
        ("self_attn.q_proj.weight", "attn_q.weight"),
        ("self_attn.k_proj.weight", "attn_k.weight"),
        ("self_attn.v_proj.weight", "attn_v.weight"),
        ("self_attn.o_proj.weight", "attn_output.weight"),
        ("post_attention_layernorm.weight", "ffn_norm.weight"),
        ("mlp.gate_proj.weight", "ffn_gate.weight"),
        ("mlp.up_proj.weight", "ffn_up.weight"),
        ("mlp.down_proj.weight", "ffn_down.weight"),
    ]
    .iter()
    .find(|(h, _)| *h == rest)
    .unwrap()
    .1;
    format!("blk.{layer}.{part}")
}

fn tiny() -> ModelConfig {
    let mut cfg = ModelConfig::tiny(Architecture::Llama, 40);
    cfg.rope_theta = 500.0;
    cfg.eos_token_ids = vec![2];
    cfg.bos_token_id = Some(1);
    cfg
}

fn tokens() -> Vec<String> {
    // Byte-level BPE symbols: printable ASCII stands for itself.
    let mut t: Vec<String> = (0..39).map(|i| char::from(b'A' + i as u8).to_string()).collect();
    t.push("AB".into());
    t
}

/// The GGUF of `model` with each weight stored as `kind_of(name)`, and the weights a reader must
/// recover (Hugging Face order, after quantization).
fn to_gguf(
    model: &Transformer,
    kind_of: impl Fn(&str) -> Kind,
) -> (Vec<u8>, BTreeMap<String, Tensor>) {
    let cfg = model.config();
    let meta = vec![
        ("general.architecture", Meta::Str("llama".into())),
        ("llama.block_count", Meta::U32(cfg.num_hidden_layers as u32)),
        ("llama.context_length", Meta::U32(cfg.max_position_embeddings as u32)),
        ("llama.embedding_length", Meta::U32(cfg.hidden_size as u32)),
        ("llama.feed_forward_length", Meta::U32(cfg.intermediate_size as u32)),
        ("llama.attention.head_count", Meta::U32(cfg.num_attention_heads as u32)),
        ("llama.attention.head_count_kv", Meta::U32(cfg.num_key_value_heads as u32)),
        ("llama.attention.layer_norm_rms_epsilon", Meta::F32(cfg.rms_norm_eps as f32)),
        ("llama.rope.freq_base", Meta::F32(cfg.rope_theta as f32)),
        ("tokenizer.ggml.model", Meta::Str("gpt2".into())),
        ("tokenizer.ggml.pre", Meta::Str("gpt2".into())),
        ("tokenizer.ggml.tokens", Meta::Strs(tokens())),
        (
            "tokenizer.ggml.token_type",
            Meta::I32s((0..40).map(|i| if i == 2 { 3 } else { 1 }).collect()),
        ),
        ("tokenizer.ggml.merges", Meta::Strs(vec!["A B".into()])),
        ("tokenizer.ggml.bos_token_id", Meta::U32(1)),
        ("tokenizer.ggml.eos_token_id", Meta::U32(2)),
        (
            "tokenizer.chat_template",
            Meta::Str("{% for m in messages %}{{ m.content }}{% endfor %}".into()),
        ),
    ];
    let mut tensors = Vec::new();
    let mut expected = BTreeMap::new();
    for (name, t) in model.tensors() {
        let kind = kind_of(&name);
        let dims = t.dims().to_vec();
        let rows: Vec<Vec<f32>> =
            if dims.len() == 1 { vec![t.to_vec1().unwrap()] } else { t.to_vec2().unwrap() };
        let permuted = if name.ends_with("q_proj.weight") {
            permute_rows(&rows, cfg.num_attention_heads)
        } else if name.ends_with("k_proj.weight") {
            permute_rows(&rows, cfg.num_key_value_heads)
        } else {
            rows.clone()
        };
        let mut bytes = Vec::new();
        for row in &permuted {
            bytes.extend(encode(kind, row).0);
        }
        let values: Vec<f32> = rows.iter().flat_map(|r| encode(kind, r).1).collect();
        expected.insert(
            name.clone(),
            Tensor::from_vec(values, dims.as_slice(), &crate::dev()).unwrap(),
        );
        tensors.push((gguf_name(&name), dims, kind, bytes));
    }
    (write_gguf(&meta, &tensors), expected)
}

#[test]
fn quantized_weights_decode_as_the_formats_define() {
    let model = Transformer::init_random(tiny(), 21, &crate::dev()).unwrap();
    let kind_of = |name: &str| match name {
        n if n.contains("q_proj") || n.contains("up_proj") => Kind::Q4_0,
        n if n.contains("k_proj") || n.contains("gate_proj") => Kind::Q4_1,
        n if n.contains("v_proj") || n.contains("embed") => Kind::Q8_0,
        n if n.contains("o_proj") || n.contains("lm_head") => Kind::F16,
        _ => Kind::F32,
    };
    let (bytes, expected) = to_gguf(&model, kind_of);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tiny.gguf");
    std::fs::write(&path, bytes).unwrap();
    let g = gguf::load_gguf(&path, DType::F32, &crate::dev()).unwrap();
    assert_eq!(g.config.num_attention_heads, 4);
    assert_eq!((g.config.rope_theta, g.config.tie_word_embeddings), (500.0, false));
    assert_eq!(g.tensors.keys().collect::<Vec<_>>(), expected.keys().collect::<Vec<_>>());
    for (name, want) in &expected {
        let d = max_abs_diff(&g.tensors[name], want);
        assert!(d < 1e-6, "{name}: {d}");
        // The quantization did change the weights (so the check above is not vacuous).
        if !matches!(kind_of(name), Kind::F32) {
            assert!(max_abs_diff(want, &model.tensors()[name]) > 0.0, "{name}");
        }
    }
    assert_eq!(g.tokenizer.token_to_id("C"), Some(2));
    assert!(g.tokenizer.is_special(2));
    assert_eq!(g.tokenizer.encode("ABDC").unwrap(), [39, 3, 2]); // "AB" merged; "C" is special
}

#[test]
fn f32_gguf_gives_the_logits_of_the_original_model() {
    let model = Transformer::init_random(tiny(), 22, &crate::dev()).unwrap();
    let (bytes, _) = to_gguf(&model, |_| Kind::F32);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tiny.gguf");
    std::fs::write(&path, bytes).unwrap();
    let p = temper_model::Pretrained::load(&path, DType::F32, &crate::dev()).unwrap();
    let toks = [3u32, 7, 1, 30, 12, 5, 5, 9];
    let d = max_abs_diff(&p.model.forward(&toks).unwrap(), &model.forward(&toks).unwrap());
    assert!(d < 1e-6, "{d}");
    assert_eq!(p.model.config().eos_token_ids, vec![2]);
    let out = p.chat_template.unwrap().render(
        &[serde_json::json!({"role": "user", "content": "AB"})],
        None,
        false,
        &Default::default(),
    );
    assert_eq!(out.unwrap(), "AB");
    // The same weights with llama.cpp's row order left in place give other logits: the
    // unpermutation matters.
    let mut t = model.tensors();
    let q = &t["model.layers.0.self_attn.q_proj.weight"];
    let rows: Vec<Vec<f32>> = q.to_vec2().unwrap();
    let flat: Vec<f32> = permute_rows(&rows, 4).concat();
    t.insert(
        "model.layers.0.self_attn.q_proj.weight".into(),
        Tensor::from_vec(flat, q.dims(), &crate::dev()).unwrap(),
    );
    let wrong = Transformer::from_tensors(tiny(), t, DType::F32, &crate::dev()).unwrap();
    assert!(max_abs_diff(&wrong.forward(&toks).unwrap(), &model.forward(&toks).unwrap()) > 1e-4);
}

#[test]
fn hostile_gguf_files_are_refused() {
    let model = Transformer::init_random(tiny(), 23, &crate::dev()).unwrap();
    let (bytes, _) = to_gguf(&model, |_| Kind::F32);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bad.gguf");
    // Truncated: the tensor data runs past the end of the file.
    std::fs::write(&path, &bytes[..bytes.len() - 100]).unwrap();
    let err = gguf::load_gguf(&path, DType::F32, &crate::dev()).unwrap_err().to_string();
    assert!(err.contains("bad.gguf"), "{err}");
    // Not GGUF at all.
    std::fs::write(&path, b"PK\x03\x04 not a gguf").unwrap();
    let err = gguf::load_gguf(&path, DType::F32, &crate::dev()).unwrap_err().to_string();
    assert!(err.contains("bad.gguf") && err.contains("GGUF"), "{err}");
    // A header claiming 2^40 tensors.
    let mut huge = bytes.clone();
    huge[8..16].copy_from_slice(&(1u64 << 40).to_le_bytes());
    std::fs::write(&path, &huge).unwrap();
    assert!(gguf::load_gguf(&path, DType::F32, &crate::dev()).is_err());
    // An unsupported architecture is named.
    let arch = bytes.windows(5).position(|w| w == b"llama").unwrap();
    let mut other = bytes.clone();
    other[arch..arch + 5].copy_from_slice(b"mamba");
    std::fs::write(&path, &other).unwrap();
    let err = gguf::load_gguf(&path, DType::F32, &crate::dev()).unwrap_err().to_string();
    assert!(err.contains("mamba"), "{err}");
    // A merge whose result is not a token (the tokenizers crate would panic on it).
    let merge = bytes.windows(3).position(|w| w == b"A B").unwrap();
    let mut other = bytes;
    other[merge..merge + 3].copy_from_slice(b"A C");
    std::fs::write(&path, &other).unwrap();
    let err = gguf::load_gguf(&path, DType::F32, &crate::dev()).unwrap_err().to_string();
    assert!(err.contains("merge `A C`: `AC` is not in the vocabulary"), "{err}");
}
