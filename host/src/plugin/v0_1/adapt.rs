//! What a 0.1 plugin says and gets, in 0.2 terms.
//!
//! - Its manifest: the event kinds 0.2 kept pass through; `requests`,
//!   `actions` and `mpi-samples` become declarations of the tables of those
//!   names (`tables.rs`), so their rows are taken and delivered to it.
//! - Its event batches: everything 0.2 kept passes through; the rows of those
//!   three tables are read by column name into 0.1's column groups. A column
//!   a table lacks reads as zeros; an action's `result_processed_ns` of 0 is
//!   its `result_received_ns`, as the 0.1 ingest filled it in.
//! - Its sinks: a 0.1 `sink-spec` has no default directory (`sinks.dir`).

use super::super::bindings::types as current;
use super::tables::{self, ACTIONS, MPI_SAMPLES, REQUESTS};
use super::types::{ActionColumns, EventBatch, EventKind, Manifest, MpiSampleColumns, RequestColumns};

/// A 0.1 manifest as the 0.2 one the host acts on.
pub fn manifest(m: Manifest) -> current::Manifest {
    let mut events = Vec::new();
    let mut tables = Vec::new();
    for k in m.events {
        match k {
            EventKind::Progress => events.push(current::EventKind::Progress),
            EventKind::Timings => events.push(current::EventKind::Timings),
            EventKind::Heartbeats => events.push(current::EventKind::Heartbeats),
            EventKind::Points => events.push(current::EventKind::Points),
            EventKind::NodeEvents => events.push(current::EventKind::NodeEvents),
            EventKind::Custom => events.push(current::EventKind::Custom),
            EventKind::Requests => tables.push(tables::requests()),
            EventKind::Actions => tables.push(tables::actions()),
            EventKind::MpiSamples => tables.push(tables::mpi_samples()),
        }
    }
    tables.dedup_by(|a, b| a.name == b.name);
    current::Manifest {
        version: m.version,
        description: m.description,
        samples: m.samples,
        events,
        tables,
        reads: Vec::new(),
    }
}

/// One table's columns by name, converted to the type 0.1 gave the field.
struct Columns<'a> {
    rows: &'a current::TableRows,
}

impl Columns<'_> {
    fn len(&self) -> usize {
        self.rows.origin.len()
    }

    fn get(&self, name: &str) -> Option<&current::TableColumn> {
        let i = self.rows.column_names.iter().position(|n| n == name)?;
        self.rows.columns.get(i)
    }

    fn u64s(&self, name: &str) -> Vec<u64> {
        use current::TableColumn as C;
        match self.get(name) {
            Some(C::U64s(v) | C::Timestamps(v)) => v.clone(),
            Some(C::U32s(v) | C::Strings(v)) => v.iter().map(|&x| x as u64).collect(),
            Some(C::U8s(v)) => v.iter().map(|&x| x as u64).collect(),
            Some(C::S64s(v)) => v.iter().map(|&x| x as u64).collect(),
            Some(C::S32s(v)) => v.iter().map(|&x| x as u64).collect(),
            Some(C::F64s(v)) => v.iter().map(|&x| x as u64).collect(),
            Some(C::Booleans(v)) => v.iter().map(|&x| x as u64).collect(),
            None => vec![0; self.len()],
        }
    }

    fn u32s(&self, name: &str) -> Vec<u32> {
        self.u64s(name).into_iter().map(|x| x as u32).collect()
    }

    fn u8s(&self, name: &str) -> Vec<u8> {
        self.u64s(name).into_iter().map(|x| x as u8).collect()
    }

    fn i32s(&self, name: &str) -> Vec<i32> {
        use current::TableColumn as C;
        match self.get(name) {
            Some(C::S32s(v)) => v.clone(),
            Some(C::S64s(v)) => v.iter().map(|&x| x as i32).collect(),
            _ => self.u64s(name).into_iter().map(|x| x as i32).collect(),
        }
    }

    fn f64s(&self, name: &str) -> Vec<f64> {
        use current::TableColumn as C;
        match self.get(name) {
            Some(C::F64s(v)) => v.clone(),
            Some(C::S64s(v)) => v.iter().map(|&x| x as f64).collect(),
            Some(C::S32s(v)) => v.iter().map(|&x| x as f64).collect(),
            _ => self.u64s(name).into_iter().map(|x| x as f64).collect(),
        }
    }
}

fn requests(c: &Columns, out: &mut RequestColumns) {
    out.origin.extend_from_slice(&c.rows.origin);
    out.request_id.extend(c.u64s("request_id"));
    out.user_id.extend(c.u64s("user_id"));
    out.model_id.extend(c.u64s("model_id"));
    out.slo_factor.extend(c.f64s("slo_factor"));
    out.arrival.extend(c.u64s("arrival_ns"));
    out.departure.extend(c.u64s("departure_ns"));
    out.deadline.extend(c.u64s("deadline_ns"));
    out.result.extend(c.i32s("result"));
    out.arrival_copies.extend(c.u32s("arrival_copies"));
    out.departure_copies.extend(c.u32s("departure_copies"));
    out.action_id.extend(c.u64s("action_id"));
    out.client_sent.extend(c.u64s("client_sent_ns"));
    out.client_received.extend(c.u64s("client_received_ns"));
}

fn actions(c: &Columns, out: &mut ActionColumns) {
    out.origin.extend_from_slice(&c.rows.origin);
    out.action_id.extend(c.u64s("action_id"));
    out.action_type.extend(c.u8s("action_type"));
    out.status.extend(c.i32s("status"));
    out.worker_id.extend(c.u32s("worker_id"));
    out.gpu_id.extend(c.u32s("gpu_id"));
    out.model_id.extend(c.u64s("model_id"));
    out.batch_size.extend(c.u32s("batch_size"));
    out.expected_exec_duration.extend(c.u64s("expected_exec_duration_ns"));
    out.worker_exec_duration.extend(c.u64s("worker_exec_duration_ns"));
    out.sent.extend(c.u64s("sent_ns"));
    out.expected_exec_complete.extend(c.u64s("expected_exec_complete_ns"));
    out.worker_exec_complete.extend(c.u64s("worker_exec_complete_ns"));
    out.expected_gpu_clock.extend(c.u32s("expected_gpu_clock_mhz"));
    out.gpu_clock_before.extend(c.u32s("gpu_clock_before_mhz"));
    out.gpu_clock_after.extend(c.u32s("gpu_clock_after_mhz"));
    out.copy_output_complete.extend(c.u64s("copy_output_complete_ns"));
    out.action_received.extend(c.u64s("action_received_ns"));
    out.result_sent.extend(c.u64s("result_sent_ns"));
    let received = c.u64s("result_received_ns");
    let processed = c.u64s("result_processed_ns");
    out.result_processed.extend(
        processed
            .iter()
            .zip(&received)
            .map(|(&p, &r)| if p == 0 { r } else { p }),
    );
    out.result_received.extend(received);
    out.requests_queued.extend(c.u32s("requests_queued"));
    out.copies_loaded.extend(c.u32s("copies_loaded"));
    out.requests_in_time.extend(c.u32s("requests_in_time"));
}

fn mpi_samples(c: &Columns, out: &mut MpiSampleColumns) {
    out.origin.extend_from_slice(&c.rows.origin);
    out.thread.extend(c.u32s("thread"));
    out.time.extend(c.u64s("time_ns"));
    out.state.extend(c.u8s("state"));
    out.function.extend(c.u32s("function"));
    out.callsite.extend(c.u32s("callsite"));
    out.count.extend(c.u32s("count"));
    out.period_ns.extend(c.u64s("period_ns"));
}

/// A 0.2 batch (already cut to what the plugin subscribed to) as 0.1's.
pub fn event_batch(b: current::EventBatch) -> EventBatch {
    let (mut req, mut act, mut mpi) = (None, None, None);
    for t in &b.tables {
        let c = Columns { rows: t };
        match t.name.as_str() {
            REQUESTS => requests(&c, req.get_or_insert_with(RequestColumns::default)),
            ACTIONS => actions(&c, act.get_or_insert_with(ActionColumns::default)),
            MPI_SAMPLES => mpi_samples(&c, mpi.get_or_insert_with(MpiSampleColumns::default)),
            _ => {}
        }
    }
    EventBatch {
        origins: b.origins,
        names: b.names,
        point_series: b.point_series,
        progress: b.progress,
        timings: b.timings,
        requests: req,
        actions: act,
        mpi_samples: mpi,
        heartbeats: b.heartbeats,
        points: b.points,
        node_events: b.node_events,
        custom: b.custom,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use current::TableColumn as C;

    #[test]
    fn the_three_kinds_become_table_declarations_and_the_rest_passes() {
        let m = manifest(Manifest {
            version: "1".into(),
            description: "old".into(),
            samples: None,
            events: vec![EventKind::Progress, EventKind::Requests, EventKind::MpiSamples],
        });
        assert_eq!(m.events, vec![current::EventKind::Progress]);
        let names: Vec<&str> = m.tables.iter().map(|t| t.name.as_str()).collect();
        assert_eq!(names, vec!["requests", "mpi_samples"]);
        for t in m.tables {
            crate::plugin::tables::TableDecl::from_wit(t).expect("the legacy declarations pass the host's checks");
        }
    }

    #[test]
    fn table_rows_fill_the_old_columns_by_name() {
        let b = current::EventBatch {
            names: vec!["".into(), "MPI_Barrier".into()],
            tables: vec![
                current::TableRows {
                    name: "actions".into(),
                    // Any order: read by name.
                    column_names: vec![
                        "result_processed_ns".into(),
                        "action_id".into(),
                        "result_received_ns".into(),
                    ],
                    origin: vec![0, 0],
                    columns: vec![
                        C::Timestamps(vec![0, 40]),
                        C::U64s(vec![7, 8]),
                        C::Timestamps(vec![30, 35]),
                    ],
                },
                current::TableRows {
                    name: "mpi_samples".into(),
                    column_names: vec!["state".into(), "function".into(), "count".into()],
                    origin: vec![1],
                    columns: vec![C::U8s(vec![2]), C::Strings(vec![1]), C::U32s(vec![5])],
                },
                current::TableRows {
                    name: "someone_elses".into(),
                    column_names: vec!["x".into()],
                    origin: vec![0],
                    columns: vec![C::U64s(vec![1])],
                },
            ],
            ..Default::default()
        };
        let old = event_batch(b);
        let a = old.actions.unwrap();
        assert_eq!(a.action_id, vec![7, 8]);
        assert_eq!(
            a.result_processed,
            vec![30, 40],
            "0 reads as result_received, as 0.1 had it"
        );
        assert_eq!(a.batch_size, vec![0, 0], "a column the table lacks reads as zeros");
        let m = old.mpi_samples.unwrap();
        assert_eq!((m.state[0], m.function[0], m.count[0], m.origin[0]), (2, 1, 5, 1));
        assert!(old.requests.is_none());
    }
}
