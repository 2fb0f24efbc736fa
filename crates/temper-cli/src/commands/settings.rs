//! TOML configs with `--set key=value` overrides, deserialized with errors that name the file
//! and the field.

use std::path::Path;

use anyhow::{Context, bail};
use serde::de::DeserializeOwned;
use toml::{Table, Value};

/// Reads `path`, applies `sets` (`a.b.c=VALUE`, VALUE parsed as TOML, else taken as a string),
/// and deserializes the result. Returns the config and the resolved TOML text.
pub fn load<T: DeserializeOwned>(path: &Path, sets: &[String]) -> anyhow::Result<(T, String)> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    let mut table: Table =
        toml::from_str(&text).with_context(|| format!("{} is not valid TOML", path.display()))?;
    for set in sets {
        apply(&mut table, set)?;
    }
    let resolved = toml::to_string_pretty(&table).context("cannot write the resolved config")?;
    let config: T = toml::from_str(&resolved)
        .map_err(|e| anyhow::anyhow!("{} (with --set overrides applied): {e}", path.display()))?;
    Ok((config, resolved))
}

/// Applies one `key=value` override.
pub fn apply(table: &mut Table, set: &str) -> anyhow::Result<()> {
    let Some((key, raw)) = set.split_once('=') else {
        bail!("--set {set}: expected KEY=VALUE");
    };
    let parts: Vec<&str> = key.trim().split('.').collect();
    if parts.iter().any(|p| p.is_empty()) {
        bail!("--set {set}: `{key}` is not a dotted key such as train.steps");
    }
    let value = parse_value(raw.trim());
    let mut at = table;
    for p in &parts[..parts.len() - 1] {
        let entry = at.entry((*p).to_owned()).or_insert_with(|| Value::Table(Table::new()));
        at = match entry {
            Value::Table(t) => t,
            _ => bail!("--set {set}: `{p}` is a value, not a section"),
        };
    }
    at.insert(parts[parts.len() - 1].to_owned(), value);
    Ok(())
}

fn parse_value(raw: &str) -> Value {
    // A TOML value when it parses as one (numbers, booleans, quoted strings, arrays), else the
    // text itself.
    match toml::from_str::<Table>(&format!("v = {raw}")) {
        Ok(mut t) => t.remove("v").unwrap_or_else(|| Value::String(raw.to_owned())),
        Err(_) => Value::String(raw.to_owned()),
    }
}
