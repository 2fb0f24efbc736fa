//! `logic`: seeded logic puzzles with exact checkers: countdown, sudoku (4×4 and 9×9), knights
//! and knaves, graph colouring and zebra puzzles (see `temper_verify::logic`).
//!
//! Reward: `logic`, 1 when the answer inside `<answer></answer>` solves the puzzle; any valid
//! solution counts, not only the generator's. A package picks the kinds and the difficulty:
//!
//! ```toml
//! [dataset]
//! generator = "logic"
//! options = { kinds = ["sudoku", "zebra"], difficulty = [2, 4] }  # or difficulty = 3
//! ```
//!
//! Example `i` is of kind `kinds[i % len]`, so every kind is equally represented (the eval split
//! skips draws that repeat a train puzzle, which can shift the balance slightly); its difficulty
//! is drawn from the range. Each example's `task` is its kind, so evaluation reports a score per
//! kind; `info.puzzle` holds the puzzle, `answer` the generator's solution.

use std::sync::Arc;

use rand::Rng;
use rand_chacha::ChaCha8Rng;
use serde::Deserialize;
use serde_json::{Map, json};
use temper_verify::logic::{DIFFICULTY, Kind, generate as make_puzzle};

use super::user_example;
use crate::dataset::Generator;
use crate::rewards::{Format, Logic};
use crate::rollout::SingleTurn;
use crate::{DataSource, EnvInfo, Environment, Example, LoadOptions, Parser, Rubric, TurnLimits};

/// Registered name.
pub const NAME: &str = "logic";
const VERSION: &str = "0.1.0";
/// Instructions given as the system prompt.
pub const SYSTEM_PROMPT: &str = "Solve the puzzle. Think it through, then give your final answer \
inside <answer></answer> tags, written exactly as the puzzle asks.";

/// The generator's options (`[dataset] options` of a package).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Options {
    /// Kinds of puzzle, by name (default: all five).
    #[serde(default = "all_kinds")]
    pub kinds: Vec<String>,
    /// One difficulty from 1 to 5, or an inclusive range `[low, high]` (default 2).
    #[serde(default = "default_difficulty")]
    pub difficulty: Difficulty,
}

/// A difficulty or a range of them.
#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(untagged)]
pub enum Difficulty {
    /// Every example at this level.
    One(u8),
    /// Each example at a level drawn from `[low, high]`.
    Range([u8; 2]),
}

fn all_kinds() -> Vec<String> {
    Kind::ALL.iter().map(|k| k.name().to_owned()).collect()
}

fn default_difficulty() -> Difficulty {
    Difficulty::One(2)
}

impl Default for Options {
    fn default() -> Self {
        Self { kinds: all_kinds(), difficulty: default_difficulty() }
    }
}

/// The generator for `options`; `Err` names the bad option.
pub fn generator(options: &Options) -> Result<Generator, String> {
    let kinds = options
        .kinds
        .iter()
        .map(|k| {
            Kind::parse(k).ok_or_else(|| {
                format!("kinds: unknown kind `{k}`; kinds: {}", all_kinds().join(", "))
            })
        })
        .collect::<Result<Vec<Kind>, String>>()?;
    if kinds.is_empty() {
        return Err("kinds: name at least one kind".into());
    }
    let (low, high) = match options.difficulty {
        Difficulty::One(d) => (d, d),
        Difficulty::Range([a, b]) => (a, b),
    };
    if !DIFFICULTY.contains(&low) || !DIFFICULTY.contains(&high) || low > high {
        return Err(format!(
            "difficulty: {low}..{high} is not a level or range within {}..{}",
            DIFFICULTY.start(),
            DIFFICULTY.end()
        ));
    }
    Ok(Generator::new(move |rng: &mut ChaCha8Rng, index: usize| {
        let kind = kinds[index % kinds.len()];
        let difficulty = rng.random_range(low..=high);
        example(kind, difficulty, rng)
    })
    .distinct_eval())
}

/// One example of `kind` at `difficulty`.
pub fn example(kind: Kind, difficulty: u8, rng: &mut ChaCha8Rng) -> Example {
    let puzzle = make_puzzle(kind, difficulty, rng);
    let mut info = Map::new();
    info.insert("puzzle".into(), json!(puzzle));
    info.insert("difficulty".into(), json!(difficulty));
    let mut example = user_example(puzzle.prompt(), puzzle.reference(), info);
    example.task = kind.name().to_owned();
    example
}

/// Example `index` with the default options (all kinds, difficulty 2).
pub fn generate(rng: &mut ChaCha8Rng, index: usize) -> Example {
    example(Kind::ALL[index % Kind::ALL.len()], 2, rng)
}

/// The environment with the default options.
pub fn environment(options: &LoadOptions) -> Environment {
    Environment {
        info: EnvInfo::builtin(
            NAME,
            VERSION,
            "Logic puzzles (countdown, sudoku, knights and knaves, colouring, zebra) with exact checkers.",
        ),
        system_prompt: Some(SYSTEM_PROMPT.to_owned()),
        parser: Parser::Xml("answer".into()),
        data: DataSource::Generated {
            generate: Generator::new(generate).distinct_eval(),
            seed: options.seed,
            train_size: options.train_size.unwrap_or(5_000),
            eval_size: options.eval_size.unwrap_or(200),
        },
        interaction: Arc::new(SingleTurn),
        rubric: Rubric::new().with("logic", 1.0, Logic::default()).with(
            "format",
            0.0,
            Format::default(),
        ),
        limits: TurnLimits::single_turn(),
    }
}
