//! Sudoku on 4×4 (2×2 boxes) and 9×9 (3×3 boxes) grids.
//!
//! The answer is the filled grid, one row per line (`1234` or `1 2 | 3 4`; separators and a
//! leading `Row 3:` are ignored), or all the digits in row order. Any grid that keeps the
//! givens and follows the rules is accepted.

use rand::RngCore;
use rand::seq::SliceRandom;
use serde::{Deserialize, Serialize};

/// A sudoku puzzle.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Puzzle {
    /// 4 or 9.
    pub size: usize,
    /// The rows, `.` for a blank.
    pub rows: Vec<String>,
    /// The generator's filled grid.
    pub solution: Vec<String>,
}

type Grid = Vec<Vec<u8>>;

/// A puzzle at `difficulty` 1–5: 4×4 with 6 or 10 blanks, 9×9 with 35, 45 or 52.
pub fn generate(difficulty: u8, rng: &mut dyn RngCore) -> Puzzle {
    let (size, blanks) =
        [(4, 6), (4, 10), (9, 35), (9, 45), (9, 52)][usize::from(difficulty.clamp(1, 5)) - 1];
    let mut grid = vec![vec![0u8; size]; size];
    fill(&mut grid, size, rng);
    let solution = render(&grid);
    let mut cells: Vec<usize> = (0..size * size).collect();
    cells.shuffle(rng);
    for &c in &cells[..blanks] {
        grid[c / size][c % size] = 0;
    }
    Puzzle { size, rows: render(&grid), solution }
}

fn render(grid: &Grid) -> Vec<String> {
    grid.iter()
        .map(|row| row.iter().map(|&v| if v == 0 { '.' } else { char::from(b'0' + v) }).collect())
        .collect()
}

fn box_side(size: usize) -> usize {
    if size == 4 { 2 } else { 3 }
}

fn allowed(grid: &Grid, size: usize, r: usize, c: usize) -> u16 {
    let b = box_side(size);
    let mut used = 0u16;
    for (i, row) in grid.iter().enumerate().take(size) {
        used |= 1 << grid[r][i];
        used |= 1 << row[c];
    }
    let (br, bc) = (r / b * b, c / b * b);
    for row in grid.iter().skip(br).take(b) {
        for &v in row.iter().skip(bc).take(b) {
            used |= 1 << v;
        }
    }
    let all: u16 = ((1u16 << (size + 1)) - 1) & !1;
    all & !used
}

/// Fills the blanks with a random valid completion (the grid starts empty here).
fn fill(grid: &mut Grid, size: usize, rng: &mut dyn RngCore) -> bool {
    let Some((r, c)) =
        (0..size * size).map(|i| (i / size, i % size)).find(|&(r, c)| grid[r][c] == 0)
    else {
        return true;
    };
    let mask = allowed(grid, size, r, c);
    let mut digits: Vec<u8> = (1..=size as u8).filter(|d| mask & (1 << d) != 0).collect();
    digits.shuffle(rng);
    for d in digits {
        grid[r][c] = d;
        if fill(grid, size, rng) {
            return true;
        }
    }
    grid[r][c] = 0;
    false
}

/// Solves by search, always trying the blank with the fewest candidates first.
fn solve_grid(grid: &mut Grid, size: usize) -> bool {
    let mut best: Option<(usize, usize, u16)> = None;
    for r in 0..size {
        for c in 0..size {
            if grid[r][c] == 0 {
                let mask = allowed(grid, size, r, c);
                if best.is_none_or(|(_, _, m)| mask.count_ones() < m.count_ones()) {
                    best = Some((r, c, mask));
                }
            }
        }
    }
    let Some((r, c, mask)) = best else {
        return true;
    };
    for d in 1..=size as u8 {
        if mask & (1 << d) != 0 {
            grid[r][c] = d;
            if solve_grid(grid, size) {
                return true;
            }
        }
    }
    grid[r][c] = 0;
    false
}

impl Puzzle {
    fn givens(&self) -> Grid {
        self.rows
            .iter()
            .map(|row| row.bytes().map(|b| if b.is_ascii_digit() { b - b'0' } else { 0 }).collect())
            .collect()
    }

    pub(crate) fn prompt(&self) -> String {
        let b = box_side(self.size);
        format!(
            "Fill in this {n}×{n} sudoku: every row, every column and every {b}×{b} box must hold \
             the digits 1 to {n} once each. A dot is a blank.\n\n{}\n\nThe answer is the \
             completed grid, one row of {n} digits per line.",
            self.rows.join("\n"),
            n = self.size,
        )
    }

    pub(crate) fn reference(&self) -> String {
        self.solution.join("\n")
    }

    pub(crate) fn validate(&self) -> Result<(), String> {
        if self.size != 4 && self.size != 9 {
            return Err(format!("sudoku: size {} is not 4 or 9", self.size));
        }
        let limit = char::from(b'0' + self.size as u8);
        let ok = |row: &String| {
            row.chars().count() == self.size
                && row.chars().all(|c| c == '.' || ('1'..=limit).contains(&c))
        };
        if self.rows.len() != self.size || !self.rows.iter().all(ok) {
            return Err(format!("sudoku: the rows are not {0} rows of {0} cells", self.size));
        }
        Ok(())
    }

    pub(crate) fn check(&self, answer: &str) -> Result<(), String> {
        let n = self.size;
        let grid = read_grid(answer, n)?;
        let givens = self.givens();
        for r in 0..n {
            for c in 0..n {
                if givens[r][c] != 0 && givens[r][c] != grid[r][c] {
                    return Err(format!(
                        "row {} column {} must stay {}",
                        r + 1,
                        c + 1,
                        givens[r][c]
                    ));
                }
            }
        }
        let b = box_side(n);
        let full: u16 = ((1u16 << (n + 1)) - 1) & !1;
        for i in 0..n {
            let row = grid[i].iter().fold(0u16, |m, &v| m | 1 << v);
            let col = grid.iter().fold(0u16, |m, r| m | 1 << r[i]);
            let (br, bc) = (i / b * b, i % b * b);
            let bx = (0..n).fold(0u16, |m, k| m | 1 << grid[br + k / b][bc + k % b]);
            if row != full {
                return Err(format!("row {} does not hold 1 to {n}", i + 1));
            }
            if col != full {
                return Err(format!("column {} does not hold 1 to {n}", i + 1));
            }
            if bx != full {
                return Err(format!("box {} does not hold 1 to {n}", i + 1));
            }
        }
        Ok(())
    }

    pub(crate) fn solve(&self) -> Option<String> {
        let mut grid = self.givens();
        solve_grid(&mut grid, self.size).then(|| render(&grid).join("\n"))
    }
}

/// The digits of one answer line, after a leading `Row N` label.
fn line_digits(line: &str, n: usize) -> Vec<u8> {
    let lower = line.trim().to_lowercase();
    let rest = match lower.strip_prefix("row") {
        Some(r) => r.trim_start().trim_start_matches(|c: char| c.is_ascii_digit()),
        None => &lower,
    };
    rest.bytes().filter(|b| (b'1'..=b'0' + n as u8).contains(b)).map(|b| b - b'0').collect()
}

fn read_grid(answer: &str, n: usize) -> Result<Grid, String> {
    let rows: Vec<Vec<u8>> =
        answer.lines().map(|l| line_digits(l, n)).filter(|d| d.len() == n).collect();
    if rows.len() == n {
        return Ok(rows);
    }
    let all: Vec<u8> = answer.lines().flat_map(|l| line_digits(l, n)).collect();
    if all.len() == n * n {
        return Ok(all.chunks(n).map(<[u8]>::to_vec).collect());
    }
    Err(format!("the answer is not a {n}×{n} grid of digits 1 to {n}"))
}
