//! GPUs through NVML (nvml-wrapper loads libnvidia-ml at run time, so a
//! machine without the driver just reports "no GPU"). Per GPU, attributes
//! `hw.id` = UUID, `hw.type` = "gpu", `hw.name` = model:
//! `hw.gpu.utilization` ("1", `hw.gpu.task` = "general"), `hw.gpu.memory.usage`,
//! `hw.gpu.memory.limit` (By), `hw.gpu.memory.utilization` ("1", used/total),
//! `hw.power` (W), `hw.temperature` (Cel), `sonde.gpu.clock.sm` (MHz), and
//! `hw.energy` (J, counter) when the GPU supports the energy counter.
//!
//! A reading a GPU does not support is NaN from then on and never asked
//! again; any other failure is NaN for that tick and logged once per GPU.

use nvml_wrapper::Nvml;
use nvml_wrapper::enum_wrappers::device::{Clock, TemperatureSensor};
use nvml_wrapper::error::NvmlError;

use super::{Out, attrs};
use crate::model::{AttrValue, Attributes, SeriesKind};
use crate::sample::config::SamplerConfig;

/// Field indices into `GpuDev::ids` / the unsupported bit mask.
const UTIL: usize = 0;
const MEM_USED: usize = 1;
const MEM_TOTAL: usize = 2;
const MEM_UTIL: usize = 3;
const POWER: usize = 4;
const TEMP: usize = 5;
const CLOCK_SM: usize = 6;
const ENERGY: usize = 7;
const FIELDS: usize = 8;

struct GpuDev {
    index: u32,
    /// Series id per field; `u32::MAX` where the series was not created.
    ids: [u32; FIELDS],
    /// Bit per field: NVML said "not supported", never ask again.
    unsupported: u16,
    error_logged: bool,
}

pub(crate) struct GpuReader {
    status: String,
    nvml: Option<Nvml>,
    devs: Vec<GpuDev>,
}

impl GpuReader {
    pub(crate) fn status(&self) -> &str {
        &self.status
    }

    pub(crate) fn new(cfg: &SamplerConfig, out: &mut Out) -> Self {
        if !cfg.gpu {
            return Self {
                status: "GPU sampling off in config".into(),
                nvml: None,
                devs: Vec::new(),
            };
        }
        // nvml-wrapper dlopens libnvidia-ml.so.1 (what driver packages install).
        let nvml = match Nvml::init() {
            Ok(n) => n,
            Err(e) => {
                let status = format!("no GPU: NVML not available ({e})");
                tracing::info!("sampler: {status}");
                return Self {
                    status,
                    nvml: None,
                    devs: Vec::new(),
                };
            }
        };
        let driver = nvml.sys_driver_version().unwrap_or_else(|_| "unknown".into());
        let count = match nvml.device_count() {
            Ok(c) => c,
            Err(e) => {
                let status = format!("no GPU: NVML (driver {driver}) cannot count devices ({e})");
                tracing::info!("sampler: {status}");
                return Self {
                    status,
                    nvml: None,
                    devs: Vec::new(),
                };
            }
        };
        let mut devs = Vec::new();
        for index in 0..count {
            let dev = match nvml.device_by_index(index) {
                Ok(d) => d,
                Err(e) => {
                    tracing::warn!("sampler: GPU {index} skipped: {e}");
                    continue;
                }
            };
            let uuid = dev.uuid().unwrap_or_else(|_| format!("gpu-index-{index}"));
            let name = dev.name().unwrap_or_else(|_| "unknown".into());
            let base: Attributes = attrs([
                ("hw.id", AttrValue::from(uuid)),
                ("hw.type", AttrValue::from("gpu")),
                ("hw.name", AttrValue::from(name)),
            ]);
            let with = |extra: &[(&str, &str)]| {
                let mut a = base.clone();
                a.extend(extra.iter().map(|(k, v)| (k.to_string(), AttrValue::from(*v))));
                a
            };
            let mut ids = [u32::MAX; FIELDS];
            ids[UTIL] = out.add(
                "hw.gpu.utilization",
                "1",
                SeriesKind::Gauge,
                with(&[("hw.gpu.task", "general")]),
            );
            ids[MEM_USED] = out.add("hw.gpu.memory.usage", "By", SeriesKind::Gauge, with(&[]));
            ids[MEM_TOTAL] = out.add("hw.gpu.memory.limit", "By", SeriesKind::Gauge, with(&[]));
            ids[MEM_UTIL] = out.add("hw.gpu.memory.utilization", "1", SeriesKind::Gauge, with(&[]));
            ids[POWER] = out.add("hw.power", "W", SeriesKind::Gauge, with(&[]));
            ids[TEMP] = out.add("hw.temperature", "Cel", SeriesKind::Gauge, with(&[]));
            ids[CLOCK_SM] = out.add("sonde.gpu.clock.sm", "MHz", SeriesKind::Gauge, with(&[]));
            let mut unsupported = 0u16;
            match dev.total_energy_consumption() {
                Ok(_) => ids[ENERGY] = out.add("hw.energy", "J", SeriesKind::Counter, with(&[])),
                Err(_) => unsupported |= 1 << ENERGY,
            }
            devs.push(GpuDev {
                index,
                ids,
                unsupported,
                error_logged: false,
            });
        }
        let status = if devs.is_empty() {
            format!("no GPU: NVML found no usable device (driver {driver})")
        } else {
            let s = if devs.len() == 1 { "" } else { "s" };
            format!("{} GPU{s} via NVML (driver {driver})", devs.len())
        };
        tracing::info!("sampler: {status}");
        let nvml = if devs.is_empty() { None } else { Some(nvml) };
        Self { status, nvml, devs }
    }

    pub(crate) fn read(&mut self, out: &mut Out) {
        let Some(nvml) = &self.nvml else { return };
        for d in &mut self.devs {
            let dev = match nvml.device_by_index(d.index) {
                Ok(dev) => dev,
                Err(e) => {
                    log_once(&mut d.error_logged, d.index, "handle", &e);
                    continue;
                }
            };
            // Each reading: skip if known unsupported; on NotSupported mark it.
            macro_rules! get {
                ($field:expr, $call:expr) => {{
                    if d.unsupported & (1 << $field) != 0 {
                        None
                    } else {
                        match $call {
                            Ok(v) => Some(v),
                            Err(NvmlError::NotSupported) => {
                                d.unsupported |= 1 << $field;
                                None
                            }
                            Err(e) => {
                                log_once(&mut d.error_logged, d.index, stringify!($call), &e);
                                None
                            }
                        }
                    }
                }};
            }
            if let Some(u) = get!(UTIL, dev.utilization_rates()) {
                out.set(d.ids[UTIL], f64::from(u.gpu) / 100.0);
            }
            if let Some(m) = get!(MEM_USED, dev.memory_info()) {
                out.set(d.ids[MEM_USED], m.used as f64);
                out.set(d.ids[MEM_TOTAL], m.total as f64);
                if m.total > 0 {
                    out.set(d.ids[MEM_UTIL], m.used as f64 / m.total as f64);
                }
            }
            if let Some(mw) = get!(POWER, dev.power_usage()) {
                out.set(d.ids[POWER], f64::from(mw) / 1000.0);
            }
            if let Some(c) = get!(TEMP, dev.temperature(TemperatureSensor::Gpu)) {
                out.set(d.ids[TEMP], f64::from(c));
            }
            if let Some(mhz) = get!(CLOCK_SM, dev.clock_info(Clock::SM)) {
                out.set(d.ids[CLOCK_SM], f64::from(mhz));
            }
            if let Some(mj) = get!(ENERGY, dev.total_energy_consumption()) {
                out.set(d.ids[ENERGY], mj as f64 / 1000.0);
            }
        }
    }
}

fn log_once(flag: &mut bool, index: u32, what: &str, e: &NvmlError) {
    if !*flag {
        *flag = true;
        tracing::warn!("sampler: GPU {index}: {what} failed: {e}; NaN while it fails (logged once)");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn off_in_config() {
        let (mut series, mut values) = (Vec::new(), Vec::new());
        let mut out = Out {
            series: &mut series,
            values: &mut values,
        };
        let r = GpuReader::new(
            &SamplerConfig {
                gpu: false,
                ..Default::default()
            },
            &mut out,
        );
        assert_eq!(r.status(), "GPU sampling off in config");
        assert!(series.is_empty());
    }

    /// On a machine without NVIDIA's driver: a status, no series, no panic;
    /// on one with it: a status naming the driver and series per GPU.
    #[test]
    fn this_machine() {
        let (mut series, mut values) = (Vec::new(), Vec::new());
        let mut out = Out {
            series: &mut series,
            values: &mut values,
        };
        let mut r = GpuReader::new(&SamplerConfig::default(), &mut out);
        eprintln!("gpu status: {}", r.status());
        if r.status().starts_with("no GPU") {
            assert!(series.is_empty());
        } else {
            assert!(r.status().contains("via NVML (driver "), "{}", r.status());
            assert!(series.len() >= 7);
            assert!(series.iter().all(|s| s.attributes.iter().any(|(k, _)| k == "hw.id")));
        }
        let n = series.len();
        let mut out = Out {
            series: &mut series,
            values: &mut values,
        };
        values_reset(&mut out, n);
        r.read(&mut out);
        assert_eq!(values.len(), n);
    }

    fn values_reset(out: &mut Out, n: usize) {
        out.values.clear();
        out.values.resize(n, f64::NAN);
    }
}
