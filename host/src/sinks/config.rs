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
    /// `dir` and of any default the plugin gives: taken from an environment
    /// variable when it is set and not blank, else from the entry's `dir`.
    /// Empty by default.
    pub plugins: BTreeMap<String, PluginSinkDir>,
}

impl Default for SinksConfig {
    fn default() -> Self {
        Self {
            dir: PathBuf::from("sonde-data/sinks"),
            plugins: BTreeMap::new(),
        }
    }
}

/// Where one plugin's sinks go instead of `sinks.dir`.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct PluginSinkDir {
    /// Environment variable naming the directory; "" = none. Read when a sink opens.
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
