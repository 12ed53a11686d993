//! GPU→pod attribution end to end: GPUs from the fake NVML library
//! (`./dev fake-nvml`), and a kubelet that is a real gRPC server on a unix
//! socket speaking the `pod-resources` v1 API. The messages are written here
//! again, from the kubelet's `api.proto`, not taken from sonde, so that a
//! field number sonde got wrong shows as missing labels.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use sonde_e2e::*;
use tonic::codegen::{BoxFuture, Service, http};

#[derive(Clone, PartialEq, prost::Message)]
struct ListPodResourcesRequest {}

#[derive(Clone, PartialEq, prost::Message)]
struct ListPodResourcesResponse {
    #[prost(message, repeated, tag = "1")]
    pod_resources: Vec<PodResources>,
}

#[derive(Clone, PartialEq, prost::Message)]
struct PodResources {
    #[prost(string, tag = "1")]
    name: String,
    #[prost(string, tag = "2")]
    namespace: String,
    #[prost(message, repeated, tag = "3")]
    containers: Vec<ContainerResources>,
}

#[derive(Clone, PartialEq, prost::Message)]
struct ContainerResources {
    #[prost(string, tag = "1")]
    name: String,
    #[prost(message, repeated, tag = "2")]
    devices: Vec<ContainerDevices>,
    /// A field sonde does not read (the kubelet's `cpu_ids`): skipped.
    #[prost(int64, repeated, tag = "3")]
    cpu_ids: Vec<i64>,
}

#[derive(Clone, PartialEq, prost::Message)]
struct ContainerDevices {
    #[prost(string, tag = "1")]
    resource_name: String,
    #[prost(string, repeated, tag = "2")]
    device_ids: Vec<String>,
}

type Pods = Arc<Mutex<ListPodResourcesResponse>>;

/// The kubelet's `PodResourcesLister`: `List` answers what the test set last.
#[derive(Clone)]
struct Kubelet(Pods);

struct List(Pods);

impl tonic::server::UnaryService<ListPodResourcesRequest> for List {
    type Response = ListPodResourcesResponse;
    type Future = BoxFuture<tonic::Response<ListPodResourcesResponse>, tonic::Status>;

    fn call(&mut self, _: tonic::Request<ListPodResourcesRequest>) -> Self::Future {
        let now = self.0.lock().unwrap().clone();
        Box::pin(async move { Ok(tonic::Response::new(now)) })
    }
}

impl Service<http::Request<tonic::body::Body>> for Kubelet {
    type Response = http::Response<tonic::body::Body>;
    type Error = std::convert::Infallible;
    type Future = BoxFuture<Self::Response, Self::Error>;

    fn poll_ready(&mut self, _: &mut std::task::Context<'_>) -> std::task::Poll<Result<(), Self::Error>> {
        std::task::Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: http::Request<tonic::body::Body>) -> Self::Future {
        let pods = self.0.clone();
        Box::pin(async move {
            if req.uri().path() != "/v1.PodResourcesLister/List" {
                return Ok(tonic::Status::unimplemented(req.uri().path().to_string()).into_http());
            }
            let codec = tonic_prost::ProstCodec::<ListPodResourcesResponse, ListPodResourcesRequest>::default();
            Ok(tonic::server::Grpc::new(codec).unary(List(pods), req).await)
        })
    }
}

/// A kubelet serving on `socket` until dropped.
struct FakeKubelet {
    pods: Pods,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    rt: tokio::runtime::Runtime,
}

impl FakeKubelet {
    fn start(socket: &Path) -> FakeKubelet {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let pods: Pods = Arc::default();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let listener = {
            let _in = rt.enter();
            tokio::net::UnixListener::bind(socket).unwrap()
        };
        let svc = Kubelet(pods.clone());
        rt.spawn(async move {
            let incoming = tokio_stream::wrappers::UnixListenerStream::new(listener);
            tonic::transport::Server::builder()
                .serve_with_incoming_shutdown(svc, incoming, async {
                    let _ = stopped.await;
                })
                .await
                .unwrap();
        });
        FakeKubelet {
            pods,
            stop: Some(stop),
            rt,
        }
    }

    /// From now on the node's pods are `pods`: (namespace, pod, container, GPU UUIDs).
    fn set(&self, pods: &[(&str, &str, &str, Vec<String>)]) {
        let answer = ListPodResourcesResponse {
            pod_resources: pods
                .iter()
                .map(|(ns, pod, container, gpus)| PodResources {
                    name: pod.to_string(),
                    namespace: ns.to_string(),
                    containers: vec![
                        ContainerResources {
                            name: "init".into(),
                            devices: vec![],
                            cpu_ids: vec![2, 3],
                        },
                        ContainerResources {
                            name: container.to_string(),
                            devices: vec![
                                ContainerDevices {
                                    resource_name: "nvidia.com/gpu".into(),
                                    device_ids: gpus.clone(),
                                },
                                ContainerDevices {
                                    resource_name: "example.com/nic".into(),
                                    device_ids: vec!["0000:3b:00.0".into()],
                                },
                            ],
                            cpu_ids: vec![],
                        },
                    ],
                })
                .collect(),
        };
        *self.pods.lock().unwrap() = answer;
    }

    fn stop(mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        self.rt.shutdown_timeout(Duration::from_secs(5));
    }
}

fn uuid(i: usize) -> String {
    fake_gpu_uuid(i)
}

/// The `k8s.*` attributes of each GPU's utilization series that still
/// receives points, by GPU UUID (an empty map: a GPU held by no pod). A
/// series of a pod that gave the GPU up stays listed; the one written to in
/// the last `fresh_ms` is the current one.
fn pods_on_gpus(s: &Sonde) -> BTreeMap<String, Vec<BTreeMap<String, String>>> {
    let v = s.json("/api/series?name=hw.gpu.utilization");
    let newest = v["series"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|s| s["last_ms"].as_u64())
        .max()
        .unwrap_or(0);
    let mut out: BTreeMap<String, Vec<BTreeMap<String, String>>> = BTreeMap::new();
    for series in v["series"].as_array().into_iter().flatten() {
        let a = &series["attributes"];
        let Some(gpu) = a["hw.id"].as_str() else { continue };
        // Points arrive each tick (100 ms); a parked series stopped earlier.
        if series["last_ms"].as_u64().unwrap_or(0) + 1_000 < newest {
            continue;
        }
        let k8s: BTreeMap<String, String> = a
            .as_object()
            .into_iter()
            .flatten()
            .filter(|(k, _)| k.starts_with("k8s."))
            .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_string()))
            .collect();
        out.entry(gpu.to_string()).or_default().push(k8s);
    }
    out
}

fn labels(ns: &str, pod: &str, container: &str) -> BTreeMap<String, String> {
    [
        ("k8s.namespace.name", ns),
        ("k8s.pod.name", pod),
        ("k8s.container.name", container),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect()
}

/// The pods the fake kubelet lists label the GPUs they hold, the labels
/// follow the pod list when it changes, and a kubelet that goes away is one
/// warning in the status while sampling goes on.
#[test]
fn gpu_series_carry_the_pod_the_kubelet_says_holds_them() {
    let tmp = tempfile::tempdir().unwrap();
    let socket = tmp.path().join("kubelet.sock");
    let kubelet = FakeKubelet::start(&socket);
    kubelet.set(&[("ml", "train-0", "worker", vec![uuid(0)])]);

    let dir = tmp.path().join("sonde");
    std::fs::create_dir_all(&dir).unwrap();
    let script = dir.join("gpus.script");
    std::fs::write(
        &script,
        "gpus 2\nsample_ms 50\nat 0 gpu 0 util 30\nat 0 gpu 1 util 70\n",
    )
    .unwrap();
    let lib = format!("sampler.nvml_library=\"{}\"", fake_nvml().display());
    let sock = format!("sampler.pod_resources_socket=\"{}\"", socket.display());
    let script_env = script.to_string_lossy().into_owned();
    let sonde = Sonde::start_env(
        &dir,
        &[(plugin_file("bundled/sysmetrics.wasm"), "sysmetrics")],
        &[
            "--set",
            &lib,
            "--set",
            &sock,
            "--set",
            "sampler.pod_resources_interval_ms=1000",
        ],
        &[("FAKE_NVML_SCRIPT", &script_env)],
        free_port(),
    );

    // GPU 0 is train-0's worker's; GPU 1 is nobody's.
    let first = BTreeMap::from([
        (uuid(0), vec![labels("ml", "train-0", "worker")]),
        (uuid(1), vec![BTreeMap::new()]),
    ]);
    let seen = wait_for(Duration::from_secs(30), || pods_on_gpus(&sonde) == first);
    assert!(
        seen,
        "want {first:?}, have {:?}\n{}",
        pods_on_gpus(&sonde),
        sonde.output()
    );
    // The values are the GPU's own under its new labels.
    let util = sonde.json("/api/series?name=hw.gpu.utilization");
    assert!(
        util["series"]
            .as_array()
            .unwrap()
            .iter()
            .any(|s| { s["attributes"]["k8s.pod.name"] == "train-0" && s["attributes"]["hw.id"] == uuid(0) }),
        "{util}"
    );

    // train-0 ends; train-1 takes GPU 0 and an inference pod GPU 1.
    kubelet.set(&[
        ("ml", "train-1", "worker", vec![uuid(0)]),
        ("serve", "infer-7", "model", vec![uuid(1)]),
    ]);
    let second = BTreeMap::from([
        (uuid(0), vec![labels("ml", "train-1", "worker")]),
        (uuid(1), vec![labels("serve", "infer-7", "model")]),
    ]);
    let seen = wait_for(Duration::from_secs(30), || pods_on_gpus(&sonde) == second);
    assert!(seen, "want {second:?}, have {:?}", pods_on_gpus(&sonde));
    assert!(
        !sonde.json("/api/status")["sampler"]["gpu"]
            .as_str()
            .unwrap()
            .contains("pod-resources"),
        "{}",
        sonde.json("/api/status")
    );

    // The kubelet goes away: one warning, no pod labels, sampling goes on.
    kubelet.stop();
    let _ = std::fs::remove_file(&socket);
    let unlabelled = BTreeMap::from([(uuid(0), vec![BTreeMap::new()]), (uuid(1), vec![BTreeMap::new()])]);
    let seen = wait_for(Duration::from_secs(30), || pods_on_gpus(&sonde) == unlabelled);
    assert!(seen, "want {unlabelled:?}, have {:?}", pods_on_gpus(&sonde));
    let status = sonde.json("/api/status")["sampler"]["gpu"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        status.starts_with("2 GPUs via NVML") && status.contains("kubelet pod-resources at"),
        "{status}"
    );
    let warnings = sonde
        .output()
        .lines()
        .filter(|l| l.contains("WARN") && l.contains("carry no pod attributes until it answers"))
        .count();
    assert_eq!(warnings, 1, "{}", sonde.output());
}
