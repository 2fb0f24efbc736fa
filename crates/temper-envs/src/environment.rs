use std::sync::Arc;

use sha2::{Digest, Sha256};
use temper_protocol::{Message, Role, Rollout, SamplingParams};
use temper_verify::code::CodeSession;

use crate::rollout::{RolloutPlan, run_rollout};
use crate::{
    ChatModel, DataSource, EnvError, Example, Interaction, Parser, Rubric, Services, Split,
    TurnLimits,
};

/// Identity of an environment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EnvInfo {
    /// Name (`^[a-z0-9][a-z0-9-]{1,63}$`).
    pub name: String,
    /// Semantic version.
    pub version: String,
    /// One line on what it is.
    pub description: String,
    /// SHA-256 (hex) of the package's files; for a built-in, of its name and version, since its
    /// code ships inside the binary.
    pub content_hash: String,
}

impl EnvInfo {
    /// Identity of a built-in environment.
    pub fn builtin(name: &str, version: &str, description: &str) -> Self {
        let mut h = Sha256::new();
        h.update(b"temper-builtin\0");
        h.update(name.as_bytes());
        h.update(b"\0");
        h.update(version.as_bytes());
        Self {
            name: name.to_owned(),
            version: version.to_owned(),
            description: description.to_owned(),
            content_hash: hex::encode(h.finalize()),
        }
    }
}

/// A task, a way to talk to the model about it, and a reward.
#[derive(Debug, Clone)]
pub struct Environment {
    /// Name, version, description and content hash.
    pub info: EnvInfo,
    /// Prepended to every prompt that does not start with a system message.
    pub system_prompt: Option<String>,
    /// Where the answer sits in a completion.
    pub parser: Parser,
    /// The examples.
    pub data: DataSource,
    /// The environment's side of the conversation.
    pub interaction: Arc<dyn Interaction>,
    /// How rollouts are scored.
    pub rubric: Rubric,
    /// Stop conditions.
    pub limits: TurnLimits,
}

impl Environment {
    /// All examples of a split.
    pub fn examples(&self, split: Split) -> Result<Vec<Example>, EnvError> {
        self.data.load(split, &self.info.name)
    }

    /// The messages the model sees first: the system prompt (unless the example brings its own)
    /// followed by the example's prompt.
    pub fn prompt_for(&self, example: &Example) -> Vec<Message> {
        let has_system = example.prompt.first().is_some_and(|m| m.role == Role::System);
        match &self.system_prompt {
            Some(system) if !has_system => std::iter::once(Message::system(system.clone()))
                .chain(example.prompt.iter().cloned())
                .collect(),
            _ => example.prompt.clone(),
        }
    }

    /// Runs one unscored rollout. With a sampling seed `s`, rollout `i` of a group samples with
    /// seed `s + i`, so the members of a group differ yet reproduce. The sandbox session the
    /// rollout holds (if its interaction opened one) comes back with it: score with
    /// [`Environment::score_group_in`], then close it.
    pub async fn rollout(
        &self,
        model: &dyn ChatModel,
        example: &Example,
        rollout_index: u32,
        sampling: &SamplingParams,
        services: &Services,
    ) -> (Rollout, Option<Arc<dyn CodeSession>>) {
        let prompt = self.prompt_for(example);
        let mut sampling = sampling.clone();
        sampling.seed = sampling.seed.map(|s| s.wrapping_add(u64::from(rollout_index)));
        let plan = RolloutPlan {
            env: &self.info.name,
            interaction: self.interaction.as_ref(),
            limits: self.limits,
            example,
            prompt: &prompt,
            sampling: &sampling,
            services,
            rollout_index,
        };
        run_rollout(plan, model).await
    }

    /// Runs `group_size` rollouts of one example concurrently and scores them as a group.
    pub async fn run_group(
        &self,
        model: &dyn ChatModel,
        example: &Example,
        group_size: u32,
        sampling: &SamplingParams,
        services: &Services,
    ) -> Vec<Rollout> {
        self.run_group_gated(model, example, group_size, sampling, services, None).await
    }

    /// [`Environment::run_group`] where each rollout first takes a permit of `gate`, when given.
    /// Sessions are closed once the group is scored, however the rollouts ended.
    pub async fn run_group_gated(
        &self,
        model: &dyn ChatModel,
        example: &Example,
        group_size: u32,
        sampling: &SamplingParams,
        services: &Services,
        gate: Option<&tokio::sync::Semaphore>,
    ) -> Vec<Rollout> {
        let (mut rollouts, sessions): (Vec<Rollout>, Vec<_>) =
            futures::future::join_all((0..group_size).map(|i| async move {
                let _permit = match gate {
                    Some(g) => Some(g.acquire().await.expect("the gate is never closed")),
                    None => None,
                };
                self.rollout(model, example, i, sampling, services).await
            }))
            .await
            .into_iter()
            .unzip();
        self.score_group_in(example, &mut rollouts, &sessions, services).await;
        futures::future::join_all(sessions.iter().flatten().map(|s| s.close())).await;
        rollouts
    }

    /// Scores rollouts of one example as a group, in place (see [`Rubric::score_group`]).
    pub async fn score_group(
        &self,
        example: &Example,
        rollouts: &mut [Rollout],
        services: &Services,
    ) {
        self.score_group_in(example, rollouts, &[], services).await;
    }

    /// [`Environment::score_group`] where rollout `i`'s reward functions may use `sessions[i]`.
    pub async fn score_group_in(
        &self,
        example: &Example,
        rollouts: &mut [Rollout],
        sessions: &[Option<Arc<dyn CodeSession>>],
        services: &Services,
    ) {
        self.rubric.score_group(example, &self.parser, rollouts, sessions, services).await;
    }
}
