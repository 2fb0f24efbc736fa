//! What a step takes from finished rollout groups, decided without I/O.
//!
//! [`Collector`] holds the decisions of the loop's collect phase as plain, synchronous state: it
//! is offered finished groups one at a time and says, given how many are in flight and queued,
//! whether the step has its groups, how many more to start, or to wait. The loop around it
//! (`run`) does the waiting and the starting; the table tests below reach every decision.
//!
//! The rules, for a step that needs `needed = batch_size / group_size` groups:
//! - a group whose version is older than the step's oldest allowed version is dropped (counted
//!   as stale, with its rollouts); a group in flight that old is cancelled ([`Collector::keep_flight`]);
//! - a group's failed rollouts are counted as errors; a group whose every rollout failed is
//!   dropped and replaced; a run of [`MAX_FAILING_GROUPS`] such groups in a row ends the run with
//!   the last error (a broken server, judge or reward function, not bad luck); the streak carries
//!   across steps;
//! - with `filter_zero_advantage`, a group whose rewards are all equal is set aside; with
//!   `resample_zero_advantage` too, another group replaces it, otherwise it still counts toward
//!   `needed` (a step takes `needed` groups whatever their signal);
//! - missing groups, less those in flight or queued, are started while the rollouts in flight
//!   stay within `max_concurrent`;
//! - a step whose every group was set aside ships them anyway, at zero advantage, rather than
//!   stall the trainer.

use temper_protocol::Rollout;

use crate::OrchestratorError;

/// Groups in a row whose every rollout failed, after which the run stops.
pub const MAX_FAILING_GROUPS: u64 = 20;

/// One group of rollouts, scored, with what training needs.
#[derive(Debug)]
pub(crate) struct Group {
    /// Index of its environment.
    pub env: usize,
    /// Oldest policy version among its rollouts.
    pub version: u64,
    pub rollouts: Vec<Rollout>,
    /// Per rollout: its advantage, or `None` when it is not trained on (it failed).
    pub advantages: Vec<Option<f64>>,
    /// Rewards carry no signal (or fewer than two rollouts succeeded).
    pub zero: bool,
}

/// Counters of one step.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct StepCounts {
    pub stale_groups: u64,
    pub stale_rollouts: u64,
    pub cancelled_groups: u64,
    pub filtered_groups: u64,
    pub errors: u64,
}

/// The settings the decisions depend on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Policy {
    /// Groups a step needs (`batch_size / group_size`).
    pub needed: usize,
    /// Rollouts per group.
    pub group_size: usize,
    /// Rollouts in flight at most.
    pub max_concurrent: usize,
    /// Set aside groups with equal rewards.
    pub filter_zero: bool,
    /// Replace the groups set aside.
    pub resample: bool,
}

/// What the loop does next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Decision {
    /// The step has its groups: ship.
    Ship,
    /// Start this many more groups, then wait for one to finish.
    Dispatch(usize),
    /// Wait for groups in flight.
    Wait,
}

/// A step's groups, as shipped.
#[derive(Debug, Default)]
pub(crate) struct Collected {
    /// Trained on.
    pub chosen: Vec<Group>,
    /// Set aside for equal rewards (reported, not trained on).
    pub filtered: Vec<Group>,
    pub counts: StepCounts,
}

/// The collect phase's state: one step's groups, and the failing streak across steps.
#[derive(Debug)]
pub(crate) struct Collector {
    policy: Policy,
    /// Groups in a row whose every rollout failed, and the last such error.
    failing: u64,
    last_error: Option<String>,
    /// This step (for messages), and the oldest version a group may have.
    number: u64,
    oldest: u64,
    step: Collected,
}

impl Collector {
    pub fn new(policy: Policy) -> Self {
        let step = Collected::default();
        Self { policy, failing: 0, last_error: None, number: 0, oldest: 0, step }
    }

    /// Starts collecting step `number`, whose groups must be at least version `oldest`.
    pub fn begin(&mut self, number: u64, oldest: u64) {
        (self.number, self.oldest) = (number, oldest);
        self.step = Collected::default();
    }

    /// Whether a group in flight since `version` is still wanted; counts it as cancelled if not.
    pub fn keep_flight(&mut self, version: u64) -> bool {
        let keep = version >= self.oldest;
        if !keep {
            self.step.counts.cancelled_groups += 1;
        }
        keep
    }

    /// Whether another finished group should be taken from the queue.
    pub fn wants(&self) -> bool {
        let (chosen, filtered) = (self.step.chosen.len(), self.step.filtered.len());
        chosen < self.policy.needed
            && (self.policy.resample || chosen + filtered < self.policy.needed)
    }

    /// Takes a finished group into the step (or drops it as stale).
    pub fn offer(&mut self, g: Group) {
        let counts = &mut self.step.counts;
        if g.version < self.oldest {
            counts.stale_groups += 1;
            counts.stale_rollouts += g.rollouts.len() as u64;
            return;
        }
        counts.errors += g.advantages.iter().filter(|a| a.is_none()).count() as u64;
        if g.advantages.iter().all(Option::is_none) {
            // Nothing in it can be trained on: another group takes its place.
            self.failing += 1;
            self.last_error = g
                .rollouts
                .iter()
                .find_map(|r| r.error.as_ref())
                .map(|e| format!("{}: {}", e.source, e.message));
            return;
        }
        self.failing = 0;
        if g.zero && self.policy.filter_zero {
            counts.filtered_groups += 1;
            let every = 10 * self.policy.needed as u64;
            if self.policy.resample && counts.filtered_groups.is_multiple_of(every) {
                tracing::warn!(
                    "step {}: {} groups in a row had equal rewards; still resampling",
                    self.number,
                    counts.filtered_groups
                );
            }
            self.step.filtered.push(g);
        } else {
            self.step.chosen.push(g);
        }
    }

    /// Fails when the last [`MAX_FAILING_GROUPS`] groups offered failed entirely; asked after
    /// the loop has offered every finished group it had, so one that succeeded among them
    /// resets the streak first.
    pub fn check(&self) -> Result<(), OrchestratorError> {
        if self.failing < MAX_FAILING_GROUPS {
            return Ok(());
        }
        Err(OrchestratorError::Rollouts(format!(
            "the last {} groups failed entirely; last error: {}",
            self.failing,
            self.last_error.as_deref().unwrap_or_default()
        )))
    }

    /// What to do with `in_flight` groups running and `queued` finished but not yet offered.
    pub fn decide(&self, in_flight: usize, queued: usize) -> Decision {
        let p = &self.policy;
        let chosen = self.step.chosen.len();
        let accounted = if p.resample { chosen } else { chosen + self.step.filtered.len() };
        if accounted >= p.needed {
            return Decision::Ship;
        }
        let missing = (p.needed - accounted).saturating_sub(in_flight + queued);
        let room = (p.max_concurrent / p.group_size.max(1)).saturating_sub(in_flight);
        match missing.min(room) {
            0 => Decision::Wait,
            n => Decision::Dispatch(n),
        }
    }

    /// The step's groups. When every one was set aside they are shipped as chosen.
    pub fn finish(&mut self) -> Collected {
        let mut step = std::mem::take(&mut self.step);
        if step.chosen.is_empty() {
            tracing::warn!(
                "step {}: every group had equal rewards; shipping them with zero advantage",
                self.number
            );
            step.chosen = std::mem::take(&mut step.filtered);
        }
        step
    }
}

#[cfg(test)]
mod tests {
    use temper_protocol::{RolloutError, SCHEMA_VERSION, StopReason, Timings};

    use super::*;

    fn rollout(error: Option<&str>) -> Rollout {
        Rollout {
            schema_version: SCHEMA_VERSION,
            env: "e".into(),
            task: "e".into(),
            example_id: 0,
            rollout_index: 0,
            prompt: Vec::new(),
            completion: Vec::new(),
            answer: String::new(),
            tokens: None,
            policy_version: None,
            reward: 0.0,
            scores: Default::default(),
            metrics: Default::default(),
            stop_reason: if error.is_some() { StopReason::Error } else { StopReason::Completed },
            error: error.map(|m| RolloutError { source: "model".into(), message: m.into() }),
            timings: Timings::default(),
        }
    }

    /// A group of 4 at `version`: `ok` rollouts succeeded (the rest failed), `zero` rewards.
    fn group(version: u64, ok: usize, zero: bool) -> Group {
        let rollouts: Vec<Rollout> =
            (0..4).map(|i| rollout((i >= ok).then_some("unreachable"))).collect();
        let advantages = (0..4).map(|i| (i < ok).then_some(if zero { 0.0 } else { 0.5 })).collect();
        Group { env: 0, version, rollouts, advantages, zero }
    }

    const POLICY: Policy =
        Policy { needed: 2, group_size: 4, max_concurrent: 16, filter_zero: true, resample: true };

    /// What the collector decides next, its counts, and how many groups it chose, set aside, and
    /// left in the queue.
    type Outcome = (Decision, StepCounts, usize, usize, usize);

    /// A table row: what it shows, the policy, the oldest version, the finished groups, the
    /// groups in flight, and the expected outcome.
    type Case = (&'static str, Policy, u64, Vec<Group>, usize, Outcome);

    /// Offers `groups` (while the collector wants them) and returns the outcome.
    fn after(policy: Policy, oldest: u64, groups: Vec<Group>, in_flight: usize) -> Outcome {
        let mut c = Collector::new(policy);
        c.begin(1, oldest);
        let mut queue: std::collections::VecDeque<Group> = groups.into();
        while c.wants()
            && let Some(g) = queue.pop_front()
        {
            c.offer(g);
        }
        let d = c.decide(in_flight, queue.len());
        (d, c.step.counts, c.step.chosen.len(), c.step.filtered.len(), queue.len())
    }

    #[test]
    fn collect_decisions_table() {
        let z = StepCounts::default();
        #[rustfmt::skip]
        let cases: Vec<Case> = vec![
            ("nothing yet: start the two needed", POLICY, 0, vec![], 0,
                (Decision::Dispatch(2), z, 0, 0, 0)),
            ("two in flight: wait for them", POLICY, 0, vec![], 2,
                (Decision::Wait, z, 0, 0, 0)),
            ("one done, one in flight: wait", POLICY, 0, vec![group(0, 4, false)], 1,
                (Decision::Wait, z, 1, 0, 0)),
            ("two usable groups: ship", POLICY, 0, vec![group(0, 4, false), group(0, 4, false)], 0,
                (Decision::Ship, z, 2, 0, 0)),
            ("a third finished group stays queued for the next step", POLICY, 0,
                vec![group(0, 4, false), group(0, 4, false), group(0, 4, false)], 0,
                (Decision::Ship, z, 2, 0, 1)),
            ("stale groups are dropped with their rollouts, and replaced", POLICY, 3,
                vec![group(2, 4, false), group(3, 4, false)], 0,
                (Decision::Dispatch(1), StepCounts { stale_groups: 1, stale_rollouts: 4, ..z }, 1, 0, 0)),
            ("equal rewards are set aside and resampled", POLICY, 0,
                vec![group(0, 4, true), group(0, 4, false)], 0,
                (Decision::Dispatch(1), StepCounts { filtered_groups: 1, ..z }, 1, 1, 0)),
            ("without resampling they still count toward the step",
                Policy { resample: false, ..POLICY }, 0,
                vec![group(0, 4, true), group(0, 4, false)], 0,
                (Decision::Ship, StepCounts { filtered_groups: 1, ..z }, 1, 1, 0)),
            ("without the filter equal rewards are trained on",
                Policy { filter_zero: false, ..POLICY }, 0,
                vec![group(0, 4, true), group(0, 4, true)], 0,
                (Decision::Ship, z, 2, 0, 0)),
            ("failed rollouts are counted, the rest of the group trains", POLICY, 0,
                vec![group(0, 3, false), group(0, 2, false)], 0,
                (Decision::Ship, StepCounts { errors: 3, ..z }, 2, 0, 0)),
            ("a group whose every rollout failed is counted and replaced", POLICY, 0,
                vec![group(0, 0, true), group(0, 4, false)], 0,
                (Decision::Dispatch(1), StepCounts { errors: 4, ..z }, 1, 0, 0)),
            ("dispatch stops at max_concurrent rollouts in flight",
                Policy { needed: 8, ..POLICY }, 0, vec![], 1,
                (Decision::Dispatch(3), z, 0, 0, 0)),
            ("full: nothing more can start", Policy { needed: 8, ..POLICY }, 0, vec![], 4,
                (Decision::Wait, z, 0, 0, 0)),
        ];
        for (what, policy, oldest, groups, in_flight, expected) in cases {
            assert_eq!(after(policy, oldest, groups, in_flight), expected, "{what}");
        }
    }

    #[test]
    fn queued_groups_are_counted_before_dispatching_more() {
        let mut c = Collector::new(Policy { needed: 4, ..POLICY });
        c.begin(1, 0);
        c.offer(group(0, 4, false));
        // 3 missing; 2 finished groups wait in the queue and 1 is in flight: none to start.
        assert_eq!(c.decide(1, 2), Decision::Wait);
        assert_eq!(c.decide(0, 1), Decision::Dispatch(2));
    }

    #[test]
    fn flights_older_than_the_step_allows_are_cancelled() {
        let mut c = Collector::new(POLICY);
        c.begin(1, 5);
        let kept: Vec<bool> = [3, 5, 4, 6].into_iter().map(|v| c.keep_flight(v)).collect();
        assert_eq!(kept, [false, true, false, true]);
        assert_eq!(c.step.counts.cancelled_groups, 2);
        // A new step starts its counts afresh.
        c.begin(1, 0);
        assert_eq!(c.step.counts, StepCounts::default());
    }

    #[test]
    fn a_failing_streak_ends_the_run_and_any_success_resets_it() {
        let mut c = Collector::new(Policy { needed: 100, ..POLICY });
        c.begin(1, 0);
        for _ in 0..MAX_FAILING_GROUPS - 1 {
            c.offer(group(0, 0, true));
        }
        c.check().unwrap();
        c.offer(group(0, 1, true));
        // The streak carries across steps.
        c.begin(2, 0);
        for _ in 0..MAX_FAILING_GROUPS - 1 {
            c.offer(group(0, 0, true));
        }
        c.check().unwrap();
        c.offer(group(0, 0, true));
        let err = c.check().unwrap_err().to_string();
        assert!(err.contains("the last 20 groups failed entirely"), "{err}");
        assert!(err.contains("last error: model: unreachable"), "{err}");
        // One success among the groups offered in the same pass resets it before the check.
        c.offer(group(0, 4, false));
        c.check().unwrap();
    }

    #[test]
    fn a_step_of_only_equal_rewards_ships_them() {
        let mut c = Collector::new(Policy { resample: false, ..POLICY });
        c.begin(1, 0);
        c.offer(group(0, 4, true));
        c.offer(group(0, 4, true));
        assert_eq!(c.decide(0, 0), Decision::Ship);
        let step = c.finish();
        assert_eq!(
            (step.chosen.len(), step.filtered.len(), step.counts.filtered_groups),
            (2, 0, 2)
        );
    }
}
