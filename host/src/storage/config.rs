//! `[storage]`: where a sonde keeps history beyond the live hour.

use serde::{Deserialize, Deserializer, Serialize};

use crate::config::check::Check;
use crate::export::remote_write::config::{RemoteQueryConfig, RemoteWriteConfig};
use crate::history::config::HistoryConfig;

/// History beyond the dashboard's live hour.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct StorageConfig {
    /// Keep history in the embedded store (`storage.history`): durable,
    /// bounded by its byte budgets, full resolution for minutes then min/max/mean
    /// tiers. Default: on for a master without `storage.query`, off otherwise.
    /// With `storage.query` set the engine is the history, so the master does
    /// not also keep a second copy on its own disk unless this says `true`
    /// (then the embedded store still writes, but is not read while `query` is set).
    pub embedded: Option<bool>,
    /// The embedded store's settings.
    pub history: HistoryConfig,
    /// Also write every series to a Prometheus-compatible engine with
    /// remote-write: a URL (`storage.remote_write = "http://vm:8428/api/v1/write"`)
    /// or a table with the URL and its tuning (`[storage.remote_write]`).
    #[serde(deserialize_with = "url_or_table")]
    pub remote_write: RemoteWriteConfig,
    /// Read history back from a Prometheus-compatible engine's HTTP query API
    /// instead of the embedded store: a base URL
    /// (`storage.query = "http://vm:8428"`, the part before `/api/v1/…`) or a
    /// table with the URL, `timeout_ms`, `max_response_bytes`, `headers` and
    /// credentials (`[storage.query]`). `GET /api/series` and
    /// `/api/series/data` then answer every range the live store does not
    /// cover from the engine; what they find there is what `remote_write`
    /// wrote (usually the same engine). An engine that is down, slow past
    /// `timeout_ms` or answers something else than its API's JSON gives a
    /// 502/504 naming its URL, counted in `/api/status` (`storage.query`);
    /// the live hour is still served.
    #[serde(deserialize_with = "url_or_table")]
    pub query: RemoteQueryConfig,
}

/// Something that can be set from a bare URL.
trait FromUrl: Default {
    fn with_url(url: String) -> Self;
}

impl FromUrl for RemoteWriteConfig {
    fn with_url(url: String) -> Self {
        RemoteWriteConfig {
            url: Some(url),
            ..Default::default()
        }
    }
}

fn url_or_table<'de, D, T>(d: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: FromUrl + Deserialize<'de>,
{
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Either<T> {
        Url(String),
        Table(T),
    }
    Ok(match Either::<T>::deserialize(d)? {
        Either::Url(u) if u.trim().is_empty() => T::default(),
        Either::Url(u) => T::with_url(u),
        Either::Table(t) => t,
    })
}

impl FromUrl for RemoteQueryConfig {
    fn with_url(url: String) -> Self {
        RemoteQueryConfig {
            url: Some(url),
            ..Default::default()
        }
    }
}

impl StorageConfig {
    /// Whether the embedded store runs, for a sonde whose role is `master` or not.
    pub fn embedded_on(&self, master: bool) -> bool {
        self.embedded.unwrap_or(master && !self.query.enabled())
    }

    /// Checks what types alone cannot, table by table.
    pub fn validate(&self, c: &mut Check) {
        self.history.validate(&mut c.within("history"));
        self.remote_write.validate(&mut c.within("remote_write"));
        self.query.validate(&mut c.within("query"));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bare_url_or_a_table() {
        let c: StorageConfig = toml::from_str("remote_write = \"http://127.0.0.1:8428/api/v1/write\"\n").unwrap();
        assert_eq!(
            c.remote_write.url.as_deref(),
            Some("http://127.0.0.1:8428/api/v1/write")
        );
        assert_eq!(
            c.remote_write.batch_max_samples,
            RemoteWriteConfig::default().batch_max_samples
        );
        let t: StorageConfig =
            toml::from_str("[remote_write]\nurl = \"http://vm:8428/api/v1/write\"\ntimeout_ms = 500\n").unwrap();
        assert_eq!(t.remote_write.timeout_ms, 500);
        assert!(toml::from_str::<StorageConfig>("remote_write = 3").is_err());
    }

    #[test]
    fn query_takes_a_url_or_a_table_and_turns_the_embedded_default_off() {
        let c: StorageConfig = toml::from_str("query = \"http://127.0.0.1:9090\"\n").unwrap();
        assert_eq!(c.query.url.as_deref(), Some("http://127.0.0.1:9090"));
        assert!(!c.embedded_on(true), "the engine is the history");
        let c: StorageConfig =
            toml::from_str("embedded = true\n[query]\nurl = \"http://vm:8428\"\ntimeout_ms = 700\n").unwrap();
        assert_eq!(c.query.timeout_ms, 700);
        assert!(c.embedded_on(true), "asked for explicitly");
        assert!(StorageConfig::default().embedded_on(true));
        let bad: StorageConfig = toml::from_str("query = \"vm:8428\"\n").unwrap();
        let mut errs = Vec::new();
        bad.validate(&mut Check::new("storage", &mut errs));
        assert_eq!(errs[0].key, "storage.query.url");
    }
}
