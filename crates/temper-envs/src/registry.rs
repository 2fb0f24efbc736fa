//! The one place built-in environments are registered, and [`load`], which resolves an
//! environment name or folder.

use std::path::Path;

use crate::dataset::{GenerateFn, Generator};
use crate::envs::{alphabet_sort, calculator, code, logic, math, mcq, reverse_text, wordle};
use crate::{DataSource, EnvError, Environment, package};

/// Options that apply to any environment.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LoadOptions {
    /// Seed of generated datasets and held-out splits.
    pub seed: u64,
    /// Override of the number of generated train examples.
    pub train_size: Option<usize>,
    /// Override of the number of generated eval examples.
    pub eval_size: Option<usize>,
    /// Whether an external environment may start its process. Its command runs on this machine
    /// with no sandbox, so the caller must opt in.
    pub allow_external: bool,
}

impl LoadOptions {
    /// A generated dataset with these options' seed and sizes, or the given default sizes.
    pub fn generated(
        &self,
        generate: GenerateFn,
        train_size: usize,
        eval_size: usize,
    ) -> DataSource {
        DataSource::Generated {
            generate: generate.into(),
            seed: self.seed,
            train_size: self.train_size.unwrap_or(train_size),
            eval_size: self.eval_size.unwrap_or(eval_size),
        }
    }
}

type Builtin = (&'static str, fn(&LoadOptions) -> Environment, GenerateFn);

const BUILTINS: &[Builtin] = &[
    (reverse_text::NAME, reverse_text::environment, reverse_text::generate),
    (alphabet_sort::NAME, alphabet_sort::environment, alphabet_sort::generate),
    (wordle::NAME, wordle::environment, wordle::generate),
    (math::NAME, math::environment, math::generate),
    (mcq::NAME, mcq::environment, mcq::generate),
    (code::NAME, code::environment, code::generate),
    (calculator::NAME, calculator::environment, calculator::generate),
    (logic::NAME, logic::environment, logic::generate),
];

/// Names of the built-in environments.
pub fn builtin_names() -> Vec<&'static str> {
    BUILTINS.iter().map(|b| b.0).collect()
}

/// The dataset generator of a built-in environment.
pub fn builtin_generator(name: &str) -> Option<GenerateFn> {
    BUILTINS.iter().find(|b| b.0 == name).map(|b| b.2)
}

/// The generator of a built-in environment with a package's `[dataset] options`: `Ok(None)`
/// when there is no such generator, `Err` when the options do not suit it.
pub fn builtin_generator_with(
    name: &str,
    options: &toml::Table,
) -> Result<Option<Generator>, String> {
    if name == logic::NAME {
        let parsed: logic::Options = toml::Value::Table(options.clone())
            .try_into()
            .map_err(|e: toml::de::Error| e.message().trim().to_owned())?;
        return logic::generator(&parsed).map(Some);
    }
    match builtin_generator(name) {
        Some(_) if !options.is_empty() => Err(format!("generator `{name}` takes no options")),
        found => Ok(found.map(Generator::from)),
    }
}

/// Loads an environment: a folder holding `environment.toml` (or the file itself), else a
/// built-in name.
pub fn load(spec: &str, options: &LoadOptions) -> Result<Environment, EnvError> {
    let path = Path::new(spec);
    if path.is_dir() {
        return package::load_dir(path, options);
    }
    if path.is_file() && path.file_name().is_some_and(|n| n == package::MANIFEST) {
        let dir = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
        return package::load_dir(dir, options);
    }
    if let Some(builtin) = BUILTINS.iter().find(|b| b.0 == spec) {
        return Ok((builtin.1)(options));
    }
    Err(EnvError::UnknownEnvironment {
        name: spec.to_owned(),
        available: builtin_names().join(", "),
    })
}
