//! Which Kubernetes pod holds each GPU, from the kubelet's `pod-resources`
//! gRPC API (v1, `PodResourcesLister.List`) on its unix socket.
//!
//! Why the kubelet: the device plugin hands a container its GPUs by UUID
//! (`nvidia.com/gpu` → `GPU-…`), and the kubelet is the one party on the node
//! that knows every assignment; NVML only sees processes, whose PIDs a
//! container hides. The same socket is what DCGM's exporter reads.
//!
//! How: a thread of its own with a one-thread runtime asks every
//! `sampler.pod_resources_interval_ms` and publishes a map from GPU UUID to
//! the pod's attributes in a [`PodWatch`]. The sampler thread only looks at a
//! generation number each tick and takes the map when it changed, so a slow
//! or stuck kubelet never delays a sample (each call also has a deadline).
//! A socket that does not answer is one warning (again only after it has
//! answered once in between), and no pod attributes until it answers. The
//! thread ends at its next turn once the sampler is dropped.
//!
//! The messages below are the part of the kubelet's v1 `api.proto` sonde
//! reads, written with prost's derive (no protoc at build time); the field
//! numbers are the kubelet's, and the fields left out are skipped on decode.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use parking_lot::Mutex;
use tonic::codegen::http::Uri;
use tonic::codegen::{BoxFuture, Service};
use tonic::transport::Endpoint;

/// `ListPodResourcesRequest`: no fields.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ListPodResourcesRequest {}

/// `ListPodResourcesResponse`: every pod on the node with what it was given.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ListPodResourcesResponse {
    #[prost(message, repeated, tag = "1")]
    pub pod_resources: Vec<PodResources>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct PodResources {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(string, tag = "2")]
    pub namespace: String,
    #[prost(message, repeated, tag = "3")]
    pub containers: Vec<ContainerResources>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct ContainerResources {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(message, repeated, tag = "2")]
    pub devices: Vec<ContainerDevices>,
}

/// Devices of one resource (`nvidia.com/gpu`) given to a container; for
/// NVIDIA's device plugin the IDs are GPU UUIDs.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ContainerDevices {
    #[prost(string, tag = "1")]
    pub resource_name: String,
    #[prost(string, repeated, tag = "2")]
    pub device_ids: Vec<String>,
}

/// The gRPC method's path (`package v1; service PodResourcesLister`).
pub const LIST_PATH: &str = "/v1.PodResourcesLister/List";

/// The pod a GPU is given to.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct PodOf {
    pub namespace: String,
    pub pod: String,
    pub container: String,
}

/// GPU UUID → the pod holding it, from one `List` answer. Every resource
/// counts, not only `nvidia.com/gpu` (a renamed or shared resource, e.g.
/// `nvidia.com/gpu.shared`, still names GPUs by UUID); IDs that are no GPU's
/// UUID simply match nothing. A GPU listed twice (time-slicing) goes to the
/// first container listed.
pub fn gpus_of(resp: &ListPodResourcesResponse) -> HashMap<String, PodOf> {
    let mut map = HashMap::new();
    for pod in &resp.pod_resources {
        for c in &pod.containers {
            for d in &c.devices {
                for id in &d.device_ids {
                    map.entry(id.clone()).or_insert_with(|| PodOf {
                        namespace: pod.namespace.clone(),
                        pod: pod.name.clone(),
                        container: c.name.clone(),
                    });
                }
            }
        }
    }
    map
}

#[derive(Default)]
struct Shared {
    gpus: Arc<HashMap<String, PodOf>>,
    /// Why the last ask failed, while it fails.
    error: Option<String>,
}

/// The latest attribution, shared between the asking thread and the sampler.
#[derive(Clone, Default)]
pub struct PodWatch {
    shared: Arc<Mutex<Shared>>,
    generation: Arc<AtomicU64>,
}

impl PodWatch {
    /// Bumped at every change of the map or the error.
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    /// The map and the current error.
    pub fn get(&self) -> (Arc<HashMap<String, PodOf>>, Option<String>) {
        let s = self.shared.lock();
        (s.gpus.clone(), s.error.clone())
    }

    /// Whether only the asking thread still holds it (the sampler is gone).
    fn abandoned(&self) -> bool {
        Arc::strong_count(&self.shared) == 1
    }

    fn publish(&self, gpus: HashMap<String, PodOf>, error: Option<String>) {
        let mut s = self.shared.lock();
        if *s.gpus == gpus && s.error == error {
            return;
        }
        s.gpus = Arc::new(gpus);
        s.error = error;
        drop(s);
        self.generation.fetch_add(1, Ordering::AcqRel);
    }
}

/// Connects tonic to a unix socket (the URI it is given is a placeholder).
#[derive(Clone)]
struct UnixConnector(PathBuf);

impl Service<Uri> for UnixConnector {
    type Response = hyper_util::rt::TokioIo<tokio::net::UnixStream>;
    type Error = std::io::Error;
    type Future = BoxFuture<Self::Response, Self::Error>;

    fn poll_ready(&mut self, _: &mut std::task::Context<'_>) -> std::task::Poll<Result<(), Self::Error>> {
        std::task::Poll::Ready(Ok(()))
    }

    fn call(&mut self, _: Uri) -> Self::Future {
        let path = self.0.clone();
        Box::pin(async move {
            let s = tokio::net::UnixStream::connect(path).await?;
            Ok(hyper_util::rt::TokioIo::new(s))
        })
    }
}

/// How long one `List` may take before it counts as failed.
const CALL_DEADLINE: Duration = Duration::from_secs(5);

/// Asks the kubelet at `socket` once.
pub async fn list(socket: &Path) -> Result<ListPodResourcesResponse, String> {
    let channel = Endpoint::from_static("http://kubelet.invalid")
        .connect_timeout(CALL_DEADLINE)
        .timeout(CALL_DEADLINE)
        .connect_with_connector(UnixConnector(socket.to_path_buf()))
        .await
        .map_err(|e| format!("cannot connect: {}", error_chain(&e)))?;
    let mut grpc = tonic::client::Grpc::new(channel);
    grpc.ready().await.map_err(|e| format!("not ready: {e}"))?;
    let codec = tonic_prost::ProstCodec::<ListPodResourcesRequest, ListPodResourcesResponse>::default();
    let path = tonic::codegen::http::uri::PathAndQuery::from_static(LIST_PATH);
    let resp = grpc
        .unary(tonic::Request::new(ListPodResourcesRequest {}), path, codec)
        .await
        .map_err(|s| format!("List failed: {} ({:?})", s.message(), s.code()))?;
    Ok(resp.into_inner())
}

fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut src = e.source();
    while let Some(inner) = src {
        // tonic's errors repeat their source's text in their own.
        let text = inner.to_string();
        if !s.contains(&text) {
            s.push_str(": ");
            s.push_str(&text);
        }
        src = inner.source();
    }
    s
}

/// Starts asking the kubelet at `socket` every `every`, on a thread of its
/// own, or returns None when there is nothing to ask (see the setting's doc).
pub(crate) fn spawn(socket: &Path, every: Duration) -> Option<PodWatch> {
    if socket.as_os_str().is_empty() {
        return None;
    }
    let default = socket == Path::new(crate::sample::config::KUBELET_POD_RESOURCES);
    if default && !socket.exists() {
        tracing::info!(
            "sampler: no kubelet pod-resources socket at {}: GPU series carry no pod attributes",
            socket.display()
        );
        return None;
    }
    let watch = PodWatch::default();
    let w = watch.clone();
    let socket = socket.to_path_buf();
    let started = std::thread::Builder::new().name("sonde-pods".into()).spawn(move || {
        let rt = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
            Ok(rt) => rt,
            Err(e) => {
                tracing::warn!("sampler: pod attribution off: no runtime ({e})");
                return;
            }
        };
        rt.block_on(ask_forever(socket, every, w));
    });
    if let Err(e) = started {
        tracing::warn!("sampler: pod attribution off: cannot start its thread ({e})");
        return None;
    }
    Some(watch)
}

async fn ask_forever(socket: PathBuf, every: Duration, watch: PodWatch) {
    let mut warned = false;
    while !watch.abandoned() {
        match list(&socket).await {
            Ok(resp) => {
                let gpus = gpus_of(&resp);
                if warned {
                    tracing::info!("sampler: the kubelet's pod-resources socket answers again");
                    warned = false;
                }
                watch.publish(gpus, None);
            }
            Err(e) => {
                let why = format!("kubelet pod-resources at {}: {e}", socket.display());
                if !warned {
                    tracing::warn!("sampler: {why}; GPU series carry no pod attributes until it answers");
                    warned = true;
                }
                watch.publish(HashMap::new(), Some(why));
            }
        }
        tokio::time::sleep(every).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dev(resource: &str, ids: &[&str]) -> ContainerDevices {
        ContainerDevices {
            resource_name: resource.into(),
            device_ids: ids.iter().map(|s| s.to_string()).collect(),
        }
    }

    #[test]
    fn each_gpu_maps_to_its_container() {
        let resp = ListPodResourcesResponse {
            pod_resources: vec![
                PodResources {
                    name: "train-0".into(),
                    namespace: "ml".into(),
                    containers: vec![
                        ContainerResources {
                            name: "sidecar".into(),
                            devices: vec![],
                        },
                        ContainerResources {
                            name: "worker".into(),
                            devices: vec![dev("nvidia.com/gpu", &["GPU-a", "GPU-b"])],
                        },
                    ],
                },
                PodResources {
                    name: "infer".into(),
                    namespace: "serve".into(),
                    containers: vec![ContainerResources {
                        name: "main".into(),
                        devices: vec![dev("nvidia.com/gpu", &["GPU-c"]), dev("example.com/nic", &["eth9"])],
                    }],
                },
            ],
        };
        let m = gpus_of(&resp);
        assert_eq!(m["GPU-b"].pod, "train-0");
        assert_eq!(m["GPU-b"].container, "worker");
        assert_eq!(m["GPU-c"].namespace, "serve");
        assert_eq!(m.len(), 4);
    }

    #[test]
    fn the_wire_form_decodes_with_the_kubelets_field_numbers() {
        use prost::Message;
        // Hand-built bytes: pod_resources(1){name(1)="p", namespace(2)="n",
        // containers(3){name(1)="c", devices(2){resource_name(1)="r", device_ids(2)="G"}}}
        let device = [0x0a, 1, b'r', 0x12, 1, b'G'];
        let mut container = vec![0x0a, 1, b'c', 0x12, device.len() as u8];
        container.extend(device);
        let mut pod = vec![0x0a, 1, b'p', 0x12, 1, b'n', 0x1a, container.len() as u8];
        pod.extend(container);
        let mut msg = vec![0x0a, pod.len() as u8];
        msg.extend(pod);
        let resp = ListPodResourcesResponse::decode(msg.as_slice()).unwrap();
        let m = gpus_of(&resp);
        assert_eq!(
            m["G"],
            PodOf {
                namespace: "n".into(),
                pod: "p".into(),
                container: "c".into()
            }
        );
    }

    #[tokio::test]
    async fn a_missing_socket_is_an_error_that_names_it() {
        let dir = tempfile::tempdir().unwrap();
        let e = list(&dir.path().join("none.sock")).await.unwrap_err();
        assert!(e.contains("cannot connect"), "{e}");
    }
}
