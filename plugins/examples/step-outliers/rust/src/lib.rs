//! step-outliers in Rust: flags a training step that runs more than
//! `factor` times its rank's rolling median, with a `slow-step` decision for
//! "<job>/rank-<rank>" and the counter `step_outliers.slow_steps` of its
//! job; `GET /slow` shows the slow steps and each rank's median.
//!
//! The twin of `../python/app.py`: the same settings, decisions, metric and
//! route, so `./dev bench-guests` measures the two languages doing the same
//! work. The logic is in `outliers.rs`; this file is the contract's side.

mod outliers;

use std::collections::BTreeMap;

use sonde_plugin_sdk::types::{
    Attribute, Decision, EventBatch, EventKind, HttpRequest, HttpResponse, Manifest, MetricDesc, MetricKind, Origin,
    PointBatch, StartInfo,
};
use sonde_plugin_sdk::{Host, Plugin};

pub use outliers::{Flag, Outliers, Settings};

pub struct StepOutliers {
    state: Outliers,
    /// job → the handle of its `step_outliers.slow_steps` series.
    handles: BTreeMap<String, u32>,
}

fn rank_of(o: &Origin) -> i32 {
    if o.rank >= 0 { o.rank } else { o.index.max(0) }
}

impl StepOutliers {
    fn handle(&mut self, host: &mut impl Host, job: &str) -> Result<u32, String> {
        if let Some(&h) = self.handles.get(job) {
            return Ok(h);
        }
        let desc = MetricDesc::new(
            "step_outliers.slow_steps",
            MetricKind::Counter,
            "{step}",
            "Steps that ran more than `factor` times their rank's rolling median",
        )
        .with_attributes(vec![Attribute::new("sonde.job", job)]);
        let h = host.declare_metric(&desc)?;
        self.handles.insert(job.to_string(), h);
        Ok(h)
    }
}

impl Plugin for StepOutliers {
    fn start(_host: &mut impl Host, info: StartInfo) -> Result<Self, String> {
        Ok(StepOutliers {
            state: Outliers::new(Settings::parse(&info.settings)?),
            handles: BTreeMap::new(),
        })
    }

    fn manifest(&self) -> Manifest {
        Manifest {
            version: env!("CARGO_PKG_VERSION").into(),
            description: "Flags training steps slower than factor x their rank's rolling median (Rust)".into(),
            samples: None,
            events: vec![EventKind::Timings],
            tables: Vec::new(),
            reads: Vec::new(),
        }
    }

    fn configure(&mut self, _host: &mut impl Host, settings: &str) -> Result<(), String> {
        self.state.reconfigure(Settings::parse(settings)?);
        Ok(())
    }

    fn on_events(&mut self, host: &mut impl Host, batch: EventBatch) -> Result<(), String> {
        let Some(t) = &batch.timings else { return Ok(()) };
        let wanted: Vec<bool> = batch
            .names
            .iter()
            .map(|n| self.state.settings.timings.contains(n))
            .collect();
        let mut points = PointBatch::default();
        for i in 0..t.origin.len() {
            if !wanted.get(t.name[i] as usize).copied().unwrap_or(false) {
                continue;
            }
            let Some(o) = batch.origins.get(t.origin[i] as usize) else {
                continue;
            };
            let rank = rank_of(o);
            let Some(flag) = self.state.step(&o.job, rank, t.step[i], t.start[i], t.end[i]) else {
                continue;
            };
            host.emit_decision(&Decision {
                kind: "slow-step".into(),
                subject: format!("{}/rank-{rank}", o.job),
                reason: flag.reason(),
                body: serde_json::to_string(&flag).map_err(|e| e.to_string())?,
                attributes: vec![
                    Attribute::new("sonde.job", o.job.as_str()),
                    Attribute::new("sonde.rank", rank as i64),
                ],
            });
            points.series.push(self.handle(host, &o.job)?);
            points.time.push(t.end[i]);
            points.value.push(self.state.slow[&o.job] as f64);
        }
        if !points.series.is_empty() {
            host.emit_points(&points);
        }
        Ok(())
    }

    fn on_request(&mut self, _host: &mut impl Host, request: &HttpRequest) -> HttpResponse {
        match (request.method.as_str(), request.path.as_str()) {
            ("GET", "/slow") => HttpResponse::json(200, self.state.view().to_string()),
            (method, "/slow") => HttpResponse::error(405, &format!("{method} is not allowed on /slow")),
            (method, path) => HttpResponse::error(404, &format!("no route {method} {path}; routes: GET /slow")),
        }
    }
}

sonde_plugin_sdk::export_plugin!(StepOutliers);

#[cfg(test)]
mod tests {
    use sonde_plugin_sdk::testing::FakeHost;
    use sonde_plugin_sdk::types::TimingColumns;

    use super::*;

    const MS: u64 = 1_000_000;

    fn steps(rank: i32, durations_ms: &[u64]) -> EventBatch {
        let mut t = TimingColumns::default();
        let mut at = 1_000 * MS;
        for (i, d) in durations_ms.iter().enumerate() {
            t.origin.push(0);
            t.name.push(1);
            t.start.push(at);
            t.end.push(at + d * MS);
            t.step.push(i as i64);
            at += d * MS;
        }
        EventBatch {
            origins: vec![Origin {
                job: "train".into(),
                rank,
                ..Default::default()
            }],
            names: vec!["dataloader_next".into(), "step".into()],
            timings: Some(t),
            ..Default::default()
        }
    }

    #[test]
    fn a_slow_step_is_a_decision_and_a_count() {
        let mut host = FakeHost::at(0);
        let mut p = StepOutliers::start(&mut host, StartInfo::default()).unwrap();
        assert_eq!(p.manifest().events, vec![EventKind::Timings]);
        p.on_events(&mut host, steps(2, &[100, 100, 100, 100, 100, 260, 100]))
            .unwrap();
        let d = host.decisions_of("slow-step");
        assert_eq!(d.len(), 1);
        assert_eq!(d[0].subject, "train/rank-2");
        let body: serde_json::Value = serde_json::from_str(&d[0].body).unwrap();
        assert_eq!(body["step"], 5);
        assert_eq!(body["ratio"], 2.6);
        assert_eq!(
            host.last("step_outliers.slow_steps", &[("sonde.job", "train")]),
            Some(1.0)
        );
        let slow = p.on_request(
            &mut host,
            &HttpRequest {
                method: "GET".into(),
                path: "/slow".into(),
                ..Default::default()
            },
        );
        let view: serde_json::Value = serde_json::from_slice(&slow.body).unwrap();
        assert_eq!(view["ranks"][0]["median_ns"], 100 * MS);
    }

    #[test]
    fn other_timings_are_not_steps() {
        let mut host = FakeHost::at(0);
        let mut p = StepOutliers::start(&mut host, StartInfo::default()).unwrap();
        let mut b = steps(0, &[100, 100, 100, 100, 100, 900]);
        b.names = vec!["dataloader_next".into(), "forward".into()];
        p.on_events(&mut host, b).unwrap();
        assert!(host.decisions.is_empty());
    }
}
