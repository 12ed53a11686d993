//! The rules: one step's evidence in, its verdict and a sentence saying why
//! out. Pure functions over plain numbers; every threshold is a setting.
//!
//! The rules are tried in this order, the first that holds wins:
//!
//! 1. `input-bound`: input phases (the dataloader) take at least
//!    `input_share` of the step.
//! 2. `communication-bound`: collective phases take at least `comm_share`, or
//!    MPI stall takes that share of the rank's sampled time; or the time
//!    outside every named phase takes that share while a network interface
//!    ran at `net_busy_share` of its observed peak or more.
//! 3. `idle`: the process used at most `idle_cpu_share` of its usual CPU rate
//!    during the time outside its named phases (what it used beyond its
//!    phases at its usual rate; the whole step for a rank without phases;
//!    `idle_cores` before it has a usual rate; without process CPU time: the node at
//!    most `idle_node_cpu` utilization) and the GPU, if any, at
//!    most `gpu_idle`, while the time outside named compute phases took at
//!    least `comm_share` (or the rank names no phases): the rank waited on
//!    something it does not report.
//! 4. `host-bound`: available memory below `memory_pressure` of the node's;
//!    or the node's CPU at `node_busy` or more while the process got at most
//!    `cpu_starved_share` of its usual CPU rate and the step's compute took
//!    `starved_slow_factor` times the rank's usual or longer; or, with the
//!    node as busy, the compute took `slow_factor` times the usual and no
//!    CPU reading of the process covers the step; or it took
//!    `starved_factor` times the usual, whatever the readings say (a starved
//!    process's own readings arrive too late to judge by): something outside
//!    the job took the CPU it needed.
//! 5. `compute-bound`: a GPU at `gpu_busy` or more; without a GPU, CPU at work
//!    (above the idle thresholds of rule 3).
//! 6. `unknown`: none of the above, or no evidence beyond the step's length.
//!
//! Idle comes before host-bound: a step that slept outside its phases
//! waited on something, whatever its compute did.
//! Input and communication come first because they are measured by the job
//! itself (its phases, the MPI probe) and hold whatever the node's noise;
//! host-bound needs the node and the rank's own history to agree.

use serde::{Deserialize, Serialize};

use crate::settings::Settings;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Verdict {
    InputBound,
    ComputeBound,
    CommunicationBound,
    HostBound,
    Idle,
    Unknown,
}

impl Verdict {
    pub const ALL: [Verdict; 6] = [
        Verdict::InputBound,
        Verdict::ComputeBound,
        Verdict::CommunicationBound,
        Verdict::HostBound,
        Verdict::Idle,
        Verdict::Unknown,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Verdict::InputBound => "input-bound",
            Verdict::ComputeBound => "compute-bound",
            Verdict::CommunicationBound => "communication-bound",
            Verdict::HostBound => "host-bound",
            Verdict::Idle => "idle",
            Verdict::Unknown => "unknown",
        }
    }

    pub fn index(self) -> usize {
        Verdict::ALL.iter().position(|&v| v == self).expect("listed")
    }
}

/// What is known about one step (or one MPI window) of one rank. Shares are
/// of the step's wall time; `None` / NaN where the evidence is missing.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Evidence {
    pub wall_s: f64,
    /// Whether the rank reports phases inside its steps (else the shares
    /// below are 0 and `other_share` is 1).
    pub phased: bool,
    pub input_share: f64,
    pub comm_share: f64,
    pub compute_share: f64,
    /// Whether `compute_share` comes from phases named as compute (else it
    /// is what input and communication leave).
    pub compute_named: bool,
    /// Time inside the step but outside every named phase.
    pub other_share: f64,
    /// Compute time of this step (named compute phases, else the time outside
    /// input and communication), seconds.
    pub compute_s: f64,
    /// The rank's usual compute time and CPU rate (cores), once it has enough steps.
    pub usual_compute_s: Option<f64>,
    pub usual_cpu: Option<f64>,
    /// Cores the process used during the step (from its reported CPU time).
    pub process_cpu: Option<f64>,
    /// The node's CPU utilization (0..1 of all cores) during the step.
    pub node_cpu: Option<f64>,
    pub cores: u32,
    /// Available memory as a share of the node's.
    pub memory_available: Option<f64>,
    /// The busiest network interface relative to its observed peak: (name,
    /// bytes/s, share of peak).
    pub net: Option<(String, f64, f64)>,
    /// Disk read bytes/s and its share of the node's observed peak.
    pub disk_read: Option<(f64, f64)>,
    /// Mean utilization of the node's GPUs (0..1); `None` without a GPU.
    pub gpu: Option<f64>,
    /// MPI state shares of the rank's sampled time: not in MPI, work, stall.
    pub mpi: Option<[f64; 3]>,
}

fn pct(x: f64) -> String {
    format!("{:.0} %", x * 100.0)
}

impl Evidence {
    /// Whether anything beyond the step's length is known.
    pub fn is_thin(&self) -> bool {
        !self.phased && self.process_cpu.is_none() && self.node_cpu.is_none() && self.mpi.is_none()
    }

    fn cpu_words(&self) -> String {
        let mut parts = Vec::new();
        if let Some(p) = self.process_cpu {
            parts.push(format!("the process used {:.2} cores", p));
        }
        if let Some(n) = self.node_cpu {
            parts.push(format!("node CPU at {}", pct(n)));
        }
        if let Some(g) = self.gpu {
            parts.push(format!("GPU at {}", pct(g)));
        }
        parts.join(", ")
    }

    fn join(parts: Vec<String>) -> String {
        parts
            .into_iter()
            .filter(|p| !p.is_empty())
            .collect::<Vec<_>>()
            .join("; ")
    }
}

/// The verdict of one step and the sentence (without the step's name) that
/// says why: "the dataloader takes 61 % of the step; disk read at 95 % of its
/// observed peak".
pub fn judge(e: &Evidence, s: &Settings) -> (Verdict, String) {
    if e.is_thin() {
        return (
            Verdict::Unknown,
            "no phases, no CPU, no MPI and no node samples for this step".into(),
        );
    }
    // 1. input
    if e.input_share >= s.input_share {
        let mut parts = vec![format!("the dataloader takes {} of the step", pct(e.input_share))];
        if let Some((rate, share)) = e.disk_read.filter(|d| d.0 > 0.0) {
            parts.push(format!(
                "disk read {:.1} MB/s, {} of its observed peak",
                rate / 1e6,
                pct(share)
            ));
        }
        parts.push(e.cpu_words());
        return (Verdict::InputBound, Evidence::join(parts));
    }
    // 2. communication
    let stall = e.mpi.map_or(0.0, |m| m[2]);
    if e.comm_share >= s.comm_share || stall >= s.comm_share {
        let mut parts = Vec::new();
        if e.comm_share >= s.comm_share {
            parts.push(format!("collectives take {} of the step", pct(e.comm_share)));
        }
        if stall >= s.comm_share {
            parts.push(format!("MPI stall takes {} of the rank's time", pct(stall)));
        }
        return (Verdict::CommunicationBound, Evidence::join(parts));
    }
    if let Some((name, rate, share)) = &e.net
        && e.other_share >= s.comm_share
        && *share >= s.net_busy_share
    {
        let parts = vec![
            format!("{} of the step is outside its phases", pct(e.other_share)),
            format!(
                "network {name} at {:.1} MB/s, {} of its observed peak",
                rate / 1e6,
                pct(*share)
            ),
        ];
        return (Verdict::CommunicationBound, Evidence::join(parts));
    }
    // 3. idle
    let cpu_low = match (e.process_cpu, e.usual_cpu) {
        // The CPU the process used beyond what its named phases take at its
        // usual rate is what it used while waiting: low means it slept.
        (Some(p), Some(u)) if e.phased && e.other_share > 0.0 => {
            let outside = p * e.wall_s - u * e.wall_s * (1.0 - e.other_share);
            outside <= s.idle_cpu_share * u * e.wall_s * e.other_share
        }
        (Some(p), Some(u)) => p <= s.idle_cpu_share * u,
        (Some(p), None) => p <= s.idle_cores,
        (None, _) => e.node_cpu.is_some_and(|n| n <= s.idle_node_cpu),
    };
    let gpu_low = e.gpu.is_none_or(|g| g <= s.gpu_idle);
    let waiting = 1.0 - e.compute_share - e.input_share - e.comm_share;
    if cpu_low && gpu_low && (waiting >= s.comm_share || !e.phased) {
        let parts = vec![
            format!("{} of the step is outside its compute", pct(waiting)),
            e.cpu_words(),
        ];
        return (Verdict::Idle, Evidence::join(parts));
    }
    // 4. host
    if let Some(avail) = e.memory_available.filter(|&a| a < s.memory_pressure) {
        return (
            Verdict::HostBound,
            format!("memory pressure: {} of the node's memory available", pct(avail)),
        );
    }
    let node_busy = e.node_cpu.is_some_and(|n| n >= s.node_busy);
    let slower_by = |factor: f64| e.usual_compute_s.is_some_and(|u| u > 0.0 && e.compute_s >= factor * u);
    let cpu_starved = match (e.process_cpu, e.usual_cpu) {
        (Some(p), Some(u)) => p <= s.cpu_starved_share * u,
        _ => false,
    };
    // With the process's CPU reading as witness a small slowdown will do;
    // without one, the slowdown itself must stand out from the jitter.
    let starved = (cpu_starved && slower_by(s.starved_slow_factor))
        || slower_by(s.starved_factor)
        || (e.process_cpu.is_none() && slower_by(s.slow_factor));
    if node_busy && starved {
        let usual = e.usual_compute_s.unwrap_or(0.0);
        let mut parts = vec![format!(
            "compute took {:.0} ms against its usual {:.0} ms",
            e.compute_s * 1e3,
            usual * 1e3
        )];
        if let (Some(p), Some(u)) = (e.process_cpu, e.usual_cpu) {
            parts.push(format!("the process got {:.2} cores against its usual {:.2}", p, u));
        }
        parts.push(format!("node CPU at {}", pct(e.node_cpu.unwrap_or(f64::NAN))));
        return (Verdict::HostBound, Evidence::join(parts));
    }
    // 5. compute
    let gpu_busy = e.gpu.is_some_and(|g| g >= s.gpu_busy);
    let cpu_working = match (e.process_cpu, e.usual_cpu) {
        (Some(p), Some(u)) => p > s.idle_cpu_share * u,
        (Some(p), None) => p > s.idle_cores,
        (None, _) => e.node_cpu.is_some_and(|n| n > s.idle_node_cpu),
    };
    if gpu_busy || (e.gpu.is_none() && cpu_working) {
        let mut parts = Vec::new();
        if e.phased {
            parts.push(format!("compute takes {} of the step", pct(e.compute_share)));
        }
        if let Some(m) = e.mpi {
            parts.push(format!("{} of the rank's time outside MPI", pct(m[0])));
        }
        parts.push(e.cpu_words());
        return (Verdict::ComputeBound, Evidence::join(parts));
    }
    let unread = e.process_cpu.is_none() && e.node_cpu.is_none() && e.gpu.is_none();
    if unread && e.compute_named && e.compute_share >= s.compute_fill {
        return (
            Verdict::ComputeBound,
            format!(
                "compute phases take {} of the step (no CPU or GPU reading)",
                pct(e.compute_share)
            ),
        );
    }
    (
        Verdict::Unknown,
        Evidence::join(vec!["no rule holds".into(), e.cpu_words()]),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A healthy CPU step: 10 % dataloader, 80 % compute, one core busy.
    fn healthy() -> Evidence {
        Evidence {
            wall_s: 0.1,
            phased: true,
            input_share: 0.1,
            compute_share: 0.8,
            other_share: 0.1,
            compute_s: 0.08,
            usual_compute_s: Some(0.08),
            usual_cpu: Some(0.95),
            process_cpu: Some(0.95),
            node_cpu: Some(0.5),
            cores: 2,
            memory_available: Some(0.6),
            ..Evidence::default()
        }
    }

    fn verdict(e: &Evidence) -> Verdict {
        judge(e, &Settings::default()).0
    }

    #[test]
    fn a_healthy_cpu_step_is_compute_bound_and_says_why() {
        let (v, why) = judge(&healthy(), &Settings::default());
        assert_eq!(v, Verdict::ComputeBound);
        assert!(why.contains("compute takes 80 %"), "{why}");
        assert!(why.contains("0.95 cores"), "{why}");
    }

    #[test]
    fn each_injected_cause_gets_its_verdict() {
        let s = Settings::default();
        let input = Evidence {
            input_share: 0.61,
            compute_share: 0.35,
            other_share: 0.04,
            disk_read: Some((95e6, 0.95)),
            ..healthy()
        };
        let (v, why) = judge(&input, &s);
        assert_eq!(v, Verdict::InputBound);
        assert!(
            why.contains("61 %") && why.contains("95 % of its observed peak"),
            "{why}"
        );

        let net = Evidence {
            compute_share: 0.4,
            other_share: 0.5,
            net: Some(("lo".into(), 2e9, 0.8)),
            ..healthy()
        };
        assert_eq!(verdict(&net), Verdict::CommunicationBound);
        // The same unattributed time with the network quiet is not communication.
        let quiet = Evidence {
            net: Some(("lo".into(), 1e3, 0.01)),
            process_cpu: Some(0.05),
            ..net.clone()
        };
        assert_eq!(verdict(&quiet), Verdict::Idle);

        let mpi = Evidence {
            phased: false,
            mpi: Some([0.25, 0.05, 0.7]),
            ..Evidence::default()
        };
        assert_eq!(verdict(&mpi), Verdict::CommunicationBound);
        let mpi_busy = Evidence {
            mpi: Some([0.95, 0.03, 0.02]),
            node_cpu: Some(1.0),
            compute_share: 0.95,
            ..mpi
        };
        assert_eq!(verdict(&mpi_busy), Verdict::ComputeBound);

        let burner = Evidence {
            compute_s: 0.2,
            process_cpu: Some(0.4),
            node_cpu: Some(0.99),
            ..healthy()
        };
        let (v, why) = judge(&burner, &s);
        assert_eq!(v, Verdict::HostBound);
        assert!(why.contains("200 ms against its usual 80 ms"), "{why}");

        let sleeper = Evidence {
            compute_share: 0.2,
            other_share: 0.75,
            process_cpu: Some(0.2),
            ..healthy()
        };
        assert_eq!(verdict(&sleeper), Verdict::Idle);
    }

    #[test]
    fn host_bound_needs_the_node_busy_the_step_slow_and_the_process_starved() {
        let burner = Evidence {
            compute_s: 0.2,
            process_cpu: Some(0.4),
            node_cpu: Some(0.99),
            ..healthy()
        };
        assert_eq!(verdict(&burner), Verdict::HostBound);
        // A slow step on a quiet node waited on something else.
        let quiet_node = Evidence {
            node_cpu: Some(0.3),
            ..burner.clone()
        };
        assert_ne!(verdict(&quiet_node), Verdict::HostBound);
        // Busy node, but the process got its usual CPU: its own work grew.
        let own_work = Evidence {
            process_cpu: Some(0.95),
            ..burner.clone()
        };
        assert_eq!(verdict(&own_work), Verdict::ComputeBound);
        // No history yet: no comparison, no host-bound.
        let young = Evidence {
            usual_compute_s: None,
            usual_cpu: None,
            ..burner.clone()
        };
        assert_eq!(verdict(&young), Verdict::ComputeBound);
        // Half its usual CPU: a 1.2x slower compute is enough...
        let starved_a_little_slower = Evidence {
            compute_s: 0.096,
            process_cpu: Some(0.45),
            ..burner.clone()
        };
        assert_eq!(verdict(&starved_a_little_slower), Verdict::HostBound);
        // ... but not its usual pace, nor a slower step that got its usual CPU.
        let starved_as_fast = Evidence {
            compute_s: 0.082,
            ..starved_a_little_slower.clone()
        };
        assert_ne!(verdict(&starved_as_fast), Verdict::HostBound);
        let slower_with_its_cpu = Evidence {
            process_cpu: Some(0.9),
            ..starved_a_little_slower.clone()
        };
        assert_eq!(verdict(&slower_with_its_cpu), Verdict::ComputeBound);
        // Without CPU readings, 1.2x is within the jitter of a steady loop.
        let no_readings = Evidence {
            process_cpu: None,
            usual_cpu: None,
            ..starved_a_little_slower.clone()
        };
        assert_ne!(verdict(&no_readings), Verdict::HostBound);
        let pressure = Evidence {
            memory_available: Some(0.01),
            ..healthy()
        };
        assert_eq!(verdict(&pressure), Verdict::HostBound);
    }

    #[test]
    fn thin_evidence_is_unknown_and_gpu_decides_compute_when_present() {
        let thin = Evidence {
            wall_s: 0.1,
            other_share: 1.0,
            ..Evidence::default()
        };
        assert_eq!(verdict(&thin), Verdict::Unknown);
        let gpu_busy = Evidence {
            gpu: Some(0.9),
            process_cpu: Some(0.1),
            ..healthy()
        };
        assert_eq!(verdict(&gpu_busy), Verdict::ComputeBound);
        let gpu_idle_cpu_busy = Evidence {
            gpu: Some(0.3),
            ..healthy()
        };
        // A GPU job whose GPU is neither busy nor idle: no rule holds.
        assert_eq!(verdict(&gpu_idle_cpu_busy), Verdict::Unknown);
    }

    /// A trace with no CPU or GPU reading (a replayed operation-level
    /// trace): named compute filling the step is the answer; compute that
    /// is only what the other phases leave is not.
    #[test]
    fn compute_phases_filling_the_step_are_compute_bound_without_readings() {
        let traced = Evidence {
            wall_s: 2.2,
            phased: true,
            compute_share: 0.85,
            compute_named: true,
            comm_share: 0.1,
            other_share: 0.05,
            compute_s: 1.87,
            ..Evidence::default()
        };
        let (v, why) = judge(&traced, &Settings::default());
        assert_eq!(v, Verdict::ComputeBound);
        assert_eq!(why, "compute phases take 85 % of the step (no CPU or GPU reading)");
        let leftover = Evidence {
            compute_named: false,
            ..traced.clone()
        };
        assert_eq!(verdict(&leftover), Verdict::Unknown);
        let half = Evidence {
            compute_share: 0.5,
            other_share: 0.4,
            ..traced
        };
        assert_eq!(verdict(&half), Verdict::Unknown);
    }
}
