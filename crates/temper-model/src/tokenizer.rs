//! Text ⇄ token ids: a Hugging Face `tokenizer.json`, the tokenizer embedded in a GGUF file, or a
//! byte-level tokenizer for tiny models trained from scratch.

use std::path::Path;

use tokenizers::decoders::byte_level::ByteLevel as ByteLevelDecoder;
use tokenizers::models::bpe::BPE;
use tokenizers::pre_tokenizers::PreTokenizerWrapper;
use tokenizers::pre_tokenizers::byte_level::ByteLevel;
use tokenizers::pre_tokenizers::digits::Digits;
use tokenizers::pre_tokenizers::sequence::Sequence;
use tokenizers::pre_tokenizers::split::{Split, SplitPattern};
use tokenizers::{AddedToken, SplitDelimiterBehavior};

use crate::ModelError;

/// The pre-tokenizer regex of GPT-4-style BPE vocabularies (Qwen2/Qwen3): contractions, letter
/// runs with one leading non-letter, single digits, punctuation runs, newlines, spaces.
const QWEN2_PATTERN: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
/// Llama 3's: as Qwen2's, with digits in runs of up to three.
const LLAMA3_PATTERN: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// A tokenizer: encodes text (special tokens written in the text become their ids) and decodes
/// ids back to text.
#[derive(Debug, Clone)]
pub struct Tokenizer {
    inner: Inner,
}

#[derive(Debug, Clone)]
enum Inner {
    Hf(Box<tokenizers::Tokenizer>),
    Bytes(ByteTokenizer),
}

/// Ids 0–255 are the bytes; special tokens follow from 256.
#[derive(Debug, Clone)]
struct ByteTokenizer {
    specials: Vec<String>,
}

fn tok_err(source: &str, e: impl std::fmt::Display) -> ModelError {
    ModelError::Config { file: source.to_owned(), message: format!("tokenizer: {e}") }
}

impl Tokenizer {
    /// Reads a Hugging Face `tokenizer.json`.
    pub fn from_file(path: &Path) -> Result<Self, ModelError> {
        let bytes = std::fs::read(path)
            .map_err(|source| ModelError::Io { path: path.display().to_string(), source })?;
        let inner = tokenizers::Tokenizer::from_bytes(&bytes)
            .map_err(|e| tok_err(&path.display().to_string(), e))?;
        Ok(Self { inner: Inner::Hf(Box::new(inner)) })
    }

    /// A byte-level BPE tokenizer from the vocabulary embedded in a GGUF file
    /// (`tokenizer.ggml.model = "gpt2"`): `tokens` by id, `merges` as `"a b"`, `types` the
    /// llama.cpp token types (3 = control and 4 = user-defined become special tokens), and `pre`
    /// the pre-tokenizer name (`tokenizer.ggml.pre`). `source` names the file in errors.
    pub fn from_gguf_bpe(
        tokens: &[String],
        merges: &[String],
        types: &[i32],
        pre: &str,
        source: &str,
    ) -> Result<Self, ModelError> {
        let vocab: tokenizers::models::bpe::Vocab =
            tokens.iter().enumerate().map(|(i, t)| (t.clone(), i as u32)).collect();
        if types.len() != tokens.len() {
            return Err(tok_err(
                source,
                format!("{} token types for {} tokens", types.len(), tokens.len()),
            ));
        }
        // The tokenizers crate panics on a merge whose parts or result are not in the
        // vocabulary; the file is untrusted, so check first.
        let merges = merges
            .iter()
            .map(|m| {
                let (a, b) = m
                    .split_once(' ')
                    .ok_or_else(|| tok_err(source, format!("merge `{m}` is not two tokens")))?;
                for part in [a, b, &format!("{a}{b}")] {
                    if !vocab.contains_key(part) {
                        return Err(tok_err(
                            source,
                            format!("merge `{m}`: `{part}` is not in the vocabulary"),
                        ));
                    }
                }
                Ok((a.to_owned(), b.to_owned()))
            })
            .collect::<Result<Vec<_>, _>>()?;
        let bpe = BPE::builder()
            .vocab_and_merges(vocab, merges)
            .build()
            .map_err(|e| tok_err(source, e))?;
        let split = |pattern: &str| -> Result<PreTokenizerWrapper, ModelError> {
            Ok(Split::new(
                SplitPattern::Regex(pattern.to_owned()),
                SplitDelimiterBehavior::Isolated,
                false,
            )
            .map_err(|e| tok_err(source, e))?
            .into())
        };
        let byte_level =
            |use_regex| PreTokenizerWrapper::from(ByteLevel::new(false, true, use_regex));
        let pre_tokenizer: PreTokenizerWrapper = match pre {
            "gpt2" | "default" => byte_level(true),
            "smollm" | "starcoder" => {
                Sequence::new(vec![Digits::new(true).into(), byte_level(true)]).into()
            }
            "qwen2" | "deepseek-r1-qwen" => {
                Sequence::new(vec![split(QWEN2_PATTERN)?, byte_level(false)]).into()
            }
            "llama-bpe" | "llama3" => {
                Sequence::new(vec![split(LLAMA3_PATTERN)?, byte_level(false)]).into()
            }
            other => {
                return Err(tok_err(
                    source,
                    format!(
                        "pre-tokenizer `{other}` (tokenizer.ggml.pre) is not supported (supported: gpt2, smollm, starcoder, qwen2, llama-bpe); use the model's tokenizer.json instead"
                    ),
                ));
            }
        };
        let mut tok = tokenizers::Tokenizer::new(bpe);
        tok.with_pre_tokenizer(Some(pre_tokenizer));
        tok.with_decoder(Some(ByteLevelDecoder::default()));
        let specials: Vec<AddedToken> = tokens
            .iter()
            .zip(types)
            .filter(|(_, ty)| matches!(ty, 3 | 4))
            .map(|(t, _)| AddedToken::from(t.clone(), true))
            .collect();
        tok.add_special_tokens(specials).map_err(|e| tok_err(source, e))?;
        Ok(Self { inner: Inner::Hf(Box::new(tok)) })
    }

    /// A byte-level tokenizer: ids 0–255 are bytes, `specials` get 256, 257, … in order.
    pub fn bytes(specials: &[&str]) -> Self {
        Self {
            inner: Inner::Bytes(ByteTokenizer {
                specials: specials.iter().map(|s| (*s).to_owned()).collect(),
            }),
        }
    }

    /// Writes the tokenizer as a Hugging Face `tokenizer.json`, which this crate,
    /// transformers and vLLM read back with the same ids. The byte-level tokenizer becomes a
    /// byte-level BPE without merges (one token per byte, id = byte value) and its special
    /// tokens as added tokens from 256.
    pub fn save(&self, path: &Path) -> Result<(), ModelError> {
        let name = path.display().to_string();
        let hf = match &self.inner {
            Inner::Hf(t) => t.as_ref().clone(),
            Inner::Bytes(b) => b.to_hf().map_err(|e| tok_err(&name, e))?,
        };
        let text = hf.to_string(true).map_err(|e| tok_err(&name, e))?;
        std::fs::write(path, text).map_err(|source| ModelError::Io { path: name, source })
    }

    /// Token ids of `text`; special tokens written in it (such as `<|im_start|>`) become their
    /// ids. Nothing is added (no BOS): chat templates write their own.
    pub fn encode(&self, text: &str) -> Result<Vec<u32>, ModelError> {
        match &self.inner {
            Inner::Hf(t) => {
                Ok(t.encode(text, false).map_err(|e| tok_err("tokenizer", e))?.get_ids().to_vec())
            }
            Inner::Bytes(b) => Ok(b.encode(text)),
        }
    }

    /// The text of `ids`; special tokens are left out when `skip_special` is set. Bytes that do
    /// not form UTF-8 become U+FFFD.
    pub fn decode(&self, ids: &[u32], skip_special: bool) -> Result<String, ModelError> {
        match &self.inner {
            Inner::Hf(t) => t.decode(ids, skip_special).map_err(|e| tok_err("tokenizer", e)),
            Inner::Bytes(b) => Ok(b.decode(ids, skip_special)),
        }
    }

    /// Tokens in the vocabulary, special ones included.
    pub fn vocab_size(&self) -> usize {
        match &self.inner {
            Inner::Hf(t) => t.get_vocab_size(true),
            Inner::Bytes(b) => 256 + b.specials.len(),
        }
    }

    /// The id of a token written as it is in the vocabulary (such as `<|im_end|>`).
    pub fn token_to_id(&self, token: &str) -> Option<u32> {
        match &self.inner {
            Inner::Hf(t) => t.token_to_id(token),
            Inner::Bytes(b) => b.specials.iter().position(|s| s == token).map(|i| 256 + i as u32),
        }
    }

    /// The vocabulary entry of `id` (byte-level BPE shows spaces as `Ġ`).
    pub fn id_to_token(&self, id: u32) -> Option<String> {
        match &self.inner {
            Inner::Hf(t) => t.id_to_token(id),
            Inner::Bytes(b) => match id {
                0..=255 => Some(format!("<0x{id:02X}>")),
                _ => b.specials.get(id as usize - 256).cloned(),
            },
        }
    }

    /// Whether `id` is a special token (decoded as nothing when skipping special tokens).
    pub fn is_special(&self, id: u32) -> bool {
        match &self.inner {
            Inner::Hf(t) => {
                t.get_added_vocabulary().is_special_token(&t.id_to_token(id).unwrap_or_default())
            }
            Inner::Bytes(_) => id >= 256,
        }
    }
}

impl ByteTokenizer {
    /// The same tokenizer as a Hugging Face one (see [`Tokenizer::save`]).
    fn to_hf(&self) -> Result<tokenizers::Tokenizer, String> {
        let vocab: tokenizers::models::bpe::Vocab =
            (0..=255u8).map(|b| (byte_char(b).to_string(), u32::from(b))).collect();
        let bpe = BPE::builder()
            .vocab_and_merges(vocab, Vec::new())
            .build()
            .map_err(|e| e.to_string())?;
        let mut tok = tokenizers::Tokenizer::new(bpe);
        tok.with_pre_tokenizer(Some(ByteLevel::new(false, true, false)));
        tok.with_decoder(Some(ByteLevelDecoder::default()));
        let specials: Vec<AddedToken> =
            self.specials.iter().map(|s| AddedToken::from(s.clone(), true)).collect();
        tok.add_special_tokens(specials).map_err(|e| e.to_string())?;
        Ok(tok)
    }

    fn encode(&self, text: &str) -> Vec<u32> {
        let mut out = Vec::with_capacity(text.len());
        let mut rest = text;
        while !rest.is_empty() {
            // The earliest special token, the longest one when several start there.
            let next = self
                .specials
                .iter()
                .enumerate()
                .filter(|(_, s)| !s.is_empty())
                .filter_map(|(i, s)| {
                    rest.find(s.as_str()).map(|at| (at, std::cmp::Reverse(s.len()), i))
                })
                .min();
            match next {
                Some((at, std::cmp::Reverse(len), i)) => {
                    out.extend(rest[..at].bytes().map(u32::from));
                    out.push(256 + i as u32);
                    rest = &rest[at + len..];
                }
                None => {
                    out.extend(rest.bytes().map(u32::from));
                    break;
                }
            }
        }
        out
    }

    fn decode(&self, ids: &[u32], skip_special: bool) -> String {
        let mut bytes = Vec::with_capacity(ids.len());
        for &id in ids {
            match id {
                0..=255 => bytes.push(id as u8),
                _ if skip_special => {}
                _ => bytes.extend_from_slice(
                    self.specials.get(id as usize - 256).map_or("", String::as_str).as_bytes(),
                ),
            }
        }
        String::from_utf8_lossy(&bytes).into_owned()
    }
}

/// Turns a stream of token ids into text chunks as they become complete characters: a
/// character split over several byte tokens is held back until its last byte arrives, and a
/// token whose text depends on its neighbours (a leading space) is decoded in context.
#[derive(Debug, Default, Clone)]
pub struct StreamDecoder {
    ids: Vec<u32>,
    /// Start of the context window that is decoded again with each new token.
    prefix_offset: usize,
    /// Where the text already emitted ends, in ids.
    read_offset: usize,
}

impl StreamDecoder {
    /// A decoder with nothing seen.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds `id`; returns the text it completes (possibly empty).
    pub fn step(
        &mut self,
        tokenizer: &Tokenizer,
        id: u32,
        skip_special: bool,
    ) -> Result<String, ModelError> {
        self.ids.push(id);
        let prefix =
            tokenizer.decode(&self.ids[self.prefix_offset..self.read_offset], skip_special)?;
        let full = tokenizer.decode(&self.ids[self.prefix_offset..], skip_special)?;
        if full.len() > prefix.len() && !full.ends_with('\u{FFFD}') && full.starts_with(&prefix) {
            let new = full[prefix.len()..].to_owned();
            self.prefix_offset = self.read_offset;
            self.read_offset = self.ids.len();
            Ok(new)
        } else {
            Ok(String::new())
        }
    }

    /// Text held back at the end of the stream (an incomplete character, shown as U+FFFD).
    pub fn finish(
        &mut self,
        tokenizer: &Tokenizer,
        skip_special: bool,
    ) -> Result<String, ModelError> {
        let prefix =
            tokenizer.decode(&self.ids[self.prefix_offset..self.read_offset], skip_special)?;
        let full = tokenizer.decode(&self.ids[self.prefix_offset..], skip_special)?;
        self.prefix_offset = self.ids.len();
        self.read_offset = self.ids.len();
        Ok(full.strip_prefix(prefix.as_str()).unwrap_or("").to_owned())
    }
}

/// GPT-2's byte-to-character table of byte-level BPE: printable bytes stand for themselves, the
/// others map to 256 + their rank among the unprintable ones.
fn byte_char(b: u8) -> char {
    let printable = |x: u8| matches!(x, b'!'..=b'~' | 0xA1..=0xAC | 0xAE..=0xFF);
    if printable(b) {
        return char::from(b);
    }
    let rank = (0..b).filter(|&x| !printable(x)).count() as u32;
    char::from_u32(256 + rank).unwrap_or('?')
}
