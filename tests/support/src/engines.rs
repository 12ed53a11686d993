//! Prometheus-compatible engines for the tests that write to them: Debian's
//! `prometheus` (remote-write receiver on) and `victoria-metrics`, each on a
//! free loopback port with a temporary data directory, killed when dropped.
//! `./dev setup` installs both; a missing binary fails the test with that advice.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::{free_port, http};

/// The binary on PATH, or a failure that says how to install it.
pub fn binary(name: &str) -> PathBuf {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .map(|d| d.join(name))
        .find(|p| p.is_file())
        .unwrap_or_else(|| {
            panic!(
                "`{name}` is not installed: run `./dev setup` (it installs Debian's prometheus and \
                 victoria-metrics packages)"
            )
        })
}

/// One engine process.
pub struct Engine {
    pub name: &'static str,
    child: Child,
    /// `http://127.0.0.1:PORT`, the base of its query API.
    pub base: String,
    log: PathBuf,
    _dir: tempfile::TempDir,
}

impl Engine {
    pub fn prometheus() -> Engine {
        // No scrape jobs: the only data is what the test writes.
        Engine::prometheus_with("global:\n  scrape_interval: 1h\n")
    }

    /// Prometheus scraping `http://target/metrics` every second as job `sonde`.
    pub fn prometheus_scraping(target: &str) -> Engine {
        Engine::prometheus_with(&format!(
            "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\nscrape_configs:\n  \
             - job_name: sonde\n    metrics_path: /metrics\n    static_configs:\n      \
             - targets: [\"{target}\"]\n"
        ))
    }

    fn prometheus_with(config: &str) -> Engine {
        let bin = binary("prometheus");
        let dir = tempfile::tempdir().unwrap();
        let port = free_port();
        let cfg = dir.path().join("prometheus.yml");
        std::fs::write(&cfg, config).unwrap();
        let args = vec![
            format!("--config.file={}", cfg.display()),
            format!("--storage.tsdb.path={}", dir.path().join("data").display()),
            format!("--web.listen-address=127.0.0.1:{port}"),
            "--web.enable-remote-write-receiver".to_string(),
            "--log.level=warn".to_string(),
        ];
        Engine::spawn("prometheus", &bin, &args, port, dir)
    }

    pub fn victoria_metrics() -> Engine {
        let bin = binary("victoria-metrics");
        let dir = tempfile::tempdir().unwrap();
        let port = free_port();
        let args = vec![
            format!("-httpListenAddr=127.0.0.1:{port}"),
            format!("-storageDataPath={}", dir.path().join("data").display()),
            "-retentionPeriod=1y".to_string(),
            "-loggerLevel=WARN".to_string(),
        ];
        Engine::spawn("victoria-metrics", &bin, &args, port, dir)
    }

    fn spawn(name: &'static str, bin: &Path, args: &[String], port: u16, dir: tempfile::TempDir) -> Engine {
        let log = dir.path().join("engine.log");
        let out = std::fs::File::create(&log).unwrap();
        let child = Command::new(bin)
            .args(args)
            .current_dir(dir.path())
            .stdin(Stdio::null())
            .stdout(out.try_clone().unwrap())
            .stderr(out)
            .spawn()
            .unwrap_or_else(|e| panic!("starting {}: {e}", bin.display()));
        let mut e = Engine {
            name,
            child,
            base: format!("http://127.0.0.1:{port}"),
            log,
            _dir: dir,
        };
        e.wait_ready();
        e
    }

    pub fn write_url(&self) -> String {
        format!("{}/api/v1/write", self.base)
    }

    fn addr(&self) -> &str {
        self.base.trim_start_matches("http://")
    }

    pub fn log_tail(&self) -> String {
        let s = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = s.lines().collect();
        lines[lines.len().saturating_sub(30)..].join("\n")
    }

    /// Waits until the query API evaluates `1`.
    fn wait_ready(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                panic!("{} exited with {status}:\n{}", self.name, self.log_tail());
            }
            if http(self.addr(), "GET", "/api/v1/query?query=1", b"").0 == 200 {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "{} not ready after 60 s:\n{}",
                self.name,
                self.log_tail()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// A GET of the engine's HTTP API, as JSON (`/api/v1/metadata?metric=...`).
    pub fn get_json(&self, path: &str) -> serde_json::Value {
        let (code, body) = http(self.addr(), "GET", path, b"");
        assert_eq!(code, 200, "{} {path}: {body}", self.name);
        serde_json::from_str(&body).unwrap()
    }

    /// An instant PromQL query's `data.result`, as JSON.
    pub fn query(&self, promql: &str) -> serde_json::Value {
        let q: String = promql
            .bytes()
            .map(|b| match b {
                b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'_' | b'.' | b'-' | b'~' => (b as char).to_string(),
                _ => format!("%{b:02X}"),
            })
            .collect();
        let (code, body) = http(self.addr(), "GET", &format!("/api/v1/query?query={q}"), b"");
        assert_eq!(code, 200, "{} {promql}: {body}", self.name);
        let v: serde_json::Value = serde_json::from_str(&body).unwrap();
        v["data"]["result"].clone()
    }
}

impl Drop for Engine {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
