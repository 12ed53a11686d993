//! GPUs through NVML. nvml-wrapper dlopens `libnvidia-ml.so.1` at run time
//! (or the file `sampler.nvml_library` names), so a machine without the
//! driver just reports "no GPU" and everything else keeps sampling.
//!
//! Files: `mod.rs` (discovery, the status line, XID and lost-GPU events),
//! `device.rs` (one GPU's series and readings), `names.rs` (the metric names,
//! their sources and resolutions; docs/gpu.md's table follows it), `pods.rs`
//! (which Kubernetes pod holds each GPU, from the kubelet).
//!
//! Faults never stop sampling: a missing library, missing symbols, an init
//! failure, a GPU that falls off the bus and calls that start failing each
//! leave their series NaN and say why in the status line (`/api/status`,
//! the dashboard's Status view). A lost GPU and every XID error also become
//! [`GpuEvent`]s, which the host hands to plugins as node events.

mod device;
pub(crate) mod names;
pub mod pods;

use std::ffi::OsStr;
use std::sync::Arc;

use nvml_wrapper::Nvml;
use nvml_wrapper::bitmasks::event::EventTypes;
use nvml_wrapper::enums::event::XidError;
use nvml_wrapper::error::NvmlError;
use nvml_wrapper::{Device, EventSet};
use parking_lot::Mutex;

use super::Out;
use crate::sample::config::SamplerConfig;
use device::GpuDev;

/// Something that happened to a GPU, for plugins (as a node event).
#[derive(Clone, Debug, PartialEq)]
pub struct GpuEvent {
    pub time_ns: u64,
    /// "gpu-xid" or "gpu-lost".
    pub kind: &'static str,
    /// The XID code for "gpu-xid".
    pub code: Option<i32>,
    /// The GPU's UUID (`hw.id`).
    pub gpu: String,
    pub index: u32,
    pub reason: String,
}

/// What the sampler thread shares with the rest of the host: the status line
/// and the events not yet taken.
#[derive(Default)]
struct Shared {
    status: String,
    events: Vec<GpuEvent>,
}

/// A handle on the GPU reader's status and events, usable from any thread.
#[derive(Clone, Default)]
pub struct GpuWatch(Arc<Mutex<Shared>>, Arc<tokio::sync::Notify>);

impl GpuWatch {
    /// Returns once events arrived since the last wait (at once if they
    /// arrived before it): whoever forwards them sleeps until there are some.
    pub async fn arrived(&self) {
        self.1.notified().await
    }

    /// How GPU sampling goes, in words, e.g. "2 GPUs via NVML (driver 550.54)",
    /// with every GPU lost and every call failing named after it.
    pub fn status(&self) -> String {
        self.0.lock().status.clone()
    }

    /// The events since the last call, oldest first.
    pub fn take_events(&self) -> Vec<GpuEvent> {
        std::mem::take(&mut self.0.lock().events)
    }
}

/// Events kept at most while nobody takes them (a host without plugins).
const MAX_PENDING_EVENTS: usize = 1024;

pub(crate) struct GpuReader {
    watch: GpuWatch,
    /// Leaked once per reader that found a GPU: devices, event sets and GPM
    /// samples borrow it for as long as the sampler lives.
    nvml: Option<&'static Nvml>,
    devs: Vec<GpuDev>,
    events: Option<EventSet<'static>>,
    /// "N GPUs via NVML (driver ...)"; problems are appended to it.
    base: String,
    /// The problems the status line shows now, e.g. "GPU 1 lost (...)".
    problems: Vec<String>,
    /// Which pod holds each GPU (None: not asked), and the generation of it
    /// the series were last labelled from.
    pods: Option<pods::PodWatch>,
    pods_seen: u64,
    pods_error: Option<String>,
}

impl GpuReader {
    pub(crate) fn watch(&self) -> GpuWatch {
        self.watch.clone()
    }

    fn without_gpu(status: String) -> Self {
        tracing::info!("sampler: {status}");
        let watch = GpuWatch::default();
        watch.0.lock().status = status.clone();
        Self {
            watch,
            nvml: None,
            devs: Vec::new(),
            events: None,
            base: status,
            problems: Vec::new(),
            pods: None,
            pods_seen: 0,
            pods_error: None,
        }
    }

    pub(crate) fn new(cfg: &SamplerConfig, out: &mut Out) -> Self {
        if !cfg.gpu {
            return Self::without_gpu("GPU sampling off in config".into());
        }
        let lib = cfg.nvml_library.as_deref().unwrap_or("libnvidia-ml.so.1");
        let nvml = match Nvml::builder().lib_path(OsStr::new(lib)).init() {
            Ok(n) => n,
            Err(e) => return Self::without_gpu(format!("no GPU: NVML not available from {lib} ({e})")),
        };
        let driver = nvml.sys_driver_version().unwrap_or_else(|_| "unknown".into());
        let count = match nvml.device_count() {
            Ok(c) => c,
            Err(e) => {
                return Self::without_gpu(format!("no GPU: NVML (driver {driver}) cannot count devices ({e})"));
            }
        };
        if count == 0 {
            return Self::without_gpu(format!("no GPU: NVML found no device (driver {driver})"));
        }
        let nvml: &'static Nvml = Box::leak(Box::new(nvml));
        let mut devs = Vec::new();
        let mut problems = Vec::new();
        for index in 0..count {
            match nvml.device_by_index(index) {
                Ok(d) => devs.push(GpuDev::new(index, d, &driver, out)),
                Err(e) => {
                    tracing::warn!("sampler: GPU {index} skipped: {e}");
                    problems.push(format!("GPU {index} skipped ({e})"));
                }
            }
        }
        let events = register_xid_events(nvml, &devs);
        let s = if devs.len() == 1 { "" } else { "s" };
        let base = format!("{} GPU{s} via NVML (driver {driver})", devs.len());
        if events.is_none() {
            problems.push("XID events not available".into());
        }
        let every = std::time::Duration::from_millis(u64::from(cfg.pod_resources_interval_ms));
        let reader = Self {
            watch: GpuWatch::default(),
            nvml: Some(nvml),
            devs,
            events,
            base,
            problems,
            pods: pods::spawn(&cfg.pod_resources_socket, every),
            pods_seen: 0,
            pods_error: None,
        };
        reader.publish_status();
        tracing::info!("sampler: {}", reader.watch.status());
        reader
    }

    fn publish_status(&self) {
        let mut status = self.base.clone();
        for p in &self.problems {
            status.push_str("; ");
            status.push_str(p);
        }
        self.watch.0.lock().status = status;
    }

    pub(crate) fn read(&mut self, out: &mut Out) {
        if self.nvml.is_none() {
            return;
        }
        self.label_pods(out);
        let mut new_events = Vec::new();
        for d in &mut self.devs {
            d.read(out, &mut new_events);
        }
        self.drain_xid(out, &mut new_events);
        let problems: Vec<String> = self.devs.iter().flat_map(GpuDev::problems).collect();
        let events_missing = self.events.is_none();
        let problems: Vec<String> = problems
            .into_iter()
            .chain(events_missing.then(|| "XID events not available".to_string()))
            .chain(self.pods_error.clone())
            .collect();
        let changed = problems != self.problems;
        if changed {
            self.problems = problems;
            self.publish_status();
            tracing::warn!("sampler: GPU status now: {}", self.watch.status());
        }
        if !new_events.is_empty() {
            let mut shared = self.watch.0.lock();
            shared.events.extend(new_events);
            let excess = shared.events.len().saturating_sub(MAX_PENDING_EVENTS);
            shared.events.drain(..excess);
            drop(shared);
            self.watch.1.notify_one();
        }
    }

    /// Labels each GPU with the pod holding it when the kubelet's answer
    /// changed: a load of an atomic on every other tick.
    fn label_pods(&mut self, out: &mut Out) {
        let Some(watch) = &self.pods else { return };
        let generation = watch.generation();
        if generation == self.pods_seen {
            return;
        }
        self.pods_seen = generation;
        let (gpus, error) = watch.get();
        self.pods_error = error;
        for d in &mut self.devs {
            d.set_pod(gpus.get(d.uuid()), out);
        }
    }

    /// Every XID the driver has queued, without waiting.
    fn drain_xid(&mut self, out: &mut Out, events: &mut Vec<GpuEvent>) {
        let Some(set) = &self.events else { return };
        loop {
            match set.wait(0) {
                Ok(e) => {
                    let handle = unsafe { e.device.handle() };
                    let code = match e.event_data {
                        Some(XidError::Value(v)) => v,
                        _ => 0,
                    };
                    if let Some(d) = self.devs.iter_mut().find(|d| d.is(handle)) {
                        events.push(d.xid(code, out));
                    }
                }
                Err(NvmlError::Timeout) => return,
                Err(e) => {
                    tracing::warn!("sampler: waiting for XID events failed ({e}); XID events off");
                    self.events = None;
                    return;
                }
            }
        }
    }
}

/// One event set with every GPU's critical XID errors, or None where the
/// driver (or its library) cannot.
fn register_xid_events(nvml: &'static Nvml, devs: &[GpuDev]) -> Option<EventSet<'static>> {
    let mut set = match nvml.create_event_set() {
        Ok(s) => s,
        Err(e) => {
            tracing::info!("sampler: no XID events: {e}");
            return None;
        }
    };
    for d in devs {
        let dev: &Device<'static> = d.device();
        set = match dev.register_events(EventTypes::CRITICAL_XID_ERROR, set) {
            Ok(s) => s,
            Err(e) => {
                tracing::info!("sampler: no XID events for GPU {}: {}", d.index(), e.error);
                return None;
            }
        };
    }
    Some(set)
}

#[cfg(test)]
mod tests;
