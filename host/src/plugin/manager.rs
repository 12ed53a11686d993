//! The set of plugins: loaded from the plugins directory at start, kept in
//! step with it while running, fed with samples, and asked by the API.
//!
//! Directory rules: every `*.wasm` file is a plugin named after its file stem.
//! Hidden files and `*.tmp` are ignored (so an upload written to a temporary
//! name and renamed appears at once, whole). A changed file is acted on only
//! once its size and mtime have been stable for 200 ms; then it is compiled,
//! checked and started *beside* the running version, which is replaced only
//! if the new one started. A file that fails is reported and never disturbs
//! the running set.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use anyhow::{Context, Result};
use parking_lot::{Mutex, RwLock};
use sha2::{Digest, Sha256};
use wasmtime::component::{HasSelf, Linker};

use super::bindings::{Plugin, types};
use super::config::{PluginConfig, PluginsConfig, check_plugin_name};
use super::engine::PluginEngine;
use super::host_api::PluginState;
use super::instance::{self, PluginHandle, Prepared, Shared, Subscription, Work};
use super::output::Output;
use super::recording::Recorder;
use super::tables::TableRegistry;
use super::world::WorldPre;
use super::{DecisionBoard, PluginStatus, RunState, SamplePlan};
use crate::config::Config;
use crate::model::{SeriesInfo, Tick};
use crate::pipeline::PipelineHandle;
use crate::state::StateStore;

/// The longest a plugin's route answer waits for its writes to reach the disk.
const ROUTE_STATE_WAIT: Duration = Duration::from_secs(10);

/// A file's identity without reading it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct FileSig {
    len: u64,
    mtime: SystemTime,
}

struct Entry {
    sig: FileSig,
    sha256: String,
    handle: Option<PluginHandle>,
    /// Status when there is no running handle (failed to load, disabled).
    status: Option<PluginStatus>,
}

impl Entry {
    /// A file that is known but not running (failed or disabled).
    fn idle(sig: FileSig, sha256: String, status: PluginStatus) -> Self {
        Entry {
            sig,
            sha256,
            handle: None,
            status: Some(status),
        }
    }
}

pub struct PluginManager {
    shared: Shared,
    dir: PathBuf,
    cfg: RwLock<(PluginsConfig, BTreeMap<String, PluginConfig>)>,
    plugins: RwLock<BTreeMap<String, Entry>>,
    /// Changed files seen once, waiting to be seen unchanged again.
    pending: Mutex<HashMap<String, (FileSig, Instant)>>,
    /// The series table as last sent to plugins; rebuilt only when it grows.
    series: Mutex<Option<Arc<[SeriesInfo]>>>,
    /// Serialises scans (watcher thread, API reloads).
    scan_lock: Mutex<()>,
    /// Sees every tick and event batch while `GET /api/record` runs.
    recorder: Recorder,
}

impl PluginManager {
    pub fn new(cfg: &Config, pipeline: PipelineHandle) -> Result<Arc<Self>> {
        let engine = PluginEngine::new(&cfg.host.data_dir.join("cache"))?;
        let linker = linker(&engine)?;
        let state = StateStore::open(&cfg.host.data_dir.join("state.redb"))?;
        // Each job's findings outlive a restart: kept in the host's own namespace.
        let decisions = DecisionBoard::default();
        let restored = decisions.persist_to(state.namespace(super::decisions::FINDINGS_NAMESPACE));
        if restored > 0 {
            tracing::info!(restored, "findings of earlier runs restored");
        }
        let dir = cfg.plugins_dir();
        std::fs::create_dir_all(&dir).with_context(|| format!("creating the plugins directory {}", dir.display()))?;
        Ok(Arc::new(Self {
            shared: Shared {
                engine,
                linker: Arc::new(linker),
                output: Output::Pipeline(pipeline),
                clock: Default::default(),
                state,
                decisions,
                sinks: cfg.sinks.clone(),
                tables: Arc::new(TableRegistry::default()),
                plan: Arc::new(SamplePlan::new(cfg.sampler.period_ms)),
                beat: Default::default(),
                rt: tokio::runtime::Handle::try_current().ok(),
            },
            dir,
            cfg: RwLock::new((cfg.plugins.clone(), cfg.plugin.clone())),
            plugins: RwLock::new(BTreeMap::new()),
            pending: Mutex::new(HashMap::new()),
            series: Mutex::new(None),
            scan_lock: Mutex::new(()),
            recorder: Recorder::default(),
        }))
    }

    /// The host's state store (`<data_dir>/state.redb`): the plugins' state,
    /// and the host's own in namespaces that start with `@`.
    pub fn state(&self) -> &StateStore {
        &self.shared.state
    }

    /// The tap `GET /api/record` records through.
    pub fn recorder(&self) -> &Recorder {
        &self.recorder
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn sample_plan(&self) -> Arc<SamplePlan> {
        self.shared.plan.clone()
    }

    pub fn decisions(&self) -> &DecisionBoard {
        &self.shared.decisions
    }

    /// The event tables the running plugins declared.
    pub fn tables(&self) -> Arc<TableRegistry> {
        self.shared.tables.clone()
    }

    /// Brings the running set in line with the directory. With `settle`, a
    /// changed file must be seen unchanged twice before it is loaded; returns
    /// when to look again for files still settling.
    pub fn scan(&self, settle: bool) -> Option<Instant> {
        let _g = self.scan_lock.lock();
        let found = match list_plugin_files(&self.dir) {
            Ok(f) => f,
            Err(e) => {
                tracing::warn!(dir = %self.dir.display(), "cannot list the plugins directory: {e:#}");
                return None;
            }
        };
        let mut again = None;
        for (name, path, sig) in &found {
            let known = self.plugins.read().get(name).map(|e| (e.sig, e.sha256.clone()));
            if known.as_ref().is_some_and(|(s, _)| s == sig) {
                self.pending.lock().remove(name);
                continue;
            }
            if settle {
                let mut pending = self.pending.lock();
                match pending.get(name) {
                    Some((s, since)) if s == sig && since.elapsed() >= Duration::from_millis(200) => {
                        pending.remove(name);
                    }
                    Some((s, _)) if s == sig => {
                        again = Some(Instant::now() + Duration::from_millis(120));
                        continue;
                    }
                    _ => {
                        pending.insert(name.clone(), (*sig, Instant::now()));
                        again = Some(Instant::now() + Duration::from_millis(250));
                        continue;
                    }
                }
            }
            let bytes = match std::fs::read(path) {
                Ok(b) => b,
                Err(e) => {
                    tracing::warn!(file = %path.display(), "cannot read plugin file: {e}");
                    continue;
                }
            };
            let sha = hex::encode(Sha256::digest(&bytes));
            if known.as_ref().is_some_and(|(_, s)| *s == sha) {
                // Touched but not changed.
                if let Some(e) = self.plugins.write().get_mut(name) {
                    e.sig = *sig;
                }
                continue;
            }
            self.load(name, path, *sig, &bytes, sha);
        }
        let gone: Vec<String> = {
            let names: std::collections::HashSet<&String> = found.iter().map(|(n, _, _)| n).collect();
            self.plugins
                .read()
                .keys()
                .filter(|n| !names.contains(n))
                .cloned()
                .collect()
        };
        for name in gone {
            tracing::info!(plugin = %name, "plugin file removed: unloading");
            self.unload(&name);
        }
        again
    }

    /// Compiles, checks and starts one file; replaces the running version
    /// only if the new one started.
    fn load(&self, name: &str, path: &Path, sig: FileSig, bytes: &[u8], sha: String) {
        let (pcfg, cfg) = {
            let c = self.cfg.read();
            (c.0.clone(), c.1.get(name).cloned().unwrap_or_default())
        };
        let replacing = self.plugins.read().get(name).is_some_and(|e| e.handle.is_some());
        if !cfg.enabled {
            let mut st = PluginStatus::new(name, path, &sha, "");
            st.state = RunState::Disabled;
            st.reason = Some(format!("disabled in the config (plugin.{name}.enabled = false)"));
            let old = self.plugins.write().insert(name.to_string(), Entry::idle(sig, sha, st));
            if let Some(h) = old.and_then(|e| e.handle) {
                h.shutdown(self.stop_wait(&pcfg));
            }
            return;
        }
        let t0 = Instant::now();
        let prepared = self.prepare(name, path, bytes, &sha);
        if prepared.as_ref().is_ok_and(|p| !p.from_cache) {
            crate::footprint::release_freed_heap();
        }
        let result = prepared.and_then(|p| instance::spawn(p, cfg, &pcfg, self.shared.clone()));
        match result {
            Ok(handle) => {
                tracing::info!(
                    plugin = %name,
                    version = handle.status.lock().version.as_deref().unwrap_or("?"),
                    "plugin {} in {} ms",
                    if replacing { "replaced" } else { "loaded" },
                    t0.elapsed().as_millis()
                );
                let old = self.plugins.write().insert(
                    name.to_string(),
                    Entry {
                        sig,
                        sha256: sha,
                        handle: Some(handle),
                        status: None,
                    },
                );
                if let Some(h) = old.and_then(|e| e.handle) {
                    h.shutdown(self.stop_wait(&pcfg));
                }
            }
            Err(reason) => {
                let mut plugins = self.plugins.write();
                match plugins.get_mut(name) {
                    Some(e) if e.handle.is_some() => {
                        tracing::error!(plugin = %name, file = %path.display(), "new version rejected, the running one stays: {reason}");
                        e.sig = sig;
                        e.sha256 = sha;
                        e.handle.as_ref().unwrap().status.lock().update_rejected = Some(reason);
                    }
                    _ => {
                        tracing::error!(plugin = %name, file = %path.display(), "plugin failed to load: {reason}");
                        let st = PluginStatus::failed(name, path, &sha, reason);
                        plugins.insert(name.to_string(), Entry::idle(sig, sha, st));
                    }
                }
            }
        }
    }

    fn prepare(&self, name: &str, path: &Path, bytes: &[u8], sha: &str) -> Result<Prepared, String> {
        let p = prepare(&self.shared, name, path, bytes)?;
        debug_assert_eq!(p.sha256, sha);
        Ok(p)
    }

    fn stop_wait(&self, pcfg: &PluginsConfig) -> Duration {
        Duration::from_millis(pcfg.call_timeout_ms as u64 + 200)
    }

    fn unload(&self, name: &str) {
        let entry = self.plugins.write().remove(name);
        if let Some(h) = entry.and_then(|e| e.handle) {
            h.shutdown(self.stop_wait(&self.cfg.read().0));
            // The plugin's instances and their thread's heap arena are freed now.
            crate::footprint::release_freed_heap();
        }
        self.pending.lock().remove(name);
    }

    /// Replaces the per-plugin configs used when plugins are (re)loaded
    /// (a live config change; running plugins are not touched here).
    pub fn set_plugin_configs(&self, configs: &BTreeMap<String, PluginConfig>) {
        self.cfg.write().1 = configs.clone();
    }

    /// Forgets what is known about a plugin's file and loads it again
    /// (the way out of quarantine, or after a config change).
    pub fn reload(&self, name: &str) -> Result<(), String> {
        check_plugin_name(name)?;
        let path = self.dir.join(format!("{name}.wasm"));
        if !path.is_file() {
            return Err(format!("no plugin file {}", path.display()));
        }
        {
            let mut plugins = self.plugins.write();
            if let Some(e) = plugins.get_mut(name) {
                e.sha256.clear();
                e.sig = FileSig {
                    len: u64::MAX,
                    mtime: SystemTime::UNIX_EPOCH,
                };
            }
        }
        self.scan(false);
        Ok(())
    }

    /// Called on the sampler thread for every tick: must stay cheap. Each
    /// plugin that wants samples collects the shared tick; when its batch is
    /// complete the batch is queued (a full queue drops it, counted).
    pub fn on_tick(&self, tick: &Tick, series: &[SeriesInfo]) {
        self.recorder.tick(tick, series);
        let period =
            Duration::from_millis(self.shared.plan.period_ms.load(std::sync::atomic::Ordering::Relaxed) as u64);
        let now = self.shared.beat.ticked(Instant::now(), period);
        // Recursive read: never queue behind a waiting writer (a scan about to
        // insert) while the ingest hub holds a read lock; only a writer that
        // holds the lock, for a map insert or remove, can delay this thread.
        let plugins = self.plugins.read_recursive();
        let mut any = false;
        for e in plugins.values() {
            let Some(h) = &e.handle else { continue };
            if h.wants_samples.load(std::sync::atomic::Ordering::Relaxed) {
                any = true;
            } else if h.timer_due.take_if_due(now) {
                h.poke();
            }
        }
        if !any {
            return;
        }
        let series = {
            let mut cached = self.series.lock();
            match cached.as_ref() {
                Some(s) if s.len() == series.len() => s.clone(),
                _ => {
                    let s: Arc<[SeriesInfo]> = series.to_vec().into();
                    *cached = Some(s.clone());
                    s
                }
            }
        };
        let tick = Arc::new(tick.clone());
        let at_ns = super::beat::monotonic_ns();
        for e in plugins.values() {
            if let Some(h) = &e.handle
                && h.wants_samples.load(std::sync::atomic::Ordering::Relaxed)
            {
                let batch = h.acc.lock().push(&tick, &series, at_ns);
                // The thread fires its due timers after the batch: one wake-up for both.
                let timer_due = h.timer_due.take_if_due(now);
                if let Some(batch) = batch {
                    h.offer(Work::Samples(batch));
                } else if timer_due {
                    h.poke();
                }
            }
        }
    }

    /// Delivers an event batch to every plugin subscribed to at least one of
    /// the kinds or tables it holds; each plugin gets only the column groups
    /// and tables it asked for (the interning tables are shared). Returns how
    /// many plugins it was offered to.
    pub fn publish_events(&self, batch: &types::EventBatch) -> usize {
        if event_kinds(batch).is_empty() && batch.tables.is_empty() {
            return 0;
        }
        self.recorder.events(batch);
        let mut offered = 0;
        for e in self.plugins.read().values() {
            let Some(h) = &e.handle else { continue };
            let wants = h.wants_events.lock().clone();
            if let Some((b, count)) = events_for(batch, &wants) {
                h.offer(Work::Events(Box::new(b), count));
                offered += 1;
            }
        }
        offered
    }

    /// Passes a request to a plugin's `on-request` and waits for its answer.
    pub async fn request(&self, name: &str, req: types::HttpRequest) -> types::HttpResponse {
        // GET and HEAD are safe by HTTP's rules: their answers do not wait for the disk.
        let changes = !matches!(req.method.as_str(), "GET" | "HEAD");
        let (tx, rx) = tokio::sync::oneshot::channel();
        let timeout = {
            let plugins = self.plugins.read();
            let Some(entry) = plugins.get(name) else {
                return instance::json_response(
                    404,
                    &serde_json::json!({"error": format!("no plugin named {name:?}")}),
                );
            };
            let Some(h) = &entry.handle else {
                let st = entry.status.as_ref();
                return instance::json_response(
                    503,
                    &serde_json::json!({"error": format!("plugin is {}", st.map(|s| s.state.as_str()).unwrap_or("not running")),
                                        "reason": st.and_then(|s| s.reason.clone())}),
                );
            };
            if !h.offer(Work::Request(req, tx)) {
                return instance::json_response(
                    503,
                    &serde_json::json!({"error": "plugin is busy: its queue is full"}),
                );
            }
            // Queue wait plus the call deadline, generously.
            Duration::from_millis(self.cfg.read().0.call_timeout_ms as u64 * 4 + 2000)
        };
        let resp = match tokio::time::timeout(timeout, rx).await {
            Ok(Ok(resp)) => resp,
            Ok(Err(_)) => {
                return instance::json_response(503, &serde_json::json!({"error": "plugin stopped before answering"}));
            }
            Err(_) => {
                return instance::json_response(504, &serde_json::json!({"error": "plugin did not answer in time"}));
            }
        };
        // What a changing call wrote is on disk before its answer leaves: a
        // client told "this shard is yours" must not see the host forget it
        // in a crash. Hook calls do not wait for the disk; such an answer does.
        if !changes {
            return resp;
        }
        let state = self.shared.state.clone();
        let ns = name.to_string();
        let kept = tokio::task::spawn_blocking(move || state.flush_namespace(&ns, ROUTE_STATE_WAIT)).await;
        match kept {
            Ok(Ok(())) => resp,
            Ok(Err(e)) => instance::json_response(
                503,
                &serde_json::json!({"error": format!("the plugin answered, but what it wrote is not on disk; retry: {e:#}")}),
            ),
            Err(e) => instance::json_response(503, &serde_json::json!({"error": format!("{e}")})),
        }
    }

    /// Hands new settings (JSON) to a running plugin's `configure` hook and
    /// waits for its verdict; a refusal keeps the old settings and names why.
    /// The reason does not name the plugin: the caller reports it under the
    /// key `plugin.<name>.settings`, and the plugin's own message names none.
    pub async fn configure(&self, name: &str, settings: &serde_json::Value) -> Result<(), String> {
        if !settings.is_object() {
            return Err("must be an object".into());
        }
        let (tx, rx) = tokio::sync::oneshot::channel();
        {
            let plugins = self.plugins.read();
            let Some(h) = plugins.get(name).and_then(|e| e.handle.as_ref()) else {
                return Err("the plugin is not running".into());
            };
            if !h.offer(Work::Configure(settings.to_string(), tx)) {
                return Err("the plugin is busy: its queue is full".into());
            }
        }
        let wait = Duration::from_millis(self.cfg.read().0.call_timeout_ms as u64 * 4 + 2000);
        match tokio::time::timeout(wait, rx).await {
            Ok(Ok(r)) => r.map_err(|e| format!("refused by the plugin: {e}")),
            Ok(Err(_)) => Err("the plugin stopped before answering".into()),
            Err(_) => Err("the plugin did not answer in time".into()),
        }
    }

    /// Every plugin the directory holds, with its state and self-metrics.
    pub fn statuses(&self) -> Vec<PluginStatus> {
        self.plugins
            .read()
            .values()
            .map(|e| match &e.handle {
                Some(h) => {
                    let mut s = h.status.lock().clone();
                    s.metrics = h.metrics.snapshot();
                    s
                }
                None => e.status.clone().expect("entries without a handle keep a status"),
            })
            .collect()
    }

    /// Calls `f` with each plugin's name, whether it is running, and its call
    /// metrics: what the host's own metrics export every round, read in place
    /// instead of copying every status (`statuses`) and its strings.
    pub fn each_metrics(&self, mut f: impl FnMut(&str, bool, &super::metrics::MetricsSnapshot)) {
        for e in self.plugins.read().values() {
            match (&e.handle, &e.status) {
                (Some(h), _) => {
                    let m = h.metrics.snapshot();
                    let st = h.status.lock();
                    f(&st.name, st.state == RunState::Running, &m);
                }
                (None, Some(st)) => f(&st.name, st.state == RunState::Running, &st.metrics),
                (None, None) => {}
            }
        }
    }

    pub fn status(&self, name: &str) -> Option<PluginStatus> {
        self.statuses().into_iter().find(|s| s.name == name)
    }

    /// Watches the plugins directory on a thread of its own until `stop` is dropped.
    pub fn watch(self: &Arc<Self>) -> Result<Watcher> {
        use notify::Watcher as _;
        let (tx, rx) = crossbeam_channel::unbounded::<()>();
        let mut watcher = notify::recommended_watcher(move |ev: notify::Result<notify::Event>| {
            // Only changes matter. Opening or reading the directory (our own
            // scans do) raises access events, which would loop back into scans.
            use notify::EventKind::{Any, Create, Modify, Other, Remove};
            if let Ok(ev) = ev
                && matches!(ev.kind, Create(_) | Modify(_) | Remove(_) | Any | Other)
            {
                let _ = tx.send(());
            }
        })
        .context("starting the directory watcher")?;
        watcher
            .watch(&self.dir, notify::RecursiveMode::NonRecursive)
            .with_context(|| format!("watching {}", self.dir.display()))?;
        let (stop_tx, stop_rx) = crossbeam_channel::bounded::<()>(0);
        let me = self.clone();
        let thread = std::thread::Builder::new().name("sonde-watch".into()).spawn(move || {
            // Events are noisy (one write makes several); debounce them. A slow
            // periodic rescan catches anything the watcher missed (a file
            // system without change events). Every rescan wakes an idle host
            // (docs/benchmarks.md), so it is rare.
            const RESCAN: Duration = Duration::from_secs(30);
            let mut next = Instant::now() + RESCAN;
            loop {
                crossbeam_channel::select! {
                    recv(rx) -> _ => { next = next.min(Instant::now() + Duration::from_millis(100)); }
                    recv(stop_rx) -> _ => return,
                    default(next.saturating_duration_since(Instant::now())) => {
                        next = me.scan(true).unwrap_or(Instant::now() + RESCAN);
                    }
                }
            }
        })?;
        Ok(Watcher {
            _watcher: watcher,
            _stop: stop_tx,
            thread: Some(thread),
        })
    }

    /// Stops every plugin (calling `stop`), bounded by `wait` per plugin.
    pub fn shutdown(&self, wait: Duration) {
        let entries: Vec<Entry> = std::mem::take(&mut *self.plugins.write()).into_values().collect();
        let threads: Vec<_> = entries
            .into_iter()
            .filter_map(|e| e.handle)
            .map(|h| std::thread::spawn(move || h.shutdown(wait)))
            .collect();
        for t in threads {
            let _ = t.join();
        }
    }
}

/// The linker every plugin is instantiated with: WASI (what the sandbox
/// grants) and the `host` functions of both contract versions.
pub fn linker(engine: &PluginEngine) -> Result<Linker<PluginState>> {
    let mut linker = Linker::<PluginState>::new(&engine.engine);
    wasmtime_wasi::p2::add_to_linker_sync(&mut linker).map_err(|e| anyhow::anyhow!("{e:#}"))?;
    // Both contract versions the host speaks: their interfaces differ by name.
    Plugin::add_to_linker::<PluginState, HasSelf<PluginState>>(&mut linker, |s| s)
        .map_err(|e| anyhow::anyhow!("{e:#}"))?;
    super::v0_1::Plugin::add_to_linker::<PluginState, HasSelf<PluginState>>(&mut linker, |s| s)
        .map_err(|e| anyhow::anyhow!("{e:#}"))?;
    Ok(linker)
}

/// Compiles (or loads from the cache) and links one plugin file; Err says
/// why it is not a plugin this host can run.
pub fn prepare(shared: &Shared, name: &str, path: &Path, bytes: &[u8]) -> Result<Prepared, String> {
    let began = Instant::now();
    let loaded = shared.engine.load_component(bytes).map_err(|e| format!("{e:#}"))?;
    let pre = WorldPre::link(&shared.linker, &loaded.component, &loaded.contract)?;
    Ok(Prepared {
        name: name.to_string(),
        pre,
        sha256: loaded.sha256,
        contract: loaded.contract,
        file: path.to_path_buf(),
        from_cache: loaded.from_cache,
        began,
    })
}

/// What a plugin subscribed to `wants` is handed of `batch` (its kinds'
/// column groups and its tables), with its row count; None when the batch
/// holds none of them.
pub fn events_for(batch: &types::EventBatch, wants: &Subscription) -> Option<(types::EventBatch, u64)> {
    if !event_kinds(batch).iter().any(|k| wants.kinds.contains(k))
        && !batch.tables.iter().any(|t| wants.tables.contains(&t.name))
    {
        return None;
    }
    let mut b = batch.clone();
    keep_kinds(&mut b, wants);
    let count = event_count(&b);
    Some((b, count))
}

/// Keeps the watcher alive; dropping it stops watching.
pub struct Watcher {
    _watcher: notify::RecommendedWatcher,
    _stop: crossbeam_channel::Sender<()>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Drop for Watcher {
    fn drop(&mut self) {
        // Dropping `_stop` after this wakes the thread; do not join a scan in progress.
        let _ = self.thread.take();
    }
}

/// `(name, path, signature)` of every plugin file, sorted by name.
fn list_plugin_files(dir: &Path) -> Result<Vec<(String, PathBuf, FileSig)>> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let path = entry.path();
        let Some(fname) = path.file_name().and_then(|n| n.to_str()) else {
            continue;
        };
        if fname.starts_with('.') || !fname.ends_with(".wasm") {
            continue;
        }
        let name = fname.trim_end_matches(".wasm");
        if let Err(reason) = check_plugin_name(name) {
            tracing::warn!(file = %path.display(), "ignoring plugin file: {reason}");
            continue;
        }
        let Ok(md) = entry.metadata() else { continue };
        if !md.is_file() {
            continue;
        }
        out.push((
            name.to_string(),
            path,
            FileSig {
                len: md.len(),
                mtime: md.modified().unwrap_or(SystemTime::UNIX_EPOCH),
            },
        ));
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(out)
}

/// The event kinds a batch carries (column groups present and non-empty, record lists non-empty).
pub fn event_kinds(b: &types::EventBatch) -> Vec<types::EventKind> {
    use types::EventKind as K;
    let mut k = Vec::new();
    let mut add = |present: bool, kind| {
        if present {
            k.push(kind)
        }
    };
    add(b.progress.as_ref().is_some_and(|c| !c.time.is_empty()), K::Progress);
    add(b.timings.as_ref().is_some_and(|c| !c.start.is_empty()), K::Timings);
    add(b.heartbeats.as_ref().is_some_and(|c| !c.time.is_empty()), K::Heartbeats);
    add(b.points.as_ref().is_some_and(|c| !c.time.is_empty()), K::Points);
    add(!b.node_events.is_empty(), K::NodeEvents);
    add(!b.custom.is_empty(), K::Custom);
    k
}

/// Clears the groups of kinds and the tables not in `keep`.
fn keep_kinds(b: &mut types::EventBatch, keep: &Subscription) {
    use types::EventKind as K;
    let has = |k| keep.kinds.contains(&k);
    b.tables.retain(|t| keep.tables.contains(&t.name));
    if !has(K::Progress) {
        b.progress = None;
    }
    if !has(K::Timings) {
        b.timings = None;
    }
    if !has(K::Heartbeats) {
        b.heartbeats = None;
    }
    if !has(K::Points) {
        b.points = None;
        b.point_series.clear();
    }
    if !has(K::NodeEvents) {
        b.node_events.clear();
    }
    if !has(K::Custom) {
        b.custom.clear();
    }
}

/// Rows in a batch, over every kind (what a plugin's `items` counter counts).
pub fn event_count(b: &types::EventBatch) -> u64 {
    let n = b.progress.as_ref().map_or(0, |c| c.time.len())
        + b.timings.as_ref().map_or(0, |c| c.start.len())
        + b.tables.iter().map(|t| t.origin.len()).sum::<usize>()
        + b.heartbeats.as_ref().map_or(0, |c| c.time.len())
        + b.points.as_ref().map_or(0, |c| c.time.len())
        + b.node_events.len()
        + b.custom.len();
    n as u64
}
