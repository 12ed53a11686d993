//! One GPU: its series (made at discovery, per-process ones when a process
//! first shows up) and one reading per tick. What a reading cannot get is NaN
//! for that tick; "not supported" and "not in this library" are never asked
//! again; a lost GPU is asked nothing more and reads `hw.status{failed}` = 1.

use std::collections::HashMap;

use nvml_wrapper::enum_wrappers::device::{
    Clock, EccCounter, MemoryError, PcieUtilCounter, Sampling, TemperatureSensor,
};
use nvml_wrapper::enums::device::{SampleValue, UsedGpuMemory};
use nvml_wrapper::enums::gpm::GpmMetricId;
use nvml_wrapper::error::NvmlError;
use nvml_wrapper::struct_wrappers::device::Sample;
use nvml_wrapper::structs::device::FieldId;
use nvml_wrapper::{Device, GpmSample};
use nvml_wrapper_sys::bindings::{nvmlDevice_t, nvmlFieldValue_t};

use super::GpuEvent;
use super::names::*;
use super::pods::PodOf;
use crate::model::{AttrValue, Attributes, SeriesKind};
use crate::sample::{Out, attrs};

const NVLINK_LINK_COUNT: u32 = 91;
const NVLINK_DATA_TX: u32 = 138;
const NVLINK_DATA_RX: u32 = 139;
const NO_SERIES: u32 = u32::MAX;

/// The readings a GPU is asked for each tick; a bit each in the masks below.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Reading {
    Samples,
    Utilization,
    Memory,
    Power,
    Energy,
    Temperature,
    Clock,
    Pcie,
    NvLink,
    Throttle,
    Ecc,
    Gpm,
    Processes,
    ProcessUtilization,
    Mig,
}

impl Reading {
    fn bit(self) -> u32 {
        1 << self as u32
    }

    fn name(self) -> &'static str {
        match self {
            Reading::Samples => "utilization samples",
            Reading::Utilization => "utilization",
            Reading::Memory => "memory",
            Reading::Power => "power",
            Reading::Energy => "energy",
            Reading::Temperature => "temperature",
            Reading::Clock => "SM clock",
            Reading::Pcie => "PCIe throughput",
            Reading::NvLink => "NVLink counters",
            Reading::Throttle => "throttle reasons",
            Reading::Ecc => "ECC counters",
            Reading::Gpm => "GPM",
            Reading::Processes => "processes",
            Reading::ProcessUtilization => "process utilization",
            Reading::Mig => "MIG instances",
        }
    }
}

struct Ids {
    util: u32,
    mem_used: u32,
    mem_total: u32,
    mem_util: u32,
    power: u32,
    energy: u32,
    temp: u32,
    clock: u32,
    pcie_rx: u32,
    pcie_tx: u32,
    status_ok: u32,
    status_failed: u32,
    xid_count: u32,
    xid_last: u32,
    ecc_corrected: u32,
    ecc_uncorrected: u32,
    throttle: [u32; THROTTLE_REASONS.len()],
    /// SM active, SM occupancy, tensor active, DRAM active (GPM only).
    gpm: [u32; 4],
    /// Per link: (receive, transmit).
    nvlink: Vec<(u32, u32)>,
}

/// A MIG instance: its own `hw.id`, memory only (the driver reads the rest per GPU).
struct MigDev {
    device: Device<'static>,
    mem_used: u32,
    mem_total: u32,
    mem_util: u32,
}

pub(super) struct GpuDev {
    index: u32,
    uuid: String,
    device: Device<'static>,
    base: Attributes,
    ids: Ids,
    lost: Option<String>,
    /// Readings NVML does not support here (never asked again).
    unsupported: u32,
    /// Readings whose function the library lacks (never asked again; in the status).
    missing: u32,
    /// Readings failing now, with the error (in the status while they fail).
    failing: HashMap<Reading, String>,
    last_sample_us: u64,
    last_process_us: u64,
    gpm_prev: Option<GpmSample<'static>>,
    processes: HashMap<u32, (u32, u32)>,
    xid_count: f64,
    xid_last: f64,
    mig: Vec<MigDev>,
    /// What the series are labelled with before the pod's attributes.
    labels: Labels,
    gpm_supported: bool,
    links: u32,
    /// The pod holding this GPU now (`base`, `ids` and `processes` carry it).
    pod: Option<PodOf>,
    /// The series of the pods that held this GPU before (and of none), kept
    /// so that a pod coming back, or a kubelet that stops and starts
    /// answering, reuses its series instead of defining new ones.
    parked: HashMap<Option<PodOf>, Parked>,
}

/// A GPU's series under one attribution: its base attributes, its series
/// and its processes' series.
type Parked = (Attributes, Ids, HashMap<u32, (u32, u32)>);

impl GpuDev {
    pub(super) fn new(index: u32, device: Device<'static>, driver: &str, out: &mut Out) -> Self {
        let uuid = device.uuid().unwrap_or_else(|_| format!("gpu-index-{index}"));
        let name = device.name().unwrap_or_else(|_| "unknown".into());
        let base: Attributes = attrs([
            ("hw.id", AttrValue::from(uuid.clone())),
            ("hw.type", AttrValue::from("gpu")),
            ("hw.name", AttrValue::from(name.clone())),
            ("hw.driver_version", AttrValue::from(driver)),
        ]);
        let gpm_supported = device.gpm_support().unwrap_or(false);
        let links = match device.field_values_for(&[FieldId(NVLINK_LINK_COUNT)]) {
            Ok(v) => match v.into_iter().next() {
                Some(Ok(s)) => match s.value {
                    Ok(SampleValue::U32(n)) => n,
                    Ok(SampleValue::U64(n)) => n as u32,
                    _ => 0,
                },
                _ => 0,
            },
            Err(_) => 0,
        };
        let links = links.min(18);
        let labels = Labels::of(&base, &uuid, &name);
        let ids = make_ids(out, &labels, &Attributes::new(), gpm_supported, links);
        let mig = mig_instances(&device, &uuid, &name, driver, out);
        let mut dev = GpuDev {
            index,
            uuid,
            device,
            base,
            ids,
            lost: None,
            unsupported: 0,
            missing: 0,
            failing: HashMap::new(),
            last_sample_us: 0,
            last_process_us: 0,
            gpm_prev: None,
            processes: HashMap::new(),
            xid_count: 0.0,
            xid_last: 0.0,
            mig,
            labels,
            gpm_supported,
            links,
            pod: None,
            parked: HashMap::new(),
        };
        if !gpm_supported {
            dev.unsupported |= Reading::Gpm.bit();
        }
        // Start the buffered samples from now, not from the driver's whole buffer.
        let first = dev.device.samples(Sampling::GpuUtilization, None);
        match first {
            Ok(s) => dev.last_sample_us = newest(&s),
            Err(NvmlError::NotFound) => {}
            Err(e) => {
                dev.give_up(Reading::Samples, &e);
            }
        }
        dev
    }

    pub(super) fn uuid(&self) -> &str {
        &self.uuid
    }

    /// Labels this GPU's series from now on with the pod that holds it
    /// (`None`: no pod). Series carry their attributes for life, so a new
    /// pod gets series of its own and the previous pod's read NaN from this
    /// tick, as a process's do when it ends.
    pub(super) fn set_pod(&mut self, pod: Option<&PodOf>, out: &mut Out) {
        if self.pod.as_ref() == pod {
            return;
        }
        let key = pod.cloned();
        let (base, ids, processes) = match self.parked.remove(&key) {
            Some(p) => p,
            None => {
                let extra = pod.map(pod_attributes).unwrap_or_default();
                let ids = make_ids(out, &self.labels, &extra, self.gpm_supported, self.links);
                let mut base = self.labels.gpu.clone();
                base.extend(extra);
                (base, ids, HashMap::new())
            }
        };
        let before = (
            std::mem::replace(&mut self.base, base),
            std::mem::replace(&mut self.ids, ids),
            std::mem::replace(&mut self.processes, processes),
        );
        self.parked.insert(std::mem::replace(&mut self.pod, key), before);
    }

    pub(super) fn device(&self) -> &Device<'static> {
        &self.device
    }

    pub(super) fn index(&self) -> u32 {
        self.index
    }

    pub(super) fn is(&self, handle: nvmlDevice_t) -> bool {
        // SAFETY: only compared, never dereferenced.
        unsafe { self.device.handle() == handle }
    }

    /// What the status line says about this GPU now.
    pub(super) fn problems(&self) -> Vec<String> {
        let i = self.index;
        if let Some(why) = &self.lost {
            return vec![format!("GPU {i} ({}) lost: {why}", self.uuid)];
        }
        let mut p: Vec<String> = self
            .failing
            .iter()
            .map(|(r, e)| format!("GPU {i}: {} failing ({e})", r.name()))
            .collect();
        let missing: Vec<&str> = ALL_READINGS
            .iter()
            .filter(|r| self.missing & r.bit() != 0)
            .map(|r| r.name())
            .collect();
        if !missing.is_empty() {
            p.push(format!("GPU {i}: not in this NVML library: {}", missing.join(", ")));
        }
        p.sort();
        p
    }

    /// Never ask `r` again: the GPU or the library cannot.
    fn give_up(&mut self, r: Reading, e: &NvmlError) {
        self.unsupported |= r.bit();
        if matches!(e, NvmlError::FailedToLoadSymbol(_)) {
            self.missing |= r.bit();
            tracing::warn!("sampler: GPU {}: {} not read: {e}", self.index, r.name());
        }
    }

    fn wanted(&self, r: Reading) -> bool {
        self.lost.is_none() && self.unsupported & r.bit() == 0
    }

    /// The value, or None after noting why not (lost, unsupported, failing).
    fn got<T>(&mut self, r: Reading, result: Result<T, NvmlError>, events: &mut Vec<GpuEvent>) -> Option<T> {
        match result {
            Ok(v) => {
                self.failing.remove(&r);
                Some(v)
            }
            Err(e @ (NvmlError::NotSupported | NvmlError::FailedToLoadSymbol(_))) => {
                self.give_up(r, &e);
                None
            }
            Err(NvmlError::GpuLost) => {
                let why = "GPU has fallen off the bus (NVML_ERROR_GPU_IS_LOST)".to_string();
                tracing::error!("sampler: GPU {} ({}) lost: {why}", self.index, self.uuid);
                events.push(GpuEvent {
                    time_ns: crate::model::now_ns(),
                    kind: "gpu-lost",
                    code: None,
                    gpu: self.uuid.clone(),
                    index: self.index,
                    reason: why.clone(),
                });
                self.lost = Some(why);
                None
            }
            Err(e) => {
                if !self.failing.contains_key(&r) {
                    tracing::warn!(
                        "sampler: GPU {}: {} failing: {e}; NaN while it fails",
                        self.index,
                        r.name()
                    );
                }
                self.failing.insert(r, e.to_string());
                None
            }
        }
    }

    /// An XID error on this GPU: counted, kept as the last code, and an event.
    pub(super) fn xid(&mut self, code: u64, out: &mut Out) -> GpuEvent {
        self.xid_count += 1.0;
        self.xid_last = code as f64;
        out.set(self.ids.xid_count, self.xid_count);
        out.set(self.ids.xid_last, self.xid_last);
        tracing::warn!("sampler: GPU {} ({}): XID {code}", self.index, self.uuid);
        GpuEvent {
            time_ns: crate::model::now_ns(),
            kind: "gpu-xid",
            code: i32::try_from(code).ok(),
            gpu: self.uuid.clone(),
            index: self.index,
            reason: format!("XID {code} on GPU {} ({})", self.index, self.uuid),
        }
    }

    pub(super) fn read(&mut self, out: &mut Out, events: &mut Vec<GpuEvent>) {
        if self.lost.is_none() {
            self.read_gpu(out, events);
        }
        let lost = self.lost.is_some();
        out.set(self.ids.status_ok, if lost { 0.0 } else { 1.0 });
        out.set(self.ids.status_failed, if lost { 1.0 } else { 0.0 });
        out.set(self.ids.xid_count, self.xid_count);
        out.set(self.ids.xid_last, self.xid_last);
    }

    fn read_gpu(&mut self, out: &mut Out, events: &mut Vec<GpuEvent>) {
        let ids = &self.ids;
        let (util, mem_used, mem_total, mem_util) = (ids.util, ids.mem_used, ids.mem_total, ids.mem_util);
        if self.wanted(Reading::Samples) {
            let r = self.device.samples(Sampling::GpuUtilization, self.last_sample_us);
            match r {
                Err(NvmlError::NotFound) => {} // no new sample since the last tick: NaN
                r => {
                    if let Some(s) = self.got(Reading::Samples, r, events) {
                        self.last_sample_us = self.last_sample_us.max(newest(&s));
                        out.set(util, mean_percent(&s) / 100.0);
                    }
                }
            }
        } else if self.wanted(Reading::Utilization) {
            let r = self.device.utilization_rates();
            if let Some(u) = self.got(Reading::Utilization, r, events) {
                out.set(util, f64::from(u.gpu) / 100.0);
            }
        }
        if self.wanted(Reading::Memory) {
            let r = self.device.memory_info();
            if let Some(m) = self.got(Reading::Memory, r, events) {
                out.set(mem_used, m.used as f64);
                out.set(mem_total, m.total as f64);
                if m.total > 0 {
                    out.set(mem_util, m.used as f64 / m.total as f64);
                }
            }
        }
        self.read_scalars(out, events);
        self.read_gpm(out, events);
        self.read_links(out, events);
        self.read_processes(out, events);
        self.read_mig(out, events);
    }

    fn read_scalars(&mut self, out: &mut Out, events: &mut Vec<GpuEvent>) {
        // read!(reading, |device| call, |value| use): skips what is not wanted,
        // notes why a call gave nothing.
        macro_rules! read {
            ($r:expr, |$d:ident| $call:expr, |$v:ident| $set:expr) => {
                if self.wanted($r) {
                    let result = {
                        let $d = &self.device;
                        $call
                    };
                    if let Some($v) = self.got($r, result, events) {
                        $set;
                    }
                }
            };
        }
        let ids = (self.ids.power, self.ids.energy, self.ids.temp, self.ids.clock);
        read!(Reading::Power, |d| d.power_usage(), |mw| out
            .set(ids.0, f64::from(mw) / 1000.0));
        read!(Reading::Energy, |d| d.total_energy_consumption(), |mj| out
            .set(ids.1, mj as f64 / 1000.0));
        read!(Reading::Temperature, |d| d.temperature(TemperatureSensor::Gpu), |c| out
            .set(ids.2, f64::from(c)));
        read!(Reading::Clock, |d| d.clock_info(Clock::SM), |mhz| out
            .set(ids.3, f64::from(mhz)));
        let throttle = self.ids.throttle;
        read!(Reading::Throttle, |d| d.current_throttle_reasons(), |reasons| {
            for (id, (_, bit)) in throttle.iter().zip(THROTTLE_REASONS) {
                out.set(*id, if reasons.bits() & bit != 0 { 1.0 } else { 0.0 });
            }
        });
        let ecc = (self.ids.ecc_corrected, self.ids.ecc_uncorrected);
        read!(
            Reading::Ecc,
            |d| d.total_ecc_errors(MemoryError::Corrected, EccCounter::Volatile),
            |n| out.set(ecc.0, n as f64)
        );
        read!(
            Reading::Ecc,
            |d| d.total_ecc_errors(MemoryError::Uncorrected, EccCounter::Volatile),
            |n| out.set(ecc.1, n as f64)
        );
        // Without GPM, the driver's own 20 ms PCIe window.
        if !self.wanted(Reading::Gpm) {
            let pcie = (self.ids.pcie_rx, self.ids.pcie_tx);
            read!(Reading::Pcie, |d| d.pcie_throughput(PcieUtilCounter::Receive), |kb| out
                .set(pcie.0, f64::from(kb) * 1000.0));
            read!(Reading::Pcie, |d| d.pcie_throughput(PcieUtilCounter::Send), |kb| out
                .set(pcie.1, f64::from(kb) * 1000.0));
        }
    }

    /// GPM between the previous tick's sample and this one's.
    fn read_gpm(&mut self, out: &mut Out, events: &mut Vec<GpuEvent>) {
        if !self.wanted(Reading::Gpm) {
            return;
        }
        let r = self.device.gpm_sample();
        let Some(now) = self.got(Reading::Gpm, r, events) else {
            self.gpm_prev = None;
            return;
        };
        let Some(prev) = self.gpm_prev.replace(now) else { return };
        let now = self.gpm_prev.as_ref().expect("just set");
        const METRICS: [GpmMetricId; 6] = [
            GpmMetricId::SmUtil,
            GpmMetricId::SmOccupancy,
            GpmMetricId::AnyTensorUtil,
            GpmMetricId::DramBwUtil,
            GpmMetricId::PcieRxPerSec,
            GpmMetricId::PcieTxPerSec,
        ];
        let nvml = self.device.nvml();
        let r = nvml_wrapper::gpm::gpm_metrics_get(nvml, &prev, now, &METRICS);
        let Some(values) = self.got(Reading::Gpm, r, events) else {
            return;
        };
        // percent -> share; MiB/s -> bytes/s (dividing keeps 85 % exactly 0.85)
        let targets = [
            (self.ids.gpm[0], 100.0),
            (self.ids.gpm[1], 100.0),
            (self.ids.gpm[2], 100.0),
            (self.ids.gpm[3], 100.0),
            (self.ids.pcie_rx, 1.0 / (1024.0 * 1024.0)),
            (self.ids.pcie_tx, 1.0 / (1024.0 * 1024.0)),
        ];
        for (v, (id, divisor)) in values.into_iter().zip(targets) {
            if let Ok(v) = v {
                out.set(id, v.value / divisor);
            }
        }
    }

    /// NVLink data counters, every link in one call (with the link as scope,
    /// which nvml-wrapper's field_values_for does not set).
    fn read_links(&mut self, out: &mut Out, events: &mut Vec<GpuEvent>) {
        if self.ids.nvlink.is_empty() || !self.wanted(Reading::NvLink) {
            return;
        }
        let mut fields: Vec<nvmlFieldValue_t> = Vec::with_capacity(self.ids.nvlink.len() * 2);
        for link in 0..self.ids.nvlink.len() as u32 {
            for field in [NVLINK_DATA_RX, NVLINK_DATA_TX] {
                let mut f: nvmlFieldValue_t = unsafe { std::mem::zeroed() };
                f.fieldId = field;
                f.scopeId = link;
                fields.push(f);
            }
        }
        let lib = self.device.nvml().lib();
        let r = match lib.nvmlDeviceGetFieldValues.as_ref() {
            Err(e) => Err(NvmlError::FailedToLoadSymbol(e.to_string())),
            Ok(call) => {
                // SAFETY: the handle is NVML's, `fields` holds `fields.len()` initialised entries.
                let code = unsafe { (*call)(self.device.handle(), fields.len() as i32, fields.as_mut_ptr()) };
                if code == 0 { Ok(()) } else { Err(NvmlError::from(code)) }
            }
        };
        if self.got(Reading::NvLink, r, events).is_none() {
            return;
        }
        for (f, id) in fields
            .iter()
            .zip(self.ids.nvlink.iter().flat_map(|(rx, tx)| [*rx, *tx]))
        {
            if f.nvmlReturn == 0 {
                // KiB counters; the value type is unsigned long long for these fields.
                out.set(id, unsafe { f.value.ullVal } as f64 * 1024.0);
            }
        }
    }

    fn read_processes(&mut self, out: &mut Out, events: &mut Vec<GpuEvent>) {
        if self.wanted(Reading::Processes) {
            let r = self.device.running_compute_processes();
            if let Some(procs) = self.got(Reading::Processes, r, events) {
                for p in procs {
                    let (mem, _) = self.process_series(p.pid, out);
                    if let UsedGpuMemory::Used(b) = p.used_gpu_memory {
                        out.set(mem, b as f64);
                    }
                }
            }
        }
        if self.wanted(Reading::ProcessUtilization) {
            let r = self.device.process_utilization_stats(self.last_process_us);
            match r {
                Err(NvmlError::NotFound) => {}
                r => {
                    if let Some(samples) = self.got(Reading::ProcessUtilization, r, events) {
                        for s in samples {
                            self.last_process_us = self.last_process_us.max(s.timestamp);
                            let (_, util) = self.process_series(s.pid, out);
                            out.set(util, f64::from(s.sm_util) / 100.0);
                        }
                    }
                }
            }
        }
    }

    /// The (memory, utilization) series of a process, made when first seen.
    fn process_series(&mut self, pid: u32, out: &mut Out) -> (u32, u32) {
        if let Some(ids) = self.processes.get(&pid) {
            return *ids;
        }
        let mut a = self.base.clone();
        a.push(("process.pid".into(), AttrValue::Int(i64::from(pid))));
        let ids = (
            out.add(PROCESS_MEMORY, "By", SeriesKind::Gauge, a.clone()),
            out.add(PROCESS_UTILIZATION, "1", SeriesKind::Gauge, a),
        );
        self.processes.insert(pid, ids);
        ids
    }

    fn read_mig(&mut self, out: &mut Out, events: &mut Vec<GpuEvent>) {
        for i in 0..self.mig.len() {
            if !self.wanted(Reading::Mig) {
                return;
            }
            let r = self.mig[i].device.memory_info();
            if let Some(m) = self.got(Reading::Mig, r, events) {
                let d = &self.mig[i];
                out.set(d.mem_used, m.used as f64);
                out.set(d.mem_total, m.total as f64);
                if m.total > 0 {
                    out.set(d.mem_util, m.used as f64 / m.total as f64);
                }
            }
        }
    }
}

const ALL_READINGS: [Reading; 15] = [
    Reading::Samples,
    Reading::Utilization,
    Reading::Memory,
    Reading::Power,
    Reading::Energy,
    Reading::Temperature,
    Reading::Clock,
    Reading::Pcie,
    Reading::NvLink,
    Reading::Throttle,
    Reading::Ecc,
    Reading::Gpm,
    Reading::Processes,
    Reading::ProcessUtilization,
    Reading::Mig,
];

/// The MIG instances of a GPU in MIG mode, each its own `hw.id` whose `hw.parent` is the GPU.
fn mig_instances(device: &Device<'static>, uuid: &str, name: &str, driver: &str, out: &mut Out) -> Vec<MigDev> {
    let on = matches!(device.mig_mode(), Ok(m) if m.current == 1);
    if !on {
        return Vec::new();
    }
    let mut migs = Vec::new();
    for i in 0..7 {
        let m = match device.mig_device_by_index(i) {
            Ok(m) => m,
            Err(_) => continue,
        };
        let id = m.uuid().unwrap_or_else(|_| format!("{uuid}-mig-{i}"));
        let a = attrs([
            ("hw.id", AttrValue::from(id)),
            ("hw.type", AttrValue::from("gpu")),
            (
                "hw.name",
                AttrValue::from(m.name().unwrap_or_else(|_| format!("{name} MIG"))),
            ),
            ("hw.driver_version", AttrValue::from(driver)),
            ("hw.parent", AttrValue::from(uuid)),
        ]);
        migs.push(MigDev {
            mem_used: out.add(MEMORY_USAGE, "By", SeriesKind::Gauge, a.clone()),
            mem_total: out.add(MEMORY_LIMIT, "By", SeriesKind::Gauge, a.clone()),
            mem_util: out.add(MEMORY_UTILIZATION, "1", SeriesKind::Gauge, a),
            device: m,
        });
    }
    migs
}

/// What every series of one GPU is labelled with: the GPU's own attributes
/// and its temperature sensor's.
pub(super) struct Labels {
    gpu: Attributes,
    temperature: Attributes,
}

impl Labels {
    fn of(base: &Attributes, uuid: &str, name: &str) -> Labels {
        let temperature = attrs([
            ("hw.id", AttrValue::from(format!("{uuid}-temperature"))),
            ("hw.type", AttrValue::from("temperature")),
            ("hw.name", AttrValue::from(format!("{name} temperature"))),
            ("hw.parent", AttrValue::from(uuid.to_string())),
            ("hw.sensor_location", AttrValue::from("gpu")),
        ]);
        Labels {
            gpu: base.clone(),
            temperature,
        }
    }
}

/// The attributes of the pod holding a GPU (OpenTelemetry's `k8s.*` names).
fn pod_attributes(p: &PodOf) -> Attributes {
    attrs([
        ("k8s.namespace.name", AttrValue::from(p.namespace.clone())),
        ("k8s.pod.name", AttrValue::from(p.pod.clone())),
        ("k8s.container.name", AttrValue::from(p.container.clone())),
    ])
}

/// Defines one GPU's series with `labels` plus `extra` (the pod holding it,
/// or nothing).
fn make_ids(out: &mut Out, labels: &Labels, extra: &Attributes, gpm_supported: bool, links: u32) -> Ids {
    let mut base = labels.gpu.clone();
    base.extend(extra.iter().cloned());
    let mut temperature = labels.temperature.clone();
    temperature.extend(extra.iter().cloned());
    let with = |more: Vec<(&str, AttrValue)>| {
        let mut a = base.clone();
        a.extend(more.into_iter().map(|(k, v)| (k.to_string(), v)));
        a
    };
    let gauge = |out: &mut Out, metric: &str, unit: &str, more: Vec<(&str, AttrValue)>| {
        out.add(metric, unit, SeriesKind::Gauge, with(more))
    };
    let dir = |d: &str| vec![("network.io.direction", AttrValue::from(d))];
    let state = |s: &str| vec![("hw.state", AttrValue::from(s))];
    let error = |e: &str| vec![("error.type", AttrValue::from(e))];
    let mut ids = Ids {
        util: gauge(out, UTILIZATION, "1", vec![("hw.gpu.task", AttrValue::from("general"))]),
        mem_used: gauge(out, MEMORY_USAGE, "By", vec![]),
        mem_total: gauge(out, MEMORY_LIMIT, "By", vec![]),
        mem_util: gauge(out, MEMORY_UTILIZATION, "1", vec![]),
        power: gauge(out, POWER, "W", vec![]),
        energy: out.add(ENERGY, "J", SeriesKind::Counter, with(vec![])),
        temp: out.add(TEMPERATURE, "Cel", SeriesKind::Gauge, temperature),
        clock: gauge(out, CLOCK_SM, "MHz", vec![]),
        pcie_rx: gauge(out, PCIE_IO, "By/s", dir("receive")),
        pcie_tx: gauge(out, PCIE_IO, "By/s", dir("transmit")),
        status_ok: gauge(out, STATUS, "1", state("ok")),
        status_failed: gauge(out, STATUS, "1", state("failed")),
        xid_count: out.add(ERRORS, "{error}", SeriesKind::Counter, with(error("xid"))),
        xid_last: gauge(out, XID_LAST, "1", vec![]),
        ecc_corrected: out.add(ERRORS, "{error}", SeriesKind::Counter, with(error("ecc_corrected"))),
        ecc_uncorrected: out.add(ERRORS, "{error}", SeriesKind::Counter, with(error("ecc_uncorrected"))),
        throttle: THROTTLE_REASONS
            .map(|(r, _)| gauge(out, THROTTLE, "1", vec![(ATTR_THROTTLE_REASON, AttrValue::from(r))])),
        gpm: [NO_SERIES; 4],
        nvlink: Vec::new(),
    };
    if gpm_supported {
        for (slot, metric) in ids
            .gpm
            .iter_mut()
            .zip([SM_ACTIVE, SM_OCCUPANCY, TENSOR_ACTIVE, DRAM_ACTIVE])
        {
            *slot = gauge(out, metric, "1", vec![]);
        }
    }
    for link in 0..links {
        let l = || (ATTR_NVLINK_LINK, AttrValue::Int(i64::from(link)));
        let rx = out.add(
            NVLINK_IO,
            "By",
            SeriesKind::Counter,
            with(vec![l(), ("network.io.direction", "receive".into())]),
        );
        let tx = out.add(
            NVLINK_IO,
            "By",
            SeriesKind::Counter,
            with(vec![l(), ("network.io.direction", "transmit".into())]),
        );
        ids.nvlink.push((rx, tx));
    }
    ids
}

fn newest(samples: &[Sample]) -> u64 {
    samples.iter().map(|s| s.timestamp).max().unwrap_or(0)
}

/// The mean of the samples' values (NaN for none).
fn mean_percent(samples: &[Sample]) -> f64 {
    let sum: f64 = samples
        .iter()
        .map(|s| match s.value {
            SampleValue::U32(v) => f64::from(v),
            SampleValue::U64(v) => v as f64,
            SampleValue::F64(v) => v,
            SampleValue::I64(v) => v as f64,
        })
        .sum();
    if samples.is_empty() {
        f64::NAN
    } else {
        sum / samples.len() as f64
    }
}
