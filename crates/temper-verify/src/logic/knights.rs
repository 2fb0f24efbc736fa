//! Knights and knaves: knights always tell the truth, knaves always lie; from what each person
//! says, tell which is which.
//!
//! The answer names everyone's kind, one per line (`Alice: knight`); `Alice is a knave` and
//! `not a knight` are read too. Any assignment under which every knight's statement is true and
//! every knave's is false is accepted (generated puzzles have exactly one).

use rand::seq::SliceRandom;
use rand::{Rng, RngCore};
use serde::{Deserialize, Serialize};

/// What a person says.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Claim {
    /// `who` is a knight.
    Knight {
        /// Index into the names.
        who: usize,
    },
    /// `who` is a knave.
    Knave {
        /// Index into the names.
        who: usize,
    },
    /// Both hold.
    And {
        /// First.
        a: Box<Claim>,
        /// Second.
        b: Box<Claim>,
    },
    /// At least one holds.
    Or {
        /// First.
        a: Box<Claim>,
        /// Second.
        b: Box<Claim>,
    },
    /// `a` and `b` are of the same kind.
    Same {
        /// Index into the names.
        a: usize,
        /// Index into the names.
        b: usize,
    },
    /// `a` and `b` are of different kinds.
    Different {
        /// Index into the names.
        a: usize,
        /// Index into the names.
        b: usize,
    },
    /// Exactly this many people in the puzzle are knights.
    Count {
        /// How many.
        knights: usize,
    },
}

/// A knights-and-knaves puzzle.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Puzzle {
    /// The people.
    pub names: Vec<String>,
    /// What each says, by index.
    pub says: Vec<Claim>,
    /// The generator's answer: `true` for a knight.
    pub knights: Vec<bool>,
}

const NAMES: [&str; 12] = [
    "Alice", "Bruno", "Chloe", "Dmitri", "Esther", "Farid", "Greta", "Hugo", "Iris", "Jonas",
    "Kira", "Leon",
];
const MAX_PEOPLE: usize = 8;
const MAX_DEPTH: usize = 4;

/// A puzzle at `difficulty` 1–5: 2 to 6 people; from 3 on, compound statements.
pub fn generate(difficulty: u8, rng: &mut dyn RngCore) -> Puzzle {
    let d = difficulty.clamp(1, 5);
    let n = usize::from(d) + 1;
    let mut pool = NAMES.to_vec();
    pool.shuffle(rng);
    let names: Vec<String> = pool[..n].iter().map(|s| (*s).to_owned()).collect();
    loop {
        let knights: Vec<bool> = (0..n).map(|_| rng.random_bool(0.5)).collect();
        let says: Vec<Claim> = (0..n)
            .map(|speaker| {
                loop {
                    let claim = random_claim(n, speaker, d, 0, rng);
                    if eval(&claim, &knights) == knights[speaker] {
                        break claim;
                    }
                }
            })
            .collect();
        let puzzle = Puzzle { names: names.clone(), says, knights };
        if consistent_assignments(&puzzle).take(2).count() == 1 {
            return puzzle;
        }
    }
}

fn random_claim(n: usize, speaker: usize, d: u8, depth: usize, rng: &mut dyn RngCore) -> Claim {
    let other = |rng: &mut _| loop {
        let who = Rng::random_range(rng, 0..n);
        if n == 1 || who != speaker || Rng::random_bool(rng, 0.2) {
            break who;
        }
    };
    // Compound statements (and, or) from difficulty 3; two people saying only "X is a knight"
    // or "X is a knave" can never pin down a unique answer, so the comparisons come at every level.
    let choice = if d <= 2 || depth > 0 {
        [0, 1, 4, 5, 6][rng.random_range(0..5)]
    } else {
        rng.random_range(0..7)
    };
    match choice {
        0 => Claim::Knight { who: other(rng) },
        1 => Claim::Knave { who: other(rng) },
        2 => Claim::And {
            a: Box::new(random_claim(n, speaker, d, depth + 1, rng)),
            b: Box::new(random_claim(n, speaker, d, depth + 1, rng)),
        },
        3 => Claim::Or {
            a: Box::new(random_claim(n, speaker, d, depth + 1, rng)),
            b: Box::new(random_claim(n, speaker, d, depth + 1, rng)),
        },
        4 | 5 => {
            let a = other(rng);
            let b = loop {
                let b = other(rng);
                if b != a {
                    break b;
                }
            };
            if rng.random_bool(0.5) { Claim::Same { a, b } } else { Claim::Different { a, b } }
        }
        _ => Claim::Count { knights: rng.random_range(0..=n) },
    }
}

fn eval(claim: &Claim, knights: &[bool]) -> bool {
    match claim {
        Claim::Knight { who } => knights[*who],
        Claim::Knave { who } => !knights[*who],
        Claim::And { a, b } => eval(a, knights) && eval(b, knights),
        Claim::Or { a, b } => eval(a, knights) || eval(b, knights),
        Claim::Same { a, b } => knights[*a] == knights[*b],
        Claim::Different { a, b } => knights[*a] != knights[*b],
        Claim::Count { knights: k } => knights.iter().filter(|&&x| x).count() == *k,
    }
}

/// Every assignment that fits all statements.
fn consistent_assignments(p: &Puzzle) -> impl Iterator<Item = Vec<bool>> + '_ {
    let n = p.names.len();
    (0u32..1 << n)
        .map(move |bits| (0..n).map(|i| bits & (1 << i) != 0).collect::<Vec<bool>>())
        .filter(move |k| p.says.iter().enumerate().all(|(i, c)| eval(c, k) == k[i]))
}

fn kind(knight: bool) -> &'static str {
    if knight { "knight" } else { "knave" }
}

impl Puzzle {
    fn render(&self, claim: &Claim, speaker: usize) -> String {
        let who = |i: usize| if i == speaker { "I".to_owned() } else { self.names[i].clone() };
        let is = |i: usize| if i == speaker { "am" } else { "is" };
        match claim {
            Claim::Knight { who: w } => format!("{} {} a knight", who(*w), is(*w)),
            Claim::Knave { who: w } => format!("{} {} a knave", who(*w), is(*w)),
            Claim::And { a, b } => {
                format!("{} and {}", self.render(a, speaker), self.render(b, speaker))
            }
            Claim::Or { a, b } => {
                format!("{} or {} (or both)", self.render(a, speaker), self.render(b, speaker))
            }
            Claim::Same { a, b } => format!("{} and {} are of the same kind", who(*a), who(*b)),
            Claim::Different { a, b } => {
                format!("{} and {} are of different kinds", who(*a), who(*b))
            }
            Claim::Count { knights } => format!(
                "exactly {knights} of us {} {} knight{}",
                self.names.len(),
                if *knights == 1 { "is a" } else { "are" },
                if *knights == 1 { "" } else { "s" }
            ),
        }
    }

    pub(crate) fn prompt(&self) -> String {
        let mut out = format!(
            "On an island, knights always tell the truth and knaves always lie. You meet {} \
             people: {}.\n",
            self.names.len(),
            self.names.join(", ")
        );
        for (i, claim) in self.says.iter().enumerate() {
            let text = self.render(claim, i);
            let mut chars = text.chars();
            let first =
                chars.next().map(|c| c.to_uppercase().collect::<String>()).unwrap_or_default();
            out.push_str(&format!("{} says: \"{first}{}.\"\n", self.names[i], chars.as_str()));
        }
        out.push_str(
            "\nWho is a knight and who is a knave? The answer names each person's kind, one per \
             line, for example \"Alice: knight\".",
        );
        out
    }

    fn write(&self, knights: &[bool]) -> String {
        self.names
            .iter()
            .zip(knights)
            .map(|(n, &k)| format!("{n}: {}", kind(k)))
            .collect::<Vec<_>>()
            .join("\n")
    }

    pub(crate) fn reference(&self) -> String {
        self.write(&self.knights)
    }

    pub(crate) fn validate(&self) -> Result<(), String> {
        let n = self.names.len();
        if n == 0 || n > MAX_PEOPLE || self.says.len() != n {
            return Err(format!("knights: {n} people and {} statements", self.says.len()));
        }
        fn ok(c: &Claim, n: usize, depth: usize) -> bool {
            depth <= MAX_DEPTH
                && match c {
                    Claim::Knight { who } | Claim::Knave { who } => *who < n,
                    Claim::And { a, b } | Claim::Or { a, b } => {
                        ok(a, n, depth + 1) && ok(b, n, depth + 1)
                    }
                    Claim::Same { a, b } | Claim::Different { a, b } => *a < n && *b < n,
                    Claim::Count { knights } => *knights <= n,
                }
        }
        if !self.says.iter().all(|c| ok(c, n, 0)) {
            return Err("knights: a statement names someone who is not there".into());
        }
        Ok(())
    }

    pub(crate) fn check(&self, answer: &str) -> Result<(), String> {
        let names: Vec<String> = self.names.iter().map(|n| n.to_lowercase()).collect();
        let mut said: Vec<Option<bool>> = vec![None; names.len()];
        let mut current = None;
        let mut negate = false;
        for word in super::words(answer) {
            if let Some(i) = names.iter().position(|n| *n == word) {
                current = Some(i);
                negate = false;
            } else if word == "not" {
                negate = true;
            } else if let (Some(i), true) =
                (current, word.starts_with("knight") || word.starts_with("knave"))
            {
                let knight = word.starts_with("knight") != negate;
                match said[i] {
                    Some(before) if before != knight => {
                        return Err(format!(
                            "{} is called both a knight and a knave",
                            self.names[i]
                        ));
                    }
                    _ => said[i] = Some(knight),
                }
                negate = false;
            }
        }
        let mut knights = Vec::with_capacity(said.len());
        for (i, s) in said.iter().enumerate() {
            knights.push(
                s.ok_or_else(|| format!("the answer does not say what {} is", self.names[i]))?,
            );
        }
        for (i, claim) in self.says.iter().enumerate() {
            if eval(claim, &knights) != knights[i] {
                return Err(format!(
                    "{} is a {} but their statement is {}",
                    self.names[i],
                    kind(knights[i]),
                    if knights[i] { "false" } else { "true" }
                ));
            }
        }
        Ok(())
    }

    pub(crate) fn solve(&self) -> Option<String> {
        consistent_assignments(self).next().map(|k| self.write(&k))
    }
}
