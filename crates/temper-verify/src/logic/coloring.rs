//! Graph colouring: give every node a colour so that no edge joins two nodes of one colour.
//!
//! The answer gives each node's colour, one per line (`3: red`, `node 3 = red`). Any proper
//! colouring with the given colours is accepted.

use rand::seq::SliceRandom;
use rand::{Rng, RngCore};
use serde::{Deserialize, Serialize};

/// A colouring puzzle; nodes are numbered from 1 in the prompt and the answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Puzzle {
    /// Number of nodes.
    pub nodes: usize,
    /// The colours that may be used.
    pub colors: Vec<String>,
    /// Edges, as 1-based node numbers.
    pub edges: Vec<(usize, usize)>,
    /// The generator's colouring (indices into `colors`, by node).
    pub solution: Vec<usize>,
}

const COLORS: [&str; 4] = ["red", "green", "blue", "yellow"];
const MAX_NODES: usize = 40;

/// A puzzle at `difficulty` 1–5: 6, 8, 10, 12 and 15 nodes; 3 colours, then 4 from level 4.
pub fn generate(difficulty: u8, rng: &mut dyn RngCore) -> Puzzle {
    let (n, k, p) = [(6, 3, 0.5), (8, 3, 0.5), (10, 3, 0.5), (12, 4, 0.55), (15, 4, 0.6)]
        [usize::from(difficulty.clamp(1, 5)) - 1];
    loop {
        let mut solution: Vec<usize> = (0..n).map(|i| i % k).collect();
        solution.shuffle(rng);
        let mut edges = Vec::new();
        for a in 0..n {
            for b in a + 1..n {
                if solution[a] != solution[b] && rng.random_bool(p) {
                    edges.push((a + 1, b + 1));
                }
            }
        }
        let mut degree = vec![0; n];
        for &(a, b) in &edges {
            degree[a - 1] += 1;
            degree[b - 1] += 1;
        }
        if degree.iter().all(|&d| d >= 2) {
            let colors = COLORS[..k].iter().map(|c| (*c).to_owned()).collect();
            return Puzzle { nodes: n, colors, edges, solution };
        }
    }
}

impl Puzzle {
    pub(crate) fn prompt(&self) -> String {
        let edges: Vec<String> = self.edges.iter().map(|(a, b)| format!("{a}-{b}")).collect();
        format!(
            "A graph has {} nodes, numbered 1 to {}, and these edges: {}.\nColour every node \
             with one of {} so that no edge joins two nodes of the same colour. The answer gives \
             each node's colour, one per line, for example \"1: {}\".",
            self.nodes,
            self.nodes,
            edges.join(", "),
            self.colors.join(", "),
            self.colors[0]
        )
    }

    fn write(&self, colouring: &[usize]) -> String {
        colouring
            .iter()
            .enumerate()
            .map(|(i, &c)| format!("{}: {}", i + 1, self.colors[c]))
            .collect::<Vec<_>>()
            .join("\n")
    }

    pub(crate) fn reference(&self) -> String {
        self.write(&self.solution)
    }

    pub(crate) fn validate(&self) -> Result<(), String> {
        if self.nodes == 0 || self.nodes > MAX_NODES || self.colors.is_empty() {
            return Err(format!(
                "coloring: {} nodes and {} colours",
                self.nodes,
                self.colors.len()
            ));
        }
        if self
            .edges
            .iter()
            .any(|&(a, b)| a == 0 || b == 0 || a > self.nodes || b > self.nodes || a == b)
        {
            return Err("coloring: an edge names a node that is not there".into());
        }
        Ok(())
    }

    pub(crate) fn check(&self, answer: &str) -> Result<(), String> {
        let colors: Vec<String> = self.colors.iter().map(|c| c.to_lowercase()).collect();
        let mut given: Vec<Option<usize>> = vec![None; self.nodes];
        let mut current = None;
        for word in super::words(answer) {
            if let Ok(node) = word.parse::<usize>() {
                current = (1..=self.nodes).contains(&node).then_some(node - 1);
            } else if let (Some(node), Some(c)) = (current, colors.iter().position(|c| *c == word))
            {
                if given[node].is_some_and(|g| g != c) {
                    return Err(format!("node {} is given two colours", node + 1));
                }
                given[node] = Some(c);
                current = None;
            }
        }
        let mut colouring = Vec::with_capacity(self.nodes);
        for (i, g) in given.iter().enumerate() {
            colouring.push(g.ok_or_else(|| format!("node {} has no colour", i + 1))?);
        }
        if let Some((a, b)) =
            self.edges.iter().find(|&&(a, b)| colouring[a - 1] == colouring[b - 1])
        {
            return Err(format!(
                "nodes {a} and {b} are joined and both {}",
                self.colors[colouring[a - 1]]
            ));
        }
        Ok(())
    }

    pub(crate) fn solve(&self) -> Option<String> {
        let mut adjacent = vec![Vec::new(); self.nodes];
        for &(a, b) in &self.edges {
            adjacent[a - 1].push(b - 1);
            adjacent[b - 1].push(a - 1);
        }
        let mut order: Vec<usize> = (0..self.nodes).collect();
        order.sort_by_key(|&i| std::cmp::Reverse(adjacent[i].len()));
        let mut colouring = vec![usize::MAX; self.nodes];
        fn go(
            at: usize,
            order: &[usize],
            adjacent: &[Vec<usize>],
            k: usize,
            col: &mut [usize],
        ) -> bool {
            let Some(&node) = order.get(at) else {
                return true;
            };
            for c in 0..k {
                if adjacent[node].iter().all(|&m| col[m] != c) {
                    col[node] = c;
                    if go(at + 1, order, adjacent, k, col) {
                        return true;
                    }
                }
            }
            col[node] = usize::MAX;
            false
        }
        go(0, &order, &adjacent, self.colors.len(), &mut colouring).then(|| self.write(&colouring))
    }
}
