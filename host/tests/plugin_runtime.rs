//! The plugin runtime against real compiled components (built by
//! `scripts/build-plugins.sh` into target/plugins/): the testbed in its
//! modes, the bundled sysmetrics plugin, deliberately bad files, event
//! tables declared by plugins, and a plugin of the previous contract (0.1).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::AtomicU32;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use sonde::config::Config;
use sonde::model::{AttrValue, MetricBatch, MetricKind, SeriesInfo, SeriesKind, Tick};
use sonde::pipeline::{Pipeline, PipelineHandle};
use sonde::plugin::bindings::types::HttpRequest;
use sonde::plugin::{PluginManager, PluginStatus, RunState};

mod common;
use common::component;

struct Env {
    _tmp: tempfile::TempDir,
    plugins_dir: PathBuf,
    sinks_dir: PathBuf,
    manager: Arc<PluginManager>,
    pipeline: PipelineHandle,
    rt: tokio::runtime::Runtime,
}

fn env(tweak: impl FnOnce(&mut Config)) -> Env {
    let tmp = tempfile::tempdir().unwrap();
    let mut cfg = common::config_in(tmp.path());
    tweak(&mut cfg);
    cfg.validate().unwrap();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let (pipeline, _task) = rt.block_on(async { Pipeline::start(&cfg.export, vec![]) }).unwrap();
    std::mem::forget(_task);
    let manager = PluginManager::new(&cfg, pipeline.clone()).unwrap();
    Env {
        plugins_dir: cfg.plugins_dir(),
        sinks_dir: cfg.sinks.dir.clone(),
        _tmp: tmp,
        manager,
        pipeline,
        rt,
    }
}

impl Env {
    fn install(&self, rel: &str, name: &str) {
        self.write(name, &component(rel));
    }

    fn write(&self, name: &str, bytes: &[u8]) {
        // Write beside and rename, as a careful user (and the upload API) would.
        let tmp = self.plugins_dir.join(format!(".{name}.wasm.tmp"));
        std::fs::write(&tmp, bytes).unwrap();
        std::fs::rename(&tmp, self.plugins_dir.join(format!("{name}.wasm"))).unwrap();
    }

    fn status(&self, name: &str) -> PluginStatus {
        self.manager
            .status(name)
            .unwrap_or_else(|| panic!("no status for {name}: {:?}", self.manager.statuses()))
    }

    fn request(&self, name: &str, method: &str, path: &str, body: &[u8]) -> (u16, String) {
        let (path, query) = path.split_once('?').unwrap_or((path, ""));
        let req = HttpRequest {
            method: method.into(),
            path: path.into(),
            query: query.into(),
            headers: vec![],
            body: body.to_vec(),
        };
        let r = self.rt.block_on(self.manager.request(name, req));
        (r.status, String::from_utf8_lossy(&r.body).into_owned())
    }

    /// Feeds synthetic ticks at `every` for `count` ticks.
    fn feed(&self, count: usize, every: Duration) {
        let series = fake_series();
        for i in 0..count {
            let tick = Tick {
                time_ns: sonde::model::now_ns(),
                values: vec![0.25 + i as f64 * 0.001, 1e9, 12345.0],
            };
            self.manager.on_tick(&tick, &series);
            std::thread::sleep(every);
        }
    }
}

fn fake_series() -> Vec<SeriesInfo> {
    let s = |id, metric: &str, unit: &str, kind| SeriesInfo {
        id,
        metric: metric.into(),
        unit: unit.into(),
        kind,
        attributes: vec![],
    };
    vec![
        s(0, "system.cpu.utilization", "1", SeriesKind::Gauge),
        s(1, "system.memory.usage", "By", SeriesKind::Gauge),
        s(2, "system.network.io", "By", SeriesKind::Counter),
    ]
}

fn wait_until(limit: Duration, mut f: impl FnMut() -> bool) -> bool {
    let t0 = Instant::now();
    while t0.elapsed() < limit {
        if f() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    f()
}

#[test]
fn echo_plugin_reaches_every_host_function() {
    let e = env(|c| {
        c.plugin
            .insert("echo".into(), toml_plugin(r#"settings = { timer_ms = 50 }"#));
    });
    e.install("testing/testbed.wasm", "echo");
    e.manager.scan(false);
    let st = e.status("echo");
    assert_eq!(st.state, RunState::Running, "{st:?}");
    assert_eq!(st.contract, sonde::plugin::engine::CONTRACT_VERSION);
    assert!(st.version.is_some());

    // Routes and state.
    assert_eq!(e.request("echo", "GET", "/restarts", b""), (200, "0".into()));
    assert_eq!(e.request("echo", "GET", "/state/k", b"").0, 404);
    assert_eq!(e.request("echo", "PUT", "/state/k", b"v1").0, 204);
    assert_eq!(e.request("echo", "GET", "/state/k", b""), (200, "v1".into()));
    assert_eq!(e.request("echo", "POST", "/append/log", b"a"), (200, "1".into()));
    assert_eq!(e.request("echo", "POST", "/append/log", b"b"), (200, "2".into()));
    let (code, body) = e.request("echo", "GET", "/read/log?from=2", b"");
    assert_eq!(code, 200);
    assert!(body.contains("[2,\"b\"]") && !body.contains("\"a\""), "{body}");
    assert_eq!(e.request("echo", "GET", "/nope", b"").0, 404);

    // Decisions from a route and from a timer.
    assert_eq!(
        e.request("echo", "POST", "/decision?kind=plan&subject=job-1", b"{\"workers\":3}")
            .0,
        204
    );
    assert!(wait_until(Duration::from_secs(3), || e
        .manager
        .decisions()
        .list(Some("echo"))
        .iter()
        .any(|d| d.kind == "timer")));
    let plan = e
        .manager
        .decisions()
        .list(Some("echo"))
        .into_iter()
        .find(|d| d.kind == "plan")
        .unwrap();
    assert_eq!(plan.body["workers"], 3);
    assert_eq!(plan.subject, "job-1");
    let (code, count) = e.request("echo", "GET", "/state/timer_count", b"");
    assert_eq!(code, 200);
    assert!(count.trim().parse::<u64>().unwrap() >= 1, "{count}");

    // Samples in, points and sink rows out.
    let mut live = e.pipeline.subscribe();
    // 100 ms period, delivered every 200 ms: 12 ticks 50 ms apart make 3 calls.
    e.feed(12, Duration::from_millis(50));
    assert!(
        wait_until(Duration::from_secs(3), || e.status("echo").metrics.points_emitted >= 2),
        "{:?}",
        e.status("echo")
    );
    let mut names = Vec::new();
    while let Ok(b) = live.try_recv() {
        names.extend(b.points.iter().map(|p| p.series.name.clone()));
        assert_eq!(b.scope.name, "sonde.plugin.echo");
    }
    assert!(names.iter().any(|n| n == "testbed.samples"), "{names:?}");
    let tsv = std::fs::read_to_string(e.sinks_dir.join("testbed.tsv")).unwrap();
    let mut lines = tsv.lines();
    assert_eq!(lines.next(), Some("t\tname\tvalue"));
    assert!(lines.count() >= 2, "{tsv}");
}

#[test]
fn sysmetrics_turns_samples_into_otel_metrics() {
    let e = env(|_| {});
    e.install("bundled/sysmetrics.wasm", "sysmetrics");
    e.manager.scan(false);
    assert_eq!(
        e.status("sysmetrics").state,
        RunState::Running,
        "{:?}",
        e.status("sysmetrics")
    );
    let mut live = e.pipeline.subscribe();
    // The real sampler, at the period the plugin asked for.
    let sampler = sonde::sample::Sampler::new(&Default::default());
    let m = e.manager.clone();
    let h = sonde::sample::driver::spawn(sampler, e.manager.sample_plan().period_ms.clone(), move |t, s| {
        m.on_tick(t, s)
    });
    let mut got: Vec<Arc<MetricBatch>> = Vec::new();
    let t0 = Instant::now();
    // Two deliveries: the first one ends at the first whole second of the
    // clock, so it may hold a single tick.
    while t0.elapsed() < Duration::from_secs(5)
        && (got.len() < 2 || got.iter().map(|b| b.points.len()).sum::<usize>() < 50)
    {
        if let Ok(b) =
            e.rt.block_on(async { tokio::time::timeout(Duration::from_millis(500), live.recv()).await })
        {
            got.push(b.unwrap());
        }
    }
    h.stop();
    let points: Vec<_> = got.iter().flat_map(|b| b.points.iter()).collect();
    let find = |name: &str| points.iter().filter(|p| p.series.name == name).collect::<Vec<_>>();
    let cpu = find("system.cpu.utilization");
    assert!(
        !cpu.is_empty(),
        "no CPU points among {:?}",
        points
            .iter()
            .map(|p| &p.series.name)
            .collect::<std::collections::BTreeSet<_>>()
    );
    assert!(
        cpu.iter()
            .all(|p| (0.0..=1.0).contains(&p.value) && p.series.kind == MetricKind::Gauge)
    );
    assert!(
        cpu.iter()
            .any(|p| p.series.attributes.iter().any(|(k, _)| k == "cpu.logical_number"))
    );
    let mem = find("system.memory.usage");
    assert!(
        mem.iter()
            .any(|p| p.series.kind == MetricKind::UpDownCounter && p.value > 0.0 && p.series.unit == "By")
    );
    assert!(got.iter().all(|b| b.scope.name == "sonde.plugin.sysmetrics"));
    // Every CPU point has its mode.
    assert!(
        cpu.iter()
            .all(|p| p.series.attributes.iter().any(|(k, _)| k == "cpu.mode"))
    );
    // Consecutive CPU points of one series (all CPUs' idle share) are one
    // sampling period apart. A point is stamped when its reads were taken, so
    // a tick that a loaded machine wakes late sits closer to the next one (a
    // CI run once saw a 43 ms gap). So: points only move forward, no gap is
    // long enough to hide lost ticks, and the median gap is the period.
    let total: Vec<u64> = cpu
        .iter()
        .filter(|p| p.series.attributes == [("cpu.mode".to_string(), AttrValue::from("idle"))])
        .map(|p| p.time_ns)
        .collect();
    assert!(total.len() >= 5, "{total:?}");
    let mut gaps: Vec<f64> = total.windows(2).map(|w| (w[1] as f64 - w[0] as f64) / 1e6).collect();
    assert!(gaps.iter().all(|g| *g > 0.0 && *g <= 300.0), "gaps in ms: {gaps:?}");
    gaps.sort_by(f64::total_cmp);
    let median = gaps[gaps.len() / 2];
    assert!((90.0..=110.0).contains(&median), "median gap {median} ms of {gaps:?}");
}

#[test]
fn spinning_plugin_is_interrupted_and_sampling_goes_on() {
    // A long deadline: if the plugin could hold up the sampler, gaps would show it.
    // (It counts the plugin thread's CPU time: on a loaded machine each trap
    // takes longer on the wall, hence the generous wait below.)
    let e = env(|c| {
        c.plugins.call_timeout_ms = 1500;
        c.plugins.max_traps = 2;
        c.plugins.backoff_initial_ms = 50;
    });
    e.install("testing/testbed.wasm", "spin");
    e.manager.scan(false);
    assert_eq!(e.status("spin").state, RunState::Running);
    let ticks = Arc::new(Mutex::new(Vec::<Instant>::new()));
    let (m, t) = (e.manager.clone(), ticks.clone());
    let period = Arc::new(AtomicU32::new(100));
    let h = sonde::sample::driver::spawn(
        sonde::sample::Sampler::new(&Default::default()),
        period,
        move |tick, s| {
            t.lock().push(Instant::now());
            m.on_tick(tick, s);
        },
    );
    let quarantined = wait_until(Duration::from_secs(30), || {
        e.status("spin").state == RunState::Quarantined
    });
    let st = e.status("spin");
    h.stop();
    assert!(quarantined, "{st:?}");
    assert!(st.metrics.timeouts >= 2, "{st:?}");
    assert!(st.reason.as_deref().unwrap().contains("deadline"), "{:?}", st.reason);
    let ticks = ticks.lock();
    let max_gap = ticks.windows(2).map(|w| w[1] - w[0]).max().unwrap();
    assert!(
        max_gap < Duration::from_millis(1000),
        "the sampler stalled for {max_gap:?} while the plugin spun"
    );
    assert!(ticks.len() >= 25, "only {} ticks", ticks.len());
}

#[test]
fn memory_bomb_hits_the_cap_with_a_clear_reason() {
    let e = env(|c| {
        c.plugins.memory_limit_mb = 16;
        c.plugins.max_traps = 1;
    });
    e.install("testing/testbed.wasm", "membomb");
    e.manager.scan(false);
    e.feed(3, Duration::from_millis(120));
    assert!(wait_until(Duration::from_secs(5), || e.status("membomb").state
        == RunState::Quarantined));
    let st = e.status("membomb");
    assert!(
        st.last_trap.as_deref().unwrap_or("").contains("memory limit"),
        "{:?}",
        st.last_trap
    );
    assert!(
        st.metrics.memory_peak_bytes <= 16 << 20,
        "{}",
        st.metrics.memory_peak_bytes
    );
}

#[test]
fn trapping_plugin_backs_off_restarts_then_is_quarantined() {
    let e = env(|c| {
        c.plugins.max_traps = 3;
        c.plugins.backoff_initial_ms = 20;
    });
    e.install("testing/testbed.wasm", "trap");
    e.manager.scan(false);
    let t0 = Instant::now();
    while t0.elapsed() < Duration::from_secs(6) && e.status("trap").state != RunState::Quarantined {
        e.feed(1, Duration::from_millis(40));
    }
    let st = e.status("trap");
    assert_eq!(st.state, RunState::Quarantined, "{st:?}");
    assert_eq!(st.metrics.traps, 3);
    assert_eq!(st.restarts, 2, "re-instantiated after each trap but the last");
    let reason = st.reason.unwrap();
    assert!(
        reason.contains("quarantined after 3 traps") && reason.contains("deliberate trap"),
        "{reason}"
    );
    // Requests get a clear answer instead of hanging.
    let (code, body) = e.request("trap", "GET", "/x", b"");
    assert_eq!(code, 503);
    assert!(body.contains("quarantined"), "{body}");
    // Quarantine holds until the plugin is reloaded (or its file changes).
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(e.status("trap").state, RunState::Quarantined);
    e.manager.reload("trap").unwrap();
    let st = e.status("trap");
    assert_eq!(
        (st.state, st.metrics.traps, st.restarts),
        (RunState::Running, 0, 0),
        "{st:?}"
    );
    assert!(e.manager.reload("../etc").is_err());
    assert!(e.manager.reload("absent").unwrap_err().contains("no plugin file"));
}

#[test]
fn bad_files_are_reported_and_never_disturb_the_running_set() {
    let e = env(|_| {});
    e.install("testing/testbed.wasm", "echo");
    e.write("garbage", b"this is not wasm at all");
    e.write("core", b"\0asm\x01\0\0\0");
    e.install("testing/wrongworld.wasm", "wrongworld");
    e.install("testing/testbed.wasm", "failstart");
    e.write("truncated", &component("testing/testbed.wasm")[..5000]);
    e.manager.scan(false);
    let reason = |n: &str| {
        let st = e.status(n);
        assert_eq!(st.state, RunState::Failed, "{st:?}");
        st.reason.unwrap()
    };
    assert!(reason("garbage").contains("not a WebAssembly file"));
    assert!(reason("core").contains("core WebAssembly module"));
    let r = reason("wrongworld");
    assert!(
        r.contains("sonde:plugin@9.0.0") && r.contains(sonde::plugin::engine::CONTRACT_VERSION) && r.contains("0.1.x"),
        "{r}"
    );
    assert!(reason("failstart").contains("start refused: testbed failstart mode"));
    assert!(!reason("truncated").is_empty());
    assert_eq!(e.status("echo").state, RunState::Running);
    assert_eq!(e.request("echo", "GET", "/restarts", b"").0, 200);
    let (code, body) = e.request("garbage", "GET", "/x", b"");
    assert_eq!(code, 503);
    assert!(body.contains("not a WebAssembly file"), "{body}");
    assert_eq!(e.request("absent", "GET", "/x", b"").0, 404);
}

#[test]
fn watched_directory_loads_replaces_and_unloads_within_two_seconds() {
    let e = env(|_| {});
    // Compile both components first: the 2 s are about noticing and swapping,
    // not about a cold compile in a debug build (see docs/benchmarks.md's cold-start figures).
    let engine = sonde::plugin::engine::PluginEngine::new(&e._tmp.path().join("data/cache")).unwrap();
    engine.load_component(&component("testing/testbed.wasm")).unwrap();
    engine.load_component(&component("bundled/sysmetrics.wasm")).unwrap();
    let _w = e.manager.watch().unwrap();
    let within = Duration::from_secs(2);

    e.install("testing/testbed.wasm", "echo");
    let t0 = Instant::now();
    assert!(
        wait_until(within, || e
            .manager
            .status("echo")
            .is_some_and(|s| s.state == RunState::Running)),
        "not loaded"
    );
    eprintln!("loaded after {:?}", t0.elapsed());
    let first_sha = e.status("echo").sha256;

    // A broken replacement is rejected; the running version stays and answers.
    e.write("echo", b"garbage");
    assert!(
        wait_until(within, || e.status("echo").update_rejected.is_some()),
        "rejection not reported"
    );
    let st = e.status("echo");
    assert_eq!((st.state, st.sha256.clone()), (RunState::Running, first_sha.clone()));
    assert!(st.update_rejected.unwrap().contains("not a WebAssembly file"));
    assert_eq!(e.request("echo", "GET", "/restarts", b"").0, 200);

    // A good replacement (different code) takes over.
    e.install("bundled/sysmetrics.wasm", "echo");
    assert!(
        wait_until(within, || e.status("echo").sha256 != first_sha
            && e.status("echo").state == RunState::Running),
        "{:?}",
        e.status("echo")
    );
    assert!(
        e.status("echo")
            .description
            .unwrap_or_default()
            .to_lowercase()
            .contains("metric")
    );

    std::fs::remove_file(e.plugins_dir.join("echo.wasm")).unwrap();
    assert!(
        wait_until(within, || e.manager.status("echo").is_none()),
        "not unloaded"
    );
}

#[test]
fn compiled_code_is_cached_on_disk() {
    let tmp = tempfile::tempdir().unwrap();
    let plugins = tmp.path().join("plugins");
    std::fs::create_dir_all(&plugins).unwrap();
    std::fs::write(plugins.join("noop.wasm"), component("testing/testbed.wasm")).unwrap();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    // Two hosts with their own state, the second reusing the first one's compile cache.
    let first_data = tmp.path().join("first");
    let second_data = tmp.path().join("second");
    std::fs::create_dir_all(&second_data).unwrap();
    std::os::unix::fs::symlink(first_data.join("cache"), second_data.join("cache")).unwrap();
    let load = |data: &Path| {
        let mut cfg = Config::default();
        cfg.host.data_dir = data.to_path_buf();
        cfg.plugins.dir = Some(plugins.clone());
        let (p, _t) = rt.block_on(async { Pipeline::start(&cfg.export, vec![]) }).unwrap();
        std::mem::forget(_t);
        let m = PluginManager::new(&cfg, p).unwrap();
        m.scan(false);
        let st = m.status("noop").unwrap();
        m.shutdown(Duration::from_secs(1));
        st
    };
    let first = load(&first_data);
    assert_eq!(first.state, RunState::Running);
    assert!(!first.compiled_from_cache);
    let cached: Vec<_> = std::fs::read_dir(first_data.join("cache")).unwrap().collect();
    assert_eq!(cached.len(), 1);
    let second = load(&second_data);
    assert!(second.compiled_from_cache);
    eprintln!(
        "load: compile {:.1} ms, from cache {:.1} ms",
        first.load_ms, second.load_ms
    );
}

fn toml_plugin(s: &str) -> sonde::plugin::config::PluginConfig {
    let c = Config::from_toml_str(&format!("[plugin.x]\n{s}\n")).unwrap();
    c.plugin("x")
}

#[test]
fn wasi_capabilities_are_denied_unless_granted() {
    let home = std::env::var("HOME").expect("HOME is set for the test process");
    let shared = tempfile::tempdir().unwrap();
    std::fs::write(shared.path().join("visible.txt"), b"x").unwrap();
    let grant = format!(
        "grants = {{ env = [\"HOME\"], dirs = [{{ host = \"{}\", guest = \"/data\" }}] }}",
        shared.path().display()
    );
    let e = env(|c| {
        c.plugin.insert(
            "granted".into(),
            toml_plugin(&format!("settings = {{ mode = \"echo\" }}\n{grant}")),
        );
    });
    e.install("testing/testbed.wasm", "denied");
    e.install("testing/testbed.wasm", "granted");
    e.manager.scan(false);

    // Nothing granted: the host's environment and file system are invisible.
    let (code, body) = e.request("denied", "GET", "/wasi/env/HOME", b"");
    assert_eq!(code, 403, "{body}");
    assert_eq!(e.request("denied", "GET", "/wasi/dir/", b"").0, 403);
    assert_eq!(e.request("denied", "GET", "/wasi/dir/data", b"").0, 403);

    // Granted: exactly what the config names.
    assert_eq!(e.request("granted", "GET", "/wasi/env/HOME", b""), (200, home));
    assert_eq!(
        e.request("granted", "GET", "/wasi/env/PATH", b"").0,
        403,
        "only the named variables pass"
    );
    assert_eq!(
        e.request("granted", "GET", "/wasi/dir/data", b""),
        (200, "[\"visible.txt\"]".to_string())
    );
}

#[test]
fn event_batches_and_live_settings_cross_the_boundary() {
    use sonde::plugin::bindings::types::{Attribute, CustomEvent, EventBatch, Origin, Value};
    let e = env(|_| {});
    e.install("testing/testbed.wasm", "echo");
    e.install("testing/testbed.wasm", "noop");
    e.manager.scan(false);
    let mut live = e.pipeline.subscribe();

    // A custom event reaches the subscribed plugin (echo), which answers with a point.
    let batch = EventBatch {
        origins: vec![Origin {
            job: "job-1".into(),
            node: "node-a".into(),
            role: "worker".into(),
            index: 0,
            rank: 0,
            local_rank: 0,
            attributes: vec![],
        }],
        custom: vec![CustomEvent {
            origin: 0,
            time: sonde::model::now_ns(),
            name: "checkpoint-saved".into(),
            attributes: vec![Attribute {
                key: "step".into(),
                value: Value::Int(7),
            }],
            body: String::new(),
        }],
        ..Default::default()
    };
    e.manager.publish_events(&batch);
    assert!(
        wait_until(Duration::from_secs(3), || e.status("echo").metrics.items >= 1),
        "{:?}",
        e.status("echo")
    );
    assert_eq!(e.status("noop").metrics.items, 0, "noop did not subscribe to events");
    let got =
        e.rt.block_on(async { tokio::time::timeout(Duration::from_secs(3), live.recv()).await })
            .unwrap()
            .unwrap();
    assert_eq!(got.points[0].series.name, "testbed.events");
    assert_eq!(got.points[0].value, 1.0);

    // Live settings: accepted ones take effect, refused ones name the reason.
    let ok = serde_json::json!({"timer_ms": 50});
    e.rt.block_on(e.manager.configure("echo", &ok)).unwrap();
    assert!(wait_until(Duration::from_secs(3), || e
        .manager
        .decisions()
        .list(Some("echo"))
        .iter()
        .any(|d| d.kind == "timer")));
    let (_, cfg) = e.request("echo", "GET", "/config", b"");
    assert!(cfg.contains("\"timer_ms\":50"), "{cfg}");
    let bad = serde_json::json!({"mode": "spin"});
    let err = e.rt.block_on(e.manager.configure("echo", &bad)).unwrap_err();
    assert!(err.contains("refused by the plugin") && err.contains("mode"), "{err}");
    assert!(
        e.rt.block_on(e.manager.configure("absent", &ok))
            .unwrap_err()
            .contains("the plugin is not running")
    );
}

/// A hub that types rows by the manager's declared tables and hands batches to its plugins.
fn hub_for(e: &Env) -> Arc<sonde::ingest::IngestHub> {
    let m = e.manager.clone();
    sonde::ingest::IngestHub::with_tables(
        10_000,
        Arc::new(move |b| m.publish_events(b)),
        e.manager.tables(),
        false,
    )
}

/// `body` through the JSON ingest's conversion into `hub`, then handed over;
/// returns the rows refused.
fn ingest_json(hub: &sonde::ingest::IngestHub, body: serde_json::Value) -> Vec<String> {
    use sonde::ingest::json::{Body, TableRules};
    let b: Body = serde_json::from_value(body).unwrap();
    let rules = TableRules {
        registry: hub.tables(),
        keep_unknown: false,
    };
    let c = b.convert(sonde::model::now_ns(), &Default::default(), &rules).unwrap();
    hub.submit(&c.report).unwrap();
    hub.flush();
    c.refused.iter().map(|e| e.to_string()).collect()
}

#[test]
fn rows_of_a_declared_table_reach_it_and_another_declaration_of_it_is_refused() {
    let e = env(|c| {
        c.plugin
            .insert("echo-2".into(), toml_plugin(r#"settings = { rows_n_type = "f64" }"#));
    });
    e.install("testing/testbed.wasm", "echo");
    e.manager.scan(false);
    assert_eq!(e.status("echo").tables, vec!["testbed_rows"]);
    // A second plugin declaring the same table with other columns does not start.
    e.install("testing/testbed.wasm", "echo-2");
    e.manager.scan(false);
    let st = e.status("echo-2");
    assert_eq!(st.state, RunState::Failed, "{st:?}");
    let why = st.reason.unwrap();
    for part in [
        "start refused",
        "\"testbed_rows\"",
        "plugin \"echo\"",
        "column 0",
        "u64",
        "f64",
    ] {
        assert!(why.contains(part), "{part}: {why}");
    }
    assert_eq!(e.status("echo").state, RunState::Running, "the first keeps running");
    let listed = e.manager.tables().list();
    assert_eq!(
        (listed.len(), listed[0].declared_by.clone()),
        (1, vec!["echo".to_string()])
    );

    // Rows through the JSON ingest reach the declaring plugin, typed; a bad row alone is refused.
    let hub = hub_for(&e);
    let refused = ingest_json(
        &hub,
        serde_json::json!({"origin": {"job": "t"},
                           "testbed_rows": [{"n": 1, "label": "a"}, {"n": 2}, {"n": "three"}]}),
    );
    assert_eq!(refused.len(), 1, "{refused:?}");
    assert!(refused[0].starts_with("testbed_rows[2].n: \"three\""), "{refused:?}");
    assert!(
        wait_until(Duration::from_secs(5), || e.status("echo").metrics.items >= 2),
        "{:?}",
        e.status("echo")
    );
    // Unloading the plugin withdraws its table: its rows are refused by name.
    std::fs::remove_file(e.plugins_dir.join("echo.wasm")).unwrap();
    e.manager.scan(false);
    assert!(e.manager.tables().list().is_empty());
    let refused = ingest_json(&hub, serde_json::json!({"testbed_rows": [{"n": 1}]}));
    assert!(
        refused[0].contains("no running plugin declares a table named \"testbed_rows\""),
        "{refused:?}"
    );
}

#[test]
fn a_plugin_of_contract_0_1_still_loads_and_gets_its_rows_from_the_tables() {
    let e = env(|_| {});
    e.install("testing/legacy01.wasm", "legacy");
    // 0.2 plugins declaring the tables the 0.1 kinds stand for, alike: all run.
    e.install("bundled/clockwork.wasm", "clockwork");
    e.install("bundled/mpi.wasm", "mpi");
    e.manager.scan(false);
    let st = e.status("legacy");
    assert_eq!((st.state, st.contract.as_str()), (RunState::Running, "0.1.0"), "{st:?}");
    assert_eq!(st.tables, vec!["requests", "actions", "mpi_samples"]);
    assert_eq!(st.events, vec!["progress"]);
    for p in ["clockwork", "mpi"] {
        assert_eq!(e.status(p).state, RunState::Running, "{:?}", e.status(p));
    }
    let hub = hub_for(&e);
    let refused = ingest_json(
        &hub,
        serde_json::json!({
            "origin": {"job": "serve", "rank": 0},
            "progress": [{"value": 3}],
            "requests": [{"request_id": 68, "model_id": 30, "arrival_ns": 10, "departure_ns": 20}],
            "actions": [{"action_id": 2, "action_type": 2, "model_id": 30, "batch_size": 4,
                         "sent_ns": 5, "result_received_ns": 30},
                        {"action_id": 3, "action_type": 2, "model_id": 30, "sent_ns": 5,
                         "result_received_ns": 30, "result_processed_ns": 31}],
            "mpi_samples": [{"state": 2, "function": "MPI_Barrier", "callsite": "a+0x1", "count": 4, "period_ns": 1000}]
        }),
    );
    assert!(refused.is_empty(), "{refused:?}");
    let seen = || {
        let (code, body) = e.request("legacy", "GET", "/seen", b"");
        assert_eq!(code, 200, "{body}");
        serde_json::from_str::<serde_json::Value>(&body).unwrap()
    };
    assert!(
        wait_until(Duration::from_secs(10), || seen()["requests"]
            .as_array()
            .is_some_and(|r| !r.is_empty())),
        "{}",
        seen()
    );
    let s = seen();
    assert_eq!(s["requests"], serde_json::json!([[68, 30, 10, 20]]));
    // result_processed defaults to result_received, as 0.1 had it; batch_size to 1.
    assert_eq!(s["actions"], serde_json::json!([[2, 4, 30, 30], [3, 1, 30, 31]]));
    assert_eq!(s["mpi"], serde_json::json!([[2, "MPI_Barrier", "a+0x1", 4, 1000]]));
    assert_eq!(s["progress"], 1);
    assert_eq!(s["sink"], "ok", "0.1's open-sink writes in sinks.dir");
    assert!(e.sinks_dir.join("legacy01.tsv").exists());
}

#[test]
fn compiling_in_a_child_process_fills_the_cache_and_reports_what_went_wrong() {
    use sonde::plugin::engine::PluginEngine;
    let tmp = tempfile::tempdir().unwrap();
    let cache = tmp.path().join("cache");
    let sonde = std::path::PathBuf::from(env!("CARGO_BIN_EXE_sonde"));
    let engine = PluginEngine::new(&cache).unwrap().compiling_with(sonde.clone());
    let loaded = engine.load_component(&component("testing/testbed.wasm")).unwrap();
    assert!(!loaded.from_cache);
    assert_eq!(loaded.contract, "0.2.0");
    let files: Vec<_> = std::fs::read_dir(&cache)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(files.len(), 1, "one compiled file, no leftovers: {files:?}");
    // What the child wrote loads in an engine of this process (same settings).
    let again = PluginEngine::new(&cache).unwrap();
    assert!(
        again
            .load_component(&component("testing/testbed.wasm"))
            .unwrap()
            .from_cache
    );
    // A component the compiler refuses: its reason comes back.
    let mut broken = component("testing/testbed.wasm");
    broken.truncate(broken.len() / 2);
    let err = format!(
        "{:#}",
        engine.load_component(&broken).err().expect("a cut component fails")
    );
    assert!(
        !err.is_empty() && !err.contains("ended with"),
        "the compiler's own reason, not only its exit status: {err}"
    );
    // A compiler that cannot be started is an error too, not a hang.
    let missing = PluginEngine::new(&tmp.path().join("cache2"))
        .unwrap()
        .compiling_with(tmp.path().join("no-such-sonde"));
    let err = format!(
        "{:#}",
        missing
            .load_component(&component("testing/testbed.wasm"))
            .err()
            .unwrap()
    );
    assert!(err.contains("no-such-sonde"), "{err}");
}
