//! Helpers for the end-to-end tests: start the real `sonde` binary and a real
//! OpenTelemetry collector (rotel, from PyPI), talk HTTP to the API, and read
//! what the collector received from its detailed debug log.
//!
//! The binaries come from the build the test command already did:
//! `target/debug/sonde` (or `$SONDE_BIN`) and the plugins in `target/plugins/`.

use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

// The parts the host's own tests share (test certificates, the engines,
// a port and an HTTP client), from a crate that does not depend on sonde.
pub use sonde_test_support::{engines, free_port, http, http_with, pki};

pub mod proxy;

/// `mpirun -np NP` of an Open MPI job with the MPI probe
/// (`target/probes/libsonde_mpi.so`) preloaded, reporting job `job` to the
/// sonde whose API is `api`, flushing every 200 ms; the caller adds more `-x`
/// variables, the program and its arguments. No binding: ranks pinned two per
/// core would wait on each other's time slices; unbound, the scheduler spreads
/// them over whatever is free.
pub fn mpirun_probed(np: u32, api: &str, job: &str) -> Command {
    let mut c = Command::new("mpirun");
    c.args(["--allow-run-as-root", "--oversubscribe", "--bind-to", "none", "-np"])
        .arg(np.to_string())
        .arg("-x")
        .arg(format!(
            "LD_PRELOAD={}",
            repo().join("target/probes/libsonde_mpi.so").display()
        ))
        .arg("-x")
        .arg(format!("MPI_SONDE_ENDPOINT={api}"))
        .arg("-x")
        .arg(format!("MPI_SONDE_JOB={job}"))
        .args(["-x", "MPI_SONDE_FLUSH_MS=200"]);
    c
}

pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
}

pub fn sonde_bin() -> PathBuf {
    let p = std::env::var_os("SONDE_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo().join("target/debug/sonde"));
    assert!(
        p.exists(),
        "{} is missing: build it first (`cargo build -p sonde`)",
        p.display()
    );
    p
}

pub fn plugin_file(rel: &str) -> PathBuf {
    let p = repo().join("target/plugins").join(rel);
    assert!(p.exists(), "{} is missing: run scripts/build-plugins.sh", p.display());
    p
}

/// The logical CPUs /proc/stat lists (`cpuN` lines): what sonde samples per core.
pub fn logical_cpus() -> usize {
    let stat = std::fs::read_to_string("/proc/stat").unwrap();
    stat.lines()
        .filter(|l| l.starts_with("cpu") && !l.starts_with("cpu "))
        .count()
}

/// A child process killed when dropped.
pub struct Proc {
    pub child: Child,
    pub name: &'static str,
}

impl Proc {
    /// Sends SIGTERM and waits up to `limit` for the exit status.
    pub fn terminate(&mut self, limit: Duration) -> Option<std::process::ExitStatus> {
        unsafe_kill(self.child.id(), 15);
        let t0 = Instant::now();
        while t0.elapsed() < limit {
            if let Ok(Some(s)) = self.child.try_wait() {
                return Some(s);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        None
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn unsafe_kill(pid: u32, sig: i32) {
    // `kill` from coreutils keeps this crate free of libc bindings.
    let _ = Command::new("kill")
        .arg(format!("-{sig}"))
        .arg(pid.to_string())
        .status();
}

/// The rotel-agent executable shipped in the `rotel` wheel.
pub fn rotel_bin() -> PathBuf {
    if let Some(p) = std::env::var_os("ROTEL_AGENT") {
        return PathBuf::from(p);
    }
    let out = Command::new("python3")
        .args([
            "-c",
            "import rotel, os; print(os.path.join(os.path.dirname(rotel.__file__), 'rotel-agent'))",
        ])
        .output()
        .expect("running python3");
    let p = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
    assert!(
        p.exists(),
        "rotel-agent not found ({}); `pip install rotel` (the test command does it)",
        String::from_utf8_lossy(&out.stderr)
    );
    p
}

/// A running rotel collector writing every metric and log record it receives to `log`.
pub struct Rotel {
    pub proc: Proc,
    pub grpc: u16,
    pub http: u16,
    pub log: PathBuf,
}

impl Rotel {
    pub fn start(dir: &Path) -> Rotel {
        Rotel::start_on(dir, free_port())
    }

    /// The same with its gRPC receiver on a given port (one a sonde already exports to).
    pub fn start_on(dir: &Path, grpc: u16) -> Rotel {
        let http = free_port();
        let log = dir.join("rotel.log");
        let out = std::fs::File::create(&log).unwrap();
        let child = Command::new(rotel_bin())
            .args(["start", "--exporter", "blackhole"])
            .args(["--otlp-grpc-endpoint", &format!("127.0.0.1:{grpc}")])
            .args(["--otlp-http-endpoint", &format!("127.0.0.1:{http}")])
            .args([
                "--debug-log",
                "metrics",
                "--debug-log",
                "logs",
                "--debug-log-verbosity",
                "detailed",
            ])
            .stdout(out.try_clone().unwrap())
            .stderr(out)
            .spawn()
            .expect("starting rotel-agent");
        let r = Rotel {
            proc: Proc { child, name: "rotel" },
            grpc,
            http,
            log,
        };
        assert!(
            wait_for(Duration::from_secs(10), || TcpStream::connect(("127.0.0.1", grpc))
                .is_ok()),
            "rotel did not listen"
        );
        r
    }

    pub fn received(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

/// A running sonde with its own data, plugins and sinks directories.
pub struct Sonde {
    pub proc: Proc,
    pub api: String,
    pub out: PathBuf,
    pub dir: PathBuf,
}

impl Sonde {
    /// Starts sonde with the given plugins (source path, name) and extra flags
    /// (`{port}` in a flag becomes the API's port, e.g. `api.listen=0.0.0.0:{port}`).
    pub fn start(dir: &Path, plugins: &[(PathBuf, &str)], args: &[&str]) -> Sonde {
        Sonde::start_on(dir, plugins, args, free_port())
    }

    /// The same on a given API port (to restart a sonde where its clients expect it).
    pub fn start_on(dir: &Path, plugins: &[(PathBuf, &str)], args: &[&str], port: u16) -> Sonde {
        Sonde::start_env(dir, plugins, args, &[], port)
    }

    /// The same with extra environment variables (`OTEL_EXPORTER_OTLP_*`).
    pub fn start_env(dir: &Path, plugins: &[(PathBuf, &str)], args: &[&str], env: &[(&str, &str)], port: u16) -> Sonde {
        Sonde::start_waiting(dir, plugins, args, env, port, Duration::from_secs(60))
    }

    /// The same, waiting up to `ready` for it: a debug build compiles a
    /// Python or JavaScript component (an interpreter inside) for a minute
    /// or more the first time, and sonde is ready once its plugins are loaded.
    pub fn start_waiting(
        dir: &Path,
        plugins: &[(PathBuf, &str)],
        args: &[&str],
        env: &[(&str, &str)],
        port: u16,
        ready: Duration,
    ) -> Sonde {
        let pdir = dir.join("plugins");
        std::fs::create_dir_all(&pdir).unwrap();
        std::fs::create_dir_all(dir.join("sinks")).unwrap();
        for (src, name) in plugins {
            std::fs::copy(src, pdir.join(format!("{name}.wasm"))).unwrap();
        }
        // Compiled plugins are shared between runs so the tests do not recompile in debug mode.
        let data = dir.join("data");
        std::fs::create_dir_all(&data).unwrap();
        let cache = repo().join("target/test-plugin-cache");
        std::fs::create_dir_all(&cache).unwrap();
        let _ = std::os::unix::fs::symlink(&cache, data.join("cache"));
        let api = format!("127.0.0.1:{port}");
        let out = dir.join("sonde.out");
        // Appended: a restarted sonde's output follows the first one's.
        let f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&out)
            .unwrap();
        // The OTLP receivers default to the well-known ports 4317/4318, which
        // tests running in parallel would fight over: off unless asked for.
        let mut receivers: Vec<&str> = Vec::new();
        if !args.iter().any(|a| a.contains("ingest.otlp")) {
            receivers.extend([
                "--set",
                "ingest.otlp_grpc_listen=\"off\"",
                "--set",
                "ingest.otlp_http_listen=\"off\"",
            ]);
        }
        let child = Command::new(sonde_bin())
            .arg("--data-dir")
            .arg(&data)
            .arg("--plugins-dir")
            .arg(&pdir)
            .arg("--sinks-dir")
            .arg(dir.join("sinks"))
            .args(["--listen", &api])
            .args(&receivers)
            .args(args.iter().map(|a| a.replace("{port}", &port.to_string())))
            .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(f.try_clone().unwrap())
            .stderr(f)
            .spawn()
            .expect("starting sonde");
        let s = Sonde {
            proc: Proc { child, name: "sonde" },
            api,
            out,
            dir: dir.to_path_buf(),
        };
        let up = wait_for(ready, || s.get("/api/ready").0 == 200);
        assert!(up, "sonde did not become ready:\n{}", s.output());
        s
    }

    /// A sonde with no plugins whose only OTLP receiver is HTTP, on a free
    /// port (returned), plus `args`.
    pub fn start_otlp_http(dir: &Path, args: &[&str]) -> (Sonde, u16) {
        Sonde::start_otlp_http_with(dir, &[], args)
    }

    /// The same with `plugins`.
    pub fn start_otlp_http_with(dir: &Path, plugins: &[(PathBuf, &str)], args: &[&str]) -> (Sonde, u16) {
        let port = free_port();
        let listen = format!("ingest.otlp_http_listen=\"127.0.0.1:{port}\"");
        let mut all = vec!["--set", listen.as_str(), "--set", "ingest.otlp_grpc_listen=\"off\""];
        all.extend_from_slice(args);
        (Sonde::start(dir, plugins, &all), port)
    }

    pub fn get(&self, path: &str) -> (u16, String) {
        http(&self.api, "GET", path, b"")
    }

    pub fn json(&self, path: &str) -> serde_json::Value {
        let (code, body) = self.get(path);
        assert_eq!(code, 200, "{path}: {body}");
        serde_json::from_str(&body).unwrap()
    }

    pub fn output(&self) -> String {
        std::fs::read_to_string(&self.out).unwrap_or_default()
    }
}

pub fn wait_for(limit: Duration, mut f: impl FnMut() -> bool) -> bool {
    let t0 = Instant::now();
    while t0.elapsed() < limit {
        if f() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    f()
}

/// Every decision a plugin makes from the moment [`DecisionLog::start`]
/// returns, as `GET /api/stream?plugin=…` sends them (it looks every 100 ms),
/// gathered by a thread until the log is dropped. `/api/decisions` keeps only
/// the latest decision per subject: one that a later decision about the same
/// subject replaced is still here.
pub struct DecisionLog {
    seen: std::sync::Arc<std::sync::Mutex<Vec<serde_json::Value>>>,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl DecisionLog {
    /// Opens the stream of `plugin`'s decisions on the API at `api` and
    /// returns once its first event (the decisions made so far) is in.
    pub fn start(api: &str, plugin: &str) -> DecisionLog {
        use std::io::{Read, Write};
        use std::sync::atomic::{AtomicBool, Ordering};
        use std::sync::{Arc, Mutex};
        let seen = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let (ready_tx, ready) = std::sync::mpsc::channel();
        let mut s = TcpStream::connect(api).unwrap();
        s.set_read_timeout(Some(Duration::from_millis(200))).unwrap();
        // HTTP/1.0: the body comes as it is, no chunked framing, until closed.
        write!(
            s,
            "GET /api/stream?plugin={plugin}&interval_ms=100&window_s=1&max_points=1 HTTP/1.0\r\n\
             Host: {api}\r\nAccept: text/event-stream\r\n\r\n"
        )
        .unwrap();
        let thread = {
            let (seen, stop) = (seen.clone(), stop.clone());
            std::thread::spawn(move || {
                let (mut raw, mut buf, mut at) = (Vec::<u8>::new(), [0u8; 65536], None::<usize>);
                let mut ready_tx = Some(ready_tx);
                while !stop.load(Ordering::Relaxed) {
                    match s.read(&mut buf) {
                        Ok(0) => break,
                        Ok(k) => raw.extend_from_slice(&buf[..k]),
                        Err(_) => continue, // the read timeout: look at `stop` again
                    }
                    let Some(body) = at.or_else(|| raw.windows(4).position(|w| w == b"\r\n\r\n").map(|i| i + 4)) else {
                        continue;
                    };
                    // Each complete event (ends with a blank line), once.
                    let mut from = body;
                    while let Some(n) = raw[from..].windows(2).position(|w| w == b"\n\n") {
                        let block = String::from_utf8_lossy(&raw[from..from + n]).into_owned();
                        from += n + 2;
                        let data = block.lines().find_map(|l| l.strip_prefix("data: "));
                        if let Some(frame) = data.and_then(|d| serde_json::from_str::<serde_json::Value>(d).ok()) {
                            let new = frame["decisions"].as_array().cloned().unwrap_or_default();
                            seen.lock().unwrap().extend(new);
                            if let Some(tx) = ready_tx.take() {
                                let _ = tx.send(());
                            }
                        }
                    }
                    at = Some(from);
                }
            })
        };
        ready
            .recv_timeout(Duration::from_secs(30))
            .expect("the decision stream sent no first event");
        DecisionLog {
            seen,
            stop,
            thread: Some(thread),
        }
    }

    /// The decisions seen so far, in the order they were made.
    pub fn all(&self) -> Vec<serde_json::Value> {
        self.seen.lock().unwrap().clone()
    }
}

impl Drop for DecisionLog {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// One metric as rotel's detailed debug log prints it.
#[derive(Debug, Default, Clone)]
pub struct SeenMetric {
    pub scope: String,
    pub name: String,
    pub unit: String,
    pub data_type: String,
    pub monotonic: Option<bool>,
    /// (attributes "k=v" sorted, value) per data point.
    pub points: Vec<(Vec<String>, f64)>,
}

/// Parses the metrics section of rotel's detailed debug output.
pub fn parse_rotel_metrics(log: &str) -> Vec<SeenMetric> {
    let mut out: Vec<SeenMetric> = Vec::new();
    let mut scope = String::new();
    let mut attrs: Vec<String> = Vec::new();
    let mut in_point = false;
    for line in log.lines() {
        let t = line.trim();
        if let Some(s) = t.strip_prefix("InstrumentationScope ") {
            scope = s.trim().to_string();
        } else if t.starts_with("Metric #") {
            out.push(SeenMetric {
                scope: scope.clone(),
                ..Default::default()
            });
            in_point = false;
        } else if t.starts_with("ResourceMetrics #") || t.starts_with("ResourceLog") {
            in_point = false;
        } else if let Some(m) = out.last_mut() {
            if let Some(v) = t.strip_prefix("-> Name: ") {
                m.name = v.to_string();
            } else if let Some(v) = t.strip_prefix("-> Unit: ") {
                m.unit = v.to_string();
            } else if let Some(v) = t.strip_prefix("-> DataType: ") {
                m.data_type = v.to_string();
            } else if let Some(v) = t.strip_prefix("-> IsMonotonic: ") {
                m.monotonic = Some(v == "true");
            } else if t.starts_with("NumberDataPoints #") {
                attrs.clear();
                in_point = true;
            } else if in_point && t.starts_with("-> ") {
                if let Some((k, v)) = t[3..].split_once(": ") {
                    attrs.push(format!("{k}={v}"));
                }
            } else if let (true, Some(v)) = (in_point, t.strip_prefix("Value: "))
                && let Ok(x) = v.parse::<f64>()
            {
                attrs.sort();
                m.points.push((attrs.clone(), x));
            }
        }
    }
    out
}

/// One data point of a metric, with its timestamp, as rotel's detailed debug log prints it.
#[derive(Debug, Default, Clone)]
pub struct SeenPoint {
    pub name: String,
    /// Data point attributes, "k=v" sorted.
    pub attrs: Vec<String>,
    pub time_ns: u64,
    pub value: f64,
}

impl SeenPoint {
    pub fn has(&self, attr: &str) -> bool {
        self.attrs.iter().any(|a| a == attr)
    }
}

/// Every number data point in rotel's detailed debug output, with its timestamp.
pub fn parse_rotel_points(log: &str) -> Vec<SeenPoint> {
    let mut out = Vec::new();
    let mut name = String::new();
    let mut cur: Option<SeenPoint> = None;
    for line in log.lines() {
        let t = line.trim();
        if t.starts_with("Metric #") || t.starts_with("ResourceMetrics #") || t.starts_with("ResourceLog") {
            cur = None;
        } else if let Some(v) = t.strip_prefix("-> Name: ")
            && cur.is_none()
        {
            name = v.to_string();
        } else if t.starts_with("NumberDataPoints #") {
            cur = Some(SeenPoint {
                name: name.clone(),
                ..Default::default()
            });
        } else if let Some(p) = cur.as_mut() {
            if let Some(v) = t.strip_prefix("Timestamp: ") {
                p.time_ns = v.parse().unwrap_or(0);
            } else if let Some(v) = t.strip_prefix("Value: ") {
                p.value = v.parse().unwrap_or(f64::NAN);
                p.attrs.sort();
                out.push(cur.take().unwrap());
            } else if let Some((k, v)) = t.strip_prefix("-> ").and_then(|a| a.split_once(": ")) {
                p.attrs.push(format!("{k}={v}"));
            }
        }
    }
    out
}

/// One log record as rotel's detailed debug log prints it.
#[derive(Debug, Default, Clone)]
pub struct SeenLog {
    pub event_name: String,
    pub time_ns: u64,
    /// The body's text (`Body: Str(...)`).
    pub body: String,
    /// Attributes, "k=v" as printed.
    pub attrs: Vec<String>,
}

/// Every log record in rotel's detailed debug output.
pub fn parse_rotel_logs(log: &str) -> Vec<SeenLog> {
    let mut out: Vec<SeenLog> = Vec::new();
    let mut in_record = false;
    let mut in_attrs = false;
    for line in log.lines() {
        let t = line.trim();
        if t.starts_with("LogRecord #") {
            out.push(SeenLog::default());
            in_record = true;
            in_attrs = false;
        } else if t.starts_with("ResourceLog") || t.starts_with("ResourceMetrics #") || t.starts_with("ScopeLogs #") {
            in_record = false;
        } else if in_record && let Some(r) = out.last_mut() {
            if let Some(v) = t.strip_prefix("EventName: ") {
                r.event_name = v.to_string();
            } else if let Some(v) = t.strip_prefix("Timestamp: ") {
                r.time_ns = v.parse().unwrap_or(0);
            } else if let Some(v) = t.strip_prefix("Body: Str(") {
                r.body = v.strip_suffix(')').unwrap_or(v).to_string();
            } else if t == "Attributes:" {
                in_attrs = true;
            } else if in_attrs && let Some((k, v)) = t.strip_prefix("-> ").and_then(|a| a.split_once(": ")) {
                r.attrs.push(format!("{k}={v}"));
            } else if t.starts_with("Trace ID") {
                in_attrs = false;
            }
        }
    }
    out
}

/// One `determined.profiler.batch` record: Determined's batch format.
#[derive(Debug, Clone)]
pub struct ProfilerBatch {
    pub trial: String,
    pub agent: String,
    pub metric: String,
    /// SYSTEM | TIMING | MISC
    pub kind: String,
    pub unit: String,
    pub values: Vec<f64>,
    pub batch_indices: Vec<u64>,
    pub timestamps: Vec<u64>,
}

/// The determined plugin's batch records among the log records rotel received.
pub fn parse_profiler_batches(log: &str) -> Vec<ProfilerBatch> {
    parse_rotel_logs(log)
        .into_iter()
        .filter(|r| r.event_name == "determined.profiler.batch")
        .map(|r| {
            let v: serde_json::Value = serde_json::from_str(&r.body)
                .unwrap_or_else(|e| panic!("batch record body is not JSON ({e}): {}", r.body));
            let text = |k: &str| v[k].as_str().unwrap_or_else(|| panic!("{k} missing: {v}")).to_string();
            let list = |k: &str| v[k].as_array().unwrap_or_else(|| panic!("{k} missing: {v}")).clone();
            let b = ProfilerBatch {
                trial: text("trial"),
                agent: text("agent"),
                metric: text("metric"),
                kind: text("type"),
                unit: text("unit"),
                values: list("values").iter().map(|x| x.as_f64().unwrap()).collect(),
                batch_indices: list("batch_indices").iter().map(|x| x.as_u64().unwrap()).collect(),
                timestamps: list("timestamps").iter().map(|x| x.as_u64().unwrap()).collect(),
            };
            assert!(
                b.values.len() == b.batch_indices.len() && b.values.len() == b.timestamps.len(),
                "the arrays of a batch record are parallel: {v}"
            );
            b
        })
        .collect()
}

/// Nanoseconds since the epoch (the clock every part of these tests shares).
pub fn now_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64
}

/// POSTs a JSON body; (status, body).
pub fn post_json(addr: &str, path: &str, body: &serde_json::Value) -> (u16, String) {
    http_with(
        addr,
        "POST",
        path,
        &[("content-type", "application/json")],
        body.to_string().as_bytes(),
    )
}

/// Runs `cmd` in `dir` through bash (a README's build command, as a user
/// types it); panics with its output when it fails.
pub fn shell(dir: &Path, cmd: &str) {
    let out = Command::new("bash")
        .args(["-euo", "pipefail", "-c", cmd])
        .current_dir(dir)
        .output()
        .unwrap_or_else(|e| panic!("running {cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed in {}:\n{}{}",
        dir.display(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `sonde plugin test WASM --events REC ARGS... --json`, compiling into the
/// tests' shared cache: (exit code, the JSON report if any (else null), stderr).
pub fn plugin_test(wasm: &Path, rec: &Path, args: &[&str]) -> (i32, serde_json::Value, String) {
    let out = Command::new(sonde_bin())
        .args(["plugin", "test"])
        .arg(wasm)
        .arg("--events")
        .arg(rec)
        .arg("--cache-dir")
        .arg(repo().join("target/test-plugin-cache"))
        .args(args)
        .arg("--json")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let report = serde_json::from_str(&stdout).unwrap_or(serde_json::Value::Null);
    (
        out.status.code().unwrap_or(-1),
        report,
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Removes the compiled form of the component with this sha256 from the tests'
/// shared compile cache (`target/test-plugin-cache`). For guests built by a
/// test: componentize-py and componentize-js do not build the same bytes twice,
/// so each run's guests are new cache entries (about 35 MB each in a debug
/// host) that no later run can use, and the cache would grow by every run.
pub fn forget_compiled(sha256: &str) {
    assert_eq!(sha256.len(), 64, "not a sha256: {sha256:?}");
    let cache = repo().join("target/test-plugin-cache");
    for e in std::fs::read_dir(&cache).into_iter().flatten().flatten() {
        if e.file_name().to_string_lossy().starts_with(sha256) {
            let _ = std::fs::remove_file(e.path());
        }
    }
}

/// `sonde record --seconds N --api API --out OUT`, the real command.
pub fn sonde_record(api: &str, seconds: u64, out: &Path) -> std::process::Output {
    Command::new(sonde_bin())
        .args(["record", "--seconds", &seconds.to_string(), "--api", api, "--out"])
        .arg(out)
        .output()
        .unwrap()
}

/// Records `seconds` of `s` into `out` with `sonde record` while `during`
/// runs (started once the recording is); returns what the command did.
pub fn record_while(s: &Sonde, seconds: u64, out: &Path, during: impl FnOnce()) -> std::process::Output {
    let recorder = {
        let (api, out) = (s.api.clone(), out.to_path_buf());
        std::thread::spawn(move || sonde_record(&api, seconds, &out))
    };
    let on = wait_for(Duration::from_secs(20), || {
        !s.json("/api/status")["recording"].is_null()
    });
    assert!(on, "no recording started:\n{}", s.output());
    during();
    recorder.join().unwrap()
}

/// The same, ending the recording `tail` after `during` returns (`DELETE
/// /api/record`), `seconds` being the most it may take: for a `during` that
/// waits until the plugins decided what the recording must reproduce. The
/// tail holds the sampling ticks after it, on which a plugin's timer fires
/// again in the replay (the bundled plugins' timers tick once a second): a
/// window a timer closed live closes in the replay only if the recording
/// reaches that far.
pub fn record_until(
    s: &Sonde,
    seconds: u64,
    tail: Duration,
    out: &Path,
    during: impl FnOnce(),
) -> std::process::Output {
    record_while(s, seconds, out, || {
        during();
        std::thread::sleep(tail);
        let (code, body) = http(&s.api, "DELETE", "/api/record", b"");
        assert_eq!(code, 200, "stopping the recording: {body}");
    })
}

/// Held by the scenarios that want the machine's CPUs as quiet as the test
/// run allows: the bottleneck plugin's CPU verdicts and the MPI jobs of several
/// ranks. One of them at a time in the test binary, whichever file it is in.
pub fn one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    static ONE: std::sync::Mutex<()> = std::sync::Mutex::new(());
    ONE.lock().unwrap_or_else(|e| e.into_inner())
}

/// Whether a missing toolchain fails the test that needs it instead of
/// skipping it: under CI (`CI=true`, as CI services set it) and in `./dev
/// test` (`REQUIRE_TOOLCHAINS=1`), so a missing toolchain never passes there.
pub fn toolchains_required() -> bool {
    let set = |k: &str| std::env::var(k).is_ok_and(|v| !v.is_empty() && v != "0" && v != "false");
    set("CI") || set("REQUIRE_TOOLCHAINS")
}

/// Says that `what` is missing, with `hint`: a failure when
/// [`toolchains_required`], otherwise a line saying the calling test is skipped.
fn missing_toolchain(what: &str, hint: &str) {
    if toolchains_required() {
        panic!("{what} is missing; {hint} (CI or REQUIRE_TOOLCHAINS is set: a missing toolchain fails)");
    }
    eprintln!("SKIPPED: {what} is missing; {hint}");
}

/// Whether componentize-py (the Python guests' toolchain) is installed;
/// when not, says the calling test is skipped, or fails it under CI.
pub fn have_componentize_py() -> bool {
    let ok = Command::new("componentize-py")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        missing_toolchain("componentize-py", "`./dev guest-toolchains` installs it");
    }
    ok
}

/// Whether Debian's buildah and podman (with runc, the runtime this machine's
/// cgroups allow) and busybox-static are installed, as `./dev
/// container-tools` installs them; when not, says the calling test is
/// skipped, or fails it under CI.
pub fn have_container_tools() -> bool {
    let runs = |tool: &str| {
        Command::new(tool)
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success())
    };
    let missing: Vec<&str> = ["buildah", "podman", "runc"]
        .into_iter()
        .filter(|t| !runs(t))
        .chain((!Path::new("/bin/busybox").exists()).then_some("busybox-static"))
        .collect();
    if !missing.is_empty() {
        missing_toolchain(&missing.join(", "), "`./dev container-tools` installs them");
    }
    missing.is_empty()
}

/// The JavaScript guests' toolchain as `./dev guest-toolchains` installs it
/// (`tests/guest-js/node_modules`, componentize-js pinned there); when it is
/// missing, says the calling test is skipped, or fails it under CI.
pub fn guest_js_toolchain() -> Option<PathBuf> {
    let dir = repo().join("tests/guest-js/node_modules");
    if dir.join(".bin/componentize-js").exists() {
        return Some(dir);
    }
    missing_toolchain(&dir.display().to_string(), "`./dev guest-toolchains` installs it");
    None
}

/// Waits until the file stops growing for `quiet` (or `limit` passes).
pub fn wait_quiet(path: &Path, quiet: Duration, limit: Duration) {
    let t0 = Instant::now();
    let mut last = (u64::MAX, Instant::now());
    while t0.elapsed() < limit {
        let len = std::fs::metadata(path).map(|m| m.len()).unwrap_or(0);
        if len != last.0 {
            last = (len, Instant::now());
        } else if last.1.elapsed() >= quiet {
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The flags of a `sonde --role master` named `the-master` whose only OTLP
/// receiver is gRPC on 127.0.0.1:`grpc`, plus `extra`.
pub fn master_args(grpc: u16, extra: &[&str]) -> Vec<String> {
    let listen = format!("ingest.otlp_grpc_listen=\"127.0.0.1:{grpc}\"");
    let mut args = vec![
        "--role",
        "master",
        "--set",
        listen.as_str(),
        "--set",
        "ingest.otlp_http_listen=\"off\"",
        "--set",
        "host.name=\"the-master\"",
    ];
    args.extend_from_slice(extra);
    args.iter().map(|s| s.to_string()).collect()
}

/// A `sonde --role agent` named `name` (its `host.name`) under `dir/name`,
/// sampling every 100 ms with sysmetrics and exporting to the master's OTLP/gRPC
/// port every 300 ms.
pub fn cluster_agent(dir: &Path, name: &str, master_grpc: u16) -> Sonde {
    cluster_agent_with(dir, name, master_grpc, &[], &[])
}

/// The same with extra flags (`--set export.spool_max_bytes=…`) and
/// environment variables (a faked clock).
pub fn cluster_agent_with(dir: &Path, name: &str, master_grpc: u16, extra: &[&str], env: &[(&str, &str)]) -> Sonde {
    let master = format!("http://127.0.0.1:{master_grpc}");
    let host = format!("host.name=\"{name}\"");
    let mut args = vec![
        "--role",
        "agent",
        "--master",
        master.as_str(),
        "--set",
        host.as_str(),
        "--set",
        "export.interval_ms=300",
        "--set",
        "cluster.heartbeat_ms=300",
        "--set",
        "sampler.period_ms=100",
    ];
    args.extend_from_slice(extra);
    Sonde::start_env(
        &dir.join(name),
        &[(plugin_file("bundled/sysmetrics.wasm"), "sysmetrics")],
        &args,
        env,
        free_port(),
    )
}

/// The resource attribute keys in rotel's detailed debug output (each once, sorted).
pub fn parse_rotel_resource_keys(log: &str) -> Vec<String> {
    let mut keys = std::collections::BTreeSet::new();
    let mut in_resource = false;
    for line in log.lines() {
        let t = line.trim();
        if t.starts_with("ResourceMetrics #") || t.starts_with("ResourceLog") || t.starts_with("ResourceSpans #") {
            in_resource = true;
        } else if t.starts_with("Scope") || t.starts_with("InstrumentationScope") {
            in_resource = false;
        } else if in_resource && let Some((k, _)) = t.strip_prefix("-> ").and_then(|a| a.split_once(": ")) {
            keys.insert(k.to_string());
        }
    }
    keys.into_iter().collect()
}

/// The fake NVML library (`./dev fake-nvml`) the GPU tests load through
/// `sampler.nvml_library`.
pub fn fake_nvml() -> PathBuf {
    let p = repo().join("target/fake-nvml/libnvidia-ml.so.1");
    assert!(p.exists(), "{} missing: run `./dev fake-nvml`", p.display());
    p
}

/// The UUID the fake NVML library gives GPU `i`.
pub fn fake_gpu_uuid(i: usize) -> String {
    format!("GPU-fa6e0000-0000-4000-8000-{i:012}")
}
