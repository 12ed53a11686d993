//! The OTLP resource: who is sending.
//!
//! `service.instance.id` is a random UUID (version 4 layout) drawn once per
//! process and kept for its life, as the semantic conventions recommend: two
//! sonde processes on one machine, or one restarted, never share an id, and
//! nothing about the machine leaks into it.

use std::sync::OnceLock;

use crate::config::Config;
use crate::model::AttrValue;

/// The resource attributes, in this order: `service.name`, `service.version`,
/// `service.instance.id`, `host.name`, `host.arch`, `os.type`, `process.pid`,
/// then `cfg.export.resource` (an extra with the same key replaces the earlier
/// value in place; new keys are appended in the config's key order).
pub fn resource_attributes(cfg: &Config) -> Vec<(String, AttrValue)> {
    let host_name = cfg
        .host
        .name
        .clone()
        .filter(|n| !n.trim().is_empty())
        .unwrap_or_else(machine_hostname);
    let mut attrs: Vec<(String, AttrValue)> = vec![
        ("service.name".into(), AttrValue::Str(cfg.export.service_name.clone())),
        (
            "service.version".into(),
            AttrValue::Str(env!("CARGO_PKG_VERSION").into()),
        ),
        ("service.instance.id".into(), AttrValue::Str(instance_id().to_string())),
        ("host.name".into(), AttrValue::Str(host_name)),
        ("host.arch".into(), AttrValue::Str(host_arch().into())),
        ("os.type".into(), AttrValue::Str(os_type().into())),
        ("process.pid".into(), AttrValue::Int(std::process::id() as i64)),
    ];
    if cfg.cluster.role == crate::cluster::config::Role::Agent {
        // Marks an agent's own telemetry: it belongs to the node, not to a job.
        attrs.push(("sonde.agent".into(), AttrValue::Bool(true)));
    }
    for (k, v) in &cfg.export.resource {
        match attrs.iter_mut().find(|(key, _)| key == k) {
            Some(slot) => slot.1 = AttrValue::Str(v.clone()),
            None => attrs.push((k.clone(), AttrValue::Str(v.clone()))),
        }
    }
    attrs
}

/// This process's `service.instance.id`: a random v4 UUID, fixed for the process's life.
pub fn instance_id() -> &'static str {
    static ID: OnceLock<String> = OnceLock::new();
    ID.get_or_init(|| {
        let mut b: [u8; 16] = rand::random();
        b[6] = (b[6] & 0x0f) | 0x40; // version 4
        b[8] = (b[8] & 0x3f) | 0x80; // RFC 4122 variant
        let h: String = b.iter().map(|x| format!("{x:02x}")).collect();
        format!(
            "{}-{}-{}-{}-{}",
            &h[0..8],
            &h[8..12],
            &h[12..16],
            &h[16..20],
            &h[20..32]
        )
    })
}

/// The machine's host name: gethostname(2), then /proc/sys/kernel/hostname, then "localhost".
pub fn machine_hostname() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: buf is valid for buf.len() bytes; gethostname writes at most that many.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    if rc == 0 {
        let end = buf.iter().position(|&c| c == 0).unwrap_or(buf.len());
        let name = String::from_utf8_lossy(&buf[..end]).trim().to_string();
        if !name.is_empty() {
            return name;
        }
    }
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_string())
        .ok()
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "localhost".into())
}

/// `host.arch` well-known values from the semantic conventions.
fn host_arch() -> &'static str {
    match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        "x86" => "x86",
        "arm" => "arm32",
        "powerpc" => "ppc32",
        "powerpc64" => "ppc64",
        "s390x" => "s390x",
        "loongarch64" => "loongarch64",
        other => other,
    }
}

/// `os.type` well-known values from the semantic conventions.
fn os_type() -> &'static str {
    match std::env::consts::OS {
        "macos" => "darwin",
        "illumos" | "solaris" => "solaris",
        other => other, // linux, windows, freebsd, netbsd, openbsd, dragonfly, aix, ...
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn get<'a>(a: &'a [(String, AttrValue)], k: &str) -> Option<&'a AttrValue> {
        a.iter().find(|(key, _)| key == k).map(|(_, v)| v)
    }

    #[test]
    fn export_resource_has_the_standard_keys_and_extras_override() {
        let mut cfg = Config::default();
        cfg.export.service_name = "trainer".into();
        cfg.host.name = Some("node-7".into());
        cfg.export.resource.insert("k8s.pod.name".into(), "p-1".into());
        cfg.export.resource.insert("host.name".into(), "override".into());
        let a = resource_attributes(&cfg);
        assert_eq!(get(&a, "service.name"), Some(&AttrValue::Str("trainer".into())));
        assert_eq!(
            get(&a, "service.version"),
            Some(&AttrValue::Str(env!("CARGO_PKG_VERSION").into()))
        );
        assert_eq!(get(&a, "host.name"), Some(&AttrValue::Str("override".into())));
        assert_eq!(get(&a, "k8s.pod.name"), Some(&AttrValue::Str("p-1".into())));
        assert_eq!(get(&a, "process.pid"), Some(&AttrValue::Int(std::process::id() as i64)));
        assert!(get(&a, "host.arch").is_some() && get(&a, "os.type").is_some());
        assert_eq!(
            a.iter().filter(|(k, _)| k == "host.name").count(),
            1,
            "overridden in place"
        );
        let Some(AttrValue::Str(id)) = get(&a, "service.instance.id") else {
            panic!("no instance id")
        };
        assert_eq!(id.len(), 36);
        assert_eq!(&id[14..15], "4");
        assert_eq!(id, instance_id(), "stable for the process");
        cfg.host.name = None;
        let a = resource_attributes(&cfg);
        let Some(AttrValue::Str(h)) = get(&a, "host.name") else {
            panic!()
        };
        assert!(!h.is_empty());
    }
}
