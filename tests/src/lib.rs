//! Helpers for the end-to-end tests: start the real `sonde` binary and a real
//! OpenTelemetry collector (rotel, from PyPI), talk HTTP to the API, and read
//! what the collector received from its detailed debug log.
//!
//! The binaries come from the build the test command already did:
//! `target/debug/sonde` (or `$SONDE_BIN`) and the plugins in `target/plugins/`.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

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

/// A free TCP port on loopback.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
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
        let (grpc, http) = (free_port(), free_port());
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
        let port = free_port();
        let api = format!("127.0.0.1:{port}");
        let out = dir.join("sonde.out");
        let f = std::fs::File::create(&out).unwrap();
        let child = Command::new(sonde_bin())
            .arg("--data-dir")
            .arg(&data)
            .arg("--plugins-dir")
            .arg(&pdir)
            .arg("--sinks-dir")
            .arg(dir.join("sinks"))
            .args(["--listen", &api])
            .args(args.iter().map(|a| a.replace("{port}", &port.to_string())))
            .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
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
        let up = wait_for(Duration::from_secs(60), || s.get("/api/ready").0 == 200);
        assert!(up, "sonde did not become ready:\n{}", s.output());
        s
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

/// A minimal HTTP/1.1 client: one request per connection.
pub fn http(addr: &str, method: &str, path: &str, body: &[u8]) -> (u16, String) {
    http_with(addr, method, path, &[], body)
}

/// The same, with extra request headers.
pub fn http_with(addr: &str, method: &str, path: &str, headers: &[(&str, &str)], body: &[u8]) -> (u16, String) {
    let Ok(mut s) = TcpStream::connect(addr) else {
        return (0, String::new());
    };
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let extra: String = headers.iter().map(|(k, v)| format!("{k}: {v}\r\n")).collect();
    let head = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n{extra}Content-Length: {}\r\n\r\n",
        body.len()
    );
    if s.write_all(head.as_bytes()).and_then(|_| s.write_all(body)).is_err() {
        return (0, String::new());
    }
    let mut resp = Vec::new();
    let _ = s.read_to_end(&mut resp);
    let text = String::from_utf8_lossy(&resp).into_owned();
    let code = text.split_whitespace().nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    (code, dechunk(&body))
}

fn dechunk(body: &str) -> String {
    // axum answers small bodies with Content-Length; large ones may be chunked.
    let mut out = String::new();
    let mut rest = body;
    loop {
        let Some((size, after)) = rest.split_once("\r\n") else {
            return body.to_string();
        };
        let Ok(n) = usize::from_str_radix(size.trim(), 16) else {
            return body.to_string();
        };
        if n == 0 {
            return out;
        }
        if after.len() < n {
            return body.to_string();
        }
        out.push_str(&after[..n]);
        rest = after[n..].trim_start_matches("\r\n");
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
