//! Example: file sinks.
//!
//! A plugin never sees a path: it names a file, and the host writes it in the
//! sink directory the operator configured (`sinks` in sonde's config). Two
//! modes, both used here:
//!
//! - **append**: rows are added; the header is written once, when the file
//!   is new (reopening after a restart adds none). `progress.tsv` gets one
//!   row per progress report.
//! - **replace**: every write is the whole file, swapped in atomically.
//!   `progress-latest.csv` is a snapshot: each (job, counter)'s latest value.
//!
//! Rows go in as columns of equal length, like the events come in; the host
//! formats the cells. Opening a sink fails when the directory is missing or
//! not writable: the plugin says so once in the log and keeps working without
//! its files.

use std::collections::BTreeMap;

use sonde_plugin_sdk::types::{
    Column, EventBatch, EventKind, Manifest, Severity, SinkFormat, SinkMode, SinkSpec, StartInfo,
};
use sonde_plugin_sdk::{Host, Plugin};

struct ProgressLog {
    /// Handles of the two sinks; `None` when the host could not open one.
    log: Option<u32>,
    latest_file: Option<u32>,
    /// (job, counter name) → latest value: what the snapshot holds.
    latest: BTreeMap<(String, String), u64>,
}

/// Opens a sink, or logs why not.
fn open(host: &mut impl Host, name: &str, format: SinkFormat, mode: SinkMode, columns: &[&str]) -> Option<u32> {
    let spec = SinkSpec {
        name: name.into(),
        format,
        mode,
        columns: columns.iter().map(|c| c.to_string()).collect(),
        // Where `sinks.dir` (or `[sinks.plugins.sink_progress_log]`) says.
        default_dir: None,
    };
    match host.open_sink(&spec) {
        Ok(handle) => Some(handle),
        Err(e) => {
            host.log(Severity::Warn, &format!("not writing {name}: {e}"));
            None
        }
    }
}

impl Plugin for ProgressLog {
    fn start(host: &mut impl Host, _info: StartInfo) -> Result<Self, String> {
        let log_columns = ["time_ns", "job", "rank", "counter", "value"];
        Ok(ProgressLog {
            log: open(host, "progress.tsv", SinkFormat::Tsv, SinkMode::Append, &log_columns),
            latest_file: open(
                host,
                "progress-latest.csv",
                SinkFormat::Csv,
                SinkMode::Replace,
                &["job", "counter", "value"],
            ),
            latest: BTreeMap::new(),
        })
    }

    fn manifest(&self) -> Manifest {
        Manifest {
            version: env!("CARGO_PKG_VERSION").into(),
            description: "Progress reports as a TSV log and a CSV snapshot".into(),
            events: vec![EventKind::Progress],
            ..Default::default()
        }
    }

    fn on_events(&mut self, host: &mut impl Host, batch: EventBatch) -> Result<(), String> {
        let Some(p) = &batch.progress else { return Ok(()) };
        // Resolve the interned columns into one column per sink column.
        let (mut time, mut job, mut rank, mut counter, mut value) = (vec![], vec![], vec![], vec![], vec![]);
        for i in 0..p.time.len() {
            let (Some(origin), Some(name)) = (
                batch.origins.get(p.origin[i] as usize),
                batch.names.get(p.name[i] as usize),
            ) else {
                continue; // a reporter's bad index: skip the row
            };
            time.push(p.time[i]);
            job.push(origin.job.clone());
            rank.push(i64::from(origin.rank));
            counter.push(name.clone());
            value.push(p.value[i]);
            self.latest.insert((origin.job.clone(), name.clone()), p.value[i]);
        }
        if time.is_empty() {
            return Ok(());
        }
        if let Some(sink) = self.log {
            let columns = [
                Column::U64s(time),
                Column::Strings(job),
                Column::S64s(rank),
                Column::Strings(counter),
                Column::U64s(value),
            ];
            // An error here (say, the disk filled up) is returned: the host
            // counts and logs it, and the plugin goes on.
            host.write_rows(sink, &columns)?;
        }
        if let Some(sink) = self.latest_file {
            let (jobs, rest): (Vec<_>, Vec<_>) = self
                .latest
                .iter()
                .map(|((j, c), v)| (j.clone(), (c.clone(), *v)))
                .unzip();
            let (counters, values): (Vec<_>, Vec<_>) = rest.into_iter().unzip();
            host.write_rows(
                sink,
                &[Column::Strings(jobs), Column::Strings(counters), Column::U64s(values)],
            )?;
        }
        Ok(())
    }
}

sonde_plugin_sdk::export_plugin!(ProgressLog);

#[cfg(test)]
mod tests {
    use sonde_plugin_sdk::testing::FakeHost;
    use sonde_plugin_sdk::types::{Origin, ProgressColumns};

    use super::*;

    /// Reports of (time, job, counter, value), each job at rank 0.
    fn progress(rows: &[(u64, &str, &str, u64)]) -> EventBatch {
        let mut b = EventBatch::default();
        let index = |list: &mut Vec<String>, s: &str| match list.iter().position(|x| x == s) {
            Some(i) => i as u32,
            None => {
                list.push(s.into());
                list.len() as u32 - 1
            }
        };
        let mut jobs = Vec::new();
        let mut cols = ProgressColumns::default();
        for &(time, job, counter, value) in rows {
            cols.origin.push(index(&mut jobs, job));
            cols.name.push(index(&mut b.names, counter));
            cols.time.push(time);
            cols.value.push(value);
        }
        b.origins = jobs
            .into_iter()
            .map(|job| Origin {
                job,
                ..Default::default()
            })
            .collect();
        b.progress = Some(cols);
        b
    }

    #[test]
    fn rows_are_appended_under_one_header_and_the_snapshot_is_replaced() {
        let mut host = FakeHost::default();
        let mut p = ProgressLog::start(&mut host, StartInfo::default()).unwrap();
        p.on_events(&mut host, progress(&[(1, "a", "batch", 1), (2, "b,c", "batch", 7)]))
            .unwrap();
        p.on_events(&mut host, progress(&[(3, "a", "batch", 2)])).unwrap();
        assert_eq!(
            host.file("progress.tsv").unwrap(),
            "time_ns\tjob\trank\tcounter\tvalue\n1\ta\t0\tbatch\t1\n2\tb,c\t0\tbatch\t7\n3\ta\t0\tbatch\t2\n"
        );
        // Replace mode: only the last write, CSV-quoted where needed.
        assert_eq!(
            host.file("progress-latest.csv").unwrap(),
            "job,counter,value\na,batch,2\n\"b,c\",batch,7\n"
        );

        // A restart reopens the append sink: no second header.
        let mut host = host.restarted(0);
        let mut p = ProgressLog::start(&mut host, StartInfo::default()).unwrap();
        p.on_events(&mut host, progress(&[(4, "a", "batch", 3)])).unwrap();
        assert_eq!(host.file("progress.tsv").unwrap().matches("time_ns").count(), 1);
        assert!(host.file("progress.tsv").unwrap().ends_with("4\ta\t0\tbatch\t3\n"));
    }

    #[test]
    fn without_a_sink_directory_the_plugin_logs_it_and_goes_on() {
        let mut host = FakeHost {
            fail_open_sink: Some("sink directory /nope does not exist".into()),
            ..Default::default()
        };
        let mut p = ProgressLog::start(&mut host, StartInfo::default()).unwrap();
        assert!(host.logged("not writing progress.tsv: sink directory /nope does not exist"));
        p.on_events(&mut host, progress(&[(1, "a", "batch", 1)])).unwrap();
        assert!(host.files.is_empty());
        assert_eq!(p.latest[&("a".to_string(), "batch".to_string())], 1, "the work goes on");
    }
}
