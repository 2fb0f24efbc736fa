//! Chat templates and tokenizers against Hugging Face transformers (Python jinja2), on the
//! fixtures `scripts/model-fixtures.py` wrote; multi-turn continuation by appending tokens.

use candle_core::DType;
use serde_json::{Map, Value, json};
use temper_model::{ChatTemplate, Pretrained, Tokenizer};

use crate::pretrained::{asset, round_trips, smollm2};

fn fixtures() -> Value {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/fixtures.json");
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

fn qwen3_template() -> ChatTemplate {
    ChatTemplate::from_tokenizer_config(&asset("qwen3-tokenizer/tokenizer_config.json")).unwrap()
}

fn render(t: &ChatTemplate, conv: &Value) -> String {
    let messages = conv["messages"].as_array().unwrap();
    let tools = conv.get("tools").map(|t| t.as_array().unwrap().as_slice());
    let mut extra = Map::new();
    if let Some(v) = conv.get("enable_thinking") {
        extra.insert("enable_thinking".into(), v.clone());
    }
    let gen_prompt = conv.get("add_generation_prompt").and_then(Value::as_bool).unwrap_or(true);
    t.render(messages, tools, gen_prompt, &extra).unwrap()
}

fn check_renderings(name: &str, template: &ChatTemplate) {
    let f = fixtures();
    let expected = f["render"][name].as_object().unwrap();
    assert!(expected.len() >= 5);
    for (conv_name, want) in expected {
        let got = render(template, &f["conversations"][conv_name]);
        assert_eq!(got, want.as_str().unwrap(), "{name} template, conversation `{conv_name}`");
    }
}

#[test]
fn qwen3_template_renders_as_jinja2_does() {
    check_renderings("qwen3", &qwen3_template());
}

#[test]
fn smollm2_template_renders_as_jinja2_does() {
    let p = Pretrained::load(&smollm2(), DType::F32, &crate::dev()).unwrap();
    check_renderings("smollm2", p.chat_template.as_ref().unwrap());
}

fn check_tokens(name: &str, tok: &Tokenizer) {
    let f = fixtures();
    for case in f["tokens"][name].as_array().unwrap() {
        let text = case["text"].as_str().unwrap();
        let want: Vec<u32> = serde_json::from_value(case["ids"].clone()).unwrap();
        assert_eq!(tok.encode(text).unwrap(), want, "{name}: {text:?}");
    }
}

#[test]
fn smollm2_gguf_tokenizer_matches_transformers() {
    let p = Pretrained::load(&smollm2(), DType::F32, &crate::dev()).unwrap();
    check_tokens("smollm2", &p.tokenizer);
}

#[test]
fn qwen3_tokenizer_json_matches_transformers_and_round_trips() {
    let tok = Tokenizer::from_file(&asset("qwen3-tokenizer/tokenizer.json")).unwrap();
    check_tokens("qwen3", &tok);
    round_trips(&tok);
    assert_eq!(tok.token_to_id("<|im_end|>"), Some(151645));
}

/// The GGUF reader's BPE built from the Qwen3 vocabulary with the `qwen2` pre-tokenizer gives
/// the ids of the real tokenizer.json.
#[test]
fn gguf_style_bpe_equals_tokenizer_json() {
    let json: Value = serde_json::from_str(
        &std::fs::read_to_string(asset("qwen3-tokenizer/tokenizer.json")).unwrap(),
    )
    .unwrap();
    let vocab = json["model"]["vocab"].as_object().unwrap();
    let added = json["added_tokens"].as_array().unwrap();
    let n = vocab.len() + added.len();
    let mut tokens = vec![String::new(); n];
    let mut types = vec![1i32; n];
    for (t, id) in vocab {
        tokens[id.as_u64().unwrap() as usize] = t.clone();
    }
    for a in added {
        let id = a["id"].as_u64().unwrap() as usize;
        tokens[id] = a["content"].as_str().unwrap().to_owned();
        types[id] = if a["special"].as_bool().unwrap() { 3 } else { 4 };
    }
    let merges: Vec<String> = json["model"]["merges"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| match m {
            Value::String(s) => s.clone(),
            Value::Array(pair) => {
                format!("{} {}", pair[0].as_str().unwrap(), pair[1].as_str().unwrap())
            }
            other => panic!("merge {other}"),
        })
        .collect();
    let tok = Tokenizer::from_gguf_bpe(&tokens, &merges, &types, "qwen2", "qwen3").unwrap();
    check_tokens("qwen3", &tok);
    round_trips(&tok);
}

/// The next turn is appended as tokens: what was sampled is never re-tokenized, and the text
/// added is exactly the template's continuation.
#[test]
fn multi_turn_continuation_appends_tokens() {
    let tok = Tokenizer::from_file(&asset("qwen3-tokenizer/tokenizer.json")).unwrap();
    let template = qwen3_template();
    let none = Map::new();
    let user1 = json!({"role": "user", "content": "2+2?"});
    let prompt = tok
        .encode(&template.render(std::slice::from_ref(&user1), None, true, &none).unwrap())
        .unwrap();
    // What the model sampled, ending with its end token; tokenized as sampled (here: deliberately
    // split " 4" into characters, which re-tokenizing the text would merge).
    let mut sampled = tok.encode("<think>\nok\n</think>\n\n").unwrap();
    sampled.extend(tok.encode(" ").unwrap());
    sampled.extend(tok.encode("4").unwrap());
    sampled.push(tok.token_to_id("<|im_end|>").unwrap());
    let assistant = json!({"role": "assistant", "content": tok.decode(&sampled, true).unwrap()});
    let user2 = json!({"role": "user", "content": "and 3+3?"});
    let tool = json!({"role": "tool", "content": "result"});

    let text =
        template.continuation(&[user1.clone(), assistant.clone()], &[user2], None, &none).unwrap();
    assert_eq!(text, "\n<|im_start|>user\nand 3+3?<|im_end|>\n<|im_start|>assistant\n");
    let text = template.continuation(&[user1, assistant], &[tool], None, &none).unwrap();
    assert_eq!(
        text,
        "\n<|im_start|>user\n<tool_response>\nresult\n</tool_response><|im_end|>\n<|im_start|>assistant\n"
    );
    let mut all = prompt.clone();
    all.extend(&sampled);
    let before = all.len();
    all.extend(tok.encode(&text).unwrap());
    assert_eq!(&all[..before - sampled.len()], prompt.as_slice());
    assert_eq!(&all[prompt.len()..before], sampled.as_slice());

    // A template that does not rewrite history: the appended text makes the full rendering.
    let p = Pretrained::load(&smollm2(), DType::F32, &crate::dev()).unwrap();
    let t = p.chat_template.as_ref().unwrap();
    let h = [
        json!({"role": "user", "content": "hi"}),
        json!({"role": "assistant", "content": "hello"}),
    ];
    let new = [json!({"role": "user", "content": "bye"})];
    // The sampled turn ends with its end token; the template's own newline after it is part of
    // the continuation.
    let rendered = t.render(&h, None, false, &none).unwrap();
    let end = rendered.rfind("<|im_end|>").unwrap() + "<|im_end|>".len();
    let all: Vec<Value> = h.iter().chain(&new).cloned().collect();
    let cont = t.continuation(&h, &new, None, &none).unwrap();
    assert_eq!(cont, "\n<|im_start|>user\nbye<|im_end|>\n<|im_start|>assistant\n");
    assert_eq!(rendered[..end].to_owned() + &cont, t.render(&all, None, true, &none).unwrap());
    // Only after an assistant turn.
    assert!(t.continuation(&new, &h, None, &none).is_err());
}

#[test]
fn template_errors_and_runaway_templates_are_reported() {
    let none = Map::new();
    let m = [json!({"role": "user", "content": "x"})];
    let t = ChatTemplate::new("{{ raise_exception('only user/assistant roles') }}", "", "", "t")
        .unwrap();
    let err = t.render(&m, None, true, &none).unwrap_err().to_string();
    assert!(err.contains("only user/assistant roles"), "{err}");
    let err = ChatTemplate::new("{% for %}", "", "", "models/x/tokenizer_config.json")
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("models/x/tokenizer_config.json") && err.contains("does not compile"),
        "{err}"
    );
    // Loops that would run for ages run out of fuel.
    let t = ChatTemplate::new(
        "{% for a in range(100000) %}{% for b in range(100000) %}{% endfor %}{% endfor %}",
        "",
        "",
        "t",
    )
    .unwrap();
    let started = std::time::Instant::now();
    assert!(t.render(&m, None, true, &none).is_err());
    assert!(started.elapsed().as_secs() < 30);
    // Python string methods and tojson as Python writes it.
    let t = ChatTemplate::new(
        "{{ messages[0].content.strip().upper() }}|{{ {'b': 1, 'a': [1.5, none, 'é']} | tojson }}|{{ {'b': 1, 'a': 2} | tojson(sort_keys=true) }}|{{ [1] | tojson(indent=2) }}",
        "",
        "",
        "t",
    )
    .unwrap();
    let out = t.render(&[json!({"role": "user", "content": "  hi "})], None, false, &none).unwrap();
    assert_eq!(out, "HI|{\"b\": 1, \"a\": [1.5, null, \"é\"]}|{\"a\": 2, \"b\": 1}|[\n  1\n]");
}

#[test]
fn byte_tokenizer_round_trips_and_keeps_specials_whole() {
    let tok = Tokenizer::bytes(&["<|end|>", "<|e|>"]);
    round_trips(&tok);
    assert_eq!(tok.encode("a<|end|>b<|e|>").unwrap(), [97, 256, 98, 257]);
    assert_eq!(tok.decode(&[97, 256, 98], true).unwrap(), "ab");
    assert_eq!(tok.vocab_size(), 258);
    // A character split over tokens is held back by the stream decoder until complete.
    let ids = tok.encode("é!").unwrap();
    let mut s = temper_model::StreamDecoder::new();
    let parts: Vec<String> = ids.iter().map(|&i| s.step(&tok, i, false).unwrap()).collect();
    assert_eq!(parts, ["", "é", "!"]);
}

#[test]
fn byte_tokenizer_saved_as_tokenizer_json_keeps_every_id() {
    let tok = Tokenizer::bytes(&["<|im_start|>", "<|im_end|>"]);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tokenizer.json");
    tok.save(&path).unwrap();
    let back = Tokenizer::from_file(&path).unwrap();
    let all_bytes: Vec<u8> = (0..=255u8).collect();
    let texts = [
        "<|im_start|>user\nhello wörld  \t!<|im_end|>\n".to_owned(),
        "ünïcødé 🙂 and spaces   ".to_owned(),
        String::from_utf8_lossy(&all_bytes).into_owned(),
    ];
    for text in &texts {
        let ids = tok.encode(text).unwrap();
        assert_eq!(back.encode(text).unwrap(), ids, "{text:?}");
        assert_eq!(back.decode(&ids, false).unwrap(), *text);
        assert_eq!(back.decode(&ids, true).unwrap(), tok.decode(&ids, true).unwrap());
    }
    assert_eq!(back.vocab_size(), tok.vocab_size());
    assert_eq!(back.token_to_id("<|im_end|>"), Some(257));
    assert!(back.is_special(257) && !back.is_special(97));
}
