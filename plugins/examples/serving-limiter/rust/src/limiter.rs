//! The serving-limiter logic: a burst of SLO-miss observations becomes at
//! most one decision per model and window, with counts. The same rules as
//! `../js/limiter.js`, decision for decision, so the two plugins can be
//! measured side by side on the same input.

use std::collections::{BTreeMap, VecDeque};

use serde::Serialize;
use sonde_plugin_sdk::settings;

/// Decisions the route shows, newest last.
const KEEP_DECISIONS: usize = 100;

/// Request results: 0 success, 4 timeout, anything else the server's error.
const TIMEOUT: i32 = 4;

const KNOWN: [&str; 3] = ["window_ms", "lag_ms", "min_misses"];

#[derive(Clone, Debug, PartialEq)]
pub struct Settings {
    pub window_ms: u64,
    /// How long after a window's end reports for it are still waited for.
    pub lag_ms: u64,
    /// A window with fewer misses makes no decision.
    pub min_misses: u64,
}

impl Settings {
    /// Reads the settings JSON; errors name the key (the host names the plugin).
    pub fn parse(json: &str) -> Result<Settings, String> {
        let s = settings::parse_object("serving-limiter", json, &KNOWN)?;
        Ok(Settings {
            window_ms: s
                .u64_in("window_ms", 100..=3_600_000, "milliseconds from 100 to 3600000")?
                .unwrap_or(10_000),
            lag_ms: s
                .u64_in("lag_ms", 0..=600_000, "milliseconds from 0 to 600000")?
                .unwrap_or(2_000),
            min_misses: s
                .u64_in("min_misses", 1..=1_000_000, "an integer from 1 to 1000000")?
                .unwrap_or(1),
        })
    }

    fn window_ns(&self) -> u64 {
        self.window_ms * 1_000_000
    }
}

#[derive(Clone, Debug, Default)]
struct Window {
    requests: u64,
    timeouts: u64,
    late: u64,
    errors: u64,
}

/// One model's closed window with misses: the decision's body.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct WindowMisses {
    pub model: u64,
    pub window_start_ms: u64,
    pub window_end_ms: u64,
    pub requests: u64,
    pub misses: u64,
    pub timeouts: u64,
    pub late: u64,
    pub errors: u64,
    pub miss_rate: f64,
}

impl WindowMisses {
    /// The decision's sentence.
    pub fn reason(&self) -> String {
        format!(
            "model {}: {} of {} requests missed their SLO in one {} s window ({} timed out, {} late, {} failed)",
            self.model,
            self.misses,
            self.requests,
            (self.window_end_ms - self.window_start_ms) as f64 / 1000.0,
            self.timeouts,
            self.late,
            self.errors
        )
    }
}

pub struct Limiter {
    pub settings: Settings,
    /// (window index, model) → the window's counts.
    open: BTreeMap<(u64, u64), Window>,
    /// Windows with an index below this are closed.
    closed_before: u64,
    decided: VecDeque<WindowMisses>,
    late_rows: u64,
    folded: u64,
    quiet_windows: u64,
}

impl Limiter {
    pub fn new(settings: Settings) -> Limiter {
        Limiter {
            settings,
            open: BTreeMap::new(),
            closed_before: 0,
            decided: VecDeque::new(),
            late_rows: 0,
            folded: 0,
            quiet_windows: 0,
        }
    }

    /// One finished request of `model`, times in ns.
    pub fn observe(&mut self, model: u64, departure: u64, deadline: u64, result: i32) {
        let index = departure / self.settings.window_ns();
        if index < self.closed_before {
            self.late_rows += 1;
            return;
        }
        let w = self.open.entry((index, model)).or_default();
        w.requests += 1;
        if result == TIMEOUT {
            w.timeouts += 1;
        } else if result != 0 {
            w.errors += 1;
        } else if deadline != 0 && departure > deadline {
            w.late += 1;
        }
    }

    /// Closes every window that ended at least `lag_ms` before `now`; the
    /// decisions' bodies, by window then model.
    pub fn close(&mut self, now: u64) -> Vec<WindowMisses> {
        let lag = self.settings.lag_ms * 1_000_000;
        let below = now.saturating_sub(lag) / self.settings.window_ns();
        self.closed_before = self.closed_before.max(below);
        let mut out = Vec::new();
        while let Some(entry) = self.open.first_entry() {
            if entry.key().0 >= below {
                break;
            }
            let ((index, model), w) = entry.remove_entry();
            let misses = w.timeouts + w.late + w.errors;
            if misses < self.settings.min_misses {
                self.quiet_windows += 1;
                continue;
            }
            self.folded += misses;
            let start = index * self.settings.window_ms;
            let body = WindowMisses {
                model,
                window_start_ms: start,
                window_end_ms: start + self.settings.window_ms,
                requests: w.requests,
                misses,
                timeouts: w.timeouts,
                late: w.late,
                errors: w.errors,
                miss_rate: misses as f64 / w.requests as f64,
            };
            if self.decided.len() == KEEP_DECISIONS {
                self.decided.pop_front();
            }
            self.decided.push_back(body.clone());
            out.push(body);
        }
        out
    }

    /// The body of `GET /windows`.
    pub fn view(&self) -> serde_json::Value {
        serde_json::json!({
            "decisions": self.decided,
            "open_windows": self.open.len(),
            "late_rows": self.late_rows,
            "misses_folded": self.folded,
            "quiet_windows": self.quiet_windows,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;
    const T0: u64 = 1_000_000_000 * MS;

    fn burst(l: &mut Limiter, model: u64, w: u64, n: u64, missed: u64) {
        for i in 0..n {
            let departure = T0 + w * 10_000 * MS + i * MS;
            let deadline = if i < missed { departure - 1 } else { departure + 50 * MS };
            l.observe(model, departure, deadline, 0);
        }
    }

    #[test]
    fn a_burst_of_misses_is_one_decision_per_model_and_window() {
        let mut l = Limiter::new(Settings::parse("").unwrap());
        burst(&mut l, 7, 0, 40, 12);
        l.observe(7, T0 + 5 * MS, 0, 4);
        l.observe(7, T0 + 6 * MS, 0, 13);
        burst(&mut l, 9, 0, 20, 0);
        assert!(l.close(T0 + 11_000 * MS).is_empty(), "lag_ms is 2 s");
        let out = l.close(T0 + 12_000 * MS);
        assert_eq!(
            out,
            vec![WindowMisses {
                model: 7,
                window_start_ms: 1_000_000_000,
                window_end_ms: 1_000_010_000,
                requests: 42,
                misses: 14,
                timeouts: 1,
                late: 12,
                errors: 1,
                miss_rate: 14.0 / 42.0,
            }]
        );
        assert_eq!(
            out[0].reason(),
            "model 7: 14 of 42 requests missed their SLO in one 10 s window (1 timed out, 12 late, 1 failed)"
        );
        assert!(l.close(T0 + 60_000 * MS).is_empty(), "closed once");
        assert_eq!(l.view()["quiet_windows"], 1);
    }

    #[test]
    fn windows_and_models_are_apart_and_late_reports_are_counted() {
        let mut l = Limiter::new(Settings::parse(r#"{"min_misses": 3}"#).unwrap());
        burst(&mut l, 1, 0, 10, 2);
        burst(&mut l, 1, 1, 10, 5);
        burst(&mut l, 2, 1, 10, 3);
        let out: Vec<_> = l
            .close(T0 + 22_000 * MS)
            .iter()
            .map(|b| (b.model, b.window_start_ms, b.misses))
            .collect();
        assert_eq!(out, vec![(1, 1_000_010_000, 5), (2, 1_000_010_000, 3)]);
        burst(&mut l, 1, 1, 1, 1);
        assert_eq!(l.view()["late_rows"], 1);
        assert_eq!(l.view()["misses_folded"], 8);
    }

    #[test]
    fn settings_errors_name_the_key_and_not_the_plugin() {
        assert_eq!(
            Settings::parse(r#"{"window": 5}"#).unwrap_err(),
            "unknown setting `window` (known: window_ms, lag_ms, min_misses)"
        );
        assert_eq!(
            Settings::parse(r#"{"window_ms": 5}"#).unwrap_err(),
            "setting `window_ms` must be milliseconds from 100 to 3600000, got 5"
        );
    }
}
