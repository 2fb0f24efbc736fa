//! TOML configs with `--set key=value` overrides, deserialized with errors that name the file
//! and the field.

use std::path::Path;

use serde::de::DeserializeOwned;
use toml::{Table, Value};

use crate::LaunchError;

/// Reads `path` and applies `sets` (`a.b.c=VALUE`, VALUE parsed as TOML, else taken as a
/// string).
pub fn load_table(path: &Path, sets: &[String]) -> Result<Table, LaunchError> {
    let text = std::fs::read_to_string(path).map_err(|source| LaunchError::io(path, source))?;
    let mut table: Table = toml::from_str(&text)
        .map_err(|source| LaunchError::Toml { path: path.to_owned(), source })?;
    for set in sets {
        apply(&mut table, set)?;
    }
    Ok(table)
}

/// Reads `path`, applies `sets` and deserializes the result. Returns the config and the
/// resolved TOML text.
pub fn load<T: DeserializeOwned>(path: &Path, sets: &[String]) -> Result<(T, String), LaunchError> {
    let table = load_table(path, sets)?;
    let resolved = resolved(&table);
    let config = Value::Table(table)
        .try_into()
        .map_err(|source| LaunchError::Toml { path: path.to_owned(), source })?;
    Ok((config, resolved))
}

/// The TOML text of `table`.
pub fn resolved(table: &Table) -> String {
    // A table parsed from TOML always prints back as TOML.
    toml::to_string_pretty(table).unwrap_or_default()
}

/// Applies one `key=value` override.
pub fn apply(table: &mut Table, set: &str) -> Result<(), LaunchError> {
    let bad = |why: &str| LaunchError::Set { set: set.to_owned(), why: why.to_owned() };
    let Some((key, raw)) = set.split_once('=') else {
        return Err(bad("expected KEY=VALUE"));
    };
    let parts: Vec<&str> = key.trim().split('.').collect();
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
