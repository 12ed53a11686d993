//! How a section checks its own keys. Each `<component>/config.rs` has a
//! `validate(&self, c: &mut Check)` that states its keys' ranges beside
//! them; [`Check`] names every problem by the key's whole dotted path
//! (`export.timeout_ms`), so that all of them come back in one list.
//!
//! A leaf (it imports nothing of the crate): the settings files use it, and
//! `crate::config`, which assembles them, re-exports [`ConfigError`].
//!
//! A key's doc comment states the range its `validate` checks, on a line
//! `Range: LO ..= HI`, `Range: at least LO` or `Range: 0 (off) or LO ..= HI`;
//! `config/reference.rs` prints that line in `sonde config reference`, and
//! its tests set every key to each end of its range, and just past it, to
//! prove that the check and the line agree.

use std::fmt::Display;

/// A configuration problem: which key, and why.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[error("{key}: {reason}")]
pub struct ConfigError {
    pub key: String,
    pub reason: String,
}

impl ConfigError {
    pub fn new(key: impl Into<String>, reason: impl Into<String>) -> Self {
        Self {
            key: key.into(),
            reason: reason.into(),
        }
    }
}

/// The problems found so far, and the section being checked (its dotted
/// path, the prefix of every key named).
pub struct Check<'a> {
    section: String,
    errs: &'a mut Vec<ConfigError>,
}

impl<'a> Check<'a> {
    /// Checks of the section at `section` (`"export"`), adding to `errs`.
    pub fn new(section: impl Into<String>, errs: &'a mut Vec<ConfigError>) -> Self {
        Check {
            section: section.into(),
            errs,
        }
    }

    /// Runs `f` over a section on its own: `Err` with every problem in one
    /// line, for a component started without the rest of the config.
    pub fn run(section: &str, f: impl FnOnce(&mut Check<'_>)) -> Result<(), String> {
        let mut errs = Vec::new();
        f(&mut Check::new(section, &mut errs));
        match errs.is_empty() {
            true => Ok(()),
            false => Err(errs.iter().map(ToString::to_string).collect::<Vec<_>>().join("; ")),
        }
    }

    /// The checks of a table inside this section (`c.within("tls")`,
    /// `c.within("tiers[1]")`).
    pub fn within(&mut self, name: &str) -> Check<'_> {
        Check {
            section: self.key(name),
            errs: self.errs,
        }
    }

    /// The whole dotted path of `key` in this section.
    pub fn key(&self, key: &str) -> String {
        match (self.section.is_empty(), key.is_empty()) {
            (true, _) => key.to_string(),
            (_, true) => self.section.clone(),
            _ => format!("{}.{key}", self.section),
        }
    }

    /// `key` is wrong, for `reason`.
    pub fn bad(&mut self, key: &str, reason: impl Into<String>) {
        let key = self.key(key);
        self.errs.push(ConfigError::new(key, reason));
    }

    /// A problem whose key is whole already: a loader given `c.key("tls")`
    /// names the file at fault (`export.tls.ca`).
    pub fn bad_whole(&mut self, key: String, reason: String) {
        self.errs.push(ConfigError::new(key, reason));
    }

    /// `key`'s value `v` must lie in `lo ..= hi`.
    pub fn range(&mut self, key: &str, v: impl Into<Num>, lo: u64, hi: u64) {
        let v = v.into().0;
        if !(lo..=hi).contains(&v) {
            self.bad(key, out_of_range(v, lo, hi));
        }
    }

    /// `key`'s value `v` must be at least `lo`.
    pub fn at_least(&mut self, key: &str, v: impl Into<Num>, lo: u64) {
        if v.into().0 < lo {
            self.bad(key, below(lo));
        }
    }

    /// `key` is an `http://` or `https://` URL with a host.
    pub fn url(&mut self, key: &str, u: &str) {
        if let Err(reason) = check_url(u) {
            self.bad(key, reason);
        }
    }
}

/// An integer setting, whatever its width.
pub struct Num(u64);

impl From<u64> for Num {
    fn from(v: u64) -> Num {
        Num(v)
    }
}

impl From<u32> for Num {
    fn from(v: u32) -> Num {
        Num(v.into())
    }
}

impl From<usize> for Num {
    fn from(v: usize) -> Num {
        Num(v as u64)
    }
}

/// The reason [`Check::range`] gives.
pub fn out_of_range(v: impl Display, lo: u64, hi: u64) -> String {
    format!("{v} is out of range {lo}..={hi}")
}

/// The reason [`Check::at_least`] gives.
pub fn below(lo: u64) -> String {
    format!("must be at least {lo}")
}

fn check_url(u: &str) -> Result<(), String> {
    let rest = u
        .strip_prefix("http://")
        .or_else(|| u.strip_prefix("https://"))
        .ok_or_else(|| format!("{u:?} must start with http:// or https://"))?;
    if rest.is_empty() || rest.starts_with('/') {
        return Err(format!("{u:?} has no host"));
    }
    Ok(())
}
