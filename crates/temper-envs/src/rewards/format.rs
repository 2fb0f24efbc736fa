//! `format`: the fraction of the model's turns that follow the parser's format strictly (see
//! `Parser::follows_format`: the XML element closed, the box present, ...). A completion with no
//! model turn scores 0. Often given weight 0, to log format adherence as a metric.

use async_trait::async_trait;
use serde::Deserialize;
use temper_protocol::Role;

use crate::rubric::{RewardError, RewardFunction, RewardInput, Services};

/// No parameters.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Format {}

#[async_trait]
impl RewardFunction for Format {
    async fn score(&self, input: &RewardInput<'_>, _: &Services) -> Result<f64, RewardError> {
        let turns: Vec<bool> = input
            .completion
            .iter()
            .filter(|m| m.role == Role::Assistant)
            .map(|m| input.parser.follows_format(&m.content))
            .collect();
        if turns.is_empty() {
            return Ok(0.0);
        }
        Ok(turns.iter().filter(|&&ok| ok).count() as f64 / turns.len() as f64)
    }
}
