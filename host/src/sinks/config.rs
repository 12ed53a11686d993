//! `[sinks]`: where plugins' named files are written. Beside the sinks it
//! configures (this also keeps `crate::config` from importing `sinks/mod.rs`
//! while `sinks` reads this section); `crate::config` assembles the sections.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct SinksConfig {
    /// Directory for plugins' named file sinks. It must exist (sonde does not
    /// create it, so a typo never scatters files); when it does not, or is not
    /// writable, sinks fail with that reason and no file is written.
    pub dir: PathBuf,
    /// Per-plugin sink directories (`[sinks.plugins.<name>]`), instead of
    /// `dir`: taken from an environment variable when it is set and not
    /// blank, else from the entry's `dir`. Built in: `clockwork` follows
    /// Clockwork's `CLOCKWORK_LOG_DIR`, default `/local` (see `crate::sinks`).
    pub plugins: BTreeMap<String, PluginSinkDir>,
}

// The one place the host names a plugin. `./dev run` starts sonde without a
// config file and Clockwork's users expect its logs where Clockwork writes
// them, so this entry cannot move to an example config without changing what
// they get; a generic rule (`<NAME>_LOG_DIR` for every plugin) would change
// where other plugins' sinks go. Plugins declaring their own sink directory
// through the WIT would lift it out; until then it stays here, in one place.
impl Default for SinksConfig {
    fn default() -> Self {
        Self {
            dir: PathBuf::from("sonde-data/sinks"),
            plugins: BTreeMap::from([("clockwork".to_string(), PluginSinkDir::clockwork())]),
        }
    }
}

/// Where one plugin's sinks go instead of `sinks.dir`.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct PluginSinkDir {
    /// Environment variable naming the directory; "" = none. Read at start.
    pub env: String,
    /// The directory when the variable is unset or blank.
    pub dir: PathBuf,
}

impl Default for PluginSinkDir {
    fn default() -> Self {
        PluginSinkDir {
            env: String::new(),
            dir: PathBuf::from("sonde-data/sinks"),
        }
    }
}

impl PluginSinkDir {
    /// Clockwork's controller: `$CLOCKWORK_LOG_DIR`, or `/local`.
    pub fn clockwork() -> Self {
        PluginSinkDir {
            env: "CLOCKWORK_LOG_DIR".into(),
            dir: PathBuf::from("/local"),
        }
    }
}
