//! `alphabet-sort`: a multi-turn sorting task.
//!
//! Turn 1 gives 3 to 5 first names to sort alphabetically; each later turn (up to 3 turns in
//! all, chosen per example) adds 2 to 4 new names and asks for the whole list sorted again. The
//! model answers each turn with one name per line inside `<alphabetical_sorted>` tags. Reward:
//! the mean over the expected turns of the LCS ratio between the model's list and the correct
//! cumulative sorted list (lines joined by `\n`); a missing turn scores 0. After the
//! `alphabet_sort` environment of Prime Intellect's `verifiers` examples.

use std::sync::Arc;

use async_trait::async_trait;
use rand::Rng;
use rand::seq::SliceRandom;
use rand_chacha::ChaCha8Rng;
use serde_json::{Map, json};
use temper_protocol::{Message, Role};

use super::user_example;
use crate::rewards::Format;
use crate::rollout::{Interaction, RolloutState, Step};
use crate::rubric::{RewardError, RewardFunction, RewardInput, Services};
use crate::{EnvError, EnvInfo, Environment, Example, LoadOptions, Parser, Rubric, TurnLimits};

/// Registered name.
pub const NAME: &str = "alphabet-sort";
const VERSION: &str = "0.1.0";
const TAG: &str = "alphabetical_sorted";
const MAX_TURNS: u32 = 3;

const NAMES: &[&str] = &[
    "Aaliyah", "Abel", "Ada", "Adrian", "Aiko", "Alba", "Amara", "Anders", "Aria", "Arjun",
    "Astrid", "Basil", "Beatrix", "Bjorn", "Bruno", "Calla", "Camille", "Chiara", "Cyrus", "Dalia",
    "Dante", "Delphine", "Dmitri", "Elif", "Elio", "Emeka", "Esme", "Ezra", "Farah", "Felix",
    "Freya", "Gideon", "Greta", "Hana", "Hugo", "Ines", "Ivo", "Jada", "Jonas", "Juno", "Kaito",
    "Kenji", "Lars", "Leila", "Lior", "Luca", "Maeve", "Mateo", "Mira", "Nadia", "Nico", "Noor",
    "Olga", "Omar", "Orla", "Pablo", "Priya", "Quinn", "Rafael", "Rosa", "Sami", "Selma", "Soren",
    "Tariq", "Thea", "Ugo", "Vera", "Wren", "Xenia", "Yara", "Yusuf", "Zane", "Zofia",
];

/// Instructions given as the system prompt.
pub const SYSTEM_PROMPT: &str = "Sort names alphabetically. Write the sorted names one per line \
inside <alphabetical_sorted> and </alphabetical_sorted> tags.";

/// Names in batches: `info.batches` is a list of 1 to 3 lists of distinct names.
pub fn generate(rng: &mut ChaCha8Rng, _index: usize) -> Example {
    let turns = rng.random_range(1..=MAX_TURNS as usize);
    let mut pool: Vec<&str> = NAMES.to_vec();
    pool.shuffle(rng);
    let mut batches: Vec<Vec<&str>> = Vec::new();
    let mut taken = 0;
    for turn in 0..turns {
        let n = if turn == 0 { rng.random_range(3..=5) } else { rng.random_range(2..=4) };
        batches.push(pool[taken..taken + n].to_vec());
        taken += n;
    }
    let expected = sorted_upto(&batches, turns - 1);
    let mut info = Map::new();
    info.insert("batches".into(), json!(batches));
    user_example(first_message(&batches[0]), expected.join("\n"), info)
}

fn first_message(names: &[&str]) -> String {
    format!("Sort these names alphabetically:\n{}", names.join("\n"))
}

fn follow_up(names: &[String]) -> String {
    format!(
        "Now add these names and sort the whole list again, every name so far included:\n{}",
        names.join("\n")
    )
}

fn sorted_upto<S: AsRef<str>>(batches: &[Vec<S>], turn: usize) -> Vec<String> {
    let mut all: Vec<String> =
        batches[..=turn].iter().flatten().map(|s| s.as_ref().to_owned()).collect();
    all.sort();
    all
}

fn batches_of(example: &Example) -> Result<Vec<Vec<String>>, String> {
    let batches = example.info.get("batches").ok_or("the example has no `info.batches`")?;
    let batches: Vec<Vec<String>> =
        serde_json::from_value(batches.clone()).map_err(|e| format!("`info.batches`: {e}"))?;
    if batches.is_empty() {
        return Err("`info.batches` is empty".into());
    }
    Ok(batches)
}

/// Adds the next batch after each turn until every batch was given.
#[derive(Debug, Clone, Copy)]
pub struct AlphabetSort;

#[async_trait]
impl Interaction for AlphabetSort {
    fn is_done(&self, state: &RolloutState<'_>) -> bool {
        let turns = batches_of(state.example).map_or(1, |b| b.len());
        state.turns as usize >= turns
    }

    async fn respond(&self, state: &mut RolloutState<'_>, _: &Services) -> Result<Step, EnvError> {
        let batches = batches_of(state.example).map_err(EnvError::Interaction)?;
        match batches.get(state.turns as usize) {
            Some(next) => Ok(Step::Continue(vec![Message::user(follow_up(next))])),
            None => Ok(Step::Done),
        }
    }
}

/// Mean over expected turns of the LCS ratio of the model's sorted list to the correct one.
#[derive(Debug, Clone, Copy)]
pub struct SortedTurns;

#[async_trait]
impl RewardFunction for SortedTurns {
    async fn score(&self, input: &RewardInput<'_>, _: &Services) -> Result<f64, RewardError> {
        let batches = batches_of(input.example).map_err(RewardError)?;
        let replies: Vec<&Message> =
            input.completion.iter().filter(|m| m.role == Role::Assistant).collect();
        let total: f64 = (0..batches.len())
            .map(|turn| {
                let Some(reply) = replies.get(turn) else { return 0.0 };
                let Some(list) = input.parser.parse(&reply.content) else { return 0.0 };
                let got: Vec<&str> =
                    list.lines().map(str::trim).filter(|l| !l.is_empty()).collect();
                temper_verify::lcs::lcs_ratio(
                    &got.join("\n"),
                    &sorted_upto(&batches, turn).join("\n"),
                )
            })
            .sum();
        Ok(total / batches.len() as f64)
    }
}

/// The environment.
pub fn environment(options: &LoadOptions) -> Environment {
    Environment {
        info: EnvInfo::builtin(NAME, VERSION, "Sort names alphabetically over several turns."),
        system_prompt: Some(SYSTEM_PROMPT.to_owned()),
        parser: Parser::Xml(TAG.to_owned()),
        data: options.generated(generate, 10_000, 200),
        interaction: Arc::new(AlphabetSort),
        rubric: Rubric::new().with("sorted_turns", 1.0, SortedTurns).with("format", 0.0, Format {}),
        limits: TurnLimits::turns(MAX_TURNS),
    }
}

#[doc(hidden)]
pub fn example_with_batches(batches: &[&[&str]]) -> Example {
    let owned: Vec<Vec<&str>> = batches.iter().map(|b| b.to_vec()).collect();
    let mut info = Map::new();
    info.insert("batches".into(), json!(owned));
    let expected = sorted_upto(&owned, owned.len() - 1);
    user_example(first_message(batches[0]), expected.join("\n"), info)
}
