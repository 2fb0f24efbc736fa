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
    /// The config as read, to place errors found later at their lines.
    source: settings::Config,
}

/// `[launch]`, read with the file's positions for its errors.
#[derive(Debug, serde::Deserialize)]
struct LaunchSection {
    #[serde(default)]
    launch: crate::LaunchConfig,
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
        let mut trainer: RlTrainerConfig = config.deserialize_part(trainer_t)?;
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
        let mut launch = config.deserialize_part::<LaunchSection>(pick(&["launch"]))?.launch;
        launch.validate().map_err(bad)?;
        resolve_dtypes(config, &mut launch, &mut trainer)?;
        let resolved = config.resolved();
        Ok(RlPlan {
            path: path.to_owned(),
            trainer,
            orchestrator,
            warmup,
            launch,
            resolved,
            source: config.clone(),
        })
    }

    /// Refuses what this build of temper cannot run: several trainer ranks without the `mpi`
    /// feature, a CUDA device without the `cuda` feature. The error is placed at the field.
    pub fn check_build(&self, build: crate::Build) -> Result<(), LaunchError> {
        let launch = &self.launch;
        let at = |key: &str, message: String| LaunchError::Field {
            at: self.source.at(&format!("launch.{key}")),
            message,
        };
        if launch.trainer_ranks > 1 && !build.mpi {
            return Err(at(
                "trainer_ranks",
                format!(
                    "launch.trainer_ranks = {} needs temper built with the `mpi` feature (cargo build --release --features mpi, with Open MPI installed)",
                    launch.trainer_ranks
                ),
            ));
        }
        for (key, device) in [
            ("inference_device", launch.inference_device),
            ("trainer_device", launch.trainer_device),
        ] {
            if device.is_cuda() && !build.cuda {
                return Err(at(
                    key,
                    format!(
                        "launch.{key} = \"{device}\": this temper was built without CUDA; build it with `cargo build --release --features cuda` (needs the CUDA toolkit's nvcc), or set launch.{key} = \"cpu\""
                    ),
                ));
            }
        }
        Ok(())
    }

    /// The inference servers' precision (resolved when the config was read).
    pub fn inference_dtype(&self) -> &str {
        self.launch.inference_dtype.as_deref().unwrap_or("f32")
    }

    /// The trainer's precision (resolved when the config was read).
    pub fn trainer_dtype(&self) -> &str {
        self.launch.trainer_dtype.as_deref().unwrap_or("f32")
    }
}

/// Settles each role's precision: `[launch] inference_dtype`, else `[model] dtype`, else the
/// device's default (bf16 on CUDA, f32 on the CPU); `[launch] trainer_dtype`, else
/// `[model] dtype`, else f32. The trainer's is written into its `[model] dtype`; a
/// `trainer_dtype` that contradicts `[model] dtype` is refused.
fn resolve_dtypes(
    config: &settings::Config,
    launch: &mut crate::LaunchConfig,
    trainer: &mut RlTrainerConfig,
) -> Result<(), LaunchError> {
    let model = trainer.model.dtype.clone();
    if let Some(d) = &model {
        crate::device::check_dtype("model.dtype", d)
            .map_err(|message| LaunchError::Field { at: config.at("model.dtype"), message })?;
    }
    let inference = launch
        .inference_dtype
        .clone()
        .or_else(|| model.clone())
        .unwrap_or_else(|| launch.inference_device.default_dtype().to_owned());
    let trainer_dtype = match (&launch.trainer_dtype, &model) {
        (Some(t), Some(m)) if t != m => {
            return Err(LaunchError::Field {
                at: config.at("launch.trainer_dtype"),
                message: format!(
                    "launch.trainer_dtype ({t}) and model.dtype ({m}) differ: set one of them"
                ),
            });
        }
        (Some(t), _) => t.clone(),
        (None, m) => m.clone().unwrap_or_else(|| "f32".to_owned()),
    };
    if launch.trainer_dtype.is_some() {
        trainer.model.dtype = Some(trainer_dtype.clone());
    }
    launch.inference_dtype = Some(inference);
    launch.trainer_dtype = Some(trainer_dtype);
    Ok(())
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

    #[test]
    fn devices_and_precisions_per_role() {
        use crate::{Build, DeviceSpec};
        let base = "[model]\npath = \"m\"\n[trainer]\nsteps = 1\n";
        // Defaults: both on the CPU in f32.
        let plan = split(base).unwrap();
        assert_eq!(plan.launch.inference_device, DeviceSpec::Cpu);
        assert_eq!((plan.inference_dtype(), plan.trainer_dtype()), ("f32", "f32"));
        assert!(plan.check_build(Build::default()).is_ok());
        // A GPU: bf16 for inference unless named; the trainer keeps f32.
        let gpu =
            format!("{base}[launch]\ninference_device = \"cuda\"\ntrainer_device = \"cuda:1\"\n");
        let plan = split(&gpu).unwrap();
        assert_eq!(plan.launch.inference_device, DeviceSpec::Cuda(0));
        assert_eq!(plan.launch.trainer_device, DeviceSpec::Cuda(1));
        assert_eq!((plan.inference_dtype(), plan.trainer_dtype()), ("bf16", "f32"));
        assert!(plan.check_build(Build::new(false, true)).is_ok());
        // A build without CUDA refuses it, at the field's line.
        let e = plan.check_build(Build::new(true, false)).unwrap_err().to_string();
        assert_eq!(
            e,
            "rl.toml:6:1: launch.inference_device = \"cuda:0\": this temper was built without CUDA; build it with `cargo build --release --features cuda` (needs the CUDA toolkit's nvcc), or set launch.inference_device = \"cpu\""
        );
        let cpu_server = format!("{base}[launch]\ntrainer_device = \"cuda:1\"\n");
        let e = split(&cpu_server).unwrap().check_build(Build::default()).unwrap_err().to_string();
        assert!(e.starts_with("rl.toml:6:1: launch.trainer_device = \"cuda:1\""), "{e}");
        let ranks = format!("{base}[launch]\ntrainer_ranks = 2\n");
        let e = split(&ranks).unwrap().check_build(Build::default()).unwrap_err().to_string();
        assert!(
            e.starts_with(
                "rl.toml:6:1: launch.trainer_ranks = 2 needs temper built with the `mpi` feature"
            ),
            "{e}"
        );
        // [model] dtype is both roles' default; [launch] names one role's.
        let plan = split("[model]\npath = \"m\"\ndtype = \"bf16\"\n[trainer]\nsteps = 1\n[launch]\ninference_dtype = \"f16\"\n")
        .unwrap();
        assert_eq!((plan.inference_dtype(), plan.trainer_dtype()), ("f16", "bf16"));
        let plan = split(&format!("{base}[launch]\ntrainer_dtype = \"bf16\"\n")).unwrap();
        assert_eq!(plan.trainer.model.dtype.as_deref(), Some("bf16"));
        assert_eq!(plan.inference_dtype(), "f32");
        // Bad values are named where they are written.
        let e = split(&format!("{base}[launch]\ntrainer_device = \"gpu\"\n")).unwrap_err();
        assert!(
            e.to_string().starts_with("rl.toml:6:1: launch.trainer_device: `gpu` is not a device: expected cpu, cuda or cuda:N"),
            "{e}"
        );
        let e = split(&format!("{base}[launch]\ninference_dtype = \"fp8\"\n")).unwrap_err();
        assert!(
            e.to_string().contains("launch.inference_dtype = \"fp8\" is not a precision"),
            "{e}"
        );
        let e = split("[model]\npath = \"m\"\ndtype = \"f32\"\n[trainer]\nsteps = 1\n[launch]\ntrainer_dtype = \"bf16\"\n")
        .unwrap_err();
        assert!(
            e.to_string().starts_with(
                "rl.toml:7:1: launch.trainer_dtype (bf16) and model.dtype (f32) differ"
            ),
            "{e}"
        );
        let e = settings::Config::from_text(
            Path::new("rl.toml"),
            base.into(),
            &["launch.inference_device=cuda:x".into()],
        )
        .and_then(|c| RlPlan::split(&c))
        .unwrap_err();
        assert!(e.to_string().starts_with("--set launch.inference_device=cuda:x:"), "{e}");
    }
}
