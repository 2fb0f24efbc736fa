//! `mcq`: multiple-choice questions in the style of GPQA and MMLU-Pro.
//!
//! Each example is a question with four options, shuffled by the seed, labelled `A` to `D`. The
//! model ends with `Answer: <letter>`. Reward: `mcq_letter`, 1 when the chosen letter is the one
//! under which the correct option landed. The built-in bank holds 32 science and general-knowledge
//! questions written for temper; the eval split is the bank once (each question with its own
//! shuffle), and the train split cycles the bank with fresh shuffles. Real benchmarks load through
//! an `environment.toml` whose rows carry `question`, `info.options` and a letter `answer`.

use std::sync::{Arc, LazyLock};

use rand::seq::SliceRandom;
use rand_chacha::ChaCha8Rng;
use serde_json::{Map, json};

use super::user_example;
use crate::rewards::McqLetter;
use crate::rollout::SingleTurn;
use crate::{EnvInfo, Environment, Example, LoadOptions, Parser, Rubric, TurnLimits};

/// Registered name.
pub const NAME: &str = "mcq";
const VERSION: &str = "0.1.0";
/// Instructions given as the system prompt.
pub const SYSTEM_PROMPT: &str = "Answer the multiple-choice question. Think it through, then end \
with a line of the form `Answer: X`, where X is the letter of the correct option.";

/// The built-in bank, one question a line: question, correct option, three wrong options,
/// separated by tabs (`mcq_bank.tsv`; lines starting with `#` are comments).
pub static BANK: LazyLock<Vec<Question>> = LazyLock::new(|| {
    include_str!("mcq_bank.tsv")
        .lines()
        .filter(|line| !line.starts_with('#') && !line.trim().is_empty())
        .map(|line| {
            let fields: Vec<&'static str> = line.split('\t').collect();
            match fields[..] {
                [question, correct, a, b, c] => Question { question, correct, wrong: [a, b, c] },
                _ => panic!("mcq_bank.tsv: a line needs 5 tab-separated fields: {line}"),
            }
        })
        .collect()
});

/// One question of the bank.
#[derive(Debug, Clone, Copy)]
pub struct Question {
    /// The question text.
    pub question: &'static str,
    /// The correct option.
    pub correct: &'static str,
    /// Three wrong options.
    pub wrong: [&'static str; 3],
}

/// Question `index` of the bank (cycling), its options shuffled by the generator.
pub fn generate(rng: &mut ChaCha8Rng, index: usize) -> Example {
    let Question { question, correct, wrong } = BANK[index % BANK.len()];
    let mut options: Vec<&str> = std::iter::once(correct).chain(wrong).collect();
    options.shuffle(rng);
    let (text, letter) = crate::layout::lettered(question, &options, correct);
    let mut info = Map::new();
    info.insert("options".into(), json!(options));
    user_example(text, letter.to_string(), info)
}

/// The environment.
pub fn environment(options: &LoadOptions) -> Environment {
    Environment {
        info: EnvInfo::builtin(NAME, VERSION, "Multiple-choice questions with shuffled options."),
        system_prompt: Some(SYSTEM_PROMPT.to_owned()),
        parser: Parser::Raw,
        data: options.generated(generate, BANK.len() * 10, BANK.len()),
        interaction: Arc::new(SingleTurn),
        rubric: Rubric::new().with("mcq_letter", 1.0, McqLetter::default()),
        limits: TurnLimits::single_turn(),
    }
}
