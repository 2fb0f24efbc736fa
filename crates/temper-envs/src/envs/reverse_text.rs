//! `reverse-text`: reverse a short string character by character.
//!
//! The user message is exactly the text to reverse (3 to 12 random lowercase letters); the model
//! answers inside `<reversed_text>...</reversed_text>`. Reward: the LCS ratio of the extracted
//! text to the reversed input (1.0 for a perfect answer); format adherence is logged as a
//! weight-0 metric. After the `reverse_text` example environment of Prime Intellect's
//! `verifiers`, which uses the same tag and an LCS-style similarity.

use std::sync::Arc;

use rand::Rng;
use rand_chacha::ChaCha8Rng;
use serde_json::Map;

use super::user_example;
use crate::rewards::{Format, LcsRatio};
use crate::rollout::SingleTurn;
use crate::{EnvInfo, Environment, Example, LoadOptions, Parser, Rubric, TurnLimits};

/// Registered name.
pub const NAME: &str = "reverse-text";
const VERSION: &str = "0.1.0";
/// Instructions given as the system prompt.
pub const SYSTEM_PROMPT: &str = "Reverse the text you are given, character by character. \
Answer with the reversed text inside <reversed_text> and </reversed_text> tags.";

/// A random text of 3 to 12 lowercase letters; the answer is its reverse.
pub fn generate(rng: &mut ChaCha8Rng, _index: usize) -> Example {
    let len = rng.random_range(3..=12);
    let text: String = (0..len).map(|_| char::from(rng.random_range(b'a'..=b'z'))).collect();
    let reversed = text.chars().rev().collect();
    user_example(text, reversed, Map::new())
}

/// The environment.
pub fn environment(options: &LoadOptions) -> Environment {
    Environment {
        info: EnvInfo::builtin(NAME, VERSION, "Reverse a short string; reward is the LCS ratio."),
        system_prompt: Some(SYSTEM_PROMPT.to_owned()),
        parser: Parser::Xml("reversed_text".to_owned()),
        data: options.generated(generate, 10_000, 200),
        interaction: Arc::new(SingleTurn),
        rubric: Rubric::new().with("lcs_ratio", 1.0, LcsRatio {}).with("format", 0.0, Format {}),
        limits: TurnLimits::single_turn(),
    }
}
