//! A plugin of either contract version the host speaks, behind one set of
//! calls in 0.2's types: a 0.2 component is called as it is; a 0.1 component
//! through `v0_1::adapt` (its manifest and event batches converted).
//!
//! ```text
//!  engine.rs  the hooks export's version ──► manager.rs links the right world
//!  WorldPre   compiled and linked, ready to instantiate (one per file)
//!  World      one instance's exports; the instance thread calls these
//! ```

use wasmtime::Store;
use wasmtime::component::{InstancePre, Linker};

use super::bindings::{Plugin, PluginPre, types};
use super::host_api::PluginState;
use super::v0_1;

/// A component linked against the world of the contract it was built for.
pub enum WorldPre {
    Current(PluginPre<PluginState>),
    V0_1(v0_1::PluginPre<PluginState>),
}

impl WorldPre {
    /// Links `component`, built against contract `version` ("0.2.0", "0.1.3").
    pub fn link(
        linker: &Linker<PluginState>,
        component: &wasmtime::component::Component,
        version: &str,
    ) -> Result<WorldPre, String> {
        let pre: InstancePre<PluginState> = linker
            .instantiate_pre(component)
            .map_err(|e| format!("cannot link: {e:#}"))?;
        let mismatch = |e: wasmtime::Error| format!("does not match the plugin world of contract {version}: {e:#}");
        if version.starts_with("0.1.") {
            return v0_1::PluginPre::new(pre).map(WorldPre::V0_1).map_err(mismatch);
        }
        PluginPre::new(pre).map(WorldPre::Current).map_err(mismatch)
    }

    pub fn instantiate(&self, store: &mut Store<PluginState>) -> wasmtime::Result<World> {
        Ok(match self {
            WorldPre::Current(p) => World::Current(p.instantiate(store)?),
            WorldPre::V0_1(p) => World::V0_1(p.instantiate(store)?),
        })
    }
}

/// One instance's hooks.
pub enum World {
    Current(Plugin),
    V0_1(v0_1::Plugin),
}

type Call<T> = wasmtime::Result<T>;

impl World {
    pub fn start(&self, s: &mut Store<PluginState>, info: &types::StartInfo) -> Call<Result<types::Manifest, String>> {
        match self {
            World::Current(p) => p.sonde_plugin_hooks().call_start(s, info),
            World::V0_1(p) => Ok(p.sonde_plugin_hooks().call_start(s, info)?.map(v0_1::adapt::manifest)),
        }
    }

    pub fn configure(&self, s: &mut Store<PluginState>, settings: &str) -> Call<Result<(), String>> {
        match self {
            World::Current(p) => p.sonde_plugin_hooks().call_configure(s, settings),
            World::V0_1(p) => p.sonde_plugin_hooks().call_configure(s, settings),
        }
    }

    pub fn on_samples(&self, s: &mut Store<PluginState>, batch: &types::SampleBatch) -> Call<Result<(), String>> {
        match self {
            World::Current(p) => p.sonde_plugin_hooks().call_on_samples(s, batch),
            World::V0_1(p) => p.sonde_plugin_hooks().call_on_samples(s, batch),
        }
    }

    pub fn on_events(&self, s: &mut Store<PluginState>, batch: types::EventBatch) -> Call<Result<(), String>> {
        match self {
            World::Current(p) => p.sonde_plugin_hooks().call_on_events(s, &batch),
            World::V0_1(p) => p
                .sonde_plugin_hooks()
                .call_on_events(s, &v0_1::adapt::event_batch(batch)),
        }
    }

    pub fn on_timer(&self, s: &mut Store<PluginState>, id: u64) -> Call<Result<(), String>> {
        match self {
            World::Current(p) => p.sonde_plugin_hooks().call_on_timer(s, id),
            World::V0_1(p) => p.sonde_plugin_hooks().call_on_timer(s, id),
        }
    }

    pub fn on_request(&self, s: &mut Store<PluginState>, req: &types::HttpRequest) -> Call<types::HttpResponse> {
        match self {
            World::Current(p) => p.sonde_plugin_hooks().call_on_request(s, req),
            World::V0_1(p) => p.sonde_plugin_hooks().call_on_request(s, req),
        }
    }

    pub fn stop(&self, s: &mut Store<PluginState>) -> Call<()> {
        match self {
            World::Current(p) => p.sonde_plugin_hooks().call_stop(s),
            World::V0_1(p) => p.sonde_plugin_hooks().call_stop(s),
        }
    }
}
