//! The step-outliers logic: which training steps ran more than `factor`
//! times their rank's rolling median. The same rules as
//! `../python/outliers.py`, decision for decision (integer medians, the
//! ratio as one f64 division), so the two plugins can be measured side by
//! side on the same input.

use std::collections::{BTreeMap, VecDeque};

use serde::Serialize;
use sonde_plugin_sdk::settings;

/// The slow steps the route shows, newest last.
const KEEP_FLAGGED: usize = 100;

const KNOWN: [&str; 4] = ["window", "factor", "min_steps", "timings"];

#[derive(Clone, Debug, PartialEq)]
pub struct Settings {
    /// Steps per (job, rank) the median is taken over.
    pub window: usize,
    /// A step longer than `factor` × the median is slow.
    pub factor: f64,
    /// Steps a rank needs before its steps are judged.
    pub min_steps: usize,
    /// Timing names that are training steps.
    pub timings: Vec<String>,
}

impl Settings {
    /// Reads the settings JSON; errors name the key (the host names the plugin).
    pub fn parse(json: &str) -> Result<Settings, String> {
        let s = settings::parse_object("step-outliers", json, &KNOWN)?;
        let window = s.u64_in("window", 3..=1000, "an integer from 3 to 1000")?.unwrap_or(20) as usize;
        let factor = s
            .read("factor", "a number above 1, at most 100", |v| {
                v.as_f64().filter(|f| *f > 1.0 && *f <= 100.0)
            })?
            .unwrap_or(2.0);
        let min_steps = s
            .u64_in(
                "min_steps",
                1..=window as u64,
                &format!("an integer from 1 to the window ({window})"),
            )?
            .unwrap_or(5) as usize;
        let timings = s
            .read("timings", "a non-empty list of timing names", |v| {
                let names: Option<Vec<String>> = v.as_array()?.iter().map(|n| n.as_str().map(str::to_string)).collect();
                names.filter(|n| !n.is_empty())
            })?
            .unwrap_or_else(|| vec!["step".into(), "train_batch".into()]);
        Ok(Settings {
            window,
            factor,
            min_steps,
            timings,
        })
    }
}

/// One slow step: the decision's body.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Flag {
    pub job: String,
    pub rank: i32,
    pub step: i64,
    pub duration_ns: u64,
    pub median_ns: u64,
    pub ratio: f64,
    pub window: usize,
}

impl Flag {
    /// The decision's sentence.
    pub fn reason(&self) -> String {
        format!(
            "step {} of {} rank {} took {:.0} ms, {:.1}x its rolling median of {:.0} ms (last {} steps)",
            self.step,
            self.job,
            self.rank,
            self.duration_ns as f64 / 1e6,
            self.ratio,
            self.median_ns as f64 / 1e6,
            self.window
        )
    }
}

/// The median of integer durations; between two middles, their mean rounded down.
pub fn median_ns(durations: &VecDeque<u64>) -> u64 {
    let mut s: Vec<u64> = durations.iter().copied().collect();
    s.sort_unstable();
    let n = s.len();
    if n % 2 == 1 {
        s[n / 2]
    } else {
        (s[n / 2 - 1] + s[n / 2]) / 2
    }
}

pub struct Outliers {
    pub settings: Settings,
    /// (job, rank) → the last `window` step durations (ns).
    ranks: BTreeMap<(String, i32), VecDeque<u64>>,
    /// (job, rank) → steps seen, for steps reported without an index.
    seen: BTreeMap<(String, i32), i64>,
    flagged: VecDeque<Flag>,
    /// job → slow steps so far (the counter the plugin emits).
    pub slow: BTreeMap<String, u64>,
    malformed: u64,
}

impl Outliers {
    pub fn new(settings: Settings) -> Outliers {
        Outliers {
            settings,
            ranks: BTreeMap::new(),
            seen: BTreeMap::new(),
            flagged: VecDeque::new(),
            slow: BTreeMap::new(),
            malformed: 0,
        }
    }

    /// New settings; each rank keeps its most recent durations.
    pub fn reconfigure(&mut self, settings: Settings) {
        for d in self.ranks.values_mut() {
            while d.len() > settings.window {
                d.pop_front();
            }
        }
        self.settings = settings;
    }

    /// One step's timing; the flag when it is slow against the steps before it.
    pub fn step(&mut self, job: &str, rank: i32, step: i64, start_ns: u64, end_ns: u64) -> Option<Flag> {
        if end_ns < start_ns {
            self.malformed += 1;
            return None;
        }
        let key = (job.to_string(), rank);
        let seen = self.seen.entry(key.clone()).or_insert(0);
        let index = if step >= 0 { step } else { *seen };
        *seen += 1;
        let durations = self.ranks.entry(key).or_default();
        let duration = end_ns - start_ns;
        let mut flag = None;
        if durations.len() >= self.settings.min_steps {
            let median = median_ns(durations);
            if median > 0 && duration as f64 > self.settings.factor * median as f64 {
                let f = Flag {
                    job: job.to_string(),
                    rank,
                    step: index,
                    duration_ns: duration,
                    median_ns: median,
                    ratio: duration as f64 / median as f64,
                    window: durations.len(),
                };
                if self.flagged.len() == KEEP_FLAGGED {
                    self.flagged.pop_front();
                }
                self.flagged.push_back(f.clone());
                *self.slow.entry(job.to_string()).or_insert(0) += 1;
                flag = Some(f);
            }
        }
        if durations.len() == self.settings.window {
            durations.pop_front();
        }
        durations.push_back(duration);
        flag
    }

    /// The body of `GET /slow`.
    pub fn view(&self) -> serde_json::Value {
        let ranks: Vec<serde_json::Value> = self
            .ranks
            .iter()
            .filter(|(_, d)| !d.is_empty())
            .map(|((job, rank), d)| {
                serde_json::json!({
                    "job": job,
                    "rank": rank,
                    "steps": self.seen.get(&(job.clone(), *rank)).copied().unwrap_or(0),
                    "median_ns": median_ns(d),
                })
            })
            .collect();
        serde_json::json!({
            "slow": self.flagged,
            "slow_per_job": self.slow,
            "ranks": ranks,
            "malformed": self.malformed,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    fn run(o: &mut Outliers, job: &str, rank: i32, durations_ms: &[u64], first_step: i64) -> Vec<Flag> {
        let mut t = 0;
        let mut flags = Vec::new();
        for (i, d) in durations_ms.iter().enumerate() {
            flags.extend(o.step(job, rank, first_step + i as i64, t, t + d * MS));
            t += d * MS;
        }
        flags
    }

    #[test]
    fn a_step_over_twice_the_median_is_flagged_once() {
        let mut o = Outliers::new(Settings::parse(r#"{"window": 10}"#).unwrap());
        let flags = run(&mut o, "train", 1, &[100, 104, 98, 101, 99, 350, 102, 100], 0);
        assert_eq!(flags.len(), 1);
        let f = &flags[0];
        assert_eq!((f.job.as_str(), f.rank, f.step), ("train", 1, 5));
        assert_eq!((f.median_ns, f.ratio, f.window), (100 * MS, 3.5, 5));
        assert!(
            f.reason().contains("3.5x its rolling median of 100 ms"),
            "{}",
            f.reason()
        );
        assert_eq!(o.view()["slow_per_job"], serde_json::json!({"train": 1}));
    }

    #[test]
    fn steps_just_under_the_factor_and_too_early_steps_are_not() {
        let mut o = Outliers::new(Settings::parse("").unwrap());
        assert!(run(&mut o, "train", 0, &[100, 900, 100, 100, 100], 0).is_empty());
        assert!(run(&mut o, "train", 0, &[100, 199, 100], 5).is_empty());
    }

    #[test]
    fn ranks_have_their_own_medians_and_the_window_rolls() {
        let mut o = Outliers::new(Settings::parse(r#"{"min_steps": 3}"#).unwrap());
        run(&mut o, "a", 0, &[100; 5], 0);
        run(&mut o, "a", 1, &[300; 5], 0);
        assert_eq!(run(&mut o, "a", 0, &[350], 5).len(), 1);
        assert!(run(&mut o, "a", 1, &[350], 5).is_empty());
        let mut o = Outliers::new(Settings::parse(r#"{"window": 3, "min_steps": 3}"#).unwrap());
        run(&mut o, "j", 0, &[100, 100, 100, 300, 300, 300], 0);
        assert!(run(&mut o, "j", 0, &[500], 6).is_empty(), "500 < 2 x 300");
    }

    #[test]
    fn settings_errors_name_the_key_and_not_the_plugin() {
        for (json, want) in [
            (
                r#"{"windw": 3}"#,
                "unknown setting `windw` (known: window, factor, min_steps, timings)",
            ),
            (
                r#"{"window": 2}"#,
                "setting `window` must be an integer from 3 to 1000, got 2",
            ),
            (
                r#"{"window": 4, "min_steps": 5}"#,
                "setting `min_steps` must be an integer from 1 to the window (4), got 5",
            ),
            (
                r#"{"timings": []}"#,
                "setting `timings` must be a non-empty list of timing names, got []",
            ),
        ] {
            assert_eq!(Settings::parse(json).unwrap_err(), want);
        }
    }
}
