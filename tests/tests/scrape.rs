//! `GET /metrics` read by a real scraper: Debian's Prometheus scrapes sonde
//! every second, and what its query API then says is compared with what the
//! fake NVML library (`./dev fake-nvml`) fed sonde. The names are the
//! remote-write exporter's, taken from sonde's own function so that a second
//! naming would show here.

use std::time::Duration;

use sonde::export::remote_write::prometheus_metric_name;
use sonde::model::MetricKind;
use sonde_e2e::engines::Engine;
use sonde_e2e::*;

fn uuid(i: usize) -> String {
    fake_gpu_uuid(i)
}

/// Each GPU's value of `promql` as Prometheus answers it, by `hw_id`.
fn by_gpu(prom: &Engine, promql: &str) -> Vec<(String, f64)> {
    let mut out: Vec<(String, f64)> = prom
        .query(promql)
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|r| {
            let id = r["metric"]["hw_id"].as_str()?.to_string();
            let v: f64 = r["value"][1].as_str()?.parse().ok()?;
            Some((id, v))
        })
        .collect();
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

#[test]
fn prometheus_scrapes_what_the_gpus_read() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("sonde");
    std::fs::create_dir_all(&dir).unwrap();
    let script = dir.join("gpus.script");
    std::fs::write(
        &script,
        "gpus 2\nsample_ms 50\n\
         at 0 gpu 0 util 30 power 100000 ecc_corrected 5\n\
         at 0 gpu 1 util 70 power 250500 ecc_corrected 9\n",
    )
    .unwrap();
    let lib = format!("sampler.nvml_library=\"{}\"", fake_nvml().display());
    let script_env = script.to_string_lossy().into_owned();
    let sonde = Sonde::start_env(
        &dir,
        &[(plugin_file("bundled/sysmetrics.wasm"), "sysmetrics")],
        &["--set", &lib],
        &[("FAKE_NVML_SCRIPT", &script_env)],
        free_port(),
    );
    let prom = Engine::prometheus_scraping(&sonde.api);

    let power = prometheus_metric_name("hw.power", "W", MetricKind::Gauge);
    let util = prometheus_metric_name("hw.gpu.utilization", "1", MetricKind::Gauge);
    let errors = prometheus_metric_name("hw.errors", "{error}", MetricKind::Counter);
    assert_eq!(
        (power.as_str(), util.as_str()),
        ("hw_power_watts", "hw_gpu_utilization_ratio")
    );

    let want_power = vec![(uuid(0), 100.0), (uuid(1), 250.5)];
    let scraped = wait_for(Duration::from_secs(60), || by_gpu(&prom, &power) == want_power);
    assert!(
        scraped,
        "want {want_power:?}, Prometheus has {:?}\nsonde serves:\n{}\n{}",
        by_gpu(&prom, &power),
        sonde.get("/metrics").1,
        prom.log_tail()
    );
    assert_eq!(by_gpu(&prom, &util), vec![(uuid(0), 0.3), (uuid(1), 0.7)]);
    let ecc = format!("{errors}{{error_type=\"ecc_corrected\"}}");
    let has_ecc = wait_for(Duration::from_secs(20), || {
        by_gpu(&prom, &ecc) == vec![(uuid(0), 5.0), (uuid(1), 9.0)]
    });
    assert!(has_ecc, "{:?}", by_gpu(&prom, &ecc));

    // The scraper's own labels, and the types it read.
    let one = &prom.query(&format!("{power}{{hw_id=\"{}\"}}", uuid(0)))[0]["metric"];
    assert_eq!(one["job"], "sonde", "{one}");
    assert_eq!(one["instance"], sonde.api.as_str(), "{one}");
    let meta = prom.get_json(&format!("/api/v1/metadata?metric={errors}"));
    assert_eq!(meta["data"][&errors][0]["type"], "counter", "{meta}");
    let meta = prom.get_json(&format!("/api/v1/metadata?metric={power}"));
    assert_eq!(meta["data"][&power][0]["type"], "gauge", "{meta}");

    // Served to anyone who may read the API, in the text format's content type.
    let (code, body) = sonde.get("/metrics");
    assert_eq!(code, 200);
    assert!(body.contains(&format!("# TYPE {errors} counter\n")), "{body}");
    let up = prom.query("up{job=\"sonde\"}");
    assert_eq!(up[0]["value"][1], "1", "{up}");
}
