//! Loading and removing plugins leaves nothing behind: after hostile plugins
//! (spin, memory bomb, trap, one still stuck in a long guest call) and a
//! well-behaved one (echo, which opens a sink and the state store) are
//! removed from the plugins directory, the process's threads and open file
//! descriptors come back to where they were before they were loaded.
//!
//! One test in this file on purpose: it counts `/proc/self/task` and
//! `/proc/self/fd`, which other tests running beside it would disturb.
//! Needs the testbed component (`scripts/build-plugins.sh`). Linux only (/proc).
#![cfg(target_os = "linux")]

use std::sync::Arc;
use std::time::{Duration, Instant};

use sonde::model::{SeriesInfo, SeriesKind, Tick};
use sonde::pipeline::Pipeline;
use sonde::plugin::config::PluginConfig;
use sonde::plugin::{PluginManager, RunState};

mod common;

fn count(dir: &str) -> usize {
    std::fs::read_dir(dir).unwrap().count()
}

/// (threads, open fds) of this process.
fn usage() -> (usize, usize) {
    (count("/proc/self/task"), count("/proc/self/fd"))
}

fn describe() -> String {
    let threads: Vec<String> = std::fs::read_dir("/proc/self/task")
        .unwrap()
        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
        .map(|c| c.trim().to_string())
        .collect();
    let fds: Vec<String> = std::fs::read_dir("/proc/self/fd")
        .unwrap()
        .filter_map(|f| std::fs::read_link(f.ok()?.path()).ok())
        .map(|l| l.display().to_string())
        .collect();
    format!("threads {threads:?}\nfds {fds:?}")
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

fn series() -> Vec<SeriesInfo> {
    vec![SeriesInfo {
        id: 0,
        metric: "system.cpu.utilization".into(),
        unit: "1".into(),
        kind: SeriesKind::Gauge,
        attributes: vec![],
    }]
}

#[test]
fn removed_plugins_leave_no_threads_or_fds_behind() {
    let wasm = common::component("testing/testbed.wasm");
    let tmp = tempfile::tempdir().unwrap();
    let mut cfg = common::config_in(tmp.path());
    cfg.plugins.max_traps = 2;
    cfg.plugins.backoff_initial_ms = 20;
    cfg.plugins.memory_limit_mb = 16;
    // Still inside a guest call when its file goes: unload must not wait for
    // it, and its thread must end once the deadline interrupts the call.
    cfg.plugin.insert(
        "spin-long".into(),
        PluginConfig {
            call_timeout_ms: Some(1500),
            ..Default::default()
        },
    );
    cfg.validate().unwrap();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    // As in the host: the manager is made inside the runtime.
    let _enter = rt.enter();
    let (pipeline, task) = Pipeline::start(&cfg.export, vec![]).unwrap();
    std::mem::forget(task);
    let manager: Arc<PluginManager> = PluginManager::new(&cfg, pipeline).unwrap();
    let dir = cfg.plugins_dir();
    let install = |name: &str| {
        let tmp = dir.join(format!(".{name}.wasm.tmp"));
        std::fs::write(&tmp, &wasm).unwrap();
        std::fs::rename(&tmp, dir.join(format!("{name}.wasm"))).unwrap();
    };
    let state = |name: &str| manager.status(name).map(|s| s.state);
    let tick = |i: u64| {
        let t = Tick {
            time_ns: sonde::model::now_ns(),
            values: vec![0.5 + i as f64 * 0.01],
        };
        manager.on_tick(&t, &series());
    };

    // A first load compiles the component if the shared cache lacks it; the
    // compiler's thread pool starts then and stays, so count after it.
    install("noop");
    manager.scan(false);
    assert_eq!(state("noop"), Some(RunState::Running));
    let with_noop = usage();
    std::fs::remove_file(dir.join("noop.wasm")).unwrap();
    manager.scan(false);
    assert_eq!(state("noop"), None);
    // Unloading does not join the plugin's thread, so it may still be ending:
    // counted into `before`, it would hide a thread left behind later.
    assert!(
        wait_until(Duration::from_secs(5), || usage().0 < with_noop.0),
        "noop's thread did not end: {:?} vs {with_noop:?}\n{}",
        usage(),
        describe()
    );
    let before = usage();
    let before_text = describe();

    for round in 1..=2 {
        for name in ["spin", "membomb", "trap", "echo", "spin-long"] {
            install(name);
        }
        manager.scan(false);
        for name in ["spin", "membomb", "trap", "echo", "spin-long"] {
            assert!(state(name).is_some(), "round {round}: {name} not loaded");
        }
        let hostile_done = wait_until(Duration::from_secs(15), || {
            tick(0);
            std::thread::sleep(Duration::from_millis(80));
            ["spin", "membomb", "trap"]
                .iter()
                .all(|n| state(n) == Some(RunState::Quarantined))
        });
        assert!(hostile_done, "round {round}: {:?}", manager.statuses());
        assert_eq!(state("echo"), Some(RunState::Running));
        // Make sure spin-long is inside its 1.5 s call when it is removed.
        tick(1);
        std::thread::sleep(Duration::from_millis(150));
        let loaded = usage();
        assert!(
            loaded.0 >= before.0 + 5,
            "one thread per plugin: {loaded:?} vs {before:?}"
        );

        for name in ["spin", "membomb", "trap", "echo", "spin-long"] {
            std::fs::remove_file(dir.join(format!("{name}.wasm"))).unwrap();
        }
        let t0 = Instant::now();
        manager.scan(false);
        let unload_took = t0.elapsed();
        assert!(manager.statuses().is_empty(), "{:?}", manager.statuses());
        // Five plugins, each waited for at most call_timeout + 200 ms.
        assert!(unload_took < Duration::from_secs(3), "unloading took {unload_took:?}");
        let back = wait_until(Duration::from_secs(5), || {
            let now = usage();
            now.0 <= before.0 && now.1 <= before.1
        });
        assert!(
            back,
            "round {round}: threads and fds {:?}, before loading {before:?}\nnow:\n{}\nbefore:\n{before_text}",
            usage(),
            describe()
        );
    }
}
