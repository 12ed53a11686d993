//! The plugin's settings (`start-info.settings` and `configure`): a JSON
//! object whose keys are all optional. Unknown keys and wrong types are
//! refused with a message naming the key, so a typo never becomes a silent
//! default.

use serde::Serialize;
use serde_json::Value;
use sonde_plugin_sdk::settings;
use sonde_plugin_sdk::types::SampleRequest;

/// What to do with measurements still held when the plugin stops.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum AtShutdown {
    /// Resolve every pending measurement (ignoring the lag) and flush it.
    Flush,
    /// Discard the partial batch, as Determined's ProfilerAgent did.
    Drop,
}

/// Which ranks' timings and throughput count.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum TimingRanks {
    /// Every rank's, each labelled with its rank: the slow rank of a
    /// distributed step is what a user looks for.
    All,
    /// Global rank 0's only, as Determined's ProfilerAgent did.
    Rank0,
}

/// Where a job's system metrics come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SystemFrom {
    /// Per node: an agent's forwarded samples where that node has an agent
    /// (cluster master), this host's own samples for a node without one.
    Auto,
    /// This host's own samples only: every origin is taken to be on this
    /// machine (a standalone sonde).
    Local,
    /// Agents' forwarded samples only, by node; this host's own are unused.
    Agents,
}

/// Determined's own profiler stopped collecting for good after 5 minutes of
/// active time (`harness/determined/profiler.py`, from release 0.16.0 until
/// it was replaced in 0.30.0), to spare its master's database and keep the
/// WebUI's pages quick to load. It is the default of `max_active_s`, which
/// can raise it or turn the cap off (0).
pub const DETERMINED_MAX_ACTIVE_S: f64 = 300.0;

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Settings {
    /// Determined's `profiling_enabled`.
    pub enabled: bool,
    /// Only this job's events; "" = every job.
    pub job: String,
    pub begin_on_batch: u64,
    pub end_after_batch: Option<u64>,
    /// Cap on active time per job, seconds; 0 = no cap. Default
    /// [`DETERMINED_MAX_ACTIVE_S`].
    pub max_active_s: f64,
    pub sample_period_ms: u32,
    pub deliver_every_ms: u32,
    pub flush_every_s: f64,
    /// How long a measurement waits for late batch-index reports.
    pub lag_ms: u64,
    pub resume_after_restart: bool,
    pub at_shutdown: AtShutdown,
    /// Bound on unresolved + unflushed measurements.
    pub max_pending: usize,
    /// Override of the global rank every origin reports.
    pub global_rank: Option<i32>,
    /// Override of the local rank every origin reports.
    pub local_rank: Option<i32>,
    pub timing_ranks: TimingRanks,
    pub system_metrics_from: SystemFrom,
}

pub const KNOWN_KEYS: [&str; 16] = [
    "enabled",
    "job",
    "begin_on_batch",
    "end_after_batch",
    "max_active_s",
    "sample_period_ms",
    "deliver_every_ms",
    "flush_every_s",
    "lag_ms",
    "resume_after_restart",
    "at_shutdown",
    "max_pending",
    "global_rank",
    "local_rank",
    "timing_ranks",
    "system_metrics_from",
];

/// The host series this plugin reads, as metric-name prefixes for the
/// sample request.
pub const SAMPLED_METRICS: [&str; 8] = [
    "system.cpu.utilization",
    "system.memory.linux.available",
    "system.network.io",
    "system.disk.io",
    "system.disk.operations",
    "hw.gpu.utilization",
    "hw.gpu.memory.usage",
    "hw.gpu.memory.limit",
];

/// The contract's floor for `sample-request.period-ms`.
const MIN_PERIOD_MS: u32 = 10;
/// One delivery a second, at the tick the other bundled plugins' come (the
/// host puts deliveries on whole seconds): half the wake-ups of 500 ms. A
/// sample may then arrive after its `lag_ms`; it is resolved on arrival,
/// against the batch-index reports known by then, which is all the lag waits for.
const DEFAULT_DELIVER_EVERY_MS: u32 = 1000;
/// Deliveries while no job is being resolved (see `Profiler::follow_jobs`):
/// the samples are only kept for a job whose first report is still on its
/// way, so they may come ten times less often.
pub const IDLE_DELIVER_EVERY_MS: u32 = 10_000;
/// The flush timer runs in whole milliseconds; anything shorter is a mistake.
const MIN_FLUSH_EVERY_S: f64 = 0.1;

impl Default for Settings {
    fn default() -> Self {
        Settings {
            enabled: true,
            job: String::new(),
            begin_on_batch: 0,
            end_after_batch: None,
            max_active_s: DETERMINED_MAX_ACTIVE_S,
            sample_period_ms: 100,
            deliver_every_ms: DEFAULT_DELIVER_EVERY_MS,
            flush_every_s: 10.0,
            lag_ms: 500,
            resume_after_restart: true,
            at_shutdown: AtShutdown::Flush,
            max_pending: 100_000,
            global_rank: None,
            local_rank: None,
            timing_ranks: TimingRanks::All,
            system_metrics_from: SystemFrom::Auto,
        }
    }
}

impl Settings {
    /// Parses settings JSON; missing keys take their defaults and an empty
    /// string counts as `{}`.
    pub fn parse(json: &str) -> Result<Settings, String> {
        let o = settings::parse_object("determined", json, &KNOWN_KEYS)?;
        let d = Settings::default();

        let begin_on_batch = o
            .u64_in("begin_on_batch", 0..=u64::MAX, "an integer >= 0")?
            .unwrap_or(d.begin_on_batch);
        let end_after_batch = o.u64_in("end_after_batch", 0..=u64::MAX, "an integer >= 0 or null")?;
        if let Some(n) = end_after_batch.filter(|&n| n < begin_on_batch) {
            return Err(o.error(&format!(
                "setting `end_after_batch` ({n}) must be >= begin_on_batch ({begin_on_batch}): \
                 collection would end before it began"
            )));
        }
        let sample_period_ms = o
            .u32_in(
                "sample_period_ms",
                MIN_PERIOD_MS..=u32::MAX,
                &format!("an integer >= {MIN_PERIOD_MS} (ms)"),
            )?
            .unwrap_or(d.sample_period_ms);
        let deliver_every_ms = o
            .u32_in(
                "deliver_every_ms",
                sample_period_ms..=u32::MAX,
                &format!("an integer >= sample_period_ms ({sample_period_ms})"),
            )?
            // A long period alone should not be an error: deliver at least once per period.
            .unwrap_or(DEFAULT_DELIVER_EVERY_MS.max(sample_period_ms));
        let rank = |key: &str| {
            o.read(key, "an integer >= 0 or null", |v| {
                v.as_i64().filter(|&r| r >= 0).and_then(|r| i32::try_from(r).ok())
            })
        };
        Ok(Settings {
            enabled: o.bool("enabled")?.unwrap_or(d.enabled),
            job: o
                .string("job", "a job name (string; \"\" = every job)")?
                .unwrap_or(d.job),
            begin_on_batch,
            end_after_batch,
            max_active_s: o
                .f64_in("max_active_s", 0.0..=f64::MAX, "a number of seconds >= 0 (0 = no cap)")?
                .unwrap_or(d.max_active_s),
            sample_period_ms,
            deliver_every_ms,
            flush_every_s: o
                .f64_in(
                    "flush_every_s",
                    MIN_FLUSH_EVERY_S..=86_400.0,
                    "a number of seconds from 0.1 to 86400",
                )?
                .unwrap_or(d.flush_every_s),
            lag_ms: o
                .u64_in("lag_ms", 0..=600_000, "an integer of milliseconds from 0 to 600000")?
                .unwrap_or(d.lag_ms),
            resume_after_restart: o.bool("resume_after_restart")?.unwrap_or(d.resume_after_restart),
            at_shutdown: o
                .choice(
                    "at_shutdown",
                    &[("flush", AtShutdown::Flush), ("drop", AtShutdown::Drop)],
                )?
                .unwrap_or(d.at_shutdown),
            max_pending: o
                .read("max_pending", "an integer >= 1", |v| {
                    v.as_u64().filter(|&n| n >= 1).and_then(|n| usize::try_from(n).ok())
                })?
                .unwrap_or(d.max_pending),
            global_rank: rank("global_rank")?,
            local_rank: rank("local_rank")?,
            timing_ranks: o
                .choice(
                    "timing_ranks",
                    &[("all", TimingRanks::All), ("rank0", TimingRanks::Rank0)],
                )?
                .unwrap_or(d.timing_ranks),
            system_metrics_from: o
                .choice(
                    "system_metrics_from",
                    &[
                        ("auto", SystemFrom::Auto),
                        ("local", SystemFrom::Local),
                        ("agents", SystemFrom::Agents),
                    ],
                )?
                .unwrap_or(d.system_metrics_from),
        })
    }

    /// What to ask the host for, in the manifest or with `request-samples`.
    pub fn sample_request(&self) -> SampleRequest {
        SampleRequest {
            period_ms: self.sample_period_ms,
            deliver_every_ms: self.deliver_every_ms,
            metrics: SAMPLED_METRICS.iter().map(|m| m.to_string()).collect(),
        }
    }

    /// What to ask the host for: nothing when only agents' samples are used.
    pub fn wanted_samples(&self) -> Option<SampleRequest> {
        (self.system_metrics_from != SystemFrom::Agents).then(|| self.sample_request())
    }

    /// The cap on active time in ns; `None` when there is none.
    pub fn cap_ns(&self) -> Option<u64> {
        (self.max_active_s > 0.0).then(|| (self.max_active_s * 1e9).round() as u64)
    }

    pub fn flush_every_ms(&self) -> u64 {
        (self.flush_every_s * 1000.0).round() as u64
    }

    pub fn lag_ns(&self) -> u64 {
        self.lag_ms.saturating_mul(1_000_000)
    }

    /// How often the resolve timer fires: often enough that a measurement
    /// is emitted about `lag_ms` after it was taken even when no hook call
    /// brings it there. It runs only while some job has not ended
    /// (`Profiler::follow_jobs`).
    pub fn tick_ms(&self) -> u64 {
        (self.lag_ms / 2).clamp(100, 1000)
    }

    /// The settings in effect, defaults filled in.
    pub fn to_json(&self) -> Value {
        serde_json::to_value(self).expect("settings serialize")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults() {
        for json in ["", "{}", "  "] {
            assert_eq!(Settings::parse(json).unwrap(), Settings::default(), "{json:?}");
        }
        let d = Settings::default();
        assert!(d.enabled && d.resume_after_restart);
        assert_eq!((d.begin_on_batch, d.end_after_batch), (0, None));
        assert_eq!((d.sample_period_ms, d.deliver_every_ms, d.lag_ms), (100, 1000, 500));
        assert_eq!((d.max_active_s, d.flush_every_s), (300.0, 10.0));
        assert_eq!((d.at_shutdown, d.max_pending), (AtShutdown::Flush, 100_000));
        assert_eq!(
            (d.timing_ranks, d.system_metrics_from),
            (TimingRanks::All, SystemFrom::Auto)
        );
        assert_eq!(d.cap_ns(), Some(300_000_000_000));
        assert_eq!(d.flush_every_ms(), 10_000);
        let req = d.sample_request();
        assert_eq!((req.period_ms, req.deliver_every_ms), (100, 1000));
        assert_eq!(req.metrics.len(), SAMPLED_METRICS.len());
    }

    #[test]
    fn reads_every_key() {
        let s = Settings::parse(
            r#"{"enabled":false,"job":"trial-7","begin_on_batch":5,"end_after_batch":9,"max_active_s":0,
                "sample_period_ms":50,"deliver_every_ms":250,"flush_every_s":2.5,"lag_ms":0,
                "resume_after_restart":false,"at_shutdown":"drop","max_pending":10,
                "global_rank":0,"local_rank":3,"timing_ranks":"rank0","system_metrics_from":"agents"}"#,
        )
        .unwrap();
        assert!(!s.enabled && !s.resume_after_restart);
        assert_eq!(s.job, "trial-7");
        assert_eq!((s.begin_on_batch, s.end_after_batch), (5, Some(9)));
        assert_eq!(s.cap_ns(), None, "0 = no cap");
        assert_eq!((s.sample_period_ms, s.deliver_every_ms), (50, 250));
        assert_eq!((s.flush_every_ms(), s.lag_ms), (2500, 0));
        assert_eq!((s.at_shutdown, s.max_pending), (AtShutdown::Drop, 10));
        assert_eq!((s.global_rank, s.local_rank), (Some(0), Some(3)));
        assert_eq!(
            (s.timing_ranks, s.system_metrics_from),
            (TimingRanks::Rank0, SystemFrom::Agents)
        );
        // The JSON the /state route shows parses back to the same settings.
        assert_eq!(Settings::parse(&s.to_json().to_string()).unwrap(), s);
    }

    #[test]
    fn null_means_default() {
        let s = Settings::parse(r#"{"end_after_batch":null,"global_rank":null,"max_active_s":null}"#).unwrap();
        assert_eq!(s, Settings::default());
    }

    #[test]
    fn long_period_raises_the_default_delivery() {
        let s = Settings::parse(r#"{"sample_period_ms":2000}"#).unwrap();
        assert_eq!(s.deliver_every_ms, 2000);
    }

    #[test]
    fn errors_name_the_key() {
        let cases = [
            (r#"{"enabeld":true}"#, "unknown setting `enabeld`"),
            (r#"{"":1}"#, "unknown setting ``"),
            (r#"{"enabled":"yes"}"#, "`enabled`"),
            (r#"{"job":3}"#, "`job`"),
            (r#"{"begin_on_batch":-1}"#, "`begin_on_batch`"),
            (r#"{"begin_on_batch":1.5}"#, "`begin_on_batch`"),
            (r#"{"end_after_batch":"x"}"#, "`end_after_batch`"),
            (
                r#"{"begin_on_batch":10,"end_after_batch":9}"#,
                "`end_after_batch` (9) must be >=",
            ),
            (r#"{"max_active_s":-1}"#, "`max_active_s`"),
            (r#"{"sample_period_ms":5}"#, "`sample_period_ms`"),
            (r#"{"sample_period_ms":99999999999}"#, "`sample_period_ms`"),
            (
                r#"{"sample_period_ms":200,"deliver_every_ms":100}"#,
                "`deliver_every_ms`",
            ),
            (r#"{"flush_every_s":0}"#, "`flush_every_s`"),
            (r#"{"lag_ms":-5}"#, "`lag_ms`"),
            (r#"{"lag_ms":700000}"#, "`lag_ms`"),
            (r#"{"resume_after_restart":1}"#, "`resume_after_restart`"),
            (r#"{"at_shutdown":"keep"}"#, "`at_shutdown`"),
            (r#"{"max_pending":0}"#, "`max_pending`"),
            (r#"{"global_rank":-1}"#, "`global_rank`"),
            (r#"{"local_rank":"0"}"#, "`local_rank`"),
            (r#"{"timing_ranks":0}"#, "`timing_ranks`"),
            (r#"{"system_metrics_from":"master"}"#, "`system_metrics_from`"),
            (r#"[1]"#, "must be a JSON object"),
            (r#"{"enabled":"#, "not valid JSON"),
        ];
        for (json, needle) in cases {
            let err = Settings::parse(json).unwrap_err();
            assert!(err.contains(needle), "{json}: {err}");
        }
    }
}
