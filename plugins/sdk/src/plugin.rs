//! [`Plugin`]: the hooks as methods of the plugin's own state, each given the
//! host as `&mut impl Host`, with default no-ops for the hooks a plugin does
//! not use. [`crate::export_plugin!`] wires a `Plugin` to the component's
//! exports: it keeps the one instance between calls and passes the real host.
//!
//! Because every hook takes the host as an argument, a native test calls the
//! same methods with a `testing::FakeHost` and reads what it recorded.

use crate::Host;
use crate::instance::InstanceCell;
use crate::types::{EventBatch, HttpRequest, HttpResponse, Manifest, SampleBatch, StartInfo};

/// A sonde plugin: its state, built by `start` and handed to every later hook.
///
/// Implement `start` and `manifest`, and only the hooks you need:
///
/// ```ignore
/// struct Counter { seen: u64 }
///
/// impl sonde_plugin_sdk::Plugin for Counter {
///     fn start(_host: &mut impl Host, _info: StartInfo) -> Result<Self, String> {
///         Ok(Counter { seen: 0 })
///     }
///     fn manifest(&self) -> Manifest {
///         Manifest { events: vec![EventKind::Progress], ..Default::default() }
///     }
///     fn on_events(&mut self, _host: &mut impl Host, batch: EventBatch) -> Result<(), String> {
///         self.seen += batch.progress.map_or(0, |p| p.time.len() as u64);
///         Ok(())
///     }
/// }
///
/// sonde_plugin_sdk::export_plugin!(Counter);
/// ```
///
/// The host calls one hook at a time and never re-enters, so `&mut self` is
/// never contended. A panic traps the instance: the host re-creates it and
/// calls `start` again (`info.restarts` counts how often), so keep what must
/// survive in the host's state store (`Host::state_*`).
pub trait Plugin: Sized + Send + 'static {
    /// Builds the plugin's state from `info.settings` (JSON). `Err` refuses
    /// to start; the reason is shown in the plugin's status.
    fn start(host: &mut impl Host, info: StartInfo) -> Result<Self, String>;

    /// What the plugin wants delivered; asked once, right after `start`.
    fn manifest(&self) -> Manifest;

    /// New settings from a live config change; `Err` keeps the old ones.
    /// By default only empty settings are accepted: a plugin that reads
    /// settings and has no `configure` refuses a change it would ignore.
    fn configure(&mut self, host: &mut impl Host, settings: &str) -> Result<(), String> {
        let _ = host;
        match serde_json::from_str::<serde_json::Value>(settings) {
            _ if settings.trim().is_empty() => Ok(()),
            Ok(serde_json::Value::Object(map)) if map.is_empty() => Ok(()),
            _ => Err("this plugin does not apply settings while running: restart it to change them".into()),
        }
    }

    /// Sampled metrics, as the manifest (or `Host::request_samples`) asked.
    fn on_samples(&mut self, host: &mut impl Host, batch: SampleBatch) -> Result<(), String> {
        let _ = (host, batch);
        Ok(())
    }

    /// Reported events of the kinds the manifest names.
    fn on_events(&mut self, host: &mut impl Host, batch: EventBatch) -> Result<(), String> {
        let _ = (host, batch);
        Ok(())
    }

    /// A timer set with `Host::set_timer` fired.
    fn on_timer(&mut self, host: &mut impl Host, id: u64) -> Result<(), String> {
        let _ = (host, id);
        Ok(())
    }

    /// A request to `/api/plugins/<name>/...`. By default: 404.
    fn on_request(&mut self, host: &mut impl Host, request: &HttpRequest) -> HttpResponse {
        let _ = host;
        HttpResponse::error(404, &format!("no route {} {}", request.method, request.path))
    }

    /// The plugin is being unloaded: flush what it holds.
    fn stop(&mut self, host: &mut impl Host) {
        let _ = host;
    }
}

/// What [`crate::export_plugin!`] expands to, one function per hook: each
/// takes the instance cell and a host, so the glue itself runs natively too.
#[doc(hidden)]
pub mod glue {
    use super::*;

    pub fn start<P: Plugin>(cell: &InstanceCell<P>, host: &mut impl Host, info: StartInfo) -> Result<Manifest, String> {
        let plugin = P::start(host, info)?;
        let manifest = plugin.manifest();
        cell.set(plugin);
        Ok(manifest)
    }

    pub fn configure<P: Plugin>(cell: &InstanceCell<P>, host: &mut impl Host, settings: &str) -> Result<(), String> {
        cell.with(|p| p.configure(host, settings))?
    }

    pub fn on_samples<P: Plugin>(
        cell: &InstanceCell<P>,
        host: &mut impl Host,
        batch: SampleBatch,
    ) -> Result<(), String> {
        cell.with(|p| p.on_samples(host, batch))?
    }

    pub fn on_events<P: Plugin>(cell: &InstanceCell<P>, host: &mut impl Host, batch: EventBatch) -> Result<(), String> {
        cell.with(|p| p.on_events(host, batch))?
    }

    pub fn on_timer<P: Plugin>(cell: &InstanceCell<P>, host: &mut impl Host, id: u64) -> Result<(), String> {
        cell.with(|p| p.on_timer(host, id))?
    }

    pub fn on_request<P: Plugin>(cell: &InstanceCell<P>, host: &mut impl Host, request: &HttpRequest) -> HttpResponse {
        cell.with(|p| p.on_request(host, request))
            .unwrap_or_else(|e| HttpResponse::error(503, &e))
    }

    pub fn stop<P: Plugin>(cell: &InstanceCell<P>, host: &mut impl Host) {
        // Nothing to flush when `start` never succeeded.
        let _ = cell.with(|p| p.stop(host));
    }
}

/// Exports a type implementing [`Plugin`] as the component's hooks:
/// `sonde_plugin_sdk::export_plugin!(MyPlugin);` at the plugin crate's root
/// (the type may live in a module; `use` it at the root first).
///
/// The instance lives in a `static` between calls; every hook gets
/// [`crate::WasmHost`]. A hook called before `start` succeeded answers an
/// error (503 for `on-request`) instead of trapping.
#[macro_export]
macro_rules! export_plugin {
    ($ty:ident) => {
        const _: () = {
            static INSTANCE: $crate::InstanceCell<$ty> = $crate::InstanceCell::new();
            use $crate::plugin::glue;
            use $crate::types as t;

            impl $crate::Guest for $ty {
                fn start(info: t::StartInfo) -> ::core::result::Result<t::Manifest, ::std::string::String> {
                    glue::start(&INSTANCE, &mut $crate::WasmHost, info)
                }
                fn configure(settings: ::std::string::String) -> ::core::result::Result<(), ::std::string::String> {
                    glue::configure(&INSTANCE, &mut $crate::WasmHost, &settings)
                }
                fn on_samples(batch: t::SampleBatch) -> ::core::result::Result<(), ::std::string::String> {
                    glue::on_samples(&INSTANCE, &mut $crate::WasmHost, batch)
                }
                fn on_events(batch: t::EventBatch) -> ::core::result::Result<(), ::std::string::String> {
                    glue::on_events(&INSTANCE, &mut $crate::WasmHost, batch)
                }
                fn on_timer(id: u64) -> ::core::result::Result<(), ::std::string::String> {
                    glue::on_timer(&INSTANCE, &mut $crate::WasmHost, id)
                }
                fn on_request(request: t::HttpRequest) -> t::HttpResponse {
                    glue::on_request(&INSTANCE, &mut $crate::WasmHost, &request)
                }
                fn stop() {
                    glue::stop(&INSTANCE, &mut $crate::WasmHost)
                }
            }
        };
        $crate::export!($ty);
    };
}

#[cfg(all(test, feature = "testing"))]
mod tests {
    use super::*;
    use crate::testing::FakeHost;
    use crate::types::EventKind;

    /// Counts progress rows; uses only `on_events` and `on_request`.
    struct Counter {
        rows: usize,
    }

    impl Plugin for Counter {
        fn start(host: &mut impl Host, info: StartInfo) -> Result<Self, String> {
            if info.settings.contains("refuse") {
                return Err("refused".into());
            }
            host.log(crate::types::Severity::Info, "started");
            Ok(Counter { rows: 0 })
        }
        fn manifest(&self) -> Manifest {
            Manifest {
                events: vec![EventKind::Progress],
                ..Default::default()
            }
        }
        fn on_events(&mut self, _host: &mut impl Host, batch: EventBatch) -> Result<(), String> {
            self.rows += batch.progress.map_or(0, |p| p.time.len());
            Ok(())
        }
    }

    fn get(path: &str) -> HttpRequest {
        HttpRequest {
            method: "GET".into(),
            path: path.into(),
            ..Default::default()
        }
    }

    #[test]
    fn the_glue_keeps_the_instance_and_defaults_the_unused_hooks() {
        let cell = InstanceCell::<Counter>::new();
        let mut host = FakeHost::default();
        assert_eq!(
            glue::on_request(&cell, &mut host, &get("/")).status,
            503,
            "before start: an error, not a trap"
        );
        let refused = StartInfo {
            settings: "refuse".into(),
            ..Default::default()
        };
        assert_eq!(glue::start(&cell, &mut host, refused), Err("refused".into()));
        let m = glue::start(&cell, &mut host, StartInfo::default()).unwrap();
        assert_eq!(m.events, vec![EventKind::Progress]);
        assert!(host.logged("started"));

        let batch = EventBatch {
            progress: Some(crate::types::ProgressColumns {
                origin: vec![0, 0],
                name: vec![0, 0],
                time: vec![1, 2],
                value: vec![1, 2],
            }),
            ..Default::default()
        };
        glue::on_events(&cell, &mut host, batch).unwrap();
        assert_eq!(cell.with(|c| c.rows), Ok(2), "state is kept between calls");
        assert_eq!(glue::on_timer(&cell, &mut host, 1), Ok(()));
        assert_eq!(glue::on_samples(&cell, &mut host, SampleBatch::default()), Ok(()));
        let r = glue::on_request(&cell, &mut host, &get("/x"));
        assert_eq!(r.status, 404);
        assert!(String::from_utf8(r.body).unwrap().contains("no route GET /x"));
        assert_eq!(glue::configure(&cell, &mut host, "{}"), Ok(()));
        assert!(
            glue::configure(&cell, &mut host, r#"{"k":1}"#)
                .unwrap_err()
                .contains("restart it")
        );
        glue::stop(&cell, &mut host);
    }
}
