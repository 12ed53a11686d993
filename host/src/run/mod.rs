//! The host process: wires the sampler, the plugins, the pipeline and the API
//! together, prints where everything is, and shuts down within a deadline.
//!
//! Here: the runtime, `Host::start` and its steps, and shutdown. Beside it:
//! `banner.rs` prints where everything is, `self_metrics.rs` exports the
//! host's own metrics.

mod banner;
mod self_metrics;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use parking_lot::Mutex;

use crate::api::{self, AppState};
use crate::cluster::{self, Cluster, Role};
use crate::config::Config;
use crate::export::resource::resource_attributes;
use crate::ingest::config::IngestConfig;
use crate::ingest::limits::Limits;
use crate::ingest::{self, IngestHub};
use crate::pipeline::{Pipeline, PipelineHandle};
use crate::plugin::PluginManager;
use crate::sample::{Sampler, driver};
use banner::print_banner;
use self_metrics::self_metrics_loop;

/// The host's tokio runtime: one worker thread ("sonde-worker") and the
/// blocking pool ("sonde-blocking"), named apart so that a per-thread
/// breakdown (`./dev bench`) reads by role. Tokio starts its workers while the
/// runtime is built, before any blocking thread, so the first thread named is
/// the worker.
pub fn runtime() -> std::io::Result<tokio::runtime::Runtime> {
    let named = std::sync::atomic::AtomicUsize::new(0);
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .thread_name_fn(move || match named.fetch_add(1, Ordering::Relaxed) {
            0 => "sonde-worker".into(),
            _ => "sonde-blocking".into(),
        })
        .build()
}

/// Runs until SIGINT/SIGTERM.
pub async fn run(cfg: Config) -> Result<()> {
    let host = Host::start(cfg, HostOptions::default()).await?;
    host.print_banner();
    // Start-up is over: what only it ran need not stay resident; again once
    // the first rounds of everything after it have run, then now and then.
    let dropping = tokio::spawn(crate::footprint::keep_dropping_unused_code_pages());
    // A burst's heap goes back to the OS once it is over.
    let trimming = tokio::spawn(crate::footprint::keep_heap_trimmed());
    wait_for_signal().await;
    dropping.abort();
    trimming.abort();
    tracing::info!("shutting down");
    host.shutdown(true).await;
    Ok(())
}

/// What differs when the host runs inside another program (the in-process agent).
#[derive(Clone, Debug)]
pub struct HostOptions {
    /// Serve the HTTP API and dashboard (`api.listen`).
    pub api: bool,
    /// Start the OTLP receivers (`ingest.otlp_*_listen`).
    pub otlp: bool,
}

impl Default for HostOptions {
    fn default() -> Self {
        HostOptions { api: true, otlp: true }
    }
}

/// A running host: sampler, plugins, ingest, pipeline, API.
pub struct Host {
    pub cfg: Config,
    pub plugins: Arc<PluginManager>,
    pub hub: Arc<IngestHub>,
    pub pipeline: PipelineHandle,
    pub receivers: Vec<ingest::otlp::Bound>,
    pub api_addr: Option<std::net::SocketAddr>,
    pub cluster: Arc<Cluster>,
    pub storage: Arc<crate::storage::Storage>,
    started: Instant,
    series_count: usize,
    gpu: String,
    pipeline_task: Pipeline,
    watcher: Option<crate::plugin::manager::Watcher>,
    sampler: Arc<Mutex<Option<driver::SamplerHandle>>>,
    selfm: tokio::task::JoinHandle<()>,
    hub_task: tokio::task::JoinHandle<()>,
    stop_tx: tokio::sync::watch::Sender<bool>,
    server: Option<tokio::task::JoinHandle<std::io::Result<()>>>,
}

impl Host {
    /// Starts everything; must be called inside a multi-threaded tokio runtime.
    pub async fn start(cfg: Config, opts: HostOptions) -> Result<Host> {
        let started = Instant::now();
        // Certificates first: a file that went missing since the config check
        // stops the host before any part of it runs.
        let load = |t: &Option<crate::tls::ServerTls>, key: &str| {
            t.as_ref().map(|t| crate::tls::server_config(t, key)).transpose()
        };
        let ingest_tls = load(&cfg.ingest.tls, "ingest.tls")?;
        let api_tls = load(&cfg.api.tls, "api.tls")?;
        cfg.sampler.check_mounts()?;
        std::fs::create_dir_all(&cfg.host.data_dir)
            .with_context(|| format!("creating the data directory {}", cfg.host.data_dir.display()))?;
        let (pipeline_handle, pipeline) = Pipeline::start(
            &cfg.export.with_spool_dir(&cfg.host.data_dir),
            resource_attributes(&cfg),
        )?;
        let (plugins, watcher) = start_plugins(&cfg, &pipeline_handle).await?;
        let sampling = start_sampler(&cfg, &plugins);
        let sampler = sampling.handle;

        // What jobs report: one hub, handed to the plugins every flush_ms.
        let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
        let (hub, hub_task) = start_hub(&cfg, &plugins, sampling.gpu_watch, &stop_rx);

        let storage = Arc::new(crate::storage::Storage::start(
            &cfg.storage,
            cfg.cluster.role == Role::Master,
            &cfg.host.data_dir,
            &pipeline_handle,
            resource_attributes(&cfg),
        )?);
        if let Some(h) = storage.history.clone() {
            // Every group commit writes and syncs the history's WAL first: an
            // agent's points are on disk before the agent is answered.
            hub.commits.add_barrier(Arc::new(HistoryWal(h.clone())));
            tokio::spawn(watch_history_writes(h, hub.commits.clone(), stop_rx.clone()));
        }
        let cluster = Arc::new(start_cluster(
            &cfg,
            &hub,
            &pipeline_handle,
            &plugins,
            storage.history.clone(),
            stop_rx.clone(),
        ));
        // Not ready until the receivers listen (they start last, below).
        let ready = Arc::new(AtomicBool::new(false));
        let (mut api_addr, mut server) = (None, None);
        if opts.api {
            let series_count = sampling.series_count;
            let sampler_for_api = sampler.clone();
            let app = AppState {
                config: Arc::new(Mutex::new(cfg.clone())),
                plugins: plugins.clone(),
                pipeline: pipeline_handle.clone(),
                sampler: Arc::new(move || {
                    sampler_for_api
                        .lock()
                        .as_ref()
                        .map(|s| (s.stats(), series_count, s.gpu_status(), s.scheduling()))
                }),
                ready: ready.clone(),
                started,
                cluster: cluster.clone(),
                storage: storage.clone(),
                ingest: hub.clone(),
            };
            let (addr, task) = serve_api(&cfg, app, api_tls, &stop_rx).await?;
            (api_addr, server) = (addr, Some(task));
        }

        // The receivers last: a request taken before the job registry, the
        // remote-points tap and the history were in place would be answered
        // OK (and its number remembered) without reaching them.
        let receivers = if opts.otlp {
            start_receivers(&cfg, &hub, &pipeline_handle, ingest_tls, &stop_rx).await
        } else {
            Vec::new()
        };
        ready.store(true, std::sync::atomic::Ordering::Release);

        let selfm = match cfg.export.self_metrics_interval_ms {
            0 => tokio::spawn(async {}),
            ms => tokio::spawn(self_metrics_loop(
                plugins.clone(),
                hub.clone(),
                pipeline_handle.clone(),
                sampler.clone(),
                Duration::from_millis(ms),
            )),
        };
        Ok(Host {
            cfg,
            plugins,
            hub,
            pipeline: pipeline_handle,
            receivers,
            api_addr,
            cluster,
            storage,
            started,
            series_count: sampling.series_count,
            gpu: sampling.gpu,
            pipeline_task: pipeline,
            watcher,
            sampler,
            selfm,
            hub_task,
            stop_tx,
            server,
        })
    }

    /// Stops everything within `host.shutdown_timeout_ms`. With `watchdog`, a
    /// step that hangs ends the process (the sonde binary); embedded hosts pass false.
    pub async fn shutdown(self, watchdog: bool) {
        let cfg = &self.cfg;
        let deadline = Duration::from_millis(cfg.host.shutdown_timeout_ms);
        let t0 = Instant::now();
        if watchdog {
            std::thread::spawn(move || {
                std::thread::sleep(deadline + Duration::from_secs(2));
                eprintln!(
                    "sonde: shutdown took longer than {} ms; exiting anyway",
                    deadline.as_millis()
                );
                std::process::exit(1);
            });
        }
        self.selfm.abort();
        self.cluster.stop();
        drop(self.watcher);
        if let Some(s) = self.sampler.lock().take() {
            s.stop();
        }
        // Receivers stop taking requests; what the hub holds goes to the plugins
        // before they stop, so their `stop` hooks see everything reported.
        let _ = self.stop_tx.send(true);
        let _ = tokio::time::timeout(deadline / 4, self.hub_task).await;
        let per_plugin = Duration::from_millis(cfg.plugins.call_timeout_ms as u64 + 200).min(deadline / 2);
        let p = self.plugins.clone();
        let commits = self.hub.commits.clone();
        let _ = tokio::time::timeout(
            deadline / 2,
            tokio::task::spawn_blocking(move || {
                // The receivers are stopped: every request taken is in the
                // windows, every report in the jobs.
                commits.flush();
                p.shutdown(per_plugin);
                // The findings the plugins published, on disk before the store closes.
                p.decisions().close();
                // Plugins' state writes, committed behind their calls.
                if let Err(e) = p.state().flush(per_plugin) {
                    tracing::warn!("{e:#}");
                }
            }),
        )
        .await;
        let stats = self.pipeline_task.shutdown(deadline.saturating_sub(t0.elapsed())).await;
        self.storage.shutdown(deadline.saturating_sub(t0.elapsed()) / 2).await;
        if let Some(server) = self.server {
            let _ = tokio::time::timeout(Duration::from_millis(500), server).await;
        }
        tracing::info!(
            points_exported = stats.points_exported,
            points_dropped = stats.points_dropped,
            points_failed = stats.points_failed,
            "stopped in {} ms",
            t0.elapsed().as_millis()
        );
    }

    fn print_banner(&self) {
        print_banner(
            &self.cfg,
            &self.plugins,
            self.series_count,
            &self.gpu,
            &self.receivers,
            self.started,
        );
    }
}

/// The history as a barrier of the group commit (`ingest/durable.rs`).
struct HistoryWal(Arc<crate::history::History>);

impl ingest::durable::Barrier for HistoryWal {
    fn sync(&self) -> Result<(), String> {
        self.0.sync_wal()
    }
}

/// Every 500 ms: while the history's I/O errors grow (a full disk), and
/// for 2 s after the last one, sondes' requests are refused (so their
/// senders keep them) instead of being taken and lost on the way to disk.
async fn watch_history_writes(
    history: Arc<crate::history::History>,
    commits: Arc<ingest::durable::Commits>,
    mut stop: tokio::sync::watch::Receiver<bool>,
) {
    let mut tick = tokio::time::interval(Duration::from_millis(500));
    let (mut seen, mut last_error) = (history.stats().io_errors, None::<Instant>);
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            r = stop.changed() => if r.is_err() || *stop.borrow() { break },
        }
        let now = history.stats().io_errors;
        if now > seen {
            last_error = Some(Instant::now());
        }
        seen = now;
        let failing = last_error.is_some_and(|t| t.elapsed() < Duration::from_secs(2));
        commits.hold(failing.then(|| "the history cannot write (see storage.history io_errors)".to_string()));
    }
}

/// The bearer tokens an OTLP receiver on `listen` accepts (none: open).
/// Beyond loopback `api.token` is required, as for the API; on a master,
/// `cluster.token` admits its agents wherever the receiver listens.
fn receiver_tokens(cfg: &Config, listen: &str) -> Vec<String> {
    let mut tokens = Vec::new();
    let wide = listen
        .parse::<std::net::SocketAddr>()
        .is_ok_and(|a| !a.ip().is_loopback());
    let cluster = cfg.cluster.role == Role::Master && cfg.cluster.token().is_some();
    if wide || cluster {
        tokens.extend(cfg.api.token());
    }
    if cluster {
        tokens.extend(cfg.cluster.token().map(str::to_string));
    }
    if wide && tokens.is_empty() {
        // The config check refuses a wide receiver without api.token; should
        // one get here anyway, the list must not be empty, which would mean open.
        tokens.push(String::new());
    }
    tokens
}

/// The plugin manager, with what the plugin directory holds loaded before
/// sampling starts (off the async threads), and its watcher when
/// `plugins.watch` is on.
async fn start_plugins(
    cfg: &Config,
    pipeline: &PipelineHandle,
) -> Result<(Arc<PluginManager>, Option<crate::plugin::manager::Watcher>)> {
    let plugins = PluginManager::new(cfg, pipeline.clone())?;
    let p = plugins.clone();
    tokio::task::spawn_blocking(move || p.scan(false)).await?;
    let watcher = if cfg.plugins.watch {
        Some(plugins.watch()?)
    } else {
        None
    };
    Ok((plugins, watcher))
}

/// The sampler's thread, ticking into the plugins, and what the rest of the
/// start needs to know of it.
struct Sampling {
    handle: Arc<Mutex<Option<driver::SamplerHandle>>>,
    series_count: usize,
    gpu: String,
    gpu_watch: crate::sample::gpu::GpuWatch,
}

fn start_sampler(cfg: &Config, plugins: &Arc<PluginManager>) -> Sampling {
    let sampler = Sampler::new(&cfg.sampler);
    let series_count = sampler.series().len();
    let gpu = sampler.gpu_status().to_string();
    let fanout = plugins.clone();
    let driver_cfg = driver::DriverConfig {
        period: plugins.sample_plan().period_ms.clone(),
        realtime: cfg.sampler.realtime,
    };
    let gpu_watch = sampler.gpu_watch();
    let sampler = driver::spawn_with(sampler, driver_cfg, move |tick, series| fanout.on_tick(tick, series));
    Sampling {
        handle: Arc::new(Mutex::new(Some(sampler))),
        series_count,
        gpu,
        gpu_watch,
    }
}

/// The ingest hub and its flush loop, with the sampler's GPU events
/// forwarded into it.
fn start_hub(
    cfg: &Config,
    plugins: &Arc<PluginManager>,
    gpu_watch: crate::sample::gpu::GpuWatch,
    stop_rx: &tokio::sync::watch::Receiver<bool>,
) -> (Arc<IngestHub>, tokio::task::JoinHandle<()>) {
    let to_plugins = plugins.clone();
    // An agent keeps rows of tables none of its plugins declares: its master's may.
    let hub = IngestHub::with_tables(
        cfg.ingest.queue_capacity,
        Arc::new(move |b| to_plugins.publish_events(b)),
        plugins.tables(),
        cfg.cluster.role == Role::Agent,
    );
    tokio::spawn(forward_gpu_events(
        gpu_watch,
        hub.clone(),
        resource_attributes(cfg),
        stop_rx.clone(),
    ));
    let hub_task = tokio::spawn(
        hub.clone()
            .run(Duration::from_millis(cfg.ingest.flush_ms), stop_rx.clone()),
    );
    // The requests taken so far, by sender and number: a repeat after a restart is still one.
    let restored = hub
        .dedup
        .restore_from(&plugins.state().namespace(ingest::dedup::NAMESPACE));
    if restored > 0 {
        tracing::info!(producers = restored, "request windows of earlier runs restored");
    }
    hub.commits.attach(plugins.state().clone());
    hub.commits.add(hub.dedup.clone());
    tokio::spawn(hub.commits.clone().run(stop_rx.clone()));
    (hub, hub_task)
}

/// The OTLP receivers (gRPC, HTTP) on the addresses configured.
async fn start_receivers(
    cfg: &Config,
    hub: &Arc<IngestHub>,
    pipeline: &PipelineHandle,
    tls: Option<Arc<rustls::ServerConfig>>,
    stop_rx: &tokio::sync::watch::Receiver<bool>,
) -> Vec<ingest::otlp::Bound> {
    let mut receivers = Vec::new();
    let receiver = |listen: &str| ingest::otlp::Receiver {
        hub: hub.clone(),
        forward: cfg.ingest.forward.then(|| pipeline.clone()),
        tokens: receiver_tokens(cfg, listen),
        max_body: cfg.ingest.max_body_bytes,
        limits: Limits::from(&cfg.ingest),
    };
    let max = cfg.ingest.max_body_bytes;
    for (protocol, listen) in [
        ("gRPC", &cfg.ingest.otlp_grpc_listen),
        ("HTTP", &cfg.ingest.otlp_http_listen),
    ] {
        let Some(l) = IngestConfig::address(listen) else {
            continue;
        };
        let router = match protocol {
            "gRPC" => ingest::otlp::grpc_router(receiver(l), max),
            _ => ingest::otlp::http_router(receiver(l), max),
        };
        let tls = tls.as_ref().map(|c| ingest::otlp::ServeTls {
            config: c.clone(),
            refused: hub.tls_refused.clone(),
        });
        receivers.push(ingest::otlp::serve(protocol, l, router, tls, stop_rx.clone()).await);
    }
    receivers
}

/// The HTTP API and dashboard on `api.listen`, with the JSON ingest beside
/// them; returns the address it bound and the server's task.
async fn serve_api(
    cfg: &Config,
    app: AppState,
    tls: Option<Arc<rustls::ServerConfig>>,
    stop_rx: &tokio::sync::watch::Receiver<bool>,
) -> Result<(
    Option<std::net::SocketAddr>,
    tokio::task::JoinHandle<std::io::Result<()>>,
)> {
    let listener = tokio::net::TcpListener::bind(&cfg.api.listen)
        .await
        .with_context(|| format!("binding the API to {} (api.listen)", cfg.api.listen))?;
    let api_addr = listener.local_addr().ok();
    let hub = app.ingest.clone();
    let live_config = app.config.clone();
    let ingest_api = ingest::json::router(
        ingest::json::IngestState {
            hub: hub.clone(),
            limits: Limits::from(&cfg.ingest),
            token: Arc::new(move || live_config.lock().api.token()),
            stacks: Default::default(),
        },
        cfg.ingest.max_body_bytes,
    );
    let mut stop = stop_rx.clone();
    let stopped = async move {
        let _ = stop.wait_for(|s| *s).await;
    };
    // The JSON ingest is inside the error layer too, so that its
    // 405s answer in the API's shape.
    let app = api::router(app)
        .merge(ingest_api)
        .layer(axum::middleware::from_fn(api::errors::json_errors));
    let server = match tls {
        None => tokio::spawn(async move { axum::serve(listener, app).with_graceful_shutdown(stopped).await }),
        Some(c) => {
            let l = crate::tls::TlsListener::new(listener, c, hub.tls_refused.clone(), "API")?;
            tokio::spawn(async move { axum::serve(l, app).with_graceful_shutdown(stopped).await })
        }
    };
    Ok((api_addr, server))
}

/// The cluster side for this host's role (see `crate::cluster`).
fn start_cluster(
    cfg: &Config,
    hub: &Arc<IngestHub>,
    pipeline: &PipelineHandle,
    plugins: &Arc<PluginManager>,
    history: Option<Arc<crate::history::History>>,
    stop: tokio::sync::watch::Receiver<bool>,
) -> Cluster {
    let resource = resource_attributes(cfg);
    let node = resource
        .iter()
        .find(|(k, _)| k == "host.name")
        .map(|(_, v)| v.text())
        .unwrap_or_default();
    let master_client = match cfg.cluster.role {
        Role::Agent => match cfg.cluster.master.as_deref().map(|m| {
            let mut e = cfg.export.clone();
            e.endpoint = Some(m.to_string());
            e.protocol = crate::export::config::Protocol::Grpc;
            crate::export::client::Client::new(&e)
        }) {
            Some(Ok(c)) => Some(c),
            Some(Err(e)) => {
                tracing::warn!("no heartbeat to the master: {e:#}");
                None
            }
            None => None,
        },
        _ => None,
    };
    let p = plugins.clone();
    Cluster::start(cluster::Parts {
        cfg: &cfg.cluster,
        export_interval_ms: cfg.export.interval_ms,
        node,
        hub,
        pipeline,
        decisions: plugins.decisions().clone(),
        master_client,
        resource,
        state: Some(plugins.state().clone()),
        history,
        plugin_names: Arc::new(move || {
            let mut loaded = Vec::new();
            let mut unhealthy = Vec::new();
            for s in p.statuses() {
                use crate::plugin::RunState::*;
                match s.state {
                    Running => loaded.push(s.name),
                    Backoff | Quarantined | Failed => unhealthy.push(s.name),
                    Disabled | Stopped => {}
                }
            }
            (loaded, unhealthy)
        }),
        stop,
    })
}

async fn wait_for_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term =
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).expect("SIGTERM handler");
        tokio::select! {
            _ = ctrl_c => {},
            _ = term.recv() => {},
        }
    }
    #[cfg(not(unix))]
    let _ = ctrl_c.await;
}

/// Hands the GPU sampler's events (an XID error, a GPU lost) to the plugins as
/// node events of this host (origin role "host", node = `host.name`, no job),
/// through the same hub as what jobs report, as they arrive (it sleeps until then).
async fn forward_gpu_events(
    watch: crate::sample::gpu::GpuWatch,
    hub: Arc<IngestHub>,
    resource: Vec<(String, crate::model::AttrValue)>,
    mut stop: tokio::sync::watch::Receiver<bool>,
) {
    use crate::model::AttrValue;
    let node = resource
        .iter()
        .find(|(k, _)| k == "host.name")
        .map(|(_, v)| v.text())
        .unwrap_or_default();
    loop {
        tokio::select! {
            _ = watch.arrived() => {}
            _ = stop.wait_for(|s| *s) => return,
        }
        let events = watch.take_events();
        if events.is_empty() {
            continue;
        }
        let report = ingest::Report {
            origin: ingest::Origin {
                node: node.clone(),
                role: "host".into(),
                ..Default::default()
            },
            node_events: events
                .into_iter()
                .map(|e| ingest::NodeEvent {
                    time: e.time_ns,
                    kind: e.kind.into(),
                    exit_code: e.code,
                    reason: e.reason,
                    attributes: vec![
                        ("hw.id".into(), AttrValue::from(e.gpu)),
                        ("sonde.gpu.index".into(), AttrValue::Int(i64::from(e.index))),
                    ],
                })
                .collect(),
            ..Default::default()
        };
        if let Err(e) = hub.submit(&report) {
            tracing::warn!("GPU events dropped: {e}");
        }
    }
}
