//! Failure rules (reference sections 5, 7 and 8) as pure functions: the
//! exit-code mapping, when a node is dead for lack of heartbeats, whether a
//! failed node is relaunched (and with how much memory after an OOM), CPU
//! hangs, and stragglers, both DLRover's pre-training node check (2 x median)
//! and, during training, the same rule over per-step times.

use serde::{Deserialize, Serialize};

use crate::model::{NodeType, median};
use crate::settings::JobType;

/// Memory at or above which an OOM is not relaunched (MiB).
pub const MAX_MEMORY_MIB: f64 = 65_536.0;
/// The most memory one OOM relaunch adds (MiB).
pub const MAX_INCREMENTAL_MEMORY_MIB: f64 = 8192.0;
/// The time a failed node check records (R8.1).
pub const FAILED_CHECK_TIME: f64 = 3600.0;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum ExitReason {
    Succeeded,
    #[serde(rename = "OOM")]
    Oom,
    Deleted,
    FatalError,
    HardwareError,
    UnknownError,
    NoHeartBeat,
}

impl ExitReason {
    pub fn name(self) -> &'static str {
        match self {
            ExitReason::Succeeded => "Succeeded",
            ExitReason::Oom => "OOM",
            ExitReason::Deleted => "Deleted",
            ExitReason::FatalError => "FatalError",
            ExitReason::HardwareError => "HardwareError",
            ExitReason::UnknownError => "UnknownError",
            ExitReason::NoHeartBeat => "NoHeartBeat",
        }
    }
}

/// R7.2: a node event's exit reason. `None` for kinds that are not an end
/// (started, running, pending, checkpoint-*, ...).
pub fn exit_reason(kind: &str, exit_code: Option<i32>, reason: &str) -> Option<ExitReason> {
    let kind = kind.to_ascii_lowercase();
    // What the host's GPU sampler reports (NVML): a GPU gone from the bus, or
    // an XID that means broken hardware rather than a bad kernel.
    if kind == "gpu-lost" || kind == "gpu-xid" && exit_code.is_some_and(hardware_xid) {
        return Some(ExitReason::HardwareError);
    }
    if kind == "oom" || reason.contains("OOMKilled") || exit_code == Some(247) {
        return Some(ExitReason::Oom);
    }
    let ends = matches!(
        kind.as_str(),
        "exited" | "failed" | "killed" | "deleted" | "succeeded" | "completed"
    );
    if !ends {
        return None;
    }
    Some(match exit_code {
        Some(137 | 143) => ExitReason::Deleted,
        Some(1 | 134) => ExitReason::FatalError,
        Some(201 | 202 | 14) => ExitReason::HardwareError,
        Some(0) => ExitReason::Succeeded,
        Some(_) => ExitReason::UnknownError,
        None => match kind.as_str() {
            "killed" | "deleted" => ExitReason::Deleted,
            "succeeded" | "completed" => ExitReason::Succeeded,
            _ => ExitReason::UnknownError,
        },
    })
}

/// XIDs that NVIDIA's XID catalogue puts on the hardware or driver rather than
/// on the application: double-bit ECC (48), micro-controller faults (61, 62),
/// ECC page retirement (63, 64), NVLink errors (74), fallen off the bus (79),
/// a high single-bit ECC rate (92), contained and uncontained ECC (94, 95),
/// GSP timeouts (119, 120). Application XIDs (13, 31, 43, ...) end nothing.
pub fn hardware_xid(code: i32) -> bool {
    matches!(code, 48 | 61 | 62 | 63 | 64 | 74 | 79 | 92 | 94 | 95 | 119 | 120)
}

/// R7.1: dead when it has heartbeated, has been silent longer than the
/// timeout, is running, and the heartbeat is of this incarnation.
pub fn heartbeat_dead(last_hb: u64, started: u64, running: bool, now: u64, timeout_ns: u64) -> bool {
    last_hb > 0 && running && last_hb >= started && now.saturating_sub(last_hb) > timeout_ns
}

/// What a relaunch needs to know about the failed node.
#[derive(Debug, Clone, Copy)]
pub struct Failed {
    pub kind: NodeType,
    pub reason: ExitReason,
    pub relaunch_count: u32,
    /// Its configured memory (MiB).
    pub memory_mib: f64,
    pub gpu: bool,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Relaunch {
    /// Relaunch; with new memory after an OOM.
    Yes {
        memory_mib: Option<f64>,
        why: String,
    },
    No {
        why: String,
        unrecoverable: bool,
    },
}

/// The group memory an OOM relaunch may use (R5.1, R5.2): the group's
/// current memory, the optimizer's plan and the user's setting (MiB, 0 = none).
#[derive(Debug, Clone, Copy, Default)]
pub struct OomContext {
    pub group_mib: f64,
    pub user_mib: f64,
}

/// R5.1 / R5.2: the memory after an OOM, from memory M:
/// `M + min(max(group, 2M (capped at 65536 for workers), user) - M, 8192)`.
pub fn oom_memory(kind: NodeType, m: f64, ctx: OomContext) -> f64 {
    let doubled = if kind == NodeType::Ps {
        2.0 * m
    } else {
        (2.0 * m).min(MAX_MEMORY_MIB)
    };
    let opt = ctx.group_mib.max(doubled).max(ctx.user_mib);
    m + (opt - m).min(MAX_INCREMENTAL_MEMORY_MIB)
}

/// R7.3 and R5.3: whether a failed node is relaunched.
pub fn relaunch(f: Failed, job_type: JobType, max_relaunch: u32, relaunch_always: bool, oom: OomContext) -> Relaunch {
    let no = |why: String| Relaunch::No {
        why,
        unrecoverable: false,
    };
    let under_max = f.relaunch_count < max_relaunch;
    match f.reason {
        ExitReason::Succeeded => no("it succeeded".into()),
        ExitReason::Oom => {
            if job_type == JobType::Allreduce {
                no("an all-reduce job does not relaunch on OOM".into())
            } else if f.memory_mib >= MAX_MEMORY_MIB {
                Relaunch::No {
                    why: format!(
                        "it already had {} MiB (>= {MAX_MEMORY_MIB} MiB){}",
                        f.memory_mib,
                        if f.gpu { "" } else { ": unrecoverable" }
                    ),
                    unrecoverable: !f.gpu,
                }
            } else if !under_max {
                no(format!(
                    "relaunched {} times already (max {max_relaunch})",
                    f.relaunch_count
                ))
            } else {
                let m = oom_memory(f.kind, f.memory_mib, oom);
                Relaunch::Yes {
                    memory_mib: Some(m),
                    why: format!("OOM: memory {} -> {} MiB", f.memory_mib, m),
                }
            }
        }
        ExitReason::Deleted => Relaunch::Yes {
            memory_mib: None,
            why: "deleted (137/143): relaunched whatever its relaunch count".into(),
        },
        ExitReason::FatalError if !relaunch_always => no("a fatal error (exit 1/134) is not relaunched".into()),
        reason if under_max => Relaunch::Yes {
            memory_mib: None,
            why: format!("{}: relaunch {} of {max_relaunch}", reason.name(), f.relaunch_count + 1),
        },
        reason => no(format!(
            "{}: relaunched {} times already (max {max_relaunch})",
            reason.name(),
            f.relaunch_count
        )),
    }
}

/// R7.4: CPU hang timer for a non-GPU node. Returns the new timer start and
/// whether the node is now hung.
pub fn cpu_hang(
    used_cpu: f64,
    config_cpu: f64,
    low_since: Option<u64>,
    now: u64,
    ratio: f64,
    after_ns: u64,
) -> (Option<u64>, bool) {
    if config_cpu <= 0.0 || used_cpu / config_cpu >= ratio {
        return (None, false);
    }
    let since = low_since.unwrap_or(now);
    (Some(since), now.saturating_sub(since) >= after_ns)
}

/// The thresholds of the GPU-hang rule ([`gpu_hang`]).
#[derive(Debug, Clone, Copy)]
pub struct GpuHangRule {
    /// Utilisation at or above which a GPU reads busy (0..1).
    pub busy: f64,
    /// SM activity at or below which its SMs are idle (0..1).
    pub sm_idle: f64,
    /// How long the pattern and the stalled progress last before it is suspected.
    pub after_ns: u64,
}

/// The classic NCCL hang: a GPU reads busy (a collective's kernel is resident,
/// so the driver's utilisation counts it) while its SMs are idle (GPM SM
/// activity: nothing computes) and the job's progress has stopped. Needs SM
/// activity, so GPUs without GPM are never suspected. Returns the new start of
/// the pattern and whether it has lasted `after_ns` with no progress meanwhile.
pub fn gpu_hang(
    utilization: f64,
    sm_active: Option<f64>,
    last_progress_ns: Option<u64>,
    since: Option<u64>,
    now: u64,
    rule: GpuHangRule,
) -> (Option<u64>, bool) {
    let Some(sm) = sm_active else { return (None, false) };
    if utilization < rule.busy || sm > rule.sm_idle {
        return (None, false);
    }
    let since = since.unwrap_or(now);
    let stalled = last_progress_ns.is_none_or(|p| now.saturating_sub(p) >= rule.after_ns);
    (Some(since), stalled && now.saturating_sub(since) >= rule.after_ns)
}

/// R8.2: the groups of one node-check round. Round 0 pairs nodes in order
/// ({0,1},{2,3},...); round 1 sorts by time and pairs the fastest with the
/// slowest. An odd node out joins the last pair.
pub fn check_groups(round: u32, nodes: &[(String, f64)]) -> Vec<Vec<String>> {
    let order: Vec<&String> = if round == 0 {
        nodes.iter().map(|(n, _)| n).collect()
    } else {
        let mut v: Vec<&(String, f64)> = nodes.iter().collect();
        v.sort_by(|a, b| a.1.total_cmp(&b.1));
        let n = v.len();
        let mut out = Vec::with_capacity(n);
        for i in 0..n / 2 {
            out.push(&v[i].0);
            out.push(&v[n - 1 - i].0);
        }
        if n % 2 == 1 {
            out.push(&v[n / 2].0);
        }
        out
    };
    let mut groups: Vec<Vec<String>> = order
        .chunks(2)
        .map(|c| c.iter().map(|s| s.to_string()).collect())
        .collect();
    if groups.len() > 1 && groups.last().is_some_and(|g| g.len() == 1) {
        let odd = groups.pop().unwrap();
        groups.last_mut().unwrap().extend(odd);
    }
    groups
}

/// One node's node-check result in one round.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CheckResult {
    pub ok: bool,
    /// Seconds (or ms: any unit, used only relative to the others).
    pub time: f64,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize)]
pub struct CheckVerdict {
    /// Per node: status (OR over rounds) and time (MIN over rounds).
    pub nodes: Vec<(String, bool, f64)>,
    pub faults: Vec<String>,
    pub stragglers: Vec<String>,
    pub median: Option<f64>,
    /// With <= 3 nodes and any fault, the check fails at once.
    pub failed: bool,
}

/// R8.3: fault nodes and stragglers (`time > factor x median`) once every
/// node reported; a failed check counts as time 3600.
pub fn check_verdict(per_node: &[(String, Vec<CheckResult>)], factor: f64) -> CheckVerdict {
    let nodes: Vec<(String, bool, f64)> = per_node
        .iter()
        .map(|(n, rounds)| {
            let ok = rounds.iter().any(|r| r.ok);
            let time = rounds
                .iter()
                .map(|r| if r.ok { r.time } else { FAILED_CHECK_TIME })
                .fold(f64::INFINITY, f64::min);
            (n.clone(), ok, if time.is_finite() { time } else { FAILED_CHECK_TIME })
        })
        .collect();
    let times: Vec<f64> = nodes.iter().map(|n| n.2).collect();
    let med = median(&times);
    let faults: Vec<String> = nodes.iter().filter(|n| !n.1).map(|n| n.0.clone()).collect();
    let stragglers = match med {
        Some(m) => nodes.iter().filter(|n| n.2 > factor * m).map(|n| n.0.clone()).collect(),
        None => Vec::new(),
    };
    CheckVerdict {
        failed: nodes.len() <= 3 && !faults.is_empty(),
        nodes,
        faults,
        stragglers,
        median: med,
    }
}

/// Stragglers during training (not in DLRover): a node whose median step
/// time over its recent steps is more than `factor` x the median of all
/// nodes' medians. Nodes with fewer than `min_steps` recent steps are not
/// judged; fewer than 2 judged nodes, nobody is.
pub fn step_stragglers(
    per_node: &[(String, Vec<f64>)],
    factor: f64,
    min_steps: usize,
) -> (Option<f64>, Vec<(String, f64)>) {
    let medians: Vec<(String, f64)> = per_node
        .iter()
        .filter(|(_, t)| t.len() >= min_steps.max(1))
        .filter_map(|(n, t)| median(t).map(|m| (n.clone(), m)))
        .collect();
    if medians.len() < 2 {
        return (None, Vec::new());
    }
    let all: Vec<f64> = medians.iter().map(|(_, m)| *m).collect();
    let med = median(&all).expect("not empty");
    let slow = medians.into_iter().filter(|(_, m)| *m > factor * med).collect();
    (Some(med), slow)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn r7_2_exit_codes() {
        use ExitReason::*;
        let table: &[(&str, Option<i32>, &str, Option<ExitReason>)] = &[
            ("exited", Some(247), "", Some(Oom)),
            ("failed", None, "OOMKilled", Some(Oom)),
            ("oom", None, "", Some(Oom)),
            ("exited", Some(137), "", Some(Deleted)),
            ("killed", Some(143), "", Some(Deleted)),
            ("exited", Some(1), "", Some(FatalError)),
            ("exited", Some(134), "", Some(FatalError)),
            ("exited", Some(201), "", Some(HardwareError)),
            ("exited", Some(202), "", Some(HardwareError)),
            ("failed", Some(14), "", Some(HardwareError)),
            ("exited", Some(0), "", Some(Succeeded)),
            ("exited", Some(2), "", Some(UnknownError)),
            ("failed", Some(-9), "", Some(UnknownError)),
            ("killed", None, "", Some(Deleted)),
            ("failed", None, "", Some(UnknownError)),
            ("started", None, "", None),
            ("running", Some(0), "", None),
            ("checkpoint-end", None, "", None),
        ];
        for (kind, code, reason, want) in table {
            assert_eq!(exit_reason(kind, *code, reason), *want, "{kind} {code:?} {reason}");
        }
    }

    #[test]
    fn r7_1_heartbeat_death() {
        let t = 600 * 1_000_000_000u64;
        for (hb, started, running, now, want) in [
            (1_000, 0, true, 1_000 + t + 1, true),
            (1_000, 0, true, 1_000 + t, false),
            (0, 0, true, u64::MAX, false),
            (1_000, 0, false, 1_000 + t + 1, false),
            (1_000, 2_000, true, 1_000 + t + 1, false),
        ] {
            assert_eq!(
                heartbeat_dead(hb, started, running, now, t),
                want,
                "{hb} {started} {running} {now}"
            );
        }
    }

    #[test]
    fn r5_1_worker_oom_memory() {
        // [verified] M=4096->8192, 16384->24576, 40000->48192, 60000->65536.
        for (m, want) in [
            (4096.0, 8192.0),
            (16384.0, 24576.0),
            (40000.0, 48192.0),
            (60000.0, 65536.0),
        ] {
            assert_eq!(oom_memory(NodeType::Worker, m, OomContext::default()), want, "{m}");
        }
        // The group's or the user's memory counts, still at most +8192.
        let ctx = OomContext {
            group_mib: 10_000.0,
            user_mib: 0.0,
        };
        assert_eq!(oom_memory(NodeType::Worker, 4096.0, ctx), 10_000.0);
        let ctx = OomContext {
            group_mib: 0.0,
            user_mib: 30_000.0,
        };
        assert_eq!(oom_memory(NodeType::Worker, 4096.0, ctx), 12_288.0);
    }

    #[test]
    fn r5_2_ps_oom_memory_has_no_65536_cap_on_2m() {
        // [verified] 4096->8192, 16384->24576.
        for (m, want) in [(4096.0, 8192.0), (16384.0, 24576.0), (60000.0, 68192.0)] {
            assert_eq!(oom_memory(NodeType::Ps, m, OomContext::default()), want, "{m}");
        }
    }

    fn failed(reason: ExitReason, count: u32, mem: f64, gpu: bool) -> Failed {
        Failed {
            kind: NodeType::Worker,
            reason,
            relaunch_count: count,
            memory_mib: mem,
            gpu,
        }
    }

    #[test]
    fn r7_3_r5_3_relaunch() {
        use ExitReason::*;
        let go = |f: Failed, jt: JobType, always: bool| relaunch(f, jt, 3, always, OomContext::default());
        let yes = |r: &Relaunch| matches!(r, Relaunch::Yes { .. });
        assert_eq!(
            go(failed(Oom, 0, 4096.0, false), JobType::Ps, false),
            Relaunch::Yes {
                memory_mib: Some(8192.0),
                why: "OOM: memory 4096 -> 8192 MiB".into()
            }
        );
        assert!(!yes(&go(failed(Oom, 0, 4096.0, false), JobType::Allreduce, false)));
        assert_eq!(
            go(failed(Oom, 0, 65536.0, false), JobType::Ps, false),
            Relaunch::No {
                why: "it already had 65536 MiB (>= 65536 MiB): unrecoverable".into(),
                unrecoverable: true
            }
        );
        assert!(matches!(
            go(failed(Oom, 0, 70000.0, true), JobType::Ps, false),
            Relaunch::No {
                unrecoverable: false,
                ..
            }
        ));
        assert!(!yes(&go(failed(Oom, 3, 4096.0, false), JobType::Ps, false)));
        assert!(
            yes(&go(failed(Deleted, 10, 4096.0, false), JobType::Ps, false)),
            "Deleted ignores the count"
        );
        assert!(!yes(&go(failed(FatalError, 0, 4096.0, false), JobType::Ps, false)));
        assert!(
            yes(&go(failed(FatalError, 0, 4096.0, false), JobType::Ps, true)),
            "relaunch_always"
        );
        assert!(yes(&go(failed(HardwareError, 2, 4096.0, false), JobType::Ps, false)));
        assert!(!yes(&go(failed(HardwareError, 3, 4096.0, false), JobType::Ps, false)));
        assert!(yes(&go(failed(NoHeartBeat, 0, 4096.0, false), JobType::Ps, false)));
        assert!(!yes(&go(failed(Succeeded, 0, 4096.0, false), JobType::Ps, false)));
    }

    #[test]
    fn gpu_hang_needs_busy_idle_sms_and_stalled_progress_for_the_whole_time() {
        let rule = GpuHangRule {
            busy: 0.9,
            sm_idle: 0.05,
            after_ns: 100,
        };
        // the NCCL hang: busy, SMs idle, no progress for the whole time
        assert_eq!(gpu_hang(1.0, Some(0.0), Some(0), None, 1000, rule), (Some(1000), false));
        assert_eq!(
            gpu_hang(1.0, Some(0.0), Some(0), Some(1000), 1099, rule),
            (Some(1000), false)
        );
        assert_eq!(
            gpu_hang(1.0, Some(0.01), Some(0), Some(1000), 1100, rule),
            (Some(1000), true)
        );
        // real work: busy and the SMs busy too
        assert_eq!(gpu_hang(1.0, Some(0.7), Some(0), Some(1000), 5000, rule), (None, false));
        // progress within the window: not hung, whatever the GPU reads
        assert_eq!(
            gpu_hang(1.0, Some(0.0), Some(1050), Some(1000), 1100, rule),
            (Some(1000), false)
        );
        // idle GPU, or no SM activity to judge by
        assert_eq!(gpu_hang(0.2, Some(0.0), Some(0), Some(1000), 5000, rule), (None, false));
        assert_eq!(gpu_hang(1.0, None, Some(0), Some(1000), 5000, rule), (None, false));
    }

    #[test]
    fn gpu_events_from_the_host() {
        assert_eq!(exit_reason("gpu-lost", None, ""), Some(ExitReason::HardwareError));
        assert_eq!(exit_reason("gpu-xid", Some(79), ""), Some(ExitReason::HardwareError));
        assert_eq!(exit_reason("gpu-xid", Some(48), ""), Some(ExitReason::HardwareError));
        assert_eq!(
            exit_reason("gpu-xid", Some(13), ""),
            None,
            "an application XID ends nothing"
        );
        assert_eq!(exit_reason("gpu-xid", None, ""), None);
    }

    #[test]
    fn r7_4_cpu_hang() {
        let h = 7200 * 1_000_000_000u64;
        assert_eq!(
            cpu_hang(0.1, 4.0, None, 10, 0.05, h),
            (Some(10), false),
            "0.025 < 0.05: the timer starts"
        );
        assert_eq!(cpu_hang(0.1, 4.0, Some(10), 10 + h - 1, 0.05, h), (Some(10), false));
        assert_eq!(
            cpu_hang(0.1, 4.0, Some(10), 10 + h, 0.05, h),
            (Some(10), true),
            "hung after 7200 s"
        );
        assert_eq!(
            cpu_hang(1.0, 4.0, Some(10), 10 + h, 0.05, h),
            (None, false),
            "busy again: reset"
        );
    }

    fn names(g: &[Vec<String>]) -> Vec<Vec<&str>> {
        g.iter().map(|v| v.iter().map(String::as_str).collect()).collect()
    }

    #[test]
    fn r8_2_check_groups() {
        let nodes: Vec<(String, f64)> = [("a", 5.0), ("b", 1.0), ("c", 3.0), ("d", 2.0), ("e", 4.0)]
            .iter()
            .map(|(n, t)| (n.to_string(), *t))
            .collect();
        assert_eq!(
            names(&check_groups(0, &nodes[..4])),
            vec![vec!["a", "b"], vec!["c", "d"]]
        );
        assert_eq!(
            names(&check_groups(0, &nodes)),
            vec![vec!["a", "b"], vec!["c", "d", "e"]],
            "odd joins the last pair"
        );
        // Round 1: fastest with slowest: b(1)+a(5), d(2)+e(4), c(3) joins.
        assert_eq!(
            names(&check_groups(1, &nodes)),
            vec![vec!["b", "a"], vec!["d", "e", "c"]]
        );
    }

    #[test]
    fn r8_3_node_check_verdict() {
        let r = |ok, time| CheckResult { ok, time };
        let per: Vec<(String, Vec<CheckResult>)> = vec![
            ("n0".into(), vec![r(true, 10.0), r(true, 9.0)]),
            ("n1".into(), vec![r(true, 11.0), r(true, 12.0)]),
            ("n2".into(), vec![r(false, 0.0), r(true, 30.0)]), // OR over rounds: ok; MIN: 30
            ("n3".into(), vec![r(true, 10.0), r(true, 10.0)]),
        ];
        let v = check_verdict(&per, 2.0);
        assert_eq!(v.median, Some(10.5), "even count: mean of the middle two");
        assert_eq!(v.stragglers, vec!["n2"]);
        assert!(v.faults.is_empty());
        assert!(!v.failed);
        // A node failing every round is a fault (time 3600); <= 3 nodes: the check fails.
        let per = vec![
            ("n0".into(), vec![r(true, 10.0)]),
            ("n1".into(), vec![r(false, 1.0)]),
            ("n2".into(), vec![r(true, 10.0)]),
        ];
        let v = check_verdict(&per, 2.0);
        assert_eq!(v.faults, vec!["n1"]);
        assert_eq!(v.nodes[1].2, 3600.0);
        assert!(v.failed);
    }

    #[test]
    fn stragglers_from_step_times() {
        let n = |name: &str, t: f64, k: usize| (name.to_string(), vec![t; k]);
        let (med, slow) = step_stragglers(&[n("a", 0.1, 5), n("b", 0.11, 5), n("c", 0.35, 5)], 2.0, 5);
        assert_eq!(med, Some(0.11));
        assert_eq!(slow, vec![("c".to_string(), 0.35)]);
        // Too few steps to judge c; 2 judged nodes can never exceed 2 x their mean.
        let (_, slow) = step_stragglers(&[n("a", 0.1, 5), n("b", 0.1, 5), n("c", 0.9, 4)], 2.0, 5);
        assert!(slow.is_empty());
        assert_eq!(step_stragglers(&[n("a", 0.1, 9)], 2.0, 5), (None, vec![]));
    }
}
