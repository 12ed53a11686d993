//! `[api]`: where the HTTP API and the dashboard listen, and the token that
//! guards state changes (the OTLP receivers check it too when bound wide).
//! `crate::config` assembles the sections.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::config::check::{Check, ConfigError};
use crate::tls::config::ServerTls;
use crate::tls::reload::ReloadingSecret;

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct ApiConfig {
    /// Where the HTTP API and the dashboard listen, `address:port`.
    pub listen: String,
    /// The bearer token every state-changing request must carry
    /// (`Authorization: Bearer <token>`): required when `listen`, or an OTLP
    /// receiver (`ingest.otlp_*_listen`), is not a loopback address, for
    /// anyone who can reach it could change the configuration.
    pub token: Option<String>,
    /// A file that holds the token instead (its content, surrounding
    /// whitespace trimmed): the form a Kubernetes Secret or a systemd
    /// credential takes, so the token is in no environment and no config
    /// file. Not with `token`. Read at start (a file that cannot be read, or
    /// is empty, stops sonde) and again when it changes, looked at no more
    /// than once a second as requests arrive: the API and `POST /api/ingest`
    /// then want the new token only. The OTLP receivers take the token read
    /// at start. An absolute path.
    pub token_file: Option<PathBuf>,
    /// The token read from `token_file` (not a setting).
    #[serde(skip)]
    pub token_source: Option<Arc<ReloadingSecret>>,
    /// Serve the dashboard from this directory instead of the built-in page.
    pub web_dir: Option<PathBuf>,
    /// How far back the live store behind the dashboard keeps every series:
    /// the last five minutes at full resolution, older points in
    /// min/max/mean buckets of 0.9 s (to 15 minutes), 3.6 s (to an hour) and
    /// four times coarser for each further fourfold span. Older ranges come from the history when it is on.
    /// Default: an hour; five minutes on a master, which holds every node's
    /// series and has its history for the rest.
    /// Range: 10 000 ..= 86 400 000.
    pub live_window_ms: Option<u64>,
    /// Most series the live store keeps. Past it, a new series takes the
    /// place of one idle for a minute, or is refused and counted
    /// (`/api/series` `store.refused_series`). Default: 2 048; 16 384 on a
    /// master. A 100 ms series costs at most 24 KB of raw points plus
    /// 16 KB per tier of buckets: 56 KB for the default hour (115 MB for
    /// 2 048 series), 24 KB for a master's five minutes (390 MB for 16 384).
    /// Range: 16 ..= 1 048 576.
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

    /// Whether a token is set (an empty one is none), inline or as a file.
    pub fn has_token(&self) -> bool {
        self.token.as_deref().is_some_and(|t| !t.is_empty()) || self.token_file.is_some()
    }

    /// The token requests need now: `token_file`'s content as it is now, or
    /// `token`; None when neither is set.
    pub fn token(&self) -> Option<String> {
        match &self.token_source {
            Some(s) => Some(s.current().to_string()),
            None => self.token.clone().filter(|t| !t.is_empty()),
        }
    }

    /// Reads `token_file` (see the key): called once the settings are put
    /// together, before [`validate`](Self::validate).
    pub fn load_token_file(&mut self) -> Result<(), ConfigError> {
        self.token_source = match &self.token_file {
            Some(path) => Some(Arc::new(
                ReloadingSecret::load(path, "api.token_file").map_err(|e| ConfigError::new("api.token_file", e))?,
            )),
            None => None,
        };
        Ok(())
    }

    /// Checks what types alone cannot, and loads the TLS files.
    pub fn validate(&self, c: &mut Check) {
        match self.listen.parse::<SocketAddr>() {
            Err(e) => c.bad("listen", format!("not an address:port ({e})")),
            Ok(addr) if !addr.ip().is_loopback() && !self.has_token() => {
                let listen = c.key("listen");
                c.bad(
                    "token",
                    format!("required when {listen} is not a loopback address (state-changing requests need it)"),
                );
            }
            Ok(_) => {}
        }
        if self.token.is_some() && self.token_file.is_some() {
            c.bad("token_file", "set token or token_file, not both");
        }
        if let Some(p) = &self.token_file
            && !p.is_absolute()
        {
            c.bad("token_file", format!("{} is not an absolute path", p.display()));
        }
        if let Some(w) = self.live_window_ms {
            c.range("live_window_ms", w, 10_000, 86_400_000);
        }
        if let Some(n) = self.live_max_series {
            c.range("live_max_series", n, 16, 1 << 20);
        }
        if let Some(t) = &self.tls
            && let Err(e) = crate::tls::server_config(t, &c.key("tls"))
        {
            c.bad_whole(e.key, e.reason);
        }
    }
}

impl Default for ApiConfig {
    fn default() -> Self {
        Self {
            listen: "127.0.0.1:7878".into(),
            token: None,
            token_file: None,
            token_source: None,
            web_dir: None,
            live_window_ms: None,
            live_max_series: None,
            tls: None,
        }
    }
}
