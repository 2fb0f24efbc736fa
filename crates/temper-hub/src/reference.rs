//! `owner/name[@requirement]` and which published version it resolves to.
//!
//! - `owner/name`: the newest version that is not yanked (pre-releases only when nothing else);
//! - `owner/name@1.2.0` (or `@=1.2.0`): exactly that version, yanked or not — an exact pin keeps
//!   installing what a lockfile recorded;
//! - `owner/name@^1.2`, `@~1.2.3`, `@>=1, <2`, …: the newest non-yanked version matching the
//!   Cargo-style requirement.

use std::fmt;
use std::str::FromStr;

use semver::{Version, VersionReq};

use crate::HubError;

/// What version a reference asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Wanted {
    /// The newest non-yanked version.
    Latest,
    /// Exactly this version (yanked ones included).
    Exact(Version),
    /// The newest non-yanked version matching.
    Req(VersionReq),
}

/// `owner/name[@requirement]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EnvRef {
    /// The namespace (a user).
    pub owner: String,
    /// The environment's name.
    pub name: String,
    /// Which version.
    pub wanted: Wanted,
}

/// Whether `s` is a valid owner or environment name: 2 to 64 of `a-z`, `0-9`, `-`, starting
/// with a letter or digit (the rule of `environment.toml` names).
pub fn valid_name(s: &str) -> bool {
    temper_envs::package::valid_name(s)
}

impl EnvRef {
    /// `owner/name`.
    pub fn full_name(&self) -> String {
        format!("{}/{}", self.owner, self.name)
    }

    /// Whether `spec` looks like a hub reference rather than a built-in name or a path: one `/`,
    /// both sides valid names, no such folder on disk.
    pub fn looks_like(spec: &str) -> bool {
        spec.parse::<EnvRef>().is_ok() && !std::path::Path::new(spec).exists()
    }
}

impl FromStr for EnvRef {
    type Err = HubError;

    fn from_str(s: &str) -> Result<Self, HubError> {
        let bad =
            |m: &str| HubError::invalid(format!("`{s}`: {m} (expected owner/name[@version])"));
        let (path, req) = match s.split_once('@') {
            Some((p, r)) => (p, Some(r.trim())),
            None => (s, None),
        };
        let (owner, name) = path.split_once('/').ok_or_else(|| bad("no owner"))?;
        if !valid_name(owner) || !valid_name(name) {
            return Err(bad("owner and name are 2-64 of a-z, 0-9 and -"));
        }
        let wanted = match req {
            None => Wanted::Latest,
            Some("") => return Err(bad("an empty version after @")),
            Some(r) => {
                let exact = r.strip_prefix('=').unwrap_or(r);
                match Version::parse(exact) {
                    Ok(v) => Wanted::Exact(v),
                    Err(_) => Wanted::Req(
                        VersionReq::parse(r).map_err(|e| bad(&format!("version `{r}`: {e}")))?,
                    ),
                }
            }
        };
        Ok(Self { owner: owner.to_owned(), name: name.to_owned(), wanted })
    }
}

impl fmt::Display for EnvRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.owner, self.name)?;
        match &self.wanted {
            Wanted::Latest => Ok(()),
            Wanted::Exact(v) => write!(f, "@{v}"),
            Wanted::Req(r) => write!(f, "@{r}"),
        }
    }
}

/// The version `wanted` picks among published `(version, yanked)` pairs.
pub fn resolve<'a>(
    versions: impl IntoIterator<Item = (&'a Version, bool)>,
    wanted: &Wanted,
) -> Option<Version> {
    let versions: Vec<(&Version, bool)> = versions.into_iter().collect();
    match wanted {
        Wanted::Exact(v) => versions.iter().find(|(x, _)| *x == v).map(|(x, _)| (*x).clone()),
        Wanted::Latest => {
            let live = || versions.iter().filter(|(_, yanked)| !yanked).map(|(v, _)| *v);
            live().filter(|v| v.pre.is_empty()).max().or_else(|| live().max()).cloned()
        }
        Wanted::Req(req) => versions
            .iter()
            .filter(|(v, yanked)| !yanked && req.matches(v))
            .map(|(v, _)| *v)
            .max()
            .cloned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(s: &str) -> Version {
        Version::parse(s).unwrap()
    }

    #[test]
    fn parses_references_and_refuses_bad_ones() {
        let r: EnvRef = "alice/reverse-text@^1.2".parse().unwrap();
        assert_eq!((r.owner.as_str(), r.name.as_str()), ("alice", "reverse-text"));
        assert_eq!(r.wanted, Wanted::Req(VersionReq::parse("^1.2").unwrap()));
        assert_eq!("a1/b2".parse::<EnvRef>().unwrap().wanted, Wanted::Latest);
        assert_eq!("ab/cd@1.0.0".parse::<EnvRef>().unwrap().wanted, Wanted::Exact(v("1.0.0")));
        assert_eq!("ab/cd@=1.0.0".parse::<EnvRef>().unwrap().wanted, Wanted::Exact(v("1.0.0")));
        assert_eq!("ab/cd@1.0.0".parse::<EnvRef>().unwrap().to_string(), "ab/cd@1.0.0");
        for bad in ["reverse-text", "Alice/x1", "ab/../cd", "ab/cd@", "ab/cd@banana", "/cd", "ab/c"]
        {
            let err = bad.parse::<EnvRef>().expect_err(bad).to_string();
            assert!(err.contains(bad), "{err}");
        }
    }

    #[test]
    fn resolution_skips_yanked_versions_unless_pinned() {
        let published = [
            (v("0.9.0"), false),
            (v("1.0.0"), false),
            (v("1.2.0"), false),
            (v("1.3.0"), true),
            (v("1.4.0-beta.1"), false),
            (v("2.0.0"), true),
        ];
        let pick = |w: &str| {
            let r: EnvRef = format!("ab/cd{w}").parse().unwrap();
            resolve(published.iter().map(|(v, y)| (v, *y)), &r.wanted).map(|v| v.to_string())
        };
        assert_eq!(pick("").as_deref(), Some("1.2.0"), "latest skips yanked and pre-releases");
        assert_eq!(pick("@^1").as_deref(), Some("1.2.0"));
        assert_eq!(pick("@~1.0").as_deref(), Some("1.0.0"));
        assert_eq!(pick("@<1").as_deref(), Some("0.9.0"));
        assert_eq!(pick("@^2").as_deref(), None, "the only 2.x is yanked");
        assert_eq!(pick("@2.0.0").as_deref(), Some("2.0.0"), "an exact pin installs a yanked one");
        assert_eq!(pick("@1.3.0").as_deref(), Some("1.3.0"));
        assert_eq!(pick("@3.0.0").as_deref(), None);
        assert_eq!(pick("@>=1.4.0-beta.1").as_deref(), Some("1.4.0-beta.1"));
        let only_pre = [(v("0.1.0-alpha"), false)];
        let latest = resolve(only_pre.iter().map(|(v, y)| (v, *y)), &Wanted::Latest);
        assert_eq!(latest, Some(v("0.1.0-alpha")));
    }
}
