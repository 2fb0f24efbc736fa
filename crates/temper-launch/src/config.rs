//! One RL config split into the configs of its roles, by the roles' config types.
//!
//! The sections a role reads are the fields of its config type, read from the type itself
//! ([`sections_of`]): a section added to `RlTrainerConfig` or `OrchestratorConfig` goes to that
//! role with no list to keep in step. A section both read (`output`) goes to both, so they share
//! one run directory; `[warmup]` is the launcher's own.

use std::path::{Path, PathBuf};

use serde::de::{self, Deserialize, Deserializer, Visitor};
use temper_orchestrator::OrchestratorConfig;
use temper_trainer::rl::RlTrainerConfig;
use toml::{Table, Value};

use crate::LaunchError;
use crate::settings;

/// The launcher's own sections.
const OWN_SECTIONS: &[&str] = &["warmup", "launch"];

/// The top-level fields (TOML sections) of the config type `T`, as serde's derive declares them.
pub fn sections_of<'de, T: Deserialize<'de>>() -> &'static [&'static str] {
    let mut fields: &'static [&'static str] = &[];
    let _ = T::deserialize(Probe(&mut fields));
    fields
}

/// A deserializer that only records the field names a struct asks for.
struct Probe<'a>(&'a mut &'static [&'static str]);

impl<'de> Deserializer<'de> for Probe<'_> {
    type Error = de::value::Error;

    fn deserialize_any<V: Visitor<'de>>(self, _: V) -> Result<V::Value, Self::Error> {
        Err(de::Error::custom("not a struct"))
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        fields: &'static [&'static str],
        _visitor: V,
    ) -> Result<V::Value, Self::Error> {
        *self.0 = fields;
        Err(de::Error::custom("probed"))
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf
        option unit unit_struct newtype_struct seq tuple tuple_struct map enum identifier
        ignored_any
    }
}

/// An RL config read and split.
#[derive(Debug, Clone)]
pub struct RlPlan {
    /// The config file.
    pub path: PathBuf,
    /// The trainer's config (`trainer.steps` is the run's one step count).
    pub trainer: RlTrainerConfig,
    /// The orchestrator's config (its `steps` copied from the trainer's).
    pub orchestrator: OrchestratorConfig,
    /// The SFT config that makes the model when `model.path` does not exist yet (relative to
    /// the RL config's folder).
    pub warmup: Option<PathBuf>,
    /// `[launch]`: how many of each role and where they run.
    pub launch: crate::LaunchConfig,
    /// The whole config with overrides applied, as TOML.
    pub resolved: String,
}

/// `[warmup]`.
#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct Warmup {
    /// The SFT config.
    sft: PathBuf,
}

impl RlPlan {
    /// Reads `path` with `sets` applied and splits it.
    pub fn load(path: &Path, sets: &[String]) -> Result<Self, LaunchError> {
        Self::split(&settings::Config::read(path, sets)?)
    }

    /// Splits a config into the roles' configs.
    pub fn split(config: &settings::Config) -> Result<Self, LaunchError> {
        let (path, table) = (config.path.as_path(), &config.table);
        let bad = |message: String| LaunchError::Config { path: path.to_owned(), message };
        let trainer_sections = sections_of::<RlTrainerConfig>();
        let orchestrator_sections = sections_of::<OrchestratorConfig>();
        let known: Vec<&str> = trainer_sections
            .iter()
            .chain(orchestrator_sections)
            .chain(OWN_SECTIONS)
            .copied()
            .collect();
        if let Some(key) = table.keys().find(|k| !known.contains(&k.as_str())) {
            let mut all: Vec<String> = known.iter().map(|k| k.to_string()).collect();
            all.sort_unstable();
            all.dedup();
            let close = settings::closest(key, &all)
                .map(|c| format!("; did you mean [{c}]?"))
                .unwrap_or_default();
            return Err(LaunchError::Field {
                at: config.at(key),
                message: format!(
                    "unknown section [{key}]{close} (expected one of {})",
                    all.join(", ")
                ),
            });
        }
        let pick = |keys: &[&str]| -> Table {
            table
                .iter()
                .filter(|(k, _)| keys.contains(&k.as_str()))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect()
        };
        let (mut trainer_t, mut orch_t) = (pick(trainer_sections), pick(orchestrator_sections));
        let steps = one_step_count(config, &mut trainer_t, &mut orch_t)?;
        let trainer: RlTrainerConfig = config.deserialize_part(trainer_t)?;
        let orchestrator: OrchestratorConfig = config.deserialize_part(orch_t)?;
        debug_assert_eq!(trainer.trainer.steps, steps);
        let warmup = match table.get("warmup") {
            None => None,
            Some(w) => {
                let w: Warmup = w.clone().try_into().map_err(|e: toml::de::Error| {
                    bad(format!("[warmup] needs sft = \"FILE\" (an SFT config): {e}"))
                })?;
                Some(path.parent().unwrap_or(Path::new(".")).join(w.sft))
            }
        };
        let launch: crate::LaunchConfig = match table.get("launch") {
            None => crate::LaunchConfig::default(),
            Some(l) => {
                l.clone().try_into().map_err(|e: toml::de::Error| bad(format!("[launch] {e}")))?
            }
        };
        launch.validate().map_err(bad)?;
        let resolved = config.resolved();
        Ok(RlPlan { path: path.to_owned(), trainer, orchestrator, warmup, launch, resolved })
    }
}

/// The run's step count: `[trainer] steps`, copied to `[orchestrator]` (which must not
/// disagree).
fn one_step_count(
    config: &settings::Config,
    trainer: &mut Table,
    orchestrator: &mut Table,
) -> Result<u64, LaunchError> {
    let bad = |key: &str, message: String| LaunchError::Field { at: config.at(key), message };
    let get = |t: &Table, section: &str| -> Result<Option<i64>, LaunchError> {
        match t.get(section).and_then(|s| s.get("steps")) {
            None => Ok(None),
            Some(Value::Integer(n)) => Ok(Some(*n)),
            Some(other) => {
                let quoted = other.as_str().filter(|s| s.parse::<u64>().is_ok());
                let hint =
                    quoted.map(|s| format!(" (write it without quotes: {s})")).unwrap_or_default();
                Err(bad(
                    &format!("{section}.steps"),
                    format!(
                        "{section}.steps: expected a whole number of steps, found {other}{hint}"
                    ),
                ))
            }
        }
    };
    let steps = match (get(trainer, "trainer")?, get(orchestrator, "orchestrator")?) {
        (Some(a), Some(b)) if a != b => {
            return Err(bad(
                "orchestrator.steps",
                format!(
                    "trainer.steps ({a}) and orchestrator.steps ({b}) differ; set trainer.steps only"
                ),
            ));
        }
        (Some(a), _) | (None, Some(a)) => a,
        (None, None) => {
            // A misspelt key in [trainer] says more than the missing count.
            if let Err(e) = config.deserialize_part::<RlTrainerConfig>(trainer.clone())
                && e.to_string().contains("unknown field")
            {
                return Err(e);
            }
            return Err(bad("trainer", "set trainer.steps (the number of RL steps)".into()));
        }
    };
    let count = u64::try_from(steps)
        .ok()
        .filter(|n| *n > 0)
        .ok_or_else(|| bad("trainer.steps", format!("trainer.steps must be > 0, got {steps}")))?;
    for (t, section) in [(trainer, "trainer"), (orchestrator, "orchestrator")] {
        let entry = t.entry(section.to_owned()).or_insert_with(|| Value::Table(Table::new()));
        if let Value::Table(s) = entry {
            s.insert("steps".into(), Value::Integer(steps));
        }
    }
    Ok(count)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sections_come_from_the_types() {
        let mut t = sections_of::<RlTrainerConfig>().to_vec();
        t.sort_unstable();
        assert_eq!(t, ["lora", "loss", "model", "optim", "output", "schedule", "trainer"]);
        let mut o = sections_of::<OrchestratorConfig>().to_vec();
        o.sort_unstable();
        assert_eq!(o, ["env", "inference", "orchestrator", "output"]);
    }

    fn split(text: &str) -> Result<RlPlan, LaunchError> {
        RlPlan::split(&settings::Config::from_text(Path::new("rl.toml"), text.into(), &[])?)
    }

    #[test]
    fn one_config_becomes_two_with_one_run_directory() {
        let plan = split(
            "[model]\npath = \"m\"\n[trainer]\nsteps = 7\n[orchestrator]\nbatch_size = 8\ngroup_size = 4\n[[env]]\nid = \"reverse-text\"\n[warmup]\nsft = \"sft.toml\"\n",
        )
        .unwrap();
        assert_eq!(plan.trainer.trainer.steps, 7);
        assert_eq!(plan.orchestrator.orchestrator.steps, 7);
        assert_eq!(plan.orchestrator.orchestrator.batch_size, 8);
        // No [output]: both roles write the RL default.
        assert_eq!(plan.trainer.output.dir, Path::new("outputs/rl"));
        assert_eq!(plan.orchestrator.output.dir, Path::new("outputs/rl"));
        assert_eq!(plan.warmup.as_deref(), Some(Path::new("sft.toml")));
        let with_output =
            split("[model]\npath = \"m\"\n[trainer]\nsteps = 1\n[output]\ndir = \"x\"\n").unwrap();
        assert_eq!(with_output.orchestrator.output.dir, Path::new("x"));
    }

    #[test]
    fn bad_configs_are_named() {
        let err = |text: &str| split(text).unwrap_err().to_string();
        let e = err("[model]\npath = \"m\"\n[trainer]\nsteps = 1\n[optimizer]\nlr = 1\n");
        assert!(
            e.contains("unknown section [optimizer]") && e.contains("optim, orchestrator"),
            "{e}"
        );
        let e = err("[model]\npath = \"m\"\n[trainer]\nsteps = 2\n[orchestrator]\nsteps = 3\n");
        assert!(e.contains("trainer.steps (2) and orchestrator.steps (3) differ"), "{e}");
        let e = err("[model]\npath = \"m\"\n");
        assert!(e.contains("set trainer.steps"), "{e}");
        let e = err("[model]\npath = \"m\"\n[trainer]\nsteps = 1\n[warmup]\nconfig = \"x\"\n");
        assert!(e.contains("[warmup] needs sft"), "{e}");
        let e = err("[model]\npath = \"m\"\n[trainer]\nsteps = 1\nbogus = 2\n");
        assert!(e.starts_with("rl.toml:5:1: unknown field `bogus`"), "{e}");
        // A misspelt step count is named as such, not as a missing one.
        let e = err("[model]\npath = \"m\"\n[trainer]\nstpes = 1\n");
        assert!(
            e.starts_with("rl.toml:4:1: unknown field `stpes`")
                && e.contains("did you mean `steps`?"),
            "{e}"
        );
        let e = err("[model]\npath = \"m\"\n[trainer]\nsteps = \"300\"\n");
        assert_eq!(
            e,
            "rl.toml:4:1: trainer.steps: expected a whole number of steps, found \"300\" (write it without quotes: 300)"
        );
        let e = err("[model]\npath = \"m\"\n[trainer]\nsteps = 0\n");
        assert!(e.starts_with("rl.toml:4:1: trainer.steps must be > 0, got 0"), "{e}");
        let e = err("[model]\npath = \"m\"\n[trainer]\nsteps = 1\n[optimm]\nlr = 1\n");
        assert!(
            e.starts_with("rl.toml:5:2: unknown section [optimm]; did you mean [optim]?"),
            "{e}"
        );
    }
}
