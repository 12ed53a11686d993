//! serving-limiter in Rust: at most one `slo-misses` decision per model and
//! `window_ms` window, with the misses counted by cause (timed out, failed,
//! late against the deadline), and the gauge `serving_limiter.miss_rate`;
//! `GET /windows` shows the recent decisions. Input: the rows of the
//! `requests` event table, which the bundled clockwork plugin declares; this
//! plugin only reads it (`manifest.reads`), by column name.
//!
//! The twin of `../js/app.js`: the same settings, decisions, metric and
//! route, so `./dev bench-guests` measures the two languages doing the same
//! work. The logic is in `limiter.rs`; this file is the contract's side.

mod limiter;

use std::collections::BTreeMap;

use sonde_plugin_sdk::types::{
    Attribute, Decision, EventBatch, HttpRequest, HttpResponse, Manifest, MetricDesc, MetricKind, PointBatch, StartInfo,
};
use sonde_plugin_sdk::{Host, Plugin};

pub use limiter::{Limiter, Settings, WindowMisses};

/// The serving requests' event table, declared by the clockwork plugin.
pub const REQUESTS: &str = "requests";

pub struct ServingLimiter {
    state: Limiter,
    timer: u64,
    /// model → the handle of its miss-rate series.
    handles: BTreeMap<u64, u32>,
}

/// Checks for ended windows at least once a second (and at least once a window).
fn arm_timer(host: &mut impl Host, s: &Settings) -> u64 {
    host.set_timer(s.window_ms.min(1000), true)
}

impl ServingLimiter {
    fn handle(&mut self, host: &mut impl Host, model: u64) -> Result<u32, String> {
        if let Some(&h) = self.handles.get(&model) {
            return Ok(h);
        }
        let desc = MetricDesc::new(
            "serving_limiter.miss_rate",
            MetricKind::Gauge,
            "1",
            "Share of a window's requests that missed their SLO, per model",
        )
        .with_attributes(vec![Attribute::new("serving.model.id", model as i64)]);
        let h = host.declare_metric(&desc)?;
        self.handles.insert(model, h);
        Ok(h)
    }

    fn close_due(&mut self, host: &mut impl Host) -> Result<(), String> {
        let now = host.now();
        let bodies = self.state.close(now);
        let mut points = PointBatch::default();
        for b in bodies {
            host.emit_decision(&Decision {
                kind: "slo-misses".into(),
                subject: format!("model-{}", b.model),
                reason: b.reason(),
                body: serde_json::to_string(&b).map_err(|e| e.to_string())?,
                attributes: vec![Attribute::new("serving.model.id", b.model as i64)],
            });
            points.series.push(self.handle(host, b.model)?);
            points.time.push(b.window_end_ms * 1_000_000);
            points.value.push(b.miss_rate);
        }
        if !points.series.is_empty() {
            host.emit_points(&points);
        }
        Ok(())
    }
}

impl Plugin for ServingLimiter {
    fn start(host: &mut impl Host, info: StartInfo) -> Result<Self, String> {
        let settings = Settings::parse(&info.settings)?;
        Ok(ServingLimiter {
            timer: arm_timer(host, &settings),
            state: Limiter::new(settings),
            handles: BTreeMap::new(),
        })
    }

    fn manifest(&self) -> Manifest {
        Manifest {
            version: env!("CARGO_PKG_VERSION").into(),
            description: "At most one SLO-miss decision per model and window, with counts (Rust)".into(),
            samples: None,
            events: Vec::new(),
            tables: Vec::new(),
            reads: vec![REQUESTS.into()],
        }
    }

    fn configure(&mut self, host: &mut impl Host, settings: &str) -> Result<(), String> {
        let s = Settings::parse(settings)?;
        if s.window_ms == self.state.settings.window_ms {
            self.state.settings = s;
            return Ok(());
        }
        // Open windows were cut at the old length: start afresh at the new one.
        host.cancel_timer(self.timer);
        self.timer = arm_timer(host, &s);
        self.state = Limiter::new(s);
        Ok(())
    }

    fn on_events(&mut self, host: &mut impl Host, batch: EventBatch) -> Result<(), String> {
        for t in batch.table(REQUESTS) {
            let (model, departure, deadline, result) = (
                t.u64s("model_id")?,
                t.timestamps("departure_ns")?,
                t.timestamps("deadline_ns")?,
                t.s32s("result")?,
            );
            for i in 0..t.len() {
                self.state.observe(model[i], departure[i], deadline[i], result[i]);
            }
        }
        self.close_due(host)
    }

    fn on_timer(&mut self, host: &mut impl Host, id: u64) -> Result<(), String> {
        if id == self.timer {
            self.close_due(host)?;
        }
        Ok(())
    }

    fn on_request(&mut self, _host: &mut impl Host, request: &HttpRequest) -> HttpResponse {
        match (request.method.as_str(), request.path.as_str()) {
            ("GET", "/windows") => HttpResponse::json(200, self.state.view().to_string()),
            (method, "/windows") => HttpResponse::error(405, &format!("{method} is not allowed on /windows")),
            (method, path) => HttpResponse::error(404, &format!("no route {method} {path}; routes: GET /windows")),
        }
    }
}

sonde_plugin_sdk::export_plugin!(ServingLimiter);

#[cfg(test)]
mod tests {
    use sonde_plugin_sdk::column;
    use sonde_plugin_sdk::testing::FakeHost;
    use sonde_plugin_sdk::types::{ColumnDefault, ColumnType, TableDecl, Value};

    use super::*;

    const MS: u64 = 1_000_000;
    const T0: u64 = 1_000_000_000 * MS;

    /// The columns this plugin reads, by name (clockwork declares more, in its own order).
    fn requests_decl() -> TableDecl {
        use ColumnDefault::{Required, Zero};
        use ColumnType::*;
        TableDecl::new(
            REQUESTS,
            "",
            vec![
                column("request_id", U64, Required),
                column("model_id", U64, Required),
                column("departure_ns", Timestamp, Required),
                column("deadline_ns", Timestamp, Zero),
                column("result", S32, Zero),
            ],
        )
    }

    fn requests(model: u64, departures: &[u64], late: usize) -> EventBatch {
        let decl = requests_decl();
        let mut b = EventBatch {
            origins: vec![Default::default()],
            ..Default::default()
        };
        for (i, &d) in departures.iter().enumerate() {
            let deadline = if i < late { d - 1 } else { d + MS };
            let fields = [
                ("request_id", Value::Int(i as i64)),
                ("model_id", Value::Int(model as i64)),
                ("departure_ns", Value::Int(d as i64)),
                ("deadline_ns", Value::Int(deadline as i64)),
            ];
            b.push_row(&decl, 0, &fields).unwrap();
        }
        b
    }

    #[test]
    fn a_window_of_misses_is_decided_when_the_timer_finds_it_ended() {
        let mut host = FakeHost::at(T0);
        let mut p = ServingLimiter::start(&mut host, StartInfo::default()).unwrap();
        assert_eq!(host.last_timer, p.timer);
        let departures: Vec<u64> = (0..30).map(|i| T0 + i * 100 * MS).collect();
        p.on_events(&mut host, requests(3, &departures, 20)).unwrap();
        assert!(host.decisions.is_empty(), "the window is still open");
        host.now = T0 + 12_500 * MS;
        p.on_timer(&mut host, p.timer).unwrap();
        let d = host.decisions_of("slo-misses");
        assert_eq!(d.len(), 1);
        assert_eq!(d[0].subject, "model-3");
        let body: serde_json::Value = serde_json::from_str(&d[0].body).unwrap();
        assert_eq!((body["requests"].as_u64(), body["late"].as_u64()), (Some(30), Some(20)));
        assert_eq!(
            host.last("serving_limiter.miss_rate", &[("serving.model.id", "3")]),
            Some(20.0 / 30.0)
        );
        p.on_timer(&mut host, p.timer).unwrap();
        assert_eq!(host.decisions.len(), 1, "one decision per window");
    }
}
