//! The replay driver: a plugin called one hook at a time from the caller's
//! thread, for `sonde plugin test` (`plugin_kit::replay`). Everything but the
//! thread and its queue is the actor's own.

use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;
use std::time::Instant;

use super::actor::Actor;
use super::{Prepared, Shared, Subscription, Work};
use crate::model::{SeriesInfo, Tick};
use crate::plugin::PluginStatus;
use crate::plugin::bindings::types;
use crate::plugin::config::{PluginConfig, PluginsConfig};

/// A plugin driven by its caller, one call at a time on the caller's thread:
/// what `sonde plugin test` replays a recording through. The same instance,
/// store, sandbox, limits and trap handling as [`spawn`], without the thread
/// and its queue; after a trap the instance is not re-created (the caller
/// reports the trap instead). Timers fire on `shared.clock`.
pub struct Driven {
    actor: Actor,
}

/// Instantiates the plugin and calls `start`; Err says why it did not start.
pub fn drive(prep: Prepared, cfg: PluginConfig, pcfg: &PluginsConfig, shared: Shared) -> Result<Driven, String> {
    Ok(Driven {
        actor: Actor::started(prep, cfg, pcfg, shared, false)?,
    })
}

impl Driven {
    /// One hook call for `work` (a `Stop` is refused: use [`stop`](Self::stop)).
    pub fn handle(&mut self, work: Work) {
        if !matches!(work, Work::Stop(_)) {
            self.actor.handle(work);
        }
    }

    /// The sample batch this plugin would be handed after `tick`, if its
    /// request (manifest or `request-samples`) makes one complete now. A
    /// replay has no sampler clock: batches follow the ticks' own times.
    pub fn samples(&self, tick: &Arc<Tick>, series: &Arc<[SeriesInfo]>) -> Option<types::SampleBatch> {
        if !self.actor.wants_samples.load(Relaxed) {
            return None;
        }
        self.actor.acc.lock().push(tick, series, tick.time_ns)
    }

    /// The event kinds and tables the plugin subscribed to.
    pub fn wants_events(&self) -> Subscription {
        self.actor.wants_events.lock().clone()
    }

    /// When the next timer is due, on the plugin's clock.
    pub fn next_timer(&mut self) -> Option<Instant> {
        self.actor
            .live
            .as_mut()
            .and_then(|l| l.store.data_mut().timers.next_deadline())
    }

    /// Calls `on-timer` for every timer due by the plugin's clock.
    pub fn fire_due_timers(&mut self) {
        self.actor.fire_timers();
    }

    /// Whether an instance is alive (false after a trap or a refused start).
    pub fn is_running(&self) -> bool {
        self.actor.live.is_some()
    }

    /// Its status as `/api/plugins` would show it, with its self-metrics.
    pub fn status(&self) -> PluginStatus {
        let mut s = self.actor.status.lock().clone();
        s.metrics = self.actor.metrics.snapshot();
        s
    }

    /// Calls `stop` (the plugin flushes what it holds) and ends the instance.
    pub fn stop(&mut self) {
        self.actor.stop();
    }
}
