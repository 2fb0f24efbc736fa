//! Zebra puzzles: houses in a row, numbered from 1 on the left; each holds one value of every
//! category (a name, a colour, a pet, a drink), placed by clues.
//!
//! The answer gives each house's values, one house per line (`House 1: Ana, red, dog`); any line
//! with a house number and values is read, so `Ana lives in house 2` counts too. Any placement
//! that meets every clue is accepted (generated puzzles have exactly one).

use rand::seq::SliceRandom;
use rand::{Rng, RngCore};
use serde::{Deserialize, Serialize};

/// One category of values.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Category {
    /// Its name (`name`, `color`, `pet`, `drink`).
    pub name: String,
    /// Its values, one per house, each a single lowercase-unique word.
    pub values: Vec<String>,
}

/// A value: category and index.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Item {
    /// Category index.
    pub cat: usize,
    /// Value index within it.
    pub val: usize,
}

/// A clue.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Clue {
    /// `x` is in house `house` (0-based).
    At {
        /// The value.
        x: Item,
        /// 0-based house.
        house: usize,
    },
    /// `x` is not in house `house` (0-based).
    NotAt {
        /// The value.
        x: Item,
        /// 0-based house.
        house: usize,
    },
    /// `x` and `y` are in one house.
    Same {
        /// First value.
        x: Item,
        /// Second value.
        y: Item,
    },
    /// `x` is in the house directly left of `y`'s.
    LeftOf {
        /// First value.
        x: Item,
        /// Second value.
        y: Item,
    },
    /// `x` and `y` are in neighbouring houses.
    NextTo {
        /// First value.
        x: Item,
        /// Second value.
        y: Item,
    },
    /// `x` is somewhere left of `y`.
    Before {
        /// First value.
        x: Item,
        /// Second value.
        y: Item,
    },
}

impl Clue {
    fn items(&self) -> (Item, Option<Item>) {
        match *self {
            Clue::At { x, .. } | Clue::NotAt { x, .. } => (x, None),
            Clue::Same { x, y }
            | Clue::LeftOf { x, y }
            | Clue::NextTo { x, y }
            | Clue::Before { x, y } => (x, Some(y)),
        }
    }

    /// Whether it holds, given each value's house (`pos[cat][val]`).
    fn holds(&self, pos: &[Vec<usize>]) -> bool {
        let at = |i: Item| pos[i.cat][i.val];
        match *self {
            Clue::At { x, house } => at(x) == house,
            Clue::NotAt { x, house } => at(x) != house,
            Clue::Same { x, y } => at(x) == at(y),
            Clue::LeftOf { x, y } => at(x) + 1 == at(y),
            Clue::NextTo { x, y } => at(x).abs_diff(at(y)) == 1,
            Clue::Before { x, y } => at(x) < at(y),
        }
    }
}

/// A zebra puzzle.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Puzzle {
    /// Number of houses.
    pub houses: usize,
    /// The categories, each with one value per house.
    pub categories: Vec<Category>,
    /// The clues.
    pub clues: Vec<Clue>,
    /// The generator's placement: `solution[cat][val]` is a 0-based house.
    pub solution: Vec<Vec<usize>>,
}

const POOL: [(&str, [&str; 5]); 4] = [
    ("name", ["Ana", "Ben", "Cleo", "Dev", "Eli"]),
    ("color", ["red", "green", "blue", "white", "yellow"]),
    ("pet", ["dog", "cat", "bird", "fish", "horse"]),
    ("drink", ["tea", "coffee", "milk", "water", "juice"]),
];
const MAX_HOUSES: usize = 6;
const MAX_CLUES: usize = 64;

/// A puzzle at `difficulty` 1–5: 3 houses × 2 categories, 3×3, 4×3, 4×4 and 5×4.
pub fn generate(difficulty: u8, rng: &mut dyn RngCore) -> Puzzle {
    let (h, k) = [(3, 2), (3, 3), (4, 3), (4, 4), (5, 4)][usize::from(difficulty.clamp(1, 5)) - 1];
    let categories: Vec<Category> = POOL[..k]
        .iter()
        .map(|(name, values)| {
            let mut values: Vec<String> = values.iter().map(|v| (*v).to_owned()).collect();
            values.shuffle(rng);
            values.truncate(h);
            values.sort();
            Category { name: (*name).to_owned(), values }
        })
        .collect();
    let solution: Vec<Vec<usize>> = (0..k)
        .map(|_| {
            let mut p: Vec<usize> = (0..h).collect();
            p.shuffle(rng);
            p
        })
        .collect();
    let mut clues: Vec<Clue> = Vec::new();
    let mut shape = Puzzle { houses: h, categories, clues: Vec::new(), solution };
    while count_solutions(&shape, 2) != 1 {
        let clue = loop {
            let c = random_clue(h, k, rng);
            if c.holds(&shape.solution) && !clues.contains(&c) {
                break c;
            }
        };
        clues.push(clue);
        shape.clues = clues.clone();
    }
    // Drop clues that the others make redundant, in a random order.
    let mut order: Vec<usize> = (0..clues.len()).collect();
    order.shuffle(rng);
    let mut keep = vec![true; clues.len()];
    for i in order {
        keep[i] = false;
        shape.clues =
            clues.iter().zip(&keep).filter(|(_, k)| **k).map(|(c, _)| c.clone()).collect();
        if count_solutions(&shape, 2) != 1 {
            keep[i] = true;
        }
    }
    shape.clues = clues.into_iter().zip(keep).filter(|(_, k)| *k).map(|(c, _)| c).collect();
    shape
}

fn random_clue(h: usize, k: usize, rng: &mut dyn RngCore) -> Clue {
    let item =
        |rng: &mut _| Item { cat: Rng::random_range(rng, 0..k), val: Rng::random_range(rng, 0..h) };
    let x = item(rng);
    let y = loop {
        let y = item(rng);
        if y.cat != x.cat {
            break y;
        }
    };
    match rng.random_range(0..20) {
        0..=1 => Clue::At { x, house: rng.random_range(0..h) },
        2..=4 => Clue::NotAt { x, house: rng.random_range(0..h) },
        5..=11 => Clue::Same { x, y },
        12..=14 => Clue::LeftOf { x, y },
        15..=17 => Clue::NextTo { x, y },
        _ => Clue::Before { x, y },
    }
}

/// Placements that meet every clue, counted up to `limit`; the first is written to `found`.
fn search(p: &Puzzle, limit: usize, found: &mut Option<Vec<Vec<usize>>>) -> usize {
    let (h, k) = (p.houses, p.categories.len());
    // Place first the values that complete the most clues, so dead ends are cut early.
    let mut left: Vec<Item> =
        (0..k).flat_map(|cat| (0..h).map(move |val| Item { cat, val })).collect();
    let mut vars: Vec<Item> = Vec::with_capacity(left.len());
    let placed = |vars: &[Item], it: Item| vars.contains(&it);
    while !left.is_empty() {
        let gain = |it: Item| {
            p.clues
                .iter()
                .map(|c| match c.items() {
                    (x, None) if x == it => 3,
                    (x, Some(y))
                        if (x == it && placed(&vars, y)) || (y == it && placed(&vars, x)) =>
                    {
                        2
                    }
                    (x, Some(y)) if x == it || y == it => 1,
                    _ => 0,
                })
                .sum::<usize>()
        };
        let best = (0..left.len()).max_by_key(|&i| gain(left[i])).unwrap_or(0);
        vars.push(left.remove(best));
    }
    // The clues to test once variable `i` is placed: those whose last variable is `i`.
    let index = |it: Item| vars.iter().position(|&v| v == it).unwrap_or(0);
    let mut due: Vec<Vec<&Clue>> = vec![Vec::new(); vars.len()];
    for clue in &p.clues {
        let (x, y) = clue.items();
        let last = y.map_or(index(x), |y| index(x).max(index(y)));
        due[last].push(clue);
    }
    let mut pos = vec![vec![usize::MAX; h]; k];
    let mut used = vec![0u32; k];
    let mut count = 0;
    #[allow(clippy::too_many_arguments)]
    fn go(
        i: usize,
        vars: &[Item],
        due: &[Vec<&Clue>],
        pos: &mut Vec<Vec<usize>>,
        used: &mut [u32],
        count: &mut usize,
        limit: usize,
        found: &mut Option<Vec<Vec<usize>>>,
    ) {
        let Some(&v) = vars.get(i) else {
            *count += 1;
            if found.is_none() {
                *found = Some(pos.clone());
            }
            return;
        };
        let h = pos[0].len();
        for house in 0..h {
            if used[v.cat] & (1 << house) != 0 {
                continue;
            }
            pos[v.cat][v.val] = house;
            used[v.cat] |= 1 << house;
            if due[i].iter().all(|c| c.holds(pos)) {
                go(i + 1, vars, due, pos, used, count, limit, found);
            }
            used[v.cat] &= !(1 << house);
            pos[v.cat][v.val] = usize::MAX;
            if *count >= limit {
                return;
            }
        }
    }
    go(0, &vars, &due, &mut pos, &mut used, &mut count, limit, found);
    count
}

fn count_solutions(p: &Puzzle, limit: usize) -> usize {
    search(p, limit, &mut None)
}

impl Puzzle {
    fn phrase(&self, it: Item) -> String {
        let value = &self.categories[it.cat].values[it.val];
        match self.categories[it.cat].name.as_str() {
            "name" => value.clone(),
            "color" => format!("the person in the {value} house"),
            "pet" => format!("the person who keeps the {value}"),
            "drink" => format!("the person who drinks {value}"),
            other => format!("the person whose {other} is {value}"),
        }
    }

    fn sentence(&self, clue: &Clue) -> String {
        let text = match *clue {
            Clue::At { x, house } => format!("{} lives in house {}", self.phrase(x), house + 1),
            Clue::NotAt { x, house } => {
                format!("{} does not live in house {}", self.phrase(x), house + 1)
            }
            Clue::Same { x, y } => format!("{} is {}", self.phrase(x), self.phrase(y)),
            Clue::LeftOf { x, y } => {
                format!("{} lives directly left of {}", self.phrase(x), self.phrase(y))
            }
            Clue::NextTo { x, y } => format!("{} lives next to {}", self.phrase(x), self.phrase(y)),
            Clue::Before { x, y } => {
                format!("{} lives somewhere left of {}", self.phrase(x), self.phrase(y))
            }
        };
        let mut chars = text.chars();
        let first = chars.next().map(|c| c.to_uppercase().collect::<String>()).unwrap_or_default();
        format!("{first}{}.", chars.as_str())
    }

    pub(crate) fn prompt(&self) -> String {
        let mut out = format!(
            "{} houses stand in a row, numbered 1 to {} from left to right. In each house lives \
             one person, and each house has exactly one value of every category:\n",
            self.houses, self.houses
        );
        for c in &self.categories {
            out.push_str(&format!("- {}: {}\n", c.name, c.values.join(", ")));
        }
        out.push_str("\nClues:\n");
        for (i, clue) in self.clues.iter().enumerate() {
            out.push_str(&format!("{}. {}\n", i + 1, self.sentence(clue)));
        }
        let example: Vec<&str> = self.categories.iter().map(|c| c.values[0].as_str()).collect();
        out.push_str(&format!(
            "\nThe answer gives each house's values, one house per line, for example \"House 1: {}\".",
            example.join(", ")
        ));
        out
    }

    fn write(&self, pos: &[Vec<usize>]) -> String {
        (0..self.houses)
            .map(|house| {
                let values: Vec<&str> = self
                    .categories
                    .iter()
                    .enumerate()
                    .filter_map(|(c, cat)| {
                        pos[c].iter().position(|&p| p == house).map(|v| cat.values[v].as_str())
                    })
                    .collect();
                format!("House {}: {}", house + 1, values.join(", "))
            })
            .collect::<Vec<_>>()
            .join("\n")
    }

    pub(crate) fn reference(&self) -> String {
        self.write(&self.solution)
    }

    pub(crate) fn validate(&self) -> Result<(), String> {
        let h = self.houses;
        if h == 0
            || h > MAX_HOUSES
            || self.categories.is_empty()
            || self.categories.len() > POOL.len()
        {
            return Err(format!("zebra: {h} houses and {} categories", self.categories.len()));
        }
        if self.clues.len() > MAX_CLUES || self.categories.iter().any(|c| c.values.len() != h) {
            return Err(
                "zebra: every category needs one value per house, and at most 64 clues".into()
            );
        }
        let mut seen = std::collections::HashSet::new();
        for v in self.categories.iter().flat_map(|c| &c.values) {
            let words = super::words(v);
            if words.len() != 1 || !seen.insert(words[0].clone()) {
                return Err(format!("zebra: value {v:?} is not one word used once"));
            }
        }
        let ok = |it: Item| it.cat < self.categories.len() && it.val < h;
        let fine = self.clues.iter().all(|c| match *c {
            Clue::At { x, house } | Clue::NotAt { x, house } => ok(x) && house < h,
            _ => {
                let (x, y) = c.items();
                ok(x) && y.is_some_and(ok)
            }
        });
        if !fine {
            return Err("zebra: a clue names a value or house that is not there".into());
        }
        Ok(())
    }

    pub(crate) fn check(&self, answer: &str) -> Result<(), String> {
        let h = self.houses;
        let k = self.categories.len();
        let lookup: Vec<(String, Item)> = self
            .categories
            .iter()
            .enumerate()
            .flat_map(|(cat, c)| {
                c.values
                    .iter()
                    .enumerate()
                    .map(move |(val, v)| (v.to_lowercase(), Item { cat, val }))
            })
            .collect();
        let mut pos = vec![vec![usize::MAX; h]; k];
        for line in answer.lines() {
            let words = super::words(line);
            let number = words
                .iter()
                .position(|w| w == "house")
                .and_then(|i| words.get(i + 1))
                .or_else(|| words.iter().find(|w| w.parse::<usize>().is_ok()))
                .and_then(|w| w.parse::<usize>().ok());
            let Some(house) = number.filter(|n| (1..=h).contains(n)).map(|n| n - 1) else {
                continue;
            };
            for w in &words {
                if let Some((_, it)) = lookup.iter().find(|(v, _)| v == w) {
                    let before = pos[it.cat][it.val];
                    if before != usize::MAX && before != house {
                        return Err(format!(
                            "{} is placed in houses {} and {}",
                            self.categories[it.cat].values[it.val],
                            before + 1,
                            house + 1
                        ));
                    }
                    pos[it.cat][it.val] = house;
                }
            }
        }
        for (c, cat) in self.categories.iter().enumerate() {
            let mut taken = 0u32;
            for (v, &p) in pos[c].iter().enumerate() {
                if p == usize::MAX {
                    return Err(format!("{} is not placed", cat.values[v]));
                }
                if taken & (1 << p) != 0 {
                    return Err(format!("house {} has two values of {}", p + 1, cat.name));
                }
                taken |= 1 << p;
            }
        }
        if let Some(clue) = self.clues.iter().find(|c| !c.holds(&pos)) {
            return Err(format!("this clue does not hold: {}", self.sentence(clue)));
        }
        Ok(())
    }

    pub(crate) fn solve(&self) -> Option<String> {
        let mut found = None;
        search(self, 1, &mut found);
        found.map(|pos| self.write(&pos))
    }
}
