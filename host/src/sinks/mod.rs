//! sinks/: named files the host writes for plugins (TSV logs, a profile in
//! folded-stack form). Plugins never see a path: they name a file, and the
//! host writes it in the plugin's sink directory.
//!
//! The directory must already exist; sonde does not create it, so a typo in
//! the config never scatters files, and a directory that is missing or not
//! writable makes `open` fail with that reason and writes nothing.
//!
//! Which directory, first that applies ([`resolve`]):
//! 1. `[sinks.plugins.<plugin>]` in the config ([`PluginSinkDir`](config::PluginSinkDir)):
//!    its environment variable when set and not blank, else its `dir`;
//! 2. the default the plugin gives with the sink ([`DefaultDir`], the WIT
//!    `sink-spec.default-dir`): its variable when set and not blank, else
//!    its directory, when it names one;
//! 3. `sinks.dir`.
//!
//! So a plugin standing in for a system whose users expect its files where
//! that system wrote them (with the variable it read) says so itself, and
//! the host names no plugin. Which directory a plugin's sinks went to, and
//! why not when they could not open, shows in its status and sonde's banner.

pub mod config;

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

use thiserror::Error;

use self::config::SinksConfig;

/// A plugin's sink directory and where that choice came from.
#[derive(Clone, Debug, PartialEq)]
pub struct ResolvedDir {
    pub path: PathBuf,
    /// "sinks.dir", "SERVING_LOG_DIR", "the plugin's default (SERVING_LOG_DIR unset)", ...
    pub source: String,
}

/// The directory a plugin gives as the default for one of its sinks.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct DefaultDir {
    /// An environment variable naming the directory; "" = none.
    pub env: String,
    /// The directory when the variable is unset or blank; empty = `sinks.dir`.
    pub dir: PathBuf,
}

impl DefaultDir {
    /// Checks what a plugin gave: a variable name of `[A-Z0-9_]`, an absolute directory.
    pub fn new(env: String, dir: String) -> Result<DefaultDir, SinkError> {
        if !env
            .chars()
            .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_')
            || env.len() > 128
        {
            return Err(SinkError::BadDefault(format!(
                "default-dir.env {env:?}: use at most 128 of [A-Z0-9_]"
            )));
        }
        let dir = PathBuf::from(dir);
        if !dir.as_os_str().is_empty() && !dir.is_absolute() {
            return Err(SinkError::BadDefault(format!(
                "default-dir.dir {}: must be an absolute path (or empty for sinks.dir)",
                dir.display()
            )));
        }
        Ok(DefaultDir { env, dir })
    }
}

/// A variable's value when it is set and not blank.
fn var(env: &impl Fn(&str) -> Option<String>, name: &str) -> Option<String> {
    if name.is_empty() {
        return None;
    }
    env(name).map(|v| v.trim().to_string()).filter(|v| !v.is_empty())
}

/// The directory `plugin`'s sink goes to, given the default the plugin gave
/// with it; `env` reads a variable.
pub fn resolve(
    cfg: &SinksConfig,
    plugin: &str,
    default: Option<&DefaultDir>,
    env: impl Fn(&str) -> Option<String>,
) -> ResolvedDir {
    let unset = |name: &str| match name.is_empty() {
        true => String::new(),
        false => format!(" ({name} unset)"),
    };
    if let Some(p) = cfg.plugins.get(plugin) {
        if let Some(v) = var(&env, &p.env) {
            return ResolvedDir {
                path: PathBuf::from(v),
                source: p.env.clone(),
            };
        }
        return ResolvedDir {
            path: p.dir.clone(),
            source: format!("sinks.plugins.{plugin}.dir{}", unset(&p.env)),
        };
    }
    if let Some(d) = default {
        if let Some(v) = var(&env, &d.env) {
            return ResolvedDir {
                path: PathBuf::from(v),
                source: d.env.clone(),
            };
        }
        if !d.dir.as_os_str().is_empty() {
            return ResolvedDir {
                path: d.dir.clone(),
                source: format!("the plugin's default{}", unset(&d.env)),
            };
        }
    }
    ResolvedDir {
        path: cfg.dir.clone(),
        source: "sinks.dir".into(),
    }
}

/// Whether files can be written in `dir`: it must exist (never created) and
/// take a file. The probe file is removed.
pub fn probe(dir: &Path) -> Result<(), SinkError> {
    if !dir.is_dir() {
        return Err(SinkError::NoDir(dir.to_path_buf()));
    }
    let probe = dir.join(format!(".sonde-probe-{}", std::process::id()));
    File::create(&probe).map_err(|e| SinkError::Io {
        path: dir.to_path_buf(),
        reason: format!("not writable: {e}"),
    })?;
    let _ = std::fs::remove_file(&probe);
    Ok(())
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SinkFormat {
    Tsv,
    Csv,
    Raw,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SinkMode {
    Append,
    Replace,
}

/// A column of rows, as the WIT `column` variant.
#[derive(Clone, Debug, PartialEq)]
pub enum Column {
    U64(Vec<u64>),
    S64(Vec<i64>),
    F64(Vec<f64>),
    Str(Vec<String>),
}

impl Column {
    fn len(&self) -> usize {
        match self {
            Column::U64(v) => v.len(),
            Column::S64(v) => v.len(),
            Column::F64(v) => v.len(),
            Column::Str(v) => v.len(),
        }
    }
}

#[derive(Debug, Error, PartialEq)]
pub enum SinkError {
    #[error("{0}")]
    BadDefault(String),
    #[error("sink name {0:?} is invalid: use 1-128 of [A-Za-z0-9._-], not starting with '.'")]
    BadName(String),
    #[error("sink directory {0} does not exist; sonde does not create it")]
    NoDir(PathBuf),
    #[error("cannot write {path}: {reason}")]
    Io { path: PathBuf, reason: String },
    #[error("{0}")]
    BadRows(String),
}

/// One open sink.
pub struct Sink {
    path: PathBuf,
    format: SinkFormat,
    mode: SinkMode,
    columns: Vec<String>,
    file: Option<File>,
    /// Reused formatting buffer: rows are formatted here, then written in one call.
    buf: Vec<u8>,
    pub rows_written: u64,
}

impl Sink {
    /// Opens (creating if needed) `dir/name`. In append mode a new (empty)
    /// file gets the header row first.
    pub fn open(
        dir: &Path,
        name: &str,
        format: SinkFormat,
        mode: SinkMode,
        columns: Vec<String>,
    ) -> Result<Sink, SinkError> {
        check_name(name)?;
        if !dir.is_dir() {
            return Err(SinkError::NoDir(dir.to_path_buf()));
        }
        let path = dir.join(name);
        let io = |e: std::io::Error| SinkError::Io {
            path: path.clone(),
            reason: e.to_string(),
        };
        let mut sink = Sink {
            path: path.clone(),
            format,
            mode,
            columns,
            file: None,
            buf: Vec::new(),
            rows_written: 0,
        };
        match mode {
            SinkMode::Append => {
                let mut f = OpenOptions::new().create(true).append(true).open(&path).map_err(io)?;
                let empty = f.metadata().map_err(io)?.len() == 0;
                if empty && format != SinkFormat::Raw && !sink.columns.is_empty() {
                    sink.buf.clear();
                    sink.write_header();
                    f.write_all(&sink.buf).map_err(io)?;
                }
                sink.file = Some(f);
            }
            SinkMode::Replace => {
                // Check now that the directory is writable, so the plugin learns at open time.
                let probe = dir.join(format!(".{name}.probe"));
                File::create(&probe).map_err(io)?;
                let _ = std::fs::remove_file(&probe);
            }
        }
        Ok(sink)
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Formats and writes rows given as columns of equal length.
    pub fn write_rows(&mut self, columns: &[Column]) -> Result<(), SinkError> {
        if self.format == SinkFormat::Raw {
            return Err(SinkError::BadRows("this sink is raw: use write-bytes".into()));
        }
        let n = columns.first().map(Column::len).unwrap_or(0);
        if columns.iter().any(|c| c.len() != n) {
            let lens: Vec<usize> = columns.iter().map(Column::len).collect();
            return Err(SinkError::BadRows(format!("columns have different lengths {lens:?}")));
        }
        if !self.columns.is_empty() && columns.len() != self.columns.len() {
            return Err(SinkError::BadRows(format!(
                "{} columns given, the sink has {} ({})",
                columns.len(),
                self.columns.len(),
                self.columns.join(", ")
            )));
        }
        self.buf.clear();
        if self.mode == SinkMode::Replace && !self.columns.is_empty() {
            self.write_header();
        }
        let sep = if self.format == SinkFormat::Tsv { b'\t' } else { b',' };
        for row in 0..n {
            for (i, col) in columns.iter().enumerate() {
                if i > 0 {
                    self.buf.push(sep);
                }
                format_cell(&mut self.buf, col, row, self.format);
            }
            self.buf.push(b'\n');
        }
        let buf = std::mem::take(&mut self.buf);
        let r = self.write_out(&buf);
        self.buf = buf;
        r?;
        self.rows_written += n as u64;
        Ok(())
    }

    /// Writes bytes as given (raw sinks).
    pub fn write_bytes(&mut self, data: &[u8]) -> Result<(), SinkError> {
        if self.format != SinkFormat::Raw {
            return Err(SinkError::BadRows("this sink is tsv/csv: use write-rows".into()));
        }
        self.write_out(data)
    }

    fn write_header(&mut self) {
        let sep = if self.format == SinkFormat::Tsv { "\t" } else { "," };
        self.buf.extend_from_slice(self.columns.join(sep).as_bytes());
        self.buf.push(b'\n');
    }

    fn write_out(&mut self, data: &[u8]) -> Result<(), SinkError> {
        let io = |e: std::io::Error, p: &Path| SinkError::Io {
            path: p.to_path_buf(),
            reason: e.to_string(),
        };
        match self.mode {
            // One write call per batch of rows: O_APPEND keeps each batch whole.
            SinkMode::Append => self
                .file
                .as_mut()
                .expect("append sinks hold their file")
                .write_all(data)
                .map_err(|e| io(e, &self.path)),
            SinkMode::Replace => {
                let tmp = self.path.with_file_name(format!(
                    ".{}.tmp",
                    self.path.file_name().and_then(|n| n.to_str()).unwrap_or("sink")
                ));
                std::fs::write(&tmp, data).map_err(|e| io(e, &tmp))?;
                std::fs::rename(&tmp, &self.path).map_err(|e| io(e, &self.path))
            }
        }
    }
}

fn format_cell(buf: &mut Vec<u8>, col: &Column, row: usize, format: SinkFormat) {
    use std::io::Write as _;
    match col {
        Column::U64(v) => {
            let _ = write!(buf, "{}", v[row]);
        }
        Column::S64(v) => {
            let _ = write!(buf, "{}", v[row]);
        }
        // Rust's shortest round-trip form: 0.5, 3, 1e-7 prints as 0.0000001.
        Column::F64(v) => {
            let _ = write!(buf, "{}", v[row]);
        }
        Column::Str(v) => {
            let s = &v[row];
            match format {
                SinkFormat::Csv if s.contains([',', '"', '\n', '\r']) => {
                    buf.push(b'"');
                    buf.extend_from_slice(s.replace('"', "\"\"").as_bytes());
                    buf.push(b'"');
                }
                // TSV has no quoting: tabs and newlines inside a cell would break rows.
                SinkFormat::Tsv => buf.extend_from_slice(s.replace(['\t', '\n', '\r'], " ").as_bytes()),
                _ => buf.extend_from_slice(s.as_bytes()),
            }
        }
    }
}

fn check_name(name: &str) -> Result<(), SinkError> {
    let ok = !name.is_empty()
        && name.len() <= 128
        && !name.starts_with('.')
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'));
    if ok {
        Ok(())
    } else {
        Err(SinkError::BadName(name.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tsv_append_writes_header_once() {
        let dir = tempfile::tempdir().unwrap();
        let cols = vec!["t".to_string(), "id".into(), "x".into(), "name".into()];
        let rows = [
            Column::U64(vec![1, 2]),
            Column::S64(vec![-1, 0]),
            Column::F64(vec![0.5, 3.0]),
            Column::Str(vec!["a\tb".into(), "c".into()]),
        ];
        let mut s = Sink::open(dir.path(), "log.tsv", SinkFormat::Tsv, SinkMode::Append, cols.clone()).unwrap();
        s.write_rows(&rows).unwrap();
        drop(s);
        let mut s = Sink::open(dir.path(), "log.tsv", SinkFormat::Tsv, SinkMode::Append, cols).unwrap();
        s.write_rows(&rows[..]).unwrap();
        let text = std::fs::read_to_string(dir.path().join("log.tsv")).unwrap();
        assert_eq!(
            text,
            "t\tid\tx\tname\n1\t-1\t0.5\ta b\n2\t0\t3\tc\n1\t-1\t0.5\ta b\n2\t0\t3\tc\n"
        );
    }

    #[test]
    fn csv_quotes_and_replace_mode() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = Sink::open(
            dir.path(),
            "p.csv",
            SinkFormat::Csv,
            SinkMode::Replace,
            vec!["a".into()],
        )
        .unwrap();
        s.write_rows(&[Column::Str(vec!["x,\"y\"".into()])]).unwrap();
        s.write_rows(&[Column::Str(vec!["z".into()])]).unwrap();
        assert_eq!(std::fs::read_to_string(dir.path().join("p.csv")).unwrap(), "a\nz\n");
        let mut s = Sink::open(dir.path(), "q.csv", SinkFormat::Csv, SinkMode::Append, vec!["a".into()]).unwrap();
        s.write_rows(&[Column::Str(vec!["x,\"y\"".into()])]).unwrap();
        assert_eq!(
            std::fs::read_to_string(dir.path().join("q.csv")).unwrap(),
            "a\n\"x,\"\"y\"\"\"\n"
        );
    }

    #[test]
    fn raw_replace_is_whole_file() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = Sink::open(dir.path(), "prof.folded", SinkFormat::Raw, SinkMode::Replace, vec![]).unwrap();
        s.write_bytes(b"main;f 3\n").unwrap();
        s.write_bytes(b"main;g 5\n").unwrap();
        assert_eq!(
            std::fs::read_to_string(dir.path().join("prof.folded")).unwrap(),
            "main;g 5\n"
        );
        assert!(s.write_rows(&[]).is_err());
    }

    #[test]
    fn the_config_then_the_plugins_default_then_sinks_dir() {
        let mut cfg = SinksConfig::default();
        let default = DefaultDir::new("SERVING_LOG_DIR".into(), "/local".into()).unwrap();
        let none = |_: &str| None;
        let r = resolve(&cfg, "serving", Some(&default), none);
        assert_eq!(r.path, PathBuf::from("/local"), "the plugin's default");
        assert_eq!(r.source, "the plugin's default (SERVING_LOG_DIR unset)");
        let blank = |_: &str| Some("  ".to_string());
        assert_eq!(
            resolve(&cfg, "serving", Some(&default), blank).path,
            PathBuf::from("/local"),
            "blank is unset"
        );
        let set = |k: &str| (k == "SERVING_LOG_DIR").then(|| "/tmp/cw".to_string());
        let r = resolve(&cfg, "serving", Some(&default), set);
        assert_eq!(
            (r.path, r.source.as_str()),
            (PathBuf::from("/tmp/cw"), "SERVING_LOG_DIR")
        );
        let r = resolve(&cfg, "other", None, set);
        assert_eq!(
            (r.path, r.source.as_str()),
            (cfg.dir.clone(), "sinks.dir"),
            "no default given"
        );
        let env_only = DefaultDir::new("SERVING_LOG_DIR".into(), String::new()).unwrap();
        assert_eq!(resolve(&cfg, "serving", Some(&env_only), none).source, "sinks.dir");
        // The config's entry wins over whatever the plugin says.
        cfg.plugins.insert(
            "serving".into(),
            config::PluginSinkDir {
                env: String::new(),
                dir: PathBuf::from("/srv/logs"),
            },
        );
        let r = resolve(&cfg, "serving", Some(&default), set);
        assert_eq!(
            (r.path, r.source.as_str()),
            (PathBuf::from("/srv/logs"), "sinks.plugins.serving.dir")
        );
        assert!(SinksConfig::default().plugins.is_empty(), "the config names no plugin");
    }

    #[test]
    fn a_plugins_default_must_be_a_variable_name_and_an_absolute_directory() {
        for (env, dir, want) in [
            ("lower", "", "default-dir.env"),
            ("A B", "", "default-dir.env"),
            ("OK", "relative/dir", "absolute"),
        ] {
            let e = DefaultDir::new(env.into(), dir.into()).unwrap_err().to_string();
            assert!(e.contains(want), "{e}");
        }
        assert!(DefaultDir::new(String::new(), String::new()).is_ok());
    }

    #[test]
    fn a_missing_directory_or_a_file_in_its_place_fails_the_probe_and_writes_nothing() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(probe(dir.path()), Ok(()));
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0, "the probe cleans up");
        let missing = dir.path().join("missing");
        assert_eq!(probe(&missing), Err(SinkError::NoDir(missing.clone())));
        assert!(!missing.exists(), "never created");
        let file = dir.path().join("file");
        std::fs::write(&file, "x").unwrap();
        assert!(probe(&file).is_err());
        assert!(
            Sink::open(
                &missing,
                "request_log.tsv",
                SinkFormat::Tsv,
                SinkMode::Append,
                vec!["t".into()]
            )
            .is_err()
        );
        assert!(!missing.exists());
    }

    #[test]
    fn bad_input_is_refused_with_reason() {
        let dir = tempfile::tempdir().unwrap();
        for bad in ["", "../x", "a/b", ".hidden", "x y"] {
            assert!(
                matches!(
                    Sink::open(dir.path(), bad, SinkFormat::Tsv, SinkMode::Append, vec![]),
                    Err(SinkError::BadName(_))
                ),
                "{bad}"
            );
        }
        let missing = dir.path().join("nope");
        assert_eq!(
            Sink::open(&missing, "a.tsv", SinkFormat::Tsv, SinkMode::Append, vec![]).err(),
            Some(SinkError::NoDir(missing.clone()))
        );
        assert!(!missing.exists(), "never creates the directory");
        let mut s = Sink::open(
            dir.path(),
            "a.tsv",
            SinkFormat::Tsv,
            SinkMode::Append,
            vec!["a".into(), "b".into()],
        )
        .unwrap();
        let e = s
            .write_rows(&[Column::U64(vec![1]), Column::U64(vec![1, 2])])
            .unwrap_err();
        assert!(e.to_string().contains("different lengths"), "{e}");
        let e = s.write_rows(&[Column::U64(vec![1])]).unwrap_err();
        assert!(e.to_string().contains("1 columns given"), "{e}");
    }
}
