//! `wordle`: the word game, over up to six turns.
//!
//! The model guesses a five-letter word inside `<guess>...</guess>`; after each guess the
//! environment answers with one letter per position: `G` (right letter, right spot), `Y` (in the
//! word, elsewhere), `X` (not in the word, or no more copies of it), with repeated letters
//! handled as in the original game. Any five letters are a valid guess (there is no dictionary
//! check); anything else is answered with an error and still uses a turn. The game ends on the
//! right word or after six guesses.
//!
//! Reward: `wordle_win` gives `1 − 0.1·(k − 1)` for a win on guess `k` (1.0 down to 0.5), else 0;
//! `wordle_partial` gives a lost game `0.4 · max over guesses of (greens + 0.5·yellows) / 5`, else
//! 0. After TextArena's Wordle as used by Prime Intellect's `verifiers` examples.

use std::sync::Arc;

use async_trait::async_trait;
use rand::seq::IndexedRandom;
use rand_chacha::ChaCha8Rng;
use serde_json::Map;
use temper_protocol::{Message, Role};

use super::user_example;
use crate::rewards::Format;
use crate::rollout::{Interaction, RolloutState, Step};
use crate::rubric::{RewardError, RewardFunction, RewardInput, Services};
use crate::{EnvError, EnvInfo, Environment, Example, LoadOptions, Parser, Rubric, TurnLimits};

/// Registered name.
pub const NAME: &str = "wordle";
const VERSION: &str = "0.1.0";
/// Guesses allowed.
pub const MAX_GUESSES: u32 = 6;

const WORDS: &[&str] = &[
    "about", "above", "actor", "adapt", "admit", "adopt", "after", "again", "agent", "agree",
    "alarm", "album", "alert", "alive", "allow", "alone", "angle", "apple", "apply", "arena",
    "argue", "arise", "aside", "award", "basic", "beach", "begin", "being", "below", "bench",
    "birth", "black", "blade", "blame", "blind", "block", "blood", "board", "brain", "brand",
    "bread", "break", "brick", "brief", "bring", "broad", "brown", "build", "cabin", "candy",
    "cargo", "carry", "catch", "cause", "chain", "chair", "chart", "chase", "cheap", "check",
    "chest", "chief", "child", "civil", "claim", "class", "clean", "clear", "climb", "clock",
    "close", "cloud", "coach", "coast", "could", "count", "court", "cover", "craft", "crane",
    "crash", "cream", "crime", "cross", "crowd", "curve", "cycle", "daily", "dance", "dealt",
    "delay", "depth", "doubt", "draft", "drama", "dream", "dress", "drink", "drive", "early",
    "earth", "eight", "elite", "empty", "enemy", "enjoy", "enter", "entry", "equal", "error",
    "event", "exact", "exist", "extra", "faith", "false", "fault", "field", "fifty", "fight",
    "final", "first", "flame", "fleet", "floor", "focus", "force", "frame", "fresh", "front",
    "fruit", "ghost", "giant", "given", "glass", "globe", "grace", "grade", "grain", "grand",
    "grant", "grass", "great", "green", "group", "guard", "guess", "guide", "happy", "heart",
    "heavy", "horse", "hotel", "house", "human", "ideal", "image", "index", "inner", "input",
    "issue", "joint", "judge", "knife", "label", "large", "laser", "later", "laugh", "layer",
    "learn", "lemon", "level", "light", "limit", "local", "logic", "loose", "lucky", "lunch",
    "magic", "major", "maker", "march", "match", "maybe", "metal", "minor", "model", "money",
    "month", "motor", "mount", "mouse", "mouth", "music", "nerve", "never", "night", "noise",
    "north", "novel", "nurse", "ocean", "offer", "often", "order", "other", "owner", "paint",
    "panel", "paper", "party", "peace", "phase", "phone", "piano", "piece", "pilot", "pitch",
    "place", "plain", "plane", "plant", "plate", "point", "pound", "power", "press", "price",
    "pride", "prime", "print", "prize", "proof", "proud", "queen", "quick", "quiet", "radio",
    "raise", "range", "rapid", "reach", "ready", "river", "robot", "rough", "round", "route",
    "royal", "rural", "scale", "scene", "scope", "score", "sense", "serve", "seven", "shape",
    "share", "sharp", "sheep", "shelf", "shell", "shift", "shirt", "shock", "short", "sight",
    "skill", "sleep", "slide", "small", "smart", "smile", "smoke", "solid", "solve", "sound",
    "south", "space", "spare", "speak", "speed", "spend", "sport", "staff", "stage", "stand",
    "start", "state", "steam", "steel", "stick", "stock", "stone", "store", "storm", "story",
    "sugar", "sweet", "table", "taste", "teach", "thank", "theme", "thick", "thing", "think",
    "third", "those", "three", "throw", "tiger", "tight", "title", "today", "topic", "total",
    "touch", "tough", "tower", "trace", "track", "trade", "train", "treat", "trend", "trial",
    "trust", "truth", "uncle", "union", "unity", "upper", "urban", "usual", "valid", "value",
    "video", "visit", "voice", "waste", "watch", "water", "wheel", "where", "white", "whole",
    "woman", "world", "worry", "write", "wrong", "young", "youth",
];

/// Instructions given as the system prompt.
pub const SYSTEM_PROMPT: &str = "You are playing Wordle. Find the secret five-letter English word \
in at most six guesses. Write each guess as <guess>word</guess>. After each guess you get one \
letter per position: G = right letter in the right spot, Y = the letter is in the word but in \
another spot, X = the letter is not in the word (or not that many times).";

/// A secret word; `answer` holds it.
pub fn generate(rng: &mut ChaCha8Rng, _index: usize) -> Example {
    let word = WORDS.choose(rng).copied().unwrap_or("crane");
    user_example(
        format!("Guess the secret word. You have {MAX_GUESSES} guesses."),
        word.to_owned(),
        Map::new(),
    )
}

/// Feedback for `guess` against `secret` (both five lowercase ASCII letters): `G`, `Y` or `X`
/// per position; repeated letters are marked yellow only as many times as they remain unmatched.
pub fn feedback(guess: &str, secret: &str) -> String {
    let g: Vec<u8> = guess.bytes().collect();
    let s: Vec<u8> = secret.bytes().collect();
    let mut marks = [b'X'; 5];
    let mut left = [0u8; 26];
    for i in 0..5 {
        if g[i] == s[i] {
            marks[i] = b'G';
        } else {
            left[usize::from(s[i] - b'a')] += 1;
        }
    }
    for i in 0..5 {
        let k = usize::from(g[i] - b'a');
        if marks[i] != b'G' && left[k] > 0 {
            marks[i] = b'Y';
            left[k] -= 1;
        }
    }
    String::from_utf8_lossy(&marks).into_owned()
}

/// The guess in a turn, lowercased, if it is exactly five ASCII letters.
fn guess_of(parser: &Parser, text: &str) -> Option<String> {
    let guess = parser.parse(text)?.trim().to_ascii_lowercase();
    (guess.len() == 5 && guess.bytes().all(|b| b.is_ascii_lowercase())).then_some(guess)
}

fn guesses<'a>(
    completion: &'a [Message],
    parser: &'a Parser,
) -> impl Iterator<Item = Option<String>> + 'a {
    completion.iter().filter(|m| m.role == Role::Assistant).map(|m| guess_of(parser, &m.content))
}

fn parser() -> Parser {
    Parser::Xml("guess".to_owned())
}

/// The game master.
#[derive(Debug, Clone, Copy)]
pub struct Wordle;

#[async_trait]
impl Interaction for Wordle {
    fn is_done(&self, state: &RolloutState<'_>) -> bool {
        let parser = parser();
        let won = state
            .last_reply()
            .and_then(|m| guess_of(&parser, &m.content))
            .is_some_and(|g| g == state.example.answer);
        won || state.turns >= MAX_GUESSES
    }

    async fn respond(&self, state: &mut RolloutState<'_>, _: &Services) -> Result<Step, EnvError> {
        let left = MAX_GUESSES.saturating_sub(state.turns);
        let reply = state.last_reply().map(|m| m.content.clone()).unwrap_or_default();
        let text = match guess_of(&parser(), &reply) {
            Some(guess) => format!(
                "{}\n{}\n{left} guesses left.",
                guess.to_ascii_uppercase(),
                feedback(&guess, &state.example.answer)
            ),
            None => format!(
                "Invalid guess: write exactly one five-letter word as <guess>word</guess>. {left} guesses left."
            ),
        };
        Ok(Step::Continue(vec![Message::user(text)]))
    }
}

/// `1 − 0.1·(k − 1)` for a win on guess `k`, else 0.
#[derive(Debug, Clone, Copy)]
pub struct Win;

#[async_trait]
impl RewardFunction for Win {
    async fn score(&self, input: &RewardInput<'_>, _: &Services) -> Result<f64, RewardError> {
        let secret = &input.example.answer;
        let k = guesses(input.completion, input.parser)
            .position(|g| g.as_deref() == Some(secret.as_str()));
        Ok(k.filter(|&k| k < MAX_GUESSES as usize).map_or(0.0, |k| 1.0 - 0.1 * k as f64))
    }
}

/// For a lost game, `0.4 · max (greens + 0.5·yellows) / 5` over the guesses; 0 for a win.
#[derive(Debug, Clone, Copy)]
pub struct Partial;

#[async_trait]
impl RewardFunction for Partial {
    async fn score(&self, input: &RewardInput<'_>, _: &Services) -> Result<f64, RewardError> {
        let secret = &input.example.answer;
        let mut best = 0.0f64;
        for guess in guesses(input.completion, input.parser).take(MAX_GUESSES as usize).flatten() {
            if guess == *secret {
                return Ok(0.0);
            }
            let marks = feedback(&guess, secret);
            let greens = marks.matches('G').count() as f64;
            let yellows = marks.matches('Y').count() as f64;
            best = best.max((greens + 0.5 * yellows) / 5.0);
        }
        Ok(0.4 * best)
    }
}

/// The environment.
pub fn environment(options: &LoadOptions) -> Environment {
    Environment {
        info: EnvInfo::builtin(
            NAME,
            VERSION,
            "Play Wordle; reward for a win, more for fewer guesses.",
        ),
        system_prompt: Some(SYSTEM_PROMPT.to_owned()),
        parser: parser(),
        data: options.generated(generate, 10_000, 200),
        interaction: Arc::new(Wordle),
        rubric: Rubric::new()
            .with("wordle_win", 1.0, Win)
            .with("wordle_partial", 1.0, Partial)
            .with("format", 0.0, Format {}),
        limits: TurnLimits::turns(MAX_GUESSES),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn feedback_handles_repeated_letters() {
        let cases = [
            ("crane", "crane", "GGGGG"),
            ("crane", "react", "YYGXY"),
            ("speed", "abide", "XXYXY"),
            ("eerie", "there", "YXYXG"),
            ("llama", "hello", "YYXXX"),
        ];
        for (guess, secret, want) in cases {
            assert_eq!(feedback(guess, secret), want, "{guess} vs {secret}");
        }
    }
}
