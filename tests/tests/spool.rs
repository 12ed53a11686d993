//! The export spool (`export.spool_max_bytes`): with it on, a collector that is
//! down, or a sonde killed while it was down, loses nothing: every point sonde
//! counted as exported is in rotel's log, counted point by point.

use std::time::{Duration, Instant};

use sonde_e2e::*;

const SPOOL: &str = "export.spool_max_bytes=67108864";

fn args(endpoint: u16) -> Vec<String> {
    [
        "--export-endpoint",
        &format!("http://127.0.0.1:{endpoint}"),
        "--set",
        "export.interval_ms=300",
        "--set",
        "export.self_metrics_interval_ms=500",
        "--set",
        SPOOL,
        // Without the spool a request would be given up after 1 s of retries.
        "--set",
        "export.retry_max_elapsed_ms=1000",
        "--set",
        "export.retry_max_ms=300",
    ]
    .map(String::from)
    .to_vec()
}

fn start(dir: &std::path::Path, endpoint: u16, port: Option<u16>) -> Sonde {
    let a = args(endpoint);
    let a: Vec<&str> = a.iter().map(String::as_str).collect();
    let plugins = [(plugin_file("bundled/sysmetrics.wasm"), "sysmetrics")];
    match port {
        Some(p) => Sonde::start_on(dir, &plugins, &a, p),
        None => Sonde::start(dir, &plugins, &a),
    }
}

fn stats(s: &Sonde) -> serde_json::Value {
    s.json("/api/status")["export"]["stats"].clone()
}

/// Data points in rotel's detailed log (every kind: "NumberDataPoints #n", ...).
fn received(rotel: &Rotel) -> u64 {
    rotel
        .received()
        .lines()
        .filter(|l| {
            let t = l.trim_start();
            t.split_once("DataPoints #")
                .is_some_and(|(kind, _)| kind.chars().all(|c| c.is_ascii_alphanumeric()))
        })
        .count() as u64
}

/// (exported, dropped, failed, spooled) from the last shutdown line of a stopped sonde.
fn final_counts(s: &Sonde) -> (u64, u64, u64, u64) {
    let out = s.output();
    let line = out
        .lines()
        .rfind(|l| l.contains("export pipeline stopped"))
        .unwrap_or_else(|| panic!("no shutdown line:\n{out}"));
    let plain: String = strip_ansi(line);
    let field = |k: &str| -> u64 {
        plain
            .split_whitespace()
            .find_map(|w| w.strip_prefix(&format!("{k}=")))
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("{k} missing in {plain}"))
    };
    (field("exported"), field("dropped"), field("failed"), field("spooled"))
}

fn strip_ansi(s: &str) -> String {
    let mut out = String::new();
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            for c in chars.by_ref() {
                if c.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// Stops `s` cleanly and checks that rotel got exactly what it counted as exported.
fn stop_and_balance(s: &mut Sonde, rotel: &Rotel) -> u64 {
    assert_eq!(
        s.proc.terminate(Duration::from_secs(10)).map(|st| st.success()),
        Some(true),
        "{}",
        s.output()
    );
    let (exported, dropped, failed, spooled) = final_counts(s);
    assert_eq!((dropped, failed, spooled), (0, 0, 0), "{}", s.output());
    // rotel logs what it answered; give its writer a moment.
    wait_for(Duration::from_secs(5), || received(rotel) >= exported);
    assert_eq!(
        received(rotel),
        exported,
        "every point sonde counted reached rotel, once"
    );
    exported
}

#[test]
fn a_collector_down_for_seconds_loses_nothing_once_it_is_up() {
    let tmp = tempfile::tempdir().unwrap();
    let grpc = free_port();
    let mut s = start(&tmp.path().join("sonde"), grpc, None);
    std::thread::sleep(Duration::from_secs(4));
    let st = stats(&s);
    assert!(st["spool_enabled"].as_bool().unwrap(), "{st}");
    assert!(st["spooled_requests"].as_u64().unwrap() >= 3, "{st}");
    assert!(st["queued_points"].as_u64().unwrap() > 0, "{st}");
    assert_eq!(
        (&st["points_failed"], &st["points_dropped"]),
        (&0.into(), &0.into()),
        "{st}"
    );

    let rotel = Rotel::start_on(tmp.path(), grpc);
    let drained = wait_for(Duration::from_secs(15), || {
        let st = stats(&s);
        st["spooled_requests"] == 0 && st["points_exported"].as_u64().unwrap() > 0
    });
    assert!(drained, "{}\n{}", stats(&s), s.output());
    let exported = stop_and_balance(&mut s, &rotel);
    assert!(exported > 0);
}

#[test]
fn a_sonde_killed_with_a_full_spool_sends_it_after_its_restart() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("sonde");
    let grpc = free_port();
    let mut s = start(&dir, grpc, None);
    let spooled = wait_for(Duration::from_secs(15), || {
        stats(&s)["queued_points"].as_u64().unwrap_or(0) >= 50
    });
    assert!(spooled, "{}", stats(&s));
    let before = stats(&s)["queued_points"].as_u64().unwrap();
    s.proc.child.kill().unwrap();
    s.proc.child.wait().unwrap();
    let killed_at = now_ns();
    std::thread::sleep(Duration::from_millis(300));

    let rotel = Rotel::start_on(tmp.path(), grpc);
    let t0 = Instant::now();
    let mut s = start(&dir, grpc, None);
    let st = stats(&s);
    assert!(
        st["points_in"].as_u64().unwrap() >= before,
        "the spool was read back in: {st} (had {before})"
    );
    let drained = wait_for(Duration::from_secs(15), || stats(&s)["spooled_requests"] == 0);
    assert!(drained, "{}", stats(&s));
    assert!(t0.elapsed() < Duration::from_secs(20));
    // The first process's points (sampled before the kill) are among what arrived.
    let old = parse_rotel_points(&rotel.received())
        .iter()
        .filter(|p| p.time_ns > 0 && p.time_ns < killed_at)
        .count() as u64;
    assert!(
        old >= before,
        "{old} points from before the kill arrived, {before} were spooled"
    );
    stop_and_balance(&mut s, &rotel);
}
