//! The container image end to end, with Debian's buildah and podman: the
//! image `scripts/image.sh` builds (here of the debug binary; built once and
//! kept while the binary stays the same), a master and two agents each in
//! its own container on a podman bridge network, and a job in a third
//! container posting its steps to one agent over the network. The master
//! must list both agents' nodes, the job's steps with the values the job
//! sent, and the series one agent sampled from a fake `/proc` and `/sys`
//! mounted at `/host/proc` and `/host/sys` (`sampler.procfs_dir`,
//! `sampler.sysfs_dir`: how the Kubernetes DaemonSet reads its node).
//!
//! The containers run as the image says (uid 65534) and the agents as the
//! DaemonSet runs them: every capability dropped, a read-only root file
//! system, writable data and sinks directories only.
//!
//! Podman on this machine: runc (crun refuses its cgroups v1 hybrid),
//! cgroupfs and an events file (there is no systemd), explicit ulimits.

use std::path::Path;
use std::process::Command;
use std::sync::OnceLock;
use std::time::Duration;

use serde_json::{Value, json};
use sonde_e2e::*;

const API_TOKEN: &str = "e2e-api-token";
const CLUSTER_TOKEN: &str = "e2e-cluster-token";
/// The fake node's MemTotal, in kB: no real machine has exactly this.
const FAKE_MEM_KB: u64 = 7_777_777;

fn podman() -> Command {
    let mut c = Command::new("podman");
    c.args([
        "--runtime",
        "runc",
        "--cgroup-manager",
        "cgroupfs",
        "--events-backend",
        "file",
    ]);
    c
}

/// `podman run` with its limits given: podman's default open-files limit
/// (1 048 576) is above the hard limit this machine's processes get (20 000),
/// and runc is refused when it tries to raise it.
fn podman_run() -> Command {
    let mut c = podman();
    c.args(["run", "--ulimit", "nofile=16384:16384", "--ulimit", "nproc=16384:16384"]);
    c
}

/// Runs `c` and gives its stdout, trimmed; panics with its output when it fails.
fn run(c: &mut Command) -> String {
    let out = c.output().unwrap_or_else(|e| panic!("{c:?}: {e}"));
    assert!(
        out.status.success(),
        "{c:?} failed:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// The debug binary's image. Its tag is the binary's SHA-256, so the image is
/// built again only after the binary changed (the debug build's image takes
/// a few seconds to build, but the tests run often); images of earlier
/// binaries are removed then, unless a container still uses them.
fn image() -> &'static str {
    static IMAGE: OnceLock<String> = OnceLock::new();
    IMAGE.get_or_init(|| {
        let bin = sonde_bin();
        let sum = run(Command::new("sha256sum").arg(&bin));
        let tag = format!("localhost/sonde-e2e:{}", &sum[..16]);
        if podman()
            .args(["image", "exists", &tag])
            .status()
            .is_ok_and(|s| s.success())
        {
            return tag;
        }
        let old = run(podman().args([
            "images",
            "--format",
            "{{.Repository}}:{{.Tag}}",
            "--filter",
            "reference=localhost/sonde-e2e",
        ]));
        for t in old.lines().filter(|t| !t.is_empty()) {
            let _ = podman().args(["rmi", t]).output();
        }
        run(Command::new("bash")
            .arg(repo().join("scripts/image.sh"))
            .env("IMAGE_SONDE_BIN", &bin)
            .env("IMAGE_TAG", &tag)
            .env("IMAGE_ARCHIVE", "0"));
        tag
    })
}

/// A podman network and the containers started on it; removed when dropped.
struct Net {
    name: String,
    containers: Vec<String>,
    /// The compile cache every sonde here shares: a copy of the tests' own
    /// (`target/test-plugin-cache`), writable by uid 65534. Without it each
    /// container's debug build would compile the seven carried plugins again.
    cache: tempfile::TempDir,
}

impl Net {
    fn new() -> Net {
        let name = format!("sonde-e2e-{}", std::process::id());
        let _ = podman().args(["network", "rm", "-f", &name]).output();
        run(podman().args(["network", "create", &name]));
        let cache = tempfile::tempdir().unwrap();
        let seed = repo().join("target/test-plugin-cache");
        if seed.is_dir() {
            run(Command::new("cp")
                .arg("-a")
                .arg(format!("{}/.", seed.display()))
                .arg(cache.path()));
        }
        run(Command::new("chmod").args(["-R", "a+rwX"]).arg(cache.path()));
        Net {
            name,
            containers: Vec::new(),
            cache,
        }
    }

    fn cname(&self, what: &str) -> String {
        format!("{}-{what}", self.name)
    }

    /// Starts sonde's image as `what` with podman options `opts` and sonde's
    /// `args`; its address on the network.
    fn sonde(&mut self, what: &str, opts: &[&str], args: &[&str]) -> String {
        let name = self.cname(what);
        self.containers.push(name.clone());
        let api = format!("SONDE_API__TOKEN={API_TOKEN}");
        let cluster = format!("SONDE_CLUSTER__TOKEN={CLUSTER_TOKEN}");
        let cache = format!("--volume={}:/var/lib/sonde/cache", self.cache.path().display());
        run(podman_run()
            .args(["-d", "--name", &name, "--network", &self.name])
            .args(["-e", &api, "-e", &cluster, &cache])
            .args(opts)
            .arg(image())
            .args(args));
        let ip = run(podman().args([
            "inspect",
            "-f",
            &format!("{{{{(index .NetworkSettings.Networks \"{}\").IPAddress}}}}", self.name),
            &name,
        ]));
        assert!(!ip.is_empty(), "{name} has no address on {}", self.name);
        ip
    }

    /// What each container printed, for a failing assertion.
    fn logs(&self) -> String {
        self.containers
            .iter()
            .map(|c| {
                let out = podman().args(["logs", c]).output().map(|o| {
                    format!(
                        "{}{}",
                        String::from_utf8_lossy(&o.stdout),
                        String::from_utf8_lossy(&o.stderr)
                    )
                });
                format!("--- {c}\n{}\n", out.unwrap_or_default())
            })
            .collect()
    }

    /// The `/proc/PID/status` of a container's sonde, as this machine sees it.
    fn status(&self, what: &str) -> String {
        let pid = run(podman().args(["inspect", "-f", "{{.State.Pid}}", &self.cname(what)]));
        std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap()
    }
}

impl Drop for Net {
    fn drop(&mut self) {
        for c in &self.containers {
            let _ = podman().args(["rm", "-f", "-t", "0", c]).output();
        }
        let _ = podman().args(["network", "rm", "-f", &self.name]).output();
    }
}

/// GET `path` of the sonde at `ip`, with the API token (beyond loopback it
/// wants one); (status, body).
fn get(ip: &str, path: &str) -> (u16, Value) {
    let auth = format!("Bearer {API_TOKEN}");
    let (code, body) = http_with(&format!("{ip}:7878"), "GET", path, &[("authorization", &auth)], b"");
    (code, serde_json::from_str(&body).unwrap_or(Value::Null))
}

/// A line of `/proc/PID/status`: `field("Uid")`.
fn field<'a>(status: &'a str, name: &str) -> &'a str {
    status
        .lines()
        .find_map(|l| l.strip_prefix(name).and_then(|r| r.strip_prefix(':')))
        .unwrap_or_else(|| panic!("no {name} in {status}"))
        .trim()
}

/// A node's `/proc` and `/sys` as the sampler reads them, with one interface
/// (`fake0`) and one disk (`vdz`) no container has.
fn fake_node(root: &Path) {
    let files = [
        (
            "proc/stat",
            "cpu  100 0 100 800 0 0 0 0 0 0\ncpu0 100 0 100 800 0 0 0 0 0 0\nintr 1\nctxt 1\nbtime 1700000000\n".to_string(),
        ),
        (
            "proc/meminfo",
            format!("MemTotal: {FAKE_MEM_KB} kB\nMemFree: 1000000 kB\nMemAvailable: 5000000 kB\nBuffers: 1000 kB\nCached: 2000 kB\n"),
        ),
        (
            "proc/net/dev",
            "Inter-|   Receive |  Transmit\n face |bytes packets errs drop fifo frame compressed multicast|bytes packets errs drop fifo colls carrier compressed\n fake0: 123456789 1000 0 0 0 0 0 0 987654 900 0 0 0 0 0 0\n".to_string(),
        ),
        ("proc/diskstats", " 254 0 vdz 6100 3199 1417538 5550 2954 36312 4253240 33094 0 3976 39025\n".to_string()),
        ("sys/class/net/fake0/flags", "0x1003\n".to_string()),
        ("sys/block/vdz/size", "1\n".to_string()),
    ];
    for (rel, text) in files {
        let p = root.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    }
}

/// The job's body: six steps of rank 0, each 2 ms of data loading, 8 ms
/// forward and 15 ms backward.
fn steps(t0: u64) -> Value {
    let ms = 1_000_000u64;
    let mut timings = Vec::new();
    let mut progress = Vec::new();
    for b in 0..6u64 {
        let t = t0 + b * 50 * ms;
        progress.push(json!({"value": b, "time_ns": t}));
        for (name, from, to) in [("dataloader", 0, 2), ("forward", 2, 10), ("backward", 10, 25)] {
            timings.push(json!({"name": name, "start_ns": t + from * ms, "end_ns": t + to * ms, "batch_idx": b}));
        }
    }
    json!({
        "origin": {"job": "train-pod", "rank": 0, "local_rank": 0, "role": "worker"},
        "progress": progress,
        "timings": timings,
    })
}

#[test]
fn a_master_and_two_agents_in_containers_see_a_job_in_a_third() {
    if !have_container_tools() {
        return;
    }
    let image = image();
    let tmp = tempfile::tempdir().unwrap();
    fake_node(tmp.path());
    let mut net = Net::new();

    // The master as the image runs it: no capability or file system option given.
    let master = net.sonde(
        "master",
        &[],
        &[
            "--role=master",
            "--listen=0.0.0.0:7878",
            "--set=ingest.otlp_grpc_listen=\"0.0.0.0:4317\"",
            "--set=ingest.otlp_http_listen=\"off\"",
            "--set=host.name=\"the-master\"",
        ],
    );
    // Ready once its plugins are compiled (into the shared cache, the first time).
    let master_up = wait_for(Duration::from_secs(180), || get(&master, "/api/ready").0 == 200);
    assert!(master_up, "the master never got ready:\n{}", net.logs());

    // The agents as the DaemonSet runs them; b samples the fake node.
    let locked_down = [
        "--cap-drop=all",
        "--read-only",
        "--tmpfs=/var/lib/sonde:rw,U",
        "--tmpfs=/var/lib/sonde-sinks:rw,U",
    ];
    let proc_mount = format!("--volume={}:/host/proc:ro", tmp.path().join("proc").display());
    let sys_mount = format!("--volume={}:/host/sys:ro", tmp.path().join("sys").display());
    let to_master = format!("--master=http://{master}:4317");
    let mut agents = Vec::new();
    for (node, extra) in [
        ("node-a", vec![]),
        (
            "node-b",
            vec![
                proc_mount.as_str(),
                sys_mount.as_str(),
                "--env=SONDE_SAMPLER__PROCFS_DIR=/host/proc",
                "--env=SONDE_SAMPLER__SYSFS_DIR=/host/sys",
            ],
        ),
    ] {
        let opts: Vec<&str> = locked_down.iter().copied().chain(extra).collect();
        let name = format!("--set=host.name=\"{node}\"");
        agents.push(net.sonde(
            node,
            &opts,
            &[
                "--role=agent",
                &to_master,
                "--listen=0.0.0.0:7878",
                &name,
                "--set=export.interval_ms=300",
                "--set=cluster.heartbeat_ms=300",
                "--set=ingest.otlp_grpc_listen=\"off\"",
                "--set=ingest.otlp_http_listen=\"off\"",
            ],
        ));
    }

    let nodes = || {
        get(&master, "/api/cluster/nodes").1["nodes"]
            .as_array()
            .cloned()
            .unwrap_or_default()
    };
    let both = wait_for(Duration::from_secs(90), || {
        let n = nodes();
        ["node-a", "node-b"].iter().all(|want| {
            n.iter()
                .any(|v| v["node"] == *want && v["state"] == "up" && v["agent"] == true)
        })
    });
    assert!(
        both,
        "the master does not list both agents: {:#?}\n{}",
        nodes(),
        net.logs()
    );

    // The job, in its own container, posts its steps to node-a's agent.
    let auth = format!("authorization: Bearer {API_TOKEN}");
    let body = steps(now_ns()).to_string();
    let url = format!("http://{}:7878/api/ingest", agents[0]);
    let job = podman_run()
        .args(["--rm", "--network", &net.name, "--cap-drop=all"])
        .args([
            "--volume=/bin/busybox:/bin/busybox:ro",
            "--entrypoint=/bin/busybox",
            image,
        ])
        .args([
            "wget",
            "-q",
            "-O",
            "-",
            "--header",
            &auth,
            "--header",
            "content-type: application/json",
        ])
        .args(["--post-data", &body, &url])
        .output()
        .unwrap();
    assert!(
        job.status.success(),
        "the job's POST failed: {}{}\n{}",
        String::from_utf8_lossy(&job.stdout),
        String::from_utf8_lossy(&job.stderr),
        net.logs()
    );

    let mut seen = Value::Null;
    let arrived = wait_for(Duration::from_secs(30), || {
        let (code, v) = get(&master, "/api/jobs/train-pod");
        seen = v;
        code == 200 && seen["steps"].as_array().is_some_and(|s| s.len() == 6)
    });
    assert!(
        arrived,
        "the master does not have the job's six steps: {seen:#}\n{}",
        net.logs()
    );
    assert_eq!(seen["ranks"][0]["node"], "node-a", "{seen:#}");
    for b in seen["steps"].as_array().unwrap() {
        let r = &b["ranks"][0];
        assert!((r["phases"]["forward"].as_f64().unwrap() - 0.008).abs() < 1e-9, "{r}");
        assert!((r["phases"]["backward"].as_f64().unwrap() - 0.015).abs() < 1e-9, "{r}");
        assert!((r["total_s"].as_f64().unwrap() - 0.025).abs() < 1e-9, "{r}");
    }

    // node-b sampled the fake node through /host/proc and /host/sys; node-a its container.
    let interfaces = |node: &str| -> Vec<String> {
        let (_, s) = get(&master, &format!("/api/series?node={node}&name=system.network.io"));
        let mut names: Vec<String> = s["series"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|x| x["attributes"]["network.interface.name"].as_str().map(String::from))
            .collect();
        names.sort();
        names.dedup();
        names
    };
    let fake_seen = wait_for(Duration::from_secs(20), || interfaces("node-b") == ["fake0"]);
    assert!(
        fake_seen,
        "node-b's interfaces: {:?}\n{}",
        interfaces("node-b"),
        net.logs()
    );
    assert!(
        !interfaces("node-a").is_empty() && !interfaces("node-a").contains(&"fake0".to_string()),
        "node-a samples its own container: {:?}",
        interfaces("node-a")
    );
    let from = now_ns() / 1_000_000 - 120_000;
    let mut limits = Value::Null;
    let fake_mem = wait_for(Duration::from_secs(20), || {
        let to = now_ns() / 1_000_000;
        limits = get(
            &master,
            &format!("/api/series/data?node=node-b&name=system.memory.limit&from={from}&to={to}&max_points=100"),
        )
        .1;
        // The live store keeps f32, which JSON writes to its own precision.
        let fake = (FAKE_MEM_KB * 1024) as f64;
        limits["data"].as_array().into_iter().flatten().any(|d| {
            d["mean"].as_array().is_some_and(|m| {
                m.iter()
                    .any(|v| v.as_f64().is_some_and(|v| (v - fake).abs() < fake * 1e-6))
            })
        })
    });
    assert!(fake_mem, "node-b's memory limit is not the fake node's: {limits:#}");

    // Non-root, and no capability: the master with the image's defaults,
    // the agents with every capability dropped.
    for (what, bounded) in [("master", false), ("node-a", true), ("node-b", true)] {
        let st = net.status(what);
        assert_eq!(field(&st, "Uid"), "65534\t65534\t65534\t65534", "{what}: {st}");
        assert_eq!(field(&st, "Gid"), "65534\t65534\t65534\t65534", "{what}: {st}");
        assert_eq!(field(&st, "CapEff"), "0000000000000000", "{what}: {st}");
        assert_eq!(field(&st, "CapPrm"), "0000000000000000", "{what}: {st}");
        if bounded {
            assert_eq!(field(&st, "CapBnd"), "0000000000000000", "{what}: {st}");
        }
    }
}

/// The image holds the binary and what it links, and nothing to run beside
/// it: no shell, runs as 65534, its data directory set.
#[test]
fn the_image_is_sonde_alone_as_nobody() {
    if !have_container_tools() {
        return;
    }
    let image = image();
    let inspect = run(podman().args(["image", "inspect", image]));
    let v: Value = serde_json::from_str(&inspect).unwrap();
    let config = &v[0]["Config"];
    assert_eq!(config["User"], "65534:65534", "{config:#}");
    assert_eq!(config["Entrypoint"], json!(["/usr/local/bin/sonde"]), "{config:#}");
    let env = config["Env"].to_string();
    assert!(env.contains("SONDE_HOST__DATA_DIR=/var/lib/sonde"), "{env}");
    assert!(
        v[0]["Labels"]["sonde.debian-packages"]
            .as_str()
            .is_some_and(|p| p.contains("libc6=")),
        "{:#}",
        v[0]["Labels"]
    );

    let version = run(podman_run().args(["--rm", "--cap-drop=all", "--read-only", image, "--version"]));
    assert_eq!(version, format!("sonde {}", env!("CARGO_PKG_VERSION")));
    let shell = podman_run()
        .args(["--rm", "--entrypoint=/bin/sh", image, "-c", "true"])
        .output()
        .unwrap();
    assert!(!shell.status.success(), "the image has a shell");

    // The plugins it carries, written out by the binary in the image.
    let out = tempfile::tempdir().unwrap();
    std::fs::set_permissions(out.path(), std::os::unix::fs::PermissionsExt::from_mode(0o777)).unwrap();
    let mount = format!("--volume={}:/out", out.path().display());
    run(podman_run().args(["--rm", "--cap-drop=all", &mount, image, "plugins", "extract", "/out"]));
    for f in std::fs::read_dir(repo().join("target/plugins/bundled")).unwrap() {
        let f = f.unwrap().path();
        if f.extension().is_some_and(|e| e == "wasm") {
            let name = f.file_name().unwrap();
            assert_eq!(
                std::fs::read(out.path().join(name)).ok(),
                std::fs::read(&f).ok(),
                "{name:?} in the image differs from target/plugins/bundled"
            );
        }
    }
}
