//! Testing a plugin natively (the `testing` feature): [`FakeHost`] stands in
//! for sonde behind the [`crate::Host`] trait.
//!
//! A plugin crate enables it for its tests only:
//!
//! ```toml
//! [dev-dependencies]
//! sonde-plugin-sdk = { workspace = true, features = ["testing"] }
//! ```
//!
//! - `fake_host`: the fake and what it records ([`Point`], [`Timer`], [`Store`]).
//! - `sink_file`: how a sink's file text is rendered, by the real host's rules.

mod fake_host;
mod sink_file;

pub use fake_host::{FakeHost, Point, Store, Timer};

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Host;
    use crate::types::{Column, MetricDesc, MetricKind, PointBatch, SinkFormat, SinkMode, SinkSpec};

    fn spec(name: &str, format: SinkFormat, mode: SinkMode, columns: &[&str]) -> SinkSpec {
        SinkSpec {
            name: name.into(),
            format,
            mode,
            columns: columns.iter().map(|c| c.to_string()).collect(),
            default_dir: None,
        }
    }

    #[test]
    fn append_sinks_write_the_header_once_and_render_like_the_host() {
        let mut h = FakeHost::default();
        let cols = ["n", "x", "s"];
        let s = h
            .open_sink(&spec("a.tsv", SinkFormat::Tsv, SinkMode::Append, &cols))
            .unwrap();
        let rows = [
            Column::U64s(vec![1, 2]),
            Column::F64s(vec![0.5, 3.0]),
            Column::Strings(vec!["a\tb".into(), "c".into()]),
        ];
        h.write_rows(s, &rows).unwrap();
        // Reopening an existing file (a reconfigure, a restart) adds no header.
        let again = h
            .open_sink(&spec("a.tsv", SinkFormat::Tsv, SinkMode::Append, &cols))
            .unwrap();
        h.write_rows(
            again,
            &[
                Column::U64s(vec![3]),
                Column::F64s(vec![1e-7]),
                Column::Strings(vec!["d".into()]),
            ],
        )
        .unwrap();
        assert_eq!(
            h.file("a.tsv"),
            Some("n\tx\ts\n1\t0.5\ta b\n2\t3\tc\n3\t0.0000001\td\n")
        );

        let c = h
            .open_sink(&spec("q.csv", SinkFormat::Csv, SinkMode::Replace, &["v"]))
            .unwrap();
        h.write_rows(c, &[Column::Strings(vec!["x,\"y\"".into()])]).unwrap();
        h.write_rows(c, &[Column::Strings(vec!["z".into()])]).unwrap();
        assert_eq!(h.file("q.csv"), Some("v\nz\n"), "replace keeps only the last write");
    }

    #[test]
    fn sinks_refuse_what_the_host_refuses() {
        let mut h = FakeHost::default();
        assert!(
            h.open_sink(&spec("../x", SinkFormat::Raw, SinkMode::Append, &[]))
                .is_err()
        );
        let raw = h
            .open_sink(&spec("p.folded", SinkFormat::Raw, SinkMode::Replace, &[]))
            .unwrap();
        assert!(h.write_rows(raw, &[Column::U64s(vec![1])]).unwrap_err().contains("raw"));
        h.write_bytes(raw, b"a 1\n").unwrap();
        h.write_bytes(raw, b"b 2\n").unwrap();
        assert_eq!(h.file("p.folded"), Some("b 2\n"));
        let t = h
            .open_sink(&spec("t.tsv", SinkFormat::Tsv, SinkMode::Append, &["a", "b"]))
            .unwrap();
        let uneven = [Column::U64s(vec![1, 2]), Column::U64s(vec![1])];
        assert!(h.write_rows(t, &uneven).unwrap_err().contains("different lengths"));
        assert!(
            h.write_rows(t, &[Column::U64s(vec![1])])
                .unwrap_err()
                .contains("2 (a, b)")
        );
        assert!(h.write_bytes(t, b"x").is_err());
        assert!(h.write_rows(99, &[]).unwrap_err().contains("no sink with handle 99"));
        h.fail_open_sink = Some("sink directory is not writable".into());
        assert_eq!(
            h.open_sink(&spec("b.tsv", SinkFormat::Tsv, SinkMode::Append, &[])),
            Err("sink directory is not writable".into())
        );
    }

    #[test]
    fn metrics_follow_the_hosts_rules_and_points_resolve() {
        let mut h = FakeHost::default();
        let cpu = |n: i64| {
            MetricDesc::new("cpu.max", MetricKind::Gauge, "1", "")
                .with_attributes(vec![crate::types::Attribute::new("cpu", n)])
        };
        let a = h.declare_metric(&cpu(0)).unwrap();
        let b = h.declare_metric(&cpu(1)).unwrap();
        assert_eq!(
            h.declare_metric(&cpu(0)),
            Ok(a),
            "same name and attributes: same handle"
        );
        assert_ne!(a, b);
        let counter = MetricDesc::new("cpu.max", MetricKind::Counter, "1", "");
        assert!(
            h.declare_metric(&counter)
                .unwrap_err()
                .contains("cpu.max was declared as")
        );
        assert!(
            h.declare_metric(&MetricDesc::new(" ", MetricKind::Gauge, "1", ""))
                .is_err()
        );

        h.emit_points(&PointBatch {
            series: vec![a, b, 7],
            time: vec![10, 10, 10],
            value: vec![0.25, 0.75, 1.0],
        });
        assert_eq!(h.dropped_points, 1, "an unknown handle is dropped and counted");
        assert_eq!(h.series("cpu.max", &[("cpu", "1")]), vec![(10, 0.75)]);
        assert_eq!(h.last("cpu.max", &[]), Some(0.75));
    }

    #[test]
    fn state_streams_timers_and_restarts() {
        let mut h = FakeHost::at(5);
        assert_eq!(h.state_append("s", b"a"), Ok(1));
        assert_eq!(h.state_append("s", b"b"), Ok(2));
        h.state_trim("s", 2);
        assert_eq!(
            h.state_append("s", b"c"),
            Ok(3),
            "trimming never reuses a sequence number"
        );
        assert_eq!(h.state_read("s", 0, 10), vec![(2, b"b".to_vec()), (3, b"c".to_vec())]);
        h.state_put("k/1", b"x").unwrap();
        h.state_put("j", b"y").unwrap();
        assert_eq!(h.state_keys("k/"), vec!["k/1".to_string()]);

        let t = h.set_timer(100, true);
        let u = h.set_timer(5, false);
        h.cancel_timer(u);
        assert_eq!(
            h.timers.get(&t),
            Some(&Timer {
                after_ms: 100,
                repeat: true
            })
        );
        assert_eq!(h.timers.len(), 1);

        h.fail_state_writes = Some("disk full".into());
        assert_eq!(h.state_put("k/2", b"z"), Err("disk full".into()));
        assert!(h.state_append("s", b"d").is_err());

        let mut r = h.restarted(9);
        assert_eq!((r.now, r.timers.len(), r.puts), (9, 0, 0));
        assert_eq!(r.state_get("k/1"), Some(b"x".to_vec()), "the store survives a restart");
        assert_eq!(r.state_append("s", b"d"), Ok(4));
        r.advance_ms(2);
        assert_eq!(r.now, 2_000_009);
    }
}
