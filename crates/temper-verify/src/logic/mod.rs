//! Logic puzzles: seeded generators, exact checkers and solvers.
//!
//! Five kinds, each with a difficulty knob from 1 (easiest) to 5:
//!
//! | kind | puzzle | difficulty |
//! |---|---|---|
//! | `countdown` | reach a target with +, −, ×, ÷ over given numbers, each used at most once | 3 to 6 numbers, larger targets |
//! | `sudoku` | fill a 4×4 or 9×9 grid | 4×4 with 6 or 10 blanks; 9×9 with 35, 45 or 52 |
//! | `knights` | knights always tell the truth, knaves always lie: who is which | 2 to 6 people |
//! | `coloring` | colour a graph so no edge joins two nodes of one colour | 6 to 15 nodes, 3 or 4 colours |
//! | `zebra` | houses in a row, attributes placed by clues | 3×2 up to 5×4 |
//!
//! [`check`] accepts any valid answer, not only the generator's: a countdown expression is
//! evaluated exactly, a grid or a colouring is checked against the rules, a knights-and-knaves
//! or zebra assignment against every statement or clue. Every generated puzzle is solvable by
//! construction (it is built around a planted solution), and [`solve`] finds a solution by search,
//! independently of the plant. Answers longer than [`MAX_ANSWER`] bytes are refused unread.

use rand::RngCore;
use serde::{Deserialize, Serialize};

pub mod coloring;
pub mod countdown;
pub mod knights;
pub mod sudoku;
pub mod zebra;

/// Bytes of an answer the checkers read; a longer one is wrong.
pub const MAX_ANSWER: usize = 8 * 1024;

/// The lowest and highest difficulty.
pub const DIFFICULTY: std::ops::RangeInclusive<u8> = 1..=5;

/// A kind of puzzle.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    /// Reach a target number.
    Countdown,
    /// Fill a Latin-square grid with boxes.
    Sudoku,
    /// Knights and knaves.
    Knights,
    /// Graph colouring.
    Coloring,
    /// Zebra-style constraint puzzle.
    Zebra,
}

impl Kind {
    /// Every kind, in a fixed order.
    pub const ALL: [Kind; 5] =
        [Kind::Countdown, Kind::Sudoku, Kind::Knights, Kind::Coloring, Kind::Zebra];

    /// The name used in configs and data.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Countdown => "countdown",
            Kind::Sudoku => "sudoku",
            Kind::Knights => "knights",
            Kind::Coloring => "coloring",
            Kind::Zebra => "zebra",
        }
    }

    /// The kind called `name`.
    pub fn parse(name: &str) -> Option<Kind> {
        Kind::ALL.into_iter().find(|k| k.name() == name)
    }
}

/// One puzzle of any kind, as stored in a dataset row's `info.puzzle`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Puzzle {
    /// See [`countdown`].
    Countdown(countdown::Puzzle),
    /// See [`sudoku`].
    Sudoku(sudoku::Puzzle),
    /// See [`knights`].
    Knights(knights::Puzzle),
    /// See [`coloring`].
    Coloring(coloring::Puzzle),
    /// See [`zebra`].
    Zebra(zebra::Puzzle),
}

impl Puzzle {
    /// Its kind.
    pub fn kind(&self) -> Kind {
        match self {
            Puzzle::Countdown(_) => Kind::Countdown,
            Puzzle::Sudoku(_) => Kind::Sudoku,
            Puzzle::Knights(_) => Kind::Knights,
            Puzzle::Coloring(_) => Kind::Coloring,
            Puzzle::Zebra(_) => Kind::Zebra,
        }
    }

    /// The task as the model reads it, ending with how to write the answer.
    pub fn prompt(&self) -> String {
        match self {
            Puzzle::Countdown(p) => p.prompt(),
            Puzzle::Sudoku(p) => p.prompt(),
            Puzzle::Knights(p) => p.prompt(),
            Puzzle::Coloring(p) => p.prompt(),
            Puzzle::Zebra(p) => p.prompt(),
        }
    }

    /// The planted solution, written as an answer.
    pub fn reference(&self) -> String {
        match self {
            Puzzle::Countdown(p) => p.reference(),
            Puzzle::Sudoku(p) => p.reference(),
            Puzzle::Knights(p) => p.reference(),
            Puzzle::Coloring(p) => p.reference(),
            Puzzle::Zebra(p) => p.reference(),
        }
    }

    /// Whether the puzzle's own data is well formed (sizes, indices, ranges), so that a
    /// hand-edited or hostile dataset row fails loudly instead of being scored.
    pub fn validate(&self) -> Result<(), String> {
        match self {
            Puzzle::Countdown(p) => p.validate(),
            Puzzle::Sudoku(p) => p.validate(),
            Puzzle::Knights(p) => p.validate(),
            Puzzle::Coloring(p) => p.validate(),
            Puzzle::Zebra(p) => p.validate(),
        }
    }
}

/// A puzzle of `kind` at `difficulty` (clamped to [`DIFFICULTY`]).
pub fn generate(kind: Kind, difficulty: u8, rng: &mut dyn RngCore) -> Puzzle {
    let d = difficulty.clamp(*DIFFICULTY.start(), *DIFFICULTY.end());
    match kind {
        Kind::Countdown => Puzzle::Countdown(countdown::generate(d, rng)),
        Kind::Sudoku => Puzzle::Sudoku(sudoku::generate(d, rng)),
        Kind::Knights => Puzzle::Knights(knights::generate(d, rng)),
        Kind::Coloring => Puzzle::Coloring(coloring::generate(d, rng)),
        Kind::Zebra => Puzzle::Zebra(zebra::generate(d, rng)),
    }
}

/// Whether `answer` solves `puzzle`; `Err` says what is wrong with it.
pub fn check(puzzle: &Puzzle, answer: &str) -> Result<(), String> {
    if answer.len() > MAX_ANSWER {
        return Err(format!("the answer is {} bytes, over {MAX_ANSWER}", answer.len()));
    }
    puzzle.validate()?;
    match puzzle {
        Puzzle::Countdown(p) => p.check(answer),
        Puzzle::Sudoku(p) => p.check(answer),
        Puzzle::Knights(p) => p.check(answer),
        Puzzle::Coloring(p) => p.check(answer),
        Puzzle::Zebra(p) => p.check(answer),
    }
}

/// A solution found by search (not read from the plant), written as an answer; `None` when
/// there is none.
pub fn solve(puzzle: &Puzzle) -> Option<String> {
    match puzzle {
        Puzzle::Countdown(p) => p.solve(),
        Puzzle::Sudoku(p) => p.solve(),
        Puzzle::Knights(p) => p.solve(),
        Puzzle::Coloring(p) => p.solve(),
        Puzzle::Zebra(p) => p.solve(),
    }
}

/// Words of `text`, lowercased, split at anything that is not a letter or digit.
pub(crate) fn words(text: &str) -> Vec<String> {
    text.split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .map(str::to_lowercase)
        .collect()
}
