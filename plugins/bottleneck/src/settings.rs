//! The settings JSON (`[plugin.bottleneck] settings = {...}`): every rule's
//! threshold, with the reasoning for its default. Unknown keys and values out
//! of range are refused with the key named.

use serde::Deserialize;

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Settings {
    /// Timing names that are a whole step (the span every phase nests in).
    /// Matched exactly. Default: the names the OTLP and HTTP examples and the
    /// Rust agent use.
    pub step_names: Vec<String>,
    /// A phase whose name contains one of these (case-insensitive) is input:
    /// waiting for the next batch.
    pub input_phases: Vec<String>,
    /// A phase whose name contains one of these is communication: a
    /// collective or a point-to-point exchange.
    pub comm_phases: Vec<String>,
    /// A phase whose name contains one of these is compute.
    pub compute_phases: Vec<String>,
    /// input-bound when input phases take at least this share of the step.
    /// 0.3: a dataloader that is not overlapped takes a few % of a healthy
    /// step; at 30 % removing it would speed the job up by more than 40 %, far
    /// beyond run-to-run noise.
    pub input_share: f64,
    /// communication-bound when collective phases take at least this share,
    /// or MPI stall takes this share of the rank's sampled time. 0.3 for the
    /// same reason as `input_share`.
    pub comm_share: f64,
    /// communication-bound when the time outside every named phase takes at
    /// least `comm_share` of the step while the busiest network interface
    /// moved at least this share of its observed peak over the step: 0.05.
    /// The peak is the best 100 ms tick seen, a burst; a step's mean is
    /// diluted by its compute, so a transfer filling a third of a step at a
    /// fifth of the link's best rate already averages above 5 %, while an
    /// idle link (background chatter) stays well under 1 % of its peak.
    pub net_busy_share: f64,
    /// An interface's or disk's observed peak counts only from this rate up
    /// (bytes/s): below it any trickle would be "at its peak". 10 MB/s is
    /// above what a node's own telemetry sends (the jobs' OTLP exports to
    /// sonde over loopback burst to a few MB/s) and far below any transfer
    /// that could hold a step back.
    pub min_peak_bytes_per_s: f64,
    /// host-bound when the step's compute took at least this multiple of the
    /// rank's usual compute time (its `reference_quantile` over the last
    /// `reference_steps` steps) and no CPU reading of the process covers the
    /// step (with one that shows it got less CPU than usual,
    /// `starved_slow_factor` applies). 1.4: step-to-step jitter of a steady
    /// loop stays within ±20 %.
    pub slow_factor: f64,
    /// ... "less CPU than usual" means at most this share of the rank's usual
    /// CPU rate (cores) during the step. 0.75: a neighbour taking a quarter of
    /// the process's CPU is visible; small scheduling noise is not.
    pub cpu_starved_share: f64,
    /// ... but a step whose process got at most `cpu_starved_share` of its
    /// usual CPU rate needs only this multiple of its usual compute: 1.1.
    /// The CPU reading is the better witness: a step starved by a neighbour
    /// shows it in its CPU share even when its compute is barely slower, while
    /// unaffected steps' compute time varies more than that from step to step
    /// and their CPU share does not. So with the CPU reading, a small slowdown
    /// is enough; `slow_factor` alone leaves such steps `unknown`. The runs
    /// behind this: docs/benchmarks.md ("Host-bound with the process's CPU as
    /// witness").
    pub starved_slow_factor: f64,
    /// A step whose compute took at least this multiple of the usual with the
    /// node's CPU at `node_busy` is host-bound whatever the process's CPU
    /// readings say: 3. A process starved this much also reports its CPU
    /// time late and in clumps (its exporter thread waits for a CPU too), so
    /// its rate over one step is no longer evidence; a job's own work
    /// tripling from one step to the next while the node is saturated is not
    /// what healthy loops do.
    pub starved_factor: f64,
    /// When the process reports no CPU time, host-bound needs the node's CPU
    /// at or above this utilization instead (0..1 of all cores): 0.9, i.e.
    /// practically no idle core left for the job.
    pub node_busy: f64,
    /// host-bound (memory pressure) when available memory falls below this
    /// share of the node's memory: 0.05, where Linux starts reclaiming hard.
    pub memory_pressure: f64,
    /// idle when the process used at most this share of its usual CPU rate
    /// during the time outside its named phases: 0.75. Relative, because what
    /// a busy process gets depends on its neighbours: on a crowded node a
    /// computing process may get a tenth of a core, and still far more than
    /// while it sleeps. Closer to "working" than to "asleep" because a starved
    /// process's CPU readings arrive late and scattered: an unnamed phase that
    /// computes uses its usual rate, 25 % above this.
    pub idle_cpu_share: f64,
    /// ... before the rank has a usual CPU rate: at most this many cores (0.1).
    pub idle_cores: f64,
    /// ... and when the process reports no CPU time: the node's CPU at most
    /// this utilization (0.25), since a computing rank keeps a core busy.
    pub idle_node_cpu: f64,
    /// With no CPU or GPU reading at all, a step whose named compute phases
    /// (forward, backward, optimizer, ...) take at least this share (0.7) is
    /// compute-bound by its phases alone: what fills the step is the answer.
    pub compute_fill: f64,
    /// GPU utilization (0..1) at or below which the GPU is idle: 0.2.
    pub gpu_idle: f64,
    /// GPU utilization at or above which a step is compute-bound on the GPU:
    /// 0.6, a GPU fed well enough to be the limit.
    pub gpu_busy: f64,
    /// A rank's usual compute time and CPU rate come from its last this many
    /// steps: 256 at 10 steps/s is about half a minute of history.
    pub reference_steps: usize,
    /// ... at this quantile: 0.25 of the compute times (the rank's fast steps,
    /// so a slowdown lasting most of the history still stands out) and 1 -
    /// 0.25 of the CPU rates.
    pub reference_quantile: f64,
    /// Steps a rank must have before the host-bound rule (which compares with
    /// the reference) applies: 8.
    pub min_reference_steps: usize,
    /// A step is judged this long after it ended (host clock), so that the
    /// node's samples, the process's CPU readings, late child spans and the
    /// MPI probe's bins covering it have arrived: 3000 ms covers the 1 s
    /// sample delivery, the probe's 500 ms flush and an SDK's batch exporter
    /// delayed by a CPU-starved process.
    pub lag_ms: u64,
    /// Ranks that report MPI samples and no steps are judged per window of
    /// this length: 1000 ms holds two flushes of the probe at its default.
    pub mpi_window_ms: u64,
    /// The dominant verdict of a rank is the most frequent of its last this
    /// many steps; a decision is emitted when it changes: 8.
    pub dominant_steps: usize,
    /// ... and a new verdict must hold at least this share of them: 0.6.
    pub dominant_share: f64,
    /// A persistent straggler is named when one rank finished last in at least
    /// `straggler_share` of the last `straggler_batches` batches: 20 and 0.5
    /// (with 2 ranks, chance alone puts one last in half of them only rarely
    /// for 20 batches running).
    pub straggler_batches: usize,
    pub straggler_share: f64,
    /// How often the verdict shares are emitted as metrics: 1000 ms.
    pub emit_every_ms: u64,
    /// Per-step rows kept per job for the route: 8192 (8 ranks x 1024 batches).
    pub max_rows_per_job: usize,
    /// Jobs followed at most; further jobs are ignored and counted.
    pub max_jobs: usize,
    /// Ranks followed per job at most.
    pub max_ranks: usize,
    /// Steps of a job's operations (the `ops` table) the What-if replay
    /// covers: 8, enough for a median per operation and recent enough to
    /// follow a change.
    pub ops_window_steps: usize,
}

impl Default for Settings {
    fn default() -> Settings {
        let names = |v: &[&str]| v.iter().map(|s| s.to_string()).collect();
        Settings {
            step_names: names(&["train_batch", "train_step", "training_step", "step"]),
            input_phases: names(&["dataloader", "data_load", "data_wait", "input", "fetch", "load_batch"]),
            comm_phases: names(&[
                "allreduce",
                "all_reduce",
                "allgather",
                "all_gather",
                "reduce_scatter",
                "broadcast",
                "barrier",
                "alltoall",
                "nccl",
                "collective",
                "comm",
            ]),
            compute_phases: names(&["forward", "backward", "optimizer", "compute", "loss"]),
            input_share: 0.3,
            comm_share: 0.3,
            net_busy_share: 0.05,
            min_peak_bytes_per_s: 10e6,
            slow_factor: 1.4,
            cpu_starved_share: 0.75,
            starved_slow_factor: 1.1,
            starved_factor: 3.0,
            node_busy: 0.9,
            memory_pressure: 0.05,
            idle_cpu_share: 0.75,
            idle_cores: 0.1,
            idle_node_cpu: 0.25,
            compute_fill: 0.7,
            gpu_idle: 0.2,
            gpu_busy: 0.6,
            reference_steps: 256,
            reference_quantile: 0.25,
            min_reference_steps: 8,
            lag_ms: 3000,
            mpi_window_ms: 1000,
            dominant_steps: 8,
            dominant_share: 0.6,
            straggler_batches: 20,
            straggler_share: 0.5,
            emit_every_ms: 1000,
            max_rows_per_job: 8192,
            ops_window_steps: 8,
            max_jobs: 64,
            max_ranks: 1024,
        }
    }
}

impl Settings {
    pub fn parse(json: &str) -> Result<Settings, String> {
        let s: Settings = sonde_plugin_sdk::settings::parse_json("bottleneck", json)?;
        s.validate()?;
        Ok(s)
    }

    fn validate(&self) -> Result<(), String> {
        let shares = [
            ("input_share", self.input_share),
            ("comm_share", self.comm_share),
            ("net_busy_share", self.net_busy_share),
            ("cpu_starved_share", self.cpu_starved_share),
            ("node_busy", self.node_busy),
            ("memory_pressure", self.memory_pressure),
            ("gpu_idle", self.gpu_idle),
            ("idle_cpu_share", self.idle_cpu_share),
            ("idle_node_cpu", self.idle_node_cpu),
            ("compute_fill", self.compute_fill),
            ("gpu_busy", self.gpu_busy),
            ("reference_quantile", self.reference_quantile),
            ("dominant_share", self.dominant_share),
            ("straggler_share", self.straggler_share),
        ];
        for (key, v) in shares {
            if !(0.0..=1.0).contains(&v) {
                return Err(format!("setting `{key}` must be within 0..1, not {v}"));
            }
        }
        let positive = [
            ("slow_factor", self.slow_factor),
            ("starved_slow_factor", self.starved_slow_factor),
            ("starved_factor", self.starved_factor),
            ("idle_cores", self.idle_cores),
            ("min_peak_bytes_per_s", self.min_peak_bytes_per_s),
        ];
        for (key, v) in positive {
            if !(v.is_finite() && v > 0.0) {
                return Err(format!("setting `{key}` must be a positive number, not {v}"));
            }
        }
        let counts = [
            ("reference_steps", self.reference_steps),
            ("dominant_steps", self.dominant_steps),
            ("straggler_batches", self.straggler_batches),
            ("max_rows_per_job", self.max_rows_per_job),
            ("max_jobs", self.max_jobs),
            ("max_ranks", self.max_ranks),
            ("ops_window_steps", self.ops_window_steps),
        ];
        for (key, v) in counts {
            if v == 0 {
                return Err(format!("setting `{key}` must be at least 1"));
            }
        }
        for (key, v) in [
            ("mpi_window_ms", self.mpi_window_ms),
            ("emit_every_ms", self.emit_every_ms),
        ] {
            if v < 100 {
                return Err(format!("setting `{key}` must be at least 100, not {v}"));
            }
        }
        if self.step_names.is_empty() {
            return Err("setting `step_names` must name at least one timing".into());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_parse_and_bad_values_name_their_key() {
        assert_eq!(Settings::parse("").unwrap(), Settings::default());
        assert_eq!(Settings::parse("{\"lag_ms\": 500}").unwrap().lag_ms, 500);
        let e = Settings::parse("{\"input_share\": 1.5}").unwrap_err();
        assert!(e.contains("input_share"), "{e}");
        let e = Settings::parse("{\"nope\": 1}").unwrap_err();
        assert!(e.contains("nope"), "{e}");
        let e = Settings::parse("{\"step_names\": []}").unwrap_err();
        assert!(e.contains("step_names"), "{e}");
    }
}
