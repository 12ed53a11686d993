//! `[storage]`: where a sonde keeps history beyond the live hour.

use serde::{Deserialize, Deserializer, Serialize};

use crate::export::remote_write::config::RemoteWriteConfig;
use crate::history::config::HistoryConfig;

/// History beyond the dashboard's live hour.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct StorageConfig {
    /// Keep history in the embedded store (`storage.history`): durable,
    /// bounded by its byte budgets, full resolution for minutes then min/max/mean
    /// tiers. Default: on for a master, off otherwise.
    pub embedded: Option<bool>,
    /// The embedded store's settings.
    pub history: HistoryConfig,
    /// Also write every series to a Prometheus-compatible engine with
    /// remote-write: a URL (`storage.remote_write = "http://vm:8428/api/v1/write"`)
    /// or a table with the URL and its tuning (`[storage.remote_write]`).
    #[serde(deserialize_with = "url_or_table")]
    pub remote_write: RemoteWriteConfig,
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

impl StorageConfig {
    /// Problems, as (key, reason).
    /// Whether the embedded store runs, for a sonde whose role is `master` or not.
    pub fn embedded_on(&self, master: bool) -> bool {
        self.embedded.unwrap_or(master)
    }

    pub fn problems(&self) -> Vec<(String, String)> {
        let mut p: Vec<(String, String)> = self
            .history
            .validate()
            .into_iter()
            .map(|(k, r)| (format!("storage.{k}"), r))
            .collect();
        if let Err(e) = self.remote_write.validate() {
            p.push(("storage.remote_write".into(), e));
        }
        p
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
}
