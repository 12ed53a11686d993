//! wrongworld: a component built against `sonde:plugin@9.0.0` instead of the
//! host's 0.1.x, so the host's tests can check that loading it fails with a
//! "wrong contract version" error and leaves the other plugins running.
//!
//! `wit/sonde-plugin.wit` is `wit/sonde-plugin.wit` from the repository root
//! with only the package line changed; `scripts/build-plugins.sh` refreshes it
//! and the test below checks it. The hooks do nothing: the host must refuse
//! the component before calling any of them.

wit_bindgen::generate!({
    path: "wit",
    world: "plugin",
});

use exports::sonde::plugin::hooks::{EventBatch, Guest, HttpRequest, HttpResponse, Manifest, SampleBatch, StartInfo};

struct WrongWorld;

impl Guest for WrongWorld {
    fn start(_info: StartInfo) -> Result<Manifest, String> {
        Ok(Manifest {
            version: env!("CARGO_PKG_VERSION").to_string(),
            description: "built against sonde:plugin@9.0.0; a 0.1 host must refuse it".to_string(),
            samples: None,
            events: Vec::new(),
        })
    }

    fn configure(_settings: String) -> Result<(), String> {
        Ok(())
    }

    fn on_samples(_batch: SampleBatch) -> Result<(), String> {
        Ok(())
    }

    fn on_events(_batch: EventBatch) -> Result<(), String> {
        Ok(())
    }

    fn on_timer(_id: u64) -> Result<(), String> {
        Ok(())
    }

    fn on_request(_request: HttpRequest) -> HttpResponse {
        HttpResponse {
            status: 404,
            headers: Vec::new(),
            body: Vec::new(),
        }
    }

    fn stop() {}
}

// Native builds (unit tests) cannot link the export symbols' names.
#[cfg(target_arch = "wasm32")]
export!(WrongWorld);

#[cfg(test)]
mod tests {
    const PACKAGE_LINE: &str = "package sonde:plugin@9.0.0;";

    #[test]
    fn wit_copy_differs_from_the_contract_only_in_the_package_line() {
        let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../../../wit/sonde-plugin.wit");
        let contract = std::fs::read_to_string(root).expect("read the repository's wit/sonde-plugin.wit");
        let copy = include_str!("../wit/sonde-plugin.wit");

        let expected: Vec<&str> = contract
            .lines()
            .map(|l| {
                if l.starts_with("package sonde:plugin@") {
                    PACKAGE_LINE
                } else {
                    l
                }
            })
            .collect();
        let actual: Vec<&str> = copy.lines().collect();
        assert!(actual.contains(&PACKAGE_LINE));
        assert!(
            expected == actual,
            "plugins/testing/wrongworld/wit/sonde-plugin.wit is stale; run scripts/build-plugins.sh to refresh it"
        );
    }
}
