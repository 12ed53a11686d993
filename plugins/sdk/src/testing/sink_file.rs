//! One file sink of the fake host, rendered to text by the rules the real
//! host's sinks follow (`host/src/sinks/mod.rs`): a tsv/csv append sink gets
//! its header once, when the file is new; a replace sink is rewritten whole by
//! every write (header included); floats print in Rust's shortest round-trip
//! form; TSV cells lose tabs and newlines; CSV cells are quoted per RFC 4180.

use crate::types::{Column, SinkFormat, SinkMode, SinkSpec};

/// The most sinks one plugin may hold open (the real host's limit).
pub const MAX_SINKS: usize = 64;

/// Refuses a sink name the real host would refuse.
pub fn check_name(name: &str) -> Result<(), String> {
    let ok = !name.is_empty()
        && name.len() <= 128
        && !name.starts_with('.')
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'));
    if ok {
        Ok(())
    } else {
        Err(format!(
            "sink name {name:?} is invalid: use 1-128 of [A-Za-z0-9._-], not starting with '.'"
        ))
    }
}

/// A default directory the host accepts: a variable name of `[A-Z0-9_]`, an
/// absolute path (or none). The fake writes no file, so the directory is not
/// looked at.
pub fn check_default_dir(spec: &SinkSpec) -> Result<(), String> {
    let Some(d) = &spec.default_dir else { return Ok(()) };
    if d.env.len() > 128
        || !d
            .env
            .chars()
            .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_')
    {
        return Err(format!("default-dir.env {:?}: use at most 128 of [A-Z0-9_]", d.env));
    }
    if !d.dir.is_empty() && !d.dir.starts_with('/') {
        return Err(format!(
            "default-dir.dir {}: must be an absolute path (or empty for sinks.dir)",
            d.dir
        ));
    }
    Ok(())
}

/// The text an append sink starts with when its file is new.
pub fn header_on_open(spec: &SinkSpec) -> String {
    if spec.mode == SinkMode::Append && spec.format != SinkFormat::Raw && !spec.columns.is_empty() {
        header(spec)
    } else {
        String::new()
    }
}

/// Applies `write-rows` to `file`, as the real host does.
pub fn write_rows(spec: &SinkSpec, file: &mut String, columns: &[Column]) -> Result<(), String> {
    if spec.format == SinkFormat::Raw {
        return Err("this sink is raw: use write-bytes".into());
    }
    let n = columns.first().map(len).unwrap_or(0);
    if columns.iter().any(|c| len(c) != n) {
        let lens: Vec<usize> = columns.iter().map(len).collect();
        return Err(format!("columns have different lengths {lens:?}"));
    }
    if !spec.columns.is_empty() && columns.len() != spec.columns.len() {
        return Err(format!(
            "{} columns given, the sink has {} ({})",
            columns.len(),
            spec.columns.len(),
            spec.columns.join(", ")
        ));
    }
    let mut text = String::new();
    if spec.mode == SinkMode::Replace && !spec.columns.is_empty() {
        text = header(spec);
    }
    let sep = separator(spec.format);
    for row in 0..n {
        let cells: Vec<String> = columns.iter().map(|c| cell(c, row, spec.format)).collect();
        text.push_str(&cells.join(sep));
        text.push('\n');
    }
    land(spec, file, &text);
    Ok(())
}

/// Applies `write-bytes` to `file`, as the real host does. Bytes that are not
/// UTF-8 are kept lossily: the fake holds text so tests can read it.
pub fn write_bytes(spec: &SinkSpec, file: &mut String, data: &[u8]) -> Result<(), String> {
    if spec.format != SinkFormat::Raw {
        return Err("this sink is tsv/csv: use write-rows".into());
    }
    land(spec, file, &String::from_utf8_lossy(data));
    Ok(())
}

fn land(spec: &SinkSpec, file: &mut String, text: &str) {
    match spec.mode {
        SinkMode::Append => file.push_str(text),
        SinkMode::Replace => *file = text.to_string(),
    }
}

fn header(spec: &SinkSpec) -> String {
    spec.columns.join(separator(spec.format)) + "\n"
}

fn separator(format: SinkFormat) -> &'static str {
    if format == SinkFormat::Tsv { "\t" } else { "," }
}

fn len(c: &Column) -> usize {
    match c {
        Column::U64s(v) => v.len(),
        Column::S64s(v) => v.len(),
        Column::F64s(v) => v.len(),
        Column::Strings(v) => v.len(),
    }
}

fn cell(c: &Column, row: usize, format: SinkFormat) -> String {
    match c {
        Column::U64s(v) => v[row].to_string(),
        Column::S64s(v) => v[row].to_string(),
        Column::F64s(v) => v[row].to_string(),
        Column::Strings(v) => {
            let s = &v[row];
            match format {
                SinkFormat::Csv if s.contains([',', '"', '\n', '\r']) => format!("\"{}\"", s.replace('"', "\"\"")),
                SinkFormat::Tsv => s.replace(['\t', '\n', '\r'], " "),
                _ => s.clone(),
            }
        }
    }
}
