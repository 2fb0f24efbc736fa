//! TOML configs with `--set key=value` overrides, deserialized with errors that point at the
//! user's own file and line (or at the `--set` that put the value there), name the field and
//! what it should be, and suggest the close name of a misspelt key.

use std::ops::Range;
use std::path::{Path, PathBuf};

use serde::de::DeserializeOwned;
use toml::de::{DeTable, DeValue};
use toml::{Table, Value};

use crate::LaunchError;

/// A config file as read, with its overrides applied.
#[derive(Debug, Clone)]
pub struct Config {
    /// The file.
    pub path: PathBuf,
    /// The file's values with the overrides applied.
    pub table: Table,
    /// The file's text, for line numbers in errors.
    text: String,
    /// The overrides: (dotted key, as given).
    sets: Vec<(String, String)>,
}

impl Config {
    /// Reads `path` and applies `sets` (`a.b.c=VALUE`, VALUE parsed as TOML, else taken as a
    /// string).
    pub fn read(path: &Path, sets: &[String]) -> Result<Config, LaunchError> {
        let text = std::fs::read_to_string(path).map_err(|source| LaunchError::io(path, source))?;
        Config::from_text(path, text, sets)
    }

    /// As [`Config::read`], from text already read.
    pub fn from_text(path: &Path, text: String, sets: &[String]) -> Result<Config, LaunchError> {
        let mut table: Table = toml::from_str(&text)
            .map_err(|error| LaunchError::Toml { path: path.to_owned(), error })?;
        let mut applied = Vec::new();
        for set in sets {
            let key = apply(&mut table, set)?;
            applied.push((key, set.clone()));
        }
        Ok(Config { path: path.to_owned(), table, text, sets: applied })
    }

    /// The whole config as `T`.
    pub fn deserialize<T: DeserializeOwned>(&self) -> Result<T, LaunchError> {
        self.deserialize_part(self.table.clone())
    }

    /// `part` (some of this config's sections, keyed as in the file) as `T`.
    pub fn deserialize_part<T: DeserializeOwned>(&self, part: Table) -> Result<T, LaunchError> {
        Value::Table(part).try_into().map_err(|e| self.error(&e))
    }

    /// The TOML text of the config with the overrides applied.
    pub fn resolved(&self) -> String {
        resolved(&self.table)
    }

    /// A deserialization error of (part of) this config, placed at the line of the field it
    /// names, or at the `--set` that gave the value.
    pub fn error(&self, e: &toml::de::Error) -> LaunchError {
        let path = key_path(e);
        let message = e.message().trim_end();
        let unknown = message
            .strip_prefix("unknown field `")
            .and_then(|rest| rest.split_once('`'))
            .map(|(name, _)| name.to_owned());
        // The field the error is about: an unknown field is a key under the path.
        let field = match &unknown {
            Some(name) if path.is_empty() => name.clone(),
            Some(name) => format!("{path}.{name}"),
            None => path,
        };
        let mut text = message.to_owned();
        if let Some(name) = &unknown
            && let Some(close) = closest(name, &expected_names(message))
        {
            text.push_str(&format!("; did you mean `{close}`?"));
        }
        if let Some(rest) = message.strip_prefix("invalid type: string \"") {
            let quoted = rest.split('"').next().unwrap_or("");
            if quoted.parse::<f64>().is_ok() || quoted == "true" || quoted == "false" {
                text.push_str(&format!(" (write it without quotes: {quoted})"));
            }
        }
        if !field.is_empty() && unknown.is_none() {
            text = format!("{field}: {text}");
        }
        LaunchError::Field { at: self.at(&field), message: text }
    }

    /// Where the value of a dotted key came from: `--set KEY=VALUE`, else `FILE:LINE:COLUMN`
    /// of the key in the file (of its nearest enclosing section when the key is absent), else
    /// the file.
    pub fn at(&self, dotted: &str) -> String {
        // A set gave the value, or a section above it; or, for an error about a whole section
        // the file does not have, a set made that section.
        let in_file = locate(&self.text, dotted).is_some_and(|(_, whole)| whole);
        let from_set = self.sets.iter().rev().find(|(key, _)| {
            dotted == key
                || dotted.starts_with(&format!("{key}."))
                || (!in_file && key.starts_with(&format!("{dotted}.")))
        });
        if let Some((_, set)) = from_set {
            return format!("--set {set}");
        }
        match locate(&self.text, dotted).map(|(offset, _)| offset) {
            Some(offset) => {
                let (line, column) = line_column(&self.text, offset);
                format!("{}:{line}:{column}", self.path.display())
            }
            None => self.path.display().to_string(),
        }
    }
}

/// Reads `path` and applies `sets`.
pub fn load_table(path: &Path, sets: &[String]) -> Result<Table, LaunchError> {
    Ok(Config::read(path, sets)?.table)
}

/// Reads `path`, applies `sets` and deserializes the result. Returns the config and the
/// resolved TOML text.
pub fn load<T: DeserializeOwned>(path: &Path, sets: &[String]) -> Result<(T, String), LaunchError> {
    let config = Config::read(path, sets)?;
    Ok((config.deserialize()?, config.resolved()))
}

/// The TOML text of `table`.
pub fn resolved(table: &Table) -> String {
    // A table parsed from TOML always prints back as TOML.
    toml::to_string_pretty(table).unwrap_or_default()
}

/// Applies one `key=value` override; returns the dotted key.
pub fn apply(table: &mut Table, set: &str) -> Result<String, LaunchError> {
    let bad = |why: &str| LaunchError::Set { set: set.to_owned(), why: why.to_owned() };
    let Some((key, raw)) = set.split_once('=') else {
        return Err(bad("expected KEY=VALUE"));
    };
    let key = key.trim();
    let parts: Vec<&str> = key.split('.').collect();
    if parts.iter().any(|p| p.is_empty()) {
        return Err(bad(&format!("`{key}` is not a dotted key such as train.steps")));
    }
    let value = parse_value(raw.trim());
    let mut at = table;
    for p in &parts[..parts.len() - 1] {
        let entry = at.entry((*p).to_owned()).or_insert_with(|| Value::Table(Table::new()));
        at = match entry {
            Value::Table(t) => t,
            _ => return Err(bad(&format!("`{p}` is a value, not a section"))),
        };
    }
    at.insert(parts[parts.len() - 1].to_owned(), value);
    Ok(key.to_owned())
}

fn parse_value(raw: &str) -> Value {
    // A TOML value when it parses as one (numbers, booleans, quoted strings, arrays), else the
    // text itself.
    match toml::from_str::<Table>(&format!("v = {raw}")) {
        Ok(mut t) => t.remove("v").unwrap_or_else(|| Value::String(raw.to_owned())),
        Err(_) => Value::String(raw.to_owned()),
    }
}

/// The dotted key an error of `Value::try_into` names (its "in `a.b`" line), or "".
fn key_path(e: &toml::de::Error) -> String {
    let shown = e.to_string();
    shown
        .lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .and_then(|l| l.strip_prefix("in `"))
        .and_then(|l| l.strip_suffix('`'))
        .unwrap_or("")
        .to_owned()
}

/// The names listed in serde's "expected one of `a`, `b`" (or "expected `a`").
fn expected_names(message: &str) -> Vec<String> {
    let Some((_, list)) = message.split_once("expected ") else { return Vec::new() };
    list.split('`').skip(1).step_by(2).map(str::to_owned).collect()
}

/// The name among `names` closest to `typed`, when close enough to be a slip of the keys.
pub fn closest(typed: &str, names: &[String]) -> Option<String> {
    names
        .iter()
        .map(|n| (strsim::damerau_levenshtein(typed, n), n))
        .filter(|(d, n)| *d <= (n.len().max(typed.len()) / 3).max(1))
        .min_by_key(|(d, _)| *d)
        .map(|(_, n)| n.clone())
}

/// The byte offset in `text` of the key `dotted` (its deepest part that exists), and whether
/// the whole key is there.
fn locate(text: &str, dotted: &str) -> Option<(usize, bool)> {
    let root = DeTable::parse(text).ok()?;
    let mut table = root.get_ref();
    let mut found: Option<Range<usize>> = None;
    let parts: Vec<&str> = dotted.split('.').collect();
    let mut depth = 0;
    for part in &parts {
        let Some((key, value)) = table.iter().find(|(k, _)| k.get_ref().as_ref() == *part) else {
            break;
        };
        found = Some(key.span());
        depth += 1;
        match value.get_ref() {
            DeValue::Table(t) => table = t,
            _ => break,
        }
    }
    found.map(|r| (r.start, depth == parts.len()))
}

/// 1-based line and column (in characters) of a byte offset.
fn line_column(text: &str, offset: usize) -> (usize, usize) {
    let before = &text[..offset.min(text.len())];
    let line = before.matches('\n').count() + 1;
    let column = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
    (line, column)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code, reason = "the fields are only deserialized")]
    struct Demo {
        train: Train,
    }

    #[derive(Debug, serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code, reason = "the fields are only deserialized")]
    struct Train {
        steps: u64,
        max_grad_norm: Option<f64>,
    }

    fn error(text: &str, sets: &[&str]) -> String {
        let sets: Vec<String> = sets.iter().map(|s| s.to_string()).collect();
        let config = Config::from_text(Path::new("a.toml"), text.into(), &sets).unwrap();
        config.deserialize::<Demo>().unwrap_err().to_string()
    }

    #[test]
    fn errors_point_at_the_users_line_or_the_set() {
        let text = "# comment\n\n[train]\nsteps = 3\nmax_grad_nrom = 1.0\n";
        assert_eq!(
            error(text, &[]),
            "a.toml:5:1: unknown field `max_grad_nrom`, expected `steps` or `max_grad_norm`; \
             did you mean `max_grad_norm`?"
        );
        assert_eq!(
            error("[train]\nsteps = \"300\"\n", &[]),
            "a.toml:2:1: train.steps: invalid type: string \"300\", expected u64 \
             (write it without quotes: 300)"
        );
        assert_eq!(
            error("[train]\nsteps = 3\n", &["train.steps=abc"]),
            "--set train.steps=abc: train.steps: invalid type: string \"abc\", expected u64"
        );
        assert_eq!(
            error("[train]\nsteps = 3\n", &["train.stepz=4"]),
            "--set train.stepz=4: unknown field `stepz`, expected `steps` or `max_grad_norm`; \
             did you mean `steps`?"
        );
        assert_eq!(error("\n[train]\n", &[]), "a.toml:2:2: train: missing field `steps`");
        // A value from the file, though other keys were set: no blame on the sets.
        assert!(
            error("[train]\nsteps = -1\n", &["train.max_grad_norm=2"]).starts_with("a.toml:2:1:")
        );
    }

    #[test]
    fn close_names_only_when_close() {
        let names = ["steps".to_owned(), "batch_size".to_owned()];
        assert_eq!(closest("stpes", &names).as_deref(), Some("steps"));
        assert_eq!(closest("batchsize", &names).as_deref(), Some("batch_size"));
        assert_eq!(closest("lr", &names), None);
    }
}
