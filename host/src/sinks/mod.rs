//! sinks/: named files the host writes for plugins (Clockwork's TSV logs, a
//! profile in folded-stack form). Plugins never see a path: they name a file,
//! and the host writes it in the configured sink directory.
//!
//! The directory must already exist; sonde does not create it, so a typo in
//! the config never scatters files, and a directory that is missing or not
//! writable makes `open` fail with that reason and writes nothing.
//!
//! Which directory: `sinks.dir`, unless `sinks.plugins.<plugin>` names one
//! for that plugin ([`PluginSinkDir`](config::PluginSinkDir)): its environment variable when set and
//! not blank, else its `dir`. The built-in entry gives the `clockwork` plugin
//! Clockwork's own rules: `CLOCKWORK_LOG_DIR`, else `/local`; the directory
//! must exist; where it does not or is not writable, no telemetry file is
//! written (the plugin's `open-sink` fails with the reason, and the banner
//! says so at start, next to the location).

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
    /// "sinks.dir", "CLOCKWORK_LOG_DIR", "sinks.plugins.clockwork.dir (CLOCKWORK_LOG_DIR unset)".
    pub source: String,
}

/// The directory `plugin`'s sinks are written to; `env` reads a variable.
pub fn resolve(cfg: &SinksConfig, plugin: &str, env: impl Fn(&str) -> Option<String>) -> ResolvedDir {
    let Some(p) = cfg.plugins.get(plugin) else {
        return ResolvedDir {
            path: cfg.dir.clone(),
            source: "sinks.dir".into(),
        };
    };
    if !p.env.is_empty()
        && let Some(v) = env(&p.env).filter(|v| !v.trim().is_empty())
    {
        return ResolvedDir {
            path: PathBuf::from(v.trim()),
            source: p.env.clone(),
        };
    }
    let unset = if p.env.is_empty() {
        String::new()
    } else {
        format!(" ({} unset)", p.env)
    };
    ResolvedDir {
        path: p.dir.clone(),
        source: format!("sinks.plugins.{plugin}.dir{unset}"),
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
    #[error("sink name {0:?} is invalid: use 1-128 of [A-Za-z0-9._-], not starting with '.'")]
    BadName(String),
    #[error("sink directory {0} does not exist (sonde does not create it)")]
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
    fn clockwork_sinks_follow_clockwork_log_dir_then_local() {
        let cfg = SinksConfig::default();
        let none = |_: &str| None;
        let r = resolve(&cfg, "clockwork", none);
        assert_eq!(r.path, PathBuf::from("/local"), "Clockwork's default");
        assert!(r.source.contains("CLOCKWORK_LOG_DIR unset"), "{}", r.source);
        let blank = |_: &str| Some("  ".to_string());
        assert_eq!(
            resolve(&cfg, "clockwork", blank).path,
            PathBuf::from("/local"),
            "blank is unset"
        );
        let set = |k: &str| (k == "CLOCKWORK_LOG_DIR").then(|| "/tmp/cw".to_string());
        let r = resolve(&cfg, "clockwork", set);
        assert_eq!(
            (r.path, r.source.as_str()),
            (PathBuf::from("/tmp/cw"), "CLOCKWORK_LOG_DIR")
        );
        let r = resolve(&cfg, "determined", set);
        assert_eq!(
            (r.path, r.source.as_str()),
            (cfg.dir.clone(), "sinks.dir"),
            "other plugins"
        );
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
                "clockwork_request_log.tsv",
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
