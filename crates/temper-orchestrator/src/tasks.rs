//! Which task comes next: environments drawn by weight, each walking its train split in a
//! seeded shuffle per epoch. The position is a small [`TaskState`], saved in the orchestrator's
//! checkpoint so a resumed run draws the tasks an uninterrupted one would.

use std::sync::Arc;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};
use temper_envs::dataset::shuffle_seeded;
use temper_envs::{Environment, Example};

/// Where the draw stands.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct TaskState {
    /// Tasks drawn so far.
    pub draws: u64,
    /// Per environment: (epoch, position in that epoch's order).
    pub cursors: Vec<(u64, usize)>,
}

/// One environment and its train examples.
#[derive(Debug)]
pub struct TaskEnv {
    /// The environment.
    pub env: Arc<Environment>,
    /// Its relative weight.
    pub weight: f64,
    /// Train examples.
    pub examples: Arc<Vec<Example>>,
}

/// Draws tasks.
#[derive(Debug)]
pub struct TaskSource {
    envs: Vec<TaskEnv>,
    seed: u64,
    state: TaskState,
    orders: Vec<(u64, Vec<usize>)>,
}

impl TaskSource {
    /// A source over `envs` (each with at least one example), starting at `state` (or the start).
    pub fn new(envs: Vec<TaskEnv>, seed: u64, state: Option<TaskState>) -> Self {
        let n = envs.len();
        let state = state
            .filter(|s| s.cursors.len() == n)
            .unwrap_or(TaskState { draws: 0, cursors: vec![(0, 0); n] });
        let mut source = Self { envs, seed, state, orders: Vec::new() };
        source.orders = (0..n).map(|i| (u64::MAX, source.order(i, u64::MAX).1)).collect();
        source
    }

    /// The environments.
    pub fn envs(&self) -> &[TaskEnv] {
        &self.envs
    }

    /// The position, for a checkpoint.
    pub fn state(&self) -> &TaskState {
        &self.state
    }

    fn order(&self, env: usize, epoch: u64) -> (u64, Vec<usize>) {
        let mut order: Vec<usize> = (0..self.envs[env].examples.len()).collect();
        let salt = (env as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        shuffle_seeded(&mut order, self.seed ^ salt ^ epoch.rotate_left(17));
        (epoch, order)
    }

    /// The next task: the environment's index and the example.
    pub fn next_task(&mut self) -> (usize, Example) {
        let mut rng = ChaCha8Rng::seed_from_u64(self.seed ^ 0x7461_736b);
        rng.set_stream(self.state.draws);
        self.state.draws += 1;
        let total: f64 = self.envs.iter().map(|e| e.weight).sum();
        let mut x = rng.random::<f64>() * total;
        let mut env = self.envs.len() - 1;
        for (i, e) in self.envs.iter().enumerate() {
            if x < e.weight {
                env = i;
                break;
            }
            x -= e.weight;
        }
        let len = self.envs[env].examples.len();
        let (epoch, pos) = &mut self.state.cursors[env];
        if *pos >= len {
            *epoch += 1;
            *pos = 0;
        }
        let (epoch, at) = (*epoch, *pos);
        *pos += 1;
        if self.orders[env].0 != epoch {
            self.orders[env] = self.order(env, epoch);
        }
        let index = self.orders[env].1[at];
        (env, self.envs[env].examples[index].clone())
    }
}
