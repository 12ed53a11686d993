//! Contract 0.1, the previous minor version, which the host keeps loading
//! (the WIT's promise: the current and the previous minor).
//!
//! ```text
//!  wit/0.1/sonde-plugin.wit (frozen) ──bindgen──► v0_1::Plugin, its `host` interface
//!     types: the 0.2 types where 0.1 had the same ones (`types` below),
//!            0.1's own where they differ: event-kind, the three column
//!            groups, event-batch, manifest, sink-spec
//!  adapt.rs     0.1 manifest ──► 0.2 manifest (+ the tables its kinds read)
//!               0.2 event batch ──► 0.1 event batch (tables ──► columns, by name)
//!  tables.rs    the `requests`, `actions`, `mpi_samples` tables 0.1's kinds
//!               stand for, declared for a 0.1 plugin that subscribes to them
//! ```
//! The 0.1 `host` interface is implemented by the 0.2 one: every function is
//! the same but `open-sink`, whose spec had no default directory.
//!
//! The component model checks types by structure, so a 0.2 type stands in
//! for its 0.1 twin wherever the two are spelled alike; only the types that
//! differ are written out here, with the names 0.1 gave their fields.

pub mod adapt;
pub mod tables;

use super::bindings::{sonde::plugin::host as current_host, types as current};
use super::host_api::PluginState;

wasmtime::component::bindgen!({
    world: "plugin",
    path: "../wit/0.1",
    with: { "sonde:plugin/types@0.1.0": crate::plugin::v0_1::types },
});

pub use self::exports::sonde::plugin::hooks;

/// The 0.1 `types` interface: the 0.2 types it shares, and its own.
pub mod types {
    use wasmtime::component::{ComponentType, Lift, Lower};

    pub use crate::plugin::bindings::types::{
        Attribute, Column, CustomEvent, Decision, HeartbeatColumns, Host, HostWithStore, HttpRequest, HttpResponse,
        LogRecord, MetricDesc, MetricKind, NodeEvent, Origin, PointBatch, PointColumns, ProgressColumns, SampleBatch,
        SampleRequest, SeriesInfo, SeriesKind, Severity, SinkFormat, SinkMode, StartInfo, Timestamp, TimingColumns,
        Value,
    };

    /// The interface holds types only: its instance is empty, but a 0.1
    /// component imports it by its own name, which must exist in the linker.
    pub fn add_to_linker<T, D>(
        linker: &mut wasmtime::component::Linker<T>,
        _host_getter: fn(&mut T) -> D::Data<'_>,
    ) -> wasmtime::Result<()>
    where
        D: HostWithStore<T>,
        for<'a> D::Data<'a>: Host,
        T: 'static,
    {
        linker.instance("sonde:plugin/types@0.1.0")?;
        Ok(())
    }

    #[derive(ComponentType, Lift, Lower, Clone, Copy, Debug, PartialEq, Eq)]
    #[component(enum)]
    #[repr(u8)]
    pub enum EventKind {
        #[component(name = "progress")]
        Progress,
        #[component(name = "timings")]
        Timings,
        #[component(name = "requests")]
        Requests,
        #[component(name = "actions")]
        Actions,
        #[component(name = "mpi-samples")]
        MpiSamples,
        #[component(name = "heartbeats")]
        Heartbeats,
        #[component(name = "points")]
        Points,
        #[component(name = "node-events")]
        NodeEvents,
        #[component(name = "custom")]
        Custom,
    }

    #[derive(ComponentType, Lift, Lower, Clone, Debug, Default, PartialEq)]
    #[component(record)]
    pub struct RequestColumns {
        #[component(name = "origin")]
        pub origin: Vec<u32>,
        #[component(name = "request-id")]
        pub request_id: Vec<u64>,
        #[component(name = "user-id")]
        pub user_id: Vec<u64>,
        #[component(name = "model-id")]
        pub model_id: Vec<u64>,
        #[component(name = "slo-factor")]
        pub slo_factor: Vec<f64>,
        #[component(name = "arrival")]
        pub arrival: Vec<u64>,
        #[component(name = "departure")]
        pub departure: Vec<u64>,
        #[component(name = "deadline")]
        pub deadline: Vec<u64>,
        #[component(name = "result")]
        pub result: Vec<i32>,
        #[component(name = "arrival-copies")]
        pub arrival_copies: Vec<u32>,
        #[component(name = "departure-copies")]
        pub departure_copies: Vec<u32>,
        #[component(name = "action-id")]
        pub action_id: Vec<u64>,
        #[component(name = "client-sent")]
        pub client_sent: Vec<u64>,
        #[component(name = "client-received")]
        pub client_received: Vec<u64>,
    }

    #[derive(ComponentType, Lift, Lower, Clone, Debug, Default, PartialEq)]
    #[component(record)]
    pub struct ActionColumns {
        #[component(name = "origin")]
        pub origin: Vec<u32>,
        #[component(name = "action-id")]
        pub action_id: Vec<u64>,
        #[component(name = "action-type")]
        pub action_type: Vec<u8>,
        #[component(name = "status")]
        pub status: Vec<i32>,
        #[component(name = "worker-id")]
        pub worker_id: Vec<u32>,
        #[component(name = "gpu-id")]
        pub gpu_id: Vec<u32>,
        #[component(name = "model-id")]
        pub model_id: Vec<u64>,
        #[component(name = "batch-size")]
        pub batch_size: Vec<u32>,
        #[component(name = "expected-exec-duration")]
        pub expected_exec_duration: Vec<u64>,
        #[component(name = "worker-exec-duration")]
        pub worker_exec_duration: Vec<u64>,
        #[component(name = "sent")]
        pub sent: Vec<u64>,
        #[component(name = "expected-exec-complete")]
        pub expected_exec_complete: Vec<u64>,
        #[component(name = "worker-exec-complete")]
        pub worker_exec_complete: Vec<u64>,
        #[component(name = "expected-gpu-clock")]
        pub expected_gpu_clock: Vec<u32>,
        #[component(name = "gpu-clock-before")]
        pub gpu_clock_before: Vec<u32>,
        #[component(name = "gpu-clock-after")]
        pub gpu_clock_after: Vec<u32>,
        #[component(name = "copy-output-complete")]
        pub copy_output_complete: Vec<u64>,
        #[component(name = "action-received")]
        pub action_received: Vec<u64>,
        #[component(name = "result-sent")]
        pub result_sent: Vec<u64>,
        #[component(name = "result-received")]
        pub result_received: Vec<u64>,
        #[component(name = "result-processed")]
        pub result_processed: Vec<u64>,
        #[component(name = "requests-queued")]
        pub requests_queued: Vec<u32>,
        #[component(name = "copies-loaded")]
        pub copies_loaded: Vec<u32>,
        #[component(name = "requests-in-time")]
        pub requests_in_time: Vec<u32>,
    }

    #[derive(ComponentType, Lift, Lower, Clone, Debug, Default, PartialEq)]
    #[component(record)]
    pub struct MpiSampleColumns {
        #[component(name = "origin")]
        pub origin: Vec<u32>,
        #[component(name = "thread")]
        pub thread: Vec<u32>,
        #[component(name = "time")]
        pub time: Vec<u64>,
        #[component(name = "state")]
        pub state: Vec<u8>,
        #[component(name = "function")]
        pub function: Vec<u32>,
        #[component(name = "callsite")]
        pub callsite: Vec<u32>,
        #[component(name = "count")]
        pub count: Vec<u32>,
        #[component(name = "period-ns")]
        pub period_ns: Vec<u64>,
    }

    #[derive(ComponentType, Lift, Lower, Clone, Debug)]
    #[component(record)]
    pub struct EventBatch {
        #[component(name = "origins")]
        pub origins: Vec<Origin>,
        #[component(name = "names")]
        pub names: Vec<String>,
        #[component(name = "point-series")]
        pub point_series: Vec<SeriesInfo>,
        #[component(name = "progress")]
        pub progress: Option<ProgressColumns>,
        #[component(name = "timings")]
        pub timings: Option<TimingColumns>,
        #[component(name = "requests")]
        pub requests: Option<RequestColumns>,
        #[component(name = "actions")]
        pub actions: Option<ActionColumns>,
        #[component(name = "mpi-samples")]
        pub mpi_samples: Option<MpiSampleColumns>,
        #[component(name = "heartbeats")]
        pub heartbeats: Option<HeartbeatColumns>,
        #[component(name = "points")]
        pub points: Option<PointColumns>,
        #[component(name = "node-events")]
        pub node_events: Vec<NodeEvent>,
        #[component(name = "custom")]
        pub custom: Vec<CustomEvent>,
    }

    #[derive(ComponentType, Lift, Lower, Clone, Debug)]
    #[component(record)]
    pub struct Manifest {
        #[component(name = "version")]
        pub version: String,
        #[component(name = "description")]
        pub description: String,
        #[component(name = "samples")]
        pub samples: Option<SampleRequest>,
        #[component(name = "events")]
        pub events: Vec<EventKind>,
    }

    #[derive(ComponentType, Lift, Lower, Clone, Debug)]
    #[component(record)]
    pub struct SinkSpec {
        #[component(name = "name")]
        pub name: String,
        #[component(name = "format")]
        pub format: SinkFormat,
        #[component(name = "mode")]
        pub mode: SinkMode,
        #[component(name = "columns")]
        pub columns: Vec<String>,
    }
}

/// 0.1's `host` interface: the 0.2 functions, with `open-sink`'s spec
/// given the 0.2 form (no default directory: `sinks.dir`).
impl sonde::plugin::host::Host for PluginState {
    fn log(&mut self, level: current::Severity, message: String) {
        current_host::Host::log(self, level, message)
    }
    fn now(&mut self) -> u64 {
        current_host::Host::now(self)
    }
    fn set_timer(&mut self, after_ms: u64, repeat: bool) -> u64 {
        current_host::Host::set_timer(self, after_ms, repeat)
    }
    fn cancel_timer(&mut self, id: u64) {
        current_host::Host::cancel_timer(self, id)
    }
    fn request_samples(&mut self, request: Option<current::SampleRequest>) {
        current_host::Host::request_samples(self, request)
    }
    fn declare_metric(&mut self, desc: current::MetricDesc) -> Result<u32, String> {
        current_host::Host::declare_metric(self, desc)
    }
    fn emit_points(&mut self, points: current::PointBatch) {
        current_host::Host::emit_points(self, points)
    }
    fn emit_logs(&mut self, records: Vec<current::LogRecord>) {
        current_host::Host::emit_logs(self, records)
    }
    fn emit_decision(&mut self, d: current::Decision) {
        current_host::Host::emit_decision(self, d)
    }
    fn open_sink(&mut self, spec: types::SinkSpec) -> Result<u32, String> {
        let spec = current::SinkSpec {
            name: spec.name,
            format: spec.format,
            mode: spec.mode,
            columns: spec.columns,
            default_dir: None,
        };
        current_host::Host::open_sink(self, spec)
    }
    fn write_rows(&mut self, sink: u32, columns: Vec<current::Column>) -> Result<(), String> {
        current_host::Host::write_rows(self, sink, columns)
    }
    fn write_bytes(&mut self, sink: u32, data: Vec<u8>) -> Result<(), String> {
        current_host::Host::write_bytes(self, sink, data)
    }
    fn state_get(&mut self, key: String) -> Option<Vec<u8>> {
        current_host::Host::state_get(self, key)
    }
    fn state_put(&mut self, key: String, value: Vec<u8>) -> Result<(), String> {
        current_host::Host::state_put(self, key, value)
    }
    fn state_delete(&mut self, key: String) {
        current_host::Host::state_delete(self, key)
    }
    fn state_keys(&mut self, prefix: String) -> Vec<String> {
        current_host::Host::state_keys(self, prefix)
    }
    fn state_append(&mut self, stream: String, record: Vec<u8>) -> Result<u64, String> {
        current_host::Host::state_append(self, stream, record)
    }
    fn state_read(&mut self, stream: String, from: u64, max: u32) -> Vec<(u64, Vec<u8>)> {
        current_host::Host::state_read(self, stream, from, max)
    }
    fn state_trim(&mut self, stream: String, before: u64) {
        current_host::Host::state_trim(self, stream, before)
    }
}
