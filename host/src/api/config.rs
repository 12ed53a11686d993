//! `[api]`: where the HTTP API and the dashboard listen, and the token that
//! guards state changes (the OTLP receivers check it too when bound wide).
//! `crate::config` assembles and validates the sections.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::tls::config::ServerTls;

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct ApiConfig {
    /// Where the HTTP API and the dashboard listen.
    pub listen: String,
    /// Bearer token for state-changing requests; required when `listen` is not loopback.
    pub token: Option<String>,
    /// Serve the dashboard from this directory instead of the built-in page.
    pub web_dir: Option<PathBuf>,
    /// How far back the live store behind the dashboard keeps every series,
    /// in ms (10 000 ..= 86 400 000): the last five minutes at full
    /// resolution, older points in min/max/mean buckets of 0.9 s (to 15
    /// minutes), 3.6 s (to an hour) and four times coarser for each further
    /// fourfold span. Older ranges come from the history when it is on.
    /// Default: an hour; five minutes on a master, which holds every node's
    /// series and has its history for the rest.
    pub live_window_ms: Option<u64>,
    /// Most series the live store keeps (16 ..= 1 048 576). Past it, a new
    /// series takes the place of one idle for a minute, or is refused and
    /// counted (`/api/series` `store.refused_series`). Default: 2 048; 16 384
    /// on a master. A 100 ms series costs at most 24 KB of raw points plus
    /// 16 KB per tier of buckets: 56 KB for the default hour (115 MB for
    /// 2 048 series), 24 KB for a master's five minutes (390 MB for 16 384).
    pub live_max_series: Option<usize>,
    /// TLS on the API listener, which also carries the dashboard and
    /// `POST /api/ingest` (`[api.tls]`: `cert`, `key`, optional `client_ca`).
    /// Unset: plain HTTP.
    pub tls: Option<ServerTls>,
}

/// The live store's bounds, as resolved for this sonde's role.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LiveLimits {
    pub window_ms: u64,
    pub max_series: usize,
    /// How many aged-out series stay listed (without points) because the
    /// embedded history still holds them; 0 without a history.
    pub max_dormant: usize,
}

impl Default for LiveLimits {
    fn default() -> Self {
        LiveLimits {
            window_ms: 3_600_000,
            max_series: 2_048,
            max_dormant: 0,
        }
    }
}

impl ApiConfig {
    /// The live store's bounds for a sonde whose role is `master` or not.
    pub fn live_limits(&self, master: bool) -> LiveLimits {
        let (window_ms, max_series) = if master { (300_000, 16_384) } else { (3_600_000, 2_048) };
        LiveLimits {
            window_ms: self.live_window_ms.unwrap_or(window_ms),
            max_series: self.live_max_series.unwrap_or(max_series),
            max_dormant: 0,
        }
    }

    /// Settings out of range, as (key, reason).
    pub fn problems(&self) -> Vec<(String, String)> {
        let mut out = Vec::new();
        if let Some(w) = self.live_window_ms.filter(|w| !(10_000..=86_400_000).contains(w)) {
            out.push((
                "api.live_window_ms".into(),
                format!("{w} is out of range 10000..=86400000"),
            ));
        }
        if let Some(n) = self.live_max_series.filter(|n| !(16..=1 << 20).contains(n)) {
            out.push((
                "api.live_max_series".into(),
                format!("{n} is out of range 16..=1048576"),
            ));
        }
        out
    }
}

impl Default for ApiConfig {
    fn default() -> Self {
        Self {
            listen: "127.0.0.1:7878".into(),
            token: None,
            web_dir: None,
            live_window_ms: None,
            live_max_series: None,
            tls: None,
        }
    }
}
