//! `sonde plugin new`: writes a ready-to-build plugin in Rust, Python or
//! JavaScript. The templates live in `templates/<lang>/` and are compiled
//! into the binary; every one does the same small job (count what the hooks
//! receive, answer `GET /hello` with it) and carries a test and a README
//! that states the one command building its `.wasm`.
//!
//! Each plugin gets a copy of the contract (`wit/sonde-plugin.wit`) that the
//! Python and JavaScript toolchains build against, and a Rust plugin a copy of
//! the SDK that holds it (`sdk.rs`), so the folder builds on its own, with no
//! sonde checkout anywhere.

use std::fmt;
use std::path::PathBuf;

/// The contract, as this sonde speaks it.
const CONTRACT: &str = include_str!("../../../wit/sonde-plugin.wit");

/// A guest language `sonde plugin new` has a template for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lang {
    Rust,
    Python,
    Js,
}

impl std::str::FromStr for Lang {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "rust" => Ok(Lang::Rust),
            "python" | "py" => Ok(Lang::Python),
            "js" | "javascript" => Ok(Lang::Js),
            other => Err(format!("unknown language {other:?}: expected rust, python or js")),
        }
    }
}

impl fmt::Display for Lang {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Lang::Rust => "rust",
            Lang::Python => "python",
            Lang::Js => "js",
        })
    }
}

impl Lang {
    /// (path in the new plugin, template text) for every file but the contract.
    fn files(self) -> &'static [(&'static str, &'static str)] {
        match self {
            Lang::Rust => &[
                ("Cargo.toml", include_str!("templates/rust/Cargo.toml")),
                ("src/lib.rs", include_str!("templates/rust/lib.rs")),
                ("README.md", include_str!("templates/rust/README.md")),
            ],
            Lang::Python => &[
                ("app.py", include_str!("templates/python/app.py")),
                ("counts.py", include_str!("templates/python/counts.py")),
                ("test_counts.py", include_str!("templates/python/test_counts.py")),
                ("README.md", include_str!("templates/python/README.md")),
            ],
            Lang::Js => &[
                ("app.js", include_str!("templates/js/app.js")),
                ("app.test.mjs", include_str!("templates/js/app.test.mjs")),
                ("package.json", include_str!("templates/js/package.json")),
                ("README.md", include_str!("templates/js/README.md")),
            ],
        }
    }
}

/// What to write.
#[derive(Clone, Debug)]
pub struct NewPlugin {
    /// The plugin's name: its `.wasm` file name and its route prefix.
    pub name: String,
    pub lang: Lang,
    /// The folder to create; it must not exist yet.
    pub dir: PathBuf,
    /// The SDK a Rust plugin depends on by path (`plugins/sdk` of a sonde
    /// checkout); none: the copy this binary carries, written into the plugin.
    pub sdk: Option<PathBuf>,
}

/// A plugin name sonde can load: `[a-z][a-z0-9_-]*`, at most 64 bytes (it
/// becomes a file name, a URL segment and, for Rust, a crate name).
pub fn check_name(name: &str) -> Result<(), String> {
    let mut chars = name.chars();
    let first_ok = chars.next().is_some_and(|c| c.is_ascii_lowercase());
    let rest_ok = chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '_');
    if first_ok && rest_ok && name.len() <= 64 {
        Ok(())
    } else {
        Err(format!(
            "invalid plugin name {name:?}: use a lowercase letter then lowercase letters, digits, '-' or '_' (at most 64)"
        ))
    }
}

/// Writes the plugin; returns the files written, relative to `dir`.
pub fn write(p: &NewPlugin) -> Result<Vec<PathBuf>, String> {
    check_name(&p.name)?;
    if p.dir.exists() {
        return Err(format!("{} already exists; pick another --dir", p.dir.display()));
    }
    let sdk = match (p.lang, &p.sdk) {
        (Lang::Rust, Some(s)) => s
            .canonicalize()
            .map_err(|e| format!("--sdk {}: {e}", s.display()))?
            .display()
            .to_string(),
        (Lang::Rust, None) => super::sdk::FOLDER.to_string(),
        _ => String::new(),
    };
    let fill = |t: &str| {
        t.replace("{{name}}", &p.name)
            .replace("{{crate}}", &p.name.replace('-', "_"))
            .replace("{{sdk}}", &sdk)
    };
    let mut files: Vec<(PathBuf, String)> = p.lang.files().iter().map(|(rel, t)| (rel.into(), fill(t))).collect();
    if p.lang != Lang::Rust {
        files.push(("wit/sonde-plugin.wit".into(), CONTRACT.to_string()));
    }
    for (rel, text) in &files {
        let path = p.dir.join(rel);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).map_err(|e| format!("{}: {e}", parent.display()))?;
        }
        std::fs::write(&path, text).map_err(|e| format!("{}: {e}", path.display()))?;
    }
    let mut written: Vec<PathBuf> = files.into_iter().map(|(rel, _)| rel).collect();
    if p.lang == Lang::Rust && p.sdk.is_none() {
        written.extend(super::sdk::write_beside(&p.dir)?);
    }
    Ok(written)
}

/// The command that builds the plugin's `.wasm`, as its README states it.
pub fn build_command(lang: Lang, name: &str) -> String {
    match lang {
        Lang::Rust => "cargo build --release --target wasm32-wasip2".into(),
        Lang::Python => format!("componentize-py -d wit -w plugin componentize app -o {name}.wasm"),
        Lang::Js => "npm install && npm run build".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    #[test]
    fn names_that_cannot_be_a_file_or_a_route_are_refused() {
        for bad in ["", "Demo", "1x", "a/b", "a.b", "a b", &"x".repeat(65)] {
            assert!(check_name(bad).is_err(), "{bad:?}");
        }
        for good in ["demo", "step-watch", "x_2"] {
            check_name(good).unwrap();
        }
    }

    #[test]
    fn every_template_is_filled_and_its_readme_states_the_build_command() {
        let tmp = std::env::temp_dir().join(format!("sonde-kit-{}", std::process::id()));
        for lang in [Lang::Rust, Lang::Python, Lang::Js] {
            let dir = tmp.join(lang.to_string());
            let p = NewPlugin {
                name: "my-demo".into(),
                lang,
                dir: dir.clone(),
                sdk: Some(Path::new(env!("CARGO_MANIFEST_DIR")).join("../plugins/sdk")),
            };
            let files = write(&p).unwrap();
            for f in files.iter().filter(|f| !f.starts_with(super::super::sdk::FOLDER)) {
                let text = std::fs::read_to_string(dir.join(f)).unwrap();
                assert!(!text.contains("{{"), "{lang} {}: a placeholder is left", f.display());
            }
            let readme = std::fs::read_to_string(dir.join("README.md")).unwrap();
            assert!(readme.contains(&build_command(lang, "my-demo")), "{lang}");
            assert!(readme.contains("/api/plugins/my-demo/hello"), "{lang}");
            // A second run never overwrites a plugin.
            assert!(write(&p).unwrap_err().contains("already exists"));
        }
        std::fs::remove_dir_all(&tmp).unwrap();
    }

    #[test]
    fn a_rust_plugin_without_sdk_gets_the_carried_copy_beside_it() {
        let tmp = std::env::temp_dir().join(format!("sonde-kit-sdk-{}", std::process::id()));
        let p = NewPlugin {
            name: "demo".into(),
            lang: Lang::Rust,
            dir: tmp.join("demo"),
            sdk: None,
        };
        let files = write(&p).unwrap();
        let manifest = std::fs::read_to_string(p.dir.join("Cargo.toml")).unwrap();
        assert!(
            manifest.contains(r#"sonde-plugin-sdk = { path = "sonde-plugin-sdk" }"#),
            "{manifest}"
        );
        assert!(
            !manifest.contains(env!("CARGO_MANIFEST_DIR")),
            "a path into this checkout: {manifest}"
        );
        for f in [
            "sonde-plugin-sdk/Cargo.toml",
            "sonde-plugin-sdk/src/lib.rs",
            "sonde-plugin-sdk/wit/sonde-plugin.wit",
            "Cargo.lock",
        ] {
            assert!(files.contains(&PathBuf::from(f)), "{f} not listed: {files:?}");
            assert!(p.dir.join(f).is_file(), "{f} not written");
        }
        std::fs::remove_dir_all(&tmp).unwrap();
    }

    #[test]
    fn the_js_template_and_example_pin_the_toolchain_the_tests_install() {
        let pins = |json: &str| -> serde_json::Value {
            let v: serde_json::Value = serde_json::from_str(json).unwrap();
            v["devDependencies"].clone()
        };
        let template = pins(&include_str!("templates/js/package.json").replace("{{name}}", "x"));
        let tests = pins(include_str!("../../../tests/guest-js/package.json"));
        assert!(template["@bytecodealliance/componentize-js"].is_string());
        assert_eq!(
            template, tests,
            "templates/js/package.json and tests/guest-js/package.json must pin the same toolchain"
        );
        let example = pins(include_str!(
            "../../../plugins/examples/serving-limiter/js/package.json"
        ));
        assert_eq!(
            example, tests,
            "plugins/examples/serving-limiter/js/package.json and tests/guest-js/package.json must pin the same toolchain"
        );
    }
}
