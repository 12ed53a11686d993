//! Setup shared by the plugin runtime tests (each test file is its own crate
//! and includes this with `mod common;`).

use std::path::{Path, PathBuf};

use sonde::config::Config;

pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
}

/// A compiled component from target/plugins/ (built by scripts/build-plugins.sh).
pub fn component(rel: &str) -> Vec<u8> {
    let p = repo().join("target/plugins").join(rel);
    std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}; run scripts/build-plugins.sh first", p.display()))
}

/// A config whose data, plugins and sinks directories live in `tmp` (sinks
/// created), sharing compiled code between tests: compiling a component in a
/// debug build takes a while.
pub fn config_in(tmp: &Path) -> Config {
    let data = tmp.join("data");
    std::fs::create_dir_all(&data).unwrap();
    let shared_cache = repo().join("target/test-plugin-cache");
    std::fs::create_dir_all(&shared_cache).unwrap();
    std::os::unix::fs::symlink(&shared_cache, data.join("cache")).unwrap();
    let mut cfg = Config::default();
    cfg.host.data_dir = data;
    cfg.plugins.dir = Some(tmp.join("plugins"));
    cfg.sinks.dir = tmp.join("sinks");
    std::fs::create_dir_all(&cfg.sinks.dir).unwrap();
    cfg
}
